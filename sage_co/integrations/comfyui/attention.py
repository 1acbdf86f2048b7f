"""A ComfyUI attention function on sage-co, in ComfyUI's attention-function contract.

ComfyUI (comfy/ldm/modules/attention.py) calls `fn(q, k, v, heads, mask=None, attn_precision=None,
skip_reshape=False, skip_output_reshape=False, **kwargs)`: q/k/v are [B, S, heads * D] (skip_reshape=True:
[B, heads, S, D]); the result is [B, S_q, heads * D] (skip_output_reshape=True: [B, heads, S_q, D]). kwargs may
carry scale=, enable_gqa= (k/v then have fewer heads), low_precision_attention= (False: the caller wants full
precision) and ComfyUI's own keys (transformer_options, _inside_attn_wrapper), which are passed on untouched.

A call sage-co serves (sage_co.sdpa.fallback_reason, the SDPA router's rule, which asks the op itself) runs
sage_co.sage_attention on the [B, H, S, D] views: bf16 / fp16 / fp32, any head dim 1..256 (SD1.5's 40 and 160),
GQA (enable_gqa), and ComfyUI's masks -- `mask` follows ComfyUI's convention (a 2-dim [S_q, S_kv] mask gets a
batch dim, a 3-dim [B, S_q or 1, S_kv] one a heads dim, as ComfyUI's attention_pytorch / attention_sage do) and is
then SDPA's: bool (True = attend) or additive float. Any other call (low_precision_attention=False, what the op
refuses) runs the fallback with the same arguments: ComfyUI's attention function that sage-co replaced when known
(the override route passes it), else ComfyUI's attention_pytorch; so does a served call whose GPU binding or launch
fails (sage_co.hostsafe: the workflow keeps running). Each decision is counted in sage_co.sdpa.stats(), a fallback
with its reason.
attn_precision (ComfyUI's fp32 upcast of Q.K^T for some models) does not apply: sage-co's Q.K^T is INT8 with
fp32 accumulation.
"""
from __future__ import annotations

from ... import hostsafe, sdpa


def _pytorch_attention():
    from comfy.ldm.modules import attention   # ComfyUI's own module: present wherever this function is called
    return attention.attention_pytorch


def _heads_view(t, b: int, dim_head: int):
    """[B, S, H * D] -> the [B, H, S, D] view (no copy when the last dim is contiguous)."""
    return t.reshape(b, t.shape[1], t.shape[-1] // dim_head, dim_head).transpose(1, 2)


def _comfy_mask(mask):
    """ComfyUI's mask convention -> SDPA's: a 2-dim mask gets a batch dim, a 3-dim one a heads dim (ComfyUI's
    attention_pytorch / attention_sage do exactly this before SDPA / sageattn), so [S_q, S_kv] -> [1, 1, S_q, S_kv]
    and [B, S_q or 1, S_kv] -> [B, 1, S_q or 1, S_kv]."""
    if mask is not None and mask.ndim == 2:
        mask = mask.unsqueeze(0)
    if mask is not None and mask.ndim == 3:
        mask = mask.unsqueeze(1)
    return mask


def make_attention(options: sdpa.Options = sdpa.Options(), fallback=None):
    """The ComfyUI attention function running sage-co with `options`; `fallback` (ComfyUI's function, same
    contract) serves the calls sage-co does not (None = comfy's attention_pytorch, looked up at call time)."""

    def sage_co_attention(q, k, v, heads, mask=None, attn_precision=None, skip_reshape=False,
                          skip_output_reshape=False, **kwargs):
        b = q.shape[0]
        if skip_reshape:
            qh, kh, vh = q, k, v
            dim_head = q.shape[-1]
        else:
            dim_head = q.shape[-1] // heads
            qh, kh, vh = (_heads_view(t, b, dim_head) for t in (q, k, v))
        sdpa_mask = _comfy_mask(mask)
        if kwargs.get("low_precision_attention", True) is False:
            reason = "low_precision_attention: ComfyUI asked for full-precision attention"
        elif qh.shape[1] != heads:
            reason = f"heads: q has {qh.shape[1]} heads, ComfyUI passed heads={heads}"
        else:
            reason = sdpa.fallback_reason(qh, kh, vh, attn_mask=sdpa_mask, scale=kwargs.get("scale"),
                                          enable_gqa=bool(kwargs.get("enable_gqa", False)), options=options)
        sdpa.record(reason)

        def host():
            fn = fallback if fallback is not None else _pytorch_attention()
            return fn(q, k, v, heads, mask=mask, attn_precision=attn_precision, skip_reshape=skip_reshape,
                      skip_output_reshape=skip_output_reshape, **kwargs)
        if reason:
            return host()

        def sage():
            out = sdpa.run(qh, kh, vh, scale=kwargs.get("scale"), options=options, attn_mask=sdpa_mask)  # [B,H,S_q,D]
            return out if skip_output_reshape else out.transpose(1, 2).reshape(b, -1, heads * dim_head)
        return hostsafe.guarded(sage, host, routed=True)   # a GPU error: ComfyUI's attention, the reason counted

    sage_co_attention.sage_co_options = options
    return sage_co_attention


def make_override(options: sdpa.Options = sdpa.Options()):
    """ComfyUI's transformer_options["optimized_attention_override"] form: called as override(func, *args,
    **kwargs) with the attention function it replaces, which then serves the calls sage-co does not."""

    def optimized_attention_override(func, *args, **kwargs):
        return make_attention(options, fallback=func)(*args, **kwargs)

    optimized_attention_override.sage_co_options = options
    return optimized_attention_override
