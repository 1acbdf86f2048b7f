"""WMMA against loop-based packing written straight from the fact-sheet layouts (docs/rdna4.md §WMMA) and
numpy / exact-rational references. Nothing here reuses wmma.py's index maps or transposes."""
from fractions import Fraction

import numpy as np
import pytest

from sage_co.emu import numerics as nm
from sage_co.emu import wmma as wm

W = 6


# ---- reference packers (loops over the documented formulas) --------------------------------------------------

def ref_pack_8bit(mat, is_b):
    """A[m][k] (or B[k][n]) bytes -> [W,32,2]: lane 16*(k//8)+m, register (k//4)%2, byte k%4."""
    w = mat.shape[0]
    regs = np.zeros((w, 32, 2), np.uint64)
    for i in range(16):
        for k in range(16):
            val = (mat[:, k, i] if is_b else mat[:, i, k]).astype(np.uint8).astype(np.uint64)
            regs[:, 16 * (k // 8) + i, (k // 4) % 2] |= val << np.uint64(8 * (k % 4))
    return regs.astype(np.uint32)


def ref_pack_16bit(mat, is_b):
    """A[m][k] 16-bit patterns -> [W,32,4]: lane 16*((k//4)%2)+m, register 2*(k//8)+(k//2)%2, half k%2."""
    w = mat.shape[0]
    regs = np.zeros((w, 32, 4), np.uint64)
    for i in range(16):
        for k in range(16):
            val = (mat[:, k, i] if is_b else mat[:, i, k]).astype(np.uint64)
            regs[:, 16 * ((k // 4) % 2) + i, 2 * (k // 8) + (k // 2) % 2] |= val << np.uint64(16 * (k % 2))
    return regs.astype(np.uint32)


def ref_pack_c32(mat_u32):
    """D[m][n] -> lane 16*(m//8)+n, register m%8."""
    regs = np.zeros((mat_u32.shape[0], 32, 8), np.uint32)
    for m in range(16):
        for n in range(16):
            regs[:, 16 * (m // 8) + n, m % 8] = mat_u32[:, m, n]
    return regs


def ref_unpack_d32(regs):
    out = np.zeros((regs.shape[0], 16, 16), np.uint32)
    for m in range(16):
        for n in range(16):
            out[:, m, n] = regs[:, 16 * (m // 8) + n, m % 8]
    return out


def ref_pack_c16(mat_u16):
    """16-bit D[m][n] -> lane 16*(m//8)+n, register (m//2)%4, half m%2."""
    regs = np.zeros((mat_u16.shape[0], 32, 4), np.uint32)
    for m in range(16):
        for n in range(16):
            regs[:, 16 * (m // 8) + n, (m // 2) % 4] |= mat_u16[:, m, n].astype(np.uint32) << np.uint32(16 * (m % 2))
    return regs


def ref_unpack_d16(regs):
    out = np.zeros((regs.shape[0], 16, 16), np.uint16)
    for m in range(16):
        for n in range(16):
            out[:, m, n] = (regs[:, 16 * (m // 8) + n, (m // 2) % 4] >> np.uint32(16 * (m % 2))) & 0xFFFF
    return out


def exact_f32(terms_rows):
    """RNE float32 of an exact rational sum (Fraction), finite."""
    x = terms_rows
    if x == 0:
        return np.float32(0.0)
    return np.float32(_round_fraction(x))


def _round_fraction(x: Fraction, mbits: int = 23, emin: int = -126, emax: int = 127) -> float:
    """RNE of an exact rational to a binary format with mbits stored mantissa bits (subnormals, overflow to inf)."""
    if x == 0:
        return 0.0
    sign = -1 if x < 0 else 1
    mag = abs(x)
    e = mag.numerator.bit_length() - mag.denominator.bit_length()
    if Fraction(2) ** e > mag:
        e -= 1
    e = max(e, emin)
    q = Fraction(2) ** (e - mbits)
    n, rem = divmod(mag, q)
    n = int(n)
    if rem * 2 > q or (rem * 2 == q and n % 2 == 1):
        n += 1
    val = n * q
    return sign * (float("inf") if val >= Fraction(2) ** (emax + 1) else float(val))


# ---- layout / pack helpers -----------------------------------------------------------------------------------

def test_pack_helpers_match_reference_layout():
    rng = np.random.default_rng(0)
    m8 = rng.integers(0, 256, (W, 16, 16)).astype(np.uint8)
    m16 = rng.integers(0, 65536, (W, 16, 16)).astype(np.uint16)
    m32 = rng.integers(0, 2**32, (W, 16, 16), dtype=np.uint64).astype(np.uint32)
    assert (wm.pack_a_8bit(m8) == ref_pack_8bit(m8, False)).all()
    assert (wm.pack_b_8bit(m8) == ref_pack_8bit(m8, True)).all()
    assert (wm.pack_a_16bit(m16) == ref_pack_16bit(m16, False)).all()
    assert (wm.pack_b_16bit(m16) == ref_pack_16bit(m16, True)).all()
    assert (wm.pack_c32(m32) == ref_pack_c32(m32)).all()
    assert (wm.unpack_d32(ref_pack_c32(m32)) == m32).all()
    assert (wm.pack_c16(m16) == ref_pack_c16(m16)).all()
    assert (wm.unpack_d16(ref_pack_c16(m16)) == m16).all()


def test_layout_is_observable_with_unit_matrices():
    # A = e_{m0,k0}, B = e_{k0,n0}: only D[m0][n0] = 1 -> checks the C/D map and that A and B agree on k
    for m0, k0, n0 in [(0, 0, 0), (3, 9, 14), (15, 7, 8), (9, 12, 1)]:
        a = np.zeros((1, 16, 16), np.uint8)
        b = np.zeros((1, 16, 16), np.uint8)
        a[0, m0, k0] = 1
        b[0, k0, n0] = 1
        d = wm.wmma_i32_16x16x16_iu8(ref_pack_8bit(a, False), ref_pack_8bit(b, True),
                                     np.zeros((1, 32, 8), np.uint32), False, False)
        want = np.zeros((32, 8), np.uint32)
        want[16 * (m0 // 8) + n0, m0 % 8] = 1
        assert (d[0] == want).all()


def test_bad_shapes_are_rejected():
    with pytest.raises(ValueError, match="a: expected uint32 registers shaped"):
        wm.wmma_i32_16x16x16_iu8(np.zeros((2, 32, 4), np.uint32), np.zeros((2, 32, 2), np.uint32),
                                 np.zeros((2, 32, 8), np.uint32), True, True)
    with pytest.raises(ValueError, match="c: expected"):
        wm.wmma_f32_16x16x16_fp8_fp8(np.zeros((2, 32, 2), np.uint32), np.zeros((2, 32, 2), np.uint32),
                                     np.zeros((2, 32, 8), np.float32))


# ---- iu8 ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("a_signed,b_signed", [(True, True), (True, False), (False, True), (False, False)])
def test_iu8_random(a_signed, b_signed):
    rng = np.random.default_rng(1 + 2 * a_signed + b_signed)
    a = rng.integers(0, 256, (W, 16, 16)).astype(np.uint8)
    b = rng.integers(0, 256, (W, 16, 16)).astype(np.uint8)
    c = rng.integers(-2**31, 2**31, (W, 16, 16)).astype(np.int64)
    c[:, 0] = 2**31 - 1 - rng.integers(0, 1000, (W, 16))        # rows near the limits so clamp/wrap both happen
    c[:, 1] = -2**31 + rng.integers(0, 1000, (W, 16))
    av = a.view(np.int8).astype(np.int64) if a_signed else a.astype(np.int64)
    bv = b.view(np.int8).astype(np.int64) if b_signed else b.astype(np.int64)
    want = (av @ bv + c)
    d = wm.wmma_i32_16x16x16_iu8(ref_pack_8bit(a, False), ref_pack_8bit(b, True),
                                 ref_pack_c32(c.astype(np.int32).view(np.uint32)), a_signed, b_signed)
    assert (ref_unpack_d32(d).view(np.int32) == (want & 0xFFFFFFFF).astype(np.uint32).view(np.int32)).all()
    dc = wm.wmma_i32_16x16x16_iu8(ref_pack_8bit(a, False), ref_pack_8bit(b, True),
                                  ref_pack_c32(c.astype(np.int32).view(np.uint32)), a_signed, b_signed, clamp=True)
    assert (ref_unpack_d32(dc).view(np.int32) == np.clip(want, -2**31, 2**31 - 1)).all()
    assert (want != np.clip(want, -2**31, 2**31 - 1)).any()      # the data does overflow, so clamp is exercised


def test_iu8_extremes():
    a = np.full((1, 16, 16), 0x80, np.uint8)                      # -128 signed / 128 unsigned
    b = np.full((1, 16, 16), 0xFF, np.uint8)                      # -1 signed / 255 unsigned
    z = np.zeros((1, 32, 8), np.uint32)
    pa, pb = ref_pack_8bit(a, False), ref_pack_8bit(b, True)
    assert (wm.wmma_i32_16x16x16_iu8(pa, pb, z, True, True).view(np.int32) == 16 * 128).all()
    assert (wm.wmma_i32_16x16x16_iu8(pa, pb, z, True, False).view(np.int32) == -16 * 128 * 255).all()
    assert (wm.wmma_i32_16x16x16_iu8(pa, pb, z, False, False).view(np.int32) == 16 * 128 * 255).all()
    big = np.full((1, 32, 8), 2**31 - 1, np.uint32)
    assert (wm.wmma_i32_16x16x16_iu8(pa, pb, big, True, True).view(np.int32) == -2**31 + 16 * 128 - 1).all()
    assert (wm.wmma_i32_16x16x16_iu8(pa, pb, big, True, True, clamp=True).view(np.int32) == 2**31 - 1).all()


# ---- fp8 / bf8 ----------------------------------------------------------------------------------------------

FP8_FORMS = [("fp8_fp8", wm.wmma_f32_16x16x16_fp8_fp8, False, False),
             ("fp8_bf8", wm.wmma_f32_16x16x16_fp8_bf8, False, True),
             ("bf8_fp8", wm.wmma_f32_16x16x16_bf8_fp8, True, False),
             ("bf8_bf8", wm.wmma_f32_16x16x16_bf8_bf8, True, True)]


def _finite_codes(rng, bf8, shape, wide):
    lut = nm.BF8_E5M2_LUT if bf8 else nm.FP8_E4M3_LUT
    ok = np.flatnonzero(np.isfinite(lut))
    if not wide:   # moderate values, like attention data
        ok = ok[np.abs(lut[ok]) < 8]
    return rng.choice(ok, size=shape).astype(np.uint8)


@pytest.mark.parametrize("name,fn,a_bf8,b_bf8", FP8_FORMS)
@pytest.mark.parametrize("wide", [False, True])
def test_fp8_random_exact(name, fn, a_bf8, b_bf8, wide):
    rng = np.random.default_rng(hash((name, wide)) % 2**32)
    a = _finite_codes(rng, a_bf8, (W, 16, 16), wide)
    b = _finite_codes(rng, b_bf8, (W, 16, 16), wide)
    c = (rng.standard_normal((W, 16, 16)) * (2.0 ** rng.integers(-30, 20, (W, 16, 16)))).astype(np.float32)
    if wide:
        c[:, ::3] = 0
    d = fn(ref_pack_8bit(a, False), ref_pack_8bit(b, True), ref_pack_c32(c.view(np.uint32)))
    got = ref_unpack_d32(d).view(np.float32)
    la = (nm.BF8_E5M2_LUT if a_bf8 else nm.FP8_E4M3_LUT)[a]
    lb = (nm.BF8_E5M2_LUT if b_bf8 else nm.FP8_E4M3_LUT)[b]
    # exact reference: Fractions for the first two waves, numpy f64 (nearly always identical) as a sanity bound
    for w in range(2):
        for m in range(16):
            for n in range(16):
                exact = sum(Fraction(float(la[w, m, k])) * Fraction(float(lb[w, k, n])) for k in range(16))
                exact += Fraction(float(c[w, m, n]))
                assert got[w, m, n] == exact_f32(exact), (w, m, n)
    approx = np.einsum("wmk,wkn->wmn", la.astype(np.float64), lb.astype(np.float64)) + c
    assert np.allclose(got, approx, rtol=1e-6, atol=0)


def test_fp8_single_rounding_differs_from_f32_accumulation():
    # 1 + 2^-24 + 2^-24: one rounding of the exact sum gives 1 + 2^-23; f32 step-by-step gives 1.0
    a = np.zeros((1, 16, 16), np.uint8)
    b = np.zeros((1, 16, 16), np.uint8)
    a[0, 0, 0], a[0, 0, 1] = 0x01, 0x01                    # 2^-9
    b[0, 0, 0], b[0, 1, 0] = 0x01 | 0x30, 0x01 | 0x30       # 2^-6 * 1.125 ... exact product values below
    la, lb = nm.FP8_E4M3_LUT[a].astype(np.float64), nm.FP8_E4M3_LUT[b].astype(np.float64)
    dot = (la @ lb)[0, 0, 0]
    c = np.zeros((1, 16, 16), np.float32)
    c[0, 0, 0] = np.float32(1 - dot)                          # not exact: forces a real rounding decision
    d = wm.wmma_f32_16x16x16_fp8_fp8(ref_pack_8bit(a, False), ref_pack_8bit(b, True), ref_pack_c32(c.view(np.uint32)))
    exact = Fraction(dot) + Fraction(float(c[0, 0, 0]))
    assert ref_unpack_d32(d).view(np.float32)[0, 0, 0] == exact_f32(exact)


def test_fp8_specials_propagate():
    a = np.full((1, 16, 16), 0x38, np.uint8)                  # 1.0
    b = np.full((1, 16, 16), 0x38, np.uint8)
    a[0, 2, 5] = 0x7F                                          # NaN in row 2
    c = np.zeros((1, 16, 16), np.float32)
    c[0, 4, 4] = np.inf
    got = ref_unpack_d32(wm.wmma_f32_16x16x16_fp8_fp8(ref_pack_8bit(a, False), ref_pack_8bit(b, True),
                                                     ref_pack_c32(c.view(np.uint32)))).view(np.float32)[0]
    assert np.isnan(got[2]).all() and got[4, 4] == np.inf and got[0, 0] == 16
    neg = ref_unpack_d32(wm.wmma_f32_16x16x16_fp8_fp8(ref_pack_8bit(b, False), ref_pack_8bit(b, True),
                                                     ref_pack_c32(np.full((1, 16, 16), 3, np.float32).view(np.uint32)),
                                                     neg_c=True)).view(np.float32)[0]
    assert (neg == 13).all()


# ---- f16 / bf16 ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bf16", [False, True])
def test_f16_bf16_to_f32(bf16):
    rng = np.random.default_rng(11 + bf16)
    a = rng.standard_normal((W, 16, 16)).astype(np.float32)
    b = rng.standard_normal((W, 16, 16)).astype(np.float32)
    c = rng.standard_normal((W, 16, 16)).astype(np.float32)
    if bf16:
        ha, hb = nm.f32_to_bf16(a), nm.f32_to_bf16(b)
        fa, fb = nm.bf16_to_f32(ha), nm.bf16_to_f32(hb)
        fn = wm.wmma_f32_16x16x16_bf16
    else:
        ha, hb = a.astype(np.float16).view(np.uint16), b.astype(np.float16).view(np.uint16)
        fa, fb = ha.view(np.float16).astype(np.float32), hb.view(np.float16).astype(np.float32)
        fn = wm.wmma_f32_16x16x16_f16
    d = fn(ref_pack_16bit(ha, False), ref_pack_16bit(hb, True), ref_pack_c32(c.view(np.uint32)))
    got = ref_unpack_d32(d).view(np.float32)
    # with normal-range data the f64 dot is exact (products of 11/8-bit significands, small exponent span), so the
    # result is the single rounding of the exact value
    for w in range(2):
        for m in range(16):
            for n in range(16):
                exact = sum(Fraction(float(fa[w, m, k])) * Fraction(float(fb[w, k, n])) for k in range(16))
                assert got[w, m, n] == exact_f32(exact + Fraction(float(c[w, m, n])))
    # neg_lo on A negates the low halves (even k), neg_hi the high halves (odd k); neg_lo[2] negates C
    sign = np.where(np.arange(16) % 2 == 0, -1.0, 1.0)
    dn = fn(ref_pack_16bit(ha, False), ref_pack_16bit(hb, True), ref_pack_c32(c.view(np.uint32)),
            neg_lo=(1, 0, 1), neg_hi=(0, 0, 0))
    want = np.einsum("wmk,k,wkn->wmn", fa.astype(np.float64), sign, fb.astype(np.float64)) - c
    assert np.allclose(ref_unpack_d32(dn).view(np.float32), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bf16", [False, True])
def test_16bit_out(bf16):
    rng = np.random.default_rng(21 + bf16)
    a, b, c = (rng.standard_normal((3, W, 16, 16)) * 2).astype(np.float32)
    if bf16:
        to16, to32, fn = nm.f32_to_bf16, nm.bf16_to_f32, wm.wmma_bf16_16x16x16_bf16
    else:
        to16 = lambda x: x.astype(np.float16).view(np.uint16)
        to32 = lambda h: h.view(np.float16).astype(np.float32)
        fn = wm.wmma_f16_16x16x16_f16
    ha, hb, hc = to16(a), to16(b), to16(c)
    d = fn(ref_pack_16bit(ha, False), ref_pack_16bit(hb, True), ref_pack_c16(hc))
    got = to32(ref_unpack_d16(d))
    fa, fb, fc = to32(ha), to32(hb), to32(hc)
    fmt = dict(mbits=7, emin=-126, emax=127) if bf16 else dict(mbits=10, emin=-14, emax=15)
    for w in range(2):
        for m in range(16):
            for n in range(16):
                exact = sum(Fraction(float(fa[w, m, k])) * Fraction(float(fb[w, k, n])) for k in range(16))
                assert got[w, m, n] == _round_fraction(exact + Fraction(float(fc[w, m, n])), **fmt), (w, m, n)
