"""compare(): labels, ratios and reprs with a fake engine; one small run on the tiny real engine."""
import math
from dataclasses import dataclass

import pytest

from inferlab.lab.compare import compare
from inferlab.errors import InvalidInputError, InvalidTypeError
from inferlab.observe.metrics import SLO
from inferlab.core.outputs import RequestMetrics, RequestOutput
from inferlab.sim.workloads import Uniform, chat_sessions, run_workload, synthetic


@dataclass
class FakeStats:
    peak_kv_waste: float
    num_preemptions: int
    prefix_cache_hits: int
    num_steps: int


class FakeEngine:
    """Runs ``batch`` requests at a time, one token each per step of ``step_s`` seconds."""

    def __init__(self, batch=1, step_s=1.0, waste=0.5):
        self.batch, self.step_s, self.waste = batch, step_s, waste
        self.now, self.queue, self.running, self.steps = 0.0, [], [], 0
        self.clock_name = f"fake x{batch}"

    def add_request(self, prompt, params, *, request_id, arrival_time):
        self.queue.append([request_id, prompt, params.max_tokens, max(arrival_time, 0.0), []])

    def has_unfinished_requests(self):
        return bool(self.queue or self.running)

    def step(self):
        while self.queue and len(self.running) < self.batch:
            self.running.append(self.queue.pop(0))
        self.now += self.step_s
        self.steps += 1
        outs = []
        for r in list(self.running):
            rid, prompt, n, arrival, toks = r
            toks.append(7)
            done = len(toks) == n
            times = [self.now] if done else []
            m = RequestMetrics(arrival, arrival, self.now, self.now if done else None,
                               self.now - arrival, None, [], self.now - arrival, 0.0, 0, 0,
                               len(prompt), len(toks))
            outs.append(RequestOutput(rid, None, prompt, list(toks), "", done, None, m))
            if done:
                self.running.remove(r)
        return outs

    def stats(self):
        return FakeStats(self.waste, 0, 0, self.steps)


def test_compare_with_fake_engines_labels_ratios_and_reprs():
    w = synthetic(4, prompt_len=3, output_len=2, seed=0)
    res = compare(w, [{"batch": 1}, ("wide", {"batch": 4, "waste": 0.25})],
                  engine_factory=lambda **kw: FakeEngine(**kw), slo=SLO(ttft=100.0))
    assert res.labels == ["batch=1", "wide"]
    slow, fast = res.rows
    assert slow["num_steps"] == 8 and fast["num_steps"] == 2
    assert slow["clock"] == "fake x1" and fast["clock"] == "fake x4"
    assert res.ratio("request_throughput", "wide") == pytest.approx(4.0)
    assert res.ratio("peak_kv_waste", "wide") == 0.5
    assert res.ratios[0]["request_throughput"] == 1.0
    assert fast["goodput"] == fast["request_throughput"]
    text = str(res)
    assert "requests/s" in text and "(4.00x)" in text and "fake x1, fake x4" in text
    assert "peak KV waste" in text and "50.0%" in text
    html = res._repr_html_()
    assert html.startswith("<div") and "<table>" in html and "wide" in html and "4.00x" in html
    assert repr(res) == text


def test_compare_rejects_bad_configs():
    w = synthetic(2, prompt_len=3, output_len=2, seed=0)
    with pytest.raises(InvalidInputError, match="configs"):
        compare(w, [])
    with pytest.raises(InvalidTypeError, match=r"configs\[1\]"):
        compare(w, [{}, "static"], engine_factory=FakeEngine)
    with pytest.raises(InvalidTypeError, match="workload"):
        compare([1], [{}], engine_factory=FakeEngine)


def test_duplicate_labels_get_numbered():
    w = synthetic(2, prompt_len=3, output_len=2, seed=0)
    res = compare(w, [{}, {}], engine_factory=FakeEngine)
    assert res.labels == ["config 0", "config 1"]
    res = compare(w, [("a", {}), ("a", {})], engine_factory=FakeEngine)
    assert res.labels == ["a #0", "a #1"]


# --- the real engine (tiny random-weight Llama) ------------------------------------------
@pytest.fixture(scope="module")
def engine_mod():
    import inferlab.engine
    return inferlab.engine


def test_run_workload_on_tiny_engine_honours_arrivals_and_follow_ups(engine_mod):
    eng = engine_mod.Engine(model="tiny", clock="H100", sim_model="llama-3-8b")
    w = chat_sessions(2, turns=2, system_prompt_len=16, user_len=Uniform(4, 8), output_len=3,
                      think_time=0.5, seed=0)
    outs = run_workload(eng, w, progress=False)
    assert [o.request_id for o in outs] == [r.request_id for r in w]
    by_id = {o.request_id: o for o in outs}
    for r in w:
        o = by_id[r.request_id]
        assert o.finished and len(o.token_ids) == r.max_tokens
        if r.parent:
            p = by_id[r.parent]
            assert o.prompt_token_ids == p.prompt_token_ids + p.token_ids + r.prompt_token_ids
            assert o.metrics.arrival_time == pytest.approx(p.metrics.finish_time + 0.5)
    assert eng.clock_name == "H100 (simulated, llama-3-8b shape)"


def test_compare_on_tiny_engine(engine_mod):
    w = synthetic(6, prompt_len=Uniform(4, 12), output_len=Uniform(2, 8), seed=0)
    base = dict(model="tiny", clock="H100", sim_model="llama-3-8b", max_num_seqs=4)
    res = compare(w, [base, {**base, "scheduler": "static"}])
    assert res.labels == ["scheduler=continuous", "scheduler=static"]
    cont, static = res.rows
    assert cont["num_requests"] == static["num_requests"] == 6
    assert cont["num_output_tokens"] == static["num_output_tokens"] == sum(r.max_tokens for r in w)
    assert static["num_steps"] >= cont["num_steps"]
    assert all(not math.isnan(r["request_throughput"]) for r in res.rows)
    assert "H100 (simulated, llama-3-8b shape)" in str(res)
