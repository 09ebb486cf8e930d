"""A benchmark worker process that answers one JSON line per request (start-up, each round)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Mapping

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class WorkerProcess:
    """`python -m MODULE ARGS...` started from the checkout, spoken to line by line.

    The worker prints a JSON line when ready (`info`) and one per request; a line with
    "failed" (e.g. its memory guard) or the worker's end raises RuntimeError(message, exit
    code[, reason]).
    """

    def __init__(self, system: str, module: str, args: list[str], python: str = "",
                 env: Mapping[str, str] | None = None):
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = _ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
        full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        full_env.update(env or {})
        self.system = system
        # stderr to a file: TensorFlow's start-up logging must never fill a pipe and block.
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([python or sys.executable, "-m", module, *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True, env=full_env, cwd=_ROOT)
        self.info = self._read()

    def _read(self) -> dict:
        while True:
            line = self.proc.stdout.readline()
            if not line:
                self.stderr.seek(0)
                err = self.stderr.read()[-2000:]
                raise RuntimeError(f"worker {self.system} ended: {err}", self.proc.wait())
            line = line.strip()
            if line.startswith("{"):
                msg = json.loads(line)
                if "failed" in msg:
                    raise RuntimeError(f"worker {self.system}: {msg['failed']}",
                                       self.proc.wait(), msg["failed"])
                return msg

    def request(self, line: str) -> dict:
        """Sends one command line and returns the worker's answer."""
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        """Asks the worker to quit; kills it if it does not within a minute."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
