"""The WMMA streams of one key tile: S^T = K.Q^T (int8) and O^T += V^T.P^T (fp8, or fp16 for pv_dtype "fp16"),
as fragment loads and WMMAs queued on a Matrix (stream.py) for the Weaver to emit."""
from __future__ import annotations

from .config import B128, IU8_SIGNED, WMMA_PV, WMMA_PV16, WMMA_QK
from .stream import Matrix


class MatmulStreams:
    """qk_matrix / pv_matrix of AttentionKernel (reads KernelState)."""

    def qk_matrix(self, mx_: Matrix, kbuf: int, sacc) -> None:
        """S^T = K.Q^T. Head dim 256 (WIDE): Q^T fragment i comes from LDS (LDS_Q) into ring 1 of the Matrix (the Q^T
        slots) before d-group i's first WMMA; otherwise it is held in Q."""
        for i, half, c in self.QK_ORDER:
            qk_ = None
            if self.WIDE:
                qk_ = mx_.frag(("q", i), lambda a, regs, i=i: a.op(
                    f"ds_load_b128 {regs}, {self.q_rd} offset:{i * self.Q_FRAG_STEP}"), ring=1)
            fk = mx_.frag(("k", i, c), lambda a, regs, i=i, c=c: a.op(
                f"ds_load_b128 {regs}, {self.k_rd[i]} offset:{kbuf + c * 8 * self.K_ROW_BYTES}"))
            first = i == 0 and half == 0
            acc = sacc[8 * c:8 * c + 8]

            def emit(a, regs, acc=acc, i=i, half=half, first=first, qk_=qk_):
                src_c = str(self.magic) if first and self.magic is not None else str(acc)   # WIDE: acc = MAGIC_INT
                qf = mx_.slot(qk_) if qk_ is not None else self.Q[4 * i:4 * i + 4]
                a.op(f"{WMMA_QK} {acc}, {regs[2 * half:2 * half + 2]}, {qf[2 * half:2 * half + 2]}, "
                     f"{src_c} {IU8_SIGNED}")
            mx_.wmma(fk, emit, extra=qk_)

    def pv_matrix(self, mx_: Matrix, vbuf: int, pacc) -> None:
        # per accumulator dt the chunks go 0, 1, 2, 3 (the HIP kernel's order: bitwise the same fp32 sums)
        if self.PV16:
            for c, dt in self.PV16_ORDER:
                fk = mx_.frag(("v", c, dt), lambda a, regs, c=c, dt=dt: a.op(
                    f"ds_load_b128 {regs}, {self.v_rd[0]} offset:{vbuf + dt * 16 * self.V_ROW_BYTES + c * B128}"))
                acc = self.O[8 * dt:8 * dt + 8]

                def emit(a, regs, acc=acc, c=c):
                    a.op(f"{WMMA_PV16} {acc}, {regs}, {pacc[8 * c:8 * c + 4]}, {acc}")
                mx_.wmma(fk, emit)
            return
        for i, grp, half, dt in self.PV_ORDER:
            fk = mx_.frag(("v", i, dt), lambda a, regs, i=i, dt=dt: a.op(
                f"ds_load_b128 {regs}, {self.v_rd[i]} offset:{vbuf + dt * 16 * self.V_ROW_BYTES}"))
            c = 2 * i + half
            acc = self.O[8 * dt:8 * dt + 8]

            def emit(a, regs, acc=acc, c=c, half=half):
                a.op(f"{WMMA_PV} {acc}, {regs[2 * half:2 * half + 2]}, {pacc[8 * c:8 * c + 2]}, {acc}")
            mx_.wmma(fk, emit)
