"""Request logs (inferlab/sim/request_log.py): an analyst's own traffic as a Workload.

A JSON Lines and a CSV log load to the same requests, token for token as the engine would
read them; every bad row is refused naming its file and line; the shipped example is what its
generator writes; and a server started with ``record_requests`` leaves a log of exactly the
requests it accepted, which loads back and replays. The tiny model (SmolLM2's tokenizer,
random weights) throughout.
"""
from __future__ import annotations

import json

import httpx
import openai
import pytest

import inferlab as il
import inferlab.serve
from inferlab.core.prompts import render_messages
from inferlab.serve.record import RequestRecorder
from inferlab.sim import request_log as rl
from inferlab.sim.workloads import Workload, run_workload
from serve_fixtures import TINY

CHAT = [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the capital of France?"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                           "parameters": {"type": "object", "properties": {}}}}]
ROWS = [
    {"id": "a", "arrival_s": 0.5, "prompt": "Once upon a time", "max_tokens": 8},
    {"id": "b", "arrival_s": 0.0, "messages": CHAT, "max_tokens": 300},
    {"id": 7, "arrival_s": 2.25, "prompt_tokens": 12, "max_tokens": 5},
    {"id": "d", "arrival_s": 1.0, "prompt": [5, 6, 7], "max_tokens": 3, "ignore_eos": True},
    {"id": "e", "arrival_s": 1.0, "messages": CHAT, "tools": TOOLS, "max_tokens": 4,
     "latency_ms": 812},                                   # an unknown field: ignored
]


@pytest.fixture(scope="module")
def eng():
    return il.Engine("tiny", **TINY)


@pytest.fixture(scope="module")
def tok(eng):
    return eng.tokenizer


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_csv(path, rows, cols=("id", "arrival_s", "prompt", "messages", "tools",
                                "prompt_tokens", "max_tokens", "ignore_eos")):
    import csv
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow(["" if c not in r else json.dumps(r[c]) if isinstance(r[c], (list, bool))
                        else r[c] for c in cols])
    return path


def as_tuples(w):
    return [(r.request_id, r.arrival_time, r.prompt_token_ids, r.max_tokens, r.messages,
             r.ignore_eos) for r in w]


def test_a_jsonl_log_loads_sorted_and_tokenized_as_the_engine_would(tmp_path, tok):
    w = rl.workload_from_log(write_jsonl(tmp_path / "log.jsonl", ROWS), tok, max_tokens_cap=200)
    assert isinstance(w, Workload) and len(w) == 5
    assert [r.request_id for r in w] == ["b", "a", "d", "e", "7"]        # by arrival, stable
    assert [r.arrival_time for r in w] == [0.0, 0.5, 1.0, 1.0, 2.25]
    assert "sorted by arrival" in w.description and "capped at 200" in w.description
    b, a, d, e, seven = w.requests
    assert a.prompt_token_ids == tok.encode("Once upon a time") and a.messages is None
    assert b.messages == CHAT and b.prompt_token_ids == tok.encode(
        render_messages(CHAT, tok), add_special_tokens=False)
    assert e.messages is None and e.prompt_token_ids == tok.encode(render_messages(CHAT, tok,
                                                                                   TOOLS))
    assert d.prompt_token_ids == [5, 6, 7]
    assert len(seven.prompt_token_ids) == 12 and min(seven.prompt_token_ids) >= rl.LOW_TOKEN
    assert [r.max_tokens for r in w] == [200, 8, 3, 4, 5]                  # 300 capped
    assert [r.ignore_eos for r in w] == [False, False, True, False, True]  # prompt_tokens: True
    # prompt_tokens rows are seeded: same seed, same ids; another seed, others
    again = rl.workload_from_log(tmp_path / "log.jsonl", tok, max_tokens_cap=200)
    other = rl.workload_from_log(tmp_path / "log.jsonl", tok, seed=1)
    assert as_tuples(again) == as_tuples(w)
    assert other.requests[-1].prompt_token_ids != seven.prompt_token_ids


def test_a_csv_log_loads_to_the_same_requests(tmp_path, tok):
    rows = [{k: v for k, v in r.items() if k != "latency_ms"} for r in ROWS]
    j = rl.workload_from_log(write_jsonl(tmp_path / "log.jsonl", rows), tok)
    c = rl.workload_from_log(write_csv(tmp_path / "log.csv", rows), tok)
    assert as_tuples(c) == as_tuples(j)


def test_without_arrivals_everything_arrives_at_once(tmp_path, tok):
    rows = [{"prompt": "Hello", "max_tokens": 2}, {"prompt_tokens": 4, "max_tokens": 2}]
    w = rl.workload_from_log(write_jsonl(tmp_path / "log.jsonl", rows), tok)
    assert [(r.request_id, r.arrival_time) for r in w] == [("line-1", 0.0), ("line-2", 0.0)]
    assert "all at once" in w.description
    # a log of lengths only needs no tokenizer, just a vocabulary size
    only = write_jsonl(tmp_path / "lengths.jsonl", rows[1:])
    assert len(rl.workload_from_log(only, vocab_size=100).requests[0].prompt_token_ids) == 4


BAD = [  # (the file's lines, the line named, what the message says)
    (['{"prompt": "hi", "max_tokens": 2}', '{"prompt": "hi", "max_tokens": 2'], 2,
     "not valid JSON"),
    (['[1, 2]'], 1, "must be a JSON object"),
    (['{"max_tokens": 2}'], 1, "exactly one of prompt, messages, prompt_tokens"),
    (['{"prompt": "hi"}'], 1, "max_tokens is missing"),
    (['', '{"prompt": "hi", "prompt_tokens": 3, "max_tokens": 2}'], 2,
     "has prompt and prompt_tokens"),
    (['{"prompt": "hi", "max_tokens": 0}'], 1, "max_tokens must be a positive int"),
    (['{"prompt": "hi", "max_tokens": 2.5}'], 1, "max_tokens must be a positive int"),
    (['{"prompt": "hi", "max_tokens": true}'], 1, "max_tokens must be a positive int"),
    (['{"prompt": "hi", "max_tokens": 2, "arrival_s": -1}'], 1, "arrival_s must be"),
    (['{"prompt": "hi", "max_tokens": 2, "arrival_s": "soon"}'], 1, "arrival_s must be"),
    (['{"prompt": "hi", "max_tokens": 2, "arrival_s": 1}', '{"prompt": "hi", "max_tokens": 2}'],
     2, "arrival_s is missing here but given on line 1"),
    (['{"prompt": "", "max_tokens": 2}'], 1, "prompt is empty"),
    (['{"prompt_tokens": 0, "max_tokens": 2}'], 1, "prompt_tokens must be a positive int"),
    (['{"messages": [{"role": "robot", "content": "x"}], "max_tokens": 2}'], 1, "role"),
    (['{"messages": [], "max_tokens": 2}'], 1, "messages must be a non-empty list"),
    (['{"prompt": "hi", "tools": [], "max_tokens": 2}'], 1, "tools go with messages only"),
    (['{"prompt": [1, 99999999], "max_tokens": 2}'], 1, "outside the vocabulary"),
    (['{"prompt": "hi", "max_tokens": 2, "ignore_eos": "yes"}'], 1, "ignore_eos must be"),
    (['{"id": "x", "prompt": "hi", "max_tokens": 2}', '{"id": "x", "prompt": "a", '
      '"max_tokens": 2}'], 2, "id 'x' is already used on line 1"),
]


@pytest.mark.parametrize("lines,line,what", BAD, ids=[b[2] for b in BAD])
def test_each_bad_row_is_refused_naming_its_file_and_line(tmp_path, tok, lines, line, what):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(il.InvalidInputError) as e:
        rl.workload_from_log(path, tok)
    assert f"{path}, line {line}: " in str(e.value) and what in str(e.value), str(e.value)


def test_bad_csv_rows_name_their_line(tmp_path, tok):
    path = tmp_path / "bad.csv"
    path.write_text('id,prompt,max_tokens\na,"two\nlines",3\nb,hi,three\n', encoding="utf-8")
    with pytest.raises(il.InvalidInputError, match=r"bad.csv, line 4: max_tokens must be a "
                                                   r"positive int, got 'three'"):
        rl.workload_from_log(path, tok)
    path.write_text('prompt,max_tokens\nhi,3,extra\n', encoding="utf-8")
    with pytest.raises(il.InvalidInputError, match="line 2: more cells than the header"):
        rl.workload_from_log(path, tok)


@pytest.mark.parametrize("name,text,what", [
    ("empty.jsonl", "", "holds no request"), ("blank.jsonl", "\n \n", "holds no request"),
    ("header.csv", "prompt,max_tokens\n", "holds no request"),
    ("log.txt", '{"prompt": "hi", "max_tokens": 2}\n', "must end in one of"),
])
def test_an_empty_or_unknown_file_is_refused(tmp_path, tok, name, text, what):
    (tmp_path / name).write_text(text, encoding="utf-8")
    with pytest.raises(il.InvalidInputError, match=what):
        rl.workload_from_log(tmp_path / name, tok)
    with pytest.raises(il.InvalidInputError, match="no such request log"):
        rl.workload_from_log(tmp_path / "missing.jsonl", tok)


def test_the_shipped_example_loads_and_is_what_its_generator_writes(tmp_path, tok):
    w = rl.workload_from_log(rl.example_path(), tok)
    assert len(w) == rl.EXAMPLE_REQUESTS and all(r.messages for r in w)
    assert all(r.max_tokens == rl.EXAMPLE_MAX_TOKENS and not r.ignore_eos for r in w)
    assert "sorted" not in w.description                    # Poisson arrivals come in order
    regenerated = rl.write_example(tmp_path / "example.jsonl")
    assert regenerated.read_text() == rl.example_path().read_text()
    # a different seed or rate gives a different log: the numbers are drawn, not typed
    assert rl.example_rows(seed=1) != rl.example_rows()
    span = rl.example_rows()[-1]["arrival_s"]
    assert rl.example_rows(rate=2 * rl.EXAMPLE_RATE)[-1]["arrival_s"] < span


def test_a_recording_server_logs_what_it_accepted_and_the_log_replays(tmp_path, eng):
    path = tmp_path / "traffic.jsonl"
    srv = inferlab.serve.start(eng, port=0, record_requests=path)
    try:
        c = openai.OpenAI(base_url=srv.url, api_key="none", max_retries=0)
        chat = c.chat.completions.create(model=srv.model_name, messages=CHAT, max_tokens=4,
                                         temperature=0.0)
        done = c.completions.create(model=srv.model_name, prompt="Once upon a time",
                                    max_tokens=3, temperature=0.0,
                                    extra_body={"ignore_eos": True})
        bad = httpx.post(srv.url + "/completions", json={"model": srv.model_name,
                                                         "prompt": "hi", "temperature": -1})
        assert bad.status_code == 400
    finally:
        srv.stop()
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert [r["id"] for r in rows] == [chat.id, done.id]       # the refused one: no line
    assert rows[0]["messages"] == CHAT and rows[1]["prompt"] == "Once upon a time"
    assert 0 <= rows[0]["arrival_s"] <= rows[1]["arrival_s"]
    w = rl.workload_from_log(path, eng.tokenizer)
    assert [(r.request_id, r.max_tokens, r.ignore_eos) for r in w] == [
        (chat.id, 4, False), (done.id, 3, True)]
    assert w.requests[0].messages == CHAT
    assert w.requests[1].prompt_token_ids == eng.tokenizer.encode("Once upon a time")
    outs = run_workload(eng, w, progress=False)               # and it replays
    assert [len(o.prompt_token_ids) for o in outs] == [chat.usage.prompt_tokens,
                                                       done.usage.prompt_tokens]
    assert outs[1].text == done.choices[0].text               # greedy: the same answer


def test_a_second_recording_continues_after_the_last_arrival(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"id": "x", "arrival_s": 5.5, "prompt": "hi",
                                               "max_tokens": 2}])
    rec = RequestRecorder(path)
    rec.start()
    assert rec.arrival_s(0.0) == 5.5                        # before the start: clamped to it
    rec.close()
    (tmp_path / "other.jsonl").write_text("not a log\n")
    with pytest.raises(il.InvalidInputError, match="not a request log"):
        RequestRecorder(tmp_path / "other.jsonl")
    with pytest.raises(il.InvalidInputError, match="writes JSON Lines"):
        RequestRecorder(tmp_path / "t.csv")


def test_the_cli_flag_checks_its_path_before_loading_the_model(monkeypatch, capsys, tmp_path):
    from inferlab import cli
    monkeypatch.setattr("inferlab.engine.Engine.__init__",
                        lambda *a, **k: pytest.fail("the model was loaded"))
    assert cli.main(["serve", "--model", "tiny", "--record-requests",
                     str(tmp_path / "log.csv")]) == 2
    assert "writes JSON Lines" in capsys.readouterr().err


def test_choices_and_batches_record_one_line_per_engine_request(tmp_path, eng):
    path = tmp_path / "n.jsonl"
    with inferlab.serve.start(eng, port=0, record_requests=path) as srv:
        c = openai.OpenAI(base_url=srv.url, api_key="none", max_retries=0)
        r = c.completions.create(model=srv.model_name, prompt=[[4, 5], [5, 6, 7]], n=2,
                                 max_tokens=2, temperature=0.0)
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(x["id"], x["prompt"]) for x in rows] == [
        (f"{r.id}-0", [4, 5]), (f"{r.id}-1", [4, 5]), (f"{r.id}-2", [5, 6, 7]),
        (f"{r.id}-3", [5, 6, 7])]
    assert len(rl.workload_from_log(path, eng.tokenizer)) == 4
