"""The note preview: real notes rendered by the real QTextBrowser (offscreen)."""
from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6", reason="the desktop app needs PySide6 (pip install PySide6-Essentials)")
pytest.importorskip("pytestqt", reason="GUI tests need pytest-qt (pip install pytest-qt)")
pytest.importorskip("markdown_it", reason="the preview needs markdown-it-py (pip install -r requirements-dev.txt)")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtGui import QColor, QImage, QPalette, QTextCursor  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

import pms  # noqa: E402
from conftest import REPO, write  # noqa: E402
from gui.preview import NotePreview  # noqa: E402
from test_gui import WAIT_MS, open_window, type_query  # noqa: E402,F401  (open_window is a fixture)


def note_words(text: str) -> Counter:
    """The words a reader should find in the rendered note: the body without
    what is never shown (link targets, reference definitions, HTML comments,
    wikilink targets behind a label)."""
    _, body, _ = pms.split_frontmatter(text)
    body = re.sub(r"<!--.*?-->", " ", body, flags=re.S)
    body = re.sub(r"(?m)^(\s*(?:`{3,}|~{3,})).*$", r"\1", body)  # a fence's language is not shown
    body = re.sub(r"</?(?:br|kbd|sub|sup|b|i|em|strong|u|s|small|big|code|tt|var|samp)\s*/?>", " ", body)
    body = re.sub(r"\]\[[^\]]*\]", "] ", body)  # [text][ref]
    body = re.sub(r"\]\([^)\s]*(?:\s+\"[^\"]*\")?\)", "] ", body)
    body = re.sub(r"(?m)^\s{0,3}\[[^\]]+\]:\s*\S+.*$", " ", body)
    body = re.sub(r"\[\[[^\]|]*\|([^\]]*)\]\]", r"\1", body)
    return words(body)


def words(text: str) -> Counter:
    return Counter(re.findall(r"[^\W_]+", text.lower()))


def kept_fraction(text: str, shown: str) -> float:
    wanted, seen = note_words(text), words(shown)
    total = sum(wanted.values())
    return 1.0 if not total else sum(min(n, seen[w]) for w, n in wanted.items()) / total


@pytest.fixture
def preview(qtbot, kb):
    view = NotePreview(kb)
    qtbot.addWidget(view)
    view.resize(700, 600)
    view.show()
    return view


@pytest.mark.slow
def test_the_preview_keeps_the_words_of_every_rust_book_and_sample_note(preview, corpora):
    files = sorted((corpora / "rust-book").rglob("*.md")) + sorted((REPO / "sample-notes").rglob("*.md"))
    assert len(files) > 450
    short = []
    for path in files:
        text = pms.decode_text(path.read_bytes())
        assert preview.show_note(path, text=text)
        kept = kept_fraction(text, preview.toPlainText())
        if kept < 0.95:
            short.append(f"{path.name}: {kept:.0%}")
    assert not short, f"notes that lose more than 5% of their words: {short}"


def test_angle_brackets_and_raw_html_show_as_text_and_allowed_tags_render(preview, tmp_path):
    note = write(tmp_path / "generic.md", "# Generics\n\nA Vec<T> holds items; a Box<T> points.<br>Next line "
                 "with <kbd>Ctrl</kbd>.\n\n<Listing number=\"15-1\" caption=\"Storing a value\">\n\n"
                 "| type | use |\n|---|---|\n| Vec<T> | growable |\n| Rc<T> | shared |\n\n"
                 "<script>alert('x')</script>\n\n<!-- a comment nobody should see -->\n\nThe end.\n")
    preview.show_note(note)
    text = preview.toPlainText()
    assert "A Vec<T> holds items; a Box<T> points." in text
    assert "Next line" in text and "Ctrl" in text and "<br>" not in text and "<kbd>" not in text
    assert "Storing a value" in text and "Rc<T>" in text and "growable" in text and "The end." in text
    assert "alert('x')" in text  # shown as text, never run or hidden
    assert "comment nobody" not in text
    tables = [f for f in preview.document().rootFrame().childFrames() if f.__class__.__name__ == "QTextTable"]
    grid = [t for t in tables if t.rows() == 3 and t.columns() == 2]
    assert grid, "the Markdown table is a table"
    assert grid[0].cellAt(1, 0).firstCursorPosition().block().text() == "Vec<T>"


def passage_on_screen(preview: NotePreview) -> bool:
    """Is the block the preview scrolled to inside the visible part of the view?"""
    if preview.passage_block <= 0:
        return False
    cursor = QTextCursor(preview.document().findBlockByNumber(preview.passage_block))
    return 0 <= preview.cursorRect(cursor).top() < preview.viewport().height() - 20


def test_a_passage_near_the_end_of_a_long_note_is_scrolled_into_view(kb, tmp_path, open_window, qtbot):
    lines = ["# A long note", ""]
    for i in range(1, 74):
        lines += [f"Line {i}: filler words about nothing in particular, wrapped across the pane " * 2, ""]
    lines += ["The walrus passage is the one the search found.", "", "Last line."]
    write(tmp_path / "long" / "long.md", "\n".join(lines) + "\n")
    assert len(lines) >= 150
    kb.collections.create(tmp_path / "long", name="long")
    kb.sync()
    window = open_window(kb)
    window.resize(1000, 600)
    type_query(qtbot, window, "walrus")
    qtbot.wait(50)  # whatever the layout does after the first paint
    assert passage_on_screen(window.preview)
    assert "walrus" in window.preview.document().findBlockByNumber(window.preview.passage_block).text()


@pytest.mark.slow
def test_every_hit_of_a_deep_rust_book_chapter_scrolls_to_its_passage(kb, corpora, open_window, qtbot):
    kb.collections.create(corpora / "rust-book" / "src", name="book")
    kb.sync()
    window = open_window(kb)
    window.resize(1000, 600)
    doc = kb.get("book/ch15-05-interior-mutability.md")
    hits = kb.search("RefCell borrow_mut MockMessenger LimitTracker", k=50, mode="keyword", chunks=True)
    deep = [h for h in hits if h.path == "ch15-05-interior-mutability.md" and h.start_line > 40]
    assert len(deep) >= 3
    for hit in deep:
        window.preview.show_note(doc.abspath, text=doc.text, start_line=hit.start_line, end_line=hit.end_line,
                                 heading=hit.heading_path, words=["RefCell", "borrow_mut", "MockMessenger", "LimitTracker"])
        qtbot.wait(20)
        assert passage_on_screen(window.preview), f"lines {hit.start_line}-{hit.end_line} are not on screen"
