"""The WMMA stream: fragments loaded into an LDS ring (`Matrix`) and emitted phase by phase with VALU work woven
between the WMMAs (`Weaver`); plus the VALU helpers the softmax uses (VOPD-pairable fp32 ops, VCC selects)."""
from __future__ import annotations

from functools import partial

from asmdsl import Asm, Op, WaitCounter

# ---------------------------------------------------------------------------------------------- VALU helpers
# vmul(d, s0, s1) etc.: VOP2 fp32 ops that pair_vopd can fuse
vmul = partial(Op.vop2, "v_mul_f32")
vadd = partial(Op.vop2, "v_add_f32")
vsub = partial(Op.vop2, "v_sub_f32")
vmax = partial(Op.vop2, "v_max_num_f32")


def vcc_select_lines(compare: str, dst, if_false, if_true) -> list[str]:
    """dst = (compare, a VALU v_cmp_*_e32 writing vcc_lo) ? if_true : if_false. VCC written by VALU and read by
    VALU needs s_wait_alu depctr_va_vcc(0) between (docs/rdna4.md §Hazards 3)."""
    return [compare, "s_wait_alu depctr_va_vcc(0)", f"v_cndmask_b32_e32 {dst}, {if_false}, {if_true}, vcc_lo"]


# ---------------------------------------------------------------------------------------------- WMMA stream
class Frag:
    def __init__(self, key, load):
        self.key, self.load = key, load        # load(asm, regs) emits the ds_load
        self.uses: list[int] = []


class Matrix:
    """The WMMA stream of one loop iteration: the WMMAs in issue order and the fragments they read.
    Fragment k goes to ring slot k % RING; its ds_load is issued as soon as the slot's previous fragment has
    had its last WMMA (docs/rdna4.md §Waits: loads ahead of use), and a WMMA waits with s_wait_dscnt only for
    the fragment it needs (DScnt completes in order)."""

    def __init__(self, ring):
        self.ring = ring                             # the VGPRs of the fragment slots (4 each)
        self.slots = ring.n // 4
        self.frags: list[Frag] = []
        self.wmmas: list[tuple[int, object]] = []   # (frag index, emit(asm, frag_regs))
        self.index: dict = {}

    def frag(self, key, load) -> int:
        if key not in self.index:
            self.index[key] = len(self.frags)
            self.frags.append(Frag(key, load))
        return self.index[key]

    def wmma(self, fk: int, emit) -> None:
        self.frags[fk].uses.append(len(self.wmmas))
        self.wmmas.append((fk, emit))

    def slot(self, fk: int):
        return self.ring[4 * (fk % self.slots):4 * (fk % self.slots) + 4]


class Weaver:
    """Emits a Matrix phase by phase, fragment loads as early as the ring allows, VALU issue slots spread
    evenly between the WMMAs."""

    def __init__(self, a: Asm, mx_: Matrix, ds: WaitCounter):
        self.a, self.mx, self.ds = a, mx_, ds
        self.next_load = 0
        self.emitted = 0        # WMMAs emitted so far

    def _loads(self):
        frags = self.mx.frags
        while self.next_load < len(frags):
            k = self.next_load
            if k >= self.mx.slots:
                prev = frags[k - self.mx.slots]
                if not prev.uses or max(prev.uses) >= self.emitted:
                    return
            frags[k].load(self.a, self.mx.slot(k))
            self.ds.issue(("frag", k))
            self.next_load += 1

    def prefetch(self):
        self._loads()

    def phase(self, n_wmma: int, items: list) -> None:
        """Emit the next n_wmma WMMAs with `items` (Issue objects or raw text lines) spread between them."""
        units = items
        n = len(units)
        cut = [round(n * (w + 1) / (n_wmma + 1)) for w in range(n_wmma + 1)] if n_wmma else [n]
        u = 0
        for w in range(n_wmma):
            for item in units[u:cut[w]]:
                self._emit_item(item)
            u = cut[w]
            fk, emit = self.mx.wmmas[self.emitted]
            self.ds.wait_for(("frag", fk))
            emit(self.a, self.mx.slot(fk))
            self.emitted += 1
            self._loads()
        for item in units[u:]:
            self._emit_item(item)

    def _emit_item(self, item):
        if isinstance(item, str):
            self.a.op(item)
        else:
            self.a.issue(item)
