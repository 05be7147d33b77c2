"""The errors the Skiplock client raises on purpose."""

from __future__ import annotations

from typing import Optional

__all__ = ["SkiplockError", "ValidationError"]


class SkiplockError(Exception):
    """Any error of an enqueue: the database refused or failed the call, or could not be reached.

    ``sqlstate`` keeps PostgreSQL's SQLSTATE when the server sent one (``"40001"``: retry the
    transaction; ``"25P02"``: your transaction had already failed). The driver's own exception
    is the ``__cause__``. Like any error of a statement, it leaves your transaction aborted:
    roll it back.
    """

    sqlstate: Optional[str]

    def __init__(self, message: str, *, sqlstate: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate


class ValidationError(SkiplockError):
    """Bad input: ``field`` names it (``priority``, ``dedupe.windowMs``, ``payload.items[2]``,
    ``jobs[3].task``), in the library's camelCase names, and the message says what is wrong.

    Nothing was enqueued. Raised by the client before anything is sent (a value JSON cannot
    carry, such as ``float("nan")``; a naive ``datetime``), or by the database function
    (SQLSTATE ``22023``): then, as any error of a statement, it aborted your transaction.

    >>> try:
    ...     skiplock.enqueue(conn, "email.send", {}, priority=1.5)
    ... except skiplock.ValidationError as e:
    ...     print(e.field, e.message)   # priority  priority: must be an integer, got 1.5
    """

    field: str

    def __init__(self, field: str, message: str, *, sqlstate: Optional[str] = None) -> None:
        super().__init__(f"{field}: {message}", sqlstate=sqlstate)
        self.field = field
