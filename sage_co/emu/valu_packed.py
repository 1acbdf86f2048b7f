"""VOP3P packed 16-bit ops (`v_pk_*`) and the mixed-precision fma (`v_fma_mix_f32`, `v_fma_mixlo/hi_f16`).

MODE.FP16_OVFL (docs/rdna4.md §FP16_OVFL) applies to their f16 results in kernels that can set it
(`prog.fp16_ovfl_possible`): an infinite f16 result of finite sources becomes the largest finite f16 with its sign.
"""
from __future__ import annotations

import numpy as np

from sage_co.emu import numerics as nm
from sage_co.emu.state import ALL, MODE_FP16_OVFL, F

U16, U32, I16 = np.uint16, np.uint32, np.int16
F16, F32, F64 = np.float16, np.float32, np.float64
F16_OVERFLOW = ("v_pk_add_f16", "v_pk_mul_f16", "v_pk_fma_f16")     # packed ops whose f16 result can overflow


def _ovfl_on(st, sel):
    """bool [n]: the waves of sel whose MODE.FP16_OVFL is set (None when the kernel cannot set it)."""
    if not st.prog.fp16_ovfl_possible:
        return None
    on = ((st.mode if sel is ALL else st.mode[sel]) & U32(MODE_FP16_OVFL)) != 0
    return on if on.any() else None


def _pk_f16(fn):
    return lambda *a: fn(*[x.view(F16).astype(F32) for x in a]).astype(F16).view(U16)


PK = {  # name -> (nsrc, float?, fn on uint16 halves -> uint16)
    "v_pk_max_u16": (2, False, np.maximum), "v_pk_min_u16": (2, False, np.minimum),
    "v_pk_max_i16": (2, False, lambda a, b: np.maximum(a.view(I16), b.view(I16)).view(U16)),
    "v_pk_min_i16": (2, False, lambda a, b: np.minimum(a.view(I16), b.view(I16)).view(U16)),
    "v_pk_add_u16": (2, False, lambda a, b: a + b), "v_pk_sub_u16": (2, False, lambda a, b: a - b),
    "v_pk_add_i16": (2, False, lambda a, b: a + b), "v_pk_sub_i16": (2, False, lambda a, b: a - b),
    "v_pk_mul_lo_u16": (2, False, lambda a, b: a * b),
    "v_pk_lshlrev_b16": (2, False, lambda a, b: b << (a & U16(15))),
    "v_pk_lshrrev_b16": (2, False, lambda a, b: b >> (a & U16(15))),
    "v_pk_ashrrev_i16": (2, False, lambda a, b: (b.view(I16) >> (a & U16(15)).view(I16)).view(U16)),
    "v_pk_add_f16": (2, True, _pk_f16(lambda a, b: a + b)), "v_pk_mul_f16": (2, True, _pk_f16(lambda a, b: a * b)),
    "v_pk_fma_f16": (3, True, lambda a, b, c: (a.view(F16).astype(F64) * b.view(F16).astype(F64)
                                               + c.view(F16).astype(F64)).astype(F16).view(U16)),
    "v_pk_max_num_f16": (2, True, _pk_f16(lambda a, b: nm.max_num_f32(a, b))),
    "v_pk_min_num_f16": (2, True, _pk_f16(lambda a, b: nm.min_num_f32(a, b))),
}


def fma_mix(st, ops, inst):
    """v_fma_mix_f32 / v_fma_mixlo_f16 / v_fma_mixhi_f16: source i is f32 when op_sel_hi[i] = 0, else the f16 half
    op_sel[i] of it, converted exactly; neg_lo negates and neg_hi takes the absolute value of source i; one f32 fma;
    mixlo/mixhi convert that to f16 into the low/high half of vD (the other half kept); clamp clamps to [0, 1]."""
    name = inst.name
    opsel, opsel_hi, neg, absm = F(inst, "opsel"), F(inst, "opsel_hi"), F(inst, "neg"), F(inst, "neg_hi")
    clamp = F(inst, "clamp")
    codes = [F(inst, f"src{i}") for i in range(3)]
    # an inline constant in an f16 slot is its f16 bit pattern (in both halves)
    const16 = [opsel_hi >> i & 1 and 128 <= c < 256 and c != 255 for i, c in enumerate(codes)]
    readers = [ops.vread(inst, c, "f16" if const16[i] else "b32") for i, c in enumerate(codes)]
    vd = F(inst, "vdst")
    row, wr = st.V[vd], ops.vwrite(vd)
    mode32 = st.prog.denorm32

    def src(x, i):
        x = np.asarray(x, dtype=U32)
        if const16[i]:
            v = (x & U32(0xFFFF)).astype(U16).view(F16).astype(F32)
        elif opsel_hi >> i & 1:
            v = ((x >> U32(16 * (opsel >> i & 1))) & U32(0xFFFF)).astype(U16).view(F16).astype(F32)
        else:
            v = x.view(F32)
        if absm >> i & 1:
            v = np.abs(v)
        if neg >> i & 1:
            v = -v
        return v

    def h(sel):
        a, b, c = (src(r(sel), i) for i, r in enumerate(readers))
        r = nm.fma_f32(*np.broadcast_arrays(a, b, c), mode32)
        if clamp:
            r = np.where(np.isnan(r), F32(0), np.clip(r, F32(0), F32(1))).astype(F32)
        if name == "v_fma_mix_f32":
            return wr(sel, np.asarray(r, dtype=F32).view(U32))
        r16 = np.asarray(r, dtype=F32).astype(F16)
        on = _ovfl_on(st, sel)
        if on is not None:     # sources are finite: a, b, c finite and r infinite is an overflow of the fma or the f16
            fin = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
            r16 = nm.saturate_f16_overflow(r16, [], on[:, None] & fin)
        h16 = r16.view(U16).astype(U32)
        old = row[sel]
        wr(sel, (old & U32(0xFFFF0000)) | h16 if name == "v_fma_mixlo_f16" else (old & U32(0xFFFF)) | h16 << U32(16))
    return h


def packed(st, ops, inst):
    """VOP3P packed 16-bit: the low result takes half opsel[i] of source i, the high result half opsel_hi[i];
    neg_lo/neg_hi flip the sign of float halves feeding the low/high result."""
    n, flt, fn = PK[inst.name]
    sat = inst.name in F16_OVERFLOW
    opsel, opsel_hi, neg, neg_hi = F(inst, "opsel"), F(inst, "opsel_hi"), F(inst, "neg"), F(inst, "neg_hi")
    readers = [ops.vread(inst, F(inst, f"src{i}"), "b32") for i in range(n)]
    wr = ops.vwrite(F(inst, "vdst"))

    def half(x, i, hi):
        sel_hi = (opsel_hi if hi else opsel) >> i & 1
        v = ((np.asarray(x) >> U32(16 * sel_hi)) & U32(0xFFFF)).astype(U16)
        if flt and ((neg_hi if hi else neg) >> i) & 1:
            v = v ^ U16(0x8000)
        return v

    def h(sel):
        xs = [r(sel) for r in readers]
        lo_in, hi_in = [half(x, i, 0) for i, x in enumerate(xs)], [half(x, i, 1) for i, x in enumerate(xs)]
        lo, hi = fn(*lo_in), fn(*hi_in)
        on = _ovfl_on(st, sel) if sat else None
        if on is not None:
            lo = nm.saturate_f16_overflow(lo, [x.view(F16) for x in lo_in], on)
            hi = nm.saturate_f16_overflow(hi, [x.view(F16) for x in hi_in], on)
        wr(sel, np.asarray(lo).astype(U32) | (np.asarray(hi).astype(U32) << U32(16)))
    return h


DOT4_F8 = {"v_dot4_f32_fp8_fp8": (nm.fp8_e4m3_to_f32, nm.fp8_e4m3_to_f32),
           "v_dot4_f32_fp8_bf8": (nm.fp8_e4m3_to_f32, nm.bf8_e5m2_to_f32),
           "v_dot4_f32_bf8_fp8": (nm.bf8_e5m2_to_f32, nm.fp8_e4m3_to_f32),
           "v_dot4_f32_bf8_bf8": (nm.bf8_e5m2_to_f32, nm.bf8_e5m2_to_f32)}


def dot4_f8(st, ops, inst):
    """v_dot4_f32_{fp8,bf8}_{fp8,bf8}: D = S2 + sum_k S0.byte[k] * S1.byte[k], the ISA pseudocode's order (tmp = S2;
    tmp += product of byte 0, 1, 2, 3; each product exact in fp32, each add one fp32 RNE rounding, denormals kept).
    Where every partial sum is exact (the attention kernels' row sums of fp8 P with S1 = 1.0: multiples of 2^-9
    below 2^15) the order and rounding points do not matter. Source modifiers are not modeled (an error)."""
    if any(F(inst, f) for f in ("opsel", "neg", "neg_hi", "clamp")):
        raise NotImplementedError(f"{inst.name}: source modifiers are not modeled")
    dec0, dec1 = DOT4_F8[inst.name]
    readers = [ops.vread(inst, F(inst, f"src{i}"), "b32") for i in range(3)]
    wr = ops.vwrite(F(inst, "vdst"))

    def h(sel):
        a, b, c = (np.asarray(r(sel), dtype=U32) for r in readers)
        a, b, c = np.broadcast_arrays(a, b, c)
        acc = c.view(F32).copy()
        for k in range(4):
            x = dec0(((a >> U32(8 * k)) & U32(0xFF)).astype(np.uint8))
            y = dec1(((b >> U32(8 * k)) & U32(0xFF)).astype(np.uint8))
            acc = (acc + (x.astype(F32) * y.astype(F32))).astype(F32)
        wr(sel, acc.view(U32))
    return h
