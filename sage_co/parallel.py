"""Sequence parallelism for sage-co's attention on torch.distributed (what xDiT, yunchang and diffusers use).

    out = sequence_parallel_attention(q, k, v, mode="ulysses")            # q, k, v: this rank's [B, S_r, H, D]
    out, lse = sequence_parallel_attention(q, k, v, mode="ring", return_lse=True)

Each rank of `group` passes its contiguous sequence shard (rank r holds tokens sum(S_0..S_{r-1}) .. +S_r of
q, k and v; layout="NHD" [B, S_r, H, D] (the default) or "HND" [B, H, S_r, D], like sage_co.sage_attention) and gets
its output shard back in that layout (and lse [B, H, S_r] fp32). `op_kwargs` go to sage_co.sage_attention
(softmax_scale, smooth_k, backend, kernel, ...).

Before any exchange of data every rank validates its own arguments (sage_attention's checks, on meta tensors of
the shapes the op will see) and the ranks all_gather what they were given (dtype, B, H, D, layout, mode, options,
the shard lengths): a bad argument on one rank, or ranks that disagree, raise the same ValueError on every rank
(`agree`) instead of a hang, a crash of the other ranks or a wrong result. What only the data can refuse (pv_dtype
"fp16" with V beyond the fp16 range, in the heads or K/V shards a rank holds) is settled after the op calls and
before the next exchange (`settle`: one all_reduce of a flag): every rank raises the same error, in seconds.

ulysses  all-to-all from sequence shards to head shards (every rank gets all tokens of H/W heads), the op, and
         the inverse all-to-all. Needs H % W == 0. Each head sees exactly the single-process inputs, so the result
         is the single-process op's, bit for bit. Uneven shard lengths are fine. The exchange is
         `all_to_all_single` with split sizes: gloo's list-form `all_to_all` requires equal sizes (torch 2.13),
         the single-tensor form with splits works on gloo (CPU), NCCL and RCCL alike.
ring     K/V shards travel round the ring with `batch_isend_irecv` (the next shard is in flight while the op
         runs on the current one); each step's partial (out, lse) is merged in fp32 by log-sum-exp. Not bitwise
         with the single-process op: smooth_k's mean, V's per-channel FP8 scale and K's 32-token blocks are taken
         per shard, each partial output is rounded to the output dtype before the fp32 merge, and the merge adds
         in ring order. Uneven shards are fine (the op takes separate Q and K/V lengths). No causal ring yet:
         it needs per-step masks offset by each shard's position (use mode="ulysses" with is_causal=True).

On GPUs: `torch.distributed.init_process_group("nccl")` (on ROCm torch that backend is RCCL), one rank per GPU,
`torch.cuda.set_device(local_rank)`, tensors on that GPU; both all_to_all_single and batch_isend_irecv run over
RCCL (xGMI / PCIe P2P between R9700s). On CPU (tests, the emulator) use "gloo".
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.distributed as dist

from . import validate
from .callspec import SAGE_ATTENTION, SPLIT_FIXED

MODES = ("ulysses", "ring")
# op_kwargs: sage_attention's options but those a shard cannot take (sage_co.callspec.SPLIT_FIXED; layout and
# return_lse are ours)
OP_KWARGS = SAGE_ATTENTION.passthrough(exclude=SPLIT_FIXED)
# what every rank of the group must agree on, besides the shard lengths (exchanged in the same all_gather)
AGREED = ("mode", "layout", "return_lse", "dtype", "B", "H_q", "H_kv", "D", "options")


def _world(group):
    return dist.get_world_size(group), dist.get_rank(group)


def _global(group, r: int) -> int:
    return r if group is None else dist.get_global_rank(group, r)


class Agreed(NamedTuple):
    """The call every rank agreed on: shard lengths of every rank, and this rank's NHD views."""
    lens_q: list
    lens_kv: list
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor


def _summary(value):
    """An option as the ranks compare it: tensors by shape and dtype (not their data), everything else by repr."""
    if isinstance(value, torch.Tensor):
        return f"tensor{list(value.shape)} {value.dtype}"
    return repr(value)


def _on_meta(value):
    return value.to("meta") if isinstance(value, torch.Tensor) else value


def _dry_run(shape_q, shape_kv, dtype, op_kwargs) -> None:
    """sage_co.sage_attention's own validation (every argument, the kernel limits, the fake implementation) on meta
    tensors of the shapes the op will see: no kernel runs, no data is read, the same answer on every rank."""
    from .api import sage_attention
    q = torch.empty(shape_q, dtype=dtype, device="meta")
    kv = torch.empty(shape_kv, dtype=dtype, device="meta")
    sage_attention(q, kv, kv, return_lse=True, **{n: _on_meta(x) for n, x in op_kwargs.items()})


def _local(q, k, v, mode, layout, return_lse, op_kwargs):
    """(this rank's description of the call, the error its arguments raise or None). Raises nothing: every rank
    must reach the exchange, also the one whose arguments are bad (else the others wait for it until the timeout)."""
    desc = {"mode": repr(mode), "layout": repr(layout), "return_lse": repr(return_lse),
            "options": {n: _summary(x) for n, x in sorted(op_kwargs.items())}}
    try:
        if mode not in MODES:
            raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
        validate.check_flag("return_lse", return_lse)
        # every option by its own validator (sage_co.callspec; an unknown name is a TypeError naming it)
        SAGE_ATTENTION.check(SAGE_ATTENTION.bind(op_kwargs, "sequence_parallel_attention: op_kwargs",
                                                 allowed=OP_KWARGS), skip=("softmax_scale",))
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor) or t.dim() != 4:
                dims = "[B, S_r, H, D]" if layout != "HND" else "[B, H, S_r, D]"
                raise ValueError(f"{name}: expected this rank's shard as a 4-dim {dims} tensor, got "
                                 f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
        sh, qn, kn, _ = validate.check_qkv(q, k, v, validate.check_layout(layout))
        desc.update(dtype=str(sh.dtype), B=sh.B, H_q=sh.H_q, H_kv=sh.H_kv, D=sh.D, S_q=sh.S_q, S_kv=sh.S_kv)
        _dry_run(tuple(qn.shape), tuple(kn.shape), sh.dtype, op_kwargs)   # this shard's own call (scale, flags, ...)
    except Exception as exc:   # reported by every rank after the exchange
        return desc, f"{type(exc).__name__}: {exc}"
    return desc, None


def agree(q, k, v, group, world: int, rank: int, *, mode, layout, return_lse, op_kwargs) -> Agreed:
    """Validate this rank's arguments, exchange them with every rank of `group` in one all_gather (with the shard
    lengths), and raise the same ValueError on every rank when any rank's arguments are bad or the ranks disagree
    (dtype, B, H, D, layout, mode, options). Runs before the first send / receive: a rank-local error used to
    leave the other ranks blocked until the process-group timeout (ring), kill them (ulysses: gloo size mismatch)
    or "succeed" with a wrong result (bf16 on one rank, fp16 on another: rel L2 20)."""
    desc, err = _local(q, k, v, mode, layout, return_lse, op_kwargs)
    every = [None] * world
    dist.all_gather_object(every, (desc, err), group=group)
    bad = [(r, e) for r, (_, e) in enumerate(every) if e is not None]
    if bad:
        r, e = bad[0]
        more = f" (ranks {[b for b, _ in bad]} failed)" if len(bad) > 1 else ""
        raise ValueError(f"sequence_parallel_attention: rank {r} of {world}: {e}{more}")
    descs = [d for d, _ in every]
    for field in AGREED:
        seen = [d[field] for d in descs]
        if any(x != seen[0] for x in seen):
            per = ", ".join(f"rank {r}: {x}" for r, x in enumerate(seen))
            raise ValueError(f"{field}: the ranks of the group must pass the same {field}; got {per}")
    d0 = descs[0]
    lens_q, lens_kv = [d["S_q"] for d in descs], [d["S_kv"] for d in descs]
    dtype = q.dtype
    # the op calls this call will make, validated on meta (identical on every rank: the inputs agree)
    if mode == "ulysses":
        if d0["H_q"] % world or d0["H_kv"] % world:
            raise ValueError(f"q: ulysses needs the head counts ({d0['H_q']} query, {d0['H_kv']} K/V) divisible by "
                             f"the group size {world}; use mode='ring' or a group size dividing the heads")
        _dry_run((d0["B"], sum(lens_q), d0["H_q"] // world, d0["D"]),
                 (d0["B"], sum(lens_kv), d0["H_kv"] // world, d0["D"]), dtype, op_kwargs)
    else:
        if op_kwargs.get("is_causal"):
            raise NotImplementedError("is_causal: causal ring attention needs per-step masks offset by each shard's "
                                      "position, not built yet; use mode='ulysses' (the op is causal over each head "
                                      "shard)")
        for S_q, S_kv in sorted({(a, b) for a in lens_q for b in lens_kv}):
            _dry_run((d0["B"], S_q, d0["H_q"], d0["D"]), (d0["B"], S_kv, d0["H_kv"], d0["D"]), dtype, op_kwargs)
    views = [t if layout == "NHD" else t.transpose(1, 2) for t in (q, k, v)]
    return Agreed(lens_q, lens_kv, *views)


def settle(err: str | None, group, world: int, device) -> None:
    """After this rank's kernel calls (err: their error, "Type: message", or None): one all_reduce of a flag, and
    when any rank failed, the same exception on every rank within seconds -- a data-dependent refusal (pv_dtype
    "fp16" with V beyond the fp16 range in the heads or shards one rank holds) used to leave the other ranks
    blocked in the next exchange until the group timeout (30 min for gloo). The messages are exchanged only then
    (all_gather_object); the first failing rank's is raised, as ValueError when it was a ValueError / TypeError
    (an argument the op refuses), else RuntimeError."""
    flag = torch.tensor([0 if err is None else 1], dtype=torch.int32, device=device)   # the shards' device
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    if not int(flag.item()):
        return
    every = [None] * world
    dist.all_gather_object(every, err, group=group)
    bad = [(r, e) for r, e in enumerate(every) if e is not None]
    r, e = bad[0]
    more = f" (ranks {[b for b, _ in bad]} failed)" if len(bad) > 1 else ""
    kind = ValueError if e.startswith(("ValueError:", "TypeError:")) else RuntimeError
    raise kind(f"sequence_parallel_attention: rank {r} of {world}: {e}{more}")


def _attempt(fn, *args, **kwargs):
    """(fn's result, None) or (None, "Type: message"): a rank keeps going to settle() whatever its call raised."""
    try:
        return fn(*args, **kwargs), None
    except Exception as exc:   # reported on every rank by settle()
        return None, f"{type(exc).__name__}: {exc}"


def sequence_parallel_attention(q, k, v, group=None, mode: str = "ulysses", **op_kwargs):
    """This rank's shard of attention over the whole sequence held by `group`; see the module docstring."""
    if not dist.is_available() or not dist.is_initialized():   # no group to agree in: refuse locally
        if mode not in MODES:
            raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
        raise RuntimeError("group: torch.distributed is not initialized; call torch.distributed."
                           "init_process_group (gloo on CPU, nccl/RCCL on GPUs) first")
    return_lse = op_kwargs.pop("return_lse", False)
    layout = op_kwargs.pop("layout", "NHD")
    world, rank = _world(group)
    a = agree(q, k, v, group, world, rank, mode=mode, layout=layout, return_lse=return_lse, op_kwargs=op_kwargs)
    run = _ulysses if mode == "ulysses" else _ring
    out, lse = run(a.q, a.k, a.v, group, world, rank, a.lens_q, a.lens_kv, op_kwargs)
    if layout == "HND":
        out = out.transpose(1, 2).contiguous()
    return (out, lse) if return_lse else out


# ---------------------------------------------------------------------------------------------------- Ulysses
def _a2a(chunks_out: list[torch.Tensor], recv_shapes: list[tuple[int, ...]], group) -> list[torch.Tensor]:
    """Send chunks_out[j] to rank j, return what each rank j sent here (shape recv_shapes[j])."""
    dtype, device = chunks_out[0].dtype, chunks_out[0].device
    send = torch.cat([c.reshape(-1) for c in chunks_out])
    sizes_in = [c.numel() for c in chunks_out]
    sizes_out = [int(torch.Size(s).numel()) for s in recv_shapes]
    recv = torch.empty(sum(sizes_out), dtype=dtype, device=device)
    dist.all_to_all_single(recv, send, output_split_sizes=sizes_out, input_split_sizes=sizes_in, group=group)
    return [t.view(s) for t, s in zip(recv.split(sizes_out), recv_shapes)]


def _ulysses(q, k, v, group, world, rank, lens_q, lens_kv, op_kwargs):
    from .api import sage_attention
    B, _, H, D = q.shape          # agree() checked H % world and K/V heads % world on every rank
    hq, hk = H // world, k.shape[2] // world

    def seq_to_heads(x, h, lens):
        parts = [x[:, :, j * h:(j + 1) * h] for j in range(world)]
        got = _a2a(parts, [(B, lens[r], h, D) for r in range(world)], group)
        return torch.cat(got, dim=1).contiguous()        # [B, S_total, h, D], tokens in rank order

    qh, kh, vh = seq_to_heads(q, hq, lens_q), seq_to_heads(k, hk, lens_kv), seq_to_heads(v, hk, lens_kv)
    res, err = _attempt(sage_attention, qh, kh, vh, return_lse=True, **op_kwargs)
    settle(err, group, world, q.device)   # before the inverse exchange: a refusal on one rank reaches every rank
    out_h, lse_h = res
    offs = [sum(lens_q[:r]) for r in range(world)]
    S_me = lens_q[rank]
    out_parts = _a2a([out_h[:, o:o + n] for o, n in zip(offs, lens_q)], [(B, S_me, hq, D)] * world, group)
    lse_parts = _a2a([lse_h[:, :, o:o + n] for o, n in zip(offs, lens_q)], [(B, hq, S_me)] * world, group)
    return torch.cat(out_parts, dim=2), torch.cat(lse_parts, dim=1)   # head chunk j came from rank j


# ---------------------------------------------------------------------------------------------------- ring
def merge_partials(out, lse, blk_out, blk_lse):
    """Log-sum-exp merge of two partial attentions over disjoint key sets, in fp32.
    out [B, S, H, D] (any float dtype; None = nothing yet), lse [B, H, S] fp32 (natural log)."""
    blk_out, blk_lse = blk_out.float(), blk_lse.float()
    if out is None:
        return blk_out, blk_lse
    new = torch.logaddexp(lse, blk_lse)
    w_old = torch.exp(lse - new).transpose(1, 2).unsqueeze(-1)      # [B, S, H, 1]
    w_blk = torch.exp(blk_lse - new).transpose(1, 2).unsqueeze(-1)
    return out * w_old + blk_out * w_blk, new


def _ring(q, k, v, group, world, rank, lens_q, lens_kv, op_kwargs):
    from .api import sage_attention
    nxt, prv = _global(group, (rank + 1) % world), _global(group, (rank - 1) % world)
    out = lse = err = None
    cur_k, cur_v = k.contiguous(), v.contiguous()
    for step in range(world):
        pending = None
        if step + 1 < world:   # post the exchange first so it overlaps the op below
            src = (rank - step - 1) % world       # whose K/V shard arrives for the next step
            shape = (k.shape[0], lens_kv[src], k.shape[2], k.shape[3])
            nk, nv = torch.empty(shape, dtype=k.dtype, device=k.device), torch.empty(shape, dtype=v.dtype,
                                                                                       device=v.device)
            ops = [dist.P2POp(dist.isend, cur_k, nxt, group), dist.P2POp(dist.isend, cur_v, nxt, group),
                   dist.P2POp(dist.irecv, nk, prv, group), dist.P2POp(dist.irecv, nv, prv, group)]
            pending = (dist.batch_isend_irecv(ops), nk, nv)
        if err is None:   # after a failure this rank keeps exchanging (its peers' steps need its K/V), not computing
            res, err = _attempt(sage_attention, q.contiguous(), cur_k, cur_v, return_lse=True, **op_kwargs)
            if err is None:
                out, lse = merge_partials(out, lse, *res)
        if pending is not None:
            reqs, cur_k, cur_v = pending
            for r in reqs:
                r.wait()
    settle(err, group, world, q.device)
    return out.to(q.dtype), lse
