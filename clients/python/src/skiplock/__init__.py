"""Skiplock for Python: enqueue jobs into a Skiplock queue (a durable job queue on PostgreSQL)
from psycopg 3, in your own transaction.

The Node.js workers of the same schema run the jobs. Both functions call the SQL functions that
Skiplock's migrations install (``<schema>.enqueue``, ``<schema>.enqueue_many``): the same
validation, defaults, dedupe modes and wake-up hint as the Node.js library, one statement per
call, and nothing committed for you.

>>> import psycopg, skiplock
>>> with psycopg.connect(DATABASE_URL) as conn:          # commits when the block ends
...     skiplock.enqueue(conn, "email.send", {"to": "ada@example.com"}, delay_ms=30_000)
Enqueued(id='42', created=True)

See the README of this package (clients/python/README.md) and docs/producers.md.
"""

from ._client import Connection, Dedupe, Enqueued, JobDict, enqueue, enqueue_many
from .errors import SkiplockError, ValidationError

__all__ = ["Connection", "Dedupe", "Enqueued", "JobDict", "SkiplockError", "ValidationError", "enqueue", "enqueue_many"]
__version__ = "0.1.0"
