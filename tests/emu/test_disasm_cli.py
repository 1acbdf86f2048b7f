"""`python -m sage_co.emu.disasm` from the shell: --help prints the usage (exit 0), and a reader that closes the pipe
early (`| head`) ends it with a non-zero status and one line on stderr, never a traceback."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sage_co.emu.disasm import disassemble, text_and_symbols

ROOT = Path(__file__).resolve().parents[2]
CMD = [sys.executable, "-m", "sage_co.emu.disasm"]
PIPE_BUFFER_BOUND = 1 << 20          # more than any default pipe buffer (Linux: 64 KiB), so the writer must hit EPIPE


def test_help_prints_usage():
    res = subprocess.run([*CMD, "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage: python -m sage_co.emu.disasm") and "--true16" in res.stdout
    assert "Traceback" not in res.stderr


def test_missing_file_is_one_line_not_a_traceback(tmp_path):
    res = subprocess.run([*CMD, str(tmp_path / "absent.co")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert "absent.co" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_closed_pipe_exits_nonzero_without_traceback():
    # the smallest shipped object whose listing overfills any pipe buffer (the largest, a prepare object, has a
    # million instructions: decoding it twice only made the test slow)
    for co in sorted((ROOT / "hsaco" / "gfx1201").glob("*.co"), key=lambda p: p.stat().st_size):
        blob, addr, _ = text_and_symbols(co.read_bytes())
        lines = len(disassemble(blob, addr))
        if lines * len("  0x00000000  s_nop 0\n") > PIPE_BUFFER_BOUND:
            break
    assert lines * len("  0x00000000  s_nop 0\n") > PIPE_BUFFER_BOUND, f"{co.name}: too little output to fill a pipe"
    proc = subprocess.Popen([*CMD, str(co)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    first = proc.stdout.read(100)                       # what `head -c 100` reads, then it goes away
    proc.stdout.close()
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=120)
    assert first, "no output before the pipe closed"
    assert rc != 0, "a closed pipe must not look like success"
    assert "Traceback" not in err and "broken pipe" in err and len(err.strip().splitlines()) == 1, err
