"""PDFs in a collection: text per page, hits with their page, bad files, clipping.

Every PDF is made here (fpdf2, or written byte by byte for the broken ones) with
known text on known pages, and read by the real PDF library in the real worker
process; searches run on a real SQLite index, the MCP server under the SDK's
own client, the app in a real (offscreen) Qt window.
"""
from __future__ import annotations

import json
import os
import subprocess
import multiprocessing
import sys
from pathlib import Path

import pytest
from conftest import REPO, index_rows, index_write, run_cli, write
from conftest import Handler  # the server and open_window fixtures come from conftest too

sys.path.insert(0, str(REPO / "bench"))
from common import pdf_file  # noqa: E402  (hand-written PDFs, shared with bench/faults.py)

import pms

pytest.importorskip("pypdfium2", reason="the PDF library is not installed (pip install -r requirements-dev.txt)")
fpdf = pytest.importorskip("fpdf", reason="fpdf2 makes the test PDFs (pip install -r requirements-dev.txt)")

FILLER = "General remarks about the weather and other matters of no consequence. "
# Known text on known pages of the manual: what each page is about.
MANUAL = {
    1: "Reactor manual\n" + FILLER * 6,
    2: "Startup. The coolant pump must be primed before the reactor is started. " + FILLER * 4,
    3: FILLER * 8,
    4: "Shutdown. Insert the control rods slowly and watch the neutron flux gauge. " + FILLER * 4,
}


def make_pdf(path: Path, pages: list[str], title: str | None = None, password: str | None = None,
             blank: bool = False) -> Path:
    """A PDF with one page per item of ``pages`` (``blank``: a drawing and no text, as a scan)."""
    pdf = fpdf.FPDF()
    if title:
        pdf.set_title(title)
    for text in pages:
        pdf.add_page()
        pdf.set_font("Helvetica", size=11)
        if blank:
            pdf.rect(20, 20, 150, 200, style="F")
        else:
            pdf.multi_cell(0, 6, text)
    if password:
        pdf.set_encryption(owner_password="owner", user_password=password)
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(path))
    return path


def _stream(data: bytes) -> bytes:
    return b"<< /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"


def pdf_with_cmap(text: bytes, cmap: bytes) -> bytes:
    """A one-page PDF whose font maps its characters through ``cmap`` (a ToUnicode
    body): private-use characters are what a broken font yields, zero-width spaces
    what hidden text does. Written by hand: no generator makes broken fonts."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>",
               _stream(b"BT /F1 24 Tf 72 700 Td (" + text + b") Tj ET"),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 6 0 R >>",
               _stream(b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /T def /CMapType 2 def\n"
                       b"1 begincodespacerange <00> <FF> endcodespacerange\n" + cmap +
                       b"\nendcmap CMapName currentdict /CMap defineresource pop end end")]
    return pdf_file(objects)


@pytest.fixture
def pdf_vault(tmp_path) -> Path:
    """Notes and PDFs side by side: the manual (title in its metadata), a paper titled
    by its first line, and an untitled one named by its file."""
    root = tmp_path / "vault"
    write(root / "car.md", "# My car\n\nThe coolant in my car is green; the garage checks it yearly.\n")
    write(root / "garden.md", "# Garden\n\nTomatoes need water every evening in summer.\n")
    make_pdf(root / "manuals" / "reactor.pdf", list(MANUAL.values()), title="Reactor Operations Manual")
    make_pdf(root / "paper.pdf", ["On the Migration of Swallows\n" + FILLER * 3, "Swallows fly south in autumn. " + FILLER])
    make_pdf(root / "scan-0042.pdf", ["12345 67890 " * 3])
    return root


@pytest.fixture
def pdf_kb(kb, pdf_vault):
    kb.collections.create(pdf_vault, name="vault")
    report = kb.sync()
    assert not report.errors and not report.skipped, (report.errors, report.skipped)
    return kb


def test_pdf_pages_are_found_with_their_page_and_title(pdf_kb):
    hits = pdf_kb.search("coolant pump primed", mode="keyword")
    top = hits[0]
    assert (top.path, top.page, top.title) == ("manuals/reactor.pdf", 2, "Reactor Operations Manual")
    assert "coolant pump must be primed" in top.text
    assert next(h for h in hits if h.path == "car.md").page is None  # notes have no page
    assert pdf_kb.search("control rods neutron flux", mode="keyword")[0].page == 4
    assert {h.path: h.title for h in pdf_kb.search("swallows", mode="keyword")}["paper.pdf"] == "On the Migration of Swallows"
    assert pdf_kb.search("12345", mode="keyword")[0].title == "scan-0042"  # no metadata, no heading-like line


def test_passages_never_span_pages_and_get_reads_a_page(pdf_kb):
    passages = pdf_kb.search("weather remarks consequence", mode="keyword", passages=True, k=50)
    manual = [h for h in passages if h.path == "manuals/reactor.pdf"]
    assert {h.page for h in manual} == {1, 2, 3, 4}
    for hit in manual:
        page = pdf_kb.get(f"vault/manuals/reactor.pdf:{hit.page}")
        assert hit.text in page.text and page.page == hit.page
    assert "control rods" in pdf_kb.get("manuals/reactor.pdf:4").text
    assert "control rods" not in pdf_kb.get("manuals/reactor.pdf:2").text
    whole = pdf_kb.get("manuals/reactor.pdf").text
    assert whole.index("--- p. 2 ---") < whole.index("coolant pump") < whole.index("--- p. 3 ---")
    with pytest.raises(pms.PMSError, match="has 4 pages; page 9 is past its end"):
        pdf_kb.get("manuals/reactor.pdf:9")


def test_pdfs_are_incremental_like_notes(pdf_kb, pdf_vault):
    again = pdf_kb.sync()
    assert (again.added, again.updated, again.unchanged) == (0, 0, 5)
    make_pdf(pdf_vault / "manuals" / "reactor.pdf", [*MANUAL.values(), "Appendix. Spare fuses are in the blue cabinet."],
             title="Reactor Operations Manual")
    changed = pdf_kb.sync()
    assert (changed.added, changed.updated) == (0, 1)
    assert pdf_kb.search("spare fuses blue cabinet", mode="keyword")[0].page == 5
    (pdf_vault / "paper.pdf").unlink()
    assert pdf_kb.sync().deleted == 1
    assert "paper.pdf" not in pdf_kb.collections.get("vault").files


def test_every_bad_pdf_is_one_line_and_the_sync_goes_on(kb, tmp_path, monkeypatch):
    root = tmp_path / "bad"
    write(root / "note.md", "# Good note\n\nThe sync reaches this note about lighthouses.\n")
    make_pdf(root / "good.pdf", ["A good PDF about harbours."])
    make_pdf(root / "secret.pdf", ["Encrypted text about vaults."], password="hunter2")
    make_pdf(root / "scanned.pdf", ["", ""], blank=True)
    write(root / "broken-font.pdf", pdf_with_cmap(b"aaa aaa aaa", b"1 beginbfrange <20> <7E> <E000> endbfrange"))
    write(root / "zero-width.pdf", pdf_with_cmap(b"aaa aaa", b"2 beginbfchar <61> <200B> <20> <200B> endbfchar"))
    write(root / "malformed.pdf", b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 99 0 R >> endobj\ntrailer << >>\n%%EOF")
    write(root / "truncated.pdf", make_pdf(tmp_path / "whole.pdf", ["Cut short."]).read_bytes()[:300])
    make_pdf(root / "long.pdf", ["page"] * 6)
    write(root / "big.pdf", b"%PDF-1.4\n" + b"0" * (2 * 1024 * 1024))
    monkeypatch.setenv("PMS_PDF_MAX_PAGES", "5")
    monkeypatch.setenv("PMS_PDF_MAX_MB", "1")
    before = {p.name: p.read_bytes() for p in root.iterdir()}
    kb.collections.create(root, name="bad")
    report = kb.sync()
    told = {Path(path).name: why for path, why in report.errors + report.skipped}
    assert set(told) == set(before) - {"note.md", "good.pdf"}
    assert all("\n" not in why and "Traceback" not in why for why in told.values())
    assert "encrypted" in told["secret.pdf"]
    assert told["scanned.pdf"] == told["broken-font.pdf"] == told["zero-width.pdf"] == pms_no_text()
    assert "damaged" in told["malformed.pdf"] and "damaged" in told["truncated.pdf"]
    assert "6 pages, over the limit (PMS_PDF_MAX_PAGES=5;" in told["long.pdf"]
    assert "larger than 1 MB (PMS_PDF_MAX_MB=1;" in told["big.pdf"]
    assert (report.added, {h.path for h in kb.search("lighthouses harbours", mode="keyword")}) == (2, {"note.md", "good.pdf"})
    assert {p.name: p.read_bytes() for p in root.iterdir()} == before  # nothing lost, nothing changed
    status = kb.status()
    assert status["pdfs_without_text"] == 3 and status["skipped"] == len(told)
    assert kb.status(pending=False)["pdfs_without_text"] == 3  # the app's status bar asks this way
    assert multiprocessing.active_children() == []  # the PDF worker ended with the sync
    assert kb.sync().added == 0  # remembered: not read again while unchanged
    monkeypatch.setenv("PMS_PDF_MAX_PAGES", "6")  # a raised limit: read again at once
    assert kb.search("page", mode="keyword") == [] and kb.sync().added == 1
    assert kb.search("page", mode="keyword")[0].path == "long.pdf"


def pms_no_text() -> str:
    return "skipped: this PDF has no text layer (a scan? run OCR on it to make it searchable)"


def test_a_pdf_that_reads_too_long_is_stopped_and_the_sync_goes_on(kb, tmp_path, monkeypatch):
    root = tmp_path / "slow"
    write(root / "note.md", "# After\n\nThis note about otters is indexed after the slow PDF.\n")
    make_pdf(root / "a-slow.pdf", [FILLER * 30] * 400)
    monkeypatch.setenv("PMS_PDF_TIMEOUT", "0.01")  # 400 full pages take far longer to read than this
    kb.collections.create(root, name="slow")
    report = kb.sync()
    assert [(Path(p).name, "still reading it after 0.01 s" in why) for p, why in report.errors] == [("a-slow.pdf", True)]
    assert "PMS_PDF_TIMEOUT=0.01; raise it" in report.errors[0][1]
    assert kb.search("otters", mode="keyword")[0].path == "note.md"
    assert multiprocessing.active_children() == []  # the worker was killed, not left running


def test_the_cli_shows_pages_and_gets_one(pdf_vault, tmp_path):
    db = tmp_path / "cli.sqlite"
    assert run_cli("collection", "add", pdf_vault, "--name", "vault", db=db).returncode == 0
    shown = run_cli("search", "control rods", "--mode", "keyword", db=db)
    assert shown.returncode == 0, shown.stderr
    assert "vault/manuals/reactor.pdf p. 4" in shown.stdout.split("\n")[0]
    listed = json.loads(run_cli("search", "control rods", "--mode", "keyword", "--json", db=db).stdout)
    assert (listed[0]["path"], listed[0]["page"]) == ("manuals/reactor.pdf", 4)
    page = run_cli("get", "vault/manuals/reactor.pdf:4", db=db)
    assert page.returncode == 0 and page.stdout.startswith("Shutdown. Insert the control rods")
    status = run_cli("status", db=db)
    assert "have no text" not in status.stdout


@pytest.mark.stdlib
def test_without_the_pdf_library_pdfs_are_left_with_one_notice(pdf_vault, tmp_path):
    """python3 -S: the standard library alone, so no pypdfium2: PDFs are not read, notes are."""
    db = tmp_path / "plain.sqlite"
    added = run_cli("collection", "add", pdf_vault, "--name", "vault", db=db, python_flags=["-S"])
    assert added.returncode == 0, added.stderr
    assert "Synced: +2 new" in added.stdout
    notices = [line for line in added.stderr.split("\n") if "PDF" in line]
    assert len(notices) == 1 and "3 PDFs not indexed" in notices[0] and "pypdfium2" in notices[0]
    assert "Traceback" not in added.stderr
    dry = run_cli("sync", "--dry-run", db=db, python_flags=["-S"])
    assert dry.returncode == 0 and "3 PDFs not indexed" in dry.stderr
    assert "3 PDFs not indexed" in run_cli("status", db=db, python_flags=["-S"]).stdout
    # Once the library is there, the same index reads them.
    synced = run_cli("sync", db=db)
    assert synced.returncode == 0 and "+3 new" in synced.stdout, synced.stderr


def test_passages_of_a_page_keep_within_it_and_the_title_rules():
    pages = ["Title line\n" + "word " * 400, "", "x" * 3000]
    passages = pms.pdf.pdf_passages(pages, "T", target_chars=500)
    assert {c.page for c in passages} == {1, 3} and all(len(c.text) <= 500 for c in passages)
    assert "".join(c.text for c in passages if c.page == 3) == "x" * 3000
    assert pms.pdf.pdf_title("Microsoft Word - draft.docx", ["Real Title\nbody"], "file") == "Real Title"
    assert pms.pdf.pdf_title("", ["A sentence that ends with a full stop.\n"], "file") == "file"
    assert pms.pdf.clean_pdf_page("a\u200bb\r\nc\u00ad d  \n\n\n\ne") == "ab\nc d\n\ne"


@pytest.fixture
def clip_folder(kb, tmp_path):
    folder = tmp_path / "clips"
    folder.mkdir()
    return folder, kb.collections.create(folder, name="clips")


def test_pdf_urls_and_files_are_clipped_as_notes(kb, clip_folder, tmp_path, request):
    folder, clips = clip_folder
    base = request.getfixturevalue("server")  # conftest's local web server
    Handler.pdfs["manual"] = make_pdf(tmp_path / "src.pdf", list(MANUAL.values()), title="Reactor Operations Manual").read_bytes()
    Handler.pdfs["locked"] = make_pdf(tmp_path / "locked.pdf", ["x"], password="pw").read_bytes()
    note = clips.clip(f"{base}/pdf/manual", keep_original=True)
    text = note.path.read_text(encoding="utf-8")
    meta = pms.parse_frontmatter(pms.split_frontmatter(text)[0])
    assert (meta["title"], meta["source"]) == ("Reactor Operations Manual", f"{base}/pdf/manual")
    assert text.index("## Page 2") < text.index("coolant pump must be primed") < text.index("## Page 3")
    assert note.original.read_bytes() == Handler.pdfs["manual"] and note.original.stem == note.path.stem
    assert kb.search("coolant pump primed", mode="keyword")[0].path == note.relpath
    with pytest.raises(pms.AlreadyClipped):
        clips.clip(f"{base}/pdf/manual")
    files = sorted(p.name for p in folder.iterdir())
    with pytest.raises(pms.PMSError, match="encrypted"):
        clips.clip(f"{base}/pdf/locked")
    assert sorted(p.name for p in folder.iterdir()) == files  # nothing written
    dropped = tmp_path / "paper.pdf"
    make_pdf(dropped, ["On Swallows\nSwallows fly south in autumn."])
    r = run_cli("clip", dropped, "-c", "clips", db=kb.db_path)
    assert r.returncode == 0, r.stderr
    clipped = Path(r.stdout.strip())
    assert f"source: '{dropped.resolve()}'" in clipped.read_text(encoding="utf-8")
    assert not clipped.with_suffix(".pdf").exists()  # the original is kept only when asked


def test_mcp_search_returns_pdf_pages_in_keyword_and_hybrid_modes(pdf_vault, tmp_path, embedding_model_dir):
    mcp = pytest.importorskip("mcp", reason="the MCP SDK is not installed")
    anyio = pytest.importorskip("anyio")
    home, db = tmp_path / "home", tmp_path / "mcp.sqlite"
    home.mkdir()
    env = {"PMS_HOME": str(home), "PMS_MODEL_DIR": str(embedding_model_dir)}
    assert run_cli("collection", "add", pdf_vault, "--name", "vault", db=db, env=env, timeout=600).returncode == 0
    client = mcp.Client(mcp.StdioServerParameters(command=sys.executable,
                                                  args=[str(REPO / "pms.py"), "--db", str(db), "mcp"], env=env))

    async def ask():
        async with client:
            found = {}
            for mode, query in (("keyword", "control rods"), ("hybrid", "what are the steps for shutting it down")):
                answer = await client.call_tool("search", {"query": query, "k": 3, "mode": mode, "detail": True})
                assert not answer.is_error, answer.content
                found[mode] = answer.structured_content["hits"][0]
            page = await client.call_tool("get", {"path": "vault/manuals/reactor.pdf:4"})
            return found, page.structured_content

    found, page = anyio.run(ask)
    for mode, top in found.items():
        assert (top["path"], top["page"]) == ("vault/manuals/reactor.pdf", 4), mode  # MCP paths name the collection
    assert found["hybrid"]["vector_rank"] is not None
    assert page["text"].startswith("Shutdown. Insert the control rods") and page["page"] == 4


MEANING_QUERY = "prepare the cooling before turning the reactor on"  # page 2, in other words


def test_hybrid_search_finds_a_pdf_page_by_meaning_in_the_api_and_the_app(hybrid_kb, pdf_vault, qtbot, request):
    from conftest import type_query, wait_for_preview

    hybrid_kb.collections.create(pdf_vault, name="vault")
    hybrid_kb.sync()
    assert hybrid_kb.search_mode().mode == "hybrid"
    top = hybrid_kb.search(MEANING_QUERY, mode="hybrid")[0]
    assert (top.path, top.page) == ("manuals/reactor.pdf", 2) and top.vector_rank is not None
    window = app_window(request, hybrid_kb)
    window.bridge.model_loaded.emit(hybrid_kb.load_embedder())  # as the loading thread says it
    type_query(qtbot, window, MEANING_QUERY)
    wait_for_preview(qtbot, window)
    hit = window.current_hit()
    assert (hit.path, hit.page) == ("manuals/reactor.pdf", 2) and hit.vector_rank is not None
    assert "coolant pump must be primed" in window.preview.document().findBlockByNumber(window.preview.passage_block).text()


def test_hybrid_search_from_the_cli_shows_the_page(pdf_vault, tmp_path, embedding_model_dir):
    db, env = tmp_path / "hybrid.sqlite", {"PMS_MODEL_DIR": str(embedding_model_dir)}
    assert run_cli("collection", "add", pdf_vault, "--name", "vault", db=db, env=env, timeout=600).returncode == 0
    shown = run_cli("search", MEANING_QUERY, "--mode", "hybrid", "--json", db=db, env=env, timeout=300)
    assert shown.returncode == 0, shown.stderr
    top = json.loads(shown.stdout)[0]
    assert (top["path"], top["page"]) == ("manuals/reactor.pdf", 2) and top["vector_rank"] is not None


def test_pdf_viewers_are_told_the_page():
    from gui.search import pdf_viewer_command

    path = Path("/tmp/a b.pdf")
    assert pdf_viewer_command("org.gnome.Evince.desktop", path, 12) == ["evince", "--page-index=12", str(path)]
    assert pdf_viewer_command("okularApplication_pdf.desktop", path, 3) == ["okular", "--page", "3", str(path)]
    assert pdf_viewer_command("firefox.desktop", path, 3) is None


def app_window(request, kb):
    """A shown window over ``kb`` (test_gui's open_window fixture: settings in a temporary file)."""
    return request.getfixturevalue("open_window")(kb)


def test_the_app_previews_the_page_with_the_passage_tinted(pdf_kb, qtbot, request):
    from conftest import type_query, wait_for_preview

    window = app_window(request, pdf_kb)
    type_query(qtbot, window, "control rods")
    wait_for_preview(qtbot, window)
    hit = window.current_hit()
    assert (hit.path, hit.page) == ("manuals/reactor.pdf", 4)
    preview = window.preview
    shown = preview.document().toPlainText()
    assert "p. 4" in shown and "Shutdown. Insert the control rods" in shown and "coolant pump" not in shown
    tinted = preview.document().findBlockByNumber(preview.passage_block).text()
    assert "control rods" in tinted and "p. 4" not in tinted


def test_a_pdf_dropped_on_the_app_becomes_a_note_and_is_kept_when_asked(pdf_kb, pdf_vault, qtbot, tmp_path, request):
    from PySide6.QtCore import QMimeData, QUrl
    from conftest import drop

    window = app_window(request, pdf_kb)
    window.keep_pdf_action.setChecked(True)
    dropped = make_pdf(tmp_path / "downloads" / "swallows.pdf", ["On Swallows\nSwallows fly south in autumn."])
    files = QMimeData()
    files.setUrls([QUrl.fromLocalFile(str(dropped))])
    with qtbot.waitSignal(window.clip_done, timeout=60000) as clipped:
        assert drop(window, files)
    note, error = clipped.args
    assert (error, note.parent, note.suffix) == ("", pdf_vault, ".md")
    text = note.read_text(encoding="utf-8")
    assert f"source: '{dropped.resolve()}'" in text and "## Page 1" in text and "fly south in autumn" in text
    assert note.with_suffix(".pdf").read_bytes() == dropped.read_bytes()
    assert window.settings.value("clip/keep_pdf", type=bool)  # remembered for the next drop


PDF_MIGRATION = next(i for i, m in enumerate(pms.schema.MIGRATIONS) if isinstance(m, str) and "ADD COLUMN page" in m)


def test_an_index_from_before_pdfs_upgrades_in_place(db_path, pdf_vault):
    with pms.KnowledgeBase(db_path, embeddings=False) as kb:
        kb.collections.create(pdf_vault, name="vault")
        kb.sync()
    # An index as an older schema left it (no PDFs, fewer columns): made by hand, as no public call makes one.
    later = ["DROP INDEX documents_language",  # later migrations'
             *(f"ALTER TABLE documents DROP COLUMN {c}" for c in ("language", "words", "own_words", "links_out"))]
    index_write(db_path, "DELETE FROM documents WHERE path LIKE '%.pdf'", "ALTER TABLE chunks DROP COLUMN page",
                "ALTER TABLE documents DROP COLUMN pages", *later,
                f"PRAGMA user_version = {PDF_MIGRATION}")  # what the PMS before PDFs wrote
    with pms.KnowledgeBase(db_path, embeddings=False) as kb:
        assert index_rows(kb, "PRAGMA user_version") == [(len(pms.schema.MIGRATIONS),)]  # the file, migrated on open
        assert kb.search("coolant", mode="keyword")[0].page is None  # the note, as indexed before
        assert kb.sync().added == 3
        assert kb.search("coolant pump primed", mode="keyword")[0].page == 2


def test_a_pdf_with_too_much_text_is_refused_while_read(tmp_path, monkeypatch):
    """The cap on a file's text bounds the worker's memory (read_pdf is what the worker runs)."""
    manual = make_pdf(tmp_path / "manual.pdf", list(MANUAL.values()))
    assert len(pms.pdf.read_pdf(manual, max_pages=10).pages) == 4
    monkeypatch.setattr(pms.pdf, "PDF_MAX_TEXT_CHARS", 1000)
    with pytest.raises(pms.PMSError, match="more than 1,000 characters of text by page 3"):
        pms.pdf.read_pdf(manual, max_pages=10)


# The pms command as 0.3.0's setup wrote it: its lines run again in a worker process (spawn).
OLD_PMS_COMMAND = """\
import gc
import sys

gc.disable()
sys.path.insert(0, {folder!r})
sys.argv[0] = "pms"
from pms import main_and_exit
gc.enable()
main_and_exit()
"""


@pytest.mark.skipif(sys.platform == "win32", reason="the Windows command is a pms.cmd batch file")
def test_the_pms_command_reads_pdfs_also_when_an_older_setup_wrote_it(tmp_path):
    vault = tmp_path / "vault"
    make_pdf(vault / "keepers.pdf", ["Quarterly report about lighthouse keepers and their lamps."])
    write(vault / "note.md", "# A note\n\nNothing about the sea.\n")
    r = run_cli("setup", "--command-only", "--bin-dir", tmp_path / "bin")
    assert r.returncode == 0, r.stderr
    old = tmp_path / "old-bin" / "pms"
    old.parent.mkdir()
    old.write_text(f"#!{sys.executable}\n" + OLD_PMS_COMMAND.format(folder=str(REPO)), encoding="utf-8")
    old.chmod(0o755)
    for command in (tmp_path / "bin" / "pms", old):
        env = {**os.environ, "PMS_HOME": str(tmp_path / f"home-{command.parent.name}")}
        added = subprocess.run([str(command), "collection", "add", str(vault), "--name", "vault", "--no-embed"],
                               capture_output=True, text=True, env=env, timeout=180)
        # The PDF worker once ran the command again: "a collection named 'vault' already exists", the PDF failed.
        assert added.returncode == 0 and "+2 new" in added.stdout and "failed" not in added.stdout, added.stdout + added.stderr
        assert "already exists" not in added.stderr and "did not start" not in added.stderr, added.stderr
        found = subprocess.run([str(command), "search", "lighthouse keepers", "--mode", "keyword", "--json"],
                               capture_output=True, text=True, env=env, timeout=180)
        assert found.returncode == 0 and json.loads(found.stdout)[0]["path"] == "keepers.pdf", found.stderr


def test_an_unguarded_api_script_indexes_a_pdf_and_runs_once(tmp_path):
    """The PDF reader's worker is spawned: a script's lines outside `if __name__ == "__main__"` must
    not run again there (they once did, and the second sync waited on the first: a hang)."""
    make_pdf(tmp_path / "vault" / "keepers.pdf", ["Quarterly report about lighthouse keepers and their lamps."])
    script = tmp_path / "script.py"
    script.write_text(f"""import sys
sys.path.insert(0, {str(REPO)!r})
import pms
print("the script runs")
with pms.KnowledgeBase({str(tmp_path / 'index.sqlite')!r}, embeddings=False) as kb:
    kb.collections.create({str(tmp_path / 'vault')!r}, name="vault")
    report = kb.sync()
    print(report.added, report.errors, [hit.path for hit in kb.search("lighthouse keepers", mode="keyword")])
""", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PMS_")} | {"PMS_HOME": str(tmp_path / "home")}
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=150)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.splitlines() == ["the script runs", "1 [] ['keepers.pdf']"], run.stdout + run.stderr[-2000:]
