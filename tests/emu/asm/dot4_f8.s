// v_dot4_f32_fp8_fp8 / v_dot4_f32_bf8_fp8, one wave; kernarg: out ptr, a u32, b u32, c f32. Lane l computes with
// a + l (its own bytes): out[l] = dot4_fp8_fp8(a + l, b, c), out[32 + l] = dot4_bf8_fp8(a + l, b, c).
        .amdgcn_target "amdgcn-amd-amdhsa--gfx1201"
        .amdhsa_code_object_version 5
        .text
        .globl  dot4_f8
        .p2align 8
        .type   dot4_f8,@function
dot4_f8:
        s_load_b128     s[4:7], s[0:1], 0x0      // s[4:5] = out, s6 = a, s7 = b
        s_load_b32      s8, s[0:1], 0x10         // c
        s_wait_kmcnt    0
        v_add_nc_u32    v1, s6, v0
        v_mov_b32       v2, s8
        v_dot4_f32_fp8_fp8 v3, v1, s7, v2
        v_dot4_f32_bf8_fp8 v4, v1, s7, v2
        v_lshlrev_b32   v5, 2, v0
        global_store_b32 v5, v3, s[4:5]
        global_store_b32 v5, v4, s[4:5] offset:128
        s_endpgm
        .size   dot4_f8, .-dot4_f8

        .rodata
        .p2align 6
        .amdhsa_kernel dot4_f8
          .amdhsa_kernarg_size 20
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
  - { .name: dot4_f8, .symbol: dot4_f8.kd, .kernarg_segment_size: 20, .kernarg_segment_align: 8, .group_segment_fixed_size: 0, .private_segment_fixed_size: 0, .wavefront_size: 32, .sgpr_count: 16, .vgpr_count: 8, .max_flat_workgroup_size: 32, .args: [ { .offset: 0, .size: 8, .value_kind: global_buffer }, { .offset: 8, .size: 4, .value_kind: by_value }, { .offset: 12, .size: 4, .value_kind: by_value }, { .offset: 16, .size: 4, .value_kind: by_value } ] }
...
        .end_amdgpu_metadata
