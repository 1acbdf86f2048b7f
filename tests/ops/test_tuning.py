"""The per-device schedule choice (sage_co/tuning.py, sage_co/tuning_run.py, `sage-co tune`; docs/gpu.md §Tuning).

In this process, on a fake backend that reports a device's identity: the cache file's round trip, what is never
trusted (a corrupt file, an entry of another device, driver or build, an unknown schedule: one warning per process,
the default used), atomic writes, the choice rule, the plan memo following a new choice. On the stub runtime
(tests/stub_hip, a process per step): `sage-co tune --backend gpu` times each schedule with HIP events through the
binding and stores the fastest; a new process plans a call without a schedule and launches that schedule's
symbol, `sage-co info` shows it; a corrupt cache and a foreign entry are ignored with one warning and the default
schedule's symbol launches. On the emulator: `sage-co tune --backend emu` checks each schedule (the kernels bitwise
equal, each within the model's bounds) and writes nothing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from sage_co import accuracy, family, registry, tuning, tuning_run
from sage_co.backends.hip_bindings import DeviceProperties

ROOT = Path(__file__).resolve().parents[2]
R9700 = tuning.DeviceIdentity("AMD Radeon AI PRO R9700", "gfx1201", 64, 70253211, 70253211)
OTHER = family.ATTENTION_SCHEDULES[-1]   # the last shipped schedule (the default when only one is shipped)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache directory ($SAGE_CO_CACHE_DIR), nothing warned yet, nothing remembered."""
    monkeypatch.setenv(tuning.ENV_DIR, str(tmp_path))
    monkeypatch.setattr(tuning, "_warned", [])
    tuning.invalidate()
    yield tmp_path / tuning.FILE_NAME
    tuning.invalidate()


class FakeBackend:
    """What tuning reads of a gpu backend: hipGetDeviceProperties, the driver / runtime versions, the device index
    of a torch device; counts the property reads."""

    def __init__(self, identity=R9700):
        self.identity, self.reads = identity, 0
        self.platform = SimpleNamespace(index_of=lambda device: 0)

    def device_properties(self, index):
        self.reads += 1
        i = self.identity
        return DeviceProperties(i.name, i.gcn_arch_name, i.cus)

    def versions(self):
        return self.identity.driver_version, self.identity.runtime_version


def lookups(n: int, identity=R9700) -> tuple[list, list[str]]:
    """n lookups of `identity`: (their answers, the TuningCacheWarning texts given)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        answers = [tuning.lookup(identity) for _ in range(n)]
    return answers, [str(w.message) for w in caught if issubclass(w.category, tuning.TuningCacheWarning)]


def test_a_stored_choice_reads_back_for_its_device_only(cache):
    assert tuning.lookup(R9700) is None and not cache.exists()           # no file: no choice, no warning
    path = tuning.store(R9700, OTHER, rule="r", scores_ms={OTHER: 1.5}, shapes=["B=1"])
    assert path == cache
    data = json.loads(cache.read_text())
    assert data["format"] == tuning.FORMAT
    (entry,) = data["entries"]
    assert entry["device"] == {"name": "AMD Radeon AI PRO R9700", "gcn_arch_name": "gfx1201", "cus": 64,
                               "driver_version": 70253211, "runtime_version": 70253211}
    assert entry["manifest"] == tuning.manifest_identity() and len(entry["manifest"]) == 64
    assert entry["schedule"] == OTHER and entry["scores_ms"] == {OTHER: 1.5}
    assert lookups(2) == ([OTHER, OTHER], [])
    assert [p.name for p in cache.parent.iterdir()] == [tuning.FILE_NAME]   # the temporary file was renamed
    # a second device's entry joins the first; storing again for the first replaces its entry
    second = tuning.DeviceIdentity("AMD Radeon RX 9070 XT", "gfx1201", 64, 70253211, 70253211)
    tuning.store(second, family.DEFAULT_SCHEDULE)
    tuning.store(R9700, OTHER)
    entries = json.loads(cache.read_text())["entries"]
    assert [e["device"]["name"] for e in entries] == ["AMD Radeon RX 9070 XT", "AMD Radeon AI PRO R9700"]
    assert lookups(1, second) == ([family.DEFAULT_SCHEDULE], [])


@pytest.mark.parametrize("content, why", [
    (b"\x00\xffnot json", "is not valid JSON"),
    (b"[1, 2]", "is not a sage-co tuning cache of format 1"),
    (b'{"format": 2, "entries": []}', "is not a sage-co tuning cache of format 1"),
    (b'{"format": 1, "entries": [{"device": {"name": "x"}, "manifest": "m", "schedule": "trans"}]}',
     "is corrupt (entry 0: 'device' must hold exactly"),
    (b'{"format": 1, "entries": [{"device": {"name": "AMD Radeon AI PRO R9700", "gcn_arch_name": "gfx1201", '
     b'"cus": "64", "driver_version": 70253211, "runtime_version": 70253211}, "manifest": "m", "schedule": "trans"}]}',
     "is corrupt (entry 0: device.cus must be a int)"),
])
def test_a_corrupt_file_is_ignored_with_one_warning(cache, content, why):
    cache.write_bytes(content)
    answers, warned = lookups(3)
    assert answers == [None] * 3
    assert len(warned) == 1 and why in warned[0] and str(cache) in warned[0]
    assert f"default {family.DEFAULT_SCHEDULE!r}" in warned[0]


def test_a_corrupt_file_is_replaced_by_the_next_store(cache):
    cache.write_text("{ truncated")
    tuning.store(R9700, OTHER)
    assert lookups(1) == ([OTHER], [])


def _entry(identity=R9700, manifest=None, schedule=OTHER) -> dict:
    return {"device": dict(identity.__dict__), "manifest": manifest or tuning.manifest_identity(),
            "schedule": schedule}


@pytest.mark.parametrize("entry, why", [
    (_entry(manifest="0" * 64), "made with another sage-co build"),
    (_entry(tuning.DeviceIdentity(R9700.name, "gfx1201", 64, 60443483, 70253211)), "under another driver"),
    (_entry(tuning.DeviceIdentity("AMD Radeon RX 7900 XTX", "gfx1100", 96, 70253211, 70253211)),
     "choices for other devices only"),
    (_entry(schedule="exp2_on_the_moon"), "names the schedule 'exp2_on_the_moon', which this build does not ship"),
])
def test_foreign_or_unknown_entries_are_never_trusted(cache, entry, why):
    cache.write_text(json.dumps({"format": tuning.FORMAT, "entries": [entry]}))
    answers, warned = lookups(2)
    assert answers == [None, None]
    assert len(warned) == 1 and why in warned[0], warned


def test_chosen_schedule_reads_the_file_once_per_device_until_invalidated(cache):
    be = FakeBackend()
    assert tuning.chosen_schedule(0, be) is None
    tuning.store(R9700, OTHER)                  # store() forgets what was read
    assert tuning.chosen_schedule(0, be) == OTHER
    reads = be.reads
    cache.write_text("garbage")                 # not read again: the answer is kept per (backend, device)
    assert [tuning.chosen_schedule(0, be) for _ in range(3)] == [OTHER] * 3 and be.reads == reads
    generation = tuning.generation
    tuning.invalidate()
    assert tuning.generation == generation + 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert tuning.chosen_schedule(0, be) is None
    assert len(caught) == 1


def test_an_unreadable_identity_is_no_choice_not_an_error(cache):
    class Broken(FakeBackend):
        def device_properties(self, index):
            raise RuntimeError("hipGetDeviceProperties failed")
    tuning.store(R9700, OTHER)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert tuning.chosen_schedule(0, Broken()) is None
    assert len(caught) == 1 and "cannot be read" in str(caught[0].message)


def test_no_cache_directory_or_warnings_as_errors_never_reach_the_host(cache, monkeypatch):
    def no_dir():
        raise ImportError("cannot import name 'HRESULT' from 'ctypes'")   # platformdirs' Windows path, faked
    monkeypatch.setattr(tuning, "cache_dir", no_dir)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert tuning.chosen_schedule(0, FakeBackend()) is None
    assert len(caught) == 1 and "no cache directory: ImportError" in str(caught[0].message)
    monkeypatch.setattr(tuning, "_warned", [])
    tuning.invalidate()
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # python -W error
        assert tuning.chosen_schedule(0, FakeBackend()) is None


def test_the_rule_picks_the_smallest_geometric_mean_and_keeps_the_default_on_a_near_tie(monkeypatch):
    monkeypatch.setattr(family, "ATTENTION_SCHEDULES", ("a", "b", "c"))
    monkeypatch.setattr(family, "DEFAULT_SCHEDULE", "a")
    shapes = ["s1", "s2", "s3"]
    # b: fastest at s1, much slower at s3; geometric means a 2.0, b (1*2*8)^(1/3) = 2.52, c (1.8*1.8*2)^(1/3) = 1.86
    ms = {"a": {"s1": 2.0, "s2": 2.0, "s3": 2.0}, "b": {"s1": 1.0, "s2": 2.0, "s3": 8.0},
          "c": {"s1": 1.8, "s2": 1.8, "s3": 2.0}}
    choice, scores, common = tuning_run.choose(ms, shapes)
    assert common == shapes and scores["a"] == pytest.approx(2.0) and scores["b"] == pytest.approx(16 ** (1 / 3))
    assert choice == "c" and scores["c"] < scores["a"] * (1 - tuning_run.TIE)
    # within TIE of the best: the default stays
    ms["c"] = {"s1": 1.99, "s2": 1.99, "s3": 1.99}
    assert tuning_run.choose(ms, shapes)[0] == "a"
    # a schedule not built at a shape: scored on the shapes every schedule has
    ms["c"] = {"s1": 1.0, "s2": 1.0, "s3": None}
    choice, scores, common = tuning_run.choose(ms, shapes)
    assert common == ["s1", "s2"] and choice == "c"


# ---------------------------------------------------------------------------------------------- on the stub runtime
def _stub_ready() -> str:
    import torch

    import stub_hip
    if getattr(torch.version, "hip", None) is not None:
        return "torch is a ROCm build: a stub cannot stand in for its runtime"
    if stub_hip.compiler() is None:
        return "no system C compiler to build the stub libamdhip64"
    if not sys.platform.startswith("linux"):
        return "the stub runtime is a Linux shared object"
    return ""


stub_only = pytest.mark.skipif(bool(_stub_ready()), reason=_stub_ready() or "-")
# the schedule the stub's clock makes fastest: a non-default one where the build ships one
FAST = next((s for s in family.ATTENTION_SCHEDULES if s != family.DEFAULT_SCHEDULE), family.DEFAULT_SCHEDULE)
STUB_CARD = tuning.DeviceIdentity("AMD Radeon AI PRO R9700 (stub)", "gfx1201", 64, 70253211, 70253211)


def scenario(name: str, tmp: Path, cache_dir: Path, **env) -> dict:
    """tests/stub_hip/scenario.py NAME in its own process, SAGE_CO_CACHE_DIR = cache_dir."""
    path = os.pathsep.join([str(ROOT / "tests"), str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    child_env = {k: v for k, v in os.environ.items() if k not in ("SAGE_CO_HIP_BINDING", tuning.ENV_DIR)}
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "stub_hip" / "scenario.py"), name, str(tmp)],
                       capture_output=True, text=True, timeout=600,
                       env={**child_env, "PYTHONPATH": path, tuning.ENV_DIR: str(cache_dir), **env})
    assert r.returncode == 0, f"scenario {name} failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def tuned_runs(tmp_path_factory):
    """`tune` over a cache holding a foreign entry (the stub's card under another driver), then a fresh process on the
    ctypes binding."""
    cache_dir = tmp_path_factory.mktemp("tuning_cache")
    foreign = _entry(tuning.DeviceIdentity(STUB_CARD.name, "gfx1201", 64, 60443483, 70253211), schedule=FAST)
    (cache_dir / tuning.FILE_NAME).write_text(json.dumps({"format": tuning.FORMAT, "entries": [foreign]}))
    tune = scenario("tune", tmp_path_factory.mktemp("stub_tune"), cache_dir, SAGE_CO_TEST_FAST_SCHEDULE=FAST)
    # read back through the ctypes binding (tune ran on hip-python where it is installed): the same identity
    return tune, scenario("tuned", tmp_path_factory.mktemp("stub_tuned"), cache_dir, SAGE_CO_HIP_BINDING="ctypes")


@stub_only
def test_tune_times_each_schedule_with_hip_events_and_stores_the_fastest(tuned_runs):
    tune, _ = tuned_runs
    assert tune["code"] == 0, tune["output"]
    entries = tune["file"]["entries"]
    assert len(entries) == 2                                      # the foreign entry is kept, not trusted
    mine = entries[-1]
    assert mine["device"] == STUB_CARD.__dict__ and mine["manifest"] == tuning.manifest_identity()
    assert mine["schedule"] == FAST and mine["rule"] == tuning_run.RULE
    # the stub's event clock: 1 ms per launch of the fast schedule's symbols, 3 ms for every other schedule's
    assert mine["scores_ms"] == pytest.approx({s: (1.0 if s == FAST else 3.0) for s in family.ATTENTION_SCHEDULES})
    assert mine["shapes"] == ["B=1 H=2 S=200 D=128", "B=2 H=3 S=130 D=64"]
    assert tune["leftover"] == [tuning.FILE_NAME]                 # no temporary file left
    n = 2 * len(family.ATTENTION_SCHEDULES)
    assert f"[{n}/{n}]" in tune["output"] and f"device 0: chose {FAST!r}" in tune["output"]


@stub_only
def test_a_foreign_entry_is_ignored_with_one_warning_and_tune_takes_effect_at_once(tuned_runs):
    tune, _ = tuned_runs
    assert tune["before"] == [family.DEFAULT_SCHEDULE]            # the other driver's choice was not used
    assert len(tune["warnings"]) == 1 and "under another driver" in tune["warnings"][0]
    assert tune["after"] == [FAST]                                # the same call shape, planned again after tune


@stub_only
def test_a_new_process_launches_the_tuned_schedule_for_its_device_only(tuned_runs):
    tune, after = tuned_runs
    from sage_co.backends import hip_bindings
    assert tune["binding"] == ("hip-python" if hip_bindings.hip_python_importable() else "ctypes")
    assert after["binding"] == "ctypes"       # the identity read through ctypes matches the one tune stored
    assert after["launched"]["0"] == [FAST, FAST, family.DEFAULT_SCHEDULE]   # schedule= given still wins
    assert after["launched"]["1"] == [family.DEFAULT_SCHEDULE] * 3          # another card: nothing tuned for it
    assert len(after["warnings"]) == 1 and "none for AMD Radeon RX 9070 XT" in after["warnings"][0]
    assert after["info_code"] == 0
    assert after["info"] == [
        f"tuned attention schedule, device 0 (AMD Radeon AI PRO R9700 (stub), gfx1201, 64 CUs): {FAST}",
        f"tuned attention schedule, device 1 (AMD Radeon RX 9070 XT, gfx1201, 64 CUs): none: default "
        f"{family.DEFAULT_SCHEDULE}"]


@stub_only
def test_a_corrupt_cache_is_ignored_with_one_warning_on_the_stub(tmp_path):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    (cache_dir / tuning.FILE_NAME).write_bytes(b'{"format": 1, "entries": [{"device": ')   # a torn write
    r = scenario("tuned", tmp_path / "stub", cache_dir)
    assert r["launched"] == {"0": [family.DEFAULT_SCHEDULE] * 3, "1": [family.DEFAULT_SCHEDULE] * 3}
    assert len(r["warnings"]) == 1 and "is not valid JSON" in r["warnings"][0]


# ---------------------------------------------------------------------------------------------- on the emulator
def test_tune_on_the_emulator_checks_every_schedule_and_writes_nothing(cache, capsys, monkeypatch):
    from sage_co import cli
    rows, check = [], tuning_run.check_emulator
    monkeypatch.setattr(tuning_run, "check_emulator", lambda echo=print: rows.extend(check(echo)) or rows)
    code = cli.main(["tune", "--backend", "emu"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "no choice was written" in out and list(cache.parent.iterdir()) == []
    kernels = {k.kernel for k in registry.kernels() if k.op == "sage_attention_fwd"}
    assert {(r["schedule"], r["kernel"]) for r in rows} == {(s, k) for s in family.ATTENTION_SCHEDULES
                                                           for k in kernels}
    built = [r for r in rows if r["symbol"] is not None]
    assert built and all(r["ok"] is True for r in built)
    for schedule in family.ATTENTION_SCHEDULES:   # asm == HIP bit for bit per schedule
        mine = [r for r in built if r["schedule"] == schedule]
        assert [r["same_as"] for r in mine[1:]] == [mine[0]["kernel"]] * (len(mine) - 1)
    for r in built:
        assert r["symbol"] in out and r["schedule"] in out
        assert r["rel_l2"] <= accuracy.MODEL_REL_L2 and r["different"] <= accuracy.MODEL_MAX_DIFFERENT
    assert cli.main(["tune", "--backend", "emu", "--device", "0"]) == 2   # the emulator has no devices


def test_the_tuned_choice_applies_to_gpu_calls_without_a_schedule_where_it_is_built(monkeypatch):
    from sage_co.ops import attention
    asked = []
    monkeypatch.setattr(tuning, "chosen_schedule",
                        lambda device=None, backend=None: asked.append(device) or "elsewhere")
    keys = dict(head_dim=128, out_dtype="bf16", pv_dtype="fp8")
    none = SimpleNamespace(schedule=None)
    assert attention.resolved_schedule(none, "gpu", "dev") == "elsewhere" and asked == ["dev"]
    assert attention.resolved_schedule(none, "emu", "dev") == family.DEFAULT_SCHEDULE and asked == ["dev"]
    named = SimpleNamespace(schedule=family.DEFAULT_SCHEDULE)
    assert attention.resolved_schedule(named, "gpu", "dev") == family.DEFAULT_SCHEDULE and asked == ["dev"]
    # a tuned schedule with no symbol for these keys: the default's symbol runs; the same name given explicitly fails
    assert attention._shipped(none, "gpu", "dev", "asm", **keys).key("schedule") == family.DEFAULT_SCHEDULE
    with pytest.raises(LookupError, match="has no symbol"):
        attention._shipped(SimpleNamespace(schedule="elsewhere"), "gpu", "dev", "asm", **keys)


def test_the_selftest_report_renders_a_measured_choice():
    from sage_co import selftest_perf
    shapes = ((1, 24, 1536, 128), (1, 24, 4096, 64))
    m = tuning_run.Measurement(0, R9700, shapes)
    texts = [tuning_run.shape_text(s) for s in shapes]
    m.ms = {s: {t: (0.5 if s == OTHER else 0.6) for t in texts} for s in family.ATTENTION_SCHEDULES}
    m.choice, m.scores, m.common = tuning_run.choose(m.ms, texts)
    lines = selftest_perf.markdown({"schedules": {"measured": True, **m.as_dict(), "stored": "/c/tuning.json"}})
    text = "\n".join(lines)
    assert f"**Chosen: {m.choice}**" in text and "AMD Radeon AI PRO R9700" in text and "/c/tuning.json" in text
    assert f"| {OTHER} | 0.500 | 0.500 | 0.500 |" in text
