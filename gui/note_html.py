"""A note's Markdown as HTML that Qt's rich-text engine shows without losing text.

Qt's own ``setMarkdown`` hands raw HTML to its HTML parser, so ``Vec<T>``,
``Box<T>`` or mdBook's ``<Listing …>`` swallow the text after them. Here
markdown-it-py parses the note (CommonMark + GitHub tables, strikethrough and
task lists) and raw HTML is escaped, except for a few harmless inline tags
(``<br>``, ``<kbd>``, ``<sup>``…), which are re-emitted without attributes.
Wrappers such as ``<span>`` or ``<a id>`` give way to their text, HTML
comments disappear, remote images become their alt text (nothing is
fetched), and the markup sticks to what QTextDocument renders (no ``<input>``,
no CSS borders), with colours taken from the palette so a light/dark switch
only needs a re-render.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from markdown_it import MarkdownIt
from markdown_it.token import Token
from mdit_py_plugins.tasklists import tasklists_plugin

import pms

# Inline tags a note may use that cannot hide text; emitted bare (no attributes).
ALLOWED_TAGS = {"br", "kbd", "sub", "sup", "b", "i", "em", "strong", "u", "s", "small", "big", "code", "tt", "var", "samp"}
# Wrappers whose text is what matters (mdBook captions, anchors, centred divs): the tag goes, the text stays.
STRIPPED_TAGS = {"span", "a", "div", "p", "center", "figure", "figcaption", "section", "article", "header", "footer",
                 "details", "summary", "font", "abbr", "cite", "mark", "ins", "del", "q", "dfn", "time", "picture"}
REMOTE_SCHEMES = {"http", "https", "ftp", "ws", "wss"}
_TAG = re.compile(r"<!--.*?-->|<(/?)([A-Za-z][\w:-]*)((?:[^>\"']|\"[^\"]*\"|'[^']*')*?)(/?)>", re.S)
_ATTRIBUTE = re.compile(r"([\w:-]+)\s*=\s*(\"[^\"]*\"|'[^']*'|[^\s>]+)")


@dataclass(frozen=True)
class Colours:
    """What the HTML needs from the palette (as #rrggbb)."""
    muted: str = "#6b7280"
    link: str = "#0b57d0"
    code_background: str = "#f3f4f6"
    quote_bar: str = "#c7ccd4"
    rule: str = "#d0d7de"
    highlight: str = "#dfe9fb"  # Obsidian's ==highlight== (not the search words' yellow)


def is_remote(url: str) -> bool:
    return urlsplit(url).scheme.lower() in REMOTE_SCHEMES


def _image_html(src: str, alt: str, title: str = "", folder: Path | None = None) -> str:
    missing = folder is not None and not is_remote(src) and not (folder / unquote(src.split("#")[0])).is_file()
    if not src or is_remote(src) or missing:
        # A remote image is never fetched (a note must not phone home); a missing
        # file shows nothing. Either way the alt text says what is not shown.
        label = alt or src.rsplit("/", 1)[-1] or "image"
        return f'<span class="refused" title="{html.escape(src)}">[image: {html.escape(label)}]</span>'
    return f'<img src="{html.escape(src)}" alt="{html.escape(alt)}" title="{html.escape(title or alt)}" />'


def sanitize_html(raw: str, *, block: bool, folder: Path | None = None) -> str:
    """Raw HTML from a note: comments dropped, allowed tags kept bare, <img> kept
    for local files, every other tag shown as text."""
    out, last = [], 0
    for m in _TAG.finditer(raw):
        out.append(html.escape(raw[last : m.start()], quote=False) if block else raw[last : m.start()])
        last = m.end()
        whole = m.group(0)
        if whole.startswith("<!--"):
            continue
        closing, name, attributes = m.group(1), m.group(2).lower(), m.group(3)
        if name in ALLOWED_TAGS:
            out.append(f"<{closing}{name}>" if name != "br" else "<br />")
        elif name in STRIPPED_TAGS:
            continue
        elif name == "img" and not closing:
            found = {k.lower(): v.strip("\"'") for k, v in _ATTRIBUTE.findall(attributes)}
            out.append(_image_html(html.unescape(found.get("src", "")), html.unescape(found.get("alt", "")), folder=folder))
        else:
            out.append(html.escape(whole, quote=False))
    out.append(html.escape(raw[last:], quote=False) if block else raw[last:])
    return "".join(out)


LINE_ANCHOR = "pms-line-"  # <a name="pms-line-12">: where body line 12 begins in the document (NotePreview scrolls by it)
CODE_ANCHOR = "pms-code-"  # <a name="pms-code-12-20">: code whose first line is body line 12, up to line 20


def line_anchor(token) -> str:
    """An empty anchor naming the source line a block starts on (Qt attaches it to the next character)."""
    return f'<a name="{LINE_ANCHOR}{token.map[0] + 1}"></a>' if token.map else ""


def _with_line(rule):
    """A render rule whose output opens the block, then names its first line."""
    def render(self, tokens, idx, options, env) -> str:
        opened = rule(self, tokens, idx, options, env) if rule else self.renderToken(tokens, idx, options, env)
        return opened if tokens[idx].hidden else opened + line_anchor(tokens[idx])
    return render


def _tr_open(self, tokens, idx, options, env) -> str:
    env["row_line"] = line_anchor(tokens[idx])  # a row's anchor goes into its first cell
    return self.renderToken(tokens, idx, options, env)


def _cell_open(self, tokens, idx, options, env) -> str:
    return self.renderToken(tokens, idx, options, env) + env.pop("row_line", "")


def _html_inline(self, tokens, idx, options, env) -> str:
    content = tokens[idx].content
    if content.startswith("<input") and "task-list-item-checkbox" in content:
        return "☑ " if "checked" in content else "☐ "
    return sanitize_html(content, block=False, folder=env.get("folder"))


def _html_block(self, tokens, idx, options, env) -> str:
    content = tokens[idx].content
    inner = sanitize_html(content, block=True, folder=env.get("folder")).strip()
    if not inner:
        return line_anchor(tokens[idx])  # only comments or empty anchors: its lines are where the next block starts
    return f'<p class="raw">{line_anchor(tokens[idx])}{inner.replace(chr(10), "<br />")}</p>\n'


def _image(self, tokens, idx, options, env) -> str:
    token = tokens[idx]
    alt = self.renderInlineAsText(token.children or [], options, env)
    return _image_html(str(token.attrGet("src") or ""), alt, str(token.attrGet("title") or ""), env.get("folder"))


def _fence(self, tokens, idx, options, env) -> str:
    # A one-cell table: the only way QTextDocument gives a block padding and a background.
    token = tokens[idx]
    code = html.escape(token.content.rstrip("\n"), quote=False)
    # A fence names its lines (opening fence, end): each line of code is a block of its own, so a
    # passage that starts inside it lands on its line. Indented code has no opening line.
    first = token.map[0] + (1 if token.type == "fence" else 0) if token.map else 0
    anchor = f'<a name="{CODE_ANCHOR}{first + 1}-{token.map[1]}"></a>' if token.map else ""
    return f'<table class="code" width="100%" cellpadding="8" cellspacing="0"><tr><td><pre>{anchor}{code}</pre></td></tr></table>\n'


def _blockquote_open(self, tokens, idx, options, env) -> str:
    # QTextDocument has no border-left: a narrow coloured cell draws the bar.
    return '<table class="quote" cellspacing="0" cellpadding="0"><tr><td class="bar" width="3"></td><td class="quoted">\n'


def _blockquote_close(self, tokens, idx, options, env) -> str:
    return "</td></tr></table>\n"


def _heading_open(self, tokens, idx, options, env) -> str:
    # Code in a heading keeps the heading's size: <code> would reset it to the body size.
    for child in tokens[idx + 1].children or []:
        if child.type == "code_inline":
            child.meta["in_heading"] = True
    return self.renderToken(tokens, idx, options, env)


def _code_inline(self, tokens, idx, options, env) -> str:
    token = tokens[idx]
    text = html.escape(token.content, quote=False)
    if token.meta.get("in_heading"):
        return f'<span style="font-family: monospace">{text}</span>'
    return f"<code>{text}</code>"


def _table_open(self, tokens, idx, options, env) -> str:
    return '<table class="grid" cellspacing="0" cellpadding="5" border="1">\n'


def _obsidian_markup(state) -> None:
    """Obsidian's own Markdown, after inline parsing: a callout's first line ("> [!tip] Title",
    the engine's ``callout_title``) becomes its title in bold on a line of its own, and
    ==highlights== (``highlighted_parts``) are marked; code is left as written."""
    tokens = state.tokens
    for i, token in enumerate(tokens):
        if token.type == "blockquote_open" and i + 2 < len(tokens) and tokens[i + 2].type == "inline":
            _callout_title(tokens[i + 2])
        if token.type == "inline" and token.children and any("==" in c.content for c in token.children if c.type == "text"):
            token.children = [piece for child in token.children for piece in _highlighted(child)]


def _callout_title(inline: Token) -> None:
    children = inline.children or []
    if not children or children[0].type != "text":
        return
    line_end = next((n for n, c in enumerate(children) if c.type in ("softbreak", "hardbreak")), len(children))
    first_line = "".join(c.content for c in children[:line_end])
    callout = pms.callout_title(children[0].content) if children[0].content.lstrip().startswith("[!") else None
    if callout is None:
        return
    kind, title = callout
    if line_end == 1 or not first_line[children[0].content.index("]") + 1:].strip("+- \t"):
        children[0].content = title  # no title written (or only the marker): the kind names it
    else:
        children[0].content = children[0].content[children[0].content.index("]") + 1:].lstrip("+-").lstrip()
    if line_end < len(children):
        children[line_end] = Token("hardbreak", "br", 0)
    inline.children = [Token("strong_open", "strong", 1), *children[:line_end], Token("strong_close", "strong", -1),
                       *children[line_end:]]


def _highlighted(child: Token) -> list[Token]:
    if child.type != "text" or "==" not in child.content:
        return [child]
    out: list[Token] = []
    for piece, marked in pms.highlighted_parts(child.content):
        text = Token("text", "", 0)
        text.content = piece
        out += [Token("mark_open", "span", 1), text, Token("mark_close", "span", -1)] if marked else [text]
    return out


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).use(tasklists_plugin)
    for name, rule in (("html_inline", _html_inline), ("html_block", _html_block), ("image", _image),
                       ("fence", _fence), ("code_block", _fence), ("blockquote_open", _blockquote_open),
                       ("blockquote_close", _blockquote_close), ("heading_open", _heading_open),
                       ("code_inline", _code_inline), ("table_open", _table_open), ("tr_open", _tr_open),
                       ("th_open", _cell_open), ("td_open", _cell_open)):
        md.add_render_rule(name, rule)
    md.add_render_rule("mark_open", lambda self, tokens, idx, options, env: '<span class="mark">')
    md.add_render_rule("mark_close", lambda self, tokens, idx, options, env: "</span>")
    md.core.ruler.after("inline", "obsidian_markup", _obsidian_markup)
    # Blocks of text name the line they start on; a tight list's paragraphs render nothing, so its items do.
    md.add_render_rule("heading_open", _with_line(_heading_open))
    for name in ("paragraph_open", "list_item_open"):
        md.add_render_rule(name, _with_line(None))
    return md


_MD = _parser()


def style_sheet(colours: Colours) -> str:
    """The document's default style sheet (the CSS subset QTextDocument knows)."""
    c = colours  # body text has no colour here: Qt paints it in the palette's, live
    return (f"a {{ color: {c.link}; }}"
            f"code, pre {{ font-family: monospace; }}"
            f"code {{ background-color: {c.code_background}; }}"
            f"table.code {{ background-color: {c.code_background}; margin-top: 6px; margin-bottom: 10px; }}"
            f"pre {{ margin: 0; white-space: pre-wrap; }}"  # long lines wrap: no sideways scrolling
            f"td.bar {{ background-color: {c.quote_bar}; }}"
            f"td.quoted {{ padding-left: 10px; color: {c.muted}; }}"
            f"table.quote {{ margin-top: 6px; margin-bottom: 6px; }}"
            f"table.grid {{ border-color: {c.rule}; border-style: solid; margin-top: 6px; margin-bottom: 10px; }}"
            f"th {{ background-color: {c.code_background}; }}"
            f"p.raw {{ font-family: monospace; color: {c.muted}; }}"
            f".refused {{ color: {c.muted}; font-style: italic; }}"
            f".mark {{ background-color: {c.highlight}; }}"
            f".header {{ color: {c.muted}; }}")


def markdown_to_html(markdown: str, folder: Path | None = None) -> str:
    """The body of a note (frontmatter already removed) as HTML for QTextDocument;
    ``folder`` (the note's) is where relative image paths are looked up."""
    markdown = pms.without_obsidian_hidden(markdown)  # hidden in Obsidian's reading view
    return _MD.render(pms.title_line_as_heading(markdown), {"folder": folder})  # "% Title": the note's heading

