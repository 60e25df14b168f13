"""Markdown text: decoding, headings, fences, passages, and what a reader sees.

Owns: decoding a file's bytes (``decode_text``), headings and titles, code fences,
``markdown_passages`` (a note cut into passages along its headings, with their lines), a
passage's display text (snippets show prose, not markup), what a note holds of its own
(``note_substance``) and the paragraph prints that tell one note holds another's text.

May import: config.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence

from .config import LazyPattern, PMSError, Record, hex_digest


class BinaryFileError(PMSError, ValueError):
    """A file named like a note holds binary data."""


class FileTooLargeError(PMSError, OverflowError):
    """A note is over the size limit (PMS_MAX_FILE_MB)."""


def decode_text(data: bytes) -> str:
    """Bytes of a note -> text with '\\n' line ends: UTF-32 or UTF-16 with a BOM (UTF-32's
    first: its BOM starts like UTF-16's), else UTF-8, Windows-1252, Latin-1 (which cannot
    fail). NUL bytes in a file without a UTF-16/32 BOM mean it is binary.
    """
    if data.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        text = data.decode("utf-32", errors="replace")
    elif data.startswith((b"\xff\xfe", b"\xfe\xff")):
        text = data.decode("utf-16", errors="replace")
    else:
        if b"\x00" in data[:8192]:
            raise BinaryFileError("looks like a binary file (NUL bytes), not Markdown")
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            try:
                text = data.decode("cp1252")
            except UnicodeDecodeError:
                text = data.decode("latin-1")
    text = text.lstrip("\ufeff")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def parse_heading(line: str) -> tuple[int, str] | None:
    """(level, text) of an ATX heading line (``## Text ##``), else None (string code:
    a pattern took cubic time on a long run of spaces)."""
    hashes = len(line) - len(line.lstrip("#"))
    if not 1 <= hashes <= 6 or line[hashes : hashes + 1] not in (" ", "\t"):
        return None
    text = line[hashes:].lstrip(" \t")
    if not text:
        return (hashes, line[-1]) if len(line) - hashes >= 2 else None  # one blank
    return hashes, text.rstrip(" \t").rstrip("#").rstrip(" \t") or text[0]


FENCE = LazyPattern(r"^[ \t]{0,3}(`{3,}|~{3,})")


def fence_states(lines: Sequence[str]) -> tuple[list[bool], list[bool]]:
    """(fenced, open_after): is each line part of a fenced code block (fences
    included), and is a fence still open after it. An unclosed fence runs to
    the end of the text, as CommonMark says."""
    fenced, open_after = [], []
    fence = None
    for line in lines:
        m = FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)
            fenced.append(fence is not None)
        else:
            fenced.append(True)
            rest = line.strip()[len(m.group(1)):] if m else ""
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not rest.strip():
                fence = None
        open_after.append(fence is not None)
    return fenced, open_after


def first_heading(body: str, level: int | None = None) -> str | None:
    """The first heading outside code (of ``level`` only, if given); a leading
    ``% Title`` line (mdBook's and Pandoc's title) counts as one."""
    lines = body.split("\n")
    in_fence, _ = fence_states(lines)
    for line, fenced in zip(lines, in_fence):
        if not fenced:
            heading = parse_heading(line)
            if heading and (level is None or heading[0] == level):
                return clean_heading(heading[1])
            if level is None and line.startswith("% ") and line[2:].strip():
                return clean_heading(line[2:])
    return None


# mdBook's and Pandoc's title line, first in a note ("% Trait Objects").
_TITLE_LINE = LazyPattern(r"\A(\s*)% (?=\S)")


def title_line_as_heading(body: str) -> str:
    """``body`` with its leading ``% Title`` line (which first_heading takes for a heading)
    written as the ``# Title`` heading it stands for, on the same line (line numbers hold)."""
    return _TITLE_LINE.sub(r"\1# ", body, count=1)


def clean_heading(text: str) -> str:
    """A heading's words: links become their labels, no code ticks or bold marks."""
    text = _links_to_labels(text, wiki=False)  # [label](url) -> label
    text = _links_to_labels(text, wiki=True)   # [[target|label]] -> label
    return text.replace("`", "").replace("**", "").strip()


class TextFinder:
    """``text.find(what, start)`` (``what`` a string or a compiled pattern) for
    starts that mostly grow: each answer is remembered and reused while it is
    still ahead, so scanning a whole text costs about one pass per thing sought."""

    def __init__(self, text: str):
        self.text = text
        self.found: dict = {}

    def find(self, what, start: int) -> int:
        since, at = self.found.get(what, (None, None))
        if since is None or start < since or (0 <= at < start):
            if isinstance(what, str):
                at = self.text.find(what, start)
            else:
                m = what.search(self.text, start)
                at = m.start() if m else -1
            self.found[what] = (start, at)
        return at


def _links_to_labels(text: str, wiki: bool) -> str:
    """``[label](url)`` (or ``[[target|label]]``) replaced by its label, in one pass (a pattern is quadratic)."""
    if "[" not in text:
        return text
    opener = "[[" if wiki else "["
    find = TextFinder(text)
    out, done, i = [], 0, text.find(opener)
    while i >= 0:
        inner = i + len(opener)
        close = find.find("]", inner)
        if close < 0:
            break
        end = -1
        if wiki and text.startswith("]]", close):
            label = text[inner:close]
            label, end = label.partition("|")[2] if "|" in label else label, close + 2
        elif not wiki and text.startswith("](", close):
            paren = find.find(")", close + 2)
            if paren < 0:
                break
            label, end = text[inner:close], paren + 1
        if end < 0:  # every '[' before ``close`` meets the same ']': none of them opens a link
            i = text.find(opener, close + 1)
            continue
        out += [text[done:i], label]
        done = end
        i = text.find(opener, end)
    return "".join(out) + text[done:] if out else text


class Passage(Record):
    """A passage of a note: what is indexed, embedded and returned by search."""

    seq: int
    start_line: int
    end_line: int
    heading_path: str
    text: str
    title: str = ""
    page: int | None = None  # a PDF's page (1-based): its lines count within that page

    @property
    def headings(self) -> str:
        """The heading path without the note's title."""
        prefix = self.title + " > "
        if self.title and self.heading_path.startswith(prefix):
            return self.heading_path[len(prefix):]
        return "" if self.heading_path == self.title else self.heading_path

    @property
    def embed_text(self) -> str:
        return passage_embed_text(self.heading_path, self.text, self.title)


def passage_embed_text(heading_path: str, text: str, title: str = "") -> str:
    """What is embedded for a passage: its breadcrumb, then its text without a
    first H1 that only repeats the title (no tokens spent on it twice)."""
    first, _, rest = text.partition("\n")
    if title and first.startswith("# ") and clean_heading(first[2:]) == title:
        text = rest.lstrip("\n")
    return f"{heading_path}\n\n{text}" if heading_path else text


DEFAULT_PASSAGE_CHARS = 1200  # passage size: inside the model's window, best measured (docs/decisions.md)
DEFAULT_OVERLAP_LINES = 2
LONG_PARAGRAPH = 4  # a line over this many targets is cut between sentences

# Break-point scores (qmd's idea): a cut before an H1 is worth most, then
# smaller headings, code-fence edges, paragraph breaks, list items, any line.
_BREAK_SCORES = {1: 100, 2: 90, 3: 80, 4: 60, 5: 55, 6: 50}


def markdown_passages(markdown: str, title: str = "", target_chars: int = DEFAULT_PASSAGE_CHARS,
                   overlap_lines: int = DEFAULT_OVERLAP_LINES, first_line: int = 1) -> list[Passage]:
    """Split Markdown into passages of about ``target_chars`` characters.

    Cuts go preferably before H1-H3 headings, then at code-fence edges, blank
    lines and line breaks: every line boundary is scored and the best one near
    the target size wins (a heading at half the target beats a blank line at
    the target). Cuts never fall inside a fenced code block unless the block
    alone is over 8 x the target. ``first_line`` is the file line number of
    the first line of ``markdown`` (after frontmatter). Needs no database.
    """
    lines = markdown.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    n = len(lines)
    if n == 0 or not markdown.strip():
        return []
    fenced, open_after = fence_states(lines)
    # Reference-link definitions ("[label]: url", mdBook chapters end with dozens) are no prose: as
    # passage text every linked chapter's words matched them, and a closing sentence with them
    # became a passage of their own. Blank, they keep the line numbers and leave the passages.
    if "]:" in markdown:
        lines = ["" if not fenced[i] and line.lstrip(" ").startswith("[") and LINK_DEFINITION.match(line) else line
                 for i, line in enumerate(lines)]
    # A paragraph of several targets (one long line) is cut into sentences, which keep
    # their physical line number; shorter ones stay whole (docs/decisions.md).
    phys = list(range(n))
    if any(len(line) > LONG_PARAGRAPH * target_chars for line in lines):
        pieces, piece_phys, piece_fenced, piece_open = [], [], [], []
        for i, line in enumerate(lines):
            whole = fenced[i] or len(line) <= LONG_PARAGRAPH * target_chars or parse_heading(line)
            parts = [line] if whole else split_sentences(line, target_chars)
            pieces += parts
            piece_phys += [i] * len(parts)
            piece_fenced += [fenced[i]] * len(parts)
            piece_open += [False] * (len(parts) - 1) + [open_after[i]]
        lines, phys, fenced, open_after, n = pieces, piece_phys, piece_fenced, piece_open, len(pieces)
    levels = [0] * n
    stacks: list[tuple[str, ...]] = []
    stack: list[tuple[int, str]] = []
    for i, line in enumerate(lines):
        if not fenced[i]:
            heading = parse_heading(line)
            if heading:
                level = heading[0]
                levels[i] = level
                while stack and stack[-1][0] >= level:
                    stack.pop()
                stack.append((level, clean_heading(heading[1])))
        stacks.append(tuple(h for _, h in stack))
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)

    def allowed(b: int) -> bool:  # may a passage start at line b (not inside a fence)?
        return b == 0 or b >= n or not open_after[b - 1]

    def score(b: int) -> float:
        if levels[b]:
            return _BREAK_SCORES[levels[b]]
        prev, cur = lines[b - 1], lines[b]
        if fenced[b] != fenced[b - 1] or (fenced[b] and not open_after[b - 1]):
            return 30  # the edge of a code block
        if not prev.strip():
            return 20
        if phys[b] == phys[b - 1]:
            return 15  # a sentence end inside a long paragraph
        if re.match(r"^\s*([-*+]|\d+[.)])\s", cur):
            return 10
        return 1

    passages: list[Passage] = []
    start = 0
    target = max(100, target_chars)
    while start < n:
        remaining = offsets[n] - offsets[start]
        if remaining <= target * 1.15:
            end = n
        else:
            ideal = offsets[start] + target
            lo = offsets[start] + target * 0.35
            best, best_value = None, -1.0
            b = start + 1
            while b < n and offsets[b] <= ideal:
                if offsets[b] >= lo and allowed(b):
                    distance = (ideal - offsets[b]) / (ideal - lo)
                    value = score(b) * (1 - 0.7 * distance * distance)
                    if value > best_value:
                        best, best_value = b, value
                b += 1
            if best is None:  # no allowed cut in the window: first allowed one after it
                b = start + 1
                while b < n and (offsets[b] < lo or not allowed(b)):
                    if offsets[b] - offsets[start] > target * 8:
                        break  # a giant code block: cut at a line break after all
                    b += 1
                best = b
            end = best
        first, last = start, end  # blank lines at either edge belong to no passage
        while first < last and not lines[first].strip():
            first += 1
        while last > first and not lines[last - 1].strip():
            last -= 1
        if first < last:
            text = "".join(lines[i] + (" " if phys[i] == phys[i + 1] else "\n") for i in range(first, last - 1)) + lines[last - 1]
            path = list(stacks[first])  # the headings in force at the passage's first line
            if path and title and path[0] == title:
                path = path[1:]
            heading_path = " > ".join([p for p in [title] + path if p])
            passages.append(Passage(seq=len(passages), start_line=first_line + phys[first], end_line=first_line + phys[last - 1],
                                heading_path=heading_path, text=text, title=title))
        if end >= n:
            break
        # Overlap: repeat a few short lines of context, never a heading, never
        # more than a fifth of the target.
        nxt = end
        if overlap_lines and not levels[end]:
            back, budget = end, target // 5
            while (back > start + 1 and end - back < overlap_lines and allowed(back - 1) and not levels[back - 1]
                   and len(lines[back - 1]) < budget):
                budget -= len(lines[back - 1]) + 1
                back -= 1
            nxt = back
        start = max(nxt, start + 1)
    return passages


# The old names (pms.__all__ still lists them): scripts written against them keep working.
Chunk, chunk_markdown, DEFAULT_CHUNK_CHARS = Passage, markdown_passages, DEFAULT_PASSAGE_CHARS


_SENTENCE_END = LazyPattern(r"(?<=[.!?:;])\s+(?=\S)")


def split_sentences(line: str, target_chars: int) -> list[str]:
    """A long line as its sentences; a sentence longer than the target is
    wrapped at spaces (or, with none, cut) so no piece exceeds it."""
    out = []
    for sentence in _SENTENCE_END.split(line.strip()):
        while len(sentence) > target_chars:
            cut = sentence.rfind(" ", 0, target_chars)
            cut = cut if cut > target_chars // 2 else target_chars
            out.append(sentence[:cut].rstrip())
            sentence = sentence[cut:].lstrip()
        if sentence:
            out.append(sentence)
    return out or [line]


# A passage as a reader sees it --------------------------------------------------

# HTML elements a note's prose may hold. A tag of another name counts only with
# attributes (<Listing number="1">): "Vec<T>" and "Rc<T>" are words, not tags.
_HTML_NAMES = ("a|abbr|b|br|blockquote|caption|center|code|col|colgroup|dd|del|details|div|dl|dt|em|figcaption|figure|"
               "font|h[1-6]|hr|i|img|ins|kbd|li|mark|ol|p|pre|q|s|samp|section|small|span|strike|strong|sub|summary|"
               "sup|table|tbody|td|tfoot|th|thead|tr|tt|u|ul|var|wbr")
_QUOTED_ATTRIBUTE = r"""\s+[\w:.-]{1,60}\s*=\s*(?:"[^"]{0,3000}"|'[^']{0,3000}')"""
_ATTRIBUTE = r"""\s+[\w:.-]{1,60}(?:\s*=\s*(?:"[^"]{0,3000}"|'[^']{0,3000}'|[^\s"'<>=]{1,500}))?"""
_DISPLAY_RULES = LazyPattern(
    r"(?=[<\[{!])"  # most positions start none of these: one test, not every branch
    # Every repeat is bounded, so a pathological line costs a constant per position (linear, as the notes section must be).
    r"(?:(?P<tag>(?<![\w<])<(?:" + _HTML_NAMES + r")(?:\s[^<>]{0,3000})?/?>|</(?:" + _HTML_NAMES + r")\s*>"
    # A tag of another name, with a quoted attribute at least: its quoted values may hold < and >
    # (caption="Result<(), E>"), while "<T as Trait>" stays words.
    r"|(?<![\w<])<[A-Za-z][\w-]{0,40}(?:" + _ATTRIBUTE + r"){0,40}?" + _QUOTED_ATTRIBUTE + r"(?:" + _ATTRIBUTE + r"){0,40}\s*/?>)"
    r"|(?P<closing>(?-i:</[A-Z][\w-]{0,40}>))"  # </Listing>: a component closing, not </script>
    r"|(?P<directive>\{\{#\w+[^}]{0,500}\}\})"
    r"|(?P<image>!\[([^\]]{0,200})\]\([^)]{0,500}\))"
    r"|(?P<link>\[([^\]]{1,200})\](?:\([^)]{0,500}\)|\[[^\]]{0,200}\]))"
    r"|(?P<wiki>!?\[\[(?:([^\]|]{0,200})\|)?([^\]]{0,200})\]\]))",
    re.DOTALL | re.IGNORECASE)
# What every match of _DISPLAY_RULES holds; most passages (a tldr page's "[r]ecursive", "{{file}}",
# "cmd < file", "<https://…>") hold none, and the costly pattern is then neither compiled nor run.
_MAY_HOLD_MARKUP = LazyPattern(r"<[A-Za-z][\w-]{0,40}[\s/>]|</|\]\(|\]\[|\[\[|\{\{#")
_COMMENT_TAIL = LazyPattern(r"\A(?:(?!<!--).)*?-->[ \t]*$", re.DOTALL | re.MULTILINE)
_DIRECTIVE = LazyPattern(r"\{\{#\w+[^}]*\}\}")
# Block markers at a line's start, nested ("> 1. [ ] "): quote, heading, list item, task box, "% Title".
_LINE_MARKERS = LazyPattern(r"^(?:(?:%|#{1,6}|>+|[-+*]|\d+[.)])(?:[ \t]+|$)(?:\[[ xX]\][ \t]+)?)+", re.MULTILINE)
# Bold, strike and code ticks; *em* and _em_ (not snake_case). The lookahead lets the
# scan pass every other character with one test (8x faster on prose).
_EMPHASIS = LazyPattern(r"(?=[*_~`])(?:\*\*|__|~~|`+|(?<![\w*])[*_](?=\S)|(?<=\S)[*_](?![\w*]))")
_SPACES = LazyPattern(r"[ \t]{2,}")
# A space markup left before punctuation; not before a "?" a word follows (Rust's `?` operator).
_SPACE_BEFORE_PUNCTUATION = LazyPattern(r"[ \t]+(?=[.,;:!)](?:\s|$)|\?(?:[ \t]*$|[ \t]+[^\w\s]|\n))", re.MULTILINE)
# A link's mark in a line: "](", "][", "[[", a definition, or the tail of a link whose text began on the line above.
_LINK_MARK = LazyPattern(r"\]\(|\]\[|\[\[|^ {0,3}\[[^\]]+\]:\s|^[^\[]*\]\(")
_TABLE_CELL_RULE = LazyPattern(r":?-{3,}:?")


def is_table_rule(line: str) -> bool:
    """``| --- | :---: |``, checked by cells (a pattern for the whole row is quadratic)."""
    text = line.strip().removeprefix("|").removesuffix("|")
    return all(_TABLE_CELL_RULE.fullmatch(cell.strip()) for cell in text.split("|"))


def _display_piece(m: re.Match, titles: Mapping[str, str] | None = None) -> str:
    kind = m.lastgroup
    if kind in ("tag", "closing", "directive"):
        return " "
    if kind == "image":
        return m.group(5)
    if kind == "link":
        return m.group(7)
    first, last = m.group(9), m.group(10)  # a wikilink's [[first|last]] (an embed's "!" left out)
    if last.startswith(DENDRON_SCHEME):  # Dendron's [[label|dendron://vault/note]]: the label, else the note
        return first if first is not None else _unlabelled_link_text(without_dendron_vault(last), titles)
    return last if first is not None else _unlabelled_link_text(last, titles)  # Obsidian's [[note|label]]: the label


def _target_and_fragment(link: str) -> tuple[str, str]:
    """A label-less link's inside, "note#heading", as (note, "#heading")."""
    at = min((i for i in (link.find("#"), link.find("^")) if i >= 0), default=len(link))
    return link[:at].strip(), link[at:].strip()


def _unlabelled_link_text(link: str, titles: Mapping[str, str] | None = None) -> str:
    """``wikilink_text`` of a link's whole inside, "note#heading" (no label); the note by its
    title when ``titles`` (link target in lower case -> title) holds it."""
    target, fragment = _target_and_fragment(link)
    return wikilink_text((titles or {}).get(target.lower(), target), fragment)


# A wikilink or embed without a label: [[note]], ![[note#heading]], [[dendron://vault/note]].
_UNLABELLED_LINK = LazyPattern(r"!?\[\[([^\[\]|]{1,300})\]\]")


def unlabelled_link_targets(text: str) -> set[str]:
    """The notes ``text``'s label-less wikilinks name, as written (a Dendron vault and the
    fragment left out), lower case: what ``passage_display_text``'s ``link_titles`` are
    looked up by. Pure."""
    if "[[" not in text:
        return set()
    return {target.lower() for m in _UNLABELLED_LINK.finditer(text)
            for target in [_target_and_fragment(without_dendron_vault(m.group(1).strip()))[0]] if target}


# Dendron's note reference names a range of the note it embeds: "#heading,1:#*" is from the heading
# (its level offset 1) to the next heading, "#a:#b" from one heading to another.
_REFERENCE_RANGE = LazyPattern(r"(?:,\d+)?(?::#.*)?$", re.DOTALL)


def wikilink_text(target: str, fragment: str = "") -> str:
    """What a reader sees of a wikilink or embed that has no label: the note, then the heading
    it points to, as Obsidian shows ``[[Note#Heading]]`` ("Note › Heading"; a heading of the
    same note alone). A block id ("#^id") and Dendron's range marks ("#heading,1:#*") are no
    words a reader needs: left out. ``fragment``: "", "#heading", "#^block" (notes' links).
    The one rule for snippets (passage_display_text) and the app's preview. Pure."""
    headings = [h.strip() for h in _REFERENCE_RANGE.sub("", fragment).split("#")]
    shown = " › ".join(part for part in (target, *headings) if part and part != "*" and not part.startswith("^"))
    return shown or fragment.lstrip("#")  # [[#^id]]: a link to a block of the same note, as written


def _display_piece_label_first(m: re.Match, titles: Mapping[str, str] | None = None) -> str:
    """_display_piece for a note that writes [[label|note]] (Dendron): a wikilink shows its label."""
    return m.group(9) if m.lastgroup == "wiki" and m.group(9) is not None else _display_piece(m, titles)


# Dendron's links may name the note's vault: [[dendron://vault/note.name]] (notes.py reads them).
DENDRON_SCHEME = "dendron://"


def without_dendron_vault(target: str) -> str:
    """A link target with Dendron's ``dendron://vault/`` taken off (the note's name and fragment)."""
    return target[len(DENDRON_SCHEME):].partition("/")[2] if target.startswith(DENDRON_SCHEME) else target


# Obsidian's own Markdown: a callout opens a quote with "[!kind]" (then "+" or "-" when it folds,
# and an optional title), ==text== is highlighted, and reading view hides %%text%% (on a line or
# across lines: a comment) and a block ID (" ^id" ending a line, or alone on one; Dendron's too).
_CALLOUT = LazyPattern(r"^\[!([A-Za-z][\w-]{0,40})\][+-]?[ \t]*(?=(\S?))", re.MULTILINE)
# "==" opens before a word, or before punctuation where no word precedes it; it closes after a word,
# or after punctuation where no word follows (CommonMark's flanking rule): "A==>B==>C" is arrows.
_BLOCK_ID = LazyPattern(r"(?:^|[ \t]+)\^[A-Za-z0-9-]{1,64}[ \t]*$", re.MULTILINE)
_HIGHLIGHT = LazyPattern(r"(?:==(?=\w)|(?<!\w)==(?=[^\w\s=]))([^\n=]{1,1000}?)(?:(?<=\w)==|(?<=[^\w\s=])==(?!\w))")


def callout_title(line: str) -> tuple[str, str] | None:
    """An Obsidian callout's first line (its quote marker taken off), "[!tip]- Title" ->
    ("tip", "Title"); its kind capitalised when it has no title; None for any other line."""
    m = _CALLOUT.match(line.strip())
    if not m:
        return None
    return m.group(1).lower(), line.strip()[m.end():].strip() or m.group(1).capitalize()


def highlighted_parts(text: str) -> list[tuple[str, bool]]:
    """``text`` cut at Obsidian's ==highlights==: (piece, highlighted) in order, markers left out."""
    parts, at = [], 0
    for m in _HIGHLIGHT.finditer(text) if "==" in text else ():
        if m.start() > at:
            parts.append((text[at : m.start()], False))
        parts.append((m.group(1), True))
        at = m.end()
    if at < len(text) or not parts:
        parts.append((text[at:], False))
    return parts


def without_obsidian_hidden(text: str) -> str:
    """What Obsidian's reading view hides left out: %%comments%% (by hand in one pass; not in
    fenced code, nor a "%%" inside `inline code`, printf's "%%"; an unclosed one stays) and
    block IDs (" ^id" ending a line, or a line of its own). The line breaks a comment spans
    are kept, so every other line keeps its number."""
    if "%%" not in text and "^" not in text:
        return text
    lines = text.split("\n")
    fenced, _ = fence_states(lines)
    out: list[str] = []
    prose: list[str] = []
    for line, in_fence in [*zip(lines, fenced), ("", True)]:
        if not in_fence:
            prose.append(line)
            continue
        if prose:
            out.append(_prose_without_obsidian_hidden("\n".join(prose)))
            prose = []
        out.append(line)
    return "\n".join(out[:-1])


def _prose_without_obsidian_hidden(text: str) -> str:
    if "^" in text:
        text = _BLOCK_ID.sub("", text)
    if "%%" not in text:
        return text
    out, at, search, ticks = [], 0, 0, 0  # ticks: backticks kept before ``at``
    while (start := text.find("%%", search)) >= 0:
        if (ticks + text.count("`", at, start)) % 2:  # inside inline code
            search = start + 2
            continue
        end = text.find("%%", start + 2)
        if end < 0:
            break
        out.append(text[at:start])
        ticks += out[-1].count("`")
        out.append("\n" * text.count("\n", start, end))  # the lines stay where they were (a preview's line anchors)
        at = search = end + 2
    out.append(text[at:])
    return "".join(out)


def _without_comments(text: str) -> str:
    """HTML comments left out, by hand in one pass (a pattern retried at every "<!--" is quadratic)."""
    out, at = [], 0
    while (start := text.find("<!--", at)) >= 0:
        out.append(text[at:start])
        end = text.find("-->", start + 4)
        at = len(text) if end < 0 else end + 3
        out.append(" ")
    out.append(text[at:])
    return "".join(out)


def passage_display_text(text: str, label_first: bool = False, link_titles: tuple[tuple[str, str], ...] = ()) -> str:
    """A passage as a reader sees it, for snippets and listings: HTML comments,
    tags (<small>, <Listing …>), mdBook directives ({{#include …}}),
    reference-link definitions and table rules left out; links and images as
    their text; a table row as "cell · cell"; a ``% Title`` or heading line as
    its words; emphasis and code ticks removed. Code inside fences is kept
    as written (its fence lines dropped). What is indexed is the raw passage:
    every word shown here stays searchable. ``label_first``: the note writes its
    wikilinks ``[[label|target]]`` (notes.links_label_first: Dendron), each shown as
    its label. ``link_titles``: (a link target as ``unlabelled_link_targets`` gives it, the
    title of the note it names) for a label-less link shown by its note's title (Dendron's
    ``enableNoteTitleForLink``, on by default). Pure: no I/O."""
    lines = text.split("\n")
    fenced, _ = fence_states(lines)
    out: list[str] = []
    prose: list[str] = []  # the prose lines since the last fence: a comment or tag may span them
    for line, in_fence in [*zip(lines, fenced), ("", True)]:
        if not in_fence:
            prose.append(line)
            continue
        if prose:
            out.extend(_display_prose("\n".join(prose), first=len(out) == 0, label_first=label_first, titles=dict(link_titles)))
            prose = []
        if not FENCE.match(line):
            out.append(_DIRECTIVE.sub("", line) if "{{" in line else line)  # mdBook includes sit in code blocks
    return "\n".join(out).strip("\n")


# Markup is rendered away in prose up to this long (a passage is about 1,200
# characters); a longer run, only pathological text, is shown as written.
DISPLAY_MARKUP_MAX_CHARS = 100_000


def _display_prose(text: str, first: bool = False, label_first: bool = False, titles: Mapping[str, str] | None = None) -> list[str]:
    if first and "-->" in text:
        text = _COMMENT_TAIL.sub("", text, count=1)  # a passage that starts inside an HTML comment
    if "<!--" in text:
        text = _without_comments(text)
    if "%%" in text or "^" in text:
        text = without_obsidian_hidden(text)
    if _MAY_HOLD_MARKUP.search(text) and len(text) <= DISPLAY_MARKUP_MAX_CHARS:
        piece = _display_piece_label_first if label_first else _display_piece
        text = _DISPLAY_RULES.sub(functools.partial(piece, titles=titles) if titles else piece, text)
    if "&" in text and ";" in text:  # &vert;, &lt;: as the reader sees them (html only imported then)
        import html

        text = html.unescape(text)
    # Whole-text passes, not a line at a time: hits are rendered as one types.
    lines = text.split("\n")
    if "]:" in text or "--" in text:  # link definitions and table rules are left out
        lines = [line for line in lines if not LINK_DEFINITION.match(line) and not ("-" in line and is_table_rule(line))]
    text = _LINE_MARKERS.sub("", "\n".join(line.strip() for line in lines))
    if "[!" in text:  # an Obsidian callout's first line: its title (or its kind), as Obsidian shows it
        text = _CALLOUT.sub(lambda m: "" if m.group(2) else m.group(1).capitalize(), text)
    if "==" in text:
        text = _HIGHLIGHT.sub(r"\1", text)
    if "|" in text:  # a table row as "cell · cell" (after the line markers: a "#" cell is no heading)
        text = "\n".join(" · ".join(c.strip() for c in line.strip("|").split("|") if c.strip())
                         if line.startswith("|") or line.count("|") >= 2 else line for line in text.split("\n")
                         if not ("-" in line and is_table_rule(line)))  # a quoted table's rule too
    if "*" in text or "_" in text or "~" in text or "`" in text:
        text = _EMPHASIS.sub("", text)
    text = _SPACE_BEFORE_PUNCTUATION.sub("", _SPACES.sub(" ", text))
    return [line.strip() for line in text.split("\n") if line.strip()]


_CJK_CHAR = LazyPattern(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def _reader_words(text: str) -> int:
    """Words as a reader counts them: each Chinese or Japanese character is one too (no spaces there)."""
    return len(re.findall(r"\w+", text)) + (0 if text.isascii() else len(_CJK_CHAR.findall(text)))


def note_substance(body: str) -> tuple[int, int, int]:
    """(words a reader sees, the note's own words, links out) of a note's body.
    Its own words are those outside quotes and outside lines that hold a link
    (to a note, a page or a web address): a redirect or an old edition's "this
    moved" page quotes a paragraph of the real one and links to it, and has few
    words of its own. What tells a stub from a note with content (``is_stub``)."""
    words = _reader_words(passage_display_text(body))
    lines = body.split("\n")
    fenced, _ = fence_states(lines)
    own_lines, links = [], 0
    for line, in_fence in zip(lines, fenced):
        found = 0 if in_fence else len(_LINK_MARK.findall(line))
        links += found
        if in_fence or not (found or line.lstrip().startswith(">") or ("[" in line and "]" not in line)):
            own_lines.append(line)
    own = _reader_words(passage_display_text("\n".join(own_lines))) if links else words
    return words, own, links


# A link or an embed whole, its label too: [[note]], ![[note#part]], [label](target), [label][ref],
# <https://...>, a bare web address. Bounded, so a line of brackets costs a constant per position.
_WHOLE_LINK = LazyPattern(r"!?\[\[[^\[\]]{0,300}\]\]|!?\[[^\[\]]{0,300}\](?:\([^()]{0,500}\)|\[[^\[\]]{0,200}\])"
                          r"|<https?://[^>\s]{1,500}>|https?://\S{1,500}")


def own_prose(body: str) -> tuple[str, int, int]:
    """(a note's own prose as a reader sees it, how many words it shows besides: quotes and
    code, how many links to notes it holds: embeds and web addresses are none). Its own prose is what lies outside code
    blocks, quotes, headings, link definitions, links and embeds (their labels too) and HTML
    tags: what a redirect, an old edition's "no longer distributed" page or a page of links
    lacks, and a short note has. Pure."""
    lines = body.split("\n")
    fenced, _ = fence_states(lines)
    prose, held = [], []
    for line, in_fence in zip(lines, fenced):
        start = line.lstrip()
        if in_fence or start.startswith(">"):
            held.append(line)
        elif not start.startswith(("#", "% ")) and not LINK_DEFINITION.match(line):
            prose.append(line)
    links = 0

    def gone(m: re.Match) -> str:
        nonlocal links
        link = m.group()
        links += not link.startswith(("!", "<", "http")) and "](http" not in link  # a link to a note
        return " "

    text = passage_display_text(_WHOLE_LINK.sub(gone, "\n".join(prose)))
    return text, _reader_words(passage_display_text("\n".join(held))), links


# A paragraph shorter than this ("Filename: src/main.rs", a lone heading) is too
# common to tell that one note copies another; prose paragraphs are longer.
COPY_PARAGRAPH_WORDS = 8
_PARAGRAPH_BREAK = LazyPattern(r"\n(?:[ \t>]*\n)+")  # blank lines, inside a block quote too
_PRINT_WORD = LazyPattern(r"[^\W_]+")


def paragraph_prints(body: str) -> bytes:
    """What tells that a note holds another's text (``holds_most_of``): an 8-byte
    hash of each paragraph of COPY_PARAGRAPH_WORDS words or more, as a reader sees
    it (lower case, markup and links left out, wrapped anyhow), sorted, unique.
    A note that concatenates others (a print edition's chapter, a "book.md"
    export of chapter notes) holds their hashes. Pure: no I/O."""
    from array import array

    prints = set()
    for paragraph in _PARAGRAPH_BREAK.split(body):
        shown = passage_display_text(paragraph).lower()
        if _reader_words(shown) >= COPY_PARAGRAPH_WORDS:
            prints.add(int(hex_digest(" ".join(_PRINT_WORD.findall(shown)).encode(), "sha1")[:16], 16))
    return array("Q", sorted(prints)).tobytes()


# A reference-link definition ("[label]: target 'title'"), up to three spaces in.
LINK_DEFINITION = LazyPattern(r"^ {0,3}\[((?:[^\]\\]|\\.)+)\]:[ \t]*(<[^>]*>|\S+)")
