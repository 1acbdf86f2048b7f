"""fp32 inputs and output (issue 30, docs/performance.md §fp32 inputs and output): what an fp32 call costs next to the
same call in bf16, MODELED with the calibrated parameters. `python tools/perf_model.py --fp32`.

Prepare is memory-bound (docs/performance.md §The prepare stage, tools/perfmodel/prepare.py): fp32 q/k/v are read at
4 bytes per element instead of 2, the int8/fp8 writes are unchanged. The attention kernels read only the prepared tensors (the same for every
input dtype); the fp32 symbols write 4 bytes per output element instead of 2 (two global_store_b128 per lane and
d-tile instead of one): the fp32 symbol itself is emulated and modeled (tools/perfmodel/restate.our_kernel).
"""
from __future__ import annotations

import json

from perfmodel.hardware import CALIBRATED, Params
from perfmodel.prepare import CASES, prepare_seconds
from perfmodel.restate import KERNELS, our_kernel
from perfmodel.stream import HEAD_DIM

SHAPE = (1, 24, 4096)   # B, H, S (D = 128): the shape


def fp32_cost(B: int = SHAPE[0], H: int = SHAPE[1], S: int = SHAPE[2], params: Params = CALIBRATED) -> dict:
    """Modeled microseconds of prepare and of each attention kernel, bf16 vs fp32, and the whole op."""
    out = {"B": B, "H": H, "S": S, "D": HEAD_DIM, "prepare": {}, "attention": {}, "op": {}}
    for dt, nbytes in (("bf16", 2), ("fp32", 4)):
        for case in CASES:   # cold: Q/K/V in DRAM (the goal rows' case); resident: in the Infinity Cache
            out["prepare"].setdefault(case, {})[dt] = prepare_seconds(B, H, S, params, case=case, in_bytes=nbytes) * 1e6
    for v in KERNELS:
        if not KERNELS[v].exists():
            continue
        out["attention"][v] = {}
        for dt in ("bf16", "fp32"):
            res = our_kernel(v, B, H, S, params, out_dtype=dt)
            out["attention"][v][dt] = {"time_us": res.time_us, "tflops": res.tflops, "binding": res.binding}
            out["op"].setdefault(v, {})[dt] = out["prepare"]["cold"][dt] + res.time_us
    return out


def print_fp32(as_json: bool = False) -> int:
    r = fp32_cost()
    if as_json:
        print(json.dumps(r, indent=1))
        return 0
    print(f"fp32 inputs and output vs bf16 (MODELED, calibrated), B={r['B']} H={r['H']} S={r['S']} D={r['D']}")
    for case, p in r["prepare"].items():
        print(f"  prepare ({case}): bf16 {p['bf16']:.1f} us, fp32 {p['fp32']:.1f} us ({p['fp32'] / p['bf16']:.2f}x)")
    for v, a in r["attention"].items():
        b, f = a["bf16"], a["fp32"]
        print(f"  attention {v}: bf16 out {b['time_us']:.1f} us ({b['tflops']:.1f} TFLOPS, {b['binding']}), fp32 out "
              f"{f['time_us']:.1f} us ({f['tflops']:.1f} TFLOPS, {f['binding']}), {f['time_us'] / b['time_us']:.3f}x")
        ob, of = r["op"][v]["bf16"], r["op"][v]["fp32"]
        print(f"  whole op ({v}, prepare cold): bf16 {ob:.1f} us, fp32 {of:.1f} us ({of / ob:.3f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(print_fp32())
