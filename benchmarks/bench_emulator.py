"""Emulator speed: `python benchmarks/bench_emulator.py` prints wave-instructions per second on a
VALU/SALU loop at 32, 128 and 512 waves, WMMA per second (iu8), and wave-instructions per second of the Triton
corpus's two attention kernels at S = 4096 (tests/emu/corpus/triton: `sage_attn_i8_fp8` INT8 QK / FP8 PV, 32
workgroups x 8 waves; `flash_attn_bf16`, 64 x 4 waves; random inputs, one head). Needs LLVM (clang + ld.lld, found by
sage_co.llvm.find_llvm) to assemble the loop kernels and this checkout's corpus: a repository-only benchmark (it was
sage_co/emu/bench.py, which an installed wheel could not run)."""
from __future__ import annotations

import json
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from sage_co.emu import Device
from sage_co.llvm import LLVMNotFound, find_llvm

TRITON = Path(__file__).resolve().parent.parent / "tests" / "emu" / "corpus" / "triton"
ATTENTION = ("sage_attn_i8_fp8", "sage_attn_i8_fp8_t16off", "flash_attn_bf16")

ASM = r"""
        .amdgcn_target "amdgcn-amd-amdhsa--gfx1201"
        .amdhsa_code_object_version 5
        .text
        .globl valu_loop
        .p2align 8
        .type valu_loop,@function
valu_loop:                                  // 4 VALU + 3 SALU per iteration
        s_load_b32 s9, s[0:1], 0x0
        v_cvt_f32_u32 v1, v0
        v_mov_b32 v2, 0x3f800001
        v_mov_b32 v3, 0.5
        v_mov_b32 v4, v0
        s_mov_b32 s8, 0
        s_wait_kmcnt 0
.Lv:
        v_fma_f32 v1, v1, v2, v3
        v_add_nc_u32 v4, v4, v0
        v_xor_b32 v5, v4, v1
        v_mul_f32 v6, v1, v2
        s_add_co_u32 s8, s8, 1
        s_cmp_lt_u32 s8, s9
        s_cbranch_scc1 .Lv
        s_endpgm
        .globl wmma_loop
        .p2align 8
        .type wmma_loop,@function
wmma_loop:                                  // 4 chained iu8 WMMA + 3 SALU per iteration
        s_load_b32 s9, s[0:1], 0x0
        v_mov_b32 v8, v0
        v_mov_b32 v9, 0x01020304
        s_mov_b32 s8, 0
        s_wait_kmcnt 0
.Lw:
        v_wmma_i32_16x16x16_iu8 v[16:23], v[8:9], v[8:9], v[16:23] neg_lo:[1,1,0]
        v_wmma_i32_16x16x16_iu8 v[16:23], v[8:9], v[8:9], v[16:23] neg_lo:[1,1,0]
        v_wmma_i32_16x16x16_iu8 v[16:23], v[8:9], v[8:9], v[16:23] neg_lo:[1,1,0]
        v_wmma_i32_16x16x16_iu8 v[16:23], v[8:9], v[8:9], v[16:23] neg_lo:[1,1,0]
        s_add_co_u32 s8, s8, 1
        s_cmp_lt_u32 s8, s9
        s_cbranch_scc1 .Lw
        s_endpgm
        .rodata
.macro KD name
        .p2align 6
        .amdhsa_kernel \name
          .amdhsa_kernarg_size 4
          .amdhsa_user_sgpr_count 2
          .amdhsa_user_sgpr_kernarg_segment_ptr 1
          .amdhsa_wavefront_size32 1
          .amdhsa_next_free_vgpr 24
          .amdhsa_next_free_sgpr 16
          .amdhsa_float_denorm_mode_32 3
          .amdhsa_float_denorm_mode_16_64 3
        .end_amdhsa_kernel
.endm
        KD valu_loop
        KD wmma_loop
        .amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.kernels:
  - { .name: valu_loop, .symbol: valu_loop.kd, .kernarg_segment_size: 4, .kernarg_segment_align: 4, .group_segment_fixed_size: 0, .private_segment_fixed_size: 0, .wavefront_size: 32, .sgpr_count: 16, .vgpr_count: 24, .max_flat_workgroup_size: 1024, .args: [ { .offset: 0, .size: 4, .value_kind: by_value } ] }
  - { .name: wmma_loop, .symbol: wmma_loop.kd, .kernarg_segment_size: 4, .kernarg_segment_align: 4, .group_segment_fixed_size: 0, .private_segment_fixed_size: 0, .wavefront_size: 32, .sgpr_count: 16, .vgpr_count: 24, .max_flat_workgroup_size: 1024, .args: [ { .offset: 0, .size: 4, .value_kind: by_value } ] }
...
        .end_amdgpu_metadata
"""


def build() -> bytes:
    with tempfile.TemporaryDirectory() as d:
        s, o, co = Path(d) / "b.s", Path(d) / "b.o", Path(d) / "b.co"
        s.write_text(ASM)
        llvm = find_llvm()
        subprocess.run([str(llvm.clang), "--target=amdgcn-amd-amdhsa", "-mcpu=gfx1201", "-c", str(s), "-o", str(o)],
                       check=True)
        subprocess.run([str(llvm.lld), "-shared", str(o), "-o", str(co)], check=True)
        return co.read_bytes()


def run(waves=(32, 128, 512), iters: int = 200, sanitize: bool = True) -> dict:
    dev = Device()
    mod = dev.load(build(), "bench.co")
    out = {}
    for w in waves:
        wpg = min(w, 4)
        mod.launch("valu_loop", (w // wpg, 1, 1), (32 * wpg, 1, 1), struct.pack("<I", 2), sanitize=sanitize)
        t = time.perf_counter()
        st = mod.launch("valu_loop", (w // wpg, 1, 1), (32 * wpg, 1, 1), struct.pack("<I", iters), sanitize=sanitize)
        dt = time.perf_counter() - t
        out[f"valu_salu_{w}w_winst_per_s"] = st["wave_instructions"] / dt
    for w in (64, 512):
        wpg = 4
        t = time.perf_counter()
        st = mod.launch("wmma_loop", (w // wpg, 1, 1), (32 * wpg, 1, 1), struct.pack("<I", iters // 4),
                        sanitize=sanitize)
        dt = time.perf_counter() - t
        out[f"wmma_{w}w_per_s"] = st["WMMA"] / dt
    return out


def triton_attention(name: str, S: int = 4096, sanitize: bool = True) -> dict:
    """One launch of a Triton corpus attention kernel over S queries and keys (one head, random inputs): its
    statistics (wave_instructions, wall_s, ...)."""
    meta = json.loads((TRITON / f"{name}.json").read_text())
    dev = Device(1 << 26)
    mod = dev.load((TRITON / f"{name}.co").read_bytes(), name)
    rng = np.random.default_rng(0)
    c = meta["constexprs"]
    D, BM, BN = c["D"], c["BM"], c["BN"]

    def put(a):
        p = dev.alloc(max(a.nbytes, 4))
        dev.write(p, np.ascontiguousarray(a))
        return p

    out = dev.alloc(S * D * 2)
    if name.startswith("flash"):
        qkv = [put((rng.standard_normal((S, D)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16))
               for _ in range(3)]
        args = struct.pack("<QQQQif", *qkv, out, S, D ** -0.5)
    else:
        q, k = (put(rng.integers(-127, 128, (S, D)).astype(np.int8)) for _ in range(2))
        v = put(rng.integers(0, 0x7F, (S, D)).astype(np.uint8))               # finite e4m3 codes
        qs, ks = put(np.full(S // BM, 0.002, np.float32)), put(np.full(S // BN, 0.002, np.float32))
        vs = put(np.ones(D, np.float32))
        args = struct.pack("<QQQQQQQi", q, k, v, qs, ks, vs, out, S) + bytes(4)
    args += struct.pack("<QQ", 0, 0)      # Triton's two trailing pointer args (global / profile scratch), unused
    return mod.launch(meta["symbol"], (S // BM, 1, 1), (32 * meta["num_warps"], 1, 1), args,
                      dynamic_lds=meta["shared"], sanitize=sanitize)


def main(argv=None) -> int:
    try:
        find_llvm()
    except LLVMNotFound as exc:
        print(f"needs LLVM (clang + ld.lld) to assemble the benchmark kernels: {exc}", file=sys.stderr)
        return 2
    for san in (True, False):
        res = run(sanitize=san)
        print(f"sanitize={san}")
        for k, v in res.items():
            print(f"  {k:34s} {v / 1e6:8.2f} M/s")
        for name in ATTENTION:
            st = triton_attention(name, sanitize=san)
            print(f"  {name + ' S=4096':34s} {st['wave_instructions'] / st['wall_s'] / 1e6:8.2f} M/s "
                  f"({st['wave_instructions'] / 1e6:.1f} M wave-instructions in {st['wall_s']:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
