"""The numerics spec (docs/numerics.md) in plain torch: every sage-co kernel is checked against this module.

Runs on CPU and on any torch device, bit-for-bit the same wherever the spec says bitwise: every rounding step is an
explicit elementwise IEEE fp32 op (no scalar-divisor shortcuts, no library reductions where order matters).
Knows nothing of kernels or backends.
"""
from __future__ import annotations

import math

import torch

from . import validate
from .prepared import HEAD_DIM, SCALE_BLOCK, SagePrepared, s_pad

LOG2E = 1.4426950408889634  # log2(e) as the nearest double (M_LOG2E)
LN2 = 0.6931471805599453  # ln(2) as the nearest double (M_LN2)
INT8_MAX = 127.0
FP8_MAX = 448.0  # OCP e4m3fn largest finite (docs/rdna4.md §FP8: 0x7E)
FP8_NAN = 0x7F  # the one NaN encoding the spec produces (docs/numerics.md §Non-finite)
KEY_TILE = 64  # keys per online-softmax step in the HIP kernel
BF16_MAX = torch.finfo(torch.bfloat16).max  # 0x7f7f: the attention output saturates here (docs/numerics.md §Finite range)


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


def fp32_sqrt(x: torch.Tensor) -> torch.Tensor:
    """IEEE (correctly rounded) fp32 sqrt. torch's CPU torch.sqrt is not correctly rounded for every fp32 input
    (sqrt(0x3e4b9bab) gives 0x3ee44e5b; IEEE is 0x3ee44e5c), so take the sqrt in float64 and round once:
    53 >= 2 * 24 + 2 makes that double rounding innocuous for sqrt."""
    return torch.sqrt(x.double()).float()


def q_multiplier(softmax_scale: float | None = None) -> float:
    """c = float32(softmax_scale * log2(e)): the product taken in double, rounded once to fp32 (RNE)."""
    scale = validate.check_softmax_scale(softmax_scale)
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


def quantize_int8_blocks(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x fp32 [B, S, H, 128] -> (int8 [B, H, S_pad, 128], scale fp32 [B, H, S_pad/32]), one scale per 32 tokens.
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
    """x = float32(q) * c, c = q_multiplier(softmax_scale); then quantize_int8_blocks."""
    c = _f32(q_multiplier(softmax_scale), q)
    return quantize_int8_blocks(q.float() * c)


def k_channel_mean(k: torch.Tensor) -> torch.Tensor:
    """k_mean [B, H, 128] fp32: mean over the S tokens of float32(k). Summation order is not part of the spec."""
    return k.float().mean(dim=1)


def quantize_k(k: torch.Tensor, k_mean: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """x = float32(k) - k_mean (k_mean None: x = float32(k)); then quantize_int8_blocks. Given k_mean, bitwise."""
    x = k.float()
    if k_mean is not None:
        x = x - k_mean[:, None, :, :]
    return quantize_int8_blocks(x)


def quantize_v(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per (b, h, channel) over the S tokens: v_scale = amax / 448, inv = 448 / amax,
    v_fp8 = fp8(clamp(float32(v) * inv, -448, 448)); returns (v_fp8 [B, H, 128, S_pad], v_scale [B, H, 128])."""
    B, S, H, D = v.shape
    vf = v.float()
    amax = vf.abs().amax(dim=1)  # [B, H, 128], propagates NaN
    v_scale, inv = _amax_inv(amax, FP8_MAX)
    y = (vf * inv[:, None]).clamp(-FP8_MAX, FP8_MAX)  # clamp keeps NaN
    v_fp8 = torch.zeros(B, H, D, s_pad(S), dtype=torch.uint8, device=v.device).view(torch.float8_e4m3fn)
    v_fp8[..., :S] = to_fp8(y).permute(0, 2, 3, 1)
    return v_fp8, v_scale


def bf16_saturating(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> bf16 RNE with |x| beyond the largest finite bf16 (and +-inf) giving +-BF16_MAX; NaN stays NaN.
    The attention output of a V near bf16 max can exceed it by the fp8 rounding of p (docs/numerics.md §Finite
    range), so the spec saturates instead of rounding to inf."""
    return x.clamp(-BF16_MAX, BF16_MAX).to(torch.bfloat16)  # clamp keeps NaN


def dequantize_int8_blocks(x_int8: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """int8 [B, H, S_pad, 128] * scale per 32-row block -> fp32 [B, H, S_pad, 128]."""
    return x_int8.float() * scale.repeat_interleave(SCALE_BLOCK, dim=-1)[..., None]


def dequantize_v(v_fp8: torch.Tensor, v_scale: torch.Tensor) -> torch.Tensor:
    """fp8 [B, H, 128, S_pad] * v_scale [B, H, 128] -> fp32 [B, H, 128, S_pad]."""
    return v_fp8.float() * v_scale[..., None]


# ---------------------------------------------------------------------------------------------- RMSNorm + RoPE
def mean_square(xf: torch.Tensor) -> torch.Tensor:
    """ms = mean of xf*xf over the last dim (128), keepdim, by the spec's halving tree: t = xf*xf, then
    t[i] = t[i] + t[i + w] for w = 64, 32, 16, 8, 4, 2, 1 (each level one elementwise fp32 add), ms = t[0] / 128.
    Elementwise ops only, so the bits are the same on every device."""
    t = xf * xf
    w = HEAD_DIM // 2
    while w >= 1:
        t = t[..., :w] + t[..., w:2 * w]
        w //= 2
    return fp32_div(t, float(HEAD_DIM))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """bf16 -> bf16: y = bf16(xf * r), r = 1 / sqrt(ms + eps); then y = bf16(y * weight) (eager Qwen-style order)."""
    xf = x.float()
    r = fp32_div(1.0, fp32_sqrt(mean_square(xf) + _f32(eps, xf)))
    y = (xf * r).to(torch.bfloat16)
    return (y.float() * weight.float()).to(torch.bfloat16)


def rope(y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rope_dim: int) -> torch.Tensor:
    """Rotate-half RoPE on the first rope_dim channels of y [B, S, H, 128] bf16, cos/sin bf16 [S, rope_dim]:
    out = bf16(bf16(y*cos) + bf16(rotate_half(y)*sin)), rotate_half(y) = cat(-y2, y1); later channels pass."""
    half = rope_dim // 2
    yr = y[..., :rope_dim].float()
    rot = torch.cat([-yr[..., half:], yr[..., :half]], dim=-1)
    c = cos.float()[None, :, None, :]
    s = sin.float()[None, :, None, :]
    a = (yr * c).to(torch.bfloat16).float()
    b = (rot * s).to(torch.bfloat16).float()
    out = (a + b).to(torch.bfloat16)
    return torch.cat([out, y[..., rope_dim:]], dim=-1) if rope_dim < HEAD_DIM else out


def norm_rope(x: torch.Tensor, weight: torch.Tensor | None, eps: float, cos: torch.Tensor | None,
              sin: torch.Tensor | None, rope_dim: int | None) -> torch.Tensor:
    """The optional fused pre-quantization step for Q or K: RMSNorm (if weight) then RoPE (if cos)."""
    if weight is not None:
        x = rms_norm(x, weight, eps)
    if cos is not None:
        x = rope(x, cos, sin, rope_dim)
    return x


# ------------------------------------------------------------------------------------------------------- prepare
def sage_prepare(q, k, v, softmax_scale=None, *, smooth_k=False, q_norm_weight=None, k_norm_weight=None,
                 eps=1e-6, cos=None, sin=None, rope_dim=None) -> SagePrepared:
    """q, k, v bf16 [B, S, H, 128] -> SagePrepared (docs/numerics.md §Prepare)."""
    chk = validate.check_prepare_args(q, k, v, softmax_scale, smooth_k=smooth_k, q_norm_weight=q_norm_weight,
                                      k_norm_weight=k_norm_weight, eps=eps, cos=cos, sin=sin, rope_dim=rope_dim)
    q = norm_rope(q, q_norm_weight, eps, cos, sin, chk.rope_dim)
    k = norm_rope(k, k_norm_weight, eps, cos, sin, chk.rope_dim)
    q_int8, q_scale = quantize_q(q, chk.softmax_scale)
    if smooth_k:
        k_mean = k_channel_mean(k)
    else:
        k_mean = torch.zeros(chk.B, chk.H, HEAD_DIM, dtype=torch.float32, device=q.device)
    k_int8, k_scale = quantize_k(k, k_mean)
    v_fp8, v_scale = quantize_v(v)
    return SagePrepared(q_int8, q_scale, k_int8, k_scale, k_mean, v_fp8, v_scale, chk.S)


# ----------------------------------------------------------------------------------------------------- attention
def sage_attention_model(prepared: SagePrepared, *, return_lse: bool = False, key_tile: int = KEY_TILE):
    """What the attention kernel computes from a SagePrepared (docs/numerics.md §Attention), per query row i
    and key tile t of key_tile keys:
      qk_scale = q_scale[blk(i)] * k_scale[blk(j)];  s = float32(s_int32) * qk_scale;  s = -inf for j >= S
      m_new = max(m_old, max_t s);  alpha = exp2(m_old - m_new) (0 when m_old = -inf);  p = exp2(s - m_new)
      l = l * alpha + rowsum(p);  p8 = fp8(p * 448);  O = O * alpha + p8 @ float32(v_fp8)
      out[i, d] = bf16_sat((O[i, d] * inv) * v_scale[d]),  inv = 1 / (448 * l)  (saturating at +-bf16 max)
    Returns out bf16 [B, S, H, 128], and with return_lse also lse fp32 [B, H, S] (natural log, smooth_k-corrected).
    """
    if isinstance(key_tile, bool) or not isinstance(key_tile, int) or key_tile < 1:
        raise ValueError(f"key_tile: expected a positive int, got {key_tile!r}")
    validate.check_flag("return_lse", return_lse)
    if not isinstance(prepared, SagePrepared):
        raise TypeError(f"prepared: expected a SagePrepared, got {type(prepared).__name__}")
    B, H, Sp, D = prepared.q_int8.shape
    S = prepared.seq_len
    validate.check_prepared(prepared, B, S, H)
    validate.check_prepared_padding(prepared)
    dev = prepared.q_int8.device

    # int8 values are exact in fp32 (and in bf16/tf32), and every partial sum of a 128-term int8 dot is an integer
    # below 128 * 127 * 127 < 2**24: an fp32 matmul gives the exact int32 dot whatever its summation order.
    qi = prepared.q_int8[:, :, :S].float()  # [B, H, S, 128]
    q_scale = prepared.q_scale.repeat_interleave(SCALE_BLOCK, dim=-1)[..., :S, None]  # [B, H, S, 1]
    k_scale = prepared.k_scale.repeat_interleave(SCALE_BLOCK, dim=-1)  # [B, H, S_pad]
    neg_inf = torch.tensor(-math.inf, dtype=torch.float32, device=dev)
    c448 = _f32(FP8_MAX, qi)

    m = torch.full((B, H, S, 1), -math.inf, dtype=torch.float32, device=dev)
    l = torch.zeros(B, H, S, 1, dtype=torch.float32, device=dev)
    O = torch.zeros(B, H, S, D, dtype=torch.float32, device=dev)
    for j0 in range(0, S, key_tile):
        j1 = min(j0 + key_tile, Sp)  # keys in [S, S_pad) are masked; keys past S_pad would be masked too
        s_int = qi @ prepared.k_int8[:, :, j0:j1].float().transpose(-1, -2)  # [B, H, S, T]
        qk_scale = q_scale * k_scale[:, :, None, j0:j1]
        s = s_int * qk_scale
        valid = torch.arange(j0, j1, device=dev) < S
        s = torch.where(valid, s, neg_inf)
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        alpha = torch.where(m == -math.inf, torch.zeros_like(m), torch.exp2(m - m_new))
        p = torch.exp2(s - m_new)
        l = l * alpha + p.sum(dim=-1, keepdim=True)
        p8 = to_fp8(p * c448).float()
        O = O * alpha + p8 @ prepared.v_fp8[:, :, :, j0:j1].float().transpose(-1, -2)
        m = m_new

    inv = fp32_div(1.0, l * c448)
    out = bf16_saturating((O * inv) * prepared.v_scale[:, :, None, :])
    out = out.transpose(1, 2).contiguous()  # [B, S, H, 128]
    if not return_lse:
        return out
    ln2 = _f32(LN2, l)
    lse = (m + torch.log2(l)) * ln2
    # smooth_k: the kernel's logits lost q . k_mean; q_int8 * q_scale carries softmax_scale * log2(e), so the
    # natural-log correction is ln(2) * sum_d q_f[d] * k_mean[d]. Zero when k_mean is zero (smooth_k off).
    q_f = qi * q_scale
    corr = (q_f @ prepared.k_mean[..., None]) * ln2  # [B, H, S, 1]
    lse = lse + corr
    return out, lse[..., 0].contiguous()


def sage_attention(q, k, v, softmax_scale=None, *, smooth_k=False, q_norm_weight=None, k_norm_weight=None,
                   eps=1e-6, cos=None, sin=None, rope_dim=None, return_lse=False):
    """sage_prepare then sage_attention_model: bf16 [B, S, H, 128] out (and fp32 [B, H, S] LSE)."""
    validate.check_flag("return_lse", return_lse)
    prepared = sage_prepare(q, k, v, softmax_scale, smooth_k=smooth_k, q_norm_weight=q_norm_weight,
                            k_norm_weight=k_norm_weight, eps=eps, cos=cos, sin=sin, rope_dim=rope_dim)
    return sage_attention_model(prepared, return_lse=return_lse)


def attention_fp32(q, k, v, softmax_scale=None, *, return_lse=False, max_chunk_bytes: int = 1 << 30):
    """Exact softmax attention of the bf16 inputs in fp32: fp32 [B, S, H, 128] (and natural-log LSE [B, H, S]).
    Queries go in chunks so the fp32 score block stays under max_chunk_bytes (S = 32k fits in a few GB)."""
    B, S, H = validate.check_qkv(q, k, v)
    scale = validate.check_softmax_scale(softmax_scale)
    validate.check_flag("return_lse", return_lse)
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))  # [B, H, S, 128]
    sc = _f32(scale, qf)
    rows = max(1, max_chunk_bytes // (3 * 4 * B * H * S))  # scores, exp and softmax alive at once
    out = torch.empty(B, H, S, HEAD_DIM, dtype=torch.float32, device=q.device)
    lse = torch.empty(B, H, S, dtype=torch.float32, device=q.device) if return_lse else None
    for i0 in range(0, S, rows):
        i1 = min(i0 + rows, S)
        logits = (qf[:, :, i0:i1] @ kf.transpose(-1, -2)) * sc
        out[:, :, i0:i1] = torch.softmax(logits, dim=-1) @ vf
        if return_lse:
            lse[:, :, i0:i1] = torch.logsumexp(logits, dim=-1)
    out = out.transpose(1, 2).contiguous()
    return (out, lse) if return_lse else out
