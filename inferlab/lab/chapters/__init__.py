"""One module per lab chapter: the measurement behind the chapter's notebook and its figure.

Each chapter module ``chNN_topic.py`` exposes:
    TITLE: str
    CLAIM: str                                  # the published claim the chapter tests
    measure(smoke: bool = False) -> dict        # runs the real engine, returns the numbers
    figure(data: dict) -> plotly Figure         # the chapter's figure, house template
and, when it tests claims, the claims themselves, each in one place:
    CLAIMS: tuple[Claim, ...]                   # text, source, how measured, how judged
    measure_for_claims(smoke: bool) -> dict     # measure() with the claims' settings
    judge_<what>(data: dict) -> Verdict         # one judge per claim
The notebooks call these; ``inferlab record`` writes each chapter's full run once
(``inferlab.lab.records``), from which ``inferlab figures`` draws every chapter's figure;
``inferlab.lab.claims`` assembles every chapter's CLAIMS into the report card's table.
"""
import os
import pkgutil


def chapter_modules() -> list[str]:
    """Names of the chapter modules (``chNN_topic``), in chapter order."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__)
                  if m.name.startswith("ch") and m.name[2:4].isdigit())


def smoke() -> bool:
    """INFERLAB_SMOKE=1 shrinks every workload so each notebook runs in under 2 minutes."""
    return os.environ.get("INFERLAB_SMOKE", "") not in ("", "0", "false", "False")
