"""GET /metrics: the server's Prometheus scrape agrees with the engine's own numbers.

A tiny engine with a small KV cache (so requests are preempted) and prefix caching serves a
soak of clients over loopback: answers whole and streamed, one client that leaves after its
first token, two that share a prompt. A subscriber of the test's own, on the engine's thread,
takes ``engine.stats()`` after every step; each scrape (parsed with prometheus_client's own
parser) names the step it shows (``inferlab:step_records_total``), and its gauges and counters
must equal that step's stats exactly, during the run and after it. Token counters and
histogram counts must equal what the clients were answered. No duration is asserted.
"""
from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_until

import inferlab as il
import inferlab.serve

SMALL = dict(num_blocks=24, block_size=4, max_model_len=256, max_num_seqs=8)
SHARED = "The quick brown fox jumps over the lazy dog and runs far away"
PROMPTS = ["Once upon a time", "A B C D E F G", "Hello there, how are", "1 2 3 4 5"]


class Watch:
    """Subscribed before any request: the engine's stats after each step, the output
    count of each live request, the aborted ids; ``hold_once`` stops one step with >= 2
    requests running until ``release`` (so a scrape lands mid-run)."""

    def __init__(self, eng):
        self.eng, self.stats, self.outputs, self.aborted = eng, [], {}, []
        self.pace, self.hold_once = 0.0, False
        self.holding, self.release = threading.Event(), threading.Event()

    def __call__(self, rec):
        self.stats.append(self.eng.stats())
        for rid, req in self.eng.scheduler.requests.items():
            self.outputs[rid] = (req.num_prompt_tokens, len(req.output_token_ids))
        self.aborted += [e.request_id for e in rec.request_events if e.kind == "aborted"]
        if self.hold_once and rec.num_running >= 2:
            self.hold_once = False
            self.holding.set()
            self.release.wait(60)
        time.sleep(self.pace)


@pytest.fixture(scope="module")
def served():
    eng = il.Engine("tiny", **SMALL)
    watch = Watch(eng)
    srv = inferlab.serve.start(eng, port=0)
    eng.subscribe(watch)                 # after the server's: a step it holds is scraped
    yield eng, watch, srv
    srv.stop()


def scrape(srv) -> dict:
    """{(sample name, its one extra label value or ""): value}; checks vLLM's two labels."""
    r = httpx.get(srv.url.removesuffix("/v1") + "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            if s.name.endswith(("_bucket", "_created")):
                continue
            if s.name.startswith("vllm:"):
                assert (s.labels["model_name"], s.labels["engine"]) == (srv.model_name, "0")
            extra = {k: v for k, v in s.labels.items() if k not in ("model_name", "engine")}
            out[(s.name, next(iter(extra.values())) if len(extra) == 1 else "")] = s.value
    return out


def agrees_with_stats(m: dict, st) -> None:
    """One scrape against ``engine.stats()`` after the step it shows."""
    assert m[("vllm:num_requests_running", "")] == st.num_running
    assert m[("vllm:num_requests_waiting", "")] == st.num_waiting
    assert m[("vllm:kv_cache_usage_perc", "")] == pytest.approx(
        st.kv_blocks_used / st.kv_blocks_total)
    assert 0.0 <= m[("vllm:kv_cache_usage_perc", "")] <= 1.0
    assert m[("inferlab:kv_blocks_used", "")] == st.kv_blocks_used
    assert m[("inferlab:kv_token_slots_allocated", "")] == st.kv_token_slots_allocated
    assert m[("inferlab:kv_tokens_used", "")] == st.kv_tokens_used
    assert m[("inferlab:kv_waste_perc", "")] == pytest.approx(st.kv_waste)
    assert m[("vllm:prefix_cache_queries_total", "")] == st.prefix_cache_queries
    assert m[("vllm:prefix_cache_hits_total", "")] == st.prefix_cache_hits
    assert m[("vllm:num_preemptions_total", "")] == st.num_preemptions
    assert m[("vllm:iteration_tokens_total_count", "")] == st.num_steps


def scrape_at_step(srv, watch) -> tuple[dict, object]:
    m = scrape(srv)
    n = int(m[("inferlab:step_records_total", "")])
    wait_until(lambda: len(watch.stats) >= n, 30, what=f"the test's record of step {n}")
    return m, (watch.stats[n - 1] if n else None)


def complete(srv, prompt, max_tokens, stream=False) -> dict:
    """One answer's usage (streamed with include_usage, or whole)."""
    body = {"model": srv.model_name, "prompt": prompt, "max_tokens": max_tokens,
            "temperature": 0.0, "ignore_eos": True, "stream": stream}
    if not stream:
        r = httpx.post(srv.url + "/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        return r.json()["usage"]
    body["stream_options"] = {"include_usage": True}
    with httpx.stream("POST", srv.url + "/completions", json=body, timeout=120) as r:
        chunks = [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: {")]
    return chunks[-1]["usage"]


def leave_after_first_token(srv) -> None:
    body = {"model": srv.model_name, "prompt": "Leave early", "max_tokens": 60,
            "ignore_eos": True, "stream": True}
    with httpx.stream("POST", srv.url + "/completions", json=body, timeout=120) as r:
        for x in r.iter_lines():
            if x.startswith("data: {"):
                break                    # the connection closes here: the server aborts it


def test_scrapes_during_and_after_a_soak_agree_with_the_engine(served):
    eng, watch, srv = served
    m0 = scrape(srv)                     # before any request: all zero, engine info set
    assert m0[("vllm:generation_tokens_total", "")] == 0
    assert m0[("inferlab:kv_blocks_total", "")] == eng.num_blocks
    usages = [complete(srv, SHARED, 6)]  # its blocks stay cached for the next one
    watch.pace, watch.hold_once = 0.003, True   # ~3 ms a step: the leaver cannot finish
    with ThreadPoolExecutor(8) as pool:
        jobs = [pool.submit(complete, srv, SHARED, 20, stream=True)]
        jobs += [pool.submit(complete, srv, p, 24 + 2 * i, stream=i % 2 == 1)
                 for i, p in enumerate(PROMPTS)]
        gone = pool.submit(leave_after_first_token, srv)
        try:
            assert watch.holding.wait(60), "no step ran two requests at once"
            mid, st = scrape_at_step(srv, watch)       # the engine stands still here
            # every client's request at the server before the engine goes on: together they
            # need more KV blocks than there are, so some are preempted (however fast the
            # clients were; with responses no longer held ~40 ms, some had finished first)
            wait_until(lambda: srv.driver.num_open >= len(jobs) + 1, 30,
                       what="every client's request at the server")
        finally:
            watch.release.set()
        agrees_with_stats(mid, st)
        assert mid[("vllm:num_requests_running", "")] >= 2
        during = []
        while not all(j.done() for j in jobs):
            during.append(scrape_at_step(srv, watch))
        usages += [j.result() for j in jobs]
        gone.result()
    for m, st in during:
        agrees_with_stats(m, st)
    wait_until(lambda: watch.aborted and srv.driver.num_open == 0
               and not eng.has_unfinished_requests(), 60, what="the abandoned stream's abort")
    wait_until(lambda: scrape(srv)[("inferlab:step_records_total", "")] == len(watch.stats),
               30, what="the scrape to show the last step")
    end, st = scrape_at_step(srv, watch)
    agrees_with_stats(end, st)
    assert st.to_dict() == eng.stats().to_dict()      # nothing ran after that step
    assert (st.num_running, st.num_waiting, st.kv_blocks_used) == (0, 0, 0)
    assert st.num_preemptions > 0 and st.prefix_cache_hits > 0   # both paths were exercised

    left_prompt, left_out = watch.outputs[watch.aborted[0]]
    assert left_out >= 1                 # it got its first token before it left
    n_done = len(usages)
    prompt = sum(u["prompt_tokens"] for u in usages)
    gen = sum(u["completion_tokens"] for u in usages)
    assert end[("vllm:request_success_total", "length")] == n_done
    assert end[("vllm:request_success_total", "abort")] == 1
    assert end[("vllm:request_success_total", "stop")] == 0
    assert end[("vllm:prompt_tokens_total", "")] == prompt + left_prompt
    assert end[("vllm:generation_tokens_total", "")] == gen + left_out
    assert end[("vllm:prompt_tokens_cached_total", "")] == st.prefix_cache_hits
    assert end[("vllm:prompt_tokens_by_source_total", "local_cache_hit")] == st.prefix_cache_hits
    assert end[("vllm:prompt_tokens_by_source_total", "local_compute")] == (
        prompt + left_prompt - st.prefix_cache_hits)
    assert end[("vllm:request_prompt_tokens_sum", "")] == prompt
    assert end[("vllm:request_generation_tokens_sum", "")] == gen
    for h in ("e2e_request_latency", "request_queue_time", "request_inference_time",
              "request_prefill_time", "request_decode_time", "request_time_per_output_token"):
        assert end[(f"vllm:{h}_seconds_count", "")] == n_done, h
    assert end[("vllm:request_num_preemptions_count", "")] == n_done
    assert end[("vllm:time_to_first_token_seconds_count", "")] == n_done + 1
    assert end[("vllm:inter_token_latency_seconds_count", "")] == gen + left_out - n_done - 1
    freed = end[("inferlab:kv_block_events_total", "freed")]
    assert end[("inferlab:kv_block_hold_seconds_count", "")] == freed > 0
    assert end[("inferlab:kv_block_events_total", "allocated")] > 0


def test_metrics_need_no_key_and_each_server_counts_its_own(served):
    eng, watch, srv = served
    srv.stop()                           # the engine may be served again, by a new server
    keyed = inferlab.serve.start(eng, port=0, api_key="sekret", model_name="keyed")
    try:
        m = scrape(keyed)                # no Authorization header: as vLLM's /metrics
        assert m[("vllm:generation_tokens_total", "")] == 0    # its own registry, from zero
        r = httpx.post(keyed.url + "/completions", json={"model": "keyed", "prompt": "x"})
        assert r.status_code == 401      # the API itself still needs the key
    finally:
        keyed.stop()
