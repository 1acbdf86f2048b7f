// gfx1201 (RDNA4, wave32) SageAttention *prepare* stage: Q/K -> INT8 per 32-token block, V -> FP8 e4m3 transposed,
// optional fused RMSNorm + rotate-half RoPE on Q and K. Headers-free HIP, built by build_asm.py with clang -O3
// (no fast-math: every '/' below is clang's correctly rounded div_scale/div_fmas/div_fixup sequence, and sqrtf is
// its correctly rounded v_sqrt_f32 + fma-correction sequence). Numerics: docs/numerics.md / sage_co/reference.py,
// matched bit for bit (k_mean: summation order differs, see stats below).
//
// Inputs (element strides are kernargs, read in place; the last dim is contiguous):
//   q [B, S_q, H_q, D], k and v [B, S_kv, H_kv, D], bf16, fp16 or fp32 (one symbol per dtype; fp32 is read as
//   fp32, one channel per dword, and goes through the same fp32 arithmetic unrounded), D a multiple of 8
//   (sage_co/abi.py HEAD_DIM_GRANULE: the host zero-pads any other D to one) up to D_PAD (64, 128 or 256, one
//   symbol per D_PAD): channels D..D_PAD-1 read as zero (never loaded), so a head dim of 32/48/80/96/112/160/200 is
//   padded without an extra pass. An HND tensor is the same memory with other strides.
//   D_PAD 256 (D 129..256) takes a row in two 128-channel halves: see half_row, quant_qk256, stats_k256.
// S_pad = round_up(S, 64) per tensor; a tile = 32 tokens of one (b, head) = one Q/K scale block, one wave32.
// GQA: K/V are prepared per K/V head (H_kv), Q per query head (H_q); nothing is replicated.
//
// One launch (sage_co/ops/prepare.py), gfx1201_sage_prepare_*, one symbol per (D_PAD, dtype, norm/RoPE rounding):
// suffix _d64/_d128/_d256, _bf16/_fp16/_fp32, then _once for norm_rope_rounding "once" (none = "per_op"; ROUND_*).
// A symbol serves every RoPE width through the kernarg rope_dim (rope_row), except the fp32 ones at D_PAD >= 128
// (sage_co/abi.py PREPARE_ROPE_IN_SYMBOL), one symbol per width there (suffix _rope32.._rope128 before _once).
// A runtime switch let LLVM merge the variants' tails and spill; one symbol each keeps every 16-bit kernel at
// <= 212 VGPRs, no scratch. fp32 (rows of D_PAD dwords, up to 256 VGPRs, no scratch) needs more care, see
// sum_sq_tree, sum_sq_lanes8, rope_once, rms_norm, quant_qk, load_v_pass and stats_v32.
// The grid is 1-D, one wave32 per work item, and a workgroup's item is its ticket (prepare_body: an atomic on
// counter[0], not its workgroup id): tickets [0, n_stats) are the stats items (1. below), then every batch's Q
// tiles, then per batch its K tiles and V tiles (2. below), which wait for their head's fold (wait_for_fold;
// forward progress: docs/rdna4.md §Forward progress).
// Varlen (sage_co/abi.py PREPARE_ARGS `varlen`, docs/numerics.md §Varlen): batch index b is packed
// sequence b, whose tokens, length and chunking come from cu_seqlens on the device; the outputs are packed per
// head with sequence b at row packed_row(cu[b], b) = 64 * ceil(cu[b] / 64) + 64 * b.
//
//  1. stats items (chunk, kv head, z = b * n_tens + which): stats_x * H_kv * B * n_tens. `tens` (abi.py STATS_*)
//     says which statistics run: V max (not for pv fp16), K sums (smooth_k), V sums (smooth_v); n_tens = how many,
//     and z % n_tens picks the (z % n_tens)-th of them. With smooth_v the V max pass keeps max v and min v. Chunk c covers tiles [c * tiles_per_chunk, ...) of the
//     ceil(S_kv / 32) tiles holding valid tokens. Writes, per (b, kv head, chunk):
//       vmax_part[b, h, c, D_PAD]  max |v| per channel (NaN wins: max of |x| 16-bit patterns as unsigned ints,
//                                  v_pk_max_u16 -- bf16 and fp16 both order that way), V lane layout as in quant;
//       ksum_part[b, h, c, D_PAD]  sum over the chunk's tokens of the normed/roped K per channel (smooth_k only):
//                                  lane = token, rows go through LDS, lane l adds channels CPL*l..CPL*l+CPL-1
//                                  (CPL = D_PAD / 32) of the tile's valid rows in token order, tiles in order.
//     The reduction runs in the same launch (reduce_if_last): the last of the n_wg = n_chunks * n_tens workgroups
//     of a (b, kv head) to finish -- an atomic counter per (b, kv head) says which -- folds that head's partials in
//     chunk order into v_scale = amax / 448, v_inv = 448 / amax (0 when amax == 0) (workspace), k_mean =
//     sum / S_kv; v_mode 1 (smooth_v): v_mean = V sum / S_kv and amax = max(|max v - v_mean|, |min v - v_mean|)
//     (fp32 subtraction is monotone: the largest |v - v_mean| sits at max v or min v); v_mode 2 (pv fp16): zeros,
//     and then tens = 0, grid (1, H_kv, B): no statistics, each workgroup only writes its head's zeros. The fold
//     order is fixed (chunk order), so the outputs do not depend on which workgroup came last.
//  2. tiles: B * (H_q * tq + 2 * H_kv * tkv), tq = S_q_pad / 32, tkv = S_kv_pad / 32: every batch's Q tiles
//     (head-major), then per batch its K tiles and its V tiles (head-major); a K or V tile starts after its head's
//     fold (it reads k_mean, or v_inv and v_mean).
//     Q/K: lane = token (one row per lane, D/8 16-byte loads; a padded token loads row S - 1 and is masked),
//     optional norm/RoPE on the packed row, x = f32(row) * c (Q) or f32(row) - k_mean (K), block amax = in-lane
//     max over D_PAD channels + 5 ds_bpermute steps, q = rint(x * inv) (x * inv + 1.5 * 2^23, whose low byte is
//     the int8) -> D_PAD/16 16-byte stores of the int8 row. V: lane = (channel group cg = lane % NCG of 8
//     channels, token group tg = lane / NCG of TPL = 32 / (32 / NCG) tokens), NCG = D_PAD / 8; TPL 16-byte loads,
//     then per channel TPL/4 packed fp8 dwords = TPL consecutive tokens of the transposed [D_PAD, S_kv_pad] row:
//     one TPL-byte store per channel. The transpose is free: v_cvt_pk_fp8_f32 picks the two values it packs.
//     V is quantized as v - v_mean (v_mean zeros without smooth_v: exact). pv_fp16: quant_v16 writes V^T in fp16
//     instead (same lanes, 2 bytes per token, no scale).
//
// Passes over the inputs (HBM reads): Q once; V twice (its per-channel scale needs all S_kv tokens before any
// token can be quantized: its stats items, then its tiles); K once, or twice with smooth_k (k_mean over all S_kv
// tokens first; the second reads mostly hit the Infinity Cache, docs/performance.md §The prepare stage).
// With norm/RoPE the K stats pass recomputes the normed/roped rows instead of storing them. The reduction reads
// only the small partials. One atomic per stats item, on a counter that only picks the folding item: every sum has
// a fixed order; maxima are order-independent.
//
// Memory speed: each wave keeps D/8 (Q/K) or TPL (V) independent 16-byte loads in flight per tile; the stats grid
// has B * H_kv * n_chunks * n_tens waves with n_chunks <= 64 chosen by the host (tiles_per_chunk = ceil(valid
// tiles / 64)).
//
// Non-finite and tiny values (docs/numerics.md §Non-finite, reference.py _round_int8 / quantize_v):
//   Q/K block: amax = NaN or inf -> scale = amax / 127 and every int8 0 (NaN * anything -> NaN -> 0; inv = 0
//   makes finite x 0 and inf * 0 NaN -> 0). inv = 127 / amax = inf (tiny amax) -> int8 = 127 * sign(x),
//   0 for x = +-0. Otherwise x * inv is finite and |x * inv| <= 127 * (1 + 2^-24): rint, no clamp needed (the
//   three cases are wave-uniform branches on an SGPR, so the common path stays short).
//   V channel: amax and inv finite and nonzero for all 8 channels of every lane (wave ballot; lanes of padded
//   channels count as fast: their zeros times inv 0 are +0) -> |v * inv| <= 448 * (1 + 2^-24), which
//   v_cvt_pk_fp8_f32 (RNE) rounds to 448 at most; otherwise clamp with v_med3, keep v = +-0 where inv = inf
//   (tiny amax: 0 * inf would be NaN), map NaN (med3 would turn it into -448) to +NaN -> 0x7F, and force padded
//   tokens to 0.
//   fp32 inputs: "rounding to the input dtype" is the identity (Elt<FP32>::round), so the two conventions differ
//   only in the RMSNorm sum order, and the per_op RoPE is rope_once (fp32 tables, the same products and sum);
//   max |v| / max v / min v are taken on the fp32 patterns (NaN wins, as for 16 bits); pv fp16 V^T is
//   v_cvt_f16_f32 of the fp32 value (RNE, torch's .to(float16)).
//   bf16 rounding in norm/RoPE: RNE, NaN -> (bits >> 16) | 0x40 (torch's .to(bfloat16)), see bf16_bits; fp16
//   rounding: v_cvt_f16_f32 (RNE, overflow -> inf, fp16 denormals kept: clang's descriptor sets
//   float_denorm_mode_16_64 = 3, docs/rdna4.md §Entry FP mode; tests/kernels/test_prepare_vs_reference.py checks every
//   symbol). A NaN's
//   payload only ever reaches a scale (NaN == NaN in the spec), never an int8/fp8 value.
//
// Kernargs: sage_co/abi.py PREPARE_ARGS, declared there once with what each field holds (docs/abi.md has the
// offsets; explicit only, no hidden arguments); the parameter list is SAGE_PREPARE_PARAMS of generated/sage_abi.h.
// Strides are in elements: *_sb (batch), *_ss (token), *_sh (head); rope_dim is the RoPE width (0 = none; rope_row).
// q_norm / k_norm = 0 means no RMSNorm (the weight pointer is then never read); without RoPE cos/sin are unused.
// cos/sin: [max(S_q, S_kv), rope_dim], row = position (token index) for Q and K alike; in the input dtype for the
// per_op symbols, fp32 for the _once ones (the host upcasts a table given in the input dtype).

#pragma clang fp contract(off)  // every product and sum is rounded on its own, like the torch reference

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define INLINE __device__ static inline __attribute__((always_inline))
#define MEMBER INLINE  // a static member function (the static is in INLINE)
#define KERNEL extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(32, 32)))

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;
typedef signed char i8;
typedef u32 u32x2 __attribute__((ext_vector_type(2)));
typedef u32 u32x4 __attribute__((ext_vector_type(4)));
typedef float f32x4 __attribute__((ext_vector_type(4)));
typedef u16 u16x2 __attribute__((ext_vector_type(2)));

// SCALE_BLOCK (tokens per tile = per Q/K scale), PREPARE_MAX_CHUNKS (stats chunks per (b, K/V head) at most), the
// dtype selectors BF16 / FP16 / FP32, ROUND_*, STATS_*, REDUCE_V_*: generated from sage_co/abi.py and family.py
#include "generated/sage_abi.h"

// ------------------------------------------------------------------------------------------------ helpers
INLINE u32 lane_id() { return __builtin_amdgcn_workitem_id_x(); }
INLINE float as_f(u32 u) { return __builtin_bit_cast(float, u); }
INLINE u32 as_u(float f) { return __builtin_bit_cast(u32, f); }
INLINE float is_nan_sel(float f, float if_nan, float other) { return f != f ? if_nan : other; }
INLINE u32 min_u32(u32 a, u32 b) { return a < b ? a : b; }

// f32 -> bf16 round-half-even as a bit pattern in the HIGH half of the result (the low half is junk).
// NaN needs no select (a per-element select here was turned into exec-mask branches by LLVM): every NaN this
// kernel rounds is a quiet NaN whose low 16 bits are zero -- the inputs are bf16 and VALU arithmetic returns an
// input NaN quieted or the canonical 0x7fc00000 -- so adding at most 0x8000 cannot carry into the high half,
// and the high half is the NaN's own top bits, quiet bit set: exactly torch's (bits >> 16) | 0x40.
INLINE u32 bf16_bits(float f) {
  u32 u = as_u(f);
  return u + 0x7fffu + ((u >> 16) & 1u);
}
INLINE float f16_to_f(u32 bits16) { return (float)__builtin_bit_cast(_Float16, (u16)bits16); }
INLINE u32 f_to_f16(float f) { return (u32)__builtin_bit_cast(u16, (_Float16)f); }  // v_cvt_f16_f32 (RNE)

// The 16-bit input type: channel 2j of a packed dword is bits 15:0, channel 2j+1 bits 31:16 (the memory layout).
template <int DT> struct Elt;
template <> struct Elt<BF16> {
  static constexpr int BYTES = 2;
  MEMBER float lo(u32 p) { return as_f(p << 16); }
  MEMBER float hi(u32 p) { return as_f(p & 0xffff0000u); }
  MEMBER float round(float f) { return as_f(bf16_bits(f) & 0xffff0000u); }  // f32 value of bf16(f)
  // bf16(a) | bf16(b) << 16. v_perm_b32 selector bytes 0-3 pick bytes of the second operand, 4-7 of the first.
  MEMBER u32 pack(float a, float b) { return __builtin_amdgcn_perm(bf16_bits(b), bf16_bits(a), 0x07060302u); }
  // |x| bit pattern (max over these as unsigned 16-bit ints = NaN-propagating max |x|) -> f32
  MEMBER u32 abs_to_f32_bits(u32 h) { return h << 16; }
};
// The empty asm makes a value opaque and puts it in a VGPR: an f32 result before it is rounded (otherwise LLVM
// narrows fp16(f32(a) * f32(b)) into v_pk_mul_f16 / v_fma_mix*), and a packed pair before it is widened (otherwise
// wave-uniform weights and cos/sin are widened with the SALU float ops s_cvt_f32_f16 / s_cvt_hi_f32_f16). Same
// values either way -- the f32 product of two fp16 is exact -- but those are instructions the emulator does not
// implement, and an unknown instruction is an error there.
INLINE float opaque(float f) {
  __asm__("" : "+v"(f));
  return f;
}
INLINE u32 opaque_u(u32 u) {
  __asm__("" : "+v"(u));
  return u;
}
template <> struct Elt<FP16> {
  static constexpr int BYTES = 2;
  MEMBER float lo(u32 p) { return f16_to_f(opaque_u(p) & 0xffffu); }
  MEMBER float hi(u32 p) { return f16_to_f(opaque_u(p) >> 16); }
  MEMBER float round(float f) { return (float)(_Float16)opaque(f); }
  MEMBER u32 pack(float a, float b) { return f_to_f16(opaque(a)) | (f_to_f16(opaque(b)) << 16); }
  MEMBER u32 abs_to_f32_bits(u32 h) { return as_u(f16_to_f(h)); }
};
// fp32 inputs: one channel per dword (channel i of a packed row is dword i), nothing to round.
template <> struct Elt<FP32> {
  static constexpr int BYTES = 4;
  MEMBER float round(float f) { return f; }
  MEMBER u32 abs_to_f32_bits(u32 h) { return h; }
};

// Dwords that hold N channels of type DT (a row of D_PAD channels is u32[WORDS(DT, DP)]).
#define WORDS(DT, N) ((N) * Elt<DT>::BYTES / 4)

// Channel i of packed dwords (the memory layout): 16 bits: channel 2j in bits 15:0 of dword j, 2j+1 in 31:16;
// fp32: dword i.
template <int DT, int N>
INLINE float chan(const u32 (&w)[N], int i) {
  if constexpr (Elt<DT>::BYTES == 4)
    return as_f(w[i]);
  else
    return (i & 1) ? Elt<DT>::hi(w[i >> 1]) : Elt<DT>::lo(w[i >> 1]);
}
// Channels 2p and 2p + 1 := a and b rounded to DT, or both +0 when !keep (the select is on the packed bits, as the
// 16-bit kernels always did).
template <int DT, int N>
INLINE void set_pair(u32 (&w)[N], int p, float a, float b, bool keep = true) {
  if constexpr (Elt<DT>::BYTES == 4) {
    w[2 * p] = keep ? as_u(a) : 0u;
    w[2 * p + 1] = keep ? as_u(b) : 0u;
  } else {
    w[p] = keep ? Elt<DT>::pack(a, b) : 0u;
  }
}
// Element `elems` of a DT tensor at base (the kernargs' element strides and offsets are in elements of DT).
template <int DT>
INLINE const void* at(const void* base, u64 elems) { return (const char*)base + elems * Elt<DT>::BYTES; }

INLINE u32x4 load16(const void* p) { return *(const u32x4*)p; }
INLINE void store16(void* p, u32x4 v) { *(u32x4*)p = v; }
// 8 consecutive channels of DT at p (16-byte aligned): one 16-byte load (16 bits) or two (fp32).
template <int DT>
INLINE void load8(u32 (&w)[WORDS(DT, 8)], const void* p) {
#pragma unroll
  for (int j = 0; j < WORDS(DT, 8) / 4; ++j) {
    u32x4 v = load16((const char*)p + 16 * j);
    w[4 * j] = v[0], w[4 * j + 1] = v[1], w[4 * j + 2] = v[2], w[4 * j + 3] = v[3];
  }
}

// wave32 all-lane reduction through ds_bpermute (docs/rdna4.md §Memory: ds_bpermute_b32 reads lane addr/4).
INLINE u32 wave_max_u32(u32 v) {
  u32 lane = lane_id();
#pragma unroll
  for (u32 m = 16; m >= 1; m >>= 1) {
    u32 o = (u32)__builtin_amdgcn_ds_bpermute((int)(((lane ^ m) & 31u) << 2), (int)v);
    v = v > o ? v : o;
  }
  return v;
}

// A row of one token and head: D_PAD channels packed in WORDS(DT, D_PAD) dwords (D_PAD/2, fp32: D_PAD). Between the optional stages the row stays
// packed, so a skipped stage costs no registers. Channels >= D are zero and stay zero through norm and RoPE.
template <int DT, int DP>
INLINE float ch(const u32 (&row)[WORDS(DT, DP)], int i) {
  return chan<DT>(row, i);
}

// Callers pass a row that exists (a padded token loads token S - 1, t_ld = min(t, S - 1)) and mask the result,
// so no load is ever predicated. Channel groups past D (n16 = D / 8 groups of 8 channels, wave-uniform) load group
// n16 - 1 again (in bounds, cached) and are zeroed with a select on the uniform condition: branches around the
// loads made LLVM shuffle the whole row between registers.
// g0: the first group (D_PAD 256 loads a row in halves of 16 groups, see half_row).
template <int DT, int DP>
INLINE void load_row(u32 (&row)[WORDS(DT, DP)], const void* __restrict__ p, u32 n16, u32 g0 = 0) {
  constexpr int W8 = WORDS(DT, 8);
#pragma unroll
  for (int j = 0; j < DP / 8; ++j) {
    u32 v[W8];
    load8<DT>(v, at<DT>(p, 8 * min_u32(g0 + (u32)j, n16 - 1)));
    bool real = g0 + (u32)j < n16;
#pragma unroll
    for (int e = 0; e < W8; ++e) row[W8 * j + e] = real ? v[e] : 0u;
  }
}

// The two rounding conventions of the optional norm/RoPE (sage_co/abi.py PREPARE_ROUNDINGS, docs/numerics.md
// §Optional RMSNorm + rotate-half RoPE); one stats and one quant symbol per convention.
// ROUND_PER_OP: the HF-transformers chain, every op rounded to the input dtype, tables in the input dtype;
// ROUND_ONCE: F.rms_norm (fp32, one rounding), then RoPE in fp32 with fp32 tables, one rounding

// Sum of x*x over the row, per_op convention (reference.mean_square): t = x*x over the D_PAD channels (zeros past
// D), t[i] += t[i + w] for w = D_PAD/2 .. 1.
// Node i of level W of that tree, evaluated depth first (fp32 rows: O(log D_PAD) partial sums live instead of
// D_PAD / 2 next to the D_PAD-VGPR row; the same operations on the same operands, so the same bits).
template <int DT, int DP, int W>
INLINE float tree_node(const u32 (&row)[WORDS(DT, DP)], int i) {
  if constexpr (W == DP / 2) {
    float a = ch<DT, DP>(row, i) * ch<DT, DP>(row, i);
    float b = ch<DT, DP>(row, i + W) * ch<DT, DP>(row, i + W);
    return a + b;
  } else {
    return tree_node<DT, DP, 2 * W>(row, i) + tree_node<DT, DP, 2 * W>(row, i + W);
  }
}
template <int DT, int DP>
INLINE float sum_sq_tree(const u32 (&row)[WORDS(DT, DP)]) {
  if constexpr (DT == FP32) return tree_node<DT, DP, 1>(row, 0);
  constexpr int HALF = DP / 2;
  float t[HALF];
#pragma unroll
  for (int i = 0; i < HALF; ++i) {
    float a = ch<DT, DP>(row, i) * ch<DT, DP>(row, i);
    float b = ch<DT, DP>(row, i + HALF) * ch<DT, DP>(row, i + HALF);
    t[i] = a + b;
  }
#pragma unroll
  for (int w = HALF / 2; w >= 1; w >>= 1) {
#pragma unroll
    for (int i = 0; i < w; ++i) t[i] = t[i] + t[i + w];
  }
  return t[0];
}

// Sum of x*x over the D real channels, once convention (reference.mean_square_lanes8): the order of torch's CPU
// sum over a contiguous row, which F.rms_norm uses: vectors j of 8 channels (8j..8j+7) go to 8-lane accumulator
// j % 4 while j < 4 * floor(nv / 4) (nv = D / 8), the rest to accumulator 0; then ((acc0 + acc1) + acc2) + acc3,
// then its 8 lanes in order. D is a kernarg, so the split is a select on a uniform condition; padded channels are
// zeros, and adding +0 to a sum of squares is exact.
template <int DT, int DP>
INLINE float sum_sq_lanes8(const u32 (&row)[WORDS(DT, DP)], u32 D) {
  constexpr int NV = DP / 8;
  u32 split = 4 * (D / 32);  // vectors below split use all four accumulators
  if constexpr (DT == FP32) {  // lane by lane (4 accumulators live, not 32, next to the fp32 row): the same chains
    float f = 0.0f;
#pragma unroll
    for (int l = 0; l < 8; ++l) {
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int j = 0; j < NV; ++j) {
        bool four = (u32)j < split;
        float v = ch<DT, DP>(row, 8 * j + l);
        float t = v * v;
        if (j % 4 == 0) {
          acc[0] = acc[0] + t;
        } else {
          acc[j % 4] = acc[j % 4] + (four ? t : 0.0f);
          acc[0] = acc[0] + (four ? 0.0f : t);
        }
      }
      f = f + (((acc[0] + acc[1]) + acc[2]) + acc[3]);
    }
    return f;
  }
  float acc[4][8];
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int l = 0; l < 8; ++l) acc[k][l] = 0.0f;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    bool four = (u32)j < split;
#pragma unroll
    for (int l = 0; l < 8; ++l) {
      float v = ch<DT, DP>(row, 8 * j + l);
      float t = v * v;
      if (j % 4 == 0) {
        acc[0][l] = acc[0][l] + t;
      } else {
        acc[j % 4][l] = acc[j % 4][l] + (four ? t : 0.0f);
        acc[0][l] = acc[0][l] + (four ? 0.0f : t);
      }
    }
  }
  float f = 0.0f;
#pragma unroll
  for (int l = 0; l < 8; ++l) f = f + (((acc[0][l] + acc[1][l]) + acc[2][l]) + acc[3][l]);
  return f;
}

// The same pointer, opaque to the compiler (an SGPR pair through an empty volatile asm): loads through it are not
// merged with other loads of the same memory, so a row loaded twice (D_PAD 256: the streamed norm sum, then the
// halves) is really loaded again instead of kept live.
template <typename T>
INLINE T* launder(T* p) {
  __asm__ volatile("" : "+s"(p));
  return p;
}

// RMSNorm (reference.rms_norm): ms = sum / D, r = 1 / sqrt(ms + eps); per_op: y = round(x * r), then
// y = round(y * weight); once: y = round((x * r) * weight). Only the D real channels (the padded ones stay 0 even
// when r = inf). rms_apply scales the DP channels of row, groups g0 .. g0 + DP/8 - 1 of the head dim (g0 > 0: the
// second half of a D_PAD 256 row, half_row). PACED (half_row, fp32): a scheduling barrier every 4 groups, so at most
// 4 groups of weights are in flight (the 128 fp32 weights of a half hoisted next to its 128-VGPR row spilled).
INLINE float rms_r(float sum, u32 D, float eps) {
  float ms = sum / (float)D;
  return 1.0f / __builtin_sqrtf(ms + eps);
}
template <int DT, int DP, int RM, bool PACED = false>
INLINE void rms_apply(u32 (&row)[WORDS(DT, DP)], const u16* __restrict__ weight, float r, u32 n16, u32 g0) {
#pragma unroll
  for (int j = 0; j < DP / 8; ++j) {
    if (PACED && j % 4 == 0) __builtin_amdgcn_sched_barrier(0);
    u32 w[WORDS(DT, 8)];
    // wave-uniform address: scalar loads; fp32 weights through a VGPR offset of 0 instead (vector loads of the same
    // address): 8 SGPRs per group hoisted for all D_PAD channels overflowed the SGPRs (a stack slot, no scratch use)
    u32 wg = 8 * min_u32(g0 + (u32)j, n16 - 1) + (DT == FP32 ? opaque_u(0u) : 0u);
    load8<DT>(w, at<DT>(weight, wg));
    bool real = g0 + (u32)j < n16;                             // padded groups stay 0 (0 * inf would be NaN)
#pragma unroll
    for (int e = 0; e < 4; ++e) {  // channel pair e of the group: channels 8j + 2e, 8j + 2e + 1
      int c = 8 * j + 2 * e;
      float lo = ch<DT, DP>(row, c) * r, hi = ch<DT, DP>(row, c + 1) * r;
      if constexpr (RM == ROUND_PER_OP) lo = Elt<DT>::round(lo), hi = Elt<DT>::round(hi);
      lo = lo * chan<DT>(w, 2 * e);
      hi = hi * chan<DT>(w, 2 * e + 1);
      set_pair<DT>(row, 4 * j + e, lo, hi, real);
    }
  }
}
template <int DT, int DP, int RM>
INLINE void rms_norm(u32 (&row)[WORDS(DT, DP)], const u16* __restrict__ weight, float eps, u32 n16, u32 D) {
  float sum = RM == ROUND_ONCE ? sum_sq_lanes8<DT, DP>(row, D) : sum_sq_tree<DT, DP>(row);
  rms_apply<DT, DP, RM>(row, weight, rms_r(sum, D, eps), n16, 0u);
}

// Rotate-half RoPE on channels [0, RD), per_op convention (reference.rope):
// out = round(round(y*cos) + round(rot*sin)), rot = cat(-y[H2:RD], y[0:H2]). cs/sn point at this token's cos/sin
// rows (RD values each). Channel i < H2 pairs with i + H2; both outputs are made from the two old values and
// written back in place.
// SINGLE (the D_PAD 256 half rows, half_row): one chunk of tables at a time, loaded after the previous chunk's math,
// as rope_once does for fp32 (16 VGPRs fewer).
template <int DT, int DP, int RD, bool SINGLE = false>
INLINE void rope_per_op(u32 (&row)[DP / 2], const u16* __restrict__ cs, const u16* __restrict__ sn) {  // 16-bit DT
  typedef Elt<DT> E;
  constexpr int H2 = RD / 2, CHUNKS = H2 / 8;
  // cos/sin go in chunks of 8 channel pairs, double-buffered: chunk j + 1 is loading while chunk j computes. The
  // scheduling barrier keeps LLVM from hoisting every chunk's loads to the top (RD = 128: 128 more VGPRs, which
  // spilled in the stats kernel).
  u32x4 cur[4] = {load16(cs), load16(cs + H2), load16(sn), load16(sn + H2)};
#pragma unroll
  for (int j = 0; j < CHUNKS; ++j) {
    u32x4 nxt[4] = {cur[0], cur[1], cur[2], cur[3]};
    if (j + 1 < CHUNKS && !SINGLE) {
      int o = 8 * (j + 1);
      nxt[0] = load16(cs + o); nxt[1] = load16(cs + H2 + o); nxt[2] = load16(sn + o); nxt[3] = load16(sn + H2 + o);
    }
    u32x4 c_lo = cur[0], c_hi = cur[1], s_lo = cur[2], s_hi = cur[3];
#pragma unroll
    for (int e = 0; e < 4; ++e) {          // dword e of the chunk: channels i, i + 1
      int d1 = 4 * j + e, d2 = d1 + H2 / 2;  // dwords holding channels i, i+1 and i+H2, i+H2+1
      float o1[2], o2[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float y1 = half ? E::hi(row[d1]) : E::lo(row[d1]);
        float y2 = half ? E::hi(row[d2]) : E::lo(row[d2]);
        float c1 = half ? E::hi(c_lo[e]) : E::lo(c_lo[e]), s1 = half ? E::hi(s_lo[e]) : E::lo(s_lo[e]);
        float c2 = half ? E::hi(c_hi[e]) : E::lo(c_hi[e]), s2 = half ? E::hi(s_hi[e]) : E::lo(s_hi[e]);
        o1[half] = E::round(y1 * c1) + E::round(-y2 * s1);  // rot[i] = -y[i + H2]
        o2[half] = E::round(y2 * c2) + E::round(y1 * s2);   // rot[i + H2] = y[i]
      }
      row[d1] = E::pack(o1[0], o1[1]);
      row[d2] = E::pack(o2[0], o2[1]);
    }
    __builtin_amdgcn_sched_barrier(0);
#pragma unroll
    for (int q = 0; q < 4; ++q) cur[q] = nxt[q];
    if (j + 1 < CHUNKS && SINGLE) {
      int o = 8 * (j + 1);
      cur[0] = load16(cs + o); cur[1] = load16(cs + H2 + o); cur[2] = load16(sn + o); cur[3] = load16(sn + H2 + o);
    }
  }
}

// Rotate-half RoPE, once convention (reference.rope): out = round(y*cos + rot*sin) in fp32 (each product and the
// sum rounded to fp32, one rounding to the input dtype), cos/sin fp32 rows of RD values (the host upcasts tables
// given in the input dtype, exactly). Chunks of 4 channel pairs (one 16-byte load per table half), double-buffered
// as in rope_per_op: the same 16 VGPRs of table in flight.
// fp32 rows take D_PAD VGPRs: the tables of one chunk at a time (16 VGPRs fewer, no prefetch), which keeps the fp32
// D_PAD 128 stats kernels (K row + V statistics in one symbol) within 256 VGPRs without scratch.
#ifndef ROPE_SINGLE_BUFFER
#define ROPE_SINGLE_BUFFER(DT) ((DT) == FP32)
#endif
template <int DT, int DP, int RD, bool SINGLE = false>  // SINGLE: single-buffered for every DT (see rope_per_op)
INLINE void rope_once(u32 (&row)[WORDS(DT, DP)], const float* __restrict__ cs, const float* __restrict__ sn) {
  typedef Elt<DT> E;
  constexpr int H2 = RD / 2, CHUNKS = H2 / 4;
  f32x4 cur[4] = {*(const f32x4*)cs, *(const f32x4*)(cs + H2), *(const f32x4*)sn, *(const f32x4*)(sn + H2)};
#pragma unroll
  for (int j = 0; j < CHUNKS; ++j) {
    f32x4 nxt[4] = {cur[0], cur[1], cur[2], cur[3]};
    if (j + 1 < CHUNKS && !(SINGLE || ROPE_SINGLE_BUFFER(DT))) {
      int o = 4 * (j + 1);
      nxt[0] = *(const f32x4*)(cs + o); nxt[1] = *(const f32x4*)(cs + H2 + o);
      nxt[2] = *(const f32x4*)(sn + o); nxt[3] = *(const f32x4*)(sn + H2 + o);
    }
#pragma unroll
    for (int e = 0; e < 2; ++e) {          // channel pair e of the chunk: channels i, i + 1
      int d1 = 2 * j + e, d2 = d1 + H2 / 2;  // the pairs holding channels i, i+1 and i+H2, i+H2+1
      float o1[2], o2[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float y1 = ch<DT, DP>(row, 2 * d1 + half);
        float y2 = ch<DT, DP>(row, 2 * d2 + half);
        int c = 2 * e + half;
        o1[half] = y1 * cur[0][c] + (-y2) * cur[2][c];  // rot[i] = -y[i + H2]
        o2[half] = y2 * cur[1][c] + y1 * cur[3][c];     // rot[i + H2] = y[i]
      }
      set_pair<DT>(row, d1, o1[0], o1[1]);
      set_pair<DT>(row, d2, o2[0], o2[1]);
    }
    __builtin_amdgcn_sched_barrier(0);
#pragma unroll
    for (int q = 0; q < 4; ++q) cur[q] = nxt[q];
    if (j + 1 < CHUNKS && (SINGLE || ROPE_SINGLE_BUFFER(DT))) {  // the next chunk's tables after this chunk's math
      int o = 4 * (j + 1);
      cur[0] = *(const f32x4*)(cs + o); cur[1] = *(const f32x4*)(cs + H2 + o);
      cur[2] = *(const f32x4*)(sn + o); cur[3] = *(const f32x4*)(sn + H2 + o);
    }
  }
}

// The optional RoPE of one Q or K row of token t (the loaded token): cos/sin are [*, W] tables of u16 in the
// input dtype (per_op) or of fp32 (once).
template <int DT, int DP, int W, int RM, bool SINGLE>
INLINE void rope_width(u32 (&row)[WORDS(DT, DP)], const void* __restrict__ cos, const void* __restrict__ sin, u32 t) {
  // fp32 per_op: round() is the identity and the tables are fp32 (the input dtype), so the per_op chain
  // round(round(y*c) + round(rot*s)) is rope_once's y*c + rot*s
  if constexpr (RM == ROUND_ONCE || DT == FP32)
    rope_once<DT, DP, W, SINGLE>(row, (const float*)cos + (u64)t * W, (const float*)sin + (u64)t * W);
  else
    rope_per_op<DT, DP, W, SINGLE>(row, (const u16*)cos + (u64)t * W, (const u16*)sin + (u64)t * W);
}
// The RoPE width is the kernarg rope_dim (0 = none; a width of sage_co/abi.py PREPARE_ROPE_DIMS <= D_PAD, checked on
// the host). RD = ROPE_RUNTIME: a wave-uniform branch on rd to that width's unrolled body, so one symbol serves every
// width and the rest of the kernel (most of its code) is compiled once, not once per width (build_asm.py --check's
// clang time). RD >= 0: the width fixed at compile time (rd equals it): the fp32 symbols at D_PAD >= 128, whose
// rows fill the register file, are one symbol per width (prepare_body), since the union of all widths in one body
// spills there (~500 bytes of scratch per lane with clang 22).
#define ROPE_RUNTIME (-1)
template <int DT, int DP, int RD, int RM, bool SINGLE = false>
INLINE void rope_row(u32 (&row)[WORDS(DT, DP)], const void* __restrict__ cos, const void* __restrict__ sin, u32 t,
                     u32 rd) {
  if constexpr (RD > 0) {
    rope_width<DT, DP, RD, RM, SINGLE>(row, cos, sin, t);
  } else if constexpr (RD == ROPE_RUNTIME) {
    switch (rd) {
      case 32: rope_width<DT, DP, 32, RM, SINGLE>(row, cos, sin, t); break;
      case 64: rope_width<DT, DP, 64, RM, SINGLE>(row, cos, sin, t); break;
      case 96: if constexpr (DP >= 96) rope_width<DT, DP, 96, RM, SINGLE>(row, cos, sin, t); break;
      case 128: if constexpr (DP >= 128) rope_width<DT, DP, 128, RM, SINGLE>(row, cos, sin, t); break;
      default: break;  // 0: no RoPE
    }
  }
}
template <int DT, int DP, int RD, int RM>
INLINE void norm_rope_row(u32 (&row)[WORDS(DT, DP)], int norm, const u16* __restrict__ weight, float eps, u32 n16, u32 D,
                          const void* __restrict__ cos, const void* __restrict__ sin, u32 t, u32 rd) {
  if (norm) rms_norm<DT, DP, RM>(row, weight, eps, n16, D);
  rope_row<DT, DP, RD, RM>(row, cos, sin, t, rd);
}

// ------------------------------------------------------------------------------------------------ D_PAD 256
// At D_PAD 256 a token row is 128 VGPRs packed (16-bit) or 256 (fp32: the whole register file), and the D_PAD <= 128
// code keeps a float per channel next to it (quant_qk's x[]): instantiated at 256 every symbol tried spilled (140-750
// bytes of scratch per lane with clang 22). There the row goes in two halves of 128 channels (half 0: channels
// 0..127, half 1: 128..255), each packed like a D_PAD 128 row; D > 128 at D_PAD 256, so half 1 has n16 - 16 >= 1
// real groups. RoPE is at most 128 channels wide (sage_co/abi.py PREPARE_ROPE_DIMS): the rotate-half partners i and
// i + rope_dim / 2 < 128 are both in half 0. RMSNorm needs the sum of squares of the whole row before either half is
// scaled: sum_sq_tree_256 / sum_sq_lanes8_256 stream the row from memory (16-byte loads of 8 channels, which the
// halves' loads right after find in the cache) in the spec's order, the same operations on the same operands as
// sum_sq_tree / sum_sq_lanes8, so the same bits. Everything after that is per channel, as at D_PAD <= 128.
#define HALF_CH 128  // channels per half row

// Channels 8g .. 8g + 7 of the row at p (8 channels of DT, 16-byte aligned), zeros past D: like load_row, a group
// past n16 loads group n16 - 1 again (in bounds) and is zeroed with a select.
template <int DT>
INLINE void load_group(u32 (&w)[WORDS(DT, 8)], const void* __restrict__ p, u32 g, u32 n16) {
  load8<DT>(w, at<DT>(p, 8 * min_u32(g, n16 - 1)));
  bool real = g < n16;
#pragma unroll
  for (int e = 0; e < WORDS(DT, 8); ++e) w[e] = real ? w[e] : 0u;
}

// per_op (reference.mean_square) over 256 channels, by groups of 8: leaf j < 16 is level w = 128 (t[i] + t[i + 128]
// for channels i = 8j .. 8j + 7), level G < 16 (w = 8G) adds group j + G to group j, depth first (a few groups of
// partial sums live; a scheduling barrier before every 4th leaf keeps LLVM from hoisting all 64 leaf loads), then
// w = 4, 2, 1 inside group 0.
template <int DT, int G>
INLINE void tree_group(float (&t)[8], const void* __restrict__ p, u32 n16, u32 j) {
  if constexpr (G == 16) {
    if (j % 4 == 0) __builtin_amdgcn_sched_barrier(0);  // j is a constant here (the recursion is inlined)
    u32 lo[WORDS(DT, 8)], hi[WORDS(DT, 8)];
    load_group<DT>(lo, p, j, n16);
    load_group<DT>(hi, p, j + 16, n16);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      float a = chan<DT>(lo, e) * chan<DT>(lo, e);
      float b = chan<DT>(hi, e) * chan<DT>(hi, e);
      t[e] = a + b;
    }
  } else {
    float u[8];
    tree_group<DT, 2 * G>(t, p, n16, j);
    tree_group<DT, 2 * G>(u, p, n16, j + G);
#pragma unroll
    for (int e = 0; e < 8; ++e) t[e] = t[e] + u[e];
  }
}
template <int DT>
INLINE float sum_sq_tree_256(const void* __restrict__ p, u32 n16) {
  float t[8];
  tree_group<DT, 1>(t, p, n16, 0u);
#pragma unroll
  for (int w = 4; w >= 1; w >>= 1) {
#pragma unroll
    for (int i = 0; i < w; ++i) t[i] = t[i] + t[i + w];
  }
  return t[0];
}

// once (reference.mean_square_lanes8) over 256 channels: sum_sq_lanes8's accumulators and order, group j from memory,
// a scheduling barrier every 8 groups (all 32 groups' loads hoisted are 128 / 256 VGPRs).
template <int DT>
INLINE float sum_sq_lanes8_256(const void* __restrict__ p, u32 n16, u32 D) {
  u32 split = 4 * (D / 32);  // vectors below split use all four accumulators
  float acc[4][8];
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int l = 0; l < 8; ++l) acc[k][l] = 0.0f;
#pragma unroll
  for (int j = 0; j < 256 / 8; ++j) {
    if (j % 8 == 0) __builtin_amdgcn_sched_barrier(0);
    u32 w[WORDS(DT, 8)];
    load_group<DT>(w, p, (u32)j, n16);
    bool four = (u32)j < split;
#pragma unroll
    for (int l = 0; l < 8; ++l) {
      float v = chan<DT>(w, l);
      float t = v * v;
      if (j % 4 == 0) {
        acc[0][l] = acc[0][l] + t;
      } else {
        acc[j % 4][l] = acc[j % 4][l] + (four ? t : 0.0f);
        acc[0][l] = acc[0][l] + (four ? 0.0f : t);
      }
    }
  }
  float f = 0.0f;
#pragma unroll
  for (int l = 0; l < 8; ++l) f = f + (((acc[0][l] + acc[1][l]) + acc[2][l]) + acc[3][l]);
  return f;
}

// r of the row at element `off` of base (rms_norm's), from the streamed sum of the norm_rope_rounding convention RM.
// base is laundered: otherwise LLVM reuses these loads for the halves' loads of the same addresses and keeps the
// whole row live from here (256 VGPRs in fp32).
template <int DT, int RM>
INLINE float rms_r_256(const u16* base, u64 off, u32 n16, u32 D, float eps) {
  const void* p = at<DT>(launder(base), off);
  return rms_r(RM == ROUND_ONCE ? sum_sq_lanes8_256<DT>(p, n16, D) : sum_sq_tree_256<DT>(p, n16), D, eps);
}

// Half hh (wave-uniform) of the row at p (token t: the cos/sin row), normed with r when norm != 0 and, half 0,
// roped (rd > 0). The callers run it in loops that are not unrolled (#pragma nounroll, hh the counter), so one
// half's registers are live at a time: unrolled, LLVM hoisted the other half's loads, weights and K means (128
// VGPRs or SGPRs each) into the first half's arithmetic and spilled, whatever barriers were put in its way.
template <int DT, int RD, int RM>
INLINE void half_row(u32 (&hr)[WORDS(DT, HALF_CH)], const void* __restrict__ p, u32 hh, int norm,
                     const u16* __restrict__ weight, float r, u32 n16, const void* __restrict__ cos,
                     const void* __restrict__ sin, u32 t, u32 rd) {
  load_row<DT, HALF_CH>(hr, p, n16, 16u * hh);
  if (norm) rms_apply<DT, HALF_CH, RM, DT == FP32>(hr, weight, r, n16, 16u * hh);
  if (hh == 0) rope_row<DT, HALF_CH, RD, RM, true>(hr, cos, sin, t, rd);  // single-buffered tables
}

// Element offset of (b, t, h) of a strided [B, S, H, D] tensor.
struct Strides { u32 sb, ss, sh; };
INLINE u64 row_offset(Strides s, u32 b, u32 t, u32 h) { return (u64)b * s.sb + (u64)t * s.ss + (u64)h * s.sh; }

// ------------------------------------------------------------------------------------------------ stats
struct StatsArgs {
  const u16* k; const u16* v; const u16* k_norm_w; const u16* cos; const u16* sin;
  float* ks; float* vm; float eps; u32 S, H, tiles_per_chunk, n_chunks, n_tens; int k_norm; u32 D;
  Strides kst, vst;
  float* vmin; float* vsum; u32 tens;
  float* k_mean; float* v_scale; float* v_inv; float* v_mean; u32* counter; u32 n_wg; int v_mode; int smooth_k;
  u32 lay_b, tok0;  // the layout batch and first token of the (b, head)'s rows (varlen: 0 and cu_seqlens_kv[b])
  u32 n_fold;       // chunks the reduction folds: n_chunks, or (varlen) the sequence's own chunk count
  u32 rope_dim;     // the RoPE width (rope_row)
};
// `tens` bits (sage_co/abi.py STATS_*): which statistics this launch computes; workgroup z % n_tens runs the
// (z % n_tens)-th set bit of the low three.

// A 16-bit float pattern as a signed int16 that orders like the value: negative patterns get their magnitude bits
// flipped (-x -> -1 - |x|), so v_pk_max_i16 / v_pk_min_i16 give max v and min v (+-0 both map next to 0; NaN
// lands above +inf or below -inf -- irrelevant: the channel sum, hence v_mean, is NaN then). Applied to both halves
// of a dword; the map is its own inverse.
INLINE u32 sortable16x2(u32 p) { return p ^ (((p & 0x80008000u) >> 15) * 0x7fffu); }

// V: per-channel max |v| over this chunk. lane = (cg, tg): channels 8cg..8cg+7, tokens TPL*tg..+TPL-1 of a tile.
// |bf16| and |fp16| bit patterns compare as unsigned ints in magnitude order with every NaN above inf, so packed
// u16 max (v_pk_max_u16) keeps NaN: 1 op per element. Padded tokens re-load token S-1: max is idempotent. A lane
// of padded channels (8cg >= D) loads channel group 0 and keeps the maximum 0.
//
// SIGNED (smooth_v): max v and min v per channel instead (sortable16x2 keys, packed signed 16-bit max/min), to
// vmax_part and vmin_part: the reduce pass needs max |v - v_mean|, and fp32 subtraction of one v_mean is monotone
// in v, so that maximum sits at max v or min v (docs/numerics.md §smooth_v).
typedef short s16x2 __attribute__((ext_vector_type(2)));
// D_PAD 256 (TPL = 32 tokens per lane) goes through its V in V_PARTS = 2 token parts of 16 (stats_v_part,
// quant_v_part): 32 tokens of 16-bit V are 128 VGPRs, which made the one-launch kernel's stats paths spill.
#define V_PARTS(DP) ((DP) == 256 ? 2 : 1)
// TPL / V_PARTS(DP) tokens from token t0 into the lane's maxima (stats_v)
template <int DT, int DP, bool SIGNED>
INLINE void stats_v_part(const StatsArgs& a, u32 h, u32 t0, u32 cg_ld, u16x2 (&m)[4], s16x2 (&smax)[4],
                         s16x2 (&smin)[4]) {
  constexpr u32 TP = SCALE_BLOCK * (DP / 8) / 32 / V_PARTS(DP);
  u32x4 raw[TP];
#pragma unroll
  for (u32 i = 0; i < TP; ++i) {
    u32 t = min_u32(t0 + i, a.S - 1);
    raw[i] = load16(a.v + row_offset(a.vst, a.lay_b, a.tok0 + t, h) + cg_ld * 8);
  }
#pragma unroll
  for (u32 i = 0; i < TP; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if constexpr (SIGNED) {
        s16x2 key = __builtin_bit_cast(s16x2, sortable16x2(raw[i][e]));
        smax[e] = __builtin_elementwise_max(smax[e], key);
        smin[e] = __builtin_elementwise_min(smin[e], key);
      } else {
        m[e] = __builtin_elementwise_max(m[e], __builtin_bit_cast(u16x2, raw[i][e] & 0x7fff7fffu));
      }
    }
  }
}
template <int DT, int DP, bool SIGNED>
INLINE void stats_v(const StatsArgs& a, u32 b, u32 h, u32 chunk) {
  constexpr u32 NCG = DP / 8, TPL = SCALE_BLOCK * NCG / 32;
  u32 lane = lane_id(), cg = lane % NCG, tg = lane / NCG;
  bool real = cg * 8 < a.D;
  u32 cg_ld = real ? cg : 0;
  u32 n_valid_tiles = (a.S + SCALE_BLOCK - 1) / SCALE_BLOCK;
  u32 t_begin = chunk * a.tiles_per_chunk;
  u32 t_end = min_u32(t_begin + a.tiles_per_chunk, n_valid_tiles);
  u16x2 m[4] = {{0, 0}, {0, 0}, {0, 0}, {0, 0}};
  s16x2 smax[4], smin[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) smax[e] = (s16x2){-32768, -32768}, smin[e] = (s16x2){32767, 32767};
  for (u32 tile = t_begin; tile < t_end; ++tile) {
    // D_PAD 256 (TPL 32: 128 VGPRs of V) in V_PARTS token parts, as quant_v: the maxima do not depend on the order.
    // The scheduling barrier keeps the second part's loads after the first part's arithmetic (one block otherwise).
    stats_v_part<DT, DP, SIGNED>(a, h, tile * SCALE_BLOCK + tg * TPL, cg_ld, m, smax, smin);
    if constexpr (V_PARTS(DP) > 1) {
      __builtin_amdgcn_sched_barrier(0);
      stats_v_part<DT, DP, SIGNED>(a, h, tile * SCALE_BLOCK + tg * TPL + TPL / V_PARTS(DP), cg_ld, m, smax, smin);
    }
  }
  if constexpr (SIGNED) {
    u32 hi[8], lo[8];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      u32 wx = real ? __builtin_bit_cast(u32, smax[e]) : 0u;  // key 0 = +0
      u32 wn = real ? __builtin_bit_cast(u32, smin[e]) : 0u;
#pragma unroll
      for (u32 x = NCG; x < 32; x <<= 1) {
        u32 ox = (u32)__builtin_amdgcn_ds_bpermute((int)((lane ^ x) << 2), (int)wx);
        u32 on = (u32)__builtin_amdgcn_ds_bpermute((int)((lane ^ x) << 2), (int)wn);
        wx = __builtin_bit_cast(u32, __builtin_elementwise_max(__builtin_bit_cast(s16x2, wx), __builtin_bit_cast(s16x2, ox)));
        wn = __builtin_bit_cast(u32, __builtin_elementwise_min(__builtin_bit_cast(s16x2, wn), __builtin_bit_cast(s16x2, on)));
      }
      wx = sortable16x2(wx), wn = sortable16x2(wn);  // back to the 16-bit float patterns
      hi[2 * e] = Elt<DT>::abs_to_f32_bits(wx & 0xffffu), hi[2 * e + 1] = Elt<DT>::abs_to_f32_bits(wx >> 16);
      lo[2 * e] = Elt<DT>::abs_to_f32_bits(wn & 0xffffu), lo[2 * e + 1] = Elt<DT>::abs_to_f32_bits(wn >> 16);
    }
    if (tg == 0) {
      u64 at = ((u64)(b * a.H + h) * a.n_chunks + chunk) * DP + cg * 8;
      store16(a.vm + at, (u32x4){hi[0], hi[1], hi[2], hi[3]});
      store16(a.vm + at + 4, (u32x4){hi[4], hi[5], hi[6], hi[7]});
      store16(a.vmin + at, (u32x4){lo[0], lo[1], lo[2], lo[3]});
      store16(a.vmin + at + 4, (u32x4){lo[4], lo[5], lo[6], lo[7]});
    }
    return;
  }
  // lanes l, l ^ NCG, ... hold the same channels (other token groups)
  u32 out[8];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    u32 w = real ? __builtin_bit_cast(u32, m[e]) : 0u;
#pragma unroll
    for (u32 x = NCG; x < 32; x <<= 1) {
      u32 other = (u32)__builtin_amdgcn_ds_bpermute((int)((lane ^ x) << 2), (int)w);
      w = __builtin_bit_cast(u32, __builtin_elementwise_max(__builtin_bit_cast(u16x2, w),
                                                            __builtin_bit_cast(u16x2, other)));
    }
    out[2 * e] = Elt<DT>::abs_to_f32_bits(w & 0xffffu);  // any 16-bit pattern -> its f32 bits
    out[2 * e + 1] = Elt<DT>::abs_to_f32_bits(w >> 16);
  }
  if (tg == 0) {
    float* dst = a.vm + ((u64)(b * a.H + h) * a.n_chunks + chunk) * DP + cg * 8;
    store16(dst, (u32x4){out[0], out[1], out[2], out[3]});
    store16(dst + 4, (u32x4){out[4], out[5], out[6], out[7]});
  }
}

// fp32 V (stats_v on fp32 patterns): per-channel max |v| as unsigned patterns (NaN above inf: NaN wins), or with
// SIGNED max v and min v as sortable32 keys (negative patterns get their magnitude bits flipped: signed int order =
// value order, -0 just below +0). Same lanes, chunks and stores as stats_v; one channel per dword.
#ifndef V32_SPLIT
#define V32_SPLIT 2  // token halves per tile and lane: stats_v32 next to stats_k in one fp32 stats kernel fits 256 VGPRs
#endif
INLINE u32 sortable32(u32 p) { return p ^ ((u32)((int)p >> 31) & 0x7fffffffu); }  // its own inverse
template <int DP, bool SIGNED>
INLINE void stats_v32(const StatsArgs& a, u32 b, u32 h, u32 chunk) {
  constexpr u32 NCG = DP / 8, TPL = SCALE_BLOCK * NCG / 32;
  u32 lane = lane_id(), cg = lane % NCG, tg = lane / NCG;
  bool real = cg * 8 < a.D;
  u32 cg_ld = real ? cg : 0;
  u32 n_valid_tiles = (a.S + SCALE_BLOCK - 1) / SCALE_BLOCK;
  u32 t_begin = chunk * a.tiles_per_chunk;
  u32 t_end = min_u32(t_begin + a.tiles_per_chunk, n_valid_tiles);
  u32 m[8];
  int smax[8], smin[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) m[c] = 0, smax[c] = -0x7fffffff - 1, smin[c] = 0x7fffffff;
  for (u32 tile = t_begin; tile < t_end; ++tile) {
#pragma unroll
    for (int pass = 0; pass < 2 * V32_SPLIT; ++pass) {  // channels 4 * (pass % 2) .. + 3 of tokens part pass / 2
      constexpr u32 TP = TPL / V32_SPLIT;                // tokens per pass: 4 * TP VGPRs of V live
      // D_PAD 256 (TP 16): a scheduling barrier per pass, else the passes' loads are scheduled together (256 VGPRs)
      if (DP == 256 && pass > 0) __builtin_amdgcn_sched_barrier(0);
      const u32 t_at = tile * SCALE_BLOCK + tg * TPL + TP * (pass / 2);
      u32x4 raw[TP];
#pragma unroll
      for (u32 i = 0; i < TP; ++i) {
        u32 t = min_u32(t_at + i, a.S - 1);
        raw[i] = load16(at<FP32>(a.v, row_offset(a.vst, a.lay_b, a.tok0 + t, h) + cg_ld * 8 + 4 * (pass % 2)));
      }
#pragma unroll
      for (u32 i = 0; i < TP; ++i) {
#pragma unroll
        for (int cc = 0; cc < 4; ++cc) {
          const int c = 4 * (pass % 2) + cc;
          if constexpr (SIGNED) {
            int key = (int)sortable32(raw[i][cc]);
            smax[c] = smax[c] > key ? smax[c] : key;
            smin[c] = smin[c] < key ? smin[c] : key;
          } else {
            u32 mag = raw[i][cc] & 0x7fffffffu;
            m[c] = m[c] > mag ? m[c] : mag;
          }
        }
      }
    }
  }
  // lanes l, l ^ NCG, ... hold the same channels (other token groups)
  u32 hi[8], lo[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    if constexpr (SIGNED) {
      int wx = real ? smax[c] : 0, wn = real ? smin[c] : 0;  // key 0 = +0
#pragma unroll
      for (u32 x = NCG; x < 32; x <<= 1) {
        int ox = __builtin_amdgcn_ds_bpermute((int)((lane ^ x) << 2), wx);
        int on = __builtin_amdgcn_ds_bpermute((int)((lane ^ x) << 2), wn);
        wx = wx > ox ? wx : ox;
        wn = wn < on ? wn : on;
      }
      hi[c] = sortable32((u32)wx), lo[c] = sortable32((u32)wn);  // back to the fp32 patterns
    } else {
      u32 w = real ? m[c] : 0u;
#pragma unroll
      for (u32 x = NCG; x < 32; x <<= 1) {
        u32 o = (u32)__builtin_amdgcn_ds_bpermute((int)((lane ^ x) << 2), (int)w);
        w = w > o ? w : o;
      }
      hi[c] = w;
    }
  }
  if (tg == 0) {
    u64 at_ = ((u64)(b * a.H + h) * a.n_chunks + chunk) * DP + cg * 8;
    store16(a.vm + at_, (u32x4){hi[0], hi[1], hi[2], hi[3]});
    store16(a.vm + at_ + 4, (u32x4){hi[4], hi[5], hi[6], hi[7]});
    if constexpr (SIGNED) {
      store16(a.vmin + at_, (u32x4){lo[0], lo[1], lo[2], lo[3]});
      store16(a.vmin + at_ + 4, (u32x4){lo[4], lo[5], lo[6], lo[7]});
    }
  }
}

// K: per-channel sum over this chunk of the (normed/roped) rows. lane = token; the column sums go through LDS:
// each lane writes its packed row, then lane l adds channels CPL*l..CPL*l+CPL-1 of the tile's valid rows in token
// order.
#define LDS_PAD 4  // dwords; a row of DP/2 + 4 keeps the 16-byte row stores of different lanes on different banks
// The LDS of stats_k: SCALE_BLOCK rows of at most 128 dwords + LDS_PAD (D_PAD 256 in fp32 goes through it in two halves,
// stats_k256), so no stats symbol takes more than 16.5 KB (docs/rdna4.md §Occupancy: LDS per WGP).
#define STATS_LDS_WORDS(DT, DP) (SCALE_BLOCK * ((WORDS(DT, DP) < 128 ? WORDS(DT, DP) : 128) + LDS_PAD))

// stats_k at D_PAD 256: the row in halves (half_row, r streamed first), one half made at a time (loops that are not
// unrolled, as in quant_qk256). 16-bit: both halves go to one LDS row of 128 dwords and lane l adds channels
// 8l .. 8l + 7 (stats_k's CPL = 8); fp32: one half per pass over the chunk's tiles (pass p makes half p, and r, again),
// lane l adds channels 128p + 4l .. + 3. Either way each channel is added over the valid rows in token order, tiles in
// order, as at D_PAD <= 128; the LDS stays at SCALE_BLOCK rows of 128 + LDS_PAD dwords (STATS_LDS_WORDS).
INLINE void lds_barrier() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
template <int DT, int RD, int RM>
INLINE void stats_k256(const StatsArgs& a, u32 b, u32 h, u32 chunk, u32* lds) {
  constexpr int ROW = 128 + LDS_PAD, HW = WORDS(DT, HALF_CH), CPP = 4 * 4 / Elt<DT>::BYTES;  // CPP: 8 or 4 channels
  constexpr u32 PASSES = DT == FP32 ? 2 : 1, HPP = 2 / PASSES;  // halves per pass
  u32 lane = lane_id();
  u32 n16 = a.D / 8;
  __builtin_assume(n16 > 16u);  // D > 128 at D_PAD 256: every group of half 0 is real
  u32 n_valid_tiles = (a.S + SCALE_BLOCK - 1) / SCALE_BLOCK;
  u32 t_begin = chunk * a.tiles_per_chunk;
  u32 t_end = min_u32(t_begin + a.tiles_per_chunk, n_valid_tiles);
  float* dst = a.ks + ((u64)(b * a.H + h) * a.n_chunks + chunk) * 256;
#pragma nounroll
  for (u32 pass = 0; pass < PASSES; ++pass) {
    float acc[CPP];
#pragma unroll
    for (int c = 0; c < CPP; ++c) acc[c] = 0.0f;
    for (u32 tile = t_begin; tile < t_end; ++tile) {
      u32 t = min_u32(tile * SCALE_BLOCK + lane, a.S - 1);
      const u64 off = row_offset(a.kst, a.lay_b, a.tok0 + t, h);
      const void* src = at<DT>(a.k, off);
      float r = a.k_norm ? rms_r_256<DT, RM>(a.k, off, n16, a.D, a.eps) : 0.0f;
      lds_barrier();  // previous tile's LDS reads are done (WAR)
#pragma nounroll
      for (u32 k = 0; k < HPP; ++k) {
        u32 hr[HW];
        half_row<DT, RD, RM>(hr, src, pass * HPP + k, a.k_norm, a.k_norm_w, r, n16, a.cos, a.sin, t, a.rope_dim);
#pragma unroll
        for (int j = 0; j < HW / 4; ++j)
          store16(&lds[lane * ROW + HW * k + 4 * j], (u32x4){hr[4 * j], hr[4 * j + 1], hr[4 * j + 2], hr[4 * j + 3]});
      }
      lds_barrier();
      u32 rows = min_u32(SCALE_BLOCK, a.S - tile * SCALE_BLOCK);  // wave-uniform: padded rows are never added
#pragma unroll
      for (u32 rr = 0; rr < SCALE_BLOCK; ++rr) {
        if (rr < rows) {  // this lane's CPP channels: 4 dwords at dword 4 * lane of row rr
          u32x4 v = *(const u32x4*)&lds[rr * ROW + 4 * lane];
          u32 c[4] = {v[0], v[1], v[2], v[3]};
#pragma unroll
          for (int i = 0; i < CPP; ++i) acc[i] = acc[i] + chan<DT>(c, i);
        }
      }
    }
    if constexpr (CPP == 8) {
      store16(dst + 8 * lane, (u32x4){as_u(acc[0]), as_u(acc[1]), as_u(acc[2]), as_u(acc[3])});
      store16(dst + 8 * lane + 4, (u32x4){as_u(acc[4]), as_u(acc[5]), as_u(acc[6]), as_u(acc[7])});
    } else {
      store16(dst + HALF_CH * pass + 4 * lane, (u32x4){as_u(acc[0]), as_u(acc[1]), as_u(acc[2]), as_u(acc[3])});
    }
  }
}

template <int DT, int DP, int RD, int RM>
INLINE void stats_k(const StatsArgs& a, u32 b, u32 h, u32 chunk, u32* lds) {
  if constexpr (DP == 256) {  // the row in halves (stats_k256); the code below is never reached there
    stats_k256<DT, RD, RM>(a, b, h, chunk, lds);
    return;
  }
  constexpr int RW = WORDS(DT, DP), ROW = RW + LDS_PAD, CPL = DP / 32, CW = WORDS(DT, CPL);
  u32 lane = lane_id();
  u32 n16 = a.D / 8;
  u32 n_valid_tiles = (a.S + SCALE_BLOCK - 1) / SCALE_BLOCK;
  u32 t_begin = chunk * a.tiles_per_chunk;
  u32 t_end = min_u32(t_begin + a.tiles_per_chunk, n_valid_tiles);
  float acc[CPL];
#pragma unroll
  for (int c = 0; c < CPL; ++c) acc[c] = 0.0f;
  for (u32 tile = t_begin; tile < t_end; ++tile) {
    u32 t = min_u32(tile * SCALE_BLOCK + lane, a.S - 1);
    u32 row[RW];
    load_row<DT, DP>(row, at<DT>(a.k, row_offset(a.kst, a.lay_b, a.tok0 + t, h)), n16);
    norm_rope_row<DT, DP, RD, RM>(row, a.k_norm, a.k_norm_w, a.eps, n16, a.D, a.cos, a.sin, t, a.rope_dim);
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");  // previous tile's LDS reads are done (WAR)
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
#pragma unroll
    for (int j = 0; j < RW / 4; ++j)
      store16(&lds[lane * ROW + 4 * j], (u32x4){row[4 * j], row[4 * j + 1], row[4 * j + 2], row[4 * j + 3]});
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
    u32 rows = min_u32(SCALE_BLOCK, a.S - tile * SCALE_BLOCK);  // wave-uniform: padded rows are never added
#pragma unroll
    for (u32 r = 0; r < SCALE_BLOCK; ++r) {
      if (r < rows) {  // this lane's CPL channels: CW dwords at dword CW * lane of row r
        u32 c[CW];
        if constexpr (CW == 4) {
          u32x4 v = *(const u32x4*)&lds[r * ROW + 4 * lane];
          c[0] = v[0], c[1] = v[1], c[2] = v[2], c[3] = v[3];
        } else if constexpr (CW == 2) {
          u32x2 v = *(const u32x2*)&lds[r * ROW + 2 * lane];
          c[0] = v[0], c[1] = v[1];
        } else {
          c[0] = lds[r * ROW + lane];
        }
#pragma unroll
        for (int i = 0; i < CPL; ++i) acc[i] = acc[i] + chan<DT>(c, i);
      }
    }
  }
  float* dst = a.ks + ((u64)(b * a.H + h) * a.n_chunks + chunk) * DP + CPL * lane;
  if constexpr (CPL == 4)
    store16(dst, (u32x4){as_u(acc[0]), as_u(acc[1]), as_u(acc[2]), as_u(acc[3])});
  else
    *(u32x2*)dst = (u32x2){as_u(acc[0]), as_u(acc[1])};
}

// v_mode (sage_co/abi.py REDUCE_V_*): how the last workgroup of a head makes v_scale / v_inv / v_mean

// The fold of one (b, K/V head)'s chunk partials into its outputs, per channel ch: the partials in chunk order
// (fixed, so the result does not depend on which workgroup finished last): v_scale = amax / 448, v_inv = 448 / amax
// (0 when amax == 0; a workspace for quant), k_mean = sum / S_kv; v_mode 1 (smooth_v): v_mean = V sum / S_kv and
// amax = max(|max v - v_mean|, |min v - v_mean|) (fp32 subtraction is monotone: the largest |v - v_mean| sits at
// max v or min v); v_mode 2 (pv fp16): zeros. This was the separate reduce kernel (one thread per channel), moved
// here unchanged: same operations in the same order, so the same bits.
INLINE void reduce_channel(const StatsArgs& a, u64 bh, u32 ch, u32 dp) {
  if (a.S == 0) {  // varlen, a sequence without keys: finite zeros (the attention epilogue reads its v_scale)
    a.v_mean[bh * dp + ch] = 0.0f, a.v_scale[bh * dp + ch] = 0.0f, a.v_inv[bh * dp + ch] = 0.0f;
    a.k_mean[bh * dp + ch] = 0.0f;
    return;
  }
  const float* vp = a.vm + bh * a.n_chunks * dp + ch;
  u32 m = 0;  // max of non-negative f32 bit patterns; NaN patterns sort above inf
  for (u32 c = 0; c < a.n_fold && a.v_mode == REDUCE_V_FP8; ++c) {
    u32 w = as_u(vp[(u64)c * dp]);
    m = m > w ? m : w;
  }
  float vmean = 0.0f;
  if (a.v_mode == REDUCE_V_SMOOTH) {
    const float* sp = a.vsum + bh * a.n_chunks * dp + ch;
    const float* lp = a.vmin + bh * a.n_chunks * dp + ch;
    float s = 0.0f, hi = vp[0], lo = lp[0];
    for (u32 c = 0; c < a.n_fold; ++c) {
      s = s + sp[(u64)c * dp];
      hi = __builtin_fmaxf(hi, vp[(u64)c * dp]);
      lo = __builtin_fminf(lo, lp[(u64)c * dp]);
    }
    vmean = s / (float)a.S;
    u32 a1 = as_u(hi - vmean) & 0x7fffffffu, a2 = as_u(lo - vmean) & 0x7fffffffu;
    m = a1 > a2 ? a1 : a2;
  }
  if (a.v_mode == REDUCE_V_NONE) m = 0;  // pv fp16: no V scale (vmax_part is not read)
  a.v_mean[bh * dp + ch] = vmean;
  float amax = as_f(m);
  a.v_scale[bh * dp + ch] = amax / 448.0f;
  a.v_inv[bh * dp + ch] = amax == 0.0f ? 0.0f : 448.0f / amax;  // inf for a tiny amax: quant_v's general path
  float mean = 0.0f;
  if (a.smooth_k) {
    const float* kp = a.ks + bh * a.n_chunks * dp + ch;
    float s = 0.0f;
    for (u32 c = 0; c < a.n_fold; ++c) s = s + kp[(u64)c * dp];
    mean = s / (float)a.S;
  }
  a.k_mean[bh * dp + ch] = mean;
}

// The per-(b, K/V head) counters follow the ticket counter: counter[0] hands out tickets (prepare_body),
// counter[1 + b * H_kv + h] counts that head's finished stats items, then its fold, then its K/V tiles.
INLINE u32* head_counter(u32* counter, u64 bh) { return counter + 1 + bh; }

// A K or V tile of head bh waits until the head's counter reads `folded` (n_wg stats items + the fold): a
// uniform poll of an agent-scope atomic load, asleep between polls (s_sleep 2 = 128 clocks, docs/rdna4.md
// §Forward progress), then an acquire fence so the fold's k_mean / v_inv / v_mean are read after it (the loads
// that follow are vector loads: the fence and the atomics in this kernel keep LLVM from treating them as
// invariant scalar loads). The tile then counts itself; the head's last tile (the counter reaching `total`)
// stores 0 for the next launch.
INLINE void wait_for_fold(u32* counter, u64 bh, u32 folded, u32 total) {
  u32* ctr = head_counter(counter, bh);
  for (;;) {
    u32 seen = (u32)__builtin_amdgcn_readfirstlane(
        (int)__hip_atomic_load(ctr, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT));
    if (seen >= folded) break;
    __builtin_amdgcn_s_sleep(2);
  }
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "agent");
  if (lane_id() == 0 && __hip_atomic_fetch_add(ctr, 1u, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT) + 1 == total)
    *ctr = 0;
}

// Last-workgroup reduction (docs/rdna4.md §Atomics): every stats item of (b, h) publishes its partials (release
// fence at agent scope, then one atomic add on its head's counter); the one that sees n_wg - 1 is the last, so
// every partial of its head is written and visible after its acquire fence, and it folds them (reduce_channel,
// lane l takes channels l, l + 32, ...). It then publishes the fold (release fence, one more add: the counter
// reads n_wg + 1 = FOLDED), which the head's K and V tiles wait for (wait_for_fold below).
template <int DP>
INLINE void reduce_if_last(const StatsArgs& a, u32 b, u32 h) {
  u32 lane = lane_id();
  u32* ctr = head_counter(a.counter, (u64)b * a.H + h);
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "agent");  // this workgroup's partials before its count
  u32 old = 0;
  if (lane == 0) old = __hip_atomic_fetch_add(ctr, 1u, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
  old = (u32)__builtin_amdgcn_readfirstlane((int)old);
  if (old != a.n_wg - 1) return;
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "agent");  // every other workgroup's partials after their counts
  u64 bh = (u64)b * a.H + h;
#pragma unroll
  for (u32 i = 0; i < DP / SCALE_BLOCK; ++i) reduce_channel(a, bh, lane + SCALE_BLOCK * i, DP);
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "agent");  // the fold's outputs before FOLDED
  if (lane == 0) __hip_atomic_fetch_add(ctr, 1u, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}

// The stats items' LDS, one array per (DT, D_PAD): shared by the per-width bodies of one symbol (prepare_body), which
// as function-local statics of stats_body would each get their own.
template <int DT, int DP>
INLINE u32* stats_lds() {
  __attribute__((shared)) static u32 lds[STATS_LDS_WORDS(DT, DP)];
  return lds;
}
template <int DT, int DP, int RD, int RM>
INLINE void stats_body(StatsArgs a, u32 chunk, u32 h, u32 z, const u32* cu_seqlens_kv, bool varlen) {
  u32 b = z / a.n_tens, which = z % a.n_tens;
  a.lay_b = b;
  bool idle = false;  // varlen: a chunk past the sequence's own computes nothing but still counts for the fold
  if (varlen) {  // packed K/V: sequence b's own tokens and its own chunking (sage_co/ops/prepare.py chunking)
    a.tok0 = cu_seqlens_kv[b];
    a.S = cu_seqlens_kv[b + 1] - a.tok0;
    a.lay_b = 0;
    const u32 tiles = (a.S + SCALE_BLOCK - 1) / SCALE_BLOCK;
    a.tiles_per_chunk = (tiles + PREPARE_MAX_CHUNKS - 1) / PREPARE_MAX_CHUNKS;
    a.n_fold = tiles ? (tiles + a.tiles_per_chunk - 1) / a.tiles_per_chunk : 0u;
    idle = chunk >= a.n_fold;  // uniform
  }
  u32 kinds = idle ? 0u : a.tens & (STATS_V_MAX | STATS_K_SUM | STATS_V_SUM);
  for (u32 i = 0; i < which; ++i) kinds &= kinds - 1;  // drop the lowest set bit `which` times (uniform)
  u32 kind = kinds & (0u - kinds);                      // 0: no statistics (pv fp16 without smooth_k)
  u32* lds = stats_lds<DT, DP>();  // column sums only
  if (kind == STATS_V_MAX) {
    if constexpr (DT == FP32) {
      if (a.tens & STATS_V_SIGNED)
        stats_v32<DP, true>(a, b, h, chunk);
      else
        stats_v32<DP, false>(a, b, h, chunk);
    } else {
      if (a.tens & STATS_V_SIGNED)
        stats_v<DT, DP, true>(a, b, h, chunk);
      else
        stats_v<DT, DP, false>(a, b, h, chunk);
    }
  } else if (kind == STATS_K_SUM) {
    stats_k<DT, DP, RD, RM>(a, b, h, chunk, lds);
  } else if (kind == STATS_V_SUM) {  // the K column-sum code on V rows (no norm, no RoPE) into vsum_part
    StatsArgs av = a;
    av.k = a.v, av.kst = a.vst, av.k_norm = 0, av.ks = a.vsum;
    stats_k<DT, DP, 0, RM>(av, b, h, chunk, lds);
  }
  reduce_if_last<DP>(a, b, h);
}

// ------------------------------------------------------------------------------------------------ quant
struct QuantArgs {
  const u16* q; const u16* k; const u16* v; const u16* q_norm_w; const u16* k_norm_w; const u16* cos;
  const u16* sin; const float* k_mean; const float* v_inv; i8* q_int8; i8* k_int8; float* q_scale;
  float* k_scale; unsigned char* v_t; float q_mult, eps; u32 S_q, S_kv, H_q, H_kv, S_q_pad, S_kv_pad, D;
  int q_norm, k_norm; Strides qst, kst, vst; const float* v_mean;
  const u32* cu_q; const u32* cu_kv; u32 varlen, rows_q, rows_kv;
  u32 rope_dim;     // the RoPE width (rope_row)
};

// Varlen (sage_co/abi.py PREPARE_QUANT_ARGS, docs/numerics.md §Varlen): where sequence b of a packed launch
// lives. Without varlen: S tokens from token 0 of batch b, rows S_pad per (b, head), the sequence at row 0.
struct Seq { u32 S, tok0, row0, lay_b, rows; bool skip; };
INLINE Seq sequence(const u32* cu, bool varlen, u32 b, u32 S, u32 rows, u32 packed_rows, u32 tile) {
  if (!varlen) return {S, 0u, 0u, b, rows, false};
  u32 t0 = cu[b], len = cu[b + 1] - t0;
  // the sequence's padded rows end at round_up(len, 64): tiles past them (or every tile of an empty sequence)
  // have nothing to write -- the attention kernel never reads the rows between two sequences
  bool skip = tile * SCALE_BLOCK >= ((len + 63u) & ~63u);
  return {len, t0, ((t0 + 63u) & ~63u) + 64u * b, 0u, packed_rows, skip};
}

// Four int8 held in the low bytes of a, b, c, d -> one dword (byte 0 = a). v_perm_b32: selector bytes 0-3 pick
// bytes of the second operand, 4-7 of the first, 0x0c gives 0x00.
INLINE u32 pack4_i8(u32 a, u32 b, u32 c, u32 d) {
  u32 ab = __builtin_amdgcn_perm(b, a, 0x0c0c0400u);
  u32 cd = __builtin_amdgcn_perm(d, c, 0x0c0c0400u);
  return __builtin_amdgcn_perm(cd, ab, 0x05040100u);
}

// rint(y) for |y| < 2^22: adding 1.5 * 2^23 rounds to an integer (RNE, the f32 ulp there is 1), whose two's
// complement low byte is then the low byte of the sum's bit pattern. Exactly rint(y) & 0xff for |y| <= 127.
#define ROUND_MAGIC 12582912.0f

// D_PAD 256 (see half_row): x of a half row as quant_qk computes it (K: f32(row) - k_mean, Q: f32(row) * q_mult),
// 128 floats made once per half and pass, so the three cases of half_quant_store read registers only (loads in two
// of them were hoisted above the branch). K's 128 means of the half as in quant_qk: each lane loads 4 of them (one
// 16-byte load) and v_readlane broadcasts each (k_mean is written by this launch's fold, so no scalar loads).
template <int DT, bool is_k>
INLINE void half_x(float (&x)[HALF_CH], const u32 (&hr)[WORDS(DT, HALF_CH)], const float* mean, float q_mult) {
  if constexpr (is_k) {
    constexpr int PER = HALF_CH / SCALE_BLOCK;
    f32x4 own = *(const f32x4*)(mean + lane_id() * PER);
#pragma unroll
    for (int i = 0; i < HALF_CH; ++i)
      x[i] = ch<DT, HALF_CH>(hr, i) - as_f((u32)__builtin_amdgcn_readlane((int)as_u(own[i % PER]), i / PER));
  } else {
#pragma unroll
    for (int i = 0; i < HALF_CH; ++i) x[i] = ch<DT, HALF_CH>(hr, i) * q_mult;
  }
}
// max |x| over a half row as bit patterns (NaN wins, as in quant_qk)
INLINE u32 half_amax(const float (&x)[HALF_CH]) {
  u32 m = 0;
#pragma unroll
  for (int i = 0; i < HALF_CH; i += 2) {
    u32 m2 = __builtin_elementwise_max(as_u(x[i]) & 0x7fffffffu, as_u(x[i + 1]) & 0x7fffffffu);
    m = m > m2 ? m : m2;
  }
  return m;
}
// The int8 of a half row given the block max m (an SGPR) and inv: quant_qk's three cases, zeros for a padded token.
INLINE void half_quant_store(const float (&x)[HALF_CH], u32 m, float inv, bool valid, i8* __restrict__ dst) {
  constexpr int NW = HALF_CH / 4;  // int8 dwords
  u32 words[NW];
  if (m >= 0x7f800000u) {  // NaN or inf in the block: every x * inv is 0 or NaN -> int8 0
#pragma unroll
    for (int j = 0; j < NW; ++j) words[j] = 0;
  } else if (as_u(inv) == 0x7f800000u) {  // tiny amax: x * inv = +-inf -> +-127, 0 * inf = NaN -> 0
#pragma unroll
    for (int j = 0; j < NW; ++j) {
      u32 qv[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float xv = x[4 * j + e];
        qv[e] = xv > 0.0f ? 127u : (xv < 0.0f ? 0x81u : 0u);
      }
      words[j] = pack4_i8(qv[0], qv[1], qv[2], qv[3]);
    }
  } else {  // |x * inv| <= 127 * (1 + 2^-24): rint(x * inv) is in [-127, 127], no clamp needed
#pragma unroll
    for (int j = 0; j < NW; ++j) {
      u32 qv[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) qv[e] = as_u(x[4 * j + e] * inv + ROUND_MAGIC);
      words[j] = pack4_i8(qv[0], qv[1], qv[2], qv[3]);
    }
  }
  if (!valid) {
#pragma unroll
    for (int j = 0; j < NW; ++j) words[j] = 0;  // padded rows are zero
  }
#pragma unroll
  for (int j = 0; j < NW / 4; ++j)
    store16(dst + 16 * j, (u32x4){words[4 * j], words[4 * j + 1], words[4 * j + 2], words[4 * j + 3]});
}

// quant_qk at D_PAD 256: the row in two halves (half_row), each made twice -- once for the block max, which needs
// both halves, and once to quantize -- so one half (up to 128 VGPRs of row, then 128 of x) is live at a time; the
// second making is the same loads and operations, so the same bits (the loads hit the cache).
template <int DT, int RD, int RM, bool is_k>
INLINE void quant_qk256(const QuantArgs& a, u32 b, u32 h, u32 tile) {
  constexpr int HW = WORDS(DT, HALF_CH);
  u32 H = is_k ? a.H_kv : a.H_q;
  const Seq sq = sequence(is_k ? a.cu_kv : a.cu_q, a.varlen != 0, b, is_k ? a.S_kv : a.S_q,
                          is_k ? a.S_kv_pad : a.S_q_pad, is_k ? a.rows_kv : a.rows_q, tile);
  if (sq.skip) return;  // wave-uniform
  u32 S = sq.S, S_pad = sq.rows;
  u32 lane = lane_id();
  u32 t = tile * SCALE_BLOCK + lane;
  bool valid = t < S;
  u32 t_ld = min_u32(t, S - 1);
  u32 n16 = a.D / 8;
  __builtin_assume(n16 > 16u);  // D > 128 at D_PAD 256: every group of half 0 is real
  const u16* base = is_k ? a.k : a.q;
  const u16* weight = is_k ? a.k_norm_w : a.q_norm_w;
  const int norm = is_k ? a.k_norm : a.q_norm;
  const u64 off = row_offset(is_k ? a.kst : a.qst, sq.lay_b, sq.tok0 + t_ld, h);
  const void* src = at<DT>(base, off);
  float r = norm ? rms_r_256<DT, RM>(base, off, n16, a.D, a.eps) : 0.0f;
  u64 bh = (u64)b * H + h;
  const float* mean = a.k_mean + bh * 256;  // K only (Q never reads it)
  u32 m = 0;
#pragma nounroll
  for (u32 hh = 0; hh < 2; ++hh) {
    u32 hr[HW];
    half_row<DT, RD, RM>(hr, src, hh, norm, weight, r, n16, a.cos, a.sin, t_ld, a.rope_dim);
    float x[HALF_CH];
    half_x<DT, is_k>(x, hr, mean + HALF_CH * hh, a.q_mult);
    u32 mh = half_amax(x);
    m = m > mh ? m : mh;
  }
  m = valid ? m : 0u;  // padded rows count as zero
  m = (u32)__builtin_amdgcn_readfirstlane((int)wave_max_u32(m));  // an SGPR: uniform branches, as in quant_qk
  float amax = as_f(m);
  float scale = amax / 127.0f;
  float inv = amax == 0.0f ? 0.0f : 127.0f / amax;
  const u64 lbh = (u64)sq.lay_b * H + h;
  if (lane == 0) (is_k ? a.k_scale : a.q_scale)[lbh * (S_pad / SCALE_BLOCK) + (sq.row0 / SCALE_BLOCK + tile)] = scale;
  i8* dst = (is_k ? a.k_int8 : a.q_int8) + (lbh * S_pad + sq.row0 + t) * 256;
#pragma nounroll
  for (u32 hh = 0; hh < 2; ++hh) {
    u32 hr[HW];
    half_row<DT, RD, RM>(hr, src, hh, norm, weight, r, n16, a.cos, a.sin, t_ld, a.rope_dim);
    float x[HALF_CH];
    half_x<DT, is_k>(x, hr, mean + HALF_CH * hh, a.q_mult);
    half_quant_store(x, m, inv, valid, dst + HALF_CH * hh);
  }
}

// Q (is_k = false) or K tile: one 32-token scale block of head h, lane = token.
template <int DT, int DP, int RD, int RM, bool is_k>
INLINE void quant_qk(const QuantArgs& a, u32 b, u32 h, u32 tile) {
  if constexpr (DP == 256) {  // the row in halves (quant_qk256); the code below is never reached there
    quant_qk256<DT, RD, RM, is_k>(a, b, h, tile);
    return;
  }
  constexpr int NW = DP / 4;  // int8 dwords per row
  u32 H = is_k ? a.H_kv : a.H_q;
  const Seq sq = sequence(is_k ? a.cu_kv : a.cu_q, a.varlen != 0, b, is_k ? a.S_kv : a.S_q,
                          is_k ? a.S_kv_pad : a.S_q_pad, is_k ? a.rows_kv : a.rows_q, tile);
  if (sq.skip) return;  // wave-uniform
  u32 S = sq.S, S_pad = sq.rows;  // S_pad: rows per (layout batch, head)
  u32 lane = lane_id();
  u32 t = tile * SCALE_BLOCK + lane;
  bool valid = t < S;
  u32 t_ld = min_u32(t, S - 1);
  u32 n16 = a.D / 8;
  u32 row[WORDS(DT, DP)];
  load_row<DT, DP>(row, at<DT>(is_k ? a.k : a.q, row_offset(is_k ? a.kst : a.qst, sq.lay_b, sq.tok0 + t_ld, h)),
                   n16);
  norm_rope_row<DT, DP, RD, RM>(row, is_k ? a.k_norm : a.q_norm, is_k ? a.k_norm_w : a.q_norm_w, a.eps, n16, a.D,
                                a.cos, a.sin, t_ld, a.rope_dim);
  float x[DP];
#pragma unroll
  for (int i = 0; i < DP; ++i) x[i] = ch<DT, DP>(row, i);
  u64 bh = (u64)b * H + h;
  if constexpr (is_k) {
    // k_mean is written by this launch's fold (wait_for_fold ordered it), so it is not the unclobbered memory LLVM
    // reads with scalar loads, and held as vector loads of one address the DP uniform means would take DP VGPRs:
    // each lane loads DP / 32 of them (one vector load) and v_readlane broadcasts each into an SGPR operand.
    constexpr int PER = DP / SCALE_BLOCK;
    const float* mine = a.k_mean + bh * DP + lane * PER;
    float own[PER];
#pragma unroll
    for (int e = 0; e < PER; ++e) own[e] = mine[e];
#pragma unroll
    for (int i = 0; i < DP; ++i)
      x[i] = x[i] - as_f((u32)__builtin_amdgcn_readlane((int)as_u(own[i % PER]), i / PER));
  } else {
#pragma unroll
    for (int i = 0; i < DP; ++i) x[i] = x[i] * a.q_mult;
  }
  u32 m = 0;  // max |x| as bit patterns: NaN wins like torch.amax
#pragma unroll
  for (int i = 0; i < DP; i += 2) {
    u32 m2 = __builtin_elementwise_max(as_u(x[i]) & 0x7fffffffu, as_u(x[i + 1]) & 0x7fffffffu);
    m = m > m2 ? m : m2;
  }
  m = valid ? m : 0u;  // padded rows count as zero
  // every lane now holds the block max; readfirstlane makes it an SGPR so the three cases below are uniform
  // branches (a divergent-looking branch would be if-converted into computing all three).
  m = (u32)__builtin_amdgcn_readfirstlane((int)wave_max_u32(m));
  float amax = as_f(m);
  float scale = amax / 127.0f;
  float inv = amax == 0.0f ? 0.0f : 127.0f / amax;
  const u64 lbh = (u64)sq.lay_b * H + h;  // the layout's (batch, head); bh (above) indexes the statistics
  if (lane == 0) (is_k ? a.k_scale : a.q_scale)[lbh * (S_pad / SCALE_BLOCK) + (sq.row0 / SCALE_BLOCK + tile)] = scale;

  u32 words[NW];
  if (m >= 0x7f800000u) {  // NaN or inf in the block: every x * inv is 0 or NaN -> int8 0
#pragma unroll
    for (int j = 0; j < NW; ++j) words[j] = 0;
  } else if (as_u(inv) == 0x7f800000u) {  // tiny amax: x * inv = +-inf -> +-127, 0 * inf = NaN -> 0
#pragma unroll
    for (int j = 0; j < NW; ++j) {
      u32 qv[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float xv = x[4 * j + e];
        qv[e] = xv > 0.0f ? 127u : (xv < 0.0f ? 0x81u : 0u);
      }
      words[j] = pack4_i8(qv[0], qv[1], qv[2], qv[3]);
    }
  } else {  // |x * inv| <= 127 * (1 + 2^-24): rint(x * inv) is in [-127, 127], no clamp needed
#pragma unroll
    for (int j = 0; j < NW; ++j) {
      u32 qv[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) qv[e] = as_u(x[4 * j + e] * inv + ROUND_MAGIC);
      words[j] = pack4_i8(qv[0], qv[1], qv[2], qv[3]);
    }
  }
  // fp32 with RoPE: the token index is recomputed here rather than kept across the row's arithmetic (one
  // VGPR; kept, it is the one that spills in the RoPE-32 symbols)
  if constexpr (DT == FP32 && RD != 0) t = tile * SCALE_BLOCK + opaque_u(lane), valid = t < S;
  if (!valid) {
#pragma unroll
    for (int j = 0; j < NW; ++j) words[j] = 0;  // padded rows are zero
  }
  i8* dst = (is_k ? a.k_int8 : a.q_int8) + (lbh * S_pad + sq.row0 + t) * DP;
#pragma unroll
  for (int j = 0; j < NW / 4; ++j)
    store16(dst + 16 * j, (u32x4){words[4 * j], words[4 * j + 1], words[4 * j + 2], words[4 * j + 3]});
}

// The V loads of quant_v / quant_v16: lane (cg, tg) reads tokens t0 .. t0 + TPL - 1 (t0 = tile*32 + TPL*tg), one
// 16-byte load each, of channels 8cg + CPP*pass .. + CPP - 1, CPP = 8 / V_PASSES: 16-bit inputs take their 8 channels
// in one pass, fp32 in two passes of 4 (so only 4 * TPL VGPRs of V are live: 8 * TPL spilled at D_pad 128). Padded
// tokens load token S-1, a lane of padded channels loads channel group 0; both are zeroed.
// D_PAD 256: V_PARTS token parts (`part`, see stats_v_part).
#define V_PASSES(DT) (WORDS(DT, 8) / 4)
template <int DT, int DP>
INLINE void load_v_pass(u32 (&raw)[SCALE_BLOCK * DP / 256 / V_PARTS(DP)][4], const QuantArgs& a, const Seq& sq, u32 h,
                        u32 tile, int pass, int part = 0) {
  constexpr u32 NCG = DP / 8, TPL = SCALE_BLOCK * NCG / 32, TP = TPL / V_PARTS(DP);
  u32 lane = lane_id(), cg = lane % NCG, tg = lane / NCG;
  bool real = cg * 8 < a.D;
  u32 S = sq.S;  // the sequence's tokens from token sq.tok0 of layout batch sq.lay_b (varlen; else S_kv from 0 of b)
  u32 t0 = tile * SCALE_BLOCK + tg * TPL + TP * (u32)part;
#pragma unroll
  for (u32 i = 0; i < TP; ++i) {
    u32x4 v = load16(at<DT>(a.v, row_offset(a.vst, sq.lay_b, sq.tok0 + min_u32(t0 + i, S - 1), h) +
                                     (real ? cg : 0u) * 8 + (u32)pass * (8 / V_PASSES(DT))));
    raw[i][0] = v[0], raw[i][1] = v[1], raw[i][2] = v[2], raw[i][3] = v[3];
  }
  if ((tile + 1) * SCALE_BLOCK > S || 8 * NCG > a.D) {  // wave-uniform: the last valid tile, padding tiles, padded D
#pragma unroll
    for (u32 i = 0; i < TP; ++i)
      if (t0 + i >= S || !real) raw[i][0] = raw[i][1] = raw[i][2] = raw[i][3] = 0;
  }
}

// V tile of K/V head h: lane = (cg, tg) -> channels 8cg..8cg+7, tokens tile*32 + TPL*tg + 0..TPL-1 (a padded token
// loads token S-1 and is zeroed before use; a lane of padded channels loads channel group 0 and zeroes it).
// quant_v_part: token part `part` (V_PARTS(DP) of them, TP tokens each) of the lane's tokens, all passes and channels.
template <int DT, int DP>
INLINE void quant_v_part(const QuantArgs& a, const Seq& sq, u32 h, u32 tile, const float (&inv)[8],
                         const float (&mean)[8], bool fast, unsigned char* dst, int part, u32 tp0) {
  constexpr u32 NCG = DP / 8, TPL = SCALE_BLOCK * NCG / 32, TP = TPL / V_PARTS(DP);
  u32 S = sq.S;  // tp0: this part's first token
  const u32 vrows = sq.rows;
#pragma unroll
  for (int pass = 0; pass < V_PASSES(DT); ++pass) {
  u32 raw[TP][4];
  load_v_pass<DT, DP>(raw, a, sq, h, tile, pass, part);
#pragma unroll
  for (int cc = 0; cc < 8 / V_PASSES(DT); ++cc) {
    const int c = pass * (8 / V_PASSES(DT)) + cc;  // channel 8cg + c; raw holds it as channel cc
    float y[TP];
#pragma unroll
    for (u32 i = 0; i < TP; ++i) {
      y[i] = (chan<DT>(raw[i], cc) - mean[c]) * inv[c];
    }
    if ((tile + 1) * SCALE_BLOCK > S) {  // wave-uniform: padded tokens are 0, not (0 - v_mean) * inv
#pragma unroll
      for (u32 i = 0; i < TP; ++i) y[i] = tp0 + i < S ? y[i] : 0.0f;
    }
    if (!fast) {
      bool inv_inf = as_u(inv[c]) == 0x7f800000u;  // tiny amax: no x is NaN or inf, so y is NaN only for x = +-0
#pragma unroll
      for (u32 i = 0; i < TP; ++i) {
        float vv = chan<DT>(raw[i], cc) - mean[c];
        float cl = __builtin_amdgcn_fmed3f(y[i], -448.0f, 448.0f);
        cl = is_nan_sel(y[i], inv_inf ? vv : as_f(0x7fc00000u), cl);  // 0 * inf keeps the zero; NaN -> 0x7F
        y[i] = tp0 + i < S ? cl : 0.0f;                                // padded tokens are 0 even when NaN
      }
    }
    u32 w[TP / 4];
#pragma unroll
    for (u32 j = 0; j < TP / 4; ++j) {
      int lo = __builtin_amdgcn_cvt_pk_fp8_f32(y[4 * j], y[4 * j + 1], 0, false);
      w[j] = (u32)__builtin_amdgcn_cvt_pk_fp8_f32(y[4 * j + 2], y[4 * j + 3], lo, true);
    }
    if constexpr (TP == 16)
      store16(dst + (u64)c * vrows + TP * part, (u32x4){w[0], w[1], w[2], w[3]});
    else
      *(u32x2*)(dst + (u64)c * vrows) = (u32x2){w[0], w[1]};
  }
  }
}
template <int DT, int DP>
INLINE void quant_v(const QuantArgs& a, u32 b, u32 h, u32 tile) {
  constexpr u32 NCG = DP / 8, TPL = SCALE_BLOCK * NCG / 32;
  u32 lane = lane_id(), cg = lane % NCG, tg = lane / NCG;
  bool real = cg * 8 < a.D;
  const Seq sq = sequence(a.cu_kv, a.varlen != 0, b, a.S_kv, a.S_kv_pad, a.rows_kv, tile);
  if (sq.skip) return;  // wave-uniform
  u32 t0 = tile * SCALE_BLOCK + tg * TPL;
  u64 bh = (u64)b * a.H_kv + h;
  const float* invp = a.v_inv + bh * DP + cg * 8;
  f32x4 i0 = *(const f32x4*)invp, i1 = *(const f32x4*)(invp + 4);
  float inv[8] = {i0[0], i0[1], i0[2], i0[3], i1[0], i1[1], i1[2], i1[3]};
  // x = v - v_mean (smooth_v; v_mean = +0 otherwise, and v - (+0) is v bit for bit, -0 included)
  const float* meanp = a.v_mean + bh * DP + cg * 8;
  f32x4 m0 = *(const f32x4*)meanp, m1 = *(const f32x4*)(meanp + 4);
  float mean[8] = {m0[0], m0[1], m0[2], m0[3], m1[0], m1[1], m1[2], m1[3]};
  // fast path: every inv of this lane finite and nonzero, so every amax is finite and nonzero and
  // |v * inv| <= 448 * (1 + 2^-24) rounds to at most 448 in the RNE fp8 conversion: no clamp, no NaN.
  // inv == 0 means amax 0 or inf (inf * 0 = NaN must become 0x7F), inv == inf a tiny amax: general path. A lane of
  // padded channels (zeros times inv 0) gives +0 on either path.
  bool lane_fast = true;
#pragma unroll
  for (int c = 0; c < 8; ++c) lane_fast = lane_fast && (as_u(inv[c]) & 0x7fffffffu) - 1u < 0x7f7fffffu;
  lane_fast = lane_fast || !real;
  bool fast = __builtin_amdgcn_ballot_w32(!lane_fast) == 0;  // wave-uniform: one path for the whole wave
  const u64 lbh = (u64)sq.lay_b * a.H_kv + h;  // the layout's (batch, head); bh indexes the statistics
  const u32 vrows = sq.rows;
  unsigned char* dst = a.v_t + (lbh * DP + cg * 8) * vrows + sq.row0 + t0;
  quant_v_part<DT, DP>(a, sq, h, tile, inv, mean, fast, dst, 0, t0);
  if constexpr (V_PARTS(DP) > 1) quant_v_part<DT, DP>(a, sq, h, tile, inv, mean, fast, dst, 1, t0 + TPL / V_PARTS(DP));
}

// pv fp16: V tile of K/V head h transposed to fp16 [D_pad, S_kv_pad] (the f16 WMMA's A operand rows): fp16 input
// bits pass through, bf16 and fp32 are rounded by v_cvt_f16_f32 (RNE, overflow -> +-inf, fp16 subnormals kept: torch's
// .to(float16) of float32(v)). Lane layout, padding and stores as quant_v with 2 bytes per token.
template <int DT, int DP>
INLINE void quant_v16_part(const QuantArgs& a, const Seq& sq, u32 h, u32 tile, u16* dst, int part) {
  constexpr u32 NCG = DP / 8, TPL = SCALE_BLOCK * NCG / 32, TP = TPL / V_PARTS(DP);
  const u32 vrows = sq.rows;
#pragma unroll
  for (int pass = 0; pass < V_PASSES(DT); ++pass) {
  u32 raw[TP][4];
  load_v_pass<DT, DP>(raw, a, sq, h, tile, pass, part);
#pragma unroll
  for (int cc = 0; cc < 8 / V_PASSES(DT); ++cc) {
    const int c = pass * (8 / V_PASSES(DT)) + cc;  // channel 8cg + c; raw holds it as channel cc
    u32 hv[TP];
#pragma unroll
    for (u32 i = 0; i < TP; ++i) {
      u32 bits;
      if constexpr (DT == FP16) {
        u32 p = raw[i][cc >> 1];
        bits = (cc & 1) ? p >> 16 : p & 0xffffu;
      } else {
        bits = f_to_f16(opaque(chan<DT>(raw[i], cc)));  // bf16 / fp32 value -> fp16, RNE
      }
      hv[i] = bits;
    }
    u32 w[TP / 2];
#pragma unroll
    for (u32 j = 0; j < TP / 2; ++j) w[j] = hv[2 * j] | (hv[2 * j + 1] << 16);
#pragma unroll
    for (u32 j = 0; j < TP / 8; ++j)
      store16(dst + (u64)c * vrows + TP * part + 8 * j, (u32x4){w[4 * j], w[4 * j + 1], w[4 * j + 2], w[4 * j + 3]});
  }
  }
}
template <int DT, int DP>
INLINE void quant_v16(const QuantArgs& a, u32 b, u32 h, u32 tile) {
  constexpr u32 NCG = DP / 8, TPL = SCALE_BLOCK * NCG / 32;
  u32 lane = lane_id(), cg = lane % NCG, tg = lane / NCG;
  const Seq sq = sequence(a.cu_kv, a.varlen != 0, b, a.S_kv, a.S_kv_pad, a.rows_kv, tile);
  if (sq.skip) return;  // wave-uniform
  u32 t0 = tile * SCALE_BLOCK + tg * TPL;
  const u64 lbh = (u64)sq.lay_b * a.H_kv + h;
  const u32 vrows = sq.rows;
  u16* dst = (u16*)a.v_t + (lbh * DP + cg * 8) * vrows + sq.row0 + t0;
  quant_v16_part<DT, DP>(a, sq, h, tile, dst, 0);
  if constexpr (V_PARTS(DP) > 1) quant_v16_part<DT, DP>(a, sq, h, tile, dst, 1);
}

template <int DT, int DP, int RD, int RM>
INLINE void quant_body(const QuantArgs& a, u32 x, u32 b, u32* counter, u32 folded, bool pv_fp16) {
  u32 tq = a.S_q_pad / SCALE_BLOCK, tkv = a.S_kv_pad / SCALE_BLOCK;
  u32 nq = a.H_q * tq, nk = a.H_kv * tkv;
  // Q and K are separate specializations: a runtime is_k would keep the unscaled and the scaled row alive at
  // the same time. The work index is wave-uniform (SGPR), so these are scalar divisions and uniform branches.
  if (x < nq) {
    quant_qk<DT, DP, RD, RM, false>(a, b, x / tq, x % tq);
  } else if (x < nq + nk) {
    x -= nq;
    wait_for_fold(counter, (u64)b * a.H_kv + x / tkv, folded, folded + 2 * tkv);
    quant_qk<DT, DP, RD, RM, true>(a, b, x / tkv, x % tkv);
  } else {
    x -= nq + nk;
    wait_for_fold(counter, (u64)b * a.H_kv + x / tkv, folded, folded + 2 * tkv);
    if (pv_fp16)
      quant_v16<DT, DP>(a, b, x / tkv, x % tkv);
    else
      quant_v<DT, DP>(a, b, x / tkv, x % tkv);
  }
}

// ------------------------------------------------------------------------------------------------ one launch
// Work items, claimed in order through a ticket counter (counter[0]), not by workgroup id: tickets [0, n_stats)
// are the stats items (chunk, K/V head, z = b * n_tens + which), then every batch's Q tiles, then per batch the
// K tiles and the V tiles. A K or V tile waits for its head's fold; a stats item and a Q tile wait for nothing.
// Forward progress (docs/rdna4.md §Forward progress): a workgroup holding ticket t waits only on stats items,
// whose tickets are all below t, so each was claimed by a workgroup already running -- one that never waits --
// whatever the dispatch order or occupancy; the waiting wave sleeps between polls (s_sleep) so it gives up its
// issue slots. The last workgroup to claim a ticket stores counter[0] = 0, and the last K/V tile of a head stores
// its counter = 0: the next launch in stream order finds every counter at 0 (sage_co/ops/prepare.py allocates
// them zeroed once per device and stream).
template <int DT, int DP, int RD, int RM>
INLINE void prepare_rd(SAGE_PREPARE_PARAMS) {
  u32 t = 0;
  if (lane_id() == 0) {
    t = __hip_atomic_fetch_add(counter, 1u, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
    if (t == (u32)n_items - 1) *counter = 0;  // every ticket is claimed: no add on counter[0] follows
  }
  t = (u32)__builtin_amdgcn_readfirstlane((int)t);
  if (t < (u32)n_stats) {
    StatsArgs a = {k, v, k_norm_w, cos, sin, ksum_part, vmax_part, eps, (u32)S_kv, (u32)H_kv,
                   (u32)tiles_per_chunk, (u32)n_chunks, (u32)n_tens, k_norm, (u32)D,
                   {(u32)k_sb, (u32)k_ss, (u32)k_sh}, {(u32)v_sb, (u32)v_ss, (u32)v_sh}, vmin_part, vsum_part,
                   (u32)tens, k_mean, v_scale, v_inv, v_mean, counter, (u32)n_wg, v_mode, smooth_k, 0u, 0u,
                   (u32)n_chunks, (u32)rope_dim};
    u32 r = t / (u32)stats_x;
    stats_body<DT, DP, RD, RM>(a, t % (u32)stats_x, r % (u32)H_kv, r / (u32)H_kv, cu_seqlens_kv, varlen != 0);
    return;
  }
  QuantArgs a = {q, k, v, q_norm_w, k_norm_w, cos, sin, k_mean, v_inv, q_int8, k_int8, q_scale, k_scale, v_t,
                 q_mult, eps, (u32)S_q, (u32)S_kv, (u32)H_q, (u32)H_kv, (u32)S_q_pad, (u32)S_kv_pad, (u32)D,
                 q_norm, k_norm, {(u32)q_sb, (u32)q_ss, (u32)q_sh}, {(u32)k_sb, (u32)k_ss, (u32)k_sh},
                 {(u32)v_sb, (u32)v_ss, (u32)v_sh}, v_mean, cu_seqlens_q, cu_seqlens_kv, (u32)varlen,
                 (u32)rows_q, (u32)rows_kv, (u32)rope_dim};
  u32 u = t - (u32)n_stats, nq = (u32)H_q * ((u32)S_q_pad / SCALE_BLOCK), all_q = (u32)B * nq;
  u32 kv = 2u * (u32)H_kv * ((u32)S_kv_pad / SCALE_BLOCK);  // K and V tiles per batch
  u32 x = u % nq, b = u / nq;  // a Q tile (every batch's come first)
  if (u >= all_q) x = nq + (u - all_q) % kv, b = (u - all_q) / kv;  // then per batch its K and V tiles
  quant_body<DT, DP, RD, RM>(a, x, b, counter, (u32)n_wg + 1u, pv_fp16 != 0);
}

// A symbol per (D_PAD, dtype, rounding) that serves every RoPE width (the kernarg rope_dim, rope_row), except the
// fp32 ones at D_PAD >= 128 (sage_co/abi.py PREPARE_ROPE_IN_SYMBOL): their rows fill the register file, the union
// of all widths in one body spills there, so they keep one symbol per width (prepare_rd<..., RD, ...>).
template <int DT, int DP, int RM>
INLINE void prepare_body(SAGE_PREPARE_PARAMS) {
  prepare_rd<DT, DP, ROPE_RUNTIME, RM>(SAGE_PREPARE_ARGS);
}

// ------------------------------------------------------------------------------------------------ symbols
// One symbol per (D_PAD, dtype, rounding) -- the once convention has the suffix _once -- and, for the fp32 ones at
// D_PAD >= 128, per RoPE width: generated from sage_co/family.py PREPARE. Each code object holds one D_pad and some
// input dtypes, selected by the -DPREPARE_D_PAD / -DPREPARE_DTYPES build_asm.py passes (sage_co/family.py
// CODE_OBJECTS compile_defines), so the objects of this one source compile side by side.
#define SAGE_KERNEL(NAME, TEMPLATE, ...) \
  KERNEL void NAME(SAGE_PREPARE_PARAMS) { TEMPLATE<__VA_ARGS__>(SAGE_PREPARE_ARGS); }
#include "generated/gfx1201_sage_prepare_kernels.h"
