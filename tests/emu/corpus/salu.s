s_mov_b32 s0, s1
s_mov_b32 s0, 0x12345678
s_mov_b32 s0, -1
s_mov_b32 s0, 64
s_mov_b32 s0, -16
s_mov_b32 s0, 0.5
s_mov_b32 s0, 1.0
s_mov_b32 s0, -4.0
s_mov_b32 s0, 0.15915494
s_mov_b32 s105, exec_lo
s_mov_b32 vcc_lo, m0
s_mov_b32 ttmp3, null
s_mov_b32 m0, s2
s_mov_b64 s[0:1], s[2:3]
s_mov_b64 s[0:1], 0x12345678
s_mov_b64 s[0:1], -1
s_mov_b64 exec, s[4:5]
s_mov_b64 vcc, 1.0
s_mov_b64 s[0:1], 0.5
s_mov_b32 s0, scc
s_not_b32 s3, s4
s_brev_b32 s3, s4
s_ctz_i32_b32 s3, s4
s_clz_i32_u32 s3, s4
s_sext_i32_i16 s1, s2
s_bcnt1_i32_b32 s1, s2
s_and_saveexec_b32 s0, vcc_lo
s_or_saveexec_b32 s0, -1
s_and_not1_saveexec_b32 s6, s7
s_getpc_b64 s[0:1]
s_setpc_b64 s[30:31]
s_swappc_b64 s[30:31], s[4:5]
s_barrier_signal -1
s_barrier_signal_isfirst -1
s_cvt_f32_u32 s1, s2
s_cvt_i32_f32 s1, s2
s_add_co_u32 s0, s1, s2
s_add_co_u32 s0, s1, 0x1000
s_add_co_i32 s0, s1, -5
s_sub_co_u32 s0, s1, 7
s_add_co_ci_u32 s0, s1, 0
s_lshl_b32 s0, s1, 3
s_lshl_b64 s[0:1], s[2:3], 4
s_lshr_b32 s0, s1, 16
s_lshr_b64 s[0:1], s[2:3], s4
s_ashr_i32 s0, s1, 31
s_ashr_i64 s[0:1], s[2:3], 2
s_lshl1_add_u32 s0, s1, s2
s_lshl4_add_u32 s0, s1, s2
s_min_u32 s0, s1, s2
s_max_i32 s0, s1, 0
s_and_b32 s0, s1, 0xffff
s_and_b64 s[0:1], exec, vcc
s_or_b32 s0, s1, s2
s_xor_b32 s0, s1, 0x80000000
s_and_not1_b32 s0, s1, s2
s_and_not1_b64 exec, exec, s[4:5]
s_or_not1_b32 s0, s1, s2
s_bfe_u32 s0, s1, 0x80008
s_bfe_i32 s0, s1, 0x100010
s_bfm_b32 s0, s1, s2
s_mul_i32 s0, s1, s2
s_mul_i32 s0, s1, 0x51eb851f
s_mul_hi_u32 s0, s1, s2
s_cselect_b32 s0, s1, s2
s_cselect_b32 s0, -1, 0
s_cselect_b64 s[0:1], s[2:3], 0
s_pack_ll_b32_b16 s0, s1, s2
s_pack_hh_b32_b16 s0, s1, s2
s_add_nc_u64 s[0:1], s[2:3], s[4:5]
s_add_nc_u64 s[0:1], s[2:3], 0x100
s_sub_nc_u64 s[0:1], s[2:3], 16
s_mul_u64 s[0:1], s[2:3], s[4:5]
s_add_f32 s0, s1, s2
s_mul_f32 s0, s1, 0.5
s_fmac_f32 s0, s1, s2
s_fmaak_f32 s0, s1, s2, 0x40490fdb
s_fmamk_f32 s0, s1, 0x3f000000, s2
s_max_num_f32 s0, s1, s2
s_cvt_pk_rtz_f16_f32 s0, s1, s2
s_add_f16 s0, s1, s2
s_movk_i32 s0, 0x1234
s_movk_i32 s0, 0xffff
s_cmovk_i32 s0, 0x7
s_addk_co_i32 s0, 0x40
s_addk_co_i32 s0, 0xfff0
s_mulk_i32 s0, 0x3
s_getreg_b32 s0, hwreg(HW_REG_MODE)
s_getreg_b32 s0, hwreg(HW_REG_HW_ID1, 0, 16)
s_setreg_b32 hwreg(HW_REG_MODE, 0, 4), s0
s_setreg_imm32_b32 hwreg(HW_REG_MODE, 0, 4), 3
s_cmp_eq_u32 s0, s1
s_cmp_eq_u32 s0, 0
s_cmp_lg_u32 s0, 0x1000
s_cmp_gt_i32 s0, -1
s_cmp_ge_u32 s0, s1
s_cmp_lt_u32 s0, 32
s_cmp_le_u32 s0, s1
s_cmp_eq_u64 s[0:1], s[2:3]
s_cmp_lg_u64 s[0:1], 0
s_bitcmp0_b32 s0, 5
s_bitcmp1_b32 s0, s1
s_bitcmp1_b64 s[0:1], 33
s_cmp_gt_f32 s0, 1.0
s_cmp_lt_f16 s0, s1
