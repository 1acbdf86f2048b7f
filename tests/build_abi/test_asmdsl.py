"""asm_src/asmdsl.py directly: VOPD pairing legality, pair_vopd keeping program order, WaitCounter's in-order
waits, register files, and the shared descriptor/metadata emitter; the generator as a family (Config/build)."""
import pytest

from llvm_tools import ROOT, needs_llvm
from asmdsl import (Asm, KernelArg, Op, RegFile, WaitCounter, amdhsa_kernel, code_object,  # asm_src/ (pyproject)
                    pair_vopd, try_pair, vopd_legal)

V = RegFile("v", 256)
r = V.alloc("r", 16)   # v0..v15: banks v % 4


def mul(d, a, b):
    return Op.vop2("v_mul_f32", r[d], r[a] if isinstance(a, int) else a, r[b])


def test_vopd_rules():
    assert vopd_legal(mul(0, 4, 6), mul(1, 5, 7))                 # even/odd dst, banks 0/1 and 2/3
    assert not vopd_legal(mul(0, 4, 6), mul(2, 5, 7))             # two even destinations
    assert not vopd_legal(mul(0, 4, 6), mul(1, 8, 7))             # src0 banks equal (v4, v8)
    assert not vopd_legal(mul(0, 4, 6), mul(1, 5, 10))            # vsrc1 banks equal (v6, v10)
    assert not vopd_legal(mul(0, 4, 6), mul(1, 0, 7))             # Y reads X's result
    assert not vopd_legal(Op.vop2("v_mul_f32", r[0], "0x3f800000", r[6]),
                          Op.vop2("v_mul_f32", r[1], "0x40000000", r[7]))   # two different literals
    assert not vopd_legal(Op.raw("v_exp_f32 v0, v4", [r[4]], [r[0]], trans=True), mul(1, 5, 7))


def test_try_pair_swaps_commutative_operands():
    x, y = mul(0, 4, 6), mul(1, 8, 5)     # src0 banks clash (v4, v8); swapping y's operands fixes it
    assert not vopd_legal(x, y)
    pair = try_pair(x, y)
    assert pair is not None and vopd_legal(*pair)
    sub_x, sub_y = Op.vop2("v_sub_f32", r[0], r[4], r[6]), Op.vop2("v_sub_f32", r[1], r[8], r[5])
    assert try_pair(sub_x, sub_y) is None       # not commutative: no swap, the clash stays


def test_pair_vopd_keeps_dependent_order():
    ops = [mul(0, 4, 6), mul(2, 0, 6), mul(1, 5, 7)]  # op1 reads op0; op2 may pair with op0 across op1
    issues = pair_vopd(ops)
    assert len(issues) == 2 and len(issues[0].ops) == 2 and issues[1].ops == (ops[1],)
    assert issues[0].text.startswith("v_dual_mul_f32 v0") and ":: v_dual_mul_f32 v1" in issues[0].text
    # a partner that would jump over a writer of its source stays in place
    blocked = [mul(0, 4, 6), Op.raw("v_mov_b32 v5, 0", [], [r[5]]), mul(1, 5, 7)]
    assert [len(i.ops) for i in pair_vopd(blocked)] == [1, 1, 1]


def test_wait_counter_in_order():
    a = Asm()
    w = WaitCounter(a, "s_wait_loadcnt")
    for tag in ("a", "b", "c", "d"):
        w.issue(tag)
    w.wait_for("b")          # c and d may stay in flight
    w.wait_for("a")          # already covered: no instruction
    w.wait_for("d")
    w.issue("e")
    w.wait_all()
    w.wait_all()             # nothing outstanding: nothing emitted
    assert [ln.strip() for ln in a.lines] == ["s_wait_loadcnt 2", "s_wait_loadcnt 0", "s_wait_loadcnt 0"]
    assert w.state() == ()


def test_wait_counter_saturates_at_the_field_limit():
    a = Asm()
    w = WaitCounter(a, "s_wait_dscnt", limit=3)
    for i in range(6):
        w.issue(i)
    w.wait_for(0)
    assert a.lines[-1].strip() == "s_wait_dscnt 3"


def test_regfile():
    f = RegFile("s", 10, first=2)
    x = f.alloc("x", 2, align=4)
    assert str(x) == "s[4:5]" and f.next == 6
    with pytest.raises(ValueError, match="out of sGPRs"):
        f.alloc("y", 8)
    assert str(x[1]) == "s5" and x[1].num == 5
    with pytest.raises(ValueError, match="not one"):
        x.num


def test_descriptor_and_metadata():
    k = amdhsa_kernel("kern", args=[KernelArg("p", 0, "ptr"), KernelArg("o", 8, "ptr", written=True),
                                    KernelArg("n", 16, "u32")],
                      kernarg_size=20, next_free_vgpr=12, next_free_sgpr=30, max_flat_workgroup_size=64,
                      lds_bytes=1024)
    assert k.sgpr_count == 32          # VCC counted when reserved
    text = code_object([(k, "        s_endpgm")])
    assert ".amdhsa_kernel kern" in text and ".amdhsa_group_segment_fixed_size 1024" in text
    assert ".sgpr_count:      32" in text and ".vgpr_count:      12" in text
    assert "{ .name: p, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global, " \
           ".actual_access: read_only }" in text
    assert "{ .name: o, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global }" in text
    assert text.count(".amdgpu_metadata") == 1


def test_generator_is_a_family_without_import_time_state():
    import gen_sage_attention_asm as gen
    cfg = next(c for c in gen.FAMILY if c.head_dim == 128)
    first = gen.build(cfg)
    assert gen.build(cfg) == first          # registers are allocated per build, not at import
    for src in [ROOT / "asm_src" / "gen_sage_attention_asm.py", *(ROOT / "asm_src" / "sage_attention_asm").glob("*.py")]:
        assert "if False" not in src.read_text(), src
    k = gen.AttentionKernel(cfg)
    assert k.NUM_VGPRS <= gen.VGPR_LIMIT and k.LDS_BYTES == 2 * (k.K_TILE_BYTES + k.V_TILE_BYTES)
    assert f"s_lshl_b32 {k.s_koff[0]}, {k.s_L2}, {gen.log2(k.K_TILE_BYTES)}" in first   # K of LUT entry L[min(t+2, last)]
    # head dim 256 (docs/performance.md §Head dim 256): 2 K tiles + ONE V^T tile + the Q^T tile in LDS, K of L[t+1]
    wide = gen.AttentionKernel(next(c for c in gen.FAMILY if c.head_dim == 256))
    text = gen.build(wide.cfg)
    assert wide.NUM_VGPRS <= gen.VGPR_LIMIT and wide.LDS_BYTES == 2 * wide.K_TILE_BYTES + wide.V_TILE_BYTES + 16 * 1024
    assert f"s_lshl_b32 {wide.s_koff[0]}, {wide.s_L1}, {gen.log2(wide.K_TILE_BYTES)}" in text
    with pytest.raises(ValueError):
        gen.log2(96)


def test_committed_assembly_is_the_generator_output():
    import gen_sage_attention_asm as gen
    committed = (ROOT / "asm_src" / "gfx1201_sage_attention_asm.s").read_text()
    assert committed == gen.build_family()


@needs_llvm
def test_insert_hazard_waits_puts_the_minimal_fix_before_each_site():
    """The generator's hazard pass (docs/rdna4.md §Hazards): the fix right before the read (after a label that
    the loop's back-edge reaches), one wait for two reads of one write, nothing where nothing is needed, and a
    body that needed a fix has no site afterwards."""
    from asmdsl import assemble_body, insert_hazard_waits
    from sage_co.emu.decode import decode
    from sage_co.emu.hazards import analyze
    body = "\n".join([
        "        s_mov_b32 s8, 0",
        ".Lloop:",
        "        s_cmp_lt_u32 s8, 4  // the back-edge brings s_add_co_i32's write here",
        "        s_cbranch_scc0 .Ldone",
        "        v_add_nc_u32 v3, s8, v3",
        "        s_add_co_i32 s8, s8, 1",
        "        v_add_nc_u32 v4, s8, v4",
        "        v_add_nc_u32 v5, s8, v5",
        "        s_branch .Lloop",
        ".Ldone:",
        "        v_cmpx_gt_u32 32, v0",
        "        v_permlane16_b32 v3, v2, 0, 0",
        "        s_endpgm"])
    out = insert_hazard_waits(body).split("\n")
    waits = [i for i, ln in enumerate(out) if "s_wait_alu" in ln]
    assert len(waits) == 1 and out[waits[0] + 1].strip().startswith("v_add_nc_u32 v4, s8")
    assert "depctr_sa_sdst(0)" in out[waits[0]]
    # the first v_add (reads s8 written before any VALU read its pair) and the loop test need nothing: the wait
    # before v4's read also covers v5's read and the back-edge to s_cmp_lt_u32
    assert out[out.index("        v_cmpx_gt_u32 32, v0") + 1].strip().startswith("v_mov_b32 v2, v2")
    assert analyze(decode(assemble_body("\n".join(out)))) == []
    clean = "        v_add_nc_u32 v1, s4, v1\n        s_endpgm"
    assert insert_hazard_waits(clean) == clean
