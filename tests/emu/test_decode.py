"""Decoder/disassembler golden tests: every instruction of the assembly corpus, the gfx1201_min probes, a few
clang -O3 HIP kernels and every shipped hsaco/gfx1201/*.co must disassemble exactly as llvm-objdump prints it
(whitespace collapsed, `// address: words` comment dropped). LLVM is only used here, never by sage_co.emu."""
from __future__ import annotations
import io, os, re, subprocess, tempfile, time
from pathlib import Path

import pytest

from sage_co.emu.decode import DecodeError, decode, decode_at
from sage_co.emu.disasm import disassemble, text_and_symbols

LLVM = Path(os.environ.get('LLVM_BIN', '/usr/lib/llvm-22/bin'))
ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).parent / 'corpus'
PROBES = Path('/work/shared/examples/gfx1201_min/probes')
HSACO = ROOT / 'hsaco' / 'gfx1201'
needs_llvm = pytest.mark.skipif(not (LLVM / 'llvm-objdump').exists(), reason=f'LLVM 22 not found at {LLVM}')


def llvm_mc(src: Path, out: Path) -> None:
    """Assemble; lines llvm-mc rejects (some probes are deliberately invalid) are dropped first."""
    text = src.read_text().splitlines()
    while True:
        r = subprocess.run([LLVM / 'llvm-mc', '-triple=amdgcn-amd-amdhsa', '-mcpu=gfx1201', '-filetype=obj', '-o',
                            out, '-'], input='\n'.join(text) + '\n', capture_output=True, text=True)
        bad = {int(m.group(1)) for m in re.finditer(r'^<stdin>:(\d+):\d+: error', r.stderr, re.M)}
        if r.returncode == 0 and not bad: return
        assert bad, r.stderr
        text = [ln for i, ln in enumerate(text, 1) if i not in bad]


def hipcc(src: Path, out: Path) -> None:
    subprocess.run([LLVM / 'clang', '-x', 'hip', '--offload-arch=gfx1201', '--cuda-device-only', '-nogpulib',
                    '-nogpuinc', '--no-gpu-bundle-output', '-O3', '-c', src, '-o', out], check=True, capture_output=True)


def objdump_text(path: Path) -> list[tuple[int, str]]:
    """[(offset within .text, normalised text)] from llvm-objdump."""
    out = subprocess.run([LLVM / 'llvm-objdump', '-d', '--mcpu=gfx1201', path], check=True, capture_output=True,
                         text=True).stdout
    res = []
    for ln in out.splitlines():
        m = re.match(r'\s+(.*?)\s*// ([0-9A-F]+):', ln)
        if m: res.append((int(m.group(2), 16), ' '.join(m.group(1).split())))
    return res


def mine(path: Path) -> list[tuple[int, str]]:
    """Our disassembly of the whole .text (kernels plus s_code_end padding), offsets = addresses."""
    blob, addr, _ = text_and_symbols(path.read_bytes())
    return disassemble(blob, addr)


def compare(path: Path) -> tuple[int, set]:
    want = objdump_text(path)
    got = dict(mine(path))
    bad = [(hex(o), t, got.get(o)) for o, t in want if got.get(o) != t]
    assert not bad, f'{path.name}: {len(bad)} of {len(want)} differ, first: ' + '\n'.join(map(str, bad[:15]))
    return len(want), {t.split()[0] for _, t in want}


def build(kind: str, src: Path, tmp: Path) -> Path:
    out = tmp / (src.name + '.o')
    (llvm_mc if kind == 's' else hipcc)(src, out)
    return out


SOURCES = sorted(CORPUS.glob('*.s')) + sorted(CORPUS.glob('*.hip')) + \
    (sorted(PROBES.glob('*.s')) + sorted(PROBES.glob('*.hip')) if PROBES.exists() else [])


@needs_llvm
@pytest.mark.parametrize('src', SOURCES, ids=lambda p: p.parent.name + '/' + p.name)
def test_corpus_matches_objdump(src, tmp_path):
    n, _ = compare(build(src.suffix[1:], src, tmp_path))
    assert n > 0


@needs_llvm
@pytest.mark.parametrize('co', sorted(HSACO.glob('*.co')), ids=lambda p: p.name)
def test_shipped_code_objects_match_objdump(co):
    n, _ = compare(co)
    assert n > 0
