"""Backends share one interface: run(shipped, code_object, kernel, struct, grid, block, args) -> stats."""
