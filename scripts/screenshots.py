"""Render the desktop app's main states as PNGs into docs/screenshots/ (and gui/icon.png).

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots]

Starts an Xvfb display (installing xvfb and Qt's xcb libraries with apt-get
when run as root and they are missing), opens the real window on it over the
whole Rust book (../shared/data/corpora/rust-book.tar.gz, with its redirect
stubs, old editions and print copy) plus a copy of sample-notes/ and
captures: the welcome panel, a search (light and dark), a deep passage of a
chapter in the preview, Related, a small window, a filter listing, the start
page, a table, a sync in progress, the clip dialog with its URL and the
freshly clipped page (served from ../shared/data/html by a local http.server;
skipped without it). The PNGs are quantized to 256 colours (Pillow, when
installed) to stay small. Embedding
the book takes minutes: ``--book-index`` starts from an index of it already
embedded (bench/suite.py's cache: .cache/bench/rustbook/*.sqlite), copied.
Everything is written to a temporary folder except the PNGs.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"
APT_PACKAGES = ["xvfb", "libxcb-icccm4", "libxcb-keysyms1", "libxcb-xinerama0", "libxcb-cursor0", "libxcb-image0",
                "libxcb-render-util0", "libxcb-randr0", "libxcb-shape0", "libxkbcommon-x11-0", "libegl1", "libgl1",
                "fonts-dejavu-core", "fonts-noto-color-emoji"]
SIZE = (1180, 760)


def ensure_xvfb() -> None:
    if shutil.which("Xvfb"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        sys.exit("screenshots: Xvfb is missing (apt-get install " + " ".join(APT_PACKAGES) + ")")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", *APT_PACKAGES], check=True, env=env)


def start_xvfb() -> tuple[subprocess.Popen, str]:
    for number in range(99, 120):
        if not Path(f"/tmp/.X11-unix/X{number}").exists() and not Path(f"/tmp/.X{number}-lock").exists():
            break
    display = f":{number}"
    server = subprocess.Popen(["Xvfb", display, "-screen", "0", f"{SIZE[0] + 100}x{SIZE[1] + 100}x24", "-nolisten", "tcp"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(50):
        if Path(f"/tmp/.X11-unix/X{number}").exists():
            return server, display
        time.sleep(0.1)
    server.kill()
    sys.exit("screenshots: Xvfb did not start")


# -- inside the display ----------------------------------------------------------------------

def wait_for(signal, app, timeout: float = 60.0):
    """Run the event loop until ``signal`` fires; return its arguments."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop, got = QEventLoop(), []

    def fired(*args):
        got.append(args)
        loop.quit()

    signal.connect(fired)
    QTimer.singleShot(int(timeout * 1000), loop.quit)
    loop.exec()
    signal.disconnect(fired)
    if not got:
        raise SystemExit(f"screenshots: timed out waiting for {signal}")
    return got[0]


def wait_until(predicate, app, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise SystemExit(f"screenshots: timed out waiting for {predicate.__doc__ or predicate}")
        app.processEvents()
        time.sleep(0.02)


def settle(app, seconds: float = 0.4) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.02)


def capture(window, app, path: Path, with_dialogs: bool = False) -> None:
    """The window as the X server shows it (``with_dialogs``: the screen over it, so a
    dialog on top shows too), saved small."""
    settle(app)
    if with_dialogs:
        at = window.frameGeometry()
        picture = window.screen().grabWindow(0, at.x(), at.y(), at.width(), at.height())
    else:
        picture = window.screen().grabWindow(window.winId())  # what the X server shows, not a re-render
    if picture.isNull() or picture.width() < 100:
        picture = window.grab()
    picture.save(str(path))
    shrink(path)
    kb = path.stat().st_size // 1024
    print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path} ({picture.width()}x{picture.height()}, {kb} KB)")


def shrink(path: Path) -> None:
    """A palette of 256 colours, no dithering (flat UI colours stay crisp): a third of the bytes."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(path) as image:
        small = image.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    small.save(path, optimize=True)


def while_modal(app, action, seconds: float = 10.0) -> None:
    """Run ``action(dialog)`` once a modal dialog is up within ``seconds`` (the call
    that opens it blocks until it closes, so this waits on timers)."""
    from PySide6.QtCore import QTimer

    def poll(left: int) -> None:
        dialog = app.activeModalWidget()
        if dialog is not None and dialog.isVisible():
            QTimer.singleShot(300, lambda: action(dialog))
        elif left:
            QTimer.singleShot(100, lambda: poll(left - 1))

    poll(int(seconds * 10))


def type_query(window, app, text: str) -> None:
    from PySide6.QtTest import QTest

    window.search_box.clear()
    QTest.keyClicks(window.search_box, text, delay=30)
    window.search.search_now()
    wait_for(window.results_shown, app)


def dark_palette():
    """What a dark desktop theme hands Qt (the window itself only reads palette roles)."""
    from PySide6.QtGui import QColor, QPalette

    palette = QPalette()
    for role, colour in ((QPalette.Window, "#202124"), (QPalette.WindowText, "#e8eaed"), (QPalette.Base, "#17181a"),
                         (QPalette.AlternateBase, "#26282b"), (QPalette.Text, "#e8eaed"), (QPalette.Button, "#2b2d30"),
                         (QPalette.ButtonText, "#e8eaed"), (QPalette.Highlight, "#3d6fd9"), (QPalette.HighlightedText, "#ffffff"),
                         (QPalette.PlaceholderText, "#9aa0a6"), (QPalette.Link, "#8ab4f8"), (QPalette.Mid, "#5f6368"),
                         (QPalette.ToolTipBase, "#2b2d30"), (QPalette.ToolTipText, "#e8eaed")):
        palette.setColor(role, QColor(colour))
    return palette


def serve(folder: Path) -> str:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def bulk_notes(work: Path) -> Path | None:
    """A folder big enough for a sync to be caught in progress: 1,500 tldr pages."""
    import tarfile

    archive = SHARED_DATA / "corpora" / "tldr.tar.gz"
    if not archive.exists():
        return None
    target = work / "tldr-pages"
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and "/pages/common/" in m.name][:1500]
        tar.extractall(work / "tldr-extract", members=members, filter="data")
    shutil.move(str(next((work / "tldr-extract").rglob("common"))), target)
    return target


def rust_book(work: Path) -> Path | None:
    import tarfile

    archive = SHARED_DATA / "corpora" / "rust-book.tar.gz"
    if not archive.exists():
        return None
    with tarfile.open(archive) as tar:
        tar.extractall(work / "book", filter="data")
    return work / "book" / "rust-book"


def wait_for_preview(window, app) -> None:
    """Until the selected result's note is on screen (it renders once typing pauses) and Related is filled."""
    def shown() -> bool:
        hit = window.current_hit()
        return hit is not None and window.preview.ready() and str(window.preview.abspath) == hit.abspath
    wait_until(shown, app, timeout=60)
    settle(app, 0.8)


def select(window, file_name: str) -> None:
    """Select the result for ``file_name`` (its note shows in the preview)."""
    for position, hit in enumerate(window.results_model.hits):
        if hit.path.endswith(file_name):
            window.results_view.setCurrentIndex(window.results_model.index(window.results_model.hit_row(position), 0))
            window.search.show_current()
            return
    print(f"screenshots: {file_name} not among the results", file=sys.stderr)


def render_icon(svg: Path, png: Path, size: int = 256) -> None:
    """gui/icon.png from gui/icon.svg, for platforms and packagers that want a bitmap."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    image = QImage(size, size, QImage.Format_ARGB32)
    image.fill(Qt.transparent)
    painter = QPainter(image)
    QSvgRenderer(str(svg)).render(painter)
    painter.end()
    image.save(str(png))


def render(out: Path, book_index: Path | None = None) -> None:
    sys.path.insert(0, str(REPO))
    import pms
    from PySide6.QtCore import QMimeData, QSettings, QUrl

    from gui.app import application
    from gui.window import MainWindow

    app = application()
    render_icon(REPO / "gui" / "icon.svg", REPO / "gui" / "icon.png")
    work = Path(tempfile.mkdtemp(prefix="pms-shots-"))
    notes = work / "notes"
    shutil.copytree(REPO / "sample-notes", notes)
    with pms.KnowledgeBase(work / "empty.sqlite") as empty:  # the first start: no folder yet
        first = MainWindow(empty, QSettings(str(work / "first.ini"), QSettings.IniFormat))
        first.resize(*SIZE)
        first.move(0, 0)
        first.show()
        capture(first, app, out / "welcome.png")
        first.close()
    if book_index is not None:
        shutil.copy(book_index, work / "index.sqlite")
    kb = pms.KnowledgeBase(work / "index.sqlite")
    window = MainWindow(kb, QSettings(str(work / "settings.ini"), QSettings.IniFormat))
    window.resize(*SIZE)
    window.move(0, 0)
    window.show()
    book = rust_book(work)
    if book is None:
        print("screenshots: rust-book.tar.gz not found; the sample notes alone", file=sys.stderr)
    elif book_index is not None:  # the copied index's book, at its new place (unchanged passages keep their vectors)
        for col in kb.collections.list():
            kb.collections.move(col.name, book)
            if col.name != "rust-book":
                kb.collections.rename(col.name, "rust-book")
    else:
        kb.collections.create(book, name="rust-book")
    window.sync.add_folder(notes)
    wait_for(window.sync_done, app, timeout=3600)
    if book is not None and kb.check_sync_status().pending:
        window.sync.request_sync(None)
        wait_for(window.sync_done, app, timeout=3600)
    window.start_background_work(sync=False)
    wait_until(lambda: window.sync.model_state != "loading", app)
    settle(app, 0.5)

    type_query(window, app, "ownership")  # the chapter first, its stubs below it, copies on one row
    wait_for_preview(window, app)
    capture(window, app, out / "results.png")
    type_query(window, app, "Weak<T> reference cycles")
    select(window, "src/ch15-06-reference-cycles.md")  # a passage deep in a long chapter, tinted, Related beside it
    wait_for_preview(window, app)
    capture(window, app, out / "rust-book-note.png")
    type_query(window, app, "how to take smart notes zettelkasten")
    select(window, "reading/how-to-take-smart-notes.md")
    wait_for_preview(window, app)
    capture(window, app, out / "related.png")
    window.search.toggle_pin(window.current_hit())  # pinned: it stays on the start page
    type_query(window, app, "ssh keys rotation")
    type_query(window, app, "docker volumes")
    window.search_box.clear()  # the start page: pinned and recent notes, the keys worth knowing
    capture(window, app, out / "idle.png")
    window.filter_bar.field.setText("#pkm")  # a filter and no words: the notes it matches, newest first
    wait_for(window.results_shown, app)
    wait_for_preview(window, app)
    capture(window, app, out / "filter.png")
    window.filter_bar.field.clear()
    settle(app, 0.5)
    type_query(window, app, "integer types signed unsigned")
    select(window, "src/ch03-02-data-types.md")  # its table of integer types
    wait_for_preview(window, app)
    capture(window, app, out / "rust-book-table.png")
    for _ in range(3):  # as a user drags the corner: each folded pane lowers the minimum
        window.resize(640, 480)
        settle(app, 0.3)
    type_query(window, app, "ownership")
    wait_for_preview(window, app)
    capture(window, app, out / "small-window.png")
    window.resize(*SIZE)
    settle(app, 0.5)

    light = (app.style().name(), app.palette())
    app.setStyle("Fusion")  # Xvfb has no desktop theme to turn dark: stand in for one
    app.setPalette(dark_palette())
    settle(app, 0.5)
    type_query(window, app, "rotate ssh keys")
    wait_for_preview(window, app)
    capture(window, app, out / "results-dark.png")
    app.setStyle(light[0])
    app.setPalette(light[1])

    pages = SHARED_DATA / "html"
    if pages.is_dir():
        mime = QMimeData()
        mime.setUrls([QUrl(serve(pages) + "/dropbox-blog/source.html")])

        def choose_notes(dialog) -> None:  # "Clip into": the URL, and which collection
            capture(window, app, out / "clip-dialog.png", with_dialogs=True)
            dialog.setTextValue("notes")
            dialog.accept()

        while_modal(app, choose_notes)
        window.clipper.handle_drop(mime)  # what dropping a browser link onto the window does
        path, error = wait_for(window.clip_done, app, timeout=120)
        if error:
            print(f"screenshots: clipping failed: {error}", file=sys.stderr)
        else:
            wait_for(window.results_shown, app)
            wait_for_preview(window, app)
            capture(window, app, out / "clip.png")
    else:
        print(f"screenshots: {pages} not found; no clip screenshot", file=sys.stderr)

    bulk = bulk_notes(work)
    if bulk is not None:
        type_query(window, app, "archive")
        window.sync.add_folder(bulk)
        while True:  # catch it mid-way, with an ETA
            progress = wait_for(window.bridge.sync_progress, app, timeout=180)[0]
            if progress.phase == "embed" and progress.done >= 200:
                break
        capture(window, app, out / "sync.png")
        window.sync.cancel_sync()
        wait_for(window.sync_done, app, timeout=120)
    window.close()
    kb.close()
    shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "screenshots")
    parser.add_argument("--book-index", type=Path, help="an index of the Rust book already embedded, to start from (copied)")
    parser.add_argument("--inside-display", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.inside_display:
        render(args.out.resolve(), args.book_index)
        return 0
    ensure_xvfb()
    server, display = start_xvfb()
    try:
        env = {**os.environ, "DISPLAY": display, "QT_QPA_PLATFORM": "xcb", "QT_SCALE_FACTOR": "1"}
        env.setdefault("PMS_MODEL_DIR", str(REPO / ".cache" / "minilm"))
        book = ["--book-index", str(args.book_index.resolve())] if args.book_index else []
        return subprocess.run([sys.executable, __file__, "--out", str(args.out), *book, "--inside-display"], env=env).returncode
    finally:
        server.terminate()
        server.wait(5)


if __name__ == "__main__":
    sys.exit(main())
