"""A big vault: the newest notes are embedded first, write transactions stay short
(counted in files, bytes and passages, never timed), progress reaches `status`."""
from __future__ import annotations

import os
import sqlite3
import threading
import time

import pytest
from conftest import write

import pms


@pytest.fixture
def model(embedding_model_dir, monkeypatch):
    monkeypatch.setenv("PMS_MODEL_DIR", str(embedding_model_dir))


class RecordingEmbedder(pms.Embedder):
    """The real model, remembering the texts in the order they were embedded."""

    def __init__(self, batch_size=pms.EMBED_BATCH_SIZE):
        super().__init__(batch_size=batch_size, allow_download=False)
        self.seen: list[str] = []

    def embed_stream(self, texts):
        def recorded():
            for text in texts:
                self.seen.append(text)
                yield text
        return super().embed_stream(recorded())


def dated_notes(root, count: int, words: int = 8):
    """Notes n0..n{count-1}, n0 modified longest ago."""
    for i in range(count):
        path = write(root / f"n{i}.md", f"# Note {i}\n\n" + " ".join(f"topic{i}" for _ in range(words)) + "\n")
        when = time.time() - (count - i) * 86400
        os.utime(path, (when, when))
    return root


def other_writer_gets_in(db_path) -> bool:
    """Whether another connection can start writing right now, without waiting."""
    con = sqlite3.connect(db_path, timeout=0)
    try:
        con.execute("BEGIN IMMEDIATE")
        con.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        con.close()


def test_the_most_recently_modified_notes_are_embedded_first(tmp_path, model, monkeypatch):
    monkeypatch.setattr(pms.sync, "EMBED_WINDOW", 1)  # each passage its own window: the order is recency alone
    root = dated_notes(tmp_path / "vault", 6, words=3)
    os.utime(root / "n2.md", (time.time(), time.time()))  # edited just now
    embedder = RecordingEmbedder()
    with pms.KnowledgeBase(tmp_path / "index.sqlite", embedder=embedder) as kb:
        kb.collections.create(root, name="v")
        assert kb.sync().embedded == 6
    order = [next(i for i in range(6) if f"topic{i}" in text) for text in embedder.seen]
    assert order == [2, 5, 4, 3, 1, 0]


def test_the_notes_a_search_shows_while_a_sync_embeds_are_embedded_next(tmp_path, model):
    """The app searches in its own thread while its sync embeds: n19, last in the sync's order
    (the longest passage, in the only window), is embedded right after a search shows it, and once."""
    root = dated_notes(tmp_path / "vault", 20)
    embedder = RecordingEmbedder(batch_size=1)
    shown_after: list[int] = []
    with pms.KnowledgeBase(tmp_path / "index.sqlite", embedder=embedder) as kb:
        kb.collections.create(root, name="v")
        kb.sync(embed=False)

        def progress(p):
            if p.phase == "embed" and not shown_after:
                shown_after.append(len(embedder.seen))
                found: list[str] = []
                searcher = threading.Thread(target=lambda: found.extend(h.path for h in kb.search("topic19", mode="keyword")))
                searcher.start()
                searcher.join()
                assert found == ["n19.md"]

        assert kb.sync(progress=progress).embedded == 20
        assert kb.status(pending=False)["passages"] == kb.status(pending=False)["embedded"] == 20
    order = [int(text.split("topic")[1].split()[0]) for text in embedder.seen]
    assert sorted(order) == list(range(20))  # each note once
    assert shown_after[0] < 19 and order.index(19) == shown_after[0]  # next, not last


def test_inside_a_window_the_shortest_passages_go_first(tmp_path, model):
    root = tmp_path / "vault"
    for i, words in enumerate((30, 2, 12)):
        write(root / f"n{i}.md", f"# Note {i}\n\n" + " ".join(f"topic{i}" for _ in range(words)) + "\n")
    embedder = RecordingEmbedder()
    with pms.KnowledgeBase(tmp_path / "index.sqlite", embedder=embedder) as kb:
        kb.collections.create(root, name="v")
        kb.sync()
    assert [next(i for i in range(3) if f"topic{i}" in t) for t in embedder.seen] == [1, 2, 0]


def test_indexing_commits_big_notes_a_few_at_a_time(tmp_path):
    """Six notes of 400 KB: a write transaction takes at most BATCH_BYTES of text, and
    between two of them another writer gets the index at once."""
    root = tmp_path / "vault"
    for i in range(6):
        write(root / f"big{i}.md", f"# Big {i}\n\n" + ("A sentence about compilers and caches. " * 10_000) + "\n")
    db = tmp_path / "index.sqlite"
    steps, free = [], []

    def progress(p):
        if p.phase == "index":
            steps.append(p.done)
            free.append(other_writer_gets_in(db))

    with pms.KnowledgeBase(db, embeddings=False) as kb:
        kb.collections.create(root, name="v")
        assert kb.sync(progress=progress).added == 6
    per_transaction = [b - a for a, b in zip([0, *steps], steps)]
    assert max(per_transaction) <= pms.sync.Syncer.BATCH_BYTES // 400_000 and len(steps) >= 3
    assert all(free)


def test_embedding_commits_a_few_passages_at_a_time_and_reports_progress(tmp_path, model):
    root = dated_notes(tmp_path / "vault", 20)
    db = tmp_path / "index.sqlite"
    steps, free, seen_by_status = [], [], []
    with pms.KnowledgeBase(db, embedder=RecordingEmbedder(batch_size=2)) as kb:
        kb.collections.create(root, name="v")
        kb.sync(embed=False)

        def progress(p):
            if p.phase == "embed":
                steps.append(p.done)
                free.append(other_writer_gets_in(db))
                with pms.KnowledgeBase(db, embeddings=False) as other:  # what `pms status` sees meanwhile
                    seen_by_status.append(other.status(pending=False)["embedding"])

        assert kb.sync(progress=progress).embedded == 20
        assert kb.status(pending=False)["embedding"] is None  # done: nothing running
    per_transaction = [b - a for a, b in zip([0, *steps], steps)]
    assert max(per_transaction) <= 2 * 4 and len(steps) >= 3 and all(free)
    running = [s for s in seen_by_status if s]
    assert running and running[0]["total"] == 20 and running[0]["done"] == steps[0] and running[0]["rate"] > 0
