"""SAGE_CO_SAGEATTENTION_SHIM from the environment alone: the wheel and the editable wheel ship
sage_co_sageattention_shim.pth (build_hooks.py), which Python's site runs at start-up in a process that never
imports sage_co; and the `-m` launcher runs a script as `python SCRIPT` does (its folder first on sys.path)."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

from sage_co.integrations import startup
from sage_co.integrations import sageattention_shim as shim

ROOT = Path(__file__).resolve().parents[2]
REAL = shim.real_sageattention()
needs_no_real = pytest.mark.skipif(REAL is not None, reason=f"a real sageattention is installed here ({REAL})")


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k != shim.ENV_VAR}
    env.update(extra)
    return env


def _venv_env(**extra):
    """The venv's own site-packages (with the .pth) is processed before the system ones holding torch, as in a venv
    made with --system-site-packages on a machine with torch preinstalled: the hook must not need torch. sage_co itself
    is this checkout's (PYTHONPATH is on sys.path before any .pth runs), as if installed into the venv: an editable
    install's own finder .pth in the system site-packages would only run after the venv's."""
    return _env(PYTHONPATH=str(ROOT), **extra)


@pytest.mark.parametrize("hook", ["build_wheel", "build_editable"])   # pip install . / pip install -e .
def test_wheels_ship_the_pth_at_the_top(hook, tmp_path):
    code = f"import setuptools.build_meta as b; print(b.{hook}({str(tmp_path)!r}))"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    wheel = tmp_path / r.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as z:
        assert z.read(startup.PTH_NAME).decode() == startup.PTH_LINE
        record = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))).decode()
    assert f"\n{startup.PTH_NAME}," in "\n" + record   # pip uninstall removes it


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A venv seeing this environment's packages, with the .pth in its own site-packages (where pip puts it)."""
    d = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(d)], check=True,
                   timeout=120)
    python = d / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert purelib != sysconfig.get_paths()["purelib"]
    (Path(purelib) / startup.PTH_NAME).write_text(startup.PTH_LINE)
    return python


@needs_no_real
@pytest.mark.parametrize("value", ["1", "on"])
def test_variable_alone_reaches_a_process_that_never_imports_sage_co(venv, value, tmp_path):
    code = ("import sys; at_start = 'torch' in sys.modules; import sageattention, importlib.metadata as m; "
            "print(sageattention.__sage_co__, at_start, m.version('sageattention'))")
    r = subprocess.run([str(venv), "-c", code], cwd=tmp_path, env=_venv_env(**{shim.ENV_VAR: value}),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[:2] == ["True", "False"]   # the shim is on; start-up did not import torch


@needs_no_real
@pytest.mark.parametrize("value", [None, "", "0", "off", "false"])
def test_pth_does_nothing_unless_the_variable_is_set(venv, value, tmp_path):
    code = ("import sys, importlib.util as u; "
            "print('sage_co' in sys.modules, 'torch' in sys.modules, u.find_spec('sageattention'))")
    env = _venv_env() if value is None else _venv_env(**{shim.ENV_VAR: value})
    r = subprocess.run([str(venv), "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["False", "False", "None"]   # not even imported: start-up costs nothing


@needs_no_real
def test_launcher_runs_a_script_like_python_does(tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    (app / "helper.py").write_text("WHO = 'sibling'\n")
    (app / "main.py").write_text(textwrap.dedent("""
        import sys
        import helper                                   # a sibling module, as ComfyUI's main.py imports its own
        from sageattention import sageattn
        print(helper.WHO, __name__, __file__ == sys.argv[0], sys.path[0], sys.argv[1:], sageattn.__module__)
    """))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = subprocess.run([sys.executable, "-m", "sage_co.integrations.sageattention_shim", str(app / "main.py"),
                        "--use-sage-attention"], cwd=elsewhere, env=_env(), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["sibling", "__main__", "True", str(app.resolve()), "['--use-sage-attention']",
                                "sage_co.compat"]


def test_launcher_help_and_usage_errors(tmp_path):
    run = [sys.executable, "-m", "sage_co.integrations.sageattention_shim"]
    r = subprocess.run([*run, "--help"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.startswith("usage: python -m sage_co.integrations.sageattention_shim ")
    r = subprocess.run(run, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.startswith("usage:")
    r = subprocess.run([*run, str(tmp_path / "missing.py")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "missing.py" in r.stderr
