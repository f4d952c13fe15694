"""torch.compile as the trainer, the evaluation and the benchmarks use it: fixed shapes, and the
same graph behaviour on every supported torch."""
from __future__ import annotations

import warnings

import torch


def compile_fixed_shapes(fn, **options):
    """``torch.compile(fn, dynamic=False, **options)`` (tests pass a backend and fullgraph).

    Before torch 2.5 Dynamo did not inline nn.Modules: it guarded a tensor held as a plain module
    attribute (the puzzle table's gradient leaf, new every step: PuzzleEmbedding.prepare_lookup)
    on its identity, so every step recompiled until Dynamo's cache limit, and ran eager from then on. Inlining them, the default since, lifts such tensors
    as graph inputs: one graph for every step. Newer torch deprecates the flag (always on); it is
    only set where it is off."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)   # reading the deprecated flag warns
        if getattr(torch._dynamo.config, "inline_inbuilt_nn_modules", True) is False:
            torch._dynamo.config.inline_inbuilt_nn_modules = True
    return torch.compile(fn, dynamic=False, **options)
