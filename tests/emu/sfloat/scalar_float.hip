// Uniform float math that clang -O3 for gfx1201 lowers to the gfx12 scalar-float group (SALU s_*_f32/_f16,
// s_cmp_*_f32/_f16, s_cvt_*, and the v_s_* transcendentals). One wave per workgroup; every value derives from
// the workgroup's three input words, so it is uniform and stays in SGPRs. tests/emu/test_scalar_float.py checks
// which scalar-float mnemonics each kernel contains and compares every output with sfloat_ref.py.
#include "../hip/common.h"
typedef _Float16 half;
typedef __fp16 v2h __attribute__((ext_vector_type(2)));
typedef unsigned short v2u16 __attribute__((ext_vector_type(2)));
#define F32OF(w) __builtin_bit_cast(float, (w))
#define U32OF(f) __builtin_bit_cast(u32, (f))
#define H16(w) __builtin_bit_cast(half, (unsigned short)(w))
#define U16OF(h) ((u32)__builtin_bit_cast(unsigned short, (half)(h)))

// out[w * 32 + i], inputs in[3 w .. 3 w + 2]
KERNEL sf_f32(u32* out, const u32* in, int bs) {
  int w = WG;
  float a = F32OF(in[3 * w]), b = F32OF(in[3 * w + 1]), c = F32OF(in[3 * w + 2]);
  u32* o = out + w * 32;
  o[0] = U32OF(a + b); o[1] = U32OF(a - b); o[2] = U32OF(a * b); o[3] = U32OF(__builtin_fmaf(a, b, c));
  o[4] = U32OF(__builtin_fmaf(a, b, 7.25f)); o[5] = U32OF(__builtin_elementwise_minimum(a, b));
  o[6] = U32OF(__builtin_elementwise_maximum(a, b));
  o[7] = U32OF(__builtin_ceilf(a)); o[8] = U32OF(__builtin_floorf(a)); o[9] = U32OF(__builtin_truncf(a));
  o[10] = U32OF(__builtin_rintf(a));
  o[11] = (u32)(int)a;
  // int -> float feeding more scalar float math stays on the SALU (a bare conversion is stored from a VGPR)
  int ib = __builtin_bit_cast(int, b);
  o[12] = U32OF((float)ib); o[13] = U32OF((float)(u32)ib);
  o[29] = (u32)b;
  o[14] = a < b; o[15] = a == b; o[16] = a <= b; o[17] = a > b; o[18] = __builtin_islessgreater(a, b);
  o[19] = a >= b; o[20] = !__builtin_isunordered(a, b); o[21] = __builtin_isunordered(a, b);
  o[22] = !(a >= b); o[23] = !__builtin_islessgreater(a, b); o[24] = !(a > b); o[25] = !(a <= b);
  o[26] = a != b; o[27] = !(a < b);
  o[28] = U16OF((half)a);
}

KERNEL sf_trans32(u32* out, const u32* in, int bs) {
  int w = WG;
  float a = F32OF(in[3 * w]);
  u32* o = out + w * 8;
  o[0] = U32OF(__builtin_amdgcn_exp2f(a)); o[1] = U32OF(__builtin_amdgcn_logf(a));
  o[2] = U32OF(__builtin_amdgcn_rcpf(a)); o[3] = U32OF(__builtin_amdgcn_rsqf(a));
  o[4] = U32OF(__builtin_amdgcn_sqrtf(a));
}

KERNEL sf_f16(u32* out, const u32* in, int bs) {
  int w = WG;
  u32 wa = in[3 * w], wb = in[3 * w + 1], wc = in[3 * w + 2];
  half a = H16(wa), b = H16(wb), c = H16(wc);
  u32* o = out + w * 40;
  o[0] = U16OF(a + b); o[1] = U16OF(a - b); o[2] = U16OF(a * b); o[3] = U16OF(__builtin_fmaf16(a, b, c));
  o[4] = U16OF(__builtin_elementwise_minimum(a, b)); o[5] = U16OF(__builtin_elementwise_maximum(a, b));
  o[6] = U16OF(__builtin_ceilf16(a)); o[7] = U16OF(__builtin_floorf16(a)); o[8] = U16OF(__builtin_truncf16(a));
  o[9] = U16OF(__builtin_rintf16(a));
  o[10] = U16OF(__builtin_amdgcn_rcph(a)); o[11] = U16OF(__builtin_amdgcn_rsqh(a));
  o[12] = U16OF(__builtin_amdgcn_sqrth(a)); o[13] = U16OF(__builtin_exp2f16(a)); o[14] = U16OF(__builtin_log2f16(a));
  o[15] = a < b; o[16] = a == b; o[17] = a <= b; o[18] = a > b; o[19] = __builtin_islessgreater(a, b);
  o[20] = a >= b; o[21] = !__builtin_isunordered(a, b); o[22] = __builtin_isunordered(a, b);
  o[23] = !(a >= b); o[24] = !__builtin_islessgreater(a, b); o[25] = !(a > b); o[26] = !(a <= b);
  o[27] = a != b; o[28] = !(a < b);
  o[29] = U32OF((float)a); o[30] = U32OF((float)H16(wa >> 16));
  v2u16 pk = __builtin_bit_cast(v2u16, __builtin_amdgcn_cvt_pkrtz(F32OF(wa), F32OF(wb)));
  o[31] = pk[0] | ((u32)pk[1] << 16);
}
