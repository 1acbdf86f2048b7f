"""The one model of the gfx1201 hazards software must mitigate (docs/rdna4.md §Hazards rules 1, 3 and 5), evaluated
over a function's control-flow graph to a fixed point. Built on the instruction facts (facts.py); used by the lint
(tools/disasm_check.py), the generator (asm_src/asmdsl.py `insert_hazard_waits`) and, rule by rule per wave, the
emulator's sanitizer (sanitizer.py, through `sgpr_effect` / `WAIT_FIELDS` / `vcmpx_writes_exec` / `is_permlane`).

    analyze(insts) -> list[Finding]     insts: the decoded instructions of one function, in address order
    Finding(rule, addr, text, reg, writer, valu_read, fix)

Rules (docs/rdna4.md §Hazards):
  sgpr-salu-write  rule 3: an SGPR whose pair a VALU has read, written by an SALU, read by an SALU or VALU with no
                   `s_wait_alu depctr_sa_sdst(0)`, SMEM or buffer access between.
  sgpr-valu-write  rule 3: the same SGPR written by a VALU (an sdst, a carry-out) and read by a VALU with no
                   `depctr_va_sdst(0)` between (an SALU read of it is interlocked and retires the state).
  vcc-valu-write   rule 3: VCC written by a VALU, read by a VALU with no `depctr_va_vcc(0)` between.
  (at s_setpc/s_swappc/s_call every pending write is a site under its rule: the other side cannot see it; LLVM's
  long branch s_getpc/s_add/s_setpc is an ordinary edge)
  wmma-operand     rule 1: a WMMA/SWMMAC reading as A/B (SWMMAC: also the index) the D of the last VALU-class
                   instruction, itself a WMMA, on some path (v_nop or any VALU between).
  vcmpx-permlane   rule 5: a v_permlane* whose last VALU other than v_nop, on some path, is a v_cmpx.

A finding is reported once, at the reader, and the state afterwards is the one the fix leaves (the wait or the VALU
inserted right before the reader), so the sites are the instructions where LLVM's passes put their fix.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

from sage_co.emu.facts import facts

# s_wait_alu (s_waitcnt_depctr) fields [LLVM-SH DepCtr]: value 0 in a field waits for that counter
WAIT_FIELDS = {"sa_sdst": (0, 0x1), "va_vcc": (1, 0x1), "va_sdst": (9, 0x7)}
FIX = {"sgpr-salu-write": "s_wait_alu depctr_sa_sdst(0)", "sgpr-valu-write": "s_wait_alu depctr_va_sdst(0)",
       "vcc-valu-write": "s_wait_alu depctr_va_vcc(0)", "wmma-operand": "v_nop",
       "vcmpx-permlane": "v_mov_b32 vX, vX (src0 of the permlane)"}
RULE_FIELD = {"sgpr-salu-write": "sa_sdst", "sgpr-valu-write": "va_sdst", "vcc-valu-write": "va_vcc"}
VCC_LO, VCC_HI = 106, 107
_UNTRACKED = (124, 125, 126, 127)          # null, m0, exec_lo/hi: no hazard state [LLVM-SH sgprNumber]
DS_NOP_CULL = 4                            # wave32: 4 ds_nop in a row forget which pairs a VALU read
SETPC = ("s_setpc_b64", "s_swappc_b64", "s_call_b64", "s_rfe_b64")
CALLS = ("s_swappc_b64", "s_call_b64")
PERMLANES = ("v_permlane16_b32", "v_permlanex16_b32", "v_permlane64_b32", "v_permlane16_var_b32",
             "v_permlanex16_var_b32")


def wait_clears(simm: int) -> set[str]:
    """The fields an s_wait_alu immediate waits for (value 0)."""
    return {f for f, (sh, m) in WAIT_FIELDS.items() if not (simm >> sh) & m}


def is_permlane(name: str) -> bool:
    return name in PERMLANES


def vcmpx_writes_exec(fx) -> bool:
    """A compare that writes EXEC (v_cmpx_*, any encoding) [LLVM-HZ fixVcmpxPermlaneHazards]."""
    return fx.name.startswith("v_cmpx")


@dataclass(frozen=True)
class SgprEffect:
    """What one instruction does to the rule-3 state: kind 'salu' / 'valu' / 'clear' (SMEM, buffer) / 'wait' /
    'dsnop' / 'setpc' / None; uses/defs: (first SGPR, count) per scalar operand, in operand order."""
    kind: str | None
    uses: tuple
    defs: tuple
    call: bool = False


_EFFECTS: dict = {}


def _sgpr_ops(fx, read: bool) -> tuple:
    out = []
    for op in fx.operands:
        if not (op.read if read else op.write):
            continue
        regs = [n for k, n in op.regs if k == "s"]
        if not regs or regs[0] in _UNTRACKED or regs[0] > 127:
            continue
        if (regs[0], len(regs)) not in out:
            out.append((regs[0], len(regs)))
    return tuple(out)


def sgpr_effect(inst, fx=None) -> SgprEffect:
    """The rule-3 effect of a decoded instruction (cached per facts object)."""
    fx = fx or facts(inst)
    got = _EFFECTS.get(id(fx))
    if got is not None and got[0] is fx:
        return got[1]
    name, enc = fx.name, inst.enc
    if enc in ("SMEM", "VBUFFER"):
        eff = SgprEffect("clear", (), ())
    elif name == "s_wait_alu":
        eff = SgprEffect("wait", (), ())
    elif name == "ds_nop":
        eff = SgprEffect("dsnop", (), ())
    elif name in SETPC:
        eff = SgprEffect("setpc", (), _sgpr_ops(fx, False) if name in CALLS else (), call=name in CALLS)
    elif fx.cls in ("VALU", "TRANS", "WMMA"):
        eff = SgprEffect("valu", _sgpr_ops(fx, True), _sgpr_ops(fx, False))
    elif name.startswith("s_") and fx.cls in ("SALU", "BRANCH", "WAIT_OTHER"):
        eff = SgprEffect("salu", _sgpr_ops(fx, True), _sgpr_ops(fx, False))
    else:
        eff = SgprEffect(None, (), ())
    _EFFECTS[id(fx)] = (fx, eff)
    return eff


@dataclass(frozen=True)
class Finding:
    rule: str
    addr: int                 # the reader (where the fix goes, right before it)
    text: str                 # its mnemonic
    reg: str                  # the register at risk ('s68', 'vcc', 'v[16:23]')
    writer: int | None        # address of the write (one of them when several paths write)
    valu_read: int | None     # address of the VALU read that put the pair at risk (rule 3)
    fix: str

    def describe(self, texts: dict | None = None) -> str:
        """One line; texts: address -> the instruction's disassembly, to show reader, writer and VALU read."""
        texts = texts or {}

        def at(a):
            if a is None:
                return "?"
            return f"0x{a:x}" + (f" ({texts[a]})" if a in texts else "")
        risk = f", the pair read by a VALU at {at(self.valu_read)}" if self.rule in RULE_FIELD else ""
        return (f"{self.rule}: {texts.get(self.addr, self.text)} at 0x{self.addr:x} reads {self.reg} written at "
                f"{at(self.writer)}{risk} with no mitigation between (needs {self.fix} before it; docs/rdna4.md "
                f"§Hazards)")


class _State:
    """Hazard state at one point; merge = union (a hazard on any path is a hazard)."""
    __slots__ = ("tracked", "salu", "valu", "vcc_salu", "vcc_valu", "wmma", "vcmpx", "prov")

    def __init__(self):
        self.tracked = 0          # bit p: SGPR pair p (s[2p:2p+1]) read by some VALU
        self.salu = 0             # bit r: SGPR r written by SALU, not waited
        self.valu = 0             # bit r: written by VALU, not waited
        self.vcc_salu = False
        self.vcc_valu = False
        self.wmma = 0             # VGPR bits of the D of the last VALU-class instruction when it was a WMMA
        self.vcmpx = False        # a v_cmpx is the last VALU (v_nop aside)
        self.prov = {}            # ('p', pair) / ('s', reg) / ('vcc',) / ('w',) / ('x',) -> address

    def copy(self) -> "_State":
        s = _State.__new__(_State)
        s.tracked, s.salu, s.valu, s.vcc_salu, s.vcc_valu, s.wmma, s.vcmpx = (
            self.tracked, self.salu, self.valu, self.vcc_salu, self.vcc_valu, self.wmma, self.vcmpx)
        s.prov = dict(self.prov)
        return s

    def key(self) -> tuple:
        return (self.tracked, self.salu, self.valu, self.vcc_salu, self.vcc_valu, self.wmma, self.vcmpx)

    def merge(self, o: "_State") -> bool:
        before = self.key()
        self.tracked |= o.tracked
        self.salu |= o.salu
        self.valu |= o.valu
        self.vcc_salu |= o.vcc_salu
        self.vcc_valu |= o.vcc_valu
        self.wmma |= o.wmma
        self.vcmpx |= o.vcmpx
        for k, v in o.prov.items():
            if k not in self.prov or v < self.prov[k]:
                self.prov[k] = v
        return self.key() != before


def _bits(first: int, n: int) -> int:
    return ((1 << n) - 1) << first


def _vbits(regs) -> int:
    out = 0
    for n in regs:
        out |= 1 << n
    return out


def _reg_text(first: int, n: int) -> str:
    if first in (VCC_LO, VCC_HI):
        return "vcc" if n == 2 else ("vcc_lo" if first == VCC_LO else "vcc_hi")
    return f"s{first}" if n == 1 else f"s[{first}:{first + n - 1}]"


def _vrange(bits: int) -> str:
    regs = [i for i in range(bits.bit_length()) if bits >> i & 1]
    return f"v{regs[0]}" if len(regs) == 1 else f"v[{regs[0]}:{regs[-1]}]"


def _step(st: _State, inst, fx, eff: SgprEffect, out: list | None, dsnops: list) -> None:
    """Advance the state over one instruction; append its findings to `out` (None: fixed-point pass)."""
    addr = inst.offset
    name = fx.name
    kind = eff.kind
    if kind == "dsnop":
        dsnops[0] += 1
        if dsnops[0] >= DS_NOP_CULL:
            st.tracked = 0
        return
    dsnops[0] = 0
    # rule 1 / rule 5: VALU-class order
    if fx.cls in ("VALU", "TRANS", "WMMA"):
        if fx.cls == "WMMA":
            ab = _vbits(fx.vgprs("src0") | fx.vgprs("src1") |
                        (fx.vgprs("src2") if name.startswith("v_swmmac") else set()))
            if st.wmma & ab and out is not None:
                out.append(Finding("wmma-operand", addr, name, _vrange(st.wmma & ab), st.prov.get(("w",)), None,
                                   FIX["wmma-operand"]))
            st.wmma = _vbits(fx.vgprs("vdst"))
            st.prov[("w",)] = addr
        else:
            st.wmma = 0
        if is_permlane(name) and st.vcmpx and out is not None:
            out.append(Finding("vcmpx-permlane", addr, name, "exec", st.prov.get(("x",)), None,
                               FIX["vcmpx-permlane"]))
        if vcmpx_writes_exec(fx):
            st.vcmpx = True
            st.prov[("x",)] = addr
        elif name != "v_nop":
            st.vcmpx = False
    # rule 3 [LLVM-SH runOnMachineBasicBlock]
    if kind is None:
        return
    if kind == "clear":
        st.salu = st.valu = 0
        st.vcc_salu = st.vcc_valu = False
        return
    if kind == "wait":
        cleared = wait_clears(inst.f.get("simm16", 0xFFFF))
        if "va_vcc" in cleared:
            st.vcc_valu = False
        if "sa_sdst" in cleared:
            st.salu = 0
            st.vcc_salu = False
        if "va_sdst" in cleared:
            st.valu = 0
        return
    is_valu = kind == "valu"
    need: dict[str, tuple] = {}          # rule -> (register text, writer address, pair read address)
    if kind == "setpc":
        if st.vcc_valu:
            need["vcc-valu-write"] = ("vcc", st.prov.get(("vcc",)), None)
        if st.salu or st.vcc_salu:
            r = (st.salu & -st.salu).bit_length() - 1 if st.salu else VCC_LO
            need["sgpr-salu-write"] = (_reg_text(r, 1), st.prov.get(("s", r)), st.prov.get(("p", r >> 1)))
        if st.valu:
            r = (st.valu & -st.valu).bit_length() - 1
            need["sgpr-valu-write"] = (_reg_text(r, 1), st.prov.get(("s", r)), st.prov.get(("p", r >> 1)))
    else:
        for first, n in eff.uses:
            pair = first >> 1
            if not st.tracked >> pair & 1:
                if is_valu:
                    st.tracked |= 1 << pair
                    st.prov.setdefault(("p", pair), addr)
                continue
            vcc = first in (VCC_LO, VCC_HI)
            if not is_valu:                  # an SALU read retires VALU writes (interlocked)
                if vcc:
                    st.vcc_valu = False
                else:
                    st.valu = 0
            regs = _bits(first, n)
            hit = st.salu & regs
            if hit:
                r = (hit & -hit).bit_length() - 1
                need.setdefault("sgpr-salu-write", (_reg_text(first, n), st.prov.get(("s", r)),
                                                    st.prov.get(("p", r >> 1))))
            if is_valu and st.valu & regs:
                r = (st.valu & regs & -(st.valu & regs)).bit_length() - 1
                need.setdefault("sgpr-valu-write", (_reg_text(first, n), st.prov.get(("s", r)),
                                                    st.prov.get(("p", r >> 1))))
            if vcc:
                if st.vcc_salu:
                    need.setdefault("sgpr-salu-write", (_reg_text(first, n), st.prov.get(("vcc",)),
                                                        st.prov.get(("p", pair))))
                if st.vcc_valu and is_valu:
                    need.setdefault("vcc-valu-write", (_reg_text(first, n), st.prov.get(("vcc",)),
                                                       st.prov.get(("p", pair))))
    if need:
        if out is not None:
            for rule, (reg, writer, risk) in need.items():
                out.append(Finding(rule, addr, name, reg, writer, risk, FIX[rule]))
        if "vcc-valu-write" in need:
            st.vcc_valu = False
        if "sgpr-salu-write" in need:
            st.salu = 0
            st.vcc_salu = False
        if "sgpr-valu-write" in need:
            st.valu = 0
    if eff.call:
        st.tracked = (1 << 64) - 1
    for first, n in eff.defs:
        pair = first >> 1
        if not st.tracked >> pair & 1:
            continue
        if first in (VCC_LO, VCC_HI):
            st.vcc_salu, st.vcc_valu = (not is_valu, is_valu)
            st.prov[("vcc",)] = addr
        else:
            if is_valu:
                st.valu |= _bits(first, n)
            else:
                st.salu |= _bits(first, n)
            for r in range(first, first + n):
                st.prov[("s", r)] = addr


def _target(inst) -> int | None:
    """Where a direct branch goes (PC + 4 + simm16 * 4), None for any other instruction."""
    if inst.name == "s_branch" or inst.name.startswith("s_cbranch_"):
        simm = inst.f.get("simm16", 0) & 0xFFFF
        return inst.offset + 4 + 4 * (simm - 0x10000 if simm & 0x8000 else simm)
    return None


def _long_branches(insts) -> dict[int, int]:
    """index of an s_setpc_b64 -> its target, for LLVM's long branch (branch relaxation): s_getpc_b64 s[a:a+1];
    s_add_co_u32 sa, sa, lo; s_add_co_ci_u32 sa+1, sa+1, hi; s_setpc_b64 s[a:a+1] (s_wait_alu between). Such a
    jump is an edge of the function's graph, not a call or return."""
    out = {}
    for k, inst in enumerate(insts):
        if inst.name != "s_setpc_b64":
            continue
        a = inst.f.get("ssrc0")
        seq = [i for i in insts[max(0, k - 6):k] if i.name != "s_wait_alu"][-3:]
        if len(seq) != 3 or [i.name for i in seq] != ["s_getpc_b64", "s_add_co_u32", "s_add_co_ci_u32"]:
            continue
        get, lo, hi = seq
        if get.f.get("sdst") != a or lo.f.get("sdst") != a or hi.f.get("sdst") != a + 1:
            continue

        def imm(i):
            c = i.f.get("ssrc1")
            if c == 255:
                return i.literal
            if 128 <= c <= 192:
                return c - 128
            if 193 <= c <= 208:
                return (128 - c - 64) & 0xFFFFFFFF
            return None
        lo_v, hi_v = imm(lo), imm(hi)
        if lo.f.get("ssrc0") != a or hi.f.get("ssrc0") != a + 1 or lo_v is None or hi_v is None:
            continue
        out[k] = (get.offset + get.size + (hi_v << 32 | lo_v)) & (1 << 64) - 1
    return out


def _blocks(insts, long_br) -> tuple[list[tuple[int, int]], list[list[int]]]:
    """Basic blocks (first, end index) and successor block numbers. A target outside the function (or between
    instructions) leads to the first instruction at or after it."""
    n = len(insts)
    addrs = [i.offset for i in insts]
    def index_of(a):
        k = bisect.bisect_left(addrs, a)
        return k if k < n else None
    leaders = {0}
    for k, inst in enumerate(insts):
        t = long_br.get(k, _target(inst))
        if t is not None:
            j = index_of(t)
            if j is not None and addrs[0] <= t:
                leaders.add(j)
            if k + 1 < n:
                leaders.add(k + 1)
        elif (inst.name in SETPC or inst.name in ("s_endpgm", "s_code_end")) and k + 1 < n:
            leaders.add(k + 1)
    starts = sorted(x for x in leaders if x < n)
    blocks = [(s, starts[i + 1] if i + 1 < len(starts) else n) for i, s in enumerate(starts)]
    block_of = {s: b for b, (s, _) in enumerate(blocks)}
    succs = []
    for b, (s, e) in enumerate(blocks):
        last = insts[e - 1]
        out = []
        t = long_br.get(e - 1, _target(last))
        if t is not None:
            j = index_of(t)
            if j is not None and addrs[0] <= t:
                out.append(block_of[j])
        ends = last.name in ("s_branch", "s_endpgm", "s_code_end", "s_setpc_b64", "s_rfe_b64")
        if not ends and e < n:
            out.append(b + 1)
        succs.append(out)
    return blocks, succs


def analyze(insts) -> list[Finding]:
    """The findings of one function (decoded instructions in address order; the entry is the first)."""
    insts = list(insts)
    if not insts:
        return []
    fxs = [facts(i) for i in insts]
    effs = [sgpr_effect(i, f) for i, f in zip(insts, fxs)]
    long_br = _long_branches(insts)
    for k in long_br:                         # an ordinary SALU read of its target pair, no flush
        effs[k] = SgprEffect("salu", _sgpr_ops(fxs[k], True), ())
    blocks, succs = _blocks(insts, long_br)
    # 0: no effect on any rule; 1: a VALU with no scalar operands (ends a WMMA / v_cmpx run only); 2: the full step
    plain = [0 if (e.kind in (None, "salu") and not e.uses and not e.defs) else
             1 if (e.kind == "valu" and not e.uses and not e.defs and f.cls != "WMMA" and not is_permlane(f.name)
                   and not vcmpx_writes_exec(f) and f.name != "v_nop") else 2 for e, f in zip(effs, fxs)]

    def run(st, s, e, out):
        dsnops = [0]
        for k in range(s, e):
            p = plain[k]
            if p == 2:
                _step(st, insts[k], fxs[k], effs[k], out, dsnops)
            else:
                dsnops[0] = 0
                if p == 1:
                    st.wmma = 0
                    st.vcmpx = False
    # every block starts empty (a block no branch reaches, e.g. after a call's return, too) and is visited once;
    # a block whose out-state grew hands it to its successors (merge = union), until nothing changes: the state
    # only grows and every back-edge merges, so this ends [LLVM-SH run]
    ins = [_State() for _ in blocks]
    npreds = [0] * len(blocks)
    for out in succs:
        for c in out:
            npreds[c] += 1
    outs: list[tuple | None] = [None] * len(blocks)
    work = list(range(len(blocks) - 1, -1, -1))
    queued = set(work)
    while work:
        b = work.pop()
        queued.discard(b)
        st = ins[b].copy()
        run(st, *blocks[b], None)
        key = st.key()
        if outs[b] == key:
            continue
        outs[b] = key
        for c in succs[b]:
            if npreds[c] == 1 and c != 0:     # its one way in: replaced (a fix needed only once the state grew
                changed = ins[c].key() != key  # drops what an earlier, smaller state left) [LLVM-SH run]
                if changed:
                    ins[c] = st.copy()
            else:
                changed = ins[c].merge(st)
            if changed and c not in queued:
                work.append(c)
                queued.add(c)
    found: list[Finding] = []
    for b, (s, e) in enumerate(blocks):
        run(ins[b].copy(), s, e, found)
    return found
