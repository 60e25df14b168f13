"""The note preview: Markdown rendered by Qt, scrolled to the passage a search found.

Nothing here touches the network: ``loadResource`` refuses remote URLs, web
links go to the system browser, links to other notes open in the preview.
"""

from __future__ import annotations

import bisect
import dataclasses
import html
import re
import time
from pathlib import Path
from urllib.parse import quote, unquote

from PySide6.QtCore import QByteArray, QEvent, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import (
    QColor,
    QDesktopServices,
    QImage,
    QPalette,
    QTextCursor,
    QTextDocument,
)
from PySide6.QtWidgets import QTextBrowser, QTextEdit

import pms
from gui.note_html import CODE_ANCHOR, LINE_ANCHOR, Colours, markdown_to_html, style_sheet
from gui.workers import AnswerThread

WIKI_SCHEME = "pms-wiki"
REMOTE_SCHEMES = {"http", "https", "ftp", "ws", "wss"}
MAX_HIGHLIGHTS = 400
HTML_CACHE_NOTES = 24
STEP_SECONDS = 0.012        # a staged render's layout slices stop after this long, to let input in
LAYOUT_SLICE_CHARS = 1500   # characters laid out between two looks at the clock
SCREEN_CHARS = 3000         # about a screenful of text: laid out and marked before the note is shown
# A marked query term: readable on light and dark palettes alike.
MARK_BACKGROUND = QColor("#ffe066")
MARK_FOREGROUND = QColor("#000000")
PASSAGE_BACKGROUND = QColor(255, 224, 102, 70)  # the mark colour, faint: works on light and dark

IMAGE = re.compile(r"\.(png|jpe?g|gif|svg|webp|bmp)$", re.I)


def wikilinks_to_markdown(body: str, label_first: bool = False, titles: dict[str, str] | None = None) -> str:
    """Obsidian ``[[Note]]``, ``[[Note#Heading|label]]`` and ``![[image.png]]`` (Dendron's
    ``[[label|note.name]]`` when ``label_first``: pms.links_label_first of the frontmatter)
    become ordinary Markdown links, where and as the engine reads links (not in code); a
    label-less link shows its note's title when ``titles`` (KnowledgeBase.link_titles: by the
    target in lower case) has it."""

    def replace(target: str, fragment: str, label: str, embed: bool) -> str:
        if embed and IMAGE.search(target):
            return f"![{target}]({quote(target)})"
        text = label or pms.wikilink_text((titles or {}).get(target.lower(), target), fragment)
        href = f"{WIKI_SCHEME}:{quote(target)}" + (f"#{quote(fragment[1:])}" if fragment else "")
        return f"[{text}]({href})"

    return pms.replace_wikilinks(body, replace, label_first)


# ASCII punctuation that Markdown could read as markup: a PDF's text is shown as it is.
_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_\[\]<>#|~=+!-])")


def pdf_page_markdown(title: str, page: int, text: str, start_line: int, end_line: int) -> tuple[str, int, int]:
    """A PDF page's text (``get file.pdf:N``) as Markdown for the preview: the title,
    the page number, then the page's lines, with the passage (lines ``start_line``..
    ``end_line`` of the page) as one paragraph of its own, so its tint covers it
    whole. Returns (markdown, the passage's first and last line in it)."""
    lines = [re.sub(r"^(\s*\d+)([.)])", r"\1\\\2", _MARKDOWN_PUNCTUATION.sub(r"\\\1", line)) for line in text.split("\n")]
    heading = _MARKDOWN_PUNCTUATION.sub(r"\\\1", title)
    start, end = max(1, start_line or 1), max(start_line or 1, end_line or 1)
    before, passage, after = lines[: start - 1], [line for line in lines[start - 1 : end] if line.strip()], lines[end:]
    out = [f"# {heading}", "", f"*p. {page}*", ""]
    if before:
        out += [*before, ""]
    first = len(out) + 1
    out += passage
    last = len(out)
    if after:
        out += ["", *after]
    return "\n".join(out) + "\n", first, last


def palette_colours(palette: QPalette) -> Colours:
    """The preview's colours from the widget palette, so they follow a light/dark switch."""
    base, text = palette.color(QPalette.Base), palette.color(QPalette.Text)
    dark = base.lightness() < 128

    def mix(amount: float) -> str:  # ``amount`` of the text colour over the background
        return QColor.fromRgbF(*(b + (t - b) * amount for b, t in zip(base.getRgbF()[:3], text.getRgbF()[:3]))).name()

    link = palette.color(QPalette.Link)
    highlight = QColor.fromRgbF(*(b + (t - b) * (0.35 if dark else 0.15) for b, t in zip(base.getRgbF()[:3], link.getRgbF()[:3])))
    return Colours(muted=mix(0.62), link=link.name(), code_background=mix(0.12 if dark else 0.06), quote_bar=mix(0.35),
                   rule=mix(0.25), highlight=highlight.name())


def _note_html(abspath: Path, body: str, label_first: bool, titles: dict[str, str]) -> tuple[Path, str, str]:
    """(abspath, body, its HTML): the preview's worker thread runs this."""
    return abspath, body, markdown_to_html(wikilinks_to_markdown(body, label_first, titles), abspath.parent)


def _shown_note(text: str) -> tuple[dict, str, bool]:
    """(a note's frontmatter, its body as the index holds it: Dendron's ``{{fm.field}}`` as the
    field's value, whether it writes ``[[label|target]]``): the engine's rules."""
    block, body, _ = pms.split_frontmatter(text)
    try:
        meta = pms.parse_frontmatter(block)
    except pms.PMSError:  # a frontmatter the engine refuses: shown as it is, its links read as Obsidian's
        return {}, body, False
    return meta, pms.with_frontmatter_values(body, meta), pms.links_label_first(meta)


@dataclasses.dataclass
class _Render:
    """A note on its way to the screen, and the step it has reached."""
    abspath: Path
    text: str
    start_line: int
    end_line: int
    heading: str
    words: tuple
    sheet: str
    staged: bool
    stage: str = "html"   # html -> (html-wait) -> build -> attach -> find -> layout -> reveal -> rest
    document: QTextDocument | None = None
    target: int = -1      # the passage's position in the document (-1: the top)
    marks: list = dataclasses.field(default_factory=list)  # (start, end) of each query word
    marked: int = 0       # how many of them are marked so far
    shown: tuple | None = None  # _shown_note(text), read at the html step for the build step


class NotePreview(QTextBrowser):
    """A read-only view of one note. ``show_note`` renders and scrolls."""

    status_message = Signal(str)
    note_shown = Signal()  # a staged render is on screen: scrolled to its passage, marked
    note_followed = Signal(str)  # a link in the note opened this note (its path) in the preview

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
        self.lines: list | None = None   # its (body line, position) anchors, once needed
        self.html_cache: dict[tuple, str] = {}  # (path, text) -> HTML: arrowing back and forth parses once
        self.rendered: tuple | None = None  # show_note's arguments, to render again when the palette changes
        self.keep_passage = False  # scroll back to the passage while the layout settles
        self.job: _Render | None = None  # the note on its way to the screen
        self.laid_out = 0                # the document is laid out down to this position
        self.step_timer = QTimer(self, singleShot=True, interval=0)
        self.step_timer.timeout.connect(self._next_step)
        self.html_request = 0
        self.html_worker = AnswerThread("pms-preview-html", _note_html)
        self.html_worker.done.connect(self._html_ready)
        self.html_worker.start()
        self.verticalScrollBar().rangeChanged.connect(self._keep_passage_in_view)
        self.verticalScrollBar().actionTriggered.connect(self._user_scrolled)  # arrows, page, drag
        self.setPlaceholderText("Select a result to read the note here.")

    # -- rendering ---------------------------------------------------------------------
    # A long chapter costs 100-200 ms to parse, lay out and mark in one go, and Qt
    # cannot take a key press meanwhile. So a note is shown in steps, each a short
    # turn of the event loop: Markdown -> HTML in a worker thread; the document
    # built off screen; laid out slice by slice down to the passage, with the view's
    # painting held (the old note stays on screen); then scrolled, marked and shown;
    # then the rest laid out and marked in further slices.
    def clear_note(self) -> None:
        self._drop_render()
        self.shown, self.plain, self.lines = None, None, None
        self.abspath = None
        self.rendered = None
        self.passage_block = -1
        self.keep_passage = False
        self.setExtraSelections([])
        self.clear()

    def show_pending(self, title: str) -> None:
        """While typing or arrowing on: which note comes here once the keys rest (a
        cheap line, never the previous note's text next to another selected row)."""
        self._drop_render()
        self.shown, self.plain, self.lines, self.abspath, self.rendered = None, None, None, None, None
        self.passage_block, self.keep_passage = -1, False
        self.setExtraSelections([])
        self.setHtml(f'<p style="color:gray"><b>{html.escape(title)}</b></p>')

    def show_note(self, abspath: str | Path, *, text: str | None = None, start_line: int = 0,
                  end_line: int = 0, heading: str = "", words=(), staged: bool = False) -> bool:
        """Render the note at ``abspath`` (``text`` if already read), scroll to
        ``start_line`` (1-based, in the file) and mark ``words``. ``staged``: in
        short steps between events (``note_shown`` says when it is on screen);
        otherwise at once."""
        abspath = Path(abspath)
        if text is None:
            try:
                text = pms.decode_text(pms.read_note_file(abspath))
            except (OSError, pms.PMSError) as exc:  # unreadable, binary, too large
                self.clear_note()
                self.status_message.emit(f"Cannot read {abspath.name}: {exc}")
                return False
        self._drop_render()
        self.rendered = (abspath, text, start_line, end_line, heading, tuple(words))
        self.renders += 1
        self.job = _Render(abspath, text, start_line, end_line, heading, tuple(words),
                           style_sheet(palette_colours(self.palette())), staged)
        if staged:
            self.step_timer.start()
        else:
            while self.job is not None:
                self._step(None)
        return True

    def ready(self) -> bool:
        """True unless a staged render has not reached the screen yet."""
        return self.job is None or self.job.stage == "rest"

    def _drop_render(self) -> None:
        """Forget a render still on its way (a newer note replaces it)."""
        self.step_timer.stop()
        self.job = None
        self.html_request += 1
        if not self.viewport().updatesEnabled():
            self.viewport().setUpdatesEnabled(True)

    def _next_step(self) -> None:
        if self.job is not None:
            self._step(time.perf_counter() + STEP_SECONDS)
            if self.job is not None and self.job.stage != "html-wait":
                self.step_timer.start()

    def _step(self, deadline: float | None) -> None:
        """One step of ``self.job``; ``deadline`` (perf_counter seconds) bounds the layout slices."""
        job = self.job
        if job.stage == "html":
            job.shown = _shown_note(job.text)
            _, body, label_first = job.shown
            if self.shown == (job.abspath, job.text, job.sheet):
                job.stage = "find"  # the same note (the top result while typing on): only marks and scroll change
            elif (job.abspath, body) in self.html_cache:
                job.stage = "build"
            elif job.staged:
                job.stage = "html-wait"
                self.html_request += 1
                self.html_worker.submit(self.html_request, job.abspath, body, label_first, self._link_titles(job.abspath, body, label_first))
            else:
                self._cache_html(*_note_html(job.abspath, body, label_first, self._link_titles(job.abspath, body, label_first)))
                job.stage = "build"
        elif job.stage == "build":
            meta, body, _ = job.shown or _shown_note(job.text)
            doc = QTextDocument(self)  # off screen: nothing is laid out while it is filled
            doc.setDocumentMargin(16)
            doc.setDefaultStyleSheet(job.sheet)
            doc.setBaseUrl(QUrl.fromLocalFile(str(job.abspath.parent) + "/"))
            header = self._header_html(meta, pms.first_heading(body) or "")
            doc.setHtml(header + self.html_cache[(job.abspath, body)])
            job.document, job.stage = doc, "attach"
        elif job.stage == "attach":
            self.setExtraSelections([])  # their cursors point into the old document
            if job.staged:
                self.viewport().setUpdatesEnabled(False)  # the old note stays on screen until the passage is ready
            self.setSearchPaths([str(job.abspath.parent)])
            previous = self.document()
            # QTextEdit deletes only its own first document: each note's would stay alive.
            previous = previous if previous.parent() is self else None
            self.setDocument(job.document)
            if previous is not None:
                previous.deleteLater()
            self.shown, self.plain, self.lines, self.laid_out = (job.abspath, job.text, job.sheet), None, None, 0
            job.document, job.stage = None, "find"
        elif job.stage == "find":
            self.abspath = job.abspath
            self.passage_block, self.keep_passage = -1, False
            pattern = pms.highlight_pattern(job.words)  # the engine's rule, as the snippets' marks
            if job.start_line > 1:
                # By line numbers: the block of the passage's first line that holds a query
                # word (else of its first line), wherever the same words occur elsewhere.
                _, _, consumed = pms.split_frontmatter(job.text)
                line = job.start_line
                if pattern:
                    lines = job.text.split("\n")[job.start_line - 1 : max(job.end_line, job.start_line)]
                    line += next((i for i, text in enumerate(lines) if pattern.search(text)), 0)
                job.target = self.line_position(line - consumed)
            elif job.heading:  # a link to a heading: no line number, its text
                job.target = self._find_heading(job.heading)
            job.marks = [m.span() for m in pattern.finditer(self._plain_text())][:MAX_HIGHLIGHTS] if pattern else []
            job.stage = "layout"
        elif job.stage == "layout":
            if self._lay_out_to(max(0, job.target) + SCREEN_CHARS, deadline):  # the passage and a screenful below
                job.stage = "reveal"
        elif job.stage == "reveal":
            self.verticalScrollBar().setValue(0)
            if job.target >= 0:
                self._scroll_to(job.target)
            self._mark(job, self.laid_out)
            self.viewport().setUpdatesEnabled(True)
            job.stage = "rest"
            self.note_shown.emit()
        elif job.stage == "rest":
            end = self.document().characterCount()
            if self._lay_out_to(end, deadline):
                if job.marked < len(job.marks):
                    self._mark(job, end)
                self.job = None

    def _link_titles(self, abspath: Path, body: str, label_first: bool) -> dict[str, str]:
        """The titles a Dendron note's label-less links show (the engine's KnowledgeBase.link_titles);
        none for another note, or one the index does not hold."""
        if not label_first or "[[" not in body:
            return {}
        try:
            return self.kb.link_titles(str(abspath), body)
        except pms.PMSError:  # not in the index (yet)
            return {}

    def _cache_html(self, abspath: Path, body: str, text: str) -> None:
        if len(self.html_cache) >= HTML_CACHE_NOTES:
            self.html_cache.pop(next(iter(self.html_cache)))  # the oldest
        self.html_cache[(abspath, body)] = text

    def _html_ready(self, number: int) -> None:
        answer = self.html_worker.answer(number)
        if answer is None:
            return  # replaced by a newer request
        self._cache_html(*answer)  # wanted now, or maybe again soon (arrowing back)
        job = self.job
        if number != self.html_request or job is None or job.stage != "html-wait":
            return  # a note the user has moved past
        job.stage = "build"
        self.step_timer.start()

    def _lay_out_to(self, position: int, deadline: float | None) -> bool:
        """Lay the document out down to ``position``, a slice at a time until
        ``deadline``; True once it is there."""
        doc = self.document()
        layout = doc.documentLayout()
        position = min(position, doc.characterCount() - 1)
        while self.laid_out < position:
            self.laid_out = min(position, self.laid_out + LAYOUT_SLICE_CHARS)
            layout.blockBoundingRect(doc.findBlock(self.laid_out))  # lays out every block up to this one
            if deadline is not None and time.perf_counter() > deadline:
                break
        return self.laid_out >= position

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

    def line_position(self, line: int) -> int:
        """Where body line ``line`` (1-based, after the frontmatter) is in the document: the
        block it is in (the last block starting on or before it; in code, its own line); -1: none."""
        if self.lines is None:
            self.lines = []  # (first line, position, lines of code or 0)
            block = self.document().begin()
            while block.isValid():
                it = block.begin()
                while not it.atEnd():
                    fragment = it.fragment()
                    for name in fragment.charFormat().anchorNames():
                        if name.startswith(LINE_ANCHOR):
                            self.lines.append((int(name[len(LINE_ANCHOR):]), fragment.position(), 0))
                        elif name.startswith(CODE_ANCHOR):
                            first, end = map(int, name[len(CODE_ANCHOR):].split("-"))
                            self.lines.append((first, fragment.position(), max(1, end - first)))
                    it += 1
                block = block.next()
            self.lines.sort()
        at = bisect.bisect_right(self.lines, (line, float("inf"), 0)) - 1
        if at < 0:
            return -1
        first, position, code_lines = self.lines[at]
        if code_lines and line > first:
            block = self.document().findBlock(position)
            for _ in range(min(line - first, code_lines - 1)):
                if block.next().isValid():
                    block = block.next()
            return block.position()
        return position

    def _cursor(self, start: int, end: int) -> QTextCursor:
        cursor = QTextCursor(self.document())
        cursor.setPosition(start)
        cursor.setPosition(end, QTextCursor.KeepAnchor)
        return cursor

    def _find_heading(self, heading: str) -> int:
        """Where a heading a link names (``Note#Heading``; Dendron's ``#heading-slug,1:#*``) is in the
        document; -1: not found."""
        text = pms.wikilink_text("", "#" + heading).split(" › ")[-1].split(" > ")[-1].strip().lower()
        if len(re.sub(r"\W", "", text)) < 3:
            return -1
        found = self._plain_text().find(text)
        return found if found >= 0 or "-" not in text else self._plain_text().find(text.replace("-", " "))

    def _scroll_to(self, position: int) -> None:
        self.passage_block = self.document().findBlock(position).blockNumber()
        # Qt lays a long document out in steps after setHtml: the scroll range and the
        # passage's position keep changing for a while. Until the user scrolls, every
        # change of the range scrolls the passage back to the top of the view.
        self.keep_passage = True
        self._keep_passage_in_view()

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

    def _mark(self, job: _Render, upto: int) -> None:
        """A quiet background on the passage's first paragraph and the query words
        marked, those before ``upto`` (a mark makes Qt lay out all the text above it)."""
        selections = []
        if self.passage_block >= 0:
            # (FullWidthSelection would look nicer but crashes Qt 6.12 once the view is scrolled.)
            passage = QTextEdit.ExtraSelection()
            cursor = QTextCursor(self.document().findBlockByNumber(self.passage_block))
            cursor.movePosition(QTextCursor.EndOfBlock, QTextCursor.KeepAnchor)
            passage.cursor = cursor
            passage.format.setBackground(PASSAGE_BACKGROUND)
            selections.append(passage)
        job.marked = bisect.bisect_right([end for _, end in job.marks], upto)
        for start, end in job.marks[: job.marked]:
            mark = QTextEdit.ExtraSelection()
            mark.cursor = self._cursor(start, end)
            mark.format.setBackground(MARK_BACKGROUND)
            mark.format.setForeground(MARK_FOREGROUND)
            selections.append(mark)
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
            if self.show_note(path, heading=unquote(url.fragment())):
                self.note_followed.emit(str(path))
        elif path.exists():
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(path)))
        else:
            self.status_message.emit(f"Link target not found: {path.name}")

    def open_wikilink(self, target: str, heading: str = "") -> bool:
        """Open the note ``[[target]]`` points to (resolved as Obsidian does: see ``resolve_wikilink``)."""
        path = self.resolve_wikilink(target)
        if path is None:
            self.status_message.emit(f"No note named “{target}”")
            return False
        if not self.show_note(path, heading=heading):
            return False
        self.note_followed.emit(str(path))
        return True

    def resolve_wikilink(self, target: str) -> Path | None:
        """The note ``[[target]]`` in the shown note points to: the engine's resolver
        decides (the note ``pms links`` reports), not a rule of the app's own."""
        if not target:
            return self.abspath
        if self.abspath is None:
            return None
        try:
            ref = self.kb.resolve_link(str(self.abspath), target)
            return self.kb.collections.get(ref.collection).path / ref.path if ref.path else None
        except pms.PMSError:  # the shown note is not in the index (any more)
            return None
