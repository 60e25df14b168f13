"""The note preview: real notes rendered by the real QTextBrowser (offscreen)."""
from __future__ import annotations

import os
import re
from collections import Counter

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6", reason="the desktop app needs PySide6 (pip install PySide6-Essentials)")
pytest.importorskip("pytestqt", reason="GUI tests need pytest-qt (pip install pytest-qt)")
pytest.importorskip("markdown_it", reason="the preview needs markdown-it-py (pip install -r requirements-dev.txt)")

from PySide6.QtCore import Qt, QUrl  # noqa: E402
from PySide6.QtGui import QColor, QImage, QPalette, QTextCursor, QTextDocument  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

import pms  # noqa: E402
from conftest import REPO, write  # noqa: E402
from gui.note_html import ALLOWED_TAGS, STRIPPED_TAGS  # noqa: E402
from gui.preview import NotePreview, palette_colours  # noqa: E402
from conftest import preview_of_a_note  # noqa: E402


def note_words(text: str) -> Counter:
    """The words a reader should find in the rendered note: the body without
    what is never shown (link targets, reference definitions, HTML comments,
    wikilink targets behind a label)."""
    _, body, _ = pms.split_frontmatter(text)
    body = re.sub(r"<!--.*?-->", " ", body, flags=re.S)
    body = re.sub(r"(?m)^(\s*(?:`{3,}|~{3,})).*$", r"\1", body)  # a fence's language is not shown
    tags = sorted(ALLOWED_TAGS | STRIPPED_TAGS, key=len, reverse=True)
    body = re.sub(r"</?(?:" + "|".join(tags) + r")(?:\s[^<>]*)?/?>", " ", body, flags=re.I)  # markup, not text
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


def test_an_mdbook_title_line_shows_as_the_notes_heading(preview, tmp_path):
    note = write(tmp_path / "old-link.md", "% Trait Objects\n\nThere is a new edition of the book.\n\n% not a title here\n")
    preview.show_note(note)
    text = preview.toPlainText()
    assert text.startswith("Trait Objects") and "% Trait" not in text
    title = preview.document().findBlock(0)
    assert title.charFormat().font().pointSizeF() > preview.font().pointSizeF() or title.blockFormat().headingLevel() == 1
    assert "% not a title here" in text  # only the note's first line is its title


def test_obsidian_callouts_highlights_and_comments_render_as_in_obsidian(preview, tmp_path):
    from gui.note_html import markdown_to_html
    from test_real_vaults import OBSIDIAN_NOTE

    note = write(tmp_path / "restic.md", OBSIDIAN_NOTE)
    preview.show_note(note)
    text = preview.toPlainText()
    assert "Back up first\nRun restic check before pruning." in text and "Tip\nUse --dry-run" in text
    for hidden in ("[!", "==restic", "todo", "private block", "dry-run-tip"):
        assert hidden not in text, hidden
    assert 'printf "%%d"' in text and "Capture==>Curate==>Connect" in text and "SELECT '%%' LIKE x %% y %%" in text
    found = preview.document().find("restic check")
    assert found.charFormat().background().color().name() == palette_colours(preview.palette()).highlight
    assert preview.document().find("Back up first").charFormat().fontWeight() > preview.document().find("pruning").charFormat().fontWeight()
    # The line after a three-line comment is still anchored at its own line (the preview scrolls to passages by line).
    after = OBSIDIAN_NOTE.split("\n").index("After the comment: Capture==>Curate==>Connect, and a == b.") + 1
    assert f'<a name="pms-line-{after}"></a>After the comment' in markdown_to_html(OBSIDIAN_NOTE)


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
    assert len(lines) >= 150
    window = preview_of_a_note(qtbot, kb, open_window, tmp_path / "long", "\n".join(lines) + "\n", "walrus", (1000, 600))
    qtbot.wait(50)  # whatever the layout does after the first paint
    assert passage_on_screen(window.preview)
    assert "walrus" in window.preview.document().findBlockByNumber(window.preview.passage_block).text()


def test_the_preview_shows_a_dendron_note_s_frontmatter_variables_and_links_as_dendron_does(kb, tmp_path, open_window, qtbot):
    """{{fm.desc}} reads as the note's desc and [[note.name]] as that note's title, as in Dendron's
    preview and in the note's snippets; the link still opens its note."""
    frontmatter = "---\nid: abc\ntitle: {}\ndesc: {}\nupdated: 1657122358101\ncreated: 1657122304417\n---\n"
    write(tmp_path / "v" / "dendron.ref.rename.md", frontmatter.format("Rename Note", "Rename a note and its backlinks.")
          + "\n## Summary\n\n{{fm.desc}}\n\n`{{fm.desc}}` is how. See [[dendron.ref.lookup#keys]].\n")
    write(tmp_path / "v" / "dendron.ref.lookup.md", frontmatter.format("Lookup", "''") + "\n## Keys\n\nPress them.\n")
    kb.collections.create(tmp_path / "v", name="v")
    kb.sync()
    window = open_window(kb)
    window.preview.show_note(tmp_path / "v" / "dendron.ref.rename.md")
    qtbot.waitUntil(lambda: "Summary" in window.preview.toPlainText())
    shown = window.preview.toPlainText()
    assert "Rename a note and its backlinks." in shown and "{{fm.desc}} is how. See Lookup › keys." in shown
    window.preview.anchorClicked.emit(QUrl("pms-wiki:dendron.ref.lookup#keys"))
    assert window.preview.abspath == tmp_path / "v" / "dendron.ref.lookup.md"


def test_a_note_reference_to_a_heading_opens_its_note_at_that_heading(kb, tmp_path, open_window, qtbot):
    """Dendron's ![[note#heading-slug,1:#*]] reads "note › heading-slug" and, clicked, lands on
    "## Heading slug" (before, the preview looked for "heading-slug,1:#*" and stayed at the top)."""
    filler = "\n\n".join(f"Paragraph {i}: filler words about nothing in particular, wrapped across the pane." * 2
                         for i in range(60))
    write(tmp_path / "v" / "guide.md", f"# Guide\n\n{filler}\n\n## Turn on pages\n\nThe step we want.\n\n{filler}\n")
    write(tmp_path / "v" / "start.md", "# Start\n\nSee ![[guide#turn-on-pages,1:#*]] for the step.\n")
    kb.collections.create(tmp_path / "v", name="v")
    kb.sync()
    window = open_window(kb)
    window.resize(1000, 600)
    window.preview.show_note(tmp_path / "v" / "start.md")
    qtbot.waitUntil(lambda: "guide › turn-on-pages" in window.preview.toPlainText())
    link = next(m.group(1) for m in re.finditer(r'href="([^"]+)"', window.preview.document().toHtml()) if "guide" in m.group(1))
    window.preview.anchorClicked.emit(QUrl(link))
    assert window.preview.abspath == tmp_path / "v" / "guide.md"
    qtbot.waitUntil(lambda: window.preview.verticalScrollBar().value() > 0)
    qtbot.wait(50)  # whatever the layout does after the first paint
    heading = window.preview.document().find("Turn on pages")
    assert 0 <= window.preview.cursorRect(heading).top() < window.preview.viewport().height() - 20


@pytest.mark.slow
def test_every_hit_of_a_deep_rust_book_chapter_scrolls_to_its_passage(kb, corpora, open_window, qtbot):
    kb.collections.create(corpora / "rust-book" / "src", name="book")
    kb.sync()
    window = open_window(kb)
    window.resize(1000, 600)
    doc = kb.get("book/ch15-05-interior-mutability.md")
    hits = kb.search("RefCell borrow_mut MockMessenger LimitTracker", k=50, mode="keyword", passages=True)
    deep = [h for h in hits if h.path == "ch15-05-interior-mutability.md" and h.start_line > 40]
    assert len(deep) >= 3
    for hit in deep:
        window.preview.show_note(doc.abspath, text=doc.text, start_line=hit.start_line, end_line=hit.end_line,
                                 heading=hit.heading_path, words=["RefCell", "borrow_mut", "MockMessenger", "LimitTracker"])
        qtbot.wait(20)
        assert passage_on_screen(window.preview), f"lines {hit.start_line}-{hit.end_line} are not on screen"


POLISH_NOTE = """---
title: Polish
tags: rust, pointers, smart
---
# Smart `Box<T>` pointers

Some _emphasis_ and **strong** text.

> A quoted paragraph.

```rust
let b = Box::new(5);
```

![remote chart](https://example.org/chart.png)

![wide picture](wide.png)

<!-- a comment nobody should see -->

End.
"""


def tables(preview: NotePreview) -> list:
    found, frames = [], list(preview.document().rootFrame().childFrames())
    while frames:
        frame = frames.pop()
        frames += frame.childFrames()
        if frame.__class__.__name__ == "QTextTable":
            found.append(frame)
    return found


def table_holding(preview: NotePreview, text: str):
    for table in tables(preview):
        for row in range(table.rows()):
            for column in range(table.columns()):
                cell = table.cellAt(row, column)
                cursor = cell.firstCursorPosition()
                cursor.setPosition(cell.lastCursorPosition().position(), QTextCursor.KeepAnchor)
                if text in cursor.selectedText():
                    return table, row, column
    return None


def fragments(block):
    it = block.begin()
    while not it.atEnd():
        yield it.fragment()
        it += 1


def test_preview_polish(preview, tmp_path):
    image = QImage(3000, 200, QImage.Format_RGB32)
    image.fill(Qt.darkCyan)
    image.save(str(tmp_path / "wide.png"))
    note = write(tmp_path / "polish.md", POLISH_NOTE)
    preview.show_note(note)
    text = preview.toPlainText()
    assert "#rust #pointers #smart" in text  # comma-separated tags, split
    assert "[image: remote chart]" in text  # refused remote image: its alt text
    assert "comment nobody" not in text
    code = table_holding(preview, "Box::new(5)")
    assert code and code[0].format().background().style() != Qt.NoBrush  # code on a background
    quote = table_holding(preview, "A quoted paragraph.")
    assert quote and quote[2] == 1  # the quote sits right of its bar...
    assert quote[0].cellAt(0, 0).format().background().style() != Qt.NoBrush  # ...a coloured cell
    doc = preview.document()
    emphasis = next(f for b in iter_blocks(doc) for f in fragments(b) if f.text() == "emphasis")
    assert emphasis.charFormat().fontItalic() and not emphasis.charFormat().fontUnderline()
    heading = doc.findBlock(text.index("Smart"))
    sizes = {round(f.charFormat().font().pointSizeF()) for f in fragments(heading)}
    assert len(sizes) == 1 and sizes.pop() > preview.font().pointSizeF()  # code keeps the heading's size
    wide = doc.resource(QTextDocument.ImageResource, QUrl.fromLocalFile(str(tmp_path / "wide.png")))
    assert 0 < wide.width() <= preview.viewport().width()  # scaled to the pane
    light = preview.document().defaultStyleSheet()
    dark = QPalette(preview.palette())
    dark.setColor(QPalette.Base, QColor("#17181a"))
    dark.setColor(QPalette.Text, QColor("#e8eaed"))
    preview.setPalette(dark)  # what a live switch to a dark theme does
    assert preview.document().defaultStyleSheet() != light
    doc = preview.document()
    # (A block's first character carries its line anchor: the fragments after it are its text.)
    body = next(f for b in iter_blocks(doc) for f in fragments(b) if f.text().startswith("ome"))
    assert body.charFormat().foreground().style() == Qt.NoBrush  # body text: the palette's own colour
    quoted = next(f for b in iter_blocks(doc) for f in fragments(b) if f.text().startswith(" quoted"))
    assert quoted.charFormat().foreground().color().name() == palette_colours(dark).muted  # muted text follows too


def iter_blocks(doc):
    block = doc.begin()
    while block.isValid():
        yield block
        block = block.next()


def first_words_seen(text: str) -> list[str]:
    """The first words a reader sees of a passage's first line that shows any: lines
    of comments, anchors, fences and link definitions are skipped."""
    in_comment = bool(re.match(r"\A(?:(?!<!--).)*?-->[ \t]*$", text, re.S | re.M))  # it starts inside a comment
    hidden = "|".join(sorted(ALLOWED_TAGS | STRIPPED_TAGS | {"img"}))
    for line in text.split("\n"):
        if in_comment:
            in_comment = "-->" not in line
            continue
        if "<!--" in line and "-->" not in line:
            in_comment = True
            continue
        words = re.findall(r"\w+", pms.passage_display_text(line))
        if not words and not re.match(rf"\s*(<!--|</?(?:{hidden})\b|```|~~~|\[[^\]]+\]:)", line, re.I):
            words = re.findall(r"\w+", line)  # markup the preview shows as text (<Listing …>)
        if words:
            return [w.lower() for w in words[:3]]
    return []


@pytest.mark.slow
def test_the_preview_lands_on_every_passage_of_the_rust_book_by_its_line_numbers(preview, corpora):
    """Every passage the index holds (as parse_note cuts them): the view scrolls to the
    block its first line is in and tints it, found by line number, not by text."""
    root = corpora / "rust-book"
    checked, missed = 0, []
    for path in sorted(root.rglob("*.md")):
        text = pms.decode_text(path.read_bytes())
        note = pms.notes.parse_note(text, path.stem, path=str(path.relative_to(root)))
        for passage in note.passages:
            first = first_words_seen(passage.text)
            if passage.start_line <= 1 or not first:
                continue  # the top of the note, or only markup: nothing a reader sees to land on
            preview.show_note(path, text=text, start_line=passage.start_line, end_line=passage.end_line)
            QApplication.processEvents()  # the scroll range follows the layout
            block = preview.document().findBlockByNumber(preview.passage_block)
            top, bar = preview.passage_top(), preview.verticalScrollBar()
            in_view = top is not None and bar.value() <= top <= bar.value() + preview.viewport().height()
            tinted = any(s.cursor.block() == block and s.format.background().color().alpha() > 0
                         for s in preview.extraSelections())
            # The first words a reader sees of the passage are in that block or just below it
            # (2 of 3: a line that begins inside a link shows the link's text instead).
            near = block.text()
            for _ in range(3):
                block = block.next()
                near += " " + block.text()
            seen = set(re.findall(r"\w+", near.lower()))
            found = sum(word in seen for word in first) >= min(2, len(first))
            checked += 1
            if not (in_view and tinted and found):
                missed.append(f"{path.relative_to(root)}:{passage.start_line} ({' '.join(first)!r}, in view {in_view}, tinted {tinted})")
    assert checked > 2500
    assert not missed, f"{len(missed)} of {checked} passages missed: " + "; ".join(missed[:10])
