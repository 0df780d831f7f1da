"""Benchmarks of the library's speed: ``python -m benchmarks`` (see ``benchmarks/__main__.py``).

Training throughput of the GPT model (explicit and fast attention, eager and compiled, against
nanoGPT's own model.py code path), generation with and without the KV cache, nanoGPT's CPU
convergence run, and on a GPU GPT-2 small's step time and model FLOPs utilisation. Results are
written to ``benchmarks/results/`` with the machine they were measured on; README.md and
chapter 11 quote them from there.
"""
