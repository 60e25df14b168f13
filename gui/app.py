"""Entry point of the desktop app: ``main(argv) -> int``.

Runs as ``python3 pms.py gui``, ``python -m gui``, ``python gui/app.py`` or
frozen by PyInstaller. The window is shown before anything slow happens; the
embedding model loads afterwards in a background thread.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

STARTED = time.time()
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run directly (python gui/app.py): find pms.py and the gui package
    sys.path.insert(0, str(ROOT))

import pms  # noqa: E402  (after the path fix above)

INSTALL_HINT = ("the desktop app needs PySide6 and markdown-it-py (pip install PySide6-Essentials markdown-it-py "
                f"mdit-py-plugins, or run: {pms.pms_command('setup --gui')})")
GUI_MODULES = ("PySide6", "markdown_it", "mdit_py_plugins")


def icon_path(suffix: str) -> Path:
    base = Path(getattr(sys, "_MEIPASS", "")) / "gui" if getattr(sys, "_MEIPASS", None) else Path(__file__).resolve().parent
    return base / f"icon.{suffix}"


def application(argv: list[str] | None = None):
    """The QApplication (created once), named so QSettings land under "PMS"."""
    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "pms", *(argv or [])])
    app.setOrganizationName("PMS")
    app.setApplicationName("PMS")
    app.setApplicationVersion(pms.VERSION)
    app.setDesktopFileName("pms")
    icon = QIcon()
    for suffix in ("svg", "png"):
        if icon_path(suffix).exists():
            icon.addFile(str(icon_path(suffix)))
    app.setWindowIcon(icon)
    return app


def guard_none_refcount(app) -> bool:
    """PySide6 6.12.0 on Python < 3.12 drops a reference to None on every call
    of a method that returns nothing; after some ten thousand calls None's count
    hits zero and Python aborts. Pinning another version is the fix (see
    requirements-dev.txt); this keeps a window on such an install alive by
    topping the count up once a second (8 bytes per lost reference). True when
    active: the process must then end with os._exit, as freeing the top-up at
    interpreter exit would take None below zero."""
    import PySide6
    from PySide6.QtCore import QTimer

    if sys.version_info >= (3, 12) or PySide6.__version__ != "6.12.0":
        return False
    print("pms: PySide6 6.12.0 leaks references to None on this Python; "
          "install another version (pip install 'PySide6-Essentials!=6.12.0')", file=sys.stderr)
    floor = sys.getrefcount(None)
    ballast: list = []

    def top_up():
        ballast.extend([None] * max(0, floor - sys.getrefcount(None)))

    timer = QTimer(app, interval=1000)
    timer.timeout.connect(top_up)
    timer.start()
    return True


def run(kb: pms.KnowledgeBase, *, quit_after_show: bool = False, qt_args: list[str] | None = None) -> int:
    """Show the window over an open KnowledgeBase and run until it closes."""
    from PySide6.QtCore import QTimer

    from gui.window import MainWindow

    app = application(qt_args)
    guarded = guard_none_refcount(app)
    window = MainWindow(kb)
    window.show()
    if quit_after_show:  # for bench/gui_bench.py: time from process start to a painted window
        def report():
            print(f"window-shown {time.time():.6f} started {STARTED:.6f}", flush=True)
            window.close()
        QTimer.singleShot(0, report)
    else:
        QTimer.singleShot(0, window.start_background_work)
    code = app.exec()
    if guarded:
        kb.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pms gui", description="PMS desktop app: search, read and clip your notes.")
    parser.add_argument("--db", help="index file (default: $PMS_DB or the platform data folder)")
    parser.add_argument("--quit-after-show", action="store_true", help=argparse.SUPPRESS)
    args, qt_args = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    pms.use_private_env()
    if not all(pms.module_available(name) for name in GUI_MODULES):
        print(f"pms: error: {INSTALL_HINT}", file=sys.stderr)
        return 1
    try:
        kb = pms.KnowledgeBase(args.db)
        kb.keep_vectors_in_memory()  # a long-running process: warm vector searches
    except pms.PMSError as exc:
        print(f"pms: error: {exc}", file=sys.stderr)
        return 1
    with kb:
        return run(kb, quit_after_show=args.quit_after_show, qt_args=qt_args)


if __name__ == "__main__":
    sys.exit(main())
