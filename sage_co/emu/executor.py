"""Scheduler and dispatch of the gfx1201 executor.

All resident waves of a launch batch advance together as numpy arrays (the register layout is described in
state.py). Each step takes the waves at the smallest PC among the runnable ones and runs that instruction once over
them. `sel` is ALL (slice(None): views, no gathers -- the lockstep common case) or an int index array of waves.
Handlers are closures built lazily the first time an instruction executes, with operand accessors bound.
A handler returns None (fall through), an int (branch target index, uniform), an int array (per-wave
targets for `sel`), END, or BLOCK (barrier wait not satisfied for some waves: handled by the scheduler).

Dispatch: BUILDERS maps an encoding to the handler builders asked in order; a builder (salu.build, valu.build,
memory_ops.build, or an extension module's) returns None for an instruction it does not implement, and the next one
is asked. A new instruction group hooks in by adding its builder to the tuples of its encodings.
"""
from __future__ import annotations

import ctypes
import gc
import threading
import time
import weakref

import numpy as np

from sage_co.emu import atomic_ops, flat_ops, memory_ops, salu, sanitizer, scalar_float, text, trace, valu, valu_ops
from sage_co.emu.facts import CALL_INSTS, CLASSES, facts
from sage_co.emu.operands import Ops
from sage_co.emu.state import ALL, END, EXEC, TTMP0, EmuError, State, pack_lanes

MAX_RESIDENT_WAVES = 2048
LDS_LIMIT = 65536            # bytes of LDS one workgroup may allocate (docs/rdna4.md §Occupancy)


class _Memo:
    """A read-only sequence of n values, each made by fn(index) on first use."""
    __slots__ = ("_fn", "_values")

    def __init__(self, n: int, fn):
        self._fn, self._values = fn, [None] * n

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, n: int):
        v = self._values[n]
        if v is None:
            v = self._values[n] = self._fn(n)
        return v

    def __iter__(self):
        return (self[n] for n in range(len(self._values)))

    def __eq__(self, other):
        return list(self) == list(other)


class Program:
    """One kernel of a Module: its instruction list from the entry point, branch-target map, static info."""

    def __init__(self, module, kernel):
        self.module, self.kernel, self.name = module, kernel, kernel.name
        # only the kernel's bytes are decoded (a prepare code object has ~30 kernels); without a symbol size, up to
        # the end of .text
        end = kernel.entry + kernel.code_size if kernel.code_size else len(module.co.text)
        insts = module.range_insts(kernel.entry, end)
        # A kernel that calls (s_swappc_b64 / s_call_b64) may reach any function of the code object: its program is
        # then the whole .text, entered at the kernel's entry (docs/rdna4.md §Calls). s_setpc_b64 alone is a jump
        # (LLVM's long branch in a kernel over 128 KiB): its program stays the kernel, and a target outside it stops
        # the run (code_index).
        if any(i.name in CALL_INSTS and i.name != "s_setpc_b64" for i in insts):
            insts = list(module.insts)
        self.insts = insts
        self.index = {i.offset: n for n, i in enumerate(insts)}
        self.offsets = np.array([i.offset for i in insts], dtype=np.int64)     # ascending: decode order
        self.text_addr = module.co.text_addr
        d = kernel.descriptor
        # The hardware gives a wave the VGPRs its descriptor asks for, nothing more; an access past them is refused
        # (operand checks below). Metadata that says the code uses more is refused up front.
        self.nvgpr = d.vgpr_count
        used = int(kernel.metadata.get(".vgpr_count", 0))
        if used > self.nvgpr:
            raise EmuError(f"kernel {self.name}: the metadata says the code uses {used} VGPRs but the descriptor "
                           f"allocates {self.nvgpr}; a wave would touch VGPRs it does not own")
        self.lds_bytes = int(d.group_segment_fixed_size)
        self.denorm32 = int(d.float_denorm_mode_32)
        self.denorm16 = int(d.float_denorm_mode_16_64)
        for nm in ("float_round_mode_32", "float_round_mode_16_64"):
            if getattr(d, nm) != 0:
                raise EmuError(f"kernel {self.name}: {nm}={getattr(d, nm)}; only round-to-nearest-even (0) is "
                               f"emulated")
        # MODE.FP16_OVFL can be set only from the descriptor or by s_setreg: otherwise f16 results need no check
        self.fp16_ovfl_possible = bool(d.fp16_ovfl) or any(i.name.startswith("s_setreg") for i in insts)
        self.exec_count = np.zeros(len(insts) + 1, dtype=np.int64)   # wave-instructions per PC index
        self.kept: dict = {}        # batch shape -> (State, Ops) of a finished batch (_keep_state)
        # per instruction, made on first use: a program that is the whole .text (a long branch through s_setpc in a
        # large kernel) runs a small part of it, and the facts of 1.8 M instructions took ~13 s per kernel
        self.facts = _Memo(len(insts), lambda n: facts(insts[n]))
        self.cls = _Memo(len(insts), lambda n: self.facts[n].cls)
        self.yields = _Memo(len(insts), lambda n: insts[n].name.startswith(YIELDS))   # see YIELDS

    def target(self, pc: int, simm16: int) -> int:
        """Index of a SOPP branch target: byte offset = offset + 4 + simm16*4 (signed)."""
        i = self.insts[pc]
        off = i.offset + 4 + (((simm16 & 0xFFFF) ^ 0x8000) - 0x8000) * 4
        if off not in self.index:
            raise EmuError(f"kernel {self.name}: branch at 0x{i.offset:x} to 0x{off:x}, not an instruction")
        return self.index[off]

    def code_index(self, pc: int, addr: np.ndarray):
        """PC indices of the 64-bit code addresses `addr` (one per wave; s_setpc/s_swappc targets): an int when all
        are one instruction, else an int array. An address that is not an instruction of this code object stops the
        run."""
        addr = np.asarray(addr, dtype=np.uint64)
        first = int(addr.flat[0])
        if (addr == addr.flat[0]).all():
            n = self.index.get(first - self.text_addr)
            if n is None:
                self.fail_jump(pc, first)
            return n
        off = addr.astype(np.int64) - self.text_addr
        k = np.clip(np.searchsorted(self.offsets, off), 0, len(self.offsets) - 1)
        bad = self.offsets[k] != off
        if bad.any():
            self.fail_jump(pc, int(addr[np.flatnonzero(bad)[0]]))
        return k

    def fail_jump(self, pc: int, addr: int):
        raise EmuError(f"kernel {self.name} pc 0x{self.insts[pc].offset:x} `{self.text(pc)}`: jump to address "
                       f"0x{addr:x}, which is not an instruction of its program (the kernel; the whole .text if it calls)")

    def text(self, pc: int) -> str:
        try:
            return text.inst_text(self.insts[pc])
        except Exception:       # naming an instruction in an error message must never raise
            return self.insts[pc].name


# ------------------------------------------------------------------------------------------------ building
_SALU, _MEM, _VALU = (salu.build,), (memory_ops.build,), (valu.build,)
_SF = (scalar_float.build,)      # gfx12 scalar-float group first (SALU f32/f16, v_s_* transcendentals)
_MEM_ATOMIC = _MEM + (atomic_ops.build,)     # atomics memory_ops does not do: with return, 64-bit, cmpswap, ...
BUILDERS = {"SOP1": _SF + _SALU, "SOP2": _SF + _SALU, "SOPK": _SALU, "SOPC": _SF + _SALU, "SOPP": _SALU,
            "SMEM": _MEM, "DS": _MEM_ATOMIC, "VGLOBAL": _MEM_ATOMIC, "VBUFFER": _MEM, "VFLAT": (flat_ops.build,),
            "VSCRATCH": _MEM,
            "VOP1": _VALU, "VOP2": _VALU, "VOPC": _VALU, "VOP3": _SF + _VALU, "VOP3SD": _VALU, "VOP3P": _VALU,
            "VOPD": _VALU}


def build_handler(st: State, ops: Ops, pc: int):
    inst = st.prog.insts[pc]
    enc = inst.enc
    h = None
    try:
        for build in BUILDERS[enc]:
            h = build(st, ops, inst, pc)
            if h is not None:
                break
    except EmuError as e:
        if str(e).startswith("kernel "):
            raise
        st.fail(pc, str(e))
    if h is None:
        st.fail(pc, f"instruction {inst.name} ({enc} opcode {inst.opcode}) is not implemented by the emulator")
    if st.prog.fp16_ovfl_possible and inst.name in valu_ops.FP16_OVFL_UNEMULATED:
        h = valu_ops.fp16_ovfl_refused(st, pc, h)
    if st.sanitize:
        h = sanitizer.Checked(st, sanitizer.check_plan(inst, st.prog.facts[pc]), pc, h)
    st.handlers[pc] = h
    return h


# ------------------------------------------------------------------------------------------------ run
class Stats(dict):
    """Run statistics: instruction counts by class (wave-instructions), waves, workgroups, wall time. The
    per-instruction counts are the attribute `exec_counts` (not an item, so the items stay scalars to print or
    compare): {byte offset in .text: wave-instructions executed}, only the instructions that ran."""

    def __init__(self, counts=(), exec_counts=None):
        super().__init__(counts)
        self.exec_counts: dict[int, int] = dict(exec_counts or {})

    def __repr__(self):
        return "Stats(" + ", ".join(f"{k}={v}" for k, v in self.items()) + ")"


def _init_batch(st: State, prog: Program, grid, block, wg_lo: int, nwg: int, wpg: int, kernarg_va, dispatch_va,
                queue_va):
    d = prog.kernel.descriptor
    st.grid, st.block = grid, block
    wg_local = np.repeat(np.arange(nwg), wpg)
    st.wave_wg[:] = wg_local            # in place: handlers of a reused State hold these arrays (State.reset)
    st.wave_in_wg[:] = np.tile(np.arange(wpg), nwg)
    st.wg_id[:] = wg_lo + wg_local
    gx, gy, gz = grid
    wx, wy, wz = st.wg_id % gx, st.wg_id // gx % gy, st.wg_id // (gx * gy)
    # user SGPRs from s0 in the fixed order (docs/rdna4.md §Entry)
    s = 0
    for enabled, va in ((d.enable_sgpr_dispatch_ptr, dispatch_va), (d.enable_sgpr_queue_ptr, queue_va),
                        (d.enable_sgpr_kernarg_segment_ptr, kernarg_va), (d.enable_sgpr_dispatch_id, 0)):
        if enabled:
            st.S[s] = va & 0xFFFFFFFF
            st.S[s + 1] = va >> 32
            s += 2
    if d.enable_sgpr_private_segment_size:
        st.S[s] = d.private_segment_fixed_size
        s += 1
    # system SGPRs after the user SGPRs (traditional ABI; LLVM 22 reads the architected ttmp copies instead)
    s = max(s, d.user_sgpr_count)
    for en, val in ((d.enable_sgpr_workgroup_id_x, wx), (d.enable_sgpr_workgroup_id_y, wy),
                    (d.enable_sgpr_workgroup_id_z, wz)):
        if en and s < 106:
            st.S[s] = val
            s += 1
    # architected SGPRs (docs/rdna4.md §Entry): ttmp9 = workgroup id x, ttmp7 = y | z << 16, ttmp8[29:25] = wave id
    # in the workgroup. The other ttmp8 bits and ttmp0-6/10-15 are trap-handler state that no compiler reads: zero.
    st.S[TTMP0 + 9] = wx
    st.S[TTMP0 + 7] = (wy & 0xFFFF) | (wz << 16)
    st.S[TTMP0 + 8] = (st.wave_in_wg & 0x1F) << 25
    # packed work-item ids in v0, EXEC = live lanes
    bx, by, bz = block
    nthreads = bx * by * bz
    tid = st.wave_in_wg[:, None] * 32 + np.arange(32)[None, :]
    live = tid < nthreads
    tx, ty, tz = tid % bx, tid // bx % by, tid // (bx * by)
    st.V[0] = np.where(live, tx | (ty << 10) | (tz << 20), 0).astype(np.uint32)
    st.S[EXEC] = pack_lanes(live)
    st.refresh_exec()
    # MODE register from the descriptor (docs/rdna4.md §Entry): round and denorm modes, FP16_OVFL
    st.mode[:] = (d.float_round_mode_32 | d.float_round_mode_16_64 << 2 | d.float_denorm_mode_32 << 4 |
                  d.float_denorm_mode_16_64 << 6 | d.fp16_ovfl << 23)
    st.pc[:] = prog.index[prog.kernel.entry]


# glibc's heap: a run frees and reallocates the same large numpy temporaries (WMMA operands in f64, LDS gathers:
# 0.1-2 MiB each) on every step. Depending on what the process allocated before (torch), glibc's dynamic thresholds
# may still be low, and then each such free unmaps the block or trims the top of the heap and the next allocation
# faults the pages in again: measured 4.7 s instead of 3.1 s for the Triton INT8/FP8 attention at S = 4096 under
# pytest. The first run therefore sets the two thresholds to where glibc's dynamic adjustment ends on 64-bit
# (mmap threshold 32 MiB, trim threshold twice that), for the rest of the process.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3                 # mallopt(3) parameter numbers
MMAP_THRESHOLD = 32 << 20                                   # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
_heap_tuned = False


def _tune_heap():
    global _heap_tuned
    _heap_tuned = True
    try:
        mallopt = ctypes.CDLL(None).mallopt     # glibc (musl: a no-op); absent on other C libraries
    except (OSError, AttributeError):
        return
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    mallopt(M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD)


def run(prog: Program, grid, block, **kw):
    """Run the whole grid. Python's cyclic GC is paused meanwhile: a run allocates many small closures (the
    instruction handlers) but no reference cycles, and full collections triggered by torch's live objects cost
    ~0.2 s per launch. The first run sets the C heap's thresholds (_tune_heap above)."""
    if not _heap_tuned:
        _tune_heap()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _run(prog, grid, block, **kw)
    finally:
        if was_enabled:
            gc.enable()


def _run(prog: Program, grid, block, *, kernarg_va, dispatch_va=0, queue_va=0, sanitize=True,
         lds_race_check=False, trace_wave=None, dynamic_lds=0, progress=None):
    t0 = time.perf_counter()
    nthreads = block[0] * block[1] * block[2]
    wpg = (nthreads + 31) // 32
    total_wg = grid[0] * grid[1] * grid[2]
    lds_bytes = prog.lds_bytes + int(dynamic_lds)      # static group segment + the launch's dynamic LDS
    if lds_bytes > LDS_LIMIT:
        raise EmuError(f"kernel {prog.name}: group segment {prog.lds_bytes} B + dynamic_lds {int(dynamic_lds)} B "
                       f"exceeds the {LDS_LIMIT // 1024} KiB LDS limit of a workgroup")
    per_batch = max(1, MAX_RESIDENT_WAVES // wpg)
    tracer = trace.Tracer(trace_wave) if trace_wave is not None else None
    prog.exec_count[:] = 0
    mem_dev = prog.module.device
    steps = 0
    for wg_lo in range(0, total_wg, per_batch):
        nwg = min(per_batch, total_wg - wg_lo)
        st, ops = _batch_state(prog, nwg * wpg, nwg, sanitize, lds_race_check, lds_bytes, mem_dev, tracer)
        _init_batch(st, prog, grid, block, wg_lo, nwg, wpg, kernarg_va, dispatch_va, queue_va)
        if tracer is not None:
            tracer.attach(st)
        with np.errstate(all="ignore"):
            steps += _run_batch(st, ops, tracer)
        _keep_state(prog, st, ops, tracer)
        if progress is not None:   # progress(workgroups done, total): the CLI's progress bar on long runs
            progress(wg_lo + nwg, total_wg)
    counts = {c: 0 for c in CLASSES}
    ec = prog.exec_count
    executed = np.flatnonzero(ec[:len(prog.insts)])
    for pc in executed.tolist():
        counts[prog.cls[pc]] += int(ec[pc])
    out = Stats(counts, {prog.insts[n].offset: int(ec[n]) for n in executed})
    out["wave_instructions"] = int(ec.sum())
    out["steps"] = steps
    out["waves"] = total_wg * wpg
    out["workgroups"] = total_wg
    out["wall_s"] = time.perf_counter() - t0
    if tracer is not None:
        out["trace"] = tracer.lines
    return out


# The State of a finished batch is kept for the next batch or launch of the same Program with the same shape: its
# handlers (built on an instruction's first execution, ~0.15 ms each) are then built once, not per launch -- an
# unrolled prepare kernel runs ~6,000 instructions once each. A launch of several batches keeps one State per batch
# shape (the last batch is usually smaller). The States live on their Program (Program.kept: they go when its module
# does) and hold no device arena; KEPT_BYTES bounds the memory all of them hold (one of 2,048 waves holds 64 MiB of
# VGPRs at 256 VGPRs) and KEPT_HANDLERS the handlers, the oldest going first: each kept handler is ~15 objects that
# Python's collector scans on every full collection.
# A traced run neither takes nor leaves one.
KEPT_BYTES = 384 << 20
KEPT_HANDLERS = 100_000
_kept_order: dict = {}      # (weakref to a Program, shape) -> (bytes, handlers), oldest first
_kept_lock = threading.Lock()       # launches on several Devices may run in threads: a State serves one at a time


def _state_bytes(st: State) -> int:
    return st.V.nbytes + st.lds.nbytes + st.spend.nbytes + sum(a.nbytes for a in st.vpend.values()) + \
        st.race_writer.nbytes * 2 + (st.private.nbytes if st.private is not None else 0)


def _shape(W: int, nwg: int, sanitize: bool, lds_race_check: bool, lds_bytes: int) -> tuple:
    """What a kept State must match to serve a batch (its arrays' sizes and what its handlers were built for)."""
    return W, nwg, bool(sanitize), bool(lds_race_check), int(lds_bytes)


def _batch_state(prog: Program, W: int, nwg: int, sanitize: bool, lds_race_check: bool, lds_bytes: int, device,
                 tracer):
    shape = _shape(W, nwg, sanitize, lds_race_check, lds_bytes)
    with _kept_lock:
        kept = prog.kept.pop(shape, None) if tracer is None else None
        if kept is not None:
            _kept_order.pop((weakref.ref(prog), shape), None)
    if kept is not None:
        st, ops = kept
        st.reset(device)
        return st, ops
    st = State(prog, W, nwg, sanitize=sanitize, lds_race_check=lds_race_check, lds_bytes=lds_bytes, device=device)
    return st, Ops(st)


def _keep_state(prog: Program, st: State, ops: Ops, tracer):
    if tracer is not None:
        return
    newest = (weakref.ref(prog), _shape(st.W, st.nwg, st.sanitize, st.lds_race_check, st.lds_bytes))
    st.attach(None)             # the arena stays with its Device (reset attaches the next launch's)
    with _kept_lock:
        prog.kept[newest[1]] = (st, ops)
        _kept_order[newest] = (_state_bytes(st), len(st.handlers) - st.handlers.count(None))
        nbytes = nhandlers = 0
        for (ref, sh), (b, h) in reversed(list(_kept_order.items())):      # newest first
            owner = ref()
            if owner is not None:
                nbytes, nhandlers = nbytes + b, nhandlers + h
            if owner is None or (nbytes > KEPT_BYTES or nhandlers > KEPT_HANDLERS) and (ref, sh) != newest:
                del _kept_order[(ref, sh)]
                gone = owner.kept.pop(sh, None) if owner is not None else None
                if gone is not None:        # the handlers hold their State: break the cycle, so that
                    gone[0].handlers.clear()    # reference counting frees it now, not a full collection later


NO_PC = np.iinfo(np.int64).max      # the PC of a wave that has ended: never the smallest
# Instructions that change which waves may run (a barrier blocks or releases waves, a sleeping wave yields, an ended
# wave releases its workgroup's barrier): a divergent run ahead stops before them (_run_batch).
YIELDS = ("s_barrier", "s_sleep", "s_wakeup", "s_endpgm", "s_trap", "s_sethalt")


def _run_batch(st: State, ops: Ops, tracer) -> int:
    prog = st.prog
    handlers, ec, yields = st.handlers, prog.exec_count, prog.yields
    W = st.W
    steps = 0
    pc = int(st.pc[0])
    uniform = True
    trace_ws = tracer.wave if tracer is not None and tracer.wave is not None and tracer.st is st else None
    while True:
        if uniform:
            # lockstep fast path: every live wave is at `pc`
            while True:
                h = handlers[pc]
                if h is None:
                    h = build_handler(st, ops, pc)
                if trace_ws is not None:
                    tracer.before(pc)
                r = h(ALL)
                ec[pc] += W
                steps += 1
                if trace_ws is not None:
                    tracer.after(pc)
                if r is None:
                    pc += 1
                elif type(r) is int:
                    if r == END:
                        st.alive[:] = False
                        return steps
                    pc = r
                else:
                    st.pc[:] = r
                    uniform = False
                    break
        # divergent: smallest PC among runnable waves
        runnable = st.alive & ~st.blocked
        if not runnable.any():
            if st.alive.any():
                sanitizer.deadlock(st)
            return steps
        awake = runnable & ~st.asleep
        if awake.any():
            runnable = awake
        else:                   # every wave that can run has slept: all wake
            st.asleep[:] = False
        pcs = np.where(runnable, st.pc, NO_PC)
        pc = int(pcs.min())
        at = pcs == pc
        if at.all():
            uniform = True
            continue
        sel = np.flatnonzero(at)
        h = handlers[pc]
        if h is None:
            h = build_handler(st, ops, pc)
        traced = trace_ws is not None and bool(at[trace_ws])
        if traced:
            tracer.before(pc)
        r = h(sel)
        n = len(sel)
        ec[pc] += n
        steps += 1
        if traced:
            tracer.after(pc)
        if r is None and trace_ws is None and not yields[pc]:
            # Run ahead: the picked waves stay the ones at the smallest PC until they branch, reach a PC where
            # other runnable waves wait (`limit`: they merge there), or come to an instruction that changes which
            # waves may run (YIELDS). The steps are those the pick above would make one by one, without its
            # per-step scan of every wave's PC.
            limit = int(pcs[~at].min())
            pc += 1
            while pc < limit and not yields[pc]:
                h = handlers[pc]
                if h is None:
                    h = build_handler(st, ops, pc)
                r = h(sel)
                ec[pc] += n
                steps += 1
                if r is not None:
                    break
                pc += 1
            else:
                st.pc[sel] = pc
                continue
        if r is None:
            st.pc[sel] = pc + 1
        elif type(r) is int:
            if r == END:
                st.alive[sel] = False
                st.pc[sel] = NO_PC
                salu.waves_ended(st, sel, pc)
            else:
                st.pc[sel] = r
        else:
            st.pc[sel] = r


def unimplemented(prog: Program) -> list[str]:
    """Text of every instruction of the kernel the executor cannot build (for coverage checks of real kernels)."""
    st = State(prog, 1, 1, sanitize=False, lds_race_check=False, lds_bytes=prog.lds_bytes)
    st.block = (32, 1, 1)
    ops, missing = Ops(st), []
    for pc, inst in enumerate(prog.insts):
        if inst.name == "s_code_end":
            continue
        try:
            build_handler(st, ops, pc)
        except EmuError as e:
            missing.append(f"0x{inst.offset:x} {prog.text(pc)}: {str(e).split(': ', 1)[-1]}")
    return missing
