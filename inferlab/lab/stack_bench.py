"""The same model on two serving stacks, measured from outside by vLLM's own benchmark client.

    res = measure_stacks(smoke=True)     # both servers' metrics and their greedy agreement
    res["summary"]["inf"]["vLLM"]["p50_ttft_ms"]     # {"median", "lo", "hi", "n"}
    res["greedy"]["agree"], res["greedy"]["of"]

``inferlab serve`` and ``vllm serve`` (serving_stacks.py) on the same weights (the weights
cache's transformers directory, which inferlab's engine reads too), the same
``max_num_seqs`` and ``max_model_len``. For each request rate (Poisson arrivals; ``inf``: all
at once) ``vllm bench serve`` (the openai completions backend, the random dataset: prompts of
random token ids, ``--ignore-eos`` so every answer has exactly ``output_len`` tokens,
``--temperature 0``) runs against one server, then the other, A B A B, ``repeats`` times.
Each run (a repeat at a rate) has a seed of its own (``run_seed``): both servers get the same
prompts and arrival times, and no prompt is sent twice to one server (a prefix cache would
remember it; until 2026-12-07 a repeat's rates shared one seed, so after the first rate
inferlab's 16-token blocks found most of each prompt cached, vLLM's 128-token ones little).
The client's saved JSON gives TTFT, TPOT, ITL (p50, p99) and throughput; each is reported as
median and range.

Before timing, the same few prompts (completions and chat, temperature 0) go to both servers:
how many answers agree, word for word, is the ``greedy`` part; it is the warm-up too.

``against="inferlab"`` puts a second ``inferlab serve`` where vLLM would be (keyed
``AGAIN``): the same engine twice, the same client, the same protocol; what differs then is
the run-to-run spread alone (the stack claim's falsifiability test, chapter 14).

Placement on this machine's CPUs (``PLACEMENT``): both servers are started once and stay up;
while one is measured, the other's whole process group is stopped (SIGSTOP) and continued
after. The server under test has every CPU; the client is neither pinned nor niced.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import shlex
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

from pathlib import Path

from ..connect.front.machine import cpu_list, free_port
from ..errors import InvalidInputError
from ..serve.timing import read_lines
from ..serve.timing import summarize as summarize_timing
from .protocol import cpu_busy_seconds, cpus, others_cpus, others_warning, spread
from .serving_stacks import (START_TIMEOUT_S, ServerFailed, die_with_parent, group_alive,
                             inferlab_server, reaped, vllm_cli, vllm_server)

MODEL_NAME = "SmolLM2-135M-Instruct"
REPO = Path(__file__).resolve().parents[2]
SIZES = {   # full run / smoke run (CI, Binder): rates up to saturation, then all at once
    False: dict(rates=(1.0, 2.0, 4.0, math.inf), num_prompts=32, input_len=128,
                output_len=64, repeats=3, greedy_prompts=4, greedy_tokens=32),
    True: dict(rates=(8.0,), num_prompts=4, input_len=32, output_len=8, repeats=1,
               greedy_prompts=2, greedy_tokens=8),
}
AGAINST = ("vLLM", "inferlab")       # what the second server runs
AGAIN = "inferlab again"              # the second server's key when it is inferlab too
PERCENTILES = ("p50", "p99")
LATENCIES = ("ttft", "tpot", "itl")
KEYS = tuple(f"{p}_{m}_ms" for m in LATENCIES for p in PERCENTILES) + (
    "output_throughput", "request_throughput", "completed", "failed", "duration",
    "total_input_tokens", "total_output_tokens", "max_concurrent_requests")
GREEDY = (("completion", "The capital of France is"),
          ("chat", "What is a KV cache? Answer in one sentence."),
          ("completion", "def fibonacci(n):"),
          ("chat", "Name the three primary colours."))
PLACEMENT = ("both servers started once and kept up; while one is measured the other's whole "
             "process group is stopped (SIGSTOP), continued (SIGCONT) after, so the idle one "
             "takes no CPU (vLLM's idle engine core polls); the server under test has every "
             "CPU (inferlab: torch threads = CPUs; vLLM: VLLM_CPU_OMP_THREADS_BIND={cpus}); "
             "the client (`vllm bench serve`, one Python asyncio process) is neither pinned "
             "nor niced: it shares the CPUs with the server, and its CPU seconds per run "
             "(its start-up included) are recorded")


class ClientFailed(ServerFailed):
    """``vllm bench serve`` failed or wrote no result; the message ends with its output."""


def rate_key(rate: float) -> str:
    return "inf" if math.isinf(rate) else f"{rate:g}"


def client_command(cli: str, url: str, tokenizer: str, rate: float, seed: int, num_prompts: int,
                   input_len: int, output_len: int, result_dir: str, filename: str,
                   dataset=None) -> list[str]:
    """``dataset``: the client's dataset flags in place of the random one's."""
    data = dataset or ["--dataset-name", "random", "--random-input-len", str(input_len),
                       "--random-output-len", str(output_len)]
    return [cli, "bench", "serve", "--backend", "openai", "--base-url", url,
            "--endpoint", "/v1/completions", "--model", MODEL_NAME, "--tokenizer", tokenizer,
            *data, "--num-prompts", str(num_prompts),
            "--request-rate", rate_key(rate), "--burstiness", "1.0", "--seed", str(seed),
            "--ignore-eos", "--temperature", "0", "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", "50,99", "--save-result", "--save-detailed",
            "--result-dir", result_dir, "--result-filename", filename, "--disable-tqdm"]


def run_seed(seed: int, repeat: int, rate_index: int, num_rates: int) -> int:
    """The client's seed for one run: the same for both servers, new for every repeat and
    rate, so no prompt of the random dataset reaches a server twice."""
    return seed + repeat * num_rates + rate_index


def read_client_result(path: str) -> dict:
    """The numbers of one ``vllm bench serve`` result file (KEYS), and its distinct errors."""
    with open(path) as f:
        data = json.load(f)
    missing = [k for k in KEYS[:len(LATENCIES) * len(PERCENTILES)] + ("completed",)
               if k not in data]
    if missing:
        raise ClientFailed(f"{path} lacks {', '.join(missing)}: not a `vllm bench serve` result "
                           "saved with --percentile-metrics ttft,tpot,itl --metric-percentiles "
                           "50,99")
    out = {k: data.get(k) for k in KEYS}
    out["errors"] = sorted({str(e)[-300:] for e in data.get("errors") or [] if e})[:3]
    return out


def summarize(runs: list[dict]) -> dict:
    """rate -> server -> key -> spread (median, lo, hi, n) over the repeats."""
    out: dict = {}
    for r in runs:
        out.setdefault(r["rate"], {}).setdefault(r["server"], []).append(r["metrics"])
    return {rate: {srv: {k: spread(m[k] for m in ms).as_dict() for k in KEYS
                         if all(isinstance(m.get(k), (int, float)) for m in ms)}
                   for srv, ms in by.items()} for rate, by in out.items()}


def _post(url: str, body: dict, timeout: float = 300.0) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise ServerFailed(f"{url} answered {e.code}: {e.read()[:500]!r}") from None


def greedy_agreement(urls: dict[str, str], n: int, max_tokens: int) -> dict:
    """The first ``n`` GREEDY prompts to every server, temperature 0: which answers agree."""
    prompts = []
    for kind, text in GREEDY[:n]:
        base = {"model": MODEL_NAME, "max_tokens": max_tokens, "temperature": 0.0, "seed": 0}
        texts = {}
        for name, url in urls.items():
            if kind == "chat":
                reply = _post(url + "/v1/chat/completions",
                              {**base, "messages": [{"role": "user", "content": text}]})
                texts[name] = reply["choices"][0]["message"]["content"]
            else:
                reply = _post(url + "/v1/completions", {**base, "prompt": text})
                texts[name] = reply["choices"][0]["text"]
        prompts.append({"kind": kind, "prompt": text, "texts": texts,
                        "same": len(set(texts.values())) == 1})
    return {"agree": sum(p["same"] for p in prompts), "of": len(prompts),
            "max_tokens": max_tokens, "prompts": prompts}


def run_client(argv: list[str], env: dict, log_path: str, timeout: float) -> tuple[float, float]:
    """Run the client to its end in a process group of its own (killed on a timeout or an
    interrupt); (wall seconds, its CPU seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    with open(log_path, "wb") as log:
        on_main = threading.current_thread() is threading.main_thread()
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                             preexec_fn=die_with_parent if on_main else None)
        try:
            p.wait(timeout)
        except BaseException as e:           # the timeout, Ctrl-C, SIGTERM: no client left
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            if isinstance(e, subprocess.TimeoutExpired):
                raise ClientFailed(f"`vllm bench serve` did not finish within {timeout:.0f} s;"
                                   f" its output ends:\n{_tail(log_path)}") from None
            raise
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        raise ClientFailed(f"`vllm bench serve` exited with code {p.returncode}; its output "
                           f"ends:\n{_tail(log_path)}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _tail(path: str, lines: int = 30) -> str:
    with open(path, "rb") as f:
        return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-lines:])


def weights_dir_for_vllm(scratch: str) -> str:
    """The default model's transformers directory: its weights-cache entry (written now if
    missing), else (the cache is off) an export into ``scratch``."""
    from ..model import weights_cache
    from ..model.loader import DEFAULT_GGUF, export_hf, load_model, smollm2_dir
    entry = weights_cache.existing_entry(os.path.join(smollm2_dir(), DEFAULT_GGUF), "float32")
    if entry and os.path.isfile(os.path.join(entry, "config.json")):
        return entry
    entry = load_model(None).cache_path
    return entry if entry else export_hf(None, os.path.join(scratch, "model"))


def measure_stacks(smoke: bool = False, *, rates=None, num_prompts: int | None = None,
                   input_len: int | None = None, output_len: int | None = None,
                   repeats: int | None = None, seed: int = 0, max_num_seqs: int = 64,
                   max_model_len: int = 2048, greedy_prompts: int | None = None,
                   greedy_tokens: int | None = None, against: str = "vLLM",
                   timing: bool = False, progress=None) -> dict:
    """Both stacks under ``vllm bench serve``, A B A B (see the module's docstring); sizes
    default to ``SIZES[smoke]``. ``against``: the second server, "vLLM" or "inferlab" (the
    same stack twice). ``timing``: ``inferlab serve --timing``, each inferlab run's
    ``server_timing`` the medians of where its requests' time went (serve/timing.py).
    ``progress``: a callable given one line per step."""
    if against not in AGAINST:
        raise InvalidInputError(f"against must be one of {AGAINST}, got {against!r}")
    given = dict(rates=rates, num_prompts=num_prompts, input_len=input_len,
                 output_len=output_len, repeats=repeats, greedy_prompts=greedy_prompts,
                 greedy_tokens=greedy_tokens)
    cfg = {**SIZES[bool(smoke)], **{k: v for k, v in given.items() if v is not None}}
    cfg["rates"] = tuple(float(r) for r in cfg["rates"])
    if not cfg["rates"] or not all(r > 0 for r in cfg["rates"]):
        raise InvalidInputError(f"rates must be request rates > 0 (inf: all at once), got "
                                f"{list(cfg['rates'])}")
    say = progress or (lambda line: None)
    load_before = os.getloadavg()[0]
    runs = []
    with tempfile.TemporaryDirectory(prefix="inferlab-stacks-") as scratch, \
            contextlib.ExitStack() as up:
        model_dir = weights_dir_for_vllm(scratch)
        tpath, offset = f"{scratch}/timing.jsonl", 0
        servers = {"inferlab": inferlab_server(MODEL_NAME, free_port(), f"{scratch}/inferlab.log",
                                               max_num_seqs, max_model_len,
                                               ("--timing", tpath) if timing else ())}
        if against == "vLLM":
            servers["vLLM"] = vllm_server(model_dir, MODEL_NAME, free_port(),
                                          f"{scratch}/vllm.log", scratch, max_num_seqs,
                                          max_model_len)
        else:
            servers[AGAIN] = inferlab_server(MODEL_NAME, free_port(), f"{scratch}/again.log",
                                             max_num_seqs, max_model_len)
        for srv in servers.values():
            up.callback(srv.stop)
            srv.launch()
        up.enter_context(reaped([s.pgid for s in servers.values()]))   # first out of `up`
        say(f"starting {' and '.join(f'{k} ({s.url})' for k, s in servers.items())} ...")
        for srv in servers.values():
            srv.wait_ready(START_TIMEOUT_S)
        cli, env, version = vllm_cli(scratch)
        greedy = greedy_agreement({k: s.url for k, s in servers.items()},
                                  cfg["greedy_prompts"], cfg["greedy_tokens"])
        say(f"greedy answers agree on {greedy['agree']} of {greedy['of']} prompts")
        timeout = 300 + cfg["num_prompts"] * (0.3 * cfg["output_len"] + 2 / min(cfg["rates"]))
        t0, busy, busy0 = time.perf_counter(), 0.0, cpu_busy_seconds()
        for rep in range(cfg["repeats"]):
            for k, rate in enumerate(cfg["rates"]):
                this_seed = run_seed(seed, rep, k, len(cfg["rates"]))
                for name, srv in servers.items():
                    fname = f"{name}-{rate_key(rate)}-{rep}.json"
                    argv = client_command(cli, srv.url, model_dir, rate, this_seed,
                                          cfg["num_prompts"], cfg["input_len"],
                                          cfg["output_len"], scratch, fname)
                    with contextlib.ExitStack() as idle:
                        for other in servers.values():
                            if other is not srv:
                                idle.enter_context(other.frozen())
                        c0 = srv.cpu_seconds()
                        wall, client_cpu = run_client(argv, env, f"{scratch}/client.log",
                                                      timeout)
                        server_cpu = srv.cpu_seconds() - c0
                    busy += server_cpu + client_cpu
                    m = read_client_result(os.path.join(scratch, fname))
                    runs.append({"rate": rate_key(rate), "server": name, "repeat": rep,
                                 "seed": this_seed, "command": shlex.join(argv),
                                 "metrics": m, "server_cpu_s": server_cpu,
                                 "client_cpu_s": client_cpu, "client_wall_s": wall})
                    if timing and name == "inferlab":
                        lines, offset = read_lines(tpath, offset)
                        runs[-1]["server_timing"] = summarize_timing(lines)
                    say(f"  rate {rate_key(rate):>4} {name:8s} repeat {rep + 1}: "
                        f"{m['completed']}/{cfg['num_prompts']} done, TTFT p50 "
                        f"{m['p50_ttft_ms']:.1f} ms, TPOT p50 {m['p50_tpot_ms']:.1f} ms, "
                        f"{m['output_throughput']:.1f} tok/s")
        timed = time.perf_counter() - t0
        others = others_cpus(busy0, cpu_busy_seconds(), busy, timed)
        commands = {k: shlex.join(s.argv) for k, s in servers.items()}
    left = {k: s.pgid for k, s in servers.items() if s.pgid and group_alive(s.pgid)}
    load_after = os.getloadavg()[0]
    warning = others_warning(others, cpus(), "the servers' and the client's", "latencies")
    return portable({"config": {**cfg, "rates": [rate_key(r) for r in cfg["rates"]], "seed": seed,
                       "max_num_seqs": max_num_seqs, "max_model_len": max_model_len,
                       "against": against,
                       "model": MODEL_NAME, "model_dir": model_dir, "dtype": "float32"},
            "clock": "wall: the client times each request (time.perf_counter); inferlab "
                     "serve runs its engine on the wall clock (it has no simulated one)",
            "placement": PLACEMENT.format(cpus=cpu_list()), "cpus": cpus(),
            "servers": commands, "vllm_version": version,
            "client": f"vllm bench serve (vLLM {version}), .venv-vllm",
            "greedy": greedy, "summary": summarize(runs), "runs": runs,
            "load_before": load_before, "load_after": load_after,
            "timed_wall_s": timed, "others_cpus": others, "warning": warning,
            "process_groups": {k: s.pgid for k, s in servers.items()},
            "left_running": left})


def portable(res: dict) -> dict:
    """``res`` with this machine's paths written as a reader's would be: the repository as
    ``.``, the home directory as ``~`` and scratch folders as ``$TMP`` (a result file names
    no machine's paths)."""
    text = json.dumps(res)
    for path, name in ((REPO, "."), (os.path.expanduser("~"), "~"),
                       (tempfile.gettempdir(), "$TMP")):
        text = text.replace(json.dumps(str(path))[1:-1], name)
    return json.loads(text)
