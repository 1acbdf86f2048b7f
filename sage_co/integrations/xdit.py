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
("indices_k", "cu_seqlens_k", "max_seqlen_k": K/V gathered by indices_k, queries dense) are not mapped onto
sage_co.sage_attention_varlen by this backend and raise NotImplementedError when indices_k is given; any other
key raises an error naming it.

yunchang: `SageCoRingProcessor` is an `attn_processor` for `yunchang.LongContextAttention(attn_type=None,
attn_processor=SageCoRingProcessor())` (yunchang hands the processor to its ring loop only when `attn_type`
matches none of its AttnType members, hence None). Called per ring step as
    processor(q, k, v, dropout_p=..., softmax_scale=..., causal=..., window_size=..., softcap=...,
              alibi_slopes=..., return_softmax=...) -> (out [B, S, H, D], lse fp32 [B, H, S])
on the head-sharded [B, S, H, D] blocks; yunchang merges the steps' (out, lse) itself.
"""
from __future__ import annotations

import torch

from ..compat import sageattn

_VARLEN_KEYS = ("indices_k", "cu_seqlens_k", "max_seqlen_k")


def xdit_attention(query, key, value, dropout_p, is_causal, attention_kwargs=None):
    """xDiT attention backend on sage-co: [B, H, S, D] in, (out [B, H, S, D], lse [B, H, S]) out."""
    kw = dict(attention_kwargs or {})
    if kw.get("indices_k") is not None:
        raise NotImplementedError("attention_kwargs['indices_k']: xDiT's packed (varlen) K/V is not mapped onto "
                                  "sage_co.sage_attention_varlen by this backend; pass unpacked K/V")
    for name in _VARLEN_KEYS:  # without indices_k xDiT packs nothing (its _varlen_pack_keys): these are unused
        kw.pop(name, None)
    unknown = sorted(set(kw) - {"attn_mask"})
    if unknown:
        raise TypeError(f"attention_kwargs: sage-co's xDiT backend does not know {unknown} (it never drops "
                        f"attention options silently); accepted: attn_mask (None), {list(_VARLEN_KEYS)}")
    return sageattn(query, key, value, tensor_layout="HND", is_causal=is_causal, return_lse=True,
                    dropout_p=dropout_p, **kw)


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
