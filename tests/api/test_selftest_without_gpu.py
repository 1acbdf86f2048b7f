"""`sage-co selftest` without a gfx1201 (as here): it says so plainly, runs the emulator half against the
reference, and writes the markdown + JSON report; the CLI hook reaches it and turns a failed check into exit 1."""
import json

import pytest

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
