// Hand-written gfx1201 kernels for tests/emu/test_sanitizer.py: one kernel per sanitizer case.
// Assembled twice: `-Wa,-defsym,BROKEN=0` gives the clean kernel, BROKEN=1 the deliberately broken one.
// Kernarg (every kernel): +0 u32* buf0, +8 u32* buf1. Lane id = v0 (block x only).
        .amdgcn_target "amdgcn-amd-amdhsa--gfx1201"
        .amdhsa_code_object_version 5
        .text

.macro KSTART name
        .globl \name
        .p2align 8
        .type \name,@function
\name:
        s_load_b128 s[4:7], s[0:1], 0x0          // s[4:5] = buf0, s[6:7] = buf1
        v_lshlrev_b32 v1, 2, v0                  // 4 * lane
        s_wait_kmcnt 0
.endm

// missing s_wait_loadcnt: v2 is read before its global load completed
KSTART wait_load
        global_load_b32 v2, v1, s[4:5]
.if !BROKEN
        s_wait_loadcnt 0
.endif
        v_add_nc_u32 v3, 1, v2
        global_store_b32 v1, v3, s[6:7]
        s_endpgm

// WMMA -> WMMA: the second WMMA reads as A the D of the first with no VALU between (needs v_nop)
KSTART wmma_hazard
        v_mov_b32 v8, 0x01010101
        v_mov_b32 v9, 0x01010101
        v_wmma_i32_16x16x16_iu8 v[16:23], v[8:9], v[8:9], 0 neg_lo:[1,1,0]
.if !BROKEN
        v_nop
.endif
        v_wmma_i32_16x16x16_iu8 v[24:31], v[16:17], v[8:9], 0 neg_lo:[1,1,0]
        global_store_b32 v1, v24, s[6:7]
        s_endpgm

// WMMA D overlapping A
KSTART wmma_overlap
        v_mov_b32 v8, 0x01010101
        v_mov_b32 v9, 0x01010101
.if BROKEN
        v_wmma_i32_16x16x16_iu8 v[8:15], v[8:9], v[8:9], 0 neg_lo:[1,1,0]
        global_store_b32 v1, v8, s[6:7]
.else
        v_wmma_i32_16x16x16_iu8 v[16:23], v[8:9], v[8:9], 0 neg_lo:[1,1,0]
        global_store_b32 v1, v16, s[6:7]
.endif
        s_endpgm

// global load outside every live allocation (buf0 is 128 B; offset 256 lands in the guard gap)
KSTART oob_global
.if BROKEN
        global_load_b32 v2, v1, s[4:5] offset:256
.else
        global_load_b32 v2, v1, s[4:5]
.endif
        s_wait_loadcnt 0
        global_store_b32 v1, v2, s[6:7]
        s_endpgm

// LDS store outside the declared 128-byte group segment
KSTART oob_lds
.if BROKEN
        ds_store_b32 v1, v0 offset:64
.else
        ds_store_b32 v1, v0
.endif
        s_wait_dscnt 0
        ds_load_b32 v2, v1
        s_wait_dscnt 0
        global_store_b32 v1, v2, s[6:7]
        s_endpgm

// VALU-read-SGPR (docs/rdna4.md §Hazards 3): a VALU reads s8 (pair s[8:9]), an SALU writes the partner s9, a VALU
// reads s9 with no s_wait_alu depctr_sa_sdst(0) between
KSTART sgpr_salu_valu
        s_mov_b32 s8, 5
        v_add_nc_u32 v2, s8, v0
        s_add_co_i32 s9, s8, 2
.if !BROKEN
        s_wait_alu depctr_sa_sdst(0)
.endif
        v_add_nc_u32 v3, s9, v2
        global_store_b32 v1, v3, s[6:7]
        s_endpgm

// the same hazard with an SALU reader, reached through the loop's back-edge: the loop test reads s8, which the
// previous trip's s_add_co_i32 wrote after the VALU read it
KSTART sgpr_loop
        s_mov_b32 s8, 0
        v_mov_b32 v3, 0
1:
        s_cmp_lt_u32 s8, 4
        s_cbranch_scc0 2f
        v_add_nc_u32 v3, s8, v3
        s_add_co_i32 s8, s8, 1
.if !BROKEN
        s_wait_alu depctr_sa_sdst(0)
.endif
        s_branch 1b
2:
        global_store_b32 v1, v3, s[6:7]
        s_endpgm

// VALU -> VALU through an SGPR: v_readfirstlane_b32 writes s8 (its pair read by a VALU before), a VALU reads it
// with no s_wait_alu depctr_va_sdst(0) between
KSTART sgpr_valu_valu
        s_mov_b32 s8, 3
        v_add_nc_u32 v2, s8, v0
        v_readfirstlane_b32 s8, v2
.if !BROKEN
        s_wait_alu depctr_va_sdst(0)
.endif
        v_add_nc_u32 v3, s8, v2
        global_store_b32 v1, v3, s[6:7]
        s_endpgm

// VALU -> VALU through VCC: a compare rewrites VCC after v_cndmask read it; the next v_cndmask needs
// s_wait_alu depctr_va_vcc(0)
KSTART vcc_valu
        v_cmp_gt_u32 vcc_lo, 16, v0
        v_cndmask_b32_e64 v2, 1, 2, vcc_lo
        v_cmp_gt_u32 vcc_lo, 8, v0
.if !BROKEN
        s_wait_alu depctr_va_vcc(0)
.endif
        v_cndmask_b32_e64 v3, 0, v2, vcc_lo
        global_store_b32 v1, v3, s[6:7]
        s_endpgm

// v_cmpx -> v_permlane (docs/rdna4.md §Hazards 5): a VALU other than v_nop must come between (LLVM: v_mov of the
// permlane's src0 onto itself)
KSTART vcmpx_permlane
        v_mov_b32 v2, v0
        v_mov_b32 v3, 0
        v_cmpx_gt_u32 32, v0
        v_nop
.if !BROKEN
        v_mov_b32 v2, v2
.endif
        v_permlane16_b32 v3, v2, 0, 0
        global_store_b32 v1, v3, s[6:7]
        s_endpgm

// two waves: wave 1 ends without reaching the barrier wave 0 waits at
KSTART barrier_skip
        v_readfirstlane_b32 s8, v0
        s_lshr_b32 s8, s8, 5                     // wave in workgroup
.if BROKEN
        s_cmp_eq_u32 s8, 1
        s_cbranch_scc1 .Lskip_end
.endif
        s_barrier_signal -1
        s_barrier_wait -1
        global_store_b32 v1, v0, s[6:7]
.Lskip_end:
        s_endpgm

// two waves exchange through LDS: wave 1 reads what wave 0 wrote. Clean: dscnt wait + barrier between.
KSTART lds_race
        v_readfirstlane_b32 s8, v0
        s_lshr_b32 s8, s8, 5
        v_and_b32 v2, 31, v0
        v_lshlrev_b32 v2, 2, v2                  // 4 * (lane % 32): both waves use the same addresses
        s_cmp_eq_u32 s8, 0
        s_cbranch_scc0 .Lrace_skip_store
        ds_store_b32 v2, v0
.Lrace_skip_store:
.if !BROKEN
        s_wait_dscnt 0
        s_barrier_signal -1
        s_barrier_wait -1
.endif
        s_cmp_eq_u32 s8, 1
        s_cbranch_scc0 .Lrace_end
        ds_load_b32 v3, v2
        s_wait_dscnt 0
        global_store_b32 v1, v3, s[6:7]
.Lrace_end:
        s_endpgm

        .p2alignl 7, 0xBF9F0000
        .fill 96, 4, 0xBF9F0000

        .rodata
.macro KDESC name, lds
        .p2align 6
        .amdhsa_kernel \name
          .amdhsa_group_segment_fixed_size \lds
          .amdhsa_kernarg_size 16
          .amdhsa_user_sgpr_count 2
          .amdhsa_user_sgpr_kernarg_segment_ptr 1
          .amdhsa_wavefront_size32 1
          .amdhsa_system_sgpr_workgroup_id_x 1
          .amdhsa_next_free_vgpr 32
          .amdhsa_next_free_sgpr 16
          .amdhsa_float_denorm_mode_32 3
          .amdhsa_float_denorm_mode_16_64 3
        .end_amdhsa_kernel
.endm
        KDESC wait_load, 0
        KDESC wmma_hazard, 0
        KDESC wmma_overlap, 0
        KDESC oob_global, 0
        KDESC oob_lds, 128
        KDESC barrier_skip, 0
        KDESC lds_race, 128
        KDESC sgpr_salu_valu, 0
        KDESC sgpr_loop, 0
        KDESC sgpr_valu_valu, 0
        KDESC vcc_valu, 0
        KDESC vcmpx_permlane, 0

        .amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.target: amdgcn-amd-amdhsa--gfx1201
amdhsa.kernels:
  - { .name: wait_load, .symbol: wait_load.kd, .kernarg_segment_size: 16, .kernarg_segment_align: 8, .group_segment_fixed_size: 0, .private_segment_fixed_size: 0, .wavefront_size: 32, .sgpr_count: 16, .vgpr_count: 32, .max_flat_workgroup_size: 64, .args: [ { .offset: 0, .size: 8, .value_kind: global_buffer }, { .offset: 8, .size: 8, .value_kind: global_buffer } ] }
  - { .name: wmma_hazard, .symbol: wmma_hazard.kd, .kernarg_segment_size: 16, .kernarg_segment_align: 8, .group_segment_fixed_size: 0, .private_segment_fixed_size: 0, .wavefront_size: 32, .sgpr_count: 16, .vgpr_count: 32, .max_flat_workgroup_size: 64, .args: [ { .offset: 0, .size: 8, .value_kind: global_buffer }, { .offset: 8, .size: 8, .value_kind: global_buffer } ] }
  - { .name: wmma_overlap, .symbol: wmma_overlap.kd, .kernarg_segment_size: 16, .kernarg_segment_align: 8, .group_segment_fixed_size: 0, .private_segment_fixed_size: 0, .wavefront_size: 32, .sgpr_count: 16, .vgpr_count: 32, .max_flat_workgroup_size: 64, .args: [ { .offset: 0, .size: 8, .value_kind: global_buffer }, { .offset: 8, .size: 8, .value_kind: global_buffer } ] }
  - { .name: oob_global, .symbol: oob_global.kd, .kernarg_segment_size: 16, .kernarg_segment_align: 8, .group_segment_fixed_size: 0, .private_segment_fixed_size: 0, .wavefront_size: 32, .sgpr_count: 16, .vgpr_count: 32, .max_flat_workgroup_size: 64, .args: [ { .offset: 0, .size: 8, .value_kind: global_buffer }, { .offset: 8, .size: 8, .value_kind: global_buffer } ] }
  - { .name: oob_lds, .symbol: oob_lds.kd, .kernarg_segment_size: 16, .kernarg_segment_align: 8, .group_segment_fixed_size: 128, .private_segment_fixed_size: 0, .wavefront_size: 32, .sgpr_count: 16, .vgpr_count: 32, .max_flat_workgroup_size: 64, .args: [ { .offset: 0, .size: 8, .value_kind: global_buffer }, { .offset: 8, .size: 8, .value_kind: global_buffer } ] }
  - { .name: barrier_skip, .symbol: barrier_skip.kd, .kernarg_segment_size: 16, .kernarg_segment_align: 8, .group_segment_fixed_size: 0, .private_segment_fixed_size: 0, .wavefront_size: 32, .sgpr_count: 16, .vgpr_count: 32, .max_flat_workgroup_size: 64, .args: [ { .offset: 0, .size: 8, .value_kind: global_buffer }, { .offset: 8, .size: 8, .value_kind: global_buffer } ] }
  - { .name: lds_race, .symbol: lds_race.kd, .kernarg_segment_size: 16, .kernarg_segment_align: 8, .group_segment_fixed_size: 128, .private_segment_fixed_size: 0, .wavefront_size: 32, .sgpr_count: 16, .vgpr_count: 32, .max_flat_workgroup_size: 64, .args: [ { .offset: 0, .size: 8, .value_kind: global_buffer }, { .offset: 8, .size: 8, .value_kind: global_buffer } ] }
  - { .name: sgpr_salu_valu, .symbol: sgpr_salu_valu.kd, .kernarg_segment_size: 16, .kernarg_segment_align: 8, .group_segment_fixed_size: 0, .private_segment_fixed_size: 0, .wavefront_size: 32, .sgpr_count: 16, .vgpr_count: 32, .max_flat_workgroup_size: 64, .args: [ { .offset: 0, .size: 8, .value_kind: global_buffer }, { .offset: 8, .size: 8, .value_kind: global_buffer } ] }
  - { .name: sgpr_loop, .symbol: sgpr_loop.kd, .kernarg_segment_size: 16, .kernarg_segment_align: 8, .group_segment_fixed_size: 0, .private_segment_fixed_size: 0, .wavefront_size: 32, .sgpr_count: 16, .vgpr_count: 32, .max_flat_workgroup_size: 64, .args: [ { .offset: 0, .size: 8, .value_kind: global_buffer }, { .offset: 8, .size: 8, .value_kind: global_buffer } ] }
  - { .name: sgpr_valu_valu, .symbol: sgpr_valu_valu.kd, .kernarg_segment_size: 16, .kernarg_segment_align: 8, .group_segment_fixed_size: 0, .private_segment_fixed_size: 0, .wavefront_size: 32, .sgpr_count: 16, .vgpr_count: 32, .max_flat_workgroup_size: 64, .args: [ { .offset: 0, .size: 8, .value_kind: global_buffer }, { .offset: 8, .size: 8, .value_kind: global_buffer } ] }
  - { .name: vcc_valu, .symbol: vcc_valu.kd, .kernarg_segment_size: 16, .kernarg_segment_align: 8, .group_segment_fixed_size: 0, .private_segment_fixed_size: 0, .wavefront_size: 32, .sgpr_count: 16, .vgpr_count: 32, .max_flat_workgroup_size: 64, .args: [ { .offset: 0, .size: 8, .value_kind: global_buffer }, { .offset: 8, .size: 8, .value_kind: global_buffer } ] }
  - { .name: vcmpx_permlane, .symbol: vcmpx_permlane.kd, .kernarg_segment_size: 16, .kernarg_segment_align: 8, .group_segment_fixed_size: 0, .private_segment_fixed_size: 0, .wavefront_size: 32, .sgpr_count: 16, .vgpr_count: 32, .max_flat_workgroup_size: 64, .args: [ { .offset: 0, .size: 8, .value_kind: global_buffer }, { .offset: 8, .size: 8, .value_kind: global_buffer } ] }
...
        .end_amdgpu_metadata
