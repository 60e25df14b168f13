"""Notes-native widgets: the filter bar (a filter field and tag chips) and the Related panel."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListView,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

import pms
from gui.results import HitDelegate, ResultsModel
from gui.workers import AnswerThread

CHIPS = 8  # the most used tags, one click each
RELATED = 8
FILTER_DEBOUNCE_MS = 250
FILTER_HELP = ("Filter: #tag (all of them; #area matches #area/sub), -#tag, path:projects or path:'a/**/*.md', "
               "after:2024-01-01 (or 2024-03, 2024, 2w, 3m, today), before:2024-12-31, key=value, key!=value, has:key. "
               "With no search words, the matching notes are listed newest first.")




class FilterBar(QWidget):
    """A filter field under the search bar, with the most used tags as chips."""

    changed = Signal()

    def __init__(self, kb: pms.KnowledgeBase, parent=None):
        super().__init__(parent)
        self.kb = kb
        self.field = QLineEdit(placeholderText="Filter: #tag  -#tag  path:folder  after:2024-01-01  key=value")
        self.field.setClearButtonEnabled(True)
        self.field.setToolTip(FILTER_HELP)
        self.chips_row = QHBoxLayout()
        self.chips_row.setSpacing(4)
        row = QHBoxLayout(self)
        row.setContentsMargins(10, 0, 10, 6)
        row.addWidget(self.field, 2)
        row.addLayout(self.chips_row, 3)
        self.chips: dict[str, QToolButton] = {}
        self.error = ""
        self.debounce = QTimer(self, singleShot=True, interval=FILTER_DEBOUNCE_MS)
        self.debounce.timeout.connect(self._settle)
        self.field.textChanged.connect(lambda _text: self.debounce.start())
        self.field.returnPressed.connect(self._settle)
        self._last = ""

    def refresh_tags(self) -> None:
        """Chips for the most used tags (call after a sync)."""
        while self.chips_row.count():
            widget = self.chips_row.takeAt(0).widget()
            if widget is not None:
                widget.deleteLater()
        self.chips = {}
        for tag, count in self.kb.tags()[:CHIPS]:
            chip = QToolButton(text=f"#{tag}", checkable=True, toolTip=f"{count} notes")
            chip.setAutoRaise(True)
            chip.toggled.connect(lambda on, tag=tag: self._chip_toggled(tag, on))
            self.chips[tag] = chip
            self.chips_row.addWidget(chip)
        self.chips_row.addStretch(1)
        self._sync_chips()

    def show_chips(self, on: bool) -> None:
        """A narrow window gives the filter field the whole row."""
        for chip in self.chips.values():
            chip.setVisible(on)

    def note_filter(self) -> pms.NoteFilter:
        """What the field says, for kb.search; no condition while it holds an error (shown in red)."""
        try:
            note_filter = pms.NoteFilter.parse(self.field.text())
            self.error = ""
        except pms.PMSError as exc:
            note_filter, self.error = pms.NoteFilter(), str(exc)
        self.field.setStyleSheet("QLineEdit { color: #c0392b; }" if self.error else "")
        self.field.setToolTip(self.error or FILTER_HELP)
        return note_filter

    def active(self) -> bool:
        return bool(self.note_filter())

    def _chip_toggled(self, tag: str, on: bool) -> None:
        words = self.field.text().split()
        token = f"#{tag}"
        if on and token not in words:
            words.append(token)
        elif not on:
            words = [w for w in words if w != token]
        self.field.setText(" ".join(words))
        self._settle()

    def _sync_chips(self) -> None:
        words = set(self.field.text().split())
        for tag, chip in self.chips.items():
            chip.blockSignals(True)
            chip.setChecked(f"#{tag}" in words)
            chip.blockSignals(False)

    def _settle(self) -> None:
        self.debounce.stop()
        self._sync_chips()
        text = " ".join(self.field.text().split())
        if text != self._last:
            self._last = text
            self.changed.emit()


def related_notes(kb: pms.KnowledgeBase, note: str) -> tuple[pms.SearchResult, str]:
    """(result, error) for the Related panel; run in its worker thread."""
    try:
        return kb.related(note, k=RELATED), ""
    except pms.PMSError as exc:
        return pms.SearchResult([]), str(exc)
    except Exception as exc:  # a bug must show up as a message, not end the thread
        return pms.SearchResult([]), f"related notes failed: {exc!r}"


class RelatedPanel(QWidget):
    """The notes related to the one in the preview, each a row like a result's
    (title, place, the passage that relates them, wrapped). Hidden while no
    note is open (the start page)."""

    open_requested = Signal(object)  # a Hit

    def __init__(self, kb: pms.KnowledgeBase, parent=None):
        super().__init__(parent)
        self.kb = kb
        self.title = QLabel("<b>Related</b>")
        self.title.setWordWrap(True)
        self.model = ResultsModel(self)
        self.list = QListView()
        self.list.setModel(self.model)
        self.list.setItemDelegate(HitDelegate(self.list))
        self.list.setResizeMode(QListView.Adjust)
        self.list.setVerticalScrollMode(QAbstractItemView.ScrollPerPixel)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.list.setSelectionMode(QAbstractItemView.SingleSelection)
        self.list.activated.connect(self._activated)
        self.list.clicked.connect(self._activated)
        self.message = QLabel(wordWrap=True)
        self.message.setStyleSheet("color: palette(placeholder-text);")
        column = QVBoxLayout(self)
        column.setContentsMargins(6, 6, 6, 6)
        column.addWidget(self.title)
        column.addWidget(self.message)
        column.addWidget(self.list, 1)
        # The Hits wait in the thread until collected (see AnswerThread).
        self.worker = AnswerThread("pms-related", lambda note: related_notes(kb, note))
        self.worker.done.connect(self._show)
        self.worker.start()
        self.request = 0
        self.note = ""
        self.setMinimumWidth(200)
        self.clear()

    @property
    def hits(self) -> list:
        return self.model.hits

    def show_for(self, hit) -> None:
        """Find the notes related to ``hit``'s note, in the worker thread (some tens of ms)."""
        note = f"#{hit.docid}" if hit.docid else f"{hit.collection}/{hit.path}"
        self.list.setEnabled(True)
        self.setVisible(self.wanted)
        if note == self.note:
            return
        self.note = note
        self.request += 1
        self.title.setText(f"<b>Related</b> to {html.escape(hit.title or hit.path)}")
        self.message.hide()
        self.model.clear()
        self.worker.submit(self.request, note)

    def show_pending(self, hit) -> None:
        """The selection moved on while keys repeat: no related notes of another note meanwhile."""
        self.note = ""
        self.request += 1
        self.title.setText(f"<b>Related</b> to {html.escape(hit.title or hit.path)}")
        self.model.clear()

    def clear(self) -> None:
        """No note open: nothing to relate, so the pane steps aside."""
        self.note = ""
        self.request += 1
        self.title.setText("<b>Related</b>")
        self.model.clear()
        self.hide()

    # The layout may fold the pane away in a small window, whatever is shown.
    wanted = True

    def set_wanted(self, on: bool) -> None:
        self.wanted = on
        if not on:
            self.hide()
        elif self.note:
            self.show()

    def _show(self, number: int) -> None:
        answer = self.worker.answer(number)
        if number != self.request or answer is None:
            return  # an older note's answer
        result, error = answer
        self.model.set_result(result, "")
        self.message.setText(error or ("" if result else "No related notes."))
        self.message.setVisible(bool(error or not result))

    def _activated(self, index) -> None:
        hit = self.model.hit_at(index)
        if hit is not None:
            self.open_requested.emit(hit)
