"""The report of the shipped attention kernels (HIP and asm side by side): the issue-bound and latency-aware per-tile
tables at boost clock (optimistic bounds), then the calibrated model (restate.py). Every figure is MODELED."""
from __future__ import annotations

from pathlib import Path

from perfmodel import ROOT
from perfmodel.emulated import EMU_SEQ, emulator_mix
from perfmodel.hardware import ASSUMPTIONS, PEAK_OPS
from perfmodel.isa import CLASSES
from perfmodel.issue import ShapeResult, model_shape, sensitivity, tile_cost
from perfmodel.simulate import CATEGORIES, LATENCY_TABLE, latency_sensitivity, simulate_kernel, steady_paths
from perfmodel.attention import attention_symbol
from perfmodel.stream import KEY_TILE, analyze

SHAPES = [(1, h, s) for h in (5, 24) for s in (4096, 16384, 75600)]
HSACO = ROOT / "hsaco" / "gfx1201"
HIP_CO = HSACO / "gfx1201_sage_attention_hip.co"
ASM_CO = HSACO / "gfx1201_sage_attention_asm.co"


def load_kernels(static_only: bool, asm_co: Path | None, seqs=EMU_SEQ):
    """[(kernel, KernelModel | None, why-missing)]; fills km.mix from the emulator when it can."""
    out = []
    for kernel, path in (("hip", HIP_CO), ("asm", asm_co or ASM_CO)):
        if not path.exists():
            out.append((kernel, None, f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} "
                                       "is not shipped yet"))
            continue
        # the shipped code objects may hold one symbol per (head_dim, out_dtype): the model describes D=128, bf16
        symbol = {HIP_CO: "hip", ASM_CO: "asm"}.get(path)
        symbol = attention_symbol(symbol) if symbol else None
        km = analyze(kernel, path, symbol)
        if static_only:
            km.notes.append("static counts (--static): emulator not run")
        elif asm_co is not None and kernel == "asm":
            km.notes.append("static counts: --asm-co code object is not launched through the op registry")
        else:
            try:
                km.mix, km.executed = emulator_mix(km, kernel, seqs)
            except Exception as e:    # the fallback the model promises: say why and use static counts
                km.notes.append(f"static counts: emulator run failed ({type(e).__name__}: {e})")
        out.append((kernel, km, ""))
    return out


def fmt(x: float, nd: int = 1) -> str:
    return f"{x:,.{nd}f}"


def report(kernels, console=None, latency_sensitivity_table: bool = True) -> dict:
    from rich.console import Console
    from rich.table import Table
    console = console or Console(width=140)
    present = [(v, km) for v, km, _ in kernels if km is not None]
    console.rule("[bold]sage-co attention performance MODEL (no RDNA4 GPU: every figure is modeled)")

    t = Table(title="Model assumptions (docs/performance.md)", show_lines=False)
    for col in ("item", "assumption", "source"):
        t.add_column(col, overflow="fold")
    for row in ASSUMPTIONS:
        t.add_row(*row)
    console.print(t)

    for v, km, why in kernels:
        if km is None:
            console.print(f"[yellow]{v}: {why}; its column is left out (rerun when it ships).")

    t = Table(title="Main loop per key tile of one wave (modeled inputs)")
    t.add_column("")
    for v, km in present:
        t.add_column(f"{v}: {km.path.name}", justify="right")
    rows = [
        ("kernel symbol", lambda km: km.symbol),
        ("disassembler", lambda km: km.disassembler),
        ("loop range", lambda km: f"0x{km.loop.head:x}-0x{km.loop.tail:x} ({km.loop_insts} insts, "
                                  f"{len(km.loop.backedges)} back-edges)"),
        ("keys per loop iteration (from WMMA work)", lambda km: f"{km.keys_per_iter} = {km.tiles_per_iter} x "
                                                                f"{KEY_TILE}-key tile; figures below per tile"),
        ("counts used", lambda km: "dynamic (emulator)" if km.mix is not km.static else "static (longest path)"),
    ]
    for c in CLASSES:
        rows.append((f"{c} per tile", lambda km, c=c: fmt(getattr(km.mix, c)) +
                     (f"  (static {fmt(getattr(km.static, c), 0)})" if km.mix is not km.static else "")))
    rows += [
        ("  of VALU: VOPD pairs", lambda km: fmt(km.mix.vopd)),
        ("LDS bytes per tile", lambda km: fmt(km.mix.lds_bytes, 0)),
        ("VMEM load bytes per tile", lambda km: fmt(km.mix.load_bytes, 0)),
        ("VGPRs -> waves/SIMD", lambda km: f"{km.vgprs} -> {km.waves_vgpr}"),
        ("LDS/WG -> waves/SIMD", lambda km: f"{km.lds_bytes} B -> {km.waves_lds}"),
        ("occupancy used (waves/SIMD)", lambda km: str(km.waves)),
        ("prologue+epilogue, modeled cycles/wave", lambda km: fmt(tile_cost(km.fixed, km.waves).cycles, 0)),
    ]
    for name, f in rows:
        t.add_row(name, *[f(km) for _, km in present])
    console.print(t)

    t = Table(title="Modeled cycles per key tile per SIMD, by resource (steady state, DRAM excluded)")
    t.add_column("resource")
    for v, _ in present:
        t.add_column(v, justify="right")
    costs = {v: tile_cost(km.mix, km.waves) for v, km in present}
    for name, f in [("WMMA", lambda c: c.wmma), ("VALU issue (incl. TRANS issue)", lambda c: c.valu),
                    ("TRANS pipeline (4 x TRANS)", lambda c: c.trans),
                    ("vector port = WMMA + max(VALU, TRANS)", lambda c: c.vector),
                    ("scalar/memory issue", lambda c: c.scalar), ("LDS (64 B/clk/SIMD)", lambda c: c.lds),
                    ("one wave's stream / waves", lambda c: c.stream / c.waves),
                    ("modeled cycles per tile", lambda c: c.cycles)]:
        t.add_row(name, *[fmt(f(costs[v])) for v, _ in present])
    t.add_row("binding resource", *[costs[v].binding for v, _ in present])
    t.add_row("steady-state % of WMMA peak", *[fmt(100 * costs[v].wmma / costs[v].cycles) +
                                                (" (8-bit)" if km.mix.wmma_cycles == 8 * km.mix.WMMA else "")
                                                for v, km in present])
    console.print(t)

    t = Table(title="Sensitivity of the steady state to the shakiest assumptions (modeled cycles/tile, % of peak)")
    t.add_column("variant of the model")
    for v, _ in present:
        t.add_column(v, justify="right")
    sens = {v: sensitivity(km) for v, km in present}
    for i, (name, _) in enumerate(sens[present[0][0]]):
        t.add_row(name, *[f"{fmt(sens[v][i][1].cycles)} ({fmt(100 * sens[v][i][1].wmma / sens[v][i][1].cycles)} %)"
                          f" {sens[v][i][1].binding}" for v, _ in present])
    console.print(t)

    # ---- latency-aware mode
    t = Table(title="Latency-aware mode: latencies and rules (every ASSUMED value is a choice, not a measurement)")
    for col in ("item", "value / rule", "source"):
        t.add_column(col, overflow="fold")
    for row in LATENCY_TABLE:
        t.add_row(*row)
    console.print(t)
    sims = {v: simulate_kernel(km) for v, km in present}
    t = Table(title="Modeled cycles per 64-key tile per SIMD: issue-bound (optimistic bound) vs latency-aware "
                    "(simulated; share of the SIMD's clocks by what it does or waits for)")
    t.add_column("")
    for v, _ in present:
        t.add_column(v, justify="right")
    t.add_row("simulated stream", *[steady_paths(km, sims[v].iterations)[2] for v, km in present])
    t.add_row("waves per SIMD / iterations per wave", *[f"{sims[v].waves} / {sims[v].iterations}" for v, _ in present])
    t.add_row("issue-bound cycles/tile (binding)", *[f"{fmt(costs[v].cycles)} ({costs[v].binding})"
                                                     for v, _ in present])
    t.add_row("latency-aware cycles/tile (binding)", *[f"{fmt(sims[v].cycles_per_tile)} ({sims[v].binding})"
                                                       for v, _ in present])
    t.add_row("latency-aware / issue-bound", *[f"{sims[v].cycles_per_tile / costs[v].cycles:.3f}" for v, _ in present])
    t.add_row("latency-aware steady-state % of peak", *[fmt(100 * costs[v].wmma / sims[v].cycles_per_tile)
                                                        for v, _ in present])
    for cat in CATEGORIES:
        t.add_row(f"  {cat}", *[f"{100 * sims[v].breakdown[cat]:.1f} %" for v, _ in present])
    console.print(t)
    t = Table(title="Sensitivity of the latency-aware steady state (modeled cycles per 64-key tile, % of peak)")
    t.add_column("variant")
    for v, _ in present:
        t.add_column(v, justify="right")
    lsens = {v: latency_sensitivity(km) if latency_sensitivity_table else [] for v, km in present}
    for name, _ in max(lsens.values(), key=len):
        cells = []
        for v, _ in present:
            r = dict(lsens[v]).get(name)
            cells.append(f"{fmt(r.cycles_per_tile)} ({fmt(100 * costs[v].wmma / r.cycles_per_tile)} %) {r.binding}"
                         if r else "-")
        t.add_row(name, *cells)
    if latency_sensitivity_table:
        console.print(t)

    results: dict[str, list[ShapeResult]] = {}
    lresults: dict[str, list[ShapeResult]] = {}
    for mode, store in (("issue-bound", results), ("latency-aware", lresults)):
        t = Table(title=f"Modeled speed, {mode} mode, B=1 (TFLOPS = 4*B*H*S^2*128 / time; peak "
                        f"{PEAK_OPS / 1e12:.1f} TOPS INT8/FP8)")
        t.add_column("H", justify="right")
        t.add_column("S", justify="right")
        for v, _ in present:
            for col in ("cyc/tile", "binding", "TFLOPS", "% peak"):
                t.add_column(f"{v} {col} (modeled)", justify="right")
        if len(present) == 2:
            t.add_column("asm / hip", justify="right")
        for B, H, S in SHAPES:
            cells = []
            for v, km in present:
                r = model_shape(km, B, H, S, sim=sims[v] if store is lresults else None)
                store.setdefault(v, []).append(r)
                cells += [fmt(r.tile.cycles), r.tile.binding.replace("latency-aware: ", ""), fmt(r.tflops),
                          fmt(r.pct_peak)]
            if len(present) == 2:
                cells.append(f"{store['asm'][-1].tflops / store['hip'][-1].tflops:.2f}x")
            t.add_row(str(H), str(S), *cells)
        console.print(t)
    for v, km in present:
        r = results[v]
        console.print(f"{v}: DRAM time share (modeled) {max(x.tile.dram / x.tile.cycles for x in r) * 100:.1f} % "
                      f"at most; L2/IC->CU load demand {min(x.l2_tbps for x in r):.2f}-{max(x.l2_tbps for x in r):.2f} "
                      f"TB/s (not bounded by the model). Notes: {'; '.join(km.notes) or 'none'}")


    if "hip" in costs:
        h, hk = costs["hip"], dict(present)["hip"]
        need = h.cycles / 1.5
        floor = sensitivity(hk)[-1][1]
        console.print(f"1.5x the HIP kernel (modeled) needs <= {need:.0f} cycles per {KEY_TILE}-key tile, i.e. "
                      f"<= {need - h.wmma:.0f} cycles beside the {h.wmma:.0f} WMMA cycles. The HIP loop's "
                      f"{hk.mix.TRANS:.0f} TRANS ops alone cost {h.trans:.0f} (chosen assumption) or {hk.mix.TRANS:.0f} "
                      f"issue cycles (if TRANS overlapped WMMA); floor of this loop {floor.cycles:.0f} cycles = "
                      f"{h.cycles / floor.cycles:.2f}x HIP at most, unless the TRANS count itself drops.")
    if len({km.mix is km.static for _, km in present}) > 1:
        console.print("[yellow]The columns use different counts (dynamic vs static longest path): the static one "
                      "counts every optional block; rerun with --static to compare like with like.")
    if "asm" in results and "hip" in results:
        for mode, res, cyc, bind in (("issue-bound", results, costs["asm"].cycles, costs["asm"].binding),
                                     ("latency-aware", lresults, sims["asm"].cycles_per_tile, sims["asm"].binding)):
            speedup = min(a.tflops / h.tflops for a, h in zip(res["asm"], res["hip"]))
            steady = 100 * costs["asm"].wmma / cyc
            ok1, ok2 = speedup >= 1.5, steady >= 55
            console.print(f"Goal ({mode}, modeled): asm >= 1.5x HIP: {'met' if ok1 else 'NOT met'} (min "
                          f"{speedup:.2f}x); >= 55 % of peak in steady state: {'met' if ok2 else 'NOT met'} "
                          f"({steady:.1f} %). asm binding resource: {bind}.")
    else:
        console.print("Goal (asm >= 1.5x HIP, >= 55 % of peak): cannot be judged yet: the asm kernel is not "
                      "shipped. HIP steady state: "
                      f"{100 * costs['hip'].wmma / costs['hip'].cycles:.1f} % of peak (modeled).")
    console.print("These per-tile figures are bounds at the 2.92 GHz boost clock. The calibrated model (tails, LDS bank "
                  "conflicts, calibrated clock) and the current goals: python tools/perf_model.py --restate / --what-if "
                  "(docs/performance.md).")
    return dict(results=results, costs=costs, latency_results=lresults, sims=sims, latency_sensitivity=lsens)


