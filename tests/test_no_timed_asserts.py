"""No test and no notebook cell asserts a wall-clock duration or rate (DESIGN.md, Evidence).

A busy machine makes such an assert fail for no fault of the code, and a quiet one lets a
real slowdown pass. Tests assert counts (steps, tokens, blocks) and directions on simulated
clocks; speed is compared side by side in one run by the benchmarks (BENCHMARKS.md) and
judged, with its spread and a busy-machine warning, by the report card (`inferlab claims`).

The check reads the code (ast): an ``assert`` whose condition calls a clock (perf_counter,
time.time, monotonic, ...) or names a wall-clock quantity (elapsed, *_ms, *_us, tok_s,
wall, ...: as a variable, an attribute or a subscript key) is an offender. An assert on a
number priced by the simulated clock or the cost model says so on its line with the
comment ``# simulated clock``; one that checks a fixed value fed in by the test (a decoded
message, not a measurement) says ``# fixed input``.
"""
from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
CLOCK_CALLS = {"perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "process_time",
               "process_time_ns", "time_ns", "thread_time"}
# words of a snake_case name that mean "measured time" (draw_ms, hook_us, wall_on, elapsed),
# and rates (tok_s, tokens_per_s); class names such as WallClock are not quantities
TIMED_WORDS = {"elapsed", "ms", "us", "ns", "wall", "seconds", "secs"}
TIMED_RATE = re.compile(r"(^|_)(tok|tokens)_(per_)?s($|_)|(^|_)per_sec($|_)")


def is_timed(word: str) -> bool:
    return bool(TIMED_WORDS & set(word.split("_"))) or bool(TIMED_RATE.search(word))
EXEMPT = ("# simulated clock", "# fixed input")


def _words(node: ast.AST):
    """(kind, word) for every clock call and name-like word in an expression."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            base = getattr(f.value, "id", "") if isinstance(f, ast.Attribute) else ""
            if name in CLOCK_CALLS or (name == "time" and base == "time"):
                yield "clock call", f"{base + '.' if base else ''}{name}()"
        elif isinstance(n, ast.Name):
            yield "name", n.id
        elif isinstance(n, ast.Attribute):
            yield "attribute", n.attr
        elif isinstance(n, ast.Subscript):
            key = n.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                yield "key", key.value


def timed_asserts(source: str, filename: str = "<string>") -> list[str]:
    """'file:line: assert ... (why)' for every assert on a wall-clock duration or rate."""
    tree = ast.parse(source, filename)
    lines = source.splitlines()
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        span = lines[node.lineno - 1:(node.end_lineno or node.lineno)]
        if any(e in line for e in EXEMPT for line in span):
            continue
        why = sorted({f"{kind} {word!r}" for kind, word in _words(node.test)
                      if kind == "clock call" or is_timed(word)})
        if why:
            found.append(f"{filename}:{node.lineno}: {span[0].strip()}  ({', '.join(why)})")
    return found


def sources() -> list[pathlib.Path]:
    tests = sorted((ROOT / "tests").rglob("*.py"))
    notebooks = sorted((ROOT / "notebooks").glob("*.py"))
    return tests + notebooks


def test_no_test_or_notebook_asserts_a_wall_clock_time():
    files = sources()
    assert len(files) > 20, [str(f) for f in files]
    offenders = [o for f in files
                 for o in timed_asserts(f.read_text(encoding="utf-8"), str(f.relative_to(ROOT)))]
    assert not offenders, ("asserts on wall-clock durations or rates (assert counts or "
                           "simulated-clock directions instead; compare speed in a benchmark):\n"
                           + "\n".join(offenders))


def test_checker_finds_timed_asserts():
    bad = '''
import time
t = time.perf_counter()
assert time.perf_counter() - t < 0.5
elapsed = 1.0
assert elapsed < 2
assert res["draw_ms"]["p90"] < 50
assert stats.tok_s > 100
assert data["runs"]["wall"]["ratio"] > 1
assert time.time() > 0
assert hook_us < 200
assert r.tokens_per_s > 1
'''
    found = timed_asserts(bad, "bad.py")
    assert [f.split(":")[1] for f in found] == ["4", "6", "7", "8", "9", "10", "11", "12"], found
    assert "clock call 'time.perf_counter()'" in found[0]
    assert "name 'elapsed'" in found[1] and "key 'draw_ms'" in found[2]


def test_checker_lets_counts_and_simulated_clocks_pass():
    good = '''
assert steps["continuous"] < steps["static"], steps
assert out.token_ids == ref
assert stats.kv_blocks_used == 0
assert clock.name == "wall"
assert isinstance(make_clock("wall"), WallClock)
assert data["input_check_s"] > 0 and m.ttft > 0
assert one["step_ms"] / many["step_ms"] < many["tp"]   # simulated clock
assert (many["comm_ms"]   # simulated clock
        > 0)
'''
    assert timed_asserts(good, "good.py") == []
