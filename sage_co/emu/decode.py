"""gfx1201 (RDNA4) instruction decoder: machine code bytes -> Inst records.

Data model (stable; the executor depends on these names):

  decode(code: bytes, base=0) -> list[Inst]     linear decode of a whole blob (offsets are base + byte offset)
  decode_at(code, offset) -> Inst               one instruction at a byte offset
  DecodeError                                   unknown/truncated encoding; message names offset (hex) and dword(s)

  Inst(offset, size, enc, opcode, name, f, literal, dpp)  frozen dataclass
    offset   byte offset within the decoded blob (+ base)
    size     bytes, including a literal or DPP dword
    enc      'SOP1','SOP2','SOPK','SOPC','SOPP','SMEM','VOP1','VOP2','VOPC','VOP3','VOP3SD','VOP3P','VOPD','DS',
             'VGLOBAL','VBUFFER' (also 'VFLAT','VSCRATCH'). DPP is not an enc: see `dpp`.
    opcode   the encoding's opcode field. VOP1/VOP2/VOPC promoted to VOP3 use VOP3 opcodes
             (VOPC 0-255, VOP2 256+op, VOP1 384+op: docs RDNA4 ISA "VOP3 opcode map").
    name     LLVM mnemonic without _e32/_e64/_dpp ('v_add_f32', 'v_cmp_gt_f32', 'v_wmma_i32_16x16x16_iu8').
             VOPD: 'v_dual_fmac_f32|v_dual_mov_b32' (X half | Y half).
    f        raw fields, names as in AMD's RDNA4 ISA doc, lowercase:
               SOP1 sdst ssrc0 | SOP2 sdst ssrc0 ssrc1 | SOPK sdst simm16 | SOPC ssrc0 ssrc1 | SOPP simm16
               SMEM sbase (SGPR number = field*2) sdata offset (sign-extended 24 bit) soffset th scope nv
               VOP1 src0 vdst | VOP2 src0 vsrc1 vdst | VOPC src0 vsrc1
               VOP3/VOP3SD/VOP3P vdst src0 src1 src2 abs neg neg_hi opsel opsel_hi clamp omod (+ sdst for VOP3SD;
                 VOP3P opsel_hi is 3 bits assembled from OPSEL_HI[1:0] and OPSEL_HI2; fields an encoding lacks are 0)
               VOPD opx opy srcx0 vsrcx1 vdstx srcy0 vsrcy1 vdsty (vdsty fully reconstructed: field<<1 | ~vdstx&1)
               DS offset0 offset1 offset (offset1<<8|offset0) addr data0 data1 vdst
               VGLOBAL/VFLAT/VSCRATCH vaddr vsrc vdst saddr (124 = off/null) offset (sign-extended 24 bit) th scope sve
               VBUFFER vdata vaddr rsrc (first SGPR number) soffset offset format idxen offen th scope tfe
             Operand codes (src0/ssrc0/sdst/...) stay raw hardware codes: 0-105 SGPR, 106/107 vcc_lo/hi,
             108-123 ttmp0-15, 124 null, 125 m0, 126/127 exec_lo/hi, 128-192 int 0..64, 193-208 -1..-16,
             240-248 float constants, 250 DPP16, 233/234 DPP8 (fi=0/1), 253 scc, 255 literal, 256-511 VGPR 0-255.
             VGPR-only fields (vdst, vsrc1, addr, vaddr, ...) are plain VGPR numbers 0-255.
    literal  32-bit literal dword or None
    dpp      None, or DPP16 {src0, dpp_ctrl, fi, bc, src0_neg, src0_abs, src1_neg, src1_abs, bank_mask, row_mask}
             or DPP8 {src0, fi, lane_sel0..lane_sel7}. (src0 here is the VGPR number.)

  operand_text(code, literal=None, kind='b32', nregs=1) -> str   LLVM's spelling of an operand code (disasm helper)

Encoding identification and field positions: AMD RDNA4 ISA reference ("Microcode formats"), cross-checked bit by bit
against llvm-mc -show-encoding (tests/emu/test_decode.py). Opcode -> mnemonic tables are generated from LLVM by
tools/gen_opcodes.py into opcodes.py; nothing here runs LLVM.
"""
from __future__ import annotations
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from .opcodes import OPS as _DEFAULT_OPS
from .opcodes import T16, VOPD_X, VOPD_Y

# The opcode tables the emulator decodes with: LLVM's default view plus the opcodes that exist only in its
# real-true16 view (v_mov_b16_e32). HALVES[enc][op]: operand fields that are 16-bit register halves (vN.l / vN.h);
# in VOP1/VOP2/VOPC encodings such a VGPR field holds the register in bits [6:0] and the half in bit 7.
OPS = {enc: {**{op: v[:3] for op, v in T16.get(enc, {}).items() if op not in t}, **t}
       for enc, t in _DEFAULT_OPS.items()}
HALVES = {enc: {op: v[3] for op, v in t.items() if v[3]} for enc, t in T16.items()}


class DecodeError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Inst:
    offset: int
    size: int
    enc: str
    opcode: int
    name: str
    f: Mapping[str, int]
    literal: int | None
    dpp: Mapping[str, int] | None


LITERAL, DPP16, DPP8, DPP8_FI = 255, 250, 233, 234
SRC_FIELDS = ('src0', 'src1', 'src2', 'ssrc0', 'ssrc1', 'srcx0', 'srcy0')


def _bare(asm: str) -> str:
    for suf in ('_e64_dpp', '_e32', '_e64', '_dpp'):
        if asm.endswith(suf): return asm[:-len(suf)]
    return asm


# Per-op facts derived once from the generated templates: which source fields the op reads (a literal is only
# fetched for a 255 in a field the op uses), whether it always carries a literal (fmaak/fmamk), and VOP3SD membership.
def _srcs(tpl) -> frozenset:
    return frozenset(t[0] for t in tpl if t[0] in SRC_FIELDS)


USED = {enc: {op: _srcs(v[2]) for op, v in t.items()} for enc, t in OPS.items()}
ALWAYS_LIT = {enc: {op for op, v in t.items() if any(x[0] == '=LIT' for x in v[2])} for enc, t in OPS.items()}
ALWAYS_LIT['SOPK'] = {19}                      # s_setreg_imm32_b32 hwreg(...), imm32
VOP3SD_OPS = frozenset(op for op, v in OPS['VOP3'].items() if any(x[0] == 'sdst' for x in v[2]))
VOPD_USED = ({op: _srcs(v[1]) for op, v in VOPD_X.items()}, {op: _srcs(v[1]) for op, v in VOPD_Y.items()})
VOPD_LIT = ({op for op, v in VOPD_X.items() if any(x[0] == '=LIT' for x in v[1])},
            {op for op, v in VOPD_Y.items() if any(x[0] == '=LIT' for x in v[1])})


def _sext(v: int, bits: int) -> int:
    return v - (1 << bits) if v >> (bits - 1) & 1 else v


def identify(w: int) -> str | None:
    """Encoding of a first dword (RDNA4 ISA "Microcode formats": fixed ENCODING bits at the top)."""
    if w >> 31 == 0:
        return {0x3f: 'VOP1', 0x3e: 'VOPC'}.get(w >> 25, 'VOP2')
    if w >> 30 == 0b10:
        top9 = w >> 23
        if top9 == 0x17d: return 'SOP1'
        if top9 == 0x17e: return 'SOPC'
        if top9 == 0x17f: return 'SOPP'
        if w >> 28 == 0xb: return 'SOPK'
        return 'SOP2'
    e6 = w >> 26
    if e6 == 0x3d: return 'SMEM'
    if e6 == 0x35: return 'VOP3'
    if e6 == 0x32: return 'VOPD'
    if e6 == 0x36: return 'DS'
    if e6 == 0x31: return 'VBUFFER'
    if e6 == 0x3b: return ('VFLAT', 'VSCRATCH', 'VGLOBAL', None)[w >> 24 & 3]
    if w >> 24 == 0xcc: return 'VOP3P'
    return None


def _dpp16(d: int) -> dict:
    return dict(src0=d & 0xff, dpp_ctrl=d >> 8 & 0x1ff, fi=d >> 18 & 1, bc=d >> 19 & 1, src0_neg=d >> 20 & 1,
                src0_abs=d >> 21 & 1, src1_neg=d >> 22 & 1, src1_abs=d >> 23 & 1, bank_mask=d >> 24 & 0xf,
                row_mask=d >> 28 & 0xf)


def _dpp8(d: int, fi: int) -> dict:
    out = dict(src0=d & 0xff, fi=fi)
    for i in range(8): out[f'lane_sel{i}'] = d >> (8 + 3 * i) & 7
    return out


def decode_at(code: bytes, offset: int, base: int = 0) -> Inst:
    n = len(code)

    def dword(i: int) -> int:
        p = offset + 4 * i
        if p + 4 > n:
            raise DecodeError(f'truncated instruction at offset {base + offset:#x}: needs dword {i} beyond end '
                              f'of code ({n} bytes)')
        return int.from_bytes(code[p:p + 4], 'little')

    w = dword(0)
    enc = identify(w)
    if enc is None:
        raise DecodeError(f'unknown encoding at offset {base + offset:#x}: dword {w:#010x}')
    size, lit_needed, dpp, f = 4, False, None, {}
    if enc in ('SOP1', 'SOP2', 'SOPK', 'SOPC', 'SOPP'):
        if enc == 'SOP1': op, f = w >> 8 & 0xff, dict(sdst=w >> 16 & 0x7f, ssrc0=w & 0xff)
        elif enc == 'SOP2': op, f = w >> 23 & 0x7f, dict(sdst=w >> 16 & 0x7f, ssrc0=w & 0xff, ssrc1=w >> 8 & 0xff)
        elif enc == 'SOPK': op, f = w >> 23 & 0x1f, dict(sdst=w >> 16 & 0x7f, simm16=w & 0xffff)
        elif enc == 'SOPC': op, f = w >> 16 & 0x7f, dict(ssrc0=w & 0xff, ssrc1=w >> 8 & 0xff)
        else: op, f = w >> 16 & 0x7f, dict(simm16=w & 0xffff)
    elif enc == 'SMEM':
        w1 = dword(1); size = 8
        op = w >> 13 & 0x3f
        f = dict(sbase=(w & 0x3f) * 2, sdata=w >> 6 & 0x7f, nv=w >> 20 & 1, scope=w >> 21 & 3, th=w >> 23 & 7,
                 offset=_sext(w1 & 0xffffff, 24), soffset=w1 >> 25 & 0x7f)
    elif enc == 'VOP1':
        op, f = w >> 9 & 0xff, dict(src0=w & 0x1ff, vdst=w >> 17 & 0xff)
    elif enc == 'VOP2':
        op, f = w >> 25 & 0x3f, dict(src0=w & 0x1ff, vsrc1=w >> 9 & 0xff, vdst=w >> 17 & 0xff)
    elif enc == 'VOPC':
        op, f = w >> 17 & 0xff, dict(src0=w & 0x1ff, vsrc1=w >> 9 & 0xff)
    elif enc in ('VOP3', 'VOP3P'):
        w1 = dword(1); size = 8
        f = dict(vdst=w & 0xff, src0=w1 & 0x1ff, src1=w1 >> 9 & 0x1ff, src2=w1 >> 18 & 0x1ff, neg=w1 >> 29 & 7,
                 clamp=w >> 15 & 1, abs=0, neg_hi=0, opsel=0, opsel_hi=0, omod=0)
        if enc == 'VOP3':
            op = w >> 16 & 0x3ff
            f['omod'] = w1 >> 27 & 3
            if op in VOP3SD_OPS:
                enc = 'VOP3SD'; f['sdst'] = w >> 8 & 0x7f
            else:
                f['abs'] = w >> 8 & 7; f['opsel'] = w >> 11 & 0xf
        else:
            op = w >> 16 & 0x7f
            f.update(neg_hi=w >> 8 & 7, opsel=w >> 11 & 7, opsel_hi=(w1 >> 27 & 3) | (w >> 14 & 1) << 2)
    elif enc == 'VOPD':
        w1 = dword(1); size = 8
        opx, opy = w >> 22 & 0xf, w >> 17 & 0x1f
        vdstx = w1 >> 24 & 0xff
        f = dict(opx=opx, opy=opy, srcx0=w & 0x1ff, vsrcx1=w >> 9 & 0xff, vdstx=vdstx, srcy0=w1 & 0x1ff,
                 vsrcy1=w1 >> 9 & 0xff, vdsty=(w1 >> 17 & 0x7f) << 1 | (vdstx & 1) ^ 1)
        if opx not in VOPD_X or opy not in VOPD_Y:
            raise DecodeError(f'unknown VOPD opcode pair opx={opx} opy={opy} at offset {base + offset:#x}: '
                              f'dwords {w:#010x} {w1:#010x}')
        used = {k for k in VOPD_USED[0][opx] | VOPD_USED[1][opy]}
        lit_needed = any(f[k] == LITERAL for k in used) or opx in VOPD_LIT[0] or opy in VOPD_LIT[1]
        literal = dword(2) if lit_needed else None
        return Inst(base + offset, size + 4 * lit_needed, 'VOPD', opx << 5 | opy,
                    VOPD_X[opx][0] + '|' + VOPD_Y[opy][0], MappingProxyType(f), literal, None)
    elif enc == 'DS':
        w1 = dword(1); size = 8
        op = w >> 18 & 0xff
        f = dict(offset0=w & 0xff, offset1=w >> 8 & 0xff, offset=w & 0xffff, addr=w1 & 0xff, data0=w1 >> 8 & 0xff,
                 data1=w1 >> 16 & 0xff, vdst=w1 >> 24 & 0xff)
    elif enc in ('VGLOBAL', 'VFLAT', 'VSCRATCH'):
        w1, w2 = dword(1), dword(2); size = 12
        op = w >> 14 & 0xff
        f = dict(saddr=w & 0x7f, vdst=w1 & 0xff, sve=w1 >> 17 & 1, scope=w1 >> 18 & 3, th=w1 >> 20 & 7,
                 vsrc=w1 >> 23 & 0xff, vaddr=w2 & 0xff, offset=_sext(w2 >> 8, 24))
    else:  # VBUFFER
        w1, w2 = dword(1), dword(2); size = 12
        op = w >> 14 & 0xff
        f = dict(soffset=w & 0x7f, tfe=w >> 22 & 1, vdata=w1 & 0xff, rsrc=w1 >> 9 & 0x1ff, scope=w1 >> 18 & 3,
                 th=w1 >> 20 & 7, format=w1 >> 23 & 0x7f, offen=w1 >> 30 & 1, idxen=w1 >> 31 & 1, vaddr=w2 & 0xff,
                 offset=w2 >> 8)

    table = OPS['VOP3' if enc == 'VOP3SD' else enc]
    if op not in table:
        words = ' '.join(f'{int.from_bytes(code[offset + 4 * i:offset + 4 * i + 4], "little"):#010x}'
                         for i in range(min(size, n - offset) // 4))
        raise DecodeError(f'unknown {enc} opcode {op} at offset {base + offset:#x}: dword(s) {words}')
    tenc = 'VOP3' if enc == 'VOP3SD' else enc
    used = USED[tenc][op]
    if enc in ('VOP1', 'VOP2', 'VOPC', 'VOP3', 'VOP3SD', 'VOP3P') and f['src0'] in (DPP16, DPP8, DPP8_FI) \
            and 'src0' in used:
        d = dword(size // 4)
        dpp = _dpp16(d) if f['src0'] == DPP16 else _dpp8(d, int(f['src0'] == DPP8_FI))
        size += 4
    else:
        lit_needed = op in ALWAYS_LIT[tenc] or any(f.get(k) == LITERAL for k in used)
    literal = None
    if lit_needed:
        literal = dword(size // 4); size += 4
    return Inst(base + offset, size, enc, op, _bare(table[op][0]), MappingProxyType(f), literal,
                MappingProxyType(dpp) if dpp is not None else None)


def decode(code: bytes, base: int = 0, templates: dict | None = None) -> list[Inst]:
    """Decode a blob linearly from its first byte (code must start on an instruction). templates: a dict of the
    instructions decoded so far by their bytes, shared by the calls that decode parts of one code object (a Module's
    kernels) so that each distinct encoding is decoded once per object and its copies share one field mapping."""
    if len(code) % 4:
        raise DecodeError(f'code length {len(code)} is not a multiple of 4 bytes')
    # Unrolled kernels repeat the same encodings many times (a prepare code object: ~200 K instructions, a few
    # thousand distinct): decode each distinct byte string once and re-stamp its offset. The encoding is a prefix
    # code (decode_at reads dwords in order and stops once the instruction is complete), so the bytes of a decoded
    # instruction decode the same wherever they appear, and among cached instructions at most one is a prefix of
    # the bytes at `off`: trying the lengths 4, 8, 12 (the longest: a 12-byte
    # VMEM, or 8 bytes plus a literal or DPP dword) in turn finds the right one or none.
    seen: dict[bytes, Inst] = {} if templates is None else templates
    out, off, n = [], 0, len(code)
    while off < n:
        for size in (4, 8, 12):
            t = seen.get(code[off:off + size])
            if t is not None:
                inst = Inst(base + off, t.size, t.enc, t.opcode, t.name, t.f, t.literal, t.dpp)
                break
        else:
            inst = decode_at(code, off, base)
            seen[code[off:off + inst.size]] = inst
        out.append(inst)
        off += inst.size
    return out


# ---- operand spelling (LLVM AMDGPUInstPrinter conventions), used by disasm.py ----
SPECIAL = {106: 'vcc_lo', 107: 'vcc_hi', 124: 'null', 125: 'm0', 126: 'exec_lo', 127: 'exec_hi', 253: 'src_scc',
           235: 'src_shared_base', 236: 'src_shared_limit', 237: 'src_private_base', 238: 'src_private_limit',
           239: 'src_pops_exiting_wave_id', 251: 'src_vccz', 252: 'src_execz', 254: 'src_lds_direct'}
SPECIAL64 = {106: 'vcc', 126: 'exec', 235: 'src_shared_base', 236: 'src_shared_limit', 237: 'src_private_base',
             238: 'src_private_limit'}


def reg_text(prefix: str, n: int, nregs: int) -> str:
    return f'{prefix}{n}' if nregs == 1 else f'{prefix}[{n}:{n + nregs - 1}]'


def register_text(code: int, nregs: int = 1) -> str | None:
    """Register spelling of an operand code, or None if the code is a constant."""
    if code >= 256: return reg_text('v', code - 256, nregs)
    if code <= 105: return reg_text('s', code, nregs)
    if 108 <= code <= 123: return reg_text('ttmp', code - 108, nregs)
    if nregs == 2 and code in SPECIAL64: return SPECIAL64[code]
    if code in SPECIAL: return SPECIAL[code]
    return None
