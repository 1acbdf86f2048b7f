"""The one layer of instruction facts: class, register reads/writes, TRANS, VOPD legality, wait-counter kind.

Built on the decoder's `Inst` and the generated opcode tables (opcodes.py); the emulator's statistics and sanitizer,
the hazard lint (tools/disasm_check.py), asm_src/asmdsl.py's VOPD pairing and the performance model all take their
instruction facts from here, so they cannot disagree.

    facts(inst) -> InstFacts        # cls, reads, writes, trans, wait_kind, returns_data, operands
    class_of(name, returns=False)   # class of a bare mnemonic (text tools); `returns`: an atomic with return
    is_trans(name)
    VOPD_FORMS, VOPD_PLAIN          # VOP2 mnemonic -> v_dual_* name (both halves; PLAIN: dst = f(src0, vsrc1))
    vopd_pair_problem(...)          # why two VOPD halves may not pair, or None (docs/rdna4.md §Throughput)

Register keys are ('v', n) for VGPR n and ('s', code) for a scalar register by its operand code (s0-s105,
vcc_lo/hi 106/107, ttmp0-15 108-123, m0 125, exec_lo/hi 126/127). Reads and writes follow the operand semantics,
not the encoding fields: a field the instruction does not use (the vsrc1 of a VOPD v_dual_mov_b32, the vaddr of a
scratch_* access with `off`, the saddr of a global access with `off`) is no operand; implied operands (VCC of
v_cndmask_b32 / carry ops, the accumulator of v_fmac_*, EXEC of v_cmpx_* and s_*saveexec) are.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from sage_co.emu.decode import HALVES, OPS
from sage_co.emu.opcodes import VOPD_X, VOPD_Y
from sage_co.emu.state import EXEC, NULL, VCC

# Instruction classes of the run statistics and the static mixes (docs/emulator.md §Statistics).
CLASSES = ("SALU", "VALU", "TRANS", "WMMA", "SMEM", "VMEM_LOAD", "VMEM_STORE", "LDS", "BRANCH", "WAIT_OTHER")
# Wait counters an instruction can increment (docs/rdna4.md §Waits): LOADcnt, STOREcnt, DScnt, KMcnt.
WAIT_KINDS = ("load", "store", "ds", "km")
WAIT_COUNTER = {"load": "loadcnt", "store": "storecnt", "ds": "dscnt", "km": "kmcnt"}

# TRANS: LLVM VOP1Instructions.td marks exp/log/rcp/rcp_iflag/rsq/sqrt/sin/cos (f16, f32; rcp/rsq/sqrt f64)
# `TRANS = 1`, and the gfx12 pseudo-scalar v_s_* forms of exp/log/rcp/rsq/sqrt (docs/rdna4.md §Throughput).
_TRANS = re.compile(r"^v_(s_)?(exp|log|rcp|rcp_iflag|rsq|sqrt|sin|cos)_(f16|f32|f64)$")
# Program-flow changes (the BRANCH class): branches, jumps through SGPRs, and the end of the program.
_BRANCH = ("s_branch", "s_cbranch_", "s_setpc_", "s_swappc_", "s_call_", "s_rfe_", "s_endpgm")
# Jumps whose target is not a SOPP branch offset: calls and returns (docs/rdna4.md §Calls). A program containing one
# may reach any function of its code object.
CALL_INSTS = frozenset({"s_setpc_b64", "s_swappc_b64", "s_call_b64"})
# SOP1 synchronisation that the statistics count with waits: barriers and messages.
_WAIT_SOP1 = ("s_barrier_", "s_sendmsg_rtn_", "s_sleep_var", "s_get_barrier_state")

# Operands an instruction uses that its printed template does not show (LLVM: tied `$vdst_in`, implicit VCC/EXEC).
READS_VDST = re.compile(r"^v_(dual_)?(fmac_|pk_fmac_|dot2acc_|dot2c_|permlane16_b32|permlanex16_b32|writelane_b32)")
READS_VCC = ("v_cndmask_b32", "v_add_co_ci_u32", "v_sub_co_ci_u32", "v_subrev_co_ci_u32", "v_dual_cndmask_b32",
             "s_cbranch_vccz", "s_cbranch_vccnz")
WRITES_VCC_E32 = ("v_add_co_ci_u32", "v_sub_co_ci_u32", "v_subrev_co_ci_u32")
# VOP3-only instructions whose VCC read is implied in every encoding (LLVM: `Uses = [VCC, ...]`)
READS_VCC_VOP3 = ("v_div_fmas_f32", "v_div_fmas_f64")


@dataclass(frozen=True, slots=True)
class Operand:
    field: str               # decoder field name ('src0', 'vdst', 'saddr', ... or 'implied')
    regs: tuple              # register keys
    read: bool
    write: bool


@dataclass(frozen=True, slots=True)
class InstFacts:
    name: str
    cls: str                 # one of CLASSES
    trans: bool
    wait_kind: str | None    # counter the instruction increments (WAIT_KINDS), or None
    returns_data: bool       # its destination registers are written when that counter says so (loads, atomics
    #                          with return), not at issue
    reads: tuple             # register keys, in operand order, without repeats
    writes: tuple
    operands: tuple          # Operand per used field, in template order

    def regs(self, field: str) -> tuple:
        """Register keys of one operand field (empty when the instruction does not use that field)."""
        for op in self.operands:
            if op.field == field:
                return op.regs
        return ()

    def vgprs(self, field: str) -> set[int]:
        return {n for k, n in self.regs(field) if k in ("v", "v.l", "v.h")}


# ------------------------------------------------------------------------------------------------ classes
def is_trans(name: str) -> bool:
    return _TRANS.match(name) is not None


def class_of(name: str, returns: bool = False) -> str:
    """Class of a bare mnemonic (no _e32/_e64/_dpp). `returns`: the instruction is an atomic with return
    (`th:TH_ATOMIC_RETURN`), which LLVM counts with the loads (LOADcnt), not the stores."""
    n = name
    if n.startswith(("v_wmma", "v_swmmac")):
        return "WMMA"
    if n.startswith("v_"):
        return "TRANS" if is_trans(n) else "VALU"
    if n.startswith("ds_"):
        return "LDS"
    if n.startswith(("global_", "buffer_", "flat_", "scratch_")):
        if n.startswith(("global_inv",)) or "_load" in n:
            return "VMEM_LOAD"
        if "_atomic" in n:
            return "VMEM_LOAD" if returns else "VMEM_STORE"
        return "VMEM_STORE"
    if n.startswith(("s_load", "s_buffer_load", "s_prefetch", "s_buffer_prefetch", "s_dcache", "s_atc_probe")):
        return "SMEM"
    if n.startswith(_BRANCH):
        return "BRANCH"
    if n.startswith("s_"):
        enc = _ENC_OF.get(n)
        if enc == "SOPP" or n.startswith(_WAIT_SOP1):
            return "WAIT_OTHER"
        return "SALU"
    raise ValueError(f"instruction {name!r}: no class (expected v_*, s_*, ds_*, global_*, buffer_*, flat_*, "
                     f"scratch_*)")


_ENC_OF = {}
for _enc, _table in OPS.items():
    for _op, (_asm, _name, _tpl) in _table.items():
        _ENC_OF.setdefault(_name, _enc)


def wait_kind_of(name: str, cls: str, returns: bool) -> str | None:
    if cls == "VMEM_LOAD":
        return "load"
    if cls == "VMEM_STORE":
        return "store"
    if cls == "LDS":
        return None if name == "ds_nop" else "ds"
    if cls == "SMEM":
        return "km" if name.startswith(("s_load", "s_buffer_load")) else None
    if name.startswith("s_sendmsg_rtn_"):
        return "km"
    return None


# ------------------------------------------------------------------------------------------------ registers
def _vkeys(first: int, n: int) -> tuple:
    return tuple(("v", first + i) for i in range(n))


def _skeys(code: int, n: int) -> tuple:
    """Scalar register keys of an operand code (constants, literal, null, scc: none)."""
    if code < 106 or 106 <= code <= 107 or 108 <= code <= 123 or code in (125, 126, 127):
        return tuple(("s", code + i) for i in range(n))
    return ()


def _half(keys: tuple, hi) -> tuple:
    """VGPR keys of a 16-bit access: ('v.l', n) / ('v.h', n) (hi None: the whole register)."""
    if hi is None:
        return keys
    return tuple(("v.h" if hi else "v.l", n) if k == "v" else (k, n) for k, n in keys)


def _mem_half(name: str, load: bool):
    """Which half of its data VGPR a memory access touches: d16 loads write one half (the other is kept), b8/b16
    stores read the low half, d16_hi stores the high one; None: whole registers."""
    if "_d16_hi" in name:
        return 1
    if (load and "_d16" in name) or (not load and name.endswith(("_b16", "_b8"))):
        return 0
    return None


def _src_keys(code: int, n: int) -> tuple:
    """An operand code that may name a VGPR (256+) or a scalar register."""
    return _vkeys(code - 256, n) if code >= 256 else _skeys(code, n)


def _vopd_half(inst, half: int) -> list[Operand]:
    f = inst.f
    table, (s0, s1, vd) = ((VOPD_X, ("srcx0", "vsrcx1", "vdstx")) if half == 0 else
                           (VOPD_Y, ("srcy0", "vsrcy1", "vdsty")))
    name, tpl = table[f["opx" if half == 0 else "opy"]]
    out = []
    for field, n, _rf in tpl:
        if field == vd:
            out.append(Operand(field, _vkeys(f[vd], 1), bool(READS_VDST.match(name)), True))
        elif field == s0:
            out.append(Operand(field, _src_keys(f[s0], 1), True, False))
        elif field == s1:
            out.append(Operand(field, _vkeys(f[s1], 1), True, False))
    if name in READS_VCC:
        out.append(Operand("implied", _skeys(VCC, 1), True, False))
    return out


def _mem_operands(inst, tpl, returns: bool) -> list[Operand]:
    enc, f, name = inst.enc, inst.f, inst.name
    out = []
    for field, n, _rf in tpl:
        if field.startswith("="):
            continue
        code = f.get(field)
        if code is None:
            continue
        if enc in ("VGLOBAL", "VFLAT", "VSCRATCH"):
            saddr_off = f.get("saddr", NULL) == NULL
            if field == "saddr":
                if not saddr_off:
                    out.append(Operand(field, _skeys(code, 1 if enc == "VSCRATCH" else 2), True, False))
                continue
            if field == "vaddr":
                if enc == "VSCRATCH" and not f.get("sve"):
                    continue                       # scratch with `off`: no VGPR address
                width = 2 if (enc == "VFLAT" or (enc == "VGLOBAL" and saddr_off)) else 1
                out.append(Operand(field, _vkeys(code, width), True, False))
                continue
            if field == "vdst":
                out.append(Operand(field, _half(_vkeys(code, n), _mem_half(name, True)), False, True))
                continue
            if field == "vsrc":
                out.append(Operand(field, _half(_vkeys(code, n), _mem_half(name, "_atomic" in name)), True, False))
                if "_atomic" in name and returns and not any(t[0] == "vdst" for t in tpl):
                    width = n // 2 if "cmpswap" in name else n
                    out.append(Operand("vdst", _vkeys(f["vdst"], width), False, True))
                continue
        if enc == "VBUFFER":
            if field == "vaddr":
                width = int(bool(f.get("offen"))) + int(bool(f.get("idxen")))
                if width:
                    out.append(Operand(field, _vkeys(code, width), True, False))
                continue
            if field == "rsrc":
                out.append(Operand(field, _skeys(code, 4), True, False))
                continue
            if field == "soffset":
                if code != NULL:
                    out.append(Operand(field, _skeys(code, 1), True, False))
                continue
            if field == "vdata":
                width = n + int(bool(f.get("tfe")))
                if "_load" in name:
                    out.append(Operand(field, _half(_vkeys(code, width), _mem_half(name, True)), False, True))
                elif "_atomic" in name and returns:
                    ret = n // 2 if "cmpswap" in name else n
                    out.append(Operand(field, _vkeys(code, n), True, False))
                    out.append(Operand("vdata_ret", _vkeys(code, ret), False, True))
                else:
                    out.append(Operand(field, _half(_vkeys(code, n), _mem_half(name, False)), True, False))
                continue
        if enc == "DS":
            if field == "vdst":
                out.append(Operand(field, _half(_vkeys(code, n), _mem_half(name, True)), False, True))
            elif field in ("data0", "data1") and name.startswith("ds_store"):
                out.append(Operand(field, _half(_vkeys(code, n), _mem_half(name, False)), True, False))
            else:
                out.append(Operand(field, _vkeys(code, n), True, False))
            continue
        if enc == "SMEM":
            if field == "sdata":
                out.append(Operand(field, _skeys(code, n), False, True))
            else:
                out.append(Operand(field, _skeys(code, n), True, False))
            continue
    if enc == "SMEM" and f.get("soffset", NULL) != NULL and name.startswith(("s_load", "s_buffer_load")):
        out.append(Operand("soffset", _skeys(f["soffset"], 1), True, False))
    return out


def _alu_operands(inst, tpl) -> list[Operand]:
    enc, f, name = inst.enc, inst.f, inst.name
    out = []
    scalar_dst = enc in ("SOP1", "SOP2", "SOPK")
    # true16 halves: in VOP1/VOP2/VOPC the VGPR field = register [6:0] | half << 7; in VOP3 the half is op_sel
    e32 = enc in ("VOP1", "VOP2", "VOPC")
    halves = HALVES.get("VOP3" if enc == "VOP3SD" else enc, {}).get(inst.opcode, ())
    opsel = inst.f.get("opsel", 0) if enc == "VOP3" else 0
    for item in tpl:
        field, n = item[0], item[1]
        if field.startswith("=") or n == 0:
            continue
        code = f.get(field)
        if code is None:
            continue
        rf = item[2] if len(item) > 2 else ""
        if field == "src0" and inst.dpp is not None:
            code = 256 + inst.dpp["src0"]
        hi = None
        if field in halves:
            plain = field in ("vdst", "vsrc1")             # VGPR-only fields hold a bare register number
            if e32 and (code >= 256 or plain):
                reg = code - 256 if code >= 256 else code
                hi, reg = reg >> 7, reg & 127
                code = 256 + reg if code >= 256 else reg
            elif not e32:
                hi = opsel >> {"src0": 0, "src1": 1, "src2": 2, "vdst": 3}.get(field, 0) & 1
        if field in ("vdst", "sdst"):
            if scalar_dst or field == "sdst" or rf == "s":
                keys = _skeys(code, n)
            else:
                keys = _vkeys(code, n)
            reads_dst = bool(READS_VDST.match(name)) or name in ("s_cmov_b32", "s_cmov_b64", "s_cmovk_i32",
                                                                  "s_addk_co_i32", "s_mulk_i32", "s_fmac_f32",
                                                                  "s_fmac_f16", "s_bitset0_b32", "s_bitset1_b32",
                                                                  "s_bitset0_b64", "s_bitset1_b64")
            keys = _half(keys, hi)
            if name in ("s_setreg_b32",):            # SOPK: the sdst field is the source
                out.append(Operand(field, keys, True, False))
            else:
                out.append(Operand(field, keys, reads_dst, True))
        elif field == "vsrc1":
            out.append(Operand(field, _half(_vkeys(code, n), hi), True, False))
        else:
            out.append(Operand(field, _half(_src_keys(code, n), hi), True, False))
    # implied operands
    if (name in READS_VCC and (enc in ("VOP2", "SOPP", "VOPD"))) or name in READS_VCC_VOP3:
        out.append(Operand("implied", _skeys(VCC, 1), True, False))
    if enc == "VOP2" and name in WRITES_VCC_E32:
        out.append(Operand("implied", _skeys(VCC, 1), False, True))
    if enc == "VOPC" and not name.startswith("v_cmpx"):
        out.append(Operand("implied", _skeys(VCC, 1), False, True))
    if name.startswith("v_cmpx") or name.endswith(("_saveexec_b32", "_wrexec_b32")):
        out.append(Operand("implied", _skeys(EXEC, 1), True, True))
    if name in ("s_cbranch_execz", "s_cbranch_execnz"):
        out.append(Operand("implied", _skeys(EXEC, 1), True, False))
    return out


def _dedup(keys) -> tuple:
    return tuple(dict.fromkeys(keys))


def facts(inst) -> InstFacts:
    """Facts of one decoded instruction (sage_co.emu.decode.Inst)."""
    f, dpp0 = inst.f, None if inst.dpp is None else inst.dpp.get("src0")
    got = _BY_FIELDS.get(id(f))
    if got is not None and got[0] is f and got[1] == inst.enc and got[2] == inst.opcode and got[3] == dpp0:
        return got[4]
    key = (inst.enc, inst.opcode, tuple(f.items()), dpp0)      # decode() builds f in one order per encoding
    out = _facts(key, inst)
    _BY_FIELDS[id(f)] = (f, inst.enc, inst.opcode, dpp0, out)
    return out


_CACHE: dict = {}          # facts by (enc, opcode, fields, DPP src0): decoded instructions repeat
# decode() gives every copy of one encoding the same (read-only) field mapping: facts by that object's id skip
# building the key above (a million instructions per prepare code object). The entry holds the mapping, so the id
# cannot be reused by another object while the entry exists.
_BY_FIELDS: dict = {}


def _facts(key, inst) -> InstFacts:
    got = _CACHE.get(key)
    if got is not None:
        return got
    enc, name = inst.enc, inst.name
    returns = False
    if enc in ("VGLOBAL", "VFLAT", "VBUFFER") and "_atomic" in name:
        returns = bool(inst.f.get("th", 0) & 1)            # TH_ATOMIC_RETURN
    if enc == "DS" and "_rtn" in name:
        returns = True
    if enc == "VOPD":
        operands = _vopd_half(inst, 0) + _vopd_half(inst, 1)
        cls = "VALU"
    else:
        tpl = OPS["VOP3" if enc == "VOP3SD" else enc][inst.opcode][2]
        if enc in ("VGLOBAL", "VFLAT", "VSCRATCH", "VBUFFER", "DS", "SMEM"):
            operands = _mem_operands(inst, tpl, returns)
        else:
            operands = _alu_operands(inst, tpl)
        cls = class_of(name, returns)
    wk = wait_kind_of(name, cls, returns)
    data_back = (cls in ("VMEM_LOAD", "SMEM") and name != "global_inv" and wk is not None) or \
        (cls == "LDS" and any(o.write for o in operands))
    reads = _dedup(k for o in operands if o.read for k in o.regs)
    writes = _dedup(k for o in operands if o.write for k in o.regs)
    out = InstFacts(name, cls, cls == "TRANS", wk, data_back, reads, writes, tuple(operands))
    _CACHE[key] = out
    return out


# ------------------------------------------------------------------------------------------------ VOPD
def _vopd_names(table) -> dict[str, tuple]:
    return {name: tpl for name, tpl in table.values()}


_X, _Y = _vopd_names(VOPD_X), _vopd_names(VOPD_Y)
# VOP2 mnemonic -> v_dual_* mnemonic, for ops that have a form in both halves (docs/rdna4.md §Throughput VOPD rules)
VOPD_FORMS = {"v_" + n[len("v_dual_"):]: n for n in _X if n in _Y}
# ...whose whole meaning is vdst = f(src0[, vsrc1]): no tied accumulator, implied VCC or literal
VOPD_PLAIN = {k: v for k, v in VOPD_FORMS.items()
              if not READS_VDST.match(v) and v not in READS_VCC and not any(t[0] == "=LIT" for t in _X[v])}
VGPR_BANKS = 4          # docs/rdna4.md §Throughput VOPD rules: bank = VGPR % 4


def vopd_pair_problem(x_dst: int, y_dst: int, x_src0: int | None, y_src0: int | None, x_vsrc1: int | None,
                      y_vsrc1: int | None, literals: int = 0, sgprs: int = 0, both_mov: bool = False,
                      same_vgpr_ok: bool = False) -> str | None:
    """Why an X half and a Y half may not form one VOPD on gfx12, or None when they may (docs/rdna4.md §Throughput
    VOPD rules). VGPR numbers, None for a source that is no VGPR; literals / sgprs: distinct literals / SGPRs the
    pair reads; both_mov: both halves are v_dual_mov_b32 (then Y reads through the src2 source cache and the source
    bank rules do not apply); same_vgpr_ok: one VGPR read by both halves is no bank conflict (the hardware rule;
    LLVM 22.1.8's assembler still rejects it, so code meant for that assembler keeps the default False)."""
    if x_dst % 2 == y_dst % 2:
        return "destinations must be one even and one odd VGPR"

    def clash(a, b):
        return a is not None and b is not None and a % VGPR_BANKS == b % VGPR_BANKS and not (same_vgpr_ok and a == b)
    if not both_mov:
        if clash(x_src0, y_src0):
            return "src0 of both halves in one VGPR bank"
        if clash(x_vsrc1, y_vsrc1):
            return "vsrc1 of both halves in one VGPR bank"
    if literals > 1:
        return "more than one literal"
    if literals + sgprs > 2:
        return "more than two scalar values (SGPRs + literal)"
    return None


def vopd_problem(inst) -> str | None:
    """vopd_pair_problem of a decoded VOPD instruction, by the hardware rule (one VGPR in both halves is fine)."""
    f = inst.f

    def vg(code):
        return code - 256 if code >= 256 else None
    x_name, y_name = inst.name.split("|")
    x1 = f["vsrcx1"] if any(t[0] == "vsrcx1" for t in _X[x_name]) else None
    y1 = f["vsrcy1"] if any(t[0] == "vsrcy1" for t in _Y[y_name]) else None
    sgprs = {c for c in (f["srcx0"], f["srcy0"]) if c < 128 and c != NULL}
    if x_name == "v_dual_cndmask_b32" or y_name == "v_dual_cndmask_b32":
        sgprs.add(VCC)
    lits = int(inst.literal is not None)
    return vopd_pair_problem(f["vdstx"], f["vdsty"], vg(f["srcx0"]), vg(f["srcy0"]), x1, y1, lits, len(sgprs),
                             x_name == y_name == "v_dual_mov_b32", same_vgpr_ok=True)
