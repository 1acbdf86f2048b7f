// Atomic forms clang -O3 does not emit for the corpus (docs/rdna4.md §Atomics), one wave; kernarg: out, gbuf, in.
// Lane t reads a, b, c, d = in[4t .. 4t+3] (A = a | b << 32, C = c | d << 32), works on its own 64 LDS bytes at 64t and
// its own 32 bytes of gbuf at 32t (distinct addresses: every result is the pseudocode's), and writes at out + 144t
// the 18 returned dwords (v12..v29, in the order below) and at out + 144t + 80 its 64 LDS bytes afterwards.
//   LDS: +0 ds_add_rtn_u64 (A, C)   +8 ds_cmpstore_rtn_b64 (mem A, new C, cmp A: stores)   +16 same with cmp C
//        +24 ds_inc_rtn_u32 (a, b)  +28 ds_dec_rtn_u32 (a, b)   +32 ds_mskor_rtn_b32 (a, b, c)   +36 ds_rsub_rtn_u32 (a, b)
//        +40 ds_min_i32 (a, b, no return)   +44 ds_cmpstore_b32 (mem a, new c, cmp b, no return)   +48.. 0
//   global (gbuf initial values from the host): +0 global_atomic_cmpswap_b32 (new a, cmp b)   +4 global_atomic_inc_u32 c
//        +8 global_atomic_sub_u64 C   +16 global_atomic_xor_b64 A   +24 global_atomic_dec_u64 C
        .amdgcn_target "amdgcn-amd-amdhsa--gfx1201"
        .amdhsa_code_object_version 5
        .text
        .globl  atomic_forms
        .p2align 8
        .type   atomic_forms,@function
atomic_forms:
        s_load_b128     s[4:7], s[0:1], 0x0      // s[4:5] = out, s[6:7] = gbuf
        s_load_b64      s[8:9], s[0:1], 0x10     // in
        v_and_b32       v0, 0x3ff, v0
        v_lshlrev_b32   v5, 4, v0                // 16t: in
        v_lshlrev_b32   v6, 6, v0                // 64t: LDS
        v_lshlrev_b32   v7, 5, v0                // 32t: gbuf
        v_mul_u32_u24   v8, 0x90, v0             // 144t: out
        s_wait_kmcnt    0
        global_load_b128 v[1:4], v5, s[8:9]      // a b c d
        s_wait_loadcnt  0
        v_mov_b32       v10, 0
        v_mov_b32       v11, 0
        // LDS initial values
        ds_store_2addr_b64 v6, v[1:2], v[1:2] offset1:1      // +0 A, +8 A
        ds_store_b64    v6, v[1:2] offset:16                 // +16 A
        ds_store_2addr_b32 v6, v1, v1 offset0:6 offset1:7    // +24 a, +28 a
        ds_store_2addr_b32 v6, v1, v1 offset0:8 offset1:9    // +32 a, +36 a
        ds_store_2addr_b32 v6, v1, v1 offset0:10 offset1:11  // +40 a, +44 a
        ds_store_2addr_b64 v6, v[10:11], v[10:11] offset0:6 offset1:7   // +48 0, +56 0
        ds_add_rtn_u64  v[12:13], v6, v[3:4]
        ds_cmpstore_rtn_b64 v[14:15], v6, v[3:4], v[1:2] offset:8
        ds_cmpstore_rtn_b64 v[16:17], v6, v[3:4], v[3:4] offset:16
        ds_inc_rtn_u32  v18, v6, v2 offset:24
        ds_dec_rtn_u32  v19, v6, v2 offset:28
        ds_mskor_rtn_b32 v20, v6, v2, v3 offset:32
        ds_rsub_rtn_u32 v21, v6, v2 offset:36
        ds_min_i32      v6, v2 offset:40
        ds_cmpstore_b32 v6, v3, v2 offset:44
        global_atomic_cmpswap_b32 v22, v7, v[1:2], s[6:7] th:TH_ATOMIC_RETURN
        global_atomic_inc_u32 v23, v7, v3, s[6:7] offset:4 th:TH_ATOMIC_RETURN
        global_atomic_sub_u64 v[24:25], v7, v[3:4], s[6:7] offset:8 th:TH_ATOMIC_RETURN
        global_atomic_xor_b64 v[26:27], v7, v[1:2], s[6:7] offset:16 th:TH_ATOMIC_RETURN
        global_atomic_dec_u64 v[28:29], v7, v[3:4], s[6:7] offset:24 th:TH_ATOMIC_RETURN
        s_wait_dscnt    0
        ds_load_b128    v[30:33], v6
        ds_load_b128    v[34:37], v6 offset:16
        ds_load_b128    v[38:41], v6 offset:32
        ds_load_b128    v[42:45], v6 offset:48
        s_wait_loadcnt_dscnt 0
        global_store_b128 v8, v[12:15], s[4:5]
        global_store_b128 v8, v[16:19], s[4:5] offset:16
        global_store_b128 v8, v[20:23], s[4:5] offset:32
        global_store_b128 v8, v[24:27], s[4:5] offset:48
        global_store_b64 v8, v[28:29], s[4:5] offset:64
        global_store_b128 v8, v[30:33], s[4:5] offset:80
        global_store_b128 v8, v[34:37], s[4:5] offset:96
        global_store_b128 v8, v[38:41], s[4:5] offset:112
        global_store_b128 v8, v[42:45], s[4:5] offset:128
        s_endpgm

        .rodata
        .p2align 6
        .amdhsa_kernel atomic_forms
          .amdhsa_kernarg_size 24
          .amdhsa_user_sgpr_count 2
          .amdhsa_user_sgpr_kernarg_segment_ptr 1
          .amdhsa_group_segment_fixed_size 2048
          .amdhsa_wavefront_size32 1
          .amdhsa_next_free_vgpr 48
          .amdhsa_next_free_sgpr 16
        .end_amdhsa_kernel

        .amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.kernels:
  - { .name: atomic_forms, .symbol: atomic_forms.kd, .kernarg_segment_size: 24, .kernarg_segment_align: 8, .group_segment_fixed_size: 2048, .private_segment_fixed_size: 0, .wavefront_size: 32, .sgpr_count: 16, .vgpr_count: 48, .max_flat_workgroup_size: 32, .args: [ { .offset: 0, .size: 8, .value_kind: global_buffer }, { .offset: 8, .size: 8, .value_kind: global_buffer }, { .offset: 16, .size: 8, .value_kind: global_buffer } ] }
...
        .end_amdgpu_metadata
