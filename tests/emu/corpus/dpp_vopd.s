v_mov_b32_dpp v0, v1 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf
v_mov_b32_dpp v0, v1 quad_perm:[0,1,2,3] row_mask:0xf bank_mask:0xf bound_ctrl:1
v_mov_b32_dpp v0, v1 row_shr:1 row_mask:0xf bank_mask:0xf
v_mov_b32_dpp v0, v1 row_shl:15 row_mask:0xa bank_mask:0x3
v_mov_b32_dpp v0, v1 row_ror:4 row_mask:0xf bank_mask:0xf
v_mov_b32_dpp v0, v1 row_mirror row_mask:0xf bank_mask:0xf
v_mov_b32_dpp v0, v1 row_half_mirror row_mask:0xf bank_mask:0xf
v_mov_b32_dpp v0, v1 row_share:3 row_mask:0xf bank_mask:0xf
v_mov_b32_dpp v0, v1 row_xmask:5 row_mask:0xf bank_mask:0xf fi:1
v_mov_b32_dpp v0, v1 row_shr:2 row_mask:0xf bank_mask:0xf bound_ctrl:1 fi:1
v_add_f32_dpp v0, v1, v2 quad_perm:[2,3,0,1] row_mask:0xf bank_mask:0xf
v_add_f32_dpp v0, -v1, |v2| row_shr:1 row_mask:0xf bank_mask:0xf
v_max_num_f32_dpp v0, v1, v2 row_share:0 row_mask:0xf bank_mask:0xf
v_add_nc_u32_dpp v0, v1, v2 row_shr:4 row_mask:0xf bank_mask:0xe bound_ctrl:1
v_cndmask_b32_dpp v0, v1, v2, vcc_lo quad_perm:[0,0,0,0] row_mask:0xf bank_mask:0xf
v_cmp_gt_f32_dpp vcc_lo, v1, v2 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf
v_cmpx_gt_u32_dpp v1, v2 row_shr:1 row_mask:0xf bank_mask:0xf
v_exp_f32_dpp v0, v1 row_mirror row_mask:0xf bank_mask:0xf
v_mov_b32_dpp v0, v1 dpp8:[7,6,5,4,3,2,1,0]
v_mov_b32_dpp v0, v1 dpp8:[1,0,3,2,5,4,7,6] fi:1
v_add_f32_dpp v0, v1, v2 dpp8:[0,1,2,3,4,5,6,7]
v_add_f32_e64_dpp v0, v1, v2 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf
v_add_f32_e64_dpp v0, -v1, v2 clamp quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf
v_add_f32_e64_dpp v0, v1, s2 row_shr:1 row_mask:0xf bank_mask:0xf
v_fma_f32_e64_dpp v0, v1, v2, v3 row_mirror row_mask:0xf bank_mask:0xf
v_max3_num_f32_e64_dpp v0, v1, v2, v3 row_share:1 row_mask:0xf bank_mask:0xf fi:1
v_add_f32_e64_dpp v0, v1, v2 dpp8:[7,6,5,4,3,2,1,0]
v_fma_f32_e64_dpp v0, v1, v2, v3 dpp8:[7,6,5,4,3,2,1,0] fi:1
v_cmp_gt_f32_e64_dpp s4, v1, v2 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf
v_cndmask_b32_e64_dpp v0, v1, v2, s4 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf
v_mov_b32_e64_dpp v0, v1 row_shr:3 row_mask:0xf bank_mask:0xf
v_exp_f32_e64_dpp v0, v1 mul:2 row_shr:3 row_mask:0xf bank_mask:0xf
v_dual_fmac_f32 v0, v1, v2 :: v_dual_mov_b32 v1, v3
v_dual_mul_f32 v0, v1, v2 :: v_dual_mul_f32 v1, v3, v4
v_dual_add_f32 v0, v1, v2 :: v_dual_sub_f32 v3, v6, v7
v_dual_mov_b32 v0, 0 :: v_dual_mov_b32 v1, 0
v_dual_mov_b32 v0, 0x3f000000 :: v_dual_mov_b32 v1, v2
v_dual_mov_b32 v0, s1 :: v_dual_mov_b32 v1, s1
v_dual_fmaak_f32 v0, v1, v2, 0x3f800000 :: v_dual_mov_b32 v1, v3
v_dual_fmamk_f32 v0, v1, 0x40000000, v2 :: v_dual_add_f32 v1, v3, v4
v_dual_cndmask_b32 v0, v1, v2 :: v_dual_cndmask_b32 v1, v3, v4
v_dual_max_num_f32 v0, v1, v2 :: v_dual_min_num_f32 v1, v3, v4
v_dual_sub_f32 v0, v1, v2 :: v_dual_add_nc_u32 v1, v3, v4
v_dual_mul_f32 v0, 0.5, v2 :: v_dual_lshlrev_b32 v1, 2, v4
v_dual_mov_b32 v0, v5 :: v_dual_and_b32 v1, v3, v4
v_dual_subrev_f32 v0, v1, v2 :: v_dual_and_b32 v1, 15, v4
v_dual_mul_dx9_zero_f32 v0, v1, v2 :: v_dual_mov_b32 v1, -1
v_dual_dot2acc_f32_f16 v0, v1, v2 :: v_dual_mov_b32 v1, v3
v_dual_mul_f32 v10, v21, v22 :: v_dual_mul_f32 v11, v23, v20
v_dual_fmac_f32 v254, v1, v2 :: v_dual_fmac_f32 v255, v3, v4
