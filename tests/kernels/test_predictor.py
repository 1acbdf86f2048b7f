"""The block-mask predictor (issue 14; docs/numerics.md §Predictor): the gfx1201 kernels
(asm_src/gfx1201_sage_predict.hip, run on the emulator with its sanitizer on) give the SAME mask, bit for bit, as
the torch spec (sage_co.predict_block_mask(backend="torch")); bad input is refused before any kernel;
sparsity="auto" runs them."""
from __future__ import annotations

import math

import pytest
import torch

import sage_co
from sage_co import abi, launch, masks
from sage_co.sparse import exp2_mass, lane_tree, predict_block_mask


def blocky(B, S, H, D, dtype, *, seed, noise=0.3, noisy_blocks=(), scale=1.0):
    """[B, S, H, D]: every 64-token block is one random direction plus noise (self-similar), except the blocks in
    noisy_blocks (pure noise: not self-similar). Random block directions give a spread of pooled scores."""
    g = torch.Generator().manual_seed(seed)
    n = -(-S // 64)
    base = torch.randn(B, n, 1, H, D, generator=g) * 2
    x = (base.expand(B, n, 64, H, D).reshape(B, n * 64, H, D)[:, :S]
         + noise * torch.randn(B, S, H, D, generator=g))
    for blk in noisy_blocks:
        x[:, blk * 64:(blk + 1) * 64] = torch.randn(B, min(64, S - blk * 64), H, D, generator=g) * 2
    return (x * scale).to(dtype)


def both(q, k, **kw):
    """(torch spec mask, kernel mask on the emulator), and that the kernels really ran."""
    want = predict_block_mask(q, k, backend="torch", **kw)
    with launch.recording() as rec:
        got = predict_block_mask(q, k, backend="emu", **kw)
    ops = [r.symbol for r in rec]
    assert len(ops) == 2 and "pool" in ops[0] and "select" in ops[1], ops
    assert all(r.backend == "emu" for r in rec)
    return want, got


CASES = [
    # (dtype, layout, B, S_q, S_kv, H_q, H_kv, D, kwargs)
    (torch.bfloat16, "NHD", 1, 77, 333, 4, 2, 64, dict(cdf_threshold=0.9)),
    (torch.float16, "HND", 1, 333, 77, 6, 2, 96, dict(cdf_threshold=0.5)),
    (torch.bfloat16, "HND", 2, 200, 260, 2, 1, 128, dict(cdf_threshold=0.3)),
    (torch.float16, "NHD", 1, 130, 450, 3, 3, 128, dict(cdf_threshold=0.95, softmax_scale=0.3)),
    (torch.bfloat16, "NHD", 1, 128, 333, 4, 1, 64, dict(topk=0.4)),
    (torch.float16, "NHD", 1, 90, 333, 2, 2, 96, dict(topk=0.01)),
    (torch.bfloat16, "NHD", 1, 200, 200, 2, 2, 64, dict(cdf_threshold=1.0)),
    (torch.bfloat16, "HND", 1, 100, 400, 2, 1, 32, dict(cdf_threshold=0.8, simthreshd=0.9)),
    # n_kv = 71: three 32-block chunks per row, so the select kernel's three rank ranges (below / own chunk /
    # above) all run, and a tail block of 13 tokens
    (torch.bfloat16, "NHD", 1, 130, 64 * 70 + 13, 2, 1, 16, dict(cdf_threshold=0.7)),
    (torch.float16, "HND", 1, 130, 64 * 70 + 13, 2, 2, 16, dict(topk=0.2)),
]


@pytest.mark.parametrize("dtype,layout,B,S_q,S_kv,H_q,H_kv,D,kw", CASES)
def test_kernel_equals_spec(dtype, layout, B, S_q, S_kv, H_q, H_kv, D, kw):
    seed = S_q * 7 + S_kv
    q = blocky(B, S_q, H_q, D, dtype, seed=seed, noisy_blocks=(1,))
    k = blocky(B, S_kv, H_kv, D, dtype, seed=seed + 1, noisy_blocks=(2,) if S_kv > 192 else ())
    if layout == "HND":
        q, k = q.transpose(1, 2), k.transpose(1, 2)
    want, got = both(q, k, layout=layout, **kw)
    n_q, n_kv = -(-S_q // 64), -(-S_kv // 64)
    assert got.dtype == torch.bool and got.shape == (B, H_q, n_q, n_kv)
    assert torch.equal(want, got), (want.int(), got.int())
    assert want.any(-1).all()                       # every query block keeps its top-ranked key block
    if kw.get("simthreshd", 0.6) <= 0.6:
        assert want[:, :, 1].all()                  # the noisy query block keeps every key block
        if S_kv > 192:
            assert want[..., 2].all()               # the noisy key block is kept by every query block
    if kw.get("cdf_threshold") == 1.0:
        assert want.all()
    if "topk" in kw and kw.get("simthreshd", 0.6) <= 0.6:
        # rows and columns not forced by self-similarity keep exactly ceil(topk * n_kv)
        forced_cols = (want.sum((0, 1, 2)) == B * H_q * n_q)
        free = want[:, :, [i for i in range(n_q) if i != 1]]
        assert (free.sum(-1) >= math.ceil(kw["topk"] * n_kv)).all()
        assert (free.sum(-1) <= math.ceil(kw["topk"] * n_kv) + int(forced_cols.sum())).all()


def test_kernel_sparse_masks_and_threshold_order():
    """Not only the forced cases: with every block self-similar, lower thresholds give sparser masks, bitwise
    equal on the kernel and the spec; cdf_threshold is monotone."""
    q = blocky(1, 256, 2, 64, torch.bfloat16, seed=3, noise=0.05)
    k = blocky(1, 512, 2, 64, torch.bfloat16, seed=4, noise=0.05)
    dens = []
    for th in (0.2, 0.6, 0.9, 0.99):
        want, got = both(q, k, cdf_threshold=th, simthreshd=0.5)
        assert torch.equal(want, got)
        dens.append(want.float().mean().item())
    assert dens == sorted(dens) and dens[0] < 0.5, dens


def test_strided_views_are_read_in_place():
    """Heads sliced out of a bigger tensor (strides not those of a contiguous tensor) and a token-strided view."""
    big_q = blocky(1, 150, 8, 64, torch.bfloat16, seed=5)
    big_k = blocky(1, 300, 8, 64, torch.bfloat16, seed=6)
    q, k = big_q[:, :, 2:6], big_k[:, :, 1:3]
    assert not q.is_contiguous()
    want, got = both(q, k, cdf_threshold=0.7)
    assert torch.equal(want, got)
    assert torch.equal(want, predict_block_mask(q.contiguous(), k.contiguous(), backend="torch", cdf_threshold=0.7))


def test_non_finite_inputs_keep_their_rows():
    """A key block with inf makes every pooled score of its head non-finite: every row keeps every block; a NaN in
    a query block makes its row (and its similarity) NaN: that row keeps every block, the others are ranked."""
    q = blocky(1, 192, 2, 64, torch.float16, seed=7, noise=0.05)
    k = blocky(1, 256, 2, 64, torch.float16, seed=8, noise=0.05)
    qn = q.clone()
    qn[0, 70, 1, 5] = float("nan")
    want, got = both(qn, k, cdf_threshold=0.5, simthreshd=0.5)
    assert torch.equal(want, got)
    assert want[0, 1, 1].all() and not want[0, 0].all()
    ki = k.clone()
    ki[0, 3, 0, 0] = float("inf")
    want, got = both(q, ki, cdf_threshold=0.5, simthreshd=0.5)
    assert torch.equal(want, got)
    assert want[0, 0].all()


def test_spec_pieces():
    """The spec's building blocks do what docs/numerics.md §Predictor says."""
    # the channel tree is a sum (exact on integers), in the stated pairing
    v = torch.arange(128, dtype=torch.float32).expand(3, 128)
    assert torch.equal(lane_tree(v), torch.full((3,), float(127 * 128 // 2)))
    # exp2 masses: exact powers of two at integer x, monotone, within 1e-7 of 2^x, zero below the cutoff
    x = torch.tensor([0.0, -1.0, -5.0, -24.0, -32.0, -32.5, -float("inf")])
    w = exp2_mass(x, 2.0 ** 24)
    assert w.tolist() == [2 ** 24, 2 ** 23, 2 ** 19, 1, 0, 0, 0]
    xs = -torch.rand(10000, generator=torch.Generator().manual_seed(0)) * 8
    xs, _ = xs.sort()
    ws = exp2_mass(xs, 2.0 ** 24)
    assert (ws[1:] >= ws[:-1]).all()
    assert ((ws.double() / 2 ** 24 - torch.exp2(xs.double())).abs() <= 2e-7 * torch.exp2(xs.double()) + 2 ** -25).all()
    # the mass scale keeps the integer sum below 2^31
    for n in (1, 2, 3, 64, 65, 4096, 8192):
        assert n * abi.predict_mass_scale(n) <= 2 ** 31
    assert abi.predict_cdf_fixed(1e-12) == 1 and abi.predict_cdf_fixed(1.0) == 2 ** 31


@pytest.mark.parametrize("kw,match", [
    (dict(cdf_threshold=0), "cdf_threshold"), (dict(cdf_threshold=1.5), "cdf_threshold"),
    (dict(cdf_threshold=True), "cdf_threshold"), (dict(topk=0.0), "topk"), (dict(topk=True), "topk"),
    (dict(topk=2), "topk"), (dict(simthreshd=1.5), "simthreshd"), (dict(simthreshd="a"), "simthreshd"),
    (dict(backend="cuda"), "backend"), (dict(layout="BSHD"), "layout"), (dict(softmax_scale=float("nan")),
                                                                         "softmax_scale"),
])
def test_bad_arguments_are_refused(kw, match):
    q = blocky(1, 64, 2, 64, torch.bfloat16, seed=9)
    with pytest.raises((ValueError, TypeError), match=match):
        with launch.recording() as rec:
            predict_block_mask(q, q, **kw)
    assert not rec


def test_bad_tensors_are_refused():
    q = blocky(1, 64, 2, 64, torch.bfloat16, seed=10)
    with pytest.raises(TypeError, match="k"):
        predict_block_mask(q, q.half())
    with pytest.raises((ValueError, TypeError), match="q"):
        predict_block_mask(q.float(), q.float())
    with pytest.raises(ValueError, match="D|head"):
        predict_block_mask(q[..., :40], q[..., :40])
    with pytest.raises(ValueError, match="H_q|heads"):
        predict_block_mask(torch.zeros(1, 64, 3, 64, dtype=torch.bfloat16), q)


def test_too_many_key_blocks_for_the_kernel():
    """n_kv > 4096 does not fit the select kernel's LDS: a ValueError naming k before any launch (the torch
    spec has no limit)."""
    q = torch.zeros(1, 64, 1, 16, dtype=torch.bfloat16)
    k = torch.zeros(1, abi.PREDICT_MAX_KEY_BLOCKS * masks.BLOCK_KV + 1, 1, 16, dtype=torch.bfloat16)
    with launch.recording() as rec:
        with pytest.raises(ValueError, match="k: S_kv"):
            predict_block_mask(q, k, backend="emu")
    assert not rec


def test_sparsity_auto_runs_the_predictor_kernels():
    """sage_attention(sparsity="auto") launches pool + select, then prepare + attention, and equals the call with
    block_mask=<the kernel mask>."""
    q = blocky(1, 200, 2, 64, torch.bfloat16, seed=11, noise=0.05)
    k = blocky(1, 256, 1, 64, torch.bfloat16, seed=12, noise=0.05)
    v = blocky(1, 256, 1, 64, torch.bfloat16, seed=13)
    m = predict_block_mask(q, k, cdf_threshold=0.5, simthreshd=0.5, backend="emu")
    assert not m.all()
    with launch.recording() as rec:
        auto = sage_co.sage_attention(q, k, v, sparsity="auto", cdf_threshold=0.5, backend="emu", kernel="hip")
    syms = [r.symbol for r in rec]
    assert "pool" in syms[0] and "select" in syms[1] and "attention" in syms[-1], syms
    # sage_attention's predictor uses its default simthreshd (0.6): compare with that mask
    m_auto = predict_block_mask(q, k, cdf_threshold=0.5, backend="emu")
    given = sage_co.sage_attention(q, k, v, block_mask=m_auto, backend="emu", kernel="hip")
    assert torch.equal(auto.view(torch.int16), given.view(torch.int16))


@pytest.mark.parametrize("kw", [dict(topk=0.5), dict(cdf_threshold=0.6)])
def test_ties_rank_by_lower_index(kw):
    """Key blocks with identical tokens have identical pooled scores: ranked by lower index, on both paths."""
    q = blocky(1, 128, 2, 64, torch.bfloat16, seed=14, noise=0.05)
    k = blocky(1, 256, 2, 64, torch.bfloat16, seed=15, noise=0.05)
    k[:, 192:256] = k[:, 64:128]            # block 3 == block 1
    k[:, 128:192] = k[:, 0:64]              # block 2 == block 0
    _check_ties(q, k, kw)


@pytest.mark.parametrize("kw", [dict(topk=1 / 80), dict(cdf_threshold=0.4)])
def test_ties_across_chunks(kw):
    """Two identical top key blocks 40 blocks apart (1 and 41): the tie is decided in the kernel's below / above
    rank ranges, not in its own 32-block chunk. Query block 0 is a copy of key block 1, so those two lead its row
    with equal mass: topk = 1 block or cdf 0.4 keeps block 1 and not block 41."""
    k = blocky(1, 64 * 80, 2, 16, torch.bfloat16, seed=20, noise=0.05)
    k[:, 64:128] *= 3                       # a long block direction: clearly the top score of query block 0
    k[:, 64 * 41:64 * 42] = k[:, 64:128]
    q = blocky(1, 128, 2, 16, torch.bfloat16, seed=19, noise=0.05)
    q[:, :64] = k[:, 64:128]
    want, got = both(q, k, simthreshd=0.5, **kw)
    assert torch.equal(want, got)
    assert want[0, :, 0, 1].all() and not want[0, :, 0, 41].any()


def _check_ties(q, k, kw):
    want, got = both(q, k, simthreshd=0.5, **kw)
    assert torch.equal(want, got)
    # a later copy is kept only if the earlier one is
    assert (want[..., 0] | ~want[..., 2]).all() and (want[..., 1] | ~want[..., 3]).all()
    if "topk" in kw:
        assert (want.sum(-1) == 2).all() and not want[..., 2:].all()


def test_custom_op_opcheck_and_compile():
    """predict_block_mask is a torch.library custom op (fake implementation included): opcheck passes, and
    sage_attention(sparsity="auto") traces under torch.compile(fullgraph=True) with the same result as eager."""
    q = blocky(1, 100, 2, 64, torch.bfloat16, seed=16, noise=0.05)
    k = blocky(1, 150, 1, 64, torch.bfloat16, seed=17, noise=0.05)
    v = blocky(1, 150, 1, 64, torch.bfloat16, seed=18)
    torch.library.opcheck(torch.ops.sage_co.predict_block_mask.default, (q, k, "NHD", 0.125, 0.5, 0.0, 0.6, "emu"))

    def f(q, k, v):
        return sage_co.sage_attention(q, k, v, sparsity="auto", cdf_threshold=0.5, kernel="hip")
    eager = f(q, k, v)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v)
    assert torch.equal(eager.view(torch.int16), compiled.view(torch.int16))


def test_misaligned_view_is_copied_not_refused():
    """A view that does not start on a 16-byte boundary (storage offset 1 element) is copied by flat_view before
    the 8-byte loads; the mask is the same."""
    q = blocky(1, 100, 2, 32, torch.float16, seed=21, noise=0.05)
    k = blocky(1, 140, 2, 32, torch.float16, seed=22, noise=0.05)
    buf = torch.empty(q.numel() + 1, dtype=q.dtype)
    qm = buf[1:].view(q.shape).copy_(q)
    assert qm.data_ptr() % 16
    want, got = both(qm, k, cdf_threshold=0.6, simthreshd=0.5)
    assert torch.equal(want, got) and torch.equal(got, predict_block_mask(q, k, cdf_threshold=0.6, simthreshd=0.5))


CAUSAL_CASES = [
    # (S_q, S_kv, H_q, H_kv, D, kwargs): square with a tail, S_q < S_kv (offset diagonal), S_q > S_kv (leading query
    # blocks see no key: all-zero rows), n_kv = 40 (two 32-block chunks), topk and cdf 1
    (200, 200, 2, 1, 64, dict(cdf_threshold=0.7)),
    (130, 333, 2, 2, 96, dict(cdf_threshold=0.9, simthreshd=0.5)),
    (333, 77, 3, 1, 64, dict(cdf_threshold=0.5)),
    (64 * 39 + 5, 64 * 39 + 5, 2, 1, 16, dict(cdf_threshold=0.6, simthreshd=0.5)),
    (200, 260, 2, 2, 64, dict(topk=0.3, simthreshd=0.5)),
    (200, 260, 2, 1, 32, dict(cdf_threshold=1.0)),
]


@pytest.mark.parametrize("S_q,S_kv,H_q,H_kv,D,kw", CAUSAL_CASES)
def test_causal_kernel_equals_spec(S_q, S_kv, H_q, H_kv, D, kw):
    """Issue 25 item 2: is_causal masks the pooled scores causally first; kernel == spec bit for bit, no future key
    block is ever kept, every query block that sees a key keeps one, and the rows rank only what they see."""
    q = blocky(2, S_q, H_q, D, torch.bfloat16, seed=S_q + 3, noise=0.1, noisy_blocks=(1,))
    k = blocky(2, S_kv, H_kv, D, torch.bfloat16, seed=S_kv + 4, noise=0.1)
    want, got = both(q, k, is_causal=True, **kw)
    assert torch.equal(want, got), (want.int(), got.int())
    vis = masks.causal_tiles(S_q, S_kv)
    assert not (want & ~vis).any()                           # no future block
    assert torch.equal(want.any(-1), vis.any(-1).expand(want.shape[:-1]))
    if kw.get("cdf_threshold") == 1.0:
        assert torch.equal(want, vis.expand(want.shape))
    if "topk" in kw:   # every row keeps min(ceil(topk * n_kv), what it sees) among the visible blocks
        free = want[:, :, [i for i in range(want.shape[2]) if i != 1]]
        n_vis = vis.sum(-1)[[i for i in range(want.shape[2]) if i != 1]]
        assert (free.sum(-1) >= torch.clamp(n_vis, max=math.ceil(kw["topk"] * want.shape[-1]))).all()
