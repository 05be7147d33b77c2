"""``enqueue`` and ``enqueue_many``: calls of the schema's SQL functions (SPEC §13) on your connection."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import (
    Any,
    Dict,
    Iterable,
    List,
    Literal,
    Mapping,
    NamedTuple,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    TypedDict,
    Union,
)

import psycopg

from ._encode import check_text, describe, to_json
from .errors import SkiplockError, ValidationError

__all__ = ["Connection", "Dedupe", "Enqueued", "JobDict", "enqueue", "enqueue_many"]


class Connection(Protocol):
    """What the client needs of a connection: ``cursor()`` on psycopg 3 — a ``psycopg.Connection``,
    Django's ``django.db.connection``, SQLAlchemy's ``session.connection().connection``."""

    def cursor(self) -> Any: ...


class Enqueued(NamedTuple):
    """What an enqueue did. ``created`` false is a dedupe hit: ``id`` is then the job holding the key."""

    id: str
    created: bool


class Dedupe(TypedDict, total=False):
    """How ``dedupe_key`` dedupes (SPEC §8); needs ``dedupe_key``.

    - ``scope``: ``"active"`` (default: one pending or running job per key) or ``"pending"``
      (one queued and one running).
    - ``window_ms``: throttle: the key stays taken this long after its holder was created,
      finished or not.
    - ``replace``: debounce: a hit on a *pending* holder replaces its payload, priority and run
      time (never a running one).
    - ``max_wait_ms``: with ``replace`` and a delay: a holder is never pushed past its creation
      plus this.
    """

    scope: Literal["active", "pending"]
    window_ms: float
    replace: bool
    max_wait_ms: float


class JobDict(TypedDict, total=False):
    """One job of :func:`enqueue_many` as a dict: ``task`` and ``payload`` and the keyword
    options of :func:`enqueue` (``queue``, ``priority``, ``dedupe_key``…)."""

    task: str
    payload: Any
    queue: str
    priority: int
    dedupe_key: str
    max_attempts: int
    run_at: datetime
    delay_ms: float
    timeout_ms: int
    depends_on: Sequence[Union[str, int]]
    sequence: str
    dedupe: Dedupe
    group: str
    on_dependency_failure: Literal["cancel", "run"]


# Python keyword → the option's name in the database function (the library's camelCase names).
_OPTION_NAMES: Dict[str, str] = {
    "queue": "queue",
    "priority": "priority",
    "dedupe_key": "dedupeKey",
    "max_attempts": "maxAttempts",
    "run_at": "runAt",
    "delay_ms": "delayMs",
    "timeout_ms": "timeoutMs",
    "depends_on": "dependsOn",
    "sequence": "sequence",
    "dedupe": "dedupe",
    "group": "group",
    "on_dependency_failure": "onDependencyFailure",
}
_DEDUPE_NAMES = {"scope": "scope", "window_ms": "windowMs", "replace": "replace", "max_wait_ms": "maxWaitMs"}
_JOB_KEYS = ("task", "payload", *_OPTION_NAMES)

# One job of enqueue_many: a (task, payload) pair or a dict.
Job = Union[Tuple[str, Any], JobDict, Mapping[str, Any]]


def enqueue(
    conn: Connection,
    task: str,
    payload: Any,
    *,
    queue: Optional[str] = None,
    priority: Optional[int] = None,
    dedupe_key: Optional[str] = None,
    max_attempts: Optional[int] = None,
    run_at: Optional[datetime] = None,
    delay_ms: Optional[float] = None,
    timeout_ms: Optional[int] = None,
    depends_on: Optional[Sequence[Union[str, int]]] = None,
    sequence: Optional[str] = None,
    dedupe: Optional[Dedupe] = None,
    group: Optional[str] = None,
    on_dependency_failure: Optional[Literal["cancel", "run"]] = None,
    schema: str = "skiplock",
) -> Enqueued:
    """Enqueue one job in ``conn``'s current transaction: it exists if and only if that commits.

    One statement (``SELECT … FROM <schema>.enqueue(task, payload, options)``), the same job,
    answer and wake-up hint as the Node.js library's ``queue.enqueue``; nothing is committed for
    you (in autocommit mode the statement commits itself). ``None`` leaves an option at its
    default: queue ``"default"``, priority 100 (lower runs first), max_attempts 3, now.

    :param conn: a psycopg 3 connection — or any DB-API connection whose ``cursor()`` talks to
        PostgreSQL through psycopg (Django's ``django.db.connection``, SQLAlchemy's
        ``session.connection().connection``).
    :param task: the task name a worker handles.
    :param payload: any JSON value (dict, list, str, int, float, bool, None).
    :param dedupe_key: at most one active job holds a key; a hit returns the holder with
        ``created=False``. ``dedupe`` says how it dedupes (:class:`Dedupe`).
    :param run_at: earliest start, a timezone-aware ``datetime`` (exclusive with ``delay_ms``).
    :param delay_ms: earliest start, in milliseconds after the database's ``now()``.
    :param timeout_ms: deadline of one attempt.
    :param depends_on: job ids this job waits for (SPEC §10); not with a dedupe key.
    :param sequence: a sequence key (SPEC §11): jobs sharing it run one at a time, in id order;
        not with a dedupe key or ``depends_on``.
    :param group: a group key (a tenant): round-robin between groups, per-group limits.
    :param on_dependency_failure: ``"cancel"`` (default) or ``"run"``.
    :param schema: the schema Skiplock was migrated into.
    :raises ValidationError: bad input, with ``field``; nothing enqueued.
    :raises SkiplockError: the database refused or failed (``sqlstate`` kept).

    >>> with conn.transaction():
    ...     conn.execute("INSERT INTO users (email) VALUES (%s)", ["ada@example.com"])
    ...     skiplock.enqueue(conn, "email.send", {"to": "ada@example.com"}, dedupe_key="welcome:ada")
    Enqueued(id='42', created=True)
    """
    if task is not None and not isinstance(task, str):
        raise ValidationError("task", f"must be a non-empty string, got {describe(task)}")
    if task is not None:
        check_text(task, "task")
    options = _options(
        {
            "queue": queue,
            "priority": priority,
            "dedupe_key": dedupe_key,
            "max_attempts": max_attempts,
            "run_at": run_at,
            "delay_ms": delay_ms,
            "timeout_ms": timeout_ms,
            "depends_on": depends_on,
            "sequence": sequence,
            "dedupe": dedupe,
            "group": group,
            "on_dependency_failure": on_dependency_failure,
        },
        "",
    )
    query = f"SELECT id, created FROM {_quote(schema)}.enqueue(%s::text, %s::jsonb, %s::jsonb)"
    rows = _run(conn, query, (task, to_json(payload, "payload"), to_json(options, "options")))
    row = rows[0]
    return Enqueued(str(row[0]), bool(row[1]))


def enqueue_many(conn: Connection, jobs: Iterable[Job], *, schema: str = "skiplock") -> List[Enqueued]:
    """Enqueue many jobs in one statement, in ``conn``'s current transaction; answers in input order.

    Each job is a ``(task, payload)`` pair or a dict ``{"task": …, "payload": …, **options}``
    with the keyword options of :func:`enqueue` (``{"task": "email.send", "payload": {…},
    "dedupe_key": "k"}``). All are checked before any is written: one bad job raises a
    :class:`ValidationError` naming it (``jobs[3].priority``) and nothing is enqueued. A dedupe
    key repeated in the call gives the first job's id with ``created=False``. One wake-up hint
    for the call. One round trip (``<schema>.enqueue_many(jsonb)``).

    >>> skiplock.enqueue_many(conn, [("email.send", {"to": "a@x.org"}), {"task": "sms.send", "payload": {}, "priority": 1}])
    [Enqueued(id='43', created=True), Enqueued(id='44', created=True)]
    """
    specs = [_spec(job, i) for i, job in enumerate(jobs)]
    if not specs:
        return []
    query = (
        f"SELECT r.id, r.created FROM {_quote(schema)}.enqueue_many(%s::jsonb) "
        "WITH ORDINALITY AS r(id, created, n) ORDER BY r.n"
    )
    rows = _run(conn, query, ("[" + ",".join(specs) + "]",))
    return [Enqueued(str(row[0]), bool(row[1])) for row in rows]


def _spec(job: Any, i: int) -> str:
    """One job of enqueue_many as the JSON object the database function takes."""
    at = f"jobs[{i}]"
    if isinstance(job, tuple):
        if len(job) != 2:
            raise ValidationError(at, f"must be a (task, payload) pair or a dict, got a tuple of {len(job)}")
        task, payload = job
        spec: Dict[str, Any] = {"task": task, "payload": payload}
    elif isinstance(job, Mapping):
        # several unknown keys: the smallest by code point (Python compares str so), as every producer
        unknown = [key for key in job if key not in _JOB_KEYS]
        if unknown:
            key = min(unknown, key=str)
            raise ValidationError(f"{at}.{key}", f"is not a known option (known: {', '.join(_JOB_KEYS)})")
        options = {key: value for key, value in job.items() if key not in ("task", "payload")}
        spec = {"task": job.get("task"), "payload": job.get("payload"), **_options(options, f"{at}.")}
    else:
        raise ValidationError(at, f'must be a (task, payload) pair or a dict {{"task", "payload", **options}}, got {describe(job)}')
    return _spec_json(spec, at)


def _spec_json(spec: Dict[str, Any], at: str) -> str:
    """JSON of a spec, each value checked on its own so that an error names its field."""
    parts = []
    for key, value in spec.items():
        parts.append(to_json(key, at) + ":" + to_json(value, f"{at}.{key}"))
    return "{" + ",".join(parts) + "}"


def _options(given: Mapping[str, Any], at: str) -> Dict[str, Any]:
    """The options that were given (not None), under the database function's names."""
    options: Dict[str, Any] = {}
    for key, value in given.items():
        if value is None:
            continue
        name = _OPTION_NAMES[key]
        if key == "run_at":
            value = _run_at(value, f"{at}{name}")
        elif key == "depends_on" and not isinstance(value, (str, bytes)):
            value = list(value)
        elif key == "dedupe" and isinstance(value, Mapping):
            value = {_DEDUPE_NAMES.get(k, k): v for k, v in value.items()}
        to_json(value, f"{at}{name}")  # a value JSON cannot carry is named by its option
        options[name] = value
    return options


def _run_at(value: Any, field: str) -> Any:
    """A datetime as ISO 8601 in UTC; a naive one is refused (its zone is unknown).

    Converted to UTC first: an aware datetime's own offset may be one the ISO form the function
    takes cannot write — seconds (``+00:19:32``, Amsterdam before 1937 in ``zoneinfo``), or more
    than 15 hours — and the instant is all that is stored."""
    if not isinstance(value, datetime):
        return value  # the database function says what is wrong with it
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(
            field,
            "must be a timezone-aware datetime (a naive one could mean any time zone): "
            "e.g. datetime.now(timezone.utc) + timedelta(minutes=5)",
        )
    try:
        return value.astimezone(timezone.utc).isoformat()
    except OverflowError as error:  # the instant is in the year 0 or 10000 in UTC
        raise ValidationError(field, f"must be between the years 1 and 9999, got {describe(value.isoformat())}") from error


def _quote(schema: str) -> str:
    """The schema as a quoted identifier (checked: a name PostgreSQL can hold untruncated)."""
    if not isinstance(schema, str) or schema == "":
        raise ValidationError("schema", f"must be a non-empty string, got {describe(schema)}")
    check_text(schema, "schema")
    if len(schema.encode("utf-8")) > 63:
        raise ValidationError("schema", "must be at most 63 bytes long")
    return '"' + schema.replace('"', '""') + '"'


def _run(conn: Connection, query: str, params: Tuple[Any, ...]) -> List[Tuple[Any, ...]]:
    """Runs the call on a cursor of ``conn``; maps the driver's errors to Skiplock's."""
    cursor = conn.cursor()
    try:
        cursor.execute(query, params)
        return list(cursor.fetchall())
    except Exception as error:
        mapped = _mapped(error)
        if mapped is None:
            raise
        raise mapped from error
    finally:
        cursor.close()


def _mapped(error: BaseException) -> Optional[SkiplockError]:
    """SQLSTATE 22023 naming a field: ValidationError; any other database error: SkiplockError;
    None for anything else (raised as it is)."""
    # Django and SQLAlchemy wrap the driver's error: it is then the cause.
    db_error = error if isinstance(error, psycopg.Error) else error.__cause__
    if not isinstance(db_error, psycopg.Error):
        return None
    sqlstate = db_error.sqlstate
    diag = db_error.diag
    message = diag.message_primary or str(db_error)
    field = diag.column_name
    if sqlstate == "22023" and field:
        prefix = f"{field}: "
        return ValidationError(field, message[len(prefix) :] if message.startswith(prefix) else message, sqlstate=sqlstate)
    return SkiplockError(message, sqlstate=sqlstate)
