"""A note's YAML frontmatter, read without a YAML library.

Owns: splitting the ``---`` block off a note and reading the subset of YAML that notes use
(scalars, flow and block lists and maps, quoting), with budgets on size, depth and nodes
so that no block can cost unbounded work (``FrontmatterError`` names the line at fault).
Written by hand: the stdlib-only core has no YAML reader, and PyYAML would be a dependency.

May import: config.
"""

from __future__ import annotations

import re

from .config import LazyPattern, PMSError


_FRONTMATTER_END = LazyPattern(r"^(---|\.\.\.)[ \t]*$", re.M)


def split_frontmatter(text: str) -> tuple[str | None, str, int]:
    """Return (yaml_block or None, body, number of lines the frontmatter took)."""
    if not text.startswith("---"):
        return None, text, 0
    first_nl = text.find("\n")
    if first_nl < 0 or text[:first_nl].strip() != "---":
        return None, text, 0
    end = _FRONTMATTER_END.search(text, first_nl + 1)
    if not end:
        return None, text, 0
    block = text[first_nl + 1 : end.start()]
    after = text.find("\n", end.end())
    body = "" if after < 0 else text[after + 1 :]
    consumed = text[: len(text) - len(body)].count("\n") if after >= 0 else text.count("\n") + 1
    return block, body, consumed


# Frontmatter: ONE reader, so the index is the same on every machine. ---------
#
# Hand-written for the stdlib-only core (also where PyYAML is installed). It reads the YAML that
# notes carry (Obsidian's properties): ``key: value``; quoted strings; ``|``
# and ``>`` blocks (with ``-``/``+``); lists as ``- item`` or ``[a, b]``;
# nested maps, also in lists and as ``{a: 1}``; comments; anchors and aliases.
# Values are what the user wrote: ``true``/``false`` are booleans, ``null``,
# ``~`` and nothing are None, everything else is a string as written (numbers
# and dates too: a ``where`` filter and a title compare the text, ``1.10``
# stays ``1.10``). Anything else is read as far as it goes, never an error.
FRONTMATTER_MAX_CHARS = 64 * 1024   # a bigger block is not read (such a note is indexed without its metadata)
FRONTMATTER_MAX_DEPTH = 32          # nesting deeper than this is read as text
FRONTMATTER_MAX_NODES = 10_000      # values after alias expansion: a 300-byte "YAML bomb" stands for billions


class FrontmatterError(PMSError):
    """The note's frontmatter cannot be read safely (the note is skipped)."""


_YAML_BOOLS = {"true": True, "false": False}
_YAML_NULLS = ("", "~", "null")
_YAML_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "/": "/", " ": " ", "e": "\x1b"}


def _yaml_plain(text: str):
    """A plain (unquoted) scalar: a boolean, None or the text as written."""
    text = text.strip()
    lowered = text.lower()
    if lowered in _YAML_NULLS:
        return None
    return _YAML_BOOLS.get(lowered, text)


def _yaml_double_quoted(inner: str) -> str:
    out, i = [], 0
    while i < len(inner):
        c = inner[i]
        if c == "\\" and i + 1 < len(inner):
            nxt = inner[i + 1]
            width = {"x": 2, "u": 4, "U": 8}.get(nxt)
            if width:
                try:
                    out.append(chr(int(inner[i + 2 : i + 2 + width], 16)))
                    i += 2 + width
                    continue
                except ValueError:
                    pass
            out.append(_YAML_ESCAPES.get(nxt, "\\" + nxt))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _quoted_end(text: str, start: int) -> int:
    """Index of the quote closing the string opened at ``start`` (-1: unclosed)."""
    quote, i = text[start], start + 1
    while i < len(text):
        if text[i] == "\\" and quote == '"':
            i += 2
            continue
        if text[i] == quote:
            if quote == "'" and text.startswith("''", i):
                i += 2
                continue
            return i
        i += 1
    return -1


def _unquote(text: str) -> str:
    """A whole quoted scalar (quotes included) -> its text; line breaks fold to spaces."""
    inner = re.sub(r"[ \t]*\n[ \t]*", " ", text[1:-1])
    return inner.replace("''", "'") if text[0] == "'" else _yaml_double_quoted(inner)


def yaml_scalar(text: str):
    """One scalar as written on a line: quoted, or plain without its ``# comment``."""
    text = text.strip()
    if text[:1] in ("'", '"') and _quoted_end(text, 0) == len(text) - 1:
        return _unquote(text)
    return _yaml_plain(_strip_comment(text))


def _strip_comment(text: str) -> str:
    m = re.search(r"(^|[ \t])#", text)
    return text[: m.start()].rstrip() if m else text


def _split_key(line: str) -> tuple[str, str] | None:
    """``key: rest`` -> (key, rest); None when the line is no mapping entry (no regex: linear)."""
    text = line.strip()
    if text[:1] in ("'", '"'):
        end = _quoted_end(text, 0)
        if end < 0 or not text.startswith(":", end + 1) or text[end + 2 : end + 3] not in ("", " ", "\t"):
            return None
        return _unquote(text[: end + 1]), text[end + 2 :].strip()
    if not text or text[0] in "#[]{},&*!|>%@`" or text.startswith(("- ", "? ")) or text == "-":
        return None
    pos = text.find(":")
    while pos > 0 and text[pos + 1 : pos + 2] not in ("", " ", "\t"):
        pos = text.find(":", pos + 1)
    if pos <= 0 or "#" in text[:pos] and re.search(r"[ \t]#", text[:pos]):
        return None
    return text[:pos].strip(), text[pos + 1 :].strip()


class _FrontmatterReader:
    """Indentation-driven reader over the block's lines (see the comment above)."""

    def __init__(self, block: str):
        self.lines = block.replace("\t", "    ").split("\n")
        self.anchors: dict[str, object] = {}

    def indent(self, i: int) -> int:
        return len(self.lines[i]) - len(self.lines[i].lstrip(" "))

    def significant(self, i: int) -> int:
        """The first line at or after ``i`` that is not blank or a comment."""
        while i < len(self.lines) and (not self.lines[i].strip() or self.lines[i].lstrip().startswith("#")):
            i += 1
        return i

    def read(self) -> dict:
        i, out = self.significant(0), {}
        while i < len(self.lines):  # the top level: a mapping; stray lines are passed over
            value, j = self.node(i, self.indent(i), 0)
            if isinstance(value, dict):
                out.update(value)
            i = self.significant(max(j, i + 1))
        return out

    def node(self, i: int, indent: int, depth: int):
        """The block node whose first line is ``i`` (at ``indent``) -> (value, next line)."""
        text = self.lines[i].strip()
        if depth > FRONTMATTER_MAX_DEPTH:
            return text, i + 1
        if text == "-" or text.startswith("- "):
            return self.sequence(i, indent, depth)
        if _split_key(self.lines[i]) is not None:
            return self.mapping(i, indent, depth)
        return self.value(text, i, indent - 1, depth)

    def mapping(self, i: int, indent: int, depth: int):
        out: dict = {}
        while i < len(self.lines) and self.indent(i) == indent:
            entry = _split_key(self.lines[i])
            if entry is None:
                break
            key, rest = entry
            value, i = self.value(rest, i, indent, depth, in_mapping=True)
            out[key] = value
            i = self.significant(i)
        return out, i

    def sequence(self, i: int, indent: int, depth: int):
        out = []
        while i < len(self.lines) and self.indent(i) == indent:
            text = self.lines[i].strip()
            if not (text == "-" or text.startswith("- ")):
                break
            item = text[1:].lstrip(" ")
            if item and not item.startswith("#") and (item.startswith("- ") or item == "-" or
                                                     (item[0] not in "[{'\"" and _split_key(item) is not None)):
                # "- key: value" or "- - item": a node that starts on the dash's line
                self.lines[i] = " " * (indent + len(text) - len(item)) + item
                value, i = self.node(i, self.indent(i), depth + 1)
            else:
                value, i = self.value(item, i, indent, depth)
            out.append(value)
            i = self.significant(i)
        return out, i

    def value(self, rest: str, i: int, indent: int, depth: int, in_mapping: bool = False):
        """The value written after a key or dash on line ``i`` (``indent``: that line's)."""
        anchor = None
        m = re.match(r"&(\S+)\s*", rest)
        if m:
            anchor, rest = m.group(1), rest[m.end():]
        rest = re.sub(r"^!!?\w*\s+", "", rest)  # a tag (!!str): read as written
        value, i = self._value(rest, i, indent, depth, in_mapping)
        if anchor:
            self.anchors[anchor] = value
        return value, i

    def _value(self, rest: str, i: int, indent: int, depth: int, in_mapping: bool):
        nxt = self.significant(i + 1)
        if not rest or rest.startswith("#"):
            if nxt < len(self.lines):
                child = self.indent(nxt)
                text = self.lines[nxt].strip()
                if child > indent or (in_mapping and child == indent and (text == "-" or text.startswith("- "))):
                    return self.node(nxt, child, depth + 1)
            return None, i + 1
        if rest.startswith("*"):
            return self.anchors.get(_strip_comment(rest)[1:].strip()), i + 1
        if rest[0] in "|>":
            return self.block_scalar(rest, i, indent)
        if rest[0] in "[{'\"":
            # a flow collection or quoted string may run over several lines: the more-indented
            # lines after it are joined, then scanned once for where it closes (linear)
            end = i + 1
            while end < len(self.lines) and (self.indent(end) > indent or not self.lines[end].strip()):
                end += 1
            parts = [rest] + [self.lines[j].strip() for j in range(i + 1, end)]
            closed_at = self._close_index("\n".join(parts))
            if closed_at >= 0:
                used = "\n".join(parts).count("\n", 0, closed_at)
                parts, end = parts[: used + 1], i + 1 + used
            text = "\n".join(parts)
            if rest[0] in "'\"":
                close = _quoted_end(text, 0)
                return (_unquote(text[: close + 1]) if close > 0 else _yaml_plain(text)), end
            value, _ = _flow(text, 0, depth, self.anchors)
            return value, end
        # a plain scalar: more-indented lines after it continue it (folded with spaces)
        text, end = _strip_comment(rest), i + 1
        while end < len(self.lines) and self.indent(end) > indent and self.lines[end].strip():
            line = self.lines[end].strip()
            if line.startswith("#"):
                break
            text += " " + _strip_comment(line)
            end += 1
        return _yaml_plain(text), end

    @staticmethod
    def _close_index(text: str) -> int:
        """Where the flow collection or quoted string opening ``text`` closes; -1 when it does not."""
        if text[0] in "'\"":
            return _quoted_end(text, 0)
        level, i = 0, 0
        while i < len(text):
            c = text[i]
            if c in "'\"" and (i == 0 or text[i - 1] in " \t\n[{,:"):
                end = _quoted_end(text, i)
                if end < 0:
                    return -1
                i = end
            elif c in "[{":
                level += 1
            elif c in "]}":
                level -= 1
                if level <= 0:
                    return i
            i += 1
        return -1

    def block_scalar(self, header: str, i: int, indent: int):
        """``|`` keeps line breaks, ``>`` folds lines into one paragraph (blank lines
        stay breaks); ``-`` drops the final line break, ``+`` keeps all of them."""
        header = _strip_comment(header)
        chomp = "-" if "-" in header else "+" if "+" in header else ""
        digits = re.search(r"[1-9]", header)
        end, body = i + 1, []
        block_indent = indent + int(digits.group()) if digits else None
        while end < len(self.lines):
            line = self.lines[end]
            if line.strip():
                if block_indent is None:
                    block_indent = self.indent(end)
                if self.indent(end) < block_indent or block_indent <= indent:
                    break
                body.append(line[block_indent:])
            else:
                body.append("")
            end += 1
        while body and not body[-1] and end <= len(self.lines) and chomp != "+":
            body.pop()
        if header[0] == "|":
            text = "\n".join(body)
        else:  # folded: a single break is a space, a blank line a break; more-indented lines keep theirs
            text = body[0] if body else ""
            for prev, line in zip(body, body[1:]):
                if not line:
                    text += "\n"
                elif not prev:
                    text += line
                elif line.startswith(" ") or prev.startswith(" "):
                    text += "\n" + line
                else:
                    text += " " + line
        if chomp != "-" and body:
            text += "\n"
        return text, end


def _flow(text: str, i: int, depth: int, anchors: dict):
    """A flow node (``[a, b]``, ``{k: v}`` or a scalar) at ``text[i]`` -> (value, index after it)."""
    while i < len(text) and text[i] in " \t\n":
        i += 1
    if i >= len(text):
        return None, i
    c = text[i]
    if c in "[{" and depth <= FRONTMATTER_MAX_DEPTH:
        closing, items, mapping = ("]" if c == "[" else "}"), [], {}
        i += 1
        while i < len(text):
            while i < len(text) and text[i] in " \t\n,":
                i += 1
            if i >= len(text) or text[i] == closing:
                i += 1
                break
            key, i = _flow(text, i, depth + 1, anchors)
            while i < len(text) and text[i] in " \t\n":
                i += 1
            if i < len(text) and text[i] == ":":
                value, i = _flow(text, i + 1, depth + 1, anchors)
                if c == "{":
                    mapping[str(key)] = value
                else:
                    items.append({str(key): value})
            elif c == "{":
                mapping[str(key)] = None
            else:
                items.append(key)
            if i < len(text) and text[i] not in ",]}" + closing:
                i += 1  # a stray character: skip it rather than loop
        return (mapping if c == "{" else items), i
    if c in "'\"":
        end = _quoted_end(text, i)
        if end > 0:
            return _unquote(text[i : end + 1]), end + 1
    j = i
    while j < len(text) and text[j] not in ",]}\n" and not (text[j] == ":" and text[j + 1 : j + 2] in (" ", "\n", "", ",")):
        j += 1
    if j == i:
        return None, j + 1
    if c == "*":
        return anchors.get(text[i + 1 : j].strip()), j
    return _yaml_plain(text[i:j]), j


def _yaml_size(value, memo: dict) -> int:
    """How many values ``value`` stands for once every alias is expanded (aliases share
    objects, so memoising by identity counts a bomb in time linear in its text)."""
    key = id(value)
    if key not in memo:
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        total = 1
        for child in children:
            total += _yaml_size(child, memo)
            if total > FRONTMATTER_MAX_NODES:
                break
        memo[key] = total
    return memo[key]


def parse_frontmatter(block: str | None) -> dict:
    """Frontmatter -> dict (see the comment above for what is read and how); a
    FrontmatterError when aliases would expand it past FRONTMATTER_MAX_NODES."""
    if not block or not block.strip() or len(block) > FRONTMATTER_MAX_CHARS:
        return {}
    meta = _FrontmatterReader(block).read()
    if _yaml_size(meta, {}) > FRONTMATTER_MAX_NODES:
        raise FrontmatterError(f"its frontmatter expands to more than {FRONTMATTER_MAX_NODES:,} YAML values "
                               "(repeated or recursive aliases, a 'YAML bomb'): shorten the frontmatter to index it")
    return meta


def as_list(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v).strip().lstrip("#") for v in value if v is not None and str(v).strip()]
    return [v.strip().lstrip("#") for v in re.split(r"[,\s]+", str(value)) if v.strip()]
