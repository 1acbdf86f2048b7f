v_pk_fma_f16 v0, v1, v2, v3
v_pk_fma_f16 v0, v1, v2, v3 op_sel:[1,0,1] op_sel_hi:[0,1,1]
v_pk_fma_f16 v0, v1, v2, v3 neg_lo:[1,0,0] neg_hi:[0,1,0]
v_pk_fma_f16 v0, v1, v2, v3 clamp
v_pk_add_f16 v0, v1, v2
v_pk_add_f16 v0, v1, 1.0
v_pk_add_f16 v0, v1, 0x3c00
v_pk_mul_f16 v0, v1, v2 op_sel_hi:[0,0]
v_pk_max_num_f16 v0, v1, v2
v_pk_add_u16 v0, v1, v2
v_pk_add_u16 v0, v1, 4
v_pk_lshlrev_b16 v0, 1, v2
v_pk_mad_u16 v0, v1, v2, v3
v_pk_mul_lo_u16 v0, v1, v2
v_fma_mix_f32 v0, v1, v2, v3
v_fma_mix_f32 v0, v1, v2, v3 op_sel_hi:[1,1,1]
v_fma_mixlo_f16 v0, v1, v2, v3 op_sel:[1,0,0]
v_dot2_f32_f16 v0, v1, v2, v3
v_dot2_f32_bf16 v0, v1, v2, v3
v_dot4_i32_iu8 v0, v1, v2, v3
v_dot4_i32_iu8 v0, v1, v2, v3 neg_lo:[1,1,0]
v_dot4_u32_u8 v0, v1, v2, v3
v_dot4_u32_u8 v0, v1, v2, 0
v_dot8_i32_iu4 v0, v1, v2, v3 neg_lo:[1,0,0]
v_dot8_u32_u4 v0, v1, v2, v3
v_dot4_f32_fp8_fp8 v0, v1, v2, v3
v_dot4_f32_bf8_bf8 v0, v1, v2, v3
v_dot4_f32_fp8_bf8 v0, v1, v2, v3
v_dot4_f32_bf8_fp8 v0, v1, v2, v3
v_dot4_i32_iu8 v0, v1, v2, 0x100
v_wmma_f32_16x16x16_f16 v[0:7], v[8:11], v[12:15], v[0:7]
v_wmma_f32_16x16x16_f16 v[0:7], v[8:11], v[12:15], v[16:23] neg_lo:[1,0,0] neg_hi:[1,0,0]
v_wmma_f32_16x16x16_f16 v[0:7], v[8:11], v[12:15], 0
v_wmma_f32_16x16x16_f16 v[0:7], v[8:11], v[12:15], 1.0
v_wmma_f32_16x16x16_f16 v[0:7], v[8:11], v[12:15], v[0:7] neg_lo:[0,0,1] neg_hi:[0,0,1]
v_wmma_f32_16x16x16_bf16 v[0:7], v[8:11], v[12:15], v[0:7]
v_wmma_f16_16x16x16_f16 v[0:3], v[8:11], v[12:15], v[0:3]
v_wmma_bf16_16x16x16_bf16 v[0:3], v[8:11], v[12:15], v[0:3]
v_wmma_i32_16x16x16_iu8 v[0:7], v[8:9], v[10:11], v[0:7]
v_wmma_i32_16x16x16_iu8 v[0:7], v[8:9], v[10:11], v[0:7] neg_lo:[1,1,0]
v_wmma_i32_16x16x16_iu8 v[0:7], v[8:9], v[10:11], v[0:7] neg_lo:[1,0,0] clamp
v_wmma_i32_16x16x16_iu8 v[16:23], v[8:9], v[10:11], 0 neg_lo:[0,1,0]
v_wmma_i32_16x16x16_iu4 v[0:7], v8, v9, v[0:7]
v_wmma_i32_16x16x32_iu4 v[0:7], v[8:9], v[10:11], v[0:7] neg_lo:[1,1,0]
v_wmma_f32_16x16x16_fp8_fp8 v[0:7], v[8:9], v[10:11], v[0:7]
v_wmma_f32_16x16x16_fp8_bf8 v[0:7], v[8:9], v[10:11], v[0:7]
v_wmma_f32_16x16x16_bf8_fp8 v[0:7], v[8:9], v[10:11], v[0:7]
v_wmma_f32_16x16x16_bf8_bf8 v[0:7], v[8:9], v[10:11], v[0:7]
v_wmma_f32_16x16x16_fp8_fp8 v[24:31], v[8:9], v[10:11], 0
v_swmmac_f32_16x16x32_f16 v[0:7], v[8:11], v[12:19], v20
v_swmmac_i32_16x16x32_iu8 v[0:7], v[8:9], v[10:13], v14 index_key:1
v_swmmac_f32_16x16x32_fp8_fp8 v[0:7], v[8:9], v[10:13], v14
