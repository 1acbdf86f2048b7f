"""The prepared (quantized) form of one attention call, shared by the reference and every kernel.

Layout and numerics: docs/numerics.md §Prepared. This module is neutral: it knows shapes, not how they are made.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from .abi import HEAD_DIM, PAD, SCALE_BLOCK, s_pad  # noqa: F401  (re-exported: the one definition is sage_co/abi.py)


class SagePrepared(NamedTuple):
    q_int8: torch.Tensor  # [B, H, S_pad, 128] int8, carries softmax_scale * log2(e)
    q_scale: torch.Tensor  # [B, H, S_pad // 32] fp32
    k_int8: torch.Tensor  # [B, H, S_pad, 128] int8
    k_scale: torch.Tensor  # [B, H, S_pad // 32] fp32
    k_mean: torch.Tensor  # [B, H, 128] fp32, zeros unless smooth_k
    v_fp8: torch.Tensor  # [B, H, 128, S_pad] float8_e4m3fn (V transposed)
    v_scale: torch.Tensor  # [B, H, 128] fp32
    seq_len: int  # S, the number of valid tokens


def expected_shapes(B: int, S: int, H: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Field name -> (shape, dtype) of a SagePrepared for q/k/v of shape [B, S, H, 128]."""
    Sp = s_pad(S)
    return {
        "q_int8": ((B, H, Sp, HEAD_DIM), torch.int8),
        "q_scale": ((B, H, Sp // SCALE_BLOCK), torch.float32),
        "k_int8": ((B, H, Sp, HEAD_DIM), torch.int8),
        "k_scale": ((B, H, Sp // SCALE_BLOCK), torch.float32),
        "k_mean": ((B, H, HEAD_DIM), torch.float32),
        "v_fp8": ((B, H, HEAD_DIM, Sp), torch.float8_e4m3fn),
        "v_scale": ((B, H, HEAD_DIM), torch.float32),
    }
