"""Errors of the controller: what was refused, and how to fix it."""

from __future__ import annotations

from switch.errors import SwitchError


class ControllerError(SwitchError):
    """The controller refused an input or a switch did not reach the state it asked for.

    `subject` names what is wrong (a worker id, a slice, a port, a setting), so a caller
    can act on it without parsing the message.
    """

    def __init__(self, message: str, *, fix: str | None = None, subject: object = None):
        self.subject = subject
        super().__init__(message, fix=fix)
