"""A claim and its verdict: a verdict is computed from measured numbers, never typed, always
with its reason.

    Verdict(HOLDS_SMALLER, "23x claimed; 1.48x here: ...", measured="1.48x")

Four verdicts, and only these: the claim holds; it holds but the effect measured here is
smaller than the published one (the reason says how much and why, in numbers); it does not
hold here; or this machine cannot measure it (the reason says what is missing). A reason
without a number is refused: "holds" alone would be an opinion, not a measurement.

Only a claim that rests on a measurement gets one of them. Each claim says what it rests on
(``Claim.kind``): ``measured`` (the real model on this machine: token, block and step
counts, or the wall clock under the A B A B protocol), ``projection`` (the cost model pricing
a GPU: what an H100 would do) or ``illustration`` (it follows from how the lab built the
example). A projection or an illustration is shown as such, with its numbers, never as
"holds" (``Claim.assess``).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Callable

HOLDS = "holds"
HOLDS_SMALLER = "holds, smaller here"
FAILS = "does not hold here"
UNMEASURABLE = "not measurable here"
VERDICTS = (HOLDS, HOLDS_SMALLER, FAILS, UNMEASURABLE)
# what a claim rests on, and how the report card shows a claim that is not measured
MEASURED, PROJECTION, ILLUSTRATION = "measured", "projection", "illustration"
KINDS = (MEASURED, PROJECTION, ILLUSTRATION)
PROJECTED, ILLUSTRATED = "projection, not judged", "illustration, not judged"
STANDINGS = VERDICTS + (PROJECTED, ILLUSTRATED)

_NUMBER = re.compile(r"\d")


@dataclass(frozen=True)
class Verdict:
    """``verdict`` is one of VERDICTS; ``reason`` carries the numbers behind it.
    ``measured``: the headline number, short (for tables). ``points``: (label, value) pairs
    that the report card draws, in ``unit``, on ``clock`` (what the points were measured
    with). ``warning``: the busy-machine warning of a wall-clock measurement it rests on.
    A point may carry a role, ``(label, value, role)``: a published value (``(lo, hi)`` for a
    published range), a reference line, a policy, a stack's total (``report.figure`` draws
    each). ``chart``: "bars", or "stack" for parts that add up to a whole; ``axis``: "linear",
    or "log" for values spanning decades (ratios such as 1.3x beside 8x). ``counts_only``: the
    verdict follows from counts whatever the times say (a busy machine does not unjudge it)."""
    verdict: str
    reason: str
    measured: str = ""
    points: tuple = ()
    unit: str = ""
    clock: str = ""
    warning: str | None = None
    chart: str = "bars"
    axis: str = "linear"
    # the verdict follows from counts alone (different tokens, say), whatever its times: a
    # busy machine's warning travels with it but does not unjudge it (``busy_unjudged``)
    counts_only: bool = False

    def __post_init__(self):
        if self.chart not in ("bars", "stack") or self.axis not in ("linear", "log"):
            raise ValueError(f"chart must be bars or stack and axis linear or log, got "
                             f"{self.chart!r}, {self.axis!r}")
        if self.verdict not in STANDINGS:
            raise ValueError(f"verdict must be one of {STANDINGS}, got {self.verdict!r}")
        if not _NUMBER.search(self.reason):
            raise ValueError(f"a verdict's reason must state numbers, got {self.reason!r}")

    def __str__(self) -> str:
        return f"{self.verdict}: {self.reason}" + (f"\n{self.warning}" if self.warning else "")


@dataclass(frozen=True)
class Claim:
    """One claim the lab tests, declared by the chapter that measures it (its ``CLAIMS``):
    the claim in our words, where it was published, how it is measured and judged."""
    id: str
    text: str
    source: str
    chapter: str                            # chapter module, e.g. "ch05_batching"
    measure: Callable[[bool], dict]         # smoke -> the chapter's measured data
    judge: Callable[[dict], Verdict]
    kind: str = MEASURED                    # what the verdict rests on: one of KINDS

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"{self.id}: kind must be one of {KINDS}, got {self.kind!r}")

    @property
    def number(self) -> int:
        return int(self.chapter[2:4])

    def assess(self, data: dict) -> Verdict:
        """The judge's verdict on ``data`` if the claim is measured (a wall-clock one from a
        busy machine: not judged, ``busy_unjudged``); otherwise the same numbers shown as a
        projection or an illustration, not judged."""
        v = self.judge(data)
        if self.kind == MEASURED:
            return busy_unjudged(v)
        head = ("projection (the cost model pricing a GPU; not a measurement, not judged): "
                if self.kind == PROJECTION else
                "illustration (follows from how the lab built the example; not judged): ")
        return replace(v, verdict=PROJECTED if self.kind == PROJECTION else ILLUSTRATED,
                       reason=head + v.reason)


BUSY_REASON = "a busy machine: these wall-clock numbers are kept, not judged; "


def busy_unjudged(v: Verdict) -> Verdict:
    """A verdict that rests on wall-clock numbers measured on a busy machine (its ``warning``)
    is "not measurable here", whatever the numbers would say, in every chapter alike: the
    numbers stay in the reason, after why."""
    if not v.warning or v.verdict == UNMEASURABLE or v.counts_only:
        return v
    return replace(v, verdict=UNMEASURABLE, reason=BUSY_REASON + v.reason)


# The seed articles the claims come from (reference only: the claims are in our words).
ENTER = "ByteByteGo, \"What Happens Inside an AI Chatbot Between Enter and the First Word?\""
AFTER = "\"AI Inference: What Actually Happens After You Send a Prompt?\""
# The papers and posts that first made (or measured) a claim the seed articles repeat.
PAGED = ("Kwon et al., \"Efficient Memory Management for Large Language Model Serving with "
         "PagedAttention\" (SOSP 2023)")
ANYSCALE = ("Daniel et al. (Anyscale), \"How continuous batching enables 23x throughput in LLM "
            "inference while reducing p50 latency\" (2023)")
ORCA = ("Yu et al., \"Orca: A Distributed Serving System for Transformer-Based Generative "
        "Models\" (OSDI 2022)")
SARATHI = ("Agrawal et al., \"Taming Throughput-Latency Tradeoff in LLM Inference with "
           "Sarathi-Serve\" (OSDI 2024)")
MEGATRON = ("Shoeybi et al., \"Megatron-LM: Training Multi-Billion Parameter Language Models "
            "Using Model Parallelism\" (2019)")
MQA = "Shazeer, \"Fast Transformer Decoding: One Write-Head is All You Need\" (2019)"
NUCLEUS = "Holtzman et al., \"The Curious Case of Neural Text Degeneration\" (ICLR 2020)"
LABS_OWN = "the lab's own"


# --- judging ------------------------------------------------------------------------------
# Each chapter judges its own claims (``judge_*`` beside its ``CLAIMS``): one function per
# claim, measured data in, a Verdict with its numbers out. The thresholds are the only
# judgement calls: each judge states its own (``clear=``), and these helpers apply them the
# same way everywhere. Judges read the deterministic part of a chapter's data (token counts,
# simulated clocks) first; wall-clock columns, when present, are added to the reason with
# their spread and busy-machine warning.
def against_published(measured: float, published: float, *, no_effect: float = 1.05,
                      close: float = 0.8) -> str:
    """A ratio claim with a published size (e.g. "up to 23x"): it holds when the measured
    ratio reaches ``close`` of it, holds smaller when the effect is there but smaller, and
    does not hold when the ratio stays below ``no_effect`` (no effect, or the reverse)."""
    if measured < no_effect:
        return FAILS
    return HOLDS if measured >= close * published else HOLDS_SMALLER


def direction(ratio: float, *, clear: float = 1.5, no_effect: float = 1.05) -> str:
    """A claim that names a direction but no size: the effect is clear (>= ``clear``x),
    there but small, or absent (below ``no_effect``x, including the reverse)."""
    if ratio < no_effect:
        return FAILS
    return HOLDS if ratio >= clear else HOLDS_SMALLER


# Two runs of one setting on these shared 2-core machines differ by up to ~12% (chapter 6's
# first token, six runs in a row: 279-313 ms, 2026-12-06), so two medians of two runs each
# can stand 1.12x apart, their ranges apart, with no effect at all (CI saw it). On the wall
# clock an effect is none below WALL_NOISE, whatever its ranges say.
WALL_NOISE = 1.2


def on_wall(ratio: float, *, clear: float = 1.5) -> str:
    """``direction`` for a ratio of two wall-clock times: no effect below WALL_NOISE."""
    return direction(ratio, clear=max(clear, WALL_NOISE), no_effect=WALL_NOISE)


def no_wall_run(why: str) -> Verdict:
    """The verdict of a claim judged on the wall clock when its measurement ran no wall-clock
    repeats (``deterministic=True``): it cannot hold; ``why`` says what it is judged on."""
    return Verdict(FAILS, f"no wall-clock run: {why}", measured="not measured")


def worst(*verdicts: str) -> str:
    """The weakest of several verdicts (each part of a claim must hold for the whole)."""
    return max(verdicts, key=VERDICTS.index)


def ideal_batching_gain(output_lens, seats: int) -> tuple[float, int, int]:
    """(ratio, static steps, continuous steps) in decode steps, for requests all waiting at
    the start: static batching runs groups of ``seats`` for as long as each group's longest
    answer; continuous batching can do no better than filling every seat at every step."""
    groups = [output_lens[i:i + seats] for i in range(0, len(output_lens), seats)]
    static = sum(max(g) for g in groups)
    cont = max(math.ceil(sum(output_lens) / seats), max(output_lens))
    return static / cont, static, cont


def wall_warning(data: dict) -> str | None:
    """The busy-machine warning of a chapter's wall-clock runs, wherever the chapter keeps it
    (``data["wall"]`` or a wall-clock column of ``data["runs"]``)."""
    wall = data.get("wall")
    if isinstance(wall, dict) and wall.get("warning"):
        return wall["warning"]
    for runs in (data.get("runs") or {}).values():
        if isinstance(runs, dict) and runs.get("warning"):
            return runs["warning"]
    return None


# --- numbers as the reasons print them ------------------------------------------------------
COUNTS = "none: token counts"           # a Verdict's clock when its points are counts


def clock_note(label: str) -> str:
    """The clock a reason's times were measured on, as the reasons print it: ``[label]``."""
    return f"[{label}]"


def ms(seconds: float, digits: int = 1) -> str:
    return f"{seconds * 1e3:.{digits}f} ms"


def x(ratio: float) -> str:
    return f"{ratio:.2f}x" if ratio < 10 else f"{ratio:.1f}x"


def pct(frac: float) -> str:
    return f"{frac:.1%}" if frac < 0.1 else f"{frac:.0%}"
