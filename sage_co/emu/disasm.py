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

import argparse
import io
import os
import sys

from elftools.common.exceptions import ELFError
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


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m sage_co.emu.disasm",
                                 description="Disassemble the .text of a gfx1201 code object or relocatable object "
                                             "as llvm-objdump -d --mcpu=gfx1201 prints it (no LLVM needed).")
    ap.add_argument("file", metavar="FILE.co", help="code object (.co/.hsaco) or relocatable object (.o)")
    ap.add_argument("--true16", action="store_true",
                    help="16-bit registers as llvm-objdump --mattr=+real-true16 prints them (vN.l / vN.h)")
    return ap


def _fail(message: str, code: int) -> int:
    try:
        print(f"disasm: {message}", file=sys.stderr)
    except OSError:
        pass
    return code


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)        # argparse: --help prints usage; a bad option exits 2 with a usage line
    try:
        with open(args.file, "rb") as f:
            data = f.read()
        blob, addr, funcs = text_and_symbols(data)
    except OSError as exc:
        return _fail(f"cannot read {args.file}: {exc.strerror or exc}", 1)
    except (ValueError, ELFError) as exc:
        return _fail(f"{args.file} is not a usable ELF object: {exc}", 1)
    try:
        # Kernels are contiguous in .text (s_code_end padding between/after them), so decode it linearly.
        for o, t in disassemble(blob, addr, args.true16):
            if o - addr in funcs: print(f'\n{funcs[o - addr]}:')
            print(f'  {o:#010x}  {t}')
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): point stdout at /dev/null so the interpreter's final flush does not
        # raise a second time, and exit non-zero without a traceback.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return _fail("output closed before everything was written (broken pipe)", 1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
