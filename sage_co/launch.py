"""Launch a shipped kernel on a backend. One interface for both backends:

    stats = launch(symbol, struct, grid, block, args, backend="emu", sanitize=True)

`args` maps every kernarg field to a value: torch tensors for pointer fields (all on one device, contiguous,
16-byte aligned), Python ints/floats for scalars. The kernarg bytes are packed from the explicit KernargStruct
(sage_co.kernargs), checked against the code object's metadata at the kernel's first launch. Grid counts
workgroups (HIP module-launch semantics), block counts work-items. Keyword options go to the backend
(emu: sanitize, lds_race_check, trace_wave); launch() returns the backend's result (emu: the run's statistics,
gpu: None, the kernel being enqueued on torch's current stream).

Host cost: everything that does not change between launches (manifest row, parsed code object, metadata
check, a precompiled kernarg packer, the backend's module and function handles) is built once per kernel
and kept in a KernelPlan; benchmarks/bench_launch_overhead.py measures what is left per launch.

Backends (sage_co.backends.BACKENDS): "emu" runs the real code object on the CPU in sage_co.emu; "gpu" runs
it on a gfx1201 through HIP's module API (hip-python, or ctypes where it is not installed), on the HIP runtime
torch loaded. Every backend name goes through sage_co.backends.canonical (the deprecated spelling "hip" of "gpu"
included).
"""
from __future__ import annotations

import collections
import contextlib
import functools
import operator
import threading
from dataclasses import dataclass
from typing import Any

import torch

from . import abi, registry
from .backends import BACKENDS, backend_class, canonical
from .backends.base import (POINTER_ALIGN, KernelLaunch, KernelPlan, Packer, device_arch, emu_device_problem,
                            hip_device_problem)
from .kernargs import KernargStruct

__all__ = ["launch", "BoundLaunch", "FlatView", "device_guard", "resolve_backend", "get_backend", "use_backend", "checked_kernel", "plan", "warmup",
           "recording", "device_arch", "BACKENDS", "LaunchRecord"]

_DEVICE_CHECKS = {"emu": emu_device_problem, "gpu": hip_device_problem}
_checked: set[tuple] = set()   # (symbol, sha256, declared layout) already compared with the metadata
_plans: dict[tuple[str, int], KernelPlan] = {}
_backends: dict[str, Any] = {}
backend_swaps = 0   # use_backend() calls so far: what a memoised plan's device checks were made under (sage_co.plan)
_lock = threading.Lock()
# (symbol, backend) of the latest launches, newest last: bounded, so a long-running process never grows it.
launched: collections.deque = collections.deque(maxlen=256)
_recorders: list[list] = []


@dataclass(frozen=True)
class LaunchRecord:
    """One launch seen by recording(): the backend's result and the kernarg bytes it handed the runtime."""
    symbol: str
    backend: str
    grid: tuple
    block: tuple
    result: Any
    kernarg_bytes: bytes | None
    addresses: dict | None       # pointer field -> device address the kernargs hold


@contextlib.contextmanager
def recording():
    """Collect a LaunchRecord for every launch inside the block (tools use this instead of global history)."""
    records: list[LaunchRecord] = []
    _recorders.append(records)
    try:
        yield records
    finally:
        _recorders.remove(records)


def get_backend(name: str):
    """The process's backend instance for `name` (created at first use)."""
    be = _backends.get(name)
    if be is None:
        name = canonical(name, "backend")
        with _lock:
            be = _backends.get(name)
            if be is None:
                be = _backends[name] = backend_class(name)()
    return be


def has_backend(name: str) -> bool:
    """Whether the backend `name` was created or installed in this process (creates nothing)."""
    return canonical(name, "name") in _backends


def use_backend(name: str, instance) -> Any:
    """Install `instance` as the backend `name` (tests: the gpu backend on a stub runtime); returns the previous
    one (None when none was created yet) so the caller can put it back."""
    name = canonical(name, "name")
    if name is None:
        raise ValueError(f"name: expected one of {BACKENDS}, got None")
    global backend_swaps
    backend_swaps += 1
    previous = _backends.pop(name, None)
    if instance is not None:
        _backends[name] = instance
    return previous


def _device_problem(name: str, tensor: torch.Tensor) -> str | None:
    be = _backends.get(name)
    return be.device_problem(tensor) if be is not None else _DEVICE_CHECKS[name](tensor)


def resolve_backend(tensor: torch.Tensor, backend: str | None) -> str:
    """backend= wins when given (normalized: "hip" is the deprecated spelling of "gpu", a FutureWarning);
    otherwise CPU tensors -> "emu", a gfx1201 ROCm device -> "gpu"."""
    if backend is not None:
        backend = canonical(backend, "backend")
        problem = _device_problem(backend, tensor)
        if problem:
            raise ValueError(problem)
        return backend
    if tensor.device.type == "cpu":
        return "emu"
    arch = device_arch(tensor.device)
    if arch == "gfx1201":
        return "gpu"
    raise ValueError(f"no sage-co backend for tensors on {tensor.device} (arch {arch}): sage-co runs on a gfx1201 "
                     "ROCm device (backend='gpu') or on CPU tensors through the emulator (backend='emu')")


def checked_kernel(symbol: str, struct: KernargStruct, arch: str = "gfx1201"):
    """The shipped kernel for `symbol`, its code object verified against `struct` (once per process)."""
    shipped = registry.find_symbol(symbol, arch)
    co = registry.load(shipped.file, shipped.sha256)
    key = (symbol, shipped.sha256, tuple(struct.table()))
    if key not in _checked:
        struct.check(co.kernel(symbol).metadata, where=shipped.file)
        _checked.add(key)
    return shipped, co


def plan(symbol: str, struct: KernargStruct) -> KernelPlan:
    """The cached KernelPlan of one kernel (built and checked against the metadata at first use)."""
    key = (symbol, id(struct))
    p = _plans.get(key)
    if p is None or p.struct is not struct:
        shipped, co = checked_kernel(symbol, struct)
        kernel = co.kernel(symbol)
        # clang names HIP pointer parameters "<name>.coerce"
        read_only = frozenset(a.get(".name", "").removesuffix(".coerce") for a in kernel.explicit_args
                              if a.get(".actual_access") == "read_only")
        p = KernelPlan(symbol, shipped, co, kernel, struct, Packer(struct),
                       frozenset(f.name for f in struct.fields if f.kind == "ptr"), read_only,
                       int(kernel.metadata.get(".max_flat_workgroup_size", 1024)))
        _plans[key] = p
    return p


_GEOMETRY_CACHE = 256   # (grid, block) pairs remembered as checked per kernel; cleared when full
_INT_ONLY = {int}


def check_geometry(grid, block, p: KernelPlan) -> tuple[tuple, tuple]:
    """grid and block as int tuples, checked against the HIP limits and what kernel p reads (a block spanning
    dimensions it has no work-item ids for is refused); a geometry checked once for p is not checked again."""
    grid, block = tuple(grid), tuple(block)
    key = (grid, block)
    if key in p.checked_geometry and set(map(type, grid + block)) == _INT_ONLY:   # (True == 1: types too)
        return grid, block
    for what, dims in (("grid", grid), ("block", block)):
        if len(dims) != 3 or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims):
            raise ValueError(f"{p.symbol}: {what} must be three positive ints, got {dims}")
    threads = block[0] * block[1] * block[2]
    if threads > p.max_threads:
        raise ValueError(f"{p.symbol}: block {block} has {threads} work-items, the kernel allows at most "
                         f"{p.max_threads}")
    _check_declared_workgroup(block, threads, p)
    if grid[0] > 2**31 - 1 or grid[1] > 65536 or grid[2] > 65536:  # docs/rdna4.md §HIP runtime: CLR launch limits
        raise ValueError(f"{p.symbol}: grid {grid} exceeds the HIP limits (x < 2^31, y and z <= 65536)")
    if len(p.checked_geometry) >= _GEOMETRY_CACHE:
        p.checked_geometry.clear()
    p.checked_geometry.add(key)
    return grid, block


# Kernels written for exactly one block (the rest take any block up to their flat workgroup size, e.g. the predictor
# or the microbenchmarks). The metadata records only the maximum, so the fixed ones are
# declared here from sage_co/abi.py.
_FIXED_BLOCKS = {abi.ATTENTION_OP: abi.ATTENTION_BLOCK}


def _check_declared_workgroup(block: tuple, threads: int, p: KernelPlan) -> None:
    """The block must be one the kernel is written for (issue 11 item 10): equal to .reqd_workgroup_size when the
    metadata has one, equal to the declared block of a fixed-block kernel (the attention kernels: 4 wave32,
    abi.ATTENTION_BLOCK), and without a y/z extent the descriptor delivers no work-item id for: a kernel that reads
    only the x (or x, y) id cannot tell those work-items apart (docs/rdna4.md §Entry)."""
    reqd = p.kernel.metadata.get(".reqd_workgroup_size")
    if reqd is not None and tuple(reqd) != block:
        raise ValueError(f"{p.symbol}: block {block} differs from the kernel's required workgroup size {tuple(reqd)}")
    fixed = _FIXED_BLOCKS.get(p.struct.name)
    if fixed is not None and block != fixed:
        raise ValueError(f"{p.symbol}: block {block}; the kernel is written for workgroups of exactly {fixed} "
                         f"(sage_co/abi.py)")
    ids = p.kernel.descriptor.enable_vgpr_workitem_id   # 0: x only, 1: x and y, 2: x, y and z
    if (block[1] > 1 and ids < 1) or (block[2] > 1 and ids < 2):
        given = "x" if ids == 0 else "x and y"
        raise ValueError(f"{p.symbol}: block {block} spans dimensions the kernel does not see (its descriptor "
                         f"delivers only the {given} work-item id); use ({threads}, 1, 1)")


def _pointers(symbol: str, p: KernelPlan, tensors: dict, values: dict) -> None:
    """Check the tensor arguments (declared pointer fields, contiguous, POINTER_ALIGN-aligned, one device) and put
    their addresses into `values`."""
    device = None
    for name, value in tensors.items():
        if name not in p.pointer_fields:
            field = p.struct.by_name.get(name)
            raise TypeError(f"{symbol}: argument {name!r} is a tensor but the kernarg field is "
                            f"{field.kind if field else 'not declared'}")
        if not value.is_contiguous():
            raise ValueError(f"{symbol}: tensor argument {name!r} must be contiguous")
        ptr = value.data_ptr()
        if ptr % POINTER_ALIGN:
            raise ValueError(f"{symbol}: tensor argument {name!r} starts at {ptr:#x}, which is not "
                             f"{POINTER_ALIGN}-byte aligned (the kernels use {POINTER_ALIGN}-byte vector loads); "
                             "pass a tensor that owns its storage, e.g. t.clone()")
        index = value.get_device()   # an int (-1 = CPU): cheaper than building torch.device objects per tensor
        if device is None:
            device = index
        elif index != device:
            devices = sorted({str(t.device) for t in tensors.values()})
            raise ValueError(f"{symbol}: tensor arguments are on several devices {devices}")
        values[name] = ptr


def _run(be, p: KernelPlan, backend: str, grid, block, args, tensors, values, options):
    kl = KernelLaunch(p, grid, block, args, tensors, values, options)
    result = be.run(kl)
    launched.append((p.symbol, backend))
    if _recorders:
        addresses = kl.addresses if kl.addresses is not None else {n: values[n] for n in tensors}
        rec = LaunchRecord(p.symbol, backend, grid, block, result, kl.kernarg_bytes, addresses)
        for r in _recorders:
            r.append(rec)
    return result


def _backend(backend: str, options: dict):
    """The backend instance for a name launch() / BoundLaunch already normalized (canonical)."""
    if backend is None:
        raise ValueError(f"backend: expected one of {BACKENDS}, got None")
    be = get_backend(backend)
    if options and not options.keys() <= be.options:
        raise TypeError(f"launch(backend={backend!r}) got unknown option(s) {sorted(set(options) - be.options)}; "
                        f"the {backend} backend takes {sorted(be.options)}")
    return be


class FlatView(tuple):
    """(t, extent): the 1-D view t.as_strided((extent,), (1,)) of a caller's tensor t -- t's memory from its first
    element on, contiguous by construction -- made only when the full launch() path needs it (the emulator copies
    exactly those elements). The fast path checks and reads t itself: its device and its address are the view's,
    and the view is contiguous, so the checks are the view's; what it saves is the view op per call."""

    __slots__ = ()

    def is_contiguous(self) -> bool:
        return True

    def get_device(self) -> int:
        return self[0].get_device()

    def data_ptr(self) -> int:
        return self[0].data_ptr()

    @property
    def device(self) -> torch.device:
        return self[0].device

    def tensor(self) -> torch.Tensor:
        t, extent = self
        return t.as_strided((extent,), (1,))


def _tensors_of(tensors: dict) -> dict:
    """The mapping with every FlatView replaced by its tensor() (the full path checks and launches tensors)."""
    if any(type(t) is FlatView for t in tensors.values()):
        return {n: t.tensor() if type(t) is FlatView else t for n, t in tensors.items()}
    return tensors


def launch(symbol: str, struct: KernargStruct, grid: tuple, block: tuple, args: dict, *, backend: str,
           **options):
    """Run one kernel to completion (emu) or enqueue it on the current stream (gpu); returns the backend's
    result. Everything is checked before the backend sees the launch; a launch that fails is not recorded."""
    if type(args) is LaunchArgs and not options:
        bound = args.bound
        if bound is not None and bound.fast is not None and bound.symbol == symbol and bound.struct is struct and \
                bound.backend == backend and (grid is bound.grid or tuple(grid) == bound.grid) and \
                (block is bound.block or tuple(block) == bound.block):
            done, result = bound._fire(args.tensors, args.fresh, args.workspace)
            if done:
                return result
    backend = canonical(backend, "backend")
    be = _backend(backend, options)
    p = plan(symbol, struct)
    grid, block = check_geometry(grid, block, p)
    bound = args.bound if type(args) is LaunchArgs else None
    if bound is not None and bound.symbol == symbol and bound.struct is struct:
        # the scalars were checked when bound; the workspace fields are views of the call's workspace
        tensors = {**args.tensors, **args.fresh, **bound.static, **bound.workspace_views(args.workspace)}
        values = dict(bound.scalars)
    else:
        tensors, values = {}, {}
        for name, value in args.items():
            if isinstance(value, (torch.Tensor, FlatView)):
                tensors[name] = value
            else:
                values[name] = value
    tensors = _tensors_of(tensors)
    _pointers(symbol, p, tensors, values)
    return _run(be, p, backend, grid, block, args, tensors, values, options)


_NO_GUARD = contextlib.nullcontext()


def device_guard(backend: str, tensor: torch.Tensor):
    """One device guard for several launches on `tensor`'s device (a whole op call): the gpu backend makes that
    device current once (HipBackend.device_guard) instead of per launch; other backends need none."""
    be = _backends.get(backend)
    guard = getattr(be, "device_guard", None)
    if guard is None:
        return _NO_GUARD
    return guard(be.platform.device_index(tensor))


class BoundLaunch:
    """One kernel's launch with everything but its tensors fixed -- symbol, struct, grid, block, scalar kernargs,
    backend, and the pointer fields taken from a workspace -- checked once when bound (the geometry, every scalar
    packed once: an error names the field). The ops' recipes (sage_co.ops.*) bind their launches when a call
    shape is planned; per call they add the tensors: launch() on `bound.args(tensors, fresh, workspace)`.

    workspace: (field, byte offset, nbytes) of pointer fields that live in one per-call uint8 workspace tensor
    (an op's scratch buffers, or every buffer of a call whose intermediates never leave it): per call only the
    workspace is given (args(..., workspace=ws)) and each such field is ws.data_ptr() + offset, so a call makes one
    allocation, not one tensor per buffer. Offsets are POINTER_ALIGN multiples (checked here), the workspace must
    hold the last one's bytes (checked per call); the full path passes each as the view ws[offset:offset + nbytes].

    static: {pointer field: tensor} fixed for every launch of the binding (an op's placeholder for an absent
    input, a cached table): checked here as a caller's tensor would be, packed once, kept alive; they fix the
    launch's device (a call's tensors on another one take the full path, which refuses the mix).

    Per call, a backend with a bound-launch fast path (the gpu backend: `bind_launch`, its kernarg bytes packed
    here once, only the pointer fields written per call) gets just the addresses, after launch()'s per-launch
    checks: every `tensors` entry contiguous and on one device, every address POINTER_ALIGN-aligned, exactly the
    struct's other pointer fields (not static, not in the workspace) given. `fresh` tensors (and the workspace) are the op's own torch.empty outputs
    and workspaces (contiguous and on the call's device by construction: only their alignment is checked).
    Anything the fast path does not take (a missing or extra field, a failed check, backend options) goes through
    the full launch() path, which raises the error naming the argument."""

    __slots__ = ("symbol", "struct", "grid", "block", "scalars", "backend", "workspace", "static", "fast", "_be",
                 "_pointer_names", "_row_names", "_ws_offsets", "_ws_end", "_static_addresses", "_static_device",
                 "_plan", "_n", "_get", "_entry")

    def __init__(self, symbol: str, struct: KernargStruct, grid: tuple, block: tuple, scalars: dict, *,
                 backend: str, workspace=(), static: dict | None = None):
        backend = canonical(backend, "backend")
        be = _backend(backend, {})
        p = plan(symbol, struct)
        self.grid, self.block = check_geometry(grid, block, p)
        pointers = {f.name: 0 for f in struct.fields if f.kind == "ptr"}
        # static: pointer fields bound to one tensor for every launch (a placeholder, a cached table): checked
        # here like a caller's tensor, packed once, kept alive by the binding
        self.static = dict(static or {})
        if self.static:
            _pointers(symbol, p, self.static, pointers)
            self._static_device = next(iter(self.static.values())).get_device()
        else:
            self._static_device = None
        self._static_addresses = {n: pointers[n] for n in self.static}
        kernarg_bytes = struct.pack({**scalars, **pointers})   # scalars fit, none missing
        self.symbol, self.struct, self.scalars, self.backend = symbol, struct, dict(scalars), backend
        self._plan, self._be, self._entry = p, be, (symbol, backend)   # _entry: what launched records
        self.workspace = tuple((name, int(off), int(n)) for name, off, n in workspace)
        for name, off, n in self.workspace:
            if name not in pointers or off % POINTER_ALIGN or off < 0 or n < 0:
                raise ValueError(f"{symbol}: workspace field {name!r} at {off} ({n} bytes): expected a pointer "
                                 f"field of {struct.name} at a {POINTER_ALIGN}-byte aligned offset")
        in_ws = {name for name, _, _ in self.workspace}
        if len(in_ws) != len(self.workspace) or in_ws & self.static.keys():
            raise ValueError(f"{symbol}: a workspace field is listed twice, or also static, in {self.workspace}")
        names = tuple(f.name for f in sorted(struct.fields, key=lambda f: f.offset)
                      if f.kind == "ptr" and f.name not in in_ws and f.name not in self.static)
        self._pointer_names, self._n = names, len(names)
        self._ws_offsets = tuple(off for _, off, _ in self.workspace)
        self._ws_end = max((off + n for _, off, n in self.workspace), default=0)
        self._row_names = names + tuple(name for name, _, _ in self.workspace)   # the fast path's address order
        # the call's tensors in offset order in one C call (itemgetter of one name returns the value, not a tuple)
        self._get = operator.itemgetter(*names) if len(names) > 1 else lambda m, _n=names: tuple(m[n] for n in _n)
        bind = getattr(be, "bind_launch", None)
        offsets = tuple(struct.by_name[n].offset for n in self._row_names)
        self.fast = bind(p, self.grid, self.block, kernarg_bytes, offsets) if bind is not None and names else None

    def args(self, tensors: dict, fresh: dict | None = None, workspace: torch.Tensor | None = None
             ) -> "LaunchArgs":
        """The whole kernarg mapping of one launch: the bound scalars, this call's tensors (`fresh`: the op's own
        new outputs and workspaces, see the class docstring) and its workspace (for the bound workspace fields)."""
        return LaunchArgs(self, tensors, fresh or {}, workspace)

    def workspace_views(self, workspace: torch.Tensor | None) -> dict:
        """{workspace field: its view of `workspace`} (what the full path launches; {} without workspace fields)."""
        if not self.workspace:
            return {}
        if not isinstance(workspace, torch.Tensor) or workspace.dtype != torch.uint8 or workspace.dim() != 1 or \
                workspace.numel() < self._ws_end:
            raise ValueError(f"{self.symbol}: the fields {[n for n, _, _ in self.workspace]} are bound to a workspace: "
                             f"pass a 1-D uint8 tensor of at least {self._ws_end} bytes as workspace=, got "
                             f"{None if workspace is None else (type(workspace).__name__, getattr(workspace, 'shape', None), getattr(workspace, 'dtype', None))}")
        return {name: workspace[off:off + n] for name, off, n in self.workspace}

    def _fire(self, checked: dict, fresh: dict, workspace) -> tuple[bool, Any]:
        if self.fast is None or _backends.get(self.backend) is not self._be or \
                len(checked) + len(fresh) != self._n:   # use_backend() replaced it since binding / a field short
            return False, None
        device = self._static_device   # (None without static fields)
        try:
            for t in checked.values():
                if not t.is_contiguous():
                    return False, None
                index = t.get_device()
                if device is None:
                    device = index
                elif index != device:
                    return False, None
            # every pointer field's tensor in offset order (a missing name: KeyError; a name in both dicts
            # leaves another one missing), then their addresses (a non-tensor: AttributeError)
            ordered = self._get({**checked, **fresh} if fresh and checked else fresh or checked)
            row = [t.data_ptr() for t in ordered]
            if self._ws_offsets:   # then the workspace fields (a missing, wrong or short workspace: the full path)
                if type(workspace) is not torch.Tensor or workspace.dtype is not torch.uint8 or \
                        workspace.numel() < self._ws_end:
                    return False, None
                base = workspace.data_ptr()
                row += [base + off for off in self._ws_offsets]
        except (KeyError, AttributeError, TypeError):   # a field missing, or not a tensor
            return False, None
        if functools.reduce(operator.or_, row) % POINTER_ALIGN:
            return False, None
        recording_ = bool(_recorders)
        kernarg_bytes = self.fast(row, ordered[0], recording_)
        launched.append(self._entry)
        if recording_:
            rec = LaunchRecord(self.symbol, self.backend, self.grid, self.block, None, kernarg_bytes,
                               {**self._static_addresses, **dict(zip(self._row_names, row))})
            for r in _recorders:
                r.append(rec)
        return True, None


_NONE: dict = {}                         # no fresh tensors (never mutated)


class LaunchArgs(dict):
    """A kernarg mapping made by BoundLaunch.args: a dict of every field (the bound scalars, then the tensors, then
    the fresh tensors), which also remembers that its scalars are the bound (already checked) ones, so launch()
    only checks and packs its tensors. Any change to the mapping forgets that (launch() then checks every value, as
    for a plain dict).

    The entries are copied in at the first read or write through any dict method (`_fill`), not when it is made:
    launch()'s fast path reads only `bound`, `tensors`, `fresh` and `workspace`, so an op's launch builds no
    40-entry dict (a read that bypasses the Python methods -- none in CPython's dict(), {**m}, f(**m), json or
    copy, which see the overridden __iter__ / keys -- would see it empty). The entries are what the full path
    launches: a FlatView as its 1-D view, a bound workspace field as its view of the workspace."""

    __slots__ = ("bound", "tensors", "fresh", "workspace", "_filled")

    def __init__(self, bound: BoundLaunch, tensors: dict, fresh: dict, workspace=None):   # (dict.__new__: empty)
        self.bound, self.tensors, self.fresh, self.workspace, self._filled = bound, tensors, fresh, workspace, False

    def _fill(self):
        if not self._filled:
            self._filled = True
            dict.update(self, self.bound.scalars)
            dict.update(self, self.bound.static)
            dict.update(self, _tensors_of(self.tensors))   # (a FlatView as its tensor: the mapping holds tensors)
            dict.update(self, _tensors_of(self.fresh))
            if self.bound.workspace:   # the workspace fields as their views
                dict.update(self, self.bound.workspace_views(self.workspace))

    def _changed(self):
        self._fill()
        self.bound = None

    # ---- reads: the entries first
    def __getitem__(self, key):
        self._fill()
        return dict.__getitem__(self, key)

    def __contains__(self, key):
        self._fill()
        return dict.__contains__(self, key)

    def __iter__(self):
        self._fill()
        return dict.__iter__(self)

    def __reversed__(self):
        self._fill()
        return dict.__reversed__(self)

    def __len__(self):
        self._fill()
        return dict.__len__(self)

    def __eq__(self, other):
        self._fill()
        if isinstance(other, LaunchArgs):
            other._fill()
        return dict.__eq__(self, other)

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    __hash__ = None

    def __repr__(self):
        self._fill()
        return dict.__repr__(self)

    def __or__(self, other):
        self._fill()
        return dict.__or__(self, other)

    def __ror__(self, other):
        self._fill()
        return dict.__ror__(self, other)

    def __reduce_ex__(self, protocol):   # pickle / copy: a plain dict of the entries
        self._fill()
        return dict, (dict(self.items()),)

    def get(self, key, default=None):
        self._fill()
        return dict.get(self, key, default)

    def keys(self):
        self._fill()
        return dict.keys(self)

    def values(self):
        self._fill()
        return dict.values(self)

    def items(self):
        self._fill()
        return dict.items(self)

    def copy(self):
        self._fill()
        return dict(dict.items(self))

    # ---- writes: the entries first, then the bound scalars are no longer known to be the checked ones
    def __setitem__(self, key, value):
        self._changed()
        super().__setitem__(key, value)

    def __delitem__(self, key):
        self._changed()
        super().__delitem__(key)

    def __ior__(self, other):
        self._changed()
        return super().__ior__(other)

    def update(self, *a, **kw):
        self._changed()
        super().update(*a, **kw)

    def pop(self, *a):
        self._changed()
        return super().pop(*a)

    def popitem(self):
        self._changed()
        return super().popitem()

    def setdefault(self, *a):
        self._changed()
        return super().setdefault(*a)

    def clear(self):
        self._changed()
        super().clear()


def warmup(backend: str = "gpu", device: torch.device | str | int | None = None, symbols=None) -> None:
    """Load every shipped kernel (or those named in `symbols`) on `device` now, so no later launch loads a
    module: call it before capturing a HIP graph (loading a module during stream capture fails on HIP), or to
    keep first-call latency out of a timed region."""
    from .abi import struct_for
    shipped = registry.kernels()
    wanted = [k for k in shipped if symbols is None or k.symbol in set(symbols)]
    unknown = sorted(set(symbols or ()) - {k.symbol for k in shipped})
    if unknown:
        raise LookupError(f"warmup: no shipped kernel named {unknown}")
    if device is not None and not isinstance(device, torch.device):
        device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    get_backend(backend).warmup([plan(k.symbol, struct_for(k.op)) for k in wanted], device)
