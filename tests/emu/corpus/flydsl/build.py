"""Rebuild the FlyDSL corpus code objects: `python tests/emu/corpus/flydsl/build.py` (needs `pip install flydsl` and
torch; no GPU, no ROCm).

FlyDSL compiles ahead of time with COMPILE_ONLY=1 for ARCH=gfx1201; with FLYDSL_DUMP_IR=1 its final MLIR stage
(`*_gpu_module_to_binary.mlir`) holds the code object as the `bin = "..."` string of the `gpu.binary` op, which is
decoded here into `<name>.co`. Linking needs an `ld.lld` under `$ROCM_PATH/llvm/bin`: a temporary ROCM_PATH whose
llvm/bin is LLVM 22's bin directory is made when ROCM_PATH is not set.

One deviation from FlyDSL's defaults, on purpose: the ROCDL target gets `features=-real-true16`. FlyDSL 0.5.0's
LLVM selects gfx12 true16 VOP1/VOP2 forms (`v_mov_b16 v12.l, ...`) by default; sage_co.emu does not decode those
(docs/emulator.md §Not implemented) and llvm-objdump without `-mattr=+real-true16` prints them as `.long`.

manifest.json records, per code object: kernel symbol, launch grid/block, the kernargs in order (pointer or i32)
and the problem the test runs; the flydsl version and these build settings.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LLVM_BIN = Path(os.environ.get("LLVM_BIN", "/usr/lib/llvm-22/bin"))

# name -> builder in kernels.py and its compile-time parameters, the tensors / i32 scalars the launcher is called with,
# the kernargs in order, and the launch geometry
CORPUS = {
    "wmma_gemm_64x64x64": dict(builder="wmma_gemm", params=dict(M=64, N=64, K=64),
                               tensors=[("A", [64, 64], "float16"), ("Bt", [64, 64], "float16"),
                                        ("C", [64, 64], "float32")], ints=[],
                               kernargs=["A", "Bt", "C"], grid=[2, 2, 1], block=[128, 1, 1]),
    "wmma_gemm_32x64x128": dict(builder="wmma_gemm", params=dict(M=32, N=64, K=128, waves_m=1, waves_n=2),
                                tensors=[("A", [32, 128], "float16"), ("Bt", [64, 128], "float16"),
                                         ("C", [32, 64], "float32")], ints=[],
                                kernargs=["A", "Bt", "C"], grid=[2, 2, 1], block=[64, 1, 1]),
    "wmma_gemm_bf16_32x32x64": dict(builder="wmma_gemm", params=dict(M=32, N=32, K=64, dtype="bf16"),
                                    tensors=[("A", [32, 64], "bfloat16"), ("Bt", [32, 64], "bfloat16"),
                                             ("C", [32, 32], "float32")], ints=[],
                                    kernargs=["A", "Bt", "C"], grid=[1, 1, 1], block=[128, 1, 1]),
    "wmma_attn_d16": dict(builder="wmma_attention", params=dict(S_q=32, S_kv=48, D=16),
                          tensors=[("Q", [32, 16], "float16"), ("K", [48, 16], "float16"),
                                   ("V", [48, 16], "float32"), ("O", [32, 16], "float32")],
                          ints=[("n_kv_tiles", 3), ("head_dim", 16)],
                          kernargs=["Q", "K", "V", "O", "n_kv_tiles", "head_dim"], grid=[2, 1, 1], block=[32, 1, 1]),
    "attn_loop_d16": dict(builder="online_softmax_attention", params=dict(S_q=64, S_kv=40, D=16),
                          tensors=[("Q", [64, 16], "float32"), ("K", [40, 16], "float32"),
                                   ("V", [40, 16], "float32"), ("O", [64, 16], "float32")],
                          ints=[("n_kv", 40), ("head_dim", 16)],
                          kernargs=["Q", "K", "V", "O", "n_kv", "head_dim"], grid=[2, 1, 1], block=[32, 1, 1]),
}


def decode_mlir_string(s: str) -> bytes:
    """MLIR string literal body -> bytes (llvm::printEscapedString: \\\\ is a backslash, \\XX a hex byte, other
    characters stand for themselves)."""
    out, i = bytearray(), 0
    while i < len(s):
        if s[i] == "\\" and s[i + 1] == "\\":
            out.append(0x5C)
            i += 2
        elif s[i] == "\\":
            out.append(int(s[i + 1:i + 3], 16))
            i += 3
        else:
            out += s[i].encode("latin-1")
            i += 1
    return bytes(out)


def code_object_from_dump(dump: Path) -> tuple[bytes, str]:
    """(code object, kernel symbol) from FlyDSL's IR dump directory of one kernel."""
    stage = sorted(dump.glob("*_gpu_module_to_binary.mlir"))
    if len(stage) != 1:
        raise SystemExit(f"{dump}: expected one *_gpu_module_to_binary.mlir, found {len(stage)}")
    text = stage[0].read_text()
    m = re.search(r'bin = "((?:[^"\\]|\\.)*)"', text, re.S)
    k = re.search(r'kernel_metadata<"([^"]+)"', text)
    if not m or not k:
        raise SystemExit(f"{stage[0]}: no gpu.binary bin string / kernel name")
    co = decode_mlir_string(m.group(1))
    if co[:4] != b"\x7fELF":
        raise SystemExit(f"{stage[0]}: the binary is not an ELF code object")
    return co, k.group(1)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="flydsl_build_"))
    if "ROCM_PATH" not in os.environ:
        (work / "rocm" / "llvm").mkdir(parents=True)
        (work / "rocm" / "llvm" / "bin").symlink_to(LLVM_BIN)
        os.environ["ROCM_PATH"] = str(work / "rocm")
    os.environ.update(COMPILE_ONLY="1", ARCH="gfx1201", FLYDSL_GPU_ARCH="gfx1201", FLYDSL_DUMP_IR="1")
    import flydsl
    import torch
    from flydsl.compiler.backends import rocm as rocm_backend

    parts = rocm_backend.RocmBackend._pipeline_parts

    def no_true16(self, *, compile_hints):
        pre, binary = parts(self, compile_hints=compile_hints)
        pre = [f.replace("features= ", "features=-real-true16 ") for f in pre]
        if not any("features=-real-true16" in f for f in pre):
            raise SystemExit("could not set features=-real-true16 on rocdl-attach-target (FlyDSL pipeline changed)")
        return pre, binary
    rocm_backend.RocmBackend._pipeline_parts = no_true16

    import kernels  # this script's folder is sys.path[0]

    manifest = {"flydsl_version": flydsl.__version__, "arch": "gfx1201",
                "rocdl_features": "-real-true16", "kernels": {}}
    for name, spec in CORPUS.items():
        dump = work / name
        os.environ["FLYDSL_DUMP_DIR"] = str(dump)
        launch, _ = getattr(kernels, spec["builder"])(**spec["params"])
        tensors = [torch.zeros(shape, dtype=getattr(torch, dt)) for _, shape, dt in spec["tensors"]]
        launch(*tensors, *[v for _, v in spec["ints"]])
        dirs = [d for d in dump.iterdir() if d.is_dir()]
        if len(dirs) != 1:
            raise SystemExit(f"{name}: expected one kernel dump under {dump}, found {dirs}")
        co, symbol = code_object_from_dump(dirs[0])
        (HERE / f"{name}.co").write_bytes(co)
        manifest["kernels"][name] = dict(file=f"{name}.co", symbol=symbol, builder=spec["builder"],
                                         params=spec["params"], tensors=spec["tensors"], ints=spec["ints"],
                                         kernargs=spec["kernargs"], grid=spec["grid"], block=spec["block"])
        print(f"{name}: {len(co)} bytes, kernel {symbol}")
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
