"""Memory instructions: SMEM (s_load/s_buffer_load), VGLOBAL (global_*), VBUFFER (buffer_* with a V#), DS (LDS).

Data completes at issue (memory is instant in data terms); the sanitizer tracks what a wave may not read yet.
Only active lanes (EXEC) touch memory. Addresses of active lanes are flattened to 1-D, translated from fake VA
to arena offsets, bounds-checked, and gathered/scattered as dwords when aligned, else as bytes.
"""
from __future__ import annotations

import numpy as np

from sage_co.emu import sanitizer
from sage_co.emu.state import ALL, ARENA_VA, NULL, EmuError, F

U8, U16, U32, U64, I64 = np.uint8, np.uint16, np.uint32, np.uint64, np.int64
VA = np.uint64(ARENA_VA)


# ------------------------------------------------------------------------------------------------ global memory
def _where_lane(st, sel, mask, flat_idx):
    """(wave, lane) of the flat_idx-th active lane of mask [n, 32]."""
    wi, lane = np.nonzero(mask)
    waves = st.waves_of(sel)
    return waves[wi[flat_idx]], lane[flat_idx]


def check_global(st, pc, sel, mask, off: np.ndarray, nbytes: int, what: str):
    """off: int64 arena offsets of active lanes (row-major over mask). Raises on any access outside the arena,
    and with the sanitizer on, outside every live allocation."""
    if len(off) == 0:
        return
    lo, hi = int(off.min()), int(off.max()) + nbytes
    if lo >= 0 and hi <= len(st.mem):
        if not st.sanitize:
            return
        # the common case: every lane inside one live allocation (two reductions instead of a search per lane)
        i = int(np.searchsorted(st.live_starts, lo, side="right")) - 1
        if i >= 0 and hi <= st.live_ends[i]:
            return
    end = off + nbytes
    bad = (off < 0) | (end > len(st.mem))
    if st.sanitize:
        starts, ends = st.live_starts, st.live_ends
        i = np.searchsorted(starts, off, side="right") - 1
        ok = (i >= 0) & (end <= ends[np.maximum(i, 0)])
        bad |= ~ok
    if bad.any():
        k = int(np.argmax(bad))
        w, lane = _where_lane(st, sel, mask, k)
        st.fail(pc, f"{what} of {nbytes} B at address 0x{int(off[k]) + ARENA_VA:x} is outside every live "
                    f"allocation", w, lane)


# access size -> an item type of that size: an access aligned to its own size is one element of the memory viewed
# as that type, so a gather/scatter is one np.take / one 1-D fancy assignment (bytes are moved as they are)
_ITEM = {1: U8, 2: U16, 4: U32, 8: U64, 16: np.dtype((np.void, 16))}


def _items(mem, nbytes: int, off: np.ndarray):
    """(mem viewed as nbytes-sized items, item indices) when every offset is a multiple of nbytes, else None."""
    item = _ITEM.get(nbytes)
    if item is None or (off & (nbytes - 1)).any():
        return None
    return mem[:len(mem) - len(mem) % nbytes].view(item), off // nbytes if nbytes > 1 else off


def mem_gather(mem, mem32, off: np.ndarray, nbytes: int) -> np.ndarray:
    """[k] arena offsets -> uint32 [k, ceil(nbytes/4)] (sub-dword loads come back zero-extended in dword 0)."""
    ndw = (nbytes + 3) // 4
    items = _items(mem, nbytes, off)
    if items is not None:
        got = np.take(*items)
        return got.astype(U32)[:, None] if nbytes < 4 else got.view(U32).reshape(len(off), ndw)
    if nbytes % 4 == 0 and not (off & 3).any():
        idx = (off >> 2)[:, None] + np.arange(ndw)
        return mem32[idx]
    b = mem[off[:, None] + np.arange(nbytes)]
    if nbytes % 4:
        b = np.concatenate([b, np.zeros((len(off), ndw * 4 - nbytes), dtype=U8)], axis=1)
    return np.ascontiguousarray(b).view(U32)


def mem_scatter(mem, mem32, off: np.ndarray, data: np.ndarray, nbytes: int):
    """Write data uint32 [k, ndw] (low nbytes bytes of each row) at arena offsets; later lanes win on overlap."""
    items = _items(mem, nbytes, off)
    if items is not None:
        view, index = items
        if nbytes < 4:
            view[index] = data[:, 0].astype(view.dtype)            # the low bytes (little-endian)
        else:
            view[index] = np.ascontiguousarray(data[:, :nbytes // 4]).view(view.dtype).reshape(len(off))
        return
    if nbytes % 4 == 0 and not (off & 3).any():
        ndw = nbytes // 4
        mem32[(off >> 2)[:, None] + np.arange(ndw)] = data[:, :ndw]
        return
    b = np.ascontiguousarray(data).view(U8)[:, :nbytes]
    mem[off[:, None] + np.arange(nbytes)] = b


def _active(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """x [W', 32] -> the values of mask's active lanes, row-major [k] (a view when every lane is active)."""
    return x.reshape(-1) if mask.all() else x[mask]


def _vwrite_rows(V, r, sel, mask, data):
    """data [k, n] for the active lanes of mask [W', 32] -> VGPRs r..r+n-1 (inactive lanes untouched)."""
    n = data.shape[1]
    if mask.all():                                  # every lane: one strided copy of the whole block
        block = data.T.reshape(n, *mask.shape)
        if sel is ALL:
            V[r:r + n] = block
        else:
            V[r:r + n, sel] = block
        return
    for i in range(n):
        if sel is ALL:
            V[r + i][mask] = data[:, i]
        else:
            t = V[r + i][sel]
            t[mask] = data[:, i]
            V[r + i][sel] = t


# load result shaping: (nbytes, ndw_written, kind) ; kind: 'b' plain, 'u8','i8','u16','i16', 'd16lo*', 'd16hi*'
LOADS = {
    "b32": (4, "b"), "b64": (8, "b"), "b96": (12, "b"), "b128": (16, "b"),
    "u8": (1, "u8"), "i8": (1, "i8"), "u16": (2, "u16"), "i16": (2, "i16"),
    "d16_b16": (2, "lo16"), "d16_hi_b16": (2, "hi16"),
    "d16_u8": (1, "lo_u8"), "d16_i8": (1, "lo_i8"), "d16_hi_u8": (1, "hi_u8"), "d16_hi_i8": (1, "hi_i8"),
}
STORES = {"b8": (1, "lo"), "b16": (2, "lo"), "b32": (4, "lo"), "b64": (8, "lo"), "b96": (12, "lo"),
          "b128": (16, "lo"), "d16_hi_b8": (1, "hi"), "d16_hi_b16": (2, "hi")}


def _shape_load(kind, raw, old):
    """raw uint32 [k, ndw] loaded; old uint32 [k] previous dst (d16 forms merge). -> [k, ndw_dst]."""
    x = raw[:, 0]
    if kind == "b":
        return raw
    if kind == "u8":
        return (x & U32(0xFF))[:, None]
    if kind == "i8":
        return (x & U32(0xFF)).astype(U8).view(np.int8).astype(np.int32).view(U32)[:, None]
    if kind == "u16":
        return (x & U32(0xFFFF))[:, None]
    if kind == "i16":
        return (x & U32(0xFFFF)).astype(U16).view(np.int16).astype(np.int32).view(U32)[:, None]
    lo16 = {"lo16": x & U32(0xFFFF), "hi16": x & U32(0xFFFF), "lo_u8": x & U32(0xFF), "hi_u8": x & U32(0xFF),
            "lo_i8": (x & U32(0xFF)).astype(U8).view(np.int8).astype(np.int16).view(U16).astype(U32),
            "hi_i8": (x & U32(0xFF)).astype(U8).view(np.int8).astype(np.int16).view(U16).astype(U32)}[kind]
    if kind.startswith("hi"):
        return ((old & U32(0xFFFF)) | (lo16 << U32(16)))[:, None]
    return ((old & U32(0xFFFF0000)) | lo16)[:, None]


def _store_data(kind, rows, nbytes):
    """rows uint32 [k, n] store data -> [k, ndw] with the bytes to write at the bottom."""
    if kind == "hi":
        return (rows[:, :1] >> U32(16))
    return rows


def _mask(st, sel):
    return st.EXM if sel is ALL else st.EXM[sel]


def _split(name, prefix):
    rest = name[len(prefix):]
    if rest.startswith("load_"):
        return "load", rest[5:]
    if rest.startswith("store_"):
        return "store", rest[6:]
    if rest.startswith("atomic_"):
        return "atomic", rest[7:]
    return None, rest


# ------------------------------------------------------------------------------------------------ build
def build(st, ops, inst, pc):
    enc = inst.enc
    if enc == "SMEM":
        return _smem(st, ops, inst, pc)
    if enc == "VGLOBAL":
        return _vglobal(st, ops, inst, pc)
    if enc == "VBUFFER":
        return _vbuffer(st, ops, inst, pc)
    if enc == "DS":
        return _ds(st, ops, inst, pc)
    if enc == "VSCRATCH":
        return _vscratch(st, ops, inst, pc)
    return None


def _smem(st, ops, inst, pc):
    name = inst.name
    sizes = {"b32": 4, "b64": 8, "b96": 12, "b128": 16, "b256": 32, "b512": 64,
             "u8": 1, "i8": 1, "u16": 2, "i16": 2}
    if name.startswith("s_load_"):
        buffer = False
        ty = name[len("s_load_"):]
    elif name.startswith("s_buffer_load_"):
        buffer = True
        ty = name[len("s_buffer_load_"):]
    elif name in ("s_prefetch_data", "s_prefetch_inst", "s_prefetch_data_pc_rel", "s_prefetch_inst_pc_rel",
                  "s_dcache_inv"):
        return lambda sel: None
    else:
        return None
    if ty not in sizes:
        return None
    nbytes = sizes[ty]
    ndw = max(nbytes // 4, 1)
    S, sd, sb = st.S, F(inst, "sdata"), F(inst, "sbase")
    ioff = np.int64(F(inst, "offset"))
    soff = F(inst, "soffset")
    soff_r = ops.sread(inst, soff) if soff != NULL else None
    if sd + ndw > 106 and sd < 106:
        raise EmuError(f"s_load destination s{sd} + {ndw} dwords runs past s105")

    def h(sel):
        base = S[sb][sel].astype(I64) | (S[sb + 1][sel].astype(I64) << 32)
        n = len(base)
        off = np.full(n, ioff, dtype=I64)
        if soff_r is not None:
            off = off + np.asarray(soff_r(sel)).astype(I64)
        if buffer:
            nrec = S[sb + 2][sel].astype(I64)
            base = base & 0xFFFFFFFFFFFF
            inrange = off + nbytes <= nrec
        else:
            inrange = np.ones(n, dtype=bool)
        addr = base + off
        if nbytes >= 4:
            addr = addr & ~3     # SMEM ignores the two low address bits for dword loads
        a = addr - ARENA_VA
        idx = np.flatnonzero(inrange)
        data = np.zeros((n, ndw), dtype=U32)
        if len(idx):
            o = a[idx]
            _check_scalar(st, pc, sel, idx, o, nbytes)
            raw = mem_gather(st.mem, st.mem32, o, nbytes)
            if ty in ("b32", "b64", "b96", "b128", "b256", "b512"):
                data[idx] = raw
            else:
                data[idx] = _shape_load(ty, raw, np.zeros(len(idx), dtype=U32))
        for i in range(ndw):
            if sd + i != NULL:
                S[sd + i][sel] = data[:, i]
    return h


def _check_scalar(st, pc, sel, idx, off, nbytes):
    end = off + nbytes
    bad = (off < 0) | (end > len(st.mem))
    if st.sanitize:
        i = np.searchsorted(st.live_starts, off, side="right") - 1
        bad |= ~((i >= 0) & (end <= st.live_ends[np.maximum(i, 0)]))
    if bad.any():
        k = int(np.argmax(bad))
        w = st.waves_of(sel)[idx[k]]
        st.fail(pc, f"scalar load of {nbytes} B at address 0x{int(off[k]) + ARENA_VA:x} is outside every live "
                    f"allocation", w)


def global_addresses(st, inst):
    """addresses(sel) -> int64 arena offsets [n, 32] of every lane of a global_* instruction: the VGPR pair, or the
    SGPR pair + the VGPR's 32-bit offset, plus the instruction offset."""
    V, S = st.V, st.S
    saddr, vaddr, ioff = F(inst, "saddr"), F(inst, "vaddr"), np.int64(F(inst, "offset"))

    def addresses(sel):
        if saddr != NULL:
            base = S[saddr][sel].astype(I64) | (S[saddr + 1][sel].astype(I64) << 32)
            return base[:, None] + V[vaddr][sel].astype(I64) + (ioff - ARENA_VA)
        lo, hi = V[vaddr][sel].astype(I64), V[vaddr + 1][sel].astype(I64)
        return (lo | (hi << 32)) + (ioff - ARENA_VA)
    return addresses


def _vglobal(st, ops, inst, pc):
    op, ty = _split(inst.name, "global_")
    if op is None:
        if inst.name in ("global_inv", "global_wb", "global_wbinv"):
            return lambda sel: None
        return None
    V = st.V
    addresses = global_addresses(st, inst)

    if op == "load":
        if ty not in LOADS:
            return None
        nbytes, kind = LOADS[ty]
        vd = F(inst, "vdst")
        (nbytes + 3) // 4 if kind == "b" else 1

        def h(sel):
            m = _mask(st, sel)
            off = _active(addresses(sel), m)
            check_global(st, pc, sel, m, off, nbytes, "global load")
            raw = mem_gather(st.mem, st.mem32, off, nbytes)
            old = V[vd][sel][m] if kind.startswith(("lo", "hi")) else None
            _vwrite_rows(V, vd, sel, m, _shape_load(kind, raw, old))
        return h
    if op == "store":
        if ty not in STORES:
            return None
        nbytes, kind = STORES[ty]
        vs = F(inst, "vsrc")
        nsrc = max(1, nbytes // 4)

        def h(sel):
            m = _mask(st, sel)
            off = _active(addresses(sel), m)
            check_global(st, pc, sel, m, off, nbytes, "global store")
            rows = np.stack([_active(V[vs + i][sel], m) for i in range(nsrc)], axis=1)
            mem_scatter(st.mem, st.mem32, off, _store_data(kind, rows, nbytes), nbytes)
        return h
    if op == "atomic":
        return _global_atomic(st, ops, inst, pc, ty, addresses)
    return None


ATOMIC_U32 = {
    "add_u32": lambda o, d: o + d, "sub_u32": lambda o, d: o - d,
    "and_b32": lambda o, d: o & d, "or_b32": lambda o, d: o | d, "xor_b32": lambda o, d: o ^ d,
    "min_u32": np.minimum, "max_u32": np.maximum,
    "min_i32": lambda o, d: np.minimum(o.view(np.int32), d.view(np.int32)).view(U32),
    "max_i32": lambda o, d: np.maximum(o.view(np.int32), d.view(np.int32)).view(U32),
    "swap_b32": lambda o, d: d,
}


def _global_atomic(st, ops, inst, pc, ty, addresses):
    if ty not in ATOMIC_U32:
        return None
    fn = ATOMIC_U32[ty]
    V = st.V
    vs, vd = F(inst, "vsrc"), F(inst, "vdst")
    rtn = (F(inst, "th") & 1) == 1     # TH_ATOMIC_RETURN

    def h(sel):
        m = _mask(st, sel)
        off = _active(addresses(sel), m)
        check_global(st, pc, sel, m, off, 4, "global atomic")
        if (off & 3).any():
            st.fail(pc, "misaligned 32-bit atomic")
        data = V[vs][sel][m]
        olds = np.empty(len(off), dtype=U32)
        mem32 = st.mem32
        # lanes in order, one at a time: atomics to one address from several lanes serialize
        for i, (o, d) in enumerate(zip(off >> 2, data)):
            olds[i] = mem32[o]
            mem32[o] = fn(np.array([mem32[o]], dtype=U32), np.array([d], dtype=U32))[0]
        if rtn:
            _vwrite_rows(V, vd, sel, m, olds[:, None])
    return h


# ------------------------------------------------------------------------------------------------ buffer
def _vbuffer(st, ops, inst, pc):
    op, ty = _split(inst.name, "buffer_")
    if op is None:
        if inst.name in ("buffer_gl0_inv", "buffer_gl1_inv", "buffer_wbl2", "buffer_inv"):
            return lambda sel: None
        return None
    V, S = st.V, st.S
    rs, vaddr, ioff = F(inst, "rsrc"), F(inst, "vaddr"), np.int64(F(inst, "offset"))
    offen, idxen = F(inst, "offen"), F(inst, "idxen")
    soff = F(inst, "soffset")
    soff_r = ops.sread(inst, soff) if soff != NULL else None
    if op == "load":
        if ty not in LOADS:
            return None
        nbytes, kind = LOADS[ty]
    elif op == "store":
        if ty not in STORES:
            return None
        nbytes, kind = STORES[ty]
    else:
        return None
    vdata = F(inst, "vdata")

    def addresses(sel, m):
        """-> (arena offsets [k], in-range [k]) for the active lanes of m.

        docs/rdna4.md §Memory (V# words; OOB_SELECT on GFX11+): raw buffers (stride 0, OOB_SELECT 3) are out of range
        when offset + payload > NUM_RECORDS, judged per access: an access straddling NUM_RECORDS is out of range
        as a whole (loads give 0 in every dword, stores write nothing). Chosen: the range check uses
        voffset + inst_offset and leaves soffset out (UNVERIFIED which; the facts advise soffset = null).
        Structured forms (idxen, stride != 0) follow the OOB_SELECT table."""
        w0, w1, w2, w3 = (S[rs + i][sel].astype(I64) for i in range(4))
        base = w0 | ((w1 & 0xFFFF) << 32)
        stride = (w1 >> 16) & 0x3FFF
        nrec = w2
        oob_sel = (w3 >> 28) & 3
        if ((w3 >> 23) & 1).any():
            st.fail(pc, "V# with ADD_TID_ENABLE is not supported")
        n = len(base)
        if idxen and offen:
            index, voff = V[vaddr][sel].astype(I64), V[vaddr + 1][sel].astype(I64)
        elif idxen:
            index, voff = V[vaddr][sel].astype(I64), np.zeros((n, 32), dtype=I64)
        elif offen:
            index, voff = np.zeros((n, 32), dtype=I64), V[vaddr][sel].astype(I64)
        else:
            index, voff = np.zeros((n, 32), dtype=I64), np.zeros((n, 32), dtype=I64)
        offset = voff + ioff
        so = np.asarray(soff_r(sel)).astype(I64)[:, None] if soff_r is not None else 0
        stride2, nrec2, sel2 = stride[:, None], nrec[:, None], oob_sel[:, None]
        raw = (stride2 == 0) & (sel2 == 3)
        oob = np.where(raw, offset + nbytes > nrec2,
                       np.where(sel2 == 3, (index >= nrec2) | (offset + nbytes > stride2),
                                np.where(sel2 == 0, (index >= nrec2) | (offset + nbytes > stride2),
                                         np.where(sel2 == 1, index >= nrec2, nrec2 == 0))))
        addr = base[:, None] + so + offset + index * stride2 - ARENA_VA
        return addr[m], ~oob[m]

    if op == "load":
        vd = vdata
        ndw = (nbytes + 3) // 4 if kind == "b" else 1

        def h(sel):
            m = _mask(st, sel)
            off, ok = addresses(sel, m)
            data = np.zeros((len(off), ndw), dtype=U32)
            if ok.any():
                o = off[ok]
                mm = m.copy()
                mm[m] = ok
                check_global(st, pc, sel, mm, o, nbytes, "buffer load")
                raw = mem_gather(st.mem, st.mem32, o, nbytes)
                old = V[vd][sel][mm] if kind.startswith(("lo", "hi")) else None
                data[ok] = _shape_load(kind, raw, old) if kind != "b" else raw
            if kind.startswith(("lo", "hi")) and not ok.all():
                old_all = V[vd][sel][m]
                data[~ok] = _shape_load(kind, np.zeros((int((~ok).sum()), 1), dtype=U32), old_all[~ok])
            _vwrite_rows(V, vd, sel, m, data)
        return h

    nsrc = max(1, nbytes // 4)

    def hs(sel):
        m = _mask(st, sel)
        off, ok = addresses(sel, m)
        if not ok.any():
            return
        mm = m.copy()
        mm[m] = ok
        o = off[ok]
        check_global(st, pc, sel, mm, o, nbytes, "buffer store")
        rows = np.stack([V[vdata + i][sel][mm] for i in range(nsrc)], axis=1)
        mem_scatter(st.mem, st.mem32, o, _store_data(kind, rows, nbytes), nbytes)
    return hs


# ------------------------------------------------------------------------------------------------ LDS
DS_LOADS = {"b32": (4, "b"), "b64": (8, "b"), "b96": (12, "b"), "b128": (16, "b"),
            "u8": (1, "u8"), "i8": (1, "i8"), "u16": (2, "u16"), "i16": (2, "i16"),
            "u8_d16": (1, "lo_u8"), "u8_d16_hi": (1, "hi_u8"), "i8_d16": (1, "lo_i8"), "i8_d16_hi": (1, "hi_i8"),
            "u16_d16": (2, "lo16"), "u16_d16_hi": (2, "hi16")}
DS_STORES = {"b8": (1, "lo"), "b16": (2, "lo"), "b32": (4, "lo"), "b64": (8, "lo"), "b96": (12, "lo"),
             "b128": (16, "lo"), "b8_d16_hi": (1, "hi"), "b16_d16_hi": (2, "hi")}
DS_ATOMIC = {"add_u32": np.add, "sub_u32": np.subtract, "and_b32": np.bitwise_and, "or_b32": np.bitwise_or,
             "xor_b32": np.bitwise_xor, "min_u32": np.minimum, "max_u32": np.maximum}


LDS_ADDR_MASK = np.int64(0xFFFFFFFF)


def _lds_index(st, pc, sel, m, addr, nbytes, what, write):
    """addr int64 [n, 32] byte addresses within the workgroup's LDS -> (flat offsets into st.lds of the active
    lanes [k], in-range [k]). Out of the declared group segment: sanitizer error; else dropped/zero.
    The address is ADDR + offset modulo 2^32 (docs/rdna4.md §Memory, LDS addressing): compilers fold a negative base
    into the unsigned instruction offset (`v_sub_nc_u32 v3, 0, v4` + `ds_load_b32 v3, v3 offset:1020`)."""
    addr = addr & LDS_ADDR_MASK
    a = _active(addr, m)
    ok = (a >= 0) & (a + nbytes <= st.lds_bytes)
    if not ok.all() and st.sanitize:
        k = int(np.argmax(~ok))
        w, lane = _where_lane(st, sel, m, k)
        st.fail(pc, f"{what} of {nbytes} B at LDS address 0x{int(a[k]):x} is outside the kernel's "
                    f"{st.lds_bytes} B group segment", w, lane)
    wg = (st.wave_wg if sel is ALL else st.wave_wg[sel])
    flat = _active(wg[:, None] * st.lds_stride + addr, m)
    if st.lds_race_check:
        sanitizer.lds_access(st, pc, sel, m, a, nbytes, write)
    return flat, ok


def _ds(st, ops, inst, pc):
    name = inst.name
    V = st.V
    ad, d0, d1, vd = F(inst, "addr"), F(inst, "data0"), F(inst, "data1"), F(inst, "vdst")
    off16, o0, o1 = F(inst, "offset"), F(inst, "offset0"), F(inst, "offset1")
    lds = st.lds
    lds32 = lds.view(U32)

    def base(sel):
        return V[ad][sel].astype(I64)

    if name == "ds_nop":
        return lambda sel: None
    if name.startswith("ds_load_2addr_") or name.startswith("ds_store_2addr_"):
        load = name.startswith("ds_load")
        ty = name.split("_2addr_")[1]
        stride64 = ty.startswith("stride64_")
        ty = ty.replace("stride64_", "")
        if ty not in ("b32", "b64"):
            return None
        size = 4 if ty == "b32" else 8
        scale = size * (64 if stride64 else 1)
        ndw = size // 4
        offs = (o0 * scale, o1 * scale)

        def h(sel):
            m = _mask(st, sel)
            b = base(sel)          # a copy: the address survives a destination that overlaps it
            parts = []
            for j, o in enumerate(offs):
                flat, ok = _lds_index(st, pc, sel, m, b + o, size, name, not load)
                if load:
                    if ok.all():
                        data = mem_gather(lds, lds32, flat, size)
                    else:
                        data = np.zeros((len(flat), ndw), dtype=U32)
                        if ok.any():
                            data[ok] = mem_gather(lds, lds32, flat[ok], size)
                    parts.append(data)
                else:
                    src = d0 if j == 0 else d1
                    rows = np.stack([V[src + i][sel][m] for i in range(ndw)], axis=1)
                    if ok.any():
                        mem_scatter(lds, lds32, flat[ok], rows[ok], size)
            if load:
                for j, data in enumerate(parts):         # each address's dwords, no concatenation
                    _vwrite_rows(V, vd + j * ndw, sel, m, data)
        return h
    if name.startswith("ds_load_"):
        ty = name[len("ds_load_"):]
        if ty not in DS_LOADS:
            return None
        nbytes, kind = DS_LOADS[ty]
        ndw = (nbytes + 3) // 4 if kind == "b" else 1

        def h(sel):
            m = _mask(st, sel)
            flat, ok = _lds_index(st, pc, sel, m, base(sel) + off16, nbytes, name, False)
            if ok.all():
                raw = mem_gather(lds, lds32, flat, nbytes)
            else:
                raw = np.zeros((len(flat), (nbytes + 3) // 4), dtype=U32)
                if ok.any():
                    raw[ok] = mem_gather(lds, lds32, flat[ok], nbytes)
            old = V[vd][sel][m] if kind.startswith(("lo", "hi")) else None
            _vwrite_rows(V, vd, sel, m, _shape_load(kind, raw, old) if kind != "b" else raw)
        return h
    if name.startswith("ds_store_"):
        ty = name[len("ds_store_"):]
        if ty not in DS_STORES:
            return None
        nbytes, kind = DS_STORES[ty]
        nsrc = max(1, nbytes // 4)

        def h(sel):
            m = _mask(st, sel)
            flat, ok = _lds_index(st, pc, sel, m, base(sel) + off16, nbytes, name, True)
            rows = np.stack([_active(V[d0 + i][sel], m) for i in range(nsrc)], axis=1)
            if ok.all():
                mem_scatter(lds, lds32, flat, _store_data(kind, rows, nbytes), nbytes)
            elif ok.any():
                mem_scatter(lds, lds32, flat[ok], _store_data(kind, rows, nbytes)[ok], nbytes)
        return h
    if name in ("ds_bpermute_b32", "ds_permute_b32"):
        wr = ops.vwrite(vd)
        fwd = name == "ds_permute_b32"

        def h(sel):
            lane = ((V[ad][sel].astype(I64) + off16) >> 2) & 31
            data = V[d0][sel]
            if not fwd:
                # backward: lane i reads data0 of lane addr[i]/4 (ISA pseudocode: the source lane's VGPR is read
                # whatever its EXEC bit)
                return wr(sel, np.take_along_axis(data, lane, axis=1))
            # forward: active lane i sends data0 to lane addr[i]/4; the highest sending lane wins; others get 0
            m = _mask(st, sel)
            out = np.zeros_like(data)
            rows = np.nonzero(m)
            out[rows[0], lane[rows]] = data[rows]
            wr(sel, out)
        return h
    if name == "ds_swizzle_b32":
        wr = ops.vwrite(vd)
        lanes = np.arange(32)
        if off16 & 0x8000:
            # quad-permute mode: lane = 4*(i/4) + offset[2*(i%4)+1 : 2*(i%4)]
            src = (lanes & ~3) | ((off16 >> (2 * (lanes & 3))) & 3)
        elif off16 < 0x8000:
            and_m, or_m, xor_m = off16 & 0x1F, (off16 >> 5) & 0x1F, (off16 >> 10) & 0x1F
            src = ((lanes & and_m) | or_m) ^ xor_m
        else:
            return None
        return lambda sel: wr(sel, V[ad][sel][:, src])      # the swizzled source is the ADDR operand
    if name.startswith("ds_") and name[3:] in DS_ATOMIC:
        ufunc = DS_ATOMIC[name[3:]]

        def h(sel):
            m = _mask(st, sel)
            flat, ok = _lds_index(st, pc, sel, m, base(sel) + off16, 4, name, True)
            if (flat & 3).any():
                st.fail(pc, "misaligned LDS atomic")
            data = V[d0][sel][m]
            ufunc.at(lds32, flat[ok] >> 2, data[ok])
        return h
    return None


# ------------------------------------------------------------------------------------------------ scratch
def private_memory(st):
    """The batch's private memory (allocated on first use): (bytes, their uint32 view or None, [W, 32] index of each
    lane's private byte 0). Each lane owns private_segment_fixed_size bytes (at least 4)."""
    if st.private is None:
        st.private = np.zeros(st.W * 32 * max(st.private_bytes, 4), dtype=U8)
    priv = st.private
    stride = max(st.private_bytes, 4)
    lane_base = (np.arange(st.W, dtype=I64)[:, None] * 32 + np.arange(32)) * stride
    return priv, (priv.view(U32) if len(priv) % 4 == 0 else None), lane_base


def private_index(st, pc, sel, m, am, nbytes: int, lane_base, what: str):
    """Private offsets am [k] of the active lanes of m -> indices into st.private; an access outside the kernel's
    private segment stops the run (what names the access in the message)."""
    size = st.private_bytes
    bad = (am < 0) | (am + nbytes > size)
    if bad.any():
        k = int(np.argmax(bad))
        w, lane = _where_lane(st, sel, m, k)
        st.fail(pc, f"{what} of {nbytes} B at private offset {int(am[k])} is outside the kernel's {size} B private "
                    f"segment", w, lane)
    return lane_base[sel][m] + am


def _vscratch(st, ops, inst, pc):
    """Private (scratch) memory: each lane has its own private_segment_fixed_size bytes (architected flat
    scratch; docs/rdna4.md §Entry). Address = [vaddr if sve] + [saddr SGPR] + offset, per lane."""
    op, ty = _split(inst.name, "scratch_")
    if op not in ("load", "store"):
        return None
    table = LOADS if op == "load" else STORES
    if ty not in table:
        return None
    nbytes, kind = table[ty]
    V = st.V
    saddr, vaddr, sve, ioff = F(inst, "saddr"), F(inst, "vaddr"), F(inst, "sve"), int(F(inst, "offset"))
    sr = ops.sread(inst, saddr) if saddr != NULL else None
    priv, priv32, lane_base = private_memory(st)

    def index(sel, m):
        n = st.W if sel is ALL else len(sel)
        a = V[vaddr][sel].astype(I64) + ioff if sve else np.full((n, 32), ioff, dtype=I64)
        if sr is not None:
            a += np.broadcast_to(np.asarray(sr(sel)).astype(I64), (n,))[:, None]
        return private_index(st, pc, sel, m, a[m], nbytes, lane_base, "scratch access")

    if op == "load":
        vd = F(inst, "vdst")

        def h(sel):
            m = _mask(st, sel)
            flat = index(sel, m)
            raw = mem_gather(priv, priv32, flat, nbytes)
            old = V[vd][sel][m] if kind.startswith(("lo", "hi")) else None
            _vwrite_rows(V, vd, sel, m, _shape_load(kind, raw, old) if kind != "b" else raw)
        return h
    vs = F(inst, "vsrc")
    nsrc = max(1, nbytes // 4)

    def hs(sel):
        m = _mask(st, sel)
        flat = index(sel, m)
        rows = np.stack([_active(V[vs + i][sel], m) for i in range(nsrc)], axis=1)
        mem_scatter(priv, priv32, flat, _store_data(kind, rows, nbytes), nbytes)
    return hs
