"""Block masks for sparse attention (docs/numerics.md §Masks): SpargeAttn's prediction from pooled Q/K, and static
patterns for video token grids. Every function returns a bool block_mask [B, H_q, ceil(S_q / BLOCK_Q),
ceil(S_kv / BLOCK_KV)] for sage_attention(..., block_mask=...).

predict_block_mask runs as two gfx1201 kernels (asm_src/gfx1201_sage_predict.hip, host side sage_co/ops/predict.py)
on the emu / gpu backends; backend="torch" runs its torch implementation below, which is the spec
(docs/numerics.md §Predictor) the kernels match bit for bit. Its cost is O(S^2 / 64^2 * D) pooled-score work plus
one read of Q and K, small next to the attention it prunes (docs/performance.md §Predictor and block-sparse
attention).
"""
from __future__ import annotations

import math

import torch

from . import abi, masks, validate
from .masks import BLOCK_KV, BLOCK_Q, n_tiles
from .reference import fp32_div, fp32_sqrt, norm_rope, q_multiplier

PREDICT_BACKENDS = ("torch",) + validate.BACKENDS   # backend= of predict_block_mask ("torch": the spec in torch)
# SpargeAttn's defaults (simthreshd1=0.6, cdfthreshd=0.98). 0.9 dropped real mass on locality inputs: density 0.36 at
# rel L2 0.23 vs dense FP32; 0.98 gives 0.53 / 0.054 (docs/numerics.md §Predictor has the table with the oracle).
DEFAULT_CDF_THRESHOLD = 0.98
DEFAULT_SIMTHRESHD = 0.6
FLT_MIN = 2.0 ** -126
EXP2_CUTOFF = -32.0          # exp2_poly(x) = 0 below (its mass rint(e * 2^k), k <= 24, would be 0)
# 2^f on [0, 1): p(f) = 1 + f * (C1 + f * (C2 + ... + f * C6)), least-squares coefficients rounded to fp32
EXP2_COEFFS = tuple(float.fromhex(h) for h in ("0x1.62e42cp-1", "0x1.ebfd5ap-3", "0x1.c688f0p-5", "0x1.3d0c40p-7",
                                               "0x1.46d326p-10", "0x1.c54640p-13"))


def lane_tree(v: torch.Tensor) -> torch.Tensor:
    """[..., 128] fp32 -> [...]: the pool kernel's channel sum. Lane L holds channels 4L..4L+3 and sums them in
    order, then butterfly steps lane ^ 16, 8, 4, 2, 1 (each lane adds its partner's partial: s[:w] + s[w:2w])."""
    v = v.unflatten(-1, (32, 4))
    s = ((v[..., 0] + v[..., 1]) + v[..., 2]) + v[..., 3]
    for w in (16, 8, 4, 2, 1):
        s = s[..., :w] + s[..., w:2 * w]
    return s[..., 0]


def _pool(x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x [B, S, H, D] (NHD view, bf16/fp16) -> (mean [B, H, n, 128] fp32, self-similarity sim [B, H, n] fp32).
    Per block of n real tokens, in token order: acc += x; r = sqrt(tree(x * x)), FLT_MIN when r < FLT_MIN;
    usum += x * (1 / r). mean = acc / n, sim = tree(usum * usum) / (n * n) (the mean cosine similarity of the
    block's token pairs). Tail tokens past S are zeros here: adding them is exact (acc and usum are never -0)."""
    B, S, H, D = x.shape
    n = n_tiles(S, block)
    xf = x.float().transpose(1, 2)                                           # [B, H, S, D], exact
    xf = torch.nn.functional.pad(xf, (0, abi.PREDICT_CHANNELS - D, 0, n * block - S))
    xb = xf.view(B, H, n, block, abi.PREDICT_CHANNELS)
    acc = torch.zeros(B, H, n, abi.PREDICT_CHANNELS, device=x.device)
    usum = torch.zeros_like(acc)
    tiny = torch.tensor(FLT_MIN, dtype=torch.float32, device=x.device)
    for t in range(block):
        xt = xb[:, :, :, t]
        acc = acc + xt
        r = fp32_sqrt(lane_tree(xt * xt))
        inv = fp32_div(1.0, torch.where(r < tiny, tiny, r))
        usum = usum + xt * inv[..., None]
    cnt = torch.full((n,), float(block), device=x.device)
    cnt[-1] = S - (n - 1) * block
    mean = fp32_div(acc, cnt[:, None])
    sim = fp32_div(lane_tree(usum * usum), cnt * cnt)
    return mean, sim


def exp2_mass(x: torch.Tensor, mass_scale: float) -> torch.Tensor:
    """x = t - max_j t <= 0 (fp32) -> int64 masses rint(exp2_poly(x) * mass_scale): n = floor(x), f = x - n,
    p = Horner polynomial (separate multiply and add), e = p * 2^n (exact); 0 below EXP2_CUTOFF."""
    small = x < EXP2_CUTOFF
    xc = torch.where(small, torch.full_like(x, EXP2_CUTOFF), x)
    n = torch.floor(xc)
    f = xc - n
    a = torch.full_like(f, EXP2_COEFFS[5])
    for c in reversed(EXP2_COEFFS[:5]):
        a = a * f + c
    p = 1.0 + a * f
    pow2 = ((n.to(torch.int32) + 127) << 23).view(torch.float32)           # 2^n, n in [-32, 0]
    w = torch.round((p * pow2) * mass_scale)
    return torch.where(small, torch.zeros_like(w), w).to(torch.int64)


def _predict_torch(qn: torch.Tensor, kn: torch.Tensor, sh: validate.Shapes, scale: float, cdf_threshold: float,
                   topk: float | None, simthreshd: float, is_causal: bool = False) -> torch.Tensor:
    """The spec (docs/numerics.md §Predictor) in torch on NHD views; bool [B, H_q, n_q, n_kv]. is_causal: each
    query block ranks only the key blocks it sees (masks.causal_tiles, a prefix of n_row blocks) exactly as if
    those were all the key blocks, and keeps none of the others."""
    dev = qn.device
    g = torch.arange(sh.H_q, device=dev) // (sh.H_q // sh.H_kv)
    qm, qsim = _pool(qn, BLOCK_Q)
    km, ksim = _pool(kn, BLOCK_KV)
    km, ksim = km[:, g], ksim[:, g]
    n_q, n_kv = qm.shape[2], km.shape[2]
    s = torch.zeros(sh.B, sh.H_q, n_q, n_kv, device=dev)
    for d in range(sh.D):                                    # in order, separate multiply and add
        s = s + qm[..., d, None] * km[..., None, :, d]
    t = s * torch.tensor(q_multiplier(scale), dtype=torch.float32, device=dev)
    vis = masks.causal_tiles(sh.S_q, sh.S_kv, dev) if is_causal else torch.ones(n_q, n_kv, dtype=torch.bool,
                                                                                   device=dev)
    n_row = vis.sum(-1)                                      # [n_q]: the visible key blocks, a prefix
    thr = torch.tensor(simthreshd, dtype=torch.float32, device=dev)
    finite = torch.isfinite(t) | ~vis
    bad = ~finite.all(-1)                                    # such a row cannot be ranked: it keeps every block
    t = torch.where(finite, t, torch.zeros_like(t)) + 0.0    # + 0.0: -0 -> +0 (they rank as equal)
    t_max = torch.where(vis, t, torch.full_like(t, -math.inf)).amax(-1, keepdim=True)
    w = torch.where(vis, exp2_mass(t - t_max, abi.predict_mass_scale(n_kv)), 0)   # invisible: no mass
    # rank: visible blocks by larger t first, ties by lower index; the invisible ones after them
    order = torch.argsort(torch.where(vis, -t, torch.full_like(t, math.inf)), dim=-1, stable=True)
    count = abi.predict_topk_count(topk, n_kv, cdf_threshold)
    pos = torch.arange(n_kv, device=dev)
    if count:
        keep_sorted = (pos < count).expand(order.shape)
    else:
        w_sorted = w.gather(-1, order)
        above = w_sorted.cumsum(-1) - w_sorted               # int64: exact in any order
        keep_sorted = (above << abi.PREDICT_MASS_BITS) < abi.predict_cdf_fixed(cdf_threshold) * w.sum(-1, keepdim=True)
    keep_sorted = keep_sorted & (pos < n_row[:, None])
    mask = torch.zeros(order.shape, dtype=torch.bool, device=dev).scatter(-1, order, keep_sorted)
    mask |= bad[..., None]
    mask |= (~(qsim >= thr))[..., :, None]
    mask |= (~(ksim >= thr))[..., None, :]
    return mask & vis


def predict_block_mask(q: torch.Tensor, k: torch.Tensor, *, cdf_threshold: float = DEFAULT_CDF_THRESHOLD,
                       topk: float | None = None, simthreshd: float = DEFAULT_SIMTHRESHD,
                       softmax_scale: float | None = None, layout: str = "NHD", backend: str | None = None,
                       is_causal: bool = False) -> torch.Tensor:
    """SpargeAttn's block mask: Q and K mean-pooled per BLOCK_Q / BLOCK_KV tokens; pooled scores
    q_pool . k_pool * softmax_scale, softmax in base 2 per query block; each query block keeps the smallest set of
    top-ranked key blocks whose probability mass reaches cdf_threshold (the blocks ranked above a kept block hold
    less than cdf_threshold), or, with topk, the ceil(topk * n_kv) highest ranked. Blocks whose tokens are not
    self-similar (mean pairwise cosine not >= simthreshd) cannot be summarised by their mean: such a query block
    keeps every key block, such a key block is kept by every query block. is_causal: the pooled scores are masked
    causally first (as SpargeAttn's get_block_map_meansim(is_causal=True)): each query block ranks, weighs and
    keeps only the key blocks it sees under sage_attention's causal mask (sage_co.masks.causal_tiles), so no mass
    goes to future blocks the attention drops anyway. The exact arithmetic (bit for bit the same on every backend)
    is docs/numerics.md §Predictor; the defaults are SpargeAttn's (cdf_threshold 0.98, simthreshd 0.6).

    backend: None picks by device (CPU -> the emulator, a gfx1201 GPU -> "gpu"; the kernels), "emu" / "gpu", or
    "torch" (the torch implementation of the spec, any device)."""
    sh, qn, kn, _ = validate.check_qkv(q, k, k, layout)
    scale = validate.check_softmax_scale(softmax_scale, sh.D)
    if isinstance(cdf_threshold, bool) or not (isinstance(cdf_threshold, (int, float)) and 0.0 < cdf_threshold <= 1.0):
        raise ValueError(f"cdf_threshold: expected a number in (0, 1], got {cdf_threshold!r}")
    if topk is not None and (isinstance(topk, bool) or not (isinstance(topk, (int, float)) and 0.0 < topk <= 1.0)):
        raise ValueError(f"topk: expected None or a fraction in (0, 1], got {topk!r}")
    if isinstance(simthreshd, bool) or not isinstance(simthreshd, (int, float)) or not -1.0 <= simthreshd <= 1.0:
        raise ValueError(f"simthreshd: expected a number in [-1, 1], got {simthreshd!r}")
    if backend != "torch":
        try:   # the kernels' backends, the deprecated "hip" included (the launch normalizes it, and warns)
            validate.canonical_backend(backend, "backend", warn=False)
        except (TypeError, ValueError):
            raise ValueError(f"backend: expected None or one of {PREDICT_BACKENDS}, got {backend!r}") from None
    validate.check_flag("is_causal", is_causal)
    if backend != "torch":
        from .ops.predict import check_predict_limits
        check_predict_limits(sh)
    return _predict_op(q, k, layout, scale, float(cdf_threshold), _NO_TOPK if topk is None else float(topk),
                       float(simthreshd), backend or _DEFAULT, is_causal)


_NO_TOPK = 0.0      # topk in the custom op's schema: 0 = None (cdf mode); a given topk is > 0
_DEFAULT = ""       # backend in the schema: "" = choose by device


# A torch.library custom op (with a fake implementation), so sage_attention(sparsity="auto") traces under
# torch.compile(fullgraph=True) like the other ops; the arguments are validated before it (predict_block_mask).
@torch.library.custom_op("sage_co::predict_block_mask", mutates_args=())
def _predict_op(q: torch.Tensor, k: torch.Tensor, layout: str, softmax_scale: float, cdf_threshold: float,
                topk: float, simthreshd: float, backend: str, is_causal: bool = False) -> torch.Tensor:
    sh, qn, kn, _ = validate.check_qkv(q, k, k, layout)
    topk_or_none = None if topk == _NO_TOPK else topk
    if backend == "torch":
        return _predict_torch(qn, kn, sh, softmax_scale, cdf_threshold, topk_or_none, simthreshd, is_causal)
    from .ops.predict import run_predict
    return run_predict(qn, kn, sh, softmax_scale, cdf_threshold, topk_or_none, simthreshd, backend=backend or None,
                       is_causal=is_causal)


@_predict_op.register_fake
def _(q, k, layout, softmax_scale, cdf_threshold, topk, simthreshd, backend, is_causal=False):
    qn, kn = (q, k) if layout == "NHD" else (q.transpose(1, 2), k.transpose(1, 2))
    return q.new_empty((qn.shape[0], qn.shape[2], n_tiles(qn.shape[1], BLOCK_Q), n_tiles(kn.shape[1], BLOCK_KV)),
                       dtype=torch.bool)


SPARSITY = (None, "auto")


def check_sparsity(sparsity, cdf_threshold, block_mask) -> None:
    """sage_attention's sparsity / cdf_threshold / block_mask combination: sparsity None or "auto"; cdf_threshold
    only with sparsity="auto" (it was silently ignored without); "auto" predicts the mask, so no block_mask too."""
    if sparsity not in SPARSITY:
        raise ValueError(f"sparsity: expected None or \"auto\", got {sparsity!r}")
    if sparsity is None and cdf_threshold is not None:
        raise ValueError(f"cdf_threshold: only sparsity=\"auto\" uses it (the predictor's mass threshold); got "
                         f"cdf_threshold={cdf_threshold!r} with sparsity=None")
    if sparsity == "auto" and block_mask is not None:
        raise ValueError("sparsity: \"auto\" predicts the block mask; do not also pass block_mask")


def auto_block_mask(chk: validate.Checked, *, cdf_threshold, is_causal: bool, backend,
                    q_norm_weight=None, k_norm_weight=None, eps=1e-6, cos=None, sin=None) -> torch.Tensor:
    """sage_attention(sparsity="auto")'s mask, predicted on what the attention attends over: q and k after the
    fused RMSNorm / RoPE when those are on (reference.norm_rope, the prepare's own spec: predicting on the raw q, k
    gave rel L2 0.50 where the roped ones give 0.23), with is_causal's pooled-score masking."""
    q, k = chk.q, chk.k                                      # NHD views
    if q_norm_weight is not None or cos is not None:
        q = norm_rope(chk.q, q_norm_weight, eps, cos, sin, chk.rope_dim, chk.norm_rope_rounding)
    if k_norm_weight is not None or cos is not None:
        k = norm_rope(chk.k, k_norm_weight, eps, cos, sin, chk.rope_dim, chk.norm_rope_rounding)
    return predict_block_mask(q, k, cdf_threshold=DEFAULT_CDF_THRESHOLD if cdf_threshold is None else cdf_threshold,
                              softmax_scale=chk.softmax_scale, layout="NHD", backend=backend, is_causal=is_causal)


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


INT64_MAX = 2 ** 63 - 1   # the static patterns compute in int64 tensors


def _check_int(name: str, value, minimum: int) -> int:
    """An int (not bool) in [minimum, 2**63 - 1]: ValueError naming the argument (batch=2.0 used to reach
    expand() as a TypeError, heads=0 gave an empty mask, spatial_window=2**70 an OverflowError)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int >= {minimum}, got {type(value).__name__} {value!r}")
    if not minimum <= value <= INT64_MAX:
        raise ValueError(f"{name}: expected an int in {minimum} .. 2**63 - 1, got {value}")
    return value


def _check_grid(grid, S: int) -> tuple[int, int, int]:
    if not (isinstance(grid, (tuple, list)) and len(grid) == 3 and
            all(isinstance(x, int) and not isinstance(x, bool) and 0 < x <= INT64_MAX for x in grid)):
        raise ValueError(f"grid: expected (frames, height, width) positive ints, got {grid!r}")
    if grid[0] * grid[1] * grid[2] != S:
        raise ValueError(f"grid: {grid} holds {grid[0] * grid[1] * grid[2]} tokens, the sequence has {S}")
    return tuple(grid)


def sliding_tile_mask(grid, window, *, batch: int = 1, heads: int = 1) -> torch.Tensor:
    """Sliding-tile attention over a (frames, height, width) token grid in raster order (token = (f*H + h)*W + w):
    key tile t is kept for query tile x when, on every axis, the coordinate ranges of their tokens are at most
    window = (wf, wh, ww) apart (a tile-granular 3-D sliding window; every query token's full window is kept)."""
    grid = _check_grid(grid, math.prod(grid) if isinstance(grid, (tuple, list)) else None)
    S = math.prod(grid)
    if not (isinstance(window, (tuple, list)) and len(window) == 3 and
            all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= INT64_MAX for x in window)):
        raise ValueError(f"window: expected (frames, height, width) non-negative ints, got {window!r}")
    batch, heads = _check_int("batch", batch, 1), _check_int("heads", heads, 1)
    gap = _box_gap(_boxes(grid, S, BLOCK_Q), _boxes(grid, S, BLOCK_KV))
    m = (gap <= torch.tensor(window)).all(-1)
    return m.expand(batch, heads, *m.shape).clone()


def radial_mask(grid, *, spatial_window: int, dense_frames: int = 1, batch: int = 1, heads: int = 1) -> torch.Tensor:
    """Radial attention (spatial-temporal energy decay) on a (frames, height, width) raster-order token grid: tiles
    at most dense_frames frames apart attend fully; at frame distance d > dense_frames the spatial window (in
    rows/columns, on both axes) halves for every doubling of d: max(1, spatial_window >> floor(log2(d /
    dense_frames))), distances measured between the tiles' coordinate ranges."""
    grid = _check_grid(grid, math.prod(grid) if isinstance(grid, (tuple, list)) else None)
    S = math.prod(grid)
    _check_int("spatial_window", spatial_window, 1)
    _check_int("dense_frames", dense_frames, 0)
    batch, heads = _check_int("batch", batch, 1), _check_int("heads", heads, 1)
    gap = _box_gap(_boxes(grid, S, BLOCK_Q), _boxes(grid, S, BLOCK_KV))
    d = gap[..., 0]
    shift = torch.floor(torch.log2(torch.clamp(d.float(), min=1) / max(dense_frames, 1))).clamp(min=0).long()
    win = torch.clamp(spatial_window >> shift, min=1)
    m = (d <= dense_frames) | ((gap[..., 1] <= win) & (gap[..., 2] <= win))
    return m.expand(batch, heads, *m.shape).clone()
