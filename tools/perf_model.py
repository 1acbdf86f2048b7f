#!/usr/bin/env python3
"""Performance model of gfx1201 kernels (maintainers' tool): the entry point of the tools/perfmodel package.

    python tools/perf_model.py                 # shipped HIP and asm attention kernels side by side
    python tools/perf_model.py --co X.co --symbol NAME --grid X,Y,Z --block N [--dynamic-lds BYTES]
        [--arg NAME=VALUE ...] [--trip-count N] --flops F --peak {int8,fp8,bf16,fp16} [--json]
    python tools/perf_model.py --calibration [DIR]   # the FlyDSL references, published vs modeled

Every figure is MODELED (docs/performance.md); `python tools/perf_model.py --help` lists every option.
"""
import sys

from perfmodel.cli import main  # this script's folder (tools/) is sys.path[0]
from perfmodel.isa import classify  # noqa: F401  (the model's one classification, checked by tests/emu/test_facts.py)

if __name__ == "__main__":
    sys.exit(main())
