"""plan_call: check one call of a public op once, and plan it.

    plan = plan_call(callspec.SAGE_ATTENTION, (q, k, v), options)    # options: OpSpec.bind(...) of the call
    plan.shapes, plan.layout, plan.prepare (ops.prepare.PrepareRecipe), plan.attention (ops.attention.AttentionRecipe)

Every refusal of docs/numerics.md §Inputs happens here, before any kernel, with sage_co.validate's messages: the
inputs (validate.check_prepare_args / check_prepared), every option's own validator (sage_co.callspec), then what
needs the shapes (the shipped kernel for this head dim / dtype / pv_dtype / kernel, the query-head limit, the
attention length, the block mask). With `resolve=True` (the default) the plan also holds the recipes the ops
execute, made from the call's typed options object (spec.typed: the op's frozen dataclass): the resolved
ShippedKernels, grids, kernarg flags (sage_co.abi.FLAG_OPTIONS), scalar kernargs and how each input is read;
sage_co.ops.* take them and check nothing again.

`resolve=False` is what the Python functions run while torch.compile traces them (every check, no recipe; no
manifest read except through `_attention_kernel_serves`, whose answer dynamo takes as a constant; every other check
is plain comparisons, also on symbolic sizes); the custom op's real implementation plans again when it runs.

Repeated calls: validation and planning depend only on the tensors' metadata (type, shape, strides, dtype,
device, requires_grad, 16-byte alignment), the option values (with their types) and the backends installed (launch.use_backend), so
eager plans are memoised on exactly that key; a hit costs one key build and a dict lookup, and makes the same decisions a miss would.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import torch

from . import callspec, launch, masks, sparse, tuning, validate
from .tracing import constant_result
from .launch import resolve_backend
from .ops import attention as attention_ops
from .ops import prepare as prepare_ops
from .prepared import DTYPE_KEYS, SagePrepared, d_pad

# The options validate.check_prepare_args checks (with the shapes); every other option's own validator runs once.
_PREPARE_ARGS = frozenset({"softmax_scale", "layout", "smooth_k", "q_norm_weight", "k_norm_weight", "eps", "cos",
                           "sin", "rope_dim", "smooth_v", "pv_dtype", "norm_rope_rounding"})
_CACHE_SIZE = 256


class Plan(NamedTuple):
    """One checked call: sizes, layout, the NHD views of q/k/v (None for a forward on a SagePrepared), the resolved
    softmax scale and rope_dim, the option values, and (resolved plans) the recipes of the kernels to run."""
    op: str
    shapes: validate.Shapes
    layout: str
    q: torch.Tensor | None
    k: torch.Tensor | None
    v: torch.Tensor | None
    softmax_scale: float | None
    rope_dim: int | None
    options: dict
    prepare: Any = None       # ops.prepare.PrepareRecipe
    attention: Any = None     # ops.attention.AttentionRecipe


@constant_result
def _attention_kernel_serves(D_pad: int, dtype_key: str, kernel, pv_dtype: str) -> bool:
    """A shipped attention kernel serves (kernel, D_pad, dtype, pv_dtype): a LookupError listing what is shipped
    otherwise. It reads hsaco/manifest.json, which dynamo cannot trace: under torch.compile it runs once at trace
    time, on static values only (D_pad is 64 or 128 whatever D is; sizes never reach it)."""
    from . import registry
    registry.find(attention_ops.OP, kernel, head_dim=D_pad, out_dtype=dtype_key, pv_dtype=pv_dtype)
    return True


def _check_attention(sh: validate.Shapes, kernel, pv_dtype: str, names=("q", "k"), schedule=None) -> None:
    """The attention kernel's limits for these shapes, before any kernel (prepare included)."""
    attention_ops.check_query_heads(sh.H_q, names[0] if names[0] == "q" else "prepared.q_int8")
    attention_ops.check_schedule_built(schedule, sh.D, pv_dtype)
    kernel = attention_ops.served_kernel(kernel, sh.D, pv_dtype, names[0])
    _attention_kernel_serves(d_pad(sh.D), DTYPE_KEYS[sh.dtype], kernel, pv_dtype)
    validate.check_attention_length(sh.S_q, sh.D, names[0])
    validate.check_attention_length(sh.S_kv, sh.D, names[1])


def _check_options(spec: callspec.OpSpec, o: dict, skip=_PREPARE_ARGS) -> None:
    for opt in spec.options:
        if opt.check is not None and opt.name not in skip:
            opt.check(o[opt.name])


def _plan_qkv(spec: callspec.OpSpec, q, k, v, o: dict, resolve: bool) -> Plan:
    chk = validate.check_prepare_args(q, k, v, o["softmax_scale"], layout=o["layout"], smooth_k=o["smooth_k"],
                                      q_norm_weight=o["q_norm_weight"], k_norm_weight=o["k_norm_weight"],
                                      eps=o["eps"], cos=o["cos"], sin=o["sin"], rope_dim=o["rope_dim"],
                                      smooth_v=o["smooth_v"], pv_dtype=o["pv_dtype"],
                                      norm_rope_rounding=o["norm_rope_rounding"])
    if "sparsity" in o:   # the combination first: cdf_threshold=5 without sparsity names the missing sparsity
        sparse.check_sparsity(o["sparsity"], o["cdf_threshold"], o["block_mask"])
        if o["sparsity"] == "auto":   # the predictor kernels' limits (head dim, dtype, key blocks): refused here,
            from .ops.predict import check_predict_limits   # not after the prepare ran
            check_predict_limits(chk.shapes)
    _check_options(spec, o)
    sh = chk.shapes
    attends = "kernel" in o
    if attends:
        _check_attention(sh, o["kernel"], o["pv_dtype"], schedule=o["schedule"])
        masks.check_block_mask(o["block_mask"], sh.B, sh.H_q, sh.S_q, sh.S_kv, device=q.device)
        masks.check_attn_mask(o["attn_mask"], sh.B, sh.H_q, sh.S_q, sh.S_kv, device=q.device)
    prep = att = None
    if resolve:
        opts = spec.typed(o)   # the typed options object the recipes read
        backend = resolve_backend(q, opts.backend)
        prep = prepare_ops.recipe(chk, opts, backend=backend)
        if attends:
            att = attention_ops.recipe(sh, opts, backend=backend,
                                       has_lse_corr=opts.smooth_k,   # the prepare's lse_corr (smooth_k)
                                       staged=prep.buffers.workspace[1],   # api._run_attention's own prepare
                                       device=q.device)
    return Plan(spec.name, sh, o["layout"], chk.q, chk.k, chk.v, chk.softmax_scale, chk.rope_dim, o, prep, att)


def _plan_prepared(spec: callspec.OpSpec, prepared: SagePrepared, o: dict, resolve: bool) -> Plan:
    _check_options(spec, o, skip=())
    sh = validate.check_prepared(prepared)
    _check_attention(sh, o["kernel"], prepared.pv_dtype, ("prepared.seq_len_q", "prepared.seq_len_kv"),
                     schedule=o["schedule"])
    masks.check_block_mask(o["block_mask"], sh.B, sh.H_q, sh.S_q, sh.S_kv, device=prepared.q_int8.device)
    masks.check_attn_mask(o["attn_mask"], sh.B, sh.H_q, sh.S_q, sh.S_kv, device=prepared.q_int8.device)
    att = None
    if resolve:
        # the typed options with what the SagePrepared fixes (its pv_dtype, v_mean = smooth_v, lse_corr = smooth_k)
        opts = spec.typed({**o, "v_mean": prepared.v_mean, "pv_dtype": prepared.pv_dtype,
                           "lse_corr": prepared.lse_corr})
        att = attention_ops.recipe(sh, opts, backend=resolve_backend(prepared.q_int8, opts.backend),
                                   has_lse_corr=prepared.lse_corr is not None, device=prepared.q_int8.device)
    return Plan(spec.name, sh, o["layout"], None, None, None, None, None, o, None, att)


_Tensor = torch.Tensor


def _tensor_key(t) -> tuple | None:
    if type(t) is not _Tensor:
        return None
    return (t.shape, t.stride(), t.dtype, t.device, t.requires_grad, t.data_ptr() & 15)


_PLAIN = frozenset({type(None), bool, int, str})   # option values that are their own key (with their type)
_PLAIN_OR_FLOAT = _PLAIN | {float}
_UNSEEN = object()
_float_slots: dict[tuple, tuple | None] = {}   # option types -> where the floats are (None: a value needs _value_key)


def _value_key(x):
    """One option value in the memo key: a tensor by its metadata, a float by its bits (-0.0 and 0.0 are different
    scales), anything else as itself."""
    if type(x) is float:
        return x.hex()
    return _tensor_key(x) if isinstance(x, torch.Tensor) else x


def _key(spec: callspec.OpSpec, inputs: tuple, o: dict):
    """The memo key of a call: the inputs' metadata, every option's type and value (a tensor option by its
    metadata); None when some part cannot be a key (then the call is planned uncached). Built in one pass with
    no per-value work for the plain values (None, bool, int, str: most options)."""
    first = inputs[0]
    tensors = tuple(map(_tensor_key, first if type(first) is SagePrepared else inputs))
    if None in tensors:   # a tensor subclass, or a SagePrepared field that is not a plain tensor (v_mean None, ...)
        if type(first) is SagePrepared:
            tensors = tuple(_tensor_key(t) if isinstance(t, torch.Tensor) else (type(t), t) for t in first)
        if None in tensors:
            return None
    values = tuple(o.values())
    types = tuple(map(type, values))
    # floats are their own key (with their type) except a zero, whose sign == ignores; NaN never hits (NaN != NaN)
    floats = _float_slots.get(types, _UNSEEN)
    if floats is _UNSEEN:
        if len(_float_slots) >= _CACHE_SIZE:
            _float_slots.clear()
        floats = _float_slots[types] = (tuple(i for i, t in enumerate(types) if t is float)
                                        if _PLAIN_OR_FLOAT.issuperset(types) else None)
    signed_zero = floats is None
    if not signed_zero:
        for i in floats:
            if values[i] == 0.0:
                signed_zero = True
                break
    if signed_zero:
        values = tuple(x if t in _PLAIN else _value_key(x) for x, t in zip(values, types))
    # launch.backend_swaps: a plan resolved (device checks included) before a backend was swapped is not reused;
    # tuning.generation: nor one whose default schedule was resolved before a tuned choice was stored.
    # Not hashed here: plan_call's lookup hashes it once (an unhashable part: TypeError there, planned uncached)
    return (spec.name, launch.backend_swaps, tuning.generation, tuple(o), tensors, types, values)


_plans: dict[tuple, Plan] = {}


def memo_size() -> int:
    """How many call plans are memoised now (a repeated call adds none; bounded by the memo's size)."""
    return len(_plans)


def _fresh(spec, inputs, o, resolve):
    if spec.name == callspec.SAGE_ATTENTION_FWD.name:
        return _plan_prepared(spec, inputs[0], o, resolve)
    return _plan_qkv(spec, *inputs, o, resolve)


def plan_call(spec: callspec.OpSpec, inputs: tuple, options: dict, *, resolve: bool = True) -> Plan:
    """Check one call of `spec` (inputs: (q, k, v), or (prepared,) for sage_attention_fwd; options: the bound
    keyword values, spec.bind) and plan it; see the module docstring. Memoised for resolved eager plans."""
    if not resolve or torch.compiler.is_compiling():
        return _fresh(spec, inputs, options, resolve)
    key = _key(spec, inputs, options)
    try:
        hit = _plans.get(key) if key is not None else None
    except TypeError:   # an unhashable option value: planned uncached
        hit = key = None
    if hit is None:
        hit = _fresh(spec, inputs, options, True)
        if key is not None:
            if len(_plans) >= _CACHE_SIZE:
                _plans.clear()
            _plans[key] = hit._replace(q=None, k=None, v=None, options=None)   # no tensors kept alive
        return hit
    op, shapes, layout, _, _, _, scale, rope_dim, _, prep, att = hit
    if op == callspec.SAGE_ATTENTION_FWD.name:
        return _make_plan((op, shapes, layout, None, None, None, scale, rope_dim, options, prep, att))
    q, k, v = inputs
    if layout == "HND":
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    # Plan._make: the hit's fields with this call's tensors and options (cheaper than NamedTuple._replace)
    return _make_plan((op, shapes, layout, q, k, v, scale, rope_dim, options, prep, att))


_make_plan = Plan._make


def eager(*tensors) -> bool:
    """True when a call can skip the torch.library dispatch and run its plan directly: not being traced, no
    torch function / dispatch mode active (FakeTensorMode, FlopCounterMode, ...), plain tensors with storage.
    Everything else (torch.compile, meta tensors, modes, subclasses) goes through the registered custom ops."""
    if torch.compiler.is_compiling() or torch._C._is_torch_function_mode_enabled() or \
            torch._C._len_torch_dispatch_stack():
        return False
    for t in tensors:
        if type(t) is not _Tensor or t.is_meta:
            return False
    return True
