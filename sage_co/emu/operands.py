"""Operand readers/writers of the executor, bound to one State (resolved once per instruction, when its handler
is built).

A reader or writer binds what it reads as default arguments rather than closing over it: a kept handler's operand is
then a function and one tuple for Python's collector to scan, not also a cell per captured name (docs/emulator.md
§Execution model). The register rows are bound as views, which stay valid because a State is reset in place (State.reset)."""
from __future__ import annotations

import numpy as np

from sage_co.emu.state import (ALL, APERTURE_NAMES, APERTURE_OPERANDS, EXEC, LITERAL, NULL, SCC_CODE, EmuError, State,
                               const_bits)


class Ops:
    """Operand readers/writers bound to one State. Readers return arrays broadcastable to [n, 32] (VGPR
    operands) or scalars (constants); scalar readers return [n] arrays."""

    def __init__(self, st: State):
        self.st = st

    # ---- VALU-side reads (per lane). kind: 'b32' | 'f32' | 'b16' | 'f16' | 'b64' | 'f64'
    def vread(self, inst, code: int, kind: str = "b32"):
        st = self.st
        V, S, SCC = st.V, st.S, st.SCC
        wide = kind in ("b64", "f64")
        if code >= 256:
            r = code - 256
            if r + (2 if wide else 1) > st.prog.nvgpr:
                raise EmuError(f"v{r} beyond the kernel's {st.prog.nvgpr} VGPRs")
            if wide:
                return lambda sel, lo=V[r], hi=V[r + 1]: lo[sel].astype(np.uint64) | \
                    (hi[sel].astype(np.uint64) << np.uint64(32))
            return lambda sel, row=V[r]: row[sel]
        if code == LITERAL:
            lit = int(inst.literal or 0)
            if wide:   # 64-bit literal: the 32 bits are the high half for f64, zero-extended for b64
                val = np.uint64(lit << 32) if kind == "f64" else np.uint64(lit)
                return lambda sel, val=val: val
            val = np.uint32(lit & 0xFFFFFFFF)
            return lambda sel, val=val: val
        c = const_bits(code, kind)
        if c is not None:
            val = np.uint64(c) if wide else np.uint32(c & 0xFFFFFFFF)
            return lambda sel, val=val: val
        if code in APERTURE_OPERANDS:
            val = np.uint64(aperture(code, wide))
            return lambda sel, val=val: val
        if code == SCC_CODE:
            dtype = np.uint64 if wide else np.uint32
            return lambda sel, SCC=SCC, dtype=dtype: SCC[sel].astype(dtype)[:, None]
        if code < 128:
            if wide:
                return lambda sel, lo=S[code], hi=S[code + 1]: (lo[sel].astype(np.uint64) |
                                                                (hi[sel].astype(np.uint64) << np.uint64(32)))[:, None]
            if code == NULL:
                z = np.uint32(0)
                return lambda sel, z=z: z
            return lambda sel, row=S[code]: row[sel][:, None]
        raise EmuError(f"operand code {code} not supported")

    # ---- scalar reads: [n] arrays (uint32 or uint64 for 64-bit)
    def sread(self, inst, code: int, wide: bool = False):
        st = self.st
        S, SCC = st.S, st.SCC
        if code == LITERAL:
            lit = int(inst.literal or 0)
            val = np.uint64(lit) if wide else np.uint32(lit & 0xFFFFFFFF)
            return lambda sel, val=val: val
        c = const_bits(code, "b64" if wide else "b32")
        if c is not None:
            val = np.uint64(c) if wide else np.uint32(c & 0xFFFFFFFF)
            return lambda sel, val=val: val
        if code in APERTURE_OPERANDS:
            val = np.uint64(aperture(code, wide))
            return lambda sel, val=val: val
        if code == SCC_CODE:
            return lambda sel, SCC=SCC, dtype=np.uint64 if wide else np.uint32: SCC[sel].astype(dtype)
        if code == NULL:
            z = np.uint64(0) if wide else np.uint32(0)
            return lambda sel, z=z: z
        if code < 128:
            if wide:
                return lambda sel, lo=S[code], hi=S[code + 1]: lo[sel].astype(np.uint64) | \
                    (hi[sel].astype(np.uint64) << np.uint64(32))
            return lambda sel, row=S[code]: row[sel]
        if code >= 256:
            raise EmuError(f"VGPR operand v{code - 256} in a scalar instruction")
        raise EmuError(f"scalar operand code {code} not supported")

    def swrite(self, code: int, wide: bool = False):
        """Writer f(sel, value) for an SGPR destination; EXEC writes refresh the lane mask."""
        st = self.st
        S = st.S
        if code == NULL:
            return lambda sel, val: None
        if code >= 128:
            raise EmuError(f"scalar destination code {code} not supported")
        is_exec = code in (EXEC, EXEC + 1) or (wide and code + 1 == EXEC)
        if wide:
            def w(sel, val, st=st, lo=S[code], hi=S[code + 1], is_exec=is_exec):
                val = np.asarray(val, dtype=np.uint64)
                lo[sel] = (val & np.uint64(0xFFFFFFFF)).astype(np.uint32)
                hi[sel] = (val >> np.uint64(32)).astype(np.uint32)
                if is_exec:
                    st.refresh_exec(sel)
        else:
            def w(sel, val, st=st, row=S[code], is_exec=is_exec):
                row[sel] = val
                if is_exec:
                    st.refresh_exec(sel)
        return w

    # ---- VGPR write with EXEC masking (inactive lanes keep their value)
    def vwrite(self, r: int, nregs: int = 1):
        st = self.st
        if r + nregs > st.prog.nvgpr:
            raise EmuError(f"destination v{r} (+{nregs}) beyond the kernel's {st.prog.nvgpr} VGPRs")
        def w(sel, val, st=st, row=st.V[r], EXM=st.EXM):
            if sel is ALL:
                if st.exec_full:
                    row[...] = val
                else:
                    np.copyto(row, val, where=EXM, casting="unsafe")
            else:
                row[sel] = np.where(EXM[sel], val, row[sel])
        return w

    def vwrite_masked(self, r: int):
        """Writer f(sel, val, mask) writing only lanes where mask (already includes EXEC if wanted)."""
        def w(sel, val, mask, row=self.st.V[r]):
            if sel is ALL:
                np.copyto(row, val, where=mask, casting="unsafe")
            else:
                row[sel] = np.where(mask, val, row[sel])
        return w


def aperture(code: int, wide: bool) -> int:
    """Value of an aperture operand (src_shared_base/limit, src_private_base/limit; docs/rdna4.md §Flat apertures).
    Only the 64-bit read is defined here: it is the form LLVM emits (`s_mov_b64 s[2:3], src_private_base`, the high
    dword used); which half a 32-bit read returns is not documented for gfx12, so it stops the run."""
    if not wide:
        raise EmuError(f"32-bit read of {APERTURE_NAMES[code]} is not implemented (only the 64-bit read is "
                       f"documented)")
    return APERTURE_OPERANDS[code]
