"""Does the sweep's best setting carry over to vLLM? (`inferlab bench sweep --vllm`:
inferlab/lab/sweep_vllm.py, inferlab/lab/carry_over.py, inferlab/bench/sweep_vllm.py,
inferlab/lab/drawings/frontier_pair.py.)

The default tier judges code on fixed inputs: the objective and carry-over arithmetic on
synthetic rows, a point's flags for both servers, a saved `vllm bench serve` result read with
the sweep's definitions, the bundled chat log written as the client's dataset, and the
figure of both frontiers (its colours, its headline, the article profile printing it). The
full tier runs a 2-point grid for real on both servers (vLLM's CPU build from .venv-vllm): a
missing venv fails it, as in tests/test_vllm.py.
"""
from __future__ import annotations

import json
import pathlib

import pytest

from inferlab.errors import InvalidInputError
from inferlab.lab.carry_over import best, carry_over, sentence
from inferlab.lab.sweep_vllm import chat_dataset, client_numbers, point_flags

FIX = pathlib.Path(__file__).parent / "fixtures" / "vllm_bench_serve_result.json"


def row(point, total, per, *, error=None, lo=None, hi=None):
    m = None if error else {"output_tok_s": total, "output_tok_s_per_user": per,
                            "ttft_p50_ms": 10.0, "ttft_p99_ms": 20.0, "itl_p50_ms": 5.0,
                            "itl_p99_ms": 9.0,
                            "spread": {"output_tok_s": [lo or total, hi or total],
                                       "output_tok_s_per_user": [per, per]}}
    return {"point": point, "knobs": {"max_num_seqs": [4, 16, 8, 32][point]}, "metrics": m,
            "trace_path": None, "error": error, "clock": "wall", "projection": False}


# (total, per user): the lab is best at point 1 with a floor of 9.5; vLLM at point 2
LAB = [row(0, 100.0, 20.0), row(1, 160.0, 10.0), row(2, 140.0, 14.0), row(3, 200.0, 5.0)]
VLLM = [row(0, 110.0, 22.0), row(1, 150.0, 9.0, lo=140.0, hi=155.0),
        row(2, 170.0, 15.0, lo=165.0, hi=180.0), row(3, 0.0, 0.0, error="ServerFailed: x")]


def test_the_objective_picks_the_most_in_total_above_the_floor():
    assert best(LAB)["point"] == 3                          # no floor: the most in total
    assert best(LAB, 9.5)["point"] == 1 and best(VLLM, 9.5)["point"] == 2
    assert best(VLLM)["point"] == 2                          # a failed point is never best
    assert best(LAB, 50.0) is None
    with pytest.raises(InvalidInputError, match="min_per_user"):
        best(LAB, -1)


def test_carry_over_reads_vllm_at_the_labs_best():
    c = carry_over({"inferlab": LAB, "vLLM": VLLM}, min_per_user=9.5)
    assert c["best"]["inferlab"]["point"] == 1 and c["best"]["vLLM"]["point"] == 2
    at = c["vllm_at_lab_best"]
    read_back = (at["point"], at["output_tok_s"]) == (1, 150.0)   # the synthetic row's number
    assert read_back, at
    assert not at["meets_floor"]                             # 9 per user < 9.5
    assert c["loss_pct"] == pytest.approx((170 - 150) / 170 * 100)
    assert c["within_spread"] is False                       # 140-155 against 165-180
    lab_there = c["lab_at_vllm_best"]["output_tok_s"] == 140.0     # a synthetic row's number
    assert lab_there, c["lab_at_vllm_best"]
    assert c["lab_loss_pct"] == pytest.approx((160 - 140) / 160 * 100)
    text = sentence(c, ["max_num_seqs"])
    assert "point 1 (max_num_seqs=16), 160.0 tok/s" in text and "11.8% less" in text
    assert "misses the per-user floor" in text
    # the same best on both: nothing lost, said so
    same = carry_over({"inferlab": LAB, "vLLM": VLLM}, min_per_user=12.0)
    assert same["same_point"] and same["loss_pct"] == 0.0 and "nothing lost" in sentence(same)
    # no point meets it on one engine
    none = carry_over({"inferlab": LAB, "vLLM": VLLM}, min_per_user=21.0)
    assert none["best"]["inferlab"] is None and none["loss_pct"] is None
    assert "no point meets it on inferlab" in sentence(none)
    with pytest.raises(InvalidInputError, match="different points"):
        carry_over({"inferlab": LAB, "vLLM": VLLM[:2]})


def test_a_point_becomes_both_servers_flags():
    f = point_flags({"max-num-seqs": 4, "enable_prefix_caching": False,
                     "num_gpu_blocks_override": 128})
    assert f["vLLM"] == ["--max-num-seqs", "4", "--no-enable-prefix-caching",
                         "--num-gpu-blocks-override", "128"]
    assert f["inferlab"] == ["--max-num-seqs", "4", "--no-enable-prefix-caching",
                             "--num-blocks", "128"]
    with pytest.raises(InvalidInputError, match="no flag for \\['gpu_memory_utilization'\\]"):
        point_flags({"gpu_memory_utilization": 0.9})
    # every flag named for inferlab serve is one it parses
    import argparse

    from inferlab.serve.command import add_arguments
    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(point_flags({"max_num_batched_tokens": 256, "enable_chunked_prefill":
                                     True, "block_size": 32, "long_prefill_token_threshold": 64,
                                     "dtype": "bfloat16", "max_model_len": 512})["inferlab"])
    assert (args.max_num_batched_tokens, args.enable_chunked_prefill, args.block_size,
            args.long_prefill_token_threshold, args.dtype, args.max_model_len) == \
        (256, True, 32, 64, "bfloat16", 512)


def test_a_client_result_read_with_the_sweeps_definitions(tmp_path):
    n = client_numbers(str(FIX))
    raw = json.loads(FIX.read_text())
    # the saved file's numbers, read by the definitions (not a speed of this machine)
    as_saved = n["output_tok_s"] == raw["output_throughput"] and \
        n["ttft_p99_ms"] == raw["p99_ttft_ms"]
    defined = n["output_tok_s_per_user"] == pytest.approx(raw["output_throughput"] / 3)
    assert as_saved and defined and n["users"] == 3 and n["error"] is None, n
    # requests one after the other: one user; a failed request: the run is an error
    raw.update(start_times=[0.0, 1.0, 2.0], latencies=[1.0, 1.0, 0.5])
    (tmp_path / "a.json").write_text(json.dumps(raw))
    assert client_numbers(str(tmp_path / "a.json"))["users"] == 1
    raw.update(failed=1, errors=["", "", "HTTP 400: too long"])
    (tmp_path / "b.json").write_text(json.dumps(raw))
    assert client_numbers(str(tmp_path / "b.json"))["error"].startswith("1 of 4 requests failed")


def test_the_chat_log_becomes_the_clients_dataset(tmp_path):
    from inferlab.lab.sweep_vllm import LOG
    from inferlab.model.loader import default_tokenizer
    tok = default_tokenizer()
    n = chat_dataset(LOG, str(tmp_path / "d.json"), 1, tok)
    rows = [json.loads(line) for line in open(LOG, encoding="utf-8") if line.strip()]
    data = json.loads((tmp_path / "d.json").read_text())
    assert n == len(rows) == len(data)
    texts = [d["conversations"][0]["value"] for d in data]
    assert all(t.endswith("<|im_start|>assistant\n") for t in texts)    # the template's
    assert all(t.count("[repeat 2]") == 1 for t in texts)
    tool = next(t for t, r in zip(texts, rows) if r["messages"][-1]["role"] == "tool")
    assert "<|im_start|>tool\n" in tool                      # a tool turn kept
    (tmp_path / "bad.jsonl").write_text('{"prompt_tokens": [1, 2]}\n')
    with pytest.raises(InvalidInputError, match="bad.jsonl:1"):
        chat_dataset(str(tmp_path / "bad.jsonl"), str(tmp_path / "x.json"), 0, tok)


def test_the_figure_draws_both_frontiers_and_the_answers():
    from inferlab.lab.drawings import frontier_pair
    from inferlab.tools import figure_check
    c = carry_over({"inferlab": LAB, "vLLM": VLLM}, min_per_user=9.5)
    fig = frontier_pair.figure({"inferlab": LAB, "vLLM": VLLM}, c)
    tr = {t.name: t for t in fig.data}
    assert list(tr["inferlab: points"].customdata) == [0, 1, 2, 3]
    assert list(tr["vLLM: points"].customdata) == [0, 1, 2]          # point 3 failed there
    assert list(tr["inferlab: frontier"].customdata) == [3, 1, 2, 0]
    assert list(tr["vLLM: frontier"].customdata) == [2, 0]
    assert tr["vLLM: frontier"].line.dash == "dash"
    assert list(tr["each engine's best"].customdata) == [1, 2]
    assert list(tr["objective: ≥ 9.5 per user"].x) == [9.5, 9.5]
    title = fig.layout.title.text
    assert "vLLM with the lab's best (point 1): 12% less in total than with its own (point 2)" \
        in title
    assert "not plotted (vLLM): point 3" in title
    assert figure_check.colour_problems(fig, "frontier_pair") == []


@pytest.mark.full("tests/test_sweep_vllm.py::test_the_figure_draws_both_frontiers_and_the_answers")
def test_the_article_profile_prints_the_pair(tmp_path):
    from playwright.sync_api import sync_playwright

    from inferlab.lab import article
    from inferlab.lab.drawings import frontier_pair
    from inferlab.tools import figure_check
    from inferlab.tools.jupyter import CHROMIUM, CHROMIUM_ARGS
    fig = frontier_pair.figure({"inferlab": LAB, "vLLM": VLLM},
                               carry_over({"inferlab": LAB, "vLLM": VLLM}, 9.5))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": article.COLUMN, "height": 900})
        for dark in (False, True):
            twin = article.profile(fig, dark=dark, cores=2)
            probs = figure_check.text_problems(
                figure_check.text_boxes(page, figure_check.svg_of(twin)))
            assert probs == [], (dark, probs)
        browser.close()


@pytest.mark.full("tests/test_sweep.py::test_bench_sweep_command_writes_the_result_file")
@pytest.mark.vllm
@pytest.mark.slow
def test_a_two_point_grid_on_both_servers(tmp_path):
    from inferlab.connect.front.machine import VllmServerError, vllm_python
    try:
        vllm_python()
    except VllmServerError as e:
        pytest.fail(str(e))
    from inferlab.cli import main
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"max_num_seqs": 1}, {"max_num_seqs": 4}]))
    out = tmp_path / "pair.json"
    argv = ["bench", "sweep", str(grid), "--vllm", "--requests", "4", "--output-len", "6",
            "--repeats", "2", "--rates", "8", "--min-per-user", "0", "--out", str(out)]
    assert main(argv) == 0
    res = json.loads(out.read_text())
    assert res["format"] == "inferlab-sweep-vllm" and res["command"].endswith(out.name)
    assert {"date", "cpu", "flags", "cores", "load", "warning", "label"} <= set(res)
    r = res["results"]
    assert set(r["engines"]) == {"inferlab", "vLLM"}
    # A B A B at each point: inferlab then vLLM, repeat by repeat
    assert [(x["point"], x["server"], x["repeat"]) for x in r["runs"]] == [
        (p, s, k) for p in (0, 1) for k in (0, 1) for s in ("inferlab", "vLLM")]
    for x in r["runs"]:
        n = x["numbers"]
        assert n["error"] is None and n["requests"] == 4 and 1 <= n["users"] <= 4
        defined = n["output_tok_s_per_user"] == pytest.approx(n["output_tok_s"] / n["users"])
        assert defined, n                          # the definition, not a speed
        assert "--dataset-name sharegpt" in x["command"] and "--request-rate 8" in x["command"]
    for engine, rows in r["engines"].items():
        assert [row["knobs"] for row in rows] == [{"max_num_seqs": 1}, {"max_num_seqs": 4}]
        for row in rows:
            assert row["error"] is None, (engine, row["error"])
            mine = [x["numbers"]["output_tok_s"] for x in r["runs"]
                    if x["server"] == engine and x["point"] == row["point"]]
            ranged = row["metrics"]["spread"]["output_tok_s"] == [min(mine), max(mine)]
            assert ranged, (row, mine)             # the row's range is its runs' (arithmetic)
    assert "--max-num-seqs 1" in r["servers"]["0"]["vLLM"]
    assert "--max-num-seqs 4" in r["servers"]["1"]["inferlab"]
    # the answers are the arithmetic's on the rows written
    c = r["carry_over"]
    assert c == carry_over(r["engines"], 0.0)
    assert c["best"]["inferlab"]["point"] == best(r["engines"]["inferlab"])["point"]
    assert (tmp_path / "pair.png").exists() and (tmp_path / "pair.svg").exists()
    assert (tmp_path / "pair.caption.md").exists()
