"""Host side of the attention forward kernels: SagePrepared in, out in the caller's dtype and layout (and fp32
LSE [B, H_q, S_q]) out.

Both kernels (asm_src/gfx1201_sage_attention.hip, kernel "hip", and the hand-scheduled asm family, kernel
"asm") take the kernarg struct of sage_co/abi.py, run one workgroup of 4 wave32 per 64 queries of one (batch,
query head), grid (S_q_pad / 64, H_q, B), and write `out` through its element strides (so NHD and HND results
need no copy) and `lse` when asked. One symbol per (head_dim = D_pad, out_dtype) pair, found by those manifest
keys (and pv_dtype: "fp8" for an fp8 v_t, "fp16" for an fp16 one). Numerics:
sage_co.reference.sage_attention_model.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from .. import abi, family, masks, registry, tuning, validate
from ..abi import ATTENTION_FWD_ARGS, FLAG_LSE, FLAG_SMOOTH_K, QUERY_TILE, kv_group_magic
from ..launch import BoundLaunch, launch
from ..prepared import DTYPE_KEYS, U32, SagePrepared, d_pad, s_pad

OP = abi.ATTENTION_OP
BLOCK = abi.ATTENTION_BLOCK
# WMMA 16-query fragments: a wave's 16 rows of out are addressed as lane offsets r * out_stride_s * element bytes
WAVE_ROWS = abi.WAVE_QUERIES
_LUT_CACHE = 64   # (S_q, S_kv, is_causal, device) LUTs kept for calls without a block_mask; cleared when full


def grid(prepared: SagePrepared) -> tuple[int, int, int]:
    B, H_q, S_q_pad, _ = prepared.q_int8.shape
    return (S_q_pad // QUERY_TILE, H_q, B)


def served_kernel(kernel: str | None, D: int, pv_dtype: str, name: str = "q") -> str | None:
    """The kernel family that runs head dim D (docs/performance.md §Head dim 256): `kernel` as given, except that the
    default (None) is the HIP kernel where the asm generator has no D_pad kernel (abi.ATTENTION_ASM_HEAD_DIMS: today
    every D_pad, so the default is the asm kernel; the recipe's kernel names the symbol that runs). pv_dtype "fp16" exists only at abi.PV16_HEAD_DIMS, and an
    explicit kernel must be built for D_pad: a ValueError naming the argument otherwise, before any kernel."""
    Dp = d_pad(D)
    if pv_dtype == "fp16" and Dp not in abi.PV16_HEAD_DIMS:
        raise ValueError(f"pv_dtype: \"fp16\" is built for head dims up to {max(abi.PV16_HEAD_DIMS)}, got D = {D} "
                         f"(D_pad {Dp}: its fp16 V^T staging does not fit the registers); use pv_dtype=\"fp8\"")
    if pv_dtype == "fp16" and Dp == max(abi.PV16_HEAD_DIMS) and D % abi.HEAD_DIM_GRANULE:
        # the HIP D_pad 128 pv16 symbols store whole 8-channel groups only: their element-wise tail stores made LLVM
        # spill (docs/numerics.md §Inputs); both kernels refuse the same calls
        raise ValueError(f"pv_dtype: \"fp16\" at head dims 65..128 needs D a multiple of {abi.HEAD_DIM_GRANULE}, "
                         f"got D = {D}; use pv_dtype=\"fp8\" or pad the head dim")
    if kernel == "asm" and Dp not in abi.ATTENTION_ASM_HEAD_DIMS:
        raise ValueError(f"kernel: the \"asm\" attention kernels are built for head dims up to "
                         f"{max(abi.ATTENTION_ASM_HEAD_DIMS)}, got D = {D} ({name}); pass kernel=None or \"hip\"")
    if kernel is None and Dp not in abi.ATTENTION_ASM_HEAD_DIMS:
        return "hip"
    return kernel


def resolved_schedule(opts, backend: str, device: torch.device | None = None) -> str:
    """The exp2 schedule a call asks for (sage_co.family.ATTENTION_SCHEDULES, docs/performance.md §Schedules): the
    call's `schedule` option, or for None on the gpu backend the device's tuned choice (sage_co.tuning, stored by
    `sage-co tune`; read once per device and process), else the default (sage_co.family.DEFAULT_SCHEDULE). The one
    place the default is resolved (recipe and varlen_recipe call it, through _shipped)."""
    if opts.schedule is not None:
        return opts.schedule
    if backend == "gpu":
        tuned = tuning.chosen_schedule(device)
        if tuned is not None:
            return tuned
    return family.DEFAULT_SCHEDULE


def _shipped(opts, backend: str, device, kernel, **keys) -> registry.ShippedKernel:
    """The attention symbol of (kernel, keys) in the resolved schedule; a tuned choice that is not built for these
    keys (a head dim or pv_dtype its family leaves out) gives way to the default schedule, an explicit one does not
    (registry.find's LookupError lists what is shipped)."""
    schedule = resolved_schedule(opts, backend, device)
    if opts.schedule is None and schedule != family.DEFAULT_SCHEDULE:
        try:
            return registry.find(OP, kernel, schedule=schedule, **keys)
        except LookupError:
            schedule = family.DEFAULT_SCHEDULE
    return registry.find(OP, kernel, schedule=schedule, **keys)


def check_schedule_built(schedule: str | None, D: int, pv_dtype: str) -> None:
    """An explicit schedule must have a symbol at (D_pad, pv_dtype) (sage_co.family.schedule_built): a ValueError
    naming the argument otherwise, before any kernel."""
    if schedule is not None and not family.schedule_built(schedule, d_pad(D), pv_dtype):
        built = [s for s in family.ATTENTION_SCHEDULES if family.schedule_built(s, d_pad(D), pv_dtype)]
        raise ValueError(f"schedule: {schedule!r} is not built for pv_dtype={pv_dtype!r} (head dim {D}); the "
                         f"schedules built there: {built}")


def check_query_heads(H_q: int, name: str = "q") -> None:
    """The one query-head limit of the attention launch (grid y, and the range kv_group_magic divides exactly)."""
    if H_q >= abi.MAX_QUERY_HEADS:
        raise ValueError(f"{name}: {H_q} query heads exceed the attention launch grid (< {abi.MAX_QUERY_HEADS})")


def _out_strides(sh: validate.Shapes, layout: str) -> tuple[int, int, int]:
    """(batch, row, head) element strides of the contiguous output in `layout` (what torch.empty gives)."""
    if layout == "NHD":   # [B, S_q, H_q, D]
        return sh.S_q * sh.H_q * sh.D, sh.H_q * sh.D, sh.D
    return sh.H_q * sh.S_q * sh.D, sh.D, sh.S_q * sh.D   # [B, H_q, S_q, D]


def _check_reach(sh: validate.Shapes, strides: tuple[int, int, int]) -> None:
    """The kernels address one head of q/k/v and one wave's output rows with 32-bit byte offsets, and take the
    output's element strides as u32."""
    D_pad = d_pad(sh.D)
    for name, S in (("q_int8", sh.S_q), ("k_int8", sh.S_kv)):
        if s_pad(S) * D_pad >= U32:
            raise ValueError(f"prepared.{name}: one head of {s_pad(S)} x {D_pad} bytes must stay below 4 GiB "
                             f"(the kernel's 32-bit offsets); split the sequence")
    if max(strides) >= U32 or WAVE_ROWS * strides[1] * sh.dtype.itemsize >= U32:
        raise ValueError(f"prepared.q_int8: the output's element strides (batch, row, head) = {strides} are too "
                         f"large for the kernel's 32-bit offsets")


class AttentionRecipe(NamedTuple):
    """Everything one attention launch needs that depends only on the call's shapes and options (cached by
    sage_co.plan for repeated shapes): the resolved kernel, its launch bound to the grid and scalar kernargs, the
    output shapes."""
    kernel: registry.ShippedKernel
    launch: BoundLaunch
    out_shape: tuple[int, ...]
    lse_shape: tuple[int, ...]
    out_dtype: torch.dtype
    shapes: validate.Shapes
    is_causal: bool
    return_lse: bool
    mask_dims: tuple[int, int, int] | None = None   # attn_mask's (Bm, Hm, Rq) (masks.mask_dims), None: no attn_mask
    lut_strides: tuple[int, int] = (0, 0)   # the bound (lut_stride_b, lut_stride_h): what execute's LUT must have
    # `launch` with the prepared fields bound to a Staged workspace (sage_attention's own prepare, execute(own=True))
    launch_own: BoundLaunch | None = None


# the attention kernel's prepared inputs -> the SagePrepared / prepare-workspace buffer each one reads
PREPARED_FIELDS = {"q": "q_int8", "k": "k_int8", "v": "v_t", "q_scale": "q_scale", "k_scale": "k_scale",
                   "k_mean": "k_mean", "v_scale": "v_scale", "v_mean": "v_mean"}


def _lut_strides(sh: validate.Shapes, has_block_mask: bool, mask_dims=None) -> tuple[int, int]:
    """masks.build_lut's (stride_b, stride_h): a block_mask has every (batch, head) row, an attn_mask the rows of
    its own batch / head dims, the causal / dense LUT one row set shared by all (strides 0)."""
    Bm, Hm, _ = mask_dims if mask_dims is not None else (1, 1, 1)
    Ba = sh.B if (has_block_mask or Bm > 1) else 1
    Ha = sh.H_q if (has_block_mask or Hm > 1) else 1
    row = masks.n_tiles(sh.S_q, masks.BLOCK_Q) * (masks.n_tiles(sh.S_kv, masks.BLOCK_KV) + 1)
    return (Ha * row if Ba > 1 else 0), (row if Ha > 1 else 0)


def _check_mask_reach(sh: validate.Shapes, mask_dims) -> None:
    """The kernels index the attn_mask bit rows with 32-bit word offsets (bias rows: x 32 floats, 64-bit bases, 32-bit
    lane offsets within a wave's 16 rows)."""
    Bm, Hm, Rq = mask_dims
    sb, sh_, ss = masks.mask_word_strides(Bm, Hm, Rq, sh.S_q, sh.S_kv)
    W = s_pad(sh.S_kv) // abi.MASK_WORD_BITS
    words = Bm * Hm * (s_pad(sh.S_q) if Rq > 1 else 1) * W
    if words >= U32 or (WAVE_ROWS * ss + W) * abi.MASK_WORD_BITS * 4 >= U32:
        raise ValueError(f"attn_mask: a [{Bm}, {Hm}, {Rq}, {sh.S_kv}] mask is too large for the kernels' 32-bit mask "
                         f"offsets ({words} bit words); split the call")


def recipe(sh: validate.Shapes, opts, *, backend: str, has_lse_corr: bool = False, staged: tuple = (),
           device: torch.device | None = None) -> AttentionRecipe:
    """The attention launch for checked shapes and options: the query-head and 32-bit reach limits, the shipped
    kernel for (kernel, D_pad, out dtype, pv_dtype), bound to its grid and scalar kernargs. `opts`: the call's typed
    options (sage_co.callspec OpSpec.typed: layout, return_lse, kernel, pv_dtype, block_mask, attn_mask and the
    options of abi.FLAG_OPTIONS, which make the kernarg flags). `backend` is resolved. attn_mask (checked): only its
    shape is read here (the mask strides, the LUT's). has_lse_corr: the host adds smooth_k's lse term
    (SagePrepared.lse_corr), so the kernel does not. staged: the prepare's mode-1 workspace fields
    (ops.prepare.BufferPlan.workspace[1]) of a call that prepares its own inputs (sage_attention): launch_own reads
    them from a Staged's workspace. device (the call's): the pointers that do not change between calls are bound
    into the launches (static): cu_seqlens (not read without abi.FLAG_VARLEN), lse without return_lse (never
    written) and, without a block_mask or attn_mask, the cached LUT."""
    layout, return_lse, is_causal, attn_mask = opts.layout, opts.return_lse, opts.is_causal, opts.attn_mask
    has_block_mask = opts.block_mask is not None
    pv_dtype = opts.pv_dtype
    check_query_heads(sh.H_q)
    mask_dims = None if attn_mask is None else masks.mask_dims(attn_mask, sh.B, sh.H_q, sh.S_q)
    if mask_dims is not None:
        _check_mask_reach(sh, mask_dims)
    strides = _out_strides(sh, layout)
    _check_reach(sh, strides)
    shipped = _shipped(opts, backend, device, served_kernel(opts.kernel, sh.D, pv_dtype), head_dim=d_pad(sh.D),
                       out_dtype=DTYPE_KEYS[sh.dtype], pv_dtype=pv_dtype)
    flags = _flags(opts, has_lse_corr)
    Sq_pad, Skv_pad = s_pad(sh.S_q), s_pad(sh.S_kv)
    scalars = {
        "seq_len_q": sh.S_q, "seq_pad_q": Sq_pad, "seq_len_kv": sh.S_kv, "seq_pad_kv": Skv_pad,
        "num_heads_q": sh.H_q, "num_heads_kv": sh.H_kv, "kv_group_magic": kv_group_magic(sh.H_q // sh.H_kv),
        "out_stride_b": strides[0], "out_stride_s": strides[1], "out_stride_h": strides[2], "head_dim": sh.D,
        "flags": flags, "causal_offset": sh.S_kv - sh.S_q,
    }
    scalars["lut_stride_b"], scalars["lut_stride_h"] = _lut_strides(sh, has_block_mask, mask_dims)
    scalars["mask_stride_b"], scalars["mask_stride_h"], scalars["mask_stride_s"] = \
        masks.mask_word_strides(*mask_dims, sh.S_q, sh.S_kv) if mask_dims is not None else (0, 0, 0)
    out_shape = (sh.B, sh.S_q, sh.H_q, sh.D) if layout == "NHD" else (sh.B, sh.H_q, sh.S_q, sh.D)
    # Without return_lse the kernel never touches lse; it still gets a valid (tiny) allocation.
    lse_shape = (sh.B, sh.H_q, sh.S_q) if return_lse else (1,)
    geometry = (Sq_pad // QUERY_TILE, sh.H_q, sh.B)
    static = {}
    if device is not None:
        static = dict.fromkeys(("cu_seqlens_q", "cu_seqlens_kv") + (() if return_lse else ("lse",)), _no_lse(device))
        if not has_block_mask and mask_dims is None:
            lut, _, _, kinds, bits, bias = _maskless_lut(sh.S_q, sh.S_kv, is_causal, device)
            static.update(lut=lut, mask_kind=kinds, mask_bits=bits, mask_bias=bias)
    bound = BoundLaunch(shipped.symbol, ATTENTION_FWD_ARGS, geometry, BLOCK, scalars, backend=backend, static=static)
    own = None
    if staged:
        at = {name: (off, n) for name, off, n in staged}
        own = BoundLaunch(shipped.symbol, ATTENTION_FWD_ARGS, geometry, BLOCK, scalars, backend=backend,
                          workspace=[(field, *at[buf]) for field, buf in PREPARED_FIELDS.items() if buf in at],
                          static=static)
    return AttentionRecipe(shipped, bound, out_shape, lse_shape, sh.dtype, sh, is_causal, return_lse, mask_dims,
                           (scalars["lut_stride_b"], scalars["lut_stride_h"]), own)


def _flags(opts, has_lse_corr: bool) -> int:
    """The kernarg flags of a call: abi.option_flags (the option -> flag table), and with return_lse the kernel's own
    smooth_k term unless the host adds it: with has_lse_corr (prepared.lse_corr, made by every sage_prepare with
    smooth_k) execute adds it after the kernel, from the original q (docs/numerics.md §LSE); otherwise the kernel adds
    ln2 * q_f . k_mean (k_mean is all zero without smooth_k, so adding it is exact: x + ln2 * (+-0) == x)."""
    flags = abi.option_flags(opts)
    if flags & FLAG_LSE and not has_lse_corr:
        flags |= FLAG_SMOOTH_K
    return flags


_luts: dict[tuple, tuple] = {}   # (S_q, S_kv, is_causal, device) -> tile_lut's answer without a mask


def tile_lut(rec: AttentionRecipe, block_mask: torch.Tensor | None, device: torch.device, attn_mask=None):
    """(lut, stride_b, stride_h, mask_kind, mask_bits, mask_bias): the LUT of the key tiles each query tile visits and
    the kind of each entry (docs/numerics.md §Masks). Without a block_mask or attn_mask it depends only on (S_q,
    S_kv, is_causal) and is shared by every (batch, head) (strides 0; kinds all full): built once per shape and
    device and kept (the kernels only read it). With an attn_mask the tiles are classified by torch ops on its
    device (masks.attn_mask_tiles: no read-back)."""
    sh = rec.shapes
    if attn_mask is not None:
        vis, bias = masks.attn_mask_parts(attn_mask, sh.B, sh.H_q, sh.S_q, sh.S_kv)
        any_vis, kind = masks.attn_mask_tiles(vis, bias, sh.S_q, sh.S_kv)
        active = masks.active_tiles(sh.B, sh.H_q, sh.S_q, sh.S_kv, is_causal=rec.is_causal, block_mask=block_mask,
                                    device=device, mask_visible=any_vis)
        lut, sb, sh_ = masks.build_lut(active)
        bits = masks.pack_bits(vis, sh.S_q, sh.S_kv)
        bias_rows = masks.pack_bias(bias, sh.S_q, sh.S_kv) if bias is not None else bits   # bool: never read
        return lut, sb, sh_, masks.gather_kinds(active, kind), bits, bias_rows
    if block_mask is not None:
        active = masks.active_tiles(sh.B, sh.H_q, sh.S_q, sh.S_kv, is_causal=rec.is_causal, block_mask=block_mask,
                                    device=device)
        lut, sb, sh_ = masks.build_lut(active)
        kinds = torch.zeros_like(lut)
        return lut, sb, sh_, kinds, kinds, kinds
    return _maskless_lut(sh.S_q, sh.S_kv, rec.is_causal, device)


def _maskless_lut(S_q: int, S_kv: int, is_causal: bool, device: torch.device) -> tuple:
    """tile_lut's answer without a block_mask or attn_mask (one row set shared by every batch and head), built once per
    (S_q, S_kv, is_causal, device) and kept."""
    key = (S_q, S_kv, is_causal, device)
    hit = _luts.get(key)
    if hit is None:
        if len(_luts) >= _LUT_CACHE:
            _luts.clear()
        lut, sb, sh_ = masks.build_lut(masks.active_tiles(1, 1, S_q, S_kv, is_causal=is_causal, device=device))
        kinds = torch.zeros_like(lut)
        hit = _luts[key] = (lut, sb, sh_, kinds, kinds, kinds)   # kinds all full; bits / bias never read
    return hit


_no_lse_buffers: dict[torch.device, torch.Tensor] = {}


def _no_lse(device: torch.device) -> torch.Tensor:
    """The lse pointer of a launch without return_lse: the kernel never touches it (no abi.FLAG_LSE), so one
    1-element fp32 buffer per device serves every such launch (execute's callers drop it)."""
    t = _no_lse_buffers.get(device)
    if t is None:
        t = _no_lse_buffers[device] = torch.zeros(1, dtype=torch.float32, device=device)
    return t


def execute(rec: AttentionRecipe, prepared, block_mask: torch.Tensor | None = None,
            attn_mask: torch.Tensor | None = None, own: bool = False):
    """Run the planned attention launch on `prepared` (checked against the recipe by whoever planned it):
    (out, lse) with lse [B, H_q, S_q] fp32 when rec.return_lse, else a 1-element placeholder (shared: never
    written). prepared: a caller's SagePrepared (its tensors get every launch check), or with own=True the
    ops.prepare.Staged of sage_attention's own prepare (its workspace is the op's own: rec.launch_own)."""
    device = prepared.workspace.device if own else prepared.q_int8.device
    bound = rec.launch_own if own else rec.launch
    out = torch.empty(*rec.out_shape, dtype=rec.out_dtype, device=device)
    lse = torch.empty(*rec.lse_shape, dtype=torch.float32, device=device) if rec.return_lse else _no_lse(device)
    assert (attn_mask is None) == (rec.mask_dims is None)
    # out, lse and the LUT are the op's own (only their alignment checked); what recipe bound into the launch
    # (static: the maskless LUT, lse without return_lse, cu_seqlens) is not given again
    static = bound.static
    fresh = {"out": out}
    if "lse" not in static:
        fresh["lse"] = lse
    if "lut" not in static:
        lut, lut_sb, lut_sh, kinds, bits, bias = tile_lut(rec, block_mask, device, attn_mask)
        assert (lut_sb, lut_sh) == rec.lut_strides
        fresh.update(lut=lut, mask_bits=bits, mask_bias=bias, mask_kind=kinds)
        if "cu_seqlens_q" not in static:   # read only by varlen launches (abi.FLAG_VARLEN): any valid pointer
            fresh["cu_seqlens_q"] = fresh["cu_seqlens_kv"] = lut
    if own:   # the prepared fields from the Staged workspace; k_mean a tensor of its own with smooth_k
        inputs, workspace = _NONE, prepared.workspace
        if prepared.k_mean is not None:
            fresh["k_mean"] = prepared.k_mean
    else:     # a caller's prepared tensors: checked at the launch
        workspace = None
        inputs = {
            "q": prepared.q_int8, "k": prepared.k_int8, "v": prepared.v_t,
            "q_scale": prepared.q_scale, "k_scale": prepared.k_scale, "k_mean": prepared.k_mean,
            "v_scale": prepared.v_scale,
            # smooth_v: the epilogue adds v_mean back; without it the kernel never reads this pointer
            "v_mean": prepared.v_mean if prepared.v_mean is not None else prepared.k_mean,
        }
    launch(bound.symbol, ATTENTION_FWD_ARGS, bound.grid, BLOCK, bound.args(inputs, fresh, workspace),
           backend=bound.backend)
    if rec.return_lse and prepared.lse_corr is not None:
        assert not bound.scalars["flags"] & FLAG_SMOOTH_K    # planned with has_lse_corr: the kernel left it out
        lse = lse + prepared.lse_corr     # the same fp32 add as reference.sage_attention_model
    return out, lse


_NONE: dict = {}   # no caller tensors (never mutated)


# ---------------------------------------------------------------------------------------------- varlen
def varlen_recipe(opts, *, batch: int, max_seqlen_q: int, total_q: int, total_kv: int, H_q: int, H_kv: int,
                  D: int, dtype: torch.dtype, backend: str, device: torch.device | None = None) -> AttentionRecipe:
    """The one attention launch of a varlen call (docs/numerics.md §Varlen) over a PackedPrepared: grid
    (ceil(max_seqlen_q / 64), H_q, batch) as flash-attention sizes it, the flags of `opts` (the call's typed
    options: abi.option_flags, as recipe) and FLAG_VARLEN; each workgroup reads its sequence's lengths from
    cu_seqlens on the device. Out is the packed [total_q, H_q, D], lse [H_q, total_q]. device: the call's (the
    schedule's resolution, resolved_schedule)."""
    return_lse, is_causal, pv_dtype = opts.return_lse, opts.is_causal, opts.pv_dtype
    check_query_heads(H_q)
    strides = (0, H_q * D, D)        # out [total_q, H_q, D]: row cu_q[b] + i (out_stride_b unused)
    R_q, R_kv = abi.packed_rows(total_q, batch), abi.packed_rows(total_kv, batch)
    Dp = d_pad(D)
    for name, R in (("q_int8", R_q), ("k_int8", R_kv)):
        if R * Dp >= U32:
            raise ValueError(f"prepared.{name}: one head of {R} packed rows x {Dp} bytes must stay below 4 GiB "
                             f"(the kernel's 32-bit offsets)")
    if max(strides) >= U32 or WAVE_ROWS * strides[1] * 2 >= U32 or total_q * H_q >= U32:
        raise ValueError(f"q: {total_q} packed rows of {H_q} x {D} are too large for the kernel's 32-bit offsets")
    shipped = _shipped(opts, backend, device, opts.kernel, head_dim=Dp, out_dtype=DTYPE_KEYS[dtype],
                       pv_dtype=pv_dtype)
    flags = _flags(opts, opts.smooth_k) | abi.FLAG_VARLEN   # the host adds smooth_k's lse term (lse_corr)
    scalars = {
        # seq_len_q: the lse row stride (total_q); seq_len_kv / causal_offset: replaced per sequence in the kernel
        "seq_len_q": total_q, "seq_pad_q": R_q, "seq_len_kv": total_kv, "seq_pad_kv": R_kv,
        "num_heads_q": H_q, "num_heads_kv": H_kv, "kv_group_magic": kv_group_magic(H_q // H_kv),
        "out_stride_b": strides[0], "out_stride_s": strides[1], "out_stride_h": strides[2], "head_dim": D,
        "flags": flags, "causal_offset": 0, "lut_stride_b": 0, "lut_stride_h": 0,
        # varlen and attn_mask are exclusive (sage_co.varlen refuses attn_mask): no mask field is read
        "mask_stride_b": 0, "mask_stride_h": 0, "mask_stride_s": 0,
    }
    grid = (max(1, -(-max_seqlen_q // QUERY_TILE)), H_q, batch)
    bound = BoundLaunch(shipped.symbol, ATTENTION_FWD_ARGS, grid, BLOCK, scalars, backend=backend)
    sh = validate.Shapes(batch, max_seqlen_q, 0, H_q, H_kv, D, dtype)
    return AttentionRecipe(shipped, bound, (total_q, H_q, D), (H_q, total_q) if return_lse else (1,), dtype, sh,
                           is_causal, return_lse)


def execute_varlen(rec: AttentionRecipe, packed) -> tuple[torch.Tensor, torch.Tensor]:
    """Run a varlen_recipe launch on a sage_co.prepared.PackedPrepared: (out [total_q, H_q, D], lse [H_q, total_q]
    or a 1-element placeholder). Every output row belongs to some sequence (cu_seqlens covers 0..total_q, the
    caller's contract), so every row of out (and of lse) is written."""
    device = packed.q_int8.device
    out = torch.empty(rec.out_shape, dtype=rec.out_dtype, device=device)
    lse = torch.empty(rec.lse_shape, dtype=torch.float32, device=device)
    bound = rec.launch
    cu_q = packed.cu_seqlens_q
    launch(bound.symbol, ATTENTION_FWD_ARGS, bound.grid, BLOCK, bound.args({
        "q": packed.q_int8, "k": packed.k_int8, "v": packed.v_t, "q_scale": packed.q_scale,
        "k_scale": packed.k_scale, "k_mean": packed.k_mean, "v_scale": packed.v_scale,
        "v_mean": packed.v_mean if packed.v_mean is not None else packed.k_mean,
        "cu_seqlens_q": cu_q, "cu_seqlens_kv": packed.cu_seqlens_kv,
    }, {"out": out, "lse": lse,
        # not read with FLAG_VARLEN (no LUT, no attn_mask): any valid pointer
        "lut": cu_q, "mask_bits": cu_q, "mask_bias": cu_q, "mask_kind": cu_q}), backend=bound.backend)
    if rec.return_lse and packed.lse_corr is not None:
        lse = lse + packed.lse_corr
    return out, lse
