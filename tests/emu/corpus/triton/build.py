"""Rebuild the Triton corpus (dev-only: needs `pip install triton`, no GPU):

    python tests/emu/corpus/triton/build.py

Every kernel of CORPUS is compiled ahead of time for GPUTarget("hip", "gfx1201", 32), once with LLVM's default
(real-true16 on gfx12) and once with `-real-true16`, into <name>[_t16off].co plus <name>[_t16off].json (kernel
symbol, num_warps, static LDS bytes, signature, constexprs, triton version). The tests load these files.

Line info is off (TRITON_DISABLE_LINE_INFO): the code objects carry no debug sections, so no path of the machine that
built them (the source directory, the site-packages of triton) is embedded."""
import json
import os
import sys
from pathlib import Path

os.environ["TRITON_DISABLE_LINE_INFO"] = "1"     # read by triton.knobs at import; see the docstring

import triton  # noqa: E402
import triton.backends.amd.compiler as amd_compiler  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

HERE = Path(__file__).resolve().parent
import kernels as K  # noqa: E402  (this script's folder is sys.path[0])

P32, F32, I32 = "*fp32", "fp32", "i32"
ATT = dict(S=None)
CORPUS = {
    # name: (fn, signature, constexprs, num_warps)
    "vector_add": (K.vector_add, {"x_ptr": P32, "y_ptr": P32, "out_ptr": P32, "n": I32}, {"BLOCK": 1024}, 4),
    "row_softmax": (K.row_softmax, {"x_ptr": P32, "out_ptr": P32, "n_cols": I32, "stride": I32}, {"BLOCK": 256}, 4),
    "layernorm_f16": (K.layernorm, {"x_ptr": "*fp16", "w_ptr": "*fp16", "b_ptr": "*fp16", "out_ptr": "*fp16",
                                    "n_cols": I32, "eps": F32}, {"BLOCK": 512}, 4),
    "gemm_f16": (K.gemm, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": P32, "M": I32, "N": I32, "K": I32},
                 {"BM": 64, "BN": 64, "BK": 32}, 4),
    "gemm_bf16": (K.gemm, {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": P32, "M": I32, "N": I32, "K": I32},
                  {"BM": 64, "BN": 64, "BK": 32}, 4),
    "gemm_i8": (K.gemm, {"a_ptr": "*i8", "b_ptr": "*i8", "c_ptr": "*i32", "M": I32, "N": I32, "K": I32},
                {"BM": 64, "BN": 64, "BK": 64}, 4),
    "gemm_fp8": (K.gemm, {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "c_ptr": P32, "M": I32, "N": I32, "K": I32},
                 {"BM": 64, "BN": 64, "BK": 64}, 4),
    "flash_attn_bf16": (K.flash_attn_fwd, {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*bf16",
                                           "S": I32, "sm_scale": F32}, {"D": 64, "BM": 64, "BN": 32}, 4),
    "sage_attn_i8_fp8": (K.sage_attn_fwd, {"q_ptr": "*i8", "k_ptr": "*i8", "v_ptr": "*fp8e4nv", "qs_ptr": P32,
                                           "ks_ptr": P32, "vs_ptr": P32, "o_ptr": "*bf16", "S": I32},
                         {"D": 64, "BM": 128, "BN": 64}, 8),
}
VARIANTS = {"": "", "_t16off": "target-features=-real-true16"}


_ASSEMBLE = amd_compiler.assemble_amdgcn


def _assembler(features: str):
    """Triton assembles its AMDGCN text with the default features; the -real-true16 code needs them too."""
    def assemble(src, arch, feats):
        return _ASSEMBLE(src, arch, ",".join(f for f in (feats, features) if f))
    return assemble


def build(name: str, variant: str) -> dict:
    fn, sig, const, warps = CORPUS[name]
    opts = {"num_warps": warps}
    if VARIANTS[variant]:
        opts["llvm_fn_attrs"] = VARIANTS[variant]
    amd_compiler.assemble_amdgcn = _assembler("-real-true16" if VARIANTS[variant] else "")
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const),
                       target=GPUTarget("hip", "gfx1201", 32), options=opts)
    (HERE / f"{name}{variant}.co").write_bytes(k.asm["hsaco"])
    meta = {"symbol": k.metadata.name, "num_warps": k.metadata.num_warps, "shared": k.metadata.shared,
            "signature": sig, "constexprs": const, "llvm_fn_attrs": VARIANTS[variant], "triton": triton.__version__}
    (HERE / f"{name}{variant}.json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def main(argv) -> int:
    names = argv or list(CORPUS)
    for name in names:
        for variant in VARIANTS:
            meta = build(name, variant)
            print(f"{name}{variant}: {meta['symbol']} warps={meta['num_warps']} lds={meta['shared']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
