"""The emulator's fast paths against plain references: WMMA writes under partial EXEC and for a subset of waves,
aligned-item memory gathers/scatters, the bit-level fp8 encoders, the IEEE min/max numbers (with and without NaN),
v_perm_b32 with a constant selector, lane-mask packing, the denormal flush and the f64 -> f32 sum rounding on
midpoint-heavy arrays."""
from fractions import Fraction
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from llvm_tools import assemble_co, needs_llvm
from sage_co.emu import Device
from sage_co.emu import memory_ops as mo
from sage_co.emu import numerics as nm
from sage_co.emu import valu_ops
from sage_co.emu.state import pack_lanes, unpack_lanes

HERE = Path(__file__).parent


# ---- WMMA write paths -------------------------------------------------------------------------------------------

@needs_llvm
def test_wmma_partial_exec_and_wave_subsets(tmp_path):
    dev = Device()
    mod = dev.load(assemble_co(HERE / "asm" / "wmma_paths.s", tmp_path))
    rng = np.random.default_rng(5)
    A = rng.integers(-128, 128, (16, 16), dtype=np.int8)
    B = rng.integers(-128, 128, (16, 16), dtype=np.int8)
    nwg = 6
    a, bt, out = dev.alloc(256), dev.alloc(256), dev.alloc(2048 * nwg)
    dev.write(a, A.tobytes())
    dev.write(bt, np.ascontiguousarray(B.T).tobytes())
    stats = mod.launch("wmma_paths", (nwg, 1, 1), (32, 1, 1), struct.pack("<QQQ", a, bt, out))
    assert stats["WMMA"] == 2 * nwg
    got = np.frombuffer(dev.read(out, 2048 * nwg), np.int32).reshape(nwg, 2, 16, 16)
    signed = A.astype(np.int32) @ B.astype(np.int32)
    unsigned_a = A.view(np.uint8).astype(np.int32) @ B.astype(np.int32)
    for wg in range(nwg):
        if wg % 2 == 0:
            np.testing.assert_array_equal(got[wg, 0], signed + 7)
        else:      # EXEC = lanes 0..15: rows 0..7 written, rows 8..15 untouched
            np.testing.assert_array_equal(got[wg, 0, :8], unsigned_a[:8] + 7)
            np.testing.assert_array_equal(got[wg, 0, 8:], 7)
        np.testing.assert_array_equal(got[wg, 1, :8], 5)     # EXEC = lanes 16..31: rows 8..15 only
        np.testing.assert_array_equal(got[wg, 1, 8:], signed[8:] + 5)


# ---- memory gathers / scatters ----------------------------------------------------------------------------------

def _ref_gather(mem, off, nbytes):
    ndw = (nbytes + 3) // 4
    out = np.zeros((len(off), ndw * 4), np.uint8)
    for i, o in enumerate(off):
        out[i, :nbytes] = mem[o:o + nbytes]
    return out.view(np.uint32)


def _ref_scatter(mem, off, data, nbytes):
    b = np.ascontiguousarray(data).view(np.uint8)
    for i, o in enumerate(off):
        mem[o:o + nbytes] = b[i, :nbytes]


@pytest.mark.parametrize("nbytes", [1, 2, 4, 8, 12, 16])
@pytest.mark.parametrize("aligned", [True, False])
def test_mem_gather_scatter_match_bytewise(nbytes, aligned):
    rng = np.random.default_rng(nbytes + 100 * aligned)
    mem = rng.integers(0, 256, 4096 + 3, dtype=np.uint8)        # length not a multiple of the item size
    step = nbytes if aligned and nbytes in (1, 2, 4, 8, 16) else 1
    off = rng.integers(0, (len(mem) - nbytes) // step + 1, 200).astype(np.int64) * step
    if not aligned:
        off[0] |= 1                                             # at least one odd offset: the byte path
    off[5] = off[9] = off[17]                                   # repeated offsets: the later lane wins
    mem32 = mem[:len(mem) // 4 * 4].view(np.uint32)
    np.testing.assert_array_equal(mo.mem_gather(mem, mem32, off, nbytes), _ref_gather(mem, off, nbytes))
    data = rng.integers(0, 2**32, (len(off), (nbytes + 3) // 4), dtype=np.uint64).astype(np.uint32)
    want, got = mem.copy(), mem.copy()
    _ref_scatter(want, off, data, nbytes)
    mo.mem_scatter(got, got[:len(got) // 4 * 4].view(np.uint32), off, data, nbytes)
    np.testing.assert_array_equal(got, want)


# ---- fp8 encoders -----------------------------------------------------------------------------------------------

def _ref_f32_to_f8(x, mbits, bias, lut, max_code, overflow_code):
    """Value-level reference: RNE on the fp8 grid via frexp, then the code by searching the decode table."""
    with np.errstate(all="ignore"):
        mag = np.abs(x.astype(np.float64))
        safe = np.where(np.isfinite(mag) & (mag > 0), mag, 1.0)
        _, e2 = np.frexp(safe)
        quantum = np.ldexp(1.0, np.maximum(e2 - 1, 1 - bias) - mbits)
        rounded = np.rint(safe / quantum) * quantum
        pos = lut[:max_code + 1].astype(np.float64)
        code = np.searchsorted(pos, np.minimum(rounded, pos[-1]))
        code = np.where(mag == 0, 0, code)
        code = np.where((rounded > pos[-1]) | np.isinf(mag), overflow_code, code)
        code = np.where(np.isnan(mag), 0x7F, code)
        return (code | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def _f32_patterns(seed):
    """Random f32 bit patterns plus every exponent with mantissas at and around the fp8 rounding points."""
    rng = np.random.default_rng(seed)
    rand = rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    exps = np.arange(256, dtype=np.uint32) << 23
    mants = np.array([0, 1, 0x7FFFF, 0x80000, 0x80001, 0xFFFFF, 0x100000, 0x17FFFF, 0x180000, 0x180001,
                      0x1FFFFF, 0x200000, 0x400000, 0x600000, 0x700000, 0x77FFFF, 0x780000, 0x7FFFFF], np.uint32)
    mants = (mants[:, None] + np.arange(-2, 3, dtype=np.int64)[None]).reshape(-1).clip(0, 0x7FFFFF).astype(np.uint32)
    grid = (exps[:, None] | mants[None]).reshape(-1)
    return np.concatenate([rand, grid, grid | np.uint32(0x80000000)]).view(np.float32)


def test_fp8_encoders_match_value_reference():
    x = _f32_patterns(3)
    np.testing.assert_array_equal(nm.f32_to_fp8_e4m3(x), _ref_f32_to_f8(x, 3, 7, nm.FP8_E4M3_LUT, 0x7E, 0x7F))
    np.testing.assert_array_equal(nm.f32_to_bf8_e5m2(x), _ref_f32_to_f8(x, 2, 15, nm.BF8_E5M2_LUT, 0x7B, 0x7C))


def test_fp8_e4m3_encoder_matches_torch_in_range():
    # in range torch's float8_e4m3fn cast is the same RNE (beyond it this torch saturates; the emulator's choice
    # is NaN, docs/emulator.md §Numerics)
    x = _f32_patterns(4)
    x = x[np.abs(x) < 464]
    want = torch.from_numpy(x).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    np.testing.assert_array_equal(nm.f32_to_fp8_e4m3(x), want)


# ---- minimumNumber / maximumNumber ------------------------------------------------------------------------------

def _key(x):
    bits = x.view(np.uint32).astype(np.int64)
    return np.where(bits & 0x80000000, -(bits & 0x7FFFFFFF) - 1, bits)


def _ref_minmax(a, b, greater):
    an, bn = np.isnan(a), np.isnan(b)
    r = np.where(_key(a) > _key(b) if greater else _key(a) < _key(b), a, b).view(np.uint32)
    r = np.where(an, b.view(np.uint32), np.where(bn, a.view(np.uint32), r))
    return np.where(an & bn, a.view(np.uint32) | np.uint32(0x00400000), r)


def test_min_max_num_match_order_key_reference():
    special = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF812345,
                        1, 0x80000001, 0x007FFFFF, 0x00800000, 0x3F800000, 0xBF800000, 0x7F7FFFFF], np.uint32)
    rng = np.random.default_rng(9)
    a = np.concatenate([np.repeat(special, len(special)), rng.integers(0, 2**32, 20000, dtype=np.uint64)])
    b = np.concatenate([np.tile(special, len(special)), rng.integers(0, 2**32, 20000, dtype=np.uint64)])
    a, b = a.astype(np.uint32), b.astype(np.uint32)
    b[-20000::3] = a[-20000::3] ^ np.uint32(0x80000000)       # +-x pairs
    b[-20000 + 1::3] = a[-20000 + 1::3]                       # equal pairs
    fa, fb = a.view(np.float32), b.view(np.float32)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(nm.max_num_f32(fa, fb).view(np.uint32), _ref_minmax(fa, fb, True))
        np.testing.assert_array_equal(nm.min_num_f32(fa, fb).view(np.uint32), _ref_minmax(fa, fb, False))
        s = np.float32(-0.0)
        np.testing.assert_array_equal(nm.max_num_f32(fa, s).view(np.uint32),
                                      _ref_minmax(fa, np.full_like(fa, s), True))

    ok = ~(np.isnan(fa) | np.isnan(fb))          # the NaN-free fast path (fmax/fmin + the +-0 tie rule)
    np.testing.assert_array_equal(nm.max_num_f32(fa[ok], fb[ok]).view(np.uint32), _ref_minmax(fa[ok], fb[ok], True))
    np.testing.assert_array_equal(nm.min_num_f32(fa[ok], fb[ok]).view(np.uint32), _ref_minmax(fa[ok], fb[ok], False))


# ---- VALU helpers ------------------------------------------------------------------------------------------------

def test_perm_constant_selector_matches_per_lane_path():
    rng = np.random.default_rng(11)
    s0, s1 = (rng.integers(0, 2**32, (8, 32), dtype=np.uint64).astype(np.uint32) for _ in range(2))
    sels = [0x05040100, 0x07060302, 0x0C0C0C0C, 0x0D0E0F10, 0x08090A0B] + \
        [int(x) for x in rng.integers(0, 2**32, 300, dtype=np.uint64)] + \
        [int.from_bytes(bytes(rng.integers(0, 16, 4, dtype=np.uint8)), "little") for _ in range(300)]
    for sel in sels:
        got = valu_ops.perm_b32(s0, s1, np.uint32(sel))
        want = valu_ops.perm_b32(s0, s1, np.full((8, 32), sel, np.uint32))      # the per-lane selector path
        np.testing.assert_array_equal(got, want, err_msg=hex(sel))


def test_lane_mask_pack_unpack():
    x = np.random.default_rng(12).integers(0, 2**32, 100, dtype=np.uint64).astype(np.uint32)
    bits = unpack_lanes(x)
    assert bits.shape == (100, 32) and bits.dtype == bool
    assert (bits == (((x[:, None] >> np.arange(32, dtype=np.uint32)) & 1) == 1)).all()
    np.testing.assert_array_equal(pack_lanes(bits), x)


def test_flush_f32_matches_reference():
    x = np.concatenate([np.array([0, 0x80000000, 1, 0x807FFFFF, 0x00800000, 0x80800000, 0x7F800000, 0x7FC00001],
                                 np.uint32),
                        np.random.default_rng(13).integers(0, 2**32, 5000, dtype=np.uint64).astype(np.uint32)])
    x[100:200] &= np.uint32(0x807FFFFF)                                             # denormals
    want = np.where((x & np.uint32(0x7F800000)) == 0, x & np.uint32(0x80000000), x)
    np.testing.assert_array_equal(nm.flush_f32(x), want)
    np.testing.assert_array_equal(nm.flush_f32(x.view(np.float32)).view(np.uint32), want)
    normal = x[(x & np.uint32(0x7F800000)) != 0]
    assert nm.flush_f32(normal) is normal           # no denormal: the input itself, no copy


def _rne_f32(v: Fraction) -> np.uint32:
    """Round an exact rational to f32 (RNE) by comparing the neighbours of its f64 rounding."""
    x = np.float32(float(v))
    cands = [x, np.nextafter(x, np.float32(np.inf)), np.nextafter(x, np.float32(-np.inf))]
    return min(cands, key=lambda y: (abs(Fraction(float(y)) - v), int(np.float32(y).view(np.uint32)) & 1)).view(
        np.uint32)


def test_sum_to_f32_midpoint_heavy_arrays():
    """f64_sum_to_f32 takes a whole-array TwoSum path when over 1/8 of the sums sit on f32 midpoints (bf16 WMMA
    dots), or first when the caller says midpoints are likely: the results equal the per-suspect path's and the exact
    rational rounding."""
    rng = np.random.default_rng(14)
    n = 3000
    base = rng.standard_normal(n).astype(np.float32).astype(np.float64)
    p = base + np.spacing(base.astype(np.float32)).astype(np.float64) / 2        # exact f32 midpoints
    c = np.where(rng.random(n) < 0.5, rng.choice([-1.0, 1.0], n) * 2.0 ** -80 * np.abs(p), 0.0)
    p = np.concatenate([p, rng.standard_normal(n) * 1e-39])                       # f32 subnormal range too
    c = np.concatenate([c, rng.standard_normal(n) * 1e-45])
    many = nm.f64_sum_to_f32(p + c, p, c)
    pad_p, pad_c = np.concatenate([p, np.full(100 * n, 1.2345678)]), np.concatenate([c, np.full(100 * n, 1e-3)])
    few = nm.f64_sum_to_f32(pad_p + pad_c, pad_p, pad_c)[:len(p)]               # under 1/8 candidates
    np.testing.assert_array_equal(many.view(np.uint32), few.view(np.uint32))
    likely = nm.f64_sum_to_f32(p + c, p, c, midpoints_likely=True)               # TwoSum-first (16-bit WMMA)
    np.testing.assert_array_equal(likely.view(np.uint32), few.view(np.uint32))
    np.testing.assert_array_equal(nm.f64_sum_to_f32(pad_p + pad_c, pad_p, pad_c, midpoints_likely=True)[:len(p)]
                                  .view(np.uint32), few.view(np.uint32))
    for i in rng.choice(len(p), 400, replace=False):
        assert many[i].view(np.uint32) == _rne_f32(Fraction(float(p[i])) + Fraction(float(c[i]))), i
