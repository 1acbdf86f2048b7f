"""What the calibrated model says the asm kernel's geometry and schedule should be (docs/performance.md
§Geometry and schedule): each figure changes one thing of the shipped kernel's real instruction stream or launch
and re-runs the same model. Every figure is MODELED."""
from __future__ import annotations

import math
from dataclasses import replace

from perfmodel.hardware import CALIBRATED, CUS, PEAK_RATE, WGPS, occupancy
from perfmodel.launch_model import SIM_ITERATIONS, _with_lds, latencies, loop_streams
from perfmodel.prepare import PREPARE_LAUNCHES
from perfmodel.restate import BLOCK, HEAD_DIM, our_kernel
from perfmodel.simulate import decode_path, simulate
from perfmodel.stream import Mix, iteration_paths

B, H, S = 1, 24, 4096                       # the shape of the what-ifs (a FlyDSL reference shape)


def _streams(kernel: str):
    from perfmodel.restate import _cache
    our_kernel(kernel, B, H, S)            # fills the cache: KernelModel + emulated workgroup
    km, run = _cache[(kernel, HEAD_DIM, False)]
    body = [i for i in km.insts if km.loop.contains(i.addr)]
    return km, run, body


def _executed(run) -> set[int]:
    """The loop addresses the emulated workgroup executed: the paths go through them only (the attn_mask / varlen
    blocks a dense run never takes would multiply the paths past stream.iteration_paths' limit), as
    launch_model.model_launch does."""
    return {a for a, n in run.counts.items() if n}


def waves_sweep(kernel: str, waves=(1, 2, 3, 4, 6, 8)) -> dict[int, float]:
    """Simulated SIMD clocks per loop iteration of one wave at each number of waves per SIMD (the shipped
    stream; more waves than its VGPRs allow are a what-if of the same schedule with fewer registers)."""
    from perfmodel.emulated import dynamic_iteration_mix
    km, run, body = _streams(kernel)
    mix, _ = dynamic_iteration_mix(km, run)
    paths, order = loop_streams(km, mix, SIM_ITERATIONS, executed=_executed(run))
    streams = [_with_lds(decode_path(p, body), p, run, CALIBRATED) for p in paths]
    lat = latencies(CALIBRATED, 1)
    return {w: simulate(streams[0], w, SIM_ITERATIONS, lat, variants=streams, order=order).cycles_per_iter
            for w in waves}


def rescale_bounds(kernel: str) -> dict[str, float]:
    """Clocks per iteration at 4 waves/SIMD with the loop path that never rescales O, the emulated mix, and the
    path that always does (the asm loop already skips the rescale when no row maximum moved)."""
    km, run, body = _streams(kernel)
    paths = iteration_paths(km.insts, km.loop, executed=_executed(run))
    by_valu = sorted(paths, key=lambda p: Mix.of(p).VALU)
    lat = latencies(CALIBRATED, 1)
    out = {}
    for name, p in (("never", by_valu[0]), ("always", by_valu[-1])):
        out[name] = simulate(_with_lds(decode_path(p, body), p, run, CALIBRATED), 4, SIM_ITERATIONS, lat).cycles_per_iter
    out["valu_never"], out["valu_always"] = Mix.of(by_valu[0]).VALU, Mix.of(by_valu[-1]).VALU
    return out


def drop_valu(fraction: float):
    """A what-if transform: remove every k-th plain VALU op (not TRANS, not WMMA) so that `fraction` of them go;
    their consumers then read older values (the scoreboard only times readiness)."""
    def transform(ops):
        out, acc = [], 0.0
        for op in ops:
            if op.cls == "VALU":
                acc += fraction
                if acc >= 1.0:
                    acc -= 1.0
                    continue
            out.append(op)
        return out
    return transform


def valu_per_score(kernel: str) -> tuple[float, float]:
    """(plain VALU issues, TRANS issues) per score VGPR of the emulated loop (16 queries x keys per wave:
    keys / 2 score VGPRs per 16 queries, 32 lanes)."""
    from perfmodel.emulated import dynamic_iteration_mix
    km, run, _ = _streams(kernel)
    mix, _ = dynamic_iteration_mix(km, run)
    score_vgprs = 16 * km.keys_per_iter / 32
    return mix.VALU / score_vgprs, mix.TRANS / score_vgprs


def emulate_exp(fraction: float, valu_per_exp: int):
    """A what-if transform: every k-th v_exp_f32 (so that `fraction` of them) becomes a dependent chain of
    `valu_per_exp` plain VALU issues on its register -- exp2 emulated on the VALU as FlashAttention-4's
    ex2_emulation_2 does (round down by adding 2^23 + 2^22, a short polynomial on the fraction in FMAs, the
    exponent shifted in; P is fp8 with 3 mantissa bits, so degree 2 does): TRANS work moved to the VALU."""
    def transform(ops):
        out, acc = [], 0.0
        for op in ops:
            if op.cls == "TRANS" and op.mnemonic.startswith("v_exp_f32"):
                acc += fraction
                if acc >= 1.0:
                    acc -= 1.0
                    out += [replace(op, mnemonic="v_fma_f32", cls="VALU")] * valu_per_exp
                    continue
            out.append(op)
        return out
    return transform


def exp_emulated(kernel: str, fraction: float, valu_per_exp: int):
    """The S = 4096 launch with `fraction` of the loop's exp2s emulated on the VALU (emulate_exp)."""
    return _transformed_launch(kernel, emulate_exp(fraction, valu_per_exp))


def trimmed(kernel: str, target_valu_per_score: float, params=CALIBRATED):
    """The S = 4096 launch with the loop's plain VALU cut to `target` issues per score VGPR, under `params` (e.g.
    CALIBRATED.override(trans_coissue_wmma=True): the hardware.Params knob the refit sets, which the simulator's
    rules follow through launch_model.latencies)."""
    now, _ = valu_per_score(kernel)
    frac = max(0.0, 1.0 - target_valu_per_score / now)
    return _transformed_launch(kernel, drop_valu(frac), params)


def _transformed_launch(kernel: str, transform, params=CALIBRATED):
    from perfmodel.restate import _cache, attention_flops
    from perfmodel.launch_model import Launch, model_launch
    from perfmodel.stream import PAD, QUERY_TILE
    km, run = _cache[(kernel, HEAD_DIM, False)]
    S_pad = -(-S // PAD) * PAD
    launch = Launch((S_pad // QUERY_TILE, H, B), BLOCK, attention_flops(B, H, S), "int8",
                    trip_count=S_pad / km.keys_per_iter)
    return model_launch(km, launch, run, params, transform=transform)


def l2_threshold(kernel: str, candidates=(2048, 1536, 1024, 768, 640, 512, 384)) -> float | None:
    """The smallest L2 -> CU bandwidth (bytes per clock, whole GPU) at which the S = 4096 launch stays compute-bound."""
    last = None
    for c in candidates:
        r = our_kernel(kernel, B, H, S, replace(CALIBRATED, l2_bytes_per_clk=c))
        if r.binding == "L2 -> CU bandwidth":
            return last
        last = c
    return last


def geometry(queries_per_wg: int, vgprs: int = 256, lds_bytes: int = 32768, seq: int = S) -> dict:
    """Occupancy, rounds and L2 demand factor of a workgroup of `queries_per_wg` queries (16 per wave) staging one
    K/V tile of `lds_bytes` for all its waves (so K/V traffic from L2 falls as 64 / queries_per_wg)."""
    waves = queries_per_wg // 16
    occ = occupancy(32 * waves, vgprs, lds_bytes)
    wgs = math.ceil(seq / queries_per_wg) * H * B
    per_wgp = math.ceil(wgs / WGPS)
    rounds = math.ceil(per_wgp / occ.wgs_per_wgp)
    return {"queries": queries_per_wg, "waves_per_wg": waves, "wgs_per_wgp": occ.wgs_per_wgp,
            "waves_per_simd": occ.waves_per_simd, "limit": occ.binding, "rounds": rounds,
            "round_fill": per_wgp / (rounds * occ.wgs_per_wgp), "l2_factor": 64 / queries_per_wg}


def wmma_floor_s(seq: int = S) -> float:
    """FLOPs / (INT8 dense peak at the calibrated clock): no kernel of this shape beats it on the model."""
    return 4.0 * B * H * seq * seq * HEAD_DIM / (PEAK_RATE["int8"] * CUS * CALIBRATED.clock_hz)


def what_if() -> dict:
    hip, asm = our_kernel("hip", B, H, S).time_us, our_kernel("asm", B, H, S).time_us
    out = {"shape": {"B": B, "H": H, "S": S}, "hip_us": hip, "asm_us": asm,
           "wmma_floor_us": wmma_floor_s() * 1e6, "waves": {}, "rescale": {}, "valu": {}, "l2": {}, "geometry": []}
    for v in ("hip", "asm"):
        out["waves"][v] = waves_sweep(v)
        out["rescale"][v] = rescale_bounds(v)
        out["valu"][v] = dict(zip(("valu_per_score_vgpr", "trans_per_score_vgpr"), valu_per_score(v)))
        out["l2"][v] = l2_threshold(v)
    out["trimmed"] = {t: trimmed("asm", t).time_us for t in (3.0, 2.0, 1.0, 0.0)}
    now = valu_per_score("asm")[0]
    trans_under_wmma = CALIBRATED.override(trans_coissue_wmma=True)
    out["trimmed_trans_overlaps_wmma"] = {round(t, 2): trimmed("asm", t, trans_under_wmma).time_us
                                          for t in (now, 3.0, 2.0)}
    out["exp_emulated"] = {f"{f:g} of the exps at {e} VALU issues": exp_emulated("asm", f, e).time_us
                           for f in (0.125, 0.25) for e in (3, 5)}
    out["geometry"] = [geometry(q) for q in (64, 128, 256)]
    out["prepare"] = prepare_levers()
    return out


def prepare_levers(S_short: int = 1536) -> dict:
    """The prepare launch counts weighed in issue 28 (docs/performance.md §The prepare stage: 3 before, 2 with the
    fold in stats, 1 shipped = K/V tiles waiting for their head's fold), cold and cache-resident, at S_short and S;
    the bytes are the same in every one of them."""
    from perfmodel.prepare import CASES, prepare_seconds
    return {f"S={s}, {case}, {n} launches": prepare_seconds(B, H, s, case=case, launches=n) * 1e6
            for s in (S_short, S) for case in CASES for n in (3, 2, 1)}


def print_what_if(as_json: bool = False) -> int:
    import json
    d = what_if()
    if as_json:
        print(json.dumps(d, indent=1, default=str))
        return 0
    print(f"What-ifs at B={B}, H={H}, S={S} (MODELED): hip {d['hip_us']:.1f} us, asm {d['asm_us']:.1f} us, "
          f"WMMA floor {d['wmma_floor_us']:.1f} us")
    for v in ("hip", "asm"):
        w = ", ".join(f"{k}: {c:.0f}" for k, c in d["waves"][v].items())
        r = d["rescale"][v]
        print(f"  {v}: clocks per iteration by waves/SIMD {w}; rescale never {r['never']:.0f} / always "
              f"{r['always']:.0f}; VALU {d['valu'][v]['valu_per_score_vgpr']:.2f} + TRANS "
              f"{d['valu'][v]['trans_per_score_vgpr']:.2f} per score VGPR; compute-bound down to L2 "
              f"{d['l2'][v]} B/clk")
    print("  asm with plain VALU cut to N per score VGPR: " +
          ", ".join(f"{t:g}: {us:.1f} us" for t, us in d["trimmed"].items()))
    print("  the same if the TRANS pipeline ran under WMMA (UNVERIFIED rule): " +
          ", ".join(f"{t:g}: {us:.1f} us" for t, us in d["trimmed_trans_overlaps_wmma"].items()))
    print("  asm with exp2 emulated on the VALU (FA4 ex2_emulation_2 style): " +
          ", ".join(f"{k}: {us:.1f} us" for k, us in d["exp_emulated"].items()))
    print(f"  prepare (B=1, H=24, D=128; {PREPARE_LAUNCHES} launch shipped): " +
          ", ".join(f"{k}: {us:.1f} us" for k, us in d["prepare"].items()))
    for g in d["geometry"]:
        print(f"  {g['queries']} queries/workgroup: {g['waves_per_wg']} waves, {g['wgs_per_wgp']} per WGP "
              f"({g['limit']}), {g['waves_per_simd']} waves/SIMD, {g['rounds']} rounds, L2 traffic x{g['l2_factor']:g}")
    return 0
