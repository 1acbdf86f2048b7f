"""fp32 inputs and output (issue 30, docs/numerics.md §Inputs): q/k/v in fp32 are prepared from their own values
(the prepare kernels' in_dtype "fp32" symbols) and the attention kernels' out_dtype "fp32" symbols store the fp32
value the bf16/fp16 symbols round. On the emulator with its sanitizer on (the default), small shapes with B, H >= 2,
GQA and lengths that are not multiples of 64.

  prepare   sage_prepare(fp32) == sage_co.reference.sage_prepare(fp32) bit for bit, with and without the fused
            RMSNorm + RoPE (both rounding conventions), smooth_k / smooth_v (given the kernel's k_mean / v_mean: their
            summation order is not part of the spec, as for 16-bit inputs) and pv_dtype fp16; the reference's fp32
            norm / RoPE == the eager fp32 chains (F.rms_norm, fp32 RoPE; the HF chain) bit for bit.
  attention asm == HIP bit for bit (out and lse), and the fp32 output rounded with reference.round_saturating is
            bit for bit the bf16 / fp16 symbol's output on the same prepared structure (the fp32 output is the value
            before that rounding step); vs the arithmetic model the bounds of the 16-bit symbols (the kernels are not
            bitwise the model: tests/kernels/test_attention_asm_equals_hip.py's docstring); vs fp32 SDPA the accuracy
            contract.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import sage_co
from sage_co import reference as R
from sage_co.api import sage_attention_fwd
from sage_co.api import sage_prepare
from attention_cases import MODEL_MAX_ABS, MODEL_REL_L2, rel_l2
from sage_co import accuracy

EPS = 1e-6


def _bits(t: torch.Tensor) -> torch.Tensor:
    if t.dtype == torch.float8_e4m3fn:
        return t.view(torch.uint8)
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def _same(name, a, b):
    assert a.dtype == b.dtype and a.shape == b.shape, (name, a.dtype, b.dtype, a.shape, b.shape)
    diff = _bits(a) != _bits(b)
    assert not bool(diff.any()), f"{name}: {int(diff.sum())} of {diff.numel()} elements differ"


def _tables(S, rope_dim):
    inv_freq = 1.0 / (10000 ** (torch.arange(0, rope_dim, 2).float() / rope_dim))
    angle = torch.arange(S)[:, None].float() * inv_freq
    angle = torch.cat([angle, angle], -1)
    return angle.cos(), angle.sin()


def _inputs(B, S_q, S_kv, H_q, H_kv, D, seed, k_offset=0.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, S_q, H_q, D, generator=g) * 3
    k = torch.randn(B, S_kv, H_kv, D, generator=g) * 3 + k_offset * torch.randn(1, 1, H_kv, D, generator=g)
    v = torch.randn(B, S_kv, H_kv, D, generator=g)
    q[0, 3, 1] = 0   # an all-zero row: ms = 0, r = 1/sqrt(eps)
    wq, wk = ((1 + 0.1 * torch.randn(D, generator=g)) for _ in range(2))
    return q, k, v, wq, wk


# ------------------------------------------------------------------------------------------------------ prepare
# (D, options): D 64 (the D_pad 64 symbols), 80 (D_pad 128 with zero padding: the once sum's tail vectors), 128.
PREPARE_CASES = [
    (64, dict()),
    (128, dict(smooth_k=True)),
    (80, dict(smooth_v=True)),
    (64, dict(pv_dtype="fp16")),
    (128, dict(norm=True, rope_dim=64, smooth_k=True)),
    (80, dict(norm=True, rope_dim=32, norm_rope_rounding="per_op")),
    (64, dict(norm=True, rope_dim=64, norm_rope_rounding="per_op", pv_dtype="fp16")),
    (128, dict(norm=True)),
]
PREPARE_IDS = [f"D{d}-" + "-".join(f"{k}={v}" for k, v in o.items()) for d, o in PREPARE_CASES]


@pytest.mark.parametrize("D,opts", PREPARE_CASES, ids=PREPARE_IDS)
def test_prepare_fp32_bitwise(D, opts):
    B, S_q, S_kv, H_q, H_kv = 2, 45, 70, 4, 2
    q, k, v, wq, wk = _inputs(B, S_q, S_kv, H_q, H_kv, D, seed=D, k_offset=4.0)
    kw = {key: val for key, val in opts.items() if key not in ("norm", "rope_dim")}
    if opts.get("norm"):
        kw.update(q_norm_weight=wq, k_norm_weight=wk, eps=EPS)
    if opts.get("rope_dim"):
        kw["cos"], kw["sin"] = _tables(max(S_q, S_kv), opts["rope_dim"])
    p = sage_prepare(q, k, v, backend="emu", **kw)
    ref = R.sage_prepare(q, k, v, **kw)
    assert p.out_dtype == torch.float32 and p.pv_dtype == kw.get("pv_dtype", "fp8")
    for name in ("q_int8", "q_scale"):
        _same(name, getattr(p, name), getattr(ref, name))
    rounding = kw.get("norm_rope_rounding", "once")
    kn = R.norm_rope(k, kw.get("k_norm_weight"), EPS, kw.get("cos"), kw.get("sin"), opts.get("rope_dim"), rounding)
    if kw.get("smooth_k"):   # k_mean: a sum in another order (not part of the spec); given it, K is bitwise
        torch.testing.assert_close(p.k_mean, ref.k_mean, rtol=1e-5, atol=1e-5)
        assert p.k_mean.abs().max() > 1.0   # the offset reached the mean
    else:
        _same("k_mean", p.k_mean, ref.k_mean)
    k_int8, k_scale = R.quantize_k(kn, p.k_mean)
    _same("k_int8", p.k_int8, k_int8)
    _same("k_scale", p.k_scale, k_scale)
    if kw.get("pv_dtype") == "fp16":
        _same("v_t", p.v_t, R.convert_v_fp16(v))
    else:
        if kw.get("smooth_v"):
            torch.testing.assert_close(p.v_mean, ref.v_mean, rtol=1e-5, atol=1e-6)
        v_t, v_scale = R.quantize_v(v, p.v_mean)
        _same("v_t", p.v_t, v_t)
        _same("v_scale", p.v_scale, v_scale)


def test_prepare_fp32_reads_fp32_not_a_16_bit_copy():
    """fp32 inputs are quantized from their own values: the blocks differ from those of the same inputs rounded to
    bf16 first (the fp32 symbols are reached, not a conversion)."""
    q, k, v, _, _ = _inputs(1, 40, 40, 2, 2, 64, seed=5)
    a = sage_prepare(q, k, v, backend="emu")
    b = sage_prepare(*(t.bfloat16() for t in (q, k, v)), backend="emu")
    assert not torch.equal(a.q_int8, b.q_int8) and not torch.equal(a.v_t.view(torch.uint8), b.v_t.view(torch.uint8))


def test_prepare_fp32_strided_and_hnd():
    """HND views and a sliced (non-contiguous, 16-byte-aligned) fp32 view are read in place, same bits."""
    q, k, v, _, _ = _inputs(2, 33, 50, 2, 2, 64, seed=6)
    base = sage_prepare(q, k, v, backend="emu")
    hnd = sage_prepare(*(t.transpose(1, 2).contiguous() for t in (q, k, v)), layout="HND", backend="emu")
    wide = torch.randn(2, 33, 2, 68)   # row stride 68 fp32 = 272 B (a multiple of 16 B): read in place
    wide[..., :64] = q
    sliced = sage_prepare(wide[..., :64], k, v, backend="emu")
    for name in ("q_int8", "q_scale", "k_int8", "k_scale", "v_t", "v_scale"):
        _same(name, getattr(hnd, name), getattr(base, name))
        _same(name, getattr(sliced, name), getattr(base, name))


@pytest.mark.parametrize("D,rope_dim", [(64, 64), (80, 32), (128, 96)])
def test_reference_fp32_norm_rope_is_the_eager_fp32_chain(D, rope_dim):
    """'Rounding to the input dtype' is the identity for fp32: the once convention == F.rms_norm in fp32 then fp32
    RoPE (diffusers' chain), per_op == the HF chain in fp32 (rsqrt of the spec's tree mean), bit for bit."""
    S = 300
    x, _, _, w, _ = _inputs(1, S, S, 3, 3, D, seed=D + rope_dim)
    cos, sin = _tables(S, rope_dim)
    h = F.rms_norm(x, (D,), w, EPS)
    rot = torch.cat([-h[..., rope_dim // 2:rope_dim], h[..., :rope_dim // 2]], -1)
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    seed = torch.cat([h[..., :rope_dim] * c + rot * s, h[..., rope_dim:]], -1)
    _same("once", R.norm_rope(x, w, EPS, cos, sin, rope_dim, "once"), seed)
    hf = w * (x * torch.rsqrt(R.mean_square(x) + EPS))
    rot = torch.cat([-hf[..., rope_dim // 2:rope_dim], hf[..., :rope_dim // 2]], -1)
    hf = torch.cat([(hf[..., :rope_dim] * c) + (rot * s), hf[..., rope_dim:]], -1)
    _same("per_op", R.norm_rope(x, w, EPS, cos, sin, rope_dim, "per_op"), hf)


# ---------------------------------------------------------------------------------------------------- attention
# (B, S_q, S_kv, H_q, H_kv, D, layout, is_causal, smooth_k, pv_dtype): GQA 2 and 4, causal, cross-attention with
# S_q != S_kv (neither a multiple of 64), both D_pad, NHD and HND, the fp16 P.V path.
ATT_CASES = [
    (2, 77, 45, 4, 2, 64, "NHD", True, False, "fp8"),
    (2, 33, 100, 4, 1, 128, "HND", False, True, "fp8"),
    (2, 70, 70, 2, 2, 80, "NHD", False, False, "fp16"),
    (2, 70, 150, 2, 1, 200, "NHD", True, True, "fp8"),   # D_pad 256
]
ATT_IDS = [f"B{c[0]}-Sq{c[1]}-Skv{c[2]}-H{c[3]}/{c[4]}-D{c[5]}-{c[6]}{'-causal' if c[7] else ''}"
           f"{'-smooth_k' if c[8] else ''}-pv{c[9]}" for c in ATT_CASES]


def _att_case(case):
    B, S_q, S_kv, H_q, H_kv, D, layout, causal, smooth_k, pv = case
    q, k, v, _, _ = _inputs(B, S_q, S_kv, H_q, H_kv, D, seed=S_q + S_kv, k_offset=4.0 if smooth_k else 0.0)
    q = q / 3
    k = k / 3
    if layout == "HND":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    p = R.sage_prepare(q, k, v, layout=layout, smooth_k=smooth_k, pv_dtype=pv)
    return q, k, v, p


@pytest.mark.parametrize("case", ATT_CASES, ids=ATT_IDS)
def test_attention_fp32_out_asm_hip_model(case):
    layout, causal = case[6], case[7]
    q, k, v, p = _att_case(case)
    run = {var: sage_attention_fwd(p, return_lse=True, layout=layout, backend="emu", kernel=var, is_causal=causal)
           for var in ("hip", "asm")}
    out, lse = run["asm"]
    assert out.dtype == torch.float32 and out.is_contiguous()
    _same("out asm vs hip", out, run["hip"][0])
    _same("lse asm vs hip", lse, run["hip"][1])
    # the fp32 output is the value the 16-bit symbols round: rounded here, it is their output bit for bit
    for dt in (torch.bfloat16, torch.float16):
        o16 = sage_attention_fwd(p._replace(out_dtype=dt), layout=layout, backend="emu", kernel="asm",
                                is_causal=causal)
        _same(f"round_saturating(fp32 out) vs the {dt} symbol", R.round_saturating(out, dt), o16)
    model, model_lse = R.sage_attention_model(p, return_lse=True, is_causal=causal)
    model = R.to_layout(model, layout)
    assert model.dtype == torch.float32
    assert rel_l2(out, model) <= MODEL_REL_L2
    assert (out - model).abs().max() <= MODEL_MAX_ABS * model.abs().max()
    fin = torch.isfinite(model_lse)   # causal S_q > S_kv: rows that see no key have lse -inf
    assert torch.equal(lse[~fin], model_lse[~fin])
    assert ((lse - model_lse)[fin].abs() / model_lse[fin].abs().clamp(min=1.0)).max() <= 1e-4
    m = accuracy.metrics(out, R.attention_fp32(q, k, v, layout=layout, is_causal=causal))
    assert accuracy.within_contract(m), m


def test_attention_fp32_nan_is_canonical_and_inf_passes():
    """fp32 output: no saturation (a huge v_scale gives inf, not a clamp) and every NaN is 0x7fc00000 (a -NaN scale
    with payload must not leak its bits), in both kernels and the model."""
    _, _, _, p = _att_case((2, 40, 50, 2, 2, 64, "NHD", False, False, "fp8"))
    v_scale = p.v_scale.clone()
    v_scale[0, 1, 3] = torch.tensor([-0x3FFFF1], dtype=torch.int32).view(torch.float32)   # 0xffc0000f: -NaN
    v_scale[1, 0, 5] = 3e38    # O * inv * 3e38 overflows fp32
    p = p._replace(v_scale=v_scale)
    model = R.sage_attention_model(p)
    for var in ("hip", "asm"):
        out = sage_attention_fwd(p, backend="emu", kernel=var)
        bits = out.view(torch.int32)
        assert (bits[0, :, 1, 3] == 0x7fc00000).all(), var    # query head 1 reads K/V head 1
        assert torch.isinf(out[1, :, 0, 5]).any(), var
        assert torch.equal(torch.isnan(out), torch.isnan(model)) and torch.equal(torch.isinf(out), torch.isinf(model))
        assert (model.view(torch.int32)[torch.isnan(model)] == 0x7fc00000).all()


# ---------------------------------------------------------------------------------------------------------- API
def test_sage_attention_fp32_end_to_end():
    """sage_attention on fp32 q/k/v (the emulator): fp32 out within the accuracy contract of fp32 SDPA; GQA, causal
    cross-attention, B = 2."""
    q, k, v, _, _ = _inputs(2, 50, 90, 4, 2, 64, seed=11)
    q, k = q / 3, k / 3
    out = sage_co.sage_attention(q, k, v, is_causal=True)
    assert out.dtype == torch.float32 and out.shape == q.shape
    ref = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=False,
                                         attn_mask=torch.ones(50, 90, dtype=torch.bool).tril(90 - 50),
                                         enable_gqa=True).transpose(1, 2)
    m = accuracy.metrics(out, ref)
    assert accuracy.within_contract(m), m


@pytest.mark.parametrize("dtypes", [(torch.float32, torch.bfloat16, torch.float32),
                                    (torch.float16, torch.float16, torch.float32)])
def test_mixed_dtypes_are_refused_quoting_them(dtypes):
    q, k, v = (torch.zeros(1, 8, 2, 64, dtype=dt) for dt in dtypes)
    bad = "k" if dtypes[1] != dtypes[0] else "v"
    with pytest.raises(TypeError, match=rf"{bad}: expected the dtype of q \({dtypes[0]}\), got "
                                        rf"{dtypes[1] if bad == 'k' else dtypes[2]}"):
        sage_co.sage_attention(q, k, v)


def test_predictor_kernel_refuses_fp32_naming_q():
    q = torch.randn(1, 64, 2, 64)
    with pytest.raises(TypeError, match=r"q: the predictor kernel takes q/k in \('bf16', 'fp16'\), got torch.float32"):
        sage_co.predict_block_mask(q, q, backend="emu")
