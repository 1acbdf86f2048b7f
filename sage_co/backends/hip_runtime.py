"""One HIP runtime per process: hip-python bound to the exact libamdhip64 file torch mapped, and HIP errors
turned into one clear exception type.

hip-python finds libamdhip64 by its own search (10.x: its package, TheRock's rocm_sdk, $ROCM_PATH or /opt/rocm,
then the bare name; 6.x/7.x: the bare name `libamdhip64.so`), which can be a different file than the one torch
loaded (docs/rdna4.md §HIP runtime). Two runtimes in one process mean torch's streams are unknown to the
second one (launches fail) or, on the default stream, kernels run on a second queue unordered with torch's (a
silent race). So after torch's HIP initialisation, bind() reads the libraries the process has mapped, points
hip-python's loader at torch's file before its first call, forces the load, and checks that exactly one
libamdhip64 file (device + inode) is mapped; anything else is refused with HipError saying what to do.
"""
from __future__ import annotations

import os
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


SYNC_NOTE = ("HIP reports a fault inside a kernel (memory access violation, illegal instruction) at the next "
             "synchronizing call (torch.cuda.synchronize(), a copy to the host, an event wait), not at the "
             "launch that caused it")


class HipError(RuntimeError):
    """A HIP call failed, or the HIP runtime cannot be used (hip-python missing, libamdhip64 not loadable, or
    not the file torch uses). `call` names the HIP function, `code` is its hipError_t value (None when the
    failure is not a HIP return code)."""

    def __init__(self, message: str, *, call: str | None = None, code: int | None = None):
        super().__init__(message)
        self.call, self.code = call, code


@dataclass(frozen=True)
class RuntimeFile:
    path: str
    device: str       # the st_dev of the mapping, as /proc/self/maps writes it (major:minor)
    inode: int


def mapped_runtimes(maps_path: str = "/proc/self/maps") -> list[RuntimeFile]:
    """The distinct libamdhip64 files mapped into this process (a symlink and its target are one file; a copy
    is another), in mapping order."""
    try:
        with open(maps_path) as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise HipError(f"cannot read {maps_path} to find the HIP runtime torch loaded ({exc}); the gpu backend "
                       "needs Linux") from None
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
            raise HipError("backend='gpu' needs hip-python: pip install 'sage-co[rocm]' and pick the hip-python "
                           "series that matches your ROCm (README, Supported versions)") from None
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


def _two_runtimes(files: list[RuntimeFile], torch_file: RuntimeFile | None) -> HipError:
    listed = "\n".join(f"  {f.path} (device {f.device}, inode {f.inode})"
                       + ("  <- torch's" if f == torch_file else "") for f in files)
    return HipError(
        f"{len(files)} different HIP runtimes (libamdhip64) are loaded in this process:\n{listed}\n"
        "Kernels launched through hip-python would run on a runtime that does not know torch's streams (launches "
        "fail) or on a queue unordered with torch's kernels (a silent race), so sage-co refuses to launch. "
        "Let sage-co make the first hip-python call in the process (it binds hip-python to torch's file), or "
        "make the other file unreachable (LD_LIBRARY_PATH, ROCM_PATH) so only torch's runtime is found.")


def bind(hip, generation: str, init_torch_runtime) -> RuntimeFile:
    """Bind hip-python to the libamdhip64 torch mapped; returns that file. `init_torch_runtime()` makes torch
    load its HIP runtime (torch.cuda.init() on a ROCm build)."""
    init_torch_runtime()
    before = mapped_runtimes()
    if not before:
        raise HipError("no HIP runtime (libamdhip64) is mapped in this process after torch's HIP initialisation: "
                       "the gpu backend needs a ROCm build of torch that sees a GPU")
    if len(before) > 1:
        raise _two_runtimes(before, None)
    torch_file = before[0]
    _point_loader_at(generation, torch_file.path)
    try:
        err, _count = hip.hipGetDeviceCount()
    except RuntimeError as exc:   # hip-python's dlopen / dlsym failure
        raise HipError(f"hip-python could not load the HIP runtime torch uses ({torch_file.path}): {exc}") from None
    after = mapped_runtimes()
    if len(after) > 1:
        raise _two_runtimes(after, torch_file)
    if err:
        raise error(hip, "hipGetDeviceCount", err)
    return torch_file


def error_names(hip, code: int) -> list[str]:
    """Every hipError_t name of a value (HIP has aliases: 400 is hipErrorInvalidHandle and
    hipErrorInvalidResourceHandle)."""
    return [name for name, member in hip.hipError_t.__members__.items() if int(member) == int(code)]


def error(hip, call: str, err, detail: str = "", fault_note: bool = False) -> HipError:
    """A HipError for a failed call: code, every alias name and hipGetErrorString's text; with fault_note
    (launches, synchronizations) the reminder that a kernel's fault surfaces at the next synchronization."""
    code = int(err)
    try:
        text = hip.hipGetErrorString(err)[1]
        text = text.decode() if text is not None else "(no text)"
    except Exception as exc:  # the runtime lacks the entry point or rejects the value: still report the code
        text = f"(hipGetErrorString unavailable: {exc})"
    names = " / ".join(error_names(hip, code)) or "unknown hipError_t"
    note = f" ({SYNC_NOTE}, so this error may belong to an earlier kernel)" if fault_note else ""
    return HipError(f"{call}{detail} failed: hipError_t {code} ({names}): {text}{note}", call=call, code=code)
