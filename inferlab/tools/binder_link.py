"""README's Binder badge, rendered from one setting: ``[project.urls] Repository`` in
pyproject.toml (the GitHub repository the badge builds on Binder).

README holds the badge between two markers, as the result tables do (``inferlab results
render|check`` renders and checks it with them)::

    <!-- binder -->[![Binder](https://mybinder.org/badge_logo.svg)](https://mybinder.org/v2/gh/OWNER/REPO/main?labpath=notebooks%2F00_tour.ipynb)<!-- /binder -->

Moving the repository is one edit (the setting) and ``inferlab results render``; a README
whose badge and setting disagree fails ``tests/test_replay_docs.py``.
"""
from __future__ import annotations

import pathlib
import re
import urllib.parse

REPO = pathlib.Path(__file__).resolve().parents[2]
BRANCH = "main"
OPENS = "notebooks/00_tour.ipynb"           # the notebook Binder opens: the tour
MARKER = re.compile(r"<!-- binder -->(?P<body>.*?)<!-- /binder -->")
GITHUB = re.compile(r"^https://github\.com/(?P<owner>[\w.-]+)/(?P<name>[\w.-]+?)(?:\.git)?/?$")


class BadgeError(ValueError):
    pass


def repository(root=REPO) -> str:
    """The setting: pyproject.toml's ``[project.urls] Repository``."""
    text = (pathlib.Path(root) / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib                                   # Python 3.11+
        url = tomllib.loads(text).get("project", {}).get("urls", {}).get("Repository")
    except ImportError:                                  # 3.10: the one line, as written
        m = re.search(r'^\[project\.urls\][^\[]*?^Repository\s*=\s*"([^"]+)"', text, re.M | re.S)
        url = m and m.group(1)
    if not url:
        raise BadgeError("pyproject.toml has no [project.urls] Repository: the Binder badge "
                         "is built from it (https://github.com/OWNER/REPO)")
    return url


def binder_url(repo_url: str, branch: str = BRANCH, opens: str = OPENS) -> str:
    m = GITHUB.match(repo_url)
    if m is None:
        raise BadgeError(f"[project.urls] Repository is {repo_url!r}; Binder's badge needs a "
                         f"GitHub repository, https://github.com/OWNER/REPO")
    return (f"https://mybinder.org/v2/gh/{m['owner']}/{m['name']}/{branch}"
            f"?labpath={urllib.parse.quote(opens, safe='')}")


def badge(root=REPO) -> str:
    return f"[![Binder](https://mybinder.org/badge_logo.svg)]({binder_url(repository(root))})"


def render_text(text: str, root=REPO) -> tuple[str, str | None, str]:
    """(``text`` with its badge rendered, the badge there now, the badge); (``text``, None,
    None) when ``text`` has no badge markers."""
    m = MARKER.search(text)
    if m is None:
        return text, None, None
    new = badge(root)
    return text[:m.start("body")] + new + text[m.end("body"):], m["body"], new


def check(root=REPO) -> list[str]:
    """One line if README's badge is missing or differs from the setting; else empty."""
    text = (pathlib.Path(root) / "README.md").read_text(encoding="utf-8")
    _, old, new = render_text(text, root)
    if old is None:
        return ["README.md: no Binder badge between <!-- binder --> markers"]
    return [] if old == new else [f"README.md: binder: the badge is {old!r}; pyproject.toml's "
                                  f"[project.urls] Repository gives {new!r} (run `inferlab "
                                  f"results render`)"]
