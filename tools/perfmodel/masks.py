"""Modeled cost of attn_mask (issue 30; docs/performance.md §Attention masks): what a visited key tile costs when it
is 'partial' (bool bits: one u32 load per lane + 64 VALU) or 'additive' (bits + 32 biases per lane, the exact exp2
form) instead of 'full' (the unmasked instructions), and what that makes of key padding and of a general bool mask.

Model: restate.our_kernel's launch model with the first workgroup emulated at EMU_S on a mask that makes EVERY
visited tile of that kind (bool: random bits at density 1/2; additive: N(0, 1) values), so the emulated per-iteration
mix holds the mask path's instructions and its waits (the bit / bias loads are waited for alone, before the tile's
fragment prefetch), at the dense launch's trip count. The mask's own bytes are added to the DRAM traffic (bits: S_q *
S_kv / 8 per mask row set; biases: 4 B per element), read once per (batch, head) of the mask. Key padding at valid
length L: ceil(L / 64) tiles visited (the hidden ones are not in the LUT), at most one of them partial, so its cost
over the unmasked kernel at S_kv = L is (t_partial / t_full - 1) / ceil(L / 64) of the attention time (the unmasked
kernel's own tail mask on that tile is not credited: an upper bound). Every figure here is MODELED.
"""
from __future__ import annotations

from perfmodel.calibration import CALIBRATED
from perfmodel.emulated import arg_names, emulate_workgroup
from perfmodel.launch_model import Launch, model_launch
from perfmodel import restate
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


def tile_kind_launch(kind: str, variant: str = "asm", B: int = 1, H: int = 16, S: int = 4096, params=CALIBRATED):
    """The modeled launch at (B, H, S) with every visited tile of `kind` ('full' = the unmasked kernel)."""
    import torch
    from sage_co import codeobj
    dense = restate.our_kernel(variant, B, H, S, params)
    if kind == "full":
        return dense
    km, _ = restate._cache[(variant, HEAD_DIM, False)]
    key = (variant, kind)
    if key not in _runs:
        path = restate.KERNELS[variant]
        symbol = attention_symbol(variant, HEAD_DIM)
        names = set(arg_names(codeobj.read_file(path).kernel(symbol)))
        inputs = {**attention_inputs(restate.EMU_S, restate.EMU_S, HEAD_DIM), **_mask_args(kind, restate.EMU_S)}
        args = {k: v.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if isinstance(v, torch.Tensor)
                else v for k, v in inputs.items() if k in names}
        _runs[key] = emulate_workgroup(path, km.symbol, restate.BLOCK, args, km.text_addr)
    S_pad = -(-S // 64) * 64
    mask_bytes = S_pad * S_pad // 8 if kind == "partial" else S_pad * S_pad * (4 + 1 / 8)
    launch = Launch((S_pad // restate.QUERY_TILE, H, B), restate.BLOCK, restate.attention_flops(B, H, S), "int8",
                    trip_count=dense.trip_count, dram_bytes=dense.dram_s * restate.DRAM_BYTES_PER_S + B * H * mask_bytes)
    return model_launch(km, launch, _runs[key], params)


def mask_rows(variant: str = "asm", B: int = 1, H: int = 16, S: int = 4096, params=CALIBRATED,
              valid_lengths=(4096 - 37, 2048 + 1, 333)) -> list[dict]:
    """Modeled time of every tile full / partial / additive at (B, H, S), and key padding's cost at valid lengths."""
    rows = []
    t = {}
    for kind in ("full", "partial", "additive"):
        r = tile_kind_launch(kind, variant, B, H, S, params)
        t[kind] = r.time_us
        rows.append({"variant": variant, "S": S, "mode": f"every tile {kind}", "time_us": r.time_us,
                     "vs_full": r.time_us / t["full"], "binding": r.binding})
    ratio = t["partial"] / t["full"]
    for L in valid_lengths:
        n = -(-L // 64)
        rows.append({"variant": variant, "S": L, "mode": f"key padding, valid length {L} ({n} tiles, 1 partial)",
                     "time_us": None, "vs_full": 1 + (ratio - 1) / n, "binding": "model"})
    return rows


if __name__ == "__main__":
    for row in mask_rows():
        print(row)
