"""Time a stage the way its backend runs: HIP events on the GPU (launches only enqueue, so host time would
measure the enqueue), the host clock on the emulator (which runs to completion)."""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass


@dataclass
class StageTime:
    seconds: float = 0.0
    clock: str = ""


@contextlib.contextmanager
def stage(backend: str, device=None):
    """with stage("gpu") as t: ...  ->  t.seconds after the block (the GPU work enqueued inside it, measured with
    torch.cuda.Event on the current stream of `device`, synchronized at the end)."""
    t = StageTime()
    if backend == "gpu":
        import torch
        with torch.cuda.device(device if device is not None else torch.cuda.current_device()):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield t
            end.record()
            end.synchronize()
            t.seconds, t.clock = start.elapsed_time(end) / 1e3, "HIP events"
    else:
        t0 = time.perf_counter()
        yield t
        t.seconds, t.clock = time.perf_counter() - t0, "host clock"
