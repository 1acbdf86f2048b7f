"""What the host-time benchmarks (benchmarks/bench_launch_overhead.py, benchmarks/bench_varlen.py) share: the stub HIP
runtime (tests/stub_hip) as the process's gpu backend, and the timing loop. The scripts import this module as a
sibling (Python puts a script's own folder first on sys.path; no sys.path edit)."""
from __future__ import annotations

import importlib.util
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_stub_hip():
    """tests/stub_hip, loaded from its file (the benchmarks run from a checkout; sage_co itself comes from the
    environment: installed, or the checkout on PYTHONPATH)."""
    spec = importlib.util.spec_from_file_location("stub_hip", ROOT / "tests" / "stub_hip" / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["stub_hip"] = module
    spec.loader.exec_module(module)
    return module


@contextmanager
def stub_hip_backend(script: str):
    """The stub runtime built in a temporary folder, with a HipBackend on it installed as the "gpu" backend: yields
    the stub_hip.Stub, or None after printing to stderr (prefixed with `script`) why it cannot run here."""
    stub_hip = load_stub_hip()
    import torch
    if getattr(torch.version, "hip", None) is not None:
        print(f"{script}: torch is a ROCm build, so its own libamdhip64 is mapped and the stub cannot stand in for "
              "it; run this with a CPU torch", file=sys.stderr)
        yield None
        return
    try:
        import rocm.bindings  # noqa: F401
    except ImportError:
        try:
            import hip  # noqa: F401
        except ImportError:
            print(f"{script}: hip-python is not installed (pip install hip-python)", file=sys.stderr)
            yield None
            return
    with tempfile.TemporaryDirectory() as tmp:
        try:
            stub = stub_hip.Stub(stub_hip.build(Path(tmp)))
        except stub_hip.NoCompiler as exc:
            print(f"{script}: {exc}", file=sys.stderr)
            yield None
            return
        from sage_co import launch
        from sage_co.backends.hip import HipBackend
        launch.use_backend("gpu", HipBackend(platform=stub_hip.HostPlatform()))
        yield stub


def timed(fn, n: int, rounds: int) -> tuple[float, float, float]:
    """(median CPU, min CPU, median wall) seconds per call of `fn` over `rounds` rounds of `n` calls, after one call
    that loads the module / plans the shape. CPU is the thread's time (time.thread_time): the host time a call
    costs, robust on a shared machine."""
    fn()
    wall, cpu = [], []
    for _ in range(rounds):
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(n):
            fn()
        wall.append((time.perf_counter() - t0) / n)
        cpu.append((time.thread_time() - c0) / n)
    return statistics.median(cpu), min(cpu), statistics.median(wall)
