"""Which rule set is the hardware's? The shipped default attention kernel under every plausible value of the rules
that decide its speed, and which lever would pay under each (`python tools/perf_model.py --hypotheses [--json]`;
docs/performance.md §Hypotheses). Every figure is MODELED.

The rules (hardware.Params knobs; the microbenchmark that measures each, asm_src/gfx1201_microbench.s):
    trans_clocks          TRANS pipeline clocks per v_exp_f32: 4, 6 or 8          (`trans`, `trans_log`, `trans_rcp`)
    trans_coissue_wmma    the TRANS pipeline runs under a WMMA: no / yes           (`wmma_trans`)
    valu_coissue_wmma     VALU issues while a WMMA holds the matrix unit: no / yes (`wmma_valu`)
    vopd_issue_clocks     a VOPD v_dual_* pair costs 1 or 2 vector issues          (`vopd`)

The API (reusable: another column is one more call of `evaluate` with another kernel or schedule):
    rule_sets()                      the 24 RuleSets, the model's current rules first
    RuleSet.params(base)             hardware.Params with those rules (every other parameter from `base`)
    LEVERS                           the schedule changes weighed (Lever: name, what, transform(kernel))
    modeled_us(kernel, S, params, transform=None)   one launch, B=1 H=24 D=128 (restate.our_kernel), MODELED
    evaluate(rules, kernel="asm", shapes=SHAPES, levers=LEVERS, model=modeled_us) -> dict
        {"rules": {...}, "label", "kernel", "us": {S: t}, "levers": {name: {S: t}}, "gain": {name: {S: fraction}},
         "pays": [lever names whose gain at every shape is >= PAYS_AT]}
    table(rules=None, kernel="asm", ...) -> [evaluate(r, ...) for r in rules or rule_sets()]
    `model` is any callable (kernel, S, params, transform) -> microseconds: a schedule that is not a shipped kernel
    passes its own.
"""
from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass
from typing import Callable

from perfmodel.hardware import CALIBRATED, Params

B, H, D = 1, 24, 128
SHAPES = (1536, 4096)                       # S (= S_q = S_kv) of the table's columns
PAYS_AT = 0.02                              # a lever "pays" when it saves >= 2 % (modeled) at every shape
TRANS_CLOCKS = (4, 6, 8)
YES_NO = (False, True)
VOPD_ISSUES = (1, 2)


@dataclass(frozen=True)
class RuleSet:
    """One combination of the speed-deciding rules (the Params knob of each: module docstring)."""
    trans_clocks: int
    trans_under_wmma: bool
    valu_under_wmma: bool
    vopd_issues: int

    def params(self, base: Params = CALIBRATED) -> Params:
        return base.override(trans_clocks=self.trans_clocks, trans_coissue_wmma=self.trans_under_wmma,
                             valu_coissue_wmma=self.valu_under_wmma, vopd_issue_clocks=self.vopd_issues)

    @classmethod
    def of(cls, params: Params) -> "RuleSet":
        """The rule set a parameter set applies (e.g. the refitted one)."""
        return cls(params.trans_clocks, params.trans_coissue_wmma, params.valu_coissue_wmma, params.vopd_issue_clocks)

    @property
    def label(self) -> str:
        yn = {False: "no", True: "yes"}
        return (f"TRANS {self.trans_clocks} clk, TRANS under WMMA {yn[self.trans_under_wmma]}, VALU under WMMA "
                f"{yn[self.valu_under_wmma]}, VOPD {self.vopd_issues} issue{'s' if self.vopd_issues > 1 else ''}")


def rule_sets() -> list[RuleSet]:
    """Every combination of TRANS_CLOCKS x TRANS under WMMA x VALU under WMMA x VOPD_ISSUES; the model's current
    rules (hardware.CALIBRATED) first."""
    current = RuleSet.of(CALIBRATED)
    rest = [RuleSet(*c) for c in itertools.product(TRANS_CLOCKS, YES_NO, YES_NO, VOPD_ISSUES)]
    return [current] + [r for r in rest if r != current]


@dataclass(frozen=True)
class Lever:
    name: str
    what: str
    transform: Callable[[str], Callable]    # kernel -> a what-if on the decoded loop streams (whatif.py)


def _exp_emulation(kernel: str):
    from perfmodel.whatif import emulate_exp
    return emulate_exp(0.25, 3)


def _valu_trim(kernel: str):
    from perfmodel.whatif import drop_valu, valu_per_score
    now, _ = valu_per_score(kernel)
    return drop_valu(1.0 / now)             # one plain VALU issue fewer per score VGPR


LEVERS = (
    Lever("exp2 on the VALU", "a quarter of the loop's v_exp_f32 emulated by 3 dependent VALU issues (FA4 "
          "ex2_emulation_2 style; whatif.emulate_exp)", _exp_emulation),
    Lever("VALU trim", "one plain VALU issue fewer per score VGPR (whatif.drop_valu)", _valu_trim),
)


def modeled_us(kernel: str, S: int, params: Params, transform=None) -> float:
    """The shipped `kernel` at B=1, H=24, D=128, S_q = S_kv = S under `params` (restate.our_kernel), MODELED."""
    from perfmodel.restate import our_kernel
    return our_kernel(kernel, B, H, S, params, head_dim=D, transform=transform).time_us


def evaluate(rules: RuleSet, kernel: str = "asm", shapes=SHAPES, levers=LEVERS, model=modeled_us,
             base: Params = CALIBRATED) -> dict:
    """One row: the kernel's modeled time at each shape under `rules`, each lever's time and gain, and the levers
    that pay (gain >= PAYS_AT at every shape)."""
    params = rules.params(base)
    us = {S: model(kernel, S, params) for S in shapes}
    lever_us = {lv.name: {S: model(kernel, S, params, lv.transform(kernel)) for S in shapes} for lv in levers}
    gain = {name: {S: 1.0 - t[S] / us[S] for S in shapes} for name, t in lever_us.items()}
    pays = [name for name, g in gain.items() if all(v >= PAYS_AT for v in g.values())]
    return {"rules": asdict(rules), "label": rules.label, "kernel": kernel, "us": us, "levers": lever_us,
            "gain": gain, "pays": pays, "modeled": True}


def table(rules=None, kernel: str = "asm", shapes=SHAPES, levers=LEVERS, model=modeled_us) -> list[dict]:
    return [evaluate(r, kernel, shapes, levers, model) for r in (rules if rules is not None else rule_sets())]


def markdown(rows: list[dict]) -> list[str]:
    shapes = list(rows[0]["us"]) if rows else list(SHAPES)
    levers = list(rows[0]["levers"]) if rows else [lv.name for lv in LEVERS]
    yn = {False: "no", True: "yes"}
    head = ["TRANS clk", "TRANS under WMMA", "VALU under WMMA", "VOPD issues"] + \
        [f"S={S} µs" for S in shapes] + [f"{name}: gain at S={shapes[-1]}" for name in levers] + ["lever that pays"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ru = r["rules"]
        cells = [str(ru["trans_clocks"]), yn[ru["trans_under_wmma"]], yn[ru["valu_under_wmma"]], str(ru["vopd_issues"])]
        cells += [f"{r['us'][S]:.1f}" for S in shapes]
        cells += [f"{100 * r['gain'][n][shapes[-1]]:+.1f} %" for n in levers]
        cells.append(", ".join(r["pays"]) or "none")
        out.append("| " + " | ".join(cells) + " |")
    return out


def print_hypotheses(as_json: bool = False, kernel: str = "asm") -> int:
    rows = table(kernel=kernel)
    if as_json:
        print(json.dumps({"kernel": kernel, "B": B, "H": H, "D": D, "shapes": list(SHAPES), "pays_at": PAYS_AT,
                          "levers": {lv.name: lv.what for lv in LEVERS}, "rows": rows, "modeled": True}, indent=1))
        return 0
    print(f"The shipped {kernel} kernel at B={B} H={H} D={D} under each rule set (MODELED; the first row is the "
          f"model's current rules). A lever pays when it saves >= {100 * PAYS_AT:g} % at every shape.")
    for lv in LEVERS:
        print(f"  lever '{lv.name}': {lv.what}")
    print("\n".join(markdown(rows)))
    return 0
