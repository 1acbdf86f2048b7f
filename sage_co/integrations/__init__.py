"""Adapters that make the attention switches of existing frameworks reach sage-co.

    sageattention_shim  `import sageattention` -> sage-co (ComfyUI, diffusers, xDiT, LightX2V, yunchang unchanged)
    diffusers           enable(model): sage-co in diffusers' attention backend registry
    lightx2v            SageCoAttnWeight under the key "sage_co" (entry point lightx2v.platform_plugins)
    xdit                xDiT's attention-backend function and yunchang's ring processor

Each imports its framework lazily: importing this package needs none of them.
"""
