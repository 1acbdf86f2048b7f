"""sage_co.callspec: one declaration per option, everything else derived (issue 24).

The main test adds a made-up option to SAGE_ATTENTION's call spec -- in a fresh interpreter, before sage_co.api is
imported, and nowhere else -- and shows it reaching the custom op's schema, its fake implementation, the plan
(through sage_co.sage_attention, sage_co.compat.sageattn under an alias, and sage_co.sage_attention_varlen), and its
validator refusing a bad value before any kernel, in every one of those entry points."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from sage_co import callspec

ROOT = Path(__file__).resolve().parents[2]

_FAKE_OPTION = textwrap.dedent("""
    import sys
    import torch
    from sage_co import callspec

    seen = []
    def check(value):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"fake_knob: expected an int, got {type(value).__name__}")
        seen.append(value)
        return value

    knob = callspec.Option("fake_knob", "int", 0, check, aliases=("knob_alias",))
    callspec.SAGE_ATTENTION = callspec.SAGE_ATTENTION.with_option(knob)   # the only edit

    import sage_co
    from sage_co import api, compat, launch, plan, varlen

    # schema
    schema = str(torch.ops.sage_co.sage_attention.default._schema)
    assert "int fake_knob=0" in schema, schema

    # fake implementation: the op called by name on meta tensors, with the new argument
    m = torch.empty(2, 70, 2, 64, dtype=torch.bfloat16, device="meta")
    out, lse = torch.ops.sage_co.sage_attention(m, m, m, 0.1, "NHD", False, None, None, 1e-6, None, None, 0, True,
                                                "", "", fake_knob=5)
    assert out.shape == (2, 70, 2, 64) and lse.shape == (2, 2, 70), (out.shape, lse.shape)

    # the plan: every entry point hands the value to plan_call (the validator sees it; the plan holds it)
    planned = []
    real = plan.plan_call
    def spy(spec, inputs, options, **kw):
        p = real(spec, inputs, options, **kw)
        planned.append(p.options.get("fake_knob"))
        return p
    plan.plan_call = spy
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 70, 2, 64, generator=g).to(torch.bfloat16) for _ in range(3))
    sage_co.sage_attention(q, k, v, fake_knob=3)
    compat.sageattn(q, k, v, tensor_layout="NHD", knob_alias=4)             # SageAttention-style alias
    packed = torch.randn(70, 2, 64, generator=g).to(torch.bfloat16)
    cu = torch.tensor([0, 30, 70], dtype=torch.int32)
    # varlen takes only the options its packed kernels implement (sage_co.varlen.VARLEN_OPTIONS): a new one is
    # refused by name, not ignored
    try:
        varlen.sage_attention_varlen(packed, packed, packed, cu, cu, 40, 40, fake_knob=6)
    except TypeError as e:
        assert "unexpected keyword argument 'fake_knob'" in str(e), e
    else:
        raise AssertionError("varlen took an option it does not implement")
    assert planned == [3, 4], planned
    assert 3 in seen and 4 in seen, seen

    # the validator refuses a bad value, naming the option (or the alias used), before any kernel
    before = len(launch.launched)
    for call, name in ((lambda: sage_co.sage_attention(q, k, v, fake_knob="x"), "fake_knob"),
                       (lambda: compat.sageattn(q, k, v, tensor_layout="NHD", knob_alias="x"), "knob_alias"),
                       (lambda: varlen.sage_attention_varlen(packed, packed, packed, cu, cu, 40, 40, fake_knob=1.5),
                        "sage_attention_varlen() got an unexpected keyword argument 'fake_knob'")):
        try:
            call()
        except TypeError as e:
            assert str(e).startswith(name + ":") or str(e) == name, e
        else:
            raise AssertionError(f"{name}: not refused")
    assert len(launch.launched) == before
    print("OK")
""")


def test_a_new_option_reaches_schema_fake_compat_and_varlen_from_one_declaration():
    res = subprocess.run([sys.executable, "-c", _FAKE_OPTION], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=600)
    assert res.returncode == 0 and res.stdout.strip().endswith("OK"), res.stderr[-3000:]


def test_the_schemas_are_the_published_ones():
    """Positional callers (opcheck, torch.ops.sage_co.*) keep working: the first-published options stay required,
    in their order; the later ones follow with their defaults."""
    assert callspec.SAGE_PREPARE.schema() == (
        "(Tensor q, Tensor k, Tensor v, float softmax_scale, str layout, bool smooth_k, Tensor? q_norm_weight, "
        "Tensor? k_norm_weight, float eps, Tensor? cos, Tensor? sin, int rope_dim, str backend, "
        "bool smooth_v=False, str pv_dtype=\"fp8\", str norm_rope_rounding=\"once\") -> "
        "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")   # the 9th: lse_corr (smooth_k)
    assert callspec.SAGE_ATTENTION.schema().startswith(
        "(Tensor q, Tensor k, Tensor v, float softmax_scale, str layout, bool smooth_k, Tensor? q_norm_weight, "
        "Tensor? k_norm_weight, float eps, Tensor? cos, Tensor? sin, int rope_dim, bool return_lse, str backend, "
        "str kernel, bool is_causal=False, Tensor? block_mask=None, bool smooth_v=False, str pv_dtype=\"fp8\"")


def test_encode_decode_round_trip_and_unknown_keywords():
    spec = callspec.SAGE_ATTENTION
    values = spec.bind({"backend": None, "kernel": "hip", "rope_dim": None}, "sage_attention")
    values["softmax_scale"] = 0.125
    q = torch.zeros(1)
    args = spec.to_schema((q, q, q), values)
    assert args[3:6] == (0.125, "NHD", False)
    (_, _, _), back = spec.from_schema(args)
    assert back["backend"] is None and back["kernel"] == "hip" and back["rope_dim"] is None
    with pytest.raises(TypeError, match="sage_attention\\(\\) got an unexpected keyword argument 'bogus'"):
        spec.bind({"bogus": 1}, "sage_attention")
    with pytest.raises(ValueError, match="declared twice"):
        spec.with_option(callspec.OPTIONS["layout"])


def test_plans_are_memoised_on_metadata_and_option_types():
    """A repeated call reuses its plan; a value of another type (True vs 1) is a different key, so the cached plan
    never lets a bad value through."""
    from sage_co import api, plan
    q = torch.randn(2, 70, 2, 64).to(torch.bfloat16)
    api.sage_attention(q, q, q, smooth_k=True)
    n = plan.memo_size()
    api.sage_attention(q.clone(), q.clone(), q.clone(), smooth_k=True)
    assert plan.memo_size() == n
    with pytest.raises(TypeError, match="^smooth_k: "):
        api.sage_attention(q, q, q, smooth_k=1)


def test_compile_dynamic_with_several_heads_and_batches():
    """torch.compile(fullgraph=True, dynamic=True) with B = H = 2: the trace-time checks see symbolic sizes, and the
    manifest lookup (a constant to dynamo) gets only static values (D_pad, dtype, kernel, pv_dtype). Before the
    plan it was handed the symbolic H_q and failed to trace."""
    from sage_co import api
    torch._dynamo.reset()
    compiled = torch.compile(api.sage_attention, fullgraph=True, dynamic=True)
    g = torch.Generator().manual_seed(1)
    for S in (40, 70):
        q, k, v = (torch.randn(2, S, 2, 64, generator=g).to(torch.bfloat16) for _ in range(3))
        assert torch.equal(compiled(q, k, v), api.sage_attention(q, k, v))


def test_plan_memo_keys_floats_by_their_bits():
    """eps=0.0 and eps=-0.0 compare equal but pack different kernarg bits: the memoised plan of one is not the plan of
    the other (sage_co.plan keys a zero float by its bits), while a repeated value reuses the plan."""
    import math

    from sage_co import plan
    q = torch.randn(2, 70, 2, 64).to(torch.bfloat16)

    def eps_of(eps):
        o = callspec.SAGE_ATTENTION.bind({"eps": eps, "backend": "emu"})
        o["softmax_scale"] = None
        return plan.plan_call(callspec.SAGE_ATTENTION, (q, q, q), o).prepare.prepare
    first = eps_of(0.0)
    assert eps_of(0.0) is first                           # the memo hit: the same bound launch
    negative = eps_of(-0.0)
    assert math.copysign(1.0, negative.scalars["eps"]) == -1.0 and negative is not first
    assert eps_of(1e-6) is eps_of(1e-6)


def test_a_runtime_flag_option_reaches_the_kernarg_flags(monkeypatch):
    """A made-up runtime-flag option is declared in two places -- its Option (sage_co/callspec.py) and its bit in the
    option -> flag table (sage_co/abi.py FLAG_OPTIONS) -- and reaches the attention launch's kernarg `flags` through
    the public call (the typed options object the recipe reads), set only when the option is on."""
    from sage_co import abi, api, validate
    from sage_co.ops import attention as attention_ops
    from sage_co.ops import prepare as prepare_ops
    bit = 1 << 6
    assert not bit & (abi.FLAG_LSE | abi.FLAG_SMOOTH_K | abi.FLAG_CAUSAL | abi.FLAG_SMOOTH_V | abi.FLAG_MASK |
                      abi.FLAG_VARLEN)
    knob = callspec.Option("fake_flag", "bool", False, lambda value: validate.check_flag("fake_flag", value))
    monkeypatch.setattr(api, "SAGE_ATTENTION", callspec.SAGE_ATTENTION.with_option(knob))   # the Option
    monkeypatch.setitem(abi.FLAG_OPTIONS, "fake_flag", bit)                                 # its bit
    launched = []

    def record(symbol, struct, grid, block, args, **kw):   # no kernel runs: the kernargs are what is checked
        launched.append((struct.name, args))
    monkeypatch.setattr(attention_ops, "launch", record)
    monkeypatch.setattr(prepare_ops, "launch", record)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 70, 2, 48, generator=g).to(torch.bfloat16) for _ in range(3))
    for on in (True, False):
        launched.clear()
        api.sage_attention(q, k, v, is_causal=True, fake_flag=on)
        flags = [args["flags"] for name, args in launched if name == abi.ATTENTION_OP]
        assert flags == [abi.FLAG_CAUSAL | (bit if on else 0)], (on, flags)
    with pytest.raises(TypeError, match="fake_flag"):
        api.sage_attention(q, k, v, fake_flag="yes")


def test_the_typed_options_object_and_the_docs_come_from_the_declarations():
    """OpSpec.typed: a frozen dataclass with one field per option (defaults and Option.doc from the declaration); the
    public docstrings list every option with its doc; sage_co/__init__.pyi (IDEs) is what tools/gen_stubs.py makes."""
    import dataclasses

    import gen_stubs
    from sage_co import api
    spec = callspec.SAGE_ATTENTION
    opts = spec.typed(spec.bind({"is_causal": True}))
    assert type(opts).__name__ == "SageAttentionOptions" and opts.is_causal is True and opts.layout == "NHD"
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.is_causal = False
    fields = dataclasses.fields(opts)
    assert [f.name for f in fields] == list(spec.option_names)
    assert all(f.metadata["doc"] == spec.option(f.name).doc for f in fields)
    for o in spec.options:
        assert f"    {o.name}={o.default!r}" in api.sage_attention.__doc__ and o.doc in api.sage_attention.__doc__
    assert (ROOT / "sage_co" / "__init__.pyi").read_text() == gen_stubs.stub(), "run python tools/gen_stubs.py"
