"""Waiting for a condition in tests: probed every 20 ms, never slept for blindly."""

from __future__ import annotations

import time


def until(cond, timeout: float = 5.0) -> bool:
    """True as soon as cond() is; cond()'s last answer once `timeout` seconds have passed."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return cond()
