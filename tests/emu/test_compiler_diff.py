"""Compiler-differential corpus: headers-free HIP kernels (tests/emu/hip/*.hip) compiled by LLVM 22 for gfx1201,
run on sage_co.emu, compared with numpy evaluations of the same C expressions.

Bitwise everywhere except the TRANS builtins (exp2/log/rcp/rsq/sqrt), which are compared within 1 ulp of the
correctly rounded value: the hardware instructions are approximations (docs/rdna4.md §Throughput) and the emulator
models them as correctly rounded, so only that bound is a property both share.
HIP's default for gfx1201 keeps f32 denormals (FLOAT_DENORM_MODE_32 = 3 in these code objects); inputs avoid
denormals anyway. Launch geometry: grid counts workgroups (hipModuleLaunchKernel convention).
"""
import struct
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from llvm_tools import LLVM, WHY_NO_LLVM, hip_co
from sage_co.emu import numerics as nm
from sage_co.emu import wmma as wm

HIP_DIR = Path(__file__).parent / "hip"
F32 = np.float32


@pytest.fixture(scope="session")
def code_objects(tmp_path_factory):
    if LLVM is None:
        pytest.skip(f"no LLVM: cannot build the HIP corpus ({WHY_NO_LLVM})")
    out = tmp_path_factory.mktemp("hip_co")
    return {src.stem: hip_co(src, out / (src.stem + ".co"), ("-O3", "-I", HIP_DIR))
            for src in sorted(HIP_DIR.glob("*.hip"))}


@pytest.fixture(scope="session")
def emu():
    try:
        import sage_co.emu as emu_pkg
        return emu_pkg.Device
    except (ImportError, AttributeError) as e:
        pytest.skip(f"executor not available yet (sage_co.emu.Device): {e}")


def launch(Device, co, kernel, wgs, bs, buffers, out_nbytes, scalars=()):
    """buffers: list of numpy arrays (inputs) placed after the output pointer; returns the output bytes."""
    dev = Device()
    out = dev.alloc(out_nbytes)
    dev.write(out, bytes(out_nbytes))
    ptrs = []
    for arr in buffers:
        raw = np.ascontiguousarray(arr).tobytes()
        p = dev.alloc(len(raw))
        dev.write(p, raw)
        ptrs.append(p)
    kernargs = struct.pack("<" + "Q" * (1 + len(ptrs)), out, *ptrs) + struct.pack("<" + "i" * (len(scalars) + 1), *scalars, bs)
    mod = dev.load(co)
    mod.launch(kernel, grid=(wgs, 1, 1), block=(bs, 1, 1), kernargs=kernargs)
    return np.frombuffer(bytes(dev.read(out, out_nbytes)), np.uint8)


def f32_finite(rng, n, scale=10.0):
    return (rng.standard_normal(n) * scale).astype(F32)


def ulp_diff(a, b):
    ka = nm.order_key(np.asarray(a, F32))
    kb = nm.order_key(np.asarray(b, F32))
    return np.abs(ka - kb)


# ---- arith.hip ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("wgs,bs", [(4, 64), (2, 96)])
def test_int_ops(code_objects, emu, wgs, bs):
    rng = np.random.default_rng(1)
    n = wgs * bs
    a = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    b[::5] = a[::5]
    got = launch(emu, code_objects["arith"], "int_ops", wgs, bs, [a, b], n * 12 * 4).view(np.uint32).reshape(n, 12)
    x, y = a.astype(np.int64), b.astype(np.int64)
    sx, sy = a.view(np.int32).astype(np.int64), b.view(np.int32).astype(np.int64)
    M = 0xFFFFFFFF
    want = np.zeros((n, 12), np.int64)
    want[:, 0] = (x + y * 3) & M
    want[:, 1] = (x * y) & M
    want[:, 2] = (x * y) >> 32
    want[:, 3] = ((sx >> (y & 31)) & M) ^ ((x << (y % 7)) & M)
    want[:, 4] = (x >> 5) & 0x3FF
    want[:, 5] = (x & ~0xFF00 & M) | ((y & 0xFF) << 8)
    want[:, 6] = np.where(sx < sy, x - y, y - x) & M
    want[:, 7] = (np.maximum(sx, sy) + np.minimum(x, y)) & M
    want[:, 8] = x // ((y & 0xFFFF) | 1)
    den = (sy >> 20) | 1
    want[:, 9] = (np.sign(sx) * np.sign(den) * (np.abs(sx) // np.abs(den))) & M
    bits = ((x[:, None] >> np.arange(32)) & 1)
    pop = bits.sum(1)
    xo = x | 1
    clz = 31 - np.floor(np.log2(xo.astype(np.float64))).astype(np.int64)
    yc = y | 0x80000000
    ctz = np.argmax(((yc[:, None] >> np.arange(32)) & 1) == 1, axis=1)
    want[:, 10] = pop + (clz << 8) + (ctz << 16)
    want[:, 11] = (x == y) + 2 * (x != 0) + 4 * (sx <= 0) + 8 * (x >= y)
    bad = np.argwhere(got != want.astype(np.uint32))
    assert bad.size == 0, f"mismatches (thread, field): {bad[:10].tolist()}"


@pytest.mark.parametrize("wgs,bs", [(3, 96), (2, 256)])
def test_float_ops(code_objects, emu, wgs, bs):
    rng = np.random.default_rng(2)
    n = wgs * bs
    a, b, c = f32_finite(rng, n), f32_finite(rng, n), f32_finite(rng, n)
    b[::7] = a[::7]
    c[::11] = -(a[::11] * b[::11])                 # cancellation: fma must not round the product
    got = launch(emu, code_objects["arith"], "float_ops", wgs, bs, [a, b, c], n * 14 * 4).view(F32).reshape(n, 14)
    with np.errstate(all="ignore"):
        fma = nm.fma_f32(a, b, c)
        want = np.stack([
            fma,
            fma,                                      # x*y + z is contracted to v_fma_f32 by clang -O3 for HIP
            a - b,
            nm.min_num_f32(a, b),
            nm.max_num_f32(a, c),
            np.where(a < b, c, a),
            nm.cvt_f32_i32(nm.cvt_i32_f32(a)),
            nm.cvt_f32_u32(nm.cvt_u32_f32(np.abs(b))),
            np.rint(c),
            (np.floor(a) + np.trunc(b)) + np.ceil(c),
            np.copysign(a, b),
            np.abs(a) * F32(0.5),
            nm.cvt_f32_i32(nm.cvt_i32_f32(a * F32(1000))),
            nm.fma_f32(-a, b, fma),
        ], axis=1).astype(F32)
    bad = np.argwhere(got.view(np.uint32) != want.view(np.uint32))
    assert bad.size == 0, f"mismatches (thread, field): {bad[:10].tolist()}"


# ---- convert.hip -------------------------------------------------------------------------------------------

def test_cvt_ops(code_objects, emu):
    rng = np.random.default_rng(3)
    wgs, bs = 2, 128
    n = wgs * bs
    x = (rng.standard_normal(4 * n) * 2.0 ** rng.integers(-10, 8, 4 * n)).astype(F32)
    x = np.clip(x, -440, 440)
    grid = nm.FP8_E4M3_LUT[np.isfinite(nm.FP8_E4M3_LUT)]
    ties = ((np.sort(grid)[1:] + np.sort(grid)[:-1]) / 2).astype(F32)
    x[: len(ties)] = ties[rng.permutation(len(ties))][: 4 * n]             # exact fp8 ties exercise RNE
    got = launch(emu, code_objects["convert"], "cvt_ops", wgs, bs, [x], n * 5 * 4).view(np.uint32).reshape(n, 5)
    x0, x1, x2, x3 = x.reshape(n, 4).T
    fp8 = lambda v: nm.f32_to_fp8_e4m3(v).astype(np.uint32)
    bf8 = lambda v: nm.f32_to_bf8_e5m2(v).astype(np.uint32)
    h0, h1 = nm.f32_to_f16(x0).astype(np.uint32), nm.f32_to_f16(x1).astype(np.uint32)
    b2 = x2.view(np.uint32).astype(np.uint64)
    r = ((b2 + 0x7FFF + ((b2 >> 16) & 1)) >> 16).astype(np.uint32)
    want = np.stack([
        fp8(x0) | (fp8(x1) << 8) | (fp8(x2) << 16) | (fp8(x3) << 24),
        np.uint32(0x5A5A0000) | bf8(x0) | (bf8(x1) << 8),
        h0 | (h1 << 16),
        r,
        (nm.f16_to_f32(h0) + nm.bf16_to_f32(r)).view(np.uint32),
    ], axis=1)
    bad = np.argwhere(got != want)
    assert bad.size == 0, f"mismatches (thread, field): {bad[:10].tolist()}"


# ---- lanes.hip ---------------------------------------------------------------------------------------------

def test_lane_ops(code_objects, emu):
    rng = np.random.default_rng(4)
    wgs, bs = 4, 64
    n = wgs * bs
    a = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    got = launch(emu, code_objects["lanes"], "lane_ops", wgs, bs, [a], n * 5 * 4).view(np.uint32).reshape(n, 5)
    waves = a.reshape(-1, 32)
    l = np.arange(32)
    want = np.stack([
        np.where(l % 16 == 0, 0, waves[:, (l - 1) % 32]),                 # row_shr:1 (row start has no source)
        waves[:, (l & ~3) + 3 - (l & 3)],                                  # quad_perm [3,2,1,0]
        waves[:, l ^ 16],                                                  # permlanex16 with identity selects
        waves[:, l ^ 1],                                                   # ds_swizzle bitmask xor 1
        waves[:, :1] + waves[:, (l & ~3) + 1],                             # readfirstlane + swizzle quad [1,1,1,1]
    ], axis=2).reshape(n, 5).astype(np.uint32)
    bad = np.argwhere(got != want)
    assert bad.size == 0, f"mismatches (thread, field): {bad[:10].tolist()}"


# ---- control.hip -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("wgs,bs", [(4, 256), (3, 32), (2, 64)])
def test_lds_reverse_sum(code_objects, emu, wgs, bs):
    rng = np.random.default_rng(5)
    n = wgs * bs
    a = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    got = launch(emu, code_objects["control"], "lds_reverse_sum", wgs, bs, [a], n * 8).view(np.uint32).reshape(n, 2)
    blocks = a.reshape(wgs, bs)
    rev = blocks[:, ::-1].reshape(n)
    tot = np.repeat((blocks & 0xFFFF).astype(np.uint64).sum(1), bs).astype(np.uint32)
    assert (got[:, 0] == rev).all() and (got[:, 1] == tot).all()


def test_branches(code_objects, emu):
    rng = np.random.default_rng(6)
    wgs, bs = 8, 32
    n = wgs * bs
    a = rng.integers(1, 2**20, n).astype(np.uint32)
    got = launch(emu, code_objects["control"], "branches", wgs, bs, [a], n * 4).view(np.uint32)
    want = []
    for x in a.tolist():
        acc = 0
        for k in range(x & 15):
            acc = (acc * 31 + k) & 0xFFFFFFFF
        if x & 0x100:
            acc ^= 0xDEADBEEF
        elif x & 0x200:
            acc = (acc + (x >> 3)) & 0xFFFFFFFF
        else:
            acc = ~acc & 0xFFFFFFFF
        m, steps = x, 0
        while m != 1 and steps < 40:
            m = (3 * m + 1) & 0xFFFFFFFF if m & 1 else m >> 1
            steps += 1
        want.append((acc + (steps << 24)) & 0xFFFFFFFF)
    assert (got == np.array(want, np.uint32)).all()


# ---- matrix.hip --------------------------------------------------------------------------------------------

def _round_f32(x: Fraction) -> float:
    if x == 0:
        return 0.0
    sign, mag = (-1 if x < 0 else 1), abs(x)
    e = mag.numerator.bit_length() - mag.denominator.bit_length()
    e = e - 1 if Fraction(2) ** e > mag else e
    q = Fraction(2) ** (max(e, -126) - 23)
    k, rem = divmod(mag, q)
    k = int(k) + (1 if rem * 2 > q or (rem * 2 == q and int(k) % 2) else 0)
    return sign * float(k * q)


def _exact_mm_f32(A, B, C):
    """[W,16,16] f64-exact values -> correctly rounded f32 of A@B + C per element (Fractions)."""
    out = np.zeros(C.shape, F32)
    for w in range(A.shape[0]):
        for m in range(16):
            for n_ in range(16):
                s = sum(Fraction(float(A[w, m, k])) * Fraction(float(B[w, k, n_])) for k in range(16))
                out[w, m, n_] = _round_f32(s + Fraction(float(C[w, m, n_])))
    return out


WG_WMMA, BS_WMMA = 2, 64            # 2 workgroups x 2 waves


def test_wmma_iu8(code_objects, emu):
    rng = np.random.default_rng(7)
    w = WG_WMMA * BS_WMMA // 32
    A = rng.integers(0, 256, (w, 16, 16)).astype(np.uint8)
    B = rng.integers(0, 256, (w, 16, 16)).astype(np.uint8)
    C = rng.integers(-2**31, 2**31, (w, 16, 16)).astype(np.int64)
    C[:, 0] = 2**31 - 5                                         # clamp / wrap visible in row 0
    regs = [wm.pack_a_8bit(A), wm.pack_b_8bit(B), wm.pack_c32(C.astype(np.int32))]
    got = launch(emu, code_objects["matrix"], "wmma_iu8", WG_WMMA, BS_WMMA, regs, w * 32 * 16 * 4)
    got = got.view(np.uint32).reshape(w, 32, 16)
    sa, ua, sb = A.view(np.int8).astype(np.int64), A.astype(np.int64), B.view(np.int8).astype(np.int64)
    ss = ((sa @ sb + C) & 0xFFFFFFFF).astype(np.uint32)
    uu = np.clip(ua @ sb + C, -2**31, 2**31 - 1).astype(np.int32).view(np.uint32)
    assert (wm.unpack_d32(np.ascontiguousarray(got[:, :, :8])) == ss).all()
    assert (wm.unpack_d32(np.ascontiguousarray(got[:, :, 8:])) == uu).all()


def test_wmma_fp8(code_objects, emu):
    rng = np.random.default_rng(8)
    w = WG_WMMA * BS_WMMA // 32
    finite8 = np.flatnonzero(np.isfinite(nm.FP8_E4M3_LUT) & np.isfinite(nm.BF8_E5M2_LUT))
    A = rng.choice(finite8, (w, 16, 16)).astype(np.uint8)
    B = rng.choice(np.flatnonzero(np.isfinite(nm.FP8_E4M3_LUT)), (w, 16, 16)).astype(np.uint8)
    C = (rng.standard_normal((w, 16, 16)) * 100).astype(F32)
    regs = [wm.pack_a_8bit(A), wm.pack_b_8bit(B), wm.pack_c32(C)]
    got = launch(emu, code_objects["matrix"], "wmma_fp8", WG_WMMA, BS_WMMA, regs, w * 32 * 16 * 4)
    got = got.view(np.uint32).reshape(w, 32, 16)
    fb = nm.FP8_E4M3_LUT[B]
    want_ff = _exact_mm_f32(nm.FP8_E4M3_LUT[A], fb, C)
    want_bf = _exact_mm_f32(nm.BF8_E5M2_LUT[A], fb, C)
    assert (wm.unpack_d32(np.ascontiguousarray(got[:, :, :8])).view(F32) == want_ff).all()
    assert (wm.unpack_d32(np.ascontiguousarray(got[:, :, 8:])).view(F32) == want_bf).all()


@pytest.mark.parametrize("bf16", [False, True])
def test_wmma_16bit(code_objects, emu, bf16):
    rng = np.random.default_rng(9 + bf16)
    w = WG_WMMA * BS_WMMA // 32
    a, b = rng.standard_normal((2, w, 16, 16)).astype(F32)
    C = rng.standard_normal((w, 16, 16)).astype(F32)
    if bf16:
        ha, hb = nm.f32_to_bf16(a), nm.f32_to_bf16(b)
        fa, fb = nm.bf16_to_f32(ha), nm.bf16_to_f32(hb)
    else:
        ha, hb = nm.f32_to_f16(a), nm.f32_to_f16(b)
        fa, fb = nm.f16_to_f32(ha), nm.f16_to_f32(hb)
    regs = [wm.pack_a_16bit(ha), wm.pack_b_16bit(hb), wm.pack_c32(C)]
    name = "wmma_bf16" if bf16 else "wmma_f16"
    got = launch(emu, code_objects["matrix"], name, WG_WMMA, BS_WMMA, regs, w * 32 * 8 * 4).view(np.uint32)
    got = wm.unpack_d32(got.reshape(w, 32, 8).copy()).view(F32)
    assert (got == _exact_mm_f32(fa, fb, C)).all()


# ---- trans.hip ---------------------------------------------------------------------------------------------

def test_trans_ops(code_objects, emu):
    rng = np.random.default_rng(10)
    wgs, bs = 2, 256
    n = wgs * bs
    x = (rng.standard_normal(n) * 2.0 ** rng.integers(-20, 20, n)).astype(F32)
    got = launch(emu, code_objects["trans"], "trans_ops", wgs, bs, [x], n * 5 * 4).view(F32).reshape(n, 5)
    ax = np.abs(x).astype(np.float64)
    with np.errstate(all="ignore"):
        ref = np.stack([np.exp2((x * F32(0.125)).astype(np.float64)), np.log2(ax), 1 / x.astype(np.float64),
                        1 / np.sqrt(ax), np.sqrt(ax)], axis=1).astype(F32)
    ref = nm.flush_f32(ref)          # TRANS results below 2^-126 flush to zero (numerics.py TRANS convention)
    # within 1 ulp of the correctly rounded value (hardware approximations; see module docstring)
    assert (ulp_diff(got, ref) <= 1).all()
