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
vsubrev = partial(Op.vop2, "v_subrev_f32")
vmax = partial(Op.vop2, "v_max_num_f32")


def vcc_select_lines(compare: str, dst, if_false, if_true) -> list[str]:
    """dst = (compare, a VALU v_cmp_*_e32 writing vcc_lo) ? if_true : if_false. VCC written by VALU and read by
    VALU needs s_wait_alu depctr_va_vcc(0) between (docs/rdna4.md §Hazards 3)."""
    return [compare, "s_wait_alu depctr_va_vcc(0)", f"v_cndmask_b32_e32 {dst}, {if_false}, {if_true}, vcc_lo"]


# ---------------------------------------------------------------------------------------------- WMMA stream
class Frag:
    def __init__(self, key, load, ring: int = 0, pos: int = 0):
        self.key, self.load = key, load        # load(asm, regs) emits the ds_load
        self.ring, self.pos = ring, pos        # which ring (0: the fragment ring), index among that ring's fragments
        self.uses: list[int] = []


class Matrix:
    """The WMMA stream of one loop iteration: the WMMAs in issue order and the fragments they read.
    Fragment k goes to ring slot k % RING; its ds_load is issued as soon as the slot's previous fragment has
    had its last WMMA (docs/rdna4.md §Waits: loads ahead of use), and a WMMA waits with s_wait_dscnt only for
    the fragment it needs (DScnt completes in order)."""

    def __init__(self, ring, *more_rings):
        self.rings = (ring,) + more_rings            # the VGPRs of the fragment slots (4 each); ring 0 the main one
        self.ring = ring
        self.slots = ring.n // 4
        self.frags: list[Frag] = []
        self.by_ring: list[list[int]] = [[] for _ in self.rings]   # frag indices per ring, in load order
        self.wmmas: list[tuple] = []   # (frag index, emit(asm, frag_regs), second frag index or None)
        self.index: dict = {}

    def frag(self, key, load, ring: int = 0) -> int:
        """The fragment `key` (loaded by load(asm, regs) into a slot of ring `ring`: head dim 256 keeps the Q^T
        fragments in a second ring)."""
        if key not in self.index:
            self.index[key] = len(self.frags)
            self.frags.append(Frag(key, load, ring, len(self.by_ring[ring])))
            self.by_ring[ring].append(self.index[key])
        return self.index[key]

    def ring_slots(self, ring: int) -> int:
        return self.rings[ring].n // 4

    def previous(self, fk: int):
        """The fragment whose slot fragment fk reuses (None while its ring has free slots)."""
        f = self.frags[fk]
        n = self.ring_slots(f.ring)
        return self.frags[self.by_ring[f.ring][f.pos - n]] if f.pos >= n else None

    def wmma(self, fk: int, emit, extra: int | None = None) -> None:
        """A WMMA reading fragment fk (and `extra`, a second fragment: head dim 256's Q^T B-fragment)."""
        self.frags[fk].uses.append(len(self.wmmas))
        if extra is not None:
            self.frags[extra].uses.append(len(self.wmmas))
        self.wmmas.append((fk, emit, extra))

    def slot(self, fk: int):
        f = self.frags[fk]
        ring, n = self.rings[f.ring], self.ring_slots(f.ring)
        return ring[4 * (f.pos % n):4 * (f.pos % n) + 4]


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
            prev = self.mx.previous(k)
            if prev is not None and (not prev.uses or max(prev.uses) >= self.emitted):
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
        # a TRANS op (v_exp_f32) opens its gap where one is near the even cut: the VALU ops after it overlap its
        # pipeline, which a WMMA would wait to drain (tools/perf_model.py: the TRANS pipeline does not overlap WMMA)
        for w in range(n_wmma):
            lo = cut[w - 1] + 1 if w else 1
            for d in (0, -1, 1, -2, 2):
                c = cut[w] + d
                if lo <= c < min(n, cut[w + 1]) and getattr(units[c], "trans", False):
                    cut[w] = c
                    break
        u = 0
        for w in range(n_wmma):
            for item in units[u:cut[w]]:
                self._emit_item(item)
            u = cut[w]
            fk, emit, extra = self.mx.wmmas[self.emitted]
            self.ds.wait_for(("frag", max(fk, extra if extra is not None else -1)))
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
