// Device-function calls, clang -O3 for gfx1201 (build.py): `noinline` functions are real calls (s_getpc_b64 +
// rel32 add + s_swappc_b64 s[30:31], return by s_setpc_b64 s[30:31]; docs/rdna4.md §Calls), and a callee that takes a
// pointer to the caller's private array reads it through scratch at an offset from the stack pointer s32.
// Headers-free; rebuilt by build.py.
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define NOINLINE __attribute__((noinline))
typedef unsigned u32;

// a small mixing function, called from a loop with different arguments
extern "C" __device__ NOINLINE u32 mix(u32 x, u32 k) {
  x ^= x >> 15;
  x *= 0x2c1b3c6dU + 2 * k;
  x ^= x >> 12;
  return x + k;
}

// reads a private array through its pointer (a scratch address the caller passes in a VGPR) and calls mix
extern "C" __device__ NOINLINE u32 weighted(const u32* a, u32 n, u32 w) {
  u32 s = 0;
  for (u32 i = 0; i < n; ++i) s += mix(a[i], w + i) * (i + 1);
  return s;
}

// out[t] = sum_k mix(in[t] + k, k) for k < n (n uniform, a kernel argument)
extern "C" __global__ void call_loop(u32* out, const u32* in, u32 n) {
  u32 t = __builtin_amdgcn_workitem_id_x() + __builtin_amdgcn_workgroup_id_x() * 64;
  u32 s = 0;
  for (u32 k = 0; k < n; ++k) s += mix(in[t] + k, k);
  out[t] = s;
}

// out[t] = weighted(priv, 16 - (t & 7), t) with priv[i] = in[t] * (i + 1) + i: the callee's loop count diverges
// across lanes and the private array lives in the caller's frame
extern "C" __global__ void call_private(u32* out, const u32* in) {
  u32 t = __builtin_amdgcn_workitem_id_x();
  u32 priv[16];
  for (u32 i = 0; i < 16; ++i) priv[i] = in[t] * (i + 1) + i;
  out[t] = weighted(priv, 16 - (t & 7), t);
}
