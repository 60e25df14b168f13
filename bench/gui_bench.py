"""Desktop app speed: time to window, and keystroke to results shown.

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/gui_bench.py [--work /tmp/pms-gui-bench] [--runs 5]

Builds (once, cached in --work, never in the repository) an index of the
English tldr pages from ../shared/data/corpora/tldr.tar.gz: about 7,400 notes,
embedded when the model is available (set PMS_MODEL_DIR for the offline one).

* time to window: a fresh ``python -m gui --db INDEX`` process, from just
  before it starts to its first turn of the event loop after ``show()``.
* keystroke to results: in one process, type queries a character at a time,
  pausing past the debounce so every keystroke is searched; the clock runs
  from the key event to the results list and the preview painted again.
  Keyword figures are taken before the model loads, hybrid ones after.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402  (puts the repository on sys.path)
import pms  # noqa: E402

QUERIES_PER_MODE = 25


def english_tldr(work: Path) -> Path:
    pages = work / "tldr" / "tldr" / "pages"
    if not pages.is_dir():
        archive = common.SHARED_DATA / "corpora" / "tldr.tar.gz"
        if not archive.exists():
            sys.exit(f"gui_bench: {archive} not found (the evaluation data lives in ../shared/data)")
        with tarfile.open(archive) as tar:
            tar.extractall(work / "tldr", filter="data")
    return pages


def time_to_window(db: Path, runs: int) -> list[float]:
    env = {**os.environ, "QT_QPA_PLATFORM": os.environ.get("QT_QPA_PLATFORM", "offscreen")}
    seconds = []
    for _ in range(runs):
        started = time.time()
        out = subprocess.run([sys.executable, "-m", "gui", "--db", str(db), "--quit-after-show"], cwd=common.REPO,
                             capture_output=True, text=True, env=env, timeout=60)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("window-shown")), None)
        if line is None:
            sys.exit(f"gui_bench: the app did not start:\n{out.stderr[-2000:]}")
        seconds.append(float(line.split()[1]) - started)
    return seconds


def queries_from_titles(kb: pms.KnowledgeBase, n: int, seed: int = 7) -> list[str]:
    """Two-word queries made of words from real note titles and passages."""
    rng = random.Random(seed)
    words = []
    for hit in kb.search("file", k=200, mode="keyword") + kb.search("list", k=200, mode="keyword"):
        words += [w for w in hit.title.lower().replace("-", " ").split() if w.isalpha() and len(w) >= 4]
    words = sorted(set(words))
    return [" ".join(rng.sample(words, 2)) for _ in range(n)]


def keystroke_latency(window, queries: list[str]) -> list[float]:
    from PySide6.QtCore import QEventLoop, Qt, QTimer
    from PySide6.QtTest import QTest

    from gui.window import DEBOUNCE_MS

    app_loop = QEventLoop()
    seconds = []
    for query in queries:
        window.search_box.clear()
        for char in query:
            QTest.qWait(DEBOUNCE_MS + 20)  # a lone keystroke: searched at once, not debounced
            shown = []

            def done(_query, shown=shown):
                shown.append(True)
                app_loop.quit()

            window.results_shown.connect(done)
            started = time.perf_counter()
            QTest.keyClick(window.search_box, char if char != " " else Qt.Key_Space)
            if window.search_box.text().strip() and not shown:
                QTimer.singleShot(5000, app_loop.quit)
                app_loop.exec()
            window.results_shown.disconnect(done)
            if not shown:
                continue  # a space: nothing new to search
            window.results_view.viewport().repaint()
            window.preview.viewport().repaint()
            seconds.append(time.perf_counter() - started)
    return seconds


def summary(seconds: list[float], unit: float = 1000.0) -> str:
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return (f"median {statistics.median(ordered) * unit:.0f} ms, p95 {p95 * unit:.0f} ms, "
            f"max {ordered[-1] * unit:.0f} ms over {len(ordered)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/pms-gui-bench"))
    parser.add_argument("--runs", type=int, default=5, help="app launches to time")
    parser.add_argument("--db", type=Path, help="measure this index as it is (no sync) instead of the tldr one")
    args = parser.parse_args()
    if args.db:
        kb = pms.KnowledgeBase(args.db)
    else:
        kb = common.open_index(args.work, english_tldr(args.work), "tldr-en", pms.DEFAULT_CHUNK_CHARS, embed=True)
    info = kb.status(pending=False)
    print(f"index: {info['documents']:,} notes, {info['chunks']:,} passages, {info['embedded']:,} embedded ({kb.index_path})")

    launches = time_to_window(kb.index_path, args.runs)
    print(f"time to window: median {statistics.median(launches):.2f} s, max {max(launches):.2f} s over {len(launches)} launches")

    from PySide6.QtCore import QSettings

    from gui.app import application
    from gui.window import MainWindow

    app = application()
    window = MainWindow(kb, QSettings(str(args.work / "bench-settings.ini"), QSettings.IniFormat))
    window.resize(1100, 720)
    window.show()
    app.processEvents()
    queries = queries_from_titles(kb, QUERIES_PER_MODE * 2)
    print(f"keystroke to results, keyword: {summary(keystroke_latency(window, queries[:QUERIES_PER_MODE]))}")
    if kb.load_embedder():
        window._model_loaded(True)
        keystroke_latency(window, queries[:2])  # warm-up: the first ONNX runs are slow
        print(f"keystroke to results, hybrid:  {summary(keystroke_latency(window, queries[QUERIES_PER_MODE:]))}")
    else:
        print(f"hybrid: unavailable ({kb.search_mode()[1]})")
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
