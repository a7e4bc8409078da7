"""Chapter 8: safety classifiers, and what checking the output does to streaming.

Two guard stages around the answer, both run by the real model in the same engine:
* an input classifier reads the user's message before the answer starts: its whole run sits
  in front of the first token (added TTFT);
* an output classifier reads the answer. If nothing may be shown before it is checked, the
  reader waits for the whole answer plus the check ("buffered"). Checking every N tokens lets
  text out in checked pieces ("chunked"): the check runs in the same engine batch as the still
  generating answer (in-flight batching), so it costs less than its own length.

Streaming, chunked checking and buffering are three separate runs of the same message, each
with its own input check, answer and output checks, so each policy's first visible word is
measured, not derived from another run. SmolLM2-135M prompted to answer "yes" or "no" is a
weak classifier; the chapter is about the *cost* of the stages, which is the same for a good
classifier of the same size. Times: the simulated H100 clock (an 8B model's shape priced by
the cost model; deterministic, the same figure every run), and this machine's wall clock
beside it, where a check's prefill costs far more than on a GPU.
"""
from __future__ import annotations

from .. import palette, protocol
from ..verdicts import (ENTER, FAILS, HOLDS, HOLDS_SMALLER, PROJECTION, Claim, Verdict, clock_note,
                        direction, ms, pct, wall_warning, worst, x)

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
COLORS = {"streamed": palette.BLUE, "chunked": palette.BLUISH_GREEN,
          "buffered": palette.VERMILLION}


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
    """Serve one message, for real: the input check, then the answer, shown as generated
    ("streamed", no output check), checked every ``check_every`` tokens ("chunked") or once
    at the end ("buffered"). Returns when each answer token was generated (``made``) and when
    it became visible to the reader under the policy (``visible``), from the message's
    arrival, and how many output checks ran."""
    import inferlab as il
    t0 = eng.now
    t_in = classify(eng, user)[1]
    main = eng.add_request([{"role": "user", "content": user}],
                           il.SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    made, visible, text = [], [], ""
    checks: dict[str, int] = {}          # classifier request id -> tokens it covers
    last_checked, done, num_checks = 0, False, 0
    params = il.SamplingParams(max_tokens=1)
    while not done or checks:
        for o in eng.step():
            now = eng.now - t0
            if o.request_id == main:
                made.append(now)
                text += o.new_text
                done = o.finished
                if policy == "streamed":
                    visible.append(now)
                elif (policy == "chunked" and len(made) - last_checked >= check_every) or done:
                    # the check reads everything so far, the way a moderation call would;
                    # it joins the running batch beside the answer still being generated
                    rid = eng.add_request(classifier_messages(text, "answer"), params)
                    checks[rid], last_checked = len(made), len(made)
                    num_checks += 1
            elif o.request_id in checks and o.finished:
                upto = checks.pop(o.request_id)
                visible += [now] * (upto - len(visible))     # release the checked tokens
    return {"policy": policy, "input_check_s": t_in, "made": made, "visible": visible,
            "first_visible": visible[0], "first_made": made[0], "last_visible": visible[-1],
            "num_checks": num_checks, "text": text}


def _engine(model, clock: str, sim_model: str | None):
    """Prefix caching off: every run computes its prompts from scratch, so the three policies
    start from the same (cold) engine and their times compare."""
    from . import _kit
    kw = dict(clock=clock, sim_model=sim_model) if clock != "wall" else {}
    eng = _kit.engine(model, enable_prefix_caching=False, **kw)
    # One-off costs (numba compiling each batch shape it first meets, mixed prefill+decode
    # batches included) must not land on the first measured policy: warm up with a tiny run.
    run_policy(eng, "Hi", "chunked", 4, 2)
    return eng


def measure(smoke: bool = False, deterministic: bool = False, user: str = USER,
            repeats: int | None = None, model: str | None = None, clock: str = "H100",
            sim_model: str | None = "llama-3-8b") -> dict:
    """Three real runs, one per policy, of the same message on the same model. On the
    simulated clock (default: H100, an 8B model's shape) each run is priced by the cost
    model, so one run per policy tells all and the figure is the same every time. Unless
    ``deterministic``, the three policies also run on this machine's wall clock, interleaved
    (streamed, chunked, buffered, streamed ...): medians and ranges, under a busy check."""
    s = _sizes(smoke)
    eng = _engine(model, clock, sim_model)
    verdicts = [(t, *classify(eng, t)) for t in EXAMPLES[: s["examples"]]]
    runs = {p: run_policy(eng, user, p, s["max_tokens"], s["check_every"]) for p in POLICIES}
    st = runs["streamed"]
    data = {"sizes": dict(s), "clock": eng.clock_name, "model": eng.model_name,
            "verdicts": [{"text": t, "flagged": f, "seconds": sec} for t, f, sec in verdicts],
            "runs": runs, "first_visible": {p: r["first_visible"] for p, r in runs.items()},
            "input_check_s": st["input_check_s"],
            "ttft_after_check_s": st["first_made"] - st["input_check_s"]}
    if not deterministic:
        data["wall"], data["wall_first_visible"], data["wall_input_check"] = _wall(
            model, user, s, repeats or s["repeats"])
    return data


def _wall(model, user: str, s: dict, repeats: int) -> tuple[dict, dict, dict]:
    """The three policies on this machine's wall clock, interleaved, with a busy check."""
    eng = _engine(model, "wall", None)
    res = protocol.compare({p: (lambda p=p: run_policy(eng, user, p, s["max_tokens"],
                                                       s["check_every"])) for p in POLICIES},
                           repeats)
    first = {p: res.spread(p, lambda r: r["first_visible"]).as_dict() for p in POLICIES}
    check = res.spread("streamed", lambda r: r["input_check_s"]).as_dict()
    return {**res.meta(), "model": eng.model_name}, first, check


def figure(data: dict):
    import plotly.graph_objects as go

    from . import _kit
    colors = COLORS
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
    fv, runs = data["first_visible"], data["runs"]
    lines = [f"{protocol.label(data['clock'])}, model {data['model']}, a "
             f"{data['sizes']['max_tokens']}-token answer:",
             f"  input check {data['input_check_s'] * 1e3:.1f} ms before the answer starts "
             f"(the answer's own TTFT after it: {data['ttft_after_check_s'] * 1e3:.1f} ms)"]
    for p in POLICIES:
        r = runs[p]
        lines.append(f"  {p:9} first visible word {fv[p] * 1e3:7.1f} ms, whole answer visible "
                     f"{r['last_visible'] * 1e3:7.1f} ms ({r['num_checks']} output checks)")
    if "wall_first_visible" in data:
        w = data["wall"]
        sp = {p: protocol.Spread(**v) for p, v in data["wall_first_visible"].items()}
        lines.append(f"{w['label']}, model {w['model']}: input check "
                     f"{protocol.Spread(**data['wall_input_check']).ms(0)}; first visible word "
                     + ", ".join(f"{p} {sp[p].ms(0)}" for p in POLICIES)
                     + protocol.warning_line(w))
    return "\n".join(lines)


# --- the chapter's claims: how each is measured and judged --------------------------------------
def measure_for_claims(smoke: bool) -> dict:
    """The measurement every claim below is judged on (``claims.run_all``)."""
    # the simulated clock makes the stages' costs deterministic; SmolLM2 says yes or no
    return measure(smoke=smoke, deterministic=True)


def _wall08(d: dict) -> str:
    """Chapter 8's wall-clock medians, when it ran them, as a clause of a reason."""
    if "wall_first_visible" not in d:
        return ""
    sp = {p: protocol.Spread(**v) for p, v in d["wall_first_visible"].items()}
    return (f"; on this machine's wall clock ({d['wall']['model']}): first visible word "
            + ", ".join(f"{p} {sp[p].ms(0)}" for p in ("streamed", "chunked", "buffered")))


def judge_input_check(d: dict) -> Verdict:
    t_in, t_ans = d["input_check_s"], d["ttft_after_check_s"]
    v = direction((t_in + t_ans) / t_ans, clear=1.25)
    wall = ""
    if "wall_input_check" in d:
        wall = (f"; wall clock ({d['wall']['model']}): input check "
                f"{protocol.Spread(**d['wall_input_check']).ms(0)}")
    return Verdict(v, f"the input check runs before the answer starts: {ms(t_in)} of a "
                   f"{ms(t_in + t_ans)} wait for the first token ({pct(t_in / (t_in + t_ans))}); "
                   f"without it the answer's TTFT is {ms(t_ans)}; model {d['model']} "
                   f"{clock_note(d['clock'])}{wall}", measured=f"+{ms(t_in)} TTFT",
                   points=(("input check", t_in * 1e3), ("answer's own TTFT", t_ans * 1e3)),
                   unit="ms before the first token", clock=d["clock"],
                   warning=wall_warning(d))


def judge_output_check(d: dict) -> Verdict:
    fv, s, runs = d["first_visible"], d["sizes"], d["runs"]
    st, ch, bu = fv["streamed"], fv["chunked"], fv["buffered"]
    recovered = (bu - ch) / (bu - st) if bu > st else 0.0
    v_rec = HOLDS if recovered >= 0.5 else HOLDS_SMALLER if recovered > 0.1 else FAILS
    v = worst(direction(bu / st, clear=2), v_rec) if st < ch < bu else FAILS
    return Verdict(v, f"three runs of the same message: first visible word streamed "
                   f"{ms(st)}, checked every {s['check_every']} tokens {ms(ch)} "
                   f"({runs['chunked']['num_checks']} checks), checked once at the end "
                   f"{ms(bu)} ({x(bu / st)} later than streaming, for a {s['max_tokens']}-token "
                   f"answer); checking in chunks wins back {pct(recovered)} of that delay; "
                   f"model {d['model']} {clock_note(d['clock'])}{_wall08(d)}",
                   measured=f"{x(bu / st)} later when buffered",
                   points=(("streamed", st * 1e3), ("chunked", ch * 1e3), ("buffered", bu * 1e3)),
                   unit="ms to the first visible word", clock=d["clock"],
                   warning=wall_warning(d))


CLAIMS = (
    Claim("08-input-check", "An input safety classifier is an extra model call that sits "
          "in front of the first token.", ENTER, "ch08_safety_streaming", measure_for_claims,
          judge_input_check, kind=PROJECTION),
    Claim("08-output-check", "Holding output until a safety check has read it delays the "
          "first visible word; checking in chunks wins most of streaming back.", ENTER,
          "ch08_safety_streaming", measure_for_claims, judge_output_check, kind=PROJECTION),
)
