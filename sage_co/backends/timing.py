"""Time a stage the way its backend runs: HIP events on the GPU (launches only enqueue, so host time would
measure the enqueue), the host clock on the emulator (which runs to completion)."""
from __future__ import annotations

import contextlib
import statistics
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


class HipEventClock:
    """HIP events made and recorded through the gpu backend's own binding (hipEventCreate / hipEventRecord on torch's
    current stream of HIP device `index` / hipEventSynchronize / hipEventElapsedTime / hipEventDestroy): what
    torch.cuda.Event does on ROCm, on the runtime the launches go to. A clock of time_ms (below)."""

    def __init__(self, backend, index: int):
        self.backend, self.index = backend, index

    def device(self):
        return self.backend.device_guard(self.index)

    def event(self) -> "_HipEvent":
        return _HipEvent(self.backend, self.index)


class _HipEvent:
    def __init__(self, backend, index: int):
        self.backend, self.index = backend, index
        self.handle = backend._call("hipEventCreate")

    def record(self) -> None:
        self.backend._call("hipEventRecord", self.handle, self.backend._stream(self.index))

    def synchronize(self) -> None:
        self.backend._call("hipEventSynchronize", self.handle, fault_note=True)

    def elapsed_time(self, end: "_HipEvent") -> float:
        """Milliseconds from this event to `end`."""
        return float(self.backend._call("hipEventElapsedTime", self.handle, end.handle))

    def close(self) -> None:
        if self.handle is not None:
            handle, self.handle = self.handle, None
            self.backend._call("hipEventDestroy", handle)


def time_ms(fn, device: int, warmup: int = 2, iters: int = 5, rounds: int = 3, clock=None) -> float:
    """Median over rounds of HIP-event milliseconds per call of fn (iters calls per round) on the device's current
    stream, after `warmup` calls (module loads, clocks ramping). clock: where the events come from (default torch's,
    torch.cuda.Event on ROCm; HipEventClock: the gpu backend's binding), an object with
    device() (a context manager making the device current) and event() (record(), synchronize(),
    elapsed_time(other) in ms, close())."""
    clock = clock if clock is not None else TorchClock(device)
    with clock.device():
        for _ in range(warmup):
            fn()
        start, end = clock.event(), clock.event()
        times = []
        try:
            for _ in range(rounds):
                start.record()
                for _ in range(iters):
                    fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / iters)
        finally:
            start.close()
            end.close()
    return statistics.median(times)


class TorchClock:
    """time_ms's default clock: torch.cuda.Event (HIP events on ROCm) on the current stream of `device`."""

    def __init__(self, device: int):
        self.index = device

    def device(self):
        import torch
        return torch.cuda.device(self.index)

    @staticmethod
    def event():
        import torch
        event = torch.cuda.Event(enable_timing=True)
        event.close = lambda: None     # torch destroys its events itself
        return event
