// MODE.FP16_OVFL on f16 results (docs/rdna4.md §FP16_OVFL), one wave; kernarg: out ptr, x f32. Every lane computes
// the same values; lane 0's land at out[0..31] (bit clear) and out[32..63] (after s_setreg_imm32_b32 sets it):
//   +0 v_cvt_f16_f32 x   +1 v_cvt_f16_f32 -x   +2 v_cvt_f16_f32 +inf   +3 v_cvt_f16_f32 NaN (0x7fc00000)
//   +4 v_add_f16 max, max   +5 v_mul_f16 -max, 2   +6 v_fma_f16 max, 2, -1   +7 v_add_f16 +inf, -max
//   +8 v_cvt_f16_u16 65535   +9 v_cvt_f32_f16 of the signalling NaN 0x7c01   +10 v_add_f16 1, 2 (no overflow)
//   scalar: +11 s_add_f16 max, max   +12 s_cvt_f16_f32 x   +13 v_s_rcp_f16 0 (division by zero)   +14 v_s_exp_f16 16
//   (2^16)   +15 s_mul_f16 +inf, 2 (an infinite source)
//   +16 v_pk_add_f16 {max, 1} + {max, 2}: low overflows, high 3   +17 v_pk_fma_f16 {max, inf} * 2 + {0, 0}
//   +18 v_fma_mixlo_f16 max(f16) * 2 + 0 (f32 sum beyond the f16 range)   +19 v_fma_mixhi_f16 the same into [31:16]
// REFUSE=1 adds a v_wmma_f16_16x16x16_f16 after the write, whose saturation is not emulated (the run stops).
        .amdgcn_target "amdgcn-amd-amdhsa--gfx1201"
        .amdhsa_code_object_version 5
        .text
        .globl  fp16_ovfl
        .p2align 8
        .type   fp16_ovfl,@function
fp16_ovfl:
        s_load_b96      s[4:6], s[0:1], 0x0      // s[4:5] = out, s6 = x
        v_mov_b32       v0, 0
        v_mov_b32       v20, 0x7bff              // f16 max
        v_mov_b32       v21, 0xfbff              // -max
        v_mov_b32       v22, 0x7c00              // +inf (f16)
        v_mov_b32       v23, 0x7c01              // signalling NaN (f16)
        v_mov_b32       v24, 0x7f800000          // +inf (f32)
        v_mov_b32       v25, 0x7fc00000          // NaN (f32)
        v_mov_b32       v26, 0xffff              // 65535
        s_mov_b32       s8, 0
.Lpass:
        s_wait_kmcnt    0
        v_mov_b32       v1, s6
        v_xor_b32       v2, 0x80000000, v1
        v_mov_b32       v3, 0
        v_cvt_f16_f32   v3, v1
        v_mov_b32       v4, 0
        v_cvt_f16_f32   v4, v2
        v_mov_b32       v5, 0
        v_cvt_f16_f32   v5, v24
        v_mov_b32       v6, 0
        v_cvt_f16_f32   v6, v25
        v_mov_b32       v7, 0
        v_add_f16       v7, v20, v20
        v_mov_b32       v8, 0
        v_mul_f16       v8, v21, 2.0
        v_mov_b32       v9, 0
        v_fma_f16       v9, v20, 2.0, -1.0
        v_mov_b32       v10, 0
        v_add_f16       v10, v22, v21
        v_mov_b32       v11, 0
        v_cvt_f16_u16   v11, v26
        v_cvt_f32_f16   v12, v23
        v_mov_b32       v13, 0
        v_add_f16       v13, 1.0, 2.0
        s_add_f16       s10, 0x7bff, 0x7bff
        s_wait_alu      depctr_sa_sdst(0)        // s10 was read by a VALU before: docs/rdna4.md §Hazards 3
        v_mov_b32       v14, s10
        s_cvt_f16_f32   s10, s6
        s_wait_alu      depctr_sa_sdst(0)        // s10 was read by a VALU before: docs/rdna4.md §Hazards 3
        v_mov_b32       v15, s10
        v_s_rcp_f16     s10, 0
        s_wait_alu      depctr_va_sdst(0)        // s10 was read by a VALU before: docs/rdna4.md §Hazards 3
        v_mov_b32       v16, s10
        v_s_exp_f16     s10, 0x4c00
        s_wait_alu      depctr_va_sdst(0)        // s10 was read by a VALU before: docs/rdna4.md §Hazards 3
        v_mov_b32       v17, s10
        s_mul_f16       s10, 0x7c00, 2.0
        s_wait_alu      depctr_sa_sdst(0)        // s10 was read by a VALU before: docs/rdna4.md §Hazards 3
        v_mov_b32       v18, s10
        v_mov_b32       v27, 0x3c007bff          // {max, 1}
        v_mov_b32       v28, 0x40007bff          // {max, 2}
        v_pk_add_f16    v29, v27, v28
        v_mov_b32       v27, 0x7c007bff          // {max, inf}
        v_mov_b32       v33, 0x40004000          // {2, 2}
        v_mov_b32       v34, 0
        v_pk_fma_f16    v30, v27, v33, v34
        v_mov_b32       v31, 0
        v_fma_mixlo_f16 v31, v20, 2.0, 0 op_sel_hi:[1,0,0]
        v_mov_b32       v19, 0
        v_fma_mixhi_f16 v19, v20, 2.0, 0 op_sel_hi:[1,0,0]
        v_mov_b32       v0, s8
        global_store_b128 v0, v[29:32], s[4:5] offset:64
        global_store_b32 v0, v19, s[4:5] offset:76
        global_store_b128 v0, v[3:6], s[4:5]
        global_store_b128 v0, v[7:10], s[4:5] offset:16
        global_store_b128 v0, v[11:14], s[4:5] offset:32
        global_store_b128 v0, v[15:18], s[4:5] offset:48
        s_cmp_eq_u32    s8, 128
        s_cbranch_scc1  .Ldone
        s_mov_b32       s8, 128
        s_setreg_imm32_b32 hwreg(HW_REG_WAVE_MODE, 23, 1), 1
.if REFUSE
        v_wmma_f16_16x16x16_f16 v[8:11], v[0:3], v[0:3], v[8:11]
.endif
        s_branch        .Lpass
.Ldone:
        s_endpgm

        .rodata
        .p2align 6
        .amdhsa_kernel fp16_ovfl
          .amdhsa_kernarg_size 12
          .amdhsa_user_sgpr_count 2
          .amdhsa_user_sgpr_kernarg_segment_ptr 1
          .amdhsa_wavefront_size32 1
          .amdhsa_next_free_vgpr 40
          .amdhsa_next_free_sgpr 16
          .amdhsa_float_denorm_mode_32 3
          .amdhsa_float_denorm_mode_16_64 3
        .end_amdhsa_kernel

        .amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.kernels:
  - { .name: fp16_ovfl, .symbol: fp16_ovfl.kd, .kernarg_segment_size: 12, .kernarg_segment_align: 8, .group_segment_fixed_size: 0, .private_segment_fixed_size: 0, .wavefront_size: 32, .sgpr_count: 16, .vgpr_count: 40, .max_flat_workgroup_size: 32, .args: [ { .offset: 0, .size: 8, .value_kind: global_buffer }, { .offset: 8, .size: 4, .value_kind: by_value } ] }
...
        .end_amdgpu_metadata
