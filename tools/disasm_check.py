#!/usr/bin/env python3
"""ABI regression check for every shipped code object (maintainers' tool; uses LLVM's llvm-objdump).

    python tools/disasm_check.py             # check snapshots, kernarg declarations, lint; print the mix
    python tools/disasm_check.py --co X.co   # lint / mix of one arbitrary code object (no snapshot)

1. Snapshot: per kernel the kernarg layout, LDS, VGPRs, wave32, denorm/round modes and the descriptor words
   (build_asm.kernel_snapshot) of the shipped bytes, compared with the one checked-in snapshot, the `kernels`
   section of hsaco/manifest.json; drift prints a diff, exit 1. An intended ABI change is accepted by
   rebuilding (python build_asm.py) and reviewing the manifest diff.
2. Kernarg declarations: the struct of every shipped symbol (sage_co/abi.py, found by the symbol's op in the
   manifest) against the code object's metadata, the same comparison the launcher makes before a first launch.
   Runs without torch (sage_co.abi and sage_co.codeobj are torch-free).
3. Lint of the llvm-objdump disassembly for the gfx12 rules of docs/rdna4.md §Hazards:
   wmma-operand-hazard (a WMMA reading the previous WMMA's D as A/B with no VALU between; rule 1),
   wmma-overlap (D overlapping A or B; rule 2), valu-sgpr-hazard (an SGPR read by a VALU, rewritten by an
   SALU, then read again without s_wait_alu depctr_sa_sdst(0); rule 3), legacy-barrier (s_barrier is
   rejected on gfx12), barrier-without-dscnt (LDS stores in flight at s_barrier_signal; rule 8), scratch
   (any private segment or scratch_* access).
4. Instruction mix per kernel in the emulator's instruction classes (CLASSES), printed with rich.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from build_asm import BuildError, find_llvm, kernel_snapshot  # noqa: E402
from sage_co import abi, codeobj  # noqa: E402

HSACO = ROOT / "hsaco"

TRANS_PREFIXES = ("v_exp_", "v_log_", "v_rcp_", "v_rsq_", "v_sqrt_", "v_sin_", "v_cos_")
# Instruction classes, named like the emulator's run statistics (sage_co/emu/executor.py) so static mixes and
# dynamic counts line up (tools/perf_model.py uses both).
CLASSES = ("WMMA", "VALU", "TRANS", "SALU", "VMEM_LOAD", "VMEM_STORE", "LDS", "SMEM", "BRANCH", "WAIT_OTHER")


# ------------------------------------------------------------------------------------------ snapshot
def snapshot(co: codeobj.CodeObject) -> dict:
    """{kernel name: its ABI snapshot} as hsaco/manifest.json records it (build_asm.kernel_snapshot)."""
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
    mnemonic: str
    operands: str

    @property
    def text(self) -> str:
        return f"{self.mnemonic} {self.operands}".strip()


_LINE = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s*(.*?)\s*//\s*([0-9A-Fa-f]+):")


def parse_objdump(text: str) -> dict[str, list[Line]]:
    """llvm-objdump -d output -> instructions per function symbol."""
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


def disassemble(path: Path, llvm) -> dict[str, list[Line]]:
    """llvm-objdump -d, split per function symbol."""
    out = subprocess.run([str(llvm.tool("llvm-objdump")), "-d", "--mcpu=gfx1201", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return parse_objdump(out)


_REG = re.compile(r"\b([vs])(?:\[(\d+):(\d+)\]|(\d+)(?!\w))")


def regs(operand: str, kind: str) -> set[int]:
    """Register numbers of one operand string, e.g. 'v[8:15]' -> {8..15}."""
    out = set()
    for m in _REG.finditer(operand):
        if m.group(1) != kind:
            continue
        lo = int(m.group(2) if m.group(2) is not None else m.group(4))
        hi = int(m.group(3)) if m.group(3) is not None else lo
        out.update(range(lo, hi + 1))
    return out


def split_operands(operands: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in operands:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    # drop trailing modifiers glued to the last operand ("0 neg_lo:[1,1,0]")
    if parts:
        parts[-1] = parts[-1].split(" ")[0]
    return parts


def classify(mnemonic: str) -> str:
    m = mnemonic
    if m.startswith(("v_wmma", "v_swmmac")):
        return "WMMA"
    if m.startswith(TRANS_PREFIXES):
        return "TRANS"
    if m.startswith(("global_load", "buffer_load", "flat_load", "scratch_load", "global_atomic", "buffer_atomic",
                     "global_inv")):
        return "VMEM_LOAD"
    if m.startswith(("global_store", "buffer_store", "flat_store", "scratch_store", "global_wb")):
        return "VMEM_STORE"
    if m.startswith("ds_"):
        return "LDS"
    if m.startswith(("s_load", "s_buffer_load", "s_prefetch")):
        return "SMEM"
    if m.startswith(("s_branch", "s_cbranch", "s_setpc", "s_swappc", "s_endpgm")):
        return "BRANCH"
    if m.startswith(("s_wait", "s_barrier", "s_nop", "s_delay_alu", "s_sleep", "s_sendmsg", "s_setprio",
                     "s_code_end", "s_clause", "s_icache")):
        return "WAIT_OTHER"
    if m.startswith("s_"):
        return "SALU"
    if m.startswith("v_"):
        return "VALU"
    raise ValueError(f"instruction {mnemonic!r}: no class (expected v_*, s_*, ds_*, global_*, buffer_*, ...)")


def is_valu(mnemonic: str) -> bool:
    return classify(mnemonic) in ("VALU", "TRANS")


# ------------------------------------------------------------------------------------------ lint
def lint(lines: list[Line], kernel: codeobj.Kernel | None = None) -> list[str]:
    problems = []
    prev_wmma_d: set[int] | None = None     # D of the last WMMA while no VALU has issued since
    lds_stores_pending = False
    sgpr_read_by_valu: set[int] = set()
    salu_rewritten: set[int] = set()        # SGPRs written by SALU after a VALU read them, not yet waited
    if kernel is not None and (kernel.descriptor.private_segment_fixed_size or kernel.descriptor.enable_private_segment):
        problems.append(f"scratch: kernel {kernel.name} uses a private segment "
                        f"({kernel.descriptor.private_segment_fixed_size} bytes)")
    for ln in lines:
        m, ops = ln.mnemonic, split_operands(ln.operands)
        where = f"0x{ln.addr:x}: {ln.text}"
        if m.startswith(("v_wmma", "v_swmmac")) and len(ops) >= 3:
            d, a, b = regs(ops[0], "v"), regs(ops[1], "v"), regs(ops[2], "v")
            if d & (a | b):
                problems.append(f"wmma-overlap: D overlaps A/B (docs/rdna4.md §Hazards rule 2) at {where}")
            idx = regs(ops[3], "v") if m.startswith("v_swmmac") and len(ops) > 3 else set()
            if prev_wmma_d is not None and prev_wmma_d & (a | b | idx):
                problems.append(f"wmma-operand-hazard: reads the previous WMMA's result as A/B with no VALU between "
                                f"(docs/rdna4.md §Hazards rule 1; insert v_nop) at {where}")
            prev_wmma_d = d
        elif is_valu(m):
            prev_wmma_d = None
        if m == "s_barrier":
            problems.append(f"legacy-barrier: s_barrier is rejected on gfx12; use s_barrier_signal -1 / "
                            f"s_barrier_wait -1 at {where}")
        if m.startswith("ds_store") or (m.startswith("ds_") and ("write" in m or m.startswith(("ds_add", "ds_max", "ds_min")))):
            lds_stores_pending = True
        if m in ("s_wait_dscnt", "s_wait_loadcnt_dscnt", "s_wait_storecnt_dscnt", "s_wait_idle"):
            value = ops[0] if ops else "0"
            try:
                n = int(value, 0)
                dscnt = n & 0x3F if m != "s_wait_dscnt" else n
            except ValueError:
                dscnt = 0
            if dscnt == 0 or m == "s_wait_idle":
                lds_stores_pending = False
        if m == "s_barrier_signal" and lds_stores_pending:
            problems.append(f"barrier-without-dscnt: LDS stores may be in flight at the barrier; add s_wait_dscnt 0x0 "
                            f"before it (docs/rdna4.md §Hazards rule 8) at {where}")
        if m.startswith("scratch_"):
            problems.append(f"scratch: scratch access at {where}")
        # VALU-read-SGPR hazard (rule 3): VALU reads s_x, SALU rewrites s_x, VALU/SALU reads s_x again
        if m == "s_wait_alu" and ("depctr_sa_sdst(0)" in ln.operands or ln.operands.strip() in ("0", "0x0")):
            salu_rewritten.clear()
        if classify(m) in ("SMEM", "VMEM_LOAD", "VMEM_STORE"):
            sgpr_read_by_valu.clear()
            salu_rewritten.clear()
        srcs = ops[1:] if ops else []
        if m.startswith(("s_cmp", "s_bitcmp")):
            srcs = ops
        read_sgprs = set().union(*(regs(o, "s") for o in srcs)) if srcs else set()
        if salu_rewritten & read_sgprs and is_valu(m):
            hit = sorted(salu_rewritten & read_sgprs)
            problems.append(f"valu-sgpr-hazard: s{hit[0]} was read by a VALU, rewritten by an SALU and is read again "
                            f"without s_wait_alu depctr_sa_sdst(0) (docs/rdna4.md §Hazards rule 3) at {where}")
            salu_rewritten -= set(hit)
        if is_valu(m):
            sgpr_read_by_valu |= read_sgprs
        elif classify(m) == "SALU" and ops and not m.startswith(("s_cmp", "s_bitcmp")):
            written = regs(ops[0], "s")
            salu_rewritten |= written & sgpr_read_by_valu
    return problems


def instruction_mix(lines: list[Line]) -> Counter:
    return Counter(classify(ln.mnemonic) for ln in lines if ln.mnemonic != "s_code_end")


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


def check_code_object(path: Path, llvm, recorded: dict | None, declared: dict | None, mix_rows: list) -> list[str]:
    """recorded: the manifest's `kernels` section for this code object (None: no snapshot comparison)."""
    problems = []
    try:
        co = codeobj.read(path.read_bytes(), str(path), arch=None)
    except codeobj.CodeObjectError as exc:
        return [str(exc)]
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
    funcs = disassemble(path, llvm)
    for kname, k in co.kernels.items():
        lines = funcs.get(kname, [])
        for p in lint(lines, k):
            problems.append(f"{path.name}:{kname}: {p}")
        mix_rows.append((path.name, kname, instruction_mix(lines), k))
    return problems


def print_mix(rows: list) -> None:
    from rich.console import Console
    from rich.table import Table
    cols = list(CLASSES)
    table = Table(title="instruction mix (static, per kernel)")
    table.add_column("code object", no_wrap=True)
    table.add_column("kernel", no_wrap=True)
    for c in cols + ["total", "VGPRs", "LDS B"]:
        table.add_column(c, justify="right")
    for co_name, kname, mix, k in rows:
        table.add_row(co_name, kname, *[str(mix.get(c, 0)) for c in cols], str(sum(mix.values())),
                      str(k.metadata.get(".vgpr_count")), str(k.descriptor.group_segment_fixed_size))
    Console(width=200).print(table)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="ABI snapshots, kernarg declarations, hazard lint, instruction mix")
    ap.add_argument("--co", type=Path, action="append", help="check this code object only (lint + mix; no snapshot)")
    ap.add_argument("--hsaco", type=Path, default=HSACO, help=argparse.SUPPRESS)
    ap.add_argument("--no-mix", action="store_true", help="do not print the instruction-mix table")
    args = ap.parse_args(argv)
    try:
        llvm = find_llvm()
    except BuildError as exc:
        print(f"disasm_check.py: {exc}", file=sys.stderr)
        return 2
    problems, rows = [], []
    if args.co:
        for path in args.co:
            problems += check_code_object(path, llvm, None, None, rows)
    else:
        manifest = json.loads((args.hsaco / "manifest.json").read_text())
        declared = kernarg_declarations(manifest)
        for entry in manifest["code_objects"].values():
            problems += check_code_object(args.hsaco / entry["file"], llvm, entry.get("kernels", {}), declared, rows)
    if not args.no_mix and rows:
        print_mix(rows)
    if problems:
        print(f"disasm_check.py: {len(problems)} problem(s):", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        return 1
    print(f"disasm_check.py: {len(rows)} kernel(s) checked: snapshots, kernarg declarations and lint clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
