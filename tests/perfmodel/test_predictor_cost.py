"""The predictor's cost on the performance model (tools/perfmodel/sparse.py; docs/performance.md §Predictor and
block-sparse attention): from the kernels' emulated counts at B=1, H=24, S=16384, D=128 it is well under the dense
attention it prunes, and the predictor plus the attention at density 0.25 beats the dense attention."""
from __future__ import annotations

import sys
from pathlib import Path


def test_predictor_counts_scale_with_the_work():
    from perfmodel import sparse
    small, large = sparse.predictor_counts(1024), sparse.predictor_counts(2048)
    # pool: one wave per block, twice the blocks; select: per query block O(n_kv) scores + an n_kv-key sort
    assert small["pool"]["waves"] * 2 == large["pool"]["waves"]
    assert large["pool"]["wave_instructions"] == 2 * small["pool"]["wave_instructions"]
    assert large["select"]["wave_instructions"] > 2 * small["select"]["wave_instructions"]
    rows = sparse.predictor_rows(1, 2, 1024, 128, counts=small)
    assert [r["launch"] for r in rows] == ["pool", "select"]
    assert rows[0]["wave_instructions"] == 2 * small["pool"]["wave_instructions"]


def test_predictor_is_well_under_dense_attention():
    from perfmodel import sparse
    res = sparse.predictor_vs_dense(densities=(1.0, 0.25))
    print({r["launch"]: round(r["time_us"], 1) for r in res["predictor"]}, round(res["predictor_us"], 1),
          round(res["dense_us"], 1))
    assert res["predictor_fraction"] < 0.08
    quarter = next(r for r in res["density"] if r["mode"] == "density 0.25")
    assert quarter["speedup_with_predictor"] >= 3.0


def test_issue_bound_launches_use_the_calibrated_clock():
    """The predictor is compared with the calibrated attention, so its issue-bound time uses the same fitted clock
    (a slower clock must give a longer issue-bound time; the DRAM bound must not move)."""
    import dataclasses
    from perfmodel import sparse
    from perfmodel.calibration import CALIBRATED
    counts = sparse.predictor_counts(1024)
    fast = sparse.predictor_rows(1, 2, 1024, 128, counts=counts)
    half_clock = dataclasses.replace(CALIBRATED, clock_hz=CALIBRATED.clock_hz / 2)
    slow = sparse.predictor_rows(1, 2, 1024, 128, params=half_clock, counts=counts)
    for f, s in zip(fast, slow):
        assert abs(s["issue_us"] - 2 * f["issue_us"]) < 1e-9 * s["issue_us"]
        assert s["dram_us"] == f["dram_us"]


def test_perf_model_cli_sparse_json():
    import json
    import subprocess
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, str(root / "tools" / "perf_model.py"), "--sparse", "--json"],
                       capture_output=True, text=True, check=True)
    res = json.loads(r.stdout)
    assert [row["launch"] for row in res["predictor"]] == ["pool", "select"]
    assert res["predictor_us"] == sum(row["time_us"] for row in res["predictor"])
    assert [row["mode"] for row in res["density"]][0] == "density 1"
