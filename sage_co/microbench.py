"""Host side of the gfx1201 microbenchmarks (asm_src/gfx1201_microbench.s; docs/performance.md
§Microbenchmarks and refit).

    inputs(bench, workgroups, ...)      the kernel's argument tensors (seeded)
    launch_bench(bench, args, ...)      one launch on a backend ("emu" or "gpu")
    expected(bench, args, ...)          the result records the kernel must write (numpy, from the inputs alone)
    check(bench, out, args, ...)        the mismatching record fields (empty: the kernel ran correctly)
    gpu_plan(cus)                       the launch geometry on a GPU of `cus` compute units (its grid fills it)
    clock_cycles(out)                   the clock kernel's per-wave shader-clock growth across its loop
    derive(seconds, ...)                the model's parameters from HIP-event times and the measured clock (sustained
                                        clock, TRANS clocks per op, VOPD issue clocks, co-issue, LDS bytes per clock
                                        per CU, LDS load-to-use latency, L2 -> CU bytes per clock)

Each kernel runs `iterations` loop iterations per wave; on a GPU it is timed at two iteration counts and the slope
(seconds per iteration) is what `derive` uses, so launch overhead and prologue cancel. Every constant of the
kernels is in sage_co/abi.py (MICROBENCH_*). sage_co.selftest (`sage-co selftest --perf`) drives this module.
"""
from __future__ import annotations

import numpy as np
import torch

from . import registry
from .abi import (MICROBENCH_ARGS, MICROBENCH_BENCHES, MICROBENCH_BLOCK, MICROBENCH_CHAIN_STEPS, MICROBENCH_VOPD_PER_ITER,
                  MICROBENCH_EXP_BIAS, MICROBENCH_EXP_LANE_MASK,
                  MICROBENCH_LDS_BYTES, MICROBENCH_LDS_LOAD_BYTES, MICROBENCH_LDS_PER_ITER, MICROBENCH_MATRIX_DWORDS,
                  MICROBENCH_OP, MICROBENCH_RECORD_DWORDS, MICROBENCH_STREAM_LOADS, MICROBENCH_STREAM_WAVE_BYTES,
                  MICROBENCH_TRANS_PER_ITER, MICROBENCH_VALU_PER_ITER, MICROBENCH_WAVES_PER_WG,
                  MICROBENCH_WMMA_PER_ITER, WAVE_SIZE)
from .launch import launch

WMMA_TILE = 16                      # v_wmma_i32_16x16x16_iu8: A 16x16 int8, B 16x16 int8, D 16x16 int32
WMMA_OPS = 2 * WMMA_TILE ** 3       # multiply-adds x 2 of one 16x16x16 WMMA
IU8_WMMA_CLOCKS = 8                 # docs/rdna4.md §Throughput [AMC]: iu8 WMMA issue cost per SIMD
VALU_ISSUE_CLOCKS = 1               # §Throughput: one wave32 VALU issue per clock per SIMD (UNVERIFIED)
TRANS_CLOCKS = 4                    # §Throughput: TRANS quarter rate, 4 clk per wave32 v_exp_f32
CUS = 64                            # §Throughput table: the R9700's 64 CUs (the model's target; a GPU's own count
                                    # comes from its properties: gpu_plan / derive take it)
SIMDS_PER_CU = 2                    # 2 SIMD32 per CU; one LDS half (32 banks) per CU, shared by its 2 SIMDs (§Memory)
CUS_PER_WGP = 2
STREAM_SRC_BYTES = 6 << 20          # l2_stream buffer: fits the 8 MiB L2 (§Throughput table), far beyond L0
UNIT_DWORDS = MICROBENCH_RECORD_DWORDS - MICROBENCH_MATRIX_DWORDS
WMMA_BENCHES = ("wmma", "wmma_valu", "wmma_trans", "wmma_lds", "clock")
TRANS_BENCHES = {"trans": "v_exp_f32", "trans_log": "v_log_f32", "trans_rcp": "v_rcp_f32"}   # TRANS alone, per op
CLOCK_DWORDS = 4                    # clock: unit block dwords 0..3 = SHADER_CYCLES lo, hi before; lo, hi after
OVERLAP_PAIRS = {"wmma_valu": "valu", "wmma_trans": "trans", "wmma_lds": "lds"}   # mix -> the unit alone
UNIT_PAIRS = {"trans_valu": ("trans", "valu")}      # mixes of two non-WMMA units -> the two alone


def symbol(bench: str) -> str:
    if bench not in MICROBENCH_BENCHES:
        raise ValueError(f"bench={bench!r}: expected one of {MICROBENCH_BENCHES}")
    return registry.find(MICROBENCH_OP, "asm", bench=bench).symbol


def waves(workgroups: int) -> int:
    return workgroups * MICROBENCH_WAVES_PER_WG


def stream_stride(workgroups: int) -> int:
    """Bytes a wave's l2_stream window advances per iteration: the whole grid's 2 KiB windows side by side."""
    return waves(workgroups) * MICROBENCH_STREAM_WAVE_BYTES


def inputs(bench: str, workgroups: int, *, src_bytes: int | None = None, device="cpu", seed: int = 0) -> dict:
    """The argument tensors of one launch: A and B^T int8 in [-8, 8) (sums stay far from int32 wrap), the LDS table
    (lds_chain: a random permutation of the table's word addresses, so every step is a real dependent load), the
    l2_stream buffer (random u32), and the zeroed result records."""
    symbol(bench)
    if isinstance(workgroups, bool) or not isinstance(workgroups, int) or workgroups < 1:
        raise ValueError(f"workgroups: expected a positive int, got {workgroups!r}")
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-8, 8, (WMMA_TILE, WMMA_TILE), generator=g, dtype=torch.int8)
    b_t = torch.randint(-8, 8, (WMMA_TILE, WMMA_TILE), generator=g, dtype=torch.int8)
    words = MICROBENCH_LDS_BYTES // 4
    if bench == "lds_chain":
        src = (torch.randperm(words, generator=g, dtype=torch.int64) * 4).to(torch.int32)
    elif bench == "l2_stream":
        src_bytes = STREAM_SRC_BYTES if src_bytes is None else src_bytes
        step, stride = MICROBENCH_STREAM_WAVE_BYTES, stream_stride(workgroups)
        if src_bytes % step or src_bytes < stride or src_bytes >= 1 << 32:
            raise ValueError(f"src_bytes={src_bytes}: the l2_stream buffer must be a multiple of {step} bytes, at "
                             f"least the grid's window ({workgroups} workgroups x {MICROBENCH_WAVES_PER_WG} waves x "
                             f"{step} B = {stride} B) and below 4 GiB")
        src = torch.randint(-2 ** 31, 2 ** 31, (src_bytes // 4,), generator=g, dtype=torch.int64).to(torch.int32)
    else:
        src = torch.randint(-2 ** 31, 2 ** 31, (words,), generator=g, dtype=torch.int64).to(torch.int32)
    out = torch.zeros(waves(workgroups), WAVE_SIZE, MICROBENCH_RECORD_DWORDS, dtype=torch.int32)
    return {name: t.to(device) for name, t in (("a", a), ("b", b_t), ("src", src), ("out", out))}


def launch_bench(bench: str, args: dict, iterations: int, *, backend: str, **options):
    """One launch of `bench` over args["out"]'s waves; returns the backend's result (emu: its statistics)."""
    if isinstance(iterations, bool) or not isinstance(iterations, int) or not 0 <= iterations < 1 << 32:
        raise ValueError(f"iterations: expected an int in [0, 2^32), got {iterations!r}")
    n_waves = args["out"].shape[0]
    stride = n_waves * MICROBENCH_STREAM_WAVE_BYTES if bench == "l2_stream" else 0
    values = dict(args, iterations=iterations, src_bytes=args["src"].numel() * 4 if bench == "l2_stream" else 0,
                  stride_bytes=stride)
    return launch(symbol(bench), MICROBENCH_ARGS, (n_waves // MICROBENCH_WAVES_PER_WG, 1, 1), MICROBENCH_BLOCK,
                  values, backend=backend, **options)


# ------------------------------------------------------------------------------------------ expected results
def _matrix_record(a: np.ndarray, b_t: np.ndarray, iterations: int) -> np.ndarray:
    """[32 lanes, 8]: dword i of lane l = sum of the 4 chains' C[i + 8h][r] (r = l % 16, h = l // 16), the WMMA D
    layout of docs/rdna4.md §WMMA lane layouts."""
    c = (a.astype(np.int64) @ b_t.astype(np.int64).T) * MICROBENCH_WMMA_PER_ITER * iterations
    lanes = np.arange(WAVE_SIZE)
    rows = np.arange(MICROBENCH_MATRIX_DWORDS)[None, :] + MICROBENCH_MATRIX_DWORDS * (lanes[:, None] // 16)
    return c[rows, (lanes % 16)[:, None]]


def _wrap32(x: np.ndarray) -> np.ndarray:
    return ((x.astype(np.int64) + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)


def expected(bench: str, args: dict, iterations: int) -> np.ndarray:
    """The records [waves, 32, RECORD_DWORDS] (int32) the kernel writes, computed from the inputs alone."""
    symbol(bench)
    n_waves = args["out"].shape[0]
    a, b_t = args["a"].cpu().numpy(), args["b"].cpu().numpy()
    src = args["src"].cpu().numpy().astype(np.int64)
    rec = np.zeros((n_waves, WAVE_SIZE, MICROBENCH_RECORD_DWORDS), dtype=np.int64)
    lanes = np.arange(WAVE_SIZE)
    m = MICROBENCH_MATRIX_DWORDS
    if bench in WMMA_BENCHES:
        rec[:, :, :m] = _matrix_record(a, b_t, iterations)
    if bench in ("valu", "wmma_valu"):
        rec[:, :, m:] = iterations * MICROBENCH_VALU_PER_ITER // UNIT_DWORDS
    if bench == "vopd":         # f32 counters (v_dual_add_f32 of 1.0): 2 per iteration each, exact below 2^24
        rec[:, :, m:] = np.float32(2 * MICROBENCH_VOPD_PER_ITER * iterations // UNIT_DWORDS).view(np.int32)
    if bench == "trans_valu":   # its VALU counters are v[16:31]: the matrix sum adds two of them per dword
        rec[:, :, :m] = 2 * iterations * MICROBENCH_VALU_PER_ITER // UNIT_DWORDS
    e = ((lanes & MICROBENCH_EXP_LANE_MASK) - MICROBENCH_EXP_BIAS)[:, None] + np.arange(MICROBENCH_TRANS_PER_ITER)[None, :]
    exps = e.astype(np.float32)
    t = MICROBENCH_TRANS_PER_ITER
    if bench in ("trans", "wmma_trans", "trans_valu"):
        rec[:, :, m + t:] = exps.view(np.int32)
        if iterations:
            rec[:, :, m:m + t] = np.exp2(exps).view(np.int32)
    if bench in ("trans_log", "trans_rcp"):     # operands 2^e (exact), results e and 2^-e (exact)
        rec[:, :, m + t:] = np.exp2(exps).view(np.int32)
        if iterations:
            rec[:, :, m:m + t] = (exps if bench == "trans_log" else np.exp2(-exps)).view(np.int32)
    if bench in ("lds", "wmma_lds") and iterations:
        slots = MICROBENCH_LDS_LOAD_BYTES // 4
        words = [src[j * slots + 4 * lanes[:, None] + np.arange(4)[None, :]] for j in range(MICROBENCH_LDS_PER_ITER)]
        rec[:, :, m:] = np.concatenate(words, axis=1)
    if bench == "lds_chain":
        thread = np.arange(n_waves * WAVE_SIZE) % (MICROBENCH_BLOCK[0])
        addr = thread * 4
        for _ in range(iterations * MICROBENCH_CHAIN_STEPS):
            addr = src[addr // 4]
        rec[:, :, m] = addr.reshape(n_waves, WAVE_SIZE)
    if bench == "l2_stream":
        rec[:] = _stream_records(src, n_waves, iterations)
    return _wrap32(rec)


def _stream_records(src: np.ndarray, n_waves: int, iterations: int) -> np.ndarray:
    """Wave g reads the 2 KiB window at (g * 2 KiB + i * stride) mod src_bytes in iteration i: 4 lane-contiguous
    b128 loads; the record holds the per-lane sums and the last window's words."""
    src_bytes = src.size * 4
    stride = n_waves * MICROBENCH_STREAM_WAVE_BYTES
    per_load = MICROBENCH_LDS_LOAD_BYTES // 4
    rec = np.zeros((n_waves, WAVE_SIZE, MICROBENCH_RECORD_DWORDS), dtype=np.int64)
    lane_words = 4 * np.arange(WAVE_SIZE)[:, None] + np.arange(4)[None, :]     # [32, 4]
    m = MICROBENCH_MATRIX_DWORDS
    for g in range(n_waves):
        off = (g * MICROBENCH_STREAM_WAVE_BYTES) % src_bytes
        loads = None
        for _ in range(iterations):
            base = off // 4
            loads = [src[base + j * per_load + lane_words] for j in range(MICROBENCH_STREAM_LOADS)]
            rec[g, :, 0:4] += loads[0] + loads[2]
            rec[g, :, 4:8] += loads[1] + loads[3]
            off = (off + stride) % src_bytes
        if loads is not None:
            rec[g, :, m:] = np.concatenate(loads, axis=1)
    return rec


def clock_cycles(out: torch.Tensor) -> np.ndarray:
    """The clock kernel's shader-clock growth across its loop, per wave (lane 0's record; every lane holds the same
    SGPR values): (hi << 32 | lo) after - before, as int64."""
    r = out.cpu().numpy().astype(np.int64)[:, 0, MICROBENCH_MATRIX_DWORDS:MICROBENCH_MATRIX_DWORDS + CLOCK_DWORDS]
    r &= 0xFFFFFFFF
    return ((r[:, 3] << 32) | r[:, 2]) - ((r[:, 1] << 32) | r[:, 0])


def check(bench: str, out: torch.Tensor, args: dict, iterations: int) -> list[str]:
    """What differs between the written records and expected(): [] when the kernel ran correctly. The clock
    kernel's counter reads are not known in advance: every lane of a wave must hold its wave's, and the counter must
    have grown across the loop by at least one per WMMA (on a GPU, 8 clocks per iu8 WMMA; on the emulator one
    wave-instruction)."""
    got = out.cpu().numpy().astype(np.int32)
    want = expected(bench, args, iterations)
    problems = []
    if bench == "clock":
        m = MICROBENCH_MATRIX_DWORDS
        stamps = got[:, :, m:m + CLOCK_DWORDS]
        if (stamps != stamps[:, :1]).any():
            problems.append("clock: the lanes of a wave hold different counter reads")
        grew = clock_cycles(out)
        low = iterations * MICROBENCH_WMMA_PER_ITER
        if (grew < low).any():
            problems.append(f"clock: the shader clock grew by {int(grew.min())} across the loop, less than its "
                            f"{low} WMMAs")
        got = got.copy()
        got[:, :, m:m + CLOCK_DWORDS] = want[:, :, m:m + CLOCK_DWORDS]
    bad = np.argwhere(got != want)
    if not len(bad):
        return problems
    w, lane, d = bad[0]
    field = "matrix sum" if d < MICROBENCH_MATRIX_DWORDS else "unit block"
    return problems + [f"{bench}: {len(bad)} of {want.size} result dwords differ; first: wave {w} lane {lane} dword {d} "
            f"({field}) = {int(got[w, lane, d])}, expected {int(want[w, lane, d])}"]


# ------------------------------------------------------------------------------------------ counts and derivation
def ops_per_iteration(bench: str) -> dict[str, int]:
    """Per wave and loop iteration: WMMA, VALU (in the loop body), TRANS, LDS loads, dependent LDS steps, bytes."""
    symbol(bench)
    n = {"WMMA": 0, "VALU": 0, "TRANS": 0, "LDS": 0, "CHAIN": 0, "BYTES": 0}
    if bench in WMMA_BENCHES:
        n["WMMA"] = MICROBENCH_WMMA_PER_ITER
    if bench in ("valu", "wmma_valu", "trans_valu"):
        n["VALU"] = MICROBENCH_VALU_PER_ITER
    if bench == "vopd":
        n["VALU"] = MICROBENCH_VOPD_PER_ITER        # one wave-instruction per pair
    if bench in ("trans", "wmma_trans", "trans_valu", "trans_log", "trans_rcp"):
        n["TRANS"] = MICROBENCH_TRANS_PER_ITER
    if bench in ("lds", "wmma_lds"):
        n["LDS"] = MICROBENCH_LDS_PER_ITER
        n["BYTES"] = MICROBENCH_LDS_PER_ITER * MICROBENCH_LDS_LOAD_BYTES
    if bench == "lds_chain":
        n["LDS"] = n["CHAIN"] = MICROBENCH_CHAIN_STEPS
    if bench == "l2_stream":
        n["BYTES"] = MICROBENCH_STREAM_WAVE_BYTES
        n["VALU"] = 4 * MICROBENCH_STREAM_LOADS     # the per-lane sums
    return n


def gpu_plan(cus: int) -> dict[str, tuple[int, int, int]]:
    """Launch geometry on a GPU of `cus` compute units (its own count, from the device's properties: a 56- or
    48-CU gfx1201 board gets a grid that fills it, not the R9700's): per bench (workgroups, the two iteration
    counts whose time difference is measured); 1 workgroup = one wave on each SIMD of a WGP. The throughput
    kernels run WGPs x 8 workgroups (8 waves per SIMD: the latencies are hidden; the stream 16, so that enough
    loads are in flight to cover the L2 latency), the chain one workgroup (one wave per SIMD: latency-bound by
    construction)."""
    if isinstance(cus, bool) or not isinstance(cus, int) or cus < CUS_PER_WGP or cus % CUS_PER_WGP:
        raise ValueError(f"cus: expected a positive even number of compute units, got {cus!r}")
    wgps = cus // CUS_PER_WGP
    throughput = ("wmma", "valu", "trans", "lds", "wmma_valu", "wmma_trans", "wmma_lds", "trans_log", "trans_rcp",
                  "vopd", "trans_valu", "clock")
    return {**{b: (wgps * 8, 2048, 8192) for b in throughput},
            "lds_chain": (1, 1024, 4096),
            "l2_stream": (wgps * 16, 512, 2048)}      # 16 waves per SIMD: 32 KiB of loads in flight per SIMD


GPU_PLAN = gpu_plan(CUS)                  # the R9700's (tests; selftest_perf uses gpu_plan(the device's CUs))
# (workgroups, iterations) on the emulator, correctness only; a GPU's correctness launch uses the same iterations
EMU_PLAN = {b: (2, 3) for b in MICROBENCH_BENCHES}


def per_iteration_seconds(t_short: float, t_long: float, n_short: int, n_long: int) -> float:
    if not n_long > n_short:
        raise ValueError(f"iteration counts must increase, got {n_short}, {n_long}")
    return (t_long - t_short) / (n_long - n_short)


def derive(seconds: dict[str, float], workgroups: dict[str, int], cus: int = CUS,
           clock_cycles_per_iteration: float | None = None) -> dict:
    """The model's parameters from the measured seconds per loop iteration (all waves of the launch together) on a
    GPU of `cus` compute units.

    clock: measured, not assumed: the clock kernel's shader-clock growth per loop iteration of one wave (its waves
    run side by side for the whole launch) over its HIP-event seconds per iteration (clock_cycles_per_iteration;
    without it the clock is inferred from the WMMA rate at the assumed 8 clocks per iu8 WMMA, §Throughput [AMC],
    and `clock.measured` is false). The WMMA rate then gives the measured clocks per iu8 WMMA.
    TRANS / VALU alone: SIMD clocks per op at that clock (trans: v_exp_f32, trans_log, trans_rcp); vopd: vector
    issue clocks per v_dual pair. overlap (per unit X with WMMA, and TRANS with VALU): (t_a + t_b - t_mix) /
    min(t_a, t_b); 1: the two issue side by side, 0: they add. LDS rate: the `lds` kernel's bytes of all waves per
    iteration / CUs / seconds / clock, bytes per clock of one CU's LDS half (its loads are conflict-free, 4 passes
    of 128 B each, docs/rdna4.md §Memory). LDS latency: seconds per dependent step x the clock. L2: bytes of all
    waves per iteration / seconds / clock."""
    missing = [b for b in MICROBENCH_BENCHES if b not in seconds]
    if missing:
        raise ValueError(f"derive: no measurement for {missing}")
    simds = cus * SIMDS_PER_CU
    out: dict = {}
    wps = waves(workgroups["wmma"]) / simds
    inferred = wps * MICROBENCH_WMMA_PER_ITER * IU8_WMMA_CLOCKS / seconds["wmma"]
    if clock_cycles_per_iteration is not None:
        clock = clock_cycles_per_iteration / seconds["clock"]
        out["clock"] = {"measured": True, "clock_hz": clock, "cycles_per_iteration": clock_cycles_per_iteration}
    else:
        clock = inferred
        out["clock"] = {"measured": False, "clock_hz": clock}
    out["wmma"] = {"sustained_clock_hz": clock, "waves_per_simd": wps, "inferred_clock_hz": inferred,
                   "clocks_per_wmma": seconds["wmma"] * clock / (wps * MICROBENCH_WMMA_PER_ITER),
                   "ops_per_s": waves(workgroups["wmma"]) * MICROBENCH_WMMA_PER_ITER * WMMA_OPS / seconds["wmma"]}
    for bench in (*TRANS_BENCHES, "valu"):
        out[bench] = {"clocks_per_op": _unit_clocks(bench, seconds[bench], workgroups[bench], clock, simds)}
    vwps = waves(workgroups["vopd"]) / simds
    out["vopd"] = {"issue_clocks_per_pair": seconds["vopd"] * clock / (vwps * MICROBENCH_VOPD_PER_ITER)}
    for mix, unit in OVERLAP_PAIRS.items():
        t_w, t_x, t_m = seconds["wmma"], seconds[unit], seconds[mix]
        out[mix] = {"overlap": (t_w + t_x - t_m) / min(t_w, t_x), "t_wmma_s": t_w, "t_unit_s": t_x, "t_mix_s": t_m,
                    "unit_clocks_per_op": _unit_clocks(unit, seconds[unit], workgroups[unit], clock, simds)}
    for mix, (a, b) in UNIT_PAIRS.items():
        t_a, t_b, t_m = seconds[a], seconds[b], seconds[mix]
        out[mix] = {"overlap": (t_a + t_b - t_m) / min(t_a, t_b), f"t_{a}_s": t_a, f"t_{b}_s": t_b, "t_mix_s": t_m}
    lds_bytes = waves(workgroups["lds"]) * MICROBENCH_LDS_PER_ITER * MICROBENCH_LDS_LOAD_BYTES
    out["lds"] = {"bytes_per_clk": lds_bytes / cus / seconds["lds"] / clock}
    step_s = seconds["lds_chain"] / MICROBENCH_CHAIN_STEPS     # the chains of all waves advance side by side
    out["lds_chain"] = {"load_to_use_s": step_s, "load_to_use_clk": step_s * clock}
    stream_bytes = waves(workgroups["l2_stream"]) * MICROBENCH_STREAM_WAVE_BYTES
    out["l2_stream"] = {"bytes_per_s": stream_bytes / seconds["l2_stream"],
                        "bytes_per_clk": stream_bytes / seconds["l2_stream"] / clock}
    return out


def _unit_clocks(unit: str, seconds: float, workgroups: int, clock: float, simds: int = CUS * SIMDS_PER_CU) -> float:
    """SIMD clocks per op of the unit alone at the measured clock (VALU: issue clocks; TRANS: pipeline clocks; LDS:
    clocks per wave ds_load_b128 of one SIMD)."""
    ops = ops_per_iteration(unit)
    per_wave = ops["VALU"] or ops["TRANS"] or ops["LDS"]
    return seconds * clock / (waves(workgroups) / simds * per_wave)

