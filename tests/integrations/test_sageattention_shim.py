"""The opt-in `sageattention` shim: import, metadata, never shadowing a real package, env var, runner, CLI line."""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import sage_co
from sage_co import hostsafe
from sage_co.compat import SAGEATTENTION_API_VERSION
from sage_co.integrations import sageattention_shim as shim

ROOT = Path(__file__).resolve().parents[2]
REAL = shim.real_sageattention()
needs_no_real = pytest.mark.skipif(REAL is not None, reason=f"a real sageattention is installed here ({REAL})")


@pytest.fixture
def shim_on():
    shim.install()
    try:
        yield
    finally:
        shim.uninstall()


def _run(code: str, env_extra=None, args=()):
    env = {k: v for k, v in os.environ.items() if k != shim.ENV_VAR}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, *args] if args else [sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@needs_no_real
def test_off_by_default():
    assert not shim.is_active()
    assert importlib.util.find_spec("sageattention") is None


@needs_no_real
def test_install_serves_module_metadata_and_submodule(shim_on):
    import sageattention
    from sageattention.core import sageattn as core_sageattn
    # sage_co.sageattn behind sage_co.hostsafe (a GPU error falls back instead of failing the framework)
    assert sageattention.sageattn is hostsafe.sageattn and core_sageattn is hostsafe.sageattn
    assert sageattention.sageattn.__wrapped__ is sage_co.sageattn
    assert sageattention.sageattn_varlen is hostsafe.sageattn_varlen
    assert sageattention.sageattn_varlen.__wrapped__ is sage_co.sageattn_varlen
    assert sageattention.__version__ == SAGEATTENTION_API_VERSION
    assert importlib.metadata.version("sageattention") == SAGEATTENTION_API_VERSION
    assert importlib.util.find_spec("sageattention") is not None
    assert shim.is_active() and "active" in shim.describe()
    # diffusers imports the whole set of variant names; the FP16-P.V ones run pv_dtype="fp16" (issue 19)
    from sageattention import sageattn_qk_int8_pv_fp16_triton, sageattn_qk_int8_pv_fp8_cuda  # noqa: F401
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 8, 128, generator=g).to(torch.bfloat16)
    assert torch.equal(sageattn_qk_int8_pv_fp16_triton(q, q, q), sage_co.sageattn(q, q, q, pv_dtype="fp16"))
    with pytest.raises(ValueError, match="pv_dtype"):
        sageattn_qk_int8_pv_fp16_triton(q, q, q, pv_dtype="fp8")


@needs_no_real
def test_fp8_variant_runs_sageattn(shim_on):
    import sageattention
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 128, generator=g).to(torch.bfloat16) for _ in range(3))
    out = sageattention.sageattn_qk_int8_pv_fp8_cuda(q, k, v, pv_accum_dtype="fp32+fp32", qk_quant_gran="per_warp")
    assert torch.equal(out, sage_co.sageattn(q, k, v))


@needs_no_real
def test_uninstall_restores():
    shim.install()
    import sageattention  # noqa: F401
    shim.uninstall()
    assert "sageattention" not in sys.modules
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("sageattention")
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("sageattention")


def test_never_shadows_a_real_package_unless_forced(tmp_path, monkeypatch):
    """A stand-in 'real' sageattention on disk (a package directory on sys.path, as an install leaves it)."""
    pkg = tmp_path / "sageattention"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("IS_REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert shim.real_sageattention() is not None
    with pytest.raises(RuntimeError, match="real sageattention"):
        shim.install()
    assert not shim.is_active()
    assert "inactive (real sageattention" in shim.describe()
    with pytest.warns(RuntimeWarning, match="not installed"):
        assert shim.install_from_env({shim.ENV_VAR: "1"}) is False
    try:
        shim.install(force=True)
        import sageattention
        assert not hasattr(sageattention, "IS_REAL") and sageattention.sageattn is hostsafe.sageattn
        assert "shadows the real one" in shim.describe()
    finally:
        shim.uninstall()
    import sageattention
    assert sageattention.IS_REAL  # the real one is back once the shim is off
    del sys.modules["sageattention"]


def test_env_value_checked():
    with pytest.raises(ValueError, match=shim.ENV_VAR):
        shim.install_from_env({shim.ENV_VAR: "yes please"})
    assert shim.install_from_env({shim.ENV_VAR: "0"}) is False and not shim.is_active()


@needs_no_real
def test_env_var_installs_at_import_of_sage_co():
    code = ("import sage_co, sageattention, importlib.metadata as m; "
            "print(sageattention.sageattn.__wrapped__ is sage_co.sageattn, m.version('sageattention'))")
    r = _run(code, {shim.ENV_VAR: "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", SAGEATTENTION_API_VERSION]


@needs_no_real
def test_runner_runs_a_program_that_never_imports_sage_co(tmp_path):
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent("""
        import sys
        from sageattention import sageattn
        print(sageattn.__module__, sys.argv[1:])
    """))
    r = _run("", args=("-m", "sage_co.integrations.sageattention_shim", str(script), "--use-sage-attention"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "sage_co.compat ['--use-sage-attention']"


def test_cli_info_reports_the_shim():
    r = _run("", args=("-m", "sage_co.cli", "info"))
    assert r.returncode == 0, r.stderr
    assert "sageattention shim: inactive" in r.stdout.splitlines()[-1]
