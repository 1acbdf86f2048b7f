// Realistic clang -O3 device code for decoder coverage: loops, fp math, exp2, LDS, WMMA builtins, shuffles.
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
typedef int v2i __attribute__((ext_vector_type(2)));
typedef int v8i __attribute__((ext_vector_type(8)));
typedef float v8f __attribute__((ext_vector_type(8)));
typedef _Float16 v8h __attribute__((ext_vector_type(8)));
typedef __bf16 v8bf __attribute__((ext_vector_type(8)));

extern "C" __global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int n, float scale) {
  __shared__ float red[32];
  int row = __builtin_amdgcn_workgroup_id_x(), t = __builtin_amdgcn_workitem_id_x();
  const float* xr = x + (long)row * n;
  float m = -__builtin_inff();
  for (int i = t; i < n; i += 32) m = __builtin_fmaxf(m, xr[i] * scale);
  red[t] = m;
  __builtin_amdgcn_s_barrier();
  m = red[t ^ 1] > m ? red[t ^ 1] : m;
  float s = 0.f;
  for (int i = t; i < n; i += 32) s += __builtin_amdgcn_exp2f(xr[i] * scale - m);
  for (int i = t; i < n; i += 32) y[(long)row * n + i] = __builtin_amdgcn_exp2f(xr[i] * scale - m) / s;
}

extern "C" __global__ void wmma_iu8(const v2i* a, const v2i* b, v8i* c, int k_tiles) {
  int l = __builtin_amdgcn_workitem_id_x();
  v8i acc = {};
  for (int k = 0; k < k_tiles; ++k)
    acc = __builtin_amdgcn_wmma_i32_16x16x16_iu8_w32_gfx12(true, a[k * 32 + l], true, b[k * 32 + l], acc, false);
  c[l] = acc;
}

extern "C" __global__ void wmma_fp8(const v2i* a, const v2i* b, v8f* c, int k_tiles) {
  int l = __builtin_amdgcn_workitem_id_x();
  v8f acc = {};
  for (int k = 0; k < k_tiles; ++k)
    acc = __builtin_amdgcn_wmma_f32_16x16x16_fp8_fp8_w32_gfx12(a[k * 32 + l], b[k * 32 + l], acc);
  c[l] = acc;
}

extern "C" __global__ void wmma_f16_bf16(const v8h* a, const v8bf* b, v8f* c) {
  int l = __builtin_amdgcn_workitem_id_x();
  v8f acc = {};
  acc = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(a[l], a[l + 32], acc);
  acc = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12(b[l], b[l + 32], acc);
  c[l] = acc;
}

extern "C" __global__ void quant_fp8(const float* x, int* out, float inv_scale, int n) {
  int i = __builtin_amdgcn_workgroup_id_x() * 256 + __builtin_amdgcn_workitem_id_x();
  if (i * 4 >= n) return;
  float v0 = __builtin_fminf(__builtin_fmaxf(x[4 * i] * inv_scale, -448.f), 448.f);
  float v1 = __builtin_fminf(__builtin_fmaxf(x[4 * i + 1] * inv_scale, -448.f), 448.f);
  float v2 = __builtin_fminf(__builtin_fmaxf(x[4 * i + 2] * inv_scale, -448.f), 448.f);
  float v3 = __builtin_fminf(__builtin_fmaxf(x[4 * i + 3] * inv_scale, -448.f), 448.f);
  int p = __builtin_amdgcn_cvt_pk_fp8_f32(v0, v1, 0, false);
  p = __builtin_amdgcn_cvt_pk_fp8_f32(v2, v3, p, true);
  out[i] = p;
}

extern "C" __global__ void shuffles(const int* x, int* y, double* d, long* q) {
  int l = __builtin_amdgcn_workitem_id_x();
  int v = x[l];
  int a = __builtin_amdgcn_permlanex16(v, v, 0x76543210, 0xfedcba98, false, false);
  int b = __builtin_amdgcn_permlane16(v, v, 0x01234567, 0x89abcdef, true, false);
  int c = __builtin_amdgcn_ds_swizzle(v, 0x041f);
  int e = __builtin_amdgcn_ds_bpermute(l * 4 ^ 4, v);
  int f = __builtin_amdgcn_readfirstlane(v) + __builtin_amdgcn_readlane(v, 7);
  int g = __builtin_amdgcn_update_dpp(0, v, 0x111, 0xf, 0xf, false);
  int h = __builtin_amdgcn_mov_dpp8(v, 0x0);
  y[l] = a + b + c + e + f + g + h;
  d[l] = (double)v * 1.5 + d[l + 1];
  q[l] = ((long)v << 33) >> 3;
}

extern "C" __global__ void dot4(const int* a, const int* b, float* c, const unsigned* fp8) {
  int l = __builtin_amdgcn_workitem_id_x();
  int s = __builtin_amdgcn_sudot4(true, a[l], true, b[l], 0, false);
  float f = __builtin_amdgcn_cvt_f32_fp8(fp8[l], 2) + __builtin_amdgcn_cvt_f32_bf8(fp8[l], 1);
  c[l] = (float)s + f + __builtin_sqrtf(f) + __builtin_amdgcn_rcpf(f) + __builtin_logf(f);
}
