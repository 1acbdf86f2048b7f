"""A small scheduling DSL for hand-written gfx1201 assembly (used by gen_sage_attention_asm.py).

What it gives a generator, and nothing more:
  * named register allocation (`RegFile`): every VGPR/SGPR range has a name and a comment, and the allocation
    table is printed into the kernel header, so the .s carries its own register map;
  * VALU ops as small records (`Op`) that know which VGPRs they read and write and whether they have a VOPD
    form, plus `pair_vopd`, which fuses neighbouring independent ops into `v_dual_*` issues when the
    docs/rdna4.md §Throughput VOPD rules allow it (one even and one odd destination, src0s in different VGPR
    banks, vsrc1s in different banks, at most one literal) and never changes what the code computes
    (both halves of a VOPD read before either writes, so a pair may not read the other half's result);
  * in-order wait counters (`WaitCounter`) for LOADcnt/DScnt: loads of one kind complete in issue order
    (docs/rdna4.md §Waits, MEM_ORDERED), so `wait_for(tag)` emits the loosest `s_wait_*cnt N` that covers a
    given load;
  * `Asm`, the output buffer: instructions, labels, comments and section banners;
  * `insert_hazard_waits(body)`: the hazard pass every generated kernel body goes through. It assembles the body
    (llvm-mc), runs the one hazard model (sage_co.emu.hazards, docs/rdna4.md §Hazards) over its control flow and
    puts the fix LLVM would put right before each site: `s_wait_alu` with the fields the read needs, `v_nop`
    before a WMMA reading the previous WMMA's D, a `v_mov_b32 vX, vX` before a v_permlane after a v_cmpx. So no
    schedule change can leave a hazard in the shipped bytes, and a schedule without one gets no extra wait;
  * `KernelDescriptor` / `amdhsa_kernel(...)` / `code_object(...)`: the `.amdhsa_kernel` descriptor directives,
    the function symbol boilerplate and the `.amdgpu_metadata` YAML of one or several kernels, so a generator
    (and a test kernel) states only what differs: name, arguments, LDS, register counts, workgroup size.
Nothing here knows about attention.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

# the one instruction-facts layer; sage_co is this checkout's (build_asm.py runs generators with asm_src/ and the
# repository root on PYTHONPATH, pytest adds both through pyproject.toml)
from sage_co.codeobj import CODE_OBJECT_VERSION  # v5: every supported ROCm loads it (docs/rdna4.md §Code object)
from sage_co.emu.facts import READS_VDST, VOPD_PLAIN, is_trans, vopd_pair_problem

# docs/rdna4.md §Throughput, VOPD rules: ops with a v_dual_* form in both halves whose meaning is dst = f(src0, src1)
VOPD_OPS = VOPD_PLAIN
COMMUTATIVE = {"v_mul_f32", "v_add_f32", "v_max_num_f32", "v_min_num_f32"}


# ------------------------------------------------------------------------------------------ registers
@dataclass(frozen=True)
class Range:
    """A named run of registers: kind 'v' or 's', first register, count."""
    kind: str
    base: int
    n: int
    name: str

    def __getitem__(self, i) -> "Range":
        if isinstance(i, slice):
            start, stop, step = i.indices(self.n)
            if step != 1 or stop <= start:
                raise IndexError(f"{self.name}[{i}]: only contiguous non-empty slices")
            return Range(self.kind, self.base + start, stop - start, f"{self.name}[{start}:{stop}]")
        if not -self.n <= i < self.n:
            raise IndexError(f"{self.name}[{i}] out of range (n={self.n})")
        i %= self.n
        return Range(self.kind, self.base + i, 1, f"{self.name}[{i}]")

    @property
    def num(self) -> int:
        """The register number of a single register."""
        if self.n != 1:
            raise ValueError(f"{self.name} is {self.n} registers, not one")
        return self.base

    def pair(self, i: int) -> "Range":
        return self[i:i + 2]

    def __str__(self) -> str:
        return f"{self.kind}{self.base}" if self.n == 1 else f"{self.kind}[{self.base}:{self.base + self.n - 1}]"

    def regs(self) -> set[int]:
        return set(range(self.base, self.base + self.n))


class RegFile:
    """Hand allocation with names. `alloc` hands out the next free registers (optionally aligned)."""

    def __init__(self, kind: str, limit: int, first: int = 0):
        self.kind, self.limit, self.next = kind, limit, first
        self.table: list[tuple[Range, str]] = []

    def alloc(self, name: str, n: int = 1, align: int = 1, note: str = "") -> Range:
        base = -(-self.next // align) * align
        if base + n > self.limit:
            raise ValueError(f"out of {self.kind}GPRs allocating {name} ({n}): {base + n} > {self.limit}")
        r = Range(self.kind, base, n, name)
        self.next = base + n
        self.table.append((r, note))
        return r

    def fixed(self, name: str, base: int, n: int = 1, note: str = "") -> Range:
        r = Range(self.kind, base, n, name)
        self.table.append((r, note))
        return r

    @property
    def used(self) -> int:
        return max((r.base + r.n for r, _ in self.table), default=0)


# ------------------------------------------------------------------------------------------ VALU ops
def _vnum(x) -> int | None:
    return x.num if isinstance(x, Range) and x.kind == "v" else None


_ENCODING_SUFFIX = re.compile(r"_(e32|e64|dpp|sdwa)$")   # facts take the bare mnemonic


def _is_literal(x) -> bool:
    return isinstance(x, str) and x.startswith("0x")


@dataclass
class Op:
    """One VALU instruction. `dst`/`srcs` are Ranges or strings (SGPR names, constants). VOPD candidates
    are built with `Op.vop2` (opcode, dst, src0, src1); everything else is free text with explicit
    read/write sets."""
    text: str
    reads: set[int] = field(default_factory=set)
    writes: set[int] = field(default_factory=set)
    opcode: str | None = None
    dst: Range | None = None
    src0: object = None
    src1: Range | None = None
    trans: bool = False

    @classmethod
    def vop2(cls, opcode: str, dst: Range, src0, src1) -> "Op":
        reads = {r for r in (_vnum(src0), _vnum(src1)) if r is not None}
        return cls(f"{opcode} {dst}, {src0}, {src1}", reads, {dst.num}, opcode, dst, src0, src1)

    @classmethod
    def mov(cls, dst: Range, src) -> "Op":
        reads = {_vnum(src)} - {None}
        return cls(f"v_mov_b32 {dst}, {src}", reads, {dst.num}, "v_mov_b32", dst, src, None)

    @classmethod
    def raw(cls, text: str, reads=(), writes=(), trans: bool | None = None) -> "Op":
        """Free-text VALU op with the VGPRs it reads and writes. What sage_co.emu.facts knows from the mnemonic is
        taken from there: TRANS (facts.is_trans; a `trans` passed must agree) and the read of a tied destination
        (facts.READS_VDST: v_permlanex16_b32, v_fmac_*, ...: its writes are read too). tests/build_abi/test_asmdsl.py
        assembles
        every raw op of the family and checks the sets against facts of the decoded bytes."""
        def nums(xs):
            out = set()
            for x in xs:
                out |= x.regs() if isinstance(x, Range) else {x}
            return out
        mnemonic = _ENCODING_SUFFIX.sub("", text.split()[0])
        if trans is None:
            trans = is_trans(mnemonic)
        elif trans != is_trans(mnemonic):
            raise ValueError(f"Op.raw({text!r}): trans={trans}, but sage_co.emu.facts says {mnemonic} is "
                             f"{'' if is_trans(mnemonic) else 'not '}TRANS")
        r, w = nums(reads), nums(writes)
        if READS_VDST.match(mnemonic):
            r |= w
        return cls(text, r, w, trans=trans)

    @property
    def vopd_able(self) -> bool:
        return self.opcode in VOPD_OPS

    def dual_half(self) -> str:
        if self.opcode == "v_mov_b32":
            return f"{VOPD_OPS[self.opcode]} {self.dst}, {self.src0}"
        return f"{VOPD_OPS[self.opcode]} {self.dst}, {self.src0}, {self.src1}"

    def swapped(self) -> "Op | None":
        """The same op with src0/src1 exchanged, when legal (commutative, new src1 a VGPR)."""
        if self.opcode in COMMUTATIVE and _vnum(self.src0) is not None:
            return Op.vop2(self.opcode, self.dst, self.src1, self.src0)
        return None


def vopd_legal(x: Op, y: Op) -> bool:
    """docs/rdna4.md §Throughput VOPD rules (checked again by llvm-mc when the .s is assembled)."""
    if not (x.vopd_able and y.vopd_able):
        return False
    if x.writes & y.reads or y.writes & x.reads or x.writes & y.writes:
        return False                       # both halves read before either writes: keep sequential meaning
    lits = {s for s in (x.src0, y.src0) if _is_literal(s)}
    sgprs = {str(s) for s in (x.src0, y.src0) if isinstance(s, Range) and s.kind == "s"}
    return vopd_pair_problem(x.dst.num, y.dst.num, _vnum(x.src0), _vnum(y.src0), _vnum(x.src1), _vnum(y.src1),
                             len(lits), len(sgprs), x.opcode == y.opcode == "v_mov_b32") is None


def try_pair(x: Op, y: Op) -> tuple[Op, Op] | None:
    for a in (x, x.swapped()):
        for b in (y, y.swapped()):
            if a is not None and b is not None and vopd_legal(a, b):
                return a, b
    return None


@dataclass
class Issue:
    """One VALU issue slot: a single op or a VOPD pair."""
    ops: tuple[Op, ...]

    @property
    def text(self) -> str:
        if len(self.ops) == 1:
            return self.ops[0].text
        return f"{self.ops[0].dual_half()} :: {self.ops[1].dual_half()}"

    @property
    def trans(self) -> bool:
        return any(o.trans for o in self.ops)


def pair_vopd(ops: list[Op], window: int = 8) -> list[Issue]:
    """Fuse ops into VOPD pairs: each op looks ahead up to `window` ops for a partner that is independent of
    it and of every op it would jump over. Order of dependent ops is never changed."""
    pending = list(ops)
    out: list[Issue] = []
    while pending:
        x = pending.pop(0)
        partner = None
        if x.vopd_able:
            between_r, between_w = set(), set()
            for j, y in enumerate(pending[:window]):
                movable = not (y.reads & between_w or y.writes & (between_r | between_w))
                if movable and y.vopd_able:
                    pr = try_pair(x, y)
                    if pr is not None:
                        partner = (j, pr)
                        break
                between_r |= y.reads
                between_w |= y.writes
        if partner is None:
            out.append(Issue((x,)))
        else:
            j, (a, b) = partner
            pending.pop(j)
            out.append(Issue((a, b)))
    return out


# ------------------------------------------------------------------------------------------ waits
class WaitCounter:
    """An in-order memory counter (LOADcnt or DScnt): remembers outstanding loads by tag."""

    def __init__(self, asm: "Asm", wait_op: str, limit: int = 63):
        self.asm, self.wait_op, self.limit = asm, wait_op, limit
        self.outstanding: list[str] = []

    def issue(self, tag: str) -> None:
        self.outstanding.append(tag)

    def wait_for(self, tag: str) -> None:
        """Wait until the load `tag` (and everything issued before it) has completed."""
        if tag not in self.outstanding:
            return
        k = self.outstanding.index(tag)
        after = len(self.outstanding) - k - 1
        self.asm.op(f"{self.wait_op} {min(after, self.limit)}")
        del self.outstanding[:k + 1]

    def wait_all(self) -> None:
        if self.outstanding:
            self.asm.op(f"{self.wait_op} 0")
            self.outstanding.clear()

    def state(self) -> tuple[str, ...]:
        return tuple(self.outstanding)


# ------------------------------------------------------------------------------------------ output
class Asm:
    def __init__(self):
        self.lines: list[str] = []
        self.counts: dict[str, int] = {}

    def op(self, text: str, comment: str = "") -> None:
        self.lines.append(f"        {text}" + (f"  // {comment}" if comment else ""))

    def issue(self, iss: Issue) -> None:
        self.op(iss.text)

    def valu(self, ops: list[Op]) -> None:
        for iss in pair_vopd(ops):
            self.issue(iss)

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")

    def comment(self, text: str) -> None:
        for ln in text.splitlines():
            self.lines.append(f"        // {ln}" if ln else "        //")

    def section(self, title: str) -> None:
        self.lines.append("")
        self.lines.append(f"        // ---- {title} " + "-" * max(0, 96 - len(title)))

    def raw(self, text: str) -> None:
        self.lines.extend(text.splitlines())

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


# ------------------------------------------------------------------------------------------ hazards
_LABEL = re.compile(r"^\s*[A-Za-z_.$][\w.$]*:\s*(//.*)?$")
WAIT_SPELLING = {"sa_sdst": "depctr_sa_sdst(0)", "va_sdst": "depctr_va_sdst(0)", "va_vcc": "depctr_va_vcc(0)"}


def _is_instruction(line: str) -> bool:
    t = line.strip()
    return bool(t) and not t.startswith(("//", ".", ";")) and not _LABEL.match(line)


def assemble_body(body: str) -> bytes:
    """The machine code of kernel-body lines (instructions, labels, comments), assembled by llvm-mc for gfx1201."""
    import subprocess
    import tempfile
    from pathlib import Path

    from sage_co.emu.disasm import text_and_symbols
    from sage_co.llvm import find_llvm
    mc = find_llvm().tool("llvm-mc")
    with tempfile.TemporaryDirectory() as d:
        src, obj = Path(d) / "body.s", Path(d) / "body.o"
        src.write_text(f'        .amdgcn_target "{TARGET}"\n        .text\n{body}\n')
        r = subprocess.run([str(mc), "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx1201", "-filetype=obj", "-o", str(obj),
                            str(src)], capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"llvm-mc rejected the kernel body:\n{r.stderr[-4000:]}")
        return text_and_symbols(obj.read_bytes())[0]


def insert_hazard_waits(body: str) -> str:
    """`body` with the minimal fix of every hazard site of docs/rdna4.md §Hazards rules 1, 3 and 5 inserted right
    before the instruction that reads (one line per site; the model's state after a site is the fixed one, so no
    fix is inserted that an earlier one makes unnecessary)."""
    from sage_co.emu.decode import decode
    from sage_co.emu.hazards import RULE_FIELD, analyze
    lines = body.split("\n")
    where = [i for i, ln in enumerate(lines) if _is_instruction(ln)]
    insts = decode(assemble_body(body))
    if len(insts) != len(where):
        raise RuntimeError(f"insert_hazard_waits: {len(where)} instruction lines assembled to {len(insts)} "
                           f"instructions (one line must be one instruction)")
    index = {inst.offset: k for k, inst in enumerate(insts)}
    fixes: dict[int, dict] = {}
    for f in analyze(insts):
        fixes.setdefault(index[f.addr], {})[f.rule] = f
    if not fixes:
        return body
    out = []
    for k, i in enumerate(where):
        start = where[k - 1] + 1 if k else 0
        out.extend(lines[start:i])
        site = fixes.get(k, {})
        fields = [RULE_FIELD[r] for r in RULE_FIELD if r in site]
        if fields:
            regs = ", ".join(sorted({site[r].reg for r in RULE_FIELD if r in site}))
            out.append(f"        s_wait_alu {' '.join(WAIT_SPELLING[x] for x in fields)}  // hazard: {regs} "
                       f"(docs/rdna4.md §Hazards 3)")
        if "wmma-operand" in site:
            out.append("        v_nop  // hazard: WMMA reads the previous WMMA's D (docs/rdna4.md §Hazards 1)")
        if "vcmpx-permlane" in site:
            src0 = insts[k].f["src0"] - 256
            out.append(f"        v_mov_b32 v{src0}, v{src0}  // hazard: v_permlane after v_cmpx "
                       f"(docs/rdna4.md §Hazards 5)")
        out.append(lines[i])
    out.extend(lines[where[-1] + 1:])
    return "\n".join(out)


# ------------------------------------------------------------------------------------------ code object
TARGET = "amdgcn-amd-amdhsa--gfx1201"
# The padding LLVM puts after the last kernel for gfx12 (an instruction prefetch past it reads no garbage): s_code_end
# words up to a 128-byte boundary, then 96 more
S_CODE_END = 0xBF9F0000
CODE_END_ALIGN_LOG2 = 7
CODE_END_PAD_DWORDS = 96
VCC_SGPRS = 2          # VCC is allocated from the top of the SGPR file when reserved (LLVM AMDGPUUsage)


@dataclass(frozen=True)
class KernelArg:
    """One explicit kernel argument of the metadata: name, byte offset, kind 'ptr' (8-byte global pointer), 'u64'
    (8-byte by-value) or a 4-byte by-value scalar kind ('u32', 'i32', 'f32'); pointers are read_only unless
    `written`."""
    name: str
    offset: int
    kind: str
    written: bool = False

    @property
    def size(self) -> int:
        return 8 if self.kind in ("ptr", "u64") else 4

    def yaml(self) -> str:
        if self.kind != "ptr":
            return f"{{ .name: {self.name}, .offset: {self.offset}, .size: {self.size}, .value_kind: by_value }}"
        access = "" if self.written else ", .actual_access: read_only"
        return (f"{{ .name: {self.name}, .offset: {self.offset}, .size: {self.size}, .value_kind: global_buffer, "
                f".address_space: global{access} }}")


@dataclass(frozen=True)
class KernelDescriptor:
    """What the kernel descriptor (.amdhsa_kernel) and the metadata say about one kernel symbol.

    Entry state (docs/rdna4.md §Entry): the kernarg segment pointer is the only user SGPR pair (s[0:1]);
    workgroup ids x/y/z are enabled (they arrive in ttmp9 / ttmp7 on gfx12); v0 holds the work-item id x."""
    symbol: str
    args: tuple[KernelArg, ...]
    kernarg_size: int
    next_free_vgpr: int
    next_free_sgpr: int
    max_flat_workgroup_size: int
    lds_bytes: int = 0
    reserve_vcc: bool = True
    denorm_mode: int = 3             # 3 = keep fp32 and fp16/fp64 denormals (input and output)
    inst_pref_size: int | None = None
    uniform_work_group_size: bool = False
    workgroup_id_dims: int = 3       # workgroup ids x (1), x/y (2) or x/y/z (3) enabled in the descriptor
    reqd_workgroup_size: tuple[int, int, int] | None = None   # the metadata's .reqd_workgroup_size, when fixed

    @property
    def sgpr_count(self) -> int:
        """The metadata's .sgpr_count counts the SGPRs the wave needs, VCC included when reserved (LLVM writes
        next_free_sgpr + 2 for a kernel that uses VCC), not only the named ones."""
        return self.next_free_sgpr + (VCC_SGPRS if self.reserve_vcc else 0)

    def directives(self) -> str:
        lines = [f".amdhsa_kernel {self.symbol}",
                 f"  .amdhsa_group_segment_fixed_size {self.lds_bytes}",
                 "  .amdhsa_private_segment_fixed_size 0",
                 f"  .amdhsa_kernarg_size {self.kernarg_size}",
                 "  .amdhsa_user_sgpr_count 2",
                 "  .amdhsa_user_sgpr_kernarg_segment_ptr 1",
                 "  .amdhsa_wavefront_size32 1",
                 "  .amdhsa_system_sgpr_workgroup_id_x 1",
                 f"  .amdhsa_system_sgpr_workgroup_id_y {int(self.workgroup_id_dims >= 2)}",
                 f"  .amdhsa_system_sgpr_workgroup_id_z {int(self.workgroup_id_dims >= 3)}",
                 "  .amdhsa_system_vgpr_workitem_id 0",
                 f"  .amdhsa_next_free_vgpr {self.next_free_vgpr}",
                 f"  .amdhsa_next_free_sgpr {self.next_free_sgpr}",
                 f"  .amdhsa_reserve_vcc {int(self.reserve_vcc)}",
                 f"  .amdhsa_float_denorm_mode_32 {self.denorm_mode}",
                 f"  .amdhsa_float_denorm_mode_16_64 {self.denorm_mode}"]
        if self.inst_pref_size is not None:
            lines.append(f"  .amdhsa_inst_pref_size {self.inst_pref_size}")
        lines.append(".end_amdhsa_kernel")
        return "\n".join(f"        {ln}" for ln in lines)

    def metadata(self) -> str:
        """This kernel's entry of amdhsa.kernels (YAML list item)."""
        lines = [f"  - .name:            {self.symbol}",
                 f"    .symbol:          {self.symbol}.kd",
                 f"    .kernarg_segment_size: {self.kernarg_size}",
                 "    .kernarg_segment_align: 8",
                 f"    .group_segment_fixed_size: {self.lds_bytes}",
                 "    .private_segment_fixed_size: 0",
                 "    .wavefront_size:  32",
                 f"    .sgpr_count:      {self.sgpr_count}",
                 f"    .vgpr_count:      {self.next_free_vgpr}",
                 f"    .max_flat_workgroup_size: {self.max_flat_workgroup_size}"]
        if self.reqd_workgroup_size is not None:
            lines.append(f"    .reqd_workgroup_size: [{', '.join(map(str, self.reqd_workgroup_size))}]")
        if self.uniform_work_group_size:
            lines.append("    .uniform_work_group_size: 1")
        if self.args:
            lines.append("    .args:")
            lines += [f"      - {a.yaml()}" for a in self.args]
        return "\n".join(lines)


def amdhsa_kernel(symbol: str, **kw) -> KernelDescriptor:
    """A KernelDescriptor; `args` may be given as any iterable of KernelArg."""
    kw["args"] = tuple(kw.get("args", ()))
    return KernelDescriptor(symbol, **kw)


def function(symbol: str, body: str) -> str:
    """The text section of one kernel: symbol boilerplate around `body` (instructions, already indented)."""
    return (f"""        .text
        .globl  {symbol}
        .p2align 8
        .type   {symbol},@function
{symbol}:
{body.rstrip()}
.L{symbol}_end:
        .size   {symbol}, .L{symbol}_end-{symbol}
""")


def code_end_padding() -> str:
    """The s_code_end padding after the last kernel's code (see S_CODE_END)."""
    return (f"        .p2alignl {CODE_END_ALIGN_LOG2}, 0x{S_CODE_END:X}\n"
            f"        .fill {CODE_END_PAD_DWORDS}, 4, 0x{S_CODE_END:X}")


def target_directives() -> str:
    """The target and code object version every kernel file starts with."""
    return f"""        .amdgcn_target "{TARGET}"
        .amdhsa_code_object_version {CODE_OBJECT_VERSION}"""


def descriptors_and_metadata(descs: list[KernelDescriptor]) -> str:
    """The .rodata kernel descriptors of these kernels, then the one .amdgpu_metadata block (amdhsa.kernels in
    the same order). The one writer of both: generated kernels (code_object) and the hand-written microbenchmarks
    (build_asm.py writes asm_src/generated/gfx1201_microbench_abi.s with it) share it."""
    out = ["        .rodata"]
    for desc in descs:
        out.append("        .p2align 6\n" + desc.directives())
    meta = "\n".join(d.metadata() for d in descs)
    out.append(f"""        .amdgpu_metadata
---
amdhsa.version:
  - 1
  - 2
amdhsa.target: {TARGET}
amdhsa.kernels:
{meta}
...
        .end_amdgpu_metadata""")
    return "\n".join(out)


def code_object(kernels: list[tuple[KernelDescriptor, str]], header: str = "",
                pad_with_s_code_end: bool = False) -> str:
    """A whole assembly file: target, every kernel's function, descriptors and one metadata block.
    pad_with_s_code_end: fill after the code with s_code_end as LLVM does for gfx12 (code_end_padding)."""
    out = [header.rstrip("\n")] if header else []
    out.append(target_directives())
    for desc, body in kernels:
        out.append(function(desc.symbol, body))
    if pad_with_s_code_end:
        out.append(code_end_padding())
    out.append(descriptors_and_metadata([desc for desc, _ in kernels]))
    return "\n".join(out) + "\n"
