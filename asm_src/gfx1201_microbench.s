// gfx1201 microbenchmarks: small hand-written kernels that pin the performance model's unverified assumptions on
// the first real run (issue 28; docs/performance.md §Microbenchmarks and refit). `sage-co selftest --perf` launches
// each with HIP events on a gfx1201 (or on the emulator, where only the results are checked:
// sage_co/microbench.py) and `python tools/perf_model.py --refit REPORT.json` sets the model's parameters from
// the derived figures.
//
// What each kernel measures (per wave, `iterations` loop iterations; every loop body is balanced so that its
// units would take the same time if they did NOT overlap: 4 iu8 WMMA = 32 clk, 32 VALU = 32 issue clk,
// 8 v_exp_f32 = 32 TRANS clk, docs/rdna4.md §Throughput):
//   gfx1201_microbench_wmma         4 independent v_wmma_i32_16x16x16_iu8 chains: the sustained WMMA rate, hence the
//                                   clock under a matrix load (8 clk per iu8 WMMA, §Throughput [AMC])
//   gfx1201_microbench_valu         32 v_add_nc_u32 (16 counters): the VALU alone
//   gfx1201_microbench_trans        8 v_exp_f32: the TRANS pipeline alone
//   gfx1201_microbench_lds          4 ds_load_b128 (conflict-free, LDS_LOAD_BYTES each): LDS loads alone
//   gfx1201_microbench_wmma_valu    the WMMA body with the VALU body interleaved (8 VALU after each WMMA)
//   gfx1201_microbench_wmma_trans   the WMMA body with the TRANS body interleaved (2 v_exp_f32 after each WMMA)
//   gfx1201_microbench_wmma_lds     the WMMA body with the LDS body interleaved (1 ds_load_b128 after each WMMA)
//                                   => overlap = (t_wmma + t_unit - t_mix) / min(t_wmma, t_unit): 1 the unit issues
//                                   while a WMMA holds the matrix unit (this wave's or another wave's), 0 they add
//   gfx1201_microbench_trans_log    8 v_log_f32 of exact powers of two: TRANS clocks of v_log_f32
//   gfx1201_microbench_trans_rcp    8 v_rcp_f32 of exact powers of two: TRANS clocks of v_rcp_f32
//   gfx1201_microbench_vopd         16 v_dual_add_f32 pairs (32 adds like the valu kernel's, two per issue): the
//                                   vector issue clocks of one VOPD pair (1: dual issue pays, 2: it does not)
//   gfx1201_microbench_trans_valu   the TRANS body with 32 v_add_nc_u32 interleaved (8 after each 2 v_exp_f32):
//                                   overlap of the TRANS pipeline with other VALU issue (1 overlaps, 0 adds)
//   gfx1201_microbench_clock        the WMMA body between two reads of hwreg(HW_REG_SHADER_CYCLES_LO/HI): the
//                                   wave's shader clocks across the loop; the host divides their growth between
//                                   two iteration counts by the HIP-event time's growth = the clock under matrix
//                                   load, measured (not inferred from an assumed WMMA rate)
//   gfx1201_microbench_lds_chain    8 dependent ds_load_b32 per iteration (each address the previous load's value,
//                                   s_wait_dscnt 0 between): LDS load-to-use latency
//   gfx1201_microbench_l2_stream    4 global_load_b128 scope:SCOPE_DEV per iteration (STREAM_WAVE_BYTES per wave)
//                                   over a buffer that fits the 8 MiB L2 (§Throughput table): L2 -> CU bandwidth
//
// Timing is the host's: HIP events around launches at two iteration counts, the slope per iteration. The clock
// kernel adds the shader clock counter (llvm-mc 22 rejects s_memtime / s_memrealtime for gfx1201; s_getreg_b32
// hwreg(HW_REG_SHADER_CYCLES_LO / _HI) assembles, docs/rdna4.md §Throughput "Clock counters"); the emulator has no
// clock and returns its count of wave-instructions executed so far there (docs/emulator.md), so the kernel's
// control flow and record are checked, not a frequency.
//
// Kernel arguments (sage_co/abi.py MICROBENCH_ARGS, in this order; every kernel takes the same struct; the offsets
// KARG_<FIELD> and the size KARG_SIZE come from the generated include, docs/abi.md lists them):
//   a            ptr  int8 [16][16] A, row-major (WMMA kernels)
//   b            ptr  int8 [16][16] B^T, row-major = B column-major (WMMA kernels)
//   src          ptr  LDS kernels: LDS_BYTES copied into LDS at entry (lds_chain: u32 next-byte-addresses);
//                     l2_stream: the buffer read, src_bytes long
//   out          ptr  u32 records, RECORD_DWORDS per lane, lane-major per wave, waves in grid order
//   iterations   u32  loop iterations per wave (0: the loop is skipped)
//   src_bytes    u32  l2_stream: bytes of src (a multiple of STREAM_WAVE_BYTES, >= stride_bytes)
//   stride_bytes u32  l2_stream: bytes a wave's read window advances per iteration (a multiple of
//                     STREAM_WAVE_BYTES, <= src_bytes; the host passes grid waves x STREAM_WAVE_BYTES)
// Launch: block = LANES x WAVES_PER_WG threads (.reqd_workgroup_size), any grid x.
//
// Result record of one lane (RECORD_DWORDS u32 at out + (wave * 32 + lane) * RECORD_BYTES; what the emulator
// checks in tests/perfmodel/test_microbench_refit.py):
//   [0:8)   the matrix sum ACC0+ACC1+ACC2+ACC3: 4 * iterations * (A.B), D layout (dword i = C[i + 8h][r], r = lane
//           % 16, h = lane / 16; docs/rdna4.md §WMMA); trans_valu: 4 * iterations (its 16 counters v[16:31]);
//           l2_stream: the per-lane sums of every dword it loaded
//           (dword i sums the words at byte 16 * lane + 4 * (i % 4) of loads i / 4 and i / 4 + 2); else 0
//   [8:24)  the unit block v[48:63]: valu: 16 counters (2 * iterations each); vopd: the same as f32; trans, trans_valu:
//           v[48:55] = 2^v[56:63], v[56:63] = float((lane % 8) - 4 + k); trans_log: v[48:55] = log2 v[56:63],
//           v[56:63] = 2^((lane % 8) - 4 + k); trans_rcp: v[48:55] = 1 / v[56:63], v[56:63] as trans_log;
//           clock: v[48:51] = SHADER_CYCLES LO, HI before the loop, LO, HI after it (the rest 0); lds / wmma_lds: the 4 loaded b128 (LDS words 4 * lane +
//           128 * j ..); lds_chain: dword 0 = the chain's last address (start 4 * thread id); l2_stream: the
//           last iteration's 4 loads
//
// Register map (all kernels):
//   s[0:1] kernarg pointer; s[4:5] a; s[6:7] b; s[8:9] src; s[10:11] out; s12 iterations; s13 src_bytes;
//   s14 stride_bytes; s15 loop counter; s16 wave index in the grid; s17 the wave's record offset;
//   s[18:19] l2_stream read base; s20 l2_stream window offset; s[22:25] clock: the cycle counter reads
//   v0 work-item id (x); v1 lane; v2 address; v3 wave in the workgroup; v4, v5 temporaries
//   v[8:9] A fragment, v[10:11] B fragment (8 contiguous bytes at 16 r + 8 h, §WMMA lane layouts)
//   v[16:23] ACC0 (the record's matrix sum), v[24:31] ACC1, v[32:39] ACC2, v[40:47] ACC3
//   v[48:63] the unit block (record [8:24)); v[64:71] LDS fill staging
// The descriptors' register budget follows this map (build_asm.py MICROBENCH_VGPRS / MICROBENCH_SGPRS state it).
//
// Hazards (docs/rdna4.md §Hazards): no WMMA reads another WMMA's D as A/B (A/B are loaded once; rule 1); D never
// overlaps A/B (rule 2); no VALU in a loop reads an SGPR (rule 3); the one VALU SGPR write (v_readfirstlane) is
// followed by s_wait_alu depctr_va_sdst(0); s_wait_dscnt 0 before the LDS fill's barrier (rule 8); no scratch.

// ---- the ABI, generated from sage_co/abi.py by build_asm.py: the target and code object version (v5, docs/rdna4.md
// §Code object), LANES (wave32, §Entry), WAVES_PER_WG, RECORD_DWORDS, MATRIX_DWORDS, LDS_BYTES, LDS_LOAD_BYTES,
// STREAM_LOADS, STREAM_WAVE_BYTES, CHAIN_STEPS, EXP_LANE_MASK, EXP_BIAS, the kernarg offsets KARG_<FIELD> and
// KARG_SIZE, and the macros CODE_END_PADDING and MICROBENCH_DESCRIPTORS (descriptors and metadata), expanded at
// the end. The path is relative to asm_src/, where build_asm.py assembles from (elsewhere: clang -I asm_src)
        .include "generated/gfx1201_microbench_abi.s"

// ---- the kernel's own named constants
        .set LANE_MASK, LANES - 1
        .set WAVE_SHIFT, 5                  // thread id >> WAVE_SHIFT = wave in the workgroup
        .set WG_SHIFT, 2                    // workgroup id << WG_SHIFT = workgroup id * WAVES_PER_WG
        .if (1 << WAVE_SHIFT) != LANES || (1 << WG_SHIFT) != WAVES_PER_WG
        .error "WAVE_SHIFT / WG_SHIFT: LANES and WAVES_PER_WG must be 1 << them"
        .endif
        .set RECORD_BYTES, RECORD_DWORDS * 4
        .set RECORD_UNIT, MATRIX_DWORDS * 4 // byte offset of the unit block in a record
        .set RECORD_WAVE_BYTES, LANES * RECORD_BYTES
        .set B128, 16                       // bytes of one b128 access per lane
        .set HALF_MASK, 15                  // r = lane % 16
        .set HALF_SHIFT, 4                  // h = lane / 16
        .set ROW_SHIFT, 4                   // 16 bytes per A / B^T row
        .set FRAG_SHIFT, 3                  // 8 bytes per half-wave fragment
        .set LDS_HALF, LDS_BYTES / 2        // the LDS table (copied from src): two b128 per thread
        .set LDS_LOAD_STRIDE, LANES * B128  // one conflict-free wave b128 load
        .set CHAIN_SHIFT, 2                 // lds_chain start address = 4 * thread id
        .set STREAM_LOAD_BYTES, LANES * B128    // one wave global_load_b128, lane-contiguous
        .if LDS_LOAD_STRIDE != LDS_LOAD_BYTES || STREAM_LOADS * STREAM_LOAD_BYTES != STREAM_WAVE_BYTES
        .error "a wave's b128 access is LANES * B128 bytes: LDS_LOAD_BYTES / STREAM_WAVE_BYTES disagree"
        .endif
        .if LDS_HALF != LANES * WAVES_PER_WG * B128
        .error "FILL_LDS copies LDS_BYTES with two b128 per thread of the block"
        .endif
        .set COUNT_STEP, 1                  // what each VALU op adds to its counter
        // PROLOGUE loads the 4 pointers with one s_load_b256 and the 3 scalars with one s_load_b96
        .if KARG_B != KARG_A + 8 || KARG_SRC != KARG_B + 8 || KARG_OUT != KARG_SRC + 8
        .error "KARG_A..KARG_OUT: PROLOGUE needs a, b, src, out adjacent (s_load_b256 s[4:11])"
        .endif
        .if KARG_SRC_BYTES != KARG_ITERATIONS + 4 || KARG_STRIDE_BYTES != KARG_SRC_BYTES + 4
        .error "KARG_ITERATIONS..KARG_STRIDE_BYTES: PROLOGUE needs them adjacent (s_load_b96 s[12:14])"
        .endif

// ---- prologue: arguments, lane and wave index, zeroed accumulators and unit block
.macro PROLOGUE
        s_load_b256     s[4:11], s[0:1], KARG_A             // a, b, src, out
        s_load_b96      s[12:14], s[0:1], KARG_ITERATIONS   // iterations, src_bytes, stride_bytes
        v_and_b32       v1, LANE_MASK, v0           // lane
        v_lshrrev_b32   v3, WAVE_SHIFT, v0          // wave in the workgroup (uniform)
        v_readfirstlane_b32 s16, v3
        s_wait_alu      depctr_va_sdst(0)           // §Hazards 3: a VALU wrote s16, the SALU reads it
        s_lshl_b32      s17, ttmp9, WG_SHIFT        // workgroup id x (§Entry) * waves per workgroup
        s_add_co_u32    s16, s16, s17               // wave index in the grid
        s_mul_i32       s17, s16, RECORD_WAVE_BYTES
        .irp r, 16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47
        v_mov_b32       v\r, 0
        .endr
        .irp r, 48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63
        v_mov_b32       v\r, 0
        .endr
        s_wait_kmcnt    0
.endm

// ---- WMMA operands: A and B^T fragments of this lane (8 contiguous bytes at 16 r + 8 h)
.macro LOAD_WMMA_OPERANDS
        v_and_b32       v4, HALF_MASK, v1           // r
        v_lshrrev_b32   v5, HALF_SHIFT, v1          // h
        v_lshlrev_b32   v4, ROW_SHIFT, v4
        v_lshl_add_u32  v4, v5, FRAG_SHIFT, v4      // 16 r + 8 h
        global_load_b64 v[8:9], v4, s[4:5]
        global_load_b64 v[10:11], v4, s[6:7]
        s_wait_loadcnt  0
.endm

// ---- LDS fill: LDS_BYTES from src, two b128 per thread, then a workgroup barrier
.macro FILL_LDS
        v_lshlrev_b32   v2, ROW_SHIFT, v0           // 16 * thread id
        global_load_b128 v[64:67], v2, s[8:9]
        global_load_b128 v[68:71], v2, s[8:9] offset:LDS_HALF
        s_wait_loadcnt  0
        ds_store_b128   v2, v[64:67]
        ds_store_b128   v2, v[68:71] offset:LDS_HALF
        s_wait_dscnt    0                           // §Hazards 8: stores done before the barrier
        s_barrier_signal -1
        s_barrier_wait  -1
.endm

// ---- the loop: s15 counts down from `iterations`; 0 iterations skip it
.macro LOOP_BEGIN name
        s_mov_b32       s15, s12
        s_cmp_eq_u32    s15, 0
        s_cbranch_scc1  .L\name\()_done
.L\name\()_loop:
.endm

.macro LOOP_END name
        s_sub_co_u32    s15, s15, 1
        s_cmp_lg_u32    s15, 0
        s_cbranch_scc1  .L\name\()_loop
.L\name\()_done:
.endm

// ---- bodies: one WMMA of chain k; 8 VALU on one half of the unit block; 2 TRANS; 1 LDS load of slot j
// (neg_lo:[1,1,0] on the iu8 WMMA: A and B signed, §WMMA)
.macro WMMA k
        .if \k == 0
        v_wmma_i32_16x16x16_iu8 v[16:23], v[8:9], v[10:11], v[16:23] neg_lo:[1,1,0]
        .elseif \k == 1
        v_wmma_i32_16x16x16_iu8 v[24:31], v[8:9], v[10:11], v[24:31] neg_lo:[1,1,0]
        .elseif \k == 2
        v_wmma_i32_16x16x16_iu8 v[32:39], v[8:9], v[10:11], v[32:39] neg_lo:[1,1,0]
        .else
        v_wmma_i32_16x16x16_iu8 v[40:47], v[8:9], v[10:11], v[40:47] neg_lo:[1,1,0]
        .endif
.endm

.macro VALU8 half
        .if \half == 0
        .irp r, 48,49,50,51,52,53,54,55
        v_add_nc_u32    v\r, COUNT_STEP, v\r
        .endr
        .else
        .irp r, 56,57,58,59,60,61,62,63
        v_add_nc_u32    v\r, COUNT_STEP, v\r
        .endr
        .endif
.endm

.macro TRANS2 pair, op=v_exp_f32
        .if \pair == 0
        \op            v48, v56
        \op            v49, v57
        .elseif \pair == 1
        \op            v50, v58
        \op            v51, v59
        .elseif \pair == 2
        \op            v52, v60
        \op            v53, v61
        .else
        \op            v54, v62
        \op            v55, v63
        .endif
.endm

// 8 VALU on v[16:23] (half 0) or v[24:31] (half 1): trans_valu's counters (no WMMA accumulates there)
.macro VALU8_ACC half
        .if \half == 0
        .irp r, 16,17,18,19,20,21,22,23
        v_add_nc_u32    v\r, COUNT_STEP, v\r
        .endr
        .else
        .irp r, 24,25,26,27,28,29,30,31
        v_add_nc_u32    v\r, COUNT_STEP, v\r
        .endr
        .endif
.endm

// 4 VOPD pairs = 8 f32 adds of 1.0 on one half of the unit block (destinations even/odd, sources in banks r % 4
// and (r + 1) % 4: the VOPD rules of docs/rdna4.md §Throughput; v_dual_add_nc_u32 is a Y-only opcode in LLVM 22,
// so both halves are v_dual_add_f32 and the counters are floats, exact up to 2^24)
.macro VOPD8 half
        .if \half == 0
        .irp r, 48,50,52,54
        v_dual_add_f32  v\r, 1.0, v\r :: v_dual_add_f32 v[\r + 1], 1.0, v[\r + 1]
        .endr
        .else
        .irp r, 56,58,60,62
        v_dual_add_f32  v\r, 1.0, v\r :: v_dual_add_f32 v[\r + 1], 1.0, v[\r + 1]
        .endr
        .endif
.endm

.macro LDS1 j
        .if \j == 0
        ds_load_b128    v[48:51], v2
        .elseif \j == 1
        ds_load_b128    v[52:55], v2 offset:LDS_LOAD_STRIDE
        .elseif \j == 2
        ds_load_b128    v[56:59], v2 offset:2*LDS_LOAD_STRIDE
        .else
        ds_load_b128    v[60:63], v2 offset:3*LDS_LOAD_STRIDE
        .endif
.endm

// ---- the TRANS kernels' exponents: v[56 + k] = float((lane % 8) - 4 + k)
.macro EXPONENTS
        v_and_b32       v4, EXP_LANE_MASK, v1
        .irp k, 0,1,2,3,4,5,6,7
        v_add_nc_u32    v5, \k - EXP_BIAS, v4
        v_cvt_f32_i32   v[56 + \k], v5
        .endr
.endm

// ---- trans_log / trans_rcp operands: v[56 + k] = 2^((lane % 8) - 4 + k), exact (v_ldexp_f32 of 1.0)
.macro POWERS
        v_and_b32       v4, EXP_LANE_MASK, v1
        .irp k, 0,1,2,3,4,5,6,7
        v_add_nc_u32    v5, \k - EXP_BIAS, v4
        v_ldexp_f32     v[56 + \k], 1.0, v5
        .endr
.endm

// ---- the shader clock counter into two SGPRs (lo, hi); HW_REG_SHADER_CYCLES_LO/HI, docs/rdna4.md §Throughput
.macro CYCLES lo, hi
        s_getreg_b32    \lo, hwreg(HW_REG_SHADER_CYCLES_LO)
        s_getreg_b32    \hi, hwreg(HW_REG_SHADER_CYCLES_HI)
.endm

// ---- epilogue: matrix sum, then the lane's record
.macro EPILOGUE
        s_wait_loadcnt_dscnt 0
        .irp i, 0,1,2,3,4,5,6,7
        v_add_nc_u32    v[16 + \i], v[16 + \i], v[24 + \i]
        v_add_nc_u32    v[32 + \i], v[32 + \i], v[40 + \i]
        v_add_nc_u32    v[16 + \i], v[16 + \i], v[32 + \i]
        .endr
        v_mad_u32_u24   v2, v1, RECORD_BYTES, s17
        global_store_b128 v2, v[16:19], s[10:11]
        global_store_b128 v2, v[20:23], s[10:11] offset:B128
        global_store_b128 v2, v[48:51], s[10:11] offset:RECORD_UNIT
        global_store_b128 v2, v[52:55], s[10:11] offset:RECORD_UNIT+B128
        global_store_b128 v2, v[56:59], s[10:11] offset:RECORD_UNIT+2*B128
        global_store_b128 v2, v[60:63], s[10:11] offset:RECORD_UNIT+3*B128
        s_endpgm
.endm

.macro KERNEL_BEGIN name
        .globl  \name
        .p2align 8
        .type   \name,@function
\name:
.endm

.macro KERNEL_END name
.L\name\()_end:
        .size   \name, .L\name\()_end-\name
.endm

        .text
// ============================================================================ WMMA alone
// Measures: the sustained iu8 WMMA rate (host: 8 waves per SIMD). Record: [0:8) = 4 * iterations * A.B.
KERNEL_BEGIN gfx1201_microbench_wmma
        PROLOGUE
        LOAD_WMMA_OPERANDS
        LOOP_BEGIN wmma
        WMMA 0
        WMMA 1
        WMMA 2
        WMMA 3
        LOOP_END wmma
        EPILOGUE
KERNEL_END gfx1201_microbench_wmma

// ============================================================================ VALU alone
// Measures: VALU issue alone, the reference for wmma_valu. Record: [8:24) = 2 * iterations each.
KERNEL_BEGIN gfx1201_microbench_valu
        PROLOGUE
        LOOP_BEGIN valu
        VALU8 0
        VALU8 1
        VALU8 0
        VALU8 1
        LOOP_END valu
        EPILOGUE
KERNEL_END gfx1201_microbench_valu

// ============================================================================ TRANS alone
// Measures: the TRANS pipeline alone, the reference for wmma_trans. Record: [8:16) = 2^e, [16:24) = e.
KERNEL_BEGIN gfx1201_microbench_trans
        PROLOGUE
        EXPONENTS
        LOOP_BEGIN trans
        TRANS2 0
        TRANS2 1
        TRANS2 2
        TRANS2 3
        LOOP_END trans
        EPILOGUE
KERNEL_END gfx1201_microbench_trans

// ============================================================================ LDS loads alone
// Measures: LDS b128 loads alone, the reference for wmma_lds. Record: [8:24) = LDS words 4 lane + 128 j ...
KERNEL_BEGIN gfx1201_microbench_lds
        PROLOGUE
        FILL_LDS
        v_lshlrev_b32   v2, ROW_SHIFT, v1           // 16 * lane: each load reads STREAM_LOAD_BYTES contiguous bytes
        LOOP_BEGIN lds
        s_wait_dscnt    0                           // the previous iteration's loads into the same registers
        LDS1 0
        LDS1 1
        LDS1 2
        LDS1 3
        LOOP_END lds
        EPILOGUE
KERNEL_END gfx1201_microbench_lds

// ============================================================================ WMMA + VALU
// Measures: whether VALU issues while a WMMA holds the matrix unit. Record: wmma's [0:8), valu's [8:24).
KERNEL_BEGIN gfx1201_microbench_wmma_valu
        PROLOGUE
        LOAD_WMMA_OPERANDS
        LOOP_BEGIN wmma_valu
        WMMA 0
        VALU8 0
        WMMA 1
        VALU8 1
        WMMA 2
        VALU8 0
        WMMA 3
        VALU8 1
        LOOP_END wmma_valu
        EPILOGUE
KERNEL_END gfx1201_microbench_wmma_valu

// ============================================================================ WMMA + TRANS
// Measures: whether the TRANS pipeline runs under a WMMA. Record: wmma's [0:8), trans's [8:24).
KERNEL_BEGIN gfx1201_microbench_wmma_trans
        PROLOGUE
        EXPONENTS
        LOAD_WMMA_OPERANDS
        LOOP_BEGIN wmma_trans
        WMMA 0
        TRANS2 0
        WMMA 1
        TRANS2 1
        WMMA 2
        TRANS2 2
        WMMA 3
        TRANS2 3
        LOOP_END wmma_trans
        EPILOGUE
KERNEL_END gfx1201_microbench_wmma_trans

// ============================================================================ WMMA + LDS loads
// Measures: whether LDS loads issue under a WMMA. Record: wmma's [0:8), lds's [8:24).
KERNEL_BEGIN gfx1201_microbench_wmma_lds
        PROLOGUE
        FILL_LDS
        LOAD_WMMA_OPERANDS
        v_lshlrev_b32   v2, ROW_SHIFT, v1
        LOOP_BEGIN wmma_lds
        s_wait_dscnt    0
        WMMA 0
        LDS1 0
        WMMA 1
        LDS1 1
        WMMA 2
        LDS1 2
        WMMA 3
        LDS1 3
        LOOP_END wmma_lds
        EPILOGUE
KERNEL_END gfx1201_microbench_wmma_lds

// ============================================================================ TRANS alone: v_log_f32, v_rcp_f32
// Measures: TRANS clocks of v_log_f32 / v_rcp_f32. Record: [8:16) = log2 / 1 / v[56:63], [16:24) = the powers.
KERNEL_BEGIN gfx1201_microbench_trans_log
        PROLOGUE
        POWERS
        LOOP_BEGIN trans_log
        TRANS2 0, v_log_f32
        TRANS2 1, v_log_f32
        TRANS2 2, v_log_f32
        TRANS2 3, v_log_f32
        LOOP_END trans_log
        EPILOGUE
KERNEL_END gfx1201_microbench_trans_log

KERNEL_BEGIN gfx1201_microbench_trans_rcp
        PROLOGUE
        POWERS
        LOOP_BEGIN trans_rcp
        TRANS2 0, v_rcp_f32
        TRANS2 1, v_rcp_f32
        TRANS2 2, v_rcp_f32
        TRANS2 3, v_rcp_f32
        LOOP_END trans_rcp
        EPILOGUE
KERNEL_END gfx1201_microbench_trans_rcp

// ============================================================================ VOPD
// Measures: vector issue clocks of a v_dual_* pair (the valu kernel's adds, paired). Record: valu's [8:24).
KERNEL_BEGIN gfx1201_microbench_vopd
        PROLOGUE
        LOOP_BEGIN vopd
        VOPD8 0
        VOPD8 1
        VOPD8 0
        VOPD8 1
        LOOP_END vopd
        EPILOGUE
KERNEL_END gfx1201_microbench_vopd

// ============================================================================ TRANS + VALU
// Measures: whether other VALU issues while the TRANS pipeline runs. Record: [0:8) 4 * iterations, trans's [8:24).
KERNEL_BEGIN gfx1201_microbench_trans_valu
        PROLOGUE
        EXPONENTS
        LOOP_BEGIN trans_valu
        TRANS2 0
        VALU8_ACC 0
        TRANS2 1
        VALU8_ACC 1
        TRANS2 2
        VALU8_ACC 0
        TRANS2 3
        VALU8_ACC 1
        LOOP_END trans_valu
        EPILOGUE
KERNEL_END gfx1201_microbench_trans_valu

// ============================================================================ clock
// Measures: shader clocks across the WMMA loop (host: the same grid as wmma). Record: wmma's [0:8), [8:12) the
// counter reads (lo, hi before; lo, hi after).
KERNEL_BEGIN gfx1201_microbench_clock
        PROLOGUE
        LOAD_WMMA_OPERANDS
        CYCLES          s22, s23
        LOOP_BEGIN clock
        WMMA 0
        WMMA 1
        WMMA 2
        WMMA 3
        LOOP_END clock
        CYCLES          s24, s25
        s_wait_alu      depctr_sa_sdst(0)           // §Hazards 3: the SALU wrote s[22:25], a VALU reads them
        v_mov_b32       v48, s22
        v_mov_b32       v49, s23
        v_mov_b32       v50, s24
        v_mov_b32       v51, s25
        EPILOGUE
KERNEL_END gfx1201_microbench_clock

// ============================================================================ dependent LDS loads
// Measures: LDS load-to-use latency (host: one workgroup, one wave per SIMD). Record: [8] = the last address.
KERNEL_BEGIN gfx1201_microbench_lds_chain
        PROLOGUE
        FILL_LDS
        v_lshlrev_b32   v48, CHAIN_SHIFT, v0        // chain start: word `thread id`
        LOOP_BEGIN lds_chain
        .rept CHAIN_STEPS
        ds_load_b32     v48, v48
        s_wait_dscnt    0
        .endr
        LOOP_END lds_chain
        EPILOGUE
KERNEL_END gfx1201_microbench_lds_chain

// ============================================================================ L2 -> CU stream
// Measures: L2 -> CU bytes per clock (host: 16 waves per SIMD). Record: [0:8) load sums, [8:24) last loads.
KERNEL_BEGIN gfx1201_microbench_l2_stream
        PROLOGUE
        v_lshlrev_b32   v2, ROW_SHIFT, v1           // 16 * lane
        s_mul_i32       s20, s16, STREAM_WAVE_BYTES // this wave's first window (< stride_bytes <= src_bytes)
        LOOP_BEGIN l2_stream
        s_add_co_u32    s18, s8, s20
        s_add_co_ci_u32 s19, s9, 0
        global_load_b128 v[48:51], v2, s[18:19] scope:SCOPE_DEV
        global_load_b128 v[52:55], v2, s[18:19] offset:STREAM_LOAD_BYTES scope:SCOPE_DEV
        global_load_b128 v[56:59], v2, s[18:19] offset:2*STREAM_LOAD_BYTES scope:SCOPE_DEV
        global_load_b128 v[60:63], v2, s[18:19] offset:3*STREAM_LOAD_BYTES scope:SCOPE_DEV
        s_add_co_u32    s20, s20, s14               // next window, wrapped into [0, src_bytes)
        s_cmp_lt_u32    s20, s13
        s_cselect_b32   s21, 0, s13
        s_sub_co_u32    s20, s20, s21
        s_wait_loadcnt  0
        .irp i, 0,1,2,3
        v_add_nc_u32    v[16 + \i], v[16 + \i], v[48 + \i]
        v_add_nc_u32    v[20 + \i], v[20 + \i], v[52 + \i]
        v_add_nc_u32    v[16 + \i], v[16 + \i], v[56 + \i]
        v_add_nc_u32    v[20 + \i], v[20 + \i], v[60 + \i]
        .endr
        LOOP_END l2_stream
        EPILOGUE
KERNEL_END gfx1201_microbench_l2_stream

// the padding LLVM puts after the last kernel (instruction prefetch must not run into other data): s_code_end words
        CODE_END_PADDING

// ---- descriptors and metadata (generated: every kernel takes MICROBENCH_ARGS; the LDS kernels allocate LDS_BYTES)
        MICROBENCH_DESCRIPTORS
