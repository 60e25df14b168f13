"""Nothing leaves the machine: a sync with embeddings and searches, watched by
strace for every connect() and sendto(), make no network call at all.

ONNX Runtime's official builds look up Microsoft's telemetry host
(mobile.events.data.microsoft.com) about 10 s after the first session, so the
watched process lives for 16 s after the model loads.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

WATCHED = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
import pms
from pathlib import Path
root = Path(sys.argv[2])
root.mkdir()
(root / "note.md").write_text("# Backups\n\nrestic copies files to a disk every night\n")
with pms.KnowledgeBase(Path(sys.argv[3])) as kb:
    kb.collections.create(root, name="v")
    report = kb.sync()
    assert report.embedded == 1, report.embed_error
    loaded = time.monotonic()
    while time.monotonic() - loaded < 16:
        assert kb.search("nightly backup", mode="hybrid")[0].path == "note.md"
        time.sleep(1)
print("done")
"""


def strace_usable() -> str | None:
    """Why strace cannot watch a process here, or None."""
    if not shutil.which("strace"):
        return "strace is not installed (scripts/test.sh installs it with apt when run as root)"
    probe = subprocess.run(["strace", "-f", "-qq", "-e", "trace=connect", "-o", os.devnull, sys.executable, "-c", "pass"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return f"strace cannot trace here (ptrace not permitted?): {probe.stderr.strip()[:200]}"
    return None


def network_calls(trace: str) -> list[str]:
    """connect()/sendto() lines that reach an IP address (local Unix sockets are fine)."""
    return [line for line in trace.splitlines()
            if re.search(r"\b(connect|sendto)\(", line) and re.search(r"AF_INET6?|events\.data|htons\(53\)", line)]


@pytest.mark.skipif(sys.platform != "linux", reason="strace is Linux-only")
def test_sync_and_searches_make_no_network_call(tmp_path, embedding_model_dir):
    why = strace_usable()
    if why:
        pytest.skip(why)
    log = tmp_path / "strace.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMS_", "ORT_"))}
    env.update(PMS_HOME=str(tmp_path / "home"), PMS_MODEL_DIR=str(embedding_model_dir))
    r = subprocess.run(["strace", "-f", "-qq", "-e", "trace=connect,sendto", "-o", str(log),
                        sys.executable, "-c", WATCHED, str(REPO), str(tmp_path / "notes"), str(tmp_path / "index.sqlite")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "done", r.stderr[-2000:]
    assert network_calls(log.read_text()) == []
