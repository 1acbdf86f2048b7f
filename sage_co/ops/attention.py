"""Host side of the attention forward kernels: SagePrepared in, out in the caller's dtype and layout (and fp32
LSE [B, H_q, S_q]) out.

Both kernels (asm_src/gfx1201_sage_attention.hip, variant "hip", and the hand-scheduled asm family, variant
"asm") take the kernarg struct of sage_co/abi.py, run one workgroup of 4 wave32 per 64 queries of one (batch,
query head), grid (S_q_pad / 64, H_q, B), and write `out` through its element strides (so NHD and HND results
need no copy) and `lse` when asked. One symbol per (head_dim = D_pad, out_dtype) pair, found by those manifest
keys (and pv_dtype: "fp8" for an fp8 v_t, "fp16" for an fp16 one). Numerics:
sage_co.reference.sage_attention_model.
"""
from __future__ import annotations

import torch

from .. import abi, masks, registry, validate
from ..abi import (ATTENTION_FWD_ARGS, FLAG_CAUSAL, FLAG_LSE, FLAG_SMOOTH_K, FLAG_SMOOTH_V, QUERY_TILE,
                   kv_group_magic)
from ..launch import launch, resolve_backend
from ..prepared import SagePrepared, d_pad

OP = abi.ATTENTION_OP
BLOCK = abi.ATTENTION_BLOCK
LAYOUTS = ("NHD", "HND")
OUT_DTYPE_KEYS = {torch.bfloat16: "bf16", torch.float16: "fp16"}
U32 = 1 << 32
# WMMA 16-query fragments: a wave's 16 rows of out are addressed as lane offsets r * out_stride_s * 2 bytes
WAVE_ROWS = abi.WAVE_QUERIES


def grid(prepared: SagePrepared) -> tuple[int, int, int]:
    B, H_q, S_q_pad, _ = prepared.q_int8.shape
    return (S_q_pad // QUERY_TILE, H_q, B)


def _check_reach(prepared: SagePrepared, strides: tuple[int, int, int]) -> None:
    """The kernels address one head of q/k/v and one wave's output rows with 32-bit byte offsets, and take the
    output's element strides as u32."""
    D_pad = prepared.q_int8.shape[-1]
    for name in ("q_int8", "k_int8"):
        S_pad = getattr(prepared, name).shape[2]
        if S_pad * D_pad >= U32:
            raise ValueError(f"prepared.{name}: one head of {S_pad} x {D_pad} bytes must stay below 4 GiB "
                             f"(the kernel's 32-bit offsets); split the sequence")
    if max(strides) >= U32 or WAVE_ROWS * strides[1] * 2 >= U32:
        raise ValueError(f"prepared.q_int8: the output's element strides (batch, row, head) = {strides} are too "
                         f"large for the kernel's 32-bit offsets")


def run_attention_fwd(prepared: SagePrepared, *, return_lse: bool = False, layout: str = "NHD",
                      backend: str | None = None, variant: str | None = None, is_causal: bool = False,
                      block_mask: torch.Tensor | None = None):
    """Attention forward on a prepared structure: out [B, S_q, H_q, D] (layout "NHD") or [B, H_q, S_q, D] ("HND")
    in prepared.out_dtype, or (out, lse fp32 [B, H_q, S_q]).

    backend: None picks by device (CPU tensors -> "emu", gfx1201 -> "hip"); variant: which shipped kernel
    family ("asm" = the hand-scheduled one, the default; "hip" = the clang-built one). is_causal: row i sees keys
    j <= i + S_kv - S_q (bottom-right aligned); block_mask: bool [B, H_q, ceil(S_q/64), ceil(S_kv/64)], the key
    tiles each query tile visits (sage_co.masks). Rows that see no key get zeros and lse -inf. Everything is
    validated before any kernel runs."""
    validate.check_flag("return_lse", return_lse)
    validate.check_flag("is_causal", is_causal)
    layout = validate.check_layout(layout)
    sh = validate.check_prepared(prepared)
    if variant is not None and not isinstance(variant, str):
        raise TypeError(f"variant: expected None (the default kernel) or a str naming a shipped variant of {OP}, "
                        f"got {type(variant).__name__}")
    if sh.H_q >= abi.MAX_QUERY_HEADS:
        raise ValueError(f"prepared.q_int8: {sh.H_q} query heads exceed the launch grid (< {abi.MAX_QUERY_HEADS})")
    masks.check_block_mask(block_mask, sh.B, sh.H_q, sh.S_q, sh.S_kv, device=prepared.q_int8.device)
    kernel = registry.find(OP, variant, head_dim=d_pad(sh.D), out_dtype=OUT_DTYPE_KEYS[sh.dtype],
                           pv_dtype=prepared.pv_dtype)
    device = prepared.q_int8.device
    backend = resolve_backend(prepared.q_int8, backend)

    shape = (sh.B, sh.S_q, sh.H_q, sh.D) if layout == "NHD" else (sh.B, sh.H_q, sh.S_q, sh.D)
    out = torch.empty(shape, dtype=sh.dtype, device=device)
    sb, ss, shd = (out.stride(0), out.stride(1), out.stride(2)) if layout == "NHD" else \
        (out.stride(0), out.stride(2), out.stride(1))
    _check_reach(prepared, (sb, ss, shd))
    # Without return_lse the kernel never touches lse; it still gets a valid (tiny) allocation.
    lse = torch.empty(sh.B, sh.H_q, sh.S_q, dtype=torch.float32, device=device) if return_lse else \
        torch.empty(1, dtype=torch.float32, device=device)
    # The smooth_k term: with prepared.lse_corr (every sage_prepare with smooth_k) it is added here, after the
    # kernel, from the original q (docs/numerics.md §LSE); a structure without it gets the kernel's term
    # ln2 * q_f . k_mean (k_mean is all zero without smooth_k, so adding it is exact: x + ln2 * (+-0) == x).
    smooth_k_term = FLAG_SMOOTH_K if prepared.lse_corr is None else 0
    flags = ((FLAG_LSE | smooth_k_term) if return_lse else 0) | (FLAG_CAUSAL if is_causal else 0) | \
        (FLAG_SMOOTH_V if prepared.v_mean is not None else 0)
    active = masks.active_tiles(sh.B, sh.H_q, sh.S_q, sh.S_kv, is_causal=is_causal, block_mask=block_mask,
                                device=device)
    lut, lut_sb, lut_sh = masks.build_lut(active)
    args = {
        "q": prepared.q_int8, "k": prepared.k_int8, "v": prepared.v_t,
        "q_scale": prepared.q_scale, "k_scale": prepared.k_scale, "k_mean": prepared.k_mean,
        "v_scale": prepared.v_scale, "out": out, "lse": lse,
        "seq_len_q": sh.S_q, "seq_pad_q": prepared.q_int8.shape[2],
        "seq_len_kv": sh.S_kv, "seq_pad_kv": prepared.k_int8.shape[2],
        "num_heads_q": sh.H_q, "num_heads_kv": sh.H_kv, "kv_group_magic": kv_group_magic(sh.H_q // sh.H_kv),
        "out_stride_b": sb, "out_stride_s": ss, "out_stride_h": shd, "head_dim": sh.D, "flags": flags,
        "lut": lut, "lut_stride_b": lut_sb, "lut_stride_h": lut_sh, "causal_offset": sh.S_kv - sh.S_q,
        # smooth_v: the epilogue adds v_mean back; without it the kernel never reads this pointer
        "v_mean": prepared.v_mean if prepared.v_mean is not None else prepared.k_mean,
    }
    launch(kernel.symbol, ATTENTION_FWD_ARGS, grid(prepared), BLOCK, args, backend=backend)
    if return_lse and prepared.lse_corr is not None:
        lse = lse + prepared.lse_corr     # the same fp32 add as reference.sage_attention_model
    return (out, lse) if return_lse else out
