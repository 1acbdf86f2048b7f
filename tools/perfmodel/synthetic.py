"""The synthetic BF16 flash-attention tile (mix and instruction stream): a known, compiler-quality stream for
checking the issue-bound model and the simulator against each other (no longer the calibration: the FlyDSL code
objects are, calibration.py)."""
from __future__ import annotations

from perfmodel.hardware import CLOCK_HZ, LANES, SIMDS, WMMA_OPS
from perfmodel.isa import Inst
from perfmodel.issue import tile_cost
from perfmodel.simulate import Latencies, decode_path, simulate
from perfmodel.stream import HEAD_DIM, KEY_TILE, QUERIES_PER_WAVE, Mix


def flash_bf16_mix(keys: int = 64, vopd_share: float = 0.0) -> Mix:
    """A standard BF16 flash-attention iteration of one wave: 16 queries x `keys` keys, d = 128, fp32 scores.

    bf16 WMMA: QK^T keys/16 x 8 + PV 8 x keys/16. Softmax per score VGPR (32 scores): max, scaled subtract,
    exp (TRANS), row-sum add, half a v_cvt_pk_bf16_f32 -> 3.5 VALU + 1 TRANS. Per iteration: 2 permlanex16 +
    2 max/add for the cross-lane reductions, max/sub/exp/cmp for m_new and alpha, l update 2, O rescale 64
    v_mul (O^T 64 VGPRs), ~10 address/counter VALU. `vopd_share`: fraction of the plain VALU ops paired
    into VOPD (0 = none). LDS: K and V tiles read once per wave (16 x keys x ... bytes, bf16)."""
    if keys % 16:
        raise ValueError(f"keys: expected a multiple of 16, got {keys}")
    wmma = (keys // 16) * 8 * 2
    score_vgprs = QUERIES_PER_WAVE * keys // LANES
    valu = 3.5 * score_vgprs + (2 + 2) + 4 + 2 + 64 + 10
    valu -= valu * vopd_share / 2
    trans = score_vgprs + 1
    k_bytes = keys * HEAD_DIM * 2
    return Mix(WMMA=wmma, VALU=valu, TRANS=trans, SALU=6, BRANCH=1, WAIT_OTHER=6,
               LDS=2 * k_bytes // (16 * LANES), lds_bytes=2 * k_bytes,
               wmma_cycles=16 * wmma, wmma_ops=WMMA_OPS * wmma, source="synthetic BF16 flash-attention tile")


MEASURED_BF16 = [("BF16 SDPA (seed, R9700)", 68.0, 68.0), ("FlyDSL BF16 attention (R9700)", 90.0, 100.0)]


def calibrate(keys: int = 64, waves: int = 4) -> dict:
    """Model the synthetic BF16 tile; what per-tile budget do the measured BF16 figures imply?"""
    mix = flash_bf16_mix(keys)
    t = tile_cost(mix, waves)
    flops_per_tile = 4 * QUERIES_PER_WAVE * keys * HEAD_DIM
    modeled = flops_per_tile / t.cycles * SIMDS * CLOCK_HZ / 1e12     # steady state, TFLOPS
    rows = []
    for name, lo, hi in MEASURED_BF16:
        implied = [flops_per_tile * SIMDS * CLOCK_HZ / (x * 1e12) for x in (hi, lo)]   # cycles per tile
        rows.append(dict(name=name, lo=lo, hi=hi, implied_cycles=implied,
                         implied_non_wmma=[c - mix.wmma_cycles for c in implied],
                         ratio=[lo / modeled, hi / modeled]))
    return dict(mix=mix, tile=t, modeled=modeled, flops_per_tile=flops_per_tile, rows=rows, keys=keys)


def flash_bf16_stream(keys: int = 64) -> list[Inst]:
    """A plausible compiler-quality standard BF16 flash-attention iteration of one wave (16 queries x `keys`
    keys, d = 128), as an instruction stream with real register dependencies, for the calibration.

    Q resident (v0-31, 8 A operands); S^T scores (keys in VGPRs, queries in lanes: the row max/sum stay in the
    lane plus one permlanex16) v32+; O^T 64 VGPRs v64-127; 8 LDS fragment slots v128-159 loaded 8 ahead with
    s_wait_dscnt; P packed to bf16 v160+. Per iteration: 16 global_load_b128 prefetch the next K/V tile into
    v192-255 (8 KiB per wave = the workgroup's 32 KiB tile), QK^T (4 chains of 8 bf16 WMMA), the first V loads,
    row max (4 accumulators), m_new/alpha, p = exp2(s - m) (Q pre-scaled by softmax_scale*log2 e), row sum,
    l update, bf16 pack, O rescale (64 v_mul), PV (8 chains of 4 WMMA), then wait for the prefetch, barrier,
    store it to LDS, wait, barrier, loop. 191 VALU + 33 TRANS + 64 WMMA: the mix of flash_bf16_mix."""
    if keys != 64:
        raise ValueError(f"keys: the calibration stream is written for 64-key tiles, got {keys}")
    out: list[tuple[str, str]] = []
    e = out.append
    issued: list[int] = []          # LDS ops in issue order (for the s_wait_dscnt counts)

    def ds_load(slot: int, off: int, tag: int):
        e(("ds_load_b128", f"v[{128 + 4 * slot}:{131 + 4 * slot}], v187 offset:{off}"))
        issued.append(tag)

    def wait_for(tag: int):
        pending = len(issued) - issued.index(tag) - 1
        e(("s_wait_dscnt", f"0x{pending:x}"))

    for i in range(4):                                  # LDS/global address updates
        e(("v_add_nc_u32_e32", f"v{186 + (i % 2)}, 0x400, v{186 + (i % 2)}"))
    for i in range(16):                                 # prefetch of the next K/V tile
        e(("global_load_b128", f"v[{192 + 4 * i}:{195 + 4 * i}], v186, s[2:3] offset:{512 * i}"))
    for i in range(6):
        e(("v_add_nc_u32_e32", f"v{188 + (i % 2)}, 0x200, v{188 + (i % 2)}"))
    # QK^T: S[kb] += Q[d] x K[kb][d], fragment j = 4 d + kb in slot j % 8, loaded 8 ahead
    for j in range(8):
        ds_load(j % 8, 1024 * j, j)
    for j in range(32):
        d, kb = divmod(j, 4)
        wait_for(j)
        c = "0" if d == 0 else f"v[{32 + 8 * kb}:{39 + 8 * kb}]"
        e(("v_wmma_f32_16x16x16_bf16", f"v[{32 + 8 * kb}:{39 + 8 * kb}], v[{4 * d}:{4 * d + 3}], "
                                       f"v[{128 + 4 * (j % 8)}:{131 + 4 * (j % 8)}], {c}"))
        if j + 8 < 32:
            ds_load((j + 8) % 8, 1024 * (j + 8), j + 8)
        elif j + 8 < 40:                                # first V fragments, under the softmax
            ds_load((j + 8) % 8, 32768 + 1024 * (j - 24), 100 + j - 24)
    s = [32 + i for i in range(32)]
    def reduce32(op: str, acc: int):
        """v{acc} = op over the lane's 32 scores: 4 accumulators v{acc}..v{acc+3}, then a pairwise tree."""
        for a in range(4):
            e((op, f"v{acc + a}, v{s[a]}, v{s[a + 4]}"))
        for i in range(8, 32):
            e((op, f"v{acc + i % 4}, v{acc + i % 4}, v{s[i]}"))
        e((op, f"v{acc}, v{acc}, v{acc + 1}"))
        e((op, f"v{acc + 2}, v{acc + 2}, v{acc + 3}"))
        e((op, f"v{acc}, v{acc}, v{acc + 2}"))

    # row max over the lane's 32 scores, then the other lane half
    reduce32("v_max_num_f32_e32", 168)
    e(("v_permlanex16_b32", "v180, v168, s4, s5"))
    e(("v_max3_num_f32", "v177, v176, v168, v180"))           # m_new
    e(("v_sub_f32_e32", "v178, v176, v177"))                  # alpha = exp2(m_old - m_new)
    e(("v_exp_f32_e32", "v178, v178"))
    e(("v_mov_b32_e32", "v176, v177"))
    # p = exp2(s - m_new), 4 subtracts ahead of the exps
    for i in range(4):
        e(("v_sub_f32_e32", f"v{s[i]}, v{s[i]}, v177"))
    for i in range(32):
        e(("v_exp_f32_e32", f"v{s[i]}, v{s[i]}"))
        if i + 4 < 32:
            e(("v_sub_f32_e32", f"v{s[i + 4]}, v{s[i + 4]}, v177"))
    # row sum (4 accumulators), other lane half, l = l * alpha + sum
    reduce32("v_add_f32_e32", 172)
    e(("v_permlanex16_b32", "v181, v172, s4, s5"))
    e(("v_add_f32_e32", "v185, v172, v181"))
    e(("v_fma_f32", "v179, v179, v178, v185"))
    for k in range(16):                                 # P to bf16: A operands of PV
        e(("v_cvt_pk_bf16_f32", f"v{160 + k}, v{s[2 * k]}, v{s[2 * k + 1]}"))
    for i in range(64):                                 # O rescale by alpha
        e(("v_mul_f32_e32", f"v{64 + i}, v{64 + i}, v178"))
    # PV: O[db] += P[kb] x V[kb][db], fragment j = 8 kb + db, slot (j + 32) % 8, loaded 8 ahead
    for j in range(32):
        kb, db = divmod(j, 8)
        wait_for(100 + j)
        slot = (j + 32) % 8
        e(("v_wmma_f32_16x16x16_bf16", f"v[{64 + 8 * db}:{71 + 8 * db}], v[{160 + 4 * kb}:{163 + 4 * kb}], "
                                       f"v[{128 + 4 * slot}:{131 + 4 * slot}], v[{64 + 8 * db}:{71 + 8 * db}]"))
        if j + 8 < 32:
            ds_load((j + 8 + 32) % 8, 32768 + 1024 * (j + 8), 100 + j + 8)
    # hand the prefetched tile over through LDS: everyone done reading, store, wait, everyone stored
    e(("s_wait_loadcnt", "0x0"))
    e(("s_barrier_signal", "-1"))
    e(("s_barrier_wait", "0xffff"))
    for i in range(16):
        e(("ds_store_b128", f"v188, v[{192 + 4 * i}:{195 + 4 * i}] offset:{512 * i}"))
        issued.append(200 + i)
    e(("s_wait_dscnt", "0x0"))
    e(("s_barrier_signal", "-1"))
    e(("s_barrier_wait", "0xffff"))
    e(("s_add_co_i32", "s10, s10, 1"))
    e(("s_cmp_lt_u32", "s10, s11"))
    e(("s_cbranch_scc1", "0"))                          # back-edge (target fixed below)
    insts = [Inst(4 * k, m, o) for k, (m, o) in enumerate(out)]
    back = insts[-1]
    return insts[:-1] + [Inst(back.addr, back.mnemonic, str((-(back.addr + 4) // 4) & 0xFFFF))]


def calibrate_latency(waves: int = 4, lat: Latencies = Latencies()) -> dict:
    """The synthetic BF16 stream through both modes, against the measured BF16 figures."""
    stream = flash_bf16_stream()
    mix = Mix.of(stream)
    issue = tile_cost(mix, waves)
    sim = simulate(decode_path(stream), waves, 12, lat)
    flops_per_tile = 4 * QUERIES_PER_WAVE * KEY_TILE * HEAD_DIM

    def tflops(cycles):
        return flops_per_tile / cycles * SIMDS * CLOCK_HZ / 1e12
    lo = min(r[1] for r in MEASURED_BF16)
    hi = max(r[2] for r in MEASURED_BF16)

    def gap(x):                         # how far outside the measured range (1.0 = inside)
        return x / hi if x > hi else (lo / x if x < lo else 1.0)
    return dict(mix=mix, issue=issue, sim=sim, issue_tflops=tflops(issue.cycles), sim_tflops=tflops(sim.cycles_per_tile),
                lo=lo, hi=hi, issue_gap=gap(tflops(issue.cycles)), sim_gap=gap(tflops(sim.cycles_per_tile)))

