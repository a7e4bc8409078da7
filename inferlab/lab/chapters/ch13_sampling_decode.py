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

from .. import measure_cache, palette
from ..verdicts import (AFTER, COUNTS, FAILS, HOLDS, ILLUSTRATION, LABS_OWN, NUCLEUS, Claim,
                        Verdict, clock_note, direction, ms, no_wall_run, pct, x)
from . import _ch13_figures, _kit
from ._ch13_costs import (HANDSHAKE_RTTS, NETWORK_PROMPTS, NETWORK_PROMPTS_SMOKE,
                          costs_summary, decode_lengths, judge_decode_length, judge_kv_tradeoff,
                          kv_memory_table, kv_saving, network_ttft, wall_decode_lengths,
                          wall_kv_saving)
from ._ch13_near import PAIRS as NEAR_PAIRS  # noqa: F401 (the pairs, for the notebook)
from ._ch13_near import judge_near_prompts, measure_near, near_figure, near_table  # noqa: F401
from ._ch13_network import RTTS, measure_network, network_lines

TITLE = "Sampling, answer length, the KV cache's trade, and the network"
CLAIM = ("The same prompt can give different answers (the sampler draws from the model's "
         "next-token distribution); a longer answer costs more decode steps; the KV cache "
         "trades memory for recomputation; network round trips add to the time to first token "
         "a user perceives.")
PROMPT = [{"role": "user", "content": "Give me one word that describes the sea."}]
TEMPERATURES = (0.5, 1.0, 1.5)
TOP_P = 0.9
ANSWER_TEMPERATURE, ANSWER_TOP_P = 0.8, 0.95
# a temperature is an ordered quantity: one grey scale, hotter darker (palette.sequence)
COLORS = dict(zip(TEMPERATURES, palette.sequence(len(TEMPERATURES))))


def sizes(smoke: bool) -> dict:
    if smoke:
        return dict(draws=40, seeds=4, answer_tokens=12, lengths=(8, 32, 128),
                    wall_lengths=(4, 16, 32), kv_prompt=512, kv_answer=16, kv_wall_prompt=256,
                    repeats=2, network_prompts=NETWORK_PROMPTS_SMOKE)
    return dict(draws=200, seeds=6, answer_tokens=24, lengths=(8, 32, 128, 512),
                wall_lengths=(8, 32, 128), kv_prompt=1024, kv_answer=64, kv_wall_prompt=512,
                repeats=3, network_prompts=NETWORK_PROMPTS)


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


def answers(eng, ids: list[int], seeds: int, max_tokens: int,
            temperature: float = ANSWER_TEMPERATURE) -> dict:
    """The same prompt, sampled with ``seeds`` different seeds, seed 0 again, and greedy
    twice, all in one batch: how many different answers come out."""
    import inferlab as il
    sampled = [il.SamplingParams(max_tokens=max_tokens, temperature=temperature,
                                 top_p=ANSWER_TOP_P, seed=s) for s in range(seeds)]
    again = il.SamplingParams(max_tokens=max_tokens, temperature=temperature,
                              top_p=ANSWER_TOP_P, seed=0)
    greedy = il.SamplingParams(max_tokens=max_tokens)
    outs = eng.generate([ids] * (seeds + 3), sampled + [again, greedy, greedy], use_tqdm=False)
    texts = [o.text for o in outs]
    return {"seeded": texts[:seeds], "seed0_again": texts[seeds], "greedy": texts[-2:],
            "distinct": len(set(texts[:seeds])), "seeds": seeds,
            "repeatable": texts[seeds] == texts[0], "greedy_same": texts[-2] == texts[-1],
            "temperature": temperature, "top_p": ANSWER_TOP_P}


@measure_cache.shared
def measure(smoke: bool = False, deterministic: bool = False, model: str | None = None,
            repeats: int | None = None, temperature: float = ANSWER_TEMPERATURE,
            lengths=None, kv_arms=("with", "without"), rtts=RTTS, near_pairs=None) -> dict:
    """Sampling on ``model`` (the real SmolLM2 by default; seeded, so deterministic), and
    nearly identical prompts answered greedily and seeded (``near_pairs``: (change, original,
    variant), default ``NEAR_PAIRS``); decode
    length, the KV cache's saving and the network on SmolLM2 and the simulated H100
    clock (counts and priced times, the same every run); unless ``deterministic``, decode
    length and the KV cache's saving also on this machine's wall clock (what their claims are
    judged on), and the network through the lab's OpenAI server, a real client and a loopback
    proxy adding ``rtts`` of round trip. ``lengths`` (say, the same twice), ``kv_arms``
    (("without", "without")), ``rtts`` ((0.0,)) and ``near_pairs`` (each prompt paired with
    itself) remove the claims' effects for their falsification tests."""
    _kit.seed_everything(0)
    s = sizes(smoke)
    dist, p1 = next_token_distribution(model)
    eng = _kit.engine(model, enable_prefix_caching=True)
    data = {"sizes": s, "model": eng.model_name, "clock_sim": _kit.SIM_LABEL,
            "distribution": dist,
            "draws": draws(eng, dist["ids"], s["draws"], p1, dist["top"]),
            "answers": answers(eng, dist["ids"], s["seeds"], s["answer_tokens"], temperature),
            "near": measure_near(eng, _kit.tokenizer(), smoke, near_pairs)}
    del eng     # its KV cache goes before the next engines write theirs (a 2 GB Binder pod)
    data.update(decode=decode_lengths(lengths or s["lengths"]),
                kv={"saving": kv_saving(s["kv_prompt"], s["kv_answer"], kv_arms),
                    "memory": kv_memory_table()},
                network=network_ttft(s["network_prompts"]))
    if not deterministic:
        r = repeats or s["repeats"]
        data["decode_wall"] = wall_decode_lengths(model, lengths or s["wall_lengths"], r)
        data["kv"]["wall"] = wall_kv_saving(model, s["kv_wall_prompt"], s["kv_answer"], r,
                                            kv_arms)
        data["network_wall"] = measure_network(model, r, rtts)
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
    net = network_lines(data["network_wall"]) if "network_wall" in data else []
    return "\n".join(lines + costs_summary(data) + net)


def answers_table(data: dict) -> str:
    """The answers (seeded, the first seed again, greedy twice) as a Markdown table."""
    from ._display import md_table
    a = data["answers"]
    rows = [(f"seed {i}", t) for i, t in enumerate(a["seeded"])]
    rows += [("seed 0 again", a["seed0_again"]), ("greedy", a["greedy"][0]),
             ("greedy again", a["greedy"][1])]
    return md_table(["run", "answer"], [[k, t] for k, t in rows])


def figures(data: dict) -> dict:
    """The chapter's figures, one point each (``_ch13_figures``): the next-token odds and the
    sampler's draws (the main one), nearly identical prompts, answer length, the KV cache's
    trade, the network."""
    return {"": figure(data), "near": near_figure(data),
            "length": _ch13_figures.length_figure(data),
            "kv": _ch13_figures.kv_figure(data),
            "network": _ch13_figures.network_figure(
                data, sorted({r["prompt"] for r in data["network"]}), HANDSHAKE_RTTS)}


def figure(data: dict):
    """The main figure: the same prompt's next-token odds at each temperature, and how often
    the engine's seeded sampler drew each token."""
    return _ch13_figures.sampling_figure(data, TEMPERATURES, COLORS, PROMPT[-1]["content"])


# --- the chapter's claims: how each is measured and judged --------------------------------------
def measure_for_claims(smoke: bool) -> dict:
    """The measurement every claim below is judged on (``claims.run_all``)."""
    # seeded sampling (counts) of SmolLM2's distribution; decode length and the KV cache on
    # the wall clock (their steps also priced on the simulated H100 clock, a projection)
    return measure(smoke=smoke)


def judge_sampling(d: dict) -> Verdict:
    a, dist, dr = d["answers"], d["distribution"], d["draws"]
    nuc = dist["nucleus"]
    temps = sorted(nuc, key=float)
    widens = all(nuc[t0] <= nuc[t1] for t0, t1 in zip(temps, temps[1:]))
    ok = a["distinct"] >= 2 and a["repeatable"] and a["greedy_same"] and widens
    v = HOLDS if ok else FAILS
    top = dist["top"][0]
    lo, hi = temps[0], temps[-1]
    return Verdict(v, f"{a['seeds']} seeds at temperature {a['temperature']} gave "
                   f"{a['distinct']} different answers to the same prompt; seed 0 again "
                   f"{'repeated' if a['repeatable'] else 'did not repeat'} its answer and greedy "
                   f"decoding twice gave {'the same' if a['greedy_same'] else 'different'} text. "
                   f"The next-token distribution ({d['model']}): {top['text']!r} has p = "
                   f"{pct(top['p'][lo])} at T={lo} and {pct(top['p'][hi])} at T={hi}; top-p "
                   f"{dist['top_p']} keeps {nuc[lo]} vs {nuc[hi]} of {dist['vocab']} tokens; "
                   f"{dr['n']} seeded draws hit the {len(dr['top'])} likeliest tokens "
                   f"{pct(dr['top_drawn'])} of the time (their p: {pct(dr['top_p'])}) (counts)",
                   measured=f"{a['distinct']} of {a['seeds']} answers differ",
                   points=tuple((f"T={t}", nuc[t]) for t in temps),
                   unit=f"tokens kept by top-p {dist['top_p']}", clock=COUNTS, axis="log")


def _network_projection(d: dict) -> str:
    """The simulated table's farthest warm row, as the projection clause of a reason."""
    warm = [r for r in d["network"] if not r["new_connection"]]
    short = min(r["prompt"] for r in warm)
    far = max((r for r in warm if r["prompt"] == short), key=lambda r: r["rtt"])
    cold = next(r for r in d["network"] if r["new_connection"] and r["prompt"] == short
                and r["rtt"] == far["rtt"])
    return (f"projection {clock_note(d['clock_sim'])}: a {short}-token prompt served in "
            f"{ms(far['server'])} is seen {far['rtt'] * 1e3:.0f} ms away after "
            f"{ms(far['perceived'])}, {ms(cold['perceived'])} on a new connection (TCP and TLS "
            "handshakes first)")


def judge_network(d: dict) -> Verdict:
    """The client's TTFT through the farthest proxy against the engine's own TTFT for the
    same requests (wall clock, interleaved); what HTTP and streaming cost is the direct
    arm's client TTFT minus the engine's. The proxy's delay is constructed; the waits are
    measured."""
    if "network_wall" not in d:
        return no_wall_run("the network claim is judged on a real client of the lab's "
                           f"server only; {_network_projection(d)}")
    net = d["network_wall"]
    direct, far = net["rows"][0], net["rows"][-1]
    client, engine = far["client"]["median"], far["engine"]["median"]
    v = direction(client / engine, clear=1.5)
    return Verdict(v, f"a real client streaming from the lab's OpenAI server saw its first "
                   f"token after {ms(direct['client']['median'])} on 127.0.0.1, of it "
                   f"{ms(direct['between']['median'])} HTTP and streaming outside the engine; "
                   f"through a proxy adding {far['rtt'] * 1e3:.0f} ms of round trip "
                   f"(constructed) it waited {ms(client)} for an engine TTFT of {ms(engine)} "
                   f"({x(client / engine)}; {ms(far['between']['median'])} outside the engine) "
                   f"on this machine's wall clock ({net['model']}, medians of {net['repeats']} "
                   f"interleaved repeats); {_network_projection(d)}",
                   measured=f"{x(client / engine)} the engine's TTFT",
                   points=tuple((r["arm"], r["client"]["median"] * 1e3) for r in net["rows"]),
                   unit="client TTFT (ms)", clock=net["label"], warning=net.get("warning"))


CLAIMS = (
    Claim("13-sampling", "The same prompt can give different answers: the model gives a "
          "probability to every possible next token and the sampler draws from it; "
          "temperature and top-p reshape the draw, and a fixed seed repeats it.",
          f"{AFTER} (different answers); temperature and top-p: {NUCLEUS}; the seed: {LABS_OWN}",
          "ch13_sampling_decode", measure_for_claims, judge_sampling),
    Claim("13-near-prompts", "Two nearly identical prompts, differing by a word or a space, "
          "can get different answers: they are different token sequences, so the model's "
          "next-token scores differ, and once one output token differs the answers part.",
          AFTER, "ch13_sampling_decode", measure_for_claims, judge_near_prompts),
    Claim("13-decode-length", "Output is generated one token per step, so a longer answer "
          "takes more decode steps and more time.", AFTER, "ch13_sampling_decode",
          measure_for_claims, judge_decode_length),
    Claim("13-kv-tradeoff", "The KV cache keeps earlier tokens' keys and values so they are "
          "not recomputed at every step, at the price of memory that grows with every token.",
          AFTER, "ch13_sampling_decode", measure_for_claims, judge_kv_tradeoff),
    # an illustration: the round trip is the lab's own proxy delay (constructed), so the ratio
    # follows from how the example was built; the HTTP and streaming cost beside it is measured
    Claim("13-network", "What a user perceives as speed is not inference alone: network "
          "round trips add to the time before the first word.", AFTER,
          "ch13_sampling_decode", measure_for_claims, judge_network, kind=ILLUSTRATION),
)
