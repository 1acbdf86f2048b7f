"""The online softmax of one key tile as VALU op lists (scaling, row max, exp2 / row sum / P pack, running sum),
the masking of tiles that reach past a row limit, and the O rescale."""
from __future__ import annotations

from asmdsl import Asm, Op

from .config import CHUNKS, F32_NEG_INF, F32_P_OFF, PERMX16_SEL_HI, TILE_K, log2
from .stream import vadd, vcc_select_lines, vmax, vmul, vsub


class Softmax:
    """The softmax stage of AttentionKernel (reads KernelState)."""

    def scale_ops(self, sacc) -> list[Op]:
        """s = float(s_int32) * (q_scale * k_scale), in place. The QK^T accumulators start at C = 0x4b400000
    (MAGIC_INT) instead of 0, so each holds the bits of the float 1.5 * 2^23 + s_int32 (|s_int32| < 2^21 keeps
    the exponent); subtracting 1.5 * 2^23 is exact (Sterbenz) and gives float(s_int32) -- bitwise the HIP
    kernel's v_cvt_f32_i32, but as a VOPD-pairable v_subrev_f32 instead of a single-issue convert."""
        ops = [vmul(self.qk[0], self.s_qs, self.ks), Op.mov(self.qk[1], self.qk[0])]
        for j in range(32):
            ops.append(Op.vop2("v_subrev_f32", sacc[j], self.s_magic, sacc[j]))
            if j % 2:
                ops.append(vmul(sacc[j - 1], self.qk[0], sacc[j - 1]))
                ops.append(vmul(sacc[j], self.qk[1], sacc[j]))
        return ops

    def max_ops(self, sacc, m_old, m_new) -> list[Op]:
        """Row max over the lane's 32 scores (4 partial chains, VOPD pairs), the other lane half's max through
    v_permlanex16 (docs/rdna4.md §WMMA: DPP cannot cross 16-lane rows), m_new = max(m_old, both) and
    alpha = exp2(m_old - m_new), 0 while m_old = -inf (max is exact, so any order is the HIP kernel's value)."""
        ops = [vmax(self.mx[0], sacc[0], sacc[1]), vmax(self.mx[1], sacc[2], sacc[3]),
               vmax(self.mx[2], sacc[4], sacc[5]), vmax(self.mx[3], sacc[6], sacc[7])]
        for j in range(8, 32, 4):
            for q in range(4):
                ops.append(vmax(self.mx[q], sacc[j + q], self.mx[q]))
        ops += [vmax(self.mx[0], self.mx[0], self.mx[2]), vmax(self.mx[1], self.mx[1], self.mx[3]), vmax(self.mx[0], self.mx[0], self.mx[1])]
        ops.append(Op.raw(f"v_permlanex16_b32 {self.xl}, {self.mx[0]}, {self.s_sel}, {PERMX16_SEL_HI}", [self.mx[0]], [self.xl]))
        ops.append(Op.raw(f"v_max3_num_f32 {m_new}, {m_old}, {self.mx[0]}, {self.xl}", [m_old, self.mx[0], self.xl], [m_new]))
        ops.append(vsub(self.alpha[0], m_old, m_new))
        ops.append(Op.raw(f"v_exp_f32_e32 {self.alpha[0]}, {self.alpha[0]}", [self.alpha[0]], [self.alpha[0]], trans=True))
        return ops

    def alpha_select_lines(self, m_old) -> list[str]:
        """alpha = m_old == -inf ? 0 : exp2(m_old - m_new) (VCC written by VALU, read by VALU: §Hazards 3)."""
        return vcc_select_lines(f"v_cmp_neq_f32_e32 vcc_lo, {F32_NEG_INF}, {m_old}", self.alpha[0], 0, self.alpha[0])

    def guard_lines(self, m_new) -> list[str]:
        """t = m_use - P_OFF with m_use = m_new, or 0 while m_new = -inf (a row with no visible key so far:
    p = exp2(-inf - t) = 0, not NaN), in m[2] and lim (two VOPD banks for the exp2 arguments). P_OFF folds the
    fp8 range into the exponent: p = exp2(s - t) <= 2^8 (docs/numerics.md §Attention arithmetic model)."""
        return vcc_select_lines(f"v_cmp_neq_f32_e32 vcc_lo, {F32_NEG_INF}, {m_new}", self.m[2], 0, m_new) + \
            [f"v_subrev_f32_e32 {self.m[2]}, {F32_P_OFF}, {self.m[2]}", f"v_mov_b32 {self.lim}, {self.m[2]}"]

    def exp_ops(self, sacc, m_new) -> list[Op]:
        """p = exp2(s - t) (t = m_use - P_OFF: p carries the fp8 range); row sum l_tile = p0 + p1 + ... + p31 in
    register order (the HIP kernel's order), p8 = fp8(p) packed in VGPR order into the chunk's first two registers
    (the P^T B-fragment, docs/rdna4.md §WMMA data flow); pv fp16: p16 = fp16(p). The chain alternates rs[1]/rs[0]
    (one even, one odd destination) so that its adds pair in VOPD with the exp arguments' subtractions."""
        mm = (self.lim, self.m[2])     # both t (guard_lines)
        ops: list[Op] = []

        def sub(j):
            return vsub(sacc[j], sacc[j], mm[j % 2])

        def exp(j):
            return Op.raw(f"v_exp_f32_e32 {sacc[j]}, {sacc[j]}", [sacc[j]], [sacc[j]], trans=True)

        R = (self.rs[1], self.rs[0])      # step j writes R[j % 2]: odd VGPR after even steps, even after odd ones

        def chain(j):           # rs_j = rs_{j-1} + p_j, rs_1 = p_0 + p_1
            if j == 1:
                return vadd(R[1], sacc[0], sacc[1])
            return vadd(R[j % 2], R[(j - 1) % 2], sacc[j])

        def scale(j):           # p16 = fp16(p) in the low half, RNE (VOP3 form: the VOP1 one reaches v0-v127 only)
            return [Op.raw(f"v_cvt_f16_f32_e64 {sacc[j]}, {sacc[j]}", [sacc[j]], [sacc[j]])] if self.PV16 else []

        def packs_after(j):     # pack as soon as p_j (fp16: its convert) is issued
            out = []
            c, e = divmod(j, 8)
            if self.PV16:       # halves p_{j-1}, p_j -> VGPR 8c + e//2: the f16 B-fragment of chunk c in 4 VGPRs
                if e % 2:
                    dst = sacc[8 * c + e // 2]
                    out.append(Op.raw(f"v_pack_b32_f16 {dst}, {sacc[j - 1]}, {sacc[j]}", [sacc[j - 1], sacc[j]], [dst]))
                return out
            if e in (1, 5):
                dst = sacc[8 * c + e // 4]
                out.append(Op.raw(f"v_cvt_pk_fp8_f32 {dst}, {sacc[j - 1]}, {sacc[j]}", [sacc[j - 1], sacc[j], dst], [dst]))
            elif e in (3, 7):
                dst = sacc[8 * c + e // 4]
                # op_sel dst bit: the high half; the convert merges into dst (docs/rdna4.md §Hazards 9)
                out.append(Op.raw(f"v_cvt_pk_fp8_f32 {dst}, {sacc[j - 1]}, {sacc[j]} op_sel:[0,0,1]",
                                  [sacc[j - 1], sacc[j], dst], [dst]))
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
                    ops += scale(j - 2)
                    ops += packs_after(j - 2)
        for j in range(32 - LAG, 32):
            ops.append(chain(j))
            ops += scale(j - 2)
            ops += packs_after(j - 2)
        for j in (30, 31):
            ops += scale(j)
            ops += packs_after(j)
        return ops

    def lsum_ops(self) -> list[Op]:
        """l = l * alpha + (rs + rs of the other lane half) -- the HIP kernel's two roundings, in its order."""
        final = self.rs[0]           # R[31 % 2] of exp_ops
        return [Op.raw(f"v_permlanex16_b32 {self.xl}, {final}, {self.s_sel}, {PERMX16_SEL_HI}", [final], [self.xl]),
                vadd(final, final, self.xl),
                vmul(self.l_run, self.l_run, self.alpha[0]),
                vadd(self.l_run, self.l_run, final)]

    def mask_lines(self, sacc, label: str) -> list[str]:
        """Tiles reaching past the wave's smallest row limit (the sequence tail, the causal diagonal): scores of
    keys j >= lim(row) = min(rowlim0 + r, seq_len_kv) become -inf (uniform branch; other tiles skip it). Lane half h
    holds keys key0 + 32h + 8c + e (c chunk, e vgpr): visible when 8c + e < lim(row) - key0 - 32h (signed)."""
        key0, end = self.s_tmp3[0], self.s_tmp3[1]
        out = [f"s_lshl_b32 {key0}, {self.s_Lc}, {log2(TILE_K)}", f"s_add_co_i32 {end}, {key0}, {TILE_K}",
               f"s_cmp_le_i32 {end}, {self.s_wlim}", f"s_cbranch_scc1 {label}",
               "s_wait_alu depctr_sa_sdst(0)",
               f"v_and_b32 {self.lim}, 15, {self.tid}", f"v_add_nc_u32_e32 {self.lim}, {self.s_rowlim0}, {self.lim}",
               f"v_min_i32_e32 {self.lim}, {self.s_seqlen}, {self.lim}",
               f"v_subrev_nc_u32_e32 {self.lim}, {key0}, {self.lim}",
               f"v_bfe_u32 {self.xl}, {self.tid}, 4, 1", f"v_lshlrev_b32 {self.xl}, 5, {self.xl}",
               f"v_sub_nc_u32_e32 {self.lim}, {self.lim}, {self.xl}"]
        for c in range(CHUNKS):
            for e in range(8):
                out += vcc_select_lines(f"v_cmp_lt_i32_e32 vcc_lo, {8 * c + e}, {self.lim}", sacc[8 * c + e],
                                        F32_NEG_INF, sacc[8 * c + e])
        return out

    def rescale(self, a: Asm, label: str) -> None:
        """O *= alpha, skipped when no lane's max moved (x * 1.0 == x: bitwise the same as always scaling)."""
        a.op(f"v_cmp_neq_f32_e32 vcc_lo, 1.0, {self.alpha[0]}")
        a.op("s_wait_alu depctr_va_vcc(0)")
        a.op(f"s_cbranch_vccz {label}")
        a.valu([vmul(self.O[j], self.alpha[j % 2], self.O[j]) for j in range(self.O.n)])
        a.label(label)
