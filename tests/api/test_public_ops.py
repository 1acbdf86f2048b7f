"""The public ops on the emulator: custom-op registration (opcheck, torch.compile), validation before any
kernel runs, the kernarg-mismatch refusal, and fused norm+RoPE == prepare-then-forward."""
import pytest
import torch

import sage_co
import sage_co.api  # noqa: F401  (registers torch.ops.sage_co.*: `import sage_co` is lazy)
from sage_co import launch as launch_mod
from sage_co import reference
from sage_co.kernargs import Field, KernargMismatch, KernargStruct


def qkv(B=2, S=33, H=2, seed=0):   # B, H >= 2: the ops index both (sizes of 1 hide stride and grid mix-ups)
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, S, H, 128, generator=g).to(torch.bfloat16) for _ in range(3))


def norm_rope_args(S, rope_dim=64, seed=1):
    g = torch.Generator().manual_seed(seed)
    wq = (1 + 0.1 * torch.randn(128, generator=g)).to(torch.bfloat16)
    wk = (1 + 0.1 * torch.randn(128, generator=g)).to(torch.bfloat16)
    ang = torch.arange(S)[:, None] * torch.linspace(0.01, 1, rope_dim)[None]
    return dict(q_norm_weight=wq, k_norm_weight=wk, cos=ang.cos().to(torch.bfloat16), sin=ang.sin().to(torch.bfloat16),
                rope_dim=rope_dim)


KERNELS = ["asm", "hip"]   # every attention test runs against both shipped kernels


def test_opcheck_prepare():
    """sage_prepare takes no kernel: checked once (the attention ops below, per kernel)."""
    q, k, v = qkv()
    torch.library.opcheck(torch.ops.sage_co.sage_prepare.default,
                          (q, k, v, 0.088, "NHD", True, None, None, 1e-6, None, None, 0, "emu"))


@pytest.mark.parametrize("kernel", KERNELS)
def test_opcheck_attention_ops(kernel):
    q, k, v = qkv()
    p = sage_co.sage_prepare(q, k, v)
    torch.library.opcheck(torch.ops.sage_co.sage_attention_fwd.default,
                          (*p[:5], p.v_t.view(torch.uint8), p.v_scale, p.seq_len_q, p.seq_len_kv, p.head_dim,
                           p.out_dtype, "NHD", True, "emu", kernel))
    na = norm_rope_args(33, 32)
    torch.library.opcheck(torch.ops.sage_co.sage_attention.default,
                          (q, k, v, 0.088, "NHD", False, na["q_norm_weight"], na["k_norm_weight"], 1e-6, na["cos"],
                           na["sin"], 32, False, "emu", kernel))


@pytest.mark.parametrize("kernel", KERNELS)
def test_torch_compile_fullgraph_equals_eager(kernel):
    q, k, v = qkv(S=40)

    def f(q, k, v):
        return sage_co.sage_attention(q, k, v, kernel=kernel) * 2

    eager = f(q, k, v)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v)
    assert torch.equal(eager, compiled)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("rope_dim", [32, 128])
def test_fused_norm_rope_equals_prepare_then_forward(rope_dim, kernel):
    q, k, v = qkv(S=70, H=2, seed=3)
    na = norm_rope_args(70, rope_dim)
    fused = sage_co.sage_attention(q, k, v, kernel=kernel, **na)
    p = sage_co.sage_prepare(q, k, v, **na)
    two_step = sage_co.sage_attention_fwd(p, kernel=kernel)
    assert torch.equal(fused, two_step)


@pytest.mark.parametrize("bad, match", [
    (lambda q, k, v: (q.float(), k, v), "q"),
    (lambda q, k, v: (q, k[:, :, :, :64].contiguous(), v), "k"),
    (lambda q, k, v: (q, k, v.transpose(1, 2)), "v"),
    (lambda q, k, v: (q[:, :0], k[:, :0], v[:, :0]), "S"),
])
def test_validation_errors_before_any_kernel(no_kernels, bad, match):
    q, k, v = bad(*qkv())
    with pytest.raises((ValueError, TypeError), match=match):
        sage_co.sage_attention(q, k, v)


def test_more_validation_errors(no_kernels):
    q, k, v = qkv()
    with pytest.raises(ValueError, match="softmax_scale"):
        sage_co.sage_attention(q, k, v, float("nan"))
    with pytest.raises(ValueError, match="rope_dim"):
        sage_co.sage_attention(q, k, v, **{**norm_rope_args(33, 64), "rope_dim": 48})
    with pytest.raises(ValueError, match="backend"):
        sage_co.sage_attention(q, k, v, backend="cuda")
    with pytest.raises(ValueError, match="requires_grad|grad"):
        sage_co.sage_attention(q.clone().requires_grad_(True), k, v)
    p = reference.sage_prepare(*qkv(S=100))
    wrong = p._replace(seq_len_q=33, seq_len_kv=33)
    with pytest.raises(ValueError, match="another shape"):
        sage_co.sage_attention_fwd(wrong)
    with pytest.raises(TypeError, match="prepared"):
        sage_co.sage_attention_fwd((1, 2, 3))


def test_backend_choice_is_explicit_or_by_device():
    t = torch.zeros(1)
    assert launch_mod.resolve_backend(t, None) == "emu"
    with pytest.raises(ValueError, match="backend='gpu' needs tensors on a gfx1201"):
        launch_mod.resolve_backend(t, "gpu")
    with pytest.raises(ValueError, match="expected None or one of"):
        launch_mod.resolve_backend(t, "cuda")
    meta = torch.zeros(1, device="meta")
    with pytest.raises(ValueError, match="no sage-co backend for tensors on meta"):
        launch_mod.resolve_backend(meta, None)


@pytest.fixture
def emu_as_gpu():
    """The emulator installed as the "gpu" backend (launch.use_backend), so that a call naming the gpu backend runs
    here, on CPU tensors; the real one is put back after the test."""
    from sage_co.backends.emu import EmuBackend
    previous = launch_mod.use_backend("gpu", EmuBackend())
    yield
    launch_mod.use_backend("gpu", previous)


def test_backend_hip_is_the_deprecated_spelling_of_gpu(emu_as_gpu):
    """backend="hip" (the gpu backend's name until "hip" came to mean only the HIP-source kernel) still works: the
    one normalization (sage_co.backends.canonical) warns and runs the call on "gpu", eagerly and under
    torch.compile(fullgraph=True) (the check while tracing does not warn; the launch outside the graph does)."""
    q, k, v = qkv(S=40)
    want = sage_co.sage_attention(q, k, v, backend="emu")
    with launch_mod.recording() as records, pytest.warns(FutureWarning, match='backend="hip" is now "gpu"'):
        got = sage_co.sage_attention(q, k, v, backend="hip")
    assert torch.equal(got, want)
    assert records and {r.backend for r in records} == {"gpu"}

    def f(q, k, v):
        return sage_co.sage_attention(q, k, v, backend="hip") * 2

    with launch_mod.recording() as records, pytest.warns(FutureWarning, match='backend="hip" is now "gpu"'):
        compiled = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v)
    assert torch.equal(compiled, want * 2)
    assert records and {r.backend for r in records} == {"gpu"}


@pytest.mark.parametrize("backend, error", [("cuda", ValueError), ("HIP", ValueError), (1, TypeError)])
def test_unknown_backend_names_the_argument_and_the_choices(no_kernels, backend, error):
    q, k, v = qkv()
    with pytest.raises(error, match=r"^backend: expected None or one of \('emu', 'gpu'\), got"):
        sage_co.sage_attention(q, k, v, backend=backend)


def test_default_kernel_is_the_hand_scheduled_one():
    from sage_co import registry
    assert registry.find("sage_attention_fwd", head_dim=128, out_dtype="bf16", pv_dtype="fp8").kernel == "asm"
    assert registry.find("sage_attention_fwd", "hip", head_dim=64, out_dtype="fp16", pv_dtype="fp8").symbol == \
        "gfx1201_sage_attention_fwd_d64_fp16"
    with pytest.raises(LookupError, match="no kernel 'fast'"):
        registry.find("sage_attention_fwd", "fast")


@pytest.mark.parametrize("symbol", ["gfx1201_sage_attention_fwd_d128_bf16", "gfx1201_sage_attention_fwd_asm_d64_fp16"])
def test_edited_kernarg_declaration_is_refused(symbol):
    from sage_co.ops.attention import ATTENTION_FWD_ARGS
    fields = list(ATTENTION_FWD_ARGS.fields)
    swapped = [Field(f.name, f.kind, f.offset) for f in fields]
    i_hd, i_fl = (next(i for i, f in enumerate(fields) if f.name == n) for n in ("head_dim", "flags"))
    swapped[i_hd], swapped[i_fl] = (Field("flags", "u32", fields[i_hd].offset),      # the two names swapped,
                                    Field("head_dim", "u32", fields[i_fl].offset))   # the offsets kept
    edited = KernargStruct("edited_attention_fwd", swapped, ATTENTION_FWD_ARGS.size)
    with pytest.raises(KernargMismatch, match="refusing to launch"):
        launch_mod.checked_kernel(symbol, edited)
    launch_mod.checked_kernel(symbol, ATTENTION_FWD_ARGS)


# ------------------------------------------------------------------------- issue 13: the new signature
def qkv_new(B=1, S_q=33, S_kv=40, H_q=4, H_kv=2, D=64, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, S_q, H_q, D, generator=g).to(dtype), torch.randn(B, S_kv, H_kv, D, generator=g).to(dtype),
            torch.randn(B, S_kv, H_kv, D, generator=g).to(dtype))


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_opcheck_prepare_new_shapes(layout):
    """fp16, GQA, S_q != S_kv, a padded head dim (80), NHD and HND views: the real op and its fake agree on every
    output's shape, dtype and strides."""
    q, k, v = qkv_new(D=80)
    if layout == "HND":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))   # HND views of NHD memory
    torch.library.opcheck(torch.ops.sage_co.sage_prepare.default,
                          (q, k, v, 0.1, layout, True, None, None, 1e-6, None, None, 0, "emu"))


def test_prepare_end_to_end_new_shapes_equals_reference():
    q, k, v = qkv_new(D=96, dtype=torch.bfloat16)
    hnd = [t.transpose(1, 2) for t in (q, k, v)]
    p = sage_co.sage_prepare(*hnd, layout="HND", smooth_k=False)
    r = reference.sage_prepare(q, k, v)
    assert p[7:] == r[7:] == (33, 40, 96, torch.bfloat16, None, None)   # v_mean, lse_corr (smooth_v, smooth_k off)
    for a, b in zip(p[:7], r[:7]):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_torch_compile_fullgraph_prepare_new_signature():
    q, k, v = qkv_new(D=64)

    def f(q, k, v):
        p = sage_co.sage_prepare(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), layout="HND")
        return p.q_int8.float().sum() + p.v_scale.sum(), p.k_scale

    eager = f(q, k, v)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v)
    assert all(torch.equal(a, b) for a, b in zip(eager, compiled))


@pytest.mark.parametrize("kernel", KERNELS)
def test_attention_hnd_layout_and_compile(kernel):
    """layout="HND" end to end (the shapes the shipped v1 kernels serve: D = 128, H_q = H_kv, S_q = S_kv, bf16):
    the same values as NHD, returned as [B, H, S, D], also under torch.compile(fullgraph=True)."""
    q, k, v = qkv(S=40, H=2, seed=5)
    nhd = sage_co.sage_attention(q, k, v, kernel=kernel)

    def f(q, k, v):
        return sage_co.sage_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), layout="HND",
                                      kernel=kernel)

    hnd = f(q, k, v)
    assert hnd.shape == (2, 2, 40, 128) and torch.equal(hnd.transpose(1, 2), nhd)
    assert torch.equal(torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v), hnd)
    out_ref = reference.sage_attention(q, k, v)
    assert (nhd.float() - out_ref.float()).norm() <= 1e-3 * out_ref.float().norm()


@pytest.mark.parametrize("case", ["gqa", "mqa_cross", "d80_hnd", "fp16_d64"])
def test_attention_new_shapes_end_to_end(case):
    """GQA, MQA with S_q != S_kv, a padded head dim in HND, fp16 with D = 64: sage_attention on the emulator equals
    prepare + the reference model (docs/numerics.md kernel-vs-model bound), in q's dtype and layout."""
    kw, layout = {"gqa": (dict(H_q=4, H_kv=2, S_q=33, S_kv=33, D=128, dtype=torch.bfloat16), "NHD"),
                  "mqa_cross": (dict(H_q=2, H_kv=1, S_q=31, S_kv=77, D=128, dtype=torch.bfloat16), "NHD"),
                  "d80_hnd": (dict(H_q=2, H_kv=2, S_q=40, S_kv=33, D=80, dtype=torch.bfloat16), "HND"),
                  "fp16_d64": (dict(H_q=4, H_kv=1, S_q=64, S_kv=31, D=64, dtype=torch.float16), "NHD")}[case]
    q, k, v = qkv_new(**kw)
    if layout == "HND":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    out, lse = sage_co.sage_attention(q, k, v, layout=layout, return_lse=True)
    model, model_lse = reference.sage_attention(q, k, v, layout=layout, return_lse=True)
    assert out.shape == q.shape and out.dtype == q.dtype and model.shape == out.shape
    rel = ((out.float() - model.float()).norm() / model.float().norm()).item()
    assert rel <= 1e-3, rel
    assert torch.allclose(lse, model_lse, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bad, exc, match", [
    (dict(layout="BHSD"), ValueError, "^layout"),
    (dict(q=torch.zeros(1, 33, 4, 257, dtype=torch.float16)), ValueError, "^q: expected a head dim"),
    (dict(q=torch.zeros(1, 33, 4, 384, dtype=torch.float16)), ValueError, "^q: expected a head dim"),
    (dict(q=torch.zeros(1, 33, 3, 64, dtype=torch.float16)), ValueError, "^k: expected a number of heads"),
    (dict(q=torch.zeros(1, 33, 4, 64, dtype=torch.bfloat16)), TypeError, "^k: expected the dtype of q"),
    (dict(kernel="fast"), ValueError, r"^kernel: expected None or one of \['asm', 'hip'\]"),   # issue 11 item 5
])
@pytest.mark.parametrize("entry", ["prepare", "attention"])
def test_new_validation_errors_before_any_kernel(no_kernels, bad, exc, match, entry):
    q, k, v = qkv_new()
    args = dict(q=q, k=k, v=v)
    args.update(bad)
    if entry == "prepare":
        if "kernel" in args:
            pytest.skip("sage_prepare has no kernel= argument")
        fn = sage_co.sage_prepare
    else:
        fn = sage_co.sage_attention
    with pytest.raises(exc, match=match):
        fn(args.pop("q"), args.pop("k"), args.pop("v"), **args)


def test_opcheck_attention_ops_new_shapes_hnd():
    """The forward and the fused op on GQA + S_q != S_kv + fp16 + a padded head dim, HND: real and fake agree on
    shapes, dtypes and strides (out contiguous in the caller's layout)."""
    q, k, v = qkv_new(S_q=33, S_kv=40, H_q=4, H_kv=2, D=80, dtype=torch.float16)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    p = sage_co.sage_prepare(q, k, v, layout="HND")
    torch.library.opcheck(torch.ops.sage_co.sage_attention_fwd.default,
                          (*p[:5], p.v_t.view(torch.uint8), p.v_scale, p.seq_len_q, p.seq_len_kv, p.head_dim,
                           p.out_dtype, "HND", True, "emu", "hip"))
    torch.library.opcheck(torch.ops.sage_co.sage_attention.default,
                          (q, k, v, 0.1, "HND", False, None, None, 1e-6, None, None, 0, False, "emu", "asm"))
