"""Kernel argument structs, declared explicitly and packed by hand.

Every shipped kernel has one KernargStruct: field name, kind (and, for the HIP kernels, the C parameter type),
declared once in sage_co/abi.py in declaration order; the byte offsets and the size follow from that order (the ABI
below), so no offset is written by hand
(torch-free; the asm generator, the ops and tools/disasm_check.py all read it there). Before the first launch the declaration is compared with the code
object's own metadata (`.args`: offset, size, value_kind, name) and a mismatch refuses to launch with
both layouts side by side. tools/disasm_check.py runs the same comparison for every shipped kernel.

ABI (docs/rdna4.md §Entry, from LLVM AMDGPUUsage "Kernel Argument Layout"): explicit arguments in declaration
order at naturally aligned offsets; a pointer is 8 bytes (value_kind global_buffer), scalars 4 bytes
(by_value), u64 8 bytes (by_value). Hidden arguments, when a kernel declares any, follow at the next 8-byte boundary and are
filled by the runtime (HIP, or sage_co.emu), never by the caller.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, replace

# kind -> (struct format, size, metadata value_kind)
KINDS = {
    "ptr": ("<Q", 8, "global_buffer"),
    "i32": ("<i", 4, "by_value"),
    "u64": ("<Q", 8, "by_value"),
    "u32": ("<I", 4, "by_value"),
    "f32": ("<f", 4, "by_value"),
}


class KernargMismatch(RuntimeError):
    """The Python declaration of a kernel's arguments disagrees with the code object."""


# kind -> the C parameter type of a scalar field in the HIP kernels (a pointer field names its own: Field.ctype)
C_TYPES = {"i32": "int", "u32": "u32", "u64": "u64", "f32": "float"}


@dataclass(frozen=True)
class Field:
    """One explicit kernel argument. offset None: the next naturally aligned offset after the previous field of its
    KernargStruct (which fills it in). ctype: its C parameter type in the HIP kernels (the generated header's
    parameter list, asm_src/generated/sage_abi.h); default by kind for scalars, required there for pointers."""
    name: str
    kind: str
    offset: int | None = None
    ctype: str | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"Field {self.name!r}: kind {self.kind!r} not one of {sorted(KINDS)}")
        if self.offset is not None and self.offset % KINDS[self.kind][1]:
            raise ValueError(f"Field {self.name!r}: offset {self.offset} is not {KINDS[self.kind][1]}-byte aligned")

    @property
    def size(self) -> int:
        return KINDS[self.kind][1]

    @property
    def c_param(self) -> str:
        """The HIP kernel's parameter declaration of this field ("const float *__restrict__ q_scale")."""
        ctype = self.ctype or C_TYPES.get(self.kind)
        if ctype is None:
            raise ValueError(f"Field {self.name!r}: a {self.kind} field needs its C type (ctype=...)")
        return f"{ctype}{'' if ctype.endswith('*') else ' '}{self.name}"


def _laid_out(fields) -> list[Field]:
    """The fields with every missing offset filled in: each at the first offset past the previous field that is a
    multiple of its size (natural alignment, docs/rdna4.md §Entry)."""
    out, end = [], 0
    for f in fields:
        if f.offset is None:
            f = replace(f, offset=-(-end // f.size) * f.size)
        out.append(f)
        end = f.offset + f.size
    return out


class KernargStruct:
    """An explicit kernarg layout. `size` is the end of the explicit arguments in bytes (None: the end of the last
    field, as the code objects' metadata has it; given: checked)."""

    def __init__(self, name: str, fields: list[Field], size: int | None = None):
        fields = _laid_out(fields)
        if size is None:
            size = max((f.offset + f.size for f in fields), default=0)
        self.name, self.fields, self.size = name, tuple(fields), size
        end = 0
        for f in sorted(self.fields, key=lambda f: f.offset):
            if f.offset < end:
                raise ValueError(f"{name}: field {f.name!r} at {f.offset} overlaps the previous field")
            end = f.offset + f.size
        if end != size:
            raise ValueError(f"{name}: fields end at byte {end} but size says {size}")
        if len({f.name for f in self.fields}) != len(self.fields):
            raise ValueError(f"{name}: duplicate field names")
        self.by_name = {f.name: f for f in self.fields}

    def pack(self, values: dict) -> bytes:
        """Pack {field name: value}; pointers are integer device addresses. Every field must be given."""
        missing = [f.name for f in self.fields if f.name not in values]
        extra = sorted(set(values) - set(self.by_name))
        if missing or extra:
            raise ValueError(f"{self.name} kernargs: missing {missing}, unexpected {extra}")
        buf = bytearray(self.size)
        for f in self.fields:
            v = values[f.name]
            fmt = KINDS[f.kind][0]
            if f.kind == "f32":
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise TypeError(f"{self.name}.{f.name}: expected a float for kind f32, got {type(v).__name__}")
                v = float(v)
            else:
                if isinstance(v, bool) or not isinstance(v, int):
                    raise TypeError(f"{self.name}.{f.name}: expected an int for kind {f.kind}, got {type(v).__name__}")
                lo, hi = {"ptr": (0, 2**64 - 1), "u64": (0, 2**64 - 1), "i32": (-2**31, 2**31 - 1),
                          "u32": (0, 2**32 - 1)}[f.kind]
                if not lo <= v <= hi:
                    raise ValueError(f"{self.name}.{f.name}: {v} does not fit {f.kind} [{lo}, {hi}]")
            struct.pack_into(fmt, buf, f.offset, v)
        return bytes(buf)

    def table(self) -> list[tuple[int, int, str, str]]:
        return [(f.offset, f.size, KINDS[f.kind][2], f.name) for f in sorted(self.fields, key=lambda f: f.offset)]

    def check(self, kernel_metadata: dict, where: str = "") -> None:
        """Compare with one kernel's metadata map (from sage_co.codeobj); raise KernargMismatch on any difference."""
        explicit = [a for a in kernel_metadata.get(".args", [])
                    if not str(a.get(".value_kind", "")).startswith("hidden_")]
        # clang names HIP pointer parameters "<name>.coerce" (coerced to the global address space)
        theirs = [(a[".offset"], a[".size"], a[".value_kind"], a.get(".name", "").removesuffix(".coerce"))
                  for a in explicit]
        ours = self.table()
        problems = []
        if len(theirs) != len(ours):
            problems.append(f"{len(ours)} declared fields, code object has {len(theirs)} explicit args")
        for o, t in zip(ours, theirs):
            if o[:3] != t[:3] or (t[3] and o[3] != t[3]):
                problems.append(f"field {o[3]!r} (offset {o[0]}, size {o[1]}, {o[2]}) vs code object "
                                f"{t[3]!r} (offset {t[0]}, size {t[1]}, {t[2]})")
        explicit_end = max((a[".offset"] + a[".size"] for a in explicit), default=0)
        if explicit_end != self.size:
            problems.append(f"declared size {self.size}, code object's explicit args end at {explicit_end}")
        segment = kernel_metadata.get(".kernarg_segment_size", 0)
        if segment < self.size:
            problems.append(f"kernarg_segment_size {segment} is smaller than the declared struct ({self.size})")
        if problems:
            def fmt(rows):
                return "\n".join(f"      {off:>4}  {size:>2}  {kind:<14} {name}" for off, size, kind, name in rows)
            raise KernargMismatch(
                f"kernarg layout of {self.name}{' in ' + where if where else ''} does not match the code object; "
                f"refusing to launch:\n  " + "\n  ".join(problems) +
                f"\n  declared in Python ({self.size} bytes):\n{fmt(ours)}"
                f"\n  code object metadata (kernarg_segment_size {segment}):\n{fmt(theirs)}")
