"""Modeled attention time vs block density and causal masking (issue 14): the kernels walk a per-query-tile LUT of
active key tiles, so a query tile's work is its number of active tiles times the per-tile cost of the dense loop.

Model: restate.our_kernel's launch model (the emulated dense workgroup's per-iteration mix of the LUT-walking
kernel, so the LUT's own per-tile cost -- one s_load_b32 of a LUT entry issued a tile ahead, 3 s_mov, the mask
test (4 SALU) and the m_use guard (4 VALU) -- is inside the measured mix), with the trip count set to the mean
number of active tiles per query tile, the FLOPs and the K/V DRAM traffic scaled by the density. Assumptions, stated:
workgroups of unequal length (causal) balance over the launch's many rounds (mean trip count); the diagonal tile's
element mask (~100 VALU, taken on <= 2 tiles of a query tile) is not in the dense mix.

The predictor (sage_co.predict_block_mask's two kernels, asm_src/gfx1201_sage_predict.hip) is modeled from its
emulated counts (predictor_rows): the real kernels run on the emulator for one head at the target S (every query
block ranked: simthreshd = -1, the most work; the work per head does not depend on the data otherwise), the counts
scale by B * H, and each launch takes max(issue-bound, DRAM-bound) + the launch overhead: issue one wave-instruction
per SIMD clock over the 128 SIMDs at the calibrated model's clock (params.clock_hz, the clock the attention
it is compared with runs at; the workgroups are many and small, 58 VGPRs or fewer, so latency hides behind other
waves, the prepare stage's convention in docs/performance.md §The prepare stage otherwise), DRAM the
bytes each launch must move (pool reads Q and K once; select reads the pooled means and writes the mask).
"""
from __future__ import annotations

from perfmodel.calibration import CALIBRATED
from perfmodel.hardware import DRAM_BYTES_PER_S, SIMDS
from perfmodel.launch_model import Launch, model_launch
from perfmodel import restate
from perfmodel.stream import HEAD_DIM


DENSITIES = (1.0, 0.5, 0.25, 0.1)


def _launch(kernel: str, B: int, H: int, S: int, active_tiles_per_qtile: float, params):
    from sage_co import abi
    dense = restate.our_kernel(kernel, B, H, S, params)           # fills restate's (km, run) cache
    km, run = restate._cache[(kernel, HEAD_DIM, False)]
    S_pad = -(-S // abi.PAD) * abi.PAD
    n_kv = S_pad // abi.KEY_TILE
    frac = active_tiles_per_qtile / n_kv
    D = HEAD_DIM
    dram = B * H * (S_pad * D + S * D * 2 + frac * 2 * S_pad * D + (S_pad // 32) * 8 + 3 * D * 4)
    launch = Launch((S_pad // abi.QUERY_TILE, H, B), abi.ATTENTION_BLOCK[0],
                    restate.attention_flops(B, H, S, D) * frac, "int8",
                    trip_count=active_tiles_per_qtile * abi.KEY_TILE / km.keys_per_iter, dram_bytes=dram)
    return dense, model_launch(km, launch, run, params)


def density_rows(kernel: str = "asm", B: int = 1, H: int = 16, S: int = 16384, densities=DENSITIES,
                 params=CALIBRATED) -> list[dict]:
    """Modeled time at each block density (fraction of active key tiles per query tile) and causal, vs dense."""
    from sage_co import masks
    n_kv = -(-S // masks.BLOCK_KV)
    rows = []
    dense_us = None
    for d in densities:
        dense, r = _launch(kernel, B, H, S, d * n_kv, params)
        dense_us = dense.time_us
        rows.append({"kernel": kernel, "S": S, "mode": f"density {d:g}", "time_us": r.time_us,
                     "speedup": dense_us / r.time_us, "binding": r.binding})
    causal_tiles = float(masks.causal_tiles(S, S).sum()) / masks.causal_tiles(S, S).shape[0]
    _, r = _launch(kernel, B, H, S, causal_tiles, params)
    rows.append({"kernel": kernel, "S": S, "mode": f"causal ({causal_tiles / n_kv:.3f} of the tiles)",
                 "time_us": r.time_us, "speedup": dense_us / r.time_us, "binding": r.binding})
    return rows


# B, H, S, D: the figure docs/performance.md §Predictor and block-sparse attention states
PREDICT_SHAPE = (1, 24, 16384, 128)


def predictor_counts(S: int, D: int = 128) -> dict[str, dict]:
    """Emulator statistics of the two predictor launches at B = H_q = H_kv = 1, S_q = S_kv = S (bf16 randn,
    simthreshd = -1: every query block is ranked, no early exit): {"pool": stats, "select": stats}."""
    import torch
    from sage_co import launch
    from sage_co.sparse import predict_block_mask
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, S, 1, D, generator=g).to(torch.bfloat16) for _ in range(2))
    with launch.recording() as rec:
        predict_block_mask(q, k, simthreshd=-1.0, backend="emu")
    out = {}
    for r in rec:
        out["pool" if "pool" in r.symbol else "select"] = dict(r.result)
    return out


def predictor_rows(B: int = PREDICT_SHAPE[0], H: int = PREDICT_SHAPE[1], S: int = PREDICT_SHAPE[2],
                   D: int = PREDICT_SHAPE[3], params=CALIBRATED, counts: dict | None = None) -> list[dict]:
    """Modeled time of each predictor launch at (B, H_q = H_kv = H, S_q = S_kv = S, D) from one emulated head."""
    from sage_co import abi
    counts = counts or predictor_counts(S, D)
    n = -(-S // abi.QUERY_TILE)
    pooled = B * H * n * (abi.PREDICT_CHANNELS + 1) * 4       # means + similarity of one side, fp32
    dram = {"pool": 2 * B * H * S * D * 2 + 2 * pooled,      # Q and K read once, pooled Q and K written
            "select": 2 * pooled + B * H * n * n}             # pooled read once (L2 serves the re-reads), mask
    rows = []
    for name in ("pool", "select"):
        wave_instr = counts[name]["wave_instructions"] * B * H
        issue_s = wave_instr / (SIMDS * params.clock_hz)
        dram_s = dram[name] / DRAM_BYTES_PER_S
        rows.append({"launch": name, "wave_instructions": wave_instr, "issue_us": issue_s * 1e6,
                     "dram_us": dram_s * 1e6, "binding": "issue" if issue_s > dram_s else "DRAM",
                     "time_us": (max(issue_s, dram_s) + params.launch_overhead_s) * 1e6})
    return rows


def predictor_vs_dense(kernel: str = "asm", densities=DENSITIES, params=CALIBRATED) -> dict:
    """The predictor next to the attention it prunes at PREDICT_SHAPE: modeled predictor time, dense attention
    time, and the attention time at each density (density_rows) plus the predictor."""
    B, H, S, D = PREDICT_SHAPE
    pred = predictor_rows(B, H, S, D, params)
    pred_us = sum(r["time_us"] for r in pred)
    rows = density_rows(kernel, B, H, S, densities, params)
    dense_us = rows[0]["time_us"] / 1.0 if densities[0] == 1.0 else restate.our_kernel(kernel, B, H, S).time_us
    for r in rows:
        r["with_predictor_us"] = r["time_us"] + pred_us
        r["speedup_with_predictor"] = dense_us / r["with_predictor_us"]
    return {"shape": PREDICT_SHAPE, "predictor": pred, "predictor_us": pred_us, "dense_us": dense_us,
            "predictor_fraction": pred_us / dense_us, "density": rows}


def print_sparse(as_json: bool = False) -> int:
    """`python tools/perf_model.py --sparse`: the predictor's launches and the attention at each density."""
    res = predictor_vs_dense()
    if as_json:
        import json
        print(json.dumps(res, indent=1))
        return 0
    B, H, S, D = res["shape"]
    print(f"predictor at B={B} H={H} S={S} D={D} (modeled from emulated counts):")
    for r in res["predictor"]:
        print(f"  {r['launch']:6} {r['wave_instructions'] / 1e6:8.1f} M wave-instr  issue {r['issue_us']:7.1f} us  "
              f"DRAM {r['dram_us']:7.1f} us  -> {r['time_us']:7.1f} us ({r['binding']})")
    print(f"  total {res['predictor_us']:.1f} us = {100 * res['predictor_fraction']:.2f} % of dense attention "
          f"({res['dense_us']:.1f} us, asm)")
    for row in res["density"]:
        print(f"  {row['mode']:32} attention {row['time_us']:9.1f} us  + predictor {row['with_predictor_us']:9.1f} us"
              f"  x{row['speedup_with_predictor']:.2f} vs dense ({row['binding']})")
    return 0
