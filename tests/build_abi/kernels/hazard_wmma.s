// Deliberately broken test kernel (never shipped): the second WMMA reads the first WMMA's result
// v[16:17] as its A operand with no VALU in between (docs/rdna4.md §Hazards rule 1).
        .amdgcn_target "amdgcn-amd-amdhsa--gfx1201"
        .amdhsa_code_object_version 5
        .text
        .globl hazard_wmma
        .p2align 8
        .type hazard_wmma,@function
hazard_wmma:
        v_mov_b32       v8, 0
        v_mov_b32       v9, 0
        v_mov_b32       v10, 0
        v_mov_b32       v11, 0
        v_wmma_i32_16x16x16_iu8 v[16:23], v[8:9], v[10:11], 0 neg_lo:[1,1,0]
        v_wmma_i32_16x16x16_iu8 v[24:31], v[16:17], v[10:11], 0 neg_lo:[1,1,0]
        s_endpgm
.Lhazard_wmma_end:
        .size hazard_wmma, .Lhazard_wmma_end-hazard_wmma

        .rodata
        .p2align 6
        .amdhsa_kernel hazard_wmma
          .amdhsa_user_sgpr_count 2
          .amdhsa_user_sgpr_kernarg_segment_ptr 1
          .amdhsa_wavefront_size32 1
          .amdhsa_next_free_vgpr 32
          .amdhsa_next_free_sgpr 8
        .end_amdhsa_kernel

        .amdgpu_metadata
---
amdhsa.version: [1, 2]
amdhsa.target: amdgcn-amd-amdhsa--gfx1201
amdhsa.kernels:
  - .name: hazard_wmma
    .symbol: hazard_wmma.kd
    .kernarg_segment_size: 0
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: 32
    .sgpr_count: 8
    .vgpr_count: 32
    .max_flat_workgroup_size: 32
...
        .end_amdgpu_metadata
