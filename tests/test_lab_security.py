"""`make lab` serves JupyterLab on 127.0.0.1 only, with a token; auth is never disabled."""
import re
import shlex
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from waiting import wait_until

ROOT = Path(__file__).resolve().parents[1]


def lab_command() -> list[str]:
    lines = subprocess.run(["make", "-n", "-s", "lab"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout
    joined = lines.replace("\\\n", " ")
    cmd = next(line for line in joined.splitlines() if "jupyter lab" in line)
    return shlex.split(cmd.replace("$([ \"$(id -u)\" = 0 ] && echo --allow-root)", ""))


def test_make_lab_never_disables_auth():
    cmd = " ".join(lab_command())
    assert "--ServerApp.ip=127.0.0.1" in cmd
    for bad in ("token=''", 'token=""', "token= ", "password=''", "disable_check_xsrf",
                "--ip=0.0.0.0", "--ip=*"):
        assert bad not in cmd


@pytest.mark.slow
def test_lab_refuses_requests_without_its_token(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [str(ROOT / c) if c.startswith(".venv/") else c for c in lab_command()]
    cmd = [c for c in cmd if not c.endswith(".ipynb")]
    cmd += [f"--port={port}", f"--ServerApp.root_dir={tmp_path}", "--allow-root"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        log = []

        def url_printed():
            log.append(proc.stdout.readline())
            return re.search(r"http://127\.0\.0\.1:(\d+)/lab\?token=([0-9a-f]+)", log[-1])

        port, token = wait_until(url_printed, 120, interval=0, what=lambda: (
            "the lab's URL with its token; its log:\n" + "".join(log)[-3000:])).groups()
        url = f"http://127.0.0.1:{port}/api/status"

        def answer():                # the URL is printed just before the socket listens
            try:
                urllib.request.urlopen(url, timeout=10)
                return 200
            except urllib.error.HTTPError as e:
                return e.code
            except urllib.error.URLError:
                return None

        code = wait_until(answer, 30, interval=0.5, what="the lab to answer on its port")
        assert code == 403, f"without the token the server answered {code}"
        with urllib.request.urlopen(f"{url}?token={token}", timeout=10) as r:
            assert r.status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)
