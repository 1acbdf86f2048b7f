"""One typed declaration per option of the public ops; everything else is derived from it.

Each option is declared once (`Option`: name, schema type, default, schema encoding, per-value validator,
SageAttention aliases) and each public op lists its options in schema order (`OpSpec`). From an OpSpec come:

    spec.schema()            the torch.library schema of the custom op (sage_co/api.py registers it)
    spec.bind(kwargs)        the Python function's keyword options with their defaults (an unknown name is a
                             TypeError naming it, as Python's own)
    spec.to_schema(values)   the custom op's positional arguments; spec.from_schema(args) the inverse (fake and
                             real implementations)
    spec.signature()         the public function's inspect.Signature
    spec.alias_names         SageAttention's spellings -> option names (sage_co/compat.py's keyword table)
    spec.passthrough(...)    the options another entry point forwards (varlen, parallel, integrations)
    spec.typed(values)       the call's options as the op's frozen dataclass (spec.Options), what plan_call hands
                             the recipes (sage_co/ops/*: attributes, never string keys)
    spec.options_doc()       the options with their Option.doc, appended to the public docstrings

So adding an option to `SAGE_ATTENTION` is one line here: the schema, the fake, the compat keyword table and the
parallel pass-through picks it up (tests/api/test_options_declared_once.py shows it with a made-up option; varlen takes
only the
options its packed kernels implement, sage_co.varlen.VARLEN_OPTIONS, and refuses a new one by name). What the option
*does* is the kernels' business: a runtime-flag option also takes its bit in sage_co/abi.py FLAG_OPTIONS, which the
dense, prepared and varlen attention recipes all read (tests/api/test_options_declared_once.py shows a made-up one reaching the
kernarg `flags`); tools/gen_stubs.py regenerates sage_co/__init__.pyi, the typed signatures IDEs read.

Validators take the value and return it normalised, raising TypeError/ValueError whose message starts with the
option's name (sage_co.validate's convention; compat renames the prefix when the caller used an alias). Options
whose check needs the call's shapes (softmax_scale, rope_dim, the norm weights, cos/sin, block_mask, attn_mask) have no
per-value validator: sage_co.plan.plan_call checks them with the shapes.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field, make_dataclass, replace
from typing import Any, Callable

from . import validate

REQUIRED = inspect.Parameter.empty   # no default: a positional input of the schema


def _same(x):
    return x


def _none_as(empty):
    """Encoding of an optional scalar as a schema value: None <-> `empty` ("" for strings, 0 for ints)."""
    return (lambda x: empty if x is None else x), (lambda x: None if x == empty else x)


def _flag(name: str) -> Callable:
    return lambda value: validate.check_flag(name, value)


def _check_backend(value):
    validate.check_backend(value)
    return value


def _check_kernel(value):
    validate.check_kernel(value)
    return value


def _check_sparsity(value):
    if value not in (None, "auto"):
        raise ValueError(f"sparsity: expected None or \"auto\", got {value!r}")
    return value


def _check_cdf(value):
    if value is None:   # the predictor's default (sage_co.sparse.DEFAULT_CDF_THRESHOLD); only with sparsity="auto"
        return value
    if isinstance(value, bool) or not (isinstance(value, (int, float)) and 0.0 < value <= 1.0):
        raise ValueError(f"cdf_threshold: expected a number in (0, 1], got {value!r}")
    return value


@dataclass(frozen=True)
class Option:
    """One argument of a public op. `type` is its torch.library schema type; `default` the Python default (REQUIRED
    for inputs); `check` the per-value validator (None: checked by plan_call with the call's shapes); `encode` /
    `decode` map the Python value to the schema value and back (None -> "" for backend, ...); `aliases` are the
    spellings SageAttention / flash-attention callers use (sage_co.compat accepts them); `schema=False` marks an
    option the Python function resolves before the custom op (sparsity)."""
    name: str
    type: str
    default: Any = REQUIRED
    check: Callable | None = None
    encode: Callable = _same
    decode: Callable = _same
    aliases: tuple[str, ...] = ()
    schema: bool = True
    schema_required: bool = False   # in the schema without a default (the first-published options, see below)
    doc: str = ""

    def schema_default(self) -> str:
        if self.default is REQUIRED or self.schema_required:
            return ""
        value = self.encode(self.default)
        text = "None" if value is None else repr(value) if isinstance(value, str) else str(value)
        return "=" + text.replace("'", '"')


_str_or_none, _str_or_none_back = _none_as("")
# Schema defaults: the options the ops were first published with stay required in their schemas (positional
# callers; and inductor passes defaulted arguments as keywords to FallbackKernel.create(kernel, ...), where an
# argument named `kernel` collides); options added later get their defaults.
_FIRST_PUBLISHED = frozenset({"softmax_scale", "layout", "smooth_k", "q_norm_weight", "k_norm_weight", "eps", "cos",
                              "sin", "rope_dim", "return_lse", "backend", "kernel"})
_int_or_none, _int_or_none_back = _none_as(0)

# ------------------------------------------------------------------------------------------- the options (once)
OPTIONS = {o.name: (replace(o, schema_required=True) if o.name in _FIRST_PUBLISHED else o) for o in (
    Option("softmax_scale", "float", None, aliases=("sm_scale", "scale"),
           doc="None = 1/sqrt(D); checked with the head dim (validate.check_softmax_scale)"),
    Option("layout", "str", "NHD", lambda v: validate.check_layout(v), aliases=("tensor_layout",),
           doc="'NHD' = [B, S, H, D], 'HND' = [B, H, S, D]"),
    Option("smooth_k", "bool", False, _flag("smooth_k"), doc="subtract K's per-channel mean (exact in softmax)"),
    Option("q_norm_weight", "Tensor?", None, doc="fused RMSNorm weight of Q [D]"),
    Option("k_norm_weight", "Tensor?", None, doc="fused RMSNorm weight of K [D]"),
    Option("eps", "float", 1e-6, lambda v: validate.check_eps(v), encode=float, doc="RMSNorm epsilon"),
    Option("cos", "Tensor?", None, doc="RoPE cos [max(S_q, S_kv), rope_dim]"),
    Option("sin", "Tensor?", None, doc="RoPE sin, like cos"),
    Option("rope_dim", "int", None, encode=_int_or_none, decode=_int_or_none_back,
           doc="None (taken from cos) or 32/64/96/128; 0 in the schema"),
    Option("return_lse", "bool", False, _flag("return_lse"), doc="also return lse fp32 [B, H_q, S_q]"),
    Option("backend", "str", None, _check_backend, _str_or_none, _str_or_none_back,
           doc="None (by device), 'emu' or 'gpu' ('hip': deprecated spelling of 'gpu'); '' in the schema"),
    Option("kernel", "str", None, _check_kernel, _str_or_none, _str_or_none_back,
           doc="None (the default kernel) or a shipped kernel ('asm', 'hip'); '' in the schema"),
    Option("is_causal", "bool", False, _flag("is_causal"), aliases=("causal",),
           doc="bottom-right aligned causal mask"),
    Option("block_mask", "Tensor?", None, doc="bool [B, H_q, ceil(S_q/64), ceil(S_kv/64)]: key tiles to visit"),
    Option("smooth_v", "bool", False, _flag("smooth_v"), doc="subtract V's per-channel mean before fp8"),
    Option("pv_dtype", "str", "fp8", lambda v: validate.check_pv(v, False), aliases=("value_dtype",),
           doc="'fp8' (fp8 V, the fp8 WMMA) or 'fp16' (fp16 V, the f16 WMMA)"),
    Option("norm_rope_rounding", "str", "once", validate.check_norm_rope_rounding,
           doc="fused RMSNorm + RoPE: 'once' (F.rms_norm, then RoPE in fp32, one rounding: the seed's eager chain) "
               "or 'per_op' (the HF-transformers chain, every op rounded)"),
    Option("attn_mask", "Tensor?", None,
           doc="SDPA's attn_mask: bool (True = attend) or additive float32/bf16/fp16, broadcastable to "
               "[B, H_q, S_q, S_kv]; checked with the shapes (sage_co.masks.check_attn_mask)"),
    Option("schedule", "str", None, validate.check_schedule, _str_or_none, _str_or_none_back,
           doc="None (the default schedule) or one of sage_co.family.ATTENTION_SCHEDULES: how the attention kernel "
               "spreads the softmax's exp2s over the execution units ('trans': all on the TRANS unit); '' in the schema"),
    Option("sparsity", "str", None, _check_sparsity, schema=False,
           doc="None or 'auto' (block_mask predicted by sage_co.predict_block_mask)"),
    Option("cdf_threshold", "float", None, _check_cdf, schema=False,
           doc="only with sparsity='auto': the predictor's CDF (None: sage_co.sparse.DEFAULT_CDF_THRESHOLD)"),
)}


def _input(name: str, type_: str = "Tensor") -> Option:
    return Option(name, type_)


@dataclass(frozen=True)
class OpSpec:
    """A public op: its positional inputs and its options, in schema order, and its return type. The derived
    tables (names, defaults, aliases, schema options) are computed once, when the spec is made."""
    name: str
    inputs: tuple[Option, ...]
    options: tuple[Option, ...]
    returns: str
    positional: tuple[str, ...] = ()   # options the Python function also takes positionally (softmax_scale)
    option_names: tuple[str, ...] = field(init=False, compare=False)
    schema_options: tuple[Option, ...] = field(init=False, compare=False)
    defaults: dict = field(init=False, compare=False, repr=False)
    alias_names: dict = field(init=False, compare=False, repr=False)
    Options: type = field(init=False, compare=False, repr=False)   # the typed options object (typed())

    def __post_init__(self):
        names = tuple(o.name for o in self.options)
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: an option is declared twice in {names}")
        set_ = object.__setattr__   # frozen: the derived tables are set once, here
        set_(self, "option_names", names)
        set_(self, "schema_options", tuple(o for o in self.options if o.schema))
        set_(self, "defaults", {o.name: o.default for o in self.options})
        set_(self, "alias_names", {**{n: n for n in names}, **{a: o.name for o in self.options for a in o.aliases}})
        set_(self, "Options", _options_type(self))

    def option(self, name: str) -> Option:
        return self.options[self.option_names.index(name)]

    def schema(self) -> str:
        params = ", ".join(f"{o.type} {o.name}{o.schema_default()}" for o in (*self.inputs, *self.schema_options))
        return f"({params}) -> {self.returns}"

    def signature(self, keywords=None) -> inspect.Signature:
        """The Python function's signature: the inputs, the positional options, the rest keyword-only
        (`keywords`: only these options, for a function that takes a subset)."""
        P = inspect.Parameter
        params = [P(o.name, P.POSITIONAL_OR_KEYWORD) for o in self.inputs]
        params += [P(o.name, P.POSITIONAL_OR_KEYWORD if o.name in self.positional else P.KEYWORD_ONLY,
                     default=o.default) for o in self.options if keywords is None or o.name in keywords]
        return inspect.Signature(params)

    # ---- per call
    def bind(self, kwargs: dict, fn: str | None = None, allowed=None) -> dict:
        """The keyword options of one call: the defaults updated by `kwargs`; an unknown name (or one outside
        `allowed`) is Python's TypeError (`fn() got an unexpected keyword argument 'x'`). Values are checked by
        plan_call, not here."""
        known = self.defaults.keys() if allowed is None else allowed
        if kwargs.keys() <= known:
            return {**self.defaults, **kwargs}
        unknown = sorted(set(kwargs) - set(known))
        raise TypeError(f"{fn or self.name}() got an unexpected keyword argument {unknown[0]!r}")

    def typed(self, values: dict):
        """The call's options as the op's frozen dataclass (`Options`, one field per option in declaration order):
        what plan_call hands the recipes (sage_co/ops/*), which read attributes, never string keys. `values` holds
        every option of the op (a bind() result; other keys, e.g. another op's defaults, are not taken)."""
        return self.Options(**{n: values[n] for n in self.option_names})

    def options_doc(self, keywords=None) -> str:
        """The options as the public docstrings show them: one line per option (`keywords`: only these) with its
        default and Option.doc."""
        lines = []
        for o in self.options:
            if keywords is not None and o.name not in keywords:
                continue
            alias = f" (also {', '.join(o.aliases)})" if o.aliases else ""
            lines.append(f"    {o.name}={o.default!r}{alias}: {o.doc}")
        return "Options (sage_co.callspec):\n" + "\n".join(lines)

    def check(self, values: dict, skip=()) -> dict:
        """Every per-value validator on `values` (a bind() result), in declaration order."""
        for o in self.options:
            if o.check is not None and o.name not in skip:
                o.check(values[o.name])
        return values

    def to_schema(self, inputs: tuple, values: dict) -> tuple:
        """The custom op's positional arguments: the inputs, then every schema option encoded."""
        return (*inputs, *(o.encode(values[o.name]) for o in self.schema_options))

    def from_schema(self, args: tuple) -> tuple[tuple, dict]:
        """(inputs, option values) from the custom op's arguments (decoded; non-schema options at defaults)."""
        n = len(self.inputs)
        values = dict(self.defaults)
        values.update((o.name, o.decode(a)) for o, a in zip(self.schema_options, args[n:]))
        return tuple(args[:n]), values

    def passthrough(self, exclude=()) -> frozenset[str]:
        """The option names another entry point forwards unchanged (all but `exclude`)."""
        return frozenset(n for n in self.option_names if n not in exclude)

    def with_option(self, option: Option, after: str | None = None) -> "OpSpec":
        """This spec with one more option (appended, or after `after`): how an op grows
        (tests/api/test_options_declared_once.py)."""
        opts = list(self.options)
        at = len(opts) if after is None else self.option_names.index(after) + 1
        opts.insert(at, option)
        return replace(self, options=tuple(opts))


def _options_type(spec: "OpSpec") -> type:
    """The frozen dataclass of an op's options: <Op>Options with one field per option (its default; Option.doc in
    the field's metadata)."""
    name = "".join(part.title() for part in spec.name.split("_")) + "Options"
    cls = make_dataclass(name, [(o.name, Any, field(default=o.default, metadata={"doc": o.doc}))
                                for o in spec.options], frozen=True)
    cls.__module__ = __name__
    cls.__doc__ = f"The options of {spec.name} (sage_co.callspec), one field per option:\n" + \
        "\n".join(f"    {o.name}: {o.doc}" for o in spec.options)
    return cls


def _opts(*names: str) -> tuple[Option, ...]:
    return tuple(OPTIONS[n] for n in names)


_QKV = (_input("q"), _input("k"), _input("v"))
_NORM_ROPE = ("q_norm_weight", "k_norm_weight", "eps", "cos", "sin", "rope_dim")

# The schema order is the order the ops were published in (positional callers, opcheck): options added later
# come last, with their defaults.
SAGE_PREPARE = OpSpec(
    "sage_prepare", _QKV,
    _opts("softmax_scale", "layout", "smooth_k", *_NORM_ROPE, "backend", "smooth_v", "pv_dtype",
          "norm_rope_rounding"),
    "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)", positional=("softmax_scale",))

SAGE_ATTENTION = OpSpec(
    "sage_attention", _QKV,
    _opts("softmax_scale", "layout", "smooth_k", *_NORM_ROPE, "return_lse", "backend", "kernel", "is_causal",
          "block_mask", "smooth_v", "pv_dtype", "norm_rope_rounding", "attn_mask", "sparsity", "cdf_threshold",
          "schedule"),
    "(Tensor, Tensor)", positional=("softmax_scale",))

# The forward on a SagePrepared: its tensors cross the boundary as inputs (v_t as raw bytes, see sage_co/api.py),
# its ints and dtype as schema scalars; the caller's options follow.
PREPARED_FIELDS = (_input("q_int8"), _input("q_scale"), _input("k_int8"), _input("k_scale"), _input("k_mean"),
                   _input("v_bytes"), _input("v_scale"), _input("seq_len_q", "int"), _input("seq_len_kv", "int"),
                   _input("head_dim", "int"), _input("out_dtype", "ScalarType"))
SAGE_ATTENTION_FWD = OpSpec(
    "sage_attention_fwd", PREPARED_FIELDS,
    (*_opts("layout", "return_lse", "backend", "kernel", "is_causal", "block_mask"),
     Option("v_mean", "Tensor?", None, doc="SagePrepared.v_mean (smooth_v); not a keyword of the Python function"),
     Option("pv_dtype", "str", "fp8", doc="how to read v_bytes; taken from the SagePrepared"),
     Option("lse_corr", "Tensor?", None, doc="SagePrepared.lse_corr (smooth_k's LSE term); not a keyword"),
     OPTIONS["attn_mask"], OPTIONS["schedule"]),
    "(Tensor, Tensor)")
FWD_KEYWORDS = frozenset({"layout", "return_lse", "backend", "kernel", "is_causal", "block_mask",
                          "attn_mask", "schedule"})  # its keywords

# What an entry point that splits a call (varlen: per sequence; parallel: per shard) forwards to each
# sage_attention: every option except those it fixes itself (the layout of the pieces is NHD by construction,
# return_lse is its own) and those shaped by the whole call (block_mask, RoPE tables, the predicted mask).
SPLIT_FIXED = ("layout", "return_lse", "block_mask", "sparsity", "cdf_threshold", "cos", "sin", "rope_dim",
               "attn_mask")
