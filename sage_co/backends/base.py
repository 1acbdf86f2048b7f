"""What every backend shares: the Backend protocol, one launch's description (KernelLaunch), the cached
per-kernel plan (KernelPlan: checked metadata and a precompiled kernarg packer), and device facts.

A leaf module: it imports torch and sage_co's data modules, never sage_co.launch or a backend, so
launch.py -> backends/* -> base.py has no cycle.
"""
from __future__ import annotations

import struct as _struct
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ..kernargs import KINDS, KernargStruct

# Every pointer argument must start on this boundary: the kernels read and write with 16-byte vector accesses
# (global_load_b128 / global_store_b128, docs/rdna4.md §Alignment).
POINTER_ALIGN = 16


def device_arch(device: torch.device) -> str | None:
    """The bare gfx name of a torch GPU device on ROCm builds, else None (gcnArchName split at ':',
    docs/rdna4.md §HIP runtime)."""
    if device.type != "cuda" or getattr(torch.version, "hip", None) is None:
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return torch.cuda.get_device_properties(index).gcnArchName.split(":")[0]


def emu_device_problem(tensor: torch.Tensor) -> str | None:
    if tensor.device.type != "cpu":
        return f"backend='emu' runs on CPU tensors; the inputs are on {tensor.device}"
    return None


def hip_device_problem(tensor: torch.Tensor) -> str | None:
    arch = device_arch(tensor.device)
    if arch != "gfx1201":
        return (f"backend='gpu' needs tensors on a gfx1201 ROCm device; the inputs are on {tensor.device} "
                f"(arch {arch})")
    return None


class Packer:
    """A kernarg struct compiled once into one struct.Struct (fields in offset order, gaps as pad bytes).
    pack(values) is byte for byte KernargStruct.pack(values); any value the fast path cannot take (missing,
    extra, a bool, out of range, wrong type) goes through KernargStruct.pack for its error message."""

    def __init__(self, struct: KernargStruct):
        self.struct = struct
        fmt, pos, names = "<", 0, []
        for f in sorted(struct.fields, key=lambda f: f.offset):
            fmt += "x" * (f.offset - pos) + KINDS[f.kind][0][1:]
            pos = f.offset + f.size
            names.append(f.name)
        fmt += "x" * (struct.size - pos)
        self.compiled = _struct.Struct(fmt)
        self.names = tuple(names)
        assert self.compiled.size == struct.size, (struct.name, self.compiled.size, struct.size)

    def pack(self, values: dict) -> bytes:
        if len(values) == len(self.names):
            try:
                row = [values[n] for n in self.names]
                if bool not in map(type, row):   # struct would take a bool as an int
                    return self.compiled.pack(*row)
            except (KeyError, _struct.error, TypeError, OverflowError):
                pass
        return self.struct.pack(values)   # raises the clear error (or packs what the fast path declined)

    def pack_into(self, buffer, values: dict) -> None:
        """pack(values) written into `buffer` (a writable buffer of struct.size bytes)."""
        if len(values) == len(self.names):
            try:
                row = [values[n] for n in self.names]
                if bool not in map(type, row):   # struct would take a bool as an int
                    self.compiled.pack_into(buffer, 0, *row)
                    return
            except (KeyError, _struct.error, TypeError, OverflowError):
                pass
        memoryview(buffer).cast("B")[:] = self.struct.pack(values)


@dataclass(eq=False)
class KernelPlan:
    """Everything about one shipped kernel that does not change between launches, built at its first launch:
    the manifest row, the parsed code object and kernel, the kernarg struct (checked against the metadata),
    its packer, the pointer fields, the metadata's read-only pointers and the workgroup size limit."""
    symbol: str
    shipped: Any                 # registry.ShippedKernel
    co: Any                      # codeobj.CodeObject
    kernel: Any                  # codeobj.Kernel
    struct: KernargStruct
    packer: Packer
    pointer_fields: frozenset
    read_only: frozenset         # pointer fields the metadata marks read_only (never copied back by emu)
    max_threads: int
    checked_geometry: set = field(default_factory=set)  # (grid, block) pairs already validated (launch.py)
    backend_state: dict = field(default_factory=dict)   # backend instance -> its cached handles for this kernel


@dataclass(eq=False)
class KernelLaunch:
    """One launch, handed to Backend.run. `values` has every kernarg field: tensors already replaced by their
    data_ptr() (the gpu backend packs these; the emulator replaces them with its own addresses). A backend
    sets `kernarg_bytes` (and `addresses`: field -> device address) to what it handed the runtime."""
    plan: KernelPlan
    grid: tuple
    block: tuple
    args: dict                   # the caller's mapping (tensors and scalars)
    tensors: dict                # field -> torch.Tensor
    values: dict                 # field -> int / float
    options: dict                # backend options (emu: sanitize, lds_race_check, trace_wave)
    kernarg_bytes: bytes | None = None
    addresses: dict | None = None


class Backend(Protocol):
    """The interface launch.launch() drives. `options` names the keyword options launch() forwards to run()
    (an unknown one is a TypeError naming it)."""
    name: str
    options: frozenset

    def device_problem(self, tensor: torch.Tensor) -> str | None:
        """Why this backend cannot run on tensors like this one (None when it can)."""

    def run(self, launch: KernelLaunch) -> Any:
        """Run (emu) or enqueue (gpu) the launch; returns the backend's result (emu: statistics)."""

    def warmup(self, plans: list[KernelPlan], device: torch.device | None) -> None:
        """Load and resolve these kernels now (before a graph capture, say), so run() loads nothing."""
