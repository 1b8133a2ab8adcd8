"""The engines of a scaling study: they only schedule ``train_one`` (core.training.study_grid) and yield its rows as runs
finish. ``LocalEngine``: a process pool on this machine (the default). ``RayEngine``: Ray tasks on RAY_ADDRESS's
cluster, or on a local Ray instance with this machine's cores. The same specs give the same rows on either: every
run builds its model and draws its batches from its own seed, on one thread.

An engine is any object with ``name``, ``check()`` (raise StudyError before anything is written) and
``run(specs, should_stop) -> Iterator[row]`` (raise StudyStopped when should_stop() says so).
"""
from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import socket
import sys
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from typing import Callable, Iterator

from core.serve.paths import REPO_ROOT
from core.training.study_grid import RunSpec, StudyError, train_one

ENGINES = ("local", "ray")
ShouldStop = Callable[[], bool]
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


class StudyStopped(RuntimeError):
    """The study was asked to stop; the runs finished so far are in runs.csv."""


class LocalEngine:
    """A pool of worker processes on this machine, one torch thread each, as many as there are cores."""
    name = "local"

    def __init__(self, workers: int | None = None, task: Callable[..., dict] | None = None):
        self.workers = max(1, workers or os.cpu_count() or 1)
        # what each worker runs on a spec: a study's run (train_one), or another top-level function of an
        # importable module that takes one spec and returns its row (core.training.variants.train_variant)
        self.task = task or train_one

    def check(self):
        pass  # nothing to reach: this machine is there (RayEngine.check looks for its cluster)

    def run(self, specs: list[RunSpec], should_stop: ShouldStop) -> Iterator[dict]:
        if not specs:
            return
        # spawn, not fork: the parent may be a threaded server, and a forked torch can deadlock. Spawned workers
        # find train_one and _worker_init by module path (core.training.study_grid, core.training.study_engines), so both stay
        # top-level functions of importable modules. No more workers than runs: each costs seconds to start.
        pool = ProcessPoolExecutor(max_workers=min(self.workers, len(specs)), mp_context=mp.get_context("spawn"),
                                   initializer=_worker_init, initargs=(os.getpid(),))
        # every run queued at once, in the caller's order (run_study's: longest first); a free worker takes the next
        pending = {pool.submit(self.task, s) for s in specs}
        try:
            while pending:
                # wake twice a second to ask should_stop, even while every run is still training
                done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                for f in done:
                    try:
                        row = f.result()
                    except BrokenProcessPool:  # one worker died and took the pool with it
                        raise StudyError("a worker process died (out of memory, or killed); the runs finished "
                                         "before it are kept: run the same command again to continue") from None
                    yield row
                if pending and should_stop():
                    raise StudyStopped()
        finally:
            for f in pending:
                f.cancel()
            if pending:  # stopped or failed: end the runs under way now rather than after they finish
                # the pool's private table of processes: it has no public way to end a task under way
                for p in list((getattr(pool, "_processes", None) or {}).values()):
                    p.terminate()
            pool.shutdown(wait=True, cancel_futures=True)  # reap them: no worker outlives the study


def _worker_init(parent: int | None = None):
    # Ctrl-C reaches the whole process group: only the parent acts on it (and ends its workers)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent is not None:
        die_with_parent(parent)


def die_with_parent(parent: int) -> bool:
    """Have the kernel SIGKILL this process when its parent dies (Linux's PR_SET_PDEATHSIG), so that a study
    killed outright (SIGKILL, out of memory) leaves no worker training on for minutes. ``parent``: the pid the
    parent had, in case it died before this call. False where the platform has no such call (the app's handle
    then ends the study's process group when it sees the study gone)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # None: the C library this process has already loaded
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):  # AttributeError: a C library without prctl
        return False
    if os.getppid() != parent:  # the parent died before the call took effect
        os.kill(os.getpid(), signal.SIGKILL)
    return True


def _train_with_text(spec: RunSpec, text: str, task: Callable[..., dict] | None = None) -> dict:
    """A Ray task: the corpus travels once through the object store, not inside every spec."""
    return (task or train_one)(replace(spec, text=text))  # the spec is frozen: this worker's copy gets its text back


def _ray_module():
    try:
        import ray  # local: Ray is optional (requirements-dev.txt), imported only when the ray engine is used
    except ImportError:
        raise StudyError("the ray engine needs Ray, which is not installed: pip install ray==2.60.0 (it is in "
                         "requirements-dev.txt), or use --engine local") from None
    return ray


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a Ray address like "10.0.0.5:6379" or "ray://head:10001"; None for "auto" and the like."""
    rest = address.split("://", 1)[-1].rstrip("/")  # "ray://head:10001/" -> "head:10001"
    host, sep, port = rest.rpartition(":")  # the last colon: an IPv6 host has colons of its own
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)  # "[::1]" -> "::1"; ":6379" is this machine


def ray_runtime_env() -> dict:
    """What Ray's workers need: this project's ``core`` package (uploaded to the cluster, so its machines need only
    the requirements installed) and one OpenMP thread. Give it to ray.init when initialising Ray yourself."""
    # one OpenMP thread, as a local worker has: a task asks Ray for one CPU and must use no more
    return {"py_modules": [str(REPO_ROOT / "core")], "env_vars": {"OMP_NUM_THREADS": "1"}}


class RayEngine:
    """The same runs as Ray tasks (one CPU each). With an address (or RAY_ADDRESS) it joins that cluster; without
    one it starts a local Ray instance with this machine's cores and shuts it down afterwards. A Ray session
    already initialised in this process (a test's) is used as it is."""
    name = "ray"

    def __init__(self, address: str | None = None, cpus: int | None = None, connect_timeout: float = 5.0,
                 task: Callable[..., dict] | None = None):
        # an empty RAY_ADDRESS counts as unset; cpus sizes only a local instance, a cluster has its own
        self.address = address if address is not None else (os.environ.get("RAY_ADDRESS") or None)
        self.cpus = cpus or os.cpu_count() or 1
        self.connect_timeout = connect_timeout  # seconds
        self.task = task  # None: a study's run (train_one); as LocalEngine's

    def check(self):
        ray = _ray_module()
        if self.address and not ray.is_initialized():
            hp = _host_port(self.address)
            # ray.init on an address where nothing listens waits a long time before it fails; a plain TCP connect
            # says so within connect_timeout. "auto" and the like name no port: ray.init resolves them itself.
            if hp is not None:
                try:
                    socket.create_connection(hp, timeout=self.connect_timeout).close()
                except OSError as e:
                    raise StudyError(
                        f"cannot reach the Ray cluster at {self.address} (RAY_ADDRESS): {e.strerror or e}. Start it "
                        "(ray start --head) or correct the address; unset RAY_ADDRESS to use a local Ray instance "
                        "with this machine's cores.") from None

    def _connect(self, ray) -> bool:
        """Initialise Ray unless it is; True if this call did (and so shuts it down)."""
        if ray.is_initialized():
            return False
        env = ray_runtime_env()
        # log_to_driver=False: the workers' output would break into the progress bar on stderr
        try:
            if self.address:
                ray.init(address=self.address, runtime_env=env, log_to_driver=False)
            else:
                # 100 MiB of object store: it holds one corpus (a few MB at most) and the rows; Ray's default
                # takes a share of the machine's memory
                ray.init(num_cpus=self.cpus, include_dashboard=False, log_to_driver=False, runtime_env=env,
                         object_store_memory=100 * 2**20)
        except Exception as e:  # noqa: BLE001 - Ray raises several kinds; the user needs the message
            raise StudyError(f"Ray could not start or connect ({self.address or 'a local instance'}): "
                             f"{type(e).__name__}: {e}") from None
        return True

    def run(self, specs: list[RunSpec], should_stop: ShouldStop) -> Iterator[dict]:
        if not specs:
            return
        ray = _ray_module()
        started = self._connect(ray)
        pending = []
        try:
            text_ref = ray.put(specs[0].text)  # every spec of a study carries the same corpus
            # max_retries=0: a run that fails fails the study, as in the local engine, rather than training again
            task = ray.remote(num_cpus=1, max_retries=0)(_train_with_text)
            pending = [task.remote(replace(s, text=""), text_ref, self.task) for s in specs]
            while pending:
                done, pending = ray.wait(pending, num_returns=1, timeout=0.5)  # as LocalEngine: should_stop 2x a second
                for ref in done:
                    yield ray.get(ref)
                if pending and should_stop():
                    raise StudyStopped()
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)  # force: kill the runs under way, as LocalEngine terminates its workers
            if started:  # only an instance this call started; a session's own (a test's) stays up
                ray.shutdown()


def make_engine(name: str, workers: int | None = None, address: str | None = None,
                task: Callable[..., dict] | None = None):
    # workers: processes for the local engine, CPUs of a local Ray instance (a cluster has its own); task: what each
    # spec is given to (default: a study's run)
    if name == "local":
        return LocalEngine(workers, task)
    if name == "ray":
        return RayEngine(address, cpus=workers, task=task)
    raise StudyError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")
