"""The prologue: kernarg loads, lane constants (LDS/global addresses of this lane), scalar addressing (head bases,
LUT row, scale pointers), and the first tile: Q^T fragments, K(0)/V^T(0) to LDS, QK^T(0)."""
from __future__ import annotations

from asmdsl import Asm, Op, WaitCounter
from sage_co import abi

from .config import (ARGS, B128, F32_BYTES, F32_M_INIT, KARG_SGPR, MAGIC_INT, OUT_BYTES, PERMX16_SEL_LO,
                     SCALE_BLOCK, TILE_K, TILE_Q, V_STAGE_ROWS, WAVE_Q, kernarg_loads, log2)
from .stream import Matrix, Weaver


class Prologue:
    """The prologue stage of AttentionKernel (reads KernelState)."""

    def prologue(self, a: Asm) -> None:
        """Everything before the key loop: kernargs, lane constants, scalar addressing, the first tile."""
        a.section("prologue: kernargs (the whole struct of sage_co/abi.py, dword i in SGPR KARG_SGPR + i)")
        for mnemonic, first, offset, names in kernarg_loads(KARG_SGPR):
            n = int(mnemonic.removeprefix("s_load_b")) // 32
            dst = f"s{first}" if n == 1 else f"s[{first}:{first + n - 1}]"
            a.op(f"{mnemonic} {dst}, {self.kernarg}, 0x{offset:x}", names)
        self.lds_lane_constants(a)
        self.scalar_setup(a)
        if self.WIDE:
            self.first_tile_wide(a)
        else:
            self.first_tile(a)

    def first_tile_wide(self, a: Asm) -> None:
        """Head dim 256: Q^T (the staging set), K(L[0]) and V^T(L[0]) (O's registers, zeroed after) loaded at once and
        stored to LDS (Q^T to LDS_Q, K to kbuf0, V^T to vbuf), barrier, qk of tile 0. A LUT count of 0 stores Q^T
        (the epilogue's smooth_k term reads it back) and goes to .Lempty."""
        vm, ds = WaitCounter(a, "s_wait_loadcnt"), WaitCounter(a, "s_wait_dscnt")
        a.section("prologue: Q^T fragments, k_scale(0), K(0) and V^T(0) -> LDS (Q^T, kbuf0, vbuf)")
        for i in range(self.QF):
            a.op(f"global_load_b128 {self.stK[4 * i:4 * i + 4]}, {self.q_off}, {self.s_qrow} offset:{B128 * i}")
            vm.issue(f"q{i}")
        a.op(f"v_lshl_add_u32 {self.q_rd}, {self.tid}, {log2(B128)}, {self.LDS_Q}", "Q^T fragment 0 of this thread")
        a.op(f"s_cmp_eq_u32 {self.s_cnt}, 0", "no active key tile: zeros and lse -inf")
        a.op("s_cbranch_scc1 .Lempty_q")
        self.ool.label(".Lempty_q")
        self.ool.op("s_wait_loadcnt 0")
        self.wide_stores(self.ool, self.q_rd, 0)
        self.ool.op("s_branch .Lempty")
        a.op(f"global_load_b32 {self.ks}, {self.ks_off}, {self.s_ksb}")
        vm.issue("ks0")
        self.k_tile_base(a, self.s_Lc, "K(L[0])")
        k0, v0 = self.O[0:4 * self.STAGE_LOADS], self.O[4 * self.STAGE_LOADS:4 * (self.STAGE_LOADS + self.V_LOADS)]
        self.wide_k_loads(a, vm, "p0", dst=k0)
        self.wide_v_loads(a, vm, "p0", dst=v0)
        a.section("prologue: m = -inf, l = 0; the stores to LDS; O = 0 (after its registers are stored)")
        a.valu([Op.mov(self.m[0], F32_M_INIT), Op.mov(self.l_run, "0")])
        vm.wait_all()
        self.wide_stores(a, self.q_rd, 0)
        self.wide_stores(a, self.k_st, self.LDS_KBUF[0], src=k0)
        self.wide_stores(a, self.v_st, self.LDS_VBUF[0], src=v0)
        # WAR on store data is interlocked (docs/rdna4.md §Hazards 8): O may be overwritten at once
        a.valu([Op.mov(self.O[j], "0") for j in range(self.O.n)])
        self.barrier(a, ds)
        a.op("s_wait_kmcnt 0", "q_scale")
        a.valu(self.scale_ops(None))

    def first_tile(self, a: Asm) -> None:
        """Q^T fragments, K(L[0]) and V^T(L[0]) into LDS buffers 0, O/m/l, then QK^T(0) and its scaling while
        K(L[min(1, last)]) travels to LDS buffer 1. A LUT count of 0 branches to .Lempty."""
        vm, ds = WaitCounter(a, "s_wait_loadcnt"), WaitCounter(a, "s_wait_dscnt")
        a.section("prologue: Q^T fragments, k_scale(0), K(0) and V^T(0) -> LDS buffers 0")
        for i in range(self.QF):
            a.op(f"global_load_b128 {self.Q[4 * i:4 * i + 4]}, {self.q_off}, {self.s_qrow} offset:{B128 * i}")
            vm.issue(f"q{i}")
        a.op(f"s_cmp_eq_u32 {self.s_cnt}, 0", "no active key tile: zeros and lse -inf")
        a.op("s_cbranch_scc1 .Lempty")
        a.op(f"global_load_b32 {self.ks}, {self.ks_off}, {self.s_ksb}")
        vm.issue("ks0")
        self.k_tile_base(a, self.s_Lc, "K(L[0])")
        self.stage_loads(a, vm, self.s_kb, self.s_vb, "p0")
        self.k_tile_base(a, self.s_L1, "K(L[min(1, last)])")
        a.section("prologue: O = 0, m = -inf, l = 0")
        a.valu([Op.mov(self.O[j], "0") for j in range(self.O.n)] + [Op.mov(self.magic[j], self.s_magic) for j in range(8)] +
               [Op.mov(self.m[0], F32_M_INIT), Op.mov(self.l_run, "0")])
        vm.wait_all()
        self.stage_stores(a, self.LDS_KBUF[0], self.LDS_VBUF[0])
        self.barrier(a, ds)
        a.section("prologue: K(1) staging in flight while QK^T(0) runs; then its scores are scaled")
        self.stage_loads(a, vm, self.s_kb, None, "p1")
        mat = Matrix(self.ring)
        self.qk_matrix(mat, self.LDS_KBUF[0], self.SA)
        wv = Weaver(a, mat, ds)
        wv.prefetch()
        wv.phase(len(self.QK_ORDER), [])
        a.op("s_wait_kmcnt 0", "q_scale")
        a.valu(self.scale_ops(self.SA))
        vm.wait_all()
        self.stage_stores(a, self.LDS_KBUF[1], None)
        self.barrier(a, ds)

    def kswz_lines(self, dst, row) -> list[str]:
        """dst = the XOR swizzle of K row `row`: row & 7 for 8 or 16 chunks per row (head dim 128, 256), (row >> 1) & 3 for 4
        (head dim 64, like the V^T rows), as the .hip kernel's kswz<DP>."""
        if self.D_TILES >= 8:   # head dim 256 (16 chunks) too: 8 lanes of rows r..r+7 hit 8 distinct chunks
            return [f"v_and_b32 {dst}, 7, {row}"]
        return [f"v_bfe_u32 {dst}, {row}, 1, 2"]

    def lds_lane_constants(self, a: Asm) -> None:
        ncol = self.D_TILES
        a.section("prologue: lane constants (VALU while the kernargs load)")
        a.op(f"v_and_b32 {self.t_lane}, 31, {self.tid}", "lane")
        a.op(f"v_and_b32 {self.t_r}, 15, {self.tid}", "r = lane % 16")
        a.op(f"v_bfe_u32 {self.t_h}, {self.tid}, 4, 1", "h = lane / 16")
        a.op(f"v_lshlrev_b32 {self.ks_off}, 2, {self.t_h}", "4h: k_scale of this half inside a tile's pair")
        a.op(f"v_lshlrev_b32 {self.k_gl}, {log2(B128)}, {self.tid}", "K staging: chunk tid of the tile (16 B)")
        # K store: row = tid / ncol, col = tid % ncol, swizzled col ^ kswz(row)
        a.op(f"v_lshrrev_b32 {self.t_x}, {log2(ncol)}, {self.tid}", "K row")
        for ln in self.kswz_lines(self.t_y, self.t_x):
            a.op(ln)
        a.op(f"v_and_b32 {self.t_z}, {ncol - 1}, {self.tid}")
        self.swizzled_store_address(a, self.k_st, self.K_ROW_BYTES, f"row*{self.K_ROW_BYTES} + (col ^ kswz(row))*16")
        if self.PV16:
            self.v16_lane_constants(a)
        else:
            self.v8_lane_constants(a)
        self.k_q_lane_constants(a)

    def swizzled_store_address(self, a: Asm, dst, row_bytes: int, comment: str) -> None:
        """dst = row * row_bytes + (col ^ swizzle) * 16, the LDS store address of a 16-byte chunk (XOR swizzle of
        the .hip kernel), from t_x = row, t_y = swizzle, t_z = col (t_y is overwritten)."""
        a.op(f"v_xor_b32 {self.t_y}, {self.t_y}, {self.t_z}")
        a.op(f"v_lshlrev_b32 {self.t_y}, {log2(B128)}, {self.t_y}")
        a.op(f"v_lshl_or_b32 {dst}, {self.t_x}, {log2(row_bytes)}, {self.t_y}", comment)

    def swizzled_read_addresses(self, a: Asm, dsts) -> None:
        """dsts[i] = t_x + ((t_z + i) ^ t_y) * 16: the LDS address of fragment column t_z + i (t_z has its low bits
        clear, so + i is an OR) of the row at byte t_x, swizzle t_y."""
        for i in range(dsts.n):
            a.op(f"v_or_b32 {dsts[i]}, {i}, {self.t_z}" if i else f"v_mov_b32 {dsts[i]}, {self.t_z}")
            a.op(f"v_xor_b32 {dsts[i]}, {dsts[i]}, {self.t_y}")
            a.op(f"v_lshl_or_b32 {dsts[i]}, {dsts[i]}, {log2(B128)}, {self.t_x}")

    def v16_lane_constants(self, a: Asm) -> None:
        """pv fp16: thread tid stages V16_LOADS consecutive 16-byte chunks of V^T row tid / per_row (per_row =
        threads per row); lane (h, r) reads row r (+16 dt), keys 32h + 8c.. at + 64h + 16c (+ 16c by offset)."""
        per_row = self.V16_PER_ROW
        a.op(f"v_lshrrev_b32 {self.t_x}, {log2(per_row)}, {self.tid}" if per_row > 1 else
             f"v_mov_b32 {self.t_x}, {self.tid}", "V^T row of this thread's staging chunks")
        a.op(f"v_and_b32 {self.t_y}, {per_row - 1}, {self.tid}", "which part of the row")
        a.op(f"v_lshlrev_b32 {self.t_y}, {log2(self.V16_LOADS * B128)}, {self.t_y}", "its first byte")
        a.op(f"v_mul_u32_u24_e32 {self.v_st}, {self.V_ROW_BYTES}, {self.t_x}")
        a.op(f"v_add_nc_u32_e32 {self.v_st}, {self.v_st}, {self.t_y}", f"row*{self.V_ROW_BYTES} + part")
        a.op(f"v_mul_u32_u24_e32 {self.v_rd[0]}, {self.V_ROW_BYTES}, {self.t_r}", f"r * {self.V_ROW_BYTES}")
        a.op(f"v_lshl_add_u32 {self.v_rd[0]}, {self.t_h}, {log2(4 * B128)}, {self.v_rd[0]}", "+ 64h (keys 32h..)")

    def v8_lane_constants(self, a: Asm) -> None:
        # V^T store: row = tid/4, col = tid%4, swizzled col ^ ((row >> 1) & 3)
        a.op(f"v_lshrrev_b32 {self.t_x}, 2, {self.tid}", "V^T row")
        a.op(f"v_bfe_u32 {self.t_y}, {self.t_x}, 1, 2")
        a.op(f"v_and_b32 {self.t_z}, 3, {self.tid}")
        self.swizzled_store_address(a, self.v_st, self.V_ROW_BYTES, f"row*{self.V_ROW_BYTES} + (col ^ (row>>1)&3)*16")
        # V^T fragment reads: row d = r (+16dt), 16-byte column (2h + i) ^ ((r >> 1) & 3)
        a.op(f"v_bfe_u32 {self.t_y}, {self.t_r}, 1, 2")
        a.op(f"v_lshlrev_b32 {self.t_x}, {log2(self.V_ROW_BYTES)}, {self.t_r}", f"r * {self.V_ROW_BYTES}")
        a.op(f"v_lshlrev_b32 {self.t_z}, 1, {self.t_h}", "2h")
        self.swizzled_read_addresses(a, self.v_rd)

    def k_q_lane_constants(self, a: Asm) -> None:
        D = self.HEAD_DIM
        # K fragment reads: row = 32*(r/8) + r%8, 16-byte column (HCOL*h + i) ^ kswz(row); kswz(row) = kswz(r%8)
        # (32*(r/8) and the chunk offset 8c add nothing to row & 7 or to (row >> 1) & 3)
        a.op(f"v_lshrrev_b32 {self.t_x}, 3, {self.t_r}")
        a.op(f"v_and_b32 {self.t_y}, 7, {self.t_r}")
        a.op(f"v_lshl_or_b32 {self.t_x}, {self.t_x}, 5, {self.t_y}", "row")
        a.op(f"v_lshlrev_b32 {self.t_x}, {log2(self.K_ROW_BYTES)}, {self.t_x}", f"row * {self.K_ROW_BYTES}")
        for ln in self.kswz_lines(self.t_y, self.t_r):
            a.op(ln)
        a.op(f"v_lshlrev_b32 {self.t_z}, {log2(self.HCOL)}, {self.t_h}", f"{self.HCOL}h")
        self.swizzled_read_addresses(a, self.k_rd)
        a.op(f"v_lshlrev_b32 {self.q_off}, {log2(D)}, {self.t_r}", f"query row r * {D}")
        a.op(f"v_lshl_or_b32 {self.q_off}, {self.t_h}, {log2(D // 2)}, {self.q_off}",
             f"+ {D // 2}h (d permutation of the .hip header)")
        a.op(f"v_readfirstlane_b32 {self.s_wave}, {self.tid}")

    def mask_setup(self, a: Asm) -> None:
        """attn_mask state into the dead kernarg SGPRs (state.py): the mask_kind row of this query tile (the LUT row's
    offset), the bit / bias rows of query q0 ((batch*msb + head*msh + q0*mss) words; bias x 32 floats) and the kind
    of L[0]. The kinds are always read (the host passes zeros without FLAG_MASK); bits and bias only on partial /
    additive tiles."""
        tmp, tmp2, tmp3 = self.s_tmp, self.s_tmp2, self.s_tmp3
        args = abi.ATTENTION_FWD_ARGS.by_name
        a.section("prologue: attn_mask rows (kernarg mask_* fields, into SGPRs the loop does not read)")
        a.op(f"s_load_b64 {self.s_mrow}, {self.kernarg}, 0x{args['mask_bits'].offset:x}", "mask_bits")
        a.op(f"s_load_b64 {self.s_brow}, {self.kernarg}, 0x{args['mask_bias'].offset:x}", "mask_bias")
        a.op(f"s_load_b64 {self.s_kindrow}, {self.kernarg}, 0x{args['mask_kind'].offset:x}", "mask_kind")
        a.op(f"s_load_b64 {tmp3}, {self.kernarg}, 0x{args['mask_stride_b'].offset:x}", "mask_stride_b, _h")
        a.op(f"s_load_b32 {self.s_mss}, {self.kernarg}, 0x{args['mask_stride_s'].offset:x}", "mask_stride_s")
        a.op("s_wait_kmcnt 0")
        a.op(f"s_sub_nc_u64 {tmp}, {self.s_lutrow}, {self.karg['lut']}", "LUT row offset (bytes)")
        a.op(f"s_add_nc_u64 {self.s_kindrow}, {self.s_kindrow}, {tmp}", "mask_kind row of this query tile")
        a.op(f"s_mul_i32 {tmp[0]}, {self.s_batch}, {tmp3[0]}")
        a.op(f"s_mul_i32 {tmp2[0]}, {self.s_head}, {tmp3[1]}")
        a.op(f"s_add_co_i32 {tmp[0]}, {tmp[0]}, {tmp2[0]}")
        a.op(f"s_mul_i32 {tmp2[0]}, {self.s_q0}, {self.s_mss}")
        a.op(f"s_add_co_i32 {tmp[0]}, {tmp[0]}, {tmp2[0]}", "word of row (batch, head, q0)")
        a.op(f"s_mov_b32 {tmp[1]}, 0")
        a.op(f"s_lshl_b64 {tmp2}, {tmp}, {log2(F32_BYTES)}")
        a.op(f"s_add_nc_u64 {self.s_mrow}, {self.s_mrow}, {tmp2}", "bit rows of query q0")
        a.op(f"s_lshl_b64 {tmp2}, {tmp}, {log2(abi.MASK_WORD_BITS * F32_BYTES)}")
        a.op(f"s_add_nc_u64 {self.s_brow}, {self.s_brow}, {tmp2}", "bias rows of query q0")
        a.op(f"s_load_b32 {self.s_kind}, {self.s_kindrow}, 0x4", "kind of L[0] (waited with q_scale)")

    def zext(self, a: Asm, pair, value) -> None:
        """pair = the 64-bit zero extension of the 32-bit SGPR `value`."""
        a.op(f"s_mov_b32 {pair[0]}, {value}")
        a.op(f"s_mov_b32 {pair[1]}, 0")

    def head_base(self, a: Asm, dst, ptr, index, count, per: int = 1, block: int = 1, elem_bytes: int = 1,
                  comment: str = "") -> None:
        """dst = ptr + index * (count * per / block) * elem_bytes: the 64-bit address of block `index` (a head:
        the SGPR pair bh or bkv, hi word 0) of an array of count * per / block elements per head (count a 32-bit
        SGPR; per / block / elem_bytes powers of two, per or block 1). The byte offset stays in s_tmp."""
        tmp = self.s_tmp
        if (per == 1) == (block == 1):
            raise ValueError(f"head_base: one of per={per} / block={block} must be 1, the other not")
        if per > 1:
            a.op(f"s_lshl_b32 {tmp[0]}, {count}, {log2(per)}")
        else:
            a.op(f"s_lshr_b32 {tmp[0]}, {count}, {log2(block)}")
        a.op(f"s_mov_b32 {tmp[1]}, 0")
        a.op(f"s_mul_u64 {tmp}, {tmp}, {index}")
        if elem_bytes > 1:
            a.op(f"s_lshl_b64 {tmp}, {tmp}, {log2(elem_bytes)}")
        a.op(f"s_add_nc_u64 {dst}, {ptr}, {tmp}", comment)

    def add_offset(self, a: Asm, dst, value, unit: int, pair, comment: str) -> None:
        """dst += value * unit (64-bit; value a 32-bit SGPR, unit a power of two), through the SGPR pair `pair`."""
        a.op(f"s_lshl_b32 {pair[0]}, {value}, {log2(unit)}")
        a.op(f"s_mov_b32 {pair[1]}, 0")
        a.op(f"s_add_nc_u64 {dst}, {dst}, {pair}", comment)

    def varlen_sequence(self, a: Asm) -> None:
        """Varlen (abi.FLAG_VARLEN, docs/numerics.md §Varlen): sequence b = workgroup z reads cu_seqlens_q[b], [b+1],
        cu_seqlens_kv[b], [b+1] on the device (the pointers are loaded here, not preloaded: config.PRELOAD_BYTES). Its
        lengths replace seq_len_kv and causal_offset (len_kv - len_q); len_q, its first prepared rows
        (abi.packed_row) and its first output token are kept for the scalar setup (s_vl_*); the packed layouts
        have one batch (s_batch = 0), the statistics are the sequence's (s_vl_seq = b). A workgroup whose query
        tile starts at or past len_q ends at once (before any barrier: all its waves take the same branch).
        Without varlen the s_vl_* are 0 and len_q = seq_len_q."""
        tmp, tmp2, tmp3 = self.s_tmp, self.s_tmp2, self.s_tmp3
        cu = self.s_lut   # free until the LUT head is loaded
        for reg in (self.s_vl_tokq, self.s_vl_rowq, self.s_vl_rowkv, self.s_vl_seq):
            a.op(f"s_mov_b32 {reg}, 0")
        a.op(f"s_mov_b32 {self.s_vl_lenq}, {self.s_seqlen_q}")
        a.op(f"s_bitcmp1_b32 {self.s_flags}, {abi.FLAG_VARLEN_BIT}")
        a.op("s_cbranch_scc0 .Lpacked_done")
        off = {f.name: f.offset for f in ARGS.fields}
        cu_off = off["cu_seqlens_q"]
        if off["cu_seqlens_kv"] != cu_off + 8:
            raise ValueError("the varlen pointers must be adjacent (one s_load_b128)")
        a.op(f"s_load_b128 {cu}, {self.kernarg}, 0x{cu_off:x}", "cu_seqlens_q, cu_seqlens_kv")
        a.op(f"s_lshl_b32 {tmp[0]}, {self.s_batch}, 2", "byte offset of cu_seqlens[b] (int32)")
        a.op("s_wait_kmcnt 0")
        a.op(f"s_load_b64 {tmp2}, {cu[0:2]}, {tmp[0]} offset:0x0", "cu_seqlens_q[b], [b+1]")
        a.op(f"s_load_b64 {tmp3}, {cu[2:4]}, {tmp[0]} offset:0x0", "cu_seqlens_kv[b], [b+1]")
        a.op("s_wait_kmcnt 0")
        a.op(f"s_sub_co_i32 {self.s_vl_lenq}, {tmp2[1]}, {tmp2[0]}", "len_q")
        a.op(f"s_lshl_b32 {tmp[1]}, ttmp9, {log2(TILE_Q)}", "first query of this tile")
        a.op(f"s_cmp_ge_u32 {tmp[1]}, {self.s_vl_lenq}")
        a.op("s_cbranch_scc1 .Lend", "past the sequence's queries (or none): nothing to do")
        a.op(f"s_mov_b32 {self.s_vl_tokq}, {tmp2[0]}", "first out / lse token of the sequence")
        a.op(f"s_sub_co_i32 {self.s_seqlen}, {tmp3[1]}, {tmp3[0]}", "seq_len_kv := len_kv")
        a.op(f"s_sub_co_i32 {self.karg['causal_offset']}, {self.s_seqlen}, {self.s_vl_lenq}",
             "causal_offset := len_kv - len_q")
        a.op(f"s_lshl_b32 {tmp[1]}, {self.s_batch}, {log2(abi.PAD)}", f"{abi.PAD} * b")
        for dst, start, what in ((self.s_vl_rowq, tmp2[0], "Q"), (self.s_vl_rowkv, tmp3[0], "K/V")):
            a.op(f"s_add_co_i32 {dst}, {start}, {abi.PAD - 1}")
            a.op(f"s_and_b32 {dst}, {dst}, 0x{-abi.PAD & 0xffffffff:x}")
            a.op(f"s_add_co_i32 {dst}, {dst}, {tmp[1]}", f"{what}: packed_row(cu[b], b) = 64*ceil(cu[b]/64) + 64*b")
        a.op(f"s_mov_b32 {self.s_vl_seq}, {self.s_batch}", "the statistics are per sequence")
        a.op(f"s_mov_b32 {self.s_batch}, 0", "the packed layouts have one batch")
        a.label(".Lpacked_done")

    def varlen_walk(self, a: Asm) -> None:
        """Varlen: no LUT; the key tiles are 0 .. count-1 with count = ceil(len_kv / 64), or with causal the tiles
        holding a key j <= last row + causal_offset (sage_co.masks.causal_tiles): count = min(that,
        ceil(max(last_row + causal_offset + 1, 0) / 64)), last_row = min(64 x + 63, len_q - 1). L[t] = t."""
        tmp = self.s_tmp
        a.label(".Lvarlen_walk")
        a.op(f"s_add_co_i32 {self.s_cnt}, {self.s_seqlen}, {TILE_K - 1}")
        a.op(f"s_lshr_b32 {self.s_cnt}, {self.s_cnt}, {log2(TILE_K)}", "ceil(len_kv / 64) key tiles")
        a.op(f"s_bitcmp1_b32 {self.s_flags}, {abi.FLAG_CAUSAL_BIT}")
        a.op("s_cbranch_scc0 .Lwalk_ids")
        a.op(f"s_lshl_b32 {tmp[0]}, ttmp9, {log2(TILE_Q)}")
        a.op(f"s_add_co_i32 {tmp[0]}, {tmp[0]}, {TILE_Q - 1}", "last row of the tile")
        a.op(f"s_add_co_i32 {tmp[1]}, {self.s_vl_lenq}, -1")
        a.op(f"s_min_u32 {tmp[0]}, {tmp[0]}, {tmp[1]}", "its last real row (len_q >= 1 here)")
        a.op(f"s_add_co_i32 {tmp[0]}, {tmp[0]}, {self.karg['causal_offset']}")
        a.op(f"s_add_co_i32 {tmp[0]}, {tmp[0]}, {TILE_K}", "(keys it sees: last_row + offset + 1) + 63")
        a.op(f"s_max_i32 {tmp[0]}, {tmp[0]}, 0")
        a.op(f"s_lshr_b32 {tmp[0]}, {tmp[0]}, {log2(TILE_K)}")
        a.op(f"s_min_u32 {self.s_cnt}, {self.s_cnt}, {tmp[0]}", "causal: the tiles some row of the tile sees")
        a.label(".Lwalk_ids")
        for i, reg in enumerate((self.s_Lc, self.s_L1, self.s_L2)):
            a.op(f"s_mov_b32 {reg}, {i}", f"L[{i}] = {i} (clamped to the last tile below)")

    def scalar_setup(self, a: Asm) -> None:
        D = self.HEAD_DIM
        tmp, tmp2, tmp3 = self.s_tmp, self.s_tmp2, self.s_tmp3
        a.section("prologue: scalar addressing")
        a.op("s_wait_kmcnt 0")
        a.op(f"s_lshr_b32 {self.s_wave}, {self.s_wave}, {log2(abi.WAVE_SIZE)}", "wave = tid / 32 (uniform)")
        a.op(f"s_and_b32 {self.s_head}, ttmp7, 0xffff", "workgroup id y = query head (docs/rdna4.md §Entry)")
        a.op(f"s_lshr_b32 {self.s_batch}, ttmp7, 16", "workgroup id z = batch")
        self.varlen_sequence(a)
        a.op(f"s_mul_i32 {self.s_bh[0]}, {self.s_batch}, {self.s_nheads}")
        a.op(f"s_add_co_i32 {self.s_bh[0]}, {self.s_bh[0]}, {self.s_head}")
        a.op(f"s_mov_b32 {self.s_bh[1]}, 0")
        # GQA: K/V head = (head * kv_group_magic) >> 32 (sage_co/abi.py kv_group_magic: exact for head < 2^16)
        self.zext(a, tmp, self.s_head)
        a.op(f"s_mul_u64 {tmp}, {tmp}, {self.s_magic_kv}", "hi word: K/V head")
        a.op(f"s_mul_i32 {self.s_bkv[0]}, {self.s_batch}, {self.s_nheads_kv}")
        a.op(f"s_add_co_i32 {self.s_bkv[0]}, {self.s_bkv[0]}, {tmp[1]}")
        a.op(f"s_mov_b32 {self.s_bkv[1]}, 0")
        a.op(f"s_lshl_b32 {self.s_q0}, ttmp9, {log2(TILE_Q)}", f"workgroup id x * {TILE_Q}")
        a.op(f"s_lshl_b32 {tmp[0]}, {self.s_wave}, {log2(WAVE_Q)}")
        a.op(f"s_add_co_i32 {self.s_q0}, {self.s_q0}, {tmp[0]}", f"q0 = {TILE_Q}*qtile + {WAVE_Q}*wave")
        # LUT row of (batch, head, query tile): lut + 4 * (batch*sb + head*sh + qtile*(seq_pad_kv/64 + 1))
        a.op(f"s_lshr_b32 {tmp[0]}, {self.s_seqpad}, {log2(TILE_K)}")
        a.op(f"s_add_co_i32 {tmp[0]}, {tmp[0]}, 1", "LUT row length")
        a.op(f"s_mul_i32 {tmp[0]}, {tmp[0]}, ttmp9", "* query tile")
        a.op(f"s_mul_i32 {tmp2[0]}, {self.s_batch}, {self.karg['lut_stride_b']}")
        a.op(f"s_add_co_i32 {tmp[0]}, {tmp[0]}, {tmp2[0]}")
        a.op(f"s_mul_i32 {tmp2[0]}, {self.s_head}, {self.karg['lut_stride_h']}")
        a.op(f"s_add_co_i32 {tmp[0]}, {tmp[0]}, {tmp2[0]}")
        a.op(f"s_mov_b32 {tmp[1]}, 0")
        a.op(f"s_lshl_b64 {tmp}, {tmp}, 2")
        a.op(f"s_add_nc_u64 {self.s_lutrow}, {self.karg['lut']}, {tmp}")
        a.op(f"s_bitcmp1_b32 {self.s_flags}, {abi.FLAG_VARLEN_BIT}")
        a.op("s_cbranch_scc1 .Lvarlen_walk")
        a.op(f"s_load_b128 {self.s_lut}, {self.s_lutrow}, 0x0", "count, L[0], L[1], L[2] (the host pads the buffer)")
        a.op("s_branch .Lwalk_ready")
        self.varlen_walk(a)
        a.label(".Lwalk_ready")
        # row limits: row q0 + r sees keys j < min(rowlim0 + r, seq_len_kv) (signed; causal: q0 + r + S_kv - S_q + 1)
        a.op(f"s_add_co_i32 {tmp[0]}, {self.s_q0}, {self.karg['causal_offset']}")
        a.op(f"s_add_co_i32 {tmp[0]}, {tmp[0]}, 1")
        a.op(f"s_bitcmp1_b32 {self.s_flags}, {abi.FLAG_CAUSAL_BIT}")
        a.op(f"s_cselect_b32 {self.s_rowlim0}, {tmp[0]}, {self.s_seqlen}")
        a.op(f"s_min_i32 {self.s_wlim}, {self.s_rowlim0}, {self.s_seqlen}")
        a.op("s_wait_kmcnt 0", "LUT row head")
        a.op(f"s_add_co_i32 {self.s_last}, {self.s_cnt}, -1", "last LUT entry")
        a.op(f"s_cmp_gt_u32 {self.s_cnt}, 1")
        a.op(f"s_cselect_b32 {self.s_L1}, {self.s_L1}, {self.s_Lc}", "L[min(1, last)]")
        a.op(f"s_cmp_gt_u32 {self.s_cnt}, 2")
        a.op(f"s_cselect_b32 {self.s_L2}, {self.s_L2}, {self.s_L1}", "L[min(2, last)]")
        # K and V^T of the K/V head: bkv * seq_pad_kv * D bytes (64-bit)
        self.head_base(a, self.s_kh, self.sp_k, self.s_bkv, self.s_seqpad, per=D)
        self.add_offset(a, self.s_kh, self.s_vl_rowkv, D, tmp2, "+ the sequence's first K row (varlen; else 0)")
        if self.PV16:
            a.op(f"s_lshl_b64 {tmp}, {tmp}, 1", "fp16 V^T: 2 bytes per element")
        a.op(f"s_add_nc_u64 {self.s_vb[0:2]}, {self.sp_v}, {tmp}", "V^T of this K/V head")
        self.add_offset(a, self.s_vb[0:2], self.s_Lc, TILE_K * self.V_BYTES, tmp2, "V^T columns of tile L[0]")
        self.add_offset(a, self.s_vb[0:2], self.s_vl_rowkv, self.V_BYTES, tmp2, "+ the sequence's first V^T column")
        # Q rows of query q0 of this head: (bh * seq_pad_q + q0) * D bytes
        self.head_base(a, self.s_qrow, self.sp_q, self.s_bh, self.s_seqpad_q, per=D)
        self.add_offset(a, self.s_qrow, self.s_q0, D, tmp2, "Q rows of query q0")
        self.add_offset(a, self.s_qrow, self.s_vl_rowq, D, tmp2, "+ the sequence's first Q row (varlen; else 0)")
        # V^T staging bases: row u*32 of the tile: + u*32*seq_pad_kv (the loop advances them by TILE_K)
        a.op(f"s_lshl_b32 {tmp2[0]}, {self.s_seqpad}, {log2(V_STAGE_ROWS)}", f"{V_STAGE_ROWS} rows of V^T")
        for u in range(1, 1 if self.PV16 or self.WIDE else self.STAGE_LOADS):
            a.op(f"s_add_nc_u64 {self.s_vb[2 * u:2 * u + 2]}, {self.s_vb[2 * u - 2:2 * u]}, {tmp2}")
        # k_scale of the K/V head: bkv * (seq_pad_kv / 32) floats
        self.head_base(a, self.s_ksb, self.sp_kscale, self.s_bkv, self.s_seqpad, block=SCALE_BLOCK,
                       elem_bytes=F32_BYTES, comment="k_scale of the K/V head")
        self.add_offset(a, self.s_ksb, self.s_Lc, 2 * F32_BYTES, tmp, "k_scale pair of tile L[0]")
        a.op(f"s_lshr_b32 {tmp[0]}, {self.s_vl_rowkv}, {log2(SCALE_BLOCK // F32_BYTES)}",
             "the sequence's first k_scale block: (row_kv / 32) * 4 bytes")
        a.op(f"s_mov_b32 {tmp[1]}, 0")
        a.op(f"s_add_nc_u64 {self.s_ksb}, {self.s_ksb}, {tmp}")
        # q_scale of the wave's block: bh * (seq_pad_q / 32) + q0 / 32 floats
        self.head_base(a, tmp, self.sp_qscale, self.s_bh, self.s_seqpad_q, block=SCALE_BLOCK, elem_bytes=F32_BYTES)
        a.op(f"s_add_co_i32 {tmp2[0]}, {self.s_q0}, {self.s_vl_rowq}", "prepared row of q0")
        a.op(f"s_lshr_b32 {tmp2[0]}, {tmp2[0]}, {log2(SCALE_BLOCK)}")
        a.op(f"s_lshl_b32 {tmp2[0]}, {tmp2[0]}, {log2(F32_BYTES)}")
        a.op(f"s_load_b32 {self.s_qs}, {tmp}, {tmp2[0]} offset:0x0", "q_scale of the wave's 32-query block")
        # k_mean / v_scale of the K/V head: bkv * D floats
        a.op(f"s_mul_i32 {tmp[0]}, {self.s_vl_seq}, {self.s_nheads_kv}", "varlen: the statistics of sequence b")
        a.op(f"s_add_co_i32 {tmp[0]}, {tmp[0]}, {self.s_bkv[0]}")
        a.op(f"s_mov_b32 {tmp[1]}, 0")
        a.op(f"s_lshl_b64 {tmp}, {tmp}, {log2(D * F32_BYTES)}")
        a.op(f"s_add_nc_u64 {self.s_kmh}, {self.sp_kmean}, {tmp}")
        a.op(f"s_add_nc_u64 {self.s_vsh}, {self.sp_vscale}, {tmp}")
        a.op(f"s_add_nc_u64 {self.s_vmh}, {self.karg['v_mean']}, {tmp}")
        # out row of (batch, q0, head): (batch*sb + (tok_q + q0)*ss + head*sh) elements of OUT_BYTES (64-bit products)
        a.op(f"s_add_co_i32 {self.s_vl_tokq}, {self.s_vl_tokq}, {self.s_q0}", "token of q0 in out / lse (varlen: + cu_q[b])")
        for k, (idx, stride) in enumerate(((self.s_batch, self.s_ostride[0]), (self.s_vl_tokq, self.s_ostride[1]),
                                           (self.s_head, self.s_ostride[2]))):
            acc = tmp if k == 0 else tmp2
            self.zext(a, acc, idx)
            self.zext(a, tmp3, stride)
            a.op(f"s_mul_u64 {acc}, {acc}, {tmp3}")
            if k:
                a.op(f"s_add_nc_u64 {tmp}, {tmp}, {tmp2}")
        a.op(f"s_lshl_b64 {tmp}, {tmp}, {log2(OUT_BYTES[self.cfg.out_dtype])}")
        a.op(f"s_add_nc_u64 {self.s_outb}, {self.sp_out}, {tmp}")
        # lse of (bh, q0): (bh * S_q + q0) * 4 bytes
        self.zext(a, tmp2, self.s_seqlen_q)
        a.op(f"s_mul_u64 {tmp}, {self.s_bh}, {tmp2}")
        a.op(f"s_mov_b32 {tmp2[0]}, {self.s_vl_tokq}")
        a.op(f"s_add_nc_u64 {tmp}, {tmp}, {tmp2}")
        a.op(f"s_lshl_b64 {tmp}, {tmp}, {log2(F32_BYTES)}")
        a.op(f"s_add_nc_u64 {self.s_lseb}, {self.sp_lse}, {tmp}")
        a.op(f"s_mov_b32 {self.s_seqlen_q}, {self.s_vl_lenq}", "the epilogue's row limit: len_q (varlen), else S_q")
        a.op(f"s_mov_b32 {self.s_magic}, {MAGIC_INT}")
        a.op(f"s_mov_b32 {self.s_sel}, {PERMX16_SEL_LO}")
        # varlen and attn_mask are exclusive (the host refuses both: sage_co/ops/attention.py): varlen reads no
        # mask_kind row (its tiles are walked, not looked up), so every tile is full
        a.op(f"s_bitcmp1_b32 {self.s_flags}, {abi.FLAG_VARLEN_BIT}")
        a.op("s_cbranch_scc0 .Lmask_rows")
        a.op(f"s_mov_b32 {self.s_kind}, {abi.MASK_KIND_FULL}", "varlen: kind of L[0] = full")
        a.op(f"s_mov_b32 {self.s_kindn}, {abi.MASK_KIND_FULL}", "and of every later tile (the loop loads none)")
        a.op("s_branch .Lmask_rows_done")
        a.label(".Lmask_rows")
        self.mask_setup(a)
        a.label(".Lmask_rows_done")
        a.op(f"s_mov_b32 {self.s_koff[1]}, 0")
        a.op(f"s_mov_b32 {self.s_t}, 0")
        # VALU reads these SGPRs from now on; none is written again by SALU (docs/rdna4.md §Hazards 3)
        a.op("s_wait_alu depctr_sa_sdst(0)")
        if self.PV16:   # row tid / per_row, its part tid % per_row of V16_LOADS chunks (v16_lane_constants)
            per_row = self.V16_PER_ROW
            a.op(f"v_lshrrev_b32 {self.t_x}, {log2(per_row)}, {self.tid}")
            a.op(f"v_mul_lo_u32 {self.v_gl}, {self.t_x}, {self.s_seqpad}", "V^T row * seq_pad_kv")
            a.op(f"v_lshlrev_b32 {self.v_gl}, 1, {self.v_gl}", "fp16: bytes")
            a.op(f"v_and_b32 {self.t_y}, {per_row - 1}, {self.tid}")
            a.op(f"v_lshl_add_u32 {self.v_gl}, {self.t_y}, {log2(self.V16_LOADS * B128)}, {self.v_gl}",
                 "+ part * its bytes")
            return
        a.op(f"v_lshrrev_b32 {self.t_x}, 2, {self.tid}")
        a.op(f"v_mul_lo_u32 {self.v_gl}, {self.t_x}, {self.s_seqpad}", "V^T row * seq_pad_kv")
        a.op(f"v_and_b32 {self.t_y}, 3, {self.tid}")
        a.op(f"v_lshl_add_u32 {self.v_gl}, {self.t_y}, {log2(B128)}, {self.v_gl}", "+ col * 16")
