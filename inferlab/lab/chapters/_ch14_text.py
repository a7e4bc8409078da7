"""Chapter 14's measurements as the lines the notebook prints: the agent's rounds and the
burst of users."""
from __future__ import annotations


def _ms(s) -> str:
    return "-" if s is None else f"{s * 1e3:.0f} ms"


def agent_text(agent: dict) -> str:
    lines = []
    for r in agent["rounds"]:
        lines.append(f"round {r['round']}: sent {r['messages']} messages = {r['prompt_tokens']} "
                     f"prompt tokens, {r['cached']} of them from the prefix cache, "
                     f"{r['computed']} computed; answered {r['completion_tokens']} tokens; "
                     f"TTFT {_ms(r['ttft'])} at the client, {_ms(r['engine_ttft'])} in the "
                     "engine")
        lines.append(f"  assistant: {r['text'].strip()!r}")
        if "tool" in r:
            fn = r["call"]["function"]
            lines.append(f"  tool call (played by the notebook): {fn['name']}"
                         f"({fn['arguments']}) -> {r['tool']!r}")
    sent = sum(r["prompt_tokens"] for r in agent["rounds"])
    done = sum(r["computed"] for r in agent["rounds"])
    lines.append(f"{len(agent['rounds'])} requests for one task: {sent} prompt tokens sent, "
                 f"{done} computed ({sent - done} served from the prefix cache)")
    return "\n".join(lines + ([agent["warning"]] if agent.get("warning") else []))


def burst_text(b: dict, agent: dict | None = None) -> str:
    lines = [f"{'user':16} {'client TTFT':>11} {'engine TTFT':>11} {'last token':>10} "
             f"{'tokens':>6}  answer"]
    for u in b["users"]:
        if "error" in u:
            lines.append(f"{u['id']:16} failed: {u['error']}")
            continue
        lines.append(f"{u['id']:16} {_ms(u['ttft']):>11} {_ms(u['engine_ttft']):>11} "
                     f"{_ms(u['e2e']):>10} {u['completion_tokens']:>6}  "
                     f"{u['text'].strip()[:50]!r}")
    n = len(b["users"])
    lines.append(f"{n} users at once: {b['tokens']} tokens in {b['wall']:.2f} s "
                 f"({b['tokens'] / b['wall']:.0f} tokens/s) in {b['steps']} engine steps; the "
                 f"fullest step ran {b['max_batch']} requests; peak KV {b['peak_blocks']} blocks "
                 "(wall clock, this machine, one run)")
    if agent:
        # the agent's rounds ran alone: one stream at a time, for comparison (not interleaved)
        toks = sum(r["completion_tokens"] for r in agent["rounds"])
        secs = sum(r["e2e"] for r in agent["rounds"])
        lines.append(f"for comparison, the agent's rounds, one request at a time: {toks} tokens "
                     f"in {secs:.2f} s ({toks / secs:.0f} tokens/s; one run each, not "
                     "interleaved)")
    return "\n".join(lines + ([b["warning"]] if b.get("warning") else []))
