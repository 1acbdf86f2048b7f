"""The prepare kernels (asm_src/gfx1201_sage_prepare.hip) on the emulator through sage_co.ops.prepare.sage_prepare,
checked against sage_co.reference (docs/numerics.md §Prepare).

Bitwise: q_int8, q_scale, v_t, v_scale against reference.sage_prepare; k_int8, k_scale against
reference.quantize_k of the reference's normed/roped K with the KERNEL's k_mean (the spec leaves the mean's
summation order open, and fixes the quantization given k_mean). Scales compare as bit patterns, NaN == NaN
(any NaN payload is allowed, docs/numerics.md §Non-finite).

k_mean: the kernel sums per 32-token tile and chunk, torch.mean in its own order. Any order of n fp32 additions is
within (n - 1) * 2^-24 * sum|k| of the exact sum (first-order bound of recursive/pairwise summation), so two
orders differ by at most 2 * (n - 1) * 2^-24 * mean|k| per channel, plus one rounding of the division by S on
each side.

Every run allocates its outputs through an allocator that fills them with garbage, so the padded rows/columns and
every scale must actually be written by the kernels.
"""
from __future__ import annotations

import bisect
import functools
import math
import pytest
import torch

from sage_co import reference
from sage_co.ops import prepare as prepare_mod
from sage_co.api import sage_prepare
from sage_co.ops.prepare import chunking
from sage_co.prepared import SagePrepared, s_pad

BF16_MAX = torch.finfo(torch.bfloat16).max
U = 2.0 ** -24


@pytest.fixture(autouse=True)
def garbage_outputs(monkeypatch):
    """Outputs come from torch.empty in sage_prepare; make 'empty' memory visibly non-zero (0xA5 bytes: int8 -91,
    fp8 -0.40625 (0xA5), fp32 -2.9e-16) so an unwritten byte fails the bitwise comparison."""
    def alloc(*shape, dtype, device):
        t = torch.empty(*shape, dtype=dtype, device=device)
        t.view(torch.uint8).fill_(0xA5)
        return t
    monkeypatch.setattr(prepare_mod, "alloc", alloc)


# --------------------------------------------------------------------------------------------------- helpers
def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _qkv(B, S, H, seed=0, scale=(1.0, 1.0, 1.0), offset=(0.0, 0.0, 0.0), D=128, dtype=torch.bfloat16, S_kv=None,
         H_kv=None):
    """q [B, S, H, D], k/v [B, S_kv, H_kv, D] (defaults: S, H)."""
    g = _gen(seed)
    S_kv, H_kv = S_kv or S, H_kv or H
    shapes = ((B, S, H, D), (B, S_kv, H_kv, D), (B, S_kv, H_kv, D))
    return tuple((torch.randn(*sh, generator=g) * s + o).to(dtype) for sh, s, o in zip(shapes, scale, offset))


def _norm_rope(S, rope_dim=None, norm=False, seed=1, D=128, dtype=torch.bfloat16):
    g = _gen(seed)
    kw = {}
    if norm:
        kw["q_norm_weight"] = (torch.rand(D, generator=g) * 1.5 + 0.25).to(dtype)
        kw["k_norm_weight"] = (torch.rand(D, generator=g) * 1.5 + 0.25).to(dtype)
    if rope_dim:
        inv_freq = 10000.0 ** (-torch.arange(0, rope_dim // 2, dtype=torch.float64) * 2 / rope_dim)
        ang = torch.arange(S, dtype=torch.float64)[:, None] * torch.cat([inv_freq, inv_freq])[None]
        kw["cos"], kw["sin"] = ang.cos().to(dtype), ang.sin().to(dtype)
    return kw


def _same_bits(name, a: torch.Tensor, b: torch.Tensor):
    assert a.shape == b.shape and a.dtype == b.dtype, (name, a.shape, b.shape, a.dtype, b.dtype)
    if a.dtype == torch.float32:
        an, bn = torch.isnan(a), torch.isnan(b)
        assert torch.equal(an, bn), f"{name}: NaN positions differ ({(an != bn).sum().item()} elements)"
        a, b = a.masked_fill(an, 0).view(torch.int32), b.masked_fill(bn, 0).view(torch.int32)
    else:
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    diff = a != b
    if diff.any():
        idx = diff.nonzero()[0].tolist()
        raise AssertionError(f"{name}: {diff.sum().item()} of {diff.numel()} elements differ, first at {idx}: "
                             f"kernel {a[tuple(idx)].item()} reference {b[tuple(idx)].item()}")


def check(q, k, v, softmax_scale=None, *, smooth_k=False, eps=1e-6, layout="NHD", **kw) -> SagePrepared:
    """sage_prepare on the emulator vs the reference; returns the kernel's result."""
    out = sage_prepare(q, k, v, softmax_scale, smooth_k=smooth_k, eps=eps, layout=layout, backend="emu", **kw)
    ref = reference.sage_prepare(q, k, v, softmax_scale, smooth_k=smooth_k, eps=eps, layout=layout, **kw)
    assert isinstance(out, SagePrepared) and out[7:11] == ref[7:11]
    assert (out.lse_corr is None) == (ref.lse_corr is None) == (not smooth_k)   # smooth_k's LSE term (§LSE)
    for name in ("q_int8", "q_scale", "v_t", "v_scale"):
        _same_bits(name, getattr(out, name), getattr(ref, name))
    k_nhd = k if layout == "NHD" else k.transpose(1, 2)
    S = k_nhd.shape[1]
    kk = reference.norm_rope(k_nhd, kw.get("k_norm_weight"), eps, kw.get("cos"), kw.get("sin"),
                             None if kw.get("cos") is None else kw["cos"].shape[1],
                             kw.get("norm_rope_rounding", "once"))
    if smooth_k:
        kf = reference.pad_channels(kk.float(), out.k_mean.shape[-1])
        finite = torch.isfinite(ref.k_mean)
        assert torch.equal(torch.isfinite(out.k_mean), finite), "k_mean: non-finite entries differ"
        assert torch.equal(torch.isnan(out.k_mean), torch.isnan(ref.k_mean)), "k_mean: NaN entries differ"
        bound = 2 * max(S - 1, 0) * U * kf.abs().mean(dim=1) + 2 * U * ref.k_mean.abs()
        err = (out.k_mean - ref.k_mean).abs()
        assert bool((err[finite] <= bound[finite]).all()), f"k_mean: max error {err[finite].max().item()}"
        infinite = ~finite & ~torch.isnan(ref.k_mean)
        assert torch.equal(out.k_mean[infinite], ref.k_mean[infinite]), "k_mean: infinities differ"
    else:
        _same_bits("k_mean", out.k_mean, ref.k_mean)  # exact zeros
    k_int8, k_scale = reference.quantize_k(kk, out.k_mean)
    _same_bits("k_int8", out.k_int8, k_int8)
    _same_bits("k_scale", out.k_scale, k_scale)
    return out


# ------------------------------------------------------------------------------------------------ shapes
# Every S of the brief, both B, both H; smooth_k alternates so each S is seen once with it on or off. S = 2100 has
# 66 valid tiles -> 2 tiles per stats chunk, 33 chunks (the multi-tile chunk path and a short last chunk).
SHAPES = [(1, 1, 1, False), (1, 3, 1, True), (2, 1, 31, True), (1, 1, 32, False), (1, 3, 33, True),
          (2, 3, 63, False), (1, 1, 64, True), (2, 1, 65, False), (1, 3, 65, True), (1, 3, 200, False),
          (2, 1, 200, True), (1, 1, 1000, True), (2, 1, 1000, False), (1, 1, 2100, True)]


@pytest.mark.parametrize("B,H,S,smooth_k", SHAPES)
def test_shapes(B, H, S, smooth_k):
    q, k, v = _qkv(B, S, H, seed=S + 7 * B + 3 * H, offset=(0.0, 1.5, 0.0))  # K with a per-channel-ish offset
    out = check(q, k, v, smooth_k=smooth_k)
    Sp = s_pad(S)
    assert out.q_int8.shape == (B, H, Sp, 128) and out.v_t.shape == (B, H, 128, Sp)
    # the element equal to amax maps to +-127 in every block holding valid tokens (full range, spec §Q)
    nblk = -(-S // 32)
    assert bool((out.q_int8.view(B, H, Sp // 32, -1)[:, :, :nblk].abs().amax(-1) == 127).all())


def test_chunking_covers_every_tile():
    for S in (1, 31, 32, 33, 2047, 2048, 2049, 4096, 100_000, 131_072):
        per_chunk, n_chunks = chunking(S)
        tiles = -(-S // 32)
        assert n_chunks <= prepare_mod.MAX_CHUNKS and (n_chunks - 1) * per_chunk < tiles <= n_chunks * per_chunk


@pytest.mark.parametrize("scale", [0.5, -0.3, 0.0, 1e-30])
def test_softmax_scale(scale):
    q, k, v = _qkv(1, 40, 2, seed=11)
    out = check(q, k, v, scale)
    if scale == 0.0:
        assert torch.equal(out.q_scale, torch.zeros_like(out.q_scale)) and not out.q_int8.any()


# ------------------------------------------------------------------------------------------ norm and RoPE
@pytest.mark.parametrize("rope_dim", [32, 64, 96, 128])
def test_rope_only(rope_dim):
    S = 70
    q, k, v = _qkv(1, S, 2, seed=rope_dim)
    check(q, k, v, **_norm_rope(S, rope_dim))


@pytest.mark.parametrize("smooth_k", [False, True])
def test_norm_only(smooth_k):
    S = 65
    q, k, v = _qkv(2, S, 3, seed=5, scale=(3.0, 0.2, 1.0), offset=(0.0, 0.4, 0.0))
    check(q, k, v, smooth_k=smooth_k, **_norm_rope(S, norm=True))


@pytest.mark.parametrize("rope_dim,smooth_k,S,rounding", [(32, True, 33, "once"), (64, False, 100, "per_op"),
                                                    (96, True, 64, "per_op"), (128, True, 130, "once")])
def test_norm_and_rope(rope_dim, smooth_k, S, rounding):
    """Both norm_rope_rounding conventions, with smooth_k's K sums over the normed/roped rows (stats kernel)."""
    q, k, v = _qkv(1, S, 2, seed=3 * rope_dim + S, scale=(2.0, 1.0, 1.0), offset=(0.0, 0.7, 0.0))
    check(q, k, v, smooth_k=smooth_k, eps=1e-5, norm_rope_rounding=rounding, **_norm_rope(S, rope_dim, norm=True))


def test_rope_dim_given_explicitly_and_one_sided_norm():
    S = 50
    q, k, v = _qkv(1, S, 1, seed=21)
    kw = _norm_rope(S, 64, norm=True)
    del kw["k_norm_weight"]  # norm on Q only
    check(q, k, v, rope_dim=64, **kw)



# ------------------------------------------------------------------------------------------------ D_pad 256
# Head dims 129..256 (SD1.5's 160, 200, 256): the prepare kernels go through the row in two 128-channel halves
# (asm_src/gfx1201_sage_prepare.hip half_row; RMSNorm's sum streamed over both halves first, RoPE in half 0), V with
# 32 tokens per lane. Both roundings, every dtype, S and S_kv not multiples of 64, B = 2, GQA; bitwise as above.
@pytest.mark.parametrize("D,dtype,rope_dim,rounding,smooth_k,S,S_kv", [
    (160, torch.bfloat16, 128, "once", True, 70, 100),
    (160, torch.float32, 96, "per_op", True, 45, 77),
    (200, torch.bfloat16, 32, "per_op", False, 100, 33),
    (200, torch.float32, 64, "once", True, 33, 130),
    (256, torch.float16, 128, "per_op", True, 65, 31),
    (136, torch.float16, None, "once", True, 40, 90)])
def test_head_dim_256(D, dtype, rope_dim, rounding, smooth_k, S, S_kv):
    q, k, v = _qkv(2, S, 4, seed=D + S, D=D, dtype=dtype, S_kv=S_kv, H_kv=2, scale=(2.0, 1.0, 1.0),
                   offset=(0.0, 0.5, 0.0))
    out = check(q, k, v, smooth_k=smooth_k, eps=1e-5, norm_rope_rounding=rounding,
                **_norm_rope(max(S, S_kv), rope_dim, norm=True, D=D, dtype=dtype))
    assert out.q_int8.shape[-1] == 256 and out.head_dim == D
    assert not out.q_int8[..., D:].any() and not out.k_int8[..., D:].any()
    assert not out.v_t.view(torch.uint8)[:, :, D:].any() and not out.v_scale[..., D:].any()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_head_dim_256_plain_and_smooth_v(dtype):
    """D = 160 without norm/RoPE (the 16-bit and fp32 paths without the streamed norm sum), and smooth_v's V stats
    and quantization at 32 tokens per lane (v_t / v_scale bitwise given the kernel's v_mean)."""
    q, k, v = _qkv(2, 97, 2, seed=160, D=160, dtype=dtype, S_kv=70)
    check(q, k, v, smooth_k=True)
    out = sage_prepare(q, k, v, smooth_v=True, backend="emu")
    mean = reference.v_channel_mean(v)
    assert (out.v_mean - mean).abs().max() <= 2 * 70 * U * v.float().abs().amax()
    assert not out.v_mean[..., 160:].any()
    v_t, v_scale = reference.quantize_v(v, out.v_mean)
    _same_bits("v_t", out.v_t, v_t)
    _same_bits("v_scale", out.v_scale, v_scale)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_head_dim_256_non_finite_and_tiny_blocks(dtype):
    """D = 200: NaN / inf in either half of a row decide the whole block (the block max is taken over both halves
    before either is quantized), a block of tiny values takes the inv = inf path, a V channel in the second half
    with inf or NaN; every other block is finite and bitwise as the reference."""
    B, S, H, D = 2, 100, 2, 200
    q, k, v = _qkv(B, S, H, seed=7, D=D, dtype=dtype)
    nan, inf = float("nan"), float("inf")
    q[0, 5, 1, 170] = nan       # Q block (b0, h1, blk0): NaN in half 1
    q[1, 40, 0, 3] = -inf       # Q block (b1, h0, blk1): inf in half 0
    k[0, 70, 0, 190] = inf      # K block (b0, h0, blk2): inf in half 1
    k[1, 99, 1, 0] = nan        # K block (b1, h1, blk3), the partial last block
    q[1, 64:96, 1] = q[1, 64:96, 1] * 1e-40 if dtype == torch.float32 else q[1, 64:96, 1] * 0
    q[1, 70, 1, 150] = 2e-45 if dtype == torch.float32 else 1e-38   # tiny amax: 127 / amax = inf
    v[0, 3, 0, 180] = -inf      # V channel (b0, h0, 180): inf
    v[1, 50, 1, 140] = nan      # V channel (b1, h1, 140): NaN
    out = check(q, k, v)
    assert torch.isnan(out.q_scale[0, 1, 0]) and not out.q_int8[0, 1, :32].any()
    assert out.q_scale[1, 0, 1] == inf and not out.q_int8[1, 0, 32:64].any()
    assert out.k_scale[0, 0, 2] == inf and not out.k_int8[0, 0, 64:96].any()
    assert torch.isnan(out.k_scale[1, 1, 3]) and not out.k_int8[1, 1, 96:128].any()
    tiny = out.q_int8[1, 1, 64:96, :D]   # the tiny block: inv = inf, so every nonzero x is +-127
    assert set(tiny.unique().tolist()) <= {-127, 0, 127} and bool((tiny == 127).any()), tiny.unique()
    fp8 = out.v_t.view(torch.uint8)
    assert out.v_scale[0, 0, 180] == inf and fp8[0, 0, 180, 3] == 0x7F
    assert torch.isnan(out.v_scale[1, 1, 140]) and bool((fp8[1, 1, 140, :S] == 0x7F).all())
    assert not fp8[..., S:].any()

# ---------------------------------------------------------------------------------------------- special values
@pytest.mark.parametrize("smooth_k", [False, True])
def test_all_zero(smooth_k):
    B, S, H = 1, 45, 2
    z = torch.zeros(B, S, H, 128, dtype=torch.bfloat16)
    out = check(z, z, z, smooth_k=smooth_k, **_norm_rope(S, 64, norm=True))
    for name in ("q_int8", "k_int8", "v_t", "q_scale", "k_scale", "v_scale", "k_mean"):
        t = getattr(out, name)
        assert not t.view(torch.uint8).any(), f"{name} is not all zero"


def test_all_zero_norm_eps0():
    """eps = 0 and a zero row: r = 1/sqrt(0) = inf, y = 0 * inf = NaN -> NaN blocks (scale NaN, int8 0)."""
    S = 20
    z = torch.zeros(1, S, 1, 128, dtype=torch.bfloat16)
    v = _qkv(1, S, 1, seed=2)[2]
    out = check(z, z, v, eps=0.0, **_norm_rope(S, norm=True))
    assert torch.isnan(out.q_scale[..., 0]).all() and not out.q_int8.any()
    assert torch.equal(out.q_scale[..., 1], torch.zeros_like(out.q_scale[..., 1]))  # padding-only block


def test_non_finite():
    B, S, H = 2, 100, 2
    q, k, v = _qkv(B, S, H, seed=4)
    nan, inf = float("nan"), float("inf")
    q[0, 5, 1, 17] = nan        # Q block (b0, h1, blk0): NaN
    q[1, 40, 0, 3] = -inf       # Q block (b1, h0, blk1): inf
    k[0, 70, 0, 100] = inf      # K block (b0, h0, blk2): inf
    k[1, 99, 1, 0] = nan        # K block (b1, h1, blk3) is the partial last block
    v[0, 3, 0, 9] = -inf        # V channel (b0, h0, 9): inf
    v[1, 50, 1, 20] = nan       # V channel (b1, h1, 20): NaN
    out = check(q, k, v)
    assert torch.isnan(out.q_scale[0, 1, 0]) and not out.q_int8[0, 1, :32].any()
    assert out.q_scale[1, 0, 1] == inf and not out.q_int8[1, 0, 32:64].any()
    assert out.k_scale[0, 0, 2] == inf and not out.k_int8[0, 0, 64:96].any()
    assert torch.isnan(out.k_scale[1, 1, 3]) and not out.k_int8[1, 1, 96:128].any()
    assert out.q_int8[0, 1, 32:S].abs().amax() == 127  # the neighbouring blocks are untouched
    fp8 = out.v_t.view(torch.uint8)
    assert out.v_scale[0, 0, 9] == inf and fp8[0, 0, 9, 3] == 0x7F
    assert bool(((fp8[0, 0, 9, :S] & 0x7F) == 0).sum() == S - 1)  # finite * 0 = +-0
    assert torch.isnan(out.v_scale[1, 1, 20]) and bool((fp8[1, 1, 20, :S] == 0x7F).all())
    assert not fp8[..., S:].any()  # padding stays +0 even in the NaN/inf channels


def test_non_finite_smooth_k():
    """A NaN in K poisons that channel's k_mean and with it every block of the head (spec §Non-finite)."""
    B, S, H = 1, 70, 2
    q, k, v = _qkv(B, S, H, seed=8)
    k[0, 10, 1, 5] = float("nan")
    out = check(q, k, v, smooth_k=True)
    assert torch.isnan(out.k_mean[0, 1, 5]) and torch.isfinite(out.k_mean[0, 0]).all()
    assert torch.isnan(out.k_scale[0, 1, :3]).all() and not out.k_int8[0, 1].any()


@functools.lru_cache(maxsize=None)
def test_large_and_small_normal_magnitudes():
    """Magnitudes far from 1 whose scales stay normal fp32 (1e30, 1e-30): no special path of the division."""
    B, S, H = 1, 96, 2
    g = _gen(10)
    q, k, v = (torch.randn(B, S, H, 128, generator=g) for _ in range(3))
    q[0, :32] *= 1e30
    q[0, 32:64] *= 1e-30
    k[0, :64] *= 1e-25
    k[0, 64:] *= 1e32
    v[0, :, 0] *= 1e-30
    v[0, :, 1] *= 1e30
    check(*(t.to(torch.bfloat16) for t in (q, k, v)))


def test_bf16_max():
    """+-bf16 max everywhere in some blocks/heads: every nonzero int8 is +-127, every fp8 +-448 (0x7E / 0xFE)."""
    B, S, H = 1, 100, 2
    g = _gen(16)
    q, k, v = (torch.randn(B, S, H, 128, generator=g) for _ in range(3))
    q[0, 32:64] = q[0, 32:64].sign() * BF16_MAX
    k[0, 64:] = k[0, 64:].sign() * BF16_MAX
    v[0, :, 1] = v[0, :, 1].sign() * BF16_MAX
    out = check(*(t.to(torch.bfloat16) for t in (q, k, v)))
    assert bool((out.k_int8[0, 0, 64:S].abs() == 127).all())
    assert bool((out.v_t.view(torch.uint8)[0, 1, :, :S] & 0x7F == 0x7E).all())


def test_subnormal_magnitudes():
    """A block whose amax is below 127 / FLT_MAX has inv = inf: x * inf = +-inf -> +-127, 0 * inf = NaN -> 0;
    a V channel like that keeps its zeros and maps the rest to +-448 (docs/numerics.md §Q, §V). Scales are
    subnormal."""
    B, S, H = 1, 128, 2
    g = _gen(9)
    q, k, v = (torch.randn(B, S, H, 128, generator=g) for _ in range(3))
    sub = 2.0 ** -133                                     # bf16 subnormal (min normal 2^-126)
    q[0, 0:32] *= sub                                   # block 0: subnormal amax -> inv = inf
    q[0, 0:32, :, ::3] = 0.0                            # with zeros in it
    q[0, 0:32, :, 1::7] = -0.0
    q[0, 32:64] *= 1e-36                                # block 1: tiny normal amax, subnormal scale
    q[0, 96:128] *= 2.0 ** -140                         # block 3: deep subnormals
    k[0, :64] *= 1e-38                                  # amax < 127 / FLT_MAX: inv = 127 / amax overflows
    v[0, :, 0, :8] *= sub                               # V channels 0..7 of head 0: subnormal amax
    v[0, :, 0, 0] = 0.0                                 # channel 0 all zero: scale 0, fp8 0
    v[0, ::5, 0, 1] = 0.0                               # channel 1: zeros stay zeros (not 0 * inf = NaN)
    q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
    out = check(q, k, v)
    for h in range(H):  # the inv = inf path really ran for Q block 0 and the first K blocks
        assert torch.isinf(reference.fp32_div(127.0, (q[0, 0:32, h].float() * reference.q_multiplier()).abs().amax()))
        assert torch.isinf(reference.fp32_div(127.0, k[0, 0:32, h].float().abs().amax()))
    assert out.q_int8[0, 0, 0:32].abs().amax() == 127 and (out.q_int8[0, 0, 0:32, ::3] == 0).all()
    fp8 = out.v_t.view(torch.uint8)
    assert out.v_scale[0, 0, 0] == 0 and not fp8[0, 0, 0].any()
    ch1, v1 = fp8[0, 0, 1, :S], v[0, :, 0, 1]
    assert torch.isinf(reference.fp32_div(448.0, v1.float().abs().amax()))  # the tiny-amax case really ran
    assert bool((ch1[v1 == 0] & 0x7F == 0).all()) and bool((ch1[v1 != 0] & 0x7F == 0x7E).all())  # no NaN


def test_smooth_k_subnormal_mean():
    S = 96
    q, k, v = _qkv(1, S, 1, seed=12)
    k = (k.float() * 2.0 ** -130 + 2.0 ** -128).to(torch.bfloat16)  # subnormal K: k_mean subnormal, x subnormal
    check(q, k, v, smooth_k=True)


# ------------------------------------------------------------------------------------------------ host side
def test_unaligned_and_sliced_inputs():
    """Contiguous views that do not start at the beginning of their storage (e.g. q[1:])."""
    B, S, H = 3, 33, 2
    q, k, v = _qkv(B, S, H, seed=13)
    check(q[1:], k[1:], v[1:])
    big = torch.randn(S * H * 128 + 8, generator=_gen(14)).to(torch.bfloat16)
    q2 = big[8:].view(1, S, H, 128)   # storage offset 16 bytes
    q3 = big[1:1 + S * H * 128].view(1, S, H, 128)  # 2 bytes: not 16-byte aligned
    check(q2, q3, q2)


@pytest.mark.parametrize("bad,exc,match", [
    (dict(q=torch.zeros(1, 8, 1, 128, dtype=torch.float64)), TypeError,
     "q: expected dtype torch.bfloat16 or torch.float16 or torch.float32"),
    (dict(k=torch.zeros(1, 8, 1, 128, dtype=torch.float16)), TypeError, "k: expected the dtype of q"),
    (dict(k=torch.zeros(1, 9, 1, 128, dtype=torch.bfloat16)), ValueError, "v: expected the shape of k"),
    (dict(k=torch.zeros(1, 8, 1, 64, dtype=torch.bfloat16)), ValueError, "k: expected the head dim of q"),
    (dict(q=torch.zeros(1, 8, 3, 128, dtype=torch.bfloat16), k=torch.zeros(1, 8, 2, 128, dtype=torch.bfloat16),
          v=torch.zeros(1, 8, 2, 128, dtype=torch.bfloat16)), ValueError, "k: expected a number of heads"),
    (dict(q=torch.zeros(1, 8, 1, 257, dtype=torch.bfloat16)), ValueError, "q: expected a head dim"),
    (dict(layout="BSHD"), ValueError, "layout"),
    (dict(q=torch.zeros(1, 8, 1, 256, dtype=torch.bfloat16)[..., ::2]), ValueError, "q: expected a contiguous last"),
    (dict(rope_dim=48), ValueError, "rope_dim"),
    (dict(q_norm_weight=torch.ones(64, dtype=torch.bfloat16)), ValueError, "q_norm_weight: expected shape"),
    (dict(cos=torch.ones(8, 32, dtype=torch.bfloat16)), ValueError, "sin"),
    (dict(eps=-1.0), ValueError, "eps"),
    (dict(smooth_k=1), TypeError, "smooth_k"),
])
def test_bad_arguments_fail_before_any_kernel(bad, exc, match, monkeypatch):
    launched = []
    monkeypatch.setattr(prepare_mod, "launch", lambda *a, **k: launched.append(a[0]))
    args = dict(q=torch.zeros(1, 8, 1, 128, dtype=torch.bfloat16), k=torch.zeros(1, 8, 1, 128, dtype=torch.bfloat16),
                v=torch.zeros(1, 8, 1, 128, dtype=torch.bfloat16))
    args.update(bad)
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    with pytest.raises(exc, match=match):
        sage_prepare(q, k, v, backend="emu", **args)
    assert launched == []


def test_kernel_sequence_and_geometry(monkeypatch):
    """Issue 28: one launch per call, a 1-D grid of stats items (chunks x K/V heads x B x statistics: V only
    without smooth_k, V and K with it) and then every Q, K and V tile; the RoPE variant symbol follows rope_dim, the
    _once suffix the default norm_rope_rounding. Only the launches are looked at: they are recorded, not run (what
    the kernels compute at such geometries is the rest of this file)."""
    calls = []
    monkeypatch.setattr(prepare_mod, "launch",
                        lambda sym, st, grid, block, args, backend: calls.append((sym, grid, block)))
    S = 70
    q, k, v = _qkv(2, S, 3, seed=15)
    sage_prepare(q, k, v, backend="emu", **_norm_rope(S, 96))
    sage_prepare(q, k, v, smooth_k=True, backend="emu")
    q, k, v = _qkv(2, 40, 4, seed=15, D=48, dtype=torch.float16, S_kv=100, H_kv=2)
    sage_prepare(q, k, v, backend="emu")
    tiles = 2 * (3 * 4 + 2 * 3 * 4)      # B * (H_q * S_q_pad/32 + 2 * H_kv * S_kv_pad/32)
    assert calls == [
        ("gfx1201_sage_prepare_d128_bf16_once", (3 * 3 * 2 + tiles, 1, 1), (32, 1, 1)),   # 3 chunks, RoPE 96
        ("gfx1201_sage_prepare_d128_bf16_once", (3 * 3 * 2 * 2 + tiles, 1, 1), (32, 1, 1)),      # V and K sums
        ("gfx1201_sage_prepare_d64_fp16_once", (4 * 2 * 2 + 2 * (4 * 2 + 2 * 2 * 4), 1, 1), (32, 1, 1)),
    ]


def test_every_launch_gets_fresh_zeroed_counters():
    """Issue 38: the ticket counter and, per (b, K/V head), a counter of its stats items (the last one folds the
    partials in chunk order), its fold and its K/V tiles belong to ONE launch: allocated and zeroed right before it
    (on its stream), never shared with another launch. Each launch below finds its counters all zero, in storage
    of their own, and the outputs of two calls are bitwise the same. With V, K and V-sum items (smooth_k +
    smooth_v: n_tens = 3) and several chunks per head."""
    seen = []
    real = prepare_mod.launch

    def recording(sym, st, grid, block, args, backend):
        ctr = args["counter"]
        seen.append((ctr, ctr.clone()))
        return real(sym, st, grid, block, args, backend=backend)
    q, k, v = _qkv(2, 200, 3, seed=21, offset=(0.0, 1.0, 0.5))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prepare_mod, "launch", recording)
        a = sage_prepare(q, k, v, smooth_k=True, smooth_v=True, backend="emu")
        b = sage_prepare(q, k, v, smooth_k=True, smooth_v=True, backend="emu")
    assert len(seen) == 2
    (c0, at0), (c1, at1) = seen
    assert c0.numel() == c1.numel() == 1 + 2 * 3 and not at0.any() and not at1.any()
    assert c0.data_ptr() != c1.data_ptr()           # both alive here: two buffers, not one reused
    for name in ("k_mean", "v_scale", "v_mean", "k_int8", "v_t"):
        x, y = getattr(a, name), getattr(b, name)
        assert torch.equal(x.view(torch.uint8), y.view(torch.uint8)), name


def _captured(q, k, v, mp):
    """What a HIP graph captured with default settings holds of one prepare call: its launch and the tensors bound
    into it (emulated: the launch is recorded, not run, as a capture records it)."""
    got = []
    mp.setattr(prepare_mod, "launch", lambda sym, st, grid, block, args, backend: got.append(
        (sym, st, grid, block, dict(args), backend)))
    out = sage_prepare(q, k, v, backend="emu")
    assert len(got) == 1
    return got[0], out


def test_two_graphs_and_an_aborted_launch_cannot_share_or_dirty_counters():
    """Issue 38: two graphs captured with default settings (the same capture stream: counters keyed by device and
    stream used to be ONE buffer for both) get counters of their own, disjoint in memory; graph A's replay that
    stops part-way (an aborted launch: tickets handed out, heads counted) leaves its counters dirty, and graph B's
    replay, which runs after it (or concurrently), is still bitwise the reference. An eager call after the aborted
    launch is correct too. Fails with one counter buffer per (device, stream)."""
    qa, ka, va = _qkv(2, 70, 3, seed=23)
    qb, kb, vb = _qkv(2, 70, 3, seed=24)
    real = prepare_mod.launch
    with pytest.MonkeyPatch.context() as mp:
        (sym_a, st_a, grid_a, block_a, args_a, _), _ = _captured(qa, ka, va, mp)
        (sym_b, st_b, grid_b, block_b, args_b, _), out_b = _captured(qb, kb, vb, mp)
    ca, cb = args_a["counter"], args_b["counter"]
    a0, a1 = ca.data_ptr(), ca.data_ptr() + ca.numel() * ca.element_size()
    b0, b1 = cb.data_ptr(), cb.data_ptr() + cb.numel() * cb.element_size()
    assert a1 <= b0 or b1 <= a0, "two captured launches share counter memory"
    ca[: min(5, ca.numel())] = 7                     # graph A's replay stopped part-way
    real(sym_b, st_b, grid_b, block_b, args_b, backend="emu")      # graph B's replay
    ref = reference.sage_prepare(qb, kb, vb)
    for name in ("q_int8", "q_scale", "k_int8", "k_scale", "v_t", "v_scale"):
        _same_bits(name, getattr(out_b, name), getattr(ref, name))

    def fails_part_way(sym, st, grid, block, args, backend):
        args["counter"][:5] = 7          # what a grid stopped after some work items leaves behind
        raise RuntimeError("stopped part-way")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prepare_mod, "launch", fails_part_way)
        with pytest.raises(RuntimeError, match="stopped part-way"):
            sage_prepare(qa, ka, va, backend="emu")
    check(qa, ka, va, smooth_k=True)


# ------------------------------------------------------------------------------- issue 13: the new shapes
# S_q, S_kv from {1, 31, 33, 64, 77, 333}, both orders (a sample: each length on each side at least once)
@pytest.mark.parametrize("S_q,S_kv", [(1, 333), (333, 1), (31, 77), (77, 31), (33, 64), (64, 33)])
def test_separate_lengths(S_q, S_kv):
    q, k, v = _qkv(1, S_q, 2, seed=S_q + S_kv, offset=(0.0, 1.0, 0.0), S_kv=S_kv)
    out = check(q, k, v, smooth_k=S_q < S_kv)
    assert out.q_int8.shape[2] == s_pad(S_q) and out.k_int8.shape[2] == s_pad(S_kv)
    assert out.v_t.shape[-1] == s_pad(S_kv)


# GQA ratios 1, 2, 4, 8 and MQA (H_kv = 1); K/V prepared per K/V head
@pytest.mark.parametrize("H_q,H_kv,smooth_k", [(2, 2, False), (4, 2, True), (4, 1, False), (8, 2, True),
                                               (8, 1, True)])
def test_gqa(H_q, H_kv, smooth_k):
    q, k, v = _qkv(1, 33, H_q, seed=H_q * 10 + H_kv, H_kv=H_kv, S_kv=40, offset=(0.0, 0.5, 0.0))
    out = check(q, k, v, smooth_k=smooth_k)
    assert out.k_int8.shape[1] == H_kv and out.v_t.shape[1] == H_kv and out.q_int8.shape[1] == H_q


# D in {64, 96, 128} and the padded 32, 80 (also 16, 48, 112): channels D..D_pad-1 are zero everywhere
# bf16 takes every D; fp16 (its own symbols, the same D-dependent code: D is a kernarg and each 8-channel group's
# "real" test is the same uniform select in both) a padded D and D = D_pad of each of its two D_pad symbols.
@pytest.mark.parametrize("D,dtype", [*((D, torch.bfloat16) for D in (16, 32, 48, 64, 80, 96, 112, 128)),
                                     *((D, torch.float16) for D in (32, 64, 80, 128))])
def test_head_dims_and_dtypes(D, dtype):
    S = 45
    q, k, v = _qkv(1, S, 2, seed=D, D=D, dtype=dtype, S_kv=70, offset=(0.0, 0.3, 0.0))
    out = check(q, k, v, smooth_k=D % 32 == 0)
    Dp = 64 if D <= 64 else 128
    assert out.q_int8.shape[-1] == Dp and out.head_dim == D and out.out_dtype == dtype
    assert not out.q_int8[..., D:].any() and not out.k_int8[..., D:].any()
    assert not out.v_t.view(torch.uint8)[:, :, D:].any() and not out.v_scale[..., D:].any()
    assert not out.k_mean[..., D:].any()


@pytest.mark.parametrize("D,rope_dim,smooth_k", [(128, 128, True), (128, 64, False), (96, 96, True), (80, 64, True),
                                                 (64, 64, False), (64, 32, True), (48, 32, False)])
def test_fp16_norm_and_rope(D, rope_dim, smooth_k):
    """RMSNorm + RoPE rounding like eager fp16 (docs/numerics.md §Optional RMSNorm + RoPE), bit for bit."""
    S = 50
    q, k, v = _qkv(1, S, 2, seed=D + rope_dim, D=D, dtype=torch.float16, scale=(3.0, 1.0, 1.0),
                   offset=(0.0, 0.5, 0.0))
    check(q, k, v, smooth_k=smooth_k, eps=1e-5, **_norm_rope(S, rope_dim, norm=True, D=D, dtype=torch.float16))


def test_rope_cross_lengths_and_gqa():
    """cos/sin have max(S_q, S_kv) rows; Q row i and K row j use rows i and j."""
    S_q, S_kv = 31, 77
    q, k, v = _qkv(1, S_q, 4, seed=3, S_kv=S_kv, H_kv=2, D=96)
    check(q, k, v, smooth_k=True, **_norm_rope(S_kv, 64, norm=True, D=96))


def _launch_spy(monkeypatch):
    seen = []
    real = prepare_mod.launch
    monkeypatch.setattr(prepare_mod, "launch",
                        lambda sym, st, grid, block, args, backend: seen.append(args) or
                        real(sym, st, grid, block, args, backend=backend))
    return seen


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_hnd_and_strided_views_are_read_in_place(dtype, monkeypatch):
    """HND = [B, H, S, D]: an HND view of NHD memory, a contiguous HND tensor, and q/k/v sliced out of one packed
    qkv tensor: the kernels get the caller's memory (no copy) and the strides as kernargs, and match the reference."""
    seen = _launch_spy(monkeypatch)
    B, S, H, D = 2, 37, 2, 64
    nhd = _qkv(B, S, H, seed=4, D=D, dtype=dtype)
    views = [t.transpose(1, 2) for t in nhd]                       # HND views of NHD memory
    check(*views, layout="HND", smooth_k=True)
    hnd = [t.transpose(1, 2).contiguous() for t in nhd]            # contiguous HND
    check(*hnd, layout="HND")
    packed = torch.randn(B, S, 3, H, D, generator=_gen(5)).to(dtype)  # [B, S, 3, H, D] (e.g. a fused qkv proj)
    check(packed[:, :, 0], packed[:, :, 1], packed[:, :, 2])
    for args, inputs in zip(seen, (views, hnd, [packed[:, :, i] for i in range(3)])):   # one launch per call
        for flat, t in ((args["k"], inputs[1]), (args["v"], inputs[2])):
            assert flat.data_ptr() == t.data_ptr() and flat.untyped_storage().data_ptr() == \
                t.untyped_storage().data_ptr(), "the kernel got a copy"
    assert len(seen) == 3
    quant_args = seen[2]
    assert quant_args["q"].data_ptr() == packed[:, :, 0].data_ptr()
    assert (quant_args["q_sb"], quant_args["q_ss"], quant_args["q_sh"]) == (S * 3 * H * D, 3 * H * D, D)
    hnd_quant = seen[1]
    assert (hnd_quant["k_sb"], hnd_quant["k_ss"], hnd_quant["k_sh"]) == (H * S * D, D, S * D)


def test_mixed_layouts_of_the_same_values_agree():
    q, k, v = _qkv(1, 40, 4, seed=6, D=96, S_kv=33, H_kv=2)
    a = sage_prepare(q, k, v, backend="emu")
    b = sage_prepare(*(t.transpose(1, 2).contiguous() for t in (q, k, v)), layout="HND", backend="emu")
    for name in ("q_int8", "q_scale", "k_int8", "k_scale", "v_t", "v_scale"):
        _same_bits(name, getattr(a, name), getattr(b, name))


# ----------------------------------------------------------------------------- issue 11 item 2: tiny V amax
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_tiny_v_channel_gives_no_nan(dtype):
    """A V channel whose max |v| is below 448 / FLT_MAX (~1.3e-36) has inv = 448 / amax = inf; its zeros stay
    zeros (0 * inf is not NaN here) and the other values become +-448: no 0x7F, and the attention output of
    that channel is finite (docs/numerics.md §V). fp16 cannot hold such values except as 0 plus a subnormal
    scale... so fp16 uses amax = 0 and a 2^-24 channel (inv finite) as the neighbours of the case."""
    B, S, H, D = 1, 40, 1, 64
    q, k, v = _qkv(B, S, H, seed=17, D=D, dtype=torch.float32)
    tiny = 1e-37 if dtype == torch.bfloat16 else 2.0 ** -24
    v[0, :, 0, 3] *= tiny
    v[0, ::3, 0, 3] = 0.0
    v[0, :, 0, 4] = 0.0
    q, k, v = (t.to(dtype) for t in (q, k, v))
    out = check(q, k, v)
    fp8 = out.v_t.view(torch.uint8)[0, 0, :, :S]
    assert not bool((fp8 == 0x7F).any()), "a NaN fp8 from finite V"
    assert bool((fp8[3][v[0, :, 0, 3] == 0] & 0x7F == 0).all())
    if dtype == torch.bfloat16:
        assert torch.isinf(reference.fp32_div(448.0, v[0, :, 0, 3].float().abs().amax()))
        assert bool((fp8[3][v[0, :, 0, 3] != 0] & 0x7F == 0x7E).all())
    model = reference.sage_attention_model(out)
    assert torch.isfinite(model.float()).all()


def test_tiny_v_reference_over_the_whole_range():
    """Reference, every power of two from 2^-133 to 2^-100 as a channel's amax: never NaN, v_fp8 * v_scale
    stays within one fp8 step of v where inv is finite."""
    for e in range(-133, -99):
        v = torch.zeros(1, 8, 1, 16, dtype=torch.bfloat16)
        v[0, 1::2, 0, :] = 2.0 ** e
        fp8, scale = reference.quantize_v(v)
        assert not bool((fp8.view(torch.uint8) == 0x7F).any()), e
        assert not fp8.view(torch.uint8)[..., 0:8:2].any()


def test_every_prepare_symbol_keeps_denormals_and_has_no_scratch():
    """The bitwise contract needs fp32 and fp16 denormals preserved (docs/numerics.md §Notation; the fp16 path's
    v_cvt_f16_f32) and the kernel header promises no scratch: read from each shipped descriptor."""
    from sage_co import registry
    rows = [k for k in registry.kernels() if k.op == "sage_prepare"]
    # dtype (bf16, fp16, fp32) x rounding (once, per_op) x (D_pad 256 and 128: 5 rope dims, 64: 3): a row each, the
    # statistics, their fold and the quantization in one launch (issue 28); one symbol serves every RoPE width except
    # for fp32 at D_pad >= 128 (abi.PREPARE_ROPE_IN_SYMBOL: a symbol per width)
    assert len(rows) == 3 * 2 * (5 + 5 + 3)
    assert len({k.symbol for k in rows}) == 3 * 2 * 3 + 2 * 2 * (5 - 1)
    for k in rows:
        kern = registry.load(k.file, k.sha256).kernel(k.symbol)
        f = kern.descriptor.fields
        assert f["float_denorm_mode_32"] == 3 and f["float_denorm_mode_16_64"] == 3, k.symbol
        assert kern.descriptor.private_segment_fixed_size == 0, k.symbol
        # up to the wave's 256 VGPRs, without scratch; the registers never bind occupancy before the stats items'
        # LDS does (docs/rdna4.md §Occupancy, docs/performance.md §The prepare stage): the 16-bit symbols serving
        # every RoPE width (up to 243 VGPRs: 5 waves per SIMD at D_pad 256, where the LDS allows 1.9) as before
        vgprs = kern.metadata[".vgpr_count"]
        assert vgprs <= 256, k.symbol
        by_registers = min(16, 1536 // (-(-vgprs // 24) * 24))
        by_lds = 65536 / kern.metadata[".group_segment_fixed_size"] / 2   # 64 KiB per WGP of 2 SIMDs, 1-wave groups
        assert by_registers >= by_lds, (k.symbol, vgprs, by_registers, by_lds)


# ------------------------------------------------------------------------------------------ smooth_v, pv fp16
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("D,S", [(128, 100), (64, 33), (96, 130)])
def test_smooth_v_and_pv16_every_byte(dtype, D, S):
    """Issue 19 under the garbage allocator: smooth_v's v_t / v_scale bitwise given the kernel's v_mean (v_mean
    within fp32 summation error, padded channels exactly 0); pv fp16's v_t bitwise (fp16 RNE of V, padding +0),
    v_scale all zero."""
    g = _gen(21)
    q, k = (torch.randn(1, S, 2, D, generator=g).to(dtype) for _ in range(2))
    v = (torch.randn(1, S, 2, D, generator=g) * 0.5 + 3 * torch.randn(1, 1, 2, D, generator=g)).to(dtype)
    out = sage_prepare(q, k, v, smooth_v=True, backend="emu")
    mean = reference.v_channel_mean(v)
    assert (out.v_mean - mean).abs().max() <= 2 * S * U * v.float().abs().amax()
    assert not out.v_mean[..., D:].any()
    v_t, v_scale = reference.quantize_v(v, out.v_mean)
    _same_bits("v_t", out.v_t, v_t)
    _same_bits("v_scale", out.v_scale, v_scale)
    h = sage_prepare(q, k, v, pv_dtype="fp16", smooth_k=True, backend="emu")
    _same_bits("v_t", h.v_t, reference.convert_v_fp16(v))
    _same_bits("v_scale", h.v_scale, torch.zeros_like(h.v_scale))
    ref = reference.sage_prepare(q, k, v, pv_dtype="fp16")
    _same_bits("q_int8", h.q_int8, ref.q_int8)


def test_smooth_v_non_finite_and_overflowing_v():
    """A NaN or inf in a V channel makes v_mean non-finite, so the whole channel is NaN (0x7F) with a NaN scale,
    as §Non-finite inputs says for a NaN channel. pv_dtype fp16: a finite bf16 V past 65504 is refused (issue 25
    item 6: it used to become +-inf in the fp16 V^T); NaN and inf pass through."""
    q, k, v = _qkv(1, 64, 1, seed=22)
    v = v.clone()
    v[0, 3, 0, 5] = float("nan")
    v[0, 7, 0, 9] = float("inf")
    v[0, 9, 0, 11] = 1e6
    out = sage_prepare(q, k, v, smooth_v=True, backend="emu")
    fp8 = out.v_t.view(torch.uint8)[0, 0]
    for ch in (5, 9):
        assert torch.isnan(out.v_scale[0, 0, ch]) and bool((fp8[ch, :64] == 0x7F).all())
    v_t, v_scale = reference.quantize_v(v, out.v_mean)
    _same_bits("v_t", out.v_t, v_t)
    with pytest.raises(ValueError, match="^v: pv_dtype=\"fp16\""):
        sage_prepare(q, k, v, pv_dtype="fp16", backend="emu")
    v[0, 9, 0, 11] = 0
    h = sage_prepare(q, k, v, pv_dtype="fp16", backend="emu")
    assert math.isinf(h.v_t[0, 0, 9, 7].item()) and math.isnan(h.v_t[0, 0, 5, 3].item())
    ref = reference.convert_v_fp16(v)
    finite = ~torch.isnan(ref)
    assert torch.equal(h.v_t[finite].view(torch.int16), ref[finite].view(torch.int16))


def test_one_launch_protocol_is_fenced_in_every_symbol():
    """The emulator's memory is sequentially consistent (global_inv / global_wb do nothing there), so the one-launch
    protocol's fences are checked in the shipped code (docs/rdna4.md §Atomics, §Forward progress), in every
    prepare symbol: the first instruction to touch memory's counters is the ticket (a device-scope atomic with
    return); the stats items' count (device scope, with return) follows a wait for their partial stores and
    precedes a device-scope invalidate before the fold's first load; the fold's publishing add (no return) follows
    a wait for the fold's stores; and each poll loop (the K and V tiles' wait for the fold) reads the counter at
    device scope, sleeps, and invalidates before the tile's first other load."""
    from sage_co import family, registry
    from sage_co.emu.decode import decode
    from sage_co.emu.disasm import inst_text, text_and_symbols
    rows = [k for k in registry.kernels() if k.op == "sage_prepare"]
    assert len({k.file for k in rows}) == len(family.prepare_parts())   # the prepare code objects
    # Every check below looks only at global memory instructions, s_wait_storecnt and s_sleep, and only at their
    # order: each body is the text of exactly those, in program order (the other ~95 % are never spelled out; the
    # text is a function of the bytes, so each distinct encoding is spelled once)
    relevant = ("global_", "s_wait_storecnt", "s_sleep")
    objects = {}
    for file, sha in sorted({(k.file, k.sha256) for k in rows}):
        text, _, symbols = text_and_symbols(registry.load_bytes(file, sha))
        spelled, insts = {}, []
        for i in decode(text):
            if i.name.startswith(relevant):
                key = text[i.offset:i.offset + i.size]
                t = spelled.get(key)
                if t is None:
                    t = spelled[key] = inst_text(i)
                insts.append((i.offset, t))
        objects[file] = (text, symbols, sorted(symbols), insts, [off for off, _ in insts])

    def released(body, at, sym):   # every global store before `at` has been waited for
        last_store = max(i for i, t in enumerate(body[:at]) if t.startswith("global_store"))
        assert any(t.startswith("s_wait_storecnt 0x0") for t in body[last_store:at]), f"{sym}: no release"

    def acquired(body, at, sym):   # a device-scope invalidate before the next ordinary global load
        inv = next(i for i in range(at, len(body)) if body[i].startswith("global_inv scope:SCOPE_DEV"))
        load = next(i for i in range(at, len(body)) if body[i].startswith("global_load")
                    and "scope:SCOPE_DEV" not in body[i])
        assert inv < load, f"{sym}: a load before the acquire"

    for row in {k.symbol: k for k in rows}.values():   # a symbol serving every RoPE width has a row per width
        sym = row.symbol
        text, symbols, starts, insts, offsets = objects[row.file]
        lo = next(off for off, name in symbols.items() if name == sym)
        hi = next((s for s in starts if s > lo), len(text))
        body = [t for _, t in insts[bisect.bisect_left(offsets, lo):bisect.bisect_left(offsets, hi)]]
        atomics = [i for i, t in enumerate(body) if t.startswith("global_atomic")]
        assert all("scope:SCOPE_DEV" in body[a] for a in atomics), sym
        assert "TH_ATOMIC_RETURN" in body[atomics[0]], f"{sym}: the ticket"
        publish = [a for a in atomics if "TH_ATOMIC_RETURN" not in body[a]]
        assert len(publish) == 1, f"{sym}: one publishing add (the fold)"
        released(body, publish[0], sym)
        count = max(a for a in atomics if a < publish[0] and "TH_ATOMIC_RETURN" in body[a])
        released(body, count, sym)
        acquired(body, count, sym)
        sleeps = [i for i, t in enumerate(body) if t.startswith("s_sleep")]
        assert len(sleeps) >= 1, f"{sym}: no poll loop"
        for z in sleeps:
            poll = max(i for i in range(z) if body[i].startswith("global_load"))
            assert "scope:SCOPE_DEV" in body[poll], f"{sym}: the poll reads a cached copy: {body[poll]}"
            acquired(body, z, sym)


# ----------------------------------------------------------------------------- issue 24: one workspace per call
@pytest.mark.parametrize("smooth_k", [False, True])
def test_sage_attentions_own_prepare_is_one_workspace_allocation(smooth_k, monkeypatch):
    """sage_attention's prepare never returns its buffers, so it allocates one workspace for all of them
    (ops.prepare.buffers, internal; plus k_mean with smooth_k, which the host reads for lse_corr); sage_prepare
    allocates every returned tensor and one workspace for the scratch ones (v_inv, the statistics partials). Both
    reach the kernels' bits: the whole op equals the forward on sage_prepare's result (the garbage-filled
    allocator shows every workspace byte the kernels read was written)."""
    from sage_co import api
    allocated = []
    garbage = prepare_mod.alloc

    def counting(*shape, dtype, device):
        allocated.append((shape, dtype))
        return garbage(*shape, dtype=dtype, device=device)
    monkeypatch.setattr(prepare_mod, "alloc", counting)
    q, k, v = _qkv(2, 70, 2, seed=31, D=64, S_kv=45)
    out, lse = api.sage_attention(q, k, v, smooth_k=smooth_k, return_lse=True, backend="emu")
    assert [dtype for _, dtype in allocated] == [torch.uint8] + [torch.float32] * smooth_k   # workspace (, k_mean)
    allocated.clear()
    prepared = api.sage_prepare(q, k, v, smooth_k=smooth_k, backend="emu")
    assert len(allocated) == 7 + 1    # q_int8, k_int8, q_scale, k_scale, k_mean, v_scale, v_t + the workspace
    ref_out, ref_lse = api.sage_attention_fwd(prepared, return_lse=True, backend="emu")
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
