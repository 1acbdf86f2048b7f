"""`sage-co`: the command a new user runs first.

    sage-co                     run a real attention through the shipped code objects (on the emulator when no
                                gfx1201 is present) and print accuracy, instruction counts and kernel provenance
    sage-co run -B 1 -H 2 -S 1024 [--kernel hip] [--backend emu|gpu] [--smooth-k] [--seed N]
    sage-co info                list the shipped kernels with their ABI (from hsaco/manifest.json), which
                                framework switches reach sage-co here and each gfx1201's tuned attention schedule
    sage-co tune [--device N] [--backend gpu|emu]
                                time the shipped attention schedules on the GPU and store the fastest for the
                                device (docs/gpu.md §Tuning); on the emulator: check each bit for bit, store nothing
    sage-co comfyui install PATH   install sage-co's ComfyUI node into the ComfyUI tree at PATH

The run options mean the same before and after `run` (`sage-co -S 64 run --smooth-k` runs S=64 with smooth_k;
given twice, the later one wins) and are refused with another subcommand. Every failure is one line on stderr and
a non-zero exit: 2 for a bad argument, 1 for a run that could not complete (no GPU for --backend gpu, not enough
memory, unusable code objects, output closed or disk full), 130 when interrupted.
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import os
import sys
import time

from rich.console import Console
from rich.table import Table

from .backends import ALIASES, BACKENDS, canonical


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich exits silently with status 1; main() reports it in one line instead
        self.quiet = True
        raise BrokenPipeError("stdout closed")


console = _Console() if sys.stdout.isatty() else _Console(width=180)


def cmd_info(args) -> int:
    from . import registry
    man = registry.manifest()
    table = Table(title=f"shipped code objects ({registry.hsaco_dir()})")
    for col in ("op", "kernel", "symbol", "code object", "kernarg bytes", "args (offset:name)", "VGPRs", "LDS B",
                "COV", "LLVM", "sha256"):
        args_col = col == "args (offset:name)"
        table.add_column(col, overflow="fold", no_wrap=not args_col, min_width=28 if args_col else None)
    for name, co in sorted(man["code_objects"].items()):
        for kname, k in sorted(co["kernels"].items()):
            provides = [p for p in co["provides"] if p["symbol"] == kname] or [{"op": "-", "kernel": "-"}]
            for p in provides:
                args_text = " ".join(f"{a['offset']}:{a['name'].removesuffix('.coerce')}" for a in k["args"])
                table.add_row(p["op"], p["kernel"], kname, co["file"], str(k["kernarg_size"]), args_text,
                              str(k["vgpr_count"]), str(k["lds_bytes"]), str(co["code_object_version"]),
                              co["llvm_version"], co["sha256"][:12])
    # the ABI table is wide: piped output gets room for every column instead of rich's 80-column guess
    (console if sys.stdout.isatty() else _Console(width=260)).print(table)
    from .backends import hip_bindings   # which HIP binding the gpu backend runs on here (hip-python or ctypes)
    console.print(hip_bindings.describe(), markup=False)
    from . import tuning    # each visible gfx1201's stored schedule choice (sage-co tune)
    for line in tuning.describe_choices():
        console.print(line, markup=False)
    from .integrations import switches  # which framework switches reach sage-co here (the shim's line last)
    for line in switches.lines():
        console.print(line, markup=False)
    return 0


def cmd_tune(args) -> int:
    from . import family, tuning, tuning_run
    backend = canonical(args.tune_backend, "--backend") if args.tune_backend is not None else None
    be, devices, why = tuning.gpu_devices() if backend != "emu" else (None, [], "")
    backend = backend or ("gpu" if devices else "emu")
    echo = lambda line: console.print(line, markup=False)   # noqa: E731 (progress lines)
    if backend == "emu":
        if args.device is not None:
            raise CliError("--device: the emulator has no devices; --device N picks a gfx1201 with --backend gpu", 2)
        console.print(f"sage-co tune on the CPU emulator{f' ({why})' if why else ''}: each attention schedule "
                      f"{family.ATTENTION_SCHEDULES} once per kernel at {tuning_run.shape_text(tuning_run.EMU_SHAPE)}: "
                      "the kernels bit for bit against each other, each against the arithmetic model within "
                      "docs/numerics.md §Kernel vs model", markup=False)
        rows = tuning_run.check_emulator(echo)
        table = Table(title="attention schedules on the emulator (no timing: the emulator has no clock)")
        for col in ("schedule", "kernel", "symbol", "bitwise equal to", "vs model: rel L2", "elements differing",
                    "checks"):
            table.add_column(col, no_wrap=True)
        for r in rows:
            if r["ok"] is None:
                table.add_row(r["schedule"], r["kernel"], "-", "-", "-", "-", "not built")
                continue
            table.add_row(r["schedule"], r["kernel"], r["symbol"], r["same_as"] or "-", f"{r['rel_l2']:.1e}",
                          f"{100 * r['different']:.3f} %", "[green]pass[/]" if r["ok"] else "[red]FAIL[/]")
        console.print(table)
        console.print("nothing was timed and no choice was written: the emulator has no clock (run `sage-co tune` "
                      f"on a gfx1201 to choose; until then calls run the default {family.DEFAULT_SCHEDULE!r})",
                      markup=False)
        return 0 if all(r["ok"] is not False for r in rows) else 1
    if not devices:
        raise CliError(f"--backend gpu needs a gfx1201 ({why}); `sage-co tune --backend emu` checks the schedules "
                       "on the CPU emulator")
    if args.device is not None:
        if args.device not in devices:
            raise CliError(f"--device {args.device}: not a visible gfx1201 (the gfx1201 devices: {devices})", 2)
        devices = [args.device]
    done = {}
    for index in devices:
        identity = tuning.device_identity(be, index)
        if identity in done:   # a second card of the same kind, driver and runtime: the same entry serves it
            console.print(f"device {index} ({identity.describe()}): the same identity as device {done[identity]}, "
                          "whose choice serves it", markup=False)
            continue
        console.print(f"tuning device {index} ({identity.describe()}, driver {identity.driver_version}, runtime "
                      f"{identity.runtime_version}): {len(family.ATTENTION_SCHEDULES)} schedule(s) x "
                      f"{len(tuning_run.SHAPES)} shapes, HIP events", markup=False)
        m = tuning_run.measure(index, backend=be, echo=echo)
        path = tuning_run.store(m)
        done[identity] = index
        table = Table(title=f"attention forward per schedule, device {index}: HIP-event ms per launch "
                            "(median of 3 rounds of 5)")
        shapes = [tuning_run.shape_text(sh) for sh in m.shapes]
        table.add_column("schedule", no_wrap=True)
        for sh in shapes:
            table.add_column(sh, justify="right")
        table.add_column("geometric mean", justify="right")
        table.add_column("", no_wrap=True)
        for sc, per in m.ms.items():
            table.add_row(sc, *[f"{per[sh]:.3f}" if per[sh] is not None else "not built" for sh in shapes],
                          f"{m.scores[sc]:.3f}", "chosen" if sc == m.choice else "")
        console.print(table)
        console.print(f"device {index}: chose {m.choice!r} (rule: {tuning_run.RULE}); written to {path}",
                      markup=False)
    return 0


def cmd_comfyui_install(args) -> int:
    from .integrations.comfyui import install
    done = install.install(args.path, replace=args.replace)
    if done.saved is not None:
        console.print(f"replaced {done.target} (its previous content is saved as {done.saved})", markup=False)
    console.print(f"wrote {done.target}: restart ComfyUI and add the node \"sage-co attention\" "
                  f"(advanced/attention) after the model loader", markup=False)
    return 0


class CliError(Exception):
    """A failure reported as one line `sage-co: <message>` with exit status `code`."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def default_backend() -> str:
    """The backend `sage-co run` uses without --backend: "gpu" when the current device is a gfx1201, else "emu"."""
    import torch
    from .launch import device_arch
    if torch.cuda.is_available() and device_arch(torch.device("cuda", torch.cuda.current_device())) == "gfx1201":
        return "gpu"
    return "emu"


# Emulator speed (docs/emulator.md, "Whole kernels"): attention B=1 H=4 S=4096 in 7.0-7.5 s, prepare in 0.8 s.
EMU_ATTENTION_S_PER_QK = 7.5 / (4 * 4096 * 4096)   # seconds per (head, query, key)
EMU_PREPARE_S_PER_TOKEN = 0.8 / (4 * 4096)          # seconds per (head, token)
# Memory of one `run`, per (batch, head, token): the inputs, the prepared tensors, the emulator's copies of them
# (its arena doubles when it grows) and the fp32 / model references; plus the fp32 reference's score chunk.
RUN_BYTES_PER_TOKEN = 10 * 1024
FP32_REFERENCE_CHUNK = 1 << 30
LONG_RUN_S = 10.0   # print the time estimate above this


def estimate(B: int, H: int, S: int) -> dict:
    """Seconds on the emulator and bytes of memory a `run` of this shape needs (rough, for the user)."""
    from .prepared import s_pad
    Sp = s_pad(S)
    return {"prepare_s": EMU_PREPARE_S_PER_TOKEN * B * H * Sp,
            "attention_s": EMU_ATTENTION_S_PER_QK * B * H * Sp * Sp,
            "bytes": RUN_BYTES_PER_TOKEN * B * H * Sp + min(FP32_REFERENCE_CHUNK, 12 * B * H * S * S)}


def available_memory() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (Linux), else the physical memory, else None."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def _check_run_feasible(args, backend: str) -> dict:
    """Refuse a run that cannot work before anything is allocated: one line each."""
    from . import validate
    try:
        validate.check_kernel(args.kernel)   # before the prepare kernels run (they used to, then the refusal came)
    except (TypeError, ValueError) as exc:
        raise CliError(f"--kernel {args.kernel!r}: {exc}", 2) from None
    if backend == "gpu" and default_backend() != "gpu":
        import torch
        why = "torch has no ROCm" if getattr(torch.version, "hip", None) is None else "no gfx1201 device is visible"
        raise CliError(f"--backend gpu needs a gfx1201 GPU and a ROCm build of torch ({why}); "
                       f"leave --backend out to run on the CPU emulator")
    est = estimate(args.B, args.H, args.S)
    avail = available_memory()
    if avail is not None and est["bytes"] > avail:
        raise CliError(f"-B {args.B} -H {args.H} -S {args.S} needs about {_gib(est['bytes'])} of memory (inputs, "
                       f"prepared tensors, emulator copies, references); {_gib(avail)} is available. "
                       f"Use a smaller -S, -H or -B")
    return est


class _Progress:
    """The status line of a long emulator run: workgroups done, elapsed and estimated remaining time."""

    def __init__(self, status):
        self.status, self.started = status, time.perf_counter()

    def __call__(self, symbol: str, done: int, total: int) -> None:
        elapsed = time.perf_counter() - self.started
        left = elapsed / done * (total - done)
        self.status.update(f"{symbol}: {done:,}/{total:,} workgroups ({100 * done / total:.0f} %), "
                           f"{elapsed:.0f} s elapsed, ~{left:.0f} s left")


@contextlib.contextmanager
def _emu_progress(backend: str, status):
    """Install a _Progress as the emulator backend's progress callback for the block (emu runs only)."""
    progress = _Progress(status)
    if backend != "emu":
        yield progress
        return
    from .launch import get_backend
    emu = get_backend("emu")
    emu.progress = progress
    try:
        yield progress
    finally:
        emu.progress = None


def cmd_run(args) -> int:
    import torch

    from . import accuracy, api, reference, registry
    from . import launch as launch_mod
    from .backends.timing import stage

    # the one normalization of backend names (--backend hip: the deprecated spelling of gpu, a FutureWarning)
    backend = canonical(args.backend, "--backend") or default_backend()
    est = _check_run_feasible(args, backend)
    device = "cuda" if backend == "gpu" else "cpu"
    where = "gfx1201 GPU (hip-python)" if backend == "gpu" else "CPU emulator (sage_co.emu) executing the gfx1201 code objects"
    console.print(f"[bold]sage-co[/]: SageAttention forward, B={args.B} H={args.H} S={args.S} D=128, "
                  f"backend [cyan]{backend}[/] ({where})")
    if backend == "emu" and est["prepare_s"] + est["attention_s"] > LONG_RUN_S:
        console.print(f"estimated emulation time: prepare ~{est['prepare_s']:.0f} s, attention "
                      f"~{est['attention_s']:.0f} s (docs/emulator.md speeds; this machine may differ), "
                      f"memory ~{_gib(est['bytes'])}")
    q, k, v = accuracy.make_inputs(args.dist, args.B, args.S, args.H, seed=args.seed, device=device)
    timings = {}
    with launch_mod.recording() as records, \
            console.status("prepare kernel: quantizing Q/K to INT8 and V to FP8 ...") as status, \
            _emu_progress(backend, status) as progress:
        progress.started = time.perf_counter()
        with stage(backend, q.device if backend == "gpu" else None) as t:   # HIP events on the GPU
            prepared = api.sage_prepare(q, k, v, smooth_k=args.smooth_k, backend=backend)
        timings["prepare"] = t.seconds
        status.update(f"attention kernel: INT8 QK^T + FP8 PV WMMA over {args.S} keys "
                      f"(prepare took {timings['prepare']:.1f} s) ...")
        progress.started = time.perf_counter()
        with stage(backend, q.device if backend == "gpu" else None) as t:
            out = api.sage_attention_fwd(prepared, backend=backend, kernel=args.kernel)
        timings["attention"] = t.seconds
        status.update("FP32 reference and BF16 SDPA ...")
        ref = reference.attention_fp32(q.cpu(), k.cpu(), v.cpu())
        sdpa = accuracy.bf16_sdpa(q.cpu(), k.cpu(), v.cpu())
        model = reference.sage_attention_model(reference.sage_prepare(q.cpu(), k.cpu(), v.cpu(), smooth_k=args.smooth_k))

    rows = [("sage-co kernels (" + backend + ")", accuracy.metrics(out.cpu(), ref)),
            ("arithmetic model (reference)", accuracy.metrics(model, ref)),
            ("BF16 SDPA", accuracy.metrics(sdpa, ref))]
    table = Table(title=f"accuracy against the FP32 reference ({args.dist} inputs)")
    for col in ("provider", "cosine", "median row cos", "rel L2", "max |err|", "outside band", "contract"):
        table.add_column(col, justify="right" if col != "provider" else "left")
    for name, m in rows:
        table.add_row(name, f"{m['cosine']:.5f}", f"{m['median_row_cosine']:.5f}", f"{m['rel_l2']:.4f}",
                      f"{m['max_abs']:.4f}", f"{100 * m['outside_band']:.3f} %",
                      "[green]pass[/]" if accuracy.within_contract(m) else "[red]FAIL[/]")
    console.print(table)
    bitwise = "identical" if torch.equal(out.cpu(), model) else \
        f"rel L2 {accuracy.metrics(out.cpu().float(), model.float())['rel_l2']:.2e}"
    console.print(f"kernel output vs arithmetic model: {bitwise}")

    prov = Table(title="kernels that ran (in launch order)")
    for col in ("stage", "symbol", "code object", "built from", "sha256"):
        prov.add_column(col, no_wrap=True)
    manifest = registry.manifest()["code_objects"]
    for symbol in [r.symbol for r in records]:
        kk = registry.find_symbol(symbol)
        prov.add_row(kk.op, symbol, f"{registry.hsaco_dir().name}/{kk.file}", manifest[kk.code_object]["source"],
                     kk.sha256[:12])
    console.print(prov)
    console.print(f"time: prepare {timings['prepare']:.2f} s, attention {timings['attention']:.2f} s "
                  f"({'emulated on the CPU' if backend == 'emu' else 'on the GPU, ' + t.clock})")

    if backend == "emu":
        counts = Table(title="emulated dynamic instruction counts (wave-instructions)")
        keys = ["WMMA", "VALU", "TRANS", "SALU", "LDS", "VMEM_LOAD", "VMEM_STORE", "SMEM", "BRANCH", "WAIT_OTHER",
                "wave_instructions", "waves", "wall_s"]
        counts.add_column("kernel", no_wrap=True)
        for key in keys:
            counts.add_column(key, justify="right")
        for symbol, st in [(r.symbol, r.result) for r in records]:
            counts.add_row(symbol, *[f"{st.get(key, 0):,}" if isinstance(st.get(key, 0), int) else f"{st.get(key):.2f}"
                                     for key in keys])
        console.print(counts)
    ok = accuracy.within_contract(rows[0][1])
    console.print("[green]accuracy contract met[/]" if ok else "[red]accuracy contract NOT met[/]")
    return 0 if ok else 1


RUN_DEFAULTS = {"B": 1, "H": 2, "S": 1024, "dist": "randn", "seed": 0, "smooth_k": False, "kernel": None,
                "backend": None}
SEED_LIMIT = 2 ** 64   # torch.Generator.manual_seed takes 0 .. 2^64 - 1


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"must be in 0 .. 2**64 - 1, got {value}")
    return value


def _add_run_options(p: argparse.ArgumentParser) -> None:
    """The run options, on the top-level parser and on `run`; SUPPRESS keeps an option absent unless given, so
    a value before the subcommand is not overwritten by the subcommand's default."""
    sup = argparse.SUPPRESS
    p.add_argument("-B", type=_positive_int, default=sup, help="batch (default 1)")
    p.add_argument("-H", type=_positive_int, default=sup, help="heads (default 2)")
    p.add_argument("-S", type=_positive_int, default=sup, help="sequence length (default 1024)")
    p.add_argument("--dist", choices=("randn", "k_offset"), default=sup, help="input distribution (default randn)")
    p.add_argument("--seed", type=_seed, default=sup, help="input seed, 0 .. 2**64 - 1 (default 0)")
    p.add_argument("--smooth-k", action="store_true", default=sup)
    p.add_argument("--kernel", default=sup, help="attention kernel: asm or hip (default: the manifest's default)")
    p.add_argument("--backend", choices=BACKENDS + tuple(ALIASES), default=sup,
                   help="emu (the CPU emulator) or gpu (a gfx1201); default: gpu when one is visible, else emu")


def parse_args(argv) -> argparse.Namespace:
    """The command line as main() reads it: the subcommand (default `run`) and its options, the run options allowed
    before or after `run` (RUN_DEFAULTS fill what is not given); a bad option exits 2 with argparse's usage line."""
    ap = argparse.ArgumentParser(prog="sage-co", description="SageAttention for gfx1201 as shipped code objects")
    _add_run_options(ap)
    sub = ap.add_subparsers(dest="cmd")
    info = sub.add_parser("info", help="list the shipped kernels and their ABI")
    info.set_defaults(func=cmd_info)
    comfyui = sub.add_parser("comfyui", help="ComfyUI: install sage-co's custom node into a ComfyUI tree")
    comfyui_sub = comfyui.add_subparsers(dest="comfyui_cmd", required=True)
    comfyui_install = comfyui_sub.add_parser("install", help="write PATH/custom_nodes/sage-co/__init__.py")
    comfyui_install.add_argument("path", metavar="PATH", help="the ComfyUI folder (the one holding custom_nodes/)")
    comfyui_install.add_argument("--replace", "--force", dest="replace", action="store_true",
                                 help="replace an existing custom_nodes/sage-co/__init__.py with other content (saved "
                                      "first as __init__.py.bak)")
    comfyui_install.set_defaults(func=cmd_comfyui_install)
    tune = sub.add_parser("tune", help="time the shipped attention schedules and store the fastest per device "
                                       "(on the emulator: check them, store nothing)")
    tune.add_argument("--device", type=int, default=None, help="only this gfx1201 (HIP index; default: every one)")
    tune.add_argument("--backend", dest="tune_backend", choices=BACKENDS + tuple(ALIASES), default=None,
                      help="gpu (time on a gfx1201) or emu (check on the CPU emulator); default: gpu when a gfx1201 "
                           "is visible, else emu")
    tune.set_defaults(func=cmd_tune)
    run = sub.add_parser("run", help="run one attention and report accuracy (the default command)")
    _add_run_options(run)
    run.set_defaults(func=cmd_run)
    from . import selftest
    selftest.register(sub)
    args = ap.parse_args(argv)
    given = sorted(name for name in RUN_DEFAULTS if hasattr(args, name))
    if args.cmd not in (None, "run") and given:
        flags = ", ".join(("-" if len(n) == 1 else "--") + n.replace("_", "-") for n in given)
        ap.error(f"{flags}: option(s) of `run`, not of `{args.cmd}`")
    for name, value in RUN_DEFAULTS.items():
        if not hasattr(args, name):
            setattr(args, name, value)
    if getattr(args, "func", None) is None:
        args.func = cmd_run
    return args


_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO}


def _silence_stdout() -> None:
    """After stdout failed (closed pipe, full disk) point it at /dev/null, so the interpreter's final flush
    does not print a second error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _fail(message: str, code: int) -> int:
    try:
        print(f"sage-co: {message}", file=sys.stderr)
    except OSError:
        pass
    return code


def main(argv=None) -> int:
    args = parse_args(argv)   # argparse itself exits 2 with a usage line on a bad option
    from .codeobj import CodeObjectError
    from .manifest import ManifestError
    try:
        code = args.func(args)
        sys.stdout.flush()
        return code
    except CliError as exc:
        return _fail(str(exc), exc.code)
    except BrokenPipeError:
        _silence_stdout()
        return _fail("output closed before everything was written (broken pipe)", 1)
    except (ManifestError, CodeObjectError) as exc:
        return _fail(f"the shipped code objects are unusable: {exc}", 1)
    except MemoryError:
        return _fail("out of memory; use a smaller -S, -H or -B", 1)
    except (ValueError, TypeError, LookupError) as exc:   # the API's argument errors name the argument
        return _fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, 2)
    except OSError as exc:
        if exc.errno in _OUTPUT_ERRNOS:                   # writing the output: full disk, quota, I/O error
            _silence_stdout()
            return _fail(f"cannot write the output ({exc.strerror or exc})", 1)
        return _fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, 1)   # e.g. hsaco/ missing
    except RuntimeError as exc:                           # torch's allocation failures, emulator findings
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "alloc" in text.lower() or "memory" in text.lower():
            return _fail(f"out of memory ({text}); use a smaller -S, -H or -B", 1)
        return _fail(f"{type(exc).__name__}: {text}", 1)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)


if __name__ == "__main__":
    sys.exit(main())
