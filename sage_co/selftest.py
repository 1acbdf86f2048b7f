"""`sage-co selftest`: the first thing to run on a Radeon AI PRO R9700 (gfx1201), and what to attach to a bug report.

    sage-co selftest [--out DIR] [--quick] [--device N] [--perf]

1. Environment: Python, torch and its HIP build, the GPUs torch sees and their arch, hip-python's version, the
   HIP runtime file hip-python is bound to (the one torch loaded: sage_co/backends/hip_runtime.py), and the sha256
   of every shipped code object against hsaco/manifest.json.
2. Emulator half (always): prepare and attention on the CPU emulator for small shapes; prepare is compared bit for
   bit with sage_co.reference.sage_prepare, attention with the arithmetic model (rel L2 bound) and with FP32
   attention (the accuracy contract, sage_co.accuracy).
3. GPU half (with a gfx1201): the same small cases on the GPU must equal the emulator bit for bit (every prepared
   field, out and LSE); large shapes must meet the accuracy contract against FP32; sage-co is timed with HIP
   events (torch.cuda.Event) against BF16 SDPA.
4. With --perf, the microbenchmarks of asm_src/gfx1201_microbench.s (sage_co/selftest_perf.py): timed with HIP events
   on the first gfx1201, their derived parameters in the report's `perf` section (what
   `python tools/perf_model.py --refit` reads); without a GPU run on the emulator, results checked, no time.
Without a gfx1201 it says so plainly and runs the emulator half. The report goes to DIR/selftest.md and
DIR/selftest.json; the exit status is 1 when any check failed.
"""
from __future__ import annotations

import hashlib
import json
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

SMALL_SHAPES = ((1, 1, 1), (1, 33, 2), (2, 100, 3), (1, 257, 2))       # (B, S, H): bit for bit vs the emulator
LARGE_SHAPES = ((1, 4096, 8), (1, 16384, 2))                           # accuracy contract vs FP32 on the GPU
TIMING_SHAPES = ((1, 4096, 24), (1, 16384, 24))                        # HIP-event timing vs BF16 SDPA
QUICK_SMALL, QUICK_LARGE, QUICK_TIMING = SMALL_SHAPES[1:2], LARGE_SHAPES[:1], TIMING_SHAPES[:1]
PREPARE_CONFIGS = ("plain", "smooth_k", "norm+rope64", "smooth_v", "pv_fp16")
MODEL_REL_L2 = 2e-3   # kernel vs arithmetic model (tests/kernels/test_attention_asm_equals_hip.py states the same bound
                      # and why)
PREPARED_FIELDS = ("q_int8", "q_scale", "k_int8", "k_scale", "k_mean", "v_t", "v_scale")


@dataclass
class Check:
    name: str
    status: str          # "pass", "fail" or "info"
    detail: str = ""


@dataclass
class Report:
    environment: dict = field(default_factory=dict)
    gpu: str = ""                                   # what ran on the GPU, or why nothing did
    checks: list[Check] = field(default_factory=list)
    timings: list[dict] = field(default_factory=list)
    perf: dict = field(default_factory=dict)         # --perf: the microbenchmarks (sage_co/selftest_perf.py)

    def add(self, name: str, ok: bool | None, detail: str = "") -> bool:
        self.checks.append(Check(name, "info" if ok is None else "pass" if ok else "fail", detail))
        return bool(ok)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    def to_json(self) -> str:
        return json.dumps(dict(environment=self.environment, gpu=self.gpu, checks=[asdict(c) for c in self.checks],
                               timings=self.timings, perf=self.perf, failed=len(self.failed)), indent=2, default=str)

    def to_markdown(self) -> str:
        lines = ["# sage-co selftest", "", f"**GPU:** {self.gpu}", "",
                 f"**Result:** {'PASS' if not self.failed else f'FAIL ({len(self.failed)} checks)'}", "",
                 "## Environment", "", "| item | value |", "|---|---|"]
        lines += [f"| {k} | {str(v).replace('|', '/')} |" for k, v in self.environment.items()]
        lines += ["", "## Checks", "", "| check | status | detail |", "|---|---|---|"]
        lines += [f"| {c.name} | {c.status} | {c.detail.replace('|', '/')} |" for c in self.checks]
        if self.timings:
            lines += ["", "## Timings (HIP events, median of rounds)", "", "| shape (B, S, H) | provider | ms | TFLOPS |",
                      "|---|---|---|---|"]
            lines += [f"| {t['shape']} | {t['provider']} | {t['ms']:.3f} | {t['tflops']:.1f} |" for t in self.timings]
        from . import selftest_perf
        lines += selftest_perf.markdown(self.perf)
        return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ environment
def gfx1201_devices() -> tuple[list[int], str]:
    """(indices of gfx1201 devices torch sees, why there are none)."""
    import torch

    from .backends.base import device_arch
    if getattr(torch.version, "hip", None) is None:
        return [], f"this torch ({torch.__version__}) is not a ROCm build (torch.version.hip is None)"
    if not torch.cuda.is_available():
        return [], "torch sees no HIP device (torch.cuda.is_available() is False)"
    found = [i for i in range(torch.cuda.device_count()) if device_arch(torch.device("cuda", i)) == "gfx1201"]
    archs = [device_arch(torch.device("cuda", i)) for i in range(torch.cuda.device_count())]
    return found, "" if found else f"no gfx1201 among the HIP devices torch sees ({archs})"


def environment(report: Report) -> list[int]:
    import torch

    from . import __version__, registry
    from .backends import hip_runtime
    env = report.environment
    env.update(sage_co=__version__, python=sys.version.split()[0], platform=platform.platform(),
               torch=torch.__version__, torch_hip=getattr(torch.version, "hip", None),
               hip_python=hip_runtime.hip_python_version() or "not installed")
    devices, why = gfx1201_devices()
    if torch.cuda.is_available():
        env["devices"] = "; ".join(f"{i}: {torch.cuda.get_device_name(i)} "
                                   f"({torch.cuda.get_device_properties(i).gcnArchName})"
                                   for i in range(torch.cuda.device_count()))
    report.add("torch is a ROCm build", getattr(torch.version, "hip", None) is not None if devices else None,
               f"torch.version.hip = {getattr(torch.version, 'hip', None)}")
    report.add("a gfx1201 is visible", True if devices else None, f"devices {devices}" if devices else why)
    for name, co in sorted(registry.manifest()["code_objects"].items()):
        path = registry.hsaco_dir() / co["file"]
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
        report.add(f"code object {co['file']} sha256", digest == co["sha256"], digest)
    if devices:
        try:
            from .launch import get_backend
            be = get_backend("gpu")
            env["hip_runtime"] = be.runtime.path
            report.add("hip-python bound to torch's HIP runtime", True, be.runtime.path)
        except Exception as exc:   # the report must still be written: the failure is the finding
            report.add("hip-python bound to torch's HIP runtime", False, f"{type(exc).__name__}: {exc}")
            return []
    else:
        mapped = hip_runtime.mapped_runtimes() if sys.platform.startswith("linux") else []
        env["hip_runtime"] = ", ".join(f.path for f in mapped) or "none loaded"
    return devices


# ------------------------------------------------------------------------------------------ cases
PREDICT_KW = {"cdf_threshold": 0.9, "simthreshd": -1.0}   # the predictor check (docs/numerics.md §Predictor)
# The predictor check's own size: 5 x 5 tiles (S not a multiple of 64) whatever the small shape is; at one tile
# (S <= 64) every mask is all ones and the check would prove nothing. Its inputs make the mask non-trivial.
PREDICT_S = 300

def inputs(B, S, H, config: str, device="cpu", seed=0):
    import torch
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, S, H, 128, generator=g).to(torch.bfloat16) for _ in range(3))
    kw: dict = {}
    if config in ("smooth_k", "norm+rope64"):
        kw["smooth_k"] = True
    if config == "smooth_v":
        kw["smooth_v"] = True
    if config == "pv_fp16":
        kw["pv_dtype"] = "fp16"
    if config == "norm+rope64":
        w = [(1 + 0.1 * torch.randn(128, generator=g)).to(torch.bfloat16) for _ in range(2)]
        ang = torch.arange(S)[:, None] * torch.linspace(0.01, 1, 64)[None]
        kw.update(q_norm_weight=w[0], k_norm_weight=w[1], cos=ang.cos().to(torch.bfloat16),
                  sin=ang.sin().to(torch.bfloat16), rope_dim=64)
    move = (lambda t: t.to(device)) if device != "cpu" else (lambda t: t)
    return tuple(map(move, (q, k, v))), {n: move(t) if isinstance(t, torch.Tensor) else t for n, t in kw.items()}


def predict_inputs(B, H, device="cpu", seed=0):
    """q, k bf16 [B, PREDICT_S, H, 128] with 64-token locality (each tile's tokens near one random feature, the
    same feature in q and k): the predicted mask keeps the diagonal and drops most other tiles (0 < density < 1)."""
    import torch
    from .masks import BLOCK_Q
    g = torch.Generator().manual_seed(seed)
    feat = torch.randn(B, -(-PREDICT_S // BLOCK_Q), H, 128, generator=g).repeat_interleave(BLOCK_Q, 1)[:, :PREDICT_S]
    q, k = (feat + 0.5 * torch.randn(B, PREDICT_S, H, 128, generator=g) for _ in range(2))
    return q.to(torch.bfloat16).to(device), k.to(torch.bfloat16).to(device)


def same_bits(a, b) -> bool:
    import torch
    a, b = a.cpu(), b.cpu()
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32}.get(a.element_size())
    return torch.equal(a.view(view), b.view(view)) if view is not None else torch.equal(a, b)


def kernels() -> list[str]:
    """The shipped attention kernels (\"asm\", \"hip\"): each one is run and checked."""
    from . import registry
    return sorted({k.kernel for k in registry.kernels() if k.op == "sage_attention_fwd"})


def rel_l2(a, b) -> float:
    a, b = a.float().cpu(), b.float().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def emulator_case(report: Report, B, S, H, config: str) -> dict:
    """Prepare and every attention kernel on the emulator; checked against the reference. Returns the results
    (the GPU half compares with them)."""
    from . import accuracy, api, reference
    (q, k, v), kw = inputs(B, S, H, config)
    tag = f"emu B={B} S={S} H={H} {config}"
    prepared = api.sage_prepare(q, k, v, backend="emu", **kw)
    ref = reference.sage_prepare(q, k, v, **kw)
    # with smooth_k, k_mean (and K quantized after subtracting it) follow a float summation whose order the
    # reference does not fix: bit for bit only without it (tests/kernels/test_prepare_vs_reference.py states the k_mean
    # bound)
    # with smooth_v the same holds for v_mean: v_t / v_scale are compared given the kernel's v_mean instead
    exact_k = config in ("plain", "smooth_v", "pv_fp16")
    bitwise = ["q_int8", "q_scale"] + (["v_t", "v_scale"] if config != "smooth_v" else []) + \
        (["k_int8", "k_scale", "k_mean"] if exact_k else [])
    differ = [n for n in bitwise if not same_bits(getattr(prepared, n), getattr(ref, n))]
    if config == "smooth_v":
        bitwise += ["v_t", "v_scale (given v_mean)"]
        v_t, v_scale = reference.quantize_v(v, prepared.v_mean)
        differ += [n for n, a, b in (("v_t", prepared.v_t, v_t), ("v_scale", prepared.v_scale, v_scale))
                   if not same_bits(a, b)]
    report.add(f"{tag}: prepare == reference (bit for bit, {', '.join(bitwise)})", not differ,
               f"differ: {differ}" if differ else "")
    out = {"prepared": prepared, "attention": {}}
    # FP32 attention of what the kernels attend over: q and k after the optional RMSNorm + RoPE
    qn = reference.norm_rope(q, kw.get("q_norm_weight"), 1e-6, kw.get("cos"), kw.get("sin"), kw.get("rope_dim"))
    kn = reference.norm_rope(k, kw.get("k_norm_weight"), 1e-6, kw.get("cos"), kw.get("sin"), kw.get("rope_dim"))
    fp32 = reference.attention_fp32(qn.to(q.dtype), kn.to(k.dtype), v)
    model = reference.sage_attention_model(prepared)
    for kernel in kernels():
        o, lse = api.sage_attention_fwd(prepared, backend="emu", kernel=kernel, return_lse=True)
        out["attention"][kernel] = (o, lse)
        r = rel_l2(o, model)
        report.add(f"{tag}: attention[{kernel}] vs arithmetic model", r <= MODEL_REL_L2,
                   f"rel L2 {r:.2e} (bound {MODEL_REL_L2:g})")
        if S >= 32:    # the contract's statistics need more than a handful of rows
            m = accuracy.metrics(o, fp32)
            report.add(f"{tag}: attention[{kernel}] accuracy contract vs FP32", accuracy.within_contract(m),
                       f"cosine {m['cosine']:.5f}, outside band {100 * m['outside_band']:.3f} %")
    if config == "plain":   # the block-mask predictor (simthreshd -1: every block ranked, a non-trivial mask)
        from .sparse import predict_block_mask
        pq, pk = predict_inputs(B, H)
        m = predict_block_mask(pq, pk, **PREDICT_KW, backend="emu")
        density = m.float().mean().item()
        ok = same_bits(m, predict_block_mask(pq, pk, **PREDICT_KW, backend="torch")) and 0 < density < 1
        report.add(f"{tag}: predictor mask == torch spec (bit for bit, S={PREDICT_S}, non-trivial mask)", ok,
                   f"density {density:.3f}")
        out["predict"] = m
    out["inputs"] = ((q, k, v), kw)
    return out


def gpu_case(report: Report, device: int, B, S, H, config: str, emu: dict) -> None:
    from . import api
    (q, k, v), kw = inputs(B, S, H, config, device=f"cuda:{device}")
    tag = f"gpu{device} B={B} S={S} H={H} {config}"
    prepared = api.sage_prepare(q, k, v, backend="gpu", **kw)
    fields = PREPARED_FIELDS + (("v_mean",) if prepared.v_mean is not None else ())
    differ = [n for n in fields if not same_bits(getattr(prepared, n), getattr(emu["prepared"], n))]
    report.add(f"{tag}: prepare == emulator (bit for bit, all fields)", not differ,
               f"differ: {differ}" if differ else "")
    if "predict" in emu:
        from .sparse import predict_block_mask
        ok = same_bits(predict_block_mask(*predict_inputs(B, H, device=f"cuda:{device}"), **PREDICT_KW, backend="gpu"),
                       emu["predict"])
        report.add(f"{tag}: predictor mask == emulator (bit for bit)", ok)
    for kernel, (eo, el) in emu["attention"].items():
        o, lse = api.sage_attention_fwd(prepared, backend="gpu", kernel=kernel, return_lse=True)
        ok = same_bits(o, eo) and same_bits(lse, el)
        report.add(f"{tag}: attention[{kernel}] == emulator (out and LSE, bit for bit)", ok,
                   "" if ok else f"out rel L2 {rel_l2(o, eo):.2e}, lse rel L2 {rel_l2(lse, el):.2e}")


def gpu_contract(report: Report, device: int, B, S, H) -> None:
    from . import accuracy, api, reference
    (q, k, v), _ = inputs(B, S, H, "plain", device=f"cuda:{device}")
    fp32 = reference.attention_fp32(q, k, v)
    for kernel in kernels():
        o = api.sage_attention(q, k, v, kernel=kernel, backend="gpu")
        m = accuracy.metrics(o.cpu(), fp32.cpu())
        report.add(f"gpu{device} B={B} S={S} H={H}: attention[{kernel}] accuracy contract vs FP32",
                   accuracy.within_contract(m), f"cosine {m['cosine']:.5f}, outside band {100 * m['outside_band']:.3f} %")




def gpu_timing(report: Report, device: int, B, S, H) -> None:
    import torch

    from . import api
    from .selftest_perf import time_ms   # the one HIP-event timer (the microbenchmarks use it too)
    (q, k, v), _ = inputs(B, S, H, "plain", device=f"cuda:{device}")
    prepared = api.sage_prepare(q, k, v, backend="gpu")
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    providers = {}
    for kernel in kernels():
        providers[f"sage[{kernel}] prepare + attention"] = lambda kernel=kernel: api.sage_attention(
            q, k, v, kernel=kernel, backend="gpu")
        providers[f"sage[{kernel}] attention kernel"] = lambda kernel=kernel: api.sage_attention_fwd(
            prepared, kernel=kernel, backend="gpu")
    providers["BF16 SDPA"] = lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt)
    flops = 4 * B * H * S * S * 128
    for name, fn in providers.items():
        ms = time_ms(fn, device)
        report.timings.append(dict(shape=(B, S, H), provider=name, ms=ms, tflops=flops / (ms * 1e-3) / 1e12,
                                   device=device))


# ------------------------------------------------------------------------------------------ driver
def run(out_dir: Path, *, quick: bool = False, device: int | None = None, small=None, large=None, timing=None,
        configs=PREPARE_CONFIGS, perf: bool = False, echo=print) -> Report:
    small = small if small is not None else (QUICK_SMALL if quick else SMALL_SHAPES)
    large = large if large is not None else (QUICK_LARGE if quick else LARGE_SHAPES)
    timing = timing if timing is not None else (QUICK_TIMING if quick else TIMING_SHAPES)
    report = Report()
    t0 = time.perf_counter()
    devices = environment(report)
    if device is not None:
        if device not in devices:
            report.add(f"--device {device} is a gfx1201", False, f"gfx1201 devices: {devices}")
        devices = [device] if device in devices else []
    if devices:
        report.gpu = f"gfx1201 device(s) {devices}: GPU half and emulator half ran"
    else:
        why = next((c.detail for c in report.checks if c.name == "a gfx1201 is visible"), "")
        report.gpu = (f"NO gfx1201 GPU here ({why}). Only the emulator half ran: the shipped kernels on the CPU "
                      "emulator against the reference. Run this on an R9700 for the GPU half.")
    echo(report.gpu)
    for B, S, H in small:
        for config in configs:
            echo(f"emulator: B={B} S={S} H={H} {config}")
            emu = emulator_case(report, B, S, H, config)
            for d in devices:
                echo(f"gpu {d}: B={B} S={S} H={H} {config}")
                gpu_case(report, d, B, S, H, config, emu)
    for d in devices[:1]:
        for B, S, H in large:
            echo(f"gpu {d}: accuracy contract B={B} S={S} H={H}")
            gpu_contract(report, d, B, S, H)
        for B, S, H in timing:
            echo(f"gpu {d}: timing B={B} S={S} H={H}")
            gpu_timing(report, d, B, S, H)
    if perf:   # the microbenchmarks: timed on the first gfx1201, else checked on the emulator
        from . import selftest_perf
        selftest_perf.run(report, devices[:1], echo)
    report.environment["selftest_seconds"] = round(time.perf_counter() - t0, 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "selftest.json").write_text(report.to_json())
    (out_dir / "selftest.md").write_text(report.to_markdown())
    return report


def check_out_dir(out: Path) -> Path:
    """--out is a directory this process can write (created if missing): checked before any check runs, so a bad
    path fails at once and names --out (it used to fail after every check, as `[Errno 17] File exists`)."""
    import os
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        what = "exists and is not a directory" if out.exists() and not out.is_dir() else (exc.strerror or str(exc))
        raise ValueError(f"--out {str(out)!r}: cannot use it as the report directory ({what})") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise ValueError(f"--out {str(out)!r}: the report directory is not writable")
    return out


def command(args) -> int:
    out = check_out_dir(Path(args.out))
    report = run(out, quick=args.quick, device=args.device, perf=args.perf)
    print(report.to_markdown())
    print(f"report written to {out / 'selftest.md'} and {out / 'selftest.json'} (attach both to a bug report)")
    return 1 if report.failed else 0


def register(subparsers) -> None:
    """The `selftest` subcommand (sage_co/cli.py calls this)."""
    p = subparsers.add_parser("selftest", help="check this machine: environment, GPU vs emulator bit for bit, "
                                                "accuracy, timing; writes a report (run this first on an R9700)")
    p.add_argument("--out", default="sage-co-selftest", help="directory for selftest.md and selftest.json")
    p.add_argument("--quick", action="store_true", help="one small shape, one large shape, one timing shape")
    p.add_argument("--device", type=int, default=None, help="only this gfx1201 device index (default: all)")
    p.add_argument("--perf", action="store_true", help="also the microbenchmarks that pin the performance model "
                                                      "(timed on a gfx1201; checked on the emulator without one)")
    p.set_defaults(func=command)
