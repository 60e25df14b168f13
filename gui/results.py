"""The results list: a plain list model of ``pms.Hit`` and a delegate that draws
title, place, heading breadcrumb, snippet (query terms marked) and score."""

from __future__ import annotations

import html

from PySide6.QtCore import QModelIndex, QRect, QSize, Qt
from PySide6.QtGui import QAbstractTextDocumentLayout, QPalette, QStandardItem, QStandardItemModel, QTextDocument
from PySide6.QtWidgets import QApplication, QStyle, QStyledItemDelegate, QStyleOptionViewItem

HitRole = Qt.UserRole + 1
PADDING = 8
SCORE_WIDTH = 56
MARK_STYLE = "background-color:#ffe066; color:#000000"


class ResultsModel(QStandardItemModel):
    """The hits of the last search, one item each (the Hit itself under HitRole).

    A QStandardItemModel rather than a Python ``data()`` override: PySide6 6.12
    on Python 3.11 drops a reference to None each time such an override answers
    None (which Qt asks for a dozen roles per paint), until the interpreter aborts.
    """

    def __init__(self, parent=None):
        super().__init__(parent)
        self.hits: list = []
        self.query = ""

    def set_hits(self, hits: list, query: str) -> None:
        self.hits, self.query = list(hits), query
        items = []
        for hit in self.hits:
            item = QStandardItem(hit.title)
            item.setData(hit, HitRole)
            item.setToolTip(hit.abspath)
            item.setEditable(False)
            items.append(item)
        self.clear()
        self.invisibleRootItem().appendRows(items)


def breadcrumb(heading_path: str, title: str) -> str:
    """'Title > Setup > Keys' under a result titled 'Title' reads 'Setup › Keys'."""
    parts = [p.strip() for p in (heading_path or "").split(" > ") if p.strip()]
    if parts and parts[0] == title:
        parts = parts[1:]
    return " › ".join(parts)


def hit_html(hit, palette: QPalette, selected: bool) -> str:
    text_role = QPalette.HighlightedText if selected else QPalette.Text
    dim_role = QPalette.HighlightedText if selected else QPalette.PlaceholderText
    color, dim = palette.color(text_role).name(), palette.color(dim_role).name()
    place = html.escape(f"{hit.collection}/{hit.path}")
    crumbs = breadcrumb(hit.heading_path, hit.title)
    snippet = (hit.snippet or "").replace("<mark>", f'<span style="{MARK_STYLE}">').replace("</mark>", "</span>")
    parts = [f'<div style="color:{color}; font-weight:600">{html.escape(hit.title or hit.path)}</div>',
             f'<div style="color:{dim}; font-size:small">{place}'
             + (f" &nbsp;›&nbsp; {html.escape(crumbs)}" if crumbs else "") + "</div>"]
    if snippet:
        parts.append(f'<div style="color:{color}">{snippet}</div>')
    return "".join(parts)


class HitDelegate(QStyledItemDelegate):
    """Rich-text rows; the height follows the wrapped snippet."""

    @staticmethod
    def _row_width(option: QStyleOptionViewItem) -> int:
        # sizeHint gets no row rect from QListView: the viewport's width is the row's.
        return option.widget.viewport().width() if option.widget else option.rect.width()

    def _document(self, option: QStyleOptionViewItem, index: QModelIndex) -> QTextDocument:
        hit = index.data(HitRole)
        doc = QTextDocument()
        doc.setDefaultFont(option.font)
        doc.setDocumentMargin(0)
        selected = bool(option.state & QStyle.State_Selected)
        doc.setHtml(hit_html(hit, option.palette, selected))
        doc.setTextWidth(max(80, self._row_width(option) - 2 * PADDING - SCORE_WIDTH))
        return doc

    # No initStyleOption(): the option already holds what we use (state, rect, palette).
    def paint(self, painter, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        hit = index.data(HitRole)
        style = option.widget.style() if option.widget else QApplication.style()
        style.drawControl(QStyle.CE_ItemViewItem, option, painter, option.widget)
        doc = self._document(option, index)
        painter.save()
        painter.translate(option.rect.left() + PADDING, option.rect.top() + PADDING)
        context = QAbstractTextDocumentLayout.PaintContext()
        doc.documentLayout().draw(painter, context)
        painter.restore()
        selected = bool(option.state & QStyle.State_Selected)
        painter.save()
        painter.setPen(option.palette.color(QPalette.HighlightedText if selected else QPalette.PlaceholderText))
        font = option.font
        font.setPointSizeF(max(6.0, font.pointSizeF() * 0.85))
        painter.setFont(font)
        right = option.rect.left() + self._row_width(option)
        score_rect = QRect(right - SCORE_WIDTH - PADDING, option.rect.top() + PADDING,
                           SCORE_WIDTH, option.fontMetrics.height())
        painter.drawText(score_rect, Qt.AlignRight | Qt.AlignVCenter, f"{hit.score:.3g}")
        painter.restore()

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex) -> QSize:
        doc = self._document(option, index)
        return QSize(self._row_width(option), int(doc.size().height()) + 2 * PADDING)
