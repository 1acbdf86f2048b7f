"""Issue-bound cycles per key tile per SIMD (the optimistic bound: every latency hidden) and the shipped attention
kernels' shape figures at boost clock in that mode (docs/performance.md §Issue-bound mode)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from perfmodel.hardware import (CLOCK_HZ, DRAM_BYTES_PER_S, INFINITY_CACHE, LDS_BYTES_PER_CLK_PER_SIMD, PEAK_OPS,
                                SIMDS, TRANS_CYCLES)
from perfmodel.stream import HEAD_DIM, KEY_TILE, PAD, QUERY_TILE, WAVES_PER_WG, KernelModel, Mix
from perfmodel.simulate import SimResult


@dataclass
class TileCost:
    """Modeled cycles of one key tile of one wave on its SIMD, per resource."""
    wmma: float
    valu: float                     # VALU issue cycles incl. the issue slot of each TRANS op
    trans: float                    # TRANS pipeline cycles
    vector: float                   # WMMA + max(valu, trans): the SIMD's vector port
    scalar: float                   # scalar/memory issue port
    lds: float
    stream: float                   # one wave's in-order issue: vector + scalar
    waves: int
    dram: float = 0.0
    cycles: float = 0.0
    binding: str = ""

    def resources(self) -> dict[str, float]:
        return {"vector port": self.vector, "scalar/memory issue": self.scalar, "LDS": self.lds,
                f"one wave's stream / {self.waves} waves": self.stream / self.waves, "DRAM": self.dram}


def tile_cost(mix: Mix, waves: int, dram: float = 0.0, *, trans_overlaps_wmma: bool = False,
              lds_bytes_per_clk: float = LDS_BYTES_PER_CLK_PER_SIMD) -> TileCost:
    """The model: cycles per key tile per SIMD = max over resources (ASSUMPTIONS).

    trans_overlaps_wmma: the alternative TRANS assumption (pipeline keeps running under a WMMA), for the
    sensitivity table only: vector port = WMMA + VALU issue, and the TRANS pipeline is its own resource."""
    if waves < 1:
        raise ValueError(f"waves: expected >= 1 wave per SIMD, got {waves}")
    wmma = mix.wmma_cycles
    valu = mix.VALU + mix.TRANS
    trans = TRANS_CYCLES * mix.TRANS
    vector = wmma + (valu if trans_overlaps_wmma else max(valu, trans))
    scalar = mix.SALU + mix.SMEM + mix.BRANCH + mix.WAIT_OTHER + mix.LDS + mix.VMEM_LOAD + mix.VMEM_STORE
    lds = mix.lds_bytes / lds_bytes_per_clk
    t = TileCost(wmma, valu, trans, vector, scalar, lds, vector + scalar, waves, dram)
    res = t.resources()
    if trans_overlaps_wmma:
        res["TRANS pipeline"] = trans
    name = max(res, key=res.get)
    t.cycles = res[name]
    if name == "vector port":
        extra = "TRANS" if trans >= valu and not trans_overlaps_wmma else "VALU"
        if wmma == 0:
            name = extra
        elif max(valu, trans) == 0:
            name = "WMMA"
        else:
            name = f"WMMA+{extra}"
    elif name == "TRANS pipeline":
        name = "TRANS"
    elif name.startswith("one wave"):
        name = f"issue stream ({waves} wave/SIMD)"
    t.binding = name
    return t


# ------------------------------------------------------------------------------------------- shapes
@dataclass
class ShapeResult:
    B: int
    H: int
    S: int
    tile: TileCost
    seconds: float
    tflops: float
    pct_peak: float
    dram_bytes: float
    l2_tbps: float                  # L2/IC -> CU load demand at the modeled speed


def dram_bytes(B: int, H: int, S: int, resident_wgs: int) -> float:
    """Bytes from DRAM under the reuse assumption (ASSUMPTIONS 'memory')."""
    S_pad = -(-S // PAD) * PAD
    kv_head = 2 * S_pad * HEAD_DIM                      # int8 K + fp8 V^T of one head
    q_tiles = S_pad // QUERY_TILE
    kv_passes = 1 if kv_head <= INFINITY_CACHE else math.ceil(q_tiles / resident_wgs)
    per_head = (S_pad * HEAD_DIM                        # q int8
                + kv_head * kv_passes
                + 2 * (S_pad // 32) * 4 + 3 * HEAD_DIM * 4  # q/k scales, k_mean, v_scale
                + S * HEAD_DIM * 2)                     # out bf16
    return B * H * per_head


def model_shape(km: KernelModel, B: int, H: int, S: int, mix: Mix | None = None,
                sim: "SimResult | None" = None) -> ShapeResult:
    """sim: the latency-aware steady state replaces the issue-bound cycles per tile (DRAM still bounds it);
    the prologue/epilogue keep their issue-bound cost in both modes."""
    mix = mix or km.mix
    S_pad = -(-S // PAD) * PAD
    tiles_per_wave = -(-S_pad // KEY_TILE)              # 64-key tiles (an odd count in an x2 loop: tail)
    waves_total = B * H * (S_pad // QUERY_TILE) * WAVES_PER_WG
    waves_per_simd = -(-waves_total // SIMDS)            # busiest SIMD
    resident_wgs = SIMDS * km.waves // WAVES_PER_WG
    dbytes = dram_bytes(B, H, S, resident_wgs)
    wave_tiles = waves_total * tiles_per_wave
    dram_cycles = dbytes / DRAM_BYTES_PER_S * CLOCK_HZ * SIMDS / wave_tiles
    tile = tile_cost(mix, km.waves, dram_cycles)
    if sim is not None:
        tile = replace(tile, cycles=max(sim.cycles_per_tile, dram_cycles),
                       binding="DRAM" if dram_cycles > sim.cycles_per_tile else f"latency-aware: {sim.binding}")
    fixed = tile_cost(km.fixed, km.waves).cycles
    cycles = waves_per_simd * (tiles_per_wave * tile.cycles + fixed)
    seconds = cycles / CLOCK_HZ
    tflops = 4 * B * H * S * S * HEAD_DIM / seconds / 1e12
    l2 = waves_total * tiles_per_wave * mix.load_bytes / seconds / 1e12
    return ShapeResult(B, H, S, tile, seconds, tflops, 100 * tflops * 1e12 / PEAK_OPS, dbytes, l2)


def sensitivity(km: KernelModel) -> list[tuple[str, TileCost]]:
    """Steady-state tile cost under the chosen model and under single-assumption changes."""
    mix, w = km.mix, km.waves
    floor = replace(mix, VALU=max(0.0, min(mix.VALU, (TRANS_CYCLES - 1) * mix.TRANS)))
    return [
        ("chosen model", tile_cost(mix, w)),
        ("static counts (every rescale/mask block once)", tile_cost(km.static, w)),
        ("TRANS pipeline also overlaps WMMA", tile_cost(mix, w, trans_overlaps_wmma=True)),
        (f"LDS at half the calibrated rate ({LDS_BYTES_PER_CLK_PER_SIMD / 2:g} B/clk/SIMD)",
         tile_cost(mix, w, lds_bytes_per_clk=LDS_BYTES_PER_CLK_PER_SIMD / 2)),
        ("one wave per SIMD (no cross-wave overlap)", tile_cost(mix, 1)),
        ("floor for this loop: all plain VALU hidden under TRANS", tile_cost(floor, w)),
    ]

