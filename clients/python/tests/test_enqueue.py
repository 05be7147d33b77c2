"""The Python client against a real PostgreSQL (see conftest.py): what it stores, answers and
raises, in the caller's transaction. What it stores for each option compared with the Node.js
library is test/producers/conformance.test.ts's job (path 'python'); these tests are the
client's own behaviour.

Deliberate breaks seen failing (each undone after):
- ``_run`` committing after its statement: five tests failed (test_nothing_is_committed_for_you,
  test_in_a_transaction_block, test_enqueue_many_in_input_order, the wake-up hint test, which
  saw the hint before the caller's commit, and the SQLAlchemy rollback);
- ``_mapped`` ignoring the error's column name: every test_bad_input_from_the_server case and
  test_enqueue_many_refuses_the_whole_call failed (a SkiplockError, not a ValidationError).
- the client as before issue 25's review (``_run_at`` sending ``value.isoformat()``, the first
  unknown key named) with migration 18 without its payload check: 8 tests failed — the +05:30:15,
  +20:00 and −23:59:59.999999 offsets and Amsterdam 1920 (the function's ISO form has no seconds
  in an offset and no offset beyond ±15:59), both year cases (refused by the server, sqlstate
  22023, not before sending), the smallest unknown key, and 10**400 (stored).
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
import skiplock
from skiplock import Enqueued, SkiplockError, ValidationError

from conftest import SCHEMA, quoted

S = quoted()


def row(conn: psycopg.Connection, job_id: str) -> dict:
    cur = conn.execute(
        f"""SELECT task, queue, status, priority, payload, dedupe_key, pending_key, max_attempts, timeout_ms,
                   group_key, deps_left, run_on_dependency_failure,
                   extract(epoch FROM run_after - created_at) * 1000 AS delay_ms, run_after
            FROM {S}.jobs WHERE id = %s""",
        [int(job_id)],
    )
    values = cur.fetchone()
    if values is None:
        return {}
    names = [d.name for d in cur.description or []]
    return dict(zip(names, values))


def enqueue(conn: psycopg.Connection, task: str, payload=None, **options) -> Enqueued:
    return skiplock.enqueue(conn, task, payload, schema=SCHEMA, **options)


def test_nothing_is_committed_for_you(conn, other):
    job = enqueue(conn, "py.rollback", {"n": 1})
    assert isinstance(job, Enqueued) and job.created is True and job.id.isdigit()
    assert row(conn, job.id)["status"] == "pending"  # the caller sees its job
    assert row(other, job.id) == {}  # nobody else does, until the commit
    conn.rollback()
    assert row(other, job.id) == {}
    kept = enqueue(conn, "py.commit", {"n": 2})
    conn.commit()
    assert row(other, kept.id)["task"] == "py.commit"


def test_in_a_transaction_block(conn, other):
    with pytest.raises(RuntimeError):
        with conn.transaction():
            job = enqueue(conn, "py.block", {})
            raise RuntimeError("the caller's own failure")
    assert row(other, job.id) == {}


def test_defaults(conn):
    job = enqueue(conn, "py.defaults")
    stored = row(conn, job.id)
    assert (stored["queue"], stored["priority"], stored["max_attempts"], stored["payload"]) == ("default", 100, 3, None)
    assert stored["delay_ms"] == 0 and stored["timeout_ms"] is None and stored["dedupe_key"] is None


def test_every_keyword_lands_in_its_column(conn):
    at = datetime(2031, 1, 2, 3, 4, 5, 678000, tzinfo=timezone(timedelta(hours=2)))
    job = enqueue(
        conn,
        "py.options",
        {"to": "ada@example.com", "n": [1, 2.5, None, True]},
        queue="mail",
        priority=-3,
        dedupe_key="py-options",
        max_attempts=9,
        run_at=at,
        timeout_ms=1_500,
        group="tenant-7",
    )
    stored = row(conn, job.id)
    assert stored["payload"] == {"to": "ada@example.com", "n": [1, 2.5, None, True]}
    assert (stored["queue"], stored["priority"], stored["dedupe_key"], stored["max_attempts"]) == ("mail", -3, "py-options", 9)
    assert (stored["timeout_ms"], stored["group_key"]) == (1_500, "tenant-7")
    assert stored["run_after"] == at
    delayed = enqueue(conn, "py.delay", delay_ms=30_000)
    assert row(conn, delayed.id)["delay_ms"] == 30_000


@pytest.mark.parametrize(
    "offset",
    [
        timedelta(hours=5, minutes=30, seconds=15),  # seconds: ISO 8601 as the function takes it has none
        timedelta(hours=20),  # beyond the function's ±15:59
        -timedelta(hours=23, minutes=59, seconds=59, microseconds=999999),
        timedelta(0),
    ],
)
def test_run_at_is_sent_as_its_instant_in_utc(conn, offset):
    at = datetime(2031, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(offset))
    job = enqueue(conn, "py.offset", run_at=at)
    assert row(conn, job.id)["run_after"] == at  # the same instant (aware datetimes compare so)


def test_run_at_in_a_zoneinfo_zone_with_a_local_mean_time_offset(conn):
    zoneinfo = pytest.importorskip("zoneinfo")
    try:
        amsterdam = zoneinfo.ZoneInfo("Europe/Amsterdam")
    except zoneinfo.ZoneInfoNotFoundError:
        pytest.skip("no time zone database here")
    at = datetime(1920, 6, 1, 12, 0, tzinfo=amsterdam)  # +01:19:32 (summer time on local mean time)
    assert at.utcoffset() is not None and at.utcoffset().seconds % 60 != 0
    job = enqueue(conn, "py.lmt", run_at=at)
    assert row(conn, job.id)["run_after"] == at


@pytest.mark.parametrize(
    "at",
    [
        datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-5))),  # 10000-01-01 in UTC
        datetime(1, 1, 1, 1, 0, tzinfo=timezone(timedelta(hours=5))),  # year 0 in UTC
    ],
)
def test_run_at_outside_the_years_1_to_9999_in_utc(conn, at):
    with pytest.raises(ValidationError) as caught:
        enqueue(conn, "py.year", run_at=at)
    assert caught.value.field == "runAt" and caught.value.sqlstate is None
    assert caught.value.message == f'runAt: must be between the years 1 and 9999, got "{at.isoformat()}"'
    conn.execute("SELECT 1")  # refused before sending


def test_enqueue_many_names_the_smallest_unknown_key(conn):
    with pytest.raises(ValidationError) as caught:
        skiplock.enqueue_many(conn, [{"task": "a", "\U0001F600": 1, "\uffff": 2, "zz": 3}], schema=SCHEMA)
    assert caught.value.field == "jobs[0].zz"
    with pytest.raises(ValidationError) as caught:
        skiplock.enqueue_many(conn, [{"task": "a", "\U0001F600": 1, "\uffff": 2}], schema=SCHEMA)
    assert caught.value.field == "jobs[0].\uffff"


def test_a_payload_integer_beyond_a_double_is_refused_by_the_function(conn):
    with pytest.raises(ValidationError) as caught:
        enqueue(conn, "py.big", {"n": [1, 10**400]})
    assert (caught.value.field, caught.value.sqlstate) == ("payload.n[1]", "22023")
    assert "JavaScript would read Infinity" in caught.value.message


def test_dedupe_hits_answer_the_holder(conn):
    first = enqueue(conn, "py.dedupe", {"v": 1}, dedupe_key="py-k")
    assert enqueue(conn, "py.dedupe", {"v": 2}, dedupe_key="py-k") == Enqueued(first.id, False)
    queued = enqueue(conn, "py.dedupe", dedupe_key="py-p", dedupe={"scope": "pending"})
    assert row(conn, queued.id)["pending_key"] == "py-p"
    assert enqueue(conn, "py.dedupe", dedupe_key="py-p", dedupe={"scope": "pending"}) == Enqueued(queued.id, False)
    window = enqueue(conn, "py.dedupe", dedupe_key="py-w", dedupe={"window_ms": 60_000})
    assert enqueue(conn, "py.dedupe", dedupe_key="py-w", dedupe={"window_ms": 60_000}).id == window.id
    held = enqueue(conn, "py.dedupe", {"v": 1}, dedupe_key="py-r", dedupe={"replace": True, "max_wait_ms": 5_000}, delay_ms=60_000)
    assert row(conn, held.id)["delay_ms"] == 5_000  # capped by max_wait_ms
    again = enqueue(conn, "py.dedupe", {"v": 2}, dedupe_key="py-r", dedupe={"replace": True}, priority=1)
    assert again == Enqueued(held.id, False)
    assert (row(conn, held.id)["payload"], row(conn, held.id)["priority"]) == ({"v": 2}, 1)


def test_depends_on(conn):
    parent = enqueue(conn, "py.parent")
    child = enqueue(conn, "py.child", depends_on=[parent.id, int(parent.id)], on_dependency_failure="run")
    stored = row(conn, child.id)
    assert (stored["status"], stored["deps_left"], stored["run_on_dependency_failure"]) == ("waiting", 1, True)


def test_enqueue_many_in_input_order(conn, other):
    results = skiplock.enqueue_many(
        conn,
        [
            ("py.many", {"i": 0}),
            {"task": "py.many", "payload": {"i": 1}, "dedupe_key": "py-many", "priority": 5},
            {"task": "py.many", "payload": {"i": 2}},
            {"task": "py.many", "dedupe_key": "py-many"},
        ],
        schema=SCHEMA,
    )
    assert [r.created for r in results] == [True, True, True, False]
    assert results[3].id == results[1].id
    assert [row(conn, r.id)["payload"] for r in results[:3]] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert row(conn, results[1].id)["priority"] == 5
    assert all(row(other, r.id) == {} for r in results)  # not committed for you


def test_enqueue_many_of_nothing_sends_nothing(url):
    closed = psycopg.connect(url)
    closed.close()
    assert skiplock.enqueue_many(closed, [], schema=SCHEMA) == []


def test_enqueue_many_refuses_the_whole_call(conn, other):
    with pytest.raises(ValidationError) as caught:
        skiplock.enqueue_many(conn, [("py.batch", 1), {"task": "py.batch", "max_attempts": 0}], schema=SCHEMA)
    assert caught.value.field == "jobs[1].maxAttempts"
    conn.rollback()
    assert other.execute(f"SELECT count(*) FROM {S}.jobs WHERE task = 'py.batch'").fetchone() == (0,)


@pytest.mark.parametrize(
    "options, field",
    [
        ({"priority": 1.5}, "priority"),
        ({"priority": "5"}, "priority"),
        ({"max_attempts": 0}, "maxAttempts"),
        ({"queue": ""}, "queue"),
        ({"delay_ms": -1}, "delayMs"),
        ({"run_at": datetime(2031, 1, 1, tzinfo=timezone.utc), "delay_ms": 5}, "runAt"),
        ({"dedupe": {"scope": "pending"}}, "dedupe"),
        ({"dedupe_key": "k", "dedupe": {"scope": "all"}}, "dedupe.scope"),
        ({"dedupe_key": "k", "dedupe": {"window": 5}}, "dedupe.window"),
        ({"depends_on": ["0"]}, "dependsOn[0]"),
        ({"depends_on": "42"}, "dependsOn"),
        ({"depends_on": ["999999999"]}, "dependsOn"),
        ({"on_dependency_failure": "ignore"}, "onDependencyFailure"),
        ({"sequence": ""}, "sequence"),
        ({"sequence": "account:42", "dedupe_key": "k"}, "sequence"),
        ({"group": "é" * 101}, "group"),
    ],
)
def test_bad_input_from_the_server(conn, options, field):
    with pytest.raises(ValidationError) as caught:
        enqueue(conn, "py.bad", {}, **options)
    error = caught.value
    assert (error.field, error.sqlstate) == (field, "22023")
    assert error.message.startswith(f"{field}: ") and str(error) == error.message
    assert isinstance(error.__cause__, psycopg.errors.InvalidParameterValue)
    # like any error of a statement, it aborted the transaction
    with pytest.raises(psycopg.errors.InFailedSqlTransaction):
        conn.execute("SELECT 1")


@pytest.mark.parametrize(
    "task, payload, options, field, message",
    [
        ("py.nan", {"items": [1, float("nan")]}, {}, "payload.items[1]", "must be a finite number, got nan"),
        ("py.inf", {"a b": float("inf")}, {}, 'payload["a b"]', "must be a finite number, got inf"),
        ("py.set", {1, 2}, {}, "payload", "must be JSON-serialisable"),
        ("py.nul", {"s": "a\x00b"}, {}, "payload", "must not contain the NUL character"),
        ("py.surrogate", {"s": "\ud800"}, {}, "payload", "must be well-formed Unicode"),
        (5, None, {}, "task", "must be a non-empty string, got 5"),
        ("a\x00b", None, {}, "task", "must not contain the NUL character"),
        ("py.naive", None, {"run_at": datetime(2031, 1, 1)}, "runAt", "must be a timezone-aware datetime"),
        ("py.nan", None, {"delay_ms": float("nan")}, "delayMs", "must be a finite number, got nan"),
        ("py.nan", None, {"dedupe_key": "k", "dedupe": {"window_ms": float("inf")}}, "dedupe.windowMs", "finite"),
    ],
)
def test_bad_input_refused_before_sending(conn, task, payload, options, field, message):
    with pytest.raises(ValidationError) as caught:
        enqueue(conn, task, payload, **options)
    assert caught.value.field == field and caught.value.sqlstate is None
    assert message in caught.value.message
    conn.execute("SELECT 1")  # nothing was sent: the transaction is still usable


@pytest.mark.parametrize(
    "jobs, field",
    [
        ([("a", 1), ("b",)], "jobs[1]"),
        ([("a", 1), "b"], "jobs[1]"),
        ([{"task": "a", "payload": 1, "dedupeKey": "k"}], "jobs[0].dedupeKey"),
        ([{"task": "a", "payload": float("nan")}], "jobs[0].payload"),
    ],
)
def test_enqueue_many_bad_jobs_refused_before_sending(conn, jobs, field):
    with pytest.raises(ValidationError) as caught:
        skiplock.enqueue_many(conn, jobs, schema=SCHEMA)
    assert caught.value.field == field


def test_other_database_errors_keep_their_sqlstate(conn):
    with pytest.raises(SkiplockError) as caught:
        skiplock.enqueue(conn, "py.x", {}, schema="no_such_schema_here")
    assert not isinstance(caught.value, ValidationError)
    assert caught.value.sqlstate == "3F000"  # invalid_schema_name
    assert isinstance(caught.value.__cause__, psycopg.Error)
    conn.rollback()
    with pytest.raises(psycopg.errors.DivisionByZero):
        conn.execute("SELECT 1/0")
    with pytest.raises(SkiplockError) as failed:
        enqueue(conn, "py.after-failure")
    assert failed.value.sqlstate == "25P02"  # in_failed_sql_transaction


def test_schema_is_checked_and_quoted(conn):
    for bad in ["", "x" * 64, "a\x00b"]:
        with pytest.raises(ValidationError) as caught:
            skiplock.enqueue(conn, "py.x", {}, schema=bad)
        assert caught.value.field == "schema"
    # a name that needs quoting reaches its own schema, not another one's
    with pytest.raises(SkiplockError) as caught:
        skiplock.enqueue(conn, "py.x", {}, schema='we"ird; DROP TABLE x; --')
    assert caught.value.sqlstate == "3F000"


def test_autocommit_connection_commits_each_call(url, other):
    with psycopg.connect(url, autocommit=True) as conn:
        job = enqueue(conn, "py.autocommit")
    assert row(other, job.id)["task"] == "py.autocommit"


def test_client_side_binding_cursor(url, other):
    """Django's psycopg backend binds on the client (ClientCursor): the client works there too."""
    with psycopg.connect(url, cursor_factory=psycopg.ClientCursor) as conn:
        key = f"py-client'cursor-{uuid.uuid4()}"  # committed: a key of this run only
        job = enqueue(conn, "py.client-cursor", {"quote": "it's \\ fine"}, dedupe_key=key)
        many = skiplock.enqueue_many(conn, [("py.client-cursor", [1])], schema=SCHEMA)
        conn.commit()
    assert row(other, job.id)["payload"] == {"quote": "it's \\ fine"}
    assert row(other, many[0].id)["payload"] == [1]


def test_the_wake_up_hint_arrives_at_the_commit(url, conn):
    channel = f"skiplock:{SCHEMA}"
    if len(channel.encode()) > 63:
        channel = "skiplock:" + hashlib.sha256(SCHEMA.encode()).hexdigest()[:40]
    with psycopg.connect(url, autocommit=True) as listener:
        listener.execute(f'LISTEN "{channel.replace(chr(34), chr(34) * 2)}"')
        enqueue(conn, "py.hint")
        assert list(listener.notifies(timeout=0.2, stop_after=1)) == []  # not before the commit
        conn.commit()
        received = list(listener.notifies(timeout=10, stop_after=1))
        assert [(n.channel, n.payload) for n in received] == [(channel, "jobs")]


def test_sqlalchemy_session():
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy.orm import Session

    from conftest import URL

    if not URL:
        pytest.skip("no database")
    engine = sqlalchemy.create_engine(URL.replace("postgres://", "postgresql+psycopg://", 1).replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with Session(engine) as session:
            with session.begin():  # commits at the end of the block
                session.execute(sqlalchemy.text("SELECT 1"))
                job = skiplock.enqueue(session.connection().connection, "py.sqlalchemy", {"n": 1}, schema=SCHEMA)
            rolled = skiplock.enqueue(session.connection().connection, "py.sqlalchemy", {"n": 2}, schema=SCHEMA)
            session.rollback()
        with psycopg.connect(URL, autocommit=True) as check:
            assert row(check, job.id)["payload"] == {"n": 1}
            assert row(check, rolled.id) == {}
    finally:
        engine.dispose()


def test_django_atomic():
    django = pytest.importorskip("django")
    from urllib.parse import unquote, urlparse

    from django.conf import settings

    from conftest import URL

    if not URL:
        pytest.skip("no database")
    parts = urlparse(URL)
    if not settings.configured:
        settings.configure(
            DATABASES={
                "default": {
                    "ENGINE": "django.db.backends.postgresql",
                    "NAME": unquote(parts.path.lstrip("/")),
                    "USER": unquote(parts.username or ""),
                    "PASSWORD": unquote(parts.password or ""),
                    "HOST": parts.hostname or "",
                    "PORT": str(parts.port or ""),
                }
            }
        )
        django.setup()
    from django.db import connection, transaction

    try:
        with transaction.atomic():
            job = skiplock.enqueue(connection, "py.django", {"n": 1}, schema=SCHEMA)
        with pytest.raises(RuntimeError):
            with transaction.atomic():
                rolled = skiplock.enqueue(connection, "py.django", {"n": 2}, schema=SCHEMA)
                raise RuntimeError("the view failed")
        with pytest.raises(ValidationError) as caught:  # Django wraps the driver's error: still mapped
            with transaction.atomic():
                skiplock.enqueue(connection, "py.django", {}, priority=1.5, schema=SCHEMA)
        assert (caught.value.field, caught.value.sqlstate) == ("priority", "22023")
        with psycopg.connect(URL, autocommit=True) as check:
            assert row(check, job.id)["payload"] == {"n": 1}
            assert row(check, rolled.id) == {}
    finally:
        connection.close()
