"""The worker side of ``inferlab bench vllm`` and ``inferlab bench engine --alone``: one
engine in a process of its own, answering JSON commands (the parent's side is
``common.Worker``).

    python -m inferlab.bench.worker --engine vllm|inferlab|transformers [--model DIR]
                            [--dtype float32|bfloat16|float16] ...
                            JSON commands in on stdin, one JSON reply per line out

A "generate" command may ask for ``logprobs: k``: the reply then also carries, per prompt and
generated token, the k likeliest tokens and the chosen one as [[token id, log-probability],
...] (the parity tests' check in half precision, vLLM's ``check_logprobs_close``).

It runs in .venv-vllm for vLLM, in the lab's venv for inferlab and transformers; vLLM is
imported only inside the vLLM engine's function, so the lab's venv imports this module
without it. Each worker times only its own ``generate`` call.
"""
from __future__ import annotations

import json
import os
import sys
import time


def _pairs(per_token) -> list[list[list]]:
    """[{token id: logprob}, ...] of one request as JSON: [[[id, logprob], ...], ...]."""
    return [[[int(t), float(lp)] for t, lp in d.items()] for d in per_token]


def _vllm_engine(model_dir: str, max_num_seqs: int, dtype: str):
    import vllm
    from vllm import LLM, SamplingParams
    llm = LLM(model=model_dir, dtype=dtype, enforce_eager=True, max_model_len=1024, seed=0,
              enable_prefix_caching=False, max_num_seqs=max_num_seqs, disable_log_stats=True)

    def generate(prompts, max_tokens, ignore_eos, logprobs=None):
        sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=ignore_eos,
                            logprobs=logprobs)
        outs = [o.outputs[0] for o in llm.generate([{"prompt_token_ids": p} for p in prompts],
                                                   sp, use_tqdm=False)]
        ids = [list(o.token_ids) for o in outs]
        if logprobs is None:
            return ids, None
        return ids, [_pairs({t: lp.logprob for t, lp in d.items()} for d in o.logprobs)
                     for o in outs]
    return generate, {"version": f"vLLM {vllm.__version__}", "model_dir": model_dir,
                      "dtype": dtype}


def _inferlab_engine(model: str | None, max_num_seqs: int, export_to: str | None, dtype: str):
    import torch

    import inferlab as il
    eng = il.Engine(model, max_num_seqs=max_num_seqs, enable_prefix_caching=False, dtype=dtype)

    def generate(prompts, max_tokens, ignore_eos, logprobs=None):
        sp = il.SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos, logprobs=logprobs)
        outs = eng.generate(prompts, sp, use_tqdm=False)
        return ([list(o.token_ids) for o in outs],
                None if logprobs is None else [_pairs(o.logprobs) for o in outs])
    model_dir = None
    if export_to:                                   # for vLLM: the same weights
        from .vllm import model_dir_for_vllm
        model_dir = model_dir_for_vllm(eng.loaded, export_to)
    return generate, {"version": f"inferlab {il.__version__}", "model_dir": model_dir,
                      "vocab_size": eng.vocab_size, "threads": torch.get_num_threads(),
                      "dtype": dtype, "plan": str(eng.runner.plan)}


def _transformers_engine(model: str | None, dtype: str):
    import torch
    import transformers

    from inferlab.model.loader import load_model

    from .common import hf_greedy_config
    hf = load_model(model, dtype).hf_model

    def generate(prompts, max_tokens, ignore_eos, logprobs=None):   # one batch; the prompts'
        ids = torch.tensor(prompts)                       # lengths are equal: nothing to pad
        gc = hf_greedy_config(max_tokens, ignore_eos)
        with torch.inference_mode():
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gc)
        if logprobs is not None:
            raise ValueError("the transformers worker gives no logprobs")
        return out[:, ids.shape[1]:].tolist(), None
    return generate, {"version": f"transformers {transformers.__version__}",
                      "threads": torch.get_num_threads(), "dtype": dtype}


def serve(argv: list[str]) -> int:
    """Answer JSON commands on stdin, one JSON line each on the real stdout. Everything else
    that writes to stdout (vLLM's logs, its child processes) goes to stderr instead."""
    import argparse
    p = argparse.ArgumentParser(prog="python -m inferlab.bench.worker")
    p.add_argument("--engine", choices=["vllm", "inferlab", "transformers"], required=True)
    p.add_argument("--model", default=None)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--export-to", default=None)
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    a = p.parse_args(argv)
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    if a.engine == "vllm":
        generate, hello = _vllm_engine(a.model, a.max_num_seqs, a.dtype)
    elif a.engine == "transformers":
        generate, hello = _transformers_engine(a.model, a.dtype)
    else:
        generate, hello = _inferlab_engine(a.model, a.max_num_seqs, a.export_to, a.dtype)
    reply.write(json.dumps({"ready": True, **hello}) + "\n")
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("cmd") == "quit":
            break
        t = time.perf_counter()
        ids, lps = generate(cmd["prompts"], cmd["max_tokens"], cmd.get("ignore_eos", True),
                            cmd.get("logprobs"))
        reply.write(json.dumps({"seconds": time.perf_counter() - t, "token_ids": ids,
                                **({} if lps is None else {"logprobs": lps})}) + "\n")
    return 0


if __name__ == "__main__":       # vLLM's CPU build spawns processes: keep this guard
    sys.exit(serve(sys.argv[1:]))
