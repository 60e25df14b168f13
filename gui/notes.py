"""Notes-native widgets: the filter bar (a filter field and tag chips) and the Related panel."""

from __future__ import annotations

import html
import re
import shlex

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (QHBoxLayout, QLabel, QLineEdit, QListWidget, QListWidgetItem, QToolButton, QVBoxLayout,
                               QWidget)

import pms
from gui.workers import AnswerThread

CHIPS = 8  # the most used tags, one click each
RELATED = 8
FILTER_DEBOUNCE_MS = 250
FILTER_HELP = ("Filter: #tag (all of them; #area matches #area/sub), -#tag, path:projects or path:'a/**/*.md', "
               "after:2024-01-01, before:2024-12-31, key=value, key!=value, has:key. "
               "With no search words, the matching notes are listed newest first.")


def plain(snippet: str) -> str:
    """A hit's HTML snippet (<mark> around matches) as plain text."""
    return html.unescape(re.sub(r"<[^>]+>", "", snippet))


def parse_filter_text(text: str) -> dict:
    """The filter field -> keyword arguments of ``KnowledgeBase.search``.

    ``#tag``, ``-#tag``, ``path:GLOB``, ``after:DATE``, ``before:DATE``,
    ``key=value``, ``key!=value``, ``has:key``; quotes group a value with
    spaces. Anything else is a PMSError naming the piece.
    """
    try:
        pieces = shlex.split(text)
    except ValueError:
        raise pms.PMSError("unbalanced quotes in the filter") from None
    out: dict = {"tags": [], "exclude_tags": [], "where": []}
    for piece in pieces:
        if piece.startswith("#"):
            out["tags"].append(piece[1:])
        elif piece.startswith("-#"):
            out["exclude_tags"].append(piece[2:])
        elif re.match(r"^(path|after|before):", piece, re.I):
            key, _, value = piece.partition(":")
            out[key.lower()] = value
        elif piece.lower().startswith("has:"):
            out["where"].append(piece[4:])
        elif "=" in piece:
            out["where"].append(piece)
        else:
            raise pms.PMSError(f"{piece!r} is not a filter (#tag, -#tag, path:, after:, before:, key=value, has:key)")
    pms.NoteFilter.build(**out)  # the same checks as the command line: bad dates, empty tags
    return {k: v for k, v in out.items() if v}


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

    def search_kwargs(self) -> dict:
        """Keyword arguments for kb.search; {} while the field holds an error (shown in red)."""
        try:
            kwargs = parse_filter_text(self.field.text())
            self.error = ""
        except pms.PMSError as exc:
            kwargs, self.error = {}, str(exc)
        self.field.setStyleSheet("QLineEdit { color: #c0392b; }" if self.error else "")
        self.field.setToolTip(self.error or FILTER_HELP)
        return kwargs

    def active(self) -> bool:
        return bool(self.search_kwargs())

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


def related_notes(kb: pms.KnowledgeBase, note: str) -> tuple[list, str]:
    """(hits, error) for the Related panel; run in its worker thread."""
    try:
        return kb.related(note, k=RELATED), ""
    except pms.PMSError as exc:
        return [], str(exc)
    except Exception as exc:  # a bug must show up as a message, not end the thread
        return [], f"related notes failed: {exc!r}"


class RelatedPanel(QWidget):
    """The notes related to the one in the preview, each with the passage that relates them."""

    open_requested = Signal(object)  # a Hit

    def __init__(self, kb: pms.KnowledgeBase, parent=None):
        super().__init__(parent)
        self.kb = kb
        self.title = QLabel("<b>Related</b>")
        self.list = QListWidget()
        self.list.setWordWrap(True)
        self.list.setAlternatingRowColors(True)
        self.list.itemActivated.connect(self._activated)
        self.list.itemClicked.connect(self._activated)
        column = QVBoxLayout(self)
        column.setContentsMargins(6, 6, 6, 6)
        column.addWidget(self.title)
        column.addWidget(self.list, 1)
        # The Hits wait in the thread until collected (see AnswerThread).
        self.worker = AnswerThread("pms-related", lambda note: related_notes(kb, note))
        self.worker.done.connect(self._show)
        self.worker.start()
        self.request = 0
        self.note = ""
        # The Hits stay in Python; a Qt item holds only its row number (a Hit
        # stored in an item's data outlived the item: ~8 per search).
        self.hits: list = []
        self.setMinimumWidth(180)

    def show_for(self, hit) -> None:
        """Find the notes related to ``hit``'s note, in the worker thread (some tens of ms)."""
        note = f"#{hit.docid}" if hit.docid else f"{hit.collection}/{hit.path}"
        if note == self.note:
            return
        self.note = note
        self.request += 1
        number = self.request
        self.title.setText(f"<b>Related</b> to {hit.title}")
        self.list.clear()
        self.hits = []
        self.worker.submit(number, note)

    def show_pending(self, hit) -> None:
        """The selection moved on while keys repeat: no related notes of another note meanwhile."""
        self.clear()
        self.title.setText(f"<b>Related</b> to {hit.title or hit.path}")

    def clear(self) -> None:
        self.note = ""
        self.request += 1
        self.title.setText("<b>Related</b>")
        self.list.clear()
        self.hits = []

    def _show(self, number: int) -> None:
        answer = self.worker.answer(number)
        if number != self.request or answer is None:
            return  # an older note's answer
        hits, error = answer
        self.list.clear()
        self.hits = list(hits)
        if error or not hits:
            self.list.addItem(QListWidgetItem(error or "No related notes."))
            return
        for row, hit in enumerate(self.hits):
            item = QListWidgetItem(f"{hit.title}\n{plain(hit.snippet)[:140]}")
            item.setToolTip(f"{hit.collection}/{hit.path} — {hit.heading_path}")
            item.setData(Qt.UserRole, row)
            self.list.addItem(item)

    def _activated(self, item: QListWidgetItem) -> None:
        row = item.data(Qt.UserRole)
        if isinstance(row, int) and 0 <= row < len(self.hits):
            self.open_requested.emit(self.hits[row])
