"""Work that must not freeze the window: searching, loading the model, syncing,
clipping, and watching folders. Plain Python threads report back through Qt
signals (queued into the UI thread); the KnowledgeBase gives every thread its
own SQLite connection, so a sync never blocks a search.
"""

from __future__ import annotations

import collections
import threading
import time
from pathlib import Path

from PySide6.QtCore import QObject, QProcess, Signal

import pms

PROGRESS_INTERVAL = 0.05   # seconds between progress signals: enough for a smooth bar


class RateMeter:
    """Work per second over the last ``window`` seconds, so the ETA follows the
    current pace (a rate since the start keeps the early, faster part and the
    ETA rises while work progresses)."""

    def __init__(self, window: float = 10.0, clock=time.monotonic):
        self.window, self.clock = window, clock
        self.samples: collections.deque = collections.deque()
        self.last: dict[str, float] = {}

    def restart(self) -> None:
        self.samples.clear()

    def add(self, done: int) -> None:
        now = self.clock()
        self.samples.append((now, done))
        while len(self.samples) > 2 and now - self.samples[1][0] >= self.window:
            self.samples.popleft()

    def eta(self, total: int) -> float | None:
        """Seconds left at the recent pace; None until there is a second of history."""
        if len(self.samples) < 2:
            return None
        (t0, d0), (t1, d1) = self.samples[0], self.samples[-1]
        if t1 - t0 < 1.0 or d1 <= d0:
            return None
        return (total - d1) * (t1 - t0) / (d1 - d0)

    def due(self, what: str, every: float) -> bool:
        """True at most once per ``every`` seconds for ``what`` (to throttle UI refreshes)."""
        now = self.clock()
        if now - self.last.get(what, -every) >= every:
            self.last[what] = now
            return True
        return False


class Bridge(QObject):
    """Signals the worker threads emit. Parentless and held by the threads, so a
    late emit after the window closed goes nowhere instead of crashing."""

    results = Signal(int, str, object, float)     # seq, query as typed, pms.SearchResult, seconds
    search_failed = Signal(int, str)
    model_loaded = Signal(bool)
    embedding_chosen = Signal(str)                # "" once the chosen model or server is loaded, else why not
    sync_progress = Signal(object)                # pms.SyncProgress
    sync_finished = Signal(object, str)           # SyncReport or None, error message
    clip_finished = Signal(object, str, str)      # the clipped note or None, source, error message
    notice = Signal(str)                          # one-line news from the engine (KnowledgeBase.notice)


def emit(signal, *args) -> None:
    try:
        signal.emit(*args)
    except RuntimeError:  # the receiver is gone: the window closed meanwhile
        pass


def start_thread(target, name: str) -> threading.Thread:
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


class NewestOnlyThread(threading.Thread):
    """A worker thread (so one SQLite connection) for requests where only the
    newest matters: one that arrives while another runs replaces any still
    waiting, so typing or clicking never queues up stale work."""

    def __init__(self, name: str):
        super().__init__(name=name, daemon=True)
        self._wanted = None
        self._stopping = False
        self._cond = threading.Condition()

    def _submit(self, request) -> None:
        with self._cond:
            self._wanted = request
            self._cond.notify()

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread (after the request it is running) before the index
        closes: closing a connection under a running lookup crashed the process."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)

    def run(self) -> None:
        while True:
            with self._cond:
                while self._wanted is None and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                request, self._wanted = self._wanted, None
            if self.handle(request) is False:
                return

    def handle(self, request) -> bool | None:
        """Do one request; False ends the thread."""
        raise NotImplementedError


class _AnswerBridge(QObject):
    done = Signal(int)


class AnswerThread(NewestOnlyThread):
    """Runs ``work(*args)`` for the newest request only. The answer waits in the
    thread and only the request's number crosses into the window (``done``),
    which collects it with ``answer``: Python objects sent through a queued
    signal stayed alive in the window (about 8 Hits per related-notes lookup)."""

    def __init__(self, name: str, work):
        super().__init__(name)
        self.work = work
        self.bridge = _AnswerBridge()  # made in the window's thread: ``done`` is queued into it
        self.done = self.bridge.done
        self._answer: tuple = (0, None)

    def submit(self, number: int, *args) -> None:
        self._submit((number, args))

    def answer(self, number: int):
        """The answer to request ``number``, or None when a newer one replaced it."""
        with self._cond:
            got, result = self._answer
        return result if got == number else None

    def handle(self, request) -> bool | None:
        number, args = request
        result = self.work(*args)
        with self._cond:
            self._answer = (number, result)
        try:
            self.done.emit(number)
        except RuntimeError:  # the window closed meanwhile
            return False
        return None


class SearchThread(NewestOnlyThread):
    """Runs the newest query only."""

    def __init__(self, kb, bridge: Bridge):
        super().__init__("pms-search")
        self.kb, self.bridge = kb, bridge

    def submit(self, seq: int, query: str, mode: str, collections, k: int = 30, prefix_last: bool = True,
               note_filter: pms.NoteFilter | None = None) -> None:
        self._submit((seq, query, mode, collections, k, prefix_last, note_filter))

    def handle(self, request) -> None:
        seq, query, mode, collections, k, prefix_last, note_filter = request
        started = time.perf_counter()
        try:
            result = self.kb.search(query, k=k, mode=mode, collections=collections, prefix_last=prefix_last,
                                    note_filter=note_filter)
        except pms.PMSError as exc:
            emit(self.bridge.search_failed, seq, str(exc))
            return
        except Exception as exc:  # a bug must show up as a message, not kill searching
            emit(self.bridge.search_failed, seq, f"search failed: {exc!r}")
            return
        emit(self.bridge.results, seq, query, result, time.perf_counter() - started)


def load_model_in_background(kb, bridge: Bridge, retry: bool = False) -> threading.Thread:
    return start_thread(lambda: emit(bridge.model_loaded, kb.load_embedder(retry=retry)), "pms-load-model")


def choose_embedding_in_background(kb, bridge: Bridge, **choice) -> threading.Thread:
    """``kb.use_embedding(**choice)`` (a model folder or a server, loaded: seconds) in a thread."""
    def run() -> None:
        try:
            kb.use_embedding(**choice)
        except pms.PMSError as exc:
            emit(bridge.embedding_chosen, str(exc))
            return
        emit(bridge.embedding_chosen, "")
    return start_thread(run, "pms-choose-model")


class SyncJob:
    """One ``kb.sync`` in a thread, with progress throttled and a cancel flag."""

    def __init__(self, kb, bridge: Bridge, collections=None, reembed: bool = False):
        self.kb, self.bridge, self.collections, self.reembed = kb, bridge, collections, reembed
        self.cancel = threading.Event()
        self._last_progress = 0.0
        self.thread = start_thread(self._run, "pms-sync")

    def running(self) -> bool:
        return self.thread.is_alive()

    def _progress(self, p) -> None:
        now = time.monotonic()
        if now - self._last_progress >= PROGRESS_INTERVAL or p.done >= p.total:
            self._last_progress = now
            emit(self.bridge.sync_progress, p)

    def _run(self) -> None:
        try:
            report = self.kb.sync(collections=self.collections, progress=self._progress, cancel=self.cancel,
                                  **({"reembed": True} if self.reembed else {}))
        except pms.PMSError as exc:
            emit(self.bridge.sync_finished, None, str(exc))
            return
        except Exception as exc:
            emit(self.bridge.sync_finished, None, f"sync failed: {exc!r}")
            return
        emit(self.bridge.sync_finished, report, "")


def clip_in_background(kb, bridge: Bridge, collection_name: str, source: str,
                       keep_original: bool = False) -> threading.Thread:
    """Fetch a URL (or read a saved .html file or a PDF) into a collection as a new note;
    ``keep_original``: a PDF is saved beside its note too."""

    def run():
        try:
            collection = kb.collections.get(collection_name)
            if Path(source).is_file():
                data = Path(source).read_bytes()
                if data.startswith(b"%PDF-"):  # a PDF file: its path is its source
                    note = collection.clip(str(Path(source).resolve()), pdf=data, keep_original=keep_original)
                else:  # a saved page: its own canonical URL, if it names one, is the source
                    note = collection.clip(None, html=data)
            else:
                note = collection.clip(source, keep_original=keep_original)
        except pms.PMSError as exc:
            # Already clipped: nothing new was written, but the user wants to see that note.
            emit(bridge.clip_finished, getattr(exc, "path", None), source, str(exc))
            return
        except OSError as exc:
            emit(bridge.clip_finished, None, source, f"cannot read {source}: {exc.strerror or exc}")
            return
        except Exception as exc:
            emit(bridge.clip_finished, None, source, f"clipping failed: {exc!r}")
            return
        emit(bridge.clip_finished, note, source, "")

    return start_thread(run, "pms-clip")


class SetupJob(QObject):
    """``pms.py setup`` (the optional extras, pip into PMS's private folder) in a
    child process: its output lines as progress, cancellable."""

    output = Signal(str)
    finished = Signal(bool, str)     # succeeded, last line of output

    def __init__(self, command: list[str], parent=None):
        super().__init__(parent)
        self.last_line = ""
        self.cancelled = False
        self.process = QProcess(self)
        self.process.setProcessChannelMode(QProcess.MergedChannels)
        self.process.readyReadStandardOutput.connect(self._read)
        self.process.finished.connect(self._finished)
        self.process.errorOccurred.connect(self._failed_to_start)
        self.process.start(command[0], command[1:])

    def running(self) -> bool:
        return self.process.state() != QProcess.NotRunning

    def cancel(self) -> None:
        self.cancelled = True
        self.process.kill()

    def _read(self) -> None:
        lines = [ln.strip() for ln in bytes(self.process.readAllStandardOutput()).decode(errors="replace").splitlines()]
        lines = [ln for ln in lines if ln]
        if lines:
            self.last_line = lines[-1]
            self.output.emit(self.last_line)

    def _finished(self, code: int, _status) -> None:
        self._read()
        self.finished.emit(code == 0 and not self.cancelled, "cancelled" if self.cancelled else self.last_line)

    def _failed_to_start(self, error) -> None:
        if error == QProcess.FailedToStart:
            self.finished.emit(False, f"could not start {self.process.program()}")


class FolderWatcher(QObject):
    """The engine's watcher (pms.FolderWatcher: the collections' folders, recursively,
    and their notes) in a background thread; after a quiet second, says which
    collections changed, in the UI thread."""

    collections_changed = Signal(list)
    told = Signal(str)  # how long a change may take to be seen, once, when the vault is past the watcher's budget

    def __init__(self, parent=None):
        super().__init__(parent)
        self.collections: list = []
        self.engine = pms.FolderWatcher(self._changed, lambda: self.collections, notice=self.told.emit)
        self.started = False

    def watch(self, collections) -> None:
        """(Re)watch every folder of ``collections`` and the notes already indexed."""
        self.collections = list(collections)
        self.engine.watch(self.collections)
        if not self.started:
            self.started = True
            self.engine.start()

    def stop(self) -> None:
        self.engine.stop()

    def _changed(self, names: list[str]) -> None:
        self.collections_changed.emit(names)  # from the watcher's thread: queued into the UI thread
