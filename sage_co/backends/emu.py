"""The emulator backend: runs the real code object bytes in sage_co.emu on the CPU.

Tensor arguments are copied into emulator memory (one allocation each), the kernarg struct is packed with
the emulator addresses, the grid runs to completion, and every tensor argument the metadata does not
mark read_only is copied back into its torch tensor. Options: sanitize, lds_race_check, trace_wave, dynamic_lds
(bytes of LDS added to the kernel's static group segment, HIP's sharedMemBytes; sage_co.emu.Module.launch). run() returns the run's statistics; `history` keeps only the latest few.

Concurrency: the emulator's memory is one numpy arena that is replaced by a larger copy when an allocation
does not fit, and a running kernel holds the arena it started with. So one lock serialises everything that
touches the device (allocations, copies, the launch itself and the copy-back): a call from another thread waits
instead of growing the arena under a running kernel (issue 11 item 1). The emulator is single-threaded Python,
so serialising costs no throughput.
"""
from __future__ import annotations

import collections
import threading

import torch

from .base import KernelLaunch, emu_device_problem

HISTORY = 64   # (symbol, statistics) of the latest launches kept in EmuBackend.history


class EmuBackend:
    name = "emu"
    options = frozenset({"sanitize", "lds_race_check", "trace_wave", "dynamic_lds"})

    def __init__(self):
        from .. import emu  # imported lazily: `import sage_co` stays light
        self.emu = emu
        self.device = emu.Device()
        self.modules: dict[str, object] = {}     # sha256 -> loaded module
        self.history: collections.deque = collections.deque(maxlen=HISTORY)
        self.lock = threading.RLock()   # held for the whole of run(): the arena never moves under a kernel
        # progress(symbol, workgroups done, total) after each batch of workgroups, or None (the CLI sets it)
        self.progress = None

    @staticmethod
    def device_problem(tensor: torch.Tensor) -> str | None:
        return emu_device_problem(tensor)

    def module(self, shipped):
        if shipped.sha256 not in self.modules:
            from .. import registry
            self.modules[shipped.sha256] = self.device.load(registry.load_bytes(shipped.file, shipped.sha256))
        return self.modules[shipped.sha256]

    def warmup(self, plans, device=None) -> None:
        for p in plans:
            self.module(p.shipped)

    def run(self, kl: KernelLaunch):
        with self.lock:
            return self._run_locked(kl)

    def _run_locked(self, kl: KernelLaunch):
        p = kl.plan
        allocations: dict[str, tuple[int, int]] = {}
        values = dict(kl.values)
        try:
            for name, tensor in kl.tensors.items():
                if tensor.device.type != "cpu":
                    raise ValueError(f"{p.symbol}: the emu backend takes CPU tensors; {name!r} is on {tensor.device}")
                raw = tensor.reshape(-1).view(torch.uint8)
                nbytes = raw.numel()
                addr = self.device.alloc(max(nbytes, 4))
                if nbytes:
                    self.device.write(addr, raw.numpy().tobytes())
                allocations[name] = (addr, nbytes)
                values[name] = addr
            kl.kernarg_bytes = p.packer.pack(values)
            kl.addresses = {name: addr for name, (addr, _) in allocations.items()}
            options = dict(kl.options)
            if self.progress is not None and "progress" not in options:
                report = self.progress
                options["progress"] = lambda done, total: report(p.symbol, done, total)
            stats = self.module(p.shipped).launch(p.symbol, grid=kl.grid, block=kl.block, kernargs=kl.kernarg_bytes,
                                                  **options)
            for name, (addr, nbytes) in allocations.items():
                if nbytes and name not in p.read_only:
                    data = bytearray(self.device.read(addr, nbytes))
                    kl.tensors[name].reshape(-1).view(torch.uint8).copy_(torch.frombuffer(data, dtype=torch.uint8))
            self.history.append((p.symbol, stats))
            return stats
        finally:
            for addr, _ in allocations.values():
                self.device.free(addr)
