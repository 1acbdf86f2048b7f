"""Each sanitizer case: the deliberately broken kernel is stopped with EmuError naming the problem, the clean
version runs. Kernels: tests/emu/asm/sanitizer_cases.s, assembled with BROKEN=0/1."""
import struct
from pathlib import Path

import numpy as np
import pytest

from llvm_tools import assemble_co, needs_llvm
from sage_co.emu import Device, EmuError

ASM = Path(__file__).parent / "asm" / "sanitizer_cases.s"
pytestmark = needs_llvm


def _assemble(tmp, broken: int) -> bytes:
    out = tmp / f"b{broken}"
    out.mkdir(exist_ok=True)
    return assemble_co(ASM, out, [f"-Wa,-defsym,BROKEN={broken}"])


@pytest.fixture(scope="module")
def cos(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sanitizer")
    return {b: _assemble(tmp, b) for b in (0, 1)}


def _run(co, kernel, block=32, **kw):
    dev = Device()
    mod = dev.load(co)
    buf0, buf1 = dev.alloc(128), dev.alloc(256)
    dev.write(buf0, np.arange(32, dtype=np.uint32) * 3)
    mod.launch(kernel, (1, 1, 1), (block, 1, 1), struct.pack("<QQ", buf0, buf1), **kw)
    return np.frombuffer(dev.read(buf1, 256), np.uint32)


CASES = [
    ("wait_load", 32, {}, r"reads v2 before its load completed"),
    ("wmma_hazard", 32, {}, r"immediately preceding WMMA"),
    ("wmma_overlap", 32, {}, r"overlaps its A or B"),
    ("oob_global", 32, {}, r"global load of 4 B at address 0x[0-9a-f]+ is outside every live allocation"),
    ("oob_lds", 32, {}, r"outside the kernel's 128 B group segment"),
    ("barrier_skip", 64, {}, r"barrier"),
    ("lds_race", 64, {"lds_race_check": True}, r"LDS race"),
    ("sgpr_salu_valu", 32, {}, r"reads s9, written by an SALU .* no s_wait_alu depctr_sa_sdst\(0\)"),
    ("sgpr_loop", 32, {}, r"reads s8, written by an SALU .* no s_wait_alu depctr_sa_sdst\(0\)"),
    ("sgpr_valu_valu", 32, {}, r"reads s8, written by a VALU .* no s_wait_alu depctr_va_sdst\(0\)"),
    ("vcc_valu", 32, {}, r"reads vcc_lo, written by a VALU .* no s_wait_alu depctr_va_vcc\(0\)"),
    ("vcmpx_permlane", 32, {}, r"v_permlane right after a v_cmpx"),
]


@pytest.mark.parametrize("kernel,block,kw,msg", CASES, ids=[c[0] for c in CASES])
def test_broken_kernel_is_caught(cos, kernel, block, kw, msg):
    with pytest.raises(EmuError, match=msg) as exc:
        _run(cos[1], kernel, block, **kw)
    text = str(exc.value)
    assert f"kernel {kernel} pc 0x" in text and "workgroup 0" in text and "wave " in text


@pytest.mark.parametrize("kernel,block,kw,msg", CASES, ids=[c[0] for c in CASES])
def test_clean_kernel_passes(cos, kernel, block, kw, msg):
    out = _run(cos[0], kernel, block, **kw)
    if kernel == "wait_load":
        assert (out[:32] == np.arange(32) * 3 + 1).all()
    if kernel == "wmma_hazard":
        # D1 = ones @ ones = 16 everywhere; as 8-bit A, v[16:17] hold bytes (16,0,0,0) per dword, so
        # D2[m][n] = 4 * 16 = 64
        assert (out[:32] == 64).all()
    if kernel == "oob_global":
        assert (out[:32] == np.arange(32) * 3).all()
    if kernel == "oob_lds":
        assert (out[:32] == np.arange(32)).all()
    if kernel == "lds_race":
        assert (out[32:64] == np.arange(32)).all()
    lane = np.arange(32)
    if kernel == "sgpr_salu_valu":
        assert (out[:32] == lane + 12).all()
    if kernel == "sgpr_loop":
        assert (out[:32] == 0 + 1 + 2 + 3).all()
    if kernel == "sgpr_valu_valu":
        assert (out[:32] == lane + 6).all()          # s8 = lane 0's 0 + 3
    if kernel == "vcc_valu":
        assert (out[:32] == np.where(lane < 8, 2, 0)).all()
    if kernel == "vcmpx_permlane":
        assert (out[:32] == np.where(lane < 16, 0, 16)).all()   # every lane takes lane 0 of its row


def test_error_names_lane_for_oob(cos):
    with pytest.raises(EmuError, match=r"lane 0"):
        _run(cos[1], "oob_global")


def test_sanitizer_off_still_refuses_outside_arena_but_allows_guard_gap(cos):
    # the guard gap is inside the arena: with the sanitizer off the load reads zeros there
    out = _run(cos[1], "oob_global", sanitize=False)
    assert (out[:32] == 0).all()


def test_race_check_is_opt_in(cos):
    _run(cos[1], "lds_race", 64)      # unsynchronised but not checked: runs (lockstep order)
