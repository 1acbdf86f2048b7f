"""Which (query tile, key tile) pairs the attention kernels visit: causal tiles, user block masks, and the LUT the
kernels walk (docs/numerics.md §Masks).

Both attention kernels take, per query tile of BLOCK_Q queries, a row [count, t_0 < t_1 < ... < t_{count-1}, ...] of
the active key tiles of BLOCK_KV keys (SpargeAttn's LUT + count); elements are masked only inside partially
visible tiles (the sequence tail and the causal diagonal). A tile no row of the query tile can see is never loaded.
"""
from __future__ import annotations

import math

import torch

from . import abi

BLOCK_Q = abi.QUERY_TILE    # queries per query tile (block_mask dim 2 = ceil(S_q / BLOCK_Q))
BLOCK_KV = abi.KEY_TILE     # keys per key tile (block_mask dim 3 = ceil(S_kv / BLOCK_KV))


def n_tiles(S: int, block: int) -> int:
    return -(-S // block)


def causal_tiles(S_q: int, S_kv: int, device=None) -> torch.Tensor:
    """bool [ceil(S_q/BLOCK_Q), ceil(S_kv/BLOCK_KV)]: key tile t holds a key some real row of query tile x sees under
    the bottom-right aligned causal mask (row i sees keys j <= i + S_kv - S_q)."""
    nq, nk = n_tiles(S_q, BLOCK_Q), n_tiles(S_kv, BLOCK_KV)
    last_row = torch.clamp(torch.arange(nq, device=device) * BLOCK_Q + BLOCK_Q - 1, max=S_q - 1)
    first_key = torch.arange(nk, device=device) * BLOCK_KV
    return first_key[None, :] <= (last_row + (S_kv - S_q))[:, None]


def check_block_mask(block_mask, B: int, H_q: int, S_q: int, S_kv: int, *, device) -> None:
    """block_mask: a bool tensor [B, H_q, ceil(S_q/BLOCK_Q), ceil(S_kv/BLOCK_KV)] on `device` (the device of q, or
    of the prepared structure): ValueError/TypeError naming it. A mask on another device (meta included) would make
    the op dispatch elsewhere (meta: its fake implementation, which returns uninitialised memory)."""
    if block_mask is None:
        return
    if not isinstance(block_mask, torch.Tensor):
        raise TypeError(f"block_mask: expected None or a bool tensor, got {type(block_mask).__name__}")
    want = (B, H_q, n_tiles(S_q, BLOCK_Q), n_tiles(S_kv, BLOCK_KV))
    if block_mask.dtype != torch.bool or tuple(block_mask.shape) != want:
        raise ValueError(f"block_mask: expected a bool tensor of shape [B, H_q, ceil(S_q/{BLOCK_Q}), "
                         f"ceil(S_kv/{BLOCK_KV})] = {list(want)}, got {block_mask.dtype} {list(block_mask.shape)}")
    if block_mask.device != torch.device(device):
        raise ValueError(f"block_mask: expected a tensor on {torch.device(device)} (the device of the inputs), got "
                         f"{block_mask.device}")


def active_tiles(B: int, H_q: int, S_q: int, S_kv: int, *, is_causal: bool = False, block_mask=None,
                 device=None, mask_visible=None) -> torch.Tensor:
    """bool [B or 1, H_q or 1, n_q, n_kv]: the key tiles each query tile visits (dims of size 1 are shared).
    mask_visible: attn_mask_tiles' any_visible [Bm, Hm, n_q or 1, n_kv] (tiles attn_mask hides entirely are
    skipped)."""
    nq, nk = n_tiles(S_q, BLOCK_Q), n_tiles(S_kv, BLOCK_KV)
    act = torch.ones(1, 1, nq, nk, dtype=torch.bool, device=device)
    if is_causal:
        act = act & causal_tiles(S_q, S_kv, device)
    if block_mask is not None:
        act = act & block_mask.to(device)
    if mask_visible is not None:
        act = act & mask_visible
    return act


def build_lut(active: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """The kernels' LUT of active [Bm, Hm, n_q, n_kv]: (flat int32 buffer of rows [count, active tiles ascending,
    the inactive ones], stride_b, stride_h) in u32 elements; a size-1 dim gets stride 0 (shared rows)."""
    Bm, Hm, nq, nk = active.shape
    count = active.sum(-1, dtype=torch.int32)
    # stable sort of (inactive?) puts the active tiles first, in ascending order
    order = torch.argsort((~active).to(torch.uint8), dim=-1, stable=True).to(torch.int32)
    rows = torch.cat([count[..., None], order], dim=-1).reshape(-1)
    flat = torch.cat([rows, rows.new_zeros(abi.LUT_TAIL)])
    row_len = nk + 1
    sh = nq * row_len if Hm > 1 else 0
    sb = Hm * nq * row_len if Bm > 1 else 0
    return flat, sb, sh


def element_mask(S_q: int, S_kv: int, *, is_causal: bool = False, block_mask=None, device=None) -> torch.Tensor:
    """bool [Bm, Hm, S_q, S_kv]: which (query, key) pairs count (the FP32 reference's mask)."""
    act = active_tiles(1, 1, S_q, S_kv, is_causal=False, block_mask=block_mask, device=device)
    m = act.repeat_interleave(BLOCK_Q, dim=2)[:, :, :S_q].repeat_interleave(BLOCK_KV, dim=3)[..., :S_kv]
    if is_causal:
        i = torch.arange(S_q, device=device)[:, None]
        j = torch.arange(S_kv, device=device)[None, :]
        m = m & (j <= i + (S_kv - S_q))
    return m


# ------------------------------------------------------------------------------------------ attn_mask (issue 30)
# docs/numerics.md §Masks, "attn_mask". SDPA's mask: bool (True = attend) or additive float, broadcastable to
# [B, H_q, S_q, S_kv] (trailing alignment, as torch.nn.functional.scaled_dot_product_attention). The host reduces
# it, with torch ops on the mask's device (no read-back), to
#   * per (batch, head, query tile, key tile) a kind: skipped (no visible element: not in the LUT), full (every
#     element visible, no bias: the unmasked arithmetic), partial (bits), additive (bits + bias);
#   * the bit rows (u32 words, bit j of word w = key 32w + j visible) and, for a float mask, the bias rows
#     b = fp32(mask) * fp32(log2 e) (zero where not visible), both [Bm, Hm, Rq_pad, S_kv_pad].
# A mask broadcast over the query dim (key padding: [B, 1, 1, S_kv], [B, H, 1, S_kv], ...) keeps ONE row per
# (batch, head) (row stride 0): its partial tiles are only those that straddle a change of validity.
MASK_DTYPES = (torch.bool, torch.float32, torch.bfloat16, torch.float16)
LOG2E_F32 = torch.tensor(1.4426950408889634, dtype=torch.float32).item()   # fp32(log2 e), the bias multiplier
WORD = abi.MASK_WORD_BITS


def check_attn_mask(attn_mask, B: int, H_q: int, S_q: int, S_kv: int, *, device) -> None:
    """attn_mask: None, or a bool / float32 / bfloat16 / float16 tensor broadcastable to [B, H_q, S_q, S_kv] (SDPA's
    trailing alignment; 1 to 4 dims) on `device`, without requires_grad: TypeError/ValueError naming attn_mask and
    quoting its shape and dtype."""
    if attn_mask is None:
        return
    if not isinstance(attn_mask, torch.Tensor):
        raise TypeError(f"attn_mask: expected None or a bool / float tensor broadcastable to [B, H_q, S_q, S_kv] = "
                        f"{[B, H_q, S_q, S_kv]}, got a {type(attn_mask).__name__}")
    desc = f"{attn_mask.dtype} {list(attn_mask.shape)}"
    if attn_mask.dtype not in MASK_DTYPES:
        raise TypeError(f"attn_mask: expected dtype bool (True = attend) or an additive float32 / bfloat16 / float16 "
                        f"mask, got {desc}")
    want = (B, H_q, S_q, S_kv)
    shape = tuple(attn_mask.shape)
    # s != 1 and s != w, not `s not in (1, w)`: dynamo's tuple membership does not compare a symbolic size with a
    # constant one (torch.compile(dynamic=True) at S_q == S_kv == D refused a valid mask)
    if not 1 <= len(shape) <= 4 or any(s != 1 and s != w for s, w in zip(reversed(shape), reversed(want))):
        raise ValueError(f"attn_mask: expected a shape broadcastable to [B, H_q, S_q, S_kv] = {list(want)} (SDPA's "
                         f"trailing alignment: [S_q, S_kv], [B or 1, H_q or 1, S_q or 1, S_kv], ...; a key-padding "
                         f"mask [B, S_kv] is attn_mask[:, None, None, :]), got {desc}")
    if attn_mask.requires_grad:
        raise ValueError(f"attn_mask: expected a tensor without requires_grad (sage-co has no backward), got {desc}; "
                         f"pass attn_mask.detach()")
    if attn_mask.device != torch.device(device):
        raise ValueError(f"attn_mask: expected a tensor on {torch.device(device)} (the device of the inputs), got "
                         f"{attn_mask.device} ({desc})")


def mask_dims(attn_mask: torch.Tensor, B: int, H_q: int, S_q: int) -> tuple[int, int, int]:
    """(Bm, Hm, Rq): the batch, head and query-row counts the mask really has (1 = broadcast); from the shape only."""
    shape = (1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape)
    return (B if shape[0] > 1 else 1), (H_q if shape[1] > 1 else 1), (S_q if shape[2] > 1 else 1)


def attn_mask_parts(attn_mask: torch.Tensor, B: int, H_q: int, S_q: int, S_kv: int):
    """(visible bool [Bm, Hm, Rq, S_kv], bias fp32 [Bm, Hm, Rq, S_kv] or None): the element semantics of a checked
    mask. bool: visible = mask. float: b = fp32(mask) * fp32(log2 e) (one RNE multiply; values below
    -FLT_MAX / log2 e, such as torch.finfo(torch.float32).min, overflow to -inf), visible = b != -inf, bias = b
    where visible else 0."""
    Bm, Hm, Rq = mask_dims(attn_mask, B, H_q, S_q)
    m = attn_mask.reshape((1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape)).expand(Bm, Hm, Rq, S_kv)
    if m.dtype == torch.bool:
        return m.contiguous(), None
    b = m.float() * torch.tensor(LOG2E_F32, dtype=torch.float32, device=m.device)
    visible = b != -math.inf
    return visible, torch.where(visible, b, torch.zeros((), dtype=torch.float32, device=m.device))


def _tiles(x: torch.Tensor, S_q: int, S_kv: int, fill: bool, reduce) -> torch.Tensor:
    """x bool [Bm, Hm, Rq, S_kv] -> [Bm, Hm, nq or 1, nk]: `reduce` (any / all) over each 64 x 64 tile's real
    elements (the padding takes `fill`, neutral for the reduction)."""
    Bm, Hm, Rq, _ = x.shape
    nk = n_tiles(S_kv, BLOCK_KV)
    rq = BLOCK_Q if Rq > 1 else 1
    nq = n_tiles(S_q, BLOCK_Q) if Rq > 1 else 1
    p = torch.nn.functional.pad(x, (0, nk * BLOCK_KV - S_kv, 0, nq * rq - Rq), value=fill)
    return reduce(reduce(p.view(Bm, Hm, nq, rq, nk, BLOCK_KV), 5), 3)


def attn_mask_tiles(visible: torch.Tensor, bias, S_q: int, S_kv: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(any_visible bool, kind int32) [Bm, Hm, nq or 1, nk] per tile (over its real rows and keys): kind =
    abi.MASK_KIND_ADDITIVE where a visible element has a bias != 0 (NaN and +-inf included), else
    MASK_KIND_PARTIAL where some element is not visible, else MASK_KIND_FULL."""
    any_vis = _tiles(visible, S_q, S_kv, False, lambda t, d: t.any(dim=d))
    all_vis = _tiles(visible, S_q, S_kv, True, lambda t, d: t.all(dim=d))
    kind = torch.where(all_vis, abi.MASK_KIND_FULL, abi.MASK_KIND_PARTIAL).to(torch.int32)
    if bias is not None:
        add = _tiles(visible & (bias != 0), S_q, S_kv, False, lambda t, d: t.any(dim=d))
        kind = torch.where(add, torch.full_like(kind, abi.MASK_KIND_ADDITIVE), kind)
    return any_vis, kind


def pack_bits(visible: torch.Tensor, S_q: int, S_kv: int) -> torch.Tensor:
    """visible bool [Bm, Hm, Rq, S_kv] -> the kernels' bit rows int32 [Bm, Hm, Rq_pad, S_kv_pad / 32] (Rq_pad =
    S_q_pad, or 1 for a mask broadcast over the queries), bit j of word w = key 32w + j visible, padding 0."""
    Bm, Hm, Rq, _ = visible.shape
    Rp = s_pad_rows(S_q) if Rq > 1 else 1
    Kp = n_tiles(S_kv, BLOCK_KV) * BLOCK_KV
    p = torch.nn.functional.pad(visible, (0, Kp - S_kv, 0, Rp - Rq), value=False)
    # bytes of 8 keys (one byte per key in flight, not 8: a [B, H, S, S] mask is large), little-endian into words
    shifts = torch.arange(8, dtype=torch.uint8, device=visible.device)
    octets = (p.view(Bm, Hm, Rp, Kp // 8, 8).to(torch.uint8) << shifts).sum(-1, dtype=torch.uint8)
    return octets.contiguous().view(torch.int32)


def pack_bias(bias: torch.Tensor, S_q: int, S_kv: int) -> torch.Tensor:
    """bias fp32 [Bm, Hm, Rq, S_kv] -> [Bm, Hm, Rq_pad, S_kv_pad] (the bit rows' layout x 32), padding 0."""
    Rq = bias.shape[2]
    Rp = s_pad_rows(S_q) if Rq > 1 else 1
    Kp = n_tiles(S_kv, BLOCK_KV) * BLOCK_KV
    return torch.nn.functional.pad(bias, (0, Kp - S_kv, 0, Rp - Rq)).contiguous()


def s_pad_rows(S: int) -> int:
    return n_tiles(S, BLOCK_Q) * BLOCK_Q


def mask_word_strides(Bm: int, Hm: int, Rq: int, S_q: int, S_kv: int) -> tuple[int, int, int]:
    """(stride_b, stride_h, stride_s) of the bit rows in u32 words; 0 for a broadcast dim."""
    W = n_tiles(S_kv, BLOCK_KV) * BLOCK_KV // WORD
    Rp = s_pad_rows(S_q) if Rq > 1 else 1
    return (Hm * Rp * W if Bm > 1 else 0), (Rp * W if Hm > 1 else 0), (W if Rq > 1 else 0)


def gather_kinds(active: torch.Tensor, kind: torch.Tensor) -> torch.Tensor:
    """The kernels' mask_kind buffer: int32 rows parallel to build_lut(active)'s ([0, kind of t_0, kind of t_1,
    ...], the same strides and tail)."""
    Bm, Hm, nq, nk = active.shape
    kind = kind.expand(Bm, Hm, nq, nk)
    order = torch.argsort((~active).to(torch.uint8), dim=-1, stable=True)
    rows = torch.cat([torch.zeros_like(kind[..., :1]), torch.gather(kind, -1, order)], dim=-1).reshape(-1)
    return torch.cat([rows, rows.new_zeros(abi.LUT_TAIL)]).to(torch.int32)


def key_padding(mask: torch.Tensor) -> torch.Tensor:
    """A key-padding mask in a client's shape -- [B, S_kv] (diffusers' encoder_attention_mask), [B, 1, S_kv]
    (ComfyUI's 3-D masks with one query row) or [B, 1, 1, S_kv] -- as the attn_mask [B, 1, 1, S_kv] that SDPA's
    broadcasting reads as "per batch, these keys" (a 2-D attn_mask would be [S_q, S_kv]). A view, no copy."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask: expected a tensor [B, S_kv], [B, 1, S_kv] or [B, 1, 1, S_kv], got "
                        f"{type(mask).__name__}")
    if mask.dim() == 2 or (mask.dim() in (3, 4) and all(s == 1 for s in mask.shape[1:-1])):
        return mask.reshape(mask.shape[0], 1, 1, mask.shape[-1])
    raise ValueError(f"mask: expected a key-padding mask [B, S_kv], [B, 1, S_kv] or [B, 1, 1, S_kv], got "
                     f"{mask.dtype} {list(mask.shape)}")
