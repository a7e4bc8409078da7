"""Every claim the lab tests, in one table: what is claimed (in our words), where it was
published, which chapter measures it, how, and how the measurement is judged.

    from inferlab.lab import claims
    for claim, data, verdict in claims.run_all(smoke=True):   # `inferlab claims --smoke`
        print(claim.id, verdict)
    claims.print_verdicts("ch05", data)      # a chapter notebook, on its own measurement

Each claim lives in the chapter that measures it: a chapter module holds its measurement,
its claims (``CLAIMS``: text, source, ``measure_for_claims``) and one judge per claim beside
them; this module only assembles the table, in chapter order. A verdict is computed, never
typed (``inferlab.lab.verdicts``: the four verdicts and the judging helpers). A claim's
``measure`` runs the chapter's own measurement with deterministic settings wherever the
claim allows (token counts, the simulated clock); chapter 9's kernels can only be timed on
the wall clock, under the measurement protocol (``inferlab.lab.protocol``).
"""
from __future__ import annotations

import textwrap
from typing import Callable

from .chapters import (ch01_prompt_anatomy, ch02_tokenization, ch03_prefill_decode,
                       ch04_kv_cache, ch05_batching, ch06_chunked_prefill, ch07_prefix_caching,
                       ch08_safety_streaming, ch09_kernels, ch10_multi_gpu,
                       ch13_sampling_decode, ch14_own_traffic, ch15_memory_and_price)
from .verdicts import AFTER, ENTER, Claim, Verdict   # noqa: F401 (Claim, sources: the API)

# The chapters with claims, in chapter order: the table is theirs, in this order.
CHAPTERS = (ch01_prompt_anatomy, ch02_tokenization, ch03_prefill_decode, ch04_kv_cache,
            ch05_batching, ch06_chunked_prefill, ch07_prefix_caching, ch08_safety_streaming,
            ch09_kernels, ch10_multi_gpu, ch13_sampling_decode, ch14_own_traffic,
            ch15_memory_and_price)

CLAIMS: tuple[Claim, ...] = tuple(claim for chapter in CHAPTERS for claim in chapter.CLAIMS)


def for_chapter(chapter) -> list[Claim]:
    """The claims of a chapter, by number (5), prefix ("ch05") or module name."""
    key = f"ch{chapter:02d}" if isinstance(chapter, int) else str(chapter)[:4]
    return [c for c in CLAIMS if c.chapter.startswith(key)]


def verdicts_for(chapter, data: dict) -> list[tuple[Claim, Verdict]]:
    """Judge a chapter's own measurement (a notebook's ``data``) for each of its claims."""
    return [(c, c.assess(data)) for c in for_chapter(chapter)]


def print_verdicts(chapter, data: dict, width: int = 100) -> None:
    """What a chapter notebook's last cell prints: each claim, its source, the verdict and
    the reason, computed from the notebook's own measurement."""
    wrap = lambda text, head: textwrap.fill(text, width, initial_indent=head,
                                            subsequent_indent=" " * len(head))
    for claim, v in verdicts_for(chapter, data):
        print(wrap(claim.text, f"Claim {claim.id}: "))
        print(wrap(claim.source, "Source:  "))
        print(f"Rests on: {claim.kind}")
        print(f"Verdict: {v.verdict.upper()}")
        print(wrap(v.reason, "Why:     "))
        if v.warning:
            print(wrap(v.warning, "         "))
        print()


def run_all(smoke: bool = False, only=None, progress: Callable[[str], None] | None = None,
            recorded: bool = False) -> list[tuple[Claim, dict, Verdict]]:
    """Measure and judge every claim (each chapter measured once for all its claims).
    ``only``: claim ids or chapter prefixes ("ch05") to keep. ``recorded``: measure nothing,
    judge each chapter's recorded run (``records``: what its full run measured)."""
    from . import records
    keep = [c for c in CLAIMS if not only or c.id in only or c.chapter[:4] in only]
    measured: dict = {}
    out = []
    for claim in keep:
        if claim.measure not in measured:
            if progress:
                progress(f"{'reading' if recorded else 'measuring'} {claim.chapter} ...")
            measured[claim.measure] = records.load(claim.chapter)["claims"] if recorded \
                else claim.measure(smoke)
        data = measured[claim.measure]
        out.append((claim, data, claim.assess(data)))
    return out
