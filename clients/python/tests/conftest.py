"""pytest fixtures: a real PostgreSQL with Skiplock migrated.

``SKIPLOCK_TEST_DATABASE_URL`` (else ``DATABASE_URL``) names the database and
``SKIPLOCK_TEST_SCHEMA`` (default ``skiplock``) its Skiplock schema, already migrated
(``npx skiplock migrate``). test/producers/python.test.ts runs this suite that way against the
server of the Node.js suite (the embedded PostgreSQL 18, or DATABASE_URL). Without a URL every
test is skipped with that note.
"""

from __future__ import annotations

import os
from typing import Iterator

import psycopg
import pytest

URL = os.environ.get("SKIPLOCK_TEST_DATABASE_URL") or os.environ.get("DATABASE_URL")
SCHEMA = os.environ.get("SKIPLOCK_TEST_SCHEMA", "skiplock")


def quoted(schema: str = SCHEMA) -> str:
    return '"' + schema.replace('"', '""') + '"'


@pytest.fixture(scope="session")
def url() -> str:
    if not URL:
        pytest.skip("set SKIPLOCK_TEST_DATABASE_URL to a database where Skiplock is migrated (npx skiplock migrate)")
    with psycopg.connect(URL, autocommit=True) as conn:
        found = conn.execute("SELECT to_regprocedure(%s)", [f"{quoted()}.enqueue(text, jsonb, jsonb)"]).fetchone()
        if found is None or found[0] is None:
            pytest.exit(f"schema {SCHEMA!r} of {URL} has no enqueue function: run `npx skiplock migrate` (with --schema)", 2)
    return URL


@pytest.fixture
def conn(url: str) -> Iterator[psycopg.Connection]:
    """A connection in a transaction the test commits or leaves (rolled back at the end)."""
    with psycopg.connect(url) as connection:
        yield connection
        connection.rollback()


@pytest.fixture
def other(url: str) -> Iterator[psycopg.Connection]:
    """A second session (autocommit): what everyone else sees."""
    with psycopg.connect(url, autocommit=True) as connection:
        yield connection
