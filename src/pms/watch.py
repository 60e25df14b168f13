"""``FolderWatcher``: notices changes in collections' folders and says which.

Owns: polling folders and notes by their stat (no extra package) with a quiet period, so a
burst of saves is one sync; what was seen before a sync stays the baseline after it, so a
change made while a sync runs is never lost; past a budget of stats per look, folders and
notes are looked at in turns, and the watcher says so.

May import: paths.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable

from .paths import is_skipped_folder


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
