"""Host side of the prepare stage: q [B, S_q, H_q, D], k/v [B, S_kv, H_kv, D] (bf16, fp16 or fp32, NHD or HND, any
strides with a contiguous last dim) in, SagePrepared out (docs/numerics.md §Prepare).

One launch of asm_src/gfx1201_sage_prepare.hip (its header comment has the design; issue 28: it was two), a 1-D
grid of one wave32 per work item, the items claimed in order through a ticket counter
(docs/rdna4.md §Forward progress):
  stats items  (n_chunks or 1) x H_kv x B * n_tens, one per chunk of 32-token tiles: per-channel max |v| partials
               (smooth_v: max v and min v, and the sums of V), and with smooth_k the per-channel sums of the
               (normed/roped) K rows; the last item of each (b, K/V head) (an atomic counter per head, from
               counters(): fresh and zeroed on the stream for every launch) folds them in chunk order into v_scale, 1/v_scale (448 / amax, a workspace), k_mean and
               v_mean. pv_dtype="fp16" without smooth_k: no statistics, one item per head that writes its zeros.
  tiles        every batch's Q tiles, then per batch H_kv * S_kv_pad/32 K tiles and as many V tiles; a K or V tile
               waits for its head's fold.
One manifest row per (head_dim = D_pad, in_dtype, rope_dim, rounding), selected by those keys (the symbol takes the
RoPE width as the kernarg rope_dim: sage_co/abi.py PREPARE_ROPE_IN_SYMBOL); rounding =
norm_rope_rounding ("once" reads fp32 cos/sin tables: one in the input dtype is upcast here, exactly).
The inputs are read in place: each kernel gets a flat view of the tensor's memory and its element strides, so an
HND view of NHD memory (or any other strided view) costs no copy. Only a view the 16-byte vector loads cannot
address (data not 16-byte aligned, or a stride that is not a multiple of 8 elements, 4 for fp32) is copied first,
and a head dim that is not a multiple of abi.HEAD_DIM_GRANULE (8) is zero-padded to one in that copy (the kernels
read whole 8-channel groups; the padded channels are zero in the prepared tensors either way).
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from .. import registry, validate
from ..abi import (HEAD_DIM_GRANULE, PREPARE_ALIGN, PREPARE_MAX_CHUNKS, REDUCE_V_FP8, REDUCE_V_NONE, REDUCE_V_SMOOTH,
                   STATS_K_SUM, STATS_V_MAX, STATS_V_SIGNED, STATS_V_SUM)
from ..abi import PREPARE_ARGS, PREPARE_OP  # the struct lives in sage_co/abi.py
from ..abi import HEAD_DIM_MAX, PREPARE_HEAD_DIMS, d_granule
from ..launch import BoundLaunch, FlatView, launch
from ..abi import packed_rows
from ..prepared import DTYPE_KEYS, SCALE_BLOCK, PackedPrepared, SagePrepared, d_pad, s_pad
from ..reference import norm_rope, q_multiplier, smooth_k_lse_correction, smooth_k_lse_correction_packed

WAVE = (32, 1, 1)  # one wave32 per workgroup (work item)
MAX_CHUNKS = PREPARE_MAX_CHUNKS
ALIGN = PREPARE_ALIGN


def _elems_per_load(t: torch.Tensor) -> int:
    """Elements of t per 16-byte load (8 of bf16/fp16, 4 of fp32): its strides must be multiples of this."""
    return ALIGN // t.element_size()


def kernel_symbol(op: str, **keys) -> str:
    """The symbol of the shipped kernel serving `op` with exactly these manifest key columns (head_dim, in_dtype,
    rope_dim): sage_co.registry.find, the one lookup every launch goes through."""
    return registry.find(op, "hip", **keys).symbol


def chunking(S: int) -> tuple[int, int]:
    """(tiles_per_chunk, n_chunks) for the stats pass over the ceil(S / 32) tiles that hold valid tokens."""
    tiles = -(-S // SCALE_BLOCK)
    per_chunk = -(-tiles // MAX_CHUNKS)
    return per_chunk, -(-tiles // per_chunk)


def alloc(*shape, dtype, device) -> torch.Tensor:
    """Every output and workspace tensor: torch.empty, so the kernels must write every byte (tests replace this
    with an allocator that fills the memory with garbage to prove it)."""
    return torch.empty(*shape, dtype=dtype, device=device)


# execute's output and workspace buffers (the kernel's pointer fields of those names)
BUFFERS = ("q_int8", "k_int8", "q_scale", "k_scale", "k_mean", "v_scale", "v_inv", "v_mean", "v_t", "vmax_part",
           "ksum_part", "vmin_part", "vsum_part")
_REGION_ALIGN = 256   # workspace fields start on 256-byte boundaries (the kernels need 16: docs/rdna4.md §Alignment)


class BufferPlan(NamedTuple):
    """How execute gets its buffers for one call shape, per mode (index 0: the SagePrepared is returned to the
    caller; 1: internal, it never leaves the op -- sage_attention's prepare stage): the fields that live in the
    call's one workspace allocation ((name, byte offset, nbytes), bound into that mode's BoundLaunch), the
    workspace's bytes, and the buffers that are tensors of their own ((name, shape, dtype)); `absent`: the
    statistics fields that get the placeholder (their statistic does not run)."""
    workspace: tuple[tuple, tuple]
    total: tuple[int, int]
    apart: tuple[tuple, tuple]
    absent: tuple[str, ...]


def buffer_plan(sh: validate.Shapes, n_chunks: int, *, pv16: bool, smooth_k: bool, smooth_v: bool) -> BufferPlan:
    """The BufferPlan of a call shape. A buffer the host reads, or the caller gets in SagePrepared, is a tensor of
    its own (mode 0: q_int8 .. v_t, v_mean with smooth_v; both modes: k_mean with smooth_k, which lse_corr reads
    here); the others (v_inv, the statistics partials, v_mean without smooth_v, and in mode 1 every returned one)
    live in one workspace: one allocation per call instead of one tensor per buffer."""
    B, H_q, H_kv, Dp = sh.B, sh.H_q, sh.H_kv, d_pad(sh.D)
    Sq, Skv = s_pad(sh.S_q), s_pad(sh.S_kv)
    f32, part = torch.float32, (B, H_kv, n_chunks, Dp)
    specs = {"q_int8": ((B, H_q, Sq, Dp), torch.int8), "k_int8": ((B, H_kv, Skv, Dp), torch.int8),
             "q_scale": ((B, H_q, Sq // SCALE_BLOCK), f32), "k_scale": ((B, H_kv, Skv // SCALE_BLOCK), f32),
             "k_mean": ((B, H_kv, Dp), f32), "v_scale": ((B, H_kv, Dp), f32), "v_inv": ((B, H_kv, Dp), f32),
             "v_mean": ((B, H_kv, Dp), f32),
             "v_t": ((B, H_kv, Dp, Skv), torch.float16 if pv16 else torch.float8_e4m3fn),
             "vmax_part": None if pv16 else (part, f32), "ksum_part": (part, f32) if smooth_k else None,
             "vmin_part": (part, f32) if smooth_v else None, "vsum_part": (part, f32) if smooth_v else None}
    returned = {"q_int8", "k_int8", "q_scale", "k_scale", "k_mean", "v_scale", "v_t"} | \
        ({"v_mean"} if smooth_v else set())
    host_read = {"k_mean"} if smooth_k else set()
    workspaces, totals, aparts = [], [], []
    for own_tensors in (returned | host_read, host_read):
        fields, offset = [], 0
        for n in BUFFERS:
            if specs[n] is None or n in own_tensors:
                continue
            shape, dtype = specs[n]
            nbytes = dtype.itemsize
            for d in shape:
                nbytes *= d
            fields.append((n, offset, nbytes))
            offset += -(-nbytes // _REGION_ALIGN) * _REGION_ALIGN
        workspaces.append(tuple(fields))
        totals.append(offset)
        aparts.append(tuple((n, *specs[n]) for n in BUFFERS if specs[n] is not None and n in own_tensors))
    return BufferPlan(tuple(workspaces), tuple(totals), tuple(aparts), tuple(n for n in BUFFERS if specs[n] is None))


def buffers(rec: "PrepareRecipe", device: torch.device, internal: bool = False
            ) -> tuple[torch.Tensor | None, dict]:
    """(the workspace, {name: tensor}) of one execute on `device` as rec.buffers plans them (internal: mode 1):
    the workspace (None when no field lives in one) holds the bound workspace fields; the dict has every other
    buffer (alloc). (The absent statistics' placeholder is bound into the launch: recipe's static fields.)"""
    plan, mode = rec.buffers, int(internal)
    total = plan.total[mode]
    workspace = alloc(total, dtype=torch.uint8, device=device) if total else None
    return workspace, {name: alloc(*shape, dtype=dtype, device=device) for name, shape, dtype in plan.apart[mode]}


class Staged(NamedTuple):
    """What execute(internal=True) hands the attention launch (sage_attention's own prepare, never returned):
    the workspace with every prepared buffer at rec.buffers' mode-1 offsets (AttentionRecipe.launch_own is bound
    to them), k_mean as a tensor of its own with smooth_k (else None: in the workspace), and lse_corr."""
    workspace: torch.Tensor
    k_mean: torch.Tensor | None
    lse_corr: torch.Tensor | None


def _aligned(t: torch.Tensor | None) -> torch.Tensor | None:
    """A contiguous tensor whose data starts on a 16-byte boundary (a copy only for an offset view)."""
    if t is None or t.data_ptr() % ALIGN == 0:
        return t
    out = torch.empty_like(t, memory_format=torch.contiguous_format)
    if out.data_ptr() % ALIGN:
        raise RuntimeError(f"torch allocated a tensor at {out.data_ptr():#x}, not {ALIGN}-byte aligned")
    return out.copy_(t)


def _granule_padded(t: torch.Tensor) -> torch.Tensor:
    """t with its head dim zero-padded to a multiple of HEAD_DIM_GRANULE (a contiguous copy; t itself when D already
    is one): the kernels read whole 16-byte channel groups (docs/numerics.md §Inputs)."""
    D = t.shape[-1]
    if D % HEAD_DIM_GRANULE == 0:
        return t
    return torch.nn.functional.pad(t, (0, d_granule(D) - D)).contiguous()


def flat_view(t: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """An NHD view t [B, S, H, D] (stride(-1) == 1) -> (a contiguous 1-D view of the memory it spans, starting at
    its first element, and its (batch, token, head) element strides). No copy unless the 16-byte loads cannot
    address it (see the module docstring) or D is not a multiple of HEAD_DIM_GRANULE (then the copy is zero-padded
    to one); strides of size-1 dims are 0 (never multiplied by a nonzero index)."""
    t = _granule_padded(t)
    strides = tuple(st if n > 1 else 0 for n, st in zip(t.shape[:3], t.stride()[:3]))
    if t.data_ptr() % ALIGN or any(st % _elems_per_load(t) for st in strides):
        t = _aligned(t.contiguous()) if t.is_contiguous() else t.contiguous()
        t = _aligned(t)
        strides = tuple(st if n > 1 else 0 for n, st in zip(t.shape[:3], t.stride()[:3]))
    extent = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    return t.as_strided((extent,), (1,)), strides


_TABLES = ("q_norm_w", "k_norm_w", "cos", "sin")   # the kernel's optional table pointers


def _flat(t: torch.Tensor, extent: int | None):
    """What a kernel gets for the NHD view t (PrepareRecipe.extents): read in place, the lazy 1-D view of its
    `extent` elements (launch.FlatView: no view op per call on the fast path); else flat_view's copy."""
    return FlatView((t, extent)) if extent is not None else flat_view(t)[0]


def _strides(t: torch.Tensor) -> tuple[int, int, int]:
    return tuple(st if n > 1 else 0 for n, st in zip(t.shape[:3], t.stride()[:3]))


def _reading(t: torch.Tensor) -> tuple[int | None, tuple[int, int, int]]:
    """How the kernels read the NHD view t: (extent, strides) in place when the 16-byte loads can address it, else
    (None, the strides of the contiguous copy flat_view makes per call)."""
    strides = _strides(t)
    if t.data_ptr() % ALIGN or any(st % _elems_per_load(t) for st in strides) or t.shape[-1] % HEAD_DIM_GRANULE:
        B, S, H, D = t.shape
        D = d_granule(D)   # flat_view's copy is zero-padded to whole channel groups
        return None, tuple(st if n > 1 else 0 for n, st in zip((B, S, H), (S * H * D, H * D, D)))
    return 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride())), strides


class PrepareRecipe(NamedTuple):
    """The prepare launch of one call shape (cached by sage_co.plan for repeated shapes): the launch bound to its
    kernel, grid and scalar kernargs, the output shapes, and how each input is read (in place: its extent; None:
    flat_view copies it per call)."""
    shapes: validate.Shapes
    prepare: BoundLaunch
    n_chunks: int
    pv16: bool
    smooth_k: bool
    smooth_v: bool
    extents: tuple            # q, k, v: the in-place extent, or None (copied per call)
    fp32_tables: bool         # norm_rope_rounding "once": the kernels read fp32 cos/sin (an input-dtype table upcast)
    # for SagePrepared.lse_corr (smooth_k): the host-side norm / RoPE spec of q and the softmax scale
    eps: float
    rope_dim: int | None
    norm_rope_rounding: str
    softmax_scale: float
    buffers: BufferPlan | None = None   # how execute gets its buffers (buffer_plan; None: packed, execute_varlen)
    prepare_internal: BoundLaunch | None = None   # `prepare` bound to mode 1's workspace (execute(internal=True))


def _strided(prefix: str, st) -> dict:
    return {f"{prefix}_sb": st[0], f"{prefix}_ss": st[1], f"{prefix}_sh": st[2]}


def recipe(chk: validate.Checked, opts, *, backend: str, packed: tuple[int, int] | None = None) -> PrepareRecipe:
    """The prepare launch for checked arguments (validate.check_prepare_args) and the call's typed options (sage_co.
    callspec OpSpec.typed: smooth_k, eps, smooth_v, pv_dtype, norm_rope_rounding, q_norm_weight / k_norm_weight
    given or not): the launch limits, the shipped kernel for (D_pad, dtype, rope_dim, rounding), bound to its grid
    and scalar kernargs.

    packed = (total_q, total_kv): a varlen prepare (docs/numerics.md §Varlen) of chk.shapes.B packed sequences with
    S_q / S_kv = the caller's max_seqlen_q / max_seqlen_kv (chk.q/k/v the [1, total, H, D] views): the same
    launch, sized from the maxima (every kernel reads its sequence's lengths from cu_seqlens on the device), the
    outputs in the packed layout (execute_varlen)."""
    smooth_k, eps, smooth_v, pv_dtype = opts.smooth_k, opts.eps, opts.smooth_v, opts.pv_dtype
    has_q_norm, has_k_norm = opts.q_norm_weight is not None, opts.k_norm_weight is not None
    norm_rope_rounding = opts.norm_rope_rounding
    sh = chk.shapes
    check_launch_limits(sh)
    if d_pad(sh.D) not in PREPARE_HEAD_DIMS:
        raise ValueError(f"q: the prepare kernels are built for head dims up to {max(PREPARE_HEAD_DIMS)}, got D = "
                         f"{sh.D} (shape {tuple(chk.q.shape)}); sage_co.reference.sage_prepare prepares any D up to "
                         f"{HEAD_DIM_MAX} for sage_attention_fwd (docs/performance.md §Head dim 256)")
    pv16 = pv_dtype == "fp16"
    B, H_q, H_kv, D = sh.B, sh.H_q, sh.H_kv, sh.D
    Sq, Skv, Dp = s_pad(sh.S_q), s_pad(sh.S_kv), d_pad(D)
    Dg = d_granule(D)   # the channels the kernels read: q/k/v of another D are zero-padded to it (flat_view)
    keys = dict(head_dim=Dp, in_dtype=DTYPE_KEYS[sh.dtype], rope_dim=chk.rope_dim or 0, rounding=norm_rope_rounding)
    per_chunk, n_chunks = chunking(sh.S_kv)
    varlen = int(packed is not None)
    rows_q, rows_kv = (packed_rows(packed[0], B), packed_rows(packed[1], B)) if packed else (Sq, Skv)
    if packed:   # each sequence chunks its own length (in the kernels): room for the most chunks any one needs
        n_chunks = min(MAX_CHUNKS, -(-sh.S_kv // SCALE_BLOCK))
    tens = (0 if pv16 else STATS_V_MAX) | (STATS_K_SUM if smooth_k else 0) | \
        ((STATS_V_SUM | STATS_V_SIGNED) if smooth_v else 0)
    n_tens = bin(tens & (STATS_V_MAX | STATS_K_SUM | STATS_V_SUM)).count("1")
    (qe, qs), (ke, ks), (ve, vs) = (_reading(t) for t in (chk.q, chk.k, chk.v))
    eps = float(eps)
    # pv fp16 without smooth_k needs no statistics: one item per head that only writes the fold's zeros
    stats_x, wg_tens = (n_chunks, n_tens) if n_tens else (1, 1)
    n_stats, n_items = stats_items(sh, stats_x, wg_tens), items(sh, stats_x, wg_tens)
    # execute_varlen (packed) allocates its own packed buffers: no buffer plan, no workspace fields
    buf = None if packed else buffer_plan(sh, n_chunks, pv16=pv16, smooth_k=smooth_k, smooth_v=smooth_v)
    symbol, scalars = kernel_symbol(PREPARE_OP, **keys), {
        "q_mult": q_multiplier(chk.softmax_scale), "eps": eps, "S_q": sh.S_q, "S_kv": sh.S_kv, "H_q": H_q,
        "H_kv": H_kv, "S_q_pad": Sq, "S_kv_pad": Skv, "D": Dg, "q_norm": int(has_q_norm), "k_norm": int(has_k_norm),
        "pv_fp16": int(pv16), **_strided("q", qs), **_strided("k", ks), **_strided("v", vs), "varlen": varlen,
        "rows_q": rows_q, "rows_kv": rows_kv, "tiles_per_chunk": per_chunk, "n_chunks": n_chunks,
        "n_tens": wg_tens, "tens": tens, "n_wg": stats_x * wg_tens, "smooth_k": int(smooth_k),
        "v_mode": REDUCE_V_NONE if pv16 else (REDUCE_V_SMOOTH if smooth_v else REDUCE_V_FP8), "stats_x": stats_x,
        "n_stats": n_stats, "n_items": n_items, "B": B, "rope_dim": keys["rope_dim"]}

    # Not packed: the placeholder's fields are bound once (static): the absent tables and statistics, cu_seqlens
    static = {}
    if buf is not None:
        given = {"q_norm_w": has_q_norm, "k_norm_w": has_k_norm, "cos": chk.rope_dim is not None,
                 "sin": chk.rope_dim is not None}
        static = dict.fromkeys([*(n for n in _TABLES if not given[n]), "cu_seqlens_q", "cu_seqlens_kv",
                                *buf.absent], _placeholder(chk.q.device))

    def bound(mode: int) -> BoundLaunch:
        return BoundLaunch(symbol, PREPARE_ARGS, (n_items, 1, 1), WAVE, scalars, backend=backend,
                           workspace=buf.workspace[mode] if buf is not None else (), static=static)
    return PrepareRecipe(sh, bound(0), n_chunks, pv16, smooth_k, smooth_v, (qe, ke, ve),
                         norm_rope_rounding == "once", eps, chk.rope_dim, norm_rope_rounding, chk.softmax_scale,
                         buf, bound(1) if buf is not None else None)


_placeholders: dict[torch.device, torch.Tensor] = {}


def _placeholder(device: torch.device) -> torch.Tensor:
    """A 16-byte buffer for pointers a kernel never dereferences (shared: nothing reads or writes it)."""
    t = _placeholders.get(device)
    if t is None:
        t = _placeholders[device] = torch.zeros(ALIGN, dtype=torch.uint8, device=device)
    return t


def counters(device: torch.device, heads: int) -> torch.Tensor:
    """The counters of ONE prepare launch, the ticket counter then one per (b, K/V head): 1 + heads u32 (int32
    here), a fresh allocation zeroed on the current stream right before the launch that uses them (torch's caching
    allocator and a memset on the launch's stream). So no two launches share counters -- not two streams, not two
    HIP graphs captured with default settings (each capture allocates from its own pool and records the memset as a
    node, so every replay starts from zeroed counters), not concurrent replays -- and a launch that stopped part-way
    (an aborted grid, an error) leaves nothing a later launch reads."""
    return torch.zeros(1 + heads, dtype=torch.int32, device=device)


def _launch_counted(bound: BoundLaunch, device: torch.device, heads: int, tensors: dict, fresh: dict,
                    workspace: torch.Tensor | None = None) -> None:
    """The prepare launch with its own zeroed counters (counters()) added to `fresh` (the caller's own dict
    literal, so no copy)."""
    fresh["counter"] = counters(device, heads)
    launch(bound.symbol, bound.struct, bound.grid, bound.block, bound.args(tensors, fresh, workspace),
           backend=bound.backend)


def execute(rec: PrepareRecipe, q, k, v, *, q_norm_weight=None, k_norm_weight=None, cos=None, sin=None,
            internal: bool = False) -> SagePrepared | Staged:
    """Run the planned prepare launches on q, k, v (NHD views, checked against the recipe by whoever planned
    it). Outputs are fresh tensors on q's device, padded rows/columns/channels zero. pv_dtype="fp16" refuses a V
    beyond the fp16 range before any kernel (fp16 V has no scale: docs/numerics.md §Finite range); with smooth_k
    the result carries lse_corr, the LSE term from the original (normed / roped) q (docs/numerics.md §LSE).
    internal: the result never leaves the op (sage_attention's own prepare): a Staged (every buffer in one
    workspace, buffers()) instead of a SagePrepared."""
    if rec.pv16:
        validate.check_v_fp16_range(v, "fp16")
    sh = rec.shapes
    lse_q = (q, q_norm_weight, cos, sin)   # the caller's tensors, before the kernel-side upcast and alignment
    B, H_kv = sh.B, sh.H_kv
    dev = q.device
    qf, kf, vf = map(_flat, (q, k, v), rec.extents)
    if rec.fp32_tables and cos is not None:   # the once kernels read fp32 tables (upcasting bf16/fp16 is exact)
        cos, sin = cos.float(), sin.float()
    if cos is not None or q_norm_weight is not None or k_norm_weight is not None:
        cos, sin, q_norm_weight, k_norm_weight = map(_aligned, (cos, sin, q_norm_weight, k_norm_weight))
    workspace, own = buffers(rec, dev, internal)
    # The caller's tensors (q, k, v and the given norm / RoPE tables) are checked at each launch; the op's own fresh
    # outputs (`own`) and workspace only for alignment (launch.BoundLaunch). The placeholder of an absent table,
    # cu_seqlens and an absent statistic is bound into the launch (recipe's static fields), as the workspace fields
    # are (rec.buffers).
    tensors = {"q": qf, "k": kf, "v": vf}
    if cos is not None or q_norm_weight is not None or k_norm_weight is not None:
        for n, t in (("q_norm_w", q_norm_weight), ("k_norm_w", k_norm_weight), ("cos", cos), ("sin", sin)):
            if t is not None:
                tensors[n] = t
    _launch_counted(rec.prepare_internal if internal else rec.prepare, dev, B * H_kv, tensors, own, workspace)
    lse_corr = None
    if rec.smooth_k:   # host side, in torch, from the original q (after the norm / RoPE spec the quant kernel applies)
        q0, w0, cos0, sin0 = lse_q
        qn = norm_rope(q0, w0, rec.eps, cos0, sin0, rec.rope_dim, rec.norm_rope_rounding)
        lse_corr = smooth_k_lse_correction(qn, own["k_mean"], rec.softmax_scale)
    if internal:
        return Staged(workspace, own.get("k_mean"), lse_corr)
    return SagePrepared(own["q_int8"], own["q_scale"], own["k_int8"], own["k_scale"], own["k_mean"], own["v_t"],
                        own["v_scale"], sh.S_q, sh.S_kv, sh.D, sh.dtype, own["v_mean"] if rec.smooth_v else None,
                        lse_corr)


def tiles(sh: validate.Shapes) -> int:
    """The launch's Q, K and V tiles: B * (H_q * S_q_pad/32 + 2 * H_kv * S_kv_pad/32)."""
    tq, tkv = s_pad(sh.S_q) // SCALE_BLOCK, s_pad(sh.S_kv) // SCALE_BLOCK
    return sh.B * (sh.H_q * tq + 2 * sh.H_kv * tkv)


def stats_items(sh: validate.Shapes, stats_x: int, n_tens: int) -> int:
    """The stats items, the first tickets: stats_x chunks x H_kv heads x B batches x n_tens statistics."""
    return stats_x * sh.H_kv * sh.B * n_tens


def items(sh: validate.Shapes, stats_x: int, n_tens: int) -> int:
    """The launch's work items = its workgroups (a 1-D grid): the stats items, then the tiles."""
    return stats_items(sh, stats_x, n_tens) + tiles(sh)


def check_launch_limits(sh: validate.Shapes) -> None:
    """The grid fits the HIP limit (docs/rdna4.md §HIP runtime: x < 2^31) and every index the kernel computes in 32
    bits stays below 2^31. Raised before any launch, naming q."""
    n_max = items(sh, MAX_CHUNKS, 3)   # the most stats items any call of this shape can have
    if max(s_pad(sh.S_q), s_pad(sh.S_kv)) >= 2 ** 31 or n_max >= 2 ** 31:
        raise ValueError(f"q: B = {sh.B}, S_q = {sh.S_q}, S_kv = {sh.S_kv} with {sh.H_q} query / {sh.H_kv} K/V "
                         f"heads are too large for the prepare launch ({n_max} work items; S_pad and the items "
                         f"must stay below 2^31)")


def execute_varlen(rec: PrepareRecipe, q, k, v, cu_seqlens_q, cu_seqlens_kv, *, total_q: int, max_seqlen_q: int,
                   max_seqlen_kv: int, q_norm_weight=None, k_norm_weight=None) -> PackedPrepared:
    """Run a packed recipe (recipe(packed=...)) on q [total_q, H_q, D], k/v [total_kv, H_kv, D] with int32
    cu_seqlens on their device: the same one launch as execute, no read of cu_seqlens on the host (docs/numerics.md
    §Varlen). Rows of the packed outputs between two sequences' padded rows are never written nor read."""
    if rec.pv16:
        validate.check_v_fp16_range(v, "fp16")
    sh = rec.shapes
    B, H_q, H_kv, Dp = sh.B, sh.H_q, sh.H_kv, d_pad(sh.D)
    R_q, R_kv = packed_rows(total_q, B), packed_rows(k.shape[0], B)
    dev = q.device
    qf, kf, vf = (t[None].as_strided((extent,), (1,)) if extent is not None else flat_view(t[None])[0]
                  for t, extent in zip((q, k, v), rec.extents))
    q_norm_weight, k_norm_weight = map(_aligned, (q_norm_weight, k_norm_weight))
    placeholder = _placeholder(dev)

    def f32(*shape):
        return alloc(*shape, dtype=torch.float32, device=dev)

    q_int8 = alloc(H_q, R_q, Dp, dtype=torch.int8, device=dev)
    k_int8 = alloc(H_kv, R_kv, Dp, dtype=torch.int8, device=dev)
    q_scale, k_scale = f32(H_q, R_q // SCALE_BLOCK), f32(H_kv, R_kv // SCALE_BLOCK)
    k_mean, v_scale, v_inv, v_mean = f32(B, H_kv, Dp), f32(B, H_kv, Dp), f32(B, H_kv, Dp), f32(B, H_kv, Dp)
    v_t = alloc(H_kv, Dp, R_kv, dtype=torch.float16 if rec.pv16 else torch.float8_e4m3fn, device=dev)
    n_chunks = rec.n_chunks
    vmax_part = placeholder if rec.pv16 else f32(B, H_kv, n_chunks, Dp)
    ksum_part = f32(B, H_kv, n_chunks, Dp) if rec.smooth_k else placeholder
    vmin_part, vsum_part = (f32(B, H_kv, n_chunks, Dp), f32(B, H_kv, n_chunks, Dp)) if rec.smooth_v else \
        (placeholder, placeholder)
    # The caller's tensors (q, k, v, cu_seqlens, the norm weights) are checked at each launch; the op's own fresh
    # outputs and workspaces, and the placeholders (no RoPE with varlen), only for alignment (launch.BoundLaunch).
    given = {"q_norm_w": q_norm_weight, "k_norm_w": k_norm_weight}
    tables = {n: t for n, t in given.items() if t is not None}
    absent = {n: placeholder for n, t in given.items() if t is None}
    absent.update(cos=placeholder, sin=placeholder)
    bound = rec.prepare
    _launch_counted(bound, dev, B * H_kv,
                    {"q": qf, "k": kf, "v": vf, "cu_seqlens_q": cu_seqlens_q, "cu_seqlens_kv": cu_seqlens_kv,
                     **tables},
                    {**absent, "k_mean": k_mean, "v_inv": v_inv, "q_int8": q_int8, "k_int8": k_int8,
                     "q_scale": q_scale, "k_scale": k_scale, "v_t": v_t, "v_mean": v_mean, "ksum_part": ksum_part,
                     "vmax_part": vmax_part, "vmin_part": vmin_part, "vsum_part": vsum_part, "v_scale": v_scale})
    lse_corr = None
    if rec.smooth_k:   # per token, with its own sequence's k_mean (the sequence index found on the device)
        qn = norm_rope(q[None], q_norm_weight, rec.eps, None, None, None, rec.norm_rope_rounding)[0]
        lse_corr = smooth_k_lse_correction_packed(qn, k_mean, cu_seqlens_q, rec.softmax_scale)
    return PackedPrepared(q_int8, q_scale, k_int8, k_scale, k_mean, v_t, v_scale, cu_seqlens_q, cu_seqlens_kv,
                          max_seqlen_q, max_seqlen_kv, total_q, sh.D, sh.dtype, v_mean if rec.smooth_v else None,
                          lse_corr)
