"""The desktop app's filter bar and Related panel, driven like a user would (real Qt, offscreen)."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6", reason="the desktop app needs PySide6 (pip install PySide6-Essentials)")
pytest.importorskip("pytestqt", reason="GUI tests need pytest-qt (pip install pytest-qt)")

from PySide6.QtCore import QSettings  # noqa: E402

import pms  # noqa: E402
from gui.window import MainWindow  # noqa: E402
from conftest import WAIT_MS, make_vault  # noqa: E402



def test_the_filter_field_speaks_the_same_filters_as_the_command_line():
    parse_filter_text = lambda text: pms.NoteFilter.parse(text).build_args()  # noqa: E731 - what the filter bar reads
    assert parse_filter_text('#work -#archive path:"my projects" after:2024-01-01 status=draft owner!=me has:due') == {
        "tags": ["work"], "exclude_tags": ["archive"], "path": "my projects", "after": "2024-01-01",
        "where": ["status=draft", "owner!=me", "due"]}
    assert parse_filter_text("  ") == {}
    for bad in ("after:March", "#", "words", '"open'):
        with pytest.raises(pms.PMSError):
            parse_filter_text(bad)


@pytest.fixture
def window(kb, tmp_path, qtbot):
    kb.collections.create(make_vault(tmp_path / "vault"), name="vault")
    kb.sync()
    win = MainWindow(kb, QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat))
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    return win


def paths(win):
    return [hit.path for hit in win.results_model.hits]


def test_a_tag_chip_lists_its_notes_newest_first_and_narrows_a_search(window, qtbot, tmp_path):
    assert list(window.filter_bar.chips)[:2] == ["bulk", "even"]  # the most used tags
    with qtbot.waitSignal(window.results_shown, timeout=WAIT_MS):
        window.filter_bar.chips["even"].click()
    assert window.filter_bar.field.text() == "#even"
    assert paths(window) == [f"bulk/log{i:02d}.md" for i in (12, 10, 8, 6, 4, 2)]
    with qtbot.waitSignal(window.results_shown, timeout=WAIT_MS, check_params_cb=lambda q: q == "deployment"):
        qtbot.keyClicks(window.search_box, "deployment")
    assert len(paths(window)) == 6 and all(h.tags == ["bulk", "even"] for h in window.results_model.hits)
    window.grab().save(str(tmp_path / "filter.png"))
    with qtbot.waitSignal(window.results_shown, timeout=WAIT_MS):
        window.filter_bar.field.setText("#even after:nonsense")  # an error: shown in red, the filter is off
    assert "after" in window.filter_bar.field.toolTip() and len(paths(window)) > 6


def test_the_related_panel_follows_the_open_note_and_opens_a_related_one(window, qtbot):
    assert not window.related.isVisible()  # the start page: no note, no empty Related box
    with qtbot.waitSignal(window.results_shown, timeout=WAIT_MS, check_params_cb=lambda q: q == "alpha pipeline"):
        qtbot.keyClicks(window.search_box, "alpha pipeline")
    assert paths(window)[0] == "projects/alpha.md"
    qtbot.waitUntil(lambda: window.related.model.rowCount() > 0, timeout=WAIT_MS)
    assert window.related.isVisible() and "Alpha" in window.related.title.text()
    related = list(window.related.hits)
    assert len(related) == window.related.model.rowCount()
    assert "projects/alpha.md" not in [h.path for h in related]
    assert not any(h.stub or h.copy_of for h in related)
    window.related.list.clicked.emit(window.related.model.index(0, 0))
    qtbot.waitUntil(lambda: window.preview.ready() and window.preview.abspath.name == os.path.basename(related[0].path),
                    timeout=WAIT_MS)
    assert window.related.title.text().endswith(related[0].title)  # the panel follows the note now open
    window.search.go_back()
    qtbot.waitUntil(lambda: window.preview.abspath is not None and window.preview.abspath.name == "alpha.md", timeout=WAIT_MS)
    window.search.go_forward()
    qtbot.waitUntil(lambda: window.preview.abspath is not None and window.preview.abspath.name == os.path.basename(related[0].path),
                    timeout=WAIT_MS)
