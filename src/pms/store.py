"""``Store``: every read and write of the index (one SQLite file), and vectors in memory.

Owns: the connection and its settings, collections, notes and passages, the FTS5
keyword lists, vectors (sqlite-vec; held in memory by vector_memory.py),
links and tags as stored, and turning SQLite's errors into one-line ``PMSError``s.
Schema changes go to schema.py; what a search does with these lists, to retrieval.py.

May import: config, markdown, notes, paths, filters, schema.
"""

from __future__ import annotations

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

from .config import (
    DEADLINE_STEPS, VECTOR_FORMAT, PMSError, TupleFields, _typing, default_db_path, display_path, hex_digest,
    is_valid_utf8, module_available, named_tuple, now_iso, past_deadline, pms_command,
)
from .markdown import passage_display_text
from .notes import LABEL_FIRST_FIELDS, ParsedNote, frontmatter_fields, links_label_first, normalize_tag
from .paths import path_matches
from .filters import NoteFilter
from .schema import MIGRATIONS, NOTE_PARSER_VERSION, namesake_keys, note_docid, spaced_cjk, sqlite_module, sqlite_vec_path


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
