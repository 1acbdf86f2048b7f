"""The gpu backend driven through its HIP bindings (hip-python and ctypes) against a stub libamdhip64
(tests/stub_hip): what the runtime receives, per shipped kernel, is what the emulator runs; modules load once per
(device, code object); the binding calls the runtime file torch mapped (and refuses a second one); HIP errors are
clear; both bindings hand the runtime the same calls and kernarg bytes, and without hip-python the backend runs on
ctypes.

Each scenario runs in its own process (hip-python opens its runtime once per process). Skipped, with the reason,
without a C compiler; the hip-python cases without hip-python (`pip install hip-python`, part of the dev extra)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import stub_hip
from sage_co.backends import hip_bindings

ROOT = Path(__file__).resolve().parents[2]

if getattr(torch.version, "hip", None) is not None:
    pytest.skip("torch is a ROCm build: its own libamdhip64 is mapped in every process, so a stub cannot stand in "
                "for torch's runtime (tests/ops/test_gpu_backend_on_gfx1201.py covers the real one)",
                allow_module_level=True)
if stub_hip.compiler() is None:
    pytest.skip("no system C compiler (cc, gcc or clang) to build the stub libamdhip64", allow_module_level=True)
if not sys.platform.startswith("linux"):
    pytest.skip("the stub runtime is a Linux shared object", allow_module_level=True)

HIP_PYTHON = hip_bindings.hip_python_importable()
NO_HIP_PYTHON = "hip-python is not installed (pip install hip-python; it is in the dev extra)"
# each binding, the hip-python one skipped where it is not installed
BINDINGS = [pytest.param("hip-python", marks=pytest.mark.skipif(not HIP_PYTHON, reason=NO_HIP_PYTHON)), "ctypes"]


def scenario(name: str, tmp_path: Path, **env) -> dict:
    # the child imports stub_hip (tests/) and this checkout's sage_co through PYTHONPATH, not sys.path edits
    path = os.pathsep.join([str(ROOT / "tests"), str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    child_env = {k: v for k, v in os.environ.items() if k != hip_bindings.ENV_VAR}
    # a cache of tuned schedules of its own (none): a choice in the user's cache would change the symbols launched
    cache = {"SAGE_CO_CACHE_DIR": str(tmp_path / "tuning_cache")}
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "stub_hip" / "scenario.py"), name, str(tmp_path)],
                       capture_output=True, text=True, timeout=600,
                       env={**child_env, "PYTHONPATH": path, **cache, **env})
    assert r.returncode == 0, f"scenario {name} failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def main_run(tmp_path_factory):
    return scenario("main", tmp_path_factory.mktemp("stub_main"))


def test_bound_to_the_mapped_file_without_an_unversioned_name(main_run):
    # TheRock layout: only libamdhip64.so.7, on no search path; hip-python's own search would not find it
    assert main_run["runtime"].endswith("rocm_sdk_core/lib/libamdhip64.so.7")
    assert main_run["binding"] == ("hip-python" if HIP_PYTHON else "ctypes")   # auto: hip-python where installed


def test_every_shipped_kernel_gets_the_emulators_kernarg_bytes(main_run):
    hip_n, emu_n, stub_n = main_run["launch_counts"]
    assert hip_n == emu_n == stub_n > 0
    comps = main_run["comparisons"]
    assert {c["symbol"] for c in comps} == set(main_run["shipped_symbols"])
    for c in comps:
        assert c["symbol"] == c["emu_symbol"] == c["stub_name"]
        assert c["geometry"] == c["emu_geometry"] == c["stub_geometry"], c["symbol"]
        assert c["size"] == c["struct_size"], c
        # the buffer hip-python handed the runtime through `extra` is the one the backend packed ...
        assert c["stub_equals_hip"], c["symbol"]
        # ... and byte for byte the emulator's, each pointer slot holding that backend's address of the tensor
        assert c["stub_equals_emu"], c["symbol"]
        assert c["emu_pointers_differ"], c["symbol"]     # so the pointer slots were really substituted
        assert c["shared_mem"] == c["expected_shared_mem"] and c["stream"] == 0x5A5A and c["kernel_params_null"]


def test_one_module_load_per_device_and_code_object(main_run):
    loads = main_run["loads"]
    assert all(load["file"] is not None for load in loads), "a loaded image is not a shipped code object"
    pairs = [(load["device"], load["file"]) for load in loads]
    # the first two runs (device 0, then device 1) before unload(): each code object once per device
    first = pairs[:2 * len(main_run["code_objects"])]
    assert sorted(first) == sorted((d, f) for d in (0, 1) for f in main_run["code_objects"])
    assert main_run["device1_launch_devices"] == [1]       # launched with its own device current
    assert main_run["current_device_after"] == 0           # and the caller's device put back
    assert set(main_run["functions"]) == set(main_run["shipped_symbols"])


def test_a_whole_call_sets_its_device_once(main_run):
    """prepare's launches and attention run under one device guard: hipSetDevice there and back, not per launch."""
    assert main_run["whole_call_launches"] >= 2, main_run["whole_call_launches"]   # prepare, attention
    assert main_run["whole_call_set_device"] == [1, 0], main_run["whole_call_set_device"]


def test_hip_errors_carry_code_names_and_text(main_run):
    err = main_run["launch_error"]
    assert err["call"] == "hipModuleLaunchKernel" and err["code"] == 400
    assert "hipErrorInvalidHandle / hipErrorInvalidResourceHandle" in err["message"]
    assert "stub: error string for code 400" in err["message"]          # hipGetErrorString's text
    assert "next synchronizing call" in err["message"]
    assert not main_run["failed_launch_recorded"]
    gf = main_run["get_function_error"]
    assert gf["call"] == "hipModuleGetFunction" and gf["code"] == 500 and "hipErrorNotFound" in gf["message"]
    assert main_run["retry_after_error_ok"]


def test_graph_capture_needs_warmup(main_run):
    u = main_run["unloads"]
    assert u["loaded"] == u["unloaded"] > 0 and u["ok"]     # unload() released every module it had loaded
    msg = main_run["capture_without_warmup"]
    assert msg is not None and "capturing" in msg and "warmup" in msg
    assert main_run["warmup_loads"] == len(main_run["code_objects"])   # one load per shipped code object
    assert main_run["capture_after_warmup"] == dict(loads=0, launches=2, ok=True)   # prepare (one launch) + attention


def test_dynamic_lds_is_shared_mem_bytes(main_run):
    assert main_run["dynamic_lds_shared_mem"] == 256


def test_misaligned_tensor_refused_before_the_runtime(main_run):
    assert "not 16-byte aligned" in main_run["misaligned"]
    assert repr(main_run["misaligned_field"]) in main_run["misaligned"]     # names the argument
    assert not main_run["misaligned_reached_runtime"]


@pytest.mark.parametrize("binding", BINDINGS)
def test_same_file_through_a_symlink_is_accepted(tmp_path, binding):
    r = scenario("symlink", tmp_path, SAGE_CO_HIP_BINDING=binding)
    assert r["mapped"] == [r["lib"]] and r["runtime"] == r["lib"]


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_second_runtime_is_refused(tmp_path, binding):
    r = scenario("two_runtimes", tmp_path, SAGE_CO_HIP_BINDING=binding)
    assert r["error"] is not None
    assert "2 different HIP runtimes" in r["error"]
    assert r["torch_lib"] in r["error"] and r["other"] in r["error"]
    assert "refuses to launch" in r["error"]
    assert f"launched through {'hip-python' if binding == 'hip-python' else 'the ctypes binding'}" in r["error"]


@pytest.mark.skipif(not HIP_PYTHON, reason=NO_HIP_PYTHON)
def test_unloadable_runtime_is_a_hip_error(tmp_path):
    r = scenario("deleted", tmp_path, SAGE_CO_HIP_BINDING="hip-python")
    assert r["error_type"] == "HipError"
    assert "hip-python could not load the HIP runtime torch uses" in r["error"] and "dlopen" in r["error"]


def test_ctypes_binding_needs_no_file_only_the_loaded_object(tmp_path):
    """The runtime torch loaded, its file deleted since: the ctypes binding takes the loaded object by the loader's
    name for it (RTLD_NOLOAD) and never opens the file, so it still binds, and calls reach the stub."""
    r = scenario("deleted", tmp_path, SAGE_CO_HIP_BINDING="ctypes")
    assert r["error"] is None and r["binding"] == "ctypes"
    assert r["runtime"] == r["lib"] and not Path(r["lib"]).exists()
    assert r["device_count"] == 1


@pytest.fixture(scope="module")
def bindings_run(tmp_path_factory):
    """The bindings scenario: each binding (the hip-python one where installed) in one process."""
    choices = "hip-python,ctypes" if HIP_PYTHON else "ctypes"
    return scenario("bindings", tmp_path_factory.mktemp("stub_bindings"), SAGE_CO_TEST_BINDINGS=choices)


def _check_binding_run(r: dict, name: str, runtime: str = "rocm_sdk_core/lib/libamdhip64.so.7"):
    assert r["binding"] == name and r["runtime"].endswith(runtime)
    assert r["describe"].startswith(f"GPU binding: {name}") and r["runtime"] in r["describe"]
    assert r["launches"] > 0 and r["bytes_as_recorded"]     # the runtime got the bytes the launch recorded
    launched = {entry[9] for entry in r["log"] if entry[0] == "launch"}
    from sage_co import registry
    assert launched == {k.symbol for k in registry.kernels()}    # every shipped kernel went through the binding
    assert all(entry[2] == 0 for entry in r["log"])              # and every call succeeded
    e = r["errors"]
    assert e["hipModuleLaunchKernel"]["code"] == 400 and e["hipModuleGetFunction"]["code"] == 500
    assert "hipErrorInvalidHandle / hipErrorInvalidResourceHandle" in e["hipModuleLaunchKernel"]["message"]
    assert "stub: error string for code 400" in e["hipModuleLaunchKernel"]["message"]   # hipGetErrorString
    assert "capturing" in e["capture"] and "warmup" in e["capture"]
    ev = r["events"]
    assert ev["statuses"] == [0] * 7 and ev["launches"] == 2 and ev["ms"] == 2.0    # 1 stub-ms per launch
    assert ev["destroyed_again"] == 400
    assert r["device"] == [0, 2]
    # the router tried sage-co (one launch, failed in the runtime), then torch's SDPA answered; counted, not routed
    rf = r["routed_failure"]
    assert rf["tried"] == [719] and rf["same_as_torch"]
    stats = {key: rf["stats"][key] for key in ("routed", "fallback")}          # stats() also states the differences
    assert stats == {"routed": 0, "fallback": {"gpu: hipModuleLaunchKernel failed (hipError_t 719)": 1}}


@pytest.mark.skipif(not HIP_PYTHON, reason=NO_HIP_PYTHON)
def test_both_bindings_send_the_runtime_identical_calls_and_bytes(bindings_run):
    """hip-python and ctypes: the same HIP calls in the same order with the same arguments, the same kernarg bytes
    (pointer fields aside, which hold each run's own tensor addresses and are checked against the launch records),
    the same results, the same error messages and event timings."""
    hp, ct = bindings_run["hip-python"], bindings_run["ctypes"]
    _check_binding_run(hp, "hip-python")
    _check_binding_run(ct, "ctypes")
    assert len(hp["log"]) == len(ct["log"]) > 0
    for i, (a, b) in enumerate(zip(hp["log"], ct["log"])):
        assert a == b, (i, a, b)
    assert hp["error_log"] == ct["error_log"]
    assert hp["errors"] == ct["errors"] and hp["events"] == ct["events"]


def test_without_hip_python_the_backend_launches_on_ctypes(tmp_path, bindings_run):
    """hip-python uninstalled (its imports blocked), SAGE_CO_HIP_BINDING unset: the gpu backend picks ctypes and
    every shipped kernel launches, with the calls and bytes of the ctypes (and hip-python) runs above."""
    r = scenario("bindings", tmp_path, SAGE_CO_TEST_BINDINGS="auto", SAGE_CO_TEST_BLOCK_HIP_PYTHON="1")["auto"]
    _check_binding_run(r, "ctypes")
    assert r["log"] == bindings_run["ctypes"]["log"] and r["error_log"] == bindings_run["ctypes"]["error_log"]


def test_launch_overhead_benchmark_runs(tmp_path):
    """The benchmark itself (not a timing assertion: speed goals live in benchmarks/)."""
    path = os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])   # this checkout's sage_co
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_launch_overhead.py"), "--launches", "20",
                        "--rounds", "1"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": path})
    assert r.returncode == 0, r.stderr
    from sage_co import abi
    n_ops = len(abi.STRUCTS)    # one kernel of each op + the whole op
    assert sum(" us CPU" in line for line in r.stdout.splitlines()) == n_ops + 1, r.stdout
    assert "before (the same measurement at earlier commits):" in r.stdout


def test_bound_launch_fast_path_sends_the_full_paths_bytes_and_refuses_the_same(tmp_path):
    """BoundLaunch packs its scalars once and writes only the pointer fields per call (sage_co/backends/hip.py
    BoundKernel): the runtime gets exactly the bytes of the full launch() path; a strided tensor, a misaligned
    fresh one, a missing field and a tensor for a scalar field go the full path and get its error, before any
    launch; a backend installed after binding gets the launch."""
    r = scenario("bound", tmp_path)
    assert r["same_bytes"] == [True, True, True]
    assert r["recorded_bytes"] == [True, True, True]
    assert r["geometry"] == [[[2, 1, 1], [32, 1, 1]]] * 3
    e = r["errors"]
    assert e["strided"].startswith("ValueError: ") and "'q' must be contiguous" in e["strided"]
    assert "'q' starts at" in e["misaligned_fresh"] and "16-byte aligned" in e["misaligned_fresh"]
    assert e["missing"].startswith("ValueError: sage_prepare kernargs: missing ['q']")
    assert e["scalar_as_tensor"].startswith("TypeError: ") and "'H_kv' is a tensor" in e["scalar_as_tensor"]
    assert r["launches_after_errors"] == 3
    assert r["swapped_backend_loads"] == [1, 1]
    # workspace-bound fields (one allocation for an op's scratch buffers): the full path's bytes, the addresses at
    # the bound offsets; without a large enough workspace the full path's error names the fields, nothing launches
    assert r["workspace_same_bytes"] and r["workspace_addresses"] == [0, 512]
    for name in ("missing", "short"):
        assert "bound to a workspace" in r["workspace_errors"][name] and "'v_inv'" in r["workspace_errors"][name]
        assert "at least 768 bytes" in r["workspace_errors"][name]
    assert r["workspace_launches_after_errors"] == 2


def test_varlen_is_a_fixed_number_of_launches_without_a_host_sync(tmp_path):
    """Issue 26: a packed batch of 64 sequences is the same launches as one sequence (prepare, one launch since
    issue 28, then attention), issued while the stream captures a graph, with no synchronizing call and no tensor value read on
    the host; the attention grid is (ceil(max_seqlen_q / 64), H_q, batch)."""
    res = scenario("varlen", tmp_path)
    one, many = res["1"], res["64"]
    assert one["error"] is None and many["error"] is None, (one["error"], many["error"])
    assert one["launches"] == many["launches"] <= 5 and one["ok"] and many["ok"]
    assert one["syncs"] == many["syncs"] == 0
    assert many["grids"][-1][1:] == [4, 64] and one["grids"][-1][1:] == [4, 1]


def test_windows_module_list_path_launches_like_linux(tmp_path, bindings_run):
    """The ctypes binding's Windows route on the stub: torch's runtime found as amdhip64_7.dll in a module list
    (EnumProcessModules / GetModuleFileNameW faked as C function pointers) and reached through its module handle
    (here the stub's real handle, so the calls land): the same calls and bytes as the Linux ctypes run."""
    r = scenario("windows", tmp_path)
    _check_binding_run(r["win32"], "ctypes", runtime=r["dll"])
    assert r["win32"]["log"] == bindings_run["ctypes"]["log"]
    assert r["win32"]["error_log"] == bindings_run["ctypes"]["error_log"]
