"""Read AMDGPU code objects (.co / .hsaco): ELF header checks, the NT_AMDGPU_METADATA note, kernel
symbols, the 64-byte kernel descriptor decoded into named fields, and the code bytes.

Runtime module: pyelftools + msgpack only, never LLVM. Every problem with the input raises
CodeObjectError naming the file and what is wrong.

Kernel descriptor layout and bit fields follow LLVM AMDGPUUsage ("Kernel Descriptor", GFX12 column);
docs/rdna4.md §Code object has the values LLVM 22 writes for gfx1201.
"""
from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field

import msgpack
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
NT_AMDGPU_METADATA = 32
# e_flags & 0xff (EF_AMDGPU_MACH): docs/rdna4.md §Code object, "ELF identification"
MACH = {0x04E: "gfx1201", 0x04C: "gfx942", 0x04F: "gfx950", 0x048: "gfx1200", 0x041: "gfx1100"}
# EI_ABIVERSION -> code object version
ABI_TO_COV = {2: 4, 3: 5, 4: 6}
# the version every shipped code object is built as (build_asm.py, asm_src/asmdsl.py; the hand-written
# asm_src/gfx1201_microbench.s states it too): v5 loads on every supported ROCm, nothing shipped needs v6
CODE_OBJECT_VERSION = 5
KERNEL_DESCRIPTOR_BYTES = 64


class CodeObjectError(ValueError):
    """A file that is not a usable gfx1201 AMDGPU code object."""

    def __init__(self, name: str, problem: str):
        super().__init__(f"{name}: {problem}")
        self.name, self.problem = name, problem


def _bits(value: int, lo: int, width: int) -> int:
    return (value >> lo) & ((1 << width) - 1)


# (field name, register, low bit, width) -- AMDGPUUsage COMPUTE_PGM_RSRC1/2/3 and kernel_code_properties, GFX12.
_RSRC_FIELDS = (
    ("granulated_workitem_vgpr_count", "rsrc1", 0, 6),
    ("granulated_wavefront_sgpr_count", "rsrc1", 6, 4),
    ("priority", "rsrc1", 10, 2),
    ("float_round_mode_32", "rsrc1", 12, 2),
    ("float_round_mode_16_64", "rsrc1", 14, 2),
    ("float_denorm_mode_32", "rsrc1", 16, 2),
    ("float_denorm_mode_16_64", "rsrc1", 18, 2),
    ("priv", "rsrc1", 20, 1),
    ("debug_mode", "rsrc1", 22, 1),
    ("bulky", "rsrc1", 24, 1),
    ("cdbg_user", "rsrc1", 25, 1),
    ("fp16_ovfl", "rsrc1", 26, 1),
    ("wgp_mode", "rsrc1", 29, 1),
    ("mem_ordered", "rsrc1", 30, 1),
    ("fwd_progress", "rsrc1", 31, 1),
    ("enable_private_segment", "rsrc2", 0, 1),
    ("user_sgpr_count", "rsrc2", 1, 5),
    ("enable_trap_handler", "rsrc2", 6, 1),
    ("enable_sgpr_workgroup_id_x", "rsrc2", 7, 1),
    ("enable_sgpr_workgroup_id_y", "rsrc2", 8, 1),
    ("enable_sgpr_workgroup_id_z", "rsrc2", 9, 1),
    ("enable_sgpr_workgroup_info", "rsrc2", 10, 1),
    ("enable_vgpr_workitem_id", "rsrc2", 11, 2),
    ("enable_exception_address_watch", "rsrc2", 13, 1),
    ("enable_exception_memory", "rsrc2", 14, 1),
    ("granulated_lds_size", "rsrc2", 15, 9),
    ("enable_exception_mask", "rsrc2", 24, 7),
    ("inst_pref_size", "rsrc3", 4, 8),
    ("glg_en", "rsrc3", 13, 1),
    ("image_op", "rsrc3", 31, 1),
    ("enable_sgpr_private_segment_buffer", "kernel_code_properties", 0, 1),
    ("enable_sgpr_dispatch_ptr", "kernel_code_properties", 1, 1),
    ("enable_sgpr_queue_ptr", "kernel_code_properties", 2, 1),
    ("enable_sgpr_kernarg_segment_ptr", "kernel_code_properties", 3, 1),
    ("enable_sgpr_dispatch_id", "kernel_code_properties", 4, 1),
    ("enable_sgpr_flat_scratch_init", "kernel_code_properties", 5, 1),
    ("enable_sgpr_private_segment_size", "kernel_code_properties", 6, 1),
    ("wavefront_size32", "kernel_code_properties", 10, 1),
    ("uses_dynamic_stack", "kernel_code_properties", 11, 1),
)


@dataclass(frozen=True)
class KernelDescriptor:
    """The 64-byte kernel descriptor (<kernel>.kd), raw words plus decoded fields."""

    group_segment_fixed_size: int
    private_segment_fixed_size: int
    kernarg_size: int
    kernel_code_entry_byte_offset: int
    rsrc3: int
    rsrc1: int
    rsrc2: int
    kernel_code_properties: int
    kernarg_preload: int
    fields: dict[str, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: bytes) -> "KernelDescriptor":
        (group, private, kernarg, _r0, entry) = struct.unpack_from("<IIIIq", raw, 0)
        rsrc3, rsrc1, rsrc2, props, preload = struct.unpack_from("<IIIHH", raw, 0x2C)
        regs = dict(rsrc1=rsrc1, rsrc2=rsrc2, rsrc3=rsrc3, kernel_code_properties=props)
        fields = {name: _bits(regs[reg], lo, w) for name, reg, lo, w in _RSRC_FIELDS}
        return cls(group, private, kernarg, entry, rsrc3, rsrc1, rsrc2, props, preload, fields)

    def __getattr__(self, name: str) -> int:  # descriptor.float_denorm_mode_32 etc.
        fields = self.__dict__.get("fields", {})
        if name in fields:
            return fields[name]
        raise AttributeError(name)

    @property
    def vgpr_count(self) -> int:
        # docs/rdna4.md §Occupancy: wave32 descriptor encodes ceil(vgprs/8)-1
        return (self.fields["granulated_workitem_vgpr_count"] + 1) * 8

    def as_dict(self) -> dict[str, int]:
        return dict(
            group_segment_fixed_size=self.group_segment_fixed_size,
            private_segment_fixed_size=self.private_segment_fixed_size,
            kernarg_size=self.kernarg_size,
            kernel_code_entry_byte_offset=self.kernel_code_entry_byte_offset,
            rsrc1=self.rsrc1, rsrc2=self.rsrc2, rsrc3=self.rsrc3,
            kernel_code_properties=self.kernel_code_properties,
            kernarg_preload=self.kernarg_preload,
            vgpr_count=self.vgpr_count,
            **self.fields,
        )


@dataclass(frozen=True)
class Kernel:
    name: str
    entry: int                # offset of the first instruction inside CodeObject.text
    code_size: int            # st_size of the function symbol (0 when the asm did not set .size)
    descriptor: KernelDescriptor
    metadata: dict            # this kernel's map from amdhsa.kernels (keys like '.args', '.vgpr_count')

    @property
    def args(self) -> list[dict]:
        return list(self.metadata.get(".args", []))

    @property
    def explicit_args(self) -> list[dict]:
        return [a for a in self.args if not str(a.get(".value_kind", "")).startswith("hidden_")]

    @property
    def kernarg_segment_size(self) -> int:
        return int(self.metadata[".kernarg_segment_size"])


@dataclass(frozen=True)
class CodeObject:
    name: str
    arch: str
    code_object_version: int
    e_flags: int
    text: bytes
    text_addr: int
    metadata: dict            # the whole NT_AMDGPU_METADATA map
    kernels: dict[str, Kernel]

    def kernel(self, name: str) -> Kernel:
        if name not in self.kernels:
            raise CodeObjectError(self.name, f"no kernel named {name!r}; it has {sorted(self.kernels)}")
        return self.kernels[name]


# What pyelftools and msgpack raise on a corrupt body: besides ELFError, a field read as a huge offset or size
# surfaces as OverflowError/MemoryError, a section type that does not match its name as AttributeError, a zero
# sh_entsize as ZeroDivisionError, a read past the end as struct.error/EOFError. Each becomes a CodeObjectError.
_MALFORMED = (ELFError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError, struct.error,
              KeyError, IndexError, UnicodeDecodeError, TypeError, OverflowError, MemoryError, AttributeError,
              ZeroDivisionError, EOFError, RecursionError, AssertionError)


def read(data: bytes, name: str = "<bytes>", arch: str | None = "gfx1201") -> CodeObject:
    """Parse a code object. `arch` None accepts any AMDGPU target (used only by tooling).

    Raises CodeObjectError (a ValueError) naming `name` and what is wrong for every malformed input."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"read(data=...): expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) < 64 or data[:4] != b"\x7fELF":
        raise CodeObjectError(name, f"not an ELF file ({len(data)} bytes, magic {data[:4]!r})")
    try:
        return _read_elf(data, name, arch)
    except CodeObjectError:
        raise
    except _MALFORMED as exc:
        raise CodeObjectError(name, f"malformed code object ({type(exc).__name__}: {exc})") from None


def _read_elf(data: bytes, name: str, arch: str | None) -> CodeObject:
    elf = ELFFile(io.BytesIO(data))
    header = elf.header
    machine, osabi_raw, abiver, e_flags = header.e_machine, data[7], data[8], header.e_flags
    if machine != "EM_AMDGPU" and machine != EM_AMDGPU:
        raise CodeObjectError(name, f"ELF for machine {machine}, expected EM_AMDGPU (224)")
    if osabi_raw != ELFOSABI_AMDGPU_HSA:
        raise CodeObjectError(name, f"EI_OSABI {osabi_raw}, expected 64 (AMDGPU_HSA)")
    if abiver not in ABI_TO_COV:
        raise CodeObjectError(name, f"EI_ABIVERSION {abiver} is not code object v4/v5/v6")
    target = MACH.get(e_flags & 0xFF, f"mach 0x{e_flags & 0xff:03x}")
    if arch is not None and target != arch:
        raise CodeObjectError(name, f"code object is for {target}, expected {arch}")
    sections = {s.name: s for s in elf.iter_sections()}
    for needed in (".text", ".rodata", ".symtab"):
        if needed not in sections:
            raise CodeObjectError(name, f"missing ELF section {needed}")
    if not isinstance(sections[".symtab"], SymbolTableSection):
        raise CodeObjectError(name, f".symtab is not a symbol table (sh_type {sections['.symtab']['sh_type']})")
    text_sec, rodata = sections[".text"], sections[".rodata"]
    for sec in (text_sec, rodata):
        if sec["sh_offset"] + sec["sh_size"] > len(data):
            raise CodeObjectError(name, f"section {sec.name} (offset {sec['sh_offset']}, {sec['sh_size']} bytes) "
                                        f"extends past the end of the file ({len(data)} bytes)")
    text, text_addr = text_sec.data(), text_sec["sh_addr"]
    if len(text) != text_sec["sh_size"]:
        raise CodeObjectError(name, "truncated .text section")
    rodata_bytes, rodata_addr = rodata.data(), rodata["sh_addr"]
    meta = None
    for sec in elf.iter_sections():
        if sec["sh_type"] != "SHT_NOTE":
            continue
        for note in sec.iter_notes():
            if note["n_name"] == "AMDGPU" and note["n_type"] in (NT_AMDGPU_METADATA, "NT_AMDGPU_METADATA"):
                desc = note["n_desc"]
                meta = msgpack.unpackb(desc if isinstance(desc, bytes) else desc.encode("latin1"),
                                       raw=False, strict_map_key=False)
    if meta is None:
        raise CodeObjectError(name, "no NT_AMDGPU_METADATA note")
    if not isinstance(meta, dict) or not isinstance(meta.get("amdhsa.kernels", []), list):
        raise CodeObjectError(name, "NT_AMDGPU_METADATA is not a map with an amdhsa.kernels list")
    symbols = {s.name: s for s in sections[".symtab"].iter_symbols()}

    kernels: dict[str, Kernel] = {}
    for kmeta in meta.get("amdhsa.kernels", []):
        if not isinstance(kmeta, dict) or not isinstance(kmeta.get(".name"), str):
            raise CodeObjectError(name, f"amdhsa.kernels entry is not a map with a .name string: {kmeta!r:.80}")
        kname = kmeta[".name"]
        if not isinstance(kmeta.get(".args", []), list) or not all(isinstance(a, dict) for a in kmeta.get(".args", [])):
            raise CodeObjectError(name, f"kernel {kname!r}: .args is not a list of maps")
        kd_sym = symbols.get(kmeta.get(".symbol", f"{kname}.kd"))
        if kd_sym is None:
            raise CodeObjectError(name, f"kernel {kname!r}: descriptor symbol {kmeta.get('.symbol')!r} missing")
        kd_off = kd_sym["st_value"] - rodata_addr
        if not 0 <= kd_off <= len(rodata_bytes) - KERNEL_DESCRIPTOR_BYTES:
            raise CodeObjectError(name, f"kernel {kname!r}: descriptor outside .rodata")
        desc = KernelDescriptor.parse(rodata_bytes[kd_off:kd_off + KERNEL_DESCRIPTOR_BYTES])
        entry = kd_sym["st_value"] + desc.kernel_code_entry_byte_offset - text_addr
        if not 0 <= entry < len(text):
            raise CodeObjectError(name, f"kernel {kname!r}: entry point outside .text")
        fn = symbols.get(kname)
        kernels[kname] = Kernel(kname, entry, fn["st_size"] if fn is not None else 0, desc, kmeta)
    if not kernels:
        raise CodeObjectError(name, "metadata lists no kernels")
    return CodeObject(name, target, ABI_TO_COV[abiver], e_flags, text, text_addr, meta, kernels)


def read_file(path, arch: str | None = "gfx1201") -> CodeObject:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise CodeObjectError(str(path), f"cannot read ({exc.strerror or exc})") from None
    return read(data, str(path), arch)
