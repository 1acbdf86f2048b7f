"""The hip-python backend on a real gfx1201 (skipped elsewhere, with the reason).

The emulator executes the same code objects bit for bit, and the emulator results are checked against the
reference in tests/kernels/test_prepare_vs_reference.py and tests/kernels/test_attention_*.py; so here every GPU result
must equal the
emulator's result of the same inputs bit for bit (prepare: all fields, k_mean included since the kernel's
summation order is the same on both; attention: out and LSE), plus the accuracy contract, a non-default
stream, another device than the current one, graph capture after warm-up, and validation on GPU tensors.
Every test allocates on a gfx1201 explicitly (DEVICE), never on torch's default device, which may be another GPU."""
import pytest
import torch

import sage_co
from sage_co import accuracy, launch, reference
from sage_co.backends.base import device_arch

pytestmark = pytest.mark.gfx1201


def gfx1201_devices() -> list[int]:
    if getattr(torch.version, "hip", None) is None or not torch.cuda.is_available():
        return []
    return [i for i in range(torch.cuda.device_count()) if device_arch(torch.device("cuda", i)) == "gfx1201"]


DEVICES = gfx1201_devices()
DEVICE = f"cuda:{DEVICES[0]}" if DEVICES else "cuda"


def qkv(B, S, H, seed=0, device=DEVICE):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, S, H, 128, generator=g).to(torch.bfloat16).to(device) for _ in range(3))


def norm_rope(S, rope_dim, seed=1, device=DEVICE):
    g = torch.Generator().manual_seed(seed)
    w = [(1 + 0.1 * torch.randn(128, generator=g)).to(torch.bfloat16).to(device) for _ in range(2)]
    ang = torch.arange(S)[:, None] * torch.linspace(0.01, 1, rope_dim)[None]
    return dict(q_norm_weight=w[0], k_norm_weight=w[1], cos=ang.cos().to(torch.bfloat16).to(device),
                sin=ang.sin().to(torch.bfloat16).to(device), rope_dim=rope_dim)


def same_bits(a, b):
    a, b = a.cpu(), b.cpu()
    if a.dtype.is_floating_point and a.element_size() in (1, 2, 4):
        view = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[a.element_size()]
        a, b = a.view(view), b.view(view)
    return torch.equal(a, b)


def gpu_vs_emulator_prepare(q, k, v, **kw):
    gpu = sage_co.sage_prepare(q, k, v, **kw)
    cpu_kw = {n: (t.cpu() if isinstance(t, torch.Tensor) else t) for n, t in kw.items()}
    emu = sage_co.sage_prepare(q.cpu(), k.cpu(), v.cpu(), backend="emu", **cpu_kw)
    for name in ("q_int8", "q_scale", "k_int8", "k_scale", "k_mean", "v_t", "v_scale"):
        assert same_bits(getattr(gpu, name), getattr(emu, name)), name
    return gpu


@pytest.mark.parametrize("B,S,H", [(1, 1, 1), (2, 31, 3), (1, 33, 1), (2, 65, 3), (1, 200, 1), (2, 1000, 3)])
@pytest.mark.parametrize("smooth_k", [False, True])
def test_prepare_shapes(B, S, H, smooth_k):
    gpu_vs_emulator_prepare(*qkv(B, S, H), smooth_k=smooth_k)


@pytest.mark.parametrize("rope_dim", [32, 64, 96, 128])
def test_prepare_norm_rope(rope_dim):
    gpu_vs_emulator_prepare(*qkv(1, 100, 2), smooth_k=True, **norm_rope(100, rope_dim))


def test_prepare_special_values():
    q, k, v = (t.clone() for t in qkv(1, 96, 2))
    q[0, 0:32] = 0
    k[0, 3, 1, 5] = float("nan")
    v[0, 7, 0, 9] = float("inf")
    q[0, 40, 1] = torch.finfo(torch.bfloat16).max
    v[0, :, 1] *= 2.0 ** -133
    gpu_vs_emulator_prepare(q, k, v, smooth_k=True)


@pytest.mark.parametrize("kernel", ["hip", "asm"])
@pytest.mark.parametrize("B,S,H", [(1, 17, 2), (2, 257, 3), (1, 1000, 1)])
def test_attention_gpu_equals_emulator(B, S, H, kernel):
    q, k, v = qkv(B, S, H)
    out, lse = sage_co.sage_attention(q, k, v, kernel=kernel, return_lse=True)
    eo, el = sage_co.sage_attention(q.cpu(), k.cpu(), v.cpu(), kernel=kernel, return_lse=True, backend="emu")
    assert same_bits(out, eo) and same_bits(lse, el)


@pytest.mark.parametrize("kernel", ["hip", "asm"])
def test_attention_contract_long_sequence(kernel):
    q, k, v = qkv(1, 4096, 2)
    m = accuracy.metrics(sage_co.sage_attention(q, k, v, kernel=kernel).cpu(),
                         reference.attention_fp32(q.cpu(), k.cpu(), v.cpu()))
    assert accuracy.within_contract(m), m


def test_non_default_stream():
    q, k, v = qkv(1, 300, 2)
    base = sage_co.sage_attention(q, k, v)
    torch.cuda.synchronize(DEVICE)
    stream = torch.cuda.Stream(DEVICE)
    stream.wait_stream(torch.cuda.current_stream(DEVICE))
    with torch.cuda.stream(stream):
        out = sage_co.sage_attention(q, k, v)
    stream.synchronize()
    assert same_bits(out, base)


@pytest.mark.parametrize("index", DEVICES or [0])
def test_every_gfx1201_device_while_another_is_current(index):
    """Modules load per device and HIP needs the stream's device current: run on device `index` with a
    different device current (when there is a second device), and the caller's current device is kept."""
    others = [i for i in range(torch.cuda.device_count()) if i != index]
    current = others[0] if others else index
    q, k, v = qkv(1, 100, 2, device=f"cuda:{index}")
    with torch.cuda.device(current):
        out = sage_co.sage_attention(q, k, v)
        assert torch.cuda.current_device() == current
    eo = sage_co.sage_attention(q.cpu(), k.cpu(), v.cpu(), backend="emu")
    assert out.device == q.device and same_bits(out, eo)


def test_graph_capture_after_warmup():
    q, k, v = qkv(1, 128, 2)
    prepared = sage_co.sage_prepare(q, k, v)
    launch.warmup("gpu", device=torch.device(DEVICE))
    eager = sage_co.sage_attention_fwd(prepared)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream(DEVICE)
    stream.wait_stream(torch.cuda.current_stream(DEVICE))
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        captured = sage_co.sage_attention_fwd(prepared)
    graph.replay()
    torch.cuda.synchronize(DEVICE)
    assert same_bits(captured, eager)


def test_inputs_at_an_odd_offset_are_copied_by_prepare():
    """The kernels use 16-byte vector loads: prepare copies an input view that does not start on a 16-byte
    boundary into an aligned buffer (launch() itself refuses such a pointer:
    tests/ops/test_gpu_backend_stub_runtime.py)."""
    q, k, v = qkv(1, 64, 1)
    flat = torch.empty(q.numel() + 8, dtype=q.dtype, device=DEVICE)
    q_odd = flat[1:1 + q.numel()].view(q.shape)
    q_odd.copy_(q)
    assert q_odd.data_ptr() % 16 != 0
    a, b = sage_co.sage_prepare(q, k, v), sage_co.sage_prepare(q_odd, k, v)
    for name in ("q_int8", "q_scale"):
        assert same_bits(getattr(a, name), getattr(b, name)), name


def test_validation_on_gpu_tensors():
    q, k, v = qkv(1, 33, 1)
    with pytest.raises(ValueError, match="k"):
        sage_co.sage_attention(q, k[..., :64].contiguous(), v)
    with pytest.raises(ValueError, match="backend='emu' runs on CPU tensors"):
        sage_co.sage_attention(q, k, v, backend="emu")
