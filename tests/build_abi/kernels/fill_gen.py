"""Generator test kernel: prints gfx1201 assembly for `fill(u32* out, u32 value)`, one dword per lane of one wave.
Descriptor, symbol boilerplate and metadata come from asm_src/asmdsl.py, as for the shipped generator
(build_asm.py puts asm_src/ on the generator's PYTHONPATH)."""
import sys

from asmdsl import KernelArg, amdhsa_kernel, code_object  # noqa: E402

BODY = """\
        s_load_b64      s[2:3], s[0:1], 0x0        // out
        s_load_b32      s4, s[0:1], 0x8            // value
        v_lshlrev_b32   v1, 2, v0                  // byte offset = 4 * lane
        s_wait_kmcnt    0x0
        v_mov_b32       v2, s4
        global_store_b32 v1, v2, s[2:3]
        s_endpgm"""

FILL = amdhsa_kernel("fill", args=[KernelArg("out", 0, "ptr", written=True), KernelArg("value", 8, "u32")],
                     kernarg_size=12, next_free_vgpr=3, next_free_sgpr=8, reserve_vcc=False,
                     max_flat_workgroup_size=32)

sys.stdout.write(code_object([(FILL, BODY)]))
