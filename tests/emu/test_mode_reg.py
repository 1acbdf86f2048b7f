"""s_setreg / s_getreg of HW_REG_WAVE_MODE: FP16_OVFL makes v_cvt_pk_fp8_f32 saturate (docs/rdna4.md §FP8), getreg
reads the register as the descriptor initialised it, and rewriting the round/denorm fields is refused."""
import struct
from pathlib import Path

import numpy as np
import pytest

from llvm_tools import assemble_co, needs_llvm
from sage_co.emu import Device, EmuError

ASM = Path(__file__).parent / "asm" / "mode_reg.s"
pytestmark = needs_llvm


def _run(tmp_path, x, denorm=0):
    co = assemble_co(ASM, tmp_path, [f"-Wa,-defsym,SETREG_DENORM={denorm}"])
    dev = Device()
    out = dev.alloc(12 * 32)
    dev.load(co).launch("mode_reg", (1, 1, 1), (32, 1, 1), struct.pack("<Qf", out, x))
    return np.frombuffer(dev.read(out, 12 * 32), np.uint32).reshape(32, 3)


def test_fp16_ovfl_saturates_fp8_conversion(tmp_path):
    r = _run(tmp_path, 1000.0)
    assert (r[:, 0] & 0xFFFF == 0xFF7F).all()            # 1000 -> NaN 0x7f, -1000 -> 0xff (non-saturating)
    assert (r[:, 1] & 0xFFFF == 0xFE7E).all()            # saturating: +448 0x7e, -448 0xfe
    # MODE = FP_DENORM 0xF (f32 and f16/f64 keep) | FP16_OVFL
    assert (r[:, 2] == (0xF << 4 | 1 << 23)).all()
    r = _run(tmp_path, float("inf"))
    assert (r[:, 1] & 0xFFFF == 0xFF7F).all()            # Inf still converts to NaN with the bit set


def test_changing_denorm_mode_at_run_time_is_refused(tmp_path):
    with pytest.raises(EmuError, match="round/denorm mode at run time is not emulated"):
        _run(tmp_path, 1.0, denorm=1)
