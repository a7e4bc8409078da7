"""Aggregate run metrics over hand-made RequestOutputs: exact numbers."""
import math

import numpy as np
import pytest

from inferlab.errors import InvalidInputError, InvalidTypeError
from inferlab.observe.metrics import SLO, LatencyStats, summarize
from inferlab.core.outputs import RequestMetrics, RequestOutput


def out(rid, arrival, token_times, *, prompt=10, scheduled=None, cached=0, preempt=0,
        finished=True):
    itl = [b - a for a, b in zip(token_times, token_times[1:])]
    first = token_times[0] if token_times else None
    finish = token_times[-1] if finished and token_times else None
    m = RequestMetrics(arrival, arrival if scheduled is None else scheduled, first, finish,
                       None if first is None else first - arrival,
                       sum(itl) / len(itl) if itl else None, itl,
                       None if finish is None else finish - arrival,
                       (arrival if scheduled is None else scheduled) - arrival,
                       preempt, cached, prompt, len(token_times))
    return RequestOutput(rid, None, [1] * prompt, [5] * len(token_times), "", finished,
                         "length" if finished else None, m)


def test_throughput_and_latencies_exact():
    outs = [out("a", 0.0, [1.0, 1.5, 2.0], cached=4, preempt=1),   # ttft 1, tpot .5, e2e 2
            out("b", 1.0, [4.0], prompt=20, scheduled=2.0)]        # ttft 3, no tpot, e2e 3
    m = summarize(outs, clock="wall")
    assert m.num_requests == 2 and m.duration == 4.0               # first arrival 0, last finish 4
    assert m.request_throughput == 0.5
    assert m.output_throughput == 4 / 4
    assert m.total_token_throughput == (30 + 4) / 4
    assert (m.num_prompt_tokens, m.num_output_tokens, m.num_cached_tokens) == (30, 4, 4)
    assert m.num_preemptions == 1
    assert m.ttft.mean == 2.0 and m.ttft.median == 2.0 and m.ttft.count == 2
    assert m.tpot.mean == 0.5 and m.tpot.count == 1                # single-token request has none
    assert m.itl.count == 2 and m.itl.p99 == 0.5
    assert m.e2e.mean == 2.5 and m.queue_time.mean == 0.5
    assert m.clock == "wall" and m.num_unfinished == 0
    assert math.isnan(m.goodput) and m.slo is None


def test_percentiles_match_numpy():
    xs = list(np.random.default_rng(0).exponential(1.0, 1000))
    s = LatencyStats.of(xs + [None])
    assert s.count == 1000
    assert s.p90 == pytest.approx(np.percentile(xs, 90))
    assert s.p99 == pytest.approx(np.percentile(xs, 99))
    assert s.median == pytest.approx(np.median(xs)) and s.mean == pytest.approx(np.mean(xs))
    assert math.isnan(LatencyStats.of([]).mean)


def test_duration_override_and_unfinished():
    outs = [out("a", 0.0, [1.0, 2.0]), out("b", 0.0, [1.0], finished=False)]
    m = summarize(outs, duration=10.0)
    assert m.num_requests == 1 and m.num_unfinished == 1
    assert m.duration == 10.0 and m.request_throughput == 0.1 and m.output_throughput == 0.2


def test_goodput_under_slo():
    outs = [out("fast", 0.0, [0.1, 0.2, 0.3]),       # ttft .1, tpot .1
            out("slowstart", 0.0, [2.0, 2.1]),       # ttft 2
            out("slowdecode", 0.0, [0.1, 1.1, 2.1]),  # tpot 1
            out("one", 0.0, [0.5])]                  # no tpot: meets any tpot limit
    m = summarize(outs, slo=SLO(ttft=1.0, tpot=0.2))
    assert m.duration == 2.1
    assert m.slo_attainment == 0.5 and m.goodput == pytest.approx(2 / 2.1)
    assert summarize(outs, slo=SLO(e2e=0.4)).slo_attainment == 0.25
    assert summarize(outs, slo=SLO()).slo_attainment == 1.0


def test_empty_and_to_dict():
    m = summarize([])
    assert m.num_requests == 0 and m.duration == 0.0 and math.isnan(m.request_throughput)
    d = summarize([out("a", 0.0, [1.0, 2.0])], slo=SLO(ttft=1.5), clock="H100").to_dict()
    assert d["ttft_mean"] == 1.0 and d["tpot_p99"] == 1.0 and d["e2e_median"] == 2.0
    assert d["slo_ttft"] == 1.5 and d["slo_tpot"] is None and d["goodput"] == 0.5
    assert d["clock"] == "H100" and "ttft" not in d
    assert "goodput" in str(summarize([out("a", 0.0, [1.0])], slo=SLO(ttft=2)))


def test_bad_inputs_name_the_field():
    with pytest.raises(InvalidInputError, match="SLO.ttft"):
        SLO(ttft=0)
    with pytest.raises(InvalidTypeError, match="SLO.tpot"):
        SLO(tpot="fast")
    with pytest.raises(InvalidInputError, match="duration"):
        summarize([], duration=-1.0)
    with pytest.raises(InvalidTypeError, match="slo"):
        summarize([], slo={"ttft": 1})


def test_trace_latencies_equal_the_engines_own():
    """TTFT/TPOT/ITL/E2E rebuilt from step records alone (as for a saved trace or a vLLM feed)
    equal what the engine reports for each request: one definition, two sources."""
    import inferlab as il
    from inferlab.observe.metrics import request_metrics
    from inferlab.observe.trace import Trace
    eng = il.Engine("tiny", num_blocks=12, block_size=4, max_num_seqs=3, clock="H100")
    trace = Trace.record(eng)
    prompts = [[5 + i] * (6 + 3 * i) for i in range(5)]
    outs = eng.generate(prompts, il.SamplingParams(max_tokens=12, ignore_eos=True),
                        use_tqdm=False)
    per = request_metrics(trace.records, trace.requests)
    assert set(per) == {o.request_id for o in outs}
    assert sum(o.metrics.num_preemptions for o in outs) > 0      # the tight cache preempts
    for o in outs:
        a, b = o.metrics, per[o.request_id]
        for name in ("arrival_time", "first_scheduled_time", "first_token_time", "finish_time",
                     "ttft", "tpot", "e2e", "queue_time"):
            assert getattr(b, name) == pytest.approx(getattr(a, name)), name
        assert b.itl == pytest.approx(a.itl)
        assert (b.num_preemptions, b.num_output_tokens, b.num_prompt_tokens) == \
            (a.num_preemptions, a.num_output_tokens, a.num_prompt_tokens)
