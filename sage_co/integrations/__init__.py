"""Adapters that make the attention switches of existing frameworks reach sage-co.

    sageattention_shim  `import sageattention` -> sage-co (ComfyUI, diffusers, xDiT, LightX2V, yunchang unchanged)
    diffusers           enable(model): sage-co in diffusers' attention backend registry
    lightx2v            SageCoAttnWeight under the key "sage_co" (entry point lightx2v.platform_plugins)
    xdit                xDiT's attention-backend function and yunchang's ring processor
    comfyui/            the ComfyUI node "sage-co attention" and `sage-co comfyui install PATH`
    startup             the start-up .pth that makes SAGE_CO_SAGEATTENTION_SHIM work from the environment
    switches            which of these reach sage-co here (`sage-co info`)

Code that calls torch's SDPA itself (diffusers SD3 / CogVideoX processors) is reached by sage_co.sdpa instead.

Each imports its framework lazily: importing this package needs none of them.
"""
