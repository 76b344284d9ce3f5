"""The embedded engine: a compact decoder for the Llama family, its scheduler and its
OpenAI-compatible server.

    from roofline.engine import load_runner, SamplingParams, generate
    runner = load_runner()                      # the default model, fp32
    ids = runner.tokenizer.encode("The capital of France is")
    print("".join(generate(runner, ids, SamplingParams(max_tokens=20, temperature=0)).text()))

Importing the package is light (numpy only): numba loads when a runner is built. The engine never
imports torch (only the tests' reference forward does).
"""

from __future__ import annotations

from roofline.engine.runtime.threads import prefer_passive_omp_waits

# before torch or numba start OpenMP threads (runtime/threads.py says why); E402 below: the
# imports must follow this call, since they may load those runtimes
prefer_passive_omp_waits()

# `generate` names both a module and the function it defines; this import binds the function here.
from roofline.engine.runtime.generate import generate  # noqa: E402
from roofline.engine.runtime.model_runner import ModelRunner, load_runner  # noqa: E402
from roofline.engine.runtime.sampling import SamplingParams  # noqa: E402

__all__ = ["ModelRunner", "SamplingParams", "generate", "load_runner"]
