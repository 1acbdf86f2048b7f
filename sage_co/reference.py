"""The numerics spec (docs/numerics.md) in plain torch: every sage-co kernel is checked against this module.

Runs on CPU and on any torch device, bit-for-bit the same wherever the spec says bitwise: every rounding step is an
explicit elementwise IEEE fp32 op (no scalar-divisor shortcuts, no library reductions where order matters).
Knows nothing of kernels or backends.
"""
from __future__ import annotations

import math

import torch

from . import abi, family, masks, validate
from .prepared import SCALE_BLOCK, SagePrepared, d_pad, s_pad

LOG2E = 1.4426950408889634  # log2(e) as the nearest double (M_LOG2E)
LN2 = 0.6931471805599453  # ln(2) as the nearest double (M_LN2)
INT8_MAX = 127.0
FP8_MAX = 448.0  # OCP e4m3fn largest finite (docs/rdna4.md §FP8: 0x7E)
# The P offset, the accumulators' magic and the one-FMA form's bound (docs/numerics.md §Attention arithmetic model):
# one definition in sage_co.abi, shared with the kernels' generator and checked against the HIP kernel's #defines.
P_OFF, MAGIC, FMA_MAX_QK_SCALE = abi.P_OFF, abi.MAGIC, abi.FMA_MAX_QK_SCALE
M_INIT, RESCALE_TAU = abi.M_INIT, abi.RESCALE_TAU
FP8_NAN = 0x7F  # the one NaN encoding the spec produces (docs/numerics.md §Non-finite)
KEY_TILE = 64  # keys per online-softmax step in the HIP kernel
# The attention output saturates at the output dtype's largest finite value (docs/numerics.md §Finite range):
# bf16 0x7f7f, fp16 0x7bff (65504).
OUT_MAX = {torch.bfloat16: torch.finfo(torch.bfloat16).max, torch.float16: torch.finfo(torch.float16).max}


def _f32(x: float, like: torch.Tensor) -> torch.Tensor:
    """A 0-dim fp32 tensor on like's device: Python scalars never take part in a rounding step (CUDA turns
    `tensor / python_scalar` into a multiply by the reciprocal, which is not IEEE division)."""
    return torch.tensor(x, dtype=torch.float32, device=like.device)


def fp32_div(a, b) -> torch.Tensor:
    """IEEE fp32 division a / b with both operands as device tensors."""
    like = a if isinstance(a, torch.Tensor) else b
    a = a if isinstance(a, torch.Tensor) else _f32(a, like)
    b = b if isinstance(b, torch.Tensor) else _f32(b, like)
    return torch.div(a, b)


def fp32_fma(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Correctly rounded fp32 fused multiply-add a * b + c (v_fma_f32, fmaf): the product is exact in float64
    (24 + 24 bits), the sum is rounded to odd in float64 (TwoSum error, then the last bit forced to 1 when inexact)
    and rounded once to fp32: round-to-odd at 53 >= 24 + 2 bits makes the double rounding innocuous.
    Non-finite operands give what the float64 sum gives (inf, NaN) and are passed through."""
    a, b, c = torch.broadcast_tensors(a.double(), b.double(), c.double())
    prod = a * b
    s = prod + c
    bb = s - prod
    err = (prod - (s - bb)) + (c - bb)  # TwoSum: prod + c = s + err exactly
    inexact = torch.isfinite(s) & (err != 0) & ((s.view(torch.int64) & 1) == 0)
    toward = torch.where(err > 0, torch.full_like(s, math.inf), torch.full_like(s, -math.inf))
    return torch.where(inexact, torch.nextafter(s, toward), s).float()


def fp32_sqrt(x: torch.Tensor) -> torch.Tensor:
    """IEEE (correctly rounded) fp32 sqrt. torch's CPU torch.sqrt is not correctly rounded for every fp32 input
    (sqrt(0x3e4b9bab) gives 0x3ee44e5b; IEEE is 0x3ee44e5c), so take the sqrt in float64 and round once:
    53 >= 2 * 24 + 2 makes that double rounding innocuous for sqrt."""
    return torch.sqrt(x.double()).float()


def q_multiplier(softmax_scale: float | None = None, head_dim: int = 128) -> float:
    """c = float32(softmax_scale * log2(e)): the product taken in double, rounded once to fp32 (RNE).
    softmax_scale None = 1/sqrt(head_dim)."""
    scale = validate.check_softmax_scale(softmax_scale, head_dim)
    return torch.tensor(scale * LOG2E, dtype=torch.float64).to(torch.float32).item()


# ---------------------------------------------------------------------------------------------------- fp8 / int8
def to_fp8(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> OCP float8_e4m3fn, round-half-even. Inputs must already lie in [-448, 448] or be NaN;
    every NaN becomes 0x7F (torch keeps the sign bit, giving 0xFF for -NaN; the spec has one NaN)."""
    f8 = x.to(torch.float8_e4m3fn)
    bits = torch.where(torch.isnan(x), torch.full_like(f8.view(torch.uint8), FP8_NAN), f8.view(torch.uint8))
    return bits.view(torch.float8_e4m3fn)


def _amax_inv(amax: torch.Tensor, qmax: float) -> tuple[torch.Tensor, torch.Tensor]:
    """scale = amax / qmax, inv = qmax / amax (each one IEEE fp32 division); inv := 0 where amax == 0."""
    scale = fp32_div(amax, qmax)
    inv = torch.where(amax == 0, torch.zeros_like(amax), fp32_div(qmax, amax))
    return scale, inv


def _round_int8(y: torch.Tensor) -> torch.Tensor:
    """int8 = clamp(round_half_even(y), -127, 127) with NaN -> 0 and +-inf -> +-127."""
    r = torch.nan_to_num(torch.round(y), nan=0.0)  # torch.round is round-half-even
    return r.clamp(-INT8_MAX, INT8_MAX).to(torch.int8)


def pad_channels(x: torch.Tensor, D_pad: int) -> torch.Tensor:
    """x [..., D] -> [..., D_pad] with zero channels D..D_pad-1 (docs/numerics.md §Head dim padding)."""
    D = x.shape[-1]
    if D == D_pad:
        return x
    return torch.cat([x, x.new_zeros(*x.shape[:-1], D_pad - D)], dim=-1)


def quantize_int8_blocks(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x fp32 [B, S, H, D_pad] -> (int8 [B, H, S_pad, D_pad], scale fp32 [B, H, S_pad/32]), one scale per 32 tokens.
    Rows past S are zero and count as zero in their block's amax."""
    B, S, H, D = x.shape
    Sp = s_pad(S)
    xp = torch.zeros(B, H, Sp, D, dtype=torch.float32, device=x.device)
    xp[:, :, :S] = x.transpose(1, 2)
    blocks = xp.view(B, H, Sp // SCALE_BLOCK, SCALE_BLOCK * D)
    amax = blocks.abs().amax(dim=-1)  # propagates NaN
    scale, inv = _amax_inv(amax, INT8_MAX)
    q = _round_int8(blocks * inv[..., None])
    return q.view(B, H, Sp, D), scale


def quantize_q(q: torch.Tensor, softmax_scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B, S_q, H_q, D] (NHD, bf16/fp16/fp32): x = float32(q) * c, c = q_multiplier(softmax_scale), channels zero-
    padded to D_pad; then quantize_int8_blocks. softmax_scale None = 1/sqrt(D)."""
    D = q.shape[-1]
    c = _f32(q_multiplier(validate.check_softmax_scale(softmax_scale, D)), q)
    return quantize_int8_blocks(pad_channels(q.float() * c, d_pad(D)))


def k_channel_mean(k: torch.Tensor) -> torch.Tensor:
    """k_mean [B, H_kv, D_pad] fp32: mean over the S_kv tokens of float32(k), padded channels 0. Summation order
    is not part of the spec."""
    return pad_channels(k.float().mean(dim=1), d_pad(k.shape[-1]))


def quantize_k(k: torch.Tensor, k_mean: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """x = float32(k) - k_mean (k_mean None: x = float32(k)), channels zero-padded to D_pad (k_mean [B, H_kv, D_pad]
    has zeros there); then quantize_int8_blocks. Given k_mean, bitwise."""
    x = pad_channels(k.float(), d_pad(k.shape[-1]))
    if k_mean is not None:
        x = x - k_mean[:, None, :, :]
    return quantize_int8_blocks(x)


def v_channel_mean(v: torch.Tensor) -> torch.Tensor:
    """v_mean [B, H_kv, D_pad] fp32 (smooth_v): mean over the S_kv tokens of float32(v), padded channels 0.
    Summation order is not part of the spec (as k_mean)."""
    return pad_channels(v.float().mean(dim=1), d_pad(v.shape[-1]))


def quantize_v(v: torch.Tensor, v_mean: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per (b, h, channel) over the S_kv tokens, x = float32(v) - v_mean (v_mean None: x = float32(v); smooth_v,
    docs/numerics.md §smooth_v): v_scale = amax / 448 with amax = max |x|, inv = 448 / amax (0 when amax == 0),
    y = x * inv except y = x for x = +-0 where inv = +inf (a channel of tiny values, amax < 448 / FLT_MAX:
    docs/numerics.md §V), v_fp8 = fp8(clamp(y, -448, 448)). Given v_mean, bitwise.
    Returns (v_fp8 [B, H_kv, D_pad, S_kv_pad], v_scale [B, H_kv, D_pad]); padded channels and tokens are 0."""
    B, S, H, D = v.shape
    vf = pad_channels(v.float(), d_pad(D))
    if v_mean is not None:
        vf = vf - v_mean[:, None, :, :]
    amax = vf.abs().amax(dim=1)  # [B, H, D_pad], propagates NaN
    v_scale, inv = _amax_inv(amax, FP8_MAX)
    inv_b = inv[:, None]
    y = vf * inv_b
    y = torch.where(torch.isinf(inv_b) & (vf == 0), vf, y)  # 0 * inf: the zero stays a zero, not NaN
    y = y.clamp(-FP8_MAX, FP8_MAX)  # clamp keeps NaN
    v_fp8 = torch.zeros(B, H, vf.shape[-1], s_pad(S), dtype=torch.uint8, device=v.device).view(torch.float8_e4m3fn)
    v_fp8[..., :S] = to_fp8(y).permute(0, 2, 3, 1)
    return v_fp8, v_scale


def convert_v_fp16(v: torch.Tensor) -> torch.Tensor:
    """pv_dtype="fp16": V [B, S_kv, H_kv, D] (bf16, fp16 or fp32) -> v_t fp16 [B, H_kv, D_pad, S_kv_pad], transposed like
    v_fp8: fp16 inputs pass through, bf16 and fp32 are rounded RNE (float32(v).to(float16): overflow -> +-inf, fp16 subnormals
    kept, docs/numerics.md §pv_dtype fp16). Padded channels and tokens are +0."""
    B, S, H, D = v.shape
    vh = pad_channels(v.float(), d_pad(D)).to(torch.float16)
    out = torch.zeros(B, H, vh.shape[-1], s_pad(S), dtype=torch.float16, device=v.device)
    out[..., :S] = vh.permute(0, 2, 3, 1)
    return out


def dequantize_int8_blocks(x_int8: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """int8 [B, H, S_pad, D_pad] * scale per 32-row block -> fp32 [B, H, S_pad, D_pad]."""
    return x_int8.float() * scale.repeat_interleave(SCALE_BLOCK, dim=-1)[..., None]


def dequantize_v(v_fp8: torch.Tensor, v_scale: torch.Tensor) -> torch.Tensor:
    """fp8 [B, H, D_pad, S_pad] * v_scale [B, H, D_pad] -> fp32 [B, H, D_pad, S_pad]."""
    return v_fp8.float() * v_scale[..., None]


# ---------------------------------------------------------------------------------------------- RMSNorm + RoPE
def mean_square(xf: torch.Tensor) -> torch.Tensor:
    """norm_rope_rounding "per_op": ms = mean of xf*xf over the last dim (D channels), keepdim, by the spec's halving
    tree over the channels zero-padded to D_pad: t = xf*xf, then t[i] = t[i] + t[i + w] for w = D_pad/2, ..., 2, 1
    (each level one elementwise fp32 add; the zero channels add exact zeros), ms = t[0] / D (IEEE division by the
    real D).
    Elementwise ops only, so the bits are the same on every device."""
    D = xf.shape[-1]
    t = pad_channels(xf * xf, d_pad(D))
    w = t.shape[-1] // 2
    while w >= 1:
        t = t[..., :w] + t[..., w:2 * w]
        w //= 2
    return fp32_div(t, float(D))


def mean_square_lanes8(xf: torch.Tensor) -> torch.Tensor:
    """ms = mean of xf*xf over the last dim (D channels, a multiple of 8), keepdim, in the order of torch's CPU sum
    over a contiguous row (ATen's vectorized inner sum: 8 fp32 lanes, 4 accumulators), which F.rms_norm and
    xf.pow(2).mean(-1) use on CPU (docs/numerics.md §Optional RMSNorm + rotate-half RoPE): t = xf*xf, vector j =
    t[8j:8j+8] (nv = D / 8 of them) is added to 8-lane accumulator j % 4 while j < 4 * floor(nv / 4), the rest to
    accumulator 0 in order; a = ((acc0 + acc1) + acc2) + acc3; sum = a[0] + a[1] + ... + a[7] in order;
    ms = sum / D (IEEE division). Elementwise ops only, so the bits are the same on every device."""
    D = xf.shape[-1]
    if D % 8:
        raise ValueError(f"xf: expected a last dim that is a multiple of 8, got shape {tuple(xf.shape)}")
    t = xf * xf
    nv = D // 8
    split = 4 * (nv // 4)
    acc = [torch.zeros_like(t[..., :8]) for _ in range(4)]
    for j in range(nv):
        k = j % 4 if j < split else 0
        acc[k] = acc[k] + t[..., 8 * j:8 * j + 8]
    a = ((acc[0] + acc[1]) + acc[2]) + acc[3]
    total = a[..., 0:1]
    for lane in range(1, 8):
        total = total + a[..., lane:lane + 1]
    return fp32_div(total, float(D))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, rounding: str = "once") -> torch.Tensor:
    """bf16/fp16/fp32 -> same dtype, round = RNE to x's dtype (fp32: the identity), r = 1 / sqrt(ms + eps) (IEEE sqrt
    and division; equal to torch.rsqrt on CPU, so fp32 "once" is F.rms_norm on fp32 tensors bit for bit).
    rounding "once" (F.rms_norm): ms = mean_square_lanes8, y = round((xf * r) * weight) -- fp32 compute, one
    rounding. "per_op" (HF-transformers RMSNorm): ms = mean_square (the halving tree), y = round(xf * r), then
    y = round(y * weight)."""
    validate.check_norm_rope_rounding(rounding)
    xf = x.float()
    ms = mean_square_lanes8(xf) if rounding == "once" else mean_square(xf)
    r = fp32_div(1.0, fp32_sqrt(ms + _f32(eps, xf)))
    if rounding == "once":
        return ((xf * r) * weight.float()).to(x.dtype)
    y = (xf * r).to(x.dtype)
    return (y.float() * weight.float()).to(x.dtype)


def rope(y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rope_dim: int, rounding: str = "once") -> torch.Tensor:
    """Rotate-half RoPE on the first rope_dim channels of y [B, S, H, D] (bf16, fp16 or fp32), cos/sin [>= S, rope_dim],
    row = position; rotate_half(y) = cat(-y2, y1), round = RNE to y's dtype; later channels pass.
    rounding "once" (the seed's / diffusers' fp32 RoPE): cos/sin fp32 or y's dtype (upcast exactly),
    out = round(y*cos + rotate_half(y)*sin) computed in fp32. "per_op" (HF apply_rotary_pos_emb): cos/sin in y's
    dtype, out = round(round(y*cos) + round(rotate_half(y)*sin))."""
    validate.check_norm_rope_rounding(rounding)
    S, half = y.shape[1], rope_dim // 2
    yr = y[..., :rope_dim].float()
    rot = torch.cat([-yr[..., half:], yr[..., :half]], dim=-1)
    c = cos[:S].float()[None, :, None, :]
    s = sin[:S].float()[None, :, None, :]
    if rounding == "once":
        out = (yr * c + rot * s).to(y.dtype)
    else:
        a = (yr * c).to(y.dtype).float()
        b = (rot * s).to(y.dtype).float()
        out = (a + b).to(y.dtype)
    return torch.cat([out, y[..., rope_dim:]], dim=-1) if rope_dim < y.shape[-1] else out


def norm_rope(x: torch.Tensor, weight: torch.Tensor | None, eps: float, cos: torch.Tensor | None,
              sin: torch.Tensor | None, rope_dim: int | None, rounding: str = "once") -> torch.Tensor:
    """The optional fused pre-quantization step for Q or K [B, S, H, D]: RMSNorm (if weight) then RoPE (if cos),
    both in the `rounding` convention ("once" or "per_op", see rms_norm and rope)."""
    if weight is not None:
        x = rms_norm(x, weight, eps, rounding)
    if cos is not None:
        x = rope(x, cos, sin, rope_dim if rope_dim is not None else cos.shape[1], rounding)
    return x


# ---------------------------------------------------------------------------------------------- smooth_k LSE term
def channel_tree_sum(t: torch.Tensor) -> torch.Tensor:
    """[..., D_pad] fp32 -> [...]: t[i] = t[i] + t[i + w] for w = D_pad/2, ..., 2, 1 (elementwise fp32 adds: the
    same bits on every device)."""
    w = t.shape[-1] // 2
    while w >= 1:
        t = t[..., :w] + t[..., w:2 * w]
        w //= 2
    return t[..., 0]


def smooth_k_lse_correction(qn: torch.Tensor, k_mean: torch.Tensor, softmax_scale: float) -> torch.Tensor:
    """lse_corr [B, H_q, S_q] fp32 = float32(softmax_scale) * tree_d(float32(q'[d]) * k_mean[g, d]): the natural-log
    LSE term that smooth_k's subtraction of k_mean removed from every logit, from the ORIGINAL q' (after the optional
    norm / RoPE, before quantization) as SageAttention does. The quantized q (q_int8 * q_scale) gave errors up to
    0.096 at K offset 3 (docs/numerics.md §LSE). qn [B, S_q, H_q, D] NHD, k_mean [B, H_kv, D_pad]; products and the
    halving tree (channel_tree_sum) over the channels zero-padded to D_pad in fp32."""
    B, S, H_q, D = qn.shape
    g = kv_head_index(H_q, k_mean.shape[1], qn.device)
    qf = pad_channels(qn.float(), k_mean.shape[-1]).transpose(1, 2)        # [B, H_q, S_q, D_pad], exact
    return (channel_tree_sum(qf * k_mean[:, g][:, :, None, :]) * _f32(softmax_scale, qf)).contiguous()


def smooth_k_lse_correction_packed(qn: torch.Tensor, k_mean: torch.Tensor, cu_seqlens_q: torch.Tensor,
                                   softmax_scale: float) -> torch.Tensor:
    """Varlen's lse_corr [H_q, total_q]: smooth_k_lse_correction of every packed token qn [total_q, H_q, D] with the
    k_mean [B, H_kv, D_pad] of its own sequence (the same products and tree: bitwise the per-sequence values). The
    sequence of each token is found on the device (searchsorted over cu_seqlens_q[1:]): no host read."""
    T, H_q, D = qn.shape
    tok = torch.arange(T, device=qn.device, dtype=cu_seqlens_q.dtype)
    seq = torch.searchsorted(cu_seqlens_q[1:].contiguous(), tok, right=True)   # token t is in sequence seq[t]
    g = kv_head_index(H_q, k_mean.shape[1], qn.device)
    qf = pad_channels(qn.float(), k_mean.shape[-1]).transpose(0, 1)          # [H_q, T, D_pad], exact
    km = k_mean[seq][:, g].transpose(0, 1)                                    # [H_q, T, D_pad]
    return (channel_tree_sum(qf * km) * _f32(softmax_scale, qf)).contiguous()


# ------------------------------------------------------------------------------------------------------- prepare
def sage_prepare(q, k, v, softmax_scale=None, *, layout="NHD", smooth_k=False, q_norm_weight=None,
                 k_norm_weight=None, eps=1e-6, cos=None, sin=None, rope_dim=None, smooth_v=False,
                 pv_dtype="fp8", norm_rope_rounding="once") -> SagePrepared:
    """q [B, S_q, H_q, D], k/v [B, S_kv, H_kv, D] (bf16, fp16 or fp32; layout="HND": [B, H, S, D]) -> SagePrepared
    (docs/numerics.md §Prepare). smooth_v: V minus its per-channel mean before fp8 (v_mean kept); pv_dtype "fp16":
    v_t is V in fp16 (no scale: v_scale zeros). norm_rope_rounding: the convention of the optional RMSNorm/RoPE
    ("once": F.rms_norm then fp32 RoPE; "per_op": the HF-transformers chain; see norm_rope)."""
    chk = validate.check_prepare_args(q, k, v, softmax_scale, layout=layout, smooth_k=smooth_k,
                                      q_norm_weight=q_norm_weight, k_norm_weight=k_norm_weight, eps=eps, cos=cos,
                                      sin=sin, rope_dim=rope_dim, smooth_v=smooth_v, pv_dtype=pv_dtype,
                                      norm_rope_rounding=norm_rope_rounding)
    sh = chk.shapes
    validate.check_v_fp16_range(chk.v, pv_dtype)
    qn = norm_rope(chk.q, q_norm_weight, eps, cos, sin, chk.rope_dim, norm_rope_rounding)
    kn = norm_rope(chk.k, k_norm_weight, eps, cos, sin, chk.rope_dim, norm_rope_rounding)
    q_int8, q_scale = quantize_q(qn, chk.softmax_scale)
    if smooth_k:
        k_mean = k_channel_mean(kn)
    else:
        k_mean = torch.zeros(sh.B, sh.H_kv, d_pad(sh.D), dtype=torch.float32, device=q.device)
    k_int8, k_scale = quantize_k(kn, k_mean)
    if pv_dtype == "fp16":
        v_t, v_scale = convert_v_fp16(chk.v), torch.zeros_like(k_mean)
    else:
        v_mean = v_channel_mean(chk.v) if smooth_v else None
        v_t, v_scale = quantize_v(chk.v, v_mean)
    lse_corr = smooth_k_lse_correction(qn, k_mean, chk.softmax_scale) if smooth_k else None
    return SagePrepared(q_int8, q_scale, k_int8, k_scale, k_mean, v_t, v_scale, sh.S_q, sh.S_kv, sh.D, sh.dtype,
                        v_mean if pv_dtype == "fp8" else None, lse_corr)


# ----------------------------------------------------------------------------------------------------- attention
def kv_head_index(H_q: int, H_kv: int, device=None) -> torch.Tensor:
    """GQA/MQA: query head h reads K/V head h // (H_q // H_kv) (docs/numerics.md §GQA)."""
    return torch.arange(H_q, device=device) // (H_q // H_kv)


def to_layout(x: torch.Tensor, layout: str) -> torch.Tensor:
    """An NHD [B, S, H, D] result as a tensor of the caller's layout (HND: [B, H, S, D]), contiguous."""
    return (x if layout == "NHD" else x.transpose(1, 2)).contiguous()


def round_saturating(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """fp32 -> bf16 or fp16, RNE, with |x| beyond the dtype's largest finite value (and +-inf) giving +-that value;
    NaN stays NaN (the kernels write the dtype's quiet NaN 0x7fc0 / 0x7e00). The attention output of a V near the
    dtype's max can exceed it by the fp8 rounding of p (docs/numerics.md §Finite range), so the spec saturates
    instead of rounding to inf. dtype fp32: x itself (no rounding, no saturation: +-inf stays), every NaN as the one
    pattern 0x7fc00000 the kernels write (docs/numerics.md §Inputs)."""
    if dtype == torch.float32:
        return torch.where(torch.isnan(x), torch.full_like(x, math.nan), x)   # torch's nan is 0x7fc00000
    hi = OUT_MAX[dtype]
    return x.clamp(-hi, hi).to(dtype)  # clamp keeps NaN


def exp2_valu(a: torch.Tensor) -> torch.Tensor:
    """The "exp2_valu" schedule's VALU exp2 of fp32 `a` (docs/numerics.md §Attention arithmetic model "exp2 on the
    VALU"; abi.EXP2_VALU_*), every fp32 op of the kernels reproduced: c = max(a, EXP2_VALU_MIN) (v_max_num: NaN
    dropped); r = c + MAGIC; f = c - (r - MAGIC); q = fma(fma(f, C2, C1), f, 1.0); bits(p) = (bits(r) << 23) +
    bits(q) mod 2^32."""
    a = a.float()
    c = torch.fmax(a, torch.tensor(abi.EXP2_VALU_MIN, dtype=torch.float32, device=a.device))
    magic = _f32(MAGIC, a)
    r = c + magic
    f = c - (r - magic)
    q = fp32_fma(fp32_fma(f, _f32(abi.EXP2_VALU_C2, a), _f32(abi.EXP2_VALU_C1, a)), f, _f32(1.0, a))
    bits = ((r.view(torch.int32).long() << 23) + q.view(torch.int32).long()) & 0xFFFFFFFF
    return torch.where(bits >= 2 ** 31, bits - 2 ** 32, bits).to(torch.int32).view(torch.float32)


def schedule_exp2(arg: torch.Tensor, keys: torch.Tensor, schedule: str) -> torch.Tensor:
    """exp2 of the scores `arg` [..., T] of the keys `keys` [T] as the schedule computes it: v_exp_f32 (torch.exp2)
    for "trans"; for "exp2_valu" exp2_valu where bit (key mod 32) of abi.EXP2_VALU_KEYS is set."""
    p = torch.exp2(arg)
    if schedule == "trans":
        return p
    valu = ((abi.EXP2_VALU_KEYS >> (keys % 32)) & 1).bool()
    return torch.where(valu, exp2_valu(arg), p)


def sage_attention_model(prepared: SagePrepared, *, return_lse: bool = False, key_tile: int = KEY_TILE,
                         is_causal: bool = False, block_mask: torch.Tensor | None = None,
                         attn_mask: torch.Tensor | None = None, schedule: str = family.DEFAULT_SCHEDULE):
    """What the attention kernel computes from a SagePrepared (docs/numerics.md §Attention), per query row i of
    query head h (K/V head g = h // (H_q / H_kv)) and key tile t of key_tile keys:
      qk_scale = q_scale[blk(i)] * k_scale[g, blk(j)];  s = float32(s_int32) * qk_scale;  s = -inf for j >= S_kv
      and for masked pairs (docs/numerics.md §Masks: is_causal row i sees j <= i + S_kv - S_q; block_mask tiles)
      m_cand = max(m_old, max_t s), m starting at M_INIT = -FLT_MAX;  d = m_old - m_cand;  grow = d < -RESCALE_TAU;
      m_new = grow ? m_cand : m_old;  alpha = exp2(grow ? d : 0) (thresholded rescale: 1 while m does not move);
      t = m_new - P_OFF (finite: a row that saw no key keeps p = 0, l = 0);
      p = exp2(arg) (P_OFF = 8 - 2^-7 folds the fp8 range into the exponent: p <= 2^(8.05 + RESCALE_TAU) < 448),
      arg =
      fma(x, qk_scale, -fma(MAGIC, qk_scale, t)) with x = MAGIC + s_int32 (-inf masked) when every qk_scale of
      the row's tile is in (0, FMA_MAX_QK_SCALE], else arg = s - t
      l = fma(l, alpha, rowsum(p)) (the kernels: per lane half, added in the epilogue);  p8 = fp8(p);
      O = O * alpha + p8 @ float32(v_fp8[g])
      out[i, d] = round_sat((O[i, d] * inv) * v_scale[g, d] [+ v_mean[g, d]]),  inv = 1 / l (0 when
      l = 0), d < head_dim, v_mean added (smooth_v) only where l > 0, round_sat = RNE to out_dtype saturating at
      +-its largest finite value (round_saturating)
    lse = (m + (log2(l) - P_OFF)) * ln2 + lse_corr (l carries the 2^P_OFF of p; smooth_k: prepared.lse_corr, from
      the original q; without lse_corr the kernel's term ln2 * (q_int8 * q_scale) . k_mean, docs/numerics.md §LSE)
    pv_dtype "fp16" (v_t float16): p16 = fp16(p) (RNE), O = O * alpha + p16 @ float32(v_t[g]),
      out = round_sat(O * inv), inv = 1 / l (0 when l = 0) -- no v_scale; lse as above
    attn_mask (docs/numerics.md §Masks "attn_mask"; sage_co.masks.attn_mask_parts): keys it hides are masked like
      the tail (s = -inf); in a 64 x 64 tile where some visible element has a bias b = fp32(mask) * fp32(log2 e) != 0
      (an "additive" tile) every score is s = fma(float(s_int32), qk_scale, b) and the exp2 argument takes the
      exact form arg = s - t; every other tile keeps the unmasked arithmetic
    schedule (sage_co.family.ATTENTION_SCHEDULES): "exp2_valu" computes p of the keys j with bit (j mod 32) of
      abi.EXP2_VALU_KEYS set by exp2_valu(arg) (schedule_exp2) instead of exp2; everything else is the same
    Returns out [B, S_q, H_q, head_dim] (NHD) in out_dtype, and with return_lse also lse fp32 [B, H_q, S_q]
    (natural log, smooth_k-corrected)."""
    validate.check_schedule(schedule)
    schedule = schedule or family.DEFAULT_SCHEDULE
    if isinstance(key_tile, bool) or not isinstance(key_tile, int) or key_tile < 1:
        raise ValueError(f"key_tile: expected a positive int, got {key_tile!r}")
    validate.check_flag("return_lse", return_lse)
    validate.check_flag("is_causal", is_causal)
    sh = validate.check_prepared(prepared)
    validate.check_prepared_padding(prepared)
    S, S_kv, dev = sh.S_q, sh.S_kv, prepared.q_int8.device
    masks.check_block_mask(block_mask, sh.B, sh.H_q, S, S_kv, device=dev)
    masks.check_attn_mask(attn_mask, sh.B, sh.H_q, S, S_kv, device=dev)
    # skipping an inactive tile and masking all its scores are the same arithmetic (m_cand = m: alpha = 1, p = 0)
    visible = masks.element_mask(S, S_kv, is_causal=is_causal, block_mask=block_mask, device=dev)
    bias_e = add_e = None
    if attn_mask is not None:
        vis_m, bias_m = masks.attn_mask_parts(attn_mask, sh.B, sh.H_q, S, S_kv)
        visible = visible & vis_m
        if bias_m is not None:
            _, kind = masks.attn_mask_tiles(vis_m, bias_m, S, S_kv)
            add_t = kind == abi.MASK_KIND_ADDITIVE                                  # [Bm, Hm, nq or 1, nk]
            if add_t.shape[2] > 1:
                add_t = add_t.repeat_interleave(masks.BLOCK_Q, dim=2)[:, :, :S]
            add_e = add_t.repeat_interleave(masks.BLOCK_KV, dim=3)[..., :S_kv]      # per element: its tile's flag
            bias_e = bias_m
    B, H, Skvp = sh.B, sh.H_q, prepared.k_int8.shape[2]
    g = kv_head_index(sh.H_q, sh.H_kv, dev)
    k_int8, k_scale_g = prepared.k_int8[:, g], prepared.k_scale[:, g]
    v_t, v_scale, k_mean = prepared.v_t[:, g], prepared.v_scale[:, g], prepared.k_mean[:, g]
    pv16 = prepared.pv_dtype == "fp16"
    Dp = k_int8.shape[-1]

    # int8 values are exact in fp32 (and in bf16/tf32), and every partial sum of a 128-term int8 dot is an integer
    # below 128 * 127 * 127 < 2**24: an fp32 matmul gives the exact int32 dot whatever its summation order.
    qi = prepared.q_int8[:, :, :S].float()  # [B, H, S_q, D_pad]
    q_scale = prepared.q_scale.repeat_interleave(SCALE_BLOCK, dim=-1)[..., :S, None]  # [B, H, S_q, 1]
    k_scale = k_scale_g.repeat_interleave(SCALE_BLOCK, dim=-1)  # [B, H, S_kv_pad]
    neg_inf = torch.tensor(-math.inf, dtype=torch.float32, device=dev)
    p_off, magic, fma_max = _f32(P_OFF, qi), _f32(MAGIC, qi), _f32(FMA_MAX_QK_SCALE, qi)

    m = torch.full((B, H, S, 1), M_INIT, dtype=torch.float32, device=dev)
    neg_tau = _f32(-RESCALE_TAU, qi)
    l = torch.zeros(B, H, S, 1, dtype=torch.float32, device=dev)
    O = torch.zeros(B, H, S, Dp, dtype=torch.float32, device=dev)
    for j0 in range(0, S_kv, key_tile):
        j1 = min(j0 + key_tile, Skvp)  # keys in [S_kv, S_kv_pad) are masked; keys past S_kv_pad would be too
        s_int = qi @ k_int8[:, :, j0:j1].float().transpose(-1, -2)  # [B, H, S_q, T]
        qk_scale = q_scale * k_scale[:, :, None, j0:j1]
        s = s_int * qk_scale
        valid = torch.arange(j0, j1, device=dev) < S_kv
        vis = torch.nn.functional.pad(visible[..., j0:min(j1, S_kv)], (0, j1 - min(j1, S_kv)), value=False)
        seen = valid & vis
        add_tile = None
        if add_e is not None:   # additive tiles: s = fma(s_int, qk_scale, b) and the exact exp2 form
            jk = min(j1, S_kv)
            add_tile = add_e[..., j0:jk].any(dim=-1, keepdim=True)
            b = torch.nn.functional.pad(bias_e[..., j0:jk], (0, j1 - jk))
            s = torch.where(add_tile, fp32_fma(s_int, qk_scale, b), s)
        s = torch.where(seen, s, neg_inf)
        x = torch.where(seen, s_int + magic, neg_inf)  # the accumulator's float (exact: |s_int| < 2^22)
        m_cand = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        d = m - m_cand
        grow = d < neg_tau   # NaN (a NaN score max) does not grow m, as v_max_num drops it in the kernels
        m_new = torch.where(grow, m_cand, m)
        alpha = torch.exp2(torch.where(grow, d, torch.zeros_like(d)))
        t = m_new - p_off
        one_fma = ((qk_scale > 0) & (qk_scale <= fma_max)).all(dim=-1, keepdim=True)  # NaN/inf/0 scales: exact form
        if add_tile is not None:
            one_fma = one_fma & ~add_tile
        arg = torch.where(one_fma, fp32_fma(x, qk_scale, -fp32_fma(magic, qk_scale, t)), s - t)
        p = schedule_exp2(arg, torch.arange(j0, j1, device=dev), schedule)
        l = fp32_fma(l, alpha, p.sum(dim=-1, keepdim=True))
        pq = p.to(torch.float16).float() if pv16 else to_fp8(p).float()
        O = O * alpha + pq @ v_t[:, :, :, j0:j1].float().transpose(-1, -2)
        m = m_new

    inv = torch.where(l == 0, torch.zeros_like(l), fp32_div(1.0, l))  # l carries 2^P_OFF as O does
    if pv16:
        x = O * inv
    else:
        x = (O * inv) * v_scale[:, :, None, :]
        if prepared.v_mean is not None:  # smooth_v: the mean comes back (exact: a row's weights sum to 1)
            x = x + torch.where(l == 0, torch.zeros_like(l), prepared.v_mean[:, g][:, :, None, :])
    out = round_saturating(x[..., :sh.D], prepared.out_dtype)
    out = out.transpose(1, 2).contiguous()  # [B, S_q, H_q, D]
    if not return_lse:
        return out
    ln2 = _f32(LN2, l)
    lse = (m + (torch.log2(l) - p_off)) * ln2
    if prepared.lse_corr is not None:   # smooth_k: the term from the original q (smooth_k_lse_correction)
        return out, (lse[..., 0] + prepared.lse_corr).contiguous()
    # a SagePrepared without lse_corr (built by hand): the kernel's own term from the dequantized q. q_int8 * q_scale
    # carries softmax_scale * log2(e), so it is ln(2) * sum_d q_f[d] * k_mean[d]; zero when k_mean is zero.
    q_f = qi * q_scale
    corr = (q_f @ k_mean[..., None]) * ln2  # [B, H, S_q, 1]
    lse = lse + corr
    return out, lse[..., 0].contiguous()


def sage_attention(q, k, v, softmax_scale=None, *, layout="NHD", smooth_k=False, q_norm_weight=None,
                   k_norm_weight=None, eps=1e-6, cos=None, sin=None, rope_dim=None, return_lse=False,
                   is_causal=False, block_mask=None, smooth_v=False, pv_dtype="fp8", norm_rope_rounding="once",
                   attn_mask=None):
    """sage_prepare then sage_attention_model: out in q's dtype and layout (and fp32 LSE [B, H_q, S_q])."""
    validate.check_flag("return_lse", return_lse)
    prepared = sage_prepare(q, k, v, softmax_scale, layout=layout, smooth_k=smooth_k, q_norm_weight=q_norm_weight,
                            k_norm_weight=k_norm_weight, eps=eps, cos=cos, sin=sin, rope_dim=rope_dim,
                            smooth_v=smooth_v, pv_dtype=pv_dtype, norm_rope_rounding=norm_rope_rounding)
    res = sage_attention_model(prepared, return_lse=return_lse, is_causal=is_causal, block_mask=block_mask,
                               attn_mask=attn_mask)
    if return_lse:
        return to_layout(res[0], layout), res[1]
    return to_layout(res, layout)


def attention_fp32(q, k, v, softmax_scale=None, *, layout="NHD", return_lse=False, max_chunk_bytes: int = 1 << 30,
                   is_causal=False, block_mask=None, attn_mask=None):
    """Exact softmax attention of the inputs in fp32: fp32 out in q's layout (and natural-log LSE [B, H_q, S_q]).
    is_causal (bottom-right aligned) / block_mask restrict the keys each query sees (docs/numerics.md §Masks); a row
    that sees no key gives zeros and LSE -inf. attn_mask (SDPA's bool or additive mask, sage_co.masks.attn_mask_parts):
    hidden keys are masked, a float mask's values are added to the logits (natural log) in fp32; a value whose
    log2-domain form fp32(x) * fp32(log2 e) is -inf (x = -inf, or below about -2.36e38) hides its key, as in the
    kernels.
    GQA: query head h uses K/V head h // (H_q / H_kv). Queries go in chunks so the fp32 score block stays under
    max_chunk_bytes (S = 32k fits in a few GB)."""
    sh, qn, kn, vn = validate.check_qkv(q, k, v, layout)
    scale = validate.check_softmax_scale(softmax_scale, sh.D)
    validate.check_flag("return_lse", return_lse)
    g = kv_head_index(sh.H_q, sh.H_kv, q.device)
    qf = qn.float().transpose(1, 2)  # [B, H_q, S_q, D]
    kf, vf = (t.float().transpose(1, 2)[:, g] for t in (kn, vn))  # [B, H_q, S_kv, D]
    sc = _f32(scale, qf)
    B, H, S, S_kv = sh.B, sh.H_q, sh.S_q, sh.S_kv
    masks.check_block_mask(block_mask, B, H, S, S_kv, device=q.device)
    visible = masks.element_mask(S, S_kv, is_causal=is_causal, block_mask=block_mask, device=q.device) \
        if (is_causal or block_mask is not None) else None
    masks.check_attn_mask(attn_mask, B, H, S, S_kv, device=q.device)
    add = None
    if attn_mask is not None:
        vis_m, bias_m = masks.attn_mask_parts(attn_mask, B, H, S, S_kv)
        visible = vis_m if visible is None else visible & vis_m
        if bias_m is not None:
            m4 = attn_mask.reshape((1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape)).expand(vis_m.shape)
            add = torch.where(vis_m, m4.float(), torch.zeros((), device=q.device))

    def chunk(x, i0, i1):   # a mask broadcast over the queries (size-1 row dim) serves every chunk
        return x if x.shape[2] == 1 else x[:, :, i0:i1]
    rows = max(1, max_chunk_bytes // (3 * 4 * B * H * S_kv))  # scores, exp and softmax alive at once
    out = torch.empty(B, H, S, sh.D, dtype=torch.float32, device=q.device)
    lse = torch.empty(B, H, S, dtype=torch.float32, device=q.device) if return_lse else None
    for i0 in range(0, S, rows):
        i1 = min(i0 + rows, S)
        logits = (qf[:, :, i0:i1] @ kf.transpose(-1, -2)) * sc
        if add is not None:
            logits = logits + chunk(add, i0, i1)
        if visible is not None:
            logits = logits.masked_fill(~chunk(visible, i0, i1), -math.inf)
        prob = torch.softmax(logits, dim=-1)
        out[:, :, i0:i1] = torch.nan_to_num(prob, nan=0.0) @ vf   # rows that see no key: 0/0 -> 0
        if return_lse:
            lse[:, :, i0:i1] = torch.logsumexp(logits, dim=-1)
    out = to_layout(out.transpose(1, 2), layout)
    return (out, lse) if return_lse else out
