"""Variable-length (packed) attention: flash-attention's / SageAttention's varlen call on [total, H, D] tensors.

Design (docs/numerics.md §Varlen): one prepare + attention launch pair per sequence, on views of the packed
tensors (no copy of the inputs). Each sequence is quantized on its own, so its 32-token scale blocks start at its
own first token and never straddle two sequences, and the packed call equals the per-sequence sage_attention calls
bit for bit (the same kernels on the same bytes). A batched descriptor launch would save the per-sequence launch
overhead; it is not needed for the numerics.

A torch.library custom op (sage_co::sage_attention_varlen) whose schema is derived from sage_co.callspec: the
packed inputs, softmax_scale, return_lse, then every option of sage_attention that varlen forwards (PASSTHROUGH),
so a new option of the op reaches the per-sequence calls without an edit here. The lengths are read inside the op,
so it traces under torch.compile(fullgraph=True, dynamic=True).
"""
from __future__ import annotations

import torch

from . import validate
from .callspec import OPTIONS, SAGE_ATTENTION, SPLIT_FIXED, Option, OpSpec

# The options forwarded to every per-sequence sage_attention: all of the op's but those varlen fixes itself
# (sage_co.callspec.SPLIT_FIXED; softmax_scale is a parameter). A new option of the op is forwarded without an edit.
PASSTHROUGH = SAGE_ATTENTION.passthrough(exclude=SPLIT_FIXED + ("softmax_scale",))

SAGE_ATTENTION_VARLEN = OpSpec(
    "sage_attention_varlen",
    (Option("q", "Tensor"), Option("k", "Tensor"), Option("v", "Tensor"), Option("cu_seqlens_q", "Tensor"),
     Option("cu_seqlens_kv", "Tensor"), Option("max_seqlen_q", "int"), Option("max_seqlen_kv", "int")),
    (OPTIONS["softmax_scale"], OPTIONS["return_lse"],
     *(o for o in SAGE_ATTENTION.schema_options if o.name in PASSTHROUGH)),
    "(Tensor, Tensor)")


def sage_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv, softmax_scale=None, *,
                          return_lse=False, **options):
    """q [total_q, H_q, D], k/v [total_kv, H_kv, D] packed (sequence b = rows cu_seqlens[b]:cu_seqlens[b+1]), bf16 or
    fp16. Returns out [total_q, H_q, D] in q's dtype (and lse fp32 [H_q, total_q]). is_causal is bottom-right
    aligned per sequence; a sequence with no keys gives zeros and lse -inf. `options`: sage_attention's (is_causal,
    smooth_k, backend, kernel, smooth_v, pv_dtype, ...: PASSTHROUGH), checked once here and forwarded."""
    # every argument is checked up front, also when no sequence has both queries and keys (then nothing runs and
    # a bad backend / kernel / scale would otherwise pass unseen); messages quote the packed shapes
    sh = validate.check_packed_qkv(q, k, v)
    scale = validate.check_softmax_scale(softmax_scale, sh.D)
    validate.check_flag("return_lse", return_lse)
    opts = SAGE_ATTENTION.bind(options, "sage_attention_varlen", allowed=PASSTHROUGH)
    SAGE_ATTENTION.check(opts)
    validate.check_pv(opts["pv_dtype"], opts["smooth_v"])
    validate.check_cu_seqlens_tensor("cu_seqlens_q", cu_seqlens_q, max_seqlen_q, "max_seqlen_q")
    validate.check_cu_seqlens_tensor("cu_seqlens_kv", cu_seqlens_kv, max_seqlen_kv, "max_seqlen_kv")
    if cu_seqlens_q.shape[0] != cu_seqlens_kv.shape[0]:
        raise ValueError(f"cu_seqlens_kv: {cu_seqlens_kv.shape[0] - 1} sequences, cu_seqlens_q has "
                         f"{cu_seqlens_q.shape[0] - 1}")
    if not torch.compiler.is_compiling():   # the values, before any kernel (under compile: inside the op)
        _lengths(q, k, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv)
    values = {**opts, "softmax_scale": scale, "return_lse": return_lse}
    out, lse = _varlen_op(*SAGE_ATTENTION_VARLEN.to_schema(
        (q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv), values))
    return (out, lse) if return_lse else out


def _lengths(q, k, cu_q, cu_kv, max_q, max_kv):
    return (validate.check_cu_seqlens("cu_seqlens_q", cu_q, q.shape[0], max_q, "max_seqlen_q"),
            validate.check_cu_seqlens("cu_seqlens_kv", cu_kv, k.shape[0], max_kv, "max_seqlen_kv"))


def _varlen_impl(*args):
    from .api import sage_attention
    (q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv), o = SAGE_ATTENTION_VARLEN.from_schema(args)
    cq, ck = _lengths(q, k, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv)
    return_lse = o["return_lse"]
    forwarded = {name: o[name] for name in PASSTHROUGH}
    out = torch.zeros_like(q)
    lse = torch.full((q.shape[1], q.shape[0]), float("-inf"), dtype=torch.float32, device=q.device)
    for b in range(len(cq) - 1):
        (q0, q1), (k0, k1) = cq[b:b + 2], ck[b:b + 2]
        if q1 == q0 or k1 == k0:
            continue                      # no queries, or no keys: zeros / -inf (already there)
        res = sage_attention(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], o["softmax_scale"],
                             return_lse=return_lse, **forwarded)
        o_b, ls = res if return_lse else (res, None)
        out[q0:q1] = o_b[0]
        if return_lse:
            lse[:, q0:q1] = ls[0]
    return out, (lse if return_lse else lse.new_empty((0,)))


def _varlen_fake(*args):
    (q, *_), o = SAGE_ATTENTION_VARLEN.from_schema(args)
    validate.check_kernel_shipped(o["kernel"])
    return torch.empty_like(q), q.new_empty((q.shape[1], q.shape[0]) if o["return_lse"] else (0,),
                                            dtype=torch.float32)


_varlen_op = torch.library.custom_op("sage_co::sage_attention_varlen", _varlen_impl, mutates_args=(),
                                     schema=SAGE_ATTENTION_VARLEN.schema())
_varlen_op.register_fake(_varlen_fake)
