"""Flat addressing by aperture (docs/rdna4.md §Flat apertures): clang -O3 kernels whose generic pointers select
between a private / __shared__ array and a global buffer (tests/emu/corpus/clang/flat_private.hip, the .co checked
in) run with the sanitizer on and give bitwise the values of a numpy model; the aperture operands read as 64-bit
values; hand-written flat accesses outside the private or group segment are stopped; decode equals llvm-objdump."""
import struct
from pathlib import Path

import numpy as np
import pytest

from llvm_tools import assemble_co, decode_mismatches, needs_llvm
from sage_co.emu import Device, EmuError
from sage_co.emu.state import APERTURE_OPERANDS, PRIVATE_BASE, SHARED_BASE, SRC_PRIVATE_BASE

CO = Path(__file__).parent / "corpus" / "clang" / "flat_private.co"
N = 64


@pytest.fixture()
def env(clang_corpus):
    return clang_corpus(CO.name)


def _private_model(x):
    """flat_private in numpy: each lane's 32-word array (private or its spill slice), the +7, the weighted gather."""
    t = np.arange(N, dtype=np.uint64)
    arr = (x[:, None].astype(np.uint64) * np.arange(32, dtype=np.uint64) + t[:, None]) & 0xFFFFFFFF
    arr[t.astype(int), (x & 31).astype(int)] += 7
    idx = (x[(t[:, None].astype(int) + np.arange(64)) & 63] & 31).astype(int)        # [t, k]
    s = (arr[t.astype(int)[:, None], idx] * np.arange(1, 65, dtype=np.uint64)).sum(axis=1)
    return (s & 0xFFFFFFFF).astype(np.uint32), (arr & 0xFFFFFFFF).astype(np.uint32)


@pytest.mark.parametrize("odd", ["mixed", "all_private", "all_global"])
def test_flat_private(env, odd):
    dev, mod, put, get = env
    x = np.random.default_rng(3).integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32)
    x = {"mixed": x, "all_private": x | 1, "all_global": x & ~np.uint32(1)}[odd]
    spill = np.full(32 * N, 0xDEADBEEF, np.uint32)
    po, ps = dev.alloc(4 * N), put(spill)
    st = mod.launch("flat_private", (1, 1, 1), (N, 1, 1), struct.pack("<QQQ", po, ps, put(x)))
    want, arr = _private_model(x)
    assert (get(po, np.uint32, N) == want).all()
    # the global lanes wrote their slice of spill; the private lanes left theirs untouched
    got_spill = get(ps, np.uint32, 32 * N).reshape(N, 32)
    glob = (x & 1) == 0
    assert (got_spill[glob] == arr[glob]).all() and (got_spill[~glob] == 0xDEADBEEF).all()
    assert st["VMEM_LOAD"] > 0 and st["VMEM_STORE"] > 0


def test_flat_shared_atomic(env):
    dev, mod, put, get = env
    x = np.random.default_rng(4).integers(0, 2**20, N, dtype=np.uint64).astype(np.uint32)
    spill = np.arange(N, dtype=np.uint32) * 1000
    po, ps = dev.alloc(4 * N), put(spill)
    mod.launch("flat_shared", (1, 1, 1), (N, 1, 1), struct.pack("<QQQ", po, ps, put(x)))
    t = np.arange(N)
    lds = (t * 3).astype(np.uint32)
    sh = (x & 2) != 0
    want = np.empty(N, np.uint32)
    # every lane's address is distinct (LDS word t+1 or spill word t): old + the updated value
    old = np.where(sh, lds[(t + 1) & 63], spill)
    want[:] = old + (old + x)
    assert (get(po, np.uint32, N) == want).all()
    assert (get(ps, np.uint32, N) == np.where(sh, spill, spill + x)).all()


ASM = r"""
        .amdgcn_target "amdgcn-amd-amdhsa--gfx1201"
        .amdhsa_code_object_version 5
        .text
        .globl apertures
        .p2align 8
        .type apertures,@function
apertures:                                  // store the four 64-bit aperture operands, then one flat access
        s_load_b64 s[0:1], s[0:1], 0x0
        s_mov_b64 s[2:3], src_shared_base
        s_mov_b64 s[4:5], src_shared_limit
        s_mov_b64 s[6:7], src_private_base
        s_mov_b64 s[8:9], src_private_limit
        v_mov_b32 v0, 0
        v_mov_b32 v1, s2
        v_mov_b32 v2, s3
        v_mov_b32 v3, s4
        v_mov_b32 v4, s5
        v_mov_b32 v5, s6
        v_mov_b32 v6, s7
        v_mov_b32 v7, s8
        v_mov_b32 v8, s9
        s_wait_kmcnt 0
        global_store_b128 v0, v[1:4], s[0:1]
        global_store_b128 v0, v[5:8], s[0:1] offset:16
        v_mov_b32 v10, OFFSET
        v_mov_b32 v11, HIGH
        flat_load_b32 v12, v[10:11]
        s_wait_loadcnt_dscnt 0
        s_endpgm
        .rodata
        .p2align 6
        .amdhsa_kernel apertures
          .amdhsa_kernarg_size 8
          .amdhsa_user_sgpr_count 2
          .amdhsa_user_sgpr_kernarg_segment_ptr 1
          .amdhsa_private_segment_fixed_size 64
          .amdhsa_group_segment_fixed_size 128
          .amdhsa_wavefront_size32 1
          .amdhsa_next_free_vgpr 16
          .amdhsa_next_free_sgpr 16
        .end_amdhsa_kernel
        .amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.kernels:
  - { .name: apertures, .symbol: apertures.kd, .kernarg_segment_size: 8, .kernarg_segment_align: 8, .group_segment_fixed_size: 128, .private_segment_fixed_size: 64, .wavefront_size: 32, .sgpr_count: 16, .vgpr_count: 16, .max_flat_workgroup_size: 32, .args: [ { .offset: 0, .size: 8, .value_kind: global_buffer } ] }
...
        .end_amdgpu_metadata
"""


@needs_llvm
@pytest.mark.parametrize("kind,offset,ok", [("private", 60, True), ("private", 64, False), ("shared", 124, True),
                                            ("shared", 128, False)])
def test_aperture_operands_and_bounds(kind, offset, ok, tmp_path):
    dev = Device()
    high = (PRIVATE_BASE if kind == "private" else SHARED_BASE) >> 32
    src = tmp_path / "apertures.s"
    src.write_text(ASM.replace("OFFSET", hex(offset)).replace("HIGH", hex(high)))
    mod = dev.load(assemble_co(src, tmp_path), "apertures.co")
    out = dev.alloc(32)
    run = lambda: mod.launch("apertures", (1, 1, 1), (32, 1, 1), struct.pack("<Q", out))  # noqa: E731
    if not ok:
        with pytest.raises(EmuError, match="private segment" if kind == "private" else "group segment"):
            run()
        return
    run()
    vals = np.frombuffer(dev.read(out, 32), np.uint64)
    assert list(vals) == [APERTURE_OPERANDS[c] for c in (235, 236, 237, 238)]
    assert vals[2] == APERTURE_OPERANDS[SRC_PRIVATE_BASE] and vals[2] % 2**32 == 0


@needs_llvm
def test_decode_matches_objdump():
    want, bad = decode_mismatches(CO)
    assert want and not bad, bad[:10]
    text = " ".join(t for _, t in want)
    assert "src_private_base" in text and "src_shared_base" in text and "flat_atomic_add_u32" in text
