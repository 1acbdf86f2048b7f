"""One HIP runtime per process: the runtime torch loaded, reached through a binding (hip-python, or ctypes where
hip-python is not installed: sage_co/backends/hip_bindings.py), and HIP errors turned into one clear exception type.

hip-python finds libamdhip64 by its own search (10.x: its package, TheRock's rocm_sdk, $ROCM_PATH or /opt/rocm,
then the bare name; 6.x/7.x: the bare name `libamdhip64.so`), which can be a different file than the one torch
loaded (docs/rdna4.md §HIP runtime). Two runtimes in one process mean torch's streams are unknown to the
second one (launches fail) or, on the default stream, kernels run on a second queue unordered with torch's (a
silent race). So after torch's HIP initialisation, bind() reads the libraries the process has mapped, points
hip-python's loader at torch's file before its first call, forces the load, and checks that exactly one
libamdhip64 file (device + inode) is mapped; anything else is refused with HipError saying what to do.

The ctypes binding never opens a file at all: it finds the runtime object torch loaded in the process's own list
of loaded objects (Linux: dl_iterate_phdr; Windows: the module list, amdhip64_7.dll / amdhip64_6.dll) and takes
that object's handle (loaded_runtimes()), refusing two of them the same way.
"""
from __future__ import annotations

import ctypes
import os
import re
import sys
from dataclasses import dataclass

# hip-python release series this backend is written and tested for (README "Supported versions"); the
# first three numbers of a hip-python version name the ROCm release its bindings were generated against.
SUPPORTED_HIP_PYTHON = ("6.4", "7.0", "7.1", "7.2", "10.0")

# the HIP runtime series (hipRuntimeGetVersion: major * 10^7 + minor * 10^5 + patch) each hip-python series is
# generated against (README "Supported versions"; 10.0 is TheRock's, HIP 7.15: any 7.x above the 7.0-7.2 series)
HIP_PYTHON_RUNTIME = {"6.4": lambda M, m: (M, m) == (6, 4), "7.0": lambda M, m: (M, m) == (7, 0),
                      "7.1": lambda M, m: (M, m) == (7, 1), "7.2": lambda M, m: (M, m) == (7, 2),
                      "10.0": lambda M, m: M == 7 and m >= 3}


def hip_python_series_problem(hip_python: str | None, runtime_version: int) -> str:
    """Why this hip-python does not fit the HIP runtime torch loaded ("" when it does): its series (the first two
    numbers) must be in SUPPORTED_HIP_PYTHON and generated against the runtime's series."""
    M, m = runtime_version // 10_000_000, runtime_version // 100_000 % 100
    if not hip_python:
        return "hip-python is not installed"
    series = ".".join(hip_python.split(".")[:2])
    if series not in SUPPORTED_HIP_PYTHON:
        return f"hip-python {hip_python}: series {series} is not one of the supported {SUPPORTED_HIP_PYTHON}"
    if not HIP_PYTHON_RUNTIME[series](M, m):
        return (f"hip-python {hip_python} (series {series}) was generated for another ROCm than the HIP runtime "
                f"torch loaded ({M}.{m}, hipRuntimeGetVersion {runtime_version}): install the series of your "
                "ROCm (README, Supported versions)")
    return ""


SYNC_NOTE = ("kernels run asynchronously: an error a kernel leaves (e.g. hipErrorLaunchFailure) comes back from the "
             "next synchronizing call (or the next launch), not from the launch that caused it; a memory fault inside a kernel "
             "aborts the process under ROCm's defaults instead (docs/gpu.md \"Errors\")")


class HipError(RuntimeError):
    """A HIP call failed, or the HIP runtime cannot be used (no binding, libamdhip64 not loadable, or not the file
    torch uses). `call` names the HIP function, `code` is its hipError_t value (None when the failure is not a HIP
    return code)."""

    def __init__(self, message: str, *, call: str | None = None, code: int | None = None):
        super().__init__(message)
        self.call, self.code = call, code


# hipError_t: every name and value (aliases share a value), as HIP's hip_runtime_api.h declares them and
# hip-python's hipError_t enum carries them (docs/rdna4.md §HIP runtime); the ctypes binding names errors from it,
# tests/ops/test_hip_bindings.py checks it against the installed hip-python.
HIP_ERRORS = (
    ("hipSuccess", 0), ("hipErrorInvalidValue", 1), ("hipErrorOutOfMemory", 2), ("hipErrorMemoryAllocation", 2),
    ("hipErrorNotInitialized", 3), ("hipErrorInitializationError", 3), ("hipErrorDeinitialized", 4),
    ("hipErrorProfilerDisabled", 5), ("hipErrorProfilerNotInitialized", 6), ("hipErrorProfilerAlreadyStarted", 7),
    ("hipErrorProfilerAlreadyStopped", 8), ("hipErrorInvalidConfiguration", 9), ("hipErrorInvalidPitchValue", 12),
    ("hipErrorInvalidSymbol", 13), ("hipErrorInvalidDevicePointer", 17), ("hipErrorInvalidMemcpyDirection", 21),
    ("hipErrorInsufficientDriver", 35), ("hipErrorMissingConfiguration", 52), ("hipErrorPriorLaunchFailure", 53),
    ("hipErrorInvalidDeviceFunction", 98), ("hipErrorNoDevice", 100), ("hipErrorInvalidDevice", 101),
    ("hipErrorInvalidImage", 200), ("hipErrorInvalidContext", 201), ("hipErrorContextAlreadyCurrent", 202),
    ("hipErrorMapFailed", 205), ("hipErrorMapBufferObjectFailed", 205), ("hipErrorUnmapFailed", 206),
    ("hipErrorArrayIsMapped", 207), ("hipErrorAlreadyMapped", 208), ("hipErrorNoBinaryForGpu", 209),
    ("hipErrorAlreadyAcquired", 210), ("hipErrorNotMapped", 211), ("hipErrorNotMappedAsArray", 212),
    ("hipErrorNotMappedAsPointer", 213), ("hipErrorECCNotCorrectable", 214), ("hipErrorUnsupportedLimit", 215),
    ("hipErrorContextAlreadyInUse", 216), ("hipErrorPeerAccessUnsupported", 217), ("hipErrorInvalidKernelFile", 218),
    ("hipErrorInvalidGraphicsContext", 219), ("hipErrorInvalidSource", 300), ("hipErrorFileNotFound", 301),
    ("hipErrorSharedObjectSymbolNotFound", 302), ("hipErrorSharedObjectInitFailed", 303),
    ("hipErrorOperatingSystem", 304), ("hipErrorInvalidHandle", 400), ("hipErrorInvalidResourceHandle", 400),
    ("hipErrorIllegalState", 401), ("hipErrorNotFound", 500), ("hipErrorNotReady", 600),
    ("hipErrorIllegalAddress", 700), ("hipErrorLaunchOutOfResources", 701), ("hipErrorLaunchTimeOut", 702),
    ("hipErrorPeerAccessAlreadyEnabled", 704), ("hipErrorPeerAccessNotEnabled", 705),
    ("hipErrorSetOnActiveProcess", 708), ("hipErrorContextIsDestroyed", 709), ("hipErrorAssert", 710),
    ("hipErrorHostMemoryAlreadyRegistered", 712), ("hipErrorHostMemoryNotRegistered", 713),
    ("hipErrorLaunchFailure", 719), ("hipErrorCooperativeLaunchTooLarge", 720), ("hipErrorNotSupported", 801),
    ("hipErrorStreamCaptureUnsupported", 900), ("hipErrorStreamCaptureInvalidated", 901),
    ("hipErrorStreamCaptureMerge", 902), ("hipErrorStreamCaptureUnmatched", 903),
    ("hipErrorStreamCaptureUnjoined", 904), ("hipErrorStreamCaptureIsolation", 905),
    ("hipErrorStreamCaptureImplicit", 906), ("hipErrorCapturedEvent", 907),
    ("hipErrorStreamCaptureWrongThread", 908), ("hipErrorGraphExecUpdateFailure", 910),
    ("hipErrorInvalidChannelDescriptor", 911), ("hipErrorInvalidTexture", 912), ("hipErrorInvalidResourceType", 914),
    ("hipErrorInvalidResourceConfiguration", 915), ("hipErrorStreamDetached", 916), ("hipErrorUnknown", 999),
    ("hipErrorRuntimeMemory", 1052), ("hipErrorRuntimeOther", 1053), ("hipErrorInvalidClusterSize", 1054),
    ("hipErrorTbd", 1055),
)


class HipPythonMissing(HipError):
    """hip-python is not importable (the ctypes binding serves instead, unless hip-python was asked for)."""


@dataclass(frozen=True)
class RuntimeFile:
    path: str
    device: str       # the st_dev of the mapping, as /proc/self/maps writes it (major:minor); "" where unknown
    inode: int        # 0 where unknown


def mapped_runtimes(maps_path: str = "/proc/self/maps") -> list[RuntimeFile]:
    """The distinct libamdhip64 files mapped into this process (a symlink and its target are one file; a copy
    is another), in mapping order."""
    try:
        with open(maps_path) as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise HipError(f"cannot read {maps_path} to find the HIP runtime torch loaded ({exc}); the hip-python "
                       "binding needs Linux (elsewhere: SAGE_CO_HIP_BINDING=ctypes)") from None
    seen: dict[tuple[str, int], RuntimeFile] = {}
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) < 6:
            continue
        path = parts[5]
        if not os.path.basename(path).startswith("libamdhip64."):
            continue
        key = (parts[3], int(parts[4]))
        if key not in seen:
            seen[key] = RuntimeFile(path, parts[3], int(parts[4]))
    return list(seen.values())


@dataclass(frozen=True)
class LoadedRuntime:
    """One HIP runtime object in this process's list of loaded objects: its path as the loader names it and, on
    Windows, its module handle (HMODULE)."""
    path: str
    handle: int | None = None


WINDOWS_RUNTIME = re.compile(r"amdhip64(_\d+)?\.dll", re.IGNORECASE)   # amdhip64_7.dll (ROCm 7), amdhip64_6.dll


def is_runtime_name(path: str, platform: str | None = None) -> bool:
    """Whether a loaded object's path names a HIP runtime: libamdhip64.so[.N...] on Linux, amdhip64[_N].dll on
    Windows (the basename by that platform's separators, case-insensitive there)."""
    if (platform or sys.platform) == "win32":
        import ntpath
        return WINDOWS_RUNTIME.fullmatch(ntpath.basename(path)) is not None
    base = os.path.basename(path)
    return base == "libamdhip64.so" or base.startswith("libamdhip64.so.")


class _DlPhdrInfo(ctypes.Structure):   # struct dl_phdr_info (link.h), the fields up to dlpi_phnum
    _fields_ = [("dlpi_addr", ctypes.c_size_t), ("dlpi_name", ctypes.c_char_p), ("dlpi_phdr", ctypes.c_void_p),
                ("dlpi_phnum", ctypes.c_uint16)]


_DL_ITERATE_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_DlPhdrInfo), ctypes.c_size_t, ctypes.c_void_p)


def loaded_objects_posix() -> list[str]:
    """The names of the objects the dynamic loader has loaded into this process (dl_iterate_phdr), in load order;
    the main program's empty name left out."""
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "dl_iterate_phdr"):
        raise HipError("this C library has no dl_iterate_phdr to list the loaded objects; the ctypes binding "
                       "finds torch's HIP runtime through it (Linux) or the module list (Windows)")
    names: list[str] = []

    def visit(info, size, data):
        name = info.contents.dlpi_name
        if name:
            names.append(os.fsdecode(name))
        return 0
    libc.dl_iterate_phdr(_DL_ITERATE_CALLBACK(visit), None)
    return names


def _kernel32():
    k = ctypes.WinDLL("kernel32", use_last_error=True)
    k.GetCurrentProcess.restype = ctypes.c_void_p
    k.GetCurrentProcess.argtypes = ()
    k.K32EnumProcessModules.restype = ctypes.c_int
    k.K32EnumProcessModules.argtypes = (ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_ulong,
                                        ctypes.POINTER(ctypes.c_ulong))
    k.GetModuleFileNameW.restype = ctypes.c_ulong
    k.GetModuleFileNameW.argtypes = (ctypes.c_void_p, ctypes.c_wchar_p, ctypes.c_ulong)
    return k


def loaded_modules_windows(api=None) -> list[tuple[str, int]]:
    """(path, HMODULE) of every module loaded in this process: EnumProcessModules (kernel32's K32 entry, the one
    psapi forwards to) and GetModuleFileNameW. `api`: an object with those functions (tests pass a fake list)."""
    api = api if api is not None else _kernel32()
    process = api.GetCurrentProcess()
    n = 512
    while True:
        handles = (ctypes.c_void_p * n)()
        needed = ctypes.c_ulong(0)
        if not api.K32EnumProcessModules(process, handles, ctypes.sizeof(handles), ctypes.byref(needed)):
            code = ctypes.get_last_error() if hasattr(ctypes, "get_last_error") else "?"
            raise HipError(f"EnumProcessModules failed (Windows error {code}): cannot list the loaded modules to "
                           "find the HIP runtime torch loaded")
        count = needed.value // ctypes.sizeof(ctypes.c_void_p)
        if count <= n:
            break
        n = count + 64   # the list grew past the buffer (modules loaded meanwhile): ask again with room
    buffer = ctypes.create_unicode_buffer(32768)   # the longest extended-length path
    out = []
    for handle in handles[:count]:
        length = api.GetModuleFileNameW(handle, buffer, len(buffer))
        if length:
            out.append((buffer.value, handle))
    return out


def loaded_runtimes(platform: str | None = None, windows_api=None) -> list[LoadedRuntime]:
    """The HIP runtime objects loaded in this process, found in its own list of loaded objects (never by opening a
    file): Windows' module list (amdhip64_7.dll / amdhip64_6.dll, with their module handles), else the dynamic
    loader's list (dl_iterate_phdr; libamdhip64.so*)."""
    platform = platform or sys.platform
    if platform == "win32":
        return [LoadedRuntime(path, handle) for path, handle in loaded_modules_windows(windows_api)
                if is_runtime_name(path, platform)]
    return [LoadedRuntime(name) for name in loaded_objects_posix() if is_runtime_name(name, platform)]


def import_hip():
    """(the hip-python module, its generation "rocm.bindings" or "hip", its version string)."""
    try:
        from rocm.bindings import hip  # hip-python >= 10 (rocm-bindings-hip)
        generation = "rocm.bindings"
    except ImportError:
        try:
            from hip import hip  # hip-python 6.x / 7.x
            generation = "hip"
        except ImportError:
            raise HipPythonMissing("hip-python is not installed: pip install 'sage-co[rocm]' (Linux) and pick "
                                   "the hip-python series that matches your ROCm (README, Supported versions); "
                                   "without it the gpu backend uses the ctypes binding") from None
    return hip, generation, hip_python_version()


def hip_python_version() -> str | None:
    import importlib.metadata
    for dist in ("hip-python", "rocm-bindings-hip"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return None


def _point_loader_at(generation: str, path: str) -> None:
    """Make hip-python's first dlopen open `path` (docs/rdna4.md §HIP runtime: where each generation looks)."""
    encoded = os.fsencode(path)
    if generation == "rocm.bindings":
        from rocm.bindings.util import paths
        original = getattr(paths, "_sage_co_original", paths.get_library_path)

        def get_library_path(shortname, *args, **kwargs):
            return encoded if shortname == "amdhip64" else original(shortname, *args, **kwargs)
        paths._sage_co_original = original
        paths.get_library_path = get_library_path
    else:
        import hip.chip
        hip.chip.DLL = encoded


def two_runtimes(listed: list[str], binding: str) -> HipError:
    """The refusal when more than one HIP runtime is loaded; `listed`: one line per runtime."""
    lines = "\n".join(f"  {line}" for line in listed)
    return HipError(
        f"{len(listed)} different HIP runtimes (libamdhip64 / amdhip64) are loaded in this process:\n{lines}\n"
        f"Kernels launched through {binding} would run on a runtime that does not know torch's streams (launches "
        "fail) or on a queue unordered with torch's kernels (a silent race), so sage-co refuses to launch. "
        + ("Let sage-co make the first hip-python call in the process (it binds hip-python to torch's file), or "
           if binding == "hip-python" else "Find what loaded the other one (a second ROCm install, a library "
           "bundling its own runtime) and ")
        + "make the other file unreachable (LD_LIBRARY_PATH, ROCM_PATH, PATH) so only torch's runtime is found.")


def describe_files(files: list[RuntimeFile], torch_file: RuntimeFile | None = None) -> list[str]:
    return [f"{f.path} (device {f.device}, inode {f.inode})" + ("  <- torch's" if f == torch_file else "")
            for f in files]


def error_names(code: int) -> list[str]:
    """Every hipError_t name of a value (HIP has aliases: 400 is hipErrorInvalidHandle and
    hipErrorInvalidResourceHandle)."""
    return [name for name, value in HIP_ERRORS if value == int(code)]


def error(binding, call: str, err, detail: str = "", fault_note: bool = False) -> HipError:
    """A HipError for a failed call of `binding` (sage_co/backends/hip_bindings.py): code, every alias name and
    hipGetErrorString's text; with fault_note (launches, synchronizations) the reminder that an asynchronous
    kernel's error comes back later (SYNC_NOTE)."""
    code = int(err)
    try:
        text = binding.error_string(code)
    except Exception as exc:  # the runtime lacks the entry point or rejects the value: still report the code
        text = f"(hipGetErrorString unavailable: {exc})"
    names = " / ".join(binding.error_names(code)) or "unknown hipError_t"
    note = f" ({SYNC_NOTE}, so this error may belong to an earlier kernel)" if fault_note else ""
    return HipError(f"{call}{detail} failed: hipError_t {code} ({names}): {text}{note}", call=call, code=code)
