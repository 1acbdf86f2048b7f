"""Independent reference models of the gfx12 scalar-float group for tests/emu/test_scalar_float.py.

Written from the RDNA4 pseudocode and IEEE-754 (docs/rdna4.md §Scalar float), element by element on Python ints
(register bits) with exact rational arithmetic (fractions.Fraction) and mpmath for the transcendentals -- no code
shared with sage_co.emu. `flush` is the denormal mode applied (True: FLOAT_DENORM_MODE 0 = flush inputs and
results, False: mode 3 = keep).
"""
from __future__ import annotations

import math
from fractions import Fraction

import mpmath

F32 = dict(bits=32, mbits=23, ebits=8, bias=127)
F16 = dict(bits=16, mbits=10, ebits=5, bias=15)


def fields(fmt):
    m, e = fmt["mbits"], fmt["ebits"]
    return (1 << (fmt["bits"] - 1)), ((1 << e) - 1) << m, (1 << m) - 1, 1 << (m - 1)


def is_nan(x, fmt):
    s, em, mm, q = fields(fmt)
    return (x & em) == em and (x & mm) != 0


def is_snan(x, fmt):
    return is_nan(x, fmt) and not (x & fields(fmt)[3])


def is_denorm(x, fmt):
    s, em, mm, q = fields(fmt)
    return (x & em) == 0 and (x & mm) != 0


def flush(x, fmt, on=True):
    return (x & fields(fmt)[0]) if on and is_denorm(x, fmt) else x


def value(x, fmt):
    """bits -> Fraction (finite) or float inf/nan."""
    s, em, mm, q = fields(fmt)
    neg = bool(x & s)
    e, m = (x & em) >> fmt["mbits"], x & mm
    if e == (em >> fmt["mbits"]):
        return math.nan if m else (-math.inf if neg else math.inf)
    mag = Fraction(m, 1 << fmt["mbits"]) * Fraction(2) ** (1 - fmt["bias"]) if e == 0 else \
        Fraction((1 << fmt["mbits"]) | m, 1 << fmt["mbits"]) * Fraction(2) ** (e - fmt["bias"])
    return -mag if neg else mag


def encode(v, fmt, neg_zero=False):
    """Exact value (Fraction / int / +-inf) -> bits, rounding to nearest even with subnormals and overflow to inf.
    A zero result takes the sign neg_zero."""
    s, em, mm, q = fields(fmt)
    if isinstance(v, float) and math.isinf(v):
        return em | (s if v < 0 else 0)
    v = Fraction(v)
    if v == 0:
        return s if neg_zero else 0
    sign = s if v < 0 else 0
    a = abs(v)
    p, emin, emax = fmt["mbits"] + 1, 1 - fmt["bias"], fmt["bias"]
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    e = max(e, emin)
    ulp = Fraction(2) ** (e - p + 1)
    n, r = divmod(a, ulp)
    n = int(n)
    if r * 2 > ulp or (r * 2 == ulp and n & 1):
        n += 1
    mag = n * ulp
    if mag >= Fraction(2) ** (emax + 1):
        return em | sign
    if mag == 0:
        return sign
    e2 = mag.numerator.bit_length() - mag.denominator.bit_length()
    if Fraction(2) ** e2 > mag:
        e2 -= 1
    if e2 < emin:                                       # subnormal
        return sign | int(mag / Fraction(2) ** (emin - fmt["mbits"]))
    m = int(mag / Fraction(2) ** (e2 - fmt["mbits"])) - (1 << fmt["mbits"])
    return sign | ((e2 + fmt["bias"]) << fmt["mbits"]) | m


def quiet(x, fmt):
    return x | fields(fmt)[3]


# ---------------------------------------------------------------------------------------------- arithmetic
def _arith(op, xs, fmt, fl):
    """IEEE add/sub/mul/fma of bit patterns; returns bits, or 'qnan' when the result is NaN (payload not pinned by
    the ISA: only 'a quiet NaN' is asserted)."""
    xs = [flush(x, fmt, fl) for x in xs]
    vs = [value(x, fmt) for x in xs]
    s = fields(fmt)[0]
    if any(isinstance(v, float) and math.isnan(v) for v in vs):
        return "qnan"
    signs = [bool(x & s) for x in xs]
    fv = [float(v) if isinstance(v, float) else v for v in vs]

    def inf(v):
        return isinstance(v, float) and math.isinf(v)
    if op == "mul" or op == "fma":
        a, b = fv[0], fv[1]
        if (inf(a) and b == 0) or (inf(b) and a == 0):
            return "qnan"
        psign = signs[0] ^ signs[1]
        if inf(a) or inf(b):
            p = -math.inf if psign else math.inf
        else:
            p = a * b
        if op == "mul":
            r = p
            zsign = psign
            return flush(encode(r, fmt, zsign), fmt, fl)
        c, csign = fv[2], signs[2]
        if inf(p) and inf(c) and (p > 0) != (c > 0):
            return "qnan"
        if inf(p) or inf(c):
            return encode(p if inf(p) else c, fmt)
        r = p + c
        # zero result: -0 only for (-0) + (-0); an exact cancellation gives +0 in round-to-nearest
        zsign = psign and csign if (p == 0 and c == 0) else False
        return flush(encode(r, fmt, zsign), fmt, fl)
    a, b = fv[0], fv[1]
    bsign = signs[1]
    if op == "sub":
        b = -b if not inf(b) else -b
        bsign = not bsign
    if inf(a) and inf(b) and (a > 0) != (b > 0):
        return "qnan"
    if inf(a) or inf(b):
        return encode(a if inf(a) else b, fmt)
    r = a + b
    zsign = signs[0] and bsign if (a == 0 and b == 0) else False
    return flush(encode(r, fmt, zsign), fmt, fl)


def add(a, b, fmt, fl=False):
    return _arith("add", [a, b], fmt, fl)


def sub(a, b, fmt, fl=False):
    return _arith("sub", [a, b], fmt, fl)


def mul(a, b, fmt, fl=False):
    return _arith("mul", [a, b], fmt, fl)


def fma(a, b, c, fmt, fl=False):
    return _arith("fma", [a, b, c], fmt, fl)


def _lt(a, b, fmt):
    """Float a < b on non-NaN bits."""
    va, vb = value(a, fmt), value(b, fmt)
    return va < vb


def minmax(a, b, fmt, greater, num, fl=False):
    """RDNA4 pseudocode of S_MIN_NUM/S_MAX_NUM/S_MINIMUM/S_MAXIMUM (_F32/_F16)."""
    a, b = flush(a, fmt, fl), flush(b, fmt, fl)
    an, bn = is_nan(a, fmt), is_nan(b, fmt)
    if num:
        if an and bn:
            return quiet(a, fmt)
        if an:
            return b
        if bn:
            return a
    else:
        if is_snan(a, fmt):
            return quiet(a, fmt)
        if is_snan(b, fmt):
            return quiet(b, fmt)
        if an:
            return a
        if bn:
            return b
    s = fields(fmt)[0]
    zero = lambda x: (x & ~s) == 0          # noqa: E731
    if greater:
        pick_a = _lt(b, a, fmt) or (zero(a) and zero(b) and not (a & s) and (b & s))
    else:
        pick_a = _lt(a, b, fmt) or (zero(a) and zero(b) and (a & s) and not (b & s))
    return a if pick_a else b


def round_int(a, fmt, mode, fl=False):
    """ceil / floor / trunc / rndne."""
    a = flush(a, fmt, fl)
    v = value(a, fmt)
    if isinstance(v, float):
        return quiet(a, fmt) if math.isnan(v) else a
    if mode == "ceil":
        r = math.ceil(v)
    elif mode == "floor":
        r = math.floor(v)
    elif mode == "trunc":
        r = math.trunc(v)
    else:
        r = round(v)                                        # Python rounds Fractions half to even
    neg = bool(a & fields(fmt)[0])
    return encode(r, fmt, neg_zero=neg)


def cmp(cond, a, b, fmt):
    un = is_nan(a, fmt) or is_nan(b, fmt)
    if un:
        lt = eq = gt = False
    else:
        va, vb = value(a, fmt), value(b, fmt)
        va, vb = (float(v) if isinstance(v, float) else v for v in (va, vb))
        lt, eq, gt = va < vb, va == vb, va > vb
    base = {"lt": lt, "eq": eq, "le": lt or eq, "gt": gt, "lg": lt or gt, "ge": gt or eq, "o": not un, "u": un}
    if cond in base:
        return int(base[cond])
    return int(not base[{"nge": "ge", "nlg": "lg", "ngt": "gt", "nle": "le", "neq": "eq", "nlt": "lt"}[cond]])


# ---------------------------------------------------------------------------------------------- conversions
def cvt_f_i(x, signed):
    v = x - (1 << 32) if signed and x >> 31 else x
    return encode(v, F32)


def cvt_i_f(x, signed):
    """Truncate, saturate, NaN -> 0 (RDNA4 pseudocode)."""
    v = value(x, F32)
    if isinstance(v, float) and math.isnan(v):
        return 0
    lo, hi = (-(1 << 31), (1 << 31) - 1) if signed else (0, (1 << 32) - 1)
    if isinstance(v, float):
        r = hi if v > 0 else lo
    else:
        r = min(max(math.trunc(v), lo), hi)
    return r & 0xFFFFFFFF


def cvt_f16_f32(x):
    """RNE; NaN -> quiet NaN keeping the sign and the top 9 payload bits (IEEE conversion of a NaN is quiet)."""
    if is_nan(x, F32):
        return ((x >> 16) & 0x8000) | 0x7E00 | ((x >> 13) & 0x1FF)
    v = value(x, F32)
    return encode(v, F16, neg_zero=bool(x >> 31))


def cvt_f32_f16(h):
    if is_nan(h, F16):
        return ((h & 0x8000) << 16) | 0x7FC00000 | ((h & 0x1FF) << 13)
    v = value(h, F16)
    return encode(v, F32, neg_zero=bool(h & 0x8000))


def pk_rtz(x):
    """f32 -> f16 rounding toward zero (overflow -> max finite, inf stays inf)."""
    if is_nan(x, F32):
        return ((x >> 16) & 0x8000) | 0x7E00 | ((x >> 13) & 0x1FF)
    v = value(x, F32)
    neg = bool(x >> 31)
    if isinstance(v, float):
        return 0xFC00 if neg else 0x7C00
    a = abs(v)
    r = encode(a, F16)
    rv = value(r, F16)
    if isinstance(rv, float) or rv > a:                    # rounded up (or overflowed): step back toward zero
        r -= 1
    return r | (0x8000 if neg else 0)


# ---------------------------------------------------------------------------------------------- transcendentals
mpmath.mp.prec = 160


def trans(kind, x, fmt, flush_always):
    """Correctly rounded exp2/log2/rcp/rsq/sqrt of bits x. flush_always: the f32 TRANS convention (denormal inputs
    read as zero, denormal results flushed)."""
    s = fields(fmt)[0]
    if flush_always:
        x = flush(x, fmt)
    neg = bool(x & s)
    if is_nan(x, fmt):
        return "qnan"
    v = value(x, fmt)
    inf = isinstance(v, float)
    if kind == "exp":
        if inf:
            return 0 if v < 0 else fields(fmt)[1]
        r = mpmath.power(2, mpmath.mpf(v.numerator) / v.denominator)
    elif kind == "log":
        if v == 0:
            return fields(fmt)[1] | s
        if neg:
            return "qnan"
        if inf:
            return fields(fmt)[1]
        r = mpmath.log(mpmath.mpf(v.numerator) / v.denominator, 2)
    elif kind == "rcp":
        if v == 0:
            return fields(fmt)[1] | (s if neg else 0)
        if inf:
            return s if neg else 0
        return _fl(encode(1 / v, fmt), fmt, flush_always)
    elif kind == "sqrt":
        if v == 0:
            return x
        if neg:
            return "qnan"
        if inf:
            return x
        r = mpmath.sqrt(mpmath.mpf(v.numerator) / v.denominator)
    else:  # rsq
        if v == 0:
            return fields(fmt)[1] | (s if neg else 0)
        if neg:
            return "qnan"
        if inf:
            return 0
        r = 1 / mpmath.sqrt(mpmath.mpf(v.numerator) / v.denominator)
    sgn, man, exp, bc = mpmath.mpf(r)._mpf_                # (sign, |mantissa|, exponent, bitcount)
    top = int(exp) + int(bc)                                # |r| < 2^top
    if top > fmt["bias"] + 2:                               # far past the largest finite value
        return fields(fmt)[1] | (s if sgn else 0)
    if top < -(fmt["bias"] + fmt["mbits"] + 2):             # far below half the smallest subnormal
        return s if sgn else 0
    fr = Fraction(int(man)) * Fraction(2) ** int(exp) * (-1 if sgn else 1)
    return _fl(encode(fr, fmt), fmt, flush_always)


def _fl(bits, fmt, on):
    return flush(bits, fmt, on)
