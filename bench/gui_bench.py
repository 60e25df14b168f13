"""Desktop app speed and memory, measured the way a user meets them.

    QT_QPA_PLATFORM=offscreen PMS_MODEL_DIR=.cache/minilm .venv/bin/python bench/gui_bench.py [--work /tmp/pms-gui-bench]

Builds (once, cached in --work, never in the repository) an index of the
Rust book from ../shared/data/corpora/rust-book.tar.gz (478 notes), embedded
when the model is available, then reports:

* time to window: a fresh ``python -m gui`` process, from just before it
  starts to its first turn of the event loop after ``show()``;
* keystroke -> results painted: queries typed a character at a time, pausing
  past the search debounce so every keystroke is searched; the clock runs
  from the key event to the results list repainted. Keyword and hybrid; idle
  and while a sync embeds 1,500 tldr pages in the background;
* pause -> preview shown: after each query's last key, from its results to
  the selected note on screen, scrolled to its passage (the preview waits
  until typing pauses, then renders in steps);
* the longest event-loop stall (a 5 ms timer that notes how late it fires)
  while typing (keys, results and the preview after each pause), while
  clearing the search bar, while typing as a sync embeds, and while syncing;
* RSS after 10 and after 1,000 searches in one window.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
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
from common import timing_summary  # noqa: E402

QUERIES_PER_RUN = 20
BACKGROUND_PAGES = 1500


def rust_book(work: Path) -> Path:
    try:
        return common.extract_book(work)
    except FileNotFoundError as exc:
        sys.exit(f"gui_bench: {exc}")


def background_pages(work: Path, count: int = BACKGROUND_PAGES) -> Path:
    """1,500 tldr pages in a folder of their own: a sync with minutes of embedding to type against."""
    target = work / "tldr-common"
    if not target.is_dir():
        with tarfile.open(common.SHARED_DATA / "corpora" / "tldr.tar.gz") as tar:
            members = [m for m in tar.getmembers() if m.isfile() and "/pages/common/" in m.name][:count]
            tar.extractall(work / "tldr-extract", members=members, filter="data")
        shutil.move(str(next((work / "tldr-extract").rglob("common"))), target)
        shutil.rmtree(work / "tldr-extract", ignore_errors=True)
    return target


def typing_while_syncing(window, kb, app, stalls, typed, hybrid, args) -> None:
    """Typing while a sync embeds in the background."""
    pages = background_pages(args.work, args.background_pages)
    with contextlib.suppress(pms.PMSError):
        kb.collections.delete("background")  # left over from an interrupted run
    kb.collections.create(pages, name="background")
    window.sync.refresh_collections()
    with stalls.during("syncing"):
        window.sync.request_sync(["background"])
        while not (window.sync.sync_phase == "embed" or not window.sync.sync_running()):
            app.processEvents()
            time.sleep(0.01)
        end = time.monotonic() + 5
        while time.monotonic() < end:  # embedding, nobody typing
            app.processEvents()
            time.sleep(0.005)
    embedding = window.sync.sync_running() and window.sync.sync_phase == "embed"
    if embedding:
        with stalls.during("typing while embedding"), mode(window, "keyword"):
            typing_report("keyword, while embedding", window, next(typed), stalls)
        if hybrid:
            with stalls.during("typing while embedding"), mode(window, "hybrid"):
                typing_report("hybrid, while embedding", window, next(typed), stalls)
    else:
        print("while embedding: the background sync ended before typing began (no model?)")
    window.sync.cancel_sync()
    while window.sync.sync_running():
        app.processEvents()
        time.sleep(0.01)
    kb.collections.delete("background")  # the index is left as it was
    window.sync.refresh_collections()


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
    for hit in [*kb.search("file", k=200, mode="keyword"), *kb.search("list", k=200, mode="keyword")]:
        words += [w for w in hit.title.lower().replace("-", " ").split() if w.isalpha() and len(w) >= 4]
    words = sorted(set(words))
    return [" ".join(rng.sample(words, 2)) for _ in range(n)]


class StallMeter:
    """The longest wait between turns of the event loop, per labelled stretch of
    time: a 5 ms timer notes how much later than due each tick arrives.

    With each stall goes the window thread's own CPU time in it: the rest of
    the stall it spent waiting, for a core (a loaded machine) or for Python's
    GIL (held by a worker thread). ``own`` keeps the stall with the most own
    work, which is what the window's code can fix."""

    INTERVAL = 0.005

    def __init__(self):
        from PySide6.QtCore import QTimer

        self.worst: dict[str, tuple[float, float]] = {}   # label -> (stall, own CPU in it), the longest stall
        self.own: dict[str, tuple[float, float]] = {}     # label -> (stall, own CPU in it), the most own CPU
        self.label: str | None = None
        self.last, self.last_cpu = time.perf_counter(), time.thread_time()
        self.timer = QTimer(interval=int(self.INTERVAL * 1000))
        self.timer.timeout.connect(self._tick)
        self.timer.start()

    def _tick(self) -> None:
        now, cpu = time.perf_counter(), time.thread_time()
        if self.label:
            stall = (now - self.last - self.INTERVAL, cpu - self.last_cpu)
            self.worst[self.label] = max(self.worst.get(self.label, (0.0, 0.0)), stall)
            self.own[self.label] = max(self.own.get(self.label, (0.0, 0.0)), stall, key=lambda pair: pair[1])
        self.last, self.last_cpu = now, cpu

    def report(self, label: str) -> str:
        (stall, cpu), (own_stall, own_cpu) = self.worst.get(label, (0.0, 0.0)), self.own.get(label, (0.0, 0.0))
        return (f"{stall * 1000:.0f} ms ({cpu * 1000:.0f} ms of it the window's own work); "
                f"most own work in one stall: {own_cpu * 1000:.0f} ms (of {own_stall * 1000:.0f} ms)")

    @contextlib.contextmanager
    def during(self, label: str):
        """Blame the waits in this stretch on ``label`` (nested: the outer label resumes after)."""
        outer = self.label
        self._tick()
        self.label = label
        try:
            yield
        finally:
            self._tick()
            self.label = outer


def wait_for_results(window, query: str, timeout_ms: int = 10000) -> bool:
    """Run the event loop until the window shows the results of ``query``."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop, shown = QEventLoop(), []

    def done(text):
        if text == query:
            shown.append(True)
            loop.quit()

    window.results_shown.connect(done)
    QTimer.singleShot(timeout_ms, loop.quit)
    if not shown:
        loop.exec()
    window.results_shown.disconnect(done)
    return bool(shown)


def wait_for_preview(window, timeout: float = 10.0) -> bool:
    """Run the event loop until the preview shows the selected result, scrolled and marked."""
    from PySide6.QtWidgets import QApplication

    end = time.perf_counter() + timeout
    while time.perf_counter() < end:
        hit, preview = window.current_hit(), window.preview
        ready = getattr(preview, "ready", lambda: True)()  # an older app rendered the preview at once
        if hit is not None and ready and str(preview.abspath) == hit.abspath:
            return True
        QApplication.processEvents()
        time.sleep(0.001)
    return False


def keystroke_latency(window, queries: list[str], engine: list[float] | None = None, previews: list[float] | None = None,
                      stalls: StallMeter | None = None, key_interval_ms: int | None = None) -> list[float]:
    """Seconds from each key event to the results of the text so far painted;
    ``engine`` collects the part spent in ``kb.search`` (the search thread's clock);
    ``previews`` the seconds from each query's last results to its preview on screen
    (``stalls`` watches that pause as "previewing")."""
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    from gui.search import DEBOUNCE_MS

    seconds = []
    for query in queries:
        window.search_box.clear()
        for char in query:
            QTest.qWait(key_interval_ms or DEBOUNCE_MS + 20)  # a lone keystroke: searched at once, not debounced
            started = time.perf_counter()
            QTest.keyClick(window.search_box, char if char != " " else Qt.Key_Space)
            if char == " " or not wait_for_results(window, window.search_box.text()):
                continue  # a space: nothing new to search
            window.results_view.viewport().repaint()
            seconds.append(time.perf_counter() - started)
            if engine is not None:
                engine.append(window.search.last_search_seconds)
        if previews is not None and window.current_hit() is not None:
            started = time.perf_counter()
            with stalls.during("previewing") if stalls else contextlib.nullcontext():
                if wait_for_preview(window):
                    window.preview.viewport().repaint()
                    previews.append(time.perf_counter() - started)
                while getattr(window.preview, "job", None) is not None:  # the rest of the note laid out and marked
                    QTest.qWait(5)
    return seconds


def typing_report(label: str, window, queries: list[str], stalls: StallMeter | None = None,
                  key_interval_ms: int | None = None) -> None:
    engine: list[float] = []
    previews: list[float] = []
    total = keystroke_latency(window, queries, engine, previews, stalls, key_interval_ms)
    print(f"keystroke -> results painted, {label}: {summary(total)}")
    print(f"    of which the engine's search (kb.search):   {summary(engine)}")
    print(f"    last results -> preview shown (the pause):  {summary(previews)}")


def clear_latency(window, queries: list[str], stalls: StallMeter) -> list[float]:
    """Seconds to clear a search bar full of results (select all, delete), repainted;
    the stall meter watches the clearing and the 200 ms after it."""
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    seconds = []
    for query in queries:
        window.search_box.setText(query)
        window.search.search_now()
        wait_for_results(window, query)
        QTest.qWait(50)
        with stalls.during("clearing"):
            started = time.perf_counter()
            QTest.keyClick(window.search_box, Qt.Key_A, Qt.ControlModifier)
            QTest.keyClick(window.search_box, Qt.Key_Backspace)
            window.results_view.viewport().repaint()
            window.preview.viewport().repaint()
            seconds.append(time.perf_counter() - started)
            QTest.qWait(200)
    return seconds


def rss_mb() -> float | None:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return None  # not Linux: no cheap current-RSS reading without psutil


def searches(window, queries: list[str]) -> None:
    for query in queries:
        window.search_box.setText(query)
        window.search.search_now()
        wait_for_results(window, query)


def summary(seconds: list[float]) -> str:
    if not seconds:
        return "no samples"
    s = timing_summary(seconds)
    return f"median {s['median_ms']:.0f} ms, p95 {s['p95_ms']:.0f} ms, max {s['max_ms']:.0f} ms over {s['n']}"


@contextlib.contextmanager
def mode(window, wanted: str):
    """Keyword or hybrid typing in the same window (the window searches hybrid once the model is ready)."""
    saved = window.search.model_ready
    window.search.set_model_ready(wanted == "hybrid")
    try:
        yield
    finally:
        window.search.set_model_ready(saved)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/pms-gui-bench"))
    parser.add_argument("--runs", type=int, default=5, help="app launches to time")
    parser.add_argument("--queries", type=int, default=QUERIES_PER_RUN, help="queries typed per measure")
    parser.add_argument("--searches", type=int, default=1000, help="searches for the memory measure")
    parser.add_argument("--db", type=Path, help="measure this index as it is (no sync) instead of the Rust-book one")
    parser.add_argument("--background-pages", type=int, default=BACKGROUND_PAGES,
                        help="tldr pages synced in the background while typing (0: skip that measure)")
    args = parser.parse_args()
    if args.db:
        kb = pms.KnowledgeBase(args.db)
        kb.keep_vectors_in_memory()  # as the app does
    else:
        kb = common.open_index(args.work, rust_book(args.work), "rust-book", pms.DEFAULT_PASSAGE_CHARS, embed=True)
        kb.keep_vectors_in_memory()  # as the app does
    info = kb.status(pending=False)
    print(f"index: {info['notes']:,} notes, {info['passages']:,} passages, {info['embedded']:,} embedded ({kb.index_path})")
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")

    launches = time_to_window(kb.index_path, args.runs)
    print(f"time to window: median {statistics.median(launches):.2f} s, max {max(launches):.2f} s over {len(launches)} launches")

    from PySide6.QtCore import QSettings

    from gui.app import application
    from gui.window import MainWindow

    app = application()
    settings = args.work / "bench-settings.ini"
    settings.unlink(missing_ok=True)
    window = MainWindow(kb, QSettings(str(settings), QSettings.IniFormat))
    window.resize(1100, 720)
    window.show()
    app.processEvents()
    stalls = StallMeter()
    queries = queries_from_titles(kb, args.queries * 5)
    typed = iter([queries[i:i + args.queries] for i in range(0, len(queries), args.queries)])
    hybrid = kb.load_embedder()
    if hybrid:
        window.sync._model_loaded(True)
    with stalls.during("typing"), mode(window, "keyword"):
        typing_report("keyword, idle", window, next(typed), stalls)
    if hybrid:
        with mode(window, "hybrid"):
            keystroke_latency(window, queries[:2])  # warm-up: the first ONNX runs are slow
            with stalls.during("typing"):
                typing_report("hybrid, idle", window, next(typed), stalls)
            # A slower typist (300 ms a key, about 40 words a minute): the preview renders between keys.
            with stalls.during("typing slowly"):
                typing_report("hybrid, idle, 300 ms a key", window, next(typed), stalls, key_interval_ms=300)
    else:
        print(f"hybrid: unavailable ({kb.search_mode().reason})")
    print(f"clearing the search bar:                      {summary(clear_latency(window, queries[:args.queries], stalls))}")

    if args.background_pages:
        typing_while_syncing(window, kb, app, stalls, typed, hybrid, args)

    for label in ("typing", "previewing", "typing slowly", "clearing", "typing while embedding", "syncing"):
        print(f"longest event-loop stall while {label}: {stalls.report(label)}")

    memory_queries = queries_from_titles(kb, args.searches, seed=11)
    searches(window, memory_queries[:10])
    after_10 = rss_mb()
    searches(window, memory_queries[10:])
    after_all = rss_mb()
    if after_10 is None or after_all is None:
        print("RSS: not measured (needs /proc)")
    else:
        print(f"RSS after 10 searches {after_10:.0f} MB, after {args.searches:,}: {after_all:.0f} MB "
              f"({after_all - after_10:+.0f} MB)")
    print(f"load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
