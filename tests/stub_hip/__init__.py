"""Build and read the stand-in libamdhip64.so (stub_amdhip64.c) that the gpu backend tests run against.

    lib = build(tmp_dir)            # compiles with the system C compiler; raises NoCompiler when there is none
    stub = Stub(lib)                # ctypes view of the same loaded file (one instance per process)
    stub.records()                  # every call, oldest first, as dicts

The file is named libamdhip64.so.7 like TheRock's torch wheels ship it (no unversioned name), so a test shows
that the backend finds the runtime by the file the process mapped, not by hip-python's own search.
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("stub_amdhip64.c")
LIB_NAME = "libamdhip64.so.7"
KINDS = {1: "load", 2: "get_function", 3: "launch", 4: "set_device", 5: "unload", 6: "sync"}


class NoCompiler(RuntimeError):
    pass


def compiler() -> str | None:
    for cc in ("cc", "gcc", "clang"):
        path = shutil.which(cc)
        if path:
            return path
    return None


def build(dest: Path, name: str = LIB_NAME) -> Path:
    """Compile the stub into dest/name (a fresh file, so every build is a distinct runtime file)."""
    cc = compiler()
    if cc is None:
        raise NoCompiler("no system C compiler (cc, gcc or clang) on PATH to build the stub libamdhip64")
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / name
    r = subprocess.run([cc, "-shared", "-fPIC", "-O2", f"-Wl,-soname,{LIB_NAME}", "-o", str(out), str(SOURCE)],
                       capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"building the stub runtime failed:\n{r.stderr}")
    return out


class StubRecord(ctypes.Structure):   # mirrors stub_record in stub_amdhip64.c
    _fields_ = [("kind", ctypes.c_int32), ("device", ctypes.c_int32), ("result", ctypes.c_int32),
                ("kernel_params_null", ctypes.c_int32), ("module", ctypes.c_uint64), ("function", ctypes.c_uint64),
                ("stream", ctypes.c_uint64), ("grid", ctypes.c_uint32 * 3), ("block", ctypes.c_uint32 * 3),
                ("shared_mem", ctypes.c_uint32), ("pad", ctypes.c_uint32), ("name", ctypes.c_char * 256),
                ("nbytes", ctypes.c_uint64), ("bytes", ctypes.POINTER(ctypes.c_uint8))]


class Stub:
    """The test controls of a loaded stub. Loading it with ctypes (RTLD_GLOBAL, like a library torch links)
    maps the file into the process exactly as torch's HIP runtime would be."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.lib = ctypes.CDLL(str(self.path), mode=ctypes.RTLD_GLOBAL)
        self.lib.stub_get.restype = ctypes.POINTER(StubRecord)
        self.lib.stub_fail.argtypes = (ctypes.c_char_p, ctypes.c_int, ctypes.c_int)
        self.lib.stub_set_capturing.argtypes = (ctypes.c_uint64, ctypes.c_int)
        self.lib.stub_set_kernel_ms.argtypes = (ctypes.c_char_p, ctypes.c_double)
        self.lib.stub_set_device_props.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int)

    def records(self, kind: str | None = None) -> list[dict]:
        out = []
        for i in range(self.lib.stub_count()):
            r = self.lib.stub_get(i).contents
            if kind is not None and KINDS[r.kind] != kind:
                continue
            # string_at copies the buffer in one memcpy (slicing the POINTER builds a list of ints: seconds for
            # the code objects a load record holds)
            out.append(dict(kind=KINDS[r.kind], device=r.device, result=r.result, module=r.module,
                            function=r.function, stream=r.stream, grid=tuple(r.grid), block=tuple(r.block),
                            shared_mem=r.shared_mem, name=r.name.decode(),
                            kernel_params_null=bool(r.kernel_params_null),
                            data=ctypes.string_at(r.bytes, r.nbytes) if r.nbytes else b""))
        return out

    def count(self) -> int:
        return self.lib.stub_count()

    def clear(self):
        self.lib.stub_clear()

    def fail(self, entry: str, code: int, times: int = 1):
        self.lib.stub_fail(entry.encode(), code, times)

    def set_recording(self, on: bool):
        """Off: calls are still checked (and kernargs copied) but not kept (benchmarks)."""
        self.lib.stub_set_recording(int(on))

    def set_device_count(self, n: int):
        self.lib.stub_set_device_count(n)

    def set_capturing(self, stream: int, on: bool):
        self.lib.stub_set_capturing(stream, int(on))

    def set_kernel_ms(self, symbol: str, ms: float):
        """The stub's duration of one launch of `symbol` on its event clock (default 1 ms per launch)."""
        self.lib.stub_set_kernel_ms(symbol.encode(), ms)

    def set_device_props(self, device: int, name: str, arch: str, cus: int):
        """What hipGetDeviceProperties reports for `device` (default: an R9700, gfx1201, 64 CUs)."""
        self.lib.stub_set_device_props(device, name.encode(), arch.encode(), cus)


class HostPlatform:
    """The gpu backend's view of devices and streams for runs on the stub: CPU tensors stand for device
    tensors (their host addresses go into the kernargs), `device` is the device index they are on, `stream`
    the raw stream handle torch would report, `arch` every device's gfx name."""

    def __init__(self, arch: str = "gfx1201", device: int = 0, stream: int = 0):
        self.arch_name, self.device, self.stream_handle = arch, device, stream

    def init(self) -> None:
        pass   # the test has mapped the stub, as torch's HIP initialisation maps its libamdhip64

    def device_problem(self, tensor) -> str | None:
        return None if tensor.device.type == "cpu" else f"the stub platform takes CPU tensors, not {tensor.device}"

    def device_index(self, tensor) -> int:
        return self.device

    def arch(self, index: int) -> str:
        return self.arch_name

    def index_of(self, device) -> int:
        return self.device

    def tensor_device(self, index: int):
        import torch
        return torch.device("cpu")

    def stream(self, index: int) -> int:
        return self.stream_handle


_ENUM = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_ulong,
                         ctypes.POINTER(ctypes.c_ulong))
_NAME = ctypes.CFUNCTYPE(ctypes.c_ulong, ctypes.c_void_p, ctypes.POINTER(ctypes.c_wchar), ctypes.c_ulong)


class FakeKernel32:
    """kernel32's GetCurrentProcess / K32EnumProcessModules / GetModuleFileNameW over a list of (path, HMODULE),
    as C function pointers: the code under test hands them ctypes buffers exactly as it hands the real ones."""

    PROCESS = 0xFFFF_FFFF_FFFF_FFFF   # GetCurrentProcess's pseudo-handle (-1)

    def __init__(self, modules: list[tuple[str, int]], fail: bool = False):
        self.modules, self.calls = modules, []
        by_handle = dict((h, p) for p, h in modules)

        def enum(process, array, size, needed):
            self.calls.append(("enum", process, size))
            if fail:
                return 0
            room = size // ctypes.sizeof(ctypes.c_void_p)
            for i, (_, handle) in enumerate(modules[:room]):
                array[i] = handle
            needed[0] = len(modules) * ctypes.sizeof(ctypes.c_void_p)
            return 1

        def name(handle, buffer, size):
            path = by_handle.get(handle)
            if path is None or len(path) >= size:
                return 0
            for i, ch in enumerate(path + "\0"):
                buffer[i] = ch
            return len(path)
        self.K32EnumProcessModules, self.GetModuleFileNameW = _ENUM(enum), _NAME(name)

    def GetCurrentProcess(self):   # noqa: N802 (kernel32's name)
        return self.PROCESS
