"""Exact attention in fp32 for any of sageattn's shapes (HND/NHD, GQA, separate lengths): the tests' yardstick."""
from __future__ import annotations

import torch


def attention_fp32(q, k, v, sm_scale=None, layout="NHD"):
    """softmax(sm_scale * q.k^T) v and its natural-log LSE in fp32. Returns (out fp32 in q's layout, lse [B, H_q, S_q])."""
    if layout == "NHD":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    qf, kf, vf = (t.float() for t in (q, k, v))
    hq, hk = qf.shape[1], kf.shape[1]
    if hq != hk:  # GQA: query head h reads K/V head h // (hq // hk)
        kf, vf = (t.repeat_interleave(hq // hk, dim=1) for t in (kf, vf))
    scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    logits = (qf @ kf.transpose(-1, -2)) * scale
    lse = torch.logsumexp(logits, dim=-1)
    out = torch.softmax(logits, dim=-1) @ vf
    return (out.transpose(1, 2) if layout == "NHD" else out), lse
