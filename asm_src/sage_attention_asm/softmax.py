"""The online softmax of one key tile as VALU op lists (row max on the accumulators, one-FMA exp2 argument, exp2 /
row sum / P pack, running sum), the exact form for out-of-range scales, the masking of tiles that reach past a row
limit, and the O rescale (docs/numerics.md §Attention arithmetic model)."""
from __future__ import annotations

from asmdsl import Asm, Op
from sage_co import abi

from .config import (B128, F32_BYTES, CHUNKS, F32_EXP2_VALU_C1, F32_EXP2_VALU_C2, F32_EXP2_VALU_MIN, F32_FMA_MAX_QK_SCALE,
                     F32_NEG_INF, F32_NEG_TAU, F32_P_OFF, PERMX16_SEL_HI, TILE_K, log2)
from .stream import vadd, vcc_select_lines, vmax, vmul, vsub, vsubrev


class Softmax:
    """The softmax stage of AttentionKernel (reads KernelState)."""

    def scale_ops(self, sacc) -> list[Op]:
        """qk[0] = q_scale * k_scale of the next tile, also the exp argument's multiplier (exact_form sets it to 1.0
    once it is done with it). The scores stay as the QK^T accumulators leave them: each chunk's first WMMA takes C =
    0x4b400000 (MAGIC_INT) instead of 0, so each holds the bits of the float x = 1.5 * 2^23 + s_int32 (|s_int32| <
    2^21 keeps the exponent), monotonic in s: the row max and the one-FMA exp argument read x, no per-score
    convert."""
        return [vmul(self.qk[0], self.s_qs, self.ks)]

    def exact_ops(self, sacc) -> list[Op]:
        """The exact form's scores in place: s = (x - 1.5 * 2^23) * qk (the subtraction is exact, Sterbenz), the
    HIP kernel's float(s_int32) * qk (qk[1], a copy in the other bank, for the VOPD pairs)."""
        ops = [Op.mov(self.qk[1], self.qk[0])]
        for j in range(32):
            ops.append(Op.vop2("v_subrev_f32", sacc[j], self.s_magic, sacc[j]))
            if j % 2:
                ops.append(vmul(sacc[j - 1], self.qk[0], sacc[j - 1]))
                ops.append(vmul(sacc[j], self.qk[1], sacc[j]))
        return ops

    def max_ops(self, sacc, m_old, m_new, scaled: bool = True) -> list[Op]:
        """Row max over the lane's 32 accumulators x by v_max3_num_f32 (two values per issue whatever a VOPD pair
    costs, docs/rdna4.md §Throughput): 4 interleaved partial chains (9, 9, 7, 7 values) combined into mx[0], scaled once:
    (max x - 1.5 * 2^23) * qk = max_j float(s_int32) * qk exactly (qk >= 0 scales monotonically; a masked lane
    half gives -inf, or NaN when qk = 0, which v_max3_num drops); the other lane half's max through v_permlanex16
    (docs/rdna4.md §WMMA: DPP cannot cross 16-lane rows), m_cand = max(m_old, both) into m_new and d = m_old -
    m_cand into alpha[0] (max is exact, so any order is the HIP kernel's value); threshold_lines finish m_new and
    alpha."""
        def max3(d, a_, b_, c_):
            return Op.raw(f"v_max3_num_f32 {d}, {a_}, {b_}, {c_}", [a_, b_, c_], [d])

        bounds = (0, 9, 18, 25, 32)                 # the chains' values: sacc[bounds[q]:bounds[q + 1]]
        chains = [[sacc[j] for j in range(bounds[q], bounds[q + 1])] for q in range(4)]
        ops, started = [], [False] * 4
        while any(chains):
            for q, vals in enumerate(chains):
                if not vals:
                    continue
                m = self.mx[q]
                if not started[q]:
                    ops.append(max3(m, vals.pop(0), vals.pop(0), vals.pop(0)))
                    started[q] = True
                elif len(vals) >= 2:
                    ops.append(max3(m, m, vals.pop(0), vals.pop(0)))
                else:
                    ops.append(vmax(m, vals.pop(0), m))
        ops += [max3(self.mx[0], self.mx[0], self.mx[1], self.mx[2]), vmax(self.mx[0], self.mx[0], self.mx[3])]
        if scaled:   # additive attn_mask tiles hold the scores s themselves (mask_apply): no scaling
            ops += [Op.vop2("v_subrev_f32", self.mx[0], self.s_magic, self.mx[0]),
                    vmul(self.mx[0], self.qk[0], self.mx[0])]
        ops.append(Op.raw(f"v_permlanex16_b32 {self.xl}, {self.mx[0]}, {self.s_sel}, {PERMX16_SEL_HI}", [self.mx[0]], [self.xl]))
        ops.append(Op.raw(f"v_max3_num_f32 {m_new}, {m_old}, {self.mx[0]}, {self.xl}", [m_old, self.mx[0], self.xl], [m_new]))
        ops.append(vsub(self.alpha[0], m_old, m_new))
        return ops

    def threshold_lines(self, m_old, m_new) -> list[str]:
        """The thresholded rescale (docs/numerics.md §Attention arithmetic model): grow = d < -RESCALE_TAU (d = m_old -
    m_cand in alpha[0]; never NaN: m starts at M_INIT, finite, and m_cand >= m_old), m_new = grow ? m_cand :
    m_old, alpha = exp2(grow ? d : 0) (exactly 1 without growth: the O rescale is skipped); t = m_new -
    P_OFF in m[2] (m_new is finite: M_INIT, no -inf guard) and lim = b = fma(1.5 * 2^23, qk, t), the one-FMA form's
    subtrahend (VCC written by VALU, read by VALU: docs/rdna4.md §Hazards 3)."""
        return [f"v_cmp_gt_f32_e32 vcc_lo, {F32_NEG_TAU}, {self.alpha[0]}",
                "s_wait_alu depctr_va_vcc(0)",
                f"v_cndmask_b32_e32 {m_new}, {m_old}, {m_new}, vcc_lo",
                f"v_cndmask_b32_e32 {self.alpha[0]}, 0, {self.alpha[0]}, vcc_lo",
                f"v_exp_f32_e32 {self.alpha[0]}, {self.alpha[0]}",
                f"v_subrev_f32_e32 {self.m[2]}, {F32_P_OFF}, {m_new}",
                f"v_fma_f32 {self.lim}, {self.s_magic}, {self.qk[0]}, {self.m[2]}"]

    def exact_form(self, a: Asm, sacc, label: str) -> None:
        """Unless every lane's qk lies in (0, FMA_MAX_QK_SCALE] (on the fp32 bits: bits(qk) - 1 < bits(FMA_MAX)
    unsigned, which NaN, inf, 0 and negative values fail), the exact form (uniform branch, rarely taken): s =
    (x - 1.5 * 2^23) * qk, masked again ((-inf) * 0 is NaN; attn_mask bits too), qk[0] = 1.0 and lim = t, so that
    the common fma(s, 1.0, -t) is s - t. Additive attn_mask tiles (scores already s) take qk = 1.0, lim = t."""
        a.op(f"s_bitcmp1_b32 {self.s_kind}, {abi.MASK_KIND_ADDITIVE_BIT}", "additive attn_mask tile")
        a.op(f"s_cbranch_scc1 {label}_additive")
        ool = self.ool
        ool.label(f"{label}_additive")
        ool.op(f"v_mov_b32_e32 {self.qk[0]}, 1.0")
        ool.op(f"v_mov_b32_e32 {self.lim}, {self.m[2]}")
        ool.op(f"s_branch {label}")
        a.op(f"v_add_nc_u32_e32 {self.xl}, -1, {self.qk[0]}")
        a.op(f"v_cmp_le_u32_e32 vcc_lo, {F32_FMA_MAX_QK_SCALE}, {self.xl}", "lanes whose qk needs the exact form")
        a.op("s_wait_alu depctr_va_vcc(0)")
        a.op(f"s_cbranch_vccz {label}")
        a.valu(self.exact_ops(sacc))
        for ln in self.mask_lines(sacc, label + "_lim"):
            a.op(ln)
        a.label(label + "_lim")
        a.op(f"s_cmp_lg_u32 {self.s_kind}, {abi.MASK_KIND_FULL}")
        a.op(f"s_cbranch_scc1 {label}_bits")
        ool.label(f"{label}_bits")
        for ln in self.bits_lines(sacc):
            ool.op(ln)
        ool.op(f"s_branch {label}_mask")
        a.label(label + "_mask")
        a.op(f"v_mov_b32_e32 {self.qk[0]}, 1.0")
        a.op(f"v_mov_b32_e32 {self.lim}, {self.m[2]}")
        a.label(label)

    def exp_ops(self, sacc) -> list[Op]:
        """p = exp2(fma(x, qk[0], -lim)) (one FMA per score; threshold_lines / exact_form set qk[0] and lim); the row
    sum in two chains, l_tile = (p0 + p2 + ... + p30) + (p1 + p3 + ... + p31) (the HIP kernel's order; the chains'
    adds pair in VOPD: one even, one odd destination), p8 = fp8(p) packed in VGPR order into the chunk's first two
    registers (the P^T B-fragment, docs/rdna4.md §WMMA data flow); pv fp16: p16 = fp16(p), packed in halves."""
        def arg(j):
            return Op.raw(f"v_fma_f32 {sacc[j]}, {sacc[j]}, {self.qk[0]}, -{self.lim}",
                          [sacc[j], self.qk[0], self.lim], [sacc[j]])

        valu = self.exp2_valu_keys()

        def exp(j):
            if j in valu:       # the first of an (even, odd) pair: both scores' VALU exp2
                return self.exp2_valu_ops(sacc[j], sacc[j + 1]) if j % 2 == 0 else []
            return [Op.raw(f"v_exp_f32_e32 {sacc[j]}, {sacc[j]}", [sacc[j]], [sacc[j]], trans=True)]

        def chain(j):           # rs[j % 2] += p_j; the chains start rs[0] = p0 + p2, rs[1] = p1 + p3
            if j < 4:
                return vadd(self.rs[j % 2], sacc[j - 2], sacc[j])
            return vadd(self.rs[j % 2], self.rs[j % 2], sacc[j])

        def scale(j):           # p16 = fp16(p) in the low half, RNE (VOP3 form: the VOP1 one reaches v0-v127 only)
            return [Op.raw(f"v_cvt_f16_f32_e64 {sacc[j]}, {sacc[j]}", [sacc[j]], [sacc[j]])] if self.PV16 else []

        def packs_after(j):     # pack p_{j-1}, p_j once both chains have read them (their registers are overwritten)
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

        LEAD, LAG = 4, 2        # arguments LEAD scores ahead of their exp; chain adds LAG behind, packs 2 more
        ops: list[Op] = [arg(j) for j in range(LEAD)]
        if valu:                # xl = C2 (free from the row max to the next tile's mask loads)
            ops.insert(0, Op.mov(self.xl, F32_EXP2_VALU_C2))
        for k in range(32 + LAG):
            if k < 32:
                ops += exp(k)
                if k + LEAD < 32:
                    ops.append(arg(k + LEAD))
            j = k - LAG
            if j >= 2:
                ops.append(chain(j))
                ops += scale(j - 2)
                ops += packs_after(j - 2)
        for j in (30, 31):
            ops += scale(j)
            ops += packs_after(j)
        return ops

    def exp2_valu_keys(self) -> frozenset[int]:
        """The scores j (key 32h + j of the tile) whose exp2 the schedule computes on the VALU: bit j of
    abi.EXP2_VALU_KEYS with the "exp2_valu" schedule (whole (even, odd) pairs), none with "trans"."""
        if self.cfg.schedule != "exp2_valu":
            return frozenset()
        keys = frozenset(j for j in range(32) if abi.EXP2_VALU_KEYS >> j & 1)
        assert all((j ^ 1) in keys for j in keys), "EXP2_VALU_KEYS must name whole (even, odd) pairs"
        return keys

    def exp2_valu_ops(self, a_, b_) -> list[Op]:
        """exp2 of the arguments in a_, b_ (an even and an odd score VGPR) on the VALU, in place (docs/numerics.md
    §Attention arithmetic model "exp2 on the VALU"; sage_co.reference.exp2_valu): c = max(a, EXP2_VALU_MIN), r = c +
    MAGIC (the nearest integer n in r's low bits), f = c - (r - MAGIC), q = fma(fma(f, C2, C1), f, 1.0), p = (r << 23)
    + q as integers. The four fp32 steps pair in VOPD; r and r - MAGIC go to mx[0..3] (free between the row max and
    the next tile's); C2 is read from xl (exp_ops sets it: a VOP3 takes one literal, C1, and 0.25 is no inline
    constant)."""
        r0, r1, u0, u1 = self.mx[0], self.mx[1], self.mx[2], self.mx[3]
        ops = []
        for x, r, u in ((a_, r0, u0), (b_, r1, u1)):
            ops.append(vmax(x, F32_EXP2_VALU_MIN, x))
        for x, r, u in ((a_, r0, u0), (b_, r1, u1)):
            ops.append(vadd(r, self.s_magic, x))
        for x, r, u in ((a_, r0, u0), (b_, r1, u1)):
            ops.append(vsubrev(u, self.s_magic, r))
        for x, r, u in ((a_, r0, u0), (b_, r1, u1)):
            ops.append(vsub(x, x, u))
        for x, r, u in ((a_, r0, u0), (b_, r1, u1)):
            ops.append(Op.raw(f"v_fma_f32 {u}, {x}, {self.xl}, {F32_EXP2_VALU_C1}", [x, self.xl], [u]))
        for x, r, u in ((a_, r0, u0), (b_, r1, u1)):
            ops.append(Op.raw(f"v_fma_f32 {x}, {u}, {x}, 1.0", [u, x], [x]))
        for x, r, u in ((a_, r0, u0), (b_, r1, u1)):
            ops.append(Op.raw(f"v_lshl_add_u32 {x}, {r}, 23, {x}", [r, x], [x]))
        return ops

    def lsum_ops(self) -> list[Op]:
        """l = fma(l, alpha, rs[0] + rs[1]): this lane half's running sum (the HIP kernel's roundings, in its order);
    the two lane halves' sums are added once, in the epilogue (l_total_lines)."""
        final = self.rs[0]
        return [vadd(final, self.rs[0], self.rs[1]),
                Op.raw(f"v_fma_f32 {self.l_run}, {self.l_run}, {self.alpha[0]}, {final}",
                       [self.l_run, self.alpha[0], final], [self.l_run])]

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

    # ---- attn_mask (docs/numerics.md §Masks "attn_mask"): per LUT entry a kind (s_kind); partial tiles read this
    # lane's 32 bits (row q0 + r, keys 32h + j of the tile: one u32 word), additive tiles also its 32 biases
    # The mask blocks are emitted out of line (self.ool, after the epilogue): a full tile runs one s_cmp +
    # s_cbranch per block, and the loop's paths (tools/perfmodel enumerates them) stay those of the unmasked kernel.
    def mask_issue(self, a: Asm, label: str) -> None:
        """At the start of tile t (before its staging loads, so that mask_apply can wait for these alone): partial /
        additive tiles load this lane's bit word into rs[0] (free until the row sums) and additive ones their first
        BIAS_LOADS x 4 biases into the ring (free until the fragment prefetch). xl = the lane's word (r * mss + h)."""
        a.op(f"s_cmp_lg_u32 {self.s_kind}, {abi.MASK_KIND_FULL}")
        a.op(f"s_cbranch_scc1 {label}_ool")
        ret, a = label, self.ool
        a.label(f"{label}_ool")
        key0 = self.s_tmp3[0]
        a.op(f"v_and_b32 {self.xl}, 15, {self.tid}", "r")
        a.op(f"v_mul_lo_u32 {self.xl}, {self.xl}, {self.s_mss}", "r * mask_stride_s")
        a.op(f"v_bfe_u32 {self.lim}, {self.tid}, 4, 1", "h")
        a.op(f"v_add_nc_u32_e32 {self.xl}, {self.xl}, {self.lim}", "word of keys 32h.. of the row, tile 0")
        a.op(f"s_lshl_b32 {key0}, {self.s_Lc}, {log2(TILE_K // abi.MASK_WORD_BITS * F32_BYTES)}", "tile * 8 bytes")
        a.op("s_wait_alu depctr_sa_sdst(0)")
        a.op(f"v_lshl_add_u32 {self.lim}, {self.xl}, {log2(F32_BYTES)}, {key0}")
        a.op(f"global_load_b32 {self.rs[0]}, {self.lim}, {self.s_mrow}", "bits of keys 32h + j")
        a.op(f"s_bitcmp1_b32 {self.s_kind}, {abi.MASK_KIND_ADDITIVE_BIT}")
        a.op(f"s_cbranch_scc0 {label}")
        a.op(f"v_lshlrev_b32 {self.lim}, {log2(abi.MASK_WORD_BITS * F32_BYTES)}, {self.xl}", "word * 128 bytes")
        a.op(f"s_lshl_b32 {key0}, {self.s_Lc}, {log2(TILE_K * F32_BYTES)}", "tile * 256 bytes")
        a.op("s_wait_alu depctr_sa_sdst(0)")
        a.op(f"v_add_nc_u32_e32 {self.lim}, {key0}, {self.lim}", "bias byte offset of keys 32h.. (kept to mask_apply)")
        for u in range(self.BIAS_LOADS):
            a.op(f"global_load_b128 {self.ring[4 * u:4 * u + 4]}, {self.lim}, {self.s_brow} offset:{u * B128}")
        a.op(f"s_branch {ret}")

    def bias_ops(self, sacc, j0: int, j1: int) -> list[str]:
        """s = fma(x - 1.5 * 2^23, qk, b) for scores j0..j1-1 (b in ring[j - j0]): the additive tile's scores."""
        out = []
        for j in range(j0, j1):
            out += [f"v_subrev_f32_e32 {sacc[j]}, {self.s_magic}, {sacc[j]}",
                    f"v_fma_f32 {sacc[j]}, {sacc[j]}, {self.qk[0]}, {self.ring[j - j0]}"]
        return out

    def bits_lines(self, sacc) -> list[str]:
        """Score j = -inf where bit j of rs[0] is clear: m = sign-extended bit (0 or ~0), s = bfi(m, s, -inf)."""
        out = []
        for j in range(32):
            out += [f"v_bfe_i32 {self.xl}, {self.rs[0]}, {j}, 1",
                    f"v_bfi_b32 {sacc[j]}, {self.xl}, {sacc[j]}, {F32_NEG_INF}"]
        return out

    def mask_apply(self, a: Asm, sacc, outstanding: int, label: str) -> None:
        """Before the fragment prefetch of tile t: wait for mask_issue's loads (the `outstanding` loads issued after
        them may stay in flight), additive tiles turn x into s = fma(float(s_int32), qk, b) (the rest of the biases
        loaded now, waited with everything), then partial / additive tiles mask the hidden keys to -inf."""
        n = 4 * self.BIAS_LOADS
        a.op(f"s_cmp_lg_u32 {self.s_kind}, {abi.MASK_KIND_FULL}")
        a.op(f"s_cbranch_scc1 {label}_ool")
        ret, a = label, self.ool
        a.label(f"{label}_ool")
        a.op(f"s_wait_loadcnt {outstanding}", "the mask loads of mask_issue")
        a.op(f"s_bitcmp1_b32 {self.s_kind}, {abi.MASK_KIND_ADDITIVE_BIT}")
        a.op(f"s_cbranch_scc0 {label}_bits")
        for ln in self.bias_ops(sacc, 0, n):
            a.op(ln)
        for j0 in range(n, 32, n):
            j1 = min(32, j0 + n)
            for u in range((j1 - j0) // 4):
                a.op(f"global_load_b128 {self.ring[4 * u:4 * u + 4]}, {self.lim}, {self.s_brow} "
                     f"offset:{(j0 // 4 + u) * B128}")
            a.op("s_wait_loadcnt 0")
            for ln in self.bias_ops(sacc, j0, j1):
                a.op(ln)
        a.label(label + "_bits")
        for ln in self.bits_lines(sacc):
            a.op(ln)
        a.op(f"s_branch {ret}")

    def rescale(self, a: Asm, label: str) -> None:
        """O *= alpha, skipped when no lane's max moved by more than RESCALE_TAU (alpha = 1 exactly there, x * 1.0 ==
    x: bitwise the same as always scaling); alpha[1], a copy in the other bank, for the VOPD pairs."""
        a.op(f"v_cmp_neq_f32_e32 vcc_lo, 1.0, {self.alpha[0]}")
        a.op("s_wait_alu depctr_va_vcc(0)")
        a.op(f"s_cbranch_vccz {label}")
        a.valu([Op.mov(self.alpha[1], self.alpha[0])] +
               [vmul(self.O[j], self.alpha[j % 2], self.O[j]) for j in range(self.O.n)])
        a.label(label)
