"""Integer atomics beyond memory_ops' 32-bit set: LDS atomics that return the old value (`ds_*_rtn_*`), 64-bit LDS
atomics, `ds_cmpstore` / `ds_inc` / `ds_dec` / `ds_mskor` / `ds_storexchg`, and the global atomics on 64-bit items
plus `global_atomic_cmpswap_b32` / `inc_u32` / `dec_u32` (docs/rdna4.md §Atomics). Asked after memory_ops.build for
DS and VGLOBAL, so the atomics memory_ops already does (32-bit DS without return, the 32-bit global set) stay there.

Order: the lanes of one execution of an instruction over a set of waves are applied one at a time, wave ascending,
then lane ascending (the hardware's order is not documented; results that depend on it are the emulator's choice).
To keep that cheap, lanes are applied in rounds: round r applies every address's r-th lane at once (addresses within a
round are distinct), so lanes to one address still see each other's results in ascending order.
"""
from __future__ import annotations

import numpy as np

from sage_co.emu import memory_ops as mo
from sage_co.emu.state import EmuError, F

U32, U64, I32, I64 = np.uint32, np.uint64, np.int32, np.int64


def _signed(fn, unsigned, signed):
    return lambda o, d, c: fn(o.view(signed), d.view(signed)).view(unsigned)


def _ops(unsigned, signed):
    """op name -> new value f(old, data, data2) on arrays of the item type (pseudocode of docs/rdna4.md §Atomics)."""
    one, zero = unsigned(1), unsigned(0)
    return {
        "add": lambda o, d, c: o + d, "sub": lambda o, d, c: o - d, "rsub": lambda o, d, c: d - o,
        "and": lambda o, d, c: o & d, "or": lambda o, d, c: o | d, "xor": lambda o, d, c: o ^ d,
        "min_u": lambda o, d, c: np.minimum(o, d), "max_u": lambda o, d, c: np.maximum(o, d),
        "min_i": _signed(np.minimum, unsigned, signed), "max_i": _signed(np.maximum, unsigned, signed),
        "swap": lambda o, d, c: d,
        "cmpswap": lambda o, d, c: np.where(o == c, d, o),          # d = the new value (src), c = the compare value
        "inc": lambda o, d, c: np.where(o >= d, zero, o + one),
        "dec": lambda o, d, c: np.where((o == zero) | (o > d), d, o - one),
        "mskor": lambda o, d, c: (o & ~d) | c,
    }


OPS = {4: _ops(U32, I32), 8: _ops(U64, I64)}
TWO_DATA = ("cmpswap", "mskor")           # ops with a second data operand
# instruction name part -> op; the type suffix (u32, i32, b32, u64, i64, b64) picks the size and min/max signedness
_DS_NAMES = {"add": "add", "sub": "sub", "rsub": "rsub", "and": "and", "or": "or", "xor": "xor", "min": "min",
             "max": "max", "storexchg": "swap", "cmpstore": "cmpswap", "inc": "inc", "dec": "dec", "mskor": "mskor"}
_GLOBAL_NAMES = {"add": "add", "sub": "sub", "and": "and", "or": "or", "xor": "xor", "min": "min", "max": "max",
                 "swap": "swap", "cmpswap": "cmpswap", "inc": "inc", "dec": "dec"}


def _parse(body: str, names: dict):
    """'add_rtn_u64' / 'max_i32' -> (op, nbytes, returns) or None."""
    parts = body.split("_")
    if len(parts) not in (2, 3) or parts[0] not in names or (len(parts) == 3 and parts[1] != "rtn"):
        return None
    ty = parts[-1]
    if ty not in ("u32", "i32", "b32", "u64", "i64", "b64"):
        return None
    op = names[parts[0]]
    if op in ("min", "max"):
        op += "_i" if ty[0] == "i" else "_u"
    return op, int(ty[1:]) // 8, len(parts) == 3


def apply_in_order(mem, idx, data, data2, fn):
    """Apply fn to mem[idx[k]] for k ascending (idx: item indices of the lanes in order; data, data2: their operands);
    returns the old values. Rounds of distinct addresses (module docstring)."""
    old = np.empty(len(idx), dtype=mem.dtype)
    if len(idx) == 0:
        return old
    order = np.argsort(idx, kind="stable")
    s = idx[order]
    first = np.r_[True, s[1:] != s[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(len(s)), 0))
    rank = np.empty(len(idx), dtype=np.int64)
    rank[order] = np.arange(len(s)) - start
    for r in range(int(rank.max()) + 1):
        k = np.flatnonzero(rank == r) if r or not first.all() else slice(None)
        at = idx[k]
        o = mem[at]
        old[k] = o
        mem[at] = fn(o, data[k], data2[k])
    return old


def items(mem, nbytes):
    """The byte memory viewed as items of nbytes (the tail that is not a whole item left out)."""
    return mem[:len(mem) // nbytes * nbytes].view(U64 if nbytes == 8 else U32)


def lane_operand(V, r, sel, nbytes):
    """The operand starting at VGPR r of every lane as [n, 32] items (a 64-bit item from the pair r, r + 1)."""
    lo = V[r][sel]
    if nbytes == 4:
        return lo
    return lo.astype(U64) | (V[r + 1][sel].astype(U64) << U64(32))


def as_rows(vals, nbytes):
    if nbytes == 4:
        return vals[:, None]
    return np.stack([(vals & U64(0xFFFFFFFF)).astype(U32), (vals >> U64(32)).astype(U32)], axis=1)


def parse_global(body: str):
    """'add_u64' (a global_/flat_atomic_ suffix) -> (op, nbytes) or None."""
    got = _parse(body, _GLOBAL_NAMES)
    return got[:2] if got and not got[2] else None


def build(st, ops, inst, pc):
    name = inst.name
    if inst.enc == "DS" and name.startswith("ds_"):
        got = _parse(name[3:], _DS_NAMES)
        return _ds(st, inst, pc, *got) if got else None
    if inst.enc == "VGLOBAL" and name.startswith("global_atomic_"):
        got = _parse(name[len("global_atomic_"):], _GLOBAL_NAMES)
        if got is None:
            return None
        return _global(st, inst, pc, got[0], got[1], (F(inst, "th") & 1) == 1)   # TH_ATOMIC_RETURN
    return None


def _ds(st, inst, pc, op, nbytes, rtn):
    """DS atomic: address = ADDR + offset (modulo 2^32, within the workgroup's LDS), DATA = data0, DATA2 = data1,
    the old value to vdst when `_rtn`."""
    fn, V = OPS[nbytes][op], st.V
    ad, d0, d1, vd, off16 = F(inst, "addr"), F(inst, "data0"), F(inst, "data1"), F(inst, "vdst"), F(inst, "offset")
    mem = items(st.lds, nbytes)
    two = op in TWO_DATA

    def h(sel):
        m = mo._mask(st, sel)
        flat, ok = mo._lds_index(st, pc, sel, m, V[ad][sel].astype(I64) + off16, nbytes, inst.name, True)
        if (flat % nbytes).any():
            st.fail(pc, f"misaligned {8 * nbytes}-bit LDS atomic")
        data = lane_operand(V, d0, sel, nbytes)[m]
        data2 = lane_operand(V, d1, sel, nbytes)[m] if two else data
        old = np.zeros(len(flat), dtype=mem.dtype)          # outside the group segment: no access, returns 0
        old[ok] = apply_in_order(mem, flat[ok] // nbytes, data[ok], data2[ok], fn)
        if rtn:
            mo._vwrite_rows(V, vd, sel, m, as_rows(old, nbytes))
    return h


def _global(st, inst, pc, op, nbytes, rtn):
    """Global atomic: DATA = vsrc (the new value, and for cmpswap the compare value in the next 1 or 2 VGPRs)."""
    if op in ("rsub", "mskor"):
        raise EmuError(f"{inst.name}: no such global atomic")
    fn, V = OPS[nbytes][op], st.V
    vs, vd = F(inst, "vsrc"), F(inst, "vdst")
    addresses = mo.global_addresses(st, inst)
    two = op == "cmpswap"

    def h(sel):
        m = mo._mask(st, sel)
        off = mo._active(addresses(sel), m)
        mo.check_global(st, pc, sel, m, off, nbytes, "global atomic")
        if (off % nbytes).any():
            st.fail(pc, f"misaligned {8 * nbytes}-bit atomic")
        data = lane_operand(V, vs, sel, nbytes)[m]
        data2 = lane_operand(V, vs + nbytes // 4, sel, nbytes)[m] if two else data
        old = apply_in_order(items(st.mem, nbytes), off // nbytes, data, data2, fn)
        if rtn:
            mo._vwrite_rows(V, vd, sel, m, as_rows(old, nbytes))
    return h
