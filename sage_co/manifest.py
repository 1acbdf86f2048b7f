"""Read and check hsaco/manifest.json, the list of shipped code objects that build_asm.py writes.

One reader for every consumer (the runtime registry, `sage-co info`, `build_asm.py --check`,
tools/disasm_check.py): a file that cannot be read, is not JSON, lacks a field its readers use, holds a field of
the wrong type, or names a code object outside hsaco/ raises ManifestError naming the file and what is wrong.
Torch-free and LLVM-free.
"""
from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath

_SHA256 = re.compile(r"[0-9a-f]{64}")

# The fields every reader relies on, per level: name -> required Python type(s). Other fields are allowed (the
# provides rows carry extra lookup keys).
_CODE_OBJECT_FIELDS = {"file": str, "arch": str, "sha256": str, "source": str, "code_object_version": int,
                       "llvm_version": str, "provides": list, "kernels": dict}
_PROVIDES_FIELDS = {"op": str, "kernel": str, "symbol": str}
_KERNEL_FIELDS = {"kernarg_size": int, "vgpr_count": int, "lds_bytes": int, "args": list}
_ARG_FIELDS = {"name": str, "offset": int, "size": int}


class ManifestError(ValueError):
    """hsaco/manifest.json is unreadable or malformed; the message names the file and the problem."""

    def __init__(self, name: str, problem: str):
        super().__init__(f"{name}: {problem}")
        self.name, self.problem = name, problem


def read(path) -> dict:
    """The manifest at `path`, parsed and checked (check())."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(str(path), f"cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    return loads(text, str(path))


def loads(text: str, name: str = "manifest.json") -> dict:
    """The manifest in `text`, parsed, with every kernel's `args` reference resolved (expand()), and checked."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ManifestError(name, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno} "
                                  f"(truncated or hand-edited?)") from None
    except RecursionError:
        raise ManifestError(name, "not valid JSON: nested too deeply") from None
    data = expand(data, name)
    check(data, name)
    return data


# On disk each distinct kernarg layout is stored once, in the top-level `kernarg_layouts` object (id -> the args
# list), and a kernel's `args` is that id; in memory (read, loads) every kernel's `args` is the list itself.
LAYOUTS = "kernarg_layouts"


def compact(data: dict) -> dict:
    """A copy of a manifest with each distinct `args` list stored once under LAYOUTS and referenced by id from each
    kernel: the id is `<op>/<kernel>` of the symbol's provides row (the kernarg struct it takes, sage_co/abi.py
    STRUCTS, as that implementation's metadata spells it: clang names HIP pointers `<name>.coerce`), with
    `/<symbol>` added when kernels of one id disagree (a layout nobody declared: disasm_check reports it), the
    kernel's name without a provides row."""
    out = {**data, "code_objects": {}}
    layouts: dict[str, list] = {}
    for co_name, co in sorted(data["code_objects"].items()):
        ops = {}
        for p in co.get("provides", []):
            ops.setdefault(p["symbol"], f"{p['op']}/{p['kernel']}")
        kernels = {}
        for kname, k in sorted(co["kernels"].items()):
            args = k["args"]
            if isinstance(args, list):
                key = ops.get(kname, kname)
                if layouts.get(key, args) != args:
                    key = f"{key}/{kname}"
                layouts.setdefault(key, args)
                k = {**k, "args": key}
            kernels[kname] = k
        out["code_objects"][co_name] = {**co, "kernels": kernels}
    out[LAYOUTS] = dict(sorted(layouts.items()))
    return out


def expand(data, name: str = "manifest.json"):
    """`data` with every kernel's `args` id replaced by its list from LAYOUTS (and LAYOUTS dropped); a manifest
    written with the lists inline is returned as it is."""
    if not isinstance(data, dict) or LAYOUTS not in data:
        return data
    layouts = data[LAYOUTS]
    if not isinstance(layouts, dict) or not all(isinstance(v, list) for v in layouts.values()):
        raise ManifestError(name, f"{LAYOUTS}: expected an object of argument lists")
    out = {k: v for k, v in data.items() if k != LAYOUTS}
    if not isinstance(data.get("code_objects"), dict):
        return out
    out["code_objects"] = {}
    for co_name, co in data["code_objects"].items():
        if isinstance(co, dict) and isinstance(co.get("kernels"), dict):
            kernels = {}
            for kname, k in co["kernels"].items():
                if isinstance(k, dict) and isinstance(k.get("args"), str):
                    if k["args"] not in layouts:
                        raise ManifestError(name, f"code_objects.{co_name}.kernels.{kname}.args: {k['args']!r} is "
                                                  f"not in {LAYOUTS} {sorted(layouts)}")
                    k = {**k, "args": layouts[k["args"]]}
                kernels[kname] = k
            co = {**co, "kernels": kernels}
        out["code_objects"][co_name] = co
    return out


def _fields(obj, spec: dict, name: str, where: str) -> None:
    if not isinstance(obj, dict):
        raise ManifestError(name, f"{where}: expected an object, got {type(obj).__name__}")
    for key, typ in spec.items():
        if key not in obj:
            raise ManifestError(name, f"{where}: missing field {key!r}")
        value = obj[key]
        if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            raise ManifestError(name, f"{where}.{key}: expected {typ.__name__}, got {type(value).__name__} "
                                      f"{json.dumps(value)[:40]}")


def check(data, name: str = "manifest.json") -> None:
    """Raise ManifestError unless `data` has every field its readers use, with the right types."""
    if not isinstance(data, dict) or not isinstance(data.get("code_objects"), dict):
        raise ManifestError(name, "expected an object with a 'code_objects' object")
    for co_name, co in data["code_objects"].items():
        where = f"code_objects.{co_name}"
        _fields(co, _CODE_OBJECT_FIELDS, name, where)
        relative_file(co["file"], name, f"{where}.file")
        if not _SHA256.fullmatch(co["sha256"]):
            raise ManifestError(name, f"{where}.sha256: expected 64 lowercase hex digits, got {co['sha256'][:70]!r}")
        for i, p in enumerate(co["provides"]):
            _fields(p, _PROVIDES_FIELDS, name, f"{where}.provides[{i}]")
            if p["symbol"] not in co["kernels"]:
                raise ManifestError(name, f"{where}.provides[{i}]: symbol {p['symbol']!r} is not among its kernels "
                                          f"{sorted(co['kernels'])}")
        for kname, k in co["kernels"].items():
            _fields(k, _KERNEL_FIELDS, name, f"{where}.kernels.{kname}")
            for i, a in enumerate(k["args"]):
                _fields(a, _ARG_FIELDS, name, f"{where}.kernels.{kname}.args[{i}]")


def relative_file(file: str, name: str = "manifest.json", where: str = "file") -> PurePosixPath:
    """A manifest `file` as a path below hsaco/: relative, '/'-separated, no '..', no empty or '.' parts."""
    p = PurePosixPath(file)
    if (not file or p.is_absolute() or "\\" in file or ":" in file
            or any(part in ("..", ".", "") for part in file.split("/"))):
        raise ManifestError(name, f"{where}: {file!r} must be a plain relative path inside hsaco/ "
                                  f"(no absolute path, '..', '.', backslash or drive)")
    return p


def code_object_path(hsaco_dir, file: str, name: str = "manifest.json") -> Path:
    """hsaco_dir / file, refused when the manifest entry would leave hsaco/ (also through a symlink)."""
    base = Path(hsaco_dir)
    path = base / relative_file(file, name)
    resolved, root = path.resolve(), base.resolve()
    if root != resolved and root not in resolved.parents:
        raise ManifestError(name, f"file: {file!r} resolves to {resolved}, outside {root}")
    return path


def kernel_snapshot(k) -> dict:
    """The ABI of one kernel (a sage_co.codeobj kernel) as the manifest's `kernels` section records it: the one
    snapshot (build_asm.py writes it and --check compares it on every rebuild, tools/disasm_check.py compares the
    shipped bytes with it, a change shows as a manifest diff)."""
    md, d = k.metadata, k.descriptor
    return {
        "symbol": md.get(".symbol"),
        "kernarg_size": md.get(".kernarg_segment_size"),
        "kernarg_align": md.get(".kernarg_segment_align"),
        "args": [{"name": a.get(".name", ""), "offset": a[".offset"], "size": a[".size"],
                  "value_kind": a[".value_kind"]} for a in k.args],
        "lds_bytes": md.get(".group_segment_fixed_size"),
        "private_bytes": md.get(".private_segment_fixed_size"),
        "vgpr_count": md.get(".vgpr_count"),
        "sgpr_count": md.get(".sgpr_count"),
        "wavefront_size": md.get(".wavefront_size"),
        "max_flat_workgroup_size": md.get(".max_flat_workgroup_size"),
        # decoded from the descriptor words below, spelled out so a review sees what changed
        "float_denorm_mode_32": d.float_denorm_mode_32,
        "float_denorm_mode_16_64": d.float_denorm_mode_16_64,
        "float_round_mode_32": d.float_round_mode_32,
        "float_round_mode_16_64": d.float_round_mode_16_64,
        "user_sgpr_count": d.user_sgpr_count,
        "workgroup_ids": [d.enable_sgpr_workgroup_id_x, d.enable_sgpr_workgroup_id_y, d.enable_sgpr_workgroup_id_z],
        "workitem_ids": d.enable_vgpr_workitem_id,
        "descriptor": {"rsrc1": f"0x{d.rsrc1:08x}", "rsrc2": f"0x{d.rsrc2:08x}", "rsrc3": f"0x{d.rsrc3:08x}",
                       "kernel_code_properties": f"0x{d.kernel_code_properties:04x}"},
    }
