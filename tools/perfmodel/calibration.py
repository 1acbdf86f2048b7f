"""The calibration: peer code objects with published gfx1201 timings, through the same model as any launch.

The references are data for the model, not code of the project, and are never copied into the repository: the
folder is given by --calibration DIR or $SAGE_CO_CALIBRATION (no default location). Two families, one parameter
set (hardware.Params):

* flydsl/<stem>.hsaco + <stem>.json: FlyDSL's LDS-staged flash attention (aiter PR #4188): the launch (grid,
  block, kernarg layout), the problem shape and the published time.
* gcnasm/gcnasm_<v>.json + its code object: carlushuang/gcnasm's plain-HIP kernels (no LDS staging, K/V re-read
  from global per wave), taken as built: ONE 56-byte by-value struct argument whose pointer fields get emulated
  buffers (emulated.Fields); several published runs per kernel.

docs/performance.md §Calibration has the tables. Nothing from the folder is copied into the repository.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from perfmodel.emulated import Fields, emulate_workgroup
from perfmodel.hardware import CALIBRATED, DRAM_BYTES_PER_S, INFINITY_CACHE, Params
from perfmodel.launch_model import Launch, LaunchResult, model_launch
from perfmodel.stream import analyze

ENV = "SAGE_CO_CALIBRATION"
TOLERANCE = {"flydsl": 0.15, "gcnasm": 0.20}   # the goals (issue 23): each run within this of its published time
NOISE = 0.02                                # published speeds closer than this are a tie for the rank order
QUANT_LAUNCHES = 2                          # ASSUMED: the FP8 op's quantization = 2 kernels (amax, quantize)


def calibration_dir(path: str | Path | None = None) -> Path | None:
    """The calibration folder: the argument, else $SAGE_CO_CALIBRATION; None when neither names one."""
    given = path or os.environ.get(ENV)
    return Path(given) if given else None


def require_calibration_dir(path: str | Path | None = None) -> Path:
    """calibration_dir(path), which must exist: a FileNotFoundError saying how to name it otherwise."""
    root = calibration_dir(path)
    if root is None or not root.is_dir():
        where = f"{root}: no such folder" if root is not None else "no calibration folder given"
        raise FileNotFoundError(f"{where} (pass --calibration DIR or set ${ENV} to the folder of the FlyDSL "
                                "references)")
    return root


@dataclass(frozen=True)
class Reference:
    stem: str
    hsaco: Path
    symbol: str
    dtype: str                              # "bf16" or "fp8"
    B: int
    H: int
    S: int
    D: int
    grid: tuple[int, int, int]
    block: int
    args: dict                              # emulated-run arguments: by-value ints and pointer buffer sizes
    published_us: float
    includes_quant: bool                    # the published time includes the FP8 quantization kernels
    source: str
    published_incl_quant_us: float | None = None   # a second published figure of the same run, with quantization
    family: str = "flydsl"
    kernel: str = ""                        # the kernel (one code object), e.g. "flydsl bf16", "gcnasm v139"
    primary: bool = True                    # gcnasm: the run its JSON marks primary (others: an older PR's figure)
    emu_key: str = ""                       # runs that share an emulated workgroup (same code object and N)

    @property
    def tolerance(self) -> float:
        return TOLERANCE[self.family]

    @property
    def flops(self) -> float:
        return 4.0 * self.B * self.H * self.S * self.S * self.D

    @property
    def elements(self) -> int:
        return self.B * self.S * self.H * self.D

    @property
    def dram_bytes(self) -> float:
        """Compulsory traffic: Q, K, V read once (K/V of a head stay in the 64 MiB Infinity Cache), O written."""
        esz = 1 if self.dtype == "fp8" else 2
        return self.elements * (3 * esz + 2)


def load_references(folder: str | Path | None = None) -> list[Reference]:
    """Every published run of both families (flydsl/ and gcnasm/ under the folder; a folder holding FlyDSL's files
    directly also works)."""
    root = require_calibration_dir(folder)
    refs = _flydsl(root / "flydsl" if (root / "flydsl").is_dir() else root)
    if (root / "gcnasm").is_dir():
        refs += _gcnasm(root / "gcnasm")
    if not refs:
        raise FileNotFoundError(f"{root}: no calibration references (flydsl/*.json beside *.hsaco, gcnasm/*.json)")
    return refs


def _references(sub: Path, marker: str, code_object):
    """(json path, its parsed metadata, its code object path) of every *.json in `sub` that has the `marker` key
    (the others are not references of this kind); a missing code object is an error naming both files.
    `code_object(js, meta)` gives the code object's path."""
    for js in sorted(sub.glob("*.json")):
        meta = json.loads(js.read_text())
        if marker not in meta:
            continue
        co = code_object(js, meta)
        if not co.exists():
            raise FileNotFoundError(f"{js}: its code object {co.name} is missing")
        yield js, meta, co


def _flydsl(sub: Path) -> list[Reference]:
    refs = []
    for js, meta, hsaco in _references(sub, "problem", lambda js, meta: js.with_suffix(".hsaco")):
        p = meta["problem"]
        fp8 = "fp8" in p["dtype"]
        esz = 1 if fp8 else 2
        n = p["B"] * p["S"] * p["H"] * p["D"]
        args = {}
        for i, a in enumerate(meta["kernarg_layout"]):
            key = f"arg{i}"                 # the code objects' metadata carries no argument names
            if a["value_kind"] == "global_buffer":
                args[key] = n * (2 if a["name"] == "O" else esz) if a["name"] in ("Q", "K", "V", "O") else 64
            else:
                args[key] = p["S"]          # seq_len, seq_len_real, seq_len_kv: all S (no padding at these S)
        pub = meta["published_timing"]
        also = re.search(r"incl\. quant\)\s*([0-9.]+)\s*us", pub.get("also", ""))
        dtype = "fp8" if fp8 else "bf16"
        refs.append(Reference(js.stem, hsaco, meta["kernel_name"], dtype, p["B"], p["H"], p["S"],
                              p["D"], tuple(meta["launch"]["grid"]), meta["launch"]["block"][0], args,
                              float(pub["latency_us"]), "incl" in pub["impl"] or "including" in pub["impl"],
                              pub["source"], float(also.group(1)) if also else None, "flydsl",
                              f"flydsl {dtype}", True, js.stem))
    return refs


GCNASM_BY_VALUE = ("B", "H", "N", "D", "scale")     # opus_attn_kargs after its four pointers (attn_common.h)


def gcnasm_struct(meta: dict, B: int, H: int, N: int, D: int) -> Fields:
    """The kernel's one by-value argument as built (opus_attn_kargs, 56 bytes): its pointer fields in the JSON's
    order, each an emulated buffer of one head (the first workgroup, head 0 of batch 0, touches no other), then
    B, H, N, D as i32 and scale = 1/sqrt(D) as f32, at natural alignment (offsets 0..24, 32..44, 48)."""
    k = meta["kernargs"]
    if tuple(k["by_value"]) != GCNASM_BY_VALUE:
        raise ValueError(f"{meta['name']}: by-value fields {list(k['by_value'])}, expected {list(GCNASM_BY_VALUE)}")
    head = N * D * 2                                    # bf16 [N, D] (V^T: [D, N]) of one head
    shape = {"B": B, "H": H, "N": N, "D": D}
    return Fields(tuple([("ptr", head)] * len(k["pointer"]) + [("i32", shape[f]) for f in GCNASM_BY_VALUE[:4]]
                        + [("f32", 1.0 / math.sqrt(D))]))


def _gcnasm(sub: Path) -> list[Reference]:
    refs = []
    for js, meta, co in _references(sub, "runs", lambda js, meta: sub / meta["code_object"]):
        lau = meta["launch"]
        if lau["grid"] != ["N/128", "H", "B"] or lau.get("dynamic_lds", 0):
            raise ValueError(f"{js}: launch grid {lau['grid']}: only (N/128, H, B) without dynamic LDS is modeled")
        version = meta["name"].split("_")[-1]
        for r in meta["runs"]:
            sh = r["shape"]
            B, H, N, D = sh["B"], sh["H"], sh["N"], sh["D"]
            if sh["causal"] or N % lau["queries_per_workgroup"]:
                raise ValueError(f"{js}: run {sh}: only non-causal N a multiple of 128 is modeled")
            tag = "" if r["primary"] else "_" + re.sub(r"\W+", "", r["published_source"].split()[0] +
                                                         r["published_source"].split()[1])
            refs.append(Reference(f"{meta['name']}_B{B}_H{H}_N{N}{tag}", co, meta["symbol"], "bf16", B, H, N, D,
                                  (N // lau["queries_per_workgroup"], H, B), lau["block"],
                                  {"arg0": gcnasm_struct(meta, B, H, N, D)}, float(r["published_time_us"]), False,
                                  r["published_source"], None, "gcnasm", f"gcnasm {version}", r["primary"],
                                  f"{meta['name']}_N{N}"))
    return refs


def quant_seconds(elements: int, tensors: int = 3, params: Params = CALIBRATED) -> float:
    """Per-tensor bf16 -> fp8 quantization of `tensors` tensors, DRAM-bound (ASSUMED form: QUANT_LAUNCHES launches per
    tensor, an amax pass reading 2 B per element and a quantize pass reading 2 B and writing 1 B; the quantize pass
    reads from the 64 MiB Infinity Cache when the bf16 tensor fits it, docs/rdna4.md §Throughput)."""
    per_elem = params.quant_passes if 2 * elements > INFINITY_CACHE else params.quant_passes - 2
    return tensors * (elements * per_elem / DRAM_BYTES_PER_S + QUANT_LAUNCHES * params.launch_overhead_s)


@dataclass
class Row:
    ref: Reference
    kernel: LaunchResult
    quant_s: float

    @property
    def modeled_us(self) -> float:
        return (self.kernel.time_s + self.quant_s) * 1e6

    @property
    def error(self) -> float:
        return self.modeled_us / self.ref.published_us - 1.0

    @property
    def published_tflops(self) -> float:
        return self.ref.flops / self.ref.published_us / 1e6

    @property
    def modeled_tflops(self) -> float:
        return self.ref.flops / self.modeled_us / 1e6

    @property
    def within(self) -> bool:
        return abs(self.error) <= self.ref.tolerance


_runs: dict = {}


def emulated(ref: Reference):
    """(KernelModel, the first workgroup emulated at the published shape); cached: neither depends on Params."""
    key = ref.emu_key or ref.stem
    if key not in _runs:
        km = analyze(ref.stem, ref.hsaco, ref.symbol)
        _runs[key] = (km, emulate_workgroup(ref.hsaco, ref.symbol, ref.block, ref.args, km.text_addr))
    return _runs[key]


def model_reference(ref: Reference, params: Params = CALIBRATED) -> Row:
    km, run = emulated(ref)
    launch = Launch(ref.grid, ref.block, ref.flops, ref.dtype, dram_bytes=ref.dram_bytes)
    res = model_launch(km, launch, run, params)
    q = quant_seconds(ref.elements, 3, params) if ref.includes_quant else 0.0
    return Row(ref, res, q)


def calibrate(folder=None, params: Params = CALIBRATED) -> list[Row]:
    return [model_reference(r, params) for r in load_references(folder)]


def fit_clock(rows: list[Row], params: Params = CALIBRATED) -> float:
    """The clock that centres the references' errors (geometric mean of published / modeled time = 1): the compute
    part scales with 1 / clock, DRAM, quantization and launch overhead do not."""
    def err(clock):
        p = params.override(clock_hz=clock)
        logs = []
        for r in rows:
            cyc = sum(x.cycles * x.count for x in r.kernel.rounds)
            t = max(cyc / clock, r.kernel.dram_s) + p.launch_overhead_s + r.quant_s
            logs.append(math.log(t * 1e6 / r.ref.published_us))
        return sum(logs) / len(logs)
    lo, hi = 1.0e9, 4.0e9
    for _ in range(60):
        mid = (lo + hi) / 2
        if err(mid) > 0:                    # modeled too slow: a faster clock
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def rank_inversions(rows: list[Row]) -> list[tuple[str, str]]:
    """Pairs of primary runs the model orders against the published speeds (TFLOPS), ignoring pairs whose
    published speeds are within NOISE of each other: (the one published faster, the one modeled faster)."""
    prim = [r for r in rows if r.ref.primary]
    out = []
    for a in prim:
        for b in prim:
            if a.published_tflops > b.published_tflops * (1 + NOISE) and a.modeled_tflops < b.modeled_tflops:
                out.append((a.ref.stem, b.ref.stem))
    return out


SENSITIVITY = [   # (label, Params overrides): each row changes one parameter of CALIBRATED
    ("clock 3.05 GHz (the WMMA measurement's clock)", {"clock_hz": 3.05e9}),
    ("clock 2.92 GHz (R9700 boost)", {"clock_hz": 2.92e9}),
    ("clock 2.40 GHz (RX 9070 XT game clock)", {"clock_hz": 2.40e9}),
    ("LDS 64 B/clk/CU", {"lds_bytes_per_clk": 64.0}),
    ("LDS 80 B/clk/CU", {"lds_bytes_per_clk": 80.0}),
    ("LDS 128 B/clk/CU (1 access/bank/clk)", {"lds_bytes_per_clk": 128.0}),
    ("LDS latency 64 clk", {"lds_latency": 64}),
    ("global latency 300 clk", {"global_latency": 300}),
    ("global latency 500 clk (the old figure)", {"global_latency": 500}),
    ("L2 -> CU 1536 B/clk", {"l2_bytes_per_clk": 1536.0}),
    ("L2 -> CU 4096 B/clk", {"l2_bytes_per_clk": 4096.0}),
    ("barrier latency 64 clk", {"barrier_latency": 64}),
    ("VALU co-issues with WMMA", {"valu_coissue_wmma": True}),
    ("TRANS runs under WMMA", {"trans_coissue_wmma": True}),
]


def sensitivity(folder=None, variants=SENSITIVITY, params: Params = CALIBRATED) -> list[dict]:
    """Each variant's error per run (primary runs), and the clock that would re-centre all of them."""
    refs = [r for r in load_references(folder) if r.primary]
    out = []
    for label, change in [("calibrated", {})] + list(variants):
        p = params.override(**change)
        rows = [model_reference(r, p) for r in refs]
        out.append({"variant": label, "change": change, "errors": {r.ref.stem: r.error for r in rows},
                    "refit_clock_ghz": fit_clock(rows, p) / 1e9,
                    "within": sum(r.within for r in rows), "runs": len(rows),
                    "inversions": len(rank_inversions(rows))})
    return out
