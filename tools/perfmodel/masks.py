"""Modeled cost of attn_mask (issue 30; docs/performance.md §Attention masks): what a visited key tile costs when it
is 'partial' (bool bits: one u32 load per lane + 64 VALU) or 'additive' (bits + 32 biases per lane, the exact exp2
form) instead of 'full' (the unmasked instructions), and what that makes of key padding and of a general bool mask.

Model: the first workgroup emulated at EMU_S on a mask that makes EVERY visited tile of that kind (bool: random bits
at density 1/2; additive: N(0, 1) values) gives the per-tile mix (the loop's instructions plus the out-of-line mask
blocks the asm kernel branches to); the calibrated launch model of the unmasked kernel (restate.our_kernel) has its
compute time scaled by the issue-bound cost ratio of that mix to the unmasked one (issue.tile_cost at the kernel's
waves per SIMD: the wait for the bit / bias loads is assumed hidden by the other waves), against the DRAM time with
the mask's own bytes (bits: S_q * S_kv / 8; biases: 4 B per element and the bits), read once per (batch, head): a
mask with per-head rows, the worst case. Key padding at valid
length L: ceil(L / 64) tiles visited (the hidden ones are not in the LUT), at most one of them partial, so its cost
over the unmasked kernel at S_kv = L is (t_partial / t_full - 1) / ceil(L / 64) of the attention time (the unmasked
kernel's own tail mask on that tile is not credited: an upper bound). Every figure here is MODELED.
"""
from __future__ import annotations

from perfmodel.calibration import CALIBRATED
from perfmodel.emulated import arg_names, dynamic_iteration_mix, emulate_workgroup
from perfmodel.hardware import DRAM_BYTES_PER_S
from perfmodel.isa import classify
from perfmodel.issue import tile_cost
from perfmodel import restate
from perfmodel.stream import Mix
from perfmodel.attention import attention_inputs, attention_symbol
from perfmodel.stream import HEAD_DIM


def _mask_args(kind: str, S: int, seed: int = 0) -> dict:
    """The attn_mask kernel arguments of one head at S_q = S_kv = S whose every tile is `kind` ('partial' or
    'additive'), built by sage_co.masks as the host does."""
    import torch
    from sage_co import abi, masks
    g = torch.Generator().manual_seed(seed)
    if kind == "partial":
        mask = torch.rand(1, 1, S, S, generator=g) < 0.5
    else:
        mask = torch.randn(1, 1, S, S, generator=g)
    vis, bias = masks.attn_mask_parts(mask, 1, 1, S, S)
    any_vis, kinds = masks.attn_mask_tiles(vis, bias, S, S)
    want = abi.MASK_KIND_PARTIAL if kind == "partial" else abi.MASK_KIND_ADDITIVE
    if not bool((kinds == want).all()):
        raise AssertionError(f"the {kind} model mask has tiles of another kind")
    active = masks.active_tiles(1, 1, S, S, mask_visible=any_vis)
    lut, sb, sh = masks.build_lut(active)
    bits = masks.pack_bits(vis, S, S)
    ms = masks.mask_word_strides(1, 1, S, S, S)
    return {"lut": lut, "lut_stride_b": sb, "lut_stride_h": sh, "mask_kind": masks.gather_kinds(active, kinds),
            "mask_bits": bits, "mask_bias": masks.pack_bias(bias, S, S) if bias is not None else bits,
            "mask_stride_b": ms[0], "mask_stride_h": ms[1], "mask_stride_s": ms[2], "flags": abi.FLAG_MASK}


_runs: dict = {}


def _emulated(kind: str, kernel: str):
    """(km, run) of the first workgroup at EMU_S with every visited tile of `kind` ('full': the dense run)."""
    import torch
    from sage_co import codeobj
    restate.our_kernel(kernel, 1, 1, restate.EMU_S)          # fills restate's (km, run) cache
    km, dense_run = restate._cache[(kernel, HEAD_DIM, False)]
    if kind == "full":
        return km, dense_run
    key = (kernel, kind)
    if key not in _runs:
        path = restate.KERNELS[kernel]
        symbol = attention_symbol(kernel, HEAD_DIM)
        names = set(arg_names(codeobj.read_file(path).kernel(symbol)))
        inputs = {**attention_inputs(restate.EMU_S, restate.EMU_S, HEAD_DIM), **_mask_args(kind, restate.EMU_S)}
        args = {k: v.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if isinstance(v, torch.Tensor)
                else v for k, v in inputs.items() if k in names}
        _runs[key] = emulate_workgroup(path, km.symbol, restate.BLOCK, args, km.text_addr)
    return km, _runs[key]


def tile_mix(kind: str, kernel: str = "asm") -> Mix:
    """The emulated per-tile mix of one wave with every visited tile of `kind`: the loop's instructions plus the
    out-of-line attn_mask blocks the asm kernel branches to (after the epilogue's s_endpgm; the HIP kernel has its
    mask code inside the loop)."""
    km, run = _emulated(kind, kernel)
    mix, trips = dynamic_iteration_mix(km, run)
    end = max(i.addr for i in km.insts if i.mnemonic == "s_endpgm")
    for ins in km.insts:
        if ins.addr > end and ins.addr in run.counts:
            c = classify(ins.mnemonic)
            setattr(mix, c, getattr(mix, c) + run.per_wave(ins.addr) / trips)
    return mix.scaled(1 / km.tiles_per_iter, source=f"{kind} tiles: loop + out-of-line mask blocks per 64-key tile")


def tile_kind_time(kind: str, kernel: str = "asm", B: int = 1, H: int = 16, S: int = 4096, params=CALIBRATED):
    """(modeled us, issue-cost ratio vs full, binding) of the launch at (B, H, S) with every visited tile of
    `kind`: the calibrated launch model of the unmasked kernel, its compute time scaled by the issue-bound cost
    ratio of the kinds' per-tile mixes (issue.tile_cost at the kernel's waves per SIMD), against the DRAM time with
    the mask's bytes."""
    km, _ = _emulated("full", kernel)
    dense = restate.our_kernel(kernel, B, H, S, params)
    waves = dense.occupancy.waves_per_simd
    ratio = tile_cost(tile_mix(kind, kernel), waves).cycles / tile_cost(tile_mix("full", kernel), waves).cycles
    S_pad = -(-S // 64) * 64
    mask_bytes = {"full": 0, "partial": S_pad * S_pad / 8, "additive": S_pad * S_pad * (4 + 1 / 8)}[kind]
    dram_s = dense.dram_s + B * H * mask_bytes / DRAM_BYTES_PER_S
    compute_s = dense.time_s - params.launch_overhead_s
    t = max(compute_s * ratio, dram_s) + params.launch_overhead_s
    return t * 1e6, ratio, ("DRAM" if dram_s > compute_s * ratio else dense.binding)


def mask_rows(kernel: str = "asm", B: int = 1, H: int = 16, S: int = 4096, params=CALIBRATED,
              valid_lengths=(4096 - 37, 2048 + 1, 333)) -> list[dict]:
    """Modeled time with every tile full / partial / additive at (B, H, S), and key padding's cost at valid
    lengths (one partial tile among ceil(L / 64))."""
    rows = []
    full_us = None
    ratio = {}
    for kind in ("full", "partial", "additive"):
        us, ratio[kind], binding = tile_kind_time(kind, kernel, B, H, S, params)
        full_us = full_us or us
        rows.append({"kernel": kernel, "S": S, "mode": f"every visited tile {kind}", "time_us": us,
                     "vs_unmasked": us / full_us, "issue_ratio": ratio[kind], "binding": binding})
    for L in valid_lengths:
        n = -(-L // 64)
        rows.append({"kernel": kernel, "S": L, "mode": f"key padding, valid length {L} ({n} tiles, <= 1 partial)",
                     "time_us": None, "vs_unmasked": 1 + (ratio["partial"] - 1) / n, "binding": "model"})
    return rows


def print_masks(as_json: bool = False) -> int:
    """`python tools/perf_model.py --masks`: the asm kernel with every tile full / partial / additive, key padding."""
    rows = mask_rows()
    if as_json:
        import json
        print(json.dumps(rows, indent=1))
        return 0
    print("attn_mask, asm kernel, B=1 H=16 D=128 bf16 (MODELED, calibrated):")
    for r in rows:
        t = f"{r['time_us']:9.1f} us" if r["time_us"] is not None else " " * 12
        print(f"  S={r['S']:5}  {r['mode']:54} {t}  x{r['vs_unmasked']:.4f} vs unmasked  ({r['binding']})")
    return 0
