"""Per-instruction trace of one chosen wave: PC, text, and the registers it changed (old -> new)."""
from __future__ import annotations

import numpy as np


class Tracer:
    def __init__(self, trace_wave):
        if not (isinstance(trace_wave, (tuple, list)) and len(trace_wave) in (2, 3)):
            raise ValueError(f"trace_wave={trace_wave!r}: expected (workgroup_linear_id, wave_in_workgroup[, out]) "
                             f"where out is a list or a file-like object")
        self.wg, self.wave_in_wg = int(trace_wave[0]), int(trace_wave[1])
        self.out = trace_wave[2] if len(trace_wave) == 3 else None
        self.lines: list[str] = []
        self.st, self.wave = None, None

    def attach(self, st):
        hits = np.flatnonzero((st.wg_id == self.wg) & (st.wave_in_wg == self.wave_in_wg))
        self.st, self.wave = (st, int(hits[0])) if len(hits) else (self.st, None if self.st is None else self.wave)
        if not len(hits):
            self.wave = None

    def before(self, pc):
        st, w = self.st, self.wave
        self._v = st.V[:, w, :].copy()
        self._s = st.S[:, w].copy()
        self._scc = bool(st.SCC[w])

    def after(self, pc):
        st, w = self.st, self.wave
        parts = []
        v = st.V[:, w, :]
        for r in np.flatnonzero((v != self._v).any(axis=1)):
            lanes = np.flatnonzero(v[r] != self._v[r])
            l0 = lanes[0]
            more = f" (+{len(lanes) - 1} lanes)" if len(lanes) > 1 else ""
            parts.append(f"v{r}[{l0}] {self._v[r][l0]:#x}->{v[r][l0]:#x}{more}")
        s = st.S[:, w]
        for r in np.flatnonzero(s != self._s):
            parts.append(f"{_sname(r)} {self._s[r]:#x}->{s[r]:#x}")
        if bool(st.SCC[w]) != self._scc:
            parts.append(f"scc {int(self._scc)}->{int(st.SCC[w])}")
        line = f"{st.prog.insts[pc].offset:#06x}  {st.prog.text(pc):<48s} {'; '.join(parts)}"
        self.lines.append(line)
        if self.out is not None:
            if isinstance(self.out, list):
                self.out.append(line)
            else:
                self.out.write(line + "\n")


def _sname(r):
    return {106: "vcc_lo", 107: "vcc_hi", 124: "null", 125: "m0", 126: "exec_lo", 127: "exec_hi"}.get(
        int(r), f"ttmp{r - 108}" if 108 <= r < 124 else f"s{r}")
