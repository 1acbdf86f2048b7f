#include "common.h"
// FP8/BF8 packs (v_cvt_pk_fp8_f32 / v_cvt_pk_bf8_f32, both halves), f16 round trip, manual bf16 RNE.
KERNEL cvt_ops(u32* out, const float* a, int bs) {
  int i = WG * bs + TID;
  float x0 = a[4 * i], x1 = a[4 * i + 1], x2 = a[4 * i + 2], x3 = a[4 * i + 3];
  u32* o = out + i * 5;
  int p = __builtin_amdgcn_cvt_pk_fp8_f32(x0, x1, 0, false);
  p = __builtin_amdgcn_cvt_pk_fp8_f32(x2, x3, p, true);
  o[0] = (u32)p;
  int q = __builtin_amdgcn_cvt_pk_bf8_f32(x0, x1, 0x5a5a5a5a, false);
  o[1] = (u32)q;
  _Float16 h = (_Float16)x0;
  o[2] = (u32)__builtin_bit_cast(unsigned short, h) | ((u32)__builtin_bit_cast(unsigned short, (_Float16)x1) << 16);
  u32 b = __builtin_bit_cast(u32, x2);
  u32 r = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;            // bf16 RNE (finite inputs)
  o[3] = r;
  o[4] = __builtin_bit_cast(u32, (float)h + __builtin_bit_cast(float, r << 16));
}
