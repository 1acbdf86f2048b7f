"""Code object -> disassembly -> the kernel's main loop and its per-iteration instruction mix.

1. The code object is decoded by the emulator's decoder (disasm_check.disassemble; LLVM's llvm-objdump is the
   cross-check in tests); the main loop is the innermost backward-branch range that holds the WMMAs.
2. Static counts per iteration are the longest path through that range (every optional block taken once: an upper
   bound, e.g. an O rescale is always counted); `iteration_paths` lists every path for the simulator.
3. Attention normalisation (the report of the shipped kernels): figures per 64-key tile of one wave of 16 queries,
   d = 128; a loop unrolled x2 holds 2 tiles.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from perfmodel.hardware import WMMA_OPS, waves_by_lds, waves_by_vgprs, wmma_cycles
from perfmodel.isa import CLASSES, Inst, classify, wave_bytes
from perfmodel.isa import disassemble as isa_disassemble
from sage_co import abi

# The attention kernels' geometry the per-tile figures are normalised to: the one definition is sage_co/abi.py
QUERY_TILE = abi.QUERY_TILE                 # queries per workgroup of the shipped kernels, grid x = S_pad / 64
WAVES_PER_WG = abi.ATTENTION_WAVES
QUERIES_PER_WAVE = abi.WAVE_QUERIES
HEAD_DIM = abi.HEAD_DIM
PAD = abi.PAD                               # prepare pads S to a multiple of 64
KEY_TILE = abi.KEY_TILE                     # every per-tile figure is per 64-key tile of one wave


# ------------------------------------------------------------------------------------------- instruction mix
@dataclass
class Mix:
    """Instruction counts per key tile of one wave (VOPD = one VALU issue), plus derived per-tile totals."""
    WMMA: float = 0
    VALU: float = 0
    TRANS: float = 0
    SALU: float = 0
    SMEM: float = 0
    BRANCH: float = 0
    WAIT_OTHER: float = 0
    LDS: float = 0
    VMEM_LOAD: float = 0
    VMEM_STORE: float = 0
    wmma_cycles: float = 0          # sum of WMMA issue cycles
    wmma_ops: float = 0             # OPs of those WMMAs (2*16*16*16 each, dense)
    vopd: float = 0                 # VALU issues that are VOPD pairs (informative)
    lds_bytes: float = 0
    load_bytes: float = 0           # VMEM load bytes (L2/IC -> CU)
    store_bytes: float = 0
    source: str = ""

    @classmethod
    def of(cls, insts, source: str = "") -> "Mix":
        mix = cls(source=source)
        for ins in insts:
            c = classify(ins.mnemonic)
            setattr(mix, c, getattr(mix, c) + 1)
            if c == "WMMA":
                mix.wmma_cycles += wmma_cycles(ins.mnemonic)
                mix.wmma_ops += WMMA_OPS * (2 if ins.mnemonic.startswith("v_swmmac") else 1)
            elif c == "VALU" and ins.mnemonic.startswith("v_dual_"):
                mix.vopd += 1
            elif c == "LDS":
                mix.lds_bytes += wave_bytes(ins.mnemonic)
            elif c == "VMEM_LOAD" and not ins.mnemonic.startswith("global_inv"):
                mix.load_bytes += wave_bytes(ins.mnemonic)
            elif c == "VMEM_STORE" and not ins.mnemonic.startswith("global_wb"):
                mix.store_bytes += wave_bytes(ins.mnemonic)
        return mix

    def counts(self) -> dict[str, float]:
        return {c: getattr(self, c) for c in CLASSES}

    def scaled(self, f: float, source: str) -> "Mix":
        return replace(self, **{x.name: getattr(self, x.name) * f for x in fields(self) if x.name != "source"},
                       source=source)


# ------------------------------------------------------------------------------------------- disassembly
def disassemble(path: Path) -> tuple[dict[str, list[Inst]], str]:
    """Instructions per kernel (decoded by the emulator's decoder: sage_co.emu via disasm_check.disassemble; LLVM's
    llvm-objdump is the cross-check in tests) and the name of the disassembler."""
    return isa_disassemble(Path(path)), "sage_co.emu decoder"


# ------------------------------------------------------------------------------------------- loop finder
def branch_target(ins: Inst) -> int | None:
    """Byte target of s_branch / s_cbranch_*: PC + 4 + 4 * simm16 (the operand as printed is the raw simm16)."""
    if not ins.mnemonic.startswith(("s_branch", "s_cbranch")):
        return None
    raw = int(ins.operands.split()[0], 0)
    simm = raw - 0x10000 if raw >= 0x8000 else raw
    return ins.addr + 4 + 4 * simm


@dataclass(frozen=True)
class Loop:
    head: int                       # address of the first instruction (the back-edge target)
    tail: int                       # address of the last back-edge branch
    backedges: tuple[int, ...]

    def contains(self, addr: int) -> bool:
        return self.head <= addr <= self.tail


def find_loops(insts: list[Inst]) -> list[Loop]:
    """Natural loops by back-edge target: [target, furthest branch that jumps back to it]."""
    by_head: dict[int, list[int]] = {}
    for ins in insts:
        t = branch_target(ins)
        if t is not None and t <= ins.addr:
            by_head.setdefault(t, []).append(ins.addr)
    return [Loop(h, max(b), tuple(sorted(b))) for h, b in sorted(by_head.items())]


def main_loop(insts: list[Inst]) -> Loop:
    """The innermost loop (smallest range) that contains WMMA instructions."""
    wmma_addrs = [i.addr for i in insts if classify(i.mnemonic) == "WMMA"]
    if not wmma_addrs:
        raise ValueError("kernel has no WMMA instructions: not an attention main loop")
    loops = [lp for lp in find_loops(insts) if any(lp.contains(a) for a in wmma_addrs)]
    if not loops:
        raise ValueError("no backward branch encloses the WMMA instructions: the kernel has no main loop")
    return min(loops, key=lambda lp: lp.tail - lp.head)


def _issue_weight(ins: Inst) -> float:
    c = classify(ins.mnemonic)
    return wmma_cycles(ins.mnemonic) if c == "WMMA" else 1.0


def longest_iteration(insts: list[Inst], loop: Loop) -> tuple[list[Inst], list[str]]:
    """The heaviest path (by issue cycles) from the loop head to a back-edge: one iteration with every
    optional block taken once. Paths that leave the loop are not iterations. Returns (path, notes)."""
    body = [i for i in insts if loop.contains(i.addr)]
    index = {ins.addr: k for k, ins in enumerate(body)}
    notes = []
    NEG = float("-inf")
    best = [NEG] * len(body)
    nxt: list[int | None] = [None] * len(body)     # successor index on the best path; -1 = back-edge (end)
    for k in range(len(body) - 1, -1, -1):
        ins = body[k]
        m = ins.mnemonic
        succ: list[tuple[float, int | None]] = []
        target = branch_target(ins)
        unconditional = m == "s_branch" or m in ("s_endpgm", "s_setpc_b64")
        if target is not None:
            if target == loop.head:
                succ.append((0.0, -1))
            elif target < ins.addr and target in index:
                notes.append(f"inner backward branch at 0x{ins.addr:x} (no WMMA loop): its body counted once")
            elif target > ins.addr and target in index:
                succ.append((best[index[target]], index[target]))
        if not unconditional and k + 1 < len(body):
            succ.append((best[k + 1], k + 1))
        if m.startswith(("s_setpc", "s_swappc")):
            notes.append(f"indirect branch at 0x{ins.addr:x}: path ends there")
            succ = []
        if succ:
            val, j = max(succ, key=lambda s: s[0])
            if val > NEG:
                best[k], nxt[k] = val + _issue_weight(ins), j
    if best[0] == NEG:
        raise ValueError(f"loop 0x{loop.head:x}-0x{loop.tail:x}: no path from the head back to it")
    path, k = [], 0
    while k is not None and k >= 0:
        path.append(body[k])
        k = nxt[k]
    return path, notes


def iteration_paths(insts: list[Inst], loop: Loop, limit: int = 4096, executed=None) -> list[list[Inst]]:
    """Every path from the loop head to a back-edge (forward branches taken or not, exits not followed); with
    `executed` (the addresses an emulated run executed) only paths through executed instructions (a kernel's
    attn_mask blocks multiply the paths, most of which a given run never takes)."""
    body = [i for i in insts if loop.contains(i.addr) and (executed is None or i.addr in executed)]
    index = {ins.addr: k for k, ins in enumerate(body)}
    paths: list[list[Inst]] = []

    def walk(k: int, acc: list[Inst]):
        while True:
            if len(paths) >= limit:
                raise ValueError(f"loop 0x{loop.head:x}: more than {limit} paths through one iteration")
            ins = body[k]
            acc = acc + [ins]
            t = branch_target(ins)
            m = ins.mnemonic
            if t is not None:
                if t == loop.head:
                    paths.append(acc)
                    if m == "s_branch":
                        return
                elif t > ins.addr and t in index:
                    if m == "s_branch":
                        k = index[t]
                        continue
                    # with `executed`, a branch over blocks that never ran lands on its fall-through: one path
                    if index[t] != k + 1:
                        walk(index[t], acc)
            if m in ("s_endpgm", "s_setpc_b64") or k + 1 >= len(body):
                return
            k += 1
    walk(0, [])
    return paths


# ------------------------------------------------------------------------------------------- kernels
@dataclass
class KernelModel:
    label: str
    path: Path
    symbol: str
    vgprs: int
    lds_bytes: int
    loop: Loop
    loop_insts: int                 # instructions in the loop's address range
    static: Mix                     # longest path, per 64-key tile (= per iteration / tiles_per_iter)
    fixed: Mix                      # instructions outside the loop, each once (prologue + epilogue)
    mix: Mix                        # the mix the model uses (dynamic when available, else static)
    notes: list[str] = field(default_factory=list)
    disassembler: str = ""
    static_iter: Mix | None = None  # longest path of one loop iteration (not normalised)
    insts: list[Inst] = field(default_factory=list)    # the kernel's instructions (for the simulator)
    private_bytes: int = 0          # scratch per work-item (descriptor private_segment_fixed_size)
    head_dim: int = HEAD_DIM        # D_pad of an attention kernel (the WMMA work per key is 4 x 16 x head_dim)
    text_addr: int = 0              # address of .text (the emulator counts byte offsets from it)
    # addresses an emulated run executed (emulated.emulator_mix, with km.mix), None with static counts: the
    # simulator's loop paths keep to them (the attn_mask/varlen blocks a run never takes would multiply the paths)
    executed: frozenset[int] | None = None

    @property
    def waves_vgpr(self) -> int:
        return waves_by_vgprs(self.vgprs)

    @property
    def waves_lds(self) -> int:
        return waves_by_lds(self.lds_bytes, WAVES_PER_WG)

    @property
    def waves(self) -> int:
        return min(self.waves_vgpr, self.waves_lds)

    @property
    def keys_per_iter(self) -> int:
        """Keys per loop iteration, from the WMMA work of one iteration (QK + PV, 16 queries, d = head_dim)."""
        keys = self.static_iter.wmma_ops / (4 * QUERIES_PER_WAVE * self.head_dim)
        if keys <= 0 or keys != int(keys):
            raise ValueError(f"{self.label}: loop WMMA work {self.static_iter.wmma_ops} OPs is not "
                             f"4*16*{self.head_dim}*keys for a whole number of keys")
        return int(keys)

    @property
    def tiles_per_iter(self) -> int:
        """64-key tiles per loop iteration (the asm loop is unrolled x2: 2). A loop with less work than one
        tile (synthetic test kernels) counts as one tile per iteration; analyze() notes it."""
        return max(1, self.keys_per_iter // KEY_TILE)


def analyze(label: str, path: Path, symbol: str | None = None, head_dim: int = HEAD_DIM) -> KernelModel:
    from sage_co import codeobj
    co = codeobj.read_file(path)
    funcs, dis = disassemble(path)
    if symbol is None:
        with_wmma = [n for n, ins in funcs.items() if n in co.kernels and
                     any(classify(i.mnemonic) == "WMMA" for i in ins)]
        if len(with_wmma) != 1:
            raise ValueError(f"{path}: expected one kernel with WMMAs, found {with_wmma}")
        symbol = with_wmma[0]
    insts = funcs[symbol]
    kernel = co.kernel(symbol)
    loop = main_loop(insts)
    path_insts, notes = longest_iteration(insts, loop)
    static = Mix.of(path_insts, "static: longest path through the loop (every optional block once)")
    fixed = Mix.of([i for i in insts if not loop.contains(i.addr) and i.mnemonic != "s_code_end"],
                   "static: outside the loop, each once")
    vgprs = int(kernel.metadata.get(".vgpr_count", kernel.descriptor.vgpr_count))
    lds = int(kernel.descriptor.group_segment_fixed_size)
    km = KernelModel(label, path, symbol, vgprs, lds, loop, sum(loop.contains(i.addr) for i in insts),
                     static, fixed, static, notes, dis, static_iter=static, insts=insts,
                     private_bytes=int(kernel.descriptor.private_segment_fixed_size), text_addr=co.text_addr,
                     head_dim=head_dim)
    # every per-tile figure is per 64-key tile, whatever the unroll (asm: 2 tiles per iteration)
    if km.keys_per_iter % KEY_TILE:
        km.notes.append(f"loop iteration holds {km.keys_per_iter} keys, not a multiple of {KEY_TILE}: "
                        "figures are per iteration")
    if km.tiles_per_iter != 1:
        km.static = km.mix = static.scaled(1 / km.tiles_per_iter,
                                           f"static: longest path through the loop / {km.tiles_per_iter} tiles")
    return km

