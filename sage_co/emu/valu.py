"""Vector ALU: VOP1/VOP2/VOP3/VOP3SD/VOPC/VOP3P/VOPD, DPP16/DPP8, WMMA.

Operands are [n, 32] arrays (or broadcastable scalars / [n, 1] SGPR columns). Each op in TABLE is
(source kinds, result kind, fn); kinds: 'u32','i32','f32' (32-bit views), 'u16','i16','f16' (low or op_sel
half), 'u64','i64','f64' (register pairs). Float source modifiers (abs/neg) are applied in the bit domain
before the view; omod/clamp after. Arithmetic comes from numerics.py (exact fma, min/max_num, conversions).
"""
from __future__ import annotations

import numpy as np

from sage_co.emu import numerics as nm
from sage_co.emu.device import EmuError
from sage_co.emu.executor import ALL, EXEC, F, NULL, VCC, pack_lanes, unpack_lanes

U8, U16, U32, U64, I16, I32, I64 = np.uint8, np.uint16, np.uint32, np.uint64, np.int16, np.int32, np.int64
F16, F32, F64 = np.float16, np.float32, np.float64
SIGN = {32: U32(0x80000000), 16: U32(0x8000), 64: U64(1 << 63)}
ABSM = {32: U32(0x7FFFFFFF), 16: U32(0x7FFF), 64: U64((1 << 63) - 1)}
import contextlib
ERR = contextlib.nullcontext()   # executor.run ignores fp warnings for the whole run


def _u(x):
    return np.asarray(x).astype(U32, copy=False)


def _f(x):
    return np.asarray(x, dtype=U32).view(F32)


def _fb(x):
    return np.asarray(x, dtype=F32).view(U32)


def _i(x):
    return np.asarray(x, dtype=U32).view(I32)


def _sh(x):
    return _u(x) & U32(31)


def bfe_u(a, off, w):
    off, w = _u(off) & U32(31), _u(w) & U32(31)
    return np.where(w == 0, U32(0), ((a.astype(U64) >> off) & ((U64(1) << w.astype(U64)) - U64(1))).astype(U32))


def bfe_i(a, off, w):
    off, w = (_u(off) & U32(31)).astype(I64), (_u(w) & U32(31)).astype(I64)
    v = (a.astype(U64) >> off.astype(U64)).astype(I64) & ((np.int64(1) << w) - 1)
    sign = (v >> np.maximum(w - 1, 0)) & 1
    v = np.where((sign == 1) & (w > 0), v - (np.int64(1) << w), v)
    return np.where(w == 0, 0, v).astype(I64).astype(U32)


def perm_b32(s0, s1, sel):
    data = (_u(s0).astype(U64) << U64(32)) | _u(s1).astype(U64)
    data = np.broadcast_arrays(data, _u(sel))[0]
    sel = np.broadcast_arrays(_u(sel), data)[0]
    out = np.zeros(data.shape, dtype=U32)
    for byte in range(4):
        s = ((sel >> U32(8 * byte)) & U32(0xFF)).astype(U64)
        b = (data >> (U64(8) * np.minimum(s, 7))) & U64(0xFF)
        sgn = np.where((data >> np.array([15, 31, 47, 63], dtype=U64)[np.clip(s.astype(I64) - 8, 0, 3)]) & U64(1),
                       U64(0xFF), U64(0))
        r = np.where(s < 8, b, np.where(s < 12, sgn, np.where(s == 12, U64(0), U64(0xFF))))
        out |= r.astype(U32) << U32(8 * byte)
    return out


def _cvt_f32_f16(h):
    return nm.f16_to_f32(h)


def _div_scale(s0, s1, s2):
    """v_div_scale_f32 S0 (value to scale), S1 (denominator), S2 (numerator) -> (D, vcc bool), following the RDNA
    ISA pseudocode case by case; where its text (written for f64) cannot apply to f32 -- "1.0 / S1 is a
    denormal" -- it is read at f32 precision (|S1| > 2^126). clang's correctly rounded f32 division is
    div_scale(d, d, n), div_scale(n, d, n) -> vcc, rcp + Newton-Raphson fmas, div_fmas(vcc), div_fixup; the
    cases are chosen so that sequence returns the IEEE quotient for every input (tests/emu/test_division.py)."""
    s0, s1, s2 = (np.asarray(x, dtype=F32) for x in (s0, s1, s2))
    with ERR:
        e1 = ((_fb(s1) >> U32(23)) & U32(0xFF)).astype(I64)
        e2 = ((_fb(s2) >> U32(23)) & U32(0xFF)).astype(I64)
        # "S2 / S1 is denormal" includes quotients that underflow f32 entirely (the sequence rescales them by
        # 2^64 and div_fmas scales back with one rounding), so test the unrounded (f64) quotient
        q = np.abs(s2.astype(F64) / s1.astype(F64))
        q_den = (q != 0) & (q < 2.0 ** -126)
        s1_den = (s1 != 0) & (np.abs(s1) < np.float32(2.0 ** -126))
        rcp_den = np.abs(s1.astype(F64)) > 2.0 ** 126             # 1/S1 would be an f32 denormal
        up, down = nm.ldexp_f32(s0, 64), nm.ldexp_f32(s0, -64)
        d, vcc = s0.copy(), np.zeros(s0.shape, dtype=bool)
        undecided = np.ones(s0.shape, dtype=bool)

        def case(cond, value, set_vcc):
            nonlocal d, vcc, undecided
            hit = undecided & cond
            d = np.where(hit, value, d)
            vcc = vcc | (hit & set_vcc)
            undecided = undecided & ~cond

        case((s2 == 0) | (s1 == 0), np.float32(np.nan), False)
        case(e2 - e1 >= 96, np.where(s0 == s1, up, s0), True)       # N/D near FLT_MAX: scale the denominator
        case(s1_den, up, False)
        # |S1| > 2^126 with a denormal quotient: the pseudocode's f64 text would scale the denominator *up*
        # (to inf); scaling it down like the next case is the reading under which the sequence stays exact
        # (docs/emulator.md §Division; unverified on hardware)
        case(rcp_den & q_den, np.where(s0 == s1, down, s0), True)
        case(rcp_den, down, False)
        case(q_den, np.where(s0 == s2, up, s0), True)               # quotient denormal: scale the numerator
        case(e2 <= 23, up, False)                                   # numerator tiny
    return d.astype(F32), vcc


def _div_fmas(a, b, c, vcc):
    """v_div_fmas_f32: fma(a, b, c), times 2^64 (exponent of c > 127) or 2^-64 where vcc is set, rounded once:
    the exact a*b + c is kept round-to-odd in f64 through the power-of-two scaling, then rounded to f32 (so a
    quotient that lands in the f32 subnormal range is not rounded twice)."""
    a, b, c = (np.asarray(x, dtype=F32) for x in (a, b, c))
    r = nm.fma_f32(a, b, c)
    if not np.any(vcc):
        return r
    with ERR:
        p, c64 = a.astype(F64) * b.astype(F64), c.astype(F64)
        s = p + c64
        bv = s - p
        err = (p - (s - bv)) + (c64 - bv)                           # TwoSum: exact error of s
        odd = nm.round_odd_f64(np.atleast_1d(s), np.atleast_1d(err)).reshape(s.shape)
        e2 = (_fb(c) >> U32(23)) & U32(0xFF)
        scaled = (odd * np.where(e2 > 127, 2.0 ** 64, 2.0 ** -64)).astype(F32)
    return np.where(vcc, scaled, r).astype(F32)


def _div_fixup(s0, s1, s2):
    """s0 = quotient estimate, s1 = denominator, s2 = numerator."""
    sign = np.signbit(s1) ^ np.signbit(s2)
    inf = np.where(sign, np.float32(-np.inf), np.float32(np.inf))
    zero = np.where(sign, np.float32(-0.0), np.float32(0.0))
    with ERR:
        r = np.where(np.isnan(s0), inf, np.where(sign, -np.abs(s0), np.abs(s0)))
        r = np.where((np.abs(s1) == np.inf) | (s2 == 0), zero, r)
        r = np.where((s1 == 0) | (np.abs(s2) == np.inf), inf, r)
        r = np.where(((s1 == 0) & (s2 == 0)) | ((np.abs(s1) == np.inf) & (np.abs(s2) == np.inf)),
                     np.float32(np.nan), r)
        r = np.where(np.isnan(s1), s1, r)
        r = np.where(np.isnan(s2), s2, r)
    return nm.quiet_nan(r.astype(F32))


def _sat_i16(x):
    return np.clip(x.astype(I64), -32768, 32767).astype(I64).astype(U32) & U32(0xFFFF)


def _cls(x, mask):
    """v_cmp_class_f32: bit 0 sNaN, 1 qNaN, 2 -inf, 3 -normal, 4 -denorm, 5 -0, 6 +0, 7 +denorm, 8 +normal, 9 +inf."""
    b = _fb(x)
    m = _u(mask)
    exp = (b >> U32(23)) & U32(0xFF)
    man = b & U32(0x7FFFFF)
    neg = (b >> U32(31)) == 1
    isnan = (exp == 255) & (man != 0)
    qnan = isnan & ((man >> U32(22)) == 1)
    snan = isnan & ~qnan
    inf = (exp == 255) & (man == 0)
    zero = (exp == 0) & (man == 0)
    den = (exp == 0) & (man != 0)
    norm = (exp > 0) & (exp < 255)
    cls = [snan, qnan, inf & neg, norm & neg, den & neg, zero & neg, zero & ~neg, den & ~neg, norm & ~neg,
           inf & ~neg]
    out = np.zeros(np.broadcast(b, m).shape, dtype=bool)
    for i, c in enumerate(cls):
        out |= c & (((m >> U32(i)) & U32(1)) == 1)
    return out


def _mul_hi_u(a, b):
    return ((a.astype(U64) * b.astype(U64)) >> U64(32)).astype(U32)


def _mul_hi_i(a, b):
    return ((_i(a).astype(I64) * _i(b).astype(I64)) >> 64 - 32).astype(U32)


def _u24(x):
    return _u(x) & U32(0xFFFFFF)


def _i24(x):
    return ((_u(x) << U32(8)).view(I32) >> 8)


def _minmax_i(fn):
    return lambda a, b: fn(_i(a), _i(b)).view(U32)


# ----------------------------------------------------------------------------------------------- op table
# kinds: 'b' = 32-bit int (uint32), 'f' = f32, 'h' = f16 half, 's' = 16-bit int half, 'q' = u64 pair, 'd' = f64
T = {}


def op(name, srcs, res, fn, flt=False):
    T[name] = (srcs, res, fn, flt)


for _n, _fn in {
    "v_add_f32": lambda a, b: a + b, "v_sub_f32": lambda a, b: a - b, "v_subrev_f32": lambda a, b: b - a,
    "v_mul_f32": lambda a, b: a * b,
    "v_max_num_f32": nm.max_num_f32, "v_min_num_f32": nm.min_num_f32,
    "v_ldexp_f32": None,
}.items():
    if _fn is not None:
        op(_n, "ff", "f", _fn, True)
op("v_mul_legacy_f32", "ff", "f", lambda a, b: np.where((a == 0) | (b == 0), np.float32(0), a * b), True)
op("v_mul_dx9_zero_f32", "ff", "f", lambda a, b: np.where((a == 0) | (b == 0), np.float32(0), a * b), True)
op("v_ldexp_f32", "fb", "f", lambda a, b: nm.ldexp_f32(a, _i(b)), True)
op("v_fma_f32", "fff", "f", nm.fma_f32, True)
op("v_fmac_f32", "fff", "f", nm.fma_f32, True)      # src2 = vdst (filled in by the builder)
op("v_fmaak_f32", "fff", "f", nm.fma_f32, True)
op("v_fmamk_f32", "fff", "f", nm.fma_f32, True)
op("v_max3_num_f32", "fff", "f", nm.max3_num_f32, True)
op("v_min3_num_f32", "fff", "f", nm.min3_num_f32, True)
op("v_med3_num_f32", "fff", "f", nm.med3_num_f32, True)
op("v_maxmin_num_f32", "fff", "f", lambda a, b, c: nm.min_num_f32(nm.max_num_f32(a, b), c), True)
op("v_minmax_num_f32", "fff", "f", lambda a, b, c: nm.max_num_f32(nm.min_num_f32(a, b), c), True)
op("v_div_fixup_f32", "fff", "f", _div_fixup, True)
op("v_exp_f32", "f", "f", nm.exp2_f32)
op("v_log_f32", "f", "f", nm.log2_f32)
op("v_rcp_f32", "f", "f", nm.rcp_f32)
op("v_rcp_iflag_f32", "f", "f", nm.rcp_f32)
op("v_rsq_f32", "f", "f", nm.rsq_f32)
op("v_sqrt_f32", "f", "f", nm.sqrt_f32)
op("v_sin_f32", "f", "f", lambda a: nm.flush_f32(np.sin(a.astype(F64) * 2 * np.pi).astype(F32)))
op("v_cos_f32", "f", "f", lambda a: nm.flush_f32(np.cos(a.astype(F64) * 2 * np.pi).astype(F32)))
op("v_rndne_f32", "f", "f", nm.rndne_f32, True)
op("v_trunc_f32", "f", "f", nm.trunc_f32, True)
op("v_floor_f32", "f", "f", nm.floor_f32, True)
op("v_ceil_f32", "f", "f", nm.ceil_f32, True)
op("v_fract_f32", "f", "f", nm.fract_f32, True)
op("v_frexp_mant_f32", "f", "f", nm.frexp_mant_f32, True)
op("v_frexp_exp_i32_f32", "f", "b", lambda a: nm.frexp_exp_i32_f32(a).view(U32))
op("v_cvt_f32_i32", "b", "f", lambda a: nm.cvt_f32_i32(_i(a)))
op("v_cvt_f32_u32", "b", "f", lambda a: nm.cvt_f32_u32(a))
op("v_cvt_i32_f32", "f", "b", lambda a: nm.cvt_i32_f32(a).view(U32))
op("v_cvt_u32_f32", "f", "b", nm.cvt_u32_f32)
op("v_cvt_nearest_i32_f32", "f", "b", lambda a: nm.cvt_nearest_i32_f32(a).view(U32))
op("v_cvt_floor_i32_f32", "f", "b", lambda a: nm.cvt_i32_f32(np.floor(a)).view(U32))
for _k in range(4):
    op(f"v_cvt_f32_ubyte{_k}", "b", "f", lambda a, k=_k: ((a >> U32(8 * k)) & U32(0xFF)).astype(F32))
op("v_cvt_f16_f32", "f", "h", lambda a: nm.f32_to_f16(a))
op("v_cvt_f32_f16", "h", "f", lambda a: a.astype(F32))
op("v_cvt_pk_rtz_f16_f32", "ff", "b", lambda a, b: _pk_rtz(a) | (_pk_rtz(b) << U32(16)))
op("v_cvt_pk_i16_i32", "bb", "b", lambda a, b: _sat_i16(_i(a)) | (_sat_i16(_i(b)) << U32(16)))
op("v_cvt_pk_u16_u32", "bb", "b", lambda a, b: np.minimum(a, U32(0xFFFF)) | (np.minimum(b, U32(0xFFFF)) << U32(16)))
op("v_cvt_f32_fp8", "b", "f", lambda a: nm.fp8_e4m3_to_f32(a & U32(0xFF)))
op("v_cvt_f32_bf8", "b", "f", lambda a: nm.bf8_e5m2_to_f32(a & U32(0xFF)))
# integer
for _n, _fn in {
    "v_add_nc_u32": lambda a, b: a + b, "v_sub_nc_u32": lambda a, b: a - b, "v_subrev_nc_u32": lambda a, b: b - a,
    "v_and_b32": lambda a, b: a & b, "v_or_b32": lambda a, b: a | b, "v_xor_b32": lambda a, b: a ^ b,
    "v_xnor_b32": lambda a, b: ~(a ^ b),
    "v_lshlrev_b32": lambda a, b: b << _sh(a), "v_lshrrev_b32": lambda a, b: b >> _sh(a),
    "v_ashrrev_i32": lambda a, b: (_i(b) >> _sh(a).view(I32)).view(U32),
    "v_max_u32": np.maximum, "v_min_u32": np.minimum,
    "v_max_i32": _minmax_i(np.maximum), "v_min_i32": _minmax_i(np.minimum),
    "v_mul_lo_u32": lambda a, b: (a.astype(U64) * b.astype(U64)).astype(U32),
    "v_mul_hi_u32": _mul_hi_u, "v_mul_hi_i32": _mul_hi_i,
    "v_mul_u32_u24": lambda a, b: (_u24(a).astype(U64) * _u24(b).astype(U64)).astype(U32),
    "v_mul_hi_u32_u24": lambda a, b: ((_u24(a).astype(U64) * _u24(b).astype(U64)) >> U64(32)).astype(U32),
    "v_mul_i32_i24": lambda a, b: (_i24(a).astype(I64) * _i24(b).astype(I64)).astype(U32),
    "v_mul_hi_i32_i24": lambda a, b: ((_i24(a).astype(I64) * _i24(b).astype(I64)) >> 32).astype(U32),
    "v_bfm_b32": lambda a, b: (((U64(1) << (_u(a) & U32(31)).astype(U64)) - U64(1)).astype(U32)) << _sh(b),
    "v_cvt_pk_rtz_f16_f32": None,
}.items():
    if _fn is not None:
        op(_n, "bb", "b", _fn)
op("v_mov_b32", "b", "b", lambda a: a)
op("v_bcnt_u32_b32", "bb", "b", lambda a, b: _popcnt(a) + b)
op("v_mbcnt_lo_u32_b32", "bb", "b", lambda a, b: _mbcnt(a) + b)
op("v_mbcnt_hi_u32_b32", "bb", "b", lambda a, b: b + U32(0) * _u(a))   # wave32: lanes 32..63 do not exist
op("v_not_b32", "b", "b", lambda a: ~_u(a))
op("v_bfrev_b32", "b", "b", lambda a: _brev(a))
op("v_ffbh_u32", "b", "b", lambda a: _ffbh(a))
op("v_ffbl_b32", "b", "b", lambda a: _ffbl(a))
op("v_ctz_i32_b32", "b", "b", lambda a: _ffbl(a))       # gfx12 names of ffbl / ffbh
op("v_clz_i32_u32", "b", "b", lambda a: _ffbh(a))
op("v_cvt_u32_u16", "s", "b", lambda a: a.astype(U32))
op("v_cvt_i32_i16", "s", "b", lambda a: a.view(I16).astype(I32).view(U32))
for _n, _fn in {
    "v_add3_u32": lambda a, b, c: a + b + c, "v_lshl_add_u32": lambda a, b, c: (a << _sh(b)) + c,
    "v_add_lshl_u32": lambda a, b, c: (a + b) << _sh(c), "v_lshl_or_b32": lambda a, b, c: (a << _sh(b)) | c,
    "v_and_or_b32": lambda a, b, c: (a & b) | c, "v_or3_b32": lambda a, b, c: a | b | c,
    "v_xor3_b32": lambda a, b, c: a ^ b ^ c, "v_xad_u32": lambda a, b, c: (a ^ b) + c,
    "v_bfe_u32": bfe_u, "v_bfe_i32": bfe_i, "v_bfi_b32": lambda a, b, c: (a & b) | (~a & c),
    "v_alignbit_b32": lambda a, b, c: (((a.astype(U64) << U64(32)) | b.astype(U64)) >> (_u(c) & U32(31)).astype(U64))
    .astype(U32),
    "v_alignbyte_b32": lambda a, b, c: (((a.astype(U64) << U64(32)) | b.astype(U64))
                                        >> (U64(8) * (_u(c) & U32(3)).astype(U64))).astype(U32),
    "v_perm_b32": perm_b32,
    "v_mad_u32_u24": lambda a, b, c: (_u24(a).astype(U64) * _u24(b).astype(U64) + c).astype(U32),
    "v_mad_i32_i24": lambda a, b, c: (_i24(a).astype(I64) * _i24(b).astype(I64) + _i(c)).astype(U32),
    "v_max3_u32": lambda a, b, c: np.maximum(np.maximum(a, b), c),
    "v_min3_u32": lambda a, b, c: np.minimum(np.minimum(a, b), c),
    "v_max3_i32": lambda a, b, c: np.maximum(np.maximum(_i(a), _i(b)), _i(c)).view(U32),
    "v_min3_i32": lambda a, b, c: np.minimum(np.minimum(_i(a), _i(b)), _i(c)).view(U32),
    "v_med3_i32": lambda a, b, c: np.maximum(np.minimum(_i(a), _i(b)), np.minimum(np.maximum(_i(a), _i(b)), _i(c)))
    .view(U32),
    "v_med3_u32": lambda a, b, c: np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c)),
    "v_maxmin_i32": lambda a, b, c: np.minimum(np.maximum(_i(a), _i(b)), _i(c)).view(U32),
    "v_minmax_i32": lambda a, b, c: np.maximum(np.minimum(_i(a), _i(b)), _i(c)).view(U32),
    "v_maxmin_u32": lambda a, b, c: np.minimum(np.maximum(a, b), c),
    "v_minmax_u32": lambda a, b, c: np.maximum(np.minimum(a, b), c),
    "v_cvt_pk_u8_f32": None,
}.items():
    if _fn is not None:
        op(_n, "bbb", "b", _fn)
op("v_cvt_pk_u8_f32", "fbb", "b", lambda a, b, c: _cvt_pk_u8(a, b, c))
op("v_lshlrev_b64", "bq", "q", lambda a, b: b << (_u(a) & U32(63)).astype(U64))
op("v_lshrrev_b64", "bq", "q", lambda a, b: b >> (_u(a) & U32(63)).astype(U64))
op("v_ashrrev_i64", "bq", "q", lambda a, b: (b.view(I64) >> (_u(a) & U32(63)).astype(I64)).view(U64))
op("v_lshl_add_u64", "qbq", "q", lambda a, b, c: (a << (_u(b) & U32(7)).astype(U64)) + c)
op("v_add_nc_u64", "qq", "q", lambda a, b: a + b)
# 16-bit
op("v_pack_b32_f16", "hh", "b", lambda a, b: a.view(U16).astype(U32) | (b.view(U16).astype(U32) << U32(16)))
op("v_add_f16", "hh", "h", lambda a, b: (a.astype(F32) + b.astype(F32)).astype(F16))
op("v_mul_f16", "hh", "h", lambda a, b: (a.astype(F32) * b.astype(F32)).astype(F16))
op("v_sub_f16", "hh", "h", lambda a, b: (a.astype(F32) - b.astype(F32)).astype(F16))
op("v_fma_f16", "hhh", "h", lambda a, b, c: (a.astype(F64) * b.astype(F64) + c.astype(F64)).astype(F16))
op("v_mov_b16", "s", "s", lambda a: a)
op("v_add_nc_u16", "ss", "s", lambda a, b: a + b)
op("v_sub_nc_u16", "ss", "s", lambda a, b: a - b)
op("v_lshlrev_b16", "ss", "s", lambda a, b: b << (a & U16(15)))
op("v_lshrrev_b16", "ss", "s", lambda a, b: b >> (a & U16(15)))
op("v_and_b16", "ss", "s", lambda a, b: a & b)
op("v_or_b16", "ss", "s", lambda a, b: a | b)
op("v_xor_b16", "ss", "s", lambda a, b: a ^ b)
op("v_cvt_f16_u16", "s", "h", lambda a: a.astype(F16))
op("v_cvt_f16_i16", "s", "h", lambda a: a.view(I16).astype(F16))


def _pk_rtz(x):
    """f32 -> f16 round toward zero (v_cvt_pk_rtz_f16_f32)."""
    with ERR:
        h = x.astype(F16)
        back = h.astype(F32)
        over = np.abs(back) > np.abs(x)
        hb = h.view(U16).astype(np.int32)
        hb = np.where(over & np.isfinite(x) & ~np.isnan(x), hb - 1, hb)
        hb = np.where(np.isnan(x), nm.f32_to_f16(x), hb)          # NaN: quiet, as numerics.f32_to_f16
    return (hb & 0xFFFF).astype(U32)


def _cvt_pk_u8(a, b, c):
    v = np.clip(nm.rndne_f32(a), 0, 255)
    v = np.where(np.isnan(a), 0, v).astype(U32)
    sh = (_u(b) & U32(3)) * U32(8)
    return (_u(c) & ~(U32(0xFF) << sh)) | (v << sh)


def _popcnt(a):
    a = np.ascontiguousarray(_u(a))
    return np.unpackbits(a.view(U8).reshape(*a.shape, 4), axis=-1).sum(-1).astype(U32)


def _mbcnt(a):
    """Count of set bits of a below the current lane (v_mbcnt_lo_u32_b32)."""
    below = (U64(1) << np.arange(32, dtype=U64)) - U64(1)
    return _popcnt((np.asarray(a, dtype=U32).astype(U64)[..., None] & below[None, :]).astype(U32)
                   if np.ndim(a) == 1 else (np.asarray(a, dtype=U32).astype(U64) & below).astype(U32))


def _brev(a):
    a = _u(a)
    x = np.ascontiguousarray(a).view(U8)
    bits = np.unpackbits(x.reshape(*a.shape, 4), axis=-1, bitorder="little")[..., ::-1]
    return np.packbits(np.ascontiguousarray(bits), axis=-1, bitorder="little").view(U32)[..., 0]


def _ffbh(a):
    a = _u(a)
    out = np.full(a.shape, 0xFFFFFFFF, dtype=U32)
    for i in range(32):
        out = np.where((a >> U32(i)) & U32(1), U32(31 - i), out)
    return out


def _ffbl(a):
    a = _u(a)
    out = np.full(a.shape, 0xFFFFFFFF, dtype=U32)
    for i in range(31, -1, -1):
        out = np.where((a >> U32(i)) & U32(1), U32(i), out)
    return out


# compares: name suffix -> fn(a, b) on typed values
CMP = {"f": lambda a, b: np.zeros(np.broadcast(a, b).shape, bool), "lt": np.less, "eq": np.equal,
       "le": np.less_equal, "gt": np.greater, "lg": lambda a, b: (a < b) | (a > b), "ne": np.not_equal,
       "ge": np.greater_equal, "o": lambda a, b: ~np.isnan(a) & ~np.isnan(b),
       "u": lambda a, b: np.isnan(a) | np.isnan(b), "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)),
       "ngt": lambda a, b: ~(a > b), "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b),
       "nlt": lambda a, b: ~(a < b), "tru": lambda a, b: np.ones(np.broadcast(a, b).shape, bool),
       "t": lambda a, b: np.ones(np.broadcast(a, b).shape, bool)}
CMP_KIND = {"f32": ("f", F32), "i32": ("b", I32), "u32": ("b", U32), "f16": ("h", F16), "i16": ("s", I16),
            "u16": ("s", U16), "u64": ("q", U64), "i64": ("q", I64), "f64": ("d", F64)}


# ----------------------------------------------------------------------------------------------- operands
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
        raw = self.ops.vread(inst, code, rkind)
        if i == 0 and self.dpp is not None:
            raw = dpp_source(st, self.dpp, raw)
        hi = (self.opsel >> i) & 1 if inst.enc == "VOP3" else 0
        fl = kind in ("f", "h", "d")
        ab, ng = fl and (self.abs >> i) & 1, fl and (self.neg >> i) & 1
        if bits == 16:
            sh = U32(16 * hi)

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
            return lambda sel: np.asarray(raw(sel)).view(F32)
        if kind == "d":
            return lambda sel: np.asarray(raw(sel)).view(F64)
        return raw


def dpp_source(st, dpp, raw):
    """DPP16/DPP8 lane permutation of src0. Returns a reader giving (values [n,32]) and records, per call, the
    lanes that may be written in st._dpp_mask (bool [n,32] or None)."""
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
            st._dpp_mask = None if wmask.all() else np.broadcast_to(wmask, out.shape)
        else:
            st._dpp_mask = ok & wmask
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
        row = V[vd]
        sh = U32(16 * dst_hi)
        keep = U32(0xFFFF0000) if not dst_hi else U32(0x0000FFFF)
        base = ops.vwrite(vd)

        def w(sel, val):
            val = np.asarray(val)
            v16 = val.view(U16) if val.dtype in (F16, I16) else val.astype(U16, copy=False)
            base(sel, (row[sel] & keep) | (v16.astype(U32) << sh))
        return w
    base = ops.vwrite(vd)
    if dpp:
        mw = ops.vwrite_masked(vd)

        def w(sel, val):
            val = np.asarray(val)
            if val.dtype != U32:
                val = val.view(U32) if val.dtype.itemsize == 4 else val.astype(U32)
            m = st._dpp_mask
            if m is None:
                return base(sel, val)
            mw(sel, val, m & (EXM if sel is ALL else EXM[sel]))
        return w

    def w(sel, val):
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
    if enc == "VOP3P" and name in PK:
        return _packed(st, ops, inst)
    if name not in T:
        return None
    srcs, res, fn, flt = T[name]
    codes = _src_codes(inst, len(srcs))
    if name == "v_fmac_f32":
        codes[2] = 256 + F(inst, "vdst")
    elif name == "v_fmaak_f32":
        codes[2] = 255
    elif name == "v_fmamk_f32":
        codes = [codes[0], 255, codes[1]]
    readers = [src.read(i, c, k) for i, (c, k) in enumerate(zip(codes, srcs))]
    vd = F(inst, "vdst")
    dst_hi = (F(inst, "opsel") >> 3) & 1 if enc == "VOP3" else 0
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
    if len(readers) == 1:
        r0, = readers

        def h(sel):
            with ERR:
                wr(sel, fn(r0(sel)))
    elif len(readers) == 2:
        r0, r1 = readers

        def h(sel):
            with ERR:
                wr(sel, fn(r0(sel), r1(sel)))
    else:
        r0, r1, r2 = readers

        def h(sel):
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
    return lambda sel: unpack_lanes(np.broadcast_to(np.asarray(r(sel), dtype=U32), (st.W if sel is ALL else len(sel),)))


def _sdst_writer(st, ops, code):
    """Write a per-lane bool result into a lane-mask SGPR: only active lanes' bits change."""
    S = st.S
    wr = ops.swrite(code)

    def w(sel, bits_bool):
        bits = pack_lanes(np.broadcast_to(bits_bool, (st.W if sel is ALL else len(sel), 32)))
        if code == NULL:
            return
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
        row, wr = st.V[vd], ops.vwrite(vd)

        def h(sel):
            n = st.W if sel is ALL else len(sel)
            x = np.broadcast_to(a(sel), (n, 32))
            y = np.broadcast_to(b(sel), (n, 32))
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
        d, vcc = _div_scale(x, y, z)
        cw(sel, vcc)
        wr(sel, d)
    return h


def _div_fmas_op(st, ops, inst, src):
    a, b, c = (src.read(i, F(inst, f"src{i}"), "f") for i in range(3))
    m = _lanemask_reader(st, ops, inst, VCC)
    wr = _typed_writer(st, ops, inst, F(inst, "vdst"), "f")
    return lambda sel: wr(sel, _div_fmas(a(sel), b(sel), c(sel), m(sel)))


def _nop(st, ops, inst, src):
    return lambda sel: None


SPECIAL = {
    "v_cndmask_b32": _cndmask,
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


# ----------------------------------------------------------------------------------------------- VOP3P packed
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


def _packed(st, ops, inst):
    """VOP3P packed 16-bit: the low result takes half opsel[i] of source i, the high result half opsel_hi[i];
    neg_lo/neg_hi flip the sign of float halves feeding the low/high result."""
    n, flt, fn = PK[inst.name]
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
        lo = fn(*[half(x, i, 0) for i, x in enumerate(xs)])
        hi = fn(*[half(x, i, 1) for i, x in enumerate(xs)])
        wr(sel, np.asarray(lo).astype(U32) | (np.asarray(hi).astype(U32) << U32(16)))
    return h


# ----------------------------------------------------------------------------------------------- VOPD
def _vopd(st, ops, inst, pc):
    """Dual issue: both halves read their sources before either writes (rdna4_facts §2 VOPD)."""
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
    from sage_co.emu import wmma as wm
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
            from sage_co.emu import sanitizer
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
