"""`sage-co comfyui install PATH`: make a ComfyUI tree load sage-co's node.

Writes PATH/custom_nodes/sage-co/__init__.py, a two-line entry that imports the node from the installed sage-co
package (ComfyUI loads every folder under custom_nodes/ and reads its NODE_CLASS_MAPPINGS), and registers
"sage_co" in ComfyUI's attention registry. ComfyUI must run in a Python environment where sage-co is installed;
remove the folder to uninstall. An existing __init__.py there with other content (a user's edits) is not
overwritten: install refuses, naming the file, unless replace=True (`sage-co comfyui install --replace PATH`),
which first saves the old file next to it as __init__.py.bak (or .bak.1, .bak.2, ...: none is overwritten).
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

FOLDER = "sage-co"
ENTRY = '''"""sage-co's ComfyUI node, written by `sage-co comfyui install` (the code is in the installed sage-co)."""
from sage_co.integrations.comfyui import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS, register_attention_function

register_attention_function()
__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]
'''


class Installed(NamedTuple):
    """What install() did: the entry written, and where the file it replaced was saved (None: nothing replaced)."""
    target: Path
    saved: Path | None = None


def install(comfyui_root, *, replace: bool = False) -> Installed:
    """Write the custom_nodes entry into the ComfyUI tree at comfyui_root. An existing entry with other content
    is replaced only with replace=True (then saved first; Installed.saved says where); else FileExistsError
    naming it."""
    root = Path(comfyui_root)
    nodes = root / "custom_nodes"
    if not nodes.is_dir():
        raise ValueError(f"PATH: {str(root)!r} is not a ComfyUI tree (no custom_nodes/ folder in it)")
    target = nodes / FOLDER / "__init__.py"
    target.parent.mkdir(exist_ok=True)
    saved = None
    if target.exists() and target.read_bytes() != ENTRY.encode():
        if not replace:
            raise FileExistsError(f"PATH: {target} exists with other content (edited, or another node's); not "
                                  f"overwritten. Pass --replace (install(..., replace=True)) to replace it (the old "
                                  f"file is saved next to it)")
        saved = _backup_name(target)
        target.rename(saved)
    target.write_text(ENTRY)
    return Installed(target, saved)


def _backup_name(target: Path) -> Path:
    """target + ".bak", or ".bak.N" with the first N not taken."""
    candidate, n = target.with_name(target.name + ".bak"), 0
    while candidate.exists():
        n += 1
        candidate = target.with_name(f"{target.name}.bak.{n}")
    return candidate
