"""The gfx12 scalar floating-point group (sage_co/emu/scalar_float.py) against independent models (sfloat_ref.py).

Two kinds of kernels, one wave per workgroup, every workgroup with its own three input words (specials: signed
zeros, f32/f16 denormals, min normal, max finite, inf, quiet and signalling NaNs, halves and ties, plus random):
  * clang -O3 HIP kernels (tests/emu/sfloat/scalar_float.hip) whose uniform float math LLVM 22 lowers to SALU
    float, SALU compares and the v_s_* transcendentals -- the test asserts which mnemonics they contain;
  * an assembled kernel (llvm-mc) with one instance of every instruction of the group and the forms clang does not
    emit (s_min/max_num, s_fmamk, inline f16 constants and literals, VOP3 abs/neg/clamp/omod), built with both
    denormal modes (3 keep, 0 flush) to check MODE handling.
Bitwise everywhere, with one stated exception: an add/sub/mul/fma/transcendental whose result is NaN is checked to be
a quiet NaN (the ISA does not define which payload propagates); min/max/minimum/maximum, conversions and compares
are bitwise on NaN too. f16 results must have bits [31:16] zero (ISA §6.8). The transcendentals are compared with
the correctly rounded value (emulator model, numerics.py; hardware is an approximation, docs/rdna4.md §Scalar
float) and v_s_*_f32 bit for bit with the VALU v_*_f32 run on the same input.
Both object files must also disassemble exactly as llvm-objdump prints them.
"""
from __future__ import annotations

import functools
import re
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from sage_co.emu import Device, scalar_float
from sage_co.emu.disasm import text_and_symbols

mpmath = pytest.importorskip("mpmath", reason="mpmath (a torch/sympy dependency) gives the exact references")
import sfloat_ref as R  # noqa: E402  (pytest puts tests/emu on sys.path: it has no __init__.py)

from llvm_tools import LLVM as FOUND_LLVM, WHY_NO_LLVM22, objdump_matches  # noqa: E402,F401  (tests/: conftest.py)

LLVM = None if WHY_NO_LLVM22 else FOUND_LLVM.bin_dir     # the bin directory of the discovered LLVM 22
HERE = Path(__file__).parent
pytestmark = pytest.mark.skipif(bool(WHY_NO_LLVM22), reason=WHY_NO_LLVM22)

S32 = [0, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000, 0x3F800000, 0xBF800000, 0x3F000000, 0x3FC00000,
       0xC0200000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00123, 0x7F800001, 0x4F000000,
       0xCF000000, 0x4F800000, 0x3EFFFFFF]
S16 = [0, 0x8000, 0x0001, 0x83FF, 0x0400, 0x3C00, 0xBC00, 0x3800, 0x3E00, 0xC100, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00,
       0x7E00, 0xFE01, 0x7C01, 0x3BFF, 0x5640, 0x0200]


def _inputs():
    rng = np.random.default_rng(18)
    rows = []
    n32, n16 = len(S32), len(S16)
    for i, a in enumerate(S32):
        for j, b in enumerate(S32):
            rows.append((a, b, S32[(3 * i + 5 * j) % n32]))
    for i, a in enumerate(S16):
        for j, b in enumerate(S16):
            hi = [int(S16[(i + j + k) % n16]) << 16 for k in range(3)]
            rows.append((a | hi[0], b | hi[1], S16[(7 * i + 3 * j) % n16] | hi[2]))
    for _ in range(60):       # ordinary finite values (f32 and, in the low halves, f16)
        f = (rng.standard_normal(3) * rng.choice([1e-3, 1.0, 100.0, 3e4])).astype(np.float32)
        h = (rng.standard_normal(3) * rng.choice([1e-3, 1.0, 100.0])).astype(np.float16).view(np.uint16)
        rows.append(tuple(int(x) for x in (f.view(np.uint32) & 0xFFFF0000) | h))
    rows += [tuple(int(x) for x in rng.integers(0, 2 ** 32, 3, dtype=np.uint64)) for _ in range(40)]
    return np.array(rows, dtype=np.uint32)


INPUTS = _inputs()
LO = 0xFFFF


# ---------------------------------------------------------------------------------------------- reference table
def _f16(fn):
    """Apply an f16 model to the low halves of the inputs."""
    return lambda *xs: fn(*[x & LO for x in xs])


def _ref_table(fl32: bool, fl16: bool):
    """name -> fn(a, b, c) -> expected bits | 'qnan'. fl32/fl16: denormal flushing of that mode."""
    t = {}
    f32, f16 = R.F32, R.F16
    for op in ("add", "sub", "mul"):
        t[f"s_{op}_f32"] = lambda a, b, c, op=op: getattr(R, op)(a, b, f32, fl32)
        t[f"s_{op}_f16"] = _f16(lambda a, b, c, op=op: getattr(R, op)(a, b, f16, fl16))
    t["s_fmac_f32"] = lambda a, b, c: R.fma(a, b, c, f32, fl32)
    t["s_fmac_f16"] = _f16(lambda a, b, c: R.fma(a, b, c, f16, fl16))
    for n, g, num in (("min_num", False, True), ("max_num", True, True), ("minimum", False, False),
                      ("maximum", True, False)):
        t[f"s_{n}_f32"] = lambda a, b, c, g=g, num=num: R.minmax(a, b, f32, g, num, fl32)
        t[f"s_{n}_f16"] = _f16(lambda a, b, c, g=g, num=num: R.minmax(a, b, f16, g, num, fl16))
    for m in ("ceil", "floor", "trunc", "rndne"):
        t[f"s_{m}_f32"] = lambda a, b, c, m=m: R.round_int(a, f32, m, fl32)
        t[f"s_{m}_f16"] = _f16(lambda a, b, c, m=m: R.round_int(a, f16, m, fl16))
    t["s_cvt_f32_i32"] = lambda a, b, c: R.cvt_f_i(a, True)
    t["s_cvt_f32_u32"] = lambda a, b, c: R.cvt_f_i(a, False)
    t["s_cvt_i32_f32"] = lambda a, b, c: R.cvt_i_f(a, True)
    t["s_cvt_u32_f32"] = lambda a, b, c: R.cvt_i_f(a, False)
    t["s_cvt_f16_f32"] = lambda a, b, c: R.cvt_f16_f32(a)
    t["s_cvt_f32_f16"] = lambda a, b, c: R.cvt_f32_f16(R.flush(a & LO, f16, fl16))
    t["s_cvt_hi_f32_f16"] = lambda a, b, c: R.cvt_f32_f16(R.flush(a >> 16, f16, fl16))
    t["s_cvt_pk_rtz_f16_f32"] = lambda a, b, c: R.pk_rtz(a) | (R.pk_rtz(b) << 16)
    for cond in scalar_float.CMP:
        t[f"s_cmp_{cond}_f32"] = lambda a, b, c, cond=cond: R.cmp(cond, a, b, f32)
        t[f"s_cmp_{cond}_f16"] = _f16(lambda a, b, c, cond=cond: R.cmp(cond, a, b, f16))
    mm = R.minmax
    t["v_minimum_f32"] = lambda a, b, c: mm(a, b, f32, False, False, fl32)
    t["v_maximum_f32"] = lambda a, b, c: mm(a, b, f32, True, False, fl32)
    t["v_minimum3_f32"] = lambda a, b, c: mm(mm(a, b, f32, False, False, fl32), c, f32, False, False, fl32)
    t["v_maximum3_f32"] = lambda a, b, c: mm(mm(a, b, f32, True, False, fl32), c, f32, True, False, fl32)
    t["v_minimummaximum_f32"] = lambda a, b, c: mm(mm(a, b, f32, False, False, fl32), c, f32, True, False, fl32)
    t["v_maximumminimum_f32"] = lambda a, b, c: mm(mm(a, b, f32, True, False, fl32), c, f32, False, False, fl32)
    # VOP3 output modifiers, applied to the rounded result: omod multiplies by b (one more rounding, no flush),
    # clamp clips to [0, 1] with NaN -> 0
    def omod(r, k, fmt):
        return r if r == "qnan" else R.mul(r, k, fmt)

    def clamp(r, fmt):
        """Clip to [0, 1], NaN -> +0; -0 stays -0 (the VALU clamp's convention here; hardware unverified)."""
        if r == "qnan":
            return 0
        v = R.value(r, fmt)
        if v < 0:
            return 0
        return R.encode(1, fmt) if v > 1 else r

    t["v_s_exp_f32|omod"] = lambda a, b, c: omod(t["v_s_exp_f32"](a, b, c), b, f32)
    t["v_s_rcp_f32|omod"] = lambda a, b, c: omod(t["v_s_rcp_f32"](a, b, c), b, f32)
    t["v_s_sqrt_f32|clamp"] = lambda a, b, c: clamp(t["v_s_sqrt_f32"](a, b, c), f32)
    t["v_s_log_f16|clamp"] = lambda a, b, c: clamp(t["v_s_log_f16"](a, b, c), f16)
    t["v_s_exp_f16|omod"] = lambda a, b, c: omod(t["v_s_exp_f16"](a, b, c), b, f16)
    for k in ("exp", "log", "rcp", "rsq", "sqrt"):
        t[f"v_s_{k}_f32"] = lambda a, b, c, k=k: R.trans(k, a, f32, True)
        t[f"v_s_{k}_f16"] = _f16(lambda a, b, c, k=k: R.trans(k, R.flush(a, f16, fl16), f16, False)
                                 if not fl16 else R.trans(k, a, f16, True))
    return t


REF = {False: _ref_table(False, False), True: _ref_table(True, True)}


@functools.lru_cache(maxsize=None)
def expect(name, a, b, c, flush=False):
    return REF[flush][name](a, b, c)


def check(label, got, want, half):
    """got: uint32 output; want: bits or 'qnan'. Returns an error string or None."""
    got = int(got)
    if half and got >> 16:
        return f"{label}: bits [31:16] of an f16 result are 0x{got >> 16:04x}, not 0"
    if want == "qnan":
        fmt = R.F16 if half else R.F32
        if R.is_nan(got, fmt) and not R.is_snan(got, fmt):
            return None
        return f"{label}: got 0x{got:08x}, want a quiet NaN"
    if got != want:
        return f"{label}: got 0x{got:08x}, want 0x{want:08x}"
    return None


def run(co: bytes, kernel: str, slots: int, rows=INPUTS) -> np.ndarray:
    dev = Device()
    n = len(rows)
    out, inp = dev.alloc(4 * slots * n), dev.alloc(rows.nbytes)
    dev.write(out, bytes(4 * slots * n))
    dev.write(inp, rows.tobytes())
    mod = dev.load(co)
    mod.launch(kernel, grid=(n, 1, 1), block=(32, 1, 1), kernargs=struct.pack("<QQi", out, inp, 32))
    return np.frombuffer(bytes(dev.read(out, 4 * slots * n)), np.uint32).reshape(n, slots)


def executor_names(co: Path) -> set:
    """Mnemonics (without _e32/_e64) of the assembled kernel as the emulator's decoder names them."""
    from sage_co.emu.decode import decode
    blob, addr, _ = text_and_symbols(co.read_bytes())
    return {i.name for i in decode(blob, addr)}


def group_mnemonics(names):
    base = {re.sub(r"_e(32|64)$", "", n) for n in names}
    return base & set(scalar_float.OPS)


# ---------------------------------------------------------------------------------------------- clang kernels
HIP_F32 = {0: "s_add_f32", 1: "s_sub_f32", 2: "s_mul_f32", 3: "s_fmac_f32", 5: "s_minimum_f32", 6: "s_maximum_f32",
           7: "s_ceil_f32", 8: "s_floor_f32", 9: "s_trunc_f32", 10: "s_rndne_f32", 11: "s_cvt_i32_f32",
           14: "s_cmp_lt_f32", 15: "s_cmp_eq_f32", 16: "s_cmp_le_f32", 17: "s_cmp_gt_f32", 18: "s_cmp_lg_f32",
           19: "s_cmp_ge_f32", 20: "s_cmp_o_f32", 21: "s_cmp_u_f32", 22: "s_cmp_nge_f32", 23: "s_cmp_nlg_f32",
           24: "s_cmp_ngt_f32", 25: "s_cmp_nle_f32", 26: "s_cmp_neq_f32", 27: "s_cmp_nlt_f32",
           28: "s_cvt_f16_f32"}
HIP_F16 = {0: "s_add_f16", 1: "s_sub_f16", 2: "s_mul_f16", 3: "s_fmac_f16", 4: "s_minimum_f16", 5: "s_maximum_f16",
           6: "s_ceil_f16", 7: "s_floor_f16", 8: "s_trunc_f16", 9: "s_rndne_f16", 10: "v_s_rcp_f16",
           11: "v_s_rsq_f16", 12: "v_s_sqrt_f16", 13: "v_s_exp_f16", 14: "v_s_log_f16",
           15: "s_cmp_lt_f16", 16: "s_cmp_eq_f16", 17: "s_cmp_le_f16", 18: "s_cmp_gt_f16", 19: "s_cmp_lg_f16",
           20: "s_cmp_ge_f16", 21: "s_cmp_o_f16", 22: "s_cmp_u_f16", 23: "s_cmp_nge_f16", 24: "s_cmp_nlg_f16",
           25: "s_cmp_ngt_f16", 26: "s_cmp_nle_f16", 27: "s_cmp_neq_f16", 28: "s_cmp_nlt_f16",
           29: "s_cvt_f32_f16", 30: "s_cvt_hi_f32_f16", 31: "s_cvt_pk_rtz_f16_f32"}
HIP_T32 = {0: "v_s_exp_f32", 1: "v_s_log_f32", 2: "v_s_rcp_f32", 3: "v_s_rsq_f32", 4: "v_s_sqrt_f32"}
F16_RESULT = {n for n in scalar_float.OPS if n.endswith("_f16") and not n.startswith(("s_cmp", "s_cvt"))} | {
    "s_cvt_f16_f32"}


@pytest.fixture(scope="module")
def hip_co(tmp_path_factory):
    out = tmp_path_factory.mktemp("sfloat") / "scalar_float.co"
    subprocess.run([LLVM / "clang", "-x", "hip", "--offload-arch=gfx1201", "--cuda-device-only", "-nogpulib",
                    "-nogpuinc", "--no-gpu-bundle-output", "-O3", "-o", out, HERE / "sfloat" / "scalar_float.hip"],
                   check=True, capture_output=True)
    return out


def test_clang_emits_the_scalar_float_group_and_decodes_like_objdump(hip_co):
    names = group_mnemonics(objdump_matches(hip_co))
    wanted = set(HIP_F32.values()) | set(HIP_F16.values()) | set(HIP_T32.values()) | {
        "s_fmaak_f32", "s_cvt_f32_i32", "s_cvt_f32_u32", "s_cvt_u32_f32"}
    assert wanted <= names, f"clang no longer emits {sorted(wanted - names)}"


def _compare(out, slots, flush=False, where="", rows=INPUTS):
    errs = []
    for w, (a, b, c) in enumerate(rows.tolist()):
        for slot, (name, args) in slots.items():
            e = check(f"{where} wg {w} {name}(0x{a:08x}, 0x{b:08x}, 0x{c:08x})", out[w, slot],
                      expect(name, *args(a, b, c), flush), name.split("|")[0] in F16_RESULT)
            if e:
                errs.append(e)
    assert not errs, f"{len(errs)} mismatches, first: " + "\n".join(errs[:12])


def test_clang_f32_kernel(hip_co):
    out = run(hip_co.read_bytes(), "sf_f32", 32)
    slots = {k: (v, lambda a, b, c: (a, b, c)) for k, v in HIP_F32.items()}
    slots[4] = ("s_fmac_f32", lambda a, b, c: (a, b, 0x40E80000))                 # fmaak a * b + 7.25
    slots[12] = ("s_cvt_f32_i32", lambda a, b, c: (b, 0, 0))
    slots[13] = ("s_cvt_f32_u32", lambda a, b, c: (b, 0, 0))
    slots[29] = ("s_cvt_u32_f32", lambda a, b, c: (b, 0, 0))
    # the C source stores bools / (u32) casts / f16 bits as 32-bit words: exactly the instruction results here
    _compare(out, slots, where="sf_f32")


def test_clang_f16_kernel(hip_co):
    out = run(hip_co.read_bytes(), "sf_f16", 40)
    _compare(out, {k: (v, lambda a, b, c: (a, b, c)) for k, v in HIP_F16.items()}, where="sf_f16")


def test_clang_trans32_kernel(hip_co):
    out = run(hip_co.read_bytes(), "sf_trans32", 8)
    _compare(out, {k: (v, lambda a, b, c: (a, b, c)) for k, v in HIP_T32.items()}, where="sf_trans32")


# ---------------------------------------------------------------------------------------------- assembled kernel
# (asm operands after the destination, reference name, argument mapping). a = s4, b = s5, c = s6; result in s16.
K1, K2 = 0x40E80000, 0xBE4CCCCD          # literal constants 7.25, -0.2
ASM_CASES = []
for _n in sorted(scalar_float.OPS):
    if _n.startswith("s_cmp_"):
        ASM_CASES.append((f"{_n} s4, s5", _n, "abc"))
    elif _n in ("s_fmac_f32", "s_fmac_f16"):
        ASM_CASES.append((f"s_mov_b32 s16, s6\n        s_wait_alu depctr_sa_sdst(0)\n        {_n} s16, s4, s5", _n, "abc"))
    elif _n == "s_fmaak_f32":
        ASM_CASES.append((f"{_n} s16, s4, s5, 0x{K1:08x}", "s_fmac_f32", f"ab{K1}"))
        ASM_CASES.append((f"{_n} s16, s4, s5, 0x{K2:08x}", "s_fmac_f32", f"ab{K2}"))
    elif _n == "s_fmamk_f32":
        ASM_CASES.append((f"{_n} s16, s4, 0x{K1:08x}, s5", "s_fmac_f32", f"a{K1}b"))
        ASM_CASES.append((f"{_n} s16, s4, 0x{K2:08x}, s5", "s_fmac_f32", f"a{K2}b"))
    elif _n.startswith("s_") and scalar_float.OPS[_n][1] in ("ff", "hh"):
        ASM_CASES.append((f"{_n} s16, s4, s5", _n, "ab"))
    else:
        ASM_CASES.append((f"{_n} s16, s4", _n, "a"))
# inline constants (f16 operands take the f16 pattern of 0.5 / 1.0 / -2.0), literals, VOP3 modifiers
ASM_CASES += [
    ("s_add_f32 s16, s4, 0.5", "s_add_f32", "a1056964608"),
    ("s_add_f16 s16, 0.5, s4", "s_add_f16", "14336a"),
    ("s_mul_f16 s16, s4, -2.0", "s_mul_f16", "a49152"),
    ("s_mul_f16 s16, s4, 0x3555", "s_mul_f16", "a13653"),
    ("s_max_num_f16 s16, s4, 1.0", "s_max_num_f16", "a15360"),
    ("s_min_num_f32 s16, 0x3fc00000, s5", "s_min_num_f32", "1069547520b"),
    ("s_cmp_lt_f16 s4, 1.0", "s_cmp_lt_f16", "a15360"),
    ("s_cmp_nge_f32 s4, 0x40490fdb", "s_cmp_nge_f32", "a1078530011"),
    ("s_cvt_f32_f16 s16, 0.5", "s_cvt_f32_f16", "14336"),
    ("s_cvt_pk_rtz_f16_f32 s16, s4, 0.5", "s_cvt_pk_rtz_f16_f32", "a1056964608"),
    ("s_fmac_f16 s16, s4, 0x3c01", "s_fmac_f16", "a15361*"),
    ("v_s_exp_f32 s16, -|s4|", "v_s_exp_f32", "-|a|"),
    ("v_s_sqrt_f16 s16, -s4", "v_s_sqrt_f16", "-a"),
    ("v_s_rcp_f16 s16, |s4|", "v_s_rcp_f16", "|a|"),
    ("v_s_exp_f32 s16, s4 mul:2", "v_s_exp_f32|omod", "a1073741824"),       # omod x2 (2.0 = 0x40000000)
    ("v_s_rcp_f32 s16, s4 div:2", "v_s_rcp_f32|omod", "a1056964608"),       # omod x0.5
    ("v_s_sqrt_f32 s16, s4 clamp", "v_s_sqrt_f32|clamp", "a"),
    ("v_s_log_f16 s16, s4 clamp", "v_s_log_f16|clamp", "a"),
    ("v_s_exp_f16 s16, s4 mul:4", "v_s_exp_f16|omod", "a17408"),             # omod x4 (4.0 = 0x4400)
]
# VALU IEEE minimum/maximum (FlyDSL's fx.max lowers to v_maximum_f32); same pseudocode as s_minimum/s_maximum
ASM_CASES += [
    ("v_minimum_f32 v1, s4, s5", "v_minimum_f32", "abc"),
    ("v_maximum_f32 v1, s4, s5", "v_maximum_f32", "abc"),
    ("v_minimum3_f32 v1, s4, s5, v6", "v_minimum3_f32", "abc"),
    ("v_maximum3_f32 v1, s4, s5, v6", "v_maximum3_f32", "abc"),
    ("v_minimummaximum_f32 v1, s4, s5, v6", "v_minimummaximum_f32", "abc"),
    ("v_maximumminimum_f32 v1, s4, s5, v6", "v_maximumminimum_f32", "abc"),
]
# the VALU counterparts of the f32 transcendentals, on the same input (v_s_* must equal them bit for bit)
VALU_TWINS = [f"v_{k}_f32" for k in ("exp", "log", "rcp", "rsq", "sqrt")]


def _args(spec, a, b, c):
    """Turn an argument spec ('abc', 'a1056964608', '-|a|', ...) into the reference's (a, b, c)."""
    if spec == "-|a|":
        return (a & 0x7FFFFFFF) | 0x80000000, 0, 0
    if spec == "-a":
        return a ^ 0x8000, 0, 0
    if spec == "|a|":
        return a & 0x7FFF, 0, 0
    if spec == "a15361*":                     # s_fmac_f16 s16, s4, lit with s16 = c (set by the s_mov before it)
        return a, 15361, c
    toks = re.findall(r"[abc]|\d+", spec)
    env = {"a": a, "b": b, "c": c}
    vals = [env[t] if t in env else int(t) for t in toks]
    return tuple(vals + [0] * (3 - len(vals)))


def asm_source(mode32: int, mode16: int, cases=ASM_CASES, twins=VALU_TWINS) -> str:
    lines = []
    for i, (text, _, spec) in enumerate(cases):
        if spec == "a15361*":
            lines.append("        s_mov_b32 s16, s6")
            lines.append("        s_wait_alu depctr_sa_sdst(0)")   # the case reads s16 (docs/rdna4.md §Hazards 3)
        lines.append(f"        {text}")
        if text.startswith("s_cmp_"):
            lines.append("        s_cselect_b32 s16, 1, 0")
        if not text.startswith("v_") or text.startswith("v_s_"):       # VALU cases write v1 themselves
            # s16's pair is VALU-read by the case before: wait for the SALU / VALU write (docs/rdna4.md §Hazards 3)
            lines.append("        s_wait_alu depctr_sa_sdst(0) & depctr_va_sdst(0)")
            lines.append("        v_mov_b32 v1, s16")
        lines.append(f"        global_store_b32 v0, v1, s[8:9] offset:{4 * i}")
    for j, twin in enumerate(twins):
        lines += [f"        {twin} v1, s4", f"        global_store_b32 v0, v1, s[8:9] offset:{4 * (len(cases) + j)}"]
    body = "\n".join(lines)
    slots = len(cases) + len(twins)
    return f"""        .amdgcn_target "amdgcn-amd-amdhsa--gfx1201"
        .amdhsa_code_object_version 5
        .text
        .globl  sf_asm
        .p2align 8
        .type   sf_asm,@function
sf_asm:                                   // kernargs: out (8 B), in (8 B); one wave per workgroup
        s_load_b128     s[8:11], s[0:1], 0x0
        s_mul_i32       s12, ttmp9, 12     // 3 input words per workgroup
        s_mul_i32       s13, ttmp9, {4 * slots}
        v_mov_b32       v0, 0
        s_mov_b32       exec_lo, 1         // lane 0 stores
        s_wait_kmcnt    0x0
        s_add_co_u32    s10, s10, s12
        s_add_co_ci_u32 s11, s11, 0
        s_add_co_u32    s8, s8, s13
        s_add_co_ci_u32 s9, s9, 0
        s_load_b96      s[4:6], s[10:11], 0x0
        s_wait_kmcnt    0x0
        v_mov_b32       v6, s6             // c for the 3-source VALU cases (two SGPRs at most per VALU op)
{body}
        s_endpgm
.Lsf_asm_end:
        .size   sf_asm, .Lsf_asm_end-sf_asm

        .rodata
        .p2align 6
        .amdhsa_kernel sf_asm
          .amdhsa_kernarg_size 20
          .amdhsa_user_sgpr_count 2
          .amdhsa_user_sgpr_kernarg_segment_ptr 1
          .amdhsa_wavefront_size32 1
          .amdhsa_system_sgpr_workgroup_id_x 1
          .amdhsa_next_free_vgpr 8
          .amdhsa_next_free_sgpr 24
          .amdhsa_reserve_vcc 0
          .amdhsa_float_denorm_mode_32 {mode32}
          .amdhsa_float_denorm_mode_16_64 {mode16}
        .end_amdhsa_kernel

        .amdgpu_metadata
---
amdhsa.version: [1, 2]
amdhsa.target: amdgcn-amd-amdhsa--gfx1201
amdhsa.kernels:
  - .name: sf_asm
    .symbol: sf_asm.kd
    .kernarg_segment_size: 20
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: 32
    .sgpr_count: 24
    .vgpr_count: 8
    .max_flat_workgroup_size: 32
    .args:
      - {{ .name: out, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }}
      - {{ .name: in, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global }}
      - {{ .name: bs, .offset: 16, .size: 4, .value_kind: by_value }}
...
        .end_amdgpu_metadata
"""


def build_asm(tmp: Path, mode: int, cases=ASM_CASES, twins=VALU_TWINS) -> Path:
    src, obj, co = tmp / f"sf_{mode}.s", tmp / f"sf_{mode}.o", tmp / f"sf_{mode}.co"
    src.write_text(asm_source(mode, mode, cases, twins))
    subprocess.run([LLVM / "llvm-mc", "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx1201", "-filetype=obj", "-o", obj, src],
                   check=True, capture_output=True)
    subprocess.run([LLVM / "ld.lld", "-shared", obj, "-o", co], check=True, capture_output=True)
    return co


def test_asm_cases_cover_the_whole_group():
    assert {n.split("|")[0] for _, n, _ in ASM_CASES} | {"s_fmaak_f32", "s_fmamk_f32"} >= set(scalar_float.OPS)
    assert {ln.split()[0] for t, _, _ in ASM_CASES for ln in t.splitlines()} >= set(scalar_float.OPS)


@pytest.mark.parametrize("mode", [3, 0], ids=["denorm_keep", "denorm_flush"])
def test_every_instruction_assembled(tmp_path, mode):
    co = build_asm(tmp_path, mode)
    if mode == 3:
        assert group_mnemonics(objdump_matches(co)) == set(scalar_float.OPS)
        assert executor_names(co) >= {n.split("|")[0] for _, n, _ in ASM_CASES}
    slots = len(ASM_CASES) + len(VALU_TWINS)
    out = run(co.read_bytes(), "sf_asm", slots)
    _compare(out, {i: (name, lambda a, b, c, s=spec: _args(s, a, b, c)) for i, (_, name, spec) in enumerate(ASM_CASES)},
             flush=(mode == 0), where=f"sf_asm mode {mode}")
    # v_s_*_f32 == the VALU instruction on the same input, bit for bit
    for j, twin in enumerate(VALU_TWINS):
        i = next(k for k, (t, n, s) in enumerate(ASM_CASES) if n == "v_s" + twin[1:] and s == "a")
        np.testing.assert_array_equal(out[:, i], out[:, len(ASM_CASES) + j], err_msg=f"v_s{twin[1:]} vs {twin}")


def test_f16_transcendentals_sweep(tmp_path):
    """Every 5th f16 bit pattern (13108 inputs: every exponent, both signs, subnormals, inf, NaNs) through the five
    v_s_*_f16 ops (denormals kept): correctly rounded f16 results. (All 65536 pass too; a third of a minute.)"""
    rows = np.zeros((13108, 3), dtype=np.uint32)
    rows[:, 0] = np.arange(0, 1 << 16, 5, dtype=np.uint32) | (0xABCD << 16)      # garbage high half is ignored
    cases = [c for c in ASM_CASES if c[1].startswith("v_s_") and c[1].endswith("f16") and c[2] == "a"]
    assert len(cases) == 5
    out = run(build_asm(tmp_path, 3, cases, []).read_bytes(), "sf_asm", len(cases), rows)
    _compare(out, {i: (n, lambda a, b, c: (a, b, c)) for i, (_, n, _) in enumerate(cases)}, where="exhaustive",
             rows=rows)


def test_op_sel_on_v_s_is_refused(tmp_path):
    """LLVM rejects op_sel on v_s_*; a hand-encoded one (v_s_exp_f16 s16, s4 with op_sel bit 0) is an error, not a
    silently ignored field."""
    from sage_co.emu import EmuError
    case = [(".long 0xd6810810, 0x00000004", "v_s_exp_f16", "a")]
    co = build_asm(tmp_path, 3, case, [])
    with pytest.raises(EmuError, match="op_sel"):
        run(co.read_bytes(), "sf_asm", 1, INPUTS[:2])
