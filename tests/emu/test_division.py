"""clang's f32 division sequence (div_scale x2, rcp, Newton-Raphson fmas, div_fmas, div_fixup) through the
emulator's instruction semantics gives the IEEE quotient bit for bit, including subnormal, overflowing and
underflowing quotients, huge and subnormal denominators, zeros, infinities and NaN."""
import numpy as np

from sage_co.emu import numerics as nm
from sage_co.emu import valu_ops as valu


def emulated_div(n, d):
    n, d = np.asarray(n, np.float32), np.asarray(d, np.float32)
    den, _ = valu.div_scale(d, d, n)
    num, vcc = valu.div_scale(n, d, n)
    r = nm.rcp_f32(den)
    e = nm.fma_f32(-den, r, np.float32(1))
    r = nm.fma_f32(e, r, r)
    q = nm.mul_f32(num, r)
    e = nm.fma_f32(-den, q, num)
    q = nm.fma_f32(e, r, q)
    e = nm.fma_f32(-den, q, num)
    return valu.div_fixup(valu.div_fmas(e, r, q, vcc), d, n)


def check(n, d):
    with np.errstate(all="ignore"):
        ref = n / d
        got = emulated_div(n, d)
    same = (got.view(np.uint32) == ref.view(np.uint32)) | (np.isnan(got) & np.isnan(ref))
    bad = np.flatnonzero(~same)
    assert bad.size == 0, [(float(n[i]), float(d[i]), float(got[i]), float(ref[i])) for i in bad[:5]]


def test_random_magnitudes_and_specials():
    rng = np.random.default_rng(0)
    N = 100_000
    with np.errstate(over="ignore"):  # magnitudes past FLT_MAX become inf on purpose
        n = (rng.standard_normal(N) * 10.0 ** rng.integers(-45, 39, N)).astype(np.float32)
    d = (rng.standard_normal(N) * 10.0 ** rng.integers(-45, 39, N)).astype(np.float32)
    n[:100], d[100:200], n[200:300], d[250:350] = 0, 0, np.inf, np.inf
    check(n, d)


def test_random_bit_patterns():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    b = rng.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    check(a, b)
    check(b, a)


def test_prepare_kernel_edge_cases():
    # the scale divisions of the prepare kernel at the range edges (amax / 127, 127 / amax, 448 / amax)
    amax = np.array([1.1754942e-38, 1e-45, 3.3895314e38, 1.0, 2.0 ** -149, 2.0 ** 127], np.float32)
    for k in (127.0, 448.0):
        check(amax, np.full_like(amax, k))
        check(np.full_like(amax, k), amax)
