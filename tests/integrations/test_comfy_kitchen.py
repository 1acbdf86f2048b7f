"""comfy-kitchen (PyPI comfy-kitchen, ComfyUI's `--use-kitchen-int8-attention`): the facts docs/integrations.md's row and
sage_co.integrations.comfyui's docstring state, so a comfy-kitchen release that changes them fails here.
Which attention functions consult comfy_kitchen.registry.BackendRegistry: sol_attn and na3d/na2d (Sol-Attn's pooled
sparse attention and neighborhood attention, which sage-co's dense / causal / block-mask kernels do not compute, so
sage-co registers no backend for them); int8_attention does not (its op goes to its own extension; on CPU it stops
at its device check without asking the registry), so the ComfyUI node is the route to sage-co."""
from __future__ import annotations

import pytest
import torch

ck = pytest.importorskip("comfy_kitchen", reason="comfy-kitchen is not installed (pip install -e '.[test]')")


def test_which_attention_functions_consult_the_backend_registry(monkeypatch):
    consulted = []
    original = ck.registry.get_implementation

    def spy(func_name, *args, **kwargs):
        consulted.append(func_name)
        return original(func_name, *args, **kwargs)

    monkeypatch.setattr(ck.registry, "get_implementation", spy)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 2, 70, 64, generator=g).to(torch.bfloat16)
    grid = q.reshape(2, 7, 10, 2, 64)
    calls = {
        "int8_attention": lambda: ck.int8_attention(q, q, q),
        "sol_attn": lambda: ck.sol_attn(q, q, q),
        "na2d": lambda: ck.na2d(grid, grid, grid, 3),
    }
    outcome = {}
    for name, call in calls.items():
        before = len(consulted)
        try:
            call()
            outcome[name] = "ran"
        except Exception as e:   # noqa: BLE001 - which error does not matter, whether the registry was asked does
            outcome[name] = type(e).__name__
        outcome[name] += f", registry asked for {consulted[before:]}"
    assert outcome["int8_attention"].endswith("registry asked for []"), outcome
    assert outcome["sol_attn"].endswith("['sol_attn']") and outcome["na2d"].endswith("['na3d']"), outcome
