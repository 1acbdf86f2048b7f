"""Leaf module of the executor: its error type, register numbers, field access, lane packing and `State`.

Everything here depends on numpy only; every other module of sage_co.emu may import it, it imports none of them.

Register file of a launch batch (all resident waves advance together as numpy arrays):
  V   uint32[nvgpr, W, 32]   VGPR r of every wave is one contiguous [W, 32] block (VALU ops stay contiguous)
  S   uint32[128, W]         s0-s105, vcc_lo/hi 106/107, ttmp0-15 108-123, null 124, m0 125, exec_lo/hi 126/127
  SCC bool[W], PC int[W] (an index into Program.insts, not a byte offset)
EXEC is kept packed in S[126] (the truth) and unpacked in EXM bool[W, 32] (refreshed on every EXEC write).
"""
from __future__ import annotations

import numpy as np


class EmuError(RuntimeError):
    """A run stopped by the emulator: sanitizer finding, unimplemented instruction, bad launch."""


# ---- handler protocol (executor.py): `sel` is ALL (every wave, lockstep) or an int index array of waves; a handler
# returns None (fall through), an int (branch target index), an int array (per-wave targets), END or BLOCK.
ALL = slice(None)
END = -1
LANE = np.arange(32, dtype=np.uint32)
FULL = np.uint32(0xFFFFFFFF)

# ---- operand codes (RDNA4 ISA "Scalar/vector operand encodings"; decode.py docstring)
VCC, TTMP0, NULL, M0, EXEC, SCC_CODE, LITERAL = 106, 108, 124, 125, 126, 253, 255
NUM_SREGS = 128
ARENA_VA = 0x7F00_0000_0000       # fake VA of device arena byte 0 (high enough that a NULL-ish pointer is never valid)
# flat address apertures (docs/rdna4.md §Flat apertures): 4 GiB each, based at a multiple of 2^32; a flat address whose
# high dword is an aperture's goes to the lane's scratch (private) or the workgroup's LDS (shared) at the low dword.
# The bases are the values Linux's amdkfd programs on gfx9+ (LDS 1 << 48, scratch 2 << 48); code reads them through
# the src_shared_base / src_private_base operands and never depends on the numbers.
SHARED_BASE, PRIVATE_BASE, APERTURE_BYTES = 1 << 48, 2 << 48, 1 << 32
SRC_SHARED_BASE, SRC_SHARED_LIMIT, SRC_PRIVATE_BASE, SRC_PRIVATE_LIMIT = 235, 236, 237, 238
APERTURE_OPERANDS = {SRC_SHARED_BASE: SHARED_BASE, SRC_SHARED_LIMIT: SHARED_BASE + APERTURE_BYTES - 1,
                     SRC_PRIVATE_BASE: PRIVATE_BASE, SRC_PRIVATE_LIMIT: PRIVATE_BASE + APERTURE_BYTES - 1}
APERTURE_NAMES = {SRC_SHARED_BASE: "src_shared_base", SRC_SHARED_LIMIT: "src_shared_limit",
                  SRC_PRIVATE_BASE: "src_private_base", SRC_PRIVATE_LIMIT: "src_private_limit"}
SANITIZER_KINDS = ("load", "store", "ds", "km")      # wait counters tracked (facts.WAIT_KINDS)
# HW_REG_WAVE_MODE (hwreg id 1) fields (docs/rdna4.md §Entry, MODE register): FP_ROUND [3:0], FP_DENORM [7:4],
# FP16_OVFL [23] (fp8/bf8 conversions saturate finite overflow when set)
HWREG_MODE, MODE_FP_BITS, MODE_FP16_OVFL = 1, 0xFF, 1 << 23

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
        if kind in ("f16", "b16"):
            return int(np.float16(f).view(np.uint16))
        if kind == "f64":
            return int(np.float64(f).view(np.uint64))
        return int(np.float32(f).view(np.uint32))
    if code == 248:
        return {"f16": INV_2PI_F16, "b16": INV_2PI_F16, "f64": INV_2PI_F64}.get(kind, INV_2PI_F32)
    return None


def F(inst, name, default=0):
    """Raw field `name` of a decoded instruction (0 when the encoding lacks it)."""
    v = inst.f.get(name, default)
    return default if v is None else v


def pack_lanes(b: np.ndarray) -> np.ndarray:
    """bool[n, 32] -> uint32[n] lane mask (bit i = lane i). One packbits over the flat array (a row is 4 whole bytes,
    little-endian bit order = lane order): about half the cost of packing along the last axis."""
    return np.packbits(np.ascontiguousarray(b, dtype=bool).reshape(-1), bitorder="little").view(np.uint32)


def unpack_lanes(x) -> np.ndarray:
    """uint32[n] lane masks -> bool[n, 32] (lane i = bit i): one unpackbits of the little-endian bytes."""
    x = np.ascontiguousarray(x, dtype=np.uint32)
    return np.unpackbits(x.view(np.uint8), bitorder="little").reshape(len(x), 32).view(bool)


class State:
    """Register state of one batch of waves plus everything a handler closure needs bound. Every field is declared
    here (__slots__): no module attaches attributes from outside."""

    __slots__ = (
        # program and batch shape
        "prog", "W", "nwg", "grid", "block", "wave_wg", "wave_in_wg", "wg_id",
        # registers and control; mode: HW_REG_WAVE_MODE per wave
        "V", "S", "SCC", "EXM", "exec_full", "mode", "pc", "alive", "blocked", "asleep", "sig", "passed", "handlers",
        # memory: device arena, LDS, private segment
        "device", "mem", "mem32", "live_starts", "live_ends", "lds_bytes", "lds_stride", "lds",
        "private_bytes", "private",
        # per-instruction scratch: the DPP write mask of the current instruction
        "dpp_mask",
        # sanitizer (sanitizer.py): wait counters, pending loads, WMMA hazard, LDS race check
        "sanitize", "lds_race_check", "issued", "done", "vpend", "spend", "maybe", "wmma_d", "wmma_live",
        "hz_tracked", "hz_salu", "hz_valu", "hz_vcc", "hz_vcmpx", "hz_vcmpx_live",
        "race_writer", "race_readers", "race_barriers",
    )

    def __init__(self, prog, nwaves: int, nwg: int, *, sanitize: bool, lds_race_check: bool, lds_bytes: int,
                 device=None):
        W = nwaves
        self.prog, self.W, self.nwg = prog, W, nwg
        self.grid = self.block = (1, 1, 1)
        # three arrays, written in place by the executor's batch setup (handlers may hold them: reset())
        self.wave_wg, self.wave_in_wg, self.wg_id = (np.zeros(W, dtype=np.int64) for _ in range(3))
        self.V = np.zeros((prog.nvgpr, W, 32), dtype=np.uint32)
        self.S = np.zeros((NUM_SREGS, W), dtype=np.uint32)
        self.SCC = np.zeros(W, dtype=bool)
        self.EXM = np.zeros((W, 32), dtype=bool)
        self.exec_full = False
        self.mode = np.zeros(W, dtype=np.uint32)
        self.pc = np.zeros(W, dtype=np.int64)
        self.alive = np.ones(W, dtype=bool)
        self.blocked = np.zeros(W, dtype=bool)
        self.asleep = np.zeros(W, dtype=bool)         # executed s_sleep: picked after every awake wave (executor)
        self.sig = np.zeros(W, dtype=np.int64)        # barrier signals per wave
        self.passed = np.zeros(W, dtype=np.int64)     # barrier waits passed per wave
        self.handlers: list = [None] * len(prog.insts)
        self.attach(device)
        self.lds_bytes = int(lds_bytes)
        self.lds_stride = (max(self.lds_bytes, 4) + 15) // 16 * 16
        self.lds = np.zeros(nwg * self.lds_stride, dtype=np.uint8)
        self.private_bytes = int(prog.kernel.descriptor.private_segment_fixed_size)
        self.private = None        # per-lane scratch, allocated on first scratch access
        self.dpp_mask = None
        self.sanitize, self.lds_race_check = sanitize, lds_race_check
        self.issued = {k: np.zeros(W, dtype=np.int64) for k in SANITIZER_KINDS}
        self.done = {k: np.zeros(W, dtype=np.int64) for k in SANITIZER_KINDS}
        nv = prog.nvgpr if sanitize else 0
        # pending load sequence per VGPR part (0 whole register, 1 low half, 2 high half: true16 / d16 accesses)
        self.vpend = {"load": np.zeros((3, nv, W), dtype=np.int64), "ds": np.zeros((3, nv, W), np.int64)}
        self.spend = np.zeros((NUM_SREGS if sanitize else 0, W), dtype=np.int64)
        self.maybe = {}                      # ('v'|'s', reg) -> counter kind of a possibly pending load
        self.wmma_d = np.full((W, 2), -1, dtype=np.int64)
        self.wmma_live = False
        # VALU-read-SGPR hazard per wave (sanitizer.sgpr_hazard, docs/rdna4.md §Hazards 3): SGPR pairs some VALU
        # read, SGPRs written by SALU / by VALU and not waited for, VCC written by [SALU, VALU]; v_cmpx last VALU
        self.hz_tracked = np.zeros((W, 64), dtype=bool)
        self.hz_salu = np.zeros((W, 128), dtype=bool)
        self.hz_valu = np.zeros((W, 128), dtype=bool)
        self.hz_vcc = np.zeros((W, 2), dtype=bool)
        self.hz_vcmpx = np.zeros(W, dtype=bool)
        self.hz_vcmpx_live = False
        ndw = self.lds_stride // 4 if lds_race_check else 0
        self.race_writer = np.zeros((nwg, ndw), dtype=np.int64)      # wave-in-wg + 1 of the last writer, 0 none
        self.race_readers = np.zeros((nwg, ndw), dtype=np.uint64)    # bitmask of reading waves (wave-in-wg < 64)
        self.race_barriers = np.zeros(nwg, dtype=np.int64)           # barriers whose completion cleared them

    def reset(self, device=None):
        """Back to the state __init__ leaves, in place, keeping the built handlers: a handler holds the arrays of
    the State it was built for (operands.Ops binds them once), so every array is cleared rather than replaced. The
    device's arena may have moved (Device.alloc grows it) and its allocations changed: attach reads both again."""
        for a in (self.wave_wg, self.wave_in_wg, self.wg_id, self.V, self.S, self.SCC, self.EXM, self.mode, self.pc,
                  self.blocked, self.asleep, self.sig, self.passed, self.lds, self.spend, self.hz_tracked,
                  self.hz_salu, self.hz_valu, self.hz_vcc, self.hz_vcmpx, self.race_writer, self.race_readers,
                  self.race_barriers, *self.issued.values(), *self.done.values(), *self.vpend.values()):
            a.fill(0)
        if self.private is not None:
            self.private.fill(0)
        self.alive.fill(True)
        self.wmma_d.fill(-1)
        self.grid = self.block = (1, 1, 1)
        self.exec_full = self.wmma_live = self.hz_vcmpx_live = False
        self.dpp_mask = None
        self.maybe.clear()
        self.attach(device)

    def attach(self, device):
        """Read `device`'s arena and live allocations (None: none; a kept State holds no arena)."""
        self.device = device
        self.mem = device.mem if device is not None else np.zeros(0, dtype=np.uint8)
        self.mem32 = self.mem.view(np.uint32)
        self.live_starts, self.live_ends = device.live_ranges() if device is not None else \
            (np.zeros(0, np.int64), np.zeros(0, np.int64))

    # --- EXEC
    def refresh_exec(self, sel=ALL):
        self.EXM[sel] = unpack_lanes(self.S[EXEC][sel])
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
