"""Launch a shipped kernel on a backend. One interface for both backends:

    launch(symbol, struct, grid, block, args, backend=...)

`args` maps every kernarg field to a value: torch tensors for pointer fields (all on one device,
contiguous), Python ints/floats for scalars. The kernarg bytes are packed from the explicit
KernargStruct (sage_co.kernargs), which is checked against the code object's metadata before the first
launch of each kernel. Grid counts workgroups (HIP module-launch semantics), block counts work-items.

Backends: "emu" runs the real code object on the CPU in sage_co.emu (CPU tensors are copied into
emulator memory and the written ones copied back); "hip" runs it on a gfx1201 through hip-python's module
API on torch's current stream.
"""
from __future__ import annotations

import threading

import torch

from . import registry
from .kernargs import KernargStruct

BACKENDS = ("emu", "hip")
_checked: set[tuple] = set()   # (symbol, sha256, declared layout) already compared with the metadata
_backends: dict[str, object] = {}
_backends_lock = threading.Lock()   # two threads' first launches must share one backend (one emulator arena)
launched: list[tuple[str, str]] = []   # (symbol, backend) of every launch in this process, oldest first


def device_arch(device: torch.device) -> str | None:
    """The bare gfx name of a torch GPU device on ROCm builds, else None. launcher_facts §3: split at ':'."""
    if device.type != "cuda" or getattr(torch.version, "hip", None) is None:
        return None
    return torch.cuda.get_device_properties(device).gcnArchName.split(":")[0]


def resolve_backend(tensor: torch.Tensor, backend: str | None) -> str:
    """backend= wins when given; otherwise CPU tensors -> "emu", a gfx1201 ROCm device -> "hip"."""
    if backend is not None:
        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r}: expected one of {BACKENDS} or None (choose by tensor device)")
        if backend == "emu" and tensor.device.type != "cpu":
            raise ValueError(f"backend='emu' runs on CPU tensors; the inputs are on {tensor.device}")
        if backend == "hip" and device_arch(tensor.device) != "gfx1201":
            raise ValueError(f"backend='hip' needs tensors on a gfx1201 ROCm device; the inputs are on "
                             f"{tensor.device} (arch {device_arch(tensor.device)})")
        return backend
    if tensor.device.type == "cpu":
        return "emu"
    arch = device_arch(tensor.device)
    if arch == "gfx1201":
        return "hip"
    raise ValueError(f"no sage-co backend for tensors on {tensor.device} (arch {arch}): sage-co runs on a gfx1201 "
                     "ROCm device (backend='hip') or on CPU tensors through the emulator (backend='emu')")


def get_backend(name: str):
    with _backends_lock:
        return _get_backend_locked(name)


def _get_backend_locked(name: str):
    if name not in _backends:
        if name == "emu":
            from .backends.emu import EmuBackend
            _backends[name] = EmuBackend()
        elif name == "hip":
            from .backends.hip import HipBackend
            _backends[name] = HipBackend()
        else:
            raise ValueError(f"backend={name!r}: expected one of {BACKENDS}")
    return _backends[name]


def checked_kernel(symbol: str, struct: KernargStruct, arch: str = "gfx1201"):
    """The shipped kernel for `symbol`, its code object verified against `struct` (once per process)."""
    shipped = registry.find_symbol(symbol, arch)
    co = registry.load(shipped.file, shipped.sha256)
    key = (symbol, shipped.sha256, tuple(struct.table()))
    if key not in _checked:
        struct.check(co.kernel(symbol).metadata, where=shipped.file)
        _checked.add(key)
    return shipped, co


def _validate_geometry(grid, block, kernel_md: dict, symbol: str):
    for what, dims in (("grid", grid), ("block", block)):
        if len(dims) != 3 or any((not isinstance(d, int)) or d < 1 for d in dims):
            raise ValueError(f"{symbol}: {what} must be three positive ints, got {dims}")
    threads = block[0] * block[1] * block[2]
    limit = kernel_md.get(".max_flat_workgroup_size", 1024)
    if threads > limit:
        raise ValueError(f"{symbol}: block {block} has {threads} work-items, the kernel allows at most {limit}")
    if grid[0] > 2**31 - 1 or grid[1] > 65536 or grid[2] > 65536:  # launcher_facts §4 CLR launch limits
        raise ValueError(f"{symbol}: grid {grid} exceeds the HIP limits (x < 2^31, y and z <= 65536)")


def launch(symbol: str, struct: KernargStruct, grid: tuple, block: tuple, args: dict, *, backend: str):
    """Run one kernel to completion (emu) or enqueue it on the current stream (hip). Returns backend stats."""
    shipped, co = checked_kernel(symbol, struct)
    kernel = co.kernel(symbol)
    _validate_geometry(tuple(grid), tuple(block), kernel.metadata, symbol)
    tensors = {n: v for n, v in args.items() if isinstance(v, torch.Tensor)}
    for name, t in tensors.items():
        field = struct.by_name.get(name)
        if field is None or field.kind != "ptr":
            raise TypeError(f"{symbol}: argument {name!r} is a tensor but the kernarg field is "
                            f"{field.kind if field else 'not declared'}")
        if not t.is_contiguous():
            raise ValueError(f"{symbol}: tensor argument {name!r} must be contiguous")
    devices = {t.device for t in tensors.values()}
    if len(devices) > 1:
        raise ValueError(f"{symbol}: tensor arguments are on several devices {sorted(map(str, devices))}")
    launched.append((symbol, backend))
    return get_backend(backend).run(shipped, co, kernel, struct, tuple(grid), tuple(block), args)
