"""What a note says about itself, and ``parse_note``, which gathers it with its passages.

Owns: tags (frontmatter and inline ``#tags``), the note's date, frontmatter fields for
filters, links (``[[wikilinks]]``, ``[text](note.md)``) and how they resolve to notes
(``LinkResolver``), ``replace_wikilinks``, Dendron's ``{{fm.field}}`` (``with_frontmatter_values``),
and ``ParsedNote``: a note as the index stores it.

May import: config, frontmatter, markdown, language.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

from .config import Factory, LazyPattern, Record
from .frontmatter import as_list, parse_frontmatter, split_frontmatter
from .markdown import (
    DEFAULT_PASSAGE_CHARS, DENDRON_SCHEME, LINK_DEFINITION, Passage, TextFinder, markdown_passages, fence_states, first_heading,
    note_substance, paragraph_prints, without_dendron_vault,
)
from .language import note_language


class ParsedNote(Record):
    """A note (or a PDF) as the index stores it."""

    title: str
    tags: list[str]
    aliases: list[str]
    metadata: dict
    body: str
    passages: list[Passage]
    date: str | None = None  # from the frontmatter (date, created, updated), ISO; None: use the file's mtime
    links: list[NoteLink] = Factory(list)
    words: int = -1  # words a reader sees in the body (note_substance); -1: not counted (a PDF)
    own_words: int = -1  # of them, those outside quotes and link lines
    links_out: int = 0  # links in the body, to notes, pages or web addresses
    paragraphs: bytes = b""  # paragraph_prints(): what tells that this note holds another's text
    pages: int | None = None  # a PDF's page count; None for a note
    language: str = "und"  # note_language(): ISO 639-1, for the vault's language count


def parse_note(text: str, fallback_title: str, target_chars: int = DEFAULT_PASSAGE_CHARS, path: str = "") -> ParsedNote:
    """Frontmatter, title (frontmatter > first heading of any level or ``% Title`` > file name), tags (frontmatter
    and inline), date, links and passages of a note. ``path`` (relative to the
    collection) resolves relative Markdown links."""
    block, body, consumed = split_frontmatter(text)
    meta = parse_frontmatter(block)
    body = with_frontmatter_values(body, meta)
    title = meta.get("title")
    title = str(title).strip() if title not in (None, "") else (first_heading(body) or fallback_title)
    tags = unique_ignoring_case(as_list(meta.get("tags") or meta.get("tag")) + inline_tags(body))
    aliases = as_list(meta.get("aliases") or meta.get("alias")) if not isinstance(meta.get("aliases"), str) else [meta["aliases"]]
    passages = markdown_passages(body, title=title, target_chars=target_chars, first_line=consumed + 1)
    if not passages:  # an empty note is still findable by its title
        passages = [Passage(seq=0, start_line=consumed + 1, end_line=consumed + 1, heading_path=title, text="", title=title)]
    words, own_words, links_out = note_substance(body)
    return ParsedNote(title=title, tags=tags, aliases=aliases, metadata=meta, body=body, passages=passages,
                      date=frontmatter_date(meta), links=note_links(body, path, consumed + 1, links_label_first(meta)),
                      words=words, own_words=own_words, links_out=links_out, language=note_language(f"{title}\n{body}"),
                      paragraphs=paragraph_prints(body))


# Notes-native metadata: inline tags, dates, frontmatter fields, links ---------

def unique_ignoring_case(items: Iterable[str]) -> list[str]:
    """Items in first-seen order, without case-insensitive repeats."""
    seen, out = set(), []
    for item in items:
        if item and item.lower() not in seen:
            seen.add(item.lower())
            out.append(item)
    return out


# Obsidian's tag rule: '#' after a space or a line start, then letters, digits,
# '_', '-' or '/' (nesting), with at least one character that is not a digit (checked apart).
_INLINE_TAG = LazyPattern(r"(?:^|(?<=\s))#([\w/-]+)", re.UNICODE)
_TAG_LETTER = LazyPattern(r"[^\W\d]", re.UNICODE)
# What looks like a tag and is not one: a colour (#fff, #43b02a, #FFFFFF, #bfcbda88, the notation
# #RRGGBB), a C preprocessor directive in prose about C (#include), and anything inside an HTML
# tag (style="border: 1px solid #ccc"). Short hex words stay tags (#add, #cafe, #beef).
_COLOUR = LazyPattern(r"[0-9a-f]{3,4}|[0-9a-f]{6}|[0-9a-f]{8}|r{1,2}g{1,2}b{1,2}(?:a{1,2})?", re.IGNORECASE)
_PREPROCESSOR_WORDS = frozenset({"include", "includes", "define", "defines", "ifdef", "ifndef", "endif", "elif", "undef",
                                 "pragma"})
_HTML_TAG = LazyPattern(r"<[A-Za-z][\w-]{0,40}(?:\s[^<>]{0,3000})?>")


def _is_tag(word: str) -> bool:
    if not _TAG_LETTER.search(word) or word.lower() in _PREPROCESSOR_WORDS:
        return False
    if _COLOUR.fullmatch(word):
        lower = word.lower()
        return not (len(lower) >= 6 or lower.startswith("r") or len(set(lower)) == 1 or any(c.isdigit() for c in lower))
    return True
_BACKTICKS = LazyPattern(r"`+")


def _code_spans(line: str) -> list[tuple[int, int]]:
    """(start, end) of each inline code span: a run of n backticks up to the next
    run of exactly n (by hand: a pattern is cubic on a run of backticks)."""
    import bisect
    runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(line)]
    by_length: dict[int, list[int]] = {}
    for n, (start, end) in enumerate(runs):
        by_length.setdefault(end - start, []).append(n)
    spans, n = [], 0
    while n < len(runs):
        start, end = runs[n]
        same = by_length[end - start]
        later = same[bisect.bisect_right(same, n)] if bisect.bisect_right(same, n) < len(same) else None
        if later is None or runs[later][0] == end:  # unclosed, or nothing inside: literal backticks
            n += 1
            continue
        spans.append((start, runs[later][1]))
        n = later + 1
    return spans


def _without_code_spans(line: str) -> str:
    """The line with each inline code span made one space."""
    out, done = [], 0
    for start, end in _code_spans(line):
        out += [line[done:start], " "]
        done = end
    return "".join(out) + line[done:] if out else line


def _prose_lines(body: str) -> Iterator[tuple[int, str]]:
    """(0-based line number, line without inline code) of lines outside code fences."""
    lines = body.split("\n")
    fenced, _ = fence_states(lines)
    for i, (line, in_fence) in enumerate(zip(lines, fenced)):
        if not in_fence and not line.startswith(("    ", "\t")):
            yield i, _without_code_spans(line) if "`" in line else line


def inline_tags(body: str) -> list[str]:
    """``#tags`` in the text (not in code, not headings, not URL anchors, not a
    link definition's target such as ``[x]: #a-heading``, not colours, not in HTML tags)."""
    found: list[str] = []
    if "<" in body and "#" in body:  # an HTML tag's attributes blanked, its lines kept (a tag may span several)
        body = _HTML_TAG.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), body)
    for _, line in _prose_lines(body):
        if "#" in line and not LINK_DEFINITION.match(line):
            found.extend(m.group(1).strip("/") for m in _INLINE_TAG.finditer(line) if _is_tag(m.group(1)))
    return unique_ignoring_case(t for t in found if t)


def normalize_tag(tag: str) -> str:
    """How tags are compared: no '#', no edge slashes, lower case (Obsidian ignores case)."""
    return str(tag).strip().lstrip("#").strip("/").lower()


NOTE_DATE_FIELDS = ("date", "created", "updated")


def _iso_date(value) -> str | None:
    """A frontmatter value (text: parse_frontmatter makes no date objects) as an ISO date or date-time, or None."""
    import datetime as _dt
    m = re.match(r"^\s*(\d{4}-\d{2}-\d{2})(?:[T ](\d{2}:\d{2}(?::\d{2})?))?", str(value or ""))
    if not m:
        return None
    try:
        _dt.date.fromisoformat(m.group(1))
    except ValueError:
        return None
    return m.group(1) + (f"T{m.group(2)}" if m.group(2) else "")


def frontmatter_date(meta: dict) -> str | None:
    """The note's own date: the first of ``date``, ``created``, ``updated`` that parses."""
    lowered = {str(k).lower(): v for k, v in meta.items()}
    for key in NOTE_DATE_FIELDS:
        found = _iso_date(lowered.get(key))
        if found:
            return found
    return None


def frontmatter_fields(meta: dict) -> list[tuple[str, str]]:
    """(key, value) pairs to filter on; a list gives one pair per item, a
    nested mapping its JSON text; a key with no value gives (key, '')."""
    import json
    pairs = []
    for key, value in meta.items():
        items = value if isinstance(value, (list, tuple)) else [value]
        for item in items[:200]:
            if item is None:
                text = ""
            elif isinstance(item, bool):
                text = "true" if item else "false"
            elif isinstance(item, (dict, list)):
                text = json.dumps(item, ensure_ascii=False, default=str)
            else:
                text = str(item).strip()
            pairs.append((str(key)[:200], text[:500]))
        if not items:
            pairs.append((str(key)[:200], ""))
    return pairs


class NoteLink(Record):
    """A link from a note: ``target`` is a wikilink's name, or a Markdown link's
    path made relative to the collection; ``fragment`` is '#heading' or '#^block'."""

    target: str
    fragment: str
    kind: str  # "wiki", "markdown", or "html" (a page's HTML name, for its .md source)
    line: int

    @property
    def key(self) -> str:
        """What resolution compares: lower case, no '.md'."""
        return _note_key(self.target)


def _note_key(path: str) -> str:
    path = path.strip().strip("/").lower()
    return path[:-3] if path.endswith(".md") else path


_WIKILINK = LazyPattern(r"(!?)\[\[([^\[\]|#^]*)((?:#\^?|\^)[^\[\]|]*)?(?:\|([^\[\]]*))?\]\]")
_SPACE_OR_PAREN = LazyPattern(r"[)\s]")
_NOT_SPACE = LazyPattern(r"\S")


def _markdown_link_targets(line: str) -> Iterator[str]:
    """The target of each ``[label](target "title")`` in the line, left to right, in one
    pass (see TextFinder; a pattern is quadratic on a long run of '[')."""
    find = TextFinder(line)
    i = line.find("[")
    while i >= 0:
        close = find.find("]", i + 1)
        if close < 0:
            return
        end, target = _markdown_link_end(line, close + 2, find) if line.startswith("](", close) else (-1, "")
        if end < 0:  # every '[' before ``close`` meets the same ']' and fails alike
            i = line.find("[", close + 1)
            continue
        yield target
        i = line.find("[", end)


def _markdown_link_end(line: str, start: int, find: TextFinder) -> tuple[int, str]:
    """After ``[label](``: (the index after the closing ')', the target), or (-1, '')."""
    q = find.find(_NOT_SPACE, start)
    if q < 0:
        return -1, ""
    ends = []
    if line[q] == "<":
        gt = find.find(">", q + 1)
        if gt > q + 1:
            ends.append(gt + 1)
    stop = find.find(_SPACE_OR_PAREN, q)
    stop = len(line) if stop < 0 else stop
    if stop > q:
        ends.append(stop)
    for r in ends:
        if line.startswith(")", r):
            return r + 1, line[q:r]
        title = find.find(_NOT_SPACE, r) if r < len(line) and line[r].isspace() else -1
        if title > r and line[title] in "\"'":
            paren = find.find(")", title + 1)
            if paren >= 0:
                return paren + 1, line[q:r]
    return -1, ""
_MD_LINK_TAIL = LazyPattern(r"^[^\[\]]*\]\(\s*(<[^>]+>|[^)\s]+)(?:\s+[\"'][^)]*)?\)")  # a link whose text began a line above
_ATTACHMENT = LazyPattern(r"\.(png|jpe?g|gif|svg|webp|bmp|avif|pdf|mp3|mp4|m4a|wav|ogg|webm|mov|canvas|excalidraw)$", re.I)


def note_links(body: str, path: str = "", first_line: int = 1, label_first: bool = False) -> list[NoteLink]:
    """``[[wikilinks]]`` (with ``|alias``, ``#heading``, ``^block``) and Markdown
    links to other notes; web links, images and other files are left out. ``label_first``:
    the note writes ``[[label|target]]`` (links_label_first). A wikilink to the note itself (its
    path, or its file name: Dendron writes ``[[dendron://vault/this.note#heading]]`` for
    ``[[#heading]]``) is a link within it, as ``[[#heading]]`` is: no link to a note."""
    import posixpath
    from urllib.parse import unquote

    folder = posixpath.dirname(path)
    itself = {_note_key(path), _note_key(posixpath.basename(path))} if path else set()
    links = []
    for i, line in _prose_lines(body):
        if "[[" in line:
            for m in _WIKILINK.finditer(line):
                target, fragment, _label, _embed = _wikilink_parts(m, label_first)
                if target and not _ATTACHMENT.search(target) and _note_key(target) not in itself:
                    links.append(NoteLink(target, fragment, "wiki", first_line + i))
        targets = list(_markdown_link_targets(line)) if "](" in line else []
        tail = _MD_LINK_TAIL.match(line) if "](" in line else None
        if tail:  # a link whose text began on the line above
            targets.append(tail.group(1))
        definition = LINK_DEFINITION.match(line) if "]:" in line else None
        if definition:
            targets.append(definition.group(2))
        for raw in targets:
            raw = raw.strip("<>")
            if re.match(r"^[A-Za-z][\w+.-]*:", raw) or raw.startswith("#"):
                continue  # a URL (http:, mailto:, obsidian:) or an anchor in the same note
            target, _, fragment = unquote(raw).partition("#")
            lowered = target.lower()
            kind = "markdown"
            if lowered.endswith(".html"):
                # A book built with mdBook (or another static site generator) links its
                # pages by their HTML names: the Markdown file is the page's source.
                target, kind = target[:-5] + ".md", "html"
            elif not lowered.endswith((".md", ".markdown")):
                continue
            resolved = posixpath.normpath(posixpath.join(folder, target)) if not target.startswith("/") else target.lstrip("/")
            links.append(NoteLink(resolved, "#" + fragment if fragment else "", kind, first_line + i))
    return links


def _wikilink_parts(m: re.Match, label_first: bool = False) -> tuple[str, str, str, bool]:
    """(target, fragment ('#heading', '#^block' or ''), label, embedded with '!') of a _WIKILINK match.
    Dendron puts the label first (``[[label|note.name#heading]]``: ``label_first``, or a target
    naming its vault, ``[[label|dendron://vault/note.name]]``); the note is what follows the vault."""
    target, fragment, label = m.group(2).strip(), (m.group(3) or "").strip(), (m.group(4) or "").strip()
    if m.group(4) is not None and (label_first or label.startswith(DENDRON_SCHEME)):
        label, (target, mark, rest) = (m.group(2) + (m.group(3) or "")).strip(), label.partition("#")
        target, fragment = target.strip(), mark + rest
    target = without_dendron_vault(target)
    return target, "#" + fragment.lstrip("#") if fragment else "", label, bool(m.group(1))

# Dendron writes these in every note's frontmatter (created and updated: milliseconds since 1970):
# links_label_first reads them, at display from the index's note_fields (Store.passage_info).
LABEL_FIRST_FIELDS = ("id", "created", "updated")


def links_label_first(meta: dict) -> bool:
    """Whether a note with this frontmatter (parse_frontmatter) writes its links label first,
    ``[[label|target]]``, as Dendron does (Obsidian: ``[[target|label]]``): a Dendron note,
    told by the fields Dendron gives every note (an id, and its creation and update times as
    numbers)."""
    return all(meta.get(name) not in (None, "") for name in LABEL_FIRST_FIELDS) and all(
        str(meta[name]).strip().isdigit() for name in LABEL_FIRST_FIELDS[1:])


def replace_wikilinks(body: str, replace: Callable[[str, str, str, bool], str], label_first: bool = False) -> str:
    """``body`` with each ``[[wikilink]]`` outside code (fences, indented blocks, inline
    code) replaced by ``replace(target, fragment, label, embedded)``: the rule
    ``note_links`` reads links by, for front ends that render them (the app's preview).
    ``label_first``: the note writes ``[[label|target]]`` (links_label_first of its frontmatter)."""
    return _sub_outside_code(body, "[[", _WIKILINK, lambda m: replace(*_wikilink_parts(m, label_first)))


def _sub_outside_code(body: str, mark: str, pattern: LazyPattern, replace: Callable[[re.Match], str]) -> str:
    """``body`` with ``pattern``'s matches replaced outside code (fences, indented blocks,
    inline code); a line without ``mark`` is left as it is, unread."""
    lines = body.split("\n")
    fenced, _ = fence_states(lines)
    for i, (line, in_fence) in enumerate(zip(lines, fenced)):
        if in_fence or mark not in line or line.startswith(("    ", "\t")):
            continue
        pieces, pos = [], 0
        for start, end in _code_spans(line) if "`" in line else ():
            pieces += [pattern.sub(replace, line[pos:start]), line[start:end]]
            pos = end
        lines[i] = "".join(pieces) + pattern.sub(replace, line[pos:])
    return "\n".join(lines)


# Dendron shows ``{{fm.desc}}`` in a note as its frontmatter's ``desc`` (its "variable
# substitution"; ``{{fm.a.b}}`` for a nested field): 175 of its documentation vault's 1,012 notes
# put their description into their summary so.
_FRONTMATTER_VARIABLE = LazyPattern(r"\{\{\s*fm\.([\w-]{1,100}(?:\.[\w-]{1,100}){0,5})\s*\}\}")


def with_frontmatter_values(body: str, meta: dict) -> str:
    """``body`` with each ``{{fm.field}}`` outside code as that frontmatter field's value, as
    Dendron shows it: on one line (a list's items joined by ", "), so the note keeps its lines;
    a field the note lacks, or that holds a mapping, stays as written. What the index holds
    and the app's preview shows. Pure."""
    if "fm." not in body or not _FRONTMATTER_VARIABLE.search(body):  # tldr's pages hold "{{file}}" on every line
        return body

    def value(m: re.Match) -> str:
        found: object = meta
        for key in m.group(1).split("."):
            found = found.get(key) if isinstance(found, dict) else None
        if isinstance(found, list) and all(isinstance(item, (str, int, float)) for item in found):
            found = ", ".join(str(item) for item in found)
        if found is None or isinstance(found, (dict, list)):
            return m.group()
        return ("true" if found else "false") if isinstance(found, bool) else " ".join(str(found).split())

    return _sub_outside_code(body, "{{", _FRONTMATTER_VARIABLE, value)


class LinkResolver:
    """Resolves link targets to notes of one collection, as Obsidian does:
    the exact path first, then a unique path suffix or file name (the shortest
    path wins a tie), then an alias. Markdown links need the exact path; a link
    to a page's HTML name (mdBook) may also name it by file name, as the site's
    pages sit in other folders than their sources (redirects/, old editions)."""

    def __init__(self, notes: Iterable[tuple[int, str, str]]):
        """``notes``: (note id, collection-relative path, comma-separated aliases)."""
        self.by_path: dict[str, int] = {}
        self.by_suffix: dict[str, list[tuple[int, str]]] = {}
        self.by_alias: dict[str, int] = {}
        for note_id, path, aliases in notes:
            key = _note_key(path)
            self.by_path[key] = note_id
            parts = key.split("/")
            for n in range(1, len(parts)):
                self.by_suffix.setdefault("/".join(parts[n:]), []).append((note_id, key))
            for alias in (aliases or "").split(","):
                if alias.strip():
                    self.by_alias.setdefault(alias.strip().lower(), note_id)
        for candidates in self.by_suffix.values():
            candidates.sort(key=lambda c: (len(c[1]), c[1]))

    def resolve(self, kind: str, key: str) -> int | None:
        if key in self.by_path:
            return self.by_path[key]
        if kind == "markdown":
            return None
        if kind == "html":
            key = key.rsplit("/", 1)[-1]
        if key in self.by_suffix:
            return self.by_suffix[key][0][0]
        return self.by_alias.get(key) if kind == "wiki" else None

    @staticmethod
    def keys_for(path: str, aliases: str) -> list[str]:
        """Every link key that may point to the note at ``path``."""
        parts = _note_key(path).split("/")
        keys = ["/".join(parts[n:]) for n in range(len(parts))]
        return keys + [a.strip().lower() for a in (aliases or "").split(",") if a.strip()]
