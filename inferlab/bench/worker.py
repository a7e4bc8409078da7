"""The worker side of ``inferlab bench vllm`` and ``inferlab bench engine --alone``: one
engine in a process of its own, answering JSON commands (the parent's side is
``common.Worker``).

    python -m inferlab.bench.worker --engine vllm|inferlab|transformers [--model DIR] ...
                            JSON commands in on stdin, one JSON reply per line out

It runs in .venv-vllm for vLLM, in the lab's venv for inferlab and transformers; vLLM is
imported only inside the vLLM engine's function, so the lab's venv imports this module
without it. Each worker times only its own ``generate`` call.
"""
from __future__ import annotations

import json
import os
import sys
import time


def _vllm_engine(model_dir: str, max_num_seqs: int):
    import vllm
    from vllm import LLM, SamplingParams
    llm = LLM(model=model_dir, dtype="float32", enforce_eager=True, max_model_len=1024, seed=0,
              enable_prefix_caching=False, max_num_seqs=max_num_seqs, disable_log_stats=True)

    def generate(prompts, max_tokens, ignore_eos):
        sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=ignore_eos)
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]
    return generate, {"version": f"vLLM {vllm.__version__}", "model_dir": model_dir}


def _inferlab_engine(model: str | None, max_num_seqs: int, export_to: str | None):
    import torch

    import inferlab as il
    eng = il.Engine(model, max_num_seqs=max_num_seqs, enable_prefix_caching=False)

    def generate(prompts, max_tokens, ignore_eos):
        sp = il.SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos)
        return [list(o.token_ids) for o in eng.generate(prompts, sp, use_tqdm=False)]
    model_dir = None
    if export_to:                                   # for vLLM: the same weights
        from .vllm import model_dir_for_vllm
        model_dir = model_dir_for_vllm(eng.loaded, export_to)
    return generate, {"version": f"inferlab {il.__version__}", "model_dir": model_dir,
                      "vocab_size": eng.vocab_size, "threads": torch.get_num_threads()}


def _transformers_engine(model: str | None):
    import torch
    import transformers

    from inferlab.model.loader import load_model

    from .common import hf_greedy_config
    hf = load_model(model).hf_model

    def generate(prompts, max_tokens, ignore_eos):        # one batch; the prompts' lengths
        ids = torch.tensor(prompts)                       # are equal: nothing to pad
        gc = hf_greedy_config(max_tokens, ignore_eos)
        with torch.inference_mode():
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gc)
        return out[:, ids.shape[1]:].tolist()
    return generate, {"version": f"transformers {transformers.__version__}",
                      "threads": torch.get_num_threads()}


def serve(argv: list[str]) -> int:
    """Answer JSON commands on stdin, one JSON line each on the real stdout. Everything else
    that writes to stdout (vLLM's logs, its child processes) goes to stderr instead."""
    import argparse
    p = argparse.ArgumentParser(prog="python -m inferlab.bench.worker")
    p.add_argument("--engine", choices=["vllm", "inferlab", "transformers"], required=True)
    p.add_argument("--model", default=None)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--export-to", default=None)
    a = p.parse_args(argv)
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    if a.engine == "vllm":
        generate, hello = _vllm_engine(a.model, a.max_num_seqs)
    elif a.engine == "transformers":
        generate, hello = _transformers_engine(a.model)
    else:
        generate, hello = _inferlab_engine(a.model, a.max_num_seqs, a.export_to)
    reply.write(json.dumps({"ready": True, **hello}) + "\n")
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("cmd") == "quit":
            break
        t = time.perf_counter()
        ids = generate(cmd["prompts"], cmd["max_tokens"], cmd.get("ignore_eos", True))
        reply.write(json.dumps({"seconds": time.perf_counter() - t, "token_ids": ids}) + "\n")
    return 0


if __name__ == "__main__":       # vLLM's CPU build spawns processes: keep this guard
    sys.exit(serve(sys.argv[1:]))
