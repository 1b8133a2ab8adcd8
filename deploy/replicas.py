"""Several replicas of the app behind HAProxy with cookie stickiness, on this machine.

    python -m deploy.replicas --replicas 3 --port 8500     # until Ctrl-C; students open http://<this host>:8500
    python -m deploy.replicas compose-config --replicas 3  # deploy/compose.yaml's HAProxy config (deploy/haproxy.cfg)

Starts N ``streamlit run app.py`` processes on free local ports, all saving models into one folder
(TE_MODELS_DIR), waits until each answers on /_stcore/health, then runs HAProxy (Debian: ``apt-get install
haproxy``) with a config rendered from deploy/haproxy.cfg.template: a SERVERID cookie keeps each browser on the
replica that holds its session (its uploads, websocket reconnects and training run), the health endpoint decides
which replicas are in the pool, and websockets pass through as long-lived tunnels. Ctrl-C (or ``stop()``) ends
HAProxy and the replicas. ``bench.load --replicas N`` and tests/test_replicas.py use ``Replicas`` directly.
"""
from __future__ import annotations

import argparse
import csv
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from string import Template

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = Path(__file__).with_name("haproxy.cfg.template")
COMPOSE_CONFIG = Path(__file__).with_name("haproxy.cfg")
COOKIE = "SERVERID"          # the stickiness cookie HAProxy sets; its value is the replica's name
SERVED_BY = "X-Served-By"    # the response header naming the replica that answered
HEALTH = "/_stcore/health"
APP_PORT = 8501              # inside a container (deploy/Dockerfile)
DOCKER_DNS = """resolvers docker
    # Docker's own DNS: a replica restarted under a new address is found again
    nameserver dns 127.0.0.11:53
    hold valid 10s
"""


def render_config(servers: list[tuple[str, str]], bind: str, stats_bind: str, check_interval: str = "2s",
                  server_options: str = "", resolvers: str = "", global_extra: str = "", generated: str = "") -> str:
    """HAProxy's config for ``servers`` [(name, "host:port")]: each name is also its cookie value."""
    if not servers:
        raise ValueError("at least one replica")
    for name, addr in servers:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", name) or not re.fullmatch(r"[A-Za-z0-9_.:\[\]-]+:\d+", addr):
            raise ValueError(f"bad server {name!r} at {addr!r}")
    lines = "\n".join(f"    server {name} {addr} cookie {name}" for name, addr in servers)
    return Template(TEMPLATE.read_text()).substitute(
        bind=bind, stats_bind=stats_bind, check_interval=check_interval, servers=lines,
        server_options=f" {server_options}" if server_options else "", resolvers=resolvers,
        global_extra=global_extra, generated=generated)


def compose_config(replicas: int = 3) -> str:
    """The config deploy/compose.yaml mounts: services app1..appN on the container port, HAProxy on :8080 (the
    official image runs as a non-root user, so compose publishes it on port 80), its stats page on :8404."""
    servers = [(f"app{i}", f"app{i}:{APP_PORT}") for i in range(1, replicas + 1)]
    return render_config(servers, bind=":8080", stats_bind=":8404",
                         server_options="resolvers docker init-addr last,libc,none", resolvers="\n" + DOCKER_DNS,
                         generated=f"# Written by `python -m deploy.replicas compose-config --replicas {replicas}` from "
                                   "deploy/haproxy.cfg.template:\n# change the template (or the replica count) and "
                                   "write it again rather than editing this file.\n")


def find_haproxy() -> str | None:
    """The haproxy binary: on PATH, or where Debian's package puts it."""
    found = shutil.which("haproxy")
    if found:
        return found
    return "/usr/sbin/haproxy" if os.access("/usr/sbin/haproxy", os.X_OK) else None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _wait_until(check, what: str, timeout: float, procs=()) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p, log in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{what}: a process exited ({p.returncode}); {log} says:\n{_tail(log)}")
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what}: not within {timeout:.0f} s")


def _tail(path: Path, n: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


def _healthy(url: str) -> bool:
    with urllib.request.urlopen(url + HEALTH, timeout=2) as r:
        return r.status == 200


class Replicas:
    """N app processes and HAProxy in front of them. Use as a context manager, or ``start()`` and ``stop()``.

    url: the balancer (what browsers open); servers: {name: the replica's own url}; stats_url: HAProxy's page;
    models_dir: the folder every replica saves into; workdir: the config and one log per process."""

    def __init__(self, n: int = 2, models_dir: str | os.PathLike | None = None, host: str = "127.0.0.1",
                 port: int = 0, haproxy: str | None = None, check_interval: str = "2s",
                 env: dict | None = None, startup_timeout: float = 180, workdir: str | os.PathLike | None = None,
                 warm: bool = True):
        if n < 1:
            raise ValueError("at least one replica")
        self.n, self.host, self.port = n, host, port
        self.haproxy = haproxy or find_haproxy()
        if self.haproxy is None:
            raise FileNotFoundError("haproxy not found (Debian/Ubuntu: apt-get install -y haproxy)")
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="te-replicas-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.models_dir = Path(models_dir) if models_dir else self.workdir / "models"
        self.check_interval, self.env, self.startup_timeout = check_interval, env or {}, startup_timeout
        self.warm = warm  # open every page once on each replica before the balancer starts (deploy.warm)
        self.apps: dict[str, subprocess.Popen] = {}
        self.servers: dict[str, str] = {}
        self.proxy: subprocess.Popen | None = None
        self.url = self.stats_url = ""

    # ------------------------------------------------------------------ life cycle
    def start(self) -> "Replicas":
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        self.models_dir.mkdir(parents=True, exist_ok=True)
        # the replicas listen on 127.0.0.1 behind this HAProxy: its X-Forwarded-For is the client's address
        env = {"TE_TRUSTED_PROXY": "127.0.0.1", **os.environ, **self.env, "TE_MODELS_DIR": str(self.models_dir)}
        for i in range(1, self.n + 1):
            name, port = f"app{i}", free_port()
            log = self.workdir / f"{name}.log"
            self.apps[name] = subprocess.Popen(
                [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
                 "--server.address", "127.0.0.1", "--server.headless", "true", "--server.fileWatcherType", "none"],
                cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
            self.servers[name] = f"http://127.0.0.1:{port}"
        for name, url in self.servers.items():
            _wait_until(lambda: _healthy(url), f"replica {name}", self.startup_timeout,
                        [(self.apps[name], self.workdir / f"{name}.log")])
        if self.warm:  # all replicas at once: each is its own process
            from concurrent.futures import ThreadPoolExecutor

            from deploy.warm import warm
            with ThreadPoolExecutor(len(self.servers)) as pool:
                for f in [pool.submit(warm, url) for url in self.servers.values()]:
                    f.result()
        port = self.port or free_port(self.host)
        stats_port = free_port()
        cfg = self.workdir / "haproxy.cfg"
        cfg.write_text(render_config([(n, u.split("//", 1)[1]) for n, u in self.servers.items()],
                                     bind=f"{self.host}:{port}", stats_bind=f"127.0.0.1:{stats_port}",
                                     check_interval=self.check_interval))
        check = subprocess.run([self.haproxy, "-c", "-q", "-f", str(cfg)], capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"haproxy refused {cfg}:\n{check.stdout}{check.stderr}")
        log = self.workdir / "haproxy.log"
        self.proxy = subprocess.Popen([self.haproxy, "-db", "-f", str(cfg)], stdout=log.open("wb"),
                                      stderr=subprocess.STDOUT, start_new_session=True)
        shown = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        self.url, self.stats_url = f"http://{shown}:{port}", f"http://127.0.0.1:{stats_port}/"
        _wait_until(lambda: all(row["status"] == "UP" and row["check_status"] == "L7OK"  # checked, not assumed
                                for row in self.stats().values()) and _healthy(self.url), "haproxy",
                    60, [(self.proxy, log)])

    def stop(self) -> None:
        """End HAProxy, then the replicas (SIGTERM, then SIGKILL after 15 s). The models folder is kept."""
        procs = ([self.proxy] if self.proxy else []) + list(self.apps.values())
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)

    def stop_replica(self, name: str) -> None:
        """End one replica (as a crash would): HAProxy's health check takes it out of the pool."""
        p = self.apps[name]
        p.terminate()
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)

    def __enter__(self) -> "Replicas":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ what HAProxy sees
    def stats(self) -> dict[str, dict]:
        """HAProxy's statistics for each replica (its CSV row: status, stot = sessions served, ...)."""
        with urllib.request.urlopen(self.stats_url + ";csv", timeout=5) as r:
            text = r.read().decode().lstrip("# ")
        return {row["svname"]: row for row in csv.DictReader(io.StringIO(text))
                if row["pxname"] == "replicas" and row["svname"] in self.servers}

    def states(self) -> dict[str, str]:
        """{replica: "UP" | "DOWN" | ...} as HAProxy's health checks see them (without "1/3": a check of 3)."""
        return {name: row["status"].split()[0] for name, row in self.stats().items()}

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{_tail(p)}" for p in sorted(self.workdir.glob("*.log")))


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["compose-config"]:
        p = argparse.ArgumentParser(prog="python -m deploy.replicas compose-config",
                                    description="print the HAProxy config for deploy/compose.yaml")
        p.add_argument("--replicas", type=int, default=3)
        sys.stdout.write(compose_config(p.parse_args(argv[1:]).replicas))
        return
    p = argparse.ArgumentParser(prog="python -m deploy.replicas", description=__doc__.splitlines()[0])
    p.add_argument("--replicas", type=int, default=2, help="app processes (one per core or two suits a class)")
    p.add_argument("--host", default="0.0.0.0", help="where HAProxy listens (default: every interface)")
    p.add_argument("--port", type=int, default=8500)
    p.add_argument("--models-dir", default=os.environ.get("TE_MODELS_DIR", str(ROOT / "models")),
                   help="the models folder all replicas share (default: TE_MODELS_DIR, else models/)")
    args = p.parse_args(argv)
    r = Replicas(args.replicas, models_dir=args.models_dir, host=args.host, port=args.port)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with r:
        where = f" (on every interface: http://<this host>:{r.url.rsplit(':', 1)[1]})" if args.host == "0.0.0.0" else ""
        print(f"{args.replicas} replicas behind HAProxy: open {r.url}{where}")
        for name, url in r.servers.items():
            print(f"  {name}: {url} (pid {r.apps[name].pid})")
        print(f"HAProxy's statistics page: {r.stats_url}; models folder: {r.models_dir}; logs: {r.workdir}")
        print("Ctrl-C stops HAProxy and the replicas.")
        try:
            while all(p.poll() is None for p in [r.proxy, *r.apps.values()]):
                time.sleep(1)
            print("a process ended; stopping everything. Logs:\n" + r.logs(), file=sys.stderr)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
