"""FlyDSL kernels of the emulator corpus (a third compiler next to clang and the hand-written assembly).

Built ahead of time by build.py (needs `flydsl`, no GPU); the code objects are checked in next to this file and
tests/emu/test_flydsl_corpus.py runs them on sage_co.emu. Each kernel is a function of its compile-time shape so
build.py can specialise it.
"""
import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.expr import arith, gpu
from flydsl.expr import math as fmath
from flydsl.expr import range_constexpr
from flydsl.expr.typing import ReductionOp, full

WMMA = 16
WAVE = 32


def wmma_gemm(M: int, N: int, K: int, waves_m: int = 2, waves_n: int = 2, dtype: str = "f16"):
    """C[M, N] (f32) = A[M, K] @ Bt[N, K]^T (f16 or bf16, row-major): one 16x16 WMMA tile per wave,
    a waves_m x waves_n wave grid per workgroup, a run-time loop over K in 16-wide steps, operands loaded
    straight from global memory (buffer loads) into the WMMA fragments; the accumulator is the loop-carried value."""
    BM, BN = WMMA * waves_m, WMMA * waves_n
    assert M % BM == 0 and N % BN == 0 and K % WMMA == 0
    f16, f32 = {"f16": fx.Float16, "bf16": fx.BFloat16}[dtype], fx.Float32

    @flyc.kernel
    def wmma_gemm_kernel(A: fx.Tensor, Bt: fx.Tensor, C: fx.Tensor, tiled_mma: fx.TiledMma):
        tid = fx.thread_idx.x
        bm, bn = fx.block_idx.x, fx.block_idx.y
        gA = fx.rocdl.make_buffer_tensor(A)
        gB = fx.rocdl.make_buffer_tensor(Bt)
        gC = fx.rocdl.make_buffer_tensor(C)
        tA = fx.flat_divide(gA, fx.make_tile(BM, WMMA))[None, None, bm, None]     # (BM, 16, K/16)
        tB = fx.flat_divide(gB, fx.make_tile(BN, WMMA))[None, None, bn, None]     # (BN, 16, K/16)
        tC = fx.flat_divide(gC, fx.make_tile(BM, BN))[None, None, bm, bn]
        thr_mma = tiled_mma.thr_slice(tid)
        copy_ab = fx.make_copy_atom(fx.rocdl.BufferCopy(f16.width), f16)
        copy_c = fx.make_copy_atom(fx.rocdl.BufferCopy(f32.width), f32)
        thr_copy_A = fx.make_tiled_copy_A(copy_ab, tiled_mma).get_slice(tid)
        thr_copy_B = fx.make_tiled_copy_B(copy_ab, tiled_mma).get_slice(tid)
        thr_copy_C = fx.make_tiled_copy_C(copy_c, tiled_mma).get_slice(tid)
        pA = thr_copy_A.partition_S(tA)
        pB = thr_copy_B.partition_S(tB)
        frag_A = thr_mma.make_fragment_A(tA[None, None, 0])
        frag_B = thr_mma.make_fragment_B(tB[None, None, 0])
        frag_C = thr_mma.make_fragment_C(tC)
        frag_C.fill(0)
        for kt, state in range(0, K // WMMA, 1, init=[frag_C.load()]):
            frag_C.store(state[0])
            fx.copy(copy_ab, pA[None, None, None, kt], thr_copy_A.retile(frag_A))
            fx.copy(copy_ab, pB[None, None, None, kt], thr_copy_B.retile(frag_B))
            fx.gemm(tiled_mma, frag_C, frag_A, frag_B, frag_C)
            results = yield [frag_C.load()]
        frag_C.store(results)
        fx.copy(copy_c, thr_copy_C.retile(frag_C), thr_copy_C.partition_S(tC))

    @flyc.jit
    def launch(A: fx.Tensor, Bt: fx.Tensor, C: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
        atom = fx.make_mma_atom(fx.rocdl.WMMA(WMMA, WMMA, WMMA, f16, f32))
        tiled_mma = fx.make_tiled_mma(atom, fx.make_layout((waves_m, waves_n, 1), (waves_n, 1, 0)))
        a2 = fx.make_view(fx.get_iter(A), fx.make_layout((M, K), (K, 1)))
        b2 = fx.make_view(fx.get_iter(Bt), fx.make_layout((N, K), (K, 1)))
        c2 = fx.make_view(fx.get_iter(C), fx.make_layout((M, N), (N, 1)))
        wmma_gemm_kernel(a2, b2, c2, tiled_mma).launch(grid=(M // BM, N // BN, 1),
                                                     block=(WAVE * waves_m * waves_n, 1, 1), stream=stream)

    return launch, wmma_gemm_kernel


def online_softmax_attention(S_q: int, S_kv: int, D: int = 16, rows_per_block: int = 32):
    """O[i, :] = softmax(Q[i, :] K[:n_kv]^T * rsqrt(head_dim)) V[:n_kv] for f32 Q/O [S_q, D], K/V [S_kv, D]
    (row-major, static layouts), one query row per thread: a run-time loop over the first n_kv keys carries the
    running max m, the running sum l and the D-wide accumulator (the flash-attention recurrence m' = max(m, s),
    alpha = 2^(m - m'), p = 2^(s - m'), l' = l alpha + p, acc' = acc alpha + p v, scores scaled by log2(e)).
    n_kv and head_dim are kernel arguments, so the uniform scale is computed on the scalar unit (LLVM 22 emits
    s_cvt_f32_i32, v_s_sqrt_f32, v_s_rcp_f32, s_mul_f32)."""
    assert D % 4 == 0
    FAST = arith.FastMathFlags.afn      # approximate functions: no ocml calls (no ROCm device libraries needed)
    chunks = D // 4
    log2e = 1.4426950408889634

    @flyc.kernel
    def attn_loop_kernel(Q: fx.Tensor, K: fx.Tensor, V: fx.Tensor, O: fx.Tensor, n_kv: fx.Int32,
                         head_dim: fx.Int32):
        tid, bid = fx.thread_idx.x, fx.block_idx.x
        row = bid * rows_per_block + tid
        Qb, Kb = fx.rocdl.make_buffer_tensor(Q), fx.rocdl.make_buffer_tensor(K)
        Vb, Ob = fx.rocdl.make_buffer_tensor(V), fx.rocdl.make_buffer_tensor(O)
        copy4 = fx.make_copy_atom(fx.rocdl.BufferCopy128b(), 32)

        def row_of(t, r):
            return fx.logical_divide(fx.slice(t, (r, None)), fx.make_layout(4, 1))

        def load4(div, c):
            r = fx.make_rmem_tensor(4, fx.Float32)
            fx.copy(copy4, fx.slice(div, (None, c)), r)
            return fx.memref_load_vec(r)

        def store4(val, div, c):
            r = fx.make_rmem_tensor(4, fx.Float32)
            fx.memref_store_vec(val, r)
            fx.copy(copy4, r, fx.slice(div, (None, c)))

        qd = row_of(Qb, row)
        q = [load4(qd, c) for c in range_constexpr(chunks)]
        scale = fmath.rsqrt(fx.Float32(head_dim), fastmath=FAST) * log2e
        zero4 = full(4, 0.0, fx.Float32)
        init = [fx.Float32(float("-inf")), fx.Float32(0.0)] + [zero4 for _ in range_constexpr(chunks)]
        for j, state in range(0, n_kv, 1, init=init):
            m, l, acc = state[0], state[1], state[2:]
            kd, vd = row_of(Kb, j), row_of(Vb, j)
            s = fx.Float32(0.0)
            for c in range_constexpr(chunks):
                s = s + (q[c] * load4(kd, c)).reduce(ReductionOp.ADD)
            s = s * scale
            m_new = fx.max(m, s)
            alpha = fmath.exp2(m - m_new, fastmath=FAST)
            p = fmath.exp2(s - m_new, fastmath=FAST)
            acc = [acc[c] * alpha + load4(vd, c) * p for c in range_constexpr(chunks)]
            results = yield [m_new, l * alpha + p] + acc
        inv_l = 1.0 / results[1]
        od = row_of(Ob, row)
        for c in range_constexpr(chunks):
            store4(results[2 + c] * inv_l, od, c)

    @flyc.jit
    def launch(Q: fx.Tensor, K: fx.Tensor, V: fx.Tensor, O: fx.Tensor, n_kv: fx.Int32, head_dim: fx.Int32,
               stream: fx.Stream = fx.Stream(None)):
        q2, o2 = (fx.make_view(fx.get_iter(t), fx.make_layout((S_q, D), (D, 1))) for t in (Q, O))
        k2, v2 = (fx.make_view(fx.get_iter(t), fx.make_layout((S_kv, D), (D, 1))) for t in (K, V))
        attn_loop_kernel(q2, k2, v2, o2, n_kv, head_dim).launch(grid=(S_q // rows_per_block, 1, 1),
                                                               block=(rows_per_block, 1, 1), stream=stream)

    return launch, attn_loop_kernel


def wmma_attention(S_q: int, S_kv: int, D: int = 16):
    """Attention with the scores on the matrix unit: one wave per 16 query rows; a run-time loop over key tiles of 16
    computes S = Q_tile K_tile^T with v_wmma_f32_16x16x16_f16 (f16 Q/K, D = 16), parks S in LDS, and each of the
    first 16 lanes runs the online-softmax update for its query row over the tile's 16 scores (f32 V rows, loop-
    carried max / sum / accumulator). O = acc / l. scale = rsqrt(head_dim) * log2(e) as in online_softmax_attention."""
    assert D == WMMA and S_q % WMMA == 0 and S_kv % WMMA == 0
    f16, f32 = fx.Float16, fx.Float32
    FAST = arith.FastMathFlags.afn
    log2e = 1.4426950408889634
    chunks = D // 4

    @fx.struct
    class Scores:
        s: fx.Array[f32, WMMA * WMMA, 16]

    @flyc.kernel
    def wmma_attn_kernel(Q: fx.Tensor, K: fx.Tensor, V: fx.Tensor, O: fx.Tensor, n_kv_tiles: fx.Int32,
                         head_dim: fx.Int32, tiled_mma: fx.TiledMma):
        tid, bid = fx.thread_idx.x, fx.block_idx.x
        gQ, gK = fx.rocdl.make_buffer_tensor(Q), fx.rocdl.make_buffer_tensor(K)
        gV, gO = fx.rocdl.make_buffer_tensor(V), fx.rocdl.make_buffer_tensor(O)
        tQ = fx.flat_divide(gQ, fx.make_tile(WMMA, WMMA))[None, None, bid, 0]
        tK = fx.flat_divide(gK, fx.make_tile(WMMA, WMMA))[None, None, None, 0]      # (16, 16, key tiles)
        lds = fx.SharedAllocator().allocate(Scores).peek()
        sS = fx.make_view(lds.s.ptr, fx.make_layout((WMMA, WMMA), (WMMA, 1)))
        thr_mma = tiled_mma.thr_slice(tid)
        copy_ab = fx.make_copy_atom(fx.rocdl.BufferCopy(f16.width), f16)
        copy_s = fx.make_copy_atom(fx.UniversalCopy32b(), f32)
        thr_copy_A = fx.make_tiled_copy_A(copy_ab, tiled_mma).get_slice(tid)
        thr_copy_B = fx.make_tiled_copy_B(copy_ab, tiled_mma).get_slice(tid)
        thr_copy_S = fx.make_tiled_copy_C(copy_s, tiled_mma).get_slice(tid)
        pK = thr_copy_B.partition_S(tK)
        frag_A = thr_mma.make_fragment_A(tQ)
        frag_B = thr_mma.make_fragment_B(tK[None, None, 0])
        frag_S = thr_mma.make_fragment_C(sS)
        fx.copy(copy_ab, thr_copy_A.partition_S(tQ), thr_copy_A.retile(frag_A))
        copy4 = fx.make_copy_atom(fx.rocdl.BufferCopy128b(), 32)

        def load4(t, r, c):
            reg = fx.make_rmem_tensor(4, f32)
            fx.copy(copy4, fx.slice(fx.logical_divide(fx.slice(t, (r, None)), fx.make_layout(4, 1)), (None, c)), reg)
            return fx.memref_load_vec(reg)

        row = tid % WMMA
        scale = fmath.rsqrt(fx.Float32(head_dim), fastmath=FAST) * log2e
        init = [fx.Float32(float("-inf")), fx.Float32(0.0)] + [full(4, 0.0, f32) for _ in range_constexpr(chunks)]
        for kt, state in range(0, n_kv_tiles, 1, init=init):
            m, l, acc = state[0], state[1], state[2:]
            fx.copy(copy_ab, pK[None, None, None, kt], thr_copy_B.retile(frag_B))
            frag_S.fill(0)
            fx.gemm(tiled_mma, frag_S, frag_A, frag_B, frag_S)
            fx.copy(copy_s, thr_copy_S.retile(frag_S), thr_copy_S.partition_S(sS))
            gpu.barrier()
            for j in range_constexpr(WMMA):
                s = fx.memref_load(sS, (row, j)) * scale
                m_new = fx.max(m, s)
                alpha = fmath.exp2(m - m_new, fastmath=FAST)
                p = fmath.exp2(s - m_new, fastmath=FAST)
                l = l * alpha + p
                acc = [acc[c] * alpha + load4(gV, kt * WMMA + j, c) * p for c in range_constexpr(chunks)]
                m = m_new
            gpu.barrier()       # every lane has read S before the next tile overwrites it (LLVM drops it for one wave)
            results = yield [m, l] + acc
        inv_l = 1.0 / results[1]
        if tid < WMMA:
            for c in range_constexpr(chunks):
                reg = fx.make_rmem_tensor(4, f32)
                fx.memref_store_vec(results[2 + c] * inv_l, reg)
                dst = fx.logical_divide(fx.slice(gO, (bid * WMMA + row, None)), fx.make_layout(4, 1))
                fx.copy(copy4, reg, fx.slice(dst, (None, c)))

    @flyc.jit
    def launch(Q: fx.Tensor, K: fx.Tensor, V: fx.Tensor, O: fx.Tensor, n_kv_tiles: fx.Int32, head_dim: fx.Int32,
               stream: fx.Stream = fx.Stream(None)):
        atom = fx.make_mma_atom(fx.rocdl.WMMA(WMMA, WMMA, WMMA, f16, f32))
        tiled_mma = fx.make_tiled_mma(atom, fx.make_layout((1, 1, 1), (0, 0, 0)))
        q2 = fx.make_view(fx.get_iter(Q), fx.make_layout((S_q, D), (D, 1)))
        k2 = fx.make_view(fx.get_iter(K), fx.make_layout((S_kv, D), (D, 1)))
        v2 = fx.make_view(fx.get_iter(V), fx.make_layout((S_kv, D), (D, 1)))
        o2 = fx.make_view(fx.get_iter(O), fx.make_layout((S_q, D), (D, 1)))
        wmma_attn_kernel(q2, k2, v2, o2, n_kv_tiles, head_dim, tiled_mma).launch(
            grid=(S_q // WMMA, 1, 1), block=(WAVE, 1, 1), stream=stream)

    return launch, wmma_attn_kernel
