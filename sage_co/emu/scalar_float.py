"""gfx12 scalar floating point: SALU f32/f16 arithmetic, conversions, rounding and compares (SOP1/SOP2/SOPC), and
the VOP3 scalar transcendentals v_s_exp/log/rcp/rsq/sqrt_f32/_f16 (an SGPR destination, issued by the VALU).

The ISA states that these produce the same results as their VALU counterparts and follow MODE.round / MODE.denorm
(docs/rdna4.md §Scalar float), so every f32 result comes from the functions the VALU uses (numerics.py, valu_ops.T)
and the denormal mode is applied exactly where the VALU applies it:
  * f32 arithmetic / rounding / min / max: flush denormal inputs and results per FLOAT_DENORM_MODE_32 (the
    executor's `Program.denorm32`); conversions, compares and pk_rtz do not flush (as their VALU forms here);
    the f32 transcendentals always flush (numerics.py §TRANS);
  * f16 ops (no VALU form in this emulator for most of them) flush per FLOAT_DENORM_MODE_16_64 the same way;
    the llvm-mc / HIP default for that mode is 3 (keep), under which nothing is flushed.
Only round-to-nearest-even is emulated (the executor refuses other round modes at load time).

Scalar f16 ops read bits [15:0] of their sources (s_cvt_hi_f32_f16: bits [31:16]) and write the f16 result to
bits [15:0] with bits [31:16] zeroed (docs/rdna4.md §Scalar float). An inline float
constant of an f16 operand is its f16 bit pattern, a literal's low 16 bits are the f16 value.

Exactness: f32 ops bit-exact as in numerics.py. f16 add/sub/mul/fma are computed in float64 from the exact f16
values and rounded once (products are exact; an fma sum is exact in f64 whenever the result is finite in f16, see
_fma_f16). f16 transcendentals are evaluated in float64 and rounded once to f16 (correctly rounded for rcp/sqrt;
exp2/log2/rsq except at f64-near-ties) -- like the f32 TRANS ops, hardware is an approximation that may differ.

Hook: executor.BUILDERS tries `build` first for SOP1/SOP2/SOPC/VOP3 (it returns None for other names).
"""
from __future__ import annotations

import numpy as np

from sage_co.emu import numerics as nm
from sage_co.emu import valu_ops
from sage_co.emu.state import ALL, LITERAL, MODE_FP16_OVFL, EmuError, F, const_bits

U16, U32, I32 = np.uint16, np.uint32, np.int32
F16, F32, F64 = np.float16, np.float32, np.float64
H_SIGN, H_ABS, H_EXP = U32(0x8000), U32(0x7FFF), U32(0x7C00)          # f16 sign / magnitude / exponent bits
S_SIGN, S_ABS, S_EXP = U32(0x80000000), U32(0x7FFFFFFF), U32(0x7F800000)   # f32 sign / magnitude / exponent
LOW16 = U32(0xFFFF)


# ---------------------------------------------------------------------------------------------- bit helpers
def _f32(bits):
    return np.asarray(bits, dtype=U32).view(F32)


def _b32(x):
    return np.asarray(x, dtype=F32).view(U32)


def _h(bits):
    """Low 16 bits of uint32 registers -> float16 values."""
    return (np.asarray(bits, dtype=U32) & LOW16).astype(U16).view(F16)


def _hb(x):
    """float16 values -> uint32 registers with bits [31:16] zero (the scalar-f16 destination rule)."""
    return np.asarray(x, dtype=F16).view(U16).astype(U32)


def flush_f16(bits):
    """f16 denormal (exponent 0) -> zero of the same sign, on uint32 register bits (low half)."""
    bits = np.asarray(bits, dtype=U32) & LOW16
    return np.where((bits & H_EXP) == 0, bits & H_SIGN, bits)


def _flush16_in(bits, mode):
    return flush_f16(bits) if mode in (nm.DENORM_FLUSH_IN_OUT, nm.DENORM_FLUSH_IN) else np.asarray(bits, dtype=U32)


def _flush16_out(bits, mode):
    return flush_f16(bits) if mode in (nm.DENORM_FLUSH_IN_OUT, nm.DENORM_FLUSH_OUT) else bits


def _to_f16(x64):
    """float64 -> f16 bits in uint32, one RNE rounding (numpy converts double -> half directly)."""
    return _hb(np.asarray(x64, dtype=F64).astype(F16))


# ---------------------------------------------------------------------------------------------- f16 arithmetic
def _fma_f16(a, b, c):
    """fma on f16 values, one rounding: a*b is exact in f64 (22 bits); a*b + c is exact in f64 unless the operands
    are more than 53 - 22 bits apart, which needs |a*b| > 2^29 (c's last bit is >= 2^-24) -- then the result is
    past f16's range either way -- so the f64 sum cast to f16 is the correctly rounded fma."""
    return (a.astype(F64) * b.astype(F64)) + c.astype(F64)


def _trans16(fn):
    """f16 transcendental: float64 evaluation of the exact f16 input, one rounding to f16."""
    def f(x):
        with np.errstate(all="ignore"):
            return fn(x.astype(F64))
    return f


TRANS16 = {"exp": _trans16(np.exp2), "log": _trans16(np.log2), "rcp": _trans16(lambda v: 1.0 / v),
           "rsq": _trans16(lambda v: 1.0 / np.sqrt(v)), "sqrt": _trans16(np.sqrt)}
TRANS32 = {"exp": nm.exp2_f32, "log": nm.log2_f32, "rcp": nm.rcp_f32, "rsq": nm.rsq_f32, "sqrt": nm.sqrt_f32}

ROUND = {"ceil": np.ceil, "floor": np.floor, "trunc": np.trunc, "rndne": np.rint}
CMP = {"lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
       "lg": lambda a, b: (a < b) | (a > b), "o": lambda a, b: ~np.isnan(a) & ~np.isnan(b),
       "u": lambda a, b: np.isnan(a) | np.isnan(b), "nge": lambda a, b: ~(a >= b),
       "nlg": lambda a, b: ~((a < b) | (a > b)), "ngt": lambda a, b: ~(a > b), "nle": lambda a, b: ~(a <= b),
       "neq": lambda a, b: ~(a == b), "nlt": lambda a, b: ~(a < b)}


def _vec(name):
    """The VALU implementation (valu_ops.T) of an f32 op: its fn on float32 arrays (one source of truth)."""
    return valu_ops.T[name][2]


# ---------------------------------------------------------------------------------------------- op table
# name -> (kind, sources, spec). kind: 'f32' (flush per denorm32), 'f16' (flush per denorm16), 'raw' (no flush);
# sources: operand type per source ('f' f32 bits, 'h' f16 in the low half, 'H' f16 in the high half, 'b' 32-bit).
OPS: dict = {}


def _op(name, kind, srcs, fn):
    OPS[name] = (kind, srcs, fn)


for _n in ("add", "sub", "mul"):
    _op(f"s_{_n}_f32", "f32", "ff", _vec(f"v_{_n}_f32"))
    _op(f"s_{_n}_f16", "f16", "hh", {"add": lambda a, b: a.astype(F64) + b.astype(F64),
                                     "sub": lambda a, b: a.astype(F64) - b.astype(F64),
                                     "mul": lambda a, b: a.astype(F64) * b.astype(F64)}[_n])
for _form in ("fmac", "fmaak", "fmamk"):
    _op(f"s_{_form}_f32", "f32", "fff", nm.fma_f32)
_op("s_fmac_f16", "f16", "hhh", _fma_f16)
for _n, _g, _num in (("min_num", False, True), ("max_num", True, True), ("minimum", False, False),
                     ("maximum", True, False)):
    _op(f"s_{_n}_f32", "f32bits", "ff", lambda a, b, g=_g, n=_num: nm.minmax_bits(a, b, greater=g, num=n,
                                                                                  half=False))
    _op(f"s_{_n}_f16", "f16bits", "hh", lambda a, b, g=_g, n=_num: nm.minmax_bits(a, b, greater=g, num=n,
                                                                                  half=True))
for _n, _fn in ROUND.items():
    _op(f"s_{_n}_f32", "f32", "f", _vec(f"v_{_n}_f32"))
    _op(f"s_{_n}_f16", "f16", "h", lambda a, fn=_fn: fn(a))
_op("s_cvt_f32_i32", "raw", "b", _vec("v_cvt_f32_i32"))
_op("s_cvt_f32_u32", "raw", "b", _vec("v_cvt_f32_u32"))
_op("s_cvt_i32_f32", "raw", "f", _vec("v_cvt_i32_f32"))
_op("s_cvt_u32_f32", "raw", "f", _vec("v_cvt_u32_f32"))
_op("s_cvt_f16_f32", "raw", "f", lambda a: nm.f32_to_f16(a).astype(U32))
_op("s_cvt_f32_f16", "f16in", "h", lambda a: nm.quiet_nan(a.astype(F32)))      # numpy keeps a NaN signalling
_op("s_cvt_hi_f32_f16", "f16in", "H", lambda a: nm.quiet_nan(a.astype(F32)))
_op("s_cvt_pk_rtz_f16_f32", "raw", "ff", _vec("v_cvt_pk_rtz_f16_f32"))
for _c in CMP:
    _op(f"s_cmp_{_c}_f32", "cmp", "ff", CMP[_c])
    _op(f"s_cmp_{_c}_f16", "cmp", "hh", CMP[_c])
for _t in TRANS32:
    _op(f"v_s_{_t}_f32", "trans32", "f", TRANS32[_t])
    _op(f"v_s_{_t}_f16", "trans16", "h", TRANS16[_t])


# ---------------------------------------------------------------------------------------------- operands
def _reader(ops, inst, code, src_kind):
    """Reader sel -> uint32 bits of one source; f16 sources get their f16 inline constant / literal low half."""
    if src_kind in ("h", "H") and code != LITERAL:
        c = const_bits(code, "f16")
        if c is not None:
            val = U32(c & 0xFFFF)
            return lambda sel: val
    r = ops.sread(inst, code)
    if src_kind == "H":
        return lambda sel: np.asarray(r(sel), dtype=U32) >> U32(16)
    if src_kind == "h":
        return lambda sel: np.asarray(r(sel), dtype=U32) & LOW16
    return r


def _vop3_modifiers(inst, half: bool):
    """VOP3 abs/neg on src0 (bit domain) and clamp/omod on the result, as the VALU applies them (valu._post)."""
    ab, ng = F(inst, "abs") & 1, F(inst, "neg") & 1
    clamp, omod = F(inst, "clamp"), F(inst, "omod")
    sign, absm = (H_SIGN, H_ABS) if half else (S_SIGN, S_ABS)

    def pre(bits):
        if ab:
            bits = bits & absm
        if ng:
            bits = bits ^ sign
        return bits
    mul = {0: 1.0, 1: 2.0, 2: 4.0, 3: 0.5}[omod]
    ftype = F16 if half else F32

    def post(v):
        with np.errstate(all="ignore"):
            if mul != 1.0:
                v = (v * ftype(mul)).astype(ftype)
            if clamp:
                v = np.where(np.isnan(v), ftype(0), np.clip(v, ftype(0), ftype(1))).astype(ftype)
        return v
    return pre, (post if (clamp or omod) else None)


def _sources(inst):
    name, enc = inst.name, inst.enc
    if enc == "VOP3":
        return [F(inst, "src0")]
    if enc == "SOP1":
        return [F(inst, "ssrc0")]
    s0, s1 = F(inst, "ssrc0"), F(inst, "ssrc1")
    if name.endswith(("_fmac_f32", "_fmac_f16")):
        return [s0, s1, F(inst, "sdst")]
    if name == "s_fmaak_f32":
        return [s0, s1, LITERAL]
    if name == "s_fmamk_f32":
        return [s0, LITERAL, s1]
    return [s0, s1]


# ---------------------------------------------------------------------------------------------- build
def build(st, ops, inst, pc):
    """Handler for one instruction of the scalar-float group (None if the name is not in OPS)."""
    spec = OPS.get(inst.name)
    if spec is None:
        return None
    kind, srcs, fn = spec
    readers = [_reader(ops, inst, c, k) for c, k in zip(_sources(inst), srcs)]
    m32, m16 = st.prog.denorm32, st.prog.denorm16
    half_in = srcs[0] in ("h", "H")

    def args(sel):
        return [np.atleast_1d(np.asarray(r(sel), dtype=U32)) for r in readers]

    if kind == "cmp":
        SCC = st.SCC
        view = _h if half_in else _f32

        def h(sel):
            with np.errstate(invalid="ignore"):
                SCC[sel] = fn(*[view(x) for x in args(sel)])
        return h

    wr = ops.swrite(F(inst, "vdst") if inst.enc == "VOP3" else F(inst, "sdst"))
    if kind == "f32":
        def compute(xs):
            xs = [nm.flush_in(_f32(x), m32) for x in xs]
            return _b32(nm.flush_out(np.asarray(fn(*xs), dtype=F32), m32))
    elif kind == "f32bits":
        def compute(xs):
            return _b32(nm.flush_out(_f32(fn(*[_b32(nm.flush_in(_f32(x), m32)) for x in xs])), m32))
    elif kind == "f16":
        def compute(xs):
            xs = [_h(_flush16_in(x, m16)) for x in xs]
            return _flush16_out(_to_f16(fn(*xs)), m16)
    elif kind == "f16bits":
        def compute(xs):
            return _flush16_out(fn(*[_flush16_in(x, m16) for x in xs]), m16)
    elif kind == "f16in":
        def compute(xs):
            return _b32(fn(_h(_flush16_in(xs[0], m16))))
    elif kind == "raw":
        def compute(xs):
            out = fn(*[x if s == "b" else _f32(x) for x, s in zip(xs, srcs)])
            return np.asarray(out).view(U32) if np.asarray(out).dtype in (F32, I32) else np.asarray(out, U32)
    else:                                                    # VOP3 v_s_* transcendentals
        if F(inst, "opsel"):
            raise EmuError(f"{inst.name} with op_sel bits {F(inst, 'opsel'):#x}: LLVM rejects op_sel on v_s_* and the "
                           f"hardware meaning is undocumented")
        pre, post = _vop3_modifiers(inst, kind == "trans16")
        if kind == "trans32":
            def compute(xs):
                v = fn(_f32(pre(xs[0])))
                return _b32(post(v) if post else v)
        else:
            def compute(xs):
                v = np.asarray(fn(_h(_flush16_in(pre(xs[0]), m16))), dtype=F64).astype(F16)
                return _flush16_out(_hb(post(v) if post else v), m16)

    if st.prog.fp16_ovfl_possible and inst.name in F16_RESULT:
        return _fp16_ovfl(st, srcs, compute, args, wr)

    def h(sel):
        with np.errstate(all="ignore"):
            wr(sel, compute(args(sel)))
    return h


# results that can overflow f16 from finite sources (min/max and rounding cannot; RTZ conversions land on the max)
F16_RESULT = frozenset({"s_add_f16", "s_sub_f16", "s_mul_f16", "s_fmac_f16", "s_cvt_f16_f32",
                        "v_s_exp_f16", "v_s_log_f16", "v_s_rcp_f16", "v_s_rsq_f16", "v_s_sqrt_f16"})


def _fp16_ovfl(st, srcs, compute, args, wr):
    """MODE.FP16_OVFL (docs/rdna4.md §FP16_OVFL), read per step: an infinite f16 result of finite sources (bits of
    their kind: f32, f16 low/high half, integer) becomes the largest finite f16 with its sign."""
    mode, bit = st.mode, U32(MODE_FP16_OVFL)
    max16 = U32(0x7BFF)

    def finite(x, kind):
        if kind == "f":
            return (x & S_EXP) != S_EXP
        if kind in ("h", "H"):
            return (x & H_EXP) != H_EXP
        return np.ones(x.shape, bool)

    def h(sel):
        with np.errstate(all="ignore"):
            xs = args(sel)
            out = np.asarray(compute(xs), dtype=U32)
            on = ((mode if sel is ALL else mode[sel]) & bit) != 0
            if on.any():
                hit = on & ((out & H_ABS) == H_EXP)
                for x, kind in zip(xs, srcs):
                    hit &= finite(x, kind)           # an 'H' source is already shifted down by its reader
                out = np.where(hit, (out & H_SIGN) | max16, out)
            wr(sel, out)
    return h
