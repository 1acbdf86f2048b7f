"""SageAttention's Python API (`sageattn`, `sageattn_varlen`) on sage-co's kernels.

    from sage_co import sageattn
    out = sageattn(q, k, v)                                   # [B, H, S, D] ("HND", SageAttention's default)
    out, lse = sageattn(q, k, v, tensor_layout="NHD", return_lse=True)

Same contract as thu-ml SageAttention 2.x `sageattention.sageattn` (the API this module mirrors is
`SAGEATTENTION_API_VERSION`): "HND" = [B, H, S, D], "NHD" = [B, S, H, D]; `sm_scale` defaults to D ** -0.5;
`return_lse=True` returns (out, lse) with lse fp32 [B, H_q, S_q], the natural log of sum(exp(sm_scale * q.k)) over
the *unsmoothed* keys (sage-co adds the smooth-K correction back, docs/numerics.md §LSE, as SageAttention does).

One difference on purpose: SageAttention swallows unknown keyword arguments (`**kwargs`); here every keyword is
either honoured, accepted as a documented no-op spelling, or rejected with an error naming it (see `sageattn`).

Every call goes straight to `sage_co.sage_attention(..., layout=tensor_layout)`, which reads HND and NHD views in
place and serves bf16 and fp16, head dims that are multiples of 16 up to 128, separate Q and K/V lengths and
GQA/MQA (H_q a multiple of H_kv) natively: nothing is emulated here (K/V are never replicated, fp16 is never
converted to bf16) and the op's own errors name the argument. `is_causal=True` is the op's bottom-right aligned
causal mask and `sageattn_varlen` runs `sage_co.sage_attention_varlen` (packed == per-sequence calls bit for bit).
"""
from __future__ import annotations

import inspect
from functools import lru_cache
from typing import Any

import torch

SAGEATTENTION_API_VERSION = "2.2.0"  # thu-ml SageAttention release whose sageattn/sageattn_varlen API is mirrored
LAYOUTS = ("HND", "NHD")

# Keyword spellings callers of SageAttention pass, and the values sage-co accepts for each (anything else is an
# error naming the keyword). Why each value is honoured or a no-op is in sageattn's docstring.
_PV_ACCUM_ACCEPTED = ("fp32", "fp32+fp32", "fp16+fp32", "fp32+fp16")
_QK_GRAN_ACCEPTED = ("per_warp", "per_block")
_QUANT_BACKENDS_ACCEPTED = ("triton", "cuda")
_PV_DTYPES = ("fp8", "fp16")   # pv_dtype= / value_dtype=: sage_co.sage_attention's pv_dtype


class _Options:
    """sageattn's keywords after the policy: what the op must do."""

    def __init__(self, sm_scale, is_causal: bool, enable_gqa: bool | None, smooth_v: bool = False,
                 pv_dtype: str = "fp8"):
        self.sm_scale = sm_scale
        self.is_causal = is_causal
        self.enable_gqa = enable_gqa
        self.smooth_v = smooth_v
        self.pv_dtype = pv_dtype


def _is_zero(x) -> bool:
    return x is None or (isinstance(x, (int, float)) and not isinstance(x, bool) and x == 0)


def _reject(fn: str, name: str, value, why: str):
    raise ValueError(f"{name}: {fn} got {name}={value!r}; {why}")


def _bool_keyword(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected True or False, got {value!r}")
    return value


def _shown(value) -> str:
    """How an unserved value appears in the error: tensors and other objects by type name."""
    return value if value is None or isinstance(value, (bool, int, float, str, tuple, list)) else type(value).__name__


# Keywords accepted as no-op spellings: name -> (does this value ask for nothing sage-co does not already do,
# why any other value is refused). Why each is a no-op is in sageattn's docstring.
_NO_OP_KEYWORDS = {
    "attn_mask": (lambda v: v is None, "sage-co has no attention masks (use attn_mask=None)"),
    "dropout_p": (_is_zero, "sage-co has no dropout (inference only); pass 0.0"),
    "drop_rate": (_is_zero, "sage-co has no dropout (inference only); pass 0.0"),
    "pv_accum_dtype": (lambda v: v in _PV_ACCUM_ACCEPTED,
                       f"sage-co accumulates P.V in fp32; accepted spellings: {_PV_ACCUM_ACCEPTED}"),
    "qk_quant_gran": (lambda v: v in _QK_GRAN_ACCEPTED,
                      "sage-co quantizes Q and K per 32-token block (as fine as 'per_warp' or finer); "
                      f"accepted: {_QK_GRAN_ACCEPTED}"),
    "quantization_backend": (lambda v: v in _QUANT_BACKENDS_ACCEPTED,
                             f"accepted: {_QUANT_BACKENDS_ACCEPTED} (sage-co has one quantizer)"),
    "window_size": (lambda v: v is None or tuple(v) == (-1, -1), "sage-co has no sliding window; pass (-1, -1)"),
    "softcap": (_is_zero, "sage-co has no logit soft-capping; pass 0.0"),
    "alibi_slopes": (lambda v: v is None, "sage-co has no ALiBi; pass None"),
    "return_softmax": (lambda v: not v, "sage-co never materializes the attention probabilities"),
    "return_attn_probs": (lambda v: not v, "sage-co never materializes the attention probabilities"),
}


def _apply_kwargs(fn: str, kwargs: dict[str, Any], sm_scale, is_causal) -> _Options:
    """Apply the keyword policy (documented in sageattn) to the extra keywords; raise on anything not served."""
    enable_gqa, smooth_v, pv_dtype, pv_named = None, False, "fp8", None
    for name, value in kwargs.items():
        if name in _NO_OP_KEYWORDS:
            accepted, why = _NO_OP_KEYWORDS[name]
            if not accepted(value):
                _reject(fn, name, _shown(value), why)
        elif name in ("softmax_scale", "scale"):
            if value is not None:
                if sm_scale is not None and float(value) != float(sm_scale):
                    raise ValueError(f"{name}: {fn} got {name}={value!r} and sm_scale={sm_scale!r}; pass one")
                sm_scale = value
        elif name == "causal":
            is_causal = is_causal or _bool_keyword(name, value)
        elif name == "smooth_v":
            smooth_v = _bool_keyword(name, value)
        elif name in ("pv_dtype", "value_dtype"):
            if value not in _PV_DTYPES:
                _reject(fn, name, _shown(value), f"the P.V input type is one of {_PV_DTYPES}")
            if pv_named is not None and value != pv_dtype:
                raise ValueError(f"{name}: {fn} got {name}={value!r} and {pv_named}={pv_dtype!r}; pass one")
            pv_dtype, pv_named = value, name
        elif name == "deterministic":
            _bool_keyword(name, value)  # honoured either way: the forward has no atomics, every run is bitwise equal
        elif name == "enable_gqa":
            enable_gqa = _bool_keyword(name, value)
        else:
            raise TypeError(f"{fn}() got an unexpected keyword argument {name!r} (sage-co never drops keywords "
                            f"silently; see sage_co.compat.sageattn for the accepted ones)")
    _bool_keyword("is_causal", is_causal)
    return _Options(sm_scale, is_causal, enable_gqa, smooth_v, pv_dtype)


@lru_cache(maxsize=None)
def _op_params() -> frozenset[str]:
    """Keyword parameters of sage_co.sage_attention (whether issue 14's is_causal= has landed)."""
    from . import api
    return frozenset(inspect.signature(api.sage_attention).parameters)


def op_supports(feature: str) -> bool:
    """True when sage_co.sage_attention takes the keyword `feature` (e.g. "is_causal", issue 14)."""
    return feature in _op_params()


def _check_sm_scale(sm_scale):
    """sm_scale None (the op's default D ** -0.5, computed there from the real D) or what sage_co.validate
    accepts as softmax_scale, the error naming sm_scale. No math.isfinite / float(): under
    torch.compile(dynamic=True) a scale derived from a shape is symbolic (validate compares instead)."""
    from . import validate
    if sm_scale is None:
        return None
    try:
        return validate.check_softmax_scale(sm_scale)
    except (TypeError, ValueError) as exc:
        raise type(exc)(str(exc).replace("softmax_scale", "sm_scale")) from None


def _check_tensors(q, k, v, tensor_layout):
    if tensor_layout not in LAYOUTS:
        raise ValueError(f"tensor_layout: expected one of {LAYOUTS}, got {tensor_layout!r}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            dims = "[B, H, S, D]" if tensor_layout == "HND" else "[B, S, H, D]"
            raise ValueError(f"{name}: expected 4 dims {dims} (tensor_layout={tensor_layout!r}), "
                             f"got shape {tuple(t.shape)}")


def _heads_seq(t: torch.Tensor, tensor_layout: str) -> tuple[int, int]:
    return (t.shape[1], t.shape[2]) if tensor_layout == "HND" else (t.shape[2], t.shape[1])


def sageattn(q, k, v, tensor_layout: str = "HND", is_causal: bool = False, sm_scale: float | None = None,
             return_lse: bool = False, smooth_k: bool = True, **kwargs):
    """SageAttention's `sageattn` on sage-co: INT8 Q.K^T, FP8 P.V, fp32 accumulation (docs/numerics.md).

    q: [B, H_q, S_q, D] ("HND") or [B, S_q, H_q, D] ("NHD"); k, v: [B, H_kv, S_kv, D] / [B, S_kv, H_kv, D].
    Returns out in q's layout and dtype, and with return_lse=True also lse fp32 [B, H_q, S_q] (natural log of
    the unsmoothed scaled scores). CPU tensors run on the emulator, tensors on a gfx1201 on the GPU.

    Served: bf16 and fp16, head dim a multiple of 16 up to 128, S_q != S_kv, GQA/MQA (H_q a multiple of H_kv),
    both layouts read in place by the op (no copy here). is_causal=True is the op's bottom-right aligned causal
    mask (rows that see no key give zeros and LSE -inf).

    Keywords beyond SageAttention's named ones (never dropped silently):
      honoured:  softmax_scale= / scale= (the same as sm_scale), causal= (the same as is_causal),
                 deterministic= (sage-co's forward is deterministic either way),
                 enable_gqa= (True/False; False with different head counts is an error, as in SDPA),
                 smooth_v= (SageAttention's name: V minus its per-channel mean before FP8, added back after;
                 fp8 P.V only), pv_dtype= / value_dtype= ("fp8", the default, or "fp16": V kept in fp16 and P.V
                 on the f16 WMMA, SageAttention's qk_int8_pv_fp16 kernels).
      no-op spellings accepted (they ask for nothing sage-co does not already do):
                 attn_mask=None, dropout_p=0 / drop_rate=0, window_size=(-1, -1), softcap=0, alibi_slopes=None,
                 return_softmax=False / return_attn_probs=False,
                 pv_accum_dtype in ("fp32", "fp32+fp32", "fp16+fp32", "fp32+fp16") (each asks for fp32
                 accumulation at some level; sage-co accumulates P.V in fp32 throughout, with either pv_dtype;
                 the accumulator spelling does not pick the P.V input type: pass pv_dtype= for that),
                 qk_quant_gran in ("per_warp", "per_block") (sage-co's 32-token Q/K blocks are as fine or finer),
                 quantization_backend in ("triton", "cuda") (which of SageAttention's quantizers; sage-co has one).
      everything else, and any other value of the above, raises an error naming the keyword.
    """
    from . import api
    _check_tensors(q, k, v, tensor_layout)
    opts = _apply_kwargs("sageattn", kwargs, sm_scale, is_causal)
    _bool_keyword("return_lse", return_lse)
    _bool_keyword("smooth_k", smooth_k)
    scale = _check_sm_scale(opts.sm_scale)
    # is_causal goes straight to the op (it has it since issue 14); no op_supports() here: dynamo cannot trace
    # inspect.signature under torch.compile(fullgraph=True)
    if opts.enable_gqa is False and _heads_seq(q, tensor_layout)[0] != _heads_seq(k, tensor_layout)[0]:
        raise ValueError("enable_gqa: False but q and k have different head counts; pass enable_gqa=True")
    return api.sage_attention(q, k, v, scale, layout=tensor_layout, smooth_k=smooth_k,
                              return_lse=return_lse, smooth_v=opts.smooth_v, pv_dtype=opts.pv_dtype,
                              is_causal=opts.is_causal)


def sageattn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, is_causal: bool = False,
                    sm_scale: float | None = None, smooth_k: bool = True, **kwargs):
    """SageAttention's `sageattn_varlen` (packed [total, H, D] with cumulative lengths) on
    sage_co.sage_attention_varlen (issue 14: bit for bit the per-sequence calls); the keyword policy is sageattn's."""
    from .varlen import sage_attention_varlen as varlen
    opts = _apply_kwargs("sageattn_varlen", kwargs, sm_scale, is_causal)
    scale = _check_sm_scale(opts.sm_scale)
    return varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale,
                  is_causal=opts.is_causal, smooth_k=smooth_k, smooth_v=opts.smooth_v, pv_dtype=opts.pv_dtype)
