"""sage_co.emu.numerics against independent references: glibc fmaf, Python fractions, torch casts."""
import ctypes
import ctypes.util
from fractions import Fraction

import numpy as np
import pytest
import torch

from sage_co.emu import numerics as nm

F32 = np.float32


def bits(x):
    return np.asarray(x, dtype=F32).view(np.uint32)


def f32(b):
    return np.asarray(b, dtype=np.uint32).view(F32)


def same_bits(got, want):
    """Bitwise equal, except that any NaN matches any NaN (payloads are not specified by IEEE fma)."""
    got, want = np.asarray(got, F32), np.asarray(want, F32)
    return (bits(got) == bits(want)) | (np.isnan(got) & np.isnan(want))


def random_triples(rng, n):
    """Mixes that stress fma rounding: random bit patterns, near-cancellation, ties, subnormal and huge results."""
    k = n // 6
    raw = rng.integers(0, 2**32, size=(3, k), dtype=np.uint64).astype(np.uint32)
    a, b, c = (f32(r) for r in raw)
    # comparable magnitudes: exponents within a few binades so a*b and c interact
    m = rng.uniform(1, 2, size=(3, k)).astype(F32) * np.ldexp(F32(1), rng.integers(-8, 8, size=(3, k))).astype(F32)
    sgn = rng.choice(np.array([-1, 1], F32), size=(3, k))
    a2, b2, c2 = m * sgn
    # cancellation: c = -(a*b rounded) nudged by a few ulps -> the result is the tiny exact low part
    a3, b3 = (rng.uniform(1, 2, size=(2, k)).astype(F32) * sgn[:2])
    c3 = f32(bits(-(a3 * b3)) + rng.integers(-3, 4, size=k).astype(np.uint32))
    # short mantissas: products of 12-bit values land exactly on f32 ties against c
    a4 = (rng.integers(2048, 4096, size=k) * 2.0 ** -11).astype(F32)
    b4 = (rng.integers(2048, 4096, size=k) * 2.0 ** -11).astype(F32)
    c4 = np.ldexp(rng.integers(1, 2**24, size=k).astype(np.float64), rng.integers(-24, 2, size=k)).astype(F32)
    # tiny: results in the f32 subnormal range
    a5 = (rng.uniform(1, 2, size=k) * 2.0 ** rng.integers(-80, -60, size=k)).astype(F32) * sgn[0]
    b5 = (rng.uniform(1, 2, size=k) * 2.0 ** rng.integers(-80, -60, size=k)).astype(F32)
    c5 = f32(rng.integers(0, 0x01000000, size=k).astype(np.uint32) | (rng.integers(0, 2, size=k).astype(np.uint32) << 31))
    # double-rounding family (the crafted case generalised): a*b = 2^(s-24) (1 - 2^-2t) just below half an ulp
    # of c, t >= 15 so f64 rounds the sum onto the f32 tie and a second rounding goes the wrong way half the time
    t = rng.integers(15, 21, size=k)
    s = rng.integers(-20, 20, size=k)
    a6 = np.ldexp(1 + np.ldexp(1.0, -t), s // 2 - 12).astype(F32) * sgn[0]
    b6 = np.ldexp(1 - np.ldexp(1.0, -t), s - s // 2 - 12).astype(F32)
    c6 = (rng.integers(2**23, 2**24, size=k) * np.ldexp(1.0, s - 23)).astype(F32) * sgn[0]
    cat = lambda *xs: np.concatenate(xs).astype(F32)
    return cat(a, a2, a3, a4, a5, a6), cat(b, b2, b3, b4, b5, b6), cat(c, c2, c3, c4, c5, c6)


@pytest.fixture(scope="module")
def libm_fmaf():
    path = ctypes.util.find_library("m")
    if path is None:
        pytest.skip("libm not found: no fmaf reference")
    fn = ctypes.CDLL(path).fmaf
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float] * 3
    return np.frompyfunc(fn, 3, 1)


def test_fma_double_rounding_case():
    # computing fma as f64 a*b + c and rounding to f32 rounds twice and gives 0x3f800002 here
    a, b, c = F32(2**-12 * (1 + 2**-18)), F32(2**-12 * (1 - 2**-18)), F32(1 + 2**-23)
    assert bits(nm.fma_f32(a, b, c)) == 0x3F800001
    assert bits(F32(np.float64(a) * np.float64(b) + np.float64(c))) == 0x3F800002   # the trap being avoided


def test_fma_matches_libm_fmaf(libm_fmaf):
    rng = np.random.default_rng(1)
    a, b, c = random_triples(rng, 10**6)
    got = nm.fma_f32(a, b, c)
    with np.errstate(all="ignore"):
        want = libm_fmaf(a, b, c).astype(F32)
    ok = same_bits(got, want)
    bad = np.flatnonzero(~ok)[:5]
    assert ok.all(), [(hex(bits(a[i])), hex(bits(b[i])), hex(bits(c[i])), hex(bits(got[i])), hex(bits(want[i]))) for i in bad]
    # the plain f64 route must actually fail somewhere in this mix, or the test proves nothing about fusing+rounding
    with np.errstate(all="ignore"):
        naive = (a.astype(np.float64) * b + c).astype(F32)
    assert (~same_bits(naive, want)).sum() > 1000


def _exact_fma(a, b, c):
    """Correctly rounded RNE fma from exact rationals (finite inputs)."""
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    if exact == 0:
        return F32(float(a) * float(b) + float(c))        # IEEE zero sign rule, exact in f64
    # round to f32: find the binade, quantize with ties-to-even
    sign = -1 if exact < 0 else 1
    mag = abs(exact)
    e = mag.numerator.bit_length() - mag.denominator.bit_length()
    if Fraction(2) ** e > mag:
        e -= 1
    e = max(e, -126)
    q = Fraction(2) ** (e - 23)
    n, rem = divmod(mag, q)
    n = int(n)
    if rem * 2 > q or (rem * 2 == q and n % 2 == 1):
        n += 1
    val = n * q
    if val >= Fraction(2) ** 128:
        return F32(sign * np.inf)
    return F32(sign * float(val))


def test_fma_matches_fractions():
    rng = np.random.default_rng(2)
    a, b, c = random_triples(rng, 5000)
    with np.errstate(all="ignore"):
        fin = np.isfinite(a) & np.isfinite(b) & np.isfinite(c) & np.isfinite(a.astype(np.float64) * b + c)
    a, b, c = a[fin], b[fin], c[fin]
    got = nm.fma_f32(a, b, c)
    want = np.array([_exact_fma(x, y, z) for x, y, z in zip(a, b, c)], F32)
    assert (bits(got) == bits(want)).all()


def test_fma_specials():
    inf, nan = F32(np.inf), F32(np.nan)
    a = np.array([inf, 0, inf, 1, -0.0, 0.0, -0.0, 3e38, 1e-30], F32)
    b = np.array([0, 5, 1, 1, 1, -1, 1, 10, 1e-30], F32)
    c = np.array([1, nan, -inf, -1, -0.0, 0.0, 0.0, 0, 0], F32)
    want = np.array([nan, nan, nan, 0.0, -0.0, 0.0, 0.0, inf, 0.0], F32)
    assert same_bits(nm.fma_f32(a, b, c), want).all()
    assert bits(nm.fma_f32(F32(1), F32(1), F32(-1))) == 0          # x - x = +0 in RNE


def test_denorm_modes():
    d = F32(2.0**-130)                 # a denormal
    one = F32(1)
    # mode 3 keeps, mode 0 flushes the input (d*1 -> 0), mode 2 flushes input only, mode 1 output only
    assert nm.mul_f32(d, one, mode=3) == d
    assert bits(nm.mul_f32(-d, one, mode=0)) == 0x80000000
    assert nm.mul_f32(d, one, mode=2) == 0
    assert nm.mul_f32(d, one, mode=1) == 0
    # input kept but the output flushed vs output kept with input flushed
    big = F32(2.0**100)
    assert nm.mul_f32(d, big, mode=1) == F32(2.0**-30)               # denormal input honoured
    assert nm.mul_f32(F32(2.0**-70), F32(2.0**-70), mode=2) == F32(2.0**-140)   # denormal output kept
    assert nm.mul_f32(F32(2.0**-70), F32(2.0**-70), mode=1) == 0
    assert nm.fma_f32(F32(2.0**-70), F32(2.0**-70), F32(0), mode=0) == 0
    assert (nm.flush_f32(np.array([0x00000001, 0x80400000, 0x00800000], np.uint32)) ==
            np.array([0, 0x80000000, 0x00800000], np.uint32)).all()


# ---- 16-bit conversions against torch ------------------------------------------------------------------------

def _interesting_f32(rng, n):
    raw = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32)
    ties = (rng.integers(0, 2**16, size=n).astype(np.uint32) << 16) | np.uint32(0x8000)   # exact bf16 ties
    near = rng.standard_normal(n).astype(F32)
    f16ties = (np.float16(1).astype(F32) * 0 + rng.integers(1, 2**11, size=n) * 2.0 ** -11 + 2.0 ** -12).astype(F32)
    return np.concatenate([f32(raw), f32(ties), near, f16ties, np.array([65504, 65520, 65519.996, 1e-8, -6e-8], F32)])


def test_bf16_conversion_vs_torch():
    x = _interesting_f32(np.random.default_rng(3), 200_000)
    got = nm.f32_to_bf16(x)
    want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    isnan = np.isnan(x)
    assert (got[~isnan] == want[~isnan]).all()
    assert (np.isnan(nm.bf16_to_f32(got[isnan]))).all()
    back = nm.bf16_to_f32(got[~isnan])
    assert (back == torch.from_numpy(x[~isnan]).to(torch.bfloat16).float().numpy()).all()


def test_f16_conversion_vs_torch():
    x = _interesting_f32(np.random.default_rng(4), 200_000)
    got = nm.f32_to_f16(x)
    want = torch.from_numpy(x).to(torch.float16).view(torch.int16).numpy().view(np.uint16)
    isnan = np.isnan(x)
    assert (got[~isnan] == want[~isnan]).all()
    assert (nm.f16_to_f32(got[~isnan]) == torch.from_numpy(x[~isnan]).half().float().numpy()).all()


# ---- FP8 ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,dtype,lut", [("e4m3", torch.float8_e4m3fn, nm.FP8_E4M3_LUT),
                                            ("e5m2", torch.float8_e5m2, nm.BF8_E5M2_LUT)])
def test_fp8_decode_lut_vs_torch(name, dtype, lut):
    want = torch.arange(256, dtype=torch.uint8).view(dtype).float().numpy()
    assert same_bits(lut, want).all()


@pytest.mark.parametrize("enc,dtype,limit", [(nm.f32_to_fp8_e4m3, torch.float8_e4m3fn, 464.0),
                                             (nm.f32_to_bf8_e5m2, torch.float8_e5m2, 61440.0)])
def test_fp8_encode_vs_torch(enc, dtype, limit):
    rng = np.random.default_rng(5)
    lut = torch.arange(256, dtype=torch.uint8).view(dtype).float().numpy()
    fin = lut[np.isfinite(lut)]
    mids = ((np.sort(np.unique(fin))[1:] + np.sort(np.unique(fin))[:-1]) / 2).astype(F32)       # exact ties
    x = np.concatenate([rng.standard_normal(100_000).astype(F32) * F32(limit / 8),
                        (rng.standard_normal(50_000) * 2.0 ** rng.integers(-20, 0, 50_000)).astype(F32),
                        mids, -mids, np.nextafter(mids, F32(0)), np.nextafter(mids, F32(np.inf))]).astype(F32)
    x = x[np.abs(x) < limit]                         # in range: torch and the hardware convert agree here
    got = enc(x)
    want = torch.from_numpy(x).to(dtype).view(torch.uint8).numpy()
    assert (got == want).all(), x[got != want][:8]


def test_fp8_specials():
    e4 = lambda *v: [int(c) for c in nm.f32_to_fp8_e4m3(np.array(v, F32))]
    e5 = lambda *v: [int(c) for c in nm.f32_to_bf8_e5m2(np.array(v, F32))]
    assert e4(1.0, -3.3, 448, -448) == [0x38, 0xC5, 0x7E, 0xFE]
    assert e4(464, 465, 1000, np.inf, -np.inf) == [0x7E, 0x7F, 0x7F, 0x7F, 0xFF]     # tie to even, then NaN
    assert e4(np.nan, -np.nan) == [0x7F, 0xFF]
    assert e4(2.0**-9, 2.0**-10, 1.5 * 2.0**-10, 0.001, 2.0**-6, 7 * 2.0**-9) == [0x01, 0x00, 0x01, 0x01, 0x08, 0x07]
    assert e4(0.0, -0.0, -1e-30) == [0x00, 0x80, 0x80]
    assert e5(57344, 61439, 61440, np.inf, -np.inf, np.nan) == [0x7B, 0x7B, 0x7C, 0x7C, 0xFC, 0x7F]
    assert e5(2.0**-16, 2.0**-17, 1.0, -2.0) == [0x01, 0x00, 0x3C, 0xC0]
    assert nm.FP8_E4M3_LUT[0x7E] == 448 and np.isnan(nm.FP8_E4M3_LUT[0x7F]) and np.isnan(nm.FP8_E4M3_LUT[0xFF])
    assert nm.FP8_E4M3_LUT[0x01] == 2.0**-9 and bits(nm.FP8_E4M3_LUT[0x80]) == 0x80000000
    assert nm.BF8_E5M2_LUT[0x7C] == np.inf and np.isnan(nm.BF8_E5M2_LUT[0x7D])


def test_cvt_pk_fp8_preserves_other_half():
    old = np.array([0xAABBCCDD], np.uint32)
    lo = nm.cvt_pk_f8_f32(old, np.array([1.0], F32), np.array([-2.0], F32), hi=False)
    hi = nm.cvt_pk_f8_f32(old, np.array([1.0], F32), np.array([-2.0], F32), hi=True)
    assert lo[0] == 0xAABBC038 and hi[0] == 0xC038CCDD
    assert nm.cvt_pk_f8_f32(old, np.array([1.0], F32), np.array([-2.0], F32), hi=False, bf8=True)[0] == 0xAABBC03C


# ---- int conversions ----------------------------------------------------------------------------------------

def test_int_conversions():
    x = np.array([1.9, -1.9, 2.5, -2.5, 3e9, -3e9, np.nan, np.inf, -np.inf, -0.0, 0.5, 0.49999997, -0.5, 8388609], F32)
    assert nm.cvt_i32_f32(x).tolist() == [1, -1, 2, -2, 2**31 - 1, -2**31, 0, 2**31 - 1, -2**31, 0, 0, 0, 0, 8388609]
    assert nm.cvt_u32_f32(x).tolist() == [1, 0, 2, 0, 3000000000, 0, 0, 2**32 - 1, 0, 0, 0, 0, 0, 8388609]
    assert nm.rndne_f32(x[:4]).tolist() == [2, -2, 2, -2]
    assert bits(nm.rndne_f32(F32(-0.4))) == 0x80000000
    # floor(x + 0.5) with the add in f32: ties go up, 0.49999997+0.5 rounds to 1.0, 8388609+0.5 ties to 8388610
    assert nm.cvt_nearest_i32_f32(x[[2, 3, 10, 11, 12, 13]]).tolist() == [3, -2, 1, 1, 0, 8388610]
    i = np.array([0, -1, 2**31 - 1, -2**31, 16777217, 16777219], np.int32)
    assert (nm.cvt_f32_i32(i) == torch.from_numpy(i).float().numpy()).all()
    u = np.array([0, 2**32 - 1, 16777217, 2**31 + 128, 2**31 + 129], np.uint32)
    assert nm.cvt_f32_u32(u).tolist() == [0, 2.0**32, 16777216, 2.0**31, 2.0**31 + 256]


# ---- transcendentals ----------------------------------------------------------------------------------------

def test_transcendental_specials():
    inf, nan = np.inf, np.nan
    assert nm.exp2_f32(np.array([-inf, inf, 0, 3, -126, -127], F32)).tolist() == [0, inf, 1, 8, 2.0**-126, 0]
    assert np.isnan(nm.exp2_f32(F32(nan)))
    lg = nm.log2_f32(np.array([0, -0.0, 2.0**-130, 1, 8, inf], F32))
    assert lg.tolist() == [-inf, -inf, -inf, 0, 3, inf]
    assert np.isnan(nm.log2_f32(F32(-1)))
    assert nm.rcp_f32(np.array([0, -0.0, inf, 4, 2.0**127], F32)).tolist() == [inf, -inf, 0, 0.25, 0]
    assert bits(nm.rcp_f32(F32(-inf))) == 0x80000000
    assert nm.rsq_f32(np.array([0, 4, inf], F32)).tolist() == [inf, 0.5, 0]
    assert nm.rsq_f32(F32(-0.0)) == -inf and np.isnan(nm.rsq_f32(F32(-1)))
    assert np.isnan(nm.sqrt_f32(F32(-1))) and bits(nm.sqrt_f32(F32(-0.0))) == 0x80000000


def test_transcendental_accuracy():
    rng = np.random.default_rng(6)
    x = rng.uniform(-100, 100, 100_000).astype(F32)
    y = nm.exp2_f32(x)
    ref = np.exp2(x.astype(np.float64))
    ok = (ref < 2.0**-126) | (np.abs(y - ref) <= 0.5 * np.abs(np.spacing(np.float32(ref))).astype(np.float64) * 1.0000001)
    assert ok.all()
    p = np.abs(x) + F32(1e-3)
    for fn, ref in [(nm.rcp_f32, 1 / p.astype(np.float64)), (nm.sqrt_f32, np.sqrt(p.astype(np.float64))),
                    (nm.log2_f32, np.log2(p.astype(np.float64)))]:
        got = fn(p).astype(np.float64)
        assert (np.abs(got - ref) <= 0.5 * np.abs(np.spacing(np.float32(ref))).astype(np.float64) * 1.0000001).all()


# ---- min / max / med3 ---------------------------------------------------------------------------------------

def test_min_max_num():
    nan, inf = F32(np.nan), F32(np.inf)
    a = np.array([1, nan, 2, nan, -0.0, 0.0, -inf], F32)
    b = np.array([2, 3, nan, nan, 0.0, -0.0, 1], F32)
    mx, mn = nm.max_num_f32(a, b), nm.min_num_f32(a, b)
    assert same_bits(mx, np.array([2, 3, 2, nan, 0.0, 0.0, 1], F32)).all()
    assert same_bits(mn, np.array([1, 3, 2, nan, -0.0, -0.0, -inf], F32)).all()
    snan = f32(np.uint32(0x7F800001))
    assert bits(nm.max_num_f32(snan, snan)) == 0x7FC00001           # canonicalize quiets
    rng = np.random.default_rng(7)
    x, y, z = rng.standard_normal((3, 1000)).astype(F32)
    assert (nm.max3_num_f32(x, y, z) == np.max([x, y, z], axis=0)).all()
    assert (nm.min3_num_f32(x, y, z) == np.min([x, y, z], axis=0)).all()
    assert (nm.med3_num_f32(x, y, z) == np.median([x, y, z], axis=0)).all()
    # clamp idiom of the quantizer: med3(x, -448, 448)
    assert nm.med3_num_f32(np.array([1000, -1000, 3], F32), F32(-448), F32(448)).tolist() == [448, -448, 3]
    assert nm.med3_num_f32(nan, F32(-448), F32(448)) == -448          # NaN -> min3_num


def test_ldexp_frexp_fract():
    assert nm.ldexp_f32(np.array([3, 1, 1, 1.5, -0.0], F32), np.array([5, -149, -150, -149, 3])).tolist() == \
        [96, 2.0**-149, 0, 2.0**-148, -0.0]
    assert nm.ldexp_f32(F32(1), 128) == np.inf and nm.ldexp_f32(F32(1), 2**31 - 1) == np.inf
    assert nm.frexp_mant_f32(np.array([8, -3], F32)).tolist() == [0.5, -0.75]
    assert nm.frexp_exp_i32_f32(np.array([8, -3, 0, np.inf], F32)).tolist() == [4, 2, 0, 0]
    assert nm.fract_f32(np.array([1.25, -1.25, -1e-10], F32)).tolist() == [0.25, 0.75, F32(1 - 2.0**-24)]
