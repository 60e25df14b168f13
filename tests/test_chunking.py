"""Markdown handling without a database: decoding, frontmatter, titles, chunks, globs."""
import pytest

import pms
from pms import markdown_passages


def test_passage_knows_lines_headings_and_embed_text():
    para = "Some words about this part of the guide. " * 4
    md = f"# Guide\n\nIntro line. {para}\n\n## Install\n\nRun the installer. {para}\n\n### Linux\n\nUse apt. {para}\n"
    passages = markdown_passages(md, title="Guide", target_chars=200, overlap_lines=0)
    assert [c.seq for c in passages] == list(range(len(passages)))
    linux = next(c for c in passages if c.text.startswith("### Linux"))
    assert linux.heading_path == "Guide > Install > Linux"
    assert linux.embed_text.startswith("Guide > Install > Linux\n\n### Linux")
    assert passages[0].embed_text.startswith("Guide\n\nIntro line.")  # the H1 repeating the title is not embedded twice
    lines = md.split("\n")
    for c in passages:  # start/end lines point at the text they hold
        assert "\n".join(lines[c.start_line - 1 : c.end_line]) == c.text


def test_prefers_heading_cuts_over_paragraphs():
    section = "Words of a paragraph that goes on. " * 8
    md = f"# T\n\n{section}\n\n{section}\n\n## Second\n\n{section}\n\n{section}\n"
    passages = markdown_passages(md, title="T", target_chars=800, overlap_lines=0)
    assert any(c.text.startswith("## Second") for c in passages)


def test_a_paragraph_longer_than_the_target_is_cut_between_sentences():
    abstract = " ".join(f"Sentence {i} reports a finding of the trial." for i in range(60))  # > 2 x 600
    md = f"# Paper\n\n{abstract}\n\nNext paragraph.\n"
    passages = markdown_passages(md, title="Paper", target_chars=600, overlap_lines=0)
    assert len(passages) >= 4 and max(len(c.text) for c in passages) <= 600 * 1.15
    assert all(c.start_line <= 3 <= c.end_line for c in passages[1:-1])  # every piece points at line 3
    body = [c.text for c in passages]
    assert all(t.rstrip().endswith(".") for t in body[:-1])  # cuts fall at sentence ends
    assert " ".join(body).replace("\n", " ").count("Sentence 59 reports") == 1
    long_word = "x" * 5000
    assert max(len(c.text) for c in markdown_passages(long_word, target_chars=600)) <= 600


def test_never_splits_inside_a_code_fence():
    code = "\n".join(f"    line_{i} = {i}" for i in range(60))
    md = f"# Code\n\nBefore.\n\n```python\n{code}\n```\n\nAfter the block.\n"
    passages = markdown_passages(md, title="Code", target_chars=300)
    fenced = [c for c in passages if "line_0 =" in c.text]
    assert len(fenced) == 1 and "line_59 =" in fenced[0].text
    for c in passages:
        assert c.text.count("```") % 2 == 0


def test_unbalanced_fence_runs_to_the_end_without_error():
    md = "# T\n\ntext\n\n```\nunclosed code\n" + "more code\n" * 50
    passages = markdown_passages(md, title="T", target_chars=200)
    assert passages and "unclosed code" in "".join(c.text for c in passages)


def test_giant_code_block_is_cut_eventually():
    md = "```\n" + "x = 1\n" * 5000 + "```\n"
    passages = markdown_passages(md, target_chars=200)
    assert len(passages) > 1 and max(len(c.text) for c in passages) <= 200 * 8 + 100


def test_overlap_repeats_lines_but_not_across_headings():
    md = ("# Title\n\n" + "\n".join(f"Sentence number {i} of the body." for i in range(40))
          + "\n\n## Next\n\n" + "\n".join(f"Line {i} of the second part." for i in range(40)))
    passages = markdown_passages(md, target_chars=400, overlap_lines=2)
    pairs = list(zip(passages, passages[1:]))
    within = [(a, b) for a, b in pairs if a.heading_path == b.heading_path]
    across = [(a, b) for a, b in pairs if a.heading_path != b.heading_path]
    assert len(within) >= 4 and len(across) == 1
    for a, b in within:  # the last two lines of a passage open the next one
        assert b.start_line == a.end_line - 1
        assert b.text.split("\n")[:2] == a.text.split("\n")[-2:]
    a, b = across[0]  # a new section starts clean, with its heading
    assert b.start_line > a.end_line and b.text.startswith("## Next")
    unlapped = markdown_passages(md, target_chars=400, overlap_lines=0)
    assert all(b.start_line > a.end_line for a, b in zip(unlapped, unlapped[1:]))


def test_passage_sizes_stay_near_the_target():
    md = "\n\n".join(f"Paragraph {i}. " + "word " * 40 for i in range(100))
    passages = markdown_passages(md, target_chars=1200)
    sizes = [len(c.text) for c in passages]
    assert max(sizes) <= 1200 * 1.2
    assert sum(sizes) / len(sizes) >= 600


def test_empty_and_whitespace_give_no_passages():
    assert markdown_passages("") == []
    assert markdown_passages("\n\n   \n") == []


@pytest.mark.parametrize("data,expected", [
    ("plain é".encode(), "plain é"),
    (b"\xef\xbb\xbfbom text", "bom text"),
    ("caf\u00e9 \u20ac".encode("cp1252"), "caf\u00e9 \u20ac"),
    (b"line1\r\nline2\rline3", "line1\nline2\nline3"),
    ("utf16 \u00e9".encode("utf-16"), "utf16 \u00e9"),
])
def test_decode_text(data, expected):
    assert pms.decode_text(data) == expected


def test_valid_utf8_is_never_reinterpreted():
    text = "ÃƒÂ© looks odd but is valid UTF-8 – “quotes”"
    assert pms.decode_text(text.encode("utf-8")) == text


def test_binary_is_refused():
    with pytest.raises(pms.BinaryFileError):
        pms.decode_text(b"\x89PNG\r\n\x1a\n\x00\x00\x00")


FRONTMATTER = """---
title: "Quoted: title"
tags: [alpha, beta]
aliases:
  - First alias
  - Second
created: 2024-01-02
---
# Heading

Body.
"""


def test_frontmatter_gives_title_tags_aliases_and_file_line_numbers():
    note = pms.notes.parse_note(FRONTMATTER, "file")
    assert note.title == "Quoted: title"
    assert note.tags == ["alpha", "beta"]
    assert note.aliases == ["First alias", "Second"]
    assert "title:" not in "".join(c.text for c in note.passages)
    assert note.passages[0].start_line == 9  # the line numbers of the file, frontmatter included


def test_broken_yaml_is_read_as_far_as_it_goes():
    note = pms.notes.parse_note("---\ntitle: ok\nbad: [unclosed\n---\nbody\n", "f")
    assert note.title == "ok"


def test_title_falls_back_to_h1_then_file_name():
    assert pms.notes.parse_note("intro\n\n# The H1\n\ntext", "file").title == "The H1"
    assert pms.notes.parse_note("no heading here", "file-name").title == "file-name"
    assert pms.notes.parse_note("```\n# not a heading\n```\n", "f").title == "f"


def test_tags_as_a_string():
    assert pms.notes.parse_note("---\ntags: one, two  three\n---\nx", "f").tags == ["one", "two", "three"]


def test_empty_note_is_findable_by_title():
    note = pms.notes.parse_note("", "empty-note")
    assert len(note.passages) == 1 and note.passages[0].heading_path == "empty-note"


@pytest.mark.parametrize("pattern,path,ok", [
    ("**/*.md", "a.md", True),
    ("**/*.md", "x/y/a.md", True),
    ("**/*.md", "a.markdown", False),
    ("*.md", "x/a.md", False),
    ("journal/**/*.md", "journal/2024/a.md", True),
    ("journal/**/*.md", "notes/a.md", False),
    ("**/*.{md,markdown}", "a/b.markdown", True),
    ("**/*.md", "UPPER.MD", True),
    ("notes/[ab].md", "notes/a.md", True),
    ("**/*.md", "x/y.md/a.txt", False),
    ("**/a*", "b/a", True),
    ("**/a*", "a/b", False),
    ("{**/*.md,notes/*.txt}", "notes/a.txt", True),
    ("{**/*.md,notes/*.txt}", "x/notes/a.txt", False),
])
def test_glob(pattern, path, ok):
    assert bool(pms.paths.compile_glob(pattern).match(path)) is ok


def test_a_leading_title_line_reads_as_the_heading_first_heading_takes_it_for():
    body = "% Trait Objects\n\nText about 50% of it.\n% not a title\n"
    shown = pms.title_line_as_heading(body)
    assert shown.split("\n")[0] == "# Trait Objects" and shown.count("\n") == body.count("\n")
    assert pms.first_heading(shown) == pms.first_heading(body) == "Trait Objects"
    assert "% not a title" in shown and pms.title_line_as_heading("# Title\n% x\n") == "# Title\n% x\n"
