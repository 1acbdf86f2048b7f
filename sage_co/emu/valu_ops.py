"""The VALU op table: per mnemonic (source kinds, result kind, fn on numpy arrays, float?) and the arithmetic
helpers behind it. Pure functions of their operands -- no register state (valu.py binds operands to them).

Kinds: 'b' = 32-bit int (uint32), 'f' = f32, 'h' = f16 half, 's' = 16-bit int half, 'q' = u64 pair, 'd' = f64.
"""
from __future__ import annotations

import contextlib

import numpy as np

from sage_co.emu import numerics as nm
from sage_co.emu.state import ALL, MODE_FP16_OVFL

U8, U16, U32, U64, I16, I32, I64 = np.uint8, np.uint16, np.uint32, np.uint64, np.int16, np.int32, np.int64
F16, F32, F64 = np.float16, np.float32, np.float64
ERR = contextlib.nullcontext()   # executor.run ignores fp warnings for the whole run


def _u(x):
    return np.asarray(x).astype(U32, copy=False)


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


_PERM_INDEX: dict = {}    # constant selector -> byte index into [S1 bytes 0-3, S0 bytes 4-7, 0x00, 0xFF], or None


def _perm_index(sel: int):
    """Byte gather index of a constant v_perm_b32 selector, or None when a byte takes a sign (selector 8-11)."""
    if sel not in _PERM_INDEX:
        idx = []
        for byte in range(4):
            s = (sel >> (8 * byte)) & 0xFF
            idx.append(s if s < 8 else 8 if s == 12 else 9 if s > 12 else -1)
        _PERM_INDEX[sel] = None if -1 in idx else np.array(idx)
    return _PERM_INDEX[sel]


def perm_b32(s0, s1, sel):
    if np.ndim(sel) == 0:       # constant selector (Triton/clang pack halves this way): one byte gather
        idx = _perm_index(int(sel))
        if idx is not None:
            s0, s1 = np.broadcast_arrays(_u(s0), _u(s1))
            src = np.empty(s0.shape + (3,), U32)
            src[..., 0], src[..., 1], src[..., 2] = s1, s0, U32(0xFF00)
            return np.ascontiguousarray(src.view(U8)[..., idx]).view(U32)[..., 0]
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


def div_scale(s0, s1, s2):
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


def div_fmas(a, b, c, vcc):
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


def div_fixup(s0, s1, s2):
    """v_div_fixup_f32: s0 = quotient estimate, s1 = denominator, s2 = numerator (the last step of clang's f32
    division; div_scale, div_fmas and this are public so a test can replay the whole sequence)."""
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
op("v_minimum_f32", "ff", "f", nm.minimum_f32, True)
op("v_maximum_f32", "ff", "f", nm.maximum_f32, True)
op("v_minimum3_f32", "fff", "f", lambda a, b, c: nm.minimum_f32(nm.minimum_f32(a, b), c), True)
op("v_maximum3_f32", "fff", "f", lambda a, b, c: nm.maximum_f32(nm.maximum_f32(a, b), c), True)
op("v_minimummaximum_f32", "fff", "f", lambda a, b, c: nm.maximum_f32(nm.minimum_f32(a, b), c), True)
op("v_maximumminimum_f32", "fff", "f", lambda a, b, c: nm.minimum_f32(nm.maximum_f32(a, b), c), True)
op("v_min3_num_f32", "fff", "f", nm.min3_num_f32, True)
op("v_med3_num_f32", "fff", "f", nm.med3_num_f32, True)
op("v_maxmin_num_f32", "fff", "f", lambda a, b, c: nm.min_num_f32(nm.max_num_f32(a, b), c), True)
op("v_minmax_num_f32", "fff", "f", lambda a, b, c: nm.max_num_f32(nm.min_num_f32(a, b), c), True)
op("v_div_fixup_f32", "fff", "f", div_fixup, True)
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
# a signalling NaN comes out quiet (numpy's cast keeps it signalling): docs/rdna4.md §Scalar float, f16 -> f32 NaN
op("v_cvt_f32_f16", "h", "f", lambda a: nm.quiet_nan(a.astype(F32)))
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
for _n in ("v_fmac_f16", "v_fmaak_f16", "v_fmamk_f16"):     # src2 = vdst / literal (filled in by the builder)
    op(_n, "hhh", "h", T["v_fma_f16"][2])
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


def fp16_ovfl_handler(st, readers, fn, wr):
    """Handler of a table op with an f16 result: MODE.FP16_OVFL, read per step (s_setreg may change it), saturates an
    overflowing result of finite sources (numerics.saturate_f16_overflow; docs/rdna4.md §FP16_OVFL)."""
    mode, bit = st.mode, U32(MODE_FP16_OVFL)

    def h(sel):
        with ERR:
            xs = [r(sel) for r in readers]
            out = fn(*xs)
            on = ((mode if sel is ALL else mode[sel]) & bit) != 0
            if on.any():
                out = nm.saturate_f16_overflow(out, xs, on)
            wr(sel, out)
    return h


# f16-result instructions outside the op table whose MODE.FP16_OVFL saturation is not emulated: with the bit set they
# stop the run instead of returning an infinity the hardware would not (docs/rdna4.md §FP16_OVFL). Ops whose result
# cannot overflow (min/max, rounding, round-toward-zero conversions) are not listed.
FP16_OVFL_UNEMULATED = frozenset({
    "v_wmma_f16_16x16x16_f16"})


def fp16_ovfl_refused(st, pc, h):
    """Wrap handler h of an FP16_OVFL_UNEMULATED instruction: a wave with MODE.FP16_OVFL set stops the run."""
    mode, bit = st.mode, U32(MODE_FP16_OVFL)

    def checked(sel):
        if (((mode if sel is ALL else mode[sel]) & bit) != 0).any():
            st.fail(pc, "MODE.FP16_OVFL is set: its saturation of this instruction's f16 result is not emulated")
        return h(sel)
    return checked
