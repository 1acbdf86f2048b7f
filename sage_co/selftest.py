"""`sage-co selftest`: the first thing to run on a Radeon AI PRO R9700 (gfx1201), and what to attach to a bug report.

    sage-co selftest [--out DIR] [--quick] [--device N] [--perf] [--rehearse]

1. Environment: Python, torch and its HIP build, the GPUs torch sees and their arch, hip-python's version, the
   HIP runtime file hip-python is bound to (the one torch loaded: sage_co/backends/hip_runtime.py), and the sha256
   of every shipped code object against hsaco/manifest.json.
2. Emulator half (always): prepare and attention on the CPU emulator for small shapes; prepare is compared bit for
   bit with sage_co.reference.sage_prepare, attention with the arithmetic model (rel L2 bound) and with FP32
   attention (the accuracy contract, sage_co.accuracy).
3. GPU half (with a gfx1201), in a child process: the same small cases on the GPU; prepare and the predictor must
   equal the emulator bit for bit (no TRANS op, no order freedom there); attention out and LSE must lie within the
   bound that +-1 ulp TRANS results and the free accumulation orders allow (docs/numerics.md §Hardware tolerance;
   attention_bound), and the report also gives the fraction of elements bitwise equal, so a real difference still
   shows; large shapes must meet the accuracy contract against FP32; sage-co is timed with HIP events
   (torch.cuda.Event) against BF16 SDPA on a chosen, named backend (flash, else memory-efficient, else math; an
   out-of-memory baseline is recorded, not fatal).
4. With --perf, the microbenchmarks of asm_src/gfx1201_microbench.s (sage_co/selftest_perf.py): timed with HIP events
   on the first gfx1201, their derived parameters in the report's `perf` section (what
   `python tools/perf_model.py --refit` reads); without a GPU run on the emulator, results checked, no time. Then
   the attention schedules as `sage-co tune` runs them (sage_co/tuning_run.py): timed on the first gfx1201 and the
   choice stored for it (perf.schedules); on the emulator each checked bit for bit, nothing stored.
Without a gfx1201 it says so plainly and runs the emulator half. The report goes to DIR/selftest.md and
DIR/selftest.json, rewritten after every check; every check is isolated (an exception fails that check, named,
and the next one runs). A kernel fault (memory fault, illegal instruction) aborts the process that launched it
under ROCm's defaults, so the GPU half runs in a child process: when it dies, the report already holds every check
before, and names the one that was running. The exit status is 1 when any check failed.

--rehearse (docs/numerics.md §Hardware tolerance): the GPU half on the emulator made hardware-like (v_exp/v_log/
v_rcp_f32 results moved by +-1 ulp, deterministically; f16 WMMA summing the products before adding C) with faults
injected -- a HIP error in one check, an out-of-memory SDPA baseline, a crash of the child -- so the whole
first-contact path runs here: the perturbed comparisons must pass, every fault must be named, the exit status is 1.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .abi import P_OFF

SMALL_SHAPES = ((1, 1, 1), (1, 33, 2), (2, 100, 3), (1, 257, 2))       # (B, S, H): bit for bit vs the emulator
LARGE_SHAPES = ((1, 4096, 8), (1, 16384, 2))                           # accuracy contract vs FP32 on the GPU
TIMING_SHAPES = ((1, 4096, 24), (1, 16384, 24))                        # HIP-event timing vs BF16 SDPA
QUICK_SMALL, QUICK_LARGE, QUICK_TIMING = SMALL_SHAPES[1:2], LARGE_SHAPES[:1], TIMING_SHAPES[:1]
REHEARSAL_SMALL, REHEARSAL_CONFIGS = ((1, 33, 2),), ("plain", "pv_fp16")   # cheap on the emulator
REHEARSAL_TIMING = ((1, 33, 2),)
REPORT_FILES = ("selftest.json", "selftest.md")
EMU_RESULTS = "selftest.emu.pt"            # the emulator half's results, for the GPU child to compare with
CHILD_SPEC = "selftest.child.json"
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
    running: str = ""                               # the check under way (a report left by a crash names it)
    rehearsal: dict = field(default_factory=dict)   # --rehearse: what was perturbed and which faults were injected
    out_dir: Path | None = field(default=None, repr=False, compare=False)

    def add(self, name: str, ok: bool | None, detail: str = "") -> bool:
        self.checks.append(Check(name, "info" if ok is None else "pass" if ok else "fail", detail))
        self.save()
        return bool(ok)

    def start(self, name: str) -> None:
        """Mark `name` as running (saved: a process that dies now leaves a report naming it)."""
        self.running = name
        self.save()

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    def save(self) -> None:
        """Rewrite DIR/selftest.json and selftest.md (each through a temporary file and a rename, so a crash never
        leaves half a file)."""
        if self.out_dir is None:
            return
        for name, text in zip(REPORT_FILES, (self.to_json(), self.to_markdown())):
            tmp = self.out_dir / f".{name}.tmp"
            tmp.write_text(text)
            os.replace(tmp, self.out_dir / name)

    @classmethod
    def load(cls, out_dir: Path) -> "Report":
        data = json.loads((out_dir / REPORT_FILES[0]).read_text())
        return cls(environment=data["environment"], gpu=data["gpu"], checks=[Check(**c) for c in data["checks"]],
                   timings=data["timings"], perf=data["perf"], running=data.get("running", ""),
                   rehearsal=data.get("rehearsal", {}), out_dir=out_dir)

    def to_json(self) -> str:
        return json.dumps(dict(environment=self.environment, gpu=self.gpu, checks=[asdict(c) for c in self.checks],
                               timings=self.timings, perf=self.perf, failed=len(self.failed), running=self.running,
                               rehearsal=self.rehearsal), indent=2, default=str)

    def to_markdown(self) -> str:
        lines = ["# sage-co selftest", "", f"**GPU:** {self.gpu}", "",
                 f"**Result:** {'PASS' if not self.failed else f'FAIL ({len(self.failed)} checks)'}", ""]
        if self.running:
            lines += [f"**Running when this report was written:** {self.running}", ""]
        if self.rehearsal:
            lines += ["## Rehearsal (`--rehearse`: the GPU half on the emulator made hardware-like, faults injected)",
                      "", f"**Perturbed:** {self.rehearsal.get('perturbed', '')}", "",
                      "| injected fault | where it shows in this report |", "|---|---|"]
            lines += [f"| {f} | {w} |" for f, w in self.rehearsal.get("faults", {}).items()]
            lines.append("")
        lines += ["## Environment", "", "| item | value |", "|---|---|"]
        lines += [f"| {k} | {str(v).replace('|', '/')} |" for k, v in self.environment.items()]
        lines += ["", "## Checks", "", "| check | status | detail |", "|---|---|---|"]
        lines += [f"| {c.name} | {c.status} | {c.detail.replace('|', '/')} |" for c in self.checks]
        if self.timings:
            how = ("REHEARSAL: host wall time of the emulator, not a GPU time" if self.rehearsal
                   else "HIP events, median of rounds")
            lines += ["", f"## Timings ({how})", "", "| shape (B, S, H) | provider | ms | TFLOPS |",
                      "|---|---|---|---|"]
            lines += [f"| {t['shape']} | {t['provider']} | {t['ms']:.3f} | {t['tflops']:.1f} |" if "ms" in t else
                      f"| {t['shape']} | {t['provider']} | {t['error']} | - |" for t in self.timings]
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
               hip_python=hip_runtime.hip_python_version() or "not installed",
               gpu_binding=__import__("sage_co.backends.hip_bindings", fromlist=["describe"]).describe())
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
            report.add(f"{be.binding.name} bound to torch's HIP runtime", True, be.runtime.path)
            version = int(be._call("hipRuntimeGetVersion"))
            env["hip_runtime_version"] = version
            if be.binding.name == "hip-python":   # the ctypes binding has no generated series to match
                problem = hip_runtime.hip_python_series_problem(hip_runtime.hip_python_version(), version)
                report.add("hip-python series matches the HIP runtime (hipRuntimeGetVersion)", not problem,
                           problem or f"hip-python {env['hip_python']}, runtime {version}")
            from . import tuning
            env["tuned_schedules"] = "; ".join(tuning.describe_choices())
        except Exception as exc:   # the report must still be written: the failure is the finding
            report.add("the gpu backend bound to torch's HIP runtime", False, f"{type(exc).__name__}: {exc}")
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


# ------------------------------------------------------------------------------------------ hardware tolerance
U_P = {"fp8": 2.0 ** -3, "fp16": 2.0 ** -10}         # one ulp of P's format, relative (normal values)
ULP_SUB = {"fp8": 2.0 ** -9, "fp16": 2.0 ** -24}     # one ulp of P's format, absolute (subnormal values)
OUT_ULP = {"bf16": 2.0 ** -7, "fp16": 2.0 ** -10}     # one ulp of the output format, relative


def attention_bound(eo, el, v, pv_dtype: str = "fp8", v_mean=None):
    """(bound on |out_gpu - out_emu| per element, bound on |lse_gpu - lse_emu| per row) that +-1 ulp TRANS results
    (v_exp_f32 / v_log_f32) and the free accumulation orders of the row sum and of P.V allow, given the emulator's
    out eo [B, S_q, H, D], lse el [B, H, S_q] and V [B, S_kv, H, D] (docs/numerics.md §Hardware tolerance states
    the derivation). K keys, T = ceil(K / 64) key tiles:
        eps_l = (K + 2T) 2^-23                                     row sum l: p, alpha and the order
        lse:  eps_l + 2^-22 (3 Lg + 2 P_OFF) + 2^-21 |lse|         Lg = 8.05 + log2 K >= |log2 l|
        out:  (u_P + eps_l) A_d + K ulp_sub |v|max_d / 2^P_OFF + |out| (eps_l + 2^-21 + u_out)
              A_d = (1 + 2^-3)(1 + 2^-4) max_j |v_jd| (+ |v_mean_d|)  u_P: one ulp of P's format (a +-1 ulp p may
              round to the neighbouring fp8 / fp16 value), u_out: one ulp of the output (its rounding may flip)."""
    import torch
    K = v.shape[1]
    T = -(-K // 64)
    eps_l = (K + 2 * T) * 2.0 ** -23
    lg = 8.05 + math.log2(K)
    lse = el.float().cpu()
    b_lse = eps_l + 2.0 ** -22 * (3 * lg + 2 * P_OFF) + 2.0 ** -21 * lse.abs()
    vmax = v.float().cpu().abs().amax(dim=1, keepdim=True)                  # [B, 1, H, D]
    if v_mean is not None:
        vmax = vmax + v_mean.float().cpu().abs().reshape(v.shape[0], 1, v.shape[2], -1)[..., :v.shape[3]]
    a = (1 + 2.0 ** -3) * (1 + 2.0 ** -4) * vmax
    o = eo.float().cpu().abs()
    out_ulp = OUT_ULP.get(str(eo.dtype).split(".")[-1].replace("bfloat16", "bf16").replace("float16", "fp16"),
                          2.0 ** -23)
    b_out = (U_P[pv_dtype] + eps_l) * a + K * ULP_SUB[pv_dtype] * vmax / 2 ** P_OFF + o * (eps_l + 2.0 ** -21 +
                                                                                       out_ulp)
    return b_out, torch.where(torch.isfinite(b_lse), b_lse, torch.zeros_like(b_lse))


def within_bound(got, want, bound) -> tuple[bool, float, float]:
    """(every element within its bound, the fraction bitwise equal, max |difference| / bound)."""
    import torch
    g, w = got.cpu(), want.cpu()
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[g.element_size()]
    equal = (g.view(view) == w.view(view))
    diff = (g.float() - w.float()).abs()
    both_nan = g.float().isnan() & w.float().isnan()
    diff = torch.where(both_nan | equal, torch.zeros_like(diff), diff)
    ratio = float((diff / bound.clamp_min(1e-30)).max()) if diff.numel() else 0.0
    return bool((diff <= bound).all()), float(equal.float().mean()), ratio


def gpu_case(report: Report, device: str, backend: str, B, S, H, config: str, emu: dict, inject=None) -> None:
    """The small case on `device` with `backend` ("gpu"; the rehearsal: "emu" made hardware-like) against the
    emulator half's results `emu`: prepare and the predictor bit for bit, attention within attention_bound. Each
    comparison is a check of its own (guarded: an exception fails it, named, and the next one runs)."""
    from . import api
    (q, k, v), kw = inputs(B, S, H, config, device=device)
    tag = f"{device} B={B} S={S} H={H} {config}"
    inject = inject or (lambda name: None)
    state = {}

    def prepare():
        inject("prepare")
        state["prepared"] = prepared = api.sage_prepare(q, k, v, backend=backend, **kw)
        fields = PREPARED_FIELDS + (("v_mean",) if prepared.v_mean is not None else ())
        differ = [n for n in fields if not same_bits(getattr(prepared, n), getattr(emu["prepared"], n))]
        report.add(f"{tag}: prepare == emulator (bit for bit, all fields)", not differ,
                   f"differ: {differ}" if differ else "")
    guarded(report, f"{tag}: prepare == emulator (bit for bit, all fields)", prepare)
    if "predict" in emu:
        def predict():
            from .sparse import predict_block_mask
            got = predict_block_mask(*predict_inputs(B, H, device=device), **PREDICT_KW, backend=backend)
            report.add(f"{tag}: predictor mask == emulator (bit for bit)", same_bits(got, emu["predict"]))
        guarded(report, f"{tag}: predictor mask == emulator (bit for bit)", predict)
    if "prepared" not in state:
        return
    pv = "fp16" if config == "pv_fp16" else "fp8"
    for kernel, (eo, el) in emu["attention"].items():
        name = f"{tag}: attention[{kernel}] out and LSE within the hardware tolerance of the emulator's"

        def attention(kernel=kernel, eo=eo, el=el, name=name):
            inject(f"attention[{kernel}]")
            o, lse = api.sage_attention_fwd(state["prepared"], backend=backend, kernel=kernel, return_lse=True)
            b_out, b_lse = attention_bound(eo, el, v, pv, state["prepared"].v_mean)
            ok_o, eq_o, r_o = within_bound(o, eo, b_out)
            ok_l, eq_l, r_l = within_bound(lse, el, b_lse)
            report.add(name, ok_o and ok_l,
                       f"bitwise equal: out {100 * eq_o:.2f} %, LSE {100 * eq_l:.2f} %; max |difference| / bound: "
                       f"out {r_o:.3g}, LSE {r_l:.3g} (docs/numerics.md §Hardware tolerance)")
        guarded(report, name, attention)


def guarded(report: Report, name: str, fn, *args, **kwargs):
    """Run one check: the report marks it running (a crash leaves it named), an exception fails it with its type
    and message, and the next check runs."""
    report.start(name)
    try:
        return fn(*args, **kwargs)
    except Exception as exc:     # the report must go on: the failure is the finding
        report.add(name, False, f"{type(exc).__name__}: {exc}")
        return None
    finally:
        report.running = ""
        report.save()


def gpu_contract(report: Report, device: int, B, S, H) -> None:
    from . import accuracy, api, reference
    (q, k, v), _ = inputs(B, S, H, "plain", device=f"cuda:{device}")
    fp32 = reference.attention_fp32(q, k, v)
    for kernel in kernels():
        name = f"gpu{device} B={B} S={S} H={H}: attention[{kernel}] accuracy contract vs FP32"

        def contract(kernel=kernel, name=name):
            o = api.sage_attention(q, k, v, kernel=kernel, backend="gpu")
            m = accuracy.metrics(o.cpu(), fp32.cpu())
            report.add(name, accuracy.within_contract(m),
                       f"cosine {m['cosine']:.5f}, outside band {100 * m['outside_band']:.3f} %")
        guarded(report, name, contract)




SDPA_ORDER = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")


def sdpa_provider(qt, kt, vt):
    """(name, fn): BF16 SDPA on the first backend of SDPA_ORDER that runs these inputs (flash, else
    memory-efficient, else math, which materializes S x S scores: gigabytes at S = 16384), pinned with
    torch.nn.attention.sdpa_kernel so the timed backend is the named one."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for name in SDPA_ORDER:
        backend = getattr(SDPBackend, name)

        def fn(backend=backend):
            with sdpa_kernel([backend]):
                return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt)
        if name == "MATH":
            return name.lower(), fn
        try:
            fn()
            return name.lower().replace("_attention", ""), fn
        except RuntimeError:     # "No available kernel" for this backend on this device / shape
            continue
    raise AssertionError("unreachable")


def is_oom(exc: BaseException) -> bool:
    import torch
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def gpu_timing(report: Report, device: int | str, B, S, H, *, backend: str = "gpu", timer=None, inject=None) -> None:
    """sage-co's providers and BF16 SDPA timed at (B, S, H); each provider isolated: an error fails its own check,
    an out-of-memory baseline is recorded (the baseline's failure, not sage-co's: an info check and a timing row
    saying so). timer(fn, device) -> ms (default: HIP events, sage_co.backends.timing.time_ms)."""

    from . import api
    if timer is None:
        from .backends.timing import time_ms as timer   # the one HIP-event timer (microbenchmarks, tune too)
    dev = f"cuda:{device}" if isinstance(device, int) else device
    inject = inject or (lambda name: None)
    (q, k, v), _ = inputs(B, S, H, "plain", device=dev)
    prepared = api.sage_prepare(q, k, v, backend=backend)
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    providers = {}
    for kernel in kernels():
        providers[f"sage[{kernel}] prepare + attention"] = lambda kernel=kernel: api.sage_attention(
            q, k, v, kernel=kernel, backend=backend)
        providers[f"sage[{kernel}] attention kernel"] = lambda kernel=kernel: api.sage_attention_fwd(
            prepared, kernel=kernel, backend=backend)
    flops = 4 * B * H * S * S * 128
    tag = f"{dev} timing B={B} S={S} H={H}"
    try:
        sdpa_name, sdpa_fn = sdpa_provider(qt, kt, vt)
        providers[f"BF16 SDPA ({sdpa_name})"] = lambda: (inject("sdpa"), sdpa_fn())
    except Exception as exc:
        sdpa_name = None
        baseline_failed(report, tag, (B, S, H), "BF16 SDPA (backend not chosen)", exc)
    for name, fn in providers.items():
        report.start(f"{tag}: {name}")
        try:
            ms = timer(fn, device)
        except Exception as exc:
            if name.startswith("BF16 SDPA"):
                baseline_failed(report, tag, (B, S, H), name, exc)
            else:
                report.add(f"{tag}: {name}", False, f"{type(exc).__name__}: {exc}")
            continue
        finally:
            report.running = ""
        report.timings.append(dict(shape=(B, S, H), provider=name, ms=ms, tflops=flops / (ms * 1e-3) / 1e12,
                                   device=device))
        report.save()


def baseline_failed(report: Report, tag: str, shape, name: str, exc: BaseException) -> None:
    """The SDPA baseline could not run: recorded (out of memory: the math backend at large S needs gigabytes),
    not a failure of sage-co."""
    what = "out of memory" if is_oom(exc) else "error"
    report.timings.append(dict(shape=shape, provider=name, error=f"{what}: {type(exc).__name__}: {exc}"))
    report.add(f"{tag}: {name} baseline", None, f"not timed ({what}): {type(exc).__name__}: {exc}")


# ------------------------------------------------------------------------------------------ driver
def run(out_dir: Path, *, quick: bool = False, device: int | None = None, small=None, large=None, timing=None,
        configs=PREPARE_CONFIGS, perf: bool = False, rehearse: bool = False, echo=print) -> Report:
    small = small if small is not None else (REHEARSAL_SMALL if rehearse else QUICK_SMALL if quick else SMALL_SHAPES)
    large = large if large is not None else (QUICK_LARGE if quick else LARGE_SHAPES)
    timing = timing if timing is not None else (REHEARSAL_TIMING if rehearse else
                                                QUICK_TIMING if quick else TIMING_SHAPES)
    configs = REHEARSAL_CONFIGS if rehearse and configs is PREPARE_CONFIGS else configs
    out_dir = check_out_dir(Path(out_dir))
    report = Report(out_dir=out_dir)
    report.save()
    t0 = time.perf_counter()
    devices = guarded(report, "environment", environment, report) or []
    if device is not None:
        if device not in devices:
            report.add(f"--device {device} is a gfx1201", False, f"gfx1201 devices: {devices}")
        devices = [device] if device in devices else []
    if rehearse:
        report.gpu = ("REHEARSAL: the GPU half ran on the CPU emulator made hardware-like, with injected faults "
                      "(no GPU was used; sage-co selftest --rehearse)")
    elif devices:
        report.gpu = f"gfx1201 device(s) {devices}: GPU half (in a child process) and emulator half ran"
    else:
        why = next((c.detail for c in report.checks if c.name == "a gfx1201 is visible"), "")
        report.gpu = (f"NO gfx1201 GPU here ({why}). Only the emulator half ran: the shipped kernels on the CPU "
                      "emulator against the reference. Run this on an R9700 for the GPU half.")
    echo(report.gpu)
    report.save()
    emu = {}
    for B, S, H in small:
        for config in configs:
            echo(f"emulator: B={B} S={S} H={H} {config}")
            r = guarded(report, f"emu B={B} S={S} H={H} {config}", emulator_case, report, B, S, H, config)
            if r is not None:
                r.pop("inputs", None)
                emu[(B, S, H, config)] = r
    if devices or rehearse:
        import torch
        torch.save(emu, out_dir / EMU_RESULTS)
        spec = dict(devices=devices, large=[list(x) for x in large], timing=[list(x) for x in timing],
                    perf=perf and bool(devices), rehearse=rehearse)
        (out_dir / CHILD_SPEC).write_text(json.dumps(spec))
        report.save()
        echo("GPU half: in a child process" + (" (rehearsal)" if rehearse else ""))
        child = subprocess.run([sys.executable, "-m", "sage_co.selftest", "--child", str(out_dir)],
                               capture_output=True, text=True)
        echo(child.stdout[-4000:])
        report = Report.load(out_dir)
        if child.returncode != 0:
            import signal
            how = (f"was killed by {signal.Signals(-child.returncode).name}" if child.returncode < 0
                   else f"exited with status {child.returncode}")
            tail = " / ".join(child.stderr.strip().splitlines()[-3:])
            report.add("GPU half: the child process ended early", False,
                       f"it {how} while running '{report.running or 'nothing (between checks)'}'; stderr: {tail}")
            if report.rehearsal:
                report.rehearsal["faults"]["a crash of the child (os.abort, as ROCr aborts on a kernel fault)"] = (
                    f"check 'GPU half: the child process ended early' names '{report.running}'")
            report.running = ""
        for name in (EMU_RESULTS, CHILD_SPEC):
            (out_dir / name).unlink(missing_ok=True)
    if perf and not devices:   # the microbenchmarks and schedules on the emulator (on a gfx1201 the child runs them)
        from . import selftest_perf
        guarded(report, "microbenchmarks (emulator)", selftest_perf.run, report, [], echo)
        guarded(report, "attention schedules (emulator)", selftest_perf.schedules, report, [], echo)
    report.environment["selftest_seconds"] = round(time.perf_counter() - t0, 1)
    report.save()
    return report


def child_main(out_dir: Path) -> int:
    """The GPU half (or its rehearsal), in its own process: appends to the parent's report, rewriting it after every
    check; a kernel fault that aborts this process leaves the report naming the check that was running."""
    import torch
    report = Report.load(out_dir)
    spec = json.loads((out_dir / CHILD_SPEC).read_text())
    emu = torch.load(out_dir / EMU_RESULTS, weights_only=False)
    rehearse = spec["rehearse"]
    inject, timer = None, None
    if rehearse:
        inject, timer = rehearsal_setup(report)
        places = [("cpu", "emu")]
    else:
        places = [(f"cuda:{d}", "gpu") for d in spec["devices"]]
    for device, backend in places:
        for (B, S, H, config), r in emu.items():
            print(f"{device}: B={B} S={S} H={H} {config}", flush=True)
            gpu_case(report, device, backend, B, S, H, config, r,
                     inject=(lambda what, c=config: inject(f"{c} {what}")) if inject else None)
    for d in spec["devices"][:1]:
        for B, S, H in spec["large"]:
            guarded(report, f"gpu{d} accuracy contract B={B} S={S} H={H}", gpu_contract, report, d, B, S, H)
    timing_places = spec["devices"][:1] if not rehearse else ["cpu"]
    for d in timing_places:
        for B, S, H in spec["timing"]:
            guarded(report, f"timing B={B} S={S} H={H}", gpu_timing, report, d, B, S, H,
                    backend="emu" if rehearse else "gpu", timer=timer, inject=inject)
    if spec["perf"]:
        from . import selftest_perf
        guarded(report, "microbenchmarks", selftest_perf.run, report, spec["devices"][:1], print)
        guarded(report, "attention schedules", selftest_perf.schedules, report, spec["devices"][:1], print)
    if rehearse:       # last: a kernel fault aborts the process (ROCr's default), as it would on a GPU
        report.start("rehearsal: a kernel fault in the child (injected: os.abort)")
        os.abort()
    report.save()
    return 0


def rehearsal_setup(report: Report):
    """The hardware-like emulator and the injected faults of --rehearse; returns (inject, timer)."""
    import torch

    from .backends.hip_runtime import HipError
    from .emu import numerics
    numerics.HARDWARE_LIKE.update(trans_ulp=True, f16_wmma_two_roundings=True)
    report.rehearsal = {
        "perturbed": "v_exp_f32 / v_log_f32 / v_rcp_f32 / v_sqrt_f32 / v_rsq_f32 results +-1 ulp (deterministic: a hash of the input bits "
                     "picks +1, -1 or 0); f16 WMMA: the products' sum rounded to f32 before C is added",
        "faults": {
            "a HIP error in one check (hipErrorLaunchFailure)": "the check 'cpu ... plain: attention[hip] ...' "
                                                                 "fails with HipError",
            "out of memory in the SDPA baseline": "the timing row 'BF16 SDPA (...)' and its info check say "
                                                  "'out of memory'",
        }}
    report.save()

    def inject(what: str) -> None:
        if what == "plain attention[hip]":
            raise HipError("INJECTED (rehearsal): hipModuleLaunchKernel failed: hipErrorLaunchFailure (719)",
                           call="hipModuleLaunchKernel", code=719)
        if what == "sdpa":
            raise torch.OutOfMemoryError("INJECTED (rehearsal): HIP out of memory. Tried to allocate 26.00 GiB")

    def timer(fn, device) -> float:
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    return inject, timer


def check_out_dir(out: Path) -> Path:
    """--out is a directory this process can write (created if missing), in which the report files can be written:
    checked before any check runs, so a bad path fails at once and names --out (it used to fail after every check,
    as `[Errno 17] File exists` or `[Errno 21] Is a directory`)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        what = "exists and is not a directory" if out.exists() and not out.is_dir() else (exc.strerror or str(exc))
        raise ValueError(f"--out {str(out)!r}: cannot use it as the report directory ({what})") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise ValueError(f"--out {str(out)!r}: the report directory is not writable")
    for name in REPORT_FILES:
        if (out / name).exists() and not (out / name).is_file():
            raise ValueError(f"--out {str(out)!r}: {out / name} exists and is not a file (the report is written there)")
    return out


def command(args) -> int:
    out = check_out_dir(Path(args.out))
    report = run(out, quick=args.quick, device=args.device, perf=args.perf, rehearse=args.rehearse)
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
    p.add_argument("--rehearse", action="store_true",
                   help="rehearse first contact here: the GPU half on the emulator made hardware-like (+-1 ulp TRANS, "
                        "the other f16 WMMA order) with injected faults (HIP error, out-of-memory baseline, a crash "
                        "of the child); exits 1, the report names each fault")
    p.set_defaults(func=command)


if __name__ == "__main__":      # the GPU half's child process (run() starts it: python -m sage_co.selftest --child DIR)
    if len(sys.argv) != 3 or sys.argv[1] != "--child":
        sys.exit("usage: python -m sage_co.selftest --child DIR (started by `sage-co selftest`)")
    sys.exit(child_main(Path(sys.argv[2])))
