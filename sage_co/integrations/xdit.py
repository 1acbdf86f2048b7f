"""xDiT (xfuser) and yunchang: sage-co behind their attention hooks.

xDiT: `xdit_attention` has the signature of xDiT's attention backends (xfuser.core.distributed.attention_backend,
registered there with `register_attention_function(AttentionBackendType.X)`):
    fn(query, key, value, dropout_p, is_causal, attention_kwargs=None) -> (out, lse)
    query/key/value [B, H, S, D]; out [B, H, S, D]; lse fp32 [B, H, S].
`register_xdit()` registers it for `AttentionBackendType.SAGE` (`--attention_backend SAGE`). xDiT only lets SAGE be
chosen when it can import sageattention (its runtime check), so also activate
sage_co.integrations.sageattention_shim before xfuser is imported; with the shim alone xDiT's own SAGE function
calls sage-co's sageattn but drops attention_kwargs (attn_mask included) silently, which registering this
function avoids. `attention_kwargs`: "attn_mask" follows sageattn's policy; xDiT's packed-K/V keys
("indices_k", "cu_seqlens_k", "max_seqlen_k", xDiT's _varlen_pack_keys: the [B*S_k] K/V rows gathered by
indices_k into sequences cu_seqlens_k, one per batch, queries dense) run sage_co.sage_attention_varlen on the
packed K/V (one prepare + one attention launch, no host sync: docs/numerics.md §Varlen), as xDiT's flash-attention
backends run flash_attn_varlen_func; any other key raises an error naming it.

yunchang: `SageCoRingProcessor` is an `attn_processor` for `yunchang.LongContextAttention(attn_type=None,
attn_processor=SageCoRingProcessor())` (yunchang hands the processor to its ring loop only when `attn_type`
matches none of its AttnType members, hence None). Called per ring step as
    processor(q, k, v, dropout_p=..., softmax_scale=..., causal=..., window_size=..., softcap=...,
              alibi_slopes=..., return_softmax=...) -> (out [B, S, H, D], lse fp32 [B, H, S])
on the head-sharded [B, S, H, D] blocks; yunchang merges the steps' (out, lse) itself.
"""
from __future__ import annotations

import torch

from ..hostsafe import sageattn   # compat's; a GPU error falls back (hostsafe)

_VARLEN_KEYS = ("indices_k", "cu_seqlens_k", "max_seqlen_k")


def xdit_attention(query, key, value, dropout_p, is_causal, attention_kwargs=None):
    """xDiT attention backend on sage-co: [B, H, S, D] in, (out [B, H, S, D], lse [B, H, S]) out."""
    kw = dict(attention_kwargs or {})
    packed = {name: kw.pop(name, None) for name in _VARLEN_KEYS}
    unknown = sorted(set(kw) - {"attn_mask"})
    if unknown:
        raise TypeError(f"attention_kwargs: sage-co's xDiT backend does not know {unknown} (it never drops "
                        f"attention options silently); accepted: attn_mask (None), {list(_VARLEN_KEYS)}")
    if packed["indices_k"] is not None:   # without indices_k xDiT packs nothing: the other two are unused
        return _packed_kv(query, key, value, dropout_p, is_causal, kw.get("attn_mask"), **packed)
    return sageattn(query, key, value, tensor_layout="HND", is_causal=is_causal, return_lse=True,
                    dropout_p=dropout_p, **kw)


def _packed_kv(query, key, value, dropout_p, is_causal, attn_mask, indices_k, cu_seqlens_k, max_seqlen_k):
    """xDiT's packed K/V (its _varlen_pack_keys): K/V rows [B*S_k] of the BSHD views gathered by indices_k, one
    sequence per batch (cu_seqlens_k, max_seqlen_k), the queries dense (cu_seqlens_q = b * S); out [B, H, S, D],
    lse [B, H, S] from the packed call's [H, B*S]. sageattn_varlen: sageattn's keyword policy and defaults."""
    from ..hostsafe import sageattn_varlen
    if attn_mask is not None:
        raise ValueError("attn_mask: xDiT's packed K/V (indices_k) already carries the mask; expected None, got a "
                         f"{type(attn_mask).__name__}")
    if cu_seqlens_k is None or max_seqlen_k is None:
        raise ValueError("attention_kwargs: indices_k needs cu_seqlens_k and max_seqlen_k (xDiT's packed K/V)")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name}: expected a [B, H, S, D] tensor, got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    B, H, S, D = query.shape
    H_kv, S_k = key.shape[1], key.shape[2]
    q = query.transpose(1, 2).reshape(B * S, H, D)
    k = torch.index_select(key.transpose(1, 2).reshape(B * S_k, H_kv, D), 0, indices_k)
    v = torch.index_select(value.transpose(1, 2).reshape(B * S_k, H_kv, D), 0, indices_k)
    cu_q = torch.arange(0, B + 1, dtype=torch.int32, device=query.device) * S
    # sageattn's keyword policy (and defaults: smooth_k), as the dense path
    out, lse = sageattn_varlen(q, k, v, cu_q, cu_seqlens_k, S, int(max_seqlen_k), is_causal=is_causal,
                               return_lse=True, dropout_p=dropout_p)
    return out.reshape(B, S, H, D).transpose(1, 2), lse.reshape(H, B, S).transpose(0, 1)


def register_xdit(force: bool = False) -> None:
    """Put `xdit_attention` in xDiT's attention-function registry for AttentionBackendType.SAGE. Refuses when the
    SAGE backend xDiT imported is a real sageattention (not sage-co's shim) unless force=True."""
    from xfuser.core.distributed import attention_backend as ab
    real = getattr(ab, "sageattn", None)
    if real is not None and real is not sageattn and not force:
        raise RuntimeError("xDiT's SAGE backend uses a real sageattention here; sage-co does not replace it unless "
                           "register_xdit(force=True)")
    ab.register_attention_function(ab.AttentionBackendType.SAGE)(xdit_attention)


class SageCoRingProcessor(torch.nn.Module):
    """yunchang attn_processor (one ring step): NHD blocks in, (out [B, S, H, D], lse fp32 [B, H, S]) out.
    Every keyword yunchang passes goes through sage_co.sageattn's policy (none is dropped)."""

    def forward(self, q, k, v, *args, **kwargs):
        if args:
            raise TypeError(f"SageCoRingProcessor: expected keyword arguments after q, k, v (as yunchang passes "
                            f"them), got {len(args)} positional")
        return sageattn(q, k, v, tensor_layout="NHD", return_lse=True, **kwargs)
