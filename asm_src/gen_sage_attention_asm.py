#!/usr/bin/env python3
"""Generator of gfx1201_sage_attention_fwd_asm, the hand-scheduled SageAttention forward kernel.

`python gen_sage_attention_asm.py` prints the assembly (build_asm.py assembles it). The kernel computes exactly
what asm_src/gfx1201_sage_attention.hip computes, with the same kernarg struct and launch geometry, in the same
per-row operation order (bitwise equal output on the emulator); what differs is the schedule. The header of the
emitted .s (HEADER below, filled from the Python constants) documents layout, registers and schedule.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from asmdsl import Asm, Op, RegFile, WaitCounter  # noqa: E402

SYMBOL = "gfx1201_sage_attention_fwd_asm"

# ---------------------------------------------------------------------------------------------- geometry
HEAD_DIM = 128
TILE_Q = 64                    # queries per workgroup (grid x = seq_pad / 64)
WAVES = 4                      # block = 128 threads = 4 wave32
WAVE_Q = 16                    # queries per wave (one 16-column WMMA fragment)
TILE_K = 64                    # keys per loop step
CHUNKS = TILE_K // 16          # S^T chunks of 16 keys
D_TILES = HEAD_DIM // 16       # O^T d-tiles of 16 channels
SCALE_BLOCK = 32               # tokens per q/k scale
THREADS = WAVES * 32

# kernarg byte offsets (sage_co/ops/attention.py ATTENTION_FWD_ARGS; the .hip header table)
KARGS = [("q", "ptr", 0), ("k", "ptr", 8), ("v", "ptr", 16), ("q_scale", "ptr", 24), ("k_scale", "ptr", 32),
         ("k_mean", "ptr", 40), ("v_scale", "ptr", 48), ("out", "ptr", 56), ("lse", "ptr", 64),
         ("seq_len", "u32", 72), ("seq_pad", "u32", 76), ("num_heads", "u32", 80), ("flags", "u32", 84)]
KARG_SIZE = 88
FLAG_LSE_BIT = 0               # flags bit 0: write lse
FLAG_SMOOTH_BIT = 1            # flags bit 1: lse adds ln2 * (q_int8 * q_scale) . k_mean

# LDS: K tiles double-buffered one tile ahead of the V^T tiles (see the schedule in the header)
K_TILE_BYTES = TILE_K * HEAD_DIM          # int8 [64 keys][128 d]
V_TILE_BYTES = HEAD_DIM * TILE_K          # fp8 [128 d][64 keys]
LDS_KBUF = (0, K_TILE_BYTES)
LDS_VBUF = (2 * K_TILE_BYTES, 2 * K_TILE_BYTES + V_TILE_BYTES)
LDS_BYTES = 2 * K_TILE_BYTES + 2 * V_TILE_BYTES
CHUNK16 = 16                              # LDS swizzle unit: one ds_load_b128
K_ROW_BYTES = HEAD_DIM                    # 128 B per key row = 8 chunks
V_ROW_BYTES = TILE_K                      # 64 B per d row = 4 chunks
STAGE_LOADS = (K_TILE_BYTES // THREADS) // 16   # b128 global loads per thread per tile, K and V alike (4)
STAGE_STEP = THREADS * 16                 # bytes between a thread's successive staging chunks (2048)

# numerics constants (bit patterns)
F32_448 = "0x43e00000"                    # fp8 e4m3 max: p8 = fp8(p * 448)
MAGIC_INT = "0x4b400000"                  # float 1.5 * 2^23: int32 x + MAGIC_INT has float bits 1.5*2^23 + x
F32_NEG_INF = "0xff800000"
F32_LN2 = "0x3f317218"                    # float32(ln 2)
BF16_QNAN32 = "0x7fc00000"                # a NaN output becomes bf16 0x7fc0 (as the HIP kernel)
BF16_ROUND = "0x7fff"
F32_BF16_MAX, F32_NEG_BF16_MAX = "0x7f7f0000", "0xff7f0000"   # +-largest finite bf16: the output saturates there
HI16_MASK = "0xffff0000"
PERMX16_SEL_LO, PERMX16_SEL_HI = "0x76543210", "0xfedcba98"   # v_permlanex16: lane l reads lane l ^ 16

RING = 10                                 # LDS fragment ring: ds_load_b128 destinations (4 VGPRs each)

WMMA_QK = "v_wmma_i32_16x16x16_iu8"
WMMA_PV = "v_wmma_f32_16x16x16_fp8_fp8"
IU8_SIGNED = "neg_lo:[1,1,0]"             # docs/rdna4.md §WMMA: neg_lo bit0/bit1 = A/B signed


# ---------------------------------------------------------------------------------------------- registers
V = RegFile("v", 256)
S = RegFile("s", 106)

tid = V.fixed("tid", 0, note="work-item id x (entry state, docs/rdna4.md §Entry); lane math reads it")
V.next = 1
# lane constants
k_rd = V.alloc("k_rd", 4, note="LDS byte address of K fragment d-group i (chunk c adds c*1024)")
v_rd = V.alloc("v_rd", 2, note="LDS byte address of V^T fragment half i (d-tile adds dt*1024)")
k_st = V.alloc("k_st", note="LDS store address of this thread's K staging chunks")
v_st = V.alloc("v_st", note="LDS store address of this thread's V^T staging chunks")
k_gl = V.alloc("k_gl", note="global offset of this thread's K staging chunk 0 in a tile")
v_gl = V.alloc("v_gl", note="global offset of this thread's V^T staging chunk 0 (row*seq_pad + col*16)")
ks = V.alloc("ks", note="k_scale of this lane half's 32 keys of the next tile")
ks_off = V.alloc("ks_off", note="4h: byte offset of this lane half's k_scale in a tile's pair")
qk = V.alloc("qk", 2, note="q_scale*k_scale, two copies in different banks (VOPD src0)")
m = V.alloc("m", 3, align=4, note="m[0], m[1]: running max ping-pong (even/odd tile); m[2]: copy of m_new")
alpha = V.alloc("alpha", 2, note="exp2(m_old - m_new), two banks (VOPD src0); alpha[0] also the scratch of it")
l_run = V.alloc("l_run", note="running row sum")
rs = V.alloc("rs", 2, align=2, note="row-sum chain ping-pong: rs[1] (odd VGPR) after even steps, rs[0] after odd")
mx = V.alloc("mx", 4, align=4, note="row-max partials; mx[0] ends as the lane max")
xl = V.alloc("xl", note="v_permlanex16 result")
lim = V.alloc("lim", note="last tile: keys of this lane half still valid (seq_len - key0)")
O = V.alloc("O", 64, align=8, note="O^T accumulators: d-tile dt = O[8dt:8dt+8], lane (h,r) row d=16dt+8h+e")
SA = V.alloc("SA", 32, align=8, note="S^T of even tiles: chunk c = SA[8c:8c+8]; scores, then p, P^T fp8 in place")
SB = V.alloc("SB", 32, align=8, note="S^T of odd tiles (the next tile's QK^T accumulates here)")
Q = V.alloc("Q", 16, align=4, note="Q^T B-fragments: Q[4i:4i+4] = 16 bytes 64h+16i.. of query row r")
stK = V.alloc("stK", 16, align=4, note="global->LDS staging of K tile t+2")
stV = V.alloc("stV", 16, align=4, note="global->LDS staging of V^T tile t+1")
ring = V.alloc("ring", 4 * RING, align=4, note=f"{RING} LDS fragment slots of 4 VGPRs (ds_load_b128)")
magic = V.alloc("magic", 8, note="0x4b400000 x 8: C of each chunk's first QK^T WMMA (int -> float trick)")
NUM_VGPRS = V.used

kernarg = S.fixed("kernarg", 0, 2, "kernarg segment pointer (only user SGPR, docs/rdna4.md §Entry)")
S.next = 4
sp_q = S.alloc("q", 2, 2)
sp_k = S.alloc("k", 2, 2)
sp_v = S.alloc("v", 2, 2)
sp_qscale = S.alloc("q_scale", 2, 2)
sp_kscale = S.alloc("k_scale", 2, 2)
sp_kmean = S.alloc("k_mean", 2, 2)
sp_vscale = S.alloc("v_scale", 2, 2)
sp_out = S.alloc("out", 2, 2)
sp_lse = S.alloc("lse", 2, 2)
s_seqlen = S.alloc("seq_len")
s_seqpad = S.alloc("seq_pad")
s_nheads = S.alloc("num_heads")
s_flags = S.alloc("flags")
s_head = S.alloc("head")
s_batch = S.alloc("batch")
s_wave = S.alloc("wave")
s_bh = S.alloc("bh", 2, 2, "batch*H + head (hi word 0)")
s_tmp = S.alloc("tmp", 2, 2)
s_tmp2 = S.alloc("tmp2", 2, 2)
s_q0 = S.alloc("q0", note="first query of this wave")
s_last = S.alloc("last_tile", note="seq_pad/64 - 1")
s_ntail = S.alloc("ntail", note="valid keys of the last tile")
s_448 = S.alloc("c448", note="448.0f (VOPD src0 of p*448)")
s_magic = S.alloc("magic", note="12582912.0f = 0x4b400000 (VOPD src0 of the int -> float subtraction)")
s_sel = S.alloc("permsel", note="v_permlanex16 lane select 0x76543210")
s_qs = S.alloc("qs", note="q_scale of this wave's 16 queries")
s_t = S.alloc("tile", note="loop: current key tile t")
s_kh = S.alloc("kh", 2, 2, "K of this head")
s_qrow = S.alloc("qrow", 2, 2, "Q rows of this wave")
s_kb = S.alloc("kb", 2, 2, "K staging base (tile min(t+2, last))")
s_koff = S.alloc("koff", 2, 2, "K staging tile byte offset (hi word 0)")
s_vb = S.alloc("vb", 8, 2, "V^T staging bases of chunk rows u*32 (u = 0..3), tile t+1")
s_ksb = S.alloc("ksb", 2, 2, "k_scale of tile t+1")
s_kmh = S.alloc("kmh", 2, 2, "k_mean of this head")
s_vsh = S.alloc("vsh", 2, 2, "v_scale of this head")
s_outb = S.alloc("outb", 2, 2, "out row of query q0")
s_lseb = S.alloc("lseb", 2, 2, "lse of query q0")
NUM_SGPRS = S.used

# lane offsets computed in the prologue that need homes only briefly (the ring is free then)
t_lane, t_r, t_h, t_x, t_y, t_z = (ring[i] for i in range(6))
q_off = ring[6]          # global offset of this lane's Q row (prologue only)
v_qi = stK[0]            # epilogue: this lane's query index

# fragments of one loop iteration --------------------------------------------------------------
# QK^T: frag (i, c) = 16 bytes of K row 32*(r/8) + 8c + r%8 at d-group i (A of two d-steps)
# PV:   frag (i, dt) = 16 bytes of V^T row 16dt + r, keys 32h + 16i.. (A of chunks 2i, 2i+1)
QK_ORDER = [(i, half, c) for i in range(4) for half in range(2) for c in range(CHUNKS)]
PV_ORDER = [(i, grp, half, dt) for i in range(2) for grp in range(2) for half in range(2)
            for dt in range(4 * grp, 4 * grp + 4)]


class Frag:
    def __init__(self, key, load):
        self.key, self.load = key, load        # load(asm, regs) emits the ds_load
        self.uses: list[int] = []


class Matrix:
    """The WMMA stream of one loop iteration: the WMMAs in issue order and the fragments they read.
    Fragment k goes to ring slot k % RING; its ds_load is issued as soon as the slot's previous fragment has
    had its last WMMA (docs/rdna4.md §Waits: loads ahead of use), and a WMMA waits with s_wait_dscnt only for
    the fragment it needs (DScnt completes in order)."""

    def __init__(self):
        self.frags: list[Frag] = []
        self.wmmas: list[tuple[int, object]] = []   # (frag index, emit(asm, frag_regs))
        self.index: dict = {}

    def frag(self, key, load) -> int:
        if key not in self.index:
            self.index[key] = len(self.frags)
            self.frags.append(Frag(key, load))
        return self.index[key]

    def wmma(self, fk: int, emit) -> None:
        self.frags[fk].uses.append(len(self.wmmas))
        self.wmmas.append((fk, emit))

    def slot(self, fk: int):
        return ring[4 * (fk % RING):4 * (fk % RING) + 4]


def qk_matrix(mx_: Matrix, kbuf: int, sacc) -> None:
    for i, half, c in QK_ORDER:
        fk = mx_.frag(("k", i, c), lambda a, regs, i=i, c=c: a.op(
            f"ds_load_b128 {regs}, {k_rd[i]} offset:{kbuf + c * 8 * K_ROW_BYTES}"))
        first = i == 0 and half == 0
        acc = sacc[8 * c:8 * c + 8]

        def emit(a, regs, acc=acc, i=i, half=half, first=first):
            src_c = str(magic) if first else str(acc)
            a.op(f"{WMMA_QK} {acc}, {regs[2 * half:2 * half + 2]}, {Q[4 * i + 2 * half:4 * i + 2 * half + 2]}, "
                 f"{src_c} {IU8_SIGNED}")
        mx_.wmma(fk, emit)


def pv_matrix(mx_: Matrix, vbuf: int, pacc) -> None:
    # per accumulator dt the chunks go 0, 1, 2, 3 (the HIP kernel's order: bitwise the same fp32 sums)
    for i, grp, half, dt in PV_ORDER:
        fk = mx_.frag(("v", i, dt), lambda a, regs, i=i, dt=dt: a.op(
            f"ds_load_b128 {regs}, {v_rd[i]} offset:{vbuf + dt * 16 * V_ROW_BYTES}"))
        c = 2 * i + half
        acc = O[8 * dt:8 * dt + 8]

        def emit(a, regs, acc=acc, c=c, half=half):
            a.op(f"{WMMA_PV} {acc}, {regs[2 * half:2 * half + 2]}, {pacc[8 * c:8 * c + 2]}, {acc}")
        mx_.wmma(fk, emit)


class Weaver:
    """Emits a Matrix phase by phase, fragment loads as early as the ring allows, VALU issue slots spread
    evenly between the WMMAs."""

    def __init__(self, a: Asm, mx_: Matrix, ds: WaitCounter):
        self.a, self.mx, self.ds = a, mx_, ds
        self.next_load = 0
        self.emitted = 0        # WMMAs emitted so far

    def _loads(self):
        frags = self.mx.frags
        while self.next_load < len(frags):
            k = self.next_load
            if k >= RING:
                prev = frags[k - RING]
                if not prev.uses or max(prev.uses) >= self.emitted:
                    return
            frags[k].load(self.a, self.mx.slot(k))
            self.ds.issue(("frag", k))
            self.next_load += 1

    def prefetch(self):
        self._loads()

    def phase(self, n_wmma: int, items: list) -> None:
        """Emit the next n_wmma WMMAs with `items` (Issue objects or raw text lines) spread between them."""
        units = items
        n = len(units)
        cut = [round(n * (w + 1) / (n_wmma + 1)) for w in range(n_wmma + 1)] if n_wmma else [n]
        u = 0
        for w in range(n_wmma):
            for item in units[u:cut[w]]:
                self._emit_item(item)
            u = cut[w]
            fk, emit = self.mx.wmmas[self.emitted]
            self.ds.wait_for(("frag", fk))
            emit(self.a, self.mx.slot(fk))
            self.emitted += 1
            self._loads()
        for item in units[u:]:
            self._emit_item(item)

    def _emit_item(self, item):
        if isinstance(item, str):
            self.a.op(item)
        else:
            self.a.issue(item)


# ---------------------------------------------------------------------------------------------- softmax ops
def vmul(d, s0, s1):
    return Op.vop2("v_mul_f32", d, s0, s1)


def vadd(d, s0, s1):
    return Op.vop2("v_add_f32", d, s0, s1)


def vsub(d, s0, s1):
    return Op.vop2("v_sub_f32", d, s0, s1)


def vmax(d, s0, s1):
    return Op.vop2("v_max_num_f32", d, s0, s1)


def scale_ops(sacc) -> list[Op]:
    """s = float(s_int32) * (q_scale * k_scale), in place. The QK^T accumulators start at C = 0x4b400000
    (MAGIC_INT) instead of 0, so each holds the bits of the float 1.5 * 2^23 + s_int32 (|s_int32| < 2^21 keeps
    the exponent); subtracting 1.5 * 2^23 is exact (Sterbenz) and gives float(s_int32) -- bitwise the HIP
    kernel's v_cvt_f32_i32, but as a VOPD-pairable v_subrev_f32 instead of a single-issue convert."""
    ops = [vmul(qk[0], s_qs, ks), Op.mov(qk[1], qk[0])]
    for j in range(32):
        ops.append(Op.vop2("v_subrev_f32", sacc[j], s_magic, sacc[j]))
        if j % 2:
            ops.append(vmul(sacc[j - 1], qk[0], sacc[j - 1]))
            ops.append(vmul(sacc[j], qk[1], sacc[j]))
    return ops


def max_ops(sacc, m_old, m_new) -> list[Op]:
    """Row max over the lane's 32 scores (4 partial chains, VOPD pairs), the other lane half's max through
    v_permlanex16 (docs/rdna4.md §WMMA: DPP cannot cross 16-lane rows), m_new = max(m_old, both) and
    alpha = exp2(m_old - m_new), 0 while m_old = -inf (max is exact, so any order is the HIP kernel's value)."""
    ops = [vmax(mx[0], sacc[0], sacc[1]), vmax(mx[1], sacc[2], sacc[3]),
           vmax(mx[2], sacc[4], sacc[5]), vmax(mx[3], sacc[6], sacc[7])]
    for j in range(8, 32, 4):
        for q in range(4):
            ops.append(vmax(mx[q], sacc[j + q], mx[q]))
    ops += [vmax(mx[0], mx[0], mx[2]), vmax(mx[1], mx[1], mx[3]), vmax(mx[0], mx[0], mx[1])]
    ops.append(Op.raw(f"v_permlanex16_b32 {xl}, {mx[0]}, {s_sel}, {PERMX16_SEL_HI}", [mx[0]], [xl]))
    ops.append(Op.raw(f"v_max3_num_f32 {m_new}, {m_old}, {mx[0]}, {xl}", [m_old, mx[0], xl], [m_new]))
    ops.append(Op.mov(m[2], m_new))
    ops.append(vsub(alpha[0], m_old, m_new))
    ops.append(Op.raw(f"v_exp_f32_e32 {alpha[0]}, {alpha[0]}", [alpha[0]], [alpha[0]], trans=True))
    return ops


def alpha_select_lines(m_old) -> list[str]:
    """alpha = m_old == -inf ? 0 : exp2(m_old - m_new) (VCC written by VALU, read by VALU: §Hazards 3)."""
    return [f"v_cmp_neq_f32_e32 vcc_lo, {F32_NEG_INF}, {m_old}",
            "s_wait_alu depctr_va_vcc(0)",
            f"v_cndmask_b32_e32 {alpha[0]}, 0, {alpha[0]}, vcc_lo"]


def exp_ops(sacc, m_new) -> list[Op]:
    """p = exp2(s - m_new); row sum l_tile = p0 + p1 + ... + p31 in register order (the HIP kernel's order),
    p8 = fp8(p * 448) packed in VGPR order into the chunk's first two registers (the P^T B-fragment,
    docs/rdna4.md §WMMA data flow). The chain alternates rs[1]/rs[0] so that each add pairs in one VOPD with the
    *448 of p[j-2] (one even, one odd destination; vsrc1 banks j and j-2 differ)."""
    mm = (m_new, m[2])
    ops: list[Op] = []

    def sub(j):
        return vsub(sacc[j], sacc[j], mm[j % 2])

    def exp(j):
        return Op.raw(f"v_exp_f32_e32 {sacc[j]}, {sacc[j]}", [sacc[j]], [sacc[j]], trans=True)

    R = (rs[1], rs[0])      # step j writes R[j % 2]: odd VGPR after even steps, even after odd ones

    def chain(j):           # rs_j = rs_{j-1} + p_j, rs_1 = p_0 + p_1
        if j == 1:
            return vadd(R[1], sacc[0], sacc[1])
        return vadd(R[j % 2], R[(j - 1) % 2], sacc[j])

    def scale(j):
        return vmul(sacc[j], s_448, sacc[j])

    def packs_after(j):     # pack as soon as the *448 of p_j is issued
        out = []
        c, e = divmod(j, 8)
        base = sacc[8 * c]
        if e in (1, 5):
            dst = sacc[8 * c + e // 4]
            out.append(Op.raw(f"v_cvt_pk_fp8_f32 {dst}, {sacc[j - 1]}, {sacc[j]}", [sacc[j - 1], sacc[j], dst], [dst]))
        elif e in (3, 7):
            dst = sacc[8 * c + e // 4]
            # op_sel dst bit: the high half; the convert merges into dst (docs/rdna4.md §Hazards 9)
            out.append(Op.raw(f"v_cvt_pk_fp8_f32 {dst}, {sacc[j - 1]}, {sacc[j]} op_sel:[0,0,1]",
                              [sacc[j - 1], sacc[j], dst], [dst]))
        del base
        return out

    LAG = 2
    for j in range(4):
        ops.append(sub(j))
    for k in range(32):
        ops.append(exp(k))
        if k + 4 < 32:
            ops.append(sub(k + 4))
        j = k - LAG
        if j >= 1:
            ops.append(chain(j))
            if j >= 2:
                ops.append(scale(j - 2))
                ops += packs_after(j - 2)
    for j in range(32 - LAG, 32):
        ops.append(chain(j))
        ops.append(scale(j - 2))
        ops += packs_after(j - 2)
    for j in (30, 31):
        ops.append(scale(j))
        ops += packs_after(j)
    return ops


def lsum_ops() -> list[Op]:
    """l = l * alpha + (rs + rs of the other lane half) -- the HIP kernel's two roundings, in its order."""
    final = rs[0]           # R[31 % 2] of exp_ops
    return [Op.raw(f"v_permlanex16_b32 {xl}, {final}, {s_sel}, {PERMX16_SEL_HI}", [final], [xl]),
            vadd(final, final, xl),
            vmul(l_run, l_run, alpha[0]),
            vadd(l_run, l_run, final)]


def mask_lines(sacc) -> list[str]:
    """Last tile: scores of keys >= seq_len become -inf. Lane half h holds keys 32h + 8c + e (c chunk, e vgpr):
    valid when 8c + e < ntail - 32h."""
    out = [f"v_bfe_u32 {lim}, {tid}, 4, 1", f"v_lshlrev_b32 {lim}, 5, {lim}",
           f"v_sub_nc_u32_e32 {lim}, {s_ntail}, {lim}"]
    for c in range(CHUNKS):
        for e in range(8):
            out += [f"v_cmp_gt_i32_e32 vcc_lo, {lim}, {8 * c + e}" if False else
                    f"v_cmp_lt_i32_e32 vcc_lo, {8 * c + e}, {lim}",
                    "s_wait_alu depctr_va_vcc(0)",
                    f"v_cndmask_b32_e32 {sacc[8 * c + e]}, {F32_NEG_INF}, {sacc[8 * c + e]}, vcc_lo"]
    return out


def rescale(a: Asm, label: str) -> None:
    """O *= alpha, skipped when no lane's max moved (x * 1.0 == x: bitwise the same as always scaling)."""
    a.op(f"v_cmp_neq_f32_e32 vcc_lo, 1.0, {alpha[0]}")
    a.op("s_wait_alu depctr_va_vcc(0)")
    a.op(f"s_cbranch_vccz {label}")
    a.valu([vmul(O[j], alpha[j % 2], O[j]) for j in range(64)])
    a.label(label)


# ---------------------------------------------------------------------------------------------- kernel
def lds_lane_constants(a: Asm) -> None:
    a.section("prologue: lane constants (VALU while the kernargs load)")
    a.op(f"v_and_b32 {t_lane}, 31, {tid}", "lane")
    a.op(f"v_and_b32 {t_r}, 15, {tid}", "r = lane % 16")
    a.op(f"v_bfe_u32 {t_h}, {tid}, 4, 1", "h = lane / 16")
    a.op(f"v_lshlrev_b32 {ks_off}, 2, {t_h}", "4h: k_scale of this half inside a tile's pair")
    a.op(f"v_lshlrev_b32 {k_gl}, 4, {tid}", "K staging: chunk tid of the tile (16 B)")
    # K store: row = tid/8, col = tid%8, swizzled col ^ (row & 7)
    a.op(f"v_lshrrev_b32 {t_x}, 3, {tid}", "K row")
    a.op(f"v_and_b32 {t_y}, 7, {t_x}")
    a.op(f"v_and_b32 {t_z}, 7, {tid}")
    a.op(f"v_xor_b32 {t_y}, {t_y}, {t_z}")
    a.op(f"v_lshlrev_b32 {t_y}, 4, {t_y}")
    a.op(f"v_lshl_or_b32 {k_st}, {t_x}, 7, {t_y}", "row*128 + (col ^ row%8)*16")
    # V^T store: row = tid/4, col = tid%4, swizzled col ^ ((row >> 1) & 3)
    a.op(f"v_lshrrev_b32 {t_x}, 2, {tid}", "V^T row")
    a.op(f"v_bfe_u32 {t_y}, {t_x}, 1, 2")
    a.op(f"v_and_b32 {t_z}, 3, {tid}")
    a.op(f"v_xor_b32 {t_y}, {t_y}, {t_z}")
    a.op(f"v_lshlrev_b32 {t_y}, 4, {t_y}")
    a.op(f"v_lshl_or_b32 {v_st}, {t_x}, 6, {t_y}", "row*64 + (col ^ (row>>1)&3)*16")
    # K fragment reads: row = 32*(r/8) + r%8, 16-byte column (4h + i) ^ (r & 7)
    a.op(f"v_lshrrev_b32 {t_x}, 3, {t_r}")
    a.op(f"v_and_b32 {t_y}, 7, {t_r}")
    a.op(f"v_lshl_or_b32 {t_x}, {t_x}, 5, {t_y}", "row")
    a.op(f"v_lshlrev_b32 {t_x}, 7, {t_x}", "row * 128")
    a.op(f"v_lshlrev_b32 {t_z}, 2, {t_h}", "4h")
    for i in range(4):
        a.op(f"v_or_b32 {k_rd[i]}, {i}, {t_z}" if i else f"v_mov_b32 {k_rd[i]}, {t_z}")
        a.op(f"v_xor_b32 {k_rd[i]}, {k_rd[i]}, {t_y}")
        a.op(f"v_lshl_or_b32 {k_rd[i]}, {k_rd[i]}, 4, {t_x}")
    # V^T fragment reads: row d = r (+16dt), 16-byte column (2h + i) ^ ((r >> 1) & 3)
    a.op(f"v_bfe_u32 {t_y}, {t_r}, 1, 2")
    a.op(f"v_lshlrev_b32 {t_x}, 6, {t_r}", "r * 64")
    a.op(f"v_lshlrev_b32 {t_z}, 1, {t_h}", "2h")
    for i in range(2):
        a.op(f"v_or_b32 {v_rd[i]}, {i}, {t_z}" if i else f"v_mov_b32 {v_rd[i]}, {t_z}")
        a.op(f"v_xor_b32 {v_rd[i]}, {v_rd[i]}, {t_y}")
        a.op(f"v_lshl_or_b32 {v_rd[i]}, {v_rd[i]}, 4, {t_x}")
    a.op(f"v_lshlrev_b32 {q_off}, 7, {t_r}", "query row r * 128")
    a.op(f"v_lshl_or_b32 {q_off}, {t_h}, 6, {q_off}", "+ 64h (d permutation of the .hip header)")
    a.op(f"v_readfirstlane_b32 {s_wave}, {tid}")


def scalar_setup(a: Asm) -> None:
    a.section("prologue: scalar addressing")
    a.op("s_wait_kmcnt 0")
    a.op(f"s_lshr_b32 {s_wave}, {s_wave}, 5", "wave = tid / 32 (uniform)")
    a.op(f"s_and_b32 {s_head}, ttmp7, 0xffff", "workgroup id y = head (docs/rdna4.md §Entry)")
    a.op(f"s_lshr_b32 {s_batch}, ttmp7, 16", "workgroup id z = batch")
    a.op(f"s_mul_i32 {s_bh[0]}, {s_batch}, {s_nheads}")
    a.op(f"s_add_co_i32 {s_bh[0]}, {s_bh[0]}, {s_head}")
    a.op(f"s_mov_b32 {s_bh[1]}, 0")
    a.op(f"s_lshl_b32 {s_q0}, ttmp9, 6", "workgroup id x * 64")
    a.op(f"s_lshl_b32 {s_tmp[0]}, {s_wave}, 4")
    a.op(f"s_add_co_i32 {s_q0}, {s_q0}, {s_tmp[0]}", "q0 = 64*qtile + 16*wave")
    a.op(f"s_lshr_b32 {s_last}, {s_seqpad}, 6")
    a.op(f"s_add_co_i32 {s_last}, {s_last}, -1", "last tile index")
    a.op(f"s_lshl_b32 {s_tmp[0]}, {s_last}, 6")
    a.op(f"s_sub_co_i32 {s_ntail}, {s_seqlen}, {s_tmp[0]}", "valid keys in the last tile")
    a.op(f"s_mov_b32 {s_448}, {F32_448}")
    a.op(f"s_mov_b32 {s_magic}, {MAGIC_INT}")
    a.op(f"s_mov_b32 {s_sel}, {PERMX16_SEL_LO}")
    # head offset of q/k/v: bh * seq_pad * 128 bytes (64-bit)
    a.op(f"s_lshl_b32 {s_tmp[0]}, {s_seqpad}, 7")
    a.op(f"s_mov_b32 {s_tmp[1]}, 0")
    a.op(f"s_mul_u64 {s_tmp}, {s_tmp}, {s_bh}")
    a.op(f"s_add_nc_u64 {s_kh}, {sp_k}, {s_tmp}")
    a.op(f"s_add_nc_u64 {s_qrow}, {sp_q}, {s_tmp}")
    a.op(f"s_add_nc_u64 {s_vb[0:2]}, {sp_v}, {s_tmp}", "V^T of this head")
    a.op(f"s_lshl_b32 {s_tmp2[0]}, {s_q0}, 7")
    a.op(f"s_mov_b32 {s_tmp2[1]}, 0")
    a.op(f"s_add_nc_u64 {s_qrow}, {s_qrow}, {s_tmp2}", "Q rows of query q0")
    # V^T staging bases: row u*32 of tile 1 (the loop's first V load): + u*32*seq_pad + 64
    a.op(f"s_lshl_b32 {s_tmp2[0]}, {s_seqpad}, 5", "32 rows of V^T")
    a.op(f"s_add_nc_u64 {s_vb[2:4]}, {s_vb[0:2]}, {s_tmp2}")
    a.op(f"s_add_nc_u64 {s_vb[4:6]}, {s_vb[2:4]}, {s_tmp2}")
    a.op(f"s_add_nc_u64 {s_vb[6:8]}, {s_vb[4:6]}, {s_tmp2}")
    # k_scale / q_scale of this head: bh * (seq_pad / 32) floats
    a.op(f"s_lshr_b32 {s_tmp[0]}, {s_seqpad}, 5")
    a.op(f"s_mov_b32 {s_tmp[1]}, 0")
    a.op(f"s_mul_u64 {s_tmp}, {s_tmp}, {s_bh}")
    a.op(f"s_lshl_b64 {s_tmp}, {s_tmp}, 2")
    a.op(f"s_add_nc_u64 {s_ksb}, {sp_kscale}, {s_tmp}", "k_scale of tile 0")
    a.op(f"s_add_nc_u64 {s_tmp}, {sp_qscale}, {s_tmp}")
    a.op(f"s_lshr_b32 {s_tmp2[0]}, {s_q0}, 5")
    a.op(f"s_lshl_b32 {s_tmp2[0]}, {s_tmp2[0]}, 2")
    a.op(f"s_load_b32 {s_qs}, {s_tmp}, {s_tmp2[0]} offset:0x0", "q_scale of the wave's 32-query block")
    # k_mean / v_scale of this head: bh * 128 floats
    a.op(f"s_lshl_b64 {s_tmp}, {s_bh}, 9")
    a.op(f"s_add_nc_u64 {s_kmh}, {sp_kmean}, {s_tmp}")
    a.op(f"s_add_nc_u64 {s_vsh}, {sp_vscale}, {s_tmp}")
    # out row of (batch, q0, head): ((batch*S + q0)*H + head) * 256 bytes
    a.op(f"s_mul_i32 {s_tmp[0]}, {s_batch}, {s_seqlen}")
    a.op(f"s_add_co_i32 {s_tmp[0]}, {s_tmp[0]}, {s_q0}")
    a.op(f"s_mov_b32 {s_tmp[1]}, 0")
    a.op(f"s_mov_b32 {s_tmp2[0]}, {s_nheads}")
    a.op(f"s_mov_b32 {s_tmp2[1]}, 0")
    a.op(f"s_mul_u64 {s_tmp}, {s_tmp}, {s_tmp2}")
    a.op(f"s_mov_b32 {s_tmp2[0]}, {s_head}")
    a.op(f"s_add_nc_u64 {s_tmp}, {s_tmp}, {s_tmp2}")
    a.op(f"s_lshl_b64 {s_tmp}, {s_tmp}, 8")
    a.op(f"s_add_nc_u64 {s_outb}, {sp_out}, {s_tmp}")
    # lse of (bh, q0): (bh * S + q0) * 4 bytes
    a.op(f"s_mov_b32 {s_tmp2[0]}, {s_seqlen}")
    a.op(f"s_mul_u64 {s_tmp}, {s_bh}, {s_tmp2}")
    a.op(f"s_mov_b32 {s_tmp2[0]}, {s_q0}")
    a.op(f"s_add_nc_u64 {s_tmp}, {s_tmp}, {s_tmp2}")
    a.op(f"s_lshl_b64 {s_tmp}, {s_tmp}, 2")
    a.op(f"s_add_nc_u64 {s_lseb}, {sp_lse}, {s_tmp}")
    a.op(f"s_mov_b32 {s_koff[1]}, 0")
    a.op(f"s_mov_b32 {s_t}, 0")
    # VALU reads these SGPRs from now on; none is written again by SALU (docs/rdna4.md §Hazards 3)
    a.op("s_wait_alu depctr_sa_sdst(0)")
    a.op(f"v_mul_lo_u32 {v_gl}, {t_x}, {s_seqpad}" if False else f"v_lshrrev_b32 {t_x}, 2, {tid}")
    a.op(f"v_mul_lo_u32 {v_gl}, {t_x}, {s_seqpad}", "V^T row * seq_pad")
    a.op(f"v_and_b32 {t_y}, 3, {tid}")
    a.op(f"v_lshl_add_u32 {v_gl}, {t_y}, 4, {v_gl}", "+ col * 16")


def stage_loads(a: Asm, vm: WaitCounter, k_base, v_bases, tag: str, k_dst=None, v_dst=None) -> None:
    k_dst = stK if k_dst is None else k_dst
    v_dst = stV if v_dst is None else v_dst
    for u in range(STAGE_LOADS):
        if k_base is not None:
            a.op(f"global_load_b128 {k_dst[4 * u:4 * u + 4]}, {k_gl}, {k_base} offset:{u * STAGE_STEP}")
            vm.issue(f"{tag}k{u}")
    for u in range(STAGE_LOADS):
        if v_bases is not None:
            a.op(f"global_load_b128 {v_dst[4 * u:4 * u + 4]}, {v_gl}, {v_bases[2 * u:2 * u + 2]}")
            vm.issue(f"{tag}v{u}")


def stage_stores(a: Asm, kbuf: int | None, vbuf: int | None, k_src=None, v_src=None) -> None:
    k_src = stK if k_src is None else k_src
    v_src = stV if v_src is None else v_src
    for u in range(STAGE_LOADS):
        if kbuf is not None:
            a.op(f"ds_store_b128 {k_st}, {k_src[4 * u:4 * u + 4]} offset:{kbuf + u * STAGE_STEP}")
        if vbuf is not None:
            a.op(f"ds_store_b128 {v_st}, {v_src[4 * u:4 * u + 4]} offset:{vbuf + u * STAGE_STEP}")


def barrier(a: Asm, ds: WaitCounter) -> None:
    a.op("s_wait_dscnt 0", "LDS stores done before the barrier (docs/rdna4.md §Hazards 8)")
    ds.outstanding.clear()
    a.op("s_barrier_signal -1")
    a.op("s_barrier_wait -1")


def body(a: Asm, parity: int, last: bool) -> None:
    """One key tile t (t % 2 == parity). Not last: QK^T of tile t+1 is woven with the softmax of tile t,
    PV of tile t with the score scaling of tile t+1 (see the schedule in the header)."""
    cur, nxt = (SA, SB) if parity == 0 else (SB, SA)
    m_old, m_new = m[parity], m[1 - parity]
    vm, ds = WaitCounter(a, "s_wait_loadcnt"), WaitCounter(a, "s_wait_dscnt")
    tag = f"t{parity}{'L' if last else ''}"
    mat = Matrix()
    if not last:
        qk_matrix(mat, LDS_KBUF[1 - parity], nxt)
    pv_matrix(mat, LDS_VBUF[parity], cur)
    n_qk = 0 if last else len(QK_ORDER)
    wv = Weaver(a, mat, ds)

    if not last:
        a.section(f"tile t (t % 2 = {parity}): staging loads of K(min(t+2, last)), V^T(t+1), k_scale(t+1)")
        a.op(f"s_add_co_i32 {s_tmp[0]}, {s_t}, 2")
        a.op(f"s_min_u32 {s_tmp[0]}, {s_tmp[0]}, {s_last}")
        a.op(f"s_lshl_b32 {s_koff[0]}, {s_tmp[0]}, 13", f"* {K_TILE_BYTES} bytes")
        a.op(f"s_add_nc_u64 {s_kb}, {s_kh}, {s_koff}")
        a.op(f"s_add_nc_u64 {s_ksb}, {s_ksb}, 8", "k_scale pair of tile t+1")
        a.op(f"global_load_b32 {ks}, {ks_off}, {s_ksb}")
        vm.issue("ks")
        stage_loads(a, vm, s_kb, s_vb, tag)
        for u in range(STAGE_LOADS):
            a.op(f"s_add_nc_u64 {s_vb[2 * u:2 * u + 2]}, {s_vb[2 * u:2 * u + 2]}, {TILE_K}")
        a.section("phase X: fragment loads, row max of tile t, then QK^T(t+1) x 32 WMMA woven with exp/sum/pack")
    else:
        a.section(f"last tile (t % 2 = {parity}): mask keys >= seq_len, softmax, PV")
    wv.prefetch()
    if last:
        for ln in mask_lines(cur):
            a.op(ln)
    a.valu(max_ops(cur, m_old, m_new))
    for ln in alpha_select_lines(m_old):
        a.op(ln)
    from asmdsl import pair_vopd
    e_issues = pair_vopd(exp_ops(cur, m_new) + [Op.mov(alpha[1], alpha[0])] + lsum_ops())
    wv.phase(n_qk, e_issues)
    rescale(a, f".Lno_rescale_{parity}{'_last' if last else ''}")
    a.section("phase Y: PV(t) x 32 WMMA" + ("" if last else " woven with the score scaling of tile t+1"))
    y_items = []
    if not last:
        vm_wait = WaitCounter(a, "s_wait_loadcnt")
        vm_wait.outstanding = list(vm.outstanding)
        k = vm.outstanding.index("ks")
        y_items.append(f"s_wait_loadcnt {len(vm.outstanding) - k - 1}")
        del vm.outstanding[:k + 1]
        y_items += pair_vopd(scale_ops(nxt))
    wv.phase(len(PV_ORDER), y_items)
    if not last:
        a.section("end of tile: staging -> LDS (K(t+2) -> kbuf[t%2], V^T(t+1) -> vbuf[(t+1)%2]), one barrier")
        vm.wait_all()
        stage_stores(a, LDS_KBUF[parity], LDS_VBUF[1 - parity])
        barrier(a, ds)
        a.op(f"s_add_co_i32 {s_t}, {s_t}, 1")




def epilogue(a: Asm, parity_m) -> None:
    """out = bf16_sat((O * (1 / (448 l))) * v_scale) and the LSE, exactly as the HIP kernel's epilogue."""
    a.section("epilogue: inv = 1 / (448 l) (IEEE division, LLVM's v_div_scale/fmas/fixup sequence)")
    t, den, num, r, q, e = (ring[i] for i in range(6))
    a.op(f"v_mul_f32_e32 {t}, {F32_448}, {l_run}")
    a.op(f"v_div_scale_f32 {den}, null, {t}, {t}, 1.0")
    a.op(f"v_div_scale_f32 {num}, vcc_lo, 1.0, {t}, 1.0")
    a.op(f"v_rcp_f32_e32 {r}, {den}")
    a.op(f"v_fma_f32 {e}, -{den}, {r}, 1.0")
    a.op(f"v_fmac_f32_e32 {r}, {e}, {r}")
    a.op(f"v_mul_f32_e32 {q}, {num}, {r}")
    a.op(f"v_fma_f32 {e}, -{den}, {q}, {num}")
    a.op(f"v_fmac_f32_e32 {q}, {e}, {r}")
    a.op(f"v_fma_f32 {den}, -{den}, {q}, {num}")
    a.op("s_wait_alu depctr_va_vcc(0)")
    a.op(f"v_div_fmas_f32 {den}, {den}, {r}, {q}")
    inv = ring[6]
    a.op(f"v_div_fixup_f32 {inv}, {den}, {t}, 1.0")
    a.section("epilogue: v_scale, bf16 RNE saturating at +-bf16 max (NaN -> 0x7fc0), stores of the valid query rows")
    vsc = SA  # 64 v_scale values: SA/SB are free now
    vm = WaitCounter(a, "s_wait_loadcnt")
    a.op(f"v_bfe_u32 {t}, {tid}, 4, 1", "h")
    a.op(f"v_lshlrev_b32 {t}, 5, {t}", "8h floats = 32h bytes")
    for dt in range(D_TILES):
        for half in range(2):
            j = 8 * dt + 4 * half
            a.op(f"global_load_b128 {(SA if j < 32 else SB)[j % 32:j % 32 + 4]}, {t}, {s_vsh} "
                 f"offset:{dt * 64 + half * 16}")
            vm.issue(f"vs{dt}{half}")
    del vsc
    packed = ring[8:40] if RING * 4 >= 40 else None
    assert packed is not None
    for dt in range(D_TILES):
        vm.wait_for(f"vs{dt}1")
        for e in range(8):
            j = 8 * dt + e
            sc = (SA if j < 32 else SB)[j % 32]
            o = O[j]
            a.op(f"v_mul_f32_e32 {o}, {o}, {inv}")
            a.op(f"v_mul_f32_e32 {o}, {o}, {sc}")
            a.op(f"v_cmp_o_f32_e32 vcc_lo, {o}, {o}", "NaN test before the clamp (max/min_num drop NaN)")
            a.op(f"v_max_num_f32_e32 {o}, {F32_NEG_BF16_MAX}, {o}", "saturate at -bf16 max (numerics §Finite range)")
            a.op(f"v_min_num_f32_e32 {o}, {F32_BF16_MAX}, {o}", "saturate at +bf16 max")
            a.op(f"v_bfe_u32 {sc}, {o}, 16, 1")
            a.op(f"v_add3_u32 {sc}, {o}, {sc}, {BF16_ROUND}")
            a.op("s_wait_alu depctr_va_vcc(0)")
            a.op(f"v_cndmask_b32_e32 {sc}, {BF16_QNAN32}, {sc}, vcc_lo")
            if e % 2:
                lo = (SA if j - 1 < 32 else SB)[(j - 1) % 32]
                a.op(f"v_lshrrev_b32 {lo}, 16, {lo}")
                a.op(f"v_and_or_b32 {packed[4 * dt + e // 2]}, {sc}, {HI16_MASK}, {lo}")
    # LSE value (full EXEC: v_permlanex16 reads the other lane half)
    lse_v, lg = ring[0], ring[1]
    m_fin = m[parity_m]
    a.op(f"s_bitcmp1_b32 {s_flags}, {FLAG_LSE_BIT}")
    a.op("s_cbranch_scc0 .Lstore_out")
    a.section("epilogue: lse = (m + log2 l) * ln2 [+ ln2 * sum_d (q_int8 * q_scale) * k_mean]")
    a.op(f"v_log_f32_e32 {lg}, {l_run}")
    a.op(f"v_add_f32_e32 {lse_v}, {m_fin}, {lg}")
    a.op(f"v_mul_f32_e32 {lse_v}, {F32_LN2}, {lse_v}")
    a.op(f"s_bitcmp1_b32 {s_flags}, {FLAG_SMOOTH_BIT}")
    a.op("s_cbranch_scc0 .Lstore_out")
    kmv = SA  # 64 k_mean values over SA, SB
    km_off = ring[5]
    a.op(f"v_bfe_u32 {km_off}, {tid}, 4, 1", "h")
    a.op(f"v_lshlrev_b32 {km_off}, 8, {km_off}", "64h floats = 256h bytes")
    for j in range(16):
        a.op(f"global_load_b128 {(SA if 4 * j < 32 else SB)[(4 * j) % 32:(4 * j) % 32 + 4]}, {km_off}, {s_kmh} "
             f"offset:{16 * j}")
        vm.issue(f"km{j}")
    del kmv
    acc, qd = ring[2], ring[3]
    a.op(f"v_mov_b32 {acc}, 0")
    for i in range(4):
        for w in range(4):
            vm.wait_for(f"km{4 * i + w}")
            for b in range(4):
                d = 16 * i + 4 * w + b
                km = (SA if d < 32 else SB)[d % 32]
                a.op(f"v_bfe_i32 {qd}, {Q[4 * i + w]}, {8 * b}, 8")
                a.op(f"v_cvt_f32_i32_e32 {qd}, {qd}")
                a.op(f"v_mul_f32_e32 {qd}, {s_qs}, {qd}")
                a.op(f"v_mul_f32_e32 {qd}, {qd}, {km}")
                a.op(f"v_add_f32_e32 {acc}, {acc}, {qd}")
    a.op(f"v_permlanex16_b32 {xl}, {acc}, {s_sel}, {PERMX16_SEL_HI}")
    a.op(f"v_add_f32_e32 {acc}, {acc}, {xl}")
    a.op(f"v_mul_f32_e32 {acc}, {F32_LN2}, {acc}")
    a.op(f"v_add_f32_e32 {lse_v}, {lse_v}, {acc}")
    a.label(".Lstore_out")
    a.section("epilogue: stores (EXEC = valid query rows; lse from lanes 0-15)")
    a.op(f"v_and_b32 {v_qi}, 15, {tid}")
    a.op(f"v_add_nc_u32_e32 {v_qi}, {s_q0}, {v_qi}", "query index q0 + r")
    a.op(f"v_cmpx_gt_u32_e64 {s_seqlen}, {v_qi}")
    a.op("s_cbranch_execz .Lend")
    o_off = ring[4]
    a.op(f"v_and_b32 {o_off}, 15, {tid}")
    a.op(f"v_mul_lo_u32 {o_off}, {o_off}, {s_nheads}")
    a.op(f"v_lshlrev_b32 {o_off}, 8, {o_off}", "r * H * 256 bytes")
    h_tmp = ring[5]
    a.op(f"v_bfe_u32 {h_tmp}, {tid}, 4, 1", "h")
    a.op(f"v_lshl_add_u32 {o_off}, {h_tmp}, 4, {o_off}", "+ 16h bytes (8 bf16 of d-tile half h)")
    for dt in range(D_TILES):
        a.op(f"global_store_b128 {o_off}, {packed[4 * dt:4 * dt + 4]}, {s_outb} offset:{32 * dt}")
    a.op(f"s_bitcmp1_b32 {s_flags}, {FLAG_LSE_BIT}")
    a.op("s_cbranch_scc0 .Lend")
    a.op(f"v_and_b32 {o_off}, 31, {tid}")
    a.op(f"v_cmpx_gt_u32_e64 16, {o_off}", "lanes 0-15 hold the row's lse")
    a.op(f"v_and_b32 {o_off}, 15, {tid}")
    a.op(f"v_lshlrev_b32 {o_off}, 2, {o_off}")
    a.op(f"global_store_b32 {o_off}, {lse_v}, {s_lseb}")
    a.label(".Lend")
    a.op("s_endpgm")




def kernel_text() -> str:
    a = Asm()
    a.raw(header_text())
    a.raw(f"""        .amdgcn_target "amdgcn-amd-amdhsa--gfx1201"
        .amdhsa_code_object_version 6
        .text
        .globl  {SYMBOL}
        .p2align 8
        .type   {SYMBOL},@function
{SYMBOL}:""")
    a.section("prologue: kernargs")
    a.op(f"s_load_b256 s[{sp_q.base}:{sp_q.base + 7}], {kernarg}, 0x0", "q, k, v, q_scale")
    a.op(f"s_load_b256 s[{sp_kscale.base}:{sp_kscale.base + 7}], {kernarg}, 0x20")
    a.op(f"s_load_b128 s[{sp_lse.base}:{sp_lse.base + 3}], {kernarg}, 0x40")
    a.op(f"s_load_b64 s[{s_nheads.base}:{s_nheads.base + 1}], {kernarg}, 0x50")
    lds_lane_constants(a)
    scalar_setup(a)

    vm, ds = WaitCounter(a, "s_wait_loadcnt"), WaitCounter(a, "s_wait_dscnt")
    a.section("prologue: Q^T fragments, k_scale(0), K(0) and V^T(0) -> LDS buffers 0")
    for i in range(4):
        a.op(f"global_load_b128 {Q[4 * i:4 * i + 4]}, {q_off}, {s_qrow} offset:{16 * i}")
        vm.issue(f"q{i}")
    a.op(f"global_load_b32 {ks}, {ks_off}, {s_ksb}")
    vm.issue("ks0")
    stage_loads(a, vm, s_kh, s_vb, "p0")
    # V^T bases now advance to tile 1 (the loop loads V^T(t+1))
    for u in range(STAGE_LOADS):
        a.op(f"s_add_nc_u64 {s_vb[2 * u:2 * u + 2]}, {s_vb[2 * u:2 * u + 2]}, {TILE_K}")
    a.op(f"s_min_u32 {s_tmp[0]}, 1, {s_last}")
    a.op(f"s_lshl_b32 {s_koff[0]}, {s_tmp[0]}, 13")
    a.op(f"s_add_nc_u64 {s_kb}, {s_kh}, {s_koff}", "K(min(1, last))")
    a.section("prologue: O = 0, m = -inf, l = 0")
    a.valu([Op.mov(O[j], "0") for j in range(64)] + [Op.mov(magic[j], s_magic) for j in range(8)] +
           [Op.mov(m[0], F32_NEG_INF), Op.mov(l_run, "0")])
    vm.wait_all()
    stage_stores(a, LDS_KBUF[0], LDS_VBUF[0])
    barrier(a, ds)
    a.section("prologue: K(1) staging in flight while QK^T(0) runs; then its scores are scaled")
    stage_loads(a, vm, s_kb, None, "p1")
    mat = Matrix()
    qk_matrix(mat, LDS_KBUF[0], SA)
    wv = Weaver(a, mat, ds)
    wv.prefetch()
    wv.phase(len(QK_ORDER), [])
    a.op("s_wait_kmcnt 0", "q_scale")
    a.valu(scale_ops(SA))
    vm.wait_all()
    stage_stores(a, LDS_KBUF[1], None)
    barrier(a, ds)
    # the k_scale address points at tile 0; the loop adds 8 before each load of tile t+1
    a.section("main loop: two tiles per trip (register ping-pong SA/SB, m[0]/m[1], LDS buffers)")
    a.label(".Lloop")
    for parity in (0, 1):
        a.op(f"s_cmp_eq_u32 {s_t}, {s_last}")
        a.op(f"s_cbranch_scc1 .Llast_{parity}")
        body(a, parity, last=False)
    a.op("s_branch .Lloop")
    for parity in (0, 1):
        a.label(f".Llast_{parity}")
        body(a, parity, last=True)
        if parity == 0:
            a.op(f"v_mov_b32 {m[0]}, {m[1]}", "m of the last tile into m[0]")
            a.op("s_branch .Lepilogue")
    a.label(".Lepilogue")
    epilogue(a, 0)
    a.raw(f""".L{SYMBOL}_end:
        .size   {SYMBOL}, .L{SYMBOL}_end-{SYMBOL}
        .p2alignl 7, 0xBF9F0000
        .fill 96, 4, 0xBF9F0000
""")
    a.raw(descriptor())
    return a.text()


def descriptor() -> str:
    args = "\n".join(
        f"      - {{ .name: {n}, .offset: {o}, .size: {8 if k == 'ptr' else 4}, "
        + (".value_kind: global_buffer, .address_space: global"
           + (", .actual_access: read_only" if n not in ("out", "lse") else "")
           if k == "ptr" else ".value_kind: by_value") + " }"
        for n, k, o in KARGS)
    return f"""        .rodata
        .p2align 6
        .amdhsa_kernel {SYMBOL}
          .amdhsa_group_segment_fixed_size {LDS_BYTES}
          .amdhsa_private_segment_fixed_size 0
          .amdhsa_kernarg_size {KARG_SIZE}
          .amdhsa_user_sgpr_count 2
          .amdhsa_user_sgpr_kernarg_segment_ptr 1
          .amdhsa_wavefront_size32 1
          .amdhsa_system_sgpr_workgroup_id_x 1
          .amdhsa_system_sgpr_workgroup_id_y 1
          .amdhsa_system_sgpr_workgroup_id_z 1
          .amdhsa_system_vgpr_workitem_id 0
          .amdhsa_next_free_vgpr {NUM_VGPRS}
          .amdhsa_next_free_sgpr {NUM_SGPRS}
          .amdhsa_reserve_vcc 1
          .amdhsa_float_denorm_mode_32 3
          .amdhsa_float_denorm_mode_16_64 3
          .amdhsa_inst_pref_size 63
        .end_amdhsa_kernel

        .amdgpu_metadata
---
amdhsa.version:
  - 1
  - 2
amdhsa.target: amdgcn-amd-amdhsa--gfx1201
amdhsa.kernels:
  - .name:            {SYMBOL}
    .symbol:          {SYMBOL}.kd
    .kernarg_segment_size: {KARG_SIZE}
    .kernarg_segment_align: 8
    .group_segment_fixed_size: {LDS_BYTES}
    .private_segment_fixed_size: 0
    .wavefront_size:  32
    .sgpr_count:      {NUM_SGPRS + 2}
    .vgpr_count:      {NUM_VGPRS}
    .max_flat_workgroup_size: {THREADS}
    .uniform_work_group_size: 1
    .args:
{args}
...
        .end_amdgpu_metadata
"""


def header_text() -> str:
    """The .s header: contract, kernarg table, register map, LDS map, loop schedule and cycle budget."""
    kt = "\n".join(f"//   | {o:>6} | {n:<9} | {k:<4} |" for n, k, o in KARGS)

    def regmap(rf):
        return "\n".join(f"//   {str(r):<12} {r.name:<10} {note}" for r, note in rf.table)
    return f"""// {SYMBOL}: SageAttention forward (non-causal, head dim {HEAD_DIM}) for gfx1201, hand-scheduled.
// GENERATED by asm_src/gen_sage_attention_asm.py (asmdsl.py helpers) -- edit the generator, not this file.
// Hardware facts cite docs/rdna4.md sections (§WMMA, §Throughput, §Occupancy, §Memory, §Waits, §Hazards).
//
// Contract: the same operation, kernarg struct and launch geometry as asm_src/gfx1201_sage_attention.hip, and
// the same per-row arithmetic in the same order (scores = float(int dot) * (q_scale*k_scale); max; exp2(s - m);
// row sum p0+p1+..+p31 then + the other lane half; l = l*alpha + sum; fp8(p*448); per-accumulator PV chunk order
// 0,1,2,3; epilogue (O * (1/(448 l))) * v_scale -> bf16 RNE saturating at +-bf16 max; lse = (m + log2 l)*ln2 [+ ln2*q.k_mean]): the
// output and LSE are bitwise the HIP kernel's on the emulator (tests/test_attention_asm.py).
//
// Launch: grid (seq_pad/{TILE_Q}, num_heads, batch), block {THREADS} = {WAVES} wave32; wave w owns queries
// 64*x + 16w .. +15 of head (y, z) and walks all seq_pad/{TILE_K} key tiles.
//
// Kernarg struct ({KARG_SIZE} bytes, no hidden args; sage_co/ops/attention.py ATTENTION_FWD_ARGS):
//   | offset | name      | kind |
{kt}
//   flags bit {FLAG_LSE_BIT}: write lse; bit {FLAG_SMOOTH_BIT}: lse adds ln2 * (q_int8*q_scale).k_mean
//
// Data flow (docs/rdna4.md §WMMA "SageAttention data flow", same index permutations as the .hip header):
//   S^T = K.Q^T: {WMMA_QK} (A = K rows from LDS, B = Q^T kept in VGPRs), 4 chunks x 8 d-steps; lane (h, r)
//   holds query r, keys 32h + 8c + e in chunk c, VGPR e. Softmax is in-lane + one v_permlanex16 exchange.
//   O^T += V^T.P^T: {WMMA_PV} (A = V^T rows from LDS, B = P^T packed in place over the chunk's first two
//   score VGPRs by v_cvt_pk_fp8_f32). O^T = 8 d-tiles x 8 VGPRs; alpha is one value per lane.
//
// Tiles: 16 queries x 64 keys per wave and step. The launch geometry (64 queries per 4-wave workgroup) fixes 16
// queries per wave; 32 queries per wave would need a different grid, or a split of the key loop over waves
// with an LDS merge, and ~300 VGPRs for two O^T and S^T sets (over the 256 limit). 16 queries leave room for
// what the schedule needs: two S^T sets (the next tile's QK^T accumulates while this tile's softmax runs).
//
// LDS ({LDS_BYTES} B): kbuf0 @{LDS_KBUF[0]}, kbuf1 @{LDS_KBUF[1]} (K tiles {K_TILE_BYTES} B), vbuf0 @{LDS_VBUF[0]}, vbuf1 @{LDS_VBUF[1]}
// (V^T tiles {V_TILE_BYTES} B). K is staged one tile AHEAD of V^T: during step t the waves read K(t+1) from
// kbuf[(t+1)%2] and V^T(t) from vbuf[t%2] while K(t+2) and V^T(t+1) travel global -> VGPRs (issued at the top
// of step t, before its WMMA bursts) and are stored to kbuf[t%2] / vbuf[(t+1)%2] at its end: one barrier per
// step. 16-byte chunks are XOR-swizzled as in the .hip kernel (K: col ^ (row & 7); V^T: col ^ ((row >> 1) & 3)).
// Fragments go through a ring of {RING} ds_load_b128 slots, each reloaded right after its last WMMA.
//
// Loop schedule, step t (unrolled x2 so SA/SB, m[0]/m[1] and the LDS buffers alternate by name):
//   top      SALU addresses; global_load k_scale(t+1), K(min(t+2, last)) x{STAGE_LOADS}, V^T(t+1) x{STAGE_LOADS}
//   phase X  ds_load the first {RING} K fragments of tile t+1; row max of tile t (VOPD max chains,
//            v_permlanex16, v_max3), alpha; then 32 QK^T(t+1) WMMAs with tile t's exp2 / row sum / *448 /
//            fp8 pack woven between them (~3 VALU issues per WMMA; each row-sum add shares a VOPD with the *448
//            of an earlier p), V^T fragment loads of tile t as ring slots free up
//   rescale  O *= alpha only when some lane's max moved (v_cmp + s_cbranch_vccz; bitwise the same)
//   phase Y  32 PV(t) WMMAs woven with the scaling of tile t+1's scores (cvt + VOPD multiply)
//   end      s_wait_loadcnt 0; ds_store K(t+2), V^T(t+1); s_wait_dscnt 0; s_barrier_signal/wait
//   The last step (peeled, outside the loop) masks keys >= seq_len to -inf and runs softmax + PV only.
//
// Cycle budget per 64-key tile per SIMD (tools/perf_model.py's model: WMMA blocks VALU, VALU 1 issue/clk,
// VOPD = 1 issue, TRANS 4 clk in its own pipe): 64 WMMA x 8 = 512 clk; VALU ~{{int->float 16 + scale 16 +
// max 17 + m/alpha 8 + exp-arg 16 + exp 32 + sum&*448 32 + pack 16 + l 4}} = ~157 issues, plus 32 when the O
// rescale runs (most tiles at moderate S: some lane of 16 rows finds a new max); TRANS 33 x 4 = 132 < VALU.
// ~670-700 clk/tile = 75-78 % of the 8-bit WMMA peak; the floor of this arithmetic is 512 + 132 = 644 (exp2
// once per score). LDS 20 KiB/tile/wave = 320 clk, below the vector port. int->float: every chunk's first
// QK^T WMMA takes C = MAGIC_INT, so float(s_int) is an exact VOPD v_subrev_f32 instead of a v_cvt_f32_i32.
// Memory waits are placed where the data is first needed (§Waits: loads of a kind complete in order).
//
// Hazards (docs/rdna4.md §Hazards): no WMMA reads another WMMA's D as A/B (rule 1: A/B come from LDS, Q and
// the VALU-written P); D never overlaps A/B (rule 2); every VCC written by VALU and read again is preceded by
// s_wait_alu depctr_va_vcc(0) (rule 3); SGPRs read by VALU are written once in the prologue, followed by
// s_wait_alu depctr_sa_sdst(0); s_wait_dscnt 0 before every s_barrier_signal (rule 8); no scratch.
//
// Resources: {NUM_VGPRS} VGPRs -> {min(16, 1536 // (-(-NUM_VGPRS // 24) * 24))} waves/SIMD by registers; {LDS_BYTES} B LDS per 4-wave workgroup ->
// 4 workgroups per WGP = 4 waves/SIMD (the binding limit, as for the HIP kernel).
//
// VGPR map:
{regmap(V)}
// SGPR map:
{regmap(S)}
"""

if __name__ == "__main__":
    sys.stdout.write(kernel_text())
