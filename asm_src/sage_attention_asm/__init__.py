"""The hand-scheduled SageAttention forward family (kernel "asm" of sage_attention_fwd), one job per module:

    config.py    constants (tile geometry, numerics bit patterns, limits), Config, FAMILY, kernarg loads
    stream.py    the WMMA stream: LDS fragment ring (Matrix) and the Weaver that interleaves VALU work
    state.py     KernelState: derived sizes, LDS map, VGPR/SGPR allocation of one Config
    prologue.py  kernargs, lane constants, scalar addressing, the first tile
    matmul.py    the QK^T and P.V (fp8 / fp16) WMMA streams of one tile
    softmax.py   scaling, row max, exp2 / row sum / P pack, masking, O rescale
    loop.py      K / V^T staging and one step of the key loop
    epilogue.py  1 / l, v_scale (+ v_mean), saturating bf16/fp16 output, LSE, stores
    kernel.py    AttentionKernel (the mixins above), its .s header and descriptor
    family.py    the family's .s header, build(cfg), build_family()

asm_src/gen_sage_attention_asm.py is the entry build_asm.py runs (asm_src/kernels.toml names it). Imports need no
path edits: build_asm.py runs the generator with asm_src/ (asmdsl) and the repository root (sage_co: the ABI and the
family declaration, torch-free) on PYTHONPATH; pytest adds both (pyproject.toml [tool.pytest.ini_options] pythonpath).
"""
from .config import FAMILY, Config
from .family import build, build_family, family_header
from .kernel import AttentionKernel

__all__ = ["FAMILY", "AttentionKernel", "Config", "build", "build_family", "family_header"]
