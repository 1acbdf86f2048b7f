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


FP16 = Path(__file__).parent / "asm" / "fp16_ovfl.s"


def _run_fp16(tmp_path, x, refuse=0):
    co = assemble_co(FP16, tmp_path, [f"-Wa,-defsym,REFUSE={refuse}"])
    dev = Device()
    out = dev.alloc(4 * 64)
    dev.load(co).launch("fp16_ovfl", (1, 1, 1), (32, 1, 1), struct.pack("<Qf", out, x))
    return np.frombuffer(dev.read(out, 4 * 64), np.uint32).reshape(2, 32)[:, :20]


def test_fp16_ovfl_saturates_f16_results(tmp_path):
    """docs/rdna4.md §FP16_OVFL: an infinite f16 result of finite sources becomes ±65504 (0x7bff / 0xfbff) with the
    bit set; an infinite source still gives Inf, a NaN stays NaN; results in range are unchanged. The upper half of
    the destination is kept (VOP1/VOP2/VOP3 f16 writes [15:0] only; the register was zeroed)."""
    off, on = _run_fp16(tmp_path, 1.0e6)
    #            cvt x   cvt -x  cvt inf cvt NaN add     mul     fma     inf+x   u16     sNaN->f32   1+2
    want_off = [0x7C00, 0xFC00, 0x7C00, 0x7E00, 0x7C00, 0xFC00, 0x7C00, 0x7C00, 0x7C00, 0x7FC02000, 0x4200]
    want_on = [0x7BFF, 0xFBFF, 0x7C00, 0x7E00, 0x7BFF, 0xFBFF, 0x7BFF, 0x7C00, 0x7BFF, 0x7FC02000, 0x4200]
    #            s_add   s_cvt   rcp(0)  exp(16) inf*2
    want_off += [0x7C00, 0x7C00, 0x7C00, 0x7C00, 0x7C00]
    want_on += [0x7BFF, 0x7BFF, 0x7BFF, 0x7BFF, 0x7C00]
    #            pk_add {ovf, 3}  pk_fma {ovf, inf}  mixlo     mixhi
    want_off += [0x42007C00, 0x7C007C00, 0x7C00, 0x7C000000]
    want_on += [0x42007BFF, 0x7C007BFF, 0x7BFF, 0x7BFF0000]
    assert [hex(v) for v in off] == [hex(v) for v in want_off]
    assert [hex(v) for v in on] == [hex(v) for v in want_on]
    off, on = _run_fp16(tmp_path, 65519.0)               # rounds to 65504 (below the halfway point to 2^16)
    assert off[0] == on[0] == 0x7BFF
    off, on = _run_fp16(tmp_path, 65520.0)               # rounds up to 2^16: overflow
    assert off[0] == 0x7C00 and on[0] == 0x7BFF


def test_fp16_ovfl_unemulated_forms_are_refused(tmp_path):
    with pytest.raises(EmuError, match="FP16_OVFL is set: its saturation of this instruction's f16 result is not"):
        _run_fp16(tmp_path, 1.0, refuse=1)


DOT4 = Path(__file__).parent / "asm" / "dot4_f8.s"


def test_dot4_f32_fp8_sums_the_bytes(tmp_path):
    """v_dot4_f32_fp8_fp8 / v_dot4_f32_bf8_fp8 (the attention kernels' row sum of packed fp8 P, docs/numerics.md
    §Attention arithmetic model): c + the 4 byte products, against exact rational sums of the decoded bytes (b = four
    different fp8 values; the sums here are exact in fp32)."""
    from fractions import Fraction
    from sage_co.emu import numerics as nm
    a, b, c = 0x3C381001, 0x38403048, 0.75      # low byte 0x01 + lane: fp8 2^-9 (min subnormal) and up
    co = assemble_co(DOT4, tmp_path)
    dev = Device()
    out = dev.alloc(4 * 64)
    dev.load(co).launch("dot4_f8", (1, 1, 1), (32, 1, 1), struct.pack("<QIIf", out, a, b, c))
    got = np.frombuffer(dev.read(out, 4 * 64), np.float32).reshape(2, 32)
    for lane in (0, 1, 7, 31):
        x = (a + lane) & 0xFFFFFFFF
        for row, dec in enumerate((nm.fp8_e4m3_to_f32, nm.bf8_e5m2_to_f32)):
            want = Fraction(c) + sum(Fraction(float(dec(np.uint8(x >> 8 * k & 0xFF)))) *
                                     Fraction(float(nm.fp8_e4m3_to_f32(np.uint8(b >> 8 * k & 0xFF)))) for k in range(4))
            assert Fraction(float(got[row, lane])) == want, (row, lane, got[row, lane], float(want))
