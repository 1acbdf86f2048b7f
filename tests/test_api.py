"""The public ops on the emulator: custom-op registration (opcheck, torch.compile), validation before any
kernel runs, the kernarg-mismatch refusal, and fused norm+RoPE == prepare-then-forward."""
import pytest
import torch

import sage_co
from sage_co import launch as launch_mod
from sage_co import reference
from sage_co.kernargs import Field, KernargMismatch, KernargStruct


def qkv(B=1, S=33, H=1, seed=0):
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


@pytest.mark.parametrize("kernel", KERNELS)
def test_opcheck_all_three_ops(kernel):
    q, k, v = qkv()
    torch.library.opcheck(torch.ops.sage_co.sage_prepare.default,
                          (q, k, v, 0.088, "NHD", True, None, None, 1e-6, None, None, 0, "emu"))
    p = sage_co.sage_prepare(q, k, v)
    torch.library.opcheck(torch.ops.sage_co.sage_attention_fwd.default,
                          (*p[:5], p.v_fp8.view(torch.uint8), p.v_scale, p.seq_len_q, p.seq_len_kv, p.head_dim,
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


@pytest.fixture
def no_kernels(monkeypatch):
    """Fail the test if any kernel launches: validation must come first."""
    def boom(*a, **k):
        raise AssertionError("a kernel ran before the input was validated")
    monkeypatch.setattr(launch_mod, "launch", boom)
    import sage_co.ops.attention as att
    monkeypatch.setattr(att, "launch", boom)
    try:
        import sage_co.ops.prepare as prep
        monkeypatch.setattr(prep, "launch", boom)
    except ImportError:
        pass


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
    with pytest.raises(ValueError, match="backend='hip' needs tensors on a gfx1201"):
        launch_mod.resolve_backend(t, "hip")
    with pytest.raises(ValueError, match="expected one of"):
        launch_mod.resolve_backend(t, "gpu")
    meta = torch.zeros(1, device="meta")
    with pytest.raises(ValueError, match="no sage-co backend for tensors on meta"):
        launch_mod.resolve_backend(meta, None)


def test_default_kernel_is_the_hand_scheduled_one():
    from sage_co import registry
    assert registry.find("sage_attention_fwd").variant == "asm"
    assert registry.find("sage_attention_fwd", "hip").symbol == "gfx1201_sage_attention_fwd"
    with pytest.raises(LookupError, match="no variant 'fast'"):
        registry.find("sage_attention_fwd", "fast")


@pytest.mark.parametrize("symbol", ["gfx1201_sage_attention_fwd", "gfx1201_sage_attention_fwd_asm"])
def test_edited_kernarg_declaration_is_refused(symbol):
    from sage_co.ops.attention import ATTENTION_FWD_ARGS
    fields = list(ATTENTION_FWD_ARGS.fields)
    swapped = [Field(f.name, f.kind, f.offset) for f in fields]
    swapped[-1], swapped[-2] = Field("num_heads", "u32", 84), Field("flags", "u32", 80)
    edited = KernargStruct("edited_attention_fwd", swapped, ATTENTION_FWD_ARGS.size)
    with pytest.raises(KernargMismatch, match="refusing to launch"):
        launch_mod.checked_kernel(symbol, edited)
    launch_mod.checked_kernel(symbol, ATTENTION_FWD_ARGS)
