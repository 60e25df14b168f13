"""Web clipping: a URL -> a new Markdown note (trafilatura, optional); PDFs too.

Owns: fetching (by the outbound policy, with the clipper's address rule for redirects and
size limits), extracting the article in a worker process under memory and element budgets,
tidying its Markdown, file names, and writing a new file (never over another).

May import: config, outbound, frontmatter, markdown, pdf, paths, filters.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

from .config import (
    VERSION, LazyPattern, PMSError, Record, Worker, WorkerStopped, _dt, env_number, hex_digest, module_available, now_iso,
    pms_command,
)
from .outbound import AddressCheck, Answer, address_kind, most_private, open_url, split_url
from .frontmatter import split_frontmatter, yaml_scalar
from .markdown import FENCE, fence_states, first_heading, is_table_rule
from .pdf import INSTALL_PDF, PDF_NO_TEXT, PDF_PACKAGE, PDF_SUFFIX, PdfError, PdfReader, pdf_available, pdf_title
from .paths import is_skipped_folder, walk_markdown
from .filters import checked_number


CLIP_TIMEOUT = 20.0  # seconds without an answer before a fetch gives up
CLIP_MAX_BYTES = 10 * 1024 * 1024  # a web page bigger than this is not an article
CLIP_MAX_PDF_BYTES = 100 * 1024 * 1024  # a PDF may carry images: it may be bigger
PDF_CONTENT_TYPES = {"application/pdf", "application/x-pdf"}
CLIP_MAX_REDIRECTS = 5
CLIP_MAX_TIMEOUT = 3600.0  # --timeout above an hour is a typo, not a wish
CLIP_MIN_TEXT_CHARS = 80  # letters and digits; "It works!" and app shells are not notes
CLIP_SLUG_CHARS = 80
CLIP_USER_AGENT = f"Mozilla/5.0 (compatible; PMS/{VERSION}; personal note clipper)"
HTML_CONTENT_TYPES = {"text/html", "application/xhtml+xml"}
# Device names Windows refuses as file names, whatever the extension.
WINDOWS_RESERVED_NAMES = {"con", "prn", "aux", "nul", "conin$", "conout$",
                          *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}
_INSTALL_CLIPPER = f"pip install trafilatura lxml_html_clean (or run: {pms_command('setup')})"


class AlreadyClipped(PMSError):
    """The URL is already a note in the collection (``.path`` says which)."""

    def __init__(self, message: str, path: Path):
        super().__init__(message)
        self.path = path


class ExtractedPage(Record):
    """A web page reduced to its main text, as Markdown, and its metadata."""

    content: str
    title: str
    url: str | None = None
    author: str | None = None
    published: str | None = None
    site: str | None = None
    description: str | None = None
    lang: str | None = None

    @property
    def metadata(self) -> dict:
        return {k: v for k, v in self.as_dict().items() if k != "content" and v}


class ClippedNote(Record):
    """What ``Collection.clip`` made: the new file and its page."""

    path: Path  # absolute
    relpath: str  # inside the collection, posix
    collection: str
    title: str
    source: str | None
    docid: str | None
    page: ExtractedPage
    index_error: str | None = None
    original: Path | None = None  # a clipped PDF kept beside its note (keep_original=True)

    def to_dict(self) -> dict:
        return {"path": str(self.path), "relpath": self.relpath, "collection": self.collection, "title": self.title,
                "source": self.source, "docid": self.docid, "index_error": self.index_error,
                **({"original": str(self.original)} if self.original else {}),
                **{k: v for k, v in self.page.metadata.items() if k not in ("title", "url")}}


def import_trafilatura():
    require_clipper()
    try:
        import trafilatura
        from lxml import etree  # noqa: F401  (trafilatura's parser; checked here for a clear message)
    except ImportError as exc:
        raise PMSError(f"clipping needs the trafilatura package ({exc.name or exc} is missing): {_INSTALL_CLIPPER}") from None
    import logging

    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)  # its warnings are not the user's business
    return trafilatura


def require_clipper() -> None:
    """A PMSError unless trafilatura and lxml are installed (found, not imported: the page is read in a worker)."""
    for module in ("trafilatura", "lxml"):
        if not module_available(module):
            raise PMSError(f"clipping needs the trafilatura package ({module} is missing): {_INSTALL_CLIPPER}")


def check_clip_url(url: str) -> str:
    """The URL, stripped, if it is an http(s) URL with a host; a PMSError otherwise."""
    url = (url or "").strip()
    parts = split_url(url, repr(url))
    if parts.scheme.lower() not in ("http", "https"):
        what = f"a {parts.scheme.lower()}: address, not a web page" if parts.scheme else "not a URL"
        raise PMSError(f"{url!r} is {what}: only http and https URLs can be clipped "
                       f"(for a saved page, pass its file path: {pms_command('clip page.html --url URL')})")
    if not parts.hostname or re.search(r"[\s\x00-\x1f\x7f]", url):
        raise PMSError(f"{url!r} is not a valid URL (it needs a host name and no spaces)")
    return url


def _describe_content_type(ctype: str) -> str:
    kinds = {"application/pdf": "a PDF document", "application/json": "JSON data", "text/plain": "plain text",
             "application/zip": "a ZIP archive", "application/octet-stream": "a binary file",
             "text/xml": "an XML document", "application/xml": "an XML document", "text/css": "a stylesheet",
             "application/javascript": "JavaScript code", "text/javascript": "JavaScript code"}
    major = ctype.split("/")[0]
    kind = kinds.get(ctype) or {"image": "an image", "video": "a video", "audio": "an audio file"}.get(major)
    if not kind and ctype.endswith("+json"):
        kind = "JSON data"
    return f"{kind} ({ctype})" if kind else ctype


def _http_status_error(url: str, status: int, reason: str) -> PMSError:
    """One line for an HTTP error status, with what to try."""
    if 300 <= status < 400:
        return PMSError(f"too many redirects from {url} (more than {CLIP_MAX_REDIRECTS}): "
                        "open it in a browser and clip the address it ends at")
    hint = {401: "the page needs a login: save it from your browser and clip the file",
            403: "the site refuses access: save the page from your browser and clip the file",
            404: "page not found: check the URL", 410: "the page was removed",
            429: "too many requests: wait a little and try again"}.get(status)
    hint = hint or ("server error: try again later" if status >= 500 else "the server refused the request")
    return PMSError(f"{url} answered HTTP {status} {one_line(reason) or ''} ({hint})".replace("  (", " ("))


def _fetch_error(url: str, exc: BaseException, timeout: float) -> PMSError:
    """One line for each way a fetch can fail, naming the cause and what to try."""
    import socket
    import ssl
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or url
    if isinstance(exc, socket.gaierror):
        return PMSError(f"cannot find the server {host!r} (DNS lookup failed: check the URL and your internet connection)")
    if isinstance(exc, ConnectionRefusedError):
        return PMSError(f"connection refused by {host}:{parts.port or (443 if parts.scheme == 'https' else 80)} "
                        "(the site is down or the URL has the wrong port)")
    if isinstance(exc, TimeoutError):
        return PMSError(f"no answer from {host} within {timeout:g} s (try again later, or allow longer with --timeout)")
    if isinstance(exc, ssl.SSLError):
        return PMSError(f"secure connection to {host} failed ({getattr(exc, 'reason', None) or exc}): check the URL")
    if isinstance(exc, (ConnectionError, EOFError)) or type(exc).__name__ in ("IncompleteRead", "RemoteDisconnected"):
        return PMSError(f"the connection to {host} was cut while downloading {url} (try again)")
    if type(exc).__name__ == "InvalidURL":
        return PMSError(f"{url!r} is not a valid URL ({exc})")
    return PMSError(f"cannot fetch {url}: {one_line(exc) or type(exc).__name__}")


def clip_address_check() -> AddressCheck:
    """The clipper's outbound rule (for ``open_url``): the URL the user gave may be any address
    they chose (its public addresses first, when its name has both); a redirect only public
    addresses, or ones of the kind the user's URL was (loopback, link-local, private): a page
    must not steer PMS to a cloud metadata address or a service on the user's own network.
    100.64/10 (shared), fec0::/10 (site-local) and every other range that is not globally
    routable count as private."""
    given: list[str] = []  # the kind of address the user's URL reached

    def allowed(url: str, host: str, addresses: list[str], hop: int) -> list[str]:
        public = [a for a in addresses if address_kind(a) == "public"]
        if hop == 0:
            chosen = public or addresses
            given.append(most_private(chosen))
            return chosen
        chosen = [a for a in addresses if address_kind(a) in ("public", given[0])]
        if not chosen:
            raise PMSError(f"the page redirects to {url!r}, a {most_private(addresses)} address: redirects are followed only "
                           "to public addresses or to the kind of address you gave (clip that URL itself if you mean it)")
        return chosen

    return allowed


def fetch_html(url: str, timeout: float = CLIP_TIMEOUT, max_bytes: int = CLIP_MAX_BYTES) -> tuple[bytes | str, str]:
    """Download a web page: (its HTML, the URL it ended at after redirects), by the outbound
    policy (names looked up once, every redirect checked). ``timeout`` bounds the whole
    download: name lookup, connection, headers and body (a trickling server cannot stretch it)."""
    url = check_clip_url(url)
    timeout = checked_number(timeout, "timeout", minimum=0.001, maximum=CLIP_MAX_TIMEOUT, whole=False)
    deadline = time.monotonic() + timeout
    import http.client

    answered = False
    try:
        with open_url(url, deadline=deadline, allowed=clip_address_check(), redirects=CLIP_MAX_REDIRECTS, headers={
                "User-Agent": CLIP_USER_AGENT, "Accept-Encoding": "identity",
                "Accept": "text/html,application/xhtml+xml;q=0.9,application/pdf;q=0.8,*/*;q=0.5"}) as response:
            answered = True
            final_url, ctype, declared, data = response.url, *_page_body(url, response, max_bytes)
    except PMSError:
        raise
    except TimeoutError:
        raise (_too_slow(url, timeout) if answered else _fetch_error(url, TimeoutError(), timeout)) from None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise _fetch_error(url, exc, timeout) from None
    if data.startswith(b"%PDF-"):
        return data, final_url  # bytes: Collection.clip reads it as a PDF
    if declared and ctype in PDF_CONTENT_TYPES:
        raise PMSError(f"{url} says it is a PDF but is not one (the server sent something else)")
    if not declared and not re.search(rb"<(!doctype\s+html|html|head|body|p|div|article)\b", data[:4096], re.I):
        raise PMSError(f"{url} does not look like a web page (no content type and no HTML): only HTML pages can be clipped")
    charset = response.headers.get_content_charset()
    if charset:  # the HTTP header outranks the page's own <meta charset>
        import codecs

        with contextlib.suppress(LookupError):
            codecs.lookup(charset)
            return data.decode(charset, errors="replace"), final_url
    return data, final_url


def _page_body(url: str, response: Answer, max_bytes: int) -> tuple[str, str | None, bytes]:
    """(content type, the declared Content-Type header, the body) of an answer that is a page or a
    PDF within ``max_bytes``; a PMSError for anything else."""
    from urllib.parse import urlsplit

    if response.status >= 300:
        raise _http_status_error(url, response.status, response.reason)
    ctype = (response.headers.get_content_type() or "").lower()
    declared = response.headers.get("Content-Type")
    if declared and ctype not in HTML_CONTENT_TYPES | PDF_CONTENT_TYPES:
        raise PMSError(f"{url} is {_describe_content_type(ctype)}, not a web page: only HTML pages and PDFs can be clipped")
    if ctype in PDF_CONTENT_TYPES or urlsplit(response.url).path.lower().endswith(PDF_SUFFIX):
        max_bytes = max(max_bytes, CLIP_MAX_PDF_BYTES)
    length = response.headers.get("Content-Length")
    if length and length.isdigit() and int(length) > max_bytes:
        raise PMSError(f"{url} is too large to clip ({int(length) / 1048576:.1f} MB; the limit is {max_bytes / 1048576:g} MB)")
    data = response.body(max_bytes)
    if data is None:
        raise PMSError(f"{url} is too large to clip (more than {max_bytes / 1048576:g} MB; stopped downloading)")
    return ctype, declared, data


def _too_slow(url: str, timeout: float) -> PMSError:
    return PMSError(f"{url} did not finish downloading within {timeout:g} s (a slow or stalled server: "
                    "try again later, or allow longer with --timeout)")


# The worker that reads a page (lxml and trafilatura) runs under this address space: a page
# built to balloon fails alone. Its size and element budgets: docs/robustness.md, "Memory budgets".
CLIP_MEMORY_MB_DEFAULT = 1024
# Elements a page may have (start tags, counted before parsing): a long Wikipedia article has
# tens of thousands; a page of a million costs the extractor gigabytes.
CLIP_MAX_ELEMENTS = 200_000


def extract_within(html: bytes | str, url: str | None, deadline: float, timeout: float) -> ExtractedPage:
    """extract_from_html in a worker process under a memory cap (PMS_CLIP_MEMORY_MB), stopped at
    ``deadline``: a clip's download and extraction share one --timeout."""
    _refuse_hostile_markup(html)  # here first: a page refused by its size needs no worker
    memory_mb = int(env_number("PMS_CLIP_MEMORY_MB", CLIP_MEMORY_MB_DEFAULT))
    with Worker("pms-clip-reader", memory_mb << 20) as worker:
        try:
            return worker.call(extract_from_html, html, url, timeout=deadline - time.monotonic())
        except WorkerStopped as exc:
            if exc.why == "time":
                raise PMSError(f"reading {url or 'the page'} took longer than {timeout:g} s "
                               "(a very complex page; allow longer with --timeout)") from None
            if exc.why == "start":
                raise PMSError(f"cannot read {url or 'the page'}: {exc}") from None
            raise PMSError(f"reading {url or 'the page'} needs more than {memory_mb} MB of memory "
                           f"(PMS_CLIP_MEMORY_MB={memory_mb}): too big to be an article") from None


# -- HTML -> Markdown ---------------------------------------------------------------------
_CODE_LANGUAGE = LazyPattern(r"(?:^|[\s;])(?:language|lang|highlight-source|highlight|brush)[-:]\s*([A-Za-z0-9_+#.-]+)")
_NOT_A_LANGUAGE = {"default", "none", "plain", "nohighlight"}


def _code_language(pre) -> str:
    """The language of a <pre> block from the usual class conventions
    (language-x, lang-x, highlight-source-x, Sphinx highlight-x, brush: x)."""
    candidates = [pre, *pre.iterchildren("code"), *list(pre.iterancestors())[:3]]
    for element in candidates:
        m = _CODE_LANGUAGE.search(element.get("class") or "")
        if m and m.group(1).lower() not in _NOT_A_LANGUAGE:
            return m.group(1).lower()
    return ""


def _unwrap_code_tables(tree) -> None:
    """Syntax highlighters put code in a table (line numbers | code): keep only the code."""
    for table in list(tree.iter("table")):
        pres = list(table.iter("pre"))
        if not pres or table.getparent() is None:
            continue
        outside = table.text_content()
        for pre in pres:
            outside = outside.replace(pre.text_content(), "", 1)
        if outside.strip(" \t\r\n0123456789"):
            continue  # a real table that happens to hold code: leave it to the extractor
        code = [pre for pre in pres if pre.text_content().strip(" \t\r\n0123456789")]
        parent, index = table.getparent(), table.getparent().index(table)
        for offset, pre in enumerate(code):
            pre.tail = None
            parent.insert(index + 1 + offset, pre)
        if code:
            code[-1].tail = table.tail
        else:
            parent.insert(index + 1, parent.makeelement("span", {}))
            parent[index + 1].tail = table.tail
        parent.remove(table)


def _stash_code_blocks(tree) -> tuple[str, dict[int, tuple[str, str]]]:
    """Replace each <pre> with a paragraph "START<n> flattened code END<n>": trafilatura
    flattens <pre> into inline code, so ``_restore_code_blocks`` puts the lines back as a
    fence; the code's words stay where they were for the extractor to judge the page."""
    import secrets

    _unwrap_code_tables(tree)
    nonce = "PMSCODE" + secrets.token_hex(4)
    blocks: dict[int, tuple[str, str]] = {}
    for pre in list(tree.iter("pre")):
        parent = pre.getparent()
        if parent is None or any(a.tag == "pre" for a in pre.iterancestors()):
            continue
        for br in pre.iter("br"):
            br.tail = "\n" + (br.tail or "")
        code = pre.text_content().replace("\r\n", "\n").replace("\r", "\n").strip("\n").rstrip()
        if not code.strip():
            continue
        n = len(blocks)
        blocks[n] = (_code_language(pre), code)
        marker = parent.makeelement("p", {})
        marker.text = f"{nonce}S{n}E {' '.join(code.split())} {nonce}F{n}E"
        marker.tail = pre.tail
        parent.replace(pre, marker)
    return nonce, blocks


def _fence(language: str, code: str) -> str:
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{language}\n{code}\n{ticks}"


def _restore_code_blocks(markdown: str, nonce: str, blocks: dict[int, tuple[str, str]]) -> str:
    marked = re.compile(rf"^([^\n]*?){nonce}S(\d+)E.*?{nonce}F\2E([^\n]*)$", re.M | re.S)

    def put_back(m: re.Match) -> str:
        before, after = m.group(1), m.group(3)
        language, code = blocks[int(m.group(2))]
        if before.lstrip().startswith("|"):  # inside a table cell: a fence cannot live there
            return before + "`" + " ".join(code.split()).replace("|", "\\|").replace("`", "'") + "`" + after
        parts = [before.rstrip()] if before.strip() else []
        parts.append(_fence(language, code))
        if after.strip():
            parts.append(after.strip())
        return "\n\n".join(parts)

    markdown = marked.sub(put_back, markdown)
    return re.sub(rf"{nonce}[SF]\d+E", "", markdown)  # a marker the extractor split or cut


_LIST_ITEM = LazyPattern(r"^\s*(?:[-*+]|\d+[.)])\s")
_PERMALINK_LABELS = ("#", "¶", "§", "🔗", "link", "permalink")


def _without_permalink(line: str) -> str:
    """A heading without its trailing permalink (``## Title [#](url#title)``); string code,
    linear where a pattern would backtrack on spaces."""
    text = line.rstrip()
    if not text.endswith(")"):
        return line
    k = text.find("](", text.rfind(")", 0, len(text) - 1) + 1)
    while k >= 0:
        for label in _PERMALINK_LABELS:
            b = k - len(label) - 1
            if b >= 0 and text[b] == "[" and text[b + 1 : k].lower() == label:
                return text[:b].rstrip()
        k = text.find("](", k + 1)
    return line


# '![alt](data:…)' with no bracket in alt and no parenthesis in the data: each
# attempt stops at the next bracket or parenthesis, so a run of them is linear.
_DATA_IMAGE = LazyPattern(r"!\[[^\][]*\]\(data:[^()]*\)")


def _tidy_markdown(markdown: str) -> str:
    """Blank lines around fences, no source-code indentation outside them
    (it would turn paragraphs into code blocks), no inline data: images."""
    lines = markdown.split("\n")
    fenced, _ = fence_states(lines)
    out: list[str] = []
    for i, (line, in_fence) in enumerate(zip(lines, fenced)):
        if in_fence:
            opening = FENCE.match(line) and (i == 0 or not fenced[i - 1])
            if opening and out and out[-1].strip():
                out.append("")
            out.append(line)
            closing = FENCE.match(line) and not opening and (i + 1 >= len(lines) or not fenced[i + 1])
            if closing and i + 1 < len(lines) and lines[i + 1].strip():
                out.append("")
            continue
        line = _DATA_IMAGE.sub("", line).rstrip() if "](data:" in line else line.rstrip()
        if line.startswith("#"):  # "## Title [#](url#title)": a permalink, not content
            line = _without_permalink(line)
        out.append(line if _LIST_ITEM.match(line) else line.lstrip())
    text = "\n".join(_with_table_headers(out))
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def _with_table_headers(lines: list[str]) -> list[str]:
    """A table whose first row was not <th> comes out of trafilatura without
    the |---| rule, which Markdown needs to see a table: add it."""
    fenced, _ = fence_states(lines)
    out: list[str] = []
    for i, line in enumerate(lines):
        out.append(line)
        starts_table = line.startswith("|") and not fenced[i] and (i == 0 or not lines[i - 1].startswith("|"))
        if starts_table and not (i + 1 < len(lines) and is_table_rule(lines[i + 1])):
            cells = len(re.split(r"(?<!\\)\|", line.strip().strip("|")))
            out.append("|" + "---|" * cells)
    return out


def _page_language(tree) -> str | None:
    root = tree.getroottree().getroot() if hasattr(tree, "getroottree") else tree
    for value in (root.get("lang"), root.get("{http://www.w3.org/XML/1998/namespace}lang"),
                  *root.xpath("//meta[translate(@http-equiv,'CONTENT-LANGUAGE','content-language')='content-language']/@content"),
                  *root.xpath("//meta[@property='og:locale']/@content")):
        if value and re.fullmatch(r"[A-Za-z]{2,3}([-_][A-Za-z0-9]{2,8})*", value.strip()):
            return value.strip().replace("_", "-")
    return None


def one_line(value) -> str | None:
    """Metadata as one clean line: no control or format characters, single spaces."""
    if value is None:
        return None
    text = " ".join(str(value).split())
    text = "".join(ch for ch in text if ch.isprintable())
    return text or None


# No article has an element with this many attributes; lxml's parser takes quadratic
# time in them before any deadline can be checked, so a page with more is refused.
CLIP_MAX_ATTRIBUTES = 2_000


def _refuse_hostile_markup(html: bytes | str) -> None:
    """A PMSError for a page built to stall or balloon the parser: more than CLIP_MAX_ELEMENTS
    elements (start tags, counted without parsing), or an element with more than
    CLIP_MAX_ATTRIBUTES attributes (one linear scan counting the '=' of each start tag, an
    upper bound on its attributes)."""
    start_tag = re.compile(r"<[A-Za-z]" if isinstance(html, str) else rb"<[A-Za-z]")
    for count, _ in enumerate(start_tag.finditer(html), 1):  # type: ignore[arg-type]  # str or bytes alike
        if count > CLIP_MAX_ELEMENTS:
            raise PMSError(f"the page has more than {CLIP_MAX_ELEMENTS:,} elements: too big to be an article")
    lt, gt, eq = ("<", ">", "=") if isinstance(html, str) else (b"<", b">", b"=")
    i = html.find(lt)  # type: ignore[arg-type]  # str or bytes alike
    while i >= 0:
        j = html.find(gt, i)  # type: ignore[arg-type]  # str or bytes alike
        end = len(html) if j < 0 else j
        if end - i > CLIP_MAX_ATTRIBUTES * 2 and html.count(eq, i, end) > CLIP_MAX_ATTRIBUTES:  # type: ignore[arg-type]  # str or bytes alike
            raise PMSError(f"the page has an element with more than {CLIP_MAX_ATTRIBUTES:,} attributes: "
                           "too complex to be an article")
        if j < 0:
            return
        i = html.find(lt, j)  # type: ignore[arg-type]  # str or bytes alike


def extract_from_html(html: bytes | str, url: str | None = None) -> ExtractedPage:
    """The main text of a page as Markdown, with its metadata (no network, no index): headings,
    lists, links, tables, images and code blocks (as fences); no navigation or boilerplate."""
    import copy

    trafilatura = import_trafilatura()
    if not html or not (html.strip() if isinstance(html, str) else html.strip()):
        raise PMSError("the page is empty: nothing to clip")
    _refuse_hostile_markup(html)
    try:
        tree = trafilatura.load_html(html)
    except Exception as exc:  # lxml raises a variety of parse errors
        raise PMSError(f"the page could not be read as HTML ({exc})") from None
    if tree is None:
        raise PMSError("the page could not be read as HTML (is it a web page?)")
    meta = trafilatura.extract_metadata(copy.deepcopy(tree), default_url=url)
    lang = _page_language(tree)
    nonce, blocks = _stash_code_blocks(tree)
    markdown = trafilatura.extract(tree, url=url, output_format="markdown", include_links=True, include_images=True,
                                   include_tables=True, include_formatting=True, include_comments=False,
                                   deduplicate=False) or ""
    markdown = _tidy_markdown(_restore_code_blocks(markdown, nonce, blocks))
    plain = re.sub(r"\]\([^()]*\)", "", markdown)  # link targets are not text (no '(' inside: linear on a run of '](')
    if len(re.sub(r"[\W_]+", "", plain)) < CLIP_MIN_TEXT_CHARS:
        raise PMSError(f"nothing to clip at {url or 'this page'}: no article text found "
                       "(the page may need JavaScript or a login; save it from your browser and clip the file)")
    title = one_line(meta.title) or one_line(first_heading(markdown, level=1)) or None
    if not title and url:
        title = one_line(url.rstrip("/").rsplit("/", 1)[-1])
    title = title or "Untitled page"
    if not markdown.lstrip().startswith("# "):
        markdown = f"# {title}\n\n{markdown}"
    page_url = url or (meta.url if meta.url and re.match(r"https?://", meta.url) else None)
    return ExtractedPage(content=markdown, title=title, url=page_url, author=one_line(meta.author),
                         published=one_line(meta.date), site=one_line(meta.sitename or meta.hostname),
                         description=one_line(meta.description), lang=one_line(lang))


def extract_from_url(url: str, timeout: float = CLIP_TIMEOUT, max_bytes: int = CLIP_MAX_BYTES) -> ExtractedPage:
    """Fetch a web page and extract it (``doc.content`` is Markdown, ``doc.title``, metadata)."""
    require_clipper()  # say so before any download
    deadline = time.monotonic() + checked_number(timeout, "timeout", minimum=0.001, maximum=CLIP_MAX_TIMEOUT, whole=False)
    html, final_url = fetch_html(url, timeout=timeout, max_bytes=max_bytes)
    return extract_within(html, final_url, deadline, timeout)


# -- the note on disk ---------------------------------------------------------------------
def extract_from_pdf(data: bytes, url: str | None = None, fallback_title: str = "") -> ExtractedPage:
    """A PDF's text as Markdown, one ``## Page N`` section per page with text (the
    reading runs in the PDF worker, within its deadline and memory cap). Needs pypdfium2."""
    if not pdf_available():
        raise PMSError(f"clipping a PDF needs {PDF_PACKAGE}: {INSTALL_PDF}")
    try:
        with PdfReader() as reader:
            pdf = reader.read(bytes(data))  # its bytes, not a temp file: nothing is left behind if PMS is killed
    except PdfError as exc:
        raise PMSError(str(exc).removeprefix("skipped: ")) from None
    if not any(pdf.pages):
        raise PMSError(PDF_NO_TEXT.removeprefix("skipped: ") + "; nothing clipped")
    if not fallback_title and url:
        from urllib.parse import unquote, urlsplit

        fallback_title = unquote(urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1]).rsplit(".", 1)[0]
    title = pdf_title(pdf.title, pdf.pages, fallback_title or "Clipped PDF")
    content = "\n\n".join(f"## Page {n}\n\n{text}" for n, text in enumerate(pdf.pages, 1) if text)
    return ExtractedPage(content=f"# {title}\n\n{content}\n", title=title, url=url)


def clip_slug(title: str, max_chars: int = CLIP_SLUG_CHARS) -> str:
    """A file-name-safe slug on Windows, macOS and Linux: ASCII letters, digits
    and single hyphens, no dots, no separators, never a reserved device name.
    Empty when nothing of the title survives ASCII folding."""
    import unicodedata

    ascii_text = unicodedata.normalize("NFKD", str(title)).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
    if len(slug) > max_chars:  # cut at a word boundary when one is near
        cut = slug[: max_chars + 1].rfind("-")
        slug = slug[: cut if cut > max_chars // 2 else max_chars].rstrip("-")
    if slug in WINDOWS_RESERVED_NAMES:
        slug += "-page"
    return slug


def clip_filename(title: str, url: str | None = None, day: _dt.date | None = None) -> str:
    """``YYYY-MM-DD-<slug>.md``; the slug falls back on the URL's path, then its host."""
    import datetime as _dt
    from urllib.parse import unquote, urlsplit

    slug = clip_slug(title)
    if not slug and url:
        parts = urlsplit(url)
        last = unquote(parts.path.rstrip("/").rsplit("/", 1)[-1]).rsplit(".", 1)[0]
        slug = clip_slug(last) or clip_slug(parts.hostname or "")
    day = day or _dt.date.today()
    return f"{day.isoformat()}-{slug or 'clipped-page'}.md"


def _yaml_quote(value: str) -> str:
    """A single-quoted YAML scalar: read back by ``parse_frontmatter``."""
    return "'" + value.replace("'", "''") + "'"


def render_clip_note(page: ExtractedPage, source: str | None, clipped: str | None = None) -> str:
    """The note's text: YAML frontmatter (title, source, clipped, metadata, sha256 of the body) + Markdown."""
    body = page.content if page.content.endswith("\n") else page.content + "\n"
    fields = {"title": page.title, "source": source, "clipped": clipped or now_iso(), "author": page.author,
              "published": page.published, "site": page.site, "description": page.description, "lang": page.lang,
              "sha256": hex_digest(body.encode("utf-8"))}
    lines = [f"{key}: {_yaml_quote(clean)}" for key, value in fields.items() if (clean := one_line(value))]
    return "---\n" + "\n".join(lines) + "\n---\n" + body


def _same_page_key(url: str) -> str:
    """A URL for duplicate detection: scheme and host lower-case, no fragment, no default port, no trailing slash."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        p = urlsplit(url.strip())
        host = (p.hostname or "").lower()
        port = p.port
    except ValueError:
        return url.strip()
    netloc = host if port in (None, 80 if p.scheme == "http" else 443) else f"{host}:{port}"
    return urlunsplit((p.scheme.lower(), netloc, p.path.rstrip("/") or "/", p.query, ""))


def _clip_source_values(block: str) -> list[str]:
    """The values of a frontmatter's ``source:`` lines (string code: linear on runs of spaces)."""
    return [value for line in block.split("\n") if line.startswith("source:") and (value := line[7:].strip(" \t"))]


def find_clipped(root: Path, glob: str, urls: Iterable[str]) -> Path | None:
    """The note under ``root`` (matching ``glob``) whose frontmatter ``source:`` is one of ``urls``."""
    wanted = {_same_page_key(u) for u in urls if u}
    if not wanted:
        return None
    for _rel, full, _st in walk_markdown(root, glob):
        try:
            with open(full, "rb") as fh:
                head = fh.read(8192).decode("utf-8", errors="replace")
        except OSError:
            continue
        block, _, _ = split_frontmatter(head.replace("\r\n", "\n"))
        for raw in _clip_source_values(block or ""):
            value = yaml_scalar(raw)
            if isinstance(value, str) and _same_page_key(value) in wanted:
                return Path(full)
    return None


def clip_target_folder(root: Path, collection_name: str, subfolder: str | None) -> Path:
    """The folder a clip goes to, checked but not made yet (``made_folder`` makes it as the note
    is written, so a clip that fails leaves no empty folders): inside the collection folder
    ``root``, existing or creatable, and writable."""
    if not root.is_dir():
        raise PMSError(f"the folder of collection {collection_name!r} is missing ({root}): restore it, or remove the collection")
    folder = root
    if subfolder:
        parts = Path(subfolder.replace("\\", "/")).parts
        if Path(subfolder).is_absolute() or any(p in ("..", ".") or is_skipped_folder(p) for p in parts):
            raise PMSError(f"--subfolder {subfolder!r} must be a relative folder inside the collection (no '..', no hidden folders)")
        folder = root.joinpath(*parts)
        if not folder.resolve().is_relative_to(root.resolve()):
            raise PMSError(f"--subfolder {subfolder!r} leads outside the collection folder {root}")
    existing = folder
    try:
        while not existing.exists():
            existing = existing.parent
    except OSError as exc:  # a name too long for the file system, say
        raise PMSError(f"cannot create {folder}: {exc.strerror or exc}") from None
    if not existing.is_dir():
        raise PMSError(f"cannot create {folder}: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PMSError(f"cannot write to {existing} (read-only folder: check its permissions)")
    return folder


@contextlib.contextmanager
def made_folder(folder: Path):
    """``folder`` made, with its parents, for the block; the folders made are removed again when the block fails."""
    made = []
    missing = folder
    while not missing.exists():
        made.append(missing)
        missing = missing.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PMSError(f"cannot create {folder}: {exc.strerror or exc} (check the folder's permissions)") from None
    try:
        yield folder
    except BaseException:
        for path in made:  # the deepest first; only if still empty
            with contextlib.suppress(OSError):
                path.rmdir()
        raise


def write_new_file(folder: Path, filename: str, data: bytes) -> Path:
    """Write ``data`` to ``folder/filename`` (or ``-2``, ``-3``... when taken), atomically:
    a temp file in the same folder, then a hard link to the free name, which
    fails instead of overwriting. A failure leaves no partial file."""
    import secrets

    stem, dot, suffix = filename.rpartition(".")
    stem, suffix = (stem, "." + suffix) if dot else (filename, ".md")
    root = folder.resolve()
    try:
        # Not mkstemp, whose file is private (0600): a clipped note gets the permissions
        # any new file there gets (0666 less the umask, default ACLs), like its neighbours.
        tmp = str(folder / f".pms-clip-{secrets.token_hex(8)}.tmp")
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_BINARY", 0), 0o666)
    except OSError as exc:
        raise PMSError(f"cannot write to {folder}: {exc.strerror or exc} (check the folder's permissions and free space)") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        for n in range(1, 1000):
            target = folder / (f"{stem}-{n}{suffix}" if n > 1 else f"{stem}{suffix}")
            if target.resolve().parent != root:  # belt and braces: the slug cannot contain separators
                raise PMSError(f"refusing to write {target}: outside {folder}")
            try:
                os.link(tmp, target)
                return target
            except FileExistsError:
                continue
            except OSError:  # no hard links here (some network and FAT drives): claim the name, then replace it
                try:
                    os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                except FileExistsError:
                    continue
                os.replace(tmp, target)
                return target
        raise PMSError(f"too many files named {stem}*{suffix} in {folder}")
    except OSError as exc:
        raise PMSError(f"cannot write the note in {folder}: {exc.strerror or exc} (check permissions and free space)") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
