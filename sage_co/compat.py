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
place and serves what `sageattn`'s docstring lists (dtypes, head dims, masks) natively: nothing is emulated here
(K/V are never replicated, fp16 is never converted to bf16, masks are handed to the op as given) and the op's own
errors name the argument. `is_causal=True` is the op's bottom-right aligned causal mask and `sageattn_varlen` runs
`sage_co.sage_attention_varlen` (packed == per-sequence calls bit for bit).

`attn_mask` is a named parameter of `sageattn` (thu-ml's takes it through **kwargs): ComfyUI decides whether a
masked call may reach sageattn with `"attn_mask" in inspect.signature(sageattn).parameters`, and sends it to
PyTorch attention otherwise.

The keyword table is derived from the op's call spec (sage_co.callspec.SAGE_ATTENTION): every option of
sage_co.sage_attention is a keyword here, under its own name and under the SageAttention spellings its declaration
lists (`Option.aliases`: sm_scale / scale for softmax_scale, causal for is_causal, value_dtype for pv_dtype,
tensor_layout for layout). A new option of the op is a keyword of sageattn without an edit here. What is
SageAttention's alone (keywords asking for something sage-co already does, enable_gqa) is `_EXTRA_KEYWORDS` below.
"""
from __future__ import annotations

from typing import Any

import torch

from . import validate
from .callspec import SAGE_ATTENTION

SAGEATTENTION_API_VERSION = "2.2.0"  # thu-ml SageAttention release whose sageattn/sageattn_varlen API is mirrored

# Keyword spellings callers of SageAttention pass, and the values sage-co accepts for each (anything else is an
# error naming the keyword). Why each value is honoured or a no-op is in sageattn's docstring.
_PV_ACCUM_ACCEPTED = ("fp32", "fp32+fp32", "fp16+fp32", "fp32+fp16")
_QK_GRAN_ACCEPTED = ("per_warp", "per_block")
_QUANT_BACKENDS_ACCEPTED = ("triton", "cuda")


def _is_zero(x) -> bool:
    return x is None or (isinstance(x, (int, float)) and not isinstance(x, bool) and x == 0)


def _reject(fn: str, name: str, value, why: str):
    raise ValueError(f"{name}: {fn} got {_shown(name, value)}; {why}")


def _shown(name: str, value) -> str:
    """How an unserved value appears in an error: a tensor by its dtype and shape (`a torch.bool tensor of shape
    [2, 1, 1, 77]`), plain values by repr (`dropout_p=0.1`), other objects by their type."""
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {list(value.shape)}"
    if value is None or isinstance(value, (bool, int, float, str, tuple, list)):
        return f"{name}={value!r}"
    return f"{name} of type {type(value).__name__}"


def _heads(t, layout: str) -> int | None:
    return (t.shape[1] if layout == "HND" else t.shape[2]) if isinstance(t, torch.Tensor) and t.dim() == 4 else None


def _no_op(accepted, why: str):
    """A keyword accepted only with values that ask for nothing sage-co does not already do."""
    def check(fn: str, name: str, value, q, k, layout: str) -> None:
        if not accepted(value):
            _reject(fn, name, value, why)
    return check


def _deterministic(fn, name, value, q, k, layout) -> None:
    validate.check_flag(name, value)   # honoured either way: the forward has no atomics, every run is bitwise equal


def _enable_gqa(fn, name, value, q, k, layout) -> None:
    validate.check_flag(name, value)
    hq, hk = _heads(q, layout), _heads(k, layout)
    if value is False and hq is not None and hk is not None and hq != hk:
        raise ValueError("enable_gqa: False but q and k have different head counts; pass enable_gqa=True")


# SageAttention's keywords that are not options of the op: name -> check(fn, name, value, q, k, layout).
_EXTRA_KEYWORDS = {
    "dropout_p": _no_op(_is_zero, "sage-co has no dropout (inference only); pass 0.0"),
    "drop_rate": _no_op(_is_zero, "sage-co has no dropout (inference only); pass 0.0"),
    "pv_accum_dtype": _no_op(lambda v: v in _PV_ACCUM_ACCEPTED,
                             f"sage-co accumulates P.V in fp32; accepted spellings: {_PV_ACCUM_ACCEPTED}"),
    "qk_quant_gran": _no_op(lambda v: v in _QK_GRAN_ACCEPTED,
                            "sage-co quantizes Q and K per 32-token block (as fine as 'per_warp' or finer); "
                            f"accepted: {_QK_GRAN_ACCEPTED}"),
    "quantization_backend": _no_op(lambda v: v in _QUANT_BACKENDS_ACCEPTED,
                                   f"accepted: {_QUANT_BACKENDS_ACCEPTED} (sage-co has one quantizer)"),
    "window_size": _no_op(lambda v: v is None or tuple(v) == (-1, -1), "sage-co has no sliding window; pass (-1, -1)"),
    "softcap": _no_op(_is_zero, "sage-co has no logit soft-capping; pass 0.0"),
    "alibi_slopes": _no_op(lambda v: v is None, "sage-co has no ALiBi; pass None"),
    "return_softmax": _no_op(lambda v: not v, "sage-co never materializes the attention probabilities"),
    "return_attn_probs": _no_op(lambda v: not v, "sage-co never materializes the attention probabilities"),
    "deterministic": _deterministic,
    "enable_gqa": _enable_gqa,
}


def _as_spelled(spelling: str, option: str, value):
    """The option's own validator on a value given under an alias, its error renamed to the caller's spelling."""
    check = SAGE_ATTENTION.option(option).check
    if check is None and option == "softmax_scale" and value is not None:
        # its check needs the head dim only for the default (None); a given value is checked here, so that
        # sm_scale="a" names sm_scale (not softmax_scale) also where nothing runs (varlen with no sequence pair)
        check = validate.check_softmax_scale
    if check is None:
        return value
    try:
        return check(value)
    except (TypeError, ValueError) as e:
        msg = str(e)
        raise type(e)(spelling + msg[len(option):] if msg.startswith(option + ":") else f"{spelling}: {msg}") from None


def _asks(value) -> bool:
    """A spelling asks for something unless it holds None or False (the 'not given' values of every option)."""
    return value is not None and value is not False


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return a is b
    return a == b


def _apply_kwargs(fn: str, named: dict[str, Any], kwargs: dict[str, Any], q, k) -> dict[str, Any]:
    """The keyword policy (documented in sageattn): `named` (the function's own parameters, by spelling) and
    `kwargs` -> the op's options. Two spellings of one option that both ask for something must agree."""
    aliases = SAGE_ATTENTION.alias_names
    chosen: dict[str, tuple[str, Any]] = {}
    extras = []
    for spelling, value in (*named.items(), *kwargs.items()):
        option = aliases.get(spelling)
        if option is None:
            if spelling not in _EXTRA_KEYWORDS:
                raise TypeError(f"{fn}() got an unexpected keyword argument {spelling!r} (sage-co never drops "
                                f"keywords silently; see sage_co.compat.sageattn for the accepted ones)")
            extras.append((spelling, value))
            continue
        if spelling != option:
            value = _as_spelled(spelling, option, value)
        prev = chosen.get(option)
        if prev is not None and _asks(prev[1]) and _asks(value) and not _same(prev[1], value):
            raise ValueError(f"{spelling}: {fn} got {spelling}={value!r} and {prev[0]}={prev[1]!r}; pass one")
        if prev is None or _asks(value):
            chosen[option] = (spelling, value)
    options = {option: value for option, (_, value) in chosen.items()}
    layout = options.get("layout", "NHD")
    for name, value in extras:
        _EXTRA_KEYWORDS[name](fn, name, value, q, k, layout)
    if options.get("softmax_scale") is None and isinstance(q, torch.Tensor):
        options["softmax_scale"] = q.shape[-1] ** -0.5   # SageAttention's default, D ** -0.5
    return options


def op_supports(feature: str) -> bool:
    """True when sage_co.sage_attention takes the keyword `feature` (its call spec declares it)."""
    return feature in SAGE_ATTENTION.option_names


def sageattn(q, k, v, tensor_layout: str = "HND", is_causal: bool = False, sm_scale: float | None = None,
             return_lse: bool = False, smooth_k: bool = True, attn_mask=None, **kwargs):
    """SageAttention's `sageattn` on sage-co: INT8 Q.K^T, FP8 P.V, fp32 accumulation (docs/numerics.md).

    q: [B, H_q, S_q, D] ("HND") or [B, S_q, H_q, D] ("NHD"); k, v: [B, H_kv, S_kv, D] / [B, S_kv, H_kv, D].
    Returns out in q's layout and dtype, and with return_lse=True also lse fp32 [B, H_q, S_q] (natural log of
    the unsmoothed scaled scores). CPU tensors run on the emulator, tensors on a gfx1201 on the GPU.

    What runs on sage-co (anything else raises before any kernel runs: a TypeError / ValueError whose message
    starts with the argument's name and quotes its shape and dtype, e.g. "attn_mask: expected a shape broadcastable
    to [B, H_q, S_q, S_kv] = [2, 2, 77, 77] ..., got torch.bool [2, 1, 5]"):
      dtypes     q, k, v of one dtype: bfloat16, float16 or float32 (the output has that dtype; fp32 is prepared
                 from fp32, docs/numerics.md §Inputs);
      head dims  any D in 1..abi.HEAD_DIM_MAX (256), zero-padded to 64, 128 or 256 (abi.d_pad);
      shapes     S_q != S_kv (cross-attention), any lengths, GQA/MQA (H_q a multiple of H_kv), both layouts read
                 in place (no copy here);
      is_causal  the op's bottom-right aligned causal mask;
      attn_mask  SDPA's mask: bool (True = attend) or additive float32 / bfloat16 / float16, broadcastable to
                 [B, H_q, S_q, S_kv] with SDPA's trailing alignment whatever tensor_layout is -- key padding
                 [B, 1, 1, S_kv] (ComfyUI's bool [B, 1, S] after its unsqueeze, HunyuanVideo), [B, H, 1, S_kv]
                 (LTX-Video's 0 / -10000), [1, 1, S_q, S_kv] (ComfyUI's additive [S, S]), full [B, H, S_q, S_kv];
                 an additive 0 / -inf mask is exactly the bool one; combines with is_causal
                 (docs/numerics.md §Masks). Rows that see no key give zeros and LSE -inf.

    Keywords beyond SageAttention's named ones (never dropped silently):
      honoured:  every option of sage_co.sage_attention under its own name (smooth_v=, pv_dtype=, kernel=,
                 backend=, ...; sage_co.callspec.SAGE_ATTENTION) and under SageAttention's spellings:
                 softmax_scale= / scale= (the same as sm_scale), causal= (the same as is_causal),
                 value_dtype= (the same as pv_dtype: "fp8", the default, or "fp16": V kept in fp16 and P.V on
                 the f16 WMMA, SageAttention's qk_int8_pv_fp16 kernels); smooth_v= is SageAttention's name (V
                 minus its per-channel mean before FP8, added back after; fp8 P.V only);
                 deterministic= (sage-co's forward is deterministic either way),
                 enable_gqa= (True/False; False with different head counts is an error, as in SDPA).
      no-op spellings accepted (they ask for nothing sage-co does not already do):
                 dropout_p=0 / drop_rate=0, window_size=(-1, -1), softcap=0, alibi_slopes=None,
                 return_softmax=False / return_attn_probs=False,
                 pv_accum_dtype in ("fp32", "fp32+fp32", "fp16+fp32", "fp32+fp16") (each asks for fp32
                 accumulation at some level; sage-co accumulates P.V in fp32 throughout, with either pv_dtype;
                 the accumulator spelling does not pick the P.V input type: pass pv_dtype= for that),
                 qk_quant_gran in ("per_warp", "per_block") (sage-co's 32-token Q/K blocks are as fine or finer),
                 quantization_backend in ("triton", "cuda") (which of SageAttention's quantizers; sage-co has one).
      everything else, and any other value of the above, raises an error naming the keyword; two spellings of
      one option must agree.
    """
    from . import api
    named = {"tensor_layout": tensor_layout, "is_causal": is_causal, "sm_scale": sm_scale, "return_lse": return_lse,
             "smooth_k": smooth_k, "attn_mask": attn_mask}
    options = _apply_kwargs("sageattn", named, kwargs, q, k)
    return api.sage_attention(q, k, v, **options)


def sageattn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, is_causal: bool = False,
                    sm_scale: float | None = None, smooth_k: bool = True, **kwargs):
    """SageAttention's `sageattn_varlen` (packed [total, H, D] with cumulative lengths) on
    sage_co.sage_attention_varlen (issue 14: bit for bit the per-sequence calls); the keyword policy is sageattn's
    (the options varlen fixes itself, sage_co.callspec.SPLIT_FIXED, are refused by varlen naming them)."""
    from .varlen import sage_attention_varlen as varlen
    named = {"is_causal": is_causal, "sm_scale": sm_scale, "smooth_k": smooth_k}
    options = _apply_kwargs("sageattn_varlen", named, kwargs, None, None)
    if options.get("softmax_scale") is None and isinstance(q, torch.Tensor):
        options["softmax_scale"] = q.shape[-1] ** -0.5
    return varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, **options)
