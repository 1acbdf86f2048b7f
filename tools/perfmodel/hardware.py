"""The R9700's figures (docs/rdna4.md), the model's fitted parameters, and occupancy at workgroup granularity."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields, replace

# gfx1201 resource facts and the VGPR occupancy formula: stated once in sage_co/rdna4.py (the asm generator and the
# ABI use the same); LANES is the wave width, rdna4.WAVE_SIZE
from sage_co.rdna4 import LDS_MAX_PER_WG, LDS_PER_WGP, MAX_WAVES_PER_SIMD, SIMDS_PER_WGP, VGPR_GRANULE  # noqa: F401
from sage_co.rdna4 import VGPRS_PER_SIMD as VGPR_FILE  # noqa: F401
from sage_co.rdna4 import WAVE_SIZE as LANES
from sage_co.rdna4 import waves_by_vgprs  # noqa: F401


# ------------------------------------------------------------------------------------------- sourced figures
BOOST_CLOCK_HZ = 2.92e9                     # §Throughput: R9700 boost 2920 MHz (the issue-bound bound uses it)
CLOCK_HZ = BOOST_CLOCK_HZ
RX9070XT_BOOST_HZ = 2.97e9                  # §Throughput "Clocks": RX 9070 XT boost 2970 MHz (the gcnasm board)
WMMA_BF16_MEASURED = 200e12                 # §Throughput "Clocks": ~200 TFLOPS BF16 WMMA measured on that board
CUS = 64                                    # §Throughput: 64 CUs = 32 WGPs x 2 CUs, 2 SIMD32 per CU
WGPS = CUS // 2
SIMDS = 2 * CUS
PEAK_RATE = {"int8": 2048, "fp8": 2048, "bf16": 1024, "fp16": 1024}   # §Throughput: dense OP|FLOP/clk/CU
PEAK_OPS = PEAK_RATE["int8"] * CUS * CLOCK_HZ    # 382.7 TOPS INT8/FP8 dense at boost
PEAK_BF16 = PEAK_RATE["bf16"] * CUS * CLOCK_HZ   # 191.4 TFLOPS
# the clock the WMMA measurement needs at the sourced rate: 200e12 / (1024 x 64) = 3.05 GHz, i.e. that board ran
# matrix work at (at least) its 2.97 GHz boost (docs/rdna4.md §Throughput "Clocks")
WMMA_MEASURED_CLOCK_HZ = WMMA_BF16_MEASURED / (PEAK_RATE["bf16"] * CUS)
WMMA_OPS = 2 * 16 * 16 * 16                 # one 16x16x16 WMMA
TRANS_CYCLES = 4                            # §Throughput: TRANS quarter rate, separate pipeline
LDS_PASS_BYTES = 128                        # §Memory: one pass = 32 dword banks x 4 B
LDS_BANKS = 32                              # §Memory: 32 dword banks per CU half (one per CU/SIMD pair)
SIMDS_PER_LDS_HALF = 2                      # §Memory: "two sets of 32 (one per CU/SIMD pair)"
DRAM_BYTES_PER_S = 640e9                    # §Throughput table: 256-bit GDDR6 at 20 Gbps
INFINITY_CACHE = 64 << 20                   # §Throughput table (ROCMDOC)
L2_BYTES = 8 << 20                          # §Throughput table (ROCMDOC)
L0_VECTOR_BYTES = 32 << 10                  # §Throughput table (ROCMDOC): L0 vector cache per CU


# ------------------------------------------------------------------------------------------- the parameter set
def _p(default, status: str, why: str):
    """A model parameter: its value, its status (SOURCED / FITTED / ASSUMED) and where it comes from."""
    return field(default=default, metadata={"status": status, "why": why})


@dataclass(frozen=True)
class Params:
    """The one parameter set of the calibrated model, for every kernel family (docs/performance.md §Calibration).
    Each field says whether it is SOURCED (a fact of docs/rdna4.md), FITTED (chosen on the calibration references:
    FlyDSL x 4 and gcnasm x 3 kernels) or ASSUMED (a stated physical assumption the fit did not move). Override
    by name with `params.override(name=value)` or `with_overrides(mapping)` (`perf_model.py --refit REPORT.json`
    sets measured values so)."""
    clock_hz: float = _p(RX9070XT_BOOST_HZ, "SOURCED",
                         "sustained clock under matrix load = the RX 9070 XT boost 2.97 GHz; the ~200 TFLOPS BF16 "
                         "WMMA measurement on that board needs >= 3.05 GHz at 1024 FLOP/clk/CU, so the boost is its "
                         "bound, not a fit (R9700 boost 2.92 GHz: -1.7 %) [docs/rdna4.md §Throughput \"Clocks\"]")
    lds_bytes_per_clk: float = _p(72.0, "FITTED",
                                  "LDS bytes per clock per CU (its LDS half, shared by its 2 SIMDs): a 32-bank pass "
                                  "of 128 B holds the half 128 / 72 = 1.8 clocks; set by FlyDSL's LDS-staged "
                                  "kernels (64..80 keep them within +-17 %); the RDNA2/3 wording of one access per "
                                  "bank per clock would be 128, which puts FlyDSL 25 % fast [§Memory]")
    lds_latency: int = _p(32, "ASSUMED", "LDS load-to-use, clocks (LLVM generic 20; the earlier fit's value; 64 "
                                         "moves FlyDSL BF16 by +4..+8 %, nothing out of band)")
    global_latency: int = _p(400, "FITTED", "VMEM load-to-use, clocks: an L2 hit (K/V of the resident heads fit "
                                            "the 8 MiB L2); 400 clk = 135 ns at 2.97 GHz; sets the gcnasm kernels, "
                                            "which re-read K/V from global per wave")
    barrier_latency: int = _p(16, "ASSUMED", "last s_barrier_signal -> release of s_barrier_wait, clocks")
    l2_bytes_per_clk: float = _p(2048.0, "ASSUMED", "L2 -> CUs, whole GPU (16 channels x 128 B), bytes per clock; "
                                                    "every wave's VMEM bytes cross it (no L0 credit: 32 KiB per CU "
                                                    "against 64 KiB of K/V per iteration of gcnasm's 4 resident "
                                                    "workgroups)")
    valu_coissue_wmma: bool = _p(False, "ASSUMED", "a VALU op of another wave may issue while a WMMA runs [AMC: "
                                                   "\"Can co-execute with VALU: False\"]")
    trans_coissue_wmma: bool = _p(False, "ASSUMED", "the TRANS pipeline may run under a WMMA (a WMMA does not wait "
                                                    "for it to drain)")
    trans_clocks: int = _p(4, "ASSUMED", "TRANS pipeline clocks per wave32 v_exp/v_log/v_rcp_f32 (\"quarter rate\": a "
                                         "2020 GFX10-era LLVM comment, not an RDNA4 document [docs/rdna4.md "
                                         "§Throughput, §Open questions]); the microbenchmark `trans` measures it")
    trans_overlaps_valu: bool = _p(True, "ASSUMED", "other VALU ops issue while the TRANS pipeline runs (False: a "
                                                    "TRANS op holds the vector issue for its trans_clocks) "
                                                    "[§Throughput LLVM-SCHED D92042]; `trans_valu` measures it")
    vopd_issue_clocks: int = _p(1, "ASSUMED", "vector issue clocks of one VOPD v_dual_* pair (1: two ops in one "
                                              "issue; 2: no gain over two single ops) [§Throughput, UNVERIFIED]; "
                                              "`vopd` measures it")
    launch_overhead_s: float = _p(4e-6, "ASSUMED", "kernel launch + first-wave ramp per launch")
    infinity_cache_bytes_per_s: float = _p(2.0e12, "ASSUMED", "Infinity Cache -> L2 read rate, whole GPU, bytes per "
                                                              "second: no gfx1201 figure found; 3.1x the DRAM rate "
                                                              "(the prepare model: perfmodel/prepare.py) "
                                                              "[docs/rdna4.md §Throughput, R9700 table]")
    quant_passes: float = _p(5.0, "ASSUMED", "bytes moved per element of a per-tensor bf16 -> fp8 quantization "
                                             "(amax pass reads 2 B, quantize pass reads 2 B and writes 1 B)")

    def peak(self, kind: str) -> float:
        """Dense WMMA peak in OP/s at this clock (§Throughput rates)."""
        if kind not in PEAK_RATE:
            raise ValueError(f"peak: expected one of {sorted(PEAK_RATE)}, got {kind!r}")
        return PEAK_RATE[kind] * CUS * self.clock_hz

    @property
    def lds_pass_clocks(self) -> float:
        """Clocks one 32-bank pass holds a CU's LDS half."""
        return LDS_PASS_BYTES / self.lds_bytes_per_clk

    def override(self, **changes) -> "Params":
        """A copy with fields changed by name; an unknown name or a value of the wrong type is an error naming it."""
        known = {f.name: f for f in fields(self)}
        unknown = sorted(set(changes) - set(known))
        if unknown:
            raise ValueError(f"Params: unknown parameter(s) {unknown}; known: {sorted(known)}")
        clean = {}
        for name, v in changes.items():
            want = type(getattr(self, name))
            if want is bool:
                if not isinstance(v, bool):
                    raise ValueError(f"Params.{name}: expected true/false, got {v!r}")
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"Params.{name}: expected a positive number, got {v!r}")
            clean[name] = want(v) if want is not int else int(round(v))
        return replace(self, **clean)

    @classmethod
    def table(cls) -> list[tuple[str, object, str, str]]:
        """(name, value, status, source or assumption) of every parameter of CALIBRATED."""
        return [(f.name, getattr(CALIBRATED, f.name), f.metadata["status"], f.metadata["why"]) for f in fields(cls)]


CALIBRATED = Params()
FITTED = tuple(f.name for f in fields(Params) if f.metadata["status"] == "FITTED")


def with_overrides(values: dict, params: Params = CALIBRATED) -> Params:
    """params with the named fields replaced (e.g. from a measurement report); see Params.override."""
    return params.override(**values)


LDS_BYTES_PER_CLK_PER_SIMD = CALIBRATED.lds_bytes_per_clk / SIMDS_PER_LDS_HALF   # the issue-bound bound's LDS rate

ASSUMPTIONS = [
    ("WMMA", "iu8/fp8/bf8/iu4 16x16x16: 8 cycles per SIMD; f16/bf16: 16 (swmmac alike)", "§Throughput [AMC]"),
    ("VALU", "one wave32 VALU issue per cycle per SIMD; a VOPD v_dual_* pair is one issue "
             "(Params.vopd_issue_clocks); every non-TRANS "
             "VALU op costs one issue cycle (no multi-cycle VALU ops in these loops)", "§Throughput (UNVERIFIED)"),
    ("TRANS", "v_exp/log/rcp/rsq/sqrt/sin/cos: one VALU issue cycle, then Params.trans_clocks (4) cycles in the "
              "TRANS pipeline; the pipeline overlaps other VALU issue (Params.trans_overlaps_valu) but NOT WMMA (WMMA owns the SIMD's vector datapath): "
              "vector port = WMMA + max(VALU issue, 4 x TRANS)", "§Throughput [LLVM-SCHED] + decision"),
    ("WMMA vs VALU", "WMMA cannot co-execute with VALU on its SIMD, for any wave: WMMA cycles and VALU issue "
                     "cycles add on the SIMD's vector port, whatever the occupancy (Params.valu_coissue_wmma)",
     "§WMMA, §Hazards 7 [AMC]"),
    ("scalar/memory issue", "SALU, SMEM, branch, s_wait*/s_delay_alu/barrier, LDS and VMEM instructions: one "
                            "issue cycle each on a second port; s_setprio orders the arbitration",
     "decision; §Throughput \"s_setprio\""),
    ("occupancy", "workgroups per WGP = min over VGPRs (per SIMD), LDS (128 KiB per WGP), wave slots (16 per "
                  "SIMD); a workgroup's waves go round-robin over the WGP's 4 SIMDs", "§Occupancy + decision"),
    ("LDS", "32 dword banks per CU half shared by 2 SIMDs; an access takes one pass per 128 B (b64: 16 lanes, "
            "b128: 8 lanes per pass) times its bank-conflict degree from the emulated addresses; a pass holds the "
            "half 128 / Params.lds_bytes_per_clk clocks", "§Memory [LDSDOC, UNVERIFIED for RDNA4] + fit"),
    ("memory", "640 GB/s DRAM; K/V of a head are read from DRAM once while they fit the 64 MiB Infinity Cache; "
               "L2 -> CU traffic bounded by Params.l2_bytes_per_clk", "§Throughput table + decision"),
    ("clock / grid", "the sustained clock is the RX 9070 XT boost (Params.clock_hz, SOURCED and bounded by the "
                     "WMMA measurement); workgroups are dispatched round-robin over the 32 WGPs, the busiest WGP "
                     "sets the time", "§Throughput \"Clocks\""),
]


def wmma_cycles(mnemonic: str) -> int:
    """§Throughput [AMC]: f16/bf16 WMMA/SWMMAC 16 cycles per SIMD, 8-bit and 4-bit 8."""
    if re.search(r"_(f16|bf16)(_|$)", mnemonic.split("_16x16")[-1]):
        return 16
    if re.search(r"(iu8|iu4|fp8|bf8)", mnemonic):
        return 8
    raise ValueError(f"instruction {mnemonic!r}: unknown WMMA type (expected f16/bf16/iu8/iu4/fp8/bf8)")


# ------------------------------------------------------------------------------------------- occupancy
def waves_by_lds(lds_bytes: int, waves_per_wg: int) -> int:
    """Workgroups per WGP that fit its 128 KiB LDS, as waves per SIMD (a WGP has 4 SIMD32)."""
    if lds_bytes <= 0:
        return MAX_WAVES_PER_SIMD
    return min(MAX_WAVES_PER_SIMD, (LDS_PER_WGP // lds_bytes) * waves_per_wg // SIMDS_PER_WGP)


@dataclass(frozen=True)
class Occupancy:
    waves_per_wg: int
    waves_per_simd_per_wg: int      # busiest SIMD's share of one workgroup (round-robin placement)
    wgs_per_wgp: int
    limits: dict                    # workgroups per WGP allowed by each resource
    binding: str

    @property
    def waves_per_simd(self) -> int:
        return self.wgs_per_wgp * self.waves_per_simd_per_wg


def occupancy(block_threads: int, vgprs: int, lds_bytes: int) -> Occupancy:
    """Workgroups per WGP at workgroup granularity (docs/rdna4.md §Occupancy): a workgroup is placed whole on one
    WGP, its waves round-robin over the 4 SIMDs (wave k on SIMD k % 4), so the busiest SIMD holds ceil(W / 4) of
    them; VGPRs limit waves per SIMD, LDS (static + dynamic) limits workgroups per WGP, 16 wave slots per SIMD."""
    if block_threads < 1 or block_threads > 1024:
        raise ValueError(f"block: expected 1..1024 threads per workgroup, got {block_threads}")
    if lds_bytes > LDS_MAX_PER_WG:
        raise ValueError(f"LDS: {lds_bytes} B per workgroup exceeds the {LDS_MAX_PER_WG} B limit (§Occupancy)")
    w = math.ceil(block_threads / LANES)
    per_simd = math.ceil(w / SIMDS_PER_WGP)
    limits = {"VGPRs": waves_by_vgprs(vgprs) // per_simd,
              "LDS": LDS_PER_WGP // lds_bytes if lds_bytes > 0 else 10 ** 6,
              "wave slots": MAX_WAVES_PER_SIMD // per_simd}
    binding = min(limits, key=limits.get)
    if limits[binding] < 1:
        raise ValueError(f"a workgroup of {w} waves with {vgprs} VGPRs and {lds_bytes} B LDS does not fit one WGP")
    return Occupancy(w, per_simd, limits[binding], limits, binding)
