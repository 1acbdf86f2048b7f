"""The host never breaks (sage_co.hostsafe): a GPU binding that fails to load, or a launch that raises HipError,
inside the SDPA router, the ComfyUI node, the sageattention shim's functions or an adapter becomes a fallback to the
host's attention, with the reason counted in sage_co.sdpa.stats() and logged once; a direct sage-co call raises.

The failing launch is real launch() machinery with a backend whose run() raises HipError as the gpu backend does
when hipModuleLaunchKernel fails; the failing binding is the real ctypes binding in a process where no HIP runtime is
loaded. The fallback's results are checked against an fp64 softmax written here (not torch's SDPA)."""
from __future__ import annotations

import logging
import math

import pytest
import torch

import sage_co
from sage_co import hostsafe, launch, sdpa
from sage_co.backends.emu import EmuBackend
from sage_co.backends.hip_runtime import HipError

LAUNCH_FAILURE = "gpu: hipModuleLaunchKernel failed (hipError_t 719)"


class FailingLaunches:
    """The emu backend with every launch failing as a gpu launch does (hipErrorLaunchFailure); counts the tries."""
    name = "emu"
    options = EmuBackend.options

    def __init__(self):
        self.tries = 0

    @staticmethod
    def device_problem(tensor):
        return EmuBackend.device_problem(tensor)

    def run(self, kl):
        self.tries += 1
        raise HipError(f"hipModuleLaunchKernel({kl.plan.symbol}, ...) failed: hipError_t 719 (hipErrorLaunchFailure)",
                       call="hipModuleLaunchKernel", code=719)

    def warmup(self, plans, device=None):
        pass


@pytest.fixture
def failing():
    sdpa.reset_stats()
    be = FailingLaunches()
    previous = launch.use_backend("emu", be)
    try:
        yield be
    finally:
        launch.use_backend("emu", previous)
        sdpa.reset_stats()


def qkv(B=2, H_q=4, H_kv=2, S_q=77, S_kv=100, D=64, layout="HND", seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    shape = (lambda H, S: (B, H, S, D)) if layout == "HND" else (lambda H, S: (B, S, H, D))
    return (torch.randn(shape(H_q, S_q), generator=g).to(dtype), torch.randn(shape(H_kv, S_kv), generator=g).to(dtype),
            torch.randn(shape(H_kv, S_kv), generator=g).to(dtype))


def oracle(q, k, v, scale, causal=False, mask=None):
    """fp64 softmax attention on [B, H, S, D] with sage-co's conventions (bottom-right causal, GQA, dead rows 0,
    LSE -inf there): (out, lse)."""
    q, k, v = (t.double() for t in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    s = q @ k.transpose(-1, -2) * scale
    S_q, S_kv = s.shape[-2:]
    keep = torch.ones_like(s, dtype=torch.bool)
    if causal:
        keep &= torch.arange(S_kv)[None, :] <= torch.arange(S_q)[:, None] + (S_kv - S_q)
    if mask is not None and mask.dtype == torch.bool:
        keep = keep & mask
    elif mask is not None:
        s = s + mask.double()
    s = s.masked_fill(~keep, -math.inf)
    lse = torch.logsumexp(s, -1)
    p = torch.where(torch.isneginf(lse)[..., None], torch.zeros_like(s), torch.exp(s - lse[..., None]))
    return p @ v, lse


def test_routed_sdpa_call_whose_launch_raises_falls_back_counted_and_logged_once(failing, caplog):
    q, k, v = qkv()
    expected = sdpa.ORIGINAL_SDPA(q, k, v, enable_gqa=True)
    with caplog.at_level(logging.WARNING, logger="sage_co"), sdpa.enabled():
        outs = [torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True) for _ in range(3)]
    assert failing.tries == 3                       # sage-co was tried each time: the call was routed
    for out in outs:
        assert torch.equal(out, expected)           # then torch's SDPA ran with the same arguments
    assert sdpa.stats() == {"routed": 0, "fallback": {LAUNCH_FAILURE: 3}, "differences": sdpa.DIFFERENCES}
    logged = [r for r in caplog.records if r.name == "sage_co"]
    assert len(logged) == 1 and LAUNCH_FAILURE in logged[0].getMessage()
    assert "hipErrorLaunchFailure" in logged[0].getMessage()       # the full error, once


def test_direct_calls_still_raise(failing):
    q, k, v = qkv()
    with pytest.raises(HipError, match="hipErrorLaunchFailure"):
        sage_co.sage_attention(q, k, v, layout="HND")
    with pytest.raises(HipError):
        sage_co.sageattn(q, k, v)
    assert sdpa.stats() == {"routed": 0, "fallback": {}, "differences": sdpa.DIFFERENCES}


def test_a_binding_that_fails_to_load_makes_the_router_fall_back(monkeypatch, caplog):
    """backend="gpu" on a platform with no HIP runtime loaded in the process: the ctypes binding refuses to load
    (HipError) at the first launch; the router hands the call to torch and says why."""
    from sage_co.backends import hip as hip_backend

    class NoRuntimePlatform(hip_backend.TorchHip):
        def init(self):   # torch's HIP initialisation "succeeds" but maps no runtime
            pass

        @staticmethod
        def device_problem(tensor):
            return None

    monkeypatch.setenv("SAGE_CO_HIP_BINDING", "ctypes")
    monkeypatch.setattr(hip_backend, "TorchHip", NoRuntimePlatform)
    monkeypatch.setattr(sdpa, "_device_served", lambda t, backend: True)
    monkeypatch.setitem(launch._DEVICE_CHECKS, "gpu", lambda t: None)
    launch.use_backend("gpu", None)
    sdpa.reset_stats()
    q, k, v = qkv(H_q=2, S_q=100)
    try:
        with caplog.at_level(logging.WARNING, logger="sage_co"), sdpa.enabled(backend="gpu"):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            out2 = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        st = sdpa.stats()
    finally:
        launch.use_backend("gpu", None)
        sdpa.reset_stats()
    assert torch.equal(out, sdpa.ORIGINAL_SDPA(q, k, v, is_causal=True)) and torch.equal(out, out2)
    (reason, n), = st["fallback"].items()
    assert st["routed"] == 0 and n == 2
    assert reason.startswith("gpu: no HIP runtime (libamdhip64.so / amdhip64_N.dll) is loaded")
    assert sum(r.name == "sage_co" for r in caplog.records) == 1


@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_shim_sageattn_falls_back_to_torch_with_sageattns_semantics(failing, layout):
    """GQA, S_q != S_kv with bottom-right causal, a bool key-padding mask that leaves one batch's rows dead,
    return_lse: the fallback is the fp64 oracle's answer, in the caller's layout."""
    q, k, v = qkv(layout=layout, S_q=50, S_kv=90)
    mask = torch.ones(2, 1, 1, 90, dtype=torch.bool)
    mask[0, ..., 30:] = False          # key padding
    mask[1, ..., :] = False            # batch 1 sees no key at all: zeros, LSE -inf
    out, lse = hostsafe.sageattn(q, k, v, tensor_layout=layout, is_causal=True, return_lse=True, attn_mask=mask,
                                 sm_scale=0.2)
    hnd = (lambda t: t) if layout == "HND" else (lambda t: t.transpose(1, 2))
    ref_out, ref_lse = oracle(hnd(q), hnd(k), hnd(v), 0.2, causal=True, mask=mask)
    assert out.shape == q.shape and out.dtype == q.dtype and lse.dtype == torch.float32
    torch.testing.assert_close(hnd(out).double(), ref_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-5, atol=1e-5)
    assert torch.isneginf(lse[1]).all() and not hnd(out)[1].any()
    assert failing.tries == 1 and sdpa.stats() == {"routed": 0, "fallback": {LAUNCH_FAILURE: 1}, "differences": sdpa.DIFFERENCES}


def test_shim_fallback_additive_mask_and_default_scale(failing):
    q, k, v = qkv(S_q=33, S_kv=70, dtype=torch.bfloat16)
    add = torch.zeros(1, 4, 33, 70)
    add[:, :, :, ::3] = -10000.0                     # LTX-style additive mask, per head
    out = hostsafe.sageattn(q, k, v, attn_mask=add.to(torch.float16))   # an fp16 mask with bf16 q: widened
    ref, _ = oracle(q, k, v, 64 ** -0.5, mask=add.to(torch.float16))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), ref, rtol=2e-2, atol=2e-2)   # bf16 output rounding


def test_shim_fallback_varlen(failing):
    g = torch.Generator().manual_seed(3)
    lens_q, lens_k = [37, 0, 70], [50, 20, 0]          # a sequence without queries, one without keys
    q = torch.randn(sum(lens_q), 4, 64, generator=g)
    k, v = (torch.randn(sum(lens_k), 2, 64, generator=g) for _ in range(2))
    cq = torch.tensor([0, 37, 37, 107], dtype=torch.int32)
    ck = torch.tensor([0, 50, 70, 70], dtype=torch.int32)
    out, lse = hostsafe.sageattn_varlen(q, k, v, cq, ck, 70, 50, is_causal=True, return_lse=True)
    ref, ref_lse = oracle(q[None, :37].transpose(1, 2), k[None, :50].transpose(1, 2), v[None, :50].transpose(1, 2),
                          64 ** -0.5, causal=True)
    torch.testing.assert_close(out[:37].double(), ref[0].transpose(0, 1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse[:, :37].double(), ref_lse[0], rtol=1e-5, atol=1e-5)
    assert not out[37:].any() and torch.isneginf(lse[:, 37:]).all()    # no keys: zeros, -inf
    assert out.shape == q.shape and lse.shape == (4, 107)
    assert sdpa.stats()["fallback"] == {LAUNCH_FAILURE: 1}


def test_fused_inputs_without_a_torch_equivalent_keep_the_error(failing):
    q, k, v = qkv(H_kv=4)
    with pytest.raises(HipError):
        hostsafe.sageattn(q, k, v, q_norm_weight=torch.ones(64))
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such'"):   # a caller's mistake: raised
        hostsafe.sageattn(q, k, v, no_such=1)


def test_comfyui_node_falls_back_to_comfys_function(failing):
    from sage_co.integrations.comfyui.attention import make_attention
    q, k, v = (t.transpose(1, 2).reshape(2, t.shape[2], -1) for t in qkv(H_kv=4, S_kv=77))   # [B, S, H*D]
    calls = []

    def comfy_attention(q, k, v, heads, mask=None, **kw):
        calls.append(heads)
        return torch.zeros(q.shape)
    out = make_attention(fallback=comfy_attention)(q, k, v, 4)
    assert calls == [4] and torch.equal(out, torch.zeros(q.shape))
    assert failing.tries == 1
    assert sdpa.stats() == {"routed": 0, "fallback": {LAUNCH_FAILURE: 1}, "differences": sdpa.DIFFERENCES}


def test_adapters_fall_back(failing):
    from sage_co.integrations import diffusers, lightx2v, xdit
    q, k, v = qkv(layout="NHD", H_kv=4)
    out = diffusers.attention_backend(q, k, v)
    ref, _ = oracle(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), 64 ** -0.5)
    torch.testing.assert_close(out.transpose(1, 2).double(), ref, rtol=1e-5, atol=1e-5)
    out = lightx2v.SageCoAttnWeight().apply(q, k, v)
    torch.testing.assert_close(out.reshape(2, 77, 4, 64).transpose(1, 2).double(), ref, rtol=1e-5, atol=1e-5)
    hq, hk, hv = (t.transpose(1, 2) for t in (q, k, v))
    out, lse = xdit.xdit_attention(hq, hk, hv, 0.0, False)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    assert lse.shape == (2, 4, 77)
    assert sdpa.stats()["fallback"] == {LAUNCH_FAILURE: 3} and failing.tries == 3
