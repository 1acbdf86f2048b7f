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
    LEVERS                           the schedule changes weighed that no shipped schedule has (Lever: name, what,
                                     transform(kernel)); VALU_SENSITIVITY: a what-if, not a lever (its own column)
    shipped_schedules(kernel="asm")  the exp2 schedules (sage_co.family.ATTENTION_SCHEDULES, default first) the
                                     registry has a symbol of at D=128, bf16 out, fp8 P.V
    modeled_us(kernel, S, params, transform=None, schedule=None)   one launch, B=1 H=24 D=128
                                     (restate.our_kernel; schedule None: family.DEFAULT_SCHEDULE), MODELED
    evaluate(rules, kernel="asm", shapes=SHAPES, levers=None, model=None, schedules=None, sensitivity=None) -> dict
        (None: LEVERS, modeled_us, shipped_schedules(kernel), with the real model only)
        {"rules": {...}, "label", "kernel", "us": {S: t} (the default schedule), "levers": {name: {S: t}},
         "gain": {name: {S: fraction}}, "sensitivity": {S: fraction} (VALU_SENSITIVITY's gain; {} without),
         "pays": [lever names whose gain at every shape is >= PAYS_AT],
         "schedules": {schedule: {S: t}}, "best_shipped": {S: {"schedule", "us"}},
         "combinations": {label: {S: t}} (every subset of the levers on the default schedule, the empty one and
         the single levers included), "best": {S: {"name", "us", "shipped"}}, "gap": {S: fraction},
         "within_goal": bool}
    table(rules=None, kernel="asm", ...) -> [evaluate(r, ...) for r in rules or rule_sets()]
    `model` is any callable (kernel, S, params, transform=None, schedule=None) -> microseconds: a schedule that is
    not a shipped kernel passes its own.

"Best shipped schedule" (per shape): the fastest of the shipped schedules, unchanged. "Best lever combination" (per
shape): the fastest of every subset of LEVERS applied together to the default schedule (the empty subset is the
default schedule itself) and of every shipped schedule. Gap = best shipped / best combination - 1 (>= 0: the
shipped schedules are among the candidates); a row is within the goal when the gap is <= GOAL_GAP at
every shape. A best combination that is no shipped schedule (a lever, hypothetical until a schedule ships it)
counts against the gap like any other.
"""
from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass, replace
from typing import Callable

from perfmodel.hardware import CALIBRATED, Params

B, H, D = 1, 24, 128
SHAPES = (1536, 4096)                       # S (= S_q = S_kv) of the table's columns
PAYS_AT = 0.02                              # a lever "pays" when it saves >= 2 % (modeled) at every shape
GOAL_GAP = 0.03                             # the goal: the best shipped schedule within 3 % of the best combination
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


# The exp2_valu schedule's instructions for one (even, odd) pair of scores (asm_src/sage_attention_asm/softmax.py
# exp2_valu_ops, docs/numerics.md "exp2 on the VALU"): the clamp, the rounding and the fraction pair in VOPD (one
# v_dual_* each: 1 or 2 vector issues by the VOPD rule); the polynomial's two FMAs and the exponent's shift-add are
# VOP3, one per score.
EXP2_VALU_PAIR_VOPD = ("v_dual_max_num_f32", "v_dual_add_f32", "v_dual_subrev_f32", "v_dual_sub_f32")
EXP2_VALU_PER_SCORE = ("v_fma_f32", "v_fma_f32", "v_lshl_add_u32")
EXP2_LEVER_KEYS = 0x0C0C0C0C            # keys 8c + 2, 8c + 3 of every 8: a quarter of the scores, whole pairs


def emulate_exp_pairs(keys: int = EXP2_LEVER_KEYS):
    """A what-if transform: the loop's v_exp_f32 of the scores j (mod 32, in stream order: the tile's 32 score
    VGPRs) with bit j of `keys` set become the exp2_valu schedule's own instructions (EXP2_VALU_PAIR_VOPD on the
    (even, odd) pair, then EXP2_VALU_PER_SCORE on each score), at the even score's place; every VOPD pair costs
    what the rule set's VOPD rule says."""

    def transform(ops):
        exps = [n for n, op in enumerate(ops) if op.cls == "TRANS" and op.mnemonic.startswith("v_exp_f32")]
        pair_of, dropped = {}, set()
        for i, n in enumerate(exps):
            j = i % 32
            if j % 2 == 0 and keys >> j & 1 and i + 1 < len(exps):
                pair_of[n] = exps[i + 1]
                dropped.add(exps[i + 1])
        out = []
        for n, op in enumerate(ops):
            if n in dropped:
                continue
            if n not in pair_of:
                out.append(op)
                continue
            a, b = op, ops[pair_of[n]]
            out += [replace(a, mnemonic=m, cls="VALU", srcs=a.srcs + b.srcs, dsts=a.dsts + b.dsts)
                    for m in EXP2_VALU_PAIR_VOPD]
            for m in EXP2_VALU_PER_SCORE:
                out += [replace(a, mnemonic=m, cls="VALU"), replace(b, mnemonic=m, cls="VALU")]
        return out
    return transform


def _exp_emulation(kernel: str):
    return emulate_exp_pairs()


def _exact_check_on_salu(kernel: str):
    """The exact-form test (bits(qk) - 1 < bits(FMA_MAX_QK_SCALE), softmax.exact_form) on SALU: its two VALU ops
    per tile (v_add_nc_u32 into a temporary, v_cmp_le_u32 into VCC) leave the vector port for what SALU needs
    instead: the tile's two k_scale values by one s_load_b64 (issued a tile ahead, as the loop's ks load is: no
    wait here), qk = q_scale * k_scale twice (s_mul_f32), bits - 1 twice, their unsigned max and one compare."""
    salu = ("s_mul_f32", "s_mul_f32", "s_add_co_i32", "s_add_co_i32", "s_max_u32", "s_cmp_lt_u32")

    def transform(ops):
        out = []
        for op in ops:
            if op.mnemonic.startswith("v_cmp_le_u32"):
                for k in range(len(out) - 1, -1, -1):
                    if out[k].mnemonic.startswith("v_add_nc_u32") and set(out[k].dsts) & set(op.srcs):
                        del out[k]
                        break
                out.append(replace(op, mnemonic="s_load_b64", cls="SMEM", vector=False, srcs=(), dsts=(), mem_bytes=8))
                out += [replace(op, mnemonic=m, cls="SALU", vector=False, srcs=(), dsts=()) for m in salu]
                continue
            out.append(op)
        return out
    return transform


def _valu_sensitivity(kernel: str):
    from perfmodel.whatif import drop_valu, valu_per_score
    now, _ = valu_per_score(kernel)
    return drop_valu(1.0 / now)             # one plain VALU issue fewer per score VGPR


# The schedule changes the model weighs that no shipped schedule has (each a concrete instruction change on the
# default schedule's loop). The issue-41 levers the kernels ship (the row max by v_max3_num_f32, the thresholded
# rescale, no -inf guard, l per lane half) are in the stream already; the row sum by v_dot4_f32_fp8_fp8 is no lever:
# it would sum the fp8 P and move the LSE past its accuracy test (docs/numerics.md §Attention arithmetic model).
# Order matters where levers combine (combined()): each transform sees the stream the previous one left.
LEVERS = (
    Lever("exact check on SALU", "the exact-form test's 2 VALU ops per tile replaced by 1 s_load_b64 and 6 SALU "
          "ops", _exact_check_on_salu),
    Lever("exp2 on the VALU", "the exp2 of a quarter of the scores (keys 8c + 2, 8c + 3) by the exp2_valu "
          "schedule's instructions: per (even, odd) pair 4 VOPD pairs and 6 VOP3", _exp_emulation),
)
# Not a lever (no instruction change realizes it): what one plain VALU issue fewer per score VGPR would be worth
# (whatif.drop_valu), a column of its own that says how VALU-bound each rule set leaves the kernel.
VALU_SENSITIVITY = Lever("one VALU issue fewer per score", "whatif.drop_valu: one plain VALU issue fewer per score "
                         "VGPR (sensitivity; no schedule realizes it)", _valu_sensitivity)


def combined(levers, kernel: str):
    """One what-if transform applying `levers`' transforms in turn (in the order given), or None for no lever."""
    transforms = [lv.transform(kernel) for lv in levers]
    if not transforms:
        return None

    def transform(ops):
        for t in transforms:
            ops = t(ops)
        return ops
    return transform


def combination_label(default_schedule: str, levers) -> str:
    return " + ".join([default_schedule] + [lv.name for lv in levers])


def shipped_schedules(kernel: str = "asm") -> tuple[str, ...]:
    """The schedules of sage_co.family.ATTENTION_SCHEDULES (the default first) that `kernel` ships a symbol of at
    the table's shape (D=128, bf16 out, fp8 P.V; attention.attention_symbol)."""
    from sage_co import family
    from perfmodel.attention import attention_symbol
    out = []
    for sc in family.ATTENTION_SCHEDULES:
        try:
            attention_symbol(kernel, D, schedule=sc)
        except ValueError:
            continue
        out.append(sc)
    if family.DEFAULT_SCHEDULE not in out:
        raise ValueError(f"kernel {kernel!r} ships no symbol of the default schedule {family.DEFAULT_SCHEDULE!r} "
                         f"at head_dim={D}")
    return tuple(out)


def modeled_us(kernel: str, S: int, params: Params, transform=None, schedule: str | None = None) -> float:
    """The shipped `kernel` (its `schedule`'s symbol; None: the default) at B=1, H=24, D=128, S_q = S_kv = S under
    `params` (restate.our_kernel), MODELED."""
    from perfmodel.restate import our_kernel
    return our_kernel(kernel, B, H, S, params, head_dim=D, transform=transform, schedule=schedule).time_us


def evaluate(rules: RuleSet, kernel: str = "asm", shapes=SHAPES, levers=None, model=None,
             base: Params = CALIBRATED, schedules=None, sensitivity: bool | None = None) -> dict:
    """One row: the kernel's modeled time at each shape under `rules` (its default schedule, `schedules[0]`), each
    lever's time and gain, the levers that pay (gain >= PAYS_AT at every shape), each shipped schedule's time, the
    best shipped schedule, the best lever combination and the gap between the two (module docstring).
    levers None: LEVERS; model None: modeled_us; schedules: the shipped schedules, the default first (None:
    shipped_schedules(kernel))."""
    levers = LEVERS if levers is None else levers
    model = modeled_us if model is None else model
    schedules = tuple(schedules) if schedules is not None else shipped_schedules(kernel)
    if not schedules:
        raise ValueError("schedules: expected at least the default schedule")
    default = schedules[0]
    params = rules.params(base)
    us = {S: model(kernel, S, params, None, schedule=default) for S in shapes}
    sched_us = {default: us}
    sched_us.update({sc: {S: model(kernel, S, params, None, schedule=sc) for S in shapes} for sc in schedules[1:]})
    lever_us = {lv.name: {S: model(kernel, S, params, lv.transform(kernel), schedule=default) for S in shapes}
                for lv in levers}
    gain = {name: {S: 1.0 - t[S] / us[S] for S in shapes} for name, t in lever_us.items()}
    sensitivity = model is modeled_us if sensitivity is None else sensitivity
    sens = VALU_SENSITIVITY.transform(kernel) if sensitivity else None
    sensitivity_gain = {S: 1.0 - model(kernel, S, params, sens, schedule=default) / us[S] for S in shapes} \
        if sensitivity else {}
    pays = [name for name, g in gain.items() if all(v >= PAYS_AT for v in g.values())]
    combos = {}
    for n in range(len(levers) + 1):
        for sub in itertools.combinations(levers, n):
            label = combination_label(default, sub)
            if n == 0:
                combos[label] = us
            elif n == 1:
                combos[label] = lever_us[sub[0].name]
            else:
                tr = combined(sub, kernel)
                combos[label] = {S: model(kernel, S, params, tr, schedule=default) for S in shapes}
    best_shipped, best, gap = {}, {}, {}
    for S in shapes:
        sc = min(schedules, key=lambda k: sched_us[k][S])
        best_shipped[S] = {"schedule": sc, "us": sched_us[sc][S]}
        cands = [(t[S], label, False) for label, t in combos.items()] + [(sched_us[k][S], k, True) for k in schedules]
        t, name, shipped = min(cands, key=lambda c: (c[0], not c[2]))    # a tie goes to a shipped schedule
        best[S] = {"name": name, "us": t, "shipped": shipped or name == combination_label(default, ())}
        gap[S] = best_shipped[S]["us"] / t - 1.0
    return {"rules": asdict(rules), "label": rules.label, "kernel": kernel, "us": us, "levers": lever_us,
            "gain": gain, "sensitivity": sensitivity_gain, "pays": pays, "schedules": sched_us, "best_shipped": best_shipped, "combinations": combos,
            "best": best, "gap": gap, "within_goal": all(g <= GOAL_GAP for g in gap.values()), "modeled": True}


def table(rules=None, kernel: str = "asm", shapes=SHAPES, levers=None, model=None, schedules=None) -> list[dict]:
    schedules = tuple(schedules) if schedules is not None else shipped_schedules(kernel)
    return [evaluate(r, kernel, shapes, levers, model, schedules=schedules)
            for r in (rules if rules is not None else rule_sets())]


def _per_shape(picks: dict, key: str) -> str:
    """'name t1 / t2' when one name wins at every shape, else 'name1 t1 / name2 t2'."""
    names = {p[key] for p in picks.values()}
    if len(names) == 1:
        return f"{names.pop()}: " + " / ".join(f"{p['us']:.1f}" for p in picks.values())
    return " / ".join(f"{p[key]}: {p['us']:.1f}" for p in picks.values())


def markdown(rows: list[dict]) -> list[str]:
    shapes = list(rows[0]["us"]) if rows else list(SHAPES)
    levers = list(rows[0]["levers"]) if rows else [lv.name for lv in LEVERS]
    yn = {False: "no", True: "yes"}
    sh = " / ".join(str(S) for S in shapes)
    head = ["TRANS clk", "TRANS under WMMA", "VALU under WMMA", "VOPD issues"] + \
        [f"S={S} µs" for S in shapes] + [f"{name}: gain at S={shapes[-1]}" for name in levers] + \
        ([f"{VALU_SENSITIVITY.name} (sensitivity): gain at S={shapes[-1]}"] if rows and rows[0]["sensitivity"] else []) + \
        ["lever that pays", f"best shipped schedule: µs at S={sh}", f"best lever combination: µs at S={sh}",
         f"gap at S={sh}", f"within {100 * GOAL_GAP:g} %"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ru = r["rules"]
        cells = [str(ru["trans_clocks"]), yn[ru["trans_under_wmma"]], yn[ru["valu_under_wmma"]], str(ru["vopd_issues"])]
        cells += [f"{r['us'][S]:.1f}" for S in shapes]
        cells += [f"{100 * r['gain'][n][shapes[-1]]:+.1f} %" for n in levers]
        if r["sensitivity"]:
            cells.append(f"{100 * r['sensitivity'][shapes[-1]]:+.1f} %")
        cells.append(", ".join(r["pays"]) or "none")
        cells.append(_per_shape(r["best_shipped"], "schedule"))
        best = {S: {**b, "name": b["name"] + ("" if b["shipped"] else " (not shipped)")} for S, b in r["best"].items()}
        cells.append(_per_shape(best, "name"))
        cells.append(" / ".join(f"{100 * r['gap'][S]:+.1f} %" for S in shapes))
        cells.append(yn[r["within_goal"]])
        out.append("| " + " | ".join(cells) + " |")
    return out


def print_hypotheses(as_json: bool = False, kernel: str = "asm") -> int:
    from sage_co import family
    schedules = shipped_schedules(kernel)
    unshipped = [sc for sc in family.ATTENTION_SCHEDULES if sc not in schedules]
    rows = table(kernel=kernel, schedules=schedules)
    if as_json:
        print(json.dumps({"kernel": kernel, "B": B, "H": H, "D": D, "shapes": list(SHAPES), "pays_at": PAYS_AT,
                          "goal_gap": GOAL_GAP, "schedules": list(schedules), "default_schedule": schedules[0],
                          "schedules_not_shipped_here": unshipped,
                          "levers": {lv.name: lv.what for lv in LEVERS},
                          "sensitivity": {VALU_SENSITIVITY.name: VALU_SENSITIVITY.what}, "rows": rows,
                          "within_goal": sum(r["within_goal"] for r in rows), "modeled": True}, indent=1))
        return 0
    print(f"The shipped {kernel} kernel at B={B} H={H} D={D} under each rule set (MODELED; the first row is the "
          f"model's current rules; 'S=... µs' and the levers: the default schedule '{schedules[0]}'). A lever pays "
          f"when it saves >= {100 * PAYS_AT:g} % at every shape.")
    print(f"  shipped schedules: {', '.join(schedules)} (sage_co.family.ATTENTION_SCHEDULES, the default first)"
          + (f"; declared but with no {kernel} symbol at D={D}, bf16 out, fp8 P.V: {', '.join(unshipped)}"
             if unshipped else ""))
    for lv in LEVERS:
        print(f"  lever '{lv.name}': {lv.what}")
    print(f"  sensitivity '{VALU_SENSITIVITY.name}': {VALU_SENSITIVITY.what}; not a lever, not in the gap")
    print(f"  best shipped schedule: the fastest shipped schedule at each shape (MODELED). Best lever combination: "
          f"the fastest of every subset of the levers applied together to '{schedules[0]}' and of every shipped "
          f"schedule (MODELED; '(not shipped)': no shipped schedule has it). Gap: best shipped / best combination - 1; "
          f"within {100 * GOAL_GAP:g} %: the gap at every shape.")
    print("\n".join(markdown(rows)))
    print(f"Rows within {100 * GOAL_GAP:g} %: {sum(r['within_goal'] for r in rows)} of {len(rows)} (MODELED).")
    return 0
