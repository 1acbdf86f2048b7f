"""The gfx1201 microbenchmarks (asm_src/gfx1201_microbench.s, sage_co/microbench.py, `sage-co selftest --perf`) and
`python tools/perf_model.py --refit` (tools/perfmodel/refit.py). The emulator runs every kernel with small iteration
counts and its result records and dynamic instruction counts are checked; no time is asserted anywhere (the
derivation and the refit are checked on synthetic times and a synthetic report)."""
import contextlib
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from sage_co import abi, microbench as mb, selftest, selftest_perf

ROOT = Path(__file__).resolve().parents[2]
ASM = ROOT / "asm_src" / "gfx1201_microbench.s"
from perfmodel import refit  # noqa: E402  (tools/ is on sys.path: pyproject.toml pytest pythonpath)
from perfmodel.hardware import CALIBRATED  # noqa: E402

WORKGROUPS, ITERATIONS = 2, 3          # 8 waves: two workgroups, so the wave index in the grid matters


def _run(bench, iterations=ITERATIONS, **kw):
    args = mb.inputs(bench, WORKGROUPS, **kw)
    stats = mb.launch_bench(bench, args, iterations, backend="emu")
    return args, stats


@pytest.mark.parametrize("bench", abi.MICROBENCH_BENCHES)
def test_every_microbenchmark_runs_correctly_on_the_emulator(bench):
    args, stats = _run(bench, **({"src_bytes": 40 << 10} if bench == "l2_stream" else {}))
    assert mb.check(bench, args["out"], args, ITERATIONS) == []
    assert selftest_perf.count_problems(bench, stats, WORKGROUPS, ITERATIONS) == []
    assert args["out"].abs().sum() > 0                      # the records were written
    # the checks can fail: another iteration count is detected by the records or by the instruction counts
    other = mb.check(bench, args["out"], args, ITERATIONS + 1) + \
        selftest_perf.count_problems(bench, stats, WORKGROUPS, ITERATIONS + 1)
    assert other, bench
    corrupt = args["out"].clone()
    corrupt[-1, -1, -1] += 1
    assert mb.check(bench, corrupt, args, ITERATIONS)


def test_l2_stream_window_wraps_around_the_buffer():
    """stride 8 waves x 2 KiB = 16 KiB; a 40 KiB buffer wraps inside a wave's window sequence at iteration 2."""
    src_bytes = 40 << 10
    args, _ = _run("l2_stream", iterations=5, src_bytes=src_bytes)
    assert mb.check("l2_stream", args["out"], args, 5) == []
    assert mb.stream_stride(WORKGROUPS) * 5 > src_bytes


def test_zero_iterations_skip_the_loop():
    args, stats = _run("wmma", iterations=0)
    assert stats["WMMA"] == 0 and mb.check("wmma", args["out"], args, 0) == []


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="bench='nope'"):
        mb.inputs("nope", 1)
    with pytest.raises(ValueError, match="workgroups"):
        mb.inputs("wmma", 0)
    with pytest.raises(ValueError, match=r"src_bytes=3000.*multiple of 2048"):
        mb.inputs("l2_stream", 1, src_bytes=3000)
    with pytest.raises(ValueError, match=r"src_bytes=4096.*at least the grid's window"):
        mb.inputs("l2_stream", 2, src_bytes=4096)
    with pytest.raises(ValueError, match="iterations"):
        mb.launch_bench("wmma", mb.inputs("wmma", 1), -1, backend="emu")


def test_assembly_constants_are_the_abi_constants():
    """The assembly's named constants, evaluated as the assembler does (the generated include first, then the
    source's own), are what the host computes with: the ABI ones from sage_co.abi, the derived ones agree."""
    consts: dict = {}
    for src in (ASM.parent / "generated" / "gfx1201_microbench_abi.s", ASM):
        for name, expr in re.findall(r"^\s*\.set\s+(\w+),\s*(.+?)\s*(?://.*)?$", src.read_text(), re.M):
            # integer expressions of earlier names (the assembler's / is integer division)
            consts[name] = eval(expr.replace("/", "//"), {}, dict(consts))  # noqa: S307
    assert consts["RECORD_BYTES"] == 4 * abi.MICROBENCH_RECORD_DWORDS
    assert consts["RECORD_UNIT"] == 4 * abi.MICROBENCH_MATRIX_DWORDS
    assert consts["LDS_HALF"] * 2 == abi.MICROBENCH_LDS_BYTES
    assert consts["LDS_LOAD_STRIDE"] == consts["STREAM_LOAD_BYTES"] == abi.MICROBENCH_LDS_LOAD_BYTES
    assert consts["STREAM_WAVE_BYTES"] == abi.MICROBENCH_STREAM_WAVE_BYTES
    assert consts["LANES"] << consts["WG_SHIFT"] == abi.MICROBENCH_BLOCK[0] == 1 << (consts["WAVE_SHIFT"] + consts["WG_SHIFT"])
    assert consts["CHAIN_STEPS"] == abi.MICROBENCH_CHAIN_STEPS and ".rept CHAIN_STEPS" in ASM.read_text()
    assert (consts["EXP_LANE_MASK"], consts["EXP_BIAS"]) == (abi.MICROBENCH_EXP_LANE_MASK, abi.MICROBENCH_EXP_BIAS)
    assert consts["KARG_SIZE"] == abi.MICROBENCH_ARGS.size


# ------------------------------------------------------------------------------------------ derivation
def _synthetic_seconds(clock, overlaps, lds_latency, l2_bytes_per_clk, plan=mb.GPU_PLAN, lds_bytes_per_clk=128.0,
                       cus=mb.CUS, trans_clocks=mb.TRANS_CLOCKS, log_clocks=6.0, rcp_clocks=5.0, vopd_clocks=1.0,
                       wmma_clocks=mb.IU8_WMMA_CLOCKS):
    """Seconds per iteration a GPU with these properties would show (the inverse of derive's arithmetic; a CU's
    LDS half serves both its SIMDs, so one SIMD's b128 load takes 2 x 512 B / lds_bytes_per_clk clocks), and the
    clock kernel's shader clocks per iteration of one wave (its waves run side by side: the launch's clocks)."""
    wg = {b: plan[b][0] for b in abi.MICROBENCH_BENCHES}
    wps = {b: mb.waves(wg[b]) / (2 * cus) for b in wg}
    t = abi.MICROBENCH_TRANS_PER_ITER
    clocks = {"wmma": wps["wmma"] * abi.MICROBENCH_WMMA_PER_ITER * wmma_clocks,
              "clock": wps["clock"] * abi.MICROBENCH_WMMA_PER_ITER * wmma_clocks,
              "valu": wps["valu"] * abi.MICROBENCH_VALU_PER_ITER * mb.VALU_ISSUE_CLOCKS,
              "trans": wps["trans"] * t * trans_clocks, "trans_log": wps["trans_log"] * t * log_clocks,
              "trans_rcp": wps["trans_rcp"] * t * rcp_clocks,
              "vopd": wps["vopd"] * abi.MICROBENCH_VOPD_PER_ITER * vopd_clocks,
              "lds": wps["lds"] * abi.MICROBENCH_LDS_PER_ITER * 2 * abi.MICROBENCH_LDS_LOAD_BYTES / lds_bytes_per_clk}
    s = {b: c / clock for b, c in clocks.items()}
    for mix, unit in mb.OVERLAP_PAIRS.items():
        s[mix] = s["wmma"] + s[unit] - overlaps[unit] * min(s["wmma"], s[unit])
    s["trans_valu"] = s["trans"] + s["valu"] - overlaps.get("trans_valu", 1.0) * min(s["trans"], s["valu"])
    s["lds_chain"] = abi.MICROBENCH_CHAIN_STEPS * lds_latency / clock
    s["l2_stream"] = mb.waves(wg["l2_stream"]) * abi.MICROBENCH_STREAM_WAVE_BYTES / l2_bytes_per_clk / clock
    return s, wg, clocks["clock"]


@pytest.mark.parametrize("cus", [64, 48])
def test_derive_recovers_the_properties(cus):
    """On the R9700 and on a 48-CU gfx1201 board (grids from its own CU count), with WMMA at 10 clocks instead of
    the assumed 8: the clock is the measured one (shader clocks over HIP-event time), not the one the WMMA rate
    implies, and every rule the speed verdict rests on comes back."""
    plan = mb.gpu_plan(cus)
    assert plan["wmma"][0] == cus // 2 * 8
    s, wg, cyc = _synthetic_seconds(2.4e9, {"valu": 0.0, "trans": 1.0, "lds": 0.75, "trans_valu": 0.2}, 57, 1500.0,
                                    plan, lds_bytes_per_clk=80.0, cus=cus, trans_clocks=8.0, vopd_clocks=2.0,
                                    wmma_clocks=10.0)
    d = mb.derive(s, wg, cus, cyc)
    assert d["clock"]["measured"] and d["wmma"]["sustained_clock_hz"] == pytest.approx(2.4e9)
    assert d["wmma"]["inferred_clock_hz"] == pytest.approx(2.4e9 * 8 / 10)      # what the old derivation said
    assert d["wmma"]["clocks_per_wmma"] == pytest.approx(10.0)
    assert d["wmma"]["ops_per_s"] == pytest.approx(2.4e9 * 2048 * cus * 8 / 10)
    assert d["trans"]["clocks_per_op"] == pytest.approx(8.0)
    assert d["trans_log"]["clocks_per_op"] == pytest.approx(6.0)
    assert d["trans_rcp"]["clocks_per_op"] == pytest.approx(5.0)
    assert d["vopd"]["issue_clocks_per_pair"] == pytest.approx(2.0)
    assert d["trans_valu"]["overlap"] == pytest.approx(0.2)
    assert d["valu"]["clocks_per_op"] == pytest.approx(1.0)
    d0 = mb.derive(s, wg, cus)                      # without the clock kernel's cycles: inferred, and says so
    assert not d0["clock"]["measured"] and d0["wmma"]["sustained_clock_hz"] == pytest.approx(2.4e9 * 0.8)
    with pytest.raises(ValueError, match="cus"):
        mb.gpu_plan(63)


def test_derive_recovers_the_r9700_properties():
    s, wg, cyc = _synthetic_seconds(2.4e9, {"valu": 0.0, "trans": 1.0, "lds": 0.75}, 57, 1500.0,
                                    lds_bytes_per_clk=80.0)
    d = mb.derive(s, wg, mb.CUS, cyc)
    assert d["wmma"]["sustained_clock_hz"] == pytest.approx(2.4e9)
    assert d["wmma"]["ops_per_s"] == pytest.approx(2.4e9 * 2048 * 64)      # iu8 2048 OP/clk/CU (§Throughput)
    assert d["wmma_valu"]["overlap"] == pytest.approx(0.0, abs=1e-9)
    assert d["wmma_trans"]["overlap"] == pytest.approx(1.0)
    assert d["wmma_lds"]["overlap"] == pytest.approx(0.75)
    assert d["wmma_trans"]["unit_clocks_per_op"] == pytest.approx(mb.TRANS_CLOCKS)
    assert d["lds_chain"]["load_to_use_clk"] == pytest.approx(57)
    assert d["lds"]["bytes_per_clk"] == pytest.approx(80.0)
    assert d["wmma_lds"]["unit_clocks_per_op"] == pytest.approx(2 * abi.MICROBENCH_LDS_LOAD_BYTES / 80.0)
    assert d["l2_stream"]["bytes_per_clk"] == pytest.approx(1500.0)
    with pytest.raises(ValueError, match="no measurement for"):
        mb.derive({k: v for k, v in s.items() if k != "lds_chain"}, wg)


# ------------------------------------------------------------------------------------------ selftest --perf
@pytest.mark.skipif(selftest.gfx1201_devices()[0] != [], reason="a gfx1201 is present: the GPU half would run")
def test_selftest_perf_runs_every_microbenchmark_on_the_emulator(tmp_path):
    report = selftest.run(tmp_path, small=(), large=(), timing=(), perf=True, echo=lambda *_: None)
    assert not report.failed, report.failed
    names = [c.name for c in report.checks if "microbenchmark" in c.name]
    assert len(names) == len(abi.MICROBENCH_BENCHES) and all(n.startswith("emu ") for n in names)
    data = json.loads((tmp_path / "selftest.json").read_text())
    assert data["perf"]["measured"] is False and "derived" not in data["perf"]
    assert set(data["perf"]["kernels"]) == set(abi.MICROBENCH_BENCHES)
    assert all(k["correct"] and "ms" not in k for k in data["perf"]["kernels"].values())
    md = (tmp_path / "selftest.md").read_text()
    assert "## Microbenchmarks" in md and "No time is reported" in md
    # and the attention schedules as `sage-co tune` checks them on the emulator: nothing timed, nothing stored
    sched = data["perf"]["schedules"]
    assert sched["measured"] is False and sched["rows"] and all(r["ok"] for r in sched["rows"] if r["symbol"])
    assert "## Attention schedules" in md and "no choice stored" in md
    with pytest.raises(refit.RefitError, match=r"perf.measured = False"):   # an emulator report cannot be fitted on
        refit.read_report(tmp_path / "selftest.json")


def test_gpu_half_control_flow(monkeypatch, tmp_path):
    """selftest_perf.gpu end to end with the HIP launches served by the emulator and HIP-event times replaced by a
    synthetic GPU (there is no gfx1201 here): checked once, timed at two iteration counts, derived, fed to refit."""
    clock, cus = 2.5e9, 56                # a 56-CU board: the plan and the derivation take its own count
    plan = {b: (WORKGROUPS, 2, 6) for b in abi.MICROBENCH_BENCHES}
    plan["clock"] = (WORKGROUPS, 2000, 6000)     # whole counter values: enough of them that rounding is < 1e-4
    per_iter, _, cyc = _synthetic_seconds(clock, {"valu": 0.0, "trans": 0.9, "lds": 1.0}, 64, 1024.0, plan, 100.0,
                                          cus=cus, trans_clocks=8.0)
    plans = []
    monkeypatch.setattr(mb, "gpu_plan", lambda n: plans.append(n) or plan)
    monkeypatch.setattr(selftest_perf, "device_info", lambda d: {"name": "synthetic gfx1201", "arch": "gfx1201",
                                                                 "cus": cus})
    launched = []
    real_launch, real_inputs = mb.launch_bench, mb.inputs

    def launch_bench(bench, args, n, *, backend):
        assert backend == "gpu"
        launched.append((bench, n))
        if n == mb.EMU_PLAN[bench][1]:      # the correctness launch: really run (on the emulator)
            return real_launch(bench, args, n, backend="emu")
        if bench == "clock":                # a timed launch: the shader clock grows by n x cycles per iteration
            m = abi.MICROBENCH_MATRIX_DWORDS
            args["out"][:, :, m:m + 4] = torch.tensor([7, 1, 7 + round(n * cyc), 1], dtype=torch.int32)
    monkeypatch.setattr(mb, "launch_bench", launch_bench)
    monkeypatch.setattr(mb, "inputs", lambda bench, wg, device="cpu", **kw: real_inputs(bench, wg, **kw))
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d: "synthetic gfx1201")
    launch_overhead = 5e-6

    def time_launch(fn, device):
        fn()
        bench, n = launched[-1]
        return launch_overhead + n * per_iter[bench]
    monkeypatch.setattr(selftest_perf, "_time_launch", time_launch)
    report = selftest.Report()
    selftest_perf.run(report, [0], echo=lambda *_: None)
    assert not report.failed, report.failed
    perf = report.perf
    assert perf["measured"] is True and perf["kernels"]["wmma"]["iterations"] == [2, 6] and plans == [cus]
    assert perf["device"] == {"name": "synthetic gfx1201", "arch": "gfx1201", "cus": cus}
    assert perf["derived"]["clock"]["measured"] is True
    assert perf["derived"]["wmma"]["sustained_clock_hz"] == pytest.approx(clock, rel=1e-4)   # the overhead cancels
    assert perf["derived"]["trans"]["clocks_per_op"] == pytest.approx(8.0, rel=1e-4)
    assert perf["derived"]["lds_chain"]["load_to_use_clk"] == pytest.approx(64, rel=1e-4)
    assert "| LDS b128 load rate (one CU's LDS half) | 100.0 B/clk |" in "\n".join(selftest_perf.markdown(perf))
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"perf": json.loads(json.dumps(perf))}))
    with pytest.raises(refit.RefitError, match=r"perf\.device\.cus = 56: the model's target \(the R9700\) has 64"):
        refit.read_report(path)
    perf["device"]["cus"] = 64              # as if it were the R9700 (the derived figures are per CU or per clock)
    path.write_text(json.dumps({"perf": json.loads(json.dumps(perf))}))
    derived = refit.read_report(path)
    params, changes = refit.refit_params(derived)
    assert params.clock_hz == pytest.approx(clock, rel=1e-4) and params.lds_latency == 64
    assert params.trans_clocks == 8
    assert params.l2_bytes_per_clk == pytest.approx(1024, rel=1e-4)
    assert params.lds_bytes_per_clk == pytest.approx(100.0, rel=1e-4)
    params = refit.apply_rules(params, refit.rule_findings(derived))
    assert params.trans_coissue_wmma is True and params.valu_coissue_wmma is False


# ------------------------------------------------------------------------------------------ --refit
def _report(tmp_path, clock=2.6e9, lds=40.0, l2=1800.0, trans=0.05, lds_rate=96.0, trans_clocks=4.1, vopd=1.05,
            trans_valu=0.9, **changes):
    perf = {"measured": True, "where": "synthetic (test)", "device": {"name": "synthetic", "arch": "gfx1201",
                                                                       "cus": 64},
            "kernels": {b: {"correct": True} for b in abi.MICROBENCH_BENCHES},
            "derived": {"wmma": {"sustained_clock_hz": clock, "ops_per_s": 1.0},
                        "trans": {"clocks_per_op": trans_clocks}, "trans_log": {"clocks_per_op": 6.2},
                        "trans_rcp": {"clocks_per_op": 4.0}, "vopd": {"issue_clocks_per_pair": vopd},
                        "trans_valu": {"overlap": trans_valu},
                        "wmma_valu": {"overlap": 0.02}, "wmma_trans": {"overlap": trans},
                        "wmma_lds": {"overlap": 0.97}, "lds": {"bytes_per_clk": lds_rate},
                        "lds_chain": {"load_to_use_clk": lds}, "l2_stream": {"bytes_per_clk": l2}}}
    for path, value in changes.items():
        node = perf
        *head, last = path.split("__")
        for part in head:
            node = node[part]
        if value is None:
            del node[last]
        else:
            node[last] = value
    p = tmp_path / "report.json"
    p.write_text(json.dumps({"environment": {}, "perf": perf}))
    return p


SHAPES = (("asm", 1, 24, 1536, 128),)


@pytest.mark.parametrize("clock, faster", [(3.6e9, True), (1.8e9, False)])
def test_refit_sets_parameters_and_restates(tmp_path, capsys, clock, faster):
    path = _report(tmp_path, clock=clock)
    params, changes = refit.refit_params(refit.read_report(path))
    assert params.clock_hz == clock != CALIBRATED.clock_hz
    assert params.lds_latency == 40 != CALIBRATED.lds_latency and params.l2_bytes_per_clk == 1800.0
    assert params.lds_bytes_per_clk == 96.0 != CALIBRATED.lds_bytes_per_clk
    assert [c.mapping.param for c in changes] == ["clock_hz", "trans_clocks", "vopd_issue_clocks", "lds_bytes_per_clk",
                                                  "lds_latency", "l2_bytes_per_clk"]
    assert params.trans_clocks == 4 and params.vopd_issue_clocks == 1
    assert refit.print_refit(path, shapes=SHAPES) == 0
    out = capsys.readouterr().out
    assert f"{CALIBRATED.clock_hz / 1e9:.3f} GHz -> {clock / 1e9:.3f} GHz (was SOURCED)" in out
    assert "32 clk -> 40 clk (was ASSUMED)" in out and "72 B/clk -> 96 B/clk (was FITTED)" in out
    m = re.search(r"asm B=1 H=24 S=1536 D=128: ([\d.]+) us -> ([\d.]+) us", out)
    old, new = float(m.group(1)), float(m.group(2))
    assert (new < old) if faster else (new > old), out       # a faster clock re-states faster kernels
    assert "wmma_trans.overlap     measured 0.05 (adds), model adds: agrees" in out
    assert re.search(r"trans_coissue_wmma +wmma_trans.overlap +False -> False", out), out
    assert "partial overlaps" not in out


def test_measured_trans_rule_reaches_the_restated_time(tmp_path, capsys):
    from perfmodel.restate import our_kernel
    path = _report(tmp_path, trans=0.92)
    derived = refit.read_report(path)
    found = refit.rule_findings(derived)
    trans = next(f for f in found if f.mapping.param == "trans_coissue_wmma")
    assert trans.coissues is True and trans.verdict == "CONTRADICTS"
    assert refit.print_refit(path, as_json=True, shapes=SHAPES) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["modeled"] and data["params"]["clock_hz"]["new"] == 2.6e9
    assert data["params"]["lds_latency"]["field"] == "lds_chain.load_to_use_clk"
    assert data["params"]["trans_coissue_wmma"] == {"field": "wmma_trans.overlap", "measured": 0.92, "old": False,
                                                    "new": True}
    assert data["params"]["valu_coissue_wmma"]["new"] is False
    assert [r["verdict"] for r in data["rules"]] == ["contradicts", "agrees", "agrees", "agrees"]
    assert data["other_trans"] == {"trans_log": 6.2, "trans_rcp": 4.0}
    # the re-stated time runs under the measured rule: the same parameters with the model's TRANS rule are slower
    params = refit.apply_rules(refit.refit_params(derived)[0], found)
    assert params.trans_coissue_wmma is True
    new_us = data["figures"][0]["new_us"]
    assert new_us == pytest.approx(our_kernel("asm", 1, 24, 1536, params).time_us)
    assert our_kernel("asm", 1, 24, 1536, params.override(trans_coissue_wmma=False)).time_us > new_us


@pytest.mark.parametrize("overlap, rule", [(0.75, True), (1.2, True), (0.74, None), (0.5, None), (0.26, None),
                                           (0.25, False), (-0.1, False)])
def test_overlap_bands(overlap, rule):
    assert refit.classify(overlap) is rule


def test_partial_overlap_keeps_the_knob_and_brackets_the_time(tmp_path, capsys):
    path = _report(tmp_path, trans=0.5)
    found = refit.rule_findings(refit.read_report(path))
    trans = next(f for f in found if f.mapping.param == "trans_coissue_wmma")
    assert trans.coissues is None and trans.verdict == "PARTIAL" and trans.new is CALIBRATED.trans_coissue_wmma
    assert refit.print_refit(path, as_json=True, shapes=SHAPES) == 0
    row = json.loads(capsys.readouterr().out)["figures"][0]
    assert row["bracket_us"]["True"] < row["bracket_us"]["False"]
    assert row["new_us"] == pytest.approx(row["bracket_us"][str(CALIBRATED.trans_coissue_wmma)])


@pytest.mark.parametrize("changes, message", [
    ({"derived__lds_chain__load_to_use_clk": None}, r"perf\.derived\.lds_chain\.load_to_use_clk: missing"),
    ({"derived__wmma__sustained_clock_hz": "fast"}, r"perf\.derived\.wmma\.sustained_clock_hz = 'fast': expected"),
    ({"derived__l2_stream__bytes_per_clk": -5.0}, r"perf\.derived\.l2_stream\.bytes_per_clk = -5 B/clk: outside"),
    ({"derived__lds__bytes_per_clk": 5000.0}, r"perf\.derived\.lds\.bytes_per_clk = 5000 B/clk: outside"),
    ({"derived__wmma_trans__overlap": 7.0}, r"perf\.derived\.wmma_trans\.overlap = 7"),
    ({"measured": False}, r"perf\.measured = False"),
    ({"kernels__lds__correct": False}, r"perf\.kernels\.lds\.correct is not true"),
    ({"device__cus": 48}, r"perf\.device\.cus = 48: the model's target \(the R9700\) has 64 CUs"),
    ({"device__arch": "gfx1200"}, r"perf\.device\.arch = 'gfx1200': the model's target is gfx1201"),
    ({"device": None}, r"perf\.device: missing"),
    ({"derived__trans__clocks_per_op": 200.0}, r"perf\.derived\.trans\.clocks_per_op = 200 clk: outside"),
    ({"derived": None}, r"perf\.derived: missing"),
])
def test_bad_report_names_the_field(tmp_path, changes, message):
    with pytest.raises(refit.RefitError, match=message):
        derived = refit.read_report(_report(tmp_path, **changes))
        refit.refit_params(derived)
        refit.rule_findings(derived)


def test_refit_cli_errors(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "noperf.json").write_text(json.dumps({"environment": {}}))
    for name, message in (("bad.json", "not JSON"), ("noperf.json", "no 'perf' section"),
                          ("missing.json", "cannot read it")):
        r = subprocess.run([sys.executable, str(ROOT / "tools" / "perf_model.py"), "--refit", str(tmp_path / name)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and message in r.stderr and "perf_model: error:" in r.stderr, r.stderr


def test_parameter_map_names_model_parameters():
    from dataclasses import fields
    from perfmodel.hardware import Params
    names = {f.name for f in fields(Params)}
    assert {m.param for m in refit.PARAMETER_MAP} <= names
    # every co-issue knob is a boolean Params field that reaches the simulator's rules
    from perfmodel.launch_model import latencies
    knobs = [m.param for m in refit.RULE_MAP if m.param]
    assert knobs == ["trans_coissue_wmma", "valu_coissue_wmma", "trans_overlaps_valu"]
    for k in knobs:
        assert isinstance(getattr(CALIBRATED, k), bool)
        assert latencies(CALIBRATED.override(**{k: True})) != latencies(CALIBRATED.override(**{k: False})), k
    assert all(m.fixed_rule is not None for m in refit.RULE_MAP if not m.param)
    np.testing.assert_array_less([m.lo for m in refit.PARAMETER_MAP], [m.hi for m in refit.PARAMETER_MAP])


def test_docs_refit_table_is_the_mapping_and_todays_parameters():
    """docs/performance.md §Microbenchmarks and refit: one row per mapped field, naming its parameter, with today's
    value and status of hardware.Params."""
    from dataclasses import fields
    from perfmodel.hardware import Params
    section = (ROOT / "docs" / "performance.md").read_text().split("## Microbenchmarks and refit", 1)[1]
    table = section.split("| report field (`perf.derived.`) | parameter | today |", 1)[1].split("\n\n", 1)[0]
    rows = [[c.strip() for c in r.strip("|").split("|")] for r in table.splitlines() if r.startswith("| `")]
    status = {f.name: f.metadata["status"] for f in fields(Params)}
    mapped = {m.field: m.param for m in refit.PARAMETER_MAP} | {m.field: m.param for m in refit.RULE_MAP}
    assert {r[0].strip("`") for r in rows} == set(mapped)
    for field, param_cell, today in rows:
        param = mapped[field.strip("`")]
        if param is None:
            assert param_cell.startswith("none") and today.startswith("co-issues"), (field, today)
            continue
        assert param_cell.startswith(f"`{param}`") and today.endswith(f"({status[param]})"), (field, today)
        value = getattr(CALIBRATED, param)
        shown = today.split()[0]
        if isinstance(value, bool):
            assert shown == str(value), (field, today)
        else:
            scale = 1e9 if today.split()[1] == "GHz" else 1.0
            assert float(shown) * scale == pytest.approx(value), (field, today)


def test_cli_selftest_perf_flag(tmp_path, monkeypatch):
    from sage_co import cli
    seen = {}

    def fake_run(out, *, quick, device, perf=False, **_):
        seen.update(perf=perf)
        return selftest.Report(gpu="test")
    monkeypatch.setattr(selftest, "run", fake_run)
    assert cli.main(["selftest", "--perf", "--out", str(tmp_path)]) == 0 and seen == {"perf": True}
    assert cli.main(["selftest", "--out", str(tmp_path)]) == 0 and seen == {"perf": False}


def test_refit_with_trans_at_8_clocks_moves_the_time_as_hypotheses_predict(tmp_path, capsys):
    """Issue 38: a report measuring TRANS at 8 clocks per v_exp_f32 (every other figure at the model's values)
    re-states the kernel at exactly the time `--hypotheses` gives its row (TRANS 8, the other rules unchanged), and
    that is slower than the current rules' time."""
    from perfmodel import hypotheses as hy
    c = CALIBRATED
    path = _report(tmp_path, clock=c.clock_hz, lds=c.lds_latency, l2=c.l2_bytes_per_clk, lds_rate=c.lds_bytes_per_clk,
                   trans=0.0, trans_clocks=7.8, vopd=1.0, trans_valu=1.0)
    assert refit.print_refit(path, as_json=True, shapes=SHAPES) == 0
    data = json.loads(capsys.readouterr().out)
    row = data["figures"][0]
    assert data["params"]["trans_clocks"]["new"] == 8 and data["rule_set"] == hy.RuleSet(8, False, False, 1).label
    want = hy.evaluate(hy.RuleSet(8, False, False, 1), shapes=(1536,), levers=())
    now = hy.evaluate(hy.RuleSet.of(CALIBRATED), shapes=(1536,), levers=())
    assert row["new_us"] == pytest.approx(want["us"][1536], rel=1e-9)
    assert row["old_us"] == pytest.approx(now["us"][1536], rel=1e-9)
    assert row["old_us"] < row["new_us"]
