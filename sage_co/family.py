"""The shipped kernel family, declared once: which symbols each code object provides, for which (op, kernel, key
columns), and the extern "C" wrappers a .hip source instantiates for them.

Each kind of kernel is a dataclass (one instance = one symbol; its name, manifest key columns and HIP template
instance are derived from its fields), and each family is the product of the axes sage_co/abi.py declares
(ATTENTION_HIP_HEAD_DIMS, ATTENTION_ASM_HEAD_DIMS, PV16_HEAD_DIMS, PREPARE_HEAD_DIMS, OUT_DTYPES, PV_DTYPES,
PREPARE_IN_DTYPES, PREPARE_ROPE_DIMS, PREDICT_IN_DTYPES). From this module come:

  * the manifest rows (`provides` of hsaco/manifest.json) of every code object named in CODE_OBJECTS:
    build_asm.py derives them (asm_src/kernels.toml lists only the code object's name, source and arch);
  * the extern "C" wrappers of the HIP code objects: build_asm.py writes asm_src/generated/<source>_kernels.h,
    one `SAGE_KERNEL(symbol, template, args...)` line per symbol with a template instance (guarded by the code
    object's compile_defines when one source builds several), which the .hip source includes after its templates
    and expands with its own SAGE_KERNEL macro (the parameter list comes from asm_src/generated/sage_abi.h);
  * the asm generator's FAMILY (asm_src/sage_attention_asm/config.py: one Config per ATTENTION_ASM variant);
  * what `build_asm.py` (build and --check) verifies in both directions: the built code object holds exactly the
    declared symbols (none missing, none extra) and each .hip wrapper calls the declared template instance (e.g.
    `attention<128, 0, true>`).

Adding a variant: extend an axis in sage_co/abi.py (or the product below) and rebuild (`python build_asm.py`): the
wrapper is generated; the template must accept the new arguments. Adding a code object: one CodeObjectFamily in
CODE_OBJECTS plus its [[code_object]] line (name, source, arch) in asm_src/kernels.toml, or, for a one-off kernel,
[[code_object.provides]] rows written in kernels.toml itself (then it is not named here).
Torch-free (build_asm.py and the generator import it without torch).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from . import abi

ARCH = "gfx1201"
ATTENTION_KERNELS = ("hip", "asm")    # the `kernel` column of sage_attention_fwd: HIP source, asm generator
# The `schedule` column of sage_attention_fwd (docs/numerics.md §Attention arithmetic model, docs/performance.md
# §Schedules): how a kernel spreads the softmax's exp2s over the execution units, each schedule a symbol of its own
# in both kernels (asm and HIP, bitwise equal per schedule). The default first: the model's best under today's
# parameters (tools/perf_model.py): "trans", every exp2 a v_exp_f32 on the TRANS unit; "exp2_valu", the TRANS-rate
# hedge: the scores of the keys abi.EXP2_VALU_KEYS names take a polynomial exp2 on the VALU (abi.EXP2_VALU_*).
ATTENTION_SCHEDULES = ("trans", "exp2_valu")
DEFAULT_SCHEDULE = ATTENTION_SCHEDULES[0]
# The attention source's schedule selectors (SCHED_TRANS ...), its fourth template argument.
HIP_SCHEDULE = {s: i for i, s in enumerate(ATTENTION_SCHEDULES)}
# The HIP sources' compile-time dtype selectors (BF16, FP16, FP32 in asm_src/generated/sage_abi.h), the first
# template argument of the prepare and predict bodies.
HIP_IN_DTYPE = {"bf16": 0, "fp16": 1, "fp32": 2}
# The attention source's output-type selectors (OUT_BF16 ...), its second template argument.
HIP_OUT_DTYPE = {"bf16": 0, "fp16": 1, "fp32": 2}
# The prepare source's rounding selectors (ROUND_PER_OP, ROUND_ONCE), its last template argument.
HIP_ROUNDING = {"per_op": 0, "once": 1}
# name -> value of every selector above, as the generated header defines them
HIP_SELECTORS = {**{t.upper(): v for t, v in HIP_IN_DTYPE.items()},
                 **{f"OUT_{t.upper()}": v for t, v in HIP_OUT_DTYPE.items()},
                 **{f"ROUND_{r.upper()}": v for r, v in HIP_ROUNDING.items()},
                 **{f"SCHED_{sc.upper()}": v for sc, v in HIP_SCHEDULE.items()}}


def _hip_bool(flag: bool) -> str:
    return "true" if flag else "false"


@dataclass(frozen=True)
class Symbol:
    """One symbol: the manifest row (op, kernel, key columns, symbol) and, for a HIP wrapper, the template instance
    its body calls (None: the kernel is written out, not instantiated)."""
    op: str
    kernel: str
    symbol: str
    keys: tuple[tuple[str, object], ...] = ()
    hip_instance: str | None = None

    def row(self) -> dict:
        """The provides row of hsaco/manifest.json (the column order of the hand-written kernels.toml rows)."""
        return {"op": self.op, "kernel": self.kernel, **dict(self.keys), "symbol": self.symbol}


@dataclass(frozen=True)
class AttentionVariant:
    """sage_attention_fwd: padded head dim (D_pad), output dtype, P.V WMMA input type, exp2 schedule
    (ATTENTION_SCHEDULES; the default keeps the unsuffixed symbol names); `kernel` the implementation
    ("hip": asm_src/gfx1201_sage_attention.hip, "asm": the generator asm_src/gen_sage_attention_asm.py)."""
    kernel: str
    head_dim: int
    out_dtype: str
    pv_dtype: str
    schedule: str = DEFAULT_SCHEDULE
    op: ClassVar[str] = abi.ATTENTION_OP

    def __post_init__(self):
        if self.kernel not in ATTENTION_KERNELS or self.head_dim not in abi.HEAD_DIMS_NATIVE or \
                self.out_dtype not in abi.OUT_DTYPES or self.pv_dtype not in abi.PV_DTYPES or \
                self.schedule not in ATTENTION_SCHEDULES:
            raise ValueError(f"AttentionVariant{(self.kernel, self.head_dim, self.out_dtype, self.pv_dtype, self.schedule)}"
                             f": kernel must be one of {ATTENTION_KERNELS}, head_dim one of {abi.HEAD_DIMS_NATIVE}, "
                             f"out_dtype one of {abi.OUT_DTYPES}, pv_dtype one of {abi.PV_DTYPES}, schedule one of "
                             f"{ATTENTION_SCHEDULES}")

    @property
    def tag(self) -> str:
        return (f"d{self.head_dim}_{self.out_dtype}" + ("_pv16" if self.pv_dtype == "fp16" else "")
                + ("" if self.schedule == DEFAULT_SCHEDULE else f"_{self.schedule}"))

    @property
    def symbol(self) -> str:
        return f"{ARCH}_sage_attention_fwd_" + ("asm_" if self.kernel == "asm" else "") + self.tag

    def symbol_row(self) -> Symbol:
        instance = None
        if self.kernel == "hip":   # template <int DP, int OT, bool PV16, int SCHED> attention(...)
            instance = (f"attention<{self.head_dim}, {HIP_OUT_DTYPE[self.out_dtype]}, "
                        f"{_hip_bool(self.pv_dtype == 'fp16')}, {HIP_SCHEDULE[self.schedule]}>")
        return Symbol(self.op, self.kernel, self.symbol,
                      (("head_dim", self.head_dim), ("out_dtype", self.out_dtype), ("pv_dtype", self.pv_dtype),
                       ("schedule", self.schedule)), instance)


@dataclass(frozen=True)
class PrepareVariant:
    """sage_prepare (one launch: statistics, their fold, the quantization of Q, K, V): padded head dim, input dtype,
    RoPE width (0 = none, <= head_dim) and the norm/RoPE rounding convention (abi.PREPARE_ROUNDINGS; "per_op" keeps
    the unsuffixed symbol names)."""
    head_dim: int
    in_dtype: str
    rope_dim: int
    rounding: str = "per_op"

    def __post_init__(self):
        if self.head_dim not in abi.HEAD_DIMS_NATIVE or self.in_dtype not in abi.PREPARE_IN_DTYPES or \
                self.rope_dim not in rope_dims(self.head_dim) or self.rounding not in abi.PREPARE_ROUNDINGS:
            raise ValueError(f"PrepareVariant{(self.head_dim, self.in_dtype, self.rope_dim, self.rounding)}: "
                             f"head_dim must be one of {abi.HEAD_DIMS_NATIVE}, in_dtype one of "
                             f"{abi.PREPARE_IN_DTYPES}, rope_dim one of {rope_dims(self.head_dim)}, rounding one "
                             f"of {abi.PREPARE_ROUNDINGS}")

    @property
    def rope_in_symbol(self) -> bool:
        """One symbol per RoPE width (abi.PREPARE_ROPE_IN_SYMBOL); else one symbol serves every width."""
        return (self.in_dtype, self.head_dim) in abi.PREPARE_ROPE_IN_SYMBOL

    @property
    def symbol(self) -> str:
        rope = f"_rope{self.rope_dim}" if self.rope_in_symbol and self.rope_dim else ""
        return (f"{ARCH}_sage_prepare_d{self.head_dim}_{self.in_dtype}{rope}"
                + ("_once" if self.rounding == "once" else ""))

    def symbol_row(self) -> Symbol:
        # template <int DT, int DP, int RM> prepare_body (the width a kernarg) or <DT, DP, RD, RM> prepare_rd;
        # a symbol serving every width has a row per width (the manifest is looked up by rope_dim)
        dt, rm = HIP_IN_DTYPE[self.in_dtype], HIP_ROUNDING[self.rounding]
        instance = (f"prepare_rd<{dt}, {self.head_dim}, {self.rope_dim}, {rm}>" if self.rope_in_symbol
                    else f"prepare_body<{dt}, {self.head_dim}, {rm}>")
        return Symbol(abi.PREPARE_OP, "hip", self.symbol,
                      (("head_dim", self.head_dim), ("in_dtype", self.in_dtype), ("rope_dim", self.rope_dim),
                       ("rounding", self.rounding)), instance)


@dataclass(frozen=True)
class PredictPoolVariant:
    """sage_predict.pool: one symbol per input dtype."""
    in_dtype: str

    def symbol_row(self) -> Symbol:   # template <int DT> pool_body(...)
        return Symbol(abi.PREDICT_POOL_OP, "hip", f"{ARCH}_sage_predict_pool_{self.in_dtype}",
                      (("in_dtype", self.in_dtype),), f"pool_body<{HIP_IN_DTYPE[self.in_dtype]}>")


def rope_dims(head_dim: int) -> tuple[int, ...]:
    """The RoPE widths the prepare kernels are built for at padded head dim `head_dim` (0 = no RoPE)."""
    return tuple(r for r in abi.PREPARE_ROPE_DIMS if r <= head_dim)


@dataclass(frozen=True)
class CodeObjectFamily:
    """What one code object provides (in this order: the manifest rows keep it; its generated wrappers too)."""
    kernels: tuple[Symbol, ...]
    # passed to clang as -DNAME=VALUE: which part of a shared .hip source this code object instantiates (one
    # source, several code objects, so build_asm.py compiles them in parallel); the generated wrappers of each
    # code object are guarded by them
    compile_defines: dict[str, int] = field(default_factory=dict)

    @property
    def wrappers(self) -> tuple[Symbol, ...]:
        """The symbols whose extern "C" wrapper is generated (one per symbol with a template instance, first row)."""
        seen = {}
        for k in self.kernels:
            if k.hip_instance is not None:
                seen.setdefault(k.symbol, k)
        return tuple(seen.values())

    @property
    def symbols(self) -> tuple[str, ...]:
        """The distinct symbols, in row order (several rows may name one symbol: a prepare kernel serving every
        RoPE width has a row per width)."""
        return tuple(dict.fromkeys(k.symbol for k in self.kernels))


# ---------------------------------------------------------------------------------------------- the product
# Attention: the order of the symbols in both code objects (pv_dtype, then head dim descending, then out_dtype;
# each implementation at its own head dims, sage_co/abi.py ATTENTION_*_HEAD_DIMS).
# Then the schedules: the default schedule's symbols first (in the order above), each other schedule's after them,
# built where schedule_built says.
def schedule_built(schedule: str, head_dim: int, pv_dtype: str) -> bool:
    """Whether a schedule has a symbol at (head_dim, pv_dtype): the default everywhere, "exp2_valu" for pv_dtype
    fp8 (every head dim and output dtype; the fp16 P.V path keeps the default only)."""
    return schedule == DEFAULT_SCHEDULE or pv_dtype == "fp8"


def attention_variants(head_dims) -> tuple[tuple[int, str, str, str], ...]:
    """(head_dim, out_dtype, pv_dtype, schedule) of one implementation built for `head_dims` (pv_dtype fp16 only at
    abi.PV16_HEAD_DIMS; a schedule where schedule_built)."""
    return tuple((d, t, pv, sc) for sc in ATTENTION_SCHEDULES for pv in abi.PV_DTYPES for d in reversed(head_dims)
                 for t in abi.OUT_DTYPES
                 if (pv != "fp16" or d in abi.PV16_HEAD_DIMS) and schedule_built(sc, d, pv))


ATTENTION_HIP = tuple(AttentionVariant("hip", *v) for v in attention_variants(abi.ATTENTION_HIP_HEAD_DIMS))
# the generator's FAMILY
ATTENTION_ASM = tuple(AttentionVariant("asm", *v) for v in attention_variants(abi.ATTENTION_ASM_HEAD_DIMS))
# prepare: D_pad descending, then input dtype, rounding per_op before once, RoPE width (the wrappers' order)
PREPARE = tuple(PrepareVariant(d, t, r, rm) for d in reversed(abi.PREPARE_HEAD_DIMS) for t in abi.PREPARE_IN_DTYPES
                for rm in sorted(abi.PREPARE_ROUNDINGS, key=HIP_ROUNDING.get) for r in rope_dims(d))
PREDICT_POOL = tuple(PredictPoolVariant(t) for t in abi.PREDICT_IN_DTYPES)


def prepare_parts() -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    """(D_pad, name suffix, input dtypes) of each prepare code object, largest D_pad first: every dtype in one object,
    except that the dtypes with a symbol per RoPE width (abi.PREPARE_ROPE_IN_SYMBOL: 5x the kernels) get their own
    object (suffix _<dtype>_rope), the longest compiles, which would otherwise bound build_asm.py --check on 2 cores."""
    parts = []
    for d in reversed(abi.PREPARE_HEAD_DIMS):
        alone = tuple(t for t in abi.PREPARE_IN_DTYPES if (t, d) in abi.PREPARE_ROPE_IN_SYMBOL)
        parts += [(d, f"_{t}_rope", (t,)) for t in alone]
        parts.append((d, "", tuple(t for t in abi.PREPARE_IN_DTYPES if t not in alone)))
    return tuple(parts)


# code object name (asm_src/kernels.toml `name`) -> what it provides
CODE_OBJECTS: dict[str, CodeObjectFamily] = {
    f"{ARCH}_sage_attention_hip": CodeObjectFamily(tuple(v.symbol_row() for v in ATTENTION_HIP)),
    # prepare: one source, a code object per (D_pad, input dtypes) part so that clang builds them side by side
    **{f"{ARCH}_sage_prepare_d{d}{suffix}": CodeObjectFamily(
        tuple(v.symbol_row() for v in PREPARE if v.head_dim == d and v.in_dtype in dtypes),
        {"PREPARE_D_PAD": d, "PREPARE_DTYPES": sum(1 << HIP_IN_DTYPE[t] for t in dtypes)})
       for d, suffix, dtypes in prepare_parts()},
    f"{ARCH}_sage_attention_asm": CodeObjectFamily(tuple(v.symbol_row() for v in ATTENTION_ASM)),
    f"{ARCH}_sage_predict": CodeObjectFamily(
        tuple(v.symbol_row() for v in PREDICT_POOL) + (Symbol(abi.PREDICT_SELECT_OP, "hip", f"{ARCH}_sage_predict_select"),)),
}
