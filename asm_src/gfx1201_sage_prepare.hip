// gfx1201 (RDNA4, wave32) SageAttention *prepare* stage: Q/K -> INT8 per 32-token block, V -> FP8 e4m3 transposed,
// optional fused RMSNorm + rotate-half RoPE on Q and K. Headers-free HIP, built by build_asm.py with clang -O3
// (no fast-math: every '/' below is clang's correctly rounded div_scale/div_fmas/div_fixup sequence, and sqrtf is
// its correctly rounded v_sqrt_f32 + fma-correction sequence). Numerics: docs/numerics.md / sage_co/reference.py,
// matched bit for bit (k_mean: summation order differs, see stats/reduce below).
//
// Inputs q, k, v: contiguous bf16 [B, S, H, 128]. S_pad = round_up(S, 64); n_tiles = S_pad / 32.
// Every workgroup of the stats and quant kernels is ONE wave32 and owns 32 tokens ("a tile") of one (b, h):
// a tile is exactly one Q/K scale block, so the block amax is a reduction inside one wave (no LDS, no barrier).
//
// Three kernels, launched in this order (sage_co/ops/prepare.py). stats and quant ship once per RoPE width:
// symbol suffix _rope32/_rope64/_rope96/_rope128, none = no RoPE (a runtime rope_dim switch let LLVM merge the
// variants' tails and spill; one symbol each keeps every kernel at <= 207 VGPRs, no scratch).
//
//  1. gfx1201_sage_prepare_stats[_ropeN]  grid (n_chunks, H, B * n_tens), block 32. n_tens = 2 with smooth_k,
//     else 1; z % n_tens selects V (0) or K (1). Chunk c covers tiles [c * tiles_per_chunk, ...) of the
//     ceil(S / 32) tiles holding valid tokens. Writes, per (b, h, chunk):
//       vmax_part[b, h, c, 128]  max |v| per channel (NaN wins: max of |bf16| bit patterns as unsigned ints,
//                                v_pk_max_u16), V lane layout as in quant below;
//       ksum_part[b, h, c, 128]  sum over the chunk's tokens of the normed/roped K per channel (smooth_k only):
//                                lane = token, rows go through LDS (8.5 KiB), lane l adds channels 4l..4l+3 of
//                                the tile's valid rows in token order, tiles in order.
//  2. gfx1201_sage_prepare_reduce  grid (1, H, B), block 128 (thread = channel). Folds the chunk partials in chunk
//     order: v_scale = amax / 448, v_inv = 448 / amax (0 when amax == 0) (workspace), k_mean = sum / S (or 0).
//  3. gfx1201_sage_prepare_quant[_ropeN]  grid (n_tiles, H, 3 * B), block 32. z % 3 selects Q (0), K (1), V (2).
//     Q/K: lane = token (one 256-byte row per lane, 16 x 16-byte loads; a padded token loads row S - 1 and is
//     masked), optional norm/RoPE on the packed bf16 row, x = f32(row) * c (Q) or f32(row) - k_mean (K), block
//     amax = in-lane max over 128 channels + 5 ds_bpermute steps, q = rint(x * inv) (x * inv + 1.5 * 2^23, whose
//     low byte is the int8) -> 8 x 16-byte stores of the int8 row. V: lane = (channel group cg = lane % 16 of 8
//     channels, token half th = lane / 16 of 16 tokens); 16 x 16-byte loads (two full 256-byte rows per load
//     instruction), then per channel 4 packed fp8 dwords = 16 consecutive tokens of the transposed [128, S_pad]
//     row: one 16-byte store per channel. The transpose is free: v_cvt_pk_fp8_f32 picks the two values it packs.
//
// Passes over the inputs (HBM reads): Q once; V twice (its per-channel scale needs all S tokens before any token
// can be quantized: stats then quant); K once, or twice with smooth_k (k_mean over all S tokens first). With
// norm/RoPE the K stats pass recomputes the normed/roped rows instead of storing them (writing and re-reading
// a bf16 copy would cost more traffic than re-reading K). The reduce pass reads only the small partials.
// No atomics: every sum has a fixed order; maxima are order-independent.
//
// Memory speed: each wave keeps 16 independent 16-byte loads (8 KiB) in flight per tile; the quant grid has
// 3 * B * H * S_pad / 32 one-wave workgroups, the stats grid B * H * n_chunks * n_tens with n_chunks <= 64
// chosen by the host (tiles_per_chunk = ceil(valid tiles / 64)). ~200 VGPRs -> 7 waves per SIMD.
//
// Non-finite values (docs/numerics.md §Non-finite, reference.py _round_int8 / to_fp8):
//   Q/K block: amax = NaN or inf -> scale = amax / 127 and every int8 0 (NaN * anything -> NaN -> 0; inv = 0
//   makes finite x 0 and inf * 0 NaN -> 0). inv = 127 / amax = inf (subnormal amax) -> int8 = 127 * sign(x),
//   0 for x = +-0. Otherwise x * inv is finite and |x * inv| <= 127 * (1 + 2^-24): rint, no clamp needed (the
//   three cases are wave-uniform branches on an SGPR, so the common path stays short).
//   V channel: amax and inv finite and nonzero for all 8 channels of every lane (wave ballot) -> |v * inv| <=
//   448 * (1 + 2^-24), which v_cvt_pk_fp8_f32 (RNE) rounds to 448 at most; otherwise clamp with v_med3, map NaN
//   (med3 would turn it into -448) to +NaN -> 0x7F, and force padded tokens to 0.
//   bf16 rounding in norm/RoPE: RNE, NaN -> (bits >> 16) | 0x40 (torch's .to(bfloat16)), see bf16_bits.
//
// Kernargs (explicit only, no hidden arguments; sage_co/ops/prepare.py declares the same layouts):
//   stats  (84 B):  0 k, 8 v, 16 k_norm_w, 24 cos, 32 sin, 40 ksum_part, 48 vmax_part (ptr);
//                   56 eps (f32); 60 S, 64 H, 68 tiles_per_chunk, 72 n_chunks, 76 n_tens, 80 k_norm (i32)
//   reduce (56 B):  0 ksum_part, 8 vmax_part, 16 k_mean, 24 v_scale, 32 v_inv (ptr); 40 H, 44 n_chunks, 48 S,
//                   52 smooth_k (i32)
//   quant (140 B):  0 q, 8 k, 16 v, 24 q_norm_w, 32 k_norm_w, 40 cos, 48 sin, 56 k_mean, 64 v_inv, 72 q_int8,
//                   80 k_int8, 88 q_scale, 96 k_scale, 104 v_fp8 (ptr); 112 q_mult (f32), 116 eps (f32);
//                   120 S, 124 H, 128 S_pad, 132 q_norm, 136 k_norm (i32)
// q_norm / k_norm = 0 means no RMSNorm (the weight pointer is then never read); without RoPE cos/sin are unused.

#pragma clang fp contract(off)  // every product and sum is rounded on its own, like the torch reference

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define INLINE __device__ static inline __attribute__((always_inline))
#define KERNEL extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(32, 32)))

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;
typedef signed char i8;
typedef u32 u32x4 __attribute__((ext_vector_type(4)));
typedef float f32x4 __attribute__((ext_vector_type(4)));
typedef u16 u16x2 __attribute__((ext_vector_type(2)));

#define HEAD_DIM 128
#define TILE 32

// ------------------------------------------------------------------------------------------------ helpers
INLINE u32 lane_id() { return __builtin_amdgcn_workitem_id_x(); }
INLINE float as_f(u32 u) { return __builtin_bit_cast(float, u); }
INLINE u32 as_u(float f) { return __builtin_bit_cast(u32, f); }
INLINE float bf_lo(u32 p) { return as_f(p << 16); }           // channel 2j of a packed pair
INLINE float bf_hi(u32 p) { return as_f(p & 0xffff0000u); }   // channel 2j+1
INLINE float is_nan_sel(float f, float if_nan, float other) { return f != f ? if_nan : other; }

// f32 -> bf16 round-half-even as a bit pattern in the HIGH half of the result (the low half is junk).
// NaN needs no select (a per-element select here was turned into exec-mask branches by LLVM): every NaN this
// kernel rounds is a quiet NaN whose low 16 bits are zero -- the inputs are bf16 and VALU arithmetic returns an
// input NaN quieted or the canonical 0x7fc00000 -- so adding at most 0x8000 cannot carry into the high half,
// and the high half is the NaN's own top bits, quiet bit set: exactly torch's (bits >> 16) | 0x40.
INLINE u32 bf16_bits(float f) {
  u32 u = as_u(f);
  return u + 0x7fffu + ((u >> 16) & 1u);
}
// ... and as the f32 value of that bf16
INLINE float bf16r(float f) { return as_f(bf16_bits(f) & 0xffff0000u); }
// two bf16 held in the high halves of lo and hi -> one packed dword (lo in bits 15:0). v_perm_b32 selector bytes
// 0-3 pick bytes of the second operand, 4-7 bytes of the first.
INLINE u32 pack_bf16(u32 lo, u32 hi) { return __builtin_amdgcn_perm(hi, lo, 0x07060302u); }

INLINE u32x4 load16(const void* p) { return *(const u32x4*)p; }
INLINE void store16(void* p, u32x4 v) { *(u32x4*)p = v; }

// wave32 all-lane reduction through ds_bpermute (docs/rdna4.md §LDS: ds_bpermute_b32 reads lane addr/4).
INLINE u32 wave_max_u32(u32 v) {
  u32 lane = lane_id();
#pragma unroll
  for (u32 m = 16; m >= 1; m >>= 1) {
    u32 o = (u32)__builtin_amdgcn_ds_bpermute((int)(((lane ^ m) & 31u) << 2), (int)v);
    v = v > o ? v : o;
  }
  return v;
}

// A row of one token and head: 128 bf16 channels packed in 64 dwords, dword j = channels 2j (bits 15:0) and
// 2j+1 (bits 31:16) -- the memory layout, loaded with 16 x 16-byte loads. Between the optional stages the row
// stays packed (64 VGPRs), so a skipped stage costs no registers.
INLINE float ch(const u32 (&row)[64], int i) { return (i & 1) ? bf_hi(row[i >> 1]) : bf_lo(row[i >> 1]); }

// Callers pass a row that exists (a padded token loads token S - 1, t_ld = min(t, S - 1)) and mask the result,
// so no load is ever predicated.
INLINE void load_row(u32 (&row)[64], const u16* __restrict__ p) {
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    u32x4 v = load16(p + 8 * j);
    row[4 * j] = v[0]; row[4 * j + 1] = v[1]; row[4 * j + 2] = v[2]; row[4 * j + 3] = v[3];
  }
}

// RMSNorm (reference.rms_norm): t = x*x, t[i] += t[i + w] for w = 64 .. 1, ms = t[0] / 128,
// r = 1 / sqrt(ms + eps), y = bf16(x * r), y = bf16(y * weight).
INLINE void rms_norm(u32 (&row)[64], const u16* __restrict__ weight, float eps) {
  float t[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    float a = ch(row, i) * ch(row, i);
    float b = ch(row, i + 64) * ch(row, i + 64);
    t[i] = a + b;
  }
#pragma unroll
  for (int w = 32; w >= 1; w >>= 1) {
#pragma unroll
    for (int i = 0; i < w; ++i) t[i] = t[i] + t[i + w];
  }
  float ms = t[0] / 128.0f;
  float r = 1.0f / __builtin_sqrtf(ms + eps);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    u32x4 w = load16(weight + 8 * j);  // wave-uniform address: scalar loads
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      int d = 4 * j + e;
      u32 lo = bf16_bits(bf16r(bf_lo(row[d]) * r) * bf_lo(w[e]));
      u32 hi = bf16_bits(bf16r(bf_hi(row[d]) * r) * bf_hi(w[e]));
      row[d] = pack_bf16(lo, hi);
    }
  }
}

// Rotate-half RoPE on channels [0, RD) (reference.rope): out = bf16(bf16(y*cos) + bf16(rot*sin)),
// rot = cat(-y[H2:RD], y[0:H2]). cs/sn point at this token's cos/sin rows (RD bf16 each). Channel i < H2 pairs
// with i + H2; both outputs are made from the two old values and written back in place.
template <int RD>
INLINE void rope(u32 (&row)[64], const u16* __restrict__ cs, const u16* __restrict__ sn) {
  constexpr int H2 = RD / 2, CHUNKS = H2 / 8;
  // cos/sin go in chunks of 8 channel pairs, double-buffered: chunk j + 1 is loading while chunk j computes. The
  // scheduling barrier keeps LLVM from hoisting every chunk's loads to the top (RD = 128: 128 more VGPRs, which
  // spilled in the stats kernel).
  u32x4 cur[4] = {load16(cs), load16(cs + H2), load16(sn), load16(sn + H2)};
#pragma unroll
  for (int j = 0; j < CHUNKS; ++j) {
    u32x4 nxt[4] = {cur[0], cur[1], cur[2], cur[3]};
    if (j + 1 < CHUNKS) {
      int o = 8 * (j + 1);
      nxt[0] = load16(cs + o); nxt[1] = load16(cs + H2 + o); nxt[2] = load16(sn + o); nxt[3] = load16(sn + H2 + o);
    }
    u32x4 c_lo = cur[0], c_hi = cur[1], s_lo = cur[2], s_hi = cur[3];
#pragma unroll
    for (int e = 0; e < 4; ++e) {          // dword e of the chunk: channels i, i + 1
      int d1 = 4 * j + e, d2 = d1 + H2 / 2;  // dwords holding channels i, i+1 and i+H2, i+H2+1
      u32 o1[2], o2[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float y1 = half ? bf_hi(row[d1]) : bf_lo(row[d1]);
        float y2 = half ? bf_hi(row[d2]) : bf_lo(row[d2]);
        float c1 = half ? bf_hi(c_lo[e]) : bf_lo(c_lo[e]), s1 = half ? bf_hi(s_lo[e]) : bf_lo(s_lo[e]);
        float c2 = half ? bf_hi(c_hi[e]) : bf_lo(c_hi[e]), s2 = half ? bf_hi(s_hi[e]) : bf_lo(s_hi[e]);
        o1[half] = bf16_bits(bf16r(y1 * c1) + bf16r(-y2 * s1));  // rot[i] = -y[i + H2]
        o2[half] = bf16_bits(bf16r(y2 * c2) + bf16r(y1 * s2));   // rot[i + H2] = y[i]
      }
      row[d1] = pack_bf16(o1[0], o1[1]);
      row[d2] = pack_bf16(o2[0], o2[1]);
    }
    __builtin_amdgcn_sched_barrier(0);
#pragma unroll
    for (int q = 0; q < 4; ++q) cur[q] = nxt[q];
  }
}

// The optional norm/RoPE of one Q or K row; cos_row/sin_row belong to the same (loaded) token.
template <int RD>
INLINE void norm_rope_row(u32 (&row)[64], int norm, const u16* __restrict__ weight, float eps,
                          const u16* __restrict__ cos_row, const u16* __restrict__ sin_row) {
  if (norm) rms_norm(row, weight, eps);
  if constexpr (RD > 0) rope<RD>(row, cos_row, sin_row);
}

INLINE u64 row_index(u32 b, u32 t, u32 h, u32 S, u32 H) { return ((u64)b * S + t) * H + h; }

// ------------------------------------------------------------------------------------------------ stats
struct StatsArgs {
  const u16* k; const u16* v; const u16* k_norm_w; const u16* cos; const u16* sin;
  float* ksum_part; float* vmax_part; float eps; u32 S, H, tiles_per_chunk, n_chunks, n_tens; int k_norm;
};

INLINE u32 min_u32(u32 a, u32 b) { return a < b ? a : b; }

// V: per-channel max |v| over this chunk. lane = (cg, th): channels 8cg..8cg+7, tokens 16th..16th+15 of a tile.
// |bf16| bit patterns compare as unsigned ints in magnitude order with every NaN above inf, so packed u16 max
// (v_pk_max_u16) keeps NaN: 1 op per element. Padded tokens re-load token S-1: max is idempotent.
INLINE void stats_v(const StatsArgs& a, u32 b, u32 h, u32 chunk) {
  u32 lane = lane_id(), cg = lane & 15u, th = lane >> 4;
  u32 n_valid_tiles = (a.S + TILE - 1) / TILE;
  u32 t_begin = chunk * a.tiles_per_chunk;
  u32 t_end = min_u32(t_begin + a.tiles_per_chunk, n_valid_tiles);
  u16x2 m[4] = {{0, 0}, {0, 0}, {0, 0}, {0, 0}};
  for (u32 tile = t_begin; tile < t_end; ++tile) {
    u32x4 raw[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      u32 t = min_u32(tile * TILE + th * 16 + i, a.S - 1);
      raw[i] = load16(a.v + row_index(b, t, h, a.S, a.H) * HEAD_DIM + cg * 8);
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        m[e] = __builtin_elementwise_max(m[e], __builtin_bit_cast(u16x2, raw[i][e] & 0x7fff7fffu));
    }
  }
  // lanes l and l ^ 16 hold the same channels (other token half)
  u32 out[8];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    u32 other = (u32)__builtin_amdgcn_ds_bpermute((int)((lane ^ 16u) << 2), (int)__builtin_bit_cast(u32, m[e]));
    u32 w = __builtin_bit_cast(u32, __builtin_elementwise_max(m[e], __builtin_bit_cast(u16x2, other)));
    out[2 * e] = w << 16;
    out[2 * e + 1] = w & 0xffff0000u;
  }
  if (th == 0) {
    float* dst = a.vmax_part + ((u64)(b * a.H + h) * a.n_chunks + chunk) * HEAD_DIM + cg * 8;
    store16(dst, (u32x4){out[0], out[1], out[2], out[3]});
    store16(dst + 4, (u32x4){out[4], out[5], out[6], out[7]});
  }
}

// K: per-channel sum over this chunk of the (normed/roped) rows. lane = token; the column sums go through LDS:
// each lane writes its packed row, then lane l adds channels 4l..4l+3 of the tile's valid rows in token order.
#define LDS_ROW 68  // dwords; 64 + 4 keeps the 16-byte row stores of different lanes on different banks
template <int RD>
INLINE void stats_k(const StatsArgs& a, u32 b, u32 h, u32 chunk, u32* lds) {
  u32 lane = lane_id();
  u32 n_valid_tiles = (a.S + TILE - 1) / TILE;
  u32 t_begin = chunk * a.tiles_per_chunk;
  u32 t_end = min_u32(t_begin + a.tiles_per_chunk, n_valid_tiles);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (u32 tile = t_begin; tile < t_end; ++tile) {
    u32 t = min_u32(tile * TILE + lane, a.S - 1);
    u32 row[64];
    load_row(row, a.k + row_index(b, t, h, a.S, a.H) * HEAD_DIM);
    norm_rope_row<RD>(row, a.k_norm, a.k_norm_w, a.eps, a.cos + (u64)t * RD, a.sin + (u64)t * RD);
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");  // previous tile's LDS reads are done (WAR)
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
#pragma unroll
    for (int j = 0; j < 16; ++j)
      store16(&lds[lane * LDS_ROW + 4 * j], (u32x4){row[4 * j], row[4 * j + 1], row[4 * j + 2], row[4 * j + 3]});
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
    u32 rows = min_u32(TILE, a.S - tile * TILE);  // wave-uniform: padded rows are never added
#pragma unroll
    for (u32 r = 0; r < TILE; ++r) {
      if (r < rows) {
        typedef u32 u32x2 __attribute__((ext_vector_type(2)));
        u32x2 c = *(const u32x2*)&lds[r * LDS_ROW + 2 * lane];
        acc[0] = acc[0] + bf_lo(c[0]);
        acc[1] = acc[1] + bf_hi(c[0]);
        acc[2] = acc[2] + bf_lo(c[1]);
        acc[3] = acc[3] + bf_hi(c[1]);
      }
    }
  }
  float* dst = a.ksum_part + ((u64)(b * a.H + h) * a.n_chunks + chunk) * HEAD_DIM + 4 * lane;
  store16(dst, (u32x4){as_u(acc[0]), as_u(acc[1]), as_u(acc[2]), as_u(acc[3])});
}

// One kernel symbol per rope_dim (suffix _rope32 .. _rope128; none = no RoPE): with all five variants behind one
// switch, LLVM merges their common tails and the row's registers no longer fit in 256 VGPRs.
#define STATS_PARAMS                                                                                          \
  const u16 *__restrict__ k, const u16 *__restrict__ v, const u16 *__restrict__ k_norm_w,                     \
      const u16 *__restrict__ cos, const u16 *__restrict__ sin, float *__restrict__ ksum_part,                \
      float *__restrict__ vmax_part, float eps, int S, int H, int tiles_per_chunk, int n_chunks, int n_tens,  \
      int k_norm
template <int RD>
INLINE void stats_body(STATS_PARAMS) {
  StatsArgs a = {k, v, k_norm_w, cos, sin, ksum_part, vmax_part, eps, (u32)S, (u32)H, (u32)tiles_per_chunk,
                 (u32)n_chunks, (u32)n_tens, k_norm};
  u32 chunk = __builtin_amdgcn_workgroup_id_x();
  u32 h = __builtin_amdgcn_workgroup_id_y();
  u32 z = __builtin_amdgcn_workgroup_id_z();
  u32 b = z / a.n_tens, which = z % a.n_tens;
  __attribute__((shared)) static u32 lds[TILE * LDS_ROW];  // 8.5 KiB, K column sums only
  if (which == 0)
    stats_v(a, b, h, chunk);
  else
    stats_k<RD>(a, b, h, chunk, lds);
}
#define STATS_ARGS k, v, k_norm_w, cos, sin, ksum_part, vmax_part, eps, S, H, tiles_per_chunk, n_chunks, n_tens, k_norm
KERNEL void gfx1201_sage_prepare_stats(STATS_PARAMS) { stats_body<0>(STATS_ARGS); }
KERNEL void gfx1201_sage_prepare_stats_rope32(STATS_PARAMS) { stats_body<32>(STATS_ARGS); }
KERNEL void gfx1201_sage_prepare_stats_rope64(STATS_PARAMS) { stats_body<64>(STATS_ARGS); }
KERNEL void gfx1201_sage_prepare_stats_rope96(STATS_PARAMS) { stats_body<96>(STATS_ARGS); }
KERNEL void gfx1201_sage_prepare_stats_rope128(STATS_PARAMS) { stats_body<128>(STATS_ARGS); }

// ------------------------------------------------------------------------------------------------ reduce
extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(128, 128)))
void gfx1201_sage_prepare_reduce(const float* __restrict__ ksum_part, const float* __restrict__ vmax_part,
                                 float* __restrict__ k_mean, float* __restrict__ v_scale,
                                 float* __restrict__ v_inv, int H, int n_chunks, int S, int smooth_k) {
  u32 ch = __builtin_amdgcn_workitem_id_x();
  u32 h = __builtin_amdgcn_workgroup_id_y();
  u32 b = __builtin_amdgcn_workgroup_id_z();
  u64 bh = (u64)b * (u32)H + h;
  const float* vp = vmax_part + bh * (u32)n_chunks * HEAD_DIM + ch;
  u32 m = 0;  // max of non-negative f32 bit patterns; NaN patterns sort above inf
  for (int c = 0; c < n_chunks; ++c) {
    u32 w = as_u(vp[(u64)c * HEAD_DIM]);
    m = m > w ? m : w;
  }
  float amax = as_f(m);
  v_scale[bh * HEAD_DIM + ch] = amax / 448.0f;
  v_inv[bh * HEAD_DIM + ch] = amax == 0.0f ? 0.0f : 448.0f / amax;
  float mean = 0.0f;
  if (smooth_k) {
    const float* kp = ksum_part + bh * (u32)n_chunks * HEAD_DIM + ch;
    float s = 0.0f;
    for (int c = 0; c < n_chunks; ++c) s = s + kp[(u64)c * HEAD_DIM];
    mean = s / (float)S;
  }
  k_mean[bh * HEAD_DIM + ch] = mean;
}

// ------------------------------------------------------------------------------------------------ quant
struct QuantArgs {
  const u16* q; const u16* k; const u16* v; const u16* q_norm_w; const u16* k_norm_w; const u16* cos;
  const u16* sin; const float* k_mean; const float* v_inv; i8* q_int8; i8* k_int8; float* q_scale;
  float* k_scale; unsigned char* v_fp8; float q_mult, eps; u32 S, H, S_pad; int q_norm, k_norm;
};

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

// Q (is_k = false) or K tile: one 32-token scale block, lane = token.
template <int RD, bool is_k>
INLINE void quant_qk(const QuantArgs& a, u32 b, u32 h, u32 tile) {
  u32 lane = lane_id();
  u32 t = tile * TILE + lane;
  bool valid = t < a.S;
  u32 t_ld = min_u32(t, a.S - 1);
  u32 row[64];
  load_row(row, (is_k ? a.k : a.q) + row_index(b, t_ld, h, a.S, a.H) * HEAD_DIM);
  norm_rope_row<RD>(row, is_k ? a.k_norm : a.q_norm, is_k ? a.k_norm_w : a.q_norm_w, a.eps,
                    a.cos + (u64)t_ld * RD, a.sin + (u64)t_ld * RD);
  float x[HEAD_DIM];
#pragma unroll
  for (int i = 0; i < HEAD_DIM; ++i) x[i] = ch(row, i);
  u64 bh = (u64)b * a.H + h;
  if constexpr (is_k) {
    const f32x4* mean = (const f32x4*)(a.k_mean + bh * HEAD_DIM);  // wave-uniform: scalar loads
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      f32x4 m4 = mean[j];
#pragma unroll
      for (int e = 0; e < 4; ++e) x[4 * j + e] = x[4 * j + e] - m4[e];
    }
  } else {
#pragma unroll
    for (int i = 0; i < HEAD_DIM; ++i) x[i] = x[i] * a.q_mult;
  }
  u32 m = 0;  // max |x| as bit patterns: NaN wins like torch.amax
#pragma unroll
  for (int i = 0; i < HEAD_DIM; i += 2) {
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
  if (lane == 0) (is_k ? a.k_scale : a.q_scale)[bh * (a.S_pad / TILE) + tile] = scale;

  u32 words[32];
  if (m >= 0x7f800000u) {  // NaN or inf in the block: every x * inv is 0 or NaN -> int8 0
#pragma unroll
    for (int j = 0; j < 32; ++j) words[j] = 0;
  } else if (as_u(inv) == 0x7f800000u) {  // subnormal amax: x * inv = +-inf -> +-127, 0 * inf = NaN -> 0
#pragma unroll
    for (int j = 0; j < 32; ++j) {
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
    for (int j = 0; j < 32; ++j) {
      u32 qv[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) qv[e] = as_u(x[4 * j + e] * inv + ROUND_MAGIC);
      words[j] = pack4_i8(qv[0], qv[1], qv[2], qv[3]);
    }
  }
  if (!valid) {
#pragma unroll
    for (int j = 0; j < 32; ++j) words[j] = 0;  // padded rows are zero
  }
  i8* dst = (is_k ? a.k_int8 : a.q_int8) + (bh * a.S_pad + t) * HEAD_DIM;
#pragma unroll
  for (int j = 0; j < 8; ++j)
    store16(dst + 16 * j, (u32x4){words[4 * j], words[4 * j + 1], words[4 * j + 2], words[4 * j + 3]});
}

// V tile: lane = (cg, th) -> channels 8cg..8cg+7, tokens tile*32 + 16th + 0..15 (a padded token loads token
// S-1 and is zeroed before use).
INLINE void quant_v(const QuantArgs& a, u32 b, u32 h, u32 tile) {
  u32 lane = lane_id(), cg = lane & 15u, th = lane >> 4;
  u32 t0 = tile * TILE + th * 16;
  u32x4 raw[16];
#pragma unroll
  for (int i = 0; i < 16; ++i)
    raw[i] = load16(a.v + row_index(b, min_u32(t0 + i, a.S - 1), h, a.S, a.H) * HEAD_DIM + cg * 8);
  if ((tile + 1) * TILE > a.S) {  // wave-uniform: only the last tile holding valid tokens, and padding tiles
#pragma unroll
    for (int i = 0; i < 16; ++i)
      if (t0 + i >= a.S) raw[i] = (u32x4){0, 0, 0, 0};
  }
  u64 bh = (u64)b * a.H + h;
  const float* invp = a.v_inv + bh * HEAD_DIM + cg * 8;
  f32x4 i0 = *(const f32x4*)invp, i1 = *(const f32x4*)(invp + 4);
  float inv[8] = {i0[0], i0[1], i0[2], i0[3], i1[0], i1[1], i1[2], i1[3]};
  // fast path: every inv of this lane finite and nonzero, so every amax is finite and nonzero and
  // |v * inv| <= 448 * (1 + 2^-24) rounds to at most 448 in the RNE fp8 conversion: no clamp, no NaN.
  // inv == 0 means amax 0 or inf (inf * 0 = NaN must become 0x7F): general path too.
  bool lane_fast = true;
#pragma unroll
  for (int c = 0; c < 8; ++c) lane_fast = lane_fast && (as_u(inv[c]) & 0x7fffffffu) - 1u < 0x7f7fffffu;
  bool fast = __builtin_amdgcn_ballot_w32(!lane_fast) == 0;  // wave-uniform: one path for the whole wave
  unsigned char* dst = a.v_fp8 + (bh * HEAD_DIM + cg * 8) * a.S_pad + t0;
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    float y[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      u32 p = raw[i][c >> 1];
      y[i] = ((c & 1) ? bf_hi(p) : bf_lo(p)) * inv[c];
    }
    if (!fast) {
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        float cl = __builtin_amdgcn_fmed3f(y[i], -448.0f, 448.0f);
        cl = is_nan_sel(y[i], as_f(0x7fc00000u), cl);  // +NaN -> 0x7F (med3 would give -448)
        y[i] = t0 + i < a.S ? cl : 0.0f;                // padded tokens are 0 even when 0 * inv is NaN
      }
    }
    u32 w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      int lo = __builtin_amdgcn_cvt_pk_fp8_f32(y[4 * j], y[4 * j + 1], 0, false);
      w[j] = (u32)__builtin_amdgcn_cvt_pk_fp8_f32(y[4 * j + 2], y[4 * j + 3], lo, true);
    }
    store16(dst + (u64)c * a.S_pad, (u32x4){w[0], w[1], w[2], w[3]});
  }
}

#define QUANT_PARAMS                                                                                          \
  const u16 *__restrict__ q, const u16 *__restrict__ k, const u16 *__restrict__ v,                            \
      const u16 *__restrict__ q_norm_w, const u16 *__restrict__ k_norm_w, const u16 *__restrict__ cos,        \
      const u16 *__restrict__ sin, const float *__restrict__ k_mean, const float *__restrict__ v_inv,         \
      i8 *__restrict__ q_int8, i8 *__restrict__ k_int8, float *__restrict__ q_scale,                          \
      float *__restrict__ k_scale, unsigned char *__restrict__ v_fp8, float q_mult, float eps, int S, int H,  \
      int S_pad, int q_norm, int k_norm
template <int RD>
INLINE void quant_body(QUANT_PARAMS) {
  QuantArgs a = {q, k, v, q_norm_w, k_norm_w, cos, sin, k_mean, v_inv, q_int8, k_int8, q_scale, k_scale, v_fp8,
                 q_mult, eps, (u32)S, (u32)H, (u32)S_pad, q_norm, k_norm};
  u32 tile = __builtin_amdgcn_workgroup_id_x();
  u32 h = __builtin_amdgcn_workgroup_id_y();
  u32 z = __builtin_amdgcn_workgroup_id_z();
  u32 b = z / 3, which = z % 3;
  // Q and K are separate specializations: a runtime is_k would keep the unscaled and the scaled row alive at
  // the same time
  if (which == 0)
    quant_qk<RD, false>(a, b, h, tile);
  else if (which == 1)
    quant_qk<RD, true>(a, b, h, tile);
  else
    quant_v(a, b, h, tile);
}
#define QUANT_ARGS q, k, v, q_norm_w, k_norm_w, cos, sin, k_mean, v_inv, q_int8, k_int8, q_scale, k_scale, v_fp8, \
                   q_mult, eps, S, H, S_pad, q_norm, k_norm
KERNEL void gfx1201_sage_prepare_quant(QUANT_PARAMS) { quant_body<0>(QUANT_ARGS); }
KERNEL void gfx1201_sage_prepare_quant_rope32(QUANT_PARAMS) { quant_body<32>(QUANT_ARGS); }
KERNEL void gfx1201_sage_prepare_quant_rope64(QUANT_PARAMS) { quant_body<64>(QUANT_ARGS); }
KERNEL void gfx1201_sage_prepare_quant_rope96(QUANT_PARAMS) { quant_body<96>(QUANT_ARGS); }
KERNEL void gfx1201_sage_prepare_quant_rope128(QUANT_PARAMS) { quant_body<128>(QUANT_ARGS); }
