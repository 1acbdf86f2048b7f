"""Issue 25 item 8: torch.compile(fullgraph=True, dynamic=True) at real head counts. It failed for sage_attention at
every H_q >= 2 (assume_constant_result on a symbolic head count), for sage_attention_fwd at any H (an f-string of
symbolic sizes in validate.check_prepared), for sageattn (math.isfinite of a symbolic scale) and for varlen (the
lengths read in Python); the old test used H = 1, which dynamo specialises away. Compiled == eager bit for bit
(aot_eager: the graph is the ops themselves; the emulator runs the kernels)."""
from __future__ import annotations

import pytest
import torch

import sage_co
from sage_co import api

COMPILE = dict(fullgraph=True, dynamic=True, backend="aot_eager")
# (B, S_q, S_kv, H_q, H_kv, D, dtype): H 2 / 3 / 24, GQA, D 64 / 96 / 128, bf16 and fp16, lengths not multiples of 64
SHAPES = [(2, 70, 90, 2, 2, 64, torch.bfloat16), (2, 100, 77, 3, 1, 96, torch.float16),
          (1, 65, 65, 24, 8, 128, torch.bfloat16)]


def _qkv(B, S_q, S_kv, H_q, H_kv, D, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, s, h, D, generator=g).to(dtype) for s, h in ((S_q, H_q), (S_kv, H_kv), (S_kv, H_kv)))


def _same(a, b):
    if isinstance(a, tuple):
        return all(_same(x, y) for x, y in zip(a, b))
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_sage_attention_return_lse_causal():
    f = lambda q, k, v: api.sage_attention(q, k, v, return_lse=True, is_causal=True)   # noqa: E731
    c = torch.compile(f, **COMPILE)
    for shape in SHAPES:
        q, k, v = _qkv(*shape)
        assert _same(c(q, k, v), f(q, k, v)), shape


def test_sage_attention_block_mask_hnd():
    f = lambda q, k, v, bm: api.sage_attention(q, k, v, block_mask=bm, layout="HND")   # noqa: E731
    c = torch.compile(f, **COMPILE)
    for B, S_q, S_kv, H_q, H_kv, D, dt in SHAPES[:2]:
        q, k, v = (t.transpose(1, 2) for t in _qkv(B, S_q, S_kv, H_q, H_kv, D, dt, seed=1))
        bm = torch.rand(B, H_q, -(-S_q // 64), -(-S_kv // 64), generator=torch.Generator().manual_seed(2)) < 0.6
        assert _same(c(q, k, v, bm), f(q, k, v, bm))


def test_sage_attention_fwd_on_a_prepared_input():
    f = lambda p: api.sage_attention_fwd(p, return_lse=True)   # noqa: E731
    c = torch.compile(f, **COMPILE)
    for shape in SHAPES[:2]:
        p = api.sage_prepare(*_qkv(*shape, seed=3), smooth_k=True)
        assert _same(c(p), f(p)), shape


def test_sageattn():
    f = lambda q, k, v: sage_co.sageattn(q, k, v, is_causal=True)   # noqa: E731  (HND, SageAttention's default)
    c = torch.compile(f, **COMPILE)
    for shape in SHAPES[:2]:
        q, k, v = (t.transpose(1, 2).contiguous() for t in _qkv(*shape, seed=4))
        assert _same(c(q, k, v), f(q, k, v)), shape


def test_varlen():
    def f(q, k, v, cu_q, cu_kv):
        return sage_co.sage_attention_varlen(q, k, v, cu_q, cu_kv, 90, 90, is_causal=True, return_lse=True)
    c = torch.compile(f, **COMPILE)
    for H_q, H_kv, D, dt in ((2, 2, 64, torch.bfloat16), (3, 1, 96, torch.float16)):
        q, k, v = (t[0] for t in _qkv(1, 150, 160, H_q, H_kv, D, dt, seed=5))
        cu_q, cu_kv = torch.tensor([0, 70, 70, 150], dtype=torch.int32), torch.tensor([0, 90, 100, 160])
        assert _same(c(q, k, v, cu_q, cu_kv), f(q, k, v, cu_q, cu_kv))


def test_attn_mask_at_lengths_equal_to_the_head_dim():
    """Issue 39 item 7: with S_q == S_kv == D (64 here) dynamo specialises the lengths with the head dim while the
    mask's dims stay symbolic; the broadcast check (`s not in (1, w)`) refused every valid mask, for the op and for
    the SDPA router under torch.compile. Compiled == eager, bit for bit."""
    import torch.nn.functional as F

    from sage_co import sdpa
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(2, 2, 64, 64, generator=g).to(torch.bfloat16) for _ in range(3))
    masks = {"bool [S, S]": torch.rand(64, 64, generator=g) < 0.8,
             "additive [B, 1, 1, S]": torch.randn(2, 1, 1, 64, generator=g)}
    f = lambda q, k, v, m: api.sage_attention(q, k, v, layout="HND", attn_mask=m)   # noqa: E731
    c = torch.compile(f, **COMPILE)
    for name, m in masks.items():
        assert _same(c(q, k, v, m), f(q, k, v, m)), name
    torch._dynamo.reset()
    routed = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)   # noqa: E731
    sdpa.reset_stats()
    with sdpa.enabled():
        c = torch.compile(routed, **COMPILE)
        got = c(q, k, v, masks["bool [S, S]"])
    assert sdpa.stats()["routed"] >= 1 and not sdpa.stats()["fallback"], sdpa.stats()
    assert _same(got, api.sage_attention(q, k, v, layout="HND", attn_mask=masks["bool [S, S]"], smooth_k=True))
    sdpa.reset_stats()


def test_constant_result_marks_functions_as_torchs_decorator_does():
    """sage_co.tracing.constant_result sets on a function exactly what torch.compiler.assume_constant_result sets
    (so dynamo runs the manifest lookups at trace time), without importing torch._dynamo: a process that imports
    sage_co.api and runs an op eagerly never imports it (4 s of CPU per CLI run, selftest child, worker)."""
    import subprocess
    import sys

    from sage_co import tracing

    def ours():
        return 1

    def torchs():
        return 1
    assert tracing.constant_result(ours) is ours
    assert torch.compiler.assume_constant_result(torchs) is torchs
    assert ours.__dict__ == torchs.__dict__ == {tracing.MARK: True}
    code = ("import sys, torch, sage_co, sage_co.api\n"
            "q = torch.randn(2, 70, 2, 40, dtype=torch.bfloat16)\n"
            "sage_co.sage_attention(q, q, q, backend='emu')\n"
            "print('torch._dynamo' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
