// gfx1201_sage_attention_fwd_d{64,128,256}_{bf16,fp16,fp32}[_pv16]: SageAttention forward (dense, causal, block-sparse) on RDNA4, headers-free HIP.
//
// The readable baseline of the attention kernel; a hand-scheduled asm kernel later must beat it and match it.
// It keeps the same kernarg struct and launch geometry (below). Hardware facts cite docs/rdna4.md sections
// (§WMMA, §Memory, ...). One template, fifteen symbols: the padded head dim DP (64, 128 or 256; manifest key
// head_dim), the output dtype (OT: bf16, fp16 or fp32; key out_dtype) and the P.V input type (PV16: key pv_dtype
// "fp8" or "fp16", suffix _pv16; DP 64 and 128 only: at 256 its V^T staging spills). GQA, separate query/key
// lengths, the caller's output layout and smooth_v are runtime arguments.
//
// Math, per query row i of query head h (K/V head g = h / (H_q/H_kv)) and key tile of 64 keys
// (sage_co.reference.sage_attention_model):
//   s      = float(sum_d q_int8*k_int8[g]) * (q_scale[i/32] * k_scale[g][j/32])   keys j >= lim(i): s = -inf
//   (only the active key tiles of the LUT are visited; lim(i) = seq_len_kv, or min(seq_len_kv, i + S_kv - S_q + 1)
//   when causal)
//   m_cand = max(m_old, max_j s);  d = m_old - m_cand;  grow = d < -RESCALE_TAU (m starts at M_INIT = -FLT_MAX)
//   m_new  = grow ? m_cand : m_old;  alpha = exp2(grow ? d : 0) (1 exactly without growth: no O rescale)
//   t      = m_new - P_OFF (P_OFF = 8 - 2^-7 folds the fp8 range into the exponent: p <= 2^(8.05 + RESCALE_TAU)
//            < 448 for every m, docs/numerics.md §Attention arithmetic model)
//   p      = exp2(arg), arg = fma(x, qk, -fma(MAGIC, qk, t)) with x = MAGIC + s_int32 (the accumulator's float)
//            when every lane's qk = q_scale*k_scale is in (0, 2^-6], else arg = s - t;
//   l_h    = fma(l_h, alpha, rowsum_h(p)) per lane half h (keys 32h..32h+31), l = l_0 + l_1 in the epilogue
//   O      = O*alpha + fp8_e4m3(p) . v_fp8                                   (fp32 accumulation)
//   out    = round_sat((O * (1/l)) * v_scale[g][d] [+ v_mean[g][d]]) (inv = 0 when l = 0: zeros; v_mean with
//            FLAG_SMOOTH_V on rows with l != 0)  RNE to bf16 or fp16, saturating at +-the dtype's
//            largest finite value (NaN -> the dtype's quiet NaN), d < head_dim only (any D: the last partial
//            8-channel group of a lane is stored element by element); fp32 output: the fp32 value itself (no
//            rounding, no saturation: +-inf stays +-inf), NaN -> 0x7fc00000 (the one fp32 NaN written)
//   PV16:  O = O*alpha + fp16(p) . v_f16 (v_wmma_f32_16x16x16_f16), out = round_sat(O * (1/l)) (no scales)
//   lse    = (m + (log2 l - P_OFF))*ln2 [+ ln2 * q_deq.k_mean[g]]
// `#pragma clang fp contract(off)`: HIP contracts a*b+c into FMA by default, which would round differently
// from the model.
//
// Launch geometry: grid (seq_pad_q/64, num_heads_q, batch) workgroups of 128 threads = 4 wave32.
//   Workgroup = 64 queries of one (batch, query head); wave w owns queries 16w..16w+15 of them.
//   Each wave loops over the active key tiles (LUT row of its query tile) of K/V head (head * kv_group_magic) >> 32.
//
// Kernargs: sage_co/abi.py ATTENTION_FWD_ARGS, declared there once with what each field holds (docs/abi.md has the
// offsets; no hidden arguments). The kernels' parameter list is SAGE_ATTENTION_FWD_PARAMS of generated/sage_abi.h,
// generated from it, as are the flag bits (FLAG_*: lse, the smooth_k lse term, causal, smooth_v, attn_mask, varlen)
// and the constants below. The mask fields are read only with FLAG_MASK, cu_seqlens only with FLAG_VARLEN, v_mean
// only with FLAG_SMOOTH_V here (the asm kernel loads it always: the host passes k_mean without smooth_v).
// Varlen (FLAG_VARLEN, docs/numerics.md §Varlen): batch z is packed sequence b = z, len_q = cu_seqlens_q[b+1] -
// cu_seqlens_q[b], len_kv likewise; these replace seq_len_q / seq_len_kv / causal_offset (= len_kv - len_q). The
// prepared tensors are packed: q [1, H_q, seq_pad_q, DP] with sequence b at rows packed_row(cu_q[b], b) =
// 64*ceil(cu_q[b]/64) + 64*b (sage_co/abi.py packed_row), q_scale at blocks packed_row/32, k / V^T columns /
// k_scale likewise from cu_seqlens_kv; k_mean / v_scale / v_mean stay [B, H_kv, DP] (per sequence); out row i of
// the sequence is token cu_q[b] + i (out_stride_b is not used), lse [H_q, seq_len_q = total_q]. A workgroup whose
// query tile starts at or past len_q exits at once; the key tiles are 0 .. count-1, count = ceil(len_kv/64), or
// with causal the tiles holding a key j <= last row + causal_offset (the causal LUT of sage_co/masks.py), counted
// here: the LUT is not read. Varlen and attn_mask (FLAG_MASK) are exclusive (the host refuses both): with varlen
// no mask_kind entry is read and every tile is full.
// Every tensor but out is dense in the layout above; the host (sage_co/ops/attention.py) checks that.

// Data flow (docs/rdna4.md §WMMA, "SageAttention data flow"): S^T = K.Q^T with v_wmma_i32_16x16x16_iu8
// (A = K rows, B = Q^T), so the 16 query columns of the D fragment sit one per lane pair (r, r+16)
// (§WMMA lane layouts: D[m][n] in lane 16*(m/8)+n, vgpr m%8). Row max / row sum = in-lane reduction over
// 32 VGPRs + one v_permlanex16 exchange (DPP cannot cross 16-lane rows). P^T is packed with
// v_cvt_pk_fp8_f32 in VGPR order and is directly the B operand of O^T = V^T.P^T
// (v_wmma_f32_16x16x16_fp8_fp8); O^T is 8 d-tiles x 8 VGPRs = 64 VGPRs and alpha is one value per lane.
//
// Index permutations (the permutation rule of §WMMA: a WMMA sums over k slots, any bijection works when A and
// B agree, and the d sum is split over 8 WMMAs in any order):
//   * d: WMMA d-step s takes d in {8s..8s+7} on lanes 0-15 and {64+8s..64+8s+7} on lanes 16-31, so a lane
//     reads 64 contiguous bytes of a Q or K row (4 x b128) instead of 8-byte pieces.
//   * keys: in S^T chunk c (c = 0..3), A row m carries key 32*(m/8) + 8c + m%8 of the tile. The D fragment
//     of lane (h, r), vgpr v, chunk c then holds key 32h + 8c + v: lanes 0-15 own keys 0-31 of the tile and
//     lanes 16-31 keys 32-63 (one k_scale block per lane per tile), and the V^T A-fragments of the four
//     chunks are 32 contiguous bytes of a V^T row (2 x b128).
//
// Tiles (docs/rdna4.md §Throughput, §Occupancy), figures for DP = 128 (DP = 64 halves the d-dependent ones):
// 16 queries per wave keeps O^T (64 VGPRs), S^T (32), Q^T fragments (16) and the next tile's staging registers
// (32) resident without spilling; 32 queries per wave would halve the LDS fragment traffic but needs ~300
// VGPRs. Per wave and key tile: 32 iu8 + 32 fp8 WMMA (512 WMMA clocks) against 32 ds_load_b128 (16 KiB) and
// ~300 VALU/TRANS for the softmax (the same for DP = 64: its tile is softmax-bound).
// LDS: per buffer K tile 64 x DP B + V^T tile DP x 64 B, two buffers (32 KiB for DP = 128, 16 KiB for 64):
// tile t+1 is loaded global -> VGPRs before the WMMA work of tile t and stored to the other buffer after it, so
// there is one barrier per tile. 16-byte chunks are XOR-swizzled (K: chunk ^ (row & 7) with 8 chunks per row,
// chunk ^ ((row >> 1) & 3) with 4; V^T: chunk ^ ((row >> 1) & 3))
// so each group of 8 lanes of a ds_load_b128 touches 8 distinct 16-byte bank groups (§Memory: 64 banks x 4 B
// per WGP; the bank layout is UNVERIFIED for RDNA4). The tail tile (keys >= seq_len_kv) takes a uniform branch
// that masks scores to -inf; padded query rows are computed and not stored.
//
// Resources (clang 22.1.8 -O3, checked with tools/disasm_check.py; hsaco/manifest.json has every symbol's):
// DP = 128: 232 VGPRs, 70 SGPRs, scratch 0, LDS 32768 B (PV_FP16: 251 VGPRs); DP = 64: 154 VGPRs (PV_FP16: 181),
// LDS 16384 B; no WMMA hazards left
// (LLVM inserts the v_nop of §Hazards 1 where needed). The epilogue's d-tile loop is fully unrolled: a
// dynamically indexed o[] would go to scratch. Occupancy (§Occupancy), DP = 128: 232 VGPRs -> 6 waves/SIMD by
// registers; 32 KiB LDS per 4-wave workgroup -> 4 workgroups per WGP (128 KiB) = 4 waves/SIMD, the binding
// limit; DP = 64: 154 VGPRs -> 9 waves/SIMD by registers, LDS allows 8. DP = 256 (DIRECT_STAGE, Q_RELOAD below): O^T is
// 128 VGPRs, so the K/V^T staging registers are not held across the tile (tile t+1 goes global -> VGPRs -> the other
// LDS buffer at the top of tile t) and the Q^T fragments are re-read at each d-group: 256 VGPRs, no scratch, LDS
// 64 KiB -> 2 workgroups per WGP = 2 waves/SIMD (docs/performance.md §Head dim 256).
// PV16 (pv_dtype fp16): the V^T tile is DP x 128 B (8 chunks per row, XOR-swizzled row & 7 like 8-chunk K rows),
// staged as DP/16 b128 loads per thread; each lane reads chunk 4hl+c of row 16t+r as the f16 A-fragment of chunk c
// (keys 32hl+8c..+7 in the 16-bit operand's slot order, docs/rdna4.md §WMMA lane layouts; P^T's B-fragment holds the
// same keys in the same slots: the permutation rule). One V^T tile instead of two (see LDS_V below: a second
// barrier per tile) keeps the LDS at the fp8 symbols' 32 / 16 KiB. DP = 128: 245 VGPRs -> 5 waves/SIMD by
// registers, LDS 32 KiB -> 4 workgroups per WGP = 4 waves/SIMD; DP = 64: 171 VGPRs -> 8, LDS 16 KiB -> 8.

#pragma clang fp contract(off)

#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __device__ __attribute__((device))

typedef unsigned int u32;
typedef unsigned long long u64;
typedef int v2i __attribute__((ext_vector_type(2)));
typedef int v4i __attribute__((ext_vector_type(4)));
typedef int v8i __attribute__((ext_vector_type(8)));
typedef float v2f __attribute__((ext_vector_type(2)));
typedef float v4f __attribute__((ext_vector_type(4)));
typedef float v8f __attribute__((ext_vector_type(8)));
typedef _Float16 v8h __attribute__((ext_vector_type(8)));

// QUERY_TILE, KEY_TILE, FLAG_*, MASK_KIND_* (attn_mask tile kinds, docs/numerics.md §Masks "attn_mask": partial =
// read the tile's bits; additive = partial + add the log2-domain bias to the scores, exact exp2 form; 0 = full),
// MASK_WORD_BITS, OUT_* (the output type OT, the template's second argument) and the arithmetic's constants
// (docs/numerics.md §Attention arithmetic model): P_OFF = 8 - 2^-7, exp2's argument is s - (m - P_OFF) <= 8 for
// every m, so p <= 2^8 fits fp8 e4m3 (max 448) and the row sum carries the same 2^P_OFF as O; the QK^T
// accumulators start at MAGIC_BITS = the bits of MAGIC = 1.5 * 2^23; the one-FMA exp argument is used while
// q_scale * k_scale <= FMA_MAX_QK_SCALE = 2^-6 (its error ~ulp(MAGIC * qk) stays <= 1.1 % of p); the running max
// starts at M_INIT = -FLT_MAX (finite: no -inf guard) and moves only when a tile's max passes it by more than
// RESCALE_TAU (docs/numerics.md §Attention arithmetic model "Thresholded rescale")
#include "generated/sage_abi.h"

#define LN2 0.693147180559945309f
#define BF16_MAX 0x1.fep127f   // largest finite bf16 (bits 0x7f7f), exact in fp32
#define FP16_MAX 65504.0f      // largest finite fp16 (bits 0x7bff)
#define BF16_QNAN 0x7fc0u
#define FP16_QNAN 0x7e00u
#define FP32_QNAN 0x7fc00000u

// Varlen: the first prepared row of sequence b whose tokens start at cu_start (sage_co/abi.py packed_row).
static __device__ __attribute__((always_inline)) u32 packed_row(u32 cu_start, u32 b) {
  return ((cu_start + KEY_TILE - 1) / KEY_TILE) * KEY_TILE + KEY_TILE * b;
}

static __device__ __attribute__((always_inline)) float xlane16(float x) {
  // value of lane l ^ 16 (docs/rdna4.md §WMMA: v_permlanex16_b32 with selects 0x76543210 / 0xfedcba98)
  return __builtin_bit_cast(float, __builtin_amdgcn_permlanex16(0, __builtin_bit_cast(int, x),
                                                                0x76543210, 0xfedcba98, false, false));
}

template <int OT>
static __device__ __attribute__((always_inline)) u32 round_sat(float x) {
  // fp32 -> bf16 or fp16 bits, round to nearest even, saturating: |x| beyond the dtype's largest finite value
  // gives +-that value (docs/numerics.md §Finite range); NaN -> the dtype's quiet NaN. The clamp may drop a NaN
  // (v_max_num/v_min_num), so the NaN test reads x, not c.
  if (OT == OUT_FP32) return x != x ? FP32_QNAN : __builtin_bit_cast(u32, x);  // fp32 out: the value, one NaN
  if (OT == OUT_FP16) {
    const float c = __builtin_fminf(__builtin_fmaxf(x, -FP16_MAX), FP16_MAX);
    const u32 r = __builtin_bit_cast(unsigned short, (_Float16)c);  // v_cvt_f16_f32: RNE (round mode 0)
    return x != x ? FP16_QNAN : r;
  }
  const float c = __builtin_fminf(__builtin_fmaxf(x, -BF16_MAX), BF16_MAX);
  u32 u = __builtin_bit_cast(u32, c);
  u32 r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return x != x ? BF16_QNAN : r;
}

static __device__ __attribute__((always_inline)) int fp8x4(float a, float b, float c, float d) {
  // four fp32 -> packed fp8 e4m3 bytes (a in byte 0), RNE (docs/rdna4.md §FP8: v_cvt_pk_fp8_f32, word_sel = high half)
  int lo = __builtin_amdgcn_cvt_pk_fp8_f32(a, b, 0, false);
  return __builtin_amdgcn_cvt_pk_fp8_f32(c, d, lo, true);
}

// V^T rows: 4 chunks (fp8) swizzled (row >> 1) & 3, or 8 chunks (fp16) swizzled like 8-chunk K rows, row & 7.
template <bool PV16>
static __device__ __attribute__((always_inline)) u32 vswz(u32 row) {
  return PV16 ? (row & 7) : ((row >> 1) & 3);
}

// K rows of the LDS tile: NCOL = DP/16 chunks of 16 B; chunk col of row `row` sits at col ^ kswz(row), so each
// group of 8 lanes of a ds_load_b128 touches 8 distinct 16-byte bank groups (§Memory). V^T rows always have 4.
template <int DP>
static __device__ __attribute__((always_inline)) u32 kswz(u32 row) {
  return DP >= 128 ? (row & 7) : ((row >> 1) & 3);
}

// exp2 on the VALU (the SCHED_EXP2_VALU schedule; docs/numerics.md §Attention arithmetic model "exp2 on the VALU"):
// c = max(a, EXP2_VALU_MIN); r = c + MAGIC rounds to the nearest integer n (held in r's low bits); f = c - (r - MAGIC)
// in [-0.5, 0.5], exact; q = fma(fma(f, C2, C1), f, 1); n added to q's exponent by an integer add of r << 23.
// c = -127 (every -inf) gives +0 exactly.
static __device__ __attribute__((always_inline)) float exp2_valu(float a) {
  const float c = __builtin_fmaxf(a, EXP2_VALU_MIN);
  const float r = c + MAGIC;
  const float f = c - (r - MAGIC);
  const float q = __builtin_fmaf(__builtin_fmaf(f, EXP2_VALU_C2, EXP2_VALU_C1), f, 1.0f);
  return __builtin_bit_cast(float, (__builtin_bit_cast(u32, r) << 23) + __builtin_bit_cast(u32, q));
}

template <int DP, int OT, bool PV16, int SCHED>
static __device__ __attribute__((always_inline)) void attention(SAGE_ATTENTION_FWD_PARAMS, v4i* lds) {
  u32 lse_stride = seq_len_q;  // lse row stride of one (batch, head): S_q, or total_q (varlen)
  constexpr int NCOL = DP / 16;        // 16-byte chunks per K row (and O^T d-tiles)
  constexpr int HCOL = NCOL / 2;       // chunks of a row one lane half holds (d = DP/2*hl ..)
  constexpr int QF = DP / 32;          // Q^T fragments per lane (v4i), = K d-groups, = staging chunks per thread
  constexpr int VB = PV16 ? 2 : 1;     // bytes per V element (fp16 or fp8)
  constexpr int VCOL = 4 * VB;         // 16-byte chunks per V^T row of a 64-key tile
  constexpr int VF = QF * VB;          // V^T staging chunks per thread
  // LDS, in 16-byte chunks. fp8: two buffers of K (64 rows x NCOL = 4 DP chunks) + V^T (DP rows x 4); PV16: two K
  // buffers and ONE V^T tile (DP rows x 8) after them, so the LDS stays 16 DP chunks (32 KiB at DP = 128) and the
  // occupancy that of the fp8 symbols; V^T(t+1) is then stored after the end-of-tile barrier and published by a
  // second barrier placed before tile t+1's P.V WMMAs (the Q.K^T and softmax of t+1 run in between).
  constexpr int LDS_V = PV16 ? 8 * DP : 4 * DP;   // chunk offset of the V^T tile (fp8: inside a buffer)
  constexpr int LDS_BUF = PV16 ? 4 * DP : 8 * DP;  // chunks between the two buffers
  // DP = 256: O^T alone is 128 VGPRs and the Q^T fragments 32, so no staging registers stay live across the tile:
  // K(t+1) and V^T(t+1) go global -> VGPRs -> the other LDS buffer at the top of tile t (their last readers passed
  // the previous barrier), the load latency hidden by the other waves of the SIMD instead of this wave's WMMAs
  constexpr bool DIRECT_STAGE = DP > 128;

  const u32 tid = __builtin_amdgcn_workitem_id_x();
  const u32 qtile = __builtin_amdgcn_workgroup_id_x();
  const u32 batch = __builtin_amdgcn_workgroup_id_z();
  // varlen: this workgroup's sequence from the device's cu_seqlens (header); otherwise the kernargs as they are.
  // lay_b: the batch index of the q/k/v layouts (0: packed), row_q / row_kv: the sequence's first prepared row,
  // tok_q: its first token of out / lse.
  const bool varlen = (flags & FLAG_VARLEN) != 0;
  u32 lay_b = batch, row_q = 0, row_kv = 0, tok_q = 0;
  if (varlen) {
    const u32 cq0 = cu_seqlens_q[batch], cq1 = cu_seqlens_q[batch + 1];
    const u32 ck0 = cu_seqlens_kv[batch], ck1 = cu_seqlens_kv[batch + 1];
    const u32 len_q = cq1 - cq0;
    if (qtile * QUERY_TILE >= len_q) return;  // uniform: past this sequence's queries (or none), before any barrier
    seq_len_kv = ck1 - ck0;
    causal_offset = (int)seq_len_kv - (int)len_q;
    lse_stride = seq_len_q;               // = total_q: lse [H_q, total_q]
    seq_len_q = len_q;
    row_q = packed_row(cq0, batch);
    row_kv = packed_row(ck0, batch);
    tok_q = cq0;
    lay_b = 0;
  }
  const u32 lane = tid & 31, r = lane & 15, hl = lane >> 4;  // lane = 16*hl + r
  const u32 wave = __builtin_amdgcn_readfirstlane(tid >> 5);
  const u32 head = __builtin_amdgcn_workgroup_id_y();

  // GQA: K/V head = head / (H_q / H_kv), by a multiply-high with the host's magic (no integer division)
  const u32 kv_head = (u32)(((u64)head * kv_group_magic) >> 32);
  const u64 bh = (u64)lay_b * num_heads_q + head;     // q, q_scale, lse (varlen: the head)
  const u64 bkv_lay = (u64)lay_b * num_heads_kv + kv_head;   // k, V^T, k_scale
  const u64 bkv = (u64)batch * num_heads_kv + kv_head;   // k_mean, v_scale, v_mean: per batch / sequence
  const u32 nblk_q = seq_pad_q / 32, nblk_kv = seq_pad_kv / 32;
  // Uniform (SGPR) base pointers + 32-bit per-lane byte offsets: clang emits global_load vOff, s[base]
  // (docs/rdna4.md §Memory) instead of 64-bit VGPR address arithmetic. Offsets inside one head stay < 2^32 bytes.
  const char* qh = (const char*)q + (bh * seq_pad_q + row_q) * DP;
  const char* kh = (const char*)k + (bkv_lay * seq_pad_kv + row_kv) * DP;
  const char* vh = (const char*)v + (bkv_lay * DP * seq_pad_kv + row_kv) * VB;
  const float* ksh = k_scale + bkv_lay * nblk_kv + row_kv / 32;

  // Q^T B-fragments: lane (hl, r) holds query row r, bytes DP/2*hl .. +DP/2-1; d-step s = bytes 8s..8s+7 of that.
  const u32 q0 = qtile * QUERY_TILE + wave * 16;  // first query of this wave (uniform)
  const u32 qi = q0 + r;                      // this lane's query
  // DP = 256 (Q_RELOAD): the fragments are re-read from global memory (L0/L2-resident: 16 KiB per wave) at each
  // use instead of held, 32 VGPRs fewer
  constexpr bool Q_RELOAD = DP > 128;
  const char* qrow = qh + (qi * DP + (DP / 2) * hl);
  v4i qf[Q_RELOAD ? 1 : QF];
  if (!Q_RELOAD)
    for (int i = 0; i < QF; ++i) qf[i] = *(const v4i*)(qrow + 16 * i);
  const float qs = q_scale[bh * nblk_q + (row_q + q0) / 32];  // the wave's 16 queries share one 32-token block

  // global -> LDS staging: thread tid moves K chunks tid + 128u (row = chunk/NCOL, u < QF) and V^T chunks
  // tid + 128u (row d = chunk/VCOL, u < VF) of a tile. Global offsets relative to the tile's (uniform) base.
  const u32 k_row = tid / NCOL, k_col = tid % NCOL;
  const u32 v_row = tid / VCOL, v_col = tid % VCOL;
  u32 k_gl[QF], v_gl[VF];
  for (int u = 0; u < QF; ++u) k_gl[u] = (tid + 128 * u) * 16;
  for (int u = 0; u < VF; ++u) v_gl[u] = (v_row + (128 / VCOL) * u) * seq_pad_kv * VB + v_col * 16;
  // rows of chunk tid + 128u are k_row + 128u/NCOL: kswz is the same for all u (128/NCOL is a multiple of 16);
  // V^T rows swizzle like K rows of the same chunk count (fp8: 4 chunks, fp16: 8 chunks per row)
  const u32 lds_k_st = k_row * NCOL + (k_col ^ kswz<DP>(k_row));
  const u32 lds_v_st = LDS_V + v_row * VCOL + (v_col ^ vswz<PV16>(v_row));
  // K A-fragment reads: chunk c row = 32*(r/8) + 8c + r%8, 16-byte column HCOL*hl+i (i < HCOL).
  const u32 k_rd_row = 32 * (r >> 3) + (r & 7);
  u32 lds_k_rd[QF];
  for (int i = 0; i < QF; ++i) lds_k_rd[i] = k_rd_row * NCOL + ((HCOL * hl + i) ^ kswz<DP>(k_rd_row));
  // V^T A-fragment reads: d-tile t row d = 16t + r; fp8: 16-byte column 2hl+i (i = 0..1, chunks 2i, 2i+1);
  // fp16: column 4hl+c (c = 0..3, one chunk each: keys 32hl+8c.. as 8 halves)
  constexpr int VRD = PV16 ? 4 : 2;
  u32 lds_v_rd[VRD];
  for (int i = 0; i < VRD; ++i) lds_v_rd[i] = LDS_V + r * VCOL + ((VRD * hl + i) ^ vswz<PV16>(r));

  // Active key tiles of this query tile (docs/numerics.md §Masks): LUT row [count, t_0 < t_1 < ... < t_{count-1}]
  // of ntiles + 1 u32 at lut + batch*lut_stride_b + head*lut_stride_h + qtile*(ntiles+1) (strides 0 share a row
  // set between heads/batches). Keys j of row i are visible when j < lim(i) = min(seq_len_kv, i + causal_offset
  // + 1) (the second term only with FLAG_CAUSAL); a tile is masked per element only when some row of the wave
  // has lim below its end (uniform test on the wave's first row, whose lim is the smallest).
  const u32 ntiles = seq_pad_kv / KEY_TILE;
  const u64 lrow_off = (u64)batch * lut_stride_b + (u64)head * lut_stride_h + (u64)qtile * (ntiles + 1);
  const u32* lrow = lut + lrow_off;
  const bool causal = (flags & FLAG_CAUSAL) != 0;
  // varlen: key tiles 0 .. count-1 (causal: those with a key j <= last row + causal_offset, masks.causal_tiles)
  u32 count;
  if (varlen) {
    count = (seq_len_kv + KEY_TILE - 1) / KEY_TILE;
    if (causal) {
      const int last_row = __builtin_elementwise_min((int)(qtile * QUERY_TILE + QUERY_TILE - 1), (int)seq_len_q - 1);
      const int lim = last_row + causal_offset + 1;  // keys < lim are seen by some row of the tile
      count = __builtin_elementwise_min(count, lim > 0 ? (u32)(lim + KEY_TILE - 1) / KEY_TILE : 0u);
    }
  } else {
    count = lrow[0];
  }
  // attn_mask: the kind of LUT entry it at krow[1 + it] (same offsets as the LUT); this lane's bit row (query qi,
  // words of keys 32hl..) and bias row. Kinds are all 0 (full) without FLAG_MASK (and with varlen: exclusive).
  const bool has_mask = (flags & FLAG_MASK) != 0 && !varlen;
  const u32* krow = mask_kind + lrow_off;
  const u64 mrow_off = (u64)batch * mask_stride_b + (u64)head * mask_stride_h + (u64)qi * mask_stride_s;
  const u32* mrow = mask_bits + mrow_off + hl;
  const float* brow = mask_bias + mrow_off * MASK_WORD_BITS + 32 * hl;
  const u32* tiles = lrow + 1;
  const int lim_lane = causal ? __builtin_elementwise_min((int)qi + causal_offset + 1, (int)seq_len_kv)
                              : (int)seq_len_kv;
  const int lim_wave = causal ? __builtin_elementwise_min((int)q0 + causal_offset + 1, (int)seq_len_kv)
                              : (int)seq_len_kv;
  v4i kst[QF], vst[VF];
  float ks_next = 0.0f;
  if (count) {
    const u32 t0 = varlen ? 0u : tiles[0];
    for (int u = 0; u < QF; ++u) kst[u] = *(const v4i*)(kh + (k_gl[u] + t0 * (KEY_TILE * DP)));
    for (int u = 0; u < VF; ++u) vst[u] = *(const v4i*)(vh + (v_gl[u] + t0 * (KEY_TILE * VB)));
    const v2f ks2 = *(const v2f*)(ksh + 2 * t0);
    ks_next = hl ? ks2.y : ks2.x;  // k_scale block of keys 32hl..32hl+31 of the tile
  } else {
    for (int u = 0; u < QF; ++u) kst[u] = (v4i){0, 0, 0, 0};
    for (int u = 0; u < VF; ++u) vst[u] = (v4i){0, 0, 0, 0};
  }
  for (int u = 0; u < QF; ++u) lds[lds_k_st + 128 * u] = kst[u];
  for (int u = 0; u < VF; ++u) lds[lds_v_st + 128 * u] = vst[u];
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup", "local");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup", "local");

  v8f o[NCOL];
  for (int t = 0; t < NCOL; ++t) o[t] = (v8f){0, 0, 0, 0, 0, 0, 0, 0};
  float m_run = M_INIT, l_run = 0.0f;  // l_run: this lane half's keys (the halves are added in the epilogue)

  for (u32 it = 0; it < count; ++it) {
    const u32 tile = varlen ? it : tiles[it];
    const u32 buf = (it & 1) * LDS_BUF;
    const u32 vbuf = PV16 ? 0u : buf;  // PV16: the one V^T tile
    const bool more = it + 1 < count;
    const float ks = ks_next;
    if (more) {  // prefetch the next active tile into VGPRs; stored to the other LDS buffer after this tile's WMMAs
      // the tile offset goes into the 32-bit lane offset (not the base) so the load keeps the SGPR base
      const u32 tn = varlen ? it + 1 : tiles[it + 1];
      const u32 koff = tn * (KEY_TILE * DP), voff = tn * (KEY_TILE * VB);
      for (int u = 0; u < QF; ++u) kst[u] = *(const v4i*)(kh + (k_gl[u] + koff));
      if (DIRECT_STAGE) {  // K(t+1) -> the other K buffer now: its last readers passed the previous barrier
        for (int u = 0; u < QF; ++u) lds[(buf ^ LDS_BUF) + lds_k_st + 128 * u] = kst[u];
        __builtin_amdgcn_sched_barrier(0);  // K's registers are free before V^T's loads
        // V^T rows v_row + 32u: the row step goes into the uniform base (one lane offset for every u)
        for (int u = 0; u < VF; ++u)
          vst[u] = *(const v4i*)(vh + (u64)u * (128 / VCOL) * seq_pad_kv * VB + (v_gl[0] + voff));
        if (!PV16)
          for (int u = 0; u < VF; ++u) lds[(buf ^ LDS_BUF) + lds_v_st + 128 * u] = vst[u];
        __builtin_amdgcn_sched_barrier(0);
      } else {
        for (int u = 0; u < VF; ++u) vst[u] = *(const v4i*)(vh + (v_gl[u] + voff));
      }
      const v2f ks2 = *(const v2f*)(ksh + 2 * tn);  // one s_load_b64, then a per-lane select
      ks_next = hl ? ks2.y : ks2.x;
    }

    // S^T chunks: 4 x (16 keys x 16 queries), DP/16 d-steps each, chains interleaved over the chunks.
    v8i sacc[4];
    // C = MAGIC_BITS: each accumulator ends as the bits of the float MAGIC + s_int32 (|s_int32| < 2^21 keeps the
    // exponent), monotonic in s: the row max and the one-FMA exp argument read it as a float, no convert
    for (int c = 0; c < 4; ++c) sacc[c] = (v8i){MAGIC_BITS, MAGIC_BITS, MAGIC_BITS, MAGIC_BITS,
                                                 MAGIC_BITS, MAGIC_BITS, MAGIC_BITS, MAGIC_BITS};
    for (int i = 0; i < QF; ++i) {
      // DP <= 128: the held fragment qf[i] is named in the WMMA itself (a hoisted copy made LLVM spill the pv16
      // symbols); DP = 256 (Q_RELOAD): the fragment is loaded here, one d-group in flight at a time
      if (Q_RELOAD) __builtin_amdgcn_sched_barrier(0);
      const v4i qfi = Q_RELOAD ? __builtin_nontemporal_load((const v4i*)(qrow + 16 * i)) : (v4i){};
      for (int c = 0; c < 4; ++c) {
        const v4i kf = lds[buf + lds_k_rd[i] + 8 * NCOL * c];  // chunk c = rows +8c
        if (Q_RELOAD) {
          sacc[c] = __builtin_amdgcn_wmma_i32_16x16x16_iu8_w32_gfx12(true, kf.xy, true, qfi.xy, sacc[c], false);
          sacc[c] = __builtin_amdgcn_wmma_i32_16x16x16_iu8_w32_gfx12(true, kf.zw, true, qfi.zw, sacc[c], false);
        } else {
          sacc[c] = __builtin_amdgcn_wmma_i32_16x16x16_iu8_w32_gfx12(true, kf.xy, true, qf[i].xy, sacc[c], false);
          sacc[c] = __builtin_amdgcn_wmma_i32_16x16x16_iu8_w32_gfx12(true, kf.zw, true, qf[i].zw, sacc[c], false);
        }
      }
    }

    // Online softmax; lane (hl, r) holds query r, keys 32hl + 8c + e (chunk c, vgpr e).
    const float qk = qs * ks;
    float x[32];  // MAGIC + s_int32 (exact); masked keys -inf
    for (int c = 0; c < 4; ++c) {
      const v8f xc = __builtin_bit_cast(v8f, sacc[c]);
      for (int e = 0; e < 8; ++e) x[8 * c + e] = xc[e];
    }
    const u32 kind = has_mask ? krow[1 + it] : 0u;  // uniform
    const bool additive = (kind & MASK_KIND_ADDITIVE) == MASK_KIND_ADDITIVE;
    const bool partial = (kind & MASK_KIND_PARTIAL) != 0;
    if (additive) {  // s = fma(float(s_int32), qk, b) with b the tile's log2-domain bias (keys 32hl + j)
      const v4f* bt = (const v4f*)(brow + tile * KEY_TILE);
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const v4f b4 = bt[u];
        for (int e = 0; e < 4; ++e) x[4 * u + e] = __builtin_fmaf(x[4 * u + e] - MAGIC, qk, b4[e]);
      }
    }
    const bool masked = (int)(tile * KEY_TILE + KEY_TILE) > lim_wave;  // tail / causal-diagonal tiles (uniform)
    const int lim = lim_lane - (int)(tile * KEY_TILE + 32 * hl);     // keys 32hl + j of the tile: valid when j < lim
    if (masked)
#pragma unroll
      for (int j = 0; j < 32; ++j) x[j] = j < lim ? x[j] : -__builtin_inff();
    const u32 bits = partial ? mrow[2 * tile] : ~0u;  // attn_mask: bit j = key 32hl + j of the tile visible
    if (partial)
#pragma unroll
      for (int j = 0; j < 32; ++j) x[j] = (bits >> j) & 1u ? x[j] : -__builtin_inff();
    float mx = x[0];
    for (int j = 1; j < 32; ++j) mx = __builtin_fmaxf(mx, x[j]);
    if (!additive)
      mx = (mx - MAGIC) * qk;  // = max_j float(s_int32) * qk exactly (the subtraction is exact, qk >= 0 scales
                                 // monotonically); a masked half gives -inf, or NaN when qk = 0 (dropped by fmax)
    mx = __builtin_fmaxf(mx, xlane16(mx));
    // thresholded rescale: m moves only when the tile's max passes it by more than RESCALE_TAU (p stays fp8);
    // m starts at M_INIT (finite): no -inf guard, exp2(M_INIT - m_cand) = 0
    const float m_cand = __builtin_fmaxf(m_run, mx);
    const float d = m_run - m_cand;
    const bool grow = d < -RESCALE_TAU;
    const float m_new = grow ? m_cand : m_run;
    const float alpha = __builtin_amdgcn_exp2f(grow ? d : 0.0f);
    m_run = m_new;
    const float t_exp = m_new - P_OFF;  // p <= 2^(8.05 + RESCALE_TAU) < 448: P is fp8 as it comes out of exp2
    // exp2 argument: one FMA per score, arg = fma(x, qk, -fma(MAGIC, qk, t)), when every lane's qk is in
    // (0, FMA_MAX_QK_SCALE] (NaN fails); otherwise the exact arg = float(s_int32) * qk - t (uniform branch)
    float cf = qk, bf = __builtin_fmaf(MAGIC, qk, t_exp);
    if (additive) {  // the scores are s already: the exact form
      cf = 1.0f;
      bf = t_exp;
    } else if (__builtin_amdgcn_ballot_w32(!(qk > 0.0f && qk <= FMA_MAX_QK_SCALE))) {
#pragma unroll
      for (int j = 0; j < 32; ++j) x[j] = (x[j] - MAGIC) * qk;
      if (masked)  // (-inf) * 0 is NaN: mask the scores again
#pragma unroll
        for (int j = 0; j < 32; ++j) x[j] = j < lim ? x[j] : -__builtin_inff();
      if (partial)
#pragma unroll
        for (int j = 0; j < 32; ++j) x[j] = (bits >> j) & 1u ? x[j] : -__builtin_inff();
      cf = 1.0f;
      bf = t_exp;
    }
    float p[32];
    // key 32hl + j: the schedule's VALU exp2 where bit j of EXP2_VALU_KEYS is set, v_exp_f32 elsewhere
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const float a = __builtin_fmaf(x[j], cf, -bf);
      p[j] = SCHED == SCHED_EXP2_VALU && (EXP2_VALU_KEYS >> j) & 1u ? exp2_valu(a) : __builtin_amdgcn_exp2f(a);
    }
    float rs0 = p[0], rs1 = p[1];  // two chains (even, odd keys): the asm pairs their adds in VOPD
    for (int j = 2; j < 32; j += 2) {
      rs0 += p[j];
      rs1 += p[j + 1];
    }
    const float rs = rs0 + rs1;
    l_run = __builtin_fmaf(l_run, alpha, rs);  // this lane half's keys; the other half's sum joins in the epilogue
    v2i pf[4];   // fp8: P^T B-fragments, chunk c: keys 32hl+8c .. +7 in byte order
    v8h ph[4];   // fp16: the same keys as 8 halves (RNE), in the f16 operand's slot order (§WMMA permutation rule)
    for (int c = 0; c < 4; ++c) {
      const float* pc = p + 8 * c;
      if (PV16) {
        for (int e = 0; e < 8; ++e) ph[c][e] = (_Float16)pc[e];
      } else {
        pf[c].x = fp8x4(pc[0], pc[1], pc[2], pc[3]);
        pf[c].y = fp8x4(pc[4], pc[5], pc[6], pc[7]);
      }
    }
    // Rescale O only when some lane's max moved (alpha = 1 otherwise: x * 1 == x exactly, so skipping is bitwise
    // the same); after the first tiles of a row the max rarely moves by more than RESCALE_TAU. Uniform branch.
    if (__builtin_amdgcn_ballot_w32(alpha != 1.0f))
      for (int t = 0; t < NCOL; ++t) o[t] *= alpha;

    // O^T[d-tile t] += V^T[16t.., chunk c] . P^T[chunk c], chunks 0, 1, 2, 3 per accumulator.
    if (PV16) {  // f16 WMMA (docs/rdna4.md §WMMA): one 16-byte V^T load per chunk
      // V^T(tile) was stored after the previous tile's barrier: publish it (for it = 0 the prologue's barrier did)
      __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup", "local");
      __builtin_amdgcn_s_barrier();
      __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup", "local");
      for (int c = 0; c < 4; ++c) {
        for (int t = 0; t < NCOL; ++t) {
          const v8h vf = __builtin_bit_cast(v8h, lds[vbuf + lds_v_rd[c] + 16 * VCOL * t]);
          o[t] = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(vf, ph[c], o[t]);
        }
      }
    } else {     // fp8 WMMA: V^T load i of d-tile t covers chunks 2i, 2i+1
      for (int i = 0; i < 2; ++i) {
        for (int t = 0; t < NCOL; ++t) {
          if (DP > 128 && t % 4 == 0) __builtin_amdgcn_sched_barrier(0);  // 4 V^T fragments in flight at a time
          const v4i vf = lds[vbuf + lds_v_rd[i] + 16 * VCOL * t];
          o[t] = __builtin_amdgcn_wmma_f32_16x16x16_fp8_fp8_w32_gfx12(vf.xy, pf[2 * i], o[t]);
          o[t] = __builtin_amdgcn_wmma_f32_16x16x16_fp8_fp8_w32_gfx12(vf.zw, pf[2 * i + 1], o[t]);
        }
      }
    }

    if (more) {
      const u32 nbuf = buf ^ LDS_BUF;
      if (!DIRECT_STAGE)
        for (int u = 0; u < QF; ++u) lds[nbuf + lds_k_st + 128 * u] = kst[u];
      if (!PV16 && !DIRECT_STAGE)
        for (int u = 0; u < VF; ++u) lds[nbuf + lds_v_st + 128 * u] = vst[u];
    }
    // one barrier per tile: buffer tile&1 is free again and buffer (tile+1)&1 is complete (PV16: and every wave is
    // done reading V^T(tile), so V^T(tile+1) may overwrite it now)
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup", "local");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup", "local");
    if (PV16 && more)
      for (int u = 0; u < VF; ++u) lds[lds_v_st + 128 * u] = vst[u];
  }

  // Epilogue: lane (hl, r) holds O^T[d = 16t + 8hl + e][query r] in o[t][e]; channels at or past head_dim (the
  // zero-padded ones, any D) are not stored.
  l_run = l_run + xlane16(l_run);  // (keys 32h of every tile) + the other lane half's: full EXEC, before the return
  if (qi >= seq_len_q) return;
  // l = 0: the row saw no key (O = 0): output zeros (inv 0, not 1/0) and lse = (-inf + log2 0) * ln2 = -inf
  const float inv = l_run == 0.0f ? 0.0f : 1.0f / l_run;  // l carries 2^P_OFF as O does
  const v4f* vsc = (const v4f*)(v_scale + bkv * DP + 8 * hl);
  // smooth_v: v_mean comes back on rows that saw a key (a row's softmax weights sum to 1); others stay zero
  const bool add_mean = (flags & FLAG_SMOOTH_V) && l_run != 0.0f;
  const v4f* vmn = (const v4f*)(v_mean + bkv * DP + 8 * hl);
  // out element (batch, qi, head, 8hl + 16t + e): OB bytes each; varlen: (0, tok_q + qi, head, ...) of the
  // packed out
  constexpr u32 OB = OT == OUT_FP32 ? 4 : 2;
  char* orow = (char*)out + ((u64)lay_b * out_stride_b + (u64)(tok_q + qi) * out_stride_s +
                             (u64)head * out_stride_h + 8 * hl) * OB;
  const u32 dtiles = (head_dim + 15) / 16;  // d-tiles holding a real channel
#pragma unroll
  for (int t = 0; t < NCOL; ++t) {
    if ((u32)t >= dtiles) continue;  // uniform: whole d-tiles of padding (o[] stays in registers: full unroll)
    u32 h16[8];  // output bits: 16-bit patterns, or fp32 bits (OT == OUT_FP32)
    if (PV16) {
      for (int e = 0; e < 8; ++e) h16[e] = round_sat<OT>(o[t][e] * inv);
    } else {
      const v4f va = vsc[4 * t], vb = vsc[4 * t + 1];
      const float sc[8] = {va.x, va.y, va.z, va.w, vb.x, vb.y, vb.z, vb.w};
      float x[8];
      for (int e = 0; e < 8; ++e) x[e] = (o[t][e] * inv) * sc[e];
      if (add_mean) {
        const v4f ma = vmn[4 * t], mb = vmn[4 * t + 1];
        const float mn[8] = {ma.x, ma.y, ma.z, ma.w, mb.x, mb.y, mb.z, mb.w};
        for (int e = 0; e < 8; ++e) x[e] = x[e] + mn[e];
      }
      for (int e = 0; e < 8; ++e) h16[e] = round_sat<OT>(x[e]);
    }
    // this lane's 8 channels d = 16t + 8hl + e: whole 16-byte stores when the d-tile is all real, else only the
    // channels < head_dim (exact: no byte past channel head_dim - 1 is written, whatever D is)
    const int left = (int)head_dim - (16 * t + 8 * (int)hl);
    char* dst = orow + 16 * t * OB;
    if (left >= 8) {
      if (OT == OUT_FP32) {  // a d-tile half is two 16-byte stores
        ((v4i*)dst)[0] = (v4i){(int)h16[0], (int)h16[1], (int)h16[2], (int)h16[3]};
        ((v4i*)dst)[1] = (v4i){(int)h16[4], (int)h16[5], (int)h16[6], (int)h16[7]};
      } else {
        *(v4i*)dst = (v4i){(int)(h16[0] | h16[1] << 16), (int)(h16[2] | h16[3] << 16),
                           (int)(h16[4] | h16[5] << 16), (int)(h16[6] | h16[7] << 16)};
      }
    } else if (!PV16 || DP < 128) {  // DP = 128 pv16: D % 8 == 0 there (the host refuses others; these stores spill)
      for (int e = 0; e < 8; ++e) {
        if (e >= left) continue;
        if (OT == OUT_FP32) ((u32*)dst)[e] = h16[e];
        else ((unsigned short*)dst)[e] = (unsigned short)h16[e];
      }
    }
  }
  if (flags & FLAG_LSE) {
    float val = (m_run + (__builtin_amdgcn_logf(l_run) - P_OFF)) * LN2;  // v_log_f32 = log2
    if (flags & FLAG_SMOOTH_K) {
      // ln2 * sum_d (q_int8 * q_scale) * k_mean[d]; lane holds d = DP/2*hl .. +DP/2-1 of its query row
      const float* km = k_mean + bkv * DP + (DP / 2) * hl;
      float acc = 0.0f;
      for (int i = 0; i < QF; ++i) {
        const v4i qfi = Q_RELOAD ? *(const v4i*)(qrow + 16 * i) : qf[Q_RELOAD ? 0 : i];
        for (int w = 0; w < 4; ++w)
          for (int b = 0; b < 4; ++b) {
            const int d = 16 * i + 4 * w + b;
            const float qd = (float)(signed char)(qfi[w] >> (8 * b)) * qs;
            acc += qd * km[d];
          }
      }
      acc = acc + xlane16(acc);
      val += LN2 * acc;
    }
    if (hl == 0) lse[bh * lse_stride + tok_q + qi] = val;
  }
}

// LDS: two buffers of K (64 x DP B) + V^T (DP x 64 B) tiles (PV16: two K tiles + one DP x 128 B V^T tile),
// 32 KiB for DP = 128, 16 KiB for DP = 64
#define SAGE_KERNEL(NAME, TEMPLATE, DP, OT, PV16, SCHED)                                                   \
  extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(128, 128))) void NAME(SAGE_ATTENTION_FWD_PARAMS) { \
    __shared__ static v4i lds[16 * DP];                                                                       \
    TEMPLATE<DP, OT, PV16, SCHED>(SAGE_ATTENTION_FWD_ARGS, lds);                                            \
  }

// One symbol per (head_dim = DP, out_dtype, pv_dtype, schedule) manifest key tuple: the wrappers are generated from
// sage_co/family.py ATTENTION_HIP
#include "generated/gfx1201_sage_attention_kernels.h"
