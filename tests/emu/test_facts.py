"""sage_co.emu.facts, the one instruction-facts layer: register reads/writes follow operand semantics, and the
classifier, the emulator's statistics, the lint and the performance model agree on every shipped and corpus
instruction (they all take the class from facts; this checks that nothing re-derives it differently)."""
import re
from pathlib import Path

import pytest

from llvm_tools import ROOT, assemble_text, needs_llvm, objdump
from sage_co import codeobj
from sage_co.emu import Device, executor
from sage_co.emu.decode import decode, decode_at
from sage_co.emu.disasm import text_and_symbols
from sage_co.emu.facts import CLASSES, VOPD_PLAIN, class_of, facts, vopd_pair_problem, vopd_problem

import disasm_check  # tools/ is on sys.path (pyproject.toml pytest pythonpath)

CORPUS = [*sorted((ROOT / "hsaco" / "gfx1201").glob("*.co")),
          *sorted((Path(__file__).parent / "corpus").rglob("*.co"))]


def words(*ws):
    return b"".join(w.to_bytes(4, "little") for w in ws)


def test_vopd_mov_has_no_vsrc1_read():
    # v_dual_fmac_f32 v10, v1, v2 :: v_dual_mov_b32 v13, v3 (vsrcy1 bits hold garbage: not an operand of mov)
    fx = facts(decode_at(words(0xc8100501, 0x0a0c0103 | 0x7 << 9), 0))
    assert ("v", 7) not in fx.reads
    assert set(fx.reads) == {("v", 1), ("v", 2), ("v", 10), ("v", 3)}      # fmac reads its accumulator v10
    assert set(fx.writes) == {("v", 10), ("v", 13)}


@needs_llvm
def test_operands_follow_semantics(tmp_path):
    code = assemble_text("\n".join([
        "scratch_load_b32 v1, off, s5 offset:16",          # no VGPR address
        "scratch_store_b32 v2, v3, off",                   # VGPR address, no SGPR base
        "global_load_b64 v[4:5], v[6:7], off",             # 64-bit VGPR address
        "global_atomic_add_u32 v8, v9, v10, s[0:1] th:TH_ATOMIC_RETURN",
        "v_cndmask_b32 v1, v2, v3, vcc_lo",
        "v_cmp_gt_f32 vcc_lo, v1, v2",
        "s_load_b64 s[2:3], s[0:1], 0x0",
        "ds_load_b32 v1, v2 offset:1020",
        "s_swappc_b64 s[30:31], s[4:5]",                   # return address written, target read (docs/rdna4.md §Calls)
        "s_setpc_b64 s[30:31]",
        "s_call_b64 s[30:31], 4",
    ]), tmp_path)
    got = [facts(i) for i in decode(code)]
    assert got[0].reads == (("s", 5),) and got[0].writes == (("v", 1),) and got[0].returns_data
    assert set(got[1].reads) == {("v", 2), ("v", 3)} and got[1].wait_kind == "store"
    assert set(got[2].reads) == {("v", 6), ("v", 7)} and got[2].writes == (("v", 4), ("v", 5))
    assert got[3].cls == "VMEM_LOAD" and got[3].wait_kind == "load" and got[3].writes == (("v", 8),)
    assert ("s", 106) in got[4].reads
    assert got[5].writes == (("s", 106),) and not got[5].returns_data
    assert got[6].wait_kind == "km" and got[6].writes == (("s", 2), ("s", 3))
    assert got[7].wait_kind == "ds" and got[7].returns_data
    assert got[8].cls == "BRANCH" and got[8].reads == (("s", 4), ("s", 5)) and got[8].writes == (("s", 30), ("s", 31))
    assert got[9].cls == "BRANCH" and got[9].reads == (("s", 30), ("s", 31)) and not got[9].writes
    assert got[10].cls == "BRANCH" and not got[10].reads and got[10].writes == (("s", 30), ("s", 31))


def test_vopd_rules():
    assert vopd_pair_problem(2, 4, None, None, None, None) is not None          # two even destinations
    assert vopd_pair_problem(2, 3, 8, 12, None, None) is not None                # src0 in one bank
    assert vopd_pair_problem(2, 3, 8, 8, None, None, both_mov=True) is None     # mov+mov: source cache
    assert vopd_pair_problem(2, 3, 8, 8, None, None) is not None                # LLVM 22's assembler rule
    assert vopd_pair_problem(2, 3, 8, 8, None, None, same_vgpr_ok=True) is None  # the hardware rule
    assert vopd_pair_problem(2, 3, 8, 9, 4, 5, literals=1, sgprs=1) is None
    assert vopd_pair_problem(2, 3, 8, 9, 4, 5, literals=1, sgprs=2) is not None
    assert "v_mul_f32" in VOPD_PLAIN and "v_fmac_f32" not in VOPD_PLAIN and "v_add_nc_u32" not in VOPD_PLAIN


def test_classes_of_formerly_disputed_mnemonics():
    assert class_of("s_endpgm") == class_of("s_setpc_b64") == "BRANCH"
    assert class_of("s_swappc_b64") == class_of("s_call_b64") == "BRANCH"
    assert class_of("global_atomic_add_u32") == "VMEM_STORE"
    assert class_of("global_atomic_add_u32", returns=True) == "VMEM_LOAD"
    assert class_of("global_wb") == "VMEM_STORE" and class_of("global_inv") == "VMEM_LOAD"
    assert class_of("v_sin_f16") == class_of("v_s_exp_f32") == "TRANS"
    assert class_of("s_barrier_signal") == "WAIT_OTHER"


@pytest.mark.parametrize("co", CORPUS, ids=lambda p: p.name)
def test_classifier_stats_lint_and_model_agree(co):
    """Every instruction of every shipped and corpus code object: facts(inst).cls, the class the emulator's run
    statistics count it under (executor.Program.cls), the lint's instruction mix (disasm_check.instruction_mix on the
    decoded Lines) and the text classifier the tools and tools/perf_model.py use (disasm_check.classify on the
    mnemonic as LLVM prints it) are one and the same."""
    obj = codeobj.read(co.read_bytes(), co.name, arch=None)
    lines = disasm_check.decode_lines(obj.text, obj.text_addr)
    lines = [ln for ln in lines if ln.mnemonic != "s_code_end"]
    assert lines
    # the text classifiers are pure functions of the text: each distinct (text, facts' class) is checked once (a
    # prepare object repeats its instructions a million times)
    pairs = {(ln.mnemonic, ln.operands, facts(ln.inst).cls): ln for ln in lines}
    for (mnemonic, operands, cls), ln in pairs.items():
        assert cls in CLASSES
        assert disasm_check.classify(mnemonic, operands) == cls, ln.text
    mix = disasm_check.instruction_mix(lines)
    assert sum(mix.values()) == len(lines)
    mod = Device().load(co.read_bytes(), co.name)
    for name, k in obj.kernels.items():
        prog = executor.Program(mod, k)
        assert prog.cls == [facts(i).cls for i in prog.insts]
    perf_model = pytest.importorskip("perf_model")
    if getattr(perf_model, "classify", None) is not None:
        for (mnemonic, operands, cls), ln in pairs.items():
            assert perf_model.classify(mnemonic, operands) == cls, ln.text


@needs_llvm
@pytest.mark.parametrize("co", CORPUS, ids=lambda p: p.name)
def test_vgpr_operands_match_llvm_text(co):
    """The VGPRs facts says an instruction touches are the VGPRs llvm-objdump prints for it (implied operands are
    never VGPRs, so the sets must be equal), and no decoded VOPD breaks the pairing rules."""
    blob, addr, _ = text_and_symbols(co.read_bytes())
    insts = {i.offset: i for i in decode(blob, addr)}
    bad, checked = [], set()
    for ln in objdump(co, "--mattr=+real-true16").splitlines():     # the hardware's view of 16-bit operands
        m = re.match(r"\s+(.*?)\s*// ([0-9A-F]+):", ln)
        if not m:
            continue
        inst = insts[int(m.group(2), 16)]
        text = m.group(1)
        # facts and the printed registers are functions of the bytes and the text: each distinct pair once (a
        # prepare object repeats its encodings hundreds of thousands of times)
        key = (text, blob[inst.offset - addr:inst.offset - addr + inst.size])
        if key in checked:
            continue
        checked.add(key)
        printed = set()
        for r in re.finditer(r"\bv(?:\[(\d+):(\d+)\]|(\d+))(?![\w:])(?:\.[lh])?", text):
            lo = int(r.group(1) or r.group(3))
            hi = int(r.group(2) or lo)
            printed |= set(range(lo, hi + 1))
        fx = facts(inst)
        mine = {n for k, n in fx.reads + fx.writes if k in ("v", "v.l", "v.h")}
        if printed != mine:
            bad.append((text, sorted(printed ^ mine)))
        if inst.enc == "VOPD" and vopd_problem(inst) is not None:
            bad.append((text, vopd_problem(inst)))
    assert not bad, bad[:10]
