"""diffusers: run a model's attention through sage-co via diffusers' own attention dispatcher.

    from sage_co.integrations import diffusers as sage_diffusers
    sage_diffusers.enable(pipe.transformer)      # every attention processor that dispatches -> sage-co
    image = pipe(prompt).images[0]
    sage_diffusers.disable(pipe.transformer)     # back to the backends they had

Mechanism (diffusers >= 0.35, checked on 0.42.1): diffusers' attention processors call
`attention_dispatch.dispatch_attention_fn(..., backend=processor._attention_backend)`, which looks the backend up in
`_AttentionBackendRegistry`. `enable` registers `attention_backend` below with that registry's own `register`
decorator (the one diffusers registers its built-in backends with) under the backend name "sage"
(`AttentionBackendName.SAGE`: diffusers' names are a closed Enum, and "sage" is the switch users already flip),
then sets `_attention_backend` on the model's processors, which is what `ModelMixin.set_attention_backend("sage")`
does minus its check that thu-ml's package is installed. Nothing else in diffusers is touched.

The "sage" entry is global in diffusers: while enabled, any model set to "sage" runs sage-co; `disable` puts the
previous entry back only when it disables the last model enabled (another enabled model keeps working). When a real thu-ml
sageattention is what diffusers' "sage" uses, `enable` refuses unless `replace_real_sageattention=True`.
Alternative with no registry call at all: activate sage_co.integrations.sageattention_shim *before* importing
diffusers; then diffusers' own "sage" backend imports sage-co's `sageattn` and `model.set_attention_backend("sage")`
works unchanged.

Masks: diffusers' processors hand the dispatcher SDPA-convention masks and `attention_backend` passes them to
sageattn, which serves them (bool or additive, broadcastable to [B, H, S_q, S_kv]: HunyuanVideo's bool
[B, 1, 1, N] text padding, LTX-Video's additive [B, H, 1, S_txt]; tests/integrations/test_diffusers_video.py).
diffusers' own "sage" backend (what the shim route reaches) refuses any attn_mask itself, before calling sageattn;
`enable` is the route for masked models. Processors that call F.scaled_dot_product_attention themselves
(HunyuanVideo's token refiner: diffusers' AttnProcessor2_0) bypass the dispatcher; `sage_co.sdpa.enabled()`
routes those.

Context parallelism (diffusers' `parallel_config`) is not routed through sage-co: a processor carrying one raises
NotImplementedError; use sage_co.parallel for sequence parallelism.
"""
from __future__ import annotations

import weakref

from ..hostsafe import sageattn   # compat's; a GPU error falls back (hostsafe)

_saved_entry = None  # diffusers' "sage" registry entry before enable(): (function, constraints, arg names)
_enabled = weakref.WeakSet()   # the models enable() switched and disable() has not: the entry stays while any is


def attention_backend(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                      enable_gqa=False, return_lse=False, _parallel_config=None):
    """diffusers' backend signature: query/key/value [B, S, H, D] (NHD). Every argument diffusers passes is named
    here, so its dispatcher drops none of them; sage_co.sageattn honours or refuses each."""
    if _parallel_config is not None:
        raise NotImplementedError("_parallel_config: diffusers' context parallelism is not routed through "
                                  "sage-co; use sage_co.parallel.sequence_parallel_attention")
    return sageattn(query, key, value, tensor_layout="NHD", is_causal=is_causal, sm_scale=scale,
                    return_lse=return_lse, attn_mask=attn_mask, dropout_p=dropout_p, enable_gqa=enable_gqa)


def _dispatch():
    try:
        from diffusers.models import attention_dispatch
    except ImportError as e:  # pragma: no cover - exercised only without diffusers
        raise ImportError("sage_co.integrations.diffusers needs diffusers (pip install diffusers)") from e
    return attention_dispatch


def _uses_real_sageattention(ad) -> bool:
    fn = getattr(ad, "sageattn", None)
    return bool(getattr(ad, "_CAN_USE_SAGE_ATTN", False)) and fn is not None and fn is not sageattn


def _processors(model):
    for module in model.modules():
        proc = getattr(module, "processor", None)
        if proc is not None and hasattr(proc, "_attention_backend"):
            yield proc


def enable(model, *, replace_real_sageattention: bool = False) -> int:
    """Route the attention of `model` (a diffusers ModelMixin) to sage-co; returns how many processors switched."""
    global _saved_entry
    ad = _dispatch()
    reg, name = ad._AttentionBackendRegistry, ad.AttentionBackendName.SAGE
    procs = list(_processors(model))
    if not procs:
        raise ValueError(f"model: no attention processor of this {type(model).__name__} goes through diffusers' "
                         f"attention dispatcher (none has _attention_backend), so there is nothing to switch")
    if reg._backends.get(name) is not attention_backend:
        if _uses_real_sageattention(ad) and not replace_real_sageattention:
            raise RuntimeError("diffusers' 'sage' backend uses a real sageattention here; sage-co does not "
                               "replace it unless enable(model, replace_real_sageattention=True)")
        _saved_entry = (reg._backends.get(name), reg._constraints.get(name), reg._supported_arg_names.get(name))
        reg.register(name, constraints=[ad._check_device, ad._check_shape])(attention_backend)
    for proc in procs:
        if proc._attention_backend != name:
            proc._sage_co_previous_backend = proc._attention_backend
            proc._attention_backend = name
    _enabled.add(model)
    return len(procs)


def disable(model) -> None:
    """Give `model`'s processors their previous backends; once no enabled model is left, diffusers' "sage" entry
    gets its previous function back (another model still enabled keeps running sage-co)."""
    global _saved_entry
    ad = _dispatch()
    for proc in _processors(model):
        if hasattr(proc, "_sage_co_previous_backend"):
            proc._attention_backend = proc._sage_co_previous_backend
            del proc._sage_co_previous_backend
    _enabled.discard(model)
    reg, name = ad._AttentionBackendRegistry, ad.AttentionBackendName.SAGE
    if not _enabled and _saved_entry is not None and reg._backends.get(name) is attention_backend:
        fn, constraints, args = _saved_entry
        if fn is None:
            for table in (reg._backends, reg._constraints, reg._supported_arg_names):
                table.pop(name, None)
        else:
            reg._backends[name], reg._constraints[name], reg._supported_arg_names[name] = fn, constraints, args
        _saved_entry = None
