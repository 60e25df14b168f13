"""A query as words, and a hit as front ends show it.

Owns: ``parse_query`` (phrases, exclusions, prefixes, stopwords, CJK words), ``Hit``, the
snippet and its marks (``highlight_pattern``: one highlighting rule for every front end),
``copy_groups`` (copies shown under their original),
terminal-safe text, and ``VectorStatus``.

May import: config, language.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .config import WORD_TOKEN, Factory, Hint, LazyPattern, Record, TupleFields, clean_query, named_tuple
from .language import folded_stem, note_language


# Words too common to carry meaning; dropped from keyword queries unless the
# query has nothing else (a query of only stopwords still searches them).
STOPWORDS = frozenset("""a an and are as at be been but by can could did do does for from had has have how i if in into is it
its me my no not of on or our so such than that the their them then there these they this to was we were what when where which
who whom why will with would you your""".split())

# Scripts written without spaces between words: Han, Hiragana, Katakana.
# Search as you type (prefix_last): a last word of fewer letters is still a word, not a prefix:
# "c*" or "co*" expands to thousands of the vault's words and costs 50-500 ms a keystroke.
PREFIX_MIN_LETTERS = 3
MAX_CJK_WORDS = 8  # Chinese/Japanese words of one query searched in cjk_fts; more add nothing but work


class Term(Record):
    tokens: tuple[str, ...]
    phrase: bool = False
    prefix: bool = False
    # Other words that count as this one (word, as a prefix): its stem in an inflecting
    # language (with_folded_suffixes), the vault's words a typo stands for (Retrieval.request).
    variants: tuple[tuple[str, bool], ...] = ()

    def fts(self) -> str:
        quoted = _fts_word(" ".join(self.tokens), self.prefix)
        if not self.variants:
            return quoted
        return "(" + " OR ".join([quoted, *(_fts_word(word, prefix) for word, prefix in self.variants)]) + ")"


def _fts_word(text: str, prefix: bool) -> str:
    return '"' + text.replace('"', '""') + '"' + ("*" if prefix else "")


class ParsedQuery(Record):
    """A user's words turned into safe FTS5 pieces (never raw FTS5 syntax)."""

    terms: list[Term]
    excluded: list[Term]
    text: str = ""  # the query without its -excluded pieces: what names and the query vector read

    @property
    def words(self) -> list[str]:
        return [t for term in self.terms for t in term.tokens]

    def match_any(self) -> str | None:
        if not self.terms:
            return None
        expr = " OR ".join(t.fts() for t in self.terms)
        return self._with_exclusions(f"({expr})")

    def match_all(self) -> str | None:
        if len(self.terms) < 2:
            return None
        return self._with_exclusions("(" + " AND ".join(t.fts() for t in self.terms) + ")")

    def _with_exclusions(self, expr: str) -> str:
        if self.excluded:
            expr += " NOT (" + " OR ".join(t.fts() for t in self.excluded) + ")"
        return expr


def with_folded_suffixes(parsed: ParsedQuery) -> ParsedQuery:
    """``parsed`` with each word of an inflecting language also searched as the prefix of its
    stem (folded_stem: "полумарафон" finds "полумарафону"); a prefix too (the word being typed
    in the app: "хлеба" finds "хлеб" while no space follows it). Pure."""
    language = ""
    terms = []
    for term in parsed.terms:
        stem = None
        if not term.phrase and term.tokens[0].isalpha():
            language = language or note_language(parsed.text)
            stem = folded_stem(term.tokens[0], language)
            if term.prefix and stem == term.tokens[0]:
                stem = None  # the prefix itself already
        terms.append(term.replace(variants=(*term.variants, (stem, True))) if stem else term)
    return parsed.replace(terms=terms)


def is_partial_word(query: str) -> bool:
    """The query ends in a word still being typed that is too short to match as a prefix (PREFIX_MIN_LETTERS)."""
    words = query.split()
    return bool(words) and not query[-1:].isspace() and len(words[-1].strip('"*-')) < PREFIX_MIN_LETTERS


def parse_query(query: str, prefix_last: bool = False, *, cleaned: bool = False) -> ParsedQuery:
    """Parse what a user typed: words, "exact phrases", -excluded, prefix*. Every piece
    becomes a quoted FTS5 string, so no input is an SQL or FTS5 syntax error.
    ``cleaned``: ``query`` already went through clean_query (a SearchRequest's has)."""
    terms: list[Term] = []
    excluded: list[Term] = []
    query = query if cleaned else clean_query(query)
    dropped: list[tuple[int, int]] = []
    for m in re.finditer(r'(-?)"([^"]*)"|(\S+)', query):
        if m.group(3) is not None:
            raw = m.group(3)
            # "-word" excludes; "--flag" is a word to find (command-line options fill technical notes).
            negative = raw.startswith("-") and len(raw) > 1 and not raw.startswith("--")
            if negative:
                raw = raw[1:]
            tokens = tuple(t.lower() for t in WORD_TOKEN.findall(raw))
            if not tokens:
                continue
            term = Term(tokens, phrase=len(tokens) > 1, prefix=raw.endswith("*"))
        else:
            negative = bool(m.group(1))
            tokens = tuple(t.lower() for t in WORD_TOKEN.findall(m.group(2)))
            if not tokens:
                continue
            term = Term(tokens, phrase=True)
        (excluded if negative else terms).append(term)
        if negative:
            dropped.append(m.span())
    # The last word is a prefix while it is typed: not once a space or a closing quote follows it,
    # nor while it is too short to be one (is_partial_word).
    if prefix_last and terms and not terms[-1].phrase and not query[-1:].isspace() and not query.endswith('"') \
            and not is_partial_word(query):
        terms[-1].prefix = True
    meaningful = [t for t in terms if t.phrase or t.prefix or t.tokens[0] not in STOPWORDS]
    if meaningful:
        terms = meaningful
    seen, unique = set(), []
    for t in terms:
        key = (t.tokens, t.prefix)
        if key not in seen:
            seen.add(key)
            unique.append(t)
    if not unique:
        excluded = []  # "-foo" alone: nothing to search, not "everything but foo"
    text = query
    for start, end in reversed(dropped):
        text = text[:start] + text[end:]
    return ParsedQuery(unique[:32], excluded[:16], " ".join(text.split()) if dropped else query)


class Hit(Record):
    """One search result: a note (its best passage) or, with passages=True, a passage."""

    path: str
    collection: str
    abspath: str
    docid: str
    title: str
    heading_path: str
    start_line: int
    end_line: int
    score: float
    snippet: str  # readable text: the passage's words around the match, without Markdown ("" for a copy)
    marks: list[tuple[int, int]] = Factory(list)  # (start, end) of each matched word in snippet (render_snippet)
    bm25_rank: int | None = None
    vector_rank: int | None = None
    bm25_score: float | None = None
    vector_distance: float | None = None
    passage_id: int | None = None
    text: str = ""
    tags: list[str] = Factory(list)
    date: str | None = None  # the note's date: frontmatter date/created/updated, else the file's mtime
    collection_description: str = ""  # what the collection holds (collection add --description)
    folder_description: str = ""  # the nearest described folder above the note (collection describe)
    name_rank: int | None = None  # rank among notes whose title, alias or file name the query names
    fusion: str = ""  # how this query's lists were fused (for --explain)
    stub: bool = False  # a note that mostly points elsewhere or is nearly empty (is_stub): ranked below what it points to
    copy_of: str = ""  # "collection/path" of a hit above it that this note copies (mark_copies); "" for an original
    page: int | None = None  # a PDF's page the passage is on (1-based); lines count within it. None: a note
    # Absolute, comparable across searches (the score only ranks within one): the
    # passage's cosine similarity to the query (None without embeddings), the share of
    # the query's words it holds, and the larger of the two (RankingSettings.relevance_floor).
    similarity: float | None = None
    matched: float | None = None
    relevance: float | None = None
    obsidian_url: str = ""  # obsidian://open?path=… when the note is in an Obsidian vault (paths.ObsidianVaults), else ""

    @property
    def ref(self) -> str:
        """The note, "collection/path": what ``copy_of`` names and get/links/related read."""
        return f"{self.collection}/{self.path}"

    @property
    def chunk_id(self) -> int | None:
        """The old name of ``passage_id``, still readable."""
        return self.passage_id

    def to_dict(self, explain: bool = False) -> dict:
        d = self.as_dict()
        d.pop("text")
        if explain:
            d["chunk_id"] = self.passage_id  # the old key, kept a release for readers of saved --explain output
        else:
            d.pop("passage_id")
            d.pop("fusion")
        return d


MARK_OPEN, MARK_CLOSE = "\x02", "\x03"
# A snippet shows about 220 characters; one longer than this is cut around its first match.
SNIPPET_MAX_CHARS = 600


def snippet_spans(marked: str) -> tuple[str, list[tuple[int, int]]]:
    """Text of a passage as a reader sees it (passage_display_text) with \x02..\x03
    around matched words -> (the text, the (start, end) of each marked span in it)."""
    if len(marked) > SNIPPET_MAX_CHARS:
        first = marked.find(MARK_OPEN)
        start = max(0, first - SNIPPET_MAX_CHARS // 3) if first > 0 else 0
        marked = ("…" if start else "") + marked[start : start + SNIPPET_MAX_CHARS] + "…"
    marked = " ".join(marked.split())
    text, marks, start = [], [], None  # type: ignore[assignment]  # None: no mark open
    length = 0
    for piece in re.split("([\x02\x03])", marked):
        if piece == MARK_OPEN:
            start = length
        elif piece == MARK_CLOSE:
            if start is not None and length > start:
                marks.append((start, length))
            start = None  # type: ignore[assignment]  # None: no mark open
        else:
            text.append(piece)
            length += len(piece)
    return "".join(text), marks


SNIPPET_MIN_CHARS = 100  # a snippet shorter than this, cut short by its passage's end, takes the words before it


def snippet_with_lead(marked: str, shown: str, want: int = SNIPPET_MIN_CHARS) -> str:
    """A snippet (with its \x02..\x03 marks) that FTS5 cut short at the end of ``shown``, the
    passage it comes from, given the words before it up to ``want`` characters: matches in a
    passage's closing words made a snippet of them alone ("…sync-notes-across-devices.")."""
    if not marked.startswith("\u2026") or marked.endswith("\u2026"):
        return marked
    body = " ".join(marked[1:].split())
    core = body.replace(MARK_OPEN, "").replace(MARK_CLOSE, "")
    if len(core) >= want:
        return marked
    flat = " ".join(shown.split())
    at = flat.rfind(core)
    if at <= 0:
        return marked
    start = max(0, at - (want - len(core)))
    if start:
        start = flat.find(" ", start) + 1 or at  # from a word's start
    return ("\u2026" if start else "") + flat[start:at] + body


# html.escape(quote=False) written out: importing html is a cost on a cold search.
def _escape_html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# What a terminal would act on rather than show: C0 and C1 controls (ESC
# starts colour, title and clipboard sequences; CSI is also \x9b), DEL, and the
# bidirectional overrides that reorder what is shown.
_TERMINAL_UNSAFE = LazyPattern("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str, keep: str = "") -> str:
    """Text from a note or a file name made safe to print on a terminal: each
    control character (except those in ``keep``) shown as \\xNN or \\uNNNN."""
    def escape(m: re.Match) -> str:
        c = m.group()
        return c if c in keep else f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
    return _TERMINAL_UNSAFE.sub(escape, text)


def render_snippet(text: str, marks: Sequence[Sequence[int]] = (), style: str = "plain",
                   mark: tuple[str, str] = ("<mark>", "</mark>")) -> str:
    """A Hit's snippet and marks for a front end: ``plain`` (MCP, JSON: the text),
    ``ansi`` (a terminal: marks bold yellow, control characters escaped) or
    ``html`` (Qt, a browser: escaped, marks wrapped in ``mark``)."""
    if style == "plain":
        return text
    escape, (open_, close) = (_escape_html, mark) if style == "html" else (terminal_safe, ("\x1b[1;33m", "\x1b[0m"))
    out, at = [], 0
    for start, end in sorted(marks, key=tuple):
        if start < at:
            continue
        out += [escape(text[at:start]), open_, escape(text[start:end]), close]
        at = end
    out.append(escape(text[at:]))
    return "".join(out)


def without_heading_line(shown: str, heading_path: str) -> str:
    """A passage as shown (passage_display_text) without its first line when that line
    is the passage's heading (the last of ``heading_path``, which hits carry and every
    front end shows above the snippet) and more text follows. A pure function."""
    first, _, rest = shown.partition("\n")
    heading = heading_path.rsplit(" > ", 1)[-1]
    same = WORD_TOKEN.findall(first.lower()) == WORD_TOKEN.findall(heading.lower())
    return rest if same and rest.strip() else shown


def highlight_pattern(words: Sequence[str]) -> re.Pattern | None:
    """The one rule for marking a query's words in text (snippets, the app's preview):
    words of four letters or more by their stem, so 'sync' lights up 'syncing' (the
    last two letters of a longer word dropped, at least four kept); two- and
    three-letter words whole, so 'ai' leaves 'aim' alone. None: nothing to mark."""
    whole = sorted({re.escape(w) for w in words if 2 <= len(w) <= 3})
    stems = sorted({re.escape(w[: max(4, len(w) - 2)]) for w in words if len(w) > 3}, key=len, reverse=True)
    parts = ([r"\b(?:" + "|".join(stems) + r")\w*"] if stems else []) + ([r"\b(?:" + "|".join(whole) + r")\b"] if whole else [])
    return re.compile("|".join(parts), re.I) if parts else None


def mark_terms(text: str, words: Sequence[str], max_chars: int = 220) -> tuple[str, list[tuple[int, int]]]:
    """A snippet for a passage found by meaning: the window around the first
    query word (highlight_pattern), with marks."""
    flat = re.sub(r"\s+", " ", text).strip()
    pattern = highlight_pattern(words)
    start = 0
    if pattern:
        m = pattern.search(flat)
        if m and m.start() > max_chars // 3:
            start = flat.rfind(" ", 0, m.start() - max_chars // 3) + 1
    window = flat[start : start + max_chars]
    if start + max_chars < len(flat):
        window = window.rsplit(" ", 1)[0] + "\u2026"
    if start:
        window = "\u2026" + window
    if pattern:
        window = pattern.sub(lambda m: MARK_OPEN + m.group(0) + MARK_CLOSE, window)
    return snippet_spans(window)


def copy_groups(hits: Sequence[Hit]) -> list[tuple[Hit, list[Hit]]]:
    """Hits as front ends show them: each original, in order, with the hits that copy
    it (``copy_of``, mark_copies) under the first hit of its note (with passages, the
    note's first passage). A copy whose original is not among ``hits`` stands alone."""
    copies: dict[str, list[Hit]] = {hit.ref: [] for hit in hits if not hit.copy_of}
    groups: list[tuple[Hit, list[Hit]]] = []
    placed: set[str] = set()
    for hit in hits:
        if hit.copy_of and hit.copy_of in copies:
            copies[hit.copy_of].append(hit)
        elif hit.copy_of or hit.ref in placed:
            groups.append((hit, []))
        else:
            placed.add(hit.ref)
            groups.append((hit, copies[hit.ref]))
    return groups


@named_tuple
class VectorStatus(TupleFields):
    """Whether vector search can run; when not, why (a sentence) and a stable
    code, one of VECTOR_UNAVAILABLE (for a badge or a program to act on)."""

    ok: bool
    reason: str = ""
    code: str = ""
    hint: Hint | None = None  # what makes it run (a command)


# Why vector (and so hybrid) search cannot run: code -> a short label.
VECTOR_UNAVAILABLE = {
    "not-installed": "embeddings not installed",
    "no-sqlite-vec": "sqlite-vec unavailable",
    "disabled": "embeddings off",
    "model-unavailable": "model unavailable",
    "not-embedded": "no embeddings in the index yet",
    "reembed-needed": "the index needs sync --reembed",
}


def folder_description(described: dict[str, str], path: str) -> str:
    """The description of the deepest described folder that holds ``path``."""
    folder = path
    while "/" in folder:
        folder = folder.rsplit("/", 1)[0]
        if folder in described:
            return described[folder]
    return ""
