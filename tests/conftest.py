import pytest
import torch


def _gfx1201_present() -> bool:
    if getattr(torch.version, "hip", None) is None or not torch.cuda.is_available():
        return False
    return any(torch.cuda.get_device_properties(i).gcnArchName.split(":")[0] == "gfx1201"
               for i in range(torch.cuda.device_count()))


GFX1201 = _gfx1201_present()


def pytest_collection_modifyitems(config, items):
    if GFX1201:
        return
    why = ("needs a real gfx1201 GPU visible to a ROCm build of torch; this machine has "
           + ("no ROCm torch" if getattr(torch.version, "hip", None) is None else "no gfx1201 device"))
    for item in items:
        if "gfx1201" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=why))
