"""gfx1201 wave32 WMMA on register arrays, vectorized over waves.

The wmma_* functions take the operand registers of W waves as uint32 arrays [W, 32 lanes, nregs] and return D as
[W, 32, nregs] uint32; the *_vgpr kernels they wrap (which the executor calls) take and return the executor's VGPR
layout [nregs, W, 32]. The lane/register/byte maps, as precomputed index arrays (docs/rdna4.md §WMMA):
  8-bit A:  A[m][k] in lane 16*(k//8)+m, register (k//4)%2, byte k%4   (B[k][n]: same with n for m)
  16-bit A: A[m][k] in lane 16*((k//4)%2)+m, register 2*(k//8)+(k//2)%2, half k%2   (B: same with n)
  32-bit C/D: D[m][n] in lane 16*(m//8)+n, register m%8
  16-bit C/D: D[m][n] in lane 16*(m//8)+n, register (m//2)%4, half m%2
Within a lane, 8-bit operand byte 4*reg+byte holds k%8 and 16-bit half 2*reg+half holds the k listed above.

Arithmetic (the hardware's internal accumulation order and width are undocumented):
  * iu8: exact integer dot (f32 matmul, every partial sum < 2^24), then i32 add of C wrapping, or saturating
    with clamp.
  * fp8/bf8 -> f32: the 16 products are summed exactly, C is added, and the total is rounded once to f32 (RNE).
  * f16/bf16 -> f32/f16/bf16: float64 dot (exact when the products' exponents span <= 53 bits, which covers
    normal attention data; otherwise rounded in BLAS order), then C added and rounded once.
"""
from __future__ import annotations

import time

import numpy as np

from sage_co.emu import numerics as nm

# ---------------------------------------------------------------------------------------------------------------
# index maps (flat positions inside one wave's operand bytes / halves / dwords)

_m, _k = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")          # [row (m or n), k]
# docs/rdna4.md §WMMA: 8-bit A[m][k] in lane 16*(k//8)+m, register (k//4)%2, byte k%4 -> byte (k%8) of the lane
IDX_8BIT = ((16 * (_k // 8) + _m) * 8 + 4 * ((_k // 4) % 2) + _k % 4).reshape(-1)
# docs/rdna4.md §WMMA: 16-bit A[m][k] in lane 16*((k//4)%2)+m, register 2*(k//8)+(k//2)%2, half k%2
IDX_16BIT = ((16 * ((_k // 4) % 2) + _m) * 8 + 2 * (2 * (_k // 8) + (_k // 2) % 2) + _k % 2).reshape(-1)
_mm, _nn = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")        # [m, n]
# docs/rdna4.md §WMMA: 32-bit D[m][n] in lane 16*(m//8)+n, register m%8
IDX_D32 = ((16 * (_mm // 8) + _nn) * 8 + _mm % 8).reshape(-1)
# docs/rdna4.md §WMMA: 16-bit D[m][n] in lane 16*(m//8)+n, register (m//2)%4, half m%2
IDX_D16 = ((16 * (_mm // 8) + _nn) * 8 + 2 * ((_mm // 2) % 4) + _mm % 2).reshape(-1)
# inverse maps: position in the register array -> flat m*16+n (every slot is used exactly once)
INV_D32 = np.argsort(IDX_D32)
INV_D16 = np.argsort(IDX_D16)


def _check(name: str, x, nregs: int) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype != np.uint32 or x.ndim != 3 or x.shape[1:] != (32, nregs):
        raise ValueError(f"{name}: expected uint32 registers shaped [W, 32, {nregs}], got {x.dtype} {x.shape}")
    return np.ascontiguousarray(x)


def _gather(regs: np.ndarray, dtype, idx: np.ndarray) -> np.ndarray:
    """[W, 32, n] uint32 -> [W, 16, 16] elements of `dtype` picked by a flat index map (pack/unpack helpers)."""
    w = regs.shape[0]
    return regs.view(dtype).reshape(w, -1)[:, idx].reshape(w, 16, 16)


# The kernels work in the executor's VGPR layout: operand registers of W waves as one [nregs, W, 32] uint32 array
# (for every wave at one PC, V[r:r + nregs] itself, no copy). The public functions below take and return
# [W, 32, nregs] and convert. Reshape/transpose views stand in for the index maps above (a strided copy is several
# times faster than fancy indexing); tests check them against loop references and the index maps.
#   8-bit operand [2, W, 32]: register g, lane 16h + r, byte j holds k = 8h + 4g + j     -> bytes [g, W, h, r, j]
#   16-bit operand [4, W, 32]: register 2*k3 + k1, lane 16*k2 + r, half j holds k = 8*k3 + 4*k2 + 2*k1 + j
#                                                                               -> halves [k3, k1, W, k2, r, j]
#   32-bit C/D [8, W, 32]: register v, lane 16h + n holds D[8h + v][n]           -> slots [v, W, h, n]
#   16-bit C/D [4, W, 32]: register g, lane 16h + n, half j holds D[8h + 2g + j][n] -> slots [g, W, h, n, j]
# Numpy copies fast when the innermost axis is long: operands are brought into column form [W, k, r] (r = m for A,
# n for B; r innermost), A enters the matmul as a transposed view (BLAS takes it as is), and D = A B [W, m, n] seen as
# slots keeps n innermost, so the one pass that adds C writes the VGPR layout at memory speed.
#   8-bit (iu8, fp8/bf8): the sums are exact, so any k order shared by A and B gives the same D; the columns use
#     k' = (h, g, j) with words [W, h, g, r] moved as whole dwords first.
#   16-bit: f64 sums may round (see the module docstring), so these keep the plain k order and the BLAS call
#     D^T = B^T A^T of B's rows [W, n, k] (a transposed view of its columns) and A's columns [W, k, m] that they
#     have always used.

def _cols8(regs: np.ndarray, dtype, out_dtype) -> np.ndarray:
    """8-bit operand [2, W, 32] -> columns [W, k', r] as out_dtype, k' = 4 * (2h + g) + j (A^T for A, B for B)."""
    w = regs.shape[1]
    x = regs.view(dtype).astype(out_dtype).reshape(2, w, 2, 16, 4)           # [g, W, h, r, j]
    return np.ascontiguousarray(x.transpose(1, 2, 0, 4, 3)).reshape(w, 16, 16)


def _words(regs: np.ndarray) -> np.ndarray:
    """8-bit operand [2, W, 32] -> its dwords as [W, h, g, r] (contiguous; a dword is bytes j = 0..3)."""
    w = regs.shape[1]
    return np.ascontiguousarray(regs.reshape(2, w, 2, 16).transpose(1, 2, 0, 3))


def _cols16(halves: np.ndarray) -> np.ndarray:
    """16-bit operand halves [4, W, 64] -> columns [W, k, r]."""
    w = halves.shape[1]
    return halves.reshape(2, 2, w, 2, 16, 2).transpose(2, 0, 3, 1, 5, 4).reshape(w, 16, 16)


def _slots32(d: np.ndarray) -> np.ndarray:
    """D [W, m, n] -> 32-bit slot view [v, W, h, n] (m = 8h + v)."""
    return d.reshape(d.shape[0], 2, 8, 16).transpose(2, 0, 1, 3)


def _slots32_t(dt: np.ndarray) -> np.ndarray:
    """D^T [W, n, m] -> 32-bit slot view [v, W, h, n] (m = 8h + v)."""
    return dt.reshape(dt.shape[0], 16, 2, 8).transpose(3, 0, 2, 1)


def _slots16(dt: np.ndarray) -> np.ndarray:
    """D^T [W, n, m] -> 16-bit slot view [g, W, h, n, j] (m = 8h + 2g + j)."""
    return dt.reshape(dt.shape[0], 16, 2, 4, 2).transpose(3, 0, 2, 1, 4)


def _c_slots32(c: np.ndarray) -> np.ndarray:
    """C registers [8, W, 32] -> slots [v, W, h, n] (a view)."""
    return c.reshape(8, c.shape[1], 2, 16)


# ---------------------------------------------------------------------------------------------------------------
# exact summation helpers

def _two_sum(a, b):
    s = a + b
    bv = s - a
    return s, (a - (s - bv)) + (b - bv)


def _vecsum_to_f32(terms: list[np.ndarray]) -> np.ndarray:
    """Correctly rounded (RNE) float32 of the exact sum of a few finite float64 arrays (slow, general).

    Repeated VecSum sweeps (error-free TwoSum cascades, Ogita-Rump-Oishi) keep the sum exact and push it into the
    top term until the lower terms no longer overlap it; the top term is then a faithful f64 rounding and the
    float sum of the rest carries the exact sign of the residual (zero only when it is zero), which is all the
    round-to-odd step needs. One sweep per term plus one is enough for the 3 terms used here.
    """
    p = list(terms)
    for _ in range(len(p) + 1):
        for i in range(1, len(p)):
            p[i], p[i - 1] = _two_sum(p[i], p[i - 1])
    rest = p[0]
    for q in p[1:-1]:
        rest = rest + q
    return nm.round_odd_f64_to_f32(p[-1], rest)


def _sum_to_f32(terms: list[np.ndarray], c: np.ndarray, midpoints_likely: bool = False) -> np.ndarray:
    """RNE float32 of the exact sum of 1 or 2 float64 arrays (exact dots, any layout) and c (f32 or f64 C slots),
    in c's shape, C-contiguous. midpoints_likely: see numerics.f64_sum_to_f32 (16-bit dots)."""
    with np.errstate(all="ignore"):
        if len(terms) == 1:
            s = np.add(terms[0], c, out=np.empty(c.shape, np.float64))
            return nm.f64_sum_to_f32(s, terms[0], c, midpoints_likely)
        x, y = (np.ascontiguousarray(t) for t in terms)
        s, e = _two_sum(x, y)
        out = nm.sum_f64_to_f32(s, c.astype(np.float64))
        hard = np.flatnonzero((e != 0) & np.isfinite(e))      # x + y not exact in f64: rare, do it the slow way
        if hard.size:
            flat = out.reshape(-1)
            where = np.unravel_index(hard, out.shape)
            flat[hard] = _vecsum_to_f32([x[where], y[where], c[where].astype(np.float64)])
        return out


def _c_f32(c: np.ndarray, neg: bool = False, abs_: bool = False) -> np.ndarray:
    """C registers [8, W, 32] -> slots [v, W, h, n]: float32 (a view) without modifiers, else float64 with the
    neg/abs modifiers applied."""
    cf = _c_slots32(c.view(np.float32))
    if not (neg or abs_):
        return cf
    cf = cf.astype(np.float64)
    if abs_:
        cf = np.abs(cf)
    return -cf if neg else cf


# ---------------------------------------------------------------------------------------------------------------
# integer WMMA

def iu8_vgpr(a, b, c, a_signed: bool, b_signed: bool, clamp: bool = False) -> np.ndarray:
    """v_wmma_i32_16x16x16_iu8 on [2, W, 32], [2, W, 32], [8, W, 32] uint32 (VGPR layout) -> D [8, W, 32].
    docs/rdna4.md §WMMA: neg_lo[0]/[1] select signed A/B; clamp saturates the i32 result instead of wrapping.
    Exact: |products| <= 2^16 and |16-term sums| <= 2^20 < 2^24, so the f32 matmul makes no rounding."""
    w = a.shape[1]
    at = _cols8(a, np.int8 if a_signed else np.uint8, np.float32)            # A^T [W, k', m]
    bk = _cols8(b, np.int8 if b_signed else np.uint8, np.float32)            # B [W, k', n]
    dot = _slots32(np.matmul(at.transpose(0, 2, 1), bk).astype(np.int32))
    cs = _c_slots32(c.view(np.int32))
    if clamp:
        total = np.clip(dot.astype(np.int64) + cs, -2**31, 2**31 - 1).astype(np.int32)
    else:
        total = np.add(dot, cs, out=np.empty((8, w, 2, 16), np.int32))       # int32 add wraps modulo 2^32
    return total.view(np.uint32).reshape(8, w, 32)


# ---------------------------------------------------------------------------------------------------------------
# fp8 / bf8 WMMA

def _pair_lut(lut: np.ndarray) -> np.ndarray:
    """256-entry f32 decode table -> 65536-entry table of f32 pairs (one uint16 = two adjacent bytes -> two f32),
    viewed as complex64 so np.take moves both values at once (numpy's take with uint8 indices is slow); the f32
    table (512 KiB) stays in cache better than an f64 one, and the cast to f64 after is one fast pass."""
    lo = np.tile(lut, 256).astype(np.float32)
    hi = np.repeat(lut, 256).astype(np.float32)
    return np.stack([lo, hi], axis=1).reshape(-1).view(np.complex64)


_PAIR_FP8 = _pair_lut(nm.FP8_E4M3_LUT)
_PAIR_BF8 = _pair_lut(nm.BF8_E5M2_LUT)


def _decode_f8(regs: np.ndarray, bf8: bool) -> np.ndarray:
    """[2, W, 32] fp8/bf8 registers -> float64 (exact) columns [W, k', r], k' = 4 * (2h + g) + j (as _cols8).
    The bytes are transposed while still bytes; adjacent pairs (r, r + 1) then decode in one take."""
    w = regs.shape[1]
    codes = np.ascontiguousarray(_words(regs).view(np.uint8).reshape(w, 4, 16, 4).transpose(0, 1, 3, 2))
    pairs = np.take(_PAIR_BF8 if bf8 else _PAIR_FP8, codes.view(np.uint16))
    return pairs.view(np.float32).astype(np.float64).reshape(w, 16, 16)


# Split point for exact bf8 sums: bf8 values >= 2^-4 are multiples of 2^-6, smaller ones multiples of 2^-16.
_BF8_SPLIT = 2.0 ** -4


def _split(x: np.ndarray):
    big = np.abs(x) >= _BF8_SPLIT
    return np.where(big, x, 0.0), np.where(big, 0.0, x)


def _dot_terms_f8(at: np.ndarray, a_bf8: bool, bk: np.ndarray, b_bf8: bool) -> list[np.ndarray]:
    """The exact dot as D [W, m, n] f64 arrays whose sum is exactly sum_k A[m,k] B[k,n] (at: A^T [W, k', m],
    bk: B [W, k', n]).

    Exponent-span argument (each partial sum of a matmul must be exact whatever BLAS's order):
      fp8 x fp8: e4m3 values are multiples of 2^-9 with |v| <= 448 < 2^9, so products are multiples of 2^-18 and
        |sum of 16| < 2^4 * 2^18 = 2^22: every partial sum fits 40 bits -> one f64 matmul is exact.
      fp8 x bf8: bf8 spans 2^-16..57344 (< 2^16); split bf8 at 2^-4: the part >= 2^-4 (multiples of 2^-6) times
        fp8 gives multiples of 2^-15 below 2^4 * 2^9 * 2^16 = 2^29 (44 bits); the small part (< 2^-4, multiples
        of 2^-16) gives multiples of 2^-25 below 2^4 * 2^9 * 2^-4 = 2^9 (34 bits). Two exact matmuls.
      bf8 x bf8: hi*hi: multiples of 2^-12 below 2^4 * 2^32 = 2^36 (48 bits); the cross and lo*lo products, summed
        as one K=48 matmul, are multiples of 2^-32 below 48 * 2^16 * 2^-4 < 2^18 (50 bits). Two exact matmuls.
    """
    mm = lambda x, y: np.matmul(x.transpose(0, 2, 1), y)                     # A^T as A, times B
    if not a_bf8 and not b_bf8:
        return [mm(at, bk)]
    if a_bf8 and b_bf8:
        ahi, alo = _split(at)
        bhi, blo = _split(bk)
        cross = mm(np.concatenate([ahi, alo, alo], axis=1), np.concatenate([blo, bhi, blo], axis=1))
        return [mm(ahi, bhi), cross]
    if a_bf8:
        ahi, alo = _split(at)
        return [mm(ahi, bk), mm(alo, bk)]
    bhi, blo = _split(bk)
    return [mm(at, bhi), mm(at, blo)]


def f8_vgpr(a, b, c, a_bf8: bool, b_bf8: bool, neg_c: bool = False, abs_c: bool = False) -> np.ndarray:
    """v_wmma_f32_16x16x16_{fp8,bf8}_{fp8,bf8} on [2, W, 32], [2, W, 32], [8, W, 32] uint32 (VGPR layout) -> D
    [8, W, 32]: the 16 products summed exactly, C added, one RNE rounding to f32 (hardware internal order/width
    undocumented). neg_c/abs_c: neg_lo[2]/neg_hi[2], which LLVM accepts on C only (docs/rdna4.md §WMMA)."""
    w = a.shape[1]
    # docs/rdna4.md §FP8: WMMA fp8 operands are OCP e4m3 (fp8) / e5m2 (bf8), decoded exactly
    at, bk = _decode_f8(a, a_bf8), _decode_f8(b, b_bf8)
    with np.errstate(all="ignore"):
        terms = [_slots32(t) for t in _dot_terms_f8(at, a_bf8, bk, b_bf8)]
        return _sum_to_f32(terms, _c_f32(c, neg_c, abs_c)).view(np.uint32).reshape(8, w, 32)


# ---------------------------------------------------------------------------------------------------------------
# f16 / bf16 WMMA

def _neg16(regs: np.ndarray, neg_lo: bool, neg_hi: bool) -> np.ndarray:
    # docs/rdna4.md §WMMA: f16/bf16 neg_lo[i]/neg_hi[i] negate the low/high 16-bit halves of src i
    mask = (0x8000 if neg_lo else 0) | (0x80000000 if neg_hi else 0)
    return regs ^ np.uint32(mask) if mask else regs


def _f16_to_f64(h: np.ndarray, bf16: bool) -> np.ndarray:
    return (nm.bf16_to_f32(h) if bf16 else h.view(np.float16)).astype(np.float64)


def _dot16(a, b, bf16: bool, neg_lo, neg_hi) -> np.ndarray:
    """D^T [W, n, m] as a float64 matmul of the decoded 16-bit operands ([4, W, 32] registers)."""
    w = a.shape[1]
    at = _f16_to_f64(_cols16(_neg16(a, neg_lo[0], neg_hi[0]).view(np.uint16).reshape(4, w, 64)), bf16)
    # B's rows [W, n, k] as the transposed view of its columns (a fast copy; BLAS takes the view as it is, and gives
    # the same sums bit for bit as from a row copy, checked on operands whose f64 sums round)
    bt = _f16_to_f64(_cols16(_neg16(b, neg_lo[1], neg_hi[1]).view(np.uint16).reshape(4, w, 64)), bf16)
    with np.errstate(all="ignore"):
        return np.matmul(bt.transpose(0, 2, 1), at)


def f32_16bit_vgpr(a, b, c, bf16: bool, neg_lo=(0, 0, 0), neg_hi=(0, 0, 0)) -> np.ndarray:
    """v_wmma_f32_16x16x16_{f16,bf16} on [4, W, 32], [4, W, 32], [8, W, 32] uint32 (VGPR layout) -> D [8, W, 32].
    f64 dot (exact unless the products span more than 53 bits), then + C rounded once to f32."""
    w = a.shape[1]
    dot = np.ascontiguousarray(_slots32_t(_dot16(a, b, bf16, neg_lo, neg_hi)))   # the sum passes run contiguous
    cf = _c_f32(c, neg_lo[2], neg_hi[2])                   # C: neg_lo = negate, neg_hi = abs (AMC README)
    if not bf16 and nm.HARDWARE_LIKE["f16_wmma_two_roundings"]:
        # the other accumulation order (sage-co selftest --rehearse): the products' sum rounded to f32 first,
        # then C added with a second rounding
        dot = dot.astype(np.float32).astype(np.float64)
    return _sum_to_f32([dot], cf, midpoints_likely=True).view(np.uint32).reshape(8, w, 32)


def _sum_to_16bit(dot: np.ndarray, cf: np.ndarray, bf16: bool) -> np.ndarray:
    """RNE of dot + cf to f16/bf16 bits: TwoSum, round-to-odd at 53 then at 24 bits (round-to-odd composes),
    then one RNE to the 16-bit format (24 >= 11 + 2 and 8 + 2)."""
    with np.errstate(all="ignore"):
        s, err = _two_sum(dot, cf)
        odd = nm.round_odd_f64_to_f32_odd(np.where(np.isfinite(s), nm.round_odd_f64(s, err), s))
        return nm.f32_to_bf16(odd) if bf16 else odd.astype(np.float16).view(np.uint16)


def _c16(c: np.ndarray, bf16: bool, neg: bool, abs_: bool) -> np.ndarray:
    """16-bit C registers [4, W, 32] -> float64 slots [g, W, h, n, j] with the neg/abs modifiers applied."""
    h = c.view(np.uint16).reshape(4, c.shape[1], 2, 16, 2)
    h = (h & np.uint16(0x7FFF)) if abs_ else h
    h = (h ^ np.uint16(0x8000)) if neg else h
    return _f16_to_f64(h, bf16)


def f16_16bit_vgpr(a, b, c, bf16: bool, neg_lo=(0, 0, 0), neg_hi=(0, 0, 0)) -> np.ndarray:
    """v_wmma_f16_16x16x16_f16 / v_wmma_bf16_16x16x16_bf16 on [4, W, 32] x3 uint32 (VGPR layout) -> D [4, W, 32]:
    c/D are packed 16-bit rows (docs/rdna4.md §WMMA). f64 dot + C, then one RNE rounding to f16/bf16."""
    w = a.shape[1]
    dot = _slots16(_dot16(a, b, bf16, neg_lo, neg_hi))
    d = _sum_to_16bit(dot, _c16(c, bf16, neg_lo[2], neg_hi[2]), bf16)
    return np.ascontiguousarray(d).view(np.uint32).reshape(4, w, 32)


# ---------------------------------------------------------------------------------------------------------------
# the instructions on [W, 32, nregs] registers (tests, tools): convert to the VGPR layout and back

def _vgpr(name: str, x, nregs: int) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(_check(name, x, nregs), 2, 0))


def _lanes(d: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(d, 0, 2))


def wmma_i32_16x16x16_iu8(a, b, c, a_signed: bool, b_signed: bool, clamp: bool = False) -> np.ndarray:
    """v_wmma_i32_16x16x16_iu8. a, b: [W,32,2]; c: [W,32,8] -> D [W,32,8] (see iu8_vgpr)."""
    a, b, c = _vgpr("a", a, 2), _vgpr("b", b, 2), _vgpr("c", c, 8)
    return _lanes(iu8_vgpr(a, b, c, a_signed, b_signed, clamp))


def _wmma_f32_f8(a, b, c, a_bf8: bool, b_bf8: bool, neg_c: bool = False, abs_c: bool = False) -> np.ndarray:
    a, b, c = _vgpr("a", a, 2), _vgpr("b", b, 2), _vgpr("c", c, 8)
    return _lanes(f8_vgpr(a, b, c, a_bf8, b_bf8, neg_c, abs_c))


def wmma_f32_16x16x16_fp8_fp8(a, b, c, neg_c: bool = False, abs_c: bool = False) -> np.ndarray:
    """v_wmma_f32_16x16x16_fp8_fp8: D = A(e4m3) @ B(e4m3) + C, sum exact then one RNE rounding to f32
    (hardware internal order/width undocumented). neg_c/abs_c: neg_lo[2]/neg_hi[2], which LLVM accepts on C only
    (docs/rdna4.md §WMMA)."""
    return _wmma_f32_f8(a, b, c, False, False, neg_c, abs_c)


def wmma_f32_16x16x16_fp8_bf8(a, b, c, neg_c: bool = False, abs_c: bool = False) -> np.ndarray:
    """v_wmma_f32_16x16x16_fp8_bf8: A e4m3, B e5m2; sum exact then one rounding."""
    return _wmma_f32_f8(a, b, c, False, True, neg_c, abs_c)


def wmma_f32_16x16x16_bf8_fp8(a, b, c, neg_c: bool = False, abs_c: bool = False) -> np.ndarray:
    """v_wmma_f32_16x16x16_bf8_fp8: A e5m2, B e4m3; sum exact then one rounding."""
    return _wmma_f32_f8(a, b, c, True, False, neg_c, abs_c)


def wmma_f32_16x16x16_bf8_bf8(a, b, c, neg_c: bool = False, abs_c: bool = False) -> np.ndarray:
    """v_wmma_f32_16x16x16_bf8_bf8: A, B e5m2; sum exact then one rounding."""
    return _wmma_f32_f8(a, b, c, True, True, neg_c, abs_c)


def wmma_f32_16x16x16_f16(a, b, c, neg_lo=(0, 0, 0), neg_hi=(0, 0, 0)) -> np.ndarray:
    """v_wmma_f32_16x16x16_f16: a, b [W,32,4] f16 pairs, c [W,32,8] f32. f64 dot (exact unless the products span
    more than 53 bits), then + C rounded once to f32; hardware internal order/width undocumented."""
    a, b, c = _vgpr("a", a, 4), _vgpr("b", b, 4), _vgpr("c", c, 8)
    return _lanes(f32_16bit_vgpr(a, b, c, False, neg_lo, neg_hi))


def wmma_f32_16x16x16_bf16(a, b, c, neg_lo=(0, 0, 0), neg_hi=(0, 0, 0)) -> np.ndarray:
    """v_wmma_f32_16x16x16_bf16: as the f16 form with bf16 inputs."""
    a, b, c = _vgpr("a", a, 4), _vgpr("b", b, 4), _vgpr("c", c, 8)
    return _lanes(f32_16bit_vgpr(a, b, c, True, neg_lo, neg_hi))


def wmma_f16_16x16x16_f16(a, b, c, neg_lo=(0, 0, 0), neg_hi=(0, 0, 0)) -> np.ndarray:
    """v_wmma_f16_16x16x16_f16: c/D are 4 registers of packed f16 rows (docs/rdna4.md §WMMA). f64 dot + C, then one
    RNE rounding to f16; hardware internal order/width undocumented."""
    a, b, c = _vgpr("a", a, 4), _vgpr("b", b, 4), _vgpr("c", c, 4)
    return _lanes(f16_16bit_vgpr(a, b, c, False, neg_lo, neg_hi))


def wmma_bf16_16x16x16_bf16(a, b, c, neg_lo=(0, 0, 0), neg_hi=(0, 0, 0)) -> np.ndarray:
    """v_wmma_bf16_16x16x16_bf16: c/D packed bf16 rows. f64 dot + C, one RNE rounding to bf16."""
    a, b, c = _vgpr("a", a, 4), _vgpr("b", b, 4), _vgpr("c", c, 4)
    return _lanes(f16_16bit_vgpr(a, b, c, True, neg_lo, neg_hi))


# ---------------------------------------------------------------------------------------------------------------
# packing helpers (tests, executor debugging)

def _pack(mat: np.ndarray, dtype, idx: np.ndarray, nregs: int) -> np.ndarray:
    mat = np.asarray(mat)
    if mat.ndim != 3 or mat.shape[1:] != (16, 16):
        raise ValueError(f"expected a [W, 16, 16] matrix stack, got shape {mat.shape}")
    w = mat.shape[0]
    flat = np.zeros((w, 32 * nregs * 4 // np.dtype(dtype).itemsize), dtype)
    flat[:, idx] = mat.astype(dtype).reshape(w, 256)
    return flat.view(np.uint32).reshape(w, 32, nregs)


def pack_a_8bit(a: np.ndarray) -> np.ndarray:
    """A [W,16(m),16(k)] uint8/int8 -> [W,32,2] uint32 registers."""
    return _pack(np.asarray(a).view(np.uint8) if np.asarray(a).dtype == np.int8 else a, np.uint8, IDX_8BIT, 2)


def pack_b_8bit(b: np.ndarray) -> np.ndarray:
    """B [W,16(k),16(n)] uint8/int8 -> [W,32,2] uint32 registers."""
    b = np.asarray(b)
    return pack_a_8bit(b.transpose(0, 2, 1))


def pack_a_16bit(a: np.ndarray) -> np.ndarray:
    """A [W,16(m),16(k)] of 16-bit patterns (uint16, or float16) -> [W,32,4] uint32 registers."""
    a = np.asarray(a)
    return _pack(a.view(np.uint16) if a.dtype == np.float16 else a, np.uint16, IDX_16BIT, 4)


def pack_b_16bit(b: np.ndarray) -> np.ndarray:
    """B [W,16(k),16(n)] of 16-bit patterns -> [W,32,4] uint32 registers."""
    return pack_a_16bit(np.asarray(b).transpose(0, 2, 1))


def pack_c32(c: np.ndarray) -> np.ndarray:
    """C [W,16,16] 32-bit values (float32/int32/uint32) -> [W,32,8] uint32 registers."""
    c = np.ascontiguousarray(c)
    if c.dtype.itemsize != 4:
        raise ValueError(f"pack_c32: expected a 32-bit dtype, got {c.dtype}")
    return _pack(c.view(np.uint32), np.uint32, IDX_D32, 8)


def unpack_d32(d: np.ndarray) -> np.ndarray:
    """D [W,32,8] uint32 registers -> [W,16,16] uint32 (view as float32 / int32 as needed)."""
    return _gather(_check("d", d, 8), np.uint32, IDX_D32)


def pack_c16(c: np.ndarray) -> np.ndarray:
    """C [W,16,16] of 16-bit patterns -> [W,32,4] uint32 registers."""
    c = np.asarray(c)
    return _pack(c.view(np.uint16) if c.dtype.itemsize == 2 else c, np.uint16, IDX_D16, 4)


def unpack_d16(d: np.ndarray) -> np.ndarray:
    """D [W,32,4] uint32 registers -> [W,16,16] uint16 bit patterns."""
    return _gather(_check("d", d, 4), np.uint16, IDX_D16)


# ---------------------------------------------------------------------------------------------------------------

def bench(waves=(64, 512), seconds: float = 0.5) -> dict:
    """Print and return WMMA/s (one WMMA = one wave's 16x16x16 op) for the main forms."""
    rng = np.random.default_rng(0)
    out = {}
    for w in waves:
        r8 = lambda: rng.integers(0, 2**32, size=(w, 32, 2), dtype=np.uint64).astype(np.uint32)
        c32 = rng.standard_normal((w, 32, 8)).astype(np.float32).view(np.uint32)
        a16 = rng.standard_normal((w, 32, 8)).astype(np.float16).view(np.uint32).reshape(w, 32, 4)
        forms = {
            "iu8": lambda: wmma_i32_16x16x16_iu8(a8, b8, c32, True, True),
            "fp8_fp8": lambda: wmma_f32_16x16x16_fp8_fp8(a8, b8, c32),
            "bf8_bf8": lambda: wmma_f32_16x16x16_bf8_bf8(a8, b8, c32),
            "f16": lambda: wmma_f32_16x16x16_f16(a16, a16, c32),
        }
        a8, b8 = r8(), r8()
        for name, fn in forms.items():
            fn()
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                fn()
                n += 1
            rate = n * w / (time.perf_counter() - t0)
            out[(name, w)] = rate
            print(f"wmma {name:8s} W={w:4d}: {rate / 1e6:6.2f} M WMMA/s")
    return out


if __name__ == "__main__":
    bench()
