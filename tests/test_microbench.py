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

ROOT = Path(__file__).resolve().parent.parent
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
    """The hand-written assembly cannot import sage_co.abi: its named constants are checked against it here."""
    consts: dict = {}
    for name, expr in re.findall(r"^\s*\.set\s+(\w+),\s*([^/\n]+)", ASM.read_text(), re.M):
        consts[name] = eval(expr, {}, dict(consts))  # noqa: S307 (integer expressions of earlier names)
    assert consts["RECORD_DWORDS"] == abi.MICROBENCH_RECORD_DWORDS
    assert consts["LDS_BYTES"] == abi.MICROBENCH_LDS_BYTES
    assert consts["LDS_LOAD_STRIDE"] == consts["STREAM_LOAD_BYTES"] == abi.MICROBENCH_LDS_LOAD_BYTES
    assert consts["STREAM_WAVE_BYTES"] == abi.MICROBENCH_STREAM_WAVE_BYTES
    assert consts["LANES"] * consts["WAVES_PER_WG"] == abi.MICROBENCH_BLOCK[0]
    assert consts["CHAIN_STEPS"] == abi.MICROBENCH_CHAIN_STEPS and ".rept CHAIN_STEPS" in ASM.read_text()
    assert consts["EXP_LANE_MASK"] == mb.EXP_LANE_MASK and consts["EXP_BIAS"] == mb.EXP_BIAS


# ------------------------------------------------------------------------------------------ derivation
def _synthetic_seconds(clock, overlaps, lds_latency, l2_bytes_per_clk, plan=mb.GPU_PLAN):
    """Seconds per iteration a GPU with these properties would show (the inverse of derive's arithmetic)."""
    wg = {b: plan[b][0] for b in abi.MICROBENCH_BENCHES}
    wps = {b: mb.waves(wg[b]) / mb.SIMDS for b in wg}
    clocks = {"wmma": wps["wmma"] * abi.MICROBENCH_WMMA_PER_ITER * mb.IU8_WMMA_CLOCKS,
              "valu": wps["valu"] * abi.MICROBENCH_VALU_PER_ITER * mb.VALU_ISSUE_CLOCKS,
              "trans": wps["trans"] * abi.MICROBENCH_TRANS_PER_ITER * mb.TRANS_CLOCKS,
              "lds": wps["lds"] * abi.MICROBENCH_LDS_PER_ITER * 8}
    s = {b: c / clock for b, c in clocks.items()}
    for mix, unit in mb.OVERLAP_PAIRS.items():
        s[mix] = s["wmma"] + s[unit] - overlaps[unit] * min(s["wmma"], s[unit])
    s["lds_chain"] = abi.MICROBENCH_CHAIN_STEPS * lds_latency / clock
    s["l2_stream"] = mb.waves(wg["l2_stream"]) * abi.MICROBENCH_STREAM_WAVE_BYTES / l2_bytes_per_clk / clock
    return s, wg


def test_derive_recovers_the_properties():
    s, wg = _synthetic_seconds(2.4e9, {"valu": 0.0, "trans": 1.0, "lds": 0.75}, 57, 1500.0)
    d = mb.derive(s, wg)
    assert d["wmma"]["sustained_clock_hz"] == pytest.approx(2.4e9)
    assert d["wmma"]["ops_per_s"] == pytest.approx(2.4e9 * 2048 * 64)      # iu8 2048 OP/clk/CU (§Throughput)
    assert d["wmma_valu"]["overlap"] == pytest.approx(0.0, abs=1e-9)
    assert d["wmma_trans"]["overlap"] == pytest.approx(1.0)
    assert d["wmma_lds"]["overlap"] == pytest.approx(0.75)
    assert d["wmma_trans"]["unit_clocks_per_op"] == pytest.approx(mb.TRANS_CLOCKS)
    assert d["lds_chain"]["load_to_use_clk"] == pytest.approx(57)
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
    with pytest.raises(refit.RefitError, match=r"perf.measured = False"):   # an emulator report cannot be fitted on
        refit.read_report(tmp_path / "selftest.json")


def test_gpu_half_control_flow(monkeypatch, tmp_path):
    """selftest_perf.gpu end to end with the HIP launches served by the emulator and HIP-event times replaced by a
    synthetic GPU (there is no gfx1201 here): checked once, timed at two iteration counts, derived, fed to refit."""
    clock = 2.5e9
    plan = {b: (WORKGROUPS, 2, 6) for b in abi.MICROBENCH_BENCHES}
    per_iter, _ = _synthetic_seconds(clock, {"valu": 0.0, "trans": 0.0, "lds": 1.0}, 64, 1024.0, plan)
    monkeypatch.setattr(mb, "GPU_PLAN", plan)
    launched = []
    real_launch, real_inputs = mb.launch_bench, mb.inputs

    def launch_bench(bench, args, n, *, backend):
        assert backend == "hip"
        launched.append((bench, n))
        if n == mb.EMU_PLAN[bench][1]:      # the correctness launch: really run (on the emulator)
            return real_launch(bench, args, n, backend="emu")
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
    assert perf["measured"] is True and perf["kernels"]["wmma"]["iterations"] == [2, 6]
    assert perf["derived"]["wmma"]["sustained_clock_hz"] == pytest.approx(clock)     # the overhead cancels
    assert perf["derived"]["lds_chain"]["load_to_use_clk"] == pytest.approx(64)
    assert "Derived" in "\n".join(selftest_perf.markdown(perf))
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"perf": json.loads(json.dumps(perf))}))
    params, changes = refit.refit_params(refit.read_report(path))
    assert params.clock_hz == pytest.approx(clock) and params.lds_latency == 64
    assert params.l2_bytes_per_clk == pytest.approx(1024)


# ------------------------------------------------------------------------------------------ --refit
def _report(tmp_path, clock=2.6e9, lds=40.0, l2=1800.0, trans=0.05, **changes):
    perf = {"measured": True, "where": "synthetic (test)", "kernels": {b: {"correct": True}
                                                                        for b in abi.MICROBENCH_BENCHES},
            "derived": {"wmma": {"sustained_clock_hz": clock, "ops_per_s": 1.0},
                        "wmma_valu": {"overlap": 0.02}, "wmma_trans": {"overlap": trans},
                        "wmma_lds": {"overlap": 0.97},
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


@pytest.mark.parametrize("clock, faster", [(2.6e9, True), (1.8e9, False)])
def test_refit_sets_parameters_and_restates(tmp_path, capsys, clock, faster):
    path = _report(tmp_path, clock=clock)
    params, changes = refit.refit_params(refit.read_report(path))
    assert params.clock_hz == clock != CALIBRATED.clock_hz
    assert params.lds_latency == 40 != CALIBRATED.lds_latency and params.l2_bytes_per_clk == 1800.0
    assert [c.mapping.param for c in changes] == ["clock_hz", "lds_latency", "l2_bytes_per_clk"]
    assert refit.print_refit(path, shapes=SHAPES, rule_kernels=()) == 0
    out = capsys.readouterr().out
    assert f"2.150 GHz -> {clock / 1e9:.3f} GHz" in out and "32 clk -> 40 clk" in out
    m = re.search(r"asm B=1 H=24 S=1536 D=128: ([\d.]+) us -> ([\d.]+) us", out)
    old, new = float(m.group(1)), float(m.group(2))
    assert (new < old) if faster else (new > old), out       # a faster clock re-states faster kernels
    assert "wmma_trans.overlap     measured 0.05, model 0: agrees" in out


def test_refit_json_and_a_contradicted_rule(tmp_path, capsys):
    path = _report(tmp_path, trans=0.92)
    found = refit.rule_findings(refit.read_report(path))
    trans = next(f for f in found if f.mapping.rule == "trans_overlaps_wmma")
    assert trans.coissues and not trans.agrees
    assert refit.print_refit(path, as_json=True, shapes=SHAPES, rule_kernels=()) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["modeled"] and data["params"]["clock_hz"]["new"] == 2.6e9
    assert data["params"]["lds_latency"]["field"] == "lds_chain.load_to_use_clk"
    assert [r["agrees"] for r in data["rules"]] == [False, True, True]


@pytest.mark.parametrize("changes, message", [
    ({"derived__lds_chain__load_to_use_clk": None}, r"perf\.derived\.lds_chain\.load_to_use_clk: missing"),
    ({"derived__wmma__sustained_clock_hz": "fast"}, r"perf\.derived\.wmma\.sustained_clock_hz = 'fast': expected"),
    ({"derived__l2_stream__bytes_per_clk": -5.0}, r"perf\.derived\.l2_stream\.bytes_per_clk = -5 B/clk: outside"),
    ({"derived__wmma_trans__overlap": 7.0}, r"perf\.derived\.wmma_trans\.overlap = 7"),
    ({"measured": False}, r"perf\.measured = False"),
    ({"kernels__lds__correct": False}, r"perf\.kernels\.lds\.correct is not true"),
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
    from perfmodel.simulate import Latencies
    assert {m.rule for m in refit.RULE_MAP if m.rule} <= {f.name for f in fields(Latencies)}
    np.testing.assert_array_less([m.lo for m in refit.PARAMETER_MAP], [m.hi for m in refit.PARAMETER_MAP])


def test_cli_selftest_perf_flag(tmp_path, monkeypatch):
    from sage_co import cli
    seen = {}

    def fake_run(out, *, quick, device, perf=False, **_):
        seen.update(perf=perf)
        return selftest.Report(gpu="test")
    monkeypatch.setattr(selftest, "run", fake_run)
    assert cli.main(["selftest", "--perf", "--out", str(tmp_path)]) == 0 and seen == {"perf": True}
    assert cli.main(["selftest", "--out", str(tmp_path)]) == 0 and seen == {"perf": False}
