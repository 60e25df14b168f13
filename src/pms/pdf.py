"""PDFs: their text as pages and passages, read in a worker process under limits.

Owns: cleaning a page's text and cutting pages into passages (``parse_pdf``), the PDF
limits (time, pages, size: PMS_PDF_*), and ``PdfReader``: pypdfium2 in a child process
with a deadline and a memory cap, so a hostile PDF costs one line, never the sync.

May import: config, markdown, notes.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Sequence

from .config import LazyPattern, PMSError, Record, Worker, WorkerStopped, env_number, module_available, pms_command
from .markdown import DEFAULT_PASSAGE_CHARS, Passage, split_sentences
from .notes import ParsedNote


# PDFs (optional: pypdfium2), each read in a worker process killed past its deadline.
PDF_PACKAGE = "pypdfium2"
PDF_SUFFIX = ".pdf"
PDF_TIMEOUT_DEFAULT = 60.0      # seconds per file (PMS_PDF_TIMEOUT)
PDF_MAX_PAGES_DEFAULT = 3000    # pages per file (PMS_PDF_MAX_PAGES)
PDF_MAX_MB_DEFAULT = 200        # bytes per file (PMS_PDF_MAX_MB): PDFs carry images, notes do not
PDF_PAGE_MAX_CHARS = 100_000    # text kept per page: a real page holds a few thousand
PDF_MAX_TEXT_CHARS = 30_000_000  # text per file (3,000 dense pages hold about 10 million): bounds memory
PDF_MEMORY_MB_DEFAULT = 1024    # the reader's address space (PMS_PDF_MEMORY_MB): docs/robustness.md, "Memory budgets"


def is_pdf(path: str | os.PathLike) -> bool:
    return str(path)[-4:].lower() == PDF_SUFFIX  # the last four characters: a sync asks for every file


# PDFs: pages of text -> passages (the text comes from read_pdf, in the sync section) ---

class PdfText(Record):
    """What a PDF holds for the index: its metadata title and each page's text."""

    title: str
    pages: list[str]
    page_count: int = 0


# Characters that carry no text: zero-width ones, soft hyphens, controls (PDFs with
# broken fonts or hidden layers are full of them).
_PDF_NOISE = LazyPattern("[\u00ad\u200b-\u200f\u2028\u2029\u2060-\u2064\ufeff\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# A page's text is unreadable when most of its letters are these (a font without a
# usable character map yields replacement or private-use characters).
_PDF_UNREADABLE = LazyPattern("[\ufffd\ue000-\uf8ff]")


def clean_pdf_page(text: str) -> str:
    """A page's extracted text, tidy: one line per line, no noise characters, no
    trailing spaces, no runs of blank lines; "" when unreadable (broken fonts)."""
    text = _PDF_NOISE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))[:PDF_PAGE_MAX_CHARS]
    text = re.sub(r"[ \t]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    visible = sum(1 for ch in text if not ch.isspace())
    if visible and len(_PDF_UNREADABLE.findall(text)) * 2 > visible:
        return ""
    return text


def pdf_title(meta_title: str, pages: Sequence[str], fallback: str) -> str:
    """The PDF's metadata title, else its first heading-like line (short, not a
    sentence, with letters), else ``fallback`` (the file name)."""
    title = " ".join((meta_title or "").split())
    if title and not re.fullmatch(r"(?i)(untitled|microsoft word - .*|.*\.(docx?|pdf|tex|dvi))", title):
        return title[:200]
    for page in pages[:1]:
        for line in page.split("\n")[:8]:
            line = " ".join(line.split())
            if 3 <= len(line) <= 120 and re.search(r"[^\W\d_]{2}", line) and not line.endswith((".", ",", ";")):
                return line
    return fallback


def pdf_passages(pages: Sequence[str], title: str, target_chars: int = DEFAULT_PASSAGE_CHARS) -> list[Passage]:
    """Passages of a PDF, never across pages: each page's lines packed up to
    ``target_chars``, a longer line cut between sentences. Lines count within the page."""
    passages: list[Passage] = []
    for number, text in enumerate(pages, 1):
        if not text:
            continue
        pieces: list[tuple[int, str]] = []
        for line_no, line in enumerate(text.split("\n"), 1):
            if len(line) > target_chars:
                pieces.extend((line_no, part) for part in split_sentences(line, target_chars))
            else:
                pieces.append((line_no, line))
        current: list = []
        start, prev, size = pieces[0][0], pieces[0][0], 0
        for line_no, piece in pieces:
            if current and size + len(piece) > target_chars:
                passages.append(Passage(seq=len(passages), start_line=start, end_line=prev,
                                    heading_path=title, text="\n".join(current).strip(), title=title, page=number))
                current, size, start = [], 0, line_no
            current.append(piece)
            size += len(piece) + 1
            prev = line_no
        if current and "".join(current).strip():
            passages.append(Passage(seq=len(passages), start_line=start, end_line=prev, heading_path=title,
                                text="\n".join(current).strip(), title=title, page=number))
    return passages


def parse_pdf(pdf: PdfText, fallback_title: str, target_chars: int = DEFAULT_PASSAGE_CHARS) -> ParsedNote:
    """A PDF's pages as a note: its title (metadata > first heading-like line > file
    name) and passages that each stay on one page."""
    title = pdf_title(pdf.title, pdf.pages, fallback_title)
    return ParsedNote(title=title, tags=[], aliases=[], metadata={}, body="", passages=pdf_passages(pdf.pages, title, target_chars),
                      pages=pdf.page_count or len(pdf.pages))


# PDFs: read in a worker process with a deadline ------------------------------------

PDF_NO_TEXT = "skipped: this PDF has no text layer (a scan? run OCR on it to make it searchable)"
INSTALL_PDF = f"pip install {PDF_PACKAGE} (or run: {pms_command('setup')})"


class PdfError(PMSError):
    """A PDF that cannot be indexed as it is; ``failed`` when it is damaged (not a choice of its author)."""

    def __init__(self, message: str, failed: bool = False):
        super().__init__(message)
        self.failed = failed


def pdf_available() -> bool:
    return module_available(PDF_PACKAGE)


def read_pdf(source: str | os.PathLike | bytes, max_pages: int) -> PdfText:
    """Each page's text and the metadata title of a PDF file (or its bytes), read in this
    process (PdfReader runs it in a worker)."""
    try:
        import pypdfium2 as pdfium
    except ImportError:
        raise PdfError(f"reading PDFs needs {PDF_PACKAGE}: {INSTALL_PDF}") from None
    try:
        doc = pdfium.PdfDocument(source if isinstance(source, bytes) else str(source))
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise PdfError("skipped: this PDF is encrypted (save a copy without a password to index it)") from None
        if "(PDFium: Success)" in str(exc):  # PDFium refuses a document with no page and gives no error
            raise PdfError("skipped: this PDF has no pages (nothing to index)") from None
        raise PdfError(f"cannot read this PDF: {str(exc).rstrip('.')} (is it damaged?)", failed=True) from None
    try:
        count = len(doc)
        if count > max_pages:
            raise PdfError(f"skipped: {count} pages, over the limit (PMS_PDF_MAX_PAGES={max_pages}; raise it to index this PDF)")
        title = ""
        with contextlib.suppress(Exception):
            title = str(doc.get_metadata_dict(skip_empty=True).get("Title", ""))
        pages, chars = [], 0
        for i in range(count):
            page = doc[i]
            try:
                textpage = page.get_textpage()
                # A page of more text than a page holds is cut before it becomes one string.
                over = textpage.count_chars() > PDF_PAGE_MAX_CHARS
                text = textpage.get_text_range(0, PDF_PAGE_MAX_CHARS) if over else textpage.get_text_bounded()
                pages.append(clean_pdf_page(text))
                textpage.close()
                chars += len(pages[-1])
                if chars > PDF_MAX_TEXT_CHARS:
                    raise PdfError(f"skipped: more than {PDF_MAX_TEXT_CHARS:,} characters of text "
                                   f"by page {i + 1} (not a document PMS can index whole)")
            except pdfium.PdfiumError:
                pages.append("")  # one bad page loses that page only
            finally:
                page.close()
        return PdfText(title=title, pages=pages, page_count=count)
    finally:
        doc.close()


class PdfReader:
    """Reads PDFs in one worker process (started on first use, then reused), each within a
    deadline past which the worker is killed, under a memory cap: a hostile PDF costs one
    line, never the sync (nor the machine's memory)."""

    def __init__(self, timeout: float | None = None, max_pages: int | None = None, memory_mb: float | None = None):
        self.timeout = timeout or env_number("PMS_PDF_TIMEOUT", PDF_TIMEOUT_DEFAULT)
        self.max_pages = int(max_pages or env_number("PMS_PDF_MAX_PAGES", PDF_MAX_PAGES_DEFAULT))
        self.memory_mb = int(memory_mb or env_number("PMS_PDF_MEMORY_MB", PDF_MEMORY_MB_DEFAULT))
        self._worker = Worker("pms-pdf-reader", self.memory_mb << 20)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def read(self, source: str | os.PathLike | bytes) -> PdfText:
        """The text of a PDF file (a path) or of its bytes."""
        try:
            return self._worker.call(read_pdf, source if isinstance(source, bytes) else str(source), self.max_pages,
                                     timeout=self.timeout)
        except WorkerStopped as exc:
            raise PdfError(self._stopped(exc.why), failed=True) from None

    def _stopped(self, why: str) -> str:
        memory = f"PMS_PDF_MEMORY_MB={self.memory_mb}; raise it to index this PDF"
        if why == "time":
            return (f"skipped: still reading it after {self.timeout:g} s (a damaged or hostile PDF? "
                    f"PMS_PDF_TIMEOUT={self.timeout:g}; raise it to give it longer)")
        if why == "memory":
            return f"skipped: reading it needs more than {self.memory_mb} MB of memory ({memory})"
        if why == "start":
            return "the PDF reader (a worker process) did not start"
        return "skipped: the PDF reader crashed on this file (is it damaged?)"

    def close(self) -> None:
        self._worker.close()


PDF_LIMITS = {"PMS_PDF_TIMEOUT": PDF_TIMEOUT_DEFAULT, "PMS_PDF_MAX_PAGES": PDF_MAX_PAGES_DEFAULT,
              "PMS_PDF_MAX_MB": PDF_MAX_MB_DEFAULT, "PMS_PDF_MEMORY_MB": PDF_MEMORY_MB_DEFAULT}


def limit_raised(reason: str) -> bool:
    """Whether a PDF skipped for a limit (its reason names it: ``PMS_PDF_TIMEOUT=60``)
    is under another limit now, so the next sync reads it again."""
    return any(float(value) != env_number(name, PDF_LIMITS[name])
               for name, value in re.findall(r"\b(PMS_PDF_[A-Z_]+)=(\d+(?:\.\d+)?)", reason) if name in PDF_LIMITS)


def max_pdf_bytes() -> int:
    return int(env_number("PMS_PDF_MAX_MB", PDF_MAX_MB_DEFAULT) * 1024 * 1024)
