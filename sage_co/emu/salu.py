"""Scalar ALU (SOP1/SOP2/SOPK/SOPC) and program control (SOPP): branches, waits, barriers, s_endpgm.

Scalar values are [n] arrays over the selected waves (uint32, or uint64 for 64-bit operands).
"""
from __future__ import annotations

import numpy as np

from sage_co.emu import sanitizer
from sage_co.emu.state import ALL, END, EXEC, HWREG_MODE, MODE_FP16_OVFL, MODE_FP_BITS, VCC, EmuError, F

HWREG_SHADER_CYCLES_LO, HWREG_SHADER_CYCLES_HI = 29, 30   # gfx12 hwreg ids (sage_co/emu/opcodes.py HWREG)

U32, U64, I32, I64 = np.uint32, np.uint64, np.int32, np.int64
M32 = U64(0xFFFFFFFF)


def _i32(x):
    return np.asarray(x, dtype=U32).view(I32)


def _i64(x):
    return np.asarray(x, dtype=U64).view(I64)


def _sext16(v: int) -> int:
    return ((v & 0xFFFF) ^ 0x8000) - 0x8000


# name -> (wide_src0, wide_src1, wide_dst, fn(a, b, scc) -> (result | None, scc | None))
def _carry_add(a, b, c=0):
    s = a.astype(U64) + b.astype(U64) + (np.asarray(c).astype(U64))
    return (s & M32).astype(U32), (s >> U64(32)) != 0


def _carry_sub(a, b, c=0):
    a64, b64 = a.astype(I64), b.astype(I64) + np.asarray(c).astype(I64)
    return (a64 - b64).astype(U32), b64 > a64


def _sadd(a, b):
    r = (a.astype(U64) + b.astype(U64)).astype(U32)
    ai, bi, ri = _i32(a), _i32(b), _i32(r)
    return r, ((ai >= 0) == (bi >= 0)) & ((ri >= 0) != (ai >= 0))


def _ssub(a, b):
    r = (a.astype(I64) - b.astype(I64)).astype(U32)
    ai, bi, ri = _i32(a), _i32(b), _i32(r)
    return r, ((ai >= 0) != (bi >= 0)) & ((ri >= 0) != (ai >= 0))


def _nz(r):
    return r, r != 0


def _bfe_u(a, b, bits):
    off = b & U32(bits - 1) if bits == 32 else (b & U32(63)).astype(U64)
    w = (b >> U32(16)) & U32(0x7F)
    if bits == 32:
        sh = (a.astype(U64) >> off.astype(U64))
        mask = (U64(1) << np.minimum(w, 32).astype(U64)) - U64(1)
        return (sh & mask).astype(U32)
    sh = a >> off
    wd = np.minimum(w, 64).astype(U64)
    mask = np.where(wd >= 64, U64(0xFFFFFFFFFFFFFFFF), (U64(1) << np.minimum(wd, 63)) - U64(1))
    return sh & mask


def _bfe_i(a, b, bits):
    w = ((b >> U32(16)) & U32(0x7F)).astype(I64)
    u = _bfe_u(a, b, bits)
    if bits == 32:
        u64 = u.astype(I64)
        w = np.minimum(w, 32)
        sign = np.where(w > 0, (u64 >> np.maximum(w - 1, 0)) & 1, 0)
        r = np.where(sign == 1, u64 - (np.int64(1) << w), u64)
        return r.astype(I64).astype(U32)
    w = np.minimum(w, 64)
    ui = u.view(I64) if u.dtype == U64 else u.astype(U64).view(I64)
    shift = (64 - w).astype(U64)
    return np.where(w > 0, ((ui << shift.astype(I64)) >> shift.astype(I64)), 0).astype(I64).view(U64)


def _lshl_add(k):
    def f(a, b, scc):
        s = (a.astype(U64) << U64(k)) + b.astype(U64)
        return (s & M32).astype(U32), (s >> U64(32)) != 0
    return f


def _pack(lo_hi_a, lo_hi_b):
    def f(a, b, scc):
        x = (a >> U32(16)) if lo_hi_a else (a & U32(0xFFFF))
        y = (b >> U32(16)) if lo_hi_b else (b & U32(0xFFFF))
        return (x & U32(0xFFFF)) | (y << U32(16)), None
    return f


SOP2 = {
    "s_add_co_u32": (0, 0, 0, lambda a, b, c: _carry_add(a, b)),
    "s_sub_co_u32": (0, 0, 0, lambda a, b, c: _carry_sub(a, b)),
    "s_add_co_i32": (0, 0, 0, lambda a, b, c: _sadd(a, b)),
    "s_sub_co_i32": (0, 0, 0, lambda a, b, c: _ssub(a, b)),
    "s_add_co_ci_u32": (0, 0, 0, lambda a, b, c: _carry_add(a, b, c)),
    "s_sub_co_ci_u32": (0, 0, 0, lambda a, b, c: _carry_sub(a, b, c)),
    "s_absdiff_i32": (0, 0, 0, lambda a, b, c: _nz(np.abs(_i32(a).astype(I64) - _i32(b)).astype(U32))),
    "s_lshl_b32": (0, 0, 0, lambda a, b, c: _nz(a << (b & U32(31)))),
    "s_lshr_b32": (0, 0, 0, lambda a, b, c: _nz(a >> (b & U32(31)))),
    "s_ashr_i32": (0, 0, 0, lambda a, b, c: _nz((_i32(a) >> (b & U32(31)).astype(I32)).view(U32))),
    "s_lshl_b64": (1, 0, 1, lambda a, b, c: _nz(a << (b & U32(63)).astype(U64))),
    "s_lshr_b64": (1, 0, 1, lambda a, b, c: _nz(a >> (b & U32(63)).astype(U64))),
    "s_ashr_i64": (1, 0, 1, lambda a, b, c: _nz((_i64(a) >> (b & U32(63)).astype(I64)).view(U64))),
    "s_lshl1_add_u32": (0, 0, 0, _lshl_add(1)),
    "s_lshl2_add_u32": (0, 0, 0, _lshl_add(2)),
    "s_lshl3_add_u32": (0, 0, 0, _lshl_add(3)),
    "s_lshl4_add_u32": (0, 0, 0, _lshl_add(4)),
    "s_min_i32": (0, 0, 0, lambda a, b, c: (np.where(_i32(a) < _i32(b), a, b), _i32(a) < _i32(b))),
    "s_min_u32": (0, 0, 0, lambda a, b, c: (np.where(a < b, a, b), a < b)),
    "s_max_i32": (0, 0, 0, lambda a, b, c: (np.where(_i32(a) > _i32(b), a, b), _i32(a) > _i32(b))),
    "s_max_u32": (0, 0, 0, lambda a, b, c: (np.where(a > b, a, b), a > b)),
    "s_bfe_u32": (0, 0, 0, lambda a, b, c: _nz(_bfe_u(a, b, 32))),
    "s_bfe_i32": (0, 0, 0, lambda a, b, c: _nz(_bfe_i(a, b, 32))),
    "s_bfe_u64": (1, 0, 1, lambda a, b, c: _nz(_bfe_u(a, b, 64))),
    "s_bfe_i64": (1, 0, 1, lambda a, b, c: _nz(_bfe_i(a, b, 64))),
    "s_bfm_b32": (0, 0, 0, lambda a, b, c: (((U64(1) << (a & U32(31)).astype(U64)) - U64(1)).astype(U32)
                                            << (b & U32(31)), None)),
    "s_bfm_b64": (0, 0, 1, lambda a, b, c: (((U64(1) << (a & U32(63)).astype(U64)) - U64(1))
                                            << (b & U32(63)).astype(U64), None)),
    "s_mul_i32": (0, 0, 0, lambda a, b, c: ((a.astype(U64) * b.astype(U64)).astype(U32), None)),
    "s_mul_hi_u32": (0, 0, 0, lambda a, b, c: (((a.astype(U64) * b.astype(U64)) >> U64(32)).astype(U32), None)),
    "s_mul_hi_i32": (0, 0, 0, lambda a, b, c: (((_i32(a).astype(I64) * _i32(b).astype(I64)) >> 32)
                                               .astype(U32), None)),
    "s_cselect_b32": (0, 0, 0, lambda a, b, c: (np.where(c, a, b), None)),
    "s_cselect_b64": (1, 1, 1, lambda a, b, c: (np.where(c, a, b), None)),
    "s_pack_ll_b32_b16": (0, 0, 0, _pack(0, 0)),
    "s_pack_lh_b32_b16": (0, 0, 0, _pack(0, 1)),
    "s_pack_hl_b32_b16": (0, 0, 0, _pack(1, 0)),
    "s_pack_hh_b32_b16": (0, 0, 0, _pack(1, 1)),
    "s_add_nc_u64": (1, 1, 1, lambda a, b, c: (a + b, None)),
    "s_sub_nc_u64": (1, 1, 1, lambda a, b, c: (a - b, None)),
    "s_mul_u64": (1, 1, 1, lambda a, b, c: (a * b, None)),
}
for _w, _wide in (("b32", 0), ("b64", 1)):
    SOP2[f"s_and_{_w}"] = (_wide, _wide, _wide, lambda a, b, c: _nz(a & b))
    SOP2[f"s_or_{_w}"] = (_wide, _wide, _wide, lambda a, b, c: _nz(a | b))
    SOP2[f"s_xor_{_w}"] = (_wide, _wide, _wide, lambda a, b, c: _nz(a ^ b))
    SOP2[f"s_nand_{_w}"] = (_wide, _wide, _wide, lambda a, b, c: _nz(~(a & b)))
    SOP2[f"s_nor_{_w}"] = (_wide, _wide, _wide, lambda a, b, c: _nz(~(a | b)))
    SOP2[f"s_xnor_{_w}"] = (_wide, _wide, _wide, lambda a, b, c: _nz(~(a ^ b)))
    SOP2[f"s_and_not1_{_w}"] = (_wide, _wide, _wide, lambda a, b, c: _nz(a & ~b))
    SOP2[f"s_or_not1_{_w}"] = (_wide, _wide, _wide, lambda a, b, c: _nz(a | ~b))


def _popcount(x):
    x = np.asarray(x)
    return np.unpackbits(np.ascontiguousarray(x).view(np.uint8).reshape(len(x), -1), axis=1).sum(1).astype(U32)


def _ctz(x, bits):
    x = np.asarray(x).astype(U64)
    out = np.full(len(x), 0xFFFFFFFF, dtype=U64)
    for i in range(bits - 1, -1, -1):
        out = np.where((x >> U64(i)) & U64(1), U64(i), out)
    return out.astype(U32)


def _clz(x, bits):
    x = np.asarray(x).astype(U64)
    out = np.full(len(x), 0xFFFFFFFF, dtype=U64)
    for i in range(bits):
        out = np.where((x >> U64(i)) & U64(1), U64(bits - 1 - i), out)
    return out.astype(U32)


def _brev32(x):
    x = np.ascontiguousarray(np.asarray(x, dtype=U32).reshape(-1))
    bits = np.unpackbits(x.view(np.uint8).reshape(-1, 4), axis=1, bitorder="little")[:, ::-1]
    return np.packbits(np.ascontiguousarray(bits), axis=1, bitorder="little").view(U32)[:, 0]


# name -> (wide_src, wide_dst, fn(a, scc) -> (result, scc | None))
SOP1 = {
    "s_mov_b32": (0, 0, lambda a, c: (a, None)),
    "s_mov_b64": (1, 1, lambda a, c: (a, None)),
    "s_not_b32": (0, 0, lambda a, c: _nz(~a)),
    "s_not_b64": (1, 1, lambda a, c: _nz(~a)),
    "s_brev_b32": (0, 0, lambda a, c: (_brev32(a), None)),
    "s_bcnt1_i32_b32": (0, 0, lambda a, c: _nz(_popcount(np.asarray(a, dtype=U32)))),
    "s_bcnt1_i32_b64": (1, 0, lambda a, c: _nz(_popcount(np.asarray(a, dtype=U64)))),
    "s_bcnt0_i32_b32": (0, 0, lambda a, c: _nz(U32(32) - _popcount(np.asarray(a, dtype=U32)))),
    "s_ctz_i32_b32": (0, 0, lambda a, c: (_ctz(a, 32), None)),
    "s_ctz_i32_b64": (1, 0, lambda a, c: (_ctz(a, 64), None)),
    "s_clz_i32_u32": (0, 0, lambda a, c: (_clz(a, 32), None)),
    "s_clz_i32_u64": (1, 0, lambda a, c: (_clz(a, 64), None)),
    "s_sext_i32_i8": (0, 0, lambda a, c: ((a & U32(0xFF)).astype(np.uint8).view(np.int8).astype(I32).view(U32),
                                          None)),
    "s_sext_i32_i16": (0, 0, lambda a, c: ((a & U32(0xFFFF)).astype(np.uint16).view(np.int16).astype(I32)
                                           .view(U32), None)),
    "s_abs_i32": (0, 0, lambda a, c: _nz(np.abs(_i32(a).astype(I64)).astype(U32))),
    "s_bitset0_b32": (0, 0, None), "s_bitset1_b32": (0, 0, None),
}


SAVEEXEC = {
    "and": lambda s, e: s & e, "or": lambda s, e: s | e, "xor": lambda s, e: s ^ e,
    "nand": lambda s, e: ~(s & e), "nor": lambda s, e: ~(s | e), "xnor": lambda s, e: ~(s ^ e),
    # ISA: S_AND_NOT0_SAVEEXEC EXEC = ~S0 & EXEC; S_AND_NOT1_SAVEEXEC EXEC = S0 & ~EXEC (old s_andn1/s_andn2)
    "and_not0": lambda s, e: ~s & e, "or_not0": lambda s, e: ~s | e,
    "and_not1": lambda s, e: s & ~e, "or_not1": lambda s, e: s | ~e,
}

SOPC = {
    "eq_i32": lambda a, b: _i32(a) == _i32(b), "lg_i32": lambda a, b: _i32(a) != _i32(b),
    "gt_i32": lambda a, b: _i32(a) > _i32(b), "ge_i32": lambda a, b: _i32(a) >= _i32(b),
    "lt_i32": lambda a, b: _i32(a) < _i32(b), "le_i32": lambda a, b: _i32(a) <= _i32(b),
    "eq_u32": lambda a, b: a == b, "lg_u32": lambda a, b: a != b, "gt_u32": lambda a, b: a > b,
    "ge_u32": lambda a, b: a >= b, "lt_u32": lambda a, b: a < b, "le_u32": lambda a, b: a <= b,
    "eq_u64": lambda a, b: a == b, "lg_u64": lambda a, b: a != b,
}

# SOPP no-ops: scheduling hints, clause markers, priority, perf counters, padding (s_code_end is never reached by
# a correct kernel but is explicit here so that running off the end is the only failure mode, not a silent skip).
SOPP_NOP = {"s_nop", "s_delay_alu", "s_wait_alu", "s_clause", "s_setprio", "s_incperflevel",
            "s_decperflevel", "s_ttracedata", "s_ttracedata_imm", "s_icache_inv", "s_wait_idle", "s_wait_event",
            "s_wakeup", "s_wait_expcnt", "s_wait_samplecnt", "s_wait_bvhcnt"}


def build(st, ops, inst, pc):
    name, enc = inst.name, inst.enc
    if enc == "SOPP":
        return _sopp(st, ops, inst, pc)
    if enc == "SOP2":
        if name in SOP2:
            w0, w1, wd, fn = SOP2[name]
            a, b = ops.sread(inst, F(inst, "ssrc0"), w0), ops.sread(inst, F(inst, "ssrc1"), w1)
            wr = ops.swrite(F(inst, "sdst"), wd)
            SCC = st.SCC

            def h(sel):
                r, c = fn(a(sel), b(sel), SCC[sel])
                if c is not None:
                    SCC[sel] = c
                wr(sel, r)
            return h
        return None
    if enc == "SOP1":
        d, s0 = F(inst, "sdst"), F(inst, "ssrc0")
        SCC = st.SCC
        if name in SOP1 and SOP1[name][2] is not None:
            ws, wd, fn = SOP1[name]
            a, wr = ops.sread(inst, s0, ws), ops.swrite(d, wd)

            def h(sel):
                r, c = fn(a(sel), SCC[sel])
                if c is not None:
                    SCC[sel] = c
                wr(sel, r)
            return h
        if name in ("s_bitset0_b32", "s_bitset1_b32"):
            a, cur, wr = ops.sread(inst, s0), ops.sread(inst, d), ops.swrite(d)
            if name.endswith("0"):
                return lambda sel: wr(sel, cur(sel) & ~(U32(1) << (a(sel) & U32(31))))
            return lambda sel: wr(sel, cur(sel) | (U32(1) << (a(sel) & U32(31))))
        if name in ("s_cmov_b32", "s_cmov_b64"):
            wide = name.endswith("64")
            a, cur, wr = ops.sread(inst, s0, wide), ops.sread(inst, d, wide), ops.swrite(d, wide)
            return lambda sel: wr(sel, np.where(SCC[sel], a(sel), cur(sel)))
        if name.endswith("_saveexec_b32"):
            fn = SAVEEXEC[name[2:-len("_saveexec_b32")]]
            a, wr = ops.sread(inst, s0), ops.swrite(d)
            S = st.S

            def h(sel):
                old = S[EXEC][sel].copy()
                new = fn(np.asarray(a(sel), dtype=U32), old)
                S[EXEC][sel] = new
                st.refresh_exec(sel)
                SCC[sel] = new != 0
                wr(sel, old)
            return h
        if name in ("s_setpc_b64", "s_swappc_b64"):
            return _jump(st, ops, inst, pc, name, d, s0)
        if name == "s_getpc_b64":
            wr = ops.swrite(d, True)
            nxt = U64(st.prog.module.co.text_addr + inst.offset + inst.size)
            return lambda sel: wr(sel, np.full(st.W if sel is ALL else len(sel), nxt, dtype=U64))
        if name == "s_barrier_signal":
            return _barrier_signal(st, ops, inst, pc)
        return None
    if enc == "SOPK":
        d, k = F(inst, "sdst"), F(inst, "simm16") & 0xFFFF
        sk = _sext16(k)
        if name == "s_movk_i32":
            wr, val = ops.swrite(d), U32(sk & 0xFFFFFFFF)
            return lambda sel: wr(sel, val)
        if name == "s_cmovk_i32":
            cur, wr, val, SCC = ops.sread(inst, d), ops.swrite(d), U32(sk & 0xFFFFFFFF), st.SCC
            return lambda sel: wr(sel, np.where(SCC[sel], val, cur(sel)))
        if name == "s_addk_co_i32":
            cur, wr, val, SCC = ops.sread(inst, d), ops.swrite(d), U32(sk & 0xFFFFFFFF), st.SCC

            def h(sel):
                r, c = _sadd(np.asarray(cur(sel)), np.full(1, val))
                SCC[sel] = c
                wr(sel, r)
            return h
        if name == "s_mulk_i32":
            cur, wr, val = ops.sread(inst, d), ops.swrite(d), U64(sk & 0xFFFFFFFF)
            return lambda sel: wr(sel, (cur(sel).astype(U64) * val).astype(U32))
        if name == "s_version":
            return lambda sel: None
        if name == "s_call_b64":
            # D = PC + 4 (the return address), PC = PC + 4 + simm16 * 4 (docs/rdna4.md §Calls)
            t, wr = st.prog.target(pc, k), ops.swrite(d, True)
            ret = U64(st.prog.text_addr + inst.offset + inst.size)

            def h(sel):
                wr(sel, np.full(st.W if sel is ALL else len(sel), ret, dtype=U64))
                return t
            return h
        if name in ("s_setreg_b32", "s_setreg_imm32_b32", "s_getreg_b32"):
            return _hwreg(st, ops, inst, pc, name, k)
        return None
    if enc == "SOPC":
        base = name[len("s_cmp_"):] if name.startswith("s_cmp_") else None
        SCC = st.SCC
        if base in SOPC:
            wide = base.endswith("64")
            a, b, fn = ops.sread(inst, F(inst, "ssrc0"), wide), ops.sread(inst, F(inst, "ssrc1"), wide), SOPC[base]

            def h(sel):
                SCC[sel] = fn(np.asarray(a(sel)), np.asarray(b(sel)))
            return h
        if name.startswith("s_bitcmp"):
            wide = name.endswith("64")
            a, b = ops.sread(inst, F(inst, "ssrc0"), wide), ops.sread(inst, F(inst, "ssrc1"))
            want = name[len("s_bitcmp")] == "1"
            one = U64(1) if wide else U32(1)
            U64(63) if wide else U32(31)

            def h(sel):
                bit = (np.asarray(a(sel)) >> (np.asarray(b(sel)) & U32(31 if not wide else 63)).astype(
                    U64 if wide else U32)) & one
                SCC[sel] = (bit == 1) if want else (bit == 0)
            return h
        return None
    return None


def _jump(st, ops, inst, pc, name, d, s0):
    """s_setpc_b64: PC = S0; s_swappc_b64: D = PC + 4 (the next instruction's address), then PC = S0 (S0 read before
    D is written: `s_swappc_b64 s[30:31], s[30:31]` jumps to the old value). docs/rdna4.md §Calls. The target is a
    64-bit code address per wave; code_index maps it to an instruction of the program or stops the run."""
    prog = st.prog
    target = ops.sread(inst, s0, True)
    if name == "s_setpc_b64":
        return lambda sel: prog.code_index(pc, target(sel))
    wr = ops.swrite(d, True)
    ret = U64(prog.text_addr + inst.offset + inst.size)

    def h(sel):
        addr = np.array(target(sel), dtype=U64, copy=True)
        wr(sel, np.full(addr.shape if addr.ndim else (st.W if sel is ALL else len(sel)), ret, dtype=U64))
        return prog.code_index(pc, addr)
    return h


def _hwreg(st, ops, inst, pc, name, simm):
    """s_setreg_b32 / s_setreg_imm32_b32 / s_getreg_b32 on HW_REG_WAVE_MODE (docs/rdna4.md §Entry, MODE register).
    hwreg(id, offset, size) is simm16 = id | offset << 6 | (size - 1) << 11. Writable here: FP16_OVFL (the fp8
    conversion saturation Triton sets at entry on gfx12); the round/denorm bits may be rewritten only with the
    values they have (the VALU binds the descriptor's modes); any other MODE bit or hardware register is refused."""
    rid, off, size = simm & 0x3F, (simm >> 6) & 0x1F, ((simm >> 11) & 0x1F) + 1
    mask = ((1 << size) - 1) << off & 0xFFFFFFFF
    if rid in (HWREG_SHADER_CYCLES_LO, HWREG_SHADER_CYCLES_HI) and name == "s_getreg_b32":
        # the shader clock counter (docs/rdna4.md §Throughput "Clock counters"): the emulator has no clock; it
        # returns the wave-instructions the launch has executed so far (64 bits, LO / HI), which only grows
        wr, ec, shift = ops.swrite(F(inst, "sdst")), st.prog.exec_count, 32 * (rid == HWREG_SHADER_CYCLES_HI)

        def cycles(sel):
            v = (int(ec.sum()) >> shift) & 0xFFFFFFFF
            wr(sel, np.full(st.W if sel is ALL else len(sel), (v & mask) >> off, dtype=U32))
        return cycles
    if rid != HWREG_MODE:
        raise EmuError(f"{name} of hardware register {rid} is not emulated (only HW_REG_WAVE_MODE)")
    mode = st.mode
    if name == "s_getreg_b32":
        wr = ops.swrite(F(inst, "sdst"))
        return lambda sel: wr(sel, (mode[sel] & U32(mask)) >> U32(off))
    val = ops.sread(inst, 255) if name == "s_setreg_imm32_b32" else ops.sread(inst, F(inst, "sdst"))
    if mask & ~(MODE_FP_BITS | MODE_FP16_OVFL):
        raise EmuError(f"{name} writes MODE bits 0x{mask & ~(MODE_FP_BITS | MODE_FP16_OVFL):x}; only the FP "
                       f"round/denorm fields and FP16_OVFL are emulated")

    def h(sel):
        old = mode[sel]
        new = (old & U32(~mask & 0xFFFFFFFF)) | ((np.asarray(val(sel), dtype=U32) << U32(off)) & U32(mask))
        if ((new ^ old) & U32(MODE_FP_BITS)).any():
            st.fail(pc, "changing the FP round/denorm mode at run time is not emulated (the kernel descriptor's "
                        "modes apply to the whole kernel)")
        mode[sel] = new
    return h


def _barrier_signal(st, ops, inst, pc):
    # s_barrier_signal -1: workgroup barrier (docs/rdna4.md §Waits, barrier). Other ids are named barriers (gfx1250+ only).
    if F(inst, "ssrc0") != 193:
        raise EmuError("s_barrier_signal with a barrier id other than -1 is not supported")
    sig, wave_wg, blocked = st.sig, st.wave_wg, st.blocked

    def h(sel):
        sig[sel] += 1
        if sel is not ALL:
            if st.sanitize:
                sanitizer.check_signal(st, sel, pc)
            # waves of these workgroups blocked at a wait may now proceed: let them re-check
            blocked[np.isin(wave_wg, np.unique(wave_wg[sel]))] = False
        elif st.lds_race_check:   # lockstep: every wave signalled barrier sig[0] together
            sanitizer.barrier_complete(st, np.arange(st.nwg), int(sig[0]))
    return h


def _barrier_wait(st, inst, pc):
    if F(inst, "simm16") & 0xFFFF != 0xFFFF:
        raise EmuError("s_barrier_wait with a barrier id other than -1 is not supported")
    sig, passed, alive, wave_wg, blocked = st.sig, st.passed, st.alive, st.wave_wg, st.blocked
    nwg, W = st.nwg, st.W
    wpg = W // nwg

    def h(sel):
        if sel is ALL and st.alive.all():
            # lockstep: everyone signalled the same number of times (or someone is waiting without signalling)
            if sig[0] == passed[0] + 1 and (sig == sig[0]).all() and (passed == passed[0]).all():
                passed[:] += 1
                if st.lds_race_check:   # the signals may have come divergently (no clear there): clear here
                    sanitizer.barrier_complete(st, np.arange(nwg), int(passed[0]))
                return None
        # general rule: wave w passes when every live wave of its workgroup has signalled > passed[w] times
        need = passed[sel] + 1
        if st.sanitize and (sig[sel] < need).any():
            sanitizer.wait_without_signal(st, sel, pc, sig[sel] < need)
        sig_live = np.where(alive, sig, np.iinfo(np.int64).max).reshape(nwg, wpg).min(axis=1)
        ok = sig_live[wave_wg[sel]] >= need
        waves = np.arange(W)[sel]
        if st.lds_race_check:
            done = waves[ok]
            for g, n in set(zip(wave_wg[done].tolist(), need[ok].tolist())):
                sanitizer.barrier_complete(st, np.array([g]), n)
        passed[waves[ok]] += 1
        if ok.all():
            return None
        blocked[waves[~ok]] = True
        return np.where(ok, pc + 1, pc)
    return h


def waves_ended(st, sel, pc):
    """Waves in sel executed s_endpgm (divergent path): the barrier no longer waits for them."""
    wgs = np.unique(st.wave_wg[sel])
    if st.sanitize:
        sanitizer.check_end(st, sel, pc)
    st.blocked[np.isin(st.wave_wg, wgs)] = False


def _sopp(st, ops, inst, pc):
    name = inst.name
    simm = F(inst, "simm16") & 0xFFFF
    prog = st.prog
    if name in SOPP_NOP:
        return lambda sel: None
    if name == "s_sleep":
        # Only a delay (docs/rdna4.md §Forward progress), which the executor models as yielding: a wave that
        # sleeps is picked again only when no awake wave can run, so a poll loop lets the waves it waits on
        # progress. In lockstep (sel = ALL) there is no other wave to yield to.
        def sleep(sel):
            if sel is not ALL:
                st.asleep[sel] = True
        return sleep
    if name == "s_sendmsg":
        # MSG_DEALLOC_VGPRS (3) before s_endpgm is a hint; other messages (interrupts, GS) do not occur in
        # compute kernels and are refused.
        if simm & 0xFF != 3:
            return None
        return lambda sel: None
    if name in ("s_endpgm", "s_endpgm_saved"):
        def h(sel):
            if st.sanitize and sel is ALL:
                sanitizer.check_end(st, ALL, pc)
            return END
        return h
    if name == "s_code_end":
        def h(sel):
            st.fail(pc, "ran into s_code_end padding (fell off the end of the kernel)")
        return h
    if name == "s_barrier_wait":
        return _barrier_wait(st, inst, pc)
    if name.startswith("s_wait_") or name == "s_waitcnt":
        return sanitizer.build_wait(st, inst, pc, name, simm)
    if name == "s_branch":
        t = prog.target(pc, simm)
        return lambda sel: t
    if name.startswith("s_cbranch_"):
        t = prog.target(pc, simm)
        nxt = pc + 1
        cond = name[len("s_cbranch_"):]
        S, SCC = st.S, st.SCC
        test = {"scc0": lambda sel: ~SCC[sel], "scc1": lambda sel: SCC[sel],
                "vccz": lambda sel: S[VCC][sel] == 0, "vccnz": lambda sel: S[VCC][sel] != 0,
                "execz": lambda sel: S[EXEC][sel] == 0, "execnz": lambda sel: S[EXEC][sel] != 0}.get(cond)
        if test is None:
            return None

        def h(sel):
            taken = test(sel)
            if taken.all():
                return t
            if not taken.any():
                return None
            return np.where(taken, t, nxt)
        return h
    return None
