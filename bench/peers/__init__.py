"""The field's libraries as peers (issue 60): SAELens, circuit-tracer, TransformerLens, in their own environment.

    python -m bench.peers.setup        # creates bench/peers/.venv with requirements.txt (pip, from PyPI)
    python -m bench.run --only peers   # the rows: ours here, the peer's side in a subprocess of that environment

They pin TransformerLens < 4 and transformers <= 4.57.3 while the app pins transformers 5, so they never share the
app's environment. The two sides exchange tensors and results through files in a temporary folder (safetensors and
JSON); the peer's side is bench/peers/side.py, run by that environment's Python. A peer that cannot be installed is
skipped with the reason, never faked.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = Path(os.environ.get("TE_PEERS_VENV", HERE / ".venv"))
READY = "peers-ready.json"  # written by setup once every pinned package imports


def python() -> Path:
    return VENV / "bin" / "python"


def missing() -> str | None:
    """Why the peers' environment cannot run (None when it can): absent, or its setup never finished."""
    if not python().exists():
        return f"no peers environment at {VENV} (python -m bench.peers.setup creates it)"
    if not (VENV / READY).exists():
        return f"the peers environment at {VENV} is incomplete (its setup did not finish: python -m bench.peers.setup)"
    return None


class Peer:
    """bench/peers/side.py running in the peers' environment with ``threads`` torch threads: ``ask(do, **args)``
    sends one command and returns its answer (a dict; RuntimeError with the side's last words when it fails).
    Use it as a context manager: the process ends with the block."""

    def __init__(self, threads: int, log: Path):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONNOUSERSITE="1",
                   TQDM_DISABLE="1", WANDB_MODE="disabled")
        env.pop("PYTHONPATH", None)  # nothing of this repository's environment leaks into the peers'
        self.log = log
        self._err = open(log, "w")
        self.proc = subprocess.Popen([str(python()), str(HERE / "side.py"), str(threads)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._err, text=True, env=env)
        self.hello = self._answer()

    def _answer(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith("ANSWER "):
                answer = json.loads(line[7:])
                if "error" in answer:
                    raise RuntimeError(f"peer side: {answer['error']}")
                return answer
        self._err.flush()
        raise RuntimeError(f"the peer side ended (rc {self.proc.wait()}): {self.log.read_text()[-1500:]}")

    def ask(self, do: str, **args) -> dict:
        """The side runs each command with this process's torch threads at the time (a row may set 1)."""
        import torch

        self.proc.stdin.write(json.dumps({"do": do, "threads": torch.get_num_threads(), **args}) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._err.close()
