"""Chapter 7: prefix caching for shared system prompts and agent / tool-call loops.

The engine is stateless between calls: every round of an agent loop re-sends the tool
definitions, the task, and every earlier call and tool result. Without prefix caching each
round recomputes all of it, so round k costs more than round k-1. With prefix caching the
blocks already computed for the previous round (and for any other request sharing the same
system prompt) are found by their hash and reused; only the new tokens are computed.

Three measurements on the real engine: an agent loop (cost of each round), many requests that
share one system prompt (TTFT), and requests with that prompt arriving together (tokens
computed when blocks are indexed as allocated, as vLLM, or only after their step). Token counts are exact; times come from the simulated H100
clock (a Llama-3-8B-shaped model) so the picture does not move with CPU noise.
"""
from __future__ import annotations

import statistics

import numpy as np
from .. import measure_cache
from ..verdicts import (AFTER, COUNTS, ENTER, FAILS, ILLUSTRATION, Claim, Verdict, clock_note,
                        direction, ms, pct, worst, x)

TITLE = "Prefix caching: shared system prompts and agent loops"
CLAIM = ("Reusing the KV cache of a shared prefix (system prompt, tool definitions, the loop's "
         "history so far) means each agent round computes only its new tokens, so later rounds "
         "stay cheap instead of growing with the conversation; requests that share a system "
         "prompt start faster.")

SIM = dict(clock="H100", sim_model="llama-3-8b")
VOCAB = 8000   # token ids drawn below any supported vocabulary; the text does not matter here


def _sizes(smoke: bool) -> dict:
    # SmolLM2 in both; smoke runs a shorter loop and fewer requests.
    if smoke:
        return dict(model=None, tasks=2, tool_calls=3, tools_len=384, shared_requests=4,
                    system_len=512, user_len=48, together=3)
    return dict(model=None, tasks=4, tool_calls=6, tools_len=1024, shared_requests=16,
                system_len=1024, user_len=96, together=8)


def _engine(caching: bool, model, **kw):
    import inferlab as il
    return il.Engine(model, enable_prefix_caching=caching, **{**SIM, **kw})


def agent_rounds(caching: bool, s: dict, seed: int = 0, **kw) -> dict:
    """Cost of each round of the agent loops: prompt tokens, tokens computed, TTFT."""
    from inferlab.sim.workloads import Uniform, agent_loops, run_workload
    wl = agent_loops(s["tasks"], s["tool_calls"], tools_prompt_len=s["tools_len"],
                     task_len=Uniform(48, 80), tool_result_len=Uniform(48, 112),
                     output_len=Uniform(16, 40), tool_latency=0.2, vocab_size=VOCAB, seed=seed)
    eng = _engine(caching, s["model"], **kw)
    outs = run_workload(eng, wl, progress=False)
    rounds = s["tool_calls"] + 1
    by_round = [[o for o in outs if o.request_id.endswith(f"c{k}")] for k in range(rounds)]
    mean = lambda xs: float(np.mean(xs))
    return {"caching": caching, "clock": eng.clock_name, "model": eng.model_name,
            "prompt_tokens": [mean([o.metrics.num_prompt_tokens for o in r]) for r in by_round],
            "computed_tokens": [mean([o.metrics.num_prompt_tokens - o.metrics.num_cached_tokens
                                      for o in r]) for r in by_round],
            "ttft": [mean([o.metrics.ttft for o in r]) for r in by_round]}


def shared_system_prompt(caching: bool, s: dict, seed: int = 0, **kw) -> dict:
    """Requests with one common system prompt, arriving one after another."""
    import inferlab as il
    rng = np.random.default_rng(seed)
    system = rng.integers(3, VOCAB, s["system_len"]).tolist()
    eng = _engine(caching, s["model"], **kw)
    ttft, cached = [], []
    for i in range(s["shared_requests"]):
        prompt = system + rng.integers(3, VOCAB, s["user_len"]).tolist()
        (o,) = eng.generate([prompt], il.SamplingParams(max_tokens=8, ignore_eos=True),
                            use_tqdm=False)
        ttft.append(o.metrics.ttft)
        cached.append(o.metrics.num_cached_tokens)
    return {"caching": caching, "ttft": ttft, "cached": cached}


def arriving_together(ahead: bool, s: dict, seed: int = 0, **kw) -> dict:
    """Requests with one common system prompt that arrive in the same instant. With blocks
    indexed as they are allocated (vLLM; ``index_blocks_ahead=True``) the first request's
    blocks are found by the others in that same step; indexed only after the step, every
    request admitted with it computes its own copy."""
    import inferlab as il
    rng = np.random.default_rng(seed + 1)
    system = rng.integers(3, VOCAB, s["system_len"]).tolist()
    prompts = [system + rng.integers(3, VOCAB, s["user_len"]).tolist()
               for _ in range(s["together"])]
    eng = _engine(True, s["model"], index_blocks_ahead=ahead, **kw)
    recs = []
    eng.subscribe(recs.append)
    outs = eng.generate(prompts, il.SamplingParams(max_tokens=1, ignore_eos=True),
                        use_tqdm=False)
    first = recs[0].batch
    return {"index": "at allocation" if ahead else "after the step",
            "prompt_tokens": sum(o.metrics.num_prompt_tokens for o in outs),
            "computed_tokens": sum(o.metrics.num_prompt_tokens - o.metrics.num_cached_tokens
                                   for o in outs),
            "first_step_requests": len(first),
            "first_step_tokens": sum(c.num_tokens for c in first),
            "ttft": [o.metrics.ttft for o in outs]}


@measure_cache.shared
def measure(smoke: bool = False, caching: tuple[bool, bool] = (False, True),
            **engine_kw) -> dict:
    """The agent loop and the shared system prompt without and with prefix caching
    (``caching``: the two runs' setting; a test gives (False, False) to remove the effect),
    and requests arriving together with blocks indexed after their step vs at allocation."""
    s = _sizes(smoke)
    arms = dict(zip(("uncached", "cached"), caching))
    agent = {arm: agent_rounds(c, s, **engine_kw) for arm, c in arms.items()}
    shared = {arm: shared_system_prompt(c, s, **engine_kw) for arm, c in arms.items()}
    together = {("ahead" if a else "after"): arriving_together(a, s, **engine_kw)
                for a in (False, True)}
    return {"sizes": s, "agent": agent, "shared": shared, "together": together,
            "clock": agent["cached"]["clock"], "model": agent["cached"]["model"]}


def figures(data: dict) -> dict:
    """One figure per point (``_ch07_figures``): the agent loop's tokens per round (the
    main one), the shared system prompt's TTFT, and requests arriving together."""
    from . import _ch07_figures
    return _ch07_figures.all_figures(data)


def figure(data: dict):
    """The chapter's main figure: prompt tokens each agent round computes, cache off and on."""
    from . import _ch07_figures
    return _ch07_figures.agent(data)


def summary(data: dict) -> str:
    u, c = data["agent"]["uncached"], data["agent"]["cached"]
    su, sc = data["shared"]["uncached"], data["shared"]["cached"]
    return (f"model: {data['model']}\n"
            f"last agent round computes {u['computed_tokens'][-1]:.0f} tokens uncached vs "
            f"{c['computed_tokens'][-1]:.0f} cached (TTFT {u['ttft'][-1] * 1e3:.1f} vs "
            f"{c['ttft'][-1] * 1e3:.1f} ms); shared system prompt, requests after the first: "
            f"mean TTFT {np.mean(su['ttft'][1:]) * 1e3:.1f} vs {np.mean(sc['ttft'][1:]) * 1e3:.1f}"
            f" ms; {data['sizes']['together']} requests arriving together compute "
            f"{data['together']['after']['computed_tokens']} prompt tokens with blocks indexed "
            f"after their step vs {data['together']['ahead']['computed_tokens']} indexed as "
            f"allocated (vLLM) [clock: {data['clock']}]")


# --- the chapter's claims: how each is measured and judged --------------------------------------
def measure_for_claims(smoke: bool) -> dict:
    """The measurement every claim below is judged on (``claims.run_all``)."""
    return measure(smoke=smoke)   # simulated H100 clock


def judge_prefix_reuse(d: dict) -> Verdict:
    u, c = d["agent"]["uncached"], d["agent"]["cached"]
    su, sc = d["shared"]["uncached"]["ttft"][1:], d["shared"]["cached"]["ttft"][1:]
    cu, cc = u["computed_tokens"][-1], c["computed_tokens"][-1]
    tu, tc = statistics.mean(su), statistics.mean(sc)
    v = direction(cu / cc, clear=2)
    s = d["sizes"]
    return Verdict(v, f"the last agent round computes {cu:.0f} prompt tokens without the cache "
                   f"vs {cc:.0f} with it ({pct(cc / cu)}; token counts on {d['model']}); "
                   f"projection {clock_note(d['clock'])}: TTFT {ms(u['ttft'][-1])} vs "
                   f"{ms(c['ttft'][-1])}, and {s['shared_requests'] - 1} requests sharing a "
                   f"{s['system_len']}-token system prompt start in {ms(tu)} vs {ms(tc)} on "
                   "average", measured=f"{cu:.0f} vs {cc:.0f} tokens",
                   points=(("last round, no cache", cu), ("last round, prefix cache", cc)),
                   unit="prompt tokens computed", clock=COUNTS)


def judge_tool_loop(d: dict) -> Verdict:
    u, s = d["agent"]["uncached"], d["sizes"]
    rounds, total, first = len(u["prompt_tokens"]), sum(u["computed_tokens"]), u["computed_tokens"][0]
    v = direction(total / first, clear=2) if rounds >= 2 else FAILS
    return Verdict(v, f"one task becomes {rounds} model calls ({s['tool_calls']} tool results "
                   f"fed back); without a prefix cache they compute {total:.0f} prompt tokens "
                   f"per task, {x(total / first)} the first call's {first:.0f}; the last call's "
                   f"prompt is {x(u['prompt_tokens'][-1] / u['prompt_tokens'][0])} the first's "
                   "(token counts)", measured=f"{x(total / first)} the tokens of one call",
                   points=tuple((f"call {k}", t) for k, t in enumerate(u["computed_tokens"])),
                   unit="prompt tokens computed per call (no cache)", clock=COUNTS)


CLAIMS = (
    Claim("07-prefix-reuse", "Reusing the KV cache of a shared prefix (system prompt, agent "
          "history) makes later agent calls and requests sharing a system prompt cheap.",
          AFTER, "ch07_prefix_caching", measure_for_claims, judge_prefix_reuse),
    Claim("07-tool-loop", "Tool calls turn one request into a multi-round loop whose "
          "every round re-sends a growing prompt.", ENTER, "ch07_prefix_caching",
          measure_for_claims, judge_tool_loop, kind=ILLUSTRATION),
)
