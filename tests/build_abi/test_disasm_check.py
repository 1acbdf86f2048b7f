"""tools/disasm_check.py: passes on the shipped kernels, catches a planted WMMA hazard, ABI drift and an
edited kernarg declaration."""
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from llvm_tools import LLVM, ROOT, assemble_text, build_asm, needs_llvm  # noqa: E402,F401
import disasm_check  # noqa: E402
from sage_co import manifest as manifest_file

pytestmark = needs_llvm


def run_check(*args):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "disasm_check.py"), *map(str, args)],
                          capture_output=True, text=True)


def test_passes_on_the_shipped_kernels():
    r = run_check()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "lint clean" in r.stdout and "instruction mix" in r.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("hsaco")
    kernels = tmp_path_factory.mktemp("src")
    for f in (ROOT / "tests" / "build_abi" / "kernels").iterdir():
        shutil.copy(f, kernels / f.name)
    with open(kernels / "kernels.toml", "a") as fh:
        fh.write('\n[[code_object]]\nname = "test_hazard_wmma"\nsource = "hazard_wmma.s"\narch = "gfx1201"\n')
    r = subprocess.run([sys.executable, str(ROOT / "build_asm.py"), "--kernels", str(kernels / "kernels.toml"),
                        "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


def test_catches_the_planted_wmma_hazard(built):
    r = run_check("--co", built / "gfx1201" / "test_hazard_wmma.co", "--no-mix")
    assert r.returncode == 1
    assert "wmma-operand" in r.stderr and "v_wmma_i32_16x16x16_iu8 v[24:31], v[16:17]" in r.stderr
    clean = run_check("--co", built / "gfx1201" / "test_wmma_iu8_min.co", "--no-mix")
    assert clean.returncode == 0, clean.stderr


def lint_text(asm: str):
    """Assemble the lines with llvm-mc, decode them with the emulator's decoder, lint."""
    with tempfile.TemporaryDirectory() as d:
        return disasm_check.lint(disasm_check.decode_lines(assemble_text(asm.strip(), Path(d))))


def test_lint_rules_on_text():
    assert any("wmma-overlap" in p for p in lint_text("v_wmma_i32_16x16x16_iu8 v[8:15], v[8:9], v[20:21], 0"))
    assert lint_text("v_wmma_i32_16x16x16_iu8 v[16:23], v[8:9], v[10:11], 0\nv_nop\n"
                     "v_wmma_i32_16x16x16_iu8 v[24:31], v[16:17], v[10:11], 0") == []
    # accumulator chaining (C = previous D) needs nothing (docs/rdna4.md §Hazards rule 1)
    assert lint_text("v_wmma_i32_16x16x16_iu8 v[16:23], v[8:9], v[10:11], 0\n"
                     "v_wmma_i32_16x16x16_iu8 v[16:23], v[12:13], v[10:11], v[16:23]") == []
    assert any("barrier-without-dscnt" in p for p in lint_text("ds_store_b32 v1, v2\ns_barrier_signal -1"))
    assert lint_text("ds_store_b32 v1, v2\ns_wait_dscnt 0x0\ns_barrier_signal -1") == []
    assert any("scratch" in p for p in lint_text("scratch_store_b32 off, v1, s0"))
    assert any("sgpr-salu-write" in p for p in
               lint_text("v_add_nc_u32 v1, s4, v1\ns_add_co_u32 s4, s4, 64\nv_add_nc_u32 v2, s4, v2"))
    assert lint_text("v_add_nc_u32 v1, s4, v1\ns_add_co_u32 s4, s4, 64\ns_wait_alu depctr_sa_sdst(0)\n"
                     "v_add_nc_u32 v2, s4, v2") == []
    # each finding names the rule, the reader, the writer and the VALU read that put the pair at risk
    got = lint_text("v_add_nc_u32 v1, s5, v1\ns_mov_b32 s4, 1\ns_lshl_b32 s6, s4, 2")
    assert len(got) == 1 and "sgpr-salu-write: s_lshl_b32 s6, s4, 2 at 0x8 reads s4 written at 0x4 (s_mov_b32 s4, 1), " \
        "the pair read by a VALU at 0x0 (v_add_nc_u32_e32 v1, s5, v1)" in got[0] and "s_wait_alu depctr_sa_sdst(0)" in got[0]
    assert any("sgpr-valu-write" in p for p in
               lint_text("v_add_nc_u32 v1, s4, v1\nv_readfirstlane_b32 s4, v1\nv_add_nc_u32 v2, s4, v2"))
    assert any("vcc-valu-write" in p for p in
               lint_text("v_cndmask_b32 v1, v2, v3, vcc_lo\nv_cmp_eq_u32 vcc_lo, v1, v3\nv_cndmask_b32 v1, v2, v3, vcc_lo"))
    assert any("vcmpx-permlane" in p for p in lint_text("v_cmpx_eq_u32 v1, v2\nv_permlane16_b32 v1, v2, s0, s1"))
    assert lint_text("v_cmpx_eq_u32 v1, v2\nv_mov_b32 v2, v2\nv_permlane16_b32 v1, v2, s0, s1") == []
    # an SGPR read through VCC by v_cndmask_b32 (an implied operand) counts as a VALU read
    assert any("sgpr-salu-write" in p for p in
               lint_text("v_cndmask_b32 v1, v2, v3, vcc_lo\ns_mov_b32 vcc_lo, 0\nv_cndmask_b32 v1, v2, v3, vcc_lo"))


def test_lint_follows_branches():
    """The rule-3 state goes where the control flow goes: an s_branch over a read makes it unreachable from the
    rewrite (the read is reached by another jump: clang's block layout in the prepare kernels), while the same
    rewrite reaching a read through a branch, conditional or not, is still caught, merged with the fall-through."""
    rewrite = "v_add_nc_u32 v1, s4, v1\ns_add_co_u32 s4, s4, 64\n"
    assert lint_text(rewrite + "s_branch 1\nv_add_nc_u32 v2, s4, v2\ns_endpgm") == []
    assert any("sgpr-salu-write" in p for p in lint_text(rewrite + "s_branch 1\ns_nop 0\nv_add_nc_u32 v2, s4, v2"))
    assert any("sgpr-salu-write" in p for p in
               lint_text(rewrite + "s_cbranch_scc1 2\ns_wait_alu depctr_sa_sdst(0)\ns_nop 0\nv_add_nc_u32 v2, s4, v2"))


def test_catches_abi_drift_and_a_changed_kernarg_layout(built, tmp_path, monkeypatch):
    """The one snapshot is the manifest's `kernels` section; the declarations come from sage_co.abi by op."""
    from sage_co import abi
    from sage_co.kernargs import Field, KernargStruct
    hsaco = tmp_path / "hsaco"
    shutil.copytree(built, hsaco)
    manifest = manifest_file.read(hsaco / "manifest.json")   # args resolved: written back inline below
    manifest["code_objects"] = {k: v for k, v in manifest["code_objects"].items() if k == "test_fill"}
    manifest["code_objects"]["test_fill"]["provides"] = [{"op": "test.fill", "kernel": "asm", "symbol": "fill"}]

    def write(m):
        (hsaco / "manifest.json").write_text(json.dumps(m))
    write(manifest)
    # a shipped symbol whose op has no struct in sage_co/abi.py is a problem
    assert disasm_check.main(["--hsaco", str(hsaco), "--no-mix"]) == 1
    monkeypatch.setitem(abi.STRUCTS, "test.fill", KernargStruct("fill", [Field("out", "ptr", 0),
                                                                          Field("value", "u32", 8)], 12))
    assert disasm_check.main(["--hsaco", str(hsaco), "--no-mix"]) == 0
    # the manifest records another layout than the shipped bytes have -> drift
    drifted = json.loads(json.dumps(manifest))
    drifted["code_objects"]["test_fill"]["kernels"]["fill"]["args"][1]["name"] = "scale"
    write(drifted)
    assert disasm_check.main(["--hsaco", str(hsaco), "--no-mix"]) == 1
    # an edited declaration is caught the same way the launcher catches it
    write(manifest)
    monkeypatch.setitem(abi.STRUCTS, "test.fill", KernargStruct(
        "fill", [Field("out", "ptr", 0), Field("value", "u32", 8), Field("extra", "u32", 12)], 16))
    assert disasm_check.main(["--hsaco", str(hsaco), "--no-mix"]) == 1
