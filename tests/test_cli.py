"""The command line: help, generate (streams, then TTFT / tokens/s / KV blocks), clear errors."""
import subprocess
import sys


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "inferlab.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_help_lists_commands():
    r = cli("--help")
    assert r.returncode == 0
    for word in ("generate", "bench", "figures", "claims"):
        assert word in r.stdout


def test_generate_streams_then_reports():
    r = cli("generate", "--model", "tiny", "--raw", "--max-tokens", "5", "Hello there")
    assert r.returncode == 0, r.stderr[-2000:]
    tail = r.stdout.strip().splitlines()[-1]
    assert "TTFT" in tail and "tokens/s" in tail and "KV blocks used" in tail
    assert "5 new tokens" in r.stdout


def test_generate_bad_input_is_a_clear_error():
    r = cli("generate", "--model", "tiny", "--max-tokens", "0", "Hello")
    assert r.returncode == 2
    assert "max_tokens must be >= 1" in r.stderr and "Traceback" not in r.stderr
