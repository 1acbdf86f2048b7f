"""ComfyUI custom node "sage-co attention": patch a MODEL so its attention runs sage-co.

Install into a ComfyUI tree (writes custom_nodes/sage-co/__init__.py, which imports this package):
    sage-co comfyui install /path/to/ComfyUI
Then, in a workflow: Load Checkpoint -> "sage-co attention" (enabled, pv_dtype, smooth_k, sparsity) -> KSampler.

The node clones the model and sets sage-co's attention function (sage_co.integrations.comfyui.attention) on the
clone: `model.set_model_optimized_attention(fn)` where ComfyUI has it (comfy/model_patcher.py, newer releases),
else `model_options["transformer_options"]["optimized_attention_override"]` (older releases; the override receives
the function it replaces and hands it the calls sage-co does not serve). enabled=False passes the model through
unchanged. Other models in the graph keep ComfyUI's attention.

Loading the package also registers the function under the name "sage_co" with
`comfy.ldm.modules.attention.register_attention_function` (ComfyUI's registry, read by
`get_attention_function(name)`), when that ComfyUI has it.

comfy-kitchen: ComfyUI's `--use-kitchen-int8-attention` runs `comfy_kitchen.int8_attention`, which calls its own
extension directly and never consults comfy_kitchen's BackendRegistry, so no backend registration can route it to
sage-co: use this node (or `--use-sage-attention` with the sageattention shim) instead. The comfy-kitchen attention
functions that do consult the registry (sol_attn, na3d / na2d) compute Sol-Attn's pooled sparse attention and
neighborhood attention, which sage-co's kernels do not, so sage-co registers no backend for them
(tests/integrations/test_comfy_kitchen.py checks these facts on the installed comfy-kitchen).
"""
from __future__ import annotations

from ... import sdpa
from ...abi import PV_DTYPES   # the node's pv_dtype choices: the manifest column, one list (fp8 first: the default)
from .attention import make_attention, make_override

ATTENTION_NAME = "sage_co"   # the name in comfy.ldm.modules.attention's registry
SPARSITY = ("off", "auto")


def patch_model(model, enabled: bool = True, pv_dtype: str = "fp8", smooth_k: bool = True, sparsity: str = "off",
                cdf_threshold: float = 0.98):   # SpargeAttn's default (sage_co.sparse.DEFAULT_CDF_THRESHOLD)
    """The node's work: a clone of ComfyUI's ModelPatcher `model` whose attention runs sage-co."""
    if not enabled:
        return model
    if sparsity not in SPARSITY:
        raise ValueError(f"sparsity: expected one of {SPARSITY}, got {sparsity!r}")
    options = sdpa.Options(pv_dtype=pv_dtype, smooth_k=bool(smooth_k),
                           sparsity="auto" if sparsity == "auto" else None,
                           cdf_threshold=float(cdf_threshold) if sparsity == "auto" else None)   # only with "auto"
    patched = model.clone()
    if hasattr(patched, "set_model_optimized_attention"):
        patched.set_model_optimized_attention(make_attention(options))
    else:
        transformer_options = patched.model_options.setdefault("transformer_options", {})
        transformer_options["optimized_attention_override"] = make_override(options)
    return patched


class SageCoAttention:
    """ComfyUI node (classic node API: INPUT_TYPES / RETURN_TYPES / FUNCTION)."""

    @classmethod
    def INPUT_TYPES(cls):   # noqa: N802 (ComfyUI's name)
        return {"required": {
            "model": ("MODEL",),
            "enabled": ("BOOLEAN", {"default": True}),
            "pv_dtype": (list(PV_DTYPES), {"default": "fp8",
                                           "tooltip": "fp8: P.V on the FP8 WMMA (fastest); fp16: V kept in fp16"}),
            "smooth_k": ("BOOLEAN", {"default": True, "tooltip": "subtract K's mean before INT8 (exact in softmax)"}),
            "sparsity": (list(SPARSITY), {"default": "off",
                                          "tooltip": "auto: skip key tiles by SpargeAttn's prediction (approximate)"}),
        }}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"
    CATEGORY = "advanced/attention"
    DESCRIPTION = "Run this model's attention on sage-co (INT8 Q.K, FP8/FP16 P.V) where served, ComfyUI's otherwise."

    def patch(self, model, enabled=True, pv_dtype="fp8", smooth_k=True, sparsity="off"):
        return (patch_model(model, enabled, pv_dtype, smooth_k, sparsity),)


NODE_CLASS_MAPPINGS = {"SageCoAttention": SageCoAttention}
NODE_DISPLAY_NAME_MAPPINGS = {"SageCoAttention": "sage-co attention"}


def register_attention_function() -> bool:
    """Register sage-co (default options) as "sage_co" in ComfyUI's attention registry; False where this ComfyUI
    has no registry or is not importable."""
    try:
        from comfy.ldm.modules import attention
    except ImportError:
        return False
    register = getattr(attention, "register_attention_function", None)
    if register is None:
        return False
    if ATTENTION_NAME not in getattr(attention, "REGISTERED_ATTENTION_FUNCTIONS", {}):
        register(ATTENTION_NAME, make_attention())
    return True
