"""The backends that run shipped kernels, one list: "emu" (sage_co.emu on the CPU) and "hip" (hip-python on a
gfx1201). Each implements sage_co.backends.base.Backend; sage_co.launch drives them. Backend modules are
imported on first use, so `import sage_co` needs neither the emulator's tables nor hip-python."""
from __future__ import annotations

import importlib

BACKENDS = ("emu", "hip")
_CLASSES = {"emu": ("sage_co.backends.emu", "EmuBackend"), "hip": ("sage_co.backends.hip", "HipBackend")}


def backend_class(name: str) -> type:
    if name not in _CLASSES:
        raise ValueError(f"backend={name!r}: expected one of {BACKENDS}")
    module, cls = _CLASSES[name]
    return getattr(importlib.import_module(module), cls)
