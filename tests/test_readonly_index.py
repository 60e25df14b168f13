"""An index in a place PMS cannot write (issue 13, item 2): reading works, writing says why."""
import functools
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, run_cli


@functools.cache
def can_mount_read_only() -> bool:
    try:
        return subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def run_read_only(folder, *args, db):
    """Run pms.py with ``folder`` read-only: a read-only bind mount (root ignores file
    modes) in a private mount namespace, or plain file modes for other users."""
    cmd = [sys.executable, str(REPO / "pms.py"), "--db", str(db), *map(str, args)]
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [folder, *folder.iterdir()]}
        for p in modes:
            p.chmod(modes[p] & 0o555)
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        finally:
            for p, mode in modes.items():
                p.chmod(mode)
    if not can_mount_read_only():
        pytest.skip("running as root without `unshare -rm` (user namespaces): cannot make a folder read-only for root")
    wrapper = ["unshare", "-rm", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"', str(folder)]
    return subprocess.run([*wrapper, *cmd], capture_output=True, text=True, timeout=120)


@pytest.fixture
def read_only_index(notes, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "index.sqlite"
    assert run_cli("collection", "add", notes, "--name", "notes", "--no-embed", db=db).returncode == 0
    return folder, db


def test_search_get_and_status_work_on_a_read_only_index(read_only_index):
    folder, db = read_only_index
    r = run_read_only(folder, "search", "restic", "--json", db=db)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["path"] == "backup.md"
    r = run_read_only(folder, "get", "notes/backup.md:3:1", db=db)
    assert r.returncode == 0 and "3-2-1 rule" in r.stdout
    r = run_read_only(folder, "status", db=db)
    assert r.returncode == 0, r.stderr
    assert "Read-only:" in r.stdout and "3 notes" in r.stdout and "run: python3 pms.py sync" not in r.stdout


def test_writing_to_a_read_only_index_says_why_and_never_advises_deleting_it(read_only_index, notes):
    folder, db = read_only_index
    for args in (["sync"], ["collection", "remove", "notes"]):
        r = run_read_only(folder, *args, db=db)
        assert r.returncode == 1, r.stdout
        assert "cannot write to the index" in r.stderr and "read-only" in r.stderr
        assert "delete" not in r.stderr and "Traceback" not in r.stderr and r.stderr.count("\n") == 1
    assert run_cli("search", "restic", "--json", db=db).returncode == 0  # untouched, still writable outside


def test_a_new_index_under_a_read_only_folder_is_a_one_line_error(read_only_index):
    folder, _ = read_only_index
    for db in (folder / "missing" / "sub" / "index.sqlite", folder / "new.sqlite"):
        r = run_read_only(folder, "status", db=db)
        assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.startswith("pms: error:") and "--db" in r.stderr and "Traceback" not in r.stderr


def test_clipping_into_a_read_only_index_writes_no_note(read_only_index, notes, tmp_path):
    pytest.importorskip("trafilatura")
    folder, db = read_only_index
    page = tmp_path / "page.html"
    page.write_text("<html><head><title>Tea</title></head><body><article><h1>Tea</h1>"
                    + "<p>Green tea is steeped at 80 degrees for two minutes.</p>" * 5 + "</article></body></html>")
    before = sorted(p.name for p in notes.iterdir())
    r = run_read_only(folder, "clip", page, "-c", "notes", "--url", "https://example.org/tea", db=db)
    assert r.returncode == 1 and "cannot write to the index" in r.stderr, r.stderr
    assert sorted(p.name for p in notes.iterdir()) == before
