"""Host side of the prepare stage: q [B, S_q, H_q, D], k/v [B, S_kv, H_kv, D] (bf16 or fp16, NHD or HND, any
strides with a contiguous last dim) in, SagePrepared out (docs/numerics.md §Prepare).

Three kernels of asm_src/gfx1201_sage_prepare.hip run in order (its header comment has the design):
  stats   grid (n_chunks, H_kv, B * n_tens), one wave32 per chunk of 32-token tiles: per-channel max |v| partials
          (smooth_v: max v and min v, and the sums of V), and with smooth_k the per-channel sums of the
          (normed/roped) K rows. Not launched for pv_dtype="fp16" without smooth_k.
  reduce  grid (1, H_kv, B), D_pad threads (one per channel): folds the partials in chunk order into v_scale,
          1/v_scale (448 / amax, a workspace for quant), k_mean and v_mean.
  quant   grid (H_q * S_q_pad/32 + 2 * H_kv * S_kv_pad/32, B, 1), one wave32 per 32-token tile of Q, K or V.
stats and quant ship one symbol per (head_dim = D_pad, in_dtype, rope_dim), selected by those manifest keys.
The inputs are read in place: each kernel gets a flat view of the tensor's memory and its element strides, so an
HND view of NHD memory (or any other strided view) costs no copy. Only a view the 16-byte vector loads cannot
address (data not 16-byte aligned, or a stride that is not a multiple of 8 elements) is copied first.
"""
from __future__ import annotations

import torch

from .. import registry, validate
from ..abi import (PREPARE_ALIGN, PREPARE_MAX_CHUNKS, REDUCE_V_FP8, REDUCE_V_NONE, REDUCE_V_SMOOTH, STATS_K_SUM,
                   STATS_V_MAX, STATS_V_SIGNED, STATS_V_SUM)
from ..abi import PREPARE_QUANT_ARGS as QUANT_ARGS
from ..abi import PREPARE_REDUCE_ARGS as REDUCE_ARGS
from ..abi import PREPARE_STATS_ARGS as STATS_ARGS  # noqa: F401  (the structs live in sage_co/abi.py)
from ..launch import launch, resolve_backend
from ..prepared import SCALE_BLOCK, SagePrepared, d_pad, s_pad
from ..reference import norm_rope, q_multiplier, smooth_k_lse_correction

WAVE = (32, 1, 1)  # stats and quant: one wave32 per workgroup
MAX_CHUNKS = PREPARE_MAX_CHUNKS
ALIGN = PREPARE_ALIGN
ELEMS_PER_LOAD = ALIGN // 2  # 16-bit elements per 16-byte load: strides must be multiples of this
DTYPE_KEYS = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def kernel_symbol(op: str, **keys) -> str:
    """The symbol of the shipped kernel serving `op` with exactly these manifest key columns (head_dim, in_dtype,
    rope_dim): sage_co.registry.find, the one lookup every launch goes through."""
    return registry.find(op, "hip", **keys).symbol


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


def flat_view(t: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """An NHD view t [B, S, H, D] (stride(-1) == 1) -> (a contiguous 1-D view of the memory it spans, starting at
    its first element, and its (batch, token, head) element strides). No copy unless the 16-byte loads cannot
    address it (see the module docstring); strides of size-1 dims are 0 (never multiplied by a nonzero index)."""
    strides = tuple(st if n > 1 else 0 for n, st in zip(t.shape[:3], t.stride()[:3]))
    if t.data_ptr() % ALIGN or any(st % ELEMS_PER_LOAD for st in strides):
        t = _aligned(t.contiguous()) if t.is_contiguous() else t.contiguous()
        t = _aligned(t)
        strides = tuple(st if n > 1 else 0 for n, st in zip(t.shape[:3], t.stride()[:3]))
    extent = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    return t.as_strided((extent,), (1,)), strides


def run_prepare(q, k, v, softmax_scale=None, *, layout="NHD", smooth_k=False, q_norm_weight=None,
                k_norm_weight=None, eps=1e-6, cos=None, sin=None, rope_dim=None, smooth_v=False, pv_dtype="fp8",
                backend: str | None = None) -> SagePrepared:
    """The prepare stage on the shipped gfx1201 kernels; same arguments and result as sage_co.reference.sage_prepare.

    smooth_v: V's per-channel mean (v_mean) is subtracted before fp8 (stats also takes V's sums, max and min);
    pv_dtype="fp16": quant writes V^T in fp16 and no V statistics run (stats only for smooth_k, if at all).
    backend: None picks by device (CPU tensors -> "emu", gfx1201 -> "hip"). Every argument is validated before
    any kernel runs; outputs are fresh tensors on q's device, padded rows/columns/channels zero."""
    chk = validate.check_prepare_args(q, k, v, softmax_scale, layout=layout, smooth_k=smooth_k,
                                      q_norm_weight=q_norm_weight, k_norm_weight=k_norm_weight, eps=eps, cos=cos,
                                      sin=sin, rope_dim=rope_dim, smooth_v=smooth_v, pv_dtype=pv_dtype)
    pv16 = pv_dtype == "fp16"
    validate.check_v_fp16_range(chk.v, pv_dtype)   # before any kernel: fp16 V has no scale (docs/numerics.md §Finite range)
    backend = resolve_backend(q, backend)
    sh = chk.shapes
    B, H_q, H_kv, D = sh.B, sh.H_q, sh.H_kv, sh.D
    Sq, Skv, Dp = s_pad(sh.S_q), s_pad(sh.S_kv), d_pad(D)
    check_launch_limits(sh)
    keys = dict(head_dim=Dp, in_dtype=DTYPE_KEYS[sh.dtype], rope_dim=chk.rope_dim or 0)
    stats_sym, quant_sym = kernel_symbol("sage_prepare.stats", **keys), kernel_symbol("sage_prepare.quant", **keys)
    reduce_sym = kernel_symbol("sage_prepare.reduce")
    dev = q.device
    (qf, qs), (kf, ks), (vf, vs) = flat_view(chk.q), flat_view(chk.k), flat_view(chk.v)
    cos, sin, q_norm_weight, k_norm_weight = map(_aligned, (cos, sin, q_norm_weight, k_norm_weight))
    placeholder = torch.zeros(ALIGN, dtype=torch.uint8, device=dev)  # for pointers a kernel never dereferences

    def f32(*shape):
        return _alloc(*shape, dtype=torch.float32, device=dev)

    q_int8 = _alloc(B, H_q, Sq, Dp, dtype=torch.int8, device=dev)
    k_int8 = _alloc(B, H_kv, Skv, Dp, dtype=torch.int8, device=dev)
    q_scale, k_scale = f32(B, H_q, Sq // SCALE_BLOCK), f32(B, H_kv, Skv // SCALE_BLOCK)
    k_mean, v_scale, v_inv, v_mean = f32(B, H_kv, Dp), f32(B, H_kv, Dp), f32(B, H_kv, Dp), f32(B, H_kv, Dp)
    v_t = _alloc(B, H_kv, Dp, Skv, dtype=torch.float16 if pv16 else torch.float8_e4m3fn, device=dev)
    per_chunk, n_chunks = chunking(sh.S_kv)
    vmax_part = placeholder if pv16 else f32(B, H_kv, n_chunks, Dp)
    ksum_part = f32(B, H_kv, n_chunks, Dp) if smooth_k else placeholder
    vmin_part, vsum_part = (f32(B, H_kv, n_chunks, Dp), f32(B, H_kv, n_chunks, Dp)) if smooth_v else \
        (placeholder, placeholder)

    def opt(t):
        return placeholder if t is None else t

    def strides(prefix, st):
        return {f"{prefix}_sb": st[0], f"{prefix}_ss": st[1], f"{prefix}_sh": st[2]}

    tens = (0 if pv16 else STATS_V_MAX) | (STATS_K_SUM if smooth_k else 0) | \
        ((STATS_V_SUM | STATS_V_SIGNED) if smooth_v else 0)
    n_tens = bin(tens & (STATS_V_MAX | STATS_K_SUM | STATS_V_SUM)).count("1")
    if n_tens:   # pv fp16 without smooth_k needs no statistics at all
        launch(stats_sym, STATS_ARGS, (n_chunks, H_kv, B * n_tens), WAVE, {
            "k": kf, "v": vf, "k_norm_w": opt(k_norm_weight), "cos": opt(cos), "sin": opt(sin),
            "ksum_part": ksum_part, "vmax_part": vmax_part, "eps": float(eps), "S": sh.S_kv, "H": H_kv,
            "tiles_per_chunk": per_chunk, "n_chunks": n_chunks, "n_tens": n_tens,
            "k_norm": int(k_norm_weight is not None), "D": D, **strides("k", ks), **strides("v", vs),
            "vmin_part": vmin_part, "vsum_part": vsum_part, "tens": tens,
        }, backend=backend)
    v_mode = REDUCE_V_NONE if pv16 else (REDUCE_V_SMOOTH if smooth_v else REDUCE_V_FP8)
    launch(reduce_sym, REDUCE_ARGS, (1, H_kv, B), (Dp, 1, 1), {
        "ksum_part": ksum_part, "vmax_part": vmax_part, "k_mean": k_mean, "v_scale": v_scale, "v_inv": v_inv,
        "H": H_kv, "n_chunks": n_chunks, "S": sh.S_kv, "smooth_k": int(smooth_k), "D_pad": Dp,
        "vmin_part": vmin_part, "vsum_part": vsum_part, "v_mean": v_mean, "v_mode": v_mode,
    }, backend=backend)
    launch(quant_sym, QUANT_ARGS, quant_grid(sh), WAVE, {
        "q": qf, "k": kf, "v": vf, "q_norm_w": opt(q_norm_weight), "k_norm_w": opt(k_norm_weight),
        "cos": opt(cos), "sin": opt(sin), "k_mean": k_mean, "v_inv": v_inv,
        "q_int8": q_int8, "k_int8": k_int8, "q_scale": q_scale, "k_scale": k_scale, "v_t": v_t,
        "q_mult": q_multiplier(chk.softmax_scale), "eps": float(eps), "S_q": sh.S_q, "S_kv": sh.S_kv,
        "H_q": H_q, "H_kv": H_kv, "S_q_pad": Sq, "S_kv_pad": Skv, "D": D,
        "q_norm": int(q_norm_weight is not None), "k_norm": int(k_norm_weight is not None),
        **strides("q", qs), **strides("k", ks), **strides("v", vs), "v_mean": v_mean, "pv_fp16": int(pv16),
    }, backend=backend)
    lse_corr = None
    if smooth_k:   # host side, in torch, from the original q (after the norm / RoPE spec the quant kernel applies)
        qn = norm_rope(chk.q, q_norm_weight, eps, cos, sin, chk.rope_dim)
        lse_corr = smooth_k_lse_correction(qn, k_mean, chk.softmax_scale)
    return SagePrepared(q_int8, q_scale, k_int8, k_scale, k_mean, v_t, v_scale, sh.S_q, sh.S_kv, D, sh.dtype,
                        v_mean if smooth_v else None, lse_corr)


def quant_grid(sh: validate.Shapes) -> tuple[int, int, int]:
    """Q tiles (head-major), then K tiles, then V tiles along x; batch along y."""
    tq, tkv = s_pad(sh.S_q) // SCALE_BLOCK, s_pad(sh.S_kv) // SCALE_BLOCK
    return (sh.H_q * tq + 2 * sh.H_kv * tkv, sh.B, 1)


def check_launch_limits(sh: validate.Shapes) -> None:
    """The grids fit the HIP limits (docs/rdna4.md §HIP runtime: x < 2^31, y and z <= 65536) and every index the kernels
    compute in 32 bits stays below 2^31. Raised before any launch, naming q."""
    if sh.B * 2 > 65536 or sh.H_kv > 65536:
        raise ValueError(f"q: B = {sh.B} and H_kv = {sh.H_kv} exceed the launch grid (need 2 * B <= 65536 and "
                         f"H_kv <= 65536)")
    if max(s_pad(sh.S_q), s_pad(sh.S_kv)) >= 2 ** 31 or quant_grid(sh)[0] >= 2 ** 31:
        raise ValueError(f"q: S_q = {sh.S_q}, S_kv = {sh.S_kv} with {sh.H_q} heads are too long for the prepare "
                         f"launch (S_pad and heads * S_pad / 32 must stay below 2^31)")
