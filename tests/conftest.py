"""Shared fixtures: real SQLite files in tmp folders, real notes, the real model."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
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


# -- shared by several test modules --------------------------------------------------------------
def stamp(path, day: str) -> None:
    t = time.mktime(time.strptime(day + " 12:00", "%Y-%m-%d %H:%M"))
    os.utime(path, (t, t))


def make_vault(root):
    """A vault with tags in every form, dates, fields, links and aliases, plus
    many untagged notes that match "deployment" better than the tagged ones do."""
    write(root / "projects" / "alpha.md", "---\ntags: [work, project/alpha]\ndate: 2024-03-05\nstatus: active\nowner: ana\n---\n"
          "# Alpha\n\nThe deployment pipeline of alpha. See [[beta]], [[Gamma Notes|the spec]] and "
          "[the API](../ref/spec.md#api).\n\n```\n#notatag [[not a link]]\n```\n")
    write(root / "projects" / "beta.md", "---\ntags: work, draft\ncreated: 2024-01-20\nstatus: draft\n---\n"
          "# Beta\n\nA deployment checklist for beta #infra/ci. Back to [[alpha#Alpha]] and [[alpha^block1]].\n")
    stamp(write(root / "journal" / "2024-02-10.md", "# Retro\n\nA deployment retro. #journal #work/meetings\n"
                "Not tags: `#code`, https://example.com/#anchor, [top](#retro), ## heading-ish\n"), "2024-02-10")
    write(root / "ref" / "spec.md", "---\naliases: [Gamma Notes]\ntag: reference\nupdated: 2023-12-01\n---\n"
          "# API spec\n\nThe deployment API. It used to live in [[old-name]]. ![[diagram.png]] [web](https://example.com/x.md)\n")
    write(root / "archive" / "old.md", "---\ntags: [archive, work]\ndate: 2022-05-01\n---\n# Old\n\nDeployment notes from the old days.\n")
    for i in range(1, 13):
        tags = "[bulk, even]" if i % 2 == 0 else "[bulk]"
        write(root / "bulk" / f"log{i:02d}.md", f"---\ntags: {tags}\ndate: 2024-04-{i:02d}\nlevel: {i % 3}\n---\n"
              f"# Log {i}\n\nShip log {i}: the rollout of service number {i} went fine, a quiet deployment.\n")
    for i in range(60):  # strong matches without tags: a post-filter on the top results would find no tagged note
        write(root / "noise" / f"n{i:02d}.md", f"# Deployment {i}\n\nDeployment deployment: how deployment {i} of the "
              f"deployment system rolls out deployments.\n")
    return root


# The desktop app's tests (Qt is imported by the fixture, so this file stays importable without it).
WAIT_MS = 15000


@pytest.fixture
def open_window(qtbot, tmp_path):
    """A shown MainWindow over ``kb``, with settings in a temporary file."""
    settings_file = tmp_path / "settings.ini"

    from PySide6.QtCore import QSettings

    from gui.window import MainWindow

    def open_(kb, background: bool = False):
        window = MainWindow(kb, QSettings(str(settings_file), QSettings.IniFormat))
        qtbot.addWidget(window)
        window.show()
        qtbot.waitExposed(window)
        if background:
            with qtbot.waitSignal(window.sync_done, timeout=WAIT_MS):
                window.start_background_work()
        return window

    return open_


def type_query(qtbot, window, text: str) -> None:
    """Type ``text`` key by key and wait for its own results (not a prefix's)."""
    window.search_box.clear()
    with qtbot.waitSignal(window.results_shown, timeout=WAIT_MS, check_params_cb=lambda query: query == text):
        qtbot.keyClicks(window.search_box, text)


def wait_for_preview(qtbot, window) -> None:
    """Wait until the preview shows the selected result (it renders once typing pauses)."""
    def shown() -> bool:
        hit, preview = window.current_hit(), window.preview
        return hit is not None and preview.ready() and str(preview.abspath) == hit.abspath
    qtbot.waitUntil(shown, timeout=WAIT_MS)


def preview_of_a_note(qtbot, kb, open_window, folder: Path, text: str, query: str, size: tuple[int, int]):
    """A window over ``kb`` with one note (``folder``/long.md, indexed as collection "long")
    found by ``query`` and shown in the preview."""
    write(folder / "long.md", text)
    kb.collections.create(folder, name="long")
    kb.sync()
    window = open_window(kb)
    window.resize(*size)
    type_query(qtbot, window, query)
    wait_for_preview(qtbot, window)
    return window
