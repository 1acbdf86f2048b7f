"""The gpu backend (BACKENDS "gpu"; the module is named after HIP): HIP's module API on a real gfx1201
(docs/rdna4.md §HIP runtime), called through a binding (sage_co/backends/hip_bindings.py: hip-python, or ctypes
where hip-python is not installed, Windows included), the same launch path over either.

hipModuleLoadData from the shipped bytes, hipModuleGetFunction, hipModuleLaunchKernel with the packed kernarg
buffer passed through a prebuilt `extra` config (its address, which both bindings forward unchanged), on torch's
current stream, with the tensors' device current (HIP requires the stream's device to be the current one). The
binding calls the HIP runtime torch loaded, so both share one runtime, one set of streams and one queue.

Per (device, kernel) the module, the function handle and the kernarg buffer + config are resolved at the first
launch and cached: a launch does no loading, no lookups and creates no ctypes types or buffers. A module is never loaded while
a stream captures a HIP graph (HIP fails that): warm up first (sage_co.launch.warmup), else HipError says so.
Code-object bytes stay alive as long as their module (CLR may build from the caller's buffer in place).

`platform` is what the backend asks about devices and streams: TorchHip (torch's HIP devices) by default;
the test suite passes one that maps CPU tensors onto a stub runtime (tests/stub_hip).
"""
from __future__ import annotations

import ctypes
import threading

import torch

from . import hip_bindings, hip_runtime
from .base import KernelLaunch, KernelPlan, device_arch, hip_device_problem
from .hip_runtime import HipError


class TorchHip:
    """torch's HIP devices and current streams."""

    def init(self) -> None:
        if getattr(torch.version, "hip", None) is None:
            raise HipError(f"backend='gpu' needs a ROCm (HIP) build of torch; this torch {torch.__version__} has "
                           "none (pip install torch from the ROCm index)")
        torch.cuda.init()

    @staticmethod
    def device_problem(tensor: torch.Tensor) -> str | None:
        return hip_device_problem(tensor)

    @staticmethod
    def device_index(tensor: torch.Tensor) -> int:
        return tensor.device.index

    @staticmethod
    def arch(index: int) -> str | None:
        return device_arch(torch.device("cuda", index))

    @staticmethod
    def index_of(device: torch.device) -> int:
        """The HIP device index of a torch device ("cuda" without an index: the current one)."""
        return device.index if device.index is not None else torch.cuda.current_device()

    @staticmethod
    def tensor_device(index: int) -> torch.device:
        """Where tensors for HIP device `index` live."""
        return torch.device("cuda", index)

    @staticmethod
    def stream(index: int) -> int:
        """The raw handle of torch's current stream on device `index` (honours torch.cuda.stream(...) and
        graph-capture streams)."""
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        return raw(index) if raw is not None else torch.cuda.current_stream(index).cuda_stream


# hipModuleLaunchKernel's `extra` config keys (HIP_LAUNCH_PARAM_*, docs/rdna4.md §HIP runtime)
PARAM_BUFFER_POINTER, PARAM_BUFFER_SIZE, PARAM_END = 1, 2, 3


class ResolvedKernel:
    """One kernel on one device: its function handle and a kernarg buffer with the 5-slot `extra` config
    {BUFFER_POINTER, buffer, BUFFER_SIZE, &size, END} built once. A launch packs into the buffer and hands
    the binding the config's address (forwarded as is; HIP copies the kernargs during the call, so the buffer
    is free again when it returns; the lock keeps two threads from packing into it at once)."""

    __slots__ = ("function", "buffer", "size", "config", "config_address", "extra", "lock")

    def __init__(self, function, size: int, wrap_extra):
        self.function = function
        self.buffer = (ctypes.c_uint8 * size)()
        self.size = ctypes.c_size_t(size)
        self.config = (ctypes.c_void_p * 5)(PARAM_BUFFER_POINTER, ctypes.addressof(self.buffer), PARAM_BUFFER_SIZE,
                                            ctypes.addressof(self.size), PARAM_END)
        self.config_address = ctypes.addressof(self.config)
        self.extra = wrap_extra(self.config_address)
        self.lock = threading.Lock()


class BoundKernel:
    """One bound launch (sage_co.launch.BoundLaunch) on this backend: its own kernarg buffer with the scalars
    packed once (the bytes BoundLaunch packed from the struct in sage_co/abi.py), its own `extra` config, the
    pointer fields grouped into runs of adjacent 8-byte fields (one slice store into a little-endian u64 view of
    the buffer per run: pointers are 8-byte aligned, docs/rdna4.md §Entry), grid and block. A call writes the
    addresses and calls hipModuleLaunchKernel with the prebuilt config: the only per-call Python work left is the
    device guard, the stream lookup and the binding's own call."""

    __slots__ = ("backend", "plan", "grid", "block", "buffer", "words", "size", "config", "config_address", "extra",
                 "runs", "lock")

    def __init__(self, backend: "HipBackend", p: KernelPlan, grid: tuple, block: tuple, kernarg_bytes: bytes,
                 offsets: tuple):
        self.backend, self.plan, self.grid, self.block = backend, p, tuple(grid), tuple(block)
        self.buffer = (ctypes.c_uint8 * len(kernarg_bytes)).from_buffer_copy(kernarg_bytes)
        # the whole 8-byte words of the buffer as u64 (every pointer field is one of them)
        self.words = (ctypes.c_uint64.__ctype_le__ * (len(kernarg_bytes) // 8)).from_buffer(self.buffer)
        self.size = ctypes.c_size_t(len(kernarg_bytes))
        self.config = (ctypes.c_void_p * 5)(PARAM_BUFFER_POINTER, ctypes.addressof(self.buffer), PARAM_BUFFER_SIZE,
                                            ctypes.addressof(self.size), PARAM_END)
        self.config_address = ctypes.addressof(self.config)
        self.extra = backend._wrap_extra(self.config_address)
        # offsets: each row entry's field offset, in the order a call's row gives them (BoundLaunch: the tensors'
        # fields by offset, then its workspace fields); a run is a row slice whose fields are adjacent words
        assert all(off % 8 == 0 for off in offsets), (p.symbol, offsets)   # the ABI's natural alignment
        runs, start, n = [], 0, 0   # (first pointer's index in the row, row slice end, first word, word end)
        for i, off in enumerate(offsets):
            if n and off == offsets[i - 1] + 8:
                n += 1
            else:
                if n:
                    runs.append((start, start + n, offsets[start] // 8, offsets[start] // 8 + n))
                start, n = i, 1
        if n:
            runs.append((start, start + n, offsets[start] // 8, offsets[start] // 8 + n))
        self.runs = tuple(runs)
        self.lock = threading.Lock()

    def __call__(self, row: list, first: torch.Tensor, want_bytes: bool) -> bytes | None:
        """Launch with the pointer fields = `row` (addresses in offset order) on `first`'s device; returns the
        kernarg bytes handed to HIP when `want_bytes` (launch.recording)."""
        be, p = self.backend, self.plan
        index = be.platform.device_index(first)
        per_device = p.backend_state.get(be)
        rk = per_device.get(index) if per_device is not None else None
        if rk is None:
            rk = be._resolve(p, index)
        if getattr(be._guard, "index", None) != index:   # outside a device_guard(index): _enqueue sets the device
            return be._enqueue(p, index, rk.function, self.grid, self.block, 0, self.lock,
                               lambda: self._pack(row, want_bytes), self.extra)
        # inside device_guard(index) (a whole op call): _enqueue's launch without the device switch or a closure
        stream = be._stream(index)
        grid, block = self.grid, self.block
        words = self.words
        try:
            with self.lock:
                for a, b, i, j in self.runs:   # _pack, inline
                    words[i:j] = row[a:b]
                data = bytes(self.buffer) if want_bytes else None
                err = be._launch(rk.function, *grid, *block, 0, stream, self.extra)
        except be._call_errors as exc:
            raise be._unreachable(p, exc) from None
        if err != be._success:
            raise be._launch_failed(p, err, grid, block, index)
        return data

    def _pack(self, row: list, want_bytes: bool) -> bytes | None:
        words = self.words
        for a, b, i, j in self.runs:
            words[i:j] = row[a:b]
        return bytes(self.buffer) if want_bytes else None


class _DeviceGuard:
    """HipBackend.device_guard's context manager (a class: cheaper to enter than a generator's)."""

    __slots__ = ("backend", "index", "previous", "outer", "nested")

    def __init__(self, backend: "HipBackend", index: int):
        self.backend, self.index = backend, index

    def __enter__(self):
        be, index = self.backend, self.index
        guard = be._guard
        outer = getattr(guard, "index", None)
        self.nested = outer == index
        if self.nested:   # the outer guard holds it
            return
        previous = be._current_device()
        if previous != index:
            be._call("hipSetDevice", index)
        self.previous, self.outer = previous, outer
        guard.index = index

    def __exit__(self, *exc):
        if self.nested:
            return
        self.backend._guard.index = self.outer
        if self.previous != self.index:
            self.backend._call("hipSetDevice", self.previous)


class HipBackend:
    name = "gpu"   # sage_co.backends.BACKENDS
    options = frozenset({"dynamic_lds"})   # bytes of dynamic LDS: hipModuleLaunchKernel's sharedMemBytes

    def __init__(self, platform=None, binding=None):
        """`binding`: "hip-python", "ctypes" or "auto" (default: $SAGE_CO_HIP_BINDING, else "auto": hip-python
        where installed, ctypes where not; hip_bindings.load), or a HipBinding already made on torch's runtime.
        Any failure to reach the runtime is a HipError."""
        self.platform = platform if platform is not None else TorchHip()
        try:
            self.binding = (hip_bindings.load(self.platform.init, binding) if binding is None
                            or isinstance(binding, str) else binding)
        except HipError:
            raise
        except ValueError as exc:   # SAGE_CO_HIP_BINDING / binding= names no binding: the message names it
            raise HipError(str(exc)) from None
        except Exception as exc:   # anything else a binding raises while loading is still "the runtime is unusable"
            raise HipError(f"the HIP binding failed to load: {type(exc).__name__}: {exc}") from exc
        self.runtime = self.binding.runtime
        self.hip_python_version = self.binding.version if self.binding.name == "hip-python" else None
        self.modules: dict[tuple[int, str], tuple[object, bytes]] = {}   # (device, sha256) -> (module, bytes)
        self.module_loads = 0
        self._resolved_plans: list[KernelPlan] = []   # plans whose backend_state holds this backend's handles
        self._lock = threading.Lock()
        self._success = self.binding.success
        self._launch = self.binding.launch
        self._call_errors = self.binding.call_errors
        self._wrap_extra = self.binding.extra
        self._guard = threading.local()   # .index: the device a device_guard() made current on this thread

    def device_problem(self, tensor: torch.Tensor) -> str | None:
        return self.platform.device_problem(tensor)

    def _stream(self, index: int):
        """torch's current stream on device `index`, as the binding passes it."""
        return self.binding.stream(self.platform.stream(index))

    # --------------------------------------------------------------------------------- HIP calls
    def _call(self, name: str, *args, detail: str = "", fault_note: bool = False):
        """The binding's call `name`; raise HipError for a non-success result (or a runtime it cannot call)."""
        try:
            err, value = self.binding.call(name, *args)
        except self._call_errors as exc:
            raise HipError(f"{name}{detail}: {self.binding.name} could not call the HIP runtime "
                           f"{self.runtime.path}: {exc}", call=name) from None
        if err != self._success:
            raise hip_runtime.error(self.binding, name, err, detail, fault_note)
        return value

    def _current_device(self) -> int:
        """hipGetDevice: _call("hipGetDevice") without its generic dispatch (once per op call or unguarded
        launch)."""
        try:
            status, index = self.binding.call("hipGetDevice")
        except self._call_errors:
            return self._call("hipGetDevice")   # the binding could not call the runtime: _call's HipError
        if status != self._success:
            raise hip_runtime.error(self.binding, "hipGetDevice", status, "", False)
        return index

    def device_properties(self, index: int) -> hip_bindings.DeviceProperties:
        """hipGetDeviceProperties of device `index` through the binding: name, gcnArchName, CU count."""
        try:
            err, props = self.binding.device_properties(index)
        except self._call_errors as exc:
            raise HipError(f"hipGetDeviceProperties(device {index}): {self.binding.name} could not call the HIP "
                           f"runtime {self.runtime.path}: {exc}", call="hipGetDeviceProperties") from None
        if err != self._success:
            raise hip_runtime.error(self.binding, "hipGetDeviceProperties", err, f"(device {index})")
        return props

    def versions(self) -> tuple[int, int]:
        """(hipDriverGetVersion, hipRuntimeGetVersion): the driver's and the runtime's encoded versions."""
        return int(self._call("hipDriverGetVersion")), int(self._call("hipRuntimeGetVersion"))

    def device_count(self) -> int:
        return int(self._call("hipGetDeviceCount"))

    def _capturing(self, stream: int) -> bool:
        status = self._call("hipStreamIsCapturing", stream)
        return int(status) != 0

    def _with_device(self, index: int, fn):
        with self.device_guard(index):
            return fn()

    def device_guard(self, index: int) -> _DeviceGuard:
        """Make device `index` current for the launches inside the block (one hipGetDevice, and hipSetDevice
        there and back only when another device is current): a call's launches skip their own per-launch guard."""
        return _DeviceGuard(self, index)

    # --------------------------------------------------------------------------------- resolution
    def _resolve(self, p: KernelPlan, index: int) -> ResolvedKernel:
        """Plan `p` on device `index`, loading its module at first use."""
        with self._lock:
            per_device = p.backend_state.setdefault(self, {})
            if index in per_device:
                return per_device[index]
            arch = self.platform.arch(index)
            if arch != p.shipped.arch:
                raise ValueError(f"{p.symbol} is built for {p.shipped.arch}; device {index} is {arch}")
            key = (index, p.shipped.sha256)
            if key not in self.modules:
                if self._capturing(self.platform.stream(index)):
                    raise HipError(f"{p.symbol}: its code object is not loaded on device {index} and the current "
                                   "stream is capturing a HIP graph, where loading a module fails; call "
                                   "sage_co.launch.warmup(device=...) (or run each op once) before the capture",
                                   call="hipModuleLoadData")
                from .. import registry
                data = registry.load_bytes(p.shipped.file, p.shipped.sha256)
                module = self._with_device(index, lambda: self._call("hipModuleLoadData", data,
                                                                     detail=f"({p.shipped.file})"))
                self.modules[key] = (module, data)
                self.module_loads += 1
            module = self.modules[key][0]
            fn = self._with_device(index, lambda: self._call("hipModuleGetFunction", module, p.symbol.encode(),
                                                             detail=f"({p.symbol})"))
            per_device[index] = ResolvedKernel(fn, p.struct.size, self._wrap_extra)
            self._resolved_plans.append(p)
            return per_device[index]

    def unload(self) -> None:
        """hipModuleUnload every loaded module and forget every resolved kernel (the next launch loads again).
        The caller makes sure no enqueued kernel still runs from them (synchronize first)."""
        with self._lock:
            for p in self._resolved_plans:
                p.backend_state.pop(self, None)
            self._resolved_plans = []
            modules, self.modules = self.modules, {}
            for (index, _sha), (module, _data) in modules.items():
                self._with_device(index, lambda: self._call("hipModuleUnload", module))

    def bind_launch(self, p: KernelPlan, grid: tuple, block: tuple, kernarg_bytes: bytes, offsets: tuple
                    ) -> BoundKernel:
        """The fast path of one sage_co.launch.BoundLaunch (see BoundKernel): `offsets` are the pointer fields'
        offsets in the order its calls give their addresses."""
        return BoundKernel(self, p, grid, block, kernarg_bytes, offsets)

    def warmup(self, plans, device=None) -> None:
        index = device.index if device is not None and device.index is not None else self._call("hipGetDevice")
        for p in plans:
            self._resolve(p, index)

    # --------------------------------------------------------------------------------- launch
    def run(self, kl: KernelLaunch):
        p = kl.plan
        if not kl.tensors:
            raise ValueError(f"{p.symbol}: the gpu backend needs at least one tensor argument to pick a device")
        index = self.platform.device_index(next(iter(kl.tensors.values())))
        rk = p.backend_state.get(self, {}).get(index)
        if rk is None:
            rk = self._resolve(p, index)
        shared = kl.options.get("dynamic_lds", 0) if kl.options else 0
        if isinstance(shared, bool) or not isinstance(shared, int) or shared < 0:
            raise ValueError(f"{p.symbol}: dynamic_lds must be an int >= 0 (bytes), got {shared!r}")

        def pack():
            p.packer.pack_into(rk.buffer, kl.values)
            return bytes(rk.buffer)
        kl.kernarg_bytes = self._enqueue(p, index, rk.function, kl.grid, kl.block, shared, rk.lock, pack, rk.extra)
        return None

    def _enqueue(self, p: KernelPlan, index: int, function, grid, block, shared: int, lock, pack, extra):
        """With device `index` current: under `lock`, pack() (writes the kernarg buffer, returns what to record)
        and hipModuleLaunchKernel on torch's current stream of that device; HIP's errors as HipError. Returns
        pack()'s result."""
        stream = self._stream(index)
        if getattr(self._guard, "index", None) == index:   # inside device_guard(index): already current
            previous = index
        else:
            previous = self._current_device()
        if previous != index:
            self._call("hipSetDevice", index)
        try:
            with lock:
                data = pack()
                err = self._launch(function, *grid, *block, shared, stream, extra)
        except self._call_errors as exc:
            raise self._unreachable(p, exc) from None
        finally:
            if previous != index:
                self._call("hipSetDevice", previous)
        if err != self._success:
            raise self._launch_failed(p, err, grid, block, index)
        return data

    def _unreachable(self, p: KernelPlan, exc: Exception) -> HipError:
        return HipError(f"hipModuleLaunchKernel({p.symbol}): {self.binding.name} could not call the HIP runtime: "
                        f"{exc}", call="hipModuleLaunchKernel")

    def _launch_failed(self, p: KernelPlan, err, grid, block, index: int) -> HipError:
        return hip_runtime.error(self.binding, "hipModuleLaunchKernel", err,
                                 f"({p.symbol}, grid={grid}, block={block}, device {index})", fault_note=True)

    def synchronize(self) -> None:
        """hipDeviceSynchronize on the current device: where a kernel's fault is reported."""
        self._call("hipDeviceSynchronize", fault_note=True)
