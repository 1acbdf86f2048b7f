"""gfx1201 disassembler whose text matches `llvm-objdump -d --mcpu=gfx1201` (whitespace normalised, comments dropped).

    disassemble(code: bytes, base=0) -> list[(offset, text)]
    inst_text(inst: Inst) -> str
    text_and_symbols(elf_bytes) -> (.text bytes, .text address, {offset: function symbol})
    python -m sage_co.emu.disasm [--true16] FILE.co|FILE.o   # one line per instruction: offset, text
                                                   # --true16: as llvm-objdump --mattr=+real-true16 (vN.l / vN.h)

The text rules live in text.py (the executor names instructions with them); this module adds the ELF side and the
command line. Nothing here runs LLVM.
"""
from __future__ import annotations

import io
import sys

from elftools.elf.elffile import ELFFile

from sage_co.emu.text import disassemble, inst_text

__all__ = ["disassemble", "inst_text", "text_and_symbols", "main"]


def text_and_symbols(data: bytes) -> tuple[bytes, int, dict[int, str]]:
    """(.text bytes, .text address, {offset in .text: function symbol}) of an ELF code object / relocatable."""
    elf = ELFFile(io.BytesIO(data))
    text = elf.get_section_by_name('.text')
    if text is None: raise ValueError('code object has no .text section')
    blob, addr = text.data(), text['sh_addr']
    syms = elf.get_section_by_name('.symtab')
    idx = elf.get_section_index('.text')
    funcs = {s['st_value'] - addr: s.name for s in (syms.iter_symbols() if syms else [])
             if s['st_info']['type'] == 'STT_FUNC' and s['st_shndx'] == idx}
    return blob, addr, funcs


def main(argv: list[str]) -> int:
    true16 = '--true16' in argv
    argv = [a for a in argv if a != '--true16']
    if len(argv) != 1:
        print('usage: python -m sage_co.emu.disasm [--true16] FILE.co', file=sys.stderr); return 2
    blob, addr, funcs = text_and_symbols(open(argv[0], 'rb').read())
    # Kernels are contiguous in .text (s_code_end padding between/after them), so decode it linearly.
    for o, t in disassemble(blob, addr, true16):
        if o - addr in funcs: print(f'\n{funcs[o - addr]}:')
        print(f'  {o:#010x}  {t}')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
