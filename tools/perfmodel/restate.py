"""Our attention kernels and the whole op re-stated with the calibrated model, next to FlyDSL's published figures
(docs/performance.md §Re-stated figures). Every figure here is MODELED unless labelled published."""
from __future__ import annotations

import json

from perfmodel import ROOT
from perfmodel.calibration import (Reference, calibrate, emulated, load_references, quant_seconds,
                                   require_calibration_dir)
from perfmodel.attention import attention_inputs, attention_symbol
from perfmodel.emulated import emulate_workgroup
from perfmodel.hardware import CALIBRATED, FITTED, Params
from perfmodel.launch_model import Launch, LaunchResult, model_launch
from perfmodel.prepare import CASES as PREPARE_CASES
from perfmodel.prepare import PREPARE_LAUNCHES_BEFORE, prepare_seconds
from perfmodel.stream import HEAD_DIM, PAD, QUERY_TILE, analyze
from sage_co import abi

HSACO = ROOT / "hsaco" / "gfx1201"
KERNELS = {"hip": HSACO / "gfx1201_sage_attention_hip.co", "asm": HSACO / "gfx1201_sage_attention_asm.co"}
BLOCK = abi.ATTENTION_BLOCK[0]              # threads per attention workgroup (sage_co/abi.py)
EMU_S = 2048                                # the emulated workgroup's sequence (counts per iteration, LDS passes)
SHAPES = [(1, 24, s) for s in (1536, 4096, 16384, 75600)] + [(1, 40, 32760)]   # + Wan-2.x-480p-like (video DiT)
FLY_BLOCK_M = 256                           # FlyDSL: 256 queries per 16-wave workgroup, 64 keys per iteration
FLY_BLOCK_N = 64

_cache: dict = {}


def attention_flops(B: int, H: int, S: int, D: int = HEAD_DIM, S_kv: int | None = None) -> float:
    return 4.0 * B * H * S * (S_kv or S) * D


def our_kernel(kernel: str, B: int, H: int, S: int, params: Params = CALIBRATED, *, S_kv: int | None = None,
               head_dim: int = HEAD_DIM, out_dtype: str = "bf16", transform=None,
               schedule: str | None = None) -> LaunchResult:
    """A shipped attention kernel at (B, H, S_q = S, S_kv), D = head_dim: the first workgroup emulated at
    S = EMU_S (S_kv = min(S_kv, EMU_S) for cross-attention) gives the per-iteration counts and LDS passes, the trip
    count is S_kv_pad / keys per iteration. out_dtype: the symbol's output (bf16 default; fp32 writes 4 B per
    element). transform: a what-if on the decoded loop streams (launch_model.model_launch; whatif.py's). schedule:
    the symbol's exp2 schedule (sage_co.family.ATTENTION_SCHEDULES; None: the default)."""
    import torch
    from sage_co import codeobj
    from perfmodel.emulated import arg_names
    S_kv = S_kv or S
    path = KERNELS[kernel]
    cross = S_kv != S
    out_bytes = abi.OUT_BYTES[out_dtype]
    key = (kernel, head_dim, cross) + ((out_dtype,) if out_dtype != "bf16" else ()) + \
        ((schedule,) if schedule is not None else ())
    if key not in _cache:
        symbol = attention_symbol(kernel, head_dim, out_dtype=out_dtype, schedule=schedule)
        km = analyze(kernel, path, symbol, head_dim)
        names = set(arg_names(codeobj.read_file(path).kernel(symbol)))
        inputs = attention_inputs(EMU_S, min(S_kv, EMU_S) if cross else EMU_S, head_dim, out_bytes=out_bytes)
        args = {k: v.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if isinstance(v, torch.Tensor)
                else v for k, v in inputs.items() if k in names}
        run = emulate_workgroup(path, km.symbol, BLOCK, args, km.text_addr)
        _cache[key] = (km, run)
    km, run = _cache[key]
    S_pad, S_kv_pad = -(-S // PAD) * PAD, -(-S_kv // PAD) * PAD
    dram = B * H * ((S_pad + 2 * S_kv_pad) * head_dim + S * head_dim * out_bytes + (S_pad + S_kv_pad) // 32 * 4
                    + 3 * head_dim * 4)
    launch = Launch((S_pad // QUERY_TILE, H, B), BLOCK, attention_flops(B, H, S, head_dim, S_kv), "int8",
                    trip_count=S_kv_pad / km.keys_per_iter, dram_bytes=dram)
    return model_launch(km, launch, run, params, transform=transform)


def flydsl_kernel(ref: Reference, S: int, params: Params = CALIBRATED, H: int | None = None) -> LaunchResult:
    """A FlyDSL reference kernel at another S (and H; same D): its emulated workgroup at the published shape, trip
    count S_pad / 64 (sequence padded to 256 queries: the kernels are built without a tail mask)."""
    km, run = emulated(ref)
    H = H or ref.H
    S_pad = -(-S // FLY_BLOCK_M) * FLY_BLOCK_M
    esz = 1 if ref.dtype == "fp8" else 2
    launch = Launch((ref.B * (S_pad // FLY_BLOCK_M) * H, 1, 1), ref.block, attention_flops(ref.B, H, S),
                    ref.dtype, trip_count=S_pad / FLY_BLOCK_N, dram_bytes=ref.B * S_pad * H * ref.D * (3 * esz + 2))
    return model_launch(km, launch, run, params)


def restatement(folder=None, params: Params = CALIBRATED) -> list[dict]:
    refs = {}
    try:
        fly = [r for r in load_references(folder) if r.family == "flydsl"]
        for r in fly:
            refs.setdefault(r.dtype, r)
            if r.S == 4096:
                refs[r.dtype] = r
        published = {(r.dtype, r.S, r.includes_quant): r.published_us for r in fly}
        published.update({("fp8", r.S, True): r.published_incl_quant_us for r in fly if r.published_incl_quant_us})
    except FileNotFoundError:
        refs, published = {}, {}
    rows = []
    for B, H, S in SHAPES:
        row = {"B": B, "H": H, "S": S, "flops": attention_flops(B, H, S)}
        for v in KERNELS:
            if KERNELS[v].exists():
                res = our_kernel(v, B, H, S, params)
                row[v] = {"time_us": res.time_us, "tflops": res.tflops, "binding": res.binding}
        # the prepare (perfmodel/prepare.py), cold (Q/K/V in DRAM) and resident (just written by the projection
        # GEMM, in the Infinity Cache); "prepare_us" / "op_*" are the cold case, the goal rows' case
        for case in PREPARE_CASES:
            sfx = "" if case == "cold" else f"_{case}"
            row[f"prepare{sfx}_us"] = prepare_seconds(B, H, S, params, case=case) * 1e6
            for v in KERNELS:
                if v in row:
                    t = row[v]["time_us"] + row[f"prepare{sfx}_us"]
                    row[f"op_{v}{sfx}"] = {"time_us": t, "tflops": row["flops"] / t / 1e6}
        row["prepare_before_us"] = prepare_seconds(B, H, S, params, launches=PREPARE_LAUNCHES_BEFORE) * 1e6
        for dt, ref in refs.items():
            res = flydsl_kernel(ref, S, params, H=H)
            q = quant_seconds(B * S * H * HEAD_DIM, 3, params) * 1e6 if dt == "fp8" else 0.0
            row[f"flydsl_{dt}"] = {"time_us": res.time_us, "tflops": res.tflops, "binding": res.binding,
                                   "published_us": published.get((dt, S, False))}
            if dt == "fp8":
                t = res.time_us + q
                row["flydsl_fp8_incl_quant"] = {"time_us": t, "tflops": row["flops"] / t / 1e6,
                                                "published_us": published.get(("fp8", S, True))}
        rows.append(row)
    return rows


VARIANT_SHAPES = [  # issue 13: head dim 64, and cross-attention with a short key sequence
    {"name": "D=64", "B": 1, "H": 24, "S": 4096, "S_kv": None, "head_dim": 64},
    {"name": "cross-attention", "B": 1, "H": 40, "S": 75600, "S_kv": 512, "head_dim": 128},
]


def variant_rows(params: Params = CALIBRATED) -> list[dict]:
    """Modeled figures of the head-dim-64 and cross-attention launches, where the shipped code objects have them."""
    rows = []
    for shape in VARIANT_SHAPES:
        row = dict(shape)
        for v in KERNELS:
            try:
                res = our_kernel(v, shape["B"], shape["H"], shape["S"], params, S_kv=shape["S_kv"],
                                 head_dim=shape["head_dim"])
            except ValueError as e:             # no such symbol shipped, or a prepare that refuses the shape
                row[v] = {"missing": str(e)}
                continue
            row[v] = {"time_us": res.time_us, "tflops": res.tflops, "binding": res.binding}
        rows.append(row)
    return rows


def calibration_rows(folder=None, params: Params = CALIBRATED, rows=None) -> list[dict]:
    """Every published run of both families, published vs modeled (and FlyDSL FP8 S=1536 with its quantization,
    a published figure the fit did not use)."""
    out = []
    for r in rows if rows is not None else calibrate(folder, params):
        out.append({"family": r.ref.family, "kernel": r.ref.kernel, "reference": r.ref.stem, "B": r.ref.B,
                    "H": r.ref.H, "S": r.ref.S, "primary": r.ref.primary, "published_us": r.ref.published_us,
                    "modeled_us": r.modeled_us, "error": r.error, "tolerance": r.ref.tolerance,
                    "within": r.within, "published_tflops": r.published_tflops, "modeled_tflops": r.modeled_tflops,
                    "binding": r.kernel.binding, "includes_quant": r.ref.includes_quant,
                    "quant_us": r.quant_s * 1e6, "source": r.ref.source})
        if r.ref.published_incl_quant_us and not r.ref.includes_quant:
            t = r.modeled_us + quant_seconds(r.ref.elements, 3, params) * 1e6
            out.append({**out[-1], "reference": r.ref.stem + " incl. quantization (not fitted)", "primary": False,
                        "published_us": r.ref.published_incl_quant_us, "modeled_us": t,
                        "error": t / r.ref.published_incl_quant_us - 1,
                        "within": abs(t / r.ref.published_incl_quant_us - 1) <= r.ref.tolerance,
                        "published_tflops": r.ref.flops / r.ref.published_incl_quant_us / 1e6,
                        "modeled_tflops": r.ref.flops / t / 1e6, "includes_quant": True,
                        "quant_us": t - r.modeled_us})
    return out


def print_calibration(folder=None, as_json: bool = False) -> int:
    from perfmodel.calibration import NOISE, rank_inversions
    require_calibration_dir(folder)
    rows = calibrate(folder)
    out = calibration_rows(folder, rows=rows)
    inversions = rank_inversions(rows)
    params = [{"name": n, "value": v, "status": st, "source": why} for n, v, st, why in Params.table()]
    if as_json:
        print(json.dumps({"params": params, "rows": out, "rank_inversions": inversions}, indent=1))
    else:
        print(f"Calibration: MODELED vs published, one parameter set (clock {CALIBRATED.clock_hz / 1e9:.2f} GHz, "
              f"SOURCED; fitted: {', '.join(FITTED)})")
        for fam, title in (("flydsl", "FlyDSL (aiter PR #4188), B=1 H=24 D=128, goal +-15 %"),
                           ("gcnasm", "gcnasm opus_attn_gfx1201 (RX 9070 XT), BF16 D=128, goal +-20 %")):
            sel = [o for o in out if o["family"] == fam]
            if not sel:
                print(f"\n{title}: no references in the folder")
                continue
            print(f"\n{title}")
            print(f"  {'run':66s} {'published':>18s} {'modeled':>18s} {'error':>7s}  binding (modeled)")
            for o in sel:
                q = f" (incl. {o['quant_us']:.0f} us quant.)" if o["includes_quant"] else ""
                mark = "" if o["within"] else "  OUTSIDE"
                print(f"  {o['reference'] + ('' if o['primary'] or 'incl.' in o['reference'] else ' (older PR)'):66s}"
                      f" {o['published_us']:9.1f} us {o['published_tflops']:5.1f} TF"
                      f" {o['modeled_us']:9.1f} us {o['modeled_tflops']:5.1f} TF {100 * o['error']:+6.1f} %  "
                      f"{o['binding']}{q}{mark}")
        prim = sorted((r for r in rows if r.ref.primary), key=lambda r: -r.published_tflops)
        print(f"\nRank order (primary runs; published ties within {100 * NOISE:.0f} % are noise):")
        for k, (p, m) in enumerate(zip(prim, sorted(prim, key=lambda r: -r.modeled_tflops)), 1):
            print(f"  {k:2d}. published {p.ref.stem:58s} {p.published_tflops:6.1f} TF | modeled {m.ref.stem:58s} "
                  f"{m.modeled_tflops:6.1f} TF")
        print("  inversions beyond noise: " + (", ".join(f"{a} > {b}" for a, b in inversions) or "none"))
        print("\nParameters (hardware.Params):")
        for d in params:
            print(f"  {d['name']:20s} {d['value']!s:>10s}  {d['status']:8s} {d['source']}")
    return 0 if all(o["within"] for o in out) and not inversions else 1


def print_sensitivity(folder=None, as_json: bool = False) -> int:
    """calibration.sensitivity as a table: each row one parameter changed, the error of every primary run."""
    from perfmodel.calibration import sensitivity
    require_calibration_dir(folder)
    rows = sensitivity(folder)
    if as_json:
        print(json.dumps(rows, indent=1))
        return 0
    stems = list(rows[0]["errors"])
    print("Sensitivity (MODELED; each row changes one parameter of the calibrated set; error per primary run)")
    for k, stem in enumerate(stems):
        print(f"  [{k}] {stem}")
    print(f"  {'variant':48s} " + " ".join(f"{'[' + str(k) + ']':>7s}" for k in range(len(stems)))
          + "  in band  inversions  refit clock")
    for r in rows:
        print(f"  {r['variant']:48s} " + " ".join(f"{100 * r['errors'][s]:+6.1f}%" for s in stems)
              + f"  {r['within']:>3d}/{r['runs']:<3d}  {r['inversions']:>10d}  {r['refit_clock_ghz']:.2f} GHz")
    return 0


def print_restatement(as_json: bool = False) -> int:
    rows = restatement()
    variants = variant_rows()
    if as_json:
        print(json.dumps({"shapes": rows, "variants": variants}, indent=1))
        return 0
    print("B=1, H=24, D=128 (MODELED, calibrated; 'pub' = FlyDSL's published figure; prepare/op 'cold' = Q/K/V in "
          "DRAM (the goal rows), 'resident' = still in the Infinity Cache after the projection GEMM, at an ASSUMED "
          "Infinity Cache rate: docs/performance.md §The prepare stage)")
    for r in rows:
        parts = [f"S={r['S']}" + (f" (B={r['B']}, H={r['H']}: Wan-2.x-480p-like)" if r["H"] != 24 else "")]
        for v in KERNELS:
            if v in r:
                parts.append(f"{v} {r[v]['time_us']:.1f} us {r[v]['tflops']:.1f} TF ({r[v]['binding']})")
        for k in ("flydsl_bf16", "flydsl_fp8"):
            if k in r:
                pub = r[k]["published_us"]
                parts.append(f"{k} {r[k]['time_us']:.1f} us" + (f" (pub {pub:.1f})" if pub else ""))
        parts.append(f"prepare {r['prepare_us']:.1f} us cold (3 launches before issue 28: "
                     f"{r['prepare_before_us']:.1f}) / {r['prepare_resident_us']:.1f} us resident")
        for v in KERNELS:
            if f"op_{v}" in r:
                parts.append(f"op({v}) {r[f'op_{v}']['time_us']:.1f} us cold / "
                             f"{r[f'op_{v}_resident']['time_us']:.1f} us resident")
        if "flydsl_fp8_incl_quant" in r:
            d = r["flydsl_fp8_incl_quant"]
            parts.append(f"flydsl fp8 incl. quant {d['time_us']:.1f} us" +
                         (f" (pub {d['published_us']:.1f})" if d["published_us"] else ""))
        print("  " + "; ".join(parts))
    for r in variants:
        cells = [f"{v} " + (f"{r[v]['time_us']:.1f} us {r[v]['tflops']:.1f} TF ({r[v]['binding']})" if "time_us" in r[v]
                            else f"not modeled: {r[v]['missing']}") for v in KERNELS if v in r]
        print(f"  {r['name']} (B={r['B']}, H={r['H']}, S_q={r['S']}, S_kv={r['S_kv'] or r['S']}, "
              f"D={r['head_dim']}): " + "; ".join(cells))
    return 0

