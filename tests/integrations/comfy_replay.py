"""ComfyUI's `attention_sage` and `attention_pytorch`, replayed line for line from ComfyUI's source with sageattn
taken from the `sageattention` module a framework imports (here: sage-co's shim), so the tests see exactly the calls
ComfyUI makes. ComfyUI is not a pip package (and its attention.py imports comfy.model_management, comfy.ops, ...),
so the few lines of the call pattern are copied here; `@wrap_attn` (ComfyUI's override hook, unrelated to what
reaches sageattn) is left out.

Sources (comfy/ldm/modules/attention.py):
  MASTER   Comfy-Org/ComfyUI@82997188568abe525d2b961fa2d4feae8f98f843 (2026 master): the signature check
           `SAGE_ATTENTION_SUPPORTS_MASK = "attn_mask" in inspect.signature(sageattn).parameters`, masked calls
           routed to attention_pytorch when it is False, `sage_kwargs` with sm_scale=scale and smooth_k=False,
           attn_mask only when there is one, GQA K/V repeated before sageattn.
  R2025    Comfy-Org/ComfyUI@a125cd84b054a57729b5eecab930ca9408719832 (2025-10-12; attention_sage unchanged since
           d7f40442, 2025-09-12, and the same call since e471c726, 2025-03-22, which added the ERROR + fallback):
           every call `sageattn(q, k, v, attn_mask=mask, is_causal=False, tensor_layout=...)`, attn_mask=None
           included, no scale passed; an exception logs ERROR and falls back to attention_pytorch.
"""
from __future__ import annotations

import inspect
import logging
from typing import NamedTuple

import torch

from sage_co.integrations.sageattention_shim import module_namespace

sageattn = module_namespace()["sageattn"]   # what `from sageattention import sageattn` yields with the shim active
SAGE_ATTENTION_SUPPORTS_MASK = "attn_mask" in inspect.signature(sageattn).parameters   # MASTER's check, verbatim


def _repeat_kv_for_gqa(k, v, heads, dim):   # comfy.ops.repeat_kv_for_gqa: K/V heads repeated to the query heads
    rep = heads // k.shape[dim]
    return k.repeat_interleave(rep, dim=dim), v.repeat_interleave(rep, dim=dim)


def _heads_from_dim(tensor, dim_head, name):
    inner_dim = tensor.shape[-1]
    if inner_dim % dim_head != 0:
        raise ValueError(f"{name} inner dimension {inner_dim} is not divisible by head dimension {dim_head}")
    return inner_dim // dim_head


def _reshape_qkv_to_heads(q, k, v, b, heads, dim_head, enable_gqa=False, expand_kv=True):   # MASTER
    q = q.unsqueeze(3).reshape(b, -1, heads, dim_head)
    if enable_gqa:
        key_heads = _heads_from_dim(k, dim_head, "Key")
        value_heads = _heads_from_dim(v, dim_head, "Value")
    else:
        key_heads = heads
        value_heads = heads
    k = k.unsqueeze(3).reshape(b, -1, key_heads, dim_head)
    v = v.unsqueeze(3).reshape(b, -1, value_heads, dim_head)
    if enable_gqa and expand_kv:
        k, v = _repeat_kv_for_gqa(k, v, heads, -2)
    return q, k, v


def attention_pytorch(q, k, v, heads, mask=None, attn_precision=None, skip_reshape=False, skip_output_reshape=False,
                      **kwargs):   # MASTER (SDP_BATCH_LIMIT loop left out: B is small here)
    if skip_reshape:
        b, _, _, dim_head = q.shape
    else:
        b, _, dim_head = q.shape
        dim_head //= heads
        q, k, v = _reshape_qkv_to_heads(q, k, v, b, heads, dim_head, kwargs.get("enable_gqa", False),
                                        expand_kv=False)
        q, k, v = map(lambda t: t.transpose(1, 2), (q, k, v))

    if mask is not None:
        if mask.ndim == 2:
            mask = mask.unsqueeze(0)
        if mask.ndim == 3:
            mask = mask.unsqueeze(1)

    sdpa_keys = ("scale", "enable_gqa")
    sdpa_extra = {k: v for k, v in kwargs.items() if k in sdpa_keys}
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=False,
                                                           **sdpa_extra)
    if not skip_output_reshape:
        out = out.transpose(1, 2).reshape(b, -1, heads * dim_head)
    return out


def attention_sage_master(q, k, v, heads, mask=None, attn_precision=None, skip_reshape=False,
                          skip_output_reshape=False, **kwargs):   # MASTER, verbatim but for @wrap_attn
    if kwargs.get("low_precision_attention", True) is False or (mask is not None and not SAGE_ATTENTION_SUPPORTS_MASK):
        return attention_pytorch(q, k, v, heads, mask=mask, skip_reshape=skip_reshape,
                                 skip_output_reshape=skip_output_reshape, **kwargs)

    exception_fallback = False
    if skip_reshape:
        b, _, _, dim_head = q.shape
        tensor_layout = "HND"
        if kwargs.get("enable_gqa", False):
            k, v = _repeat_kv_for_gqa(k, v, q.shape[-3], -3)
    else:
        b, _, dim_head = q.shape
        dim_head //= heads
        q, k, v = _reshape_qkv_to_heads(q, k, v, b, heads, dim_head, kwargs.get("enable_gqa", False))
        tensor_layout = "NHD"

    if mask is not None:
        if mask.ndim == 2:
            mask = mask.unsqueeze(0)
        if mask.ndim == 3:
            mask = mask.unsqueeze(1)

    sage_kwargs = {"is_causal": False, "tensor_layout": tensor_layout, "sm_scale": kwargs.get("scale", None),
                   "smooth_k": False}
    if mask is not None:
        sage_kwargs["attn_mask"] = mask

    try:
        out = sageattn(q, k, v, **sage_kwargs)
    except Exception as e:
        logging.error("Error running sage attention: {}, using pytorch attention instead.".format(e))
        exception_fallback = True
    if exception_fallback:
        if tensor_layout == "NHD":
            q, k, v = map(lambda t: t.transpose(1, 2), (q, k, v))
        return attention_pytorch(q, k, v, heads, mask=mask, skip_reshape=True,
                                 skip_output_reshape=skip_output_reshape, **kwargs)

    if tensor_layout == "HND":
        if not skip_output_reshape:
            out = out.transpose(1, 2).reshape(b, -1, heads * dim_head)
    else:
        if skip_output_reshape:
            out = out.transpose(1, 2)
        else:
            out = out.reshape(b, -1, heads * dim_head)
    return out


def attention_sage_2025(q, k, v, heads, mask=None, attn_precision=None, skip_reshape=False,
                        skip_output_reshape=False, **kwargs):   # R2025, verbatim but for @wrap_attn
    if skip_reshape:
        b, _, _, dim_head = q.shape
        tensor_layout = "HND"
    else:
        b, _, dim_head = q.shape
        dim_head //= heads
        q, k, v = map(lambda t: t.view(b, -1, heads, dim_head), (q, k, v))
        tensor_layout = "NHD"

    if mask is not None:
        if mask.ndim == 2:
            mask = mask.unsqueeze(0)
        if mask.ndim == 3:
            mask = mask.unsqueeze(1)

    try:
        out = sageattn(q, k, v, attn_mask=mask, is_causal=False, tensor_layout=tensor_layout)
    except Exception as e:
        logging.error("Error running sage attention: {}, using pytorch attention instead.".format(e))
        if tensor_layout == "NHD":
            q, k, v = map(lambda t: t.transpose(1, 2), (q, k, v))
        return attention_pytorch(q, k, v, heads, mask=mask, skip_reshape=True,
                                 skip_output_reshape=skip_output_reshape, **kwargs)

    if tensor_layout == "HND":
        if not skip_output_reshape:
            out = out.transpose(1, 2).reshape(b, -1, heads * dim_head)
    else:
        if skip_output_reshape:
            out = out.transpose(1, 2)
        else:
            out = out.reshape(b, -1, heads * dim_head)
    return out


VERSIONS = {"master": attention_sage_master, "2025": attention_sage_2025}


# ------------------------------------------------------------------------------- the cases the tests replay
B, HEADS, S = 2, 2, 77            # S not a multiple of 64; B = 2 with different masks per batch
VALID = (77, 50)                  # bool [B, 1, S] key padding: batch 1 sees only its first 50 keys (end padding)


class Case(NamedTuple):
    name: str           # what ComfyUI passes
    D: int
    dtype: torch.dtype
    mask: str           # "none", "additive [S,S]", "bool [B,1,S]"
    skip_reshape: bool  # True: [B, H, S, D] (Flux-style callers), False: [B, S, H * D]


CASES = (
    Case("no mask D=64", 64, torch.bfloat16, "none", False),
    Case("additive [S,S] D=64", 64, torch.bfloat16, "additive [S,S]", False),
    Case("bool [B,1,S] D=64", 64, torch.bfloat16, "bool [B,1,S]", False),
    Case("bool [B,1,S] D=128 HND", 128, torch.bfloat16, "bool [B,1,S]", True),
    Case("no mask D=40 (SD1.5)", 40, torch.float16, "none", False),
    Case("no mask D=80", 80, torch.bfloat16, "none", False),
    Case("no mask D=160 (SD1.5)", 160, torch.float16, "none", False),
    Case("fp32 no mask D=64 (CPU default)", 64, torch.float32, "none", False),
    Case("fp32 bool [B,1,S] D=64", 64, torch.float32, "bool [B,1,S]", False),
)


def make_mask(kind: str, dtype: torch.dtype, g: torch.Generator):
    if kind == "none":
        return None
    if kind == "bool [B,1,S]":
        return (torch.arange(S)[None, None, :] < torch.tensor(VALID)[:, None, None])   # [B, 1, S], True = attend
    if kind == "additive [S,S]":
        # a regional-prompt style bias: a finite random bias everywhere, -inf on blocked (query, key) regions
        # (keys 40.. hidden from queries ..29); every query still sees some keys
        bias = 0.5 * torch.randn(S, S, generator=g)
        bias[:30, 40:] = float("-inf")
        return bias.to(dtype)
    raise ValueError(kind)


def make_inputs(case: Case, seed: int = 0):
    """q, k, v as ComfyUI hands them to attention_sage ([B, S, heads * D], or [B, heads, S, D] with
    skip_reshape) and the mask in ComfyUI's shape."""
    g = torch.Generator().manual_seed(seed)
    shape = (B, HEADS, S, case.D) if case.skip_reshape else (B, S, HEADS * case.D)
    q, k, v = (torch.randn(*shape, generator=g).to(case.dtype) for _ in range(3))
    return q, k, v, make_mask(case.mask, case.dtype, g)


def reference(case: Case, q, k, v, mask):
    """ComfyUI's attention_pytorch on the inputs upcast to fp32 (the exact attention the call asks for)."""
    m = mask if mask is None or mask.dtype == torch.bool else mask.float()
    return attention_pytorch(q.float(), k.float(), v.float(), HEADS, mask=m, skip_reshape=case.skip_reshape)


def heads_rows(out: torch.Tensor, case: Case) -> torch.Tensor:
    """[B, S, heads * D] -> [B, S, heads, D] so accuracy's rows are one query of one head."""
    return out.reshape(B, S, HEADS, case.D)
