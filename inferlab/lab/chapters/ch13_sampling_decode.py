"""Chapter 13: from logits to words, and what each word costs.

The model's last layer gives a score (logit) to every token of its vocabulary; the sampler
turns the scores into probabilities (temperature), may cut the unlikely tail (top-p) and
draws one token, with a random generator that a seed makes repeatable. Greedy decoding
always takes the most likely token. Each drawn token then costs one more decode step, and
the KV cache is what keeps that step cheap: without it every step would recompute the whole
sequence so far; with it, each token's keys and values are kept, at a memory cost per token
set by the model's shape. Finally, the user sees the first token only after the network
has carried the request there and the token back.

The distribution is read from the real model's logits (``next_token_distribution``, through
``inferlab.model.loader``, which shares one loaded copy with the engines), reshaped by the
engine's own sampler filter (``inferlab.model.sampler.filter_logits``).
"""
from __future__ import annotations

from .. import palette
from . import _kit
from ._ch13_costs import (add_cost_panels, costs_summary, decode_lengths, kv_memory_table,
                          kv_saving, network_ttft, wall_decode_lengths)

TITLE = "Sampling, answer length, the KV cache's trade, and the network"
CLAIM = ("The same prompt can give different answers (the sampler draws from the model's "
         "next-token distribution); a longer answer costs more decode steps; the KV cache "
         "trades memory for recomputation; network round trips add to the time to first token "
         "a user perceives.")
PROMPT = [{"role": "user", "content": "Give me one word that describes the sea."}]
TEMPERATURES = (0.5, 1.0, 1.5)
TOP_P = 0.9
ANSWER_TEMPERATURE, ANSWER_TOP_P = 0.8, 0.95
COLORS = {0.5: palette.BLUE, 1.0: palette.BLUISH_GREEN, 1.5: palette.ORANGE}


def sizes(smoke: bool) -> dict:
    if smoke:
        return dict(draws=40, seeds=4, answer_tokens=12, lengths=(8, 32, 128),
                    wall_lengths=(4, 16, 32), kv_prompt=512, kv_answer=16, repeats=2)
    return dict(draws=200, seeds=6, answer_tokens=24, lengths=(8, 32, 128, 512),
                wall_lengths=(8, 32, 128), kv_prompt=1024, kv_answer=64, repeats=3)


def prompt_ids(tok, messages=PROMPT) -> list[int]:
    """The prompt as the engine reads it: chat template, then the assistant's turn opens."""
    from inferlab.core.prompts import to_token_ids
    return to_token_ids(list(messages), tok, len(tok))[0]


def next_token_logits(model: str | None, ids: list[int]):
    """The real model's scores for the token after ``ids``: [vocab] float32. One plain
    forward pass of the loaded transformers model (the same weights the engine runs;
    ``load_model`` is cached, so this shares the engine's copy instead of loading another)."""
    import torch

    from inferlab.model.loader import load_model
    loaded = load_model(model, "float32", "cpu", 0)        # the engine's arguments: one copy
    with torch.inference_mode():
        out = loaded.hf_model(torch.tensor([ids]))
    return out.logits[0, -1].float(), loaded.tokenizer


def next_token_distribution(model: str | None = None, messages=PROMPT, k: int = 8):
    """Top-``k`` next tokens and their probabilities at each temperature, the entropy of each
    distribution, and how many tokens top-p keeps (the engine's sampler filter applied).
    Returns (that dict, the full probability vector at temperature 1)."""
    import torch

    import inferlab as il
    from inferlab.model.sampler import filter_logits
    tok = _kit.tokenizer()
    ids = prompt_ids(tok, messages)
    logits, _ = next_token_logits(model, ids)
    probs, nucleus, entropy = {}, {}, {}
    for t in TEMPERATURES:
        p = torch.softmax(filter_logits(logits, il.SamplingParams(temperature=t)), -1)
        probs[t] = p
        entropy[t] = float(-(p * torch.log2(p.clamp_min(1e-30))).sum())
        kept = filter_logits(logits, il.SamplingParams(temperature=t, top_p=TOP_P))
        nucleus[t] = int(torch.isfinite(kept).sum())
    top = torch.topk(logits, k).indices.tolist()
    return {"prompt_tokens": len(ids), "ids": ids, "vocab": int(logits.numel()),
            "top": [{"id": i, "text": tok.decode([i]), "p": {t: float(probs[t][i])
                                                             for t in TEMPERATURES}}
                    for i in top],
            "entropy": entropy, "nucleus": nucleus, "top_p": TOP_P}, probs[1.0]


def draws(eng, ids: list[int], n: int, p1, top: list[dict]) -> dict:
    """``n`` requests of one token each at temperature 1, seeds 0..n-1, through the engine's
    sampler: how often the model's most likely tokens (``top``) came out, against their
    probabilities."""
    import inferlab as il
    eng.generate([ids], il.SamplingParams(max_tokens=1, temperature=1.0, seed=0),
                 use_tqdm=False)                   # cache the prompt's full blocks first
    outs = eng.generate([ids] * n, [il.SamplingParams(max_tokens=1, temperature=1.0, seed=s)
                                    for s in range(n)], use_tqdm=False)
    drawn = [o.token_ids[0] for o in outs]
    top_ids = [t["id"] for t in top]
    return {"n": n, "distinct": len(set(drawn)),
            "top": [{"id": i, "text": t["text"], "drawn": drawn.count(i) / n, "p": float(p1[i])}
                    for i, t in zip(top_ids, top)],
            "top_drawn": sum(t in top_ids for t in drawn) / n,
            "top_p": float(sum(float(p1[i]) for i in top_ids))}


def answers(eng, ids: list[int], seeds: int, max_tokens: int) -> dict:
    """The same prompt, sampled with ``seeds`` different seeds, seed 0 again, and greedy
    twice, all in one batch: how many different answers come out."""
    import inferlab as il
    sampled = [il.SamplingParams(max_tokens=max_tokens, temperature=ANSWER_TEMPERATURE,
                                 top_p=ANSWER_TOP_P, seed=s) for s in range(seeds)]
    again = il.SamplingParams(max_tokens=max_tokens, temperature=ANSWER_TEMPERATURE,
                              top_p=ANSWER_TOP_P, seed=0)
    greedy = il.SamplingParams(max_tokens=max_tokens)
    outs = eng.generate([ids] * (seeds + 3), sampled + [again, greedy, greedy], use_tqdm=False)
    texts = [o.text for o in outs]
    return {"seeded": texts[:seeds], "seed0_again": texts[seeds], "greedy": texts[-2:],
            "distinct": len(set(texts[:seeds])), "seeds": seeds,
            "repeatable": texts[seeds] == texts[0], "greedy_same": texts[-2] == texts[-1],
            "temperature": ANSWER_TEMPERATURE, "top_p": ANSWER_TOP_P}


def measure(smoke: bool = False, deterministic: bool = False, model: str | None = None,
            repeats: int | None = None) -> dict:
    """Sampling on ``model`` (the real SmolLM2 by default; seeded, so deterministic); decode
    length, the KV cache's saving and the network on the tiny model and the simulated H100
    clock (counts and priced times, the same every run); unless ``deterministic``, decode
    length also on this machine's wall clock."""
    _kit.seed_everything(0)
    s = sizes(smoke)
    dist, p1 = next_token_distribution(model)
    eng = _kit.engine(model, enable_prefix_caching=True)
    data = {"sizes": s, "model": eng.model_name, "clock_sim": _kit.SIM_LABEL,
            "distribution": dist,
            "draws": draws(eng, dist["ids"], s["draws"], p1, dist["top"]),
            "answers": answers(eng, dist["ids"], s["seeds"], s["answer_tokens"]),
            "decode": decode_lengths(s["lengths"]),
            "kv": {"saving": kv_saving(s["kv_prompt"], s["kv_answer"]),
                   "memory": kv_memory_table()},
            "network": network_ttft()}
    if not deterministic:
        wall_model = "tiny-smollm2" if smoke else model
        data["decode_wall"] = wall_decode_lengths(wall_model, s["wall_lengths"],
                                                  repeats or s["repeats"])
    return data


def summary(data: dict) -> str:
    d, a, dr = data["distribution"], data["answers"], data["draws"]
    top = d["top"][0]
    lines = [f"next token after a {d['prompt_tokens']}-token prompt ({data['model']}): "
             f"most likely {top['text']!r} with p = "
             + ", ".join(f"{top['p'][t]:.0%} at T={t}" for t in TEMPERATURES)
             + "; top-p " + f"{d['top_p']} keeps "
             + ", ".join(f"{d['nucleus'][t]}" for t in TEMPERATURES) + " tokens; entropy "
             + ", ".join(f"{d['entropy'][t]:.1f}" for t in TEMPERATURES) + " bits",
             f"{dr['n']} seeded draws at T=1 through the engine's sampler: {dr['distinct']} "
             f"different tokens; the {len(dr['top'])} most likely tokens (p = {dr['top_p']:.0%} "
             f"together) came out {dr['top_drawn']:.0%} of the time; "
             + ", ".join(f"{t['text']!r} {t['drawn']:.0%} (p {t['p']:.0%})" for t in dr["top"][:3]),
             f"{a['seeds']} seeds at T={a['temperature']}, top-p {a['top_p']}: {a['distinct']} "
             f"different answers; seed 0 again gives the same answer: {a['repeatable']}; "
             f"greedy twice the same: {a['greedy_same']}"]
    return "\n".join(lines + costs_summary(data))


def answers_html(data: dict) -> str:
    import html
    a = data["answers"]
    rows = [(f"seed {i}", t) for i, t in enumerate(a["seeded"])]
    rows += [("seed 0 again", a["seed0_again"]), ("greedy", a["greedy"][0]),
             ("greedy again", a["greedy"][1])]
    body = "".join(f"<tr><td style='padding:2px 8px;white-space:nowrap'>{html.escape(k)}</td>"
                   f"<td style='padding:2px 8px'>{html.escape(t)}</td></tr>" for k, t in rows)
    return f"<table style='font-size:12px'>{body}</table>"


def figure(data: dict):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    d = data["distribution"]
    fig = make_subplots(rows=2, cols=2, vertical_spacing=0.2, horizontal_spacing=0.1,
                        subplot_titles=(f"next-token probability ({data['model']})",
                                        "decode steps and time vs answer length",
                                        "tokens pushed through the model, with and without "
                                        "the KV cache", "time to first token as the user sees it"))
    labels = [repr(t["text"]) for t in d["top"]]
    for t in TEMPERATURES:
        fig.add_trace(go.Bar(x=labels, y=[e["p"][t] for e in d["top"]],
                             name=f"temperature {t} (top-p {d['top_p']} keeps "
                                  f"{d['nucleus'][t]})", marker_color=COLORS[t]), 1, 1)
    fig.update_yaxes(title_text="probability", row=1, col=1)
    add_cost_panels(fig, data)
    fig.update_layout(barmode="group", height=760)
    return _kit.style(fig, TITLE, f"{data['clock_sim']} for times; probabilities and counts "
                      "from the model")
