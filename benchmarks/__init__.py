"""Benchmarks of ipy_resume against the machine's floors and against its peers.

``python -m benchmarks [--scale S] [--repeat N] [--only 1,3]`` runs workloads
1-13 (see :mod:`benchmarks.__main__`) through ipy_resume -- a real IPython
``InteractiveShell`` with ``%load_ext ipy_resume`` and ``%%checkpoint`` cells --
and through the baselines measured in the same run: raw xxh3_128, raw
write+fsync, ``np.save``+fsync, ``np.load`` from the page cache, and the peers
joblib.Memory, ipycache ``%%cache``, ``dill.dump_session``/``load_session`` and
Kishu. It prints medians and ratios, writes every sample of workload N to
``benchmarks/results/wN.json`` (the latest result of each workload is kept) and renders
``docs/performance.md`` and its chart from those files (:mod:`benchmarks.performance`).
"""
