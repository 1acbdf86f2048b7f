// clang -O3 HIP kernels exercising what compilers emit and sage-co's kernels do not (issue 10): the wave id in
// ttmp8, dynamic LDS, global and LDS atomics, scratch (a private array indexed at run time), 16-bit math and
// LDS addresses with a negative base folded into the instruction offset. Headers-free; rebuilt by build.py.
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
typedef unsigned u32;

extern "C" __attribute__((device)) u32 wave_id_intrinsic() __asm("llvm.amdgcn.wave.id");

// out[workgroup * 8 + wave] = wave id in the workgroup, read from ttmp8[29:25] (docs/rdna4.md §Entry)
extern "C" __global__ void wave_ids(u32* out) {
  u32 t = __builtin_amdgcn_workitem_id_x();
  if ((t & 31) == 0) out[__builtin_amdgcn_workgroup_id_x() * 8 + t / 32] = wave_id_intrinsic();
}

// reverse a block through `extern __shared__` (dynamic LDS, sized by the launch)
extern __shared__ float dyn_lds[];
extern "C" __global__ void dyn_reverse(float* out, const float* in) {
  u32 t = __builtin_amdgcn_workitem_id_x(), n = __builtin_amdgcn_workgroup_size_x();
  u32 base = __builtin_amdgcn_workgroup_id_x() * n;
  dyn_lds[t] = in[base + t];
  __builtin_amdgcn_s_barrier();
  out[base + t] = dyn_lds[n - 1 - t];
}

// negative base: lds[255 - t] is (255 - t) * 4 = 1020 + (-4t): clang folds 1020 into the ds offset
extern "C" __global__ void neg_base(u32* out, const u32* in) {
  __shared__ u32 lds[256];
  u32 t = __builtin_amdgcn_workitem_id_x();
  lds[t] = in[t];
  __builtin_amdgcn_s_barrier();
  out[t] = lds[255 - t];
}

// histogram: LDS atomics per workgroup, then global atomics
extern "C" __global__ void histogram(u32* hist, const u32* in, u32 n) {
  __shared__ u32 local[16];
  u32 t = __builtin_amdgcn_workitem_id_x();
  if (t < 16) local[t] = 0;
  __builtin_amdgcn_s_barrier();
  u32 i = __builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x() + t;
  if (i < n) __atomic_fetch_add(&local[in[i] & 15], 1u, __ATOMIC_RELAXED);
  __builtin_amdgcn_s_barrier();
  if (t < 16) __atomic_fetch_add(&hist[t], local[t], __ATOMIC_RELAXED);
}

// scratch: a private array indexed at run time
extern "C" __global__ void scratch_sum(u32* out, const u32* in) {
  u32 t = __builtin_amdgcn_workitem_id_x();
  u32 priv[256];
  for (u32 k = 0; k < 256; ++k) priv[k] = in[t] * k + t;
  u32 s = 0;
  for (u32 k = 0; k < 64; ++k) s += priv[in[(t + k) & 63] & 255];
  out[t] = s;
}

// 16-bit math: _Float16 fma and an int16 multiply-add
extern "C" __global__ void half_math(_Float16* outh, short* outs, const _Float16* a, const _Float16* b,
                                     const short* c) {
  u32 t = __builtin_amdgcn_workitem_id_x();
  outh[t] = a[t] * b[t] + (_Float16)1.5f;
  outs[t] = (short)(c[t] * (short)3 + (short)t);
}
