#!/usr/bin/env python3
"""Host time per launch of the hip backend, measured against the stub HIP runtime (tests/stub_hip), so it runs
anywhere with a C compiler and hip-python: the real hip-python wrappers, the real launch() path (plan lookup,
checks, kernarg packing, device guard, hipModuleLaunchKernel), a runtime whose entry points return at once.

    python benchmarks/bench_launch_overhead.py [--launches 20000] [--rounds 5]

Reports the median over rounds of (thread CPU time / launches) -- the host time a launch costs, robust on a
shared machine -- and of (wall time / launches), for a kernel of each op (attention, prepare stats / reduce /
quant), then for the whole sage_co.sage_attention call (validation, planning, allocation, 3 prepare launches + 1
attention launch), eager and through the torch.library dispatch (the path torch.compile and fake tensors take).
Goals: <= 20 us per launch (issue 12), <= 40 us for the whole call (issue 24; it was ~150 us, BEFORE_US). torch's own
current-stream lookup is not included (the stub platform answers it from a field); on a ROCm torch it is
torch._C._cuda_getCurrentRawStream, one C call.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The whole call before issue 24's call spec / plan_call (commit c1635f3): ~150 us in the README's measurement;
# 376-395 us CPU on the 2-core shared development machine where issue 24 was done (same script, same stub).
BEFORE_US = "~150 us (README) / 376-395 us (issue 24's dev machine)"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def kernels(torch):
    """(symbol, struct, grid, block, args) for one launch of a kernel of each op. The stub runs nothing, so the
    arguments only need the right kinds: a 4 KiB tensor per pointer, 1 / 1.0 per scalar."""
    from sage_co import abi, launch, registry
    buf = torch.zeros(4096, dtype=torch.uint8)
    out = []
    for op, struct in sorted(abi.STRUCTS.items()):
        shipped = next(k for k in registry.kernels() if k.op == op)
        block = (launch.plan(shipped.symbol, struct).max_threads, 1, 1)   # each kernel's own workgroup size
        args = {f.name: buf if f.kind == "ptr" else 1.0 if f.kind == "f32" else 1 for f in struct.fields}
        out.append((shipped.symbol, struct, (2, 2, 1), block, args))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--launches", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    import stub_hip
    import torch
    if getattr(torch.version, "hip", None) is not None:
        print("bench_launch_overhead.py: torch is a ROCm build, so its own libamdhip64 is mapped and the stub cannot "
              "stand in for it; run this with a CPU torch", file=sys.stderr)
        return 2
    try:
        import rocm.bindings  # noqa: F401
    except ImportError:
        try:
            import hip  # noqa: F401
        except ImportError:
            print("bench_launch_overhead.py: hip-python is not installed (pip install hip-python)", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory() as tmp:
        try:
            stub = stub_hip.Stub(stub_hip.build(Path(tmp)))
        except stub_hip.NoCompiler as exc:
            print(f"bench_launch_overhead.py: {exc}", file=sys.stderr)
            return 2
        from sage_co import launch
        from sage_co.backends.hip import HipBackend
        launch.use_backend("hip", HipBackend(platform=stub_hip.HostPlatform()))
        stub.set_recording(False)
        print(f"host time per launch (median of {args.rounds} rounds x {args.launches} launches, stub runtime):")
        for symbol, struct, grid, block, kargs in kernels(torch):
            launch.launch(symbol, struct, grid, block, kargs, backend="hip")   # first launch loads the module
            wall, cpu = [], []
            for _ in range(args.rounds):
                t0, c0 = time.perf_counter(), time.thread_time()
                for _ in range(args.launches):
                    launch.launch(symbol, struct, grid, block, kargs, backend="hip")
                wall.append((time.perf_counter() - t0) / args.launches)
                cpu.append((time.thread_time() - c0) / args.launches)
            print(f"  {symbol:40s} {statistics.median(cpu) * 1e6:6.1f} us CPU, {statistics.median(wall) * 1e6:6.1f} us wall")
        # the whole public op: validation, custom-op dispatch, output allocation, 3 prepare launches + 1 attention
        import sage_co
        q, k, v = (torch.zeros(1, 64, 2, 128, dtype=torch.bfloat16) for _ in range(3))
        dispatched = (q, k, v, 128 ** -0.5, "NHD", False, None, None, 1e-6, None, None, 0, False, "hip", "")
        calls = (lambda: sage_co.sage_attention(q, k, v, backend="hip"),
                 lambda: torch.ops.sage_co.sage_attention(*dispatched))
        ops = max(args.launches // 10, 1)
        figures = []
        for call in calls:
            call()
            wall, cpu = [], []
            for _ in range(args.rounds):
                t0, c0 = time.perf_counter(), time.thread_time()
                for _ in range(ops):
                    call()
                wall.append((time.perf_counter() - t0) / ops)
                cpu.append((time.thread_time() - c0) / ops)
            figures.append((statistics.median(cpu) * 1e6, statistics.median(wall) * 1e6))
        (cpu_us, wall_us), (dispatched_us, _) = figures
        print(f"  {'sage_co.sage_attention (4 launches)':40s} {cpu_us:6.1f} us CPU, {wall_us:6.1f} us wall; "
              f"through torch.ops.sage_co.sage_attention {dispatched_us:.1f}; before issue 24: {BEFORE_US}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
