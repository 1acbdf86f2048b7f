"""The emulator backend: runs the real code object bytes in sage_co.emu on the CPU.

Tensor arguments are copied into emulator memory (one allocation each), the kernarg struct is packed with
the emulator addresses, the grid runs to completion, and every tensor argument the metadata does not
mark read_only is copied back into its torch tensor.

Concurrency: the emulator's memory is one numpy arena that is replaced by a larger copy when an allocation
does not fit, and a running kernel holds the arena it started with. So one lock serialises everything that
touches the device (allocations, copies, the launch itself and the copy-back): a call from another thread waits
instead of growing the arena under a running kernel (issue 11 item 1). The emulator is single-threaded Python,
so serialising costs no throughput.
"""
from __future__ import annotations

import threading

import torch


class EmuBackend:
    name = "emu"

    def __init__(self):
        from .. import emu  # imported lazily: `import sage_co` stays light
        self.emu = emu
        self.device = emu.Device()
        self.modules: dict[str, object] = {}     # sha256 -> loaded module
        self.history: list[tuple[str, object]] = []   # (symbol, run statistics) of every launch
        self.lock = threading.RLock()   # held for the whole of run(): the arena never moves under a kernel
        # progress(symbol, workgroups done, total) after each batch of workgroups, or None (the CLI sets it)
        self.progress = None

    def module(self, shipped, co):
        if shipped.sha256 not in self.modules:
            from .. import registry
            self.modules[shipped.sha256] = self.device.load(registry.load_bytes(shipped.file, shipped.sha256))
        return self.modules[shipped.sha256]

    def run(self, shipped, co, kernel, struct, grid, block, args, **launch_options):
        with self.lock:
            return self._run_locked(shipped, co, kernel, struct, grid, block, args, **launch_options)

    def _run_locked(self, shipped, co, kernel, struct, grid, block, args, **launch_options):
        # clang names HIP pointer parameters "<name>.coerce"; inputs the metadata marks read_only are not copied back
        read_only = {a.get(".name", "").removesuffix(".coerce") for a in kernel.explicit_args
                     if a.get(".actual_access") == "read_only"}
        allocations: dict[str, tuple[int, int]] = {}
        values = {}
        try:
            for name, value in args.items():
                if isinstance(value, torch.Tensor):
                    if value.device.type != "cpu":
                        raise ValueError(f"{shipped.symbol}: the emu backend takes CPU tensors; {name!r} is on {value.device}")
                    raw = value.reshape(-1).view(torch.uint8)
                    nbytes = raw.numel()
                    addr = self.device.alloc(max(nbytes, 4))
                    if nbytes:
                        self.device.write(addr, raw.numpy().tobytes())
                    allocations[name] = (addr, nbytes)
                    values[name] = addr
                else:
                    values[name] = value
            kernarg_bytes = struct.pack(values)
            if self.progress is not None and "progress" not in launch_options:
                report = self.progress
                launch_options["progress"] = lambda done, total: report(shipped.symbol, done, total)
            stats = self.module(shipped, co).launch(shipped.symbol, grid=grid, block=block, kernargs=kernarg_bytes,
                                                    **launch_options)
            for name, (addr, nbytes) in allocations.items():
                if nbytes and name not in read_only:
                    data = bytearray(self.device.read(addr, nbytes))
                    args[name].reshape(-1).view(torch.uint8).copy_(torch.frombuffer(data, dtype=torch.uint8))
            self.history.append((shipped.symbol, stats))
            return stats
        finally:
            for addr, _ in allocations.values():
                self.device.free(addr)
