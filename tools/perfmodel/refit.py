"""Refit the model's parameters from a `sage-co selftest --perf` report measured on a gfx1201
(`python tools/perf_model.py --refit REPORT.json`; docs/performance.md §Microbenchmarks and refit).

The report's `perf.derived` section (sage_co/microbench.py `derive`) holds figures measured by the kernels of
asm_src/gfx1201_microbench.s. PARAMETER_MAP is the one table from those figures to hardware.Params fields (set by
name with dataclasses.replace); RULE_MAP says which simulator rule (simulate.Latencies) each co-issue measurement
confirms or contradicts. The re-stated kernel times (restate.our_kernel, MODELED) are printed with the current and
the refitted parameters side by side. Every figure printed is MODELED except the report's measured values.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields, replace
from pathlib import Path

from perfmodel.hardware import CALIBRATED, Params


class RefitError(ValueError):
    """A report that cannot be fitted on; the message names the field."""


@dataclass(frozen=True)
class ParamMapping:
    field: str                  # path under the report's perf.derived
    param: str                  # hardware.Params field it sets
    unit: str
    lo: float                   # plausible range of the measured value (outside: a broken run, refused)
    hi: float
    integer: bool = False       # the parameter is an integer number of clocks (rounded)


# The one mapping from measured figures to the model's parameters (adapt `param` when hardware.Params renames one).
PARAMETER_MAP = (
    ParamMapping("wmma.sustained_clock_hz", "clock_hz", "Hz", 0.3e9, 4.0e9),
    ParamMapping("lds_chain.load_to_use_clk", "lds_latency", "clk", 1.0, 4000.0, integer=True),
    ParamMapping("l2_stream.bytes_per_clk", "l2_bytes_per_clk", "B/clk", 1.0, 1.0e5),
)


@dataclass(frozen=True)
class RuleMapping:
    field: str                  # an overlap under perf.derived: 1 = co-issues with WMMA, 0 = the two add
    rule: str | None            # simulate.Latencies field the finding maps to (None: no knob in the model)
    model_overlap: float        # what the model assumes today
    assumption: str             # where the model states it


RULE_MAP = (
    RuleMapping("wmma_trans.overlap", "trans_overlaps_wmma", 0.0,
                "hardware.ASSUMPTIONS 'TRANS': the TRANS pipeline does not run under a WMMA"),
    RuleMapping("wmma_valu.overlap", None, 0.0,
                "hardware.ASSUMPTIONS 'WMMA vs VALU': WMMA and VALU issue cycles add on the SIMD's vector port"),
    RuleMapping("wmma_lds.overlap", None, 1.0,
                "hardware.ASSUMPTIONS 'scalar/memory issue': LDS issues on a second port, beside WMMA"),
)
OVERLAP_RANGE = (-0.5, 1.5)     # measurement noise around [0, 1]; beyond it the run is broken
COISSUE_THRESHOLD = 0.5         # overlap above this: the unit co-issues with WMMA

# The re-stated figures: (kernel, B, H, S, head dim), the rows of docs/performance.md §Re-stated figures.
FIGURE_SHAPES = (("asm", 1, 24, 1536, 128), ("asm", 1, 24, 4096, 128), ("hip", 1, 24, 4096, 128),
                 ("asm", 1, 24, 4096, 64))


def _get(perf: dict, path: str):
    node = perf
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise RefitError(f"perf.derived.{path}: missing from the report")
        node = node[part]
    return node


def _number(perf: dict, path: str, lo: float, hi: float, unit: str) -> float:
    value = _get(perf, path)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RefitError(f"perf.derived.{path} = {value!r}: expected a finite number ({unit})")
    if not lo <= value <= hi:
        raise RefitError(f"perf.derived.{path} = {value:g} {unit}: outside the plausible range [{lo:g}, {hi:g}]; "
                         "the run that produced it is not usable")
    return float(value)


def read_report(path: Path) -> dict:
    """The `perf.derived` section of a measured report; RefitError naming the field otherwise."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise RefitError(f"--refit {path}: cannot read it ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise RefitError(f"--refit {path}: not JSON ({exc})") from None
    perf = data.get("perf") if isinstance(data, dict) else None
    if not isinstance(perf, dict) or not perf:
        raise RefitError(f"--refit {path}: no 'perf' section; write one with `sage-co selftest --perf` on a gfx1201")
    if perf.get("measured") is not True:
        raise RefitError(f"perf.measured = {perf.get('measured')!r}: the microbenchmarks were not timed on a gfx1201 "
                         f"({perf.get('where', 'no device recorded')}); there is nothing to fit")
    for bench, k in (perf.get("kernels") or {}).items():
        if not isinstance(k, dict) or k.get("correct") is not True:
            raise RefitError(f"perf.kernels.{bench}.correct is not true: that kernel computed wrong results on the "
                             "GPU, so its time does not measure what it should")
    derived = perf.get("derived")
    if not isinstance(derived, dict):
        raise RefitError("perf.derived: missing from the report (a time did not grow with the iteration count?)")
    return derived


@dataclass(frozen=True)
class Change:
    mapping: ParamMapping
    measured: float
    old: float
    new: float


def refit_params(derived: dict, base: Params = CALIBRATED) -> tuple[Params, list[Change]]:
    names = {f.name for f in fields(Params)}
    changes, updates = [], {}
    for m in PARAMETER_MAP:
        if m.param not in names:
            raise RefitError(f"the model has no parameter {m.param!r} (hardware.Params has {sorted(names)}); "
                             "update PARAMETER_MAP in tools/perfmodel/refit.py")
        value = _number(derived, m.field, m.lo, m.hi, m.unit)
        new = round(value) if m.integer else value
        updates[m.param] = new
        changes.append(Change(m, value, getattr(base, m.param), new))
    return replace(base, **updates), changes


@dataclass(frozen=True)
class Finding:
    mapping: RuleMapping
    measured: float
    coissues: bool
    agrees: bool                # the measurement agrees with the model's rule


def rule_findings(derived: dict) -> list[Finding]:
    out = []
    for m in RULE_MAP:
        v = _number(derived, m.field, *OVERLAP_RANGE, "overlap fraction")
        co = v > COISSUE_THRESHOLD
        out.append(Finding(m, v, co, co == (m.model_overlap > COISSUE_THRESHOLD)))
    return out


def figures(old: Params, new: Params, shapes=FIGURE_SHAPES) -> list[dict]:
    """Each shape's kernel time (MODELED) with the old and the refitted parameters."""
    from perfmodel.restate import our_kernel
    rows = []
    for kernel, B, H, S, D in shapes:
        a = our_kernel(kernel, B, H, S, old, head_dim=D)
        b = our_kernel(kernel, B, H, S, new, head_dim=D)
        rows.append({"kernel": kernel, "B": B, "H": H, "S": S, "head_dim": D, "old_us": a.time_us,
                     "new_us": b.time_us, "old_binding": a.binding, "new_binding": b.binding})
    return rows


RULE_KERNELS = ("asm", "hip")   # kernels re-stated under a contradicted rule (whatif.py's S = 4096 launch)


def rule_figures(found: list[Finding], kernels=RULE_KERNELS) -> list[dict]:
    """For each contradicted rule the model has a knob for: the S = 4096 kernel time (MODELED, current parameters)
    under the model's rule and under the measured one (whatif.trimmed with no VALU removed, simulator rules
    changed: the same launch as the --what-if table)."""
    from perfmodel.whatif import B, H, S, trimmed, valu_per_score
    rows = []
    for f in found:
        if f.agrees or f.mapping.rule is None:
            continue
        for kernel in kernels:
            now = valu_per_score(kernel)[0]
            model = trimmed(kernel, now)
            measured = trimmed(kernel, now, {f.mapping.rule: f.coissues})
            rows.append({"rule": f.mapping.rule, "value": f.coissues, "kernel": kernel, "B": B, "H": H, "S": S,
                         "model_rule_us": model.time_us, "measured_rule_us": measured.time_us})
    return rows


def refit(path: Path, shapes=FIGURE_SHAPES, rule_kernels=RULE_KERNELS) -> dict:
    derived = read_report(path)
    params, changes = refit_params(derived)
    found = rule_findings(derived)
    return {"params": params, "changes": changes, "findings": found, "figures": figures(CALIBRATED, params, shapes),
            "rule_figures": rule_figures(found, rule_kernels)}


def _fmt(m: ParamMapping, v: float) -> str:
    return f"{v / 1e9:.3f} GHz" if m.unit == "Hz" else f"{v:g} {m.unit}"


def print_refit(path: Path, as_json: bool = False, shapes=FIGURE_SHAPES, rule_kernels=RULE_KERNELS) -> int:
    r = refit(path, shapes, rule_kernels)
    if as_json:
        print(json.dumps({
            "params": {c.mapping.param: {"field": c.mapping.field, "measured": c.measured, "old": c.old, "new": c.new}
                       for c in r["changes"]},
            "rules": [{"field": f.mapping.field, "rule": f.mapping.rule, "measured_overlap": f.measured,
                       "model_overlap": f.mapping.model_overlap, "agrees": f.agrees} for f in r["findings"]],
            "figures": r["figures"], "rule_figures": r["rule_figures"], "modeled": True}, indent=1))
        return 0
    print(f"Refit from {path} (measured on a gfx1201 by `sage-co selftest --perf`)")
    print("  parameter (hardware.Params)   report field (perf.derived.)     old -> new")
    for c in r["changes"]:
        print(f"  {c.mapping.param:<29} {c.mapping.field:<32} {_fmt(c.mapping, c.old)} -> {_fmt(c.mapping, c.new)}")
    print("  co-issue with WMMA (overlap: 1 co-issues, 0 adds; the model's rule)")
    for f in r["findings"]:
        verdict = "agrees with" if f.agrees else "CONTRADICTS"
        knob = f"simulate.Latencies.{f.mapping.rule}" if f.mapping.rule else "no model knob"
        print(f"  {f.mapping.field:<22} measured {f.measured:.2f}, model {f.mapping.model_overlap:.0f}: {verdict} "
              f"{f.mapping.assumption} ({knob})")
    print("Re-stated kernel times (MODELED; the co-issue rules above are the model's, not refitted)")
    for row in r["figures"]:
        change = 100 * (row["new_us"] / row["old_us"] - 1)
        print(f"  {row['kernel']} B={row['B']} H={row['H']} S={row['S']} D={row['head_dim']}: "
              f"{row['old_us']:.1f} us -> {row['new_us']:.1f} us ({change:+.1f} %), binding {row['new_binding']}")
    if r["rule_figures"]:
        print("Under the measured co-issue rule (MODELED, current parameters; wire the rule into the model to keep it)")
    for row in r["rule_figures"]:
        print(f"  {row['kernel']} B={row['B']} H={row['H']} S={row['S']}, {row['rule']}={row['value']}: "
              f"{row['model_rule_us']:.1f} us with the model's rule -> {row['measured_rule_us']:.1f} us")
    return 0
