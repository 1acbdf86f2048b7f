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


def sage_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv, softmax_scale=None, *,
                          is_causal=False, return_lse=False, smooth_k=False, backend=None, kernel=None,
                          smooth_v=False, pv_dtype="fp8"):
    """q [total_q, H_q, D], k/v [total_kv, H_kv, D] packed (sequence b = rows cu_seqlens[b]:cu_seqlens[b+1]), bf16 or
    fp16. Returns out [total_q, H_q, D] in q's dtype (and lse fp32 [H_q, total_q]). is_causal is bottom-right
    aligned per sequence; a sequence with no keys gives zeros and lse -inf. A torch.library custom op: it traces
    under torch.compile(fullgraph=True, dynamic=True) (the lengths are read inside the op)."""
    # every argument is checked up front, also when no sequence has both queries and keys (then nothing runs and
    # a bad backend / kernel / scale would otherwise pass unseen); messages quote the packed shapes
    sh = validate.check_packed_qkv(q, k, v)
    scale = validate.check_softmax_scale(softmax_scale, sh.D)
    validate.check_flag("is_causal", is_causal)
    validate.check_flag("return_lse", return_lse)
    validate.check_flag("smooth_k", smooth_k)
    validate.check_pv(pv_dtype, smooth_v)
    validate.check_backend(backend)
    validate.check_kernel(kernel)
    validate.check_cu_seqlens_tensor("cu_seqlens_q", cu_seqlens_q, max_seqlen_q, "max_seqlen_q")
    validate.check_cu_seqlens_tensor("cu_seqlens_kv", cu_seqlens_kv, max_seqlen_kv, "max_seqlen_kv")
    if cu_seqlens_q.shape[0] != cu_seqlens_kv.shape[0]:
        raise ValueError(f"cu_seqlens_kv: {cu_seqlens_kv.shape[0] - 1} sequences, cu_seqlens_q has "
                         f"{cu_seqlens_q.shape[0] - 1}")
    if not torch.compiler.is_compiling():   # the values, before any kernel (under compile: inside the op)
        _lengths(q, k, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv)
    out, lse = _varlen_op(q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv, scale, is_causal,
                          return_lse, smooth_k, backend or "", kernel or "", smooth_v, pv_dtype)
    return (out, lse) if return_lse else out


def _lengths(q, k, cu_q, cu_kv, max_q, max_kv):
    return (validate.check_cu_seqlens("cu_seqlens_q", cu_q, q.shape[0], max_q, "max_seqlen_q"),
            validate.check_cu_seqlens("cu_seqlens_kv", cu_kv, k.shape[0], max_kv, "max_seqlen_kv"))


@torch.library.custom_op("sage_co::sage_attention_varlen", mutates_args=())
def _varlen_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
               cu_seqlens_kv: torch.Tensor, max_seqlen_q: int, max_seqlen_kv: int, softmax_scale: float,
               is_causal: bool, return_lse: bool, smooth_k: bool, backend: str, kernel: str, smooth_v: bool,
               pv_dtype: str) -> tuple[torch.Tensor, torch.Tensor]:
    from .api import sage_attention
    cq, ck = _lengths(q, k, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv)
    out = torch.zeros_like(q)
    lse = torch.full((q.shape[1], q.shape[0]) if return_lse else (0,), float("-inf"), dtype=torch.float32,
                     device=q.device)
    for b in range(len(cq) - 1):
        (q0, q1), (k0, k1) = cq[b:b + 2], ck[b:b + 2]
        if q1 == q0 or k1 == k0:
            continue                      # no queries, or no keys: zeros / -inf (already there)
        res = sage_attention(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], softmax_scale, smooth_k=smooth_k,
                             is_causal=is_causal, return_lse=return_lse, backend=backend or None,
                             kernel=kernel or None, smooth_v=smooth_v, pv_dtype=pv_dtype)
        o, ls = res if return_lse else (res, None)
        out[q0:q1] = o[0]
        if return_lse:
            lse[:, q0:q1] = ls[0]
    return out, lse


@_varlen_op.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv, softmax_scale, is_causal, return_lse,
      smooth_k, backend, kernel, smooth_v, pv_dtype):
    validate.check_kernel_shipped(kernel or None)
    return torch.empty_like(q), q.new_empty((q.shape[1], q.shape[0]) if return_lse else (0,), dtype=torch.float32)
