"""Wave state, scheduler and dispatch of the gfx1201 executor.

All resident waves of a launch batch advance together as numpy arrays (emulator_anchors §5):
  V   uint32[nvgpr, W, 32]   VGPR r of every wave is one contiguous [W, 32] block (VALU ops stay contiguous)
  S   uint32[128, W]         s0-s105, vcc_lo/hi 106/107, ttmp0-15 108-123, null 124, m0 125, exec_lo/hi 126/127
  SCC bool[W], PC int[W] (an index into Program.insts, not a byte offset)
EXEC is kept packed in S[126] (the truth) and unpacked in EXM bool[W, 32] (refreshed on every EXEC write).

Each step takes the waves at the smallest PC among the runnable ones and runs that instruction once over them.
`sel` is ALL (slice(None): views, no gathers -- the lockstep common case) or an int index array of waves.
Handlers are closures built lazily the first time an instruction executes, with operand accessors bound.
A handler returns None (fall through), an int (branch target index, uniform), an int array (per-wave
targets for `sel`), END, or BLOCK (barrier wait not satisfied for some waves: handled by the scheduler).
"""
from __future__ import annotations

import gc
import time

import numpy as np

from sage_co.emu.device import EmuError

ALL = slice(None)
END = -1
LANE = np.arange(32, dtype=np.uint32)
FULL = np.uint32(0xFFFFFFFF)
MAX_RESIDENT_WAVES = 2048

VCC, M0, NULL, EXEC, SCC_CODE, LITERAL = 106, 125, 124, 126, 253, 255
CLASSES = ("SALU", "VALU", "TRANS", "WMMA", "SMEM", "VMEM_LOAD", "VMEM_STORE", "LDS", "BRANCH", "WAIT_OTHER")
TRANS_OPS = {"v_exp_f32", "v_log_f32", "v_rcp_f32", "v_rsq_f32", "v_sqrt_f32", "v_sin_f32", "v_cos_f32",
             "v_rcp_iflag_f32", "v_exp_f16", "v_log_f16", "v_rcp_f16", "v_rsq_f16", "v_sqrt_f16"}

# inline constant tables (decode docstring: 240-248 float constants whose bit pattern depends on the type)
_FCONST = [0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0]
INV_2PI_F32, INV_2PI_F16, INV_2PI_F64 = 0x3E22F983, 0x3118, 0x3FC45F306DC9C882


def const_bits(code: int, kind: str) -> int | None:
    """Bit pattern of inline constant `code` read as operand type kind ('b32','f32','f16','b16','b64','f64')."""
    if 128 <= code <= 192:
        return code - 128
    if 193 <= code <= 208:
        v = -(code - 192)
        return v & (0xFFFFFFFFFFFFFFFF if kind in ("b64", "f64") else 0xFFFFFFFF)
    if 240 <= code <= 247:
        f = _FCONST[code - 240]
        if kind == "f16":
            return int(np.float16(f).view(np.uint16))
        if kind == "f64":
            return int(np.float64(f).view(np.uint64))
        if kind in ("b16",):
            return int(np.float16(f).view(np.uint16))
        return int(np.float32(f).view(np.uint32))
    if code == 248:
        return {"f16": INV_2PI_F16, "b16": INV_2PI_F16, "f64": INV_2PI_F64}.get(kind, INV_2PI_F32)
    return None


class Program:
    """One kernel of a Module: its instruction list from the entry point, branch-target map, static info."""

    def __init__(self, module, kernel):
        self.module, self.kernel, self.name = module, kernel, kernel.name
        insts = [i for i in module.insts if i.offset >= kernel.entry]
        if kernel.code_size:
            insts = [i for i in insts if i.offset < kernel.entry + kernel.code_size] or insts
        self.insts = insts
        self.index = {i.offset: n for n, i in enumerate(insts)}
        d = kernel.descriptor
        self.nvgpr = max(d.vgpr_count, int(kernel.metadata.get(".vgpr_count", 0)), 1)
        self.lds_bytes = int(d.group_segment_fixed_size)
        self.denorm32 = int(d.float_denorm_mode_32)
        self.denorm16 = int(d.float_denorm_mode_16_64)
        for nm in ("float_round_mode_32", "float_round_mode_16_64"):
            if getattr(d, nm) != 0:
                raise EmuError(f"kernel {self.name}: {nm}={getattr(d, nm)}; only round-to-nearest-even (0) is "
                               f"emulated")
        self.exec_count = np.zeros(len(insts) + 1, dtype=np.int64)   # wave-instructions per PC index
        self.cls = [inst_class(i) for i in insts]

    def target(self, pc: int, simm16: int) -> int:
        """Index of a SOPP branch target: byte offset = offset + 4 + simm16*4 (signed)."""
        i = self.insts[pc]
        off = i.offset + 4 + (((simm16 & 0xFFFF) ^ 0x8000) - 0x8000) * 4
        if off not in self.index:
            raise EmuError(f"kernel {self.name}: branch at 0x{i.offset:x} to 0x{off:x}, not an instruction")
        return self.index[off]

    def text(self, pc: int) -> str:
        return inst_text(self.insts[pc])


def inst_text(inst) -> str:
    try:
        from sage_co.emu import disasm
        return disasm.inst_text(inst)
    except Exception:
        txt = getattr(inst, "text", None)
        return txt if isinstance(txt, str) and txt else inst.name


def inst_class(inst) -> str:
    n, enc = inst.name, inst.enc
    if enc in ("SOP1", "SOP2", "SOPK", "SOPC"):
        return "SALU"
    if enc == "SOPP":
        return "BRANCH" if "branch" in n else "WAIT_OTHER"
    if enc == "SMEM":
        return "SMEM"
    if enc == "DS":
        return "LDS"
    if enc in ("VGLOBAL", "VBUFFER", "VFLAT", "VSCRATCH"):
        if enc == "VSCRATCH" and "load" in n:
            return "VMEM_LOAD"
        return "VMEM_STORE" if ("store" in n or "atomic" in n) and "load" not in n else "VMEM_LOAD"
    if "wmma" in n:
        return "WMMA"
    if n in TRANS_OPS:
        return "TRANS"
    return "VALU"


def F(inst, name, default=0):
    v = inst.f.get(name, default)
    return default if v is None else v


class State:
    """Register state of one batch of waves, plus everything a handler closure needs bound."""

    def __init__(self, prog: Program, nwaves: int, nwg: int, sanitize: bool, lds_race_check: bool):
        self.prog, self.W, self.nwg = prog, nwaves, nwg
        self.V = np.zeros((prog.nvgpr, nwaves, 32), dtype=np.uint32)
        self.S = np.zeros((128, nwaves), dtype=np.uint32)
        self.SCC = np.zeros(nwaves, dtype=bool)
        self.EXM = np.zeros((nwaves, 32), dtype=bool)
        self.exec_full = False
        self.pc = np.zeros(nwaves, dtype=np.int64)
        self.alive = np.ones(nwaves, dtype=bool)
        self.blocked = np.zeros(nwaves, dtype=bool)
        self.sig = np.zeros(nwaves, dtype=np.int64)        # barrier signals per wave
        self.passed = np.zeros(nwaves, dtype=np.int64)     # barrier waits passed per wave
        self.lds_bytes = prog.lds_bytes
        self.lds_stride = (max(prog.lds_bytes, 4) + 15) // 16 * 16
        self.lds = np.zeros(nwg * self.lds_stride, dtype=np.uint8)
        self.sanitize, self.lds_race_check = sanitize, lds_race_check
        self.private_bytes = int(prog.kernel.descriptor.private_segment_fixed_size)
        self.private = None        # per-lane scratch, allocated on first scratch access
        self.handlers: list = [None] * len(prog.insts)
        self.steps = 0

    # --- EXEC
    def refresh_exec(self, sel=ALL):
        e = self.S[EXEC][sel]
        self.EXM[sel] = ((e[:, None] >> LANE) & 1).astype(bool)
        self.exec_full = bool(np.all(self.S[EXEC][self.alive] == FULL))

    def wave_desc(self, w: int) -> str:
        return f"workgroup {int(self.wg_id[w])} ({self.wg_xyz(int(self.wg_id[w]))}) wave {int(self.wave_in_wg[w])}"

    def wg_xyz(self, lin):
        gx, gy, _ = self.grid
        return f"{lin % gx},{lin // gx % gy},{lin // (gx * gy)}"

    def fail(self, pc: int, msg: str, wave=None, lane=None):
        where = f"kernel {self.prog.name} pc 0x{self.prog.insts[pc].offset:x} `{self.prog.text(pc)}`"
        if wave is not None:
            where += f", {self.wave_desc(int(wave))}"
        if lane is not None:
            where += f" lane {int(lane)}"
        raise EmuError(f"{where}: {msg}")

    def waves_of(self, sel) -> np.ndarray:
        return np.arange(self.W) if isinstance(sel, slice) else sel


# ------------------------------------------------------------------------------------------------ operand access
class Ops:
    """Operand readers/writers bound to one State. Readers return arrays broadcastable to [n, 32] (VGPR
    operands) or scalars (constants); scalar readers return [n] arrays."""

    def __init__(self, st: State):
        self.st = st

    # ---- VALU-side reads (per lane). kind: 'b32' | 'f32' | 'b16' | 'f16' | 'b64' | 'f64'
    def vread(self, inst, code: int, kind: str = "b32"):
        st = self.st
        V, S, SCC = st.V, st.S, st.SCC
        wide = kind in ("b64", "f64")
        if code >= 256:
            r = code - 256
            if r + (2 if wide else 1) > st.prog.nvgpr:
                raise EmuError(f"v{r} beyond the kernel's {st.prog.nvgpr} VGPRs")
            if wide:
                return lambda sel: V[r][sel].astype(np.uint64) | (V[r + 1][sel].astype(np.uint64) << np.uint64(32))
            return lambda sel: V[r][sel]
        if code == LITERAL:
            lit = int(inst.literal or 0)
            if wide:   # 64-bit literal: the 32 bits are the high half for f64, zero-extended for b64
                val = np.uint64(lit << 32) if kind == "f64" else np.uint64(lit)
                return lambda sel: val
            val = np.uint32(lit & 0xFFFFFFFF)
            return lambda sel: val
        c = const_bits(code, kind)
        if c is not None:
            val = np.uint64(c) if wide else np.uint32(c & 0xFFFFFFFF)
            return lambda sel: val
        if code == SCC_CODE:
            return lambda sel: SCC[sel].astype(np.uint32)[:, None] if not wide else \
                SCC[sel].astype(np.uint64)[:, None]
        if code < 128:
            if wide:
                return lambda sel: (S[code][sel].astype(np.uint64) |
                                    (S[code + 1][sel].astype(np.uint64) << np.uint64(32)))[:, None]
            if code == NULL:
                z = np.uint32(0)
                return lambda sel: z
            return lambda sel: S[code][sel][:, None]
        raise EmuError(f"operand code {code} not supported")

    # ---- scalar reads: [n] arrays (uint32 or uint64 for 64-bit)
    def sread(self, inst, code: int, wide: bool = False):
        st = self.st
        S, SCC = st.S, st.SCC
        if code == LITERAL:
            lit = int(inst.literal or 0)
            val = np.uint64(lit) if wide else np.uint32(lit & 0xFFFFFFFF)
            return lambda sel: val
        c = const_bits(code, "b64" if wide else "b32")
        if c is not None:
            val = np.uint64(c) if wide else np.uint32(c & 0xFFFFFFFF)
            return lambda sel: val
        if code == SCC_CODE:
            return lambda sel: SCC[sel].astype(np.uint64 if wide else np.uint32)
        if code == NULL:
            z = np.uint64(0) if wide else np.uint32(0)
            return lambda sel: z
        if code < 128:
            if wide:
                return lambda sel: S[code][sel].astype(np.uint64) | (S[code + 1][sel].astype(np.uint64) << np.uint64(32))
            return lambda sel: S[code][sel]
        if code >= 256:
            raise EmuError(f"VGPR operand v{code - 256} in a scalar instruction")
        raise EmuError(f"scalar operand code {code} not supported")

    def swrite(self, code: int, wide: bool = False):
        """Writer f(sel, value) for an SGPR destination; EXEC writes refresh the lane mask."""
        st = self.st
        S = st.S
        if code == NULL:
            return lambda sel, val: None
        if code >= 128:
            raise EmuError(f"scalar destination code {code} not supported")
        is_exec = code in (EXEC, EXEC + 1) or (wide and code + 1 == EXEC)
        if wide:
            def w(sel, val):
                val = np.asarray(val, dtype=np.uint64)
                S[code][sel] = (val & np.uint64(0xFFFFFFFF)).astype(np.uint32)
                S[code + 1][sel] = (val >> np.uint64(32)).astype(np.uint32)
                if is_exec:
                    st.refresh_exec(sel)
        else:
            def w(sel, val):
                S[code][sel] = val
                if is_exec:
                    st.refresh_exec(sel)
        return w

    # ---- VGPR write with EXEC masking (inactive lanes keep their value)
    def vwrite(self, r: int, nregs: int = 1):
        st = self.st
        if r + nregs > st.prog.nvgpr:
            raise EmuError(f"destination v{r} (+{nregs}) beyond the kernel's {st.prog.nvgpr} VGPRs")
        V, EXM = st.V, st.EXM
        row = V[r]

        def w(sel, val):
            if sel is ALL:
                if st.exec_full:
                    row[...] = val
                else:
                    np.copyto(row, val, where=EXM, casting="unsafe")
            else:
                row[sel] = np.where(EXM[sel], val, row[sel])
        return w

    def vwrite_masked(self, r: int):
        """Writer f(sel, val, mask) writing only lanes where mask (already includes EXEC if wanted)."""
        row = self.st.V[r]

        def w(sel, val, mask):
            if sel is ALL:
                np.copyto(row, val, where=mask, casting="unsafe")
            else:
                row[sel] = np.where(mask, val, row[sel])
        return w


def pack_lanes(b: np.ndarray) -> np.ndarray:
    """bool[n, 32] -> uint32[n] lane mask (bit i = lane i)."""
    return np.packbits(np.ascontiguousarray(b, dtype=bool), axis=-1, bitorder="little").view(np.uint32)[:, 0]


def unpack_lanes(x) -> np.ndarray:
    return ((np.asarray(x, dtype=np.uint32)[:, None] >> LANE) & 1).astype(bool)


# ------------------------------------------------------------------------------------------------ building
def build_handler(st: State, ops: Ops, pc: int):
    from sage_co.emu import memory_ops, salu, scalar_float, valu
    inst = st.prog.insts[pc]
    enc = inst.enc
    try:
        if inst.name in scalar_float.OPS:       # gfx12 scalar float group (SALU f32/f16, v_s_* transcendentals)
            h = scalar_float.build(st, ops, inst, pc)
        elif enc in ("SOP1", "SOP2", "SOPK", "SOPC", "SOPP"):
            h = salu.build(st, ops, inst, pc)
        elif enc in ("SMEM", "DS", "VGLOBAL", "VBUFFER", "VFLAT", "VSCRATCH"):
            h = memory_ops.build(st, ops, inst, pc)
        else:
            h = valu.build(st, ops, inst, pc)
    except EmuError as e:
        if str(e).startswith("kernel "):
            raise
        st.fail(pc, str(e))
    if h is None:
        st.fail(pc, f"instruction {inst.name} ({enc} opcode {inst.opcode}) is not implemented by the emulator")
    if st.sanitize:
        from sage_co.emu import sanitizer
        h = sanitizer.wrap(st, ops, inst, pc, h)
    st.handlers[pc] = h
    return h


# ------------------------------------------------------------------------------------------------ run
class Stats(dict):
    """Run statistics: instruction counts by class (wave-instructions), waves, workgroups, wall time."""

    def __repr__(self):
        return "Stats(" + ", ".join(f"{k}={v}" for k, v in self.items()) + ")"


def _init_batch(st: State, prog: Program, grid, block, wg_lo: int, nwg: int, wpg: int, kernarg_va, dispatch_va,
                queue_va):
    d = prog.kernel.descriptor
    st.grid, st.block = grid, block
    wg_local = np.repeat(np.arange(nwg), wpg)
    st.wave_wg = wg_local
    st.wave_in_wg = np.tile(np.arange(wpg), nwg)
    st.wg_id = wg_lo + wg_local
    gx, gy, gz = grid
    wx, wy, wz = st.wg_id % gx, st.wg_id // gx % gy, st.wg_id // (gx * gy)
    # user SGPRs from s0 in the fixed order (rdna4_facts §5.2)
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
    # architected workgroup ids: ttmp9 = x, ttmp7 = y | z << 16 (rdna4_facts §5.2)
    st.S[108 + 9] = wx
    st.S[108 + 7] = (wy & 0xFFFF) | (wz << 16)
    # packed work-item ids in v0, EXEC = live lanes
    bx, by, bz = block
    nthreads = bx * by * bz
    tid = st.wave_in_wg[:, None] * 32 + np.arange(32)[None, :]
    live = tid < nthreads
    tx, ty, tz = tid % bx, tid // bx % by, tid // (bx * by)
    st.V[0] = np.where(live, tx | (ty << 10) | (tz << 20), 0).astype(np.uint32)
    st.S[EXEC] = pack_lanes(live)
    st.refresh_exec()
    st.pc[:] = prog.index[prog.kernel.entry]


def run(prog: Program, grid, block, **kw):
    """Run the whole grid. Python's cyclic GC is paused meanwhile: a run allocates many small closures (the
    instruction handlers) but no reference cycles, and full collections triggered by torch's live objects cost
    ~0.2 s per launch."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _run(prog, grid, block, **kw)
    finally:
        if was_enabled:
            gc.enable()


def _run(prog: Program, grid, block, *, kernarg_va, dispatch_va=0, queue_va=0, sanitize=True,
         lds_race_check=False, trace_wave=None):
    t0 = time.perf_counter()
    nthreads = block[0] * block[1] * block[2]
    wpg = (nthreads + 31) // 32
    total_wg = grid[0] * grid[1] * grid[2]
    if prog.lds_bytes > 65536:
        raise EmuError(f"kernel {prog.name}: group segment {prog.lds_bytes} B exceeds the 64 KiB LDS limit")
    per_batch = max(1, MAX_RESIDENT_WAVES // wpg)
    tracer = None
    if trace_wave is not None:
        from sage_co.emu import trace as _trace
        tracer = _trace.Tracer(trace_wave)
    prog.exec_count[:] = 0
    mem_dev = prog.module.device
    steps = 0
    for wg_lo in range(0, total_wg, per_batch):
        nwg = min(per_batch, total_wg - wg_lo)
        st = State(prog, nwg * wpg, nwg, sanitize, lds_race_check)
        st.device = mem_dev
        st.mem = mem_dev.mem
        st.mem32 = mem_dev.mem.view(np.uint32)
        st.live_starts, st.live_ends = mem_dev.live_ranges()
        _init_batch(st, prog, grid, block, wg_lo, nwg, wpg, kernarg_va, dispatch_va, queue_va)
        if sanitize:
            from sage_co.emu import sanitizer
            sanitizer.attach(st)
        if tracer is not None:
            tracer.attach(st)
        with np.errstate(all="ignore"):
            steps += _run_batch(st, Ops(st), tracer)
    counts = {c: 0 for c in CLASSES}
    ec = prog.exec_count
    for pc, c in enumerate(prog.cls):
        counts[c] += int(ec[pc])
    out = Stats(counts)
    out["wave_instructions"] = int(ec.sum())
    out["steps"] = steps
    out["waves"] = total_wg * wpg
    out["workgroups"] = total_wg
    out["wall_s"] = time.perf_counter() - t0
    if tracer is not None:
        out["trace"] = tracer.lines
    return out


def _run_batch(st: State, ops: Ops, tracer) -> int:
    prog = st.prog
    handlers, ec = st.handlers, prog.exec_count
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
                from sage_co.emu import sanitizer
                sanitizer.deadlock(st)
            return steps
        pcs = np.where(runnable, st.pc, np.iinfo(np.int64).max)
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
        ec[pc] += len(sel)
        steps += 1
        if traced:
            tracer.after(pc)
        if r is None:
            st.pc[sel] = pc + 1
        elif type(r) is int:
            if r == END:
                st.alive[sel] = False
                st.pc[sel] = np.iinfo(np.int64).max
                from sage_co.emu import salu
                salu.waves_ended(st, sel, pc)
            else:
                st.pc[sel] = r
        else:
            st.pc[sel] = r


def unimplemented(prog: Program) -> list[str]:
    """Text of every instruction of the kernel the executor cannot build (for coverage checks of real kernels)."""
    st = State(prog, 1, 1, False, False)
    st.grid, st.block = (1, 1, 1), (32, 1, 1)
    st.wave_wg = st.wave_in_wg = st.wg_id = np.zeros(1, dtype=np.int64)
    ops, missing = Ops(st), []
    for pc, inst in enumerate(prog.insts):
        if inst.name == "s_code_end":
            continue
        try:
            build_handler(st, ops, pc)
        except EmuError as e:
            missing.append(f"0x{inst.offset:x} {prog.text(pc)}: {str(e).split(': ', 1)[-1]}")
    return missing
