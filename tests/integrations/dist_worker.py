"""Worker processes for tests/integrations/test_parallel.py (torch.multiprocessing spawn, gloo on CPU)."""
from __future__ import annotations

import traceback

import torch
import torch.distributed as dist

import sage_co
from sage_co import accuracy
from sage_co.parallel import sequence_parallel_attention


def full_inputs(S: int, H: int):
    """The whole sequence, the same on every rank and in the parent: bf16 [1, S, H, 128], K with a channel offset
    (the case smooth_k exists for, so per-shard means matter)."""
    return accuracy.make_inputs("k_offset", 1, S, H, seed=3)


def run(rank: int, world: int, init_file: str, out_dir: str, scenarios: dict) -> None:
    """scenarios {group size W: [(name, mode, lens, H)]}: the W == world ones on the default group (group=None),
    each smaller W on the subgroup of ranks 0 .. W-1 (group=), the others waiting; results in out_dir/W/."""
    torch.set_num_threads(1)  # W processes share a small machine
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        for w in sorted(scenarios, reverse=True):
            group = None if w == world else dist.new_group(list(range(w)))   # every rank creates every group
            if rank < w:
                _run_scenarios(rank, group, f"{out_dir}/{w}", scenarios[w])
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _run_scenarios(rank: int, group, out_dir: str, scenarios) -> None:
    for name, mode, lens, H in scenarios:
        q, k, v = full_inputs(sum(lens), H)
        sl = slice(sum(lens[:rank]), sum(lens[:rank + 1]))
        try:
            out, lse = sequence_parallel_attention(q[:, sl], k[:, sl], v[:, sl], group=group, mode=mode,
                                                   return_lse=True, smooth_k=True)
            res = {"out": out, "lse": lse}
        except Exception as e:  # the parent asserts on it (refusals are part of the contract)
            res = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
        torch.save(res, f"{out_dir}/{name}.{rank}.pt")


def run_yunchang(rank: int, world: int, init_file: str, out_dir: str, S_r: int, H: int) -> None:
    """yunchang's LongContextAttention with sage-co's ring processor: pure ring (ulysses 1 x ring W), then pure
    Ulysses (W x 1). Saves each rank's output shard."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        from yunchang import LongContextAttention, set_seq_parallel_pg

        from sage_co.integrations.xdit import SageCoRingProcessor
        q, k, v = full_inputs(S_r * world, H)
        sl = slice(S_r * rank, S_r * (rank + 1))
        for name, degrees in (("ring", (1, world)), ("ulysses", (world, 1))):
            set_seq_parallel_pg(*degrees, rank, world)
            attn = LongContextAttention(attn_type=None, attn_processor=SageCoRingProcessor())
            with torch.no_grad():
                out = attn(q[:, sl].contiguous(), k[:, sl].contiguous(), v[:, sl].contiguous())
            torch.save(out, f"{out_dir}/yunchang_{name}.{rank}.pt")
    finally:
        dist.destroy_process_group()


def agreement_case(name: str, rank: int, world: int):
    """(q, k, v shard of this rank, keyword arguments) of one test_parallel_agreement scenario: rank-local
    differences that every rank must refuse together (or, for the *_ok cases, serve)."""
    S_r, H, D = 80, 2, 64
    q, k, v = (t[..., :D] for t in full_inputs(S_r * world, H))
    sl = slice(S_r * rank, S_r * (rank + 1))
    q, k, v = q[:, sl], k[:, sl], v[:, sl]
    mode = "ring" if "ring" in name else "ulysses"
    kw = {"mode": mode, "return_lse": True}
    if name.startswith("dtype_") and rank == 1:
        q, k, v = (t.to(torch.float16) for t in (q, k, v))
    if name == "headdim_ring" and rank == 1:
        q, k, v = (t[..., :32] for t in (q, k, v))
    if name == "heads_ulysses" and rank == 1:
        q, k, v = (torch.cat([t, t], dim=2) for t in (q, k, v))
    if name == "smooth_k_ring" and rank == 0:
        kw["smooth_k"] = True
    if name.startswith("scale_inf") and rank == 0:
        kw["softmax_scale"] = float("inf")
    if name.startswith("vrange_"):   # pv_dtype="fp16" with |V| > 65504 in head 1 of rank 0's shard only
        kw["pv_dtype"] = "fp16"
        if rank == 0:
            v = v.clone()
            v[:, 5, 1, 3] = 9e4
    if name.startswith("hnd_"):
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        kw["layout"] = "HND"
    return q.contiguous(), k.contiguous(), v.contiguous(), kw


def run_agreement(rank: int, world: int, init_file: str, out_dir: str, names: dict) -> None:
    """Each scenario of agreement_case, names {group size W: [name]}: the W == world ones on the default group
    (group=None), each smaller W after them on the subgroup of ranks 0 .. W-1 (group=), the others waiting; saves
    the result or the error and how long the call took. A 60 s group timeout turns a hang into a failure (gloo's
    default is 30 min)."""
    import datetime
    import time
    timeout = datetime.timedelta(seconds=60)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world, timeout=timeout)
    # where the ranks outside a subgroup wait for its scenarios (minutes on a loaded machine), not the 60 s group
    done = dist.new_group(timeout=datetime.timedelta(minutes=30))
    try:
        m = torch.empty(1, 64, 2, 64, dtype=torch.bfloat16, device="meta")
        sage_co.sage_attention(m, m, m)   # imports and the manifest read, so the timings below are the calls'
        for w in sorted(names, reverse=True):
            group = None if w == world else dist.new_group(list(range(w)), timeout=timeout)   # on every rank
            if rank >= w:
                continue
            for name in names[w]:
                q, k, v, kw = agreement_case(name, rank, w)
                t0 = time.perf_counter()
                try:
                    out, lse = sequence_parallel_attention(q, k, v, group=group, **kw)
                    res = {"out": out, "lse": lse}
                except Exception as e:
                    res = {"error": f"{type(e).__name__}: {e}"}
                res["seconds"] = time.perf_counter() - t0
                torch.save(res, f"{out_dir}/{name}.{rank}.pt")
        dist.barrier(group=done)
    finally:
        dist.destroy_process_group()
