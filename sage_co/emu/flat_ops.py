"""FLAT memory instructions (`flat_*`): each lane's 64-bit address is routed by aperture, as the hardware does
(docs/rdna4.md §Flat apertures). Address = the VGPR pair vaddr + the signed instruction offset; its high dword equal
to the private aperture's -> the lane's own scratch at the low dword (the offset scratch_* instructions use); equal
to the shared aperture's -> the workgroup's LDS at the low dword; anything else -> global memory. Each part gets the
checks of its own memory kind (memory_ops: live allocations, the private segment, the group segment). Compilers emit
flat access wherever a pointer's address space is not known, e.g. a pointer that selects between a private array
and a global buffer.
"""
from __future__ import annotations

import numpy as np

from sage_co.emu import atomic_ops as ao
from sage_co.emu import memory_ops as mo
from sage_co.emu.state import ARENA_VA, NULL, PRIVATE_BASE, SHARED_BASE, EmuError, F

U32, I64 = np.uint32, np.int64
PRIVATE_HI, SHARED_HI = PRIVATE_BASE >> 32, SHARED_BASE >> 32
LOW_DWORD = np.int64(0xFFFFFFFF)


def build(st, ops, inst, pc):
    if inst.enc != "VFLAT":
        return None
    op, ty = mo._split(inst.name, "flat_")
    if F(inst, "saddr", NULL) != NULL:
        raise EmuError(f"{inst.name} with an SGPR address is not a FLAT form (only global_*/scratch_* take saddr)")
    if op == "load" and ty in mo.LOADS:
        return _load(st, inst, pc, *mo.LOADS[ty])
    if op == "store" and ty in mo.STORES:
        return _store(st, inst, pc, *mo.STORES[ty])
    if op == "atomic":
        got = ao.parse_global(ty)
        return _atomic(st, inst, pc, got[0], got[1]) if got else None
    return None


class _Route:
    """Per-step routing of the active lanes of one flat instruction: the three lane masks ([n, 32], disjoint) and
    the matching offsets into global memory, the private segment and the LDS."""

    def __init__(self, st, inst, pc):
        self.st, self.pc, self.name = st, pc, inst.name
        self.vaddr, self.ioff = F(inst, "vaddr"), I64(F(inst, "offset"))
        self.priv, self.priv32, self.lane_base = mo.private_memory(st) if st.private_bytes else (None, None, None)

    def __call__(self, sel, nbytes: int, write: bool):
        st, V, m = self.st, self.st.V, mo._mask(self.st, sel)
        addr = (V[self.vaddr][sel].astype(I64) | (V[self.vaddr + 1][sel].astype(I64) << 32)) + self.ioff
        hi = addr >> 32
        parts = {}
        for kind, hit in (("private", hi == PRIVATE_HI), ("shared", hi == SHARED_HI)):
            hit &= m
            if hit.any():
                parts[kind] = hit
        if not parts:           # the common case: every active lane is global
            off = mo._active(addr, m) - ARENA_VA
            mo.check_global(st, self.pc, sel, m, off, nbytes, f"{self.name} (global)")
            return m, {"global": (m, off)}
        out = {}
        glob = m.copy()
        for hit in parts.values():
            glob &= ~hit
        if glob.any():
            off = addr[glob] - ARENA_VA
            mo.check_global(st, self.pc, sel, glob, off, nbytes, f"{self.name} (global)")
            out["global"] = (glob, off)
        if "private" in parts:
            hit = parts["private"]
            if self.priv is None:
                st.fail(self.pc, f"{self.name}: address in the private aperture but the kernel has no private "
                                 f"segment", *_first(st, sel, hit))
            idx = mo.private_index(st, self.pc, sel, hit, addr[hit] & LOW_DWORD, nbytes, self.lane_base,
                                   f"{self.name} (private aperture)")
            out["private"] = (hit, idx)
        if "shared" in parts:
            hit = parts["shared"]
            flat, ok = mo._lds_index(st, self.pc, sel, hit, addr & LOW_DWORD, nbytes, f"{self.name} (shared aperture)",
                                     write)
            out["shared"] = (hit, flat, ok)
        return m, out

    def memory(self, kind):
        st = self.st
        return {"global": (st.mem, st.mem32), "private": (self.priv, self.priv32),
                "shared": (st.lds, st.lds.view(U32))}[kind]


def _first(st, sel, hit):
    w, lane = np.argwhere(hit)[0]
    return st.waves_of(sel)[w], lane


def _load(st, inst, pc, nbytes, kind):
    route, V, vd = _Route(st, inst, pc), st.V, F(inst, "vdst")
    ndw = (nbytes + 3) // 4 if kind == "b" else 1

    def h(sel):
        m, parts = route(sel, nbytes, False)
        if "global" in parts and len(parts) == 1:
            raw = mo.mem_gather(st.mem, st.mem32, parts["global"][1], nbytes)
        else:
            rows = np.zeros(m.shape + ((nbytes + 3) // 4,), U32)      # [n, 32, dwords] of every lane
            for part, got in parts.items():
                mem, mem32 = route.memory(part)
                hit, idx = got[0], got[1]
                if part == "shared":
                    ok = got[2]
                    vals = np.zeros((len(idx), rows.shape[2]), U32)   # outside the group segment: reads 0
                    if ok.any():
                        vals[ok] = mo.mem_gather(mem, mem32, idx[ok], nbytes)
                else:
                    vals = mo.mem_gather(mem, mem32, idx, nbytes)
                rows[hit] = vals
            raw = rows[m]
        old = V[vd][sel][m] if kind.startswith(("lo", "hi")) else None
        mo._vwrite_rows(V, vd, sel, m, mo._shape_load(kind, raw, old) if kind != "b" else raw[:, :ndw])
    return h


def _store(st, inst, pc, nbytes, kind):
    route, V, vs = _Route(st, inst, pc), st.V, F(inst, "vsrc")
    nsrc = max(1, nbytes // 4)

    def h(sel):
        m, parts = route(sel, nbytes, True)
        for part, got in parts.items():
            mem, mem32 = route.memory(part)
            hit, idx = got[0], got[1]
            data = mo._store_data(kind, np.stack([V[vs + i][sel][hit] for i in range(nsrc)], axis=1), nbytes)
            if part == "shared":
                ok = got[2]
                idx, data = idx[ok], data[ok]          # outside the group segment: dropped
            if len(idx):
                mo.mem_scatter(mem, mem32, idx, data, nbytes)
    return h


def _atomic(st, inst, pc, op, nbytes):
    """Integer atomics on 32- or 64-bit items (atomic_ops: the global set's ops and order): each part (global, private,
    shared) applies its lanes in ascending order; the parts are separate memories, so that is the lane order."""
    route, V = _Route(st, inst, pc), st.V
    vs, vd = F(inst, "vsrc"), F(inst, "vdst")
    rtn = (F(inst, "th") & 1) == 1     # TH_ATOMIC_RETURN
    fn, two = ao.OPS[nbytes][op], op == "cmpswap"

    def h(sel):
        m, parts = route(sel, nbytes, True)
        data = ao.lane_operand(V, vs, sel, nbytes)
        data2 = ao.lane_operand(V, vs + nbytes // 4, sel, nbytes) if two else data
        olds = np.zeros(m.shape, dtype=data.dtype)
        for part, got in parts.items():
            hit, idx = got[0], got[1]
            if part == "shared":
                ok = got[2]
                hit = hit.copy()
                hit[hit] = ok                        # outside the group segment: no access, returns 0
                idx = idx[ok]
            if (idx % nbytes).any():
                # a private index is the lane's base (a multiple of the private segment size) + the offset
                st.fail(pc, f"misaligned {8 * nbytes}-bit atomic" if part != "private" or st.private_bytes % nbytes == 0
                        else f"a {8 * nbytes}-bit atomic on scratch with a {st.private_bytes} B private segment (not "
                             f"a multiple of {nbytes}) is not emulated")
            mem = ao.items(route.memory(part)[0], nbytes)
            olds[hit] = ao.apply_in_order(mem, idx // nbytes, data[hit], data2[hit], fn)
        if rtn:
            mo._vwrite_rows(V, vd, sel, m, ao.as_rows(olds[m], nbytes))
    return h
