"""The prepared (quantized) form of one attention call, shared by the reference and every kernel.

Layout and numerics: docs/numerics.md §Prepared layout. This module is neutral: it knows shapes, not how they
are made.

    q, k, v  ->  sage_prepare  ->  SagePrepared  ->  attention kernel  ->  out (dtype out_dtype), lse

Q has H_q heads and S_q rows, K/V have H_kv heads and S_kv rows (GQA: H_q % H_kv == 0, query head h reads K/V
head h // (H_q // H_kv)). The head dim D (any of 1..HEAD_DIM_MAX) is zero-padded to D_pad = abi.d_pad(D) (64, 128).
"""
from __future__ import annotations

from typing import NamedTuple

import torch

# the one definition of these is sage_co/abi.py (torch-free); re-exported for the torch side
from .abi import (HEAD_DIM, HEAD_DIM_MAX, HEAD_DIM_STEP, HEAD_DIMS_NATIVE, PAD, PV_DTYPES, SCALE_BLOCK,  # noqa: F401
                  d_pad, s_pad)
INPUT_DTYPES = (torch.bfloat16, torch.float16)   # q/k/v dtype; the output has the same dtype
DTYPE_KEYS = {torch.bfloat16: "bf16", torch.float16: "fp16"}   # dtype -> the manifest's in_dtype / out_dtype key
LAYOUTS = ("NHD", "HND")   # "NHD" = [B, S, H, D] (sage-co's default), "HND" = [B, H, S, D]
U32 = 1 << 32              # kernargs and in-kernel byte offsets are 32-bit: sizes must stay below this


class SagePrepared(NamedTuple):
    """Quantized Q/K/V of one call. Rows past seq_len_q / seq_len_kv and channels past head_dim are zero."""
    q_int8: torch.Tensor  # [B, H_q, S_q_pad, D_pad] int8, carries softmax_scale * log2(e)
    q_scale: torch.Tensor  # [B, H_q, S_q_pad // 32] fp32
    k_int8: torch.Tensor  # [B, H_kv, S_kv_pad, D_pad] int8
    k_scale: torch.Tensor  # [B, H_kv, S_kv_pad // 32] fp32
    k_mean: torch.Tensor  # [B, H_kv, D_pad] fp32, zeros unless smooth_k
    v_t: torch.Tensor  # [B, H_kv, D_pad, S_kv_pad] V transposed: float8_e4m3fn (pv_dtype "fp8") or float16 ("fp16")
    v_scale: torch.Tensor  # [B, H_kv, D_pad] fp32
    seq_len_q: int  # S_q, the number of valid query rows
    seq_len_kv: int  # S_kv, the number of valid keys / values
    head_dim: int  # D, the real head dim (channels D..D_pad-1 are padding)
    out_dtype: torch.dtype  # the caller's dtype (torch.bfloat16 or torch.float16): the attention output's
    v_mean: torch.Tensor | None = None  # [B, H_kv, D_pad] fp32 with smooth_v (added back in the epilogue), else None
    # [B, H_q, S_q] fp32 with smooth_k: the LSE term smooth_k removed, from the original q (docs/numerics.md §LSE)
    lse_corr: torch.Tensor | None = None

    @property
    def pv_dtype(self) -> str:
        """"fp8" (v_t float8_e4m3fn, P.V on the fp8 WMMA) or "fp16" (v_t float16, the f16 WMMA)."""
        return "fp16" if self.v_t.dtype == torch.float16 else "fp8"


# pv_dtype (sage_co.abi.PV_DTYPES, the manifest column) -> the torch dtype of SagePrepared.v_t
V_T_DTYPES = {"fp8": torch.float8_e4m3fn, "fp16": torch.float16}
assert tuple(V_T_DTYPES) == PV_DTYPES, (tuple(V_T_DTYPES), PV_DTYPES)


def expected_shapes(B: int, S_q: int, S_kv: int, H_q: int, H_kv: int, D: int, pv_dtype: str = "fp8"
                    ) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Field name -> (shape, dtype) of the tensors of a SagePrepared for q [B, S_q, H_q, D], k/v [B, S_kv, H_kv, D]
    (v_mean, present only with smooth_v, has the shape of k_mean)."""
    Sq, Skv, Dp = s_pad(S_q), s_pad(S_kv), d_pad(D)
    return {
        "q_int8": ((B, H_q, Sq, Dp), torch.int8),
        "q_scale": ((B, H_q, Sq // SCALE_BLOCK), torch.float32),
        "k_int8": ((B, H_kv, Skv, Dp), torch.int8),
        "k_scale": ((B, H_kv, Skv // SCALE_BLOCK), torch.float32),
        "k_mean": ((B, H_kv, Dp), torch.float32),
        "v_t": ((B, H_kv, Dp, Skv), V_T_DTYPES[pv_dtype]),
        "v_scale": ((B, H_kv, Dp), torch.float32),
    }
