"""The launch layer on the emulator: the precompiled packer equals KernargStruct.pack (errors included), options
are forwarded to the backend and unknown ones refused, launch() returns the backend's result, records are
bounded, misaligned pointers are refused, and the backends never import the launch module (no cycle)."""
import ast
import random
from pathlib import Path

import pytest
import torch

from sage_co import abi, launch, registry
from sage_co.backends.base import Packer

ROOT = Path(__file__).resolve().parents[2]


def _values(struct, rng):
    lim = {"ptr": (0, 2**64 - 1), "u64": (0, 2**64 - 1), "i32": (-2**31, 2**31 - 1), "u32": (0, 2**32 - 1)}
    return {f.name: rng.uniform(-1e30, 1e30) if f.kind == "f32" else rng.randint(*lim[f.kind])
            for f in struct.fields}


@pytest.mark.parametrize("op", sorted(abi.STRUCTS))
def test_packer_equals_struct_pack(op):
    struct, rng = abi.struct_for(op), random.Random(0)
    packer = Packer(struct)
    for _ in range(50):
        values = _values(struct, rng)
        assert packer.pack(values) == struct.pack(values)
        buf = bytearray(struct.size)
        packer.pack_into(buf, values)
        assert bytes(buf) == struct.pack(values)
    ints = [f.name for f in struct.fields if f.kind != "f32"]
    floats = [f.name for f in struct.fields if f.kind == "f32"]
    bad_cases = [{**values, ints[-1]: True}, {**values, ints[-1]: 2**64}, {**values, ints[-1]: 1.5},
                 {k: v for k, v in values.items() if k != ints[0]}, {**values, "nope": 1}]
    if floats:
        bad_cases.append({**values, floats[0]: "x"})
    for bad in bad_cases:
        with pytest.raises((TypeError, ValueError)) as fast:
            packer.pack(bad)
        with pytest.raises(type(fast.value)) as slow:
            struct.pack(bad)
        assert str(fast.value) == str(slow.value)


def _attention_args(S=64, H=1):
    i8 = torch.zeros(1, H, 64, 128, dtype=torch.int8)
    f32 = torch.zeros(1, H, 128)
    return dict(q=i8, k=i8, v=i8, q_scale=f32, k_scale=f32, k_mean=f32, v_scale=f32,
                out=torch.zeros(1, S, H, 128, dtype=torch.bfloat16), lse=f32,
                **{f.name: 0 for f in abi.ATTENTION_FWD_ARGS.fields if f.kind != "ptr"})


def _attention_symbol():
    return next(k.symbol for k in registry.kernels() if k.op == abi.ATTENTION_OP)


def test_result_returned_and_recorded():
    import sage_co
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 40, 1, 128, generator=g).to(torch.bfloat16) for _ in range(3))
    with launch.recording() as records:
        sage_co.sage_attention(q, k, v, backend="emu")
    assert [r.symbol for r in records][-1] == registry.find(abi.ATTENTION_OP, head_dim=128, out_dtype="bf16", pv_dtype="fp8").symbol
    for r in records:
        assert isinstance(r.result, dict) and r.result["waves"] >= 1 and r.backend == "emu"
        assert len(r.kernarg_bytes) == abi.struct_for(registry.find_symbol(r.symbol).op).size
    assert launch.get_backend("emu").history.maxlen is not None and launch.launched.maxlen is not None


def test_options_forwarded_and_unknown_refused(monkeypatch):
    seen = {}
    emu = launch.get_backend("emu")
    monkeypatch.setattr(type(emu), "run", lambda self, kl: seen.update(kl.options) or "result")
    args = _attention_args()
    symbol = _attention_symbol()
    assert launch.launch(symbol, abi.ATTENTION_FWD_ARGS, (1, 1, 1), abi.ATTENTION_BLOCK, args, backend="emu",
                         sanitize=False, lds_race_check=True) == "result"
    assert seen == dict(sanitize=False, lds_race_check=True)
    with pytest.raises(TypeError, match="bogus"):
        launch.launch(symbol, abi.ATTENTION_FWD_ARGS, (1, 1, 1), abi.ATTENTION_BLOCK, args, backend="emu",
                      bogus=True)


def test_misaligned_pointer_refused():
    args = _attention_args()
    flat = torch.zeros(64 * 128 + 8, dtype=torch.bfloat16)
    args["out"] = flat[1:1 + 64 * 128].view(1, 64, 1, 128)
    before = list(launch.launched)
    with pytest.raises(ValueError, match="'out'.*not 16-byte aligned"):
        launch.launch(_attention_symbol(), abi.ATTENTION_FWD_ARGS, (1, 1, 1), abi.ATTENTION_BLOCK, args,
                      backend="emu")
    assert list(launch.launched) == before


def test_backends_do_not_import_launch():
    for path in (ROOT / "sage_co" / "backends").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom):
                names = [f"{node.module or ''}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            assert not any(n.split(".")[-1] == "launch" or ".launch" in n for n in names), (path.name, names)


def test_geometry_checked_every_time_even_after_a_good_launch(monkeypatch):
    emu = launch.get_backend("emu")
    monkeypatch.setattr(type(emu), "run", lambda self, kl: "ran")
    args, symbol = _attention_args(), _attention_symbol()
    assert launch.launch(symbol, abi.ATTENTION_FWD_ARGS, (1, 1, 1), abi.ATTENTION_BLOCK, args, backend="emu") == "ran"
    for grid in [(True, 1, 1), (1, 1, 0), (1, 1)]:
        with pytest.raises(ValueError, match="grid"):
            launch.launch(symbol, abi.ATTENTION_FWD_ARGS, grid, abi.ATTENTION_BLOCK, args, backend="emu")
