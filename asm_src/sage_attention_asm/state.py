"""The kernel state of one Config: derived sizes (tiles, LDS map, fragment orders) and the register allocation
(VGPR and SGPR maps with their notes, which the .s header prints)."""
from __future__ import annotations

from asmdsl import RegFile
from sage_co import abi

from .config import (PRELOAD_BYTES, PRELOADED, B128, CHUNKS, KARG_SGPR, QRING_D256, RING, RING_D256, RING_PV16_D128,
                     SGPR_LIMIT, THREADS, TILE_K, V16_ROW_PAD, VGPR_LIMIT, WMMA_N, Config)


class KernelState:
    """Sizes and registers of one kernel; the stage mixins (prologue, matmul, softmax, loop, epilogue) read them."""

    def _staging_addresses(self, V) -> None:
        """The per-thread staging addresses and k_scale registers both layouts allocate, in this order."""
        self.k_st = V.alloc("k_st", note="LDS store address of this thread's K staging chunks")
        self.v_st = V.alloc("v_st", note="LDS store address of this thread's V^T staging chunks")
        self.k_gl = V.alloc("k_gl", note="global offset of this thread's K staging chunk 0 in a tile")
        self.v_gl = V.alloc("v_gl", note="global offset of this thread's V^T staging chunk 0 (row*seq_pad_kv + col*16)")
        self.ks = V.alloc("ks", note="k_scale of this lane half's 32 keys of the next tile")
        self.ks_off = V.alloc("ks_off", note="4h: byte offset of this lane half's k_scale in a tile's pair")


    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.SYMBOL = cfg.symbol
        self.HEAD_DIM = cfg.head_dim
        self.D_TILES = cfg.head_dim // WMMA_N            # O^T d-tiles of 16 channels (= 16-byte chunks per K row)
        self.QF = cfg.head_dim // 32                     # Q^T fragments of 16 B per lane (lane half: head_dim/2 B)
        self.HCOL = self.D_TILES // 2                    # 16-byte K-row chunks one lane half reads
        self.K_TILE_BYTES = TILE_K * cfg.head_dim        # int8 [TILE_K keys][head_dim d]
        self.PV16 = cfg.pv_dtype == "fp16"
        self.V_BYTES = 2 if self.PV16 else 1             # bytes per V element
        self.RING = RING_PV16_D128 if self.PV16 and cfg.head_dim == 128 else RING
        # head dim 256 (docs/performance.md §Head dim 256): O^T alone is 128 VGPRs, so the tile runs in order (QK^T,
        # softmax, PV of the same tile, one S^T set), K(t+1) and V^T(t+1) share one staging set, and Q^T lives in
        # LDS (read through a 2-slot ring like the K fragments): 64 KiB of LDS -> 2 workgroups per WGP
        self.WIDE = cfg.head_dim > 128
        if self.WIDE:
            self.RING = RING_D256
        # V^T rows: fp8 TILE_K bytes (XOR swizzle); fp16 2*TILE_K bytes + V16_ROW_PAD (padding instead of XOR, so
        # every thread's staging chunks and every lane's fragments sit at immediate offsets from one address)
        self.V_ROW_BYTES = TILE_K * self.V_BYTES + (V16_ROW_PAD if self.PV16 else 0)
        self.V_TILE_BYTES = cfg.head_dim * self.V_ROW_BYTES   # [head_dim d][TILE_K keys]
        self.LDS_KBUF = (0, self.K_TILE_BYTES)
        # pv fp16: ONE V^T tile (vbuf0 == vbuf1): V^T(t+1) is stored after the end-of-step barrier and published by
        # a second one, so the LDS (2 K tiles + 1 V^T tile) leaves room for 3 workgroups per WGP instead of 2
        # head dim 256: one V^T tile too (V^T(t+1) is stored after the end-of-tile barrier, published by the barrier
        # after the next tile's QK^T), and after it the Q^T tile of the workgroup (fragment i of thread tid at
        # LDS_Q + i * THREADS * 16 + tid * 16: each wave reads back only what it stored)
        self.SINGLE_V = self.PV16 or self.WIDE
        self.LDS_VBUF = (2 * self.K_TILE_BYTES, 2 * self.K_TILE_BYTES + (0 if self.SINGLE_V else self.V_TILE_BYTES))
        self.LDS_BYTES = 2 * self.K_TILE_BYTES + (1 if self.SINGLE_V else 2) * self.V_TILE_BYTES
        self.LDS_Q = self.LDS_BYTES
        self.Q_FRAG_STEP = THREADS * B128               # bytes between fragment i and i+1 of the Q^T tile
        if self.WIDE:
            self.LDS_BYTES += self.QF * self.Q_FRAG_STEP
        self.K_ROW_BYTES = cfg.head_dim                  # bytes per key row (head_dim / 16 chunks)
        self.STAGE_LOADS = (self.K_TILE_BYTES // THREADS) // B128   # b128 global loads per thread per tile
        # V^T staging: fp8 as K (STAGE_LOADS chunks, rows u*32 apart); fp16 V16_LOADS consecutive chunks of one row
        self.V16_LOADS = (cfg.head_dim * TILE_K * 2 // THREADS) // B128
        self.V16_PER_ROW = (TILE_K * 2 // B128) // self.V16_LOADS   # threads staging one fp16 V^T row
        self.V_LOADS = self.V16_LOADS if self.PV16 else self.STAGE_LOADS
        self.STAGE_STEP = THREADS * B128                 # bytes between a thread's successive staging chunks
        # the smallest real head dim this D_pad serves (abi.d_pad, any D): d-tiles wholly below it are always stored
        smaller = [d for d in abi.HEAD_DIMS_NATIVE if d < cfg.head_dim]
        self.MIN_HEAD_DIM = (max(smaller) if smaller else 0) + 1
        # fragments of one loop iteration
        # QK^T: frag (i, c) = 16 bytes of K row 32*(r/8) + 8c + r%8 at d-group i (A of two d-steps)
        # PV:   frag (i, dt) = 16 bytes of V^T row 16dt + r, keys 32h + 16i.. (A of chunks 2i, 2i+1)
        self.QK_ORDER = [(i, half, c) for i in range(self.QF) for half in range(2) for c in range(CHUNKS)]
        self.PV_ORDER = [(i, grp, half, dt) for i in range(2) for grp in range(self.D_TILES // 4) for half in range(2)
                         for dt in range(4 * grp, 4 * grp + 4)]
        # pv fp16: frag (c, dt) = 16 bytes (keys 32h + 8c.., 8 halves) of V^T row 16dt + r: A of chunk c alone
        self.PV16_ORDER = [(c, dt) for c in range(CHUNKS) for dt in range(self.D_TILES)]
        self.N_PV = len(self.PV16_ORDER) if self.PV16 else len(self.PV_ORDER)
        # attn_mask additive tiles: b128 bias loads (4 floats each) into the ring at the start of a tile (32 biases
        # per lane; a smaller ring loads the rest after the first ones are used)
        self.BIAS_LOADS = min(32 // 4, self.RING)
        self._allocate_vgprs()
        self._allocate_sgprs()

    def _allocate_vgprs(self) -> None:
        if self.WIDE:
            self._allocate_vgprs_wide()
            return
        V = self.V = RegFile("v", VGPR_LIMIT)
        self.tid = V.fixed("tid", 0, note="work-item id x (entry state, docs/rdna4.md §Entry); lane math reads it")
        V.next = 1
        # lane constants
        self.k_rd = V.alloc("k_rd", self.QF, note="LDS byte address of K fragment d-group i (chunk c adds 8 rows)")
        if self.PV16:
            self.v_rd = V.alloc("v_rd", 1, note=f"LDS byte address of V^T row r, keys 32h.. (chunk c adds 16c, d-tile "
                                f"dt*{16 * self.V_ROW_BYTES})")
        else:
            self.v_rd = V.alloc("v_rd", 2, note="LDS byte address of V^T fragment half i (d-tile adds dt*1024)")
        self._staging_addresses(V)
        self.qk = V.alloc("qk", 2, note="q_scale*k_scale, two copies in different banks (VOPD src0)")
        self.m = V.alloc("m", 3, align=4, note="m[0], m[1]: running max ping-pong (even/odd tile); m[2]: copy of m_new")
        self.alpha = V.alloc("alpha", 2, note="exp2(m_old - m_new), two banks (VOPD src0); alpha[0] also the scratch of it")
        self.l_run = V.alloc("l_run", note="running row sum")
        self.rs = V.alloc("rs", 2, align=2, note="row-sum chain ping-pong: rs[1] (odd VGPR) after even steps, rs[0] after odd")
        self.mx = V.alloc("mx", 4, align=4, note="row-max partials; mx[0] ends as the lane max")
        self.xl = V.alloc("xl", note="v_permlanex16 result")
        self.lim = V.alloc("lim", note="masked tiles: keys of this lane half still visible (lim(row) - key0); "
                           "then a copy of m_use (VOPD bank of the exp2 arguments)")
        self.O = V.alloc("O", 8 * self.D_TILES, align=8,
                         note="O^T accumulators: d-tile dt = O[8dt:8dt+8], lane (h,r) row d=16dt+8h+e")
        self.SA = V.alloc("SA", 32, align=8, note="S^T of even tiles: chunk c = SA[8c:8c+8]; scores, then p, P^T fp8 in place")
        self.SB = V.alloc("SB", 32, align=8, note="S^T of odd tiles (the next tile's QK^T accumulates here)")
        self.Q = V.alloc("Q", 4 * self.QF, align=4,
                         note=f"Q^T B-fragments: Q[4i:4i+4] = 16 bytes {self.HEAD_DIM // 2}h+16i.. of query row r")
        self.stK = V.alloc("stK", 4 * self.STAGE_LOADS, align=4, note="global->LDS staging of K tile t+2")
        self.stV = V.alloc("stV", 4 * self.V_LOADS, align=4, note="global->LDS staging of V^T tile t+1")
        self.ring = V.alloc("ring", 4 * self.RING, align=4,
                            note=f"{self.RING} LDS fragment slots of 4 VGPRs (ds_load_b128)")
        self.magic = V.alloc("magic", 8, note="0x4b400000 x 8: C of each chunk's first QK^T WMMA (int -> float trick)")
        self.NUM_VGPRS = V.used
        # lane offsets computed in the prologue that need homes only briefly (the ring is free then)
        self.t_lane, self.t_r, self.t_h, self.t_x, self.t_y, self.t_z = (self.ring[i] for i in range(6))
        self.q_off = self.ring[6]          # global offset of this lane's Q row (prologue only)
        self.v_qi = self.stK[0]            # epilogue: this lane's query index

    def _allocate_vgprs_wide(self) -> None:
        """Head dim 256 (docs/performance.md §Head dim 256): O^T 128 + S^T 32 + ring 24 + Q^T slots 8 + one staging
        set 32 + the lane constants: 256 VGPRs. The softmax temporaries (mx, xl, lim, rs) live in the Q^T
        slots, which only the QK^T phase uses (the mask loads and the softmax come after it)."""
        V = self.V = RegFile("v", VGPR_LIMIT)
        self.tid = V.fixed("tid", 0, note="work-item id x (entry state, docs/rdna4.md §Entry); lane math reads it")
        V.next = 1
        self.k_rd = V.alloc("k_rd", self.QF, note="LDS byte address of K fragment d-group i (chunk c adds 8 rows)")
        self.v_rd = V.alloc("v_rd", 2, note="LDS byte address of V^T fragment half i (d-tile adds dt*1024)")
        self._staging_addresses(V)
        self.q_rd = V.alloc("q_rd", note=f"LDS byte address of this thread's Q^T fragment 0 (fragment i adds "
                            f"{self.Q_FRAG_STEP}i)")
        self.qk = V.alloc("qk", 2, note="q_scale*k_scale of the current tile, two copies in different banks (VOPD src0)")
        self.m = V.alloc("m", 3, align=4, note="m[0], m[1]: running max ping-pong (even/odd tile); m[2]: copy of m_new")
        self.alpha = V.alloc("alpha", 2, note="exp2(m_old - m_new), two banks (VOPD src0); alpha[0] also the scratch of it")
        self.l_run = V.alloc("l_run", note="running row sum")
        self.O = V.alloc("O", 8 * self.D_TILES, align=8,
                         note="O^T accumulators: d-tile dt = O[8dt:8dt+8], lane (h,r) row d=16dt+8h+e; the epilogue "
                              "packs d-tile dt's outputs into O[8dt:8dt+4]")
        self.SA = V.alloc("SA", 32, align=8, note="S^T of the tile: chunk c = SA[8c:8c+8]; scores, then p, P^T fp8 in place")
        self.SB = None
        self.ring = V.alloc("ring", 4 * self.RING, align=4,
                            note=f"{self.RING} LDS fragment slots of 4 VGPRs (ds_load_b128)")
        self.qring = V.alloc("qring", 4 * QRING_D256, align=4,
                             note=f"{QRING_D256} Q^T fragment slots (QK^T phase); then the softmax temporaries")
        self.mx = V.fixed("mx", self.qring.base, 4, note="row-max partials; mx[0] ends as the lane max (in qring)")
        self.xl = V.fixed("xl", self.qring.base + 4, note="v_permlanex16 result (in qring)")
        self.lim = V.fixed("lim", self.qring.base + 5, note="masked tiles: keys of this lane half still visible "
                           "(lim(row) - key0); then a copy of m_use (in qring)")
        self.rs = V.fixed("rs", self.qring.base + 6, 2, note="row-sum chain ping-pong: rs[1] (odd VGPR) after even "
                          "steps, rs[0] after odd (in qring)")
        self.stK = V.alloc("stage", 4 * self.STAGE_LOADS, align=4,
                           note="global->LDS staging: Q^T (prologue), then K(t+1), then V^T(t+1) in turn")
        self.stV = self.stK
        self.magic = None   # S^T is set to MAGIC_INT by v_mov before each QK^T (loop.body_wide): 8 VGPRs for the ring
        self.NUM_VGPRS = V.used
        self.t_lane, self.t_r, self.t_h, self.t_x, self.t_y, self.t_z = (self.ring[i] for i in range(6))
        self.q_off = self.ring[6]
        self.v_qi = self.stK[0]
        self.Q = None

    def _allocate_sgprs(self) -> None:
        S = self.S = RegFile("s", SGPR_LIMIT)
        self.kernarg = S.fixed("kernarg", 0, 2, "kernarg segment pointer (only user SGPR, docs/rdna4.md §Entry)")
        # the kernarg struct, dword for dword (sage_co/abi.py ATTENTION_FWD_ARGS), from KARG_SGPR on
        karg = {f.name: S.fixed(f.name, KARG_SGPR + f.offset // 4, f.size // 4, f"kernarg {f.name} ({f.kind})")
                for f in PRELOADED}
        S.next = KARG_SGPR + PRELOAD_BYTES // 4
        self.karg = karg
        # attn_mask (FLAG_MASK; docs/numerics.md §Masks "attn_mask"): kernarg SGPRs dead after the prologue's scalar
        # addressing take the mask state (the SGPR file has no room for more; prologue.mask_setup fills them)
        self.s_kindrow = karg["q"]                 # mask_kind row of this query tile (the LUT row's offsets)
        self.s_mrow = karg["k"]                    # bit rows of query q0 (+ r * mask_stride_s per lane)
        self.s_brow = karg["v_mean"]               # bias rows of query q0
        self.s_mss = karg["causal_offset"]         # mask_stride_s (u32 words per query row; 0: key padding)
        self.s_kind = karg["lut_stride_b"]         # kind of L[t]
        self.s_kindn = karg["lut_stride_h"]        # kind of L[t+1] (in flight during tile t)
        self.sp_q, self.sp_k, self.sp_v = karg["q"], karg["k"], karg["v"]
        self.sp_qscale, self.sp_kscale, self.sp_kmean = karg["q_scale"], karg["k_scale"], karg["k_mean"]
        self.sp_vscale, self.sp_out, self.sp_lse = karg["v_scale"], karg["out"], karg["lse"]
        self.s_seqlen_q, self.s_seqpad_q = karg["seq_len_q"], karg["seq_pad_q"]
        self.s_seqlen, self.s_seqpad = karg["seq_len_kv"], karg["seq_pad_kv"]   # the key loop's length
        self.s_nheads, self.s_nheads_kv = karg["num_heads_q"], karg["num_heads_kv"]
        self.s_magic_kv, self.s_flags, self.s_headdim = karg["kv_group_magic"], karg["flags"], karg["head_dim"]
        self.s_ostride = (karg["out_stride_b"], karg["out_stride_s"], karg["out_stride_h"])
        self.s_head = S.alloc("head")
        self.s_batch = S.alloc("batch")
        self.s_wave = S.alloc("wave")
        self.s_bh = S.alloc("bh", 2, 2, "batch*H_q + head (hi word 0)")
        self.s_bkv = S.alloc("bkv", 2, 2, "batch*H_kv + K/V head (hi word 0)")
        self.s_tmp = S.alloc("tmp", 2, 2)
        self.s_tmp2 = S.alloc("tmp2", 2, 2)
        self.s_tmp3 = S.alloc("tmp3", 2, 2)
        self.s_q0 = S.alloc("q0", note="first query of this wave")
        self.s_last = S.alloc("last_tile", note="count - 1: the last LUT entry")
        self.s_rowlim0 = S.alloc("rowlim0", note="i32: q0 + causal_offset + 1 (causal) or seq_len_kv: row q0+r "
                                 "sees keys < min(rowlim0 + r, seq_len_kv)")
        self.s_wlim = S.alloc("wlim", note="i32: the smallest row limit of the wave: tiles ending above it are masked")
        self.s_lutrow = S.alloc("lutrow", 2, 2, "LUT row of this query tile")
        self.s_lut = S.alloc("lut4", 4, 4, "count, L[t], L[min(t+1, last)], L[min(t+2, last)] (active key tiles)")
        self.s_cnt, self.s_Lc, self.s_L1, self.s_L2 = (self.s_lut[i] for i in range(4))
        self.s_L3 = S.alloc("L3", note="L[min(t+3, last)] (in flight during tile t)")
        self.s_magic = S.alloc("magic", note="12582912.0f = 0x4b400000 (VOPD src0 of the int -> float subtraction)")
        self.s_sel = S.alloc("permsel", note="v_permlanex16 lane select 0x76543210")
        self.s_qs = S.alloc("qs", note="q_scale of this wave's 16 queries")
        self.s_t = S.alloc("tile", note="loop: current key tile t")
        self.s_kh = S.alloc("kh", 2, 2, "K of this K/V head")
        self.s_qrow = S.alloc("qrow", 2, 2, "Q rows of this wave")
        self.s_kb = S.alloc("kb", 2, 2, "K staging base (tile min(t+2, last))")
        self.s_koff = S.alloc("koff", 2, 2, "K staging tile byte offset (hi word 0)")
        if self.PV16 or self.WIDE:   # head dim 256: the rows u*32 by SALU adds at each load (loop.v_stage_loads)
            self.s_vb = S.alloc("vb", 2, 2, "V^T staging base (tile t+1)")
        else:
            self.s_vb = S.alloc("vb", 2 * self.STAGE_LOADS, 2,
                                f"V^T staging bases of chunk rows u*32 (u < {self.STAGE_LOADS}), tile t+1")
        self.s_addmean = S.alloc("addmean", note="epilogue: lanes that add v_mean (smooth_v and l != 0)")
        self.s_vmh = S.alloc("vmh", 2, 2, "v_mean of this K/V head")
        self.s_ksb = S.alloc("ksb", 2, 2, "k_scale of tile t+1")
        self.s_kmh = S.alloc("kmh", 2, 2, "k_mean of this K/V head")
        self.s_vsh = S.alloc("vsh", 2, 2, "v_scale of this K/V head")
        self.s_outb = S.alloc("outb", 2, 2, "out row of query q0")
        self.s_lseb = S.alloc("lseb", 2, 2, "lse of query q0")
        self.NUM_SGPRS = S.used
        # varlen (abi.FLAG_VARLEN), scalar setup only: the sequence's values live in SGPRs that are free until the
        # key loop / epilogue first writes them (so the SGPR count stays that of the dense kernel)
        self.s_vl_tokq = self.s_addmean   # cu_seqlens_q[b] (0 without varlen): first out / lse row; then + q0
        self.s_vl_rowq = self.s_L3        # packed_row(cu_seqlens_q[b], b) (0): first prepared Q row
        self.s_vl_rowkv = self.s_t        # packed_row(cu_seqlens_kv[b], b) (0): first prepared K row / V^T column
        self.s_vl_lenq = self.s_koff[0]   # len_q (seq_len_q): moved into seq_len_q once lse's base is known
        self.s_vl_seq = self.s_sel        # b with varlen (0 without): the sequence of k_mean / v_scale / v_mean
