#include "common.h"
// LDS + barriers (block reverse and tree sum), loops with data-dependent trip counts, divergent branches.
KERNEL lds_reverse_sum(u32* out, const u32* a, int bs) {
  __shared__ u32 buf[256];
  __shared__ u32 red[256];
  int t = TID, i = WG * bs + t;
  buf[t] = a[i];
  red[t] = a[i] & 0xffff;
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup");
  u32 rev = buf[bs - 1 - t];
  for (int s = bs / 2; s > 0; s >>= 1) {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
    if (t < s) red[t] += red[t + s];
  }
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
  out[2 * i] = rev;
  out[2 * i + 1] = red[0];
}
KERNEL branches(u32* out, const u32* a, int bs) {
  int i = WG * bs + TID;
  u32 x = a[i], acc = 0;
  for (u32 k = 0; k < (x & 15u); ++k) acc = acc * 31u + k;          // divergent trip count
  if (x & 0x100u) acc ^= 0xdeadbeefu;
  else if (x & 0x200u) acc += x >> 3;
  else acc = ~acc;
  u32 n = x, steps = 0;
  while (n != 1u && steps < 40u) { n = (n & 1u) ? 3u * n + 1u : n >> 1; ++steps; }   // collatz, divergent exits
  out[i] = acc + (steps << 24);
}
