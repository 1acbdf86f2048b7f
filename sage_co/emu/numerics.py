"""Exact gfx1201 arithmetic on numpy arrays.

Registers are uint32 arrays, so values arrive and leave as bit patterns; `as_f32` / `as_u32` are free views.
Every function is elementwise and vectorized over arrays of any shape (scalars work too, as 0-d arrays).
Float functions take float32 arrays and return float32 arrays; the executor applies `flush_in` / `flush_out`
around VALU ops according to the kernel's MODE (COMPUTE_PGM_RSRC1.FLOAT_DENORM_MODE_32).

What is exact and what is a choice:
  * fma_f32, add/mul, conversions, fp8/bf16/f16 encodes, min/max/med3: bit-exact IEEE-754 round-to-nearest-even
    (the VALU rounding mode the kernels run with).
  * exp2/log2/rcp/rsq/sqrt (TRANS unit): evaluated in float64 and rounded once to f32 (correctly rounded for
    rcp/sqrt; exp2/log2/rsq correctly rounded except when the f64 result lies within an f64 ulp of an f32 tie).
    Hardware is an approximation and may differ by 1 ulp; compare those with a 1-ulp bound.
"""
from __future__ import annotations

import numpy as np

F32_SIGN = np.uint32(0x80000000)
F32_ABS = np.uint32(0x7FFFFFFF)
F32_EXP = np.uint32(0x7F800000)
F32_QUIET = np.uint32(0x00400000)
F32_MANT = np.uint32(0x007FFFFF)
F32_MIN_NORMAL = np.float32(2.0 ** -126)


# ---------------------------------------------------------------------------------------------------------------
# bit views

def as_f32(x) -> np.ndarray:
    """uint32 bit patterns -> float32 view (no copy)."""
    return np.asarray(x, dtype=np.uint32).view(np.float32)


def as_u32(x) -> np.ndarray:
    """float32 values -> uint32 bit pattern view (no copy)."""
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def quiet_nan(x: np.ndarray) -> np.ndarray:
    """Set the quiet bit of every NaN (cvtToQuietNAN); other values unchanged. float32 in, float32 out."""
    bits = as_u32(x)
    isnan = (bits & F32_ABS) > F32_EXP
    return as_f32(np.where(isnan, bits | F32_QUIET, bits))


# ---------------------------------------------------------------------------------------------------------------
# denormals
# COMPUTE_PGM_RSRC1.FLOAT_DENORM_MODE_32 / MODE.FP_DENORM[5:4] values (LLVM SIDefines.h FP_DENORM_*; AMD MODE
# register): 0 = flush input and output denormals, 1 = flush output only (allow input), 2 = flush input only
# (allow output), 3 = keep both. llvm-mc with no directive gives 32-bit = 0, 16/64-bit = 3 for gfx1201
# (docs/rdna4.md §Entry).
DENORM_FLUSH_IN_OUT, DENORM_FLUSH_OUT, DENORM_FLUSH_IN, DENORM_KEEP = 0, 1, 2, 3


def flush_f32(x):
    """Denormal -> zero of the same sign. Accepts float32 values or uint32 bit patterns, returns the same dtype."""
    arr = np.asarray(x)
    bits = arr if arr.dtype == np.uint32 else as_u32(arr)
    # denormal <=> magnitude bits in [1, 0x7FFFFF]; minus one (zero wraps to 0xFFFFFFFF) makes that one compare,
    # and the common case (no denormal) returns the input untouched
    mag = bits & F32_ABS
    if mag.ndim:
        mag -= np.uint32(1)
        den = mag < F32_MANT
    else:                               # a numpy scalar warns on the wrap an array does silently
        den = np.bool_(0 < mag <= F32_MANT)
    if not den.any():
        return arr
    out = np.where(den, bits & F32_SIGN, bits)
    return out if arr.dtype == np.uint32 else as_f32(out)


def flush_in(x, mode: int):
    """Flush denormal *inputs* when the 32-bit denorm mode says so (modes 0 and 2)."""
    return flush_f32(x) if mode in (DENORM_FLUSH_IN_OUT, DENORM_FLUSH_IN) else np.asarray(x)


def flush_out(x, mode: int):
    """Flush denormal *results* when the 32-bit denorm mode says so (modes 0 and 1). The result is rounded first
    and flushed afterwards (a value that rounds up to 2^-126 stays normal); hardware's exact point of flushing
    is not documented."""
    return flush_f32(x) if mode in (DENORM_FLUSH_IN_OUT, DENORM_FLUSH_OUT) else np.asarray(x)


def _f32(x) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype != np.float32:
        raise TypeError(f"expected a float32 array, got dtype {arr.dtype} (use as_f32 on uint32 registers)")
    return arr


# ---------------------------------------------------------------------------------------------------------------
# basic VALU f32 ops (numpy's f32 add/mul/sub round like IEEE RNE; only the denormal mode needs adding)

def mul_f32(a, b, mode: int = DENORM_KEEP) -> np.ndarray:
    with np.errstate(all="ignore"):
        return flush_out(flush_in(_f32(a), mode) * flush_in(_f32(b), mode), mode)


def round_odd_f64(s: np.ndarray, err: np.ndarray) -> np.ndarray:
    """Given s = RN64(s + err) and its exact error err, return s + err rounded to odd at 53 bits: if err != 0 and
    s's last mantissa bit is 0, step s one f64 ulp toward err (the true value lies strictly between s and that
    neighbour, and the neighbour is odd). inf/NaN s (err NaN) pass through."""
    sbits = s.view(np.int64)
    fix = np.isfinite(err) & (err != 0) & ((sbits & 1) == 0)
    # stepping the magnitude bits: +1 moves away from zero, -1 toward it; toward err means away iff same sign
    step = np.where(np.signbit(err) == np.signbit(s), 1, -1).astype(np.int64)
    return np.where(fix, sbits + step, sbits).view(np.float64)


def round_odd_f64_to_f32(s: np.ndarray, err: np.ndarray) -> np.ndarray:
    """Round s + err (s = RN64(s + err), err exact) to float32 with one correct RNE rounding.

    A round-to-odd value with 53 >= 24 + 2 bits rounds to 24 bits exactly like the true value does, so the RNE
    cast of round_odd_f64(s, err) is correct. This holds for f32 subnormal results too (they keep even fewer
    bits) and for overflow (the cast gives inf from max + half ulp upward; the odd value is never on that tie
    unless the true value is).
    """
    with np.errstate(all="ignore"):
        return round_odd_f64(s, err).astype(np.float32)


def round_odd_f64_to_f32_odd(x: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounded to odd (exact values unchanged): a later RNE to a format with <= 22 significant
    bits (f16: 11, bf16: 8) then equals the RNE of x itself. Out-of-f32-range values become inf."""
    with np.errstate(all="ignore"):
        r = x.astype(np.float32)
        rb = r.view(np.uint32)
        fix = np.isfinite(x) & np.isfinite(r) & (r.astype(np.float64) != x) & ((rb & 1) == 0)
        away = (np.abs(r.astype(np.float64)) < np.abs(x))
        stepped = np.where(away, rb + np.uint32(1), rb - np.uint32(1))
        return np.where(fix, stepped, rb).view(np.float32)


def sum_f64_to_f32(p: np.ndarray, c: np.ndarray) -> np.ndarray:
    """RNE float32 of the exact sum p + c of two float64 arrays (used by fma and WMMA: p, c exact values on grids
    far above f64's underflow, so TwoSum's error is exact)."""
    with np.errstate(all="ignore"):
        p, c = np.asarray(p, np.float64), np.asarray(c, np.float64)
        return f64_sum_to_f32(np.atleast_1d(p + c), p, c).reshape(np.broadcast_shapes(p.shape, c.shape))


def f64_sum_to_f32(s: np.ndarray, p: np.ndarray, c: np.ndarray, midpoints_likely: bool = False) -> np.ndarray:
    """s = fl64(p + c) (p, c broadcastable to s; c may be float32) -> RNE float32 of the exact p + c, in s's shape.

    Fast path: s cast to f32 is already correct unless s sits exactly on an f32 rounding boundary (the midpoint of
    two f32 values: low 29 bits of s == 0x10000000) or in the f32 subnormal range (coarser midpoints). Elsewhere the
    exact sum lies strictly on s's side of every midpoint (it rounds to s, and a midpoint other than s is a whole
    f64 ulp away), so both round alike. Suspects take the TwoSum + round-to-odd path. The candidates are found with
    cheap passes (midpoint bits; f32 result at or below the smallest normal, which every nonzero s below 2^-126
    gives) and narrowed to the exact suspect set on the few candidates; when they are many (over 1/8), TwoSum runs
    over the whole array instead and only the inexact sums among them take the round-to-odd path.
    midpoints_likely (a caller whose sums have few significant bits, e.g. bf16 WMMA dots): TwoSum first, and when
    every sum is exact the cast alone is the answer (no candidate passes).
    """
    with np.errstate(all="ignore"):
        out = s.astype(np.float32)
        if midpoints_likely:
            bv = s - p
            err = (p - (s - bv)) + (c - bv)
            inexact = err != 0
            if not inexact.any():
                return out
        cand = (s.view(np.int64) & 0x1FFFFFFF) == 0x10000000
        cand |= (out.view(np.uint32) & F32_ABS) <= np.uint32(0x00800000)
        ncand = np.count_nonzero(cand)
        if not ncand:
            return out
        if midpoints_likely or ncand * 8 > s.size:
            # many candidates (sums of few significant bits, e.g. bf16 WMMA dots, sit on f32 midpoints often):
            # TwoSum over the whole array; where it is zero s is the exact sum and the cast rounds it correctly
            if not midpoints_likely:
                bv = s - p
                err = (p - (s - bv)) + (c - bv)
                inexact = err != 0
            cand &= inexact
            if cand.any():
                idx = np.flatnonzero(cand)
                where = np.unravel_index(idx, s.shape)
                out[where] = round_odd_f64_to_f32(s[where], np.broadcast_to(err, s.shape)[where])
            return out
        idx = np.flatnonzero(cand)
        if idx.size:
            where = np.unravel_index(idx, s.shape)
            ss = s[where]
            suspect = ((ss.view(np.int64) & 0x1FFFFFFF) == 0x10000000) | ((np.abs(ss) < 2.0 ** -126) & (ss != 0))
            if suspect.any():
                where = tuple(w[suspect] for w in where)
                ss = ss[suspect]
                ps = np.broadcast_to(p, s.shape)[where]
                cs = np.broadcast_to(c, s.shape)[where].astype(np.float64)
                bv = ss - ps                                  # TwoSum (Knuth): exact error of ss = fl(ps + cs)
                err = (ps - (ss - bv)) + (cs - bv)
                out[where] = round_odd_f64_to_f32(ss, err)
        return out


def fma_f32(a, b, c, mode: int = DENORM_KEEP) -> np.ndarray:
    """Fused multiply-add a*b + c on float32 arrays, one RNE rounding (IEEE fmaf), as v_fma_f32 / v_fmac_f32.

    a*b is exact in float64 (24+24 = 48 significant bits; the exponent range of f32 products, 2^-298..2^256,
    is inside f64's normal range). s = p + c rounds in f64; TwoSum recovers its exact error (the exact sum is a
    multiple of 2^-298, so no f64 underflow), and round-to-odd turns (s, err) into the correctly rounded f32
    (sum_f64_to_f32, which skips that work where s is provably safe). Infinities/NaN come from the f64
    expression itself (inf*0 = nan, inf - inf = nan), and zero signs follow IEEE because p + c is computed with IEEE f64 addition (+0 unless both are -0).
    """
    with np.errstate(all="ignore"):        # signalling NaN inputs warn on the f64 cast; inf*0 etc. are intended
        a = flush_in(_f32(a), mode).astype(np.float64)
        b = flush_in(_f32(b), mode).astype(np.float64)
        c = flush_in(_f32(c), mode).astype(np.float64)
        p = a * b
    return flush_out(sum_f64_to_f32(p, c), mode)


# ---------------------------------------------------------------------------------------------------------------
# 16-bit float conversions

def f32_to_bf16(x) -> np.ndarray:
    """float32 -> bf16 bit patterns (uint16), round-to-nearest-even; NaN -> quiet NaN keeping sign and the top
    payload bits (bits >> 16 | 0x40); overflow rounds to inf as RNE dictates. Same as torch's .to(bfloat16)."""
    bits = as_u32(_f32(x))
    isnan = (bits & F32_ABS) > F32_EXP
    rounded = (bits.astype(np.uint64) + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return np.where(isnan, (bits >> 16) | 0x40, rounded).astype(np.uint16)


def bf16_to_f32(h) -> np.ndarray:
    """bf16 bit patterns (any unsigned int dtype, low 16 bits used) -> float32 (exact)."""
    return as_f32((np.asarray(h).astype(np.uint32) & 0xFFFF) << 16)


def f32_to_f16(x) -> np.ndarray:
    """float32 -> f16 bit patterns (uint16) as v_cvt_f16_f32: RNE, overflow -> inf, f16 subnormals kept
    (FLOAT_DENORM_MODE_16_64 = 3 is the LLVM default), NaN -> quiet NaN with the sign and top payload bits
    (a NaN becomes sign | 0x7E00 | payload[22:13]: quiet, as IEEE conversions are; numpy's cast would keep a
    signalling NaN signalling; hardware's NaN payload is undocumented)."""
    with np.errstate(all="ignore"):
        h = _f32(x).astype(np.float16).view(np.uint16)
    bits = as_u32(x)
    nan = ((bits >> 16) & 0x8000 | 0x7E00 | (bits >> 13) & 0x1FF).astype(np.uint16)
    return np.where((bits & F32_ABS) > F32_EXP, nan, h)


def f16_to_f32(h) -> np.ndarray:
    """f16 bit patterns (low 16 bits) -> float32 (exact)."""
    return (np.asarray(h).astype(np.uint16)).view(np.float16).astype(np.float32)


# ---------------------------------------------------------------------------------------------------------------
# FP8 (OCP).  docs/rdna4.md §FP8: gfx12 uses OCP FP8 (not FNUZ): e4m3 "fp8" bias 7, max ±448 (0x7E), NaN
# S.1111.111, no inf; e5m2 "bf8" bias 15, max ±57344, inf 0x7C, NaN 0x7D-0x7F.

def _fp8_lut(ebits: int, mbits: int, bias: int, has_inf: bool) -> np.ndarray:
    code = np.arange(256, dtype=np.int64)
    sign = np.where(code & 0x80, -1.0, 1.0)
    e = (code >> mbits) & ((1 << ebits) - 1)
    m = code & ((1 << mbits) - 1)
    mag = np.where(e == 0, m * 2.0 ** (1 - bias - mbits), (1 + m / 2.0 ** mbits) * 2.0 ** (e - bias))
    top = e == (1 << ebits) - 1
    if has_inf:   # IEEE-like: all-ones exponent is inf (m == 0) or NaN
        mag = np.where(top & (m == 0), np.inf, np.where(top, np.nan, mag))
    else:         # e4m3fn: only S.1111.111 is NaN, the rest of the top binade is finite
        mag = np.where(top & (m == (1 << mbits) - 1), np.nan, mag)
    return (sign * mag).astype(np.float32)


FP8_E4M3_LUT = _fp8_lut(4, 3, 7, has_inf=False)
BF8_E5M2_LUT = _fp8_lut(5, 2, 15, has_inf=True)
FP8_E4M3_MAX, BF8_E5M2_MAX = 448.0, 57344.0


def fp8_e4m3_to_f32(code) -> np.ndarray:
    """OCP e4m3 bytes -> float32 (exact), as v_cvt_f32_fp8 and the fp8 WMMA operand decode."""
    return FP8_E4M3_LUT[np.asarray(code).astype(np.uint8)]


def bf8_e5m2_to_f32(code) -> np.ndarray:
    """OCP e5m2 bytes -> float32 (exact), as v_cvt_f32_bf8."""
    return BF8_E5M2_LUT[np.asarray(code).astype(np.uint8)]


def _f32_to_f8(x, mbits: int, bias: int, lut: np.ndarray, max_code: int, overflow_code: int) -> np.ndarray:
    """RNE of float32 to an OCP fp8 format, on the f32 bits (lut: the format's decode table, for the docs' sake
    the codes 0..max_code are its finite magnitudes in increasing order).

    fp8 normal range (|x| >= 2^(1 - bias)): the f32 bits are rounded to mbits mantissa bits in integer arithmetic
    (add half an ulp minus one, plus the kept lsb: ties to even; a carry moves into the exponent as it should), and
    the exponent is rebiased; codes beyond max_code (including +-inf) overflow. Below it: the fp8 grid is the
    multiples of the quantum 2^(1 - bias - mbits), and |x| / quantum (an exact f32 power-of-two scaling) rounded
    with rint (RNE) is the code, 2^mbits being the smallest normal. NaN -> 0x7F; the sign bit is kept throughout.
    """
    bits = as_u32(_f32(x))
    mag = bits & F32_ABS
    shift = 23 - mbits
    normal = ((mag + np.uint32((1 << (shift - 1)) - 1) + ((mag >> np.uint32(shift)) & np.uint32(1)))
              >> np.uint32(shift)).astype(np.int64) - ((127 - bias) << mbits)
    with np.errstate(all="ignore"):                          # inf/NaN lanes cast garbage here; not selected
        sub = np.rint(as_f32(mag) * np.float32(2.0 ** (bias - 1 + mbits))).astype(np.int64)
    code = np.where(mag < np.uint32((128 - bias) << 23), sub, normal)
    code = np.where(code > max_code, overflow_code, code)
    code = np.where(mag > F32_EXP, 0x7F, code)
    return (code | ((bits >> np.uint32(24)) & np.uint32(0x80))).astype(np.uint8)


def f32_to_fp8_e4m3(x) -> np.ndarray:
    """float32 -> OCP e4m3 byte as one half of v_cvt_pk_fp8_f32 (RNE forced by the pseudocode, no clamp on gfx1201).

    Chosen (docs/rdna4.md §FP8: the saturation behaviour is UNVERIFIED on hardware; this matches torch's
    float8_e4m3fn cast and tinygrad's emulator):
      * RNE on the e4m3 grid including subnormals (2^-9 -> 0x01, 2^-10 -> 0x00 by ties-to-even, 0.001 -> 0x01);
      * a result that rounds beyond 448 (input >= 464 exclusive, i.e. > 464; 464 itself ties to 448) and +-inf
        -> NaN 0x7F with the sign (non-saturating);
      * NaN -> 0x7F with the input's sign; -0.0 -> 0x80.
    """
    return _f32_to_f8(x, 3, 7, FP8_E4M3_LUT, 0x7E, 0x7F)


def f32_to_bf8_e5m2(x) -> np.ndarray:
    """float32 -> OCP e5m2 byte as v_cvt_pk_bf8_f32: RNE incl. subnormals; rounding beyond 57344 (input >= 61440,
    the tie rounds to even = overflow) and +-inf -> inf 0x7C with sign; NaN -> 0x7F with sign."""
    return _f32_to_f8(x, 2, 15, BF8_E5M2_LUT, 0x7B, 0x7C)


def cvt_pk_f8_f32(vdst, s0, s1, hi: bool, bf8: bool = False) -> np.ndarray:
    """v_cvt_pk_fp8_f32 / v_cvt_pk_bf8_f32: {f8(s1), f8(s0)} into vdst[15:0] (or [31:16] with op_sel dst), the
    other half of vdst preserved (docs/rdna4.md §FP8). vdst uint32, s0/s1 float32; returns uint32."""
    enc = f32_to_bf8_e5m2 if bf8 else f32_to_fp8_e4m3
    pair = enc(s0).astype(np.uint32) | (enc(s1).astype(np.uint32) << 8)
    vdst = np.asarray(vdst, dtype=np.uint32)
    if hi:
        return (vdst & np.uint32(0x0000FFFF)) | (pair << 16)
    return (vdst & np.uint32(0xFFFF0000)) | pair


# ---------------------------------------------------------------------------------------------------------------
# integer <-> float

def cvt_i32_f32(x) -> np.ndarray:
    """v_cvt_i32_f32: truncate toward zero, saturate to [-2^31, 2^31-1], NaN -> 0. Returns int32."""
    xd = _f32(x).astype(np.float64)
    with np.errstate(invalid="ignore"):
        t = np.trunc(np.clip(np.nan_to_num(xd, nan=0.0), -2.0 ** 31, 2.0 ** 31 - 1))
    return t.astype(np.int32)


def cvt_u32_f32(x) -> np.ndarray:
    """v_cvt_u32_f32: truncate toward zero, saturate to [0, 2^32-1], NaN -> 0. Returns uint32."""
    xd = _f32(x).astype(np.float64)
    t = np.trunc(np.clip(np.nan_to_num(xd, nan=0.0), 0.0, 2.0 ** 32 - 1))
    return t.astype(np.uint32)


def cvt_f32_i32(x) -> np.ndarray:
    """v_cvt_f32_i32: int32 -> float32, RNE (via exact f64, one rounding)."""
    return np.asarray(x).astype(np.int32).astype(np.float64).astype(np.float32)


def cvt_f32_u32(x) -> np.ndarray:
    """v_cvt_f32_u32: uint32 -> float32, RNE (via exact f64, one rounding)."""
    return np.asarray(x).astype(np.uint32).astype(np.float64).astype(np.float32)


def rndne_f32(x) -> np.ndarray:
    """v_rndne_f32: round to the nearest integer, ties to even, as float32 (-0.4 -> -0.0)."""
    return np.rint(_f32(x))


def trunc_f32(x) -> np.ndarray:
    return np.trunc(_f32(x))


def floor_f32(x) -> np.ndarray:
    return np.floor(_f32(x))


def ceil_f32(x) -> np.ndarray:
    return np.ceil(_f32(x))


def cvt_nearest_i32_f32(x) -> np.ndarray:
    """v_cvt_nearest_i32_f32: f32_to_i32(floor(S0 + 0.5F)) with the +0.5 done in f32 as the pseudocode types it
    (so 0.49999997 + 0.5 rounds to 1.0 and gives 1; ties go up, not to even)."""
    with np.errstate(all="ignore"):
        return cvt_i32_f32(np.floor(_f32(x) + np.float32(0.5)))


# ---------------------------------------------------------------------------------------------------------------
# TRANS unit: exp2, log2, rcp, rsq, sqrt
# Denormals: these ignore MODE and flush denormal inputs and outputs (sign kept). Chosen because LLVM's gfx12
# lowering treats v_exp_f32/v_log_f32/v_rcp_f32/v_rsq_f32/v_sqrt_f32 as not handling denormals (it pre-scales
# inputs/outputs around them when denormals must be honoured); not verified on hardware.
# Accuracy: float64 evaluation, one rounding to f32 -> correctly rounded for rcp and sqrt (53 >= 2*24+2),
# correctly rounded except for rare near-tie cases for exp2/log2/rsq. Hardware may differ by 1 ulp
# (docs/rdna4.md §Throughput: quarter-rate approximations).

def _trans(fn, x) -> np.ndarray:
    xd = flush_f32(_f32(x)).astype(np.float64)
    with np.errstate(all="ignore"):
        return flush_f32(fn(xd).astype(np.float32))


# Hardware-like mode (`sage-co selftest --rehearse`, sage_co/selftest.py): the TRANS results of v_exp_f32,
# v_log_f32, v_rcp_f32, v_sqrt_f32 and v_rsq_f32 moved by one ulp (+1, -1 or 0, a deterministic function of the
# input's bits), within the ~1 ulp hardware allows (docs/numerics.md §Hardware tolerance). Off unless a process
# turns it on (sage_co.emu.hardware_like); nothing else reads it.
HARDWARE_LIKE = {"trans_ulp": False, "f16_wmma_two_roundings": False}


def _ulp_perturbed(x, r: np.ndarray) -> np.ndarray:
    """r with finite nonzero normal results moved by d ulp, d in (0, +1, -1, 0) by a hash of x's bits."""
    xb = np.asarray(_f32(x)).view(np.uint32).astype(np.uint64)
    d = ((xb * np.uint64(0x9E3779B1)) >> np.uint64(7)) & np.uint64(3)
    step = np.where(d == 1, 1, np.where(d == 2, -1, 0)).astype(np.int64)
    rb = r.view(np.uint32).astype(np.int64)
    exp = (rb >> 23) & 0xFF
    ok = (exp > 1) & (exp < 0xFE)                  # stays normal and finite after the move
    return np.where(ok, rb + step, rb).astype(np.uint32).view(np.float32)


def _trans_hw(fn, x) -> np.ndarray:
    r = _trans(fn, x)
    return _ulp_perturbed(x, r) if HARDWARE_LIKE["trans_ulp"] else r


def exp2_f32(x) -> np.ndarray:
    """v_exp_f32: 2^x; exp2(-inf) = +0, exp2(+inf) = +inf, NaN -> NaN, results < 2^-126 flush to +0."""
    return _trans_hw(np.exp2, x)


def log2_f32(x) -> np.ndarray:
    """v_log_f32: log2(x); log2(+-0) = -inf (denormals count as zero), log2(x<0) = NaN, log2(inf) = inf."""
    return _trans_hw(np.log2, x)


def rcp_f32(x) -> np.ndarray:
    """v_rcp_f32: 1/x; rcp(+-0) = +-inf, rcp(+-inf) = +-0, |x| > 2^126 gives a flushed +-0."""
    return _trans_hw(lambda v: 1.0 / v, x)


def sqrt_f32(x) -> np.ndarray:
    """v_sqrt_f32: sqrt(x); sqrt(-0) = -0, sqrt(x<0) = NaN, sqrt(inf) = inf."""
    return _trans_hw(np.sqrt, x)


def rsq_f32(x) -> np.ndarray:
    """v_rsq_f32: 1/sqrt(x); rsq(+0) = +inf, rsq(-0) = -inf, rsq(x<0) = NaN, rsq(inf) = +0."""
    return _trans_hw(lambda v: 1.0 / np.sqrt(v), x)


# ---------------------------------------------------------------------------------------------------------------
# min / max (IEEE 754-2019 minimumNumber / maximumNumber, as the RDNA4 pseudocode spells out for *_NUM_F32:
# NaN loses to a number, two NaNs give the first one quieted, and -0 < +0)

def order_key(x: np.ndarray) -> np.ndarray:
    """Monotone int64 key of float32 values: -0 sorts just below +0; NaN is handled by the callers."""
    bits = as_u32(x).astype(np.int64)
    return np.where(bits & 0x80000000, -(bits & 0x7FFFFFFF) - 1, bits)


def _minmax_num_f32(a, b, greater: bool) -> np.ndarray:
    """The larger (greater) or smaller number of a and b: the float compare decides unless a == b, where only
    +-0 can differ in bits (maximumNumber takes +0: the AND of the bits, minimumNumber -0: the OR); NaN lanes are
    patched after (a NaN loses to a number; two NaNs give a, quieted)."""
    a, b = _f32(a), _f32(b)
    ab, bb = as_u32(a), as_u32(b)
    an, bn = np.isnan(a), np.isnan(b)
    if not (an.any() or bn.any()):
        # no NaN: fmax/fmin decide; equal operands have equal bits except +0/-0, where the tie rule picks
        r = as_u32(np.fmax(a, b) if greater else np.fmin(a, b))
        tie = a == b
        if tie.any():
            r = np.where(tie, (ab & bb) if greater else (ab | bb), r)
        return as_f32(r)
    with np.errstate(invalid="ignore"):
        tie = (ab & bb) if greater else (ab | bb)
        r = np.where(a > b if greater else a < b, ab, np.where(a == b, tie, bb))
    r = np.where(an, bb, np.where(bn, ab, r))
    r = np.where(an & bn, ab | F32_QUIET, r)
    return as_f32(r)


def max_num_f32(a, b) -> np.ndarray:
    """v_max_num_f32 (also the canonicalize idiom max(x, x), which quiets a signalling NaN)."""
    return _minmax_num_f32(a, b, True)


def min_num_f32(a, b) -> np.ndarray:
    """v_min_num_f32."""
    return _minmax_num_f32(a, b, False)


def max3_num_f32(a, b, c) -> np.ndarray:
    return max_num_f32(max_num_f32(a, b), c)


def min3_num_f32(a, b, c) -> np.ndarray:
    return min_num_f32(min_num_f32(a, b), c)


def med3_num_f32(a, b, c) -> np.ndarray:
    """v_med3_num_f32: any NaN -> min3_num (pseudocode); otherwise the median: if S0 is the max3, max(S1, S2),
    elif S1 is, max(S0, S2), else max(S0, S1)."""
    a, b, c = _f32(a), _f32(b), _f32(c)
    anynan = np.isnan(a) | np.isnan(b) | np.isnan(c)
    m = order_key(max3_num_f32(a, b, c))
    med = np.where(m == order_key(a), max_num_f32(b, c),
                   np.where(m == order_key(b), max_num_f32(a, c), max_num_f32(a, b)))
    return np.where(anynan, min3_num_f32(a, b, c), med)


# ---------------------------------------------------------------------------------------------------------------
# ldexp / frexp / fract

def ldexp_f32(x, e) -> np.ndarray:
    """v_ldexp_f32: x * 2^e with one RNE rounding (f32 subnormal results rounded correctly), inf/NaN/zero kept.
    e is an int32; clipping it to +-400 changes nothing (|x| is within 2^-149..2^128, so x*2^+-400 is already
    far past the f32 range) and keeps x*2^e exact in f64, so the cast to f32 is the only rounding."""
    xd = _f32(x).astype(np.float64)
    e = np.clip(np.asarray(e).astype(np.int64), -400, 400)
    with np.errstate(all="ignore"):
        return np.ldexp(xd, e).astype(np.float32)


def frexp_mant_f32(x) -> np.ndarray:
    """v_frexp_mant_f32: mantissa in [0.5, 1) with the input's sign; inf/NaN -> input (pseudocode), 0 -> 0."""
    x = _f32(x)
    m, _ = np.frexp(x)
    return np.where(np.isfinite(x), m, x).astype(np.float32)


def frexp_exp_i32_f32(x) -> np.ndarray:
    """v_frexp_exp_i32_f32: exponent e with x = m * 2^e, m in [0.5, 1); inf/NaN/0 -> 0."""
    x = _f32(x)
    _, e = np.frexp(np.where(np.isfinite(x), x, 0.0).astype(np.float32))
    return e.astype(np.int32)


def fract_f32(x) -> np.ndarray:
    """v_fract_f32: x - floor(x), capped at the largest f32 below 1.0 (so -1e-10 gives 0x3f7fffff, not 1.0);
    inf and NaN give NaN."""
    x = _f32(x)
    with np.errstate(all="ignore"):
        f = x - np.floor(x)                     # exact in f32 except when it rounds up to 1.0 (then capped)
        return np.minimum(f, np.float32(np.nextafter(np.float32(1), np.float32(0))))


# ---------------------------------------------------------------------------------------------------------------
# min / max on register bits, f32 or f16 (the scalar-float group and v_minimum/v_maximum*; docs/rdna4.md §Scalar float)

def minmax_bits(a, b, *, greater: bool, num: bool, half: bool) -> np.ndarray:
    """*_MIN/MAX_NUM and *_MINIMUM/MAXIMUM on uint32 register bits (f32, or f16 in the low half; f16 results have
    bits [31:16] zero), as the RDNA4 pseudocode: the float compare decides, -0 < +0 on a tie of zeros.
      num (minimumNumber/maximumNumber): a NaN loses to a number; two NaNs give S0 quieted.
      not num (minimum/maximum): a signalling NaN wins (S0 first) quieted, then a quiet NaN (S0 first)."""
    a, b = np.asarray(a, dtype=np.uint32), np.asarray(b, dtype=np.uint32)
    if half:
        low = np.uint32(0xFFFF)
        a, b = a & low, b & low
        av, bv = a.astype(np.uint16).view(np.float16), b.astype(np.uint16).view(np.float16)
        exp, quiet, absm = np.uint32(0x7C00), np.uint32(0x0200), np.uint32(0x7FFF)
    else:
        av, bv, exp, quiet, absm = as_f32(a), as_f32(b), F32_EXP, F32_QUIET, F32_ABS
    with np.errstate(invalid="ignore"):
        tie = (a & b) if greater else (a | b)            # +-0 tie: max takes +0 (AND of bits), min -0 (OR)
        r = np.where(av > bv if greater else av < bv, a, np.where(av == bv, tie, b))
    an, bn = (a & absm) > exp, (b & absm) > exp
    if num:
        r = np.where(an, b, np.where(bn, a, r))
        r = np.where(an & bn, a | quiet, r)
    else:
        a_s, b_s = an & ((a & quiet) == 0), bn & ((b & quiet) == 0)
        r = np.where(bn, b, r)
        r = np.where(an, a, r)
        r = np.where(b_s, b | quiet, r)
        r = np.where(a_s, a | quiet, r)
    return np.asarray(r, dtype=np.uint32)


def minimum_f32(a, b) -> np.ndarray:
    """v_minimum_f32 (IEEE-754-2019 minimum: NaN propagates, -0 < +0) on float32 values."""
    return as_f32(minmax_bits(as_u32(_f32(a)), as_u32(_f32(b)), greater=False, num=False, half=False))


def maximum_f32(a, b) -> np.ndarray:
    """v_maximum_f32 (IEEE-754-2019 maximum) on float32 values."""
    return as_f32(minmax_bits(as_u32(_f32(a)), as_u32(_f32(b)), greater=True, num=False, half=False))


# ---------------------------------------------------------------------------------------------------------------
# MODE.FP16_OVFL on f16 results (docs/rdna4.md §FP16_OVFL): an infinite f16 result of finite sources is the largest
# finite f16 with its sign; an infinite source still gives an infinite result (true Inf kept), NaN stays NaN.
F16_MAX = np.float16(65504.0)


def saturate_f16_overflow(result, sources, on) -> np.ndarray:
    """result: f16 values or bit patterns (uint16) [n, 32], returned in the same form; sources: the operands (any
    dtype, broadcastable; integers are finite); on: bool [n], the waves whose MODE.FP16_OVFL is set (or [n, 32] per
    lane)."""
    raw = np.asarray(result)
    r = raw.view(np.float16) if raw.dtype == np.uint16 else raw.astype(np.float16, copy=False)   # bits or values
    inf = np.isinf(r)
    if not inf.any():
        return raw
    on = np.asarray(on)
    hit = inf & (on[:, None] if on.ndim == 1 else on)
    for x in sources:
        x = np.asarray(x)
        if x.dtype.kind == "f":
            hit &= np.isfinite(x)
    out = np.where(hit, np.copysign(F16_MAX, r), r).astype(np.float16)
    return out.view(np.uint16) if raw.dtype == np.uint16 else out
