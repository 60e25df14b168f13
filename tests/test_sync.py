"""Incremental sync and every kind of bad file or interruption, on real index files."""
import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

import pms
from conftest import REPO, index_rows, run_cli, write


def paths_of(kb, name="notes"):
    return sorted(kb.collections.get(name).files)


def test_first_sync_indexes_notes_and_skips_hidden_and_dependency_folders(vault):
    assert paths_of(vault) == ["backup.md", "dev/rust.md", "sync.md"]
    assert vault.search("secret") == []


def test_resync_of_unchanged_vault_does_no_work(vault):
    before = index_rows(vault, "SELECT path, indexed_at FROM documents ORDER BY path")
    report = vault.sync()
    assert (report.added, report.updated, report.deleted, report.unchanged) == (0, 0, 0, 3)
    assert index_rows(vault, "SELECT path, indexed_at FROM documents ORDER BY path") == before


def test_touched_but_unchanged_file_is_not_reindexed(vault, notes):
    (before,) = index_rows(vault, "SELECT indexed_at, mtime_ns FROM documents WHERE path='sync.md'")
    time.sleep(0.01)
    os.utime(notes / "sync.md")
    report = vault.sync()
    assert report.updated == 0 and report.unchanged == 3
    (after,) = index_rows(vault, "SELECT indexed_at, mtime_ns FROM documents WHERE path='sync.md'")
    assert after[0] == before[0] and after[1] != before[1]


def test_a_sync_of_listed_paths_counts_each_once_and_leaves_the_rest(vault, notes):
    write(notes / "backup.md", "# Laptop backups\n\nNow with borgbackup instead.\n")
    write(notes / "sync.md", "# Sync\n\nsyncthing moved to a new host.\n")
    report = vault.sync(paths=["backup.md", "backup.md", "./missing.md"])  # a watcher may name a file twice
    assert (report.added, report.updated, report.deleted, report.unchanged) == (0, 1, 0, 0)
    assert [h.path for h in vault.search("borgbackup")] == ["backup.md"]
    assert vault.search("host") == []  # sync.md's edit waits for a sync that names it (or names none)
    assert vault.sync().updated == 1 and [h.path for h in vault.search("host")] == ["sync.md"]


def test_modified_added_deleted(vault, notes):
    write(notes / "backup.md", "# Laptop backups\n\nNow with borgbackup instead.\n")
    write(notes / "new.md", "# New note\n\nquokka facts\n")
    (notes / "dev" / "rust.md").unlink()
    plan = vault.check_sync_status()
    assert plan.summary() == "Sync status: +1 new, ~1 modified, -1 deleted"
    assert plan.added == [("notes", "new.md")] and plan.deleted == [("notes", "dev/rust.md")]
    report = vault.sync()
    assert (report.added, report.updated, report.deleted) == (1, 1, 1)
    assert [h.path for h in vault.search("borgbackup")] == ["backup.md"]
    assert vault.search("restic") == []
    assert vault.search("ownership") == []
    assert vault.check_sync_status().pending == 0


def test_unchanged_passages_keep_their_rows_when_a_note_is_edited(kb, tmp_path):
    root = tmp_path / "n"
    sections = "\n\n".join(f"## Part {i}\n\n" + f"Text of part {i}. " * 40 for i in range(6))
    write(root / "long.md", f"# Long\n\n{sections}\n")
    kb.collections.create(root, name="n")
    kb.sync()
    ids = dict(index_rows(kb, "SELECT body, id FROM chunks"))
    write(root / "long.md", f"# Long\n\n{sections}\n\n## Part new\n\nAppended text.\n")
    kb.sync()
    after = dict(index_rows(kb, "SELECT body, id FROM chunks"))
    kept = [body for body in ids if after.get(body) == ids[body]]
    assert len(kept) >= len(ids) - 1  # only the passage that changed got a new row


def test_bad_files_each_get_a_message_and_the_rest_is_indexed(kb, tmp_path, monkeypatch):
    root = tmp_path / "bad"
    write(root / "good.md", "# Good\n\nfine content\n")
    write(root / "latin1.md", "# Caf\u00e9 notes\n\nna\u00efve cr\u00e8me \u20ac".encode("cp1252"))
    write(root / "binary.md", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    write(root / "empty.md", "")
    write(root / "crlf.md", b"\xef\xbb\xbf# Windows note\r\n\r\nwritten on windows\r\n")
    write(root / "fence.md", "# Open fence\n\n```python\nprint('never closed')\n")
    (root / "dangling.md").symlink_to(root / "does-not-exist.md")
    (root / "loop").mkdir()
    (root / "loop" / "back").symlink_to(root, target_is_directory=True)
    write(root / "huge.md", b"# Huge\n\n" + b"word " * (21 * 1024 * 1024 // 5))
    kb.collections.create(root, name="bad")
    report = kb.sync()
    files = set(kb.collections.get("bad").files)
    assert {"good.md", "latin1.md", "empty.md", "crlf.md", "fence.md"} <= files
    assert not files & {"binary.md", "huge.md", "dangling.md"}
    problems = {os.path.basename(p): why for p, why in report.skipped + report.errors}
    assert "binary" in problems["binary.md"]
    assert "20 MB" in problems["huge.md"]
    assert "dangling.md" in problems
    assert any("symlink loop" in why for why in problems.values())
    assert kb.search("café crème")[0].path == "latin1.md"
    hit = kb.search("windows")[0]
    assert hit.title == "Windows note"
    assert kb.search("empty")[0].path == "empty.md"
    assert kb.search("never closed")[0].path == "fence.md"


@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True, reason="root reads files whatever their mode")
def test_unreadable_file(kb, tmp_path):
    root = tmp_path / "perm"
    write(root / "secret.md", "# s\n\nx")
    (root / "secret.md").chmod(0)
    kb.collections.create(root, name="perm")
    report = kb.sync()
    assert report.errors and "secret.md" in report.errors[0][0] and "cannot read" in report.errors[0][1]


def test_missing_collection_folder_keeps_the_index(vault, notes, tmp_path):
    moved = tmp_path / "moved"
    notes.rename(moved)
    report = vault.sync()
    assert report.collection_errors and "collection folder is missing" in report.collection_errors[0][1]
    assert len(vault.collections.get("notes").files) == 3  # nothing deleted
    moved.rename(notes)
    report = vault.sync()  # the folder is back: its notes were never dropped, so nothing to redo
    assert (report.added, report.updated, report.deleted, report.unchanged) == (0, 0, 0, 3)


def numbered_notes(root, n):
    """n tiny notes n0.md, n1.md, ... in root."""
    for i in range(n):
        write(root / f"n{i}.md", f"# Note {i}\n\nbody {i}\n")
    return root


def test_file_deleted_during_sync(kb, tmp_path, monkeypatch):
    root = numbered_notes(tmp_path / "many", 6)
    kb.collections.create(root, name="many")
    monkeypatch.setattr(pms.sync.Syncer, "BATCH_FILES", 1)

    def delete_a_later_file(progress):
        if progress.done == 1 and (root / "n5.md").exists():
            (root / "n5.md").unlink()

    report = kb.sync(progress=delete_a_later_file)
    assert not report.errors
    assert sorted(kb.collections.get("many").files) == [f"n{i}.md" for i in range(5)]


def test_cancel_leaves_a_consistent_index(kb, tmp_path, monkeypatch):
    import threading

    root = numbered_notes(tmp_path / "c", 30)
    kb.collections.create(root, name="c")
    monkeypatch.setattr(pms.sync.Syncer, "BATCH_FILES", 5)
    cancel = threading.Event()
    report = kb.sync(progress=lambda p: cancel.set() if p.done >= 10 else None, cancel=cancel)
    assert report.cancelled and 0 < len(kb.collections.get("c").files) < 30
    assert index_rows(kb, "PRAGMA integrity_check") == [("ok",)]
    assert kb.sync().added == 30 - 10 and len(kb.collections.get("c").files) == 30


def test_progress_says_the_time_left():
    assert pms.SyncProgress("embed", 1, 9, eta=185.4).eta_text == "3m05s"
    assert pms.SyncProgress("embed", 1, 9, eta=42.0).eta_text == "42s"
    assert pms.SyncProgress("scan", 0, 0).eta_text == "?"


def test_waiting_for_another_sync_is_a_notice_not_a_print(tmp_path, capsys):
    import threading

    heard = []
    with pms.KnowledgeBase(tmp_path / "i.sqlite", embeddings=False, notice=heard.append) as kb:
        kb.collections.create(numbered_notes(tmp_path / "w", 3), name="w")
        other_sync = pms.sync.FileLock(tmp_path / "i.sqlite.sync.lock")
        assert other_sync.acquire(blocking=False)
        threading.Timer(0.3, other_sync.release).start()
        report = kb.sync()
    assert report.added == 3
    assert heard == ["another sync of this index is running; waiting for it to finish"]
    assert capsys.readouterr().err == ""


def test_errors_a_note_can_cause_are_pms_errors(tmp_path):
    big = write(tmp_path / "big.md", "# Big\n\n" + "words " * 100)
    with pytest.raises(pms.FileTooLargeError, match="larger than") as too_large:
        pms.read_note_file(big, limit=64)
    with pytest.raises(pms.BinaryFileError) as binary:
        pms.decode_text(b"PK\x03\x04\x00\x00binary")
    assert isinstance(too_large.value, pms.PMSError) and isinstance(binary.value, pms.PMSError)


def test_a_note_with_more_passages_than_one_sql_statement_may_name(tmp_path):
    """Edits delete and searches look up passages in parts of SQLITE_MAX_VARS ids."""
    # internal contract: Store's SQLITE_MAX_VARS, the ids one statement may name, sizes the note
    sections = 3 * pms.store.SQLITE_MAX_VARS
    note = tmp_path / "many" / "long.md"
    write(note, "".join(f"## Part {i}\n\nalpha{i} beta{i} gamma{i} delta{i} epsilon{i} zeta{i} eta{i} theta{i}\n\n"
                        for i in range(sections)))
    with pms.KnowledgeBase(tmp_path / "i.sqlite", embeddings=False, passage_chars=60) as kb:
        kb.collections.create(note.parent, name="many")
        kb.sync()
        before = kb.status(pending=False)["passages"]
        assert before > 2 * pms.store.SQLITE_MAX_VARS
        write(note, note.read_text().replace("alpha", "omega"))  # every passage changes
        assert kb.sync().updated == 1
        assert kb.status(pending=False)["passages"] == before  # every old passage deleted
        hits = kb.search("part", k=2 * pms.store.SQLITE_MAX_VARS, mode="keyword", passages=True)  # looked up in two parts
        assert len(hits) == 2 * pms.store.SQLITE_MAX_VARS and all("omega" in h.text for h in hits)
        assert not kb.search("alpha7", mode="keyword")


def make_many(root, n):
    root.mkdir(parents=True)
    body = "\n\n".join(f"## Section {j}\n\n" + "lorem ipsum dolor sit amet " * 30 for j in range(4))
    for i in range(n):
        (root / f"note{i:05}.md").write_text(f"# Note {i}\n\n{body}\n")


def test_two_processes_syncing_at_once(tmp_path):
    """Both syncs are started while a third holds the index's sync lock, and both say they
    wait for it: so they provably overlap; then each takes its turn and the index is whole."""
    from concurrent.futures import ThreadPoolExecutor

    root = tmp_path / "shared"
    make_many(root, 400)
    db = tmp_path / "idx.sqlite"
    assert run_cli("collection", "add", root, "--name", "s", "--no-sync", db=db).returncode == 0
    cmd = [sys.executable, str(REPO / "pms.py"), "--db", str(db), "sync", "--no-embed"]
    holder = pms.sync.FileLock(tmp_path / "idx.sqlite.sync.lock")
    assert holder.acquire(blocking=False)
    try:
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        with ThreadPoolExecutor(2) as pool:  # each process's first line on stderr: it is waiting (a timeout fails the test)
            first_lines = [f.result(timeout=120) for f in [pool.submit(p.stderr.readline) for p in procs]]
        assert all("another sync of this index is running" in line for line in first_lines), first_lines
    finally:
        holder.release()
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM documents").fetchone()[0] == 400
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.slow
def test_killed_sync_is_finished_by_the_next_one(tmp_path):
    root = tmp_path / "big"
    make_many(root, 3000)
    db = tmp_path / "idx.sqlite"
    assert run_cli("collection", "add", root, "--name", "big", "--no-sync", db=db).returncode == 0
    proc = subprocess.Popen([sys.executable, str(REPO / "pms.py"), "--db", str(db), "sync", "--no-embed"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    count = 0
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
        try:
            count = sqlite3.connect(db, timeout=1).execute("SELECT count(*) FROM documents").fetchone()[0]
        except sqlite3.Error:
            continue
        if count > 0:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 0 < count < 3000, "the sync finished before it could be killed; make the corpus bigger"
    result = run_cli("sync", "--no-embed", db=db)
    assert result.returncode == 0, result.stderr
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM documents").fetchone()[0] == 3000
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'lorem'").fetchone()[0] == \
        conn.execute("SELECT count(*) FROM chunks").fetchone()[0]


def test_a_collection_without_a_name_is_named_after_its_folder_validly_and_uniquely(kb, tmp_path):
    """The rule the app used to keep for itself: every front end gets the same names."""
    first, second = tmp_path / "a" / "My notes!", tmp_path / "b" / "My notes!"
    first.mkdir(parents=True)
    second.mkdir(parents=True)
    assert kb.collections.create(first).name == "My notes"
    assert kb.collections.create(second).name == "My notes-2"
    with pytest.raises(pms.PMSError, match="already the collection 'My notes'"):
        kb.collections.create(first)


def test_collections_crud(kb, notes, tmp_path):
    col = kb.collections.create(notes, name="notes", description="mine")
    assert col.path == notes.resolve() and col.glob == "**/*.md"
    with pytest.raises(pms.PMSError, match="already exists"):
        kb.collections.create(notes, name="notes")
    with pytest.raises(pms.PMSError, match="is not a folder"):
        kb.collections.create(tmp_path / "nope", name="x")
    kb.sync()
    kb.collections.rename("notes", "vault")
    assert [c.name for c in kb.collections.list()] == ["vault"]
    assert kb.search("restic")[0].collection == "vault"
    kb.collections.delete("vault")
    assert kb.search("restic") == [] and kb.status(pending=False)["passages"] == 0
    assert (notes / "backup.md").exists()  # the files are never touched


def test_glob_limits_what_is_indexed(kb, notes):
    kb.collections.create(notes, name="dev", glob="dev/**/*.md")
    kb.sync()
    assert kb.collections.get("dev").files == ["dev/rust.md"]


def test_notes_are_never_modified(vault, notes):
    before = {p: p.read_bytes() for p in notes.rglob("*") if p.is_file()}
    vault.sync()
    vault.search("sync")
    assert {p: p.read_bytes() for p in notes.rglob("*") if p.is_file()} == before


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="parsing on several cores needs two of them")
def test_a_big_sync_parses_on_every_core_and_indexes_the_same_as_one(tmp_path, monkeypatch):
    vault = tmp_path / "vault"
    for i in range(120):
        write(vault / f"topic{i % 7}" / f"note{i:03}.md",
              f"---\ntags: [t{i % 5}]\naliases: [alias {i}]\n---\n# Note {i}\n\nAbout harbour number {i} and "
              f"[[note{(i + 1) % 120:03}]].\n\n## Details\n\n" + "Lighthouse keepers write logs. " * (i % 9 + 1) + "\n")
    (vault / "binary.md").write_bytes(b"\x00\x01\x02 not text" * 50)
    searched = ["harbour 17", "lighthouse keepers", "alias 42", "details"]

    def indexed(name: str, progress=None):
        with pms.KnowledgeBase(tmp_path / f"{name}.sqlite", embeddings=False) as kb:
            kb.collections.create(vault, name="vault")
            report = kb.sync(progress=progress)
            hits = [[(h.ref, h.title, h.heading_path, h.start_line, h.end_line, h.tags, h.snippet)
                     for h in kb.search(q, k=20, mode="keyword")] for q in searched]
            return report, hits, kb.tags(), kb.status(pending=False)["passages"]

    one_core = indexed("serial")
    workers: list[int] = []
    monkeypatch.setattr(pms.sync.Syncer, "PARALLEL_PARSE_MIN_FILES", 50)  # 121 files: parsed by workers,
    monkeypatch.setattr(pms.sync.Syncer, "BATCH_FILES", 10)  # in 13 write batches
    every_core = indexed("parallel", progress=lambda p: workers.append(len(multiprocessing.active_children())))
    assert max(workers) >= 2  # the workers parsed while batches were written
    serial_report, parallel_report = one_core[0], every_core[0]
    assert (serial_report.added, serial_report.skipped) == (parallel_report.added, parallel_report.skipped) == (120, serial_report.skipped)
    assert [reason for _, reason in serial_report.skipped] and "binary.md" in serial_report.skipped[0][0]
    assert one_core[1:] == every_core[1:]  # the same passages, titles, lines, tags and snippets


DAMAGED_PDF = b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 99 0 R >> endobj\ntrailer << >>\n%%EOF"


def test_a_file_that_cannot_be_read_is_a_warning_said_once_remembered_and_retried_when_it_changes(tmp_path):
    """Issue 36, item 3: one damaged PDF failed every sync (exit 1, the error printed each time,
    also by --dry-run and watch) for a file the user cannot fix."""
    pytest.importorskip("pypdfium2", reason="reading PDFs needs pypdfium2 (pip install -r requirements-dev.txt)")
    root = tmp_path / "vault"
    write(root / "manual.md", "# Manual\n\nThe handbook explains the coolant valves.\n")
    write(root / "damaged-handbook.pdf", DAMAGED_PDF)
    write(root / "picture.md", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    db = tmp_path / "i.sqlite"
    first = run_cli("collection", "add", root, "--name", "vault", "--no-embed", db=db)
    assert first.returncode == 0, first.stderr  # everything else was indexed
    told = [line for line in first.stderr.splitlines() if "damaged-handbook.pdf" in line]
    assert len(told) == 1 and told[0].startswith("pms: warning:") and "damaged" in told[0], first.stderr
    assert "picture.md" in first.stderr
    for again in (run_cli("sync", db=db), run_cli("sync", "--dry-run", db=db)):
        assert again.returncode == 0 and "damaged-handbook" not in again.stderr + again.stdout, again.stderr
        assert "picture.md" not in again.stderr
    status = run_cli("status", db=db)
    assert "damaged-handbook.pdf" in status.stdout and "picture.md" in status.stdout, status.stdout
    info = json.loads(run_cli("status", "--json", db=db).stdout)
    assert info["not_indexed_count"] == 2 and info["skipped"] == 2
    assert {(f["path"], f["failed"]) for f in info["not_indexed"]} == {("damaged-handbook.pdf", True), ("picture.md", False)}
    write(root / "damaged-handbook.pdf", DAMAGED_PDF + b"\n% touched\n")  # changed: read again, and said again
    retried = run_cli("sync", db=db)
    assert retried.returncode == 0 and retried.stderr.count("damaged-handbook.pdf") == 1
    os.remove(root / "damaged-handbook.pdf")  # gone: gone from the list
    assert run_cli("sync", db=db).returncode == 0
    assert json.loads(run_cli("status", "--json", db=db).stdout)["not_indexed_count"] == 1


def test_a_missing_collection_folder_still_fails_the_sync(vault, notes, tmp_path):
    notes.rename(tmp_path / "away")
    done = run_cli("sync", db=vault.db_path)
    assert done.returncode == 1 and "collection folder is missing" in done.stderr
