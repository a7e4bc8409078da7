"""Chapter 13: nearly identical prompts, different answers.

Two prompts that differ by a word or a space are two different token sequences, so the model
computes two different next-token distributions. Under greedy decoding the answers stay the
same as long as the most likely token does; once one output token differs, every later step
reads a different sequence and the answers part for good. Under sampling the same seed draws
the same random numbers for both prompts, and a small shift in the probabilities is enough to
pick another token.

Measured on the real SmolLM2 through the engine, greedy and seeded (token counts: the same
every run): for each pair, the first output token at which the two answers differ (0 is the
first token), or none within the answer length.
"""
from __future__ import annotations

from .. import palette
from ..verdicts import COUNTS, FAILS, HOLDS, HOLDS_SMALLER, Verdict, pct

# (what changes, the original, the variant): the first three are the smoke run's
PAIRS = (
    ("a synonym", "Give me a quick tip for sleeping better.",
     "Give me a fast tip for sleeping better."),
    ("a double space", "Tell me a fun fact about octopuses.",
     "Tell me a fun fact about  octopuses."),
    ("a trailing space", "What is the capital of France?", "What is the capital of France? "),
    ("colour / color", "Describe the colour of the sky at sunset.",
     "Describe the color of the sky at sunset."),
    ("a capital letter", "write a haiku about rain.", "Write a haiku about rain."),
    ("! for .", "Name three fruits.", "Name three fruits!"),
    ("a typo", "How do I receive a parcel when I am not at home?",
     "How do I recieve a parcel when I am not at home?"),
    ("a comma", "Explain in one sentence why the sky is blue.",
     "Explain, in one sentence, why the sky is blue."),
)
TEMPERATURE, TOP_P = 0.8, 0.95


def sizes(smoke: bool) -> dict:
    return dict(pairs=3, tokens=8, seeds=2) if smoke else dict(pairs=8, tokens=24, seeds=6)


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The index of the first output token where ``a`` and ``b`` differ (one ending before
    the other counts as a difference there); None if they are the same."""
    for i, (p, q) in enumerate(zip(a, b)):
        if p != q:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def tokens_changed(a: list[int], b: list[int]) -> int:
    """How many tokens of the longer prompt are not in the prefix or suffix both share."""
    head = first_difference(a, b)
    if head is None:
        return 0
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    return max(len(a), len(b)) - head - tail


def measure_near(eng, tok, smoke: bool = False, pairs=None) -> dict:
    """Each pair (default the chapter's ``PAIRS``, the first ``sizes(smoke)["pairs"]``),
    both prompts answered greedily and with seeds 0..n-1 (the same seeds for both), all in one
    batch through ``eng``: where the answers part. ``pairs``: (change, original, variant)."""
    import inferlab as il
    from inferlab.core.prompts import to_token_ids
    s = sizes(smoke)
    pairs = list(pairs or PAIRS[:s["pairs"]])
    ids = lambda text: to_token_ids([{"role": "user", "content": text}], tok, len(tok))[0]
    params = [il.SamplingParams(max_tokens=s["tokens"])]
    params += [il.SamplingParams(max_tokens=s["tokens"], temperature=TEMPERATURE, top_p=TOP_P,
                                 seed=seed) for seed in range(s["seeds"])]
    prompts = [(ids(a), ids(b)) for _, a, b in pairs]
    batch = [p for pa, pb in prompts for p in (pa, pb) for _ in params]
    outs = eng.generate(batch, params * (2 * len(pairs)), use_tqdm=False)
    k = len(params)
    rows = []
    for i, ((change, a, b), (pa, pb)) in enumerate(zip(pairs, prompts)):
        oa, ob = outs[2 * i * k:(2 * i + 1) * k], outs[(2 * i + 1) * k:(2 * i + 2) * k]
        firsts = [first_difference(x.token_ids, y.token_ids) for x, y in zip(oa, ob)]
        differ = [f is not None for f in firsts[1:]]
        rows.append({"change": change, "original": a, "variant": b,
                     "prompt_tokens": (len(pa), len(pb)),
                     "prompt_changed": tokens_changed(pa, pb),
                     "greedy": (oa[0].text, ob[0].text), "greedy_first": firsts[0],
                     "sampled_first": firsts[1:], "sampled_differ": sum(differ) / len(differ)})
    return {"rows": rows, "tokens": s["tokens"], "seeds": s["seeds"],
            "temperature": TEMPERATURE, "top_p": TOP_P}


def parts_after(common: int) -> str:
    """Where two answers part, said with the number of output tokens they share first."""
    return "at the first token" if common == 0 else \
        f"after {common} common token{'s' if common > 1 else ''}"


def judge_near_prompts(d: dict) -> Verdict:
    """Holds if a greedy answer parts in at least one pair (the prompt alone changes the
    answer) and the seeded ones do too; smaller if only the seeded answers part; fails if
    every answer stays the same."""
    n = d["near"]
    rows, seeds, tokens = n["rows"], n["seeds"], n["tokens"]
    greedy = [r for r in rows if r["greedy_first"] is not None]
    sampled = [f for r in rows for f in r["sampled_first"]]
    parted = [f for f in sampled if f is not None]
    v = HOLDS if greedy and parted else HOLDS_SMALLER if greedy or parted else FAILS
    where = ", ".join(f"{r['change']}: {parts_after(r['greedy_first'])}" for r in greedy)
    lo, hi = min(r["prompt_changed"] for r in rows), max(r["prompt_changed"] for r in rows)
    changed = f"{lo}" if lo == hi else f"{lo} to {hi}"
    return Verdict(v, f"{len(greedy)} of {len(rows)} prompt pairs that differ by a word or a "
                   f"space ({changed} of about {rows[0]['prompt_tokens'][0]} "
                   f"prompt tokens changed) got different greedy answers within {tokens} tokens"
                   + (f" ({where})" if greedy else "")
                   + f"; with the same seed for both prompts (temperature {n['temperature']}, "
                   f"top-p {n['top_p']}) {len(parted)} of {len(sampled)} answers differ"
                   + (f", after {min(parted)} to {max(parted)} common tokens" if parted else "")
                   + f" ({d['model']}, {seeds} seeds; token counts)",
                   measured=f"{len(greedy)} of {len(rows)} greedy, "
                            f"{pct(len(parted) / len(sampled))} sampled differ",
                   points=tuple((r["change"], round(100 * r["sampled_differ"])) for r in rows),
                   unit="% of seeded answers that differ", clock=COUNTS)


def near_table(data: dict) -> str:
    """Each pair's two greedy answers, and where they part, as a Markdown table."""
    from ._display import md_table
    rows = []
    for r in data["near"]["rows"]:
        f = r["greedy_first"]
        rows.append([r["change"], repr(r["variant"]), r["greedy"][0], r["greedy"][1],
                     "nowhere" if f is None else parts_after(f)])
    return md_table(["change", "variant prompt", "greedy answer (original)",
                     "greedy answer (variant)", "where they part"], rows)


def near_figure(data: dict):
    """Per pair: how many output tokens the two greedy answers share before they part, and the
    share of seeded answers (same seed for both prompts) that differ."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from . import _kit
    n = data["near"]
    rows, tokens = n["rows"][::-1], n["tokens"]             # the first pair on top
    names = [r["change"] for r in rows]
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.06,
                        subplot_titles=(f"greedy: output tokens the two answers share<br>"
                                        f"before they part (of {tokens})",
                                        f"sampled, the same seed for both prompts:<br>answers "
                                        f"that differ (of {n['seeds']} seeds)"))
    same = [r["greedy_first"] is None for r in rows]
    fig.add_trace(go.Bar(
        y=names, x=[tokens if s else r["greedy_first"] for r, s in zip(rows, same)],
        orientation="h", name="greedy",
        marker_color=[palette.SERIES["baseline"] if s else palette.SERIES["main"] for s in same],
        text=[f"the same for all {tokens}" if s else "part " + parts_after(r["greedy_first"])
              for r, s in zip(rows, same)], textposition="outside", cliponaxis=False), 1, 1)
    fig.add_trace(go.Bar(
        y=names, x=[r["sampled_differ"] for r in rows], orientation="h", name="sampled",
        marker_color=palette.SERIES["main"],
        text=[f"{round(r['sampled_differ'] * n['seeds'])} of {n['seeds']}" for r in rows],
        textposition="outside", cliponaxis=False), 1, 2)
    fig.update_xaxes(range=[0, tokens * 1.45], title_text="output tokens", row=1, col=1)
    fig.update_xaxes(range=[0, 1.25], tickformat=".0%", tickvals=[0, 0.25, 0.5, 0.75, 1],
                     title_text="share of seeded answers", row=1, col=2)
    fig.update_traces(showlegend=False)
    fig.update_layout(height=max(400, 220 + 42 * len(rows)))
    _kit.style(fig, f"Nearly identical prompts, different answers ({data['model']})",
               f"token counts, deterministic (temperature {n['temperature']}, top-p "
               f"{n['top_p']})", left=120)
    fig.update_annotations(font_size=13)                   # the two panels' titles
    fig.update_layout(margin=dict(t=125))
    return fig
