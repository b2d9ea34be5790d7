"""The one exception root of rainmaker, and the root of everything under switch/.

The root lives here, in the lowest layer, because switch/ runs without orchestrator
(the emulator is a switch of its own, the controller drives bf_switchd unchanged) and
must not import it, while orchestrator imports switch freely: orchestrator.errors
re-exports RainmakerError, so `except RainmakerError` catches a BfrtError or a
ControllerError too, and the CLI reports every one of them the same way.
"""

from __future__ import annotations


class RainmakerError(Exception):
    """Root of every error rainmaker raises on purpose: a message, an optional fix,
    the CLI's exit code, and data attributes on the subclasses."""

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


class SwitchError(RainmakerError):
    """Root of every error switch/ raises on purpose (client, controller, emulator)."""
