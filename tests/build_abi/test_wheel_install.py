"""The wheel runs from an installed copy: `pip install` of a wheel built from only what it ships (pyproject.toml, build_hooks.py,
README.md, sage_co/, hsaco/) into a fresh venv, then, from a folder outside any source tree and with no PYTHONPATH,
every module of the installed sage_co imports and the shipped entry points run (`sage-co info`, `sage-co run` on the
emulator through the shipped code objects, the disassembler on a shipped code object). A module that reaches for the
repository (build_asm.py, tests/, asm_src/, tools/) fails here. The venv reuses this interpreter's torch and other
dependencies (--system-site-packages, pip --no-deps --no-index: no network)."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_SOURCES = ("pyproject.toml", "README.md", "build_hooks.py", "sage_co", "hsaco")

CHECK = textwrap.dedent("""
    import importlib, json, pkgutil, sys
    from pathlib import Path
    import sage_co
    here = Path(sage_co.__file__).resolve().parent
    modules = sorted(m.name for m in pkgutil.walk_packages([str(here)], "sage_co."))
    for name in modules:
        importlib.import_module(name)
    from sage_co import registry
    print(json.dumps({"sage_co": str(here), "modules": modules, "hsaco": str(registry.hsaco_dir()),
                      "kernels": len(registry.kernels())}))
""")


def _run(cmd, cwd, env, timeout=600):
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv python, a clean env, a working folder outside every source tree) with the wheel installed."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in SHIPPED_SOURCES:
        p = ROOT / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(p, src / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", tmp / "dist",
          src], tmp, env)
    wheel = next((tmp / "dist").glob("sage_co-*.whl"))
    _run([sys.executable, "-m", "venv", "--system-site-packages", tmp / "venv"], tmp, env)
    python = tmp / "venv" / "bin" / "python"
    # --ignore-installed: a sage-co already installed outside the venv (e.g. an editable dev install) is left alone
    _run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", wheel], tmp, env)
    work = tmp / "elsewhere"
    work.mkdir()
    shutil.rmtree(src)          # nothing of the sources is left to fall back on
    return python, env, work, tmp / "venv"


def test_every_shipped_module_imports_from_the_installed_copy(installed):
    python, env, work, venv = installed
    out = json.loads(_run([python, "-c", CHECK], work, env).strip().splitlines()[-1])
    assert Path(out["sage_co"]).is_relative_to(venv), out["sage_co"]      # not the checkout, not a dev install
    assert Path(out["hsaco"]) == Path(out["sage_co"]) / "hsaco"
    manifest = json.loads((ROOT / "hsaco" / "manifest.json").read_text())   # every row: the family's and one-off ones
    assert out["kernels"] == sum(len(co["provides"]) for co in manifest["code_objects"].values())
    for must in ("sage_co.cli", "sage_co.family", "sage_co.llvm", "sage_co.emu.disasm", "sage_co.ops.attention"):
        assert must in out["modules"]
    assert "sage_co.emu.bench" not in out["modules"]      # the repository-only benchmark is benchmarks/bench_emulator.py


def test_shipped_entry_points_run_from_the_installed_copy(installed):
    python, env, work, venv = installed
    info = _run([venv / "bin" / "sage-co", "info"], work, env)
    assert "gfx1201_sage_attention_fwd_asm_d128_bf16" in info and "gfx1201_sage_prepare_d64_fp16" in info
    run = _run([python, "-m", "sage_co.cli", "run", "-B", "1", "-H", "2", "-S", "64"], work, env)
    assert "accuracy contract met" in run
    co = next((venv / "lib").glob("python*/site-packages/sage_co/hsaco/gfx1201/gfx1201_sage_predict.co"))
    text = _run([python, "-m", "sage_co.emu.disasm", co], work, env)
    assert "s_endpgm" in text


def test_the_wheel_resolves_for_windows_and_hip_python_is_linux_only(installed):
    """Windows users install the same pure-Python wheel: pip resolves it (and its rocm extra) for a win_amd64
    target, and the installed metadata requires hip-python (Linux wheels only) only on Linux."""
    python, env, work, venv = installed
    wheel = next((venv.parent / "dist").glob("sage_co-*.whl"))
    assert wheel.name.endswith("-py3-none-any.whl")
    for target in (str(wheel), f"{wheel}[rocm]"):
        out = _run([python, "-m", "pip", "install", "--dry-run", "--no-index", "--platform", "win_amd64",
                    "--only-binary=:all:", "--no-deps", "--target", venv.parent / "win_target", target], work, env)
        assert "Would install sage-co-" in out, out
    requires = json.loads(_run([python, "-c", "import importlib.metadata as m, json; "
                                "print(json.dumps(m.requires('sage-co')))"], work, env))
    hip = [r for r in requires if r.startswith("hip-python")]
    assert hip and all('sys_platform == "linux"' in r for r in hip), hip
    from packaging.requirements import Requirement
    for extra in ("rocm", "dev"):
        for system, wanted in (("win32", False), ("linux", True)):
            picked = [r for r in map(Requirement, hip) if r.marker.evaluate({"sys_platform": system, "extra": extra})]
            assert bool(picked) is wanted, (extra, system, picked)
