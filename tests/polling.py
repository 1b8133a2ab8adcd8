"""Waiting in tests for something another thread or process does: poll until it holds, fail after a timeout.
Never a measurement: how long it took is not asserted anywhere."""
import time


def wait_until(cond, timeout: float = 60.0, every: float = 0.01) -> None:
    """Return once ``cond()`` is true; AssertionError("timed out") after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(every)
