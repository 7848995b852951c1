"""What a cell and the kernel are made of, read without IPython: the cell's
source and names (analysis), its output (capture), library settings, data files,
module references, memory pages, torch support and units.  Imports nothing else of
the package but ``version``.
"""
