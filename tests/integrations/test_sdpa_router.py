"""sage_co.sdpa: SDPA calls sage-co serves run sage_co.sage_attention (bit for bit), every other call runs torch's
SDPA unchanged with its reason counted; the mode, the decorator, install()/uninstall() and torch.compile."""
from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F

import sage_co
from sage_co import abi, sdpa

B, H, S, D = 2, 2, 70, 64   # S not a multiple of 64


def _qkv(*shape, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*(shape or (B, H, S, D)), generator=g).to(dtype) for _ in range(3)]


@pytest.fixture(autouse=True)
def clean():
    sdpa.reset_stats()
    yield
    sdpa.uninstall()
    sdpa.reset_stats()


def _sage(q, k, v, **kw):
    return sage_co.sage_attention(q, k, v, layout="HND", smooth_k=True, **kw)


def test_served_call_is_sage_attention_bit_for_bit():
    q, k, v = _qkv()
    with sdpa.enabled():
        out = F.scaled_dot_product_attention(q, k, v)
        scaled = F.scaled_dot_product_attention(q, k, v, scale=0.07)
    assert torch.equal(out, _sage(q, k, v))
    assert torch.equal(scaled, _sage(q, k, v, softmax_scale=0.07))
    assert not torch.equal(out, F.scaled_dot_product_attention(q, k, v))   # outside the block: torch's SDPA
    assert sdpa.stats() == {"routed": 2, "fallback": {}, "differences": sdpa.DIFFERENCES}


def test_causal_square_and_gqa_are_served():
    q, k, v = _qkv()
    kv = [t[:, :1] for t in _qkv(seed=1)[:2]]
    with sdpa.enabled(pv_dtype="fp16"):
        causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        gqa = F.scaled_dot_product_attention(q, *kv, enable_gqa=True)
    assert torch.equal(causal, _sage(q, k, v, is_causal=True, pv_dtype="fp16"))
    assert torch.equal(gqa, _sage(q, *kv, pv_dtype="fp16"))
    assert sdpa.stats()["routed"] == 2


def _unserved():
    q, k, v = _qkv()
    qs = q[:, :, :40]
    grad = q.clone().requires_grad_()
    return [
        ("dropout_p", (q, k, v), dict(dropout_p=0.5)),
        ("dtype", [t.double() for t in (q, k, v)], {}),                  # fp32 is served (issue 30)
        ("shape", [t[0] for t in (q, k, v)], {}),
        ("head_dim", _qkv(B, H, S, abi.HEAD_DIM_MAX + 8), {}),      # beyond the widest kernel
        ("heads", (q, k[:, :1], v[:, :1]), {}),                        # GQA without enable_gqa
        ("is_causal", (qs, k, v), dict(is_causal=True)),                # top-left vs bottom-right at S_q != S_kv
        ("stride", [t.transpose(-1, -2).contiguous().transpose(-1, -2) for t in (q, k, v)], {}),
        ("value", (q, k, v[..., :32]), {}),
        ("requires_grad", (grad, k, v), {}),
        ("scale", (q, k, v), dict(scale=float("inf"))),
        ("shape", [t[:, :, :0] for t in (q, k, v)], {}),                # empty
    ]


@pytest.mark.parametrize("case", _unserved(), ids=lambda c: c[0])
def test_unserved_calls_run_torch_sdpa_with_the_reason(case):
    reason, args, kwargs = case
    torch.manual_seed(3)   # dropout draws random numbers: both calls under one seed
    with sdpa.enabled():
        out = F.scaled_dot_product_attention(*args, **kwargs)
    torch.manual_seed(3)
    ref = sdpa.ORIGINAL_SDPA(*args, **kwargs)
    torch.testing.assert_close(out, ref, rtol=0, atol=0, equal_nan=True)   # bit for bit (scale=inf gives NaN)
    st = sdpa.stats()
    assert st["routed"] == 0 and sum(st["fallback"].values()) == 1
    assert next(iter(st["fallback"])).startswith(reason + ":"), st


def _masks():
    """The masks issue 30's clients pass SDPA, in SDPA's convention (True = attend; additive float)."""
    keep = torch.arange(S)[None, :] < torch.tensor([S, 41])[:, None]                   # [B, S_kv] key validity
    bias = torch.randn(S, S, generator=torch.Generator().manual_seed(5))
    bias[:20, 50:] = float("-inf")
    return {
        "key padding bool [B,1,1,S] (HunyuanVideo)": keep[:, None, None, :],
        "additive bf16 [B,H,1,S] 0/-10000 (LTX-Video)": ((~keep[:, None, None, :]).to(torch.bfloat16) * -10000.0
                                                          ).expand(B, H, 1, S),
        "pairwise bool [B,H,S,S] (HunyuanVideo refiner)": (keep[:, None, :, None] & keep[:, None, None, :]
                                                            ).expand(B, H, S, S),
        "additive fp32 [S,S] with -inf": bias,
    }


@pytest.mark.parametrize("name", list(_masks()))
def test_masked_calls_are_served(name):
    """Issue 30: a masked SDPA call runs sage-co's masked attention (bit for bit sage_attention with that mask),
    counted as routed."""
    mask = _masks()[name]
    q, k, v = _qkv()
    with sdpa.enabled():
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert sdpa.stats() == {"routed": 1, "fallback": {}, "differences": sdpa.DIFFERENCES}
    assert torch.equal(out, _sage(q, k, v, attn_mask=mask))
    assert not torch.equal(out, _sage(q, k, v))   # the mask did something


def test_a_mask_sdpa_refuses_falls_back_to_sdpas_error():
    """sage-co takes float16 masks with bf16 q; SDPA refuses a float mask that is neither float32 nor q's dtype, so
    the router hands such a call to SDPA (its error reaches the caller, as without sage-co), with the reason."""
    q, k, v = _qkv()
    with sdpa.enabled(), pytest.raises(RuntimeError, match="attn_mask"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=torch.zeros(S, S, dtype=torch.float16))
    (reason,) = sdpa.stats()["fallback"]
    assert reason.startswith("attn_mask:") and "float16" in reason, reason


@pytest.mark.parametrize("D, dtype", [(40, torch.bfloat16), (80, torch.float16), (160, torch.bfloat16),
                                      (64, torch.float32)], ids=["D40", "D80-fp16", "D160", "fp32"])
def test_issue30_head_dims_and_fp32_are_served(D, dtype):
    """SD1.5's 40 and 160, 80, fp32 inputs: routed to sage-co (D = 160: the prepare kernels at D_pad 256)."""
    q, k, v = _qkv(B, H, S, D, dtype=dtype)
    with sdpa.enabled():
        out = F.scaled_dot_product_attention(q, k, v)
    assert sdpa.stats() == {"routed": 1, "fallback": {}, "differences": sdpa.DIFFERENCES}, sdpa.stats()
    assert out.dtype == dtype and torch.equal(out, _sage(q, k, v))


def test_d160_runs_the_d256_prepare_and_attention_kernels():
    """D = 160 pads to D_pad 256: the shipped prepare kernel at 256 and the default (asm) attention kernel at 256,
    visibly in the launches."""
    from sage_co import launch
    q, k, v = _qkv(B, H, S, 160, dtype=torch.bfloat16)
    with sdpa.enabled(), launch.recording() as records:
        F.scaled_dot_product_attention(q, k, v)
    symbols = [r.symbol for r in records]
    # the default norm_rope_rounding "once" picks the _once prepare symbol (no norm/RoPE here: the same arithmetic)
    assert symbols == ["gfx1201_sage_prepare_d256_bf16_once", "gfx1201_sage_attention_fwd_asm_d256_bf16"], symbols


def test_requires_grad_is_served_under_no_grad():
    q, k, v = _qkv()
    q.requires_grad_()
    with torch.no_grad(), sdpa.enabled():
        out = F.scaled_dot_product_attention(q, k, v)
    assert torch.equal(out, _sage(q.detach(), k, v)) and sdpa.stats()["routed"] == 1


def test_torch_sdpa_errors_reach_the_caller_unchanged():
    q, k, v = _qkv()
    with sdpa.enabled(), pytest.raises(TypeError):
        F.scaled_dot_product_attention(q, k, v, bogus=1)


def test_decorator_and_options_are_checked():
    q, k, v = _qkv()

    @sdpa.enabled(pv_dtype="fp16")
    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

    assert torch.equal(attend(q, k, v), _sage(q, k, v, pv_dtype="fp16"))
    assert torch.equal(attend(q, k, v), _sage(q, k, v, pv_dtype="fp16"))   # reusable
    assert sdpa.stats()["routed"] == 2
    with pytest.raises(ValueError, match="pv_dtype"):
        sdpa.enabled(pv_dtype="fp4")
    with pytest.raises(ValueError, match="smooth_v"):
        sdpa.enabled(pv_dtype="fp16", smooth_v=True)
    with pytest.raises(ValueError, match="backend"):
        sdpa.install(backend="cuda")
    assert not sdpa.is_installed()


def test_install_is_process_wide_and_uninstall_restores():
    q, k, v = _qkv()
    sdpa.install(smooth_k=False)
    assert sdpa.is_installed() and "installed" in sdpa.describe()
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("out", F.scaled_dot_product_attention(q, k, v)))
    worker.start()
    worker.join()
    assert torch.equal(result["out"], sage_co.sage_attention(q, k, v, layout="HND"))   # another thread routes too
    sdpa.uninstall()
    assert F.scaled_dot_product_attention is sdpa.ORIGINAL_SDPA and not sdpa.is_installed()
    assert torch.equal(F.scaled_dot_product_attention(q, k, v), sdpa.ORIGINAL_SDPA(q, k, v))
    assert sdpa.stats() == {"routed": 1, "fallback": {}, "differences": sdpa.DIFFERENCES}


def test_install_keeps_and_restores_a_previous_replacement(monkeypatch):
    """A library that had wrapped F.scaled_dot_product_attention before install() keeps serving the fallbacks and
    gets its wrapper back at uninstall()."""
    seen = []

    def theirs(*args, **kwargs):
        seen.append(kwargs.get("dropout_p", 0.0) != 0)
        return sdpa.ORIGINAL_SDPA(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", theirs)
    q, k, v = _qkv()
    sdpa.install()
    F.scaled_dot_product_attention(q, k, v)                                       # routed: theirs not called
    F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)                        # fallback: theirs
    sdpa.uninstall()
    assert seen == [True] and F.scaled_dot_product_attention is theirs


def test_install_and_enabled_do_not_nest():
    with sdpa.enabled():
        with pytest.raises(RuntimeError, match="enabled"):
            sdpa.install()
    sdpa.install()
    with pytest.raises(RuntimeError, match="uninstall"):
        with sdpa.enabled():
            pass


@pytest.mark.parametrize("how", ["mode", "install"])
def test_torch_compile_fullgraph_routes(how):
    """dynamo traces the routing (no graph break under fullgraph=True) and the graph runs sage-co's custom op;
    the decision is counted once per traced call site, not per replay."""
    q, k, v = _qkv()

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v) + F.scaled_dot_product_attention(q.double(), k.double(),
                                                                                         v.double()).bfloat16()

    torch._dynamo.reset()
    want = _sage(q, k, v) + sdpa.ORIGINAL_SDPA(q.double(), k.double(), v.double()).bfloat16()   # fp64: unserved
    if how == "mode":
        with sdpa.enabled():
            compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
            outs = [compiled(q, k, v) for _ in range(2)]
    else:
        sdpa.install()
        compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
        outs = [compiled(q, k, v) for _ in range(2)]
    assert all(torch.equal(o, want) for o in outs)
    st = sdpa.stats()
    assert st["routed"] == 1 and sum(st["fallback"].values()) == 1, st


def test_options_backend_hip_is_stored_as_gpu():
    """sdpa.Options goes through the one backend normalization: the deprecated "hip" warns once, here, and is kept
    as "gpu" (what routing compares against); an unknown name is refused naming the argument and the choices."""
    with pytest.warns(FutureWarning, match='backend="hip" is now "gpu"'):
        assert sdpa.Options(backend="hip").backend == "gpu"
    assert sdpa.Options(backend="gpu").backend == "gpu"
    with pytest.raises(ValueError, match=r"^backend: expected None or one of \('emu', 'gpu'\), got 'cuda'"):
        sdpa.Options(backend="cuda")


def test_differences_by_design_are_stated_and_hold():
    """Issue 39 "semantics to state": stats() carries sdpa.DIFFERENCES (docs/numerics.md §SDPA router), and two of
    them are what a routed call does: a NaN in Q poisons its 32-query quantization block (SDPA: that row), and a row
    whose additive mask is finfo.min everywhere gives zeros (SDPA: the mean of V)."""
    assert sdpa.stats()["differences"] is sdpa.DIFFERENCES
    assert set(sdpa.DIFFERENCES) == {"accuracy", "non-finite q", "non-finite k/v", "row masked everywhere",
                                     "sharp logits"}
    q, k, v = _qkv()
    q[0, 1, 37, 5] = float("nan")   # block 1 (rows 32..63) of batch 0, head 1
    mask = torch.zeros(S, S)
    mask[10] = torch.finfo(torch.float32).min
    with sdpa.enabled():
        out = F.scaled_dot_product_attention(q, k, v)
        masked = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert sdpa.stats()["routed"] == 2
    ref = sdpa.ORIGINAL_SDPA(q, k, v)
    nan_rows = out[0, 1].isnan().any(-1).nonzero().flatten().tolist()
    assert nan_rows == list(range(32, 64)) and ref[0, 1].isnan().any(-1).nonzero().flatten().tolist() == [37]
    assert not out[1].isnan().any() and not out[0, 0].isnan().any()
    assert torch.equal(masked[1, :, 10], torch.zeros_like(masked[1, :, 10]))
    uniform = sdpa.ORIGINAL_SDPA(q.float(), k.float(), v.float(), attn_mask=mask)[1, :, 10]
    torch.testing.assert_close(uniform, v[1].float().mean(1), rtol=0, atol=1e-5)   # SDPA: V's mean
