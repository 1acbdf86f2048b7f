"""Host side of the attention forward kernel: SagePrepared in, bf16 [B, S, H, 128] (and fp32 LSE [B, H, S]) out.

The kernel (asm_src/gfx1201_sage_attention.hip, and the later hand-scheduled asm variant with the same ABI)
takes the kernarg struct of sage_co/abi.py, runs one workgroup of 4 wave32 per 64 queries of one (batch, head),
grid (S_pad / 64, H, B), and writes `out` (and `lse` when asked). Numerics: sage_co.reference.sage_attention_model.
"""
from __future__ import annotations

import torch

from .. import abi, registry, validate
from ..abi import ATTENTION_FWD_ARGS, FLAG_LSE, FLAG_SMOOTH_K, HEAD_DIM, PAD, QUERY_TILE
from ..launch import launch, resolve_backend
from ..prepared import SagePrepared

OP = abi.ATTENTION_OP
BLOCK = abi.ATTENTION_BLOCK

# The kernel addresses one head of q/k/v with 32-bit byte offsets (S_pad * 128 < 2**32).
MAX_SEQ_PAD = (1 << 32) // HEAD_DIM - PAD


def grid(prepared: SagePrepared) -> tuple[int, int, int]:
    B, H, Sp, _ = prepared.q_int8.shape
    return (Sp // QUERY_TILE, H, B)


def _shape_of(prepared) -> tuple[int, int, int]:
    """(B, S, H) read off q_int8 and seq_len, with errors that name the field; check_prepared does the rest."""
    if not isinstance(prepared, SagePrepared):
        raise TypeError(f"prepared: expected a SagePrepared, got {type(prepared).__name__}")
    q = prepared.q_int8
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        shape = tuple(q.shape) if isinstance(q, torch.Tensor) else type(q).__name__
        raise ValueError(f"prepared.q_int8: expected a 4-dim tensor [B, H, S_pad, {HEAD_DIM}], got {shape}")
    S = prepared.seq_len
    if isinstance(S, bool) or not isinstance(S, int) or S < 1:
        raise ValueError(f"prepared.seq_len: expected an int >= 1, got {S!r}")
    B, H = q.shape[0], q.shape[1]
    if B < 1 or H < 1:
        raise ValueError(f"prepared.q_int8: expected B >= 1 and H >= 1, got shape {tuple(q.shape)}")
    return B, S, H


def run_attention_fwd(prepared: SagePrepared, *, return_lse: bool = False, backend: str | None = None,
                      variant: str | None = None):
    """Attention forward on a prepared structure: out bf16 [B, S, H, 128], or (out, lse fp32 [B, H, S]).

    backend: None picks by device (CPU tensors -> "emu", gfx1201 -> "hip"); variant: which shipped kernel
    ("hip" = the clang-built kernel; others as listed in hsaco/manifest.json for op sage_attention_fwd).
    Everything is validated before any kernel runs."""
    validate.check_flag("return_lse", return_lse)
    B, S, H = _shape_of(prepared)
    validate.check_prepared(prepared, B, S, H)
    S_pad = prepared.q_int8.shape[2]
    if S_pad > MAX_SEQ_PAD:
        raise ValueError(f"prepared.seq_len: S = {S} is too long for the attention kernel (S_pad = {S_pad} > "
                         f"{MAX_SEQ_PAD}: one head of q/k/v must stay below 4 GiB)")
    if variant is not None and not isinstance(variant, str):
        raise TypeError(f"variant: expected None (the default kernel) or a str naming a shipped variant of {OP}, "
                        f"got {type(variant).__name__}")
    kernel = registry.find(OP, variant, head_dim=HEAD_DIM, out_dtype="bf16")
    device = prepared.q_int8.device
    backend = resolve_backend(prepared.q_int8, backend)

    out = torch.empty(B, S, H, HEAD_DIM, dtype=torch.bfloat16, device=device)
    # Without return_lse the kernel never touches lse; it still gets a valid (tiny) allocation.
    lse = torch.empty(B, H, S, dtype=torch.float32, device=device) if return_lse else \
        torch.empty(1, dtype=torch.float32, device=device)
    # The smooth_k term is ln2 * q_f . k_mean; k_mean is all zero for a prepare without smooth_k, so adding it
    # always is exact (x + ln2 * (+-0) == x) and the host never has to inspect k_mean.
    flags = (FLAG_LSE | FLAG_SMOOTH_K) if return_lse else 0
    args = {
        "q": prepared.q_int8, "k": prepared.k_int8, "v": prepared.v_fp8,
        "q_scale": prepared.q_scale, "k_scale": prepared.k_scale, "k_mean": prepared.k_mean,
        "v_scale": prepared.v_scale, "out": out, "lse": lse,
        "seq_len": S, "seq_pad": S_pad, "num_heads": H, "flags": flags,
    }
    launch(kernel.symbol, ATTENTION_FWD_ARGS, grid(prepared), BLOCK, args, backend=backend)
    return (out, lse) if return_lse else out
