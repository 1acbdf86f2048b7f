"""Triton kernels of the emulator's compiler corpus (issue 10). Written here, compiled ahead of time for
GPUTarget("hip", "gfx1201", 32) by build.py; the tests run the checked-in code objects (no triton needed)."""
import triton
import triton.language as tl


@triton.jit
def vector_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def row_softmax(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=m, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=m)


@triton.jit
def layernorm(x_ptr, w_ptr, b_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=m, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    d = tl.where(m, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / n_cols
    y = d * (1.0 / tl.sqrt(var + eps))
    w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * n_cols + cols, (y * w + b).to(out_ptr.dtype.element_ty), mask=m)


@triton.jit
def gemm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=c_ptr.dtype.element_ty)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b, out_dtype=c_ptr.dtype.element_ty)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def flash_attn_fwd(q_ptr, k_ptr, v_ptr, o_ptr, S, sm_scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """BF16 flash attention forward, one head, non-causal: online softmax in fp32 (exp2), P cast to bf16."""
    start = tl.program_id(0) * BM
    rm = start + tl.arange(0, BM)
    rd = tl.arange(0, D)
    q = tl.load(q_ptr + rm[:, None] * D + rd[None, :])
    m_i = tl.full((BM,), -float("inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    for n in range(0, S, BN):
        rn = n + tl.arange(0, BN)
        k = tl.load(k_ptr + rn[None, :] * D + rd[:, None])
        s = tl.dot(q, k) * qk_scale
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + rn[:, None] * D + rd[None, :])
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.bfloat16), v)
        m_i = m_new
    tl.store(o_ptr + rm[:, None] * D + rd[None, :], (acc / l_i[:, None]).to(tl.bfloat16))


@triton.jit
def sage_attn_fwd(q_ptr, k_ptr, v_ptr, qs_ptr, ks_ptr, vs_ptr, o_ptr, S, D: tl.constexpr, BM: tl.constexpr,
                  BN: tl.constexpr):
    """SageAttention-style forward (the shape of aiter's fav3_sage): INT8 Q.K^T with per-block scales (q_scale per
    BM rows, k_scale per BN keys; sm_scale*log2(e) folded into q_scale), online softmax in fp32, P quantised to
    fp8 e4m3 (x448), FP8 P.V with a per-channel v_scale, one head."""
    pid = tl.program_id(0)
    rm = pid * BM + tl.arange(0, BM)
    rd = tl.arange(0, D)
    q = tl.load(q_ptr + rm[:, None] * D + rd[None, :])
    q_scale = tl.load(qs_ptr + pid)
    m_i = tl.full((BM,), -float("inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    for n in range(0, S, BN):
        rn = n + tl.arange(0, BN)
        k = tl.load(k_ptr + rn[None, :] * D + rd[:, None])
        s = tl.dot(q, k, out_dtype=tl.int32).to(tl.float32) * (q_scale * tl.load(ks_ptr + n // BN))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + rn[:, None] * D + rd[None, :])
        acc = acc * alpha[:, None] + tl.dot((p * 448.0).to(tl.float8e4nv), v)
        m_i = m_new
    vs = tl.load(vs_ptr + rd)
    tl.store(o_ptr + rm[:, None] * D + rd[None, :], (acc * (vs[None, :] / 448.0) / l_i[:, None]).to(tl.bfloat16))
