"""Watching folders (issue 36 item 2, issue 37 item 9): a change made while a sync runs is
synced after it, in the engine, the CLI and the app; a vault past the watcher's budget of
stats per look is still watched whole, in turns, and the watcher says so."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from conftest import REPO, WAIT_MS, run_cli, wait_for, write

import pms

FAST = {"interval": 0.05, "quiet": 0.05}


def keyword_hits(kb: pms.KnowledgeBase, query: str) -> list[str]:
    return [h.path for h in kb.search(query, mode="keyword")]


class Watching:
    """kb.watch in a thread, stopped at the end."""

    def __init__(self, kb: pms.KnowledgeBase, **options):
        self.stop = threading.Event()
        self.thread = threading.Thread(target=kb.watch, kwargs={"stop": self.stop, **FAST, **options}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(30)


def test_a_note_written_while_the_watchers_sync_runs_is_synced_after_it(tmp_path):
    root = tmp_path / "vault"
    write(root / "a.md", "# A\n\nalpha\n")
    with pms.KnowledgeBase(tmp_path / "i.sqlite", embeddings=False) as kb:
        kb.collections.create(root, name="vault")
        syncs = []

        class WriteWhileSyncing:
            """Around each of the watcher's syncs: the second one (the first after a change) ends with two
            more changes, a new note and an edit, made after its scan read the folder."""

            def __enter__(self):
                syncs.append(1)

            def __exit__(self, *exc):
                if len(syncs) == 2:
                    write(root / "during.md", "# During\n\nthe quokka arrived while the sync ran\n")
                    write(root / "a.md", "# A\n\nalpha, edited to mention the numbat\n")

        with Watching(kb, sync_lock=WriteWhileSyncing()):
            wait_for(lambda: syncs, "the catch-up sync ran")
            write(root / "b.md", "# B\n\nbravo\n")
            assert wait_for(lambda: keyword_hits(kb, "quokka"), "the note written during a sync is found") == ["during.md"]
            assert wait_for(lambda: keyword_hits(kb, "numbat"), "the edit made during a sync is found") == ["a.md"]


def test_a_note_edited_after_the_sync_read_it_is_seen_by_a_watcher_that_starts_later(tmp_path):
    """A new watcher (the app starting after its catch-up sync) compares a note with what the index
    holds of it, not with what the file is now: an edit that came after the sync read it counts."""
    root = tmp_path / "vault"
    write(root / "a.md", "# A\n\nalpha\n")
    with pms.KnowledgeBase(tmp_path / "i.sqlite", embeddings=False) as kb:
        kb.collections.create(root, name="vault")
        kb.sync()
        write(root / "a.md", "# A\n\nalpha, and now the dugong\n")  # after the sync read it; same folder time
        with Watching(kb, catch_up=False):
            assert wait_for(lambda: keyword_hits(kb, "dugong"), "the edit is synced") == ["a.md"]


def test_past_its_budget_the_watcher_looks_at_every_note_in_turns_and_says_so(tmp_path):
    root = tmp_path / "vault"
    for i in range(300):
        write(root / f"part-{i % 3}" / f"n{i:03d}.md", f"# Note {i}\n\nbody {i}\n")
    told: list[str] = []
    with pms.KnowledgeBase(tmp_path / "i.sqlite", embeddings=False, notice=told.append) as kb:
        kb.collections.create(root, name="vault")
        kb.sync()
        with Watching(kb, catch_up=False, paths_per_look=40):
            wait_for(lambda: any("looked at in turns" in t for t in told), "the watcher says it looks in turns")
            for i in (0, 150, 299):  # edits in place: only the note's own time changes
                time.sleep(0.05)
                with open(root / f"part-{i % 3}" / f"n{i:03d}.md", "a", encoding="utf-8") as fh:
                    fh.write(f"\nedited: wombat{i}\n")
            for i in (0, 150, 299):
                assert wait_for(lambda i=i: keyword_hits(kb, f"wombat{i}"), f"the edit of note {i} is synced") == \
                    [f"part-{i % 3}/n{i:03d}.md"]
    pace = next(t for t in told if "looked at in turns" in t)
    assert "watching 304 folders and notes, more than the 40 looked at each 0.05 s" in pace, pace


@pytest.mark.slow
def test_pms_watch_sees_an_edit_to_any_of_21000_notes(tmp_path):
    """The vault of issue 37 (item 9): past the old cap of 20,000 paths, edits were never seen."""
    root = tmp_path / "big"
    for i in range(21_000):
        write(root / f"f{i // 1000:02d}" / f"n{i:05d}.md", f"# Note {i}\n\nbody of note {i}\n")
    db = tmp_path / "i.sqlite"
    added = run_cli("collection", "add", root, "--name", "big", "--no-embed", db=db, timeout=900)
    assert added.returncode == 0, added.stderr
    watch = subprocess.Popen([sys.executable, str(REPO / "pms.py"), "--db", str(db), "watch"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**os.environ})
    try:
        assert "watching big" in watch.stderr.readline()
        pace = watch.stderr.readline()
        assert "watching 21,022 folders and notes" in pace and "looked at in turns" in pace, pace
        time.sleep(0.05)
        for i in (20_999, 3):  # the last note (past the old cap) and one near the start, edited in place
            with open(root / f"f{i // 1000:02d}" / f"n{i:05d}.md", "a", encoding="utf-8") as fh:
                fh.write(f"\nthe platypus{i} was here\n")

        def found(i: int):
            done = run_cli("search", f"platypus{i}", "--json", "--mode", "keyword", db=db)
            return done.returncode == 0 and json.loads(done.stdout)
        for i in (20_999, 3):
            assert wait_for(lambda i=i: found(i), f"note {i}'s edit is searchable")[0]["path"] == f"f{i // 1000:02d}/n{i:05d}.md"
    finally:
        watch.terminate()
        watch.wait(30)


# -- the app -------------------------------------------------------------------------------
def result_paths(window) -> list[str]:
    return [h.path for h in window.results_model.hits]


def test_the_app_syncs_a_note_written_during_its_first_sync(kb, tmp_path, open_window, qtbot):
    root = tmp_path / "vault"
    for i in range(120):
        write(root / f"n{i:03d}.md", f"# Note {i}\n\n" + f"words of note {i} " * 50 + "\n")
    kb.collections.create(root, name="vault")
    window = open_window(kb)
    written = []

    def write_during_the_sync(progress):
        if not written:
            written.append(write(root / "during.md", "# During\n\nthe quokka came while the app's first sync ran\n"))

    window.bridge.sync_progress.connect(write_during_the_sync)
    with qtbot.waitSignal(window.sync_done, timeout=WAIT_MS):
        window.start_background_work()
    assert written
    qtbot.waitUntil(lambda: keyword_hits(kb, "quokka") == ["during.md"], timeout=WAIT_MS)
