"""The shipped kernels: hsaco/manifest.json says which code object and symbol serve which operation on
which arch. Loading needs no compiler and no source tree: the .co files are package data.
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

from . import codeobj
from . import family
from . import manifest as manifest_file

_PKG = Path(__file__).resolve().parent


def hsaco_dir() -> Path:
    """Installed wheel: sage_co/hsaco; source checkout or editable install: <repo>/hsaco."""
    for cand in (_PKG / "hsaco", _PKG.parent / "hsaco"):
        if (cand / "manifest.json").is_file():
            return cand
    raise FileNotFoundError(f"hsaco/manifest.json not found next to the sage_co package ({_PKG}); "
                            "the installation is incomplete")


@functools.lru_cache(maxsize=None)
def manifest() -> dict:
    """hsaco/manifest.json, checked (sage_co.manifest: a malformed one raises ManifestError naming the problem)."""
    return manifest_file.read(hsaco_dir() / "manifest.json")


@dataclass(frozen=True)
class ShippedKernel:
    op: str
    kernel: str               # the implementation ("asm", "hip"): the manifest's `kernel` column
    arch: str
    symbol: str
    code_object: str          # manifest key, e.g. "gfx1201_sage_prepare"
    file: str                 # relative to hsaco/, e.g. "gfx1201/gfx1201_sage_prepare.co"
    sha256: str
    keys: tuple[tuple[str, object], ...] = ()   # the row's key columns beyond op/kernel (head_dim, rope_dim, ...)

    def key(self, name: str):
        return dict(self.keys).get(name)


# Columns of a manifest `provides` row that are not lookup keys.
_NOT_KEYS = ("op", "kernel", "symbol")


def kernels() -> list[ShippedKernel]:
    return list(_kernels())


@functools.lru_cache(maxsize=None)
def _kernels() -> tuple[ShippedKernel, ...]:
    """Parsed once per process (the manifest is package data): launches look kernels up on every call."""
    out = []
    for name, co in sorted(manifest()["code_objects"].items()):
        for p in co.get("provides", []):
            keys = tuple(sorted((k, v) for k, v in p.items() if k not in _NOT_KEYS))
            out.append(ShippedKernel(p["op"], p["kernel"], co["arch"], p["symbol"], name, co["file"], co["sha256"],
                                     keys))
    return tuple(out)


_found: dict[tuple, ShippedKernel] = {}


def find(op: str, kernel: str | None = None, arch: str = "gfx1201", **keys) -> ShippedKernel:
    """The one kernel serving `op` whose manifest key columns equal `keys` (e.g. head_dim=128, out_dtype="bf16",
    rope_dim=0). `kernel` (the implementation, e.g. "asm" or "hip") None picks DEFAULT_KERNEL[op] when shipped, else
    the only one there is. Every key column the op's rows carry must be given (or be the same on every row, or have
    a DEFAULT_KEYS value, which a column not given takes); a miss or an ambiguous match is a LookupError listing what
    is shipped. Answers are cached (ops look their kernels up per call)."""
    cache_key = (op, kernel, arch, tuple(sorted(keys.items())))
    hit = _found.get(cache_key)
    if hit is None:
        hit = _found[cache_key] = _find(op, kernel, arch, keys)
    return hit


def _find(op: str, kernel: str | None, arch: str, keys: dict) -> ShippedKernel:
    rows = [k for k in _kernels() if k.op == op and k.arch == arch]
    if not rows:
        raise LookupError(f"no shipped kernel for op {op!r} on {arch}; shipped ops: {sorted({k.op for k in _kernels()})}")
    shipped = sorted({k.kernel for k in rows})
    if kernel is None:
        preferred = DEFAULT_KERNEL.get(op)
        kernel = preferred if preferred in shipped else shipped[0] if len(shipped) == 1 else None
        if kernel is None:
            raise LookupError(f"op {op!r} has kernels {shipped} and no default: pass kernel=")
    if kernel not in shipped:
        raise LookupError(f"op {op!r} on {arch} has no kernel {kernel!r}; available: {shipped}")
    rows = [k for k in rows if k.kernel == kernel]
    columns = sorted({c for k in rows for c, _ in k.keys})
    keys = {**{c: v for c, v in DEFAULT_KEYS.get(op, {}).items() if c in columns}, **keys}
    unknown = sorted(set(keys) - set(columns))
    if unknown:
        raise LookupError(f"op {op!r}: unknown key(s) {unknown}; the manifest's key columns are {columns}")
    match = [k for k in rows if all(k.key(c) == v for c, v in keys.items())]
    if len(match) == 1:
        return match[0]
    table = ", ".join("{" + ", ".join(f"{c}={v!r}" for c, v in k.keys) + "}" for k in rows)
    if not match:
        raise LookupError(f"op {op!r} kernel {kernel!r} has no symbol with {keys}; shipped: {table}")
    raise LookupError(f"op {op!r} kernel {kernel!r}: {keys} matches {len(match)} symbols "
                      f"({[k.symbol for k in match]}); give the other key columns too: {columns}")


# Ops with several implementations: which one serves by default (the others stay selectable).
DEFAULT_KERNEL = {"sage_attention_fwd": "asm"}
# Key columns with a default, taken when a lookup does not give them: the attention's exp2 schedule (the ops resolve
# theirs in sage_co/ops/attention.py resolved_schedule and always pass it).
DEFAULT_KEYS = {"sage_attention_fwd": {"schedule": family.DEFAULT_SCHEDULE}}


def find_symbol(symbol: str, arch: str = "gfx1201") -> ShippedKernel:
    for k in _kernels():
        if k.symbol == symbol and k.arch == arch:
            return k
    raise LookupError(f"no shipped kernel symbol {symbol!r} for {arch}")


@functools.lru_cache(maxsize=None)
def load_bytes(file: str, sha256: str) -> bytes:
    path = manifest_file.code_object_path(hsaco_dir(), file)   # refuses a `file` that leaves hsaco/
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise codeobj.CodeObjectError(file, f"cannot read the shipped code object {path} ({exc.strerror or exc})") \
            from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise codeobj.CodeObjectError(file, f"sha256 {digest[:16]}... does not match the manifest ({sha256[:16]}...): "
                                            "the installed code object is corrupt or stale")
    return data


@functools.lru_cache(maxsize=None)
def load(file: str, sha256: str) -> codeobj.CodeObject:
    return codeobj.read(load_bytes(file, sha256), file)
