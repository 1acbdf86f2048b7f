"""The start-up hook that lets SAGE_CO_SAGEATTENTION_SHIM work from the environment alone: the .pth file sage-co's
wheel and editable wheel install at the top of site-packages (written by build_hooks.py, which loads this file by
path, so it imports nothing).

Python's `site` runs each `import ...` line of a .pth in site-packages at every interpreter start. This one does
nothing unless SAGE_CO_SAGEATTENTION_SHIM is set to something other than 0/off/false (the shim's off values,
sageattention_shim.install_from_env); then it imports sage_co, whose __init__ installs the shim, so `import
sageattention` reaches sage-co in programs that never import sage_co (ComfyUI's main.py). Turn it off by unsetting
the variable (or =0); `pip uninstall sage-co` removes the file.
"""
from __future__ import annotations

PTH_NAME = "sage_co_sageattention_shim.pth"
PTH_LINE = ('import os; os.environ.get("SAGE_CO_SAGEATTENTION_SHIM", "").strip().lower() not in '
            '("", "0", "off", "false") and __import__("sage_co")\n')


def installed_pth():
    """The hook file in this environment's site-packages (or the user site), or None."""
    import site
    from pathlib import Path
    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    return next((Path(d) / PTH_NAME for d in dirs if (Path(d) / PTH_NAME).is_file()), None)
