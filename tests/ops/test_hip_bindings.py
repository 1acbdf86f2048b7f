"""The HIP bindings' pieces that need no runtime: finding the runtime torch loaded in a Windows module list (a fake
one, served through real ctypes function pointers, as kernel32 would), runtime names per platform, the hipError_t
table against hip-python's, the SAGE_CO_HIP_BINDING choice and the line `sage-co info` prints. The bindings on a
runtime: tests/ops/test_gpu_backend_stub_runtime.py."""
from __future__ import annotations

import ctypes

import pytest

from sage_co.backends import hip_bindings, hip_runtime
from sage_co.backends.hip_runtime import HipError
from stub_hip import FakeKernel32

def system_modules(n: int) -> list[tuple[str, int]]:
    return [(rf"C:\Windows\System32\mod{i}.dll", 0x7FF0_0000_0000 + 0x10000 * i) for i in range(n)]


TORCH_LIB = r"C:\Users\me\venv\Lib\site-packages\_rocm_sdk_core\bin"


def test_windows_module_list_finds_torchs_runtime_with_its_handle():
    # 600 modules: more than the first buffer holds (512), so the list is asked for again with room
    modules = system_modules(300) + [(TORCH_LIB + r"\amdhip64_7.dll", 0x7FFA_1230_0000)] + system_modules(300)[::-1]
    fake = FakeKernel32(modules)
    found = hip_runtime.loaded_runtimes("win32", fake)
    assert found == [hip_runtime.LoadedRuntime(TORCH_LIB + r"\amdhip64_7.dll", 0x7FFA_1230_0000)]
    assert [c[0] for c in fake.calls] == ["enum", "enum"]          # the first buffer was too small
    assert fake.calls[0][1] == FakeKernel32.PROCESS and fake.calls[1][2] >= 601 * ctypes.sizeof(ctypes.c_void_p)


@pytest.mark.parametrize("name, runtime", [
    ("amdhip64_7.dll", True), ("amdhip64_6.dll", True), ("AMDHIP64_7.DLL", True), ("amdhip64.dll", True),
    ("amdhip64_7.dll.bak", False), ("hipblas.dll", False), ("libamdhip64.so.7", False), ("amdhip64_x.dll", False)])
def test_windows_runtime_names(name, runtime):
    assert hip_runtime.is_runtime_name(TORCH_LIB + "\\" + name, "win32") is runtime


@pytest.mark.parametrize("path, runtime", [
    ("/opt/rocm/lib/libamdhip64.so", True), ("/venv/_rocm_sdk_core/lib/libamdhip64.so.7", True),
    ("/opt/rocm/lib/libamdhip64.so.6.4.60400", True), ("/opt/rocm/lib/libamdhip64_static.a", False),
    ("/opt/rocm/lib/libhiprtc.so.7", False), ("C:\\x\\amdhip64_7.dll", False)])
def test_linux_runtime_names(path, runtime):
    assert hip_runtime.is_runtime_name(path, "linux") is runtime


def test_two_windows_runtimes_are_refused_before_any_is_called():
    modules = system_modules(3) + [(TORCH_LIB + r"\amdhip64_7.dll", 0x1000),
                                   (r"C:\Program Files\AMD\ROCm\6.4\bin\amdhip64_6.dll", 0x2000)]
    with pytest.raises(HipError) as e:
        hip_bindings.CtypesBinding(lambda: None, platform="win32", windows_api=FakeKernel32(modules))
    msg = str(e.value)
    assert "2 different HIP runtimes" in msg and "amdhip64_7.dll" in msg and "amdhip64_6.dll" in msg
    assert "refuses to launch" in msg


def test_no_windows_runtime_is_a_hip_error_after_torch_initialises():
    initialised = []
    with pytest.raises(HipError, match=r"no HIP runtime \(libamdhip64.so / amdhip64_N.dll\) is loaded"):
        hip_bindings.CtypesBinding(lambda: initialised.append(True), platform="win32",
                                   windows_api=FakeKernel32(system_modules(5)))
    assert initialised == [True]     # torch's HIP initialisation ran first (it is what loads the runtime)


def test_a_failing_module_list_is_a_hip_error():
    with pytest.raises(HipError, match="EnumProcessModules failed"):
        hip_runtime.loaded_runtimes("win32", FakeKernel32(system_modules(2), fail=True))


def test_linux_loaded_objects_come_from_the_loader():
    names = hip_runtime.loaded_objects_posix()
    # this process's C library and Python's own ctypes extension are in the loader's list, by path
    assert any(n.rsplit("/", 1)[-1].startswith("libc.so") for n in names), names[:5]
    assert any("_ctypes" in n for n in names) or ctypes.__file__


def test_error_table_matches_hip_python():
    hip = pytest.importorskip("rocm.bindings.hip", reason="hip-python >= 10 not installed")
    assert {(n, int(v)) for n, v in hip.hipError_t.__members__.items()} == set(hip_runtime.HIP_ERRORS)
    assert hip_runtime.error_names(400) == ["hipErrorInvalidHandle", "hipErrorInvalidResourceHandle"]


def test_runtime_version_decodes_hip_version():
    assert hip_bindings.runtime_version(70253211) == "7.2.53211"
    assert hip_bindings.runtime_version(60443483) == "6.4.43483"


def test_binding_choice_from_the_environment():
    assert hip_bindings.requested({}) == "auto"
    assert hip_bindings.requested({hip_bindings.ENV_VAR: " CTypes "}) == "ctypes"
    with pytest.raises(ValueError, match=r"SAGE_CO_HIP_BINDING: expected one of .* got 'cuda'"):
        hip_bindings.requested({hip_bindings.ENV_VAR: "cuda"})
    with pytest.raises(ValueError, match="binding: expected one of"):
        hip_bindings.load(lambda: None, "pyhip")


def test_describe_says_which_binding(monkeypatch):
    monkeypatch.setattr(hip_bindings, "hip_python_importable", lambda: False)
    assert hip_bindings.describe(environ={}) == "GPU binding: ctypes (hip-python not installed)"
    assert "asked for" in hip_bindings.describe(environ={hip_bindings.ENV_VAR: "hip-python"})
    monkeypatch.setattr(hip_bindings, "hip_python_importable", lambda: True)
    monkeypatch.setattr(hip_runtime, "hip_python_version", lambda: "7.2.0")
    assert hip_bindings.describe(environ={}) == "GPU binding: hip-python 7.2.0"
    assert hip_bindings.describe(environ={hip_bindings.ENV_VAR: "ctypes"}) == "GPU binding: ctypes (SAGE_CO_HIP_BINDING=ctypes)"


def test_a_bad_binding_choice_is_a_hip_error_naming_it(monkeypatch):
    """The gpu backend turns every failure to reach the runtime into HipError (what hosts fall back on), a
    misspelled SAGE_CO_HIP_BINDING included."""
    from sage_co.backends.hip import HipBackend
    import stub_hip
    monkeypatch.setenv(hip_bindings.ENV_VAR, "pyhip")
    with pytest.raises(HipError, match=r"SAGE_CO_HIP_BINDING: expected one of \('auto', 'hip-python', 'ctypes'\)"):
        HipBackend(platform=stub_hip.HostPlatform())
    monkeypatch.setenv(hip_bindings.ENV_VAR, "ctypes")   # no runtime loaded in this process
    with pytest.raises(HipError, match="no HIP runtime"):
        HipBackend(platform=stub_hip.HostPlatform())


def test_device_prop_offsets_match_hip_python():
    """The ctypes binding reads hipDeviceProp_tR0600's name, multiProcessorCount and gcnArchName at fixed offsets
    (hip_bindings.DEVICE_PROP_OFFSETS, also the stub runtime's): hip-python's own struct, compiled from HIP's header,
    reads the same bytes as the same fields and has the same size."""
    hip = pytest.importorskip("rocm.bindings.hip", reason="hip-python >= 10 not installed")
    assert ctypes.sizeof(hip_bindings.DevicePropR0600) == hip_bindings.DEVICE_PROP_SIZE
    assert hip.hipDeviceProp_t().c_sizeof() == hip_bindings.DEVICE_PROP_SIZE
    for field, offset in hip_bindings.DEVICE_PROP_OFFSETS.items():
        assert getattr(hip_bindings.DevicePropR0600, field).offset == offset, field
    ours = hip_bindings.DevicePropR0600(name=b"AMD Radeon AI PRO R9700", multiProcessorCount=64,
                                        gcnArchName=b"gfx1201:sramecc-")
    theirs = hip.hipDeviceProp_t.fromObj(ctypes.addressof(ours))
    assert (theirs.name, theirs.multiProcessorCount, theirs.gcnArchName) == \
        ("AMD Radeon AI PRO R9700", 64, "gfx1201:sramecc-")
