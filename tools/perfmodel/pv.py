"""The P.V input type's cost (issue 19): both shipped attention kernels with pv_dtype "fp8" (v_wmma_f32_16x16x16_fp8_fp8,
8 cycles per SIMD) and "fp16" (v_wmma_f32_16x16x16_f16, 16 cycles: hardware.wmma_cycles), head dim 128, bf16 out.
Counts come from the emulator (the real bytes of each symbol), occupancy from each symbol's VGPRs and LDS; cycles
per 64-key tile in the issue-bound and latency-aware modes and the time of one shape. Every figure is MODELED."""
from __future__ import annotations

from perfmodel.attention import attention_symbol
from perfmodel.emulated import EMU_SEQ, emulator_mix
from perfmodel.issue import model_shape, tile_cost
from perfmodel.simulate import simulate_kernel
from perfmodel.stream import analyze
from sage_co.abi import PV_DTYPES   # the manifest column pv_dtype

SHAPE = (1, 24, 4096)           # B, H, S (S_q = S_kv) of the issue's comparison
GOAL_RATIO = 1.5                # issue 19: the fp16 variant may cost at most 1.5x the fp8 one


def pv_costs(shape=SHAPE, seqs=EMU_SEQ, kernels=("hip", "asm")) -> list[dict]:
    """One row per (kernel, pv_dtype): modeled cycles per tile, binding resource, occupancy, time."""
    from perfmodel.report import ASM_CO, HIP_CO
    paths = {"hip": HIP_CO, "asm": ASM_CO}
    B, H, S = shape
    rows = []
    for kernel in kernels:
        for pv in PV_DTYPES:
            symbol = attention_symbol(kernel, pv_dtype=pv)
            km = analyze(kernel, paths[kernel], symbol)
            km.mix, km.executed = emulator_mix(km, kernel, seqs, pv_dtype=pv)
            cost = tile_cost(km.mix, km.waves)
            sim = simulate_kernel(km)
            issue = model_shape(km, B, H, S)
            lat = model_shape(km, B, H, S, sim=sim)
            rows.append(dict(kernel=kernel, pv_dtype=pv, symbol=symbol, vgprs=km.vgprs, lds_bytes=km.lds_bytes,
                             waves=km.waves, wmma_cycles=cost.wmma, valu=cost.valu, cycles=cost.cycles,
                             binding=cost.binding, latency_cycles=sim.cycles_per_tile, latency_binding=sim.binding,
                             time_us=issue.seconds * 1e6, latency_time_us=lat.seconds * 1e6))
    for r in rows:
        base = next(x for x in rows if x["kernel"] == r["kernel"] and x["pv_dtype"] == "fp8")
        r["ratio"] = r["time_us"] / base["time_us"]
        r["latency_ratio"] = r["latency_time_us"] / base["latency_time_us"]
    return rows


def print_pv(as_json: bool = False) -> int:
    rows = pv_costs()
    if as_json:
        import json
        print(json.dumps(rows, indent=1))
        return 0
    from rich.console import Console
    from rich.table import Table
    B, H, S = SHAPE
    t = Table(title=f"P.V input type, head dim 128, bf16 out: modeled cycles per 64-key tile per SIMD and time of "
                    f"B={B} H={H} S={S} (MODELED; f16 WMMA 16 cycles, fp8 8)")
    for col in ("kernel", "pv_dtype", "VGPRs / LDS B -> waves/SIMD", "WMMA cyc", "VALU issue", "cyc/tile (binding)",
                "time us", "vs fp8", "latency-aware cyc/tile", "time us", "vs fp8"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(r["kernel"], r["pv_dtype"], f"{r['vgprs']} / {r['lds_bytes']} -> {r['waves']}",
                  f"{r['wmma_cycles']:.0f}", f"{r['valu']:.0f}", f"{r['cycles']:.0f} ({r['binding']})",
                  f"{r['time_us']:.0f}", f"{r['ratio']:.2f}x", f"{r['latency_cycles']:.0f} ({r['latency_binding']})",
                  f"{r['latency_time_us']:.0f}", f"{r['latency_ratio']:.2f}x")
    console = Console(width=160)
    console.print(t)
    for r in rows:
        if r["pv_dtype"] == "fp16":
            worst = max(r["ratio"], r["latency_ratio"])
            console.print(f"Goal (fp16 P.V <= {GOAL_RATIO}x fp8, modeled) for {r['kernel']}: "
                          f"{'met' if worst <= GOAL_RATIO else 'NOT met'} ({r['ratio']:.2f}x issue-bound, "
                          f"{r['latency_ratio']:.2f}x latency-aware)")
    return 0
