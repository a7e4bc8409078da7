"""Chapter 13, second half: what each generated token costs.

* answer length: one engine step per output token (the first comes out of the prefill step),
  counted, and priced on the simulated clock (and timed on this machine's wall clock);
* the KV cache: the tokens pushed through the model to write one answer, with the cache and
  without it (every step re-sends the whole sequence so far, as a cache-less server must),
  against the memory a cached token takes, per model shape;
* the network: a simulated client whose request and first token each cross a network with a
  round-trip time of 0, 50 or 150 ms, added to the TTFT the engine measures.

Their figures are drawn in ``_ch13_figures``.
"""
from __future__ import annotations

import numpy as np

from .. import palette, protocol
from ..verdicts import FAILS, Verdict, clock_note, direction, on_wall, ms, no_wall_run, worst, x
from . import _kit

NETWORK_RTTS = (0.0, 0.05, 0.15)          # seconds: same city, across a continent, intercontinental
NETWORK_PROMPTS = (256, 4096)
# a smoke run's long prompt: half, so its KV cache fits a 2 GB Binder pod beside the rest
NETWORK_PROMPTS_SMOKE = (256, 2048)
HANDSHAKE_RTTS = 2                        # a new HTTPS connection: TCP, then TLS 1.3
KV_MODELS = ("smollm2-135m", "llama-3.2-1b", "llama-3-8b", "qwen2-7b", "llama-3-70b")
GPU_MEMORY = 80e9                         # bytes: one 80 GB GPU (H100)


def _ids(n: int, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(3, 49152, size=n).tolist()


def _sim_engine(**kw):
    return _kit.engine(None, enable_prefix_caching=False, **_kit.SIM, **kw)


def decode_lengths(lengths, prompt_len: int = 128) -> list[dict]:
    """One request at a time, answers of each length (EOS ignored), on the simulated clock:
    engine steps taken and the times."""
    import inferlab as il
    eng = _sim_engine()
    rows = []
    for n in lengths:
        before = eng.stats().num_steps
        m = eng.generate([_ids(prompt_len)], il.SamplingParams(max_tokens=n, ignore_eos=True),
                         use_tqdm=False)[0].metrics
        rows.append({"max_tokens": n, "output_tokens": m.num_output_tokens,
                     "steps": eng.stats().num_steps - before, "ttft": m.ttft, "e2e": m.e2e,
                     "decode": m.e2e - m.ttft})
    return rows


def wall_decode_lengths(model, lengths, repeats: int, prompt_len: int = 32) -> dict:
    """The same on this machine's wall clock, lengths interleaved, under a busy check."""
    import inferlab as il
    eng = _kit.engine(model, enable_prefix_caching=False)
    _kit.warm_up(eng)
    one = lambda n: eng.generate([_ids(prompt_len)], il.SamplingParams(
        max_tokens=n, ignore_eos=True), use_tqdm=False)[0].metrics.e2e
    res = protocol.compare({str(n): (lambda n=n: one(n)) for n in lengths}, repeats)
    rows = [{"max_tokens": int(n), **{k: v for k, v in zip(("e2e", "lo", "hi"), (
        res.spread(n).median, res.spread(n).lo, res.spread(n).hi))}} for n in res.runs]
    return {**res.meta(), "rows": rows, "model": eng.model_name}


def kv_saving(prompt_len: int, answer_len: int, arms=("with", "without")) -> dict:
    """Write one answer twice on SmolLM2 and the simulated clock: once with the KV
    cache (the prompt once, then one new token per step), once without (each step sends
    prompt + answer so far as a new request, prefix caching off, and computes all of it).
    Counts every token the model processes, and whether the answers agree."""
    import inferlab as il
    eng = _sim_engine()
    pushed = []
    eng.subscribe(lambda rec: pushed.append(rec.num_batched_tokens))
    prompt = _ids(prompt_len, seed=1)
    t0 = eng.now
    cached = _one_answer(eng, prompt, answer_len, cache=arms[0] == "with")
    with_cache = {"tokens": sum(pushed), "steps": len(pushed), "time": eng.now - t0}
    pushed.clear()
    t0 = eng.now
    answer = _one_answer(eng, prompt, answer_len, cache=arms[1] == "with")
    without = {"tokens": sum(pushed), "steps": len(pushed), "time": eng.now - t0}
    same = sum(a == b for a, b in zip(answer, cached))
    return {"prompt": prompt_len, "answer": answer_len, "with": with_cache,
            "without": without, "same_tokens": same,
            "formula_without": answer_len * prompt_len + answer_len * (answer_len - 1) // 2,
            "formula_with": prompt_len + answer_len - 1}


def _one_answer(eng, prompt: list[int], answer_len: int, cache: bool) -> list[int]:
    """One answer, with the KV cache (one request: the prompt once, then a token a step) or
    without it (a new request per token, re-sending prompt + answer so far: a cache-less
    server's work, prefix caching off)."""
    import inferlab as il
    if cache:
        return eng.generate([prompt], il.SamplingParams(max_tokens=answer_len, ignore_eos=True),
                            use_tqdm=False)[0].token_ids
    answer: list[int] = []
    for _ in range(answer_len):
        answer.append(eng.generate([prompt + answer], il.SamplingParams(
            max_tokens=1, ignore_eos=True), use_tqdm=False)[0].token_ids[0])
    return answer


def wall_kv_saving(model, prompt_len: int, answer_len: int, repeats: int,
                   arms=("with", "without")) -> dict:
    """The KV cache's saving on this machine's wall clock: the same answer written with and
    without the cache, interleaved (with, without, with ...), under a busy check.
    ``arms=("without", "without")`` removes the effect (the falsification test)."""
    eng = _kit.engine(model, enable_prefix_caching=False)
    _kit.warm_up(eng)
    prompt = _ids(prompt_len, seed=1)
    answers: dict = {}

    def run(name, cache):
        t0 = eng.now
        answers[name] = _one_answer(eng, prompt, answer_len, cache)
        return eng.now - t0
    res = protocol.compare({"with": lambda: run("with", arms[0] == "with"),
                            "without": lambda: run("without", arms[1] == "with")}, repeats)
    same = sum(a == b for a, b in zip(answers["with"], answers["without"]))
    return {**res.meta(), "model": eng.model_name, "prompt": prompt_len, "answer": answer_len,
            "with": res.spread("with").as_dict(), "without": res.spread("without").as_dict(),
            "same_tokens": same, "arms": list(arms),
            # the price as this engine pays it: its cache's bytes per token, in its dtype
            "kv_bytes_per_token": eng.runner.kv_bytes_per_token, "dtype": eng.config.dtype}


def kv_memory_table(dtype_bytes: int = 2) -> list[dict]:
    """KV bytes per token for each model shape (bf16), what a 4k-token conversation takes,
    and how many tokens of KV fit on one 80 GB GPU beside the weights."""
    from inferlab.core.shapes import kv_bytes_per_token, model_shape, weight_bytes
    rows = []
    for name in KV_MODELS:
        s = model_shape(name)
        per = kv_bytes_per_token(s, dtype_bytes)
        free = GPU_MEMORY - weight_bytes(s, dtype_bytes)
        rows.append({"model": name, "kv_bytes_per_token": per, "per_4k_mb": 4096 * per / 2 ** 20,
                     "weights_gb": weight_bytes(s, dtype_bytes) / 1e9,
                     "tokens_on_80gb": int(free // per) if free > 0 else 0})
    return rows


def network_ttft(prompts=NETWORK_PROMPTS, rtts=NETWORK_RTTS) -> list[dict]:
    """Each prompt sent by a simulated client at each round-trip time: the request reaches
    the engine half a round trip after it leaves (plus the handshakes' round trips on a new
    connection), the engine runs it (simulated H100 clock), and the first token reaches the
    client half a round trip after it was made. ``server``: the TTFT the engine measured,
    one real run per prompt (the simulated clock prices it the same at every distance)."""
    import inferlab as il
    eng = _sim_engine(max_model_len=8192, num_blocks=1024)
    rows = []
    for n in prompts:
        rid = eng.add_request(_ids(n, seed=2), il.SamplingParams(max_tokens=1))
        server = next(o for o in _run(eng) if o.request_id == rid).metrics.ttft
        for rtt in rtts:
            for new_conn in (False, True):
                up = (HANDSHAKE_RTTS * rtt if new_conn else 0.0) + rtt / 2
                rows.append({"prompt": n, "rtt": rtt, "new_connection": new_conn,
                             "server": server, "perceived": up + server + rtt / 2})
    return rows


def _run(eng):
    while eng.has_unfinished_requests():
        yield from (o for o in eng.step() if o.finished)


def costs_summary(data: dict) -> list[str]:
    dec, kv, net = data["decode"], data["kv"]["saving"], data["network"]
    a, b = dec[0], dec[-1]
    w, wo = kv["with"], kv["without"]
    smol = next(r for r in data["kv"]["memory"] if r["model"] == "smollm2-135m")
    l8 = next(r for r in data["kv"]["memory"] if r["model"] == "llama-3-8b")
    lines = [f"answer length {a['max_tokens']} -> {b['max_tokens']} tokens: {a['steps']} -> "
             f"{b['steps']} engine steps, decode {a['decode'] * 1e3:.0f} -> "
             f"{b['decode'] * 1e3:.0f} ms, E2E {a['e2e'] * 1e3:.0f} -> {b['e2e'] * 1e3:.0f} ms "
             f"[{protocol.label(data['clock_sim'])}]",
             f"KV cache: a {kv['answer']}-token answer to a {kv['prompt']}-token prompt pushes "
             f"{w['tokens']:,} tokens through the model with the cache, {wo['tokens']:,} without "
             f"({wo['tokens'] / w['tokens']:.1f}x; simulated {w['time'] * 1e3:.0f} vs "
             f"{wo['time'] * 1e3:.0f} ms); {kv['same_tokens']} of {kv['answer']} answer tokens "
             f"the same. The price: {l8['kv_bytes_per_token'] / 1024:.0f} KiB per token for "
             f"llama-3-8b ({l8['per_4k_mb']:.0f} MiB per 4k-token conversation, bf16), "
             f"{smol['kv_bytes_per_token'] / 1024:.0f} KiB for SmolLM2-135M"]
    for n in sorted({r["prompt"] for r in net}):
        warm = [r for r in net if r["prompt"] == n and not r["new_connection"]]
        lines.append(f"{n}-token prompt, server TTFT {warm[0]['server'] * 1e3:.0f} ms; the "
                     "user sees the first token after " + ", ".join(
                         f"{r['perceived'] * 1e3:.0f} ms at {r['rtt'] * 1e3:.0f} ms RTT"
                         for r in warm) + f" (new connection: +{HANDSHAKE_RTTS} round trips)")
    if "decode_wall" in data:
        dw = data["decode_wall"]
        lines.append(f"{dw['label']} ({dw['model']}): E2E " + ", ".join(
            f"{r['max_tokens']} tokens {r['e2e'] * 1e3:.0f} ms [{r['lo'] * 1e3:.0f}-"
            f"{r['hi'] * 1e3:.0f}]" for r in dw["rows"]) + protocol.warning_line(dw))
    if "wall" in data["kv"]:
        kw = data["kv"]["wall"]
        lines.append(f"{kw['label']} ({kw['model']}): a {kw['answer']}-token answer to a "
                     f"{kw['prompt']}-token prompt, with the KV cache "
                     f"{protocol.Spread(**kw['with']).ms(0)}, without "
                     f"{protocol.Spread(**kw['without']).ms(0)}; the cache holds "
                     f"{_engine_price(kw).rstrip('; ')}" + protocol.warning_line(kw))
    return lines


# --- the judges of the two cost claims (chapter 13's CLAIMS) -----------------------------------
def judge_decode_length(d: dict) -> Verdict:
    """One engine step per answer token (counts), and the time to the whole answer growing
    with its length on this machine's wall clock (lengths interleaved)."""
    if "decode_wall" not in d:
        a, b = d["decode"][0], d["decode"][-1]
        return no_wall_run("decode length is judged on the real model's wall clock and step "
                           f"counts together; counted: {a['max_tokens']} -> {b['max_tokens']} "
                           f"tokens in {a['steps']} -> {b['steps']} steps")
    rows, dw = d["decode"], d["decode_wall"]
    a, b = rows[0], rows[-1]
    wa, wb = dw["rows"][0], dw["rows"][-1]
    one_each = all(r["steps"] == r["output_tokens"] == r["max_tokens"] for r in rows)
    r, rw = b["steps"] / a["steps"], wb["e2e"] / wa["e2e"]
    v = worst(direction(r, clear=2), on_wall(rw, clear=2)) if one_each else FAILS
    n = (b["max_tokens"] - 1) / max(a["max_tokens"] - 1, 1)
    reason = (f"answers of {wa['max_tokens']} -> {wb['max_tokens']} tokens took "
              f"{ms(wa['e2e'], 0)} -> {ms(wb['e2e'], 0)} ({x(rw)}) on this machine's wall clock "
              f"({dw['model']}, medians of {dw['repeats']} interleaved repeats); "
              f"{a['max_tokens']} -> {b['max_tokens']} tokens took {a['steps']} -> {b['steps']} "
              f"engine steps ({x(r)}; one per token, the first from the prefill step; counts); "
              f"projection {clock_note(d['clock_sim'])}: decode time {ms(a['decode'])} -> "
              f"{ms(b['decode'])} ({x(b['decode'] / a['decode'])} for {x(n)} the decode steps)")
    more = x(wb["max_tokens"] / wa["max_tokens"])
    return Verdict(v, reason, measured=f"{x(rw)} the time for {more} the tokens",
                   points=tuple((f"{r['max_tokens']} tokens", r["e2e"] * 1e3)
                                for r in dw["rows"]),
                   unit="ms to the whole answer (wall clock)", clock=dw["label"],
                   warning=dw.get("warning"))


def judge_kv_tradeoff(d: dict) -> Verdict:
    """The tokens pushed through the model (counts) and the time to write the same answer
    (wall clock, interleaved), with the KV cache and without it; the memory price per token
    is from the models' shapes (a formula, reported, not judged)."""
    if "wall" not in d["kv"]:
        s = d["kv"]["saving"]
        return no_wall_run("the KV cache's saving is judged on the real model's wall clock and "
                           f"token counts together; counted: {s['with']['tokens']:,} tokens with "
                           f"the cache, {s['without']['tokens']:,} without")
    s, kw = d["kv"]["saving"], d["kv"]["wall"]
    w, wo = s["with"], s["without"]
    rt = wo["tokens"] / w["tokens"]
    tw, two = kw["with"]["median"], kw["without"]["median"]
    same = s["same_tokens"] == s["answer"] and kw["same_tokens"] == kw["answer"]
    mem = {r["model"]: r for r in d["kv"]["memory"]}
    smol, l8 = mem["smollm2-135m"], mem["llama-3-8b"]
    v = worst(direction(rt, clear=2), on_wall(two / tw, clear=1.2)) if same else FAILS
    return Verdict(v, f"a {kw['answer']}-token answer to a {kw['prompt']}-token prompt took "
                   f"{protocol.Spread(**kw['with']).ms(0)} with the KV cache and "
                   f"{protocol.Spread(**kw['without']).ms(0)} without it ({x(two / tw)}) on "
                   f"this machine's wall clock ({kw['model']}, interleaved); to a "
                   f"{s['prompt']}-token prompt it pushes {w['tokens']:,} tokens through the "
                   f"model with the cache and {wo['tokens']:,} without ({x(rt)}; counts); "
                   f"{s['same_tokens']} of {s['answer']} answer tokens agree. The price: "
                   f"{_engine_price(kw)}from the models' shapes in bf16: "
                   f"{smol['kv_bytes_per_token'] // 1024} KiB per "
                   f"token for SmolLM2-135M, {l8['kv_bytes_per_token'] // 1024} KiB for "
                   f"llama-3-8b ({l8['per_4k_mb']:.0f} MiB per 4,096-token conversation)",
                   measured=f"{x(two / tw)} the time without the cache",
                   points=(("with KV cache", tw * 1e3), ("without", two * 1e3)),
                   unit="ms to write the answer (wall clock)", clock=kw["label"],
                   warning=kw.get("warning"))


def _engine_price(kw: dict) -> str:
    """'36 KiB per token in this engine's float32 cache (SmolLM2-135M-Instruct); ' from a
    wall-clock run's engine, '' for results recorded before it was kept."""
    if not kw.get("kv_bytes_per_token"):
        return ""
    from inferlab.lab.drawings.kv_map import size
    return (f"{size(kw['kv_bytes_per_token'])} per token in this engine's {kw['dtype']} cache "
            f"({kw['model']}); ")
