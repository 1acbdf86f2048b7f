"""The sanitizer: wait counters, WMMA / VALU-read-SGPR / v_cmpx->v_permlane hazards, barriers, LDS races. Every finding raises EmuError naming kernel,
PC, instruction, wave (workgroup id + wave-in-group) and lane (state.State.fail).

Wait counters (docs/rdna4.md §Waits): data completes at issue, but each wave keeps a per-counter issue sequence number
and a "completed up to" number. A load's destination registers remember the sequence number of their load; an
`s_wait_<cnt> N` completes every load of that counter with seq <= issued - N (loads of one type complete in issue
order; SMEM may complete out of order, so only kmcnt 0 completes anything). Reading -- or overwriting with a
non-load -- a register whose load is not complete is an error. Registers that may be pending are kept in a small
dict so that the common step (nothing pending) costs one truth test.

Hazards software must mitigate (docs/rdna4.md §Hazards 1, 3, 5): the rules of the one hazard model
(sage_co/emu/hazards.py), followed per wave on the path it runs: a read the hardware would not interlock is an
error. The static model merges paths; here each wave has its own state, so a hazard on a path no wave takes is
not reported (tools/disasm_check.py reports it).

Global bounds live in memory_ops.check_global; LDS bounds in memory_ops._lds_index.
"""
from __future__ import annotations

import numpy as np

from sage_co.emu import hazards
from sage_co.emu.facts import WAIT_COUNTER
from sage_co.emu.state import ALL


# ------------------------------------------------------------------------------------------------ registers
class CheckPlan:
    """What the register and hazard checks of one instruction need, from its facts (sage_co.emu.facts) alone:
    made once per distinct facts (check_plan) and shared by the handlers of every State."""
    __slots__ = ("kind", "load_dsts", "plain_writes", "reads", "is_valu", "touched", "hazard", "permlane", "vcmpx",
                 "valu_class", "ends_vcmpx")

    def __init__(self, inst, fx):
        self.kind = fx.wait_kind
        self.load_dsts = tuple((VPART.get(k[0]), k) for k in fx.writes) if fx.returns_data else ()
        self.plain_writes = _related(()) if fx.returns_data else _related(fx.writes)
        self.reads = _related(fx.reads)
        self.is_valu = fx.cls in ("VALU", "TRANS")
        # one C-level test against the pending keys per step
        self.touched = frozenset(self.reads) | frozenset(self.plain_writes)
        self.hazard = sgpr_plan(inst, fx)
        self.permlane, self.vcmpx = hazards.is_permlane(fx.name), hazards.vcmpx_writes_exec(fx)
        self.valu_class = fx.cls in ("VALU", "TRANS", "WMMA")
        self.ends_vcmpx = self.valu_class and fx.name != "v_nop"


_PLANS: dict = {}       # id(facts) -> (facts, its CheckPlan): facts are cached per encoding (sage_co.emu.facts)


def check_plan(inst, fx) -> CheckPlan:
    """The CheckPlan of an instruction, a function of its facts: one per distinct facts object, whatever the Program
    (the prepare kernels of one code object share most of their encodings)."""
    got = _PLANS.get(id(fx))
    if got is not None and got[0] is fx:
        return got[1]
    plan = CheckPlan(inst, fx)
    _PLANS[id(fx)] = (fx, plan)
    return plan


class Checked:
    """Handler h with the register checks of one instruction (its CheckPlan): reading -- or overwriting with a
    non-load -- a register whose load has not completed is an error; a load's destinations become pending on its
    counter. A slotted object, not a closure: a kept handler is then one object for Python's collector to scan
    rather than a function, its cell tuple and a cell per captured name (docs/emulator.md §Execution model)."""
    __slots__ = ("st", "pc", "h", "plan", "hz")

    def __init__(self, st, plan: CheckPlan, pc, h):
        self.st, self.pc, self.h, self.plan = st, pc, h, plan
        self.hz = sgpr_hazard(st, plan.hazard, pc)

    def __call__(self, sel):
        st, plan = self.st, self.plan
        if self.hz is not None:
            self.hz(sel)
        if plan.valu_class and (st.hz_vcmpx_live or plan.vcmpx):
            vcmpx_permlane(st, self.pc, sel, plan.permlane, plan.vcmpx, plan.ends_vcmpx)
        if st.maybe and not st.maybe.keys().isdisjoint(plan.touched):
            _check(st, self.pc, sel, plan.reads, "reads", "before its load completed (missing s_wait_*)")
            _check(st, self.pc, sel, plan.plain_writes, "overwrites", "while a load into it is still pending")
        if plan.is_valu and st.wmma_live:
            st.wmma_d[sel] = -1
            if sel is ALL:
                st.wmma_live = False
        r = self.h(sel)
        kind = plan.kind
        if kind is not None:
            issued = st.issued[kind]
            issued[sel] += 1
            if plan.load_dsts:
                seq = issued[sel]
                for part, key in plan.load_dsts:
                    if part is not None:
                        st.vpend[kind][part, key[1], sel] = seq
                    else:
                        st.spend[key[1]][sel] = seq
                    st.maybe[key] = kind
        return r


# ------------------------------------------------------------------------------------------------ hazards
def sgpr_plan(inst, fx):
    """The VALU-read-SGPR effect of one instruction (docs/rdna4.md §Hazards 3; the rule of sage_co.emu.hazards):
    ("clear",), ("wait", cleared counters), ("track", is_valu, uses, defs), or None when it touches no such state."""
    eff = hazards.sgpr_effect(inst, fx)
    kind = eff.kind
    if kind == "clear":
        return ("clear",)
    if kind == "wait":
        cleared = hazards.wait_clears(inst.f.get("simm16", 0xFFFF))
        return ("wait", frozenset(cleared)) if cleared else None
    if kind not in ("salu", "valu", "setpc") or not (eff.uses or eff.defs):
        return None
    pairs = [tuple((f, n, f >> 1, f in (hazards.VCC_LO, hazards.VCC_HI)) for f, n in regs)
             for regs in (eff.uses, eff.defs)]
    return ("track", kind == "valu", *pairs)


def sgpr_hazard(st, plan, pc):
    """The per-wave VALU-read-SGPR check of one instruction from its sgpr_plan (uses checked and waited, then defs
    recorded), or None."""
    if plan is None:
        return None
    if plan[0] == "clear":
        def h(sel, st=st):
            st.hz_salu[sel] = False
            st.hz_valu[sel] = False
            st.hz_vcc[sel] = False
        return h
    if plan[0] == "wait":
        cleared = plan[1]

        def h(sel, st=st, va_vcc="va_vcc" in cleared, sa_sdst="sa_sdst" in cleared, va_sdst="va_sdst" in cleared):
            if va_vcc:
                st.hz_vcc[sel, 1] = False
            if sa_sdst:
                st.hz_salu[sel] = False
                st.hz_vcc[sel, 0] = False
            if va_sdst:
                st.hz_valu[sel] = False
        return h
    return SgprHazard(st, pc, *plan[1:])


class SgprHazard:
    """The VALU-read-SGPR check of one SALU or VALU instruction (sgpr_hazard); slotted for the reason Checked is."""
    __slots__ = ("st", "pc", "is_valu", "uses", "defs")

    def __init__(self, st, pc, is_valu, uses, defs):
        self.st, self.pc, self.is_valu, self.uses, self.defs = st, pc, is_valu, uses, defs

    def __call__(self, sel):
        st, is_valu = self.st, self.is_valu
        tr = st.hz_tracked
        for first, n, pair, vcc in self.uses:
            t = tr[sel, pair]
            if not is_valu:
                # An SALU read retires VALU writes (interlocked). LLVM's static pass clears on a read of a pair
                # tracked on ANY path into the instruction (its block states are unions), so a wave whose own path
                # did not track the pair is cleared too: the sanitizer never stops a kernel LLVM guarded by its own
                # rule; the static lint (sage_co.emu.hazards) keeps LLVM's rule exactly (docs/rdna4.md §Hazards 3).
                if vcc:
                    st.hz_vcc[sel, 1] = False
                else:
                    st.hz_valu[sel] = False
            if not t.any():
                if is_valu:
                    tr[sel, pair] = True
                continue
            bad = t & st.hz_salu[sel, first:first + n].any(axis=1)
            why = "written by an SALU", "depctr_sa_sdst(0)"
            if vcc and not bad.any():
                bad, why = t & st.hz_vcc[sel, 0], ("written by an SALU", "depctr_sa_sdst(0)")
            if is_valu and not bad.any():
                bad, why = t & st.hz_valu[sel, first:first + n].any(axis=1), ("written by a VALU",
                                                                              "depctr_va_sdst(0)")
                if vcc and not bad.any():
                    bad, why = t & st.hz_vcc[sel, 1], ("written by a VALU", "depctr_va_vcc(0)")
            if bad.any():
                w = st.waves_of(sel)[int(np.argmax(bad))]
                reg = "vcc_lo" if first == hazards.VCC_LO else f"s{first}" if n == 1 else f"s[{first}:{first + n - 1}]"
                st.fail(self.pc, f"reads {reg}, {why[0]} after a VALU read its SGPR pair, with no s_wait_alu "
                                 f"{why[1]}, SMEM or buffer access between: the hardware does not interlock it "
                                 f"(VALU-read-SGPR hazard, docs/rdna4.md §Hazards 3)", w)
            if is_valu:
                tr[sel, pair] = True
        for first, n, pair, vcc in self.defs:
            t = tr[sel, pair]
            if not t.any():
                continue
            if vcc:
                st.hz_vcc[sel, 0] = np.where(t, not is_valu, st.hz_vcc[sel, 0])
                st.hz_vcc[sel, 1] = np.where(t, is_valu, st.hz_vcc[sel, 1])
            elif is_valu:
                st.hz_valu[sel, first:first + n] |= t[:, None]
            else:
                st.hz_salu[sel, first:first + n] |= t[:, None]


def vcmpx_permlane(st, pc, sel, permlane: bool, vcmpx: bool, ends: bool):
    """docs/rdna4.md §Hazards 5: a v_permlane* whose last VALU other than v_nop is a v_cmpx."""
    if permlane and st.hz_vcmpx_live:
        bad = st.hz_vcmpx[sel]
        if bad.any():
            st.fail(pc, "v_permlane right after a v_cmpx with no VALU other than v_nop between (needs one, e.g. "
                        "v_mov_b32 of its src0 onto itself; v_cmpx->v_permlane hazard, docs/rdna4.md §Hazards 5)",
                    st.waves_of(sel)[int(np.argmax(bad))])
    if vcmpx:
        st.hz_vcmpx[sel] = True
        st.hz_vcmpx_live = True
    elif ends:
        st.hz_vcmpx[sel] = False
        if sel is ALL:
            st.hz_vcmpx_live = False


# VGPR keys of facts: ('v', n) the whole register, ('v.l', n) / ('v.h', n) one 16-bit half; a pending load into a
# half conflicts with accesses of that half or of the whole register, never with the other half
VPART = {"v": 0, "v.l": 1, "v.h": 2}
_RELATED = {"v": ("v", "v.l", "v.h"), "v.l": ("v", "v.l"), "v.h": ("v", "v.h")}


def _related(keys) -> tuple:
    """The pending-load keys an access of `keys` must check."""
    return tuple(dict.fromkeys((kk, k[1]) for k in keys for kk in _RELATED.get(k[0], (k[0],))))


def _check(st, pc, sel, keys, verb, why):
    maybe = st.maybe
    for key in keys:
        kind = maybe.get(key)
        if kind is None:
            continue
        part = VPART.get(key[0])
        pend = (st.vpend[kind][part, key[1]] if part is not None else st.spend[key[1]])[sel]
        bad = pend > st.done[kind][sel]
        if bad.any():
            w = st.waves_of(sel)[int(np.argmax(bad))]
            reg = f"{key[0]}{key[1]}".replace("v.l", "v").replace("v.h", "v") + \
                {"v.l": ".l", "v.h": ".h"}.get(key[0], "") if part is not None else f"s{key[1]}"
            cnt = WAIT_COUNTER[kind]
            st.fail(pc, f"{verb} {reg} {why}: its {cnt} load is outstanding", w)


def build_wait(st, inst, pc, name, simm):
    if not st.sanitize:
        return lambda sel: None
    waits = []
    if name == "s_wait_loadcnt":
        waits = [("load", simm & 0x3F)]
    elif name == "s_wait_storecnt":
        waits = [("store", simm & 0x3F)]
    elif name == "s_wait_dscnt":
        waits = [("ds", simm & 0x3F)]
    elif name == "s_wait_kmcnt":
        waits = [("km", simm & 0x1F)]
    elif name == "s_wait_loadcnt_dscnt":
        waits = [("load", (simm >> 8) & 0x3F), ("ds", simm & 0x3F)]
    elif name == "s_wait_storecnt_dscnt":
        waits = [("store", (simm >> 8) & 0x3F), ("ds", simm & 0x3F)]
    elif name == "s_waitcnt":
        # legacy gfx11 layout: vmcnt [15:10], lgkmcnt [9:4], expcnt [2:0]
        vm, lgkm = (simm >> 10) & 0x3F, (simm >> 4) & 0x3F
        waits = [("load", vm), ("store", vm), ("ds", lgkm), ("km", lgkm)]
    else:   # s_wait_expcnt / samplecnt / bvhcnt: counters our kernels never increment
        return lambda sel: None

    def h(sel):
        for kind, n in waits:
            iss = st.issued[kind][sel]
            if kind == "km":
                if n == 0:
                    st.done[kind][sel] = iss    # SMEM returns out of order: only kmcnt 0 guarantees completion
            else:
                st.done[kind][sel] = np.maximum(st.done[kind][sel], iss - n)
            if st.maybe and (st.done[kind] >= st.issued[kind]).all():
                for key in [k for k, v in st.maybe.items() if v == kind]:
                    del st.maybe[key]
    return h


# ------------------------------------------------------------------------------------------------ WMMA
def wmma_overlap(st, pc, sel):
    st.fail(pc, "WMMA destination D overlaps its A or B operand (D is early-clobber; docs/rdna4.md §Hazards rule 2)",
            st.waves_of(sel)[0])


def wmma_hazard(st, pc, sel, ra, rb, na, vd, nd):
    """docs/rdna4.md §Hazards rule 1: a WMMA reading as A/B the VGPRs written by the immediately preceding WMMA with no VALU
    between needs a v_nop."""
    if st.wmma_live:
        last = st.wmma_d[sel]
        lo, hi = last[:, 0], last[:, 1]
        bad = (lo >= 0) & (((lo < ra + na) & (ra < hi)) | ((lo < rb + na) & (rb < hi)))
        if bad.any():
            w = st.waves_of(sel)[int(np.argmax(bad))]
            st.fail(pc, f"WMMA reads as A/B the VGPRs v[{int(lo[np.argmax(bad)])}:{int(hi[np.argmax(bad)]) - 1}] "
                        f"written by the immediately preceding WMMA with no VALU between (needs v_nop; docs/rdna4.md "
                        f"§Hazards rule 1)", w)
    st.wmma_d[sel] = (vd, vd + nd)
    st.wmma_live = True


# ------------------------------------------------------------------------------------------------ barriers
def check_signal(st, sel, pc):
    """A wave signals a barrier that an already-ended wave of its workgroup never reached."""
    ended = ~st.alive
    if not ended.any():
        return
    for w in st.waves_of(sel):
        g = st.wave_wg[w]
        others = np.flatnonzero((st.wave_wg == g) & ended & (st.sig < st.sig[w]))
        if len(others):
            st.fail(pc, f"barrier not reached by all waves: wave {int(st.wave_in_wg[others[0]])} of this workgroup "
                        f"ended without signalling it", w)


def check_end(st, sel, pc):
    waves = st.waves_of(sel)
    for w in waves:
        g = st.wave_wg[w]
        ahead = np.flatnonzero((st.wave_wg == g) & (st.sig > st.sig[w]))
        if len(ahead):
            st.fail(pc, f"wave ends while wave {int(st.wave_in_wg[ahead[0]])} of its workgroup waits at a barrier it "
                        f"never reached (barrier not reached by all waves)", w)


def wait_without_signal(st, sel, pc, bad):
    w = st.waves_of(sel)[int(np.argmax(bad))]
    st.fail(pc, "s_barrier_wait without a preceding s_barrier_signal", w)


def deadlock(st):
    w = int(np.flatnonzero(st.alive)[0])
    st.fail(int(st.pc[w]), "deadlock: every remaining wave waits at a barrier that not all waves of its workgroup "
                           "reach", w)


# ------------------------------------------------------------------------------------------------ LDS races
def barrier_complete(st, wgs, barrier):
    """Barrier number `barrier` (1-based, per workgroup) of workgroups wgs is complete: their accesses so far can no
    longer race with later ones. Cleared once per barrier: waves that pass it later (woken from a blocked wait) must
    not erase what the waves that passed first have done since."""
    if st.lds_race_check:
        wgs = np.asarray(wgs)
        wgs = wgs[st.race_barriers[wgs] < barrier]
        st.race_writer[wgs] = 0
        st.race_readers[wgs] = 0
        st.race_barriers[wgs] = barrier


def lds_access(st, pc, sel, m, addr_active, nbytes, write):
    """Two waves touching one LDS dword between barriers, at least one writing (dword granularity)."""
    waves = st.waves_of(sel)
    wi, lane = np.nonzero(m)
    ok = (addr_active >= 0) & (addr_active + nbytes <= st.lds_bytes)
    first_dw = addr_active >> 2
    last_dw = (addr_active + nbytes - 1) >> 2
    for w_local in np.unique(wi):
        pick = (wi == w_local) & ok
        if not pick.any():
            continue
        w = int(waves[w_local])
        g, me = int(st.wave_wg[w]), int(st.wave_in_wg[w])
        span = int((last_dw[pick] - first_dw[pick]).max()) + 1
        dws = np.unique((first_dw[pick][:, None] + np.arange(span)).reshape(-1))
        dws = dws[dws < st.race_writer.shape[1]]
        wr = st.race_writer[g, dws]
        bit = np.uint64(1) << np.uint64(me)
        conflict = (wr != 0) & (wr != me + 1)
        if write:
            conflict |= (st.race_readers[g, dws] & ~bit) != 0
        if conflict.any():
            k = int(np.argmax(conflict))
            other = int(wr[k]) - 1 if wr[k] != 0 and wr[k] != me + 1 else \
                int(np.flatnonzero([(int(st.race_readers[g, dws[k]]) >> i) & 1 for i in range(64)])[0])
            st.fail(pc, f"LDS race: {'write' if write else 'read'} of LDS address 0x{int(dws[k]) * 4:x} also "
                        f"{'written' if wr[k] not in (0, me + 1) else 'read'} by wave {other} of the workgroup with no "
                        f"barrier between", w, int(lane[np.flatnonzero(pick)[0]]))
        if write:
            st.race_writer[g, dws] = me + 1
        else:
            st.race_readers[g, dws] |= bit
