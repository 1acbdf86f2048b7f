"""The prepared (quantized) form of one attention call, shared by the reference and every kernel.

Layout and numerics: docs/numerics.md §Prepared layout. This module is neutral: it knows shapes, not how they
are made.

    q, k, v  ->  sage_prepare  ->  SagePrepared  ->  attention kernel  ->  out (dtype out_dtype), lse

Q has H_q heads and S_q rows, K/V have H_kv heads and S_kv rows (GQA: H_q % H_kv == 0, query head h reads K/V
head h // (H_q // H_kv)). The head dim D (a multiple of 16, at most 128) is zero-padded to D_pad = 64 or 128.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

HEAD_DIM = 128   # the largest head dim (D_pad of D in 65..128)
HEAD_DIMS_NATIVE = (64, 128)   # D_pad: the head dims the kernels are built for
HEAD_DIM_STEP = 16   # D must be a multiple of this (one WMMA K-slice of 16 bf16/fp16)
SCALE_BLOCK = 32  # tokens per Q/K scale (docs/numerics.md §Q)
PAD = 64  # S_q and S_kv are padded to a multiple of the attention kernel's key/query tile
INPUT_DTYPES = (torch.bfloat16, torch.float16)   # q/k/v dtype; the output has the same dtype


class SagePrepared(NamedTuple):
    """Quantized Q/K/V of one call. Rows past seq_len_q / seq_len_kv and channels past head_dim are zero."""
    q_int8: torch.Tensor  # [B, H_q, S_q_pad, D_pad] int8, carries softmax_scale * log2(e)
    q_scale: torch.Tensor  # [B, H_q, S_q_pad // 32] fp32
    k_int8: torch.Tensor  # [B, H_kv, S_kv_pad, D_pad] int8
    k_scale: torch.Tensor  # [B, H_kv, S_kv_pad // 32] fp32
    k_mean: torch.Tensor  # [B, H_kv, D_pad] fp32, zeros unless smooth_k
    v_fp8: torch.Tensor  # [B, H_kv, D_pad, S_kv_pad] float8_e4m3fn (V transposed)
    v_scale: torch.Tensor  # [B, H_kv, D_pad] fp32
    seq_len_q: int  # S_q, the number of valid query rows
    seq_len_kv: int  # S_kv, the number of valid keys / values
    head_dim: int  # D, the real head dim (channels D..D_pad-1 are padding)
    out_dtype: torch.dtype  # the caller's dtype (torch.bfloat16 or torch.float16): the attention output's


def s_pad(S: int) -> int:
    """S rounded up to a multiple of 64; rows/columns past S are zero in every prepared tensor."""
    return (S + PAD - 1) // PAD * PAD


def d_pad(D: int) -> int:
    """The native head dim D is padded to: 64 for D <= 64, else 128."""
    return HEAD_DIMS_NATIVE[0] if D <= HEAD_DIMS_NATIVE[0] else HEAD_DIMS_NATIVE[1]


def expected_shapes(B: int, S_q: int, S_kv: int, H_q: int, H_kv: int, D: int
                    ) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Field name -> (shape, dtype) of the tensors of a SagePrepared for q [B, S_q, H_q, D], k/v [B, S_kv, H_kv, D]."""
    Sq, Skv, Dp = s_pad(S_q), s_pad(S_kv), d_pad(D)
    return {
        "q_int8": ((B, H_q, Sq, Dp), torch.int8),
        "q_scale": ((B, H_q, Sq // SCALE_BLOCK), torch.float32),
        "k_int8": ((B, H_kv, Skv, Dp), torch.int8),
        "k_scale": ((B, H_kv, Skv // SCALE_BLOCK), torch.float32),
        "k_mean": ((B, H_kv, Dp), torch.float32),
        "v_fp8": ((B, H_kv, Dp, Skv), torch.float8_e4m3fn),
        "v_scale": ((B, H_kv, Dp), torch.float32),
    }
