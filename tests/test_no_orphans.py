"""No process outlives PMS (issue 37): after kill -9 of a command, its workers (parse workers,
multiprocessing's resource tracker, the PDF reader, the clip reader) end too, as they watch their
parent; a killed clip leaves no temp file and no folder."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, write

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")]


def children(pid: int) -> dict[int, str]:
    """The live processes whose parent is ``pid``: their command lines."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid and fields[0] != "Z":
                    found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, IndexError, ValueError):
                continue
    return found


def alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def wait_for(condition, guard: float = 120.0, what: str = "") -> None:
    """Poll ``condition`` until it holds; fail after ``guard`` seconds (a hang guard, not a speed bound)."""
    deadline = time.monotonic() + guard
    while not condition():
        assert time.monotonic() < deadline, f"still waiting after {guard:g} s: {what}"
        time.sleep(0.1)


def kill_when_workers_run(args: list[str], env: dict, workers: int) -> dict[int, str]:
    """Start ``pms.py args``; once it has ``workers`` worker processes, kill -9 it; the workers it had."""
    proc = subprocess.Popen([sys.executable, str(REPO / "pms.py"), *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: len(children(proc.pid)) >= workers or proc.poll() is not None, what="the workers to start")
        started = children(proc.pid)
        assert len(started) >= workers, f"the command ended before its workers started: {started}"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return started


def test_parse_workers_and_the_resource_tracker_end_with_a_killed_sync(tmp_path):
    for i in range(3000):
        write(tmp_path / "vault" / f"d{i // 100}" / f"n{i}.md", f"# Note {i}\n\n" + "words about backups and rust " * 40)
    env = {**os.environ, "PMS_HOME": str(tmp_path / "home")}
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: a sync parses in its own process")
    started = kill_when_workers_run(["--db", str(tmp_path / "i.sqlite"), "collection", "add", str(tmp_path / "vault"),
                                     "--no-embed"], env, workers=3)
    assert any("resource_tracker" in cmd for cmd in started.values()), started
    wait_for(lambda: not any(alive(pid) for pid in started), what=f"workers still alive: {started}")


def test_a_worker_in_the_middle_of_a_call_ends_with_its_killed_parent(tmp_path):
    """The mechanism itself, on a call that would run for an hour (a file that never ends): the call
    runs `sleep 3600` in the worker, so the test sees when it has begun."""
    script = ("import subprocess, sys; sys.path.insert(0, sys.argv[1]); import pms; "
              "pms.config.Worker('pms-test-worker').call(subprocess.call, ['sleep', '3600'], timeout=7200)")
    proc = subprocess.Popen([sys.executable, "-c", script, str(REPO / "src")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sleeping: list[tuple[int, int]] = []  # (worker, its sleep)
    try:
        def in_the_call() -> bool:
            sleeping[:] = [(worker, pid) for worker in children(proc.pid) for pid in children(worker)]
            return bool(sleeping) or proc.poll() is not None
        wait_for(in_the_call, what="the worker to begin its call")
        [(worker, _sleep)] = sleeping
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    try:
        wait_for(lambda: not alive(worker), guard=60, what="the worker still alive")
    finally:
        for _worker, pid in sleeping:
            os.kill(pid, signal.SIGKILL)


def test_the_pdf_reader_ends_with_a_killed_sync(tmp_path):
    pytest.importorskip("pypdfium2")
    fpdf = pytest.importorskip("fpdf")
    pdf = fpdf.FPDF()
    pdf.set_font("Helvetica", size=7)
    for _ in range(400):
        pdf.add_page()
        pdf.multi_cell(0, 3, "harbours and lighthouses guide ships home " * 200)
    (tmp_path / "vault").mkdir()
    pdf.output(str(tmp_path / "vault" / "long.pdf"))
    env = {**os.environ, "PMS_HOME": str(tmp_path / "home")}
    started = kill_when_workers_run(["--db", str(tmp_path / "i.sqlite"), "collection", "add", str(tmp_path / "vault"),
                                     "--no-embed"], env, workers=1)
    wait_for(lambda: not any(alive(pid) for pid in started), what=f"the PDF reader still alive: {started}")


def test_a_killed_clip_leaves_no_process_temp_file_or_folder(tmp_path):
    pytest.importorskip("trafilatura")
    page = tmp_path / "page.html"  # within the budgets, and minutes of work for the extractor
    page.write_text("<html><body><article>" + "<div><p>word</p></div>" * 90_000 + "</article></body></html>")
    (tmp_path / "clips").mkdir()
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "PMS_HOME": str(tmp_path / "home"), "TMPDIR": str(temp)}
    db = str(tmp_path / "i.sqlite")
    assert subprocess.run([sys.executable, str(REPO / "pms.py"), "--db", db, "collection", "add", str(tmp_path / "clips"),
                           "--name", "clips", "--no-embed"], env=env, capture_output=True).returncode == 0
    started = kill_when_workers_run(["--db", db, "clip", str(page), "--url", "https://example.org/a", "-c", "clips",
                                     "--subfolder", "new/deep", "--timeout", "600", "--no-embed"], env, workers=1)
    wait_for(lambda: not any(alive(pid) for pid in started), what=f"the clip reader still alive: {started}")
    assert list((tmp_path / "clips").iterdir()) == [] and list(temp.iterdir()) == []
