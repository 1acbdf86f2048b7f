"""sage_co.emu: a numpy-vectorized executor of gfx1201 (RDNA4, wave32) code objects with a sanitizer.

    dev = Device(); buf = dev.alloc(n); dev.write(buf, data); mod = dev.load(co_bytes)
    stats = mod.launch("kernel", grid=(gx, gy, gz), block=(bx, by, bz), kernargs=packed_bytes)
    dev.read(buf, n)

The emulator knows nothing of attention: it runs whatever gfx1201 code it is given, exactly, and stops with
EmuError on anything it cannot do or any sanitizer finding.

    disassemble(code_bytes) -> [(offset, text)]   # the text llvm-objdump --mcpu=gfx1201 prints
    python -m sage_co.emu.disasm FILE.co
"""
from sage_co.emu.device import Device, Module
from sage_co.emu.state import EmuError
from sage_co.emu.text import disassemble

__all__ = ["Device", "EmuError", "Module", "disassemble"]
