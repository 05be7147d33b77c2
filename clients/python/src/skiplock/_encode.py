"""Python values as the JSON the database function takes, checked the way the Node.js library
checks its own (SPEC §1.11): what JSON cannot carry faithfully is a ValidationError naming the
field, before anything is sent."""

from __future__ import annotations

import json
import math
import re
from typing import Any, List, Optional, Set, Tuple, Union

from .errors import ValidationError

# An escaped NUL: "\u0000" preceded by an even number of backslashes (odd ones escape it).
_ESCAPED_NUL = re.compile(r"(?:^|[^\\])(?:\\\\)*\\u0000")
_IDENTIFIER = re.compile(r"^[A-Za-z_$][\w$]*$")

Step = Union[str, int]


def describe(value: Any) -> str:
    """A short description of a value for error messages, as the library's ``describe``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value if len(value) <= 60 else value[:60] + "…", ensure_ascii=False)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "an array"
    return f"a {type(value).__name__}"


def to_json(value: Any, field: str) -> str:
    """JSON text of ``value``, or a ValidationError naming ``field`` (or the path inside it)."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as error:
        found = _non_finite(value, [], set())
        if found is not None:
            number, trail = found
            raise ValidationError(
                field + "".join(_step(key) for key in trail),
                f"must be a finite number, got {number!r}: JSON has no NaN or Infinity; "
                "send None or a string instead",
            ) from error
        raise ValidationError(field, f"must be JSON-serialisable ({error})") from error
    if _ESCAPED_NUL.search(text):
        raise ValidationError(field, "must not contain the NUL character (U+0000) in any string")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValidationError(field, "must be well-formed Unicode (a string holds a lone surrogate)") from error
    return text


def check_text(value: str, field: str) -> str:
    """A string sent as a SQL text parameter: no NUL, well-formed Unicode."""
    if "\x00" in value:
        raise ValidationError(field, "must not contain the NUL character (U+0000)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValidationError(field, "must be well-formed Unicode (it holds a lone surrogate)") from error
    return value


def _non_finite(value: Any, trail: List[Step], seen: Set[int]) -> Optional[Tuple[float, List[Step]]]:
    """The first NaN or ±Infinity under ``value`` (in the order json visits it), and its path."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (value, trail)
    if isinstance(value, (list, tuple, dict)):
        if id(value) in seen:
            return None  # a cycle: reported as not serialisable
        seen.add(id(value))
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            found = _non_finite(item, [*trail, key], seen)
            if found is not None:
                return found
    return None


def _step(key: Step) -> str:
    if isinstance(key, int):
        return f"[{key}]"
    text = str(key)
    return f".{text}" if _IDENTIFIER.match(text) else f"[{json.dumps(text, ensure_ascii=False)}]"
