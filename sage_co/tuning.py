"""The per-device choice of the attention schedule (docs/gpu.md §Tuning): which of the shipped exp2 schedules
(sage_co.family.ATTENTION_SCHEDULES) a call with schedule=None runs on a given GPU.

    chosen_schedule(device) -> str | None    the stored choice for this device and this build, None without one

`sage-co tune` (and `sage-co selftest --perf`) measure the schedules on the device (sage_co/tuning_run.py) and
store() the choice; sage_co.ops.attention.resolved_schedule reads it through chosen_schedule, which asks the file
once per (backend, device) and process and keeps the answer in memory; store() and invalidate() drop that memory
and bump `generation`, which is part of sage_co.plan's memo key, so plans made before a new choice are not reused.

The cache file is DIR/tuning.json, DIR = $SAGE_CO_CACHE_DIR or the user's cache directory (platformdirs:
~/.cache/sage-co on Linux, %LOCALAPPDATA%\\sage-co\\Cache on Windows). One entry per (device identity, manifest
identity):

    device    the device's identity (DeviceIdentity: name, gcnArchName, CU count from hipGetDeviceProperties;
              hipDriverGetVersion; hipRuntimeGetVersion), read through the gpu backend's binding (hip-python or
              ctypes), so a driver or runtime update, or another card, does not reuse a choice
    manifest  the sha256 of the shipped hsaco/manifest.json (it holds every code object's sha256), so another
              sage-co build does not reuse a choice made for other kernels
    schedule  the choice; rule, scores_ms, shapes: how it was made (sage_co/tuning_run.py)

Nothing in the file is trusted that does not match exactly: a file that is not this format (unreadable, not JSON,
a malformed entry), an entry for another device or build only, or a choice naming a schedule this build does not
ship is ignored with one warning per process (TuningCacheWarning) and the call runs the default schedule
(family.DEFAULT_SCHEDULE); the host never sees an exception from the cache. Writes go to a temporary file in DIR,
then os.replace: a reader sees the old file or the new one, never half of one.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import warnings
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from . import family, registry

ENV_DIR = "SAGE_CO_CACHE_DIR"
FILE_NAME = "tuning.json"
FORMAT = 1            # the file's "format": a reader of another format ignores the file (with the warning)
MAX_ENTRIES = 64      # the oldest entries go first (other builds and drivers of this machine accumulate)


class TuningCacheWarning(UserWarning):
    """The tuning cache holds something that is not trusted (corrupt, foreign or unknown): the default is used."""


@dataclass(frozen=True)
class DeviceIdentity:
    """What a tuned choice is valid for: the device (as hipGetDeviceProperties names it) and the driver and runtime
    that run it (HIP_VERSION encodings, major * 10^7 + minor * 10^5 + patch)."""
    name: str
    gcn_arch_name: str
    cus: int
    driver_version: int
    runtime_version: int

    @property
    def arch(self) -> str:
        """The bare arch (gcnArchName before its first ':', docs/rdna4.md §HIP runtime)."""
        return self.gcn_arch_name.split(":")[0]

    def describe(self) -> str:
        return f"{self.name}, {self.gcn_arch_name}, {self.cus} CUs"


_IDENTITY_TYPES = {f.name: (int if f.type in ("int", int) else str) for f in fields(DeviceIdentity)}


def device_identity(backend, index: int) -> DeviceIdentity:
    """The identity of HIP device `index` through the gpu backend `backend` (its binding's hipGetDeviceProperties,
    hipDriverGetVersion, hipRuntimeGetVersion); a HipError when the runtime refuses."""
    props = backend.device_properties(index)
    driver, runtime = backend.versions()
    return DeviceIdentity(props.name, props.gcn_arch_name, int(props.cus), int(driver), int(runtime))


_manifest_id: list[str] = []


def manifest_identity() -> str:
    """sha256 of the shipped hsaco/manifest.json (read once per process)."""
    if not _manifest_id:
        _manifest_id.append(hashlib.sha256((registry.hsaco_dir() / "manifest.json").read_bytes()).hexdigest())
    return _manifest_id[0]


def cache_dir() -> Path:
    """$SAGE_CO_CACHE_DIR, else the user's cache directory for sage-co (platformdirs.user_cache_dir)."""
    override = os.environ.get(ENV_DIR)
    if override:
        return Path(override)
    import platformdirs
    return Path(platformdirs.user_cache_dir("sage-co", appauthor=False))


def cache_path() -> Path:
    return cache_dir() / FILE_NAME


# ---------------------------------------------------------------------------------------------- reading
class _Corrupt(Exception):
    pass


def _entry(raw, i: int) -> dict:
    """One entry, checked field by field (a _Corrupt naming what is wrong)."""
    if not isinstance(raw, dict):
        raise _Corrupt(f"entry {i} is not an object")
    device = raw.get("device")
    if not isinstance(device, dict) or set(device) != set(_IDENTITY_TYPES):
        raise _Corrupt(f"entry {i}: 'device' must hold exactly {sorted(_IDENTITY_TYPES)}")
    for name, kind in _IDENTITY_TYPES.items():
        if type(device[name]) is not kind:
            raise _Corrupt(f"entry {i}: device.{name} must be a {kind.__name__}")
    for name in ("manifest", "schedule"):
        if not isinstance(raw.get(name), str):
            raise _Corrupt(f"entry {i}: '{name}' must be a string")
    return raw


def read_entries(path: Path | None = None) -> tuple[list[dict], str]:
    """(the file's entries, "" or why the whole file is not trusted). A missing file is no entries and no problem;
    anything else that is not a FORMAT file of well-formed entries is no entries and a problem."""
    path = path if path is not None else cache_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return [], ""
    except OSError as exc:
        return [], f"cannot be read ({type(exc).__name__}: {exc})"
    try:
        data = json.loads(raw)
    except ValueError as exc:   # malformed JSON, or bytes that are no text
        return [], f"is not valid JSON ({exc})"
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), list):
        return [], f"is not a sage-co tuning cache of format {FORMAT}"
    try:
        return [_entry(e, i) for i, e in enumerate(data["entries"])], ""
    except _Corrupt as exc:
        return [], f"is corrupt ({exc})"


_warned: list[str] = []   # the one warning of this process (its text), once given


def _warn_once(message: str) -> None:
    if _warned:
        return
    _warned.append(message)
    try:
        where = str(cache_path())
    except Exception as exc:   # the cache directory itself cannot be found: said, never raised
        where = f"(no cache directory: {type(exc).__name__}: {exc})"
    try:
        warnings.warn(f"sage-co tuning cache {where}: {message}; ignored: calls without a schedule run the "
                      f"default {family.DEFAULT_SCHEDULE!r} (`sage-co tune` stores a choice for this device; this "
                      "warning is given once per process)", TuningCacheWarning, stacklevel=2)
    except Warning:   # warnings turned into errors (-W error): the cache still never raises into the host
        pass


def lookup(identity: DeviceIdentity, manifest: str | None = None, path: Path | None = None) -> str | None:
    """The stored schedule for (identity, manifest), None when the file has none it can trust (warned once when the
    file holds something: corrupt, only foreign entries, or an unknown schedule)."""
    manifest = manifest if manifest is not None else manifest_identity()
    entries, problem = read_entries(path)
    if problem:
        _warn_once(f"the file {problem}")
        return None
    want = asdict(identity)
    mine = [e for e in entries if e["device"] == want and e["manifest"] == manifest]
    if mine:
        schedule = mine[-1]["schedule"]
        if schedule in family.ATTENTION_SCHEDULES:
            return schedule
        _warn_once(f"the choice for {identity.describe()} names the schedule {schedule!r}, which this build does not "
                   f"ship ({family.ATTENTION_SCHEDULES})")
        return None
    if entries:
        same_card = [e for e in entries if {k: e["device"][k] for k in ("name", "gcn_arch_name", "cus")} ==
                     {k: want[k] for k in ("name", "gcn_arch_name", "cus")}]
        if any(e["device"] == want for e in same_card):
            why = "its entry for this device was made with another sage-co build (another shipped manifest)"
        elif same_card:
            why = ("its entry for this device was made under another driver or HIP runtime (driver "
                   f"{same_card[-1]['device']['driver_version']}, runtime {same_card[-1]['device']['runtime_version']};"
                   f" now {identity.driver_version}, {identity.runtime_version})")
        else:
            why = f"it holds choices for other devices only, none for {identity.describe()}"
        _warn_once(why)
    return None


# ---------------------------------------------------------------------------------------------- per device, in memory
generation = 0                       # bumped by store() / invalidate(): part of sage_co.plan's memo key
_choices: dict[tuple, str | None] = {}   # (backend, device index) -> chosen_schedule's answer
_lock = threading.Lock()


def invalidate() -> None:
    """Forget the choices read so far (the next call per device reads the file again) and the plans made with them."""
    global generation
    with _lock:
        _choices.clear()
        generation += 1


def chosen_schedule(device=None, backend=None) -> str | None:
    """The tuned schedule of a gpu device (an int HIP index, a torch.device, None: the current one), None without a
    trusted choice. Reads the device's identity and the file once per (backend, device) and process. Never raises:
    a device whose identity cannot be read has no choice (warned once)."""
    try:
        if backend is None:
            from . import launch
            backend = launch.get_backend("gpu")
        index = device if isinstance(device, int) else backend.platform.index_of(device) if device is not None \
            else backend._current_device()
    except Exception:   # no gpu backend here (the launch itself reports why): nothing can have been tuned for it
        return None
    key = (backend, index)
    try:
        return _choices[key]
    except KeyError:
        pass
    choice = None
    try:
        identity = device_identity(backend, index)
    except Exception as exc:   # the host never sees the cache fail
        _warn_once(f"the identity of device {index} cannot be read ({type(exc).__name__}: {exc})")
    else:
        try:
            choice = lookup(identity)
        except Exception as exc:
            _warn_once(f"it cannot be read ({type(exc).__name__}: {exc})")
    with _lock:
        _choices[key] = choice
    return choice


# ---------------------------------------------------------------------------------------------- devices
def gpu_devices() -> tuple[object | None, list[int], str]:
    """(the gpu backend, the HIP indices of its gfx1201 devices by hipGetDeviceProperties, why there are none).
    Without a gpu backend in the process and without a ROCm torch that sees a device, nothing is loaded."""
    import torch

    from . import launch
    if not launch.has_backend("gpu"):
        if getattr(torch.version, "hip", None) is None:
            return None, [], f"this torch ({torch.__version__}) is not a ROCm build"
        if not torch.cuda.is_available():
            return None, [], "torch sees no HIP device"
    try:
        be = launch.get_backend("gpu")
        n = be.device_count()
        archs = [be.device_properties(i).gcn_arch_name.split(":")[0] for i in range(n)]
    except Exception as exc:   # the runtime cannot be reached: said, not raised (info, tune's default)
        return None, [], f"the gpu backend cannot run here ({type(exc).__name__}: {exc})"
    found = [i for i, arch in enumerate(archs) if arch == family.ARCH]
    return be, found, "" if found else f"no {family.ARCH} among the HIP devices ({archs})"


def describe_choices() -> list[str]:
    """One line per visible gfx1201: its identity and stored choice, or "none: default <name>" (`sage-co info`)."""
    be, devices, why = gpu_devices()
    if not devices:
        return [f"tuned attention schedule: none ({why}); calls run the default {family.DEFAULT_SCHEDULE!r}"]
    lines = []
    for index in devices:
        try:
            what = device_identity(be, index).describe()
        except Exception as exc:
            what = f"identity unreadable: {type(exc).__name__}: {exc}"
        choice = chosen_schedule(index, be)
        lines.append(f"tuned attention schedule, device {index} ({what}): "
                     + (choice if choice is not None else f"none: default {family.DEFAULT_SCHEDULE}"))
    return lines


# ---------------------------------------------------------------------------------------------- writing
def store(identity: DeviceIdentity, schedule: str, *, rule: str = "", scores_ms: dict | None = None,
          shapes: list | None = None) -> Path:
    """Write the choice for (identity, this build's manifest), replacing that key's entry and keeping every other
    trusted entry (the newest MAX_ENTRIES); a corrupt file is replaced. Atomic (temporary file, os.replace).
    Returns the file's path."""
    if schedule not in family.ATTENTION_SCHEDULES:
        raise ValueError(f"schedule: expected one of {family.ATTENTION_SCHEDULES}, got {schedule!r}")
    path = cache_path()
    manifest = manifest_identity()
    entries, _problem = read_entries(path)
    want = asdict(identity)
    entries = [e for e in entries if not (e["device"] == want and e["manifest"] == manifest)]
    entries.append({"device": want, "manifest": manifest, "schedule": schedule, "rule": rule,
                    "scores_ms": scores_ms or {}, "shapes": shapes or []})
    text = json.dumps({"format": FORMAT, "entries": entries[-MAX_ENTRIES:]}, indent=1, sort_keys=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{FILE_NAME}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    invalidate()
    return path
