"""sage_co/family.py, the kernel family declared once: the manifest rows, the HIP sources' extern "C" wrappers and the
asm generator's FAMILY come from it, and `build_asm.py --check` fails when a code object, its .hip source or a
generated header disagrees with it in either direction (a declared symbol missing, an undeclared symbol present, a
wrong template instance, a generated file that is not what sage_co/abi.py and family.py give)."""
import dataclasses
import json
import tomllib

import pytest

from llvm_tools import LLVM, ROOT, build_asm, needs_llvm
from sage_co import abi, family

# A family code object small enough to compile in a second: two generated wrappers of one template and one flag of
# the generated ABI header (the shape of asm_src/gfx1201_sage_attention.hip: a SAGE_KERNEL macro over a template body,
# the wrapper lines included from generated/<source>_kernels.h).
TINY_HIP = """// test family: y[i] = DP * x[i] (+1 when FLAG_LSE is set in flags)
#define __global__ __attribute__((global))
#include "generated/sage_abi.h"
template <int DP>
static inline __attribute__((always_inline, device)) void body(float* y, const float* x, unsigned flags) {
  unsigned i = __builtin_amdgcn_workitem_id_x();
  y[i] = DP * x[i] + ((flags & FLAG_LSE) ? 1.0f : 0.0f);
}
#define SAGE_KERNEL(NAME, TEMPLATE, ...) \\
  extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(32, 32))) \\
  void NAME(float* y, const float* x, unsigned flags) { TEMPLATE<__VA_ARGS__>(y, x, flags); }
#include "generated/tiny_kernels.h"
"""
TINY = "test_tiny_family"


def tiny_symbol(head_dim: int, instance_dim: int | None = None) -> family.Symbol:
    return family.Symbol("test.tiny", "hip", f"tiny_d{head_dim}", (("head_dim", head_dim),),
                         f"body<{instance_dim or head_dim}>")


GOOD = family.CodeObjectFamily((tiny_symbol(64), tiny_symbol(128)))


@pytest.fixture
def tiny_tree(tmp_path, monkeypatch):
    """A kernel list holding one family code object (declared in sage_co.family.CODE_OBJECTS for this test only),
    built once into tmp_path/hsaco; returns a `check(declaration)` running `build_asm.py --check` against it."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "tiny.hip").write_text(TINY_HIP)
    (src / "kernels.toml").write_text(f'[[code_object]]\nname = "{TINY}"\nsource = "tiny.hip"\narch = "gfx1201"\n')
    out = tmp_path / "hsaco"
    monkeypatch.setitem(family.CODE_OBJECTS, TINY, GOOD)
    assert build_asm.main(["--kernels", str(src / "kernels.toml"), "--out", str(out)]) == 0

    def check(declaration, capsys):
        monkeypatch.setitem(family.CODE_OBJECTS, TINY, declaration)
        rc = build_asm.main(["--check", "--kernels", str(src / "kernels.toml"), "--out", str(out)])
        return rc, capsys.readouterr().err
    return check, out


@needs_llvm
def test_rows_come_from_the_declaration_and_check_passes(tiny_tree, capsys):
    check, out = tiny_tree
    rows = json.loads((out / "manifest.json").read_text())["code_objects"][TINY]["provides"]
    assert rows == [k.row() for k in GOOD.kernels]
    assert check(GOOD, capsys)[0] == 0


@needs_llvm
def test_check_fails_on_a_symbol_the_family_does_not_declare(tiny_tree, capsys):
    rc, err = tiny_tree[0](dataclasses.replace(GOOD, kernels=(tiny_symbol(64),)), capsys)
    assert rc == 1
    assert "holds symbol 'tiny_d128', which sage_co/family.py does not declare" in err


@needs_llvm
def test_check_fails_on_a_declared_symbol_the_code_object_lacks(tiny_tree, capsys):
    extra = family.Symbol("test.tiny", "hip", "tiny_d256", (("head_dim", 256),), "body<256>")
    rc, err = tiny_tree[0](dataclasses.replace(GOOD, kernels=GOOD.kernels + (extra,)), capsys)
    assert rc == 1
    assert "sage_co/family.py declares symbol 'tiny_d256', but the code object built from tiny.hip does not hold it" \
        in err


@needs_llvm
def test_the_wrappers_and_the_abi_header_are_generated(tiny_tree, capsys, monkeypatch):
    """The build wrote generated/tiny_kernels.h (one SAGE_KERNEL line per declared symbol) and generated/sage_abi.h
    (FLAG_LSE from sage_co/abi.py); --check fails when either is edited or no longer what the declarations give."""
    check, out = tiny_tree
    gen = out.parent / "src" / "generated"
    assert "SAGE_KERNEL(tiny_d64, body, 64)" in (gen / "tiny_kernels.h").read_text()
    header = (gen / "sage_abi.h").read_text()
    assert f"#define FLAG_LSE {abi.FLAG_LSE}u" in header
    (gen / "sage_abi.h").write_text(header.replace(f"#define FLAG_LSE {abi.FLAG_LSE}u", "#define FLAG_LSE 4u"))
    rc, err = check(GOOD, capsys)
    assert rc == 1 and "sage_abi.h is not what sage_co/abi.py and sage_co/family.py generate" in err
    (gen / "sage_abi.h").write_text(header)
    monkeypatch.setattr(abi, "FLAG_LSE", 1 << 7)   # the declaration moves: the committed header is stale
    rc, err = check(GOOD, capsys)
    assert rc == 1 and "#define FLAG_LSE 128u" in err


@needs_llvm
def test_check_fails_on_a_wrapper_instantiating_other_keys(tiny_tree, capsys):
    swapped = (tiny_symbol(64, instance_dim=128), tiny_symbol(128))
    rc, err = tiny_tree[0](dataclasses.replace(GOOD, kernels=swapped), capsys)
    assert rc == 1
    assert "defines tiny_d64 as a call of body<64>, but sage_co/family.py declares body<128>" in err


def test_rows_may_not_be_written_twice(tmp_path, monkeypatch):
    (tmp_path / "tiny.hip").write_text(TINY_HIP)
    (tmp_path / "k.toml").write_text(f'[[code_object]]\nname = "{TINY}"\nsource = "tiny.hip"\narch = "gfx1201"\n'
                                     '[[code_object.provides]]\nop = "test.tiny"\nkernel = "hip"\nsymbol = "tiny_d64"\n')
    monkeypatch.setitem(family.CODE_OBJECTS, TINY, GOOD)
    with pytest.raises(build_asm.BuildError, match="declared in sage_co/family.py CODE_OBJECTS"):
        build_asm.read_kernel_list(tmp_path / "k.toml")


def test_the_shipped_list_builds_every_declared_family(monkeypatch):
    monkeypatch.setitem(family.CODE_OBJECTS, "gfx1201_not_built", GOOD)
    with pytest.raises(build_asm.BuildError, match=r"declares \['gfx1201_not_built'\], which the kernel list does not"):
        build_asm.read_kernel_list()


# ------------------------------------------------------------------------------------------ the shipped family
def test_shipped_manifest_rows_are_the_declaration():
    manifest = json.loads((ROOT / "hsaco" / "manifest.json").read_text())["code_objects"]
    toml = tomllib.loads((ROOT / "asm_src" / "kernels.toml").read_text())["code_object"]
    one_off = {co["name"] for co in toml if co.get("provides")}   # rows written in kernels.toml (microbench)
    assert one_off.isdisjoint(family.CODE_OBJECTS)
    assert set(manifest) == set(family.CODE_OBJECTS) | one_off
    for name, fam in family.CODE_OBJECTS.items():
        assert manifest[name]["provides"] == [k.row() for k in fam.kernels], name
        assert sorted(manifest[name]["kernels"]) == sorted(fam.symbols), name


def test_generator_family_is_the_declaration():
    import gen_sage_attention_asm as gen
    assert [c.symbol for c in gen.FAMILY] == [v.symbol for v in family.ATTENTION_ASM]
    assert [(c.head_dim, c.out_dtype, c.pv_dtype) for c in gen.FAMILY] == \
        [(v.head_dim, v.out_dtype, v.pv_dtype) for v in family.ATTENTION_ASM]
    with pytest.raises(ValueError, match="head_dim one of"):
        gen.Config(96, "bf16", "fp8")


def test_the_product_spans_the_abi_axes():
    for impl, dims in (("hip", abi.ATTENTION_HIP_HEAD_DIMS), ("asm", abi.ATTENTION_ASM_HEAD_DIMS)):
        declared = family.ATTENTION_HIP if impl == "hip" else family.ATTENTION_ASM
        assert {(v.head_dim, v.out_dtype, v.pv_dtype) for v in declared} == \
            {(d, t, pv) for d in dims for t in abi.OUT_DTYPES for pv in abi.PV_DTYPES
             if pv == "fp8" or d in abi.PV16_HEAD_DIMS}
    assert 256 in abi.ATTENTION_HIP_HEAD_DIMS and 256 not in abi.PV16_HEAD_DIMS   # issue 30: D_pad 256, fp8 only
    assert {(v.head_dim, v.rope_dim) for v in family.PREPARE} == \
        {(d, r) for d in abi.PREPARE_HEAD_DIMS for r in abi.PREPARE_ROPE_DIMS if r <= d}
    assert {v.rounding for v in family.PREPARE} == set(abi.PREPARE_ROUNDINGS)
    assert len(family.PREPARE) == len(abi.PREPARE_ROUNDINGS) * \
        len(abi.PREPARE_IN_DTYPES) * sum(len(family.rope_dims(d)) for d in abi.PREPARE_HEAD_DIMS)


@needs_llvm
@pytest.mark.parametrize("name", [n for n, f in family.CODE_OBJECTS.items() if f.wrappers])
def test_shipped_hip_sources_match_the_declaration(name):
    """The real .hip sources (preprocessed, not compiled) with their generated wrappers: each wrapper calls its
    declared template instance; a declaration with another instance is caught."""
    entry = next(e for e in build_asm.read_kernel_list() if e.name == name)
    symbols = set(entry.family.symbols)
    assert build_asm.family_problems(entry, symbols, LLVM) == []
    k = entry.family.kernels[-1] if entry.family.kernels[-1].hip_instance else entry.family.kernels[1]
    wrong = dataclasses.replace(k, hip_instance=k.hip_instance.replace("<", "<9, "))
    renamed = dataclasses.replace(entry.family, kernels=tuple(wrong if x is k else x for x in entry.family.kernels))
    problems = build_asm.family_problems(dataclasses.replace(entry, family=renamed), symbols, LLVM)
    assert len(problems) == 1 and f"defines {k.symbol} as a call of {k.hip_instance}" in problems[0]


def test_generated_files_are_current():
    """asm_src/generated/* and docs/abi.md are what sage_co/abi.py and sage_co/family.py give now (the cheap half of
    build_asm.py --check: no compiler)."""
    assert build_asm.generated_problems(build_asm.read_kernel_list()) == []


@needs_llvm
def test_each_prepare_object_instantiates_only_its_d_pad():
    """The prepare code objects share one source; the D_pad and the input dtypes passed as -DPREPARE_D_PAD and
    -DPREPARE_DTYPES (family.py compile_defines) select exactly the declared wrappers of each, together every
    (D_pad, dtype) once, and a source built without them refuses to compile."""
    entries = [e for e in build_asm.read_kernel_list() if e.source == "gfx1201_sage_prepare.hip"]
    parts = []
    for e in entries:
        assert set(build_asm.hip_instances(build_asm.preprocess(e, LLVM))) == set(e.family.symbols), e.name
        defines = e.family.compile_defines
        keys = {(dict(k.keys)["head_dim"], dict(k.keys)["in_dtype"]) for k in e.family.kernels}
        assert {d for d, _ in keys} == {defines["PREPARE_D_PAD"]}, e.name
        assert sum(1 << family.HIP_IN_DTYPE[t] for _, t in keys) == defines["PREPARE_DTYPES"], e.name
        parts += sorted(keys)
    assert sorted(parts) == sorted((d, t) for d in abi.PREPARE_HEAD_DIMS for t in abi.PREPARE_IN_DTYPES)
    for drop in ("PREPARE_D_PAD", "PREPARE_DTYPES"):
        kept = {k: v for k, v in entries[0].family.compile_defines.items() if k != drop}
        bare = dataclasses.replace(entries[0], family=dataclasses.replace(entries[0].family, compile_defines=kept))
        with pytest.raises(build_asm.BuildError, match=drop):
            build_asm.preprocess(bare, LLVM)
