"""No traceback anywhere (issue 37): every command line, however odd its arguments, and every
command on a damaged index ends with one line saying what is wrong and an exit code.

Two generators: argv fuzz (Hypothesis: commands, flags, and values that are surrogates of bytes
that are not UTF-8, names too long for the file system, odd numbers) run in this process by
``pms.main``; and damaged index files (truncated, overwritten pages, dropped tables and columns,
wrong versions) run by every command. The cases the fault pass found are listed first.
"""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pms

sys.path.insert(0, str(REPO / "bench"))
from faults import FOUND_ARGV, damaged_copies  # noqa: E402

ODD_NUMBERS = ["nan", "inf", "-inf", "1e400", "-1e999", "-5", "0", "-0", "9" * 40, str(2**63), "0x10", "1_000", "", " ",
               "٣", "1e-400", "3.5", "NaN", "+7"]


def one_line_end(code: int, err: str) -> bool:
    """An exit code and, when it failed, a last line on stderr that says so; no traceback, no bug."""
    lines = [line for line in err.splitlines() if line.strip()]
    if "Traceback" in err or "internal error" in err:
        return False
    if code == 0:
        return True
    return bool(lines) and (lines[-1].startswith("pms: ") or ": error: " in lines[-1])


def run_main(*argv: str, db: Path | None = None) -> tuple[int, str]:
    """``pms.main(argv)`` in this process with standard streams as a real process has them (UTF-8;
    stdout strict, stderr backslashreplace): (exit code, what it printed on stderr)."""
    import contextlib
    import io

    out, err = io.BytesIO(), io.BytesIO()
    stdout = io.TextIOWrapper(out, encoding="utf-8", errors="strict", write_through=True)
    stderr = io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace", write_through=True)
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            code = pms.main([*(["--db", str(db)] if db else []), *argv])
        except SystemExit as exc:  # argparse: a usage error, --help
            code = exc.code if isinstance(exc.code, int) else 1
    return code, err.getvalue().decode("utf-8")


@pytest.fixture
def env_home(tmp_path, monkeypatch):
    """A small keyword index; clips, the network and the model out of the way."""
    write(tmp_path / "v" / "a.md", "# A\n\nrestic copies the laptop every night #backup\n")
    write(tmp_path / "v" / "b.md", "# B\n\n[[a]] links to a\n")
    db = tmp_path / "index.sqlite"
    with pms.KnowledgeBase(db, embeddings=False) as kb:
        kb.collections.create(tmp_path / "v", name="v")
        kb.sync()
    return tmp_path, db


FOUND = FOUND_ARGV  # the cases the fault pass on 0.3.1 found (issue 37, items 12 and 13)


@pytest.mark.parametrize("argv", FOUND, ids=lambda argv: " ".join(argv)[:60])
def test_what_the_fault_pass_found_is_one_line(argv, env_home):
    tmp, db = env_home
    (tmp / "deep.json").write_text("[" * 5000)
    (tmp / "inf.json").write_text('{"queries": [{"query": "restic", "relevant_paths": ["a.md"], "expected_in_top_k": -1e999}]}')
    argv = [a.replace("{tmp}", str(tmp)) for a in argv]
    code, err = run_main(*argv, db=db if "--db" not in argv else None)
    assert one_line_end(code, err), (code, err[-500:])
    if argv[0] == "multi-get":
        assert err.count("\n") <= 12, "a thousand unknown names are counted, not listed"


@pytest.mark.parametrize("variable,value", [("PMS_PDF_TIMEOUT", "inf"), ("PMS_MAX_FILE_MB", "-1"), ("PMS_PDF_MEMORY_MB", "nan"),
                                            ("PMS_MCP_MAX_SESSIONS", "1e999"), ("PMS_MAX_FILE_MB", "abc")])
def test_odd_settings_fall_back_to_the_default(variable, value, monkeypatch):
    default = pms.config.env_number(variable, 7.0)
    monkeypatch.setenv(variable, value)
    assert pms.config.env_number(variable, 7.0) == default == 7.0
    assert pms.config.max_file_bytes() == 20 * 1024 * 1024


COMMANDS = [["search"], ["get"], ["multi-get"], ["status"], ["sync"], ["sync", "--dry-run"], ["tags"], ["links"],
            ["backlinks"], ["related"], ["collection", "list"], ["collection", "show"], ["collection", "describe"],
            ["collection", "rename"], ["collection", "remove"], ["collection", "add"], ["collection", "exclude"], ["bench"]]
FLAGS = ["-n", "-c", "--mode", "--tag", "--path", "--after", "--before", "--where", "--min-score", "--max-bytes", "--json",
         "--name", "--glob", "--line-numbers", "--passages", "--chunks", "--also", "--files", "-k"]
odd_text = st.one_of(
    st.sampled_from(ODD_NUMBERS),
    st.binary(min_size=1, max_size=12).map(os.fsdecode),  # bytes as a POSIX command line gives them
    st.text(min_size=1, max_size=20),
    st.integers(min_value=250, max_value=5000).map(lambda n: "x" * n),
    st.sampled_from(["v", "v/a.md", "a", "#", "#abc", "[z-a]", "{a,b", "*", "../..", "~nosuchuser/x", "-", "--", "=",
                     "a=b", "2024-13-45", "\x00", "\n", "v/a.md:0:0", "v/a.md:99999999999999999999"]),
)
argv_strategy = st.tuples(
    st.sampled_from(COMMANDS),
    st.lists(st.one_of(st.sampled_from(FLAGS), odd_text), max_size=6),
).map(lambda parts: [*parts[0], *parts[1]])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
          derandomize=True)
@given(argv=argv_strategy)
def test_any_command_line_ends_in_one_line_and_an_exit_code(argv, env_home):
    argv = [a.replace("\x00", " ") for a in argv]  # a command line cannot hold NUL
    code, err = run_main(*argv, db=env_home[1])
    assert one_line_end(code, err), (argv, code, err[-600:])


# -- damaged index files --------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_every_command_on_a_damaged_index_ends_in_one_line(env_home, tmp_path):
    _, clean = env_home
    sqlite3.connect(clean).execute("PRAGMA wal_checkpoint(TRUNCATE)").close()
    cases = damaged_copies(clean, tmp_path, 36)
    commands = [["status"], ["search", "restic"], ["search", "restic", "--mode", "keyword", "--json"], ["get", "v/a.md"],
                ["sync"], ["collection", "list"], ["tags"], ["related", "v/a.md"], ["multi-get", "v/*.md"]]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PMS_")} | {"PMS_HOME": str(tmp_path / "home")}
    failures = []
    for kind, path in cases:
        for command in commands:
            r = subprocess.run([sys.executable, str(REPO / "pms.py"), "--db", str(path), *command], capture_output=True,
                               text=True, env=env, timeout=300)
            if not one_line_end(r.returncode, r.stderr):
                failures.append((kind, command, r.returncode, r.stderr[-400:]))
    assert not failures, failures[:5]


def test_a_list_of_a_thousand_names_and_more_is_refused_at_once(env_home):
    """MCP multi_get with a 200 KB list spent 30 s of CPU looking each name up loosely."""
    from pms.mcp_server import MCPService

    with pms.KnowledgeBase(env_home[1], embeddings=False) as kb:
        service = MCPService(kb)
        pattern = ",".join(f"nope{i}" for i in range(30_000))
        assert len(pattern) > 200_000
        with pytest.raises(pms.PMSError, match="names 30,000 notes: at most 1,000 at a time"):
            service.call("multi_get", {"pattern": pattern})
        answer = service.call("multi_get", {"pattern": ",".join(["v/a.md", *(f"nope{i}" for i in range(999))])})
        assert [d["path"] for d in answer["documents"]] == ["v/a.md"] and len(answer["skipped"]) == 999


def test_a_hint_the_message_already_gives_is_not_said_twice():
    offline = pms.PMSError("no network (make a local copy: export PMS_MODEL_DIR=$(python3 scripts/fetch_test_model.py))",
                           pms.Hint(setting="PMS_MODEL_DIR"))
    assert str(offline).count("PMS_MODEL_DIR") == 1
    assert pms.config.reason_text(offline.message, offline.hint) == offline.message
    missing = pms.PMSError("model folder /gone does not exist", pms.Hint(setting="PMS_MODEL_DIR"))
    assert str(missing) == "model folder /gone does not exist (set PMS_MODEL_DIR)"
    assert pms.config.reason_text(missing.message, missing.hint) == "model folder /gone does not exist; set PMS_MODEL_DIR"
    assert str(pms.PMSError("not downloaded yet (a sync downloads it)", pms.Hint(command="sync"))).endswith(" sync)")  # commands: always
