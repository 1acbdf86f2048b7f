"""Command line of the performance model (`python tools/perf_model.py --help`). Every figure it prints is MODELED.

    python tools/perf_model.py                   # shipped HIP and asm attention kernels, then the calibrated model
    python tools/perf_model.py --co PATH --symbol NAME --grid X,Y,Z --block N [--dynamic-lds BYTES]
        [--arg NAME=VALUE ...] [--emu-arg NAME=VALUE ...] [--trip-count N] --flops F
        --peak {int8,fp8,bf16,fp16} [--dram-bytes B] [--no-emulate] [--json]
    python tools/perf_model.py --calibration [DIR] [--json]   # FlyDSL + gcnasm references: published vs modeled
    python tools/perf_model.py --calibration [DIR] --sensitivity [--json]   # one parameter varied at a time
    python tools/perf_model.py --restate [--json]             # our kernels and the op next to FlyDSL's figures
    python tools/perf_model.py --what-if [--json]             # the asm kernel's geometry/schedule what-ifs
    python tools/perf_model.py --hypotheses [--json]          # the kernel's time under each plausible rule set,
                                                              # the best shipped schedule and its gap to the levers
    python tools/perf_model.py --pv | --fp32 | --sparse | --masks | --varlen [--json]   # one feature's report
    python tools/perf_model.py --refit REPORT.json [--json]   # parameters from `sage-co selftest --perf`, old vs new

--arg NAME=VALUE: a by-value kernel argument (e.g. seq_len=4096); for a pointer argument VALUE is the size in
bytes of the zeroed buffer the emulated workgroup gets (default 16 MiB), or fields giving its contents (u32:A,B,...,
e.g. an attention kernel's LUT row lut=u32:4,0,1,2,3,0,0,0). A by-value argument of any size (a struct passed by
value) takes its fields: KIND:V,V,...,KIND:V,... with KIND one of u8 i8 u16 i16 u32 i32 f32 u64 i64 f64 ptr, or
hex:BYTES, laid out at natural alignment and zero-padded to the argument's size; a ptr:BYTES field is a pointer to
an emulated zeroed buffer of that size (K/M/G suffixes), e.g. gcnasm's 56-byte opus_attn_kargs:
    --arg arg0=ptr:512K,ptr:512K,ptr:512K,ptr:512K,i32:1,32,2048,128,f32:0.08838834764831845
Arguments without a name in the code object's metadata are arg0, arg1, ... (their position). --emu-arg overrides
--arg for the emulated workgroup only (e.g. a shorter sequence; then pass --trip-count for the modeled launch).
--trip-count: main-loop iterations per wave, when the emulated workgroup cannot give them (--no-emulate, or
--emu-arg). The model's parameters are hardware.Params (python tools/perf_model.py --calibration lists them).
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from perfmodel.hardware import PEAK_RATE


@dataclass(frozen=True)
class Report:
    """One report of the model: `--flag` runs load()(as_json=...) (every figure MODELED). `load` imports the
    report's module only when its flag is given (the CLI starts without the model's heavy imports)."""
    flag: str
    load: Callable[[], Callable[..., int]]
    help: str

    def run(self, as_json: bool) -> int:
        return self.load()(as_json=as_json)


def _module(name: str):
    return importlib.import_module(f"perfmodel.{name}")


# The reports of the shipped kernels, one entry each: the CLI's flags and their dispatch come from this list
# (--calibration, --refit and --co take arguments and stay their own options).
REPORTS = (
    Report("restate", lambda: _module("restate").print_restatement, "our kernels and the op next to FlyDSL's figures"),
    Report("what-if", lambda: _module("whatif").print_what_if, "the asm kernel's geometry/schedule what-ifs"),
    Report("hypotheses", lambda: _module("hypotheses").print_hypotheses,
           "the shipped kernel's time under each plausible rule set (TRANS clocks, TRANS/VALU under WMMA, VOPD "
           "issues), the lever that pays under each, the best shipped schedule and its gap to the best lever "
           "combination (several minutes)"),
    Report("pv", lambda: _module("pv").print_pv, "pv_dtype fp8 vs fp16 for both kernels"),
    Report("fp32", lambda: _module("fp32").print_fp32, "fp32 inputs and output vs bf16"),
    Report("sparse", lambda: _module("sparse").print_sparse, "the predictor and the attention vs block density"),
    Report("masks", lambda: _module("masks").print_masks, "attn_mask: partial / additive tiles and key padding"),
    Report("varlen", lambda: _module("varlen").print_varlen,
           "packed varlen launches: each workgroup's key tiles vs the dense kernel"),
)


def _pairs(items: list[str], flag: str) -> dict:
    from perfmodel.emulated import Fields
    out = {}
    for item in items or []:
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise ValueError(f"{flag} {item!r}: expected NAME=VALUE")
        if ":" in value:                  # fields: a by-value struct, or a pointer argument's buffer contents
            try:
                out[name] = Fields.parse(value)
            except ValueError as e:
                raise ValueError(f"{flag} {name}: {e}") from None
            continue
        try:
            out[name] = int(value, 0)
        except ValueError:
            raise ValueError(f"{flag} {item!r}: VALUE must be an integer or KIND:V,... fields") from None
    return out


def _grid(text: str) -> tuple[int, int, int]:
    parts = text.split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"--grid {text!r}: expected X,Y,Z (three positive integers: workgroups per dimension)")
    return tuple(int(p) for p in parts)


def model_code_object(a) -> dict:
    from perfmodel.emulated import emulate_workgroup
    from perfmodel.launch_model import Launch, model_launch
    from perfmodel.stream import analyze
    if not a.co.exists():
        raise ValueError(f"--co: {a.co} does not exist")
    args = _pairs(a.arg, "--arg")
    emu_args = {**args, **_pairs(a.emu_arg, "--emu-arg")}
    if a.emu_arg and a.trip_count is None:
        raise ValueError("--emu-arg changes the emulated workgroup: pass --trip-count for the modeled launch")
    launch = Launch(_grid(a.grid), a.block, a.flops, a.peak, a.dynamic_lds, a.trip_count, a.dram_bytes)
    km = analyze("co", a.co, a.symbol)
    run = None
    if not a.no_emulate:
        run = emulate_workgroup(a.co, km.symbol, a.block, emu_args, km.text_addr, a.dynamic_lds)
    res = model_launch(km, launch, run)
    out = res.as_dict()
    out.update(symbol=km.symbol, code_object=str(a.co), counts="emulated workgroup" if run else "static")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_argument_group("any code object (the calibrated model)")
    g.add_argument("--co", type=Path, help="code object (.co / .hsaco)")
    g.add_argument("--symbol", help="kernel symbol (default: the code object's one kernel with WMMAs)")
    g.add_argument("--grid", help="workgroups X,Y,Z")
    g.add_argument("--block", type=int, help="threads per workgroup")
    g.add_argument("--dynamic-lds", type=int, default=0, metavar="BYTES", help="dynamic LDS per workgroup")
    g.add_argument("--arg", action="append", metavar="NAME=VALUE", help="kernel argument (repeat)")
    g.add_argument("--emu-arg", action="append", metavar="NAME=VALUE", help="argument for the emulated run only")
    g.add_argument("--trip-count", type=float, help="main-loop iterations per wave")
    g.add_argument("--flops", type=float, help="useful operations of the launch (for TFLOPS)")
    g.add_argument("--peak", choices=sorted(PEAK_RATE), help="dense WMMA peak the %% refers to")
    g.add_argument("--dram-bytes", type=float, help="compulsory DRAM traffic of the launch (bounds it)")
    g.add_argument("--no-emulate", action="store_true", help="static counts (needs --trip-count)")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    ap.add_argument("--calibration", nargs="?", const="", metavar="DIR",
                    help="the calibration references, FlyDSL and gcnasm (default $SAGE_CO_CALIBRATION)")
    ap.add_argument("--sensitivity", action="store_true",
                    help="with --calibration: each parameter varied alone, errors per run (several minutes)")
    for r in REPORTS:
        ap.add_argument(f"--{r.flag}", action="store_true", help=r.help)
    ap.add_argument("--refit", type=Path, metavar="REPORT.json",
                    help="set the parameters from a `sage-co selftest --perf` report of a gfx1201; old vs new figures")
    o = ap.add_argument_group("the shipped attention kernels' report")
    o.add_argument("--static", action="store_true", help="do not run the emulator; static loop counts only")
    o.add_argument("--asm-co", type=Path, help="code object for the asm column (default: the shipped one)")
    o.add_argument("--quick", action="store_true", help="skip the latency-aware sensitivity table")
    o.add_argument("--emu-seq", default="1024,2048", help="two sequence lengths (multiples of 64) for the emulator")
    a = ap.parse_args(argv)

    try:
        if a.co is not None:
            missing = [f for f in ("grid", "block", "flops", "peak") if getattr(a, f) is None]
            if missing:
                ap.error(f"--co needs {', '.join('--' + m for m in missing)}")
            if a.no_emulate and a.trip_count is None:
                ap.error("--no-emulate needs --trip-count")
            out = model_code_object(a)
            if a.json:
                print(json.dumps(out, indent=1))
            else:
                print(f"{out['symbol']}: modeled {out['time_us']:.1f} us, {out['tflops']:.1f} TFLOPS "
                      f"({out['pct_peak']:.1f} % of the {a.peak} peak at {out['clock_ghz']:.2f} GHz), binding "
                      f"{out['binding']}; {out['workgroups_per_wgp']} workgroups per WGP ({out['occupancy_limit']}), "
                      f"{out['trip_count']:g} loop iterations per wave; counts: {out['counts']}")
                for n in out["notes"]:
                    print(f"  note: {n}")
            return 0
        if a.calibration is not None:
            from perfmodel.restate import print_calibration, print_sensitivity
            if a.sensitivity:
                return print_sensitivity(a.calibration or None, as_json=a.json)
            return print_calibration(a.calibration or None, as_json=a.json)
        if a.sensitivity:
            ap.error("--sensitivity goes with --calibration [DIR]")
        for r in REPORTS:
            if getattr(a, r.flag.replace("-", "_")):
                return r.run(a.json)
        if a.refit is not None:
            from perfmodel.refit import print_refit
            return print_refit(a.refit, as_json=a.json)
    except (ValueError, FileNotFoundError) as e:
        print(f"perf_model: error: {e}", file=sys.stderr)
        return 2

    from perfmodel.report import load_kernels, report
    seqs = tuple(int(s) for s in a.emu_seq.split(","))
    if len(seqs) != 2 or seqs[0] >= seqs[1]:
        ap.error(f"--emu-seq: expected two increasing lengths, got {a.emu_seq!r}")
    if a.asm_co is not None and not a.asm_co.exists():
        ap.error(f"--asm-co: {a.asm_co} does not exist")
    report(load_kernels(a.static, a.asm_co, seqs), latency_sensitivity_table=not a.quick)
    return 0
