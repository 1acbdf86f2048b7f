"""sage-co's ComfyUI node and attention function, against ComfyUI's attention contract.

In-process: small fakes of what the node touches, written from ComfyUI's code (comfy/ldm/modules/attention.py:
wrap_attn, attention_pytorch, register_attention_function; comfy/model_patcher.py: clone, model_options,
set_model_optimized_attention on master, optimized_attention_override on older releases). With
SAGE_CO_COMFYUI_ROOT naming a ComfyUI checkout whose comfy/ldm/modules/attention.py imports on CPU (it needs einops
and psutil), the same routes run against ComfyUI's real attention.py in a subprocess, including
`--use-sage-attention` reached by SAGE_CO_SAGEATTENTION_SHIM=1 alone."""
from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import sage_co
from sage_co import cli, launch, sdpa
from sage_co.integrations import comfyui, startup
from sage_co.integrations.comfyui import install as comfy_install

B, S, HEADS, D = 2, 70, 2, 64


def _fake_attention_module():
    """comfy.ldm.modules.attention as far as the node uses it (ComfyUI's contract, re-stated)."""
    mod = types.ModuleType("comfy.ldm.modules.attention")
    mod.REGISTERED_ATTENTION_FUNCTIONS = {}
    mod.calls = []

    def register_attention_function(name, func):
        mod.REGISTERED_ATTENTION_FUNCTIONS.setdefault(name, func)

    def wrap_attn(func):
        def wrapper(*args, **kwargs):
            opts = kwargs.get("transformer_options")
            if "_inside_attn_wrapper" not in kwargs and opts and "optimized_attention_override" in opts:
                return opts["optimized_attention_override"](func, *args, _inside_attn_wrapper=True, **kwargs)
            return func(*args, **kwargs)
        return wrapper

    @wrap_attn
    def attention_pytorch(q, k, v, heads, mask=None, attn_precision=None, skip_reshape=False,
                          skip_output_reshape=False, **kwargs):
        mod.calls.append("pytorch")
        b = q.shape[0]
        if not skip_reshape:
            q, k, v = (t.view(b, -1, heads, t.shape[-1] // heads).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=kwargs.get("scale"))
        return out if skip_output_reshape else out.transpose(1, 2).reshape(b, -1, heads * q.shape[-1])

    mod.register_attention_function = register_attention_function
    mod.attention_pytorch = attention_pytorch
    mod.optimized_attention = attention_pytorch
    return mod


class _Patcher:
    """ModelPatcher's part the node uses: clone() with a deep-copied model_options."""

    def __init__(self):
        self.model_options = {"transformer_options": {}}

    def clone(self):
        n = type(self)()
        n.model_options = copy.deepcopy(self.model_options)
        return n


class _PatcherMaster(_Patcher):
    def set_model_optimized_attention(self, optimized_attention):   # comfy/model_patcher.py on master
        def optimized_attention_override(_, *args, **kwargs):
            return optimized_attention(*args, **kwargs)
        self.model_options["transformer_options"]["optimized_attention_override"] = optimized_attention_override


@pytest.fixture
def comfy(monkeypatch):
    mod = _fake_attention_module()
    for name in ("comfy", "comfy.ldm", "comfy.ldm.modules"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setattr(sys.modules["comfy.ldm.modules"], "attention", mod, raising=False)
    monkeypatch.setitem(sys.modules, "comfy.ldm.modules.attention", mod)
    sdpa.reset_stats()
    yield mod
    sdpa.reset_stats()


def _qkv(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, S, HEADS * D, generator=g).to(torch.bfloat16) for _ in range(3)]


def _sage_nhd(q, k, v, **kw):
    qh, kh, vh = (t.view(B, S, HEADS, D) for t in (q, k, v))
    return sage_co.sage_attention(qh, kh, vh, smooth_k=True, **kw).reshape(B, S, HEADS * D)


@pytest.mark.parametrize("patcher", [_PatcherMaster, _Patcher], ids=["set_model_optimized_attention", "override"])
def test_node_routes_the_models_attention_to_sage_co(comfy, patcher):
    model = patcher()
    (patched,) = comfyui.SageCoAttention().patch(model, True, "fp8", True, "off")
    assert patched is not model and "optimized_attention_override" not in model.model_options["transformer_options"]
    opts = patched.model_options["transformer_options"]
    q, k, v = _qkv()
    with launch.recording() as records:
        out = comfy.optimized_attention(q, k, v, HEADS, transformer_options=opts)
    assert torch.equal(out, _sage_nhd(q, k, v)) and comfy.calls == []
    assert len([r for r in records if "attention" in r.symbol]) == 1
    # a masked call runs on sage-co too (issue 30): ComfyUI's [S, S] mask is SDPA's [1, 1, S, S]
    mask = torch.zeros(S, S, dtype=torch.bfloat16)
    mask[:, 50:] = float("-inf")
    out = comfy.optimized_attention(q, k, v, HEADS, mask, transformer_options=opts)
    assert torch.equal(out, _sage_nhd(q, k, v, attn_mask=mask[None, None])) and comfy.calls == []
    assert sdpa.stats() == {"routed": 2, "fallback": {}, "differences": sdpa.DIFFERENCES}


def test_node_options_and_skip_reshape(comfy):
    (patched,) = comfyui.SageCoAttention().patch(_PatcherMaster(), True, "fp16", False, "off")
    opts = patched.model_options["transformer_options"]
    q, k, v = (t.view(B, S, HEADS, D).transpose(1, 2) for t in _qkv())   # [B, H, S, D]
    out = comfy.optimized_attention(q, k, v, HEADS, skip_reshape=True, skip_output_reshape=True, scale=0.1,
                                    transformer_options=opts)
    want = sage_co.sage_attention(q, k, v, 0.1, layout="HND", pv_dtype="fp16")
    assert torch.equal(out, want)
    low = comfy.optimized_attention(q, k, v, HEADS, skip_reshape=True, low_precision_attention=False,
                                    transformer_options=opts)   # ComfyUI asked for full precision: its function
    assert comfy.calls == ["pytorch"] and low.shape == (B, S, HEADS * D)
    assert comfyui.patch_model(_PatcherMaster(), enabled=False).model_options["transformer_options"] == {}
    with pytest.raises(ValueError, match="sparsity"):
        comfyui.patch_model(_PatcherMaster(), sparsity="dense")


def test_node_sparsity_auto_runs_the_predictor(comfy):
    (patched,) = comfyui.SageCoAttention().patch(_PatcherMaster(), True, "fp8", True, "auto")
    q, k, v = _qkv()
    with launch.recording() as records:
        out = comfy.optimized_attention(q, k, v, HEADS,
                                        transformer_options=patched.model_options["transformer_options"])
    assert torch.equal(out, _sage_nhd(q, k, v, sparsity="auto"))
    assert any("predict" in r.symbol for r in records)


def test_node_falls_back_where_the_options_cannot_serve_the_call(comfy):
    """Issue 39 item 6: sparsity "auto" at SD1.5's head dim 40 (the predictor kernels pool multiples of 16) and
    pv_dtype "fp16" with V beyond the fp16 range were counted as routed and then raised inside the model; both are
    decided before routing now: ComfyUI's own function runs, the reason is in sdpa.stats()."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(B, 77, HEADS * 40, generator=g).to(torch.float16) for _ in range(3))
    (auto,) = comfyui.SageCoAttention().patch(_PatcherMaster(), True, "fp8", True, "auto")
    out = comfy.optimized_attention(q, k, v, HEADS, transformer_options=auto.model_options["transformer_options"])
    assert comfy.calls == ["pytorch"] and out.shape == (B, 77, HEADS * 40)
    (reason,) = sdpa.stats()["fallback"]
    assert reason.startswith("q: the predictor kernels pool head dims") and sdpa.stats()["routed"] == 0, reason
    sdpa.reset_stats()
    q, k, v = _qkv()
    v[1, 3, 5] = 9e4
    (fp16,) = comfyui.SageCoAttention().patch(_PatcherMaster(), True, "fp16", True, "off")
    comfy.optimized_attention(q, k, v, HEADS, transformer_options=fp16.model_options["transformer_options"])
    assert comfy.calls == ["pytorch", "pytorch"]
    (reason,) = sdpa.stats()["fallback"]
    assert reason.startswith('v: pv_dtype="fp16" keeps V in fp16') and sdpa.stats()["routed"] == 0, reason


def test_node_declares_its_inputs_and_registers_the_function(comfy):
    inputs = comfyui.SageCoAttention.INPUT_TYPES()["required"]
    assert list(inputs) == ["model", "enabled", "pv_dtype", "smooth_k", "sparsity"]
    assert comfyui.NODE_DISPLAY_NAME_MAPPINGS["SageCoAttention"] == "sage-co attention"
    assert comfyui.register_attention_function()
    fn = comfy.REGISTERED_ATTENTION_FUNCTIONS["sage_co"]
    q, k, v = _qkv()
    assert torch.equal(fn(q, k, v, HEADS), _sage_nhd(q, k, v))


def test_install_writes_a_custom_node_entry(tmp_path, capsys):
    (tmp_path / "custom_nodes").mkdir()
    assert cli.main(["comfyui", "install", str(tmp_path)]) == 0
    entry = tmp_path / "custom_nodes" / comfy_install.FOLDER / "__init__.py"
    assert entry.read_text() == comfy_install.ENTRY and str(entry) in capsys.readouterr().out
    ns = {}
    exec(compile(entry.read_text(), str(entry), "exec"), ns)   # what ComfyUI's loader does with the folder
    assert ns["NODE_CLASS_MAPPINGS"] is comfyui.NODE_CLASS_MAPPINGS
    assert cli.main(["comfyui", "install", str(tmp_path / "nowhere")]) == 2
    assert "custom_nodes" in capsys.readouterr().err


def test_install_refuses_to_overwrite_an_edited_entry(tmp_path, capsys):
    """Issue 39 item 11: an existing custom_nodes/sage-co/__init__.py with other content (a user's edits) is not
    overwritten; --replace replaces it, says so and keeps the old file; re-installing sage-co's own entry is fine."""
    (tmp_path / "custom_nodes" / comfy_install.FOLDER).mkdir(parents=True)
    entry = tmp_path / "custom_nodes" / comfy_install.FOLDER / "__init__.py"
    mine = "# my edits\n" + comfy_install.ENTRY
    entry.write_text(mine)
    assert cli.main(["comfyui", "install", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert str(entry) in err and "--replace" in err and entry.read_text() == mine
    assert cli.main(["comfyui", "install", "--replace", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    saved = entry.with_name("__init__.py.bak")
    assert f"replaced {entry}" in out and str(saved) in out
    assert entry.read_text() == comfy_install.ENTRY and saved.read_text() == mine
    assert cli.main(["comfyui", "install", str(tmp_path)]) == 0            # sage-co's own entry: nothing to refuse
    assert "replaced" not in capsys.readouterr().out
    entry.write_text("# again\n")
    assert cli.main(["comfyui", "install", "--force", str(tmp_path)]) == 0   # a second backup does not clobber the first
    assert saved.read_text() == mine and entry.with_name("__init__.py.bak.1").read_text() == "# again\n"


# ------------------------------------------------------------------ ComfyUI's real attention.py (opt-in)
COMFYUI = os.environ.get("SAGE_CO_COMFYUI_ROOT")
needs_comfyui = pytest.mark.skipif(not COMFYUI, reason="set SAGE_CO_COMFYUI_ROOT to a ComfyUI checkout to run "
                                   "against its comfy/ldm/modules/attention.py (ComfyUI is not on PyPI)")

DRIVER = textwrap.dedent("""
    import sys
    import torch
    flags = sys.argv[1:]
    sys.argv = ["main.py", "--cpu", *flags]
    import comfy.options
    comfy.options.enable_args_parsing()
    import comfy.ldm.modules.attention as attention
    import sage_co
    from sage_co import launch
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 70, 128, generator=g).to(torch.bfloat16) for _ in range(3))
    transformer_options = {}
    if "--use-sage-attention" not in flags:
        from sage_co.integrations import comfyui
        class Patcher:
            model_options = {"transformer_options": {}}
            def clone(self):
                return Patcher()
        transformer_options = comfyui.patch_model(Patcher()).model_options["transformer_options"]
        assert comfyui.register_attention_function()
        assert attention.get_attention_function("sage_co") is not None
    with launch.recording() as records:
        out = attention.optimized_attention(q, k, v, 2, transformer_options=transformer_options)
    # the node's default smooth_k=True; ComfyUI's attention_sage passes smooth_k=False on master, nothing before
    wants = [sage_co.sage_attention(*(t.view(2, 70, 2, 64) for t in (q, k, v)), smooth_k=smooth_k).reshape(2, 70, 128)
             for smooth_k in (True, False)]
    print(attention.optimized_attention.__name__, any(torch.equal(out, want) for want in wants),
          len([r for r in records if "attention" in r.symbol]))
""")


@needs_comfyui
@pytest.mark.parametrize("route", ["node", "env-shim"])
def test_real_comfyui_attention_reaches_sage_co(route, tmp_path):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = {key: value for key, value in os.environ.items() if key != "SAGE_CO_SAGEATTENTION_SHIM"}
    repo = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([repo, COMFYUI])
    python = sys.executable
    if route == "env-shim":
        # only the variable and the installed start-up hook: a venv whose site-packages holds the .pth
        venv = tmp_path / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)],
                       check=True, timeout=120)
        python = str(venv / "bin" / "python")
        purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        (Path(purelib) / startup.PTH_NAME).write_text(startup.PTH_LINE)
        env["SAGE_CO_SAGEATTENTION_SHIM"] = "1"
    flags = ["--use-sage-attention"] if route == "env-shim" else []
    r = subprocess.run([python, str(driver), *flags], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    name, equal, launches = r.stdout.split()[-3:]
    assert (name, equal, launches) == ("attention_sage" if route == "env-shim" else name, "True", "1")
