"""Make `import sageattention` resolve to sage-co, so frameworks' existing SageAttention switches run sage-co.

ComfyUI (`--use-sage-attention`), diffusers (`set_attention_backend("sage")`), xDiT (`--attention_backend SAGE`),
yunchang (`AttnType.SAGE_*`) and LightX2V (`"attn_type": "sage_attn2"`) all do `from sageattention import
sageattn`, whose CUDA kernels do not build on ROCm. With the shim active that import yields a module whose
`sageattn` / `sageattn_varlen` are sage_co.compat's (through sage_co.hostsafe: a GPU binding or launch error
falls back to torch's attention instead of failing the framework), and `importlib.metadata.version("sageattention")` answers
`SAGEATTENTION_API_VERSION` (callers check it, e.g. diffusers wants >= 2.1.1).

Opt-in only, three ways:
  * `sage_co.integrations.sageattention_shim.install()` before the framework imports sageattention;
  * `SAGE_CO_SAGEATTENTION_SHIM=1` in the environment, read when `sage_co` is imported (`=force` also shadows
    a real installed sageattention);
  * `python -m sage_co.integrations.sageattention_shim [--force] (-m MODULE | SCRIPT) [ARGS...]`, which installs
    it and runs the program as `python SCRIPT` would (its folder first on sys.path), for frameworks that never
    import sage_co (e.g. ComfyUI's main.py).
With the variable set, the environment's `sage_co_sageattention_shim.pth` (installed with sage-co, startup.py)
imports sage_co at every interpreter start, so the variable alone reaches programs that never import sage_co;
unset it (or set it to 0) to turn the shim off.
A real installed sageattention is never shadowed unless asked (`force=True`). `sage-co info` says whether the
shim is active. Mechanism: a finder on sys.meta_path (the import system's documented hook) that serves both the
module and its distribution metadata (importlib.metadata.DistributionFinder).

The module's functions: `sageattn`, `sageattn_varlen` (sage_co.compat); `sageattn_qk_int8_pv_fp8_cuda` and
`sageattn_qk_int8_pv_fp8_cuda_sm90` (SageAttention's INT8-QK / FP8-PV variants, the arithmetic sage-co's kernel
does) run sageattn; `sageattn_qk_int8_pv_fp16_cuda` and `sageattn_qk_int8_pv_fp16_triton` (FP16 P.V) run
sageattn with pv_dtype="fp16" (issue 19: V kept in fp16, P.V on the f16 WMMA, fp32 accumulation).

What runs on sage-co through the shim is what sage_co.compat.sageattn serves (its docstring is the list): q/k/v in
bfloat16, float16 or float32; any head dim 1..256; S_q != S_kv, GQA/MQA; is_causal; and `attn_mask` -- bool or
additive float32 / bf16 / fp16, broadcastable to [B, H_q, S_q, S_kv] (key padding, per-head, per-query, full).
`attn_mask` is a named parameter of the shim's sageattn, so ComfyUI master (which checks `"attn_mask" in
inspect.signature(sageattn).parameters`) sends masked calls instead of routing them to PyTorch attention, and its
2025 releases (which always pass attn_mask=) no longer log "Error running sage attention" and fall back. What sage-co
refuses raises an error naming the argument and quoting its shape and dtype; ComfyUI logs that message and falls
back. Frameworks that refuse masks before calling sageattn keep doing so: diffusers' own "sage" backend raises
"`attn_mask` is not supported for sage attention" itself (use sage_co.integrations.diffusers.enable(model), or
diffusers' "sage_varlen" backend, which packs bool key-padding masks into sageattn_varlen calls).
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys
import types
import warnings

ENV_VAR = "SAGE_CO_SAGEATTENTION_SHIM"
MODULE = "sageattention"
_SUBMODULES = ("core",)
_LAUNCHER = "sage_co.integrations.sageattention_shim"   # this module's name also when it runs as __main__


def _compat():
    """sage_co.compat, imported on first use: it imports torch, which the start-up hook (a process that only has
    the variable set) must not need before `import sageattention` actually runs (startup.py)."""
    from .. import compat
    return compat


def _host():
    """sage_co.hostsafe (imported on first use, as _compat): compat's sageattn / sageattn_varlen, except that a GPU
    binding or launch error falls back to torch's attention (the framework calling them keeps running)."""
    from .. import hostsafe
    return hostsafe


def sageattn_qk_int8_pv_fp8_cuda(q, k, v, tensor_layout="HND", is_causal=False, sm_scale=None, return_lse=False,
                                 smooth_k=True, **kwargs):
    """SageAttention's INT8-QK / FP8-PV variant: sage-co's kernel is that arithmetic; runs sage_co.sageattn."""
    return _host().sageattn(q, k, v, tensor_layout, is_causal, sm_scale, return_lse, smooth_k, **kwargs)


def sageattn_qk_int8_pv_fp8_cuda_sm90(q, k, v, tensor_layout="HND", is_causal=False, sm_scale=None,
                                      return_lse=False, smooth_k=True, **kwargs):
    """SageAttention's INT8-QK / FP8-PV variant (sm90 build): runs sage_co.sageattn."""
    return _host().sageattn(q, k, v, tensor_layout, is_causal, sm_scale, return_lse, smooth_k, **kwargs)


def _fp16_pv(name: str):
    def variant(q, k, v, tensor_layout="HND", is_causal=False, sm_scale=None, return_lse=False, smooth_k=True,
                **kwargs):
        # value_dtype= is compat's second spelling of pv_dtype: a caller's pv_dtype="fp8" is a conflict it names
        return _host().sageattn(q, k, v, tensor_layout, is_causal, sm_scale, return_lse, smooth_k,
                                value_dtype="fp16", **kwargs)
    variant.__name__ = variant.__qualname__ = name
    variant.__doc__ = "SageAttention's INT8-QK / FP16-PV variant: sage_co.sageattn with pv_dtype=\"fp16\"."
    return variant


def module_namespace() -> dict:
    """The public names of the shim's `sageattention` module."""
    return {
        "sageattn": _host().sageattn,
        "sageattn_varlen": _host().sageattn_varlen,
        "sageattn_qk_int8_pv_fp8_cuda": sageattn_qk_int8_pv_fp8_cuda,
        "sageattn_qk_int8_pv_fp8_cuda_sm90": sageattn_qk_int8_pv_fp8_cuda_sm90,
        "sageattn_qk_int8_pv_fp16_cuda": _fp16_pv("sageattn_qk_int8_pv_fp16_cuda"),
        "sageattn_qk_int8_pv_fp16_triton": _fp16_pv("sageattn_qk_int8_pv_fp16_triton"),
        "__version__": _compat().SAGEATTENTION_API_VERSION,
        "__sage_co__": True,  # lets callers (and `sage-co info`) tell the shim from thu-ml's package
    }


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return types.ModuleType(spec.name)

    def exec_module(self, module):
        module.__dict__.update(module_namespace())
        module.__doc__ = f"sage-co's stand-in for thu-ml SageAttention (see {__name__})."


class _Distribution(importlib.metadata.Distribution):
    """Metadata of the shim's sageattention: name and version, nothing installed on disk."""

    def read_text(self, filename):
        if filename not in ("METADATA", "PKG-INFO"):
            return None
        return (f"Metadata-Version: 2.1\nName: {MODULE}\nVersion: {_compat().SAGEATTENTION_API_VERSION}\n"
                f"Summary: sage-co's SageAttention-compatible module (sage_co.integrations.sageattention_shim)\n")

    def locate_file(self, path):
        return None


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == MODULE:
            spec = importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)
            spec.submodule_search_locations = []
            return spec
        if fullname in {f"{MODULE}.{s}" for s in _SUBMODULES}:
            return importlib.machinery.ModuleSpec(fullname, _Loader())
        return None

    def find_distributions(self, context=importlib.metadata.DistributionFinder.Context()):
        name = getattr(context, "name", None)
        if name is not None and name.replace("-", "_").lower() == MODULE:
            yield _Distribution()


_finder: _Finder | None = None


def _ours(module) -> bool:
    return getattr(module, "__sage_co__", False) is True


def real_sageattention() -> str | None:
    """Where a real (not sage-co's) sageattention is importable from, or None."""
    loaded = sys.modules.get(MODULE)
    if loaded is not None and not _ours(loaded):
        return getattr(loaded, "__file__", None) or repr(loaded)
    if _finder is not None and _finder in sys.meta_path:
        others = [f for f in sys.meta_path if f is not _finder]
        for f in others:
            spec = f.find_spec(MODULE, None) if hasattr(f, "find_spec") else None
            if spec is not None:
                return spec.origin or str(spec.submodule_search_locations)
        return None
    spec = importlib.util.find_spec(MODULE) if loaded is None else None
    return None if spec is None else (spec.origin or str(spec.submodule_search_locations))


def is_active() -> bool:
    return _finder is not None and _finder in sys.meta_path


def install(force: bool = False) -> None:
    """Make `import sageattention` (and its metadata) resolve to sage-co. Raises RuntimeError when a real
    sageattention is installed, unless force=True; modules that imported the real one already keep it."""
    global _finder
    if is_active():
        return
    real = real_sageattention()
    if real is not None and not force:
        raise RuntimeError(f"a real sageattention is installed ({real}); sage-co does not shadow it. Use "
                           f"install(force=True) or {ENV_VAR}=force to route `import sageattention` to sage-co")
    for name in [n for n in sys.modules if n == MODULE or n.startswith(MODULE + ".")]:
        del sys.modules[name]  # forced: later imports get the shim; earlier importers keep their reference
    _finder = _Finder()
    sys.meta_path.insert(0, _finder)
    importlib.invalidate_caches()


def uninstall() -> None:
    """Undo install(): later `import sageattention` finds whatever is really installed (or nothing)."""
    global _finder
    if _finder is not None and _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    _finder = None
    for name in [n for n in sys.modules if n == MODULE or n.startswith(MODULE + ".")]:
        if _ours(sys.modules[name]):
            del sys.modules[name]
    importlib.invalidate_caches()


def install_from_env(environ=os.environ) -> bool:
    """Install when ENV_VAR asks for it ("1"/"on"/"true"; "force" also shadows a real sageattention). A real
    sageattention without "force" leaves the shim off with a warning (importing sage_co must not fail)."""
    value = environ.get(ENV_VAR, "").strip().lower()
    if value in ("", "0", "off", "false"):
        return False
    if value not in ("1", "on", "true", "force"):
        raise ValueError(f"{ENV_VAR}: expected 1/on/true, force, or 0/off/false, got {environ[ENV_VAR]!r}")
    try:
        install(force=value == "force")
    except RuntimeError as e:
        warnings.warn(f"{ENV_VAR}={environ[ENV_VAR]}: shim not installed: {e}", RuntimeWarning, stacklevel=2)
        return False
    return True


def describe() -> str:
    """One line for `sage-co info`."""
    real = real_sageattention()
    if is_active():
        return "sageattention shim: active (`import sageattention` -> sage-co)" + (
            f"; shadows the real one at {real}" if real else "")
    how = f"install(), {ENV_VAR}=1 or python -m {__name__}"
    return (f"sageattention shim: inactive (real sageattention at {real})" if real
            else f"sageattention shim: inactive ({how})")


USAGE = f"""usage: python -m {_LAUNCHER} [--force] (-m MODULE | SCRIPT) [ARGS...]

Install the sageattention shim (`import sageattention` -> sage-co), then run SCRIPT as `python SCRIPT ARGS` would
(its folder first on sys.path, __name__ == "__main__", sys.argv = [SCRIPT, ARGS...]) or MODULE as `python -m MODULE
ARGS` would. --force also shadows a real installed sageattention. Example, ComfyUI from any folder:
    python -m {_LAUNCHER} /path/to/ComfyUI/main.py --use-sage-attention
"""


def main(argv=None) -> int:
    """python -m sage_co.integrations.sageattention_shim [--force] (-m MODULE | SCRIPT) [ARGS...]"""
    import runpy
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0
    force = bool(args) and args[0] == "--force"
    args = args[1:] if force else args
    if not args or (args[0] == "-m" and len(args) < 2):
        print(USAGE, end="", file=sys.stderr)
        return 2
    from sage_co.integrations import sageattention_shim  # the canonical module, not this __main__ copy
    sageattention_shim.install(force=force)
    if args[0] == "-m":
        sys.argv = [args[1]] + args[2:]   # `python -m` already put the working directory first on sys.path
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        script = args[0]
        if not os.path.isfile(script):
            print(f"{_LAUNCHER}: can't open file {script!r}: not a file", file=sys.stderr)
            return 2
        # `python SCRIPT` puts the script's folder (symlinks resolved) first on sys.path instead of the working
        # directory that `python -m` put there; runpy.run_path does not, so a script importing a sibling module
        # (ComfyUI's main.py) would fail when started from another folder.
        sys.path[0] = os.path.dirname(os.path.realpath(script))
        sys.argv = args
        runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
