"""Host side of the prepare stage: bf16 q/k/v [B, S, H, 128] in, SagePrepared out (docs/numerics.md §Prepare).

Three kernels of asm_src/gfx1201_sage_prepare.hip run in order (its header comment has the design):
  stats   grid (n_chunks, H, B * n_tens), one wave32 per chunk of 32-token tiles: per-channel max |v| partials,
          and with smooth_k the per-channel sums of the (normed/roped) K rows.
  reduce  grid (1, H, B), 128 threads (one per channel): folds the partials in chunk order into v_scale, 1/v_scale
          (448 / amax, a workspace for quant) and k_mean.
  quant   grid (S_pad / 32, H, 3 * B), one wave32 per 32-token tile of Q (z % 3 == 0), K (1) or V (2).
Each of stats and quant ships one symbol per rope_dim (manifest key column rope_dim, 0 = no RoPE): the symbol
of every launch comes from sage_co.registry.find(op, **keys), the kernarg structs from sage_co/abi.py.
"""
from __future__ import annotations

import torch

from .. import registry, validate
from ..abi import (HEAD_DIM, PREPARE_ALIGN, PREPARE_MAX_CHUNKS, PREPARE_QUANT_ARGS, PREPARE_REDUCE_ARGS,
                   PREPARE_STATS_ARGS, SCALE_BLOCK, s_pad)
from ..launch import launch, resolve_backend
from ..prepared import SagePrepared
from ..reference import q_multiplier

WAVE = (32, 1, 1)  # stats and quant: one wave32 per workgroup
REDUCE_BLOCK = (HEAD_DIM, 1, 1)  # reduce: one thread per channel
MAX_CHUNKS = PREPARE_MAX_CHUNKS  # stats chunks per (b, h): enough workgroups to fill the GPU, few partials to fold
ALIGN = PREPARE_ALIGN  # the kernels read and write with 16-byte vector accesses


def _kernel(kind: str, **keys) -> str:
    """The symbol serving sage_prepare.<kind> with these manifest keys (rope_dim: 0 = no RoPE)."""
    return registry.find(f"sage_prepare.{kind}", "hip", **keys).symbol


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
    launch(_kernel("stats", rope_dim=rd or 0), PREPARE_STATS_ARGS, (n_chunks, H, B * n_tens), WAVE, {
        "k": k, "v": v, "k_norm_w": opt(k_norm_weight), "cos": opt(cos), "sin": opt(sin),
        "ksum_part": ksum_part, "vmax_part": vmax_part, "eps": eps, "S": S, "H": H,
        "tiles_per_chunk": per_chunk, "n_chunks": n_chunks, "n_tens": n_tens,
        "k_norm": int(k_norm_weight is not None),
    }, backend=backend)
    launch(_kernel("reduce"), PREPARE_REDUCE_ARGS, (1, H, B), REDUCE_BLOCK, {
        "ksum_part": ksum_part, "vmax_part": vmax_part, "k_mean": k_mean, "v_scale": v_scale, "v_inv": v_inv,
        "H": H, "n_chunks": n_chunks, "S": S, "smooth_k": int(smooth_k),
    }, backend=backend)
    launch(_kernel("quant", rope_dim=rd or 0), PREPARE_QUANT_ARGS, (Sp // SCALE_BLOCK, H, 3 * B), WAVE, {
        "q": q, "k": k, "v": v, "q_norm_w": opt(q_norm_weight), "k_norm_w": opt(k_norm_weight),
        "cos": opt(cos), "sin": opt(sin), "k_mean": k_mean, "v_inv": v_inv,
        "q_int8": q_int8, "k_int8": k_int8, "q_scale": q_scale, "k_scale": k_scale, "v_fp8": v_fp8,
        "q_mult": q_multiplier(chk.softmax_scale), "eps": float(eps), "S": S, "H": H, "S_pad": Sp,
        "q_norm": int(q_norm_weight is not None), "k_norm": int(k_norm_weight is not None),
    }, backend=backend)
    return SagePrepared(q_int8, q_scale, k_int8, k_scale, k_mean, v_fp8, v_scale, S)
