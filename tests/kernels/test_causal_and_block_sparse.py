"""Issue 14: causal, block-sparse and varlen attention on one mechanism (a per-query-tile LUT of active key tiles,
sage_co.masks), in both attention kernels on the emulator.

Bounds: the asm and HIP kernels are bitwise equal (same per-row arithmetic, only the schedule differs); against the
arithmetic model (sage_co.reference.sage_attention_model with the same mask) the bound of test_attention_kernel
(MODEL_REL_L2); against the masked FP32 reference the accuracy contract (sage_co.accuracy) over the rows that see at
least one key. Rows that see no key are exactly zero with LSE -inf (docs/numerics.md §Masks)."""
from __future__ import annotations

import math

import pytest
import torch

import sage_co
from sage_co import accuracy, masks, reference
from sage_co.api import sage_attention_fwd
from sage_co.sparse import predict_block_mask, radial_mask, sliding_tile_mask
from attention_cases import (KERNELS, MODEL_REL_L2, bits, make_inputs,  # the shared attention cases and checks
                             rel_l2, run_both)


def _check(q, k, v, prepared, out, lse, *, is_causal=False, block_mask=None):
    """out/lse [B, S_q, H, D] / [B, H, S_q] vs the model and the masked FP32 reference."""
    mo, ml = reference.sage_attention_model(prepared, return_lse=True, is_causal=is_causal, block_mask=block_mask)
    assert rel_l2(out, mo) <= MODEL_REL_L2
    ref, ref_lse = reference.attention_fp32(q, k, v, return_lse=True, is_causal=is_causal, block_mask=block_mask)
    empty = torch.isinf(ref_lse)                                    # [B, H, S_q]: rows that see no key
    assert torch.equal(torch.isinf(lse), empty) and (lse[empty] < 0).all()
    rows_empty = empty.transpose(1, 2)                               # [B, S_q, H]
    assert (out[rows_empty] == 0).all()
    seen = ~rows_empty
    if seen.any():
        m = accuracy.metrics(out[seen][None], ref[seen][None])
        assert accuracy.within_contract(m), m
        assert (lse[~empty] - ref_lse[~empty]).abs().max().item() <= 0.02 * ref_lse[~empty].abs().clamp(min=1).max()
    return int(empty.sum())


# (B, S_q, S_kv, H_q, H_kv, D, dtype): square with a tail, S_q < S_kv, S_q > S_kv (rows with no key), D 128 fp16
CAUSAL = [(1, 100, 100, 2, 1, 64, "bf16"), (1, 40, 130, 2, 2, 64, "bf16"), (1, 130, 40, 1, 1, 128, "bf16"),
          (2, 65, 65, 1, 1, 128, "fp16")]


@pytest.mark.parametrize("case", CAUSAL, ids=[f"Sq{c[1]}-Skv{c[2]}-D{c[5]}-{c[6]}" for c in CAUSAL])
def test_causal_bottom_right_both_kernels(case):
    B, S_q, S_kv, H_q, H_kv, D, dtype = case
    q, k, v = make_inputs(B, S_q, S_kv, H_q, H_kv, D, dtype, "NHD", "randn")
    p = reference.sage_prepare(q, k, v)
    out, lse = run_both(p, is_causal=True)
    n_empty = _check(q, k, v, p, out, lse, is_causal=True)
    assert n_empty == (B * H_q * max(0, S_q - S_kv))     # rows i < S_q - S_kv see no key


def test_causal_tiles_and_lut():
    act = masks.causal_tiles(130, 40)           # off = -90: query tile 0 (rows 0..63) sees nothing
    assert act.tolist() == [[False], [True], [True]]
    a = masks.active_tiles(1, 1, 200, 200, is_causal=True)
    lut, sb, sh = masks.build_lut(a)
    rows = lut[:-3].view(4, 5)
    assert rows[:, 0].tolist() == [1, 2, 3, 4] and (sb, sh) == (0, 0)
    assert rows[3, 1:].tolist() == [0, 1, 2, 3] and rows[1, 1:3].tolist() == [0, 1]
    bm = torch.zeros(2, 3, 4, 4, dtype=torch.bool)
    bm[1, 2, 3, 2] = bm[1, 2, 3, 0] = True
    lut, sb, sh = masks.build_lut(masks.active_tiles(2, 3, 256, 256, block_mask=bm))
    row = lut[1 * sb + 2 * sh + 3 * 5:][:5]
    assert row[:3].tolist() == [2, 0, 2] and (sb, sh) == (3 * 4 * 5, 4 * 5)


# D 64, and D_pad 256 (D 200: its LUT walk with gaps steps the k_scale and V^T bases by L[t+1] - L[t])
@pytest.mark.parametrize("density,is_causal,D", [(0.1, False, 64), (0.5, True, 64), (0.9, False, 64), (0.5, False, 200)])
def test_random_block_mask_both_kernels(density, is_causal, D):
    B, S_q, S_kv, H_q, H_kv = 1, 200, 260, 2, 1
    q, k, v = make_inputs(B, S_q, S_kv, H_q, H_kv, D, "bf16", "NHD", "randn", seed=1)
    g = torch.Generator().manual_seed(int(density * 10))
    bm = torch.rand(B, H_q, 4, 5, generator=g) < density
    bm[0, 1, 2] = False                                   # a query tile with no active key tile
    p = reference.sage_prepare(q, k, v)
    out, lse = run_both(p, block_mask=bm, is_causal=is_causal)
    _check(q, k, v, p, out, lse, block_mask=bm, is_causal=is_causal)
    assert (out[0, 128:192, 1] == 0).all() and torch.isinf(lse[0, 1, 128:192]).all()


def test_all_true_mask_is_dense_bitwise():
    q, k, v = make_inputs(1, 100, 150, 2, 1, 128, "bf16", "NHD", "randn", seed=2)
    p = reference.sage_prepare(q, k, v)
    bm = torch.ones(1, 2, 2, 3, dtype=torch.bool)
    for kern in KERNELS:
        do, dl = sage_attention_fwd(p, return_lse=True, backend="emu", kernel=kern)
        so, sl = sage_attention_fwd(p, return_lse=True, backend="emu", kernel=kern, block_mask=bm)
        assert torch.equal(bits(do), bits(so)) and torch.equal(bits(dl), bits(sl))


def test_inactive_tiles_are_never_read():
    """Key tile 1 is off for every query tile; its K scales and V bytes are poisoned (NaN) and the result must not
    change at all (tiles outside the LUT are never loaded)."""
    q, k, v = make_inputs(1, 64, 192, 1, 1, 64, "bf16", "NHD", "randn", seed=3)
    p = reference.sage_prepare(q, k, v)
    bm = torch.tensor([True, False, True]).view(1, 1, 1, 3)
    clean = {kern: sage_attention_fwd(p, backend="emu", kernel=kern, block_mask=bm) for kern in KERNELS}
    p.k_scale[..., 2:4] = float("nan")
    p.v_t.view(torch.uint8)[..., 64:128] = 0x7f        # e4m3fn NaN
    for kern in KERNELS:
        assert torch.equal(bits(sage_attention_fwd(p, backend="emu", kernel=kern, block_mask=bm)), bits(clean[kern]))


def test_block_mask_is_validated():
    q, k, v = make_inputs(1, 100, 100, 2, 1, 64, "bf16", "NHD", "randn")
    with pytest.raises(ValueError, match="block_mask"):
        sage_co.sage_attention(q, k, v, block_mask=torch.ones(1, 2, 2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="block_mask"):
        sage_co.sage_attention(q, k, v, block_mask=torch.ones(1, 2, 2, 2))
    with pytest.raises(TypeError, match="is_causal"):
        sage_co.sage_attention(q, k, v, is_causal=1)
    assert (sage_co.BLOCK_Q, sage_co.BLOCK_KV) == (64, 64)


def test_api_causal_matches_op():
    q, k, v = make_inputs(1, 70, 90, 2, 1, 128, "fp16", "HND", "randn", seed=4)
    out = sage_co.sage_attention(q, k, v, layout="HND", is_causal=True, backend="emu", kernel="hip")
    ref = reference.sage_attention(q, k, v, layout="HND", is_causal=True)
    assert out.shape == q.shape and rel_l2(out, ref) <= MODEL_REL_L2


# ------------------------------------------------------------------------------------------------------- varlen
@pytest.mark.parametrize("is_causal", [False, True])
def test_varlen_packed_equals_per_sequence(is_causal):
    lq, lk = [1, 31, 100, 257], ([1, 31, 100, 257] if is_causal else [40, 7, 130, 70])
    H, D = 2, 128
    g = torch.Generator().manual_seed(5)
    q = torch.randn(sum(lq), H, D, generator=g).bfloat16()
    k = torch.randn(sum(lk), 1, D, generator=g).bfloat16()
    v = torch.randn(sum(lk), 1, D, generator=g).bfloat16()
    cq = torch.tensor([0, *torch.tensor(lq).cumsum(0).tolist()], dtype=torch.int32)
    ck = torch.tensor([0, *torch.tensor(lk).cumsum(0).tolist()], dtype=torch.int32)
    out, lse = sage_co.sage_attention_varlen(q, k, v, cq, ck, max(lq), max(lk), is_causal=is_causal,
                                             return_lse=True, backend="emu")
    assert out.shape == q.shape and lse.shape == (H, sum(lq))
    for b in range(len(lq)):
        q0, q1, k0, k1 = cq[b], cq[b + 1], ck[b], ck[b + 1]
        o, ls = sage_co.sage_attention(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], is_causal=is_causal,
                                       return_lse=True, backend="emu")
        assert torch.equal(bits(out[q0:q1]), bits(o[0])) and torch.equal(bits(lse[:, q0:q1]), bits(ls[0]))


def test_varlen_rejects_bad_cu_seqlens():
    q = torch.zeros(10, 1, 128, dtype=torch.bfloat16)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        sage_co.sage_attention_varlen(q, q, q, torch.tensor([0, 4, 9], dtype=torch.int32), cu, 6, 6)
    with pytest.raises(ValueError, match="max_seqlen"):
        sage_co.sage_attention_varlen(q, q, q, cu, cu, 5, 6)


# ------------------------------------------------------------------------------------------------------- sparse
def locality_inputs(grid=(8, 16, 16), H=2, D=64, freq=0.07, sharp=16.0, noise=0.3, seed=0):
    """Tokens on a (frames, height, width) grid with correlated neighbours: q = smooth random Fourier features of the
    position (nearby tokens alike, dot products decaying with distance), k = q + noise, v smooth + noise."""
    g = torch.Generator().manual_seed(seed)
    T, Hh, W = grid
    idx = torch.arange(T * Hh * W)
    pos = torch.stack([idx // (Hh * W), (idx // W) % Hh, idx % W], -1).float()

    def features():
        ph = pos @ (torch.randn(H, D // 2, 3, generator=g) * freq).transpose(-1, -2)
        return torch.cat([ph.cos(), ph.sin()], -1)
    q = features() * math.sqrt(sharp * 8 / D) * D ** 0.25
    k = q + noise * torch.randn(q.shape, generator=g)
    v = features() + noise * torch.randn(q.shape, generator=g)
    return tuple(t.transpose(0, 1)[None].to(torch.bfloat16) for t in (q, k, v))


def test_predicted_mask_locality_table():
    """Density vs rel L2 to dense FP32 (masked FP32 attention) for several thresholds; the issue's goal: some
    threshold reaches density <= 0.5 with rel L2 <= 0.06."""
    q, k, v = locality_inputs()
    dense = reference.attention_fp32(q, k, v)
    table = []
    for th in (0.7, 0.8, 0.9, 0.95):
        m = predict_block_mask(q, k, cdf_threshold=th)
        assert m.shape == (1, 2, 32, 32) and m.any(-1).all()
        table.append((th, m.float().mean().item(), rel_l2(reference.attention_fp32(q, k, v, block_mask=m), dense)))
    print("cdf_threshold density rel_l2", [tuple(round(x, 4) for x in r) for r in table])
    dens = [d for _, d, _ in table]
    assert dens == sorted(dens)                                  # higher threshold keeps more
    assert any(d <= 0.5 and e <= 0.06 for _, d, e in table), table
    # the kernel itself (asm, emulator) with the 0.9 mask, vs dense FP32
    out = sage_attention_fwd(reference.sage_prepare(q, k, v), block_mask=predict_block_mask(q, k, cdf_threshold=0.9),
                            backend="emu")
    err = rel_l2(out, dense)
    print("kernel, cdf_threshold 0.9: rel_l2 vs dense FP32", round(err, 4))
    assert err <= 0.06


def test_predict_block_mask_rules():
    q, k, _ = locality_inputs(grid=(2, 8, 16))
    assert predict_block_mask(q, k, cdf_threshold=1.0).all()
    assert predict_block_mask(q, k, topk=1.0).all()
    m = predict_block_mask(q, k, topk=0.25, simthreshd=-1.0)     # every block self-similar: exactly ceil(0.25 n)
    assert (m.sum(-1) == 1).all()
    # a block of unrelated tokens is not summarised by its mean: its query row keeps every key block
    qn = q.clone()
    qn[0, 64:128] = torch.randn(64, 2, 64).bfloat16() * 4
    assert predict_block_mask(qn, k, topk=0.25)[0, :, 1].all()
    with pytest.raises(ValueError, match="cdf_threshold"):
        predict_block_mask(q, k, cdf_threshold=0)


def test_sparsity_auto_runs_the_predicted_mask():
    q, k, v = locality_inputs(grid=(2, 8, 16), H=1, D=128)
    m = predict_block_mask(q, k, cdf_threshold=0.5)
    auto = sage_co.sage_attention(q, k, v, sparsity="auto", cdf_threshold=0.5, backend="emu", kernel="hip")
    given = sage_co.sage_attention(q, k, v, block_mask=m, backend="emu", kernel="hip")
    assert torch.equal(bits(auto), bits(given))
    with pytest.raises(ValueError, match="sparsity"):
        sage_co.sage_attention(q, k, v, sparsity="dense")


def test_static_patterns():
    st = sliding_tile_mask((4, 16, 16), (1, 4, 4), heads=2)
    assert st.shape == (1, 2, 16, 16) and st[0, 0].diagonal().all()
    # tiles are 4 rows of one frame: frame distance 2 is outside a 1-frame window
    assert not st[0, 0, 0, 8] and st[0, 0, 0, 4]
    assert torch.equal(st[0, 0], st[0, 0].T)
    r = radial_mask((8, 16, 16), spatial_window=16, dense_frames=1)
    assert r.shape == (1, 1, 32, 32) and r[0, 0].diagonal().all()
    # far frames keep fewer tiles than near ones (the window shrinks with temporal distance)
    assert r[0, 0, 0, 28:32].sum() < r[0, 0, 0, 8:12].sum() <= r[0, 0, 0, 4:8].sum()
    with pytest.raises(ValueError, match="window"):
        sliding_tile_mask((4, 16, 16), (1, 1))
    with pytest.raises(ValueError, match="grid"):
        radial_mask((4, 16), spatial_window=4)
