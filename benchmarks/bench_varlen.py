#!/usr/bin/env python3
"""Host time of one sage_attention_varlen call for 1 and for 64 packed sequences (issue 26), measured against the
stub HIP runtime (tests/stub_hip) as benchmarks/bench_launch_overhead.py does: the real hip-python wrappers and the
real call path (validation, plan lookup, packed output allocation, 2 prepare launches + 1 attention launch), a
runtime whose entry points return at once. CPU tensors stand for device tensors, so no kernel runs.

    PYTHONPATH=. python benchmarks/bench_varlen.py [--calls 300] [--rounds 5]

Reports the median over rounds of thread CPU time per call, the launches per call, and the ratio 64 / 1 sequence.
Goal (issue 26): <= 2x. Before issue 26 the call looped per sequence in Python (cu_seqlens.cpu(), 4 launches and
~150 us per sequence: ~256 launches and ~10 ms of host time for 64 sequences).
"""
from __future__ import annotations

import argparse
import sys

from stub_timing import stub_hip_backend, timed     # benchmarks/stub_timing.py: the stub runtime and timing loop


def batch(n: int, seed: int = 0, H_q: int = 24, H_kv: int = 24, D: int = 128):
    import torch
    g = torch.Generator().manual_seed(seed)
    lens = [int(x) for x in torch.randint(64, 4097, (n,), generator=g)] if n > 1 else [4096]
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    q = torch.zeros(sum(lens), H_q, D, dtype=torch.bfloat16)
    k = torch.zeros(sum(lens), H_kv, D, dtype=torch.bfloat16)
    return q, k, k.clone(), cu, max(lens)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    with stub_hip_backend("bench_varlen.py") as stub:
        if stub is None:
            return 2
        import sage_co
        stub.set_recording(True)
        figures = {}
        for n in (1, 64):
            q, k, v, cu, mx = batch(n)
            call = lambda: sage_co.sage_attention_varlen(q, k, v, cu, cu, mx, mx, is_causal=True, backend="gpu")
            call()
            before = len(stub.records("launch"))
            call()
            launches = len(stub.records("launch")) - before
            stub.set_recording(False)
            cpu, _, _ = timed(call, args.calls, args.rounds)
            stub.set_recording(True)
            figures[n] = cpu * 1e6
            print(f"  {n:3d} sequence(s) ({q.shape[0]:6d} tokens, H 24, D 128): {figures[n]:7.1f} us CPU per call, "
                  f"{launches} launches")
        print(f"  ratio 64 / 1 sequence: {figures[64] / figures[1]:.2f} (goal <= 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
