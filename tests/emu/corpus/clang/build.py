"""Rebuild the checked-in clang corpus code objects (dev-only; tests load the .co files and need no LLVM):

    python tests/emu/corpus/clang/build.py

Each `*.hip` here -> `<name>.co`, clang -O3 for gfx1201 (headers-free device-only HIP), with the repo's one LLVM
discovery (sage_co.llvm.find_llvm)."""
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
from sage_co.llvm import find_llvm  # noqa: E402

FLAGS = ["-x", "hip", "--offload-arch=gfx1201", "--cuda-device-only", "-nogpulib", "-nogpuinc",
         "--no-gpu-bundle-output", "-O3"]


def main() -> int:
    llvm = find_llvm()
    for src in sorted(HERE.glob("*.hip")):
        out = src.with_suffix(".co")
        subprocess.run([str(llvm.clang), *FLAGS, str(src), "-o", str(out)], check=True)
        print(f"{out.relative_to(HERE.parents[3])}: {out.stat().st_size} B (clang {llvm.version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
