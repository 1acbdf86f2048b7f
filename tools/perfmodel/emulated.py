"""Counts from the emulator (sage_co.emu runs the real bytes): the steady-state mix of the shipped attention kernels
from launch()'s return value, and one workgroup of any code object with per-instruction counts and the LDS bank
conflicts of the addresses it really accessed."""
from __future__ import annotations

import struct
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from perfmodel.attention import attention_inputs, attention_symbol
from perfmodel.hardware import LANES, LDS_BANKS
from perfmodel.isa import CLASSES, classify
from perfmodel.stream import KEY_TILE, PAD, KernelModel, Mix

EMU_SEQ = (1024, 2048)   # key tiles 16..32 of each wave: the O rescale already rare, as at large S
DEFAULT_BUFFER_BYTES = 16 << 20   # an emulated pointer argument's buffer unless --arg NAME=BYTES says otherwise


def mix_from_stats(small: dict, large: dict, tiles_small: float, tiles_large: float, waves_small: int,
                   waves_large: int, static: Mix) -> Mix:
    """Steady-state mix per key tile from two emulator runs: the per-wave count difference over the tile
    difference (prologue, epilogue and the last tile cancel). Per-instruction widths and WMMA cycles come
    from the static loop mix (Stats count instructions, not bytes)."""
    missing = [c for c in CLASSES if c not in small or c not in large]
    if missing:
        raise KeyError(f"emulator Stats lack instruction classes {missing}")
    if tiles_large <= tiles_small:
        raise ValueError("the larger run must have more key tiles per wave")
    mix = Mix(source=f"dynamic: emulator, per-wave count difference between two runs / {tiles_large - tiles_small} "
                     f"key tiles")
    for c in CLASSES:
        per_wave = large[c] / waves_large - small[c] / waves_small
        setattr(mix, c, per_wave / (tiles_large - tiles_small))
    _scale_side_figures(mix, static)
    return mix


def _scale_side_figures(mix: Mix, static: Mix) -> None:
    """Dynamic counts carry no cycles/bytes/VOPD share: take them per instruction from the static loop (the same
    instructions run, only their counts differ)."""
    def ratio(num, den):
        return num / den if den else 0.0
    mix.wmma_cycles = mix.WMMA * ratio(static.wmma_cycles, static.WMMA)
    mix.wmma_ops = mix.WMMA * ratio(static.wmma_ops, static.WMMA)
    mix.vopd = mix.VALU * ratio(static.vopd, static.VALU)
    mix.lds_bytes = mix.LDS * ratio(static.lds_bytes, static.LDS)
    mix.load_bytes = mix.VMEM_LOAD * ratio(static.load_bytes, static.VMEM_LOAD)
    mix.store_bytes = mix.VMEM_STORE * ratio(static.store_bytes, static.VMEM_STORE)


def attention_stats(variant: str, S: int, pv_dtype: str = "fp8") -> dict:
    """Emulator statistics of one shipped attention launch at B = H = 1, S keys: launch()'s return value.
    Arguments by name for whichever attention kernarg layout sage_co.abi declares (restate.attention_inputs)."""
    import torch
    from sage_co import abi
    from sage_co.launch import launch
    struct = abi.struct_for(abi.ATTENTION_OP)
    values = attention_inputs(S, pv_dtype=pv_dtype)
    args = {}
    for f in struct.fields:
        v = values[f.name]
        args[f.name] = torch.zeros(v, dtype=torch.uint8) if f.kind == "ptr" and isinstance(v, int) else v
    S_pad = values["seq_pad"]
    grid = (S_pad // abi.QUERY_TILE, 1, 1)
    return launch(attention_symbol(variant, pv_dtype=pv_dtype), struct, grid, abi.ATTENTION_BLOCK, args, backend="emu")


def emulator_mix(km: KernelModel, variant: str, seqs=EMU_SEQ, pv_dtype: str = "fp8") -> Mix:
    """Run the variant on the emulator at two sequence lengths; raises when the emulator cannot run it."""
    runs = []
    for S in seqs:
        if S % PAD:
            raise ValueError(f"emulator sequence lengths must be multiples of {PAD} (no tail tile), got {S}")
        runs.append((S, attention_stats(variant, S, pv_dtype)))
    (s0, st0), (s1, st1) = runs
    # per 64-key tile (the emulator counts whole iterations; S is a multiple of keys_per_iter in both runs)
    if s0 % km.keys_per_iter or s1 % km.keys_per_iter:
        raise ValueError(f"emulator sequence lengths must be multiples of {km.keys_per_iter} keys per iteration")
    return mix_from_stats(st0, st1, s0 / KEY_TILE, s1 / KEY_TILE, st0["waves"], st1["waves"], km.static)


# ------------------------------------------------------------------------------------------- one workgroup
def lds_passes(addr: np.ndarray, active: np.ndarray, nbytes: int) -> int:
    """LDS passes of one wave's access (docs/rdna4.md §Memory): 32 dword banks; a pass serves as many lanes as
    move 32 dwords (b32 and narrower: 32 lanes, b64: 16, b128: 8); within a pass a bank serves one distinct
    dword per clock (lanes reading the same dword share it), so a pass costs its largest bank multiplicity."""
    dwords = max(1, -(-nbytes // 4))
    lanes = max(1, LANES // dwords)
    total = 0
    for g in range(0, LANES, lanes):
        a = addr[g:g + lanes][active[g:g + lanes]]
        if not len(a):
            continue
        words = np.unique(np.concatenate([a // 4 + i for i in range(dwords)]))
        total += int(np.bincount(words % LDS_BANKS, minlength=LDS_BANKS).max())
    return total


@dataclass
class WorkgroupRun:
    """One emulated workgroup: wave-instruction counts and LDS passes per instruction address (objdump numbering)."""
    waves: int
    counts: dict[int, int]                              # address -> wave-instructions executed
    lds_passes: dict[int, float]                        # address -> mean passes per wave-execution
    stats: dict = field(default_factory=dict)

    def per_wave(self, addr: int) -> float:
        return self.counts.get(addr, 0) / self.waves


@contextmanager
def _observe_lds(record):
    """Observe every LDS access of the emulator (memory_ops._lds_index sees each wave's lane addresses).
    The emulator has no public observer yet (NOTES.md); this wraps its one LDS address function."""
    from sage_co.emu import memory_ops
    inner = memory_ops._lds_index

    def observed(st, pc, sel, m, addr, nbytes, what, write):
        record(pc, np.asarray(addr), np.asarray(m), nbytes)
        return inner(st, pc, sel, m, addr, nbytes, what, write)
    memory_ops._lds_index = observed
    try:
        yield
    finally:
        memory_ops._lds_index = inner


def arg_names(kernel) -> list[str]:
    """Names of the explicit kernel arguments: the metadata's .name (clang's ".coerce" suffix dropped), or argN
    (N = position among the explicit arguments) where the compiler wrote none."""
    return [a.get(".name", "").removesuffix(".coerce") or f"arg{i}" for i, a in enumerate(kernel.explicit_args)]


def pack_kernargs(kernel, values: dict) -> tuple[bytes, list[str]]:
    """Explicit kernargs from the metadata: pointers take `values[name]` (an address), by-value arguments an int.
    Returns (bytes, names of pointer arguments)."""
    out = bytearray(max((a[".offset"] + a[".size"] for a in kernel.explicit_args), default=0))
    pointers = []
    for name, a in zip(arg_names(kernel), kernel.explicit_args):
        if name not in values:
            raise ValueError(f"--arg {name}=VALUE: kernel argument {name!r} ({a['.value_kind']}, {a['.size']} B) "
                             "has no value")
        v = int(values[name])
        if a[".value_kind"] == "global_buffer":
            pointers.append(name)
        fmt = {1: "<b", 2: "<h", 4: "<i", 8: "<q"}.get(a[".size"])
        if fmt is None:
            raise ValueError(f"kernel argument {name!r}: {a['.size']}-byte by-value arguments are not supported")
        if a[".value_kind"] == "global_buffer" or v >= 1 << (8 * a[".size"] - 1):
            fmt = fmt.upper()
        struct.pack_into(fmt, out, a[".offset"], v)
    return bytes(out), pointers


def emulate_workgroup(path: Path, symbol: str, block: int, args: dict[str, int], text_addr: int,
                      dynamic_lds: int = 0) -> WorkgroupRun:
    """Run the first workgroup (grid 1,1,1) of `symbol` at the given by-value arguments. A pointer argument gets a
    zeroed buffer of args[name] bytes (DEFAULT_BUFFER_BYTES when absent), or args[name] itself when it is bytes
    (real data: data-dependent branches, such as an attention kernel's O rescale, then run as often as they would;
    on zeroed buffers they take their zero-input path)."""
    from sage_co import codeobj
    from sage_co.emu import Device
    co = codeobj.read_file(path)
    kernel = co.kernel(symbol)
    dev = Device(1 << 24)
    mod = dev.load(Path(path).read_bytes(), str(path))
    values = {n: v for n, v in args.items() if not isinstance(v, (bytes, bytearray))}
    unknown = sorted(set(args) - set(arg_names(kernel)))
    if unknown:
        raise ValueError(f"--arg: {unknown} are not arguments of {symbol} (its arguments: {arg_names(kernel)})")
    ptr_names = [n for n, a in zip(arg_names(kernel), kernel.explicit_args) if a[".value_kind"] == "global_buffer"]
    for name in ptr_names:
        data = args.get(name, DEFAULT_BUFFER_BYTES)
        if isinstance(data, (bytes, bytearray)):
            values[name] = dev.alloc(max(4, len(data)))
            dev.write(values[name], bytes(data))
        else:
            values[name] = dev.alloc(int(data))
    kernargs, _ = pack_kernargs(kernel, values)
    passes: dict[int, list[int]] = {}

    def record(pc, addr, m, nbytes):
        acc = passes.setdefault(pc, [0, 0])
        for w in range(addr.shape[0]):
            acc[0] += lds_passes(addr[w], m[w].astype(bool), nbytes)
            acc[1] += 1
    with _observe_lds(record):
        stats = mod.launch(symbol, grid=(1, 1, 1), block=(block, 1, 1), kernargs=kernargs,
                           **({"dynamic_lds": dynamic_lds} if dynamic_lds else {}))
    prog = mod._programs[symbol]                        # per-PC wave-instruction counts of this launch
    counts = {text_addr + i.offset: int(prog.exec_count[n]) for n, i in enumerate(prog.insts) if prog.exec_count[n]}
    # a 2addr access calls the address function once per address: passes per wave-execution add up
    execs = {text_addr + prog.insts[pc].offset: counts.get(text_addr + prog.insts[pc].offset, 0) for pc in passes}
    lds = {text_addr + prog.insts[pc].offset: tot / max(1, execs[text_addr + prog.insts[pc].offset])
           for pc, (tot, _) in passes.items()}
    return WorkgroupRun(int(stats["waves"]), counts, lds, dict(stats))


def dynamic_iteration_mix(km: KernelModel, run: WorkgroupRun) -> tuple[Mix, float]:
    """(mix per loop iteration of one wave, iterations per wave) from one emulated workgroup's per-PC counts."""
    trips = run.per_wave(km.loop.head)
    if trips <= 0:
        raise ValueError(f"{km.symbol}: the emulated workgroup never reached the main loop at 0x{km.loop.head:x}")
    mix = Mix(source=f"dynamic: one emulated workgroup, {trips:g} iterations per wave")
    static = km.static_iter
    for ins in km.insts:
        if km.loop.contains(ins.addr) and ins.addr in run.counts:
            c = classify(ins.mnemonic)
            setattr(mix, c, getattr(mix, c) + run.per_wave(ins.addr) / trips)
    _scale_side_figures(mix, static)
    return mix, trips
