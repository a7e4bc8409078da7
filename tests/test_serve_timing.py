"""``inferlab serve --timing``: each streamed request's time split into its parts, and a delay
put into one part is found in that part and no other.

The arithmetic is checked on timestamps the test chose (the parts add up to their totals).
A tiny engine serves streamed completions over loopback: each finished request writes one
line, its events in their order (no part below zero). Then the server's clock is made to jump
where one part is measured (a step-record subscriber: inside the engine step, after the
forward pass; the chunk formatter: the SSE write), and the breakdown must put the whole jump
in that part and none in the engine's compute. No duration of the engine itself is asserted,
only where a jump the test made shows up.
"""
from __future__ import annotations

import json

import httpx
import pytest

import inferlab as il
import inferlab.serve
from inferlab.serve import responses, timing
from inferlab.serve.timing import (DECODE_PARTS, TTFT_PARTS, RequestTimes, ServeTiming,
                                   read_lines, summarize)

JUMP_S = 60.0
TOKENS = 8


def stream(url: str, model: str, prompt: str) -> int:
    """One streamed completion; the chunks with a choice."""
    body = {"model": model, "prompt": prompt, "max_tokens": TOKENS, "stream": True,
            "temperature": 0, "ignore_eos": True}
    with httpx.stream("POST", url + "/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        return sum(1 for line in r.iter_lines()
                   if line.startswith("data: {") and json.loads(line[6:])["choices"])


def run(tmp_path, name: str, n: int = 4, setup=None):
    eng = il.Engine("tiny", num_blocks=64, max_num_seqs=4)
    path = tmp_path / f"{name}.jsonl"
    srv = inferlab.serve.start(eng, port=0, timing=str(path))
    undo = setup(eng) if setup else None
    try:
        seen = [stream(srv.url, srv.model_name, f"request {i} says") for i in range(n)]
    finally:
        srv.stop()
        if undo:
            undo()
    lines, _ = read_lines(str(path))
    return lines, seen


def test_parts_add_up_to_their_totals(tmp_path):
    """The arithmetic on timestamps the test chose: a request arrives at 100.0 s, steps 4-6
    give its three chunks."""
    tm = ServeTiming(str(tmp_path / "t.jsonl"))
    for step, (start, end, fwd, seqs) in {4: (100.010, 100.050, 0.030, 2),
                                          5: (100.052, 100.080, 0.020, 3),
                                          6: (100.081, 100.100, 0.015, 3)}.items():
        tm._last = (fwd, seqs)
        tm.step_done(step, start, end)
        tm.flushed(step, end + 0.001)
    t = RequestTimes(100.0, True)
    t.submitted, t.added = 100.002, 100.008
    t.chunks = [(4, 100.0515, 100.0525), (5, 100.0815, 100.0830), (6, 100.1015, 100.1020)]
    line = tm.breakdown(t, "r", 3)
    tm.close()
    assert line["ttft_ms"] == {"parse": 2.0, "to_driver": 6.0, "queued": 2.0,  # fixed input
                               "first_step": 40.0, "flush": 1.0, "handoff": 0.5,
                               "write": 1.0, "total": 52.5}
    d = line["decode_ms"]
    assert (d["forward"], d["step_other"], d["between_steps"]) == (35.0, 12.0, 3.0)  # fixed input
    assert (d["delivery_drift"], d["total"], d["per_token"]) == (-0.5, 49.5, 24.75)  # fixed input
    assert line["in_order"] and line["batch_p50"] == 3 and line["chunks"] == 3
    later = {**line, "ttft_ms": {**line["ttft_ms"], "total": 60.0}}
    assert summarize([line, later])["slowest_ttft_ms"] == later["ttft_ms"]  # fixed input
    t.chunks[0] = (4, 100.0505, 100.0525)            # taken off the queue before the flush
    assert not tm.breakdown(t, "r", 3)["in_order"]
    t.added = None                                   # never reached the engine: no line
    assert tm.breakdown(t, "r", 3) is None


def test_a_served_stream_writes_one_line_in_order(tmp_path):
    lines, seen = run(tmp_path, "plain")
    assert len(lines) == len(seen) == 4 and seen == [TOKENS] * 4
    for line in lines:
        assert line["stream"] and line["tokens"] == TOKENS and line["prompt_tokens"] > 0
        assert line["chunks"] == TOKENS and line["in_order"], line
        assert "decode_ms" in line           # its parts: test_parts_add_up_to_their_totals
    assert summarize(lines)["requests"] == 4


def test_timing_off_times_nothing():
    eng = il.Engine("tiny", num_blocks=64)
    srv = inferlab.serve.start(eng, port=0)
    try:
        assert srv.timing is None and srv.driver.timing is None
        stream(srv.url, srv.model_name, "hello")
    finally:
        srv.stop()


@pytest.mark.parametrize("where", ["step_other", "write"])
def test_a_delay_shows_up_in_its_own_part(tmp_path, monkeypatch, where):
    """The server's clock (``timing.clock``) jumps a minute where one part is measured: in a
    step-record subscriber (inside the step, after the forward pass: ``step_other``), or while
    the chunks are formatted (the SSE ``write``). The part gains the whole jump, per token or
    in the TTFT; the engine's compute, timed by the engine's own clock, gains none of it."""
    offset, server_clock = [0.0], timing.clock
    monkeypatch.setattr(timing, "clock", lambda: server_clock() + offset[0])

    def jump(*_):
        offset[0] += JUMP_S

    def in_steps(eng):
        return eng.subscribe(jump)

    def in_chunks(eng):
        chunks = responses.Answer.chunks
        monkeypatch.setattr(responses.Answer, "chunks", lambda self, i, out: (
            jump(), chunks(self, i, out))[1])

    lines, _ = run(tmp_path, "jumped", setup=in_steps if where == "step_other" else in_chunks)
    s = summarize(lines)
    parts = s["per_token_ms"] if where == "step_other" else s["ttft_ms"]
    compute = "forward" if where == "step_other" else "first_step"
    jump_ms = JUMP_S * 1e3
    assert parts[where] >= jump_ms, parts                       # fixed input: the jump
    assert parts[compute] < jump_ms / 2, parts                  # fixed input: none of it
