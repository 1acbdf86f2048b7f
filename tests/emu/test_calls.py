"""Calls (docs/rdna4.md §Calls): clang -O3 `noinline` device functions (tests/emu/corpus/clang/calls.hip, the .co
checked in) -- s_getpc_b64 + rel32 add + s_swappc_b64 s[30:31], return by s_setpc_b64, a callee frame on the
scratch stack (s32 / s33) reading the caller's private array through a flat pointer -- run with the sanitizer on and
give bitwise the values of a numpy model; an llvm-mc kernel checks s_call_b64, per-wave call targets, the return
address, and that a jump to a non-instruction stops the run; decode equals llvm-objdump."""
import dataclasses
import struct
from pathlib import Path

import numpy as np
import pytest

from llvm_tools import assemble_co, decode_mismatches, needs_llvm
from sage_co.emu import Device, EmuError, executor
from sage_co.emu.facts import facts

CO = Path(__file__).parent / "corpus" / "clang" / "calls.co"
ASM = Path(__file__).parent / "asm" / "calls.s"
M32 = np.uint64(0xFFFFFFFF)


def mix(x, k):
    """calls.hip's mix() over uint64 arrays holding u32 values (k: array or int)."""
    x = np.asarray(x, np.uint64) & M32
    k = np.asarray(k, np.uint64)
    x ^= x >> np.uint64(15)
    x = (x * ((np.uint64(0x2C1B3C6D) + np.uint64(2) * k) & M32)) & M32
    x ^= x >> np.uint64(12)
    return (x + k) & M32


@pytest.fixture()
def env(clang_corpus):
    return clang_corpus(CO.name)


@pytest.mark.parametrize("n", [0, 1, 7])
def test_call_in_a_loop(env, n):
    dev, mod, put, get = env
    x = np.random.default_rng(n).integers(0, 2**32, 192, dtype=np.uint64).astype(np.uint32)
    po = dev.alloc(4 * 192)
    st = mod.launch("call_loop", (3, 1, 1), (64, 1, 1), struct.pack("<QQI", po, put(x), n))
    want = np.zeros(192, np.uint64)
    for k in range(n):
        want = (want + mix(x.astype(np.uint64) + np.uint64(k), k)) & M32
    assert (get(po, np.uint32, 192) == want.astype(np.uint32)).all()
    # one s_swappc_b64 and one s_setpc_b64 per wave and iteration, counted as BRANCH
    calls = [i for i in mod.insts if i.name in ("s_swappc_b64", "s_setpc_b64")]
    assert calls and all(facts(i).cls == "BRANCH" for i in calls)
    assert st["BRANCH"] >= 6 * 2 * n


@pytest.mark.parametrize("nt", [64, 48])
def test_call_with_private_array(env, nt):
    """nt = 48: the second wave has 16 lanes off, which the callee's whole-wave spill of v9 (s_xor_saveexec_b32 -1,
    scratch_store_b32 at s33) stores and reloads."""
    dev, mod, put, get = env
    x = np.random.default_rng(9).integers(0, 2**32, nt, dtype=np.uint64).astype(np.uint32)
    po = put(np.full(64, 0xDEADBEEF, np.uint32))
    mod.launch("call_private", (1, 1, 1), (nt, 1, 1), struct.pack("<QQ", po, put(x)))
    t = np.arange(nt, dtype=np.uint64)
    i = np.arange(16, dtype=np.uint64)
    priv = (x[:, None].astype(np.uint64) * (i + np.uint64(1)) + i) & M32          # [t, i]
    terms = (mix(priv, t[:, None] + i) * (i + np.uint64(1))) & M32
    n = 16 - (np.arange(nt) & 7)                                                   # the callee's loop count per lane
    want = np.array([terms[k, :n[k]].sum() & 0xFFFFFFFF for k in range(nt)], np.uint32)
    got = get(po, np.uint32, 64)
    assert (got[:nt] == want).all() and (got[nt:] == 0xDEADBEEF).all()


def test_call_private_callee_frame_is_checked(env):
    """The descriptor's 96 B private segment holds the caller's 64 B array (at 0, s32 = 0x50 at the call) and the
    callee's frame (its whole-wave spill of v9 at s33 = 0x50, which stores the lanes that are off: 16 of the second
    wave with 48 threads). With the segment cut to 80 B that spill is outside it and the run stops there, so the
    frame really lives on the scratch stack the emulator bounds-checks."""
    dev, mod, put, get = env
    k = mod.co.kernel("call_private")
    assert k.descriptor.private_segment_fixed_size == 96
    small = dataclasses.replace(k, descriptor=dataclasses.replace(k.descriptor, private_segment_fixed_size=80))
    mod.programs["call_private"] = executor.Program(mod, small)
    with pytest.raises(EmuError, match=r"scratch_store_b32 off, v9, s33.*outside the kernel's 80 B private segment"):
        mod.launch("call_private", (1, 1, 1), (48, 1, 1), struct.pack("<QQ", dev.alloc(256), dev.alloc(256)))


@needs_llvm
@pytest.mark.parametrize("bad", [0, 2])
def test_call_forms_and_per_wave_targets(bad, tmp_path):
    dev = Device()
    mod = dev.load(assemble_co(ASM, tmp_path, [f"-Wa,-defsym,BAD={bad}", "-Wa,-defsym,BADWAIT=0"]), "calls.co")
    out = dev.alloc(8 * 128)
    run = lambda: mod.launch("calls", (1, 1, 1), (128, 1, 1), struct.pack("<Q", out))  # noqa: E731
    if bad:
        with pytest.raises(EmuError, match="not an instruction of its program"):
            run()
        return
    st = run()
    got = np.frombuffer(dev.read(out, 8 * 128), np.uint32).reshape(128, 2)
    wave = np.arange(128) // 32
    assert (got[:, 0] == np.where(wave % 2 == 1, 33, 21)).all()
    # s_swappc_b64 wrote the address of the instruction after it: .Lret - .Lpc bytes past the s_getpc_b64 value
    lpc = [i for i in mod.insts if i.name == "s_getpc_b64"][0]
    ret = [i for i in mod.insts if i.name == "s_swappc_b64"][0]
    assert (got[:, 1] == ret.offset + ret.size - (lpc.offset + lpc.size)).all()
    assert st["BRANCH"] == 4 * (1 + 1 + 2 + 1)       # s_call, s_swappc, two s_setpc, s_endpgm per wave


@needs_llvm
def test_jump_through_a_pending_sgpr_pair_is_caught(tmp_path):
    """The sanitizer sees s_setpc_b64's SGPR pair as read (facts.py): jumping through an s_load result before
    s_wait_kmcnt stops the run."""
    dev = Device()
    mod = dev.load(assemble_co(ASM, tmp_path, ["-Wa,-defsym,BAD=0", "-Wa,-defsym,BADWAIT=1"]), "calls.co")
    with pytest.raises(EmuError, match=r"s_setpc_b64 s\[12:13\]"):
        mod.launch("calls", (1, 1, 1), (32, 1, 1), struct.pack("<Q", dev.alloc(8 * 32)))


@needs_llvm
def test_decode_matches_objdump():
    want, bad = decode_mismatches(CO)
    assert want and not bad, bad[:10]
