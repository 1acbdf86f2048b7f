"""The microbenchmark half of `sage-co selftest --perf` (docs/performance.md §Microbenchmarks and refit).

With a gfx1201: every kernel of asm_src/gfx1201_microbench.s runs once at a small iteration count and its result
records are checked (sage_co.microbench.check), then it is timed with HIP events (torch.cuda.Event on the current
stream) at two iteration counts; the slope, seconds per loop iteration, gives the derived parameters
(microbench.derive: the clock under matrix load, measured by the clock kernel's shader-clock counter against the
HIP-event time; the WMMA rate; TRANS clocks per v_exp / v_log / v_rcp; VOPD issue clocks; whether VALU / TRANS / LDS
issue while a WMMA holds the matrix unit and whether TRANS overlaps VALU; LDS load-to-use latency, L2 -> CU bytes
per clock). The grids are sized from the device's own CU count (microbench.gpu_plan), recorded with its name and
arch in `perf.device`. Without one: every kernel runs on the emulator, its records
and dynamic instruction counts are checked, and no time is reported (`measured` is false).

The report's `perf` section (selftest.json) is what `python tools/perf_model.py --refit REPORT.json` reads:
    perf.measured                   true only when the times are HIP-event times on a gfx1201
    perf.device                     name, arch, cus (compute units) of the GPU measured
    perf.kernels.<bench>            workgroups, iterations [n1, n2], ms [t1, t2], seconds_per_iteration, correct
    perf.derived.<bench>.<figure>   microbench.derive's figures (absent when not measured)
"""
from __future__ import annotations

import statistics

from . import microbench as mb
from .abi import MICROBENCH_LDS_BENCHES
from .backends.timing import time_ms

WARMUP = 2              # launches before timing (module load, clocks ramping)
ROUNDS = 5              # timed launches per iteration count; the median is kept
WHAT = {
    "wmma": "4 independent iu8 WMMA chains: sustained matrix rate -> clock under matrix load",
    "valu": "32 v_add_nc_u32 per iteration: VALU alone",
    "trans": "8 v_exp_f32 per iteration: TRANS alone",
    "lds": "4 ds_load_b128 per iteration: LDS loads alone",
    "wmma_valu": "WMMA body + VALU body interleaved: VALU co-issue with WMMA",
    "wmma_trans": "WMMA body + TRANS body interleaved: TRANS co-issue with WMMA",
    "wmma_lds": "WMMA body + LDS body interleaved: LDS issue under WMMA",
    "lds_chain": "8 dependent ds_load_b32 per iteration: LDS load-to-use latency",
    "l2_stream": "4 global_load_b128 (SCOPE_DEV) per iteration over 6 MiB: L2 -> CU bandwidth",
    "trans_log": "8 v_log_f32 per iteration: TRANS clocks of v_log_f32",
    "trans_rcp": "8 v_rcp_f32 per iteration: TRANS clocks of v_rcp_f32",
    "vopd": "16 v_dual_add_f32 pairs per iteration: vector issue clocks of a VOPD pair",
    "trans_valu": "TRANS body + VALU body interleaved: TRANS overlapping other VALU",
    "clock": "WMMA body between two SHADER_CYCLES reads: the clock under matrix load, measured",
}


def _time_launch(fn, device: int) -> float:
    """Median HIP-event seconds of one call of fn (WARMUP calls first, ROUNDS timed ones)."""
    return time_ms(fn, device, warmup=WARMUP, iters=1, rounds=ROUNDS) * 1e-3


def emulator(report, echo=print) -> dict:
    """Every microbenchmark on the emulator: records and instruction counts checked; no time."""
    kernels = {}
    for bench in mb.MICROBENCH_BENCHES:
        workgroups, iterations = mb.EMU_PLAN[bench]
        echo(f"emulator: microbenchmark {bench}")
        args = mb.inputs(bench, workgroups)
        stats = mb.launch_bench(bench, args, iterations, backend="emu")
        problems = mb.check(bench, args["out"], args, iterations) + count_problems(bench, stats, workgroups,
                                                                                     iterations)
        report.add(f"emu microbenchmark {bench}: results and instruction counts", not problems, "; ".join(problems))
        kernels[bench] = {"workgroups": workgroups, "iterations": [iterations], "correct": not problems}
    return {"measured": False, "where": "CPU emulator (results checked; no time: the emulator has no clock)",
            "kernels": kernels}


def count_problems(bench: str, stats: dict, workgroups: int, iterations: int) -> list[str]:
    """The emulator's dynamic WMMA / TRANS / LDS counts against the kernel's loop body x iterations x waves."""
    per = mb.ops_per_iteration(bench)
    n = mb.waves(workgroups) * iterations
    fill = 2 * mb.waves(workgroups) if bench in MICROBENCH_LDS_BENCHES else 0     # the LDS fill: two b128 stores per lane
    want = {"WMMA": per["WMMA"] * n, "TRANS": per["TRANS"] * n, "LDS": per["LDS"] * n + fill}
    return [f"{bench}: {k} ran {stats.get(k, 0)} wave-instructions, the loop body says {v}"
            for k, v in want.items() if stats.get(k, 0) != v]


def device_info(device: int) -> dict:
    """The GPU's name, arch and compute-unit count (torch's device properties: multi_processor_count is the CU
    count on ROCm)."""
    import torch
    p = torch.cuda.get_device_properties(device)
    return {"name": torch.cuda.get_device_name(device), "arch": getattr(p, "gcnArchName", "").split(":")[0],
            "cus": int(p.multi_processor_count)}


def gpu(report, device: int, echo=print) -> dict:
    """Every microbenchmark on gfx1201 device `device`: checked once, then timed at two iteration counts; the
    grids fill the device's own CUs."""
    import torch
    kernels, seconds, workgroups_of = {}, {}, {}
    dev = f"cuda:{device}"
    info = device_info(device)
    plan = mb.gpu_plan(info["cus"])
    clock_cycles = None
    for bench in mb.MICROBENCH_BENCHES:
        workgroups, n1, n2 = plan[bench]
        echo(f"gpu {device}: microbenchmark {bench}")
        args = mb.inputs(bench, workgroups, device=dev)
        check_iterations = mb.EMU_PLAN[bench][1]
        with torch.cuda.device(device):
            mb.launch_bench(bench, args, check_iterations, backend="gpu")
            torch.cuda.synchronize()
        problems = mb.check(bench, args["out"], args, check_iterations)
        report.add(f"gpu{device} microbenchmark {bench}: results", not problems, "; ".join(problems))
        t, cycles = [], []
        for n in (n1, n2):
            t.append(_time_launch(lambda n=n: mb.launch_bench(bench, args, n, backend="gpu"), device))
            if bench == "clock":     # the last timed launch's records: the median wave's shader-clock growth
                cycles.append(float(statistics.median(mb.clock_cycles(args["out"]).tolist())))
        per_iter = mb.per_iteration_seconds(t[0], t[1], n1, n2)
        ok = per_iter > 0
        report.add(f"gpu{device} microbenchmark {bench}: time grows with iterations", ok,
                   f"{t[0] * 1e3:.3f} ms at {n1}, {t[1] * 1e3:.3f} ms at {n2} iterations")
        kernels[bench] = {"workgroups": workgroups, "iterations": [n1, n2], "ms": [x * 1e3 for x in t],
                          "seconds_per_iteration": per_iter, "correct": not problems}
        if cycles:
            kernels[bench]["shader_cycles"] = cycles
            clock_cycles = (cycles[1] - cycles[0]) / (n2 - n1)
            report.add(f"gpu{device} microbenchmark clock: the shader clock grows with iterations", clock_cycles > 0,
                       f"{cycles[0]:.0f} at {n1}, {cycles[1]:.0f} at {n2} iterations")
        seconds[bench], workgroups_of[bench] = per_iter, workgroups
    out = {"measured": True, "where": f"gfx1201 device {device} ({info['name']}, {info['cus']} CUs), HIP events",
           "device": info, "kernels": kernels}
    if all(s > 0 for s in seconds.values()):
        out["derived"] = mb.derive(seconds, workgroups_of, info["cus"],
                                   clock_cycles if clock_cycles and clock_cycles > 0 else None)
    return out


def run(report, devices: list[int], echo=print) -> None:
    report.perf = gpu(report, devices[0], echo) if devices else emulator(report, echo)


def schedules(report, devices: list[int], echo=print) -> None:
    """The attention schedules as `sage-co tune` runs them (sage_co/tuning_run.py), into report.perf["schedules"]:
    with a gfx1201 timed on devices[0] and the choice stored for it; without one each checked on the emulator bit for
    bit against the model, nothing stored."""
    from . import tuning_run
    if devices:
        m = tuning_run.measure(devices[0], echo=echo)
        path = tuning_run.store(m)
        report.perf["schedules"] = {"measured": True, **m.as_dict(), "stored": str(path)}
        report.add(f"gpu{devices[0]} attention schedules timed, choice stored", True,
                   f"{m.choice!r} (geometric means {', '.join(f'{k} {v:.3f} ms' for k, v in m.scores.items())}); "
                   f"{path}")
    else:
        rows = tuning_run.check_emulator(echo)
        report.perf["schedules"] = {"measured": False, "shape": tuning_run.shape_text(tuning_run.EMU_SHAPE),
                                    "rows": rows}
        for r in rows:
            if r["ok"] is not None:
                report.add(f"emu attention schedule {r['schedule']} ({r['kernel']}): kernels bitwise equal, "
                           "within the model's bounds", r["ok"],
                           f"{r['symbol']}: rel L2 {r['rel_l2']:.1e} vs the model, "
                           f"{100 * r['different']:.3f} % of elements differ"
                           + (f", bitwise equal to {r['same_as']}" if r["same_as"] else ""))
    report.save()


def _schedules_markdown(sched: dict) -> list[str]:
    from . import tuning_run
    if not sched:
        return []
    lines = ["", "## Attention schedules (`--perf`, as `sage-co tune`)", ""]
    if not sched["measured"]:
        lines += [f"On the emulator at {sched['shape']}: per schedule the kernels bitwise equal to each other and "
                  "each within the model's bounds (docs/numerics.md §Kernel vs model); nothing timed, no choice "
                  "stored.", "", "| schedule | kernel | symbol | bitwise equal to | rel L2 vs model | checks |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['schedule']} | {r['kernel']} | {r['symbol'] or '-'} | {r.get('same_as') or '-'} | "
                  + (f"{r['rel_l2']:.1e} | {'pass' if r['ok'] else 'FAIL'} |" if r["ok"] is not None else
                     "- | not built |") for r in sched["rows"]]
        return lines
    shapes = sched["shapes"]
    ident = sched["identity"]
    lines += [f"Device {sched['device']} ({ident['name']}, {ident['gcn_arch_name']}), HIP-event "
              f"ms per attention launch. Rule: {tuning_run.RULE}. **Chosen: {sched['choice']}** (stored in "
              f"{sched['stored']}).", "", "| schedule | " + " | ".join(shapes) + " | geometric mean |",
              "|---|" + "---|" * (len(shapes) + 1)]
    for sc, per in sched["ms"].items():
        cells = [f"{per[sh]:.3f}" if per[sh] is not None else "not built" for sh in shapes]
        lines.append(f"| {sc} | " + " | ".join(cells) + f" | {sched['scores_ms'][sc]:.3f} |")
    return lines


def markdown(perf: dict) -> list[str]:
    if not perf:
        return []
    if "kernels" not in perf:   # only the schedules ran (the microbenchmarks failed before writing)
        return _schedules_markdown(perf.get("schedules", {}))
    lines = ["", "## Microbenchmarks (`--perf`)", "", f"**Where:** {perf['where']}", "",
             "| kernel | measures | workgroups | iterations | ms | s / iteration | correct |",
             "|---|---|---|---|---|---|---|"]
    for bench, k in perf["kernels"].items():
        ms = ", ".join(f"{x:.3f}" for x in k.get("ms", [])) or "not timed"
        spi = f"{k['seconds_per_iteration']:.3e}" if "seconds_per_iteration" in k else "-"
        lines.append(f"| {bench} | {WHAT[bench]} | {k['workgroups']} | {', '.join(map(str, k['iterations']))} | {ms} "
                     f"| {spi} | {'yes' if k['correct'] else 'NO'} |")
    d = perf.get("derived")
    if d:
        lines += ["", "Derived (feed this report to `python tools/perf_model.py --refit selftest.json`):", "",
                  "| figure | value |", "|---|---|",
                  f"| sustained clock under WMMA load ({'measured: shader clock / HIP events' if d['clock']['measured'] else 'INFERRED from 8 clk per WMMA: the clock kernel gave nothing'}) "
                  f"| {d['wmma']['sustained_clock_hz'] / 1e9:.3f} GHz |",
                  f"| clock inferred from the WMMA rate at 8 clk per iu8 WMMA (cross-check) "
                  f"| {d['wmma']['inferred_clock_hz'] / 1e9:.3f} GHz |",
                  f"| iu8 WMMA: SIMD clocks per op at that clock | {d['wmma']['clocks_per_wmma']:.2f} |",
                  f"| iu8 WMMA rate | {d['wmma']['ops_per_s'] / 1e12:.1f} TOPS |"]
        for bench, op in mb.TRANS_BENCHES.items():
            lines.append(f"| {op}: TRANS clocks per op | {d[bench]['clocks_per_op']:.2f} |")
        lines += [f"| VALU: issue clocks per op | {d['valu']['clocks_per_op']:.2f} |",
                  f"| VOPD: issue clocks per v_dual pair (1 dual issue pays, 2 it does not) "
                  f"| {d['vopd']['issue_clocks_per_pair']:.2f} |",
                  f"| TRANS overlap with VALU (1 overlaps, 0 adds) | {d['trans_valu']['overlap']:.2f} |"]
        for mix, unit in mb.OVERLAP_PAIRS.items():
            lines.append(f"| {unit.upper()} overlap with WMMA (1 co-issues, 0 adds) | {d[mix]['overlap']:.2f} |")
            lines.append(f"| {unit.upper()} alone: SIMD clocks per op | {d[mix]['unit_clocks_per_op']:.2f} |")
        lines += [f"| LDS b128 load rate (one CU's LDS half) | {d['lds']['bytes_per_clk']:.1f} B/clk |",
                  f"| LDS load-to-use latency | {d['lds_chain']['load_to_use_clk']:.1f} clk "
                  f"({d['lds_chain']['load_to_use_s'] * 1e9:.1f} ns) |",
                  f"| L2 -> CU bandwidth | {d['l2_stream']['bytes_per_clk']:.0f} B/clk "
                  f"({d['l2_stream']['bytes_per_s'] / 1e12:.2f} TB/s) |"]
    elif not perf["measured"]:
        lines += ["", "No time is reported: the emulator checks that every kernel computes the right results, "
                      "not how fast (run on a gfx1201 for the measured figures)."]
    return lines + _schedules_markdown(perf.get("schedules", {}))
