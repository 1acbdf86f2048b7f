"""The public ops, registered with torch.library so they work under torch.compile (fullgraph) and pass opcheck.

    sage_prepare(q, k, v, ...)            -> SagePrepared
    sage_attention_fwd(prepared, ...)     -> out [B, S, H, 128] bf16 (, lse [B, H, S] fp32)
    sage_attention(q, k, v, ...)          -> prepare + forward

Each Python function validates its arguments (sage_co.validate) before any kernel runs, normalises the
optional ones into schema-friendly values, and calls the custom op; the fake implementations return tensors
with exactly the shapes, dtypes and strides of the real outputs. FP8 V crosses the op boundary as its raw
bytes (a uint8 view of the same storage): torch's schema checker (opcheck test_schema) cannot compare
float8 tensors, and a view costs nothing.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import validate
from .backends import BACKENDS
from .prepared import HEAD_DIM, SCALE_BLOCK, SagePrepared, s_pad

_NO_ROPE = 0          # rope_dim in the schema: 0 = no RoPE
_DEFAULT = ""         # backend / kernel in the schema: "" = choose automatically


# -------------------------------------------------------------------------------------------- prepare
@torch.library.custom_op("sage_co::sage_prepare", mutates_args=())
def _prepare_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, smooth_k: bool,
                q_norm_weight: Optional[torch.Tensor], k_norm_weight: Optional[torch.Tensor], eps: float,
                cos: Optional[torch.Tensor], sin: Optional[torch.Tensor], rope_dim: int, backend: str
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                           torch.Tensor]:
    from .ops.prepare import run_prepare
    p = run_prepare(q, k, v, softmax_scale, smooth_k=smooth_k, q_norm_weight=q_norm_weight,
                    k_norm_weight=k_norm_weight, eps=eps, cos=cos, sin=sin,
                    rope_dim=rope_dim if rope_dim != _NO_ROPE else None, backend=backend or None)
    return p.q_int8, p.q_scale, p.k_int8, p.k_scale, p.k_mean, p.v_fp8.view(torch.uint8), p.v_scale


def _prepared_like(q: torch.Tensor):
    B, S, H, _ = q.shape
    Sp = s_pad(S)
    return (q.new_empty((B, H, Sp, HEAD_DIM), dtype=torch.int8),
            q.new_empty((B, H, Sp // SCALE_BLOCK), dtype=torch.float32),
            q.new_empty((B, H, Sp, HEAD_DIM), dtype=torch.int8),
            q.new_empty((B, H, Sp // SCALE_BLOCK), dtype=torch.float32),
            q.new_empty((B, H, HEAD_DIM), dtype=torch.float32),
            q.new_empty((B, H, HEAD_DIM, Sp), dtype=torch.uint8),   # the fp8 bytes of v_fp8
            q.new_empty((B, H, HEAD_DIM), dtype=torch.float32))


@_prepare_op.register_fake
def _(q, k, v, softmax_scale, smooth_k, q_norm_weight, k_norm_weight, eps, cos, sin, rope_dim, backend):
    return _prepared_like(q)


def sage_prepare(q, k, v, softmax_scale=None, *, smooth_k=False, q_norm_weight=None, k_norm_weight=None,
                 eps=1e-6, cos=None, sin=None, rope_dim=None, backend=None) -> SagePrepared:
    """Quantize bf16 [B, S, H, 128] q/k/v for the attention kernel (docs/numerics.md §Prepare).

    backend: None picks by device (CPU -> the emulator, a gfx1201 GPU -> hip), or "emu" / "hip"."""
    chk = validate.check_prepare_args(q, k, v, softmax_scale, smooth_k=smooth_k, q_norm_weight=q_norm_weight,
                                      k_norm_weight=k_norm_weight, eps=eps, cos=cos, sin=sin, rope_dim=rope_dim)
    _check_choice("backend", backend, BACKENDS)
    fields = _prepare_op(q, k, v, chk.softmax_scale, bool(smooth_k), q_norm_weight, k_norm_weight, float(eps),
                         cos, sin, chk.rope_dim or _NO_ROPE, backend or _DEFAULT)
    return _prepared(fields, chk.S)


def _prepared(fields, S: int) -> SagePrepared:
    q_int8, q_scale, k_int8, k_scale, k_mean, v_bytes, v_scale = fields
    return SagePrepared(q_int8, q_scale, k_int8, k_scale, k_mean, v_bytes.view(torch.float8_e4m3fn), v_scale, S)


# -------------------------------------------------------------------------------------------- forward
@torch.library.custom_op("sage_co::sage_attention_fwd", mutates_args=())
def _fwd_op(q_int8: torch.Tensor, q_scale: torch.Tensor, k_int8: torch.Tensor, k_scale: torch.Tensor,
            k_mean: torch.Tensor, v_bytes: torch.Tensor, v_scale: torch.Tensor, seq_len: int, return_lse: bool,
            backend: str, kernel: str) -> tuple[torch.Tensor, torch.Tensor]:
    from .ops.attention import run_attention_fwd
    prepared = _prepared((q_int8, q_scale, k_int8, k_scale, k_mean, v_bytes, v_scale), seq_len)
    kw = {"variant": kernel} if kernel else {}
    res = run_attention_fwd(prepared, return_lse=return_lse, backend=backend or None, **kw)
    if return_lse:
        return res
    return res, q_scale.new_empty((0,))


def _fwd_like(q_int8, seq_len, return_lse):
    B, H = q_int8.shape[0], q_int8.shape[1]
    out = q_int8.new_empty((B, seq_len, H, HEAD_DIM), dtype=torch.bfloat16)
    lse = q_int8.new_empty((B, H, seq_len) if return_lse else (0,), dtype=torch.float32)
    return out, lse


@_fwd_op.register_fake
def _(q_int8, q_scale, k_int8, k_scale, k_mean, v_bytes, v_scale, seq_len, return_lse, backend, kernel):
    return _fwd_like(q_int8, seq_len, return_lse)


def sage_attention_fwd(prepared: SagePrepared, *, return_lse=False, backend=None, kernel=None):
    """The attention kernel alone on a SagePrepared: out bf16 [B, S, H, 128], or (out, lse fp32 [B, H, S]).

    kernel: None = the default shipped kernel (the hand-scheduled asm when shipped), or a variant name from
    the manifest ("hip" = the clang-built baseline, "asm")."""
    validate.check_flag("return_lse", return_lse)
    if not isinstance(prepared, SagePrepared):
        raise TypeError(f"prepared: expected a SagePrepared (from sage_prepare), got {type(prepared).__name__}")
    q = prepared.q_int8
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        raise ValueError("prepared.q_int8: expected a 4-dim int8 tensor [B, H, S_pad, 128]")
    validate.check_prepared(prepared, q.shape[0], prepared.seq_len, q.shape[1])
    _check_choice("backend", backend, BACKENDS)
    _check_choice("kernel", kernel, None)
    out, lse = _fwd_op(*prepared[:5], prepared.v_fp8.view(torch.uint8), prepared.v_scale, prepared.seq_len,
                       bool(return_lse), backend or _DEFAULT, kernel or _DEFAULT)
    return (out, lse) if return_lse else out


# -------------------------------------------------------------------------------------------- prepare + forward
@torch.library.custom_op("sage_co::sage_attention", mutates_args=())
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, smooth_k: bool,
                  q_norm_weight: Optional[torch.Tensor], k_norm_weight: Optional[torch.Tensor], eps: float,
                  cos: Optional[torch.Tensor], sin: Optional[torch.Tensor], rope_dim: int, return_lse: bool,
                  backend: str, kernel: str) -> tuple[torch.Tensor, torch.Tensor]:
    fields = _prepare_op(q, k, v, softmax_scale, smooth_k, q_norm_weight, k_norm_weight, eps, cos, sin, rope_dim,
                         backend)
    return _fwd_op(*fields, q.shape[1], return_lse, backend, kernel)


@_attention_op.register_fake
def _(q, k, v, softmax_scale, smooth_k, q_norm_weight, k_norm_weight, eps, cos, sin, rope_dim, return_lse,
      backend, kernel):
    B, S, H, _ = q.shape
    out = q.new_empty((B, S, H, HEAD_DIM), dtype=torch.bfloat16)
    lse = q.new_empty((B, H, S) if return_lse else (0,), dtype=torch.float32)
    return out, lse


def sage_attention(q, k, v, softmax_scale=None, *, smooth_k=False, q_norm_weight=None, k_norm_weight=None,
                   eps=1e-6, cos=None, sin=None, rope_dim=None, return_lse=False, backend=None, kernel=None):
    """SageAttention forward of bf16 [B, S, H, 128] q/k/v: prepare (INT8 Q/K, FP8 V, optional fused
    RMSNorm + RoPE) then the attention kernel. Returns bf16 [B, S, H, 128] (and fp32 LSE [B, H, S])."""
    chk = validate.check_prepare_args(q, k, v, softmax_scale, smooth_k=smooth_k, q_norm_weight=q_norm_weight,
                                      k_norm_weight=k_norm_weight, eps=eps, cos=cos, sin=sin, rope_dim=rope_dim)
    validate.check_flag("return_lse", return_lse)
    _check_choice("backend", backend, BACKENDS)
    _check_choice("kernel", kernel, None)
    out, lse = _attention_op(q, k, v, chk.softmax_scale, bool(smooth_k), q_norm_weight, k_norm_weight, float(eps),
                             cos, sin, chk.rope_dim or _NO_ROPE, bool(return_lse), backend or _DEFAULT,
                             kernel or _DEFAULT)
    return (out, lse) if return_lse else out


def _check_choice(name: str, value, allowed) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value or (allowed is not None and value not in allowed):
        expected = f"one of {allowed} or None" if allowed else "a variant name string or None"
        raise ValueError(f"{name}: expected {expected}, got {value!r}")
