"""Performance model of gfx1201 kernels on the Radeon AI PRO R9700 (maintainers' tool; every figure MODELED).

No RDNA4 GPU is reachable from any project machine, so speed is judged by this model, calibrated on peer kernels
with published gfx1201 timings (docs/performance.md). Entry point: `python tools/perf_model.py ...` (or
`python -m perfmodel` from tools/). One job per module, data flowing one way:

    isa          the one import point for instruction facts (class, reads/writes, access width)
    hardware     the R9700's figures (docs/rdna4.md), the one parameter set (Params), occupancy at workgroup granularity
    stream       code object -> disassembly -> main loop, per-iteration instruction mix
    issue        issue-bound cycles per key tile (the optimistic bound)
    simulate     latency-aware in-order multi-wave SIMD simulator of the loop
    emulated     counts and LDS bank conflicts from the emulator (launch()'s return value; one workgroup of any
                 code object)
    launch_model the calibrated model of one launch: occupancy, rounds, tails, L2/DRAM/scratch, clock
    calibration  the FlyDSL and gcnasm references, rank order, sensitivity
    attention    the shipped attention kernels' symbols and launch inputs
    restate      our kernels and the whole op re-stated next to FlyDSL's figures
    whatif       the asm kernel's geometry/schedule what-ifs
    hypotheses   the shipped kernel under each plausible rule set (TRANS rate, co-issue, VOPD): the lever that pays,
                 the best shipped schedule and its gap to the best lever combination
    sparse       block-sparse attention vs density, and the predictor kernels from their emulated counts
    synthetic    the synthetic BF16 flash-attention stream (simulator checks)
    report       the per-tile report of the shipped attention kernels (issue-bound and latency-aware bounds)
    refit        the parameters from a `sage-co selftest --perf` report (microbenchmarks on a gfx1201), old vs new
    cli          argument parsing
"""
from pathlib import Path

# The checkout the model reads code objects from (hsaco/). Imports need no path edits: `python tools/perf_model.py`
# puts tools/ first on sys.path, sage_co comes from the dev install (pip install -e .), and pytest adds the repository
# root, tools/ and asm_src/ (pyproject.toml [tool.pytest.ini_options] pythonpath).
ROOT = Path(__file__).resolve().parent.parent.parent
