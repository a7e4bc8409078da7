"""Chapter 1: what the model actually reads, and why every turn reads it all again.

The text a user types is a small part of the input. The application wraps it in a system
prompt, tool definitions and memory, appends the whole conversation so far, and renders all
of it with the model's chat template. The model keeps nothing between calls, so turn k
sends turns 1..k-1 again; only a prefix cache on the server spares recomputing them.
"""
from __future__ import annotations

import json

from .. import measure_cache, palette, protocol
from ..verdicts import (AFTER, COUNTS, ENTER, FAILS, ILLUSTRATION, Claim, Verdict, direction,
                        pct, wall_warning)
from . import _kit
from ._ch01_turns import judge_later_turns, turns_figure   # noqa: F401 (the API)

TITLE = "Prompt anatomy and statelessness"
CLAIM = ("The input is assembled from system prompt, tool definitions, memory and history; "
         "the model is stateless, so every turn re-processes the whole conversation "
         "(unless a prefix cache keeps the earlier turns' KV).")

SYSTEM = ("You are Juniper, the support assistant of a small bicycle shop. Be brief and "
          "friendly. Never promise a repair date without checking the calendar tool.")
TOOLS = [
    {"name": "calendar_free_slots", "description": "Free repair slots in the workshop",
     "parameters": {"day": "ISO date"}},
    {"name": "order_status", "description": "Where a customer's order is",
     "parameters": {"order_id": "string"}},
]
MEMORY = "Customer: Ana. Owns a 2019 city bike. Prefers messages in the morning."
TURNS = [  # (user, assistant): the replies are fixed so every run sends the same tokens
    ("Hi! My back brake squeaks. Can you fix it this week?",
     "Hi Ana! Squeaky brakes are usually a quick fix. Let me check the workshop calendar."),
    ("Thursday morning would be best for me.",
     "Thursday at 9:00 is free. Shall I book it for your city bike?"),
    ("Yes please. How long will it take?",
     "Booked. A brake service takes about 30 minutes, so you can wait in the shop."),
    ("Great. Is my order of new lights in yet?",
     "Your lights arrived yesterday; we will fit them during the same visit."),
    ("Perfect, thank you!", "You're welcome, see you on Thursday!"),
    ("One more thing: do you sell helmets for kids?",
     "We do, from age 3 up. The most popular one is the Puddle, in four colours."),
    ("My daughter is six. Which size would fit her?",
     "Size S fits heads of 48-52 cm, which suits most six-year-olds. Bring her to try it."),
    ("Can I pay for everything on Thursday?",
     "Yes, the service, the lights and a helmet can all go on one bill on Thursday."),
    ("Do you take cards or only cash?", "Both: cards, cash and phone payments all work."),
    ("What time do you open on Thursday?",
     "We open at 8:30, so there is time before your 9:00 slot."),
    ("Is there parking near the shop?",
     "There are bike racks at the door and a public car park 100 metres away."),
    ("My tyres also look worn. Should I replace them?",
     "If the tread is flat or you see cracks, yes. We can look at them on Thursday."),
    ("How much would two new tyres cost?",
     "City tyres start at 25 euros each, fitting included with a service."),
    ("Okay, please check them and tell me then.",
     "Noted on your booking: check the tyres and quote before fitting."),
    ("Could you also raise the saddle a bit?",
     "Of course, that takes a minute. We will set it while you wait."),
    ("Do you have a loyalty card?",
     "Yes: every fifth service is free. I have added a card to your account."),
    ("Nice! How many services do I have so far?",
     "This will be your second, so three more until a free one."),
    ("Can my partner pick up the bike if I can't?",
     "Yes, just tell us their name. They will need the booking number."),
    ("Her name is Marta. What is the booking number?",
     "Marta is added. Your booking number is 4471."),
    ("Thanks for all the help!", "My pleasure, Ana. See you, or Marta, on Thursday!"),
]
# the turns timed on the wall clock (the real model), spread over the conversation
WALL_TURNS, WALL_TURNS_SMOKE = (1, 5, 10, 15, 20), (1, 20)
SEGMENTS = ("template", "system prompt", "tool definitions", "memory", "history",
            "new message")
# the segments are told apart by their labels: the rest of the prompt in the baseline grey,
# what the user typed (the new message) in the main series' ink (palette.SERIES)
COLORS = {s: palette.SERIES["main" if s == "new message" else "baseline"] for s in SEGMENTS}


def system_text() -> str:
    return (SYSTEM + "\n\n# Tools\n" + json.dumps(TOOLS, indent=1)
            + "\n\n# Memory\n" + MEMORY)


def conversation(turn: int) -> list[dict]:
    """The messages sent for turn ``turn`` (1-based): everything before it, then its question."""
    msgs = [{"role": "system", "content": system_text()}]
    for user, assistant in TURNS[:turn - 1]:
        msgs += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return msgs + [{"role": "user", "content": TURNS[turn - 1][0]}]


def anatomy(tok, turn: int = 3) -> list[tuple[str, str]]:
    """(token text, segment) for every token the model reads at ``turn``."""
    msgs = conversation(turn)
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    # Character spans of each segment in the rendered text; the rest is template markup.
    spans = []
    sys_at = text.index(SYSTEM)
    tools_at = text.index("# Tools", sys_at)
    mem_at = text.index("# Memory", tools_at)
    spans += [(sys_at, tools_at, "system prompt"), (tools_at, mem_at, "tool definitions"),
              (mem_at, mem_at + len("# Memory\n" + MEMORY), "memory")]
    pos = mem_at
    for m in msgs[1:]:
        at = text.index(m["content"], pos)
        last = m is msgs[-1]
        spans.append((at, at + len(m["content"]), "new message" if last else "history"))
        pos = at + len(m["content"])
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    out = []
    for tid, (a, b) in zip(enc["input_ids"], enc["offset_mapping"]):
        seg = next((s for lo, hi, s in spans if lo <= a < hi), "template")
        out.append((tok.decode([tid]), seg))
    return out


def tokens_figure(tokens):
    """Every token the model reads, as a chip laid out as the text, each part of the prompt
    named in the margin."""
    from . import _ch01_tokens
    typed = sum(1 for _, seg in tokens if seg == "new message")
    return _ch01_tokens.figure(tokens, f"What the model reads: {len(tokens)} tokens, {typed} "
                                       "of them typed by the user")


def replay_turns(eng, turns, keep=None) -> list[dict]:
    """Send the conversation turn by turn to ``eng`` (one request each, as a chat app does):
    turns 1..``turns``, or the turn numbers in ``turns`` when it is a list; ``keep``: the
    turns whose rows to return (default all)."""
    import inferlab as il
    rows = []
    for k in (range(1, turns + 1) if isinstance(turns, int) else turns):
        out = eng.generate([conversation(k)], il.SamplingParams(max_tokens=1, ignore_eos=True),
                           use_tqdm=False)[0]
        m = out.metrics
        if keep is None or k in keep:
            rows.append({"turn": k, "prompt_tokens": m.num_prompt_tokens,
                         "cached_tokens": m.num_cached_tokens,
                         "computed_tokens": m.num_prompt_tokens - m.num_cached_tokens,
                         "ttft": m.ttft})
    return rows


@measure_cache.shared
def measure(smoke: bool = False, deterministic: bool = False, repeats: int | None = None,
            caching: tuple[bool, bool] = (False, True), wall_turns=None) -> dict:
    """The 20-turn conversation on SmolLM2 without and with prefix caching (``caching``:
    the two runs' setting; a test gives (False, False) or (True, True) to remove the effect),
    priced on the simulated H100, and unless ``deterministic`` the turns ``wall_turns``
    (default: ``WALL_TURNS``, spread over the conversation) on the wall clock."""
    _kit.seed_everything(0)
    tok = _kit.tokenizer()
    tokens = anatomy(tok, turn=3)
    counts = {s: sum(1 for _, seg in tokens if seg == s) for s in SEGMENTS}
    runs = {}
    # All 20 turns, in smoke runs too: the token counts are the point, and SmolLM2 prefills
    # them in seconds. The simulated clock prices each turn's TTFT for an 8B model on an
    # H100, the same on every run.
    for arm, cache in zip(("uncached", "cached"), caching):
        eng = _kit.engine(None, enable_prefix_caching=cache, **_kit.SIM)
        runs[arm + " · sim"] = replay_turns(eng, len(TURNS))
    data = {"tokens": tokens, "counts": counts, "runs": runs, "clock_sim": _kit.SIM_LABEL,
            "model": eng.model_name}
    del eng                  # its KV blocks go before the wall clock's two engines take theirs
    if not deterministic:
        turns = list(wall_turns or (WALL_TURNS_SMOKE if smoke else WALL_TURNS))
        data["wall"] = _measure_wall(turns, repeats or (2 if smoke else 3), runs, caching)
    return data


def recompute_totals(rows: list[dict]) -> dict:
    """Prompt tokens computed over a whole conversation, and by its last turn."""
    return {"turns": len(rows), "total": sum(r["computed_tokens"] for r in rows),
            "sent": sum(r["prompt_tokens"] for r in rows), "last": rows[-1]["computed_tokens"],
            "first": rows[0]["computed_tokens"]}


def _measure_wall(turns: list[int], repeats: int, runs: dict, caching=(False, True)) -> dict:
    """Wall clock on this machine, uncached and cached conversations interleaved (A B A B),
    on the real SmolLM2, at the turns ``turns``: without a cache each of those turns is sent
    alone (the conversation so far in it, as always); with one the whole conversation is
    replayed up to the last of them, from an empty cache every repeat, so each turn finds
    its earlier turns cached. Each row's TTFT is the median over the repeats, with its range
    in ``ttft_lo`` / ``ttft_hi``."""
    engines = {arm: _kit.engine(None, enable_prefix_caching=cache)
               for arm, cache in zip(("uncached", "cached"), caching)}

    def arm(name):
        eng = engines[name]
        if not eng.config.enable_prefix_caching:
            return lambda: replay_turns(eng, turns)

        def replay():
            eng.reset_prefix_cache()          # every repeat starts from an empty cache
            return replay_turns(eng, max(turns), keep=set(turns))
        return replay
    for eng in engines.values():
        _kit.warm_up(eng)
    res = protocol.compare({name: arm(name) for name in engines}, repeats)
    for name, reps in res.runs.items():
        rows = []
        for k, row in enumerate(reps[0]):
            sp = protocol.spread(rep[k]["ttft"] for rep in reps)
            rows.append({**row, "ttft": sp.median, "ttft_lo": sp.lo, "ttft_hi": sp.hi})
        runs[f"{name} · wall"] = rows
    # the later turns' summed TTFT, per repeat: what the cache saves on this machine
    later = lambda rep: sum(r["ttft"] for r in rep[1:])
    return {**res.meta(), "turns": turns,
            "later_turns_ttft": {name: res.spread(name, later).as_dict() for name in res.runs}}


def figures(data: dict) -> dict:
    """One figure per point: the prompt's parts and each turn's work (the main one), and
    every token the model reads at turn 3, laid out as the text."""
    return {"": figure(data), "tokens": tokens_figure(data["tokens"])}


def figure(data: dict):
    """What the model reads at turn 3, by part, and the prompt tokens each turn computes
    without and with a prefix cache (``_ch01_figure``)."""
    from . import _ch01_figure
    return _ch01_figure.figure(data, COLORS)


def summary(data: dict) -> str:
    total = sum(data["counts"].values())
    typed = data["counts"]["new message"]
    lines = [f"model: {data['model']}",
             f"turn 3: the model reads {total} tokens; the user typed {typed} of them "
             f"({typed / total:.0%})"]
    off = recompute_totals(data["runs"]["uncached · sim"])
    on = recompute_totals(data["runs"]["cached · sim"])
    lines.append(f"over {off['turns']} turns the conversation sends {off['sent']:,} prompt "
                 f"tokens: without a prefix cache all {off['total']:,} are computed (turn 1: "
                 f"{off['first']}, turn {off['turns']}: {off['last']}); with it {on['total']:,} "
                 f"({on['total'] / off['total']:.0%}; turn {on['turns']}: {on['last']})")
    for label, rows in data["runs"].items():
        ttft = ", ".join(f"{r['ttft'] * 1e3:.1f}" for r in rows)
        if "ttft_lo" in rows[0]:
            ttft = ", ".join(f"{r['ttft'] * 1e3:.1f} [{r['ttft_lo'] * 1e3:.1f}-"
                             f"{r['ttft_hi'] * 1e3:.1f}]" for r in rows)
        lines.append(f"{label:16} computed per turn: "
                     + ", ".join(str(r["computed_tokens"]) for r in rows)
                     + "  | TTFT ms: " + ttft)
    lines.append(f"sim: {protocol.label(data['clock_sim'])}")
    if "wall" in data:
        w = data["wall"]
        sp = {a: protocol.Spread(**v) for a, v in w["later_turns_ttft"].items()}
        lines.append(f"wall: {w['label']}; TTFT summed over turns 2+: uncached "
                     f"{sp['uncached'].ms()}, cached {sp['cached'].ms()}"
                     + protocol.warning_line(w))
    return "\n".join(lines)


# --- the chapter's claims: how each is measured and judged --------------------------------------
def measure_for_claims(smoke: bool) -> dict:
    """The measurement every claim below is judged on (``claims.run_all``): token counts on
    the simulated clock, and the timed turns on the wall clock (01-later-turns)."""
    return measure(smoke=smoke)


def judge_assembly(d: dict) -> Verdict:
    c = d["counts"]
    total, typed = sum(c.values()), c["new message"]
    wrapper = c["system prompt"] + c["tool definitions"] + c["memory"]
    v = direction(total / typed, clear=2) if wrapper and c["history"] else FAILS
    return Verdict(v, f"at turn 3 the model reads {total} tokens and the user typed {typed} "
                   f"of them ({pct(typed / total)}); system prompt {c['system prompt']}, tool "
                   f"definitions {c['tool definitions']}, memory {c['memory']}, earlier turns "
                   f"{c['history']}, chat-template markup {c['template']} (token counts, "
                   "SmolLM2's tokenizer)", measured=f"{typed} of {total} tokens typed",
                   points=(*((k, c[k]) for k in c), ("prompt at turn 3", total, "total")),
                   unit="tokens at turn 3", clock=COUNTS, chart="stack")


def judge_stateless(d: dict) -> Verdict:
    off, on = d["runs"]["uncached · sim"], d["runs"]["cached · sim"]
    redo = all(r["computed_tokens"] == r["prompt_tokens"] for r in off)
    grows = all(b["prompt_tokens"] > a["prompt_tokens"] for a, b in zip(off, off[1:]))
    last, last_on = off[-1], on[-1]
    t_off = sum(r["computed_tokens"] for r in off)
    t_on = sum(r["computed_tokens"] for r in on)
    v = direction(t_off / t_on, clear=2) if redo and grows else FAILS
    reason = (f"without a cache every turn computes its whole prompt, which grows turn by turn "
              f"({off[0]['computed_tokens']} tokens at turn 1, {last['computed_tokens']} at turn "
              f"{last['turn']}): {t_off:,} tokens over {len(off)} turns; with prefix caching "
              f"{t_on:,} ({pct(t_on / t_off)}), and turn {last['turn']} finds "
              f"{last['prompt_tokens'] - last_on['computed_tokens']} of its "
              f"{last['prompt_tokens']} tokens in the cache and computes "
              f"{last_on['computed_tokens']} (token counts, SmolLM2's tokenizer)")
    if "wall" in d:
        sp = {a: protocol.Spread(**s) for a, s in d["wall"]["later_turns_ttft"].items()}
        reason += (f"; wall clock, TTFT summed over turns 2+: {sp['uncached'].ms()} uncached "
                   f"vs {sp['cached'].ms()} cached")
    return Verdict(v, reason, measured=f"{t_off:,} vs {t_on:,} tokens, {len(off)} turns",
                   points=(("computed, no cache", t_off), ("computed, prefix cache", t_on)),
                   unit=f"prompt tokens computed over {len(off)} turns", clock=COUNTS,
                   warning=wall_warning(d))


CLAIMS = (
    Claim("01-assembly", "What the model reads is mostly not what the user typed: a system "
          "prompt, tool definitions, memory and the earlier turns are wrapped around the "
          "new message.", f"{ENTER}; {AFTER}", "ch01_prompt_anatomy", measure_for_claims,
          judge_assembly, kind=ILLUSTRATION),
    Claim("01-stateless", "The model keeps nothing between calls, so each turn processes the "
          "whole conversation again, unless a prefix cache keeps the earlier turns' KV.",
          f"{ENTER}; the prefix-cache caveat: {AFTER}", "ch01_prompt_anatomy",
          measure_for_claims, judge_stateless),
    Claim("01-later-turns", "Deep into a conversation the answer starts later: without a "
          "prefix cache every turn prefills the whole conversation again, so the time to the "
          "first token grows turn by turn (to a pause of a second or more).",
          f"{ENTER}; the prefix-cache caveat: {AFTER}", "ch01_prompt_anatomy",
          measure_for_claims, judge_later_turns),
)
