"""Chapter 6, second part: an answer that starts sooner feels faster, though it ends at about
the same time (06-first-token-feel).

One long prompt arrives; a few short questions arrive just after it, inside the long prompt's
first step. Without chunking, that step computes the whole long prompt and the short questions
wait for it before their first token. With chunked prefill the long prompt takes a slice of
each step (``long_prefill_token_threshold``) and the short questions join the next step. The
machine does the same work under both settings, so the short answers end at about the same
time: what changes is when they start. Measured on SmolLM2 on this machine's wall clock, the
two settings interleaved (A B A B) under a busy check; the same arriving traffic in both.
"""
from __future__ import annotations

import statistics

import numpy as np

from .. import protocol
from ..verdicts import FAILS, HOLDS, HOLDS_SMALLER, Verdict, direction, no_wall_run, worst, x

ARMS = ("unchunked", "chunked")
GAP = 0.02            # seconds after the long prompt that the short questions arrive
SHORT_PROMPT = 32     # tokens in each short question
E2E_CLOSE, E2E_NEAR = 1.25, 1.5   # whole answers this close: "about the same time"


def sizes(smoke: bool) -> dict:
    if smoke:
        return dict(long_len=512, questions=3, answer_tokens=24, slice=64, budget=256)
    return dict(long_len=1800, questions=4, answer_tokens=64, slice=128, budget=512)


def workload(s: dict, vocab: int = 8000, seed: int = 1) -> list[dict]:
    """The long prompt at 0 (a short answer of its own), the questions at ``GAP``: named
    ``stream-*`` so chapter 6's runner reports their token times."""
    rng = np.random.default_rng(seed)
    reqs = [dict(id="long-0", prompt=rng.integers(3, vocab, s["long_len"]).tolist(),
                 max_tokens=4, arrival=0.0)]
    reqs += [dict(id=f"stream-{i}", prompt=rng.integers(3, vocab, SHORT_PROMPT).tolist(),
                  max_tokens=s["answer_tokens"], arrival=GAP) for i in range(s["questions"])]
    return reqs


def _one(run, chunked: bool, reqs: list[dict], s: dict) -> dict:
    """One play of the traffic: the questions' median TTFT and median time to the whole
    answer, both from each question's arrival."""
    kw = dict(clock="wall")
    if chunked:
        kw["long_prefill_token_threshold"] = s["slice"]
    r = run(chunked, reqs, None, s["budget"], **kw)
    asked = [m for k, m in r["requests"].items() if k.startswith("stream")]
    return {"ttft": statistics.median(m["ttft"] for m in asked),
            "e2e": statistics.median(m["e2e"] for m in asked), "model": r["model"]}


def measure(run, smoke: bool, repeats: int, chunking: tuple[bool, bool] = (False, True)) -> dict:
    """Both settings on the wall clock, interleaved ``repeats`` times; ``run``: chapter 6's
    runner. ``chunking``: each arm's ``enable_chunked_prefill`` ((True, True): the effect
    removed, the falsification)."""
    s = sizes(smoke)
    reqs = workload(s)
    flags = dict(zip(ARMS, chunking))
    res = protocol.compare({a: (lambda f=flags[a]: _one(run, f, reqs, s)) for a in ARMS},
                           repeats)
    sp = lambda a, key: res.spread(a, lambda r: r[key]).as_dict()
    return {"sizes": s, "chunking": list(chunking), **res.meta(),
            "model": res.runs["chunked"][0]["model"],
            "ttft": {a: sp(a, "ttft") for a in ARMS}, "e2e": {a: sp(a, "e2e") for a in ARMS}}


def judge(f: dict | None) -> Verdict:
    """The questions' median TTFT must differ clearly (1.5x, the two ranges apart) while the
    median time to their whole answers stays close (within 1.25x holds, 1.5x smaller): both
    numbers judged, on this machine's wall clock. A first token that moves no more than what
    counts as "close" for the whole answer has not moved "a lot": below 1.25x it does not
    hold, whatever the ranges say (two runs of one setting differ by up to ~12% here)."""
    if not f:
        return no_wall_run("the first token against the whole answer is judged on this "
                           "machine's wall clock only")
    s = f["sizes"]
    tu, tc = (protocol.Spread(**f["ttft"][a]) for a in ARMS)
    eu, ec = (protocol.Spread(**f["e2e"][a]) for a in ARMS)
    sooner = tu.median / tc.median
    apart = tu.lo > tc.hi
    whole = max(eu.median, ec.median) / min(eu.median, ec.median)
    v_first = direction(sooner, no_effect=E2E_CLOSE) if apart else FAILS
    v_whole = HOLDS if whole <= E2E_CLOSE else HOLDS_SMALLER if whole <= E2E_NEAR else FAILS
    return Verdict(worst(v_first, v_whole),
                   f"{s['questions']} short questions arriving just after a {s['long_len']:,}-"
                   f"token prompt, the same traffic under two engine settings: first token "
                   f"{tu.ms(0)} unchunked vs {tc.ms(0)} with chunked prefill (slices of "
                   f"{s['slice']} tokens; {x(sooner)} sooner"
                   f"{'' if apart else ', the ranges overlap'}"
                   f"{', no more than close' if apart and sooner < E2E_CLOSE else ''}), the whole {s['answer_tokens']}"
                   f"-token answer {eu.ms(0)} vs {ec.ms(0)} ({x(whole)} apart; close is within "
                   f"{E2E_CLOSE}x); this machine's wall clock ({f['model']}, medians of "
                   f"{f['repeats']} interleaved runs)",
                   measured=f"first token {x(sooner)} sooner, whole answer {x(whole)} apart",
                   points=(("first token, unchunked", tu.median * 1e3, "continuous"),
                           ("first token, chunked", tc.median * 1e3, "chunked"),
                           ("whole answer, unchunked", eu.median * 1e3, "continuous"),
                           ("whole answer, chunked", ec.median * 1e3, "chunked")),
                   unit="ms from the question's arrival (median)", clock=f["label"],
                   warning=f.get("warning"))
