"""AttentionKernel: one kernel symbol of the family, put together from the stage mixins (state.py sizes and
registers; prologue, matmul, softmax, loop, epilogue emit its parts), with its per-variant .s header and its
descriptor/metadata."""
from __future__ import annotations

import re

from asmdsl import Asm, KernelArg, Op, amdhsa_kernel, insert_hazard_waits
from sage_co import abi
from sage_co.rdna4 import waves_by_vgprs

from .config import ARGS, F32_M_INIT, INST_PREF_SIZE, OUT_MAX, THREADS, WMMA_PV, WMMA_PV16
from .epilogue import Epilogue
from .loop import KeyLoop
from .matmul import MatmulStreams
from .prologue import Prologue
from .softmax import Softmax
from .state import KernelState


class AttentionKernel(KernelState, Prologue, MatmulStreams, Softmax, KeyLoop, Epilogue):
    """The text of one kernel symbol for one Config. Registers are allocated per instance (nothing global),
    and every method emits one part of the kernel into an Asm buffer."""

    def body_text(self) -> str:
        """The instructions of the kernel (prologue, loop, peeled last tiles, epilogue)."""
        a = Asm()
        self.ool = Asm()   # out-of-line blocks (the attn_mask paths), placed after the epilogue
        a.raw(self.variant_header())
        self.prologue(a)
        # the k_scale address points at tile 0; the loop adds 8 before each load of tile t+1
        a.section("main loop: two tiles per trip (register ping-pong SA/SB, m[0]/m[1], LDS buffers)")
        a.label(".Lloop")
        for parity in (0, 1):
            a.op(f"s_cmp_eq_u32 {self.s_t}, {self.s_last}")
            a.op(f"s_cbranch_scc1 .Llast_{parity}")
            self.body(a, parity, last=False)
        a.op("s_branch .Lloop")
        for parity in (0, 1):
            a.label(f".Llast_{parity}")
            self.body(a, parity, last=True)
            if parity == 0:
                a.op(f"v_mov_b32 {self.m[0]}, {self.m[1]}", "m of the last tile into m[0]")
            a.op("s_branch .Lepilogue")
        a.label(".Lempty")
        a.section("no active key tile (LUT count 0): O = 0, m = M_INIT, l = 0 -> zeros and lse -inf")
        a.valu([Op.mov(self.O[j], "0") for j in range(self.O.n)] + [Op.mov(self.m[0], F32_M_INIT),
                                                                   Op.mov(self.l_run, "0")])
        a.op("s_wait_kmcnt 0", "q_scale (the smooth_k lse term)")
        a.label(".Lepilogue")
        self.epilogue(a, 0)
        a.section("out of line: the attn_mask blocks of partial / additive tiles (each branches back)")
        a.lines.extend(self.ool.lines)
        # labels are local to the file: a family's .s holds several kernels, so each kernel's carry its tag
        body = re.sub(r"\.L(\w+)", lambda m: f".L{self.cfg.tag}_{m.group(1)}", a.text())
        return insert_hazard_waits(body)     # docs/rdna4.md §Hazards: the model's fix at every site


    def variant_header(self) -> str:
        """The per-kernel part of the header: what this Config changes, LDS map, resources, register maps."""
        def regmap(rf):
            return "\n".join(f"//   {str(r):<12} {r.name:<12} {note}" for r, note in rf.table)
        waves = waves_by_vgprs(self.NUM_VGPRS)
        return f"""
// ==== {self.SYMBOL}: head dim (D_pad) {self.HEAD_DIM}, output {self.cfg.out_dtype}, P.V {self.cfg.pv_dtype} ===============================
// QK^T {len(self.QK_ORDER)} WMMA + PV {self.N_PV} WMMA ({WMMA_PV16 if self.PV16 else WMMA_PV}) per 64-key tile; O^T = {self.D_TILES} d-tiles x 8 VGPRs;
// Q^T {self.QF} x 16 B per lane; staging {self.STAGE_LOADS} + {self.V_LOADS} b128 loads per thread and tile; ring {self.RING} slots.
// LDS ({self.LDS_BYTES} B): kbuf0 @{self.LDS_KBUF[0]}, kbuf1 @{self.LDS_KBUF[1]} (K tiles {self.K_TILE_BYTES} B, rows of
// {self.K_ROW_BYTES} B), vbuf0 @{self.LDS_VBUF[0]}, vbuf1 @{self.LDS_VBUF[1]} (V^T tiles {self.V_TILE_BYTES} B, rows of {self.V_ROW_BYTES} B).
// Resources: {self.NUM_VGPRS} VGPRs -> {waves} waves/SIMD by registers; {self.LDS_BYTES} B LDS per 4-wave workgroup.
// Output: {self.output_note()}, d-tiles at or past
// head_dim (the kernarg; zero-padded channels) not stored.
{self.wide_note()}//
// VGPR map:
{regmap(self.V)}
// SGPR map:
{regmap(self.S)}
"""

    def wide_note(self) -> str:
        """Head dim 256: what its layout and schedule change (docs/performance.md §Head dim 256)."""
        if not self.WIDE:
            return ""
        return f"""// Head dim 256 (docs/performance.md §Head dim 256): O^T alone is 128 VGPRs, so this variant replaces the loop
// schedule of the family header by the tile in order, with one S^T set (SA), one staging set and Q^T in LDS:
//   top      SALU addresses; global_load k_scale(t+1), K(L[t+1]) -> staging (in flight across QK^T(t))
//   QK^T(t)  {len(self.QK_ORDER)} WMMA; K fragments through the {self.RING}-slot ring, Q^T fragment i (16 B per lane, stored by this
//            thread in the prologue at LDS_Q + {self.Q_FRAG_STEP}i + 16 tid) through the 2 Q^T slots (qring)
//   then     s_wait_loadcnt 0; ds_store K(t+1) -> kbuf[(t+1)%2] (its readers, QK^T(t-1), passed the last end
//            barrier); attn_mask loads; global_load V^T(t+1) -> staging (in flight across softmax + PV(t));
//            barrier (publishes V^T(t), stored after the previous end barrier); softmax(t) in SA (the
//            temporaries mx/xl/lim/rs in qring); O rescale
//   PV(t)    {self.N_PV} WMMA from the one V^T tile
//   end      qk(t+1); s_wait_loadcnt 0; barrier (every wave is done with V^T(t)); ds_store V^T(t+1) -> vbuf
// LDS {self.LDS_BYTES} B (2 K tiles + 1 V^T tile + the Q^T tile) -> 2 workgroups per WGP; two barriers per tile.
"""

    def output_note(self) -> str:
        """The header's line on the output conversion of this Config."""
        if self.cfg.out_dtype == "fp32":
            return "fp32, the value itself (no rounding or saturation; NaN -> 0x7fc00000)"
        return f"{self.cfg.out_dtype} RNE, saturating at +-{OUT_MAX[self.cfg.out_dtype][1]} (fp32 bits)"

    def descriptor(self):
        """Descriptor + metadata of this symbol, from the ABI struct (pointers the kernel writes: abi.ATTENTION_OUTPUTS)."""
        args = [KernelArg(f.name, f.offset, f.kind, written=f.name in abi.ATTENTION_OUTPUTS) for f in ARGS.fields]
        return amdhsa_kernel(self.SYMBOL, args=args, kernarg_size=ARGS.size, lds_bytes=self.LDS_BYTES,
                             next_free_vgpr=self.NUM_VGPRS, next_free_sgpr=self.NUM_SGPRS,
                             max_flat_workgroup_size=THREADS, inst_pref_size=INST_PREF_SIZE,
                             uniform_work_group_size=True)
