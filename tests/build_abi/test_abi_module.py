"""sage_co/abi.py is the one ABI module, torch-free; the kernel author's tools run without torch; every launch
resolves its kernel through registry.find(op, **keys) over the manifest's key columns."""
import json
import re
import subprocess
import sys
import textwrap

import pytest

from llvm_tools import ROOT, needs_llvm
from sage_co import abi, registry


def _run_without_torch(tmp_path, code: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter where `import torch` fails (a shadowing package first on the path)."""
    blocker = tmp_path / "blocker" / "torch"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('torch is blocked in this test')\n")
    env_path = f"{blocker.parent}:{ROOT}"
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})


def test_blocker_really_blocks_torch(tmp_path):
    r = _run_without_torch(tmp_path, "import torch")
    assert r.returncode != 0 and "torch is blocked" in r.stderr


def test_import_sage_co_and_abi_without_torch(tmp_path):
    r = _run_without_torch(tmp_path, """
        import sys
        import sage_co, sage_co.abi, sage_co.codeobj, sage_co.kernargs, sage_co.registry
        assert "torch" not in sys.modules
        print(sage_co.abi.ATTENTION_FWD_ARGS.size,
              sage_co.registry.find("sage_attention_fwd", head_dim=128, out_dtype="bf16", pv_dtype="fp8").symbol)
        try:
            sage_co.sage_attention
        except ImportError as exc:
            print("lazy:", exc)
    """)
    assert r.returncode == 0, r.stderr
    assert "lazy: torch is blocked" in r.stdout     # the public functions load (and need torch) on first use


@needs_llvm
def test_build_check_and_lint_run_without_torch(tmp_path):
    r = _run_without_torch(tmp_path, """
        import runpy, sys
        # the generated attention family (the clang-built objects take minutes; test_build checks all of them) and
        # its lint (tests/build_abi/test_disasm_check.py lints every shipped object)
        for tool, argv in (("build_asm.py", ["--check", "--only", "gfx1201_sage_attention_asm"]),
                           ("tools/disasm_check.py", ["--no-mix", "--co",
                                                      "hsaco/gfx1201/gfx1201_sage_attention_asm.co"])):
            sys.argv = [tool, *argv]
            try:
                runpy.run_path(tool, run_name="__main__")
            except SystemExit as exc:
                assert exc.code == 0, (tool, exc.code)
        assert "torch" not in sys.modules
    """)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "code objects match their sources" in r.stdout and "lint clean" in r.stdout


def test_every_shipped_symbol_has_a_struct_and_keys():
    for k in registry.kernels():
        assert abi.struct_for(k.op) is not None
        assert registry.find(k.op, k.kernel, **dict(k.keys)) == k


def test_find_by_keys():
    k = registry.find("sage_prepare", "hip", rope_dim=64, head_dim=128, in_dtype="bf16", rounding="once")
    assert k.key("rope_dim") == 64 and k.op == "sage_prepare"
    assert registry.find(abi.PREDICT_SELECT_OP).kernel == "hip"   # an op with one kernel: no keys needed
    with pytest.raises(LookupError, match="unknown key"):
        registry.find("sage_prepare", "hip", rope=64)
    with pytest.raises(LookupError, match="has no symbol with"):
        registry.find("sage_prepare", "hip", rope_dim=48, head_dim=128, in_dtype="bf16", rounding="once")
    with pytest.raises(LookupError, match=r"matches \d+ symbols"):
        registry.find("sage_prepare", "hip", rope_dim=64)
    with pytest.raises(LookupError, match="no kernel 'fast'"):
        registry.find(abi.ATTENTION_OP, "fast")


def test_no_op_string_carries_a_key():
    """rope_dim, head_dim, dtypes live in key columns, not squeezed into op names."""
    manifest = json.loads((ROOT / "hsaco" / "manifest.json").read_text())
    ops = {p["op"] for co in manifest["code_objects"].values() for p in co["provides"]}
    assert not [op for op in ops if any(x in op for x in ("rope", "_d64", "_d128", "bf16", "fp16"))], ops


def test_kernel_list_rejects_ambiguous_keys(tmp_path):
    import build_asm
    (tmp_path / "a.s").write_text("")
    rows = ('[[code_object]]\nname = "x"\nsource = "a.s"\narch = "gfx1201"\n'
            '[[code_object.provides]]\nop = "o"\nkernel = "v"\nsymbol = "s1"\nrope_dim = 0\n'
            '[[code_object.provides]]\nop = "o"\nkernel = "v"\nsymbol = "s2"\nrope_dim = 0\n')
    (tmp_path / "k.toml").write_text(rows)
    with pytest.raises(build_asm.BuildError, match="have the same keys"):
        build_asm.read_kernel_list(tmp_path / "k.toml")
    (tmp_path / "k.toml").write_text(rows.replace('symbol = "s2"\nrope_dim = 0', 'symbol = "s2"\nhead_dim = 64'))
    with pytest.raises(build_asm.BuildError, match="different key columns"):
        build_asm.read_kernel_list(tmp_path / "k.toml")


def test_generator_loads_the_struct_from_abi():
    """The generator's kernarg loads cover the abi struct exactly, at the struct's offsets (no literal offsets): the
    preloaded prefix in SGPRs KARG_SGPR.., the attn_mask fields (from mask_bits on) by the prologue's mask_setup."""
    import gen_sage_attention_asm as gen   # asm_src/ is on sys.path (pyproject.toml pytest pythonpath)
    from sage_attention_asm import config
    loads = gen.kernarg_loads(gen.KARG_SGPR)
    covered = sum(int(m.removeprefix("s_load_b")) // 8 for m, *_ in loads)
    assert covered == config.PRELOAD_BYTES == abi.ATTENTION_FWD_ARGS.by_name["mask_bits"].offset
    assert [off for _, _, off, _ in loads] == sorted(off for _, _, off, _ in loads)
    text = gen.build(gen.FAMILY[0])
    for mnemonic, first, off, _ in loads:
        n = int(mnemonic.removeprefix("s_load_b")) // 32
        dst = f"s{first}" if n == 1 else f"s[{first}:{first + n - 1}]"
        assert f"{mnemonic} {dst}, s[0:1], 0x{off:x}" in text
    for name in ("mask_bits", "mask_bias", "mask_kind", "mask_stride_b", "mask_stride_s"):
        assert f"s[0:1], 0x{abi.ATTENTION_FWD_ARGS.by_name[name].offset:x}  // {name}" in text
    # the varlen pointers (after the mask fields) are not preloaded either: one s_load_b128 where the prologue
    # needs them
    assert abi.ATTENTION_FWD_ARGS.by_name["cu_seqlens_q"].offset >= config.PRELOAD_BYTES
    assert f"s_load_b128 s[{gen.KARG_SGPR + covered // 4}:" not in text
    assert f", s[0:1], 0x{abi.ATTENTION_FWD_ARGS.by_name['cu_seqlens_q'].offset:x}" in text


def test_hip_kernel_arithmetic_constants_match_abi():
    """The HIP kernels' constants of the softmax arithmetic come from the generated header, whose values are abi's
    (the asm generator derives its bit patterns from abi; docs/numerics.md §Attention arithmetic model), and no .hip
    source #defines an ABI constant, selector or kernarg parameter list by hand."""
    import struct

    import build_asm
    from sage_co import family
    header = (ROOT / "asm_src" / "generated" / "sage_abi.h").read_text()
    defs = dict(re.findall(r"^#define (\w+) (\S+)", header, flags=re.M))
    assert float(defs["P_OFF"].rstrip("f")) == abi.P_OFF
    assert float(defs["MAGIC"].rstrip("f")) == abi.MAGIC
    assert int(defs["MAGIC_BITS"], 16) == struct.unpack("<I", struct.pack("<f", abi.MAGIC))[0]
    assert float(defs["FMA_MAX_QK_SCALE"].rstrip("f")) == abi.FMA_MAX_QK_SCALE
    assert float(defs["M_INIT"].rstrip("f")) == abi.M_INIT == -struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]
    assert float(defs["RESCALE_TAU"].rstrip("f")) == abi.RESCALE_TAU
    assert int(defs["FLAG_VARLEN"].rstrip("u")) == abi.FLAG_VARLEN
    generated = set(abi.HIP_CONSTANTS) | set(family.HIP_SELECTORS) | \
        {f"{build_asm.struct_macro(st.name)}_{x}" for st in build_asm.hip_structs() for x in ("PARAMS", "ARGS")}
    for src in sorted((ROOT / "asm_src").glob("*.hip")):
        text = src.read_text()
        assert '#include "generated/sage_abi.h"' in text, src.name
        by_hand = set(re.findall(r"^[ \t]*#[ \t]*define[ \t]+(\w+)", text, flags=re.M)) & generated
        assert not by_hand, f"{src.name} #defines {sorted(by_hand)} by hand"


# What a hand-written assembly source must leave to its generated include (build_asm.py: the target, the ABI's
# `.set` constants and kernarg offsets, the descriptors and the metadata)
_GENERATED_DIRECTIVES = re.compile(r"^[ \t]*(\.amdgpu_metadata|\.amdhsa_kernel\b|\.amdhsa_kernarg_size|\.amdgcn_target|"
                                   r"\.amdhsa_code_object_version)", re.M)
# a load from the kernarg segment pointer s[0:1] at a number instead of a KARG_<FIELD> offset
_LITERAL_KARG_LOAD = re.compile(r"^[ \t]*s_load_\w+\s+[^,\n]+,\s*s\[0:1\],\s*(?:0x[0-9a-fA-F]+|\d+)\b", re.M)


def asm_hand_copies(source: str, include: str) -> list[str]:
    """What an assembly source states by hand that its generated include (the text `include`) states: a `.set` of
    a name the include sets or of any KARG_ name (a kernarg offset), a kernarg load at a literal offset, or a directive of the include (descriptor,
    metadata, kernarg size, target, code object version). Comments are not read."""
    code = re.sub(r"//.*", "", source)
    generated = set(re.findall(r"^[ \t]*\.set[ \t]+(\w+),", include, re.M))
    found = [f".set {n}" for n in re.findall(r"^[ \t]*\.set[ \t]+(\w+),", code, re.M)
             if n in generated or n.startswith("KARG_")]      # KARG_<FIELD>: the include's kernarg offsets
    found += [m.group(1) for m in _GENERATED_DIRECTIVES.finditer(code)]
    found += [" ".join(m.group(0).split()) for m in _LITERAL_KARG_LOAD.finditer(code)]
    return found


def test_no_assembly_source_states_the_abi_by_hand():
    """Every hand-written .s of the kernel list includes the file build_asm.py generates for it from sage_co/abi.py
    and states none of it again (the .hip counterpart: test_hip_kernel_arithmetic_constants_match_abi)."""
    import build_asm
    entries = build_asm.read_kernel_list()
    files = build_asm.generated_files(entries)
    sources = [e for e in entries if e.source.endswith(".s")]
    assert sources          # the microbenchmarks
    for e in sources:
        include = e.src_dir / build_asm.GENERATED_DIR / f"{e.source.removesuffix('.s')}_abi.s"
        assert include in files, f"build_asm.py generates no {include.name} for {e.source}"
        text = (e.src_dir / e.source).read_text()
        assert f'.include "{build_asm.GENERATED_DIR}/{include.name}"' in text, e.source
        assert asm_hand_copies(text, files[include]) == [], e.source


def test_hand_copies_in_assembly_are_found():
    """The lines the microbenchmark source held before its include was generated are each reported."""
    import build_asm
    entry = next(e for e in build_asm.read_kernel_list() if e.source == build_asm.MICROBENCH_SOURCE)
    include = build_asm.microbench_abi(entry)
    old = """
        .amdgcn_target "amdgcn-amd-amdhsa--gfx1201"
        .amdhsa_code_object_version 5     // every supported ROCm loads v5
        .set RECORD_DWORDS, 24
        .set RECORD_BYTES, RECORD_DWORDS * 4     // (the source's own: not reported)
        .set KARG_SCALARS, 32
        s_load_b256     s[4:11], s[0:1], 0      // a, b, src, out
        s_load_b96      s[12:14], s[0:1], 0x20
        s_load_b96      s[12:14], s[0:1], KARG_ITERATIONS
        .amdhsa_kernel gfx1201_microbench_wmma
          .amdhsa_kernarg_size 44
        .amdgpu_metadata
        // .set LDS_BYTES, 4096 in a comment is not code
    """
    assert asm_hand_copies(old, include) == [
        ".set RECORD_DWORDS", ".set KARG_SCALARS", ".amdgcn_target", ".amdhsa_code_object_version", ".amdhsa_kernel",
        ".amdhsa_kernarg_size", ".amdgpu_metadata", "s_load_b256 s[4:11], s[0:1], 0", "s_load_b96 s[12:14], s[0:1], 0x20"]
