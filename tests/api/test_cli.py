"""`sage-co` command line (issue 11 items 4 and 8): options mean the same before and after the subcommand,
and every failure is one line on stderr with a non-zero exit, never a traceback."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sage_co import cli, launch

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sage_co.cli", *args], cwd=ROOT, stdout=stdout,
                          stderr=subprocess.PIPE, text=True)


def _one_line_error(r: subprocess.CompletedProcess, code: int, text: str) -> None:
    assert r.returncode == code, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    assert text in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("sage-co: "), r.stderr


@pytest.mark.parametrize("argv, expected", [
    (["-S", "64", "-H", "1", "--kernel", "hip", "run", "--smooth-k"],
     dict(S=64, H=1, kernel="hip", smooth_k=True, B=1, seed=0, backend=None, dist="randn")),
    (["run", "-S", "64", "-H", "1", "--kernel", "hip", "--smooth-k"],
     dict(S=64, H=1, kernel="hip", smooth_k=True)),
    (["-S", "64", "--seed", "7"], dict(S=64, seed=7, H=2, B=1, smooth_k=False, kernel=None)),
    (["-S", "64", "run", "-S", "128"], dict(S=128)),   # given twice: the later one wins, as argparse does
    (["--dist", "k_offset", "-B", "2", "run"], dict(dist="k_offset", B=2, S=1024)),
])
def test_options_mean_the_same_before_and_after_run(argv, expected):
    args = cli.parse_args(argv)
    assert args.func is cli.cmd_run
    for name, value in expected.items():
        assert getattr(args, name) == value, name


def test_options_with_info_are_refused(capsys):
    with pytest.raises(SystemExit) as info:
        cli.parse_args(["-S", "64", "--smooth-k", "info"])
    assert info.value.code == 2
    assert "-S, --smooth-k: option(s) of `run`, not of `info`" in capsys.readouterr().err


def test_a_run_with_options_before_the_subcommand_runs_that_shape(capsys):
    with launch.recording() as records:
        assert cli.main(["-S", "64", "-H", "1", "--kernel", "hip", "run", "--smooth-k"]) == 0
    out = capsys.readouterr().out
    assert "B=1 H=1 S=64" in out
    symbols = [r.symbol for r in records]
    assert symbols[-1] == "gfx1201_sage_attention_fwd_d128_bf16"   # the --kernel hip symbol, not the asm default
    assert any(s.startswith("gfx1201_sage_prepare_d") for s in symbols)


@pytest.mark.parametrize("args, code, text", [
    (["--seed", str(2 ** 64)], 2, "argument --seed: must be in 0 .. 2**64 - 1"),
    (["--seed", "-1"], 2, "argument --seed: must be in 0 .. 2**64 - 1"),
    (["-S", "0"], 2, "argument -S: must be >= 1"),
    (["-S", "x"], 2, "argument -S: expected a positive integer"),
    (["-S", str(10 ** 12)], 1, "needs about"),
    (["-B", "100000", "-H", "100000", "-S", "64"], 1, "needs about"),
    (["-S", "64", "-H", "1", "--kernel", "nope"], 2, "kernel"),
])
def test_bad_arguments_are_one_line_errors(args, code, text):
    _one_line_error(run_cli(*args), code, text)


def test_backend_gpu_without_a_gpu_is_one_line():
    if cli.default_backend() == "gpu":
        pytest.skip("this machine has a gfx1201")
    _one_line_error(run_cli("--backend", "gpu", "-S", "64"), 1, "--backend gpu needs a gfx1201 GPU")


def test_backend_hip_is_the_deprecated_spelling_of_gpu():
    """--backend hip still works: the one normalization (sage_co.backends.canonical) warns and runs it as gpu."""
    if cli.default_backend() == "gpu":
        pytest.skip("this machine has a gfx1201")
    result = run_cli("--backend", "hip", "-S", "64")
    assert 'FutureWarning: --backend="hip" is now "gpu"' in result.stderr, result.stderr
    _one_line_error(result, 1, "--backend gpu needs a gfx1201 GPU")


@pytest.mark.parametrize("args", [["info"], ["-S", "64", "-H", "1"]])
def test_closed_pipe_is_one_line(args):
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = run_cli(*args, stdout=write_end)
    finally:
        os.close(write_end)
    _one_line_error(r, 1, "broken pipe")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux) to simulate a full disk")
def test_full_disk_is_one_line():
    with open("/dev/full", "w") as full:
        r = run_cli("info", stdout=full)
    _one_line_error(r, 1, "No space left on device")


def test_long_emulator_runs_print_an_estimate_and_report_progress(monkeypatch, capsys):
    monkeypatch.setattr(cli, "LONG_RUN_S", 0.0)
    seen: list[tuple[str, int, int]] = []
    real_run = cli.cmd_run

    def spy(args):
        from sage_co.launch import get_backend
        backend = get_backend("emu")
        original = type(backend).run

        def run(self, *a, **kw):
            report = self.progress
            assert report is not None, "the CLI installs a progress callback for emulator runs"
            self.progress = lambda symbol, done, total: (seen.append((symbol, done, total)), report(symbol, done, total))
            try:
                return original(self, *a, **kw)
            finally:
                self.progress = report
        monkeypatch.setattr(type(backend), "run", run)
        return real_run(args)

    monkeypatch.setattr(cli, "cmd_run", spy)
    assert cli.main(["-S", "64", "-H", "1"]) == 0
    assert "estimated emulation time: prepare ~" in capsys.readouterr().out
    assert seen and all(0 < done <= total for _, done, total in seen)
    finals = {symbol: (done, total) for symbol, done, total in seen}
    assert all(done == total for done, total in finals.values())
    assert "gfx1201_sage_attention_fwd_asm_d128_bf16" in finals
    from sage_co.launch import get_backend
    assert get_backend("emu").progress is None


def test_estimate_grows_with_the_shape():
    small, big = cli.estimate(1, 2, 1024), cli.estimate(1, 2, 4096)
    assert big["attention_s"] == pytest.approx(16 * small["attention_s"])
    assert big["bytes"] > small["bytes"]


@pytest.mark.parametrize("exc, text", [
    (RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried to "
                  "allocate 1 bytes"), "out of memory"),
    (MemoryError(), "out of memory"),
    (KeyboardInterrupt(), "interrupted"),
])
def test_failures_inside_a_run_are_one_line(monkeypatch, capsys, exc, text):
    """What the memory estimate lets through but the allocator refuses is still one line, not a traceback."""
    from sage_co import accuracy

    def fail(*args, **kwargs):
        raise exc
    monkeypatch.setattr(accuracy, "make_inputs", fail)
    code = cli.main(["-S", "64", "-H", "1"])
    err = capsys.readouterr().err
    assert code == (130 if isinstance(exc, KeyboardInterrupt) else 1)
    assert err.count("\n") == 1 and err.startswith("sage-co: ") and text in err


def test_a_missing_hsaco_is_one_line(monkeypatch, capsys):
    from sage_co import registry

    def missing():
        raise FileNotFoundError("hsaco/manifest.json not found next to the sage_co package; the installation is "
                                "incomplete")
    monkeypatch.setattr(registry, "hsaco_dir", missing)
    registry.manifest.cache_clear()
    try:
        assert cli.main(["info"]) == 1
    finally:
        registry.manifest.cache_clear()
    err = capsys.readouterr().err
    assert err == "sage-co: hsaco/manifest.json not found next to the sage_co package; the installation is incomplete\n"
