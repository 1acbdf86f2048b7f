"""The layer under the gpu backend that calls the HIP runtime: one interface (HipBinding), two implementations.

    HipPythonBinding  hip-python (the design's launcher), bound to the libamdhip64 file torch mapped
                      (hip_runtime: hip-python's loader pointed at that file, exactly one runtime mapped)
    CtypesBinding     ctypes on the runtime object torch loaded, found in the process's own list of loaded objects
                      (Linux: dl_iterate_phdr; Windows: EnumProcessModules, amdhip64_7.dll / amdhip64_6.dll) and
                      reached by its existing handle (RTLD_NOLOAD / the HMODULE): never a second copy

hip-python publishes Linux wheels only, so on Windows (AMD's ROCm torch wheels) the ctypes binding is what runs.
Which one: SAGE_CO_HIP_BINDING = "auto" (default: hip-python where it imports, else ctypes), "hip-python" or
"ctypes"; `sage-co info` and the selftest report say which (describe()). The gpu backend (sage_co/backends/hip.py)
is the same code over either: it calls HipBinding.call for everything but the launch, HipBinding.launch for the
launch, and both bindings hand the runtime the same arguments (tests/ops/test_gpu_backend_stub_runtime.py runs the stub-runtime
scenario through each and compares the runtime's call logs and kernarg bytes).

The HIP entry points (CALLS) and how each binding passes them, docs/rdna4.md §HIP runtime: hipError_t is a C int;
handles (module, function, stream, event) are pointers; an out-parameter is written by the runtime and returned as
the call's value. hipModuleLaunchKernel gets kernelParams = NULL and `extra` = the address of the backend's
5-slot config {BUFFER_POINTER, buffer, BUFFER_SIZE, &size, END}.
"""
from __future__ import annotations

import ctypes
import importlib
import importlib.util
import os
import sys
from typing import Any, NamedTuple, Protocol

from . import hip_runtime
from .hip_runtime import HipError, HipPythonMissing, RuntimeFile

ENV_VAR = "SAGE_CO_HIP_BINDING"
CHOICES = ("auto", "hip-python", "ctypes")

_P, _I, _F = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
# name -> (C argument types, out-parameter type or None, out-parameter position: 0 first / -1 last)
CALLS = {
    "hipGetDeviceCount": ((ctypes.POINTER(_I),), _I, 0),
    "hipGetDevice": ((ctypes.POINTER(_I),), _I, 0),
    "hipSetDevice": ((_I,), None, 0),
    "hipRuntimeGetVersion": ((ctypes.POINTER(_I),), _I, 0),
    "hipDriverGetVersion": ((ctypes.POINTER(_I),), _I, 0),
    "hipDeviceSynchronize": ((), None, 0),
    "hipStreamIsCapturing": ((_P, ctypes.POINTER(_I)), _I, -1),   # hipStreamCaptureStatus, an enum (int)
    "hipModuleLoadData": ((ctypes.POINTER(_P), _P), _P, 0),
    "hipModuleGetFunction": ((ctypes.POINTER(_P), _P, ctypes.c_char_p), _P, 0),
    "hipModuleUnload": ((_P,), None, 0),
    "hipEventCreate": ((ctypes.POINTER(_P),), _P, 0),
    "hipEventRecord": ((_P, _P), None, 0),
    "hipEventSynchronize": ((_P,), None, 0),
    "hipEventElapsedTime": ((ctypes.POINTER(_F), _P, _P), _F, 0),   # milliseconds
    "hipEventDestroy": ((_P,), None, 0),
}
LAUNCH_ARGTYPES = (_P,) + (ctypes.c_uint,) * 7 + (_P, _P, _P)   # f, grid, block, shared, stream, params, extra


class DeviceProperties(NamedTuple):
    """What the gpu backend reads of hipDeviceProp_t (hipGetDeviceProperties): the marketing name, the arch as the
    runtime spells it (gcnArchName, e.g. "gfx1201" or "gfx942:sramecc+:xnack-") and the compute-unit count
    (multiProcessorCount)."""
    name: str
    gcn_arch_name: str
    cus: int


# hipDeviceProp_tR0600 (HIP >= 6.0; hipGetDeviceProperties is a macro for hipGetDevicePropertiesR0600), the fields
# the ctypes binding reads at their offsets in the 1472-byte struct (docs/rdna4.md §HIP runtime;
# tests/ops/test_hip_bindings.py checks the offsets and the size against hip-python's own hipDeviceProp_t)
DEVICE_PROP_SIZE = 1472
DEVICE_PROP_OFFSETS = {"name": 0, "multiProcessorCount": 388, "gcnArchName": 1160}


class DevicePropR0600(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 256), ("_before_cus", ctypes.c_uint8 * (388 - 256)),
                ("multiProcessorCount", ctypes.c_int), ("_before_arch", ctypes.c_uint8 * (1160 - 392)),
                ("gcnArchName", ctypes.c_char * 256), ("_tail", ctypes.c_uint8 * (DEVICE_PROP_SIZE - 1416))]


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class HipBinding(Protocol):
    """What the gpu backend needs from a HIP binding."""
    name: str                    # "hip-python" / "ctypes"
    version: str | None          # hip-python's version / the runtime's (hipRuntimeGetVersion) for ctypes
    runtime: RuntimeFile         # the runtime torch loaded, which this binding calls
    success: Any                 # the status of a call that succeeded (compares equal to 0)
    call_errors: tuple           # what a call raises when the runtime cannot be called at all

    def call(self, name: str, *args) -> tuple[Any, Any]:
        """CALLS[name](*args) -> (status, the out-parameter's value or None)."""

    def launch(self, function, gx, gy, gz, bx, by, bz, shared, stream, extra) -> Any:
        """hipModuleLaunchKernel(..., kernelParams=NULL, extra) -> status (the backend's hot path)."""

    def extra(self, address: int) -> Any:
        """The `extra` argument for a config built at `address` (made once per kernel, not per launch)."""

    def stream(self, raw: int) -> Any:
        """The stream argument for torch's raw stream handle."""

    def error_string(self, code: int) -> str:
        """hipGetErrorString's text."""

    def error_names(self, code: int) -> list[str]:
        """Every hipError_t name of `code`."""

    def device_properties(self, index: int) -> tuple[Any, DeviceProperties | None]:
        """hipGetDeviceProperties(index) -> (status, the DeviceProperties or None when it failed)."""


def _hip_python_module(generation: str, name: str):
    """hip-python's submodule `name` of the installed generation ("rocm.bindings" or "hip"), None without it."""
    try:
        return importlib.import_module(f"{generation}.{name}")
    except ImportError:
        return None


class HipPythonBinding:
    name = "hip-python"
    call_errors = (RuntimeError,)   # hip-python's dlopen / dlsym failure

    def __init__(self, init_torch_runtime):
        self.hip, self.generation, self.version = hip_runtime.import_hip()
        self.runtime = self._bind(init_torch_runtime)
        self.success = self.hip.hipError_t.hipSuccess
        # hip-python converts every hipModuleLaunchKernel argument to its own wrapper type per call; the `extra`
        # config, kernelParams=NULL and the stream given as those wrappers pass through as they are (hip-python
        # returns an argument of its type unchanged): ~1.3 -> ~0.5 us per launch. Plain values where the installed
        # hip-python lacks them.
        helpers = _hip_python_module(self.generation, "_hip_helpers")
        extra_type = getattr(helpers, "HipModuleLaunchKernel_extra", None)
        self.extra = extra_type if extra_type is not None else (lambda address: address)
        types = _hip_python_module(self.generation, "util.types" if self.generation == "rocm.bindings"
                                   else "_util.types")
        list_of_pointer = getattr(types, "ListOfPointer", None)
        no_params = list_of_pointer(None) if list_of_pointer is not None else None
        self._stream_type = getattr(self.hip, "ihipStream_t", None)
        self._streams: dict[int, object] = {}   # raw stream handle -> its ihipStream_t (bounded)
        hip_launch = self.hip.hipModuleLaunchKernel

        def launch(function, gx, gy, gz, bx, by, bz, shared, stream, extra):
            return hip_launch(function, gx, gy, gz, bx, by, bz, shared, stream, no_params, extra)[0]
        self.launch = launch

    def _bind(self, init_torch_runtime) -> RuntimeFile:
        """Point hip-python at the libamdhip64 torch mapped and force its load; exactly one runtime mapped."""
        init_torch_runtime()
        before = hip_runtime.mapped_runtimes()
        if not before:
            raise HipError("no HIP runtime (libamdhip64) is mapped in this process after torch's HIP "
                           "initialisation: the gpu backend needs a ROCm build of torch that sees a GPU")
        if len(before) > 1:
            raise hip_runtime.two_runtimes(hip_runtime.describe_files(before), self.name)
        torch_file = before[0]
        hip_runtime._point_loader_at(self.generation, torch_file.path)
        try:
            err, _count = self.hip.hipGetDeviceCount()
        except RuntimeError as exc:   # hip-python's dlopen / dlsym failure
            raise HipError(f"hip-python could not load the HIP runtime torch uses ({torch_file.path}): "
                           f"{exc}") from None
        after = hip_runtime.mapped_runtimes()
        if len(after) > 1:
            raise hip_runtime.two_runtimes(hip_runtime.describe_files(after, torch_file), self.name)
        if err:
            raise hip_runtime.error(self, "hipGetDeviceCount", err)
        return torch_file

    def call(self, name: str, *args):
        result = getattr(self.hip, name)(*args)
        if isinstance(result, tuple):
            return result[0], (result[1] if len(result) == 2 else None)
        return result, None

    def stream(self, raw: int):
        """torch's stream as hip-python's ihipStream_t (a wrapper of the same handle, made once per handle), or the
        raw handle without that type."""
        wrapped = self._streams.get(raw)
        if wrapped is None:
            if self._stream_type is None:
                return raw
            if len(self._streams) >= 256:
                self._streams.clear()
            wrapped = self._streams[raw] = self._stream_type(raw)
        return wrapped

    def error_string(self, code: int) -> str:
        try:
            err = self.hip.hipError_t(code)
        except ValueError:
            err = code
        text = self.hip.hipGetErrorString(err)[1]
        return text.decode() if text is not None else "(no text)"

    def error_names(self, code: int) -> list[str]:
        return [name for name, member in self.hip.hipError_t.__members__.items() if int(member) == int(code)]

    def device_properties(self, index: int):
        status, props = self.hip.hipGetDeviceProperties(index)
        if status != self.success:
            return status, None
        return status, DeviceProperties(_text(props.name), _text(props.gcnArchName), int(props.multiProcessorCount))


def runtime_version(encoded: int) -> str:
    """HIP_VERSION as hipRuntimeGetVersion returns it (major * 10^7 + minor * 10^5 + patch) as "major.minor.patch"."""
    return f"{encoded // 10_000_000}.{encoded // 100_000 % 100}.{encoded % 100_000}"


class CtypesBinding:
    name = "ctypes"
    call_errors = (ctypes.ArgumentError,)
    success = 0

    def __init__(self, init_torch_runtime, platform: str | None = None, windows_api=None):
        init_torch_runtime()
        platform = platform or sys.platform
        found = hip_runtime.loaded_runtimes(platform, windows_api)
        if not found:
            raise HipError("no HIP runtime (libamdhip64.so / amdhip64_N.dll) is loaded in this process after "
                           "torch's HIP initialisation: the gpu backend needs a ROCm build of torch that sees a GPU")
        if len(found) > 1:
            raise hip_runtime.two_runtimes([r.path for r in found], "the ctypes binding")
        loaded = found[0]
        device, inode = "", 0
        if platform.startswith("linux"):   # the same one-file rule as hip-python's, by device + inode
            mapped = hip_runtime.mapped_runtimes()
            if len(mapped) > 1:
                raise hip_runtime.two_runtimes(hip_runtime.describe_files(mapped), "the ctypes binding")
            if mapped:
                device, inode = mapped[0].device, mapped[0].inode
        self.runtime = RuntimeFile(loaded.path, device, inode)
        self.lib = self._open(loaded, platform)
        self._calls = {}
        for name, (argtypes, out, position) in CALLS.items():
            self._calls[name] = (self._function(name, argtypes), out, position)
        self.lib_launch = self._function("hipModuleLaunchKernel", LAUNCH_ARGTYPES)
        self._error_string = self._function("hipGetErrorString", (ctypes.c_int,), ctypes.c_char_p)
        self._properties = self._function("hipGetDevicePropertiesR0600", (ctypes.POINTER(DevicePropR0600), _I))
        launch_fn = self.lib_launch

        def launch(function, gx, gy, gz, bx, by, bz, shared, stream, extra):
            return launch_fn(function, gx, gy, gz, bx, by, bz, shared, stream, None, extra)
        self.launch = launch
        status, count = self.call("hipGetDeviceCount")
        if status:
            raise hip_runtime.error(self, "hipGetDeviceCount", status)
        status, encoded = self.call("hipRuntimeGetVersion")
        self.version = runtime_version(encoded) if not status else None

    def _open(self, loaded: hip_runtime.LoadedRuntime, platform: str):
        """A ctypes library object on the runtime already loaded: Windows through its HMODULE (no LoadLibrary),
        elsewhere dlopen with RTLD_NOLOAD (returns the loaded object's handle, loads nothing)."""
        try:
            if platform == "win32":
                return ctypes.CDLL(loaded.path, handle=loaded.handle)
            return ctypes.CDLL(loaded.path, mode=os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL)
        except OSError as exc:
            raise HipError(f"ctypes could not reach the HIP runtime torch loaded ({loaded.path}): {exc}") from None

    def _function(self, name: str, argtypes, restype=ctypes.c_int):
        try:
            fn = getattr(self.lib, name)
        except AttributeError:
            raise HipError(f"the HIP runtime torch loaded ({self.runtime.path}) has no {name}: the gpu backend "
                           "needs a HIP runtime of ROCm 6.4 or later", call=name) from None
        fn.argtypes, fn.restype = argtypes, restype
        return fn

    def call(self, name: str, *args):
        fn, out, position = self._calls[name]
        if out is None:
            return fn(*args), None
        value = out()
        status = fn(ctypes.byref(value), *args) if position == 0 else fn(*args, ctypes.byref(value))
        return status, value.value

    @staticmethod
    def extra(address: int) -> int:
        return address

    @staticmethod
    def stream(raw: int) -> int:
        return raw

    def error_string(self, code: int) -> str:
        text = self._error_string(int(code))
        return text.decode(errors="replace") if text is not None else "(no text)"

    @staticmethod
    def error_names(code: int) -> list[str]:
        return hip_runtime.error_names(code)

    def device_properties(self, index: int):
        props = DevicePropR0600()
        status = self._properties(ctypes.byref(props), index)
        if status:
            return status, None
        return status, DeviceProperties(_text(props.name), _text(props.gcnArchName), int(props.multiProcessorCount))


def requested(environ=os.environ) -> str:
    """The binding SAGE_CO_HIP_BINDING asks for ("auto" when unset); anything else is a ValueError naming it."""
    value = environ.get(ENV_VAR, "").strip().lower() or "auto"
    if value not in CHOICES:
        raise ValueError(f"{ENV_VAR}: expected one of {CHOICES}, got {environ[ENV_VAR]!r}")
    return value


def hip_python_importable() -> bool:
    """Whether a hip-python generation is installed (found without importing its bindings)."""
    for module in ("rocm.bindings.hip", "hip.hip"):
        try:
            if importlib.util.find_spec(module) is not None:
                return True
        except (ImportError, ValueError):
            pass
    return False


def load(init_torch_runtime, choice: str | None = None) -> HipBinding:
    """The binding the gpu backend runs on: `choice` (default: requested()) "hip-python", "ctypes", or "auto" =
    hip-python where it imports, else ctypes. A hip-python that imports but cannot bind is an error (never a
    silent switch: the two would disagree about which runtime is torch's only if something is wrong)."""
    choice = choice if choice is not None else requested()
    if choice not in CHOICES:
        raise ValueError(f"binding: expected one of {CHOICES}, got {choice!r}")
    if choice != "ctypes":
        try:
            return HipPythonBinding(init_torch_runtime)
        except HipPythonMissing:
            if choice == "hip-python":
                raise
    return CtypesBinding(init_torch_runtime)


def describe(binding: HipBinding | None = None, environ=os.environ) -> str:
    """One line: the binding in use (`binding`), else the one load() would pick here."""
    if binding is not None:
        version = f" {binding.version}" if binding.version else ""
        return f"GPU binding: {binding.name}{version} on {binding.runtime.path}"
    try:
        choice = requested(environ)
    except ValueError as exc:
        return f"GPU binding: {exc}"
    version = hip_runtime.hip_python_version()
    if choice == "ctypes":
        return f"GPU binding: ctypes ({ENV_VAR}=ctypes)"
    if hip_python_importable():
        return f"GPU binding: hip-python {version or '(version unknown)'}" + (
            f" ({ENV_VAR}=hip-python)" if choice == "hip-python" else "")
    if choice == "hip-python":
        return f"GPU binding: hip-python asked for ({ENV_VAR}=hip-python) but not installed"
    return "GPU binding: ctypes (hip-python not installed)"
