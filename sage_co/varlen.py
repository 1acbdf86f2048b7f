"""Variable-length (packed) attention: flash-attention's / SageAttention's varlen call on [total, H, D] tensors.

Design (docs/numerics.md §Varlen): one prepare + attention launch pair per sequence, on views of the packed
tensors (no copy of the inputs). Each sequence is quantized on its own, so its 32-token scale blocks start at its
own first token and never straddle two sequences, and the packed call equals the per-sequence sage_attention calls
bit for bit (the same kernels on the same bytes). A batched descriptor launch would save the per-sequence launch
overhead; it is not needed for the numerics.
"""
from __future__ import annotations

import torch

from . import validate
from .callspec import SAGE_ATTENTION, SPLIT_FIXED

# The options forwarded to every per-sequence sage_attention: all of the op's but those varlen fixes itself
# (sage_co.callspec.SPLIT_FIXED; softmax_scale is a parameter). A new option of the op is forwarded without an edit.
PASSTHROUGH = SAGE_ATTENTION.passthrough(exclude=SPLIT_FIXED + ("softmax_scale",))


NO_MAX = object()   # check_cu_seqlens(max_len=NO_MAX): the caller has no max_seqlen to check (LightX2V's apply)


def check_cu_seqlens(name: str, cu, total: int, max_len) -> list[int]:
    """cu_seqlens: 1-D int32/int64 [batch + 1], from 0, never decreasing, ending at the packed length `total`;
    max_len an int >= the longest sequence (NO_MAX: none given). Returns the offsets (the one rule for every packed
    entry point: varlen, sageattn_varlen, the LightX2V adapter)."""
    if not isinstance(cu, torch.Tensor) or cu.dim() != 1 or cu.dtype not in (torch.int32, torch.int64) or cu.numel() < 2:
        raise ValueError(f"{name}: expected a 1-D int32 tensor [batch + 1] of cumulative lengths, got "
                         f"{getattr(cu, 'dtype', type(cu).__name__)} {list(getattr(cu, 'shape', []))}")
    vals = [int(x) for x in cu.cpu()]
    if vals[0] != 0 or any(b < a for a, b in zip(vals, vals[1:])) or vals[-1] != total:
        raise ValueError(f"{name}: must start at 0, never decrease and end at the packed length {total}, got {vals}")
    longest = max(b - a for a, b in zip(vals, vals[1:]))
    if max_len is NO_MAX:
        return vals
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < longest:
        raise ValueError(f"max_seqlen for {name}: expected an int >= the longest sequence ({longest}), got {max_len!r}")
    return vals


def sage_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv, softmax_scale=None, *,
                          return_lse=False, **options):
    """q [total_q, H_q, D], k/v [total_kv, H_kv, D] packed (sequence b = rows cu_seqlens[b]:cu_seqlens[b+1]), bf16 or
    fp16. Returns out [total_q, H_q, D] in q's dtype (and lse fp32 [H_q, total_q]). is_causal is bottom-right
    aligned per sequence; a sequence with no keys gives zeros and lse -inf. `options`: sage_attention's (is_causal,
    smooth_k, backend, kernel, smooth_v, pv_dtype, ...: PASSTHROUGH), checked once here and forwarded."""
    from .api import sage_attention
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            raise ValueError(f"{name}: expected a packed 3-D tensor [total, H, D], got {getattr(t, 'shape', t)!r}")
    opts = SAGE_ATTENTION.bind(options, "sage_attention_varlen", allowed=PASSTHROUGH)
    SAGE_ATTENTION.check(opts)
    validate.check_flag("return_lse", return_lse)
    validate.check_pv(opts["pv_dtype"], opts["smooth_v"])
    forwarded = {name: opts[name] for name in PASSTHROUGH}
    cq = check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, q.shape[0], max_seqlen_q)
    ck = check_cu_seqlens("cu_seqlens_kv", cu_seqlens_kv, k.shape[0], max_seqlen_kv)
    if len(cq) != len(ck):
        raise ValueError(f"cu_seqlens_kv: {len(ck) - 1} sequences, cu_seqlens_q has {len(cq) - 1}")
    if v.shape[0] != k.shape[0]:
        raise ValueError(f"v: expected {k.shape[0]} rows like k, got {v.shape[0]}")
    # the whole packed problem is validated once (dtypes, heads, D) through a one-token view
    validate.check_qkv(q[None, :1], k[None, :1], v[None, :1])
    out = torch.zeros_like(q)
    lse = torch.full((q.shape[1], q.shape[0]), float("-inf"), dtype=torch.float32, device=q.device)
    for b in range(len(cq) - 1):
        (q0, q1), (k0, k1) = cq[b:b + 2], ck[b:b + 2]
        if q1 == q0 or k1 == k0:
            continue                      # no queries, or no keys: zeros / -inf (already there)
        res = sage_attention(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], softmax_scale, return_lse=return_lse,
                             **forwarded)
        o, ls = res if return_lse else (res, None)
        out[q0:q1] = o[0]
        if return_lse:
            lse[:, q0:q1] = ls[0]
    return (out, lse) if return_lse else out
