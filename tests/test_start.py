"""Start of a CLI command (issue 13, item 10), checked by what a run loads, not by a clock:
importing pms loads no module that only one feature needs, a keyword search builds
only its own command's parser and never reaches for the MCP client, and ``setup``
writes a ``pms`` command that runs pms.py from its cached bytecode. The timings are
benchmarks (bench/perf.py start, docs/benchmarks.md), not tests."""
from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO, STDLIB_PYTHON, run_cli

pytestmark = pytest.mark.stdlib  # each test runs pms.py with python -S

# Modules that one feature needs: sync hashes (hashlib), the CLI parses (argparse),
# clipping and the MCP client fetch (urllib.request, http.client), --json and the
# index's settings read JSON (json).
FEATURE_MODULES = {"argparse", "hashlib", "urllib.request", "http.client", "shutil", "subprocess", "tempfile", "json"}
# Modules no command needs, whose import alone cost a cold search milliseconds: pms
# writes its records by hand (dataclasses imports inspect, ast and dis), reads no
# type hints at run time (typing), escapes snippets itself (html, its entity table)
# and finds optional packages without importlib.util.
NEVER_AT_START = {"dataclasses", "inspect", "ast", "dis", "typing", "html", "importlib.util"}


def loaded_by(code: str, *args: str, folder: str = ".") -> dict:
    """Run ``code`` in a fresh interpreter without site-packages (so nothing is
    preloaded by .pth files), with ``folder`` (pms.py's, or src for the package) as
    its argv[1]; it prints a dict's repr last (not JSON: importing json there would
    hide whether pms imports it)."""
    r = subprocess.run([STDLIB_PYTHON, "-S", "-c", textwrap.dedent(code), str(REPO / folder), *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return ast.literal_eval(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("folder", [".", "src"], ids=["pms.py", "package"])
def test_importing_pms_loads_no_module_of_a_single_feature(folder):
    found = loaded_by("""
        import sys
        before = set(sys.modules)
        sys.path.insert(0, sys.argv[1])
        import pms
        print(repr({"new": sorted(set(sys.modules) - before)}))
        """, folder=folder)
    assert "pms" in found["new"]
    assert sorted((FEATURE_MODULES | NEVER_AT_START | {"datetime"}) & set(found["new"])) == []


def test_a_keyword_search_builds_one_parser_and_loads_neither_sync_nor_network_modules(vault):
    found = loaded_by("""
        import io, sys, contextlib
        sys.path.insert(0, sys.argv[1])
        import argparse, pms
        built = []
        init = argparse.ArgumentParser.__init__
        def counted(self, *args, **kwargs):
            built.append(kwargs.get("prog"))
            init(self, *args, **kwargs)
        argparse.ArgumentParser.__init__ = counted
        before = set(sys.modules)
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = pms.main(["--db", sys.argv[2], "search", "syncthing"])  # auto mode, as a user types it
        print(repr({"code": code, "out": out.getvalue(), "built": len(built), "new": sorted(set(sys.modules) - before)}))
        """, str(vault.index_path))
    assert found["code"] == 0 and "Syncing notes" in found["out"]
    assert found["built"] == 2  # the top-level parser and search's, not all sixteen commands'
    assert sorted(({"hashlib", "urllib.request", "http.client", "subprocess", "json"} | NEVER_AT_START) & set(found["new"])) == []


def test_help_still_lists_every_command(pms_main, tmp_path):
    for argv in (["--help"], ["--help", "search"], ["--db", str(tmp_path / "i.sqlite"), "--help", "sync"]):
        out = pms_main(*argv).stdout
        assert all(command in out for command in ("collection", "search", "status", "multi-get", "mcp", "gui")), argv


@pytest.mark.skipif(sys.platform == "win32", reason="the Windows command is a pms.cmd batch file")
def test_setup_writes_a_pms_command_that_runs_pms_py_from_cached_bytecode(vault, tmp_path):
    r = run_cli("setup", "--command-only", "--bin-dir", tmp_path / "bin")
    assert r.returncode == 0, r.stderr
    command = tmp_path / "bin" / "pms"
    assert f"Installed the pms command: {command}" in r.stdout and "add " in r.stdout  # not on this test's PATH
    assert os.access(command, os.X_OK)
    source = REPO / "pms.py"
    cached = importlib.util.cache_from_source(str(source))
    # PYTHONVERBOSE makes the import system say where each module's code came from.
    run = subprocess.run([str(command), "--db", str(vault.index_path), "search", "syncthing"], capture_output=True,
                         text=True, env={**os.environ, "PYTHONVERBOSE": "1"}, timeout=120)
    assert run.returncode == 0 and "Syncing notes" in run.stdout, run.stderr[-2000:]
    assert f"code object from '{cached}'" in run.stderr  # imported from the cache, not compiled from source
    empty = subprocess.run([str(command), "--db", str(tmp_path / "empty.sqlite"), "search", "x"], capture_output=True,
                           text=True, timeout=120)
    assert empty.returncode == 1 and "(add your notes: pms collection add" in empty.stderr  # messages name `pms`


def test_the_quick_exit_keeps_every_line_of_output_and_the_exit_code(vault, tmp_path):
    """main_and_exit skips Python's teardown (os._exit): what was printed must still arrive whole."""
    db = vault.index_path
    found = run_cli("search", "syncthing", "--json", "-n", "50", db=db)
    assert found.returncode == 0 and json.loads(found.stdout)[0]["title"] == "Syncing notes across devices"
    listed = run_cli("multi-get", "notes/*.md", db=db)
    assert listed.returncode == 0 and listed.stdout.count("Syncthing") >= 2
    missing = run_cli("get", "notes/nothing-here.md", db=db)
    assert missing.returncode == 1 and missing.stderr.startswith("pms: error: ")
    usage = run_cli("no-such-command", db=db)
    assert usage.returncode == 2 and "invalid choice" in usage.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="the Windows command is a pms.cmd batch file")
def test_the_pms_command_says_in_one_line_when_pms_py_is_gone(tmp_path):
    copy = tmp_path / "moved" / "pms.py"
    copy.parent.mkdir()
    copy.write_bytes((REPO / "pms.py").read_bytes())
    r = subprocess.run([sys.executable, str(copy), "setup", "--command-only", "--bin-dir", str(tmp_path / "bin")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    copy.unlink()
    gone = subprocess.run([str(tmp_path / "bin" / "pms"), "status"], capture_output=True, text=True, timeout=120)
    assert gone.returncode == 1 and gone.stderr == f"pms: {copy} is gone (moved or deleted?); where it is now, run its setup --command-only\n"


def test_the_api_records_behave_as_the_dataclasses_they_replaced():
    """pms writes its records by hand (pms.config.Record, for the start): construction by
    position and keyword, defaults made fresh, equality, repr, replace, as_dict,
    and NoteFilter frozen and hashable, as with @dataclasses.dataclass."""
    import pms

    by_position = pms.SyncProgress("index", 3, 10)
    by_keyword = pms.SyncProgress(phase="index", done=3, total=10, rate=0.0, eta=None, current="")
    assert by_position == by_keyword and by_position != pms.SyncProgress("index", 4, 10)
    assert repr(by_position) == "SyncProgress(phase='index', done=3, total=10, rate=0.0, eta=None, current='')"
    later = by_position.replace(eta=65.0)
    assert (later.eta, later.eta_text, by_position.eta) == (65.0, "1m05s", None)  # a copy: the original is unchanged
    with pytest.raises(TypeError):
        by_position.replace(no_such_field=1)
    with pytest.raises(TypeError):
        pms.SyncProgress("index", 3)  # total is required
    with pytest.raises(TypeError):
        hash(by_position)  # mutable records are not hashable, as dataclasses are not

    first, second = pms.SyncReport(), pms.SyncReport()
    first.errors.append(("a.md", "binary"))
    assert second.errors == [] and first.as_dict()["errors"] == [("a.md", "binary")]
    assert pms.SyncReport._fields[:4] == ("added", "updated", "deleted", "unchanged")

    note_filter = pms.NoteFilter.build(tags=["a", "-b"], after="2024-01-02")
    assert note_filter == pms.NoteFilter(("a",), ("b",), None, "2024-01-02", None, ())
    assert {note_filter: 1}[pms.NoteFilter.build(tags="a,-b".split(","), after="2024-01-02")] == 1
    with pytest.raises(AttributeError):
        note_filter.path = "x"

    fusion = pms.RankingSettings()
    assert fusion.replace(name_weight=3.0).name_weight == 3.0 and fusion.name_weight == 1.0
    ref = pms.NoteRef("notes", "a.md", "A", "#abc123")
    assert ref.to_dict() == {"collection": "notes", "path": "a.md", "title": "A", "docid": "#abc123",
                             "target": "", "line": 0, "resolved": True}
    assert json.dumps(ref.to_dict())  # what --json and MCP print

    class Nested(pms.config.Record):  # as_dict converts what dataclasses.asdict converts
        mode: pms.SearchMode
        refs: dict
    nested = Nested(pms.SearchMode("keyword", "why"), {"a": [ref]}).as_dict()

    class MoreNested(Nested):  # a subclass adds fields after its parent's, even once the parent was built
        extra: int = 0
    assert MoreNested(pms.SearchMode("keyword"), {}, 3).extra == 3 and MoreNested._fields == ("mode", "refs", "extra")
    assert nested == {"mode": ("keyword", "why", "", None), "refs": {"a": [ref.to_dict()]}}
    assert type(nested["mode"]) is pms.SearchMode


def test_importing_pms_leaves_garbage_collection_as_it_found_it():
    """pms pauses the collector while it loads (a cold start's time), and only that long."""
    for before in ("on", "off"):
        found = loaded_by("""
            import gc, sys
            sys.path.insert(0, sys.argv[1])
            if sys.argv[2] == "off":
                gc.disable()
            import pms
            print(repr({"enabled": gc.isenabled()}))
            """, before)
        assert found["enabled"] is (before == "on")


def test_setup_installs_the_pinned_versions_the_project_tests():
    """`setup` pins each package to the version requirements*.txt name (what the tests ran with)."""
    import pms

    pinned = {}
    for name in ("requirements.txt", "requirements-dev.txt"):
        for line in (REPO / name).read_text(encoding="utf-8").splitlines():
            spec = line.split("#")[0].strip()
            if "==" in spec:
                package, version = spec.split("==")
                pinned[package.lower()] = version
    for spec in pms.cli.SETUP_PACKAGES + pms.cli.SETUP_GUI_PACKAGES:
        package, version = spec.split("==")
        assert pinned[package.lower()] == version, spec


def _run_copy(script, *args, env=None):
    return subprocess.run([sys.executable, "-S", str(script), *args], capture_output=True, text=True, timeout=120,
                          env={**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, **(env or {})})


def test_pms_py_compiles_its_engine_once_and_again_only_when_its_text_changes(tmp_path):
    """python3 pms.py keeps its compiled engine in __pycache__ (scripts/amalgamate.py BOOTSTRAP); a cache
    made from other text, or damaged, is compiled anew; a traceback still names pms.py's own lines."""
    script = tmp_path / "a" / "pms.py"
    script.parent.mkdir()
    script.write_bytes((REPO / "pms.py").read_bytes())
    assert _run_copy(script, "--version").stdout.startswith("pms ")
    cache = tmp_path / "a" / "__pycache__" / f"pms.engine.{sys.implementation.cache_tag}.pyc"
    assert cache.is_file()
    moved = tmp_path / "b" / "pms.py"  # folder and cache moved together: the code names where it is now
    (tmp_path / "a").rename(moved.parent)
    lines = moved.read_text(encoding="utf-8").split("\n")
    found = subprocess.run([sys.executable, "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import pms; "
                            "print(pms.fuse.__code__.co_filename, pms.fuse.__code__.co_firstlineno)", str(moved.parent)],
                           capture_output=True, text=True, timeout=120)
    filename, line = found.stdout.split()
    assert filename == str(moved) and lines[int(line) - 1].startswith("def fuse(")
    moved.write_text(moved.read_text(encoding="utf-8").replace('VERSION = "', 'VERSION = "9.9.9-', 1), encoding="utf-8")
    assert _run_copy(moved, "--version").stdout.startswith("pms 9.9.9-")  # not the cached engine of the old text
    cache = moved.parent / "__pycache__" / cache.name
    cache.write_bytes(cache.read_bytes()[:200] + b"damaged")
    damaged = _run_copy(moved, "--version")
    assert damaged.returncode == 0 and damaged.stdout.startswith("pms 9.9.9-") and damaged.stderr == ""


def test_pms_py_writes_no_cache_when_python_is_told_not_to_but_setup_does(tmp_path):
    script = tmp_path / "pms.py"
    script.write_bytes((REPO / "pms.py").read_bytes())
    assert _run_copy(script, "--version", env={"PYTHONDONTWRITEBYTECODE": "1"}).returncode == 0
    assert not (tmp_path / "__pycache__").exists()
    r = _run_copy(script, "setup", "--command-only", "--bin-dir", str(tmp_path / "bin"), env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "__pycache__" / f"pms.engine.{sys.implementation.cache_tag}.pyc").is_file()
