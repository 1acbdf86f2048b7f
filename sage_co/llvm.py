"""The LLVM toolchain with gfx1201 support (clang >= 19 and ld.lld in one bin directory; no ROCm), found once for
every tool that needs it: build_asm.py (the shipped code objects), tools/gen_opcodes.py (the emulator's opcode table),
benchmarks/bench_emulator.py, the corpus rebuild scripts and the tests that compare with llvm-objdump. A kernel
author with an installed sage-co finds the same LLVM for their own code objects. Torch-free, runs nothing at import.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

MIN_CLANG = 19
LLVM_GUESSES = [f"/usr/lib/llvm-{v}/bin" for v in (22, 21, 20, 19)]


class LLVMNotFound(RuntimeError):
    """No usable LLVM: the message says where it looked and how to install one."""


@dataclass(frozen=True)
class LLVM:
    bin_dir: Path
    clang: Path
    lld: Path
    version: str                      # e.g. "22.1.8"

    def tool(self, name: str) -> Path:
        path = self.bin_dir / name
        if not path.exists():
            raise LLVMNotFound(f"{name} not found next to clang in {self.bin_dir}")
        return path


def _clang_version(clang: Path) -> str | None:
    try:
        out = subprocess.run([str(clang), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"clang version (\d+)\.(\d+)\.(\d+)", out)
    return ".".join(m.groups()) if m else None


def _llvm_in(bin_dir: Path) -> LLVM | None:
    clang, lld = bin_dir / "clang", bin_dir / "ld.lld"
    if not (clang.exists() and lld.exists()):
        return None
    version = _clang_version(clang)
    if version is None or int(version.split(".")[0]) < MIN_CLANG:
        return None
    return LLVM(bin_dir, clang, lld, version)


def find_llvm() -> LLVM:
    """SAGE_CO_LLVM=<bin dir> first, then clang/ld.lld on PATH, then /usr/lib/llvm-{22,21,20,19}/bin."""
    env = os.environ.get("SAGE_CO_LLVM")
    if env:
        found = _llvm_in(Path(env))
        if found is None:
            raise LLVMNotFound(f"SAGE_CO_LLVM={env} does not hold clang >= {MIN_CLANG} and ld.lld")
        return found
    candidates = []
    on_path = shutil.which("clang")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    candidates += [Path(p) for p in LLVM_GUESSES]
    for cand in candidates:
        found = _llvm_in(cand)
        if found is not None:
            return found
    raise LLVMNotFound(
        f"no LLVM with gfx1201 support found: need clang >= {MIN_CLANG} and ld.lld in one bin directory.\n"
        f"  looked at: SAGE_CO_LLVM (unset), PATH, {', '.join(LLVM_GUESSES)}\n"
        "  install on Debian/Ubuntu: apt-get install -y llvm-22 clang-22 lld-22\n"
        "  or point SAGE_CO_LLVM at the bin directory of such an LLVM")
