"""sage-co inside a host framework never breaks the host: where sage-co runs a call on a framework's behalf (the
SDPA router sage_co.sdpa, the ComfyUI node, the sageattention shim, the diffusers / LightX2V / xDiT / yunchang
adapters), an error of the GPU binding or of a launch (HipError: the binding cannot load, a HIP call fails, a
launch is refused) turns that call into a fallback to the host's own attention, with the reason counted in
sage_co.sdpa.stats()["fallback"] and logged once per reason (logger "sage_co", WARNING). Calls made on sage-co
directly (sage_co.sage_attention, sage_co.sageattn, sage_co.launch, ...) raise as before: there the caller asked
for sage-co.

    guarded(run, fallback, routed=...)   run(); on a HipError, the reason noted and fallback() returned
    sageattn / sageattn_varlen           sage_co.compat's, guarded; their fallback is dense_attention /
                                         varlen_attention below (torch's SDPA with sageattn's semantics)

Only HipError is caught: a TypeError / ValueError naming an argument is the caller's mistake and reaches the
caller, as a wrong result would never be hidden behind a fallback. While torch.compile traces, nothing is
caught (the decision is made at trace time and the graph runs sage-co's op; an error there is the compiled
graph's). The sageattn fallback serves SageAttention's API (layouts, is_causal bottom-right aligned, sm_scale,
attn_mask bool or additive, GQA, return_lse); a call that also asked for sage-co's own fused inputs (q/k norm
weights, RoPE tables, a block_mask) has no torch equivalent here and raises the HipError.
"""
from __future__ import annotations

import functools
import logging
import threading
from collections import Counter

import torch

from . import compat
from .backends.hip_runtime import HipError

log = logging.getLogger("sage_co")
GPU_ERRORS = (HipError,)

_lock = threading.Lock()
_reasons: Counter = Counter()   # fallback reason -> calls
_unrouted = 0                   # of those, calls the SDPA router / ComfyUI node had already counted as routed
_logged: set = set()


def gpu_reason(exc: HipError) -> str:
    """The fallback reason of a GPU error: stable across calls (the HIP call and code, not the kernel or shape),
    so stats() and the log group them."""
    if exc.call is not None and exc.code is not None:
        return f"gpu: {exc.call} failed (hipError_t {exc.code})"
    if exc.call is not None:
        return f"gpu: {exc.call} failed"
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"gpu: {first[:200]}"


def note(reason: str, routed: bool, exc: BaseException | None = None) -> None:
    """Count one call that fell back for `reason` (`routed`: it had been counted as routed); log the first of
    each reason with the full error."""
    global _unrouted
    with _lock:
        _reasons[reason] += 1
        if routed:
            _unrouted += 1
    log_once(reason, exc)


def log_once(reason: str, exc: BaseException | None = None) -> None:
    """Log a fallback reason the first time it occurs in this process (with the full error)."""
    with _lock:
        first = reason not in _logged
        _logged.add(reason)
    if first:
        log.warning("sage-co fell back to the host's attention (%s); this reason is logged once, counted in "
                    "sage_co.sdpa.stats(): %s", reason, exc if exc is not None else reason)


def counts() -> tuple[int, dict]:
    """(calls counted as routed that fell back, {reason: calls})."""
    with _lock:
        return _unrouted, dict(_reasons)


def reset() -> None:
    global _unrouted
    with _lock:
        _reasons.clear()
        _unrouted = 0
        _logged.clear()


def guarded(run, fallback, *, routed: bool):
    """run(); when it raises a GPU error, note the reason and return fallback() instead (never while torch.compile
    traces)."""
    if torch.compiler.is_compiling():
        return run()
    try:
        return run()
    except GPU_ERRORS as exc:
        note(gpu_reason(exc), routed, exc)
    return fallback()


# ------------------------------------------------------------------------------------------ the sageattn fallback
_NO_TORCH_EQUIVALENT = ("q_norm_weight", "k_norm_weight", "cos", "sin", "block_mask")
_LSE_CHUNK = 1 << 26   # score elements per chunk of the fallback's LSE (fp32: 256 MiB)


def _sdpa_mask(mask, q: torch.Tensor):
    """A mask as torch's SDPA takes it: bool, float32 or q's dtype (other float masks widened to float32)."""
    if mask is None or mask.dtype in (torch.bool, torch.float32, q.dtype):
        return mask
    return mask.float()


def dense_attention(q, k, v, *, layout: str = "HND", is_causal: bool = False, softmax_scale: float | None = None,
                    attn_mask=None, return_lse: bool = False):
    """sageattn's result computed by torch: softmax(scale * q.k^T + mask) v with sage-co's conventions -- is_causal
    bottom-right aligned, GQA, rows that see no key give zeros (LSE -inf), lse fp32 [B, H_q, S_q] (natural log)."""
    if layout == "NHD":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    B, H_q, S_q, D = q.shape
    H_kv, S_kv = k.shape[1], k.shape[2]
    scale = softmax_scale if softmax_scale is not None else D ** -0.5
    if H_q != H_kv:
        k, v = (t.repeat_interleave(H_q // H_kv, dim=1) for t in (k, v))
    mask = _sdpa_mask(attn_mask, q)
    if is_causal:   # query i sees keys j <= i + S_kv - S_q
        causal = torch.ones(S_q, S_kv, dtype=torch.bool, device=q.device).tril(S_kv - S_q)
        if mask is None:
            mask = causal
        elif mask.dtype == torch.bool:
            mask = mask & causal
        else:
            mask = mask.masked_fill(~causal, float("-inf"))
    # torch's builtin SDPA (sage_co.sdpa.ORIGINAL_SDPA), whatever sage_co.sdpa.install() put in its place
    out = torch._C._nn.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    if mask is not None:
        dead = ~mask.any(-1) if mask.dtype == torch.bool else torch.isneginf(mask).all(-1)
        out = out.masked_fill(dead.unsqueeze(-1), 0)
    out = out.transpose(1, 2) if layout == "NHD" else out
    if not return_lse:
        return out
    lse = torch.empty(B, H_q, S_q, dtype=torch.float32, device=q.device)
    rows = max(1, _LSE_CHUNK // max(1, B * H_q * S_kv))
    kf = k.float().transpose(-1, -2)
    for a in range(0, S_q, rows):
        s = (q[:, :, a:a + rows].float() @ kf) * scale
        if mask is not None:
            m = mask.expand(B, H_q, S_q, S_kv)[:, :, a:a + rows]
            s = s.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else s + m.float()
        lse[:, :, a:a + rows] = torch.logsumexp(s, dim=-1)
    return out, lse


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, *, is_causal: bool = False,
                     softmax_scale: float | None = None, return_lse: bool = False):
    """sageattn_varlen's result computed by torch, sequence by sequence (reads cu_seqlens on the host): out
    [total_q, H_q, D], lse fp32 [H_q, total_q]."""
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    out = torch.zeros_like(q)
    lse = torch.full((q.shape[1], q.shape[0]), float("-inf"), dtype=torch.float32, device=q.device)
    for i in range(len(cq) - 1):
        a, b, c, d = cq[i], cq[i + 1], ck[i], ck[i + 1]
        if b == a or d == c:   # no queries, or no keys: zeros and -inf
            continue
        r = dense_attention(q[a:b].unsqueeze(0), k[c:d].unsqueeze(0), v[c:d].unsqueeze(0), layout="NHD",
                            is_causal=is_causal, softmax_scale=softmax_scale, return_lse=return_lse)
        if return_lse:
            out[a:b], lse[:, a:b] = r[0][0], r[1][0]
        else:
            out[a:b] = r[0]
    return (out, lse) if return_lse else out


def _fallback_options(options: dict, exc_holder) -> dict:
    asked = [n for n in _NO_TORCH_EQUIVALENT if options.get(n) is not None]
    if asked:
        raise exc_holder   # sage-co's fused inputs have no torch equivalent here: the GPU error stands
    return options


@functools.wraps(compat.sageattn)
def sageattn(q, k, v, tensor_layout: str = "HND", is_causal: bool = False, sm_scale: float | None = None,
             return_lse: bool = False, smooth_k: bool = True, attn_mask=None, **kwargs):
    def run():
        return compat.sageattn(q, k, v, tensor_layout, is_causal, sm_scale, return_lse, smooth_k, attn_mask,
                               **kwargs)
    if torch.compiler.is_compiling():
        return run()
    try:
        return run()
    except GPU_ERRORS as exc:
        named = {"tensor_layout": tensor_layout, "is_causal": is_causal, "sm_scale": sm_scale,
                 "return_lse": return_lse, "smooth_k": smooth_k, "attn_mask": attn_mask}
        o = _fallback_options(compat._apply_kwargs("sageattn", named, kwargs, q, k), exc)
        note(gpu_reason(exc), False, exc)
    return dense_attention(q, k, v, layout=o.get("layout", "NHD"), is_causal=bool(o.get("is_causal")),
                           softmax_scale=o.get("softmax_scale"), attn_mask=o.get("attn_mask"),
                           return_lse=bool(o.get("return_lse")))


@functools.wraps(compat.sageattn_varlen)
def sageattn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, is_causal: bool = False,
                    sm_scale: float | None = None, smooth_k: bool = True, **kwargs):
    def run():
        return compat.sageattn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, is_causal,
                                      sm_scale, smooth_k, **kwargs)
    if torch.compiler.is_compiling():
        return run()
    try:
        return run()
    except GPU_ERRORS as exc:
        named = {"is_causal": is_causal, "sm_scale": sm_scale, "smooth_k": smooth_k}
        o = _fallback_options(compat._apply_kwargs("sageattn_varlen", named, kwargs, None, None), exc)
        note(gpu_reason(exc), False, exc)
    return varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, is_causal=bool(o.get("is_causal")),
                            softmax_scale=o.get("softmax_scale") if o.get("softmax_scale") is not None
                            else q.shape[-1] ** -0.5, return_lse=bool(o.get("return_lse")))
