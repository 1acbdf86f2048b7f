"""`sage-co info` reports which framework switches reach sage-co (sage_co.integrations.switches)."""
from __future__ import annotations

import os
import subprocess
import sys

from sage_co import sdpa
from sage_co.integrations import sageattention_shim as shim
from sage_co.integrations import switches


def _info(**env_extra):
    env = {k: v for k, v in os.environ.items() if k != shim.ENV_VAR}
    env.update(env_extra)
    r = subprocess.run([sys.executable, "-m", "sage_co.cli", "info"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_info_reports_the_environment_switch():
    off = _info()
    assert any(line.startswith(f"{shim.ENV_VAR} unset") for line in off)
    assert off[-1].startswith("sageattention shim: inactive")
    if shim.real_sageattention() is None:
        on = _info(**{shim.ENV_VAR: "1"})
        assert any(line.startswith(f"{shim.ENV_VAR}='1'") for line in on)
        assert on[-1].startswith("sageattention shim: active")


def test_lines_follow_this_process_state():
    assert switches.lines()[0].startswith("SDPA routing: not installed")
    sdpa.install(pv_dtype="fp16")
    try:
        first = switches.lines()[0]
    finally:
        sdpa.uninstall()
    assert first.startswith("SDPA routing: installed process-wide") and "fp16" in first
    frameworks = " ".join(switches.lines())
    for name in ("diffusers", "ComfyUI", "comfy-kitchen", "LightX2V", "xDiT", "yunchang"):
        assert name in frameworks
