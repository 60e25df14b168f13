"""``FolderWatcher``: notices changes in collections' folders and says which.

Owns: polling folders by their stat (no extra package) with a quiet period, so a burst of
saves is one sync.

May import: paths.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable

from .paths import is_skipped_folder


# Watching folders: how often they are looked at, and how long they must stay quiet
# before a sync (an editor saving, a git checkout: many changes become one sync).
WATCH_INTERVAL = 1.0
WATCH_QUIET = 1.0
WATCH_MAX_PATHS = 20_000


class FolderWatcher:
    """Watches collections' folders (recursively) and indexed notes; after ``quiet`` seconds
    without a further change calls ``on_change(names)`` with the collections that changed.
    By polling modification times (stdlib only, alike on every OS): a note added, removed or
    renamed changes its folder's time, an edit the note's own. ``source`` returns the
    collections to watch; they are read again after each change."""

    def __init__(self, on_change: Callable[[list[str]], None], source: Callable[[], list],
                 interval: float = WATCH_INTERVAL, quiet: float = WATCH_QUIET):
        self.on_change, self.source = on_change, source
        self.interval, self.quiet = interval, quiet
        self._lock = threading.Lock()
        self._snapshot: dict[str, dict[str, tuple[int, int] | None]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def _stat(path: str) -> tuple[int, int] | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def _paths(self, collection) -> list[str]:
        root = str(collection.path)
        found = []
        for folder, subdirs, _files in os.walk(root):
            subdirs[:] = [d for d in subdirs if not is_skipped_folder(d)]
            found.append(folder)
            if len(found) >= WATCH_MAX_PATHS:
                break
        found += [os.path.join(root, rel) for rel in collection.files[: max(0, WATCH_MAX_PATHS - len(found))]]
        return found

    def watch(self, collections=None) -> None:
        """(Re)read what to watch: ``collections``, or what ``source`` returns."""
        collections = self.source() if collections is None else collections
        snapshot = {c.name: {p: self._stat(p) for p in self._paths(c)} for c in collections}
        with self._lock:
            self._snapshot = snapshot

    def changed(self) -> list[str]:
        """The collections with a folder or note changed since the last look (one pass)."""
        with self._lock:
            snapshot = self._snapshot
        names = []
        for name, paths in snapshot.items():
            for path, seen in paths.items():
                if self._stat(path) != seen:
                    names.append(name)
                    break
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
                self._rewatch()  # a new folder is watched from now on; the same change is not counted twice
            elif pending and time.monotonic() - last_change >= self.quiet:
                changed, pending = sorted(pending), set()
                self.on_change(changed)
                self._rewatch()

    def _rewatch(self) -> None:
        with contextlib.suppress(Exception):  # an index closing under a watcher: keep the last snapshot
            self.watch()

    def start(self) -> threading.Thread:
        """``run()`` in a daemon thread."""
        self._thread = threading.Thread(target=self.run, name="pms-watch", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        self._stop.set()
