"""Latency-aware mode: a small in-order, multi-wave SIMD simulator over a loop's instruction stream.

The issue-bound model assumes every latency hidden; this one issues each wave's instructions in order against a
register scoreboard, the gfx12 wait counters and the SIMD's shared units (WMMA, TRANS, the LDS half it shares with
the other SIMD of its CU, with each access's bank-conflict passes), barriers per workgroup, so what the schedule
hides (or not) shows. Every constant is a named assumption with its source (LATENCY_TABLE, docs/performance.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from perfmodel.hardware import CALIBRATED, LDS_BYTES_PER_CLK_PER_SIMD, wmma_cycles
from perfmodel.isa import CLASSES, NAMED, NREGS, SGPR0, Inst, classify, reads_writes, wave_bytes
from perfmodel.stream import KernelModel, Mix, iteration_paths, longest_iteration

VALU_LATENCY = 5        # LLVM-DLY: s_delay_alu names VALU_DEP_1..4, so a VALU result is needed by at most the 4th
                        # next VALU: ~5 clk at 1 issue/clk (also LLVM's generic sched model, §Hazards 4)
TRANS_LATENCY = 10      # §Throughput [L22]: llvm-mca -mcpu=gfx1201 v_exp_f32 latency 10 (generic model)
TRANS_BUSY = 4          # §Throughput [LLVM-SCHED]: quarter rate -> the TRANS pipeline is busy 4 clk per op
WMMA_EXTRA = 4          # ASSUMPTION (no source): a WMMA result is ready `cycles + 4` after issue (8 + a few);
                        # a WMMA reading it (accumulator chaining, §Hazards 1 "hardware will stall") waits for it
SALU_LATENCY = 2        # ASSUMPTION: s_delay_alu SALU_CYCLE_1..3 [LLVM-DLY] -> SALU results within ~1-3 clk
LDS_LATENCY = CALIBRATED.lds_latency   # ASSUMPTION: LDS load-to-use; LLVM's generic model says 20 (§Throughput),
                        # published RDNA microbenchmarks put it in the tens of ns (~60-100 clk): hardware.Params
LDS_BYTES_PER_CLK = LDS_BYTES_PER_CLK_PER_SIMD   # §Memory: Params.lds_bytes_per_clk / 2 SIMDs, as the issue-bound model
GLOBAL_LATENCY = CALIBRATED.global_latency   # FITTED (hardware.Params): VMEM load-to-use of an L2 hit; LLVM
                        # generic 320 (§Throughput); K/V of the resident heads fit the 8 MiB L2
SMEM_LATENCY = 100      # ASSUMPTION: scalar-cache hit
BARRIER_LATENCY = CALIBRATED.barrier_latency   # ASSUMPTION: s_barrier_signal -> s_barrier_wait release round trip, no source
BRANCH_TAKEN = 4        # ASSUMPTION: a taken branch refetches; the wave's next issue is 4 clk later

LATENCY_TABLE = [
    ("VALU result", f"{VALU_LATENCY} clk", "LLVM-DLY: s_delay_alu VALU_DEP_1..4; LLVM generic sched model"),
    ("TRANS result / pipeline", f"{TRANS_LATENCY} clk / busy {TRANS_BUSY} clk per op",
     "§Throughput: llvm-mca gfx1201 v_exp_f32 10 [L22]; quarter rate [LLVM-SCHED]"),
    ("WMMA unit / result", f"iu8/fp8 8, bf16 16 clk busy; result cycles + {WMMA_EXTRA}",
     "§Throughput [AMC]; result latency ASSUMED (8 + a few); chained C waits (§Hazards 1)"),
    ("SALU result", f"{SALU_LATENCY} clk", "ASSUMED (LLVM-DLY SALU_CYCLE_1..3)"),
    ("LDS load/store", f"{LDS_LATENCY} clk + the access's passes x 2 SIMDs per LDS half (bank conflicts from "
                       f"emulated addresses where known, else bytes / {LDS_BYTES_PER_CLK:g} B/clk per SIMD), in order",
     "latency ASSUMED (LLVM generic 20; RDNA microbenchmarks tens of ns); banks §Memory [LDSDOC]"),
    ("global (VMEM) load", f"{GLOBAL_LATENCY} clk, in order, no bandwidth limit",
     "ASSUMED (LLVM generic 320; L2 hit ~300, IC/DRAM more)"),
    ("SMEM load", f"{SMEM_LATENCY} clk, out of order (only kmcnt 0 is safe)", "ASSUMED; order §Waits"),
    ("barrier", f"last signal of the wave's workgroup on this SIMD + {BARRIER_LATENCY} clk (its mates on the other "
                "SIMDs run the same stream in step)", "ASSUMED mapping + latency (barrier skew inside the SIMD)"),
    ("taken branch", f"{BRANCH_TAKEN} clk before the wave issues again", "ASSUMED"),
    ("issue", "per SIMD and clock: one vector issue (VALU/VOPD/TRANS/WMMA) + one scalar/memory issue "
              "(SALU, SMEM, branch, s_wait*/s_delay_alu/barrier, LDS, VMEM), each to the ready wave that has "
              "waited longest since its last issue (round-robin); "
              "a wave issues at most one instruction per clock, in order", "as the issue-bound model (#2, #5)"),
    ("WMMA vs VALU", "a WMMA holds the SIMD's vector datapath for its cycles: no VALU/TRANS/WMMA issue meanwhile; "
                     "a WMMA waits for the TRANS pipeline to drain", "§Hazards 7 [AMC], issue-bound #3/#4"),
    ("memory issue", "DS/VMEM issue waits for the wave's outstanding VALU/TRANS VGPR writes (VA_VDST = 0); "
                     "in-flight WMMA results do not count (UNVERIFIED; variant below)", "§Hazards 6 [LLVM-DA]"),
    ("register scoreboard", "VALU/TRANS/WMMA/SALU results interlock; memory results only through s_wait_*cnt "
                            "(in-order LOADcnt/DScnt, §Waits)", "§Hazards 4/5, §Waits"),
]


@dataclass(frozen=True)
class Latencies:
    valu: int = VALU_LATENCY
    trans: int = TRANS_LATENCY
    trans_busy: int = TRANS_BUSY
    wmma_extra: int = WMMA_EXTRA
    salu: int = SALU_LATENCY
    lds: int = LDS_LATENCY
    lds_bytes_per_clk: float = LDS_BYTES_PER_CLK
    global_: int = GLOBAL_LATENCY
    smem: int = SMEM_LATENCY
    barrier: int = BARRIER_LATENCY
    branch: int = BRANCH_TAKEN
    ports: int = 2                      # 2: vector + scalar/memory issue per clock; 1: one issue per SIMD per clock
    trans_overlaps_wmma: bool = False   # variant: a WMMA may start while the TRANS pipeline drains
    valu_overlaps_wmma: bool = False    # variant: VALU/TRANS of any wave may issue while a WMMA holds the matrix unit
    trans_overlaps_valu: bool = True    # False: a TRANS op holds the SIMD's vector issue for trans_busy clocks
    vopd_clocks: int = 1                # vector issue clocks of a VOPD v_dual_* pair (2: no dual-issue gain)
    wmma_counts_vdst: bool = False      # variant: in-flight WMMA results hold DS/VMEM issue (VA_VDST)
    barrier_colocated: bool = False     # variant: a barrier waits for all waves of the SIMD (one workgroup)
    setprio: bool = True                # s_setprio orders the arbitration (False: every wave alike, the old rule)
    wg_waves: int = 0                   # waves of one workgroup on this SIMD (0: each wave its own workgroup
                                        # slice, released by its own signal); barrier_colocated overrides


@dataclass(frozen=True)
class Op:
    """One decoded instruction of the simulated stream."""
    mnemonic: str
    cls: str                        # classify(): WMMA, VALU, TRANS, LDS, VMEM_LOAD, ...
    vector: bool                    # issues on the vector port
    srcs: tuple[int, ...]
    dsts: tuple[int, ...]
    wmma_cycles: int = 0
    mem_bytes: int = 0
    waits: tuple[tuple[str, int], ...] = ()     # s_wait_*: (counter, max outstanding)
    wait_alu: str = ""              # s_wait_alu depctr field
    nop: int = 0                    # s_nop N: N extra clocks
    taken: bool = False             # a branch the stream follows to a non-adjacent address
    lds_clocks: float = 0.0         # LDS time of this access as this SIMD sees it (0: mem_bytes / bandwidth)
    prio: int = -1                  # s_setprio N: the wave's new issue priority (-1: not an s_setprio)


def decode(ins: Inst, taken: bool = False) -> Op:
    m, c = ins.mnemonic, classify(ins.mnemonic)
    ops = ins.operands
    srcs, dsts = reads_writes(ins)
    waits: list[tuple[str, int]] = []
    wait_alu, nop = "", 0
    if m.startswith("s_wait_") and m != "s_wait_alu":
        imm = int(ops.split()[0], 0) if ops.strip() else 0
        name = m[len("s_wait_"):]
        if name == "idle":
            waits = [("load", 0), ("ds", 0), ("km", 0), ("store", 0)]
        elif name in ("loadcnt_dscnt", "storecnt_dscnt"):    # §Waits: imm = cnt << 8 | dscnt
            waits = [(name.split("cnt")[0], imm >> 8 & 0x3F), ("ds", imm & 0x3F)]
        elif name in ("loadcnt", "dscnt", "kmcnt", "storecnt"):
            waits = [(name[:-3], imm)]
        # expcnt/samplecnt/bvhcnt: nothing in these loops increments them
    elif m == "s_wait_alu":
        wait_alu = ops.split("(")[0].strip()
    elif m == "s_nop":
        nop = int(ops.split()[0], 0) if ops.strip() else 0
    prio = int(ops.split()[0], 0) & 3 if m == "s_setprio" and ops.strip() else -1
    mem = wave_bytes(m) if c in ("LDS", "VMEM_LOAD", "VMEM_STORE") and not m.startswith(("global_inv", "global_wb")) \
        else 0
    return Op(m, c, c in ("VALU", "TRANS", "WMMA"), srcs, dsts,
              wmma_cycles(m) if c == "WMMA" else 0, mem, tuple(waits), wait_alu, nop, taken, prio=prio)


def decode_path(path: list[Inst], body: list[Inst] | None = None) -> list[Op]:
    """Decode a loop path; a branch is 'taken' where the path's next instruction is not the next in the body."""
    order = {ins.addr: k for k, ins in enumerate(body or path)}
    out = []
    for k, ins in enumerate(path):
        nxt = path[(k + 1) % len(path)]
        taken = classify(ins.mnemonic) == "BRANCH" and order.get(nxt.addr, -1) != order.get(ins.addr, -2) + 1
        out.append(decode(ins, taken))
    return out


# stall categories of the SIMD's cycles (the report groups them)
CATEGORIES = ("WMMA", "VALU issue", "scalar/memory issue", "TRANS pipeline", "dep: VALU result",
              "dep: TRANS result", "dep: WMMA result", "dep: SALU result", "VA_VDST (memory issue waits VALU)",
              "waiting on LDS", "waiting on global", "waiting on SMEM", "barrier", "branch / s_nop")
_PRODUCER = {"VALU": "dep: VALU result", "TRANS": "dep: TRANS result", "WMMA": "dep: WMMA result",
             "SALU": "dep: SALU result"}
_COUNTER_REASON = {"ds": "waiting on LDS", "load": "waiting on global", "store": "waiting on global",
                   "km": "waiting on SMEM"}


class _Wave:
    def __init__(self, n_ops: int, group: int = 0):
        self.group = group                      # workgroup index among the SIMD's waves (barriers)
        self.pc = 0
        self.iteration = 0
        self.done_at: list[int] = []            # clock of each completed iteration
        self.next_issue = 0
        self.last_issue = -1
        self.ready = [0] * NREGS
        self.producer = ["VALU"] * NREGS
        self.cnt = {"load": [], "ds": [], "km": [], "store": []}   # completion clocks of outstanding ops
        self.vdst_ready = 0                      # VA_VDST: all outstanding VALU VGPR writes done
        self.valu_sgpr_ready = 0
        self.salu_sgpr_ready = 0
        self.signals: list[int] = []
        self.waits_done = 0
        self.cache: tuple[int, str] | None = None   # (earliest clock, reason) of the head op, wave-local part
        self.done = False
        self.prio = 0                            # s_setprio: the wave's issue priority (0..3)


@dataclass
class SimResult:
    """Steady state of the simulated loop on one SIMD."""
    waves: int
    iterations: int
    cycles_per_iter: float          # SIMD clocks per wave-iteration (throughput: all waves together)
    tiles_per_iter: int
    breakdown: dict[str, float]     # share of the SIMD's clocks in the measured window, by category
    trace: list[tuple[int, int, int, int]] = field(default_factory=list)   # (clock, wave, iteration, op index)
    total_cycles: int = 0

    @property
    def cycles_per_tile(self) -> float:
        return self.cycles_per_iter / self.tiles_per_iter

    @property
    def binding(self) -> str:
        """The largest share of the SIMD's clocks, plus the second where it takes >= 10 %."""
        top = sorted(self.breakdown, key=self.breakdown.get, reverse=True)
        return top[0] + (f"+{top[1]}" if self.breakdown[top[1]] >= 0.10 else "")


def simulate(ops: list[Op], waves: int, iterations: int = 12, lat: Latencies = Latencies(),
             tiles_per_iter: int = 1, warmup: int | None = None, trace: bool = False,
             max_cycles: int = 50_000_000, variants: list[list[Op]] | None = None,
             order: list[int] | None = None, once: bool = False) -> SimResult:
    """Run `waves` waves of the loop body `ops` on one SIMD for `iterations` iterations each.

    once: straight-line code (prologue/epilogue): every wave runs `ops` once; the result's total_cycles is the
    clock at which the last wave finished (cycles_per_iter = total / waves).

    variants/order: iteration k of every wave runs variants[order[k % len(order)]] instead of `ops` (paths
    through the loop with or without its data-dependent blocks, mixed as often as they run).

    Throughput = wave-iterations completed between the warm-up point (every wave past `warmup` iterations) and the
    first wave's last iteration, over those clocks (progress interpolated linearly inside an iteration)."""
    if waves < 1:
        raise ValueError(f"waves: expected >= 1 wave per SIMD, got {waves}")
    variants = variants or [ops]
    order = order or [0]
    if not all(variants) or not all(0 <= k < len(variants) for k in order):
        raise ValueError("ops/variants: expected non-empty instruction streams and order indices into variants")
    if once:
        iterations, warmup = 1, 0
    elif iterations < 2:
        raise ValueError(f"iterations: expected >= 2, got {iterations}")
    warmup = max(1, iterations // 4) if warmup is None else warmup
    ws = [_Wave(len(variants[order[0]]), i // lat.wg_waves if lat.wg_waves else i) for i in range(waves)]
    matrix_free = trans_free = lds_free = 0
    vport_free, vport_why = 0, "VALU issue"     # the vector issue held by a VOPD's 2nd clock or a blocking TRANS
    now = 0
    counts = dict.fromkeys(CATEGORIES, 0.0)
    marks: list[tuple[int, str, int]] = []       # (clock, category, clocks): attributed in the window afterwards
    tr = []

    def outstanding_ok(lst: list[int], n: int) -> int:
        """Earliest clock at which at most n of these completions are still pending."""
        if len(lst) <= n:
            return 0
        return sorted(lst)[len(lst) - n - 1]

    def local(w: _Wave, op: Op) -> tuple[int, str]:
        t, why = w.next_issue, "branch / s_nop" if w.next_issue > 0 and w.cache == (-1, "") else "issue"
        for r in op.srcs:
            if w.ready[r] > t:
                t, why = w.ready[r], _PRODUCER[w.producer[r]]
        for name, n in op.waits:
            x = outstanding_ok(w.cnt[name], n)
            if x > t:
                t, why = x, _COUNTER_REASON[name]
        if op.wait_alu:
            x = {"depctr_va_vdst": w.vdst_ready, "depctr_va_sdst": w.valu_sgpr_ready,
                 "depctr_va_vcc": w.ready[NAMED["vcc_lo"]], "depctr_sa_sdst": w.salu_sgpr_ready}.get(op.wait_alu, 0)
            if x > t:
                t, why = x, "dep: SALU result" if op.wait_alu == "depctr_sa_sdst" else "dep: VALU result"
        if op.cls in ("LDS", "VMEM_LOAD", "VMEM_STORE") and w.vdst_ready > t:
            t, why = w.vdst_ready, "VA_VDST (memory issue waits VALU)"
        return t, why

    def barrier_ready(w: _Wave) -> int | None:
        k = w.waits_done
        if lat.barrier_colocated or lat.wg_waves > 1:
            mates = ws if lat.barrier_colocated else ws[w.group * lat.wg_waves:(w.group + 1) * lat.wg_waves]
            if any(len(x.signals) <= k for x in mates):
                return None                     # a mate has not signalled yet: wait for it
            return max(x.signals[k] for x in mates) + lat.barrier
        return w.signals[k] + lat.barrier if len(w.signals) > k else None

    while True:
        active = [w for w in ws if not w.done]
        if not active:
            break
        if now > max_cycles:
            raise RuntimeError(f"simulation did not finish within {max_cycles} clocks (deadlock in the stream?)")
        issued_v = issued_s = 0
        issued_cls = ""
        best_t, best_why = None, ""
        # arbitration: the highest s_setprio priority first (docs/rdna4.md §Throughput "s_setprio"), then the
        # ready wave that has waited longest since it last issued (round-robin, oldest first)
        for wi in sorted(range(waves), key=lambda i: (-ws[i].prio if lat.setprio else 0, ws[i].last_issue, i)):
            w = ws[wi]
            if w.done:
                continue
            ops = variants[order[w.iteration % len(order)]]
            op = ops[w.pc]
            if w.cache is None or w.cache[0] < 0:
                w.cache = local(w, op)
            t, why = w.cache
            if op.mnemonic == "s_barrier_wait":
                b = barrier_ready(w)
                if b is None:
                    t, why = max(t, now + 1), "barrier"
                elif b > t:
                    t, why = b, "barrier"
            if op.vector:
                if matrix_free > t and (op.cls == "WMMA" or not lat.valu_overlaps_wmma):
                    t, why = matrix_free, "WMMA"
                if vport_free > t:
                    t, why = vport_free, vport_why
                if op.cls == "TRANS" and trans_free > t:
                    t, why = trans_free, "TRANS pipeline"
                if op.cls == "WMMA" and not lat.trans_overlaps_wmma and trans_free > t:
                    t, why = trans_free, "TRANS pipeline"
            if t > now:
                if best_t is None or t < best_t:
                    best_t, best_why = t, why
                continue
            if lat.ports == 1:
                if issued_v or issued_s:
                    continue
            elif (issued_v if op.vector else issued_s):
                continue
            # ---- issue op of wave w at clock `now`
            if op.vector:
                issued_v, issued_cls = 1, op.cls
            else:
                issued_s = 1
            if trace:
                tr.append((now, wi, w.iteration, w.pc))
            nxt = now + 1
            w.last_issue = now
            if op.cls == "WMMA":
                matrix_free = now + op.wmma_cycles
                ready, kind = now + op.wmma_cycles + lat.wmma_extra, "WMMA"
            elif op.cls == "TRANS":
                trans_free = now + lat.trans_busy
                # a slower pipeline delivers its result later by the same clocks (TRANS_LATENCY at TRANS_BUSY)
                ready, kind = now + lat.trans + max(0, lat.trans_busy - TRANS_BUSY), "TRANS"
                if not lat.trans_overlaps_valu:
                    vport_free, vport_why = now + lat.trans_busy, "TRANS pipeline"
            elif op.cls == "VALU":
                ready, kind = now + lat.valu, "VALU"
                if lat.vopd_clocks > 1 and op.mnemonic.startswith("v_dual_"):
                    vport_free, vport_why = now + lat.vopd_clocks, "VALU issue"
            else:
                ready, kind = now + lat.salu, "SALU"
            if op.cls == "LDS":
                start = max(now, lds_free)
                lds_free = start + (op.lds_clocks or op.mem_bytes / lat.lds_bytes_per_clk)
                prev = w.cnt["ds"][-1] if w.cnt["ds"] else 0
                w.cnt["ds"].append(max(math.ceil(lds_free) + lat.lds, prev))
            elif op.cls in ("VMEM_LOAD", "VMEM_STORE"):
                name = "load" if op.cls == "VMEM_LOAD" else "store"
                prev = w.cnt[name][-1] if w.cnt[name] else 0
                w.cnt[name].append(max(now + lat.global_, prev))
            elif op.cls == "SMEM":
                w.cnt["km"].append(now + lat.smem)
            elif op.mnemonic == "s_barrier_signal":
                w.signals.append(now)
            elif op.mnemonic == "s_barrier_wait":
                w.waits_done += 1
            if op.prio >= 0:
                w.prio = op.prio
            if op.cls not in ("LDS", "VMEM_LOAD", "VMEM_STORE", "SMEM"):   # memory results: through the counters
                for r in op.dsts:
                    w.ready[r], w.producer[r] = ready, kind
                    if r < SGPR0:
                        if kind in ("VALU", "TRANS") or (kind == "WMMA" and lat.wmma_counts_vdst):
                            w.vdst_ready = max(w.vdst_ready, ready)
                    elif kind == "SALU":
                        w.salu_sgpr_ready = max(w.salu_sgpr_ready, ready)
                    else:
                        w.valu_sgpr_ready = max(w.valu_sgpr_ready, ready)
            if op.taken:
                nxt += lat.branch
            nxt += op.nop
            w.next_issue = nxt
            for name, lst in w.cnt.items():             # forget completed memory ops
                if len(lst) > 64:
                    w.cnt[name] = [x for x in lst if x > now]
            w.pc += 1
            w.cache = (-1, "") if (op.taken or op.nop) else None
            if w.pc == len(ops):
                w.pc = 0
                w.iteration += 1
                w.done_at.append(now + 1)
                if w.iteration == iterations:
                    w.done = True
        if issued_v or issued_s:
            if issued_v:
                cat = "WMMA" if issued_cls == "WMMA" else "VALU issue"
            else:
                cat = "WMMA" if matrix_free > now else "scalar/memory issue"
            marks.append((now, cat, 1))
            now += 1
        else:
            if best_t is None:
                break
            gap = best_t - now
            busy = max(0, min(best_t, matrix_free) - now)
            if busy:
                marks.append((now, "WMMA", busy))
            if gap - busy:
                marks.append((now + busy, best_why if best_why != "issue" else "scalar/memory issue", gap - busy))
            now = best_t

    if once:
        return SimResult(waves, 1, now / waves, tiles_per_iter, {k: 0.0 for k in counts}, tr, now)
    # steady-state window: every wave past `warmup` iterations .. the first wave to finish
    t0 = max(w.done_at[warmup - 1] for w in ws)
    t1 = min(w.done_at[-1] for w in ws)
    if t1 <= t0:
        raise ValueError(f"iterations: {iterations} is too few for a steady-state window after {warmup} warm-up "
                         f"iterations with {waves} waves")

    def progress(w: _Wave, t: float) -> float:
        prev_t, k = 0, 0
        for k, d in enumerate(w.done_at):
            if t <= d:
                return k + (t - prev_t) / (d - prev_t) if d > prev_t else k
            prev_t = d
        return float(len(w.done_at))

    done = sum(progress(w, t1) - progress(w, t0) for w in ws)
    for start, cat, n in marks:
        lo, hi = max(start, t0), min(start + n, t1)
        if hi > lo:
            counts[cat] += hi - lo
    total = t1 - t0
    return SimResult(waves, iterations, total / done, tiles_per_iter,
                     {k: v / total for k, v in counts.items()}, tr, now)


def steady_paths(km: "KernelModel", iterations: int) -> tuple[list[list[Inst]], list[int], str]:
    """The loop paths the simulator runs and their order: with dynamic counts, iteration k takes the path that
    keeps the running class counts nearest k x the emulator's steady-state mix (error diffusion), so
    data-dependent blocks (the O rescale) run as often as in the emulator, over the paths through the instructions
    the emulator executed (km.executed: the attn_mask/varlen blocks a run never takes stay out, else their
    combinations pass iteration_paths' limit); with static counts the longest path."""
    if km.mix is km.static:
        path, _ = longest_iteration(km.insts, km.loop)
        return [path], [0], "longest path every iteration (static counts)"
    paths = iteration_paths(km.insts, km.loop, executed=km.executed)
    target = {c: v * km.tiles_per_iter for c, v in km.mix.counts().items()}
    used, order = diffuse_paths(paths, target, iterations)
    desc = ", ".join(f"{len(p)} insts x {order.count(i)}" for i, p in enumerate(used))
    return used, order, f"{len(paths)} paths; per {iterations} iterations: {desc} (nearest the emulator's mix)"


def diffuse_paths(paths: list[list], target: dict, iterations: int) -> tuple[list[list], list[int]]:
    """Error diffusion over loop paths: iteration k takes the path that keeps the running class counts nearest
    k x `target` (per-iteration counts by class). Returns the paths used and, per iteration, an index into them."""
    cnts = [Mix.of(p).counts() for p in paths]
    acc = dict.fromkeys(CLASSES, 0.0)
    order = []
    for k in range(1, iterations + 1):
        j = min(range(len(paths)), key=lambda j: sum(abs(acc[c] + cnts[j][c] - k * target[c]) for c in CLASSES))
        order.append(j)
        for c in CLASSES:
            acc[c] += cnts[j][c]
    used = sorted(set(order))
    remap = {j: i for i, j in enumerate(used)}
    return [paths[j] for j in used], [remap[j] for j in order]


def simulate_kernel(km: "KernelModel", lat: Latencies = Latencies(), iterations: int | None = None,
                    waves: int | None = None) -> SimResult:
    its = iterations or max(12, math.ceil(32 / km.tiles_per_iter))
    paths, order, _ = steady_paths(km, its)
    body = [i for i in km.insts if km.loop.contains(i.addr)]
    streams = [decode_path(p, body) for p in paths]
    return simulate(streams[0], waves or km.waves, its, lat, km.tiles_per_iter, variants=streams, order=order)


def latency_sensitivity(km: "KernelModel") -> list[tuple[str, SimResult]]:
    base = Latencies()
    rows = [("chosen latencies", base),
            (f"global load {GLOBAL_LATENCY * 2} clk", replace(base, global_=GLOBAL_LATENCY * 2)),
            ("global load 300 clk (L2 hit)", replace(base, global_=300)),
            (f"LDS latency {LDS_LATENCY * 2} clk", replace(base, lds=LDS_LATENCY * 2)),
            ("LDS latency 20 clk (LLVM generic)", replace(base, lds=20)),
            ("WMMA result + 12 clk", replace(base, wmma_extra=12)),
            ("in-flight WMMA counts toward VA_VDST", replace(base, wmma_counts_vdst=True)),
            ("barrier: the SIMD's waves form the workgroup", replace(base, barrier_colocated=True)),
            ("one issue per SIMD per clock", replace(base, ports=1)),
            ("TRANS pipeline overlaps WMMA", replace(base, trans_overlaps_wmma=True))]
    out = [(name, simulate_kernel(km, lat)) for name, lat in rows]
    return out + [(f"{w} wave{'s' if w > 1 else ''} per SIMD (chosen latencies)", simulate_kernel(km, base, waves=w))
                  for w in (2, 1) if w < km.waves]

