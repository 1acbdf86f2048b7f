"""Atomics whose result is used (docs/rdna4.md §Atomics): clang -O3 kernels (tests/emu/corpus/clang/atomics.hip, the
.co checked in) with LDS atomics with return (`ds_add/sub/max/min/and/or/xor_rtn`, `ds_storexchg_rtn_b32`,
`ds_cmpstore_rtn_b32`) and 64-bit global atomics (`global_atomic_add/max/min/swap_*64` with return,
`global_atomic_add_u64` without, `global_atomic_cmpswap_b64`), sanitizer on, bitwise against numpy.

The values an atomic returns depend on the order in which the lanes' operations are applied, which the hardware does
not document. The emulator applies them wave ascending, then lane ascending; the tests assert only what holds in
every order (final memory, and for each returned value that it is the memory value just before that lane's
operation in *some* order: e.g. for add, {r_i + x_i} + {initial} == {r_i} + {final} as multisets), except
`test_emulator_lane_order`, which pins the emulator's documented order."""
import struct
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from llvm_tools import decode_mismatches, needs_llvm
from sage_co.emu import Device

CO = Path(__file__).parent / "corpus" / "clang" / "atomics.co"
NWG = 3
M32, M64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF


def init(i):
    return 0x7FFFFFFF if i in (7, 8) else 0xFFFFFFFF if i == 14 else 0 if i == 13 else i * 1000


@pytest.fixture()
def env(clang_corpus):
    return clang_corpus(CO.name)


def chain(returned, operand, initial, final, step, mask):
    """The returned values are the successive memory values of one order of the lanes' operations: the multiset of
    (value before, value after) pairs links initial to final. {step(r_i, x_i)} + {initial} == {r_i} + {final}."""
    after = Counter(step(int(r), int(x)) & mask for r, x in zip(returned, operand))
    before = Counter(int(r) for r in returned)
    after[initial] += 1
    before[final] += 1
    return after == before


def run_lds(env, x):
    dev, mod, put, get = env
    po, pl = dev.alloc(4 * 10 * 64 * NWG), dev.alloc(4 * 16 * NWG)
    st = mod.launch("lds_rtn", (NWG, 1, 1), (64, 1, 1), struct.pack("<QQQ", po, pl, put(x)))
    return get(po, np.uint32, 10 * 64 * NWG).reshape(NWG, 64, 10), get(pl, np.uint32, 16 * NWG).reshape(NWG, 16), st


@pytest.mark.parametrize("seed", [0, 1])
def test_lds_atomics_with_return(env, seed):
    x = np.random.default_rng(seed).integers(0, 2**32, 64 * NWG, dtype=np.uint64).astype(np.uint32)
    out, c, st = run_lds(env, x)
    assert st["LDS"] > 0
    t = np.arange(64)
    for wg in range(NWG):
        xs, o, fin = x[wg * 64:(wg + 1) * 64], out[wg], c[wg]
        xi = xs.view(np.int32)
        # 0: fetch_add on one address (LLVM's atomic optimizer: one lane's ds_add_rtn_u32 plus a wave scan)
        assert chain(o[:, 0], xs, init(0), (init(0) + int(xs.astype(np.uint64).sum())) & M32,
                     lambda r, v: r + v, M32)
        # 1: fetch_add(&c[1 + (t & 3)], 1): per slot the returned values are exactly 0..15 above the initial value
        for s in range(4):
            assert sorted(o[t % 4 == s, 1] - init(1 + s)) == list(range(16)) and fin[1 + s] == init(1 + s) + 16
        for s in range(2):
            lanes = t % 2 == s
            # 2: u32 max; 3: i32 min -- every returned value is the initial one or an earlier operand, and the
            # running extreme: r_i = max(initial, operands applied before i) is checked through the chain
            assert fin[5 + s] == max(init(5 + s), int(xs[lanes].max()))
            assert chain(o[lanes, 2], xs[lanes], init(5 + s), int(fin[5 + s]), max, M32)
            assert int(fin[7 + s]) == min(init(7 + s), int(xi[lanes].min())) & M32
            ri = o[lanes, 3].view(np.int32)
            assert chain(ri, xi[lanes], init(7 + s), int(np.int32(fin[7 + s])), min, -1)
            # 4: fetch_sub of t; 5: exchange with t
            assert fin[9 + s] == (init(9 + s) - int(t[lanes].sum())) & M32
            assert chain(o[lanes, 4], t[lanes], init(9 + s), int(fin[9 + s]), lambda r, v: r - v, M32)
            assert Counter(o[lanes, 5].tolist()) + Counter([int(fin[11 + s])]) == \
                Counter(t[lanes].tolist()) + Counter([init(11 + s)])
        # 6: the compare-exchange loop: c[13] counted 0..64, each lane's successful exchange returned its t
        assert (o[:, 6] == t).all() and fin[13] == 64
        # 7: fetch_and of ~bit, 8: fetch_or of bit (bit = 1 << (t & 31)); both end where every order ends
        bit = (1 << (t & 31)).astype(np.uint32)
        assert fin[14] == 0 and fin[15] == M32
        assert chain(o[:, 7], ~bit, init(14), 0, lambda r, v: r & v, M32)
        assert chain(o[:, 8], bit, init(15), M32, lambda r, v: r | v, M32)
        # 9: fetch_xor on c[0] after the barrier
        xor = int(np.bitwise_xor.reduce(xs))
        start = (init(0) + int(xs.astype(np.uint64).sum())) & M32
        assert fin[0] == start ^ xor
        assert chain(o[:, 9], xs, start, start ^ xor, lambda r, v: r ^ v, M32)


def test_emulator_lane_order(env):
    """The emulator's order (wave ascending, then lane ascending; docs/rdna4.md §Atomics): the 16 lanes of one
    address of `fetch_add(&c[1 + (t & 3)], 1)` get 0..15 in lane order, and the exchange chain runs lane by lane."""
    x = np.arange(64 * NWG, dtype=np.uint32)
    out, c, _ = run_lds(env, x)
    t = np.arange(64)
    assert (out[:, :, 1] == init(1) + 1000 * (t % 4) + t // 4).all()
    for s in range(2):
        lanes = t[t % 2 == s]
        assert (out[:, lanes, 5] == np.r_[init(11 + s), lanes[:-1]]).all()


def test_global_u64_with_return(env):
    dev, mod, put, get = env
    n = 64 * NWG
    x = np.random.default_rng(5).integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    v = x.astype(np.uint64) | ((x.astype(np.uint64) * 2654435761) & M32) << np.uint64(32)
    acc0 = np.array([2**63 + 5, 7, 2**62, 99], np.uint64)
    pa, po = put(acc0), dev.alloc(8 * 4 * n)
    st = mod.launch("global_rtn_u64", (NWG, 1, 1), (64, 1, 1), struct.pack("<QQQ", po, pa, put(x)))
    out, acc = get(po, np.uint64, 4 * n).reshape(n, 4), get(pa, np.uint64, 4)
    vi, vs = [int(a) for a in v], [int(a) for a in v.view(np.int64)]
    assert int(acc[0]) == (int(acc0[0]) + sum(vi)) & M64
    assert chain(out[:, 0], v, int(acc0[0]), int(acc[0]), lambda r, a: r + a, M64)
    assert int(acc[1]) == max(vi + [int(acc0[1])])
    assert chain(out[:, 1], v, int(acc0[1]), int(acc[1]), max, M64)
    assert int(acc.view(np.int64)[2]) == min(vs + [int(acc0[2])])
    assert chain(out[:, 2].view(np.int64), v.view(np.int64), int(acc0[2]), int(acc.view(np.int64)[2]), min, -1)
    assert Counter(out[:, 3].tolist()) + Counter([int(acc[3])]) == Counter(vi) + Counter([int(acc0[3])])
    assert st["VMEM_LOAD"] > 0


def test_global_u64_without_return_and_cmpswap(env):
    dev, mod, put, get = env
    n = 64 * NWG
    x = np.random.default_rng(6).integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    sq = [int(a) * int(a) for a in x]
    acc0 = np.array([2**64 - 3, 12345], np.uint64)
    pa = put(acc0)
    mod.launch("global_u64_nortn", (NWG, 1, 1), (64, 1, 1), struct.pack("<QQ", pa, put(x)))
    acc = get(pa, np.uint64, 2)
    assert int(acc[0]) == (int(acc0[0]) + sum(sq)) & M64          # carries across the 64-bit wrap
    assert int(acc[1]) == max(sq + [int(acc0[1])])                # the compare-and-swap max loop


@needs_llvm
def test_decode_matches_objdump():
    want, bad = decode_mismatches(CO)
    assert want and not bad, bad[:10]
    text = " ".join(t for _, t in want)
    for form in ("ds_add_rtn_u32", "ds_max_rtn_u32", "ds_min_rtn_i32", "ds_sub_rtn_u32", "ds_storexchg_rtn_b32",
                 "ds_cmpstore_rtn_b32", "ds_and_rtn_b32", "ds_or_rtn_b32", "ds_xor_rtn_b32",
                 "global_atomic_add_u64", "global_atomic_max_u64", "global_atomic_min_i64", "global_atomic_swap_b64",
                 "global_atomic_cmpswap_b64", "flat_atomic_add_u64", "flat_atomic_swap_b64"):
        assert form in text, form


FORMS = Path(__file__).parent / "asm" / "atomic_forms.s"


@needs_llvm
def test_atomic_forms_against_the_pseudocode(tmp_path):
    """tests/emu/asm/atomic_forms.s: each lane on its own addresses, so every returned value and final memory word
    is the docs/rdna4.md §Atomics pseudocode's, independent of lane order; bitwise."""
    from llvm_tools import assemble_co
    rng = np.random.default_rng(11)
    a, b, c, d = (rng.integers(0, 2**32, 32, dtype=np.uint64) for _ in range(4))
    a[:8] = b[:8]                          # ds_inc/dec and the global cmpswap: equal operands on some lanes
    b[8:12], a[8:12] = 0, 0                # a = 0: ds_dec returns to b
    c[12:16] = b[12:16]                    # ds_cmpstore_b32: cmp (b) == new (c) is harmless; mem a == cmp b below
    a[16:20] = b[16:20] = c[16:20]
    ins = np.stack([a, b, c, d], axis=1).astype(np.uint32)
    g0 = rng.integers(0, 2**64, (32, 4), dtype=np.uint64)
    g0[::2, 0] = (g0[::2, 0] & np.uint64(0xFFFFFFFF00000000)) | b[::2]     # cmpswap_b32 matches on even lanes
    g0[:4, 3] = 0                                                          # dec_u64 of 0 -> C
    dev = Device()
    mod = dev.load(assemble_co(FORMS, tmp_path), "atomic_forms.co")
    pout, pg, pin = dev.alloc(144 * 32), dev.alloc(32 * 32), dev.alloc(16 * 32)
    dev.write(pg, g0)
    dev.write(pin, ins)
    mod.launch("atomic_forms", (1, 1, 1), (32, 1, 1), struct.pack("<QQQ", pout, pg, pin))
    out = np.frombuffer(dev.read(pout, 144 * 32), np.uint32).reshape(32, 36)
    g = np.frombuffer(dev.read(pg, 32 * 32), np.uint64).reshape(32, 4)
    for t in range(32):
        A, B, Cc, D = (int(v) for v in (a[t], b[t], c[t], d[t]))
        AA, CC = A | B << 32, Cc | D << 32
        u64 = lambda lo: int(out[t, lo]) | int(out[t, lo + 1]) << 32         # noqa: E731
        lds = out[t, 20:36]
        ldsq = lambda k: int(lds[k]) | int(lds[k + 1]) << 32                 # noqa: E731
        assert u64(0) == AA and ldsq(0) == (AA + CC) & M64                  # ds_add_rtn_u64
        assert u64(2) == AA and ldsq(2) == CC                               # cmpstore_rtn_b64: cmp A matches
        assert u64(4) == AA and ldsq(4) == (CC if AA == CC else AA)         # cmp C: stores only if A == C
        assert out[t, 6] == A and lds[6] == (0 if A >= B else A + 1)        # ds_inc_rtn_u32
        assert out[t, 7] == A and lds[7] == (B if A == 0 or A > B else A - 1)   # ds_dec_rtn_u32
        assert out[t, 8] == A and lds[8] == (A & ~B & M32) | Cc            # ds_mskor_rtn_b32
        assert out[t, 9] == A and lds[9] == (B - A) & M32                   # ds_rsub_rtn_u32
        assert lds[10] == min(np.int32(np.uint32(A)), np.int32(np.uint32(B))).astype(np.int64) & M32   # ds_min_i32
        assert lds[11] == (Cc if A == B else A)                             # ds_cmpstore_b32 (new c, cmp b)
        assert (lds[12:16] == 0).all()
        G = [int(v) for v in g0[t]]
        lo0, hi0 = G[0] & M32, G[0] >> 32
        assert out[t, 10] == lo0 and out[t, 11] == hi0                      # cmpswap_b32 / inc_u32 return old
        assert int(g[t, 0]) == ((A if lo0 == B else lo0) | (0 if hi0 >= Cc else hi0 + 1) << 32)
        assert u64(12) == G[1] and int(g[t, 1]) == (G[1] - CC) & M64        # global_atomic_sub_u64
        assert u64(14) == G[2] and int(g[t, 2]) == G[2] ^ AA                # global_atomic_xor_b64
        assert u64(16) == G[3] and int(g[t, 3]) == (CC if G[3] == 0 or G[3] > CC else G[3] - 1)   # dec_u64


def test_flat_u64_atomics(env):
    """flat_atomic_add_u64 / flat_atomic_swap_b64 with return through a pointer that selects per lane between a
    __shared__ word and a global one (docs/rdna4.md §Flat apertures); every lane its own word: bitwise."""
    dev, mod, put, get = env
    x = np.random.default_rng(12).integers(0, 2**32, 64, dtype=np.uint64)
    spill0 = np.random.default_rng(13).integers(0, 2**64, 64, dtype=np.uint64)
    po, pl, ps = dev.alloc(16 * 64), dev.alloc(8 * 64), put(spill0)
    mod.launch("flat_u64", (1, 1, 1), (64, 1, 1), struct.pack("<QQQQ", po, pl, ps, put(x.astype(np.uint32))))
    out, lds, spill = get(po, np.uint64, 128).reshape(64, 2), get(pl, np.uint64, 64), get(ps, np.uint64, 64)
    t = np.arange(64, dtype=np.uint64)
    tile0 = (t * np.uint64(3)) << np.uint64(33) | t
    v = x | (x << np.uint64(32))
    sh = (x & np.uint64(2)) != 0
    old = np.where(sh, tile0[(np.arange(64) + 1) & 63], spill0)
    assert (out[:, 0] == old).all() and (out[:, 1] == old + v).all()
    assert (spill == np.where(sh, spill0, v ^ t)).all()
    want_lds = tile0.copy()
    lanes = np.flatnonzero(sh)
    want_lds[(lanes + 1) & 63] = (v ^ t)[lanes]
    assert (lds == want_lds).all()
