"""setuptools build hook (pyproject.toml [tool.setuptools.cmdclass]): ships sage-co's start-up .pth
(sage_co/integrations/startup.py says what it does) at the top of site-packages, with the wheel (`pip install .`)
and the editable wheel (`pip install -e .`)."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from setuptools.command.build_py import build_py


def _startup():
    """sage_co/integrations/startup.py loaded by path: importing the package would run sage_co/__init__."""
    path = Path(__file__).resolve().parent / "sage_co" / "integrations" / "startup.py"
    spec = importlib.util.spec_from_file_location("_sage_co_startup", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPy(build_py):
    """build_py that also writes the .pth where the wheel's top level is assembled: build_lib for a wheel; for an
    editable wheel, setuptools' editable_wheel points install_lib at the unpacked wheel it zips (build_lib is then
    a scratch folder the editable wheel does not contain)."""

    def run(self):
        super().run()
        startup = _startup()
        with open(os.path.join(self._top(), startup.PTH_NAME), "w") as f:
            f.write(startup.PTH_LINE)

    def _top(self) -> str:
        top = self.get_finalized_command("install").install_lib if self.editable_mode else self.build_lib
        os.makedirs(top, exist_ok=True)
        return top

    def get_outputs(self, include_bytecode=True):
        outputs = list(super().get_outputs(include_bytecode))
        if not self.editable_mode:
            outputs.append(os.path.join(self.build_lib, _startup().PTH_NAME))
        return outputs
