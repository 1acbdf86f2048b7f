"""Instruction text that matches `llvm-objdump -d --mcpu=gfx1201` (whitespace normalised, comments dropped).

    disassemble(code: bytes, base=0) -> list[(offset, text)]
    inst_text(inst: Inst) -> str
    (the command-line disassembler around it: python -m sage_co.emu.disasm FILE.co)

Operand spelling follows LLVM's AMDGPUInstPrinter; every rule here is checked against llvm-objdump by
tests/emu/test_decode.py. Nothing here runs LLVM.
"""
from __future__ import annotations

import re

from .decode import OPS, Inst, decode, register_text, reg_text
from .opcodes import T16, VOPD_X, VOPD_Y, HWREG, SENDMSG, TH, SCOPE, BUF_FORMAT

# ---- constants -------------------------------------------------------------------------------------------------
# Inline float constants 240..248 (RDNA4 ISA "Inline constants"); 248 = 1/(2*pi), spelled per operand width.
INLINE_F = {240: '0.5', 241: '-0.5', 242: '1.0', 243: '-1.0', 244: '2.0', 245: '-2.0', 246: '4.0', 247: '-4.0'}
INV2PI = {'f16': '0.15915494', 'f32': '0.15915494', 'f64': '0.15915494309189532'}
F32_INLINE_BITS = {0x3f000000, 0xbf000000, 0x3f800000, 0xbf800000, 0x40000000, 0xc0000000, 0x40800000, 0xc0800000,
                   0x3e22f983}
F16_INLINE_BITS = {0x3800, 0xb800, 0x3c00, 0xbc00, 0x4000, 0xc000, 0x4400, 0xc400, 0x3118}
F64_HI_INLINE_BITS = {0x3fe00000, 0xbfe00000, 0x3ff00000, 0xbff00000, 0x40000000, 0xc0000000, 0x40100000,
                      0xc0100000, 0x3fc45f30}


# f16 bit patterns of inline constants 240..248 (0.5, -0.5, 1, -1, 2, -2, 4, -4, 1/(2 pi))
SOPC_F16_INLINE_BITS = (0x3800, 0xB800, 0x3C00, 0xBC00, 0x4000, 0xC000, 0x4400, 0xC400, 0x3118)


def operand_kind(name: str, field: str, nregs: int) -> str:
    """Type class of a source slot, from the mnemonic: decides how constants print ('f32','f16','f64','b32','b64',
    'b16')."""
    base = name.split('_e64')[0]
    parts = base.split('_')
    types = [p for p in parts if p[:1] in 'fiub' and p[1:].isdigit() or p in ('bf16', 'fp8', 'bf8', 'iu8', 'iu4')]
    if base.startswith('v_cvt_') or base.startswith('s_cvt_'):
        t = types[-1] if types else 'b32'     # v_cvt_<dst>_<src>: the source type is last
    else:
        t = types[-1] if types else 'b32'
    if nregs == 2: return 'f64' if t == 'f64' else 'b64'
    if t == 'f16' and base.startswith('s_cmp_'): return 'f16_hex'   # LLVM prints SOPC f16 constants as f16 hex
    if t in ('f32',): return 'f32'
    if t in ('f16', 'bf16'): return 'f16' if t == 'f16' else 'bf16'
    if t in ('i16', 'u16', 'b16'): return 'b16'
    return 'b32'


def operand_text(code: int, literal: int | None = None, kind: str = 'b32', nregs: int = 1) -> str:
    """LLVM spelling of a 9-bit (or 8-bit scalar) operand code."""
    r = register_text(code, nregs)
    if r is not None: return r
    if 128 <= code <= 192: return str(code - 128)
    if 193 <= code <= 208: return str(192 - code)
    if kind == 'f16_hex' and 240 <= code <= 248:            # e.g. s_cmp_lt_f16 s4, 1.0 prints as 0x3c00
        return f'{SOPC_F16_INLINE_BITS[code - 240]:#x}'
    if code in INLINE_F: return INLINE_F[code]
    if code == 248: return INV2PI.get(kind, '0.15915494')
    if code == 255:
        if literal is None: raise ValueError('literal operand without literal dword')
        return literal_text(literal, kind)
    return f'src_{code}'


def literal_text(lit: int, kind: str) -> str:
    """A literal prints as hex; lit(...) when the value could have been an inline constant of that type."""
    if kind == 'f16_hex': return f'{lit:#x}'               # SOPC f16: LLVM never marks a literal lit(...)
    if kind in ('f16', 'bf16', 'b16'):
        inline = lit <= 64 or lit >= 0xfff0 and lit <= 0xffff or (kind == 'f16' and lit in F16_INLINE_BITS)
    elif kind == 'f64':
        inline = lit in F64_HI_INLINE_BITS or lit == 0
    elif kind == 'b64':
        inline = lit <= 64 or lit >= 0xfffffff0 or lit in F32_INLINE_BITS
    else:
        inline = lit <= 64 or lit >= 0xfffffff0 or lit in F32_INLINE_BITS
    return f'lit({lit:#x})' if inline else f'{lit:#x}'


def imm32_text(v: int) -> str:
    """A mandatory 32-bit immediate: printed as the inline constant it equals, else hex (never lit())."""
    if v <= 64: return str(v)
    if v >= 0xfffffff0: return str(v - (1 << 32))
    for code, bits in zip(range(240, 249), (0x3f000000, 0xbf000000, 0x3f800000, 0xbf800000, 0x40000000, 0xc0000000,
                                           0x40800000, 0xc0800000, 0x3e22f983)):
        if v == bits: return operand_text(code, None, 'f32')
    return f'{v:#x}'


def sreg(code: int, nregs: int) -> str:
    return operand_text(code, None, 'b32', nregs)


# ---- per encoding ----------------------------------------------------------------------------------------------
def _ops(inst: Inst, tpl, neg=0, abs_=0, vgpr_fields=(), srcmod=True) -> list[str]:
    out = []
    slot = {'src0': 0, 'src1': 1, 'src2': 2, 'vsrc1': 1}
    for field, nregs, rf in tpl:
        if field.startswith('='):
            if field == '=LIT':
                out.append(f'{inst.literal:#x}')       # fmaak/fmamk KIMM: always plain hex
            else:
                out.append(field[1:])
            continue
        v = inst.f[field]
        if field in vgpr_fields or rf == 'v' and field in ('vdst', 'vsrc1', 'vdstx', 'vdsty', 'vsrcx1', 'vsrcy1'):
            t = reg_text('v', v, nregs)
        elif field in ('vdst', 'sdst') and rf == 's':
            t = sreg(v, nregs)
        else:
            t = operand_text(v, inst.literal, operand_kind(inst.name, field, nregs), nregs)
        if srcmod and field in slot:
            i = slot[field]
            if abs_ >> i & 1: t = f'|{t}|'
            if neg >> i & 1: t = f'-{t}'
        out.append(t)
    return out


def _bits(v: int, n: int) -> str:
    return '[' + ','.join(str(v >> i & 1) for i in range(n)) + ']'


DPP_ROW = ((0x101, 0x10f, 'row_shl'), (0x111, 0x11f, 'row_shr'), (0x121, 0x12f, 'row_ror'),
           (0x150, 0x15f, 'row_share'), (0x160, 0x16f, 'row_xmask'))


def _dpp_text(d) -> str:
    if 'dpp_ctrl' not in d:
        sel = ','.join(str(d[f'lane_sel{i}']) for i in range(8))
        return f'dpp8:[{sel}]' + (' fi:1' if d['fi'] else '')
    c = d['dpp_ctrl']
    if c <= 0xff: s = 'quad_perm:[' + ','.join(str(c >> (2 * i) & 3) for i in range(4)) + ']'
    elif c == 0x140: s = 'row_mirror'
    elif c == 0x141: s = 'row_half_mirror'
    else:
        s = next((f'{nm}:{c - lo + (1 if nm in ("row_shl", "row_shr", "row_ror") else 0)}'
                  for lo, hi, nm in DPP_ROW if lo <= c <= hi), f'{c:#x}')
    s += f' row_mask:{d["row_mask"]:#x} bank_mask:{d["bank_mask"]:#x}'
    if d['bc']: s += ' bound_ctrl:1'
    if d['fi']: s += ' fi:1'
    return s


_HALF_IDX = {'src0': 0, 'src1': 1, 'src2': 2, 'vdst': 3}


def _halves(inst: Inst, tpl, ops: list, halves) -> None:
    """real-true16 spelling: a 16-bit register operand is vN.l / vN.h -- in VOP1/VOP2/VOPC the field holds the
    register in bits [6:0] and the half in bit 7; in VOP3 the half is the operand's op_sel bit (vdst: bit 3)."""
    e32 = inst.enc in ('VOP1', 'VOP2', 'VOPC')
    opsel = inst.f.get('opsel', 0)
    for i, t in enumerate(tpl):
        if t[0] not in halves or i >= len(ops):
            continue

        def sub(m, field=t[0]):
            n = int(m.group(1))
            reg, hi = (n & 127, n >> 7) if e32 else (n, opsel >> _HALF_IDX[field] & 1)
            return f'v{reg}.{"h" if hi else "l"}'
        ops[i] = re.sub(r'\bv(\d+)\b', sub, ops[i], count=1)


def _valu(inst: Inst, true16: bool = False) -> str:
    enc, f = inst.enc, inst.f
    tenc = 'VOP3' if enc == 'VOP3SD' else enc
    asm, _, tpl = OPS[tenc][inst.opcode]
    t16 = T16.get(tenc, {}).get(inst.opcode) if true16 else None
    halves = ()
    if t16 is not None:
        asm, _, tpl, halves = t16
    d = inst.dpp
    if enc in ('VOP1', 'VOP2', 'VOPC'):
        neg = abs_ = 0
        if d is not None:
            asm = inst.name if enc == 'VOPC' else inst.name + '_dpp'    # LLVM prints VOPC DPP without _dpp
            if 'dpp_ctrl' in d:
                neg, abs_ = d['src0_neg'] | d['src1_neg'] << 1, d['src0_abs'] | d['src1_abs'] << 1
        ops = _ops(inst, tpl, neg, abs_, vgpr_fields=('src0',) if d is not None else ())
        if d is not None:
            ops[[t[0] for t in tpl].index('src0')] = _mod(f'v{d["src0"]}', 0, neg, abs_)
        _halves(inst, tpl, ops, halves)
        return _join(asm, ops, [_dpp_text(d)] if d is not None else [])
    if d is not None:
        asm = inst.name + '_e64_dpp'
    neg, abs_ = (0, 0) if enc == 'VOP3P' else (f['neg'], f['abs'])   # VOP3P prints neg as neg_lo:[..]
    mix = enc == 'VOP3P' and inst.name.startswith('v_fma_mix')
    if mix:                       # v_fma_mix*: NEG / NEG_HI are per-source neg / abs, printed like VOP3 (-v, |v|)
        neg, abs_ = f['neg'], f['neg_hi']
    ops = _ops(inst, tpl, neg, abs_)
    if d is not None:
        fields = [t[0] for t in tpl]
        ops[fields.index('src0')] = _mod(f'v{d["src0"]}', 0, neg, abs_)
    _halves(inst, tpl, ops, halves)
    nsrc = sum(1 for t in tpl if t[0] in ('src0', 'src1', 'src2'))
    mods = []
    name = inst.name
    if enc == 'VOP3P':
        packed_default = 0 if 'mix' in name else 7
        if f['opsel']: mods.append('op_sel:' + _bits(f['opsel'], nsrc))
        if (f['opsel_hi'] & ((1 << nsrc) - 1)) != (packed_default & ((1 << nsrc) - 1)):
            mods.append('op_sel_hi:' + _bits(f['opsel_hi'], nsrc))
        if name.startswith('v_swmmac') and f['opsel']:
            mods = [f'index_key:{f["opsel"]}']
        if f['neg'] and not mix: mods.append('neg_lo:' + _bits(f['neg'], nsrc))
        if f['neg_hi'] and not mix: mods.append('neg_hi:' + _bits(f['neg_hi'], nsrc))
        # integer and 8-bit-float neg bits were already printed above via neg_lo
        if f['clamp']: mods.append('clamp')
        return _join(asm, ops, mods)
    if enc == 'VOP3':
        opsel = f['opsel']
        if name in ('v_cvt_f32_fp8', 'v_cvt_f32_bf8') or name.startswith('v_cvt_sr_'):
            # byte_sel is OPSEL bit-reversed over [3:2] (docs/rdna4.md §FP8, v_cvt_f32_fp8)
            bs = (opsel >> 1 & 1) | (opsel & 1) << 1 if name.startswith('v_cvt_f32') else opsel >> 2 & 3
            if bs: mods.append(f'byte_sel:{bs}')
        elif opsel and halves and any(t[0] == 'src2' for t in tpl) and 'src2' not in halves:
            pass          # real-true16 v_cndmask_b16: the .l/.h suffixes carry op_sel and LLVM prints none
        elif opsel:
            n = nsrc + 1 if not name.startswith('v_permlane') else 2
            bits = [opsel >> i & 1 for i in range(nsrc)] + [opsel >> 3 & 1]
            if name.startswith('v_permlane'): bits = [opsel & 1, opsel >> 1 & 1]
            mods.append('op_sel:[' + ','.join(map(str, bits[:n])) + ']')
    if f['clamp']: mods.append('clamp')
    if f['omod']: mods.append({1: 'mul:2', 2: 'mul:4', 3: 'div:2'}[f['omod']])
    if d is not None: mods.append(_dpp_text(d))
    return _join(asm, ops, mods)


def _mod(t: str, i: int, neg: int, abs_: int) -> str:
    if abs_ >> i & 1: t = f'|{t}|'
    if neg >> i & 1: t = f'-{t}'
    return t


def _join(asm: str, ops: list[str], mods: list[str]) -> str:
    s = asm + (' ' + ', '.join(ops) if ops else '')
    return ' '.join([s] + [m for m in mods if m])


def _vopd(inst: Inst) -> str:
    X, Y = VOPD_X[inst.f['opx']], VOPD_Y[inst.f['opy']]
    halves = []
    for nm, tpl in (X, Y):
        ops = []
        for field, nregs, rf in tpl:
            if field == '=LIT': ops.append(f'{inst.literal:#x}')
            elif field.startswith('='): ops.append(field[1:])
            elif field in ('srcx0', 'srcy0'): ops.append(operand_text(inst.f[field], inst.literal, 'f32'))
            else: ops.append(reg_text('v', inst.f[field], 1))
        halves.append(nm + ' ' + ', '.join(ops))
    return ' :: '.join(halves)


def _sopp(inst: Inst) -> str:
    asm, name, tpl = OPS['SOPP'][inst.opcode]
    imm = inst.f['simm16']
    imm - 0x10000 if imm & 0x8000 else imm
    if not tpl: return asm
    if name == 's_delay_alu': return asm + ' ' + _delay_alu(imm)
    if name == 's_wait_alu': return asm + ' ' + _depctr(imm)
    if name == 's_waitcnt': return asm + ' ' + _waitcnt(imm)
    if name in ('s_sendmsg', 's_sendmsghalt'):
        return asm + ' ' + SENDMSG.get(imm, f'sendmsg({imm & 0xff}, {imm >> 8 & 7}, {imm >> 11 & 3})')
    if tpl[0][0].startswith('=0x'): return f'{asm} {imm:#x}'
    if name.startswith('s_branch') or name.startswith('s_cbranch'):
        return f'{asm} {imm}'                   # llvm-objdump prints the raw simm16 unsigned (target in a comment)
    return f'{asm} {imm}' if imm <= 64 else f'{asm} {imm:#x}'     # LLVM: inline-int range in decimal, else hex


DELAY_ID = ['NO_DEP', 'VALU_DEP_1', 'VALU_DEP_2', 'VALU_DEP_3', 'VALU_DEP_4', 'TRANS32_DEP_1', 'TRANS32_DEP_2',
            'TRANS32_DEP_3', 'FMA_ACCUM_CYCLE_1', 'SALU_CYCLE_1', 'SALU_CYCLE_2', 'SALU_CYCLE_3']
DELAY_SKIP = ['SAME', 'NEXT', 'SKIP_1', 'SKIP_2', 'SKIP_3', 'SKIP_4']


def _delay_alu(imm: int) -> str:
    id0, skip, id1 = imm & 0xf, imm >> 4 & 7, imm >> 7 & 0xf
    if imm >> 11 or id0 >= len(DELAY_ID) or id1 >= len(DELAY_ID) or skip >= len(DELAY_SKIP): return f'{imm:#x}'
    parts = []
    if id0: parts.append(f'instid0({DELAY_ID[id0]})')
    if skip: parts.append(f'instskip({DELAY_SKIP[skip]})')
    if id1: parts.append(f'instid1({DELAY_ID[id1]})')
    return ' | '.join(parts) if parts else '0'


# s_wait_alu depctr fields (name, shift, width), in LLVM's print order; a field at its all-ones default is omitted.
DEPCTR = (('depctr_hold_cnt', 7, 1), ('depctr_sa_sdst', 0, 1), ('depctr_va_vdst', 12, 4), ('depctr_va_sdst', 9, 3),
          ('depctr_va_ssrc', 8, 1), ('depctr_va_vcc', 1, 1), ('depctr_vm_vsrc', 2, 3))


def _depctr(imm: int) -> str:
    if imm >> 5 & 3: return f'{imm:#x}'      # bits [6:5] unused: LLVM falls back to hex
    vals = [(nm, imm >> sh & ((1 << w) - 1), (1 << w) - 1) for nm, sh, w in DEPCTR]
    parts = [f'{nm}({v})' for nm, v, dflt in vals if v != dflt] or [f'{nm}({v})' for nm, v, _ in vals]
    return ' '.join(parts)


def _waitcnt(imm: int) -> str:
    # gfx12 legacy s_waitcnt: expcnt [2:0], lgkmcnt [9:4], vmcnt [15:10]
    vm, exp, lgkm = imm >> 10 & 0x3f, imm & 7, imm >> 4 & 0x3f
    parts = [f'{n}({v})' for n, v, m in (('vmcnt', vm, 0x3f), ('expcnt', exp, 7), ('lgkmcnt', lgkm, 0x3f)) if v != m]
    return ' '.join(parts) if parts else f'{imm:#x}'


def _salu(inst: Inst) -> str:
    enc, f = inst.enc, inst.f
    asm, name, tpl = OPS[enc][inst.opcode]
    if enc == 'SOPP': return _sopp(inst)
    if enc == 'SOPK':
        imm = f['simm16']
        ops = []
        for field, nregs, rf in tpl:
            if field == 'sdst': ops.append(sreg(f['sdst'], nregs))
            elif field.startswith('=hwreg'): ops.append(_hwreg(imm))
            elif name == 's_call_b64': ops.append(str(imm - 0x10000 if imm & 0x8000 else imm))
            elif name == 's_setreg_imm32_b32': ops.append(imm32_text(inst.literal))
            else: ops.append(f'{imm:#x}')
        return _join(asm, ops, [])
    return _join(asm, _ops(inst, tpl, srcmod=False), [])


def _hwreg(imm: int) -> str:
    rid, off, size = imm & 0x3f, imm >> 6 & 0x1f, (imm >> 11 & 0x1f) + 1
    nm = HWREG.get(rid, str(rid))
    return f'hwreg({nm})' if off == 0 and size == 32 else f'hwreg({nm}, {off}, {size})'


def _cpol(f, kind: str) -> list[str]:
    out = []
    th = TH[kind].get(f['th'], '')
    if th: out.append(f'th:{th}')
    if SCOPE.get(f['scope']): out.append(f'scope:{SCOPE[f["scope"]]}')
    return out


def _th_kind(name: str) -> str:
    if 'atomic' in name: return 'atomic'
    if 'store' in name: return 'store'
    return 'load'


def _smem(inst: Inst) -> str:
    f = inst.f
    asm, name, tpl = OPS['SMEM'][inst.opcode]
    off = f['offset']
    offtxt = f'-{-off:#x}' if off < 0 else f'{off:#x}'
    mods = _cpol(f, 'load') + (['nv'] if f['nv'] else [])
    if not any(t[0] == 'sdata' for t in tpl):
        # s_atc_probe / s_prefetch_* / s_dcache_inv: sdata is a number (probe mode / prefetch size), offset and
        # soffset in the template's order
        fixed = {'=0x0': offtxt, '=null': sreg(f['soffset'], 1), '=16': str(f['sdata'])}
        ops = [sreg(f['sbase'], n) if fld == 'sbase' else fixed.get(fld, fld[1:]) for fld, n, _ in tpl]
        return _join(asm, ops, mods)
    ops = []
    for field, nregs, rf in tpl:
        if field == 'sdata': ops.append(sreg(f['sdata'], nregs))
        elif field == 'sbase': ops.append(sreg(f['sbase'], nregs))
    if f['soffset'] != 124:
        ops.append(sreg(f['soffset'], 1) + f' offset:{offtxt}')
    else:
        ops.append(offtxt)
    return _join(asm, ops, mods)


def _ds(inst: Inst) -> str:
    f = inst.f
    asm, name, tpl = OPS['DS'][inst.opcode]
    ops = [reg_text('v', f[field], nregs) for field, nregs, rf in tpl if not field.startswith('=')]
    mods = []
    if '2addr' in name:
        if f['offset0']: mods.append(f'offset0:{f["offset0"]}')
        if f['offset1']: mods.append(f'offset1:{f["offset1"]}')
    elif name == 'ds_swizzle_b32':
        if f['offset']: mods.append('offset:' + _swizzle(f['offset']))
    elif f['offset']:
        mods.append(f'offset:{f["offset"]}')
    return _join(asm, ops, mods)


def _swizzle(off: int) -> str:
    if off & 0x8000:
        return 'swizzle(QUAD_PERM,' + ','.join(str(off >> (2 * i) & 3) for i in range(4)) + ')'
    and_m, or_m, xor_m = off & 0x1f, off >> 5 & 0x1f, off >> 10 & 0x1f
    if and_m == 0x1f and or_m == 0 and xor_m and xor_m & (xor_m - 1) == 0:
        return f'swizzle(SWAP,{xor_m})'
    if and_m == 0x1f and or_m == 0 and xor_m and xor_m & (xor_m + 1) == 0:
        return f'swizzle(REVERSE,{xor_m + 1})'
    for grp in (2, 4, 8, 16, 32):
        if and_m == 0x20 - grp and xor_m == 0 and or_m < grp:
            return f'swizzle(BROADCAST,{grp},{or_m})'
    mask = ''
    for i in range(4, -1, -1):
        a, o, x = and_m >> i & 1, or_m >> i & 1, xor_m >> i & 1
        mask += 'p' if a and not o and not x else 'i' if a and x and not o else '1' if o and not a and not x \
            else '0' if not a and not o and not x else '?'
    if '?' not in mask: return f'swizzle(BITMASK_PERM,"{mask}")'
    return f'{off:#x}'


def _vmem(inst: Inst) -> str:
    f = inst.f
    asm, name, tpl = OPS[inst.enc][inst.opcode]
    kind = _th_kind(name)
    fields = {t[0]: t[1] for t in tpl}
    ops = []
    if kind == 'atomic' and f['th'] & 1:          # returning atomic: vdst first (TH_ATOMIC_RETURN)
        n = fields.get('vsrc', 1)
        ops.append(reg_text('v', f['vdst'], n // 2 if 'cmpswap' in name else n))
    off = f['saddr'] == 124
    for field, nregs, rf in tpl:
        if field == 'vdst':
            if kind != 'atomic': ops.append(reg_text('v', f['vdst'], nregs))
        elif field == 'vaddr':
            if inst.enc == 'VSCRATCH' and not f['sve']: ops.append('off')
            else: ops.append(reg_text('v', f['vaddr'], 2 if inst.enc != 'VSCRATCH' and off else 1))
        elif field == 'vsrc': ops.append(reg_text('v', f['vsrc'], nregs))
        elif field in ('saddr', '=off'): pass
    if inst.enc != 'VFLAT' and tpl:
        ops.append('off' if off else sreg(f['saddr'], 2 if inst.enc == 'VGLOBAL' else 1))
    mods = [f'offset:{f["offset"]}'] if f['offset'] else []
    return _join(asm, ops, mods + _cpol(f, kind))


def _vbuffer(inst: Inst) -> str:
    f = inst.f
    asm, name, tpl = OPS['VBUFFER'][inst.opcode]
    kind = _th_kind(name)
    nv = 2 if f['idxen'] and f['offen'] else 1
    ops = [reg_text('v', f['vdata'], dict((t[0], t[1]) for t in tpl)['vdata']),
           reg_text('v', f['vaddr'], nv) if f['idxen'] or f['offen'] else 'off',
           sreg(f['rsrc'], 4), sreg(f['soffset'], 1)]
    mods = []
    if name.startswith('tbuffer') and f['format'] != 1:     # 1 = BUF_FMT_8_UNORM, LLVM's default, not printed
        mods.append('format:' + BUF_FORMAT.get(f['format'], str(f['format'])))
    if f['idxen']: mods.append('idxen')
    if f['offen']: mods.append('offen')
    if f['offset']: mods.append(f'offset:{f["offset"]}')
    return _join(asm, ops, mods + _cpol(f, kind))


def inst_text(inst: Inst, true16: bool = False) -> str:
    """true16: spell 16-bit register operands as llvm-objdump --mattr=+real-true16 does (vN.l / vN.h)."""
    enc = inst.enc
    if enc in ('SOP1', 'SOP2', 'SOPK', 'SOPC', 'SOPP'): return _salu(inst)
    if enc == 'SMEM': return _smem(inst)
    if enc == 'VOPD': return _vopd(inst)
    if enc == 'DS': return _ds(inst)
    if enc in ('VGLOBAL', 'VFLAT', 'VSCRATCH'): return _vmem(inst)
    if enc == 'VBUFFER': return _vbuffer(inst)
    return _valu(inst, true16)


def disassemble(code: bytes, base: int = 0, true16: bool = False) -> list[tuple[int, str]]:
    # the text is a function of the instruction's bytes (never of its offset: branches print the raw simm16), and
    # unrolled kernels repeat their encodings: spell each distinct one once
    out, texts = [], {}
    for i in decode(code, base):
        key = code[i.offset - base:i.offset - base + i.size]
        t = texts.get(key)
        if t is None:
            t = texts[key] = inst_text(i, true16)
        out.append((i.offset, t))
    return out
