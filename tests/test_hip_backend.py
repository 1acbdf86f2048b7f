"""The hip-python backend on a real gfx1201 (skipped elsewhere, with the reason): the same checks as on the
emulator, the GPU result equal to the emulator's bit for bit, and a launch on a non-default stream."""
import pytest
import torch

import sage_co
from sage_co import reference

pytestmark = pytest.mark.gfx1201


def qkv(B, S, H, seed=0, device="cuda"):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, S, H, 128, generator=g).to(torch.bfloat16).to(device) for _ in range(3))


@pytest.mark.parametrize("S", [1, 33, 200, 1000])
@pytest.mark.parametrize("smooth_k", [False, True])
def test_prepare_bitwise_against_reference(S, smooth_k):
    q, k, v = qkv(2, S, 3)
    got = sage_co.sage_prepare(q, k, v, smooth_k=smooth_k)
    ref = reference.sage_prepare(q.cpu(), k.cpu(), v.cpu(), smooth_k=smooth_k)
    for name in ("q_int8", "q_scale", "v_fp8", "v_scale"):
        assert torch.equal(getattr(got, name).cpu().view(torch.uint8) if name == "v_fp8" else getattr(got, name).cpu(),
                           getattr(ref, name).view(torch.uint8) if name == "v_fp8" else getattr(ref, name)), name


@pytest.mark.parametrize("kernel", ["hip", None])
@pytest.mark.parametrize("S", [17, 257, 4096])
def test_attention_gpu_equals_emulator_and_meets_contract(S, kernel):
    from sage_co import accuracy
    q, k, v = qkv(1, S, 2)
    out = sage_co.sage_attention(q, k, v, kernel=kernel)
    m = accuracy.metrics(out.cpu(), reference.attention_fp32(q.cpu(), k.cpu(), v.cpu()))
    assert accuracy.within_contract(m), m
    if S <= 257:
        emu = sage_co.sage_attention(q.cpu(), k.cpu(), v.cpu(), kernel=kernel, backend="emu")
        assert torch.equal(out.cpu(), emu)


def test_non_default_stream():
    q, k, v = qkv(1, 300, 2)
    base = sage_co.sage_attention(q, k, v)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        out = sage_co.sage_attention(q, k, v)
    stream.synchronize()
    assert torch.equal(out, base)
