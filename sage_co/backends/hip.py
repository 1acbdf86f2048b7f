"""The HIP backend: hip-python's module API on a real gfx1201 (launcher_facts.md §2-§4).

hipModuleLoadData from the shipped bytes, hipModuleGetFunction, hipModuleLaunchKernel with the packed
kernarg buffer passed through `extra` as one ctypes Structure (copied by value; a bytes object would be
passed as a pointer), on torch's current stream. Modules are cached per (device index, sha256) and the
code-object bytes are kept alive as long as the module (CLR builds from the caller's buffer in place).
hip-python is an optional extra (`pip install sage-co[rocm]`); importing sage_co never needs it.
"""
from __future__ import annotations

import ctypes

import torch


def _import_hip():
    try:
        from rocm.bindings import hip  # hip-python >= 10
        return hip
    except ImportError:
        pass
    try:
        from hip import hip  # hip-python 6.x / 7.x
        return hip
    except ImportError:
        raise RuntimeError("backend='hip' needs hip-python: pip install 'sage-co[rocm]' "
                           "(choose the hip-python release matching your ROCm)") from None


class HipError(RuntimeError):
    pass


class HipBackend:
    name = "hip"

    def __init__(self):
        self.hip = _import_hip()
        self.modules: dict[tuple[int, str], tuple[object, bytes]] = {}
        self.functions: dict[tuple[int, str, str], object] = {}

    def _check(self, result, what: str):
        err = result[0] if isinstance(result, tuple) else result
        if err != self.hip.hipError_t.hipSuccess:
            name = getattr(err, "name", str(err))
            raise HipError(f"{what} failed: {name}")
        return result[1:] if isinstance(result, tuple) and len(result) > 1 else None

    def function(self, device_index: int, shipped):
        key = (device_index, shipped.sha256, shipped.symbol)
        if key not in self.functions:
            from .. import registry
            mkey = (device_index, shipped.sha256)
            if mkey not in self.modules:
                data = registry.load_bytes(shipped.file, shipped.sha256)
                # launcher_facts §3: modules load for the current device only
                self._check(self.hip.hipSetDevice(device_index), "hipSetDevice")
                (module,) = self._check(self.hip.hipModuleLoadData(data), f"hipModuleLoadData({shipped.file})")
                self.modules[mkey] = (module, data)
            module = self.modules[mkey][0]
            (fn,) = self._check(self.hip.hipModuleGetFunction(module, shipped.symbol.encode()),
                                f"hipModuleGetFunction({shipped.symbol})")
            self.functions[key] = fn
        return self.functions[key]

    def run(self, shipped, co, kernel, struct, grid, block, args):
        tensors = [v for v in args.values() if isinstance(v, torch.Tensor)]
        if not tensors:
            raise ValueError(f"{shipped.symbol}: the hip backend needs at least one tensor argument to pick a device")
        device = tensors[0].device
        from ..launch import device_arch
        arch = device_arch(device)
        if arch != shipped.arch:
            raise ValueError(f"{shipped.symbol} is built for {shipped.arch}, the tensors are on {device} ({arch})")
        values = {n: (v.data_ptr() if isinstance(v, torch.Tensor) else v) for n, v in args.items()}
        raw = struct.pack(values)

        class Kernargs(ctypes.Structure):  # launcher_facts §2.1: a Structure is copied by value
            _pack_ = 1
            _fields_ = [("raw", ctypes.c_uint8 * len(raw))]

        kernargs = Kernargs()
        ctypes.memmove(ctypes.addressof(kernargs), raw, len(raw))
        with torch.cuda.device(device):
            self._check(self.hip.hipSetDevice(device.index), "hipSetDevice")
            fn = self.function(device.index, shipped)
            stream = torch.cuda.current_stream(device).cuda_stream
            self._check(self.hip.hipModuleLaunchKernel(fn, *grid, *block, 0, stream, None, extra=(kernargs,)),
                        f"hipModuleLaunchKernel({shipped.symbol}, grid={grid}, block={block})")
        return None
