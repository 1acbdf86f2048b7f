"""The family's constants (tile geometry, numerics bit patterns, resource limits), `Config` (one kernel of the
family), `FAMILY` (the shipped variants) and the kernarg loads (from sage_co/abi.py ATTENTION_FWD_ARGS)."""
from __future__ import annotations

import struct
from dataclasses import dataclass

from sage_co import abi
from sage_co import family
from sage_co.rdna4 import MAX_WAVES_PER_SIMD, SGPR_LIMIT, VGPR_GRANULE, VGPR_LIMIT, VGPRS_PER_SIMD  # noqa: F401

ARGS = abi.ATTENTION_FWD_ARGS
KARG_SGPR = 4                  # first SGPR of the kernarg struct: after s[0:1], 4-aligned for s_load_b128/b256
TILE_Q = abi.QUERY_TILE        # queries per workgroup (grid x = seq_pad / TILE_Q)
WAVES = abi.ATTENTION_WAVES    # block = WAVES wave32
WAVE_Q = abi.WAVE_QUERIES      # queries per wave (one 16-column WMMA fragment)
TILE_K = abi.KEY_TILE          # keys per loop step
WMMA_N = 16                    # WMMA fragments are 16 x 16 (docs/rdna4.md §WMMA)
CHUNKS = TILE_K // WMMA_N      # S^T chunks of 16 keys
SCALE_BLOCK = abi.SCALE_BLOCK  # tokens per q/k scale
THREADS = WAVES * abi.WAVE_SIZE
V_STAGE_ROWS = THREADS // 4     # V^T rows one staging load of all threads covers (4 chunks of 16 B per row)
LANE_HALF = 16                 # lanes 0-15 / 16-31: v_permlanex16 exchanges the halves
B128 = 16                      # bytes of one ds_load_b128 / global_load_b128 (also the LDS swizzle unit)
F32_BYTES = 4
OUT_BYTES = abi.OUT_BYTES      # out_dtype -> bytes per output element (bf16 / fp16: 2, fp32: 4)

# numerics constants (bit patterns)
def _f32_bits(x: float) -> str:
    return f"0x{struct.unpack('<I', struct.pack('<f', x))[0]:08x}"


# docs/numerics.md §Attention arithmetic model (the values live in sage_co/abi.py): p = exp2(s - (m - P_OFF)) carries
# the fp8 range (p <= 2^8 for every m), so P converts to fp8 without a multiply; the one-FMA exp argument while
# q_scale * k_scale <= FMA_MAX_QK_SCALE, else the exact form
F32_P_OFF = _f32_bits(abi.P_OFF)
F32_FMA_MAX_QK_SCALE = _f32_bits(abi.FMA_MAX_QK_SCALE)
MAGIC_INT = _f32_bits(abi.MAGIC)          # 0x4b400000: int32 x + MAGIC_INT has the float bits of MAGIC + x
F32_NEG_INF = "0xff800000"
F32_M_INIT = _f32_bits(abi.M_INIT)        # 0xff7fffff = -FLT_MAX: the running max's start (no -inf guards)
F32_NEG_TAU = _f32_bits(-abi.RESCALE_TAU)  # the thresholded rescale: m moves when m_old - m_cand < -TAU
F32_LN2 = "0x3f317218"                    # float32(ln 2)
# the "exp2_valu" schedule's polynomial exp2 (sage_co/abi.py EXP2_VALU_*): the clamp and the coefficients
F32_EXP2_VALU_MIN = _f32_bits(abi.EXP2_VALU_MIN)
F32_EXP2_VALU_C1 = _f32_bits(abi.EXP2_VALU_C1)
F32_EXP2_VALU_C2 = _f32_bits(abi.EXP2_VALU_C2)
BF16_QNAN32 = "0x7fc00000"                # a NaN output becomes bf16 0x7fc0 (as the HIP kernel)
BF16_ROUND = "0x7fff"
HI16_MASK = "0xffff0000"
LO16_MASK = "0xffff"
FP16_QNAN = "0x7e00"                      # a NaN output becomes fp16 0x7e00 (as the HIP kernel)
FP32_QNAN = "0x7fc00000"                  # fp32 output: a NaN becomes 0x7fc00000 (as the HIP kernel); no saturation
# the output saturates at +-the dtype's largest finite value (docs/numerics.md §Finite range), as fp32 bit patterns
OUT_MAX = {"bf16": ("0xff7f0000", "0x7f7f0000"), "fp16": ("0xc77fe000", "0x477fe000")}   # (-max, +max)
PERMX16_SEL_LO, PERMX16_SEL_HI = "0x76543210", "0xfedcba98"   # v_permlanex16: lane l reads lane l ^ 16

RING = 10                                 # LDS fragment ring: ds_load_b128 destinations (4 VGPRs each)
RING_PV16_D128 = 6                        # pv fp16, head dim 128: V^T staging takes 16 more VGPRs, the ring gives them
# head dim 256 (KernelState.WIDE; docs/performance.md §Head dim 256): O^T is 128 VGPRs, so one S^T set, one staging
# set (K then V^T), Q^T in LDS read through its own 2-slot ring, no MAGIC registers (S^T starts as MAGIC_INT by
# v_mov instead), and a 6-slot fragment ring
RING_D256 = 6
QRING_D256 = 2                            # Q^T fragment slots (fragment i+1 loads while d-group i runs)

WMMA_QK = "v_wmma_i32_16x16x16_iu8"
WMMA_PV = "v_wmma_f32_16x16x16_fp8_fp8"
WMMA_PV16 = "v_wmma_f32_16x16x16_f16"     # pv fp16: A = V^T (8 halves), B = P^T (8 halves), fp32 C/D
V16_ROW_PAD = 16                          # pv fp16: V^T LDS rows of 128 B + 16 B (144 B: 8 lanes of a ds_load_b128
                                          # at rows r..r+7 hit 8 distinct 16-byte bank groups, 9r mod 16 distinct)
IU8_SIGNED = "neg_lo:[1,1,0]"             # docs/rdna4.md §WMMA: neg_lo bit0/bit1 = A/B signed

# VGPR_LIMIT, SGPR_LIMIT, VGPR_GRANULE, VGPRS_PER_SIMD, MAX_WAVES_PER_SIMD: sage_co/rdna4.py (imported above)
INST_PREF_SIZE = 63                       # instruction prefetch (x 128 B): the maximum the field holds


def log2(n: int) -> int:
    """The shift that multiplies by n (n a power of two; anything else is a generator bug)."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"{n} is not a power of two")
    return n.bit_length() - 1


@dataclass(frozen=True)
class Config:
    """One kernel of the family: the padded head dim (64, 128 or 256), the output dtype ("bf16", "fp16" or "fp32"), the
    P.V input type ("fp8" or "fp16") and the exp2 schedule (sage_co/family.py ATTENTION_SCHEDULES). The manifest key
    columns of the symbol (head_dim, out_dtype, pv_dtype, schedule) are exactly these fields."""
    head_dim: int = abi.HEAD_DIM
    out_dtype: str = "bf16"
    pv_dtype: str = "fp8"
    schedule: str = family.DEFAULT_SCHEDULE

    def __post_init__(self):
        _ = self.variant   # sage_co.family.AttentionVariant raises ValueError for a combination outside the axes

    @property
    def variant(self) -> family.AttentionVariant:
        """This kernel's entry in the family declaration (sage_co/family.py): its symbol and manifest keys."""
        return family.AttentionVariant("asm", self.head_dim, self.out_dtype, self.pv_dtype, self.schedule)

    @property
    def tag(self) -> str:
        return self.variant.tag

    @property
    def symbol(self) -> str:
        return self.variant.symbol


# the variants the shipped code object holds, in symbol order: sage_co/family.py ATTENTION_ASM (the family declared
# once; the manifest rows of gfx1201_sage_attention_asm come from the same tuple)
FAMILY = tuple(Config(v.head_dim, v.out_dtype, v.pv_dtype, v.schedule) for v in family.ATTENTION_ASM)


# The kernarg fields preloaded into SGPRs (dword i in SGPR KARG_SGPR + i): everything before the attn_mask fields.
# Those (mask_bits .. mask_stride_s) are loaded by the prologue into SGPRs the loop no longer needs (the SGPR file
# is full: docs/rdna4.md §Occupancy), and only read with FLAG_MASK.
PRELOAD_BYTES = ARGS.by_name["mask_bits"].offset
PRELOADED = tuple(f for f in ARGS.fields if f.offset < PRELOAD_BYTES)


def kernarg_loads(base_sgpr: int) -> list[tuple[str, int, int, str]]:
    """The s_load instructions that bring the preloaded kernarg fields into SGPRs base_sgpr.. (dword i of the
    struct in SGPR base_sgpr + i): (mnemonic, first SGPR, byte offset, fields covered), widest loads first
    (b256, b128, b64, b32; SMEM destinations stay aligned because every chunk size divides the previous)."""
    dwords = PRELOAD_BYTES // 4
    out, at = [], 0
    while at < dwords:
        n = next(w for w in (8, 4, 2, 1) if w <= dwords - at)
        lo, hi = 4 * at, 4 * (at + n)
        names = ", ".join(f.name for f in ARGS.fields if lo <= f.offset < hi)
        out.append((f"s_load_b{32 * n}", base_sgpr + at, lo, names))
        at += n
    return out
