"""sage_co.sageattn / sageattn_varlen: SageAttention's contract on sage-co's op (emulator on CPU)."""
from __future__ import annotations

import pytest
import torch

import sage_co
from sage_co import accuracy, compat

from .fp32ref import attention_fp32

B, S, H = 1, 100, 2  # S = 100: one full 64-token tile and a tail


def _qkv(dist="randn", S=S, H=H, seed=0):
    return accuracy.make_inputs(dist, B, S, H, seed=seed)  # bf16 NHD [B, S, H, 128]


def _hnd(*ts):
    return tuple(t.transpose(1, 2).contiguous() for t in ts)


def test_nhd_is_the_op_bitwise():
    q, k, v = _qkv()
    out, lse = sage_co.sageattn(q, k, v, tensor_layout="NHD", return_lse=True)
    ref_out, ref_lse = sage_co.sage_attention(q, k, v, 128 ** -0.5, smooth_k=True, return_lse=True)
    assert out.dtype == torch.bfloat16 and out.shape == q.shape
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)


def test_hnd_matches_nhd_bitwise_and_layout():
    q, k, v = _qkv()
    out_nhd = sage_co.sageattn(q, k, v, tensor_layout="NHD")
    out_hnd, lse = sage_co.sageattn(*_hnd(q, k, v), return_lse=True)  # HND is the default, as upstream
    assert out_hnd.shape == (B, H, S, 128) and out_hnd.is_contiguous()
    assert lse.shape == (B, H, S) and lse.dtype == torch.float32
    assert torch.equal(out_hnd, out_nhd.transpose(1, 2))


def test_strided_hnd_view_of_nhd_memory():
    q, k, v = _qkv()
    views = tuple(t.transpose(1, 2) for t in (q, k, v))  # HND views, not contiguous
    assert torch.equal(sage_co.sageattn(*views), sage_co.sageattn(q, k, v, tensor_layout="NHD").transpose(1, 2))


def test_accuracy_and_lse_is_unsmoothed_vs_fp32():
    """k_offset (a per-channel K offset, what smooth_k is for): output within the accuracy contract and the LSE of
    the *original* scores. Bound 0.2 on |lse - fp32 logsumexp|: docs/numerics.md §LSE measures up to 0.14 on
    k_offset (the int8 rounding of q times the large q.k_mean term). The smoothed-score LSE differs by |q.k_mean|*
    scale, several units here, so returning it would fail."""
    q, k, v = _qkv("k_offset")
    out, lse = sage_co.sageattn(q, k, v, tensor_layout="NHD", return_lse=True, smooth_k=True)
    ref_out, ref_lse = attention_fp32(q, k, v)
    m = accuracy.metrics(out, ref_out)
    assert accuracy.within_contract(m), m
    err = (lse - ref_lse).abs().max().item()
    assert err <= 0.2, err
    smoothed = attention_fp32(q, k - k.float().mean(dim=1, keepdim=True).to(k.dtype), v)[1]
    assert (smoothed - ref_lse).abs().max().item() > 1.0  # the correction matters on this input


def test_sm_scale_default_and_aliases():
    q, k, v = _qkv()
    base = sage_co.sageattn(q, k, v, tensor_layout="NHD", sm_scale=0.05)
    assert torch.equal(base, sage_co.sage_attention(q, k, v, 0.05, smooth_k=True))
    assert torch.equal(base, sage_co.sageattn(q, k, v, tensor_layout="NHD", softmax_scale=0.05))
    assert torch.equal(base, sage_co.sageattn(q, k, v, tensor_layout="NHD", scale=0.05, sm_scale=0.05))
    assert not torch.equal(base, sage_co.sageattn(q, k, v, tensor_layout="NHD"))  # default D**-0.5 differs
    with pytest.raises(ValueError, match="softmax_scale"):
        sage_co.sageattn(q, k, v, tensor_layout="NHD", sm_scale=0.1, softmax_scale=0.2)


def test_noop_spellings_accepted_and_change_nothing():
    q, k, v = _qkv(S=40)
    base = sage_co.sageattn(q, k, v, tensor_layout="NHD")
    same = sage_co.sageattn(q, k, v, tensor_layout="NHD", attn_mask=None, dropout_p=0.0, pv_accum_dtype="fp32",
                            qk_quant_gran="per_warp", smooth_v=False, window_size=(-1, -1), softcap=0.0,
                            alibi_slopes=None, return_softmax=False, deterministic=True, causal=False,
                            quantization_backend="cuda", enable_gqa=False)
    assert torch.equal(base, same)


@pytest.mark.parametrize("kw, exc, name", [
    ({"attn_mask": torch.ones(3, 5)}, ValueError, "attn_mask"),      # does not broadcast to [B, H, 8, 8]
    ({"attn_mask": torch.ones(8, 8, dtype=torch.int32)}, TypeError, "attn_mask"),
    ({"dropout_p": 0.1}, ValueError, "dropout_p"),
    ({"pv_accum_dtype": "fp16"}, ValueError, "pv_accum_dtype"),
    ({"qk_quant_gran": "per_thread"}, ValueError, "qk_quant_gran"),
    ({"smooth_v": 1}, TypeError, "smooth_v"),
    ({"smooth_v": True, "pv_dtype": "fp16"}, ValueError, "smooth_v"),
    ({"pv_dtype": "int4"}, ValueError, "pv_dtype"),
    ({"value_dtype": "fp16", "pv_dtype": "fp8"}, ValueError, "pv_dtype"),
    ({"window_size": (128, 128)}, ValueError, "window_size"),
    ({"softcap": 30.0}, ValueError, "softcap"),
    ({"return_softmax": True}, ValueError, "return_softmax"),
    ({"no_such_option": 1}, TypeError, "no_such_option"),
    ({"tensor_layout": "BSHD"}, ValueError, "tensor_layout"),
])
def test_unsupported_keywords_name_the_keyword(kw, exc, name):
    q, k, v = _qkv(S=8)
    kw = {"tensor_layout": "NHD", **kw}
    with pytest.raises(exc, match=name):
        sage_co.sageattn(q, k, v, **kw)


def test_causal_is_the_op():
    q, k, v = _qkv(S=8)
    assert compat.op_supports("is_causal")
    ref = sage_co.sage_attention(q, k, v, is_causal=True, smooth_k=True)   # sageattn defaults to smooth_k
    for kw in ({"is_causal": True}, {"causal": True}):
        assert torch.equal(sage_co.sageattn(q, k, v, tensor_layout="NHD", **kw), ref)


def test_varlen_is_the_op():
    q = torch.randn(10, 2, 128).bfloat16()
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    out = sage_co.sageattn_varlen(q, q, q, cu, cu, 6, 6, is_causal=True)
    assert torch.equal(out, sage_co.sage_attention_varlen(q, q, q, cu, cu, 6, 6, is_causal=True, smooth_k=True))
    with pytest.raises(ValueError, match="dropout_p"):  # keywords are still checked first
        sage_co.sageattn_varlen(q, q, q, cu, cu, 6, 6, dropout_p=0.5)


# Shapes of issue 13 (fp16, head dim 64/96, S_q != S_kv, GQA), served natively by the op (never emulated here).
ISSUE13 = [  # (name, dtype, D, S_q, S_kv, H_q, H_kv)
    ("fp16", torch.float16, 128, 64, 64, 2, 2),
    ("head_dim_64", torch.bfloat16, 64, 64, 64, 2, 2),
    ("head_dim_96", torch.bfloat16, 96, 40, 40, 2, 2),
    ("cross_attention", torch.bfloat16, 128, 70, 33, 2, 2),
    ("gqa", torch.bfloat16, 128, 64, 64, 4, 2),
    ("mqa_hnd", torch.bfloat16, 128, 64, 64, 2, 1),
]


def _issue13_inputs(dtype, D, S_q, S_kv, H_q, H_kv, layout):
    g = torch.Generator().manual_seed(1)
    shape = (lambda S, Hh: (B, Hh, S, D)) if layout == "HND" else (lambda S, Hh: (B, S, Hh, D))
    q = torch.randn(*shape(S_q, H_q), generator=g).to(dtype)
    k, v = (torch.randn(*shape(S_kv, H_kv), generator=g).to(dtype) for _ in range(2))
    return q, k, v


@pytest.mark.parametrize("case", ISSUE13, ids=[c[0] for c in ISSUE13])
def test_issue13_shapes(case):
    name, dtype, D, S_q, S_kv, H_q, H_kv = case
    layout = "HND" if name.endswith("hnd") else "NHD"
    q, k, v = _issue13_inputs(dtype, D, S_q, S_kv, H_q, H_kv, layout)
    out, lse = sage_co.sageattn(q, k, v, tensor_layout=layout, return_lse=True)
    ref_out, ref_lse = attention_fp32(q, k, v, layout=layout)
    assert out.dtype == dtype and out.shape == q.shape and lse.shape == (B, H_q, S_q)
    pad = (0, 128 - D)  # accuracy.metrics takes 128-vectors: zero channels add nothing to any metric
    m = accuracy.metrics(torch.nn.functional.pad(out.float(), pad), torch.nn.functional.pad(ref_out, pad))
    assert accuracy.within_contract(m), m
    assert (lse - ref_lse).abs().max().item() <= 0.05
