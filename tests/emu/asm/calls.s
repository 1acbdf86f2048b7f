// Calls and returns (docs/rdna4.md §Calls), four waves of 32 lanes; kernarg: out ptr. out[2 * tid] = v3, the value
// the calls left, out[2 * tid + 1] = the return address s_swappc_b64 wrote minus the s_getpc_b64 value (= .Lret - .Lpc).
//   s_call_b64 to add_ten (v3 = 1 + 10), then s_swappc_b64 to add_ten in even waves and times_three in odd waves
//   (per-wave targets: the wave set splits at the call and merges at .Lret); both return by s_setpc_b64 s[30:31].
//   even waves: 21, odd waves: 33. BAD != 0 adds BAD bytes to the swappc target (not an instruction: an error).
//   BADWAIT=1 jumps through an SGPR pair whose s_load has not been waited for (the sanitizer stops it).
        .amdgcn_target "amdgcn-amd-amdhsa--gfx1201"
        .amdhsa_code_object_version 5
        .text
        .globl  calls
        .p2align 8
        .type   calls,@function
calls:
.if BADWAIT
        s_load_b64      s[12:13], s[0:1], 0x0
        s_setpc_b64     s[12:13]
.endif
        s_load_b64      s[0:1], s[0:1], 0x0
        v_and_b32       v1, 0x3ff, v0
        v_lshlrev_b32   v2, 3, v1               // byte offset of out[2 * tid]
        s_bfe_u32       s2, ttmp8, 0x50019      // wave id in the workgroup (docs/rdna4.md §Entry)
        v_mov_b32       v3, 1
        s_call_b64      s[30:31], add_ten
        s_getpc_b64     s[4:5]
.Lpc:
        s_mov_b64       s[8:9], s[4:5]
        s_add_co_u32    s6, s4, times_three - .Lpc
        s_add_co_ci_u32 s7, s5, 0
        s_add_co_u32    s4, s4, add_ten - .Lpc + BAD
        s_add_co_ci_u32 s5, s5, 0
        s_bitcmp1_b32   s2, 0
        s_cselect_b64   s[4:5], s[6:7], s[4:5]  // odd waves: times_three
        s_swappc_b64    s[30:31], s[4:5]
.Lret:
        s_sub_co_u32    s10, s30, s8
        v_mov_b32       v4, s10
        s_wait_kmcnt    0
        global_store_b64 v2, v[3:4], s[0:1]
        s_endpgm
add_ten:
        v_add_nc_u32    v3, 10, v3
        s_setpc_b64     s[30:31]
times_three:
        v_mul_lo_u32    v3, v3, 3
        s_setpc_b64     s[30:31]

        .rodata
        .p2align 6
        .amdhsa_kernel calls
          .amdhsa_kernarg_size 8
          .amdhsa_user_sgpr_count 2
          .amdhsa_user_sgpr_kernarg_segment_ptr 1
          .amdhsa_wavefront_size32 1
          .amdhsa_next_free_vgpr 8
          .amdhsa_next_free_sgpr 32
        .end_amdhsa_kernel

        .amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.kernels:
  - { .name: calls, .symbol: calls.kd, .kernarg_segment_size: 8, .kernarg_segment_align: 8, .group_segment_fixed_size: 0, .private_segment_fixed_size: 0, .wavefront_size: 32, .sgpr_count: 32, .vgpr_count: 8, .max_flat_workgroup_size: 128, .args: [ { .offset: 0, .size: 8, .value_kind: global_buffer } ] }
...
        .end_amdgpu_metadata
