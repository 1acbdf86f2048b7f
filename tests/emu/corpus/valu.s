v_mov_b32 v0, v1
v_mov_b32 v0, s1
v_mov_b32 v0, 0
v_mov_b32 v0, 64
v_mov_b32 v0, -16
v_mov_b32 v0, 0.5
v_mov_b32 v0, -1.0
v_mov_b32 v0, 4.0
v_mov_b32 v0, 0.15915494
v_mov_b32 v0, 0x3e800000
v_mov_b32 v0, 0x7fffffff
v_mov_b32 v0, exec_lo
v_mov_b32 v0, vcc_hi
v_mov_b32 v0, m0
v_mov_b32 v255, ttmp9
v_mov_b32 v0, src_scc
v_nop
v_readfirstlane_b32 s0, v1
v_readfirstlane_b32 vcc_lo, v255
v_cvt_f32_i32 v0, v1
v_cvt_f32_u32 v0, s3
v_cvt_i32_f32 v0, v1
v_cvt_u32_f32 v0, v1
v_cvt_f32_f16 v0, v1
v_cvt_f16_f32 v0, v1
v_cvt_f64_f32 v[0:1], v2
v_cvt_f32_f64 v0, v[2:3]
v_cvt_f32_ubyte0 v0, v1
v_cvt_f32_ubyte3 v0, v1
v_cvt_f32_fp8 v0, v1
v_cvt_f32_bf8 v0, v1
v_cvt_f32_fp8_e64 v0, v1 byte_sel:1
v_cvt_f32_fp8_e64 v0, v1 byte_sel:2
v_cvt_f32_fp8_e64 v0, v1 byte_sel:3
v_cvt_pk_f32_fp8 v[0:1], v2
v_cvt_pk_f32_fp8_e64 v[0:1], v2 op_sel:[1,0]
v_cvt_pk_f32_bf8 v[0:1], v2
v_exp_f32 v0, v1
v_exp_f32_e64 v0, v1 clamp
v_exp_f32_e64 v0, v1 mul:2
v_exp_f32_e64 v0, -v1 div:2
v_exp_f32_e64 v0, |v1|
v_log_f32 v0, v1
v_rcp_f32 v0, v1
v_rsq_f32 v0, v1
v_sqrt_f32 v0, v1
v_rcp_f64 v[0:1], v[2:3]
v_exp_f16 v0, v1
v_rcp_iflag_f32 v0, v1
v_fract_f32 v0, v1
v_trunc_f32 v0, v1
v_floor_f32 v0, v1
v_rndne_f32 v0, v1
v_not_b32 v0, v1
v_bfrev_b32 v0, v1
v_ffbh_u32 v0, v1
v_permlane64_b32 v0, v1
v_add_f32 v0, v1, v2
v_add_f32 v0, s1, v2
v_add_f32 v0, 0.5, v2
v_add_f32 v0, 0x40490fdb, v2
v_add_f32 v0, -2.0, v2
v_sub_f32 v0, v1, v2
v_subrev_f32 v0, v1, v2
v_mul_f32 v0, v1, v2
v_mul_f32 v0, 0x3fb8aa3b, v2
v_fmac_f32 v0, v1, v2
v_fmac_f32 v0, 1.0, v2
v_fmaak_f32 v0, v1, v2, 0x3f000000
v_fmamk_f32 v0, v1, 0x41000000, v2
v_max_num_f32 v0, v1, v2
v_min_num_f32 v0, v1, v2
v_add_nc_u32 v0, v1, v2
v_add_nc_u32 v0, 16, v2
v_add_nc_u32 v0, 0x1000, v2
v_sub_nc_u32 v0, v1, v2
v_subrev_nc_u32 v0, s1, v2
v_and_b32 v0, 0xff, v2
v_and_b32 v0, 15, v2
v_or_b32 v0, v1, v2
v_xor_b32 v0, 0x80000000, v2
v_lshlrev_b32 v0, 2, v1
v_lshrrev_b32 v0, 16, v1
v_ashrrev_i32 v0, 31, v1
v_lshlrev_b64 v[0:1], 3, v[2:3]
v_lshrrev_b64 v[0:1], v4, v[2:3]
v_ashrrev_i64 v[0:1], 1, v[2:3]
v_mul_u32_u24 v0, v1, v2
v_mul_i32_i24 v0, 24, v2
v_max_i32 v0, v1, v2
v_min_u32 v0, v1, v2
v_cndmask_b32 v0, v1, v2, vcc_lo
v_cndmask_b32 v0, 0, v2, vcc_lo
v_cndmask_b32_e64 v0, v1, v2, s4
v_cndmask_b32_e64 v0, 0, 1, s4
v_cndmask_b32_e64 v0, v1, -v2, vcc_lo
v_cndmask_b32_e64 v0, |v1|, v2, s10
v_add_co_ci_u32 v0, vcc_lo, v1, v2, vcc_lo
v_add_co_ci_u32_e64 v0, s4, 0, v2, s4
v_add_co_ci_u32_e64 v0, null, 0, v2, vcc_lo
v_add_co_ci_u32_e64 v0, vcc_lo, s3, v2, vcc_lo
v_sub_co_ci_u32 v0, vcc_lo, v1, v2, vcc_lo
v_add_co_u32 v0, vcc_lo, v1, v2
v_add_co_u32 v0, s4, v1, 0x100
v_add_co_u32 v0, null, v1, v2
v_sub_co_u32 v0, vcc_lo, v1, v2
v_mad_u64_u32 v[0:1], null, v2, v3, v[4:5]
v_mad_u64_u32 v[0:1], s4, v2, s3, v[4:5]
v_mad_i64_i32 v[0:1], null, v2, v3, 0
v_mad_u64_u32 v[0:1], null, s2, 0x40, v[4:5]
v_div_scale_f32 v0, vcc_lo, v1, v1, v2
v_div_scale_f32 v0, s4, v2, v1, v2
v_div_fmas_f32 v0, v1, v2, v3
v_div_fixup_f32 v0, v1, v2, v3
v_add_f16 v0, v1, v2
v_mul_f16 v0, 0x3c00, v2
v_mul_f16 v0, 0x1234, v2
v_max_num_f16 v0, v1, -v2
v_fma_f16 v0, v1, v2, v3 op_sel:[0,0,1,0]
v_fma_f32 v0, v1, v2, v3
v_fma_f32 v0, -v1, v2, -v3
v_fma_f32 v0, |v1|, -|v2|, v3 clamp
v_fma_f32 v0, v1, v2, v3 mul:4
v_fma_f32 v0, v1, 0x3fb8aa3b, v3
v_fma_f32 v0, v1, s2, 0.5
v_fma_f64 v[0:1], v[2:3], v[4:5], v[6:7]
v_fma_f64 v[0:1], v[2:3], 0x40080000, v[6:7]
v_fma_f64 v[0:1], v[2:3], 0.5, v[6:7]
v_add_f64 v[0:1], v[2:3], v[4:5]
v_add_f64 v[0:1], -v[2:3], 1.0
v_add_f64 v[0:1], v[2:3], 0x3ff80000
v_mul_f64 v[0:1], s[2:3], v[4:5]
v_max_num_f64 v[0:1], v[2:3], 0.15915494309189532
v_max3_num_f32 v0, v1, v2, v3
v_max3_num_f32 v0, v1, v2, 0xff800000
v_min3_num_f32 v0, v1, v2, v3
v_med3_num_f32 v0, v1, 0xc3e00000, v3
v_med3_num_f32 v0, v1, -1.0, 1.0
v_med3_i32 v0, v1, v2, v3
v_bfe_u32 v0, v1, 8, 8
v_bfe_i32 v0, v1, 16, 8
v_bfe_u32 v0, v1, v2, 1
v_bfi_b32 v0, v1, v2, v3
v_alignbit_b32 v0, v1, v2, 8
v_add3_u32 v0, v1, v2, v3
v_add3_u32 v0, v1, v2, 0x100
v_lshl_add_u32 v0, v1, 2, v3
v_lshl_or_b32 v0, v1, 16, v3
v_and_or_b32 v0, v1, 0xffff, v3
v_or3_b32 v0, v1, v2, v3
v_xor3_b32 v0, v1, v2, v3
v_add_lshl_u32 v0, v1, v2, 2
v_perm_b32 v0, v1, v2, 0x5040100
v_mad_u32_u24 v0, v1, v2, v3
v_mul_lo_u32 v0, v1, v2
v_mul_hi_u32 v0, v1, v2
v_mul_hi_i32 v0, v1, 0x55555556
v_lshlrev_b64 v[0:1], 2, v[2:3]
v_pack_b32_f16 v0, v1, v2
v_cvt_pk_rtz_f16_f32 v0, v1, v2
v_cvt_pk_fp8_f32 v0, v1, v2
v_cvt_pk_fp8_f32 v0, v1, v2 op_sel:[0,0,1]
v_cvt_pk_bf8_f32 v0, v1, v2 op_sel:[0,0,1]
v_cvt_pk_fp8_f32 v0, -v1, |v2|
v_cvt_sr_fp8_f32 v0, v1, v2
v_cvt_sr_fp8_f32 v0, v1, v2 byte_sel:3
v_cvt_pk_u16_u32 v0, v1, v2
v_cvt_pk_i16_i32 v0, v1, v2
v_cvt_pk_norm_i16_f32 v0, v1, v2
v_readlane_b32 s0, v1, 5
v_readlane_b32 s0, v1, s2
v_readlane_b32 vcc_lo, v1, m0
v_writelane_b32 v0, s1, 31
v_writelane_b32 v0, s1, s2
v_permlane16_b32 v0, v1, s2, s3
v_permlanex16_b32 v0, v1, s2, s3
v_permlanex16_b32 v0, v1, 0x76543210, s3
v_permlane16_b32 v0, v1, s2, s3 op_sel:[1,0]
v_permlane16_b32 v0, v1, s2, s3 op_sel:[0,1]
v_permlane16_var_b32 v0, v1, v2
v_ldexp_f32 v0, v1, v2
v_max_i16 v0, v1, v2
v_add_nc_u16 v0, v1, 5
v_mul_lo_u16 v0, v1, v2
v_xad_u32 v0, v1, v2, v3
v_dot2_f32_f16 v0, v1, v2, v3
v_dot2_f32_bf16 v0, v1, v2, v3
v_dot2_f16_f16 v0, v1, v2, v3
v_sad_u32 v0, v1, v2, v3
v_cmp_gt_f32 vcc_lo, v1, v2
v_cmp_gt_f32 vcc_lo, 0, v2
v_cmp_lt_f32 vcc_lo, 0x3f000000, v2
v_cmp_o_f32 vcc_lo, v1, v1
v_cmp_u_f32 vcc_lo, v1, v1
v_cmp_neq_f32 vcc_lo, v1, v2
v_cmp_nlt_f32 vcc_lo, v1, v2
v_cmp_eq_u32 vcc_lo, v1, v2
v_cmp_gt_u32 vcc_lo, 16, v2
v_cmp_gt_u32 vcc_lo, s5, v2
v_cmp_ne_u32 vcc_lo, 0, v2
v_cmp_le_i32 vcc_lo, -1, v2
v_cmp_eq_u64 vcc_lo, v[0:1], v[2:3]
v_cmp_gt_f64 vcc_lo, 0, v[2:3]
v_cmp_class_f32 vcc_lo, v1, v2
v_cmp_eq_f16 vcc_lo, v1, v2
v_cmp_gt_f32_e64 s0, v1, v2
v_cmp_gt_f32_e64 s0, |v1|, -v2
v_cmp_eq_u32_e64 s4, v1, s2
v_cmp_eq_u32_e64 vcc_lo, 0, v1
v_cmp_lt_u32_e64 s3, v1, 0x1000
v_cmp_ne_u64_e64 s3, v[0:1], 0
v_cmp_class_f32_e64 s3, v1, 0x60
v_cmpx_gt_u32 v1, v2
v_cmpx_gt_u32_e64 v1, v2
v_cmpx_gt_u32_e64 s1, v2
v_cmpx_eq_f32 0, v1
v_cmpx_ne_u32_e64 0, v1
v_cmpx_le_i32_e64 v1, 0x200
