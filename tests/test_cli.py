"""The command line, as a user runs it: exit codes, output formats, the stdlib-only promise."""
import json
import sqlite3

import pytest

from conftest import REPO, write


def test_runs_on_the_standard_library_alone(cli, notes, tmp_path):
    """python3 -S: no site-packages at all, so no fastembed, sqlite-vec, yaml or numpy."""
    db = tmp_path / "plain.sqlite"
    env = {"PMS_HOME": str(tmp_path / "home")}
    r = cli("collection", "add", notes, "--name", "notes", db=db, python_flags=["-S"], env=env)
    assert r.returncode == 0, r.stderr
    assert "Synced: +3 new" in r.stdout
    assert "Traceback" not in r.stderr
    r = cli("search", "restic", "--json", db=db, python_flags=["-S"], env=env)
    assert r.returncode == 0, r.stderr
    hits = json.loads(r.stdout)
    assert hits[0]["path"] == "backup.md" and hits[0]["vector_rank"] is None
    r = cli("search", "restic", db=db, python_flags=["-S"], env=env)
    assert "keyword-only search" in r.stderr and "setup" in r.stderr and r.stderr.count("\n") == 1


def test_collection_commands_and_status(cli, notes, tmp_path):
    db = tmp_path / "i.sqlite"
    assert cli("collection", "add", notes, "--name", "notes", "--no-embed", db=db).returncode == 0
    r = cli("collection", "list", db=db)
    assert "notes" in r.stdout and "3 notes" in r.stdout
    r = cli("collection", "show", "notes", "--json", db=db)
    assert json.loads(r.stdout)["notes"] == 3
    r = cli("status", "--json", db=db)
    info = json.loads(r.stdout)
    assert info["documents"] == 3 and info["pending"] == {"added": 0, "updated": 0, "deleted": 0}
    assert info["index"] == str(db) and info["index_bytes"] > 0
    r = cli("status", db=db)
    assert "Search mode:" in r.stdout and str(db) in r.stdout
    assert cli("collection", "rename", "notes", "vault", db=db).returncode == 0
    r = cli("collection", "remove", "vault", db=db)
    assert r.returncode == 0 and "untouched" in r.stdout
    assert (notes / "sync.md").exists()


def test_sync_dry_run_prints_the_plan(cli, notes, tmp_path):
    db = tmp_path / "i.sqlite"
    cli("collection", "add", notes, "--name", "notes", "--no-sync", db=db)
    r = cli("sync", "--dry-run", db=db)
    assert r.stdout.strip() == "Sync status: +3 new, ~0 modified, -0 deleted"
    cli("sync", "--no-embed", db=db)
    write(notes / "sync.md", "# changed\n")
    (notes / "backup.md").unlink()
    r = cli("sync", "--dry-run", "-v", db=db)
    assert r.stdout.splitlines()[0] == "Sync status: +0 new, ~1 modified, -1 deleted"
    assert "  ~ notes/sync.md" in r.stdout and "  - notes/backup.md" in r.stdout


def test_search_output_formats(cli, notes, tmp_path):
    db = tmp_path / "i.sqlite"
    cli("collection", "add", notes, "--name", "notes", "--no-embed", db=db)
    r = cli("search", "restic", "--mode", "keyword", db=db)
    assert r.returncode == 0 and "Laptop backups" in r.stdout and "notes/backup.md:1-3" in r.stdout
    assert "\x1b[" not in r.stdout  # no colour codes when not a terminal
    r = cli("search", "restic", "--files", "--mode", "keyword", db=db)
    assert r.stdout.strip() == str(notes.resolve() / "backup.md")
    r = cli("search", "-n", "1", "syncthing", "-conflict", "--mode", "keyword", db=db)
    assert r.returncode == 0 and "No results." in r.stdout
    r = cli("search", '"unbalanced', "--mode", "keyword", db=db)
    assert r.returncode == 0 and "Traceback" not in r.stderr


def test_get(cli, notes, tmp_path):
    db = tmp_path / "i.sqlite"
    cli("collection", "add", notes, "--name", "notes", "--no-embed", db=db)
    docid = json.loads(cli("search", "restic", "--json", "--mode", "keyword", db=db).stdout)[0]["docid"]
    r = cli("get", f"#{docid}", db=db)
    assert r.stdout.startswith("# Laptop backups")
    r = cli("get", "notes/backup.md:3:1", db=db)
    assert r.stdout.strip() == "Use restic with the 3-2-1 rule: three copies, two media, one offsite."
    r = cli("get", "notes/nope.md", db=db)
    assert r.returncode == 1 and r.stderr.startswith("pms: error: no indexed note")


def test_errors_are_one_line_with_non_zero_exit(cli, tmp_path, notes):
    db = tmp_path / "i.sqlite"
    r = cli("collection", "add", tmp_path / "missing", db=db)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "is not a folder" in r.stderr
    r = cli("sync", db=db)
    assert r.returncode == 1 and "no collections yet" in r.stderr
    cli("collection", "add", notes, "--name", "notes", "--no-embed", db=db)
    r = cli("search", "x", "-c", "nope", db=db)
    assert r.returncode == 1 and "no collection named 'nope'" in r.stderr
    notes.rename(tmp_path / "gone")
    r = cli("sync", "--no-embed", db=db)
    assert r.returncode == 1 and "collection folder is missing" in r.stderr
    bad = tmp_path / "not-a-db.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    r = cli("status", db=bad)
    assert r.returncode == 1 and "cannot open the index" in r.stderr and "Traceback" not in r.stderr


def test_pms_db_environment_variable(cli, notes, tmp_path):
    db = tmp_path / "env.sqlite"
    r = cli("collection", "add", notes, "--name", "notes", "--no-embed", env={"PMS_DB": str(db)})
    assert r.returncode == 0 and db.exists()
    assert sqlite3.connect(db).execute("SELECT count(*) FROM documents").fetchone()[0] == 3


def test_every_command_has_help(cli):
    for command in ["collection", "sync", "status", "search", "get", "demo", "setup"]:
        r = cli(command, "--help")
        assert r.returncode == 0 and "usage: pms" in r.stdout


@pytest.mark.slow
def test_demo_runs_on_the_shipped_sample_notes(cli, tmp_path):
    assert len(list((REPO / "sample-notes").rglob("*.md"))) >= 15
    r = cli("demo", "--mode", "keyword", env={"PMS_HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert "Synced:" in r.stdout and "$ pms search" in r.stdout
    assert (tmp_path / "demo.sqlite").exists()


def test_setup_environment_is_used_by_later_runs(tmp_path):
    """`pms.py setup` fills <data>/venv; pms.py then imports from it, if it was built by the same Python."""
    import subprocess
    import sys

    tag = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = tmp_path / "venv" / "lib" / tag / "site-packages"
    (site / "pms_extra_probe.py").parent.mkdir(parents=True)
    (site / "pms_extra_probe.py").write_text("VALUE = 42\n")
    code = f"import sys; sys.path.insert(0, {str(REPO)!r}); import pms; pms.use_private_env(); import pms_extra_probe; print(pms_extra_probe.VALUE)"
    env = {"PMS_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode != 0  # no marker: a venv of unknown origin is ignored
    (tmp_path / "venv" / "pms-python-version.txt").write_text(tag)
    r = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env)
    assert r.stdout.strip() == "42", r.stderr
