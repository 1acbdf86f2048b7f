"""asmdsl's free-text ops (Op.raw) against sage_co.emu.facts: every raw op the attention family emits is assembled,
decoded, and its VGPR reads/writes and TRANS flag compared with the facts of its bytes. A wrong set silently breaks
VOPD pairing (both halves read before either writes) or the reordering the weaver does; TRANS decides the issue
model. Writes must be exactly the instruction's (at whole-VGPR granularity: a 16-bit half counts as its VGPR);
reads may add only registers the op also writes (a partial write keeps the rest of the register)."""
import pytest

import asmdsl
from llvm_tools import assemble_text, needs_llvm
from sage_co.emu.decode import decode_at
from sage_co.emu.facts import facts


def _vgprs(keys) -> set[int]:
    return {n for kind, n in keys if kind in ("v", "v.l", "v.h")}


@pytest.fixture(scope="module")
def raw_ops():
    """Every distinct Op.raw of the shipped family (build_family), in emission order."""
    import sage_attention_asm
    seen: dict[str, asmdsl.Op] = {}
    original = asmdsl.Op.raw.__func__

    def recording(cls, text, *a, **k):
        op = original(cls, text, *a, **k)
        seen.setdefault(text, op)
        return op
    asmdsl.Op.raw = classmethod(recording)
    try:
        sage_attention_asm.build_family()
    finally:
        asmdsl.Op.raw = classmethod(original)
    return list(seen.values())


@needs_llvm
def test_every_raw_op_of_the_family_agrees_with_facts(raw_ops, tmp_path):
    assert len(raw_ops) > 50 and any(op.trans for op in raw_ops)
    blob = assemble_text("\n".join(op.text for op in raw_ops), tmp_path)
    at, problems = 0, []
    for op in raw_ops:
        inst = decode_at(blob, at)
        at += inst.size
        fx = facts(inst)
        reads, writes = _vgprs(fx.reads), _vgprs(fx.writes)
        if op.trans != fx.trans or op.writes != writes or not reads <= op.reads or not op.reads - reads <= writes:
            problems.append(f"{op.text}: Op.raw reads {sorted(op.reads)} writes {sorted(op.writes)} trans {op.trans}; "
                            f"facts reads {sorted(reads)} writes {sorted(writes)} trans {fx.trans}")
    assert at == len(blob)
    assert not problems, "\n".join(problems[:20])


def test_raw_takes_trans_and_tied_reads_from_facts():
    V = asmdsl.RegFile("v", 256)
    r = V.alloc("r", 4)
    assert asmdsl.Op.raw(f"v_exp_f32_e32 {r[0]}, {r[1]}", [r[1]], [r[0]]).trans          # facts.is_trans
    assert not asmdsl.Op.raw(f"v_max3_num_f32 {r[0]}, {r[1]}, {r[2]}, {r[3]}", [r[1], r[2], r[3]], [r[0]]).trans
    with pytest.raises(ValueError, match="facts says v_exp_f32 is TRANS"):
        asmdsl.Op.raw(f"v_exp_f32_e32 {r[0]}, {r[1]}", [r[1]], [r[0]], trans=False)
    permute = asmdsl.Op.raw(f"v_permlanex16_b32 {r[0]}, {r[1]}, s4, 0xfedcba98", [r[1]], [r[0]])
    assert permute.reads == {r[0].num, r[1].num}       # the tied old destination (facts.READS_VDST)
