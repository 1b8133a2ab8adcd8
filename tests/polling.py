"""Waiting in tests for something another thread or process does: poll until it holds, fail after a timeout.
Never a measurement: how long it took is not asserted anywhere."""
import time


def wait_until(cond, timeout: float = 180.0, every: float = 0.01) -> None:
    """Return once ``cond()`` is true; AssertionError("timed out") after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(every)


def stays(cond, seconds: float, every: float = 0.01) -> None:
    """Check that ``cond()`` holds throughout ``seconds`` (something that must *not* happen, such as a paused
    run taking a step): polled, so it fails at the first moment it breaks, not only at the end."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert cond(), "changed while it should have stayed"
        time.sleep(every)
