"""sage-co: SageAttention-style INT8/FP8 attention for AMD RDNA4 (gfx1201) as precompiled code objects."""
__version__ = "0.1.0"
