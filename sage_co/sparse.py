"""Block masks for sparse attention (docs/numerics.md §Masks): SpargeAttn's prediction from pooled Q/K, and static
patterns for video token grids. Every function returns a bool block_mask [B, H_q, ceil(S_q / BLOCK_Q),
ceil(S_kv / BLOCK_KV)] for sage_attention(..., block_mask=...).

predict_block_mask is the torch implementation (runs on any device, here the reference); a gfx1201 kernel for it is
not shipped yet: its cost is O(S^2 / 64^2 * D) pooled-score work, small next to the attention it prunes.
"""
from __future__ import annotations

import math

import torch

from . import validate
from .masks import BLOCK_KV, BLOCK_Q, n_tiles


def _pool(x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x fp32 [B, H, S, D] -> (mean per block [B, H, n, D], self-similarity per block [B, H, n]: the mean cosine
    similarity of every token pair of the block, ||sum_t x_t/|x_t| ||^2 / n^2, tail blocks over their real tokens)."""
    B, H, S, D = x.shape
    n = n_tiles(S, block)
    pad = n * block - S
    xp = torch.nn.functional.pad(x, (0, 0, 0, pad)).view(B, H, n, block, D)
    cnt = torch.full((n,), float(block), device=x.device)
    cnt[-1] = block - pad
    mean = xp.sum(3) / cnt[:, None]
    unit = torch.nn.functional.normalize(xp, dim=-1)           # padded rows stay 0
    sim = unit.sum(3).pow(2).sum(-1) / cnt.pow(2)
    return mean, sim


def predict_block_mask(q: torch.Tensor, k: torch.Tensor, *, cdf_threshold: float = 0.9, topk: float | None = None,
                       simthreshd: float = 0.6, softmax_scale: float | None = None,
                       layout: str = "NHD") -> torch.Tensor:
    """SpargeAttn's block mask: Q and K mean-pooled per BLOCK_Q / BLOCK_KV tokens; pooled scores
    softmax(q_pool . k_pool * softmax_scale) per query block; each query block keeps the smallest set of key blocks
    whose probability mass reaches cdf_threshold (or, with topk, the ceil(topk * n_kv) largest). Blocks whose
    tokens are not self-similar (mean pairwise cosine < simthreshd) cannot be summarised by their mean: such a
    query block keeps every key block, such a key block is kept by every query block."""
    sh, qn, kn, _ = validate.check_qkv(q, k, k, layout)
    scale = validate.check_softmax_scale(softmax_scale, sh.D)
    if not (isinstance(cdf_threshold, (int, float)) and 0.0 < cdf_threshold <= 1.0):
        raise ValueError(f"cdf_threshold: expected a number in (0, 1], got {cdf_threshold!r}")
    if topk is not None and not (isinstance(topk, (int, float)) and 0.0 < topk <= 1.0):
        raise ValueError(f"topk: expected None or a fraction in (0, 1], got {topk!r}")
    if not isinstance(simthreshd, (int, float)) or not -1.0 <= simthreshd <= 1.0:
        raise ValueError(f"simthreshd: expected a number in [-1, 1], got {simthreshd!r}")
    g = torch.arange(sh.H_q, device=q.device) // (sh.H_q // sh.H_kv)
    qp, qsim = _pool(qn.float().transpose(1, 2), BLOCK_Q)
    kp, ksim = _pool(kn.float().transpose(1, 2), BLOCK_KV)
    kp, ksim = kp[:, g], ksim[:, g]
    prob = torch.softmax((qp @ kp.transpose(-1, -2)) * scale, dim=-1)        # [B, H, nq, nk]
    nk = prob.shape[-1]
    order = prob.argsort(dim=-1, descending=True)
    sorted_p = prob.gather(-1, order)
    if topk is not None:
        keep_sorted = torch.arange(nk, device=q.device) < math.ceil(topk * nk)
        keep_sorted = keep_sorted.expand_as(sorted_p)
    else:
        before = sorted_p.cumsum(-1) - sorted_p       # mass of the blocks ranked above this one
        keep_sorted = before < cdf_threshold
    mask = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    mask |= (qsim < simthreshd)[..., :, None]
    mask |= (ksim < simthreshd)[..., None, :]
    return mask


def _boxes(grid: tuple[int, int, int], S: int, block: int) -> torch.Tensor:
    """Per block of `block` raster-order tokens of a (frames, height, width) grid: [n, 3, 2] (min, max) of each
    coordinate over its tokens."""
    T, Hh, W = grid
    idx = torch.arange(S)
    coords = torch.stack([idx // (Hh * W), (idx // W) % Hh, idx % W], -1)   # [S, 3]
    n = n_tiles(S, block)
    pad = coords[-1:].expand(n * block - S, 3)
    c = torch.cat([coords, pad]).view(n, block, 3)
    return torch.stack([c.amin(1), c.amax(1)], -1)


def _box_gap(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[na, nb, 3]: per axis, the distance between the coordinate ranges of block a and block b (0 if they meet)."""
    lo = b[None, :, :, 0] - a[:, None, :, 1]
    hi = a[:, None, :, 0] - b[None, :, :, 1]
    return torch.clamp(torch.maximum(lo, hi), min=0)


def _check_grid(grid, S: int) -> tuple[int, int, int]:
    if not (isinstance(grid, (tuple, list)) and len(grid) == 3 and all(isinstance(x, int) and x > 0 for x in grid)):
        raise ValueError(f"grid: expected (frames, height, width) positive ints, got {grid!r}")
    if grid[0] * grid[1] * grid[2] != S:
        raise ValueError(f"grid: {grid} holds {grid[0] * grid[1] * grid[2]} tokens, the sequence has {S}")
    return tuple(grid)


def sliding_tile_mask(grid, window, *, batch: int = 1, heads: int = 1) -> torch.Tensor:
    """Sliding-tile attention over a (frames, height, width) token grid in raster order (token = (f*H + h)*W + w):
    key tile t is kept for query tile x when, on every axis, the coordinate ranges of their tokens are at most
    window = (wf, wh, ww) apart (a tile-granular 3-D sliding window; every query token's full window is kept)."""
    S = math.prod(grid)
    grid = _check_grid(grid, S)
    if not (isinstance(window, (tuple, list)) and len(window) == 3 and all(isinstance(x, int) and x >= 0 for x in window)):
        raise ValueError(f"window: expected (frames, height, width) non-negative ints, got {window!r}")
    gap = _box_gap(_boxes(grid, S, BLOCK_Q), _boxes(grid, S, BLOCK_KV))
    m = (gap <= torch.tensor(window)).all(-1)
    return m.expand(batch, heads, *m.shape).clone()


def radial_mask(grid, *, spatial_window: int, dense_frames: int = 1, batch: int = 1, heads: int = 1) -> torch.Tensor:
    """Radial attention (spatial-temporal energy decay) on a (frames, height, width) raster-order token grid: tiles
    at most dense_frames frames apart attend fully; at frame distance d > dense_frames the spatial window (in
    rows/columns, on both axes) halves for every doubling of d: max(1, spatial_window >> floor(log2(d /
    dense_frames))), distances measured between the tiles' coordinate ranges."""
    S = math.prod(grid)
    grid = _check_grid(grid, S)
    if not isinstance(spatial_window, int) or spatial_window < 1:
        raise ValueError(f"spatial_window: expected a positive int, got {spatial_window!r}")
    if not isinstance(dense_frames, int) or dense_frames < 0:
        raise ValueError(f"dense_frames: expected a non-negative int, got {dense_frames!r}")
    gap = _box_gap(_boxes(grid, S, BLOCK_Q), _boxes(grid, S, BLOCK_KV))
    d = gap[..., 0]
    shift = torch.floor(torch.log2(torch.clamp(d.float(), min=1) / max(dense_frames, 1))).clamp(min=0).long()
    win = torch.clamp(spatial_window >> shift, min=1)
    m = (d <= dense_frames) | ((gap[..., 1] <= win) & (gap[..., 2] <= win))
    return m.expand(batch, heads, *m.shape).clone()
