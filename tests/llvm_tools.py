"""The one LLVM discovery for all tests (build_asm.find_llvm: $SAGE_CO_LLVM, PATH, /usr/lib/llvm-*), a skip marker
for tests that need it, and the build helpers the tests share."""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

import build_asm  # noqa: E402  (the repository root is on sys.path: pyproject.toml [tool.pytest.ini_options] pythonpath)

try:
    LLVM = build_asm.find_llvm()
    WHY_NO_LLVM = ""
except build_asm.BuildError as exc:
    LLVM, WHY_NO_LLVM = None, str(exc).splitlines()[0]

needs_llvm = pytest.mark.skipif(LLVM is None, reason=f"no LLVM with gfx1201 support (clang >= 19 + ld.lld): {WHY_NO_LLVM}")
TARGET = ["--target=amdgcn-amd-amdhsa", "-mcpu=gfx1201"]


def tool(name: str) -> str:
    """Path of an LLVM tool (clang, ld.lld, llvm-mc, llvm-objdump) of the discovered LLVM."""
    if LLVM is None:
        pytest.skip(f"no LLVM: {WHY_NO_LLVM}")
    return str(LLVM.tool(name)) if name != "clang" else str(LLVM.clang)


def run(cmd) -> subprocess.CompletedProcess:
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if res.returncode:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed:\n{res.stderr}")
    return res


def assemble_co(src: Path, out_dir: Path, extra=()) -> bytes:
    """A .s file -> linked code object bytes (clang -c, ld.lld -shared)."""
    obj, co = out_dir / (src.stem + ".o"), out_dir / (src.stem + ".co")
    run([tool("clang"), *TARGET, "-c", *extra, src, "-o", obj])
    run([tool("ld.lld"), "-shared", obj, "-o", co])
    return co.read_bytes()


def hip_co(src: Path, out: Path, extra=("-O3",)) -> bytes:
    """A headers-free .hip file -> device code object bytes."""
    run([tool("clang"), "-x", "hip", "--offload-arch=gfx1201", "--cuda-device-only", "-nogpulib", "-nogpuinc",
         "--no-gpu-bundle-output", *extra, src, "-o", out])
    return out.read_bytes()


def assemble_text(asm: str, tmp: Path) -> bytes:
    """Instruction lines (no directives) -> their machine code (.text of an llvm-mc object)."""
    from sage_co.emu.disasm import text_and_symbols
    src, obj = tmp / "snippet.s", tmp / "snippet.o"
    src.write_text(asm + "\n")
    run([tool("llvm-mc"), "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx1201", "-filetype=obj", src, "-o", obj])
    return text_and_symbols(obj.read_bytes())[0]


def objdump(path: Path, *extra) -> str:
    return run([tool("llvm-objdump"), "-d", "--mcpu=gfx1201", *extra, path]).stdout


def objdump_listing(text: str) -> list[tuple[int, str]]:
    """(address, instruction text with whitespace collapsed) of every instruction line of llvm-objdump -d output."""
    lines = (re.match(r"\s+(.*?)\s*// ([0-9A-F]+):", ln) for ln in text.splitlines())
    return [(int(m.group(2), 16), " ".join(m.group(1).split())) for m in lines if m]


def decode_mismatches(path: Path, true16: bool = False) -> tuple[list[tuple[int, str]], list]:
    """sage_co.emu's disassembly of a code object against llvm-objdump's (in its real-true16 view with true16):
    (objdump's listing, [(address, objdump text, emulator text)] where they differ)."""
    from sage_co.emu.disasm import disassemble, text_and_symbols
    blob, addr, _ = text_and_symbols(Path(path).read_bytes())
    got = dict(disassemble(blob, addr, true16=true16))
    want = objdump_listing(objdump(path, *(["--mattr=+real-true16"] if true16 else [])))
    return want, [(hex(o), t, got.get(o)) for o, t in want if got.get(o) != t]


TOOLS_22 = ("clang", "llvm-mc", "ld.lld", "llvm-objdump")


def _why_no_llvm22() -> str:
    """Why a test that needs LLVM 22 itself cannot run ('' when it can): the mnemonics clang -O3 emits and
    llvm-objdump's text are LLVM 22's."""
    if LLVM is None:
        return f"needs LLVM 22 ({', '.join(TOOLS_22)}): {WHY_NO_LLVM}"
    if int(LLVM.version.split(".")[0]) < 22:
        return f"needs LLVM 22; the LLVM found (tests/llvm_tools.py) is clang {LLVM.version} in {LLVM.bin_dir}"
    missing = [t for t in TOOLS_22 if not (LLVM.bin_dir / t).exists()]
    return f"{', '.join(missing)} not next to clang in {LLVM.bin_dir}" if missing else ""


WHY_NO_LLVM22 = _why_no_llvm22()


def objdump_matches(path: Path) -> set[str]:
    """Assert that sage_co.emu disassembles every instruction of a code object as llvm-objdump prints it (whitespace
    collapsed); return the mnemonics llvm-objdump printed."""
    want, bad = decode_mismatches(path)
    assert want and not bad, bad[:10]
    return {t.split()[0] for _, t in want}
