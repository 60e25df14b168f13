"""Typing stays ahead of the preview: the results list is painted at once, the
note preview waits until typing pauses and then renders in short steps.
Real Qt (offscreen), a real index; no timing asserts (bench/gui_bench.py
measures the speed)."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6", reason="the desktop app needs PySide6 (pip install PySide6-Essentials)")
pytest.importorskip("pytestqt", reason="GUI tests need pytest-qt (pip install pytest-qt)")

from PySide6.QtCore import QEvent, QObject, QTimer  # noqa: E402
from PySide6.QtGui import QTextDocument  # noqa: E402

import gui.search  # noqa: E402
from conftest import write  # noqa: E402
from conftest import WAIT_MS, type_query, wait_for_preview  # noqa: E402

KEY_INTERVAL_MS = 150  # faster than the settle delay the first test sets, slower than the search debounce


@pytest.fixture
def long_notes(kb, tmp_path):
    """Notes long enough that laying one out takes several steps, a matching passage near each one's end."""
    for n in range(3):
        sections = "\n\n".join(f"## Part {i}\n\n" + f"Filler sentence {i} about nothing in particular. " * 30
                               for i in range(60))
        write(tmp_path / "long" / f"long{n}.md", f"# Long note {n}\n\nA heron flies over.\n\n{sections}\n\n## The end\n\n"
              f"The heron number {n}, a grey heron, waits at the very end.\n")
    kb.collections.create(tmp_path / "long", name="long")
    kb.sync()
    return kb


class Recorder(QObject):
    """Notes, in order, what the user would see happen."""

    def __init__(self, window):
        super().__init__()
        self.events: list[str] = []
        self.list_viewport = window.results_view.viewport()
        self.list_viewport.installEventFilter(self)
        window.results_shown.connect(lambda query: self.events.append(f"results {query}"))
        window.preview.note_shown.connect(lambda: self.events.append("preview shown"))

    def eventFilter(self, watched, event) -> bool:
        if watched is self.list_viewport and event.type() == QEvent.Paint:
            self.events.append("list painted")
        return False


def test_the_preview_is_not_rendered_while_keys_come_faster_than_the_pause(long_notes, open_window, qtbot, monkeypatch):
    monkeypatch.setattr(gui.search, "PREVIEW_SETTLE_MS", 2000)  # far above the key interval, even on a busy machine
    window = open_window(long_notes)
    recorder = Recorder(window)
    renders = window.preview.renders
    for char in "heron number":
        qtbot.keyClick(window.search_box, char)
        qtbot.wait(KEY_INTERVAL_MS)
    shown = [e for e in recorder.events if e.startswith("results")]
    assert len(shown) >= 3, f"results should arrive while typing: {recorder.events}"
    assert window.preview.renders == renders and window.preview.abspath is None
    wait_for_preview(qtbot, window)  # the pause: now the selected note is rendered, once
    assert window.preview.renders == renders + 1
    assert "heron" in window.preview.document().findBlockByNumber(window.preview.passage_block).text()


def test_the_results_list_is_painted_before_the_preview_renders(long_notes, open_window, qtbot):
    window = open_window(long_notes)
    recorder = Recorder(window)
    window.search_box.setText("heron")
    wait_for_preview(qtbot, window)
    events = recorder.events[recorder.events.index("results heron"):]
    assert "list painted" in events and "preview shown" in events
    assert events.index("list painted") < events.index("preview shown"), events


def test_a_long_note_renders_in_steps_that_let_input_in_and_ends_at_its_passage(long_notes, open_window, qtbot):
    window = open_window(long_notes)
    window.resize(900, 500)
    preview = window.preview
    doc = long_notes.get("long/long1.md")
    hit = next(h for h in long_notes.search("heron", k=10, mode="keyword") if h.path == "long1.md")
    order: list[str] = []
    preview.note_shown.connect(lambda: order.append("shown"))
    preview.show_note(doc.abspath, text=doc.text, start_line=hit.start_line, end_line=hit.end_line,
                      heading=hit.heading_path, words=["heron"], staged=True)
    QTimer.singleShot(0, lambda: order.append("input handled"))  # a key press arriving just after the render began
    assert preview.abspath is None  # nothing happened inside the call itself
    qtbot.waitUntil(lambda: preview.job is None, timeout=WAIT_MS)
    assert order == ["input handled", "shown"]
    block = preview.document().findBlockByNumber(preview.passage_block)
    assert "heron" in block.text()
    bar = preview.verticalScrollBar()
    assert bar.value() > bar.maximum() // 2  # scrolled down to the passage near the end
    marks = [s for s in preview.extraSelections() if s.cursor.selectedText().lower() == "heron"]
    assert len(marks) == preview.toPlainText().lower().count("heron") == 3  # near the top too: the whole note is marked


def test_result_rows_are_laid_out_once_per_result_set(long_notes, open_window, qtbot):
    window = open_window(long_notes)
    type_query(qtbot, window, "heron")
    view, delegate = window.results_view, window.results_view.itemDelegate()
    view.viewport().repaint()
    built = dict(delegate.documents)
    assert len(built) >= len(window.results_model.hits)
    view.viewport().repaint()  # painting again (a hover, a scroll) reuses every row's document
    assert all(delegate.documents.get(key) is doc for key, doc in built.items())
    type_query(qtbot, window, "filler")  # new rows: new documents
    view.viewport().repaint()
    assert delegate.documents and not any(doc is built.get(key) for key, doc in delegate.documents.items())


def test_the_preview_keeps_one_document_however_many_notes_it_shows(long_notes, open_window, qtbot):
    window = open_window(long_notes)
    preview = window.preview
    for n in range(3):
        for note in ("long0.md", "long1.md", "long2.md"):
            doc = long_notes.get(f"long/{note}")
            preview.show_note(doc.abspath, text=doc.text, words=[f"part{n}"], staged=n % 2 == 1)
            qtbot.waitUntil(lambda: preview.job is None, timeout=WAIT_MS)
    qtbot.wait(10)  # deleteLater runs in the event loop
    assert preview.renders >= 9 and len(preview.findChildren(QTextDocument)) <= 1
