"""The command line: exit codes, output formats, messages, the stdlib-only promise.

Most tests call pms.main(argv) in this process (the pms_main fixture); the ones
about the interpreter itself (python3 -S, the private environment) run a
subprocess. Killing a sync and two syncs at once are in test_sync.py."""
import argparse
import ast
import json
import sqlite3
import sys

import pytest

import pms
from conftest import REPO, STDLIB_PYTHON, write
from scripts import amalgamate


@pytest.mark.stdlib
def test_runs_on_the_standard_library_alone(cli, notes, tmp_path):
    """python3 -S: no site-packages at all, so no fastembed, sqlite-vec, yaml or numpy."""
    db = tmp_path / "plain.sqlite"
    env = {"PMS_HOME": str(tmp_path / "home")}
    r = cli("collection", "add", notes, "--name", "notes", db=db, python_flags=["-S"], env=env)
    assert r.returncode == 0, r.stderr
    assert "Synced: +3 new" in r.stdout
    assert "Traceback" not in r.stderr
    assert "keyword-only search" in r.stderr and "setup" in r.stderr and r.stderr.count("\n") == 1
    r = cli("search", "restic", "--json", db=db, python_flags=["-S"], env=env)
    assert r.returncode == 0, r.stderr
    hits = json.loads(r.stdout)
    assert hits[0]["path"] == "backup.md" and hits[0]["vector_rank"] is None
    r = cli("search", "restic", db=db, python_flags=["-S"], env=env)
    assert r.returncode == 0 and r.stderr == ""  # the keyword-only notice was said once, by the sync


def test_collection_commands_and_status(pms_main, notes, tmp_path):
    db = tmp_path / "i.sqlite"
    assert pms_main("collection", "add", notes, "--name", "notes", "--no-embed", db=db).returncode == 0
    r = pms_main("collection", "list", db=db)
    assert "notes" in r.stdout and "3 notes" in r.stdout
    r = pms_main("collection", "show", "notes", "--json", db=db)
    assert json.loads(r.stdout)["notes"] == 3
    r = pms_main("status", "--json", db=db)
    info = json.loads(r.stdout)
    assert info["notes"] == 3 and info["pending"] == {"added": 0, "updated": 0, "deleted": 0}
    assert info["index"] == str(db) and info["index_bytes"] > 0
    r = pms_main("status", db=db)
    assert "Search mode:" in r.stdout and str(db) in r.stdout
    assert pms_main("collection", "rename", "notes", "vault", db=db).returncode == 0
    r = pms_main("collection", "remove", "vault", db=db)
    assert r.returncode == 0 and "untouched" in r.stdout
    assert (notes / "sync.md").exists()


def test_sync_dry_run_prints_the_plan(pms_main, notes, tmp_path):
    db = tmp_path / "i.sqlite"
    pms_main("collection", "add", notes, "--name", "notes", "--no-sync", db=db)
    r = pms_main("sync", "--dry-run", db=db)
    assert r.stdout.strip() == "Sync status: +3 new, ~0 modified, -0 deleted"
    pms_main("sync", "--no-embed", db=db)
    write(notes / "sync.md", "# changed\n")
    (notes / "backup.md").unlink()
    r = pms_main("sync", "--dry-run", "-v", db=db)
    assert r.stdout.splitlines()[0] == "Sync status: +0 new, ~1 modified, -1 deleted"
    assert "  ~ notes/sync.md" in r.stdout and "  - notes/backup.md" in r.stdout


def test_a_collection_named_search_does_not_turn_options_into_query_words(pms_main, notes, tmp_path):
    """Regression: "-word" arguments were rewritten whenever the token `search`
    appeared anywhere, so `sync -c search -v --dry-run` failed on "-v"."""
    db = tmp_path / "i.sqlite"
    pms_main("collection", "add", notes, "--name", "search", "--no-sync", db=db)
    r = pms_main("sync", "-c", "search", "-v", "--dry-run", db=db)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "Sync status: +3 new, ~0 modified, -0 deleted"
    assert "  + search/backup.md" in r.stdout
    r = pms_main("--db", db, "search", "-n", "1", "syncthing", "-conflict", "--mode", "keyword")
    assert r.returncode == 0 and "No results." in r.stdout  # after --db, search still takes "-word"


def test_search_output_formats(pms_main, notes, tmp_path):
    db = tmp_path / "i.sqlite"
    pms_main("collection", "add", notes, "--name", "notes", "--no-embed", db=db)
    r = pms_main("search", "restic", "--mode", "keyword", db=db)
    assert r.returncode == 0 and "Laptop backups" in r.stdout and "notes/backup.md:1-3" in r.stdout
    assert "\x1b[" not in r.stdout  # no colour codes when not a terminal
    r = pms_main("search", "restic", "--files", "--mode", "keyword", db=db)
    assert r.stdout.strip() == str(notes.resolve() / "backup.md")
    r = pms_main("search", "-n", "1", "syncthing", "--mode", "keyword", db=db)
    assert "Syncing notes" in r.stdout
    r = pms_main("search", "-n", "1", "syncthing", "-conflict", "--mode", "keyword", db=db)
    assert r.returncode == 0 and "No results." in r.stdout
    r = pms_main("search", '"unbalanced', "--mode", "keyword", db=db)
    assert r.returncode == 0 and r.stderr == ""


def test_get(pms_main, notes, tmp_path):
    db = tmp_path / "i.sqlite"
    pms_main("collection", "add", notes, "--name", "notes", "--no-embed", db=db)
    docid = json.loads(pms_main("search", "restic", "--json", "--mode", "keyword", db=db).stdout)[0]["docid"]
    r = pms_main("get", f"#{docid}", db=db)
    assert r.stdout.startswith("# Laptop backups")
    r = pms_main("get", "notes/backup.md:3:1", db=db)
    assert r.stdout.strip() == "Use restic with the 3-2-1 rule: three copies, two media, one offsite."
    r = pms_main("get", "notes/nope.md", db=db)
    assert r.returncode == 1 and r.stderr.startswith("pms: error: no indexed note")


def test_errors_are_one_line_with_non_zero_exit(pms_main, tmp_path, notes):
    db = tmp_path / "i.sqlite"
    r = pms_main("collection", "add", tmp_path / "missing", db=db)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "is not a folder" in r.stderr
    r = pms_main("sync", db=db)
    assert r.returncode == 1 and "no collections yet" in r.stderr
    pms_main("collection", "add", notes, "--name", "notes", "--no-embed", db=db)
    r = pms_main("search", "x", "-c", "nope", db=db)
    assert r.returncode == 1 and "no collection named 'nope'" in r.stderr
    notes.rename(tmp_path / "gone")
    r = pms_main("sync", "--no-embed", db=db)
    assert r.returncode == 1 and "collection folder is missing" in r.stderr
    bad = tmp_path / "not-a-db.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    r = pms_main("status", db=bad)
    assert r.returncode == 1 and "is damaged (it is not an SQLite file)" in r.stderr and r.stderr.count("\n") == 1


def test_pms_db_environment_variable(pms_main, notes, tmp_path, monkeypatch):
    db = tmp_path / "env.sqlite"
    monkeypatch.setenv("PMS_DB", str(db))
    r = pms_main("collection", "add", notes, "--name", "notes", "--no-embed")
    assert r.returncode == 0 and db.exists()
    assert sqlite3.connect(db).execute("SELECT count(*) FROM documents").fetchone()[0] == 3


def all_commands(parser: argparse.ArgumentParser, prefix=()) -> list[tuple[str, ...]]:
    """Every command and sub-command the parser knows, e.g. ("collection", "add")."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append((*prefix, name))
                found += all_commands(sub, (*prefix, name))
    return found


def test_every_command_has_help(pms_main):
    commands = all_commands(pms.cli.build_parser())
    assert {"collection", "sync", "status", "search", "get", "clip", "gui", "bench", "demo", "setup"} <= {c[0] for c in commands}
    assert ("collection", "add") in commands
    for command in commands:
        r = pms_main(*command, "--help")
        assert r.returncode == 0 and r.stdout.startswith(f"usage: {pms.pms_command(' '.join(command))}"), command
        assert len(r.stdout.splitlines()) > 3, command  # a description or options, not a bare usage line


def test_messages_name_the_command_the_user_runs(pms_main, tmp_path, monkeypatch):
    db = tmp_path / "i.sqlite"
    r = pms_main("sync", db=db)
    assert "(add one: python3 pms.py collection add ~/notes --name notes)" in r.stderr
    monkeypatch.setattr(sys, "frozen", True, raising=False)  # the packaged app
    r = pms_main("sync", db=db)
    assert "(add one: pms collection add ~/notes --name notes)" in r.stderr
    assert pms_main("--help").stdout.startswith("usage: pms [-h]")


def test_no_message_spells_the_command_by_hand():
    """Every message that names a command builds it with pms_command."""
    tree = ast.parse(amalgamate.engine((REPO / "pms.py").read_text(encoding="utf-8")))
    helper = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "pms_command")
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(n) is not None}
    spelled = [node.lineno for node in ast.walk(tree)
               if isinstance(node, ast.Constant) and isinstance(node.value, str) and "python3 pms.py" in node.value
               and id(node) not in docstrings and not helper.lineno <= node.lineno <= helper.end_lineno]
    assert spelled == []


@pytest.mark.slow
def test_demo_runs_on_the_shipped_sample_notes(pms_main, tmp_path, monkeypatch, embedding_model_dir):
    assert len(list((REPO / "sample-notes").rglob("*.md"))) >= 15
    monkeypatch.setenv("PMS_HOME", str(tmp_path))
    monkeypatch.setenv("PMS_MODEL_DIR", str(embedding_model_dir))
    r = pms_main("demo", "--mode", "keyword")
    assert r.returncode == 0, r.stderr
    assert "Synced:" in r.stdout and "$ python3 pms.py search" in r.stdout


@pytest.mark.stdlib
def test_setup_environment_is_used_by_later_runs(tmp_path):
    """`pms.py setup` fills <data>/venv; pms.py then imports from it, if it was built by the same Python."""
    import subprocess

    tag = subprocess.run([STDLIB_PYTHON, "-S", "-c", "import sys; print('python%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, check=True).stdout.strip()  # the Python that runs pms.py
    site = tmp_path / "venv" / "lib" / tag / "site-packages"
    (site / "pms_extra_probe.py").parent.mkdir(parents=True)
    (site / "pms_extra_probe.py").write_text("VALUE = 42\n")
    code = f"import sys; sys.path.insert(0, {str(REPO)!r}); import pms; pms.use_private_env(); import pms_extra_probe; print(pms_extra_probe.VALUE)"
    env = {"PMS_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([STDLIB_PYTHON, "-S", "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode != 0  # no marker: a venv of unknown origin is ignored
    (tmp_path / "venv" / "pms-python-version.txt").write_text(tag)
    r = subprocess.run([STDLIB_PYTHON, "-S", "-c", code], capture_output=True, text=True, env=env)
    assert r.stdout.strip() == "42", r.stderr


def test_progress_off_a_terminal_is_a_plain_line_every_few_seconds_and_one_at_the_end():
    """A log or a pipe gets no bar (carriage returns) but lines with the count, rate and time left;
    a phase shorter than LOG_EVERY prints nothing at all."""
    import io

    quiet = io.StringIO()
    printer = pms.ProgressPrinter(quiet)
    for done in range(0, 101, 10):
        printer(pms.SyncProgress("embed", done, 100, rate=50.0, eta=(100 - done) / 50))
    assert quiet.getvalue() == ""
    log = io.StringIO()
    printer = pms.ProgressPrinter(log)
    printer.LOG_EVERY = 0.0  # every call is "a few seconds later"
    printer(pms.SyncProgress("embed", 1200, 17000, rate=45.2, eta=349.6))
    printer(pms.SyncProgress("embed", 17000, 17000, rate=45.0, eta=0.0))
    lines = log.getvalue().splitlines()
    assert lines[0] == "Embedding: 1,200/17,000 passages, 45.2/s, ETA 5m49s"
    assert lines[1].startswith("Embedding: 17,000/17,000 passages, 45.0/s, done in ") and len(lines) == 2
    assert "\r" not in log.getvalue()
