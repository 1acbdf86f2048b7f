"""The public ops, registered with torch.library so they work under torch.compile (fullgraph) and pass opcheck.

    sage_prepare(q, k, v, ..., layout="NHD")       -> SagePrepared
    sage_attention_fwd(prepared, ..., layout="NHD") -> out (, lse [B, H_q, S_q] fp32)
    sage_attention(q, k, v, ..., layout="NHD")     -> prepare + forward

q [B, S_q, H_q, D], k/v [B, S_kv, H_kv, D] (layout="NHD") or [B, H, S, D] (layout="HND"), bf16, fp16 or fp32 (one
dtype), any strides with a contiguous last dim; out has q's dtype and layout (fp32 in: fp32 out, docs/numerics.md
§Inputs). The options, their types, defaults and schema encodings
are declared once in sage_co.callspec; the schemas, the signatures and the fake implementations below are derived
from those declarations. Each call is checked once by sage_co.plan.plan_call before any kernel runs:

  eager        the Python function plans the call (memoised for repeated shapes) and runs the plan's kernels
               directly (sage_co.ops.*): no torch.library dispatch, no second check;
  otherwise    (torch.compile tracing, meta/fake tensors, torch function or dispatch modes, tensor subclasses) the
               Python function checks at trace time and calls the custom op, whose real implementation plans again
               when it runs; the fake implementations return tensors with exactly the shapes, dtypes and strides
               of the real outputs and make the real op's refusals on meta too.

V^T (fp8, or fp16 with pv_dtype="fp16") crosses the op boundary as its raw bytes (a uint8 view of the same storage,
pv_dtype says how to read them): torch's schema checker (opcheck test_schema) cannot compare float8 tensors, and a
view costs nothing. v_mean crosses as a tensor (zeros without smooth_v) and becomes SagePrepared.v_mean only with
smooth_v; lse_corr (smooth_k's LSE term) crosses as a tensor ([0] without smooth_k) and becomes
SagePrepared.lse_corr only with smooth_k.
"""
from __future__ import annotations

import torch

from . import launch, masks, plan as planning, validate
from .callspec import FWD_KEYWORDS, SAGE_ATTENTION, SAGE_ATTENTION_FWD, SAGE_PREPARE, OpSpec
from .ops import attention as attention_ops
from .ops import prepare as prepare_ops
from .prepared import SCALE_BLOCK, V_T_DTYPES, SagePrepared, d_pad, s_pad


def _register(spec: OpSpec, impl, fake):
    """The custom op sage_co::<spec.name> with the schema derived from `spec`."""
    op = torch.library.custom_op(f"sage_co::{spec.name}", impl, mutates_args=(), schema=spec.schema())
    op.register_fake(fake)
    return op


def _sizes(q, k, layout):
    """(B, S_q, S_kv, H_q, H_kv, D) of validated inputs (also on fake/meta tensors)."""
    qn, kn = (q, k) if layout == "NHD" else (q.transpose(1, 2), k.transpose(1, 2))
    B, S_q, H_q, D = qn.shape
    return B, S_q, kn.shape[1], H_q, kn.shape[2], D


def _schema_values(p: planning.Plan) -> dict:
    """The options of a checked call with what the check resolved (softmax_scale None -> 1/sqrt(D), rope_dim
    from cos)."""
    return {**p.options, "softmax_scale": p.softmax_scale, "rope_dim": p.rope_dim}


# -------------------------------------------------------------------------------------------- prepare
def _prepare_fields(p: planning.Plan, internal: bool = False) -> SagePrepared | prepare_ops.Staged:
    """The planned prepare launch: a SagePrepared, or with internal (the prepared buffers never leave the op:
    sage_attention) the Staged workspace holding all of them (sage_co.ops.prepare.buffers)."""
    o = p.options
    return prepare_ops.execute(p.prepare, p.q, p.k, p.v, q_norm_weight=o["q_norm_weight"],
                               k_norm_weight=o["k_norm_weight"], cos=o["cos"], sin=o["sin"], internal=internal)


def _prepare_impl(*args):
    inputs, o = SAGE_PREPARE.from_schema(args)
    pr = _prepare_fields(planning.plan_call(SAGE_PREPARE, inputs, o))
    v_mean = pr.v_mean if pr.v_mean is not None else torch.zeros_like(pr.k_mean)
    lse_corr = pr.lse_corr if pr.lse_corr is not None else pr.q_scale.new_empty((0,))   # (0,): no smooth_k
    return (pr.q_int8, pr.q_scale, pr.k_int8, pr.k_scale, pr.k_mean, pr.v_t.view(torch.uint8), pr.v_scale, v_mean,
            lse_corr)


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


def _prepare_fake(*args):
    (q, k, _), o = SAGE_PREPARE.from_schema(args)
    return _prepared_like(q, k, o["layout"], o["pv_dtype"], o["smooth_k"])


_prepare_op = _register(SAGE_PREPARE, _prepare_impl, _prepare_fake)


def sage_prepare(q, k, v, softmax_scale=None, **options) -> SagePrepared:
    """Quantize q [B, S_q, H_q, D], k/v [B, S_kv, H_kv, D] (layout="HND": [B, H, S, D]; bf16, fp16 or fp32) for the
    attention kernel (docs/numerics.md §Prepare). softmax_scale None = 1/sqrt(D). smooth_v: subtract V's
    per-channel mean before fp8 (added back by the attention kernel); pv_dtype "fp16": keep V in fp16 for the
    f16 P.V WMMA (docs/numerics.md §smooth_v, §pv_dtype fp16). The options: sage_co.callspec.SAGE_PREPARE.

    backend: None picks by device (CPU -> the emulator, a gfx1201 GPU -> "gpu"), or "emu" / "gpu" ("hip" is the
    deprecated spelling of "gpu": a FutureWarning)."""
    o = SAGE_PREPARE.bind(options, "sage_prepare")
    o["softmax_scale"] = softmax_scale
    if planning.eager(q, k, v):
        return _prepare_fields(planning.plan_call(SAGE_PREPARE, (q, k, v), o))
    p = planning.plan_call(SAGE_PREPARE, (q, k, v), o, resolve=False)
    fields = _prepare_op(*SAGE_PREPARE.to_schema((q, k, v), _schema_values(p)))
    sh = p.shapes
    return _prepared(fields, sh.S_q, sh.S_kv, sh.D, sh.dtype, o["smooth_v"], o["pv_dtype"], o["smooth_k"])


sage_prepare.__signature__ = SAGE_PREPARE.signature()
sage_prepare.__doc__ += "\n\n" + SAGE_PREPARE.options_doc()


def _prepared(fields, S_q: int, S_kv: int, D: int, out_dtype: torch.dtype, smooth_v: bool = False,
              pv_dtype: str = "fp8", smooth_k: bool = False) -> SagePrepared:
    q_int8, q_scale, k_int8, k_scale, k_mean, v_bytes, v_scale, v_mean, lse_corr = fields
    v_t = v_bytes.view(V_T_DTYPES[pv_dtype])
    return SagePrepared(q_int8, q_scale, k_int8, k_scale, k_mean, v_t, v_scale, S_q, S_kv, D, out_dtype,
                        v_mean if smooth_v else None, lse_corr if smooth_k else None)


# -------------------------------------------------------------------------------------------- forward
def _no_lse(out: torch.Tensor, lse: torch.Tensor, return_lse: bool):
    """The custom ops' second output: lse, or an empty fp32 tensor without return_lse (as the fakes say)."""
    return out, (lse if return_lse else lse.new_empty((0,)))


def _fwd_impl(*args):
    fields, o = SAGE_ATTENTION_FWD.from_schema(args)
    *tensors, S_q, S_kv, D, out_dtype = fields
    prepared = _prepared((*tensors, o["v_mean"], o["lse_corr"]), S_q, S_kv, D, out_dtype, o["v_mean"] is not None,
                         o["pv_dtype"], o["lse_corr"] is not None)
    # A caller's SagePrepared: its padding must be zero (a seq_len lowered within the same S_pad shows there).
    # Checked in the real implementation, so torch.compile traces no data-dependent branch; it reads only the
    # padded part. sage_attention's own prepared structure skips it.
    validate.check_prepared_padding(prepared)
    p = planning.plan_call(SAGE_ATTENTION_FWD, (prepared,), o)
    return _no_lse(*attention_ops.execute(p.attention, prepared, o["block_mask"], o["attn_mask"]), o["return_lse"])


def _fwd_like(like: torch.Tensor, B, S_q, H_q, D, out_dtype, layout, return_lse):
    shape = (B, S_q, H_q, D) if layout == "NHD" else (B, H_q, S_q, D)
    out = like.new_empty(shape, dtype=out_dtype)
    lse = like.new_empty((B, H_q, S_q) if return_lse else (0,), dtype=torch.float32)
    return out, lse


def _fwd_fake(*args):
    fields, o = SAGE_ATTENTION_FWD.from_schema(args)
    q_int8, S_q, S_kv, D, out_dtype = fields[0], *fields[7:]
    validate.check_attention_length(S_q, D, "seq_len_q")   # the real op's refusals, also on meta
    validate.check_attention_length(S_kv, D, "seq_len_kv")
    validate.check_kernel_shipped(o["kernel"])
    masks.check_attn_mask(o["attn_mask"], q_int8.shape[0], q_int8.shape[1], S_q, S_kv, device=q_int8.device)
    return _fwd_like(q_int8, q_int8.shape[0], S_q, q_int8.shape[1], D, out_dtype, o["layout"], o["return_lse"])


_fwd_op = _register(SAGE_ATTENTION_FWD, _fwd_impl, _fwd_fake)


def sage_attention_fwd(prepared: SagePrepared, **options):
    """The attention kernel alone on a SagePrepared: out [B, S_q, H_q, D] (layout="HND": [B, H_q, S_q, D]) in
    prepared.out_dtype, or (out, lse fp32 [B, H_q, S_q]).

    kernel: None = the default shipped kernel (the hand-scheduled asm when shipped), or a kernel name from
    the manifest ("hip" = the clang-built baseline, "asm"). is_causal / block_mask: see sage_attention."""
    o = SAGE_ATTENTION_FWD.bind(options, "sage_attention_fwd", allowed=FWD_KEYWORDS)
    fast = isinstance(prepared, SagePrepared) and planning.eager(prepared.q_int8)
    p = planning.plan_call(SAGE_ATTENTION_FWD, (prepared,), o, resolve=fast)
    if fast:
        validate.check_prepared_padding(prepared)
        out, lse = attention_ops.execute(p.attention, prepared, o["block_mask"], o["attn_mask"])
    else:
        o = {**o, "v_mean": prepared.v_mean, "pv_dtype": prepared.pv_dtype, "lse_corr": prepared.lse_corr}
        sh = p.shapes
        fields = (*prepared[:5], prepared.v_t.view(torch.uint8), prepared.v_scale, sh.S_q, sh.S_kv, sh.D, sh.dtype)
        out, lse = _fwd_op(*SAGE_ATTENTION_FWD.to_schema(fields, o))
    return (out, lse) if o["return_lse"] else out


sage_attention_fwd.__signature__ = SAGE_ATTENTION_FWD.signature(FWD_KEYWORDS)
sage_attention_fwd.__doc__ += "\n\n" + SAGE_ATTENTION_FWD.options_doc(FWD_KEYWORDS)


# -------------------------------------------------------------------------------------------- prepare + forward
def _run_attention(p: planning.Plan):
    """The planned prepare and attention launches (the prepared structure is made here: padding not re-read)."""
    with launch.device_guard(p.attention.launch.backend, p.q):   # one device guard for the call's launches
        return attention_ops.execute(p.attention, _prepare_fields(p, internal=True), p.options["block_mask"],
                                     p.options["attn_mask"], own=True)


def _attention_impl(*args):
    inputs, o = SAGE_ATTENTION.from_schema(args)
    return _no_lse(*_run_attention(planning.plan_call(SAGE_ATTENTION, inputs, o)), o["return_lse"])


def _attention_fake(*args):
    (q, k, _), o = SAGE_ATTENTION.from_schema(args)
    B, S_q, S_kv, H_q, H_kv, D = _sizes(q, k, o["layout"])
    validate.check_attention_length(S_q, D, "q")   # the real op's refusals, also on meta / under torch.compile
    validate.check_attention_length(S_kv, D, "k")
    validate.check_kernel_shipped(o["kernel"])
    masks.check_attn_mask(o["attn_mask"], B, H_q, S_q, S_kv, device=q.device)
    return _fwd_like(q, B, S_q, H_q, D, q.dtype, o["layout"], o["return_lse"])


_attention_op = _register(SAGE_ATTENTION, _attention_impl, _attention_fake)


def _predicted(p: planning.Plan) -> dict:
    """sparsity="auto": the options with block_mask = the predictor's mask (sage_co.sparse.auto_block_mask: on the
    q / k the attention sees, after the fused RMSNorm / RoPE when those are on, masked causally with is_causal)."""
    from . import sparse
    o = p.options
    chk = validate.Checked(p.shapes, p.q, p.k, p.v, p.softmax_scale, p.rope_dim, o["norm_rope_rounding"])
    mask = sparse.auto_block_mask(chk, cdf_threshold=o["cdf_threshold"], is_causal=o["is_causal"],
                                  backend=o["backend"], q_norm_weight=o["q_norm_weight"],
                                  k_norm_weight=o["k_norm_weight"], eps=o["eps"], cos=o["cos"], sin=o["sin"])
    sh = p.shapes
    masks.check_block_mask(mask, sh.B, sh.H_q, sh.S_q, sh.S_kv, device=p.q.device)
    return {**o, "block_mask": mask, "sparsity": None, "cdf_threshold": None}


def sage_attention(q, k, v, softmax_scale=None, **options):
    """SageAttention forward: prepare (INT8 Q/K, FP8 V, optional fused RMSNorm + RoPE) then the attention kernel.
    The options (types, defaults, what each does): sage_co.callspec.SAGE_ATTENTION.

    pv_dtype: "fp8" (default: V in fp8 e4m3 with per-channel scales, P.V on the fp8 WMMA) or "fp16" (V kept in
    fp16, P rounded to fp16, the f16 WMMA: more accurate, slower). smooth_v (fp8 only): subtract V's per-channel
    mean before fp8 and add it back to the output (helps V with per-channel offsets).

    q [B, S_q, H_q, D], k/v [B, S_kv, H_kv, D] (layout="HND": [B, H, S, D]), bf16, fp16 or fp32 (one dtype; fp32 is
    prepared from its own values), H_q % H_kv == 0, any D in 1..abi.HEAD_DIM_MAX (zero-padded to abi.d_pad(D)).
    Returns out in q's dtype and layout (and fp32 LSE [B, H_q, S_q], natural log).

    is_causal: query i sees keys j <= i + S_kv - S_q (bottom-right aligned, as flash-attention >= 2.1).
    block_mask: bool [B, H_q, ceil(S_q / BLOCK_Q), ceil(S_kv / BLOCK_KV)]: the key tiles each query tile attends
    (the kernel visits only those: time ~ density); combines with is_causal. sparsity="auto": block_mask =
    sage_co.predict_block_mask(q', k', cdf_threshold=..., is_causal=is_causal, backend=backend) (SpargeAttn's
    prediction, on the predictor kernels) on q', k' = q, k after the fused RMSNorm / RoPE when those are on;
    cdf_threshold None = the predictor's default (sage_co.sparse.DEFAULT_CDF_THRESHOLD), and only with
    sparsity="auto". attn_mask: SDPA's mask, bool (True = attend) or additive float32 / bf16 / fp16, broadcastable
    to [B, H_q, S_q, S_kv] (trailing alignment; a key-padding mask [B, S_kv] is attn_mask[:, None, None, :]);
    tiles it hides are skipped, a mask broadcast over the queries (key padding) is read as one bit row per
    (batch, head); combines with is_causal and block_mask (docs/numerics.md §Masks "attn_mask"). Rows that see no
    key output zeros and LSE -inf (docs/numerics.md §Masks)."""
    o = SAGE_ATTENTION.bind(options, "sage_attention")
    o["softmax_scale"] = softmax_scale
    if planning.eager(q, k, v):
        p = planning.plan_call(SAGE_ATTENTION, (q, k, v), o)
        if o["sparsity"] == "auto":
            p = planning.plan_call(SAGE_ATTENTION, (q, k, v), _predicted(p))
        out, lse = _run_attention(p)
    else:
        p = planning.plan_call(SAGE_ATTENTION, (q, k, v), o, resolve=False)
        if o["sparsity"] == "auto":
            p = p._replace(options=_predicted(p))
        out, lse = _attention_op(*SAGE_ATTENTION.to_schema((q, k, v), _schema_values(p)))
    return (out, lse) if o["return_lse"] else out


sage_attention.__signature__ = SAGE_ATTENTION.signature()
sage_attention.__doc__ += "\n\n" + SAGE_ATTENTION.options_doc()
