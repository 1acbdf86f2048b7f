"""build_asm.py: LLVM discovery, deterministic builds, the manifest, and --check catching drift."""
import shutil
import subprocess
import sys

import pytest

from llvm_tools import LLVM, ROOT, build_asm, needs_llvm  # noqa: E402
from sage_co import manifest as manifest_file

TEST_KERNELS = ROOT / "tests" / "build_abi" / "kernels"


def run_build(*args):
    return subprocess.run([sys.executable, str(ROOT / "build_asm.py"), *map(str, args)], capture_output=True, text=True)


@pytest.fixture
def kernel_tree(tmp_path):
    """A private copy of the test kernels (sources + kernel list) and an output dir."""
    src = tmp_path / "kernels"
    shutil.copytree(TEST_KERNELS, src)
    return src, tmp_path / "hsaco"


def test_bad_sage_co_llvm_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("SAGE_CO_LLVM", str(tmp_path))
    with pytest.raises(build_asm.BuildError, match="SAGE_CO_LLVM=.*clang >= 19 and ld.lld"):
        build_asm.find_llvm()


def test_no_llvm_anywhere_says_what_it_needs(monkeypatch):
    monkeypatch.delenv("SAGE_CO_LLVM", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(build_asm.toolchain, "LLVM_GUESSES", ["/nonexistent/llvm/bin"])  # sage_co.llvm
    with pytest.raises(build_asm.BuildError, match="apt-get install -y llvm-22 clang-22 lld-22"):
        build_asm.find_llvm()


def test_kernel_list_errors_name_the_entry(tmp_path):
    bad = tmp_path / "kernels.toml"
    bad.write_text('[[code_object]]\nname = "x"\nsource = "missing.s"\narch = "gfx1201"\n')
    with pytest.raises(build_asm.BuildError, match="code_object #1: source .*missing.s does not exist"):
        build_asm.read_kernel_list(bad)
    bad.write_text('[[code_object]]\nname = "x"\nsource = "a.s"\narch = "gfx942"\n')
    (tmp_path / "a.s").write_text("")
    with pytest.raises(build_asm.BuildError, match="arch 'gfx942' not supported"):
        build_asm.read_kernel_list(bad)


@needs_llvm
def test_build_is_deterministic_and_writes_the_manifest(kernel_tree, tmp_path):
    src, out1 = kernel_tree
    out2 = tmp_path / "hsaco2"
    for out in (out1, out2):
        r = run_build("--kernels", src / "kernels.toml", "--out", out)
        assert r.returncode == 0, r.stderr
    files = sorted(p.relative_to(out1) for p in out1.rglob("*") if p.is_file())
    assert {str(f) for f in files} >= {"manifest.json", "gfx1201/test_saxpy.co", "gfx1201/test_fill.co",
                                        "gfx1201/test_wmma_iu8_min.co"}
    for f in files:
        assert (out1 / f).read_bytes() == (out2 / f).read_bytes(), f"{f} differs between two builds"
    manifest = manifest_file.read(out1 / "manifest.json")   # each kernel's args resolved from kernarg_layouts
    saxpy = manifest["code_objects"]["test_saxpy"]
    assert saxpy["llvm_version"] == LLVM.version
    k = saxpy["kernels"]["saxpy"]
    assert [(a["name"].removesuffix(".coerce"), a["offset"], a["size"], a["value_kind"]) for a in k["args"]] == [
        ("a", 0, 4, "by_value"), ("x", 8, 8, "global_buffer"), ("y", 16, 8, "global_buffer"), ("n", 24, 4, "by_value")]
    assert k["wavefront_size"] == 32 and k["private_bytes"] == 0
    fill = manifest["code_objects"]["test_fill"]
    assert fill["kernels"]["fill"]["kernarg_size"] == 12
    wmma = manifest["code_objects"]["test_wmma_iu8_min"]
    assert wmma["kernels"]["wmma_iu8_min"]["lds_bytes"] == 256
    assert wmma["provides"] == [{"op": "test.wmma", "kernel": "asm", "symbol": "wmma_iu8_min"}]
    assert "/tmp" not in (out1 / "gfx1201/test_saxpy.co").read_bytes().decode("latin1")


@needs_llvm
def test_check_passes_then_catches_a_flipped_byte_and_an_edited_source(kernel_tree):
    src, out = kernel_tree
    assert run_build("--kernels", src / "kernels.toml", "--out", out).returncode == 0
    ok = run_build("--kernels", src / "kernels.toml", "--out", out, "--check")
    assert ok.returncode == 0, ok.stderr
    assert "3 code objects match" in ok.stdout

    co = out / "gfx1201" / "test_fill.co"
    data = bytearray(co.read_bytes())
    data[len(data) // 2] ^= 0x01
    co.write_bytes(bytes(data))
    bad = run_build("--kernels", src / "kernels.toml", "--out", out, "--check")
    assert bad.returncode == 1
    assert "test_fill: hsaco/gfx1201/test_fill.co does not match its source" in bad.stderr
    assert "first difference at byte" in bad.stderr

    assert run_build("--kernels", src / "kernels.toml", "--out", out).returncode == 0  # repair
    s = src / "wmma_iu8_min.s"
    s.write_text(s.read_text().replace("global_store_b32 v5, v23, s[8:9] offset:448",
                                       "global_store_b32 v5, v23, s[8:9] offset:452"))
    edited = run_build("--kernels", src / "kernels.toml", "--out", out, "--check")
    assert edited.returncode == 1
    assert "test_wmma_iu8_min: hsaco/gfx1201/test_wmma_iu8_min.co does not match its source" in edited.stderr
    assert "manifest sha256" in edited.stderr


@needs_llvm
def test_build_error_is_readable(kernel_tree):
    src, out = kernel_tree
    (src / "fill_gen.py").write_text("print('  not_an_instruction v0')\n")
    r = run_build("--kernels", src / "kernels.toml", "--out", out)
    assert r.returncode == 2
    assert "assembling" in r.stderr and "not_an_instruction" in r.stderr


@needs_llvm
def test_shipped_code_objects_match_their_sources():
    """The shipped objects against today's sources: the assembled and generated ones rebuilt byte for byte, the
    compiled (.hip) ones by their recorded inputs, bytes and LLVM (--quick; the full recompile, `--check`, is the
    maintainers' before-release step: test_check_passes_then_catches_a_flipped_byte_and_an_edited_source and
    test_quick_check_catches_an_edited_hip_source_and_a_flipped_byte cover both paths on small kernels)."""
    r = run_build("--check", "--quick")
    assert r.returncode == 0, r.stderr
    assert "code objects match their sources (compiled ones by their inputs)" in r.stdout


@needs_llvm
def test_quick_check_catches_an_edited_hip_source_and_a_flipped_byte(kernel_tree):
    """--check --quick compiles no .hip entry, yet fails on a .hip source edited after the build (its inputs_sha256,
    the preprocessed source, no longer matches), on a flipped byte of its object (sha256) and on an edited
    assembly source (rebuilt byte for byte); --quick without --check is refused."""
    src, out = kernel_tree
    assert run_build("--kernels", src / "kernels.toml", "--out", out).returncode == 0
    ok = run_build("--kernels", src / "kernels.toml", "--out", out, "--check", "--quick")
    assert ok.returncode == 0, ok.stderr
    assert "3 code objects match their sources (compiled ones by their inputs)" in ok.stdout
    assert "compiling" not in ok.stderr

    co = out / "gfx1201" / "test_saxpy.co"
    good = co.read_bytes()
    co.write_bytes(good[:100] + bytes([good[100] ^ 1]) + good[101:])
    bad = run_build("--kernels", src / "kernels.toml", "--out", out, "--check", "--quick")
    assert bad.returncode == 1 and "test_saxpy: manifest sha256" in bad.stderr, bad.stderr
    co.write_bytes(good)

    hip = src / "saxpy.hip"
    hip.write_text(hip.read_text().replace("__builtin_fmaf(a, x[i], y[i])", "__builtin_fmaf(a, x[i], -y[i])"))
    edited = run_build("--kernels", src / "kernels.toml", "--out", out, "--check", "--quick")
    assert edited.returncode == 1
    assert "test_saxpy: its inputs changed since hsaco/ was built" in edited.stderr, edited.stderr

    assert run_build("--kernels", src / "kernels.toml", "--out", out, "--quick").returncode == 2
