"""`sage-co selftest` without a gfx1201 (as here): it says so plainly, runs the emulator half against the
reference, and writes the markdown + JSON report; the CLI hook reaches it and turns a failed check into exit 1."""
import json

import pytest
import torch

from sage_co import cli, selftest
from sage_co.selftest import Report


@pytest.mark.skipif(selftest.gfx1201_devices()[0] != [], reason="a gfx1201 is present: the GPU half would run")
def test_emulator_half_without_a_gpu(tmp_path):
    lines = []
    report = selftest.run(tmp_path, small=((1, 33, 1),), configs=("plain", "norm+rope64"), large=(), timing=(),
                          echo=lines.append)
    assert report.gpu.startswith("NO gfx1201 GPU here") and "emulator half" in report.gpu
    assert lines[0] == report.gpu                        # said first, plainly
    assert not report.failed, [c for c in report.failed]
    names = [c.name for c in report.checks]
    from sage_co import registry
    assert sum("sha256" in n for n in names) == len(registry.manifest()["code_objects"])   # one per shipped object
    assert sum("predictor mask == torch spec" in n for n in names) == 1
    pred = next(c for c in report.checks if "predictor mask == torch spec" in c.name)
    assert 0 < float(pred.detail.split()[-1]) < 1, pred      # a non-trivial mask (S=33 was one tile: density 1)
    assert any("prepare == reference" in n for n in names)
    assert sum("accuracy contract vs FP32" in n for n in names) == 2 * len(selftest.kernels())
    data = json.loads((tmp_path / "selftest.json").read_text())
    assert data["failed"] == 0 and data["gpu"] == report.gpu and data["environment"]["torch"]
    md = (tmp_path / "selftest.md").read_text()
    assert "**Result:** PASS" in md and "NO gfx1201 GPU here" in md and "| pass |" in md


def test_a_corrupt_code_object_fails_the_report(tmp_path, monkeypatch):
    from sage_co import registry
    real = registry.manifest()
    fake = json.loads(json.dumps(real))
    first = sorted(fake["code_objects"])[0]
    fake["code_objects"][first]["sha256"] = "0" * 64
    monkeypatch.setattr(registry, "manifest", lambda: fake)
    report = selftest.run(tmp_path, small=(), large=(), timing=(), echo=lambda *_: None)
    assert [c.name for c in report.failed] == [f"code object {fake['code_objects'][first]['file']} sha256"]
    assert "FAIL (1 checks)" in (tmp_path / "selftest.md").read_text()


@pytest.mark.parametrize("failed", [False, True])
def test_cli_hook(tmp_path, monkeypatch, failed):
    seen = {}

    def fake_run(out, *, quick, device, **_):
        seen.update(out=out, quick=quick, device=device)
        r = Report(gpu="test")
        r.add("a check", not failed)
        return r
    monkeypatch.setattr(selftest, "run", fake_run)
    rc = cli.main(["selftest", "--quick", "--out", str(tmp_path / "r"), "--device", "1"])
    assert seen == dict(out=tmp_path / "r", quick=True, device=1)
    assert rc == (1 if failed else 0)


# ------------------------------------------------------------------------------------------ issue 38
def test_rehearsal_of_first_contact(tmp_path):
    """`sage-co selftest --rehearse`: the GPU half on the emulator made hardware-like (+-1 ulp TRANS, the other f16
    WMMA order) with a HIP error in one check, an out-of-memory SDPA baseline and a crash of the child. It exits 1;
    the report exists, names each injected fault where it shows, and every perturbed comparison passes (prepare and
    the predictor bit for bit, attention within the hardware tolerance, though not bitwise: the perturbation is
    real)."""
    out = tmp_path / "r"
    assert cli.main(["selftest", "--rehearse", "--out", str(out)]) == 1
    data = json.loads((out / "selftest.json").read_text())
    md = (out / "selftest.md").read_text()
    checks = {c["name"]: c for c in data["checks"]}
    failed = sorted(n for n, c in checks.items() if c["status"] == "fail")
    assert len(failed) == 2, failed
    hip = next(c for n, c in checks.items() if n in failed and "attention[hip]" in n)
    assert "HipError" in hip["detail"] and "INJECTED" in hip["detail"] and "plain" in hip["name"]
    crash = checks["GPU half: the child process ended early"]
    assert crash["status"] == "fail" and "SIGABRT" in crash["detail"] and "kernel fault" in crash["detail"]
    oom = [c for n, c in checks.items() if "SDPA" in n and "baseline" in n]
    assert len(oom) == 1 and oom[0]["status"] == "info" and "out of memory" in oom[0]["detail"]
    assert any("out of memory" in t.get("error", "") for t in data["timings"])
    assert any(t["provider"].startswith("sage[") and "ms" in t for t in data["timings"])
    assert len(data["rehearsal"]["faults"]) == 3 and data["running"] == ""
    for fault in data["rehearsal"]["faults"]:
        assert fault in md
    compared = [c for n, c in checks.items() if n.startswith("cpu B=") and c is not hip]
    assert len(compared) == 6 and all(c["status"] == "pass" for c in compared), compared
    tol = [c for c in compared if "hardware tolerance" in c["name"]]
    assert len(tol) == 3
    assert all("bitwise equal" in c["detail"] for c in tol)
    assert any("LSE 100.00 %" not in c["detail"] for c in tol)     # the perturbation changed LSE bits
    assert not (out / selftest.EMU_RESULTS).exists() and not (out / selftest.CHILD_SPEC).exists()


def test_out_dir_whose_report_file_is_a_directory_fails_up_front(tmp_path):
    (tmp_path / "selftest.json").mkdir()
    with pytest.raises(ValueError, match=r"--out .*selftest.json exists and is not a file"):
        selftest.check_out_dir(tmp_path)
    assert cli.main(["selftest", "--out", str(tmp_path)]) != 0


def test_report_is_rewritten_after_every_check_and_names_the_running_one(tmp_path):
    r = Report(out_dir=tmp_path)
    r.add("first", True)
    assert [c["name"] for c in json.loads((tmp_path / "selftest.json").read_text())["checks"]] == ["first"]
    r.start("second, under way")
    assert Report.load(tmp_path).running == "second, under way"
    assert "**Running when this report was written:** second, under way" in (tmp_path / "selftest.md").read_text()

    def boom():
        raise torch.OutOfMemoryError("HIP out of memory")
    assert selftest.guarded(r, "third", boom) is None          # isolated: the next check runs
    r.add("fourth", True)
    loaded = Report.load(tmp_path)
    assert [(c.name, c.status) for c in loaded.checks] == [("first", "pass"), ("third", "fail"), ("fourth", "pass")]
    assert "OutOfMemoryError: HIP out of memory" in loaded.checks[1].detail and loaded.running == ""


def test_attention_bound_admits_the_tolerance_and_fails_a_wrong_result():
    g = torch.Generator().manual_seed(3)
    v = torch.randn(2, 77, 3, 128, generator=g).to(torch.bfloat16)
    o = torch.randn(2, 50, 3, 128, generator=g).to(torch.bfloat16) * 0.3
    lse = torch.randn(2, 3, 50, generator=g) * 4
    b_out, b_lse = selftest.attention_bound(o, lse, v, "fp8")
    assert b_out.shape == (2, 50, 3, 128) and b_lse.shape == lse.shape
    # one output ulp anywhere, and the LSE moved by a few ulps, are within it; a 1 % error of the LSE is not
    bumped = (o.view(torch.int16) + 1).view(torch.bfloat16)
    assert selftest.within_bound(bumped, o, b_out)[0]
    assert selftest.within_bound(lse * (1 + 2 ** -22), lse, b_lse)[0]
    ok, equal, ratio = selftest.within_bound(lse + 0.01 * lse.abs().clamp_min(1), lse, b_lse)
    assert not ok and equal == 0.0 and ratio > 1
    # fp16 P is 2^7 times tighter than fp8 P: a 1 % output error passes fp8's bound on most elements, not fp16's
    b16, _ = selftest.attention_bound(o, lse, v, "fp16")
    assert (b16 < b_out).all()
    assert not selftest.within_bound(o.float() * 1.02 + 0.01, o.float(), b16)[0]


@pytest.mark.parametrize("hip_python, runtime, ok", [("7.2.0", 70_253_211, True), ("6.4.1", 60_443_484, True),
                                                     ("7.2.0", 60_443_484, False), ("10.0.0", 71_551_100, True),
                                                     ("10.0.0", 70_051_100, False), ("6.2.0", 60_243_484, False),
                                                     (None, 70_253_211, False)])
def test_hip_python_series_is_checked_against_the_runtime(hip_python, runtime, ok):
    from sage_co.backends.hip_runtime import hip_python_series_problem
    problem = hip_python_series_problem(hip_python, runtime)
    assert (problem == "") is ok, problem


@pytest.mark.parametrize("binding", ["hip-python", "ctypes"])
def test_environment_with_a_gpu_reads_the_runtime_version_through_the_binding(monkeypatch, binding):
    """With a gfx1201 (faked: the device list and the gpu backend), the environment step returns the device, reads
    hipRuntimeGetVersion through the backend's binding, checks the hip-python series only on hip-python, and records
    the tuned schedules; the GPU half is not skipped."""
    from types import SimpleNamespace

    from sage_co import launch, tuning
    from sage_co.backends import hip_runtime
    calls = []
    be = SimpleNamespace(binding=SimpleNamespace(name=binding), runtime=SimpleNamespace(path="/opt/rocm/lib/x.so"),
                         _call=lambda name, *a: calls.append(name) or 70253211)
    monkeypatch.setattr(selftest, "gfx1201_devices", lambda: ([0], ""))
    monkeypatch.setattr(launch, "get_backend", lambda name: be)
    monkeypatch.setattr(tuning, "describe_choices", lambda: ["tuned attention schedule, device 0 (...): none"])
    monkeypatch.setattr(hip_runtime, "hip_python_version", lambda: "7.2.0")
    report = Report()
    assert selftest.environment(report) == [0]
    assert calls == ["hipRuntimeGetVersion"] and report.environment["hip_runtime_version"] == 70253211
    names = {c.name: c for c in report.checks}
    assert names[f"{binding} bound to torch's HIP runtime"].status == "pass"
    series = "hip-python series matches the HIP runtime (hipRuntimeGetVersion)"
    assert (series in names) == (binding == "hip-python")
    if binding == "hip-python":
        assert names[series].status == "pass"
    assert report.environment["tuned_schedules"].startswith("tuned attention schedule, device 0")
