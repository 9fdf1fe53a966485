"""A bad policy file, in our words: one line per problem, naming the key, the value written and
what is wanted, as the README spells it, never pydantic's jargon.

``janitor.config.policy`` validates; this module only words what it found: a file that cannot be
read (:func:`read_error`), one that is not valid (:func:`invalid`), and the pieces the models
raise their own problems with (:func:`problem`, :func:`again`, :func:`raise_all`, :data:`WANTED`).
It imports no model: the keys each table takes come in as :class:`Fields`.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from datetime import date, time
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

from janitor.errors import PolicyError
from janitor.humanize import plural

__all__ = [
    "DURATION_EXAMPLES",
    "MAX_PROBLEMS_SHOWN",
    "SIZE_EXAMPLES",
    "WANTED",
    "Fields",
    "Loc",
    "again",
    "invalid",
    "key_part",
    "problem",
    "raise_all",
    "read_error",
]

_BARE_KEY_RE = re.compile(r"^[A-Za-z0-9_-]+$")

SIZE_EXAMPLES = '"500M", "2G", "1.5GiB", "5%" or a number of bytes'
DURATION_EXAMPLES = '"90s", "5m", "2h", "7d" or a number of seconds'
#: A bad policy lists this many problems, then says how many more there are.
MAX_PROBLEMS_SHOWN = 10

#: Where a problem is: the keys from the model being validated down to the value.
Loc = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Fields:
    """The keys a [trees.NAME] table and a [volumes.NAME] table take, in the README's order
    (``[volume]`` takes the latter but ``path``)."""

    tree: tuple[str, ...]
    volume: tuple[str, ...]


# -- problems the models raise -------------------------------------------------------------------


def problem(loc: Loc, reason: str, value: Any = None) -> InitErrorDetails:
    """One problem at ``loc`` (relative to the model being validated), in our own words."""
    # The reason goes in through the context, so a literal {key} in it stays as it is.
    return InitErrorDetails(
        type=PydanticCustomError("policy", "{reason}", {"reason": reason}), loc=loc, input=value
    )


def again(err: ErrorDetails) -> InitErrorDetails:
    """An error from a nested validation, to raise again alongside others, as it was.

    pydantic-core rebuilds only its own kinds of error by name (not pydantic's ``path_type``,
    nor ours), so each comes back as a custom error with the same type, message and context.
    """
    ctx = {**err.get("ctx", {}), "reason": err["msg"]}
    return InitErrorDetails(
        type=PydanticCustomError(err["type"], "{reason}", ctx), loc=err["loc"], input=err["input"]
    )


def raise_all(title: str, problems: list[InitErrorDetails]) -> NoReturn:
    """Raise every problem at once: pydantic keeps each, prefixing the key it was found under."""
    raise ValidationError.from_exception_data(title, problems)


# -- the file's errors ---------------------------------------------------------------------------


def read_error(
    path: Path, exc: OSError | tomllib.TOMLDecodeError, origin: str | None
) -> PolicyError:
    """Why the policy file cannot be read, as one line; a missing file's says the one thing to
    change where it was named (``origin``: ``JANITOR_POLICY``, a config file; None: directly)."""
    if isinstance(exc, FileNotFoundError):
        return PolicyError(*_missing(path, origin))
    if isinstance(exc, IsADirectoryError):
        return PolicyError(f"policy file {path} is a folder; name a .toml file")
    if isinstance(exc, tomllib.TOMLDecodeError):
        return PolicyError(f"policy file {path} is not valid TOML: {_toml_reason(exc)}")
    return PolicyError(f"policy file {path} cannot be read: {exc.strerror}")


def invalid(path: Path, exc: ValidationError, data: dict[str, Any], fields: Fields) -> PolicyError:
    """Every problem validation found in the file's ``data`` (the TOML as read), in the file's
    order of tables, each as one line: the key, the value written, what is wanted."""
    errors = exc.errors(include_url=False)
    # In the file's order of tables: pydantic puts unknown keys after all the known ones.
    order = {key: i for i, key in enumerate(data)}
    errors.sort(key=lambda err: order.get(str(err["loc"][0]), -1) if err["loc"] else -1)
    problems = [_describe(err, data, fields) for err in errors]
    return PolicyError(_report(path, problems), problems)


def _report(path: Path, problems: list[str]) -> str:
    """The file and its one problem on one line; or a line naming the file, then one per problem.

    At most :data:`MAX_PROBLEMS_SHOWN` problems are listed; a last line counts the rest.
    """
    if len(problems) == 1:
        return f"policy file {path}: {problems[0]}"
    shown = problems[:MAX_PROBLEMS_SHOWN]
    lines = [f"policy file {path} has {len(problems)} problems:", *(f"  {p}" for p in shown)]
    rest = len(problems) - len(shown)
    if rest:
        lines.append(f"  ... and {plural(rest, 'more problem')}")
    return "\n".join(lines)


def _missing(path: Path, origin: str | None) -> tuple[str, tuple[str, ...], str]:
    """PolicyError's arguments for a policy file that is not there: what, and the one fix."""
    if origin is None:
        return (
            f"policy file {path} does not exist",
            (),
            "name one that does, or none for the default policy",
        )
    if origin == "JANITOR_POLICY":
        fix = "point JANITOR_POLICY at a policy file, or unset it for the default policy"
    else:
        fix = f"change `policy` in the {origin}, or remove it for the default policy"
    return f"policy file {path} does not exist ({origin} names it)", (), fix


def _toml_reason(exc: tomllib.TOMLDecodeError) -> str:
    """tomllib's reason, its "(at line L, column C)" first, where a person looks for it."""
    m = re.fullmatch(r"(.*) \(at (line \d+, column \d+|end of document)\)", str(exc))
    if not m:
        return str(exc)
    reason, where = m.groups()
    if reason == "Illegal character '\\n'":
        reason += " (is a closing quote missing?)"
    # "Cannot declare ('trees', 't') twice": a key as the file spells it, not a Python tuple.
    reason = re.sub(r"\((?:'[^'\\]*', )*'[^'\\]*',?\)", _table_header, reason)
    return f"{where}: {reason}"


def _table_header(m: re.Match[str]) -> str:
    import ast  # only for a file that is not TOML: kept off the start-up of every command

    keys = ast.literal_eval(m.group(0))
    return "[" + ".".join(key_part(k) for k in keys) + "]"


# -- problems in our words -----------------------------------------------------------------------

_SIZE = f"a size such as {SIZE_EXAMPLES}"
_DURATION = f"a duration such as {DURATION_EXAMPLES}"
_GLOBS = 'a list of globs in quotes, e.g. ["*.wav"]'
#: What each key wants, in plain words ("volumes.path", "tree.path": the same name, two meanings).
WANTED = {
    "tree.path": 'a folder path in quotes, e.g. "{user_cache_dir}/pip"',
    "volumes.path": 'any path on the volume these numbers are for, e.g. "/mnt/data"',
    "role": '"cache", "scratch" or "report"',
    "active_jobs": '"batchalign3" or "batchalign"',
    "units": '"file", "dir", "hf_revision" or "lmdb"',
    "quota": _SIZE,
    "low_watermark": _SIZE,
    "floor": _SIZE,
    "free_low": _SIZE,
    "free_target": _SIZE,
    "ballast": _SIZE,
    "horizon": _DURATION,
    "min_age": _DURATION,
    "await_ttl": _DURATION,
    "max_age": _DURATION,
    "orphan_age": _DURATION,
    "include": _GLOBS,
    "exclude": _GLOBS,
    "include[]": 'a glob in quotes, e.g. "*.wav"',
    "exclude[]": 'a glob in quotes, e.g. "*.tmp"',
    "unit_glob": 'a glob in quotes, e.g. ".tmp*"',
    "unit_requires": 'a list of file names in quotes, e.g. ["done"], or a table of them by '
    'folder glob, e.g. {"tmp*" = ["done"]}',
    "unit_requires[]": 'a file name in quotes, e.g. "done"',
    "unit_files": 'a list of file-name globs in quotes, e.g. ["tmp*.wav"]',
    "unit_files[]": 'a file-name glob in quotes, e.g. "tmp*.wav"',
    # In single quotes, as TOML wants a backslash written: '\.' in double quotes is an error.
    "group": "a regular expression with a group named key, e.g. '(?P<key>.+)\\.wav'",
    "lock": 'a lock file name in quotes, e.g. "{key}.lock"',
}


def _kind(loc: Loc) -> tuple[str, Loc]:
    """Which table a location is in ("policy", "volume", "volumes" or "tree"), and the rest."""
    if not loc or loc[0] not in ("volume", "volumes", "trees"):
        return "policy", loc
    if loc[0] == "volume":
        return "volume", loc[1:]
    return ("tree" if loc[0] == "trees" else "volumes"), loc[2:]


def _keys(kind: str, fields: Fields) -> tuple[str, ...]:
    """The keys a table of this kind takes, in the order the README lists them."""
    if kind == "policy":
        return ("volume", "volumes", "trees")
    if kind == "tree":
        return fields.tree
    # [volume] takes no path: it is the default for every volume.
    return tuple(k for k in fields.volume if kind == "volumes" or k != "path")


def key_part(part: str | int) -> str:
    """A part of a key as TOML spells it: bare when it may be, else quoted."""
    return part if isinstance(part, str) and _BARE_KEY_RE.match(part) else json.dumps(part)


def _shown(value: Any) -> str:
    """A value as TOML spells it, so the line shows what was written; a long list is cut short."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
    elif isinstance(value, list):
        text = "[" + ", ".join(_shown(v) for v in value) + "]"
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{key_part(k)} = {_shown(v)}" for k, v in value.items()) + "}"
    elif isinstance(value, date | time):
        text = value.isoformat()
    else:
        text = str(value)
    # Long enough for any real path, which must be seen whole to be found.
    return text if len(text) <= 160 else text[:157] + "..."


_MISSING = object()


def _written(data: Any, loc: Loc) -> Any:
    """The value the file holds at ``loc``, or _MISSING."""
    for part in loc:
        if not isinstance(data, dict | list):
            return _MISSING
        try:
            data = data[part]  # type: ignore[index]  # a str for a table, an int for a list
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return data


def _describe(err: ErrorDetails, data: dict[str, Any], fields: Fields) -> str:
    """One pydantic error as a line: the key, the value written and what is wanted, plainly.

    ``data`` is the TOML as read, so the value shown is the one in the file.
    """
    loc = tuple(p for p in err["loc"] if not str(p).startswith("function-"))
    item = loc[-1] + 1 if loc and isinstance(loc[-1], int) else None
    key_loc = loc[:-1] if item is not None else loc
    key = ".".join(key_part(p) for p in key_loc)
    if item is not None:
        key += f" (item {item})"
    kind, rest = _kind(key_loc)
    field = str(rest[0]) if len(rest) == 1 else None
    value = _written(data, loc)
    reason = _reason(err, kind, field, item is not None, key_loc, value, fields)
    if isinstance(value, dict) or (not key_loc and value is _MISSING):
        return f"[{key}]: {reason}" if key else reason
    if value is _MISSING:
        return f"{key}: {reason}"
    return f"{key} = {_shown(value)}: {reason}"


def _reason(
    err: ErrorDetails,
    kind: str,
    field: str | None,
    item: bool,
    loc: Loc,
    value: Any,
    fields: Fields,
) -> str:
    """Why, and what is wanted, in the words of the README rather than pydantic's."""
    kind_of_error = err["type"]
    wanted = None
    if field is not None:
        wanted = WANTED.get(f"{field}[]" if item else field) or WANTED.get(f"{kind}.{field}")
    if kind_of_error == "policy":
        return err["msg"]
    if kind_of_error in ("value_error", "assertion_error"):
        return str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if kind_of_error == "extra_forbidden":
        return _unknown_key(kind, str(loc[-1]), isinstance(value, dict), fields)
    if kind_of_error == "missing":
        return f"missing; wanted {wanted}" if wanted else "missing"
    if kind_of_error in ("model_type", "model_attributes_type", "dict_type"):
        return f"wanted {_table_wanted(loc)}"
    if wanted:
        return f"wanted {wanted}"
    # Not expected (every key above has words); pydantic's, without its jargon.
    msg = re.sub(r"<class '([^']*)'>", r"\1", str(err["msg"]))
    return msg.replace("Input should be", "wanted").replace("Input is", "it is")


def _table_wanted(loc: Loc) -> str:
    if loc == ("trees",) or loc == ("volumes",):
        return f"tables such as [{loc[0]}.NAME]"
    if len(loc) == 2 and loc[0] == "trees":
        return f"a table [trees.{key_part(loc[1])}] with a role and a path"
    return f"a table [{'.'.join(key_part(p) for p in loc)}]"


def _unknown_key(kind: str, key: str, is_table: bool, fields: Fields) -> str:
    """Unknown key: the nearest match, else where it belongs, else the keys this table takes."""
    import difflib

    allowed = _keys(kind, fields)
    what = "table" if kind == "policy" and is_table else "key"
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    if close:
        near = f"[{close[0]}]" if kind == "policy" and is_table else close[0]
        return f"unknown {what}; did you mean {near}?"
    if kind == "policy":
        if key in _keys("volume", fields):
            return f"unknown key here; {key} belongs in [volume] (or a [volumes.NAME] table)"
        if key in _keys("tree", fields):
            return f"unknown key here; {key} belongs in a [trees.NAME] table"
        return f"unknown {what}; a policy holds the tables [volume], [volumes.NAME], [trees.NAME]"
    if kind != "tree" and key in _keys("tree", fields):
        return f"unknown key here; {key} belongs in a [trees.NAME] table"
    table = {"tree": "[trees.NAME]", "volume": "[volume]", "volumes": "[volumes.NAME]"}[kind]
    return f"unknown key; {table} takes {', '.join(allowed)}"
