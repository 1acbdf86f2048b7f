"""sage_co.integrations.xdit: xDiT's attention-backend contract, and yunchang's LongContextAttention for real
(gloo, 2 processes) with sage-co's ring processor."""
from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.multiprocessing as mp

import sage_co
from sage_co import accuracy
from sage_co.integrations.xdit import SageCoRingProcessor, register_xdit, xdit_attention

from . import dist_worker
from .fp32ref import attention_fp32
from .ring_bounds import RING_REL_L2


def _hnd(S=70, H=2):
    q, k, v = accuracy.make_inputs("randn", 1, S, H)
    return tuple(t.transpose(1, 2).contiguous() for t in (q, k, v))  # [B, H, S, D]


def test_xdit_function_contract():
    q, k, v = _hnd()
    out, lse = xdit_attention(q, k, v, 0.0, False, attention_kwargs=None)
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == q.shape[:3] and lse.dtype == torch.float32
    ref_out, ref_lse = sage_co.sageattn(q, k, v, return_lse=True)  # HND, xDiT's layout
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
    # the unpacked varlen keys xDiT may leave in attention_kwargs are accepted when nothing is packed
    out2, _ = xdit_attention(q, k, v, 0.0, False, {"attn_mask": None, "indices_k": None, "cu_seqlens_k": None})
    assert torch.equal(out2, out)


@pytest.mark.parametrize("args, exc, name", [
    ((0.1, False, None), ValueError, "dropout_p"),
    ((0.0, False, {"attn_mask": torch.ones(3)}), ValueError, "attn_mask"),   # S_kv is 8: does not broadcast
    ((0.0, False, {"indices_k": torch.arange(3)}), ValueError, "cu_seqlens_k and max_seqlen_k"),
    ((0.0, False, {"tile_size": (4, 4, 4)}), TypeError, "tile_size"),
])
def test_xdit_function_refuses_what_it_cannot_do(args, exc, name):
    q, k, v = _hnd(S=8)
    with pytest.raises(exc, match=name):
        xdit_attention(q, k, v, *args)


@pytest.mark.parametrize("is_causal", [False, True])
def test_xdit_packed_kv_is_the_varlen_call(is_causal):
    """Issue 26: xDiT's packed K/V (indices_k, cu_seqlens_k, max_seqlen_k, as its _varlen_pack_keys builds them:
    each batch's unmasked keys) runs one varlen call; per batch it is sageattn on that batch's kept keys, bitwise."""
    B, H, S, S_k, D = 2, 2, 40, 50, 64
    g = torch.Generator().manual_seed(11)
    q = torch.randn(B, H, S, D, generator=g).to(torch.bfloat16)
    k, v = (torch.randn(B, H, S_k, D, generator=g).to(torch.bfloat16) for _ in range(2))
    keep = [torch.arange(0, 33), torch.arange(5, 50, 2)]          # per batch: the key positions kept
    indices_k = torch.cat([b * S_k + kb for b, kb in enumerate(keep)])
    cu_k = torch.tensor([0, len(keep[0]), len(keep[0]) + len(keep[1])], dtype=torch.int32)
    out, lse = xdit_attention(q, k, v, 0.0, is_causal, {"indices_k": indices_k, "cu_seqlens_k": cu_k,
                                                        "max_seqlen_k": max(len(x) for x in keep), "attn_mask": None})
    assert out.shape == q.shape and lse.shape == (B, H, S)
    for b, kb in enumerate(keep):
        ro, rl = sage_co.sageattn(q[b:b + 1], k[b:b + 1, :, kb], v[b:b + 1, :, kb], is_causal=is_causal,
                                  return_lse=True)
        assert torch.equal(out[b:b + 1].view(torch.int16), ro.view(torch.int16)) and torch.equal(lse[b:b + 1], rl)


def test_register_in_xdit():
    if importlib.util.find_spec("xfuser") is None:
        pytest.skip("xfuser is not installed: it installs on CPU but (with triton) refuses to import without a GPU "
                    "('No Accelerators ... available'), so CI does not install it")
    try:
        from xfuser.core.distributed import attention_backend as ab
    except (ImportError, NotImplementedError) as e:  # xfuser raises NotImplementedError without a GPU
        pytest.skip(f"xfuser's attention backends do not import on this machine: {e}")
    register_xdit(force=True)
    assert ab.ATTENTION_FUNCTION_REGISTRY[ab.AttentionBackendType.SAGE] is xdit_attention


def test_ring_processor_contract():
    """yunchang's per-step call: NHD blocks and flash-attn-style keywords, (out, lse [B, H, S]) back."""
    q, k, v = accuracy.make_inputs("randn", 1, 70, 2)
    out, lse = SageCoRingProcessor()(q, k, v, dropout_p=0.0, softmax_scale=128 ** -0.5, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, return_softmax=False)
    ref_out, ref_lse = sage_co.sageattn(q, k, v, tensor_layout="NHD", return_lse=True)
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse) and lse.shape == (1, 2, 70)
    with pytest.raises(ValueError, match="softcap"):
        SageCoRingProcessor()(q, k, v, softcap=50.0)


S_R, H, W = 64, 2, 2


@pytest.fixture(scope="module")
def yunchang_runs(tmp_path_factory):
    pytest.importorskip("yunchang", reason="yunchang is not installed (pip install -e '.[test]')")
    d = tmp_path_factory.mktemp("yunchang")
    mp.spawn(dist_worker.run_yunchang, args=(W, str(d / "init"), str(d), S_R, H), nprocs=W, join=True)
    full = dist_worker.full_inputs(S_R * W, H)
    return {name: torch.cat([torch.load(d / f"yunchang_{name}.{r}.pt") for r in range(W)], dim=1)
            for name in ("ring", "ulysses")}, full


def test_yunchang_ulysses_is_the_op_bitwise(yunchang_runs):
    """yunchang's Ulysses (ring degree 1): one processor call on all tokens of H/W heads, merged once (fp32 and
    back, exact), so it is the single-process op bit for bit."""
    runs, (q, k, v) = yunchang_runs
    assert torch.equal(runs["ulysses"], sage_co.sage_attention(q, k, v, smooth_k=True))


def test_yunchang_ring_with_sage_co_processor(yunchang_runs):
    """yunchang's own ring loop and merge around sage-co's processor. Bounds and why not bitwise: as for
    sage_co.parallel's ring (tests/integrations/test_parallel.py): per-shard quantization, bf16 partials."""
    runs, (q, k, v) = yunchang_runs
    out = runs["ring"]
    ref = sage_co.sage_attention(q, k, v, smooth_k=True)
    assert out.shape == ref.shape and out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    rel = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
    assert rel <= RING_REL_L2, rel
    assert accuracy.within_contract(accuracy.metrics(out, attention_fp32(q, k, v)[0]))
