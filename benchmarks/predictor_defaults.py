"""Density and accuracy of the block-mask predictor's cdf_threshold on locality inputs, with an oracle mask beside
it (docs/numerics.md §Predictor has the table this prints; issue 25 item 10).

    PYTHONPATH=. python benchmarks/predictor_defaults.py [--S 2048] [--H 2] [--D 64]

Inputs (locality_blocks): 64-token blocks of self-similar tokens (each token = its block's feature + noise, mean
pairwise cosine within a block ~0.8), block features smooth in the block index (nearby blocks alike), k = q + noise,
v = smooth features + noise. For each threshold: the predicted mask's density and the rel L2 of the masked FP32
attention vs dense FP32 (sage_co.reference.attention_fp32; the mask decides the error, the kernels' quantization adds
the same ~0.035 to every row). Oracle: per query tile, the smallest set of key tiles holding cdf_threshold of the
true attention mass (the FP32 probabilities summed over the tile's rows), the best a block mask can do at that mass.
"""
from __future__ import annotations

import argparse

import torch

from sage_co import reference
from sage_co.masks import BLOCK_KV, BLOCK_Q, n_tiles
from sage_co.sparse import predict_block_mask

THRESHOLDS = (0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99)


def locality_blocks(B=1, S=2048, H=2, D=64, *, freq=0.15, scale=0.8, noise=0.5, seed=0):
    g = torch.Generator().manual_seed(seed)
    n = n_tiles(S, BLOCK_Q)
    pos = torch.arange(n, dtype=torch.float32)

    def smooth():   # [B, n, H, D]: random Fourier features of the block index
        w = torch.randn(B, 1, H, D // 2, generator=g) * freq
        ph = pos[None, :, None, None] * w
        return torch.cat([ph.cos(), ph.sin()], -1) * (2 / D) ** 0.5 * D ** 0.5

    def tokens(feat):
        x = feat.repeat_interleave(BLOCK_Q, 1)[:, :S]
        return x + noise * torch.randn(B, S, H, D, generator=g)
    q = tokens(smooth()) * scale
    k = q + noise * torch.randn(q.shape, generator=g)
    v = tokens(smooth())
    return tuple(t.to(torch.bfloat16) for t in (q, k, v))


def block_sim(x):
    """Mean pairwise cosine of the tokens within each 64-token block (the predictor's self-similarity)."""
    B, S, H, D = x.shape
    n = S // BLOCK_Q
    u = torch.nn.functional.normalize(x[:, :n * BLOCK_Q].float(), dim=-1).view(B, n, BLOCK_Q, H, D)
    s = u.sum(2)
    return ((s * s).sum(-1) / BLOCK_Q ** 2).mean().item()


def oracle_mask(q, k, cdf):
    """bool [B, H, n_q, n_kv]: per query tile the top key tiles by true mass until cdf of it is reached."""
    qf, kf = q.float().transpose(1, 2), k.float().transpose(1, 2)
    p = torch.softmax((qf @ kf.transpose(-1, -2)) * q.shape[-1] ** -0.5, -1)     # [B, H, S_q, S_kv]
    B, H, S_q, S_kv = p.shape
    nq, nk = n_tiles(S_q, BLOCK_Q), n_tiles(S_kv, BLOCK_KV)
    p = torch.nn.functional.pad(p, (0, nk * BLOCK_KV - S_kv, 0, nq * BLOCK_Q - S_q))
    mass = p.view(B, H, nq, BLOCK_Q, nk, BLOCK_KV).sum((3, 5))
    mass = mass / mass.sum(-1, keepdim=True)
    val, order = mass.sort(-1, descending=True)
    keep = (val.cumsum(-1) - val) < cdf
    return torch.zeros_like(keep).scatter(-1, order, keep)


def rel_l2(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def table(S=2048, H=2, D=64):
    q, k, v = locality_blocks(S=S, H=H, D=D)
    dense = reference.attention_fp32(q, k, v)
    rows = []
    for th in THRESHOLDS:
        m = predict_block_mask(q, k, cdf_threshold=th, backend="torch")
        o = oracle_mask(q, k, th)
        rows.append((th, m.float().mean().item(), rel_l2(reference.attention_fp32(q, k, v, block_mask=m), dense),
                     o.float().mean().item(), rel_l2(reference.attention_fp32(q, k, v, block_mask=o), dense)))
    return block_sim(q), rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--S", type=int, default=2048)
    ap.add_argument("--H", type=int, default=2)
    ap.add_argument("--D", type=int, default=64)
    a = ap.parse_args()
    sim, rows = table(a.S, a.H, a.D)
    print(f"locality_blocks S={a.S} H={a.H} D={a.D}: mean in-block cosine {sim:.2f}")
    print("| cdf_threshold | predicted density | rel L2 vs dense FP32 | oracle density | oracle rel L2 |")
    print("|---|---|---|---|---|")
    for th, d, e, od, oe in rows:
        print(f"| {th} | {100 * d:.0f} % | {e:.3f} | {100 * od:.0f} % | {oe:.3f} |")


if __name__ == "__main__":
    main()
