"""The Triton corpus (tests/emu/corpus/triton: kernels.py compiled ahead of time for gfx1201 by build.py, code objects
checked in; neither triton nor a GPU is needed here): every kernel runs on the emulator with the sanitizer on and
matches numpy/torch -- bitwise where the arithmetic is exact, else a float64 model of the kernel's own algorithm
within the bound stated at the check.

Each kernel is built twice: with LLVM's default for gfx12 (real-true16: `v_mov_b16_e32 v1.h, v1.l`, 16-bit VOP3 ops
on register halves) and with -real-true16 (`*_t16off`); both run and decode as llvm-objdump prints them
(`--mattr=+real-true16` for the true16 builds)."""
import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from llvm_tools import decode_mismatches, needs_llvm
from sage_co.emu import Device

HERE = Path(__file__).parent / "corpus" / "triton"
NAMES = sorted(p.stem for p in HERE.glob("*.co"))
TAIL = struct.pack("<QQ", 0, 0)     # Triton's two trailing pointer args (global / profile scratch), unused here
LOG2E = 1.4426950408889634


def _variants(base):
    return [n for n in (base, base + "_t16off") if n in NAMES]


class Run:
    def __init__(self, name):
        self.meta = json.loads((HERE / f"{name}.json").read_text())
        self.dev = Device(1 << 24)
        self.mod = self.dev.load((HERE / f"{name}.co").read_bytes(), name)

    def put(self, a):
        a = np.ascontiguousarray(a)
        p = self.dev.alloc(max(a.nbytes, 4))
        self.dev.write(p, a)
        return p

    def get(self, p, dt, n):
        return np.frombuffer(self.dev.read(p, np.dtype(dt).itemsize * n), dt).copy()

    def launch(self, grid, args: bytes):
        m = self.meta
        return self.mod.launch(m["symbol"], grid, (32 * m["num_warps"], 1, 1), args + TAIL, dynamic_lds=m["shared"])


def _bf16(x):
    return torch.from_numpy(np.asarray(x, np.float64)).to(torch.bfloat16).double().numpy()


def _fp8(x):
    return torch.from_numpy(np.asarray(x, np.float64)).float().to(torch.float8_e4m3fn).double().numpy()


@pytest.mark.parametrize("name", _variants("vector_add"))
def test_vector_add(name):
    r, n = Run(name), 1000
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    po = r.dev.alloc(4 * n)
    r.launch((1, 1, 1), struct.pack("<QQQi", r.put(x), r.put(y), po, n) + bytes(4))
    assert (r.get(po, np.float32, n) == x + y).all()          # one f32 add per element: bitwise


@pytest.mark.parametrize("name", _variants("row_softmax"))
def test_row_softmax(name):
    r, R, C = Run(name), 4, 200
    x = np.random.default_rng(1).standard_normal((R, C)).astype(np.float32) * 4
    po = r.dev.alloc(R * C * 4)
    r.launch((R, 1, 1), struct.pack("<QQii", r.put(x), po, C, C))
    out = r.get(po, np.float32, R * C).reshape(R, C)
    e = np.exp(x - x.max(1, keepdims=True).astype(np.float64))
    # f32 exp (x*log2e, v_exp_f32), f32 sum of 200 terms and one division: relative error < 2^-18 per element
    assert (np.abs(out - e / e.sum(1, keepdims=True)) <= 2.0 ** -18 * (e / e.sum(1, keepdims=True))).all()


@pytest.mark.parametrize("name", _variants("layernorm_f16"))
def test_layernorm_f16(name):
    r, R, C = Run(name), 4, 300
    rng = np.random.default_rng(2)
    x, w, b = (rng.standard_normal(s).astype(np.float16) for s in ((R, C), C, C))
    po = r.dev.alloc(R * C * 2)
    r.launch((R, 1, 1), struct.pack("<QQQQif", r.put(x), r.put(w), r.put(b), po, C, 1e-5))
    out = r.get(po, np.float16, R * C).reshape(R, C).astype(np.float64)
    xd = x.astype(np.float64)
    mu, var = xd.mean(1, keepdims=True), xd.var(1, keepdims=True)
    ref = (xd - mu) / np.sqrt(var + 1e-5) * w + b
    # f32 statistics then one f16 rounding: within one f16 ulp of the float64 value (2^-10 relative, 2^-24 abs)
    assert (np.abs(out - ref) <= 2.0 ** -10 * np.abs(ref) + 2.0 ** -24).all()


GEMMS = [n for b in ("gemm_f16", "gemm_bf16", "gemm_i8", "gemm_fp8") for n in _variants(b)]


@pytest.mark.parametrize("name", GEMMS)
def test_gemm(name):
    r, M, N, K = Run(name), 128, 128, 128
    kind = name.split("_")[1]
    g = torch.Generator().manual_seed(3)
    if kind == "i8":
        a, b = (torch.randint(-128, 128, s, generator=g, dtype=torch.int8) for s in ((M, K), (K, N)))
        raw, cdt = (a.numpy(), b.numpy()), np.int32
    else:
        tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}[kind]
        a, b = (torch.randn(*s, generator=g).to(tdt) for s in ((M, K), (K, N)))
        view = torch.uint8 if kind == "fp8" else torch.int16
        raw, cdt = (a.view(view).numpy(), b.view(view).numpy()), np.float32
    pc = r.dev.alloc(M * N * 4)
    r.launch((M // 64, N // 64, 1), struct.pack("<QQQiii", r.put(raw[0]), r.put(raw[1]), pc, M, N, K) + bytes(4))
    out = r.get(pc, cdt, M * N).reshape(M, N)
    A, B = a.double().numpy(), b.double().numpy()
    if kind == "i8":
        assert (out == (a.long() @ b.long()).numpy()).all()         # integer WMMA: exact
    else:
        # products are exact; each WMMA rounds once to f32 (K/16 = 8 roundings of partial sums): error <= 8 * 2^-24
        # of sum |a||b|
        assert (np.abs(out - A @ B) <= 8 * 2.0 ** -24 * (np.abs(A) @ np.abs(B))).all()


def _attention(name, S):
    r = Run(name)
    c = r.meta["constexprs"]
    Dh, BM, BN = c["D"], c["BM"], c["BN"]
    g = torch.Generator().manual_seed(4)
    po = r.dev.alloc(S * Dh * 2)
    if name.startswith("flash"):
        q, k, v = (torch.randn(S, Dh, generator=g).to(torch.bfloat16) for _ in range(3))
        scale = Dh ** -0.5
        st = r.launch((S // BM, 1, 1), struct.pack("<QQQQif", *(r.put(t.view(torch.int16).numpy()) for t in (q, k, v)),
                                                   po, S, scale))
        Q, K, V = (t.double().numpy() for t in (q, k, v))
        sc, pq, post = Q @ K.T * (scale * LOG2E), _bf16, (lambda acc: acc)
    else:
        qi, ki = (torch.randint(-127, 128, (S, Dh), generator=g, dtype=torch.int8) for _ in range(2))
        vf = (torch.randn(S, Dh, generator=g) * 2).to(torch.float8_e4m3fn)
        qs = torch.rand(S // BM, generator=g) * 0.002 + 0.001
        ks = torch.rand(S // BN, generator=g) * 0.002 + 0.001
        vs = torch.rand(Dh, generator=g) + 0.5
        st = r.launch((S // BM, 1, 1), struct.pack("<QQQQQQQi", r.put(qi.numpy()), r.put(ki.numpy()),
                                                   r.put(vf.view(torch.uint8).numpy()), r.put(qs.numpy()),
                                                   r.put(ks.numpy()), r.put(vs.numpy()), po, S) + bytes(4))
        Q, K, V = qi.double().numpy(), ki.double().numpy(), vf.double().numpy()
        sc = (Q @ K.T) * np.repeat(qs.double().numpy(), BM)[:, None] * np.repeat(ks.double().numpy(), BN)[None, :]
        pq = lambda p: _fp8(p * 448.0)                                       # noqa: E731
        post = lambda acc: acc * (vs.double().numpy()[None, :] / 448.0)      # noqa: E731
    out = torch.from_numpy(r.get(po, np.int16, S * Dh)).view(torch.bfloat16).double().numpy().reshape(S, Dh)
    # float64 model of the kernel's own algorithm: BN-key blocks, online softmax in exp2, P quantised (bf16, or
    # fp8 e4m3 of 448*P) before the P.V product
    m, l, acc = np.full(S, -np.inf), np.zeros(S), np.zeros((S, Dh))
    for n in range(0, S, BN):
        s = sc[:, n:n + BN]
        mn = np.maximum(m, s.max(1))
        p, al = np.exp2(s - mn[:, None]), np.exp2(m - mn)
        l, acc, m = l * al + p.sum(1), acc * al[:, None] + pq(p) @ V[n:n + BN], mn
    model = post(acc) / l[:, None]
    return out, model, st


@pytest.mark.parametrize("name", _variants("flash_attn_bf16") + _variants("sage_attn_i8_fp8"))
def test_attention(name):
    out, model, st = _attention(name, 128 if name.startswith("sage") else 128)
    # bound: the bf16 output rounding (half an ulp) plus an f32-vs-f64 flip of a quantised P (one bf16/fp8 step of
    # one term, weighted by its softmax share): one bf16 ulp of the largest output, 2^-7 * max|model|
    assert np.abs(out - model).max() <= 2.0 ** -7 * np.abs(model).max()
    assert st["WMMA"] > 0


VIEWS = [(n, True) for n in NAMES] + [(n, False) for n in NAMES if n.endswith("_t16off")]


@needs_llvm
@pytest.mark.parametrize("name,true16", VIEWS, ids=[f"{n}-{'true16' if t else 'default'}" for n, t in VIEWS])
def test_decode_matches_objdump(name, true16):
    """Every build in LLVM's real-true16 view; the -real-true16 builds also in its default view (the default view
    has no spelling for v_mov_b16_e32, which the true16 builds use)."""
    path = HERE / f"{name}.co"
    want, bad = decode_mismatches(path, true16=true16)
    assert want and not bad, bad[:10]
