"""``inferlab serve --timing``: each streamed request's time split into its parts, and a delay
put into one part is found in that part and no other.

A tiny engine serves streamed completions over loopback. Each finished request writes one
line; its TTFT parts and decode parts add up to their totals (to the rounding), and the
server's TTFT and decode span lie inside what the client saw. Then a known delay is added
where one part is measured (a step-record subscriber that sleeps: inside the engine step,
after the forward pass; a slow chunk formatter: the SSE write) and the breakdown must move
that part by about the delay per token while the forward pass stays put. No duration of the
engine itself is asserted, only where a delay the test added shows up.
"""
from __future__ import annotations

import json
import time

import httpx
import pytest

import inferlab as il
import inferlab.serve
from inferlab.serve import responses
from inferlab.serve.timing import DECODE_PARTS, TTFT_PARTS, read_lines, summarize

DELAY_S = 0.03
TOKENS = 8


def stream(url: str, model: str, prompt: str) -> tuple[float, float]:
    """One streamed completion; (client TTFT s, client first-to-last chunk s)."""
    body = {"model": model, "prompt": prompt, "max_tokens": TOKENS, "stream": True,
            "temperature": 0, "ignore_eos": True}
    t0 = time.monotonic()
    times = []
    with httpx.stream("POST", url + "/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: {"):
                if json.loads(line[6:])["choices"]:
                    times.append(time.monotonic())
    return times[0] - t0, times[-1] - times[0]


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


def test_parts_add_up_and_lie_inside_what_the_client_saw(tmp_path):
    lines, seen = run(tmp_path, "plain")
    assert len(lines) == len(seen) == 4
    for line, (ttft, span) in zip(lines, seen):
        assert line["stream"] and line["tokens"] == TOKENS and line["prompt_tokens"] > 0
        t, d = line["ttft_ms"], line["decode_ms"]
        assert sum(t[p] for p in TTFT_PARTS) == pytest.approx(t["total"], abs=0.01)
        assert sum(d[p] for p in DECODE_PARTS) == pytest.approx(d["total"], abs=0.01)
        assert all(t[p] >= 0 for p in TTFT_PARTS), t
        assert all(d[p] >= 0 for p in ("forward", "step_other", "between_steps"))
        assert t["total"] <= ttft * 1e3          # the server's part of what the client saw
        assert d["per_token"] == pytest.approx(d["total"] / (TOKENS - 1), abs=0.001)
    s = summarize(lines)
    assert s["requests"] == 4 and s["batch_p50"] >= 1


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
    base, _ = run(tmp_path, "base")

    def slow_steps(eng):                     # a subscriber: inside the step, after forward
        return eng.subscribe(lambda rec: time.sleep(DELAY_S))

    def slow_chunks(eng):                    # formatting the chunks: the SSE write
        chunks = responses.Answer.chunks
        monkeypatch.setattr(responses.Answer, "chunks", lambda self, i, out: (
            time.sleep(DELAY_S), chunks(self, i, out))[1])

    slow, _ = run(tmp_path, "slow", setup=slow_steps if where == "step_other" else slow_chunks)
    b, s = summarize(base)["per_token_ms"], summarize(slow)["per_token_ms"]
    delay_ms = DELAY_S * 1e3
    if where == "step_other":
        assert s["step_other"] - b["step_other"] >= 0.8 * delay_ms
        moved = "step_other"
    else:                                    # the write of the last chunk, less the first's
        tb, ts = summarize(base)["ttft_ms"], summarize(slow)["ttft_ms"]
        assert ts["write"] - tb["write"] >= 0.8 * delay_ms
        moved = "write"
    assert s["forward"] < b["forward"] + 0.5 * delay_ms, (moved, b, s)
