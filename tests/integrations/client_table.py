"""The client-by-client table of docs/integrations.md §What real clients pass, measured: `python tests/integrations/client_table.py` (from the repository
root, sage-co importable) runs every client call pattern the tests replay -- ComfyUI's attention_sage (master and
the 2025 releases, comfy_replay.py), diffusers HunyuanVideo and LTX-Video (tiny_video_models.py) on sage-co's
"sage" backend and through the sageattention shim with diffusers' own "sage" backend -- and prints a markdown table
(client, call pattern, result, rel L2). CPU tensors: every sage-co attention runs on the emulator (a few minutes).

rel L2: ComfyUI rows vs ComfyUI's attention_pytorch on the same inputs in fp32; diffusers rows: the whole model's
output vs the same model on diffusers' native backend (torch SDPA with the masks)."""
from __future__ import annotations

import logging

import torch

import comfy_replay as comfy
import tiny_video_models as tiny
from sage_co import accuracy, launch, sdpa


def _rel(out, ref) -> float:
    return ((out.float() - ref.float()).norm() / ref.float().norm()).item()


def comfy_rows():
    rows = []
    for version, fn in sorted(comfy.VERSIONS.items()):
        for case in comfy.CASES:
            q, k, v, mask = comfy.make_inputs(case)
            errors = []
            handler = logging.Handler(logging.ERROR)
            handler.emit = lambda r: errors.append(r.getMessage())
            logging.getLogger().addHandler(handler)
            try:
                with launch.recording() as records:
                    out = fn(q, k, v, comfy.HEADS, mask, skip_reshape=case.skip_reshape)
            finally:
                logging.getLogger().removeHandler(handler)
            ref = comfy.reference(case, q, k, v, mask)
            m = accuracy.metrics(comfy.heads_rows(out.float(), case), comfy.heads_rows(ref, case))
            launches = sum("attention" in r.symbol for r in records)
            if errors:
                result = f"ERROR + fallback: {errors[0][:110]}"
            else:
                result = (f"sage-co ({launches} attention launch{'es' if launches != 1 else ''}), no ERROR, no "
                          f"fallback; {'within' if accuracy.within_contract(m) else 'OUTSIDE'} the accuracy band")
            rows.append((f"ComfyUI {version} `attention_sage`", case.name, result, m["rel_l2"]))
    return rows


def _diffusers_row(name, build, inputs, masks_desc):
    from sage_co.integrations import diffusers as sage_diffusers
    model = build()
    ref = tiny.forward(model, inputs())
    sdpa.reset_stats()
    sage_diffusers.enable(model)
    try:
        with launch.recording() as records, sdpa.enabled():
            out = tiny.forward(model, inputs())
        result = None
    except (ValueError, TypeError, RuntimeError) as e:
        out, result = None, f"refused: {str(e)[:110]}"
    finally:
        sage_diffusers.disable(model)
    st = sdpa.stats()
    sdpa.reset_stats()
    if result is None:
        launches = sum("attention" in r.symbol for r in records)
        result = (f"sage-co: {launches} attention launches (every attention of the model), SDPA router "
                  f"{st['routed']} routed / {sum(st['fallback'].values())} fallbacks")
    return (f"diffusers {name}, `sage_co.integrations.diffusers.enable` (+ `sage_co.sdpa.enabled()`)", masks_desc,
            result, None if out is None else _rel(out, ref))


def _shim_row(name, build, inputs, backend):
    """diffusers' own "sage" / "sage_varlen" backend with sageattention = sage-co's shim
    (`set_attention_backend(backend)`); the model's direct SDPA calls (HunyuanVideo's refiner) stay torch's."""
    import diffusers.models.attention_dispatch as ad
    from sage_co import hostsafe
    model = build()
    ref = tiny.forward(model, inputs())
    saved = ad.sageattn, ad.sageattn_varlen, ad._CAN_USE_SAGE_ATTN
    active = ad._AttentionBackendRegistry._active_backend   # set_attention_backend also sets this process-wide
    # what diffusers binds when the shim is active before `import diffusers`: its `from sageattention import
    # sageattn, sageattn_varlen` are sage-co's, and its version check passes (the shim reports
    # SAGEATTENTION_API_VERSION)
    ad.sageattn, ad.sageattn_varlen, ad._CAN_USE_SAGE_ATTN = hostsafe.sageattn, hostsafe.sageattn_varlen, True
    out = None
    try:
        model.set_attention_backend(backend)
        with launch.recording() as records:
            out = tiny.forward(model, inputs())
        launches = sum("attention" in r.symbol for r in records)
        result = (f"sage-co: {launches} attention launches (diffusers' {backend} backend calls sageattn"
                  + ("_varlen on K/V packed per sequence" if backend == "sage_varlen" else "") + ")")
    except (ValueError, TypeError, RuntimeError) as e:
        result = f"refused by diffusers' own {backend} backend: {str(e)[:80]}"
    finally:
        model.reset_attention_backend()
        ad._AttentionBackendRegistry.set_active_backend(active)
        ad.sageattn, ad.sageattn_varlen, ad._CAN_USE_SAGE_ATTN = saved
    return (f"diffusers {name}, shim + `set_attention_backend(\"{backend}\")`", "the same masks", result,
            None if out is None else _rel(out, ref))


def diffusers_rows():
    return [
        _diffusers_row("HunyuanVideo", tiny.build_hunyuan, tiny.hunyuan_inputs,
                       "joint blocks: bool key padding [B,1,1,N]; token refiner (direct SDPA): bool [B,H,S,S]"),
        _diffusers_row("LTX-Video", tiny.build_ltx, tiny.ltx_inputs,
                       "self-attention unmasked; cross-attention additive bf16 [B,H,1,S_txt] 0/-10000"),
        *(_shim_row(n, b, i, backend) for backend in ("sage", "sage_varlen")
          for n, b, i in (("HunyuanVideo", tiny.build_hunyuan, tiny.hunyuan_inputs),
                          ("LTX-Video", tiny.build_ltx, tiny.ltx_inputs))),
    ]


def main():
    print("| client | call pattern | result | rel L2 |")
    print("|---|---|---|---|")
    for client, pattern, result, rel in comfy_rows() + diffusers_rows():
        print(f"| {client} | {pattern} | {result} | {'-' if rel is None else f'{rel:.4f}'} |")


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
