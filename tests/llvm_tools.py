"""The repo's build tools for tests: build_asm (LLVM discovery), and a skip marker for tests that need LLVM."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "tools"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import build_asm  # noqa: E402

try:
    LLVM = build_asm.find_llvm()
    WHY_NO_LLVM = ""
except build_asm.BuildError as exc:
    LLVM, WHY_NO_LLVM = None, str(exc).splitlines()[0]

needs_llvm = pytest.mark.skipif(LLVM is None, reason=f"no LLVM with gfx1201 support (clang >= 19 + ld.lld): {WHY_NO_LLVM}")
