"""The shipped attention kernels' launch inputs for the model: which symbol, and one head of real prepared data with
the kernel arguments by name (for either attention kernarg layout)."""
from __future__ import annotations

from perfmodel.stream import HEAD_DIM


def attention_symbol(kernel: str, head_dim: int = HEAD_DIM, pv_dtype: str = "fp8", out_dtype: str = "bf16",
                     schedule: str | None = None) -> str:
    """The shipped symbol of an attention kernel at this head dim, P.V dtype, output dtype (default bf16) and exp2
    schedule (None: the family's default; a code object may hold one symbol per (head_dim, out_dtype, pv_dtype,
    schedule): registry key columns)."""
    from sage_co import registry
    extra = {} if schedule is None else {"schedule": schedule}
    try:
        return registry.find("sage_attention_fwd", kernel, head_dim=head_dim, out_dtype=out_dtype,
                             pv_dtype=pv_dtype, **extra).symbol
    except (LookupError, TypeError, ValueError):
        if head_dim != HEAD_DIM:
            raise ValueError(f"no shipped {kernel} attention kernel for head_dim={head_dim}") from None
        return registry.find("sage_attention_fwd", kernel).symbol       # a manifest without key columns


def attention_inputs(S_q: int, S_kv: int | None = None, head_dim: int = HEAD_DIM, seed: int = 0,
                     pv_dtype: str = "fp8", out_bytes: int = 2) -> dict:
    """Kernel arguments of one head of real (random normal, prepared) data at B = H = 1, for the emulated
    workgroup: the O rescale then runs as often as the row maxima move. Pointers: the prepared tensors, or an int
    (bytes of an output buffer). Values for both attention kernarg layouts (v1 seq_len/seq_pad/num_heads, v2
    seq_len_q/.../out_stride_*); callers pass the ones the symbol declares. out_bytes: bytes per output element
    (2: bf16/fp16, 4: fp32)."""
    import torch
    from sage_co.reference import sage_prepare
    S_kv = S_kv or S_q
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, S_q, 1, head_dim, generator=g).to(torch.bfloat16)
    k, v = (torch.randn(1, S_kv, 1, head_dim, generator=g).to(torch.bfloat16) for _ in range(2))
    p = sage_prepare(q, k, v, pv_dtype=pv_dtype)
    Sq_pad, Skv_pad = p.q_int8.shape[2], p.k_int8.shape[2]
    from sage_co import masks    # v3: the LUT of active key tiles (dense here: every tile of every query tile)
    lut, lut_sb, lut_sh = masks.build_lut(masks.active_tiles(1, 1, S_q, S_kv))
    return {"q": p.q_int8, "k": p.k_int8, "v": p.v_t, "q_scale": p.q_scale,
            "k_scale": p.k_scale, "k_mean": p.k_mean, "v_scale": p.v_scale,
            "out": S_q * head_dim * out_bytes, "lse": 4, "seq_len": S_q, "seq_pad": Sq_pad, "num_heads": 1, "flags": 0,
            "seq_len_q": S_q, "seq_pad_q": Sq_pad, "seq_len_kv": S_kv, "seq_pad_kv": Skv_pad,
            "num_heads_q": 1, "num_heads_kv": 1, "kv_group_magic": 1 << 32, "out_stride_b": S_q * head_dim,
            "out_stride_s": head_dim, "out_stride_h": head_dim, "head_dim": head_dim,
            "lut": lut, "lut_stride_b": lut_sb, "lut_stride_h": lut_sh, "causal_offset": S_kv - S_q,
            "v_mean": p.k_mean,
            # attn_mask (v4): no mask -- every LUT entry 'full' (the kinds are read always), bits/bias never read
            "mask_kind": torch.zeros_like(lut), "mask_bits": 4, "mask_bias": 4,
            "mask_stride_b": 0, "mask_stride_h": 0, "mask_stride_s": 0,
            # read only with FLAG_VARLEN
            "cu_seqlens_q": lut, "cu_seqlens_kv": lut}
