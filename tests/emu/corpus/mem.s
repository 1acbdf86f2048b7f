s_load_b32 s0, s[0:1], 0x0
s_load_b32 s0, s[0:1], 0x10
s_load_b64 s[2:3], s[0:1], 0x8
s_load_b128 s[4:7], s[0:1], 0x10
s_load_b256 s[8:15], s[0:1], 0x20
s_load_b512 s[16:31], s[0:1], 0x40
s_load_b96 s[4:6], s[0:1], 0x0
s_load_b32 s0, s[2:3], -0x4
s_load_b32 s0, s[2:3], s4 offset:0x10
s_load_b32 s0, s[2:3], m0
s_load_b64 s[0:1], s[2:3], 0x0 th:TH_LOAD_NT scope:SCOPE_SYS
s_load_b64 s[0:1], s[2:3], 0x0 scope:SCOPE_DEV
s_load_u8 s0, s[2:3], 0x1
s_load_i16 s0, s[2:3], 0x2
s_buffer_load_b32 s0, s[4:7], 0x4
s_buffer_load_b64 s[0:1], s[4:7], s8 offset:0x0
s_load_b32 s0, ttmp[0:1], 0x0
global_load_b32 v0, v1, s[0:1]
global_load_b32 v0, v1, s[0:1] offset:64
global_load_b32 v0, v1, s[0:1] offset:-64
global_load_b32 v0, v[2:3], off
global_load_b32 v0, v[2:3], off offset:2048
global_load_b64 v[0:1], v2, s[0:1] offset:8
global_load_b96 v[0:2], v3, s[0:1]
global_load_b128 v[0:3], v4, s[0:1] offset:16
global_load_b128 v[0:3], v4, s[0:1] th:TH_LOAD_NT
global_load_b128 v[0:3], v4, s[0:1] th:TH_LOAD_HT scope:SCOPE_SE
global_load_b128 v[0:3], v4, s[0:1] scope:SCOPE_SYS
global_load_b32 v0, v1, s[0:1] th:TH_LOAD_LU
global_load_u8 v0, v1, s[0:1]
global_load_i8 v0, v1, s[0:1]
global_load_u16 v0, v1, s[0:1]
global_load_d16_b16 v0, v1, s[0:1]
global_load_d16_hi_b16 v0, v1, s[0:1]
global_load_tr_b128 v[0:3], v4, s[0:1]
global_load_tr_b64 v[0:1], v4, s[0:1]
global_store_b32 v1, v0, s[0:1]
global_store_b32 v1, v0, s[0:1] offset:-4
global_store_b64 v1, v[2:3], s[0:1] offset:8
global_store_b128 v1, v[4:7], s[0:1]
global_store_b128 v[8:9], v[4:7], off offset:256
global_store_b16 v1, v0, s[0:1]
global_store_b8 v1, v0, s[0:1]
global_store_b32 v1, v0, s[0:1] th:TH_STORE_NT scope:SCOPE_SYS
global_store_b32 v1, v0, s[0:1] th:TH_STORE_WB
global_atomic_add_u32 v1, v0, s[0:1]
global_atomic_add_u32 v2, v1, v0, s[0:1] th:TH_ATOMIC_RETURN
global_atomic_add_f32 v1, v0, s[0:1] offset:4
global_atomic_max_i32 v[2:3], v0, off
global_atomic_cmpswap_b32 v0, v1, v[2:3], s[0:1] th:TH_ATOMIC_RETURN
global_atomic_add_u64 v1, v[2:3], s[0:1] scope:SCOPE_DEV
scratch_load_b32 v0, v1, off
scratch_store_b32 off, v0, s2 offset:16
flat_load_b32 v0, v[1:2]
flat_store_b32 v[1:2], v0 offset:8
buffer_load_b32 v0, v1, s[4:7], s3 offen
buffer_load_b32 v0, v1, s[4:7], null offen offset:52
buffer_load_b32 v0, v1, s[4:7], s3 idxen
buffer_load_b32 v0, v[1:2], s[4:7], s3 idxen offen
buffer_load_b32 v0, off, s[4:7], s3 offset:4
buffer_load_b128 v[0:3], v4, s[8:11], null offen th:TH_LOAD_NT scope:SCOPE_SYS
buffer_load_b64 v[0:1], v4, s[8:11], null offen
buffer_load_u16 v0, v4, s[8:11], s5 offen offset:2
buffer_store_b32 v0, v1, s[4:7], s3 offen
buffer_store_b128 v[0:3], v4, s[8:11], null offen offset:16
buffer_store_b16 v0, v1, s[4:7], s3 offen th:TH_STORE_NT
buffer_atomic_add_u32 v0, v1, s[4:7], s3 offen th:TH_ATOMIC_RETURN
buffer_load_format_x v0, v1, s[4:7], s3 idxen
tbuffer_load_format_x v0, v1, s[4:7], s3 format:[BUF_FMT_32_FLOAT] offen
ds_load_b32 v0, v1
ds_load_b32 v0, v1 offset:16
ds_load_b32 v0, v1 offset:65535
ds_load_b64 v[0:1], v2 offset:8
ds_load_b128 v[0:3], v4
ds_load_b128 v[0:3], v4 offset:1024
ds_load_u8 v0, v1
ds_load_u16 v0, v1 offset:2
ds_store_b32 v1, v0
ds_store_b32 v1, v0 offset:128
ds_store_b64 v1, v[2:3] offset:8
ds_store_b128 v1, v[4:7] offset:512
ds_store_b8 v1, v0
ds_store_b16 v1, v0 offset:6
ds_load_2addr_b32 v[0:1], v2 offset1:1
ds_load_2addr_b32 v[0:1], v2 offset0:4 offset1:9
ds_load_2addr_b64 v[0:3], v4 offset0:2 offset1:3
ds_load_2addr_stride64_b32 v[0:1], v2 offset0:1 offset1:2
ds_store_2addr_b32 v1, v2, v3 offset0:4 offset1:9
ds_store_2addr_b64 v1, v[2:3], v[4:5] offset1:1
ds_store_2addr_stride64_b32 v1, v2, v3 offset0:1 offset1:3
ds_swizzle_b32 v0, v1 offset:swizzle(SWAP,16)
ds_swizzle_b32 v0, v1 offset:swizzle(SWAP,1)
ds_swizzle_b32 v0, v1 offset:swizzle(REVERSE,8)
ds_swizzle_b32 v0, v1 offset:swizzle(BROADCAST,4,1)
ds_swizzle_b32 v0, v1 offset:swizzle(QUAD_PERM,1,0,3,2)
ds_swizzle_b32 v0, v1 offset:swizzle(BITMASK_PERM,"00p11")
ds_swizzle_b32 v0, v1 offset:0x41f
ds_bpermute_b32 v0, v1, v2
ds_bpermute_b32 v0, v1, v2 offset:4
ds_permute_b32 v0, v1, v2
ds_add_u32 v1, v0
ds_add_rtn_u32 v0, v1, v2 offset:4
ds_max_num_f32 v1, v0
ds_add_f32 v1, v0 offset:8
ds_cmpstore_b32 v1, v2, v3
ds_cmpstore_rtn_b32 v0, v1, v2, v3
ds_store_b8_d16_hi v1, v0
ds_load_u16_d16 v0, v1
ds_load_u16_d16_hi v0, v1
ds_append v0
ds_consume v0 offset:4
ds_nop
