"""Issue 26: variable-length batches in one launch pair (docs/numerics.md §Varlen).

The attention kernels' varlen path (both kernels, on a packed structure assembled from per-sequence reference
prepares: tests/varlen_cases.py), the packed prepare kernels (against the same per-sequence reference prepares) and
the whole sage_attention_varlen call, each bitwise against the per-sequence calls (output and LSE), on the emulator
with its sanitizer on. Lengths from {0, 1, 31, 33, 64, 77, 333, 1000}, S_q != S_kv per sequence, causal and not,
GQA, bf16/fp16, pv_dtype fp16, smooth_k / smooth_v. The launch count and the absence of a host sync are in
tests/ops/test_gpu_backend_stub_runtime.py (the stub runtime records every call)."""
from __future__ import annotations

import pytest
import torch

import sage_co
from sage_co import abi, accuracy, launch, reference
from sage_co.ops import attention as attention_ops
from sage_co.api import sage_attention_fwd
from sage_co.varlen import SAGE_ATTENTION_VARLEN

from varlen_cases import pack_prepared, packed_inputs, per_sequence

KERNELS = ("hip", "asm")


def _bits(t):
    return t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)


def _same(a, b):
    return torch.equal(_bits(a), _bits(b))


# (lens_q, lens_kv, H_q, H_kv, D, dtype, is_causal, smooth_k, smooth_v, pv_dtype)
KERNEL_CASES = [
    ([33, 0, 77, 1], [64, 31, 0, 100], 4, 2, 64, torch.bfloat16, True, True, False, "fp8"),
    ([1, 31, 64], [333, 33, 1], 2, 1, 128, torch.float16, False, False, False, "fp16"),
    ([77, 31, 0], [33, 77, 5], 3, 1, 64, torch.bfloat16, True, False, True, "fp8"),
    ([33, 0, 77], [100, 31, 150], 2, 1, 200, torch.bfloat16, True, True, True, "fp8"),   # D_pad 256
]
KERNEL_IDS = ["causal-gqa-smoothk-empty", "fp16-pv16-mqa", "causal-smoothv", "d200-causal-smoothk-smoothv"]


@pytest.fixture(scope="module")
def kernel_runs():
    cache = {}

    def run(case, kernel):
        key = (KERNEL_CASES.index(case), kernel)
        if key not in cache:
            lq, lk, H_q, H_kv, D, dt, causal, sk, sv, pv = case
            q, k, v, cq, ck = packed_inputs(lq, lk, H_q, H_kv, D, dt, k_offset=sk)
            pk = pack_prepared(q, k, v, cq, ck, smooth_k=sk, smooth_v=sv, pv_dtype=pv)
            opts = SAGE_ATTENTION_VARLEN.typed({**SAGE_ATTENTION_VARLEN.defaults, "return_lse": True,
                                                "is_causal": causal, "kernel": kernel, "pv_dtype": pv,
                                                "smooth_v": sv, "smooth_k": sk})
            rec = attention_ops.varlen_recipe(
                opts, batch=len(lq), max_seqlen_q=max(lq), total_q=sum(lq), total_kv=sum(lk), H_q=H_q, H_kv=H_kv,
                D=D, dtype=dt, backend="emu")
            launch.launched.clear()   # a bounded deque (maxlen 256): full after a long run, its length would stop growing
            before = len(launch.launched)
            out, lse = attention_ops.execute_varlen(rec, pk)
            assert len(launch.launched) - before == 1                  # every sequence in one launch

            def one(qb, kb, vb):
                p = reference.sage_prepare(qb, kb, vb, smooth_k=sk, smooth_v=sv, pv_dtype=pv)
                return sage_attention_fwd(p, return_lse=True, kernel=kernel, is_causal=causal, backend="emu")
            cache[key] = (out, lse, *per_sequence(q, k, v, cq, ck, one))
        return cache[key]
    return run


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("case", KERNEL_CASES, ids=KERNEL_IDS)
def test_attention_kernel_varlen_equals_per_sequence_launches(case, kernel, kernel_runs):
    out, lse, ref_out, ref_lse = kernel_runs(case, kernel)
    assert _same(out, ref_out), (out.float() - ref_out.float()).abs().max()
    assert _same(lse, ref_lse)
    lq, lk = case[0], case[1]
    cq = [0, *torch.tensor(lq).cumsum(0).tolist()]
    for b in range(len(lq)):       # sequences without keys: zeros and -inf
        if lk[b] == 0:
            assert (out[cq[b]:cq[b + 1]] == 0).all() and (lse[:, cq[b]:cq[b + 1]] == float("-inf")).all()


@pytest.mark.parametrize("case", KERNEL_CASES, ids=KERNEL_IDS)
def test_hip_and_asm_varlen_are_bitwise_equal(case, kernel_runs):
    (o1, l1, *_), (o2, l2, *_) = kernel_runs(case, "hip"), kernel_runs(case, "asm")
    assert _same(o1, o2) and _same(l1, l2)


def test_varlen_flag_and_fields_are_in_the_abi():
    names = [f.name for f in abi.ATTENTION_FWD_ARGS.fields]
    assert names[-2:] == ["cu_seqlens_q", "cu_seqlens_kv"] and abi.FLAG_VARLEN == 32
    # after the attn_mask fields and flag (issue 30): both features keep their own bit and kernargs
    assert abi.FLAG_VARLEN & abi.FLAG_MASK == 0 and names.index("cu_seqlens_q") > names.index("mask_stride_s")
    # packed rows: every sequence starts on a key tile and ends before the next one starts
    cu = [0, 1, 1, 64, 65, 200, 1200]
    for b in range(len(cu) - 1):
        start, pad = abi.packed_row(cu[b], b), -(-(cu[b + 1] - cu[b]) // 64) * 64
        assert start % 64 == 0 and start + pad <= abi.packed_row(cu[b + 1], b + 1) <= abi.packed_rows(cu[-1], len(cu) - 1)


# ---------------------------------------------------------------------------------------------- packed prepare
@pytest.mark.parametrize("smooth_k, smooth_v, pv_dtype, dtype, D", [
    (True, False, "fp8", torch.bfloat16, 64), (False, True, "fp8", torch.float16, 64),
    (True, False, "fp16", torch.bfloat16, 64), (True, True, "fp8", torch.bfloat16, 160)])   # 160: D_pad 256
def test_packed_prepare_equals_per_sequence_reference(smooth_k, smooth_v, pv_dtype, dtype, D):
    from sage_co.ops import prepare as prepare_ops
    from sage_co import validate
    lq, lk = [31, 0, 77, 1], [64, 33, 0, 100]
    q, k, v, cq, ck = packed_inputs(lq, lk, 4, 2, D, dtype, seed=3, k_offset=True)
    chk = validate.check_prepare_args(q[None], k[None], v[None], None, smooth_k=smooth_k, smooth_v=smooth_v,
                                      pv_dtype=pv_dtype)
    sh = chk.shapes._replace(B=len(lq), S_q=max(lq), S_kv=max(lk))
    opts = SAGE_ATTENTION_VARLEN.typed({**SAGE_ATTENTION_VARLEN.defaults, "smooth_k": smooth_k,
                                        "smooth_v": smooth_v, "pv_dtype": pv_dtype})
    rec = prepare_ops.recipe(chk._replace(shapes=sh), opts, backend="emu", packed=(sum(lq), sum(lk)))
    launch.launched.clear()   # a bounded deque (maxlen 256): full after a long run, its length would stop growing
    before = len(launch.launched)
    got = prepare_ops.execute_varlen(rec, q, k, v, cq, ck, total_q=sum(lq), max_seqlen_q=max(lq),
                                     max_seqlen_kv=max(lk))
    n_launches = len(launch.launched) - before
    assert n_launches == 1      # one prepare launch (statistics, fold, quantization), independent of the batch size
    want = pack_prepared(q, k, v, cq, ck, smooth_k=smooth_k, smooth_v=smooth_v, pv_dtype=pv_dtype)
    cqs, cks = cq.tolist(), ck.tolist()
    for b in range(len(lq)):   # each sequence's padded rows (what the attention kernel reads)
        if lq[b] == 0:
            continue           # no queries: nothing of it is read (pack_prepared leaves it out)
        rq, nq = abi.packed_row(cqs[b], b), -(-lq[b] // 64) * 64
        rk, nk = abi.packed_row(cks[b], b), -(-lk[b] // 64) * 64
        for name, lo, n, dim in (("q_int8", rq, nq, 1), ("q_scale", rq // 32, nq // 32, 1),
                                 ("k_int8", rk, nk, 1), ("k_scale", rk // 32, nk // 32, 1), ("v_t", rk, nk, 2)):
            g, w = getattr(got, name).narrow(dim, lo, n), getattr(want, name).narrow(dim, lo, n)
            assert torch.equal(g.view(torch.uint8) if g.element_size() == 1 else g.view(torch.int16)
                               if g.element_size() == 2 else g.view(torch.int32),
                               w.view(torch.uint8) if w.element_size() == 1 else w.view(torch.int16)
                               if w.element_size() == 2 else w.view(torch.int32)), (name, b)
        if lk[b]:
            for name in ("k_mean", "v_scale") + (("v_mean",) if smooth_v else ()):
                assert _same(getattr(got, name)[b], getattr(want, name)[b]), (name, b)
        else:   # no keys: finite zero statistics (the attention epilogue reads v_scale)
            assert (got.v_scale[b] == 0).all() and (got.k_mean[b] == 0).all()
    if smooth_k:
        assert _same(got.lse_corr, want.lse_corr)


# ---------------------------------------------------------------------------------------------- the whole call
CALL_CASES = [   # (lens_q, lens_kv, H_q, H_kv, D, dtype, options)
    ([77, 0, 1, 333, 31], [33, 64, 0, 31, 77], 2, 1, 64, torch.bfloat16, dict(is_causal=True, smooth_k=True)),
    ([1, 64, 33], [1000, 1, 64], 2, 2, 128, torch.float16, dict(pv_dtype="fp16")),
    ([31, 77, 64], [77, 31, 33], 4, 2, 64, torch.bfloat16, dict(smooth_v=True, smooth_k=True)),
    ([33, 1], [0, 33], 2, 1, 128, torch.bfloat16, dict(is_causal=True)),
]
CALL_IDS = ["causal-smoothk-empty", "fp16-pv16-1000keys", "smoothv-smoothk-gqa", "causal-nokeys"]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("case", CALL_CASES, ids=CALL_IDS)
def test_varlen_call_equals_per_sequence_calls(case, kernel):
    lq, lk, H_q, H_kv, D, dt, opts = case
    q, k, v, cq, ck = packed_inputs(lq, lk, H_q, H_kv, D, dt, seed=7, k_offset=opts.get("smooth_k", False))
    launch.launched.clear()   # a bounded deque (maxlen 256): full after a long run, its length would stop growing
    before = len(launch.launched)
    out, lse = sage_co.sage_attention_varlen(q, k, v, cq, ck, max(lq), max(lk), return_lse=True, kernel=kernel,
                                             backend="emu", **opts)
    assert len(launch.launched) - before <= 5           # a fixed number of launches for the whole batch
    assert out.shape == q.shape and lse.shape == (H_q, sum(lq))

    def one(qb, kb, vb):
        return sage_co.sage_attention(qb, kb, vb, return_lse=True, kernel=kernel, backend="emu", **opts)
    ref_out, ref_lse = per_sequence(q, k, v, cq, ck, one)
    assert _same(out, ref_out), (out.float() - ref_out.float()).abs().max()
    assert _same(lse, ref_lse)


@pytest.mark.parametrize("kernel", KERNELS)
def test_varlen_fp32_inputs_equal_per_sequence_calls(kernel):
    """fp32 q/k/v (issue 30's fp32 prepare: its V passes and fp32 V statistics read each sequence's own tokens) and
    fp32 out, packed = per sequence, bit for bit."""
    lq, lk = [33, 1, 70], [40, 77, 5]
    q, k, v, cq, ck = packed_inputs(lq, lk, 2, 1, 64, torch.float32, seed=3)
    out, lse = sage_co.sage_attention_varlen(q, k, v, cq, ck, max(lq), max(lk), return_lse=True, is_causal=True,
                                             kernel=kernel, backend="emu")
    ref_out, ref_lse = per_sequence(q, k, v, cq, ck, lambda qb, kb, vb: sage_co.sage_attention(
        qb, kb, vb, return_lse=True, is_causal=True, kernel=kernel, backend="emu"))
    assert out.dtype == torch.float32 and _same(out, ref_out) and _same(lse, ref_lse)


def test_varlen_call_is_close_to_the_fp32_reference():
    lq, lk = [77, 31, 1], [33, 100, 64]
    q, k, v, cq, ck = packed_inputs(lq, lk, 2, 1, 64, torch.bfloat16, seed=2)
    out = sage_co.sage_attention_varlen(q, k, v, cq, ck, 77, 100, is_causal=True, backend="emu")
    ref, _ = per_sequence(q, k, v, cq, ck, lambda qb, kb, vb: (
        reference.attention_fp32(qb, kb, vb, is_causal=True), torch.zeros(1, 2, qb.shape[1])))
    assert accuracy.within_contract(accuracy.metrics(out, ref))


def test_varlen_launch_count_does_not_grow_with_the_batch():
    counts = []
    for lens in ([40], [5, 0, 9, 1, 3, 7, 2, 13]):
        q, k, v, cq, ck = packed_inputs(lens, lens, 2, 1, 64, torch.bfloat16)
        launch.launched.clear()   # a bounded deque (maxlen 256): full after a long run, its length would stop growing
        before = len(launch.launched)
        sage_co.sage_attention_varlen(q, k, v, cq, ck, max(lens), max(lens), backend="emu")
        counts.append(len(launch.launched) - before)
    assert counts[0] == counts[1] <= 5, counts


def test_varlen_refuses_attn_mask_naming_it():
    """attn_mask is not a varlen option (docs/numerics.md §Varlen): refused before any kernel runs."""
    q, k, v, cq, ck = packed_inputs([5, 9], [7, 3], 2, 1, 64, torch.bfloat16)
    launch.launched.clear()   # a bounded deque (maxlen 256): full after a long run, its length would stop growing
    before = len(launch.launched)
    with pytest.raises(TypeError, match="attn_mask"):
        sage_co.sage_attention_varlen(q, k, v, cq, ck, 9, 7, backend="emu",
                                      attn_mask=torch.ones(1, 1, 9, 7, dtype=torch.bool))
    assert len(launch.launched) == before


def test_varlen_takes_attn_mask_none():
    """Issue 39 item 9: attn_mask=None asks for no mask (LightX2V's varlen path passes it): the call runs, equal to
    the call without it, through sage_attention_varlen and SageAttention's sageattn_varlen."""
    q, k, v, cq, ck = packed_inputs([50, 77], [66, 41], 2, 1, 48, torch.bfloat16)
    for fn in (sage_co.sage_attention_varlen, sage_co.sageattn_varlen):
        assert torch.equal(fn(q, k, v, cq, ck, 77, 66, attn_mask=None), fn(q, k, v, cq, ck, 77, 66)), fn.__name__


def test_varlen_reads_cu_seqlens_on_the_host_only_on_the_emulator(monkeypatch):
    """The value checks (host memory on the emulator) are the only host reads: on a device backend the call
    never calls validate.check_cu_seqlens (tests/ops/test_gpu_backend_stub_runtime.py runs the hip path with reads
    forbidden)."""
    from sage_co import validate
    calls = []
    real = validate.check_cu_seqlens
    monkeypatch.setattr(validate, "check_cu_seqlens", lambda *a, **kw: calls.append(a[0]) or real(*a, **kw))
    q, k, v, cq, ck = packed_inputs([5, 9], [7, 3], 2, 1, 64, torch.bfloat16)
    sage_co.sage_attention_varlen(q, k, v, cq, ck, 9, 7, backend="emu")
    assert calls == ["cu_seqlens_q", "cu_seqlens_kv"]
    with pytest.raises(ValueError, match="max_seqlen_q"):
        sage_co.sage_attention_varlen(q, k, v, cq, ck, 8, 7, backend="emu")


def test_varlen_model_walks_the_kernels_tiles():
    """tools/perfmodel/varlen.py (docs/performance.md §Varlen) counts each workgroup's key tiles as the kernels do
    (causal: sage_co.masks.causal_tiles per sequence) and schedules them on the WGPs."""
    from perfmodel import varlen as vm
    from sage_co import masks
    assert vm.workgroup_tiles([100, 0, 64], [70, 5, 200], H=2) == [2, 2, 2, 2, None, None, None, None,
                                                                    4, None, 4, None]
    lq, lk = [100, 333, 1, 77], [100, 64, 1000, 31]
    got = vm.workgroup_tiles(lq, lk, H=1, causal=True)
    nx = -(-max(lq) // 64)
    for b in range(len(lq)):
        want = masks.causal_tiles(lq[b], lk[b]).sum(-1).tolist()
        row = got[b * nx:(b + 1) * nx]
        assert row[:len(want)] == want and all(t is None for t in row[len(want):]), (b, row, want)
    assert vm.schedule_clocks([1] * 64, 1.0, 0.0, 0.0) == 2.0         # 64 equal workgroups on 32 WGPs
    assert vm.schedule_clocks([None] * 32 + [3], 1.0, 0.5, 0.25) == 0.25 + 3.5   # exits first, one per WGP
