"""`inferlab bench serve`: ``inferlab serve`` beside vLLM's server on the same weights, both
measured from outside by vLLM's own benchmark client, ``vllm bench serve``.

    inferlab bench serve                  Poisson rates 1, 2, 4 req/s and all at once (inf);
                                          32 prompts of 128 random tokens, 64 new tokens each;
                                          A B A B x 3
    inferlab bench serve --smoke          one rate, 4 prompts of 32 tokens, 8 new, once
    inferlab bench serve --timing         and where inferlab's time went (inferlab serve
                                          --timing): handler, driver, step, hand-off, write
    inferlab bench serve --rates 0.5 1 inf --requests 64 --input-len 256 --output-len 32
                         --repeats 5 --out docs/results/serve-xeon.json

Prints TTFT, TPOT and ITL (p50, p99), output tok/s and the requests completed, for each rate
and server side by side (median and range over the repeats), how many greedy answers of the
two servers agree, how the client and the servers were placed on the CPUs, and a warning when
the machine was busy. The measuring is ``inferlab.lab.stack_bench.measure_stacks`` (a chapter
calls it without this command); ``--out`` writes its dict as a result file.
"""
from __future__ import annotations

from inferlab.lab.stack_bench import measure_stacks
from inferlab.lab.stack_table import (HEADER, SLOWEST_HEADER, TIMING_HEADER, gaps_sentence, rows,
                                     slowest_rows, timing_rows)

from .common import table

def main(smoke: bool = False, rates=None, requests: int | None = None,
         input_len: int | None = None, output_len: int | None = None,
         repeats: int | None = None, timing: bool = False, out=print) -> dict:
    res = measure_stacks(smoke, rates=rates, num_prompts=requests, input_len=input_len,
                         output_len=output_len, repeats=repeats, timing=timing, progress=out)
    c = res["config"]
    out(f"\n{c['model']} fp32, {c['num_prompts']} prompts x {c['input_len']} random tokens -> "
        f"{c['output_len']} tokens (ignore_eos, temperature 0), Poisson arrivals, seed "
        f"{c['seed']} + run (each repeat and rate its own); max_num_seqs "
        f"{c['max_num_seqs']}, max_model_len "
        f"{c['max_model_len']}; A B A B x {c['repeats']}, median (range); client: "
        f"{res['client']}; clock: {res['clock']}")
    out(f"placement on {res['cpus']} CPUs: {res['placement']}")
    table(out, HEADER, rows(res))
    if len(res["summary"][next(iter(res["summary"]))]) > 1:
        out("against the goal (medians over the repeats): " + gaps_sentence(res))
    if timing:
        out("\nwhere inferlab's time went (inferlab serve --timing; ms, the median request's "
            "parts, median over the repeats; TPOT parts per token):")
        table(out, TIMING_HEADER, timing_rows(res))
        out("the slowest first token of each run (median over the repeats), in parts:")
        table(out, SLOWEST_HEADER, slowest_rows(res))
    g = res["greedy"]
    out(f"greedy (temperature 0, {g['max_tokens']} tokens): the two servers' answers agree on "
        f"{g['agree']} of {g['of']} prompts")
    for p in g["prompts"]:
        if not p["same"]:
            out(f"  differ on {p['kind']} {p['prompt']!r}: " + "; ".join(
                f"{k}: {v[:80]!r}" for k, v in p["texts"].items()))
    out(f"load average {res['load_before']:.2f} before, {res['load_after']:.2f} after")
    for name, cmd in res["servers"].items():
        out(f"  {name} server: {cmd}")
    out(f"  client (one run): {res['runs'][0]['command']}")
    if res["warning"]:
        out(res["warning"])
    if res["left_running"]:
        out(f"WARNING: server process groups still running: {res['left_running']}")
    return res
