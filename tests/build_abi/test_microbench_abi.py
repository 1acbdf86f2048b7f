"""The microbenchmarks' ABI include (asm_src/generated/gfx1201_microbench_abi.s), which build_asm.py generates from
sage_co/abi.py: its constants, kernarg offsets, descriptors and metadata follow abi, the shipped code object carries
them, and the assembly's own guards refuse an include its loads and stores do not fit."""
import dataclasses
import re
import shutil
import subprocess

import pytest

from llvm_tools import ROOT, TARGET, build_asm, needs_llvm, tool
from sage_co import abi, codeobj, registry
from sage_co.kernargs import Field, KernargStruct

ASM_SRC = ROOT / "asm_src"
SHIPPED = ROOT / "hsaco" / "gfx1201" / "gfx1201_microbench.co"


@pytest.fixture(scope="module")
def entry():
    return next(e for e in build_asm.read_kernel_list() if e.source == build_asm.MICROBENCH_SOURCE)


def _sets(text: str) -> dict[str, int]:
    return {n: int(v) for n, v in re.findall(r"^\s*\.set (\w+),\s*(\d+)", text, re.M)}


def test_include_states_abi_constants_and_offsets(entry):
    sets = _sets(build_asm.microbench_abi(entry))
    for name, src in abi.MICROBENCH_ASM_CONSTANTS.items():
        assert sets[name] == getattr(abi, src), name
    for f in abi.MICROBENCH_ARGS.fields:
        assert sets[build_asm.karg_symbol(f.name)] == f.offset
    assert sets["KARG_SIZE"] == abi.MICROBENCH_ARGS.size


def test_include_follows_a_changed_abi(entry, monkeypatch):
    """A field added to MICROBENCH_ARGS moves the offsets after it and the size, in the `.set` lines, the
    descriptors and the metadata; a larger LDS table reaches exactly the LDS kernels' descriptors and metadata."""
    it, size = abi.MICROBENCH_ARGS.by_name["iterations"].offset, abi.MICROBENCH_ARGS.size
    fields = [dataclasses.replace(f, offset=None) for f in abi.MICROBENCH_ARGS.fields]
    at = [f.name for f in fields].index("iterations") + 1
    monkeypatch.setattr(abi, "MICROBENCH_ARGS", KernargStruct(abi.MICROBENCH_OP, [*fields[:at], Field("extra", "u32"),
                                                                                  *fields[at:]]))
    monkeypatch.setattr(abi, "MICROBENCH_LDS_BYTES", 2 * abi.MICROBENCH_LDS_BYTES)
    text = build_asm.microbench_abi(entry)
    sets = _sets(text)
    assert (sets["KARG_ITERATIONS"], sets["KARG_EXTRA"], sets["KARG_SRC_BYTES"], sets["KARG_SIZE"]) == \
        (it, it + 4, it + 8, size + 4)
    assert sets["LDS_BYTES"] == abi.MICROBENCH_LDS_BYTES
    n = len(abi.MICROBENCH_BENCHES)
    assert text.count(f".amdhsa_kernarg_size {size + 4}\n") == text.count(f".kernarg_segment_size: {size + 4}\n") == n
    assert text.count(f"{{ .name: extra, .offset: {it + 4}, .size: 4, .value_kind: by_value }}") == n
    lds = len(abi.MICROBENCH_LDS_BENCHES)
    assert text.count(f".amdhsa_group_segment_fixed_size {abi.MICROBENCH_LDS_BYTES}\n") == lds
    assert text.count(f".group_segment_fixed_size: {abi.MICROBENCH_LDS_BYTES}\n") == lds


def test_benches_and_kernel_list_rows_must_agree(entry):
    rows = tuple(p for p in entry.provides if p.get("bench") != "clock")
    with pytest.raises(build_asm.BuildError, match=r"gfx1201_microbench: its provides rows name the benches .*"
                                                   r"MICROBENCH_BENCHES .*'clock'"):
        build_asm.microbench_abi(dataclasses.replace(entry, provides=rows))


def test_shipped_descriptors_and_metadata_are_the_abi():
    co = codeobj.read_file(SHIPPED)
    assert len(co.kernels) == len(abi.MICROBENCH_BENCHES)
    for bench in abi.MICROBENCH_BENCHES:
        k = co.kernel(registry.find(abi.MICROBENCH_OP, "asm", bench=bench).symbol)
        abi.MICROBENCH_ARGS.check(k.metadata, k.name)        # offsets, sizes, kinds, names (the loader's check)
        assert k.descriptor.kernarg_size == k.metadata[".kernarg_segment_size"] == abi.MICROBENCH_ARGS.size
        lds = abi.MICROBENCH_LDS_BYTES if bench in abi.MICROBENCH_LDS_BENCHES else 0
        assert k.descriptor.group_segment_fixed_size == k.metadata[".group_segment_fixed_size"] == lds
        assert k.metadata[".reqd_workgroup_size"] == list(abi.MICROBENCH_BLOCK)
        assert k.metadata[".max_flat_workgroup_size"] == abi.MICROBENCH_BLOCK[0]
        written = {a[".name"] for a in k.metadata[".args"]
                   if a[".value_kind"] == "global_buffer" and a.get(".actual_access") != "read_only"}
        assert written == set(abi.MICROBENCH_OUTPUTS)
        assert (k.descriptor.enable_sgpr_workgroup_id_x, k.descriptor.enable_sgpr_workgroup_id_y,
                k.descriptor.enable_sgpr_workgroup_id_z) == (1, 0, 0)


def _assemble(tmp_path, include: str) -> subprocess.CompletedProcess:
    """The microbenchmark source with `include` as its generated include, assembled from its folder as build_asm.py
    assembles it."""
    shutil.copy(ASM_SRC / build_asm.MICROBENCH_SOURCE, tmp_path)
    (tmp_path / "generated").mkdir(exist_ok=True)
    (tmp_path / "generated" / "gfx1201_microbench_abi.s").write_text(include)
    return subprocess.run([tool("clang"), *TARGET, "-c", "-o", "out.o", build_asm.MICROBENCH_SOURCE], cwd=tmp_path,
                          capture_output=True, text=True)


@needs_llvm
def test_assembly_refuses_an_include_its_loads_do_not_fit(entry, tmp_path, monkeypatch):
    """The source loads a..out with one s_load_b256 and the scalars with one s_load_b96: kernarg fields in another
    order are an assembler error naming the load, not a kernel reading the wrong argument."""
    assert _assemble(tmp_path, build_asm.microbench_abi(entry)).returncode == 0
    f = {x.name: dataclasses.replace(x, offset=None) for x in abi.MICROBENCH_ARGS.fields}
    order = ["a", "src", "b", "out", "iterations", "src_bytes", "stride_bytes"]
    monkeypatch.setattr(abi, "MICROBENCH_ARGS", KernargStruct(abi.MICROBENCH_OP, [f[n] for n in order]))
    r = _assemble(tmp_path, build_asm.microbench_abi(entry))
    assert r.returncode != 0 and "PROLOGUE needs a, b, src, out adjacent" in r.stderr
    monkeypatch.setattr(abi, "MICROBENCH_LDS_LOAD_BYTES", 2 * abi.MICROBENCH_LDS_LOAD_BYTES)
    r = _assemble(tmp_path, build_asm.microbench_abi(entry))
    assert "a wave's b128 access is LANES * B128 bytes" in r.stderr
