#include "common.h"
// WMMA with raw per-lane operand registers read from memory (regs[wave][lane][reg]); one wave per 32 lanes.
KERNEL wmma_iu8(int* d, const int* a, const int* b, const int* c, int bs) {
  int lane = WG * bs + TID;
  v2i va = {a[2 * lane], a[2 * lane + 1]}, vb = {b[2 * lane], b[2 * lane + 1]};
  v8i vc; for (int r = 0; r < 8; ++r) vc[r] = c[8 * lane + r];
  v8i ss = __builtin_amdgcn_wmma_i32_16x16x16_iu8_w32_gfx12(true, va, true, vb, vc, false);
  v8i uu = __builtin_amdgcn_wmma_i32_16x16x16_iu8_w32_gfx12(false, va, true, vb, vc, true);
  for (int r = 0; r < 8; ++r) { d[16 * lane + r] = ss[r]; d[16 * lane + 8 + r] = uu[r]; }
}
KERNEL wmma_fp8(float* d, const int* a, const int* b, const float* c, int bs) {
  int lane = WG * bs + TID;
  v2i va = {a[2 * lane], a[2 * lane + 1]}, vb = {b[2 * lane], b[2 * lane + 1]};
  v8f vc; for (int r = 0; r < 8; ++r) vc[r] = c[8 * lane + r];
  v8f x = __builtin_amdgcn_wmma_f32_16x16x16_fp8_fp8_w32_gfx12(va, vb, vc);
  v8f y = __builtin_amdgcn_wmma_f32_16x16x16_bf8_fp8_w32_gfx12(va, vb, vc);
  for (int r = 0; r < 8; ++r) { d[16 * lane + r] = x[r]; d[16 * lane + 8 + r] = y[r]; }
}
KERNEL wmma_f16(float* d, const _Float16* a, const _Float16* b, const float* c, int bs) {
  int lane = WG * bs + TID;
  v8h va, vb; for (int r = 0; r < 8; ++r) { va[r] = a[8 * lane + r]; vb[r] = b[8 * lane + r]; }
  v8f vc; for (int r = 0; r < 8; ++r) vc[r] = c[8 * lane + r];
  v8f x = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(va, vb, vc);
  for (int r = 0; r < 8; ++r) d[8 * lane + r] = x[r];
}
KERNEL wmma_bf16(float* d, const __bf16* a, const __bf16* b, const float* c, int bs) {
  int lane = WG * bs + TID;
  v8bf va, vb; for (int r = 0; r < 8; ++r) { va[r] = a[8 * lane + r]; vb[r] = b[8 * lane + r]; }
  v8f vc; for (int r = 0; r < 8; ++r) vc[r] = c[8 * lane + r];
  v8f x = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12(va, vb, vc);
  for (int r = 0; r < 8; ++r) d[8 * lane + r] = x[r];
}
