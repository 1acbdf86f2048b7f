"""Route torch.nn.functional.scaled_dot_product_attention to sage-co, for any model code that calls SDPA itself.

    import sage_co.sdpa
    with sage_co.sdpa.enabled():            # a torch.overrides.TorchFunctionMode; also a decorator
        image = pipe(prompt).images[0]      # diffusers SD3 / CogVideoX processors, research code, ...
    print(sage_co.sdpa.stats())             # {'routed': 48, 'fallback': {}, 'differences': {...}}

    sage_co.sdpa.install()                  # the same routing process-wide (every thread), until uninstall()

Each SDPA call is either served by sage_co.sage_attention (layout "HND", SDPA's [B, H, S, D]) or handed to the
original torch SDPA unchanged, with the reason counted in stats() (nothing is routed or dropped silently). Served:
4-dim q/k/v of one dtype in prepared.INPUT_DTYPES (bfloat16 / float16 / float32) on a device sage-co runs on (CPU ->
the emulator, a gfx1201 GPU), v shaped like k, a contiguous last dim, dropout_p 0, is_causal with S_q == S_kv only
(SDPA's causal mask is top-left aligned, sage-co's bottom-right: they agree only on square scores), H_q == H_kv or
enable_gqa with H_q a multiple of H_kv, no input (mask included) needing a gradient while grad mode is on (sage-co's
ops have no backward), and an attn_mask as SDPA takes it: None, bool (True = attend) or additive (float32 or q's
dtype), broadcastable to [B, H_q, S_q, S_kv] -- key padding, per-head, per-query and full masks all run on sage-co
(docs/numerics.md §Masks). Last, the call must be one the op itself accepts: the router asks sage_co.plan.plan_call
on the exact call it would make (head dims the shipped kernels serve, lengths, strides, the mask's shape), so a
call is never routed only to fail, and the op's message (naming the argument, quoting shapes and dtypes) is the
fallback's reason; what only the data shows (pv_dtype "fp16" with V beyond the fp16 range) is checked before routing
in eager mode too. Every other call falls back (nested / jagged tensors included); a call torch's SDPA itself refuses
(is_causal with a mask, a float16 mask with bf16 q) falls back too, so that torch raises its own error.

As SDPA does (docs/numerics.md §SDPA router): torch.nn.attention.bias.CausalBias masks are causal attention
(causal_lower_right is sage-co's bottom-right is_causal at any S_q, S_kv; causal_upper_left is is_causal at S_q ==
S_kv and its bool mask otherwise); under torch.autocast the floating inputs (mask included, float64 excepted) run in
the autocast dtype and so does the output; torch.nn.attention.sdpa_kernel(...) is respected -- a call is routed only
while the selection allows a fused backend torch has for the device (FLASH_ATTENTION on CPU; FLASH_ATTENTION,
EFFICIENT_ATTENTION or CUDNN_ATTENTION on a GPU): MATH alone (exact attention) falls back, no runnable backend falls
back to torch's error; Options(respect_sdpa_kernel=False) routes regardless; the output has q's memory layout
([B, S, H, D] memory viewed as [B, H, S, D] in gives the same out, so out.transpose(1, 2).view(B, S, H * D) works).
Where a routed result differs from SDPA's by design (accuracy band, non-finite Q / K / V, rows that see no key,
very sharp logits) is DIFFERENCES, also in stats().

Options (enabled(...) / install(...), the fields of Options): pv_dtype "fp8" (default) or "fp16", smooth_k (default
True, as SageAttention's sageattn: softmax-invariant, lowers the INT8 error of K), smooth_v, backend (None = by
device), sparsity "auto" with cdf_threshold (SpargeAttn's predicted block mask: approximate, off by default; a call
the predictor kernels cannot serve falls back), respect_sdpa_kernel (default True).

Mechanism: enabled() is a TorchFunctionMode (torch's documented hook for intercepting torch functions; it sees the
call however the function was imported, in the thread that entered it). install() replaces the attribute
torch.nn.functional.scaled_dot_product_attention (all threads; code that bound the function before install(),
e.g. `from torch.nn.functional import scaled_dot_product_attention`, keeps the original). Under torch.compile
dynamo traces both: the routing decision is made while tracing and sage-co runs as its custom op in the graph.

A routed call whose GPU binding or launch fails (HipError) runs torch's SDPA instead, the reason counted ("gpu: ...")
and logged once (sage_co.hostsafe); the host model never sees the error.

stats(): {'routed': count, 'fallback': {reason: count}, 'differences': DIFFERENCES}; in eager mode one count per
call. Under torch.compile the decision runs at trace time, so each call site counts once per compilation (replays of
the compiled graph are not counted).
"""
from __future__ import annotations

import contextlib
import threading
from collections import Counter
from dataclasses import dataclass

import torch
from torch.nn.attention.bias import CausalBias, CausalVariant
from torch.overrides import TorchFunctionMode

from . import abi, hostsafe, validate
from .callspec import SAGE_ATTENTION
from .prepared import INPUT_DTYPES, PV_DTYPES
from .tracing import constant_result

# torch's builtin (what F.scaled_dot_product_attention is unless someone replaced it, install() included)
ORIGINAL_SDPA = torch._C._nn.scaled_dot_product_attention


@dataclass(frozen=True)
class Options:
    """How routed calls run: sage_co.sage_attention's keywords."""
    pv_dtype: str = "fp8"
    smooth_k: bool = True
    smooth_v: bool = False
    backend: str | None = None
    sparsity: str | None = None   # "auto": SpargeAttn's predicted block mask (approximate: skips key tiles)
    cdf_threshold: float | None = None   # only with sparsity="auto": the attention mass each query tile keeps
    #                                      (None: the predictor's default, sage_co.sparse.DEFAULT_CDF_THRESHOLD)
    respect_sdpa_kernel: bool = True   # False: route whatever torch.nn.attention.sdpa_kernel(...) allows

    def __post_init__(self):
        if self.pv_dtype not in PV_DTYPES:
            raise ValueError(f"pv_dtype: expected one of {PV_DTYPES}, got {self.pv_dtype!r}")
        for name in ("smooth_k", "smooth_v", "respect_sdpa_kernel"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name}: expected True or False, got {getattr(self, name)!r}")
        if self.smooth_v and self.pv_dtype != "fp8":
            raise ValueError("smooth_v: only the fp8 P.V path quantizes V; got smooth_v=True with pv_dtype='fp16'")
        if self.sparsity not in (None, "auto"):
            raise ValueError(f"sparsity: expected None or \"auto\", got {self.sparsity!r}")
        from .backends import canonical   # the deprecated "hip" is stored as "gpu" (one FutureWarning, here)
        object.__setattr__(self, "backend", canonical(self.backend, "backend"))


# Where a routed call's result differs from SDPA's by design (docs/numerics.md §SDPA router): in stats(), so a user
# reading the counts sees them next to the routed number.
DIFFERENCES = {
    "accuracy": "a routed call is within the accuracy contract of SDPA (INT8 Q/K, FP8 or FP16 P.V; docs/numerics.md "
                "§Accuracy), not bitwise equal to it",
    "non-finite q": "a NaN / +-inf in Q makes its whole 32-query quantization block NaN (SDPA: that query's row)",
    "non-finite k/v": "a NaN / +-inf in K makes every row of the head NaN, in V that output channel of every row "
                      "(SDPA: only where the softmax weighs it)",
    "row masked everywhere": "a query that sees no key (bool mask all False, -inf, or an additive mask at "
                             "finfo.min, which sage-co reads as -inf) gives zeros (SDPA: zeros for bool / -inf on "
                             "CPU, the mean of V for finfo.min)",
    "sharp logits": "|scale * q.k| far above ~100 (|scale| ~ 1e4) leaves the accuracy band (the INT8 rounding of Q "
                    "and K is multiplied by the scale)",
}

# -------------------------------------------------------------------------------------------- stats
_lock = threading.Lock()
_routed = 0
_fallback: Counter = Counter()


@constant_result
def record(reason: str) -> bool:
    """Count one decision ("" = routed to sage-co, else the fallback's reason): route() and adapters that decide
    with fallback_reason() (the ComfyUI node) call it. Marked constant-result so dynamo runs it at trace time
    rather than putting it in the graph."""
    global _routed
    with _lock:
        if reason:
            _fallback[reason] += 1
        else:
            _routed += 1
    return True


def stats() -> dict:
    """{'routed': number of SDPA calls sage-co ran, 'fallback': {reason: number handed to torch's SDPA},
    'differences': DIFFERENCES (where a routed call's result differs from SDPA's by design)}. A call whose GPU binding
    or launch failed (sage_co.hostsafe: "gpu: ..." reasons, also those of the ComfyUI node, the sageattention shim and
    the adapters) counts as a fallback, not as routed."""
    unrouted, gpu = hostsafe.counts()
    with _lock:
        fallback = Counter(_fallback)
        fallback.update(gpu)
        return {"routed": _routed - unrouted, "fallback": dict(fallback), "differences": DIFFERENCES}


def reset_stats() -> None:
    global _routed
    with _lock:
        _routed = 0
        _fallback.clear()
    hostsafe.reset()


# -------------------------------------------------------------------------------------------- routing
def _device_served(t: torch.Tensor, backend: str | None) -> bool:
    if t.device.type == "cpu":
        return backend in (None, "emu")
    from .backends.base import device_arch
    return backend in (None, "gpu") and device_arch(t.device) == "gfx1201"


def _dtype_names(dtypes) -> str:
    return "/".join(str(d).replace("torch.", "") for d in dtypes)


def fallback_reason(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                    enable_gqa=False, *, options: Options = Options()) -> str:
    """Why this SDPA call is not served by sage-co ("" when it is). Reads only shapes, dtypes, flags and devices
    (no data, the mask's neither), so it is the same at trace time and at run time."""
    tensors = (query, key, value)
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return "query/key/value: not all tensors"
    if any(t.is_nested for t in tensors) or (isinstance(attn_mask, torch.Tensor) and attn_mask.is_nested):
        return "nested: sage-co serves dense [B, H, S, D] tensors; torch's SDPA serves nested (jagged) ones"
    if options.respect_sdpa_kernel:
        reason = _sdpa_kernel_reason(query.device.type)
        if reason:
            return reason
    if not isinstance(dropout_p, (int, float)) or dropout_p != 0:
        return "dropout_p: sage-co has no dropout (dropout_p=0 only)"
    if any(t.dim() != 4 for t in tensors):
        return f"shape: sage-co serves 4-dim [B, H, S, D] only (got {[t.dim() for t in tensors]} dims)"
    if not (query.dtype == key.dtype == value.dtype) or query.dtype not in INPUT_DTYPES:
        return (f"dtype: sage-co serves q, k, v of one dtype in {_dtype_names(INPUT_DTYPES)} "
                f"(got {', '.join(str(t.dtype).replace('torch.', '') for t in tensors)})")
    if not (query.device == key.device == value.device) or not _device_served(query, options.backend):
        return f"device: sage-co runs on CPU (emulator) or a gfx1201 GPU (got {query.device})"
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in (*tensors, attn_mask)):
        return "requires_grad: sage-co has no backward (use torch.no_grad() / inference_mode() for inference)"
    B, H_q, S_q, D = query.shape
    _, H_kv, S_kv, _ = key.shape
    if tuple(value.shape) != tuple(key.shape):
        return "value: sage-co needs value shaped like key (same S_kv and head dim)"
    if key.shape[0] != B or D != key.shape[3]:
        return "key: batch or head dim differs from query"
    if min(B, H_q, H_kv, S_q, S_kv) < 1:
        return f"shape: an empty dimension (q {tuple(query.shape)}, k {tuple(key.shape)})"
    try:
        validate.check_head_dim("query", D, query.shape)   # the op's own rule (docs/numerics.md §Inputs)
    except ValueError as e:
        return f"head_dim: {e}"
    if scale is not None:
        from .validate import check_softmax_scale
        try:
            check_softmax_scale(scale, D)
        except (TypeError, ValueError):
            return f"scale: sage-co serves a finite float scale up to 2**64 in magnitude (got {scale!r})"
    if H_q != H_kv and not (enable_gqa and H_q % H_kv == 0):
        return "heads: H_q != H_kv needs enable_gqa=True and H_q a multiple of H_kv"
    if H_q >= abi.MAX_QUERY_HEADS:
        return f"heads: {H_q} query heads exceed the launch grid (< {abi.MAX_QUERY_HEADS})"
    if is_causal and attn_mask is not None:   # torch's SDPA refuses the pair: the fallback raises its own error
        return "is_causal: SDPA takes attn_mask or is_causal, not both"
    if is_causal and S_q != S_kv:
        return ("is_causal: SDPA's causal mask is top-left aligned, sage-co's bottom-right; they agree only at "
                "S_q == S_kv")
    attn_mask, is_causal = _served_mask(attn_mask, is_causal, S_q, S_kv, query.device)
    if any(t.stride(-1) != 1 for t in tensors):
        return "stride: sage-co reads a contiguous last dim (stride(-1) == 1)"
    from .validate import MAX_STRIDE, check_attention_length
    if any(st > MAX_STRIDE for t in tensors for st in t.stride()):
        return f"stride: a stride exceeds {MAX_STRIDE} elements"
    try:
        check_attention_length(max(S_q, S_kv), D)
    except ValueError:
        return "length: one head exceeds the attention kernel's 32-bit byte offsets"
    if attn_mask is not None and not _sdpa_takes_mask(attn_mask, query):
        return (f"attn_mask: torch's SDPA takes a bool, float32 or {_dtype_names([query.dtype])} mask, got "
                + (f"{attn_mask.dtype} {list(attn_mask.shape)}" if isinstance(attn_mask, torch.Tensor)
                   else type(attn_mask).__name__) + " (its own error follows)")
    reason = _op_reason(query, key, value, _op_keywords(is_causal, options, attn_mask), _softmax_scale(query, scale))
    if not reason and options.pv_dtype == "fp16" and _eager(query, key, value):
        try:   # data-dependent (one pass over V): decided here in eager mode, by the op itself under torch.compile
            validate.check_v_fp16_range(value, "fp16")
        except ValueError as e:
            return str(e)
    return reason


def _eager(*tensors) -> bool:
    from .plan import eager
    return eager(*tensors)


def _sdpa_kernel_reason(device_type: str) -> str:
    """torch.nn.attention.sdpa_kernel(...)'s backend selection, read from torch's flags: "" when it allows a fused
    (flash-class) backend torch has for this device type -- FLASH_ATTENTION on CPU, FLASH_ATTENTION /
    EFFICIENT_ATTENTION / CUDNN_ATTENTION on a GPU -- else the reason: MATH alone asks for exact attention, and no
    runnable backend at all makes torch raise its own error (the fallback)."""
    flags = _sdp_flags()
    fused = flags[0] if device_type == "cpu" else any(flags[:3])
    if fused:
        return ""
    if flags[3]:
        return ("sdpa_kernel: the backend selection allows only SDPBackend.MATH (exact attention); sage-co serves a "
                "call when a fused backend is allowed (Options(respect_sdpa_kernel=False) routes anyway)")
    return "sdpa_kernel: the backend selection allows no backend torch runs on this device (its own error follows)"


@constant_result
def _sdp_flags() -> tuple:
    """(flash, mem_efficient, cudnn, math) enabled: the flags torch.nn.attention.sdpa_kernel sets (read at trace
    time under torch.compile, like the sdpa_kernel context itself)."""
    b = torch.backends.cuda
    return b.flash_sdp_enabled(), b.mem_efficient_sdp_enabled(), b.cudnn_sdp_enabled(), b.math_sdp_enabled()


def _served_mask(attn_mask, is_causal, S_q: int, S_kv: int, device):
    """(attn_mask, is_causal) as sage_co.sage_attention takes them. torch.nn.attention.bias.CausalBias (a tensor
    subclass whose storage is not the mask) means causal attention: causal_lower_right is sage-co's bottom-right
    is_causal at any S_q, S_kv; causal_upper_left (SDPA's is_causal) is the same at S_q == S_kv and its bool mask
    (query i sees keys j <= i) otherwise."""
    if not isinstance(attn_mask, CausalBias):
        return attn_mask, is_causal
    if attn_mask.variant == CausalVariant.LOWER_RIGHT or S_q == S_kv:
        return None, True
    return torch.ones(S_q, S_kv, dtype=torch.bool, device=device).tril(), False


def _sdpa_takes_mask(attn_mask, query) -> bool:
    """torch's SDPA rule for attn_mask's dtype: bool, float32, or the dtype of query (it raises otherwise)."""
    return isinstance(attn_mask, torch.Tensor) and attn_mask.dtype in (torch.bool, torch.float32, query.dtype)


def _dim_order(t: torch.Tensor) -> tuple:
    """t's dims from the largest stride to the smallest (ties in dim order): the memory layout torch's output
    follows (torch.empty_like's preserve_format; the CPU flash kernel returns q's layout)."""
    order = []
    for d in range(t.dim()):   # an insertion sort: dynamo traces comparisons of symbolic strides, not sorted(key=)
        i = len(order)
        while i > 0 and t.stride(order[i - 1]) < t.stride(d):
            i -= 1
        order.insert(i, d)
    return tuple(order)


def _op_inputs(query, key, value):
    """(layout, q, k, v) the op runs on: "NHD" views when query's memory is [B, S, H, D] (most models), so the
    output has that memory layout as torch's does; else "HND" (SDPA's dims)."""
    if _dim_order(query) == (0, 2, 1, 3):
        return "NHD", query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    return "HND", query, key, value


def _op_keywords(is_causal, options: Options, attn_mask, layout: str = "HND") -> dict:
    """The keywords run() passes sage_co.sage_attention for this call (one place: the gate checks what runs)."""
    kw = dict(layout=layout, is_causal=bool(is_causal), smooth_k=options.smooth_k, smooth_v=options.smooth_v,
              pv_dtype=options.pv_dtype, backend=options.backend, sparsity=options.sparsity,
              cdf_threshold=options.cdf_threshold)
    if attn_mask is not None:
        kw["attn_mask"] = attn_mask.detach()
    return kw


def _softmax_scale(query, scale) -> float:
    return float(scale) if scale is not None else query.shape[-1] ** -0.5   # SDPA's default


def _op_reason(query, key, value, keywords: dict, softmax_scale: float) -> str:
    """The op's own verdict on the call run() would make: sage_co.plan.plan_call on the same tensors and options
    (shapes, dtypes, strides, devices, the shipped kernels: no data read, no kernel), "" when sage_co.sage_attention
    takes it, else its error message (which names the argument and quotes shapes / dtypes). Eager calls plan fully
    (the plan is memoised, so sage_attention's own plan of the call is a cache hit); while torch.compile traces,
    the trace-time checks sage_attention makes there."""
    from . import plan
    layout, *qkv = _op_inputs(query.detach(), key.detach(), value.detach())
    o = SAGE_ATTENTION.bind({**keywords, "layout": layout})
    o["softmax_scale"] = softmax_scale
    qkv = tuple(qkv)
    try:
        plan.plan_call(SAGE_ATTENTION, qkv, o, resolve=plan.eager(*qkv))
    except (TypeError, ValueError, LookupError) as e:
        return str(e)
    except hostsafe.GPU_ERRORS as e:   # planning binds the launches: the GPU binding failed to load
        reason = hostsafe.gpu_reason(e)
        hostsafe.log_once(reason, e)
        return reason
    return ""


def route(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
          options: Options = Options(), fallback=ORIGINAL_SDPA):
    """One SDPA call: sage-co when fallback_reason() is "", else `fallback` (torch's SDPA; under install(), the
    function it replaced) with the same arguments; also `fallback` when sage-co's GPU binding or launch fails
    (sage_co.hostsafe: the reason counted, logged once)."""
    if isinstance(query, torch.Tensor) and _autocast_on(query.device.type):
        return _autocast_route(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                               options=options, fallback=fallback)
    reason = fallback_reason(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, options=options)
    record(reason)

    def host():
        extra = {"enable_gqa": enable_gqa} if enable_gqa else {}
        return fallback(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                        scale=scale, **extra)
    if reason:
        return host()
    return hostsafe.guarded(lambda: run(query, key, value, is_causal, scale, options=options, attn_mask=attn_mask),
                            host, routed=True)


def _autocast_on(device_type: str) -> bool:
    """torch.autocast is on for this device type (False for a type autocast does not know, such as meta)."""
    return torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type)


def _autocast_route(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, *, options, fallback):
    """SDPA's autocast rule (it is on autocast's lower-precision list): every floating tensor argument on the
    autocast device but float64 -- q, k, v and a float attn_mask -- is cast to the autocast dtype and the op runs in
    it (the output too). Done here, then routed with autocast off: the fallback sees what autocast would hand it."""
    device_type = query.device.type
    plain = all(type(t) is torch.Tensor for t in (query, key, value))   # nested / subclasses: torch's own handling
    if not plain:
        reason = fallback_reason(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                                 options=options) or "autocast: q, k, v are not plain tensors"
        record(reason)
        extra = {"enable_gqa": enable_gqa} if enable_gqa else {}
        return fallback(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                        scale=scale, **extra)
    dtype = torch.get_autocast_dtype(device_type)

    def cast(t):
        eligible = (type(t) is torch.Tensor and t.is_floating_point() and t.dtype != torch.float64
                    and t.device.type == device_type)
        return t.to(dtype) if eligible else t

    with torch.autocast(device_type, enabled=False):
        return route(cast(query), cast(key), cast(value), cast(attn_mask), dropout_p, is_causal, scale, enable_gqa,
                     options=options, fallback=fallback)


def run(query, key, value, is_causal=False, scale=None, *, options: Options = Options(), attn_mask=None):
    """sage-co on a call fallback_reason() accepted: [B, H, S, D] in and out, SDPA's scale default; attn_mask as
    SDPA takes it (bool True = attend, or additive float; broadcastable to [B, H_q, S_q, S_kv])."""
    from .api import sage_attention
    attn_mask, is_causal = _served_mask(attn_mask, is_causal, query.shape[2], key.shape[2], query.device)
    # grad mode is off here when any input requires grad (else fallback_reason refused it): detach() is a view
    # that tells sage-co's validation so, with the same values and the same output
    layout, q, k, v = _op_inputs(query.detach(), key.detach(), value.detach())
    out = sage_attention(q, k, v, _softmax_scale(query, scale), **_op_keywords(is_causal, options, attn_mask, layout))
    if layout == "NHD":
        return out.transpose(1, 2)   # [B, H, S_q, D] over [B, S_q, H, D] memory, as torch returns
    order = _dim_order(query)
    if order == (0, 1, 2, 3):
        return out
    inverse = tuple(order.index(d) for d in range(4))
    return out.permute(order).contiguous().permute(inverse)   # query's memory layout (e.g. [S, B, H, D]), as torch


_SDPA_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def _route_call(args, kwargs, options: Options, fallback=ORIGINAL_SDPA):
    unknown = set(kwargs) - set(_SDPA_PARAMS)
    if unknown or len(args) > len(_SDPA_PARAMS):   # not SDPA's signature: let torch raise its own error
        return fallback(*args, **kwargs)
    return route(*args, **kwargs, options=options, fallback=fallback)


class enabled(TorchFunctionMode, contextlib.ContextDecorator):   # noqa: N801 (used like a function)
    """`with sage_co.sdpa.enabled(**options):` / `@sage_co.sdpa.enabled()`: SDPA calls in the block (this thread)
    go to sage-co where served, to torch's SDPA otherwise; options as Options."""

    def __init__(self, **options):
        super().__init__()
        self.options = Options(**options)

    def __enter__(self):
        if is_installed():   # the two would route one call twice (a fallback counted by both)
            raise RuntimeError("sage_co.sdpa.enabled(): install() already routes SDPA in this process; "
                               "call sage_co.sdpa.uninstall() first or drop the with block")
        return super().__enter__()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is ORIGINAL_SDPA:
            return _route_call(args, kwargs, self.options)
        return func(*args, **kwargs)


_installed: Options | None = None
_replaced = ORIGINAL_SDPA   # what install() replaced in torch.nn.functional, put back by uninstall()


def _patched_sdpa(*args, **kwargs):
    return _route_call(args, kwargs, _installed or Options(), _replaced)


def install(**options) -> None:
    """Route SDPA to sage-co process-wide: replaces torch.nn.functional.scaled_dot_product_attention (calling it
    again replaces the options). Undo with uninstall(). Refused inside an enabled() block of this thread (the two
    would route one call twice)."""
    global _installed, _replaced
    if any(isinstance(m, enabled) for m in torch.overrides._get_current_function_mode_stack()):
        raise RuntimeError("sage_co.sdpa.install(): an enabled() block already routes SDPA in this thread; "
                           "install outside it")
    _installed = Options(**options)
    if not is_installed():
        _replaced = torch.nn.functional.scaled_dot_product_attention
    torch.nn.functional.scaled_dot_product_attention = _patched_sdpa


def uninstall() -> None:
    """Put back in torch.nn.functional what install() replaced (torch's own SDPA unless something else had replaced
    it before); a no-op when not installed."""
    global _installed, _replaced
    if is_installed():
        torch.nn.functional.scaled_dot_product_attention = _replaced
    _installed, _replaced = None, ORIGINAL_SDPA


def is_installed() -> bool:
    return torch.nn.functional.scaled_dot_product_attention is _patched_sdpa


def describe() -> str:
    """One line for `sage-co info`."""
    if is_installed():
        st = stats()
        return f"SDPA routing: installed process-wide ({_installed}); routed {st['routed']}, fallback {st['fallback']}"
    from .integrations.switches import SDPA_NOT_INSTALLED   # `sage-co info` prints it without importing this module
    return SDPA_NOT_INSTALLED
