// gfx1201 (RDNA4, wave32) block-mask *predictor* (SpargeAttn's prediction, issue 14): which 64-key tiles each
// 64-query tile of the attention should visit. Headers-free HIP, built by build_asm.py with clang -O3 (no
// fast-math, no fp contraction: every '/' is clang's correctly rounded div_scale/div_fmas/div_fixup sequence,
// sqrtf its correctly rounded sequence). Numerics: docs/numerics.md §Predictor / sage_co.sparse.predict_block_mask
// (backend="torch"), matched bit for bit: the output is a bool mask, so every step that decides it has one stated
// order of fp32 operations, and the softmax mass is summed in integers (order-free).
//
// Two kernels, launched in this order by sage_co/ops/predict.py:
//
//  1. gfx1201_sage_predict_pool_{bf16,fp16}  grid (H_q * n_q + H_kv * n_kv, B, 1), block 32 (one wave per block of
//     64 tokens of one (b, head); x < H_q * n_q is a Q block, head-major, then the K blocks). Lane L owns channels
//     4L..4L+3 (channels >= D read as zero, never loaded: 8-byte loads, D a multiple of 16). Over the block's n
//     real tokens in order:  acc += x;  nrm = tree(x * x);  r = sqrt(nrm), r = FLT_MIN when r < FLT_MIN;
//     inv = 1 / r;  usum += x * inv.  Then mean = acc / n, sim = tree(usum * usum) / (n * n). tree(): each lane
//     sums its 4 channels in order ((c0 + c1) + c2) + c3, then 5 butterfly steps lane ^ 16, 8, 4, 2, 1 through
//     ds_bpermute (docs/rdna4.md §Memory): IEEE addition is commutative, so every lane holds the same bits.
//     Schedule: TPS = 4 tokens per step (4 loads in flight, 4 independent trees / sqrt / divisions), then the
//     in-order sums. Writes q_mean [B, H_q, n_q, 128], k_mean [B, H_kv, n_kv, 128] (select reads a query row with
//     wave-uniform scalar loads, lane j key row j with 16-byte loads), q_sim [B, H_q, n_q], k_sim [B, H_kv, n_kv].
//  2. gfx1201_sage_predict_select  grid (n_q, H_q, B), block 32, dynamic LDS 12 * N bytes, N = the next power of
//     two >= max(n_kv, 2): N u64 sort keys, then N u32 slots (score bits, then integer mass, of key block j). One
//     wave per (b, query head h, query block x); K head g = (h * kv_group_magic) >> 32 (sage_co.abi.kv_group_magic).
//     Lane = key block j, in chunks of 32:
//       s = +0, s = s + q[d] * k[d][j] for d = 0..D-1 in order;  t = s * score_scale        (log2 units)
//       a row whose q_sim is not >= sim_threshold, or with a non-finite t: every key block kept (early exit)
//       M = max_j t (wave max, exact);  e = exp2_poly(t - M);  w = rint(e * mass_scale) (u32, exact integer)
//       W = sum_j w (u32, exact: mass_scale <= 2^31 / n_kv)
//       rank: bitonic sort of the keys (descending t, ties by ascending j: the spec's "ranked above") in LDS,
//       log2(N) (log2(N) + 1) / 2 steps of N/2 compare-exchanges; then lane L walks sorted positions
//       [L * N/32, (L + 1) * N/32) with A = (exclusive wave scan of the lanes' mass sums) + its running sum, R = pos
//       keep = topk_count ? R < topk_count : A * 2^31 < cdf_fixed * W (u64);  keep |= !(k_sim[j] >= thr)
//     causal: the row ranks only its first n_row key blocks (those it can see, sage_co.masks.causal_tiles) as if
//     n_kv were n_row, and writes 0 for the others (n_row = 0: all 0).
//     Writes mask [B, H_q, n_q, n_kv] (one byte per key block, 0/1: torch.bool).
//     exp2_poly(x), x <= 0: 0 when x < -32; else n = floor(x), f = x - n, p = 1 + f * (C1 + f * (C2 + ... + f * C6))
//     (Horner, separate multiply and add), e = p * 2^n -- basic IEEE operations only, so every device agrees
//     (v_exp_f32 is not correctly rounded on hardware: docs/numerics.md §Attention arithmetic model).
//
// Kernargs (explicit only): sage_co/abi.py PREDICT_POOL_ARGS / PREDICT_SELECT_ARGS, declared there once with what
// each field holds (docs/abi.md has the offsets); the parameter lists are SAGE_PREDICT_POOL_PARAMS /
// SAGE_PREDICT_SELECT_PARAMS of generated/sage_abi.h (strides in elements: batch, token, head; topk_count 0 = cdf
// mode; causal 0/1).
//
// Register map (hsaco/manifest.json has the counts): pool keeps acc[4], usum[4] and TPS tokens x 4 channels per
// lane; select keeps s and 16 key values of a step, then two 64-bit keys of a compare-exchange, the query row in
// SGPRs (scalar loads). No atomics, no scratch, no static LDS.

#pragma clang fp contract(off)  // every product and sum is rounded on its own, like the torch reference

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define INLINE __device__ static inline __attribute__((always_inline))
#define KERNEL extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(32, 32)))

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;
typedef unsigned long long u64;
typedef u32 u32x2 __attribute__((ext_vector_type(2)));
typedef u32 u32x4 __attribute__((ext_vector_type(4)));
typedef float f32x4 __attribute__((ext_vector_type(4)));

// KEY_TILE: tokens per pooled block = the attention kernel's query / key tile; PREDICT_CHANNELS: pooled channels, D
// zero-padded to 128 (32 lanes x 4); HEAD_DIM_STEP: the select kernel's score loop step (D is a multiple of it);
// the dtype selectors BF16 / FP16: generated from sage_co/abi.py and family.py
#include "generated/sage_abi.h"
#define CPL 4             // channels per lane
#define TPS 4             // pool: tokens per step (loads in flight together)
#define FLT_MIN_F 1.17549435e-38f
#define FLT_MAX_F 3.40282347e+38f
#define EXP2_CUTOFF -32.0f  // exp2_poly(x) = 0 below: e * mass_scale < 2^-8 rounds to 0 (mass_scale <= 2^24)

// 2^f on [0, 1): least-squares fit, coefficients rounded to fp32 (relative error <= 8.4e-8 with fp32 Horner).
#define C1 0x1.62e42cp-1f
#define C2 0x1.ebfd5ap-3f
#define C3 0x1.c688f0p-5f
#define C4 0x1.3d0c40p-7f
#define C5 0x1.46d326p-10f
#define C6 0x1.c54640p-13f

INLINE u32 lane_id() { return __builtin_amdgcn_workitem_id_x(); }
INLINE float as_f(u32 u) { return __builtin_bit_cast(float, u); }
INLINE u32 min_u32(u32 a, u32 b) { return a < b ? a : b; }
INLINE float f16_to_f(u32 bits16) { return (float)__builtin_bit_cast(_Float16, (u16)bits16); }
// An empty asm keeps a packed fp16 pair in a VGPR (otherwise LLVM may widen it with SALU float converts the
// emulator does not implement -- the same guard as gfx1201_sage_prepare.hip).
INLINE u32 opaque_u(u32 u) {
  __asm__("" : "+v"(u));
  return u;
}

// The 16-bit input type: channel 2j of a packed dword is bits 15:0, channel 2j+1 bits 31:16 (the memory layout).
template <int DT> struct Elt;
template <> struct Elt<BF16> {
  INLINE float lo(u32 p) { return as_f(p << 16); }
  INLINE float hi(u32 p) { return as_f(p & 0xffff0000u); }
};
template <> struct Elt<FP16> {
  INLINE float lo(u32 p) { return f16_to_f(opaque_u(p) & 0xffffu); }
  INLINE float hi(u32 p) { return f16_to_f(opaque_u(p) >> 16); }
};

INLINE float shfl_xor(float v, u32 m) {
  return as_f((u32)__builtin_amdgcn_ds_bpermute((int)(((lane_id() ^ m) & 31u) << 2), (int)__builtin_bit_cast(u32, v)));
}
INLINE u32 shfl_xor_u(u32 v, u32 m) {
  return (u32)__builtin_amdgcn_ds_bpermute((int)(((lane_id() ^ m) & 31u) << 2), (int)v);
}

// Sum of the 128 channels in the stated tree: in-lane ((c0 + c1) + c2) + c3, then lane ^ 16, 8, 4, 2, 1.
INLINE float tree_sum(float c0, float c1, float c2, float c3) {
  float v = ((c0 + c1) + c2) + c3;
#pragma unroll
  for (u32 m = 16; m >= 1; m >>= 1) v = v + shfl_xor(v, m);
  return v;
}

// ------------------------------------------------------------------------------------------------ pool
template <int DT>
INLINE void pool_body(SAGE_PREDICT_POOL_PARAMS) {
  u32 x = __builtin_amdgcn_workgroup_id_x();
  u32 b = __builtin_amdgcn_workgroup_id_y();
  u32 lane = lane_id();
  u32 nqb = H_q * n_q;
  bool is_q = x < nqb;  // wave-uniform
  u32 rel = is_q ? x : x - nqb;
  u32 nb = is_q ? n_q : n_kv;
  u32 h = rel / nb, blk = rel % nb;
  u32 S = is_q ? S_q : S_kv;
  u32 sb = is_q ? q_sb : k_sb, ss = is_q ? q_ss : k_ss, sh = is_q ? q_sh : k_sh;
  const u16* base = is_q ? q : k;
  u32 n = min_u32(KEY_TILE, S - blk * KEY_TILE);
  u32 c0 = CPL * lane;
  bool real = c0 < D;
  const u16* p = base + (u64)b * sb + (u64)(blk * KEY_TILE) * ss + (u64)h * sh + (real ? c0 : 0u);
  float acc[CPL] = {0.0f, 0.0f, 0.0f, 0.0f}, us[CPL] = {0.0f, 0.0f, 0.0f, 0.0f};
  // TPS tokens per step: their loads and channel trees are independent (in flight together); the sums into acc
  // and usum stay in token order. A token past n re-reads token n - 1 and counts as zeros: adding +0 to acc or
  // usum is exact (they start at +0 and a sum is -0 only when both terms are), and a zero row has u = 0 * 2^126.
  for (u32 t0 = 0; t0 < n; t0 += TPS) {
    float xv[TPS][CPL], inv[TPS];
#pragma unroll
    for (u32 i = 0; i < TPS; ++i) {
      u32x2 raw = *(const u32x2*)(p + (u64)min_u32(t0 + i, n - 1) * ss);  // a padded-channel lane reads 0..3
      bool use = real && t0 + i < n;
      xv[i][0] = use ? Elt<DT>::lo(raw[0]) : 0.0f;
      xv[i][1] = use ? Elt<DT>::hi(raw[0]) : 0.0f;
      xv[i][2] = use ? Elt<DT>::lo(raw[1]) : 0.0f;
      xv[i][3] = use ? Elt<DT>::hi(raw[1]) : 0.0f;
    }
#pragma unroll
    for (u32 i = 0; i < TPS; ++i) {
      float nrm = tree_sum(xv[i][0] * xv[i][0], xv[i][1] * xv[i][1], xv[i][2] * xv[i][2], xv[i][3] * xv[i][3]);
      float r = __builtin_sqrtf(nrm);
      r = r < FLT_MIN_F ? FLT_MIN_F : r;  // NaN stays NaN
      inv[i] = 1.0f / r;
    }
#pragma unroll
    for (u32 i = 0; i < TPS; ++i) {
#pragma unroll
      for (int c = 0; c < CPL; ++c) {
        acc[c] = acc[c] + xv[i][c];
        us[c] = us[c] + xv[i][c] * inv[i];
      }
    }
  }
  float fn = (float)n;
  float sq = tree_sum(us[0] * us[0], us[1] * us[1], us[2] * us[2], us[3] * us[3]);
  float sim = sq / (fn * fn);
  float mean[CPL];
#pragma unroll
  for (int c = 0; c < CPL; ++c) mean[c] = acc[c] / fn;
  u64 row = ((u64)b * (is_q ? H_q : H_kv) + h) * nb + blk;
  *(f32x4*)((is_q ? q_mean : k_mean) + row * PREDICT_CHANNELS + c0) = (f32x4){mean[0], mean[1], mean[2], mean[3]};
  if (lane == 0) (is_q ? q_sim : k_sim)[row] = sim;
}

// One pool symbol per input dtype, generated from sage_co/family.py PREDICT_POOL
#define SAGE_KERNEL(NAME, TEMPLATE, ...) \
  KERNEL void NAME(SAGE_PREDICT_POOL_PARAMS) { TEMPLATE<__VA_ARGS__>(SAGE_PREDICT_POOL_ARGS); }
#include "generated/gfx1201_sage_predict_kernels.h"

// ------------------------------------------------------------------------------------------------ select
// Dynamic LDS (host: sage_co.ops.predict.select_lds_bytes): N = the next power of two >= max(n_kv, 2) sort keys
// (u64), then N u32 slots holding each key block's score bits, then its integer mass.
extern __attribute__((shared, aligned(16))) u32 lds_dyn[];

INLINE u32 exp2_mass(float x, float mass_scale) {
  if (x < EXP2_CUTOFF) return 0u;
  float n = __builtin_floorf(x);
  float f = x - n;
  float a = C6;
  a = a * f + C5;
  a = a * f + C4;
  a = a * f + C3;
  a = a * f + C2;
  a = a * f + C1;
  float pw = 1.0f + a * f;
  float e = __builtin_ldexpf(pw, (int)n);  // exact: pw in [1, 2], n >= -32
  return (u32)__builtin_rintf(e * mass_scale);
}

// Sort key of key block j with finite score t: ascending keys = descending t, ties by ascending j (the spec's
// rank). t + 0 turns -0 into +0 (they rank as equal); the bits of a finite float map to an unsigned order-preserving
// u (negative: all bits flipped; else the sign bit set), and ~u sorts descending.
INLINE u64 rank_key(float t, u32 j) {
  u32 bits = __builtin_bit_cast(u32, t + 0.0f);
  u32 u = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return ((u64)~u << 32) | j;
}
#define KEY_PAD 0xffffffffffffffffull  // padding entries sort last

INLINE u32 shfl_up_u(u32 v, u32 d) {  // lane - d's value (callers use it only for lane >= d)
  return (u32)__builtin_amdgcn_ds_bpermute((int)(((lane_id() - d) & 31u) << 2), (int)v);
}

// Lanes of the wave hand LDS data to each other between phases. One wave's LDS operations take effect in order
// (docs/rdna4.md §Waits), so a wavefront-scope fence -- it keeps the compiler from moving the later loads above the
// stores, and emits no wait -- is enough.
INLINE void lds_handoff() { __builtin_amdgcn_fence(__ATOMIC_ACQ_REL, "wavefront"); }

// The key blocks query block x sees under the bottom-right aligned causal mask (row i sees keys j <= i + S_kv - S_q):
// those whose first key is <= last row + S_kv - S_q, a prefix 0 .. n_row - 1 (0 when the last row sees no key).
INLINE u32 causal_key_blocks(u32 x, u32 S_q, u32 S_kv, u32 n_kv) {
  long long last = (long long)min_u32(x * KEY_TILE + KEY_TILE - 1, S_q - 1);
  long long lim = last + (long long)S_kv - (long long)S_q;
  if (lim < 0) return 0;
  long long n = lim / KEY_TILE + 1;
  return n < (long long)n_kv ? (u32)n : n_kv;
}

INLINE void write_all(u8* __restrict__ out, u32 n_kv, u8 v) {
  for (u32 j = lane_id(); j < n_kv; j += 32) out[j] = v;
}

KERNEL void gfx1201_sage_predict_select(SAGE_PREDICT_SELECT_PARAMS) {
  u32 x = __builtin_amdgcn_workgroup_id_x();
  u32 h = __builtin_amdgcn_workgroup_id_y();
  u32 b = __builtin_amdgcn_workgroup_id_z();
  u32 lane = lane_id();
  u32 g = (u32)(((u64)h * kv_group_magic) >> 32);
  u64 row = ((u64)b * H_q + h) * n_q + x;
  u8* out = mask + row * n_kv;
  // causal: only the key blocks j < n_row hold a key some row of this query block sees (sage_co.masks.causal_tiles);
  // the others take no part in the ranking or the mass (SpargeAttn masks the pooled scores causally first) and are
  // never kept
  u32 n_row = causal ? causal_key_blocks(x, S_q, S_kv, n_kv) : n_kv;
  for (u32 j = n_row + lane; j < n_kv; j += 32) out[j] = 0;
  if (n_row == 0) return;
  if (!(q_sim[row] >= sim_threshold)) {  // the query block is not self-similar: it keeps every key block
    write_all(out, n_row, 1);
    return;
  }
  const float* qr = q_mean + row * PREDICT_CHANNELS;
  u64 bh = (u64)b * H_kv + g;
  const float* kt = k_mean + bh * n_kv * PREDICT_CHANNELS;
  const float* ks = k_sim + bh * n_kv;
  u32 N = 2;
  while (N < n_row) N <<= 1;
  u64* keys = (u64*)lds_dyn;
  u32* val = lds_dyn + 2 * N;  // score bits, then mass, of key block j

  // scores: t_j = (+0 + q[0] * k[0][j] + ... + q[D-1] * k[D-1][j], in order) * score_scale
  bool bad = false;
  float mx = -__builtin_inff();
  for (u32 j0 = 0; j0 < n_row; j0 += 32) {
    u32 j = j0 + lane, jl = min_u32(j, n_row - 1);
    const float* kr = kt + (u64)jl * PREDICT_CHANNELS;  // this lane's key row: 16-byte loads at immediate offsets
    float s = 0.0f;
    for (u32 d0 = 0; d0 < D; d0 += HEAD_DIM_STEP) {  // D is a multiple of HEAD_DIM_STEP: all loads of a step, then the sums
      f32x4 kv[HEAD_DIM_STEP / 4];
#pragma unroll
      for (u32 e = 0; e < HEAD_DIM_STEP / 4; ++e) kv[e] = *(const f32x4*)(kr + d0 + 4 * e);
#pragma unroll
      for (u32 e = 0; e < HEAD_DIM_STEP; ++e) s = s + qr[d0 + e] * kv[e / 4][e % 4];
    }
    float t = s * score_scale;
    if (j < n_row) {
      val[j] = __builtin_bit_cast(u32, t);
      keys[j] = rank_key(t, j);
      bad = bad || !(__builtin_fabsf(t) <= FLT_MAX_F);
      mx = t > mx ? t : mx;
    }
  }
  if (__builtin_amdgcn_ballot_w32(bad) != 0u) {  // a non-finite pooled score: the row cannot be ranked, keep all
    write_all(out, n_row, 1);
    return;
  }
  for (u32 j = n_row + lane; j < N; j += 32) keys[j] = KEY_PAD;
  lds_handoff();
#pragma unroll
  for (u32 m = 16; m >= 1; m >>= 1) {
    float o = shfl_xor(mx, m);
    mx = o > mx ? o : mx;
  }
  // integer masses (order-free sums)
  u32 wsum = 0;
  for (u32 j = lane; j < n_row; j += 32) {
    u32 w = exp2_mass(as_f(val[j]) - mx, mass_scale);
    val[j] = w;
    wsum += w;
  }
#pragma unroll
  for (u32 m = 16; m >= 1; m >>= 1) wsum += shfl_xor_u(wsum, m);
  u64 thresh = (u64)cdf_fixed * wsum;
  lds_handoff();

  // rank: bitonic sort of the N keys in LDS (ascending), N/2 disjoint compare-exchanges per step, 32 per pass of
  // the wave, a hand-off between steps
  for (u32 k = 2; k <= N; k <<= 1) {
    for (u32 jj = k >> 1; jj > 0; jj >>= 1) {
      for (u32 p = lane; p < N / 2; p += 32) {
        u32 i = 2 * p - (p & (jj - 1)), l = i + jj;
        u64 a = keys[i], c = keys[l];
        bool up = (i & k) == 0;
        u64 lo = a < c ? a : c, hi = a < c ? c : a;
        keys[i] = up ? lo : hi;
        keys[l] = up ? hi : lo;
      }
      lds_handoff();
    }
  }
  // sorted position pos holds key block idx: A = the masses of positions < pos (integers, any order), R = pos.
  // Lane L walks positions [L * per, (L + 1) * per); its start is an exclusive scan of the lanes' sums.
  u32 per = N >= 32 ? N / 32 : 1;
  u32 first = lane * per;
  u32 lane_sum = 0;
  for (u32 q = 0; q < per; ++q) {
    u32 pos = first + q;
    if (pos < n_row) lane_sum += val[(u32)keys[pos]];
  }
  u32 incl = lane_sum;
#pragma unroll
  for (u32 d = 1; d < 32; d <<= 1) {
    u32 o = shfl_up_u(incl, d);
    incl += lane >= d ? o : 0u;
  }
  u32 above = incl - lane_sum;
  for (u32 q = 0; q < per; ++q) {
    u32 pos = first + q;
    if (pos < n_row) {
      u32 idx = (u32)keys[pos];
      bool keep = topk_count ? pos < topk_count : ((u64)above << 31) < thresh;
      keep = keep || !(ks[idx] >= sim_threshold);  // a key block that is not self-similar is always kept
      out[idx] = keep ? 1 : 0;
      above += val[idx];
    }
  }
}
