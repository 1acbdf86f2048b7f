"""Runs of the gpu backend on the stub runtime, each in a fresh process (hip-python opens libamdhip64 once per
process, so every runtime layout needs its own): `python tests/stub_hip/scenario.py NAME TMPDIR` prints one
JSON line of observations that tests/ops/test_gpu_backend_stub_runtime.py asserts on.

  main           the stub mapped as torch's runtime (named libamdhip64.so.7, on no search path): every shipped
                 kernel through the real ops, kernarg bytes vs the emulator's, module loads per (device, code
                 object), streams and devices, error mapping, graph-capture warm-up
  symlink        hip-python (ctypes binding: a library) opened torch's runtime through a symlink: the same file,
                 accepted
  two_runtimes   hip-python (ctypes binding: a library) already opened a copy of torch's runtime: refused
  deleted        torch's runtime file was deleted after loading: hip-python cannot dlopen it (HipError); the ctypes
                 binding takes the loaded object by its name in the loader's list and needs no file
  varlen         sage_attention_varlen of 1 and of 64 sequences while the stream captures a graph: launches, syncs,
                 host reads of tensor values (forbidden)
  bound          a BoundLaunch's fast path vs the full launch() path: same bytes, the full path's errors
  windows        the ctypes binding finding the stub as amdhip64_7.dll in a (fake) Windows module list
  tune           a call without a schedule, `sage-co tune --backend gpu --device 0` (SAGE_CO_CACHE_DIR names the
                 cache) with the stub's event clock making $SAGE_CO_TEST_FAST_SCHEDULE's attention symbols the fastest,
                 the call again: the schedules launched, the output, the file, the TuningCacheWarnings
  tuned          a fresh process after `tune` (or with a cache file the test wrote): sage_attention without a
                 schedule on device 0 and on device 1 (another card), the schedules launched, the
                 TuningCacheWarnings, `sage-co info`'s tuned-schedule lines
  bindings       every shipped kernel through the ops on each binding in one process (SAGE_CO_TEST_BINDINGS, comma-
                 separated, default "hip-python,ctypes"): the runtime's call log (kernarg bytes included), HIP errors,
                 events, per binding

The gpu backend's binding is $SAGE_CO_HIP_BINDING's (hip_bindings.load; "auto" when unset). With
SAGE_CO_TEST_BLOCK_HIP_PYTHON=1 every import of hip-python fails, as where it is not installed.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.abc
import json
import os
import shutil
import struct
import sys
from pathlib import Path

import stub_hip  # tests/ and the repository come on PYTHONPATH (tests/ops/test_gpu_backend_stub_runtime.py sets it)


class BlockHipPython(importlib.abc.MetaPathFinder):
    """hip-python as if uninstalled: its packages (rocm.*, hip.*) fail to import."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in ("rocm", "hip"):
            raise ModuleNotFoundError(f"No module named {fullname!r} (hip-python blocked by the test)", name=fullname)
        return None


if os.environ.get("SAGE_CO_TEST_BLOCK_HIP_PYTHON") == "1":
    sys.meta_path.insert(0, BlockHipPython())



def fwd(prepared, **options):
    """sage_attention_fwd's planned launch (sage_co.plan.plan_call, every check) without its padding read: the stub
    runtime runs no kernel, so a structure prepared on it holds torch.empty's bytes."""
    from sage_co.callspec import FWD_KEYWORDS, SAGE_ATTENTION_FWD
    from sage_co.ops import attention
    from sage_co.plan import plan_call
    o = SAGE_ATTENTION_FWD.bind(options, "sage_attention_fwd", allowed=FWD_KEYWORDS)
    rec = plan_call(SAGE_ATTENTION_FWD, (prepared,), o).attention
    out, lse = attention.execute(rec, prepared, o["block_mask"], o["attn_mask"])
    return (out, lse) if o["return_lse"] else out

def point_hip_python_at(path: Path):
    """What a stray first hip-python call does: open a runtime of its own choosing (here: `path`). Where the gpu
    backend runs on ctypes, a library loading a runtime of its own (ctypes.CDLL) does the same."""
    from sage_co.backends import hip_bindings
    if hip_bindings.requested() == "ctypes" or not hip_bindings.hip_python_importable():
        stub_hip.Stub(path)
        return
    try:
        from rocm.bindings.util import paths
        paths.get_library_path = lambda shortname, *a, **k: os.fsencode(path)
        from rocm.bindings import hip
    except ImportError:
        import hip.chip
        hip.chip.DLL = os.fsencode(path)
        from hip import hip
    hip.hipGetDeviceCount()


def hip_backend(binding=None, **platform):
    from sage_co.backends.hip import HipBackend
    return HipBackend(platform=stub_hip.HostPlatform(**platform), binding=binding)


DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}   # the prepare in_dtype keys


def inputs(S=33, H=2, seed=0, D=128, dtype="bf16"):
    import torch
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, S, H, D, generator=g).to(getattr(torch, DTYPES[dtype])) for _ in range(3))


def norm_rope(S, rope_dim, D=128, dtype="bf16"):
    import torch
    g = torch.Generator().manual_seed(1)
    dt = getattr(torch, DTYPES[dtype])
    w = [(1 + 0.1 * torch.randn(D, generator=g)).to(dt) for _ in range(2)]
    ang = torch.arange(S)[:, None] * torch.linspace(0.01, 1, rope_dim)[None]
    return dict(q_norm_weight=w[0], k_norm_weight=w[1], cos=ang.cos().to(dt), sin=ang.sin().to(dt), rope_dim=rope_dim)


def prepare_families():
    """{(head_dim, in_dtype): sorted rope_dims} of the shipped prepare kernels (manifest key columns; a
    manifest without them ships head_dim 128, bf16 only)."""
    from sage_co import registry
    fams: dict = {}
    for k in registry.kernels():
        if k.op == "sage_prepare":
            key = (k.key("head_dim") or 128, k.key("in_dtype") or "bf16")
            fams.setdefault(key, set()).add(k.key("rope_dim") or 0)
    return {key: sorted(v) for key, v in sorted(fams.items())}


def run_ops(backend: str):
    """Every shipped kernel through the ops: for each prepare family (head dim, dtype) prepare without and with
    smooth_k, with norm + RoPE at each rope_dim, with smooth_v and with pv_dtype="fp16", then attention in each
    kernel with and without LSE on those prepared inputs (the fp16 one reaches the _pv16 symbols) and in each other
    exp2 schedule built there, then each microbenchmark (sage_co.microbench). Returns the launch records."""
    from sage_co import abi, family, launch, registry
    from sage_co.ops.attention import OP
    from sage_co import validate
    from sage_co.ops.predict import run_predict
    from sage_co.api import sage_prepare
    shipped_kernels = sorted({k.kernel for k in registry.kernels() if k.op == OP})
    # (kernel, head_dim, pv_dtype) of the shipped attention symbols: pv_dtype fp16 stops at D_pad 128
    # (abi.PV16_HEAD_DIMS), the prepare and attention kernels do not
    served = {(k.kernel, k.key("head_dim"), k.key("pv_dtype")) for k in registry.kernels() if k.op == OP}
    # the other exp2 schedules' symbols (sage_co.family.ATTENTION_SCHEDULES after the default), where built
    scheduled = {(k.kernel, k.key("head_dim"), k.key("pv_dtype"), k.key("schedule")) for k in registry.kernels()
                 if k.op == OP and k.key("schedule") != family.DEFAULT_SCHEDULE}
    with launch.recording() as records:
        for (D, dtype), rope_dims in prepare_families().items():
            q, k, v = inputs(D=D, dtype=dtype)
            prepared = sage_prepare(q, k, v, smooth_k=False, backend=backend)
            sage_prepare(q, k, v, smooth_k=True, backend=backend)
            for rd in rope_dims:   # both norm_rope_rounding conventions (the _once symbols and the per_op ones)
                nr = norm_rope(q.shape[1], rd, D, dtype) if rd else {"q_norm_weight": q[0, 0, 0].contiguous()}
                for rounding in ("once", "per_op"):
                    if rd or rounding == "per_op":   # rope 0 once: the plain runs above
                        sage_prepare(q, k, v, smooth_k=True, backend=backend, norm_rope_rounding=rounding, **nr)
            smooth_v = sage_prepare(q, k, v, smooth_v=True, backend=backend)       # issue 19: V statistics
            pv16 = sage_prepare(q, k, v, pv_dtype="fp16", backend=backend)        # and the fp16 V^T path
            for kernel in shipped_kernels:
                if (kernel, D, "fp8") in served:
                    fwd(prepared, backend=backend, kernel=kernel)
                    fwd(prepared, backend=backend, kernel=kernel, return_lse=True)
                    fwd(smooth_v, backend=backend, kernel=kernel)
                if (kernel, D, "fp16") in served:
                    fwd(pv16, backend=backend, kernel=kernel, return_lse=True)
                for _, _, pv, schedule in sorted(x for x in scheduled if x[:2] == (kernel, D)):
                    fwd(prepared if pv == "fp8" else pv16, backend=backend, kernel=kernel, schedule=schedule,
                        return_lse=True)
            # the block-mask predictor (pool + select): 16-bit q/k only, D up to abi.PREDICT_CHANNELS
            if dtype in abi.PREDICT_IN_DTYPES and D <= abi.PREDICT_CHANNELS:
                sh, qn, kn, _ = validate.check_qkv(q, k, k, "NHD")
                run_predict(qn, kn, sh, 0.125, 0.9, None, 0.6, backend=backend)
        # attention symbols of a head dim no prepare kernel serves (none since issue 30 built prepare at D_pad 256):
        # on reference prepares
        from sage_co import reference
        prep_dims = {D for D, _ in prepare_families()}
        for kernel, D, out_dtype in sorted({(k.kernel, k.key("head_dim"), k.key("out_dtype"))
                                             for k in registry.kernels() if k.op == OP
                                             and k.key("head_dim") not in prep_dims}):
            fwd(reference.sage_prepare(*inputs(D=D, dtype=out_dtype)), backend=backend,
                              kernel=kernel, return_lse=True)
        from sage_co import microbench            # the microbenchmarks of `selftest --perf`: one workgroup each
        for bench in microbench.MICROBENCH_BENCHES:
            args = microbench.inputs(bench, 1, src_bytes=microbench.stream_stride(1) if bench == "l2_stream" else None)
            microbench.launch_bench(bench, args, 1, backend=backend)
    return records


@contextlib.contextmanager
def emu_packs_only():
    """The emu backend allocates, packs and records every launch exactly as it always does, but runs no kernel: the
    main scenario compares kernarg bytes, which no kernel result feeds (the stub runs no kernel either, so both
    runs see the same unwritten outputs). Executing ~100 kernels on the emulator here cost minutes."""
    from sage_co.backends import emu as emu_backend

    class NoKernel:
        def launch(self, symbol, **kw):
            return {}
    real = emu_backend.EmuBackend.module
    emu_backend.EmuBackend.module = lambda self, shipped: NoKernel()
    try:
        yield
    finally:
        emu_backend.EmuBackend.module = real


def expected_dynamic_lds(decl, kernarg_bytes: bytes) -> int:
    """The dynamic LDS (hipModuleLaunchKernel's sharedMemBytes) a launch asks for: the predictor's select kernel
    holds round_up(n_kv, 4) * 8 bytes (sage_co.ops.predict.select_lds_bytes); every other kernel none."""
    from sage_co import abi
    from sage_co.ops.predict import select_lds_bytes
    if decl.name != abi.PREDICT_SELECT_OP:
        return 0
    n_kv = struct.unpack_from("<I", kernarg_bytes, decl.by_name["n_kv"].offset)[0]
    return select_lds_bytes(n_kv)


def main_scenario(tmp: Path) -> dict:
    lib = stub_hip.build(tmp / "rocm_sdk_core" / "lib")
    stub = stub_hip.Stub(lib)            # mapped like torch's runtime
    stub.set_device_count(2)
    import torch
    from sage_co import launch, registry
    from sage_co.backends.hip_runtime import HipError
    out: dict = {}
    be = hip_backend(stream=0x5A5A)
    out["runtime"] = be.runtime.path
    out["hip_python"] = be.hip_python_version
    out["binding"] = be.binding.name
    launch.use_backend("gpu", be)

    # -- kernarg bytes: the stub's copy of `extra` vs the emulator's packing of the same launches
    hip_records = run_ops("gpu")
    stub_launches = stub.records("launch")
    with emu_packs_only():
        emu_records = run_ops("emu")
    comparisons = []
    for h, e, s in zip(hip_records, emu_records, stub_launches):
        from sage_co.abi import struct_for
        decl = struct_for(registry.find_symbol(h.symbol).op)
        expected = bytearray(e.kernarg_bytes)       # the emulator's bytes, its addresses replaced by hip's
        for f in decl.fields:
            if f.kind == "ptr":
                struct.pack_into("<Q", expected, f.offset, h.addresses[f.name])
        comparisons.append(dict(
            symbol=h.symbol, emu_symbol=e.symbol, stub_name=s["name"], geometry=[h.grid, h.block],
            emu_geometry=[e.grid, e.block], stub_geometry=[s["grid"], s["block"]], shared_mem=s["shared_mem"],
            stream=s["stream"], kernel_params_null=s["kernel_params_null"],
            expected_shared_mem=expected_dynamic_lds(decl, e.kernarg_bytes),
            stub_equals_hip=s["data"] == h.kernarg_bytes, stub_equals_emu=s["data"] == bytes(expected),
            size=len(s["data"]), struct_size=decl.size,
            pointer_fields=[f.name for f in decl.fields if f.kind == "ptr"],
            emu_pointers_differ=all(e.addresses[f.name] != h.addresses[f.name] for f in decl.fields
                                    if f.kind == "ptr")))
    out["launch_counts"] = [len(hip_records), len(emu_records), len(stub_launches)]
    out["comparisons"] = comparisons
    out["shipped_symbols"] = sorted({k.symbol for k in registry.kernels()})

    # -- modules: one load per (device, code object), bytes = the shipped file, functions by name
    be.platform.device = 1
    run_ops_once = run_ops("gpu")
    be.platform.device = 0
    loads = stub.records("load")
    out["loads"] = [dict(device=r["device"], size=len(r["data"]),
                         file=next((k.file for k in registry.kernels()
                                    if (registry.hsaco_dir() / k.file).read_bytes() == r["data"]), None))
                    for r in loads]
    out["code_objects"] = sorted({k.file for k in registry.kernels()})
    out["device1_launch_devices"] = sorted({r["device"] for r in stub.records("launch")[-len(run_ops_once):]})
    out["functions"] = sorted({r["name"] for r in stub.records("get_function")})
    out["current_device_after"] = be._call("hipGetDevice")

    # -- one device guard per whole call: a sage_attention call on device 1 (current: 0) switches there and back
    #    once, not once per launch (prepare's launches + attention)
    from sage_co import sage_attention
    be.platform.device = 1
    sets_before, launches_before = len(stub.records("set_device")), len(stub.records("launch"))
    sage_attention(*inputs(S=100, H=2), backend="gpu")
    be.platform.device = 0
    out["whole_call_launches"] = len(stub.records("launch")) - launches_before
    out["whole_call_set_device"] = [r["device"] for r in stub.records("set_device")[sets_before:]]

    # -- errors: code, every alias, hipGetErrorString text; a failed launch is not recorded as launched
    q, k, v = inputs(S=16, H=1)
    from sage_co.api import sage_prepare
    prepared = launch_prepared = sage_prepare(q, k, v, backend="gpu")
    before = len(launch.launched), list(launch.launched)[-1:]
    stub.fail("hipModuleLaunchKernel", 400)
    try:
        fwd(launch_prepared, backend="gpu")
        out["launch_error"] = None
    except HipError as exc:
        out["launch_error"] = dict(message=str(exc), call=exc.call, code=exc.code)
    out["failed_launch_recorded"] = (len(launch.launched), list(launch.launched)[-1:]) != before
    stub.fail("hipModuleGetFunction", 500)
    be.platform.device = 1
    be.unload()            # the next launch loads and resolves again
    try:
        fwd(prepared, backend="gpu")
        out["get_function_error"] = None
    except HipError as exc:
        out["get_function_error"] = dict(message=str(exc), call=exc.call, code=exc.code)
    fwd(prepared, backend="gpu")   # the next launch resolves again and works
    out["retry_after_error_ok"] = stub.records("launch")[-1]["result"] == 0
    be.platform.device = 0

    # -- graph capture: loading a module while capturing fails; warmup() first loads everything
    be.unload()
    out["unloads"] = dict(loaded=len(stub.records("load")), unloaded=len(stub.records("unload")),
                          ok=all(r["result"] == 0 for r in stub.records("unload")))
    stub.set_capturing(0x5A5A, True)
    try:
        fwd(prepared, backend="gpu")
        out["capture_without_warmup"] = None
    except HipError as exc:
        out["capture_without_warmup"] = str(exc)
    stub.set_capturing(0x5A5A, False)
    n_loads = len(stub.records("load"))
    launch.warmup("gpu", device=0)
    out["warmup_loads"] = len(stub.records("load")) - n_loads
    n_loads, n_launches = len(stub.records("load")), len(stub.records("launch"))
    stub.set_capturing(0x5A5A, True)
    fwd(prepared, backend="gpu")
    sage_prepare(q, k, v, backend="gpu")
    stub.set_capturing(0x5A5A, False)
    out["capture_after_warmup"] = dict(loads=len(stub.records("load")) - n_loads,
                                       launches=len(stub.records("launch")) - n_launches,
                                       ok=all(r["result"] == 0 for r in stub.records("launch")[n_launches:]))

    # -- dynamic LDS reaches hipModuleLaunchKernel's sharedMemBytes
    from sage_co.abi import struct_for
    shipped = registry.find_symbol(stub.records("launch")[-1]["name"])
    struct_ = struct_for(shipped.op)
    buf = torch.zeros(4096, dtype=torch.uint8)
    launch.launch(shipped.symbol, struct_, (1, 1, 1), (launch.plan(shipped.symbol, struct_).max_threads, 1, 1),
                  {f.name: buf if f.kind == "ptr" else 1.0 if f.kind == "f32" else 1 for f in struct_.fields},
                  backend="gpu", dynamic_lds=256)
    out["dynamic_lds_shared_mem"] = stub.records("launch")[-1]["shared_mem"]

    # -- alignment: a view at an odd offset is refused before anything reaches the runtime
    n_launches = len(stub.records("launch"))
    flat = torch.zeros(17 * 128, dtype=torch.bfloat16)
    odd = flat[1:1 + 16 * 128].view(1, 16, 1, 128)
    try:
        first_ptr = next(f.name for f in struct_.fields if f.kind == "ptr")
        args = {f.name: buf if f.kind == "ptr" else 1.0 if f.kind == "f32" else 1 for f in struct_.fields}
        args[first_ptr] = odd
        out["misaligned_field"] = first_ptr
        launch.launch(shipped.symbol, struct_, (1, 1, 1), (launch.plan(shipped.symbol, struct_).max_threads, 1, 1),
                      args, backend="gpu")
        out["misaligned"] = None
    except ValueError as exc:
        out["misaligned"] = str(exc)
    out["misaligned_reached_runtime"] = len(stub.records("launch")) != n_launches
    return out


def symlink_scenario(tmp: Path) -> dict:
    lib = stub_hip.build(tmp / "real")
    link_dir = tmp / "opt_rocm" / "lib"
    link_dir.mkdir(parents=True)
    (link_dir / "libamdhip64.so").symlink_to(lib)
    stub_hip.Stub(lib)                                      # torch's runtime
    point_hip_python_at(link_dir / "libamdhip64.so")       # hip-python opened it by another name first
    be = hip_backend()
    from sage_co.backends import hip_runtime
    return dict(runtime=be.runtime.path, lib=str(lib), mapped=[f.path for f in hip_runtime.mapped_runtimes()])


def two_runtimes_scenario(tmp: Path) -> dict:
    torch_lib = stub_hip.build(tmp / "torch")
    other = tmp / "opt_rocm" / "lib"
    other.mkdir(parents=True)
    shutil.copy(torch_lib, other / "libamdhip64.so")      # a byte-identical copy is still another runtime
    stub_hip.Stub(torch_lib)
    point_hip_python_at(other / "libamdhip64.so")
    from sage_co.backends.hip_runtime import HipError
    try:
        hip_backend()
        return dict(error=None)
    except HipError as exc:
        return dict(error=str(exc), torch_lib=str(torch_lib), other=str(other / "libamdhip64.so"))


def deleted_scenario(tmp: Path) -> dict:
    lib = stub_hip.build(tmp / "gone")
    stub_hip.Stub(lib)
    lib.unlink()
    from sage_co.backends.hip_runtime import HipError
    try:
        be = hip_backend()
        return dict(error=None, binding=be.binding.name, runtime=be.runtime.path, lib=str(lib),
                    device_count=be._call("hipGetDeviceCount"))
    except HipError as exc:
        return dict(error=str(exc), error_type=type(exc).__name__)


class _HostReadForbidden:
    """While active, reading a tensor's values into Python (item, tolist, int/float/bool, numpy, a copy to the
    CPU) raises: what a host sync on a GPU would be. CPU tensors stand for device tensors on the stub."""
    NAMES = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__", "numpy", "cpu")

    def __enter__(self):
        import torch
        self.saved = {n: getattr(torch.Tensor, n) for n in self.NAMES}
        for n in self.NAMES:
            def forbidden(*a, _n=n, **k):
                raise AssertionError(f"host read of a tensor (Tensor.{_n}) during a varlen call")
            setattr(torch.Tensor, n, forbidden)
        return self

    def __exit__(self, *exc):
        import torch
        for n, f in self.saved.items():
            setattr(torch.Tensor, n, f)


def varlen_scenario(tmp: Path) -> dict:
    """Issue 26: sage_attention_varlen on the gpu backend while the stream is capturing a graph (after warmup):
    per batch size, the launches the stub received, the synchronizing calls, and whether any tensor value was
    read on the host (forbidden: _HostReadForbidden)."""
    stub = stub_hip.Stub(stub_hip.build(tmp))
    import torch
    import sage_co
    from sage_co import launch
    launch.use_backend("gpu", hip_backend(stream=0x5A5A))
    launch.warmup("gpu", device=0)
    out: dict = {}
    g = torch.Generator().manual_seed(0)
    for batch in (1, 64):
        lens_q = [int(x) for x in torch.randint(0, 300, (batch,), generator=g)]
        lens_kv = [int(x) for x in torch.randint(1, 300, (batch,), generator=g)]
        cq = torch.tensor([0, *torch.tensor(lens_q).cumsum(0).tolist()], dtype=torch.int32)
        ck = torch.tensor([0, *torch.tensor(lens_kv).cumsum(0).tolist()], dtype=torch.int32)
        q = torch.randn(sum(lens_q), 4, 128, generator=g).to(torch.bfloat16)
        k, v = (torch.randn(sum(lens_kv), 2, 128, generator=g).to(torch.bfloat16) for _ in range(2))
        # one call first (plans the shape, as a graph is captured after a warm-up run); the captured call then
        # reads no tensor value at all on the host
        sage_co.sage_attention_varlen(q, k, v, cq, ck, max(lens_q), max(lens_kv), is_causal=True, smooth_k=True,
                                      return_lse=True, backend="gpu")
        n_launch, n_sync = len(stub.records("launch")), len(stub.records("sync"))
        stub.set_capturing(0x5A5A, True)
        try:
            with _HostReadForbidden():
                res = sage_co.sage_attention_varlen(q, k, v, cq, ck, max(lens_q), max(lens_kv), is_causal=True,
                                                    smooth_k=True, return_lse=True, backend="gpu")
            error = None
        except Exception as exc:   # reported, asserted on by the test
            import traceback
            res, error = None, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"
        stub.set_capturing(0x5A5A, False)
        launches = stub.records("launch")[n_launch:]
        out[str(batch)] = dict(launches=len(launches), syncs=len(stub.records("sync")) - n_sync, error=error,
                               ok=all(r["result"] == 0 for r in launches), grids=[r["grid"] for r in launches],
                               shape=list(res[0].shape) if res is not None else None)
    return out


def bound_scenario(tmp: Path) -> dict:
    """A BoundLaunch's fast path (kernarg bytes packed at bind, pointer fields per call) against the full launch()
    path: the same bytes reach the runtime; what the fast path does not take goes the full path and gets its error;
    a backend swapped in after binding gets the launch."""
    stub = stub_hip.Stub(stub_hip.build(tmp / "lib"))
    import torch
    from sage_co import abi, launch, registry
    be = hip_backend()
    launch.use_backend("gpu", be)
    struct_ = abi.PREPARE_ARGS
    symbol = next(k.symbol for k in registry.kernels() if k.op == struct_.name)
    scalars = {f.name: 1.0 if f.kind == "f32" else 3 for f in struct_.fields if f.kind != "ptr"}
    pointers = [f.name for f in struct_.fields if f.kind == "ptr"]
    bufs = {n: torch.zeros(64, dtype=torch.float32) for n in pointers}
    grid, block = (2, 1, 1), (32, 1, 1)     # the prepare kernel is one wave32 per workgroup, a 1-D grid
    bound = launch.BoundLaunch(symbol, struct_, grid, block, scalars, backend="gpu")
    stub.clear()
    with launch.recording() as records:
        launch.launch(symbol, struct_, grid, block, {**scalars, **bufs}, backend="gpu")        # the full path
        launch.launch(symbol, struct_, bound.grid, bound.block, bound.args(bufs), backend="gpu")  # fast, checked
        launch.launch(symbol, struct_, bound.grid, bound.block, bound.args({}, bufs), backend="gpu")  # fast, fresh
    sent = stub.records("launch")
    out: dict = {"same_bytes": [r["data"] == sent[0]["data"] for r in sent],
                 "recorded_bytes": [r.kernarg_bytes == s["data"] for r, s in zip(records, sent)],
                 "geometry": [[r["grid"], r["block"]] for r in sent]}
    errors = {}
    first = pointers[0]
    for name, tensors, fresh in (
            ("strided", {**bufs, first: torch.zeros(64, 2)[:, 0]}, None),
            ("misaligned_fresh", {}, {**bufs, first: torch.zeros(65)[1:]}),
            ("missing", {n: bufs[n] for n in pointers[1:]}, None),
            ("scalar_as_tensor", {**bufs, "H_kv": torch.zeros(4)}, None)):
        try:
            launch.launch(symbol, struct_, bound.grid, bound.block, bound.args(tensors, fresh), backend="gpu")
            errors[name] = None
        except (TypeError, ValueError) as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"
    out["errors"] = errors
    out["launches_after_errors"] = len(stub.records("launch"))
    # workspace fields: bound at (offset, nbytes) of one per-call uint8 tensor; the fast path sends the bytes the
    # full path sends for the views ws[offset:offset + nbytes], and refuses a missing or short workspace
    spans = {"v_inv": (0, 256), "q_int8": (512, 256)}
    wsb = launch.BoundLaunch(symbol, struct_, grid, block, scalars, backend="gpu",
                             workspace=[(n, off, nb) for n, (off, nb) in spans.items()])
    ws = torch.zeros(1024, dtype=torch.uint8)
    others = {n: t for n, t in bufs.items() if n not in spans}
    stub.clear()
    with launch.recording() as ws_records:
        launch.launch(symbol, struct_, grid, block,
                      {**scalars, **others, **{n: ws[off:off + nb] for n, (off, nb) in spans.items()}}, backend="gpu")
        launch.launch(symbol, struct_, wsb.grid, wsb.block, wsb.args({}, others, ws), backend="gpu")
    ws_sent = stub.records("launch")
    out["workspace_same_bytes"] = len(ws_sent) == 2 and ws_sent[0]["data"] == ws_sent[1]["data"]
    out["workspace_addresses"] = [ws_records[1].addresses[n] - ws.data_ptr() for n in spans]
    ws_errors = {}
    for name, workspace in (("missing", None), ("short", torch.zeros(600, dtype=torch.uint8))):
        try:
            launch.launch(symbol, struct_, wsb.grid, wsb.block, wsb.args({}, others, workspace), backend="gpu")
            ws_errors[name] = None
        except ValueError as exc:
            ws_errors[name] = str(exc)
    out["workspace_errors"] = ws_errors
    out["workspace_launches_after_errors"] = len(stub.records("launch"))
    be2 = hip_backend()
    launch.use_backend("gpu", be2)
    launch.launch(symbol, struct_, bound.grid, bound.block, bound.args(bufs), backend="gpu")
    out["swapped_backend_loads"] = [be.module_loads, be2.module_loads]
    return out


def call_log(records: list[dict]) -> list[list]:
    """The runtime's view of a run, comparable across processes and bindings: every recorded call with its
    arguments and result; module / function handles numbered by first appearance; code-object bytes by sha256;
    kernarg bytes by sha256 with the pointer fields zeroed (they hold this process's tensor addresses, checked
    against the launch records separately)."""
    from sage_co import registry
    from sage_co.abi import struct_for
    ids: dict = {}

    def ident(kind, handle):
        return ids.setdefault((kind, handle), len(ids)) if handle else None
    out = []
    for r in records:
        data = bytearray(r["data"])
        if r["kind"] == "launch" and r["name"] and data:
            for f in struct_for(registry.find_symbol(r["name"]).op).fields:
                if f.kind == "ptr":
                    data[f.offset:f.offset + 8] = bytes(8)
        out.append([r["kind"], r["device"], r["result"], ident("module", r["module"]),
                    ident("function", r["function"]), r["stream"], list(r["grid"]), list(r["block"]),
                    r["shared_mem"], r["name"], r["kernel_params_null"], len(data),
                    hashlib.sha256(bytes(data)).hexdigest()[:16] if data else ""])
    return out


def binding_run(stub, binding) -> dict:
    """One binding on the stub: every shipped kernel through the ops (run_ops), then errors, events, a capture."""
    import torch
    from sage_co import launch
    from sage_co.backends import hip_bindings
    from sage_co.backends.hip_runtime import HipError
    from sage_co.api import sage_prepare
    be = hip_backend(binding, stream=0x5A5A)
    launch.use_backend("gpu", be)
    out: dict = {"binding": be.binding.name, "runtime": be.runtime.path, "describe": hip_bindings.describe(be.binding)}
    n0 = stub.count()
    records = run_ops("gpu")
    sent = stub.records()[n0:]
    launches = [r for r in sent if r["kind"] == "launch"]
    out["launches"] = len(records)
    out["bytes_as_recorded"] = len(launches) == len(records) and all(
        s["data"] == r.kernarg_bytes for s, r in zip(launches, records))
    out["log"] = call_log(sent)

    q, k, v = inputs(S=16, H=2)
    prepared = sage_prepare(q, k, v, backend="gpu")
    n1 = stub.count()
    errors = {}
    for entry, code in (("hipModuleLaunchKernel", 400), ("hipModuleGetFunction", 500)):
        stub.fail(entry, code)
        if entry == "hipModuleGetFunction":
            be.unload()   # the next launch loads and resolves again
        try:
            fwd(prepared, backend="gpu")
            errors[entry] = None
        except HipError as exc:
            errors[entry] = dict(message=str(exc), call=exc.call, code=exc.code)
    be.unload()
    stub.set_capturing(0x5A5A, True)
    try:
        fwd(prepared, backend="gpu")
        errors["capture"] = None
    except HipError as exc:
        errors["capture"] = str(exc)
    stub.set_capturing(0x5A5A, False)
    out["errors"] = errors
    # events around one attention call: the stub's clock counts the launches between the two records
    status, start = be.binding.call("hipEventCreate")
    _, stop = be.binding.call("hipEventCreate")
    stream = be.binding.stream(0x5A5A)
    statuses = [int(status), int(be.binding.call("hipEventRecord", start, stream)[0])]
    n_launch = len(stub.records("launch"))
    fwd(prepared, backend="gpu")
    sage_prepare(q, k, v, backend="gpu")
    statuses += [int(be.binding.call("hipEventRecord", stop, stream)[0]),
                 int(be.binding.call("hipEventSynchronize", stop)[0])]
    status, ms = be.binding.call("hipEventElapsedTime", start, stop)
    statuses += [int(status), int(be.binding.call("hipEventDestroy", start)[0]),
                 int(be.binding.call("hipEventDestroy", stop)[0])]
    out["events"] = dict(statuses=statuses, ms=float(ms), launches=len(stub.records("launch")) - n_launch,
                         destroyed_again=int(be.binding.call("hipEventDestroy", stop)[0]))
    out["error_log"] = call_log(stub.records()[n1:])
    out["device"] = [be._call("hipGetDevice"), be._call("hipGetDeviceCount")]
    # a routed SDPA call whose launch fails in the runtime (hipErrorLaunchFailure): torch's SDPA answers, the reason
    # is counted (CPU tensors stand for the device's here, so the router's device rule is told they are served)
    from sage_co import sdpa
    served, sdpa._device_served = sdpa._device_served, lambda t, backend: True
    sdpa.reset_stats()
    g = torch.Generator().manual_seed(5)
    q4, k4, v4 = (torch.randn(2, 2, 77, 64, generator=g).to(torch.bfloat16) for _ in range(3))
    n_launch = len(stub.records("launch"))
    stub.fail("hipModuleLaunchKernel", 719)
    with sdpa.enabled(backend="gpu"):
        routed = torch.nn.functional.scaled_dot_product_attention(q4, k4, v4)
    sdpa._device_served = served
    out["routed_failure"] = dict(stats=sdpa.stats(), same_as_torch=torch.equal(routed, sdpa.ORIGINAL_SDPA(q4, k4, v4)),
                                 tried=[r["result"] for r in stub.records("launch")[n_launch:]])
    sdpa.reset_stats()
    be.unload()
    del torch
    return out


def windows_scenario(tmp: Path) -> dict:
    """The ctypes binding's Windows path on the stub: the runtime found in a module list (stub_hip.FakeKernel32:
    torch's amdhip64_7.dll among system DLLs, its HMODULE the stub's real handle) and reached through that handle
    (ctypes.CDLL(path, handle=...), no load), then the ops run through it like the Linux ctypes run."""
    stub = stub_hip.Stub(stub_hip.build(tmp / "rocm_sdk_core" / "lib"))
    stub.set_device_count(2)
    from sage_co.backends import hip_bindings
    dll = r"C:\Users\me\venv\Lib\site-packages\_rocm_sdk_core\bin\amdhip64_7.dll"
    modules = [(rf"C:\Windows\System32\mod{i}.dll", 0x7FF0_0000_0000 + 0x10000 * i) for i in range(40)]
    modules.insert(17, (dll, stub.lib._handle))
    binding = hip_bindings.CtypesBinding(lambda: None, platform="win32", windows_api=stub_hip.FakeKernel32(modules))
    return {"win32": binding_run(stub, binding), "dll": dll}


def bindings_scenario(tmp: Path) -> dict:
    stub = stub_hip.Stub(stub_hip.build(tmp / "rocm_sdk_core" / "lib"))
    stub.set_device_count(2)
    choices = os.environ.get("SAGE_CO_TEST_BINDINGS", "hip-python,ctypes").split(",")
    return {choice: binding_run(stub, None if choice == "auto" else choice) for choice in choices}


def _tuning_stub(tmp: Path):
    """The stub as torch's runtime with two devices (1: another card, an RX 9070 XT) and the gpu backend installed."""
    stub = stub_hip.Stub(stub_hip.build(tmp / "rocm_sdk_core" / "lib"))
    stub.set_device_count(2)
    stub.set_device_props(1, "AMD Radeon RX 9070 XT", "gfx1201", 64)
    from sage_co import launch
    be = hip_backend(stream=0x5A5A)
    launch.use_backend("gpu", be)
    return stub, be


def _cli(argv) -> tuple[int, str]:
    import contextlib
    import io
    from sage_co import cli
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(argv)
    return code, out.getvalue()


def _attention_symbols(S: int, **options) -> list[str]:
    """The attention symbols one sage_attention call (B=1, H=2, S) on the gpu backend launches."""
    import sage_co
    from sage_co import launch, registry
    with launch.recording() as records:
        sage_co.sage_attention(*inputs(S=S, H=2), backend="gpu", **options)
    return [r.symbol for r in records if registry.find_symbol(r.symbol).op == "sage_attention_fwd"]


def tune_scenario(tmp: Path) -> dict:
    """A call without a schedule (the cache holds what the test wrote), `sage-co tune --backend gpu --device 0`, the
    same call again in this process; the stub's event clock makes $SAGE_CO_TEST_FAST_SCHEDULE's attention launches
    1 ms and every other schedule's 3 ms."""
    import warnings
    stub, be = _tuning_stub(tmp)
    from sage_co import family, registry, tuning, tuning_run
    # small shapes (the stub computes nothing, its clock counts launches): D 128 and D 64, lengths not multiples of 64
    tuning_run.SHAPES = ((1, 2, 200, 128), (2, 3, 130, 64))
    fast = os.environ["SAGE_CO_TEST_FAST_SCHEDULE"]
    for k in registry.kernels():
        if k.op == "sage_attention_fwd":
            stub.set_kernel_ms(k.symbol, 1.0 if k.key("schedule") == fast else 3.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        before = _attention_symbols(100)
        code, text = _cli(["tune", "--backend", "gpu", "--device", "0"])
        after = _attention_symbols(100)      # the same call shape: planned again after the new choice
    path = tuning.cache_path()
    return dict(code=code, output=text, file=json.loads(path.read_text()) if path.exists() else None,
                binding=be.binding.name,
                schedules=list(family.ATTENTION_SCHEDULES), default=family.DEFAULT_SCHEDULE,
                leftover=sorted(p.name for p in path.parent.iterdir()),
                before=[registry.find_symbol(s).key("schedule") for s in before],
                after=[registry.find_symbol(s).key("schedule") for s in after],
                warnings=[str(w.message) for w in caught if issubclass(w.category, tuning.TuningCacheWarning)])


def tuned_scenario(tmp: Path) -> dict:
    """A fresh process: per device, two sage_attention calls of different shapes without a schedule, then one naming
    the default (the shapes differ per device: on the stub every device's tensors are CPU tensors, which would share
    plans): the schedules of the attention symbols launched; the warnings given; `sage-co info`'s lines."""
    import warnings
    stub, be = _tuning_stub(tmp)
    from sage_co import family, registry, tuning
    out: dict = {"launched": {}, "binding": be.binding.name}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for device, lengths in ((0, (100, 130)), (1, (150, 170))):
            be.platform.device = device
            symbols = _attention_symbols(lengths[0]) + _attention_symbols(lengths[1]) + \
                _attention_symbols(lengths[0], schedule=family.DEFAULT_SCHEDULE)
            out["launched"][str(device)] = [registry.find_symbol(s).key("schedule") for s in symbols]
        be.platform.device = 0
    out["warnings"] = [str(w.message) for w in caught if issubclass(w.category, tuning.TuningCacheWarning)]
    code, text = _cli(["info"])
    out["info"] = [line for line in text.splitlines() if line.startswith("tuned attention schedule")]
    out["info_code"] = code
    return out


SCENARIOS = {"tune": tune_scenario, "tuned": tuned_scenario, "main": main_scenario, "symlink": symlink_scenario, "two_runtimes": two_runtimes_scenario,
             "deleted": deleted_scenario, "varlen": varlen_scenario, "bound": bound_scenario,
             "bindings": bindings_scenario, "windows": windows_scenario}

if __name__ == "__main__":
    result = SCENARIOS[sys.argv[1]](Path(sys.argv[2]))
    print(json.dumps(result, default=list))
