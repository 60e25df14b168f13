"""``NoteFilter``: tags, folders, dates and frontmatter conditions, checked once.

Owns: turning what a user typed (``--tag``, ``--path``, ``--after``, ``--where``) into one
validated filter that every mode applies inside its query.

May import: config, notes, paths.
"""

from __future__ import annotations

import re

from .config import PMSError, Record, error_excerpt
from .notes import normalize_tag, unique_ignoring_case
from .paths import path_filter


class NoteFilter(Record, frozen=True):
    """What a search is narrowed to, besides its words: every condition must hold.

    ``tags``: the note has each tag (``area`` also matches ``area/sub``);
    ``exclude_tags``: it has none of them; ``path``: a glob or folder inside the
    collection; ``after``/``before``: the note's date, inclusive, YYYY-MM-DD (as built from
    a month, a year or a time back from today: ``_filter_date``);
    ``where``: frontmatter conditions (key, '=' or '!=' or None for "exists", value).
    """

    tags: tuple[str, ...] = ()
    exclude_tags: tuple[str, ...] = ()
    path: str | None = None
    after: str | None = None
    before: str | None = None
    where: tuple[tuple[str, str | None, str | None], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.tags or self.exclude_tags or self.path or self.after or self.before or self.where)

    @classmethod
    def build(cls, tags=None, exclude_tags=None, path=None, after=None, before=None, where=None) -> NoteFilter:
        """Check and normalize what a user gave (strings or lists); bad input is a PMSError.
        A tag written ``-tag`` is excluded; ``where`` takes "key=value", "key!=value",
        "key", a list of those, or a dict (a None value means "has the key")."""
        include: list[str] = []
        exclude = [normalize_tag(t) for t in _as_items(exclude_tags)]
        for tag in _as_items(tags):
            (exclude if tag.strip().startswith("-") else include).append(normalize_tag(tag.strip().lstrip("-")))
        if any(not t for t in include + exclude):
            raise PMSError("tags cannot hold an empty tag (give its name, without '#')", argument="tags")
        conditions = []
        items = [f"{k}={v}" if v is not None else str(k) for k, v in where.items()] if isinstance(where, dict) else _as_items(where)
        if len(include) + len(exclude) + len(items) > MAX_FILTER_TERMS:
            raise PMSError(f"too many filter terms ({len(include) + len(exclude) + len(items):,} tags and conditions; "
                           f"at most {MAX_FILTER_TERMS})")
        for item in items:
            condition = _where_condition(item)
            if not condition:
                raise PMSError(f"where {error_excerpt(item)} is not KEY=VALUE, KEY!=VALUE or KEY", argument="where")
            conditions.append(condition)
        path = str(path).strip() if path not in (None, "") else None
        if path:
            path_filter(path)  # a bad pattern is an error here, not inside the SQL that uses it
        return cls(tuple(unique_ignoring_case(include)), tuple(unique_ignoring_case(exclude)), path,
                   _filter_date(after, "after"), _filter_date(before, "before"), tuple(conditions))

    # The filter language of the app's filter field (and of anyone's own front end).
    FILTER_SYNTAX = "#tag, -#tag, path:, after:, before:, key=value, key!=value, has:key"

    @classmethod
    def parse(cls, text: str) -> NoteFilter:
        """``#tag -#tag path:GLOB after:DATE before:DATE key=value key!=value has:key``
        -> a NoteFilter; quotes group a value with spaces. A PMSError names a bad piece."""
        import shlex
        try:
            pieces = shlex.split(text or "")
        except ValueError:
            raise PMSError("unbalanced quotes in the filter") from None
        tags, exclude, where, fields = [], [], [], {}
        for piece in pieces:
            key, colon, value = piece.partition(":")
            if piece.startswith("#"):
                tags.append(piece[1:])
            elif piece.startswith("-#"):
                exclude.append(piece[2:])
            elif colon and key.lower() in ("path", "after", "before"):
                fields[key.lower()] = value
            elif colon and key.lower() == "has":
                where.append(value)
            elif "=" in piece:
                where.append(piece)
            else:
                raise PMSError(f"{piece!r} is not a filter ({cls.FILTER_SYNTAX})")
        return cls.build(tags, exclude, where=where, **fields)

    def build_args(self) -> dict:
        """This filter as ``build``'s keyword arguments (only the conditions set; JSON as it is):
        ``NoteFilter.build(**f.build_args()) == f``."""
        where = [key if op is None else f"{key}{op}{value}" for key, op, value in self.where]
        args = {"tags": list(self.tags), "exclude_tags": list(self.exclude_tags), "path": self.path,
                "after": self.after, "before": self.before, "where": where}
        return {key: value for key, value in args.items() if value}


# Tags and frontmatter conditions one search may hold: each is a clause of the
# SQL, and SQLite refuses an expression tree deeper than 1,000.
MAX_FILTER_TERMS = 100


def _where_condition(item: str) -> tuple[str, str | None, str | None] | None:
    """'key=value', 'key!=value' or 'key' -> (key, op, value); None when it is none of these."""
    text = item.strip()
    at = min((i for i in (text.find("="), text.find("!")) if i >= 0), default=-1)
    if at < 0:
        return (text, None, None) if text else None
    key = text[:at].strip()
    op = "!=" if text.startswith("!=", at) else "=" if text[at] == "=" else None
    if not key or not op:
        return None
    return key, op, text[at + len(op):].strip()


def _as_items(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, bytes, int, float)) or not hasattr(value, "__iter__"):
        return [str(value)]  # tags=5 is the tag '5'
    return [str(v) for v in value]


def checked_number(value, name: str, minimum: float = 1, maximum: float | None = None, whole: bool = True):
    """A user's count or number of seconds, checked at the boundary: a PMSError
    naming ``name`` when it is not a finite number in [minimum, maximum]."""
    import math
    try:
        number = float(value) if not isinstance(value, int) or isinstance(value, bool) else value
        ok = math.isfinite(number) and number >= minimum and (maximum is None or number <= maximum)
        ok = ok and (not whole or float(number).is_integer())
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        kind = "a whole number" if whole else "a number"
        span = f"from {minimum:g} to {maximum:g}" if maximum is not None else f"of at least {minimum:g}"
        raise PMSError(f"{name} must be {kind} {span}, not {error_excerpt(value)}", argument=name)
    return int(number) if whole else float(number)


# A date as a filter takes it: a day, a month or a year ("2024-03", "2024": its first day for
# after, its last for before), or a time back from today ("7d", "2 weeks", "3m", "1y", "today").
_DATE_AGO = re.compile(r"(\d{1,4})\s*(d|days?|w|weeks?|m|months?|y|years?)(?:\s+ago)?")
_DATE_PART = re.compile(r"(\d{4})(?:-(\d{1,2}))?")
DATE_FORMS = "YYYY-MM-DD, YYYY-MM, YYYY, today, yesterday, or a time back such as 7d, 2w, 3m, 1y"


def _filter_date(value, argument: str, today=None) -> str | None:
    """The day ``value`` names, as YYYY-MM-DD (``argument``: "after" or "before", which end of a
    month or year it takes); ``today`` for tests of the relative forms."""
    import calendar
    import datetime as _dt
    if value in (None, ""):
        return None
    if isinstance(value, (_dt.date, _dt.datetime)):
        return value.strftime("%Y-%m-%d")
    text = " ".join(str(value).strip().lower().split())
    today = today or _dt.date.today()
    try:
        if text in ("today", "yesterday"):
            return (today - _dt.timedelta(days=text == "yesterday")).isoformat()
        ago = _DATE_AGO.fullmatch(text)
        if ago:
            count, unit = int(ago.group(1)), ago.group(2)[0]
            if unit in "dw":
                return (today - _dt.timedelta(days=count * (7 if unit == "w" else 1))).isoformat()
            months = today.year * 12 + today.month - 1 - count * (12 if unit == "y" else 1)
            year, month = divmod(months, 12)
            return _dt.date(year, month + 1, min(today.day, calendar.monthrange(year, month + 1)[1])).isoformat()
        part = _DATE_PART.fullmatch(text)
        if part:
            year, month = int(part.group(1)), int(part.group(2) or 0)
            if argument != "before":
                return _dt.date(year, month or 1, 1).isoformat()
            month = month or 12
            return _dt.date(year, month, calendar.monthrange(year, month)[1]).isoformat()
        return _dt.date.fromisoformat(text).isoformat()
    except (ValueError, OverflowError):
        raise PMSError(f"{argument} wants a date ({DATE_FORMS}), not {error_excerpt(str(value))}", argument=argument) from None
