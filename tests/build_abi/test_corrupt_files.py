"""Corrupt code objects and manifests (issue 11 item 7): every reader raises one clear error type naming the file
and what is wrong -- codeobj.CodeObjectError for code objects, manifest.ManifestError for the manifest -- never a
bare OverflowError / AttributeError / JSONDecodeError / KeyError; a manifest `file` outside hsaco/ is refused."""
from __future__ import annotations

import copy
import json
import random
import shutil
import subprocess
import sys

import pytest
from elftools.elf.elffile import ELFFile

from llvm_tools import ROOT, build_asm, needs_llvm  # noqa: E402
from sage_co import cli, codeobj, registry
from sage_co import manifest as manifest_mod

# the smallest shipped code object with every structure the reader walks (test_single_byte_corruptions... checks
# they are there): a parse of it takes a third of the attention objects' (~1,000 parses per run)
CO_PATH = ROOT / "hsaco" / "gfx1201" / "gfx1201_sage_predict.co"
NAME = "fuzz.co"


def _read_or_clear_error(data: bytes) -> str:
    """'ok' when the bytes still parse, 'error' for a CodeObjectError naming the file; anything else fails."""
    try:
        codeobj.read(data, NAME)
    except codeobj.CodeObjectError as exc:
        assert str(exc).startswith(f"{NAME}: ") and exc.name == NAME and exc.problem
        return "error"
    return "ok"


@pytest.fixture(scope="module")
def good() -> bytes:
    return CO_PATH.read_bytes()


def test_random_bodies_behind_a_valid_elf_header(good):
    rng = random.Random(11)
    outcomes = [_read_or_clear_error(good[:64] + rng.randbytes(len(good) - 64)) for _ in range(120)]
    assert outcomes.count("error") == len(outcomes)


def test_random_multi_byte_corruptions(good):
    rng = random.Random(12)
    for _ in range(120):
        b = bytearray(good)
        for _ in range(rng.randrange(1, 24)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        _read_or_clear_error(bytes(b))


def _structures(data: bytes) -> dict[str, tuple[int, int]]:
    """(offset, size) of each ELF structure the reader walks: header, program and section header tables, and the
    sections the reader parses (symbol table, string tables, the metadata note, .rodata with the descriptors)."""
    import io
    elf = ELFFile(io.BytesIO(data))
    h = elf.header
    out = {"ELF header": (0, h.e_ehsize),
           "program headers": (h.e_phoff, h.e_phnum * h.e_phentsize),
           "section headers": (h.e_shoff, h.e_shnum * h.e_shentsize)}
    for sec in elf.iter_sections():
        if sec.name in (".symtab", ".strtab", ".shstrtab", ".note", ".rodata", ".dynsym", ".dynstr"):
            out[sec.name] = (sec["sh_offset"], sec["sh_size"])
    return out


def test_single_byte_corruptions_of_each_elf_structure(good):
    rng = random.Random(13)
    structures = _structures(good)
    assert {"ELF header", "section headers", ".symtab", ".note", ".rodata"} <= set(structures)
    errors = 0
    for what, (off, size) in structures.items():
        positions = range(off, off + size) if size <= 64 else sorted(rng.sample(range(off, off + size), 48))
        for pos in positions:
            for value in (0xFF, good[pos] ^ 0x80):
                b = bytearray(good)
                b[pos] = value
                errors += _read_or_clear_error(bytes(b)) == "error"
    assert errors > 100   # the corruptions do hit checked fields


def test_truncations(good):
    for n in (0, 3, 63, 64, 65, 200, len(good) // 2, len(good) - 1):
        assert _read_or_clear_error(good[:n]) == "error"


def test_read_file_of_a_missing_file_names_it(tmp_path):
    with pytest.raises(codeobj.CodeObjectError, match="nope.co: cannot read"):
        codeobj.read_file(tmp_path / "nope.co")


# ------------------------------------------------------------------------------------------------ manifests
@pytest.fixture(scope="module")
def manifest_text() -> str:
    return (ROOT / "hsaco" / "manifest.json").read_text()


def test_shipped_manifest_passes_the_check(manifest_text):
    manifest_mod.loads(manifest_text)


def test_truncated_manifests(manifest_text):
    rng = random.Random(14)
    for n in [0, 1, 10] + sorted(rng.sample(range(len(manifest_text)), 30)):
        with pytest.raises(manifest_mod.ManifestError, match="^m.json: not valid JSON"):
            manifest_mod.loads(manifest_text[:n], "m.json")


def _mutations(data: dict):
    """(description, manifest) pairs: each required field of one entry, kernel, provides row and arg removed or
    given the wrong type, plus structural damage."""
    co_name, co = next(iter(data["code_objects"].items()))
    kname = next(iter(co["kernels"]))
    paths = [("code_objects", co_name, f) for f in manifest_mod._CODE_OBJECT_FIELDS]
    paths += [("code_objects", co_name, "provides", 0, f) for f in manifest_mod._PROVIDES_FIELDS]
    paths += [("code_objects", co_name, "kernels", kname, f) for f in manifest_mod._KERNEL_FIELDS]
    paths += [("code_objects", co_name, "kernels", kname, "args", 0, f) for f in manifest_mod._ARG_FIELDS]
    for path in paths:
        for how in ("missing", "wrong type"):
            m = copy.deepcopy(data)
            parent = m
            for key in path[:-1]:
                parent = parent[key]
            if how == "missing":
                del parent[path[-1]]
            else:
                parent[path[-1]] = True if not isinstance(parent[path[-1]], bool) else "x"
            yield f"{'.'.join(map(str, path))} {how}", m
    yield "a list", []
    yield "no code_objects", {"format": 1}
    yield "code_objects a list", {"code_objects": []}
    m = copy.deepcopy(data)
    m["code_objects"][co_name] = "x"
    yield "entry a string", m
    m = copy.deepcopy(data)
    m["code_objects"][co_name]["sha256"] = "abc"
    yield "short sha256", m
    m = copy.deepcopy(data)
    m["code_objects"][co_name]["provides"][0]["symbol"] = "not_a_kernel"
    yield "provides an unknown symbol", m


def test_malformed_manifests(manifest_text):
    raw = json.loads(manifest_text)
    data = manifest_mod.expand(raw)   # each kernel's args resolved from kernarg_layouts
    n = 0
    for what, m in _mutations(data):
        with pytest.raises(manifest_mod.ManifestError, match="^m.json: ") as info:
            manifest_mod.check(m, "m.json")
        assert info.value.problem, what
        n += 1
    assert n > 30
    # the stored-once layouts: a reference to none, or a layouts table of the wrong shape, is refused by name
    co_name, co = next(iter(raw["code_objects"].items()))
    kname = next(iter(co["kernels"]))
    m = copy.deepcopy(raw)
    m["code_objects"][co_name]["kernels"][kname]["args"] = "no_such_layout"
    with pytest.raises(manifest_mod.ManifestError, match=f"kernels.{kname}.args: 'no_such_layout' is not in"):
        manifest_mod.loads(json.dumps(m), "m.json")
    m = copy.deepcopy(raw)
    m[manifest_mod.LAYOUTS] = []
    with pytest.raises(manifest_mod.ManifestError, match="kernarg_layouts: expected an object"):
        manifest_mod.loads(json.dumps(m), "m.json")
    assert manifest_mod.expand(manifest_mod.compact(data)) == data   # what build_asm.py writes reads back the same


@pytest.mark.parametrize("file", ["../x.co", "/etc/passwd", "gfx1201/../../x.co", "./gfx1201/a.co", "a\\b.co",
                                  "C:/x.co", "", "gfx1201//a.co"])
def test_manifest_file_escaping_hsaco_is_refused(manifest_text, file, tmp_path):
    data = json.loads(manifest_text)
    next(iter(data["code_objects"].values()))["file"] = file
    with pytest.raises(manifest_mod.ManifestError, match="file"):
        manifest_mod.check(data, "m.json")
    with pytest.raises(manifest_mod.ManifestError):
        manifest_mod.code_object_path(tmp_path, file)


def test_manifest_file_through_a_symlink_out_of_hsaco_is_refused(tmp_path):
    (tmp_path / "hsaco").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "hsaco" / "link").symlink_to(tmp_path / "outside")
    with pytest.raises(manifest_mod.ManifestError, match="outside"):
        manifest_mod.code_object_path(tmp_path / "hsaco", "link/x.co")


@pytest.fixture
def broken_hsaco(tmp_path, monkeypatch, manifest_text):
    """A copy of hsaco/ that the registry reads; the test writes its manifest."""
    hsaco = tmp_path / "hsaco"
    shutil.copytree(ROOT / "hsaco", hsaco)
    monkeypatch.setattr(registry, "hsaco_dir", lambda: hsaco)
    _clear_registry_caches()
    yield hsaco
    _clear_registry_caches()


def _clear_registry_caches() -> None:
    """Every cached answer of the registry (lru_caches and the lookup table) is dropped."""
    for value in vars(registry).values():
        if hasattr(value, "cache_clear"):
            value.cache_clear()
    for value in vars(registry).values():
        if isinstance(value, dict) and value and all(isinstance(k, tuple) for k in value):
            value.clear()


def test_registry_and_info_on_a_truncated_manifest(broken_hsaco, manifest_text, capsys):
    (broken_hsaco / "manifest.json").write_text(manifest_text[:len(manifest_text) // 3])
    with pytest.raises(manifest_mod.ManifestError, match="manifest.json: not valid JSON"):
        registry.kernels()
    assert cli.main(["info"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "manifest.json: not valid JSON" in err and "Traceback" not in err


def test_registry_refuses_an_escaping_file(broken_hsaco, manifest_text):
    data = json.loads(manifest_text)
    for co in data["code_objects"].values():
        co["file"] = "../" + co["file"]
    (broken_hsaco / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(manifest_mod.ManifestError, match="plain relative path inside hsaco/"):
        registry.kernels()


def test_registry_names_a_missing_code_object(broken_hsaco):
    k = registry.find("sage_attention_fwd", "hip", head_dim=128, out_dtype="bf16", pv_dtype="fp8")
    (broken_hsaco / k.file).unlink()
    with pytest.raises(codeobj.CodeObjectError, match=f"{k.file}: cannot read the shipped code object"):
        registry.load(k.file, k.sha256)


def test_disasm_check_on_a_malformed_manifest(tmp_path, manifest_text):
    hsaco = tmp_path / "hsaco"
    hsaco.mkdir()
    (hsaco / "manifest.json").write_text('{"code_objects": {"x": {"file": "../../etc/passwd"}}}')
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "disasm_check.py"), "--hsaco", str(hsaco)],
                       capture_output=True, text=True)
    if "LLVM" in r.stderr and "not found" in r.stderr:
        pytest.skip(r.stderr.strip())
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "manifest.json: code_objects.x: missing field" in r.stderr


@needs_llvm
def test_build_asm_check_on_a_truncated_manifest(tmp_path):
    src = tmp_path / "kernels"
    shutil.copytree(ROOT / "tests" / "build_abi" / "kernels", src)
    out = tmp_path / "hsaco"
    assert build_asm.main(["--kernels", str(src / "kernels.toml"), "--out", str(out)]) == 0
    text = (out / "manifest.json").read_text()
    (out / "manifest.json").write_text(text[:len(text) // 2])
    r = subprocess.run([sys.executable, str(ROOT / "build_asm.py"), "--check", "--kernels", str(src / "kernels.toml"),
                        "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "manifest.json: not valid JSON" in r.stderr
    r = subprocess.run([sys.executable, str(ROOT / "build_asm.py"), "--only", "test_saxpy", "--kernels",
                        str(src / "kernels.toml"), "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "not valid JSON" in r.stderr
