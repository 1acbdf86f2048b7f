"""sage_co.integrations.diffusers on a tiny randomly initialized FluxTransformer2DModel, CPU, emulator kernels."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("diffusers", reason="diffusers is not installed (pip install -e '.[test]')")

from sage_co import launch, sageattn  # noqa: E402
from sage_co.integrations import diffusers as sage_diffusers  # noqa: E402

from . import tiny_flux  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# Whole-model output, sage-co vs the same model on diffusers' native (SDPA) backend. Measured: rel L2 0.0027,
# max abs 0.0078 (max |out| 1.53); for scale, bf16 SDPA itself is 0.0057 rel L2 from the model run in fp32.
# The attention output alone differs ~0.035 rel L2 (INT8/FP8, docs/numerics.md); the residual stream dilutes it.
MODEL_REL_L2 = 0.01
MODEL_MAX_ABS = 0.04


@pytest.fixture(scope="module")
def flux():
    model = tiny_flux.build()
    return model, tiny_flux.forward(model)


def _attention_launches(records):
    return [r for r in records if "attention" in r.symbol]


def test_enable_runs_sage_co_and_matches_sdpa(flux):
    model, ref = flux
    assert sage_diffusers.enable(model) == tiny_flux.N_ATTENTION
    try:
        with launch.recording() as records:
            out = tiny_flux.forward(model)
    finally:
        sage_diffusers.disable(model)
    assert len(_attention_launches(records)) == tiny_flux.N_ATTENTION  # every attention ran on sage-co's kernel
    assert out.shape == ref.shape and torch.isfinite(out).all()
    d = out.float() - ref.float()
    assert (d.norm() / ref.float().norm()).item() <= MODEL_REL_L2
    assert d.abs().max().item() <= MODEL_MAX_ABS
    assert not torch.equal(out, ref)
    assert torch.equal(tiny_flux.forward(model), ref)  # disable() restored the SDPA path exactly


def test_dispatcher_passes_every_argument(flux):
    """diffusers' dispatcher drops arguments a backend does not name; ours names all, so none vanish."""
    from diffusers.models import attention_dispatch as ad
    model, _ = flux
    sage_diffusers.enable(model)
    try:
        q = torch.randn(1, 8, 2, 128, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
        mask = torch.ones(8, 8, dtype=torch.bool).tril()
        out = ad.dispatch_attention_fn(q, q, q, attn_mask=mask, backend=ad.AttentionBackendName.SAGE)
        assert torch.equal(out, sageattn(q, q, q, tensor_layout="NHD", attn_mask=mask))   # the mask reached it
        assert not torch.equal(out, sageattn(q, q, q, tensor_layout="NHD"))
        with pytest.raises(ValueError, match="dropout_p"):
            ad.dispatch_attention_fn(q, q, q, dropout_p=0.1, backend=ad.AttentionBackendName.SAGE)
    finally:
        sage_diffusers.disable(model)


def test_disable_of_one_model_leaves_another_enabled(flux):
    """Issue 39 item 8: disable(model_a) used to restore diffusers' global "sage" entry while model_b was still set
    to it (model_b then failed with TypeError: 'NoneType' object is not callable). The entry stays until the last
    enabled model is disabled."""
    from diffusers.models import attention_dispatch as ad
    model_a, ref = flux
    model_b = tiny_flux.build()
    name = ad.AttentionBackendName.SAGE
    before = ad._AttentionBackendRegistry._backends.get(name)
    sage_diffusers.enable(model_a)
    sage_diffusers.enable(model_b)
    try:
        sage_diffusers.disable(model_a)
        with launch.recording() as records:
            out_b = tiny_flux.forward(model_b)
        assert len(_attention_launches(records)) == tiny_flux.N_ATTENTION   # model_b still runs sage-co
        assert torch.equal(tiny_flux.forward(model_a), ref)                  # model_a is back on SDPA
        d = out_b.float() - ref.float()
        assert (d.norm() / ref.float().norm()).item() <= MODEL_REL_L2 and not torch.equal(out_b, ref)
    finally:
        sage_diffusers.disable(model_a)
        sage_diffusers.disable(model_b)
    assert ad._AttentionBackendRegistry._backends.get(name) is before   # the last disable restored the entry


def test_refuses_a_model_without_dispatching_processors():
    with pytest.raises(ValueError, match="model"):
        sage_diffusers.enable(torch.nn.Linear(2, 2))


def test_does_not_replace_a_real_sageattention(flux, monkeypatch):
    from diffusers.models import attention_dispatch as ad
    monkeypatch.setattr(ad, "_CAN_USE_SAGE_ATTN", True)          # as if thu-ml's package were importable
    monkeypatch.setattr(ad, "sageattn", lambda *a, **k: None)
    with pytest.raises(RuntimeError, match="real sageattention"):
        sage_diffusers.enable(flux[0])


def test_unchanged_diffusers_through_the_shim():
    """No sage-co call in diffusers' path at all: the shim is active before diffusers is imported, and diffusers'
    own "sage" backend (set_attention_backend) imports and calls sage-co's sageattn."""
    code = (
        "from sage_co.integrations import sageattention_shim; sageattention_shim.install()\n"
        "import torch, tiny_flux\n"
        "from sage_co import launch\n"
        "model = tiny_flux.build(); ref = tiny_flux.forward(model)\n"
        "model.set_attention_backend('sage')\n"
        "with launch.recording() as rec: out = tiny_flux.forward(model)\n"
        "n = sum('attention' in r.symbol for r in rec)\n"
        "print(n, ((out.float() - ref.float()).norm() / ref.float().norm()).item(), bool(torch.isfinite(out).all()))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "SAGE_CO_SAGEATTENTION_SHIM"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    n, rel, finite = r.stdout.split()[-3:]
    assert int(n) == tiny_flux.N_ATTENTION and finite == "True"
    assert float(rel) <= MODEL_REL_L2
