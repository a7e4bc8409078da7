"""`inferlab vllm serve` and VllmServer without vLLM: the command it runs, and every way a
start can fail (a missing venv or model, a port in use, a server that exits or never becomes
ready: each a clear error with the server's log tail), and a stop that ends the whole process
group. A fake "vLLM venv" whose python is a small script stands in for vLLM.
"""
import json
import os
import signal
import socket
import stat
import sys

import pytest

from inferlab.cli import main
from inferlab.connect.front import launcher as srv_mod
from inferlab.connect.front import machine
from inferlab.connect.front.launcher import VllmServer
from inferlab.connect.front.machine import VllmServerError, check_port_free
from waiting import wait_until


def fake_venv(tmp_path, body: str):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    py = venv / "bin" / "python"
    py.write_text(f"#!{sys.executable}\n{body}")
    py.chmod(py.stat().st_mode | stat.S_IXUSR)
    return venv


def model_dir(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text("{}")
    return d


HEALTHY = r"""
import http.server, os, subprocess, sys
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
open("child.pid", "w").write(str(subprocess.Popen(["sleep", "300"]).pid))
print("fake vLLM up on", port, flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"data": [{"id": "fake"}]}' if self.path == "/v1/models" else b"{}"
        self.send_response(200); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def test_the_command_is_vllm_serve_set_up_for_the_lab(tmp_path):
    venv = fake_venv(tmp_path, "")
    s = VllmServer(model_dir(tmp_path), port=8123, venv=venv)
    s.run_dir = "/tmp/x"
    cmd = s.command()
    assert cmd[:3] == [str(venv / "bin" / "python"), "-m",
                       "vllm.entrypoints.launchers.api_server.entry"]
    for flag in ("--enforce-eager", "--enable-prefix-caching", "--enable-logging-iteration-details",
                 "--disable-log-stats", "--enable-prompt-tokens-details"):
        assert flag in cmd
    arg = dict(zip(cmd, cmd[1:]))
    assert arg["--host"] == "127.0.0.1" and arg["--port"] == "8123"
    assert arg["--dtype"] == "float32" and arg["--block-size"] == "32"
    kv = json.loads(arg["--kv-events-config"])
    assert kv == {"enable_kv_cache_events": True, "publisher": "zmq", "topic": "kv",
                  "endpoint": "ipc:///tmp/x/kv", "replay_endpoint": "ipc:///tmp/x/kv-replay"}
    env = s.environment()
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and env["VLLM_CPU_OMP_THREADS_BIND"] == \
        machine.cpu_list()
    assert env["INFERLAB_VLLM_STEPS_ENDPOINT"] == "ipc:///tmp/x/steps"


def test_a_missing_venv_says_make_vllm(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERLAB_VLLM_VENV", str(tmp_path / "nope"))
    with pytest.raises(VllmServerError, match="make vllm"):
        VllmServer(model_dir(tmp_path)).start()


def test_a_directory_without_a_model_says_export_hf(tmp_path):
    venv = fake_venv(tmp_path, "")
    with pytest.raises(VllmServerError, match="export-hf"):
        VllmServer(tmp_path, venv=venv).start()


def test_a_port_in_use_is_named(tmp_path):
    venv = fake_venv(tmp_path, "")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(VllmServerError, match=f"port {port} on 127.0.0.1 is already in use"):
            VllmServer(model_dir(tmp_path), port=port, venv=venv).start()
        with pytest.raises(VllmServerError):
            check_port_free("127.0.0.1", port)


def test_a_server_that_exits_before_ready_shows_its_log(tmp_path):
    venv = fake_venv(tmp_path, "import sys\nprint('ValueError: no CPU backend here')\n"
                               "sys.exit(3)\n")
    with pytest.raises(VllmServerError) as e:
        VllmServer(model_dir(tmp_path), port=None, venv=venv).start(timeout=20)
    assert "exited with code 3 before it was ready" in str(e.value)
    assert "no CPU backend here" in str(e.value)


def test_a_server_that_never_becomes_ready_is_stopped(tmp_path):
    venv = fake_venv(tmp_path, "import os, time\nprint('loading weights...', flush=True)\n"
                               "time.sleep(300)\n")
    s = VllmServer(model_dir(tmp_path), port=None, venv=venv)
    with pytest.raises(VllmServerError, match="did not become ready within 1 s") as e:
        s.start(timeout=1)
    assert "loading weights..." in str(e.value)
    assert not srv_mod._group_alive(s.proc.pid) and not os.path.exists(s.run_dir)


def test_stop_ends_the_whole_process_group(tmp_path):
    venv = fake_venv(tmp_path, HEALTHY)
    s = VllmServer(model_dir(tmp_path), port=None, venv=venv)
    with s:
        assert s.alive and s.healthy()
        child = int(open(os.path.join(s.run_dir, "child.pid")).read())
        os.kill(child, 0)                                   # the grandchild runs
        assert "fake vLLM up" in s.log_tail()
    assert not s.alive and not srv_mod._group_alive(s.proc.pid)

    def gone() -> bool:                                     # reaped by init: gone soon
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        return False

    wait_until(gone, 5, interval=0.1, what=f"the grandchild {child} gone")
    assert "fake vLLM up" in s.log_tail()                   # the log outlives the run dir


def test_the_cli_prints_a_clear_error(tmp_path, monkeypatch, capsys):
    venv = fake_venv(tmp_path, "import sys\nprint('OSError: [Errno 98] Address in use')\n"
                               "sys.exit(1)\n")
    monkeypatch.setenv("INFERLAB_VLLM_VENV", str(venv))
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc = main(["vllm", "serve", "--model-dir", str(model_dir(tmp_path)), "--port", str(port)])
    err = capsys.readouterr().err
    assert rc == 2 and "inferlab: error: vLLM exited with code 1" in err
    assert "Address in use" in err


def test_the_serve_command_is_in_the_cli_help(capsys):
    with pytest.raises(SystemExit):
        main(["vllm", "serve", "--help"])
    out = capsys.readouterr().out
    assert "--model-dir" in out and "--port" in out


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_a_server_that_dies_is_reported_with_its_log_in_the_view(tmp_path):
    from inferlab.widgets.vllm_kv import VllmPrefixCache
    venv = fake_venv(tmp_path, HEALTHY)
    with VllmServer(model_dir(tmp_path), port=None, venv=venv) as s:
        conn = s.connector().connect(timeout=0.5)
        try:
            view = VllmPrefixCache(conn)
            assert any("no step report" in w for w in conn.warnings)    # a fake: no plugin
            os.killpg(s.proc.pid, signal.SIGKILL)
            wait_until(lambda: any("exited" in w for w in view.warnings), 10, interval=0.05,
                       what="the view's warning that the server exited")
            died = [w for w in view.warnings if "vLLM server exited" in w]
            assert died and "fake vLLM up" in died[0]
        finally:
            conn.close()
