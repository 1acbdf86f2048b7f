#!/usr/bin/env python3
"""Timing on real hardware (a gfx1201 / Radeon AI PRO R9700): sage (prepare included), the attention kernel
alone, BF16 SDPA and, when installed, a Triton SageAttention. Method of the seed PR: per provider 2 warm-up +
5 timed calls with CUDA events, 3 rounds with the providers interleaved, median reported;
TFLOPS = 4 * B * H * S^2 * 128 / time.

    python benchmarks/bench_gfx1201.py -B 1 -H 24 -S 4096 16384 --kernel hip asm

Exits with a clear message where no gfx1201 is present (speed is modeled there: tools/perf_model.py).
"""
from __future__ import annotations

import argparse
import statistics
import sys

import torch
from rich.console import Console
from rich.table import Table


def time_ms(fn, warmup=2, iters=5) -> float:
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def triton_sage():
    try:
        from aiter.ops.triton.attention.fav3_sage import fav3_sage  # noqa: F401  (aiter's Triton SageAttention)
        return fav3_sage
    except Exception:
        return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-B", type=int, default=1)
    ap.add_argument("-H", type=int, default=24)
    ap.add_argument("-S", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--kernel", nargs="+", default=["hip", "asm"], help="attention kernels to time (asm, hip)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", type=int, default=None, help="gfx1201 device index (default: the first one)")
    args = ap.parse_args(argv)
    import sage_co
    from sage_co.selftest import gfx1201_devices
    devices, why = gfx1201_devices()
    if not devices:
        print(f"bench_gfx1201.py: no gfx1201 GPU visible to torch here ({why}); nothing to time. "
              "Modeled figures: python tools/perf_model.py", file=sys.stderr)
        return 2
    device = torch.device("cuda", args.device if args.device is not None else devices[0])
    torch.cuda.set_device(device)   # events and SDPA on the gfx1201, not on torch's default device
    console = Console()
    table = Table(title=f"gfx1201 timings (median of {args.rounds} interleaved rounds)")
    for col in ("S", "provider", "ms", "TFLOPS"):
        table.add_column(col, justify="right")
    for S in args.S:
        q, k, v = (torch.randn(args.B, S, args.H, 128, dtype=torch.bfloat16, device=device) for _ in range(3))
        prepared = sage_co.sage_prepare(q, k, v)
        prepared16 = sage_co.sage_prepare(q, k, v, pv_dtype="fp16")    # issue 19: fp16 P.V (modeled 1.4x fp8)
        providers = {}
        for kern in args.kernel:
            providers[f"sage[{kern}] (prepare incl.)"] = lambda kern=kern: sage_co.sage_attention(q, k, v, kernel=kern)
            providers[f"sage[{kern}] kernel only"] = lambda kern=kern: sage_co.sage_attention_fwd(prepared, kernel=kern)
            providers[f"sage[{kern}] pv fp16 kernel only"] = \
                lambda kern=kern: sage_co.sage_attention_fwd(prepared16, kernel=kern)
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        providers["BF16 SDPA"] = lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt)
        tri = triton_sage()
        if tri is not None:
            providers["Triton fav3_sage"] = lambda: tri(q, k, v)
        times = {name: [] for name in providers}
        for _ in range(args.rounds):
            for name, fn in providers.items():
                times[name].append(time_ms(fn))
        flops = 4 * args.B * args.H * S * S * 128
        for name, ts in times.items():
            ms = statistics.median(ts)
            table.add_row(str(S), name, f"{ms:.3f}", f"{flops / (ms * 1e-3) / 1e12:.1f}")
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
