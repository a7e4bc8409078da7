"""Seeded synthetic workloads and run_workload (driven through a pure-Python fake engine)."""
import numpy as np
import pytest

from inferlab.errors import InvalidInputError, InvalidTypeError
from inferlab.core.outputs import RequestMetrics, RequestOutput
from inferlab.sim.workloads import (AllAtOnce, CappedExponential, Fixed, Gamma, Poisson, Uniform,
                                Workload, WorkloadRequest, agent_loops, chat_sessions,
                                run_workload, synthetic)


def test_same_seed_same_workload_and_other_seed_differs():
    kw = dict(prompt_len=Uniform(8, 64), output_len=CappedExponential(64, 128),
              arrival=Gamma(5.0, 2.0), shared_prefix=0.5)
    a, b, c = synthetic(50, seed=7, **kw), synthetic(50, seed=7, **kw), synthetic(50, seed=8, **kw)
    assert a.requests == b.requests and a.seed == 7
    assert a.requests != c.requests
    assert chat_sessions(3, seed=1).requests == chat_sessions(3, seed=1).requests
    assert agent_loops(3, seed=1).requests == agent_loops(3, seed=1).requests


def test_token_ids_in_range():
    w = synthetic(200, prompt_len=32, vocab_size=50, seed=0)
    ids = np.concatenate([r.prompt_token_ids for r in w])
    assert ids.min() >= 3 and ids.max() < 50 and len(np.unique(ids)) == 47
    w = synthetic(20, prompt_len=32, vocab_size=50, low=0, seed=0)
    assert min(min(r.prompt_token_ids) for r in w) == 0
    with pytest.raises(InvalidInputError, match="low"):
        synthetic(2, vocab_size=3)


def test_length_distributions():
    rng = np.random.default_rng(0)
    assert (Fixed(17).sample(rng, 10) == 17).all()
    u = Uniform(10, 20).sample(rng, 20000)
    assert u.min() == 10 and u.max() == 20 and abs(u.mean() - 15) < 0.2
    for mean, cap in ((64, 128), (128, 512)):
        spec = CappedExponential(mean, cap)
        x = spec.sample(rng, 50000)
        assert x.min() >= 1 and x.max() == cap
        assert abs(x.mean() - spec.expected) < 0.02 * spec.expected
    assert CappedExponential(64, 128).expected == pytest.approx(64 * (1 - np.exp(-2)))
    w = synthetic(300, prompt_len=5, output_len=CappedExponential(64, 128), seed=3)
    assert max(r.max_tokens for r in w) <= 128 and min(r.max_tokens for r in w) >= 1


def test_arrival_processes():
    rng = np.random.default_rng(0)
    assert (AllAtOnce().sample(rng, 5) == 0).all()
    t = Poisson(20.0).sample(rng, 20000)
    gaps = np.diff(t)
    assert (gaps >= 0).all() and abs(gaps.mean() - 0.05) < 0.002
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.05            # exponential gaps: cv 1
    for cv in (0.5, 3.0):
        g = np.diff(Gamma(20.0, cv).sample(rng, 50000))
        assert abs(g.mean() - 0.05) < 0.003 and abs(g.std() / g.mean() - cv) < 0.1 * cv
    w = synthetic(100, arrival=Poisson(10.0), seed=0)
    times = [r.arrival_time for r in w]
    assert times == sorted(times) and 5 < times[-1] < 15
    assert all(r.arrival_time == 0.0 for r in synthetic(5, seed=0))


def test_shared_prefix():
    w = synthetic(10, prompt_len=100, shared_prefix=0.9, seed=0)
    first = w.requests[0].prompt_token_ids
    for r in w:
        assert r.prompt_token_ids[:90] == first[:90] and len(r.prompt_token_ids) == 100
    assert len({tuple(r.prompt_token_ids[90:]) for r in w}) == 10
    g = synthetic(6, prompt_len=40, shared_prefix=0.5, prefix_groups=2, seed=0)
    heads = [tuple(r.prompt_token_ids[:20]) for r in g]
    assert heads[0] == heads[2] == heads[4] != heads[1] == heads[3] == heads[5]
    assert synthetic(4, prompt_len=40, seed=0).requests[0].prompt_token_ids[:20] != \
        synthetic(4, prompt_len=40, seed=0).requests[1].prompt_token_ids[:20]


def test_chat_sessions_structure():
    w = chat_sessions(3, turns=4, system_prompt_len=32, think_time=2.0, arrival=Poisson(1.0),
                      seed=0)
    assert len(w) == 12 and w.summary()["num_follow_ups"] == 9
    s0 = [r for r in w if r.session == "s0"]
    assert [r.request_id for r in s0] == ["s0t0", "s0t1", "s0t2", "s0t3"]
    assert [r.parent for r in s0] == [None, "s0t0", "s0t1", "s0t2"]
    assert s0[0].think_time == 0.0 and all(r.think_time == 2.0 for r in s0[1:])
    firsts = [r for r in w if r.parent is None]
    assert all(r.prompt_token_ids[:32] == firsts[0].prompt_token_ids[:32] for r in firsts)
    assert all(16 <= len(r.prompt_token_ids) <= 64 for r in s0[1:])   # only the new user turn


def test_agent_loops_structure():
    w = agent_loops(2, tool_calls=3, tools_prompt_len=100, tool_latency=0.25, seed=0)
    assert [r.request_id for r in w][:4] == ["a0c0", "a0c1", "a0c2", "a0c3"]
    assert w.requests[1].parent == "a0c0" and w.requests[1].think_time == 0.25
    assert len(w.requests[0].prompt_token_ids) >= 100 + 32
    assert "agent" in repr(w)


def test_validation_errors():
    with pytest.raises(InvalidInputError, match="prompt_len"):
        synthetic(3, prompt_len=Uniform(0, 5))
    with pytest.raises(InvalidTypeError, match="output_len"):
        synthetic(3, output_len="long")
    with pytest.raises(InvalidTypeError, match="arrival"):
        synthetic(3, arrival=5.0)
    with pytest.raises(InvalidInputError, match="shared_prefix"):
        synthetic(3, shared_prefix=1.5)
    with pytest.raises(InvalidInputError, match="rate"):
        synthetic(3, arrival=Poisson(0))
    with pytest.raises(InvalidInputError, match="num_requests"):
        synthetic(0)
    with pytest.raises(InvalidTypeError, match="seed"):
        synthetic(3, seed=1.5)
    with pytest.raises(InvalidInputError, match="duplicate"):
        Workload("x", [WorkloadRequest("a", [5], 1), WorkloadRequest("a", [5], 1)])
    with pytest.raises(InvalidInputError, match="earlier"):
        Workload("x", [WorkloadRequest("b", [5], 1, parent="a"), WorkloadRequest("a", [5], 1)])


class FakeEngine:
    """Engine API stand-in: every step takes 1 s and gives each arrived request one token."""

    clock_name = "fake"

    def __init__(self, start=0.0):
        self.now, self.pending, self.running, self.added = start, [], [], []

    def add_request(self, prompt, params, *, request_id, arrival_time):
        assert params.ignore_eos
        self.added.append((request_id, list(prompt), params.max_tokens, arrival_time))
        self.pending.append([request_id, list(prompt), params.max_tokens, arrival_time, []])
        return request_id

    def has_unfinished_requests(self):
        return bool(self.pending or self.running)

    def step(self):
        arrived = [p for p in self.pending if p[3] <= self.now]
        if not arrived and not self.running:
            self.now = min(p[3] for p in self.pending)          # skip idle time
            arrived = [p for p in self.pending if p[3] <= self.now]
        for p in arrived:
            self.pending.remove(p)
            self.running.append(p)
        self.now += 1.0
        outs = []
        for p in list(self.running):
            rid, prompt, max_tokens, arrival, toks = p
            toks.append(100 + len(toks))
            done = len(toks) == max_tokens
            m = RequestMetrics(arrival, arrival, None, self.now if done else None, None, None,
                               [], None, None, 0, 0, len(prompt), len(toks))
            outs.append(RequestOutput(rid, None, prompt, list(toks), "", done,
                                      "length" if done else None, m))
            if done:
                self.running.remove(p)
        return outs


def test_run_workload_follow_ups_resend_history():
    w = Workload("chat", [WorkloadRequest("t0", [5, 6], 2, arrival_time=1.0),
                          WorkloadRequest("t1", [7], 1, parent="t0", think_time=3.0),
                          WorkloadRequest("x", [9], 1, arrival_time=0.0)])
    eng = FakeEngine(start=10.0)
    outs = run_workload(eng, w, progress=False)
    assert [o.request_id for o in outs] == ["t0", "t1", "x"]
    added = {a[0]: a for a in eng.added}
    assert added["t0"][3] == 11.0 and added["x"][3] == 10.0      # offset by engine.now at start
    # t0 finishes at 13 with tokens [100, 101]; t1 = its prompt + output + new turn, 3 s later
    assert added["t1"][1] == [5, 6, 100, 101, 7] and added["t1"][3] == 16.0
    assert outs[1].prompt_token_ids == [5, 6, 100, 101, 7]


def test_run_workload_chat_and_agent_complete():
    for w in (chat_sessions(2, turns=3, output_len=3, seed=0),
              agent_loops(2, tool_calls=2, output_len=2, seed=0)):
        eng = FakeEngine()
        outs = run_workload(eng, w, progress=False)
        assert [o.request_id for o in outs] == [r.request_id for r in w]
        by_id = {o.request_id: o for o in outs}
        for r in w:
            if r.parent:
                p = by_id[r.parent]
                assert by_id[r.request_id].prompt_token_ids == \
                    p.prompt_token_ids + p.token_ids + r.prompt_token_ids
    with pytest.raises(InvalidTypeError, match="workload"):
        run_workload(FakeEngine(), [1, 2])
