"""Packed (varlen) batches shared by tests/kernels/test_varlen_packed.py: lengths, packed inputs, and a PackedPrepared
assembled on
the host from per-sequence reference prepares (the layout of docs/numerics.md §Varlen, built here independently of
the packed prepare kernels, so the attention kernels' varlen path is tested on its own)."""
from __future__ import annotations

import torch

from sage_co import abi, reference
from sage_co.prepared import PackedPrepared, d_pad


def cu_of(lengths) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


def packed_inputs(lens_q, lens_kv, H_q, H_kv, D, dtype, seed=0, k_offset=False):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(lens_q), H_q, D, generator=g)
    k = torch.randn(sum(lens_kv), H_kv, D, generator=g)
    v = torch.randn(sum(lens_kv), H_kv, D, generator=g)
    if k_offset:
        k = k + 4 * torch.randn(1, H_kv, D, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype), cu_of(lens_q), cu_of(lens_kv)


def pack_prepared(q, k, v, cu_q, cu_kv, *, smooth_k=False, smooth_v=False, pv_dtype="fp8") -> PackedPrepared:
    """The packed structure from one reference sage_prepare per sequence (the host reads cu here: a test helper)."""
    B = cu_q.shape[0] - 1
    cq, ck = cu_q.tolist(), cu_kv.tolist()
    H_q, D, H_kv = q.shape[1], q.shape[2], k.shape[1]
    Dp = d_pad(D)
    R_q, R_kv = abi.packed_rows(cq[-1], B), abi.packed_rows(ck[-1], B)
    vdt = torch.float16 if pv_dtype == "fp16" else torch.float8_e4m3fn
    q_int8 = torch.zeros(H_q, R_q, Dp, dtype=torch.int8)
    q_scale = torch.zeros(H_q, R_q // 32)
    k_int8 = torch.zeros(H_kv, R_kv, Dp, dtype=torch.int8)
    k_scale = torch.zeros(H_kv, R_kv // 32)
    v_t = torch.zeros(H_kv, Dp, R_kv, dtype=vdt)
    k_mean, v_scale, v_mean = (torch.zeros(B, H_kv, Dp) for _ in range(3))
    lse_corr = torch.zeros(H_q, cq[-1]) if smooth_k else None
    for b in range(B):
        lq, lk = cq[b + 1] - cq[b], ck[b + 1] - ck[b]
        if lq == 0:
            continue
        # a sequence without keys still has its queries prepared (the kernel reads them); its K/V are all padding
        kk = k[None, ck[b]:ck[b + 1]] if lk else torch.zeros(1, 1, H_kv, D, dtype=k.dtype)
        vv = v[None, ck[b]:ck[b + 1]] if lk else torch.zeros(1, 1, H_kv, D, dtype=v.dtype)
        p = reference.sage_prepare(q[None, cq[b]:cq[b + 1]], kk, vv, smooth_k=smooth_k, smooth_v=smooth_v,
                                   pv_dtype=pv_dtype)
        rq, rk = abi.packed_row(cq[b], b), abi.packed_row(ck[b], b)
        nq = p.q_int8.shape[2]
        q_int8[:, rq:rq + nq] = p.q_int8[0]
        q_scale[:, rq // 32:(rq + nq) // 32] = p.q_scale[0]
        if lse_corr is not None:
            lse_corr[:, cq[b]:cq[b + 1]] = p.lse_corr[0]
        if lk:
            nk = p.k_int8.shape[2]
            k_int8[:, rk:rk + nk] = p.k_int8[0]
            k_scale[:, rk // 32:(rk + nk) // 32] = p.k_scale[0]
            v_t[:, :, rk:rk + nk] = p.v_t[0]
            k_mean[b], v_scale[b] = p.k_mean[0], p.v_scale[0]
            if p.v_mean is not None:
                v_mean[b] = p.v_mean[0]
    lens_q = [b - a for a, b in zip(cq, cq[1:])]
    lens_kv = [b - a for a, b in zip(ck, ck[1:])]
    return PackedPrepared(q_int8, q_scale, k_int8, k_scale, k_mean, v_t, v_scale, cu_q, cu_kv, max(lens_q),
                          max(lens_kv), cq[-1], D, q.dtype, v_mean if smooth_v else None, lse_corr)


def per_sequence(q, k, v, cu_q, cu_kv, run):
    """out [total_q, H_q, D], lse [H_q, total_q] from run(q_b, k_b, v_b) -> (out [1, S, H, D], lse [1, H, S]) per
    sequence; no queries: nothing, no keys: zeros and -inf."""
    out = torch.zeros_like(q)
    lse = torch.full((q.shape[1], q.shape[0]), float("-inf"))
    cq, ck = cu_q.tolist(), cu_kv.tolist()
    for b in range(len(cq) - 1):
        if cq[b + 1] == cq[b] or ck[b + 1] == ck[b]:
            continue
        o, ls = run(q[None, cq[b]:cq[b + 1]], k[None, ck[b]:ck[b + 1]], v[None, ck[b]:ck[b + 1]])
        out[cq[b]:cq[b + 1]] = o[0]
        lse[:, cq[b]:cq[b + 1]] = ls[0]
    return out, lse
