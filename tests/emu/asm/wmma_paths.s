// WMMA under partial EXEC and with waves at different PCs (the executor's masked and wave-subset write paths).
// One wave per workgroup, any number of workgroups; every wave reads the same A (row-major [m][k] int8) and
// Bt (row-major [n][k] int8) and writes 2 KiB at out + 2048 * workgroup id:
//   out[0:1024)    v[16:23]: even workgroups  A(signed)   * B(signed) + 7, all lanes
//                            odd workgroups   A(unsigned) * B(signed) + 7 with EXEC = lanes 0..15 (rows 0..7);
//                            rows 8..15 keep 7
//   out[1024:2048) v[24:31]: every wave, EXEC = lanes 16..31: rows 8..15 = A * B + 5 (signed), rows 0..7 keep 5
// Layouts as tests/build_abi/kernels/wmma_iu8_min.s (docs/rdna4.md §WMMA): D[m][n] in lane 16*(m//8)+n, register m%8.
        .amdgcn_target "amdgcn-amd-amdhsa--gfx1201"
        .amdhsa_code_object_version 5

        .text
        .globl  wmma_paths
        .p2align 8
        .type   wmma_paths,@function
wmma_paths:
        s_load_b128     s[4:7], s[0:1], 0x0      // s[4:5]=A, s[6:7]=Bt
        s_load_b64      s[8:9], s[0:1], 0x10     // s[8:9]=out
        v_and_b32       v1, 0x3ff, v0
        v_and_b32       v2, 15, v1               // r
        v_lshrrev_b32   v3, 4, v1                // h
        v_lshlrev_b32   v4, 4, v2
        v_lshl_add_u32  v4, v3, 3, v4            // 16r + 8h
        v_lshlrev_b32   v5, 7, v3
        v_add_nc_u32    v5, v5, v2
        v_lshlrev_b32   v5, 2, v5                // byte offset of out[8h][r]
        v_mov_b32       v16, 7
        v_mov_b32       v17, 7
        v_mov_b32       v18, 7
        v_mov_b32       v19, 7
        v_mov_b32       v20, 7
        v_mov_b32       v21, 7
        v_mov_b32       v22, 7
        v_mov_b32       v23, 7
        v_mov_b32       v24, 5
        v_mov_b32       v25, 5
        v_mov_b32       v26, 5
        v_mov_b32       v27, 5
        v_mov_b32       v28, 5
        v_mov_b32       v29, 5
        v_mov_b32       v30, 5
        v_mov_b32       v31, 5
        s_wait_kmcnt    0x0
        global_load_b64 v[8:9], v4, s[4:5]
        global_load_b64 v[10:11], v4, s[6:7]
        s_lshl_b32      s2, ttmp9, 11
        s_add_co_u32    s8, s8, s2
        s_add_co_ci_u32 s9, s9, 0
        s_wait_loadcnt  0x0
        s_mov_b32       exec_lo, 0xffff0000      // every wave at this PC, upper lanes only
        v_wmma_i32_16x16x16_iu8 v[24:31], v[8:9], v[10:11], v[24:31] neg_lo:[1,1,0]
        s_mov_b32       exec_lo, -1
        v_nop
        s_and_b32       s3, ttmp9, 1
        s_cmp_eq_u32    s3, 0
        s_cbranch_scc1  .Leven
        s_mov_b32       exec_lo, 0xffff          // odd waves only, lower lanes only
        v_wmma_i32_16x16x16_iu8 v[16:23], v[8:9], v[10:11], v[16:23] neg_lo:[0,1,0]
        s_mov_b32       exec_lo, -1
        s_branch        .Lstore
.Leven:                                          // even waves only, all lanes
        v_wmma_i32_16x16x16_iu8 v[16:23], v[8:9], v[10:11], v[16:23] neg_lo:[1,1,0]
.Lstore:
        global_store_b32 v5, v16, s[8:9]
        global_store_b32 v5, v17, s[8:9] offset:64
        global_store_b32 v5, v18, s[8:9] offset:128
        global_store_b32 v5, v19, s[8:9] offset:192
        global_store_b32 v5, v20, s[8:9] offset:256
        global_store_b32 v5, v21, s[8:9] offset:320
        global_store_b32 v5, v22, s[8:9] offset:384
        global_store_b32 v5, v23, s[8:9] offset:448
        global_store_b32 v5, v24, s[8:9] offset:1024
        global_store_b32 v5, v25, s[8:9] offset:1088
        global_store_b32 v5, v26, s[8:9] offset:1152
        global_store_b32 v5, v27, s[8:9] offset:1216
        global_store_b32 v5, v28, s[8:9] offset:1280
        global_store_b32 v5, v29, s[8:9] offset:1344
        global_store_b32 v5, v30, s[8:9] offset:1408
        global_store_b32 v5, v31, s[8:9] offset:1472
        s_endpgm
.Lwmma_paths_end:
        .size   wmma_paths, .Lwmma_paths_end-wmma_paths

        .rodata
        .p2align 6
        .amdhsa_kernel wmma_paths
          .amdhsa_group_segment_fixed_size 0
          .amdhsa_private_segment_fixed_size 0
          .amdhsa_kernarg_size 24
          .amdhsa_user_sgpr_count 2
          .amdhsa_user_sgpr_kernarg_segment_ptr 1
          .amdhsa_wavefront_size32 1
          .amdhsa_system_sgpr_workgroup_id_x 1
          .amdhsa_system_vgpr_workitem_id 0
          .amdhsa_next_free_vgpr 32
          .amdhsa_next_free_sgpr 16
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
  - .name:            wmma_paths
    .symbol:          wmma_paths.kd
    .kernarg_segment_size: 24
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size:  32
    .sgpr_count:      16
    .vgpr_count:      32
    .max_flat_workgroup_size: 32
    .uniform_work_group_size: 1
    .args:
      - { .name: A,   .offset: 0,  .size: 8, .value_kind: global_buffer, .address_space: global, .actual_access: read_only }
      - { .name: Bt,  .offset: 8,  .size: 8, .value_kind: global_buffer, .address_space: global, .actual_access: read_only }
      - { .name: out, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global, .actual_access: write_only }
...
        .end_amdgpu_metadata
