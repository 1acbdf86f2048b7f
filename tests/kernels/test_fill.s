        .amdgcn_target "amdgcn-amd-amdhsa--gfx1201"
        .amdhsa_code_object_version 5
        .text
        .globl  fill
        .p2align 8
        .type   fill,@function
fill:
        s_load_b64      s[2:3], s[0:1], 0x0        // out
        s_load_b32      s4, s[0:1], 0x8            // value
        v_lshlrev_b32   v1, 2, v0                  // byte offset = 4 * lane
        s_wait_kmcnt    0x0
        v_mov_b32       v2, s4
        global_store_b32 v1, v2, s[2:3]
        s_endpgm
.Lfill_end:
        .size   fill, .Lfill_end-fill

        .rodata
        .p2align 6
        .amdhsa_kernel fill
          .amdhsa_group_segment_fixed_size 0
          .amdhsa_private_segment_fixed_size 0
          .amdhsa_kernarg_size 12
          .amdhsa_user_sgpr_count 2
          .amdhsa_user_sgpr_kernarg_segment_ptr 1
          .amdhsa_wavefront_size32 1
          .amdhsa_system_sgpr_workgroup_id_x 1
          .amdhsa_system_sgpr_workgroup_id_y 1
          .amdhsa_system_sgpr_workgroup_id_z 1
          .amdhsa_system_vgpr_workitem_id 0
          .amdhsa_next_free_vgpr 3
          .amdhsa_next_free_sgpr 8
          .amdhsa_reserve_vcc 0
          .amdhsa_float_denorm_mode_32 3
          .amdhsa_float_denorm_mode_16_64 3
        .end_amdhsa_kernel
        .amdgpu_metadata
---
amdhsa.version:
  - 1
  - 2
amdhsa.target: amdgcn-amd-amdhsa--gfx1201
amdhsa.kernels:
  - .name:            fill
    .symbol:          fill.kd
    .kernarg_segment_size: 12
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size:  32
    .sgpr_count:      8
    .vgpr_count:      3
    .max_flat_workgroup_size: 32
    .args:
      - { .name: out, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: value, .offset: 8, .size: 4, .value_kind: by_value }
...
        .end_amdgpu_metadata
