// Atomics whose result is used, clang -O3 for gfx1201 (build.py): LDS atomics with return (ds_*_rtn_*) and 64-bit
// global atomics (global_atomic_*_u64 / _b64). Return values depend on the order in which the hardware applies the
// lanes' operations; the emulator applies them lane by lane in ascending order, wave by wave (docs/rdna4.md §Atomics),
// and the tests check only what every order gives (sums, sets, final memory). Headers-free; rebuilt by build.py.
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
typedef unsigned u32;
typedef unsigned long long u64;
#define RELAXED __ATOMIC_RELAXED
#define WG __HIP_MEMORY_SCOPE_WORKGROUP
#define AGENT __HIP_MEMORY_SCOPE_AGENT

// Per workgroup of 64 threads on __shared__ counters c[0..15] (initial value INIT(i)); out[(wg * 64 + t) * 10 + k]
// gets the k-th returned value. A uniform address is turned by LLVM's atomic optimizer into one lane's atomic plus a
// scan over the wave (k = 0, 7, 8, 9); a divergent one stays an atomic of every lane (k = 1..6).
//   0 fetch_add(&c[0], x)                 1 fetch_add(&c[1 + (t & 3)], 1)      2 fetch_max(&c[5 + (t & 1)], x) u32
//   3 fetch_min(&c[7 + (t & 1)], x) i32   4 fetch_sub(&c[9 + (t & 1)], t)      5 exchange(&c[11 + (t & 1)], t)
//   6 compare_exchange(&c[13], t -> t + 1) retried until it succeeds: c[13] counts 0..64, each lane gets t
//   7 fetch_and(&c[14], ~bit)  8 fetch_or(&c[15], bit)  (bit = 1 << (t & 31))  9 fetch_xor(&c[0], x) after a barrier
// Finally out_lds[wg * 16 + i] = c[i] after a barrier.
#define INIT(i) ((i) == 7 || (i) == 8 ? 0x7fffffffu : (i) == 14 ? 0xffffffffu : (i) == 13 ? 0u : (i) * 1000u)
extern "C" __global__ void lds_rtn(u32* out, u32* out_lds, const u32* in) {
  __shared__ u32 c[16];
  u32 t = __builtin_amdgcn_workitem_id_x(), wg = __builtin_amdgcn_workgroup_id_x();
  u32 x = in[wg * 64 + t], bit = 1u << (t & 31);
  if (t < 16) c[t] = INIT(t);
  __builtin_amdgcn_s_barrier();
  u32* o = out + (wg * 64 + t) * 10;
  o[0] = __hip_atomic_fetch_add(&c[0], x, RELAXED, WG);
  o[1] = __hip_atomic_fetch_add(&c[1 + (t & 3)], 1u, RELAXED, WG);
  o[2] = __hip_atomic_fetch_max(&c[5 + (t & 1)], x, RELAXED, WG);
  o[3] = (u32)__hip_atomic_fetch_min((int*)&c[7 + (t & 1)], (int)x, RELAXED, WG);
  o[4] = __hip_atomic_fetch_sub(&c[9 + (t & 1)], t, RELAXED, WG);
  o[5] = __hip_atomic_exchange(&c[11 + (t & 1)], t, RELAXED, WG);
  u32 expect = t;
  while (!__hip_atomic_compare_exchange_strong(&c[13], &expect, t + 1, RELAXED, RELAXED, WG)) expect = t;
  o[6] = expect;
  o[7] = __hip_atomic_fetch_and(&c[14], ~bit, RELAXED, WG);
  o[8] = __hip_atomic_fetch_or(&c[15], bit, RELAXED, WG);
  __builtin_amdgcn_s_barrier();
  o[9] = __hip_atomic_fetch_xor(&c[0], x, RELAXED, WG);
  __builtin_amdgcn_s_barrier();
  if (t < 16) out_lds[wg * 16 + t] = c[t];
}

// 64-bit global atomics with the result used: out[i * 4 + k] gets
//   0 fetch_add(&acc[0], v)   1 fetch_max(&acc[1], v) (u64)   2 fetch_min(&acc[2], (long long)v)   3 exchange(&acc[3], v)
// v = in[i] | (u64)(in[i] * 2654435761u) << 32 (values beyond 32 bits, carries across the halves)
extern "C" __global__ void global_rtn_u64(u64* out, u64* acc, const u32* in) {
  u32 i = __builtin_amdgcn_workgroup_id_x() * 64 + __builtin_amdgcn_workitem_id_x();
  u64 v = (u64)in[i] | (u64)(in[i] * 2654435761u) << 32;
  out[i * 4 + 0] = __hip_atomic_fetch_add(&acc[0], v, RELAXED, AGENT);
  out[i * 4 + 1] = __hip_atomic_fetch_max(&acc[1], v, RELAXED, AGENT);
  out[i * 4 + 2] = (u64)__hip_atomic_fetch_min((long long*)&acc[2], (long long)v, RELAXED, AGENT);
  out[i * 4 + 3] = __hip_atomic_exchange(&acc[3], v, RELAXED, AGENT);
}

// atomicAdd on unsigned long long with the result unused (no return), and a 64-bit compare-and-swap loop
// (a 64-bit max of in[i] * in[i] via CAS)
extern "C" __global__ void global_u64_nortn(u64* acc, const u32* in) {
  u32 i = __builtin_amdgcn_workgroup_id_x() * 64 + __builtin_amdgcn_workitem_id_x();
  u64 v = (u64)in[i] * in[i];
  __hip_atomic_fetch_add(&acc[0], v, RELAXED, AGENT);
  u64 cur = __hip_atomic_load(&acc[1], RELAXED, AGENT);
  while (cur < v && !__hip_atomic_compare_exchange_weak(&acc[1], &cur, v, RELAXED, RELAXED, AGENT)) {
  }
}

// 64-bit atomics through a generic pointer (flat_atomic_*_u64, routed per lane by aperture, docs/rdna4.md
// §Flat apertures): in[t] & 2 selects word (t + 1) & 63 of a __shared__ array, else spill[t] (every lane its own word).
// out[2t] = fetch_add(p, v), out[2t + 1] = exchange(p, v ^ t) with v = in[t] | (u64)in[t] << 32; finally spill[t]
// (untouched by shared lanes) and out_lds[t] = the shared word t.
extern "C" __global__ void flat_u64(u64* out, u64* out_lds, u64* spill, const u32* in) {
  __shared__ u64 tile[64];
  u32 t = __builtin_amdgcn_workitem_id_x();
  tile[t] = (u64)t * 3 << 33 | t;
  __builtin_amdgcn_s_barrier();
  u64* p = (in[t] & 2) ? &tile[(t + 1) & 63] : spill + t;
  u64 v = (u64)in[t] | (u64)in[t] << 32;
  out[2 * t] = __hip_atomic_fetch_add(p, v, RELAXED, AGENT);
  out[2 * t + 1] = __hip_atomic_exchange(p, v ^ t, RELAXED, AGENT);
  __builtin_amdgcn_s_barrier();
  out_lds[t] = tile[t];
}
