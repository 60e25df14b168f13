"""The first day on a real vault (issue 36): the `pms` command that setup writes works whatever
the system's Python holds, the test command is repeatable and tidy, and the small things a
new user meets on the first day behave."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import REPO, mcp_http_server, run_cli, write

WHEELS = REPO / ".cache" / "wheels"
OLD_TYPING_EXTENSIONS = "typing_extensions==4.15.0"  # lacks `sentinel`, which anyio (under mcp) imports


def old_typing_extensions_wheel() -> Path:
    """typing_extensions 4.15's wheel, downloaded once into .cache/wheels (skips when that cannot be)."""
    found = sorted(WHEELS.glob("typing_extensions-4.15.0-*.whl"))
    if not found:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                               "--disable-pip-version-check", "-d", str(WHEELS), OLD_TYPING_EXTENSIONS],
                              capture_output=True, text=True, timeout=300)
        found = sorted(WHEELS.glob("typing_extensions-4.15.0-*.whl"))
        if not found:
            pytest.skip(f"cannot download {OLD_TYPING_EXTENSIONS} (offline?): {done.stderr.strip()[-200:]}")
    return found[0]


# -- 1: the private environment comes before the system's packages ---------------------------------
@pytest.mark.slow
def test_the_pms_command_serves_mcp_over_http_when_the_system_site_holds_an_older_typing_extensions(tmp_path):
    pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install -r requirements-dev.txt)")
    pytest.importorskip("httpx2")
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    wheel = old_typing_extensions_wheel()
    tag = f"python{sys.version_info.major}.{sys.version_info.minor}"
    # The system's Python: its site-packages holds typing_extensions 4.15 (as Debian's python3-typing-extensions does).
    system = tmp_path / "system"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(system)], check=True)
    system_site = system / "lib" / tag / "site-packages"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                    "--target", str(system_site), str(wheel)], check=True, capture_output=True)
    # The private environment `setup` fills: this test run's packages (typing_extensions 4.16, mcp, ...).
    home = tmp_path / "home"
    private = home / "venv" / "lib" / tag
    private.mkdir(parents=True)
    (private / "site-packages").symlink_to(sysconfig.get_paths()["purelib"])
    (home / "venv" / "pms-python-version.txt").write_text(tag)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMS_", "PYTHON"))} | {"PMS_HOME": str(home)}
    done = subprocess.run([str(system / "bin" / "python"), str(REPO / "pms.py"), "setup", "--command-only",
                           "--bin-dir", str(tmp_path / "bin")], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    command = tmp_path / "bin" / "pms"
    assert command.read_text().startswith(f"#!{system / 'bin' / 'python'}\n")

    notes = write(tmp_path / "notes" / "keys.md", "# Rotating keys\n\nRotate the ssh keys every spring.\n").parent
    db = tmp_path / "index.sqlite"
    added = subprocess.run([str(command), "--db", str(db), "collection", "add", str(notes), "--name", "notes", "--no-embed"],
                           capture_output=True, text=True, env=env, timeout=300)
    assert added.returncode == 0, added.stderr

    async def search(url: str) -> dict:
        async with Client(streamable_http_client(url, http_client=httpx2.AsyncClient(timeout=120))) as client:
            found = await client.call_tool("search", {"query": "rotate ssh keys", "mode": "keyword"})
            assert not found.is_error, found.content
            return found.structured_content

    with mcp_http_server(db, env, "--no-watch", command=[str(command)]) as (url, _proc, _log):
        assert anyio.run(search, url)["hits"][0]["path"] == "notes/keys.md"


# -- 6: the test command is repeatable offline and leaves nothing running ----------------------------
LEAKY_TEST = '''
import subprocess, sys

def test_leaves_a_process():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
'''
# The project's conftest (its session mark and end-of-run check) under another module name.
LOAD_PROJECT_CONFTEST = f'''
import importlib.util, sys
spec = importlib.util.spec_from_file_location("project_conftest", {str(REPO / "tests" / "conftest.py")!r})
project = sys.modules["project_conftest"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(project)
pytest_configure, pytest_sessionfinish = project.pytest_configure, project.pytest_sessionfinish
'''


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="the process check reads /proc (Linux)")
def test_the_end_of_run_check_fails_a_run_that_leaves_a_process_behind(tmp_path):
    write(tmp_path / "conftest.py", LOAD_PROJECT_CONFTEST)
    write(tmp_path / "test_leaky.py", LEAKY_TEST)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PMS_TEST_SESSION")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    leftover = [line.split(":")[0].strip() for line in done.stdout.splitlines() if "time.sleep(60)" in line]
    for pid in leftover:
        os.kill(int(pid), 9)
    assert "1 passed" in done.stdout and done.returncode == 1, done.stdout + done.stderr
    assert "processes left running by the tests" in done.stdout and len(leftover) == 1, done.stdout
