"""Host side of the block-mask predictor: q [B, S_q, H_q, D], k [B, S_kv, H_kv, D] (NHD views of bf16/fp16 tensors,
any strides with a contiguous last dim) in, bool block_mask [B, H_q, ceil(S_q/64), ceil(S_kv/64)] out
(docs/numerics.md §Predictor; the torch spec is sage_co.sparse.predict_block_mask(backend="torch")).

Two kernels of asm_src/gfx1201_sage_predict.hip (its header comment has the design):
  pool    grid (H_q * n_q + H_kv * n_kv, B, 1), one wave32 per 64-token block of Q or K: fp32 mean and
          self-similarity per block. One symbol per in_dtype (manifest key column).
  select  grid (n_q, H_q, B), one wave32 per query block, 12 * next_pow2(n_kv) bytes of dynamic LDS: pooled scores,
          integer softmax masses, a bitonic sort of the ranks, one mask byte per key block (is_causal: over the key
          blocks the query block sees causally; the others are 0).
The inputs are read in place through their element strides (sage_co.ops.prepare.flat_view: no copy unless the
vector loads cannot address the view).
"""
from __future__ import annotations

import torch

from .. import abi, registry, validate
from ..abi import (PREDICT_BLOCK, PREDICT_LDS_ENTRY, PREDICT_MAX_KEY_BLOCKS, PREDICT_POOL_ARGS, PREDICT_POOL_OP,
                   PREDICT_SELECT_ARGS, PREDICT_SELECT_OP, kv_group_magic)
from ..launch import launch, resolve_backend
from ..masks import BLOCK_KV, BLOCK_Q, n_tiles
from ..reference import q_multiplier
from ..prepared import DTYPE_KEYS, U32
from .prepare import flat_view

KERNEL = "hip"   # the predictor ships one (HIP) kernel per op


def select_lds_bytes(n_kv: int) -> int:
    """Dynamic LDS of the select kernel: N = abi.predict_sort_len(n_kv) entries of PREDICT_LDS_ENTRY bytes."""
    return abi.predict_sort_len(n_kv) * PREDICT_LDS_ENTRY


def check_predict_limits(sh: validate.Shapes) -> None:
    """What the kernels can serve, raised before any launch: n_kv key blocks fit the select kernel's LDS, the grids
    fit the HIP limits (docs/rdna4.md §HIP runtime: x < 2^31, y and z <= 65536) and the K/V group magic is exact."""
    n_q, n_kv = n_tiles(sh.S_q, BLOCK_Q), n_tiles(sh.S_kv, BLOCK_KV)
    if DTYPE_KEYS[sh.dtype] not in abi.PREDICT_IN_DTYPES:   # the pool kernel is built for 16-bit inputs only
        raise TypeError(f"q: the predictor kernel takes q/k in {abi.PREDICT_IN_DTYPES}, got {sh.dtype}; use "
                        f"backend=\"torch\" for the predictor on fp32 inputs")
    if sh.D % abi.HEAD_DIM_STEP or sh.D > abi.PREDICT_CHANNELS:
        raise ValueError(f"q: the predictor kernels pool head dims that are multiples of {abi.HEAD_DIM_STEP} up to "
                         f"{abi.PREDICT_CHANNELS}, got D = {sh.D}; use backend=\"torch\" for this head dim")
    if n_kv > PREDICT_MAX_KEY_BLOCKS:
        raise ValueError(f"k: S_kv = {sh.S_kv} makes {n_kv} key blocks; the predictor kernel ranks at most "
                         f"{PREDICT_MAX_KEY_BLOCKS} (S_kv <= {PREDICT_MAX_KEY_BLOCKS * BLOCK_KV}) in one workgroup's "
                         f"LDS (its bitonic sort); use backend=\"torch\" for longer sequences")
    if sh.H_q >= abi.MAX_QUERY_HEADS or sh.B > 65536:
        raise ValueError(f"q: B = {sh.B}, H_q = {sh.H_q} exceed the predictor's launch grid (B <= 65536, "
                         f"H_q < {abi.MAX_QUERY_HEADS})")
    if sh.H_q * n_q + sh.H_kv * n_kv >= 2 ** 31:
        raise ValueError(f"q: {sh.H_q} x {n_q} query blocks + {sh.H_kv} x {n_kv} key blocks exceed the pool grid "
                         f"(< 2^31)")


def run_predict(qn: torch.Tensor, kn: torch.Tensor, sh: validate.Shapes, softmax_scale: float, cdf_threshold: float,
                topk: float | None, simthreshd: float, backend: str | None = None,
                is_causal: bool = False) -> torch.Tensor:
    """The predictor kernels on validated NHD views (sage_co.sparse.predict_block_mask validates the arguments)."""
    check_predict_limits(sh)
    backend = resolve_backend(qn, backend)
    pool_sym = registry.find(PREDICT_POOL_OP, KERNEL, in_dtype=DTYPE_KEYS[sh.dtype]).symbol
    select_sym = registry.find(PREDICT_SELECT_OP, KERNEL).symbol
    n_q, n_kv = n_tiles(sh.S_q, BLOCK_Q), n_tiles(sh.S_kv, BLOCK_KV)
    (qf, qs), (kf, ks) = flat_view(qn), flat_view(kn)
    for name, st in (("q", qs), ("k", ks)):
        if max(st) >= U32:
            raise ValueError(f"{name}: element strides {st} exceed the predictor's u32 kernargs")
    dev = qn.device
    C = abi.PREDICT_CHANNELS
    f32 = torch.float32
    q_mean = torch.empty(sh.B, sh.H_q, n_q, C, dtype=f32, device=dev)
    q_sim = torch.empty(sh.B, sh.H_q, n_q, dtype=f32, device=dev)
    k_mean = torch.empty(sh.B, sh.H_kv, n_kv, C, dtype=f32, device=dev)
    k_sim = torch.empty(sh.B, sh.H_kv, n_kv, dtype=f32, device=dev)
    mask = torch.empty(sh.B, sh.H_q, n_q, n_kv, dtype=torch.uint8, device=dev)
    launch(pool_sym, PREDICT_POOL_ARGS, (sh.H_q * n_q + sh.H_kv * n_kv, sh.B, 1), PREDICT_BLOCK, {
        "q": qf, "k": kf, "q_mean": q_mean, "q_sim": q_sim, "k_mean": k_mean, "k_sim": k_sim,
        "S_q": sh.S_q, "S_kv": sh.S_kv, "H_q": sh.H_q, "H_kv": sh.H_kv, "n_q": n_q, "n_kv": n_kv, "D": sh.D,
        "q_sb": qs[0], "q_ss": qs[1], "q_sh": qs[2], "k_sb": ks[0], "k_ss": ks[1], "k_sh": ks[2],
    }, backend=backend)
    launch(select_sym, PREDICT_SELECT_ARGS, (n_q, sh.H_q, sh.B), PREDICT_BLOCK, {
        "q_mean": q_mean, "q_sim": q_sim, "k_mean": k_mean, "k_sim": k_sim, "mask": mask,
        "kv_group_magic": kv_group_magic(sh.H_q // sh.H_kv), "n_q": n_q, "n_kv": n_kv, "H_q": sh.H_q,
        "H_kv": sh.H_kv, "D": sh.D, "score_scale": q_multiplier(softmax_scale),
        "sim_threshold": simthreshd, "mass_scale": abi.predict_mass_scale(n_kv),
        "cdf_fixed": abi.predict_cdf_fixed(cdf_threshold),
        "topk_count": abi.predict_topk_count(topk, n_kv, cdf_threshold),
        "causal": int(is_causal), "S_q": sh.S_q, "S_kv": sh.S_kv,
    }, backend=backend, dynamic_lds=select_lds_bytes(n_kv))
    return mask.view(torch.bool)
