"""The backends that run shipped kernels, one list: "emu" (sage_co.emu on the CPU) and "gpu" (a real gfx1201,
through HIP's module API: sage_co/backends/hip.py, over hip-python or ctypes, hip_bindings.py). Each implements
sage_co.backends.base.Backend; sage_co.launch drives them. Backend modules are imported on first use, so
`import sage_co` needs neither the emulator's tables nor hip-python."""
from __future__ import annotations

import importlib
import warnings

BACKENDS = ("emu", "gpu")
_CLASSES = {"emu": ("sage_co.backends.emu", "EmuBackend"), "gpu": ("sage_co.backends.hip", "HipBackend")}
# Old spellings still accepted (with a FutureWarning): "hip" named the GPU backend until it became "gpu", because
# "hip" is also one of the two attention kernels (kernel="hip", the clang-built HIP source).
ALIASES = {"hip": "gpu"}


def canonical(backend, argument: str = "backend", warn: bool = True) -> str | None:
    """The one place a backend name is checked and normalized (every entry point, the CLI included, goes through
    it): None stays None (choose by the tensors' device); "emu" / "gpu" are returned as given; a deprecated alias
    ("hip") is mapped to its name, with a FutureWarning unless `warn` is False (a check that runs while torch.compile
    traces: the launch that follows normalizes it again, outside the graph, and warns there). Anything else is a
    TypeError / ValueError naming `argument` and the allowed values."""
    if backend is None or backend in BACKENDS:
        return backend
    if not isinstance(backend, str):
        raise TypeError(f"{argument}: expected None or one of {BACKENDS}, got {type(backend).__name__}")
    new = ALIASES.get(backend)
    if new is None:
        raise ValueError(f"{argument}: expected None or one of {BACKENDS}, got {backend!r}")
    if warn:
        warnings.warn(f'{argument}="{backend}" is now "{new}" (the "{backend}" spelling will be removed)',
                      FutureWarning, stacklevel=3)
    return new


def backend_class(name: str) -> type:
    if name not in _CLASSES:
        raise ValueError(f"backend={name!r}: expected one of {BACKENDS}")
    module, cls = _CLASSES[name]
    return getattr(importlib.import_module(module), cls)
