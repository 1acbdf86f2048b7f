#!/usr/bin/env python3
"""Host time per launch of the hip backend, measured against the stub HIP runtime (tests/stub_hip), so it runs
anywhere with a C compiler and hip-python: the real hip-python wrappers, the real launch() path (plan lookup,
checks, kernarg packing, device guard, hipModuleLaunchKernel), a runtime whose entry points return at once.

    python benchmarks/bench_launch_overhead.py [--launches 20000] [--rounds 5]

Reports the median over rounds of (thread CPU time / launches) -- the host time a launch costs, robust on a
shared machine -- and of (wall time / launches), for the attention kernel and each prepare kernel,
with the arguments run_prepare / run_attention_fwd pass. Goal (issue 12): <= 20 us per launch. torch's own
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
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def kernels(torch):
    """(symbol, struct, grid, block, args) for one launch of each kernel, as the ops build them (B=1, H=2, S=64,
    head dim 128, bf16). The struct of each op comes from sage_co.abi; every field gets a plausible value."""
    from sage_co import abi, registry
    B, H, S, Sp = 1, 2, 64, 64
    t = torch.zeros(B, Sp, H, 128, dtype=torch.bfloat16)
    f32 = torch.zeros(B, H, 128)
    i8 = torch.zeros(B, H, Sp, 128, dtype=torch.int8)

    def fill(struct, **named):
        ptr = {"q": i8, "k": i8, "v": i8, "out": t, "q_int8": i8, "k_int8": i8, "v_fp8": i8}
        vals = {}
        for f in struct.fields:
            if f.name in named:
                vals[f.name] = named[f.name]
            elif f.kind == "ptr":
                vals[f.name] = ptr.get(f.name, f32)
            else:
                vals[f.name] = 1e-6 if f.kind == "f32" else 1
        return vals
    att = fill(abi.ATTENTION_FWD_ARGS, seq_len_q=S, seq_pad_q=Sp, seq_len_kv=S, seq_pad_kv=Sp, num_heads_q=H,
               num_heads_kv=H, kv_group_magic=abi.kv_group_magic(1), out_stride_b=Sp * H * 128,
               out_stride_s=H * 128, out_stride_h=128, head_dim=128, flags=0)
    keys = dict(head_dim=128, in_dtype="bf16", rope_dim=0)
    wave, channels = (abi.WAVE_SIZE, 1, 1), (abi.HEAD_DIM, 1, 1)
    return [
        (registry.find(abi.ATTENTION_OP, head_dim=128, out_dtype="bf16").symbol, abi.ATTENTION_FWD_ARGS, (1, H, B),
         abi.ATTENTION_BLOCK, att),
        (registry.find("sage_prepare.stats", **keys).symbol, abi.PREPARE_STATS_ARGS, (2, H, B), wave,
         fill(abi.PREPARE_STATS_ARGS, k=t, v=t)),
        (registry.find("sage_prepare.reduce").symbol, abi.PREPARE_REDUCE_ARGS, (1, H, B), channels,
         fill(abi.PREPARE_REDUCE_ARGS)),
        (registry.find("sage_prepare.quant", **keys).symbol, abi.PREPARE_QUANT_ARGS, (2, H, 3 * B), wave,
         fill(abi.PREPARE_QUANT_ARGS, q=t, k=t, v=t)),
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--launches", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    import stub_hip
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
        import torch
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
