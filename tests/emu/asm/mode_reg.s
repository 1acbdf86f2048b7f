// The MODE register (docs/rdna4.md §Entry, §FP8): out[lane] (one wave, kernarg: out ptr, x f32) gets
//   dword 0: v_cvt_pk_fp8_f32 {x, -x} with FP16_OVFL as the descriptor sets it (0)
//   dword 1: the same after s_setreg_imm32_b32 hwreg(HW_REG_WAVE_MODE, 23, 1), 1 (saturating)
//   dword 2: s_getreg_b32 hwreg(HW_REG_WAVE_MODE, 0, 24) after that write
// SETREG_DENORM=1 instead rewrites the f32 denorm field, which the emulator refuses.
        .amdgcn_target "amdgcn-amd-amdhsa--gfx1201"
        .amdhsa_code_object_version 5
        .text
        .globl  mode_reg
        .p2align 8
        .type   mode_reg,@function
mode_reg:
        s_load_b96      s[4:6], s[0:1], 0x0      // s[4:5] = out, s6 = x
        v_and_b32       v1, 0x3ff, v0
        v_mul_u32_u24   v1, 12, v1               // byte offset of out[lane]
        s_wait_kmcnt    0
        v_mov_b32       v2, s6
        v_xor_b32       v3, 0x80000000, v2       // -x
        v_mov_b32       v4, 0
        v_cvt_pk_fp8_f32 v4, v2, v3
        s_setreg_imm32_b32 hwreg(HW_REG_WAVE_MODE, 23, 1), 1
.if SETREG_DENORM
        s_setreg_imm32_b32 hwreg(HW_REG_WAVE_MODE, 4, 2), 0
.endif
        v_mov_b32       v5, 0
        v_cvt_pk_fp8_f32 v5, v2, v3
        s_getreg_b32    s7, hwreg(HW_REG_WAVE_MODE, 0, 24)
        s_wait_alu      depctr_sa_sdst(0)        // s7 is SALU-written and its pair was VALU-read (s6): docs/rdna4.md §Hazards 3
        v_mov_b32       v6, s7
        global_store_b96 v1, v[4:6], s[4:5]
        s_endpgm

        .rodata
        .p2align 6
        .amdhsa_kernel mode_reg
          .amdhsa_kernarg_size 12
          .amdhsa_user_sgpr_count 2
          .amdhsa_user_sgpr_kernarg_segment_ptr 1
          .amdhsa_wavefront_size32 1
          .amdhsa_next_free_vgpr 8
          .amdhsa_next_free_sgpr 16
          .amdhsa_float_denorm_mode_32 3
          .amdhsa_float_denorm_mode_16_64 3
        .end_amdhsa_kernel

        .amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.kernels:
  - { .name: mode_reg, .symbol: mode_reg.kd, .kernarg_segment_size: 12, .kernarg_segment_align: 8, .group_segment_fixed_size: 0, .private_segment_fixed_size: 0, .wavefront_size: 32, .sgpr_count: 16, .vgpr_count: 8, .max_flat_workgroup_size: 32, .args: [ { .offset: 0, .size: 8, .value_kind: global_buffer }, { .offset: 8, .size: 4, .value_kind: by_value } ] }
...
        .end_amdgpu_metadata
