"""Facts stated once: the gfx1201 resource facts and the occupancy formula live in sage_co/rdna4.py (the ABI, the asm
generator and the performance model import them), and no Python file of the repository edits sys.path (tools/ and
asm_src/ are importable through the dev install, their own script folder, build_asm.py's generator PYTHONPATH and
pyproject.toml's pytest pythonpath)."""
import re

import perfmodel.hardware as hw
from llvm_tools import ROOT
from sage_co import abi, rdna4

FACTS = ("WAVE_SIZE", "VGPR_LIMIT", "SGPR_LIMIT", "VGPRS_PER_SIMD", "VGPR_GRANULE", "MAX_WAVES_PER_SIMD",
         "SIMDS_PER_WGP", "LDS_PER_WGP", "LDS_MAX_PER_WG")
# the names the model used for the same facts before they moved (an assignment under one of them is a restatement)
ALIASES = ("LANES", "VGPR_FILE")
SOURCES = ("sage_co", "asm_src", "tools", "benchmarks", "build_asm.py")
SYS_PATH_EDITS_LEFT: set = set()   # (benchmarks/stub_timing.py loads tests/stub_hip from its file)


def _python_files(*tops):
    for top in tops:
        p = ROOT / top
        yield from ([p] if p.is_file() else sorted(p.rglob("*.py")))


def test_resource_facts_are_assigned_only_in_rdna4():
    assigned = re.compile(rf"^\s*({'|'.join(FACTS + ALIASES)})\s*(:[^=]+)?=[^=]", re.M)
    elsewhere = [f"{path.relative_to(ROOT)}: {m.group(1)}" for path in _python_files(*SOURCES)
                 if path.name != "rdna4.py" for m in assigned.finditer(path.read_text())]
    assert elsewhere == [], elsewhere


def test_the_model_and_the_abi_use_the_same_facts():
    assert hw.waves_by_vgprs is rdna4.waves_by_vgprs
    assert hw.LANES == abi.WAVE_SIZE == rdna4.WAVE_SIZE
    assert (hw.VGPR_FILE, hw.VGPR_GRANULE, hw.MAX_WAVES_PER_SIMD) == \
        (rdna4.VGPRS_PER_SIMD, rdna4.VGPR_GRANULE, rdna4.MAX_WAVES_PER_SIMD)
    assert abi.PREDICT_MAX_LDS == hw.LDS_MAX_PER_WG == rdna4.LDS_MAX_PER_WG


def test_asm_header_states_the_occupancy_of_the_formula():
    text = (ROOT / "asm_src" / "gfx1201_sage_attention_asm.s").read_text()
    stated = re.findall(r"Resources: (\d+) VGPRs -> (\d+) waves/SIMD", text)
    assert stated, "the per-variant header no longer states VGPRs and waves/SIMD"
    for vgprs, waves in stated:
        assert rdna4.waves_by_vgprs(int(vgprs)) == int(waves), (vgprs, waves)


def test_no_sys_path_edits():
    edit = re.compile(r"\bsys\.path\.(insert|append|extend)\b|\bsys\.path\s*(\+=|=)")
    found = sorted(str(p.relative_to(ROOT)) for p in _python_files(*SOURCES, "tests")
                   if edit.search(p.read_text()) and p.name != "test_one_source.py")
    assert set(found) <= SYS_PATH_EDITS_LEFT, found
