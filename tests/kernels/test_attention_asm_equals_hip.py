"""The hand-scheduled attention kernel (asm_src/gen_sage_attention_asm.py -> gfx1201_sage_attention_asm.co) on the
emulator, through sage_co.ops.sage_attention_fwd(kernel="asm"), every variant (head dim 64/128 x bf16/fp16).

Bitwise vs the HIP kernel: the asm kernel keeps the HIP kernel's per-row operation order everywhere
(docs/numerics.md §Attention arithmetic model: the row max on the accumulators' floats MAGIC + s_int, scaled once
-- exact, so its evaluation order is free; the thresholded m (RESCALE_TAU) and exp2(fma(x, qk, -fma(MAGIC, qk, m -
P_OFF))) with v_exp_f32, or the exact form's exp2(float(s_int) * qk - t) on the same waves; the row sum in two
chains (even, odd keys) per lane half, l_h = fma(l_h, alpha, sum), the halves added in the epilogue; fp8(p); each O^T accumulator takes the key chunks 0, 1, 2, 3 in
order with the same WMMA operands; the same epilogue and LSE sums). Only the schedule differs, so out and lse must be equal bit for bit on every shape
(no tile takes a deliberately different path).

Against the arithmetic model (sage_co.reference.sage_attention_model) the bound is the HIP kernel's: relative L2
<= 1e-3 (exp2 within 1 ulp, the row-sum and WMMA accumulation orders differ from torch's), LSE within
1e-4 * max(1, |lse|). Against the FP32 reference: the accuracy contract of sage_co.accuracy.

The emulator runs with its sanitizer on (the default): missing s_wait_* before a register is read, WMMA hazards,
out-of-bounds global/LDS accesses and barrier misuse fail the run. The tests every attention kernel must pass
(zero Q/K, repeat runs, padding, LSE, LDS races, ...) run against both kernels in
tests/kernels/test_attention_vs_reference.py.
"""
from __future__ import annotations

import pytest
import torch

from sage_co import abi, reference, registry
from sage_co.launch import get_backend
from sage_co.api import sage_attention_fwd
from attention_cases import (CASES, IDS, LSE_RTOL, MODEL_MAX_ABS, MODEL_MAX_DIFFERENT, MODEL_REL_L2,
                             check_against_fp32, check_against_model, kernel_case, make_inputs)

# every variant (head_dim x out_dtype) with S_q == S_kv and the key-loop shapes of the x2-unrolled loop: one tile,
# tails of a 64-key tile and of a 32-token scale block, both peeled last-tile parities
SQUARE = [(1, 1, 1, 1, 1, 128, "bf16", "NHD", False, "randn"),
          (2, 17, 17, 3, 3, 128, "fp16", "NHD", False, "randn"),
          (1, 100, 100, 2, 2, 64, "bf16", "HND", True, "k_offset"),
          (2, 257, 257, 1, 1, 64, "fp16", "NHD", False, "randn"),
          (1, 200, 200, 2, 1, 128, "bf16", "NHD", True, "k_offset")]
SQUARE_IDS = [f"S{c[1]}-H{c[3]}/{c[4]}-D{c[5]}-{c[6]}" for c in SQUARE]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


def _check_bitwise(case):
    *_, out, lse = kernel_case("asm", case)
    *_, hout, hlse = kernel_case("hip", case)
    diff = (_bits(out) != _bits(hout)).sum().item()
    assert diff == 0, f"{diff} of {out.numel()} outputs differ from the HIP kernel"
    assert torch.equal(_bits(lse), _bits(hlse)), (lse - hlse).abs().max().item()


def test_asm_is_the_default_kernel():
    for D in abi.ATTENTION_ASM_HEAD_DIMS:
        for dtype in abi.OUT_DTYPES:
            k = registry.find("sage_attention_fwd", head_dim=D, out_dtype=dtype, pv_dtype="fp8")
            assert k.kernel == "asm" and k.symbol == f"gfx1201_sage_attention_fwd_asm_d{D}_{dtype}"
            assert registry.find("sage_attention_fwd", "hip", head_dim=D, out_dtype=dtype, pv_dtype="fp8").symbol == \
                f"gfx1201_sage_attention_fwd_d{D}_{dtype}"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_matches_hip_bitwise(case):
    _check_bitwise(case)


@pytest.mark.parametrize("case", SQUARE, ids=SQUARE_IDS)
def test_square_shapes_bitwise_model_and_fp32(case):
    _check_bitwise(case)
    check_against_model("asm", case)
    check_against_fp32("asm", case)


def test_steady_state_instruction_mix():
    """Per-wave dynamic counts of one key tile (difference of two runs), head dim 128 bf16: the loop keeps 64 WMMA
    per tile and fewer VALU+TRANS issues than the HIP kernel (the printed figures feed the report)."""
    def per_wave(kernel, S):
        q, k, v = make_inputs(1, 64, S, 1, 1, 128, "bf16", "NHD", "randn")
        sage_attention_fwd(reference.sage_prepare(q, k, v), kernel=kernel, backend="emu")
        _, stats = get_backend("emu").history[-1]
        return {c: stats[c] / stats["waves"] for c in ("WMMA", "VALU", "TRANS", "LDS", "VMEM_LOAD", "SALU")}

    mixes = {}
    for kernel in ("asm", "hip"):
        a, b = per_wave(kernel, 256), per_wave(kernel, 512)
        mixes[kernel] = {c: (b[c] - a[c]) / 4 for c in a}       # 4 more key tiles per wave
        print(kernel, {c: round(x, 1) for c, x in mixes[kernel].items()})
    assert mixes["asm"]["WMMA"] == 64
    asm_issue = mixes["asm"]["VALU"] + mixes["asm"]["TRANS"]
    hip_issue = mixes["hip"]["VALU"] + mixes["hip"]["TRANS"]
    assert asm_issue < hip_issue


def _one_fma_form_rows(prepared) -> torch.Tensor:
    """[B, H, S_q] bool: query rows whose every key tile takes the one-FMA exp argument (docs/numerics.md
    §Attention arithmetic model: every qk of the tile in (0, FMA_MAX_QK_SCALE])."""
    qk = prepared.q_scale[..., :, None] * prepared.k_scale[:, :, None, :]   # [B, H, q blocks, k blocks]
    ok = ((qk > 0) & (qk <= reference.FMA_MAX_QK_SCALE)).all(dim=-1)
    return ok.repeat_interleave(abi.SCALE_BLOCK, dim=-1)[..., :prepared.q_int8.shape[2]]


@pytest.mark.parametrize("kernel,D", [("hip", 128), ("asm", 128), ("asm", 256)])
def test_exact_form_for_zero_and_large_scales(kernel, D):
    """Both forms of the exp argument in one launch, bitwise HIP == asm and within the model bound: query block 0
    all zero (q_scale = 0: the exact form, and the tail tile's masked keys give (-inf) * 0 = NaN unless masked
    again), block 1 scaled so that qk > 2^-6 (the one-FMA form's error would exceed its bound), block 2 ordinary
    (the one-FMA form). S_kv = 100 is not a multiple of 64: the last key tile is masked. D 256: the D_pad 256 asm
    kernel's own loop body (docs/performance.md §Head dim 256)."""
    g = torch.Generator().manual_seed(31)
    B, S_q, S_kv, H = 1, 96, 100, 2
    q = torch.randn(B, S_q, H, D, generator=g)
    q[:, :32] = 0
    q[:, 32:64] *= 200
    k, v = torch.randn(B, S_kv, H, D, generator=g), torch.randn(B, S_kv, H, D, generator=g)
    prepared = reference.sage_prepare(*(t.to(torch.bfloat16) for t in (q, k, v)))
    rows = _one_fma_form_rows(prepared)[0, 0, :S_q]
    assert not rows[:64].any() and rows[64:].all()  # the data reaches both forms
    out, lse = sage_attention_fwd(prepared, return_lse=True, backend="emu", kernel=kernel)
    other = sage_attention_fwd(prepared, return_lse=True, backend="emu", kernel="asm" if kernel == "hip" else "hip")
    assert torch.equal(_bits(out), _bits(other[0])) and torch.equal(_bits(lse), _bits(other[1]))
    assert torch.isfinite(out.float()).all() and torch.isfinite(lse).all()
    ref_out, ref_lse = reference.sage_attention_model(prepared, return_lse=True)
    rel_l2 = ((out.double() - ref_out.double()).norm() / ref_out.double().norm()).item()
    assert rel_l2 <= MODEL_REL_L2, rel_l2
    assert (out.float() - ref_out.float()).abs().max() <= MODEL_MAX_ABS * ref_out.float().abs().max()
    assert (_bits(out) != _bits(ref_out)).float().mean().item() <= MODEL_MAX_DIFFERENT
    assert ((lse - ref_lse).abs() / ref_lse.abs().clamp(min=1.0)).max().item() <= LSE_RTOL


def test_thresholded_rescale_bitwise_and_model():
    """Tile maxima growing by ~0.7 log2 units a tile (below RESCALE_TAU): m moves every other tile, P reaches
    2^8.6 (docs/numerics.md §Attention arithmetic model "Thresholded rescale"). asm == HIP bitwise, both within the
    model bound, lse finite."""
    from attention_cases import growing_max_inputs
    prepared = reference.sage_prepare(*growing_max_inputs())
    out, lse = sage_attention_fwd(prepared, return_lse=True, backend="emu", kernel="asm")
    hout, hlse = sage_attention_fwd(prepared, return_lse=True, backend="emu", kernel="hip")
    assert torch.equal(_bits(out), _bits(hout)) and torch.equal(_bits(lse), _bits(hlse))
    ref_out, ref_lse = reference.sage_attention_model(prepared, return_lse=True)
    rel_l2 = ((out.double() - ref_out.double()).norm() / ref_out.double().norm()).item()
    assert rel_l2 <= MODEL_REL_L2, rel_l2
    assert torch.isfinite(lse).all()
    assert ((lse - ref_lse).abs() / ref_lse.abs().clamp(min=1.0)).max().item() <= LSE_RTOL


# ---------------------------------------------------------------------------------------------- the exp2 schedules
# "exp2_valu" (sage_co/family.py ATTENTION_SCHEDULES; docs/numerics.md §Attention arithmetic model "exp2 on the
# VALU"): the scores of the keys abi.EXP2_VALU_KEYS names take the polynomial exp2 on the VALU. Both kernels compute
# it with the same fp32 ops: asm == HIP bitwise, and against the model (reference.sage_attention_model(schedule=))
# the kernels' usual bound; the schedule changes the output (so these tests see which schedule ran).
HEDGE = "exp2_valu"
HEDGE_CASES = [(2, 77, 131, 2, 1, 128, "bf16", "NHD", False, "randn"),
               (2, 100, 70, 4, 2, 64, "fp16", "HND", True, "k_offset"),
               (2, 33, 90, 2, 2, 200, "bf16", "NHD", False, "randn")]      # D_pad 256
HEDGE_IDS = [f"B{c[0]}-Sq{c[1]}-Skv{c[2]}-H{c[3]}/{c[4]}-D{c[5]}-{c[6]}-{c[7]}" for c in HEDGE_CASES]


@pytest.mark.parametrize("case", HEDGE_CASES, ids=HEDGE_IDS)
def test_exp2_valu_schedule_bitwise_and_model(case):
    *_, out, lse = kernel_case("asm", case, HEDGE)
    *_, hout, hlse = kernel_case("hip", case, HEDGE)
    assert torch.equal(_bits(out), _bits(hout)), f"{(_bits(out) != _bits(hout)).sum().item()} outputs differ"
    assert torch.equal(_bits(lse), _bits(hlse))
    check_against_model("asm", case, HEDGE)
    *_, tout, _ = kernel_case("asm", case)
    assert not torch.equal(_bits(out), _bits(tout))     # the schedule ran: its exp2 differs from v_exp_f32's


@pytest.mark.parametrize("D,dtype,causal", [(128, torch.float32, True), (64, torch.float32, False)])
def test_exp2_valu_fp32_out_causal_and_mask(D, dtype, causal):
    """fp32 in/out, causal, an attn_mask (bool, with additive tiles elsewhere covered by the default schedule's
    suite): asm == HIP bitwise with the schedule; vs the model within the kernels' bound."""
    from attention_cases import run_both, rel_l2
    g = torch.Generator().manual_seed(7)
    B, S_q, S_kv, H = 2, 70, 97, 2
    q, k, v = (torch.randn(B, S, H, D, generator=g, dtype=dtype) for S in (S_q, S_kv, S_kv))
    mask = torch.rand(B, 1, S_q, S_kv, generator=g) < 0.7
    p = reference.sage_prepare(q, k, v)
    out, lse = run_both(p, attn_mask=mask, is_causal=causal, schedule=HEDGE)
    ref = reference.sage_attention_model(p, attn_mask=mask, is_causal=causal, schedule=HEDGE)
    assert out.dtype == torch.float32 and rel_l2(out, ref) <= 1e-3


def test_exp2_valu_varlen_both_kernels_and_per_sequence():
    """The packed varlen launch with the schedule: asm == HIP bitwise, and each sequence bitwise its own call."""
    import sage_co
    from varlen_cases import packed_inputs, per_sequence
    q, k, v, cu_q, cu_kv = packed_inputs([33, 77, 1], [100, 31, 65], 2, 1, 128, torch.bfloat16)
    res = {kern: sage_co.sage_attention_varlen(q, k, v, cu_q, cu_kv, 77, 100, return_lse=True, is_causal=True,
                                               backend="emu", kernel=kern, schedule=HEDGE) for kern in ("asm", "hip")}
    assert torch.equal(_bits(res["asm"][0]), _bits(res["hip"][0])) and torch.equal(res["asm"][1], res["hip"][1])
    seq = per_sequence(q, k, v, cu_q, cu_kv, lambda a, b, c: sage_co.sage_attention(
        a, b, c, return_lse=True, is_causal=True, backend="emu", kernel="asm", schedule=HEDGE))
    assert torch.equal(_bits(res["asm"][0]), _bits(seq[0]))


def test_schedule_option_is_validated_before_any_kernel():
    import sage_co
    q = torch.randn(1, 40, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"schedule: .*'trans', 'exp2_valu'.*'bogus'"):
        sage_co.sage_attention(q, q, q, schedule="bogus", backend="emu")
    with pytest.raises(TypeError, match="schedule:"):
        sage_co.sage_attention(q, q, q, schedule=2, backend="emu")
    with pytest.raises(ValueError, match="schedule: 'exp2_valu' is not built for pv_dtype='fp16'"):
        sage_co.sage_attention(q, q, q, schedule=HEDGE, pv_dtype="fp16", backend="emu")
    k = registry.find("sage_attention_fwd", "asm", head_dim=128, out_dtype="bf16", pv_dtype="fp8", schedule=HEDGE)
    assert k.symbol == "gfx1201_sage_attention_fwd_asm_d128_bf16_exp2_valu"
    # without a schedule key the lookup takes the default (the unsuffixed symbol)
    assert registry.find("sage_attention_fwd", "asm", head_dim=128, out_dtype="bf16",
                         pv_dtype="fp8").symbol == "gfx1201_sage_attention_fwd_asm_d128_bf16"


def test_exp2_valu_values_and_accuracy_bound():
    """reference.exp2_valu: -inf and every argument <= -127 give +0 exactly (a fully masked row keeps l = 0),
    integers n give 2^n exactly, the relative error stays <= 2.78e-3 on the arguments the loop sees; and the
    schedule keeps the accuracy goal: randn B=1 H=2 S=2048 D=128, rel L2 vs FP32 <= 0.040 (model = both kernels'
    arithmetic, bitwise up to v_exp_f32's ulp on the other scores)."""
    from sage_co import accuracy
    a = torch.tensor([-float("inf"), -1e30, -200.0, -127.0])
    assert torch.equal(reference.exp2_valu(a).view(torch.int32), torch.zeros(4, dtype=torch.int32))
    n = torch.arange(-126, 9, dtype=torch.float32)
    assert torch.equal(reference.exp2_valu(n), torch.exp2(n))
    x = torch.linspace(-100.0, 8.8, 200001)
    assert ((reference.exp2_valu(x).double() / torch.exp2(x.double()) - 1).abs().max() <= 2.78e-3)
    q, k, v = accuracy.make_inputs("randn", 1, 2048, 2, seed=0)
    ref = reference.attention_fp32(q, k, v)
    p = reference.sage_prepare(q, k, v)
    hedge = accuracy.metrics(reference.sage_attention_model(p, schedule=HEDGE), ref)
    trans = accuracy.metrics(reference.sage_attention_model(p), ref)
    assert hedge["rel_l2"] <= 0.040 and accuracy.within_contract(hedge), hedge
    assert hedge["rel_l2"] != trans["rel_l2"]


def test_row_max_by_max3_in_every_asm_symbol():
    """The generated asm (docs/numerics.md §Attention arithmetic model "Row max"): every symbol takes its row max
    with v_max3_num_f32, two values per issue whatever a VOPD pair costs, and the "trans" symbols keep no VOPD max
    (the exp2_valu hedge's clamp, a max with EXP2_VALU_MIN, still pairs in VOPD)."""
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parents[2] / "asm_src" / "gfx1201_sage_attention_asm.s").read_text()
    parts = re.split(r"^(gfx1201_sage_attention_fwd_asm_\w+):$", text, flags=re.M)
    bodies = dict(zip(parts[1::2], parts[2::2]))
    assert len(bodies) >= 24
    for name, body in bodies.items():
        assert body.count("v_max3_num_f32") >= 16, name
        if "exp2_valu" not in name:
            assert "v_dual_max_num_f32" not in body, name
