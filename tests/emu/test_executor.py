"""The executor runs clang-compiled HIP kernels and hand-written asm on the emulator and matches numpy."""
import struct
from pathlib import Path

import numpy as np
import pytest

from llvm_tools import assemble_co, hip_co, needs_llvm
from sage_co.emu import Device, executor
from sage_co.emu.state import ARENA_VA, EmuError
from sage_co.emu.facts import CALL_INSTS

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
pytestmark = needs_llvm


@pytest.fixture(scope="module")
def hip(tmp_path_factory):
    out = tmp_path_factory.mktemp("hip") / "exec_kernels.co"
    return hip_co(HERE / "asm" / "exec_kernels.hip", out)


@pytest.fixture(scope="module")
def wmma_min(tmp_path_factory):
    return assemble_co(HERE.parent / "build_abi" / "kernels" / "wmma_iu8_min.s", tmp_path_factory.mktemp("asm"))


def put(dev, arr):
    p = dev.alloc(arr.nbytes)
    dev.write(p, np.ascontiguousarray(arr))
    return p


def get(dev, p, dtype, n):
    return np.frombuffer(dev.read(p, np.dtype(dtype).itemsize * n), dtype).copy()


def test_wmma_iu8_min_matches_numpy_and_buffer_oob_reads_zero(wmma_min):
    dev = Device()
    mod = dev.load(wmma_min)
    rng = np.random.default_rng(1)
    A = rng.integers(-128, 128, (16, 16), dtype=np.int8)
    B = rng.integers(-128, 128, (16, 16), dtype=np.int8)
    a, bt, c = put(dev, A), put(dev, B.T.copy()), dev.alloc(1024)
    stats = mod.launch("wmma_iu8_min", (1, 1, 1), (32, 1, 1), struct.pack("<QQQI", a, bt, c, 256))
    C = get(dev, c, np.int32, 256).reshape(16, 16)
    np.testing.assert_array_equal(C, A.astype(np.int32) @ B.astype(np.int32))
    assert stats["WMMA"] == 1 and stats["waves"] == 1
    # straight-line code, one wave: every instruction from the entry to s_endpgm ran once (Stats.exec_counts, by
    # byte offset in .text; the instructions after s_endpgm, s_code_end padding, never run)
    prog = mod.programs["wmma_iu8_min"]
    end = next(n for n, i in enumerate(prog.insts) if i.name == "s_endpgm")
    assert stats.exec_counts == {i.offset: 1 for i in prog.insts[:end + 1]}
    # a_bytes = 100: the V# NUM_RECORDS range check zeroes every 8-byte A fragment with offset + 8 > 100
    mod.launch("wmma_iu8_min", (1, 1, 1), (32, 1, 1), struct.pack("<QQQI", a, bt, c, 100))
    A2 = A.astype(np.int32).copy()
    for r in range(16):
        for h in range(2):
            if 16 * r + 8 * h + 8 > 100:
                A2[r, 8 * h:8 * h + 8] = 0
    np.testing.assert_array_equal(get(dev, c, np.int32, 256).reshape(16, 16), A2 @ B.astype(np.int32))


def test_saxpy_partial_waves_many_workgroups(hip):
    dev = Device()
    mod = dev.load(hip)
    n = 1000
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = put(dev, np.full(n + 8, 7.0, np.float32))
    stats = mod.launch("saxpy", (11, 1, 1), (96, 1, 1), struct.pack("<QQQfI", out, put(dev, a), put(dev, b), 1.5, n))
    res = get(dev, out, np.float32, n + 8)
    # clang contracts a*s+b into one FMA: compare with a correctly rounded fma (f64 product is exact)
    np.testing.assert_array_equal(res[:n], (a.astype(np.float64) * 1.5 + b).astype(np.float32))
    assert (res[n:] == 7.0).all()
    assert stats["waves"] == 11 * 3 and stats["workgroups"] == 11


def test_ids_and_hidden_args_3d(hip):
    dev = Device()
    mod = dev.load(hip)
    grid, block = (3, 2, 2), (4, 4, 4)
    nwg = 12
    out = put(dev, np.zeros(nwg * 64 * 4, np.int32))
    mod.launch("ids", grid, block, struct.pack("<Q", out))
    res = get(dev, out, np.uint32, nwg * 64 * 4).reshape(-1, 4)
    for bz in range(2):
        for by in range(2):
            for bx in range(3):
                for tz in range(4):
                    for ty in range(4):
                        for tx in range(4):
                            lin = ((bz * 2 + by) * 3 + bx) * 64 + (tz * 4 + ty) * 4 + tx
                            assert res[lin, 0] == tx | ty << 8 | tz << 16
                            assert res[lin, 1] == bx | by << 8 | bz << 16
                            assert res[lin, 2] == 4 | (3 * 4) << 16
                            assert res[lin, 3] == 3 | 2 << 8 | 2 << 16


def _diverge_ref(x, nwg):
    out = np.zeros(nwg * 64, np.uint64)
    for i in range(nwg * 64):
        b, t = divmod(i, 64)
        acc = 0
        for k in range(int(x[i]) & 15):
            acc = (acc * 3 + k) & 0xFFFFFFFF
        if b & 1:
            for _ in range(b):
                acc = (acc ^ (acc << 1)) & 0xFFFFFFFF
        elif t & 1:
            acc = (acc + 1000) & 0xFFFFFFFF
        out[i] = acc
    return out.astype(np.uint32)


def test_divergent_branches_and_loops(hip):
    dev = Device()
    mod = dev.load(hip)
    nwg = 6
    x = np.random.default_rng(3).integers(0, 2 ** 32, nwg * 64, dtype=np.uint32)
    out = dev.alloc(4 * nwg * 64)
    stats = mod.launch("diverge", (nwg, 1, 1), (64, 1, 1), struct.pack("<QQ", out, put(dev, x)))
    np.testing.assert_array_equal(get(dev, out, np.uint32, nwg * 64), _diverge_ref(x, nwg))
    # per-instruction counts (Stats.exec_counts) add up to the class counts; the loops ran some instructions more
    # often than the 12 waves, the branches skipped others for some waves
    prog = mod.programs["diverge"]
    cls = {i.offset: c for i, c in zip(prog.insts, prog.cls)}
    by_class = {c: 0 for c in set(prog.cls)}
    for off, n in stats.exec_counts.items():
        by_class[cls[off]] += n
    assert all(stats[c] == n for c, n in by_class.items())
    assert sum(stats.exec_counts.values()) == stats["wave_instructions"]
    assert max(stats.exec_counts.values()) > 12 > min(stats.exec_counts.values())


def test_lds_barrier_block_sum_8_waves(hip):
    dev = Device()
    mod = dev.load(hip)
    x = np.random.default_rng(4).integers(-100, 100, 4 * 256).astype(np.float32)
    out = dev.alloc(16)
    stats = mod.launch("block_sum", (4, 1, 1), (256, 1, 1), struct.pack("<QQ", out, put(dev, x)),
                       lds_race_check=True)
    np.testing.assert_array_equal(get(dev, out, np.float32, 4), x.reshape(4, 256).sum(1))
    assert stats["LDS"] > 0 and stats["waves"] == 32


def test_a_kept_state_runs_the_next_launch_like_a_fresh_one(hip, monkeypatch):
    """A launch reuses the State (and the built handlers) its Program's last launch of the same shape left
    (executor._batch_state): LDS, barriers, registers and the sanitizer start clean, the grown arena is read again,
    and the result and the counts equal a fresh State's. An out-of-bounds launch on a kept State still stops."""
    dev = Device()
    mod = dev.load(hip)
    rng = np.random.default_rng(5)
    xs = [rng.integers(-100, 100, 3 * 256).astype(np.float32) for _ in range(2)]
    args = lambda out, x: struct.pack("<QQ", out, put(dev, x))             # noqa: E731
    out0 = dev.alloc(12)
    mod.launch("block_sum", (3, 1, 1), (256, 1, 1), args(out0, xs[0]), lds_race_check=True)
    built = []
    real = executor.build_handler
    monkeypatch.setattr(executor, "build_handler", lambda *a: built.append(a[2]) or real(*a))
    big = dev.alloc(len(dev.mem) * 2)           # the arena grows: the kept State must read the new one
    out1 = dev.alloc(12)
    kept = mod.launch("block_sum", (3, 1, 1), (256, 1, 1), args(out1, xs[1]), lds_race_check=True)
    assert built == []                          # every handler came with the kept State
    np.testing.assert_array_equal(get(dev, out1, np.float32, 3), xs[1].reshape(3, 256).sum(1))
    mod.programs["block_sum"].kept.clear()
    fresh = mod.launch("block_sum", (3, 1, 1), (256, 1, 1), args(out1, xs[1]), lds_race_check=True)
    assert built and kept.exec_counts == fresh.exec_counts
    assert {k: v for k, v in kept.items() if k != "wall_s"} == {k: v for k, v in fresh.items() if k != "wall_s"}
    dev.free(big)
    with pytest.raises(EmuError, match="global"):
        mod.launch("block_sum", (3, 1, 1), (256, 1, 1), struct.pack("<QQ", out1, ARENA_VA + len(dev.mem)),
                   lds_race_check=True)


def test_divergent_waves_run_ahead_through_the_steps_one_pick_at_a_time_makes(monkeypatch):
    """Divergent waves at the smallest PC run on until they branch, reach another runnable wave's PC or an
    instruction in executor.YIELDS (_run_batch): the steps, per-instruction counts and results are those of picking
    the smallest PC before every step (every instruction made a yield). The prepare kernels are the divergent case:
    statistics, fold and quantization items of one launch at different PCs, polling each other at device scope."""
    import torch
    from sage_co import launch
    from sage_co.api import sage_prepare
    from sage_co.backends.emu import EmuBackend
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 70, 2, 64, generator=g).bfloat16() for _ in range(3))

    def run():
        backend = EmuBackend()
        previous = launch.use_backend("emu", backend)
        try:
            out = sage_prepare(q, k, v, smooth_k=True, backend="emu")
        finally:
            launch.use_backend("emu", previous)
        (_, stats), = backend.history
        return out, stats
    ahead, ahead_stats = run()
    monkeypatch.setattr(executor, "YIELDS", ("",))          # every instruction yields: one pick per step
    picked, picked_stats = run()
    assert ahead_stats["steps"] == picked_stats["steps"] and ahead_stats.exec_counts == picked_stats.exec_counts
    for name in ("q_int8", "q_scale", "k_int8", "k_scale", "k_mean", "v_t", "v_scale"):
        assert torch.equal(getattr(ahead, name), getattr(picked, name)), name


def test_dpp_permlanex16_exp2(hip):
    dev = Device()
    mod = dev.load(hip)
    x = np.random.default_rng(5).standard_normal(32).astype(np.float32)
    out = dev.alloc(128)
    mod.launch("dpp", (1, 1, 1), (32, 1, 1), struct.pack("<QQ", out, put(dev, x)))
    v = (x.astype(np.float64) * 3 + 1).astype(np.float32)     # contracted to one fma: exact in f64
    m = np.maximum(v, v[np.arange(32) ^ 1])
    m = np.maximum(m, m[np.arange(32) ^ 16])
    ref = np.exp2((m * np.float32(0.125)).astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(get(dev, out, np.float32, 32), ref)   # numerics.exp2_f32: f64 rounded once


def test_bpermute_integer_and_float_division(hip):
    dev = Device()
    mod = dev.load(hip)
    v = np.random.default_rng(6).integers(0, 2 ** 31, 32, dtype=np.uint32)
    out, fout = dev.alloc(128), dev.alloc(128)
    mod.launch("shuffle_div", (1, 1, 1), (32, 1, 1), struct.pack("<QQQ", out, fout, put(dev, v)))
    t = np.arange(32)
    r = v[(t * 7) & 31].astype(np.int64)
    np.testing.assert_array_equal(get(dev, out, np.uint32, 32), (r // (t + 1) + r % (t + 3)).astype(np.uint32))
    # IEEE division, correctly rounded (the div_scale/rcp/fma/div_fmas/div_fixup sequence)
    np.testing.assert_array_equal(get(dev, fout, np.float32, 32),
                                  (v.astype(np.float32).astype(np.float64) / (t + 1)).astype(np.float32))


def test_trace_one_wave(hip):
    dev = Device()
    mod = dev.load(hip)
    out = dev.alloc(4 * 128)
    lines = []
    stats = mod.launch("diverge", (2, 1, 1), (64, 1, 1),
                       struct.pack("<QQ", out, put(dev, np.arange(128, dtype=np.uint32))), trace_wave=(1, 1, lines))
    assert lines == stats["trace"] and len(lines) > 10
    assert any("s_load" in ln and "->" in ln for ln in lines)
    assert lines[-1].split()[1] == "s_endpgm"


def test_launch_validation(hip):
    dev = Device()
    mod = dev.load(hip)
    ka = struct.pack("<QQQfI", 0, 0, 0, 1.0, 0)
    with pytest.raises(ValueError, match="grid"):
        mod.launch("saxpy", (0, 1, 1), (64, 1, 1), ka)
    with pytest.raises(ValueError, match="max_flat_workgroup_size"):
        mod.launch("ids", (1, 1, 1), (512, 1, 1), struct.pack("<Q", 0))
    with pytest.raises(ValueError, match="explicit args need"):
        mod.launch("saxpy", (1, 1, 1), (64, 1, 1), ka[:20])
    with pytest.raises(Exception, match="no kernel named"):
        mod.launch("nope", (1, 1, 1), (64, 1, 1), ka)


def test_device_memory_api():
    dev = Device()
    a = dev.alloc(1000)
    b = dev.alloc(10)
    assert a % 256 == 0 and b % 256 == 0 and b >= a + 1000 + 256
    dev.write(a, b"\x01\x02\x03")
    assert dev.read(a, 3) == b"\x01\x02\x03"
    with pytest.raises(ValueError, match="not inside one live allocation"):
        dev.read(a + 999, 2)
    dev.free(a)
    with pytest.raises(ValueError):
        dev.read(a, 1)
    with pytest.raises(ValueError):
        dev.alloc(0)


# the instructions whose handler reads their own position when it is built: branches (Program.target checks the
# target is an instruction) and the jumps and calls (return address, code_index) of docs/rdna4.md §Calls
POSITIONAL = ("s_branch", "s_cbranch_", *CALL_INSTS, "s_getpc_b64")


def unimplemented_distinct(mod, kernels) -> list[str]:
    """executor.unimplemented over every kernel of `mod`, building each distinct handler once.

    A handler is built from the instruction's bytes, the kernel's descriptor (VGPRs, LDS, scratch, float modes:
    State and Program take them from there) and whether the kernel can set MODE (Program.fp16_ovfl_possible);
    branches, jumps and calls also read their position (POSITIONAL), so each of those is built where it stands.
    Any other instruction with the same bytes under the same descriptor builds (or fails) the same way at every
    offset: it is built at its first occurrence. A prepare object repeats its instructions hundreds of thousands
    of times."""
    missing, seen = [], set()
    text = mod.co.text
    for name in kernels:
        prog = executor.Program(mod, mod.kernels[name])
        st = executor.State(prog, 1, 1, sanitize=False, lds_race_check=False, lds_bytes=prog.lds_bytes)
        st.block = (32, 1, 1)
        ops = executor.Ops(st)
        kernel_key = (tuple(sorted(prog.kernel.descriptor.fields.items())), prog.fp16_ovfl_possible)
        for pc, inst in enumerate(prog.insts):
            if inst.name == "s_code_end":
                continue
            if not inst.name.startswith(POSITIONAL):
                key = (kernel_key, text[inst.offset:inst.offset + inst.size])
                if key in seen:
                    continue
                seen.add(key)
            try:
                executor.build_handler(st, ops, pc)
            except executor.EmuError as e:
                missing.append(f"{name} 0x{inst.offset:x} {prog.text(pc)}: {str(e).split(': ', 1)[-1]}")
    return missing


@pytest.mark.parametrize("co", sorted((ROOT / "hsaco" / "gfx1201").glob("*.co")), ids=lambda p: p.stem)
def test_every_instruction_of_shipped_kernels_is_implemented(co):
    """Every instruction of every kernel of every shipped code object has a handler (unimplemented_distinct: each
    distinct instruction once per kernel descriptor). On the small objects executor.unimplemented itself, over
    every instruction, agrees."""
    dev = Device()
    mod = dev.load(co.read_bytes(), co.name)
    assert unimplemented_distinct(mod, list(mod.kernels)) == []
    if len(mod.insts) < 5000:
        for name, k in mod.kernels.items():
            assert executor.unimplemented(executor.Program(mod, k)) == [], name


def test_unimplemented_distinct_reports_what_executor_unimplemented_reports(wmma_min, monkeypatch):
    """The deduplicated check above finds a missing handler wherever executor.unimplemented does: with the WMMA
    builder knocked out, both report the WMMA (a vector instruction) and nothing else."""
    dev = Device()
    mod = dev.load(wmma_min)
    real = executor.valu.build
    monkeypatch.setattr(executor, "BUILDERS", {**executor.BUILDERS, "VOP3P": (
        lambda st, ops, inst, pc: None if inst.name.startswith("v_wmma") else real(st, ops, inst, pc),)})
    want = executor.unimplemented(executor.Program(mod, mod.kernels["wmma_iu8_min"]))
    got = unimplemented_distinct(mod, ["wmma_iu8_min"])
    assert len(want) == 1 and "v_wmma" in want[0]
    assert got == ["wmma_iu8_min " + want[0]]
