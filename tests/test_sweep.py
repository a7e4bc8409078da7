"""The sweep (inferlab/lab/sweep.py): a grid of engine knobs on the real engine (the tiny
model here), a row per point with its trace on disk, failing points as rows, Stop keeping the
finished points, the Pareto frontier, vLLM's --serve-params shape, Lab.sweep and the CLI."""
import json
import threading

import pytest

from inferlab.bench.sweep import parse_serve_params, read_serve_params
from inferlab.errors import InvalidInputError
from inferlab.lab.sweep import Sweep
from inferlab.lab.sweep_grid import grid_points
from inferlab.lab.sweep_result import SweepResult, pareto, peak_in_flight
from inferlab.observe.trace import Trace
from inferlab.sim import request_log

METRIC_KEYS = {"output_tok_s", "output_tok_s_per_user", "ttft_p50_ms", "ttft_p99_ms",
               "itl_p50_ms", "itl_p99_ms", "spread"}
ROW_KEYS = {"point", "knobs", "metrics", "trace_path", "error", "clock", "projection"}
SMALL = dict(model="tiny", workload="synthetic", num_requests=4, max_tokens=6,
             base={"block_size": 4, "num_blocks": 64})


def test_a_2x2_grid_gives_four_rows_with_their_traces_on_disk(tmp_path):
    seen = []
    sw = Sweep({"max_num_seqs": [1, 4], "chunked_prefill": [True, False]}, repeats=2,
               out_dir=tmp_path, **SMALL)
    res = sw.run(progress=lambda p: seen.append((p["point"], p["repeat"])))
    # wall clock: repeats interleaved across the points, A B C D A B C D
    assert seen == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1), (2, 1), (3, 1), (None, None)]
    assert [r["point"] for r in res.rows] == [0, 1, 2, 3]
    assert [r["knobs"] for r in res.rows] == [
        {"max_num_seqs": 1, "enable_chunked_prefill": True},
        {"max_num_seqs": 1, "enable_chunked_prefill": False},
        {"max_num_seqs": 4, "enable_chunked_prefill": True},
        {"max_num_seqs": 4, "enable_chunked_prefill": False}]
    for r in res.rows:
        assert set(r) == ROW_KEYS and r["error"] is None and r["clock"] == "wall"
        assert not r["projection"] and set(r["metrics"]) == METRIC_KEYS
        lo, hi = r["metrics"]["spread"]["output_tok_s"]
        median = r["metrics"]["output_tok_s"]
        within = lo <= median <= hi                # the median lies in its range (arithmetic)
        assert within, r["metrics"]
        assert r["trace_path"] == str(tmp_path / f"point-{r['point']:02d}.trace.jsonl")
        tr = Trace.load(r["trace_path"])          # on disk, loadable, the point's own engine
        assert len(tr) > 0 and tr.meta["config"]["max_num_seqs"] == r["knobs"]["max_num_seqs"]
        assert tr.meta["config"]["enable_chunked_prefill"] == r["knobs"]["enable_chunked_prefill"]
    # all 4 requests arrive at once: 4 users at every point (vLLM's peak in flight)
    assert [p["users"] for p in res.meta["points"]] == [[4, 4]] * 4
    m = res.rows[2]["metrics"]
    per_user, throughput = m["output_tok_s_per_user"], m["output_tok_s"]
    defined = per_user == pytest.approx(throughput / 4)    # the definition, not a speed
    assert defined, m
    assert res.meta["repeats"] == 2 and "interleaved" in res.meta["label"]
    assert {"command", "date", "cpu", "flags", "load", "warning"} <= set(res.meta)
    back = SweepResult.from_json(res.to_json(tmp_path / "sweep.json"))
    assert back.rows == res.rows and back.meta["command"] == res.meta["command"]
    assert back.frontier() == res.frontier() and res.frontier()


def test_a_point_whose_kv_budget_is_too_small_is_a_row_with_its_error(tmp_path):
    sw = Sweep({"num_blocks": [2, 64]}, clock="H100", out_dir=tmp_path, **SMALL)
    res = sw.run(progress=False)
    bad, good = res.rows
    assert bad["error"].startswith("CapacityError") and "KV cache" in bad["error"]
    assert bad["metrics"] is None and bad["trace_path"] is None
    priced = good["metrics"]["output_tok_s"]       # the simulated H100 clock's
    assert good["error"] is None and priced > 0
    assert res.frontier() == [1]
    # a simulated clock: a projection, labelled with the cost model's published error
    for r in res.rows:
        assert r["projection"] and "a projection" in r["clock"] and "published" in r["clock"]
    assert res.meta["projection_error"]["n"] > 0 and res.meta["repeats"] == 1


def test_stop_keeps_the_finished_points(tmp_path):
    stop = threading.Event()
    rows = []

    def first_then_stop(row, runs_row):
        rows.append(row)
        assert runs_row["requests"] == 4 and runs_row["max_num_seqs"] == row["knobs"]["max_num_seqs"]
        stop.set()
    sw = Sweep({"max_num_seqs": [1, 2, 4]}, clock="H100", out_dir=tmp_path, **SMALL)
    res = sw.run(progress=False, stop=stop, on_point=first_then_stop)
    assert [r["point"] for r in res.rows] == [0] and rows == res.rows
    assert res.meta["stopped"] and res.rows[0]["error"] is None
    assert not (tmp_path / "point-01.trace.jsonl").exists()


def test_stop_during_a_point_aborts_it_and_leaves_no_trace_of_it(tmp_path):
    from waiting import wait_until
    stop = threading.Event()
    sw = Sweep({"max_num_seqs": [2, 4]}, out_dir=tmp_path, clock="H100",
               **{**SMALL, "num_requests": 60, "max_tokens": 24})
    part = tmp_path / "point-00.trace.jsonl.part"
    setter = threading.Thread(target=lambda: (wait_until(part.exists, 120,
                                                         what="point 0's trace"), stop.set()))
    setter.start()
    res = sw.run(progress=False, stop=stop)
    setter.join()
    assert res.rows == [] and res.meta["stopped"] and res.meta["points"] == []
    # aborted at a step boundary: fewer steps than a whole run needs (each step gives at
    # most one token to each of max_num_seqs=2 requests)
    from inferlab.lab.runs import lab_workload
    wl = lab_workload("random tokens: synthetic", 60, 0.0, 24, None)
    least = sum(r.max_tokens for r in wl.requests) // 2
    assert res.meta["stopped_at"]["point"] == 0 and res.meta["stopped_at"]["steps"] < least
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_frontier_of_synthetic_rows():
    def r(i, per_user, tok_s, error=None):
        m = None if error else {"output_tok_s": tok_s, "output_tok_s_per_user": per_user}
        return {"point": i, "knobs": {}, "metrics": m, "trace_path": None, "error": error,
                "clock": "wall", "projection": False}
    rows = [r(0, 10, 100), r(1, 20, 80), r(2, 5, 90),      # 2 is beaten by 0 on both
            r(3, 30, 40), r(4, 99, 999, error="CapacityError: too small"),
            r(5, 20, 70),                                   # beaten by 1
            r(6, 30, 40)]                                   # equal to 3: neither beats it
    assert SweepResult(rows).frontier() == [0, 1, 3, 6]
    assert pareto([(1, 1), (2, 2)]) == [1] and pareto([]) == []


def test_peak_in_flight_counts_overlaps_not_touching_ends():
    class M:
        def __init__(self, a, f):
            self.arrival_time, self.finish_time = a, f

    class O:
        def __init__(self, a, f):
            self.metrics, self.finished = M(a, f), True
    assert peak_in_flight([O(0, 1), O(1, 2), O(2, 3)]) == 1
    assert peak_in_flight([O(0, 3), O(1, 2), O(1.5, 4)]) == 3


def test_vllm_serve_params_shapes_parse_and_unknown_names_fail(tmp_path):
    pts, names = parse_serve_params([{"max_num_seqs": 32, "max_num_batched_tokens": 1024},
                                     {"max-num-seqs": 64, "enable_prefix_caching": False}])
    assert pts == [{"max_num_seqs": 32, "max_num_batched_tokens": 1024},
                   {"max_num_seqs": 64, "enable_prefix_caching": False}]
    assert names == [None, None]
    p = tmp_path / "params.json"
    p.write_text(json.dumps({"small": {"block_size": 16, "num_gpu_blocks_override": 64},
                             "big": {"block-size": 32, "enable-chunked-prefill": True,
                                     "dtype": "half", "scheduler": "static"}}))
    pts, names = read_serve_params(p)
    assert names == ["small", "big"]
    assert pts == [{"block_size": 16, "num_blocks": 64},
                   {"block_size": 32, "enable_chunked_prefill": True, "dtype": "float16",
                    "scheduler": "static"}]
    assert grid_points(pts) == pts
    with pytest.raises(InvalidInputError, match="gpu_memory_utilization.*no counterpart"):
        parse_serve_params([{"gpu_memory_utilization": 0.9}])
    with pytest.raises(InvalidInputError, match="list of dicts"):
        parse_serve_params("max_num_seqs")
    with pytest.raises(InvalidInputError, match="unknown sweep knob 'batch'"):
        Sweep({"batch": [1, 2]})
    with pytest.raises(InvalidInputError, match="unknown GPU 'H999'"):
        Sweep({"max_num_seqs": [1]}, clock="H999")
    assert grid_points({"max_num_seqs": [1, 2], "block_size": [4]}) == [
        {"max_num_seqs": 1, "block_size": 4}, {"max_num_seqs": 2, "block_size": 4}]


def test_a_kv_budget_given_one_way_replaces_the_base_given_the_other():
    sw = Sweep({"kv_cache_memory": [1 << 20], "prefix_caching": [False]}, clock="H100",
               base={"num_blocks": 128, "block_size": 16, "max_num_seqs": 4})
    assert sw.engine_kwargs(0) == {"block_size": 16, "max_num_seqs": 4,
                                   "kv_cache_memory": 1 << 20, "enable_prefix_caching": False,
                                   "clock": "H100", "sim_model": "llama-3-8b"}
    sw = Sweep({"num_blocks": [8]}, base={"kv_cache_memory": 1 << 20, "dtype": "bfloat16"})
    assert sw.engine_kwargs(0) == {"dtype": "bfloat16", "num_blocks": 8, "clock": "wall"}


def test_bench_sweep_command_writes_the_result_file(tmp_path, capsys):
    from inferlab.cli import main
    params = tmp_path / "params.json"
    params.write_text(json.dumps([{"max_num_seqs": 1}, {"max_num_seqs": 4}]))
    out = tmp_path / "res.json"
    assert main(["bench", "sweep", str(params), "--model", "tiny", "--workload", "synthetic",
                 "--requests", "3", "--repeats", "1", "--clock", "H100", "--out",
                 str(out)]) == 0
    res = SweepResult.from_json(out)
    assert len(res) == 2 and res.meta["command"].startswith("inferlab bench sweep")
    assert res.meta["names"] == [None, None] and "frontier" in capsys.readouterr().out


def test_a_request_log_is_a_workload(tmp_path):
    from inferlab.lab.sweep_grid import resolve_workload
    from inferlab.model.loader import load_model
    tok = load_model("tiny").tokenizer
    wl = resolve_workload(request_log.example_path(), tok, num_requests=1, max_tokens=8, rate=0, seed=0)
    assert len(wl) > 0 and max(r.max_tokens for r in wl.requests) <= 8


def test_lab_sweep_appends_a_row_per_point(tmp_path):
    from inferlab.widgets.lab import Lab
    lab = Lab("tiny", workload_kind="random tokens: synthetic", num_requests=4, max_tokens=6,
              num_blocks=64, block_size=4, clock="H100")
    th = lab.sweep({"max_num_seqs": [1, 4]}, out_dir=tmp_path)
    th.join(300)
    assert not th.is_alive() and lab.status.value.startswith("done: sweep of 2 points")
    assert [r["max_num_seqs"] for r in lab.runs.rows] == [1, 4]
    assert len(lab.last_sweep) == 2 and lab.last_sweep.rows[0]["projection"]
    assert not lab.run_button.disabled and lab.stop_button.disabled
    assert lab.progress.value == lab.progress.max == 2          # the bar, full
    from inferlab.widgets.sweep_view import SweepView          # the frontier, clickable
    view, = lab.frontier.children
    assert isinstance(view, SweepView) and len(view.rows) == 2
    lab.compare(1, 2)                     # replays the sweep points' trace files
    assert len(lab.comparison.children) == 2


def test_lab_sweep_button_reads_the_grid_and_says_a_bad_one(tmp_path):
    from inferlab.widgets.lab import Lab
    lab = Lab("tiny", workload_kind="random tokens: synthetic", num_requests=2, max_tokens=4,
              num_blocks=64, block_size=4, clock="H100")
    lab.sweep_grid.value = '{"max_num_seqs": [1, 2'
    lab.sweep_button.click()
    assert lab.status.value.startswith("sweep grid: JSONDecodeError") and not lab.running
    lab.sweep_grid.value = '{"max_num_seqs": [1, 2]}'
    lab.sweep_button.click()
    lab.thread.join(300)
    assert lab.status.value.startswith("done: sweep of 2 points") and len(lab.runs) == 2


def test_lab_sweep_stop_keeps_the_finished_points(tmp_path):
    from waiting import wait_until

    from inferlab.widgets.lab import Lab
    lab = Lab("tiny", workload_kind="random tokens: synthetic", num_requests=30, max_tokens=24,
              num_blocks=64, block_size=4, clock="H100")
    th = lab.sweep({"max_num_seqs": [1, 2, 3, 4]}, out_dir=tmp_path)
    wait_until(lambda: len(lab.runs) >= 1, 120, what="the first point's row")
    lab.stop()
    th.join(120)
    assert not th.is_alive() and lab.status.value.startswith("stopped: sweep of")
    res = lab.last_sweep
    assert res.meta["stopped"] and 1 <= len(res) < 4 and len(lab.runs) == len(res)
