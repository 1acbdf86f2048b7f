#!/usr/bin/env python3
"""ABI regression check for every shipped code object (maintainers' tool; decodes with sage_co.emu, no LLVM needed).

    python tools/disasm_check.py             # check snapshots, kernarg declarations, lint; print the mix
    python tools/disasm_check.py --co X.co   # lint / mix of one arbitrary code object (no snapshot)

1. Snapshot: per kernel the kernarg layout, LDS, VGPRs, wave32, denorm/round modes and the descriptor words
   (sage_co.manifest.kernel_snapshot) of the shipped bytes, compared with the one checked-in snapshot, the `kernels`
   section of hsaco/manifest.json; drift prints a diff, exit 1. An intended ABI change is accepted by
   rebuilding (python build_asm.py) and reviewing the manifest diff.
2. Kernarg declarations: the struct of every shipped symbol (sage_co/abi.py, found by the symbol's op in the
   manifest) against the code object's metadata, the same comparison the launcher makes before a first launch.
   Runs without torch (sage_co.abi and sage_co.codeobj are torch-free).
3. Lint of the decoded instructions (sage_co.emu.decode + sage_co.emu.facts) for the gfx12 rules of
   docs/rdna4.md §Hazards. The hazards software must mitigate come from the one hazard model
   (sage_co.emu.hazards, evaluated over the kernel's control-flow graph to a fixed point), one finding per site
   naming the rule, the reader, the writer and the VALU read that put the SGPR pair at risk: sgpr-salu-write,
   sgpr-valu-write, vcc-valu-write (rule 3), wmma-operand (rule 1), vcmpx-permlane (rule 5).
   Per instruction: wmma-overlap (D overlapping A or B; rule 2), barrier-without-dscnt (LDS stores in flight at
   s_barrier_signal; rule 8), scratch (any private segment or scratch_* access), vopd-illegal (docs/rdna4.md
   §Throughput VOPD rules). `--co X` lints any compiler's code object.
4. Instruction mix per kernel in the emulator's instruction classes (sage_co.emu.facts.CLASSES), printed with rich.
"""
from __future__ import annotations

import argparse
import bisect
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from sage_co import abi, codeobj
from sage_co import manifest as sage_manifest
from sage_co.emu.decode import Inst, decode
from sage_co.emu import hazards
from sage_co.emu.facts import CLASSES, class_of, facts, vopd_problem  # noqa: F401
from sage_co.emu.text import inst_text
from sage_co.manifest import kernel_snapshot

ROOT = Path(__file__).resolve().parent.parent

HSACO = ROOT / "hsaco"

# Instruction classes, reads/writes, TRANS and VOPD legality come from sage_co.emu.facts (the emulator's statistics
# and sanitizer use the same layer), so static mixes and dynamic counts line up.


# ------------------------------------------------------------------------------------------ snapshot
def snapshot(co: codeobj.CodeObject) -> dict:
    """{kernel name: its ABI snapshot} as hsaco/manifest.json records it (sage_co.manifest.kernel_snapshot)."""
    return {name: kernel_snapshot(k) for name, k in sorted(co.kernels.items())}


def diff_snapshot(old, new, path="") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        lines = []
        for key in sorted(set(old) | set(new)):
            p = f"{path}.{key}" if path else key
            if key not in new:
                lines.append(f"- {p}: {json.dumps(old[key])} (gone)")
            elif key not in old:
                lines.append(f"+ {p}: {json.dumps(new[key])} (new)")
            else:
                lines += diff_snapshot(old[key], new[key], p)
        return lines
    return [] if old == new else [f"~ {path}: snapshot {json.dumps(old)} -> now {json.dumps(new)}"]


# ------------------------------------------------------------------------------------------ disassembly
@dataclass(frozen=True)
class Line:
    addr: int                       # byte offset inside .text
    mnemonic: str                   # as llvm-objdump prints it (with _e32/_e64/_dpp)
    operands: str
    inst: Inst | None = None        # the emulator's decoded instruction (None for text parsed from llvm-objdump)

    @property
    def text(self) -> str:
        return f"{self.mnemonic} {self.operands}".strip()


_LINE = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s*(.*?)\s*//\s*([0-9A-Fa-f]+):")


def parse_objdump(text: str) -> dict[str, list[Line]]:
    """llvm-objdump -d output -> instructions per function symbol (the LLVM cross-check of `disassemble`)."""
    funcs: dict[str, list[Line]] = {}
    current = None
    for raw in text.splitlines():
        m = re.match(r"^[0-9a-f]+ <([^>]+)>:", raw)
        if m:
            current = funcs.setdefault(m.group(1), [])
            continue
        m = _LINE.match(raw)
        if m and current is not None:
            current.append(Line(int(m.group(3), 16), m.group(1), m.group(2)))
    return funcs


def decode_lines(code: bytes, base: int = 0) -> list[Line]:
    """Decoded instructions of a code blob as Lines (text exactly as llvm-objdump prints it)."""
    out, texts = [], {}
    for inst in decode(code, base):
        # the text is a function of the instruction's bytes (not of its offset: branches print the raw simm16), and
        # unrolled kernels repeat their encodings: spell each distinct one once
        key = code[inst.offset - base:inst.offset - base + inst.size]
        got = texts.get(key)
        if got is None:
            mnem, _, ops = inst_text(inst).partition(" ")
            got = texts[key] = (mnem, ops.strip())
        out.append(Line(inst.offset, got[0], got[1], inst))
    return out


def disassemble(path: Path) -> dict[str, list[Line]]:
    """Instructions per kernel symbol, decoded by the emulator's decoder (sage_co.emu; LLVM is the cross-check in
    tests/build_abi/test_disasm_check.py)."""
    co = codeobj.read(path.read_bytes(), str(path), arch=None)
    lines = decode_lines(co.text, co.text_addr)
    entries = sorted(k.entry for k in co.kernels.values()) + [len(co.text)]
    addrs = [ln.addr for ln in lines]           # ascending: one bisection per kernel instead of a scan
    funcs = {}
    for name, k in co.kernels.items():
        end = k.entry + k.code_size if k.code_size else next(e for e in entries if e > k.entry)
        lo, hi = co.text_addr + k.entry, co.text_addr + end
        funcs[name] = lines[bisect.bisect_left(addrs, lo):bisect.bisect_left(addrs, hi)]
    return funcs


def bare(mnemonic: str) -> str:
    for suf in ("_e64_dpp", "_e32", "_e64", "_dpp"):
        if mnemonic.endswith(suf):
            return mnemonic[:-len(suf)]
    return mnemonic


def classify(mnemonic: str, operands: str = "") -> str:
    """Class of an instruction given as text (sage_co.emu.facts.class_of; an atomic prints TH_ATOMIC_RETURN when it
    returns data)."""
    return class_of(bare(mnemonic), returns="TH_ATOMIC_RETURN" in operands)


def line_facts(ln: Line):
    if ln.inst is None:
        raise ValueError(f"0x{ln.addr:x}: {ln.text}: no decoded instruction (lint runs on disassemble()'s Lines)")
    return facts(ln.inst)


# ------------------------------------------------------------------------------------------ lint
LDS_WRITES = ("ds_store", "ds_write", "ds_add", "ds_sub", "ds_rsub", "ds_inc", "ds_dec", "ds_min", "ds_max",
              "ds_and", "ds_or", "ds_xor", "ds_mskor", "ds_cmpstore", "ds_cond_sub", "ds_condxchg")
DS_WAITS = {"s_wait_dscnt": lambda v: v & 0x3F, "s_wait_loadcnt_dscnt": lambda v: v & 0x3F,
            "s_wait_storecnt_dscnt": lambda v: v & 0x3F}       # docs/rdna4.md §Waits: imm = cnt << 8 | dscnt
def _jump_target(ln: Line, simm: int) -> int | None:
    """Where a direct branch goes (s_branch / s_cbranch_*: PC + 4 + simm16 * 4), None for any other instruction."""
    if ln.mnemonic == "s_branch" or ln.mnemonic.startswith("s_cbranch_"):
        return ln.addr + 4 + 4 * (simm - 0x10000 if simm & 0x8000 else simm)
    return None


def lint(lines: list[Line], kernel: codeobj.Kernel | None = None) -> list[str]:
    """The hazards of docs/rdna4.md §Hazards rules 1, 3 and 5 come from the one hazard model
    (sage_co.emu.hazards: the control-flow graph to a fixed point), one finding per site. The other rules look at
    single instructions, or (barrier-without-dscnt) follow the control flow forward: a direct branch hands its
    state to its target, and the instruction after an unconditional branch starts from only what jumps there."""
    problems = []
    lds_stores_pending = False
    jumps_in: dict[int, bool] = {}          # address -> LDS stores pending on some branch that goes there
    reachable = True                        # by falling through from the previous instruction
    if kernel is not None and (kernel.descriptor.private_segment_fixed_size or kernel.descriptor.enable_private_segment):
        problems.append(f"scratch: kernel {kernel.name} uses a private segment "
                        f"({kernel.descriptor.private_segment_fixed_size} bytes)")
    fxs = [line_facts(ln) for ln in lines]  # refuses text-only Lines; computed once per line
    texts = {ln.addr: ln.text for ln in lines}
    for f in hazards.analyze([ln.inst for ln in lines]):
        problems.append(f"hazard {f.describe(texts)}")
    for ln, fx in zip(lines, fxs):
        m, simm = fx.name, ln.inst.f.get("simm16", 0) & 0xFFFF
        incoming = jumps_in.pop(ln.addr, None)
        if not reachable or incoming is not None:   # after an unconditional branch only jumps come here
            lds_stores_pending = (lds_stores_pending and reachable) or bool(incoming)
        reachable = True
        where = f"0x{ln.addr:x}: {ln.text}"
        if fx.cls == "WMMA":
            d, a, b = fx.vgprs("vdst"), fx.vgprs("src0"), fx.vgprs("src1")
            if d & (a | b):
                problems.append(f"wmma-overlap: D overlaps A/B (docs/rdna4.md §Hazards rule 2) at {where}")
        if ln.inst.enc == "VOPD":
            why = vopd_problem(ln.inst)
            if why is not None:
                problems.append(f"vopd-illegal: {why} (docs/rdna4.md §Throughput VOPD rules) at {where}")
        if fx.cls == "LDS" and m.startswith(LDS_WRITES):
            lds_stores_pending = True
        if m == "s_wait_idle" or (m in DS_WAITS and DS_WAITS[m](simm) == 0):
            lds_stores_pending = False
        if m == "s_barrier_signal" and lds_stores_pending:
            problems.append(f"barrier-without-dscnt: LDS stores may be in flight at the barrier; add s_wait_dscnt 0x0 "
                            f"before it (docs/rdna4.md §Hazards rule 8) at {where}")
        if m.startswith("scratch_"):
            problems.append(f"scratch: scratch access at {where}")
        target = _jump_target(ln, simm)
        if target is not None and target > ln.addr:   # forward: the target starts from (at least) this state
            jumps_in[target] = jumps_in.get(target, False) or lds_stores_pending
        if m == "s_branch" or m.startswith(("s_setpc_", "s_endpgm")):
            reachable = False
    return problems


def instruction_mix(lines: list[Line]) -> Counter:
    return Counter(line_facts(ln).cls for ln in lines if ln.mnemonic != "s_code_end")


# ------------------------------------------------------------------------------------------ main
def kernarg_declarations(manifest: dict) -> dict:
    """symbol -> the KernargStruct of sage_co/abi.py for the op the manifest says that symbol serves."""
    out = {}
    for entry in manifest["code_objects"].values():
        for p in entry.get("provides", []):
            try:
                out[p["symbol"]] = abi.struct_for(p["op"])
            except LookupError:
                pass  # reported per kernel below: a shipped symbol without a declaration is a problem
    return out


def check_code_object(path: Path, recorded: dict | None, declared: dict | None,
                      mix_rows: list | None) -> tuple[list[str], int]:
    """(problems, kernels checked). recorded: the manifest's `kernels` section for this code object (None: no
    snapshot comparison). mix_rows: gets (code object, kernel, instruction mix, VGPRs, LDS bytes) per kernel (None:
    the mix is not counted)."""
    problems = []
    try:
        co = codeobj.read_file(path, arch=None)
    except codeobj.CodeObjectError as exc:
        return [str(exc)], 0
    if recorded is not None:
        for line in diff_snapshot(recorded, snapshot(co)):
            problems.append(f"{path.name}: ABI drift {line} (rebuild with build_asm.py and review the manifest)")
    if declared is not None:
        for kname, k in co.kernels.items():
            struct = declared.get(kname)
            if struct is None:
                problems.append(f"{path.name}: kernel {kname} has no kernarg struct in sage_co/abi.py for its op")
                continue
            try:
                struct.check(k.metadata, where=path.name)
            except Exception as exc:  # KernargMismatch: keep its two-layout message
                problems.append(str(exc))
    funcs = disassemble(path)
    for kname, k in co.kernels.items():
        lines = funcs.get(kname, [])
        for p in lint(lines, k):
            problems.append(f"{path.name}:{kname}: {p}")
        if mix_rows is not None:
            mix_rows.append((path.name, kname, instruction_mix(lines), k.metadata.get(".vgpr_count"),
                             k.descriptor.group_segment_fixed_size))
    return problems, len(co.kernels)


def _check_one(args) -> tuple[list[str], list, int]:
    """check_code_object in a worker process: (problems, mix rows, kernels checked)."""
    path, recorded, declared, with_mix = args
    rows = [] if with_mix else None
    problems, kernels = check_code_object(path, recorded, declared, rows)
    return problems, rows or [], kernels


def check_all(jobs: list[tuple], with_mix: bool) -> tuple[list[str], list, int]:
    """check_code_object over (path, recorded, declared) jobs, one process per core (the objects are independent;
    the hazard model's fixed point dominates), results in the jobs' order."""
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor
    work = [(p, r, d, with_mix) for p, r, d in jobs]
    workers = min(len(work), os.cpu_count() or 1)
    if workers <= 1:
        results = [_check_one(w) for w in work]
    else:
        # spawn, not fork: a host that imported torch has threads a fork would copy mid-flight
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = list(pool.map(_check_one, work))
    problems, rows, kernels = [], [], 0
    for p, r, n in results:
        problems += p
        rows += r
        kernels += n
    return problems, rows, kernels


def print_mix(rows: list) -> None:
    from rich.console import Console
    from rich.table import Table
    cols = list(CLASSES)
    table = Table(title="instruction mix (static, per kernel)")
    table.add_column("code object", no_wrap=True)
    table.add_column("kernel", no_wrap=True)
    for c in cols + ["total", "VGPRs", "LDS B"]:
        table.add_column(c, justify="right")
    for co_name, kname, mix, vgprs, lds in rows:
        table.add_row(co_name, kname, *[str(mix.get(c, 0)) for c in cols], str(sum(mix.values())), str(vgprs),
                      str(lds))
    Console(width=200).print(table)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="ABI snapshots, kernarg declarations, hazard lint, instruction mix")
    ap.add_argument("--co", type=Path, action="append", help="check this code object only (lint + mix; no snapshot)")
    ap.add_argument("--hsaco", type=Path, default=HSACO, help=argparse.SUPPRESS)
    ap.add_argument("--no-mix", action="store_true", help="do not print the instruction-mix table")
    args = ap.parse_args(argv)
    if args.co:
        jobs = [(path, None, None) for path in args.co]
    else:
        try:
            manifest = sage_manifest.read(args.hsaco / "manifest.json")
            paths = [sage_manifest.code_object_path(args.hsaco, entry["file"])
                     for entry in manifest["code_objects"].values()]
        except sage_manifest.ManifestError as exc:
            print(f"disasm_check.py: {exc}", file=sys.stderr)
            return 2
        declared = kernarg_declarations(manifest)
        jobs = [(path, entry.get("kernels", {}), declared)
                for path, entry in zip(paths, manifest["code_objects"].values())]
    problems, rows, kernels = check_all(jobs, with_mix=not args.no_mix)
    if not args.no_mix and rows:
        print_mix(rows)
    if problems:
        print(f"disasm_check.py: {len(problems)} problem(s):", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        return 1
    print(f"disasm_check.py: {kernels} kernel(s) checked: snapshots, kernarg declarations and lint clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
