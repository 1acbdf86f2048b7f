"""The one import point of the performance model for instruction facts: class, register reads/writes, access width.

Every classification the model makes goes through this module, and this module takes them from the project's one
instruction-facts layer, sage_co/emu/facts.py (the emulator's statistics, sanitizer and the lint use the same):
the class of a mnemonic (facts.class_of via disasm_check.classify) and, for decoded instructions (every Line of
disasm_check.disassemble carries the emulator's decoded `inst`), the registers read and written (facts(inst)).
Hand-written streams (the synthetic calibration stream, unit tests) have no decoded instruction: their operands are
read from the text by `text_reads_writes`, which tests/perfmodel/test_perf_model.py checks against facts on every
shipped and
calibration instruction.
"""
from __future__ import annotations

import re

from disasm_check import Line as Inst  # noqa: F401
from disasm_check import classify, disassemble, parse_objdump  # noqa: F401
from perfmodel.hardware import LANES
from sage_co.emu.facts import CLASSES, facts  # noqa: F401


def access_bytes(mnemonic: str) -> int:
    """Bytes per lane of one LDS/VMEM access (a 2addr access: both halves)."""
    m = re.search(r"_b(\d+)$", mnemonic.replace("_tr_b", "_b"))
    if m:
        per_lane = int(m.group(1)) // 8
    elif re.search(r"_(u8|i8|b8)(_|$)", mnemonic):
        per_lane = 1
    elif re.search(r"_(u16|i16|b16|d16)", mnemonic):
        per_lane = 2
    else:
        per_lane = 4     # ds_bpermute_b32 etc. end in _b32 (caught above); atomics without width: one dword
    if "2addr" in mnemonic:
        per_lane *= 2
    return per_lane


def wave_bytes(mnemonic: str) -> int:
    """Bytes per wave of one LDS/VMEM access, all 32 lanes active."""
    return access_bytes(mnemonic) * LANES


# ------------------------------------------------------------------------------------------- reads / writes
# register numbering for the simulator's scoreboard: v0..v255, s0..s127, then the named registers
SGPR0 = 256
NAMED = {"vcc_lo": 384, "vcc": 384, "vcc_hi": 385, "exec_lo": 386, "exec": 386, "exec_hi": 387, "scc": 388,
         "m0": 389}
NREGS = 390
_REG = re.compile(r"\b([vs])\[(\d+):(\d+)\]|\b([vs])(\d+)\b|\b(vcc_lo|vcc_hi|vcc|exec_lo|exec_hi|exec|m0)\b")
_MODIFIER = re.compile(r"\b[a-z_][a-z_0-9]*:(\[[^\]]*\]|\S+)")
_NO_DST = ("ds_store", "ds_write", "global_store", "buffer_store", "flat_store", "scratch_store", "s_wait",
           "s_barrier", "s_delay_alu", "s_nop", "s_cbranch", "s_branch", "s_endpgm", "s_sendmsg", "s_setprio",
           "s_sleep", "s_cmp", "s_bitcmp", "v_cmpx", "s_prefetch", "global_inv", "global_wb", "s_code_end",
           "s_clause", "s_icache")
_SCC_WRITERS = ("s_cmp", "s_bitcmp", "s_add_", "s_sub_", "s_addc", "s_subb", "s_and", "s_or", "s_xor", "s_nand",
                "s_nor", "s_xnor", "s_lsh", "s_ash", "s_min", "s_max", "s_not", "s_bfe", "s_abs", "s_addk")
_SCC_READERS = ("s_cselect", "s_cmov", "s_addc", "s_subb", "s_cbranch_scc")
_READS_DST = ("fmac", "dot2acc", "v_cvt_pk_fp8", "v_cvt_pk_bf8", "v_cvt_sr_", "v_permlane", "v_writelane",
              "v_mac_")


def _regs(text: str) -> list[int]:
    out = []
    for m in _REG.finditer(text):
        if m.group(1):
            base = 0 if m.group(1) == "v" else SGPR0
            out += range(base + int(m.group(2)), base + int(m.group(3)) + 1)
        elif m.group(4):
            out.append((0 if m.group(4) == "v" else SGPR0) + int(m.group(5)))
        else:
            out.append(NAMED[m.group(6)])
    return out


# facts' scalar operand codes (sage_co/emu/facts.py) -> the scoreboard numbering
_SCALAR = {106: NAMED["vcc_lo"], 107: NAMED["vcc_hi"], 125: NAMED["m0"], 126: NAMED["exec_lo"],
           127: NAMED["exec_hi"]}


def register_number(k) -> int:
    """facts' register key -> scoreboard number. A 16-bit half ('v.l' / 'v.h') counts as its whole VGPR (the
    scoreboard tracks registers, not halves: a conservative dependency)."""
    kind, n = k
    return n if kind.startswith("v") else _SCALAR.get(n, SGPR0 + n)


def reads_writes(ins: Inst) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(registers read, registers written) of one instruction in the scoreboard numbering: from facts(inst) when the
    instruction was decoded, else from its operand text. SCC is the text rules' (facts does not name it)."""
    if ins.inst is None:
        return text_reads_writes(ins)
    f = facts(ins.inst)
    srcs, dsts = [register_number(k) for k in f.reads], [register_number(k) for k in f.writes]
    m = ins.mnemonic
    if m.startswith(_SCC_READERS):
        srcs.append(NAMED["scc"])
    if m.startswith("s_") and m.startswith(_SCC_WRITERS) and "_nc_" not in m:
        dsts.append(NAMED["scc"])
    return tuple(dict.fromkeys(srcs)), tuple(dict.fromkeys(dsts))


def text_reads_writes(ins: Inst) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(registers read, registers written) read off the operand text (hand-written streams without a decoded
    instruction), in the scoreboard numbering."""
    m, c = ins.mnemonic, classify(ins.mnemonic)
    ops = ins.operands
    halves = [(m, ops)]
    if "::" in ops:                 # VOPD: X and Y halves, each "dst, srcs"
        x, y = ops.split("::", 1)
        ym, _, yops = y.strip().partition(" ")
        halves = [(m, x), (ym, yops)]
    srcs, dsts = [], []
    for hm, hops in halves:
        parts = [p.strip() for p in _MODIFIER.sub("", hops).split(",") if p.strip()]
        if not parts:
            continue
        if hm.startswith(_NO_DST) or c in ("BRANCH", "WAIT_OTHER"):
            srcs += _regs(",".join(parts))
        else:
            d = _regs(parts[0])
            dsts += d
            rest = parts[1:]
            # VOP3b carry-out (v_add_co_u32 v0, vcc_lo, ...): the second operand is a destination too
            if "_co_" in hm and hm.startswith("v_") and rest and _regs(rest[0]) and _regs(rest[0])[0] >= SGPR0:
                dsts += _regs(rest[0])
                rest = rest[1:]
            srcs += _regs(",".join(rest))
            if any(k in hm for k in _READS_DST):
                srcs += d                               # accumulates into / merges with its destination
        if hm.startswith(_SCC_READERS):
            srcs.append(NAMED["scc"])
        if hm.startswith("s_") and hm.startswith(_SCC_WRITERS) and "_nc_" not in hm:
            dsts.append(NAMED["scc"])
    if m.startswith("s_cbranch_vcc"):
        srcs.append(NAMED["vcc_lo"])
    if m.startswith("s_cbranch_exec"):
        srcs.append(NAMED["exec_lo"])
    if m.startswith("v_cmpx"):
        dsts.append(NAMED["exec_lo"])
    return tuple(dict.fromkeys(srcs)), tuple(dict.fromkeys(dsts))
