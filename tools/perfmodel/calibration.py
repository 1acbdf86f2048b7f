"""The calibration: peer code objects with published gfx1201 timings, through the same model as any launch.

The references are data for the model, not code of the project, and are never copied into the repository: the
folder is given by --calibration DIR or $SAGE_CO_CALIBRATION (no default location). Each
flydsl/<stem>.hsaco has a <stem>.json with the launch (grid, block, kernarg layout), the problem shape and the
published time (docs/performance.md §Calibration). Nothing from them is copied into the repository.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from perfmodel.emulated import emulate_workgroup
from perfmodel.hardware import CALIBRATED, DRAM_BYTES_PER_S, INFINITY_CACHE, Params
from perfmodel.launch_model import Launch, LaunchResult, model_launch
from perfmodel.stream import analyze

ENV = "SAGE_CO_CALIBRATION"
TOLERANCE = 0.20                            # the goal: every reference within +-20 % of its published time
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
    root = require_calibration_dir(folder)
    sub = root / "flydsl" if (root / "flydsl").is_dir() else root
    refs = []
    for js in sorted(sub.glob("*.json")):
        meta = json.loads(js.read_text())
        hsaco = js.with_suffix(".hsaco")
        if not hsaco.exists():
            raise FileNotFoundError(f"{js}: its code object {hsaco.name} is missing")
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
        refs.append(Reference(js.stem, hsaco, meta["kernel_name"], "fp8" if fp8 else "bf16", p["B"], p["H"], p["S"],
                              p["D"], tuple(meta["launch"]["grid"]), meta["launch"]["block"][0], args,
                              float(pub["latency_us"]), "incl" in pub["impl"] or "including" in pub["impl"],
                              pub["source"], float(also.group(1)) if also else None))
    if not refs:
        raise FileNotFoundError(f"{sub}: no calibration references (*.json beside *.hsaco)")
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


_runs: dict = {}


def emulated(ref: Reference):
    """(KernelModel, the first workgroup emulated at the published shape); cached: neither depends on Params."""
    if ref.stem not in _runs:
        km = analyze(ref.stem, ref.hsaco, ref.symbol)
        _runs[ref.stem] = (km, emulate_workgroup(ref.hsaco, ref.symbol, ref.block, ref.args, km.text_addr))
    return _runs[ref.stem]


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
        p = replace(params, clock_hz=clock)
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
