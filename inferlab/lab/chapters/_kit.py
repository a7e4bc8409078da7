"""Shared by the chapter modules: the real tokenizer, small engines, the simulated clock.

Chapters price time on a simulated GPU whenever the picture must not depend on how busy
this machine is (figures for writers must come out identical run after run); wall-clock
measurements sit beside them in the notebooks, where a reader sees their own machine.
"""
from __future__ import annotations

import random

from inferlab.sim.published import label_note

# The simulated clock every chapter uses unless it says otherwise: the tokens are computed
# for real on this CPU by SmolLM2, the time is priced as if an 8B model ran on one H100.
# Beside every simulated number: it is a projection, and how far the same cost model is from
# published H100 measurements (sim/published.py, computed here, not typed in).
SIM = dict(clock="H100", sim_model="llama-3-8b")
SIM_LABEL = f"H100 (simulated, llama-3-8b shape; a projection: {label_note('H100')})"


def seed_everything(seed: int = 0) -> None:
    """Pin every random source a chapter touches, so two runs draw the same workload."""
    random.seed(seed)
    import numpy as np
    np.random.seed(seed)
    try:
        import torch
        torch.manual_seed(seed)
    except ImportError:  # pragma: no cover - torch is a hard dependency
        pass


def tokenizer():
    """SmolLM2's real tokenizer and chat template (no weights loaded)."""
    from inferlab.model.loader import default_tokenizer
    return default_tokenizer()


BLOCKS, SMOKE_BLOCKS = 512, 256


def engine(model: str | None = None, **kw):
    """An engine with a fixed, small KV cache (no memory probing: same blocks every run), on
    the real SmolLM2-135M-Instruct unless ``model`` says otherwise (tests pass "tiny", a random
    2-layer Llama with SmolLM2's tokenizer and vocabulary, for speed). A smoke run (tests,
    Binder) takes SMOKE_BLOCKS, enough for its workloads: the engine's free blocks are handed
    out in turn, as vLLM's are, so a run touches all of them in time, and on a 2 GB Binder pod
    two engines of 512 (377 MB each in fp32) did not fit beside the rest."""
    import gc

    import inferlab as il

    from . import smoke
    kw.setdefault("num_blocks", SMOKE_BLOCKS if smoke() else BLOCKS)
    gc.collect()        # an engine let go holds its KV cache until the collector finds its cycles
    kw.setdefault("seed", 0)
    return il.Engine(model, **kw)


def warm_up(eng) -> None:
    """One throwaway request: the first forward compiles kernels and would skew a timing."""
    import inferlab as il
    eng.generate([[5] * 24], il.SamplingParams(max_tokens=2, ignore_eos=True), use_tqdm=False)


def style(fig, title: str, clock: str, left: int = 60):
    """The house template, plus room for subplot titles and a legend under the plot."""
    from .. import figures
    figures.style(fig, title, clock)
    fig.update_layout(margin=dict(t=105, l=left, b=110),
                      legend=dict(orientation="h", x=0, xanchor="left", y=-0.2,
                                  yanchor="top"))
    return fig
