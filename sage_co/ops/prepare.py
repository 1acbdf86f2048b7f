"""Host side of the prepare stage: bf16 q/k/v [B, S, H, 128] in, SagePrepared out (docs/numerics.md §Prepare).

Three kernels of asm_src/gfx1201_sage_prepare.hip run in order (its header comment has the design):
  stats   grid (n_chunks, H, B * n_tens), one wave32 per chunk of 32-token tiles: per-channel max |v| partials,
          and with smooth_k the per-channel sums of the (normed/roped) K rows.
  reduce  grid (1, H, B), 128 threads (one per channel): folds the partials in chunk order into v_scale, 1/v_scale
          (448 / amax, a workspace for quant) and k_mean.
  quant   grid (S_pad / 32, H, 3 * B), one wave32 per 32-token tile of Q (z % 3 == 0), K (1) or V (2).
Each of stats and quant ships one symbol per rope_dim (suffix _rope32 .. _rope128; no suffix = no RoPE).
"""
from __future__ import annotations

import torch

from .. import validate
from ..kernargs import Field, KernargStruct
from ..launch import launch, resolve_backend
from ..prepared import HEAD_DIM, SCALE_BLOCK, SagePrepared, s_pad
from ..reference import q_multiplier

WAVE = (32, 1, 1)  # stats and quant: one wave32 per workgroup
REDUCE_BLOCK = (HEAD_DIM, 1, 1)  # reduce: one thread per channel
MAX_CHUNKS = 64  # stats chunks per (b, h): enough workgroups to fill the GPU, few partials for reduce to fold
ALIGN = 16  # the kernels read and write with 16-byte vector accesses


def _symbol(kind: str, rope_dim: int | None) -> str:
    return f"gfx1201_sage_prepare_{kind}" + (f"_rope{rope_dim}" if rope_dim else "")


# The kernarg tables of the header comment in asm_src/gfx1201_sage_prepare.hip; checked against the .co
# metadata before the first launch of each symbol.
def _stats_args(symbol: str) -> KernargStruct:
    return KernargStruct(symbol, [
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


def _quant_args(symbol: str) -> KernargStruct:
    return KernargStruct(symbol, [
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


ROPE_VARIANTS = (None, 32, 64, 96, 128)
STATS_ARGS = {rd: _stats_args(_symbol("stats", rd)) for rd in ROPE_VARIANTS}
QUANT_ARGS = {rd: _quant_args(_symbol("quant", rd)) for rd in ROPE_VARIANTS}
REDUCE_ARGS = KernargStruct(_symbol("reduce", None), [
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


def chunking(S: int) -> tuple[int, int]:
    """(tiles_per_chunk, n_chunks) for the stats pass over the ceil(S / 32) tiles that hold valid tokens."""
    tiles = -(-S // SCALE_BLOCK)
    per_chunk = -(-tiles // MAX_CHUNKS)
    return per_chunk, -(-tiles // per_chunk)


def _alloc(*shape, dtype, device) -> torch.Tensor:
    """Every output and workspace tensor: torch.empty, so the kernels must write every byte (tests replace this
    with an allocator that fills the memory with garbage to prove it)."""
    return torch.empty(*shape, dtype=dtype, device=device)


def _aligned(t: torch.Tensor | None) -> torch.Tensor | None:
    """A contiguous tensor whose data starts on a 16-byte boundary (a copy only for an offset view)."""
    if t is None or t.data_ptr() % ALIGN == 0:
        return t
    out = torch.empty_like(t, memory_format=torch.contiguous_format)
    if out.data_ptr() % ALIGN:
        raise RuntimeError(f"torch allocated a tensor at {out.data_ptr():#x}, not {ALIGN}-byte aligned")
    return out.copy_(t)


def run_prepare(q, k, v, softmax_scale=None, *, smooth_k=False, q_norm_weight=None, k_norm_weight=None, eps=1e-6,
                cos=None, sin=None, rope_dim=None, backend: str | None = None) -> SagePrepared:
    """The prepare stage on the shipped gfx1201 kernels; same arguments and result as sage_co.reference.sage_prepare.

    backend: None picks by device (CPU tensors -> "emu", gfx1201 -> "hip"). Every argument is validated before
    any kernel runs; outputs are fresh tensors on q's device, padded rows/columns zero."""
    chk = validate.check_prepare_args(q, k, v, softmax_scale, smooth_k=smooth_k, q_norm_weight=q_norm_weight,
                                      k_norm_weight=k_norm_weight, eps=eps, cos=cos, sin=sin, rope_dim=rope_dim)
    backend = resolve_backend(q, backend)
    B, S, H, rd = chk.B, chk.S, chk.H, chk.rope_dim
    Sp = s_pad(S)
    if 3 * B > 65536 or H > 65536:  # grid y = H, z = 3 * B (HIP limits, launcher_facts §4)
        raise ValueError(f"q: B = {B} and H = {H} exceed the launch grid (need 3 * B <= 65536 and H <= 65536)")
    if Sp >= 2 ** 31:
        raise ValueError(f"q: S = {S} is too long (S_pad must stay below 2^31)")
    dev = q.device
    q, k, v, cos, sin, q_norm_weight, k_norm_weight = map(_aligned, (q, k, v, cos, sin, q_norm_weight,
                                                                      k_norm_weight))
    placeholder = torch.zeros(ALIGN, dtype=torch.uint8, device=dev)  # for pointers a kernel never dereferences

    def f32(*shape):
        return _alloc(*shape, dtype=torch.float32, device=dev)

    q_int8 = _alloc(B, H, Sp, HEAD_DIM, dtype=torch.int8, device=dev)
    k_int8 = _alloc(B, H, Sp, HEAD_DIM, dtype=torch.int8, device=dev)
    q_scale, k_scale = f32(B, H, Sp // SCALE_BLOCK), f32(B, H, Sp // SCALE_BLOCK)
    k_mean, v_scale, v_inv = f32(B, H, HEAD_DIM), f32(B, H, HEAD_DIM), f32(B, H, HEAD_DIM)
    v_fp8 = _alloc(B, H, HEAD_DIM, Sp, dtype=torch.float8_e4m3fn, device=dev)
    per_chunk, n_chunks = chunking(S)
    vmax_part = f32(B, H, n_chunks, HEAD_DIM)
    ksum_part = f32(B, H, n_chunks, HEAD_DIM) if smooth_k else placeholder

    def opt(t):
        return placeholder if t is None else t

    n_tens = 2 if smooth_k else 1
    launch(_symbol("stats", rd), STATS_ARGS[rd], (n_chunks, H, B * n_tens), WAVE, {
        "k": k, "v": v, "k_norm_w": opt(k_norm_weight), "cos": opt(cos), "sin": opt(sin),
        "ksum_part": ksum_part, "vmax_part": vmax_part, "eps": eps, "S": S, "H": H,
        "tiles_per_chunk": per_chunk, "n_chunks": n_chunks, "n_tens": n_tens,
        "k_norm": int(k_norm_weight is not None),
    }, backend=backend)
    launch(_symbol("reduce", None), REDUCE_ARGS, (1, H, B), REDUCE_BLOCK, {
        "ksum_part": ksum_part, "vmax_part": vmax_part, "k_mean": k_mean, "v_scale": v_scale, "v_inv": v_inv,
        "H": H, "n_chunks": n_chunks, "S": S, "smooth_k": int(smooth_k),
    }, backend=backend)
    launch(_symbol("quant", rd), QUANT_ARGS[rd], (Sp // SCALE_BLOCK, H, 3 * B), WAVE, {
        "q": q, "k": k, "v": v, "q_norm_w": opt(q_norm_weight), "k_norm_w": opt(k_norm_weight),
        "cos": opt(cos), "sin": opt(sin), "k_mean": k_mean, "v_inv": v_inv,
        "q_int8": q_int8, "k_int8": k_int8, "q_scale": q_scale, "k_scale": k_scale, "v_fp8": v_fp8,
        "q_mult": q_multiplier(chk.softmax_scale), "eps": float(eps), "S": S, "H": H, "S_pad": Sp,
        "q_norm": int(q_norm_weight is not None), "k_norm": int(k_norm_weight is not None),
    }, backend=backend)
    return SagePrepared(q_int8, q_scale, k_int8, k_scale, k_mean, v_fp8, v_scale, S)
