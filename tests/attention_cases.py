"""The attention kernel cases shared by tests/kernels/test_attention_vs_reference.py,
tests/kernels/test_attention_asm_equals_hip.py,
tests/kernels/test_causal_and_block_sparse.py and tests/kernels/test_attn_mask.py: the case table, inputs, each (kernel,
case) run once on the emulator (cached), and the checks
against the FP32 reference and the arithmetic model with their bounds (why the kernel is not bitwise the model:
tests/kernels/test_attention_vs_reference.py's docstring, docs/numerics.md "Kernel vs model")."""
from __future__ import annotations

import functools
import math

import torch

from sage_co import accuracy, reference
from sage_co.api import sage_attention_fwd
from sage_co.callspec import FWD_KEYWORDS, SAGE_ATTENTION_FWD
from sage_co.plan import plan_call

# vs sage_attention_model (see the module docstring for why not bitwise): docs/numerics.md "Kernel vs model"
from sage_co.accuracy import MODEL_MAX_ABS, MODEL_MAX_DIFFERENT, MODEL_REL_L2  # noqa: F401 (the tests import them here)
LSE_RTOL = 1e-4         # vs the model's LSE
ONES_TOL = 8e-3         # all-zero Q/K, V = 1: the output is 1 up to the rounding of the fp8/scale chain

KERNELS = ("hip", "asm")


def planned_fwd(prepared, **options):
    """The attention recipe sage_attention_fwd(prepared, **options) runs (sage_co.plan.plan_call: every check), for
    tests that launch it themselves (ops.attention.execute, or their own buffers) or look at the plan."""
    o = SAGE_ATTENTION_FWD.bind(options, "sage_attention_fwd", allowed=FWD_KEYWORDS)
    return plan_call(SAGE_ATTENTION_FWD, (prepared,), o).attention
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


# One case: (B, S_q, S_kv, H_q, H_kv, D, dtype, layout, smooth_k, dist). S_q and S_kv from {1, 31, 33, 64, 77, 333}
# in both orders; GQA ratios 1, 2, 4, 8 and MQA (H_kv = 1, also with an odd group of 3); D 48/64/80/96/112/128 so
# both D_pad and the zero padding run; bf16 and fp16; NHD and HND results.
CASES = [
    (1, 1, 333, 2, 2, 128, "bf16", "NHD", False, "randn"),
    (1, 333, 1, 4, 2, 64, "fp16", "HND", True, "k_offset"),
    (2, 31, 77, 4, 1, 128, "fp16", "NHD", False, "randn"),
    (1, 77, 31, 8, 1, 64, "bf16", "HND", False, "randn"),
    (1, 33, 64, 3, 1, 96, "bf16", "NHD", True, "k_offset"),
    (2, 64, 33, 2, 1, 48, "fp16", "NHD", True, "randn"),
    (1, 64, 64, 2, 2, 80, "fp16", "HND", False, "randn"),
    (1, 31, 33, 6, 3, 112, "bf16", "HND", True, "randn"),
    (1, 333, 77, 8, 1, 128, "bf16", "NHD", False, "randn"),
    (1, 77, 333, 2, 1, 64, "fp16", "NHD", False, "k_offset"),
]
IDS = [f"B{c[0]}-Sq{c[1]}-Skv{c[2]}-H{c[3]}/{c[4]}-D{c[5]}-{c[6]}-{c[7]}{'-smooth' if c[8] else ''}" for c in CASES]
LONG = (1, 2048, 2048, 2, 1, 128, "bf16", "NHD", False, "randn")


def make_inputs(B, S_q, S_kv, H_q, H_kv, D, dtype, layout, dist, seed=0):
    """q [B, S_q, H_q, D], k/v [B, S_kv, H_kv, D] (as [B, H, S, D] views of the same memory for HND). randn: all
    N(0, 1); k_offset: k gets a per-(head, channel) offset 4 * N(0, 1) shared by every token (what smooth_k is for)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, S_q, H_q, D, generator=g)
    k = torch.randn(B, S_kv, H_kv, D, generator=g)
    v = torch.randn(B, S_kv, H_kv, D, generator=g)
    if dist == "k_offset":
        k = k + 4 * torch.randn(1, 1, H_kv, D, generator=g)
    q, k, v = (t.to(DTYPES[dtype]) for t in (q, k, v))
    if layout == "HND":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    return q, k, v


@functools.lru_cache(maxsize=None)
def prepared_case(case):
    B, S_q, S_kv, H_q, H_kv, D, dtype, layout, smooth_k, dist = case
    q, k, v = make_inputs(B, S_q, S_kv, H_q, H_kv, D, dtype, layout, dist)
    return q, k, v, reference.sage_prepare(q, k, v, layout=layout, smooth_k=smooth_k)


@functools.lru_cache(maxsize=None)
def kernel_case(kernel: str, case, schedule: str | None = None):
    """(q, k, v, prepared, out, lse) for one case; each kernel runs once per case and schedule (None: the default)."""
    q, k, v, prepared = prepared_case(case)
    out, lse = sage_attention_fwd(prepared, return_lse=True, layout=case[7], backend="emu", kernel=kernel,
                                  schedule=schedule)
    return q, k, v, prepared, out, lse


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    """|a - b| / |b| in float64."""
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of a 16- or 32-bit float tensor, for bitwise comparisons (torch.equal on floats calls NaN != NaN
    and -0 == 0)."""
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


def run_both(prepared, **kw):
    """Both kernels (KERNELS) on the emulator with the same arguments; they must be bitwise equal in output and LSE
    (same per-row arithmetic, only the schedule differs). Returns the asm kernel's (out, lse)."""
    res = {kern: sage_attention_fwd(prepared, return_lse=True, backend="emu", kernel=kern, **kw) for kern in KERNELS}
    (ao, al), (ho, hl) = res["asm"], res["hip"]
    assert torch.equal(bits(ao), bits(ho)), f"{(bits(ao) != bits(ho)).sum().item()} outputs differ asm vs hip"
    assert torch.equal(bits(al), bits(hl)), "lse differs asm vs hip"
    return ao, al


def fp32_metrics(kernel, case) -> dict:
    q, k, v, prepared, out, _ = kernel_case(kernel, case)
    B, S_q, _, H_q, _, D, dtype, layout, _, _ = case
    assert out.shape == ((B, S_q, H_q, D) if layout == "NHD" else (B, H_q, S_q, D))
    assert out.dtype == DTYPES[dtype] and out.is_contiguous()
    assert torch.isfinite(out).all()
    return accuracy.metrics(out, reference.attention_fp32(q, k, v, layout=layout))


def check_against_fp32(kernel, case):
    m = fp32_metrics(kernel, case)
    assert accuracy.within_contract(m), m


def check_against_model(kernel, case, schedule: str | None = None):
    _, _, _, prepared, out, lse = kernel_case(kernel, case, schedule)
    ref_out, ref_lse = reference.sage_attention_model(prepared, return_lse=True, schedule=schedule)
    ref_out = reference.to_layout(ref_out, case[7])
    assert rel_l2(out, ref_out) <= MODEL_REL_L2
    assert (out.float() - ref_out.float()).abs().max() <= MODEL_MAX_ABS * ref_out.float().abs().max()
    assert (out.view(torch.int16) != ref_out.view(torch.int16)).float().mean().item() <= MODEL_MAX_DIFFERENT
    assert lse.shape == (case[0], case[3], case[1]) and torch.isfinite(lse).all()
    # relative to max(|lse|, 1): a row's LSE can cancel to ~0 (log of a sum of a few exps near 1) while its
    # rounding error stays that of its O(1) terms m*ln2 and log(l)
    rel = (lse - ref_lse).abs() / ref_lse.abs().clamp(min=1.0)
    assert rel.max().item() <= LSE_RTOL, rel.max().item()


def growing_max_inputs(D: int = 64, S: int = 200, H: int = 2, growth: float = 0.7, seed: int = 41):
    """q, k, v (bf16, B=1) whose key tile t holds one key with score ~ growth * t (log2 units) above tile 0's max and
    otherwise small scores: each tile's max passes the previous one by ~growth < RESCALE_TAU. S = 200: the last tile
    is partial."""
    g = torch.Generator().manual_seed(seed)
    q = 0.05 * torch.randn(1, S, H, D, generator=g)
    k = 0.05 * torch.randn(1, S, H, D, generator=g)
    q[..., 0] = 1.0
    scale = 1.0 / math.sqrt(D) * math.log2(math.e)    # one unit of k[..., 0] moves the score by `scale` log2 units
    for t in range(-(-S // 64)):
        k[:, 64 * t + 5, :, 0] = 4.0 + growth * t / scale
    v = torch.randn(1, S, H, D, generator=g)
    return tuple(x.to(torch.bfloat16) for x in (q, k, v))
