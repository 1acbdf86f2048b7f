"""Sequence parallelism for sage-co's attention on torch.distributed (what xDiT, yunchang and diffusers use).

    out = sequence_parallel_attention(q, k, v, mode="ulysses")            # q, k, v: this rank's [B, S_r, H, D]
    out, lse = sequence_parallel_attention(q, k, v, mode="ring", return_lse=True)

Each rank of `group` passes its contiguous sequence shard (rank r holds tokens sum(S_0..S_{r-1}) .. +S_r of
q, k and v, NHD like sage_co.sage_attention) and gets its output shard back (and lse [B, H, S_r] fp32).
`op_kwargs` go to sage_co.sage_attention (softmax_scale, smooth_k, backend, kernel, ...).

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


import torch
import torch.distributed as dist

from .callspec import SAGE_ATTENTION, SPLIT_FIXED

MODES = ("ulysses", "ring")
# op_kwargs: sage_attention's options but those a shard cannot take (sage_co.callspec.SPLIT_FIXED); return_lse is ours
OP_KWARGS = SAGE_ATTENTION.passthrough(exclude=SPLIT_FIXED)


def _world(group):
    return dist.get_world_size(group), dist.get_rank(group)


def _global(group, r: int) -> int:
    return r if group is None else dist.get_global_rank(group, r)


def _check(q, k, v, mode):
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("group: torch.distributed is not initialized; call torch.distributed."
                           "init_process_group (gloo on CPU, nccl/RCCL on GPUs) first")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name}: expected this rank's shard as a 4-dim [B, S_r, H, D] tensor, got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    if k.shape != v.shape:
        raise ValueError(f"v: expected the shape of k {tuple(k.shape)}, got {tuple(v.shape)}")


def _shard_lengths(q, k, group, world) -> tuple[list[int], list[int]]:
    """Every rank's (S_q, S_kv) shard length, from one small all_gather."""
    mine = torch.tensor([q.shape[1], k.shape[1]], dtype=torch.int64, device=q.device)
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine, group=group)
    return [int(t[0]) for t in every], [int(t[1]) for t in every]


def sequence_parallel_attention(q, k, v, group=None, mode: str = "ulysses", **op_kwargs):
    """This rank's shard of attention over the whole sequence held by `group`; see the module docstring."""
    _check(q, k, v, mode)
    return_lse = op_kwargs.pop("return_lse", False)
    SAGE_ATTENTION.check(SAGE_ATTENTION.bind(op_kwargs, "sequence_parallel_attention: op_kwargs", allowed=OP_KWARGS),
                         skip=("softmax_scale",))   # every option refused here, before any exchange
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse: expected True or False, got {return_lse!r}")
    world, rank = _world(group)
    lens_q, lens_kv = _shard_lengths(q, k, group, world)
    if mode == "ulysses":
        out, lse = _ulysses(q, k, v, group, world, rank, lens_q, lens_kv, op_kwargs)
    else:
        out, lse = _ring(q, k, v, group, world, rank, lens_q, lens_kv, op_kwargs)
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
    B, _, H, D = q.shape
    if H % world or k.shape[2] % world:
        raise ValueError(f"q: ulysses needs the head counts ({H} query, {k.shape[2]} K/V) divisible by the group "
                         f"size {world}; use mode='ring' or a group size dividing the heads")
    hq, hk = H // world, k.shape[2] // world

    def seq_to_heads(x, h, lens):
        parts = [x[:, :, j * h:(j + 1) * h] for j in range(world)]
        got = _a2a(parts, [(B, lens[r], h, D) for r in range(world)], group)
        return torch.cat(got, dim=1).contiguous()        # [B, S_total, h, D], tokens in rank order

    qh, kh, vh = seq_to_heads(q, hq, lens_q), seq_to_heads(k, hk, lens_kv), seq_to_heads(v, hk, lens_kv)
    out_h, lse_h = sage_attention(qh, kh, vh, return_lse=True, **op_kwargs)
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
    if op_kwargs.get("is_causal"):
        raise NotImplementedError("is_causal: causal ring attention needs per-step masks offset by each shard's "
                                  "position, not built yet; use mode='ulysses' (the op is causal over each head shard)")
    nxt, prv = _global(group, (rank + 1) % world), _global(group, (rank - 1) % world)
    out = lse = None
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
        blk_out, blk_lse = sage_attention(q.contiguous(), cur_k, cur_v, return_lse=True, **op_kwargs)
        out, lse = merge_partials(out, lse, blk_out, blk_lse)
        if pending is not None:
            reqs, cur_k, cur_v = pending
            for r in reqs:
                r.wait()
    return out.to(q.dtype), lse
