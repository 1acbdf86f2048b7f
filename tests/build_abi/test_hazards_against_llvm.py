"""The hazard model (sage_co/emu/hazards.py, docs/rdna4.md §Hazards) against LLVM, not against itself:

* each small case has its expected sites written down here, and the model must find exactly those; with LLVM 22's
  llc installed the same case as MIR goes through `-run-pass=post-RA-hazard-rec,amdgpu-wait-sgpr-hazards` and LLVM
  must put its fix (s_wait_alu fields, v_nop, v_mov) before exactly those instructions too;
* every code object LLVM built that the project ships, and the clang / Triton / FlyDSL corpora, have no site;
* a compiled kernel with LLVM's s_wait_alu removed is flagged exactly where LLVM had put them.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from llvm_tools import assemble_text, needs_llvm
from sage_co.emu.decode import decode
from sage_co.emu.hazards import RULE_FIELD, analyze, wait_clears

ROOT = Path(__file__).resolve().parents[2]
LLC = shutil.which("llc-22")
pytestmark = needs_llvm          # the cases are assembled with llvm-mc

# fix names: s_wait_alu fields, or the VALU LLVM inserts
FIX_OF_RULE = {**RULE_FIELD, "wmma-operand": "v_nop", "vcmpx-permlane": "v_mov"}

# name: (assembly, MIR body of the same instructions, expected [(instruction index, fix)])
CASES = {
    "salu reader, pair partner": (
        "v_add_nc_u32 v1, s5, v1\ns_mov_b32 s4, 1\ns_lshl_b32 s6, s4, 2\ns_endpgm",
        """  bb.0:
    $vgpr1 = V_ADD_U32_e32 $sgpr5, $vgpr1, implicit $exec
    $sgpr4 = S_MOV_B32 1
    $sgpr6 = S_LSHL_B32 $sgpr4, 2, implicit-def $scc
    S_ENDPGM 0""", [(2, "sa_sdst")]),
    "valu reader": (
        "v_add_nc_u32 v1, s4, v1\ns_add_co_i32 s4, s4, 64\nv_add_nc_u32 v2, s4, v2\ns_endpgm",
        """  bb.0:
    $vgpr1 = V_ADD_U32_e32 $sgpr4, $vgpr1, implicit $exec
    $sgpr4 = S_ADD_I32 $sgpr4, 64, implicit-def $scc
    $vgpr2 = V_ADD_U32_e32 $sgpr4, $vgpr2, implicit $exec
    S_ENDPGM 0""", [(2, "sa_sdst")]),
    "pair no VALU read": (
        "v_add_nc_u32 v1, s6, v1\ns_add_co_i32 s4, s4, 64\nv_add_nc_u32 v2, s4, v2\ns_endpgm",
        """  bb.0:
    $vgpr1 = V_ADD_U32_e32 $sgpr6, $vgpr1, implicit $exec
    $sgpr4 = S_ADD_I32 $sgpr4, 64, implicit-def $scc
    $vgpr2 = V_ADD_U32_e32 $sgpr4, $vgpr2, implicit $exec
    S_ENDPGM 0""", []),
    "global load between does not clear": (
        "v_add_nc_u32 v1, s4, v1\ns_add_co_i32 s4, s4, 64\nglobal_load_b32 v3, v1, s[8:9]\n"
        "v_add_nc_u32 v2, s4, v2\ns_endpgm",
        """  bb.0:
    $vgpr1 = V_ADD_U32_e32 $sgpr4, $vgpr1, implicit $exec
    $sgpr4 = S_ADD_I32 $sgpr4, 64, implicit-def $scc
    $vgpr3 = GLOBAL_LOAD_DWORD_SADDR $sgpr8_sgpr9, $vgpr1, 0, 0, implicit $exec
    $vgpr2 = V_ADD_U32_e32 $sgpr4, $vgpr2, implicit $exec
    S_ENDPGM 0""", [(3, "sa_sdst")]),
    "SMEM load between clears": (
        "v_add_nc_u32 v1, s4, v1\ns_add_co_i32 s4, s4, 64\ns_load_b32 s10, s[0:1], 0x0\n"
        "v_add_nc_u32 v2, s4, v2\ns_endpgm",
        """  bb.0:
    $vgpr1 = V_ADD_U32_e32 $sgpr4, $vgpr1, implicit $exec
    $sgpr4 = S_ADD_I32 $sgpr4, 64, implicit-def $scc
    $sgpr10 = S_LOAD_DWORD_IMM $sgpr0_sgpr1, 0, 0
    $vgpr2 = V_ADD_U32_e32 $sgpr4, $vgpr2, implicit $exec
    S_ENDPGM 0""", []),
    "VALU -> VALU through an SGPR": (
        "v_add_nc_u32 v1, s4, v1\nv_readfirstlane_b32 s4, v1\nv_add_nc_u32 v2, s4, v2\ns_endpgm",
        """  bb.0:
    $vgpr1 = V_ADD_U32_e32 $sgpr4, $vgpr1, implicit $exec
    $sgpr4 = V_READFIRSTLANE_B32 $vgpr1, implicit $exec
    $vgpr2 = V_ADD_U32_e32 $sgpr4, $vgpr2, implicit $exec
    S_ENDPGM 0""", [(2, "va_sdst")]),
    "SALU read of a VALU-written SGPR is interlocked": (
        "v_add_nc_u32 v1, s4, v1\nv_readfirstlane_b32 s4, v1\ns_add_co_i32 s6, s4, 1\nv_add_nc_u32 v2, s4, v2\n"
        "s_endpgm",
        """  bb.0:
    $vgpr1 = V_ADD_U32_e32 $sgpr4, $vgpr1, implicit $exec
    $sgpr4 = V_READFIRSTLANE_B32 $vgpr1, implicit $exec
    $sgpr6 = S_ADD_I32 $sgpr4, 1, implicit-def $scc
    $vgpr2 = V_ADD_U32_e32 $sgpr4, $vgpr2, implicit $exec
    S_ENDPGM 0""", []),
    "VALU -> VALU through VCC": (
        "v_cmp_eq_u32 vcc_lo, v1, v2\nv_cndmask_b32 v1, v2, v3, vcc_lo\nv_cmp_eq_u32 vcc_lo, v1, v3\n"
        "v_cndmask_b32 v1, v2, v3, vcc_lo\ns_endpgm",
        """  bb.0:
    V_CMP_EQ_U32_e32 $vgpr1, $vgpr2, implicit-def $vcc, implicit $exec
    $vgpr1 = V_CNDMASK_B32_e32 $vgpr2, $vgpr3, implicit $vcc, implicit $exec
    V_CMP_EQ_U32_e32 $vgpr1, $vgpr3, implicit-def $vcc, implicit $exec
    $vgpr1 = V_CNDMASK_B32_e32 $vgpr2, $vgpr3, implicit $vcc, implicit $exec
    S_ENDPGM 0""", [(3, "va_vcc")]),
    "loop back-edge": (
        "s_mov_b32 s4, 0\nL:\ns_cmp_lt_u32 s4, 10\nv_add_nc_u32 v1, s4, v1\ns_add_co_i32 s4, s4, 1\n"
        "s_cbranch_scc1 L\ns_endpgm",
        """  bb.0:
    successors: %bb.1
    $sgpr4 = S_MOV_B32 0
  bb.1:
    successors: %bb.1, %bb.2
    S_CMP_LT_U32 $sgpr4, 10, implicit-def $scc
    $vgpr1 = V_ADD_U32_e32 $sgpr4, $vgpr1, implicit $exec
    $sgpr4 = S_ADD_I32 $sgpr4, 1, implicit-def $scc
    S_CBRANCH_SCC1 %bb.1, implicit $scc
  bb.2:
    S_ENDPGM 0""", [(1, "sa_sdst")]),
    "v_cmpx -> v_permlane": (
        "v_cmpx_eq_u32 v1, v2\nv_permlane16_b32 v1, v2, s0, s1\ns_endpgm",
        """  bb.0:
    V_CMPX_EQ_U32_nosdst_e32 $vgpr1, $vgpr2, implicit-def $exec, implicit $exec
    $vgpr1 = V_PERMLANE16_B32_e64 0, $vgpr2, 0, $sgpr0, 0, $sgpr1, $vgpr1, 0, implicit $exec
    S_ENDPGM 0""", [(1, "v_mov")]),
    "v_cmpx, v_nop, v_permlane": (
        "v_cmpx_eq_u32 v1, v2\nv_nop\nv_permlane16_b32 v1, v2, s0, s1\ns_endpgm",
        """  bb.0:
    V_CMPX_EQ_U32_nosdst_e32 $vgpr1, $vgpr2, implicit-def $exec, implicit $exec
    V_NOP_e32 implicit $exec
    $vgpr1 = V_PERMLANE16_B32_e64 0, $vgpr2, 0, $sgpr0, 0, $sgpr1, $vgpr1, 0, implicit $exec
    S_ENDPGM 0""", [(2, "v_mov")]),
    "WMMA across a back-edge": (
        "s_mov_b32 s4, 0\nL:\nv_wmma_i32_16x16x16_iu8 v[16:23], v[8:9], v[10:11], v[16:23]\n"
        "v_wmma_i32_16x16x16_iu8 v[8:15], v[24:25], v[26:27], v[8:15]\ns_cbranch_scc1 L\ns_endpgm",
        """  bb.0:
    successors: %bb.1
    $sgpr4 = S_MOV_B32 0
  bb.1:
    successors: %bb.1, %bb.2
    early-clobber $vgpr16_vgpr17_vgpr18_vgpr19_vgpr20_vgpr21_vgpr22_vgpr23 = V_WMMA_I32_16X16X16_IU8_w32_twoaddr 8, $vgpr8_vgpr9, 8, $vgpr10_vgpr11, $vgpr16_vgpr17_vgpr18_vgpr19_vgpr20_vgpr21_vgpr22_vgpr23, 0, 0, implicit $exec
    early-clobber $vgpr8_vgpr9_vgpr10_vgpr11_vgpr12_vgpr13_vgpr14_vgpr15 = V_WMMA_I32_16X16X16_IU8_w32_twoaddr 8, $vgpr24_vgpr25, 8, $vgpr26_vgpr27, $vgpr8_vgpr9_vgpr10_vgpr11_vgpr12_vgpr13_vgpr14_vgpr15, 0, 0, implicit $exec
    S_CBRANCH_SCC1 %bb.1, implicit undef $scc
  bb.2:
    S_ENDPGM 0""", [(1, "v_nop")]),
}


def model_sites(asm: str, tmp: Path) -> list[tuple[int, str]]:
    insts = decode(assemble_text(asm, tmp))
    index = {i.offset: k for k, i in enumerate(insts)}
    return sorted((index[f.addr], FIX_OF_RULE[f.rule]) for f in analyze(insts))


_MIR_HEAD = """--- |
  define amdgpu_kernel void @k() { ret void }
...
---
name: k
tracksRegLiveness: false
machineFunctionInfo:
  isEntryFunction: true
body: |
"""
_MIR_OP = re.compile(r"^\s*(?:early-clobber\s+)?(?:[$%\w, ]+=\s*)?([A-Z][A-Za-z0-9_]+)")


def _mir_ops(body: str) -> list[tuple[str, str]]:
    out = []
    for ln in body.splitlines():
        s = ln.strip()
        if not s or s.startswith(("bb.", "successors", "liveins", ";")):
            continue
        m = _MIR_OP.match(ln)
        if m:
            out.append((m.group(1), s))
    return out


def llvm_sites(mir_body: str, tmp: Path) -> list[tuple[int, str]]:
    """The instructions LLVM's hazard passes put a fix before: (index among the case's instructions, fix)."""
    src = tmp / "case.mir"
    src.write_text(_MIR_HEAD + mir_body + "\n...\n")
    r = subprocess.run([LLC, "-mtriple=amdgcn-amd-amdhsa", "-mcpu=gfx1201",
                        "-run-pass=post-RA-hazard-rec,amdgpu-wait-sgpr-hazards", str(src), "-o", "-"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    want = [op for op, _ in _mir_ops(mir_body)]
    got = _mir_ops(r.stdout.split("\nbody:", 1)[1])
    sites, j = [], 0
    for op, text in got:
        if j < len(want) and op == want[j]:
            j += 1
            continue
        if op == "S_WAITCNT_DEPCTR":
            imm = int(text.split()[-1])
            sites += [(j, f) for f in sorted(wait_clears(imm))]
        elif op == "V_NOP_e32":
            sites.append((j, "v_nop"))
        elif op == "V_MOV_B32_e32":
            sites.append((j, "v_mov"))
        else:
            raise AssertionError(f"LLVM inserted {text!r}, not a hazard fix")
    assert j == len(want), "LLVM's output lost an instruction of the case"
    return sorted(sites)


@pytest.mark.parametrize("name", list(CASES))
def test_model_sites(name, tmp_path):
    asm, _mir, expected = CASES[name]
    assert model_sites(asm, tmp_path) == sorted(expected)


@pytest.mark.skipif(LLC is None, reason="llc-22 (LLVM 22) is not installed: the MIR cases cannot run through "
                                        "LLVM's hazard passes")
@pytest.mark.parametrize("name", list(CASES))
def test_llvm_agrees(name, tmp_path):
    asm, mir, expected = CASES[name]
    assert llvm_sites(mir, tmp_path) == sorted(expected)


# ------------------------------------------------------------------------------------------ compiled code objects
CORPUS = ROOT / "tests" / "emu" / "corpus"
LLVM_BUILT = sorted(CORPUS.glob("*/*.co")) + [ROOT / "hsaco" / "gfx1201" / "gfx1201_sage_predict.co"]


def _functions(path: Path) -> dict:
    from disasm_check import disassemble     # tools/ is on pytest's pythonpath
    return {name: [ln.inst for ln in lines] for name, lines in disassemble(path).items()}


@pytest.mark.parametrize("path", LLVM_BUILT, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_site_in_llvm_built_code(path):
    """LLVM (clang, Triton, FlyDSL) mitigated every hazard the model knows; the shipped objects are checked by
    tools/disasm_check.py's lint (tests/build_abi/test_disasm_check.py)."""
    for name, insts in _functions(path).items():
        assert [f.describe() for f in analyze(insts)] == [], name


FIELDS = ("sa_sdst", "va_sdst", "va_vcc")


def strip_compare(insts) -> tuple[list, list]:
    """LLVM's s_wait_alu removed, the model's rule-3 sites against them: per basic block of the compiled code, a
    wait with field F guards the next site needing F in that block (LLVM puts it right before the read, or at
    the top of the block; s_delay_alu may sit between). Returns (waits that guard no site, sites no wait guards)."""
    from sage_co.emu.hazards import _blocks, _long_branches
    sites: dict[int, set] = {}
    for f in analyze([i for i in insts if i.name != "s_wait_alu"]):
        if f.rule in RULE_FIELD:
            sites.setdefault(f.addr, set()).add(RULE_FIELD[f.rule])
    unused, unguarded = [], []
    for s, e in _blocks(insts, _long_branches(insts))[0]:
        pending = {f: [] for f in FIELDS}
        for inst in insts[s:e]:
            if inst.name == "s_wait_alu":
                for f in wait_clears(inst.f["simm16"]) & set(FIELDS):
                    pending[f].append(inst.offset)
                continue
            for f in sorted(sites.get(inst.offset, ())):
                if pending[f]:
                    pending[f] = []
                else:
                    unguarded.append((inst.offset, f))
        unused += [(a, f) for f in FIELDS for a in pending[f]]
    return sorted(unused), sorted(unguarded)


# LLVM's waits the model has no site for (a model site LLVM did not guard: none). The clang lds_rtn ones sit before
# `s_or_b32 exec_lo, exec_lo, sN` / a VALU reading ttmp9, after an SALU write of a pair no VALU has read on any
# path the model sees; the FlyDSL ones before pseudo-scalar TRANS (v_s_sqrt_f32 s0, s0) after an SALU write of
# s0, which LLVM 22's passes do not ask for either (a MIR case of that shape gets no wait from llc-22): these
# objects' compiler adds a rule the model does not have (docs/rdna4.md §Hazards, "what the model does not do").
KNOWN_UNUSED = {("atomics.co", "lds_rtn"): [(0x1fb4, "sa_sdst"), (0x1fd0, "sa_sdst"), (0x230c, "sa_sdst"),
                                            (0x2380, "sa_sdst")],
                ("attn_loop_d16.co", "attn_loop_kernel_0"): [(0x17a4, "sa_sdst")],
                ("wmma_attn_d16.co", "wmma_attn_kernel_0"): [(0x3208, "sa_sdst")]}
STRIP = [p for p in LLVM_BUILT if p.parent.name != "probes"]


@pytest.mark.parametrize("path", STRIP, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_stripped_waits_are_the_sites(path):
    """Every s_wait_alu sa_sdst / va_sdst / va_vcc LLVM put in is where the model, on the code without them, finds
    a site needing that field, and the model finds no other site."""
    for name, insts in _functions(path).items():
        unused, unguarded = strip_compare(insts)
        assert unguarded == [], (name, [(hex(a), f) for a, f in unguarded])
        assert unused == KNOWN_UNUSED.get((path.name, name), []), (name, [(hex(a), f) for a, f in unused])


def test_stripped_hip_attention_kernel():
    """The same on one kernel of the clang-built HIP attention object (3,000+ instructions, 300+ waits)."""
    funcs = _functions(ROOT / "hsaco" / "gfx1201" / "gfx1201_sage_attention_hip.co")
    insts = funcs["gfx1201_sage_attention_fwd_d128_bf16"]
    assert sum(i.name == "s_wait_alu" for i in insts) > 100
    assert strip_compare(insts) == ([], [])


SANITIZER_CASES = ROOT / "tests" / "emu" / "asm" / "sanitizer_cases.s"
BROKEN_RULE = {"wmma_hazard": "wmma-operand", "sgpr_salu_valu": "sgpr-salu-write", "sgpr_loop": "sgpr-salu-write",
               "sgpr_valu_valu": "sgpr-valu-write", "vcc_valu": "vcc-valu-write", "vcmpx_permlane": "vcmpx-permlane"}


@pytest.mark.parametrize("broken", [0, 1])
def test_model_flags_the_sanitizer_cases(broken, tmp_path):
    """The emulator's deliberately broken kernels (tests/emu/test_sanitizer.py stops each one at run time) are the
    model's sites too, one per kernel with its rule; their clean twins have none."""
    from llvm_tools import assemble_co
    co = tmp_path / "cases.co"
    co.write_bytes(assemble_co(SANITIZER_CASES, tmp_path, [f"-Wa,-defsym,BROKEN={broken}"]))
    funcs = _functions(co)
    for kernel, rule in BROKEN_RULE.items():
        assert [f.rule for f in analyze(funcs[kernel])] == ([rule] if broken else []), kernel
