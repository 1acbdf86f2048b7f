"""Issue 39: the SDPA router as a drop-in. A broad set of SDPA call patterns (shapes, broadcast batch / head dims,
masks, CausalBias, causal, scale, GQA, dtypes, strides, autocast, sdpa_kernel, nested tensors, options) run with and
without sage_co.sdpa.enabled(); each call must land in one class:

  routed    sage-co served it (stats() counts it routed): torch's shape, dtype and memory layout (the strides of the
            dims longer than 1), and within the accuracy contract (sage_co.accuracy) of the same call in float64;
  fallback  handed to torch with a reason in stats(): the result is torch's, bit for bit, strides included;
  refused   torch raises, and so does the router, with torch's exception type;
  wrong     anything else (also a routed call a pattern says must fall back).

test_every_pattern_is_routed_in_band_falls_back_or_refused asserts no call is wrong and prints the counts per class.
CPU tensors run on the emulator: small shapes (lengths 40..150 and not multiples of 64, D 16..72, B and H 2..3).
"""
from __future__ import annotations

import warnings
from collections import Counter
from contextlib import ExitStack, nullcontext

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

from sage_co import accuracy, sdpa


def _t(g, *shape, dtype=torch.bfloat16, scale=1.0):
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def _qkv(g, B=2, H=2, S_q=70, S_kv=None, D=64, dtype=torch.bfloat16, H_kv=None):
    S_kv = S_q if S_kv is None else S_kv
    H_kv = H if H_kv is None else H_kv
    return _t(g, B, H, S_q, D, dtype=dtype), _t(g, B, H_kv, S_kv, D, dtype=dtype), _t(g, B, H_kv, S_kv, D, dtype=dtype)


def _bshd(t):
    """The same values, strided as [B, S, H, D] memory viewed as [B, H, S, D] (what most models pass)."""
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def _sbhd(t):
    return t.permute(2, 0, 1, 3).contiguous().permute(1, 2, 0, 3)


def _packed(g, B, H, S, D, dtype=torch.bfloat16):
    """q, k, v sliced out of one [B, S, 3, H, D] projection (non-dense views)."""
    x = _t(g, B, S, 3, H, D, dtype=dtype)
    return tuple(t.transpose(1, 2) for t in x.unbind(2))


def _key_padding(B, S_kv, keep):
    return torch.arange(S_kv)[None, :] < torch.tensor(keep)[:, None]


def patterns():
    """(name, (args, kwargs), context factory or None, options for enabled(), must_fall_back)."""
    g = torch.Generator().manual_seed(39)
    P = []

    def add(name, args, kwargs=None, ctx=None, options=None, must_fall_back=False):
        P.append((name, (tuple(args), dict(kwargs or {})), ctx, dict(options or {}), must_fall_back))

    # shapes / dtypes
    add("bf16 2x2x70x64", _qkv(g))
    add("fp16 2x3x90x48", _qkv(g, 2, 3, 90, D=48, dtype=torch.float16))
    add("bf16 D20 scale 1.0", _qkv(g, 2, 2, 45, D=20), dict(scale=1.0))
    add("fp32 2x2x40x16", _qkv(g, 2, 2, 40, D=16, dtype=torch.float32))
    add("bf16 S_q>S_kv 150/50 D72", _qkv(g, 2, 2, 150, 50, D=72))
    add("fp16 D40 (SD1.5)", _qkv(g, 2, 2, 77, D=40, dtype=torch.float16))
    add("fp64 (not served)", _qkv(g, 2, 2, 40, D=16, dtype=torch.float64))
    add("mixed dtypes q bf16 k fp16", (*_qkv(g, D=32)[:1], *_qkv(g, D=32, dtype=torch.float16)[1:]))
    add("3-dim [B*H, S, D]", [t.flatten(0, 1) for t in _qkv(g, D=32)])
    add("5-dim [B, G, H, S, D]", [t.unflatten(0, (1, 2)) for t in _qkv(g, D=32)])
    add("empty S_q", [t[:, :, :0] if i == 0 else t for i, t in enumerate(_qkv(g, D=32))])
    add("head dims differ q/k", (_t(g, 2, 2, 40, 32), _t(g, 2, 2, 40, 16), _t(g, 2, 2, 40, 16)))
    add("v head dim differs (served by torch)", (*_qkv(g, D=32)[:2], _t(g, 2, 2, 70, 16)))
    # broadcast batch / head dims
    q, k, v = _qkv(g, D=32)
    add("k/v batch 1 broadcast", (q, k[:1], v[:1]))
    add("k/v heads 1 without enable_gqa", (q, k[:, :1], v[:, :1]))
    add("q batch 1, k/v batch 2", (q[:1], k, v))
    # strides
    add("BSHD views bf16", [_bshd(t) for t in _qkv(g, 2, 3, 70, D=64)])
    add("BSHD views fp32 masked", [_bshd(t) for t in _qkv(g, 2, 2, 50, D=32, dtype=torch.float32)],
        dict(attn_mask=_key_padding(2, 50, [50, 31])[:, None, None, :]))
    add("SBHD views", [_sbhd(t) for t in _qkv(g, 2, 2, 60, D=32)])
    add("packed [B, S, 3, H, D]", _packed(g, 2, 2, 66, 48))
    add("q BSHD, k/v BHSD", (_bshd(q), k, v))
    add("transposed last dim", [t.transpose(-1, -2).contiguous().transpose(-1, -2) for t in _qkv(g, D=32)])
    # causal and scale
    add("is_causal square", _qkv(g, 2, 2, 90, D=64), dict(is_causal=True))
    add("is_causal S_q<S_kv (top-left)", _qkv(g, 2, 2, 40, 100, D=32), dict(is_causal=True))
    add("scale 0.07", _qkv(g, D=32), dict(scale=0.07))
    add("scale -0.2", _qkv(g, D=32), dict(scale=-0.2))
    # GQA
    add("GQA 4/2 enable_gqa", _qkv(g, 2, 4, 70, D=32, H_kv=2), dict(enable_gqa=True))
    add("GQA 3/1 enable_gqa BSHD", [_bshd(t) for t in _qkv(g, 2, 3, 50, 80, D=48, H_kv=1)], dict(enable_gqa=True))
    add("GQA 3/2 (not a multiple)", _qkv(g, 2, 3, 40, D=32, H_kv=2), dict(enable_gqa=True))
    # masks
    q, k, v = _qkv(g, 2, 2, 70, 90, D=32)
    add("bool [S_q, S_kv]", (q, k, v), dict(attn_mask=torch.rand(70, 90, generator=g) < 0.8))
    add("bool key padding [B,1,1,S_kv]", (q, k, v), dict(attn_mask=_key_padding(2, 90, [90, 51])[:, None, None, :]))
    add("additive fp32 [B,H,S_q,S_kv]", (q, k, v), dict(attn_mask=torch.randn(2, 2, 70, 90, generator=g)))
    add("additive bf16 [1,H,1,S_kv]", (q, k, v), dict(attn_mask=torch.randn(1, 2, 1, 90, generator=g).bfloat16()))
    add("additive fp32 -inf [S_q, S_kv]", (q, k, v),
        dict(attn_mask=torch.where(torch.rand(70, 90, generator=g) < 0.3, float("-inf"), 0.0)))
    add("fp16 mask with bf16 q", (q, k, v), dict(attn_mask=torch.zeros(70, 90, dtype=torch.float16)))
    add("mask not broadcastable", (q, k, v), dict(attn_mask=torch.zeros(70, 89, dtype=torch.bool)))
    add("mask and is_causal", _qkv(g, D=32), dict(attn_mask=torch.ones(70, 70, dtype=torch.bool), is_causal=True))
    add("int mask", (q, k, v), dict(attn_mask=torch.ones(70, 90, dtype=torch.int32)))
    # torch.nn.attention.bias.CausalBias
    for S_q, S_kv in ((60, 60), (40, 100), (100, 40)):
        qc, kc, vc = _qkv(g, 2, 2, S_q, S_kv, D=32)
        if S_q != S_kv:   # at S_q == S_kv the two are one mask
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")   # torch warns about lower_right at S_q > S_kv (rows with no key)
                add(f"causal_lower_right {S_q}/{S_kv}", (qc, kc, vc), dict(attn_mask=causal_lower_right(S_q, S_kv)))
        add(f"causal_upper_left {S_q}/{S_kv}", (qc, kc, vc), dict(attn_mask=causal_upper_left(S_q, S_kv)))
    # what grad mode, dropout and nested tensors need
    qg, kg, vg = _qkv(g, D=32)
    add("requires_grad", (qg.clone().requires_grad_(), kg, vg))
    add("dropout_p 0.3", _qkv(g, D=32), dict(dropout_p=0.3))
    nt = torch.nested.nested_tensor([_t(g, s, 2, 32) for s in (40, 75)], layout=torch.jagged).transpose(1, 2)
    add("nested jagged, shared lengths", (nt, nt * 0.5, nt + 1))   # one ragged size: the shapes compare equal
    add("nested jagged", [torch.nested.nested_tensor([_t(g, s, 2, 32) for s in (40, 75)],
                                                     layout=torch.jagged).transpose(1, 2) for _ in range(3)])
    # autocast: SDPA's autocast rule (fp32 inputs run in the autocast dtype, the output too)
    add("autocast cpu bf16, fp32 in", _qkv(g, D=32, dtype=torch.float32),
        ctx=lambda: torch.autocast("cpu", dtype=torch.bfloat16))
    add("autocast cpu fp16, fp32 in masked", _qkv(g, 2, 2, 60, D=32, dtype=torch.float32),
        dict(attn_mask=torch.randn(60, 60, generator=g)), ctx=lambda: torch.autocast("cpu", dtype=torch.float16))
    add("autocast cpu bf16, fp64 in", _qkv(g, D=16, dtype=torch.float64),
        ctx=lambda: torch.autocast("cpu", dtype=torch.bfloat16))
    # torch.nn.attention.sdpa_kernel: the user's backend selection
    add("sdpa_kernel MATH", _qkv(g, D=32), ctx=lambda: sdpa_kernel(SDPBackend.MATH), must_fall_back=True)
    add("sdpa_kernel ERROR", _qkv(g, D=32), ctx=lambda: sdpa_kernel(SDPBackend.ERROR))
    add("sdpa_kernel EFFICIENT (none on CPU)", _qkv(g, D=32), ctx=lambda: sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION))
    add("sdpa_kernel FLASH + MATH", _qkv(g, D=32),
        ctx=lambda: sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]))
    # options: what the op would refuse is decided before routing
    add("sparsity auto D40", _qkv(g, D=40), options=dict(sparsity="auto"), must_fall_back=True)
    add("sparsity auto fp32", _qkv(g, D=32, dtype=torch.float32), options=dict(sparsity="auto"), must_fall_back=True)
    add("sparsity auto bf16 D64", _qkv(g, 2, 2, 130, D=64), options=dict(sparsity="auto"))
    qv, kv_, vv = _qkv(g, D=32)
    vv[1, 0, 7, 3] = 9e4
    add("pv_dtype fp16, |V| > 65504", (qv, kv_, vv), options=dict(pv_dtype="fp16"), must_fall_back=True)
    add("pv_dtype fp16", _qkv(g, D=32), options=dict(pv_dtype="fp16"))
    return P


def _oracle_args(args, kwargs, autocast_dtype):
    """The call in float64 (the accuracy oracle), after the autocast cast when autocast is on."""
    def up(t):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            return t
        if autocast_dtype is not None and t.dtype != torch.float64:
            t = t.to(autocast_dtype)
        return t.double()
    kw = dict(kwargs)
    if isinstance(kw.get("attn_mask"), torch.Tensor) and type(kw["attn_mask"]) is torch.Tensor:
        kw["attn_mask"] = up(kw["attn_mask"])
    return [up(t) for t in args], kw


def _layout(t):
    """The strides of the dims longer than 1 (a dim of size 1 has no meaningful stride)."""
    return tuple(s for s, n in zip(t.stride(), t.shape) if n > 1)


def _same(a, b):
    if a.is_nested or b.is_nested:
        return a.is_nested and b.is_nested and all(torch.equal(x, y) for x, y in zip(a.unbind(), b.unbind()))
    return (a.shape == b.shape and a.dtype == b.dtype and _layout(a) == _layout(b)
            and torch.equal(torch.nan_to_num(a, nan=0.123), torch.nan_to_num(b, nan=0.123))
            and torch.equal(a.isnan(), b.isnan()))


def classify(args, kwargs, ctx, options, must_fall_back) -> tuple[str, str]:
    """(class, detail) of one call pattern."""
    def call(routed):
        with ExitStack() as stack:
            stack.enter_context(ctx() if ctx else nullcontext())
            if routed:
                stack.enter_context(sdpa.enabled(**options))
            torch.manual_seed(0)   # dropout draws: both calls under one seed
            return F.scaled_dot_product_attention(*args, **kwargs)

    try:
        ref = call(False)
        ref_exc = None
    except Exception as e:   # noqa: BLE001 - torch's own refusal is a class of its own
        ref, ref_exc = None, e
    sdpa.reset_stats()
    try:
        out = call(True)
        exc = None
    except Exception as e:   # noqa: BLE001
        out, exc = None, e
    st = sdpa.stats()
    if ref_exc is not None:
        if exc is not None and type(exc) is type(ref_exc):
            return "refused", f"{type(exc).__name__}"
        return "wrong", f"torch raised {type(ref_exc).__name__}: {ref_exc}; router: " + (
            f"{type(exc).__name__}: {exc}" if exc else "a result")
    if exc is not None:
        return "wrong", f"router raised {type(exc).__name__}: {exc}"
    if st["routed"] == 0:
        if sum(st["fallback"].values()) != 1:
            return "wrong", f"no decision counted: {st}"
        if not _same(out, ref):
            return "wrong", f"fell back ({st['fallback']}) but differs from torch's result"
        return "fallback", next(iter(st["fallback"]))
    if must_fall_back:
        return "wrong", "routed where the pattern must fall back"
    if (out.shape, out.dtype) != (ref.shape, ref.dtype):
        return "wrong", f"routed: {out.dtype} {tuple(out.shape)}, torch {ref.dtype} {tuple(ref.shape)}"
    if _layout(out) != _layout(ref):
        return "wrong", f"routed: strides {out.stride()}, torch {ref.stride()}"
    autocast_dtype = None
    with ctx() if ctx else nullcontext():
        if torch.is_autocast_enabled("cpu"):
            autocast_dtype = torch.get_autocast_dtype("cpu")
    oargs, okw = _oracle_args(args, kwargs, autocast_dtype)
    with sdpa_kernel(SDPBackend.MATH):
        oracle = F.scaled_dot_product_attention(*oargs, **okw)
    seen = (oracle != 0).any(-1) | (out != 0).any(-1)   # rows with no visible key are zeros in both (no cosine)
    m = accuracy.metrics(out[seen], oracle[seen])
    if not accuracy.within_contract(m):
        return "wrong", f"routed outside the accuracy band: {m}"
    return "routed", f"rel L2 {m['rel_l2']:.4f}"


EXPECTED_ROUTED = {   # patterns that must be served by sage-co (the drop-in's point), besides being not wrong
    "bf16 2x2x70x64", "fp32 2x2x40x16", "BSHD views bf16", "BSHD views fp32 masked", "SBHD views",
    "packed [B, S, 3, H, D]", "causal_lower_right 40/100", "causal_upper_left 60/60", "causal_upper_left 40/100",
    "autocast cpu bf16, fp32 in", "autocast cpu fp16, fp32 in masked", "sdpa_kernel FLASH + MATH",
    "GQA 3/1 enable_gqa BSHD", "sparsity auto bf16 D64", "pv_dtype fp16",
}


@pytest.fixture(autouse=True)
def _clean():
    sdpa.reset_stats()
    yield
    sdpa.reset_stats()


def test_every_pattern_is_routed_in_band_falls_back_or_refused():
    results = {}
    for name, (args, kwargs), ctx, options, must_fall_back in patterns():
        results[name] = classify(args, kwargs, ctx, options, must_fall_back)
    counts = Counter(c for c, _ in results.values())
    print(f"\nSDPA replay: {len(results)} patterns: " + ", ".join(f"{c} {counts[c]}" for c in
                                                               ("routed", "fallback", "refused", "wrong")))
    for name, (c, detail) in results.items():
        print(f"  {c:8s} {name}: {detail}")
    wrong = {n: d for n, (c, d) in results.items() if c == "wrong"}
    assert not wrong, wrong
    not_routed = {n: results[n] for n in EXPECTED_ROUTED if results[n][0] != "routed"}
    assert not not_routed, not_routed
