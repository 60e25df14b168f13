"""What a new user meets in the first hour (issue 13, items 3-8): the demo leads
somewhere, notices are said once, an interrupted sync shows, duplicates are
refused, scores read as ranks, small commands behave."""
import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import pytest

import pms
from conftest import REPO, run_cli, write

pytestmark = pytest.mark.stdlib  # each test runs pms.py with python -S


def plain(*args, db=None, timeout=120):
    """The zero-install CLI: standard library only, keyword search."""
    return run_cli(*args, db=db, python_flags=["-S"], timeout=timeout)


# -- 3: the demo -----------------------------------------------------------------------------
def test_the_demo_indexes_into_the_real_index_and_ends_with_the_next_step():
    r = plain("demo")
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-4:]
    assert any("collection add" in line for line in last) and any("collection remove sample-notes" in line for line in last)
    r = plain("search", "shakshuka", "--json")  # what a user types next, with no --db
    assert r.returncode == 0 and json.loads(r.stdout)[0]["collection"] == "sample-notes"
    r = plain("collection", "remove", "sample-notes")
    assert r.returncode == 0 and (REPO / "sample-notes" / "quick-capture.md").exists()
    assert plain("collection", "list").stdout.startswith("No collections yet")


# -- 4: the keyword-only notice -----------------------------------------------------------------
def test_the_keyword_only_notice_is_said_once_per_index_and_status_keeps_it(notes, tmp_path):
    r = plain("demo")
    said = r.stdout + r.stderr
    assert said.count("embeddings not installed") == 1 and "((" not in said and "))" not in said
    for _ in range(2):
        r = plain("search", "backup")
        assert r.returncode == 0 and r.stderr == ""
    r = plain("status")
    assert "Search mode: keyword - embeddings not installed" in r.stdout
    other = tmp_path / "other.sqlite"  # another index is told once too
    assert "keyword-only search" in plain("collection", "add", notes, "--name", "notes", db=other).stderr
    assert plain("search", "backup", db=other).stderr == ""


# -- 5: interrupted embedding ---------------------------------------------------------------------
def many_notes(root: Path, count: int) -> Path:
    for i in range(count):
        write(root / f"note-{i:03}.md", f"# Note {i}\n\nA passage about topic {i}: gardening, bread, trains and rivers.\n")
    return root


def test_status_shows_passages_still_to_embed_after_an_interrupted_sync(embedding_model_dir, tmp_path, monkeypatch):
    db = tmp_path / "i.sqlite"
    monkeypatch.setenv("PMS_MODEL_DIR", str(embedding_model_dir))
    cancel = __import__("threading").Event()

    def stop_after_first_batch(p):
        if p.phase == "embed" and p.done:
            cancel.set()

    with pms.KnowledgeBase(db) as kb:
        kb.collections.create(many_notes(tmp_path / "n", 80), name="n")
        report = kb.sync(progress=stop_after_first_batch, cancel=cancel)
        assert report.cancelled and 0 < report.embedded < 80
    monkeypatch.delenv("PMS_MODEL_DIR")
    r = run_cli("status", db=db)
    done = report.embedded
    assert f"Search mode: hybrid (partial: {done} of 80 passages embedded)" in r.stdout, r.stdout
    assert f"{80 - done} passages to embed  (run: python3 pms.py sync)" in r.stdout
    assert json.loads(run_cli("status", "--json", db=db).stdout)["to_embed"] == 80 - done


@pytest.mark.slow
def test_interrupted_starts_on_a_fresh_line(embedding_model_dir, tmp_path):
    """Ctrl-C while the progress bar is drawn (a real terminal: a pty)."""
    db = tmp_path / "i.sqlite"
    env = {**os.environ, "PMS_MODEL_DIR": str(embedding_model_dir)}
    # Enough passages that the sync still embeds when this test, on a busy machine, gets to read the
    # bar and send Ctrl-C (400 took 4 s at load 7 once the model's threads stopped spinning).
    assert run_cli("collection", "add", many_notes(tmp_path / "n", 2000), "--name", "n", "--no-embed", db=db).returncode == 0
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, str(REPO / "pms.py"), "--db", str(db), "sync"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    seen, deadline, sent = b"", time.monotonic() + 120, False
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        if not sent and b"Embedding [" in seen:
            proc.send_signal(signal.SIGINT)
            sent = True
        if proc.poll() is not None and not ready:
            break
    proc.wait(timeout=30)
    os.close(master)
    assert sent and proc.returncode == 130, seen
    before = seen[: seen.index(b"pms: interrupted")]
    assert before.endswith(b"\n"), seen[-300:]


# -- 6: the same folder twice -----------------------------------------------------------------------
def test_the_same_folder_or_one_inside_it_is_refused_unless_forced(notes, tmp_path):
    db = tmp_path / "i.sqlite"
    assert plain("collection", "add", notes, "--name", "notes", "--no-embed", db=db).returncode == 0
    for folder in (notes, notes / "dev", notes.parent):
        r = plain("collection", "add", folder, "--name", "again", "--no-embed", db=db)
        assert r.returncode == 1 and "'notes'" in r.stderr and "--force" in r.stderr and r.stderr.count("\n") == 1
    r = plain("collection", "add", notes / "dev", "--name", "dev", "--no-embed", "--force", db=db)
    assert r.returncode == 0
    with pms.KnowledgeBase(db, embeddings=False) as kb:
        with pytest.raises(pms.PMSError, match="already the collection 'notes'"):
            kb.collections.create(notes, name="twice")


# -- 7: scores people can read -------------------------------------------------------------------------
def test_results_show_ranks_and_explain_rounds_and_names_missing_lists(embedding_model_dir, notes, tmp_path):
    db = tmp_path / "i.sqlite"
    assert run_cli("collection", "add", notes, "--name", "notes", db=db, env={"PMS_MODEL_DIR": str(embedding_model_dir)}).returncode == 0
    r = run_cli("search", "replicate documents onto my cellphone", "-n", "1", "--explain", db=db)
    first, *rest = r.stdout.splitlines()
    assert first.endswith("keyword \u2014, meaning #1"), r.stdout
    explain = [line for line in rest if not line.strip().startswith("fused:")][-1]  # then how the lists were fused
    assert "keyword \u2014" in explain and "meaning #1 (cosine distance 0." in explain and "None" not in explain
    distance = explain.split("cosine distance ")[1].split(")")[0]
    assert len(distance.split(".")[1]) == 3
    r = plain("search", "restic", "--explain", db=db)
    assert "keyword #1" in r.stdout and "meaning" not in r.stdout  # keyword mode names only its own list
    bm25 = r.stdout.split("BM25 ")[1].split(")")[0]
    assert len(bm25.split(".")[1]) == 2


# -- 8: small things ----------------------------------------------------------------------------------------
def test_small_commands_behave(notes, tmp_path):
    db = tmp_path / "i.sqlite"
    r = plain("search", "restic", db=db)
    assert r.returncode == 1 and "collection add" in r.stderr and "sync" not in r.stderr
    plain("collection", "add", notes, "--name", "notes", "--no-embed", db=db)
    r = plain("search", "restic", "-n", "0", db=db)
    assert r.returncode == 2 and "at least 1" in r.stderr and r.stdout == ""
    r = plain("get", "notes/backup.md:999", db=db)
    assert r.returncode == 1 and "has 3 lines" in r.stderr and r.stdout == ""  # not the "line" after the final newline
    assert plain("get", "notes/backup.md:3", db=db).returncode == 0


def test_status_during_a_running_sync_does_not_advise_a_sync(notes, tmp_path):
    db = tmp_path / "i.sqlite"
    plain("collection", "add", notes, "--name", "notes", "--no-embed", db=db)
    write(notes / "new.md", "# New\n")
    assert "(run: python3 pms.py sync)" in plain("status", db=db).stdout
    lock = pms.sync.FileLock(Path(str(db) + ".sync.lock"))
    assert lock.acquire(blocking=False)
    try:
        r = plain("status", db=db)
    finally:
        lock.release()
    assert "a sync is running" in r.stdout and "run: python3 pms.py sync" not in r.stdout


def test_collection_list_aligns_wide_characters(notes, tmp_path):
    db = tmp_path / "i.sqlite"
    plain("collection", "add", notes / "dev", "--name", "笔记", "--no-embed", db=db)
    plain("collection", "add", write(tmp_path / "other" / "a.md", "# A\n").parent, "--name", "plain", "--no-embed", db=db)
    lines = plain("collection", "list", db=db).stdout.splitlines()

    def columns(text: str) -> int:
        return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)

    ends = {columns(line[: line.index(" notes")]) for line in lines}
    assert len(lines) == 2 and len(ends) == 1, lines


def test_a_search_never_waits_for_another_writer_to_record_its_notice(notes, tmp_path):
    import sqlite3

    db = tmp_path / "i.sqlite"
    plain("collection", "add", notes, "--name", "notes", "--no-embed", db=db)
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # a sync in the middle of a batch
    try:
        r = plain("search", "restic", db=db, timeout=25)  # waiting would take busy_timeout's 30 s: TimeoutExpired
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert r.returncode == 0 and "Laptop backups" in r.stdout


@pytest.mark.slow
def test_the_pip_setup_uses_resolves_the_clipper_without_the_html_clean_warning(tmp_path):
    """venv's bundled pip warns "lxml does not provide the extra 'html_clean'"; setup upgrades pip first."""
    import venv

    venv.EnvBuilder(with_pip=True).create(tmp_path / "env")
    python = str(tmp_path / "env" / "bin" / "python")
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    if subprocess.run([*pip, pms.cli.SETUP_PIP], capture_output=True, timeout=300).returncode != 0:
        pytest.skip("no package index reachable to install a newer pip")
    r = subprocess.run([*pip, "--dry-run", "justext", "lxml"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "does not provide the extra" not in r.stderr


def test_keyword_ranks_count_notes_not_passages(tmp_path):
    """A note with three matching passages is keyword #1; the next note is #2, not #4."""
    root = tmp_path / "n"
    write(root / "big.md", "# Big\n\n" + "\n\n".join(f"## Part {i}\n\n" + "sourdough starter feeding. " * 60 for i in range(3)))
    write(root / "small.md", "# Small\n\nA note on sourdough.\n")
    db = tmp_path / "i.sqlite"
    plain("collection", "add", root, "--name", "n", "--no-embed", db=db)
    hits = json.loads(plain("search", "sourdough", "--json", db=db).stdout)
    assert [h["path"] for h in hits] == ["big.md", "small.md"] and [h["bm25_rank"] for h in hits] == [1, 2]
