"""Accuracy metrics against the FP32 reference, and `python -m sage_co.accuracy` to print them.

The contract (docs/numerics.md §Accuracy): against reference.attention_fp32, at most 0.5 % of the elements
outside |err| <= 0.3 + 0.25 * |ref|, global cosine >= 0.998 and median row cosine >= 0.99.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping

import torch

from . import reference

ATOL = 0.3  # the seed's band
RTOL = 0.25
MAX_OUTSIDE = 0.005  # fraction of elements allowed outside the band
MIN_COSINE = 0.998
MIN_ROW_COSINE = 0.99

DISTRIBUTIONS = ("randn", "k_offset", "sharp_q", "v_offset")
Provider = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def metrics(out: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    """out (any float dtype) vs ref (fp32), same shape [..., D]; rows are the last dim (one query and head).
    NaN in out counts as outside the band and makes the other figures NaN."""
    if out.shape != ref.shape:
        raise ValueError(f"out: expected the shape of ref {tuple(ref.shape)}, got {tuple(out.shape)}")
    dt = torch.float64 if ref.device.type in ("cpu", "cuda") else torch.float32
    o, r = out.to(dt), ref.to(dt)
    err = o - r
    row_cos = torch.nn.functional.cosine_similarity(o, r, dim=-1)
    return {
        "cosine": torch.nn.functional.cosine_similarity(o.flatten(), r.flatten(), dim=0).item(),
        "median_row_cosine": row_cos.flatten().median().item() if not row_cos.isnan().any() else float("nan"),
        "rel_l2": (err.norm() / r.norm()).item(),
        "max_abs": err.abs().max().item(),
        "outside_band": (~(err.abs() <= ATOL + RTOL * r.abs())).to(dt).mean().item(),
    }


def within_contract(m: Mapping[str, float]) -> bool:
    return m["outside_band"] <= MAX_OUTSIDE and m["cosine"] >= MIN_COSINE and m["median_row_cosine"] >= MIN_ROW_COSINE


# A kernel's output against the arithmetic model (reference.sage_attention_model) at the kernel's key tile:
# docs/numerics.md §Kernel vs model (not bitwise: exp2 within 1 ulp, the row-sum and WMMA accumulation orders)
MODEL_REL_L2 = 1e-3
MODEL_MAX_ABS = 2.0 ** -7   # times max|model|
MODEL_MAX_DIFFERENT = 0.01  # fraction of output elements not bitwise equal


def versus_model(out: torch.Tensor, model: torch.Tensor) -> dict:
    """A kernel's 16-bit output against the model's: relative L2, max |difference| / max |model|, the fraction of
    elements not bitwise equal, and `ok`: all three within the bounds above."""
    o, m = out.float(), model.float()
    rel = ((o - m).norm() / m.norm().clamp_min(1e-30)).item()
    max_abs = ((o - m).abs().max() / m.abs().max().clamp_min(1e-30)).item()
    different = (out.view(torch.int16) != model.view(torch.int16)).float().mean().item()
    return {"rel_l2": rel, "max_abs": max_abs, "different": different,
            "ok": rel <= MODEL_REL_L2 and max_abs <= MODEL_MAX_ABS and different <= MODEL_MAX_DIFFERENT}


def make_inputs(dist: str, B: int, S: int, H: int, seed: int = 0, device="cpu"):
    """bf16 [B, S, H, 128] q, k, v. randn: all N(0, 1). k_offset: k gets a per-(head, channel) offset
    4 * N(0, 1) shared by every token, the distribution smooth_k exists for; v_offset: the same on v (smooth_v's);
    sharp_q: q * 6 (peaked softmax rows). Drawn on CPU so every device sees the same values."""
    if dist not in DISTRIBUTIONS:
        raise ValueError(f"dist: expected one of {DISTRIBUTIONS}, got {dist!r}")
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, S, H, 128, generator=g) for _ in range(3))
    if dist == "k_offset":
        k = k + 4 * torch.randn(1, 1, H, 128, generator=g)
    if dist == "v_offset":
        v = v + 4 * torch.randn(1, 1, H, 128, generator=g)
    if dist == "sharp_q":
        q = q * 6
    return tuple(t.to(torch.bfloat16).to(device).contiguous() for t in (q, k, v))


def bf16_sdpa(q, k, v):
    """torch's scaled_dot_product_attention on the bf16 tensors: the baseline a user has without sage-co."""
    out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    return out.transpose(1, 2)


def default_providers() -> dict[str, Provider]:
    return {
        "bf16 sdpa": bf16_sdpa,
        "sage model": lambda q, k, v: reference.sage_attention(q, k, v),
        "sage model smooth_k": lambda q, k, v: reference.sage_attention(q, k, v, smooth_k=True),
        "sage model smooth_v": lambda q, k, v: reference.sage_attention(q, k, v, smooth_v=True),
        "sage model pv fp16": lambda q, k, v: reference.sage_attention(q, k, v, pv_dtype="fp16"),
    }


def kernel_providers(kernels=()) -> dict[str, Provider]:
    """The shipped attention kernels (prepare + forward through sage_co's public op) as providers; an empty
    `kernels` means every shipped kernel ("asm", "hip") of sage_attention_fwd. Imported lazily: the metrics above need no
    kernels."""
    import sage_co
    from sage_co import registry

    kernels = list(kernels) or sorted({k.kernel for k in registry.kernels() if k.op == "sage_attention_fwd"})
    providers = {}
    for kernel in kernels:
        for smooth_k in (False, True):
            name = f"sage-co kernel ({kernel})" + (" smooth_k" if smooth_k else "")
            providers[name] = (lambda q, k, v, kernel=kernel, smooth_k=smooth_k:
                               sage_co.sage_attention(q, k, v, smooth_k=smooth_k, kernel=kernel))
    return providers


def evaluate(providers: Mapping[str, Provider], B: int, H: int, S: int, dists=DISTRIBUTIONS, seed: int = 0,
             device="cpu") -> list[tuple[str, str, dict[str, float]]]:
    """(distribution, provider, metrics) for every provider on every distribution."""
    rows = []
    for dist in dists:
        q, k, v = make_inputs(dist, B, S, H, seed, device)
        ref = reference.attention_fp32(q, k, v)
        for name, fn in providers.items():
            rows.append((dist, name, metrics(fn(q, k, v), ref)))
    return rows


def print_table(rows, title: str = "", console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in ("inputs", "provider", "cosine", "median row cos", "rel L2", "max abs", "outside band", "contract"):
        table.add_column(col, justify="left" if col in ("inputs", "provider") else "right", no_wrap=True)
    for dist, name, m in rows:
        ok = within_contract(m)
        table.add_row(dist, name, f"{m['cosine']:.6f}", f"{m['median_row_cosine']:.6f}", f"{m['rel_l2']:.5f}",
                      f"{m['max_abs']:.4f}", f"{100 * m['outside_band']:.3f} %",
                      "[green]ok[/green]" if ok else "[red]FAIL[/red]")
    # piped output: rich would assume 80 columns and squeeze the table
    (console or Console(width=None if sys.stdout.isatty() else 140)).print(table)


def main(argv=None, extra_providers: Mapping[str, Provider] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sage_co.accuracy",
                                 description="Accuracy of attention providers against the FP32 reference.")
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--H", type=int, default=2)
    ap.add_argument("--S", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dist", choices=DISTRIBUTIONS, action="append",
                    help="input distribution (repeatable; default: all)")
    ap.add_argument("--kernels", nargs="*", default=None, metavar="KERNEL",
                    help="also run the shipped attention kernels (prepare + forward) of these kernels, e.g. "
                         "'asm hip'; bare --kernels runs every shipped kernel (on the emulator for CPU tensors)")
    args = ap.parse_args(argv)
    for name in ("B", "H", "S"):
        if getattr(args, name) < 1:
            ap.error(f"--{name}: expected >= 1, got {getattr(args, name)}")
    providers = default_providers()
    if args.kernels is not None:
        providers.update(kernel_providers(args.kernels))
    providers.update(extra_providers or {})
    rows = evaluate(providers, args.B, args.H, args.S, args.dist or DISTRIBUTIONS, args.seed, args.device)
    print_table(rows, title=f"vs FP32 reference, B={args.B} H={args.H} S={args.S} seed={args.seed} "
                            f"(band: atol {ATOL}, rtol {RTOL}; contract: <= {100 * MAX_OUTSIDE} % outside, "
                            f"cos >= {MIN_COSINE}, row cos >= {MIN_ROW_COSINE})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
