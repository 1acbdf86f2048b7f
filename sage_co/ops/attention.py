"""Host side of the attention forward kernel: SagePrepared in, bf16 [B, S, H, 128] (and fp32 LSE [B, H, S]) out.

The kernel (asm_src/gfx1201_sage_attention.hip, and the later hand-scheduled asm variant with the same ABI)
takes the kernarg struct declared here, runs one workgroup of 4 wave32 per 64 queries of one (batch, head),
grid (S_pad / 64, H, B), and writes `out` (and `lse` when asked). Numerics: sage_co.reference.sage_attention_model.
"""
from __future__ import annotations

import torch

from .. import registry, validate
from ..kernargs import Field, KernargStruct
from ..launch import launch, resolve_backend
from ..prepared import HEAD_DIM, PAD, SagePrepared, s_pad

OP = "sage_attention_fwd"
QUERY_TILE = 64  # queries per workgroup (4 waves x 16); grid x = S_pad / 64
BLOCK = (128, 1, 1)
FLAG_LSE = 1  # kernarg flags bit 0: write lse
FLAG_SMOOTH_K = 2  # bit 1: lse adds ln2 * (q_int8 * q_scale) . k_mean

# The header table of asm_src/gfx1201_sage_attention.hip; checked against the .co metadata before the first launch.
ATTENTION_FWD_ARGS = KernargStruct("sage_attention_fwd", [
    Field("q", "ptr", 0),          # int8 [B, H, S_pad, 128]
    Field("k", "ptr", 8),          # int8 [B, H, S_pad, 128]
    Field("v", "ptr", 16),         # fp8 e4m3fn [B, H, 128, S_pad]
    Field("q_scale", "ptr", 24),   # fp32 [B, H, S_pad/32]
    Field("k_scale", "ptr", 32),   # fp32 [B, H, S_pad/32]
    Field("k_mean", "ptr", 40),    # fp32 [B, H, 128]
    Field("v_scale", "ptr", 48),   # fp32 [B, H, 128]
    Field("out", "ptr", 56),       # bf16 [B, S, H, 128]
    Field("lse", "ptr", 64),       # fp32 [B, H, S]; a 4-byte placeholder when flags bit 0 is clear
    Field("seq_len", "u32", 72),
    Field("seq_pad", "u32", 76),
    Field("num_heads", "u32", 80),
    Field("flags", "u32", 84),
], size=88, symbols=(
    "gfx1201_sage_attention_fwd",      # variant "hip" (asm_src/gfx1201_sage_attention.hip)
    "gfx1201_sage_attention_fwd_asm",  # variant "asm" (asm_src/gen_sage_attention_asm.py), same ABI
))

# The kernel addresses one head of q/k/v with 32-bit byte offsets (S_pad * 128 < 2**32).
MAX_SEQ_PAD = (1 << 32) // HEAD_DIM - PAD


def grid(prepared: SagePrepared) -> tuple[int, int, int]:
    B, H, Sp, _ = prepared.q_int8.shape
    return (Sp // QUERY_TILE, H, B)


def check_supported(shapes: validate.Shapes, variant: str | None = None) -> None:
    """The shipped attention kernel `variant` exists and serves these shapes, else LookupError / NotImplementedError
    before any kernel runs. The v1 kernels (one ABI, above) serve D = 128, H_q == H_kv, S_q == S_kv, bf16 output;
    the other shapes of issue 13 (head dim 64 and padded ones, GQA/MQA, S_q != S_kv, fp16) need the v2 kernels."""
    if variant is not None and not isinstance(variant, str):
        raise TypeError(f"variant: expected None (the default kernel) or a str naming a shipped variant of {OP}, "
                        f"got {type(variant).__name__}")
    kernel = registry.find(OP, variant or None)
    missing = [what for what, ok in (
        (f"head dim {shapes.D} (only {HEAD_DIM})", shapes.D == HEAD_DIM),
        (f"GQA/MQA (H_q = {shapes.H_q}, H_kv = {shapes.H_kv})", shapes.H_q == shapes.H_kv),
        (f"S_q = {shapes.S_q} != S_kv = {shapes.S_kv}", shapes.S_q == shapes.S_kv),
        (f"{shapes.dtype} output (only torch.bfloat16)", shapes.dtype == torch.bfloat16)) if not ok]
    if missing:
        raise NotImplementedError(f"q: the shipped attention kernel {kernel.variant!r} does not serve "
                                  f"{'; '.join(missing)} yet (issue 13: the v2 attention kernels); sage_prepare "
                                  f"and sage_co.reference already do")
    S_pad = s_pad(shapes.S_q)
    if S_pad > MAX_SEQ_PAD:
        raise ValueError(f"q: S = {shapes.S_q} is too long for the attention kernel (S_pad = {S_pad} > "
                         f"{MAX_SEQ_PAD}: one head of q/k/v must stay below 4 GiB)")


def run_attention_fwd(prepared: SagePrepared, *, return_lse: bool = False, backend: str | None = None,
                      variant: str | None = None):
    """Attention forward on a prepared structure: out bf16 [B, S, H, 128], or (out, lse fp32 [B, H, S]).

    backend: None picks by device (CPU tensors -> "emu", gfx1201 -> "hip"); variant: which shipped kernel
    ("hip" = the clang-built kernel; others as listed in hsaco/manifest.json for op sage_attention_fwd).
    Everything is validated before any kernel runs."""
    validate.check_flag("return_lse", return_lse)
    sh = validate.check_prepared(prepared)
    check_supported(sh, variant)
    kernel = registry.find(OP, variant)
    B, S, H = sh.B, sh.S_q, sh.H_q
    S_pad = prepared.q_int8.shape[2]
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
