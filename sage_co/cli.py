"""`sage-co`: the command a new user runs first.

    sage-co                     run a real attention through the shipped code objects (on the emulator when no
                                gfx1201 is present) and print accuracy, instruction counts and kernel provenance
    sage-co run -B 1 -H 2 -S 1024 [--kernel hip] [--backend emu|hip] [--smooth-k] [--seed N]
    sage-co info                list the shipped kernels with their ABI (from hsaco/manifest.json)
"""
from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

from .backends import BACKENDS

console = Console() if sys.stdout.isatty() else Console(width=180)


def cmd_info(args) -> int:
    from . import registry
    man = registry.manifest()
    table = Table(title=f"shipped code objects ({registry.hsaco_dir()})")
    for col in ("op", "variant", "symbol", "code object", "kernarg bytes", "args (offset:name)", "VGPRs", "LDS B",
                "COV", "LLVM", "sha256"):
        args_col = col == "args (offset:name)"
        table.add_column(col, overflow="fold", no_wrap=not args_col, min_width=28 if args_col else None)
    for name, co in sorted(man["code_objects"].items()):
        for kname, k in sorted(co["kernels"].items()):
            provides = [p for p in co["provides"] if p["symbol"] == kname] or [{"op": "-", "variant": "-"}]
            for p in provides:
                args_text = " ".join(f"{a['offset']}:{a['name'].removesuffix('.coerce')}" for a in k["args"])
                table.add_row(p["op"], p["variant"], kname, co["file"], str(k["kernarg_size"]), args_text,
                              str(k["vgpr_count"]), str(k["lds_bytes"]), str(co["code_object_version"]),
                              co["llvm_version"], co["sha256"][:12])
    # the ABI table is wide: piped output gets room for every column instead of rich's 80-column guess
    (console if sys.stdout.isatty() else Console(width=260)).print(table)
    from .integrations import sageattention_shim  # integ helper: whether `import sageattention` reaches sage-co
    console.print(sageattention_shim.describe(), markup=False)
    return 0


def _default_backend() -> str:
    import torch
    from .launch import device_arch
    if torch.cuda.is_available() and device_arch(torch.device("cuda", torch.cuda.current_device())) == "gfx1201":
        return "hip"
    return "emu"


def cmd_run(args) -> int:
    import torch

    from . import accuracy, api, reference, registry
    from . import launch as launch_mod
    from .backends.timing import stage

    backend = args.backend or _default_backend()
    device = "cuda" if backend == "hip" else "cpu"
    where = "gfx1201 GPU (hip-python)" if backend == "hip" else "CPU emulator (sage_co.emu) executing the gfx1201 code objects"
    console.print(f"[bold]sage-co[/]: SageAttention forward, B={args.B} H={args.H} S={args.S} D=128, "
                  f"backend [cyan]{backend}[/] ({where})")
    q, k, v = accuracy.make_inputs(args.dist, args.B, args.S, args.H, seed=args.seed, device=device)
    timings = {}
    with launch_mod.recording() as records, \
            console.status("prepare kernel: quantizing Q/K to INT8 and V to FP8 ...") as status:
        with stage(backend, q.device if backend == "hip" else None) as t:   # HIP events on the GPU
            prepared = api.sage_prepare(q, k, v, smooth_k=args.smooth_k, backend=backend)
        timings["prepare"] = t.seconds
        status.update(f"attention kernel: INT8 QK^T + FP8 PV WMMA over {args.S} keys "
                      f"(prepare took {timings['prepare']:.1f} s) ...")
        with stage(backend, q.device if backend == "hip" else None) as t:
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="sage-co", description="SageAttention for gfx1201 as shipped code objects")
    sub = ap.add_subparsers(dest="cmd")
    info = sub.add_parser("info", help="list the shipped kernels and their ABI")
    info.set_defaults(func=cmd_info)
    run = sub.add_parser("run", help="run one attention and report accuracy (the default command)")
    for p in (ap, run):
        p.add_argument("-B", type=int, default=1)
        p.add_argument("-H", type=int, default=2)
        p.add_argument("-S", type=int, default=1024)
        p.add_argument("--dist", choices=("randn", "k_offset"), default="randn")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--smooth-k", action="store_true")
        p.add_argument("--kernel", default=None, help="attention kernel variant (default: the manifest's default)")
        p.add_argument("--backend", choices=BACKENDS, default=None)
    run.set_defaults(func=cmd_run)
    from . import selftest
    selftest.register(sub)
    args = ap.parse_args(argv)
    for name in ("B", "H", "S"):
        if getattr(args, name) < 1:
            ap.error(f"-{name} must be >= 1")
    return args.func(args) if getattr(args, "func", None) else cmd_run(args)


if __name__ == "__main__":
    sys.exit(main())
