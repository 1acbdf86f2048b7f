"""Which framework switches reach sage-co in this environment: the lines `sage-co info` prints (docs/integrations.md
§Switches has the same table). Reads installed-package metadata and this process's state; imports no framework.
"""
from __future__ import annotations

import importlib.metadata as md
import os
import sys


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _installed(dist: str) -> str:
    v = _version(dist)
    return f"{dist} {v}" if v else f"{dist} not installed"


def _lightx2v_plugin() -> bool:
    return any(ep.name == "sage_co" for ep in md.entry_points(group="lightx2v.platform_plugins"))


SDPA_NOT_INSTALLED = "SDPA routing: not installed (sage_co.sdpa.enabled() / install())"


def _sdpa_line() -> str:
    sdpa = sys.modules.get("sage_co.sdpa")
    if sdpa is None:
        # never imported: nothing in this process can have installed the routing or routed a call, and importing it
        # (torch, and torch._dynamo for its constant-result marker) would make `sage-co info` take seconds
        return SDPA_NOT_INSTALLED + "; 0 calls routed in this process"
    return sdpa.describe() + f"; {sdpa.stats()['routed']} calls routed in this process"


def lines() -> list[str]:
    from . import sageattention_shim, startup
    pth = startup.installed_pth()
    env = os.environ.get(sageattention_shim.ENV_VAR)
    return [
        _sdpa_line(),
        f"diffusers ({_installed('diffusers')}): sage_co.integrations.diffusers.enable(model) for processors that "
        "dispatch; sage_co.sdpa.enabled() for those calling SDPA (SD3, CogVideoX)",
        "ComfyUI: node \"sage-co attention\" after `sage-co comfyui install PATH`; or --use-sage-attention with "
        f"{sageattention_shim.ENV_VAR}=1",
        f"comfy-kitchen ({_installed('comfy-kitchen')}): int8_attention is hard-wired to its extension (not "
        "routable); use the ComfyUI node instead",
        f"LightX2V ({_installed('lightx2v')}): attn_type \"sage_co\" plugin "
        + ("registered (entry point lightx2v.platform_plugins)" if _lightx2v_plugin() else
           "not registered (reinstall sage-co)"),
        f"xDiT / yunchang ({_installed('xfuser')}, {_installed('yunchang')}): their SAGE backends through the "
        "sageattention shim",
        f"{sageattention_shim.ENV_VAR}={env!r} (start-up hook {pth or 'not installed: reinstall sage-co'})"
        if env is not None else
        f"{sageattention_shim.ENV_VAR} unset (start-up hook {pth or 'not installed: reinstall sage-co'})",
        sageattention_shim.describe(),
    ]
