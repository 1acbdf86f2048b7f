// Small headers-free HIP kernels for tests/emu/test_executor.py (compiled with clang-22 -O3 for gfx1201).
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
typedef unsigned u32;

// partial waves + multiple workgroups: out[i] = a[i] * s + b[i] for i < n
extern "C" __global__ void saxpy(float* out, const float* a, const float* b, float s, u32 n) {
  u32 i = __builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x() + __builtin_amdgcn_workitem_id_x();
  if (i < n) out[i] = a[i] * s + b[i];
}

// 3-D ids and hidden args (block count x, group size x, grid size from the dispatch packet)
extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(1, 256))) void ids(int* out) {
  u32 tx = __builtin_amdgcn_workitem_id_x(), ty = __builtin_amdgcn_workitem_id_y(), tz = __builtin_amdgcn_workitem_id_z();
  u32 bx = __builtin_amdgcn_workgroup_id_x(), by = __builtin_amdgcn_workgroup_id_y(), bz = __builtin_amdgcn_workgroup_id_z();
  u32 gx = __builtin_amdgcn_workgroup_size_x();
  u32 gsx = __builtin_amdgcn_grid_size_x();
  const u32* ia = (const u32*)__builtin_amdgcn_implicitarg_ptr();
  u32 nbx = ia[0], nby = ia[1], nbz = ia[2];
  u32 lin = ((bz * nby + by) * nbx + bx) * 64 + (tz * 4 + ty) * 4 + tx;
  out[4 * lin + 0] = tx | ty << 8 | tz << 16;
  out[4 * lin + 1] = bx | by << 8 | bz << 16;
  out[4 * lin + 2] = gx | gsx << 16;
  out[4 * lin + 3] = nbx | nby << 8 | nbz << 16;
}

// per-lane divergence (exec masking, loops with lane-dependent trip counts) and per-wave divergence
// (scalar branch on the workgroup id)
extern "C" __global__ void diverge(u32* out, const u32* in) {
  u32 t = __builtin_amdgcn_workitem_id_x();
  u32 b = __builtin_amdgcn_workgroup_id_x();
  u32 i = b * 64 + t;
  u32 x = in[i];
  u32 acc = 0;
  for (u32 k = 0; k < (x & 15); k++) acc = acc * 3 + k;        // lane-dependent trip count
  if (b & 1) {                                                  // workgroup-uniform branch
    for (u32 k = 0; k < b; k++) acc ^= acc << 1;
  } else if (t & 1) {
    acc += 1000;
  }
  out[i] = acc;
}

// LDS + barriers across 8 waves: block sum by a tree in shared memory
extern "C" __global__ void block_sum(float* out, const float* in) {
  __shared__ float red[256];
  u32 t = __builtin_amdgcn_workitem_id_x(), b = __builtin_amdgcn_workgroup_id_x();
  red[t] = in[b * 256 + t];
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
  for (u32 s = 128; s > 0; s >>= 1) {
    if (t < s) red[t] += red[t + s];
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
  }
  if (t == 0) out[b] = red[0];
}

// DPP quad_perm, permlanex16, exp2 (TRANS)
extern "C" __global__ void dpp(float* out, const float* in) {
  u32 t = __builtin_amdgcn_workitem_id_x();
  float x = in[t] * 3.0f + 1.0f;
  int y = __builtin_amdgcn_update_dpp(0, __builtin_bit_cast(int, x), 0xB1, 0xF, 0xF, false);  // quad_perm [1,0,3,2]
  float m = __builtin_fmaxf(x, __builtin_bit_cast(float, y));
  int z = __builtin_amdgcn_permlanex16(0, __builtin_bit_cast(int, m), 0x76543210, 0xfedcba98, false, false);
  m = __builtin_fmaxf(m, __builtin_bit_cast(float, z));
  out[t] = __builtin_amdgcn_exp2f(m * 0.125f);
}

// ds_bpermute shuffle, int division (v_rcp_iflag/mul_hi sequences), float division (div_scale/fmas/fixup)
extern "C" __global__ void shuffle_div(u32* out, float* fout, const u32* in) {
  u32 t = __builtin_amdgcn_workitem_id_x();
  u32 v = in[t];
  u32 r = __builtin_amdgcn_ds_bpermute(((t * 7) & 31) * 4, v);
  out[t] = r / (t + 1) + r % (t + 3);
  fout[t] = (float)v / (float)(t + 1);
}
