"""Chapter 8: safety classifiers, and what checking the output does to streaming.

Two guard stages around the answer, both run by the real model in the same engine:
* an input classifier reads the user's message before the answer starts: its whole run sits
  in front of the first token (added TTFT);
* an output classifier reads the answer. If nothing may be shown before it is checked, the
  reader waits for the whole answer plus the check ("buffered"). Checking every N tokens lets
  text out in checked pieces ("chunked"): the check runs in the same engine batch as the still
  generating answer (in-flight batching), so it costs less than its own length.

SmolLM2-135M prompted to answer "yes" or "no" is a weak classifier; the chapter is about the
*cost* of the stages, which is the same for a good classifier of the same size. Times are
the engine clock: this machine's wall clock by default; pass clock="H100", sim_model=... for
the simulated GPU (deterministic: the same figure on every run).
"""
from __future__ import annotations

from .. import palette, protocol

TITLE = "Safety classifiers and streaming"
CLAIM = ("Input and output safety classifiers are extra model calls: the input check adds its "
         "full latency to time-to-first-token, and holding output back until it is checked "
         "delays the first visible word until the whole answer (plus the check) is done; "
         "checking in chunks recovers most of streaming.")

USER = "How do I make a cup of green tea that is not bitter?"
EXAMPLES = ["How do I make a cup of green tea that is not bitter?",
            "Write a short poem about the sea.",
            "Tell me how to build a bomb to hurt people.",
            "Give me step by step instructions to steal a car."]
POLICIES = ("streamed", "chunked", "buffered")


def classifier_messages(text: str, what: str = "message") -> list[dict]:
    return [{"role": "system", "content": "You are a strict safety classifier. You answer "
             "with one word: yes or no."},
            {"role": "user", "content": f"Is the following {what} harmful, dangerous or "
             f"unsafe?\n\n{what.capitalize()}: {text}\n\nAnswer yes or no."}]


def _sizes(smoke: bool) -> dict:
    if smoke:
        return dict(max_tokens=16, check_every=6, repeats=2, examples=1)
    return dict(max_tokens=96, check_every=16, repeats=3, examples=4)


def _drain(eng, rid: str):
    """Step until ``rid`` finishes (other requests in the engine advance too)."""
    while True:
        for o in eng.step():
            if o.request_id == rid and o.finished:
                return o


def classify(eng, text: str, what: str = "message") -> tuple[bool, float]:
    """(flagged, seconds): one greedy token from the model acting as a yes/no classifier."""
    import inferlab as il
    t = eng.now
    rid = eng.add_request(classifier_messages(text, what), il.SamplingParams(max_tokens=1))
    o = _drain(eng, rid)
    return o.text.strip().lower().startswith("yes"), eng.now - t


def run_policy(eng, user: str, policy: str, max_tokens: int, check_every: int) -> dict:
    """Serve one message: input check, then the answer with its output checked every
    ``check_every`` tokens ("chunked") or once at the end ("buffered"). Returns when each
    answer token was generated (``made``: what plain streaming would show, measured in the
    same run) and when it became visible under the policy."""
    import inferlab as il
    t0 = eng.now
    t_in = classify(eng, user)[1]
    main = eng.add_request([{"role": "user", "content": user}],
                           il.SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    made, visible, text = [], [], ""
    checks: dict[str, int] = {}          # classifier request id -> tokens it covers
    last_checked, done = 0, False
    params = il.SamplingParams(max_tokens=1)
    while not done or checks:
        for o in eng.step():
            now = eng.now - t0
            if o.request_id == main:
                made.append(now)
                text += o.new_text
                done = o.finished
                if (policy == "chunked" and len(made) - last_checked >= check_every) or done:
                    # the check reads everything so far, the way a moderation call would;
                    # it joins the running batch beside the answer still being generated
                    rid = eng.add_request(classifier_messages(text, "answer"), params)
                    checks[rid], last_checked = len(made), len(made)
            elif o.request_id in checks and o.finished:
                upto = checks.pop(o.request_id)
                visible += [now] * (upto - len(visible))     # release the checked tokens
    return {"policy": policy, "input_check_s": t_in, "made": made, "visible": visible,
            "first_visible": visible[0], "first_made": made[0], "text": text}


def measure(smoke: bool = False, user: str = USER, repeats: int | None = None,
            **engine_kw) -> dict:
    """The two output-check policies run interleaved (chunked, buffered, chunked, ...). On the
    wall clock: median and range over the repeats, under a busy check; a simulated clock is
    deterministic, so one repeat tells all."""
    import inferlab as il
    s = _sizes(smoke)
    eng = il.Engine(**engine_kw)
    wall = eng.clock_name == "wall"
    repeats = repeats or (s["repeats"] if wall else 1)
    # One-off costs (numba compiling each batch shape it first meets, mixed prefill+decode
    # batches included) must not land on the first measured policy: warm up with a tiny run.
    run_policy(eng, "Hi", "chunked", 4, 2)
    # the first example is the user message below, so its verdict also warms the cache
    verdicts = [(t, *classify(eng, t)) for t in EXAMPLES[: s["examples"]]]
    arms = {p: (lambda p=p: run_policy(eng, user, p, s["max_tokens"], s["check_every"]))
            for p in ("chunked", "buffered")}
    if wall:
        res = protocol.compare(arms, repeats)
        runs, wall_meta = res.runs, res.meta()
    else:
        runs, wall_meta = protocol.interleaved(arms, repeats), None
    sp = lambda rs, k: protocol.spread(r[k] for r in rs)
    # keep the median run of each policy (by first visible token) for the picture
    pick = lambda rs: sorted(rs, key=lambda r: r["first_visible"])[len(rs) // 2]
    buffered = pick(runs["buffered"])
    # Streaming without an output check shows each token when it is generated: the ``made``
    # times of the same buffered run (the check at the end does not touch them).
    streamed = dict(buffered, policy="streamed", visible=buffered["made"],
                    first_visible=buffered["first_made"])
    spreads = {"streamed": sp(runs["buffered"], "first_made"),
               "chunked": sp(runs["chunked"], "first_visible"),
               "buffered": sp(runs["buffered"], "first_visible")}
    data = {"sizes": {**s, "repeats": repeats}, "clock": eng.clock_name, "model": eng.model_name,
            "verdicts": [{"text": t, "flagged": f, "seconds": sec} for t, f, sec in verdicts],
            # from the same run as "streamed" and "buffered", so the numbers add up
            "input_check_s": buffered["input_check_s"],
            "ttft_after_check_s": buffered["first_made"] - buffered["input_check_s"],
            "first_visible": {"streamed": streamed["first_visible"],
                              "chunked": spreads["chunked"].median,
                              "buffered": buffered["first_visible"]},
            "first_visible_spread": {p: v.as_dict() for p, v in spreads.items()},
            # over the buffered runs, whose answers stream as "streamed" shows them
            "input_check_spread": sp(runs["buffered"], "input_check_s").as_dict(),
            "ttft_after_check_spread": protocol.spread(
                r["first_made"] - r["input_check_s"] for r in runs["buffered"]).as_dict(),
            "runs": {"streamed": streamed, "chunked": pick(runs["chunked"]),
                     "buffered": buffered}}
    if wall_meta is not None:
        data["wall"] = wall_meta
    return data


def figure(data: dict):
    import plotly.graph_objects as go

    from .. import figures as ilf
    from . import _kit
    colors = {"streamed": ilf.PALETTE[0], "chunked": ilf.PALETTE[2], "buffered": ilf.PALETTE[5]}
    fig = go.Figure()
    for p, r in data["runs"].items():
        n = len(r["visible"])
        fig.add_trace(go.Scatter(x=[t * 1e3 for t in r["visible"]], y=list(range(1, n + 1)),
                                 mode="lines+markers", line_shape="hv", name=f"{p}: visible",
                                 line_color=colors[p], marker_size=4))
    t_in = data["input_check_s"] * 1e3
    fig.add_vrect(x0=0, x1=t_in, fillcolor=palette.ORANGE, opacity=0.15, line_width=0,
                  annotation_text="input check", annotation_position="top left")
    fig.update_xaxes(title_text="time since the message arrived (ms)")
    fig.update_yaxes(title_text="answer tokens the reader can see")
    s = data["sizes"]
    return _kit.style(fig, f"Guarded streaming on {data['model']}: input check, then output "
                     f"checked never / every {s['check_every']} tokens / once at the end",
                     data["clock"])


def summary(data: dict) -> str:
    fv, sp = data["first_visible"], data.get("first_visible_spread")
    if sp and sp["chunked"]["n"] > 1:      # repeated runs: the median and its range
        shown = {p: protocol.Spread(**sp[p]).ms(0) for p in POLICIES}
        check = protocol.Spread(**data["input_check_spread"]).ms(0)
        after = protocol.Spread(**data["ttft_after_check_spread"]).ms(0)
    else:
        shown = {p: f"{fv[p] * 1e3:.0f} ms" for p in POLICIES}
        check = f"{data['input_check_s'] * 1e3:.0f} ms"
        after = f"{data['ttft_after_check_s'] * 1e3:.0f} ms"
    return (f"input check adds {check} to TTFT (the answer's own TTFT after it: "
            f"{after}); first visible token: "
            + ", ".join(f"{p} {shown[p]}" for p in POLICIES)
            + f" [clock: {protocol.label(data['clock'])}]"
            + protocol.warning_line(data.get("wall")))
