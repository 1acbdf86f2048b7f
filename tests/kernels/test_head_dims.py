"""Every head dim (issue 30): any D in 1..abi.HEAD_DIM_MAX is zero-padded to D_pad = abi.d_pad(D) and served by the
D_pad kernels (docs/numerics.md §Inputs). On the emulator with the sanitizer on (sage_co.emu's default): the prepare
kernels bitwise sage_co.reference.sage_prepare, the asm kernel bitwise the HIP kernel (out and LSE), both within the
kernel-vs-model bounds of tests/attention_cases.py, and the epilogue's stores exact: no byte past channel D - 1 of
an output row is written (a guarded output buffer with a gap after every row)."""
from __future__ import annotations

import pytest
import torch

from attention_cases import DTYPES, MODEL_MAX_ABS, MODEL_MAX_DIFFERENT, MODEL_REL_L2, planned_fwd, rel_l2
from sage_co import abi, reference, registry, validate
from sage_co.launch import launch
from sage_co.ops import attention as attention_ops
from sage_co.api import sage_attention_fwd, sage_prepare

# (D, dtype, is_causal, pv_dtype): D from the list (and 37: not a multiple of the 8-channel granule, so the
# host pads q/k/v to 40); shapes B = 2, S_q = 37 != S_kv = 70 (not multiples of 64: a tail tile), GQA 4 / 2
SMALL_DIMS = [(8, "bf16", True, "fp8"), (40, "fp16", False, "fp8"), (72, "bf16", True, "fp8"),
              (80, "fp16", True, "fp8"), (37, "bf16", False, "fp8"), (40, "bf16", True, "fp16")]
SHAPE = dict(B=2, S_q=37, S_kv=70, H_q=4, H_kv=2)
SENTINEL = 0x5a5a   # a 16-bit pattern the kernels never produce for these inputs (the guard gap's content)
GAP = 8             # elements of guard gap after every output row


def _inputs(D, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    B, S_q, S_kv, H_q, H_kv = (SHAPE[n] for n in ("B", "S_q", "S_kv", "H_q", "H_kv"))
    q = torch.randn(B, S_q, H_q, D, generator=g).to(DTYPES[dtype])
    k = torch.randn(B, S_kv, H_kv, D, generator=g).to(DTYPES[dtype])
    v = torch.randn(B, S_kv, H_kv, D, generator=g).to(DTYPES[dtype])
    return q, k, v


def _bytes(t):
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


@pytest.fixture(scope="module")
def prepared_cases():
    """(q, k, v, kernel prepare, reference prepare) per case: prepare runs once per case."""
    out = {}
    for D, dtype, _, pv in SMALL_DIMS:
        q, k, v = _inputs(D, dtype)
        out[(D, dtype, pv)] = (q, k, v, sage_prepare(q, k, v, pv_dtype=pv, backend="emu"),
                               reference.sage_prepare(q, k, v, pv_dtype=pv))
    return out


def _guarded_attention(prepared, kernel, is_causal):
    """The planned launch with the output rows GAP elements apart in a sentinel-filled buffer: (out view, buffer,
    lse)."""
    rec = planned_fwd(prepared, return_lse=True, backend="emu", kernel=kernel, is_causal=is_causal)
    B, S_q, H_q, D = rec.out_shape
    buf = torch.full((B, S_q, H_q, D + GAP), SENTINEL, dtype=torch.int16).view(rec.out_dtype)
    lse = torch.empty(rec.lse_shape, dtype=torch.float32)
    lut, _, _, kinds, bits, bias = attention_ops.tile_lut(rec, None, torch.device("cpu"))   # no attn_mask: placeholders
    args = dict(rec.launch.args({
        "q": prepared.q_int8, "k": prepared.k_int8, "v": prepared.v_t, "q_scale": prepared.q_scale,
        "k_scale": prepared.k_scale, "k_mean": prepared.k_mean, "v_scale": prepared.v_scale, "out": buf, "lse": lse,
        "lut": lut, "mask_bits": bits, "mask_bias": bias, "mask_kind": kinds, "v_mean": prepared.k_mean,
        "cu_seqlens_q": lut, "cu_seqlens_kv": lut}))   # not varlen: placeholders, never read
    args.update(out_stride_b=S_q * H_q * (D + GAP), out_stride_s=H_q * (D + GAP), out_stride_h=D + GAP)
    launch(rec.launch.symbol, attention_ops.ATTENTION_FWD_ARGS, rec.launch.grid, attention_ops.BLOCK, args,
           backend="emu")
    return buf[..., :D], buf, lse


@pytest.mark.parametrize("case", SMALL_DIMS, ids=[f"D{c[0]}-{c[1]}{'-causal' if c[2] else ''}-pv{c[3]}"
                                                  for c in SMALL_DIMS])
def test_any_head_dim(case, prepared_cases):
    D, dtype, is_causal, pv = case
    q, k, v, pk, pr = prepared_cases[(D, dtype, pv)]
    assert pk.head_dim == D and pk.q_int8.shape[-1] == abi.d_pad(D)
    for f in ("q_int8", "q_scale", "k_int8", "k_scale", "k_mean", "v_t", "v_scale"):
        assert torch.equal(_bytes(getattr(pk, f)), _bytes(getattr(pr, f))), f"prepare {f} at D = {D}"
    model, model_lse = reference.sage_attention_model(pr, return_lse=True, is_causal=is_causal)
    results = {}
    for kernel in ("hip", "asm"):
        out, buf, lse = _guarded_attention(pk, kernel, is_causal)
        gap = buf[..., D:].view(torch.int16)
        assert bool((gap == SENTINEL).all()), f"{kernel}: the epilogue wrote past channel {D - 1}"
        results[kernel] = (out, lse)
        assert rel_l2(out, model) <= MODEL_REL_L2
        assert (out.float() - model.float()).abs().max().item() <= MODEL_MAX_ABS * model.float().abs().max().item()
        assert (out != model).float().mean().item() <= MODEL_MAX_DIFFERENT
    assert torch.equal(results["hip"][0], results["asm"][0])
    assert torch.equal(results["hip"][1], results["asm"][1])


def test_public_api_any_head_dim():
    """sage_attention with D = 40 returns [B, S_q, H_q, 40], bitwise the two-step path of the same kernels."""
    import sage_co
    q, k, v = _inputs(40, "bf16", seed=1)
    out = sage_co.sage_attention(q, k, v, is_causal=True)
    assert out.shape == q.shape
    p = sage_prepare(q, k, v, backend="emu")
    ref, _ = sage_attention_fwd(p, return_lse=True, is_causal=True, backend="emu")
    assert torch.equal(out, ref)


def test_head_dim_limits_name_the_argument():
    q = torch.zeros(1, 4, 1, abi.HEAD_DIM_MAX + 1, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"q: expected a head dim in 1\.\.\d+ .*D = \d+"):
        validate.check_qkv(q, q, q)
    w = torch.ones(37, dtype=torch.bfloat16)
    x = torch.zeros(1, 4, 1, 37, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="q_norm_weight: the fused RMSNorm needs a head dim that is a multiple of 8"):
        sage_prepare(x, x, x, q_norm_weight=w, backend="emu")


def test_every_padded_head_dim_has_an_attention_kernel():
    """Each D_pad has both attention kernels (fp8 P.V), HIP and asm (docs/performance.md §Head dim 256), and the
    default (kernel None) is the asm one; the registry is what the plan looks up."""
    for Dp in abi.HEAD_DIMS_NATIVE:
        for dtype in abi.OUT_DTYPES:
            for kernel in ("hip", "asm"):
                registry.find(abi.ATTENTION_OP, kernel, head_dim=Dp, out_dtype=dtype, pv_dtype="fp8")
            assert registry.find(abi.ATTENTION_OP, head_dim=Dp, out_dtype=dtype, pv_dtype="fp8").kernel == "asm"
    assert set(abi.ATTENTION_ASM_HEAD_DIMS) == set(abi.ATTENTION_HIP_HEAD_DIMS) == set(abi.HEAD_DIMS_NATIVE)


# D_pad 256 (D in 129..256): both kernels on sage_co.reference.sage_prepare's structure (bitwise the spec), asm ==
# HIP bit for bit (out and lse); the default kernel there is the asm one
WIDE_DIMS = [(136, "bf16", True), (160, "fp16", False), (200, "bf16", False), (256, "fp16", True)]


@pytest.mark.parametrize("case", WIDE_DIMS, ids=[f"D{c[0]}-{c[1]}{'-causal' if c[2] else ''}" for c in WIDE_DIMS])
def test_wide_head_dims_both_kernels(case):
    D, dtype, is_causal = case
    q, k, v = _inputs(D, dtype, seed=2)
    pr = reference.sage_prepare(q, k, v)
    assert pr.q_int8.shape[-1] == 256 and pr.head_dim == D
    model, model_lse = reference.sage_attention_model(pr, return_lse=True, is_causal=is_causal)
    rec = planned_fwd(pr, return_lse=True, backend="emu", is_causal=is_causal)
    assert rec.kernel.kernel == "asm" and rec.kernel.symbol.endswith(f"_asm_d256_{dtype}")   # the default at D > 128
    results = {}
    for kernel in ("hip", "asm"):
        out, buf, lse = _guarded_attention(pr, kernel, is_causal)
        assert bool((buf[..., D:].view(torch.int16) == SENTINEL).all()), \
            f"{kernel}: the epilogue wrote past channel {D - 1}"
        assert rel_l2(out, model) <= MODEL_REL_L2
        assert (out.float() - model.float()).abs().max().item() <= MODEL_MAX_ABS * model.float().abs().max().item()
        assert (out != model).float().mean().item() <= MODEL_MAX_DIFFERENT
        fin = torch.isfinite(model_lse)
        assert torch.equal(fin, torch.isfinite(lse))
        assert torch.allclose(lse[fin], model_lse[fin], rtol=1e-4, atol=0)
        results[kernel] = (out.view(torch.int16), lse.view(torch.int32))
    assert torch.equal(results["hip"][0], results["asm"][0])
    assert torch.equal(results["hip"][1], results["asm"][1])


# The asm D_pad 256 kernel against the HIP one, bit for bit, over the key loop's shapes: several key tiles (both
# parities of the x2-unrolled loop and both peeled last tiles), lengths that are not multiples of 64 (a tail tile,
# padded query rows), B = 2, GQA, causal (diagonal tiles), smooth_k (the lse's q.k_mean term reads Q^T back from LDS)
# and both 16-bit outputs: (B, S_q, S_kv, H_q, H_kv, D, dtype, is_causal, smooth_k)
WIDE_LOOP = [(2, 77, 333, 4, 2, 160, "bf16", True, True), (2, 130, 200, 2, 2, 256, "fp16", False, False),
             (2, 200, 141, 4, 1, 256, "bf16", True, False), (2, 65, 259, 2, 1, 200, "fp16", True, True)]


@pytest.mark.parametrize("case", WIDE_LOOP, ids=[f"B{c[0]}-Sq{c[1]}-Skv{c[2]}-H{c[3]}/{c[4]}-D{c[5]}-{c[6]}"
                                                 f"{'-causal' if c[7] else ''}{'-smooth_k' if c[8] else ''}"
                                                 for c in WIDE_LOOP])
def test_wide_head_dims_asm_is_hip_bitwise(case):
    B, S_q, S_kv, H_q, H_kv, D, dtype, is_causal, smooth_k = case
    g = torch.Generator().manual_seed(S_q + S_kv + D)
    q = torch.randn(B, S_q, H_q, D, generator=g).to(DTYPES[dtype])
    k = (torch.randn(B, S_kv, H_kv, D, generator=g) + 2 * torch.randn(1, 1, H_kv, D, generator=g)).to(DTYPES[dtype])
    v = torch.randn(B, S_kv, H_kv, D, generator=g).to(DTYPES[dtype])
    pr = reference.sage_prepare(q, k, v, smooth_k=smooth_k)
    res = {var: sage_attention_fwd(pr, return_lse=True, backend="emu", kernel=var, is_causal=is_causal)
           for var in ("hip", "asm")}
    (ao, al), (ho, hl) = res["asm"], res["hip"]
    diff = (ao.view(torch.int16) != ho.view(torch.int16)).sum().item()
    assert diff == 0, f"{diff} of {ao.numel()} outputs differ from the HIP kernel"
    assert torch.equal(al.view(torch.int32), hl.view(torch.int32))
    model = reference.sage_attention_model(pr, is_causal=is_causal)
    assert rel_l2(ao, model) <= MODEL_REL_L2


def test_wide_head_dims_refusals_name_the_argument():
    q, k, v = _inputs(160, "bf16")
    pr16 = reference.sage_prepare(q, k, v, pv_dtype="fp16")
    with pytest.raises(ValueError, match="pv_dtype: \"fp16\" is built for head dims up to 128, got D = 160"):
        sage_attention_fwd(pr16, backend="emu")
    # the prepare kernels are built at D_pad 256 (issue 30): a kernel prepare of D = 160 plans the default (asm)
    # attention kernel of D_pad 256
    rec = planned_fwd(sage_prepare(q, k, v, backend="emu"), backend="emu")
    assert rec.kernel.kernel == "asm" and rec.kernel.symbol == "gfx1201_sage_attention_fwd_asm_d256_bf16"


def test_predictor_kernels_refuse_other_head_dims():
    """The predictor kernels pool D a multiple of 16 up to 128; the torch spec takes any D."""
    from sage_co import sparse
    q, k, _ = _inputs(40, "bf16")
    with pytest.raises(ValueError, match="q: the predictor kernels pool head dims that are multiples of 16"):
        sparse.predict_block_mask(q, k, backend="emu")
    assert sparse.predict_block_mask(q, k, backend="torch").dtype == torch.bool
