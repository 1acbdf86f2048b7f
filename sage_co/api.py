"""The public ops, registered with torch.library so they work under torch.compile (fullgraph) and pass opcheck.

    sage_prepare(q, k, v, ..., layout="NHD")       -> SagePrepared
    sage_attention_fwd(prepared, ..., layout="NHD") -> out (, lse [B, H_q, S_q] fp32)
    sage_attention(q, k, v, ..., layout="NHD")     -> prepare + forward

q [B, S_q, H_q, D], k/v [B, S_kv, H_kv, D] (layout="NHD") or [B, H, S, D] (layout="HND"), bf16 or fp16, any strides
with a contiguous last dim; out has q's dtype and layout. Each Python function validates every argument
(sage_co.validate, and the attention kernel's limits) before any kernel runs, normalises the optional ones into
schema-friendly values, and calls the custom op; the fake implementations return tensors with exactly the shapes,
dtypes and strides of the real outputs. V^T (fp8, or fp16 with pv_dtype="fp16") crosses the op boundary as its raw
bytes (a uint8 view of the same storage, pv_dtype says how to read them): torch's schema checker (opcheck
test_schema) cannot compare float8 tensors, and a view costs nothing. v_mean crosses as a tensor (zeros without
smooth_v) and becomes SagePrepared.v_mean only with smooth_v.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import masks, sparse, validate
from .prepared import PV_DTYPES, SCALE_BLOCK, SagePrepared, d_pad, s_pad

_NO_ROPE = 0          # rope_dim in the schema: 0 = no RoPE
_DEFAULT = ""         # backend / kernel in the schema: "" = choose automatically


# -------------------------------------------------------------------------------------------- prepare
@torch.library.custom_op("sage_co::sage_prepare", mutates_args=())
def _prepare_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, layout: str,
                smooth_k: bool, q_norm_weight: Optional[torch.Tensor], k_norm_weight: Optional[torch.Tensor],
                eps: float, cos: Optional[torch.Tensor], sin: Optional[torch.Tensor], rope_dim: int, backend: str,
                smooth_v: bool = False, pv_dtype: str = "fp8"
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                           torch.Tensor, torch.Tensor, torch.Tensor]:
    from .ops.prepare import run_prepare
    p = run_prepare(q, k, v, softmax_scale, layout=layout, smooth_k=smooth_k, q_norm_weight=q_norm_weight,
                    k_norm_weight=k_norm_weight, eps=eps, cos=cos, sin=sin,
                    rope_dim=rope_dim if rope_dim != _NO_ROPE else None, smooth_v=smooth_v, pv_dtype=pv_dtype,
                    backend=backend or None)
    v_mean = p.v_mean if p.v_mean is not None else torch.zeros_like(p.k_mean)
    lse_corr = p.lse_corr if p.lse_corr is not None else p.q_scale.new_empty((0,))   # (0,): no smooth_k
    return p.q_int8, p.q_scale, p.k_int8, p.k_scale, p.k_mean, p.v_t.view(torch.uint8), p.v_scale, v_mean, lse_corr


def _sizes(q, k, layout):
    """(B, S_q, S_kv, H_q, H_kv, D) of validated inputs (also on fake/meta tensors)."""
    qn, kn = (q, k) if layout == "NHD" else (q.transpose(1, 2), k.transpose(1, 2))
    B, S_q, H_q, D = qn.shape
    return B, S_q, kn.shape[1], H_q, kn.shape[2], D


def _prepared_like(q: torch.Tensor, k: torch.Tensor, layout: str, pv_dtype: str = "fp8", smooth_k: bool = False):
    B, S_q, S_kv, H_q, H_kv, D = _sizes(q, k, layout)
    Sq, Skv, Dp = s_pad(S_q), s_pad(S_kv), d_pad(D)
    v_bytes = 2 if pv_dtype == "fp16" else 1
    return (q.new_empty((B, H_q, Sq, Dp), dtype=torch.int8),
            q.new_empty((B, H_q, Sq // SCALE_BLOCK), dtype=torch.float32),
            q.new_empty((B, H_kv, Skv, Dp), dtype=torch.int8),
            q.new_empty((B, H_kv, Skv // SCALE_BLOCK), dtype=torch.float32),
            q.new_empty((B, H_kv, Dp), dtype=torch.float32),
            q.new_empty((B, H_kv, Dp, Skv * v_bytes), dtype=torch.uint8),   # the bytes of v_t
            q.new_empty((B, H_kv, Dp), dtype=torch.float32),
            q.new_empty((B, H_kv, Dp), dtype=torch.float32),                 # v_mean
            q.new_empty((B, H_q, S_q) if smooth_k else (0,), dtype=torch.float32))   # lse_corr


@_prepare_op.register_fake
def _(q, k, v, softmax_scale, layout, smooth_k, q_norm_weight, k_norm_weight, eps, cos, sin, rope_dim, backend,
      smooth_v=False, pv_dtype="fp8"):
    return _prepared_like(q, k, layout, pv_dtype, smooth_k)


def sage_prepare(q, k, v, softmax_scale=None, *, layout="NHD", smooth_k=False, q_norm_weight=None,
                 k_norm_weight=None, eps=1e-6, cos=None, sin=None, rope_dim=None, smooth_v=False, pv_dtype="fp8",
                 backend=None) -> SagePrepared:
    """Quantize q [B, S_q, H_q, D], k/v [B, S_kv, H_kv, D] (layout="HND": [B, H, S, D]; bf16 or fp16) for the
    attention kernel (docs/numerics.md §Prepare). softmax_scale None = 1/sqrt(D). smooth_v: subtract V's
    per-channel mean before fp8 (added back by the attention kernel); pv_dtype "fp16": keep V in fp16 for the
    f16 P.V WMMA (docs/numerics.md §smooth_v, §pv_dtype fp16).

    backend: None picks by device (CPU -> the emulator, a gfx1201 GPU -> hip), or "emu" / "hip"."""
    chk = validate.check_prepare_args(q, k, v, softmax_scale, layout=layout, smooth_k=smooth_k,
                                      q_norm_weight=q_norm_weight, k_norm_weight=k_norm_weight, eps=eps, cos=cos,
                                      sin=sin, rope_dim=rope_dim, smooth_v=smooth_v, pv_dtype=pv_dtype)
    validate.check_backend(backend)
    fields = _prepare_op(q, k, v, chk.softmax_scale, layout, bool(smooth_k), q_norm_weight, k_norm_weight,
                         float(eps), cos, sin, chk.rope_dim or _NO_ROPE, backend or _DEFAULT, bool(smooth_v),
                         pv_dtype)
    sh = chk.shapes
    return _prepared(fields, sh.S_q, sh.S_kv, sh.D, sh.dtype, bool(smooth_v), pv_dtype, bool(smooth_k))


def _prepared(fields, S_q: int, S_kv: int, D: int, out_dtype: torch.dtype, smooth_v: bool = False,
              pv_dtype: str = "fp8", smooth_k: bool = False) -> SagePrepared:
    q_int8, q_scale, k_int8, k_scale, k_mean, v_bytes, v_scale, v_mean, lse_corr = fields
    v_t = v_bytes.view(PV_DTYPES[pv_dtype])
    return SagePrepared(q_int8, q_scale, k_int8, k_scale, k_mean, v_t, v_scale, S_q, S_kv, D, out_dtype,
                        v_mean if smooth_v else None, lse_corr if smooth_k else None)


# -------------------------------------------------------------------------------------------- forward
@torch.library.custom_op("sage_co::sage_attention_fwd", mutates_args=())
def _fwd_op(q_int8: torch.Tensor, q_scale: torch.Tensor, k_int8: torch.Tensor, k_scale: torch.Tensor,
            k_mean: torch.Tensor, v_bytes: torch.Tensor, v_scale: torch.Tensor, seq_len_q: int, seq_len_kv: int,
            head_dim: int, out_dtype: torch.dtype, layout: str, return_lse: bool, backend: str, kernel: str,
            is_causal: bool = False, block_mask: Optional[torch.Tensor] = None, v_mean: Optional[torch.Tensor] = None,
            pv_dtype: str = "fp8", lse_corr: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    prepared = _prepared((q_int8, q_scale, k_int8, k_scale, k_mean, v_bytes, v_scale, v_mean, lse_corr), seq_len_q,
                         seq_len_kv, head_dim, out_dtype, v_mean is not None, pv_dtype, lse_corr is not None)
    # A caller's SagePrepared: its padding must be zero (a seq_len lowered within the same S_pad shows there).
    # Checked here, in the real implementation, so torch.compile traces no data-dependent branch; it reads only
    # the padded part. sage_attention's own prepared structure skips it (_run_fwd).
    validate.check_prepared_padding(prepared)
    return _run_fwd(prepared, layout, return_lse, backend, kernel, is_causal, block_mask)


def _run_fwd(prepared: SagePrepared, layout: str, return_lse: bool, backend: str, kernel: str,
             is_causal: bool = False, block_mask: Optional[torch.Tensor] = None):
    from .ops.attention import run_attention_fwd
    kw = {"variant": kernel} if kernel else {}
    res = run_attention_fwd(prepared, return_lse=return_lse, layout=layout, backend=backend or None,
                            is_causal=is_causal, block_mask=block_mask, **kw)
    return res if return_lse else (res, prepared.q_scale.new_empty((0,)))


def _fwd_like(like: torch.Tensor, B, S_q, H_q, D, out_dtype, layout, return_lse):
    shape = (B, S_q, H_q, D) if layout == "NHD" else (B, H_q, S_q, D)
    out = like.new_empty(shape, dtype=out_dtype)
    lse = like.new_empty((B, H_q, S_q) if return_lse else (0,), dtype=torch.float32)
    return out, lse


@_fwd_op.register_fake
def _(q_int8, q_scale, k_int8, k_scale, k_mean, v_bytes, v_scale, seq_len_q, seq_len_kv, head_dim, out_dtype, layout,
      return_lse, backend, kernel, is_causal=False, block_mask=None, v_mean=None, pv_dtype="fp8", lse_corr=None):
    validate.check_attention_length(seq_len_q, head_dim, "seq_len_q")   # the real op's refusals, also on meta
    validate.check_attention_length(seq_len_kv, head_dim, "seq_len_kv")
    validate.check_kernel_shipped(kernel or None)
    _attention_kernel_serves(q_int8.shape[1], head_dim, out_dtype, kernel, pv_dtype)
    return _fwd_like(q_int8, q_int8.shape[0], seq_len_q, q_int8.shape[1], head_dim, out_dtype, layout, return_lse)


def sage_attention_fwd(prepared: SagePrepared, *, layout="NHD", return_lse=False, backend=None, kernel=None,
                       is_causal=False, block_mask=None):
    """The attention kernel alone on a SagePrepared: out [B, S_q, H_q, D] (layout="HND": [B, H_q, S_q, D]) in
    prepared.out_dtype, or (out, lse fp32 [B, H_q, S_q]).

    kernel: None = the default shipped kernel (the hand-scheduled asm when shipped), or a variant name from
    the manifest ("hip" = the clang-built baseline, "asm"). is_causal / block_mask: see sage_attention."""
    validate.check_flag("return_lse", return_lse)
    validate.check_flag("is_causal", is_causal)
    validate.check_layout(layout)
    sh = validate.check_prepared(prepared)
    masks.check_block_mask(block_mask, sh.B, sh.H_q, sh.S_q, sh.S_kv, device=prepared.q_int8.device)
    validate.check_backend(backend)
    validate.check_kernel(kernel)
    _check_attention_kernel(sh, kernel, prepared.pv_dtype)
    validate.check_attention_length(sh.S_q, sh.D, "prepared.seq_len_q")
    validate.check_attention_length(sh.S_kv, sh.D, "prepared.seq_len_kv")
    out, lse = _fwd_op(*prepared[:5], prepared.v_t.view(torch.uint8), prepared.v_scale, sh.S_q, sh.S_kv, sh.D,
                       sh.dtype, layout, bool(return_lse), backend or _DEFAULT, kernel or _DEFAULT, bool(is_causal),
                       block_mask, prepared.v_mean, prepared.pv_dtype, prepared.lse_corr)
    return (out, lse) if return_lse else out


def _check_attention_kernel(shapes: validate.Shapes, kernel, pv_dtype: str = "fp8") -> None:
    """A shipped attention kernel serves these shapes (variant, head dim, output dtype, P.V dtype) and the query
    heads fit its grid: raised before any kernel, prepare included. It reads hsaco/manifest.json, which dynamo
    cannot trace: under torch.compile the ops' fake implementations make the same check at trace time (with
    symbolic head counts under dynamic=True, which assume_constant_result could not take)."""
    if torch.compiler.is_compiling():
        return
    _attention_kernel_serves(shapes.H_q, shapes.D, shapes.dtype, kernel, pv_dtype)


def _attention_kernel_serves(H_q, D, dtype: torch.dtype, kernel, pv_dtype: str = "fp8") -> None:
    """The check itself; H_q may be symbolic (a fake implementation under dynamic shapes): it is only compared, so
    it stays dynamic. D picks the kernel: int() specialises on it (each head dim is its own kernel anyway)."""
    from . import abi, registry
    from .ops.attention import OP, OUT_DTYPE_KEYS
    if H_q >= abi.MAX_QUERY_HEADS:
        raise ValueError(f"q: {H_q} query heads exceed the attention launch grid (< {abi.MAX_QUERY_HEADS})")
    registry.find(OP, kernel or None, head_dim=d_pad(int(D)), out_dtype=OUT_DTYPE_KEYS[dtype], pv_dtype=pv_dtype)


# -------------------------------------------------------------------------------------------- prepare + forward
@torch.library.custom_op("sage_co::sage_attention", mutates_args=())
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, layout: str,
                  smooth_k: bool, q_norm_weight: Optional[torch.Tensor], k_norm_weight: Optional[torch.Tensor],
                  eps: float, cos: Optional[torch.Tensor], sin: Optional[torch.Tensor], rope_dim: int,
                  return_lse: bool, backend: str, kernel: str, is_causal: bool = False,
                  block_mask: Optional[torch.Tensor] = None, smooth_v: bool = False,
                  pv_dtype: str = "fp8") -> tuple[torch.Tensor, torch.Tensor]:
    fields = _prepare_op(q, k, v, softmax_scale, layout, smooth_k, q_norm_weight, k_norm_weight, eps, cos, sin,
                         rope_dim, backend, smooth_v, pv_dtype)
    B, S_q, S_kv, H_q, H_kv, D = _sizes(q, k, layout)
    prepared = _prepared(fields, S_q, S_kv, D, q.dtype, smooth_v, pv_dtype, smooth_k)   # made here: padding not re-read
    return _run_fwd(prepared, layout, return_lse, backend, kernel, is_causal, block_mask)


@_attention_op.register_fake
def _(q, k, v, softmax_scale, layout, smooth_k, q_norm_weight, k_norm_weight, eps, cos, sin, rope_dim, return_lse,
      backend, kernel, is_causal=False, block_mask=None, smooth_v=False, pv_dtype="fp8"):
    B, S_q, S_kv, H_q, H_kv, D = _sizes(q, k, layout)
    validate.check_attention_length(S_q, D, "q")   # the real op's refusals, also on meta / under torch.compile
    validate.check_attention_length(S_kv, D, "k")
    validate.check_kernel_shipped(kernel or None)
    _attention_kernel_serves(H_q, D, q.dtype, kernel, pv_dtype)
    return _fwd_like(q, B, S_q, H_q, D, q.dtype, layout, return_lse)


def sage_attention(q, k, v, softmax_scale=None, *, layout="NHD", smooth_k=False, q_norm_weight=None,
                   k_norm_weight=None, eps=1e-6, cos=None, sin=None, rope_dim=None, return_lse=False, backend=None,
                   kernel=None, is_causal=False, block_mask=None, sparsity=None, cdf_threshold=None, smooth_v=False,
                   pv_dtype="fp8"):
    """SageAttention forward: prepare (INT8 Q/K, FP8 V, optional fused RMSNorm + RoPE) then the attention kernel.

    pv_dtype: "fp8" (default: V in fp8 e4m3 with per-channel scales, P.V on the fp8 WMMA) or "fp16" (V kept in
    fp16, P rounded to fp16, the f16 WMMA: more accurate, slower). smooth_v (fp8 only): subtract V's per-channel
    mean before fp8 and add it back to the output (helps V with per-channel offsets).

    q [B, S_q, H_q, D], k/v [B, S_kv, H_kv, D] (layout="HND": [B, H, S, D]), bf16 or fp16, H_q % H_kv == 0, D a
    multiple of 16 up to 128. Returns out in q's dtype and layout (and fp32 LSE [B, H_q, S_q], natural log).

    is_causal: query i sees keys j <= i + S_kv - S_q (bottom-right aligned, as flash-attention >= 2.1).
    block_mask: bool [B, H_q, ceil(S_q / BLOCK_Q), ceil(S_kv / BLOCK_KV)]: the key tiles each query tile attends
    (the kernel visits only those: time ~ density); combines with is_causal. sparsity="auto": block_mask =
    sage_co.predict_block_mask(q', k', cdf_threshold=..., is_causal=is_causal, backend=backend) (SpargeAttn's
    prediction, on the predictor kernels) on q', k' = q, k after the fused RMSNorm / RoPE when those are on;
    cdf_threshold None = the predictor's default (sage_co.sparse.DEFAULT_CDF_THRESHOLD), and only with
    sparsity="auto". Rows that see no key output zeros and LSE -inf (docs/numerics.md §Masks)."""
    chk = validate.check_prepare_args(q, k, v, softmax_scale, layout=layout, smooth_k=smooth_k,
                                      q_norm_weight=q_norm_weight, k_norm_weight=k_norm_weight, eps=eps, cos=cos,
                                      sin=sin, rope_dim=rope_dim, smooth_v=smooth_v, pv_dtype=pv_dtype)
    validate.check_flag("return_lse", return_lse)
    validate.check_backend(backend)
    validate.check_kernel(kernel)
    _check_attention_kernel(chk.shapes, kernel, pv_dtype)
    validate.check_attention_length(chk.shapes.S_q, chk.shapes.D, "q")
    validate.check_attention_length(chk.shapes.S_kv, chk.shapes.D, "k")
    validate.check_flag("is_causal", is_causal)
    sparse.check_sparsity(sparsity, cdf_threshold, block_mask)
    if sparsity == "auto":   # the predictor kernels, on the q / k the attention sees (after the fused norm / RoPE)
        block_mask = sparse.auto_block_mask(chk, cdf_threshold=cdf_threshold, is_causal=is_causal, backend=backend,
                                            q_norm_weight=q_norm_weight, k_norm_weight=k_norm_weight, eps=eps,
                                            cos=cos, sin=sin)
    sh = chk.shapes
    masks.check_block_mask(block_mask, sh.B, sh.H_q, sh.S_q, sh.S_kv, device=q.device)
    out, lse = _attention_op(q, k, v, chk.softmax_scale, layout, bool(smooth_k), q_norm_weight, k_norm_weight,
                             float(eps), cos, sin, chk.rope_dim or _NO_ROPE, bool(return_lse), backend or _DEFAULT,
                             kernel or _DEFAULT, bool(is_causal), block_mask, bool(smooth_v), pv_dtype)
    return (out, lse) if return_lse else out
