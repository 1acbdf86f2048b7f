"""Tiny randomly initialized diffusers video transformers that pass `encoder_attention_mask` (text-token padding),
built from their configs on CPU in bf16: HunyuanVideoTransformer3DModel and LTXVideoTransformer3DModel.

Sizes are the smallest the configs allow with the real models' head dims (HunyuanVideo 128, LTX-Video 64) and
2 heads, B = 2 with different text lengths (so the masks differ per batch), token counts not multiples of 64.
Every attention of these models runs on the emulator when routed to sage-co, so they stay small.

What each model hands its attention (diffusers 0.42.1):
  HunyuanVideo  joint blocks (dispatcher): bool [B, 1, 1, N] key padding over image + text tokens (text end-padded);
                token refiner (diffusers' Attention with AttnProcessor2_0, which calls F.scaled_dot_product_attention
                itself, not the dispatcher): bool [B, 1, S_txt, S_txt], valid x valid pairs plus key 0.
  LTX-Video     self-attention (dispatcher): no mask; cross-attention (dispatcher): additive bf16 [B, H, 1, S_txt]
                of 0 / -10000 (its `(1 - mask) * -10000.0`), broadcast over the queries.
"""
from __future__ import annotations

import torch

B = 2
TEXT_LEN = 21            # text tokens per sample (padded); valid per batch: TEXT_VALID
TEXT_VALID = (21, 9)     # batch 0 uses every text token, batch 1 only the first 9 (end padding)

# HunyuanVideo: 1 latent frame of 6 x 7, patch 1 -> 42 image tokens, + 21 text tokens -> 63-token joint attention
HUNYUAN_DISPATCHED = 2   # attention calls through diffusers' dispatcher per forward: 1 dual-stream + 1 single block
HUNYUAN_REFINER_SDPA = 1  # F.scaled_dot_product_attention calls per forward: the 1 token-refiner layer
# LTX-Video: 2 latent frames of 5 x 7 -> 70 video tokens; self-attention and cross-attention to 21 text tokens
LTX_DISPATCHED = 2       # 1 block: attn1 (self) + attn2 (cross, masked)


def text_mask() -> torch.Tensor:
    """[B, TEXT_LEN] 0/1 (int64, as tokenizers return it): batch b keeps its first TEXT_VALID[b] tokens."""
    return (torch.arange(TEXT_LEN)[None, :] < torch.tensor(TEXT_VALID)[:, None]).long()


def build_hunyuan():
    from diffusers import HunyuanVideoTransformer3DModel
    torch.manual_seed(0)
    model = HunyuanVideoTransformer3DModel(in_channels=4, out_channels=4, num_attention_heads=2,
                                           attention_head_dim=128, num_layers=1, num_single_layers=1,
                                           num_refiner_layers=1, mlp_ratio=2.0, patch_size=1, patch_size_t=1,
                                           guidance_embeds=False, text_embed_dim=32, pooled_projection_dim=32,
                                           rope_axes_dim=(16, 56, 56))
    return model.to(torch.bfloat16).eval()


def hunyuan_inputs():
    g = torch.Generator().manual_seed(1)
    return dict(hidden_states=torch.randn(B, 4, 1, 6, 7, generator=g).to(torch.bfloat16),
                timestep=torch.tensor([500, 250]),
                encoder_hidden_states=torch.randn(B, TEXT_LEN, 32, generator=g).to(torch.bfloat16),
                encoder_attention_mask=text_mask(),
                pooled_projections=torch.randn(B, 32, generator=g).to(torch.bfloat16))


def build_ltx():
    from diffusers import LTXVideoTransformer3DModel
    torch.manual_seed(0)
    model = LTXVideoTransformer3DModel(in_channels=8, out_channels=8, patch_size=1, patch_size_t=1,
                                       num_attention_heads=2, attention_head_dim=64, cross_attention_dim=128,
                                       num_layers=1, caption_channels=32)
    return model.to(torch.bfloat16).eval()


def ltx_inputs():
    g = torch.Generator().manual_seed(1)
    frames, height, width = 2, 5, 7
    return dict(hidden_states=torch.randn(B, frames * height * width, 8, generator=g).to(torch.bfloat16),
                encoder_hidden_states=torch.randn(B, TEXT_LEN, 32, generator=g).to(torch.bfloat16),
                timestep=torch.tensor([500, 250]), encoder_attention_mask=text_mask(),
                num_frames=frames, height=height, width=width)


def forward(model, inputs):
    with torch.no_grad():
        return model(**inputs).sample
