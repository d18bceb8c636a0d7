"""Start a few local processes of one test script (loopback only) and collect what each one
prints; a process that fails or outlives the time limit ends the others."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_processes(
    module: str, num_processes: int, *args: str, timeout_s: float = 120.0, env: dict | None = None
) -> list[subprocess.CompletedProcess]:
    """``python -m module PROCESS_ID NUM_PROCESSES PORT *args`` for every process id, at
    the same time; returns when all have ended, each process's return code and output.
    After ``timeout_s`` the processes still running are killed (return code -9)."""
    port = str(free_port())
    environment = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", module, str(i), str(num_processes), port, *args],
            cwd=ROOT,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(num_processes)
    ]
    deadline = time.monotonic() + timeout_s
    outputs = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        outputs.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return outputs


def last_json(output: str) -> dict:
    """The last line of ``output`` that is a JSON object (the runtimes print their own lines)."""
    for line in reversed(output.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON line in the output: {output[-2000:]}")
