"""Every claim the lab tests, in one table: what is claimed (in our words), where it was
published, which chapter measures it, how, and how the measurement is judged.

    from inferlab.lab import claims
    for claim, data, verdict in claims.run_all(smoke=True):   # `inferlab claims --smoke`
        print(claim.id, verdict)
    claims.print_verdicts("ch05", data)      # a chapter notebook, on its own measurement

A verdict is computed (``inferlab.lab.judges``), never typed. ``measure`` runs the chapter's
own measurement with deterministic settings wherever the claim allows (token counts, the
simulated clock); chapter 9's kernels can only be timed on the wall clock, under the
measurement protocol (``inferlab.lab.protocol``).
"""
from __future__ import annotations

import importlib
import textwrap
from dataclasses import dataclass
from typing import Callable

from . import judges
from . import judges_ch06_10 as late
from . import judges_ch13 as j13
from .verdicts import Verdict

# The seed articles the claims come from (reference only: the claims are in our words).
ENTER = "ByteByteGo, \"What Happens Inside an AI Chatbot Between Enter and the First Word?\""
AFTER = "\"AI Inference: What Actually Happens After You Send a Prompt?\""


@dataclass(frozen=True)
class Claim:
    id: str
    text: str
    source: str
    chapter: str                            # chapter module, e.g. "ch05_batching"
    measure: Callable[[bool], dict]         # smoke -> the chapter's measured data
    judge: Callable[[dict], Verdict]

    @property
    def number(self) -> int:
        return int(self.chapter[2:4])


def _chapter(name: str):
    return importlib.import_module(f"inferlab.lab.chapters.{name}")


# --- how each chapter is measured for its claims (shared by the claims of one chapter) ------
def m01(smoke: bool) -> dict:
    return _chapter("ch01_prompt_anatomy").measure(smoke=smoke, deterministic=True)


def m02(smoke: bool) -> dict:
    return _chapter("ch02_tokenization").measure(smoke=smoke, deterministic=True)


def m03(smoke: bool) -> dict:
    return _chapter("ch03_prefill_decode").measure(smoke=smoke, deterministic=True)


def m04(smoke: bool) -> dict:
    return _chapter("ch04_kv_cache").measure(smoke=smoke)   # slot counts, simulated H100


def m05(smoke: bool) -> dict:
    return _chapter("ch05_batching").measure(smoke=smoke, deterministic=True)


def m06(smoke: bool) -> dict:
    return _chapter("ch06_chunked_prefill").measure(smoke=smoke)  # simulated H100 clock


def m07(smoke: bool) -> dict:
    return _chapter("ch07_prefix_caching").measure(smoke=smoke)   # simulated H100 clock


def m08(smoke: bool) -> dict:
    # the simulated clock makes the stages' costs deterministic; the tiny random model in
    # smoke runs costs the same per token as SmolLM2 on that clock (its yes/no is noise)
    return _chapter("ch08_safety_streaming").measure(
        smoke=smoke, deterministic=True, model="tiny" if smoke else None)


def m09(smoke: bool) -> dict:
    return _chapter("ch09_kernels").measure(smoke=smoke)          # wall clock, protocol


def m10(smoke: bool) -> dict:
    return _chapter("ch10_multi_gpu").measure(smoke=smoke)        # cost model only


def m13(smoke: bool) -> dict:
    # seeded sampling (counts), the tiny model on the simulated H100 clock for the costs;
    # the real SmolLM2's distribution in full runs, the tiny random model's in smoke runs
    return _chapter("ch13_sampling_decode").measure(smoke=smoke, deterministic=True,
                                                    model="tiny" if smoke else None)


CLAIMS: tuple[Claim, ...] = (
    Claim("01-assembly", "What the model reads is mostly not what the user typed: a system "
          "prompt, tool definitions, memory and the earlier turns are wrapped around the "
          "new message.", ENTER, "ch01_prompt_anatomy", m01, judges.ch01_assembly),
    Claim("01-stateless", "The model keeps nothing between calls, so each turn processes the "
          "whole conversation again, unless a prefix cache keeps the earlier turns' KV.",
          ENTER, "ch01_prompt_anatomy", m01, judges.ch01_stateless),
    Claim("02-languages", "The same message costs more tokens in some languages than in "
          "others, and so more prefill time and KV memory.", ENTER, "ch02_tokenization",
          m02, judges.ch02_languages),
    Claim("03-prefill-decode", "Time to first token grows with the input (prefill is "
          "compute-bound); the time per output token stays about the same (decode is "
          "memory-bound).", f"{ENTER}; {AFTER}", "ch03_prefill_decode", m03,
          judges.ch03_prefill_decode),
    Claim("04-kv-waste", "Reserving one contiguous KV region per request wastes 60-80% of it; "
          "paged blocks allocated on demand waste under 4%.", ENTER, "ch04_kv_cache", m04,
          judges.ch04_kv_waste),
    Claim("04-paged-throughput", "At the same KV memory, paged blocks fit more requests at "
          "once than contiguous reservations, which raises throughput 2-4x.", ENTER,
          "ch04_kv_cache", m04, judges.ch04_paged_throughput),
    Claim("05-throughput", "Continuous (per-step) batching raises throughput over naive "
          "static batching, by up to 23x.", ENTER, "ch05_batching", m05,
          judges.ch05_throughput),
    Claim("05-response-time", "Continuous batching also gives better median response times.",
          ENTER, "ch05_batching", m05, judges.ch05_response_time),
    Claim("06-chunked-prefill", "Chunked prefill lets long prompts share steps with running "
          "decodes, so streams keep a smooth inter-token latency (lower p99).", AFTER,
          "ch06_chunked_prefill", m06, late.ch06_chunked),
    Claim("07-prefix-reuse", "Reusing the KV cache of a shared prefix (system prompt, agent "
          "history) makes later agent calls and requests sharing a system prompt cheap.",
          AFTER, "ch07_prefix_caching", m07, late.ch07_prefix_reuse),
    Claim("07-tool-loop", "Tool calls turn one request into a multi-round loop whose "
          "every round re-sends a growing prompt.", ENTER, "ch07_prefix_caching", m07,
          late.ch07_tool_loop),
    Claim("08-input-check", "An input safety classifier is an extra model call that sits "
          "in front of the first token.", ENTER, "ch08_safety_streaming", m08,
          late.ch08_input_check),
    Claim("08-output-check", "Holding output until a safety check has read it delays the "
          "first visible word; checking in chunks wins most of streaming back.", ENTER,
          "ch08_safety_streaming", m08, late.ch08_output_check),
    Claim("09-kernel", "A decode attention kernel that reads the paged K/V once, in place, "
          "beats gathering the blocks into one tensor first.", AFTER, "ch09_kernels", m09,
          late.ch09_kernel),
    Claim("09-memory-bound", "Decode attention is limited by memory traffic: it does little "
          "arithmetic per byte of K/V it reads, so reading the cache sets its time.",
          AFTER, "ch09_kernels", m09, late.ch09_memory_bound),
    Claim("10-tensor-parallel", "Tensor parallelism splits weights and KV over GPUs, but "
          "all-reduce traffic keeps the per-token speedup below the number of GPUs.", AFTER,
          "ch10_multi_gpu", m10, late.ch10_tensor_parallel),
    Claim("13-sampling", "The same prompt can give different answers: the model gives a "
          "probability to every possible next token and the sampler draws from it; "
          "temperature and top-p reshape the draw, and a fixed seed repeats it.", AFTER,
          "ch13_sampling_decode", m13, j13.ch13_sampling),
    Claim("13-decode-length", "Output is generated one token per step, so a longer answer "
          "takes more decode steps and more time.", AFTER, "ch13_sampling_decode", m13,
          j13.ch13_decode_length),
    Claim("13-kv-tradeoff", "The KV cache keeps earlier tokens' keys and values so they are "
          "not recomputed at every step, at the price of memory that grows with every token.",
          AFTER, "ch13_sampling_decode", m13, j13.ch13_kv_tradeoff),
    Claim("13-network", "What a user perceives as speed is not inference alone: network "
          "round trips add to the time before the first word.", AFTER,
          "ch13_sampling_decode", m13, j13.ch13_network),
)


def for_chapter(chapter) -> list[Claim]:
    """The claims of a chapter, by number (5), prefix ("ch05") or module name."""
    key = f"ch{chapter:02d}" if isinstance(chapter, int) else str(chapter)[:4]
    return [c for c in CLAIMS if c.chapter.startswith(key)]


def verdicts_for(chapter, data: dict) -> list[tuple[Claim, Verdict]]:
    """Judge a chapter's own measurement (a notebook's ``data``) for each of its claims."""
    return [(c, c.judge(data)) for c in for_chapter(chapter)]


def print_verdicts(chapter, data: dict, width: int = 100) -> None:
    """What a chapter notebook's last cell prints: each claim, its source, the verdict and
    the reason, computed from the notebook's own measurement."""
    wrap = lambda text, head: textwrap.fill(text, width, initial_indent=head,
                                            subsequent_indent=" " * len(head))
    for claim, v in verdicts_for(chapter, data):
        print(wrap(claim.text, f"Claim {claim.id}: "))
        print(wrap(claim.source, "Source:  "))
        print(f"Verdict: {v.verdict.upper()}")
        print(wrap(v.reason, "Why:     "))
        if v.warning:
            print(wrap(v.warning, "         "))
        print()


def run_all(smoke: bool = False, only=None, progress: Callable[[str], None] | None = None
            ) -> list[tuple[Claim, dict, Verdict]]:
    """Measure and judge every claim (each chapter measured once for all its claims).
    ``only``: claim ids or chapter prefixes ("ch05") to keep."""
    keep = [c for c in CLAIMS if not only or c.id in only or c.chapter[:4] in only]
    measured: dict = {}
    out = []
    for claim in keep:
        if claim.measure not in measured:
            if progress:
                progress(f"measuring {claim.chapter} ...")
            measured[claim.measure] = claim.measure(smoke)
        data = measured[claim.measure]
        out.append((claim, data, claim.judge(data)))
    return out
