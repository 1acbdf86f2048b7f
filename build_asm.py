#!/usr/bin/env python3
"""Rebuild the shipped gfx1201 code objects from asm_src/ with LLVM (clang + ld.lld; no ROCm).

    python build_asm.py            # build every entry of asm_src/kernels.toml into hsaco/, write hsaco/manifest.json
    python build_asm.py --check    # rebuild into a temporary folder; exit 1 and explain if anything differs
                                   # (code objects, manifest incl. each kernel's ABI snapshot, generated .s)
    python build_asm.py --only NAME          # (also with --check: check only these code objects)

Which symbols each code object provides (the manifest's `provides` rows) comes from sage_co/family.py (the family
declared once) or, for a one-off code object it does not name, from rows in kernels.toml. Build and --check fail when a
code object and that declaration disagree in either direction: a declared symbol missing, a symbol nobody declared,
a .hip wrapper instantiating another template than declared.

Before compiling, the build writes what the HIP sources include, generated from sage_co/abi.py and sage_co/family.py
(committed; --check compares them): asm_src/generated/sage_abi.h (constants, flag bits, selectors, one parameter /
argument list macro per kernarg struct), asm_src/generated/<source>_kernels.h (the extern "C" wrappers of the code
objects built from that source), asm_src/generated/gfx1201_microbench_abi.s (what the hand-written microbenchmarks
include: constants, kernarg offsets, descriptors, metadata) and docs/abi.md (the same ABI as tables).
hsaco/manifest.json stores each distinct
kernarg layout once (`kernarg_layouts`) and a reference per kernel (sage_co.manifest.compact / expand).

Sources by suffix:
    .s    clang --target=amdgcn-amd-amdhsa -mcpu=<arch> -c, then ld.lld -shared
    .hip  clang -x hip --offload-arch=<arch> --cuda-device-only -nogpulib -nogpuinc --no-gpu-bundle-output -O3
          (headers-free HIP written against clang builtins)
    .py   a generator: `python <file>` prints assembly on stdout, which is then built like a .s; the assembly is
          committed next to it as asm_src/<code object name>.s and --check compares it too

Builds are deterministic: sources are compiled from inside asm_src/ with relative paths, and the outputs
carry no paths or timestamps, so two builds give identical bytes (tests/build_abi/test_build_asm.py checks it).
This is a development tool: the installed sage_co package never imports it. It needs no torch (it reads the
built code objects with sage_co.codeobj, finds LLVM with sage_co.llvm; `import sage_co` loads nothing torch-dependent
eagerly). Run from the repository root, it imports this checkout's sage_co (its own folder is sys.path[0]).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sage_co import codeobj
from sage_co import family as kernel_family
from sage_co import llvm as toolchain
from sage_co import manifest as manifest_file
from sage_co.manifest import kernel_snapshot  # noqa: F401  (the manifest's per-kernel ABI record; tools use it)

ROOT = Path(__file__).resolve().parent
ASM_SRC = ROOT / "asm_src"
HSACO = ROOT / "hsaco"
KERNEL_LIST = ASM_SRC / "kernels.toml"
MANIFEST = HSACO / "manifest.json"
SUPPORTED_ARCHS = {"gfx1201"}


class BuildError(RuntimeError):
    pass


# ---------------------------------------------------------------------------------------------- LLVM
LLVM = toolchain.LLVM


def find_llvm() -> LLVM:
    """sage_co.llvm.find_llvm (SAGE_CO_LLVM=<bin dir>, then PATH, then /usr/lib/llvm-{22,21,20,19}/bin), its
    refusal raised as a BuildError."""
    try:
        return toolchain.find_llvm()
    except toolchain.LLVMNotFound as exc:
        raise BuildError(str(exc)) from None


# ---------------------------------------------------------------------------------------- kernel list
@dataclass(frozen=True)
class Entry:
    name: str
    source: str
    arch: str
    provides: tuple[dict, ...]
    src_dir: Path = ASM_SRC
    family: kernel_family.CodeObjectFamily | None = None   # sage_co/family.py's declaration (None: rows in the toml)


def read_kernel_list(path: Path = KERNEL_LIST, families: dict | None = None) -> list[Entry]:
    """The entries of a kernel list. A code object named in `families` (default sage_co.family.CODE_OBJECTS) takes its
    provides rows from there and must not list any itself; the shipped list must name every declared family."""
    if families is None:
        families = kernel_family.CODE_OBJECTS
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise BuildError(f"{path}: {exc}") from None
    entries, names = [], set()
    for i, row in enumerate(data.get("code_object", [])):
        where = f"{path.name} code_object #{i + 1}"
        for key in ("name", "source", "arch"):
            if not isinstance(row.get(key), str) or not row[key]:
                raise BuildError(f"{where}: missing string field {key!r}")
        if row["arch"] not in SUPPORTED_ARCHS:
            raise BuildError(f"{where}: arch {row['arch']!r} not supported (expected one of {sorted(SUPPORTED_ARCHS)})")
        if row["name"] in names:
            raise BuildError(f"{where}: duplicate name {row['name']!r}")
        if Path(row["source"]).suffix not in (".s", ".hip", ".py"):
            raise BuildError(f"{where}: source {row['source']!r} must end in .s, .hip or .py")
        if not (path.parent / row["source"]).is_file():
            raise BuildError(f"{where}: source {path.parent.name}/{row['source']} does not exist")
        provides = tuple(row.get("provides", []))
        declared = families.get(row["name"])
        if declared is not None:
            if provides:
                raise BuildError(f"{where}: {row['name']!r} is declared in sage_co/family.py CODE_OBJECTS; its "
                                 f"provides rows come from there, remove the {len(provides)} written here")
            provides = tuple(k.row() for k in declared.kernels)
        for p in provides:
            for key in ("op", "kernel", "symbol"):
                if not isinstance(p.get(key), str):
                    raise BuildError(f"{where}: each provides row needs string {key!r}")
            for key, value in p.items():
                if isinstance(value, bool) or not isinstance(value, (str, int)):
                    raise BuildError(f"{where}: provides {p['symbol']!r} key column {key!r} = {value!r} "
                                     "must be a string or an int")
        names.add(row["name"])
        entries.append(Entry(row["name"], row["source"], row["arch"], provides, path.parent, declared))
    if Path(path).resolve() == KERNEL_LIST.resolve():
        missing = sorted(set(families) - names)
        if missing:
            raise BuildError(f"{path.name}: sage_co/family.py CODE_OBJECTS declares {missing}, which the kernel list "
                             "does not build: add a [[code_object]] entry (name, source, arch) or drop the declaration")
    _check_key_columns(entries, path.name)
    return entries


def _check_key_columns(entries: list[Entry], where: str) -> None:
    """Every row of one (op, kernel, arch) has the same key columns and distinct values: registry.find can
    resolve any launch by keys alone."""
    groups: dict[tuple, list[dict]] = {}
    for e in entries:
        for p in e.provides:
            groups.setdefault((p["op"], p["kernel"], e.arch), []).append(p)
    for (op, kernel, arch), rows in groups.items():
        columns = {tuple(sorted(set(p) - {"op", "kernel", "symbol"})) for p in rows}
        if len(columns) > 1:
            raise BuildError(f"{where}: op {op!r} kernel {kernel!r} rows carry different key columns {sorted(columns)}")
        seen: dict[tuple, str] = {}
        for p in rows:
            key = tuple(sorted((k, v) for k, v in p.items() if k not in ("op", "kernel", "symbol")))
            if key in seen:
                raise BuildError(f"{where}: op {op!r} kernel {kernel!r}: {p['symbol']!r} and {seen[key]!r} have "
                                 f"the same keys {dict(key)}")
            seen[key] = p["symbol"]


def generated_asm_path(entry: Entry) -> Path:
    """Where the output of a .py generator is committed: asm_src/<code object name>.s."""
    return entry.src_dir / f"{entry.name}.s"


def generate(entry: Entry) -> str:
    """Run a .py generator (from inside its folder, so no path reaches the output) and return its assembly.
    Generators import the scheduling DSL (asm_src/asmdsl.py) and the ABI (sage_co.abi) from this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ASM_SRC), str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    return _run([sys.executable, entry.source], entry.src_dir, f"generator {entry.src_dir.name}/{entry.source}", env)


# ---------------------------------------------------------------------------------------- generated sources
# What build_asm.py writes from sage_co/abi.py and sage_co/family.py before it compiles (committed; --check compares
# them): below each folder holding a family .hip source, generated/sage_abi.h (the ABI: constants, selectors, one
# parameter and argument list per kernarg struct) and generated/<source>_kernels.h (the extern "C" wrappers of the
# code objects built from that source); for the shipped tree also docs/abi.md, the same ABI as tables.
GENERATED_DIR = "generated"
ABI_HEADER = "sage_abi.h"
ABI_DOC = ROOT / "docs" / "abi.md"
_BANNER = ("// Generated by build_asm.py from sage_co/abi.py and sage_co/family.py: do not edit (`python build_asm.py`\n"
           "// rewrites it, `python build_asm.py --check` compares it). docs/abi.md has the same ABI as tables.\n")


def _c_literal(name: str, value, spelling: str) -> str:
    """A constant of sage_co/abi.py HIP_CONSTANTS as a C literal."""
    if spelling == "float":
        if struct.unpack("<f", struct.pack("<f", float(value)))[0] != value:
            raise BuildError(f"sage_co/abi.py {name} = {value!r} is not exact in fp32: the header would round it")
        return f"{float(value)!r}f"
    if not isinstance(value, int) or isinstance(value, bool):
        raise BuildError(f"sage_co/abi.py {name} = {value!r}: HIP_CONSTANTS says {spelling}, expected an int")
    return {"u32": f"{value}u", "hex": f"0x{value:x}", "int": str(value)}[spelling]


def struct_macro(op: str) -> str:
    """The prefix of a kernarg struct's macros in the generated header: the op, upper case (SAGE_PREPARE_PARAMS)."""
    return re.sub(r"\W", "_", op).upper()


def hip_structs(families: dict | None = None) -> list:
    """The kernarg structs of the ops that some HIP kernel of the family serves, in first-seen order."""
    from sage_co import abi
    ops = []
    for fam in (kernel_family.CODE_OBJECTS if families is None else families).values():
        for k in fam.kernels:
            if k.kernel == "hip" and k.op not in ops:
                ops.append(k.op)
    return [abi.STRUCTS[op] for op in ops if op in abi.STRUCTS]   # (a test family's op may have none)


def _wrapped(items: list[str], indent: str, width: int = 116) -> list[str]:
    lines, cur = [], ""
    for item in items:
        if cur and len(indent) + len(cur) + len(item) + 2 > width:
            lines.append(cur + ",")
            cur = item
        else:
            cur = f"{cur}, {item}" if cur else item
    return lines + [cur]


def abi_header(families: dict | None = None) -> str:
    """generated/sage_abi.h: sage_co/abi.py HIP_CONSTANTS, sage_co/family.py HIP_SELECTORS, and per kernarg struct
    of a HIP kernel <OP>_PARAMS (the kernel's parameter declarations, in the struct's order) and <OP>_ARGS (the
    names, to forward them to the template body)."""
    from sage_co import abi
    out = [_BANNER.rstrip("\n"), "#pragma once", "",
           "// sage_co/abi.py HIP_CONSTANTS (tiles, flag bits of the attention kernarg `flags`, mask tile kinds, the",
           "// attention arithmetic's constants, the prepare statistics and fold modes, the predictor's channels)"]
    out += [f"#define {n} {_c_literal(n, getattr(abi, n), how)}" for n, how in abi.HIP_CONSTANTS.items()]
    out += ["", "// sage_co/family.py HIP_SELECTORS: the template arguments that select input / output dtype and rounding"]
    out += [f"#define {n} {v}" for n, v in kernel_family.HIP_SELECTORS.items()]
    for st in hip_structs(families):
        m = struct_macro(st.name)
        layout = _wrapped([f"{f.offset} {f.name}" for f in st.fields], "// ")
        out += ["", f"// sage_co/abi.py: the kernarg struct of {st.name}, {st.size} bytes (offset name):"]
        out += [f"//   {line}" for line in layout]
        params = [f.c_param for f in st.fields]
        out.append(f"#define {m}_PARAMS \\")
        body = _wrapped(params, "  ")
        out += [f"  {line} \\" for line in body[:-1]] + [f"  {body[-1]}"]
        args = _wrapped([f.name for f in st.fields], "  ")
        out.append(f"#define {m}_ARGS \\")
        out += [f"  {line} \\" for line in args[:-1]] + [f"  {args[-1]}"]
    return "\n".join(out) + "\n"


_INSTANCE = re.compile(r"(\w+)<(.*)>")


def kernels_header(source: str, entries: list[Entry]) -> str:
    """generated/<source stem>_kernels.h: SAGE_KERNEL(symbol, template, template arguments...) per generated wrapper
    (sage_co/family.py CodeObjectFamily.wrappers) of every code object built from `source`, each code object's lines
    under #if its compile_defines when there are several; the source defines SAGE_KERNEL (the wrapper's body)."""
    out = [_BANNER.rstrip("\n"),
           f'// The extern "C" kernels of asm_src/{source}: SAGE_KERNEL(symbol, template, template arguments...),',
           "// expanded by the SAGE_KERNEL macro that source defines before it includes this file."]
    guarded = len(entries) > 1 or any(e.family.compile_defines for e in entries)
    names = sorted({k for e in entries for k in e.family.compile_defines})
    for i, e in enumerate(entries):
        if guarded:
            cond = " && ".join(f"{k} == {v}" for k, v in e.family.compile_defines.items()) or "1"
            out.append(f"#{'if' if i == 0 else 'elif'} {cond}  // {e.name}")
        for k in e.family.wrappers:
            m = _INSTANCE.fullmatch(k.hip_instance)
            if m is None:
                raise BuildError(f"{e.name}: sage_co/family.py instance {k.hip_instance!r} of {k.symbol} is not "
                                 "`template<args>`")
            keys = " ".join(f"{c}={v}" for c, v in k.keys)
            out.append(f"SAGE_KERNEL({k.symbol}, {m.group(1)}, {m.group(2)})  // {keys}")
    if guarded:
        out += ["#else",
                f'#error "{source}: no code object selected (-D{", -D".join(names)}): build it through build_asm.py"',
                "#endif"]
    return "\n".join(out) + "\n"


def abi_doc() -> str:
    """docs/abi.md: every kernarg struct of sage_co/abi.py (offset, size, kind, HIP type, name), the header's
    constants and selectors."""
    from sage_co import abi
    from sage_co.kernargs import KINDS
    out = ["# The kernel ABI", "",
           "<!-- Generated by build_asm.py from sage_co/abi.py and sage_co/family.py: do not edit (`python build_asm.py`",
           "rewrites it, `python build_asm.py --check` compares it). -->", "",
           "Every shipped kernel takes one kernarg struct of `sage_co/abi.py` (the manifest's `op` column picks it).",
           "Fields are laid out in declaration order, each at the next offset that is a multiple of its size",
           "(docs/rdna4.md §Entry); the size is the end of the last field. No kernel has hidden arguments. The loader",
           "compares each struct with a symbol's code-object metadata before its first launch, and",
           "`tools/disasm_check.py` does so for every shipped symbol. The HIP kernels take their parameter lists",
           f"and the constants below from `asm_src/{GENERATED_DIR}/{ABI_HEADER}`, the hand-written microbenchmarks",
           f"their constants, kernarg offsets, descriptors and metadata from `asm_src/{GENERATED_DIR}/"
           f"{Path(MICROBENCH_SOURCE).stem}_abi.s`,",
           "both generated from the same module; the asm attention generator emits its kernarg loads and metadata",
           "from the structs.",
           "What each field holds: the comments of its declaration in `sage_co/abi.py`.", ""]
    for op, st in abi.STRUCTS.items():
        out += [f"## `{op}` ({st.size} bytes)", "", "| offset | size | kind | HIP parameter | name |",
                "|-------:|-----:|------|---------------|------|"]
        for f in st.fields:
            ctype = f.c_param.removesuffix(f.name).strip() if (f.ctype or f.kind != "ptr") else "(assembly)"
            out.append(f"| {f.offset} | {f.size} | {f.kind} ({KINDS[f.kind][2]}) | `{ctype}` | `{f.name}` |")
        out.append("")
    out += ["## Constants of the HIP header", "", "| name | value | sage_co/abi.py |", "|------|------:|----|"]
    out += [f"| `{n}` | `{_c_literal(n, getattr(abi, n), how)}` | `{n}` |" for n, how in abi.HIP_CONSTANTS.items()]
    out += ["", "## Template selectors (sage_co/family.py)", "", "| name | value |", "|------|------:|"]
    out += [f"| `{n}` | {v} |" for n, v in kernel_family.HIP_SELECTORS.items()]
    return "\n".join(out) + "\n"


# The hand-written microbenchmarks (asm_src/gfx1201_microbench.s) `.include` generated/gfx1201_microbench_abi.s: the
# target, sage_co/abi.py MICROBENCH_ASM_CONSTANTS and the kernarg offsets of MICROBENCH_ARGS as `.set` lines, and
# the macros CODE_END_PADDING (asmdsl's s_code_end padding) and MICROBENCH_DESCRIPTORS (every kernel's descriptor
# and the metadata, one entry per MICROBENCH_BENCHES symbol, written by asmdsl's one descriptor / metadata writer),
# which the source expands after its code.
# Their register budget is the kernel's own (the register map in the source's header says what each register
# holds): stated here once, the descriptors and the metadata both take it.
MICROBENCH_SOURCE = "gfx1201_microbench.s"
MICROBENCH_VGPRS = 72             # v[64:71], the LDS fill staging, is the last range
MICROBENCH_SGPRS = 24             # s[0:21] (the l2_stream window registers are the last), rounded up
MICROBENCH_SGPRS_BY_BENCH = {"clock": 26}   # s[22:25]: the clock kernel's counter reads


def _asmdsl():
    """asm_src/asmdsl.py, the one writer of kernel descriptors and metadata (asm_src/ is not a package: the
    generators import it from their folder; this loads it from its file, once)."""
    import importlib.util
    if "asmdsl" not in sys.modules:
        spec = importlib.util.spec_from_file_location("asmdsl", ROOT / "asm_src" / "asmdsl.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["asmdsl"] = module
        spec.loader.exec_module(module)
    return sys.modules["asmdsl"]


def karg_symbol(name: str) -> str:
    """The assembler name of a kernarg field's offset in a generated include: KARG_<FIELD>."""
    return f"KARG_{name.upper()}"


def microbench_abi(entry: Entry) -> str:
    """generated/gfx1201_microbench_abi.s (see MICROBENCH_SOURCE) for the code object `entry`, whose provides rows
    name one symbol per sage_co/abi.py MICROBENCH_BENCHES (key column bench)."""
    from sage_co import abi
    dsl = _asmdsl()
    st = abi.MICROBENCH_ARGS
    symbols = {p.get("bench"): p["symbol"] for p in entry.provides if p["op"] == abi.MICROBENCH_OP}
    if set(symbols) != set(abi.MICROBENCH_BENCHES):
        raise BuildError(f"{entry.name}: its provides rows name the benches {sorted(map(str, symbols))}, sage_co/abi.py "
                         f"MICROBENCH_BENCHES {sorted(abi.MICROBENCH_BENCHES)}: one row per bench")
    width = max(len(n) for n in [*abi.MICROBENCH_ASM_CONSTANTS, *(karg_symbol(f.name) for f in st.fields)])
    out = [_BANNER.replace("and sage_co/family.py", "(and asm_src/asmdsl.py)").rstrip("\n"),
           f"// The ABI of asm_src/{MICROBENCH_SOURCE}, which includes this file first and expands",
           "// CODE_END_PADDING and MICROBENCH_DESCRIPTORS after its code.", "", dsl.target_directives(), "",
           "// sage_co/abi.py MICROBENCH_ASM_CONSTANTS (the assembly's name, the value of the abi name)"]
    for name, src in abi.MICROBENCH_ASM_CONSTANTS.items():
        value = getattr(abi, src)
        if not isinstance(value, int) or isinstance(value, bool):
            raise BuildError(f"sage_co/abi.py {src} = {value!r}: MICROBENCH_ASM_CONSTANTS needs an int")
        out.append(f"        .set {name + ',':<{width + 1}} {value:<5} // {src}")
    out += ["", f"// sage_co/abi.py MICROBENCH_ARGS: the kernarg offset of each field, then the size ({st.size} bytes)"]
    for f in st.fields:
        name = karg_symbol(f.name)
        out.append(f"        .set {name + ',':<{width + 1}} {f.offset:<5} // {f.kind} {f.name}")
    out.append(f"        .set {'KARG_SIZE,':<{width + 1}} {st.size}")
    descs = [dsl.amdhsa_kernel(
        symbols[bench],
        args=[dsl.KernelArg(f.name, f.offset, f.kind, written=f.name in abi.MICROBENCH_OUTPUTS) for f in st.fields],
        kernarg_size=st.size, lds_bytes=abi.MICROBENCH_LDS_BYTES if bench in abi.MICROBENCH_LDS_BENCHES else 0,
        next_free_vgpr=MICROBENCH_VGPRS, next_free_sgpr=MICROBENCH_SGPRS_BY_BENCH.get(bench, MICROBENCH_SGPRS),
        max_flat_workgroup_size=abi.MICROBENCH_BLOCK[0], reqd_workgroup_size=abi.MICROBENCH_BLOCK,
        reserve_vcc=False, uniform_work_group_size=True, workgroup_id_dims=1) for bench in abi.MICROBENCH_BENCHES]
    out += ["", "// The padding after the last kernel's code (asm_src/asmdsl.py code_end_padding)",
            ".macro CODE_END_PADDING", dsl.code_end_padding(), ".endm"]
    out += ["", "// The descriptors (LDS: MICROBENCH_LDS_BENCHES) and the metadata of every MICROBENCH_BENCHES kernel",
            ".macro MICROBENCH_DESCRIPTORS", dsl.descriptors_and_metadata(descs), ".endm"]
    return "\n".join(out) + "\n"


def generated_files(entries: list[Entry]) -> dict[Path, str]:
    """path -> text of every file build_asm.py generates for these entries (see GENERATED_DIR)."""
    files: dict[Path, str] = {}
    by_source: dict[tuple[Path, str], list[Entry]] = {}
    for e in entries:
        if e.family is not None and Path(e.source).suffix == ".hip":
            by_source.setdefault((e.src_dir, e.source), []).append(e)
    families = {e.name: e.family for group in by_source.values() for e in group}
    for (src_dir, source), group in by_source.items():
        files[src_dir / GENERATED_DIR / ABI_HEADER] = abi_header(families)
        if any(e.family.wrappers for e in group):
            files[src_dir / GENERATED_DIR / f"{Path(source).stem}_kernels.h"] = kernels_header(source, group)
        if src_dir.resolve() == ASM_SRC.resolve():
            files[ABI_DOC] = abi_doc()
    for e in entries:
        if e.source == MICROBENCH_SOURCE:
            files[e.src_dir / GENERATED_DIR / f"{Path(e.source).stem}_abi.s"] = microbench_abi(e)
    return files


def write_generated(entries: list[Entry]) -> None:
    """Write generated_files (only those whose text changed: the sources' mtimes stay put otherwise)."""
    for path, text in generated_files(entries).items():
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


def generated_problems(entries: list[Entry]) -> list[str]:
    """The generated files that are missing or differ from what sage_co/abi.py and sage_co/family.py give now."""
    problems = []
    for path, text in generated_files(entries).items():
        rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        if not path.exists():
            problems.append(f"{rel} is not generated: run python build_asm.py and commit it")
        elif path.read_text() != text:
            old, new = path.read_text().splitlines(), text.splitlines()
            first = next((i for i, (x, y) in enumerate(zip(old, new)) if x != y), min(len(old), len(new)))
            problems.append(f"{rel} is not what sage_co/abi.py and sage_co/family.py generate (first difference "
                            f"at line {first + 1}: committed {old[first] if first < len(old) else '<end>'!r}, "
                            f"generated {new[first] if first < len(new) else '<end>'!r})")
    return problems


# ---------------------------------------------------------------------------------------- building
def _run(cmd: list[str], cwd: Path, what: str, env: dict | None = None) -> str:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise BuildError(f"{what} failed (exit {proc.returncode}):\n  {' '.join(map(str, cmd))}\n{proc.stderr.strip()}")
    return proc.stdout


def compile_defines(entry: Entry) -> list[str]:
    """The -DNAME=VALUE arguments of a .hip entry: sage_co/family.py CodeObjectFamily.compile_defines, which pick
    the part of a shared source this code object instantiates (e.g. PREPARE_D_PAD for the prepare objects)."""
    return [f"-D{k}={v}" for k, v in (entry.family.compile_defines if entry.family else {}).items()]


def hip_flags(entry: Entry) -> list[str]:
    """clang's arguments for a .hip entry, but the output and the source (its inputs_sha256 hashes them)."""
    return ["-x", "hip", f"--offload-arch={entry.arch}", "--cuda-device-only", "-nogpulib", "-nogpuinc",
            "--no-gpu-bundle-output", "-O3",
            # code object v5: every supported ROCm loads it (v6 needs ROCr 6.2+; docs/rdna4.md §Code object)
            f"-mcode-object-version={codeobj.CODE_OBJECT_VERSION}",
            # keep argument names so the metadata (.args[].name) can be checked against Python
            "-fno-discard-value-names",
            # clang derives the HIP compilation-unit id from paths (incl. the temp output): pin it
            f"-cuid={entry.name}", *compile_defines(entry)]


def inputs_sha256(entry: Entry, preprocessed: str) -> str:
    """What a .hip entry's bytes are a function of: clang's arguments and the preprocessed source (preprocess():
    every include and define resolved; no line markers, so no paths). The LLVM version is recorded beside it."""
    h = hashlib.sha256("\0".join(hip_flags(entry)).encode())
    h.update(b"\0" + preprocessed.encode())
    return h.hexdigest()


def build_one(entry: Entry, llvm: LLVM, out_dir: Path, generated: str | None = None) -> Path:
    """Build one code object into out_dir/<arch>/<name>.co and return its path. `generated`: the assembly a .py
    source printed, when the caller already ran it."""
    out = out_dir / entry.arch / f"{entry.name}.co"
    out.parent.mkdir(parents=True, exist_ok=True)
    src = Path(entry.source)
    with tempfile.TemporaryDirectory(prefix="sage_co_build_") as tmp:
        tmp = Path(tmp)
        if src.suffix == ".hip":
            _run([llvm.clang, *hip_flags(entry), "-o", tmp / "out.co", src],
                 entry.src_dir, f"compiling {entry.src_dir.name}/{src}")
            shutil.copyfile(tmp / "out.co", out)
            return out
        if src.suffix == ".py":
            asm = generate(entry) if generated is None else generated
            asm_file = tmp / f"{entry.name}.s"
            asm_file.write_text(asm)
            # assemble from the temp dir under a fixed relative name so no path reaches the object
            cwd, asm_arg = tmp, asm_file.name
        else:
            cwd, asm_arg = entry.src_dir, src
        _run([llvm.clang, "--target=amdgcn-amd-amdhsa", f"-mcpu={entry.arch}", "-c", "-o", tmp / "out.o", asm_arg],
             cwd, f"assembling asm_src/{src}")
        _run([llvm.lld, "-shared", "-o", tmp / "out.co", tmp / "out.o"], cwd, f"linking asm_src/{src}")
        shutil.copyfile(tmp / "out.co", out)
    return out


def read_code_object(data: bytes, name: str, arch: str | None):
    """The runtime reader (sage_co.codeobj, torch-free): the manifest is what the runtime will see."""
    return codeobj.read(data, name, arch=arch)


# ---------------------------------------------------------------------------------------- family check
_EXTERN_C = re.compile(r'extern\s+"C"[^;{]*?\bvoid\s+(\w+)\s*\(')
_TEMPLATE_CALL = re.compile(r"\b(\w+)\s*<([^<>;{}()]*)>\s*\(")


def _closing(text: str, at: int, open_: str, close: str) -> int:
    """Index just past the bracket that closes the one at text[at]."""
    depth = 0
    for i in range(at, len(text)):
        depth += (text[i] == open_) - (text[i] == close)
        if depth == 0:
            return i + 1
    return len(text)


def hip_instances(preprocessed: str) -> dict[str, str | None]:
    """Every extern "C" kernel defined in preprocessed HIP -> the first template call of its body, normalised
    ("attention<128, false, true>"), or None when the body calls no template (a kernel written out)."""
    out = {}
    for m in _EXTERN_C.finditer(preprocessed):
        params_end = _closing(preprocessed, m.end() - 1, "(", ")")
        brace = preprocessed.find("{", params_end)
        if brace < 0 or preprocessed[params_end:brace].strip().endswith(";"):
            continue                       # a declaration, not a definition
        body = preprocessed[brace:_closing(preprocessed, brace, "{", "}")]
        call = _TEMPLATE_CALL.search(body)
        out[m.group(1)] = (f"{call.group(1)}<{', '.join(a.strip() for a in call.group(2).split(','))}>"
                           if call else None)
    return out


def family_problems(entry: Entry, kernels, llvm: LLVM, preprocessed: str | None = None) -> list[str]:
    """How the built code object (its kernel names `kernels`) and its source disagree with what the entry declares
    (sage_co/family.py, or the toml's provides rows), in both directions: a declared symbol missing, a symbol no
    row declares, a .hip wrapper calling another template instance than declared. Empty: they agree. A code object
    that declares no rows at all is not checked."""
    problems = []
    where = "sage_co/family.py" if entry.family is not None else "asm_src/kernels.toml"
    declared = [p["symbol"] for p in entry.provides]
    if declared:
        for sym in declared:
            if sym not in kernels:
                problems.append(f"{entry.name}: {where} declares symbol {sym!r}, but the code object built from "
                                f"{entry.source} does not hold it (it holds {sorted(kernels)})")
        for sym in sorted(set(kernels) - set(declared)):
            problems.append(f"{entry.name}: the code object built from {entry.source} holds symbol {sym!r}, which "
                            f"{where} does not declare (declare it, or stop instantiating it)")
    fam = entry.family
    if fam is None or Path(entry.source).suffix != ".hip":
        return problems
    instances = hip_instances(preprocessed if preprocessed is not None else preprocess(entry, llvm))
    for k in fam.kernels:
        if k.hip_instance is not None and k.symbol in instances and instances[k.symbol] != k.hip_instance:
            problems.append(f"{entry.name}: {entry.source} defines {k.symbol} as a call of "
                            f"{instances[k.symbol] or 'no template'}, but sage_co/family.py declares "
                            f"{k.hip_instance} for its keys {dict(k.keys)}")
    return problems


def preprocess(entry: Entry, llvm: LLVM) -> str:
    """A .hip entry's source after the preprocessor, with its compile_defines: the wrappers it instantiates."""
    return _run([llvm.clang, "-x", "hip", f"--offload-arch={entry.arch}", "--cuda-device-only", "-nogpulib",
                 "-nogpuinc", *compile_defines(entry), "-E", "-P", entry.source], entry.src_dir,
                f"preprocessing {entry.src_dir.name}/{entry.source}")


def manifest_entry(entry: Entry, co_path: Path, llvm: LLVM, problems: list[str] | None = None) -> dict:
    """What the manifest records for one code object, read back from the built bytes. Disagreements with the
    declared family (family_problems) go to `problems`, or raise BuildError when it is None."""
    data = co_path.read_bytes()
    co = read_code_object(data, f"{entry.arch}/{co_path.name}", entry.arch)
    kernels = {kname: kernel_snapshot(k) for kname, k in sorted(co.kernels.items())}
    hip = Path(entry.source).suffix == ".hip"
    preprocessed = preprocess(entry, llvm) if hip else None     # once: the family check and inputs_sha256
    found = family_problems(entry, set(kernels), llvm, preprocessed)
    if found and problems is None:
        raise BuildError("\n  ".join(found))
    if problems is not None:
        problems += found
    out = {
        "file": f"{entry.arch}/{co_path.name}",
        "source": f"{entry.src_dir.name}/{entry.source}",
        "arch": entry.arch,
        "sha256": hashlib.sha256(data).hexdigest(),
        "code_object_version": co.code_object_version,
        "llvm_version": llvm.version,
        **({"compile_defines": dict(entry.family.compile_defines)} if entry.family and entry.family.compile_defines
           else {}),
        "provides": [dict(p) for p in entry.provides],
        "kernels": kernels,
    }
    if Path(entry.source).suffix == ".py":
        out["generated"] = f"{entry.src_dir.name}/{generated_asm_path(entry).name}"
    if hip:
        out["inputs_sha256"] = inputs_sha256(entry, preprocessed)
    return out


def _build_entry(e: Entry, llvm: LLVM, out_dir: Path, asm_dir: Path | None, problems: list[str] | None = None,
                 shipped: Path | None = None) -> dict:
    """Build one entry; a generator's assembly is also written to asm_dir/<name>.s (None: not written).
    problems: where family disagreements go (None: they raise BuildError). shipped: the hsaco/ folder whose bytes
    stand in for compiling a .hip entry (check --quick: its manifest entry, inputs_sha256 included, is then made
    from those bytes and today's sources)."""
    if shipped is not None and Path(e.source).suffix == ".hip" and (shipped / e.arch / f"{e.name}.co").exists():
        out = out_dir / e.arch / f"{e.name}.co"
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shipped / e.arch / f"{e.name}.co", out)
        return manifest_entry(e, out, llvm, problems)
    generated = None
    if Path(e.source).suffix == ".py":
        generated = generate(e)
        if asm_dir is not None:
            (asm_dir / f"{e.name}.s").write_text(generated)
    return manifest_entry(e, build_one(e, llvm, out_dir, generated), llvm, problems)


def build_all(entries: list[Entry], llvm: LLVM, out_dir: Path, progress: bool = True,
              asm_dir: Path | None = None, problems: list[str] | None = None, verb: str = "building",
              shipped: Path | None = None) -> dict:
    """Build every entry into out_dir; generators' assembly goes to asm_dir (None: each entry's own folder).
    problems: collects the disagreements with the declared family (None: the first one raises BuildError).
    The entries build concurrently, one thread per core: each is a clang/lld subprocess in its own temp folder, so
    the code objects overlap (the HIP attention compile is the long one); results, problems and the first error keep
    the entries' order."""
    def build(e: Entry):
        found = None if problems is None else []
        start = time.monotonic()
        result = _build_entry(e, llvm, out_dir, asm_dir or e.src_dir, found, shipped), found
        if progress and bar is None:   # a line per finished object: the prepare ones take minutes on 2 cores
            print(f"  {e.name} done in {time.monotonic() - start:.0f} s", file=sys.stderr)
        return result

    manifest = {"format": 1, "code_objects": {}}
    bar = None
    with contextlib.ExitStack() as stack:
        if progress and sys.stderr.isatty():
            from rich.progress import Progress
            bar = stack.enter_context(Progress(transient=True))
            task = bar.add_task(f"{verb} {len(entries)} code objects", total=len(entries))
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=max(1, min(len(entries), os.cpu_count() or 1))))
        futures = []
        for e in entries:
            if progress and bar is None:
                print(f"  {verb} {e.name} ({e.source})", file=sys.stderr)
            futures.append(pool.submit(build, e))
            if bar is not None:
                futures[-1].add_done_callback(lambda _: bar.advance(task))
        for e, future in zip(entries, futures):
            entry, found = future.result()
            manifest["code_objects"][e.name] = entry
            if found:
                problems.extend(found)
    return manifest


def write_manifest(manifest: dict, path: Path) -> None:
    """Write the manifest with each distinct kernarg layout stored once (sage_co.manifest.compact)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest_file.compact(manifest), indent=2, sort_keys=True) + "\n")


# ---------------------------------------------------------------------------------------- check
def _diff_dicts(a, b, path="") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            if key not in a:
                out.append(f"{path}{key}: missing from the checked-in manifest")
            elif key not in b:
                out.append(f"{path}{key}: the rebuild no longer produces it")
            else:
                out += _diff_dicts(a[key], b[key], f"{path}{key}.")
        return out
    if a != b:
        return [f"{path.rstrip('.')}: checked in {json.dumps(a)}, rebuilt {json.dumps(b)}"]
    return []


def check(entries: list[Entry], llvm: LLVM, hsaco: Path = HSACO, only: set[str] | None = None,
          every_entry: list[Entry] | None = None, quick: bool = False) -> list[str]:
    """Rebuild into a temporary folder; return a readable list of differences (empty = all match).
    only: check just these code objects (the rest of the manifest is not compared). every_entry: the whole kernel
    list (default `entries`), which the generated files are made from (a source's wrappers list all its objects).
    quick: the .hip entries are not compiled; each must have the inputs it was built from (inputs_sha256: clang's
    arguments and the preprocessed source) and its recorded sha256, and the LLVM that built it. The assembled and
    generated entries are rebuilt byte for byte either way."""
    problems = []
    manifest_path = hsaco / "manifest.json"
    checked_in = None
    if not manifest_path.exists():
        problems.append(f"{manifest_path} does not exist: run python build_asm.py and commit hsaco/")
    else:
        try:
            checked_in = manifest_file.read(manifest_path)
        except manifest_file.ManifestError as exc:   # truncated or malformed: say so, compare the bytes anyway
            problems.append(f"{exc}; run python build_asm.py and commit hsaco/")
    problems += generated_problems(entries if every_entry is None else every_entry)
    with tempfile.TemporaryDirectory(prefix="sage_co_check_") as tmp:
        asm_dir = Path(tmp) / "asm"
        asm_dir.mkdir()
        rebuilt = build_all(entries, llvm, Path(tmp), progress=True, asm_dir=asm_dir, problems=problems,
                            verb="rebuilding" if not quick else "checking", shipped=hsaco if quick else None)
        for e in entries:
            if Path(e.source).suffix != ".py":
                continue
            committed, fresh = generated_asm_path(e), (asm_dir / f"{e.name}.s").read_text()
            if not committed.exists():
                problems.append(f"{e.name}: the generated assembly {e.src_dir.name}/{committed.name} is not committed")
            elif committed.read_text() != fresh:
                old, new = committed.read_text().splitlines(), fresh.splitlines()
                first = next((i for i, (x, y) in enumerate(zip(old, new)) if x != y), min(len(old), len(new)))
                problems.append(f"{e.name}: {e.src_dir.name}/{committed.name} is not what {e.source} generates "
                                f"(first difference at line {first + 1}: committed "
                                f"{old[first] if first < len(old) else '<end>'!r}, generated "
                                f"{new[first] if first < len(new) else '<end>'!r})")
        for name, new in rebuilt["code_objects"].items():
            shipped = hsaco / new["file"]
            if not shipped.exists():
                problems.append(f"{name}: hsaco/{new['file']} is missing (source {new['source']})")
                continue
            old_bytes, new_bytes = shipped.read_bytes(), (Path(tmp) / new["file"]).read_bytes()
            if old_bytes != new_bytes:
                first = next((i for i, (x, y) in enumerate(zip(old_bytes, new_bytes)) if x != y),
                             min(len(old_bytes), len(new_bytes)))
                problems.append(
                    f"{name}: hsaco/{new['file']} does not match its source {new['source']} "
                    f"(shipped {len(old_bytes)} bytes sha256 {hashlib.sha256(old_bytes).hexdigest()[:12]}, "
                    f"rebuilt {len(new_bytes)} bytes sha256 {new['sha256'][:12]}, first difference at byte 0x{first:x})")
        if checked_in is not None:
            old_objs, new_objs = checked_in.get("code_objects", {}), rebuilt["code_objects"]
            if only is not None:
                old_objs = {k: v for k, v in old_objs.items() if k in only}
            for name in sorted(set(old_objs) - set(new_objs)):
                problems.append(f"{name}: in hsaco/manifest.json but not in asm_src/kernels.toml")
            for name in sorted(set(new_objs) & set(old_objs)):
                old_in, new_in = old_objs[name].get("inputs_sha256"), new_objs[name].get("inputs_sha256")
                if new_in is not None and old_in != new_in:
                    problems.append(f"{name}: its inputs changed since hsaco/ was built ({new_objs[name]['source']} "
                                    f"preprocessed with its defines, or clang's arguments): recompile it")
                if quick and new_in is not None and old_objs[name].get("llvm_version") != llvm.version:
                    problems.append(f"{name}: built with LLVM {old_objs[name].get('llvm_version')}, this LLVM is "
                                    f"{llvm.version}: the quick check cannot vouch for its bytes (run --check)")
                for line in _diff_dicts(old_objs[name], new_objs[name]):
                    problems.append(f"{name}: manifest {line}")
            for name in sorted(set(new_objs) - set(old_objs)):
                problems.append(f"{name}: missing from hsaco/manifest.json")
    if problems and checked_in is not None:
        built_with = {o.get("llvm_version") for o in checked_in.get("code_objects", {}).values()}
        if built_with and built_with != {llvm.version}:
            problems.append(f"note: the shipped objects were built with LLVM {sorted(built_with)}, "
                            f"this check used LLVM {llvm.version}; a different LLVM may explain byte differences")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="verify hsaco/ matches asm_src/ (no files written)")
    ap.add_argument("--only", metavar="NAME", action="append", help="build only these code objects")
    ap.add_argument("--quick", action="store_true",
                    help="with --check: compare the compiled (.hip) objects by their recorded inputs (preprocessed "
                         "source, clang's arguments, LLVM version) and bytes instead of recompiling them; the "
                         "assembled ones are rebuilt")
    ap.add_argument("--kernels", type=Path, default=KERNEL_LIST, help=argparse.SUPPRESS)  # tests: another kernel list
    ap.add_argument("--out", type=Path, default=HSACO, help=argparse.SUPPRESS)             # tests: another hsaco dir
    args = ap.parse_args(argv)
    hsaco, manifest_path = args.out, args.out / "manifest.json"
    try:
        llvm = find_llvm()
        entries = read_kernel_list(args.kernels)
        if args.only:
            unknown = set(args.only) - {e.name for e in entries}
            if unknown:
                raise BuildError(f"--only: unknown code object(s) {sorted(unknown)}; known: {[e.name for e in entries]}")
        if args.quick and not args.check:
            raise BuildError("--quick: only with --check")
        if args.check:
            only = set(args.only) if args.only else None
            checked = [e for e in entries if only is None or e.name in only]
            problems = check(checked, llvm, hsaco, only, entries, quick=args.quick)
            if problems:
                print("build_asm.py --check: the shipped code objects do not match their sources:", file=sys.stderr)
                for p in problems:
                    print(f"  - {p}", file=sys.stderr)
                print("Rebuild with `python build_asm.py` and commit hsaco/ together with asm_src/.", file=sys.stderr)
                return 1
            how = " (compiled ones by their inputs)" if args.quick else ""
            print(f"build_asm.py --check: {len(checked)} code objects match their sources{how} (LLVM {llvm.version})")
            return 0
        write_generated(entries)
        manifest = build_all(entries if not args.only else [e for e in entries if e.name in args.only], llvm, hsaco)
        if args.only and manifest_path.exists():  # keep the other entries, replace the rebuilt ones
            try:
                merged = manifest_file.read(manifest_path)
            except manifest_file.ManifestError as exc:
                raise BuildError(f"--only keeps the other entries of the manifest, but {exc}; "
                                 f"rebuild everything (python build_asm.py)") from None
            merged.setdefault("code_objects", {}).update(manifest["code_objects"])
            manifest = merged
        known = {f"{e.arch}/{e.name}.co" for e in entries}
        for stale in sorted(hsaco.glob("*/*.co")):
            if f"{stale.parent.name}/{stale.name}" not in known:
                stale.unlink()
                print(f"  removed {stale} (no longer in the kernel list)", file=sys.stderr)
        manifest["code_objects"] = {k: v for k, v in manifest["code_objects"].items()
                                    if k in {e.name for e in entries}}
        write_manifest(manifest, manifest_path)
        print(f"built {len(manifest['code_objects'])} code objects with LLVM {llvm.version} -> {hsaco}")
        return 0
    except BuildError as exc:
        print(f"build_asm.py: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
