"""Vector ALU: VOP1/VOP2/VOP3/VOP3SD/VOPC/VOP3P/VOPD, DPP16/DPP8, WMMA.

Operands are [n, 32] arrays (or broadcastable scalars / [n, 1] SGPR columns). Each op in valu_ops.T is
(source kinds, result kind, fn); kinds: 'u32','i32','f32' (32-bit views), 'u16','i16','f16' (low or op_sel
half), 'u64','i64','f64' (register pairs). Float source modifiers (abs/neg) are applied in the bit domain
before the view; omod/clamp after. Arithmetic comes from numerics.py (exact fma, min/max_num, conversions).
"""
from __future__ import annotations

import contextlib

import numpy as np

from sage_co.emu import numerics as nm
from sage_co.emu import sanitizer, valu_packed
from sage_co.emu import wmma as wm
from sage_co.emu.decode import HALVES
from sage_co.emu.state import (ALL, EXEC, LITERAL, MODE_FP16_OVFL, NULL, VCC, EmuError, F, const_bits, pack_lanes,
                               unpack_lanes)
from sage_co.emu.valu_ops import CMP, CMP_KIND, T, _cls, div_fmas, div_scale, _ffbl, _i, fp16_ovfl_handler

U8, U16, U32, U64, I16, I32, I64 = np.uint8, np.uint16, np.uint32, np.uint64, np.int16, np.int32, np.int64
F16, F32, F64 = np.float16, np.float32, np.float64
SIGN = {32: U32(0x80000000), 16: U32(0x8000), 64: U64(1 << 63)}
ABSM = {32: U32(0x7FFFFFFF), 16: U32(0x7FFF), 64: U64((1 << 63) - 1)}
ERR = contextlib.nullcontext()   # executor.run ignores fp warnings for the whole run


# ----------------------------------------------------------------------------------------------- operands
E32_FIELDS = ("src0", "vsrc1")


def e32_halves(inst) -> tuple:
    """Fields of a VOP1/VOP2/VOPC instruction that are true16 register halves (decode.HALVES), else ()."""
    return HALVES.get(inst.enc, {}).get(inst.opcode, ()) if inst.enc in ("VOP1", "VOP2", "VOPC") else ()


class Src:
    """Operand reader factory for one instruction (resolves codes, modifiers, op_sel, DPP)."""

    def __init__(self, st, ops, inst):
        self.st, self.ops, self.inst = st, ops, inst
        self.abs = F(inst, "abs")
        self.neg = F(inst, "neg")
        self.opsel = F(inst, "opsel")
        self.dpp = inst.dpp
        if self.dpp is not None:
            d = self.dpp
            self.abs |= (d.get("src0_abs", 0)) | (d.get("src1_abs", 0) << 1)
            self.neg |= (d.get("src0_neg", 0)) | (d.get("src1_neg", 0) << 1)

    def read(self, i, code, kind):
        """Reader for source slot i (0..2) with operand code, as kind 'b','f','h','s','q','d'."""
        st, inst = self.st, self.inst
        if i == 0 and self.dpp is not None:
            code = 256 + self.dpp["src0"]
        bits = {"b": 32, "f": 32, "h": 16, "s": 16, "q": 64, "d": 64}[kind]
        rkind = {"b": "b32", "f": "f32", "h": "f16", "s": "b16", "q": "b64", "d": "f64"}[kind]
        hi = (self.opsel >> i) & 1 if inst.enc == "VOP3" else 0
        if bits == 16 and code >= 256 and i < 2 and E32_FIELDS[i] in e32_halves(inst):
            # true16 in VOP1/VOP2/VOPC: VGPR field = register [6:0] | half << 7 (docs/rdna4.md §Throughput, True16)
            hi, code = (code - 256) >> 7, 256 + ((code - 256) & 127)
        raw = self.ops.vread(inst, code, rkind)
        if i == 0 and self.dpp is not None:
            raw = dpp_source(st, self.dpp, raw)
        fl = kind in ("f", "h", "d")
        ab, ng = fl and (self.abs >> i) & 1, fl and (self.neg >> i) & 1
        if bits == 16 and code >= 256 and not (i == 0 and self.dpp is not None):
            # a VGPR half is a strided uint16 view of the register row (little-endian: .l at even, .h at odd
            # halves): no shift, mask or cast per step
            half = st.V[code - 256].view(U16)[:, int(hi)::2]
            keep, flip = U16(0x7FFF if ab else 0xFFFF), U16(0x8000 if ng else 0)   # abs, neg in the bits

            def h16(sel):
                return (half[sel] & keep) ^ flip if ab or ng else half[sel]
            return (lambda sel: h16(sel).view(F16)) if kind == "h" else h16
        if bits == 16:
            sh = U32(16 * hi)
            if code == LITERAL or const_bits(code, rkind) is not None:     # a constant: its half once, at build
                c16 = (U32(raw(ALL)) >> sh) & U32(0xFFFF)
                c16 = U16((c16 & U32(0x7FFF)) if ab else c16) ^ U16(0x8000 if ng else 0)
                return (lambda sel: c16.view(F16)) if kind == "h" else (lambda sel: c16)

            def r16(sel):
                v = (raw(sel) >> sh) & U32(0xFFFF)
                if ab:
                    v = v & U32(0x7FFF)
                if ng:
                    v = v ^ U32(0x8000)
                return np.asarray(v).astype(U16)
            return (lambda sel: r16(sel).view(F16)) if kind == "h" else r16
        if ab or ng:
            am, nmk = ABSM[bits], SIGN[bits]
            inner = raw

            def raw(sel):
                v = inner(sel)
                if ab:
                    v = v & am
                if ng:
                    v = v ^ nmk
                return v
        if kind == "f":
            return lambda sel, raw=raw: np.asarray(raw(sel)).view(F32)
        if kind == "d":
            return lambda sel, raw=raw: np.asarray(raw(sel)).view(F64)
        return raw


def dpp_source(st, dpp, raw):
    """DPP16/DPP8 lane permutation of src0. Returns a reader giving (values [n,32]) and records, per call, the
    lanes that may be written in st.dpp_mask (bool [n,32] or None)."""
    lanes = np.arange(32)
    if "dpp_ctrl" in dpp:
        c, bc, fi = dpp["dpp_ctrl"], dpp["bc"], dpp["fi"]
        row = lanes & ~15
        r = lanes & 15
        valid = np.ones(32, bool)
        if c <= 0xFF:
            src = (lanes & ~3) | ((c >> (2 * (lanes & 3))) & 3)
        elif 0x101 <= c <= 0x10F:
            src, valid = lanes + (c & 15), r + (c & 15) < 16
        elif 0x111 <= c <= 0x11F:
            src, valid = lanes - (c & 15), r - (c & 15) >= 0
        elif 0x121 <= c <= 0x12F:
            src = row + ((r - (c & 15)) & 15)
        elif c == 0x140:
            src = row + 15 - r
        elif c == 0x141:
            src = (lanes & ~7) + 7 - (lanes & 7)
        elif 0x150 <= c <= 0x15F:
            src = row + (c & 15)
        elif 0x160 <= c <= 0x16F:
            src = row + (r ^ (c & 15))
        else:
            raise EmuError(f"DPP control 0x{c:x} is not supported")
        src = np.where(valid, src, lanes) & 31
        rm = np.array([(dpp["row_mask"] >> (l // 16)) & 1 for l in range(32)], bool)
        bm = np.array([(dpp["bank_mask"] >> ((l & 15) // 4)) & 1 for l in range(32)], bool)
        wmask = rm & bm
    else:
        sel8 = [dpp[f"lane_sel{i}"] for i in range(8)]
        src = (lanes & ~7) | np.array(sel8)[lanes & 7]
        valid, bc, fi = np.ones(32, bool), 1, dpp["fi"]
        wmask = np.ones(32, bool)
    EXM = st.EXM

    def rd(sel):
        v = raw(sel)
        v = np.broadcast_to(v, (st.W if sel is ALL else len(sel), 32)) if np.ndim(v) < 2 or np.shape(v)[1] == 1 else v
        out = v[:, src]
        ok = np.broadcast_to(valid, out.shape)
        if not fi:
            ok = ok & (EXM if sel is ALL else EXM[sel])[:, src]
        if bc:
            out = np.where(ok, out, 0).astype(out.dtype)
            st.dpp_mask = None if wmask.all() else np.broadcast_to(wmask, out.shape)
        else:
            st.dpp_mask = ok & wmask
        return out
    return rd


def _typed_writer(st, ops, inst, vd, res, dst_hi=0, dpp=False):
    """Writer for result kind res into v[vd] honouring EXEC (and the DPP write mask)."""
    V, EXM = st.V, st.EXM
    if res in ("q", "d"):
        w0, w1 = ops.vwrite(vd), ops.vwrite(vd + 1)

        def w(sel, val):
            val = np.asarray(val)
            val = val.view(U64) if val.dtype == F64 else val.astype(U64, copy=False)
            w0(sel, (val & U64(0xFFFFFFFF)).astype(U32))
            w1(sel, (val >> U64(32)).astype(U32))
        return w
    if res in ("h", "s"):
        ops.vwrite(vd)                                    # the register-range check
        half = V[vd].view(U16)[:, dst_hi::2]              # the destination half as a strided view of its row

        def w(sel, val):
            val = np.asarray(val)
            v16 = val.view(U16) if val.dtype in (F16, I16) else val.astype(U16, copy=False)
            if sel is ALL:
                if st.exec_full:
                    half[...] = v16
                else:
                    np.copyto(half, v16, where=EXM)
            else:
                half[sel] = np.where(EXM[sel], v16, half[sel])
        return w
    base = ops.vwrite(vd)
    if dpp:
        mw = ops.vwrite_masked(vd)

        def w(sel, val):
            val = np.asarray(val)
            if val.dtype != U32:
                val = val.view(U32) if val.dtype.itemsize == 4 else val.astype(U32)
            m = st.dpp_mask
            if m is None:
                return base(sel, val)
            mw(sel, val, m & (EXM if sel is ALL else EXM[sel]))
        return w

    def w(sel, val, base=base):
        val = np.asarray(val)
        if val.dtype != U32:
            val = val.view(U32) if val.dtype.itemsize == 4 else val.astype(U32)
        base(sel, val)
    return w


def _post(inst, res, flt):
    clamp, omod = F(inst, "clamp"), F(inst, "omod")
    if not (clamp or omod) or res not in ("f",):
        return None
    mul = {0: 1.0, 1: 2.0, 2: 4.0, 3: 0.5}[omod]

    def post(v):
        with ERR:
            if mul != 1.0:
                v = (v * np.float32(mul)).astype(F32)
            if clamp:
                v = np.where(np.isnan(v), np.float32(0), np.clip(v, np.float32(0), np.float32(1))).astype(F32)
        return v
    return post


# ----------------------------------------------------------------------------------------------- build
def build(st, ops, inst, pc):
    enc, name = inst.enc, inst.name
    if enc == "VOPD":
        return _vopd(st, ops, inst, pc)
    if "wmma" in name:
        return _wmma(st, ops, inst, pc)
    src = Src(st, ops, inst)
    if enc == "VOPC" or (enc == "VOP3" and inst.opcode < 256 and name.startswith("v_cmp")):
        return _vopc(st, ops, inst, src)
    special = SPECIAL.get(name)
    if special is not None:
        return special(st, ops, inst, src)
    if enc == "VOP3P" and name in valu_packed.PK:
        return valu_packed.packed(st, ops, inst)
    if enc == "VOP3P" and name in valu_packed.DOT4_F8:
        return valu_packed.dot4_f8(st, ops, inst)
    if enc == "VOP3P" and name in ("v_fma_mix_f32", "v_fma_mixlo_f16", "v_fma_mixhi_f16"):
        return valu_packed.fma_mix(st, ops, inst)
    if name not in T:
        return None
    srcs, res, fn, flt = T[name]
    codes = _src_codes(inst, len(srcs))
    if name in ("v_fmac_f32", "v_fmac_f16"):
        codes[2] = 256 + F(inst, "vdst")
    elif name in ("v_fmaak_f32", "v_fmaak_f16"):
        codes[2] = 255
    elif name in ("v_fmamk_f32", "v_fmamk_f16"):
        codes = [codes[0], 255, codes[1]]
    readers = [src.read(i, c, k) for i, (c, k) in enumerate(zip(codes, srcs))]
    vd = F(inst, "vdst")
    dst_hi = (F(inst, "opsel") >> 3) & 1 if enc == "VOP3" else 0
    if "vdst" in e32_halves(inst):
        dst_hi, vd = vd >> 7, vd & 127
    wr = _typed_writer(st, ops, inst, vd, res, dst_hi, dpp=inst.dpp is not None)
    post = _post(inst, res, flt)
    mode = st.prog.denorm32
    if flt and mode != nm.DENORM_KEEP and res == "f" and "f" in srcs:
        base_fn = fn

        def fn(*a):
            a = [nm.flush_in(x, mode) if x.dtype == F32 else x for x in map(np.asarray, a)]
            return nm.flush_out(base_fn(*a), mode)
    if post is not None:
        inner = fn

        def fn(*a):
            return post(inner(*a))
    if res == "h" and st.prog.fp16_ovfl_possible:      # MODE.FP16_OVFL saturates f16 results (§FP16_OVFL)
        return fp16_ovfl_handler(st, readers, fn, wr)
    # the handler binds its parts as defaults (fewer objects for the collector, sage_co/emu/operands.py)
    if len(readers) == 1:
        def h(sel, wr=wr, fn=fn, r0=readers[0]):
            with ERR:
                wr(sel, fn(r0(sel)))
    elif len(readers) == 2:
        def h(sel, wr=wr, fn=fn, r0=readers[0], r1=readers[1]):
            with ERR:
                wr(sel, fn(r0(sel), r1(sel)))
    else:
        def h(sel, wr=wr, fn=fn, r0=readers[0], r1=readers[1], r2=readers[2]):
            with ERR:
                wr(sel, fn(r0(sel), r1(sel), r2(sel)))
    return h


def _src_codes(inst, n):
    enc = inst.enc
    if enc in ("VOP1",):
        return [F(inst, "src0")]
    if enc in ("VOP2", "VOPC"):
        c = [F(inst, "src0"), 256 + F(inst, "vsrc1")]
        return c + [0] * (n - 2) if n > 2 else c[:n]
    return [F(inst, "src0"), F(inst, "src1"), F(inst, "src2")][:max(n, 1)] + [0] * max(0, n - 3)


def _lanemask_reader(st, ops, inst, code):
    """Reader of a lane mask operand (VCC or an SGPR) -> bool [n, 32]."""
    r = ops.sread(inst, code)

    def rd(sel):
        x = r(sel)
        if np.ndim(x) == 0:     # a constant mask
            x = np.full(st.W if sel is ALL else len(sel), x, dtype=U32)
        return unpack_lanes(x)
    return rd


def _sdst_writer(st, ops, code):
    """Write a per-lane bool result into a lane-mask SGPR: only active lanes' bits change."""
    S = st.S
    wr = ops.swrite(code)

    def w(sel, bits_bool):
        if code == NULL:
            return
        n = st.W if sel is ALL else len(sel)
        bits = pack_lanes(bits_bool if np.shape(bits_bool) == (n, 32) else np.broadcast_to(bits_bool, (n, 32)))
        if sel is ALL and st.exec_full:     # every lane active: the whole mask is the result
            return wr(sel, bits)
        ex = S[EXEC][sel]
        old = S[code][sel]
        wr(sel, (old & ~ex) | (bits & ex))
    return w


def _vopc(st, ops, inst, src):
    name = inst.name
    cmpx = name.startswith("v_cmpx_")
    body = name[len("v_cmpx_"):] if cmpx else name[len("v_cmp_"):]
    if body.startswith("class_"):
        ty = body[len("class_"):]
        if ty != "f32":
            return None
        codes = _src_codes(inst, 2)
        a, b = src.read(0, codes[0], "f"), src.read(1, codes[1], "b")
        fn = _cls
    else:
        cond, ty = body.rsplit("_", 1)
        if ty not in CMP_KIND or cond not in CMP:
            return None
        kind, dt = CMP_KIND[ty]
        codes = _src_codes(inst, 2)
        ra, rb = src.read(0, codes[0], kind), src.read(1, codes[1], kind)
        if dt in (I32, I64, I16):
            a = lambda sel, r=ra: np.asarray(r(sel)).view(dt)
            b = lambda sel, r=rb: np.asarray(r(sel)).view(dt)
        else:
            a, b = ra, rb
        fn = CMP[cond]
    S, st_ = st.S, st
    if cmpx:
        def h(sel):
            with ERR:
                res = np.broadcast_to(fn(a(sel), b(sel)), (st.W if sel is ALL else len(sel), 32))
            bits = pack_lanes(res)
            S[EXEC][sel] = bits & S[EXEC][sel]
            st_.refresh_exec(sel)
        return h
    dst = VCC if inst.enc == "VOPC" else F(inst, "vdst")
    w = _sdst_writer(st, ops, dst)

    def h(sel):
        with ERR:
            w(sel, fn(a(sel), b(sel)))
    return h


# ---- special VALU ops (carry, lane ops, cndmask, fp8 packing, 64-bit mads)
def _cndmask(st, ops, inst, src):
    codes = _src_codes(inst, 2)
    kind = "f" if (F(inst, "abs") or F(inst, "neg")) else "b"
    a, b = src.read(0, codes[0], kind), src.read(1, codes[1], kind)
    m = _lanemask_reader(st, ops, inst, VCC if inst.enc == "VOP2" else F(inst, "src2"))
    wr = _typed_writer(st, ops, inst, F(inst, "vdst"), "b", dpp=inst.dpp is not None)
    return lambda sel: wr(sel, np.where(m(sel), np.asarray(b(sel)).view(U32) if kind == "f" else b(sel),
                                        np.asarray(a(sel)).view(U32) if kind == "f" else a(sel)))


def _cndmask16(st, ops, inst, src):
    """v_cndmask_b16 (VOP3): D.16 = mask[lane] ? S1.16 : S0.16, halves by op_sel (f16 abs/neg modifiers allowed)."""
    codes = _src_codes(inst, 2)
    kind = "h" if (F(inst, "abs") or F(inst, "neg")) else "s"
    a, b = src.read(0, codes[0], kind), src.read(1, codes[1], kind)
    m = _lanemask_reader(st, ops, inst, F(inst, "src2"))
    wr = _typed_writer(st, ops, inst, F(inst, "vdst"), "s", (F(inst, "opsel") >> 3) & 1)
    return lambda sel: wr(sel, np.where(m(sel), np.asarray(b(sel)).view(U16), np.asarray(a(sel)).view(U16)))


def _carry_op(kind):
    def make(st, ops, inst, src):
        codes = _src_codes(inst, 2)
        a, b = src.read(0, codes[0], "b"), src.read(1, codes[1], "b")
        vop2 = inst.enc == "VOP2"
        sdst = VCC if vop2 else F(inst, "sdst")
        cin = None
        if "_ci_" in inst.name:
            cin = _lanemask_reader(st, ops, inst, VCC if vop2 else F(inst, "src2"))
        wr = _typed_writer(st, ops, inst, F(inst, "vdst"), "b", dpp=inst.dpp is not None)
        cw = _sdst_writer(st, ops, sdst)

        def h(sel):
            x, y = np.asarray(a(sel)).astype(I64), np.asarray(b(sel)).astype(I64)
            c = cin(sel).astype(I64) if cin is not None else 0
            if kind == "add":
                r = x + y + c
                carry = r > 0xFFFFFFFF
            elif kind == "sub":
                r = x - y - c
                carry = r < 0
            else:
                r = y - x - c
                carry = r < 0
            cw(sel, carry)
            wr(sel, (r & 0xFFFFFFFF).astype(U32))
        return h
    return make


def _mad64(signed):
    def make(st, ops, inst, src):
        a, b = src.read(0, F(inst, "src0"), "b"), src.read(1, F(inst, "src1"), "b")
        c = src.read(2, F(inst, "src2"), "q")
        wr = _typed_writer(st, ops, inst, F(inst, "vdst"), "q")
        cw = _sdst_writer(st, ops, F(inst, "sdst"))

        def h(sel):
            x, y, z = np.asarray(a(sel)), np.asarray(b(sel)), np.asarray(c(sel))
            if signed:
                p = _i(x).astype(I64) * _i(y).astype(I64)     # exact (|p| < 2^62)
                r = p.view(U64) + z
                zi = z.view(I64) if isinstance(z, np.ndarray) else np.asarray(z).view(I64)
                # signed overflow of p + z
                ri = r.view(I64)
                carry = ((p >= 0) == (zi >= 0)) & ((ri >= 0) != (p >= 0))
            else:
                p = x.astype(U64) * y.astype(U64)
                r = p + z
                carry = r < p
            cw(sel, carry)
            wr(sel, r)
        return h
    return make


def _readlane(st, ops, inst, src):
    name = inst.name
    S, V = st.S, st.V
    vsrc = F(inst, "src0") - 256
    if vsrc < 0:
        raise EmuError(f"{name} source is not a VGPR")
    sd = F(inst, "vdst")
    wr = ops.swrite(sd)
    if name == "v_readfirstlane_b32":
        def h(sel):
            ex = S[EXEC][sel]
            lane = np.where(ex == 0, 0, _ffbl(ex)).astype(I64)
            wr(sel, np.take_along_axis(V[vsrc][sel], lane[:, None], axis=1)[:, 0])
        return h
    lr = ops.sread(inst, F(inst, "src1"))

    def h(sel):
        lane = (np.broadcast_to(np.asarray(lr(sel)), (st.W if sel is ALL else len(sel),)) & U32(31)).astype(I64)
        wr(sel, np.take_along_axis(V[vsrc][sel], lane[:, None], axis=1)[:, 0])
    return h


def _writelane(st, ops, inst, src):
    val = ops.sread(inst, F(inst, "src0"))
    lr = ops.sread(inst, F(inst, "src1"))
    row = st.V[F(inst, "vdst")]

    def h(sel):
        n = st.W if sel is ALL else len(sel)
        lane = (np.broadcast_to(np.asarray(lr(sel)), (n,)) & U32(31)).astype(I64)
        v = np.broadcast_to(np.asarray(val(sel), dtype=U32), (n,))
        cur = row[sel].copy()
        cur[np.arange(n), lane] = v
        row[sel] = cur
    return h


def _permlane(x16):
    def make(st, ops, inst, src):
        # v_permlane16_b32 / v_permlanex16_b32 vdst, vsrc, s_lo, s_hi: lane l of a 16-lane row reads lane
        # sel[l%16] (4-bit selectors from {s_hi, s_lo}) of its own row (permlane16) or of the other row (x16).
        # op_sel[0] = fetch inactive, op_sel[1] = bound_ctrl (ISA pseudocode).
        V = st.V
        vs = F(inst, "src0") - 256
        lo, hi = ops.sread(inst, F(inst, "src1")), ops.sread(inst, F(inst, "src2"))
        old = F(inst, "vdst")
        fi = F(inst, "opsel") & 1
        wr = ops.vwrite(old)
        lanes = np.arange(32)

        def h(sel):
            n = st.W if sel is ALL else len(sel)
            l_, h_ = (np.broadcast_to(np.asarray(x, dtype=U32), (n,)).astype(U64) for x in (lo(sel), hi(sel)))
            sels = (l_ | (h_ << U64(32)))[:, None] >> (U64(4) * (lanes & 15).astype(U64))
            sels = (sels & U64(15)).astype(I64)
            rowbase = (lanes & 16) ^ (16 if x16 else 0)
            srcl = rowbase[None, :] + sels
            data = V[vs][sel]
            out = np.take_along_axis(data, srcl, axis=1)
            if not fi:
                ex = st.EXM if sel is ALL else st.EXM[sel]
                act = np.take_along_axis(ex, srcl, axis=1)
                out = np.where(act, out, V[old][sel])
            wr(sel, out)
        return h
    return make


def _cvt_pk_f8(bf8):
    def make(st, ops, inst, src):
        a, b = src.read(0, F(inst, "src0"), "f"), src.read(1, F(inst, "src1"), "f")
        vd = F(inst, "vdst")
        hi = bool((F(inst, "opsel") >> 3) & 1)
        row, wr, mode = st.V[vd], ops.vwrite(vd), st.mode
        fmax = F32(57344.0 if bf8 else 448.0)

        def h(sel):
            n = st.W if sel is ALL else len(sel)
            x = np.broadcast_to(a(sel), (n, 32))
            y = np.broadcast_to(b(sel), (n, 32))
            sat = (mode[sel] & U32(MODE_FP16_OVFL)) != 0
            if sat.any():
                # MODE.FP16_OVFL: finite values beyond the format's largest saturate to it; Inf/NaN convert as
                # before (docs/rdna4.md §FP8, saturation)
                s = sat[:, None]
                x = np.where(s & np.isfinite(x), np.clip(x, -fmax, fmax), x).astype(F32)
                y = np.where(s & np.isfinite(y), np.clip(y, -fmax, fmax), y).astype(F32)
            wr(sel, nm.cvt_pk_f8_f32(row[sel], x, y, hi, bf8))
        return h
    return make


def _cvt_pk_f32_f8(bf8):
    def make(st, ops, inst, src):
        r = src.ops.vread(inst, F(inst, "src0"), "b32")
        hi = F(inst, "opsel") & 1
        vd = F(inst, "vdst")
        w0, w1 = ops.vwrite(vd), ops.vwrite(vd + 1)
        dec = nm.bf8_e5m2_to_f32 if bf8 else nm.fp8_e4m3_to_f32

        def h(sel):
            x = np.asarray(r(sel)) >> U32(16 * hi)
            w0(sel, dec(x & U32(0xFF)).view(U32))
            w1(sel, dec((x >> U32(8)) & U32(0xFF)).view(U32))
        return h
    return make


def _div_scale_op(st, ops, inst, src):
    a, b, c = (src.read(i, F(inst, f"src{i}"), "f") for i in range(3))
    wr = _typed_writer(st, ops, inst, F(inst, "vdst"), "f")
    cw = _sdst_writer(st, ops, F(inst, "sdst"))

    def h(sel):
        n = st.W if sel is ALL else len(sel)
        x, y, z = (np.broadcast_to(r(sel), (n, 32)) for r in (a, b, c))
        d, vcc = div_scale(x, y, z)
        cw(sel, vcc)
        wr(sel, d)
    return h


def _div_fmas_op(st, ops, inst, src):
    a, b, c = (src.read(i, F(inst, f"src{i}"), "f") for i in range(3))
    m = _lanemask_reader(st, ops, inst, VCC)
    wr = _typed_writer(st, ops, inst, F(inst, "vdst"), "f")
    return lambda sel: wr(sel, div_fmas(a(sel), b(sel), c(sel), m(sel)))


def _nop(st, ops, inst, src):
    return lambda sel: None


SPECIAL = {
    "v_cndmask_b32": _cndmask, "v_cndmask_b16": _cndmask16,
    "v_add_co_u32": _carry_op("add"), "v_sub_co_u32": _carry_op("sub"), "v_subrev_co_u32": _carry_op("subrev"),
    "v_add_co_ci_u32": _carry_op("add"), "v_sub_co_ci_u32": _carry_op("sub"),
    "v_subrev_co_ci_u32": _carry_op("subrev"),
    "v_mad_co_u64_u32": _mad64(False), "v_mad_co_i64_i32": _mad64(True),
    "v_mad_u64_u32": _mad64(False), "v_mad_i64_i32": _mad64(True),
    "v_readfirstlane_b32": _readlane, "v_readlane_b32": _readlane, "v_writelane_b32": _writelane,
    "v_permlane16_b32": _permlane(False), "v_permlanex16_b32": _permlane(True),
    "v_cvt_pk_fp8_f32": _cvt_pk_f8(False), "v_cvt_pk_bf8_f32": _cvt_pk_f8(True),
    "v_cvt_pk_f32_fp8": _cvt_pk_f32_f8(False), "v_cvt_pk_f32_bf8": _cvt_pk_f32_f8(True),
    "v_div_scale_f32": _div_scale_op, "v_div_fmas_f32": _div_fmas_op,
    "v_nop": _nop, "v_pipeflush": _nop,
}


# ----------------------------------------------------------------------------------------------- VOPD
def _vopd(st, ops, inst, pc):
    """Dual issue: both halves read their sources before either writes (docs/rdna4.md §Throughput, VOPD rules)."""
    xname, yname = inst.name.split("|")
    halves = []
    for nm_, s0, s1, vd in ((xname, "srcx0", "vsrcx1", "vdstx"), (yname, "srcy0", "vsrcy1", "vdsty")):
        base = "v_" + nm_[len("v_dual_"):]
        c0, c1, d = F(inst, s0), 256 + F(inst, s1), F(inst, vd)
        if base == "v_cndmask_b32":
            a, b = ops.vread(inst, c0), ops.vread(inst, c1)
            m = _lanemask_reader(st, ops, inst, VCC)
            fn = (lambda a, b, m: lambda sel: np.where(m(sel), b(sel), a(sel)))(a, b, m)
        else:
            if base not in T:
                return None
            srcs, res, f, flt = T[base]
            codes = {"v_fmac_f32": [c0, c1, 256 + d], "v_fmaak_f32": [c0, c1, 255], "v_fmamk_f32": [c0, 255, c1],
                     "v_dot2acc_f32_f16": None, "v_dot2acc_f32_bf16": None}.get(base, [c0, c1][:len(srcs)])
            if codes is None:
                return None
            kinds = {"b": "b32", "f": "f32"}
            rs = [ops.vread(inst, c, kinds[k]) for c, k in zip(codes, srcs)]
            views = [(lambda r: (lambda sel: np.asarray(r(sel)).view(F32)))(r) if k == "f" else r
                     for r, k in zip(rs, srcs)]
            fn = (lambda f, views: lambda sel: f(*[v(sel) for v in views]))(f, views)
        halves.append((fn, _typed_writer(st, ops, inst, d, "b")))
    (fx, wx), (fy, wy) = halves

    def h(sel):
        with ERR:
            x = fx(sel)
            y = fy(sel)
        wx(sel, x)
        wy(sel, y)
    return h


# ----------------------------------------------------------------------------------------------- WMMA
WMMA_REGS = {"iu8": (2, 8), "fp8_fp8": (2, 8), "fp8_bf8": (2, 8), "bf8_fp8": (2, 8), "bf8_bf8": (2, 8),
             "f16": (4, 8), "bf16": (4, 8)}


def _wmma(st, ops, inst, pc):
    name = inst.name
    vd = F(inst, "vdst")
    a0, b0, c0 = F(inst, "src0"), F(inst, "src1"), F(inst, "src2")
    neg, neg_hi, clamp = F(inst, "neg"), F(inst, "neg_hi"), F(inst, "clamp")
    f8 = {"fp8_fp8": (False, False), "fp8_bf8": (False, True), "bf8_fp8": (True, False), "bf8_bf8": (True, True)}
    # the kernels take and return registers in the VGPR layout [nregs, waves, 32]: V slices pass straight in
    if name == "v_wmma_i32_16x16x16_iu8":
        na, nd = 2, 8
        fn = lambda a, b, c: wm.iu8_vgpr(a, b, c, bool(neg & 1), bool(neg & 2), bool(clamp))
    elif name.startswith("v_wmma_f32_16x16x16_") and name[len("v_wmma_f32_16x16x16_"):] in f8:
        na, nd = 2, 8
        a_bf8, b_bf8 = f8[name[len("v_wmma_f32_16x16x16_"):]]
        fn = lambda a, b, c: wm.f8_vgpr(a, b, c, a_bf8, b_bf8, bool(neg & 4), bool(neg_hi & 4))
    elif name in ("v_wmma_f32_16x16x16_f16", "v_wmma_f32_16x16x16_bf16"):
        na, nd = 4, 8
        bf16 = name.endswith("bf16")
        nl, nh = tuple((neg >> i) & 1 for i in range(3)), tuple((neg_hi >> i) & 1 for i in range(3))
        fn = lambda a, b, c: wm.f32_16bit_vgpr(a, b, c, bf16, nl, nh)
    elif name in ("v_wmma_f16_16x16x16_f16", "v_wmma_bf16_16x16x16_bf16"):
        na, nd = 4, 4
        bf16 = name.endswith("bf16")
        nl, nh = tuple((neg >> i) & 1 for i in range(3)), tuple((neg_hi >> i) & 1 for i in range(3))
        fn = lambda a, b, c: wm.f16_16bit_vgpr(a, b, c, bf16, nl, nh)
    else:
        return None
    if a0 < 256 or b0 < 256:
        raise EmuError("WMMA A and B must be VGPRs")
    ra, rb = a0 - 256, b0 - 256
    V = st.V
    nv = st.prog.nvgpr
    if max(ra + na, rb + na, vd + nd) > nv or (c0 >= 256 and c0 - 256 + nd > nv):
        raise EmuError(f"WMMA operands beyond the kernel's {nv} VGPRs")
    if c0 >= 256:
        rc = c0 - 256
        cread = lambda sel: _regs(V, rc, nd, sel)
    else:
        cv = ops.vread(inst, c0, "f32" if "f32" in name or "f16" in name else "b32")
        cread = lambda sel: np.ascontiguousarray(np.broadcast_to(
            np.asarray(cv(sel), dtype=U32)[None], (nd, st.W if sel is ALL else len(sel), 32)))
    overlap = _overlap(vd, nd, ra, na) or _overlap(vd, nd, rb, na)

    def h(sel):
        if st.sanitize:
            if overlap:
                sanitizer.wmma_overlap(st, pc, sel)
            sanitizer.wmma_hazard(st, pc, sel, ra, rb, na, vd, nd)
        d = fn(_regs(V, ra, na, sel), _regs(V, rb, na, sel), cread(sel))       # [nd, n, 32], a new array
        if sel is ALL and st.exec_full:
            V[vd:vd + nd] = d
        elif sel is ALL:
            np.copyto(V[vd:vd + nd], d, where=st.EXM)
        else:
            V[vd:vd + nd, sel] = np.where(st.EXM[sel], d, V[vd:vd + nd, sel])
    return h


def _regs(V, r, n, sel):
    """VGPRs r..r+n-1 of the selected waves, [n, waves, 32] (a view of V for all waves)."""
    return V[r:r + n] if sel is ALL else V[r:r + n, sel]


def _overlap(a, na, b, nb):
    return a < b + nb and b < a + na
