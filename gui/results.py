"""The results list: a list model over ``pms.Hit`` and a delegate that draws
title, place, heading breadcrumb and a plain-text snippet (query terms marked).

Rows are notes, plus (in hybrid mode) one divider between the notes that
contain the query's words and those only related in meaning. Near-duplicate
notes (the same title and file name in several places, such as four editions of a
book: pms.SearchResult.groups) share one row that says how many copies it stands for.
"""

from __future__ import annotations

import html

from PySide6.QtCore import QModelIndex, QSize, Qt, QTimer
from PySide6.QtGui import QAbstractTextDocumentLayout, QPalette, QStandardItem, QStandardItemModel, QTextDocument
from PySide6.QtWidgets import QApplication, QStyle, QStyledItemDelegate, QStyleOptionViewItem

import pms

RowRole = Qt.UserRole + 1      # the row's position in ResultsModel.rows (an int: no Python object in Qt's hands)
PADDING = 8
MARK_STYLE = "background-color:#ffe066; color:#000000"
ONLY_MEANING = "Related in meaning"
NO_WORDS = "No note contains these words; these are related in meaning"



def why_text(hit, copies: list) -> str:
    """The tooltip: why this note is here (ranks of ``pms search --explain``), and where it is."""
    reasons = []
    if hit.bm25_rank is not None:
        reasons.append(f"contains the words (keyword rank {hit.bm25_rank})")
    if hit.vector_rank is not None:
        reasons.append(f"close in meaning (meaning rank {hit.vector_rank})")
    lines = [("Found because it " + " and is ".join(reasons)) if reasons else "Found by keyword",
             f"{hit.collection}/{hit.path}, " + (f"p. {hit.page}" if hit.page else
                                                 f"lines {hit.start_line}–{hit.end_line}")]
    if copies:
        lines.append(f"{len(copies)} near-identical cop{'y' if len(copies) == 1 else 'ies'} hidden:")
        lines += [f"  {c.collection}/{c.path}" for c in copies[:8]]
    return "\n".join(lines)


class ResultsModel(QStandardItemModel):
    """The rows of the last search. Hits stay in Python lists (``hits``,
    ``rows``); Qt items only hold the row number, so a refresh drops the old
    hits at once. (A QStandardItemModel rather than a ``data()`` override:
    PySide6 6.12 on Python 3.11 loses a reference to None each time such an
    override answers None.)"""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.hits: list = []                 # the notes shown, best first
        self.rows: list = []                 # per row: a Hit, or a str (a divider's label)
        self.copies: dict[int, list] = {}    # row -> near-duplicate hits it stands for
        self.query = ""                     # as typed
        self.words: list[str] = []           # its words, as the engine read them (pms.SearchResult.words)
        self.generation = 0                  # bumped by every refill (the delegate's cache follows it)

    def set_result(self, result: pms.SearchResult, query: str, *, words_complete: bool = True) -> None:
        """Replace every row in one model reset: the result's groups (each note with its copies,
        pms.SearchResult.groups). A search that read meaning (hybrid) and words is split into
        notes with the words and notes only related in meaning. Only with ``words_complete``
        (no short word still being typed) may the list say that no note contains the words."""
        shown = [hit for hit, _copies in result.groups]
        copies = {id(hit): copies for hit, copies in result.groups}
        rows: list = list(shown)
        if result.mode == "hybrid" and result.words and shown:
            with_words = [h for h in shown if h.bm25_rank is not None]
            meaning = [h for h in shown if h.bm25_rank is None]
            label = NO_WORDS if not with_words and words_complete else ONLY_MEANING
            rows = with_words + ([label] if meaning else []) + meaning
        self._fill(rows, query, copies, list(result.words))

    def clear(self) -> None:
        self._fill([], "", {}, [])

    def set_sections(self, sections: list[tuple[str, list]]) -> None:
        """The idle state: labelled groups of notes (pinned, recent), in one reset."""
        self._fill([entry for label, hits in sections if hits for entry in (label, *hits)], "", {}, [])

    def _fill(self, rows: list, query: str, copies: dict, words: list) -> None:
        self.generation += 1
        self.beginResetModel()
        self.blockSignals(True)  # one reset for the whole swap, not a signal per row
        try:
            self.hits, self.query, self.words = [r for r in rows if not isinstance(r, str)], query, words
            self.rows = rows
            self.copies = {i: copies.get(id(r), []) for i, r in enumerate(rows) if not isinstance(r, str)}
            self.removeRows(0, self.rowCount())
            items = []
            for i, row in enumerate(rows):
                divider = isinstance(row, str)
                item = QStandardItem(row if divider else (row.title or row.path))
                item.setData(i, RowRole)
                item.setEditable(False)
                if divider:
                    item.setFlags(Qt.NoItemFlags)
                else:
                    item.setToolTip(why_text(row, self.copies[i]) if query else f"{row.collection}/{row.path}")
                items.append(item)
            self.invisibleRootItem().appendRows(items)
        finally:
            self.blockSignals(False)
        self.endResetModel()

    def hit_at(self, index: QModelIndex):
        """The Hit of a row, or None (a divider, no row)."""
        if not index.isValid() or index.row() >= len(self.rows):
            return None
        row = self.rows[index.row()]
        return None if isinstance(row, str) else row

    def hit_row(self, position: int) -> int:
        """The row of the ``position``-th hit (dividers skipped)."""
        count = -1
        for row, entry in enumerate(self.rows):
            if not isinstance(entry, str):
                count += 1
                if count == position:
                    return row
        return -1


def breadcrumb(heading_path: str, title: str) -> str:
    """'Title > Setup > Keys' under a result titled 'Title' reads 'Setup › Keys'."""
    parts = [p.strip() for p in (heading_path or "").split(" > ") if p.strip()]
    if parts and parts[0] == title:
        parts = parts[1:]
    return " › ".join(parts)


def hit_html(hit, palette: QPalette, selected: bool, copies: int = 0) -> str:
    text_role = QPalette.HighlightedText if selected else QPalette.Text
    dim_role = QPalette.HighlightedText if selected else QPalette.PlaceholderText
    color, dim = palette.color(text_role).name(), palette.color(dim_role).name()
    page = hit.page  # a PDF's passage: where to turn to
    place = html.escape(f"{hit.collection}/{hit.path}" + (f" · p. {page}" if page else ""))
    crumbs = breadcrumb(hit.heading_path, hit.title)
    snippet = pms.render_snippet(hit.snippet, hit.marks, "html", (f'<span style="{MARK_STYLE}">', "</span>"))
    more = f" &nbsp;·&nbsp; +{copies} similar cop{'y' if copies == 1 else 'ies'}" if copies else ""
    parts = [f'<div style="color:{color}; font-weight:600">{html.escape(hit.title or hit.path)}</div>',
             f'<div style="color:{dim}; font-size:small">{place}'
             + (f" &nbsp;›&nbsp; {html.escape(crumbs)}" if crumbs else "") + more + "</div>"]
    if snippet:
        parts.append(f'<div style="color:{color}">{snippet}</div>')
    return "".join(parts)


class HitDelegate(QStyledItemDelegate):
    """Rich-text rows; the height follows the wrapped snippet. Dividers are a small label.

    Each row's laid-out document is kept until the rows change: the view asks
    every row's size and paints the visible ones, and building the document
    (HTML parse and layout) twice per row cost 30-40 ms a keystroke."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.documents: dict[tuple, QTextDocument] = {}  # (row, selected, palette) -> its document
        self.drawn_for: tuple = ()  # the rows, width and font the documents are for

    @staticmethod
    def _row_width(option: QStyleOptionViewItem) -> int:
        # sizeHint gets no row rect from QListView: the viewport's width is the row's.
        return option.widget.viewport().width() if option.widget else option.rect.width()

    def _document(self, option: QStyleOptionViewItem, index: QModelIndex) -> QTextDocument:
        model = index.model()
        drawn_for = (model.generation, self._row_width(option), option.font.key())
        if drawn_for != self.drawn_for:
            # The same rows at another width (a scroll bar came or went, a pane was resized):
            # QListView lays rows out again only when its height changes, so the rows would
            # keep the heights of the old width and their text would run into the next row.
            rewrap = bool(self.drawn_for) and self.drawn_for[0] == drawn_for[0] and option.widget is not None
            self.documents.clear()
            self.drawn_for = drawn_for
            if rewrap:
                QTimer.singleShot(0, option.widget, option.widget.doItemsLayout)
        selected = bool(option.state & QStyle.State_Selected)
        key = (index.row(), selected, option.palette.cacheKey())
        doc = self.documents.get(key)
        if doc is None:
            doc = self.documents[key] = self._new_document(option, index, selected)
        return doc

    def _new_document(self, option: QStyleOptionViewItem, index: QModelIndex, selected: bool) -> QTextDocument:
        model = index.model()
        row = model.rows[index.row()]
        doc = QTextDocument()
        doc.setDefaultFont(option.font)
        doc.setDocumentMargin(0)
        if isinstance(row, str):
            dim = option.palette.color(QPalette.PlaceholderText).name()
            doc.setHtml(f'<div style="color:{dim}; font-size:small; font-weight:600">{html.escape(row.upper())}</div>')
        else:
            doc.setHtml(hit_html(row, option.palette, selected, len(model.copies.get(index.row(), []))))
        doc.setTextWidth(max(80, self._row_width(option) - 2 * PADDING))
        return doc

    # No initStyleOption(): the option already holds what we use (state, rect, palette).
    def paint(self, painter, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        divider = isinstance(index.model().rows[index.row()], str)
        style = option.widget.style() if option.widget else QApplication.style()
        if divider:
            painter.save()
            painter.setPen(option.palette.color(QPalette.Mid))
            y = option.rect.top() + PADDING // 2
            painter.drawLine(option.rect.left() + PADDING, y, option.rect.right() - PADDING, y)
            painter.restore()
        else:
            style.drawControl(QStyle.CE_ItemViewItem, option, painter, option.widget)
        doc = self._document(option, index)
        painter.save()
        painter.translate(option.rect.left() + PADDING, option.rect.top() + PADDING)
        doc.documentLayout().draw(painter, QAbstractTextDocumentLayout.PaintContext())
        painter.restore()

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex) -> QSize:
        doc = self._document(option, index)
        return QSize(self._row_width(option), int(doc.size().height()) + 2 * PADDING)
