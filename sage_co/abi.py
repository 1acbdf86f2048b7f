"""The kernel ABI of every shipped kernel, in one torch-free module.

One source of truth for what the host and the kernels must agree on: the kernarg structs (fields in declaration
order with their kind and C parameter type; offsets and sizes follow from the order, sage_co/kernargs.py), the
launch tiles, the flag bits and the padding / scale-block constants. build_asm.py generates the HIP kernels'
header from this module (asm_src/generated/sage_abi.h: HIP_CONSTANTS, the selectors of sage_co/family.py and one
parameter / argument list macro per struct), the microbenchmarks' include (asm_src/generated/
gfx1201_microbench_abi.s: MICROBENCH_ASM_CONSTANTS, kernarg offsets, descriptors, metadata) and docs/abi.md; the asm
generator (asm_src/gen_sage_attention_asm.py)
emits its kernarg loads and metadata from these structs, the ops (sage_co/ops/*) pack them, and the loader
(before the first launch of a symbol) and tools/disasm_check.py compare them with every shipped symbol's metadata.

This module must not import torch (kernel authors build and lint without it: tests/build_abi/test_abi_module.py checks).
Structs are keyed by the op they serve (the `op` column of hsaco/manifest.json), so a symbol's struct is
found through the manifest, never through a symbol name assembled here.
"""
from __future__ import annotations

import struct

from .kernargs import Field, KernargStruct
from .rdna4 import LDS_MAX_PER_WG, WAVE_SIZE

# ---------------------------------------------------------------------------------------------- shared constants
SCALE_BLOCK = 32          # tokens per Q/K scale (docs/numerics.md §Q)
PAD = 64                  # S is padded to a multiple of the attention kernel's query/key tile
HEAD_DIM = 128            # the D_pad of D in 65..128 (the model's reference head dim)
HEAD_DIMS_NATIVE = (64, 128, 256)   # D_pad: the padded head dims of the layout (manifest key column head_dim)
HEAD_DIM_MAX = HEAD_DIMS_NATIVE[-1]   # the largest D; every D in 1..HEAD_DIM_MAX is zero-padded to d_pad(D)
# Which D_pad each kernel family is built for (docs/performance.md §Head dim 256): both attention kernels (HIP and
# asm) and the prepare kernels at every D_pad (prepare at 256 goes through the row in two 128-channel halves: no
# scratch); pv_dtype fp16 not at 256 (the HIP kernel's f16 V^T staging spills at D_pad 256: 220 B/lane of scratch
# with clang 22).
ATTENTION_HIP_HEAD_DIMS = HEAD_DIMS_NATIVE
ATTENTION_ASM_HEAD_DIMS = HEAD_DIMS_NATIVE
PV16_HEAD_DIMS = (64, 128)
PREPARE_HEAD_DIMS = HEAD_DIMS_NATIVE
# The prepare kernels read q/k/v rows in 16-byte groups of HEAD_DIM_GRANULE bf16/fp16 channels and the attention
# epilogues store exactly D channels: a D that is not a multiple of the granule is zero-padded on the host to
# one (sage_co/ops/prepare.py, a copy of q/k/v), the output is still written with D channels.
HEAD_DIM_GRANULE = 8
HEAD_DIM_STEP = 16        # the predictor kernels (sage_predict.*) need D a multiple of this (8-byte pooled loads)
# WAVE_SIZE: every kernel runs wave32 (sage_co/rdna4.py, docs/rdna4.md §Entry)

# ---------------------------------------------------------------------------------------------- attention
ATTENTION_OP = "sage_attention_fwd"
OUT_DTYPES = ("bf16", "fp16", "fp32")   # manifest key column out_dtype; head_dim takes HEAD_DIMS_NATIVE
OUT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}   # bytes per output element (the epilogue's stores)
PV_DTYPES = ("fp8", "fp16")     # manifest key column pv_dtype: the P.V WMMA (fp8 e4m3 with V scales, or f16)
QUERY_TILE = 64           # queries per workgroup: grid x = S_pad / QUERY_TILE
KEY_TILE = 64             # keys per loop step of every attention kernel
ATTENTION_WAVES = 4       # one workgroup = 4 wave32, wave w owns queries 16w..16w+15 of the query tile
WAVE_QUERIES = QUERY_TILE // ATTENTION_WAVES
ATTENTION_BLOCK = (ATTENTION_WAVES * WAVE_SIZE, 1, 1)
# The attention arithmetic's constants (docs/numerics.md §Attention arithmetic model; sage_co.reference, both kernels):
# P_OFF folds the fp8 range into the exponent (p = exp2(s - (m - P_OFF)) <= 2^8 for every m); the QK^T accumulators
# start at the bits of MAGIC (then hold the float MAGIC + s_int32); the one-FMA exp argument is used while every
# q_scale * k_scale of the tile is in (0, FMA_MAX_QK_SCALE]
P_OFF = 8.0 - 2.0 ** -7
MAGIC = 1.5 * 2.0 ** 23
FMA_MAX_QK_SCALE = 2.0 ** -6
# The running max m starts at M_INIT = -FLT_MAX, a finite value below every score (no -inf guard in the loop: t =
# m - P_OFF stays finite, exp2(M_INIT - m_new) is 0); it moves to a tile's larger max only when that grows it by more
# than RESCALE_TAU (log2 units): while it grows by <= RESCALE_TAU, p <= 2^(8.05 + RESCALE_TAU) < 448 stays fp8 and
# O is not rescaled (docs/numerics.md §Attention arithmetic model "Thresholded rescale")
M_INIT = -3.4028234663852886e38
RESCALE_TAU = 0.75
# The "exp2_valu" schedule (sage_co/family.py ATTENTION_SCHEDULES; docs/numerics.md §Attention arithmetic model
# "exp2 on the VALU"): the scores of the keys whose index mod 32 has its bit set in EXP2_VALU_KEYS take
# exp2_valu(a) instead of v_exp_f32: c = max(a, EXP2_VALU_MIN); r = c + MAGIC (round to the nearest integer n, the
# low bits of r hold n); f = c - (r - MAGIC) in [-0.5, 0.5] (exact); q = fma(fma(f, EXP2_VALU_C2, EXP2_VALU_C1), f,
# 1.0); bits(p) = (bits(r) << 23) + bits(q) (n added to the exponent). c = -127 gives exactly +0 (q(0) = 1.0).
# Max relative error 2.78e-3 on [-0.5, 0.5] (P is fp8 e4m3: 3 mantissa bits); every value an exact fp32.
EXP2_VALU_KEYS = 0xCCCCCCCC      # keys 8c + 2, 3, 6, 7 of every 8: half the scores, VOPD-paired (even, odd)
EXP2_VALU_MIN = -127.0
EXP2_VALU_C1 = struct.unpack("<f", struct.pack("<I", 0x3f34f4ae))[0]   # 0.70685851573944091796875
EXP2_VALU_C2 = 0.25

FLAG_LSE_BIT = 0          # kernarg `flags` bit 0: write lse
FLAG_SMOOTH_K_BIT = 1     # bit 1: lse adds ln2 * (q_int8 * q_scale) . k_mean
FLAG_CAUSAL_BIT = 2        # bit 2: row i sees keys j <= i + causal_offset (bottom-right aligned causal mask)
FLAG_SMOOTH_V_BIT = 3     # bit 3: smooth_v: the epilogue adds v_mean[d] to every row that saw a key
# bit 5: varlen (packed sequences, docs/numerics.md §Varlen): workgroup z = sequence b reads cu_seqlens_q[b], [b+1],
# cu_seqlens_kv[b], [b+1] on the device; its lengths replace seq_len_q / seq_len_kv / causal_offset, its key tiles
# are 0 .. count-1 counted in-kernel (the LUT is not read), its prepared rows start at packed_row(cu[b], b) of the
# packed [H, seq_pad, D_pad] tensors, its output rows at cu_seqlens_q[b] (lse row stride seq_len_q = total_q)
FLAG_VARLEN_BIT = 5
FLAG_LSE = 1 << FLAG_LSE_BIT
FLAG_SMOOTH_K = 1 << FLAG_SMOOTH_K_BIT
FLAG_CAUSAL = 1 << FLAG_CAUSAL_BIT
FLAG_SMOOTH_V = 1 << FLAG_SMOOTH_V_BIT
FLAG_VARLEN = 1 << FLAG_VARLEN_BIT
FLAG_MASK_BIT = 4         # bit 4: attn_mask: read the kind of each LUT entry from mask_kind (docs/numerics.md §Masks)
FLAG_MASK = 1 << FLAG_MASK_BIT
# The option -> flag table of the attention recipes (sage_co/ops/attention.py recipe and varlen_recipe, one for the
# dense, prepared and varlen calls): an option of the call's options object (sage_co.callspec OpSpec.typed) whose
# value is neither None nor False sets its bit. A runtime-flag option is one entry here (and its Option in
# sage_co/callspec.py). FLAG_SMOOTH_K (lse's smooth_k term when the host does not add it) and FLAG_VARLEN (the
# packed launch) are the recipes' own.
FLAG_OPTIONS = {
    "return_lse": FLAG_LSE,
    "is_causal": FLAG_CAUSAL,
    "smooth_v": FLAG_SMOOTH_V,
    "v_mean": FLAG_SMOOTH_V,      # sage_attention_fwd: the SagePrepared's v_mean (made by smooth_v)
    "attn_mask": FLAG_MASK,
}


def option_flags(options) -> int:
    """The kernarg `flags` bits FLAG_OPTIONS gives for an options object (attributes; an op without an option of
    the table leaves its bit clear)."""
    flags = 0
    for name, bit in FLAG_OPTIONS.items():
        value = getattr(options, name, None)
        if value is not None and value is not False:
            flags |= bit
    return flags
# The kind of one visited key tile (u32 mask_kind entries, parallel to the LUT entries): full (no element masked by
# attn_mask), partial (read the tile's bits: 64 query x 64 key bits, bit j of u32 word w of a row = key 32w + j
# visible), additive (partial + add the tile's log2-domain bias to the scores, the exact exp2 form). An all-masked
# tile is not in the LUT at all.
MASK_KIND_FULL = 0
MASK_KIND_PARTIAL_BIT = 0
MASK_KIND_ADDITIVE_BIT = 1
MASK_KIND_PARTIAL = 1 << MASK_KIND_PARTIAL_BIT
MASK_KIND_ADDITIVE = MASK_KIND_PARTIAL | (1 << MASK_KIND_ADDITIVE_BIT)
MASK_WORD_BITS = 32       # keys per u32 word of a mask bit row
# Active key tiles per query tile (docs/numerics.md §Masks): u32 rows [count, t_0 < t_1 < ... < t_{count-1}, ...]
# of seq_pad_kv / KEY_TILE + 1 entries (the count + one per key tile); the asm kernel reads 4 entries at a time, so
# the buffer carries LUT_TAIL spare entries past its last row.
LUT_TAIL = 3


def _in(name: str, ctype: str) -> Field:
    """A pointer the kernel only reads: the HIP parameter `const ctype *__restrict__ name`."""
    return Field(name, "ptr", ctype=f"const {ctype} *__restrict__")


def _ptr(name: str, ctype: str, restrict: bool = True) -> Field:
    """A pointer the kernel writes (or reads and writes): `ctype *__restrict__ name` (`ctype *name` when another
    pointer of the launch may alias it)."""
    return Field(name, "ptr", ctype=f"{ctype} *__restrict__" if restrict else f"{ctype} *")


ATTENTION_FWD_ARGS = KernargStruct("sage_attention_fwd", [
    _in("q", "signed char"),            # int8 [B, H_q, S_q_pad, D_pad]
    _in("k", "signed char"),            # int8 [B, H_kv, S_kv_pad, D_pad]
    _in("v", "unsigned char"),          # V^T [B, H_kv, D_pad, S_kv_pad]: fp8 e4m3fn (pv fp8) or fp16 (pv fp16)
    _in("q_scale", "float"),            # fp32 [B, H_q, S_q_pad/32]
    _in("k_scale", "float"),            # fp32 [B, H_kv, S_kv_pad/32]
    _in("k_mean", "float"),             # fp32 [B, H_kv, D_pad]
    _in("v_scale", "float"),            # fp32 [B, H_kv, D_pad] (pv fp8 only)
    _ptr("out", "unsigned short"),      # bf16/fp16/fp32, element (b, i, h, d) at out[b*sb + i*ss + h*sh + d], d < head_dim
    _ptr("lse", "float"),               # fp32 [B, H_q, S_q]; a 4-byte placeholder when flags bit 0 is clear
    Field("seq_len_q", "u32"),
    Field("seq_pad_q", "u32"),
    Field("seq_len_kv", "u32"),
    Field("seq_pad_kv", "u32"),
    Field("num_heads_q", "u32"),        # grid y
    Field("num_heads_kv", "u32"),
    Field("kv_group_magic", "u64"),     # kv_group_magic(H_q // H_kv): K/V head = (h * magic) >> 32
    Field("out_stride_b", "u32"),       # element strides of out
    Field("out_stride_s", "u32"),
    Field("out_stride_h", "u32"),
    Field("head_dim", "u32"),           # the real D (1 <= D <= D_pad): channels >= D are not stored
    Field("flags", "u32"),
    _in("lut", "u32"),                  # u32 LUT rows (above); row of (b, h, query tile x) at b*sb + h*sh + x*row_len
    Field("lut_stride_b", "u32"),       # element strides (0: rows shared by every batch / head)
    Field("lut_stride_h", "u32"),
    Field("causal_offset", "i32"),      # seq_len_kv - seq_len_q (read only with FLAG_CAUSAL)
    _in("v_mean", "float"),             # fp32 [B, H_kv, D_pad]: added only with FLAG_SMOOTH_V, but the asm kernel
                                        # loads it always: without smooth_v pass another [B, H_kv, D_pad] (k_mean)
    # attn_mask (docs/numerics.md §Masks), read only with FLAG_MASK (the kinds: always, zeros without FLAG_MASK)
    _in("mask_bits", "u32"),            # u32 bit rows [Bm, Hm, Rq, seq_pad_kv/32]: row (b, h, i) word w at
                                        # (b*sb + h*sh + i*ss) + w; bit j = key 32w + j visible (strides 0: broadcast)
    _in("mask_bias", "float"),          # f32 [Bm, Hm, Rq, seq_pad_kv]: fp32(bias) * fp32(log2 e), key at
                                        # (b*sb + h*sh + i*ss) * 32 + key (read on additive tiles only)
    _in("mask_kind", "u32"),            # u32 per LUT entry (same rows and strides as lut): MASK_KIND_* of the tile
    Field("mask_stride_b", "u32"),      # u32-word strides of the bit rows (the bias rows: x 32 floats)
    Field("mask_stride_h", "u32"),
    Field("mask_stride_s", "u32"),
    # read only with FLAG_VARLEN (the asm kernel loads them then, like the mask fields: not preloaded); without it
    # pass any valid pointer (the placeholder)
    _in("cu_seqlens_q", "u32"),         # int32 [B + 1] (B = grid z): sequence b's queries are rows cu[b]..cu[b+1]-1
    _in("cu_seqlens_kv", "u32"),        # int32 [B + 1]: its keys / values
])


def packed_row(cu_start: int, b: int) -> int:
    """The first prepared row of packed sequence b whose tokens start at cu_start (docs/numerics.md §Varlen):
    64 * ceil(cu_start / 64) + 64 * b. Sequence b's round_up(len_b, 64) padded rows end at most at
    64 * ceil(cu_{b+1} / 64) + 64 * b < packed_row(cu_{b+1}, b + 1), so no two sequences overlap, every sequence
    starts on a key tile (and a 32-token scale block), and the packed tensors have packed_rows(total, B) rows.
    Every kernel computes it from cu_seqlens alone, on the device: no prefix sum, no host read."""
    return PAD * -(-cu_start // PAD) + PAD * b


def packed_rows(total: int, batch: int) -> int:
    """Rows of a packed prepared tensor for `batch` sequences of `total` tokens: packed_row(total, batch), which
    bounds the end of the last sequence's padded rows."""
    return packed_row(total, batch)


MAX_QUERY_HEADS = 1 << 16       # grid y limit, and the range over which kv_group_magic divides exactly


def kv_group_magic(group: int) -> int:
    """ceil(2^32 / group): for every head h < 2^16, (h * magic) >> 32 == h // group. With magic * group = 2^32 + e,
    0 <= e < group: h * magic / 2^32 = h / group + h * e / (group * 2^32), and h * e < 2^32 keeps the second term
    below 1 / group, too small to carry h / group over the next integer. One multiply (s_mul_u64) replaces an
    integer division the hardware does not have."""
    if isinstance(group, bool) or not isinstance(group, int) or not 1 <= group < MAX_QUERY_HEADS:
        raise ValueError(f"kv group: expected an int in [1, {MAX_QUERY_HEADS}), got {group!r}")
    return -(-(1 << 32) // group)


# which fields are written by the kernel (the rest are read only; the asm metadata says so)
ATTENTION_OUTPUTS = ("out", "lse")

# ---------------------------------------------------------------------------------------------- prepare
# asm_src/gfx1201_sage_prepare.hip (sage_co/ops/prepare.py packs its kernargs): one launch (statistics, their fold,
# the quantization; issue 28), one manifest row per (head_dim = D_pad, in_dtype, rope_dim, rounding) key columns; a
# symbol serves every rope_dim (the kernarg) except where PREPARE_ROPE_IN_SYMBOL says.
# manifest key column rope_dim (0 = no RoPE); D_pad 64: 0, 32, 64 only; D_pad 256 all five: a RoPE wider than 128 is
# not offered at any D (sage_co/validate.py), and up to 128 the rotate-half partners sit in the row's first half,
# which the D_pad 256 prepare kernels norm and rope on its own (asm_src/gfx1201_sage_prepare.hip half_row)
PREPARE_ROPE_DIMS = (0, 32, 64, 96, 128)
# The (in_dtype, D_pad) whose prepare kernels take the RoPE width in the symbol (one symbol per width, suffix
# _rope<N>; the kernarg rope_dim then equals it): fp32 rows fill the register file at D_pad >= 128, where the union
# of all widths in one body spills. Every other symbol serves all widths of PREPARE_ROPE_DIMS through the kernarg
# rope_dim (asm_src/gfx1201_sage_prepare.hip rope_row), so the family compiles its shared code once, not per width.
PREPARE_ROPE_IN_SYMBOL = (("fp32", 128), ("fp32", 256))
PREPARE_IN_DTYPES = ("bf16", "fp16", "fp32")   # manifest key column in_dtype (fp32: docs/numerics.md §Inputs)
# manifest key column rounding = the norm_rope_rounding option (docs/numerics.md §Optional RMSNorm + rotate-half
# RoPE): "once" (the default: F.rms_norm, then RoPE in fp32 with fp32 tables) or "per_op" (the HF-transformers chain)
PREPARE_ROUNDINGS = ("once", "per_op")
PREPARE_ALIGN = 16        # the prepare kernels read and write with 16-byte vector accesses
PREPARE_MAX_CHUNKS = 64   # stats chunks per (b, K/V head): enough waves to fill the GPU, few partials to fold


def _strides(prefix: str) -> list[Field]:
    return [Field(f"{prefix}_sb", "i32"), Field(f"{prefix}_ss", "i32"), Field(f"{prefix}_sh", "i32")]


# The kernarg table of the header comment in asm_src/gfx1201_sage_prepare.hip; checked against the .co metadata
# before the first launch of each symbol. One launch (issue 28): work items are claimed through a ticket counter
# (counter[0]); tickets [0, n_stats) are the stats items (chunk, K/V head, batch x statistic), then every batch's Q
# tiles, then per batch its K tiles and V tiles, which wait for their head's fold (docs/rdna4.md §Forward progress).
PREPARE_OP = "sage_prepare"
PREPARE_ARGS = KernargStruct(PREPARE_OP, [
    _in("q", "u16"),                    # bf16/fp16/fp32 [B, S_q, H_q, D] (strided, flat view)
    _in("k", "u16"),                    # [B, S_kv, H_kv, D]
    _in("v", "u16"),
    _in("q_norm_w", "u16"),             # [D] (placeholder when q_norm == 0)
    _in("k_norm_w", "u16"),
    _in("cos", "u16"),                  # [max(S_q, S_kv), rope_dim] (placeholder without RoPE)
    _in("sin", "u16"),
    _ptr("k_mean", "float", restrict=False), # fp32 [B, H_kv, D_pad] out (the fold; zeros unless smooth_k), read by K tiles
    _ptr("v_inv", "float", restrict=False), # fp32 [B, H_kv, D_pad] workspace: 448 / amax (the fold), read by V tiles
    _ptr("q_int8", "i8"),               # int8 [B, H_q, S_q_pad, D_pad] out
    _ptr("k_int8", "i8"),               # int8 [B, H_kv, S_kv_pad, D_pad] out
    _ptr("q_scale", "float"),           # fp32 [B, H_q, S_q_pad / 32] out
    _ptr("k_scale", "float"),           # fp32 [B, H_kv, S_kv_pad / 32] out
    _ptr("v_t", "unsigned char"),       # V^T [B, H_kv, D_pad, S_kv_pad] out: fp8 e4m3fn, or fp16 when pv_fp16
    Field("q_mult", "f32"),             # float32(softmax_scale * log2 e)
    Field("eps", "f32"),
    Field("S_q", "i32"),
    Field("S_kv", "i32"),
    Field("H_q", "i32"),
    Field("H_kv", "i32"),
    Field("S_q_pad", "i32"),
    Field("S_kv_pad", "i32"),
    Field("D", "i32"),
    Field("q_norm", "i32"),
    Field("k_norm", "i32"),
    *_strides("q"), *_strides("k"), *_strides("v"),
    _ptr("v_mean", "float", restrict=False), # fp32 [B, H_kv, D_pad] out (the fold; zeros unless v_mode 1), subtracted
                                     # from V before fp8 (zeros: exact)
    Field("pv_fp16", "i32"),            # 1: V^T in fp16 (RNE from bf16/fp32, fp16 passed through), no v_inv / v_mean
    # varlen (docs/numerics.md §Varlen): q/k/v are packed [1, total, H, D]; batch b = sequence b reads cu_seqlens
    # [b], [b+1] on the device (its tokens, its length replacing S_q / S_kv, its own stats chunking); S_q_pad /
    # S_kv_pad are then the per-sequence tile span (round_up(max_seqlen, 64)), and the outputs are the packed
    # [H, rows, D_pad] (V^T [H_kv, D_pad, rows_kv]) with sequence b at row abi.packed_row(cu[b], b); stats items
    # past a sequence's chunks only count themselves (n_wg stays the launch's)
    _in("cu_seqlens_q", "u32"),         # int32 [B + 1] (read only when varlen)
    _in("cu_seqlens_kv", "u32"),        # int32 [B + 1]
    Field("varlen", "i32"),             # 1: packed sequences (above)
    Field("rows_q", "i32"),             # varlen: rows per head of q_int8 (abi.packed_rows(total_q, B))
    Field("rows_kv", "i32"),            # varlen: rows per head of k_int8 / columns of V^T
    # the statistics and their fold (the last stats item of each (b, K/V head) folds: reduce_if_last in the .hip)
    _ptr("ksum_part", "float"),         # fp32 [B, H_kv, n_chunks, D_pad] (smooth_k only; else placeholder)
    _ptr("vmax_part", "float"),         # fp32 [B, H_kv, n_chunks, D_pad] (not for pv fp16)
    _ptr("vmin_part", "float"),         # fp32 [B, H_kv, n_chunks, D_pad]: min v (smooth_v only; else placeholder)
    _ptr("vsum_part", "float"),         # fp32 [B, H_kv, n_chunks, D_pad]: sum of v (smooth_v only)
    _ptr("v_scale", "float"),           # fp32 [B, H_kv, D_pad] out
    _ptr("counter", "u32", restrict=False), # u32 [>= 1 + B * H_kv]: tickets, then per (b, K/V head): zeroed per launch
    Field("tiles_per_chunk", "i32"),
    Field("n_chunks", "i32"),
    Field("n_tens", "i32"),             # stats items per (chunk, head, batch): the bits set in `tens`
    Field("tens", "i32"),               # STATS_* bits: which statistics run (z % n_tens picks the n-th set bit)
    Field("n_wg", "i32"),               # stats items per (b, K/V head) = stats_x * n_tens: the last one folds
    Field("v_mode", "i32"),             # REDUCE_V_*: how v_scale / v_inv / v_mean are made
    Field("smooth_k", "i32"),           # 1: k_mean = the K sums / S_kv (else zeros)
    Field("stats_x", "i32"),            # stats items per (head, z): n_chunks, or 1 without statistics
    Field("n_stats", "i32"),            # stats items = stats_x * H_kv * B * n_tens: the first tickets
    Field("n_items", "i32"),            # tickets = workgroups of the launch (1-D grid)
    Field("B", "i32"),
    Field("rope_dim", "i32"),           # the RoPE width (0 = none): one symbol serves every width (but see below)
])
STATS_V_MAX = 1           # tens bit 0: per-channel max |v| (or, with STATS_V_SIGNED, max v and min v)
STATS_K_SUM = 2           # bit 1: per-channel sums of the normed/roped K (smooth_k)
STATS_V_SUM = 4           # bit 2: per-channel sums of V (smooth_v)
STATS_V_SIGNED = 8        # bit 3 (not a workgroup): V max pass keeps signed max and min (smooth_v)
REDUCE_V_FP8 = 0          # v_scale = max|v| / 448, v_mean = 0
REDUCE_V_SMOOTH = 1       # v_mean = sum / S, amax = max(|max v - v_mean|, |min v - v_mean|)
REDUCE_V_NONE = 2         # pv fp16: no V statistics; v_scale, v_inv, v_mean = 0


# ---------------------------------------------------------------------------------------------- lookup
# op (manifest column) -> the kernarg struct every symbol serving that op takes
STRUCTS: dict[str, KernargStruct] = {
    ATTENTION_OP: ATTENTION_FWD_ARGS,
    PREPARE_OP: PREPARE_ARGS,
}  # the predictor's structs are added at the end of this module (its own section)


def struct_for(op: str) -> KernargStruct:
    """The kernarg struct of the kernels serving `op`."""
    try:
        return STRUCTS[op]
    except KeyError:
        raise LookupError(f"no kernarg struct declared for op {op!r} in sage_co/abi.py; declared: "
                          f"{sorted(STRUCTS)}") from None


def s_pad(S: int) -> int:
    """S rounded up to a multiple of PAD; rows/columns past S are zero in every prepared tensor."""
    return (S + PAD - 1) // PAD * PAD


def d_pad(D: int) -> int:
    """The native head dim D (1..HEAD_DIM_MAX) is padded to: the smallest of HEAD_DIMS_NATIVE >= D."""
    for dp in HEAD_DIMS_NATIVE:
        if D <= dp:
            return dp
    raise ValueError(f"head dim {D}: the largest served is {HEAD_DIM_MAX}")


def d_granule(D: int) -> int:
    """D rounded up to a multiple of HEAD_DIM_GRANULE: the channels the prepare kernels read (the host pads)."""
    return -(-D // HEAD_DIM_GRANULE) * HEAD_DIM_GRANULE


# ---------------------------------------------------------------------------------------------- predictor
# asm_src/gfx1201_sage_predict.hip (sage_co/ops/predict.py packs them; docs/numerics.md §Predictor): pool ships one
# symbol per in_dtype (manifest key column), select one symbol.
PREDICT_POOL_OP = "sage_predict.pool"
PREDICT_IN_DTYPES = ("bf16", "fp16")   # manifest key column in_dtype of pool (fp32 q/k: no predictor symbol)
PREDICT_SELECT_OP = "sage_predict.select"
PREDICT_CHANNELS = 128    # pooled means are zero-padded to 128 channels (32 lanes x 4: the pool kernel's tree)
PREDICT_LDS_ENTRY = 12    # bytes of select's dynamic LDS per sorted entry: a u64 sort key + the u32 score/mass slot
PREDICT_MAX_LDS = LDS_MAX_PER_WG   # LDS one workgroup may allocate (sage_co/rdna4.py, docs/rdna4.md §Occupancy)
PREDICT_MAX_KEY_BLOCKS = 4096   # the largest power of two N with N * PREDICT_LDS_ENTRY <= PREDICT_MAX_LDS


def predict_sort_len(n_kv: int) -> int:
    """N: the select kernel's bitonic sort length, the next power of two >= max(n_kv, 2)."""
    return max(2, 1 << (n_kv - 1).bit_length())


PREDICT_MASS_BITS = 31    # integer masses: W = sum of n_kv masses stays below 2^31; cdf_fixed = cdf * 2^31
PREDICT_BLOCK = (WAVE_SIZE, 1, 1)

PREDICT_POOL_ARGS = KernargStruct(PREDICT_POOL_OP, [
    _in("q", "u16"),                    # bf16/fp16 [B, S_q, H_q, D] (strided, flat view)
    _in("k", "u16"),                    # [B, S_kv, H_kv, D]
    _ptr("q_mean", "float"),            # fp32 [B, H_q, n_q, 128] out
    _ptr("q_sim", "float"),             # fp32 [B, H_q, n_q] out
    _ptr("k_mean", "float"),            # fp32 [B, H_kv, n_kv, 128] out
    _ptr("k_sim", "float"),             # fp32 [B, H_kv, n_kv] out
    Field("S_q", "u32"),
    Field("S_kv", "u32"),
    Field("H_q", "u32"),
    Field("H_kv", "u32"),
    Field("n_q", "u32"),                # ceil(S_q / 64)
    Field("n_kv", "u32"),               # ceil(S_kv / 64)
    Field("D", "u32"),
    Field("q_sb", "u32"), Field("q_ss", "u32"), Field("q_sh", "u32"), # element strides
    Field("k_sb", "u32"), Field("k_ss", "u32"), Field("k_sh", "u32"),
])

PREDICT_SELECT_ARGS = KernargStruct(PREDICT_SELECT_OP, [
    _in("q_mean", "float"),             # from pool
    _in("q_sim", "float"),
    _in("k_mean", "float"),
    _in("k_sim", "float"),
    _ptr("mask", "u8"),                 # u8 [B, H_q, n_q, n_kv] out (0/1: torch.bool)
    Field("kv_group_magic", "u64"),     # kv_group_magic(H_q // H_kv)
    Field("n_q", "u32"),
    Field("n_kv", "u32"),
    Field("H_q", "u32"),
    Field("H_kv", "u32"),
    Field("D", "u32"),
    Field("score_scale", "f32"),        # float32(softmax_scale * log2 e)
    Field("sim_threshold", "f32"),      # float32(simthreshd)
    Field("mass_scale", "f32"),         # 2^k, k = min(24, 31 - ceil(log2 n_kv))
    Field("cdf_fixed", "u32"),          # max(1, rne(cdf_threshold * 2^31))
    Field("topk_count", "u32"),         # predict_topk_count(); 0 = cdf mode
    Field("causal", "u32"),             # 1: each query block ranks only the key blocks it sees causally
    Field("S_q", "u32"),                # the lengths that place the causal diagonal (read only when causal)
    Field("S_kv", "u32"),
])

STRUCTS[PREDICT_POOL_OP] = PREDICT_POOL_ARGS
STRUCTS[PREDICT_SELECT_OP] = PREDICT_SELECT_ARGS


def predict_mass_scale(n_kv: int) -> float:
    """2^k, k = min(24, 31 - ceil(log2 n_kv)): the integer masses rint(e * 2^k) of n_kv key blocks (e <= 1) sum below
    2^31 (docs/numerics.md §Predictor)."""
    return float(2 ** min(24, PREDICT_MASS_BITS - (n_kv - 1).bit_length()))


def predict_cdf_fixed(cdf_threshold: float) -> int:
    """cdf_threshold in 1.31 fixed point, at least 1 (the top-ranked key block is always kept)."""
    return max(1, round(float(cdf_threshold) * 2 ** PREDICT_MASS_BITS))


def predict_topk_count(topk: float | None, n_kv: int, cdf_threshold: float = 0.0) -> int:
    """Key blocks kept per query block by rank alone: ceil(topk * n_kv) (float64 product); n_kv when topk is None and
    cdf_threshold >= 1 (the whole mass: every block, also those whose integer mass rounds to 0); else 0 (cdf mode)."""
    import math
    if topk is not None:
        return math.ceil(float(topk) * n_kv)
    return n_kv if cdf_threshold >= 1.0 else 0


# ---------------------------------------------------------------------------------------------- the HIP header
# The bits of the float MAGIC (the QK^T accumulators' initial value in the HIP attention kernel)
MAGIC_BITS = int.from_bytes(struct.pack("<f", MAGIC), "little")

# The constants the HIP kernel sources take from the header build_asm.py generates from this module
# (asm_src/generated/sage_abi.h; docs/abi.md lists them): name -> how the header spells it ("int": a decimal int,
# "u32": an unsigned literal (bit masks), "hex": an int in hex, "float": an exact float literal)
HIP_CONSTANTS = {
    "QUERY_TILE": "int", "KEY_TILE": "int", "SCALE_BLOCK": "int", "HEAD_DIM_STEP": "int",
    "FLAG_LSE": "u32", "FLAG_SMOOTH_K": "u32", "FLAG_CAUSAL": "u32", "FLAG_SMOOTH_V": "u32", "FLAG_MASK": "u32",
    "FLAG_VARLEN": "u32", "MASK_KIND_PARTIAL": "u32", "MASK_KIND_ADDITIVE": "u32", "MASK_WORD_BITS": "int",
    "P_OFF": "float", "MAGIC": "float", "MAGIC_BITS": "hex", "FMA_MAX_QK_SCALE": "float", "M_INIT": "float",
    "RESCALE_TAU": "float", "EXP2_VALU_KEYS": "u32", "EXP2_VALU_MIN": "float", "EXP2_VALU_C1": "float",
    "EXP2_VALU_C2": "float",
    "PREPARE_MAX_CHUNKS": "int", "STATS_V_MAX": "u32", "STATS_K_SUM": "u32", "STATS_V_SUM": "u32",
    "STATS_V_SIGNED": "u32", "REDUCE_V_FP8": "int", "REDUCE_V_SMOOTH": "int", "REDUCE_V_NONE": "int",
    "PREDICT_CHANNELS": "int",
}


# ---------------------------------------------------------------------------------------------- microbenchmarks
# asm_src/gfx1201_microbench.s (issue 28; sage_co/microbench.py launches them, docs/performance.md
# §Microbenchmarks and refit): one symbol per benchmark (manifest key column bench), every one taking
# MICROBENCH_ARGS. The constants below are what the host and the assembly agree on: build_asm.py writes them, the
# kernarg offsets and size of MICROBENCH_ARGS, the descriptors and the metadata into the file the assembly includes
# (asm_src/generated/gfx1201_microbench_abi.s, MICROBENCH_ASM_CONSTANTS).
MICROBENCH_OP = "microbench"
MICROBENCH_BLOCK = (4 * WAVE_SIZE, 1, 1)    # 4 wave32 (.reqd_workgroup_size)
MICROBENCH_WAVES_PER_WG = MICROBENCH_BLOCK[0] // WAVE_SIZE
MICROBENCH_RECORD_DWORDS = 24   # u32 per lane: [0:8) matrix sum (l2_stream: load sums), [8:24) the unit block
MICROBENCH_MATRIX_DWORDS = 8
MICROBENCH_WMMA_PER_ITER = 4    # independent v_wmma_i32_16x16x16_iu8 chains per iteration
MICROBENCH_VALU_PER_ITER = 32   # v_add_nc_u32 per iteration (16 counters, +2 each)
MICROBENCH_TRANS_PER_ITER = 8   # v_exp_f32 per iteration
MICROBENCH_LDS_PER_ITER = 4     # ds_load_b128 per iteration (512 B each, conflict-free)
MICROBENCH_CHAIN_STEPS = 8      # dependent ds_load_b32 per iteration (lds_chain)
MICROBENCH_LDS_BYTES = 4096     # LDS table copied from src at entry (lds, wmma_lds, lds_chain)
MICROBENCH_LDS_LOAD_BYTES = 512     # one wave ds_load_b128 / global_load_b128: 32 lanes x 16 B
MICROBENCH_STREAM_LOADS = 4     # global_load_b128 per iteration (l2_stream)
MICROBENCH_STREAM_WAVE_BYTES = MICROBENCH_STREAM_LOADS * MICROBENCH_LDS_LOAD_BYTES   # 2 KiB per wave-iteration
MICROBENCH_BENCHES = ("wmma", "valu", "trans", "lds", "wmma_valu", "wmma_trans", "wmma_lds", "lds_chain",
                      "l2_stream", "trans_log", "trans_rcp", "vopd", "trans_valu", "clock")
MICROBENCH_VOPD_PER_ITER = 16   # v_dual_add_f32 pairs per iteration (vopd: 32 adds as the valu kernel's, paired)
MICROBENCH_LDS_BENCHES = ("lds", "wmma_lds", "lds_chain")   # the kernels that copy MICROBENCH_LDS_BYTES into LDS
# The TRANS kernels' exponents: float((lane & MICROBENCH_EXP_LANE_MASK) - MICROBENCH_EXP_BIAS + k), k = 0..7 (2^e
# exact for e in [-4, 10])
MICROBENCH_EXP_LANE_MASK = 7
MICROBENCH_EXP_BIAS = 4
MICROBENCH_OUTPUTS = ("out",)   # the one pointer the kernels write (the others read only; the metadata says so)

MICROBENCH_ARGS = KernargStruct(MICROBENCH_OP, [
    Field("a", "ptr"),                  # int8 [16][16] A, row-major (WMMA kernels; any 256 B otherwise)
    Field("b", "ptr"),                  # int8 [16][16] B^T, row-major
    Field("src", "ptr"),                # LDS kernels: MICROBENCH_LDS_BYTES for LDS; l2_stream: src_bytes read
    Field("out", "ptr"),                # u32 [waves, 32 lanes, MICROBENCH_RECORD_DWORDS]
    Field("iterations", "u32"),         # loop iterations per wave
    Field("src_bytes", "u32"),          # l2_stream: bytes of src (multiple of MICROBENCH_STREAM_WAVE_BYTES)
    Field("stride_bytes", "u32"),       # l2_stream: window advance per iteration (multiple of it, <= src_bytes)
])
STRUCTS[MICROBENCH_OP] = MICROBENCH_ARGS
# The constants of asm_src/generated/gfx1201_microbench_abi.s: the assembly's name -> the name here (each a `.set`)
MICROBENCH_ASM_CONSTANTS = {
    "LANES": "WAVE_SIZE", "WAVES_PER_WG": "MICROBENCH_WAVES_PER_WG", "RECORD_DWORDS": "MICROBENCH_RECORD_DWORDS",
    "MATRIX_DWORDS": "MICROBENCH_MATRIX_DWORDS", "LDS_BYTES": "MICROBENCH_LDS_BYTES",
    "LDS_LOAD_BYTES": "MICROBENCH_LDS_LOAD_BYTES", "STREAM_LOADS": "MICROBENCH_STREAM_LOADS",
    "STREAM_WAVE_BYTES": "MICROBENCH_STREAM_WAVE_BYTES", "CHAIN_STEPS": "MICROBENCH_CHAIN_STEPS",
    "EXP_LANE_MASK": "MICROBENCH_EXP_LANE_MASK", "EXP_BIAS": "MICROBENCH_EXP_BIAS",
}
