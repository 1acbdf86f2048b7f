"""The hand-scheduled attention kernel (asm_src/gen_sage_attention_asm.py -> gfx1201_sage_attention_asm.co) on the
emulator, through sage_co.ops.attention.run_attention_fwd(variant="asm").

Bitwise vs the HIP kernel: the asm kernel keeps the HIP kernel's per-row operation order everywhere (scores
float(int dot) * (q_scale * k_scale); the row max -- exact, so its evaluation order is free; exp2(s - m) with
v_exp_f32; the row sum p0 + ... + p31 in register order plus the other lane half's partial; l = l * alpha + sum;
fp8(p * 448); each O^T accumulator takes the key chunks 0, 1, 2, 3 in order with the same WMMA operands; the
same epilogue and LSE sums). Only the schedule differs, so out and lse must be equal bit for bit on every shape
(no tile takes a deliberately different path).

Against the arithmetic model (sage_co.reference.sage_attention_model) the bound is the HIP kernel's: relative L2
<= 2e-3 (exp2 within 1 ulp, the row-sum and WMMA accumulation orders differ from torch's), LSE within
1e-4 * max(1, |lse|). Against the FP32 reference: the accuracy contract of sage_co.accuracy.

The emulator runs with its sanitizer on (the default): missing s_wait_* before a register is read, WMMA hazards,
out-of-bounds global/LDS accesses and barrier misuse fail the run. The tests every attention kernel must pass
(zero Q/K, repeat runs, padding, LSE, LDS races, ...) run against both kernels in tests/test_attention_kernel.py.
"""
from __future__ import annotations

import functools

import pytest
import torch

from sage_co import accuracy, reference, registry
from sage_co.launch import get_backend
from sage_co.ops.attention import run_attention_fwd

MODEL_REL_L2 = 2e-3      # vs the arithmetic model (see the docstring)
LSE_RTOL = 1e-4          # vs the model's LSE, relative to max(|lse|, 1)

# (B, H, S): every S on some (B, H), B in {1, 2}, H in {1, 2, 3}; tails of a 64-key tile and a 32-token scale
# block, one tile exactly, many tiles (the x2-unrolled loop with both peeled last-tile parities).
SHAPES = [(1, 1, 1), (2, 1, 15), (1, 2, 16), (1, 3, 17), (2, 2, 31), (1, 1, 32), (1, 3, 33), (2, 1, 64),
          (1, 2, 100), (2, 3, 257), (1, 1, 1000)]
LONG = (1, 1, 4096)


@functools.lru_cache(maxsize=None)
def _case(dist: str, B: int, H: int, S: int, smooth_k: bool = False):
    """(q, k, v, prepared, asm out, asm lse, hip out, hip lse); each kernel runs once per case."""
    q, k, v = accuracy.make_inputs(dist, B, S, H, seed=0)
    prepared = reference.sage_prepare(q, k, v, smooth_k=smooth_k)
    out, lse = run_attention_fwd(prepared, return_lse=True, backend="emu", variant="asm")
    hout, hlse = run_attention_fwd(prepared, return_lse=True, backend="emu", variant="hip")
    return q, k, v, prepared, out, lse, hout, hlse


def _rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32)


def _check(dist, B, H, S, smooth_k=False):
    q, k, v, prepared, out, lse, hout, hlse = _case(dist, B, H, S, smooth_k)
    assert out.shape == (B, S, H, 128) and out.dtype == torch.bfloat16
    assert lse.shape == (B, H, S) and lse.dtype == torch.float32
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    # bitwise the HIP kernel
    diff = (_bits(out) != _bits(hout)).sum().item()
    assert diff == 0, f"{diff} of {out.numel()} bf16 outputs differ from the HIP kernel"
    assert torch.equal(_bits(lse), _bits(hlse)), (lse - hlse).abs().max().item()
    # the accuracy contract vs exact fp32 attention
    m = accuracy.metrics(out, reference.attention_fp32(q, k, v))
    assert m["outside_band"] <= accuracy.MAX_OUTSIDE, m
    assert m["cosine"] >= accuracy.MIN_COSINE, m
    assert m["median_row_cosine"] >= accuracy.MIN_ROW_COSINE, m
    # the arithmetic model
    ref_out, ref_lse = reference.sage_attention_model(prepared, return_lse=True)
    assert _rel_l2(out, ref_out) <= MODEL_REL_L2
    rel = (lse - ref_lse).abs() / ref_lse.abs().clamp(min=1.0)
    assert rel.max().item() <= LSE_RTOL, rel.max().item()


def test_asm_is_the_default_variant():
    assert registry.find("sage_attention_fwd").symbol == "gfx1201_sage_attention_fwd_asm"
    assert registry.find("sage_attention_fwd", "hip").symbol == "gfx1201_sage_attention_fwd"


@pytest.mark.parametrize("B,H,S", SHAPES)
def test_matches_hip_bitwise_model_and_fp32(B, H, S):
    _check("randn", B, H, S)


@pytest.mark.parametrize("B,H,S", [(1, 2, 100), (2, 1, 257)])
def test_smooth_k(B, H, S):
    """K with a large per-channel offset, prepared with smooth_k: the LSE carries ln2 * q . k_mean."""
    _check("k_offset", B, H, S, smooth_k=True)


def test_k_offset_without_smooth_k():
    _check("k_offset", 1, 2, 100, smooth_k=False)


def test_long_sequence():
    _check("randn", *LONG)


def test_steady_state_instruction_mix():
    """Per-wave dynamic counts of one key tile (difference of two runs): the loop keeps 64 WMMA per tile and
    fewer VALU+TRANS issues than the HIP kernel (the printed figures feed the report; the bound is loose)."""
    def per_wave(variant, S):
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, S, 1, 128, generator=g).to(torch.bfloat16) for _ in range(3))
        run_attention_fwd(reference.sage_prepare(q, k, v), variant=variant, backend="emu")
        _, stats = get_backend("emu").history[-1]
        return {c: stats[c] / stats["waves"] for c in ("WMMA", "VALU", "TRANS", "LDS", "VMEM_LOAD", "SALU")}

    mixes = {}
    for variant in ("asm", "hip"):
        a, b = per_wave(variant, 256), per_wave(variant, 512)
        mixes[variant] = {c: (b[c] - a[c]) / 4 for c in a}       # 4 more key tiles per wave
        print(variant, {c: round(x, 1) for c, x in mixes[variant].items()})
    assert mixes["asm"]["WMMA"] == 64
    asm_issue = mixes["asm"]["VALU"] + mixes["asm"]["TRANS"]
    hip_issue = mixes["hip"]["VALU"] + mixes["hip"]["TRANS"]
    assert asm_issue < hip_issue
