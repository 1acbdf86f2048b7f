"""The attention forward kernels -- the clang-built baseline (asm_src/gfx1201_sage_attention.hip, kernel "hip")
and the hand-scheduled family (asm_src/gen_sage_attention_asm.py, kernel "asm", the default) -- run on the
emulator through sage_co.ops.attention.sage_attention_fwd, checked against the FP32 reference and the arithmetic
model, on every variant (head dim 64 and 128 incl. zero-padded 48/80/96/112, bf16 and fp16 out), separate query
and key lengths, GQA/MQA and both output layouts. tests/kernels/test_attention_asm_equals_hip.py adds asm vs HIP bit for
bit.

Inputs are prepared by sage_co.reference.sage_prepare (bitwise the spec's prepare), so only the attention
kernel is under test here.

Why the kernel is not bitwise equal to sage_co.reference.sage_attention_model (docs/numerics.md "Kernel vs
model": relative L2 <= 1e-3, max abs <= 2^-7 max|model|, <= 1 % of elements different; measured ~1e-5 and
0.01 % for bf16 and fp16 alike):
  * row sums: the kernel sums the 32 probabilities of a lane in two chains (even, odd keys) and adds the other
    lane half's partial (keys 0-31 + keys 32-63 of a tile); torch's p.sum(-1) uses its own reduction order;
  * exp2: the kernel's v_exp_f32 is within 1 ulp of exp2 (docs/rdna4.md §Throughput, TRANS ops), torch.exp2 rounds
    correctly, and a 1-ulp difference in p can move fp8(p) to the neighbouring fp8 value;
  * P.V: the fp8 WMMA accumulates its 16 products in hardware order, the model's fp32 matmul in BLAS order.
Scores s and the running max m are bitwise the model's (exact int8 dot, same fp32 products), so the LSE
differs only through l and log2 (v_log_f32, 1 ulp).
"""
from __future__ import annotations

import math

import pytest
import torch

from sage_co import abi, masks, reference, registry
from sage_co.api import sage_attention_fwd
from sage_co.ops import attention as attention_ops
from sage_co.ops.attention import ATTENTION_FWD_ARGS
from sage_co.prepared import SagePrepared
from attention_cases import (CASES, DTYPES, IDS, KERNELS, LONG, MODEL_REL_L2, ONES_TOL, planned_fwd,  # tests/attention_cases.py
                             check_against_fp32, check_against_model, kernel_case, make_inputs, rel_l2)


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_accuracy_vs_fp32_reference(case, kernel):
    check_against_fp32(kernel, case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_matches_arithmetic_model(case, kernel):
    check_against_model(kernel, case)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", KERNELS)
def test_long_sequence(kernel):
    check_against_fp32(kernel, LONG)
    check_against_model(kernel, LONG)


@pytest.mark.parametrize("kernel", KERNELS)
def test_lse_without_smooth_k_matches_fp32_logsumexp(kernel):
    """The natural-log LSE of the kernel vs logsumexp of the exact fp32 logits (quantization-limited)."""
    case = CASES[2]
    q, k, v, _, _, lse = kernel_case(kernel, case)
    _, ref_lse = reference.attention_fp32(q, k, v, layout=case[7], return_lse=True)
    assert (lse - ref_lse).abs().max().item() < 0.05


@pytest.mark.parametrize("D,dtype", [(128, "bf16"), (64, "fp16"), (96, "fp16")])
@pytest.mark.parametrize("kernel", KERNELS)
def test_zero_qk_uniform_v(D, dtype, kernel):
    """q = k = 0 gives equal scores, so every output is the mean of v = 1 over the S_kv valid keys."""
    B, S_q, S_kv, H_q, H_kv = 1, 70, 100, 4, 2
    z = torch.zeros(B, S_q, H_q, D, dtype=DTYPES[dtype])
    zk = torch.zeros(B, S_kv, H_kv, D, dtype=DTYPES[dtype])
    prepared = reference.sage_prepare(z, zk, torch.ones_like(zk))
    out = sage_attention_fwd(prepared, backend="emu", kernel=kernel)
    assert out.shape == (B, S_q, H_q, D)
    assert ((out.float() - 1).abs() <= ONES_TOL).all(), out.float().sub(1).abs().max()


@pytest.mark.parametrize("kernel", KERNELS)
def test_gqa_reads_the_right_kv_head(kernel):
    """H_q = 4 over H_kv = 2 with V constant per K/V head (head g: all g + 1): query head h must return h // 2 + 1."""
    B, S, D = 1, 40, 64
    q = torch.randn(B, S, 4, D, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    k = torch.randn(B, S, 2, D, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    v = torch.stack([torch.full((B, S, D), g + 1.0) for g in range(2)], dim=2).to(torch.bfloat16)
    out = sage_attention_fwd(reference.sage_prepare(q, k, v), backend="emu", kernel=kernel)
    for h in range(4):
        assert ((out[:, :, h].float() - (h // 2 + 1)).abs() <= 2 * ONES_TOL * (h // 2 + 1)).all(), h


@pytest.mark.parametrize("kernel", KERNELS)
def test_repeat_runs_bitwise_identical(kernel):
    _, _, _, prepared, out, lse = kernel_case(kernel, CASES[4])
    out2, lse2 = sage_attention_fwd(prepared, return_lse=True, layout=CASES[4][7], backend="emu", kernel=kernel)
    assert torch.equal(out.view(torch.int16), out2.view(torch.int16))
    assert torch.equal(lse.view(torch.int32), lse2.view(torch.int32))


@pytest.mark.parametrize("kernel", KERNELS)
def test_without_lse_same_output(kernel):
    case = CASES[5]
    _, _, _, prepared, out, _ = kernel_case(kernel, case)
    out2 = sage_attention_fwd(prepared, layout=case[7], backend="emu", kernel=kernel)
    assert isinstance(out2, torch.Tensor)
    assert torch.equal(out.view(torch.int16), out2.view(torch.int16))


@pytest.mark.parametrize("kernel", KERNELS)
def test_layouts_hold_the_same_values(kernel):
    """HND output is the NHD output transposed, bit for bit (the kernel writes through the output strides)."""
    case = CASES[6]
    _, _, _, prepared, out_hnd, _ = kernel_case(kernel, case)
    out_nhd = sage_attention_fwd(prepared, layout="NHD", backend="emu", kernel=kernel)
    assert torch.equal(out_nhd.transpose(1, 2).contiguous().view(torch.int16), out_hnd.view(torch.int16))


@pytest.mark.parametrize("kernel", KERNELS)
def test_padding_rows_do_not_leak(kernel):
    """Garbage in the padded key rows (j >= S_kv) must not change the output: the kernel masks them to -inf."""
    case = CASES[2]
    _, _, _, prepared, out, lse = kernel_case(kernel, case)
    S_kv = prepared.seq_len_kv
    k = prepared.k_int8.clone()
    k[:, :, S_kv:] = 100
    v = prepared.v_t.view(torch.uint8).clone()
    v[..., S_kv:] = 0x7E  # 448
    dirty = prepared._replace(k_int8=k, v_t=v.view(torch.float8_e4m3fn))
    # (sage_attention_fwd refuses a prepared structure with nonzero padding: the planned launch on it directly)
    rec = planned_fwd(dirty, return_lse=True, layout=case[7], backend="emu", kernel=kernel)
    out2, lse2 = attention_ops.execute(rec, dirty)
    assert torch.equal(out.view(torch.int16), out2.view(torch.int16))
    assert torch.equal(lse.view(torch.int32), lse2.view(torch.int32))


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_output_saturates_at_the_dtype_max(dtype, kernel):
    """V at the dtype's max: fp8 rounding of p can push (O / 448l) * v_scale past it; the output saturates
    (docs/numerics.md §Finite range) and matches the model, never inf."""
    B, S, H, D = 1, 64, 1, 64
    dt = DTYPES[dtype]
    big = torch.finfo(dt).max
    q = torch.randn(B, S, H, D, generator=torch.Generator().manual_seed(5)).to(dt)
    v = torch.full((B, S, H, D), big, dtype=dt)
    prepared = reference.sage_prepare(q, q, v)
    out = sage_attention_fwd(prepared, backend="emu", kernel=kernel)
    ref = reference.sage_attention_model(prepared)
    assert torch.isfinite(out).all()
    assert torch.equal(out.view(torch.int16), ref.view(torch.int16))


# ---------------------------------------------------------------------------------------- host-side checks
def _small_prepared(B=1, S_q=40, S_kv=70, H_q=2, H_kv=1, D=128, pv_dtype="fp8") -> SagePrepared:
    q, k, v = make_inputs(B, S_q, S_kv, H_q, H_kv, D, "bf16", "NHD", "randn")
    return reference.sage_prepare(q, k, v, pv_dtype=pv_dtype)


def test_kernarg_struct_is_the_shipped_layout():
    """The offsets computed from ATTENTION_FWD_ARGS's declaration order (natural alignment) are the ones every shipped
    attention symbol's metadata records (hsaco/manifest.json), for both implementations, and the size is theirs."""
    from sage_co import manifest as manifest_file
    from llvm_tools import ROOT
    ours = [(off, size, kind, name) for off, size, kind, name in ATTENTION_FWD_ARGS.table()]
    data = manifest_file.read(ROOT / "hsaco" / "manifest.json")["code_objects"]
    symbols = {p["symbol"] for co in data.values() for p in co["provides"] if p["op"] == abi.ATTENTION_OP}
    from sage_co import family
    assert len(symbols) == len(family.ATTENTION_HIP) + len(family.ATTENTION_ASM)
    for co in data.values():
        for name, k in co["kernels"].items():
            if name in symbols:
                theirs = [(a["offset"], a["size"], a["value_kind"], a["name"].removesuffix(".coerce"))
                          for a in k["args"]]
                assert theirs == ours, name
                assert k["kernarg_size"] >= ATTENTION_FWD_ARGS.size == ours[-1][0] + ours[-1][1], name


def test_kv_group_magic_divides_exactly():
    for group in (1, 2, 3, 4, 5, 7, 8, 12, 40, 255, 65535):
        magic = abi.kv_group_magic(group)
        for h in list(range(0, 600)) + list(range(65536 - 600, 65536)):
            assert (h * magic) >> 32 == h // group, (group, h)
    with pytest.raises(ValueError, match="kv group"):
        abi.kv_group_magic(0)


@pytest.mark.parametrize("mutate,exc,match", [
    (lambda p: p._replace(seq_len_q=p.seq_len_q + 30), ValueError, "prepared"),
    (lambda p: p._replace(seq_len_kv=0), ValueError, "prepared.seq_len_kv"),
    (lambda p: p._replace(q_scale=p.q_scale[..., :-1]), ValueError, "prepared.q_scale"),
    (lambda p: p._replace(k_int8=p.k_int8.float()), TypeError, "prepared.k_int8"),
    (lambda p: p._replace(v_t=p.v_t.transpose(-1, -2)), ValueError, "prepared.v_t"),
    (lambda p: p._replace(v_scale=p.v_scale[:, :1, :64]), ValueError, "prepared.v_scale"),
    (lambda p: p._replace(q_int8=p.q_int8[0]), ValueError, "prepared.q_int8"),
    (lambda p: p._replace(head_dim=300), ValueError, "head_dim"),
    (lambda p: p._replace(out_dtype=torch.float64), TypeError, "prepared.out_dtype"),   # fp32 is served (issue 30)
    (lambda p: tuple(p), TypeError, "prepared"),
])
def test_bad_prepared_is_rejected_before_launch(mutate, exc, match):
    with pytest.raises(exc, match=match):
        sage_attention_fwd(mutate(_small_prepared()), backend="emu")


def test_bad_options_are_rejected():
    p = _small_prepared()
    with pytest.raises(TypeError, match="return_lse"):
        sage_attention_fwd(p, return_lse=1, backend="emu")
    with pytest.raises(ValueError, match="backend"):
        sage_attention_fwd(p, backend="cuda")
    with pytest.raises(ValueError, match="kernel: expected None or one of .* got 'no-such-kernel'"):
        sage_attention_fwd(p, backend="emu", kernel="no-such-kernel")
    with pytest.raises(ValueError, match="layout"):
        sage_attention_fwd(p, backend="emu", layout="BSHD")


def test_every_variant_is_shipped_in_both_kernels():
    for kernel in KERNELS:
        for D in abi.ATTENTION_HIP_HEAD_DIMS if kernel == "hip" else abi.ATTENTION_ASM_HEAD_DIMS:
            for dtype in abi.OUT_DTYPES:
                k = registry.find(abi.ATTENTION_OP, kernel, head_dim=D, out_dtype=dtype, pv_dtype="fp8")
                assert k.key("head_dim") == D and k.key("out_dtype") == dtype


def test_grid_covers_padded_queries():
    from sage_co.ops.attention import grid
    assert grid(_small_prepared(B=2, S_q=65, S_kv=3, H_q=3, H_kv=3)) == (2, 3, 2)
    assert math.prod(grid(_small_prepared(B=1, S_q=1, S_kv=200, H_q=1, H_kv=1))) == 1


# head dim 256 (fp8 P.V only): the asm kernel's one V^T buffer (stored after the end barrier, published by the barrier
# after the next QK^T) and its Q^T tile in LDS
@pytest.mark.parametrize("kernel,D,pv", [(k, d, pv) for pv in ("fp8", "fp16") for d in (128, 64) for k in ("hip", "asm")]
                         + [("asm", 256, "fp8"), ("hip", 256, "fp8")])
def test_lds_double_buffer_has_no_race(kernel, D, pv):
    """The emulator's LDS race checker over a 3-tile run: tile t+1 is stored into the other LDS buffer while
    tile t is read, with one barrier per tile (the headers of both kernels' sources)."""
    from sage_co import launch as launcher
    from sage_co.ops import attention

    p = _small_prepared(B=1, S_q=70, S_kv=150, H_q=2, H_kv=1, D=D, pv_dtype=pv)
    out = torch.empty(1, 70, 2, D, dtype=torch.bfloat16)
    lse = torch.empty(1, 2, 70)
    args = dict(q=p.q_int8, k=p.k_int8, v=p.v_t, q_scale=p.q_scale, k_scale=p.k_scale, k_mean=p.k_mean,
                v_scale=p.v_scale, out=out, lse=lse, seq_len_q=70, seq_pad_q=p.q_int8.shape[2], seq_len_kv=150,
                seq_pad_kv=p.k_int8.shape[2], num_heads_q=2, num_heads_kv=1, kv_group_magic=abi.kv_group_magic(2),
                out_stride_b=out.stride(0), out_stride_s=out.stride(1), out_stride_h=out.stride(2), head_dim=D,
                flags=abi.FLAG_LSE | abi.FLAG_SMOOTH_K, v_mean=p.k_mean)
    lut, lut_sb, lut_sh = masks.build_lut(masks.active_tiles(1, 2, 70, 150))
    args.update(lut=lut, lut_stride_b=lut_sb, lut_stride_h=lut_sh, causal_offset=0, mask_kind=torch.zeros_like(lut),
                mask_bits=lut, mask_bias=lut, mask_stride_b=0, mask_stride_h=0, mask_stride_s=0,   # no attn_mask
                cu_seqlens_q=lut, cu_seqlens_kv=lut)   # not varlen: never read
    symbol = registry.find(attention.OP, kernel, head_dim=D, out_dtype="bf16", pv_dtype=pv).symbol
    launcher.launch(symbol, attention.ATTENTION_FWD_ARGS, attention.grid(p), attention.BLOCK, args, backend="emu",
                    sanitize=True, lds_race_check=True)
    ref_out = reference.sage_attention_model(p)
    assert rel_l2(out, ref_out) <= MODEL_REL_L2
    assert torch.isfinite(lse).all()
