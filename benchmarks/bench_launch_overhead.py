#!/usr/bin/env python3
"""Host time per launch of the gpu backend, measured against the stub HIP runtime (tests/stub_hip), so it runs
anywhere with a C compiler and hip-python: the real hip-python wrappers, the real launch() path (plan lookup,
checks, kernarg packing, device guard, hipModuleLaunchKernel), a runtime whose entry points return at once.

    python benchmarks/bench_launch_overhead.py [--launches 20000] [--rounds 5]

(sage_co must be importable: installed, or the checkout on PYTHONPATH.)

Reports the median over rounds of (thread CPU time / launches) -- the host time a launch costs, robust on a
shared machine -- and of (wall time / launches), for a kernel of each op (attention, prepare stats /
quant), then for the whole sage_co.sage_attention call (validation, planning, allocation, the prepare launch + the
attention launch), eager and through the torch.library dispatch (the path torch.compile and fake tensors take).
Goals: <= 20 us per launch (issue 12), <= 40 us for the whole call (issue 24; the figures before: BEFORE_US). torch's own
current-stream lookup is not included (the stub platform answers it from a field); on a ROCm torch it is
torch._C._cuda_getCurrentRawStream, one C call.
"""
from __future__ import annotations

import argparse
import sys

from stub_timing import stub_hip_backend, timed     # benchmarks/stub_timing.py: the stub runtime and timing loop

# The whole call (CPU us per call, this script's median, stub runtime) at earlier commits, measured on the 2-core
# shared development machine (its load moves every figure by up to ~30%; compare runs made side by side):
BEFORE_US = {
    "c1635f3 (before issue 24's call spec / plan_call; ~150 us in the README's own measurement)": "376-395",
    "4d688c2 (call spec, plan memo, BoundLaunch)": "99-128",
    "98c7edd (3 launches; quiet machine)": "76-78",
    # side by side later, on a machine ~1.8x slower for the same code: 98c7edd 141-147, 7f814db (one prepare
    # launch) 121-126, issue 24's binding work (one workspace per call, static fields, hip-python's own argument
    # types) 55-60; in a quieter window that work at 0d327ec: 35-46, median 38.6 (98c7edd beside it 91-113)
}


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
    with stub_hip_backend("bench_launch_overhead.py") as stub:
        if stub is None:
            return 2
        import torch
        from sage_co import launch
        stub.set_recording(False)
        print(f"host time per launch (median of {args.rounds} rounds x {args.launches} launches, stub runtime; "
              "bound: through a BoundLaunch, as the ops launch):")
        for symbol, struct, grid, block, kargs in kernels(torch):
            cpu, _, wall = timed(lambda: launch.launch(symbol, struct, grid, block, kargs, backend="gpu"),
                                 args.launches, args.rounds)
            # the ops' way: a BoundLaunch (scalars packed once, pointer fields per call; sage_co.launch)
            scalars = {n: a for n, a in kargs.items() if not isinstance(a, torch.Tensor)}
            bound = launch.BoundLaunch(symbol, struct, grid, block, scalars, backend="gpu")
            tensors = {n: a for n, a in kargs.items() if isinstance(a, torch.Tensor)}
            bound_cpu, _, _ = timed(lambda: launch.launch(symbol, struct, bound.grid, bound.block,
                                                          bound.args(tensors), backend="gpu"), args.launches,
                                  args.rounds)
            print(f"  {symbol:40s} {cpu * 1e6:6.1f} us CPU, {wall * 1e6:6.1f} us wall; bound {bound_cpu * 1e6:5.1f}")
        # the whole public op: validation, custom-op dispatch, output allocation, the prepare + the attention launch
        import sage_co
        q, k, v = (torch.zeros(1, 64, 2, 128, dtype=torch.bfloat16) for _ in range(3))
        from sage_co.callspec import SAGE_ATTENTION    # the custom op's positional arguments, from the call spec
        dispatched = SAGE_ATTENTION.to_schema((q, k, v), SAGE_ATTENTION.bind({"softmax_scale": 128 ** -0.5, "backend": "gpu"}))
        calls = (lambda: sage_co.sage_attention(q, k, v, backend="gpu"),
                 lambda: torch.ops.sage_co.sage_attention(*dispatched))
        ops = max(args.launches // 10, 1)
        (cpu, cpu_min, wall), (via_op, _, _) = (timed(call, ops, args.rounds) for call in calls)
        print(f"  {'sage_co.sage_attention (2 launches)':40s} {cpu * 1e6:6.1f} us CPU (min {cpu_min * 1e6:.1f}), "
              f"{wall * 1e6:6.1f} us wall; through torch.ops.sage_co.sage_attention {via_op * 1e6:.1f} us CPU "
              f"(goal <= 40 us)")
        print("  before (the same measurement at earlier commits):")
        for commit, us in BEFORE_US.items():
            print(f"    {commit}: {us} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
