"""Issue 19: smooth_v (the fp8 path) and pv_dtype="fp16" (the f16 P.V WMMA), in the spec's reference, the prepare
kernels and both attention kernels (hip, asm) on the emulator.

Bitwise: prepare's v_t / v_scale against reference.quantize_v given the kernel's v_mean (smooth_v; v_mean itself
within fp32 summation error, docs/numerics.md §smooth_v) and against reference.convert_v_fp16 (pv fp16); the asm
kernel against the HIP kernel. Kernel vs model: the bound of docs/numerics.md §Kernel vs model. Accuracy against
FP32: the issue's goals on the model (tests/kernels/test_pv_fp16_and_smooth_v.py::test_accuracy_goals; the table is in
docs/numerics.md §Accuracy of pv_dtype and smooth_v).
"""
import math

import pytest
import torch

import sage_co
import sage_co.api  # noqa: F401  (registers torch.ops.sage_co.*)
from sage_co import reference as R
from sage_co import registry
from sage_co.api import sage_attention_fwd
from sage_co.api import sage_prepare

from attention_cases import DTYPES, KERNELS   # tests/attention_cases.py: the shared kernel and dtype lists

MODEL_REL_L2 = 1e-3          # docs/numerics.md §Kernel vs model


def inputs(B=1, S_q=70, S_kv=None, H_q=2, H_kv=2, D=128, dtype="bf16", layout="NHD", v_offset=3.0, seed=0):
    """q, k, v in the layout; V carries a per-channel offset (what smooth_v removes)."""
    S_kv = S_kv or S_q
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, S_q, H_q, D, generator=g)
    k = torch.randn(B, S_kv, H_kv, D, generator=g)
    v = torch.randn(B, S_kv, H_kv, D, generator=g) + v_offset * torch.randn(1, 1, H_kv, D, generator=g)
    q, k, v = (t.to(DTYPES[dtype]) for t in (q, k, v))
    if layout == "HND":
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    return q, k, v


def rel_l2(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm()).item()


# ------------------------------------------------------------------------------------------------- reference
def test_smooth_v_amax_is_reached_at_max_or_min():
    """The prepare kernel takes max |v - v_mean| from max v and min v (fp32 subtraction is monotone): the same
    value as the spec's direct maximum, on data with ties, signed zeros and a mean that is not representable."""
    g = torch.Generator().manual_seed(5)
    v = (torch.randn(1, 300, 2, 64, generator=g) * 3).round().to(torch.bfloat16)   # many ties and zeros
    v[0, :5, 0, 0] = -0.0
    vf = v.float()
    mean = R.v_channel_mean(v)
    direct = (vf - mean[:, None]).abs().amax(dim=1)
    via = torch.maximum((vf.amax(1) - mean).abs(), (vf.amin(1) - mean).abs())
    assert torch.equal(direct, via)


def test_smooth_v_reference_adds_the_mean_back_exactly():
    """A V that is one constant per channel: with smooth_v the fp8 part is all zero and the output is the mean
    (rounded to bf16); without, the fp8 rounding of P shows."""
    q, k, _ = inputs(S_q=64, D=64)
    v = (torch.linspace(-5, 5, 64)[None, None, None, :].expand(1, 64, 2, 64)).to(torch.bfloat16).contiguous()
    p = R.sage_prepare(q, k, v, smooth_v=True)
    assert not p.v_t.view(torch.uint8).any() and not p.v_scale.any()
    out = R.sage_attention_model(p)
    assert torch.equal(out, R.round_saturating(p.v_mean[:, None, :, :64].expand(1, 64, 2, 64), torch.bfloat16))


def test_pv_fp16_reference_conversion():
    """bf16 V -> fp16 is RNE with overflow to inf and fp16 subnormals kept (torch's .to(float16) of float32(v));
    fp16 V passes through."""
    v = torch.tensor([1.0, 65504.0, 65520.0, 1e5, -3e-8, 6e-8, 1 + 2 ** -8], dtype=torch.float32)
    vb = v.to(torch.bfloat16).reshape(1, 7, 1, 1).expand(1, 7, 1, 16).contiguous()
    out = R.convert_v_fp16(vb)
    assert out.shape == (1, 1, 64, 64) and out.dtype == torch.float16
    assert torch.equal(out[0, 0, 0, :7], vb[0, :, 0, 0].float().to(torch.float16))
    assert math.isinf(out[0, 0, 0, 3].item()) and out[0, 0, 16:].abs().sum() == 0 and out[..., 7:].abs().sum() == 0
    vh = torch.randn(1, 9, 1, 16).to(torch.float16)
    assert torch.equal(R.convert_v_fp16(vh)[0, 0, :16, :9], vh[0, :, 0, :].T)


# ------------------------------------------------------------------------------------------------- prepare
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("D", [64, 80, 128])
def test_prepare_smooth_v_and_pv16_bitwise(dtype, D):
    q, k, v = inputs(S_q=70, S_kv=100, H_q=4, H_kv=2, D=D, dtype=dtype)
    sm = sage_prepare(q, k, v, smooth_v=True, smooth_k=True)
    assert (sm.v_mean - R.v_channel_mean(v)).abs().max() <= 1e-5      # summation order is free
    v_t, v_scale = R.quantize_v(v, sm.v_mean)                          # given v_mean: bitwise
    assert torch.equal(sm.v_t.view(torch.uint8), v_t.view(torch.uint8)) and torch.equal(sm.v_scale, v_scale)
    ref = R.sage_prepare(q, k, v, smooth_v=True, smooth_k=True)
    assert torch.equal(sm.q_int8, ref.q_int8) and torch.equal(sm.q_scale, ref.q_scale)
    h = sage_prepare(q, k, v, pv_dtype="fp16")
    assert h.v_mean is None and h.pv_dtype == "fp16" and not h.v_scale.any()
    assert torch.equal(h.v_t.view(torch.int16), R.convert_v_fp16(v).view(torch.int16))
    plain = sage_prepare(q, k, v)
    assert plain.v_mean is None and torch.equal(plain.v_t.view(torch.uint8), R.quantize_v(v)[0].view(torch.uint8))


def test_prepare_pv16_hnd_strided_view():
    q, k, v = inputs(S_q=33, H_q=2, H_kv=1, D=64, dtype="fp16", layout="HND")
    p = sage_prepare(q, k, v, pv_dtype="fp16", layout="HND")
    assert torch.equal(p.v_t.view(torch.int16), R.convert_v_fp16(v.transpose(1, 2)).view(torch.int16))


# ------------------------------------------------------------------------------------------------- attention
CASES = [  # (S_q, S_kv, H_q, H_kv, D, dtype, layout, causal)
    (70, 70, 2, 2, 128, "bf16", "NHD", False),
    (70, 150, 4, 2, 64, "fp16", "HND", False),
    (130, 100, 2, 1, 96, "bf16", "NHD", True),     # S_q > S_kv causal: rows that see no key
    (64, 128, 2, 2, 128, "fp16", "NHD", True),
    (40, 40, 3, 1, 32, "bf16", "HND", False),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}x{c[1]}-h{c[2]}/{c[3]}-d{c[4]}-{c[5]}-{c[6]}"
                                                + ("-causal" if c[7] else "") for c in CASES])
@pytest.mark.parametrize("kw", [dict(smooth_v=True), dict(pv_dtype="fp16")], ids=["smooth_v", "pv16"])
def test_kernels_match_model_and_each_other(case, kw):
    S_q, S_kv, H_q, H_kv, D, dtype, layout, causal = case
    q, k, v = inputs(S_q=S_q, S_kv=S_kv, H_q=H_q, H_kv=H_kv, D=D, dtype=dtype, layout=layout)
    p = sage_prepare(q, k, v, layout=layout, smooth_k=True, **kw)
    model, model_lse = R.sage_attention_model(p, return_lse=True, is_causal=causal)
    model = R.to_layout(model, layout)
    res = {kern: sage_attention_fwd(p, kernel=kern, layout=layout, return_lse=True, is_causal=causal)
           for kern in KERNELS}
    for kern, (out, lse) in res.items():
        assert rel_l2(out, model) <= MODEL_REL_L2, kern
        assert (out.float() - model.float()).abs().max() <= 2 ** -7 * model.float().abs().max(), kern
        assert (out != model).float().mean() <= 0.01, kern
        fin = torch.isfinite(model_lse)
        assert torch.equal(fin, torch.isfinite(lse))
        assert ((lse - model_lse)[fin].abs() <= 1e-4 * model_lse[fin].abs().clamp(min=1)).all()
    (oh, lh), (oa, la) = res["hip"], res["asm"]
    assert torch.equal(oh.view(torch.int16), oa.view(torch.int16)) and torch.equal(lh, la)
    if causal and S_q > S_kv:   # rows i < S_q - S_kv see no key: zeros (v_mean not added) and lse -inf
        blind = S_q - S_kv
        rows = oh[:, :blind] if layout == "NHD" else oh[:, :, :blind]
        assert not rows.float().abs().sum() and (lh[..., :blind] == -math.inf).all()


@pytest.mark.parametrize("kw", [dict(smooth_v=True), dict(pv_dtype="fp16")], ids=["smooth_v", "pv16"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_block_mask_rows_without_keys_and_varlen(kw, kernel):
    q, k, v = inputs(S_q=130, S_kv=130, H_q=2, H_kv=2, D=64)
    bm = torch.ones(1, 2, 3, 3, dtype=torch.bool)
    bm[0, 1, 1] = False                                      # query tile 1 of head 1 sees nothing
    out, lse = sage_co.sage_attention(q, k, v, block_mask=bm, return_lse=True, kernel=kernel, **kw)
    assert not out[0, 64:128, 1].float().abs().sum() and (lse[0, 1, 64:128] == -math.inf).all()
    ref = R.sage_attention(q, k, v, block_mask=bm, **kw)
    assert rel_l2(out, ref) <= MODEL_REL_L2
    cu = torch.tensor([0, 50, 130], dtype=torch.int32)
    packed = sage_co.sage_attention_varlen(q[0], k[0], v[0], cu, cu, 80, 80, kernel=kernel, **kw)
    for a, b in ((0, 50), (50, 130)):
        one = sage_co.sage_attention(q[:, a:b], k[:, a:b], v[:, a:b], kernel=kernel, **kw)
        assert torch.equal(packed[a:b], one[0])


def test_pv16_symbols_are_shipped_for_both_kernels():
    for kernel in KERNELS:
        for D in (64, 128):
            for out in ("bf16", "fp16"):
                k = registry.find("sage_attention_fwd", kernel, head_dim=D, out_dtype=out, pv_dtype="fp16")
                assert k.symbol.endswith("_pv16")
    assert registry.find("sage_attention_fwd", head_dim=128, out_dtype="bf16", pv_dtype="fp16").kernel == "asm"


# ------------------------------------------------------------------------------------------------- api
@pytest.mark.parametrize("kw, exc, match", [
    (dict(pv_dtype="int4"), ValueError, r"^pv_dtype: expected one of \('fp8', 'fp16'\)"),
    (dict(pv_dtype=16), TypeError, "^pv_dtype"),
    (dict(smooth_v="yes"), TypeError, "^smooth_v"),
    (dict(smooth_v=True, pv_dtype="fp16"), ValueError, "^smooth_v: only the fp8"),
])
@pytest.mark.parametrize("entry", ["sage_attention", "sage_prepare", "reference"])
def test_validation_before_any_kernel(no_kernels, kw, exc, match, entry):
    q, k, v = inputs(S_q=8, D=64)
    fn = {"sage_attention": sage_co.sage_attention, "sage_prepare": sage_co.sage_prepare,
          "reference": R.sage_prepare}[entry]
    with pytest.raises(exc, match=match):
        fn(q, k, v, **kw)


NEW_OPTIONS = [(True, "fp8"), (False, "fp16")]   # (smooth_v, pv_dtype): the option-dependent paths of the fakes


@pytest.mark.parametrize("smooth_v, pv", NEW_OPTIONS, ids=["smooth_v", "pv16"])
def test_opcheck_with_the_new_options(smooth_v, pv):
    """opcheck (schema, autograd registration, fake vs real, aot_dispatch_dynamic) of the three ops with each new
    option: the fakes branch on the options (v_t's bytes per element, v_mean), not on the kernel, so each option is
    checked once per op; the fwd op runs the hip kernel and the fused op the asm one, so both kernels' real outputs
    meet the fakes under each option (test_compile_with_the_new_options runs each kernel compiled and eager)."""
    q, k, v = inputs(S_q=33, H_q=1, H_kv=1, D=128)
    torch.library.opcheck(torch.ops.sage_co.sage_prepare.default,
                          (q, k, v, 0.088, "NHD", False, None, None, 1e-6, None, None, 0, "emu", smooth_v, pv))
    p = sage_co.sage_prepare(q, k, v, smooth_v=smooth_v, pv_dtype=pv)
    torch.library.opcheck(torch.ops.sage_co.sage_attention_fwd.default,
                          (*p[:5], p.v_t.view(torch.uint8), p.v_scale, p.seq_len_q, p.seq_len_kv, p.head_dim,
                           p.out_dtype, "NHD", True, "emu", "hip", False, None, p.v_mean, pv))
    torch.library.opcheck(torch.ops.sage_co.sage_attention.default,
                          (q, k, v, 0.088, "NHD", False, None, None, 1e-6, None, None, 0, False, "emu", "asm",
                           False, None, smooth_v, pv))


@pytest.mark.parametrize("kernel", KERNELS)
def test_compile_with_the_new_options(kernel):
    q, k, v = inputs(S_q=33, H_q=1, H_kv=1, D=128)
    for smooth_v, pv in NEW_OPTIONS:
        p = sage_co.sage_prepare(q, k, v, smooth_v=smooth_v, pv_dtype=pv)

        def f(q, k, v, smooth_v=smooth_v, pv=pv):
            return sage_co.sage_attention(q, k, v, kernel=kernel, smooth_v=smooth_v, pv_dtype=pv) * 2

        eager = f(q, k, v)
        assert torch.equal(eager, torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v))
        assert torch.equal(sage_co.sage_attention_fwd(p, kernel=kernel), eager / 2)


def test_sageattn_spellings():
    q, k, v = inputs(S_q=40, H_q=2, H_kv=2, D=64, layout="HND")
    base = sage_co.sage_attention(q, k, v, layout="HND", smooth_k=True, smooth_v=True)
    assert torch.equal(sage_co.sageattn(q, k, v, smooth_v=True), base)
    h = sage_co.sage_attention(q, k, v, layout="HND", smooth_k=True, pv_dtype="fp16")
    assert torch.equal(sage_co.sageattn(q, k, v, pv_dtype="fp16"), h)
    assert torch.equal(sage_co.sageattn(q, k, v, value_dtype="fp16", pv_accum_dtype="fp32"), h)


# ------------------------------------------------------------------------------------------------- accuracy
def accuracy_inputs(dist, S=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, S, 2, 128, generator=g) for _ in range(3))
    if dist == "sharp_q":
        q = q * 6
    if dist == "v_offset":
        v = v + 4 * torch.randn(1, 1, 2, 128, generator=g)
    return tuple(t.to(torch.bfloat16) for t in (q, k, v))


def test_accuracy_goals():
    """Issue 19's goals against FP32 (the model; the kernels equal it within MODEL_REL_L2): pv_dtype fp16 rel L2
    <= 0.032 on randn and <= 0.035 on sharp Q; smooth_v on offset V within 0.002 of the fp8 randn figure (rel L2
    is measured against ||ref||, which the offset dominates: see docs/numerics.md for both readings)."""
    err = {}
    for dist in ("randn", "sharp_q", "v_offset"):
        q, k, v = accuracy_inputs(dist)
        ref = R.attention_fp32(q, k, v)
        for name, kw in (("fp8", {}), ("fp8+smooth_v", dict(smooth_v=True)), ("fp16", dict(pv_dtype="fp16"))):
            err[dist, name] = rel_l2(R.sage_attention(q, k, v, **kw), ref)
    assert err["randn", "fp16"] <= 0.032 and err["sharp_q", "fp16"] <= 0.035
    assert err["v_offset", "fp8+smooth_v"] <= err["randn", "fp8"] + 0.002
    assert err["v_offset", "fp8+smooth_v"] < err["v_offset", "fp8"]          # smoothing helps on offsets
    assert err["randn", "fp16"] < err["randn", "fp8"]                          # fp16 P.V is the more accurate


def test_selftest_covers_smooth_v_and_pv16(tmp_path):
    """sage-co selftest's emulator half runs the new configs (its GPU half compares the GPU with these bits)."""
    from sage_co import selftest
    assert {"smooth_v", "pv_fp16"} <= set(selftest.PREPARE_CONFIGS)
    report = selftest.run(tmp_path, small=((1, 33, 1),), configs=("smooth_v", "pv_fp16"), large=(), timing=(),
                          echo=lambda *a: None)
    names = [c.name for c in report.checks]
    assert any("smooth_v: prepare == reference" in n for n in names) and any("pv_fp16: attention[asm]" in n
                                                                                 for n in names)
    assert not report.failed
