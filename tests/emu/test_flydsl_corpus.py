"""FlyDSL corpus (tests/emu/corpus/flydsl/): code objects built by FlyDSL (AMD's MLIR kernel DSL, a third compiler
next to clang and the hand-scheduled assembly) from kernels.py by build.py, checked in; neither flydsl nor a GPU is
needed here. Each runs on sage_co.emu with the sanitizer on:

  * wmma_gemm_*: C = A @ Bt^T (f16 or bf16 in, f32 out), a 2x2 / 1x2 wave grid of v_wmma_f32_16x16x16_{f16,bf16}
    over K.
    Integer-valued inputs: bit for bit against torch in float64 (every partial sum is an exact f32). Random
    inputs: bit for bit against the emulator's stated WMMA model applied step by step (each 16-deep dot exact, +C
    rounded once to f32 per K step, docs/emulator.md §Numerics) computed here with exact rationals on a subset of
    outputs, and within (K/16) * 2^-24 * sum|a*b| of torch float64 everywhere.
  * wmma_attn_d16: the scores of each key tile on the matrix unit (v_wmma_f32_16x16x16_f16), parked in LDS
    (ds_store_2addr_b32 / ds_load_b128), the online softmax per lane; within 4e-6 * max|V| of torch float64.
  * attn_loop_d16: a per-thread online-softmax attention loop (run-time trip count, loop-carried max / sum /
    accumulator, v_exp_f32, v_maximum_f32) whose uniform scale rsqrt(head_dim) * log2(e) is computed on the scalar
    unit (s_cvt_f32_i32, v_s_sqrt_f32, v_s_rcp_f32, s_mul_f32: the gfx12 scalar-float group). Compared with torch
    float64 attention within 4e-6 * max|V| (f32 arithmetic over 40 keys, LLVM's own fma contraction order) and,
    bit for bit, across two launches with permuted query rows (rows are independent).
Decode equals llvm-objdump on every instruction (needs LLVM 22, found by tests/llvm_tools.py; skipped with the reason
without it).
"""
from __future__ import annotations

import json
import struct
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

from llvm_tools import ROOT  # noqa: F401  (tests/ and tools/ are on sys.path: conftest.py, pyproject.toml pythonpath)
from perfmodel.calibration import ENV as CALIBRATION_ENV, calibration_dir  # noqa: E402
from sage_co.emu import Device

HERE = Path(__file__).parent
CORPUS = HERE / "corpus" / "flydsl"
MANIFEST = json.loads((CORPUS / "manifest.json").read_text())
KERNELS = MANIFEST["kernels"]
# the FlyDSL calibration code objects: data outside the repository, found as tools/perfmodel finds them
CALIBRATION_ROOT = calibration_dir()                 # None unless $SAGE_CO_CALIBRATION names the folder
CALIBRATION = CALIBRATION_ROOT / "flydsl" if CALIBRATION_ROOT is not None else None


def launch(name: str, arrays: dict, ints: dict, sanitize=True, lds_race_check=False):
    """Run corpus kernel `name` with numpy arrays (by kernarg name) and i32 scalars; returns {name: array after}."""
    k = KERNELS[name]
    dev = Device()
    mod = dev.load((CORPUS / k["file"]).read_bytes())
    meta = mod.co.kernel(k["symbol"]).metadata[".args"]
    assert len(meta) == len(k["kernargs"]), f"{name}: manifest kernargs do not match the code object"
    ptrs, buf = {}, bytearray(max(int(a[".offset"]) + int(a[".size"]) for a in meta))
    for arg, a in zip(k["kernargs"], meta):
        off = int(a[".offset"])
        if a[".value_kind"] == "global_buffer":
            arr = np.ascontiguousarray(arrays[arg])
            p = dev.alloc(max(arr.nbytes, 4))
            dev.write(p, arr.tobytes())
            ptrs[arg] = (p, arr)
            struct.pack_into("<Q", buf, off, p)
        else:
            assert int(a[".size"]) == 4, f"{name}: argument {arg} is not an i32"
            struct.pack_into("<i", buf, off, ints[arg])
    stats = mod.launch(k["symbol"], grid=tuple(k["grid"]), block=tuple(k["block"]), kernargs=bytes(buf),
                       sanitize=sanitize, lds_race_check=lds_race_check)
    out = {arg: np.frombuffer(bytes(dev.read(p, arr.nbytes)), arr.dtype).reshape(arr.shape)
           for arg, (p, arr) in ptrs.items()}
    return out, stats


def gemm_shape(name):
    p = KERNELS[name]["params"]
    return p["M"], p["N"], p["K"]


def gemm_operands(name, values: np.ndarray):
    """float64 values (exactly representable) -> (numpy array of the kernel's 16-bit input type, float64 tensor)."""
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[KERNELS[name]["params"].get("dtype", "f16")]
    t = torch.from_numpy(values).to(dt)
    return t.view(torch.int16).numpy(), t.double()


GEMMS = [n for n, k in KERNELS.items() if k["builder"] == "wmma_gemm"]


def test_manifest_lists_the_corpus():
    assert MANIFEST["arch"] == "gfx1201" and len(GEMMS) >= 1 and "attn_loop_d16" in KERNELS
    for k in KERNELS.values():
        assert (CORPUS / k["file"]).read_bytes()[:4] == b"\x7fELF"


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_decode_matches_objdump(name):
    from llvm_tools import WHY_NO_LLVM22, objdump_matches
    if WHY_NO_LLVM22:
        pytest.skip(WHY_NO_LLVM22)
    names = objdump_matches(CORPUS / KERNELS[name]["file"])
    if name in ("attn_loop_d16", "wmma_attn_d16"):
        assert {"v_s_sqrt_f32", "v_s_rcp_f32", "s_cvt_f32_i32", "s_mul_f32", "v_exp_f32_e32"} <= names
    if name == "wmma_attn_d16":
        # (the kernel's gpu.barrier()s are gone: LLVM drops barriers in a one-wave workgroup)
        assert {"v_wmma_f32_16x16x16_f16", "ds_store_2addr_b32", "ds_load_b128"} <= names
    if KERNELS[name]["builder"] == "wmma_gemm":
        dt = KERNELS[name]["params"].get("dtype", "f16")
        assert any(n.startswith(f"v_wmma_f32_16x16x16_{dt}") for n in names)


@pytest.mark.parametrize("name", GEMMS)
def test_wmma_gemm_integer_inputs_bitwise(name):
    M, N, K = gemm_shape(name)
    rng = np.random.default_rng(1)
    a, a64 = gemm_operands(name, rng.integers(-8, 9, (M, K)).astype(np.float64))
    b, b64 = gemm_operands(name, rng.integers(-8, 9, (N, K)).astype(np.float64))
    out, stats = launch(name, {"A": a, "Bt": b, "C": np.zeros((M, N), np.float32)}, {})
    ref = (a64 @ b64.T).float().numpy()
    np.testing.assert_array_equal(out["C"].view(np.uint32), ref.view(np.uint32))
    assert stats["WMMA"] == (M // 16) * (N // 16) * (K // 16)        # one wave-WMMA per 16x16 tile per K step


def _round_f32(x: Fraction) -> np.float32:
    """Exact rational -> nearest-even float32 (finite, normal range: |x| well inside f32 for these inputs)."""
    f = float(x)                                             # nearest f64 (correctly rounded)
    r = np.float32(f)
    if Fraction(float(r)) == x:
        return r
    # break an f64-induced tie/misround: compare against the neighbours exactly
    cands = [r, np.nextafter(r, np.float32(np.inf)), np.nextafter(r, np.float32(-np.inf))]
    best = min(cands, key=lambda c: (abs(Fraction(float(c)) - x), int(np.float32(c).view(np.uint32)) & 1))
    return np.float32(best)


@pytest.mark.parametrize("name", GEMMS)
def test_wmma_gemm_random_inputs(name):
    M, N, K = gemm_shape(name)
    rng = np.random.default_rng(2)
    a, a64 = gemm_operands(name, rng.standard_normal((M, K)))
    b, b64 = gemm_operands(name, rng.standard_normal((N, K)))
    out, _ = launch(name, {"A": a, "Bt": b, "C": np.zeros((M, N), np.float32)}, {})
    c = out["C"]
    ref = (a64 @ b64.T).numpy()
    av, bv = a64.numpy(), b64.numpy()
    bound = (K // 16) * 2.0 ** -24 * (a64.abs() @ b64.abs().T).numpy()
    assert np.all(np.abs(c - ref) <= bound), float(np.max(np.abs(c - ref) / np.maximum(bound, 1e-30)))
    # bitwise against the WMMA model, step by step in exact rationals, on a sample of outputs
    for i, j in [(0, 0), (M - 1, N - 1), (M // 2, 3), (5, N // 2 + 1), (M - 3, 7)]:
        acc = np.float32(0)
        for k0 in range(0, K, 16):
            dot = sum(Fraction(float(av[i, k])) * Fraction(float(bv[j, k])) for k in range(k0, k0 + 16))
            acc = _round_f32(Fraction(float(acc)) + dot)
        assert c[i, j].view(np.uint32) == acc.view(np.uint32), (i, j, c[i, j], acc)


def _attention_inputs(seed=3):
    k = KERNELS["attn_loop_d16"]
    shapes = {n: s for n, s, _ in k["tensors"]}
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(shapes["Q"]).astype(np.float32)
    kk = rng.standard_normal(shapes["K"]).astype(np.float32)
    v = rng.standard_normal(shapes["V"]).astype(np.float32)
    return q, kk, v, np.zeros(shapes["O"], np.float32), dict(k["ints"])


def test_attention_loop_vs_torch():
    q, k, v, o, ints = _attention_inputs()
    n_kv, d = ints["n_kv"], ints["head_dim"]
    out, stats = launch("attn_loop_d16", {"Q": q, "K": k, "V": v, "O": o}, ints)
    q64, k64, v64 = (torch.from_numpy(x).double() for x in (q, k[:n_kv], v[:n_kv]))
    ref = torch.softmax(q64 @ k64.T / d ** 0.5, dim=-1) @ v64
    err = np.abs(out["O"] - ref.numpy()).max()
    assert err <= 4e-6 * np.abs(v).max(), err
    # a shorter run-time trip count uses only the first keys
    ints2 = dict(ints, n_kv=7)
    out2, _ = launch("attn_loop_d16", {"Q": q, "K": k, "V": v, "O": o}, ints2)
    ref2 = torch.softmax(q64 @ k64[:7].T / d ** 0.5, dim=-1) @ v64[:7]
    assert np.abs(out2["O"] - ref2.numpy()).max() <= 4e-6 * np.abs(v).max()


def test_attention_loop_rows_are_independent_bitwise():
    q, k, v, o, ints = _attention_inputs(4)
    perm = np.random.default_rng(5).permutation(len(q))
    a, _ = launch("attn_loop_d16", {"Q": q, "K": k, "V": v, "O": o}, ints)
    b, _ = launch("attn_loop_d16", {"Q": q[perm], "K": k, "V": v, "O": o}, ints)
    np.testing.assert_array_equal(a["O"][perm].view(np.uint32), b["O"].view(np.uint32))


def test_wmma_attention_vs_torch():
    """S = Q K^T on the matrix unit per key tile, parked in LDS, online softmax per lane; 3 key tiles and 1."""
    k = KERNELS["wmma_attn_d16"]
    shapes = {n: s for n, s, _ in k["tensors"]}
    ints = dict(k["ints"])
    rng = np.random.default_rng(6)
    q = rng.standard_normal(shapes["Q"]).astype(np.float16)
    kk = rng.standard_normal(shapes["K"]).astype(np.float16)
    v = rng.standard_normal(shapes["V"]).astype(np.float32)
    q64, k64, v64 = (torch.from_numpy(x).double() for x in (q, kk, v))
    for tiles in (ints["n_kv_tiles"], 1):
        out, stats = launch("wmma_attn_d16", {"Q": q, "K": kk, "V": v, "O": np.zeros(shapes["O"], np.float32)},
                            dict(ints, n_kv_tiles=tiles))
        n = 16 * tiles
        ref = torch.softmax(q64 @ k64[:n].T / ints["head_dim"] ** 0.5, dim=-1) @ v64[:n]
        err = np.abs(out["O"] - ref.numpy()).max()
        assert err <= 4e-6 * np.abs(v).max(), (tiles, err)
        assert stats["WMMA"] == k["grid"][0] * tiles


@pytest.mark.skipif(CALIBRATION is None or not any(CALIBRATION.glob("*.hsaco")),
                    reason=f"no FlyDSL calibration code objects (*.hsaco) in {CALIBRATION or 'no folder given'} "
                           f"(data kept out of the repository; set ${CALIBRATION_ENV} to the calibration folder)")
def test_calibration_code_objects_fully_implemented():
    """Extra local check (issue 18): the FlyDSL flash-attention code objects of the calibration folder (outside the
    repository, named by $SAGE_CO_CALIBRATION) hold v_s_rcp_f32 and s_trunc_f32; every
    instruction must now build."""
    from sage_co.emu import executor
    for co in sorted(CALIBRATION.glob("*.hsaco")):
        mod = Device().load(co.read_bytes())
        for kern in mod.co.kernels.values():
            missing = executor.unimplemented(executor.Program(mod, kern))
            assert not missing, f"{co.name}: {missing[:5]}"
