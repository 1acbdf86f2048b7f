"""sage_co.codeobj reads every shipped code object and rejects bad input with one clear error type."""
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from sage_co import codeobj, registry

from llvm_tools import LLVM, ROOT, needs_llvm  # noqa: E402


@pytest.fixture(scope="session")
def test_objects(tmp_path_factory):
    if LLVM is None:
        pytest.skip("no LLVM with gfx1201 support here")
    out = tmp_path_factory.mktemp("hsaco")
    r = subprocess.run([sys.executable, str(ROOT / "build_asm.py"), "--kernels", str(ROOT / "tests/kernels/kernels.toml"),
                        "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out / "gfx1201"


def shipped_files():
    manifest = json.loads((ROOT / "hsaco" / "manifest.json").read_text())
    return [ROOT / "hsaco" / e["file"] for e in manifest["code_objects"].values()]


@pytest.mark.parametrize("path", shipped_files(), ids=lambda p: p.name)
def test_reads_every_shipped_code_object(path):
    co = codeobj.read_file(path)
    assert co.arch == "gfx1201" and co.code_object_version == codeobj.CODE_OBJECT_VERSION == 5
    manifest = registry.manifest()["code_objects"][path.stem]
    assert set(co.kernels) == set(manifest["kernels"])
    for name, k in co.kernels.items():
        assert k.descriptor.wavefront_size32 == 1
        assert 0 <= k.entry < len(co.text) and k.entry % 256 == 0
        assert k.descriptor.group_segment_fixed_size == manifest["kernels"][name]["lds_bytes"]
        assert k.kernarg_segment_size == manifest["kernels"][name]["kernarg_size"]


def test_decodes_the_example_kernel_descriptor(test_objects):
    co = codeobj.read_file(test_objects / "test_wmma_iu8_min.co")
    k = co.kernel("wmma_iu8_min")
    d = k.descriptor
    # docs/rdna4.md §Code object: rsrc1 0xE00F0002, rsrc2 0x84, kernel_code_properties 0x0408 for this kernel
    assert (d.rsrc1, d.rsrc2, d.kernel_code_properties) == (0xE00F0002, 0x84, 0x0408)
    assert (d.float_denorm_mode_32, d.float_denorm_mode_16_64, d.wgp_mode, d.mem_ordered) == (3, 3, 1, 1)
    assert (d.user_sgpr_count, d.enable_sgpr_kernarg_segment_ptr, d.enable_sgpr_workgroup_id_x) == (2, 1, 1)
    assert d.vgpr_count == 24 and d.group_segment_fixed_size == 256 and d.kernarg_size == 28
    assert [a[".name"] for a in k.explicit_args] == ["A", "Bt", "C", "a_bytes"]
    assert co.text[k.entry:k.entry + 4] != b"\0\0\0\0" and k.code_size == 264
    with pytest.raises(codeobj.CodeObjectError, match="no kernel named 'nope'"):
        co.kernel("nope")


@pytest.fixture
def good_bytes(test_objects):
    return (test_objects / "test_saxpy.co").read_bytes()


def test_rejects_truncated(good_bytes):
    with pytest.raises(codeobj.CodeObjectError, match="truncated.co: malformed code object|truncated.co: .*missing"):
        codeobj.read(good_bytes[: len(good_bytes) // 3], "truncated.co")


def test_rejects_random_bytes():
    import random
    junk = bytes(random.Random(1).randrange(256) for _ in range(4096))
    with pytest.raises(codeobj.CodeObjectError, match="junk.bin: not an ELF file"):
        codeobj.read(junk, "junk.bin")
    with pytest.raises(codeobj.CodeObjectError, match="empty.co: not an ELF file"):
        codeobj.read(b"", "empty.co")


def test_rejects_a_non_amdgpu_elf():
    host = Path(sys.executable).resolve().read_bytes()
    with pytest.raises(codeobj.CodeObjectError, match="expected EM_AMDGPU"):
        codeobj.read(host, "python")


def test_rejects_another_arch_patched(good_bytes):
    data = bytearray(good_bytes)
    flags_off = 0x30  # e_flags in the ELF64 header
    flags = struct.unpack_from("<I", data, flags_off)[0]
    struct.pack_into("<I", data, flags_off, (flags & ~0xFF) | 0x4C)  # EF_AMDGPU_MACH gfx942
    with pytest.raises(codeobj.CodeObjectError, match="code object is for gfx942, expected gfx1201"):
        codeobj.read(bytes(data), "patched.co")


@needs_llvm
def test_rejects_a_real_gfx942_code_object(tmp_path):
    src = tmp_path / "k.hip"
    src.write_text('#define __global__ __attribute__((global))\nextern "C" __global__ void k(int* p) { p[0] = 1; }\n')
    out = tmp_path / "k.co"
    subprocess.run([str(LLVM.clang), "-x", "hip", "--offload-arch=gfx942", "--cuda-device-only", "-nogpulib",
                    "-nogpuinc", "--no-gpu-bundle-output", "-O3", "-o", str(out), str(src)], check=True)
    with pytest.raises(codeobj.CodeObjectError, match="k.co: code object is for gfx942, expected gfx1201"):
        codeobj.read_file(out)
