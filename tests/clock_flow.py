"""Which assertions in a module's code test a wall-clock time (tests/test_no_timed_asserts.py).

``timed_asserts(source, filename)`` reads the code (ast). Assertions are ``assert``, the
``assert*`` methods and functions (``self.assertLess``, ``np.testing.assert_allclose``) and,
inside an ``if``, ``pytest.fail``, ``self.fail`` and ``raise AssertionError``; what one tests
includes the ``if`` tests around it. It is an offender when it

* names a wall-clock quantity (elapsed, *_ms, *_us, tok_s, wall, ...: a variable, an
  attribute or a subscript key), or
* holds a value read from a clock (``time.*``, ``timeit``, ``datetime.now()``, under any
  import alias or ``clock = time.perf_counter``), followed within the module through
  assignments (tuples pairwise, ``+=``, ``for``, ``with``, comprehensions, ``lst.append``,
  ``self.x`` across methods), arithmetic, attributes, subscripts, any call taking such a value
  and the results of the module's own functions that return one, or
* tests, after a hand-written deadline loop (a loop whose test, or an ``if ...: break``
  in it, reads the clock), what the loop was waiting for, or calls a function that returns a
  value after such a loop: a wait with a wall-clock timeout goes through the one helper,
  ``waiting.wait_until`` (tests/waiting.py).

Names are followed per scope, flow-insensitively (a name once timed stays timed), with the
enclosing scopes' timed names inherited unless rebound. ``# simulated clock`` or
``# fixed input`` on an assertion's line (or its ``if``'s) exempts it.
"""
from __future__ import annotations

import ast
import builtins
import re

CLOCK_CALLS = {"perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "process_time",
               "process_time_ns", "time_ns", "thread_time", "thread_time_ns"}
CLOCKS = ({f"time.{f}" for f in CLOCK_CALLS | {"time"}}
          | {"timeit.default_timer", "timeit.timeit", "timeit.repeat", "timeit.Timer"}
          | {f"datetime.{c}.{f}" for c in ("datetime", "date") for f in ("now", "utcnow", "today")})
MUTATORS = {"append", "extend", "insert", "add", "update", "setdefault", "appendleft"}
# words of a snake_case name that mean "measured time" (draw_ms, hook_us, wall_on, elapsed),
# and rates (tok_s, tokens_per_s); class names such as WallClock are not quantities
TIMED_WORDS = {"elapsed", "ms", "us", "ns", "wall", "seconds", "secs"}
TIMED_RATE = re.compile(r"(^|_)(tok|tokens)_(per_)?s($|_)|(^|_)per_sec($|_)")
EXEMPT = ("# simulated clock", "# fixed input")
HELPER = "waiting.wait_until"
BUILTINS = set(dir(builtins))
UNTIMED = {"len", "isinstance", "type", "callable"}   # calls whose result is no time


def is_timed(word: str) -> bool:
    return bool(TIMED_WORDS & set(word.split("_"))) or bool(TIMED_RATE.search(word))


def _words(node: ast.AST):
    """(kind, word) for every name-like word in an expression."""
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            yield "name", n.id
        elif isinstance(n, ast.Attribute):
            yield "attribute", n.attr
        elif isinstance(n, ast.Subscript):
            key = n.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                yield "key", key.value


def _dotted(node, aliases=None) -> str | None:
    """'a.b.c' for a Name/Attribute chain; with ``aliases`` the root is an import resolved."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id, node.id) if aliases is not None else node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, aliases)
        return base and f"{base}.{node.attr}"
    return None


def _own(node):
    """The nodes of ``node``'s scope: nested functions are yielded, not entered."""
    for child in ast.iter_child_nodes(node):
        yield child
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _own(child)


def _walk(node):
    """ast.walk, less what ``len(...)`` or ``isinstance(...)`` holds: a count is not a time."""
    yield node
    if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") in UNTIMED):
        for child in ast.iter_child_nodes(node):
            yield from _walk(child)


def _bound(target) -> set[str]:
    """What an assignment target binds; ``d[k] = v`` and ``self.x = v`` bind d and self.x."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*map(_bound, target.elts))
    if isinstance(target, (ast.Starred, ast.Subscript)):
        return _bound(target.value)
    return {k for k in [_dotted(target)] if k}


def _flows(n) -> list[tuple[set, list, int]]:
    """(names bound, expressions they come from, line) for one statement or expression."""
    if isinstance(n, ast.Assign):
        out = []
        for t in n.targets:
            if (isinstance(t, (ast.Tuple, ast.List)) and isinstance(n.value, (ast.Tuple, ast.List))
                    and len(t.elts) == len(n.value.elts)):        # out, end = [], clock() + 5
                out += [(_bound(a), [b], n.lineno) for a, b in zip(t.elts, n.value.elts)]
            else:
                out.append((_bound(t), [n.value], n.lineno))
        return out
    if isinstance(n, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and n.value is not None:
        return [(_bound(n.target), [n.value], n.lineno)]
    if isinstance(n, (ast.For, ast.AsyncFor)):
        return [(_bound(n.target), [n.iter], n.lineno)]
    if isinstance(n, ast.comprehension):
        return [(_bound(n.target), [n.iter], n.iter.lineno)]
    if isinstance(n, ast.withitem) and n.optional_vars is not None:
        return [(_bound(n.optional_vars), [n.context_expr], n.context_expr.lineno)]
    if (isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)    # times.append(took)
            and isinstance(n.value.func, ast.Attribute) and n.value.func.attr in MUTATORS):
        call = n.value
        return [(_bound(call.func.value), call.args + [k.value for k in call.keywords],
                 n.lineno)]
    return []


class _Module:
    def __init__(self, source: str, filename: str):
        self.tree = ast.parse(source, filename)
        self.lines, self.filename = source.splitlines(), filename
        self.aliases: dict[str, str] = {}
        for n in ast.walk(self.tree):
            if isinstance(n, ast.Import):
                for a in n.names:
                    self.aliases[a.asname or a.name.split(".")[0]] = (
                        a.name if a.asname else a.name.split(".")[0])
            elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
                for a in n.names:
                    self.aliases[a.asname or a.name] = f"{n.module}.{a.name}"
        for n in ast.walk(self.tree):                               # clock = time.perf_counter
            if isinstance(n, ast.Assign) and _dotted(n.value, self.aliases) in CLOCKS:
                self.aliases.update((k, _dotted(n.value, self.aliases))
                                    for t in n.targets for k in _bound(t))
        self.parents = {c: p for p in ast.walk(self.tree) for c in ast.iter_child_nodes(p)}
        self.timed_funcs: set[str] = set()     # the module's functions that return a timed value
        self.attrs: set[str] = set()           # self.t0 = clock(): timed in every method

    def hits(self, expr, keys):
        """Why ``expr`` holds a timed value under ``keys``: clock calls, timed names, calls."""
        for n in _walk(expr):
            if isinstance(n, ast.Call):
                d = _dotted(n.func, self.aliases) or ""
                f = n.func
                callee = f.id if isinstance(f, ast.Name) else (
                    f.attr if isinstance(f, ast.Attribute) and _dotted(f.value) in ("self", "cls")
                    else None)
                if d in CLOCKS or d.rsplit(".", 1)[-1] in CLOCK_CALLS:
                    yield f"clock call '{ast.unparse(f)}()'"
                elif callee in self.timed_funcs:
                    yield f"timed result '{ast.unparse(f)}()'"
            elif isinstance(n, (ast.Name, ast.Attribute)) and _dotted(n) in keys:
                yield f"timed value '{_dotted(n)}'"

    def spread(self, flows, keys, after=0) -> set[str]:
        """``keys`` and every name a flow (from a line past ``after``) binds from them."""
        keys, grew = set(keys), True
        while grew:
            grew = False
            for bound, exprs, line in flows:
                if (line > after and not bound <= keys
                        and any(next(self.hits(e, keys), None) for e in exprs)):
                    keys |= bound
                    grew = True
        return keys

    def deadline_loop(self, loop, keys) -> bool:
        if isinstance(loop, ast.While) and next(self.hits(loop.test, keys), None):
            return True
        return any(isinstance(i, ast.If) and next(self.hits(i.test, keys), None)
                   and any(isinstance(s, (ast.Break, ast.Return, ast.Raise)) for s in ast.walk(i))
                   for i in _own(loop))

    def points(self, own):
        """(node, expressions it tests) for every assertion in a scope."""
        for n in own:
            f = getattr(n, "func", None)
            name = (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")) or ""
            if isinstance(n, ast.Assert):
                yield n, [n.test]
            elif isinstance(n, ast.Call) and name.startswith("assert"):
                yield n, n.args + [k.value for k in n.keywords if k.arg != "msg"]
            elif isinstance(n, ast.Call) and name == "fail" or (
                    isinstance(n, ast.Raise) and n.exc is not None
                    and "AssertionError" in ast.unparse(n.exc)):
                yield n, []

    def scope(self, node, inherited: set[str], found: set):
        own = list(_own(node))
        flows = [f for n in own for f in _flows(n)]
        local = set().union(*(b for b, _, _ in flows))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            local |= {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        keys = self.spread(flows, (inherited - local) | self.attrs)
        self.attrs |= {k for k in keys if k.startswith(("self.", "cls."))}
        waits = []          # (loop, what its outcome is held in)
        for loop in own:
            if isinstance(loop, (ast.While, ast.For)) and self.deadline_loop(loop, keys):
                seeds = {k for b, _, line in flows if loop.lineno <= line <= loop.end_lineno
                         for k in b}
                if isinstance(loop, ast.While):
                    seeds |= {k for k in map(_dotted, ast.walk(loop.test)) if k and
                              k.split(".")[0] not in self.aliases and k not in BUILTINS}
                waits.append((loop, self.spread(flows, seeds, after=loop.end_lineno)))
        returns = [r for r in own if isinstance(r, ast.Return) and r.value is not None]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                any(next(self.hits(r.value, keys), None) for r in returns)
                or any(r.lineno > loop.end_lineno for r in returns for loop, _ in waits)):
            self.timed_funcs.add(node.name)
        for point, exprs in self.points(own):
            self.report(node, point, exprs, keys, waits, found)
        for n in own:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.scope(n, keys, found)

    def report(self, scope, point, exprs, keys, waits, found):
        ifs, p = [], self.parents.get(point)
        while p is not None and p is not scope:
            if isinstance(p, ast.If):
                ifs.append(p.test)
            p = self.parents.get(p)
        if not exprs and not ifs:
            return
        tested = exprs + ifs
        spans = [self.lines[e.lineno - 1:e.end_lineno] for e in [point] + ifs]
        if any(x in line for span in spans for line in span for x in EXEMPT):
            return
        why = {f"{kind} {word!r}" for e in tested for kind, word in _words(e) if is_timed(word)}
        why |= {h for e in tested for h in self.hits(e, keys)}
        why |= {f"outcome of the wall-clock wait at line {loop.lineno} (use {HELPER})"
                for loop, held in waits if point.lineno > loop.end_lineno
                for e in tested for n in ast.walk(e) if _dotted(n) in held}
        if why:
            found.add((point.lineno, f"{self.filename}:{point.lineno}: {spans[0][0].strip()}  "
                                     f"({', '.join(sorted(why))})"))


def timed_asserts(source: str, filename: str = "<string>") -> list[str]:
    """'file:line: assert ... (why)' for every assertion on a wall-clock duration or rate."""
    m, state = _Module(source, filename), None
    while True:                  # until the functions returning a timed value are all known
        found: set[tuple[int, str]] = set()
        m.scope(m.tree, set(), found)
        if state == (m.timed_funcs, m.attrs):
            return [text for _, text in sorted(found)]
        state = (set(m.timed_funcs), set(m.attrs))


SLEEPS = {"sleep", "wait_for_timeout"}
NOT_A_WAIT = "# not a wait"


def hand_waits(source: str, filename: str = "<string>") -> list[str]:
    """'file:line: ...' for every wait written by hand instead of ``waiting.wait_until``: a
    loop that sleeps between its tries (``for _ in range(60): ... time.sleep(0.5)``), or a
    deadline computed from a clock read (``end = time.monotonic() + 10``); looked for in the
    code and in every string that holds a script (a subprocess's or a kernel's code). A loop
    that sleeps to pace itself, not to wait, says ``# not a wait`` on its line."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        line = lines[node.lineno - 1] if hasattr(node, "lineno") else ""
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)) and NOT_A_WAIT not in line:
            sleeps = [c for c in ast.walk(node) if isinstance(c, ast.Call)
                      and (_dotted(c.func) or "").rsplit(".", 1)[-1] in SLEEPS]
            if sleeps:
                found.append(f"{filename}:{node.lineno}: a loop that sleeps between tries: "
                             f"{line.strip()}")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            reads = [s for s in (node.left, node.right) if isinstance(s, ast.Call)
                     and (_dotted(s.func) or "").rsplit(".", 1)[-1] in CLOCK_CALLS | {"time"}]
            if reads:
                found.append(f"{filename}:{node.lineno}: a deadline from a clock read: "
                             f"{line.strip()}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "\n" in node.value:
            try:
                ast.parse(node.value)
            except SyntaxError:
                continue
            found += [f"{filename}:{node.lineno} (in a script): {f.split(': ', 1)[1]}"
                      for f in hand_waits(node.value)]
    return found
