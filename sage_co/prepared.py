"""The prepared (quantized) form of one attention call, shared by the reference and every kernel.

Layout and numerics: docs/numerics.md §Prepared layout. This module is neutral: it knows shapes, not how they
are made.

    q, k, v  ->  sage_prepare  ->  SagePrepared  ->  attention kernel  ->  out (dtype out_dtype), lse

q/k/v are bf16, fp16 or fp32 (one dtype); the output has that dtype. Q has H_q heads and S_q rows, K/V have H_kv
heads and S_kv rows (GQA: H_q % H_kv == 0, query head h reads K/V head h // (H_q // H_kv)). The head dim D (any of
1..HEAD_DIM_MAX) is zero-padded to D_pad = abi.d_pad(D) (64, 128, 256).
"""
from __future__ import annotations

from typing import NamedTuple

import torch

# the one definition of these is sage_co/abi.py (torch-free); re-exported for the torch side
from .abi import HEAD_DIM, HEAD_DIM_MAX, HEAD_DIM_STEP, HEAD_DIMS_NATIVE, PAD, PV_DTYPES, SCALE_BLOCK, d_pad, s_pad  # noqa: F401,E501
# q/k/v dtype (all three the same); the output has the same dtype. fp32 is prepared from its own values (no
# rounding to a 16-bit type first) and gives an fp32 output (docs/numerics.md §Inputs).
INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
DTYPE_KEYS = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}   # the manifest's in/out_dtype key
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
    out_dtype: torch.dtype  # the caller's dtype (torch.bfloat16, torch.float16 or torch.float32): the attention output's
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


class PackedPrepared(NamedTuple):
    """Quantized Q/K/V of a varlen call: B packed sequences in one structure (docs/numerics.md §Varlen).

    Rows are packed per head: sequence b's round_up(len_b, 64) prepared rows start at row
    abi.packed_row(cu_seqlens[b], b) = 64 * ceil(cu_seqlens[b] / 64) + 64 * b (of q_int8 / k_int8 / v_t's last dim;
    its scale blocks at that row / 32), computed from cu_seqlens alone (the kernels do it on the device). Each
    sequence is prepared exactly as a per-sequence call would prepare it (its scale blocks start at its first token,
    its statistics are over its own tokens, its padded rows are zero); rows between two sequences' padded rows are
    never read. R_q = abi.packed_rows(total_q, B), R_kv likewise."""
    q_int8: torch.Tensor  # [H_q, R_q, D_pad] int8
    q_scale: torch.Tensor  # [H_q, R_q // 32] fp32
    k_int8: torch.Tensor  # [H_kv, R_kv, D_pad] int8
    k_scale: torch.Tensor  # [H_kv, R_kv // 32] fp32
    k_mean: torch.Tensor  # [B, H_kv, D_pad] fp32 per sequence, zeros unless smooth_k
    v_t: torch.Tensor  # [H_kv, D_pad, R_kv]: float8_e4m3fn (pv_dtype "fp8") or float16 ("fp16")
    v_scale: torch.Tensor  # [B, H_kv, D_pad] fp32 per sequence
    cu_seqlens_q: torch.Tensor  # int32 [B + 1] on the device of the tensors
    cu_seqlens_kv: torch.Tensor  # int32 [B + 1]
    max_seqlen_q: int  # the caller's bound on every len_q (sizes the attention grid)
    max_seqlen_kv: int
    total_q: int  # packed query tokens (rows of the output)
    head_dim: int
    out_dtype: torch.dtype
    v_mean: torch.Tensor | None = None  # [B, H_kv, D_pad] fp32 with smooth_v, else None
    lse_corr: torch.Tensor | None = None  # [H_q, total_q] fp32 with smooth_k (docs/numerics.md §LSE)

    @property
    def batch(self) -> int:
        return self.cu_seqlens_q.shape[0] - 1

    @property
    def pv_dtype(self) -> str:
        return "fp16" if self.v_t.dtype == torch.float16 else "fp8"
