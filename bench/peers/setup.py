"""Creates the peers' environment, bench/peers/.venv, with pip from PyPI (requirements.txt's exact pins).

    python -m bench.peers.setup [--force]

Prints what it did; on failure (no network, a pin that pip cannot meet) it says why and leaves no ready marker, so the
peer rows skip with that reason.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import venv

import bench.peers as peers

CHECK = ("import sae_lens, circuit_tracer, transformer_lens, transformers, torch, safetensors, json; "
         "import importlib.metadata as md; "
         "print(json.dumps({p: md.version(p) for p in ('sae-lens', 'circuit-tracer', 'transformer-lens', "
         "'transformers', 'torch')}))")


def setup(force: bool = False) -> str | None:
    """Creates and fills the environment; None when it is ready, else why not."""
    venv_dir = peers.VENV
    if not force and peers.missing() is None:
        return None
    if force and venv_dir.exists():
        shutil.rmtree(venv_dir)
    if not peers.python().exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(venv_dir)
    (venv_dir / peers.READY).unlink(missing_ok=True)  # ready again only once this install imports
    pip = [str(peers.python()), "-m", "pip", "install", "--disable-pip-version-check", "-r",
           str(peers.HERE / "requirements.txt")]
    proc = subprocess.run(pip, capture_output=True, text=True)
    (venv_dir / "install.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        return f"pip failed (rc {proc.returncode}; {venv_dir / 'install.log'}): {proc.stderr.strip()[-400:]}"
    check = subprocess.run([str(peers.python()), "-c", CHECK], capture_output=True, text=True)
    if check.returncode != 0:
        return f"installed, but the peers do not import: {check.stderr.strip()[-400:]}"
    (venv_dir / peers.READY).write_text(check.stdout)
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.peers.setup", description=__doc__.splitlines()[0])
    p.add_argument("--force", action="store_true", help="remove the environment and create it again")
    why = setup(p.parse_args(argv).force)
    if why:
        print(f"peers not installed: {why}", file=sys.stderr)
        return 1
    print(f"peers ready in {peers.VENV}: {json.loads((peers.VENV / peers.READY).read_text())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
