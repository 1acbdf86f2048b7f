#!/usr/bin/env python3
"""Generator of the hand-scheduled SageAttention forward kernels (kernel "asm" of sage_attention_fwd).

`python gen_sage_attention_asm.py` prints the assembly of the whole family (build_asm.py assembles it and
commits the text as asm_src/gfx1201_sage_attention_asm.s). `build(cfg)` returns the assembly of one kernel
symbol for one `Config`; `build_family()` the code object with every shipped variant. Each kernel computes
exactly what asm_src/gfx1201_sage_attention.hip computes, with the same kernarg struct (sage_co/abi.py) and
launch geometry, in the same per-row operation order (bitwise equal output on the emulator); what differs is
the schedule. The header of the emitted .s (family_header and variant_header, filled from the constants) documents layout,
registers and schedule.

The generator lives in the package asm_src/sage_attention_asm/ (one module per stage of the kernel: see its
__init__); this file is the entry that asm_src/kernels.toml names and build_asm.py runs.
"""
from __future__ import annotations

import sys

from sage_attention_asm import FAMILY, AttentionKernel, Config, build, build_family, family_header
from sage_attention_asm.config import KARG_SGPR, VGPR_LIMIT, kernarg_loads, log2

__all__ = ["FAMILY", "KARG_SGPR", "VGPR_LIMIT", "AttentionKernel", "Config", "build", "build_family", "family_header",
           "kernarg_loads", "log2"]

if __name__ == "__main__":
    sys.stdout.write(build_family())
