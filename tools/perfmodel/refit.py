"""Refit the model's parameters from a `sage-co selftest --perf` report measured on a gfx1201
(`python tools/perf_model.py --refit REPORT.json`; docs/performance.md §Microbenchmarks and refit).

The report's `perf.derived` section (sage_co/microbench.py `derive`) holds figures measured by the kernels of
asm_src/gfx1201_microbench.s. PARAMETER_MAP is the one table from those figures to hardware.Params fields; RULE_MAP
maps each co-issue overlap onto the Params knob of that rule (valu_coissue_wmma, trans_coissue_wmma), or states the
rule it checks where the model has no knob (LDS beside WMMA). Everything is set by name with Params.override, so the
re-stated kernel times (restate.our_kernel, MODELED) run under the measured figures and the measured rules; they are
printed with the current and the refitted parameters side by side. Every figure printed is MODELED except the
report's measured values.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
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
    ParamMapping("trans.clocks_per_op", "trans_clocks", "clk", 0.5, 64.0, integer=True),
    ParamMapping("vopd.issue_clocks_per_pair", "vopd_issue_clocks", "clk", 0.5, 8.0, integer=True),
    ParamMapping("lds.bytes_per_clk", "lds_bytes_per_clk", "B/clk", 1.0, 1024.0),
    ParamMapping("lds_chain.load_to_use_clk", "lds_latency", "clk", 1.0, 4000.0, integer=True),
    ParamMapping("l2_stream.bytes_per_clk", "l2_bytes_per_clk", "B/clk", 1.0, 1.0e5),
)


@dataclass(frozen=True)
class RuleMapping:
    field: str                  # an overlap under perf.derived: 1 = co-issues with WMMA, 0 = the two add
    param: str | None           # hardware.Params knob the measured rule sets (None: the model has no knob)
    fixed_rule: bool | None     # without a knob: the rule the model always applies (True: co-issues)
    assumption: str             # where the model states the rule


RULE_MAP = (
    RuleMapping("wmma_trans.overlap", "trans_coissue_wmma", None,
                "hardware.ASSUMPTIONS 'TRANS': whether the TRANS pipeline runs under a WMMA"),
    RuleMapping("wmma_valu.overlap", "valu_coissue_wmma", None,
                "hardware.ASSUMPTIONS 'WMMA vs VALU': whether VALU issues while a WMMA holds the vector port"),
    RuleMapping("trans_valu.overlap", "trans_overlaps_valu", None,
                "hardware.ASSUMPTIONS 'TRANS': whether other VALU issues while the TRANS pipeline runs"),
    RuleMapping("wmma_lds.overlap", None, True,
                "hardware.ASSUMPTIONS 'scalar/memory issue': LDS issues on a second port, beside WMMA"),
)
OVERLAP_RANGE = (-0.5, 1.5)     # measurement noise around [0, 1]; beyond it the run is broken
# The knobs are booleans: an overlap within a quarter of an end sets that end (>= 0.75: True, the unit co-issues;
# <= 0.25: False, the two add). In between (a partial overlap the model cannot express) the knob keeps its value
# and the re-stated times are also given with every such knob at True and at False, which bracket them.
COISSUE_AT_LEAST, ADDS_AT_MOST = 0.75, 0.25

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


TARGET_ARCH = "gfx1201"           # the model's target (hardware.py: the R9700's figures)


def read_report(path: Path) -> dict:
    """The `perf.derived` section of a measured report; RefitError naming the field otherwise. A report of another
    GPU than the model's target (arch, or CU count: hardware.CUS) is refused -- its clock and rates describe
    another chip, whose time the model's grid arithmetic would misstate."""
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
    from perfmodel.hardware import CUS
    dev = perf.get("device")
    if not isinstance(dev, dict):
        raise RefitError("perf.device: missing from the report (its arch and CU count are needed; re-run "
                         "`sage-co selftest --perf`)")
    if dev.get("arch") != TARGET_ARCH:
        raise RefitError(f"perf.device.arch = {dev.get('arch')!r}: the model's target is {TARGET_ARCH}")
    if dev.get("cus") != CUS:
        raise RefitError(f"perf.device.cus = {dev.get('cus')!r}: the model's target (the R9700) has {CUS} CUs; a "
                         "report of a board with another CU count cannot set its parameters")
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
    """The numeric parameters of PARAMETER_MAP set from the report (the co-issue knobs: rule_findings)."""
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
    return base.override(**updates), changes


@dataclass(frozen=True)
class Finding:
    mapping: RuleMapping
    measured: float
    coissues: bool | None       # the measured rule: True co-issues, False adds, None partial (between the bands)
    model: bool                 # the model's rule before the refit (the knob's value, or the fixed rule)

    @property
    def verdict(self) -> str:
        if self.coissues is None:
            return "PARTIAL"
        return "agrees with" if self.coissues == self.model else "CONTRADICTS"

    @property
    def new(self) -> bool:
        """The knob's value after the refit (a partial overlap keeps the model's)."""
        return self.model if self.coissues is None else self.coissues


def classify(overlap: float) -> bool | None:
    if overlap >= COISSUE_AT_LEAST:
        return True
    if overlap <= ADDS_AT_MOST:
        return False
    return None


def rule_findings(derived: dict, base: Params = CALIBRATED) -> list[Finding]:
    names = {f.name for f in fields(Params)}
    out = []
    for m in RULE_MAP:
        if m.param is not None and m.param not in names:
            raise RefitError(f"the model has no parameter {m.param!r} (hardware.Params has {sorted(names)}); "
                             "update RULE_MAP in tools/perfmodel/refit.py")
        v = _number(derived, m.field, *OVERLAP_RANGE, "overlap fraction")
        out.append(Finding(m, v, classify(v), getattr(base, m.param) if m.param else m.fixed_rule))
    return out


def apply_rules(params: Params, found: list[Finding]) -> Params:
    """params with every co-issue knob set to its measured rule."""
    return params.override(**{f.mapping.param: f.new for f in found if f.mapping.param})


def bracket(params: Params, found: list[Finding]) -> dict[str, Params] | None:
    """For partial overlaps: params with all those knobs True and all False (None when no overlap is partial)."""
    partial = [f.mapping.param for f in found if f.mapping.param and f.coissues is None]
    if not partial:
        return None
    return {str(v): params.override(**dict.fromkeys(partial, v)) for v in (True, False)}


def figures(old: Params, new: Params, shapes=FIGURE_SHAPES, brackets: dict[str, Params] | None = None) -> list[dict]:
    """Each shape's kernel time (MODELED) with the old and the refitted parameters (and the partial-overlap
    bracket's)."""
    from perfmodel.restate import our_kernel
    rows = []
    for kernel, B, H, S, D in shapes:
        a = our_kernel(kernel, B, H, S, old, head_dim=D)
        b = our_kernel(kernel, B, H, S, new, head_dim=D)
        row = {"kernel": kernel, "B": B, "H": H, "S": S, "head_dim": D, "old_us": a.time_us, "new_us": b.time_us,
               "old_binding": a.binding, "new_binding": b.binding}
        if brackets:
            row["bracket_us"] = {k: our_kernel(kernel, B, H, S, p, head_dim=D).time_us for k, p in brackets.items()}
        rows.append(row)
    return rows


def refit(path: Path, shapes=FIGURE_SHAPES, base: Params = CALIBRATED) -> dict:
    derived = read_report(path)
    params, changes = refit_params(derived, base)
    found = rule_findings(derived, base)
    params = apply_rules(params, found)
    return {"params": params, "changes": changes, "findings": found, "other_trans": other_trans(derived),
            "figures": figures(base, params, shapes, bracket(params, found))}


def other_trans(derived: dict) -> dict[str, float]:
    """TRANS clocks per op of v_log_f32 / v_rcp_f32 (reported; the model's one TRANS rate is v_exp_f32's)."""
    return {b: derived[b]["clocks_per_op"] for b in ("trans_log", "trans_rcp")
            if isinstance(derived.get(b), dict) and "clocks_per_op" in derived[b]}


def _fmt(m: ParamMapping, v: float) -> str:
    return f"{v / 1e9:.3f} GHz" if m.unit == "Hz" else f"{v:g} {m.unit}"


def _status(param: str) -> str:
    return next(f.metadata["status"] for f in fields(Params) if f.name == param)


def print_refit(path: Path, as_json: bool = False, shapes=FIGURE_SHAPES) -> int:
    from perfmodel.hypotheses import RuleSet
    r = refit(path, shapes)
    knobs = [f for f in r["findings"] if f.mapping.param]
    if as_json:
        params = {c.mapping.param: {"field": c.mapping.field, "measured": c.measured, "old": c.old, "new": c.new}
                  for c in r["changes"]}
        params.update({f.mapping.param: {"field": f.mapping.field, "measured": f.measured, "old": f.model,
                                         "new": f.new} for f in knobs})
        print(json.dumps({
            "params": params,
            "rules": [{"field": f.mapping.field, "param": f.mapping.param, "measured_overlap": f.measured,
                       "measured_rule": f.coissues, "model_rule": f.model, "verdict": f.verdict.split()[0].lower()}
                      for f in r["findings"]],
            "other_trans": r["other_trans"], "rule_set": RuleSet.of(r["params"]).label,
            "figures": r["figures"], "modeled": True}, indent=1))
        return 0
    print(f"Refit from {path} (measured on a gfx1201 by `sage-co selftest --perf`)")
    print("  parameter (hardware.Params)   report field (perf.derived.)     old -> new")
    for c in r["changes"]:
        print(f"  {c.mapping.param:<29} {c.mapping.field:<32} {_fmt(c.mapping, c.old)} -> {_fmt(c.mapping, c.new)} "
              f"(was {_status(c.mapping.param)})")
    for f in knobs:
        print(f"  {f.mapping.param:<29} {f.mapping.field:<32} {f.model} -> {f.new} (was {_status(f.mapping.param)})")
    print(f"  co-issue with WMMA (overlap: 1 co-issues, 0 adds; >= {COISSUE_AT_LEAST:g} sets the knob True, "
          f"<= {ADDS_AT_MOST:g} False, in between it keeps its value)")
    for f in r["findings"]:
        rule = {True: "co-issues", False: "adds", None: "partial"}[f.coissues]
        knob = f"Params.{f.mapping.param}" if f.mapping.param else "no model knob: the model's rule stays"
        print(f"  {f.mapping.field:<22} measured {f.measured:.2f} ({rule}), model {'co-issues' if f.model else 'adds'}: "
              f"{f.verdict} {f.mapping.assumption} ({knob})")
    for b, v in r["other_trans"].items():
        print(f"  {b}.clocks_per_op {v:.2f} (reported; the model's TRANS rate is v_exp_f32's, trans.clocks_per_op)")
    from perfmodel.hypotheses import RuleSet
    print(f"  rule set now: {RuleSet.of(r['params']).label} (its row of `python tools/perf_model.py --hypotheses`)")
    print("Re-stated kernel times (MODELED) with the current -> the refitted parameters and co-issue rules")
    for row in r["figures"]:
        change = 100 * (row["new_us"] / row["old_us"] - 1)
        line = (f"  {row['kernel']} B={row['B']} H={row['H']} S={row['S']} D={row['head_dim']}: "
                f"{row['old_us']:.1f} us -> {row['new_us']:.1f} us ({change:+.1f} %), binding {row['new_binding']}")
        if "bracket_us" in row:
            b = row["bracket_us"]
            line += f"; partial overlaps: {b['True']:.1f} us (co-issue) .. {b['False']:.1f} us (add)"
        print(line)
    return 0
