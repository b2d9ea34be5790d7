"""One exception root for everything under switch/ (client, controller, emulator).

switch/ must not import orchestrator (the emulator and the controller are deployed and
run without it), so this root mirrors orchestrator.errors.RainmakerError: a message,
an optional fix, `exit_code` and `render()`, data attributes on the subclasses, so the
orchestrator's CLI can report a SwitchError exactly like one of its own.
"""

from __future__ import annotations


class SwitchError(Exception):
    """Root of every error switch/ raises on purpose."""

    exit_code = 1

    def __init__(self, message: str, *, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.fix = fix

    def render(self) -> str:
        text = self.message
        if self.fix:
            text += f"\n  fix: {self.fix}"
        return text
