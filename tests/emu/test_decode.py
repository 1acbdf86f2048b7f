"""Decoder/disassembler golden tests: every instruction of the assembly corpus, the LLVM probes
(tests/emu/corpus/probes: the inputs behind docs/rdna4.md's [L22] facts), a few clang -O3 HIP kernels and every shipped hsaco/gfx1201/*.co must disassemble exactly as llvm-objdump prints it
(whitespace collapsed, `// address: words` comment dropped). LLVM is only used here, never by sage_co.emu."""
from __future__ import annotations
import re
import subprocess
from pathlib import Path

import pytest

from llvm_tools import hip_co, needs_llvm, objdump, tool
from sage_co.emu.decode import DecodeError, decode, decode_at
from sage_co.emu.disasm import disassemble, text_and_symbols

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).parent / 'corpus'
PROBES = CORPUS / 'probes'
HSACO = ROOT / 'hsaco' / 'gfx1201'


def llvm_mc(src: Path, out: Path) -> None:
    """Assemble; lines llvm-mc rejects (some probes are deliberately invalid) are dropped first."""
    text = src.read_text().splitlines()
    while True:
        r = subprocess.run([tool('llvm-mc'), '-triple=amdgcn-amd-amdhsa', '-mcpu=gfx1201', '-filetype=obj', '-o',
                            out, '-'], input='\n'.join(text) + '\n', capture_output=True, text=True)
        bad = {int(m.group(1)) for m in re.finditer(r'^<stdin>:(\d+):\d+: error', r.stderr, re.M)}
        if r.returncode == 0 and not bad: return
        assert bad, r.stderr
        text = [ln for i, ln in enumerate(text, 1) if i not in bad]


def hipcc(src: Path, out: Path) -> None:
    hip_co(src, out, ('-O3', '-c'))


def objdump_text(path: Path) -> list[tuple[int, str]]:
    """[(offset within .text, normalised text)] from llvm-objdump."""
    out = objdump(path)
    res = []
    for ln in out.splitlines():
        m = re.match(r'\s+(.*?)\s*// ([0-9A-F]+):', ln)
        if m: res.append((int(m.group(2), 16), ' '.join(m.group(1).split())))
    return res


def mine(path: Path) -> list[tuple[int, str]]:
    """Our disassembly of the whole .text (kernels plus s_code_end padding), offsets = addresses."""
    blob, addr, _ = text_and_symbols(path.read_bytes())
    return disassemble(blob, addr)


def compare(path: Path) -> tuple[int, set]:
    want = objdump_text(path)
    got = dict(mine(path))
    bad = [(hex(o), t, got.get(o)) for o, t in want if got.get(o) != t]
    assert not bad, f'{path.name}: {len(bad)} of {len(want)} differ, first: ' + '\n'.join(map(str, bad[:15]))
    return len(want), {t.split()[0] for _, t in want}


def build(kind: str, src: Path, tmp: Path) -> Path:
    out = tmp / (src.name + '.o')
    (llvm_mc if kind == 's' else hipcc)(src, out)
    return out


SOURCES = sorted(CORPUS.glob('*.s')) + sorted(CORPUS.glob('*.hip')) + sorted(PROBES.glob('*.s')) + \
    sorted(PROBES.glob('*.hip'))


@needs_llvm
@pytest.mark.parametrize('src', SOURCES, ids=lambda p: p.parent.name + '/' + p.name)
def test_corpus_matches_objdump(src, tmp_path):
    n, _ = compare(build(src.suffix[1:], src, tmp_path))
    assert n > 0


@needs_llvm
@pytest.mark.parametrize('co', sorted(HSACO.glob('*.co')), ids=lambda p: p.name)
def test_shipped_code_objects_match_objdump(co):
    n, _ = compare(co)
    assert n > 0


# ---- decoder data model ----------------------------------------------------------------------------------------
def words(*ws: int) -> bytes:
    return b''.join(w.to_bytes(4, 'little') for w in ws)


def test_fields_smem_vop3p_vopd_dpp_vglobal():
    # encodings from llvm-mc -show-encoding (gfx1201)
    i = decode_at(words(0xf4e02282, 0xf8fffffc), 0)   # s_load_b64 s[10:11], s[4:5], -0x4 th:TH_LOAD_NT scope:SCOPE_SYS
    assert (i.enc, i.name, i.size) == ('SMEM', 's_load_b64', 8)
    assert (i.f['sbase'], i.f['sdata'], i.f['offset'], i.f['soffset'], i.f['th'], i.f['scope']) == (4, 10, -4, 124, 1, 3)
    # v_pk_fma_f16 v1, v2, v3, v4 op_sel:[1,0,1] op_sel_hi:[0,1,1] neg_lo:[1,0,0] neg_hi:[0,1,0] clamp
    i = decode_at(words(0xcc0eea01, 0x34120702), 0)
    assert (i.enc, i.name) == ('VOP3P', 'v_pk_fma_f16')
    assert (i.f['opsel'], i.f['opsel_hi'], i.f['neg'], i.f['neg_hi'], i.f['clamp']) == (0b101, 0b110, 1, 2, 1)
    assert (i.f['src0'], i.f['src1'], i.f['src2'], i.f['vdst']) == (258, 259, 260, 1)
    i = decode_at(words(0xc8100501, 0x0a0c0103), 0)   # v_dual_fmac_f32 v10, v1, v2 :: v_dual_mov_b32 v13, v3
    assert (i.enc, i.name, i.f['vdstx'], i.f['vdsty'], i.f['srcy0']) == ('VOPD', 'v_dual_fmac_f32|v_dual_mov_b32', 10, 13, 259)
    i = decode_at(words(0x7e0002fa, 0xff00b101), 0)   # v_mov_b32_dpp v0, v1 quad_perm:[1,0,3,2]
    assert (i.enc, i.name, i.size, i.literal) == ('VOP1', 'v_mov_b32', 8, None)
    assert (i.dpp['src0'], i.dpp['dpp_ctrl'], i.dpp['row_mask'], i.dpp['bank_mask']) == (1, 0xb1, 15, 15)
    i = decode_at(words(0xee050008, 0x001c0007, 0xffffc001), 0)  # global_load_b32 v7, v1, s[8:9] offset:-64 ...
    assert (i.enc, i.f['vdst'], i.f['vaddr'], i.f['saddr'], i.f['offset'], i.f['th'], i.f['scope']) == \
        ('VGLOBAL', 7, 1, 8, -64, 1, 3)
    i = decode_at(words(0xd6fe0904, 0x041a0501), 0)   # v_mad_co_u64_u32 v[4:5], s9, v1, v2, v[6:7]
    assert (i.enc, i.name, i.f['sdst'], i.f['src2']) == ('VOP3SD', 'v_mad_co_u64_u32', 9, 262)
    i = decode_at(words(0x060206ff, 0x12345678), 0)   # v_add_f32_e32 v1, 0x12345678, v3
    assert (i.enc, i.opcode, i.size, i.literal) == ('VOP2', 3, 8, 0x12345678)


def test_unknown_encoding_is_an_error_naming_offset_and_word():
    with pytest.raises(DecodeError, match=r'0x4.*0xffffffff'):
        decode(words(0xbf800000, 0xffffffff))
    with pytest.raises(DecodeError, match=r'truncated.*0x0'):
        decode(words(0xd6130001))                       # VOP3 missing its second dword
    with pytest.raises(DecodeError, match=r'SOPP opcode 127'):
        decode(words(0xbfff0000))
    with pytest.raises(DecodeError, match='multiple of 4'):
        decode(b'\x00\x00\x80')


@needs_llvm
def test_every_table_opcode_matches_objdump(tmp_path):
    """Disassemble the generator's probe word of every opcode of every encoding (a sweep beyond the corpus)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location('gen_opcodes', ROOT / 'tools' / 'gen_opcodes.py')
    gen = importlib.util.module_from_spec(spec); spec.loader.exec_module(gen)
    from sage_co.emu.opcodes import OPS
    variants = {'SMEM': gen.smem_variants, 'DS': gen.ds_variants, 'VBUFFER': gen.vbuffer_variants}
    for enc in ('SOP1', 'SOP2', 'SOPK', 'SOPC', 'SOPP'): variants[enc] = gen.sop_variants(enc)
    for enc in ('VOP1', 'VOP2', 'VOPC', 'VOP3', 'VOP3P'): variants[enc] = gen.valu_variants(enc)
    for enc in ('VGLOBAL', 'VSCRATCH', 'VFLAT'): variants[enc] = gen.vmem_variants(enc)
    from sage_co.emu.decode import VOP3SD_OPS
    cands = []
    for enc, t in OPS.items():
        for op in t:
            # first probe variant without garbage in VOP3 modifier bits [14:8] (LLVM ignores some of them)
            cands += [next(ws for ws, _ in variants[enc](op)
                           if enc != 'VOP3' or op in VOP3SD_OPS or not ws[0] >> 8 & 0x7f)]
    texts = gen.objdump(cands, stride=16)
    bad = []
    for ws, want in zip(cands, texts):
        if want is None: continue          # the first variant is not always the one LLVM accepts
        code = words(*ws) + words(*[gen.S_NOP] * (4 - len(ws)))
        try: got = disassemble(code)[0][1]
        except DecodeError as e: got = str(e)
        if got != ' '.join(want.split()): bad.append((want, got))
    assert not bad, f'{len(bad)} of {len(cands)} differ: {bad[:10]}'


@needs_llvm
def test_true16_table_matches_objdump_real_true16():
    """Every opcode of the real-true16 view (opcodes.T16) disassembles as llvm-objdump --mattr=+real-true16 prints
    it, with .l/.h halves, through disassemble(true16=True)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location('gen_opcodes', ROOT / 'tools' / 'gen_opcodes.py')
    gen = importlib.util.module_from_spec(spec); spec.loader.exec_module(gen)
    from sage_co.emu.decode import VOP3SD_OPS
    from sage_co.emu.opcodes import T16
    cands = []
    for enc, t in T16.items():
        variants = gen.valu_variants(enc)
        for op in t:
            vs = variants(op)
            if enc == 'VOP3' and op not in VOP3SD_OPS: vs = vs[1:]
            cands += [ws for ws, _ in vs[:2]]
    gen.MATTR[:] = ['--mattr=+real-true16']
    try:
        texts = gen.objdump(cands, stride=16)
    finally:
        gen.MATTR[:] = []
    bad, n = [], 0
    for ws, want in zip(cands, texts):
        if want is None: continue
        n += 1
        code = words(*ws) + words(*[gen.S_NOP] * (4 - len(ws)))
        got = disassemble(code, true16=True)[0][1]
        if got != ' '.join(want.split()): bad.append((want, got))
    assert n > 200 and not bad, f'{len(bad)} of {n} differ: {bad[:10]}'
