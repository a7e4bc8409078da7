"""Prefix reuse under a tight KV budget: which free blocks are handed out first (issue 11).

    inferlab bench prefix-reuse

Multi-turn chats and agent loops re-send their whole context every turn, so a turn hits the
prefix cache only if the previous turn's blocks survived until it came back. With a KV
budget much smaller than all live contexts, the free-block order decides that:

* ``old`` — one LRU queue: a freed block joins the tail whether or not it holds a prefix;
* ``new`` — hashless free blocks (partial last blocks, never-used ones) are handed out
  before any block holding a cached prefix; cached ones go in LRU order.

The A/B runs on the engine core alone (Scheduler + PagedKVManager, no model): a fake
sampler gives each request its fixed number of tokens (``ignore_eos``), and a simulated
clock prices each step with the roofline model, so think times and tool latencies are
measured in simulated seconds. Everything is deterministic: same command, same counts.
``engine_check`` then plays the same workloads through the real engine on the "tiny"
model (greedy, ignore_eos, the same simulated clock) and checks that its hit counts are
the very same; its old-policy side swaps ``eng.kv.pool`` for a fresh ``BlockPool`` with
``evict_cached_last=False`` before any request runs, a switch for this benchmark only.
"""
from __future__ import annotations

import heapq
import itertools
import zlib

from .common import table

VOCAB = 49152           # the tiny model's tokenizer size (SmolLM2's); any would do here


def workloads(seed: int = 0) -> dict:
    """The two workloads: chats whose turns re-send the history, and agent loops whose
    tool-call rounds re-send the growing context (both from inferlab.sim.workloads)."""
    from inferlab.sim.workloads import Poisson, Uniform, agent_loops, chat_sessions
    return {
        "chat": chat_sessions(16, turns=6, system_prompt_len=64, user_len=Uniform(16, 64),
                              output_len=Uniform(16, 64), think_time=2.0,
                              arrival=Poisson(4.0), vocab_size=VOCAB, seed=seed),
        "agent": agent_loops(12, tool_calls=5, tools_prompt_len=256, task_len=Uniform(32, 96),
                             tool_result_len=Uniform(32, 128), output_len=Uniform(16, 48),
                             tool_latency=1.0, arrival=Poisson(4.0), vocab_size=VOCAB,
                             seed=seed),
    }


BASE = dict(block_size=16, max_num_seqs=8, max_num_batched_tokens=512, max_model_len=2048)
CLOCK = dict(clock="H100", sim_model="llama-3-8b")
SAME_STEP = dict(max_num_seqs=64, max_num_batched_tokens=2048)   # the engine's defaults


def _fake_token(rid: str, i: int) -> int:
    return 3 + zlib.crc32(f"{rid}:{i}".encode()) % (VOCAB - 3)


def burst(num_requests: int = 16, seed: int = 0):
    """Requests sharing one 512-token system prompt that arrive together (one turn each):
    the case where the blocks' index time, not their eviction, decides the hits."""
    from inferlab.sim.workloads import AllAtOnce, Uniform, chat_sessions
    return chat_sessions(num_requests, turns=1, system_prompt_len=512, user_len=Uniform(16, 64),
                         output_len=Uniform(16, 64), think_time=0.0, arrival=AllAtOnce(),
                         vocab_size=VOCAB, seed=seed)


def replay(workload, num_blocks: int, evict_cached_last: bool = True, index_ahead: bool = True,
           **kw) -> dict:
    """Play ``workload`` through the scheduler and a paged KV manager alone; returns the
    prefix-cache counts (as ``EngineStats`` computes them) and what happened to blocks."""
    from inferlab.core.config import EngineConfig
    from inferlab.core.kv_manager import PagedKVManager
    from inferlab.core.params import SamplingParams
    from inferlab.core.request import Request
    from inferlab.core.scheduler import Scheduler
    from inferlab.core.stats import EngineStats, PeakTracker
    from inferlab.sim.clock import make_clock
    o = {**BASE, **kw}
    cfg = EngineConfig(num_blocks=num_blocks, block_size=o["block_size"],
                       max_num_seqs=o["max_num_seqs"],
                       max_num_batched_tokens=o["max_num_batched_tokens"])
    kv = PagedKVManager(num_blocks, cfg.block_size, True, evict_cached_last, index_ahead)
    s = Scheduler(cfg, kv, o["max_model_len"])
    clock = make_clock(**CLOCK)
    children: dict[str, list] = {}
    pending: list = []           # (arrival, submission order, request, prompt), as the engine
    seq = itertools.count()
    for r in workload:
        if r.parent is None:
            heapq.heappush(pending, (r.arrival_time, next(seq), r, list(r.prompt_token_ids)))
        else:
            children.setdefault(r.parent, []).append(r)
    outputs: dict[str, list[int]] = {}
    steps = evicted = prefill = 0
    while pending or s.has_unfinished():
        if pending and not s.has_unfinished():
            clock.skip_to(pending[0][0])
        while pending and pending[0][0] <= clock.now():
            _, _, r, prompt = heapq.heappop(pending)
            s.add(Request(r.request_id, prompt,
                          SamplingParams(max_tokens=r.max_tokens, ignore_eos=True)))
        out = s.schedule()
        if out.is_empty:
            raise RuntimeError("scheduler made no progress")
        clock.advance_step([(c.num_tokens, c.start + c.num_tokens) for c in out.chunks])
        prefill += sum(c.num_tokens for c in out.chunks if c.kind == "prefill")
        sampled = {c.request_id: _fake_token(c.request_id, len(s.requests[c.request_id]
                                                               .output_token_ids))
                   for c in out.chunks if c.samples}
        for req in s.update(out, sampled):
            if not req.finished:
                continue
            outputs[req.request_id] = history = req.all_token_ids
            for child in children.get(req.request_id, ()):
                heapq.heappush(pending, (clock.now() + child.think_time, next(seq), child,
                                         history + list(child.prompt_token_ids)))
        evicted += sum(len(e.block_ids) for e in kv.drain_events() if e.kind == "evicted")
        steps += 1
    st = EngineStats.snapshot(s, kv, PeakTracker(), 0, steps, clock.name)
    return dict(hits=st.prefix_cache_hits, queries=st.prefix_cache_queries,
                hit_rate=st.prefix_cache_hit_rate, evicted=evicted,
                preemptions=st.num_preemptions, steps=steps, requests=len(outputs),
                prefill_tokens=prefill, seconds=clock.now())


def engine_counts(workload, num_blocks: int, evict_cached_last: bool = True,
                  index_ahead: bool = True, **kw) -> dict:
    """The same workload through the real engine on the tiny model (greedy, ignore_eos)."""
    import inferlab as il
    from inferlab.core.block_pool import BlockPool
    from inferlab.sim.workloads import run_workload
    eng = il.Engine("tiny", num_blocks=num_blocks, index_blocks_ahead=index_ahead,
                    **{**BASE, **kw}, **CLOCK)
    if not evict_cached_last:      # benchmark-only switch, before any request has run
        eng.kv.pool = BlockPool(num_blocks, enable_caching=True, evict_cached_last=False)
    outs = run_workload(eng, workload, progress=False)
    st = eng.stats()
    assert len(outs) == len(workload)
    return dict(hits=st.prefix_cache_hits, queries=st.prefix_cache_queries,
                hit_rate=st.prefix_cache_hit_rate, preemptions=st.num_preemptions,
                steps=st.num_steps)


def bench_reuse(model=None, repeats: int = 1, budgets=(64, 128, 192, 256, 512),
                engine_check: bool = True, seed: int = 0, out=print) -> dict:
    """Prefix-cache hit rate, old vs new free-block order, for each workload and KV budget
    (512 blocks: nothing is evicted, the ceiling). ``engine_check``: the tiny model's engine
    must give the same counts at the first (tightest) budget; it takes minutes on 2 CPUs.
    ``model`` and ``repeats`` are accepted for the CLI and unused: counts are deterministic."""
    res: dict = {"same_step": same_step(engine_check=engine_check, out=out)}
    for name, wl in workloads(seed).items():
        out(f"\nprefix-reuse, {name}: {wl.description}; block_size={BASE['block_size']}, "
            f"max_num_seqs={BASE['max_num_seqs']}, token budget "
            f"{BASE['max_num_batched_tokens']}, clock {CLOCK['clock']} (simulated, "
            f"{CLOCK['sim_model']} shape); deterministic counts")
        rows = []
        for nb in budgets:
            r = {pol: replay(wl, nb, pol == "new") for pol in ("old", "new")}
            if engine_check and nb == budgets[0]:
                for pol in ("old", "new"):
                    e = engine_counts(wl, nb, pol == "new")
                    assert (e["hits"], e["queries"]) == (r[pol]["hits"], r[pol]["queries"]), \
                        (name, nb, pol, e, r[pol])
            res[f"{name}/{nb}"] = r
            for pol in ("old", "new"):
                x = r[pol]
                rows.append([f"{nb} blocks", pol, f"{x['hits']}/{x['queries']}",
                             f"{x['hit_rate']:.1%}", x["evicted"], x["preemptions"],
                             x["steps"]])
        table(out, ["KV budget", "free order", "hit/query tokens", "hit rate",
                     "blocks evicted", "preemptions", "steps"], rows)
        gains = [f"{nb}: {res[f'{name}/{nb}']['old']['hit_rate']:.1%} -> "
                 f"{res[f'{name}/{nb}']['new']['hit_rate']:.1%}" for nb in budgets]
        out(f"{name} hit rate old -> new by budget: " + ", ".join(gains))
        if engine_check:
            out(f"the real engine (tiny model, greedy, ignore_eos) gave the same hit/query "
                f"tokens at {budgets[0]} blocks, both orders")
    return res


def same_step(num_requests: int = 16, num_blocks: int = 1024, engine_check: bool = True,
              seed: int = 0, out=print) -> dict:
    """Requests sharing a system prompt, arriving together: blocks indexed when allocated
    (vLLM, the engine's default) vs only after their step ran (``index_blocks_ahead=False``,
    the lab before it matched vLLM). Counts deterministic; times on the simulated clock."""
    wl = burst(num_requests, seed)
    r = {"after step": replay(wl, num_blocks, index_ahead=False, **SAME_STEP),
         "at allocation": replay(wl, num_blocks, index_ahead=True, **SAME_STEP)}
    if engine_check:
        for name, ahead in (("after step", False), ("at allocation", True)):
            e = engine_counts(wl, num_blocks, index_ahead=ahead, **SAME_STEP)
            assert (e["hits"], e["queries"]) == (r[name]["hits"], r[name]["queries"]), \
                (name, e, r[name])
    out(f"\nprefix-reuse, same step: {wl.description}; {num_blocks} blocks (nothing evicted), "
        f"block_size={BASE['block_size']}, max_num_seqs={SAME_STEP['max_num_seqs']}, token "
        f"budget {SAME_STEP['max_num_batched_tokens']} (the engine's defaults), clock "
        f"{CLOCK['clock']} (simulated); deterministic")
    table(out, ["blocks indexed", "prefill tokens computed", "hit/query tokens", "hit rate",
                 "steps", "simulated s"],
           [[k, x["prefill_tokens"], f"{x['hits']}/{x['queries']}", f"{x['hit_rate']:.1%}",
             x["steps"], f"{x['seconds']:.3f}"] for k, x in r.items()])
    a, b = r["after step"]["prefill_tokens"], r["at allocation"]["prefill_tokens"]
    out(f"same step: prefill tokens computed {a} -> {b} ({a / b:.2f}x fewer) when blocks are "
        "indexed as they are allocated" + ("; the real engine (tiny model) gave the same "
                                          "hit/query tokens" if engine_check else ""))
    return r
