"""Argument checks shared by every entry point (reference and kernels).

Every failure raises TypeError (wrong type/dtype) or ValueError (wrong shape, layout or value) whose message
starts with the argument's name and says what was expected. docs/numerics.md §Inputs lists the contract.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .abi import PREPARE_ROPE_DIMS
from .abi import PREPARE_ROUNDINGS as NORM_ROPE_ROUNDINGS  # the manifest's rounding column
from .backends import BACKENDS, canonical as canonical_backend  # noqa: F401 (the one list; backend modules load lazily)
from .abi import HEAD_DIM_GRANULE
from .prepared import (HEAD_DIM, HEAD_DIM_MAX, HEAD_DIMS_NATIVE, INPUT_DTYPES, LAYOUTS, PAD, PV_DTYPES,
                       SCALE_BLOCK, U32, SagePrepared, d_pad, expected_shapes, s_pad)

ROPE_DIMS = tuple(r for r in PREPARE_ROPE_DIMS if r)   # the shipped RoPE widths (0 in the manifest = no RoPE)
MAX_STRIDE = 2 ** 31 - 1   # the prepare kernels take element strides as 32-bit kernargs


class Shapes(NamedTuple):
    """The sizes of one call: q [B, S_q, H_q, D], k/v [B, S_kv, H_kv, D] (NHD order), dtype of q/k/v."""
    B: int
    S_q: int
    S_kv: int
    H_q: int
    H_kv: int
    D: int
    dtype: torch.dtype


class Checked(NamedTuple):
    shapes: Shapes
    q: torch.Tensor  # the NHD views [B, S, H, D] of the inputs (no copy: a transpose for layout="HND")
    k: torch.Tensor
    v: torch.Tensor
    softmax_scale: float
    rope_dim: int | None  # None when RoPE is off
    norm_rope_rounding: str = "once"  # the norm/RoPE convention (docs/numerics.md §Optional RMSNorm + RoPE)


def _tensor(name: str, t, dtype) -> torch.Tensor:
    """t is a tensor of `dtype` (or of one of the dtypes in the tuple `dtype`) without requires_grad."""
    dtypes = dtype if isinstance(dtype, tuple) else (dtype,)
    want = " or ".join(str(d) for d in dtypes)
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor of dtype {want}, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise TypeError(f"{name}: expected dtype {want}, got {t.dtype}")
    if t.requires_grad:
        raise ValueError(f"{name}: expected a tensor without requires_grad (sage-co has no backward); "
                         f"pass {name}.detach()")
    return t


def _contiguous(name: str, t: torch.Tensor) -> None:
    if not t.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous tensor (got strides {tuple(t.stride())} for shape "
                         f"{tuple(t.shape)}); pass {name}.contiguous()")


def _same_device(name: str, t: torch.Tensor, device: torch.device) -> None:
    if t.device != device:
        raise ValueError(f"{name}: expected a tensor on {device} (the device of q), got {t.device}")


def check_layout(layout) -> str:
    if not isinstance(layout, str):
        raise TypeError(f"layout: expected one of {LAYOUTS}, got {type(layout).__name__}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS} ('NHD' = [B, S, H, D], 'HND' = [B, H, S, D]), "
                         f"got {layout!r}")
    return layout


def check_head_dim(name: str, D: int, shape) -> None:
    if not 1 <= D <= HEAD_DIM_MAX:
        raise ValueError(f"{name}: expected a head dim in 1..{HEAD_DIM_MAX} (zero-padded to one of "
                         f"{HEAD_DIMS_NATIVE}), got D = {D} (shape {tuple(shape)})")


def check_qkv(q, k, v, layout="NHD") -> tuple[Shapes, torch.Tensor, torch.Tensor, torch.Tensor]:
    """q [B, S_q, H_q, D], k/v [B, S_kv, H_kv, D] (layout "NHD"; "HND": [B, H, S, D]), one dtype (bf16, fp16 or fp32),
    one device, any strides with stride(-1) == 1, D in 1..HEAD_DIM_MAX, H_q % H_kv == 0.
    Returns (Shapes, and the NHD views of q, k, v: a transpose for "HND", never a copy)."""
    layout = check_layout(layout)
    dims = "[B, S, H, D]" if layout == "NHD" else "[B, H, S, D]"
    for name, t in (("q", q), ("k", k), ("v", v)):
        _tensor(name, t, INPUT_DTYPES)
        if t.dim() != 4:
            raise ValueError(f"{name}: expected 4 dims {dims} (layout={layout!r}), got shape {tuple(t.shape)}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name}: expected the dtype of q ({q.dtype}), got {t.dtype}")
    views = [t if layout == "NHD" else t.transpose(1, 2) for t in (q, k, v)]
    qn, kn, vn = views
    B, S_q, H_q, D = qn.shape
    check_head_dim("q", D, q.shape)
    for name, t in (("k", kn), ("v", vn)):
        if t.shape[-1] != D:
            raise ValueError(f"{name}: expected the head dim of q (D = {D}), got shape {tuple(t.shape)}")
        if t.shape[0] != B:
            raise ValueError(f"{name}: expected the batch size of q (B = {B}), got shape {tuple(t.shape)}")
    if vn.shape != kn.shape:
        raise ValueError(f"v: expected the shape of k {tuple((k).shape)}, got {tuple(v.shape)}")
    _, S_kv, H_kv, _ = kn.shape
    if B == 0 or H_q == 0:
        raise ValueError(f"q: expected B >= 1 and H >= 1, got shape {tuple(q.shape)} (layout={layout!r})")
    if S_q == 0:
        raise ValueError(f"q: expected at least one token (S >= 1), got shape {tuple(q.shape)} (layout={layout!r})")
    if S_kv == 0:
        raise ValueError(f"k: expected at least one token (S >= 1), got shape {tuple(k.shape)} (layout={layout!r})")
    if H_kv == 0 or H_q % H_kv:
        raise ValueError(f"k: expected a number of heads that divides the {H_q} heads of q (GQA/MQA), got "
                         f"{H_kv} (shape {tuple(k.shape)}, layout={layout!r})")
    for name, t, orig in (("q", qn, q), ("k", kn, k), ("v", vn, v)):
        if t.stride(-1) != 1 and t.shape[-1] > 1:
            raise ValueError(f"{name}: expected a contiguous last dim (stride(-1) == 1), got strides "
                             f"{tuple(orig.stride())} for shape {tuple(orig.shape)}; pass {name}.contiguous()")
        if max(orig.stride()) > MAX_STRIDE:
            raise ValueError(f"{name}: strides {tuple(orig.stride())} exceed {MAX_STRIDE} elements")
        _same_device(name, t, q.device)
    return Shapes(B, S_q, S_kv, H_q, H_kv, D, q.dtype), qn, kn, vn


def check_packed_qkv(q, k, v) -> Shapes:
    """Varlen's packed q [total_q, H_q, D], k/v [total_kv, H_kv, D]: the checks of check_qkv on the packed tensors
    (messages quote the packed shapes), except that totals of 0 are allowed (sequences without queries or keys
    give zeros). Returns Shapes with B = 1 and the totals as S_q / S_kv."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        _tensor(name, t, INPUT_DTYPES)
        if t.dim() != 3:
            raise ValueError(f"{name}: expected a packed 3-D tensor [total, H, D], got shape {tuple(t.shape)}")
        if t.dtype != q.dtype:
            raise TypeError(f"{name}: expected the dtype of q ({q.dtype}), got {t.dtype}")
        _same_device(name, t, q.device)
    T_q, H_q, D = q.shape
    check_head_dim("q", D, q.shape)
    for name, t in (("k", k), ("v", v)):
        if t.shape[-1] != D:
            raise ValueError(f"{name}: expected the head dim of q (D = {D}), got shape {tuple(t.shape)}")
    if v.shape != k.shape:
        raise ValueError(f"v: expected the shape of k {tuple(k.shape)}, got {tuple(v.shape)}")
    T_kv, H_kv, _ = k.shape
    if H_q == 0:
        raise ValueError(f"q: expected H >= 1, got shape {tuple(q.shape)}")
    if H_kv == 0 or H_q % H_kv:
        raise ValueError(f"k: expected a number of heads that divides the {H_q} heads of q (GQA/MQA), got "
                         f"{H_kv} (shape {tuple(k.shape)})")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.stride(-1) != 1 and t.shape[-1] > 1:
            raise ValueError(f"{name}: expected a contiguous last dim (stride(-1) == 1), got strides "
                             f"{tuple(t.stride())} for shape {tuple(t.shape)}; pass {name}.contiguous()")
    return Shapes(1, T_q, T_kv, H_q, H_kv, D, q.dtype)


NO_MAX = object()   # check_cu_seqlens(max_len=NO_MAX): the caller has no max_seqlen to check (LightX2V's apply)


def check_cu_seqlens_tensor(name: str, cu, max_len, max_name: str) -> None:
    """What can be checked without reading cu_seqlens: a 1-D int32 or int64 tensor [batch + 1] with data (not
    meta); max_len an int, or NO_MAX (also under torch.compile: no data is read)."""
    if not isinstance(cu, torch.Tensor):
        raise TypeError(f"{name}: expected a 1-D int32 or int64 tensor [batch + 1], got {type(cu).__name__}")
    if cu.dim() != 1 or cu.dtype not in (torch.int32, torch.int64) or cu.shape[0] < 2:
        raise ValueError(f"{name}: expected a 1-D int32 or int64 tensor [batch + 1] of cumulative lengths, got "
                         f"{cu.dtype} {list(cu.shape)}")
    if cu.device.type == "meta":
        raise ValueError(f"{name}: expected a tensor with data (the lengths are read on the host), got one on meta")
    if max_len is not NO_MAX and (isinstance(max_len, bool) or not isinstance(max_len, int)):
        raise TypeError(f"{max_name}: expected an int, got {type(max_len).__name__}")


def check_cu_seqlens(name: str, cu, total: int, max_len, max_name: str) -> list[int]:
    """cu_seqlens (check_cu_seqlens_tensor) holding values that start at 0, never decrease and end at the packed
    length, with max_len >= the longest sequence (NO_MAX: none to check). Reads the values (a host copy). Returns
    them. The one rule for every packed entry point: varlen, sageattn_varlen, the LightX2V adapter."""
    check_cu_seqlens_tensor(name, cu, max_len, max_name)
    vals = [int(x) for x in cu.cpu()]
    if vals[0] != 0 or any(b < a for a, b in zip(vals, vals[1:])) or vals[-1] != total:
        raise ValueError(f"{name}: must start at 0, never decrease and end at the packed length {total}, got {vals}")
    longest = max(b - a for a, b in zip(vals, vals[1:]))
    if max_len is not NO_MAX and max_len < longest:
        raise ValueError(f"{max_name}: expected an int >= the longest sequence of {name} ({longest}), got {max_len!r}")
    return vals


# docs/numerics.md §Finite range: with |softmax_scale| <= 2^64 and |q|, |k| <= 2^24 every intermediate of the spec
# is finite (the largest logit is below 2^121); beyond 2^64 even |q| ~ 4 overflows the scaled Q (1e38 gave all NaN).
MAX_SOFTMAX_SCALE = 2.0 ** 64
MAX_QK_ABS = 2.0 ** 24


def check_softmax_scale(softmax_scale, head_dim: int = HEAD_DIM) -> float:
    """None -> 1/sqrt(head_dim) (the real D, not the padded one); otherwise a real number (int or float, not bool)
    with |softmax_scale| <= 2^64."""
    if softmax_scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, (int, float)):
        raise TypeError(f"softmax_scale: expected None or a finite float, got {type(softmax_scale).__name__}")
    # comparisons, not math.isfinite: under torch.compile(dynamic=True) the float is symbolic and math.isfinite
    # cannot be traced (fullgraph fails); the chained comparison also refuses NaN and +-inf
    if not -MAX_SOFTMAX_SCALE <= softmax_scale <= MAX_SOFTMAX_SCALE:
        raise ValueError(f"softmax_scale: expected a finite float with |softmax_scale| <= 2**64 (the range where "
                         f"the arithmetic stays finite, docs/numerics.md §Finite range), got {softmax_scale}")
    return float(softmax_scale)


def check_flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected True or False, got {value!r}")
    return value


def check_eps(eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"eps: expected a finite float >= 0, got {type(eps).__name__}")
    if not 0 <= eps < math.inf:   # comparisons only: traceable with a symbolic eps (see check_softmax_scale)
        raise ValueError(f"eps: expected a finite float >= 0, got {eps}")
    return float(eps)


def check_norm_rope_rounding(norm_rope_rounding) -> str:
    """norm_rope_rounding is "once" (F.rms_norm, then RoPE in fp32: one rounding each) or "per_op" (the
    HF-transformers chain, every op rounded to the input dtype)."""
    if not isinstance(norm_rope_rounding, str):
        raise TypeError(f"norm_rope_rounding: expected one of {NORM_ROPE_ROUNDINGS}, got "
                        f"{type(norm_rope_rounding).__name__}")
    if norm_rope_rounding not in NORM_ROPE_ROUNDINGS:
        raise ValueError(f"norm_rope_rounding: expected one of {NORM_ROPE_ROUNDINGS}, got {norm_rope_rounding!r}")
    return norm_rope_rounding


def check_norm_rope(q_norm_weight, k_norm_weight, cos, sin, rope_dim, shapes: Shapes,
                    device: torch.device, norm_rope_rounding: str = "once") -> int | None:
    """Norm weights: None or contiguous [D] in the dtype of q. cos/sin: both None or both contiguous
    [max(S_q, S_kv), rope_dim] (row i = position i, for Q and K alike), in fp32 or the dtype of q with
    norm_rope_rounding "once" (a table in q's dtype is upcast exactly), in the dtype of q with "per_op" (the HF
    chain multiplies by tables rounded to the input dtype). rope_dim: None (taken from cos) or one of 32, 64, 96,
    128, at most D, matching cos. Returns rope_dim or None."""
    check_norm_rope_rounding(norm_rope_rounding)
    D, dtype, S = shapes.D, shapes.dtype, max(shapes.S_q, shapes.S_kv)
    for name, w in (("q_norm_weight", q_norm_weight), ("k_norm_weight", k_norm_weight)):
        if w is None:
            continue
        _tensor(name, w, dtype)
        if tuple(w.shape) != (D,):
            raise ValueError(f"{name}: expected shape ({D},) (the head dim), got {tuple(w.shape)}")
        if D % HEAD_DIM_GRANULE:   # the host zero-pads such a D; the fused RMSNorm's mean would count the padding
            raise ValueError(f"{name}: the fused RMSNorm needs a head dim that is a multiple of {HEAD_DIM_GRANULE}, "
                             f"got D = {D} (shape {tuple(w.shape)}); apply the norm before sage-co")
        _contiguous(name, w)
        _same_device(name, w, device)
    allowed = tuple(r for r in ROPE_DIMS if r <= D)
    if rope_dim is not None and (isinstance(rope_dim, bool) or not isinstance(rope_dim, int)):
        raise TypeError(f"rope_dim: expected None or an int in {allowed}, got {type(rope_dim).__name__}")
    if rope_dim is not None and rope_dim not in allowed:
        raise ValueError(f"rope_dim: expected one of {allowed} (at most the head dim {D}), got {rope_dim}")
    if cos is None and sin is None:
        if rope_dim is not None:
            raise ValueError(f"rope_dim: given ({rope_dim}) but cos and sin are None; pass cos and sin "
                             f"[S, rope_dim] or leave rope_dim None")
        return None
    if cos is None or sin is None:
        missing, given = ("cos", "sin") if cos is None else ("sin", "cos")
        raise ValueError(f"{missing}: expected a [S, rope_dim] tensor because {given} is given (RoPE needs both)")
    table_dtypes = (torch.float32, dtype) if norm_rope_rounding == "once" else dtype
    for name, t in (("cos", cos), ("sin", sin)):
        if norm_rope_rounding == "per_op" and isinstance(t, torch.Tensor) and t.dtype != dtype:
            raise TypeError(f"{name}: expected dtype {dtype} with norm_rope_rounding=\"per_op\" (the HF chain "
                            f"rounds every product to the input dtype; pass {name}.to({dtype}) or use "
                            f"norm_rope_rounding=\"once\", which takes fp32 tables), got {t.dtype}")
        _tensor(name, t, table_dtypes)
        if t.dim() != 2:
            raise ValueError(f"{name}: expected shape [S, rope_dim] = [{S}, rope_dim], got {tuple(t.shape)}")
    if rope_dim is None:
        rope_dim = cos.shape[1]
        if rope_dim not in allowed:
            raise ValueError(f"cos: expected shape [{S}, rope_dim] with rope_dim in {allowed}, "
                             f"got {tuple(cos.shape)}")
    for name, t in (("cos", cos), ("sin", sin)):
        if tuple(t.shape) != (S, rope_dim):
            raise ValueError(f"{name}: expected shape [S, rope_dim] = [{S}, {rope_dim}] (S = max(S_q, S_kv), "
                             f"row = position), got {tuple(t.shape)}")
        _contiguous(name, t)
        _same_device(name, t, device)
    return rope_dim


def check_schedule(schedule) -> str | None:
    """schedule: None (the default: sage_co.ops.attention.resolved_schedule) or a name from
    sage_co.family.ATTENTION_SCHEDULES (the attention kernels' exp2 schedules, docs/performance.md §Schedules)."""
    from .family import ATTENTION_SCHEDULES   # torch-free declaration of the kernel family
    if schedule is None:
        return schedule
    if not isinstance(schedule, str):
        raise TypeError(f"schedule: expected None or a str naming a shipped schedule {ATTENTION_SCHEDULES}, got "
                        f"{type(schedule).__name__}")
    if schedule not in ATTENTION_SCHEDULES:
        raise ValueError(f"schedule: expected None or one of {ATTENTION_SCHEDULES} (the shipped exp2 schedules of the "
                         f"attention kernels), got {schedule!r}")
    return schedule


def check_pv(pv_dtype, smooth_v) -> str:
    """pv_dtype is "fp8" or "fp16"; smooth_v a bool that only the fp8 path takes (the fp16 path has no V scale
    for a mean to shrink). Returns pv_dtype."""
    if not isinstance(pv_dtype, str):
        raise TypeError(f"pv_dtype: expected \"fp8\" or \"fp16\", got {type(pv_dtype).__name__}")
    if pv_dtype not in PV_DTYPES:
        raise ValueError(f"pv_dtype: expected one of {PV_DTYPES} (the P.V WMMA's input type), got {pv_dtype!r}")
    check_flag("smooth_v", smooth_v)
    if smooth_v and pv_dtype != "fp8":
        raise ValueError(f"smooth_v: only the fp8 P.V path quantizes V (pv_dtype=\"fp8\"); got smooth_v=True "
                         f"with pv_dtype={pv_dtype!r}")
    return pv_dtype


FP16_MAX = 65504.0   # torch.finfo(torch.float16).max


def check_v_fp16_range(v: torch.Tensor, pv_dtype: str) -> None:
    """pv_dtype="fp16" keeps V in fp16 with no scale (docs/numerics.md §pv_dtype fp16): a finite bf16 or fp32 V beyond
    +-65504 would become +-inf in v_t, and its output channel a plausible-looking finite 3.39e38 (bf16 max, after
    saturation) where FP32 gives ~100 -- so it is refused (ValueError naming v). One pass over V, in the op's real
    implementation (data-dependent: not traced by torch.compile); fp16 V cannot exceed the range, meta has no data.
    Non-finite V follows docs/numerics.md §Non-finite inputs."""
    if pv_dtype != "fp16" or v.dtype not in (torch.bfloat16, torch.float32) or v.device.type == "meta" or \
            not v.numel():
        return
    amax = torch.where(torch.isfinite(v), v.abs(), torch.zeros((), dtype=v.dtype, device=v.device)).amax()
    if bool(amax > FP16_MAX):
        raise ValueError(f"v: pv_dtype=\"fp16\" keeps V in fp16 (|v| <= {FP16_MAX:g}, no scale), but this {v.dtype} V "
                         f"{tuple(v.shape)} has max |v| = {amax.item():g}; its channels would come out wrong. Use "
                         f"pv_dtype=\"fp8\" (per-channel scaled: any finite V) or scale V into the fp16 range")


def check_prepare_args(q, k, v, softmax_scale=None, *, layout="NHD", smooth_k=False, q_norm_weight=None,
                       k_norm_weight=None, eps=1e-6, cos=None, sin=None, rope_dim=None, smooth_v=False,
                       pv_dtype="fp8", norm_rope_rounding="once") -> Checked:
    """Everything sage_prepare / sage_attention take, checked in one go."""
    shapes, qn, kn, vn = check_qkv(q, k, v, layout)
    scale = check_softmax_scale(softmax_scale, shapes.D)
    check_flag("smooth_k", smooth_k)
    check_pv(pv_dtype, smooth_v)
    check_eps(eps)
    rd = check_norm_rope(q_norm_weight, k_norm_weight, cos, sin, rope_dim, shapes, q.device, norm_rope_rounding)
    return Checked(shapes, qn, kn, vn, scale, rd, norm_rope_rounding)


def _seq_field(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"prepared.{name}: expected an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"prepared.{name}: expected an int >= 1, got {value}")
    return value


def check_prepared(prepared, device: torch.device | str | None = None) -> Shapes:
    """A SagePrepared is consistent: B and H_q read off q_int8, H_kv off k_int8, S_q, S_kv, D from its int fields;
    every field's dtype, shape (expected_shapes), contiguity and device. The int fields are trusted only as far
    as the tensors agree with them: s_pad(seq_len) must be the tensors' padded length, d_pad(head_dim) their
    width. Returns the Shapes (dtype = out_dtype)."""
    if not isinstance(prepared, SagePrepared):
        raise TypeError(f"prepared: expected a SagePrepared (from sage_prepare), got {type(prepared).__name__}")
    S_q, S_kv = _seq_field("seq_len_q", prepared.seq_len_q), _seq_field("seq_len_kv", prepared.seq_len_kv)
    D = prepared.head_dim
    if isinstance(D, bool) or not isinstance(D, int):
        raise TypeError(f"prepared.head_dim: expected an int, got {type(D).__name__}")
    check_head_dim("prepared.head_dim", D, ())
    if prepared.out_dtype not in INPUT_DTYPES:
        raise TypeError(f"prepared.out_dtype: expected one of {INPUT_DTYPES}, got {prepared.out_dtype!r}")
    for name in ("q_int8", "k_int8"):
        t = getattr(prepared, name)
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"prepared.{name}: expected a 4-dim int8 tensor [B, H, S_pad, D_pad], got {shape}")
    B, H_q = prepared.q_int8.shape[:2]
    H_kv = prepared.k_int8.shape[1]
    if B < 1 or H_q < 1 or H_kv < 1 or H_q % H_kv:
        raise ValueError(f"prepared.k_int8: expected B >= 1 and a head count dividing the {H_q} heads of q_int8, "
                         f"got shape {tuple(prepared.k_int8.shape)}")
    dev = torch.device(device) if device is not None else prepared.q_int8.device

    def desc():   # only on the error path: torch.compile(dynamic=True) cannot format symbolic sizes
        return f"B={B}, S_q={S_q}, S_kv={S_kv}, H_q={H_q}, H_kv={H_kv}, D={D} (D_pad={d_pad(D)})"
    v_t = prepared.v_t
    pv = "fp16" if isinstance(v_t, torch.Tensor) and v_t.dtype == torch.float16 else "fp8"
    fields = expected_shapes(B, S_q, S_kv, H_q, H_kv, D, pv)
    if prepared.v_mean is not None:
        if pv != "fp8":
            raise ValueError("prepared.v_mean: smooth_v goes with an fp8 v_t; this structure has an fp16 v_t")
        fields["v_mean"] = fields["k_mean"]
    for field, (shape, dtype) in fields.items():
        name = f"prepared.{field}"
        t = getattr(prepared, field)
        _tensor(name, t, dtype)
        if tuple(t.shape) != shape:
            raise ValueError(f"{name}: expected shape {shape} for {desc()}, got {tuple(t.shape)}; "
                             f"this prepared structure was made for another shape")
        _contiguous(name, t)
        if t.device != dev:
            raise ValueError(f"{name}: expected a tensor on {dev}, got {t.device}")
    if prepared.lse_corr is not None:   # smooth_k's LSE term per query row (docs/numerics.md §LSE)
        _tensor("prepared.lse_corr", prepared.lse_corr, torch.float32)
        if tuple(prepared.lse_corr.shape) != (B, H_q, S_q):
            raise ValueError(f"prepared.lse_corr: expected shape {(B, H_q, S_q)} for {desc()}, got "
                             f"{tuple(prepared.lse_corr.shape)}")
        _contiguous("prepared.lse_corr", prepared.lse_corr)
        if prepared.lse_corr.device != dev:
            raise ValueError(f"prepared.lse_corr: expected a tensor on {dev}, got {prepared.lse_corr.device}")
    return Shapes(B, S_q, S_kv, H_q, H_kv, D, prepared.out_dtype)


def check_finite_range(q, k, softmax_scale=None) -> None:
    """Optional check (one pass over q and k; the ops do not run it): the inputs lie in the supported finite range
    of docs/numerics.md §Finite range, |q|, |k| <= 2^24, so the output and LSE are finite. Raises ValueError naming
    q or k."""
    check_softmax_scale(softmax_scale)
    for name, t in (("q", q), ("k", k)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        amax = t.detach().abs().amax().item() if t.numel() else 0.0
        if not amax <= MAX_QK_ABS:
            raise ValueError(f"{name}: max |{name}| = {amax} is outside the supported finite range |{name}| <= 2**24 "
                             f"(docs/numerics.md §Finite range)")


# ------------------------------------------------------------------- whole-call checks (issue 11 item 5)
ATTENTION_OP = "sage_attention_fwd"


def check_backend(backend) -> None:
    """backend: None (choose by the tensors' device), "emu" or "gpu" (or the deprecated "hip"). Checked here, before
    any kernel, without the alias's FutureWarning: this check also runs while torch.compile traces, and the
    launch's sage_co.launch.resolve_backend normalizes the name (and warns) once per call."""
    canonical_backend(backend, "backend", warn=False)


def check_kernel(kernel, op: str = ATTENTION_OP) -> None:
    """kernel: None (the default kernel) or the name of a kernel ("asm", "hip") the manifest ships for `op`."""
    if kernel is None:
        return
    if not isinstance(kernel, str):
        raise TypeError(f"kernel: expected None or a str naming a shipped kernel of {op}, got {type(kernel).__name__}")
    if torch.compiler.is_compiling():
        return   # dynamo cannot trace the manifest read; the op's fake implementation makes this check at trace time
    check_kernel_shipped(kernel, op)


def check_kernel_shipped(kernel, op: str = ATTENTION_OP) -> None:
    """The manifest part of check_kernel, without the compile guard: the ops' fake implementations call it (they
    run as plain Python under FakeTensorMode, also while torch.compile traces)."""
    if kernel is None:
        return
    from . import registry  # torch-free and cached; imported here so `validate` stays a leaf for the reference
    shipped = sorted({k.kernel for k in registry.kernels() if k.op == op})
    if kernel not in shipped:
        raise ValueError(f"kernel: expected None or one of {shipped} (the shipped kernels of {op}), got {kernel!r}")


def check_attention_length(S, D, name: str = "q") -> None:
    """S tokens of head dim D fit the attention kernel: it addresses one head with 32-bit byte offsets, so
    round_up(S, 64) * D_pad < 2^32 (S_pad <= 33,554,368 at D_pad 128, 67,108,800 at D_pad 64)."""
    Sp, Dp = s_pad(S), d_pad(D)
    if Sp * Dp >= U32:
        limit = (U32 - 1) // Dp // PAD * PAD
        raise ValueError(f"{name}: S = {S} is too long for the attention kernel: S_pad = round_up(S, 64) = {Sp} > "
                         f"{limit} at head dim {D} (one head is addressed with 32-bit byte offsets)")


def check_prepared_padding(prepared) -> None:
    """Everything past the valid tokens is zero, as the layout requires (docs/numerics.md §Prepared layout): q_int8
    rows >= seq_len_q, k_int8 rows and v_t columns >= seq_len_kv, scale blocks that hold no valid token. This
    catches a seq_len lowered within the same S_pad (100 -> 65 was silently used: rel L2 0.74). Reads only the
    padded part (fewer than 64 tokens per head); skipped for tensors without data (meta)."""
    q_int8 = prepared.q_int8
    if q_int8.device.type == "meta":
        return
    S_q, S_kv = prepared.seq_len_q, prepared.seq_len_kv
    bq, bk = -(-S_q // SCALE_BLOCK), -(-S_kv // SCALE_BLOCK)
    padded = (("seq_len_q", S_q, "q_int8", q_int8[:, :, S_q:]), ("seq_len_q", S_q, "q_scale", prepared.q_scale[..., bq:]),
              ("seq_len_kv", S_kv, "k_int8", prepared.k_int8[:, :, S_kv:]),
              ("seq_len_kv", S_kv, "k_scale", prepared.k_scale[..., bk:]),
              ("seq_len_kv", S_kv, "v_t", prepared.v_t[..., S_kv:].view(torch.uint8)))
    for length, S, field, t in padded:
        if t.numel() and bool(t.ne(0).any()):
            raise ValueError(f"prepared.{length}: {S}, but prepared.{field} holds non-zero values past token {S} "
                             f"where the layout has zero padding: the structure was prepared for a longer sequence "
                             f"or {length} was changed")
