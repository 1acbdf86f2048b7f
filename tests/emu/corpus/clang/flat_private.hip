// Flat (generic) pointers into private and shared memory, clang -O3 for gfx1201 (build.py). A pointer that selects
// between a private (or __shared__) array and a global buffer has no known address space, so every access through
// it is a flat_* instruction; the hardware routes each lane by aperture (docs/rdna4.md §Flat apertures). The private
// pointer is formed as {private offset, high dword of src_private_base} (s_mov_b64 s[2:3], src_private_base).
typedef unsigned int u32;
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))

// odd in[t]: p is the lane's private array, even: a 32-word slice of `spill` (global)
extern "C" __global__ void flat_private(u32* out, u32* spill, const u32* in) {
  u32 t = __builtin_amdgcn_workitem_id_x();
  u32 priv[32];
  u32* p = (in[t] & 1) ? priv : spill + 32 * t;
  for (u32 k = 0; k < 32; ++k) p[k] = in[t] * k + t;
  p[in[t] & 31] += 7;
  u32 s = 0;
  for (u32 k = 0; k < 64; ++k) s += p[in[(t + k) & 63] & 31] * (k + 1);
  out[t] = s;
}

// in[t] & 2: p is a word of the workgroup's LDS, else of `spill`; a flat atomic add through it
extern "C" __global__ void flat_shared(u32* out, u32* spill, const u32* in) {
  __shared__ u32 tile[64];
  u32 t = __builtin_amdgcn_workitem_id_x();
  tile[t] = t * 3;
  __builtin_amdgcn_s_barrier();
  u32* p = (in[t] & 2) ? &tile[(t + 1) & 63] : spill + t;
  u32 old = __hip_atomic_fetch_add(p, in[t], __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
  out[t] = old + *p;
}
