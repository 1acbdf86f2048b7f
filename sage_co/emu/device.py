"""The emulated device: a flat byte arena behind fake 64-bit virtual addresses, code-object modules, launch.

Memory model: every allocation lives in one numpy uint8 arena at VA = ARENA_VA + arena offset, 256-byte
aligned, with a guard gap after each allocation so that a small overrun lands in unallocated space (the
sanitizer reports any access outside every live allocation; without it, the access still has to stay inside
the arena). Freed space is reused first-fit.
"""
from __future__ import annotations

import bisect
import struct

import numpy as np

from sage_co import codeobj
from sage_co.emu import decode, executor
from sage_co.emu.state import ARENA_VA, EmuError

ALIGN = 256
GUARD = 4096                       # gap after each allocation
DISPATCH_PACKET_BYTES = 64
QUEUE_BYTES = 256


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


class Device:
    """A gfx1201 seen through numpy: alloc/write/read/free device memory, load code objects, launch kernels."""

    def __init__(self, capacity: int = 1 << 22):
        self.mem = np.zeros(_align(capacity, 4096), dtype=np.uint8)
        self.allocs: dict[int, int] = {}        # arena offset -> size, live allocations

    # ----------------------------------------------------------------------------------------------- memory
    def alloc(self, nbytes: int) -> int:
        if not isinstance(nbytes, (int, np.integer)) or nbytes <= 0:
            raise ValueError(f"alloc(nbytes={nbytes!r}): expected a positive int")
        nbytes = int(nbytes)
        off = self._find_gap(nbytes + GUARD)
        end = off + nbytes + GUARD
        if end > len(self.mem):
            grown = np.zeros(_align(max(end, 2 * len(self.mem)), 4096), dtype=np.uint8)
            grown[:len(self.mem)] = self.mem
            self.mem = grown
        self.mem[off:off + nbytes] = 0
        self.allocs[off] = nbytes
        return ARENA_VA + off

    def _find_gap(self, need: int) -> int:
        cursor = 0
        for off in sorted(self.allocs):
            if off - cursor >= need:
                return cursor
            cursor = _align(off + self.allocs[off] + GUARD, ALIGN)
        return cursor

    def free(self, addr: int) -> None:
        off = int(addr) - ARENA_VA
        if off not in self.allocs:
            raise ValueError(f"free(addr=0x{int(addr):x}): not the start of a live allocation")
        del self.allocs[off]

    def _range(self, addr: int, nbytes: int, what: str) -> int:
        off = int(addr) - ARENA_VA
        for start, size in self.allocs.items():
            if start <= off and off + nbytes <= start + size:
                return off
        raise ValueError(f"{what}(addr=0x{int(addr):x}, {nbytes} bytes): not inside one live allocation")

    def write(self, addr: int, data) -> None:
        buf = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8) if not isinstance(data, np.ndarray) \
            else np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        off = self._range(addr, len(buf), "write")
        self.mem[off:off + len(buf)] = buf

    def read(self, addr: int, nbytes: int) -> bytes:
        off = self._range(addr, int(nbytes), "read")
        return self.mem[off:off + int(nbytes)].tobytes()

    def live_ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """Sorted (starts, ends) of live allocations as arena offsets, for vectorized bounds checks."""
        offs = sorted(self.allocs)
        starts = np.array(offs, dtype=np.int64)
        ends = np.array([o + self.allocs[o] for o in offs], dtype=np.int64)
        return starts, ends

    # ----------------------------------------------------------------------------------------------- modules
    def load(self, co_bytes: bytes, name: str = "<bytes>") -> "Module":
        return Module(self, codeobj.read(co_bytes, name))


# hsa_kernel_dispatch_packet_t offsets (HSA runtime spec): setup @2, workgroup_size_x/y/z u16 @4/6/8,
# grid_size_x/y/z u32 @12/16/20 (in work-items), private/group segment size @24/28, kernel_object @32,
# kernarg_address @40.
def dispatch_packet(grid, block, group_bytes: int, private_bytes: int, kernarg_va: int) -> bytes:
    pkt = bytearray(DISPATCH_PACKET_BYTES)
    dims = 3 if grid[2] > 1 or block[2] > 1 else 2 if grid[1] > 1 or block[1] > 1 else 1
    struct.pack_into("<HHHHH", pkt, 0, 0, dims, *block)
    struct.pack_into("<III", pkt, 12, *(g * b for g, b in zip(grid, block)))
    struct.pack_into("<IIQQ", pkt, 24, private_bytes, group_bytes, 0, kernarg_va)
    return bytes(pkt)


# hidden argument values, filled the way the HIP runtime fills them (docs/rdna4.md §Entry, kernarg segment; clr
# hipamd/src/hip_platform / rocclr KernelBlitManager::setArgument for the implicit args).
def hidden_args(kind: str, grid, block, dynamic_lds: int = 0):
    dims = 3 if grid[2] > 1 or block[2] > 1 else 2 if grid[1] > 1 or block[1] > 1 else 1
    table = {
        "hidden_block_count_x": grid[0], "hidden_block_count_y": grid[1], "hidden_block_count_z": grid[2],
        "hidden_group_size_x": block[0], "hidden_group_size_y": block[1], "hidden_group_size_z": block[2],
        "hidden_remainder_x": 0, "hidden_remainder_y": 0, "hidden_remainder_z": 0,
        "hidden_grid_dims": dims,
        "hidden_global_offset_x": 0, "hidden_global_offset_y": 0, "hidden_global_offset_z": 0,
        "hidden_dynamic_lds_size": dynamic_lds,
        # pointers the HIP runtime would set to real runtime objects; no kernel of ours reads them. 0 makes a
        # read of them fault in the sanitizer instead of reading garbage.
        "hidden_hostcall_buffer": 0, "hidden_multigrid_sync_arg": 0, "hidden_heap_v1": 0,
        "hidden_default_queue": 0, "hidden_completion_action": 0, "hidden_queue_ptr": 0,
        "hidden_printf_buffer": 0, "hidden_none": 0, "hidden_private_base": 0, "hidden_shared_base": 0,
    }
    if kind not in table:
        raise EmuError(f"hidden kernel argument {kind!r} is not supported by the emulator")
    return table[kind]


class Module:
    """A loaded code object: decoded once, launched many times."""

    def __init__(self, device: Device, co):
        self.device, self.co = device, co
        self._insts: list | None = None
        self._offsets: list[int] | None = None
        self._templates: dict = {}      # decode's instructions by their bytes, shared by every kernel's range
        # kernel name -> its executor.Program, made at its first launch (tools and tests read the instruction list
        # a run's PC indices refer to; a test may seed one)
        self.programs: dict = {}

    @property
    def insts(self) -> list:
        """Every instruction of .text in decode order (ascending offsets), decoded on first use: a launch decodes
    only its kernel (range_insts); the shipped prepare code object holds ~30 kernels and ~200 K instructions."""
        if self._insts is None:
            self._insts = decode.decode(self.co.text, 0, self._templates)
        return self._insts

    @property
    def offsets(self) -> list[int]:
        """The .text offset of each of `insts` (ascending: executor.Program bisects it)."""
        if self._offsets is None:
            self._offsets = [i.offset for i in self.insts]
        return self._offsets

    def range_insts(self, start: int, end: int) -> list:
        """The instructions in [start, end) of .text, start on an instruction: a slice of `insts` once that is
    decoded, else only these bytes decoded (a kernel's symbol range: it ends where its last instruction does)."""
        if self._insts is None:
            try:
                return decode.decode(self.co.text[start:end], start, self._templates)
            except decode.DecodeError:
                pass                # not a range of whole instructions: decode all of .text and slice
        starts = self.offsets
        return self.insts[bisect.bisect_left(starts, start):bisect.bisect_left(starts, end)]

    @property
    def kernels(self):
        return self.co.kernels

    def _check_launch(self, k, grid, block, kernargs):
        for nm, v in (("grid", grid), ("block", block)):
            if len(v) != 3 or not all(isinstance(x, (int, np.integer)) and x > 0 for x in v):
                raise ValueError(f"launch({k.name!r}): {nm}={v!r}, expected three positive ints")
        threads = block[0] * block[1] * block[2]
        maxwg = int(k.metadata.get(".max_flat_workgroup_size", 1024))
        if threads > maxwg:
            raise ValueError(f"launch({k.name!r}): block={tuple(block)} has {threads} threads, more than the "
                             f"kernel's max_flat_workgroup_size {maxwg}")
        if block[0] > 1024 or block[1] > 1024 or block[2] > 1024:
            raise ValueError(f"launch({k.name!r}): block={tuple(block)}: each dimension must be <= 1024")
        if k.metadata.get(".wavefront_size", 32) != 32 or not k.descriptor.wavefront_size32:
            raise EmuError(f"kernel {k.name!r} is not wave32; the emulator runs gfx1201 wave32 only")
        explicit = k.explicit_args
        need = max((a[".offset"] + a[".size"] for a in explicit), default=0)
        if not isinstance(kernargs, (bytes, bytearray, memoryview)):
            raise TypeError(f"launch({k.name!r}): kernargs must be bytes, got {type(kernargs).__name__}")
        if len(kernargs) < need:
            raise ValueError(f"launch({k.name!r}): kernargs has {len(kernargs)} bytes, the explicit args need "
                             f"{need}")
        seg = int(k.metadata.get(".kernarg_segment_size", k.descriptor.kernarg_size))
        if len(kernargs) > max(seg, need):
            raise ValueError(f"launch({k.name!r}): kernargs has {len(kernargs)} bytes, more than the kernarg "
                             f"segment ({seg})")

    def kernarg_segment(self, k, grid, block, kernargs: bytes, dynamic_lds: int = 0) -> bytes:
        seg = max(int(k.metadata.get(".kernarg_segment_size", 0)), k.descriptor.kernarg_size, len(kernargs))
        buf = bytearray(seg)
        buf[:len(kernargs)] = kernargs
        for a in k.args:
            kind = str(a.get(".value_kind", ""))
            if not kind.startswith("hidden_"):
                continue
            val, off, size = hidden_args(kind, grid, block, dynamic_lds), a[".offset"], a[".size"]
            buf[off:off + size] = int(val).to_bytes(size, "little")
        return bytes(buf)

    def launch(self, kernel_name: str, grid=(1, 1, 1), block=(32, 1, 1), kernargs: bytes = b"", *,
               sanitize: bool = True, lds_race_check: bool = False, trace_wave=None, dynamic_lds: int = 0,
               progress=None):
        """Run kernel_name over grid x block. dynamic_lds: bytes of LDS the launch adds to the kernel's static
        group segment (hipModuleLaunchKernel's sharedMemBytes; `extern __shared__` arrays and Triton kernels live
        there); the kernel sees it in hidden_dynamic_lds_size and the dispatch packet. progress: None or
        callable(workgroups done, total), called after each batch of workgroups."""
        k = self.co.kernel(kernel_name)
        grid, block = tuple(int(x) for x in grid), tuple(int(x) for x in block)
        if isinstance(dynamic_lds, bool) or not isinstance(dynamic_lds, (int, np.integer)) or dynamic_lds < 0:
            raise ValueError(f"launch({kernel_name!r}): dynamic_lds={dynamic_lds!r}: expected a byte count >= 0")
        dynamic_lds = int(dynamic_lds)
        self._check_launch(k, grid, block, kernargs)
        dev = self.device
        seg = self.kernarg_segment(k, grid, block, bytes(kernargs), dynamic_lds)
        kva = dev.alloc(max(len(seg), 4))
        dev.write(kva, seg)
        extra = [kva]
        try:
            dva = qva = 0
            if k.descriptor.enable_sgpr_dispatch_ptr:
                dva = dev.alloc(DISPATCH_PACKET_BYTES)
                extra.append(dva)
                dev.write(dva, dispatch_packet(grid, block, k.descriptor.group_segment_fixed_size + dynamic_lds,
                                               k.descriptor.private_segment_fixed_size, kva))
            if k.descriptor.enable_sgpr_queue_ptr:
                qva = dev.alloc(QUEUE_BYTES)
                extra.append(qva)
            prog = self.programs.get(kernel_name)
            if prog is None:
                prog = self.programs[kernel_name] = executor.Program(self, k)
            return executor.run(prog, grid, block, kernarg_va=kva, dispatch_va=dva, queue_va=qva,
                                sanitize=sanitize, lds_race_check=lds_race_check, trace_wave=trace_wave,
                                dynamic_lds=dynamic_lds, progress=progress)
        finally:
            for va in extra:
                dev.free(va)
