"""What `sage-co tune` and `sage-co selftest --perf` run to choose the attention schedule (docs/gpu.md §Tuning).

On a gfx1201 (measure): each shipped schedule (sage_co.family.ATTENTION_SCHEDULES) runs the attention forward of the
default kernel at SHAPES, on inputs prepared on the device once per shape; each (schedule, shape) is timed with
HIP events made through the gpu backend's own binding on torch's current stream (sage_co.backends.timing
HipEventClock, sage_co.backends.timing.time_ms: 2 warm-up launches, then the median of 3 rounds of 5 launches). The
choice (choose, RULE): the smallest geometric mean over the shapes every schedule is built for; the default
schedule stays unless another one is faster by more than TIE. tuning.store() writes it for the device.

On the emulator (check_emulator): each schedule and shipped kernel runs once at EMU_SHAPE; per schedule the kernels
must be bitwise equal to each other and each within docs/numerics.md §Kernel vs model of
sage_co.reference.sage_attention_model with that schedule; the emulator has no clock, so nothing is timed and no
choice is written.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import family, registry, tuning

# (B, H, S, D): the video-model shapes of docs/performance.md's goal table (S = 1536, 4096 at D = 128) and one D = 64
SHAPES = ((1, 24, 1536, 128), (1, 24, 4096, 128), (1, 24, 4096, 64))
TIE = 0.01
RULE = (f"the smallest geometric mean, over the shapes every schedule is built for, of the HIP-event milliseconds "
        f"per attention launch; the default schedule ({family.DEFAULT_SCHEDULE!r}) stays unless another is more than "
        f"{TIE:.0%} faster")
# two batches, two heads, 200 tokens (not a multiple of 64), D = 128: every schedule against the model
EMU_SHAPE = (2, 2, 200, 128)
OUT_DTYPE, PV_DTYPE = "bf16", "fp8"


def shape_text(shape) -> str:
    B, H, S, D = shape
    return f"B={B} H={H} S={S} D={D}"


def symbol(schedule: str, D: int, kernel: str | None = None) -> str | None:
    """The symbol serving (kernel, D, bf16, fp8, schedule), None where that schedule is not built."""
    from .prepared import d_pad
    try:
        return registry.find("sage_attention_fwd", kernel, head_dim=d_pad(D), out_dtype=OUT_DTYPE, pv_dtype=PV_DTYPE,
                             schedule=schedule).symbol
    except LookupError:
        return None


def inputs(shape, device, seed: int = 0):
    """q, k, v bf16 [B, S, H, D] (NHD), randn, made on the CPU (the same values on every device) and moved."""
    import torch
    B, H, S, D = shape
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, S, H, D, generator=g).to(torch.bfloat16).to(device) for _ in range(3))


@dataclass
class Measurement:
    device: int
    identity: tuning.DeviceIdentity
    shapes: tuple
    ms: dict = field(default_factory=dict)        # schedule -> shape text -> ms per launch (None: not built)
    symbols: dict = field(default_factory=dict)   # schedule -> shape text -> symbol timed
    scores: dict = field(default_factory=dict)    # schedule -> geometric mean (ms) over the common shapes
    common: list = field(default_factory=list)    # the shapes every schedule is built for
    choice: str = ""

    def as_dict(self) -> dict:
        return {"device": self.device, "identity": self.identity.__dict__,
                "shapes": [shape_text(s) for s in self.shapes],
                "ms": self.ms, "symbols": self.symbols, "scores_ms": self.scores, "common_shapes": self.common,
                "choice": self.choice, "rule": RULE}


def choose(ms: dict, shapes: list[str]) -> tuple[str, dict, list]:
    """(choice, geometric mean per schedule, the shapes scored) by RULE from ms[schedule][shape]."""
    schedules = list(ms)
    common = [s for s in shapes if all(ms[sc].get(s) is not None for sc in schedules)]
    if not common:
        raise ValueError(f"no tuning shape is built for every schedule {schedules}: nothing to compare")
    scores = {sc: math.exp(sum(math.log(ms[sc][s]) for s in common) / len(common)) for sc in schedules}
    best = min(schedules, key=lambda sc: scores[sc])
    default = family.DEFAULT_SCHEDULE
    if default in scores and scores[default] <= scores[best] * (1 + TIE):
        best = default
    return best, scores, common


def measure(index: int, *, backend=None, shapes=None, echo=print) -> Measurement:
    """Time every shipped schedule at `shapes` on HIP device `index` of the gpu backend (default: the process's) and
    choose; stores nothing (tune / selftest call tuning.store with the result)."""
    from . import api
    from .callspec import FWD_KEYWORDS, SAGE_ATTENTION_FWD
    from .ops import attention
    from .plan import plan_call
    from .backends.timing import HipEventClock, time_ms
    if backend is None:
        from . import launch
        backend = launch.get_backend("gpu")
    shapes = SHAPES if shapes is None else shapes
    identity = tuning.device_identity(backend, index)
    m = Measurement(index, identity, tuple(shapes))
    clock = HipEventClock(backend, index)
    dev = backend.platform.tensor_device(index)
    m.ms = {sc: {} for sc in family.ATTENTION_SCHEDULES}
    m.symbols = {sc: {} for sc in family.ATTENTION_SCHEDULES}
    total, done = len(shapes) * len(family.ATTENTION_SCHEDULES), 0
    for shape in shapes:
        text = shape_text(shape)
        q, k, v = inputs(shape, dev)
        with backend.device_guard(index):
            prepared = api.sage_prepare(q, k, v, backend="gpu")
        for sc in family.ATTENTION_SCHEDULES:
            done += 1
            if symbol(sc, shape[3]) is None:
                m.ms[sc][text] = m.symbols[sc][text] = None
                echo(f"[{done}/{total}] {sc} at {text}: not built")
                continue
            o = SAGE_ATTENTION_FWD.bind({"backend": "gpu", "schedule": sc}, "sage_attention_fwd",
                                        allowed=FWD_KEYWORDS)
            rec = plan_call(SAGE_ATTENTION_FWD, (prepared,), o).attention
            ms = time_ms(lambda rec=rec, p=prepared: attention.execute(rec, p), index, clock=clock)
            m.ms[sc][text], m.symbols[sc][text] = ms, rec.kernel.symbol
            echo(f"[{done}/{total}] {sc} at {text}: {ms:.3f} ms ({rec.kernel.symbol})")
        del q, k, v, prepared
    m.choice, m.scores, m.common = choose(m.ms, [shape_text(s) for s in shapes])
    return m


def store(m: Measurement):
    """Write the measurement's choice for its device (tuning.store); returns the cache file's path."""
    return tuning.store(m.identity, m.choice, rule=RULE, scores_ms=m.scores, shapes=m.common)


def check_emulator(echo=print) -> list[dict]:
    """Every schedule and shipped attention kernel once on the emulator at EMU_SHAPE. Per schedule the kernels'
    outputs must be bitwise equal to each other (asm == HIP) and each within docs/numerics.md §Kernel vs model of
    reference.sage_attention_model(prepared, schedule=...) (accuracy.versus_model: relative L2, max abs, the fraction
    of elements not bitwise equal). Rows {schedule, kernel, symbol, rel_l2, different, same_as (the kernel it is
    bitwise equal to, or None), ok}; symbol None (and ok None) where the schedule is not built for that kernel."""
    import torch

    from . import accuracy, api, reference
    B, H, S, D = EMU_SHAPE
    q, k, v = inputs(EMU_SHAPE, "cpu")
    prepared = api.sage_prepare(q, k, v, backend="emu")
    kernels = sorted({kk.kernel for kk in registry.kernels() if kk.op == "sage_attention_fwd"})
    rows = []
    for sc in family.ATTENTION_SCHEDULES:
        model = reference.sage_attention_model(prepared, schedule=sc)
        first = None    # (kernel, output) of the first kernel built for this schedule
        for kernel in kernels:
            sym = symbol(sc, D, kernel)
            if sym is None:
                rows.append(dict(schedule=sc, kernel=kernel, symbol=None, ok=None))
                continue
            echo(f"emulator: {sc} ({kernel}) at {shape_text(EMU_SHAPE)}")
            out = api.sage_attention_fwd(prepared, backend="emu", kernel=kernel, schedule=sc)
            vm = accuracy.versus_model(out, model)
            same = None
            if first is None:
                first = (kernel, out)
            elif torch.equal(out.view(torch.int16), first[1].view(torch.int16)):
                same = first[0]
            rows.append(dict(schedule=sc, kernel=kernel, symbol=sym, rel_l2=vm["rel_l2"], different=vm["different"],
                             same_as=same, ok=vm["ok"] and (first[0] == kernel or same is not None)))
    return rows
