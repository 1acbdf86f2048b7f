#!/usr/bin/env python3
"""Generator of the hand-scheduled SageAttention forward kernels (the "asm" variant of sage_attention_fwd).

`python gen_sage_attention_asm.py` prints the assembly of the whole family (build_asm.py assembles it and
commits the text as asm_src/gfx1201_sage_attention_asm.s). `build(cfg)` returns the assembly of one kernel
symbol for one `Config`; `build_family()` the code object with every shipped variant. Each kernel computes
exactly what asm_src/gfx1201_sage_attention.hip computes, with the same kernarg struct (sage_co/abi.py) and
launch geometry, in the same per-row operation order (bitwise equal output on the emulator); what differs is
the schedule. The header of the emitted .s (family_header and variant_header, filled from the constants) documents layout,
registers and schedule.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))  # the repository root: sage_co.abi (torch-free) holds the ABI
from asmdsl import Asm, KernelArg, Op, RegFile, WaitCounter, amdhsa_kernel, code_object, pair_vopd  # noqa: E402
from sage_co import abi  # noqa: E402

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
OUT_BYTES = 2                  # bf16 / fp16 output elements

# numerics constants (bit patterns)
F32_448 = "0x43e00000"                    # fp8 e4m3 max: p8 = fp8(p * 448)
MAGIC_INT = "0x4b400000"                  # float 1.5 * 2^23: int32 x + MAGIC_INT has float bits 1.5*2^23 + x
F32_NEG_INF = "0xff800000"
F32_LN2 = "0x3f317218"                    # float32(ln 2)
BF16_QNAN32 = "0x7fc00000"                # a NaN output becomes bf16 0x7fc0 (as the HIP kernel)
BF16_ROUND = "0x7fff"
HI16_MASK = "0xffff0000"
LO16_MASK = "0xffff"
FP16_QNAN = "0x7e00"                      # a NaN output becomes fp16 0x7e00 (as the HIP kernel)
# the output saturates at +-the dtype's largest finite value (docs/numerics.md §Finite range), as fp32 bit patterns
OUT_MAX = {"bf16": ("0xff7f0000", "0x7f7f0000"), "fp16": ("0xc77fe000", "0x477fe000")}   # (-max, +max)
PERMX16_SEL_LO, PERMX16_SEL_HI = "0x76543210", "0xfedcba98"   # v_permlanex16: lane l reads lane l ^ 16

RING = 10                                 # LDS fragment ring: ds_load_b128 destinations (4 VGPRs each)
RING_PV16_D128 = 6                        # pv fp16, head dim 128: V^T staging takes 16 more VGPRs, the ring gives them

WMMA_QK = "v_wmma_i32_16x16x16_iu8"
WMMA_PV = "v_wmma_f32_16x16x16_fp8_fp8"
WMMA_PV16 = "v_wmma_f32_16x16x16_f16"     # pv fp16: A = V^T (8 halves), B = P^T (8 halves), fp32 C/D
V16_ROW_PAD = 16                          # pv fp16: V^T LDS rows of 128 B + 16 B (144 B: 8 lanes of a ds_load_b128
                                          # at rows r..r+7 hit 8 distinct 16-byte bank groups, 9r mod 16 distinct)
IU8_SIGNED = "neg_lo:[1,1,0]"             # docs/rdna4.md §WMMA: neg_lo bit0/bit1 = A/B signed

VGPR_LIMIT = 256                          # wave32 VGPRs per wave (docs/rdna4.md §Occupancy)
SGPR_LIMIT = 106                          # addressable SGPRs; VCC sits above them (docs/rdna4.md §Entry)
VGPR_GRANULE = 24                         # wave32 VGPR allocation granule (docs/rdna4.md §Occupancy)
VGPRS_PER_SIMD = 1536
MAX_WAVES_PER_SIMD = 16
INST_PREF_SIZE = 63                       # instruction prefetch (x 128 B): the maximum the field holds


def log2(n: int) -> int:
    """The shift that multiplies by n (n a power of two; anything else is a generator bug)."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"{n} is not a power of two")
    return n.bit_length() - 1


@dataclass(frozen=True)
class Config:
    """One kernel of the family: the padded head dim (64 or 128), the output dtype ("bf16" or "fp16") and the P.V
    input type ("fp8" or "fp16"). The manifest key columns of the symbol (head_dim, out_dtype, pv_dtype) are
    exactly these fields."""
    head_dim: int = abi.HEAD_DIM
    out_dtype: str = "bf16"
    pv_dtype: str = "fp8"

    def __post_init__(self):
        if self.head_dim not in abi.HEAD_DIMS_NATIVE or self.out_dtype not in abi.OUT_DTYPES or \
                self.pv_dtype not in abi.PV_DTYPES:
            raise ValueError(f"Config{(self.head_dim, self.out_dtype, self.pv_dtype)}: head_dim must be one of "
                             f"{abi.HEAD_DIMS_NATIVE}, out_dtype one of {abi.OUT_DTYPES}, pv_dtype one of "
                             f"{abi.PV_DTYPES}")

    @property
    def tag(self) -> str:
        return f"d{self.head_dim}_{self.out_dtype}" + ("_pv16" if self.pv_dtype == "fp16" else "")

    @property
    def symbol(self) -> str:
        return f"gfx1201_sage_attention_fwd_asm_{self.tag}"


# the variants the shipped code object holds (asm_src/kernels.toml lists the same symbols with their keys)
FAMILY = tuple(Config(d, t, pv) for pv in abi.PV_DTYPES for d in reversed(abi.HEAD_DIMS_NATIVE) for t in abi.OUT_DTYPES)


def kernarg_loads(base_sgpr: int) -> list[tuple[str, int, int, str]]:
    """The s_load instructions that bring the whole kernarg struct into SGPRs base_sgpr.. (dword i of the
    struct in SGPR base_sgpr + i): (mnemonic, first SGPR, byte offset, fields covered), widest loads first
    (b256, b128, b64, b32; SMEM destinations stay aligned because every chunk size divides the previous)."""
    dwords = ARGS.size // 4
    out, at = [], 0
    while at < dwords:
        n = next(w for w in (8, 4, 2, 1) if w <= dwords - at)
        lo, hi = 4 * at, 4 * (at + n)
        names = ", ".join(f.name for f in ARGS.fields if lo <= f.offset < hi)
        out.append((f"s_load_b{32 * n}", base_sgpr + at, lo, names))
        at += n
    return out


# ---------------------------------------------------------------------------------------------- VALU helpers
def vmul(d, s0, s1):
    return Op.vop2("v_mul_f32", d, s0, s1)


def vadd(d, s0, s1):
    return Op.vop2("v_add_f32", d, s0, s1)


def vsub(d, s0, s1):
    return Op.vop2("v_sub_f32", d, s0, s1)


def vmax(d, s0, s1):
    return Op.vop2("v_max_num_f32", d, s0, s1)




# ---------------------------------------------------------------------------------------------- WMMA stream
class Frag:
    def __init__(self, key, load):
        self.key, self.load = key, load        # load(asm, regs) emits the ds_load
        self.uses: list[int] = []


class Matrix:
    """The WMMA stream of one loop iteration: the WMMAs in issue order and the fragments they read.
    Fragment k goes to ring slot k % RING; its ds_load is issued as soon as the slot's previous fragment has
    had its last WMMA (docs/rdna4.md §Waits: loads ahead of use), and a WMMA waits with s_wait_dscnt only for
    the fragment it needs (DScnt completes in order)."""

    def __init__(self, ring):
        self.ring = ring                             # the VGPRs of the fragment slots (4 each)
        self.slots = ring.n // 4
        self.frags: list[Frag] = []
        self.wmmas: list[tuple[int, object]] = []   # (frag index, emit(asm, frag_regs))
        self.index: dict = {}

    def frag(self, key, load) -> int:
        if key not in self.index:
            self.index[key] = len(self.frags)
            self.frags.append(Frag(key, load))
        return self.index[key]

    def wmma(self, fk: int, emit) -> None:
        self.frags[fk].uses.append(len(self.wmmas))
        self.wmmas.append((fk, emit))

    def slot(self, fk: int):
        return self.ring[4 * (fk % self.slots):4 * (fk % self.slots) + 4]


class Weaver:
    """Emits a Matrix phase by phase, fragment loads as early as the ring allows, VALU issue slots spread
    evenly between the WMMAs."""

    def __init__(self, a: Asm, mx_: Matrix, ds: WaitCounter):
        self.a, self.mx, self.ds = a, mx_, ds
        self.next_load = 0
        self.emitted = 0        # WMMAs emitted so far

    def _loads(self):
        frags = self.mx.frags
        while self.next_load < len(frags):
            k = self.next_load
            if k >= self.mx.slots:
                prev = frags[k - self.mx.slots]
                if not prev.uses or max(prev.uses) >= self.emitted:
                    return
            frags[k].load(self.a, self.mx.slot(k))
            self.ds.issue(("frag", k))
            self.next_load += 1

    def prefetch(self):
        self._loads()

    def phase(self, n_wmma: int, items: list) -> None:
        """Emit the next n_wmma WMMAs with `items` (Issue objects or raw text lines) spread between them."""
        units = items
        n = len(units)
        cut = [round(n * (w + 1) / (n_wmma + 1)) for w in range(n_wmma + 1)] if n_wmma else [n]
        u = 0
        for w in range(n_wmma):
            for item in units[u:cut[w]]:
                self._emit_item(item)
            u = cut[w]
            fk, emit = self.mx.wmmas[self.emitted]
            self.ds.wait_for(("frag", fk))
            emit(self.a, self.mx.slot(fk))
            self.emitted += 1
            self._loads()
        for item in units[u:]:
            self._emit_item(item)

    def _emit_item(self, item):
        if isinstance(item, str):
            self.a.op(item)
        else:
            self.a.issue(item)


# ---------------------------------------------------------------------------------------------- softmax ops


# ---------------------------------------------------------------------------------------------- the kernel
class AttentionKernel:
    """The text of one kernel symbol for one Config. Registers are allocated per instance (nothing global),
    and every method emits one part of the kernel into an Asm buffer."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.SYMBOL = cfg.symbol
        self.HEAD_DIM = cfg.head_dim
        self.D_TILES = cfg.head_dim // WMMA_N            # O^T d-tiles of 16 channels (= 16-byte chunks per K row)
        self.QF = cfg.head_dim // 32                     # Q^T fragments of 16 B per lane (lane half: head_dim/2 B)
        self.HCOL = self.D_TILES // 2                    # 16-byte K-row chunks one lane half reads
        self.K_TILE_BYTES = TILE_K * cfg.head_dim        # int8 [TILE_K keys][head_dim d]
        self.PV16 = cfg.pv_dtype == "fp16"
        self.V_BYTES = 2 if self.PV16 else 1             # bytes per V element
        self.RING = RING_PV16_D128 if self.PV16 and cfg.head_dim == 128 else RING
        # V^T rows: fp8 TILE_K bytes (XOR swizzle); fp16 2*TILE_K bytes + V16_ROW_PAD (padding instead of XOR, so
        # every thread's staging chunks and every lane's fragments sit at immediate offsets from one address)
        self.V_ROW_BYTES = TILE_K * self.V_BYTES + (V16_ROW_PAD if self.PV16 else 0)
        self.V_TILE_BYTES = cfg.head_dim * self.V_ROW_BYTES   # [head_dim d][TILE_K keys]
        self.LDS_KBUF = (0, self.K_TILE_BYTES)
        # pv fp16: ONE V^T tile (vbuf0 == vbuf1): V^T(t+1) is stored after the end-of-step barrier and published by
        # a second one, so the LDS (2 K tiles + 1 V^T tile) leaves room for 3 workgroups per WGP instead of 2
        self.SINGLE_V = self.PV16
        self.LDS_VBUF = (2 * self.K_TILE_BYTES, 2 * self.K_TILE_BYTES + (0 if self.SINGLE_V else self.V_TILE_BYTES))
        self.LDS_BYTES = 2 * self.K_TILE_BYTES + (1 if self.SINGLE_V else 2) * self.V_TILE_BYTES
        self.K_ROW_BYTES = cfg.head_dim                  # bytes per key row (head_dim / 16 chunks)
        self.STAGE_LOADS = (self.K_TILE_BYTES // THREADS) // B128   # b128 global loads per thread per tile
        # V^T staging: fp8 as K (STAGE_LOADS chunks, rows u*32 apart); fp16 V16_LOADS consecutive chunks of one row
        self.V16_LOADS = (cfg.head_dim * TILE_K * 2 // THREADS) // B128
        self.V_LOADS = self.V16_LOADS if self.PV16 else self.STAGE_LOADS
        self.STAGE_STEP = THREADS * B128                 # bytes between a thread's successive staging chunks
        # the smallest real head dim this D_pad serves (abi.d_pad): d-tiles below it are always stored
        smaller = [d for d in abi.HEAD_DIMS_NATIVE if d < cfg.head_dim]
        self.MIN_HEAD_DIM = (max(smaller) if smaller else 0) + abi.HEAD_DIM_STEP
        # fragments of one loop iteration
        # QK^T: frag (i, c) = 16 bytes of K row 32*(r/8) + 8c + r%8 at d-group i (A of two d-steps)
        # PV:   frag (i, dt) = 16 bytes of V^T row 16dt + r, keys 32h + 16i.. (A of chunks 2i, 2i+1)
        self.QK_ORDER = [(i, half, c) for i in range(self.QF) for half in range(2) for c in range(CHUNKS)]
        self.PV_ORDER = [(i, grp, half, dt) for i in range(2) for grp in range(self.D_TILES // 4) for half in range(2)
                         for dt in range(4 * grp, 4 * grp + 4)]
        # pv fp16: frag (c, dt) = 16 bytes (keys 32h + 8c.., 8 halves) of V^T row 16dt + r: A of chunk c alone
        self.PV16_ORDER = [(c, dt) for c in range(CHUNKS) for dt in range(self.D_TILES)]
        self.N_PV = len(self.PV16_ORDER) if self.PV16 else len(self.PV_ORDER)
        self._allocate_vgprs()
        self._allocate_sgprs()

    def _allocate_vgprs(self) -> None:
        V = self.V = RegFile("v", VGPR_LIMIT)
        self.tid = V.fixed("tid", 0, note="work-item id x (entry state, docs/rdna4.md §Entry); lane math reads it")
        V.next = 1
        # lane constants
        self.k_rd = V.alloc("k_rd", self.QF, note="LDS byte address of K fragment d-group i (chunk c adds 8 rows)")
        if self.PV16:
            self.v_rd = V.alloc("v_rd", 1, note=f"LDS byte address of V^T row r, keys 32h.. (chunk c adds 16c, d-tile "
                                f"dt*{16 * self.V_ROW_BYTES})")
        else:
            self.v_rd = V.alloc("v_rd", 2, note="LDS byte address of V^T fragment half i (d-tile adds dt*1024)")
        self.k_st = V.alloc("k_st", note="LDS store address of this thread's K staging chunks")
        self.v_st = V.alloc("v_st", note="LDS store address of this thread's V^T staging chunks")
        self.k_gl = V.alloc("k_gl", note="global offset of this thread's K staging chunk 0 in a tile")
        self.v_gl = V.alloc("v_gl", note="global offset of this thread's V^T staging chunk 0 (row*seq_pad_kv + col*16)")
        self.ks = V.alloc("ks", note="k_scale of this lane half's 32 keys of the next tile")
        self.ks_off = V.alloc("ks_off", note="4h: byte offset of this lane half's k_scale in a tile's pair")
        self.qk = V.alloc("qk", 2, note="q_scale*k_scale, two copies in different banks (VOPD src0)")
        self.m = V.alloc("m", 3, align=4, note="m[0], m[1]: running max ping-pong (even/odd tile); m[2]: copy of m_new")
        self.alpha = V.alloc("alpha", 2, note="exp2(m_old - m_new), two banks (VOPD src0); alpha[0] also the scratch of it")
        self.l_run = V.alloc("l_run", note="running row sum")
        self.rs = V.alloc("rs", 2, align=2, note="row-sum chain ping-pong: rs[1] (odd VGPR) after even steps, rs[0] after odd")
        self.mx = V.alloc("mx", 4, align=4, note="row-max partials; mx[0] ends as the lane max")
        self.xl = V.alloc("xl", note="v_permlanex16 result")
        self.lim = V.alloc("lim", note="masked tiles: keys of this lane half still visible (lim(row) - key0); "
                           "then a copy of m_use (VOPD bank of the exp2 arguments)")
        self.O = V.alloc("O", 8 * self.D_TILES, align=8,
                         note="O^T accumulators: d-tile dt = O[8dt:8dt+8], lane (h,r) row d=16dt+8h+e")
        self.SA = V.alloc("SA", 32, align=8, note="S^T of even tiles: chunk c = SA[8c:8c+8]; scores, then p, P^T fp8 in place")
        self.SB = V.alloc("SB", 32, align=8, note="S^T of odd tiles (the next tile's QK^T accumulates here)")
        self.Q = V.alloc("Q", 4 * self.QF, align=4,
                         note=f"Q^T B-fragments: Q[4i:4i+4] = 16 bytes {self.HEAD_DIM // 2}h+16i.. of query row r")
        self.stK = V.alloc("stK", 4 * self.STAGE_LOADS, align=4, note="global->LDS staging of K tile t+2")
        self.stV = V.alloc("stV", 4 * self.V_LOADS, align=4, note="global->LDS staging of V^T tile t+1")
        self.ring = V.alloc("ring", 4 * self.RING, align=4,
                            note=f"{self.RING} LDS fragment slots of 4 VGPRs (ds_load_b128)")
        self.magic = V.alloc("magic", 8, note="0x4b400000 x 8: C of each chunk's first QK^T WMMA (int -> float trick)")
        self.NUM_VGPRS = V.used
        # lane offsets computed in the prologue that need homes only briefly (the ring is free then)
        self.t_lane, self.t_r, self.t_h, self.t_x, self.t_y, self.t_z = (self.ring[i] for i in range(6))
        self.q_off = self.ring[6]          # global offset of this lane's Q row (prologue only)
        self.v_qi = self.stK[0]            # epilogue: this lane's query index

    def _allocate_sgprs(self) -> None:
        S = self.S = RegFile("s", SGPR_LIMIT)
        self.kernarg = S.fixed("kernarg", 0, 2, "kernarg segment pointer (only user SGPR, docs/rdna4.md §Entry)")
        # the kernarg struct, dword for dword (sage_co/abi.py ATTENTION_FWD_ARGS), from KARG_SGPR on
        karg = {f.name: S.fixed(f.name, KARG_SGPR + f.offset // 4, f.size // 4, f"kernarg {f.name} ({f.kind})")
                for f in ARGS.fields}
        S.next = KARG_SGPR + ARGS.size // 4
        self.karg = karg
        self.sp_q, self.sp_k, self.sp_v = karg["q"], karg["k"], karg["v"]
        self.sp_qscale, self.sp_kscale, self.sp_kmean = karg["q_scale"], karg["k_scale"], karg["k_mean"]
        self.sp_vscale, self.sp_out, self.sp_lse = karg["v_scale"], karg["out"], karg["lse"]
        self.s_seqlen_q, self.s_seqpad_q = karg["seq_len_q"], karg["seq_pad_q"]
        self.s_seqlen, self.s_seqpad = karg["seq_len_kv"], karg["seq_pad_kv"]   # the key loop's length
        self.s_nheads, self.s_nheads_kv = karg["num_heads_q"], karg["num_heads_kv"]
        self.s_magic_kv, self.s_flags, self.s_headdim = karg["kv_group_magic"], karg["flags"], karg["head_dim"]
        self.s_ostride = (karg["out_stride_b"], karg["out_stride_s"], karg["out_stride_h"])
        self.s_head = S.alloc("head")
        self.s_batch = S.alloc("batch")
        self.s_wave = S.alloc("wave")
        self.s_bh = S.alloc("bh", 2, 2, "batch*H_q + head (hi word 0)")
        self.s_bkv = S.alloc("bkv", 2, 2, "batch*H_kv + K/V head (hi word 0)")
        self.s_tmp = S.alloc("tmp", 2, 2)
        self.s_tmp2 = S.alloc("tmp2", 2, 2)
        self.s_tmp3 = S.alloc("tmp3", 2, 2)
        self.s_q0 = S.alloc("q0", note="first query of this wave")
        self.s_last = S.alloc("last_tile", note="count - 1: the last LUT entry")
        self.s_rowlim0 = S.alloc("rowlim0", note="i32: q0 + causal_offset + 1 (causal) or seq_len_kv: row q0+r "
                                 "sees keys < min(rowlim0 + r, seq_len_kv)")
        self.s_wlim = S.alloc("wlim", note="i32: the smallest row limit of the wave: tiles ending above it are masked")
        self.s_lutrow = S.alloc("lutrow", 2, 2, "LUT row of this query tile")
        self.s_lut = S.alloc("lut4", 4, 4, "count, L[t], L[min(t+1, last)], L[min(t+2, last)] (active key tiles)")
        self.s_cnt, self.s_Lc, self.s_L1, self.s_L2 = (self.s_lut[i] for i in range(4))
        self.s_L3 = S.alloc("L3", note="L[min(t+3, last)] (in flight during tile t)")
        self.s_448 = S.alloc("c448", note="448.0f (VOPD src0 of p*448)")
        self.s_magic = S.alloc("magic", note="12582912.0f = 0x4b400000 (VOPD src0 of the int -> float subtraction)")
        self.s_sel = S.alloc("permsel", note="v_permlanex16 lane select 0x76543210")
        self.s_qs = S.alloc("qs", note="q_scale of this wave's 16 queries")
        self.s_t = S.alloc("tile", note="loop: current key tile t")
        self.s_kh = S.alloc("kh", 2, 2, "K of this K/V head")
        self.s_qrow = S.alloc("qrow", 2, 2, "Q rows of this wave")
        self.s_kb = S.alloc("kb", 2, 2, "K staging base (tile min(t+2, last))")
        self.s_koff = S.alloc("koff", 2, 2, "K staging tile byte offset (hi word 0)")
        if self.PV16:
            self.s_vb = S.alloc("vb", 2, 2, "V^T staging base (tile t+1)")
        else:
            self.s_vb = S.alloc("vb", 2 * self.STAGE_LOADS, 2,
                                f"V^T staging bases of chunk rows u*32 (u < {self.STAGE_LOADS}), tile t+1")
        self.s_addmean = S.alloc("addmean", note="epilogue: lanes that add v_mean (smooth_v and l != 0)")
        self.s_vmh = S.alloc("vmh", 2, 2, "v_mean of this K/V head")
        self.s_ksb = S.alloc("ksb", 2, 2, "k_scale of tile t+1")
        self.s_kmh = S.alloc("kmh", 2, 2, "k_mean of this K/V head")
        self.s_vsh = S.alloc("vsh", 2, 2, "v_scale of this K/V head")
        self.s_outb = S.alloc("outb", 2, 2, "out row of query q0")
        self.s_lseb = S.alloc("lseb", 2, 2, "lse of query q0")
        self.NUM_SGPRS = S.used

    def qk_matrix(self, mx_: Matrix, kbuf: int, sacc) -> None:
        for i, half, c in self.QK_ORDER:
            fk = mx_.frag(("k", i, c), lambda a, regs, i=i, c=c: a.op(
                f"ds_load_b128 {regs}, {self.k_rd[i]} offset:{kbuf + c * 8 * self.K_ROW_BYTES}"))
            first = i == 0 and half == 0
            acc = sacc[8 * c:8 * c + 8]

            def emit(a, regs, acc=acc, i=i, half=half, first=first):
                src_c = str(self.magic) if first else str(acc)
                a.op(f"{WMMA_QK} {acc}, {regs[2 * half:2 * half + 2]}, {self.Q[4 * i + 2 * half:4 * i + 2 * half + 2]}, "
                     f"{src_c} {IU8_SIGNED}")
            mx_.wmma(fk, emit)


    def pv_matrix(self, mx_: Matrix, vbuf: int, pacc) -> None:
        # per accumulator dt the chunks go 0, 1, 2, 3 (the HIP kernel's order: bitwise the same fp32 sums)
        if self.PV16:
            for c, dt in self.PV16_ORDER:
                fk = mx_.frag(("v", c, dt), lambda a, regs, c=c, dt=dt: a.op(
                    f"ds_load_b128 {regs}, {self.v_rd[0]} offset:{vbuf + dt * 16 * self.V_ROW_BYTES + c * B128}"))
                acc = self.O[8 * dt:8 * dt + 8]

                def emit(a, regs, acc=acc, c=c):
                    a.op(f"{WMMA_PV16} {acc}, {regs}, {pacc[8 * c:8 * c + 4]}, {acc}")
                mx_.wmma(fk, emit)
            return
        for i, grp, half, dt in self.PV_ORDER:
            fk = mx_.frag(("v", i, dt), lambda a, regs, i=i, dt=dt: a.op(
                f"ds_load_b128 {regs}, {self.v_rd[i]} offset:{vbuf + dt * 16 * self.V_ROW_BYTES}"))
            c = 2 * i + half
            acc = self.O[8 * dt:8 * dt + 8]

            def emit(a, regs, acc=acc, c=c, half=half):
                a.op(f"{WMMA_PV} {acc}, {regs[2 * half:2 * half + 2]}, {pacc[8 * c:8 * c + 2]}, {acc}")
            mx_.wmma(fk, emit)


    def scale_ops(self, sacc) -> list[Op]:
        """s = float(s_int32) * (q_scale * k_scale), in place. The QK^T accumulators start at C = 0x4b400000
    (MAGIC_INT) instead of 0, so each holds the bits of the float 1.5 * 2^23 + s_int32 (|s_int32| < 2^21 keeps
    the exponent); subtracting 1.5 * 2^23 is exact (Sterbenz) and gives float(s_int32) -- bitwise the HIP
    kernel's v_cvt_f32_i32, but as a VOPD-pairable v_subrev_f32 instead of a single-issue convert."""
        ops = [vmul(self.qk[0], self.s_qs, self.ks), Op.mov(self.qk[1], self.qk[0])]
        for j in range(32):
            ops.append(Op.vop2("v_subrev_f32", sacc[j], self.s_magic, sacc[j]))
            if j % 2:
                ops.append(vmul(sacc[j - 1], self.qk[0], sacc[j - 1]))
                ops.append(vmul(sacc[j], self.qk[1], sacc[j]))
        return ops


    def max_ops(self, sacc, m_old, m_new) -> list[Op]:
        """Row max over the lane's 32 scores (4 partial chains, VOPD pairs), the other lane half's max through
    v_permlanex16 (docs/rdna4.md §WMMA: DPP cannot cross 16-lane rows), m_new = max(m_old, both) and
    alpha = exp2(m_old - m_new), 0 while m_old = -inf (max is exact, so any order is the HIP kernel's value)."""
        ops = [vmax(self.mx[0], sacc[0], sacc[1]), vmax(self.mx[1], sacc[2], sacc[3]),
               vmax(self.mx[2], sacc[4], sacc[5]), vmax(self.mx[3], sacc[6], sacc[7])]
        for j in range(8, 32, 4):
            for q in range(4):
                ops.append(vmax(self.mx[q], sacc[j + q], self.mx[q]))
        ops += [vmax(self.mx[0], self.mx[0], self.mx[2]), vmax(self.mx[1], self.mx[1], self.mx[3]), vmax(self.mx[0], self.mx[0], self.mx[1])]
        ops.append(Op.raw(f"v_permlanex16_b32 {self.xl}, {self.mx[0]}, {self.s_sel}, {PERMX16_SEL_HI}", [self.mx[0]], [self.xl]))
        ops.append(Op.raw(f"v_max3_num_f32 {m_new}, {m_old}, {self.mx[0]}, {self.xl}", [m_old, self.mx[0], self.xl], [m_new]))
        ops.append(vsub(self.alpha[0], m_old, m_new))
        ops.append(Op.raw(f"v_exp_f32_e32 {self.alpha[0]}, {self.alpha[0]}", [self.alpha[0]], [self.alpha[0]], trans=True))
        return ops


    def alpha_select_lines(self, m_old) -> list[str]:
        """alpha = m_old == -inf ? 0 : exp2(m_old - m_new) (VCC written by VALU, read by VALU: §Hazards 3)."""
        return [f"v_cmp_neq_f32_e32 vcc_lo, {F32_NEG_INF}, {m_old}",
                "s_wait_alu depctr_va_vcc(0)",
                f"v_cndmask_b32_e32 {self.alpha[0]}, 0, {self.alpha[0]}, vcc_lo"]


    def guard_lines(self, m_new) -> list[str]:
        """m_use = m_new, or 0 while m_new = -inf (a row with no visible key so far: p = exp2(-inf - 0) = 0, not
    NaN), in m[2] and lim (two VOPD banks for the exp2 arguments)."""
        return [f"v_cmp_neq_f32_e32 vcc_lo, {F32_NEG_INF}, {m_new}",
                "s_wait_alu depctr_va_vcc(0)",
                f"v_cndmask_b32_e32 {self.m[2]}, 0, {m_new}, vcc_lo",
                f"v_mov_b32 {self.lim}, {self.m[2]}"]

    def exp_ops(self, sacc, m_new) -> list[Op]:
        """p = exp2(s - m_new); row sum l_tile = p0 + p1 + ... + p31 in register order (the HIP kernel's order),
    p8 = fp8(p * 448) packed in VGPR order into the chunk's first two registers (the P^T B-fragment,
    docs/rdna4.md §WMMA data flow). The chain alternates rs[1]/rs[0] so that each add pairs in one VOPD with the
    *448 of p[j-2] (one even, one odd destination; vsrc1 banks j and j-2 differ)."""
        mm = (self.lim, self.m[2])     # both m_use (guard_lines)
        ops: list[Op] = []

        def sub(j):
            return vsub(sacc[j], sacc[j], mm[j % 2])

        def exp(j):
            return Op.raw(f"v_exp_f32_e32 {sacc[j]}, {sacc[j]}", [sacc[j]], [sacc[j]], trans=True)

        R = (self.rs[1], self.rs[0])      # step j writes R[j % 2]: odd VGPR after even steps, even after odd ones

        def chain(j):           # rs_j = rs_{j-1} + p_j, rs_1 = p_0 + p_1
            if j == 1:
                return vadd(R[1], sacc[0], sacc[1])
            return vadd(R[j % 2], R[(j - 1) % 2], sacc[j])

        def scale(j):
            if self.PV16:       # p16 = fp16(p) in the low half, RNE (VOP3 form: the VOP1 one reaches v0-v127 only)
                return Op.raw(f"v_cvt_f16_f32_e64 {sacc[j]}, {sacc[j]}", [sacc[j]], [sacc[j]])
            return vmul(sacc[j], self.s_448, sacc[j])

        def packs_after(j):     # pack as soon as the *448 (fp16: the convert) of p_j is issued
            out = []
            c, e = divmod(j, 8)
            base = sacc[8 * c]
            if self.PV16:       # halves p_{j-1}, p_j -> VGPR 8c + e//2: the f16 B-fragment of chunk c in 4 VGPRs
                if e % 2:
                    dst = sacc[8 * c + e // 2]
                    out.append(Op.raw(f"v_pack_b32_f16 {dst}, {sacc[j - 1]}, {sacc[j]}", [sacc[j - 1], sacc[j]], [dst]))
                return out
            if e in (1, 5):
                dst = sacc[8 * c + e // 4]
                out.append(Op.raw(f"v_cvt_pk_fp8_f32 {dst}, {sacc[j - 1]}, {sacc[j]}", [sacc[j - 1], sacc[j], dst], [dst]))
            elif e in (3, 7):
                dst = sacc[8 * c + e // 4]
                # op_sel dst bit: the high half; the convert merges into dst (docs/rdna4.md §Hazards 9)
                out.append(Op.raw(f"v_cvt_pk_fp8_f32 {dst}, {sacc[j - 1]}, {sacc[j]} op_sel:[0,0,1]",
                                  [sacc[j - 1], sacc[j], dst], [dst]))
            del base
            return out

        LAG = 2
        for j in range(4):
            ops.append(sub(j))
        for k in range(32):
            ops.append(exp(k))
            if k + 4 < 32:
                ops.append(sub(k + 4))
            j = k - LAG
            if j >= 1:
                ops.append(chain(j))
                if j >= 2:
                    ops.append(scale(j - 2))
                    ops += packs_after(j - 2)
        for j in range(32 - LAG, 32):
            ops.append(chain(j))
            ops.append(scale(j - 2))
            ops += packs_after(j - 2)
        for j in (30, 31):
            ops.append(scale(j))
            ops += packs_after(j)
        return ops


    def lsum_ops(self) -> list[Op]:
        """l = l * alpha + (rs + rs of the other lane half) -- the HIP kernel's two roundings, in its order."""
        final = self.rs[0]           # R[31 % 2] of exp_ops
        return [Op.raw(f"v_permlanex16_b32 {self.xl}, {final}, {self.s_sel}, {PERMX16_SEL_HI}", [final], [self.xl]),
                vadd(final, final, self.xl),
                vmul(self.l_run, self.l_run, self.alpha[0]),
                vadd(self.l_run, self.l_run, final)]


    def mask_lines(self, sacc, label: str) -> list[str]:
        """Tiles reaching past the wave's smallest row limit (the sequence tail, the causal diagonal): scores of
    keys j >= lim(row) = min(rowlim0 + r, seq_len_kv) become -inf (uniform branch; other tiles skip it). Lane half h
    holds keys key0 + 32h + 8c + e (c chunk, e vgpr): visible when 8c + e < lim(row) - key0 - 32h (signed)."""
        key0, end = self.s_tmp3[0], self.s_tmp3[1]
        out = [f"s_lshl_b32 {key0}, {self.s_Lc}, {log2(TILE_K)}", f"s_add_co_i32 {end}, {key0}, {TILE_K}",
               f"s_cmp_le_i32 {end}, {self.s_wlim}", f"s_cbranch_scc1 {label}",
               "s_wait_alu depctr_sa_sdst(0)",
               f"v_and_b32 {self.lim}, 15, {self.tid}", f"v_add_nc_u32_e32 {self.lim}, {self.s_rowlim0}, {self.lim}",
               f"v_min_i32_e32 {self.lim}, {self.s_seqlen}, {self.lim}",
               f"v_subrev_nc_u32_e32 {self.lim}, {key0}, {self.lim}",
               f"v_bfe_u32 {self.xl}, {self.tid}, 4, 1", f"v_lshlrev_b32 {self.xl}, 5, {self.xl}",
               f"v_sub_nc_u32_e32 {self.lim}, {self.lim}, {self.xl}"]
        for c in range(CHUNKS):
            for e in range(8):
                out += [f"v_cmp_lt_i32_e32 vcc_lo, {8 * c + e}, {self.lim}",
                        "s_wait_alu depctr_va_vcc(0)",
                        f"v_cndmask_b32_e32 {sacc[8 * c + e]}, {F32_NEG_INF}, {sacc[8 * c + e]}, vcc_lo"]
        return out


    def rescale(self, a: Asm, label: str) -> None:
        """O *= alpha, skipped when no lane's max moved (x * 1.0 == x: bitwise the same as always scaling)."""
        a.op(f"v_cmp_neq_f32_e32 vcc_lo, 1.0, {self.alpha[0]}")
        a.op("s_wait_alu depctr_va_vcc(0)")
        a.op(f"s_cbranch_vccz {label}")
        a.valu([vmul(self.O[j], self.alpha[j % 2], self.O[j]) for j in range(self.O.n)])
        a.label(label)


    # ---------------------------------------------------------------------------------------------- kernel
    def kswz_lines(self, dst, row) -> list[str]:
        """dst = the XOR swizzle of K row `row`: row & 7 for 8 chunks per row (head dim 128), (row >> 1) & 3 for 4
        (head dim 64, like the V^T rows), as the .hip kernel's kswz<DP>."""
        if self.D_TILES == 8:
            return [f"v_and_b32 {dst}, 7, {row}"]
        return [f"v_bfe_u32 {dst}, {row}, 1, 2"]

    def lds_lane_constants(self, a: Asm) -> None:
        D, ncol = self.HEAD_DIM, self.D_TILES
        a.section("prologue: lane constants (VALU while the kernargs load)")
        a.op(f"v_and_b32 {self.t_lane}, 31, {self.tid}", "lane")
        a.op(f"v_and_b32 {self.t_r}, 15, {self.tid}", "r = lane % 16")
        a.op(f"v_bfe_u32 {self.t_h}, {self.tid}, 4, 1", "h = lane / 16")
        a.op(f"v_lshlrev_b32 {self.ks_off}, 2, {self.t_h}", "4h: k_scale of this half inside a tile's pair")
        a.op(f"v_lshlrev_b32 {self.k_gl}, {log2(B128)}, {self.tid}", "K staging: chunk tid of the tile (16 B)")
        # K store: row = tid / ncol, col = tid % ncol, swizzled col ^ kswz(row)
        a.op(f"v_lshrrev_b32 {self.t_x}, {log2(ncol)}, {self.tid}", "K row")
        for ln in self.kswz_lines(self.t_y, self.t_x):
            a.op(ln)
        a.op(f"v_and_b32 {self.t_z}, {ncol - 1}, {self.tid}")
        a.op(f"v_xor_b32 {self.t_y}, {self.t_y}, {self.t_z}")
        a.op(f"v_lshlrev_b32 {self.t_y}, {log2(B128)}, {self.t_y}")
        a.op(f"v_lshl_or_b32 {self.k_st}, {self.t_x}, {log2(self.K_ROW_BYTES)}, {self.t_y}",
             f"row*{self.K_ROW_BYTES} + (col ^ kswz(row))*16")
        if self.PV16:
            self.v16_lane_constants(a)
        else:
            self.v8_lane_constants(a)
        self.k_q_lane_constants(a)

    def v16_lane_constants(self, a: Asm) -> None:
        """pv fp16: thread tid stages V16_LOADS consecutive 16-byte chunks of V^T row tid / per_row (per_row =
        threads per row); lane (h, r) reads row r (+16 dt), keys 32h + 8c.. at + 64h + 16c (+ 16c by offset)."""
        per_row = (TILE_K * 2 // B128) // self.V16_LOADS
        a.op(f"v_lshrrev_b32 {self.t_x}, {log2(per_row)}, {self.tid}" if per_row > 1 else
             f"v_mov_b32 {self.t_x}, {self.tid}", "V^T row of this thread's staging chunks")
        a.op(f"v_and_b32 {self.t_y}, {per_row - 1}, {self.tid}", "which part of the row")
        a.op(f"v_lshlrev_b32 {self.t_y}, {log2(self.V16_LOADS * B128)}, {self.t_y}", "its first byte")
        a.op(f"v_mul_u32_u24_e32 {self.v_st}, {self.V_ROW_BYTES}, {self.t_x}")
        a.op(f"v_add_nc_u32_e32 {self.v_st}, {self.v_st}, {self.t_y}", f"row*{self.V_ROW_BYTES} + part")
        a.op(f"v_mul_u32_u24_e32 {self.v_rd[0]}, {self.V_ROW_BYTES}, {self.t_r}", f"r * {self.V_ROW_BYTES}")
        a.op(f"v_lshl_add_u32 {self.v_rd[0]}, {self.t_h}, {log2(4 * B128)}, {self.v_rd[0]}", "+ 64h (keys 32h..)")

    def v8_lane_constants(self, a: Asm) -> None:
        # V^T store: row = tid/4, col = tid%4, swizzled col ^ ((row >> 1) & 3)
        a.op(f"v_lshrrev_b32 {self.t_x}, 2, {self.tid}", "V^T row")
        a.op(f"v_bfe_u32 {self.t_y}, {self.t_x}, 1, 2")
        a.op(f"v_and_b32 {self.t_z}, 3, {self.tid}")
        a.op(f"v_xor_b32 {self.t_y}, {self.t_y}, {self.t_z}")
        a.op(f"v_lshlrev_b32 {self.t_y}, {log2(B128)}, {self.t_y}")
        a.op(f"v_lshl_or_b32 {self.v_st}, {self.t_x}, {log2(self.V_ROW_BYTES)}, {self.t_y}",
             f"row*{self.V_ROW_BYTES} + (col ^ (row>>1)&3)*16")
        # V^T fragment reads: row d = r (+16dt), 16-byte column (2h + i) ^ ((r >> 1) & 3)
        a.op(f"v_bfe_u32 {self.t_y}, {self.t_r}, 1, 2")
        a.op(f"v_lshlrev_b32 {self.t_x}, {log2(self.V_ROW_BYTES)}, {self.t_r}", f"r * {self.V_ROW_BYTES}")
        a.op(f"v_lshlrev_b32 {self.t_z}, 1, {self.t_h}", "2h")
        for i in range(2):
            a.op(f"v_or_b32 {self.v_rd[i]}, {i}, {self.t_z}" if i else f"v_mov_b32 {self.v_rd[i]}, {self.t_z}")
            a.op(f"v_xor_b32 {self.v_rd[i]}, {self.v_rd[i]}, {self.t_y}")
            a.op(f"v_lshl_or_b32 {self.v_rd[i]}, {self.v_rd[i]}, {log2(B128)}, {self.t_x}")

    def k_q_lane_constants(self, a: Asm) -> None:
        D = self.HEAD_DIM
        # K fragment reads: row = 32*(r/8) + r%8, 16-byte column (HCOL*h + i) ^ kswz(row); kswz(row) = kswz(r%8)
        # (32*(r/8) and the chunk offset 8c add nothing to row & 7 or to (row >> 1) & 3)
        a.op(f"v_lshrrev_b32 {self.t_x}, 3, {self.t_r}")
        a.op(f"v_and_b32 {self.t_y}, 7, {self.t_r}")
        a.op(f"v_lshl_or_b32 {self.t_x}, {self.t_x}, 5, {self.t_y}", "row")
        a.op(f"v_lshlrev_b32 {self.t_x}, {log2(self.K_ROW_BYTES)}, {self.t_x}", f"row * {self.K_ROW_BYTES}")
        for ln in self.kswz_lines(self.t_y, self.t_r):
            a.op(ln)
        a.op(f"v_lshlrev_b32 {self.t_z}, {log2(self.HCOL)}, {self.t_h}", f"{self.HCOL}h")
        for i in range(self.QF):
            a.op(f"v_or_b32 {self.k_rd[i]}, {i}, {self.t_z}" if i else f"v_mov_b32 {self.k_rd[i]}, {self.t_z}")
            a.op(f"v_xor_b32 {self.k_rd[i]}, {self.k_rd[i]}, {self.t_y}")
            a.op(f"v_lshl_or_b32 {self.k_rd[i]}, {self.k_rd[i]}, {log2(B128)}, {self.t_x}")
        a.op(f"v_lshlrev_b32 {self.q_off}, {log2(D)}, {self.t_r}", f"query row r * {D}")
        a.op(f"v_lshl_or_b32 {self.q_off}, {self.t_h}, {log2(D // 2)}, {self.q_off}",
             f"+ {D // 2}h (d permutation of the .hip header)")
        a.op(f"v_readfirstlane_b32 {self.s_wave}, {self.tid}")

    def zext(self, a: Asm, pair, value) -> None:
        """pair = the 64-bit zero extension of the 32-bit SGPR `value`."""
        a.op(f"s_mov_b32 {pair[0]}, {value}")
        a.op(f"s_mov_b32 {pair[1]}, 0")

    def scalar_setup(self, a: Asm) -> None:
        D = self.HEAD_DIM
        tmp, tmp2, tmp3 = self.s_tmp, self.s_tmp2, self.s_tmp3
        a.section("prologue: scalar addressing")
        a.op("s_wait_kmcnt 0")
        a.op(f"s_lshr_b32 {self.s_wave}, {self.s_wave}, {log2(abi.WAVE_SIZE)}", "wave = tid / 32 (uniform)")
        a.op(f"s_and_b32 {self.s_head}, ttmp7, 0xffff", "workgroup id y = query head (docs/rdna4.md §Entry)")
        a.op(f"s_lshr_b32 {self.s_batch}, ttmp7, 16", "workgroup id z = batch")
        a.op(f"s_mul_i32 {self.s_bh[0]}, {self.s_batch}, {self.s_nheads}")
        a.op(f"s_add_co_i32 {self.s_bh[0]}, {self.s_bh[0]}, {self.s_head}")
        a.op(f"s_mov_b32 {self.s_bh[1]}, 0")
        # GQA: K/V head = (head * kv_group_magic) >> 32 (sage_co/abi.py kv_group_magic: exact for head < 2^16)
        self.zext(a, tmp, self.s_head)
        a.op(f"s_mul_u64 {tmp}, {tmp}, {self.s_magic_kv}", "hi word: K/V head")
        a.op(f"s_mul_i32 {self.s_bkv[0]}, {self.s_batch}, {self.s_nheads_kv}")
        a.op(f"s_add_co_i32 {self.s_bkv[0]}, {self.s_bkv[0]}, {tmp[1]}")
        a.op(f"s_mov_b32 {self.s_bkv[1]}, 0")
        a.op(f"s_lshl_b32 {self.s_q0}, ttmp9, {log2(TILE_Q)}", f"workgroup id x * {TILE_Q}")
        a.op(f"s_lshl_b32 {tmp[0]}, {self.s_wave}, {log2(WAVE_Q)}")
        a.op(f"s_add_co_i32 {self.s_q0}, {self.s_q0}, {tmp[0]}", f"q0 = {TILE_Q}*qtile + {WAVE_Q}*wave")
        # LUT row of (batch, head, query tile): lut + 4 * (batch*sb + head*sh + qtile*(seq_pad_kv/64 + 1))
        a.op(f"s_lshr_b32 {tmp[0]}, {self.s_seqpad}, {log2(TILE_K)}")
        a.op(f"s_add_co_i32 {tmp[0]}, {tmp[0]}, 1", "LUT row length")
        a.op(f"s_mul_i32 {tmp[0]}, {tmp[0]}, ttmp9", "* query tile")
        a.op(f"s_mul_i32 {tmp2[0]}, {self.s_batch}, {self.karg['lut_stride_b']}")
        a.op(f"s_add_co_i32 {tmp[0]}, {tmp[0]}, {tmp2[0]}")
        a.op(f"s_mul_i32 {tmp2[0]}, {self.s_head}, {self.karg['lut_stride_h']}")
        a.op(f"s_add_co_i32 {tmp[0]}, {tmp[0]}, {tmp2[0]}")
        a.op(f"s_mov_b32 {tmp[1]}, 0")
        a.op(f"s_lshl_b64 {tmp}, {tmp}, 2")
        a.op(f"s_add_nc_u64 {self.s_lutrow}, {self.karg['lut']}, {tmp}")
        a.op(f"s_load_b128 {self.s_lut}, {self.s_lutrow}, 0x0", "count, L[0], L[1], L[2] (the host pads the buffer)")
        # row limits: row q0 + r sees keys j < min(rowlim0 + r, seq_len_kv) (signed; causal: q0 + r + S_kv - S_q + 1)
        a.op(f"s_add_co_i32 {tmp[0]}, {self.s_q0}, {self.karg['causal_offset']}")
        a.op(f"s_add_co_i32 {tmp[0]}, {tmp[0]}, 1")
        a.op(f"s_bitcmp1_b32 {self.s_flags}, {abi.FLAG_CAUSAL_BIT}")
        a.op(f"s_cselect_b32 {self.s_rowlim0}, {tmp[0]}, {self.s_seqlen}")
        a.op(f"s_min_i32 {self.s_wlim}, {self.s_rowlim0}, {self.s_seqlen}")
        a.op("s_wait_kmcnt 0", "LUT row head")
        a.op(f"s_add_co_i32 {self.s_last}, {self.s_cnt}, -1", "last LUT entry")
        a.op(f"s_cmp_gt_u32 {self.s_cnt}, 1")
        a.op(f"s_cselect_b32 {self.s_L1}, {self.s_L1}, {self.s_Lc}", "L[min(1, last)]")
        a.op(f"s_cmp_gt_u32 {self.s_cnt}, 2")
        a.op(f"s_cselect_b32 {self.s_L2}, {self.s_L2}, {self.s_L1}", "L[min(2, last)]")
        a.op(f"s_mov_b32 {self.s_448}, {F32_448}")
        a.op(f"s_mov_b32 {self.s_magic}, {MAGIC_INT}")
        a.op(f"s_mov_b32 {self.s_sel}, {PERMX16_SEL_LO}")
        # K and V^T of the K/V head: bkv * seq_pad_kv * D bytes (64-bit)
        a.op(f"s_lshl_b32 {tmp[0]}, {self.s_seqpad}, {log2(D)}")
        a.op(f"s_mov_b32 {tmp[1]}, 0")
        a.op(f"s_mul_u64 {tmp}, {tmp}, {self.s_bkv}")
        a.op(f"s_add_nc_u64 {self.s_kh}, {self.sp_k}, {tmp}")
        if self.PV16:
            a.op(f"s_lshl_b64 {tmp}, {tmp}, 1", "fp16 V^T: 2 bytes per element")
        a.op(f"s_add_nc_u64 {self.s_vb[0:2]}, {self.sp_v}, {tmp}", "V^T of this K/V head")
        a.op(f"s_lshl_b32 {tmp2[0]}, {self.s_Lc}, {log2(TILE_K * self.V_BYTES)}")
        a.op(f"s_mov_b32 {tmp2[1]}, 0")
        a.op(f"s_add_nc_u64 {self.s_vb[0:2]}, {self.s_vb[0:2]}, {tmp2}", "V^T columns of tile L[0]")
        # Q rows of query q0 of this head: (bh * seq_pad_q + q0) * D bytes
        a.op(f"s_lshl_b32 {tmp[0]}, {self.s_seqpad_q}, {log2(D)}")
        a.op(f"s_mov_b32 {tmp[1]}, 0")
        a.op(f"s_mul_u64 {tmp}, {tmp}, {self.s_bh}")
        a.op(f"s_add_nc_u64 {self.s_qrow}, {self.sp_q}, {tmp}")
        a.op(f"s_lshl_b32 {tmp2[0]}, {self.s_q0}, {log2(D)}")
        a.op(f"s_mov_b32 {tmp2[1]}, 0")
        a.op(f"s_add_nc_u64 {self.s_qrow}, {self.s_qrow}, {tmp2}", "Q rows of query q0")
        # V^T staging bases: row u*32 of the tile: + u*32*seq_pad_kv (the loop advances them by TILE_K)
        a.op(f"s_lshl_b32 {tmp2[0]}, {self.s_seqpad}, {log2(V_STAGE_ROWS)}", f"{V_STAGE_ROWS} rows of V^T")
        for u in range(1, 1 if self.PV16 else self.STAGE_LOADS):
            a.op(f"s_add_nc_u64 {self.s_vb[2 * u:2 * u + 2]}, {self.s_vb[2 * u - 2:2 * u]}, {tmp2}")
        # k_scale of the K/V head: bkv * (seq_pad_kv / 32) floats
        a.op(f"s_lshr_b32 {tmp[0]}, {self.s_seqpad}, {log2(SCALE_BLOCK)}")
        a.op(f"s_mov_b32 {tmp[1]}, 0")
        a.op(f"s_mul_u64 {tmp}, {tmp}, {self.s_bkv}")
        a.op(f"s_lshl_b64 {tmp}, {tmp}, {log2(F32_BYTES)}")
        a.op(f"s_add_nc_u64 {self.s_ksb}, {self.sp_kscale}, {tmp}", "k_scale of the K/V head")
        a.op(f"s_lshl_b32 {tmp[0]}, {self.s_Lc}, {log2(2 * F32_BYTES)}")
        a.op(f"s_mov_b32 {tmp[1]}, 0")
        a.op(f"s_add_nc_u64 {self.s_ksb}, {self.s_ksb}, {tmp}", "k_scale pair of tile L[0]")
        # q_scale of the wave's block: bh * (seq_pad_q / 32) + q0 / 32 floats
        a.op(f"s_lshr_b32 {tmp[0]}, {self.s_seqpad_q}, {log2(SCALE_BLOCK)}")
        a.op(f"s_mov_b32 {tmp[1]}, 0")
        a.op(f"s_mul_u64 {tmp}, {tmp}, {self.s_bh}")
        a.op(f"s_lshl_b64 {tmp}, {tmp}, {log2(F32_BYTES)}")
        a.op(f"s_add_nc_u64 {tmp}, {self.sp_qscale}, {tmp}")
        a.op(f"s_lshr_b32 {tmp2[0]}, {self.s_q0}, {log2(SCALE_BLOCK)}")
        a.op(f"s_lshl_b32 {tmp2[0]}, {tmp2[0]}, {log2(F32_BYTES)}")
        a.op(f"s_load_b32 {self.s_qs}, {tmp}, {tmp2[0]} offset:0x0", "q_scale of the wave's 32-query block")
        # k_mean / v_scale of the K/V head: bkv * D floats
        a.op(f"s_lshl_b64 {tmp}, {self.s_bkv}, {log2(D * F32_BYTES)}")
        a.op(f"s_add_nc_u64 {self.s_kmh}, {self.sp_kmean}, {tmp}")
        a.op(f"s_add_nc_u64 {self.s_vsh}, {self.sp_vscale}, {tmp}")
        a.op(f"s_add_nc_u64 {self.s_vmh}, {self.karg['v_mean']}, {tmp}")
        # out row of (batch, q0, head): (batch*sb + q0*ss + head*sh) elements of OUT_BYTES (64-bit products)
        for k, (idx, stride) in enumerate(((self.s_batch, self.s_ostride[0]), (self.s_q0, self.s_ostride[1]),
                                           (self.s_head, self.s_ostride[2]))):
            acc = tmp if k == 0 else tmp2
            self.zext(a, acc, idx)
            self.zext(a, tmp3, stride)
            a.op(f"s_mul_u64 {acc}, {acc}, {tmp3}")
            if k:
                a.op(f"s_add_nc_u64 {tmp}, {tmp}, {tmp2}")
        a.op(f"s_lshl_b64 {tmp}, {tmp}, {log2(OUT_BYTES)}")
        a.op(f"s_add_nc_u64 {self.s_outb}, {self.sp_out}, {tmp}")
        # lse of (bh, q0): (bh * S_q + q0) * 4 bytes
        self.zext(a, tmp2, self.s_seqlen_q)
        a.op(f"s_mul_u64 {tmp}, {self.s_bh}, {tmp2}")
        a.op(f"s_mov_b32 {tmp2[0]}, {self.s_q0}")
        a.op(f"s_add_nc_u64 {tmp}, {tmp}, {tmp2}")
        a.op(f"s_lshl_b64 {tmp}, {tmp}, {log2(F32_BYTES)}")
        a.op(f"s_add_nc_u64 {self.s_lseb}, {self.sp_lse}, {tmp}")
        a.op(f"s_mov_b32 {self.s_koff[1]}, 0")
        a.op(f"s_mov_b32 {self.s_t}, 0")
        # VALU reads these SGPRs from now on; none is written again by SALU (docs/rdna4.md §Hazards 3)
        a.op("s_wait_alu depctr_sa_sdst(0)")
        if self.PV16:   # row tid / per_row, its part tid % per_row of V16_LOADS chunks (v16_lane_constants)
            per_row = (TILE_K * 2 // B128) // self.V16_LOADS
            a.op(f"v_lshrrev_b32 {self.t_x}, {log2(per_row)}, {self.tid}")
            a.op(f"v_mul_lo_u32 {self.v_gl}, {self.t_x}, {self.s_seqpad}", "V^T row * seq_pad_kv")
            a.op(f"v_lshlrev_b32 {self.v_gl}, 1, {self.v_gl}", "fp16: bytes")
            a.op(f"v_and_b32 {self.t_y}, {per_row - 1}, {self.tid}")
            a.op(f"v_lshl_add_u32 {self.v_gl}, {self.t_y}, {log2(self.V16_LOADS * B128)}, {self.v_gl}",
                 "+ part * its bytes")
            return
        a.op(f"v_lshrrev_b32 {self.t_x}, 2, {self.tid}")
        a.op(f"v_mul_lo_u32 {self.v_gl}, {self.t_x}, {self.s_seqpad}", "V^T row * seq_pad_kv")
        a.op(f"v_and_b32 {self.t_y}, 3, {self.tid}")
        a.op(f"v_lshl_add_u32 {self.v_gl}, {self.t_y}, {log2(B128)}, {self.v_gl}", "+ col * 16")

    def stage_loads(self, a: Asm, vm: WaitCounter, k_base, v_bases, tag: str, k_dst=None, v_dst=None) -> None:
        k_dst = self.stK if k_dst is None else k_dst
        v_dst = self.stV if v_dst is None else v_dst
        for u in range(self.STAGE_LOADS):
            if k_base is not None:
                a.op(f"global_load_b128 {k_dst[4 * u:4 * u + 4]}, {self.k_gl}, {k_base} offset:{u * self.STAGE_STEP}")
                vm.issue(f"{tag}k{u}")
        for u in range(self.V_LOADS):
            if v_bases is not None:
                if self.PV16:   # consecutive chunks of one V^T row: immediate offsets from one base
                    a.op(f"global_load_b128 {v_dst[4 * u:4 * u + 4]}, {self.v_gl}, {v_bases[0:2]} offset:{u * B128}")
                else:
                    a.op(f"global_load_b128 {v_dst[4 * u:4 * u + 4]}, {self.v_gl}, {v_bases[2 * u:2 * u + 2]}")
                vm.issue(f"{tag}v{u}")


    def stage_stores(self, a: Asm, kbuf: int | None, vbuf: int | None, k_src=None, v_src=None) -> None:
        k_src = self.stK if k_src is None else k_src
        v_src = self.stV if v_src is None else v_src
        for u in range(max(self.STAGE_LOADS, self.V_LOADS)):
            if kbuf is not None and u < self.STAGE_LOADS:
                a.op(f"ds_store_b128 {self.k_st}, {k_src[4 * u:4 * u + 4]} offset:{kbuf + u * self.STAGE_STEP}")
            if vbuf is not None and u < self.V_LOADS:
                step = B128 if self.PV16 else self.STAGE_STEP
                a.op(f"ds_store_b128 {self.v_st}, {v_src[4 * u:4 * u + 4]} offset:{vbuf + u * step}")


    def barrier(self, a: Asm, ds: WaitCounter) -> None:
        a.op("s_wait_dscnt 0", "LDS stores done before the barrier (docs/rdna4.md §Hazards 8)")
        ds.outstanding.clear()
        a.op("s_barrier_signal -1")
        a.op("s_barrier_wait -1")


    def body(self, a: Asm, parity: int, last: bool) -> None:
        """One key tile t (t % 2 == parity). Not last: QK^T of tile t+1 is woven with the softmax of tile t,
    PV of tile t with the score scaling of tile t+1 (see the schedule in the header)."""
        cur, nxt = (self.SA, self.SB) if parity == 0 else (self.SB, self.SA)
        m_old, m_new = self.m[parity], self.m[1 - parity]
        vm, ds = WaitCounter(a, "s_wait_loadcnt"), WaitCounter(a, "s_wait_dscnt")
        tag = f"t{parity}{'L' if last else ''}"
        mat = Matrix(self.ring)
        if not last:
            self.qk_matrix(mat, self.LDS_KBUF[1 - parity], nxt)
        self.pv_matrix(mat, self.LDS_VBUF[parity], cur)
        n_qk = 0 if last else len(self.QK_ORDER)
        wv = Weaver(a, mat, ds)

        if not last:
            a.section(f"tile t (t % 2 = {parity}): LUT entry L[min(t+3, last)]; staging loads of K(L[min(t+2, last)]), "
                      "V^T(L[t+1]), k_scale(L[t+1])")
            a.op(f"s_add_co_i32 {self.s_tmp[0]}, {self.s_t}, 3")
            a.op(f"s_min_u32 {self.s_tmp[0]}, {self.s_tmp[0]}, {self.s_last}")
            a.op(f"s_lshl_b32 {self.s_tmp[0]}, {self.s_tmp[0]}, 2")
            a.op(f"s_load_b32 {self.s_L3}, {self.s_lutrow}, {self.s_tmp[0]} offset:0x4", "waited at the end of the tile")
            a.op(f"s_lshl_b32 {self.s_koff[0]}, {self.s_L2}, {log2(self.K_TILE_BYTES)}", f"* {self.K_TILE_BYTES} bytes")
            a.op(f"s_add_nc_u64 {self.s_kb}, {self.s_kh}, {self.s_koff}")
            a.op(f"s_sub_co_i32 {self.s_tmp[0]}, {self.s_L1}, {self.s_Lc}", "tiles from L[t] to L[t+1] (> 0: ascending)")
            a.op(f"s_mov_b32 {self.s_tmp2[1]}, 0")
            a.op(f"s_lshl_b32 {self.s_tmp2[0]}, {self.s_tmp[0]}, {log2(2 * F32_BYTES)}")
            a.op(f"s_add_nc_u64 {self.s_ksb}, {self.s_ksb}, {self.s_tmp2}", "k_scale pair of tile L[t+1]")
            a.op(f"global_load_b32 {self.ks}, {self.ks_off}, {self.s_ksb}")
            vm.issue("ks")
            a.op(f"s_lshl_b32 {self.s_tmp2[0]}, {self.s_tmp[0]}, {log2(TILE_K * self.V_BYTES)}")
            for u in range(1 if self.PV16 else self.STAGE_LOADS):
                a.op(f"s_add_nc_u64 {self.s_vb[2 * u:2 * u + 2]}, {self.s_vb[2 * u:2 * u + 2]}, {self.s_tmp2}",
                     "V^T columns of tile L[t+1]")
            self.stage_loads(a, vm, self.s_kb, self.s_vb, tag)
            a.section("phase X: fragment loads, row max of tile t, then QK^T(t+1) x 32 WMMA woven with exp/sum/pack")
        else:
            a.section(f"last tile (t % 2 = {parity}): mask keys >= seq_len, softmax, PV")
        wv.prefetch()
        nomask = f".Lnomask_{parity}{'_last' if last else ''}"
        for ln in self.mask_lines(cur, nomask):
            a.op(ln)
        a.label(nomask)
        a.valu(self.max_ops(cur, m_old, m_new))
        for ln in self.alpha_select_lines(m_old) + self.guard_lines(m_new):
            a.op(ln)
        e_issues = pair_vopd(self.exp_ops(cur, m_new) + [Op.mov(self.alpha[1], self.alpha[0])] + self.lsum_ops())
        wv.phase(n_qk, e_issues)
        self.rescale(a, f".Lno_rescale_{parity}{'_last' if last else ''}")
        a.section("phase Y: PV(t) x 32 WMMA" + ("" if last else " woven with the score scaling of tile t+1"))
        y_items = []
        if not last:
            vm_wait = WaitCounter(a, "s_wait_loadcnt")
            vm_wait.outstanding = list(vm.outstanding)
            k = vm.outstanding.index("ks")
            y_items.append(f"s_wait_loadcnt {len(vm.outstanding) - k - 1}")
            del vm.outstanding[:k + 1]
            y_items += pair_vopd(self.scale_ops(nxt))
        wv.phase(self.N_PV, y_items)
        if not last:
            a.section("end of tile: staging -> LDS (K(t+2) -> kbuf[t%2], V^T(t+1) -> vbuf[(t+1)%2]), one barrier")
            vm.wait_all()
            if self.SINGLE_V:   # every wave is done reading V^T(t) after the first barrier
                self.stage_stores(a, self.LDS_KBUF[parity], None)
                self.barrier(a, ds)
                self.stage_stores(a, None, self.LDS_VBUF[1 - parity])
                self.barrier(a, ds)
            else:
                self.stage_stores(a, self.LDS_KBUF[parity], self.LDS_VBUF[1 - parity])
                self.barrier(a, ds)
            a.op(f"s_add_co_i32 {self.s_t}, {self.s_t}, 1")
            a.op("s_wait_kmcnt 0", "L[min(t+3, last)]")
            a.op(f"s_mov_b32 {self.s_Lc}, {self.s_L1}")
            a.op(f"s_mov_b32 {self.s_L1}, {self.s_L2}")
            a.op(f"s_mov_b32 {self.s_L2}, {self.s_L3}")




    def epilogue(self, a: Asm, parity_m) -> None:
        """out = bf16((O * (1 / (448 l))) * v_scale [+ v_mean]) (pv fp16: O * (1 / l)) and the LSE, exactly as the
        HIP kernel's epilogue."""
        a.section("epilogue: inv = 1 / (448 l) (pv fp16: 1 / l) (IEEE division, LLVM's v_div_scale/fmas/fixup sequence)")
        t, den, num, r, q, e = (self.ring[i] for i in range(6))
        if self.PV16:
            a.op(f"v_mov_b32_e32 {t}, {self.l_run}")
        else:
            a.op(f"v_mul_f32_e32 {t}, {F32_448}, {self.l_run}")
        a.op(f"v_div_scale_f32 {den}, null, {t}, {t}, 1.0")
        a.op(f"v_div_scale_f32 {num}, vcc_lo, 1.0, {t}, 1.0")
        a.op(f"v_rcp_f32_e32 {r}, {den}")
        a.op(f"v_fma_f32 {e}, -{den}, {r}, 1.0")
        a.op(f"v_fmac_f32_e32 {r}, {e}, {r}")
        a.op(f"v_mul_f32_e32 {q}, {num}, {r}")
        a.op(f"v_fma_f32 {e}, -{den}, {q}, {num}")
        a.op(f"v_fmac_f32_e32 {q}, {e}, {r}")
        a.op(f"v_fma_f32 {den}, -{den}, {q}, {num}")
        a.op("s_wait_alu depctr_va_vcc(0)")
        a.op(f"v_div_fmas_f32 {den}, {den}, {r}, {q}")
        inv = self.ring[6]
        a.op(f"v_div_fixup_f32 {inv}, {den}, {t}, 1.0")
        a.op(f"v_cmp_neq_f32_e32 vcc_lo, 0, {self.l_run}", "l = 0: a row that saw no key -> inv 0, zeros")
        a.op("s_wait_alu depctr_va_vcc(0)")
        a.op(f"v_cndmask_b32_e32 {inv}, 0, {inv}, vcc_lo")
        fp16 = self.cfg.out_dtype == "fp16"
        neg_max, pos_max = OUT_MAX[self.cfg.out_dtype]
        a.section(f"epilogue: v_scale, {self.cfg.out_dtype} RNE saturating at +-its max (NaN -> "
                  f"{FP16_QNAN if fp16 else '0x7fc0'}), stores of the valid query rows")
        vm = WaitCounter(a, "s_wait_loadcnt")
        a.op(f"v_bfe_u32 {t}, {self.tid}, 4, 1", "h")
        a.op(f"v_lshlrev_b32 {t}, 5, {t}", "8h floats = 32h bytes")
        # smooth_v (flags bit 3): v_mean of d-tile dt in slot dt % 2 (magic, stV[0:8], both free now), added on the
        # lanes of s_addmean = rows with l != 0 when the flag is set (others keep the value: no -0 -> +0 change)
        vmean_slots = (self.magic, self.stV[0:8])

        def load_vmean(dt):
            for half in range(2):
                a.op(f"global_load_b128 {vmean_slots[dt % 2][4 * half:4 * half + 4]}, {t}, {self.s_vmh} "
                     f"offset:{dt * 64 + half * 16}")
                vm.issue(f"vm{dt}{half}")
        if not self.PV16:
            # v_scale values land in SA/SB (free now): d-tile dt's 8 values of this lane half in SA/SB[8dt..8dt+7]
            for dt in range(self.D_TILES):
                for half in range(2):
                    j = 8 * dt + 4 * half
                    a.op(f"global_load_b128 {(self.SA if j < 32 else self.SB)[j % 32:j % 32 + 4]}, {t}, {self.s_vsh} "
                         f"offset:{dt * 64 + half * 16}")
                    vm.issue(f"vs{dt}{half}")
            load_vmean(0)
            load_vmean(1)
            a.op(f"v_cmp_neq_f32_e64 {self.s_addmean}, 0, {self.l_run}", "rows that saw a key")
            a.op("s_wait_alu depctr_va_sdst(0)")
            a.op(f"s_bitcmp1_b32 {self.s_flags}, {abi.FLAG_SMOOTH_V_BIT}")
            a.op(f"s_cselect_b32 {self.s_addmean}, {self.s_addmean}, 0", "no lane without smooth_v")
            a.op("s_wait_alu depctr_sa_sdst(0)")
        # 8 x 16-bit outputs of d-tile dt in packed[4dt:4dt+4] (pv fp16 head dim 128: the ring is too small; the
        # V^T staging registers are free now)
        packed = self.stV[0:4 * self.D_TILES] if self.RING < 2 + self.D_TILES else \
            self.ring[8:8 + 4 * self.D_TILES]
        for dt in range(self.D_TILES):
            if not self.PV16:
                vm.wait_for(f"vm{dt}1")
            for e in range(8):
                j = 8 * dt + e
                sc = (self.SA if j < 32 else self.SB)[j % 32]
                o = self.O[j]
                a.op(f"v_mul_f32_e32 {o}, {o}, {inv}")
                if not self.PV16:
                    a.op(f"v_mul_f32_e32 {o}, {o}, {sc}")
                    vmv, tmp = vmean_slots[dt % 2][e], self.ring[7]
                    a.op(f"v_add_f32_e32 {tmp}, {o}, {vmv}", "+ v_mean (smooth_v)")
                    a.op(f"v_cndmask_b32_e64 {o}, {o}, {tmp}, {self.s_addmean}")
                # issue 11 item 3: NaN test on the unclamped value (max/min_num drop NaN), then the clamp
                a.op(f"v_cmp_o_f32_e32 vcc_lo, {o}, {o}", "NaN test before the clamp")
                a.op(f"v_max_num_f32_e32 {o}, {neg_max}, {o}", "saturate (docs/numerics.md §Finite range)")
                a.op(f"v_min_num_f32_e32 {o}, {pos_max}, {o}")
                if fp16:
                    a.op(f"v_cvt_f16_f32_e64 {sc}, {o}", "RNE (round mode 0), low half (VOP3: the VOP1 form reaches v0-v127 only)")
                    a.op("s_wait_alu depctr_va_vcc(0)")
                    a.op(f"v_cndmask_b32_e32 {sc}, {FP16_QNAN}, {sc}, vcc_lo")
                else:
                    a.op(f"v_bfe_u32 {sc}, {o}, 16, 1")
                    a.op(f"v_add3_u32 {sc}, {o}, {sc}, {BF16_ROUND}", "bf16 RNE in the high half")
                    a.op("s_wait_alu depctr_va_vcc(0)")
                    a.op(f"v_cndmask_b32_e32 {sc}, {BF16_QNAN32}, {sc}, vcc_lo")
                if e % 2:
                    lo = (self.SA if j - 1 < 32 else self.SB)[(j - 1) % 32]
                    if fp16:
                        a.op(f"v_lshlrev_b32 {sc}, 16, {sc}")
                        a.op(f"v_and_or_b32 {packed[4 * dt + e // 2]}, {lo}, {LO16_MASK}, {sc}")
                    else:
                        a.op(f"v_lshrrev_b32 {lo}, 16, {lo}")
                        a.op(f"v_and_or_b32 {packed[4 * dt + e // 2]}, {sc}, {HI16_MASK}, {lo}")
            if not self.PV16 and dt + 2 < self.D_TILES:
                load_vmean(dt + 2)    # into the slot d-tile dt has just finished with
        # LSE value (full EXEC: v_permlanex16 reads the other lane half)
        lse_v, lg = self.ring[0], self.ring[1]
        m_fin = self.m[parity_m]
        a.op(f"s_bitcmp1_b32 {self.s_flags}, {abi.FLAG_LSE_BIT}")
        a.op("s_cbranch_scc0 .Lstore_out")
        a.section("epilogue: lse = (m + log2 l) * ln2 [+ ln2 * sum_d (q_int8 * q_scale) * k_mean]")
        a.op(f"v_log_f32_e32 {lg}, {self.l_run}")
        a.op(f"v_add_f32_e32 {lse_v}, {m_fin}, {lg}")
        a.op(f"v_mul_f32_e32 {lse_v}, {F32_LN2}, {lse_v}")
        a.op(f"s_bitcmp1_b32 {self.s_flags}, {abi.FLAG_SMOOTH_K_BIT}")
        a.op("s_cbranch_scc0 .Lstore_out")
        # k_mean: this lane half's head_dim/2 values (d = head_dim/2 * h ..) over SA, SB
        km_off = self.ring[5]
        a.op(f"v_bfe_u32 {km_off}, {self.tid}, 4, 1", "h")
        a.op(f"v_lshlrev_b32 {km_off}, {log2(self.HEAD_DIM // 2 * F32_BYTES)}, {km_off}",
             f"{self.HEAD_DIM // 2}h floats")
        for j in range(self.HEAD_DIM // 8):
            a.op(f"global_load_b128 {(self.SA if 4 * j < 32 else self.SB)[(4 * j) % 32:(4 * j) % 32 + 4]}, {km_off}, "
                 f"{self.s_kmh} offset:{B128 * j}")
            vm.issue(f"km{j}")
        acc, qd = self.ring[2], self.ring[3]
        a.op(f"v_mov_b32 {acc}, 0")
        for i in range(self.QF):
            for w in range(4):
                vm.wait_for(f"km{4 * i + w}")
                for b in range(4):
                    d = 16 * i + 4 * w + b
                    km = (self.SA if d < 32 else self.SB)[d % 32]
                    a.op(f"v_bfe_i32 {qd}, {self.Q[4 * i + w]}, {8 * b}, 8")
                    a.op(f"v_cvt_f32_i32_e32 {qd}, {qd}")
                    a.op(f"v_mul_f32_e32 {qd}, {self.s_qs}, {qd}")
                    a.op(f"v_mul_f32_e32 {qd}, {qd}, {km}")
                    a.op(f"v_add_f32_e32 {acc}, {acc}, {qd}")
        a.op(f"v_permlanex16_b32 {self.xl}, {acc}, {self.s_sel}, {PERMX16_SEL_HI}")
        a.op(f"v_add_f32_e32 {acc}, {acc}, {self.xl}")
        a.op(f"v_mul_f32_e32 {acc}, {F32_LN2}, {acc}")
        a.op(f"v_add_f32_e32 {lse_v}, {lse_v}, {acc}")
        a.label(".Lstore_out")
        a.section("epilogue: stores (EXEC = valid query rows; lse from lanes 0-15)")
        a.op(f"v_and_b32 {self.v_qi}, 15, {self.tid}")
        a.op(f"v_add_nc_u32_e32 {self.v_qi}, {self.s_q0}, {self.v_qi}", "query index q0 + r")
        a.op(f"v_cmpx_gt_u32_e64 {self.s_seqlen_q}, {self.v_qi}")
        a.op("s_cbranch_execz .Lend")
        o_off = self.ring[4]
        a.op(f"v_and_b32 {o_off}, 15, {self.tid}")
        a.op(f"v_mul_lo_u32 {o_off}, {o_off}, {self.s_ostride[1]}", "r * out_stride_s")
        a.op(f"v_lshlrev_b32 {o_off}, {log2(OUT_BYTES)}, {o_off}", "bytes")
        h_tmp = self.ring[5]
        a.op(f"v_bfe_u32 {h_tmp}, {self.tid}, 4, 1", "h")
        a.op(f"v_lshl_add_u32 {o_off}, {h_tmp}, {log2(8 * OUT_BYTES)}, {o_off}", "+ 16h bytes (8 outputs of d-tile half h)")
        for dt in range(self.D_TILES):
            if dt * WMMA_N >= self.MIN_HEAD_DIM:   # a d-tile only zero padding (D < D_pad) is not stored
                a.op(f"s_cmp_le_u32 {self.s_headdim}, {dt * WMMA_N}", f"head_dim <= {dt * WMMA_N}: no more channels")
                a.op("s_cbranch_scc1 .Lstored")
            a.op(f"global_store_b128 {o_off}, {packed[4 * dt:4 * dt + 4]}, {self.s_outb} offset:{WMMA_N * OUT_BYTES * dt}")
        a.label(".Lstored")
        a.op(f"s_bitcmp1_b32 {self.s_flags}, {abi.FLAG_LSE_BIT}")
        a.op("s_cbranch_scc0 .Lend")
        a.op(f"v_and_b32 {o_off}, 31, {self.tid}")
        a.op(f"v_cmpx_gt_u32_e64 16, {o_off}", "lanes 0-15 hold the row's lse")
        a.op(f"v_and_b32 {o_off}, 15, {self.tid}")
        a.op(f"v_lshlrev_b32 {o_off}, 2, {o_off}")
        a.op(f"global_store_b32 {o_off}, {lse_v}, {self.s_lseb}")
        a.label(".Lend")
        a.op("s_endpgm")




    def body_text(self) -> str:
        """The instructions of the kernel (prologue, loop, peeled last tiles, epilogue)."""
        a = Asm()
        a.raw(self.variant_header())
        a.section("prologue: kernargs (the whole struct of sage_co/abi.py, dword i in SGPR KARG_SGPR + i)")
        for mnemonic, first, offset, names in kernarg_loads(KARG_SGPR):
            n = int(mnemonic.removeprefix("s_load_b")) // 32
            dst = f"s{first}" if n == 1 else f"s[{first}:{first + n - 1}]"
            a.op(f"{mnemonic} {dst}, {self.kernarg}, 0x{offset:x}", names)
        self.lds_lane_constants(a)
        self.scalar_setup(a)

        vm, ds = WaitCounter(a, "s_wait_loadcnt"), WaitCounter(a, "s_wait_dscnt")
        a.section("prologue: Q^T fragments, k_scale(0), K(0) and V^T(0) -> LDS buffers 0")
        for i in range(self.QF):
            a.op(f"global_load_b128 {self.Q[4 * i:4 * i + 4]}, {self.q_off}, {self.s_qrow} offset:{B128 * i}")
            vm.issue(f"q{i}")
        a.op(f"s_cmp_eq_u32 {self.s_cnt}, 0", "no active key tile: zeros and lse -inf")
        a.op("s_cbranch_scc1 .Lempty")
        a.op(f"global_load_b32 {self.ks}, {self.ks_off}, {self.s_ksb}")
        vm.issue("ks0")
        a.op(f"s_lshl_b32 {self.s_koff[0]}, {self.s_Lc}, {log2(self.K_TILE_BYTES)}", f"* {self.K_TILE_BYTES} bytes")
        a.op(f"s_add_nc_u64 {self.s_kb}, {self.s_kh}, {self.s_koff}", "K(L[0])")
        self.stage_loads(a, vm, self.s_kb, self.s_vb, "p0")
        a.op(f"s_lshl_b32 {self.s_koff[0]}, {self.s_L1}, {log2(self.K_TILE_BYTES)}", f"* {self.K_TILE_BYTES} bytes")
        a.op(f"s_add_nc_u64 {self.s_kb}, {self.s_kh}, {self.s_koff}", "K(L[min(1, last)])")
        a.section("prologue: O = 0, m = -inf, l = 0")
        a.valu([Op.mov(self.O[j], "0") for j in range(self.O.n)] + [Op.mov(self.magic[j], self.s_magic) for j in range(8)] +
               [Op.mov(self.m[0], F32_NEG_INF), Op.mov(self.l_run, "0")])
        vm.wait_all()
        self.stage_stores(a, self.LDS_KBUF[0], self.LDS_VBUF[0])
        self.barrier(a, ds)
        a.section("prologue: K(1) staging in flight while QK^T(0) runs; then its scores are scaled")
        self.stage_loads(a, vm, self.s_kb, None, "p1")
        mat = Matrix(self.ring)
        self.qk_matrix(mat, self.LDS_KBUF[0], self.SA)
        wv = Weaver(a, mat, ds)
        wv.prefetch()
        wv.phase(len(self.QK_ORDER), [])
        a.op("s_wait_kmcnt 0", "q_scale")
        a.valu(self.scale_ops(self.SA))
        vm.wait_all()
        self.stage_stores(a, self.LDS_KBUF[1], None)
        self.barrier(a, ds)
        # the k_scale address points at tile 0; the loop adds 8 before each load of tile t+1
        a.section("main loop: two tiles per trip (register ping-pong SA/SB, m[0]/m[1], LDS buffers)")
        a.label(".Lloop")
        for parity in (0, 1):
            a.op(f"s_cmp_eq_u32 {self.s_t}, {self.s_last}")
            a.op(f"s_cbranch_scc1 .Llast_{parity}")
            self.body(a, parity, last=False)
        a.op("s_branch .Lloop")
        for parity in (0, 1):
            a.label(f".Llast_{parity}")
            self.body(a, parity, last=True)
            if parity == 0:
                a.op(f"v_mov_b32 {self.m[0]}, {self.m[1]}", "m of the last tile into m[0]")
            a.op("s_branch .Lepilogue")
        a.label(".Lempty")
        a.section("no active key tile (LUT count 0): O = 0, m = -inf, l = 0 -> zeros and lse -inf")
        a.valu([Op.mov(self.O[j], "0") for j in range(self.O.n)] + [Op.mov(self.m[0], F32_NEG_INF),
                                                                   Op.mov(self.l_run, "0")])
        a.op("s_wait_kmcnt 0", "q_scale (the smooth_k lse term)")
        a.label(".Lepilogue")
        self.epilogue(a, 0)
        # labels are local to the file: a family's .s holds several kernels, so each kernel's carry its tag
        return re.sub(r"\.L(\w+)", lambda m: f".L{self.cfg.tag}_{m.group(1)}", a.text())


    def variant_header(self) -> str:
        """The per-kernel part of the header: what this Config changes, LDS map, resources, register maps."""
        def regmap(rf):
            return "\n".join(f"//   {str(r):<12} {r.name:<12} {note}" for r, note in rf.table)
        waves = min(MAX_WAVES_PER_SIMD, VGPRS_PER_SIMD // (-(-self.NUM_VGPRS // VGPR_GRANULE) * VGPR_GRANULE))
        return f"""
// ==== {self.SYMBOL}: head dim (D_pad) {self.HEAD_DIM}, output {self.cfg.out_dtype}, P.V {self.cfg.pv_dtype} ===============================
// QK^T {len(self.QK_ORDER)} WMMA + PV {self.N_PV} WMMA ({WMMA_PV16 if self.PV16 else WMMA_PV}) per 64-key tile; O^T = {self.D_TILES} d-tiles x 8 VGPRs;
// Q^T {self.QF} x 16 B per lane; staging {self.STAGE_LOADS} + {self.V_LOADS} b128 loads per thread and tile; ring {self.RING} slots.
// LDS ({self.LDS_BYTES} B): kbuf0 @{self.LDS_KBUF[0]}, kbuf1 @{self.LDS_KBUF[1]} (K tiles {self.K_TILE_BYTES} B, rows of
// {self.K_ROW_BYTES} B), vbuf0 @{self.LDS_VBUF[0]}, vbuf1 @{self.LDS_VBUF[1]} (V^T tiles {self.V_TILE_BYTES} B, rows of {self.V_ROW_BYTES} B).
// Resources: {self.NUM_VGPRS} VGPRs -> {waves} waves/SIMD by registers; {self.LDS_BYTES} B LDS per 4-wave workgroup.
// Output: {self.cfg.out_dtype} RNE, saturating at +-{OUT_MAX[self.cfg.out_dtype][1]} (fp32 bits), d-tiles at or past
// head_dim (the kernarg; zero-padded channels) not stored.
//
// VGPR map:
{regmap(self.V)}
// SGPR map:
{regmap(self.S)}
"""

    def descriptor(self):
        """Descriptor + metadata of this symbol, from the ABI struct (pointers the kernel writes: abi.ATTENTION_OUTPUTS)."""
        args = [KernelArg(f.name, f.offset, f.kind, written=f.name in abi.ATTENTION_OUTPUTS) for f in ARGS.fields]
        return amdhsa_kernel(self.SYMBOL, args=args, kernarg_size=ARGS.size, lds_bytes=self.LDS_BYTES,
                             next_free_vgpr=self.NUM_VGPRS, next_free_sgpr=self.NUM_SGPRS,
                             max_flat_workgroup_size=THREADS, inst_pref_size=INST_PREF_SIZE,
                             uniform_work_group_size=True)


def family_header(kernels) -> str:
    """The .s header shared by the family: contract, kernarg table, data flow, loop schedule, cycle budget."""
    kt = "\n".join(f"//   | {f.offset:>6} | {f.name:<14} | {f.kind:<4} |" for f in ARGS.fields)
    variants = "\n".join(f"//   {k.SYMBOL:<49} head_dim {k.HEAD_DIM:>3}  out_dtype {k.cfg.out_dtype}  pv_dtype "
                         f"{k.cfg.pv_dtype:<4}  {k.NUM_VGPRS} VGPRs  {k.LDS_BYTES} B LDS  ring {k.RING}" for k in kernels)
    return f"""// gfx1201_sage_attention_fwd_asm_*: SageAttention forward (dense, causal, block-sparse) for gfx1201, hand-scheduled; a family.
// GENERATED by asm_src/gen_sage_attention_asm.py (asmdsl.py helpers) -- edit the generator, not this file.
// Hardware facts cite docs/rdna4.md sections (§WMMA, §Throughput, §Occupancy, §Memory, §Waits, §Hazards).
//
// Variants (one Config each; manifest key columns head_dim, out_dtype, pv_dtype):
{variants}
//
// Contract: the same operation, kernarg struct and launch geometry as asm_src/gfx1201_sage_attention.hip, and
// the same per-row arithmetic in the same order (scores = float(int dot) * (q_scale*k_scale); max; exp2(s - m);
// row sum p0+p1+..+p31 then + the other lane half; l = l*alpha + sum; fp8(p*448); per-accumulator PV chunk order
// 0,1,2,3; epilogue (O * (1/(448 l))) * v_scale [+ v_mean where flags bit 3 (smooth_v) and l != 0] -> bf16/fp16
// RNE saturating at +-the dtype's max (pv fp16: p16 = fp16(p) RNE, {WMMA_PV16}, O * (1/l)); lse =
// (m + log2 l)*ln2 [+ ln2*q.k_mean]): the output and LSE are bitwise the HIP kernel's on the emulator
// (tests/test_attention_asm.py).
//
// Launch: grid (seq_pad_q/{TILE_Q}, num_heads_q, batch), block {THREADS} = {WAVES} wave32; wave w owns queries
// 64*x + 16w .. +15 of query head y, batch z, and walks the active key tiles L[0] < L[1] < ... of its query tile's
// LUT row (kernarg lut: [count, L...], docs/numerics.md §Masks) of K/V head (y * kv_group_magic) >> 32 (GQA/MQA
// without a division: sage_co/abi.py kv_group_magic). count = 0: straight to the epilogue (zeros, lse -inf).
// Tile t of the walk is key tile L[t]: K/V^T/k_scale addresses come from L[t+1], L[min(t+2, last)] (SGPRs), and
// L[min(t+3, last)] is s_load-ed at the top of tile t and waited at its end (one LUT entry in flight).
// Masking: a tile whose end passes the wave's smallest row limit (seq_len_kv, or q0 + S_kv - S_q + 1 when
// causal) takes a uniform branch that sets s = -inf for keys >= the lane's row limit; m_use = 0 while m = -inf.
//
// Kernarg struct ({ARGS.size} bytes, no hidden args; sage_co/abi.py ATTENTION_FWD_ARGS), loaded whole into
// SGPRs s{KARG_SGPR}.. (dword i in s{KARG_SGPR}+i):
//   | offset | name           | kind |
{kt}
//   flags bit {abi.FLAG_LSE_BIT}: write lse; bit {abi.FLAG_SMOOTH_K_BIT}: lse adds ln2 * (q_int8*q_scale).k_mean;
//   bit {abi.FLAG_CAUSAL_BIT}: causal; bit {abi.FLAG_SMOOTH_V_BIT}: smooth_v, out adds v_mean (loaded always: pass k_mean without it)
//   out: element (b, i, h, d) at out + 2*(b*out_stride_b + i*out_stride_s + h*out_stride_h + d), d < head_dim
//
// Data flow (docs/rdna4.md §WMMA "SageAttention data flow", same index permutations as the .hip header):
//   S^T = K.Q^T: {WMMA_QK} (A = K rows from LDS, B = Q^T kept in VGPRs), 4 chunks x D_pad/16 d-steps; lane
//   (h, r) holds query r, keys 32h + 8c + e in chunk c, VGPR e. Softmax is in-lane + one v_permlanex16 exchange.
//   O^T += V^T.P^T: {WMMA_PV} (A = V^T rows from LDS, B = P^T packed in place over the chunk's first two
//   score VGPRs by v_cvt_pk_fp8_f32). O^T = D_pad/16 d-tiles x 8 VGPRs; alpha is one value per lane.
//   pv fp16: {WMMA_PV16} (A = 16 bytes of an fp16 V^T row = keys 32h + 8c.. of chunk c, B = P^T converted in
//   place by v_cvt_f16_f32 and packed by v_pack_b32_f16 into the chunk's first four score VGPRs: the 16-bit
//   operand's slot order holds the same keys in A and B, docs/rdna4.md §WMMA permutation rule). V^T rows in LDS
//   are 144 B (128 + 16 of padding instead of an XOR swizzle), each thread stages consecutive chunks of one row.
//
// Tiles: 16 queries x 64 keys per wave and step. The launch geometry (64 queries per 4-wave workgroup) fixes 16
// queries per wave; 32 queries per wave would need a different grid, or a split of the key loop over waves
// with an LDS merge, and ~300 VGPRs for two O^T and S^T sets (over the 256 limit). 16 queries leave room for
// what the schedule needs: two S^T sets (the next tile's QK^T accumulates while this tile's softmax runs).
//
// LDS: two K and two V^T tile buffers. K is staged one tile AHEAD of V^T: during step t the waves read K(t+1)
// from kbuf[(t+1)%2] and V^T(t) from vbuf[t%2] while K(t+2) and V^T(t+1) travel global -> VGPRs (issued at the
// top of step t, before its WMMA bursts) and are stored to kbuf[t%2] / vbuf[(t+1)%2] at its end: one barrier
// per step (pv fp16: ONE V^T tile, vbuf0 == vbuf1: the end of step t stores K(t+2), barrier, stores V^T(t+1),
// barrier -- two barriers, and 34 KiB of LDS instead of 52 at head dim 128: 3 workgroups per WGP instead of 2).
// 16-byte chunks are XOR-swizzled as in the .hip kernel (K: col ^ (row & 7) for 8 chunks per row,
// col ^ ((row >> 1) & 3) for 4; V^T: col ^ ((row >> 1) & 3)). Fragments go through a ring of {RING} ({RING_PV16_D128} for pv fp16 at head dim 128)
// ds_load_b128 slots, each reloaded right after its last WMMA.
//
// Loop schedule, step t (unrolled x2 so SA/SB, m[0]/m[1] and the LDS buffers alternate by name):
//   top      SALU addresses; global_load k_scale(t+1), K(min(t+2, last)), V^T(t+1)
//   phase X  ds_load the first {RING} K fragments of tile t+1; row max of tile t (VOPD max chains,
//            v_permlanex16, v_max3), alpha; then the QK^T(t+1) WMMAs with tile t's exp2 / row sum / *448 /
//            fp8 pack woven between them (each row-sum add shares a VOPD with the *448 of an earlier p), V^T
//            fragment loads of tile t as ring slots free up
//   rescale  O *= alpha only when some lane's max moved (v_cmp + s_cbranch_vccz; bitwise the same)
//   phase Y  the PV(t) WMMAs woven with the scaling of tile t+1's scores (cvt + VOPD multiply)
//   end      s_wait_loadcnt 0; ds_store K(t+2), V^T(t+1); s_wait_dscnt 0; s_barrier_signal/wait
//   The last step (peeled, outside the loop) runs softmax + PV only. Every step masks when its tile needs it.
//
// Cycle budget per 64-key tile per SIMD, head dim 128 (tools/perf_model.py's model: WMMA blocks VALU, VALU 1
// issue/clk, VOPD = 1 issue, TRANS 4 clk in its own pipe): 64 WMMA x 8 = 512 clk; VALU ~{{int->float 16 + scale
// 16 + max 17 + m/alpha 8 + exp-arg 16 + exp 32 + sum&*448 32 + pack 16 + l 4}} = ~157 issues, plus 32 when the
// O rescale runs (most tiles at moderate S: some lane of 16 rows finds a new max); TRANS 33 x 4 = 132 < VALU.
// ~670-700 clk/tile = 75-78 % of the 8-bit WMMA peak; the floor of this arithmetic is 512 + 132 = 644 (exp2
// once per score). Head dim 64 halves the WMMAs (256 clk) but not the softmax: its tile is VALU/TRANS-bound.
// LDS 20 KiB/tile/wave (head dim 128) = 320 clk, below the vector port. int->float: every chunk's first QK^T
// WMMA takes C = MAGIC_INT, so float(s_int) is an exact VOPD v_subrev_f32 instead of a v_cvt_f32_i32.
// Memory waits are placed where the data is first needed (§Waits: loads of a kind complete in order).
//
// Hazards (docs/rdna4.md §Hazards): no WMMA reads another WMMA's D as A/B (rule 1: A/B come from LDS, Q and
// the VALU-written P); D never overlaps A/B (rule 2); every VCC written by VALU and read again is preceded by
// s_wait_alu depctr_va_vcc(0) (rule 3); SGPRs read by VALU are written once in the prologue, followed by
// s_wait_alu depctr_sa_sdst(0); s_wait_dscnt 0 before every s_barrier_signal (rule 8); no scratch.
"""


def build(cfg: Config) -> str:
    """The assembly of one kernel (a complete code object with this one symbol)."""
    k = AttentionKernel(cfg)
    return code_object([(k.descriptor(), k.body_text())], header=family_header([k]), pad_with_s_code_end=True)


def build_family(configs=FAMILY) -> str:
    """The shipped code object: one symbol per Config (asm_src/kernels.toml names them with their keys)."""
    kernels = [AttentionKernel(cfg) for cfg in configs]
    return code_object([(k.descriptor(), k.body_text()) for k in kernels], header=family_header(kernels),
                       pad_with_s_code_end=True)


if __name__ == "__main__":
    sys.stdout.write(build_family())
