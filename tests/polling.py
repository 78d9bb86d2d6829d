"""The one polling helper of the tests: wait for a condition, bounded in time. No I/O of its own."""

from __future__ import annotations

import time


def wait_until(condition, what: str = "the condition", timeout: float = 15.0, *, alive=lambda: None,
               detail=lambda: "", interval: float = 0.02):
    """Poll `condition` until it returns something truthy, and return that; raise TimeoutError
    naming `what` after `timeout` seconds. `alive` raises when what is waited on has died (no use
    waiting out the timeout); `detail` adds a log to the error."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive()
        if value := condition():
            return value
        time.sleep(interval)
    raise TimeoutError(f"{what}: not after {timeout:.0f} s{detail()}")


def reached(condition, timeout: float) -> bool:
    """Whether `condition` held within `timeout` seconds, for a wait that goes on either way."""
    try:
        return bool(wait_until(condition, timeout=timeout))
    except TimeoutError:
        return False
