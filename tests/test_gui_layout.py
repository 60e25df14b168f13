"""The window on a real vault (issue 22): the list header tells the truth, small
windows fold panes away, a pasted link is offered for clipping, the preview and
Related follow the selection, drops are highlighted, the badge offers its fix."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6", reason="the desktop app needs PySide6 (pip install PySide6-Essentials)")
pytest.importorskip("pytestqt", reason="GUI tests need pytest-qt (pip install pytest-qt)")

from PySide6.QtCore import QMimeData, Qt, QUrl  # noqa: E402
from PySide6.QtGui import QDragEnterEvent, QDragLeaveEvent, QGuiApplication  # noqa: E402
from PySide6.QtWidgets import QInputDialog  # noqa: E402

from conftest import write  # noqa: E402
from gui.results import NO_WORDS, ONLY_MEANING  # noqa: E402
from conftest import WAIT_MS, type_query, wait_for_preview  # noqa: E402


def test_the_list_header_says_no_note_has_the_words_only_when_that_is_true(hybrid_kb, notes, open_window, qtbot):
    write(notes / "tagged.md", "---\ntags: [phone]\n---\n# Phone setup\n\nThe phone syncs over WiFi.\n")
    hybrid_kb.collections.create(notes, name="notes")
    hybrid_kb.sync()
    window = open_window(hybrid_kb)
    window.bridge.model_loaded.emit(hybrid_kb.load_embedder())  # as the loading thread says it
    type_query(qtbot, window, "zq")  # two letters still being typed: not a word yet, no prefix search
    assert NO_WORDS not in window.results_model.rows
    assert window.results_model.rows[0] == ONLY_MEANING
    type_query(qtbot, window, "zqxw ")  # a whole word in no note
    assert window.results_model.rows[0] == NO_WORDS
    window.search_box.clear()
    with qtbot.waitSignal(window.results_shown, timeout=WAIT_MS):
        window.filter_bar.field.setText("#phone")  # a filter and no words: a listing, no header at all
    assert window.results_model.hits and not any(isinstance(row, str) for row in window.results_model.rows)


def drag_to(qtbot, window, width: int, height: int) -> None:
    """Resize as a user dragging the corner does: again and again (a pane that folds
    away lowers the window's minimum size, so the next step gets smaller)."""
    for _ in range(3):
        window.resize(width, height)
        qtbot.wait(50)


def test_small_windows_fold_related_then_the_preview_and_leave_the_filter_room(vault, open_window, qtbot):
    window = open_window(vault)
    window.resize(1100, 720)
    type_query(qtbot, window, "restic")
    wait_for_preview(qtbot, window)
    qtbot.waitUntil(window.related.isVisible, timeout=WAIT_MS)
    drag_to(qtbot, window, 640, 480)
    assert window.width() <= 660 and not window.related.isVisible() and window.preview.isVisible()
    assert not any(chip.isVisible() for chip in window.filter_bar.chips.values())  # the filter field gets the row
    assert window.preview.width() >= window.preview.minimumWidth() and window.results_view.width() >= 200
    drag_to(qtbot, window, 420, 360)
    assert window.width() <= 440 and not window.preview.isVisible() and window.results_view.isVisible()
    assert window.filter_bar.field.width() > 100 and window.search_box.width() >= 100  # never elided to nothing
    drag_to(qtbot, window, 1100, 720)
    assert window.preview.isVisible() and window.related.isVisible()


def test_ctrl_v_of_a_link_in_the_search_bar_offers_to_clip_it_and_enter_confirms(vault, open_window, qtbot, monkeypatch):
    window = open_window(vault)
    clipped = []
    monkeypatch.setattr(window.clipper, "clip", lambda source: clipped.append(source) or True)
    QGuiApplication.clipboard().setText("https://example.org/an/article")
    window.search_box.setFocus()
    qtbot.keyClick(window.search_box, Qt.Key_V, Qt.ControlModifier)
    assert window.search_box.text() == ""  # not searched for
    assert "Enter to clip https://example.org/an/article" in window.results_message.text()
    qtbot.keyClick(window.search_box, Qt.Key_Return)
    assert clipped == ["https://example.org/an/article"]
    QGuiApplication.clipboard().setText("rotate keys")  # words are pasted as words
    qtbot.keyClick(window.search_box, Qt.Key_V, Qt.ControlModifier)
    assert window.search_box.text() == "rotate keys" and clipped == ["https://example.org/an/article"]


def test_the_clip_dialog_names_the_page(vault, notes, tmp_path, open_window, monkeypatch):
    other = tmp_path / "other"
    write(other / "x.md", "# X\n")
    vault.collections.create(other, name="other")
    window = open_window(vault)
    asked = []
    monkeypatch.setattr(QInputDialog, "getItem", lambda *args: asked.append(args[2]) or ("notes", False))
    assert window.clipper.clip("https://example.org/a/page") is False  # cancelled
    assert "https://example.org/a/page" in asked[0]


def test_preview_and_related_never_show_another_note_than_the_selected_row(vault, open_window, qtbot):
    window = open_window(vault)
    type_query(qtbot, window, "one")  # "one owner", "one offsite"
    wait_for_preview(qtbot, window)
    assert len(window.results_model.hits) >= 2
    window.search.preview_timer.start()  # keys repeating: the next row's note waits
    qtbot.keyClick(window.search_box, Qt.Key_Down)
    selected = window.current_hit()
    assert window.preview.abspath is None or str(window.preview.abspath) == selected.abspath
    assert (selected.title or selected.path) in window.preview.toPlainText()
    assert (selected.title or selected.path) in window.related.title.text()
    wait_for_preview(qtbot, window)
    assert str(window.preview.abspath) == window.current_hit().abspath


def test_dragging_a_link_over_the_window_highlights_the_drop_zone(vault, open_window, qtbot):
    window = open_window(vault)
    mime = QMimeData()
    mime.setUrls([QUrl("https://example.org/post")])
    enter = QDragEnterEvent(window.rect().center(), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    window.dragEnterEvent(enter)
    assert enter.isAccepted() and "border" in window.drop_frame.styleSheet()
    window.dragLeaveEvent(QDragLeaveEvent())
    assert window.drop_frame.styleSheet() == ""


def test_the_keyword_only_badge_offers_its_fix_as_a_button(hybrid_kb, notes, open_window, qtbot):
    hybrid_kb.collections.create(notes, name="notes")
    hybrid_kb.sync(embed=False)  # indexed, not embedded
    window = open_window(hybrid_kb)
    window.bridge.model_loaded.emit(hybrid_kb.load_embedder())  # as the loading thread says it
    assert window.badge.text().startswith("Keyword only")
    assert window.fix_button.isVisible() and window.fix_button.text() == "Embed notes"
    assert "PMS_MODEL_DIR" not in window.badge.toolTip() and "pms" not in window.fix_button.toolTip().split()
    with qtbot.waitSignal(window.sync_done, timeout=60000):
        qtbot.mouseClick(window.fix_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: window.badge.text() == "Hybrid", timeout=WAIT_MS)
    assert not window.fix_button.isVisible()


def test_rows_wrap_again_when_the_list_narrows_so_no_text_runs_into_the_next_row(kb, tmp_path, open_window, qtbot):
    from PySide6.QtWidgets import QStyleOptionViewItem

    for i in range(20):
        write(tmp_path / "v" / f"n{i:02d}.md", f"# Note {i}\n\n" + "alpha words that wrap over several lines of the row " * 4)
    kb.collections.create(tmp_path / "v", name="v")
    kb.sync()
    window = open_window(kb)
    window.resize(1100, 720)
    type_query(qtbot, window, "alpha")  # rows laid out in batches: the scroll bar comes after the first ones
    view = window.results_view
    qtbot.waitUntil(lambda: view.verticalScrollBar().isVisible(), timeout=WAIT_MS)

    def row_heights_fit() -> bool:
        option = QStyleOptionViewItem()
        option.widget, option.font, option.palette = view, view.font(), view.palette()
        for row in range(window.results_model.rowCount()):
            index = window.results_model.index(row, 0)
            if view.visualRect(index).height() < view.itemDelegate().sizeHint(option, index).height():
                return False
        return True

    view.viewport().update()
    qtbot.waitUntil(row_heights_fit, timeout=WAIT_MS)


def test_a_path_filter_that_lists_nothing_says_how_to_match_names_that_start_so(kb, tmp_path, open_window, qtbot):
    write(tmp_path / "v" / "src" / "ch04-01-ownership.md", "# Ownership\n\nRules.\n")
    kb.collections.create(tmp_path / "v", name="v")
    kb.sync()
    window = open_window(kb)
    with qtbot.waitSignal(window.results_shown, timeout=WAIT_MS):
        window.filter_bar.field.setText("path:src/ch04")
    assert window.results_message.text() == ("No notes match the filter. path:src/ch04 is a folder; "
                                             "path:'src/ch04*' matches names that start with it.")
    with qtbot.waitSignal(window.results_shown, timeout=WAIT_MS):
        window.filter_bar.field.setText("path:'src/ch04*'")  # as the message says
    assert [h.path for h in window.results_model.hits] == ["src/ch04-01-ownership.md"]
