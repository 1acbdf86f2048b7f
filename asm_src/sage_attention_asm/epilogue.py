"""The epilogue: 1 / l (IEEE division), v_scale and smooth_v's v_mean, the saturating bf16/fp16 output (fp32: the
value itself, NaN canonical), the LSE (with smooth_k's q.k_mean term) and the stores of the valid query rows."""
from __future__ import annotations

from asmdsl import Asm, WaitCounter
from sage_co import abi

from .config import (B128, BF16_QNAN32, BF16_ROUND, F32_BYTES, F32_LN2, F32_P_OFF, FP16_QNAN, FP32_QNAN, HI16_MASK,
                     LO16_MASK, OUT_BYTES, OUT_MAX, PERMX16_SEL_HI, WMMA_N, log2)


class _InPlacePacked:
    """Head dim 256: the packed 16-bit outputs of d-tile dt (4 VGPRs, index 4dt + k) in O[8dt + k]."""

    def __init__(self, O):
        self.O = O

    def __getitem__(self, k):
        if isinstance(k, slice):
            if k.start % 4 or k.stop - k.start > 4:
                raise IndexError(f"packed[{k}]: one d-tile's 4 VGPRs at a time")
            return self.O[2 * k.start:2 * k.start + k.stop - k.start]
        return self.O[8 * (k // 4) + k % 4]


class Epilogue:
    """The epilogue stage of AttentionKernel (reads KernelState)."""

    def sab(self, j: int, n: int = 0):
        """The score VGPRs SA then SB as one 64-VGPR scratch (free in the epilogue): VGPR j, or with n the n VGPRs
        from j (inside one of the two)."""
        # head dim 256 (WIDE): SA and the staging set (no SB)
        half, at = (self.SA, j) if j < 32 else ((self.stK if self.WIDE else self.SB), j - 32)
        return half[at:at + n] if n else half[at]

    def epilogue(self, a: Asm, parity_m) -> None:
        """out = bf16((O * (1 / l)) * v_scale [+ v_mean]) (pv fp16: O * (1 / l)) and the LSE, exactly as the HIP
        kernel's epilogue (l carries the P offset's 2^P_OFF as O does: no 448 here)."""
        a.section("epilogue: l = l + l of the other lane half; inv = 1 / l (IEEE division, LLVM's "
                  "v_div_scale/fmas/fixup sequence)")
        t, den, num, r, q, e = (self.ring[i] for i in range(6))
        # each lane half summed its own keys (softmax lsum_ops): one exchange per row, full EXEC (docs/rdna4.md §WMMA)
        a.op(f"v_permlanex16_b32 {self.xl}, {self.l_run}, {self.s_sel}, {PERMX16_SEL_HI}", "l of the other lane half")
        a.op(f"v_add_f32_e32 {self.l_run}, {self.l_run}, {self.xl}")
        a.op(f"v_mov_b32_e32 {t}, {self.l_run}")
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
        inv = self.ring[6]
        a.op(f"v_div_fixup_f32 {inv}, {den}, {t}, 1.0")
        a.op(f"v_cmp_neq_f32_e32 vcc_lo, 0, {self.l_run}", "l = 0: a row that saw no key -> inv 0, zeros")
        a.op("s_wait_alu depctr_va_vcc(0)")
        a.op(f"v_cndmask_b32_e32 {inv}, 0, {inv}, vcc_lo")
        fp16 = self.cfg.out_dtype == "fp16"
        fp32 = self.cfg.out_dtype == "fp32"   # the fp32 value itself: no clamp, no conversion (NaN -> FP32_QNAN)
        ob = OUT_BYTES[self.cfg.out_dtype]
        if fp32:
            a.section(f"epilogue: v_scale, fp32 output (NaN -> {FP32_QNAN}), stores of the valid query rows")
        else:
            neg_max, pos_max = OUT_MAX[self.cfg.out_dtype]
            a.section(f"epilogue: v_scale, {self.cfg.out_dtype} RNE saturating at +-its max (NaN -> "
                      f"{FP16_QNAN if fp16 else '0x7fc0'}), stores of the valid query rows")
        vm = WaitCounter(a, "s_wait_loadcnt")
        a.op(f"v_bfe_u32 {t}, {self.tid}, 4, 1", "h")
        a.op(f"v_lshlrev_b32 {t}, 5, {t}", "8h floats = 32h bytes")
        # smooth_v (FLAG_SMOOTH_V): v_mean of d-tile dt in slot dt % 2 (magic, stV[0:8], both free now), added on the
        # lanes of s_addmean = rows with l != 0 when the flag is set (others keep the value: no -0 -> +0 change)
        # head dim 256: (ring[8:16], qring); the staging set is half of sab there
        vmean_slots = (self.ring[8:16], self.qring) if self.WIDE else (self.magic, self.stV[0:8])
        # v_scale of d-tile dt in sab(8 * (dt % n_vs)): all d-tiles at once (64 VGPRs), head dim 256 8 at a time (d-tile
        # dt + 8 loads into d-tile dt's slot once dt is done)
        n_vs = min(self.D_TILES, 8)

        def load_dtile(dst8, base, dt, tag):
            """dst8 = this lane half's 8 floats of d-tile dt of a per-channel fp32 vector (offset t = 32h bytes)."""
            for half in range(2):
                a.op(f"global_load_b128 {dst8[4 * half:4 * half + 4]}, {t}, {base} "
                     f"offset:{dt * WMMA_N * F32_BYTES + half * B128}")
                vm.issue(f"{tag}{dt}{half}")

        def load_vmean(dt):
            load_dtile(vmean_slots[dt % 2], self.s_vmh, dt, "vm")
        if not self.PV16:
            # v_scale values land in SA/SB (free now): d-tile dt's 8 values of this lane half in SA/SB[8dt..8dt+7]
            for dt in range(n_vs):
                load_dtile(self.sab(8 * dt, 8), self.s_vsh, dt, "vs")
            load_vmean(0)
            load_vmean(1)
            a.op(f"v_cmp_neq_f32_e64 {self.s_addmean}, 0, {self.l_run}", "rows that saw a key")
            a.op("s_wait_alu depctr_va_sdst(0)")
            a.op(f"s_bitcmp1_b32 {self.s_flags}, {abi.FLAG_SMOOTH_V_BIT}")
            a.op(f"s_cselect_b32 {self.s_addmean}, {self.s_addmean}, 0", "no lane without smooth_v")
            a.op("s_wait_alu depctr_sa_sdst(0)")
        # 8 x 16-bit outputs of d-tile dt in packed[4dt:4dt+4] (pv fp16 head dim 128: the ring is too small; the
        # V^T staging registers are free now)
        # (head dim 256: in place, into O[8dt:8dt+4], whose values the packs of d-tile dt have consumed)
        if self.WIDE:
            packed = _InPlacePacked(self.O)
        elif self.RING < 2 + self.D_TILES:
            packed = self.stV[0:4 * self.D_TILES]
        else:
            packed = self.ring[8:8 + 4 * self.D_TILES]
        for dt in range(self.D_TILES):
            if not self.PV16:
                vm.wait_for(f"vm{dt}1")
            for e in range(8):
                j = 8 * dt + e
                sc = self.sab(8 * (dt % n_vs) + e)
                o = self.O[j]
                a.op(f"v_mul_f32_e32 {o}, {o}, {inv}")
                if not self.PV16:
                    a.op(f"v_mul_f32_e32 {o}, {o}, {sc}")
                    vmv, tmp = vmean_slots[dt % 2][e], self.ring[7]
                    a.op(f"v_add_f32_e32 {tmp}, {o}, {vmv}", "+ v_mean (smooth_v)")
                    a.op(f"v_cndmask_b32_e64 {o}, {o}, {tmp}, {self.s_addmean}")
                if fp32:   # O[j] itself is stored (two b128 per d-tile below): only NaN is made canonical
                    a.op(f"v_cmp_o_f32_e32 vcc_lo, {o}, {o}", "NaN test")
                    a.op("s_wait_alu depctr_va_vcc(0)")
                    a.op(f"v_cndmask_b32_e32 {o}, {FP32_QNAN}, {o}, vcc_lo")
                    continue
                # issue 11 item 3: NaN test on the unclamped value (max/min_num drop NaN), then the clamp
                a.op(f"v_cmp_o_f32_e32 vcc_lo, {o}, {o}", "NaN test before the clamp")
                a.op(f"v_max_num_f32_e32 {o}, {neg_max}, {o}", "saturate (docs/numerics.md §Finite range)")
                a.op(f"v_min_num_f32_e32 {o}, {pos_max}, {o}")
                if fp16:
                    a.op(f"v_cvt_f16_f32_e64 {sc}, {o}", "RNE (round mode 0), low half (VOP3: the VOP1 form reaches v0-v127 only)")
                    a.op("s_wait_alu depctr_va_vcc(0)")
                    a.op(f"v_cndmask_b32_e32 {sc}, {FP16_QNAN}, {sc}, vcc_lo")
                else:
                    a.op(f"v_bfe_u32 {sc}, {o}, 16, 1")
                    a.op(f"v_add3_u32 {sc}, {o}, {sc}, {BF16_ROUND}", "bf16 RNE in the high half")
                    a.op("s_wait_alu depctr_va_vcc(0)")
                    a.op(f"v_cndmask_b32_e32 {sc}, {BF16_QNAN32}, {sc}, vcc_lo")
                if e % 2:
                    lo = self.sab(8 * (dt % n_vs) + e - 1)
                    if fp16:
                        a.op(f"v_lshlrev_b32 {sc}, 16, {sc}")
                        a.op(f"v_and_or_b32 {packed[4 * dt + e // 2]}, {lo}, {LO16_MASK}, {sc}")
                    else:
                        a.op(f"v_lshrrev_b32 {lo}, 16, {lo}")
                        a.op(f"v_and_or_b32 {packed[4 * dt + e // 2]}, {sc}, {HI16_MASK}, {lo}")
            if not self.PV16 and dt + 2 < self.D_TILES:
                load_vmean(dt + 2)    # into the slot d-tile dt has just finished with
            if not self.PV16 and dt + n_vs < self.D_TILES:
                load_dtile(self.sab(8 * (dt % n_vs), 8), self.s_vsh, dt + n_vs, "vs")
        # LSE value (full EXEC: v_permlanex16 reads the other lane half)
        lse_v, lg = self.ring[0], self.ring[1]
        m_fin = self.m[parity_m]
        a.op(f"s_bitcmp1_b32 {self.s_flags}, {abi.FLAG_LSE_BIT}")
        a.op("s_cbranch_scc0 .Lstore_out")
        a.section("epilogue: lse = (m + (log2 l - P_OFF)) * ln2 [+ ln2 * sum_d (q_int8 * q_scale) * k_mean]")
        a.op(f"v_log_f32_e32 {lg}, {self.l_run}")
        a.op(f"v_subrev_f32_e32 {lg}, {F32_P_OFF}, {lg}", "l carries 2^P_OFF")
        a.op(f"v_add_f32_e32 {lse_v}, {m_fin}, {lg}")
        a.op(f"v_mul_f32_e32 {lse_v}, {F32_LN2}, {lse_v}")
        a.op(f"s_bitcmp1_b32 {self.s_flags}, {abi.FLAG_SMOOTH_K_BIT}")
        a.op("s_cbranch_scc0 .Lstore_out")
        # k_mean: this lane half's head_dim/2 values (d = head_dim/2 * h ..) over SA, SB
        km_off = self.ring[5]
        a.op(f"v_bfe_u32 {km_off}, {self.tid}, 4, 1", "h")
        a.op(f"v_lshlrev_b32 {km_off}, {log2(self.HEAD_DIM // 2 * F32_BYTES)}, {km_off}",
             f"{self.HEAD_DIM // 2}h floats")
        # (sab holds 64 of them: head dim 256 loads the d-groups i < 4 first, then i >= 4 into the same registers)
        n_km = min(self.HEAD_DIM // 8, 16)
        acc, qd = self.ring[2], self.ring[3]
        for i in range(self.QF):
            if 4 * i % n_km == 0:
                for j in range(4 * i, 4 * i + n_km):
                    a.op(f"global_load_b128 {self.sab(4 * (j % n_km), 4)}, {km_off}, "
                         f"{self.s_kmh} offset:{B128 * j}")
                    vm.issue(f"km{j}")
            if i == 0:
                a.op(f"v_mov_b32 {acc}, 0")
            qf = self.Q[4 * i:4 * i + 4] if not self.WIDE else self.ring[8:12]
            if self.WIDE:   # Q^T fragment i from LDS (this thread stored it in the prologue)
                a.op(f"ds_load_b128 {qf}, {self.q_rd} offset:{i * self.Q_FRAG_STEP}")
                a.op("s_wait_dscnt 0")
            for w in range(4):
                vm.wait_for(f"km{4 * i + w}")
                for b in range(4):
                    d = 16 * i + 4 * w + b
                    km = self.sab(d % (4 * n_km))
                    a.op(f"v_bfe_i32 {qd}, {qf[w]}, {8 * b}, 8")
                    a.op(f"v_cvt_f32_i32_e32 {qd}, {qd}")
                    a.op(f"v_mul_f32_e32 {qd}, {self.s_qs}, {qd}")
                    a.op(f"v_mul_f32_e32 {qd}, {qd}, {km}")
                    a.op(f"v_add_f32_e32 {acc}, {acc}, {qd}")
        a.op(f"v_permlanex16_b32 {self.xl}, {acc}, {self.s_sel}, {PERMX16_SEL_HI}")
        a.op(f"v_add_f32_e32 {acc}, {acc}, {self.xl}")
        a.op(f"v_mul_f32_e32 {acc}, {F32_LN2}, {acc}")
        a.op(f"v_add_f32_e32 {lse_v}, {lse_v}, {acc}")
        a.label(".Lstore_out")
        a.section("epilogue: stores (EXEC = valid query rows; lse from lanes 0-15)")
        a.op(f"v_and_b32 {self.v_qi}, 15, {self.tid}")
        a.op(f"v_add_nc_u32_e32 {self.v_qi}, {self.s_q0}, {self.v_qi}", "query index q0 + r")
        a.op(f"v_cmpx_gt_u32_e64 {self.s_seqlen_q}, {self.v_qi}")
        a.op("s_cbranch_execz .Lend")
        o_off = self.ring[4]
        a.op(f"v_and_b32 {o_off}, 15, {self.tid}")
        a.op(f"v_mul_lo_u32 {o_off}, {o_off}, {self.s_ostride[1]}", "r * out_stride_s")
        a.op(f"v_lshlrev_b32 {o_off}, {log2(ob)}, {o_off}", "bytes")
        h_tmp = self.ring[5]
        a.op(f"v_bfe_u32 {h_tmp}, {self.tid}, 4, 1", "h")
        a.op(f"v_lshl_add_u32 {o_off}, {h_tmp}, {log2(8 * ob)}, {o_off}", f"+ {8 * ob}h bytes (8 outputs of d-tile half h)")
        partial = []   # d-tiles that may hold the last real channel (head_dim inside them)
        for dt in range(self.D_TILES):
            if (dt + 1) * WMMA_N > self.MIN_HEAD_DIM:   # the d-tile may be (partly) zero padding: D < D_pad
                a.op(f"s_cmp_le_u32 {self.s_headdim}, {dt * WMMA_N}", f"head_dim <= {dt * WMMA_N}: no more channels")
                a.op("s_cbranch_scc1 .Lstored")
                a.op(f"s_cmp_lt_u32 {self.s_headdim}, {(dt + 1) * WMMA_N}", "the last real channel is in this d-tile")
                a.op(f"s_cbranch_scc1 .Lpartial{dt}")
                partial.append(dt)
            if fp32:   # 8 fp32 outputs of d-tile half h = 32 bytes: two b128 stores straight from O
                for half in range(2):
                    a.op(f"global_store_b128 {o_off}, {self.O[8 * dt + 4 * half:8 * dt + 4 * half + 4]}, "
                         f"{self.s_outb} offset:{WMMA_N * ob * dt + B128 * half}")
            else:
                a.op(f"global_store_b128 {o_off}, {packed[4 * dt:4 * dt + 4]}, {self.s_outb} offset:{WMMA_N * ob * dt}")
        if partial:
            a.op("s_branch .Lstored")
        # the d-tile of the last real channel: lane half h stores its 8 channels d = 16dt + 8h + e with e < left =
        # head_dim - 16dt - 8h one by one (exact for any D: nothing past channel head_dim - 1 is written). v_cmpx
        # narrows EXEC for e = 0, 1, ..., 7 in turn (e < left only gets rarer); the valid-row EXEC comes back after.
        left, s_exec = self.ring[6], self.s_tmp3[0]
        for dt in partial:
            a.label(f".Lpartial{dt}")
            a.op(f"s_mov_b32 {s_exec}, exec_lo", "the valid query rows")
            a.op(f"s_sub_u32 {self.s_tmp3[1]}, {self.s_headdim}, {dt * WMMA_N}", "channels left in this d-tile")
            a.op(f"v_bfe_u32 {left}, {self.tid}, 4, 1", "h")
            a.op(f"v_lshlrev_b32 {left}, 3, {left}", "8h")
            a.op("s_wait_alu depctr_sa_sdst(0)")
            a.op(f"v_sub_nc_u32_e32 {left}, {self.s_tmp3[1]}, {left}", "left = head_dim - 16dt - 8h (i32, may be < 0)")
            for e in range(8):
                a.op(f"v_cmpx_lt_i32_e32 {e}, {left}", f"channel 16dt + 8h + {e} < head_dim")
                if fp32:   # the fp32 output of channel e is O itself
                    a.op(f"global_store_b32 {o_off}, {self.O[8 * dt + e]}, {self.s_outb} "
                         f"offset:{WMMA_N * ob * dt + ob * e}")
                else:
                    word = packed[4 * dt + e // 2]
                    store = "global_store_d16_hi_b16" if e % 2 else "global_store_b16"
                    a.op(f"{store} {o_off}, {word}, {self.s_outb} offset:{WMMA_N * ob * dt + ob * e}")
            a.op(f"s_mov_b32 exec_lo, {s_exec}")
            a.op("s_branch .Lstored")
        a.label(".Lstored")
        a.op(f"s_bitcmp1_b32 {self.s_flags}, {abi.FLAG_LSE_BIT}")
        a.op("s_cbranch_scc0 .Lend")
        a.op(f"v_and_b32 {o_off}, 31, {self.tid}")
        a.op(f"v_cmpx_gt_u32_e64 16, {o_off}", "lanes 0-15 hold the row's lse")
        a.op(f"v_and_b32 {o_off}, 15, {self.tid}")
        a.op(f"v_lshlrev_b32 {o_off}, 2, {o_off}")
        a.op(f"global_store_b32 {o_off}, {lse_v}, {self.s_lseb}")
        a.label(".Lend")
        a.op("s_endpgm")
