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


def attention_stats(kernel: str, S: int, pv_dtype: str = "fp8") -> dict:
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
    return launch(attention_symbol(kernel, pv_dtype=pv_dtype), struct, grid, abi.ATTENTION_BLOCK, args, backend="emu")


def emulator_mix(km: KernelModel, kernel: str, seqs=EMU_SEQ, pv_dtype: str = "fp8") -> tuple[Mix, frozenset[int]]:
    """Run the kernel on the emulator at two sequence lengths: (steady-state mix per 64-key tile, the addresses
    either run executed: KernelModel.executed, which keeps the simulator's loop paths to the blocks that ran).
    Raises when the emulator cannot run it."""
    runs = []
    for S in seqs:
        if S % PAD:
            raise ValueError(f"emulator sequence lengths must be multiples of {PAD} (no tail tile), got {S}")
        runs.append((S, attention_stats(kernel, S, pv_dtype)))
    (s0, st0), (s1, st1) = runs
    # per 64-key tile (the emulator counts whole iterations; S is a multiple of keys_per_iter in both runs)
    if s0 % km.keys_per_iter or s1 % km.keys_per_iter:
        raise ValueError(f"emulator sequence lengths must be multiples of {km.keys_per_iter} keys per iteration")
    executed = frozenset(km.text_addr + off for st in (st0, st1) for off in st.exec_counts)
    return mix_from_stats(st0, st1, s0 / KEY_TILE, s1 / KEY_TILE, st0["waves"], st1["waves"], km.static), executed


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


# field kinds of a by-value argument given field by field: struct format and size (natural alignment, as the C
# struct the compiler laid out: docs/rdna4.md §Entry "Kernel Argument Layout"); "ptr" is an 8-byte pointer field
# whose value is an emulated buffer (its size in bytes, or its contents)
FIELD_KINDS = {"u8": ("<B", 1), "i8": ("<b", 1), "u16": ("<H", 2), "i16": ("<h", 2), "u32": ("<I", 4),
               "i32": ("<i", 4), "f32": ("<f", 4), "u64": ("<Q", 8), "i64": ("<q", 8), "f64": ("<d", 8),
               "ptr": ("<Q", 8)}


@dataclass(frozen=True)
class Fields:
    """An argument given field by field, each (kind, value) at its natural alignment (FIELD_KINDS): a by-value
    struct of any size (e.g. gcnasm's 56-byte opus_attn_kargs: four "ptr" fields, four "i32", one "f32"), or the
    contents of a pointer argument's buffer (then no "ptr" fields). A "ptr" field's value is the byte size of the
    zeroed buffer the emulated workgroup gets, or bytes (its contents); its address is written into the field."""
    items: tuple

    def __post_init__(self):
        for kind, value in self.items:
            if kind not in FIELD_KINDS:
                raise ValueError(f"field kind {kind!r}: expected one of {sorted(FIELD_KINDS)}")
            if kind == "ptr" and not (isinstance(value, (bytes, bytearray)) or (isinstance(value, int) and value > 0)):
                raise ValueError(f"ptr field: expected a buffer size in bytes (> 0) or bytes, got {value!r}")

    @classmethod
    def parse(cls, text: str) -> "Fields":
        """'KIND:V,V,...,KIND:V,...' (a value without a kind takes the previous one's): 'ptr:1M,ptr:1M,i32:4,32,
        f32:0.088' or 'u32:4,0,1'. Integers in any base Python reads ('0x3db504f3'); a ptr's size may end in K/M/G
        (binary units); 'hex:0a0b..' appends raw bytes."""
        items, kind = [], None
        for part in text.split(","):
            head, colon, value = part.strip().partition(":")
            if colon and (head in FIELD_KINDS or head == "hex"):
                kind = head
            else:
                value = part.strip()
            if kind is None:
                raise ValueError(f"{text!r}: the first value needs a kind ({', '.join(sorted(FIELD_KINDS))}, hex)")
            try:
                if kind == "hex":
                    items += [("u8", b) for b in bytes.fromhex(value)]
                elif kind == "ptr":
                    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(value[-1:].upper(), 1)
                    items.append((kind, int(value[:-1] if mult > 1 else value, 0) * mult))
                elif kind[0] == "f":
                    items.append((kind, float(value)))
                else:
                    items.append((kind, int(value, 0)))
            except ValueError:
                raise ValueError(f"{text!r}: {value!r} is not a {kind} value") from None
        return cls(tuple(items))

    @property
    def pointers(self) -> int:
        return sum(k == "ptr" for k, _ in self.items)

    def pack(self, alloc=None) -> bytes:
        """The bytes at natural alignment; alloc(size or bytes) -> address gives each "ptr" field its buffer."""
        out = bytearray()
        for kind, value in self.items:
            fmt, size = FIELD_KINDS[kind]
            out += bytes(-len(out) % size)
            if kind == "ptr":
                if alloc is None:
                    raise ValueError("a ptr field needs a device to allocate its buffer (not inside a buffer)")
                value = alloc(value)
            elif fmt[-1] in "fd":
                value = float(value)
            elif not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{kind} field: expected an int, got {value!r}")
            elif fmt[-1].isupper() and value < 0:
                value += 1 << (8 * size)        # a negative value for an unsigned field: its two's complement
            try:
                out += struct.pack(fmt, value)
            except struct.error as e:
                raise ValueError(f"{kind} field: {value!r} does not fit ({e})") from None
        return bytes(out)


def pack_kernargs(kernel, values: dict, alloc=None) -> tuple[bytes, list[str]]:
    """Explicit kernargs from the metadata: pointers take `values[name]` (an address); a by-value argument an int
    (1/2/4/8 bytes), bytes, or Fields (any size: zero-padded to the argument's size, never truncated; its "ptr"
    fields get buffers from alloc). Returns (bytes, names of pointer arguments)."""
    out = bytearray(max((a[".offset"] + a[".size"] for a in kernel.explicit_args), default=0))
    pointers = []
    for name, a in zip(arg_names(kernel), kernel.explicit_args):
        if name not in values:
            raise ValueError(f"--arg {name}=VALUE: kernel argument {name!r} ({a['.value_kind']}, {a['.size']} B) "
                             "has no value")
        v = values[name]
        if a[".value_kind"] == "global_buffer":
            pointers.append(name)
        if isinstance(v, (Fields, bytes, bytearray)):
            if a[".value_kind"] == "global_buffer":
                raise ValueError(f"kernel argument {name!r} is a pointer: its value is an address, not fields")
            raw = v.pack(alloc) if isinstance(v, Fields) else bytes(v)
            if len(raw) > a[".size"]:
                raise ValueError(f"kernel argument {name!r}: {len(raw)} bytes given for a {a['.size']}-byte "
                                 "by-value argument")
            out[a[".offset"]:a[".offset"] + len(raw)] = raw
            continue
        v = int(v)
        fmt = {1: "<b", 2: "<h", 4: "<i", 8: "<q"}.get(a[".size"])
        if fmt is None:
            raise ValueError(f"kernel argument {name!r}: a {a['.size']}-byte by-value argument takes its bytes or "
                             "its fields (e.g. --arg NAME=ptr:BYTES,i32:4,f32:0.5), not one integer")
        if a[".value_kind"] == "global_buffer" or v >= 1 << (8 * a[".size"] - 1):
            fmt = fmt.upper()
        struct.pack_into(fmt, out, a[".offset"], v)
    return bytes(out), pointers


def emulate_workgroup(path: Path, symbol: str, block: int, args: dict, text_addr: int,
                      dynamic_lds: int = 0) -> WorkgroupRun:
    """Run the first workgroup (grid 1,1,1) of `symbol` at the given arguments. A pointer argument gets a
    zeroed buffer of args[name] bytes (DEFAULT_BUFFER_BYTES when absent), or args[name] itself when it is bytes or
    Fields without pointers (real data: data-dependent branches, such as an attention kernel's O rescale, then run
    as often as they would; on zeroed buffers they take their zero-input path). A by-value argument is an int, its
    bytes, or Fields (a struct of any size, whose "ptr" fields get emulated buffers the same way), so a code
    object runs as built whatever its metadata names."""
    from sage_co import codeobj
    from sage_co.emu import Device
    co = codeobj.read_file(path)
    kernel = co.kernel(symbol)
    dev = Device(1 << 24)
    mod = dev.load(Path(path).read_bytes(), str(path))
    unknown = sorted(set(args) - set(arg_names(kernel)))
    if unknown:
        raise ValueError(f"--arg: {unknown} are not arguments of {symbol} (its arguments: {arg_names(kernel)})")

    def buffer(data) -> int:
        if isinstance(data, Fields):
            data = data.pack()
        if isinstance(data, (bytes, bytearray)):
            addr = dev.alloc(max(4, len(data)))
            dev.write(addr, bytes(data))
            return addr
        return dev.alloc(int(data))
    values = {}
    for name, a in zip(arg_names(kernel), kernel.explicit_args):
        if a[".value_kind"] == "global_buffer":
            values[name] = buffer(args.get(name, DEFAULT_BUFFER_BYTES))
        elif name in args:
            values[name] = args[name]
    kernargs, _ = pack_kernargs(kernel, values, buffer)
    passes: dict[int, list[int]] = {}

    def record(pc, addr, m, nbytes):
        acc = passes.setdefault(pc, [0, 0])
        for w in range(addr.shape[0]):
            acc[0] += lds_passes(addr[w], m[w].astype(bool), nbytes)
            acc[1] += 1
    with _observe_lds(record):
        stats = mod.launch(symbol, grid=(1, 1, 1), block=(block, 1, 1), kernargs=kernargs,
                           **({"dynamic_lds": dynamic_lds} if dynamic_lds else {}))
    counts = {text_addr + off: n for off, n in stats.exec_counts.items()}     # objdump numbering
    prog = mod.programs[symbol]                        # the instruction list the LDS observer's PC indices index
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
