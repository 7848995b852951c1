"""Benchmarks of ipy_resume against the machine's floors and against its peers.

``python -m benchmarks [--scale S] [--repeat N] [--only 1,3]`` runs workloads
1-7 (see :mod:`benchmarks.workloads`) through ipy_resume -- a real IPython
``InteractiveShell`` with ``%load_ext ipy_resume`` and ``%%checkpoint`` cells --
and through the baselines measured in the same run: raw xxh3_128, raw
write+fsync, ``np.save``+fsync, ``np.load`` from the page cache, and the peers
joblib.Memory, ipycache ``%%cache``, ``dill.dump_session``/``load_session`` and
Kishu. It prints medians and ratios and writes JSON and a PNG chart to
``benchmarks/results/``.
"""
