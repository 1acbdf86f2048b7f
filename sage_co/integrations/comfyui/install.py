"""`sage-co comfyui install PATH`: make a ComfyUI tree load sage-co's node.

Writes PATH/custom_nodes/sage-co/__init__.py, a two-line entry that imports the node from the installed sage-co
package (ComfyUI loads every folder under custom_nodes/ and reads its NODE_CLASS_MAPPINGS), and registers
"sage_co" in ComfyUI's attention registry. ComfyUI must run in a Python environment where sage-co is installed;
remove the folder to uninstall.
"""
from __future__ import annotations

from pathlib import Path

FOLDER = "sage-co"
ENTRY = '''"""sage-co's ComfyUI node, written by `sage-co comfyui install` (the code is in the installed sage-co)."""
from sage_co.integrations.comfyui import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS, register_attention_function

register_attention_function()
__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]
'''


def install(comfyui_root) -> Path:
    """Write the custom_nodes entry into the ComfyUI tree at comfyui_root; returns the file written."""
    root = Path(comfyui_root)
    nodes = root / "custom_nodes"
    if not nodes.is_dir():
        raise ValueError(f"PATH: {str(root)!r} is not a ComfyUI tree (no custom_nodes/ folder in it)")
    target = nodes / FOLDER / "__init__.py"
    target.parent.mkdir(exist_ok=True)
    target.write_text(ENTRY)
    return target
