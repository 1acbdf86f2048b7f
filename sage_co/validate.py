"""Argument checks shared by every entry point (reference and kernels).

Every failure raises TypeError (wrong type/dtype) or ValueError (wrong shape, layout or value) whose message
starts with the argument's name and says what was expected. docs/numerics.md §Inputs lists the contract.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .backends import BACKENDS  # the one list; backend modules load lazily, so this stays light
from .prepared import HEAD_DIM, PAD, SCALE_BLOCK, SagePrepared, expected_shapes, s_pad

ROPE_DIMS = (32, 64, 96, 128)


class Checked(NamedTuple):
    B: int
    S: int
    H: int
    softmax_scale: float
    rope_dim: int | None  # None when RoPE is off


def _tensor(name: str, t, dtype: torch.dtype) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor of dtype {dtype}, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{name}: expected dtype {dtype}, got {t.dtype}")
    if t.requires_grad:
        raise ValueError(f"{name}: expected a tensor without requires_grad (sage-co has no backward); "
                         f"pass {name}.detach()")
    return t


def _contiguous(name: str, t: torch.Tensor) -> None:
    if not t.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous tensor (got strides {tuple(t.stride())} for shape "
                         f"{tuple(t.shape)}); pass {name}.contiguous()")


def _same_device(name: str, t: torch.Tensor, device: torch.device) -> None:
    if t.device != device:
        raise ValueError(f"{name}: expected a tensor on {device} (the device of q), got {t.device}")


def check_qkv(q, k, v) -> tuple[int, int, int]:
    """q, k, v: contiguous bf16 [B, S, H, 128], one shape, one device, S >= 1. Returns (B, S, H)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        _tensor(name, t, torch.bfloat16)
        if t.dim() != 4:
            raise ValueError(f"{name}: expected 4 dims [B, S, H, {HEAD_DIM}], got shape {tuple(t.shape)}")
        if t.shape[-1] != HEAD_DIM:
            raise ValueError(f"{name}: expected head dim {HEAD_DIM} (shape [B, S, H, {HEAD_DIM}]), "
                             f"got shape {tuple(t.shape)}")
    for name, t in (("k", k), ("v", v)):
        if t.shape != q.shape:
            raise ValueError(f"{name}: expected the shape of q {tuple(q.shape)}, got {tuple(t.shape)}")
    B, S, H, _ = q.shape
    if S == 0:
        raise ValueError(f"q: expected at least one token (S >= 1), got shape {tuple(q.shape)}")
    if B == 0 or H == 0:
        raise ValueError(f"q: expected B >= 1 and H >= 1, got shape {tuple(q.shape)}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        _contiguous(name, t)
        _same_device(name, t, q.device)
    return B, S, H


# docs/numerics.md §Finite range: with |softmax_scale| <= 2^64 and |q|, |k| <= 2^24 every intermediate of the spec
# is finite (the largest logit is below 2^121); beyond 2^64 even |q| ~ 4 overflows the scaled Q (1e38 gave all NaN).
MAX_SOFTMAX_SCALE = 2.0 ** 64
MAX_QK_ABS = 2.0 ** 24


def check_softmax_scale(softmax_scale) -> float:
    """None -> 1/sqrt(128); otherwise a real number (int or float, not bool) with |softmax_scale| <= 2^64."""
    if softmax_scale is None:
        return 1.0 / math.sqrt(HEAD_DIM)
    if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, (int, float)):
        raise TypeError(f"softmax_scale: expected None or a finite float, got {type(softmax_scale).__name__}")
    # comparisons, not math.isfinite: under torch.compile(dynamic=True) the float is symbolic and math.isfinite
    # cannot be traced (fullgraph fails); the chained comparison also refuses NaN and +-inf
    if not -MAX_SOFTMAX_SCALE <= softmax_scale <= MAX_SOFTMAX_SCALE:
        raise ValueError(f"softmax_scale: expected a finite float with |softmax_scale| <= 2**64 (the range where "
                         f"the arithmetic stays finite, docs/numerics.md §Finite range), got {softmax_scale}")
    return float(softmax_scale)


def check_finite_range(q, k, softmax_scale=None) -> None:
    """Optional check (one pass over q and k; the ops do not run it): the inputs lie in the supported finite range
    of docs/numerics.md §Finite range, |q|, |k| <= 2^24, so the output and LSE are finite. Raises ValueError naming
    q or k."""
    check_softmax_scale(softmax_scale)
    for name, t in (("q", q), ("k", k)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        amax = t.detach().abs().amax().item() if t.numel() else 0.0
        if not amax <= MAX_QK_ABS:
            raise ValueError(f"{name}: max |{name}| = {amax} is outside the supported finite range |{name}| <= 2**24 "
                             f"(docs/numerics.md §Finite range)")


def check_flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected True or False, got {value!r}")
    return value


def check_eps(eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"eps: expected a finite float >= 0, got {type(eps).__name__}")
    if not 0 <= eps < math.inf:   # comparisons only: traceable with a symbolic eps (see check_softmax_scale)
        raise ValueError(f"eps: expected a finite float >= 0, got {eps}")
    return float(eps)


def check_norm_rope(q_norm_weight, k_norm_weight, cos, sin, rope_dim, S: int, device: torch.device) -> int | None:
    """Norm weights: None or contiguous bf16 [128]. cos/sin: both None or both contiguous bf16 [S, rope_dim].
    rope_dim: None (taken from cos) or one of 32, 64, 96, 128 matching cos. Returns rope_dim or None."""
    for name, w in (("q_norm_weight", q_norm_weight), ("k_norm_weight", k_norm_weight)):
        if w is None:
            continue
        _tensor(name, w, torch.bfloat16)
        if tuple(w.shape) != (HEAD_DIM,):
            raise ValueError(f"{name}: expected shape ({HEAD_DIM},), got {tuple(w.shape)}")
        _contiguous(name, w)
        _same_device(name, w, device)
    if rope_dim is not None and (isinstance(rope_dim, bool) or not isinstance(rope_dim, int)):
        raise TypeError(f"rope_dim: expected None or an int in {ROPE_DIMS}, got {type(rope_dim).__name__}")
    if rope_dim is not None and rope_dim not in ROPE_DIMS:
        raise ValueError(f"rope_dim: expected one of {ROPE_DIMS}, got {rope_dim}")
    if cos is None and sin is None:
        if rope_dim is not None:
            raise ValueError(f"rope_dim: given ({rope_dim}) but cos and sin are None; pass cos and sin "
                             f"[S, rope_dim] or leave rope_dim None")
        return None
    if cos is None or sin is None:
        missing, given = ("cos", "sin") if cos is None else ("sin", "cos")
        raise ValueError(f"{missing}: expected a bf16 [S, rope_dim] tensor because {given} is given "
                         f"(RoPE needs both)")
    for name, t in (("cos", cos), ("sin", sin)):
        _tensor(name, t, torch.bfloat16)
        if t.dim() != 2:
            raise ValueError(f"{name}: expected shape [S, rope_dim] = [{S}, rope_dim], got {tuple(t.shape)}")
    if rope_dim is None:
        rope_dim = cos.shape[1]
        if rope_dim not in ROPE_DIMS:
            raise ValueError(f"cos: expected shape [{S}, rope_dim] with rope_dim in {ROPE_DIMS}, "
                             f"got {tuple(cos.shape)}")
    for name, t in (("cos", cos), ("sin", sin)):
        if tuple(t.shape) != (S, rope_dim):
            raise ValueError(f"{name}: expected shape [S, rope_dim] = [{S}, {rope_dim}], got {tuple(t.shape)}")
        _contiguous(name, t)
        _same_device(name, t, device)
    return rope_dim


# ------------------------------------------------------------------- whole-call checks (issue 11 item 5)
ATTENTION_OP = "sage_attention_fwd"
# The attention kernel addresses one head of q/k/v with 32-bit byte offsets: S_pad * 128 < 2^32, so
# S_pad <= 2^32 / 128 - 64 = 33,554,368 (docs/numerics.md §Inputs).
MAX_ATTENTION_SEQ_PAD = (1 << 32) // HEAD_DIM - PAD
# The prepare kernels' grids: y = H, z = 3 * B (quant) (docs/rdna4.md §HIP runtime: y, z <= 65536); S_pad < 2^31.
MAX_GRID_YZ = 65536


def check_backend(backend) -> None:
    """backend: None (choose by the tensors' device), "emu" or "hip"."""
    if backend is None:
        return
    if not isinstance(backend, str):
        raise TypeError(f"backend: expected None, 'emu' or 'hip', got {type(backend).__name__}")
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected None, 'emu' or 'hip', got {backend!r}")


def check_kernel(kernel, op: str = ATTENTION_OP) -> None:
    """kernel: None (the default variant) or the name of a variant the manifest ships for `op`."""
    if kernel is None:
        return
    if not isinstance(kernel, str):
        raise TypeError(f"kernel: expected None or a str naming a shipped variant of {op}, got {type(kernel).__name__}")
    if torch.compiler.is_compiling():
        return   # dynamo cannot trace the manifest read; the op's fake implementation makes this check at trace time
    check_kernel_shipped(kernel, op)


def check_kernel_shipped(kernel, op: str = ATTENTION_OP) -> None:
    """The manifest part of check_kernel, without the compile guard: the ops' fake implementations call it (they
    run as plain Python under FakeTensorMode, also while torch.compile traces)."""
    if kernel is None:
        return
    from . import registry  # torch-free and cached; imported here so `validate` stays a leaf for the reference
    variants = sorted({k.variant for k in registry.kernels() if k.op == op})
    if kernel not in variants:
        raise ValueError(f"kernel: expected None or one of {variants} (the shipped variants of {op}), got {kernel!r}")


def check_attention_length(S, name: str = "q") -> None:
    """S tokens fit the attention kernel: S_pad = round_up(S, 64) <= 33,554,368."""
    Sp = s_pad(S)
    if Sp > MAX_ATTENTION_SEQ_PAD:
        raise ValueError(f"{name}: S = {S} is too long for the attention kernel: S_pad = round_up(S, 64) = {Sp} > "
                         f"{MAX_ATTENTION_SEQ_PAD} (one head of q/k/v is addressed with 32-bit byte offsets)")


def check_prepare_limits(B, S, H) -> None:
    """The prepare kernels' launch grids fit: 3 * B <= 65536, H <= 65536, S_pad < 2^31."""
    if 3 * B > MAX_GRID_YZ or H > MAX_GRID_YZ:
        raise ValueError(f"q: B = {B} and H = {H} exceed the launch grid (need 3 * B <= 65536 and H <= 65536)")
    if s_pad(S) >= 2 ** 31:
        raise ValueError(f"q: S = {S} is too long (S_pad must stay below 2^31)")


def check_prepare_args(q, k, v, softmax_scale=None, *, smooth_k=False, q_norm_weight=None, k_norm_weight=None,
                       eps=1e-6, cos=None, sin=None, rope_dim=None) -> Checked:
    """Everything sage_prepare / sage_attention take, checked in one go."""
    B, S, H = check_qkv(q, k, v)
    scale = check_softmax_scale(softmax_scale)
    check_flag("smooth_k", smooth_k)
    check_eps(eps)
    rd = check_norm_rope(q_norm_weight, k_norm_weight, cos, sin, rope_dim, S, q.device)
    return Checked(B, S, H, scale, rd)


def check_prepared(prepared, B: int, S: int, H: int, device: torch.device | str | None = None) -> None:
    """A SagePrepared matches q/k/v of shape [B, S, H, 128]: every field's dtype, shape, layout, device."""
    if not isinstance(prepared, SagePrepared):
        raise TypeError(f"prepared: expected a SagePrepared, got {type(prepared).__name__}")
    if isinstance(prepared.seq_len, bool) or not isinstance(prepared.seq_len, int):
        raise TypeError(f"prepared.seq_len: expected an int (S), got {type(prepared.seq_len).__name__}")
    if prepared.seq_len != S:
        raise ValueError(f"prepared.seq_len: expected {S} (S of q/k/v), got {prepared.seq_len}; "
                         f"this prepared structure was made for another shape")
    dev = torch.device(device) if device is not None else prepared.q_int8.device
    for field, (shape, dtype) in expected_shapes(B, S, H).items():
        name = f"prepared.{field}"
        t = getattr(prepared, field)
        _tensor(name, t, dtype)
        if tuple(t.shape) != shape:
            raise ValueError(f"{name}: expected shape {shape} for B={B}, S={S}, H={H}, got {tuple(t.shape)}; "
                             f"this prepared structure was made for another shape")
        _contiguous(name, t)
        if t.device != dev:
            raise ValueError(f"{name}: expected a tensor on {dev}, got {t.device}")


def check_prepared_padding(prepared) -> None:
    """Everything past prepared.seq_len is zero, as the layout requires (docs/numerics.md §Prepared layout): rows
    >= seq_len of q_int8/k_int8, columns >= seq_len of v_fp8, scale blocks that hold no valid token. This catches a
    seq_len lowered within the same S_pad (100 -> 65 was silently used: rel L2 0.74). Reads only the padded part
    (fewer than 64 tokens per head); skipped for tensors without data (meta)."""
    S = prepared.seq_len
    q_int8 = prepared.q_int8
    if q_int8.device.type == "meta" or S >= q_int8.shape[2]:
        return
    first_empty_block = -(-S // SCALE_BLOCK)
    padded = (("q_int8", q_int8[:, :, S:]), ("k_int8", prepared.k_int8[:, :, S:]),
              ("v_fp8", prepared.v_fp8[..., S:].view(torch.uint8)),
              ("q_scale", prepared.q_scale[..., first_empty_block:]),
              ("k_scale", prepared.k_scale[..., first_empty_block:]))
    for field, t in padded:
        if t.numel() and bool(t.ne(0).any()):
            raise ValueError(f"prepared.seq_len: {S}, but prepared.{field} holds non-zero values past token {S} where "
                             f"the layout has zero padding: the structure was prepared for a longer sequence or "
                             f"seq_len was changed")
