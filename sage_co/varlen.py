"""Variable-length (packed) attention: flash-attention's / SageAttention's varlen call on [total, H, D] tensors.

Design (docs/numerics.md §Varlen): one packed prepare (stats with its reduction, quant: the same kernels as sage_prepare with
their varlen flag) and ONE attention launch over every sequence, whatever the batch size. Every kernel reads
cu_seqlens_q / cu_seqlens_kv on the device: a workgroup finds its sequence's first token and length there, and its
prepared rows at abi.packed_row(cu[b], b) = 64 * ceil(cu[b] / 64) + 64 * b (no prefix sum, no host read). The
grids are sized from the caller's max_seqlen_q / max_seqlen_kv and the batch size, as flash-attention's are; a
workgroup past its sequence exits at once. Each sequence is quantized on its own (its 32-token scale blocks start at
its own first token, its k_mean / V statistics are over its own tokens, its padding is its own) and the attention
walks its own key tiles (causal bottom-right aligned per sequence), so the packed call equals the per-sequence
sage_attention calls bit for bit (tests/kernels/test_varlen_packed.py).

No host sync: a call on a GPU reads nothing back (graph-capturable after sage_co.launch.warmup). The caller's
contract, as flash-attention documents it: cu_seqlens_q / cu_seqlens_kv are int32 (int64 is converted on the
device) [batch + 1] cumulative lengths that start at 0, never decrease and end at the packed lengths, and
max_seqlen_q / max_seqlen_kv are at least every sequence's length. The values are checked on the host only when
the call runs on the emulator (CPU tensors: no sync to avoid); dtype, shape and device are always checked.
pv_dtype="fp16" with bf16 V keeps sage_prepare's range check (one scalar read back: docs/numerics.md §pv_dtype
fp16).

A torch.library custom op (sage_co::sage_attention_varlen) whose schema is derived from sage_co.callspec: the
packed inputs, softmax_scale, return_lse, then every option of sage_attention that varlen takes (PASSTHROUGH),
so it traces under torch.compile(fullgraph=True, dynamic=True).
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from . import launch, tuning, validate
from .callspec import OPTIONS, SAGE_ATTENTION, SPLIT_FIXED, Option, OpSpec
from .ops import attention as attention_ops
from .ops import prepare as prepare_ops

# The options of sage_attention a varlen call takes: those the packed kernels implement (never one of
# sage_co.callspec.SPLIT_FIXED; softmax_scale is a parameter). A new option of sage_attention is refused here (a
# TypeError naming it, from OpSpec.bind) until the packed path implements it: taken unseen it would be ignored.
VARLEN_OPTIONS = ("is_causal", "smooth_k", "q_norm_weight", "k_norm_weight", "eps", "smooth_v", "pv_dtype",
                  "norm_rope_rounding", "backend", "kernel", "schedule")
PASSTHROUGH = SAGE_ATTENTION.passthrough(exclude=SPLIT_FIXED + ("softmax_scale",)) & frozenset(VARLEN_OPTIONS)

SAGE_ATTENTION_VARLEN = OpSpec(
    "sage_attention_varlen",
    (Option("q", "Tensor"), Option("k", "Tensor"), Option("v", "Tensor"), Option("cu_seqlens_q", "Tensor"),
     Option("cu_seqlens_kv", "Tensor"), Option("max_seqlen_q", "int"), Option("max_seqlen_kv", "int")),
    (OPTIONS["softmax_scale"], OPTIONS["return_lse"],
     *(o for o in SAGE_ATTENTION.schema_options if o.name in PASSTHROUGH)),
    "(Tensor, Tensor)")


def sage_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv, softmax_scale=None, *,
                          return_lse=False, **options):
    """q [total_q, H_q, D], k/v [total_kv, H_kv, D] packed (sequence b = rows cu_seqlens[b]:cu_seqlens[b+1]), bf16,
    fp16 or fp32. Returns out [total_q, H_q, D] in q's dtype (and lse fp32 [H_q, total_q]). is_causal is bottom-right
    aligned per sequence; a sequence with no keys gives zeros and lse -inf. `options`: sage_attention's (is_causal,
    smooth_k, backend, kernel, smooth_v, pv_dtype, ...: PASSTHROUGH). The caller's contract on cu_seqlens and
    max_seqlen (values not read on a GPU): the module docstring."""
    # every argument is checked up front, also when no sequence has both queries and keys (then nothing runs and
    # a bad backend / kernel / scale would otherwise pass unseen); messages quote the packed shapes
    sh = validate.check_packed_qkv(q, k, v)
    scale = validate.check_softmax_scale(softmax_scale, sh.D)
    validate.check_flag("return_lse", return_lse)
    if options.pop("attn_mask", None) is not None:   # the packed kernels walk each sequence's key tiles: no LUT
        raise TypeError("attn_mask: sage_attention_varlen does not take an attn_mask (the packed kernels serve "
                        "is_causal per sequence only; docs/numerics.md §Varlen); call sage_attention per sequence")
    opts = SAGE_ATTENTION.bind(options, "sage_attention_varlen", allowed=PASSTHROUGH)
    SAGE_ATTENTION.check(opts)
    validate.check_pv(opts["pv_dtype"], opts["smooth_v"])
    _check_cu(q, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv)
    values = {**opts, "softmax_scale": scale, "return_lse": return_lse}
    args = (q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv)
    if _eager(q, k, v, cu_seqlens_q, cu_seqlens_kv):   # no dispatch: the op's implementation directly
        out, lse = _run(*args, values)
    else:
        out, lse = _varlen_op(*SAGE_ATTENTION_VARLEN.to_schema(args, values))
    return (out, lse) if return_lse else out


def _eager(*tensors) -> bool:
    from .plan import eager
    return eager(*tensors)


def _check_cu(q, cu_q, cu_kv, max_q, max_kv) -> None:
    """What is checked without reading cu_seqlens: dtype, shape, device, the max_seqlen types."""
    validate.check_cu_seqlens_tensor("cu_seqlens_q", cu_q, max_q, "max_seqlen_q")
    validate.check_cu_seqlens_tensor("cu_seqlens_kv", cu_kv, max_kv, "max_seqlen_kv")
    if cu_q.shape[0] != cu_kv.shape[0]:
        raise ValueError(f"cu_seqlens_kv: {cu_kv.shape[0] - 1} sequences, cu_seqlens_q has {cu_q.shape[0] - 1}")
    for name, cu in (("cu_seqlens_q", cu_q), ("cu_seqlens_kv", cu_kv)):
        if cu.device != q.device and q.device.type != "meta":
            raise ValueError(f"{name}: expected a tensor on {q.device} (the device of q), got {cu.device}")
    for name, m in (("max_seqlen_q", max_q), ("max_seqlen_kv", max_kv)):
        if m < 0:
            raise ValueError(f"{name}: expected an int >= 0, got {m}")


class VarlenPlan(NamedTuple):
    """The launches of one varlen call shape (memoised): the packed prepare recipe (ops.prepare.recipe with
    packed=...), the attention launch (ops.attention.varlen_recipe), and what execute needs."""
    prepare: prepare_ops.PrepareRecipe
    attention: attention_ops.AttentionRecipe
    max_seqlen_q: int
    max_seqlen_kv: int


_plans: dict[tuple, VarlenPlan] = {}
_CACHE_SIZE = 256


def _plan(q, k, v, batch: int, max_q: int, max_kv: int, o: dict) -> VarlenPlan:
    from .plan import _attention_kernel_serves, _tensor_key
    key = (launch.backend_swaps, tuning.generation, batch, max_q, max_kv, _tensor_key(q), _tensor_key(k), _tensor_key(v),
           _tensor_key(o["q_norm_weight"]) if o["q_norm_weight"] is not None else None,
           _tensor_key(o["k_norm_weight"]) if o["k_norm_weight"] is not None else None,
           tuple((n, type(x), x.hex() if type(x) is float else x) for n, x in o.items()
                 if n not in ("q_norm_weight", "k_norm_weight")))
    hit = _plans.get(key)
    if hit is not None:
        return hit
    chk = validate.check_prepare_args(q[None], k[None], v[None], o["softmax_scale"], smooth_k=o["smooth_k"],
                                      q_norm_weight=o["q_norm_weight"], k_norm_weight=o["k_norm_weight"],
                                      eps=o["eps"], smooth_v=o["smooth_v"], pv_dtype=o["pv_dtype"],
                                      norm_rope_rounding=o["norm_rope_rounding"])
    total_q, total_kv = q.shape[0], k.shape[0]
    # every sequence fits in the packed totals: a larger bound only widens the grids
    max_q, max_kv = max(1, min(max_q, total_q)), max(1, min(max_kv, total_kv))
    sh = chk.shapes._replace(B=batch, S_q=max_q, S_kv=max_kv)
    attention_ops.check_schedule_built(o["schedule"], sh.D, o["pv_dtype"])
    _attention_kernel_serves(prepare_ops.d_pad(sh.D), prepare_ops.DTYPE_KEYS[sh.dtype], o["kernel"], o["pv_dtype"])
    validate.check_attention_length(max_q, sh.D, "max_seqlen_q")
    validate.check_attention_length(max_kv, sh.D, "max_seqlen_kv")
    opts = SAGE_ATTENTION_VARLEN.typed(o)   # the typed options object the recipes read
    backend = launch.resolve_backend(q, opts.backend)
    prep = prepare_ops.recipe(chk._replace(shapes=sh), opts, backend=backend, packed=(total_q, total_kv))
    att = attention_ops.varlen_recipe(opts, batch=batch, max_seqlen_q=max_q, total_q=total_q, total_kv=total_kv,
                                      H_q=sh.H_q, H_kv=sh.H_kv, D=sh.D, dtype=sh.dtype, backend=backend,
                                      device=q.device)
    hit = VarlenPlan(prep, att, max_q, max_kv)
    if len(_plans) >= _CACHE_SIZE:
        _plans.clear()
    _plans[key] = hit
    return hit


def _device_cu(cu: torch.Tensor, device: torch.device) -> torch.Tensor:
    """cu_seqlens as the kernels read it: int32, contiguous, on the inputs' device (a device-side cast, no read)."""
    if cu.dtype != torch.int32 or not cu.is_contiguous() or cu.device != device:
        cu = cu.to(device=device, dtype=torch.int32, non_blocking=True).contiguous()
    return cu


def _run(q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv, o: dict):
    """The packed call: out [total_q, H_q, D], lse [H_q, total_q] (or an empty tensor without return_lse)."""
    batch = cu_seqlens_q.shape[0] - 1
    backend = launch.resolve_backend(q, o["backend"])
    if backend == "emu":   # host memory: the contract is checked (the emulator would fault on a bad index)
        validate.check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, q.shape[0], max_seqlen_q, "max_seqlen_q")
        validate.check_cu_seqlens("cu_seqlens_kv", cu_seqlens_kv, k.shape[0], max_seqlen_kv, "max_seqlen_kv")
    return_lse = o["return_lse"]
    if q.shape[0] == 0 or k.shape[0] == 0:   # no query, or no key anywhere: zeros / -inf, nothing to launch
        out = torch.zeros_like(q)
        lse = torch.full((q.shape[1], q.shape[0]), float("-inf"), dtype=torch.float32, device=q.device)
        return out, (lse if return_lse else lse.new_empty((0,)))
    p = _plan(q, k, v, batch, max_seqlen_q, max_seqlen_kv, o)
    cu_q, cu_kv = _device_cu(cu_seqlens_q, q.device), _device_cu(cu_seqlens_kv, q.device)
    packed = prepare_ops.execute_varlen(p.prepare, q, k, v, cu_q, cu_kv, total_q=q.shape[0],
                                        max_seqlen_q=p.max_seqlen_q, max_seqlen_kv=p.max_seqlen_kv,
                                        q_norm_weight=o["q_norm_weight"], k_norm_weight=o["k_norm_weight"])
    out, lse = attention_ops.execute_varlen(p.attention, packed)
    return out, (lse if return_lse else lse.new_empty((0,)))


def _varlen_impl(*args):
    inputs, o = SAGE_ATTENTION_VARLEN.from_schema(args)
    return _run(*inputs, o)


def _varlen_fake(*args):
    (q, *_), o = SAGE_ATTENTION_VARLEN.from_schema(args)
    validate.check_kernel_shipped(o["kernel"])
    return torch.empty_like(q), q.new_empty((q.shape[1], q.shape[0]) if o["return_lse"] else (0,),
                                            dtype=torch.float32)


sage_attention_varlen.__doc__ += "\n\n" + SAGE_ATTENTION_VARLEN.options_doc(PASSTHROUGH)

_varlen_op = torch.library.custom_op("sage_co::sage_attention_varlen", _varlen_impl, mutates_args=(),
                                     schema=SAGE_ATTENTION_VARLEN.schema())
_varlen_op.register_fake(_varlen_fake)
