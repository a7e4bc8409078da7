"""StepAssembler alone, on a made-up clock: how step reports, KV batches and token arrivals
become StepRecords, including the awkward orders a busy machine produces (tokens before their
report, tokens seconds late, tokens of other clients, no reports at all)."""
from inferlab.connect.feeds.assembler import MAX_WAIT_S, ORPHAN_S, StepAssembler
from inferlab.connect.feeds.tokens import TokenArrival
from inferlab.connect.wire.step_reports import EngineInfo, StepReport
from inferlab.core.events import KVEvent, RequestInfo

INFO = EngineInfo(seq=0, ts=0.0, vllm_version="0.32.0", block_size=4, num_blocks=10,
                  max_num_batched_tokens=64)


def asm():
    warned = []
    a = StepAssembler(warn=lambda kind, msg: warned.append(kind))
    a.on_engine(INFO)
    return a, warned


def report(ts, new_tokens, prompt_tokens=0, prompt_cached=0, ctx=0, gen=0, **kw):
    return StepReport(engine=0, seq=0, ts=ts, new_tokens=new_tokens, prompt_tokens=prompt_tokens,
                      prompt_cached=prompt_cached, ctx_tokens=ctx, gen_tokens=gen,
                      ctx_requests=1 if ctx else 0, gen_requests=gen, elapsed_ms=10.0,
                      kv_usage=0.3, **kw)


def tok(rid, i, t, fin=None):
    return TokenArrival(rid, 100 + i, f"<{i}>", i, t, fin)


def queue(a, rid, t, n=8):
    a.on_queued(rid, RequestInfo(n, t))


def steps_of(records):
    return [[(c.request_id, c.kind, c.start, c.num_tokens) for c in r.batch] for r in records]


def test_tokens_late_by_seconds_still_land_in_their_steps():
    a, warned = asm()
    queue(a, "a", 0.0)
    queue(a, "b", 0.0)
    for k in range(3):                                   # three steps reported at once
        a.on_report(report(1.0 + 0.1 * k, 2, prompt_tokens=16 if k == 0 else 0,
                           ctx=16 if k == 0 else 0, gen=0 if k == 0 else 2), 1.0 + 0.1 * k)
    assert a.ready(1.5) == []                            # nothing of ours yet: wait
    for k in range(3):                                   # tokens come 2 s late, interleaved
        a.on_token(tok("b", k, 3.0 + k * 0.01, "length" if k == 2 else None))
        a.on_token(tok("a", k, 3.005 + k * 0.01, "length" if k == 2 else None))
    recs = a.ready(3.1)
    assert steps_of(recs) == [
        [("b", "prefill", 0, 8), ("a", "prefill", 0, 8)],
        [("b", "decode", 8, 1), ("a", "decode", 8, 1)],
        [("b", "decode", 9, 1), ("a", "decode", 9, 1)]]
    assert [e.token_id for e in recs[2].emitted] == [102, 102]
    assert [ev.kind for ev in recs[2].request_events] == ["finished", "finished"]
    assert recs[0].kv_blocks_used == 3 and recs[0].kv_blocks_total == 10
    assert recs[0].num_batched_tokens == 16 and recs[0].token_budget == 64 and not warned


def test_a_token_before_its_report_waits_for_it():
    a, _ = asm()
    queue(a, "a", 0.0)
    a.on_token(tok("a", 0, 0.50))
    assert a.ready(0.6) == [] and a.orphans
    a.on_report(report(0.45, 1, prompt_tokens=8, ctx=8), 0.7)
    recs = a.ready(0.7)
    assert steps_of(recs) == [[("a", "prefill", 0, 8)]]
    assert [ev.kind for ev in recs[0].request_events] == ["queued", "admitted"]


def test_other_clients_tokens_do_not_hold_a_step_back():
    a, _ = asm()
    queue(a, "a", 0.0)
    a.on_report(report(1.0, 3, prompt_tokens=8, ctx=8, gen=2), 1.0)   # 2 tokens are not ours
    a.on_token(tok("a", 0, 1.01))
    recs = a.ready(1.02)                                 # ours is in, nobody else of ours
    assert steps_of(recs) == [[("a", "prefill", 0, 8)]]
    a.on_report(report(1.1, 3, gen=3), 1.1)
    assert a.ready(1.2) == []                            # "a" is running: wait for its token
    assert len(a.ready(1.11 + MAX_WAIT_S)) == 1          # ... but not forever


def test_kv_batches_go_to_the_step_they_happened_in():
    a, _ = asm()
    queue(a, "a", 0.0)
    a.on_kv(0.95, [KVEvent("cached", [0, 1])], 0.96)     # before its step's report arrives
    a.on_report(report(1.0, 1, prompt_tokens=8, ctx=8), 1.0)
    a.on_report(report(1.1, 1, gen=1), 1.1)
    a.on_kv(1.05, [KVEvent("cached", [1, 2])], 1.12)     # late, but stamped in step 2
    a.on_token(tok("a", 0, 1.01))
    a.on_token(tok("a", 1, 1.11, "length"))
    r1, r2 = a.ready(1.2)
    assert [e.block_ids for e in r1.kv_events] == [[0, 1]]
    assert [e.block_ids for e in r2.kv_events] == [[1, 2]]


def test_prefix_hits_are_split_only_when_they_can_be():
    a, _ = asm()
    queue(a, "a", 0.0, n=12)
    a.on_report(report(1.0, 1, prompt_tokens=12, prompt_cached=8, ctx=4), 1.0)
    a.on_token(tok("a", 0, 1.01))
    (r,) = a.ready(1.02)
    assert [(c.start, c.num_tokens, c.num_cached) for c in r.batch] == [(8, 4, 8)]
    assert r.request_events[-1].detail == "cached=8"
    queue(a, "b", 1.5, n=12)
    queue(a, "c", 1.5, n=12)
    a.on_report(report(2.0, 2, prompt_tokens=24, prompt_cached=8, ctx=16), 2.0)
    a.on_token(tok("b", 0, 2.01))
    a.on_token(tok("c", 0, 2.02))
    (r,) = a.ready(2.03)                                 # 8 cached between two: unknown
    assert [c.num_cached for c in r.batch] == [0, 0] and a.ambiguous_cached == 1


def test_a_long_prompt_in_chunks_is_attributed():
    a, _ = asm()
    queue(a, "a", 0.0, n=100)
    a.on_report(report(1.0, 0, ctx=64), 1.0)             # a chunk: nothing sampled
    a.on_report(report(1.1, 1, prompt_tokens=100, ctx=36), 1.1)
    a.on_token(tok("a", 0, 1.11))
    recs = a.ready(1.2)
    assert steps_of(recs) == [[("a", "prefill", 0, 64)], [("a", "prefill", 64, 36)]]
    assert [c.samples for r in recs for c in r.batch] == [False, True]


def test_without_reports_steps_are_inferred_from_arrivals():
    a, warned = asm()
    queue(a, "a", 0.0)
    queue(a, "b", 0.0)
    for k in range(3):
        a.on_token(tok("a", k, 1.0 + 0.05 * k))
        a.on_token(tok("b", k, 1.01 + 0.05 * k))
    recs = a.ready(1.0 + ORPHAN_S + 0.5)
    assert [[c.request_id for c in r.batch] for r in recs] == [["a", "b"]] * 3
    assert warned == ["inferred"]
    assert [ev.kind for ev in recs[0].request_events][:2] == ["queued", "queued"]


def test_events_with_no_step_to_carry_them_still_come_out():
    a, _ = asm()
    queue(a, "a", 0.0)
    a.on_done("a", "aborted", "stream failed: reset", 0.1)
    assert a.ready(0.5) == []
    (r,) = a.ready(2.0)
    assert [(e.request_id, e.kind) for e in r.request_events] == [("a", "queued"),
                                                                   ("a", "aborted")]
    assert r.batch == [] and r.t_start == r.t_end
