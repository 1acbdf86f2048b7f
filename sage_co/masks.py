"""Which (query tile, key tile) pairs the attention kernels visit: causal tiles, user block masks, and the LUT the
kernels walk (docs/numerics.md §Masks).

Both attention kernels take, per query tile of BLOCK_Q queries, a row [count, t_0 < t_1 < ... < t_{count-1}, ...] of
the active key tiles of BLOCK_KV keys (SpargeAttn's LUT + count); elements are masked only inside partially
visible tiles (the sequence tail and the causal diagonal). A tile no row of the query tile can see is never loaded.
"""
from __future__ import annotations

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
                 device=None) -> torch.Tensor:
    """bool [B or 1, H_q or 1, n_q, n_kv]: the key tiles each query tile visits (dims of size 1 are shared)."""
    nq, nk = n_tiles(S_q, BLOCK_Q), n_tiles(S_kv, BLOCK_KV)
    act = torch.ones(1, 1, nq, nk, dtype=torch.bool, device=device)
    if is_causal:
        act = act & causal_tiles(S_q, S_kv, device)
    if block_mask is not None:
        act = act & block_mask.to(device)
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
