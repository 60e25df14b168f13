"""Settings and the building blocks every other module stands on.

Owns: the version; defaults and limits (PMS_* variables, ``env_number``); the data
folder and the private environment of ``pms setup``; the errors a user can act on
(``PMSError`` with its ``Hint``, ``DeadlineExceeded``) and a call's deadline;
``Record`` and ``named_tuple`` (dataclasses and NamedTuple written by hand: importing
those modules slows every start); ``LazyPattern`` and ``LazyModule``; finding optional
packages without importing them; where this code runs from; starting worker processes.

May import: the standard library only.
"""

from __future__ import annotations

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
