#include "common.h"
// Integer ALU: add/sub/mul/mulhi, shifts, bitfield extract/insert, compares + selects, min/max, division by a
// runtime value (LLVM expands it into a float reciprocal + fixup sequence).
KERNEL int_ops(u32* out, const u32* a, const u32* b, int bs) {
  int i = WG * bs + TID;
  u32 x = a[i], y = b[i];
  int sx = (int)x, sy = (int)y;
  u32* o = out + i * 12;
  o[0] = x + y * 3u;
  o[1] = x * y;
  o[2] = (u32)(((unsigned long long)x * y) >> 32);
  o[3] = (u32)(sx >> (y & 31)) ^ (x << (y % 7));
  o[4] = (x >> 5) & 0x3ffu;                                   // bitfield extract
  o[5] = (x & ~0xff00u) | ((y & 0xffu) << 8);                 // bitfield insert
  o[6] = sx < sy ? x - y : y - x;
  o[7] = (u32)(sx > sy ? sx : sy) + (x < y ? x : y);
  o[8] = x / ((y & 0xffffu) | 1u);
  o[9] = (u32)(sx / ((sy >> 20) | 1));
  o[10] = (u32)__builtin_popcount(x) + ((u32)__builtin_clz(x | 1u) << 8) + ((u32)__builtin_ctz(y | 0x80000000u) << 16);
  o[11] = (x == y) + 2 * (x != 0) + 4 * (sx <= 0) + 8 * (x >= y);
}
// Float ALU: fmaf, mul/add/sub, fminf/fmaxf, compares, conversions, rint/floor/trunc/ceil, copysign, fabs.
KERNEL float_ops(float* out, const float* a, const float* b, const float* c, int bs) {
  int i = WG * bs + TID;
  float x = a[i], y = b[i], z = c[i];
  float* o = out + i * 14;
  o[0] = __builtin_fmaf(x, y, z);
  o[1] = x * y + z;            // may contract to fma (clang -O3 fp-contract=fast for HIP): compared as fma
  o[2] = x - y;
  o[3] = __builtin_fminf(x, y);
  o[4] = __builtin_fmaxf(x, z);
  o[5] = x < y ? z : x;
  o[6] = (float)(int)x;
  o[7] = (float)(u32)__builtin_fabsf(y);
  o[8] = __builtin_rintf(z);
  o[9] = __builtin_floorf(x) + __builtin_truncf(y) + __builtin_ceilf(z);
  o[10] = __builtin_copysignf(x, y);
  o[11] = __builtin_fabsf(x) * 0.5f;
  o[12] = (float)(int)(x * 1000.0f);
  o[13] = __builtin_fmaf(-x, y, __builtin_fmaf(x, y, z));
}
