"""The note preview: Markdown rendered by Qt, scrolled to the passage a search found.

Nothing here touches the network: ``loadResource`` refuses remote URLs, web
links go to the system browser, links to other notes open in the preview.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from urllib.parse import quote, unquote

from PySide6.QtCore import QByteArray, QEvent, Qt, QUrl, Signal
from PySide6.QtGui import QColor, QDesktopServices, QImage, QPalette, QTextCursor, QTextDocument
from PySide6.QtWidgets import QTextBrowser, QTextEdit

import pms
from gui.note_html import Colours, markdown_to_html, style_sheet

WIKI_SCHEME = "pms-wiki"
REMOTE_SCHEMES = {"http", "https", "ftp", "ws", "wss"}
MAX_HIGHLIGHTS = 400
HTML_CACHE_NOTES = 24
# A marked query term: readable on light and dark palettes alike.
MARK_BACKGROUND = QColor("#ffe066")
MARK_FOREGROUND = QColor("#000000")
PASSAGE_BACKGROUND = QColor(255, 224, 102, 70)  # the mark colour, faint: works on light and dark

_WIKILINK = re.compile(r"(!?)\[\[([^\[\]|#\n]*)(#[^\[\]|\n]*)?(?:\|([^\[\]\n]+))?\]\]")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def wikilinks_to_markdown(body: str) -> str:
    """Obsidian ``[[Note]]``, ``[[Note#Heading|label]]`` and ``![[image.png]]``
    become ordinary Markdown links, outside code fences only."""

    def replace(m: re.Match) -> str:
        embed, target, heading, label = m.group(1), m.group(2).strip(), m.group(3) or "", m.group(4)
        if embed and re.search(r"\.(png|jpe?g|gif|svg|webp|bmp)$", target, re.I):
            return f"![{target}]({quote(target)})"
        text = label or (target + heading.replace("#", " › ") if target else heading.lstrip("#"))
        href = f"{WIKI_SCHEME}:{quote(target)}" + (f"#{quote(heading[1:])}" if heading else "")
        return f"[{text}]({href})"

    out, fence = [], None
    for line in body.split("\n"):
        m = _FENCE.match(line)
        if m:
            marker = m.group(1)[0]
            fence = None if fence == marker else (fence or marker)
            out.append(line)
            continue
        out.append(line if fence else _WIKILINK.sub(replace, line))
    return "\n".join(out)


def plain_line(line: str) -> str:
    """A Markdown source line as it reads once rendered (good enough to find it)."""
    line = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", line)      # links and images -> their text
    line = _WIKILINK.sub(lambda m: m.group(4) or m.group(2), line)
    line = re.sub(r"^\s{0,3}(#{1,6}\s+|>\s?|[-*+]\s+(\[[ xX]\]\s+)?|\d+[.)]\s+)", "", line)
    line = re.sub(r"[*_`~|]+", " ", line)
    line = html.unescape(re.sub(r"<[^>]+>", "", line))
    return re.sub(r"\s+", " ", line).strip()


def term_pattern(words) -> str | None:
    """A regex for the query words: longer ones by prefix, so 'sync' lights up
    'syncing'; two- and three-letter ones whole, so 'ai' leaves 'aim' alone."""
    whole = sorted({re.escape(w) for w in words if 2 <= len(w) <= 3})
    stems = sorted({re.escape(w[: max(4, len(w) - 2)]) for w in words if len(w) > 3}, key=len, reverse=True)
    parts = ([r"\b(?:" + "|".join(stems) + r")\w*"] if stems else []) + ([r"\b(?:" + "|".join(whole) + r")\b"] if whole else [])
    return "|".join(parts) or None


def palette_colours(palette: QPalette) -> Colours:
    """The preview's colours from the widget palette, so they follow a light/dark switch."""
    base, text = palette.color(QPalette.Base), palette.color(QPalette.Text)
    dark = base.lightness() < 128

    def mix(amount: float) -> str:  # ``amount`` of the text colour over the background
        return QColor.fromRgbF(*(b + (t - b) * amount for b, t in zip(base.getRgbF()[:3], text.getRgbF()[:3]))).name()

    return Colours(muted=mix(0.62), link=palette.color(QPalette.Link).name(),
                   code_background=mix(0.12 if dark else 0.06), quote_bar=mix(0.35), rule=mix(0.25))


class NotePreview(QTextBrowser):
    """A read-only view of one note. ``show_note`` renders and scrolls."""

    status_message = Signal(str)

    def __init__(self, kb, parent=None):
        super().__init__(parent)
        self.kb = kb
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)
        self.anchorClicked.connect(self._follow_link)
        self.document().setDocumentMargin(16)
        self.abspath: Path | None = None
        self.passage_block = -1          # block number the view was scrolled to (tests read it)
        self.renders = 0                 # notes rendered so far (tests and benchmarks read it)
        self.shown: tuple | None = None  # (path, text, style sheet) of the document on screen
        self.plain: str | None = None    # its plain text, lower-cased, once needed
        self.html_cache: dict[tuple, str] = {}  # (path, text) -> HTML: arrowing back and forth parses once
        self.rendered: tuple | None = None  # show_note's arguments, to render again when the palette changes
        self.keep_passage = False  # scroll back to the passage while the layout settles
        self.verticalScrollBar().rangeChanged.connect(self._keep_passage_in_view)
        self.verticalScrollBar().actionTriggered.connect(self._user_scrolled)  # arrows, page, drag
        self.setPlaceholderText("Select a result to read the note here.")

    # -- rendering ---------------------------------------------------------------------
    def clear_note(self) -> None:
        self.shown, self.plain = None, None
        self.abspath = None
        self.rendered = None
        self.passage_block = -1
        self.keep_passage = False
        self.clear()

    def show_note(self, abspath: str | Path, *, text: str | None = None, start_line: int = 0,
                  end_line: int = 0, heading: str = "", words=()) -> bool:
        """Render the note at ``abspath`` (``text`` if already read), scroll to
        ``start_line`` (1-based, in the file) and mark ``words``."""
        abspath = Path(abspath)
        if text is None:
            try:
                text = pms.decode_text(pms.read_note_file(abspath))
            except (OSError, pms.PMSError) as exc:  # unreadable, binary, too large
                self.clear_note()
                self.status_message.emit(f"Cannot read {abspath.name}: {exc}")
                return False
        block, body, _ = pms.split_frontmatter(text)
        meta = pms.parse_frontmatter(block)
        doc = self.document()
        doc.setBaseUrl(QUrl.fromLocalFile(str(abspath.parent) + "/"))
        self.setSearchPaths([str(abspath.parent)])
        self.abspath = abspath
        self.rendered = (abspath, text, start_line, end_line, heading, tuple(words))
        self.renders += 1
        self.passage_block, self.keep_passage = -1, False
        sheet = style_sheet(palette_colours(self.palette()))
        if self.shown != (abspath, text, sheet):
            # The same note again (the top result while typing on): only the marks and the scroll change.
            self.shown = (abspath, text, sheet)
            self.plain = None
            doc.setDefaultStyleSheet(sheet)
            header = self._header_html(meta, pms.first_heading(body) or "")
            doc.setHtml(header + self._html(body, abspath))
        self._highlight(words)
        lines = text.split("\n")
        if start_line > 1 or heading:
            target = self._find_passage(lines, start_line, end_line or start_line + 20, heading, words)
            if target is not None:
                self._scroll_to(target)
                return True
        self.verticalScrollBar().setValue(0)
        return True

    def _html(self, body: str, abspath: Path) -> str:
        key = (abspath, body)
        if key not in self.html_cache:
            if len(self.html_cache) >= HTML_CACHE_NOTES:
                self.html_cache.pop(next(iter(self.html_cache)))  # the oldest
            self.html_cache[key] = markdown_to_html(wikilinks_to_markdown(body), abspath.parent)
        return self.html_cache[key]

    @staticmethod
    def _header_html(meta: dict, heading: str) -> str:
        """The frontmatter as one small line: title (when the note has no matching
        heading), tags, source link, author and dates."""
        parts = []
        if meta.get("title") and str(meta["title"]).strip() != heading.strip():
            parts.append(f"<b>{html.escape(str(meta['title']))}</b>")
        tags = meta.get("tags")
        tags = tags if isinstance(tags, (list, tuple)) else [tags] if tags else []
        # "tags: a, b" and "tags: [a, b]" both mean two tags.
        names = [t.lstrip("#") for tag in tags for t in re.split(r"[,\s]+", str(tag)) if t.lstrip("#")]
        if names:
            parts.append(" ".join(f"#{html.escape(name)}" for name in names))
        source = str(meta.get("source") or meta.get("url") or "")
        if source.startswith(("http://", "https://")):
            label = re.sub(r"^https?://(www\.)?", "", source)
            label = label if len(label) <= 60 else label[:57] + "…"
            parts.append(f'<a href="{html.escape(source)}">{html.escape(label)}</a>')
        for key in ("author", "clipped", "date"):
            if meta.get(key):
                parts.append(html.escape(str(meta[key])))
        if not parts:
            return ""
        return '<p class="header"><small>' + " · ".join(parts) + "</small></p>\n"

    def _plain_text(self) -> str:
        """The document's text, lower-cased, one character per document position
        (Python searches it far faster than QTextDocument.find)."""
        if self.plain is None:
            self.plain = self.document().toPlainText().lower()
        return self.plain

    def _cursor(self, start: int, end: int) -> QTextCursor:
        cursor = QTextCursor(self.document())
        cursor.setPosition(start)
        cursor.setPosition(end, QTextCursor.KeepAnchor)
        return cursor

    def _find_passage(self, lines: list[str], start_line: int, end_line: int, heading: str, words=()) -> QTextCursor | None:
        """Where the passage (lines ``start_line``..``end_line`` of the file) ended up
        in the rendered document: its first line with a query word, else its first line."""
        plain = self._plain_text()
        candidates = [plain_line(line) for line in lines[max(0, start_line - 1) : end_line]]
        pattern = term_pattern(words)
        if pattern:
            with_terms = [c for c in candidates if re.search(pattern, c, re.I)]
            candidates = with_terms + candidates
        if heading:
            candidates.append(heading.split(" › ")[-1].split(" > ")[-1])
        for text in candidates:
            words = text.split()
            if len(re.sub(r"\W", "", text)) < 3:
                continue
            for needle in (" ".join(words[:8]).lower(), " ".join(words[:3]).lower()):
                found = plain.find(needle)
                if found >= 0:
                    return self._cursor(found, found + len(needle))
        return None

    def _scroll_to(self, cursor: QTextCursor) -> None:
        block = cursor.block()
        self.passage_block = block.blockNumber()
        # Qt lays a long document out in steps after setHtml: the scroll range and the
        # passage's position keep changing for a while. Until the user scrolls, every
        # change of the range scrolls the passage back to the top of the view.
        self.keep_passage = True
        self._keep_passage_in_view()
        # A quiet background on the passage's first paragraph, under the term marks.
        # (FullWidthSelection would look nicer but crashes Qt 6.12 once the view is scrolled.)
        passage = QTextEdit.ExtraSelection()
        cursor = QTextCursor(block)
        cursor.movePosition(QTextCursor.EndOfBlock, QTextCursor.KeepAnchor)
        passage.cursor = cursor
        passage.format.setBackground(PASSAGE_BACKGROUND)
        self.setExtraSelections([passage, *self.extraSelections()])

    def passage_top(self) -> int | None:
        """Where the passage starts, in document pixels (None: not scrolled to one)."""
        if self.passage_block < 0:
            return None
        cursor = QTextCursor(self.document().findBlockByNumber(self.passage_block))
        return self.cursorRect(cursor).top() + self.verticalScrollBar().value()

    def _keep_passage_in_view(self, *_range) -> None:
        if not self.keep_passage or self.passage_block < 0:
            return
        self.verticalScrollBar().setValue(max(0, self.passage_top() - 12))

    def _user_scrolled(self, *_args) -> None:
        self.keep_passage = False

    def wheelEvent(self, event) -> None:
        self.keep_passage = False
        super().wheelEvent(event)

    def keyPressEvent(self, event) -> None:
        self.keep_passage = False
        super().keyPressEvent(event)

    def _highlight(self, words) -> None:
        pattern = term_pattern(words)
        selections = []
        if pattern:
            for match in re.finditer(pattern, self._plain_text(), re.I):
                mark = QTextEdit.ExtraSelection()
                mark.cursor = self._cursor(match.start(), match.end())
                mark.format.setBackground(MARK_BACKGROUND)
                mark.format.setForeground(MARK_FOREGROUND)
                selections.append(mark)
                if len(selections) >= MAX_HIGHLIGHTS:
                    break
        self.setExtraSelections(selections)

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.PaletteChange and self.rendered:
            # The colours are baked into the HTML: a light/dark switch renders the note again.
            abspath, text, start_line, end_line, heading, words = self.rendered
            position = self.verticalScrollBar().value()
            self.show_note(abspath, text=text, start_line=start_line, end_line=end_line, heading=heading, words=words)
            self.verticalScrollBar().setValue(position)

    # -- links and resources -------------------------------------------------------
    def loadResource(self, kind, url: QUrl):
        if url.scheme().lower() in REMOTE_SCHEMES:
            # Never fetch from the network: a note must not phone home. (An empty
            # answer, not None: PySide6 loses a reference to None per None returned.)
            return QByteArray()
        if kind == QTextDocument.ImageResource and url.isLocalFile():
            image = QImage(url.toLocalFile())
            room = max(64, self.viewport().width() - 2 * int(self.document().documentMargin()) - 8)
            if not image.isNull():
                # Wider than the pane: scaled down to fit (the file is untouched).
                return image.scaledToWidth(room, Qt.SmoothTransformation) if image.width() > room else image
        return super().loadResource(kind, url)

    def _follow_link(self, url: QUrl) -> None:
        scheme = url.scheme().lower()
        if scheme in REMOTE_SCHEMES or scheme == "mailto":
            QDesktopServices.openUrl(url)
            return
        if scheme == WIKI_SCHEME:
            self.open_wikilink(unquote(url.path()), unquote(url.fragment()))
            return
        if not scheme and not url.path() and url.fragment():
            self.scrollToAnchor(url.fragment())
            return
        target = url if scheme == "file" else self.document().baseUrl().resolved(url)
        path = Path(target.toLocalFile())
        if path.suffix.lower() != ".md" and not path.exists() and path.with_suffix(".md").exists():
            path = path.with_suffix(".md")
        if path.suffix.lower() in (".md", ".markdown") and path.is_file():
            self.show_note(path, heading=unquote(url.fragment()))
        elif path.exists():
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(path)))
        else:
            self.status_message.emit(f"Link target not found: {path.name}")

    def open_wikilink(self, target: str, heading: str = "") -> bool:
        """Obsidian resolves [[Name]] by file name anywhere in the vault: so do we,
        nearest to the current note first."""
        path = self.resolve_wikilink(target)
        if path is None:
            self.status_message.emit(f"No note named “{target}”")
            return False
        return self.show_note(path, heading=heading)

    def resolve_wikilink(self, target: str) -> Path | None:
        if not target:
            return self.abspath
        here = self.abspath.parent if self.abspath else None
        name = target if target.lower().endswith(".md") else target + ".md"
        if here and (here / name).is_file():
            return here / name
        wanted = Path(name).name.lower()
        collections = self.kb.collections.list()
        collections.sort(key=lambda c: 0 if here and here.is_relative_to(c.path) else 1)
        for col in collections:
            for rel in col.files:
                if Path(rel).name.lower() == wanted or rel.lower() == name.lower():
                    return col.path / rel
        return None
