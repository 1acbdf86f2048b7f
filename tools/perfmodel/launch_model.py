"""The calibrated model of one kernel launch on the R9700: any code object, any grid (docs/performance.md §The model).

    time = launch overhead + max(DRAM bound, sum over the busiest WGP's rounds of
           max(simulated round, L2 -> CU bound)) / sustained clock

1. Occupancy at workgroup granularity (hardware.occupancy): VGPRs, static + dynamic LDS, wave slots; a workgroup's
   waves round-robin over the WGP's 4 SIMDs.
2. Rounds: workgroups go round-robin to the 32 WGPs; the busiest WGP runs ceil(N / 32) of them, `k` at a time
   (k = workgroups per WGP), so the last round may run fewer (the wave-quantization tail).
3. A round with c workgroups: each SIMD holds c x ceil(W / 4) waves, c barrier groups. The latency-aware simulator
   (simulate.py) runs the prologue once, the loop's paths as often as the emulator saw them (trip count
   iterations), and the epilogue once; every LDS access costs its emulated bank-conflict passes x the 2 SIMDs that
   share an LDS half. Scratch accesses are VMEM traffic like any other.
4. L2 -> CU: the bytes all active workgroups load and store in a round over Params.l2_bytes_per_clk; DRAM: the
   compulsory bytes (when known) over 640 GB/s for the whole launch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from perfmodel.emulated import WorkgroupRun, dynamic_iteration_mix
from perfmodel.hardware import (CALIBRATED, DRAM_BYTES_PER_S, SIMDS_PER_LDS_HALF, WGPS, Occupancy, Params,
                                occupancy)
from perfmodel.simulate import Latencies, decode_path, diffuse_paths, simulate
from perfmodel.stream import KernelModel, Mix, iteration_paths, longest_iteration

SIM_ITERATIONS = 12


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]
    block: int                              # threads per workgroup
    flops: float                            # useful work of the launch (for TFLOPS)
    peak: str = "fp8"                       # which dense WMMA peak the % refers to
    dynamic_lds: int = 0
    trip_count: float | None = None         # loop iterations per wave (None: from the emulated workgroup)
    dram_bytes: float | None = None         # compulsory DRAM traffic when known (None: not bounded)

    def __post_init__(self):
        if len(self.grid) != 3 or any(int(g) < 1 for g in self.grid):
            raise ValueError(f"grid: expected three positive ints, got {self.grid}")
        if self.flops <= 0:
            raise ValueError(f"flops: expected > 0, got {self.flops}")
        if self.trip_count is not None and self.trip_count <= 0:
            raise ValueError(f"trip_count: expected > 0, got {self.trip_count}")
        if self.dynamic_lds < 0:
            raise ValueError(f"dynamic_lds: expected >= 0 bytes, got {self.dynamic_lds}")

    @property
    def workgroups(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]


@dataclass
class Round:
    workgroups_per_wgp: int                 # concurrent workgroups on the busiest WGP in this round
    count: int                              # how many such rounds
    loop_cycles_per_iter: float             # simulated SIMD clocks per wave-iteration
    fixed_cycles: float                     # prologue + epilogue, simulated
    sim_cycles: float                       # one round: trips x waves x per-iter + fixed
    l2_cycles: float                        # L2 -> CU bound of one round
    binding: str

    @property
    def cycles(self) -> float:
        return max(self.sim_cycles, self.l2_cycles)


@dataclass
class LaunchResult:
    time_s: float
    tflops: float
    pct_peak: float
    binding: str
    occupancy: Occupancy
    trip_count: float
    rounds: list[Round]
    dram_s: float
    l2_tbps: float                          # L2 -> CU demand at the modeled time
    iter_mix: Mix
    params: Params
    notes: list[str] = field(default_factory=list)

    @property
    def time_us(self) -> float:
        return self.time_s * 1e6

    def as_dict(self) -> dict:
        return {"time_us": self.time_us, "tflops": self.tflops, "pct_peak": self.pct_peak, "binding": self.binding,
                "clock_ghz": self.params.clock_hz / 1e9, "trip_count": self.trip_count,
                "workgroups_per_wgp": self.occupancy.wgs_per_wgp, "occupancy_limit": self.occupancy.binding,
                "waves_per_simd": self.occupancy.waves_per_simd,
                "rounds": [{"workgroups_per_wgp": r.workgroups_per_wgp, "count": r.count,
                            "cycles_per_wave_iteration": r.loop_cycles_per_iter, "cycles": r.cycles,
                            "binding": r.binding} for r in self.rounds],
                "dram_us": self.dram_s * 1e6, "l2_tbps": self.l2_tbps, "notes": self.notes, "modeled": True}


def loop_streams(km: KernelModel, iter_mix: Mix | None, iterations: int,
                 executed=None) -> tuple[list[list], list[int]]:
    """The loop paths and their order so that the class counts track `iter_mix` (error diffusion); without it the
    longest path every iteration."""
    if iter_mix is None:
        path, _ = longest_iteration(km.insts, km.loop)
        return [path], [0]
    paths = iteration_paths(km.insts, km.loop, executed=executed)
    if len(paths) == 1:
        return paths, [0]
    return diffuse_paths(paths, iter_mix.counts(), iterations)


def _with_lds(ops, insts, run: WorkgroupRun | None, params: Params = CALIBRATED):
    """Each LDS access's clocks as its SIMD sees them: emulated passes x clocks per pass x SIMDs per LDS half."""
    if run is None:
        return ops
    per_pass = params.lds_pass_clocks * SIMDS_PER_LDS_HALF
    return [replace(op, lds_clocks=run.lds_passes[ins.addr] * per_pass)
            if op.cls == "LDS" and ins.addr in run.lds_passes else op for op, ins in zip(ops, insts)]


def _straight(km: KernelModel, run: WorkgroupRun | None) -> list:
    """Prologue + epilogue as one straight-line stream: the instructions outside the loop that ran (all of them
    without an emulated run)."""
    out = [i for i in km.insts if not km.loop.contains(i.addr) and i.mnemonic != "s_code_end"
           and (run is None or run.counts.get(i.addr, 0) > 0)]
    return out


def latencies(params: Params = CALIBRATED, wg_waves: int = 0) -> Latencies:
    """The simulator's rules from the parameter set (the one place Params reaches simulate.Latencies)."""
    return Latencies(lds=params.lds_latency, global_=params.global_latency, barrier=params.barrier_latency,
                     lds_bytes_per_clk=params.lds_bytes_per_clk / SIMDS_PER_LDS_HALF, wg_waves=wg_waves,
                     valu_overlaps_wmma=params.valu_coissue_wmma, trans_overlaps_wmma=params.trans_coissue_wmma,
                     trans_busy=params.trans_clocks, trans_overlaps_valu=params.trans_overlaps_valu,
                     vopd_clocks=params.vopd_issue_clocks)


def model_launch(km: KernelModel, launch: Launch, run: WorkgroupRun | None = None,
                 params: Params = CALIBRATED, transform=None, variant: dict | None = None) -> LaunchResult:
    """transform: an optional what-if applied to each decoded loop stream (list of simulate.Op -> list of Op),
    e.g. fewer VALU per score (whatif.py); the counts of the result then describe the transformed stream.
    variant: simulator rules changed for a sensitivity (fields of simulate.Latencies, e.g. trans_overlaps_wmma)."""
    notes: list[str] = []
    occ = occupancy(launch.block, km.vgprs, km.lds_bytes + launch.dynamic_lds)
    iter_mix = None
    trips = launch.trip_count
    if run is not None:
        iter_mix, emu_trips = dynamic_iteration_mix(km, run)
        if trips is None:
            trips = emu_trips
        elif abs(trips - emu_trips) > 1e-9:
            notes.append(f"--trip-count {trips:g} overrides the emulated {emu_trips:g}")
    if trips is None:
        raise ValueError(f"{km.symbol}: the main loop's trip count cannot be derived without an emulated "
                         "workgroup: pass --trip-count N")
    if iter_mix is None:
        notes.append("static counts: longest path through the loop every iteration; LDS without bank conflicts")
    if km.private_bytes:
        notes.append(f"scratch: {km.private_bytes} B per lane; its accesses count as VMEM traffic through L2")

    lat = latencies(params, occ.waves_per_simd_per_wg)
    if variant:
        lat = replace(lat, **variant)
        notes.append(f"what-if: simulator rules {variant}")
    body = [i for i in km.insts if km.loop.contains(i.addr)]
    paths, order = loop_streams(km, iter_mix, SIM_ITERATIONS,
                                executed={a for a, n in run.counts.items() if n} if run is not None else None)
    streams = [_with_lds(decode_path(p, body), p, run, params) for p in paths]
    if transform is not None:
        streams = [transform(st) for st in streams]
        notes.append("what-if: the loop stream was transformed")
    fixed_insts = _straight(km, run)
    fixed_ops = _with_lds(decode_path(fixed_insts), fixed_insts, run, params) if fixed_insts else []
    mix = iter_mix or km.static_iter
    bytes_per_wave_iter = mix.load_bytes + mix.store_bytes

    # the busiest WGP's rounds: ceil(N / 32) workgroups, k at a time
    n = math.ceil(launch.workgroups / WGPS)
    k = occ.wgs_per_wgp
    sizes = [k] * (n // k) + ([n % k] if n % k else [])
    rounds: list[Round] = []
    remaining = launch.workgroups
    for c in sorted(set(sizes), reverse=True):
        waves = c * occ.waves_per_simd_per_wg
        sim = simulate(streams[0], waves, SIM_ITERATIONS, lat, variants=streams, order=order)
        fixed = simulate(fixed_ops, waves, lat=lat, once=True).total_cycles if fixed_ops else 0.0
        sim_cycles = trips * waves * sim.cycles_per_iter + fixed
        active = min(remaining, WGPS * c)
        l2_bytes = active * occ.waves_per_wg * trips * bytes_per_wave_iter
        l2_cycles = l2_bytes / params.l2_bytes_per_clk
        binding = sim.binding if sim_cycles >= l2_cycles else "L2 -> CU bandwidth"
        cnt = sizes.count(c)
        remaining -= cnt * WGPS * c
        rounds.append(Round(c, cnt, sim.cycles_per_iter, fixed, sim_cycles, l2_cycles, binding))
    cycles = sum(r.cycles * r.count for r in rounds)
    compute_s = cycles / params.clock_hz
    dram_s = (launch.dram_bytes or 0.0) / DRAM_BYTES_PER_S
    time_s = max(compute_s, dram_s) + params.launch_overhead_s
    full = rounds[0]
    binding = full.binding if compute_s >= dram_s else "DRAM"
    if len(rounds) > 1:
        tail = sum(r.cycles * r.count for r in rounds[1:]) / cycles if cycles else 0.0
        notes.append(f"wave-quantization tail: {n} workgroups on the busiest WGP in rounds of {sizes}; the "
                     f"partial round takes {100 * tail:.0f} % of the time")
    elif sizes[-1] < k:
        notes.append(f"under-filled: {launch.workgroups} workgroups for {WGPS} WGPs x {k} workgroup slots")
    total_bytes = launch.workgroups * occ.waves_per_wg * trips * bytes_per_wave_iter
    tflops = launch.flops / time_s / 1e12
    return LaunchResult(time_s, tflops, 100 * launch.flops / time_s / params.peak(launch.peak), binding, occ,
                        trips, rounds, dram_s, total_bytes / time_s / 1e12, mix, params, notes)
