"""Sync: folders -> index. What changed, read and parsed (on every core when big), written.

Owns: ``Syncer`` (plan, read, parse, write in batches, embed), ``SyncPlan`` / ``SyncReport``
/ ``SyncProgress``, the index's ``FileLock`` and the parse workers.

May import: config, frontmatter, markdown, notes, pdf, paths, schema, store, embedding.
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from .config import (
    EMBED_WINDOW, VECTOR_FORMAT, Factory, Hint, Record, _typing, display_path, hex_digest, is_valid_utf8, now_iso,
    pms_command, reason_text, spawning_workers, watch_parent,
)
from .frontmatter import FrontmatterError
from .markdown import DEFAULT_PASSAGE_CHARS, BinaryFileError, FileTooLargeError, decode_text, passage_embed_text
from .notes import ParsedNote, parse_note
from .pdf import (
    INSTALL_PDF, PDF_NO_TEXT, PDF_PACKAGE, PdfError, PdfReader, is_pdf, limit_raised, max_pdf_bytes, parse_pdf,
    pdf_available,
)
from .paths import (
    BAD_NAME, NOT_REGULAR, OUTSIDE, Exclusions, NotRegularFileError, compile_glob, file_state, inside, open_regular_file,
    pdf_glob, read_note_file, walk_markdown,
)
from .schema import NOTE_PARSER_VERSION
from .store import CollectionRow, Store
from .embedding import EmbeddingProvider, EmbeddingUnavailable, model_mismatch


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
