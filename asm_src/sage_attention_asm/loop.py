"""The key loop: global -> VGPR -> LDS staging of K and V^T tiles, the barrier, and one tile step (QK^T of tile
t+1 woven with the softmax of tile t, PV of tile t with the score scaling of tile t+1)."""
from __future__ import annotations

from asmdsl import Asm, Op, WaitCounter, pair_vopd
from sage_co import abi

from .config import B128, F32_BYTES, TILE_K, V_STAGE_ROWS, log2
from .stream import Matrix, Weaver


class KeyLoop:
    """The loop stage of AttentionKernel (reads KernelState; uses MatmulStreams and Softmax)."""

    def k_tile_base(self, a: Asm, entry, comment: str = "") -> None:
        """s_kb = the K staging base of key tile `entry` (an SGPR holding a LUT entry): K of the K/V head + entry *
        K_TILE_BYTES (s_koff's hi word is 0 from the prologue on)."""
        a.op(f"s_lshl_b32 {self.s_koff[0]}, {entry}, {log2(self.K_TILE_BYTES)}", f"* {self.K_TILE_BYTES} bytes")
        a.op(f"s_add_nc_u64 {self.s_kb}, {self.s_kh}, {self.s_koff}", comment)

    def stage_loads(self, a: Asm, vm: WaitCounter, k_base, v_bases, tag: str, k_dst=None, v_dst=None) -> None:
        k_dst = self.stK if k_dst is None else k_dst
        v_dst = self.stV if v_dst is None else v_dst
        for u in range(self.STAGE_LOADS):
            if k_base is not None:
                a.op(f"global_load_b128 {k_dst[4 * u:4 * u + 4]}, {self.k_gl}, {k_base} offset:{u * self.STAGE_STEP}")
                vm.issue(f"{tag}k{u}")
        for u in range(self.V_LOADS):
            if v_bases is not None:
                if self.PV16:   # consecutive chunks of one V^T row: immediate offsets from one base
                    a.op(f"global_load_b128 {v_dst[4 * u:4 * u + 4]}, {self.v_gl}, {v_bases[0:2]} offset:{u * B128}")
                else:
                    a.op(f"global_load_b128 {v_dst[4 * u:4 * u + 4]}, {self.v_gl}, {v_bases[2 * u:2 * u + 2]}")
                vm.issue(f"{tag}v{u}")

    def stage_stores(self, a: Asm, kbuf: int | None, vbuf: int | None, k_src=None, v_src=None) -> None:
        k_src = self.stK if k_src is None else k_src
        v_src = self.stV if v_src is None else v_src
        for u in range(max(self.STAGE_LOADS, self.V_LOADS)):
            if kbuf is not None and u < self.STAGE_LOADS:
                a.op(f"ds_store_b128 {self.k_st}, {k_src[4 * u:4 * u + 4]} offset:{kbuf + u * self.STAGE_STEP}")
            if vbuf is not None and u < self.V_LOADS:
                step = B128 if self.PV16 else self.STAGE_STEP
                a.op(f"ds_store_b128 {self.v_st}, {v_src[4 * u:4 * u + 4]} offset:{vbuf + u * step}")

    def barrier(self, a: Asm, ds: WaitCounter) -> None:
        a.op("s_wait_dscnt 0", "LDS stores done before the barrier (docs/rdna4.md §Hazards 8)")
        ds.outstanding.clear()
        a.op("s_barrier_signal -1")
        a.op("s_barrier_wait -1")

    def wide_k_loads(self, a: Asm, vm: WaitCounter, tag: str, dst=None) -> None:
        """Head dim 256: the K staging loads of the tile at s_kb (8 b128 per thread) into `dst` (the staging set)."""
        dst = self.stK if dst is None else dst
        for u in range(self.STAGE_LOADS):
            a.op(f"global_load_b128 {dst[4 * u:4 * u + 4]}, {self.k_gl}, {self.s_kb} offset:{u * self.STAGE_STEP}")
            vm.issue(f"{tag}k{u}")

    def wide_v_loads(self, a: Asm, vm: WaitCounter, tag: str, dst=None) -> None:
        """Head dim 256: the V^T staging loads of the tile at s_vb (rows v_row + 32u, u < 8): the row step 32 *
        seq_pad_kv goes into the uniform base by SALU adds (s_tmp2 = s_vb + u * step; one base pair instead of
        eight: the SGPR file is full, docs/rdna4.md §Occupancy). A VMEM instruction reads its SGPR base at issue."""
        dst = self.stV if dst is None else dst
        step, base = self.s_tmp3, self.s_tmp2
        a.op(f"s_lshl_b32 {step[0]}, {self.s_seqpad}, {log2(V_STAGE_ROWS)}", f"{V_STAGE_ROWS} V^T rows")
        a.op(f"s_mov_b32 {step[1]}, 0")
        for u in range(self.V_LOADS):
            if u:
                a.op(f"s_add_nc_u64 {base}, {self.s_vb if u == 1 else base}, {step}")
            a.op(f"global_load_b128 {dst[4 * u:4 * u + 4]}, {self.v_gl}, {self.s_vb if u == 0 else base}")
            vm.issue(f"{tag}v{u}")

    def wide_stores(self, a: Asm, addr, buf: int, src=None) -> None:
        src = self.stK if src is None else src
        for u in range(self.STAGE_LOADS):
            a.op(f"ds_store_b128 {addr}, {src[4 * u:4 * u + 4]} offset:{buf + u * self.STAGE_STEP}")

    def body(self, a: Asm, parity: int, last: bool) -> None:
        """One key tile t (t % 2 == parity). Not last: QK^T of tile t+1 is woven with the softmax of tile t,
    PV of tile t with the score scaling of tile t+1 (see the schedule in the header)."""
        if self.WIDE:
            self.body_wide(a, parity, last)
            return
        cur, nxt = (self.SA, self.SB) if parity == 0 else (self.SB, self.SA)
        m_old, m_new = self.m[parity], self.m[1 - parity]
        vm, ds = WaitCounter(a, "s_wait_loadcnt"), WaitCounter(a, "s_wait_dscnt")
        tag = f"t{parity}{'L' if last else ''}"
        mat = Matrix(self.ring)
        if not last:
            self.qk_matrix(mat, self.LDS_KBUF[1 - parity], nxt)
        self.pv_matrix(mat, self.LDS_VBUF[parity], cur)
        n_qk = 0 if last else len(self.QK_ORDER)
        wv = Weaver(a, mat, ds)
        sfx = f"{parity}{'_last' if last else ''}"
        self.mask_issue(a, f".Lmask_issued_{sfx}")
        a.label(f".Lmask_issued_{sfx}")

        if not last:
            a.section(f"tile t (t % 2 = {parity}): LUT entry L[min(t+3, last)]; staging loads of K(L[min(t+2, last)]), "
                      "V^T(L[t+1]), k_scale(L[t+1])")
            self.lut_next(a, parity)
            self.k_tile_base(a, self.s_L2)
            a.op(f"s_sub_co_i32 {self.s_tmp[0]}, {self.s_L1}, {self.s_Lc}", "tiles from L[t] to L[t+1] (> 0: ascending)")
            a.op(f"s_mov_b32 {self.s_tmp2[1]}, 0")
            a.op(f"s_lshl_b32 {self.s_tmp2[0]}, {self.s_tmp[0]}, {log2(2 * F32_BYTES)}")
            a.op(f"s_add_nc_u64 {self.s_ksb}, {self.s_ksb}, {self.s_tmp2}", "k_scale pair of tile L[t+1]")
            a.op(f"global_load_b32 {self.ks}, {self.ks_off}, {self.s_ksb}")
            vm.issue("ks")
            a.op(f"s_lshl_b32 {self.s_tmp2[0]}, {self.s_tmp[0]}, {log2(TILE_K * self.V_BYTES)}")
            for u in range(1 if self.PV16 else self.STAGE_LOADS):
                a.op(f"s_add_nc_u64 {self.s_vb[2 * u:2 * u + 2]}, {self.s_vb[2 * u:2 * u + 2]}, {self.s_tmp2}",
                     "V^T columns of tile L[t+1]")
            self.stage_loads(a, vm, self.s_kb, self.s_vb, tag)
            a.section("phase X: fragment loads, row max of tile t, then QK^T(t+1) x 32 WMMA woven with exp/sum/pack")
        else:
            a.section(f"last tile (t % 2 = {parity}): mask keys >= seq_len, softmax, PV")
        self.mask_apply(a, cur, len(vm.outstanding), f".Lmask_applied_{sfx}")
        a.label(f".Lmask_applied_{sfx}")
        wv.prefetch()
        self.row_max(a, cur, m_old, m_new, sfx)
        self.exact_form(a, cur, f".Lone_fma_{parity}{'_last' if last else ''}")
        e_issues = pair_vopd(self.exp_ops(cur) + self.lsum_ops())
        wv.phase(n_qk, e_issues)
        self.rescale(a, f".Lno_rescale_{parity}{'_last' if last else ''}")
        a.section("phase Y: PV(t) x 32 WMMA" + ("" if last else " woven with the score scaling of tile t+1"))
        y_items = []
        if not last:
            vm_wait = WaitCounter(a, "s_wait_loadcnt")
            vm_wait.outstanding = list(vm.outstanding)
            k = vm.outstanding.index("ks")
            y_items.append(f"s_wait_loadcnt {len(vm.outstanding) - k - 1}")
            del vm.outstanding[:k + 1]
            y_items += pair_vopd(self.scale_ops(nxt))
        wv.phase(self.N_PV, y_items)
        if not last:
            a.section("end of tile: staging -> LDS (K(t+2) -> kbuf[t%2], V^T(t+1) -> vbuf[(t+1)%2]), one barrier")
            vm.wait_all()
            if self.SINGLE_V:   # every wave is done reading V^T(t) after the first barrier
                self.stage_stores(a, self.LDS_KBUF[parity], None)
                self.barrier(a, ds)
                self.stage_stores(a, None, self.LDS_VBUF[1 - parity])
                self.barrier(a, ds)
            else:
                self.stage_stores(a, self.LDS_KBUF[parity], self.LDS_VBUF[1 - parity])
                self.barrier(a, ds)
            a.op(f"s_add_co_i32 {self.s_t}, {self.s_t}, 1")
            a.op("s_wait_kmcnt 0", "L[min(t+3, last)]")
            a.op(f"s_mov_b32 {self.s_Lc}, {self.s_L1}")
            a.op(f"s_mov_b32 {self.s_L1}, {self.s_L2}")
            a.op(f"s_mov_b32 {self.s_L2}, {self.s_L3}")
            a.op(f"s_mov_b32 {self.s_kind}, {self.s_kindn}")

    def row_max(self, a: Asm, cur, m_old, m_new, sfx: str) -> None:
        """The row max of tile t's scores (both schedules): the attn_mask bits, then the max of the scaled scores
        (additive-mask tiles take the max of the unscaled sums, out of line), the thresholded m, alpha, t and b."""
        nomask = f".Lnomask_{sfx}"
        for ln in self.mask_lines(cur, nomask):
            a.op(ln)
        a.label(nomask)
        a.op(f"s_bitcmp1_b32 {self.s_kind}, {abi.MASK_KIND_ADDITIVE_BIT}", "additive attn_mask tile: scores are s")
        a.op(f"s_cbranch_scc1 .Lmax_additive_{sfx}")
        a.valu(self.max_ops(cur, m_old, m_new))
        a.label(f".Lmax_done_{sfx}")
        self.ool.label(f".Lmax_additive_{sfx}")
        self.ool.valu(self.max_ops(cur, m_old, m_new, scaled=False))
        self.ool.op(f"s_branch .Lmax_done_{sfx}")
        for ln in self.threshold_lines(m_old, m_new):
            a.op(ln)

    def lut_next(self, a: Asm, parity: int) -> None:
        """Top of tile t: L[min(t+3, last)] and the attn_mask kind of L[t+1] s_load-ed (waited at the end)."""
        a.op(f"s_add_co_i32 {self.s_tmp[0]}, {self.s_t}, 3")
        a.op(f"s_min_u32 {self.s_L3}, {self.s_tmp[0]}, {self.s_last}", "varlen walks tiles 0.. : L[i] = i")
        a.op(f"s_bitcmp1_b32 {self.s_flags}, {abi.FLAG_VARLEN_BIT}")
        a.op(f"s_cbranch_scc1 .Lwalk_next_{parity}")
        a.op(f"s_lshl_b32 {self.s_tmp[0]}, {self.s_L3}, 2")
        a.op(f"s_load_b32 {self.s_L3}, {self.s_lutrow}, {self.s_tmp[0]} offset:0x4", "waited at the end of the tile")
        a.op(f"s_lshl_b32 {self.s_tmp3[0]}, {self.s_t}, 2")
        a.op(f"s_load_b32 {self.s_kindn}, {self.s_kindrow}, {self.s_tmp3[0]} offset:0x8",
             "attn_mask kind of L[t+1] (waited at the end of the tile)")
        a.label(f".Lwalk_next_{parity}")

    def body_wide(self, a: Asm, parity: int, last: bool) -> None:
        """Head dim 256, one key tile t (t % 2 == parity; docs/performance.md §Head dim 256): the tile in order --
    QK^T(t) (K from kbuf[t%2], Q^T from LDS), softmax(t), PV(t) (V^T from the one vbuf) -- with the staging of tile
    t+1 through the one staging set: K(t+1) loads at the top (in flight across QK^T(t)), stored to kbuf[(t+1)%2]
    after it (its last readers, QK^T(t-1), passed the previous end barrier); V^T(t+1) loads then (in flight across
    the softmax and PV(t)), stored to vbuf after the end barrier (every wave is done reading V^T(t)). The barrier
    after QK^T(t) publishes V^T(t) (stored after the previous end barrier; for t = 0 the prologue's)."""
        cur = self.SA
        m_old, m_new = self.m[parity], self.m[1 - parity]
        vm, ds = WaitCounter(a, "s_wait_loadcnt"), WaitCounter(a, "s_wait_dscnt")
        tag = f"t{parity}{'L' if last else ''}"
        sfx = f"{parity}{'_last' if last else ''}"
        qk = Matrix(self.ring, self.qring)
        self.qk_matrix(qk, self.LDS_KBUF[parity], cur)
        wq = Weaver(a, qk, ds)
        if not last:
            a.section(f"tile t (t % 2 = {parity}): LUT entry L[min(t+3, last)]; staging loads of K(L[t+1]), "
                      "k_scale(L[t+1])")
            self.lut_next(a, parity)
            self.k_tile_base(a, self.s_L1)
            a.op(f"s_sub_co_i32 {self.s_tmp[0]}, {self.s_L1}, {self.s_Lc}", "tiles from L[t] to L[t+1] (> 0: ascending)")
            a.op(f"s_mov_b32 {self.s_tmp2[1]}, 0")
            a.op(f"s_lshl_b32 {self.s_tmp2[0]}, {self.s_tmp[0]}, {log2(2 * F32_BYTES)}")
            a.op(f"s_add_nc_u64 {self.s_ksb}, {self.s_ksb}, {self.s_tmp2}", "k_scale pair of tile L[t+1]")
            a.op(f"s_lshl_b32 {self.s_tmp2[0]}, {self.s_tmp[0]}, {log2(TILE_K * self.V_BYTES)}")
            a.op(f"s_add_nc_u64 {self.s_vb}, {self.s_vb}, {self.s_tmp2}", "V^T columns of tile L[t+1]")
            a.op(f"global_load_b32 {self.ks}, {self.ks_off}, {self.s_ksb}")
            vm.issue("ks")
            self.wide_k_loads(a, vm, tag)
        else:
            a.section(f"last tile (t % 2 = {parity}): QK^T, mask keys >= seq_len, softmax, PV")
        a.section(f"QK^T(t) x {len(self.QK_ORDER)} WMMA (K fragments and the Q^T fragments from LDS); S^T = MAGIC_INT")
        wq.prefetch()
        # C of each chunk's first WMMA (docs/numerics.md §Attention arithmetic model: the int -> float trick); PV(t-1)
        # has read P^T(t-1) from these registers
        a.valu([Op.mov(cur[j], self.s_magic) for j in range(32)])
        wq.phase(len(self.QK_ORDER), [])
        if not last:
            a.section("K(t+1) -> kbuf[(t+1)%2]; V^T(t+1) loads (stored after the end barrier)")
            vm.wait_all()
            self.wide_stores(a, self.k_st, self.LDS_KBUF[1 - parity])
        self.mask_issue(a, f".Lmask_issued_{sfx}")
        a.label(f".Lmask_issued_{sfx}")
        if not last:
            self.wide_v_loads(a, vm, tag)
        a.section("barrier: V^T(t) (stored after the previous tile's end barrier) visible to every wave")
        self.barrier(a, ds)
        self.mask_apply(a, cur, len(vm.outstanding), f".Lmask_applied_{sfx}")
        a.label(f".Lmask_applied_{sfx}")
        pv = Matrix(self.ring)
        self.pv_matrix(pv, self.LDS_VBUF[0], cur)
        wp = Weaver(a, pv, ds)
        wp.prefetch()   # the ring is free from here (mask_apply has used the biases)
        a.section("softmax(t): row max, alpha, exp2 / row sum / P pack")
        self.row_max(a, cur, m_old, m_new, sfx)
        self.exact_form(a, cur, f".Lone_fma_{sfx}")
        # the first half of PV(t) (PV_ORDER: i = 0, chunks 0 and 1) reads only P^T of scores 0..15: the exp2 / row sum
        # / pack of scores 16..31 and the running sum are woven between its WMMAs (the same ops in the same order)
        e_ops = self.exp_ops(cur)
        low = set().union(*(cur[j].regs() for j in range(16)))
        split = 1 + max(k for k, op in enumerate(e_ops) if (op.reads | op.writes) & low)
        wp.phase(0, pair_vopd(e_ops[:split]))
        self.rescale(a, f".Lno_rescale_{sfx}")
        a.section(f"PV(t) x {self.N_PV} WMMA, the first {self.N_PV // 2} woven with the softmax of scores 16..31")
        wp.phase(self.N_PV // 2, pair_vopd(e_ops[split:] + self.lsum_ops()))
        wp.phase(self.N_PV - self.N_PV // 2, [])
        if not last:
            a.section("end of tile: qk of tile t+1; barrier; V^T(t+1) -> vbuf")
            vm.wait_all()
            a.valu(self.scale_ops(None))
            self.barrier(a, ds)
            self.wide_stores(a, self.v_st, self.LDS_VBUF[0])
            a.op(f"s_add_co_i32 {self.s_t}, {self.s_t}, 1")
            a.op("s_wait_kmcnt 0", "L[min(t+3, last)]")
            a.op(f"s_mov_b32 {self.s_Lc}, {self.s_L1}")
            a.op(f"s_mov_b32 {self.s_L1}, {self.s_L2}")
            a.op(f"s_mov_b32 {self.s_L2}, {self.s_L3}")
            a.op(f"s_mov_b32 {self.s_kind}, {self.s_kindn}")
