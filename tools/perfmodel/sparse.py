"""Modeled attention time vs block density and causal masking (issue 14): the kernels walk a per-query-tile LUT of
active key tiles, so a query tile's work is its number of active tiles times the per-tile cost of the dense loop.

Model: restate.our_kernel's launch model (the emulated dense workgroup's per-iteration mix of the LUT-walking
kernel, so the LUT's own per-tile cost -- one s_load_b32 of a LUT entry issued a tile ahead, 3 s_mov, the mask
test (4 SALU) and the m_use guard (4 VALU) -- is inside the measured mix), with the trip count set to the mean
number of active tiles per query tile, the FLOPs and the K/V DRAM traffic scaled by the density. Assumptions, stated:
workgroups of unequal length (causal) balance over the launch's many rounds (mean trip count); the diagonal tile's
element mask (~100 VALU, taken on <= 2 tiles of a query tile) is not in the dense mix.
"""
from __future__ import annotations

from perfmodel.calibration import CALIBRATED
from perfmodel.launch_model import Launch, model_launch
from perfmodel import restate
from perfmodel.stream import HEAD_DIM


DENSITIES = (1.0, 0.5, 0.25, 0.1)


def _launch(variant: str, B: int, H: int, S: int, active_tiles_per_qtile: float, params):
    from sage_co import abi
    dense = restate.our_kernel(variant, B, H, S, params)           # fills restate's (km, run) cache
    km, run = restate._cache[(variant, HEAD_DIM, False)]
    S_pad = -(-S // abi.PAD) * abi.PAD
    n_kv = S_pad // abi.KEY_TILE
    frac = active_tiles_per_qtile / n_kv
    D = HEAD_DIM
    dram = B * H * (S_pad * D + S * D * 2 + frac * 2 * S_pad * D + (S_pad // 32) * 8 + 3 * D * 4)
    launch = Launch((S_pad // abi.QUERY_TILE, H, B), abi.ATTENTION_BLOCK[0],
                    restate.attention_flops(B, H, S, D) * frac, "int8",
                    trip_count=active_tiles_per_qtile * abi.KEY_TILE / km.keys_per_iter, dram_bytes=dram)
    return dense, model_launch(km, launch, run, params)


def density_rows(variant: str = "asm", B: int = 1, H: int = 16, S: int = 16384, densities=DENSITIES,
                 params=CALIBRATED) -> list[dict]:
    """Modeled time at each block density (fraction of active key tiles per query tile) and causal, vs dense."""
    from sage_co import masks
    n_kv = -(-S // masks.BLOCK_KV)
    rows = []
    dense_us = None
    for d in densities:
        dense, r = _launch(variant, B, H, S, d * n_kv, params)
        dense_us = dense.time_us
        rows.append({"variant": variant, "S": S, "mode": f"density {d:g}", "time_us": r.time_us,
                     "speedup": dense_us / r.time_us, "binding": r.binding})
    causal_tiles = float(masks.causal_tiles(S, S).sum()) / masks.causal_tiles(S, S).shape[0]
    _, r = _launch(variant, B, H, S, causal_tiles, params)
    rows.append({"variant": variant, "S": S, "mode": f"causal ({causal_tiles / n_kv:.3f} of the tiles)",
                 "time_us": r.time_us, "speedup": dense_us / r.time_us, "binding": r.binding})
    return rows


if __name__ == "__main__":
    for v in ("asm", "hip"):
        for row in density_rows(v):
            print(f"{row['variant']:4} S={row['S']} {row['mode']:32} {row['time_us']:10.1f} us  "
                  f"x{row['speedup']:.2f}  ({row['binding']})")
