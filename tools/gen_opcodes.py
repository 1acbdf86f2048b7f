"""Generate sage_co/emu/opcodes.py from LLVM 22's gfx1201 disassembler (dev-only; the runtime never runs LLVM).

For every encoding we build one instruction word per opcode value with recognisable register numbers in every
operand field, disassemble the whole batch with llvm-objdump --mcpu=gfx1201 and read back
  * the mnemonic (and the exact printed spelling, e.g. v_add_f32_e32 / v_fmamk_f32),
  * an operand template: which field each printed operand comes from and how many registers it spans,
  * for VALU sources, an operand type class (how LLVM prints inline constants and literals in that slot).
LLVM's decoder rejects some opcodes when an unused field is non-zero, so several field variants are tried per
opcode and the first that decodes wins.

    python tools/gen_opcodes.py            # rewrites sage_co/emu/opcodes.py
"""
from __future__ import annotations
import os
import pprint
import re
import subprocess
import sys
import tempfile

from sage_co.llvm import LLVMNotFound, find_llvm  # the one LLVM discovery of the repo

try:
    LLVM = str(find_llvm().bin_dir)
except LLVMNotFound:
    LLVM = None             # importable without LLVM (tests skip); running it needs LLVM
S_NOP = 0xbf800000
OUT = os.path.join(os.path.dirname(__file__), '..', 'sage_co', 'emu', 'opcodes.py')


MATTR: list[str] = []      # extra llvm-objdump options of the current pass (['--mattr=+real-true16'] for T16)


def objdump(cands: list[list[int]], stride: int = 16) -> list[str | None]:
    """Disassemble each candidate (list of dwords) placed at a fixed stride padded with s_nop; text or None."""
    lines = []
    for c in cands:
        assert len(c) * 4 <= stride
        lines += ['.long 0x%08x' % w for w in list(c) + [S_NOP] * ((stride - 4 * len(c)) // 4)]
    with tempfile.TemporaryDirectory() as d:
        with open(d + '/a.s', 'w') as fh: fh.write('\n'.join(lines) + '\n')
        subprocess.run([LLVM + '/llvm-mc', '-triple=amdgcn-amd-amdhsa', '-mcpu=gfx1201', '-filetype=obj', d + '/a.s',
                        '-o', d + '/a.o'], check=True)
        out = subprocess.run([LLVM + '/llvm-objdump', '-d', '--mcpu=gfx1201', *MATTR, d + '/a.o'], check=True,
                             capture_output=True, text=True).stdout
    res = {}
    for ln in out.splitlines():
        m = re.match(r'\s+(.*?)\s*// ([0-9A-F]{12}):', ln)
        if m: res[int(m.group(2), 16)] = m.group(1)
    texts = [res.get(i * stride) for i in range(len(cands))]
    return [None if t is None or t.startswith('.long') or 'Invalid' in t else t for t in texts]


def split_operands(s: str) -> list[str]:
    """Split 'a, b(1, 2), c' at top-level commas."""
    out, depth, cur = [], 0, ''
    for ch in s:
        if ch in '([': depth += 1
        elif ch in ')]': depth -= 1
        if ch == ',' and depth == 0:
            out.append(cur.strip()); cur = ''
        else: cur += ch
    if cur.strip(): out.append(cur.strip())
    if out:   # trailing modifiers (offen, offset:4, op_sel:[..]) follow the last operand after a space
        depth, last = 0, out[-1]
        for i, ch in enumerate(last):
            if ch in '([': depth += 1
            elif ch in ')]': depth -= 1
            elif ch == ' ' and depth == 0:
                out[-1] = last[:i]; break
    return out


REG = re.compile(r'^(v|s|ttmp)(?:(\d+)|\[(\d+):(\d+)\])(?:\.[lh])?$')
HALF = re.compile(r'^v\d+\.[lh]$')


def template(ops: list[str], fields: dict[str, tuple[str, int]]) -> tuple:
    """Map printed operand tokens back to fields. fields: name -> (regfile 'v'|'s', probe register number).
    Entries: (field, nregs, printed regfile 'v'|'s') or ('=text', 0, '') for fixed text / literal ('=LIT')."""
    by_reg = {(rf, n): name for name, (rf, n) in fields.items()}
    by_num = {}
    for name, (rf, n) in fields.items(): by_num.setdefault(n, []).append(name)
    tpl = []
    for tok in ops:
        m = REG.match(tok)
        if m:
            rf = m.group(1)
            lo = int(m.group(2) or m.group(3)); hi = int(m.group(2) or m.group(4))
            name = by_reg.get((rf, lo)) or (by_num[lo][0] if len(by_num.get(lo, ())) == 1 else None)
            if name is not None:
                tpl.append((name, hi - lo + 1, rf)); continue
        tpl.append(('=LIT' if tok in ('0xbf800000', '0x11223344') else '=' + tok, 0, ''))
    return tuple(tpl)


def mnemonic_and_ops(text: str) -> tuple[str, list[str]]:
    mn, _, rest = text.partition(' ')
    return mn, split_operands(rest)


def bare(mn: str) -> str:
    for suf in ('_e64_dpp', '_e32', '_e64', '_dpp'):
        if mn.endswith(suf): return mn[:-len(suf)]
    return mn


# Probe register numbers. Scalar codes: 0-105 SGPR; VALU 9-bit codes: 256+n = v n.
SD, S0, S1 = 16, 32, 48          # scalar dst / src0 / src1
VD, V0, V1, V2 = 16, 32, 48, 64  # vector dst / src0 / src1 / src2


def gen_encoding(enc: str, nops: int, variants) -> dict:
    """variants(op) -> list of (dwords, fields) tried in order. Returns op -> (asm, name, template)."""
    table = {}
    todo = {op: variants(op) for op in range(nops)}
    todo = {op: v for op, v in todo.items() if v}
    k = 0
    while todo:
        ops = [op for op in todo if len(todo[op]) > k]
        if not ops: break
        texts = objdump([todo[op][k][0] for op in ops], stride=16)
        for op, t in zip(ops, texts):
            if t is None: continue
            mn, operands = mnemonic_and_ops(t)
            table[op] = (mn, bare(mn), template(operands, todo[op][k][1]), t)
            del todo[op]
        k += 1
    return table


def sop_variants(enc):
    def v(op):
        if enc == 'SOP1':
            return [([0xbe800000 | SD << 16 | op << 8 | S0], {'sdst': ('s', SD), 'ssrc0': ('s', S0)}),
                    ([0xbe800000 | 124 << 16 | op << 8 | S0], {'ssrc0': ('s', S0)}),
                    ([0xbe800000 | SD << 16 | op << 8 | 124], {'sdst': ('s', SD)}),
                    ([0xbe800000 | 124 << 16 | op << 8 | 124], {})]
        if enc == 'SOP2':
            if op >> 5 == 0b11: return None        # [29:28] == 0b11 is SOPK/SOP1/SOPC/SOPP space
            return [([0x80000000 | op << 23 | SD << 16 | S1 << 8 | S0],
                     {'sdst': ('s', SD), 'ssrc0': ('s', S0), 'ssrc1': ('s', S1)})]
        if enc == 'SOPK':
            if op >= 29: return None               # collides with SOP1/SOPC/SOPP
            return [([0xb0000000 | op << 23 | SD << 16 | 0x1234], {'sdst': ('s', SD)}),
                    ([0xb0000000 | op << 23 | SD << 16], {'sdst': ('s', SD)})]
        if enc == 'SOPC':
            return [([0xbf000000 | op << 16 | S1 << 8 | S0], {'ssrc0': ('s', S0), 'ssrc1': ('s', S1)})]
        if enc == 'SOPP':
            return [([0xbf800000 | op << 16 | 0], {}), ([0xbf800000 | op << 16 | 1], {})]
    return v


def smem_variants(op):
    w0 = 0xf4000000 | op << 13 | SD << 6 | (S0 // 2)
    return [([w0, 124 << 25], {'sdata': ('s', SD), 'sbase': ('s', S0)}),
            ([0xf4000000 | op << 13 | (S0 // 2), 124 << 25], {'sbase': ('s', S0)})]


def valu_variants(enc):
    def v(op):
        f = {'vdst': ('v', VD), 'src0': ('v', V0), 'vsrc1': ('v', V1)}
        if enc == 'VOP1':
            return [([0x7e000000 | VD << 17 | op << 9 | 256 + V0], f),
                    ([0x7e000000 | VD << 17 | op << 9 | S0], {'vdst': ('v', VD), 'src0': ('s', S0)}),
                    ([0x7e000000 | op << 9], {})]
        if enc == 'VOP2':
            if op in (0x3e, 0x3f): return None
            return [([op << 25 | VD << 17 | V1 << 9 | 256 + V0], f)]
        if enc == 'VOPC':
            return [([0x7c000000 | op << 17 | V1 << 9 | 256 + V0], f)]
        vf = {'vdst': ('v', VD), 'src0': ('v', V0), 'src1': ('v', V1), 'src2': ('v', V2)}
        w1 = (256 + V2) << 18 | (256 + V1) << 9 | (256 + V0)
        if enc == 'VOP3':
            sf = dict(vf, vdst=('s', SD), sdst=('s', S1 + 8))
            return [([0xd4000000 | op << 16 | (S1 + 8) << 8 | VD, w1], dict(vf, sdst=('s', S1 + 8))),
                    ([0xd4000000 | op << 16 | VD, w1], vf),
                    ([0xd4000000 | op << 16 | SD, w1], sf),
                    ([0xd4000000 | op << 16 | VD, V2 << 18 | V1 << 9 | (256 + V0)],
                     dict(vf, src1=('s', V1), src2=('s', V2))),
                    ([0xd4000000 | op << 16 | VD, V2 << 18 | V1 << 9 | S0],
                     dict(vf, src0=('s', S0), src1=('s', V1), src2=('s', V2))),
                    ([0xd4000000 | op << 16 | VD, (256 + V1) << 9 | (256 + V0)], vf),
                    ([0xd4000000 | op << 16 | SD, (256 + V0)], sf),
                    ([0xd4000000 | op << 16 | SD, S0], dict(sf, src0=('s', S0)))]
        if enc == 'VOP3P':
            return [([0xcc000000 | op << 16 | 1 << 14 | VD, 3 << 27 | w1], vf),
                    ([0xcc000000 | op << 16 | VD, w1], vf)]
    return v


def ds_variants(op):
    f = {'addr': ('v', 8), 'data0': ('v', V0), 'data1': ('v', V1), 'vdst': ('v', VD)}
    out = []
    for mask in (0b111, 0b011, 0b101, 0b001, 0b110, 0b010, 0b100, 0b000):   # data0, data1, vdst present
        w1 = 8 | (V0 << 8 if mask & 1 else 0) | (V1 << 16 if mask & 2 else 0) | (VD << 24 if mask & 4 else 0)
        ff = {k: f[k] for k, b in (('addr', 8), ('data0', 1), ('data1', 2), ('vdst', 4)) if b == 8 or mask & b}
        out.append(([0xd8000000 | op << 18, w1], ff))
        out.append(([0xd8000000 | op << 18, w1 & ~0xff], {k: v for k, v in ff.items() if k != 'addr'}))
    return out


def vmem_variants(seg):
    def v(op):
        base = {'VFLAT': 0xec000000, 'VSCRATCH': 0xed000000, 'VGLOBAL': 0xee000000}[seg] | op << 14
        sve = 1 << 17 if seg == 'VSCRATCH' else 0
        f = {'vdst': ('v', VD), 'vsrc': ('v', V1), 'vaddr': ('v', V0), 'saddr': ('s', S0)}
        out = []
        for saddr in ((S0, 124) if seg != 'VFLAT' else (124,)):
            for vd, vs in ((VD, V1), (VD, 0), (0, V1), (0, 0)):
                ff = {k: f[k] for k, on in (('vdst', vd), ('vsrc', vs), ('vaddr', 1), ('saddr', saddr != 124)) if on}
                out.append(([base | saddr, vs << 23 | sve | vd, V0], ff))
        return out
    return v


def vbuffer_variants(op):
    out = []
    f = {'vdata': ('v', VD), 'vaddr': ('v', V0), 'rsrc': ('s', S0), 'soffset': ('s', S1)}
    for fmt in (1, 0):
        out.append(([0xc4000000 | op << 14 | S1, 1 << 30 | fmt << 23 | S0 << 9 | VD, V0], f))
        out.append(([0xc4000000 | op << 14 | S1, fmt << 23 | S0 << 9 | VD, 0], f))
    return out


VOPD_X = None


def gen_vopd():
    # opx in [25:22], opy in [21:17]; probe each X with Y = v_dual_mov_b32 (8), each Y with X = v_dual_mov_b32 (8).
    # LLVM rejects a non-zero vsrc1 field for ops without one, so try with and without each vsrc1.
    fx = {'vdstx': ('v', VD + 8), 'srcx0': ('v', V0), 'vsrcx1': ('v', V1 + 1)}
    fy = {'vdsty': ('v', VD + 1), 'srcy0': ('v', V0 + 3), 'vsrcy1': ('v', V1 + 2)}

    def variants(opx, opy):
        out = []
        for x1 in (V1 + 1, 0):
            for y1 in (V1 + 2, 0):
                w0 = 0xc8000000 | opx << 22 | opy << 17 | x1 << 9 | (256 + V0)
                w1 = (VD + 8) << 24 | ((VD + 1) >> 1) << 17 | y1 << 9 | (256 + V0 + 3)
                ff = dict(fx, **fy)
                if not x1: del ff['vsrcx1']
                if not y1: del ff['vsrcy1']
                out.append(([w0, w1, 0x11223344], ff))
        return out
    X, Y = {}, {}
    for tbl, part, mk in ((X, 0, lambda op: variants(op, 8)), (Y, 1, lambda op: variants(8, op))):
        raw = gen_encoding('VOPD', 32 if part else 16, mk)
        for op, (mn, _, tpl, t) in raw.items():
            half = t.split('::')[part].strip()
            mn, operands = mnemonic_and_ops(half)
            ff = mk(op)[0][1]
            tbl[op] = (mn, template(operands, ff), t)
    return X, Y


def gen_symbols() -> dict:
    """Symbolic operand spellings LLVM uses: hwreg ids, sendmsg immediates, th/scope cache-policy names."""
    def inner(t):
        return t[t.index('(') + 1:t.rindex(')')]
    hw = objdump([[0xb8800000 | 31 << 11 | i] for i in range(64)])            # s_getreg_b32 s0, hwreg(i)
    hwreg = {i: inner(t) for i, t in enumerate(hw) if t and not inner(t).isdigit()}
    sm = objdump([[0xbfb60000 | i] for i in range(1024)])                       # s_sendmsg
    sendmsg = {i: t.split(' ', 1)[1] for i, t in enumerate(sm) if t and 'MSG_' in t}
    th = {}
    for kind, base, w1 in (('load', 0xee050000 | 124, 0), ('store', 0xee068000 | 124, 1 << 23),
                           ('atomic', 0xee0d4000 | 124, 1 << 23)):
        texts = objdump([[base, w1 | t << 20, 2] for t in range(8)])
        th[kind] = {t: (x.split('th:')[1].split()[0] if 'th:' in x else '') for t, x in enumerate(texts)}
    sc = objdump([[0xee050000 | 124, s << 18, 2] for s in range(4)])
    scope = {s: (x.split('scope:')[1].split()[0] if 'scope:' in x else '') for s, x in enumerate(sc)}
    fm = objdump([[0xc4220000 | 124, f << 23 | 8 << 9 | 4, 0] for f in range(128)])   # tbuffer_load_format_x
    fmt = {i: t.split('format:')[1].split()[0] for i, t in enumerate(fm) if t and 'format:' in t}
    return dict(HWREG=hwreg, SENDMSG=sendmsg, TH=th, SCOPE=scope, BUF_FORMAT=fmt)


def gen_true16(tables: dict) -> dict:
    """The real-true16 view (llvm-objdump --mattr=+real-true16, the hardware's reading of 16-bit operands):
    T16[enc][op] = (asm, name, template, halves) for every VALU opcode whose true16 text differs from the default
    view or that only exists there; halves = the fields printed as a 16-bit half (vN.l / vN.h)."""
    MATTR[:] = ['--mattr=+real-true16']
    try:
        out = {}
        for enc, n in (('VOP1', 256), ('VOP2', 64), ('VOPC', 256), ('VOP3', 1024)):
            base = valu_variants(enc)

            def variants(op, base=base, enc=enc):
                # VOP3 probe 0 sets modifier bits [14:8] (an sdst for VOP3SD); for other ops LLVM's true16 decoder
                # then falls back to the default view, so probe them without it
                v = base(op)
                sd = op in tables['VOP3'] and any(t[0] == 'sdst' for t in tables['VOP3'][op][2])
                return v[1:] if v and enc == 'VOP3' and not sd else v
            raw = gen_encoding(enc, n, variants)
            t16 = {}
            for op, (mn, name, tpl, text) in raw.items():
                _, toks = mnemonic_and_ops(text)
                halves = tuple(t[0] for t, tok in zip(tpl, toks) if HALF.match(tok.strip('-|')))
                default = tables[enc].get(op)
                if halves or default is None or default[0] != mn:
                    t16[op] = (mn, name, tpl, halves)
            out[enc] = t16
        return out
    finally:
        MATTR[:] = []


def main():
    tables = {}
    for enc, n in (('SOP1', 256), ('SOP2', 128), ('SOPK', 32), ('SOPC', 128), ('SOPP', 128)):
        tables[enc] = gen_encoding(enc, n, sop_variants(enc))
    tables['SMEM'] = gen_encoding('SMEM', 64, smem_variants)
    for enc, n in (('VOP1', 256), ('VOP2', 64), ('VOPC', 256), ('VOP3', 1024), ('VOP3P', 128)):
        tables[enc] = gen_encoding(enc, n, valu_variants(enc))
    tables['DS'] = gen_encoding('DS', 256, ds_variants)
    for seg in ('VGLOBAL', 'VSCRATCH', 'VFLAT'):
        tables[seg] = gen_encoding(seg, 256, vmem_variants(seg))
    tables['VBUFFER'] = gen_encoding('VBUFFER', 256, vbuffer_variants)
    vx, vy = gen_vopd()
    t16 = gen_true16(tables)
    for enc, t in tables.items():
        print(enc, len(t), file=sys.stderr)
    with open(OUT, 'w') as fh:
        fh.write('"""gfx1201 opcode tables, GENERATED by tools/gen_opcodes.py from LLVM 22 llvm-objdump. Do not edit.\n\n'
                 'OPS[enc][opcode] = (asm, name, template)\n'
                 '  asm:      mnemonic exactly as llvm-objdump prints the non-DPP form (e.g. v_add_f32_e32)\n'
                 '  name:     mnemonic without _e32/_e64/_dpp\n'
                 '  template: printed operands in order; (field, nregs, regfile) for a register/operand field,\n'
                 '            ("=text", 0, "") for fixed text LLVM printed in the probe (vcc_lo, off, hwreg(...), ...)\n'
                 'VOPD_X / VOPD_Y[op] = (name, template) for the two halves of a VOPD pair.\n'
                 'T16[enc][op] = (asm, name, template, halves): the llvm-objdump --mattr=+real-true16 view of VALU\n'
                 '  opcodes whose text differs there or that exist only there; halves = fields printed as vN.l/vN.h.\n"""\n')
        fh.write('OPS = ' + pprint.pformat({e: {op: v[:3] for op, v in sorted(t.items())} for e, t in tables.items()},
                                          width=120, sort_dicts=False) + '\n\n')
        fh.write('VOPD_X = ' + pprint.pformat({op: v[:2] for op, v in sorted(vx.items())}, width=120) + '\n\n')
        fh.write('VOPD_Y = ' + pprint.pformat({op: v[:2] for op, v in sorted(vy.items())}, width=120) + '\n\n')
        fh.write('T16 = ' + pprint.pformat({e: dict(sorted(t.items())) for e, t in t16.items()}, width=120,
                                           sort_dicts=False) + '\n')
        for k, v in gen_symbols().items():
            fh.write('\n' + k + ' = ' + pprint.pformat(v, width=120) + '\n')


if __name__ == '__main__':
    main()
