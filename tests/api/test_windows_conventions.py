"""sage-co under Windows conventions, where no Windows machine is available: a child process whose sys.platform is
"win32" and os.sep "\\" (set after torch's own, platform-specific import) with hip-python uninstalled (hip-python
has no Windows wheels), imports every sage_co module, runs `sage-co info` and `sage-co comfyui install` on a
ComfyUI folder with spaces in its path, and launches a whole sage_attention call through the gpu backend found the
Windows way: kernel32's module list (faked: stub_hip.FakeKernel32, torch's amdhip64_7.dll among system DLLs, its
HMODULE the stub runtime's handle) -> the ctypes binding -> the stub libamdhip64. What it cannot show: the real
kernel32, a real amdhip64_7.dll, Windows paths in pathlib (the child's pathlib stays POSIX)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import stub_hip

ROOT = Path(__file__).resolve().parents[2]

if getattr(torch.version, "hip", None) is not None:
    pytest.skip("torch is a ROCm build: its own HIP runtime is loaded in every process", allow_module_level=True)
if stub_hip.compiler() is None:
    pytest.skip("no system C compiler (cc, gcc or clang) to build the stub libamdhip64", allow_module_level=True)

CHILD = textwrap.dedent(r"""
    import contextlib, importlib, importlib.abc, io, json, os, pkgutil, sys
    from pathlib import Path
    import torch                       # torch's import is platform-specific: the real one

    class NoHipPython(importlib.abc.MetaPathFinder):   # hip-python has no Windows wheels
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("rocm", "hip"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    sys.meta_path.insert(0, NoHipPython())
    import stub_hip                    # the stand-in runtime, built and loaded as torch would load its DLL
    stub = stub_hip.Stub(stub_hip.build(Path(sys.argv[1]) / "lib"))
    sys.platform, os.sep, os.altsep = "win32", "\\", "/"
    import sage_co
    here = Path(sage_co.__file__).resolve().parent
    modules = sorted(m.name for m in pkgutil.walk_packages([str(here)], "sage_co."))
    for name in modules:
        importlib.import_module(name)
    out = {"modules": len(modules)}

    from sage_co import cli, launch
    from sage_co.backends import hip_runtime
    dll = r"C:\Program Files\ComfyUI portable\python_embeded\Lib\site-packages\_rocm_sdk_core\bin\amdhip64_7.dll"
    modules = [(rf"C:\Windows\System32\mod{i}.dll", 0x7FF0_0000_0000 + 0x10000 * i) for i in range(30)]
    modules.insert(9, (dll, stub.lib._handle))
    hip_runtime._kernel32 = lambda: stub_hip.FakeKernel32(modules)   # kernel32 with this module list

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        cli.console.file = buf
        out["info_rc"] = cli.main(["info"])
        comfy = Path(sys.argv[1]) / "ComfyUI windows portable" / "ComfyUI"
        (comfy / "custom_nodes").mkdir(parents=True)
        out["install_rc"] = cli.main(["comfyui", "install", str(comfy) + "/"])
    out["info"] = [l for l in buf.getvalue().splitlines() if l.startswith("GPU binding")]
    out["entry"] = (comfy / "custom_nodes" / "sage-co" / "__init__.py").read_text()

    from sage_co.backends.hip import HipBackend
    be = HipBackend(platform=stub_hip.HostPlatform(stream=0x77))   # binding and discovery by their defaults
    launch.use_backend("gpu", be)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 77, 2, 64, generator=g).to(torch.bfloat16) for _ in range(3))
    sage_co.sage_attention(q, k, v, backend="gpu")
    out.update(binding=be.binding.name, runtime=be.runtime.path,
               launches=[(r["name"], r["stream"], r["result"]) for r in stub.records("launch")])
    print(json.dumps(out))
""")


def test_windows_conventions_import_cli_and_launch(tmp_path):
    path = os.pathsep.join([str(ROOT / "tests"), str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    env = {k: v for k, v in os.environ.items() if k != "SAGE_CO_HIP_BINDING"}
    r = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, timeout=600,
                       env={**env, "PYTHONPATH": path}, cwd=tmp_path)
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["modules"] > 50
    assert out["info_rc"] == 0 and out["info"] == ["GPU binding: ctypes (hip-python not installed)"]
    assert out["install_rc"] == 0 and "from sage_co.integrations.comfyui import" in out["entry"]
    assert out["binding"] == "ctypes" and out["runtime"].endswith(r"_rocm_sdk_core\bin\amdhip64_7.dll")
    names = [n for n, _, _ in out["launches"]]
    assert len(names) == 2 and "prepare" in names[0] and "attention" in names[1], names
    assert all(stream == 0x77 and result == 0 for _, stream, result in out["launches"])
