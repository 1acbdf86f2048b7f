"""The kernel ABI of every shipped kernel, in one torch-free module.

One source of truth for what the host and the kernels must agree on: the kernarg structs (field, kind, byte
offset), the launch tiles, the flag bits and the padding / scale-block constants. The asm generator
(asm_src/gen_sage_attention_asm.py) emits its kernarg loads and metadata from these structs, the ops
(sage_co/ops/*) pack them, tools/disasm_check.py compares them with every shipped symbol's metadata, and the
HIP kernels' header tables are checked against them through that same metadata comparison.

This module must not import torch (kernel authors build and lint without it: tests/test_abi.py checks).
Structs are keyed by the op they serve (the `op` column of hsaco/manifest.json), so a symbol's struct is
found through the manifest, never through a symbol name assembled here.
"""
from __future__ import annotations

from .kernargs import Field, KernargStruct

# ---------------------------------------------------------------------------------------------- shared constants
SCALE_BLOCK = 32          # tokens per Q/K scale (docs/numerics.md §Q)
PAD = 64                  # S is padded to a multiple of the attention kernel's query/key tile
HEAD_DIM = 128            # the head dim of the v1 kernels
WAVE_SIZE = 32            # every kernel runs wave32 (docs/rdna4.md §Entry)

# ---------------------------------------------------------------------------------------------- attention
ATTENTION_OP = "sage_attention_fwd"
QUERY_TILE = 64           # queries per workgroup: grid x = S_pad / QUERY_TILE
KEY_TILE = 64             # keys per loop step of every attention kernel
ATTENTION_WAVES = 4       # one workgroup = 4 wave32, wave w owns queries 16w..16w+15 of the query tile
WAVE_QUERIES = QUERY_TILE // ATTENTION_WAVES
ATTENTION_BLOCK = (ATTENTION_WAVES * WAVE_SIZE, 1, 1)
FLAG_LSE_BIT = 0          # kernarg `flags` bit 0: write lse
FLAG_SMOOTH_K_BIT = 1     # bit 1: lse adds ln2 * (q_int8 * q_scale) . k_mean
FLAG_LSE = 1 << FLAG_LSE_BIT
FLAG_SMOOTH_K = 1 << FLAG_SMOOTH_K_BIT

ATTENTION_FWD_ARGS = KernargStruct("sage_attention_fwd", [
    Field("q", "ptr", 0),          # int8 [B, H, S_pad, 128]
    Field("k", "ptr", 8),          # int8 [B, H, S_pad, 128]
    Field("v", "ptr", 16),         # fp8 e4m3fn [B, H, 128, S_pad]
    Field("q_scale", "ptr", 24),   # fp32 [B, H, S_pad/32]
    Field("k_scale", "ptr", 32),   # fp32 [B, H, S_pad/32]
    Field("k_mean", "ptr", 40),    # fp32 [B, H, 128]
    Field("v_scale", "ptr", 48),   # fp32 [B, H, 128]
    Field("out", "ptr", 56),       # bf16 [B, S, H, 128]
    Field("lse", "ptr", 64),       # fp32 [B, H, S]; a 4-byte placeholder when flags bit 0 is clear
    Field("seq_len", "u32", 72),
    Field("seq_pad", "u32", 76),
    Field("num_heads", "u32", 80),
    Field("flags", "u32", 84),
], size=88)
# which fields are written by the kernel (the rest are read only; the asm metadata says so)
ATTENTION_OUTPUTS = ("out", "lse")

# ---------------------------------------------------------------------------------------------- prepare
# asm_src/gfx1201_sage_prepare.hip: stats, reduce and quant; stats and quant ship one symbol per rope_dim
# (manifest key column rope_dim; 0 = no RoPE).
PREPARE_ROPE_DIMS = (0, 32, 64, 96, 128)
PREPARE_ALIGN = 16        # the prepare kernels read and write with 16-byte vector accesses
PREPARE_MAX_CHUNKS = 64   # stats chunks per (b, h)

PREPARE_STATS_ARGS = KernargStruct("sage_prepare.stats", [
    Field("k", "ptr", 0),            # bf16 [B, S, H, 128]
    Field("v", "ptr", 8),            # bf16 [B, S, H, 128]
    Field("k_norm_w", "ptr", 16),    # bf16 [128] (placeholder when k_norm == 0)
    Field("cos", "ptr", 24),         # bf16 [S, rope_dim] (placeholder without RoPE)
    Field("sin", "ptr", 32),         # bf16 [S, rope_dim]
    Field("ksum_part", "ptr", 40),   # fp32 [B, H, n_chunks, 128] out (smooth_k only; else placeholder)
    Field("vmax_part", "ptr", 48),   # fp32 [B, H, n_chunks, 128] out
    Field("eps", "f32", 56),
    Field("S", "i32", 60),
    Field("H", "i32", 64),
    Field("tiles_per_chunk", "i32", 68),
    Field("n_chunks", "i32", 72),
    Field("n_tens", "i32", 76),      # 1: V only; 2: V and K (smooth_k)
    Field("k_norm", "i32", 80),
], size=84)

PREPARE_REDUCE_ARGS = KernargStruct("sage_prepare.reduce", [
    Field("ksum_part", "ptr", 0),    # fp32 [B, H, n_chunks, 128] in (read only when smooth_k)
    Field("vmax_part", "ptr", 8),    # fp32 [B, H, n_chunks, 128] in
    Field("k_mean", "ptr", 16),      # fp32 [B, H, 128] out (zeros unless smooth_k)
    Field("v_scale", "ptr", 24),     # fp32 [B, H, 128] out
    Field("v_inv", "ptr", 32),       # fp32 [B, H, 128] out, workspace for quant
    Field("H", "i32", 40),
    Field("n_chunks", "i32", 44),
    Field("S", "i32", 48),
    Field("smooth_k", "i32", 52),
], size=56)

PREPARE_QUANT_ARGS = KernargStruct("sage_prepare.quant", [
    Field("q", "ptr", 0),            # bf16 [B, S, H, 128]
    Field("k", "ptr", 8),
    Field("v", "ptr", 16),
    Field("q_norm_w", "ptr", 24),    # bf16 [128] (placeholder when q_norm == 0)
    Field("k_norm_w", "ptr", 32),
    Field("cos", "ptr", 40),         # bf16 [S, rope_dim] (placeholder without RoPE)
    Field("sin", "ptr", 48),
    Field("k_mean", "ptr", 56),      # fp32 [B, H, 128] in (from reduce)
    Field("v_inv", "ptr", 64),       # fp32 [B, H, 128] in (from reduce)
    Field("q_int8", "ptr", 72),      # int8 [B, H, S_pad, 128] out
    Field("k_int8", "ptr", 80),
    Field("q_scale", "ptr", 88),     # fp32 [B, H, S_pad / 32] out
    Field("k_scale", "ptr", 96),
    Field("v_fp8", "ptr", 104),      # fp8 e4m3fn [B, H, 128, S_pad] out
    Field("q_mult", "f32", 112),     # float32(softmax_scale * log2 e)
    Field("eps", "f32", 116),
    Field("S", "i32", 120),
    Field("H", "i32", 124),
    Field("S_pad", "i32", 128),
    Field("q_norm", "i32", 132),
    Field("k_norm", "i32", 136),
], size=140)

# ---------------------------------------------------------------------------------------------- lookup
# op (manifest column) -> the kernarg struct every symbol serving that op takes
STRUCTS: dict[str, KernargStruct] = {
    ATTENTION_OP: ATTENTION_FWD_ARGS,
    "sage_prepare.stats": PREPARE_STATS_ARGS,
    "sage_prepare.reduce": PREPARE_REDUCE_ARGS,
    "sage_prepare.quant": PREPARE_QUANT_ARGS,
}


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
