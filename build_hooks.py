"""setuptools build hook (pyproject.toml [tool.setuptools.cmdclass]): ships `sage_co_sageattention_shim.pth`
at the top of site-packages, with the wheel (`pip install .`) and the editable wheel (`pip install -e .`).

Python's `site` module runs each `import ...` line of a .pth file in site-packages at every interpreter start
(the standard mechanism for start-up hooks). This one does nothing unless SAGE_CO_SAGEATTENTION_SHIM is set to
something other than 0/off/false; then it imports sage_co, whose __init__ installs the sageattention shim
(sage_co/integrations/sageattention_shim.py), so `import sageattention` resolves to sage-co in any process of the
environment (ComfyUI's main.py, diffusers, ...) without the program importing sage_co itself."""
from __future__ import annotations

import os

from setuptools.command.build_py import build_py

PTH_NAME = "sage_co_sageattention_shim.pth"
# One line: site executes lines that start with "import". The off values are the shim's (install_from_env).
PTH_LINE = ('import os; os.environ.get("SAGE_CO_SAGEATTENTION_SHIM", "").strip().lower() not in '
            '("", "0", "off", "false") and __import__("sage_co")\n')


class BuildPy(build_py):
    """build_py that also writes the .pth where the wheel's top level is assembled: build_lib for a wheel; for
    an editable wheel, setuptools' editable_wheel points install_lib at the unpacked wheel it zips (build_lib is
    then a scratch dir the editable wheel does not contain)."""

    def run(self):
        super().run()
        top = self.get_finalized_command("install").install_lib if self.editable_mode else self.build_lib
        os.makedirs(top, exist_ok=True)
        with open(os.path.join(top, PTH_NAME), "w") as f:
            f.write(PTH_LINE)

    def get_outputs(self, include_bytecode=True):
        outputs = list(super().get_outputs(include_bytecode))
        if not self.editable_mode:
            outputs.append(os.path.join(self.build_lib, PTH_NAME))
        return outputs
