"""ComfyUI's own `attention_sage` call patterns (current master and the 2025 releases, replayed from their source in
comfy_replay.py) on sage-co through the sageattention shim: every case runs on sage-co -- no ERROR logged, no
fallback to attention_pytorch, exactly one attention kernel launch -- and the output is within the accuracy contract
(sage_co.accuracy) of ComfyUI's attention_pytorch on the same inputs in fp32.

Cases (issue 30): no mask, additive [S, S], bool [B, 1, S] key padding (also HND, skip_reshape=True), head dims 40,
80 and 160 (SD1.5's 320/8 and 1280/8; D = 160 runs the prepare and attention kernels at D_pad 256),
fp32 inputs (ComfyUI's CPU default)."""
from __future__ import annotations

import inspect
import logging

import pytest
import torch

from sage_co import accuracy, launch, sdpa

from . import comfy_replay as comfy


def _attention_launches(records) -> int:
    return sum("attention" in r.symbol for r in records)


def test_master_signature_check_sends_masks():
    """ComfyUI master decides from sageattn's signature whether masked calls may reach it."""
    assert "attn_mask" in inspect.signature(comfy.sageattn).parameters
    assert comfy.SAGE_ATTENTION_SUPPORTS_MASK


@pytest.mark.parametrize("version", sorted(comfy.VERSIONS))
@pytest.mark.parametrize("case", comfy.CASES, ids=[c.name for c in comfy.CASES])
def test_attention_sage_runs_on_sage_co(version, case, caplog, monkeypatch):
    fallbacks = []
    real_pytorch = comfy.attention_pytorch
    monkeypatch.setattr(comfy, "attention_pytorch", lambda *a, **k: fallbacks.append(1) or real_pytorch(*a, **k))
    q, k, v, mask = comfy.make_inputs(case)
    with caplog.at_level(logging.ERROR), launch.recording() as records:
        out = comfy.VERSIONS[version](q, k, v, comfy.HEADS, mask, skip_reshape=case.skip_reshape)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], f"ComfyUI {version} logged: {errors}"
    assert fallbacks == [], f"ComfyUI {version} fell back to attention_pytorch"
    assert _attention_launches(records) == 1
    assert out.dtype == case.dtype and out.shape == (comfy.B, comfy.S, comfy.HEADS * case.D)
    monkeypatch.undo()
    ref = comfy.reference(case, q, k, v, mask)
    m = accuracy.metrics(comfy.heads_rows(out.float(), case), comfy.heads_rows(ref, case))
    assert accuracy.within_contract(m), m


def test_masked_2025_call_pattern_matters():
    """The masks of the cases change the result (a mask that changed nothing would prove nothing): sage-co's
    output for the masked call is far from the unmasked attention and close to the masked one."""
    case = next(c for c in comfy.CASES if c.mask == "bool [B,1,S]" and not c.skip_reshape)
    q, k, v, mask = comfy.make_inputs(case)
    out = comfy.attention_sage_2025(q, k, v, comfy.HEADS, mask).float()
    masked, unmasked = comfy.reference(case, q, k, v, mask), comfy.reference(case, q, k, v, None)
    rel = lambda a, b: ((a - b).norm() / b.norm()).item()   # noqa: E731
    assert rel(out, masked) < 0.06 < 0.2 < rel(out, unmasked)


def test_refused_call_logs_a_message_quoting_shapes(caplog):
    """What ComfyUI logs when sage-co refuses a call names the argument and quotes its dtype/shape (never a bare
    type name such as 'Tensor'); a mask that cannot broadcast against [B, H, S_q, S_kv] is refused."""
    case = comfy.CASES[0]
    q, k, v, _ = comfy.make_inputs(case)
    bad = torch.ones(comfy.B, 1, 5, dtype=torch.bool)   # 5 keys, S_kv is 77
    with caplog.at_level(logging.ERROR), pytest.raises(RuntimeError):   # ComfyUI's fallback (SDPA) refuses it too
        comfy.attention_sage_2025(q, k, v, comfy.HEADS, bad)
    (msg,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "attn_mask" in msg and "5" in msg and "'Tensor'" not in msg, msg


def test_node_routes_masked_calls(monkeypatch):
    """sage-co's own ComfyUI node: the same masks in ComfyUI's shapes run on sage-co (counted as routed), equal to
    sage_co.sageattn on the mask ComfyUI would hand SDPA."""
    from sage_co.integrations.comfyui import make_attention
    sdpa.reset_stats()
    fn = make_attention(fallback=lambda *a, **k: pytest.fail("the node fell back"))
    for case in (c for c in comfy.CASES if c.mask != "none" and c.dtype == torch.bfloat16):
        q, k, v, mask = comfy.make_inputs(case)
        out = fn(q, k, v, comfy.HEADS, mask, skip_reshape=case.skip_reshape)
        layout = "HND" if case.skip_reshape else "NHD"
        views = (q, k, v) if case.skip_reshape else (t.view(comfy.B, comfy.S, comfy.HEADS, case.D) for t in (q, k, v))
        sdpa_mask = mask[None] if mask.ndim == 2 else mask[:, None]
        want = comfy.sageattn(*views, tensor_layout=layout, attn_mask=sdpa_mask)
        want = want.transpose(1, 2) if case.skip_reshape else want
        assert torch.equal(out, want.reshape(comfy.B, comfy.S, -1)), case.name
    assert sdpa.stats() == {"routed": 3, "fallback": {}, "differences": sdpa.DIFFERENCES}
    sdpa.reset_stats()
