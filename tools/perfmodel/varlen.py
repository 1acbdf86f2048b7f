"""Modeled time of one varlen attention launch (issue 26, docs/performance.md §Varlen) against the sum of the same
sequences' own attention launches.

The varlen launch is grid (ceil(max_seqlen_q / 64), H, B): workgroup (x, h, b) walks ceil(len_kv_b / 64) key tiles
(causal: its query tile's visible tiles) when x * 64 < len_q_b, and ends in its prologue otherwise. Its workgroups
are unequal, which restate.our_kernel's launch model (equal workgroups, rounds of k per WGP) does not cover, so the
launch is modeled from the same calibrated pieces workgroup by workgroup:

  * per key tile: the simulated clocks per wave-iteration of the dense kernel's loop at full occupancy
    (restate.our_kernel at S = 4096: the emulated workgroup's mix, k workgroups per WGP), times the waves a
    workgroup puts on each SIMD; the varlen loop runs the same instructions per tile (the next tile index is
    s_min_u32 + s_bitcmp1 + s_cbranch in place of s_lshl + s_load_b32 of a LUT entry);
  * per workgroup: the round's simulated prologue + epilogue clocks over the k workgroups that share them;
  * an early-exit workgroup: it holds a slot for two dependent scalar loads (the kernargs, then cu_seqlens),
    2 x Params.global_latency clocks, shared by the k slots of its WGP (ASSUMED: dispatch itself is not modeled);
  * dispatch: workgroups in grid order (x fastest) to the least-loaded of the 32 WGPs (list scheduling, work
    conserving); the launch takes the busiest WGP's clocks at the sustained clock + one launch overhead.

The per-sequence baseline is restate.our_kernel(kernel, 1, H, len_b) per sequence: its own launch overhead and
wave-quantization tail each. Both are compute models (DRAM and L2 bounds: restate.our_kernel's; the varlen launch
reads each sequence's K/V from L2 as the per-sequence launches do). The same scheduler run on a one-sequence batch
reproduces restate.our_kernel's time for that sequence (print_varlen shows both; docs/performance.md §Varlen).
"""
from __future__ import annotations

import heapq

from perfmodel import restate
from perfmodel.hardware import CALIBRATED, WGPS, Params

FULL_S = 4096      # the dense launch whose full-occupancy round gives the per-tile and per-workgroup clocks


def _costs(kernel: str, H: int, params: Params) -> tuple[float, float, float, int]:
    """(clocks per key tile of one workgroup, prologue + epilogue clocks per workgroup, early-exit clocks per
    workgroup, workgroups per WGP) from the dense kernel's full round."""
    from perfmodel.stream import HEAD_DIM
    res = restate.our_kernel(kernel, 1, H, FULL_S, params)
    km, _ = restate._cache[(kernel, HEAD_DIM, False)]
    full = res.rounds[0]
    k = full.workgroups_per_wgp
    waves = res.occupancy.waves_per_simd_per_wg
    per_tile = waves * full.loop_cycles_per_iter * 64 / km.keys_per_iter   # the asm loop body holds two tiles
    per_wg = full.fixed_cycles / k
    exit_wg = 2 * params.global_latency / k
    return per_tile, per_wg, exit_wg, k


def workgroup_tiles(lens_q, lens_kv, H: int, causal: bool = False) -> list[int | None]:
    """Key tiles per workgroup of the varlen grid in dispatch order (x fastest, then head, then sequence); None =
    the workgroup ends in its prologue (query tile past its sequence)."""
    nx = max(1, -(-max(lens_q) // 64))
    out = []
    for lq, lk in zip(lens_q, lens_kv):
        n_kv = -(-lk // 64)
        row = []
        for x in range(nx):
            if x * 64 >= lq:
                row.append(None)
            elif causal:
                last = min(64 * x + 63, lq - 1) + lk - lq + 1
                row.append(min(n_kv, max(0, -(-last // 64))))
            else:
                row.append(n_kv)
        out += row * H
    return out


def schedule_clocks(tiles: list[int | None], per_tile: float, per_wg: float, exit_wg: float) -> float:
    """The busiest WGP's clocks when workgroups go in order to the least-loaded WGP."""
    loads = [0.0] * WGPS
    heapq.heapify(loads)
    for t in tiles:
        cost = exit_wg if t is None else t * per_tile + per_wg
        heapq.heappush(loads, heapq.heappop(loads) + cost)
    return max(loads)


def model_varlen(lens_q, lens_kv=None, H: int = 24, kernel: str = "asm", causal: bool = False,
                 params: Params = CALIBRATED) -> dict:
    """Modeled us of the one varlen launch and of the per-sequence launches (restate.our_kernel each)."""
    lens_kv = list(lens_q) if lens_kv is None else list(lens_kv)
    per_tile, per_wg, exit_wg, k = _costs(kernel, H, params)
    tiles = workgroup_tiles(lens_q, lens_kv, H, causal)
    clocks = schedule_clocks(tiles, per_tile, per_wg, exit_wg)
    varlen_us = (clocks / params.clock_hz + params.launch_overhead_s) * 1e6
    if causal:
        per_seq_us = None   # restate.our_kernel models dense launches only
    else:
        per_seq_us = sum(restate.our_kernel(kernel, 1, H, lq, params, S_kv=lk if lk != lq else None).time_us
                         for lq, lk in zip(lens_q, lens_kv) if lq and lk)
    return {"kernel": kernel, "H": H, "sequences": len(lens_q), "tokens_q": sum(lens_q),
            "tokens_kv": sum(lens_kv), "workgroups": len(tiles), "early_exit": sum(t is None for t in tiles),
            "key_tiles": sum(t or 0 for t in tiles), "workgroups_per_wgp": k, "varlen_us": varlen_us,
            "per_sequence_us": per_seq_us,
            "ratio": varlen_us / per_seq_us if per_seq_us else None, "modeled": True}


def issue_batch(n: int = 64, seed: int = 0, lo: int = 64, hi: int = 4096) -> list[int]:
    """The issue's batch: n lengths drawn uniformly from lo..hi (torch's generator, fixed seed)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    return [int(x) for x in torch.randint(lo, hi + 1, (n,), generator=g)]


def print_varlen(as_json: bool = False) -> int:
    rows = [model_varlen([4096], H=24, kernel=v) for v in ("asm", "hip")]
    rows += [model_varlen(issue_batch(), H=24, kernel=v) for v in ("asm", "hip")]
    if as_json:
        import json
        print(json.dumps(rows, indent=1))
        return 0
    for r in rows:
        print(f"  {r['kernel']:3} {r['sequences']:2d} sequence(s), {r['tokens_q']:6d} tokens, H {r['H']}: "
              f"varlen {r['varlen_us']:9.1f} us, per-sequence sum {r['per_sequence_us']:9.1f} us, "
              f"ratio {r['ratio']:.3f} (modeled; {r['early_exit']} of {r['workgroups']} workgroups exit early)")
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(print_varlen("--json" in sys.argv))
