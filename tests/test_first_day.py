"""The first day on a real vault (issue 36): the `pms` command that setup writes works whatever
the system's Python holds, the test command is repeatable and tidy, and the small things a
new user meets on the first day behave."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import REPO, mcp_http_client, mcp_http_server, run_cli, write

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
        async with mcp_http_client(url) as client:
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


STUB = """#!/bin/sh
echo "$(basename "$0") $*" >> {log}
{body}
"""


def fake_checkout(tmp: Path, log: Path, with_model: bool = True) -> Path:
    """A checkout holding the real scripts/test.sh, with stand-ins that record what it runs: .venv's
    python (pip, the scripts, pytest) and, first on PATH, apt-get, dpkg (nothing installed) and id (root)."""
    root = tmp / "checkout"
    (root / "scripts").mkdir(parents=True)
    for script in ("test.sh", "fetch_test_model.py"):
        (root / "scripts" / script).write_bytes((REPO / "scripts" / script).read_bytes())
    for name in ("requirements.txt", "requirements-dev.txt"):
        (root / name).write_bytes((REPO / name).read_bytes())
    stubs = {root / ".venv" / "bin" / "python": "exit 0", tmp / "bin" / "apt-get": "exit 0",
             tmp / "bin" / "dpkg": "exit 1", tmp / "bin" / "id": "echo 0"}
    for path, body in stubs.items():
        write(path, STUB.format(log=log, body=body)).chmod(0o755)
    if with_model:  # both the offline MiniLM and its float copy, made by this very script
        for folder in ("minilm", "minilm-float"):
            write(root / ".cache" / folder / "model.onnx", b"onnx")
            write(root / ".cache" / folder / "pms-model.txt", "sentence-transformers/all-MiniLM-L6-v2\n")
        stamp = hashlib.sha256((root / "scripts" / "fetch_test_model.py").read_bytes()).hexdigest()
        write(root / ".cache" / "minilm.sha", stamp + "\n")
    return root


def run_test_command(root: Path, tmp: Path, log: Path, *args: str, env: dict | None = None) -> list[str]:
    log.write_text("")
    done = subprocess.run(["bash", str(root / "scripts" / "test.sh"), *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{tmp / 'bin'}:{os.environ['PATH']}", "HOME": str(tmp), **(env or {})})
    assert done.returncode == 0, done.stderr
    return log.read_text().splitlines()


@pytest.mark.skipif(sys.platform == "win32", reason="scripts/test.sh is a bash script")
def test_the_test_command_installs_system_packages_only_when_asked_and_runs_pip_once(tmp_path):
    log = tmp_path / "ran.log"
    root = fake_checkout(tmp_path, log)
    first = run_test_command(root, tmp_path, log)
    assert not [line for line in first if line.startswith(("apt-get", "dpkg"))]  # root, libraries missing: not asked
    pip = [line for line in first if " -m pip " in line]
    assert pip == ["python -m pip install -q --disable-pip-version-check -r requirements-dev.txt"]  # no pip upgrade
    assert not [line for line in first if "fetch_test_model" in line]  # the model is there
    assert first[-1].startswith("python -m pytest -q -p no:cacheprovider -n 2")  # no Python 3.10/3.13 here: said, not failed
    again = run_test_command(root, tmp_path, log, "-k", "keyword")
    assert not [line for line in again if " -m pip " in line]  # nothing changed: offline
    assert again[-1].endswith("-n 2 -k keyword")
    asked = run_test_command(root, tmp_path, log, "--system-packages", "-k", "keyword")
    assert any(line.startswith("apt-get install") and "xvfb" in line for line in asked) and asked[-1].endswith("-n 2 -k keyword")
    by_variable = run_test_command(root, tmp_path, log, env={"PMS_TEST_SYSTEM_PACKAGES": "1"})
    assert any(line.startswith("apt-get install") for line in by_variable)


def test_the_test_command_assembles_the_models_when_missing_or_when_their_script_changed(tmp_path):
    log = tmp_path / "ran.log"
    root = fake_checkout(tmp_path, log, with_model=False)
    ran = run_test_command(root, tmp_path, log)
    assert any("scripts/fetch_test_model.py .cache/minilm" in line for line in ran)
    assert any("scripts/fetch_test_model.py --float-compute .cache/minilm-float" in line for line in ran)
    assert any("scripts/make_static_model.py .cache/minilm-float .cache/minilm-static" in line for line in ran)
    root = fake_checkout(tmp_path / "again", log)
    assert not [line for line in run_test_command(root, tmp_path, log) if "fetch_test_model" in line]  # made by this script
    with (root / "scripts" / "fetch_test_model.py").open("a") as script:
        script.write("# changed\n")
    assert len([line for line in run_test_command(root, tmp_path, log) if "fetch_test_model" in line]) == 2


@pytest.mark.parametrize("script", ["fetch_test_model.py", "make_static_model.py"])
def test_the_model_scripts_print_their_usage_for_help_and_make_no_folder(script, tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "scripts" / script), "--help"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith(f"usage: {script}"), done.stderr
    assert list(tmp_path.iterdir()) == []
    wrong = subprocess.run([sys.executable, str(REPO / "scripts" / script), "--dir"], capture_output=True, text=True,
                           cwd=tmp_path, timeout=60)
    assert wrong.returncode == 2 and "unrecognized arguments: --dir" in wrong.stderr and list(tmp_path.iterdir()) == []


# -- 11: the small things ------------------------------------------------------------------------
def test_a_collection_names_the_pdfs_it_holds_where_it_is_listed(tmp_path):
    folder = write(tmp_path / "papers" / "notes.md", "# Notes\n\nabout the papers\n").parent
    db = tmp_path / "i.sqlite"
    added = run_cli("collection", "add", folder, "--name", "papers", "--no-embed", db=db)
    assert added.returncode == 0 and "(**/*.md, **/*.pdf)" in added.stdout, added.stdout
    assert "**/*.md, **/*.pdf" in run_cli("collection", "list", db=db).stdout
    only_md = run_cli("collection", "add", write(tmp_path / "other" / "a.txt", "x").parent, "--name", "texts",
                      "--glob", "**/*.txt", "--no-embed", db=db)
    assert "(**/*.txt, **/*.pdf)" in only_md.stdout
    everything = run_cli("collection", "add", write(tmp_path / "all" / "a.md", "# A\n").parent, "--name", "all",
                         "--glob", "**/*", "--no-embed", db=db)
    assert "(**/*)" in everything.stdout  # a glob without an extension names the PDFs already


def test_removing_a_collection_gives_its_space_back(tmp_path):
    big = tmp_path / "big"
    for i in range(400):
        write(big / f"n{i:03d}.md", f"# Note {i}\n\n" + " ".join(f"word{i}x{j}" for j in range(300)) + "\n")
    small = write(tmp_path / "small" / "a.md", "# Small\n\nthe one note that stays\n").parent
    db = tmp_path / "i.sqlite"
    for folder, name in ((big, "big"), (small, "small")):
        assert run_cli("collection", "add", folder, "--name", name, "--no-embed", db=db).returncode == 0
    before = json.loads(run_cli("status", "--json", db=db).stdout)["index_bytes"]
    assert run_cli("collection", "remove", "big", db=db).returncode == 0
    after = json.loads(run_cli("status", "--json", db=db).stdout)["index_bytes"]
    assert after < before * 0.4, (before, after)
    found = run_cli("search", "stays", "--json", db=db)
    assert json.loads(found.stdout)[0]["path"] == "a.md"


def test_setup_says_how_to_start_the_app_it_installed():
    import pms

    assert pms.cli.pms_command("gui") in pms.cli.setup_done_line(gui=True)
    assert "gui" not in pms.cli.setup_done_line(gui=False)
