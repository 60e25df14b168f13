"""Real vaults read as their authors mean them (issue 22): mdBook links and titles,
reference-link definitions, stubs that point elsewhere, snippets without markup."""
from __future__ import annotations

import pytest

import pms
from conftest import index_rows, write

CHAPTER = """## What Is Ownership?

*Ownership* is a set of rules that govern how a Rust program manages memory. Every
program has to manage the way it uses memory while it runs; some languages have a
garbage collector, others make the programmer free memory. Rust checks ownership
rules at compile time, so none of them slows the program down while it runs.

See [the references chapter][refs] and [lifetimes](ch10-03-lifetime-syntax.html#validating-references).

<!-- old anchor: keep -->
<Listing number="4-1" file-name="src/main.rs" caption="A variable and the scope in which it is valid">

```rust
{{#rustdoc_include ../listings/ch04/listing-04-01/src/main.rs:here}}
let s: Rc<T> = Weak<T>::new();
```

</Listing>

| Type | Owner |
|------|-------|
| `String` | <small>the variable</small> |

[refs]: ch04-02-references-and-borrowing.html
[access]: #accessing-values-in-a-hash-map
"""

REDIRECT = """% Ownership

<small>There is a new edition of the book and this is an old link.</small>

> Ownership is a set of rules that govern how a Rust program manages memory: ownership rules at compile time.

---

Here are the relevant sections in the new and old books:

* **[in the current edition: Ch 4.01 — What Is Ownership?][2]**

[2]: ch04-01-what-is-ownership.html
"""

OLD_EDITION = """# Ownership

The first edition of the book is no longer distributed with Rust's documentation.

If you came here via a link or web search, you may want to check out [the current
version of the book](../ch04-01-what-is-ownership.html) instead.
"""


@pytest.fixture
def book(kb, tmp_path):
    root = tmp_path / "book"
    write(root / "src" / "ch04-01-what-is-ownership.md", CHAPTER)
    write(root / "src" / "ch04-02-references-and-borrowing.md", "## References and Borrowing\n\nA reference borrows a value "
          "without taking ownership of it. " * 8)
    write(root / "src" / "ch10-03-lifetime-syntax.md", "## Validating References with Lifetimes\n\nLifetimes ensure that "
          "references are valid as long as we need them to be. " * 8)
    write(root / "redirects" / "ownership.md", REDIRECT)
    write(root / "first-edition" / "src" / "ownership.md", OLD_EDITION)
    kb.collections.create(root, name="book")
    kb.sync()
    return kb


def test_link_definitions_are_links_not_tags(book):
    assert book.tags() == []  # "[access]: #accessing-values-in-a-hash-map" is no #tag
    targets = [(ref.path, ref.line) for ref in book.links("book/src/ch04-01-what-is-ownership.md")]
    assert ("src/ch10-03-lifetime-syntax.md", 8) in targets  # an inline .html link, with its #anchor
    assert ("src/ch04-02-references-and-borrowing.md", 24) in targets  # a reference-link definition


def test_html_links_resolve_to_their_markdown_source_for_backlinks_and_unresolved_counts(book, tmp_path):
    backlinks = {ref.path for ref in book.backlinks("book/src/ch04-01-what-is-ownership.md")}
    # The redirect's ".html" link sits in another folder than the chapter (as mdBook's site pages do): by file name.
    assert backlinks == {"redirects/ownership.md", "first-edition/src/ownership.md"}
    assert book.status()["unresolved_links"] == []
    write(tmp_path / "book" / "src" / "broken.md", "# Broken\n\nSee [gone](ch99-gone.html).\n")
    book.sync()
    assert [ref["target"] for ref in book.status()["unresolved_links"]] == ["src/ch99-gone.md"]


def test_the_title_is_the_first_heading_of_any_level_or_a_percent_title_line(book):
    titles = {h.path: h.title for h in book.search("ownership", mode="keyword", k=10)}
    assert titles["src/ch04-01-what-is-ownership.md"] == "What Is Ownership?"
    assert titles["redirects/ownership.md"] == "Ownership"  # mdBook's "% Title"
    note = pms.notes.parse_note("Some text first.\n\n### Deep heading\n\nMore.\n", "file-name")
    assert note.title == "Deep heading"
    assert pms.notes.parse_note("No heading at all.\n", "file-name").title == "file-name"


def test_passage_display_text_renders_markup_as_a_reader_sees_it():
    shown = pms.passage_display_text(CHAPTER)
    for raw in ("<!--", "<Listing", "</Listing>", "{{#rustdoc_include", "<small>", "|---", "[refs]:", "[access]:", "](", "## "):
        assert raw not in shown, raw
    assert "Type · Owner" in shown and "String · the variable" in shown  # a table row as "cell · cell"
    assert "Ownership is a set of rules" in shown  # emphasis marks gone, the words kept
    assert "See the references chapter and lifetimes." in shown  # links as their text
    assert "let s: Rc<T> = Weak<T>::new();" in shown  # code as written: generics are not tags
    assert pms.passage_display_text("% Title\n\n> quoted `code` and <b>bold</b>") == "Title\nquoted code and bold"
    # A "#" cell is no heading marker; a quoted table loses its rule row too.
    assert pms.passage_display_text("| # | Milestone |\n|---|---|\n| 1 | Parsing |") == "# · Milestone\n1 · Parsing"
    assert pms.passage_display_text("> | a | b |\n> |---|---|\n> | 1 | 2 |") == "a · b\n1 · 2"


def test_each_markup_alone_renders_away_and_its_look_alikes_stay():
    # One construct per text: nothing else in it may trigger the markup rules.
    rendered = {"a <br> b": "a b", "a <br/> b": "a b", "x </p>": "x", "<kbd>Ctrl</kbd>": "Ctrl", "<Listing number=\"1\">": "",
                "end </Listing>": "end", "<img src=\"x.png\"/>": "", "{{#include a.rs}}": "", "[[Note|label]]": "label",
                "[[Note]]": "Note", "![alt](x.png)": "alt", "[text](https://x.org)": "text", "[text][ref]": "text"}
    for raw, shown in rendered.items():
        assert pms.passage_display_text(raw) == shown, raw
    for raw in ("More information: <https://tldr.sh>.", "cat < file.txt", "Vec<T>", "[r]ecursive", "tar {{path/to/file}}",
                "a <= b", "[x] done"):
        assert pms.passage_display_text(raw) == raw, raw


OBSIDIAN_NOTE = """# Restic backups

> [!warning] Back up first
> Run ==restic check== before pruning. %%todo: automate this%%

> [!tip]-
> Use `--dry-run` and `printf "%%d"` first. ^dry-run-tip

%%
A private block
over two lines
%%
After the comment: Capture==>Curate==>Connect, and a == b.

```
SELECT '%%' LIKE x %% y %%
```
"""


def test_obsidian_callouts_highlights_and_comments_show_as_obsidian_shows_them(kb, tmp_path):
    shown = pms.passage_display_text(OBSIDIAN_NOTE)
    assert shown.split("\n")[:4] == ["Restic backups", "Back up first", "Run restic check before pruning.", "Tip"]
    for hidden in ("[!", "==restic", "todo", "automate", "private block", "dry-run-tip"):
        assert hidden not in shown, hidden
    assert "2^10 and x ^ y" == pms.passage_display_text("2^10 and x ^ y")  # no block ID: a caret inside a line
    # Look-alikes stay: "%%" in code (inline and fenced), arrows and comparisons.
    assert 'printf "%%d"' in shown and "SELECT '%%' LIKE x %% y %%" in shown
    assert "Capture==>Curate==>Connect, and a == b." in shown
    assert pms.callout_title("[!FAQ]+ Why restic?") == ("faq", "Why restic?") and pms.callout_title("[x] done") is None
    assert pms.highlighted_parts("a ==b== c") == [("a ", False), ("b", True), (" c", False)]
    # Lines keep their numbers (a preview's anchors); the words stay searchable, as every hidden word does.
    assert len(pms.without_obsidian_hidden(OBSIDIAN_NOTE).split("\n")) == len(OBSIDIAN_NOTE.split("\n"))
    write(tmp_path / "v" / "restic.md", OBSIDIAN_NOTE)
    kb.collections.create(tmp_path / "v", name="v")
    kb.sync()
    [hit] = kb.search("back up first restic", mode="keyword", passages=True, k=1).hits
    assert "Back up first Run restic check before" in hit.snippet and "[!" not in hit.snippet and "todo" not in hit.snippet
    assert [h.path for h in kb.search("private block", mode="keyword")] == ["restic.md"]


def test_snake_case_next_to_a_marked_word_keeps_its_underscore(kb, tmp_path):
    write(tmp_path / "n" / "f.md", "# Functions\n\nIf we tried to use s after the call to `takes_ownership`, Rust would complain.\n")
    kb.collections.create(tmp_path / "n", name="n")
    kb.sync()
    hit = kb.search("ownership", mode="keyword")[0]
    assert "takes_ownership" in hit.snippet and "ownership" in [hit.snippet[s:e] for s, e in hit.marks]


def test_snippets_carry_no_raw_markup_and_the_text_stays_searchable(book):
    for query in ("listing variable scope", "rustdoc_include", "Owner variable", "garbage collector"):
        hits = book.search(query, mode="keyword", k=5)
        assert hits, query
        for hit in hits:
            for raw in ("&lt;Listing", "&lt;small", "&lt;!--", "{{#", "|", "[refs]"):
                assert raw not in hit.snippet, (query, hit.path, hit.snippet)


def test_a_stub_never_outranks_the_chapter_it_points_to(book):
    for mode in ("keyword",):
        for query in ("ownership", "ownership rules at compile time", "Ownership"):
            paths = [h.path for h in book.search(query, mode=mode, k=5)]
            assert paths[0] == "src/ch04-01-what-is-ownership.md", (query, paths)
            assert paths.index("redirects/ownership.md") > 0 and paths.index("first-edition/src/ownership.md") > 0
    stubs = {h.path: h.stub for h in book.search("ownership", mode="keyword", k=5)}
    assert stubs == {"src/ch04-01-what-is-ownership.md": False, "redirects/ownership.md": True,
                     "first-edition/src/ownership.md": True, "src/ch04-02-references-and-borrowing.md": False}


def test_order_by_note_prior_is_a_pure_rule():
    settings = pms.RankingSettings(stub_weight=0.5, pointer_weight=0.5)

    def hit(path, title=None):
        return pms.Hit(path=path, collection="c", abspath=path, docid=path, title=title or path, heading_path="", start_line=1,
                       end_line=1, score=1.0, snippet="")

    hits = [hit("stub.md"), hit("a.md"), hit("b.md"), hit("target.md")]
    pointer = {"stub.md": "pointer"}
    order = [h.path for h in pms.ranking.order_by_note_prior(hits, pointer, {"stub.md": {"target"}}, settings)]
    assert order == ["a.md", "b.md", "target.md", "stub.md"]  # below what it points to, wherever that is
    order = [h.path for h in pms.ranking.order_by_note_prior(hits, pointer, {}, settings)]
    assert order == ["a.md", "stub.md", "b.md", "target.md"]  # place 1 / 0.5 = 2: behind #2
    order = [h.path for h in pms.ranking.order_by_note_prior(hits, {}, {"stub.md": {"target"}}, settings)]
    assert order == ["stub.md", "a.md", "b.md", "target.md"]  # a note keeps its place, links or not
    named = [hit("old.md", "Lifetimes"), hit("a.md"), hit("new.md", "Validating References with Lifetimes"), hit("b.md")]
    order = [h.path for h in pms.ranking.order_by_note_prior(named, {"old.md": "pointer"}, {"old.md": {"new"}}, settings)]
    assert order == ["a.md", "new.md", "b.md", "old.md"]  # its target carries its name: below every note
    order = [h.path for h in pms.ranking.order_by_note_prior(named, {"old.md": "redirect"}, {}, settings)]
    assert order[-1] == "old.md"


def test_what_a_note_is_to_the_note_prior():
    """A pointer by what it holds: an old edition's notice, a redirect quoting its target, a page
    of links; a short note with its own sentences (and a link) is a note."""
    s = pms.RankingSettings()
    kind = pms.ranking.note_kind
    old = ("# Lifetimes\n\nThe first edition of the book is no longer distributed with Rust's documentation.\n\n"
           "If you came here via a link or web search, you may want to check out [the current\nversion of the book]"
           "(../ch10-03-lifetime-syntax.html) instead.\n")
    assert kind("Lifetimes", "first-edition/src/lifetimes.md", 40, 2, old, s) == "redirect"  # to a note of its name
    moved = old.replace("Lifetimes", "Advanced Lifetimes").replace("ch10-03-lifetime-syntax", "index")
    assert kind("Advanced Lifetimes", "old/advanced.md", 40, 2, moved, s) == "pointer"
    same_file = moved.replace("(../index.html)", "(../advanced.html)")
    assert kind("Advanced Lifetimes", "old/advanced.md", 40, 2, same_file, s) == "redirect"  # its own file name elsewhere
    short = ("A workspace is a collection of one or more [[vaults|dendron.concepts.vault]]. This is a folder that "
             "contains all the files necessary to manage your information in Dendron.")
    assert kind("Workspace", "dendron.concepts.workspace.md", 32, 1, short, s) == "note"
    index = "## Contents\n\n- [[lookup]]\n- [[schemas]]\n- [[pods]]\n"
    assert kind("Topics", "topics.md", 8, 3, index, s) == "links"
    assert kind("Bugcatcher", "tags.role.bugcatcher.md", 10, 1, "![[community.discord.roles#bug-catcher]]", s) == "note"  # an embed shows its note
    assert kind("Title", "t.md", 1, 0, "Title", s) == "empty" and kind("Long", "l.md", 500, 3, None, s) == "note"


def test_the_exact_name_rule_needs_a_real_body(kb, tmp_path):
    write(tmp_path / "v" / "tmux.md", "# tmux\n\nSee [[Terminal multiplexers]].\n")  # a title and a pointer
    write(tmp_path / "v" / "terminal-multiplexers.md", "# Terminal multiplexers\n\n" + "tmux and screen keep sessions "
          "alive after you log out; tmux splits the window into panes. " * 6)
    kb.collections.create(tmp_path / "v", name="v")
    kb.sync()
    assert [h.path for h in kb.search("tmux", mode="keyword")][0] == "terminal-multiplexers.md"


def test_an_alias_names_its_note_only_when_the_query_is_the_whole_alias(kb):
    kb.collections.create(pms.cli.sample_notes_dir(), name="sample")
    kb.sync()
    assert kb.search("keys", mode="keyword", path="dev")[0].path == "dev/ssh-key-rotation.md"
    assert kb.search("neovim keys", mode="keyword")[0].path == "dev/vim-cheatsheet.md"  # the whole alias still names it


def test_copies_are_grouped_in_the_cli_and_json_says_which_hit_copies_which(book, tmp_path, pms_main):
    write(tmp_path / "book" / "second-edition" / "src" / "ch04-01-what-is-ownership.md",
          OLD_EDITION.replace("# Ownership", "## What Is Ownership?"))  # the same page, an older edition's stub
    book.sync()
    db = book.index_path
    book.close()
    r = pms_main("search", "what is ownership", "--mode", "keyword", db=db)
    assert r.returncode == 0
    assert "+1 copy: second-edition/src/ch04-01-what-is-ownership.md" in r.stdout
    assert "book/second-edition/src/ch04-01-what-is-ownership.md:" not in r.stdout  # not a row of its own
    import json
    hits = json.loads(pms_main("search", "what is ownership", "--mode", "keyword", "--json", db=db).stdout)
    copy = next(h for h in hits if h["path"] == "second-edition/src/ch04-01-what-is-ownership.md")
    assert copy["copy_of"] == "book/src/ch04-01-what-is-ownership.md" and copy["stub"] is True
    assert next(h for h in hits if h["path"] == "src/ch04-01-what-is-ownership.md")["copy_of"] == ""


def test_search_with_nothing_to_search_prints_usage_and_exits_2(pms_main, tmp_path):
    r = pms_main("search", db=tmp_path / "i.sqlite")
    assert r.returncode == 2 and r.stderr.startswith("usage:") and "nothing to search" in r.stderr
    assert pms_main("search", "  ", db=tmp_path / "i.sqlite").returncode == 2


def test_a_clipped_note_gets_the_permissions_of_any_new_file_there(kb, tmp_path):
    import os
    import stat

    folder = tmp_path / "clips"
    folder.mkdir()
    neighbour = write(folder / "neighbour.md", "# A note\n")
    clips = kb.collections.create(folder, name="clips")
    old = os.umask(0o022)
    try:
        note = clips.clip("https://example.org/post", html="<html><head><title>Post</title></head><body><article>"
                          "<p>" + "Some words of a post. " * 30 + "</p></article></body></html>")
    finally:
        os.umask(old)
    assert stat.S_IMODE(note.path.stat().st_mode) == stat.S_IMODE(neighbour.stat().st_mode) == 0o644


def test_related_notes_come_from_the_notes_own_collection_by_default(book):
    book.collections.create(pms.cli.sample_notes_dir(), name="sample")
    book.sync()
    related = book.related("sample/reading/how-to-take-smart-notes.md", k=8)
    assert related and {h.collection for h in related} == {"sample"}
    assert {h.collection for h in book.related("sample/reading/how-to-take-smart-notes.md", k=8,
                                               collections=["book", "sample"])} <= {"book", "sample"}


def test_a_short_note_in_chinese_has_words_and_is_no_stub():
    """Chinese is written without spaces: each character counts as a word, so a short note is no empty stub."""
    body = "# 火车\n\n火车时刻表很重要"
    words, own, links = pms.markdown.note_substance(body)
    assert words >= 8 and pms.ranking.note_kind("火车", "train.md", words, links, body, pms.RankingSettings()) == "note"


SECTIONS = {  # three chapter notes; book.md below holds them all, wrapped and marked up otherwise
    "ownership.md": ("What Is Ownership?", [
        "Ownership is a set of rules that govern how a program manages memory while it runs.",
        "Some languages have a garbage collector that looks for memory no longer used; in others the programmer frees it.",
        "Rust manages memory through ownership with rules that the compiler checks, and none of them slows the program.",
        "Each value has an owner, there can only be one owner at a time, and the value is dropped with its owner."]),
    "borrowing.md": ("References and Borrowing", [
        "A reference is like a pointer to a value that another variable owns, and it is guaranteed to be valid.",
        "Creating a reference is called borrowing: as in real life, you give the thing back when you are done with it.",
        "At any given time you can have either one mutable reference or any number of immutable references to data."]),
    "slices.md": ("The Slice Type", [
        "Slices let you reference a contiguous sequence of elements in a collection rather than the whole collection.",
        "A string slice is a reference to part of a String, written with a range inside square brackets after it.",
        "Slices are a kind of reference, so they do not have ownership of the data they point into at all."]),
}


def _concatenated_book(folder):
    """The sections as one chapter-long export (a print edition's chapter, a "book.md"), rewrapped, *em* for _em_."""
    parts = ["<!-- generated from the chapter notes -->\n\n# Understanding Ownership"]
    for title, paragraphs in SECTIONS.values():
        parts.append(f"## {title}")
        parts += [p.replace(" rules ", " *rules*\n").replace(", ", ",\n") for p in paragraphs]
    write(folder / "book.md", "\n\n".join(parts) + "\n")
    for name, (title, paragraphs) in SECTIONS.items():
        write(folder / name, f"# {title}\n\n" + "\n\n".join(p.replace(" rules ", " _rules_ ") for p in paragraphs) + "\n")


def test_a_note_that_concatenates_others_comes_after_the_section_it_holds_as_its_copy(kb, tmp_path, pms_main):
    _concatenated_book(tmp_path / "v")
    kb.collections.create(tmp_path / "v", name="v")
    kb.sync()
    for query in ("ownership rules memory", "owner value dropped", "borrowing reference"):
        hits = kb.search(query, mode="keyword", k=5)
        paths = [h.path for h in hits]
        assert paths.index("book.md") == 1, (query, paths)  # right below the section it holds...
        assert hits[1].copy_of == f"v/{paths[0]}" and paths[0] != "book.md"  # ...as its copy
        assert all(h.copy_of == "" for h in hits if h.path != "book.md")
    # Related to a section: not the export that holds it (nor is the export related to its own sections).
    assert "book.md" not in [h.path for h in kb.related("v/ownership.md")]
    assert not {"ownership.md", "borrowing.md", "slices.md"} & {h.path for h in kb.related("v/book.md")}
    db = kb.index_path
    kb.close()
    r = pms_main("search", "ownership rules memory", "--mode", "keyword", db=db)
    assert "+1 copy: book.md" in r.stdout and "v/book.md:" not in r.stdout  # grouped, not a row of its own


def _book_and_more(folder):
    """The concatenated book plus notes that match its words less well: more results than its sections."""
    _concatenated_book(folder)
    for i in range(6):
        write(folder / f"memory-{i}.md", f"# Memory note {i}\n\n" + f"Some words on memory and the rules of program {i}. " * (i + 2))


def test_k_counts_results_not_their_copies_and_fewer_results_are_the_first_of_more(kb, tmp_path, pms_main):
    _book_and_more(tmp_path / "v")
    kb.collections.create(tmp_path / "v", name="v")
    kb.sync()
    query = "ownership rules memory"
    hits = kb.search(query, mode="keyword", k=2)
    results = [h.path for h in hits if not h.copy_of]
    assert len(results) == 2 and "book.md" in [h.path for h in hits]  # two results; the copy comes too, grouped
    assert next(h for h in hits if h.path == "book.md").copy_of == f"v/{results[0]}"
    longest = [h.path for h in kb.search(query, mode="keyword", k=7) if not h.copy_of]
    assert len(longest) == 7
    for k in range(1, 7):
        assert [h.path for h in kb.search(query, mode="keyword", k=k) if not h.copy_of] == longest[:k], k
    db = kb.index_path
    kb.close()
    shown = pms_main("search", query, "--mode", "keyword", "-n", "2", db=db).stdout
    assert " 1. " in shown and " 2. " in shown and " 3. " not in shown and "+1 copy: book.md" in shown
    files = pms_main("search", query, "--mode", "keyword", "-n", "2", "--files", db=db).stdout.split()
    assert len(files) == 2 and not any(f.endswith("book.md") for f in files)  # one line a result


def test_a_copy_is_shown_and_scored_with_its_original(kb, tmp_path):
    """Every front end shows a copy as a line under its original: it carries no snippet, and its
    relevance is its original's (a min_score keeps or drops both)."""
    _book_and_more(tmp_path / "v")
    kb.collections.create(tmp_path / "v", name="v")
    kb.sync()
    hits = kb.search("ownership rules memory", mode="keyword", k=2)
    copy = next(h for h in hits if h.path == "book.md")
    original = next(h for h in hits if f"v/{h.path}" == copy.copy_of)
    assert original.snippet and original.marks and copy.snippet == "" and copy.marks == []
    assert (copy.matched, copy.relevance) == (original.matched, original.relevance) and original.relevance > 0
    kept = kb.search("ownership rules memory", mode="keyword", k=2, min_score=original.relevance)
    assert "book.md" in [h.path for h in kept]


def test_passages_of_one_note_are_no_copies_of_it(kb, tmp_path):
    sections = "\n\n".join(f"## Part {i}\n\n" + f"Ownership moves the value {i} and memory is freed. " * 30 for i in range(4))
    write(tmp_path / "v" / "long.md", "# Long\n\n" + sections + "\n")
    kb.collections.create(tmp_path / "v", name="v")
    kb.sync()
    hits = kb.search("ownership memory", mode="keyword", passages=True, k=3)
    assert len(hits) == 3 and {h.path for h in hits} == {"long.md"} and not any(h.copy_of for h in hits)


def test_order_copies_is_a_pure_rule():
    settings = pms.RankingSettings(copy_containment=0.6, copy_min_paragraphs=2)

    def hit(path, stub=False):
        return pms.Hit(path=path, collection="c", abspath=path, docid=path, title=path, heading_path="", start_line=1,
                       end_line=1, score=1.0, snippet="", stub=stub)

    prints = {"book.md": frozenset(range(10)), "a.md": frozenset({1, 2, 3}), "b.md": frozenset({4, 5, 99}),
              "other.md": frozenset({50, 51}), "twin.md": frozenset(range(10)), "stub.md": frozenset({1, 2})}
    hits = [hit("book.md"), hit("other.md"), hit("b.md"), hit("a.md")]
    ordered = pms.ranking.order_copies(hits, prints, settings)
    assert [h.path for h in ordered] == ["b.md", "book.md", "other.md", "a.md"]  # the best held note takes its place
    assert ordered[1].copy_of == "c/b.md" and [h.copy_of for h in ordered if h.path != "book.md"] == ["", "", ""]
    hits = [hit("twin.md"), hit("book.md"), hit("stub.md", stub=True)]  # the same text twice: the order stays
    ordered = pms.ranking.order_copies(hits, prints, settings)
    assert [h.path for h in ordered] == ["twin.md", "book.md", "stub.md"] and ordered[1].copy_of == "c/twin.md"
    assert ordered[0].copy_of == "" and ordered[2].copy_of == ""  # a stub is left to the note prior
    strict = pms.RankingSettings(copy_containment=0.9)
    assert not pms.ranking.holds_most_of(prints["book.md"], prints["b.md"], strict)  # 2 of 3 paragraphs


def test_a_snippet_leaves_out_the_heading_its_row_shows_above_it(kb, tmp_path):
    write(tmp_path / "n" / "o.md", "# What Is Ownership?\n\nOwnership is a set of rules that govern memory.\n")
    write(tmp_path / "n" / "t.md", "# Title only\n")
    kb.collections.create(tmp_path / "n", name="n")
    kb.sync()
    hit = kb.search("ownership rules", mode="keyword")[0]
    assert (hit.heading_path, hit.snippet) == ("What Is Ownership?", "Ownership is a set of rules that govern memory.")
    assert kb.search("title only", mode="keyword")[0].snippet == "Title only"  # nothing else to show


# -- issue 36, item 8: tags and snippets on real notes ---------------------------------------------
def test_colour_codes_html_attributes_and_preprocessor_words_are_no_tags():
    body = ("Tabs in [white, #FFFFFF](https://code.visualstudio.com/api) and #43b02a or #fff or #RRGGBB.\n"
            "Rust's use is not like C++ #includes or #define.\n"
            '<iframe src="https://airtable.com/embed" style="background: transparent; border: 1px solid #ccc;"></iframe>\n'
            "<div\n  style=\"border:1px solid #aaa;\">\n</div>\n"
            "Real tags: #todo #add #cafe #beef #2024-plan #project/alpha #ADD #FF-review\n")
    assert pms.notes.inline_tags(body) == ["todo", "add", "cafe", "beef", "2024-plan", "project/alpha", "FF-review"]


def test_the_dendron_vault_has_its_tags_and_no_colours_or_attributes(corpus, kb):
    kb.collections.create(corpus("dendron-vault"), name="dendron")
    kb.sync()
    tags = dict(kb.tags())
    assert tags["role"] >= 40 and tags["feature"] >= 10 and "todo" in tags and "office-hours" in tags
    assert not {"ccc", "bfcbda88", "43b02a", "rrggbb", "ffffff"} & set(tags), sorted(tags)


def test_a_listing_caption_holding_angle_brackets_is_left_out_whole():
    text = ('<Listing number="9-12" file-name="src/main.rs" caption="Changing `main` to return `Result<(), E>` allows '
            'the use of the `?` operator on `Result` values.">\n\nThe `Box<dyn Error>` type is a trait object.\n\n</Listing>\n')
    assert pms.passage_display_text(text) == "The Box<dyn Error> type is a trait object."


def test_rust_book_snippets_hold_no_piece_of_a_listing_tag(corpus, kb):
    kb.collections.create(corpus("rust-book"), name="book")
    kb.sync()
    hits = kb.search("Box dyn Error trait object main", k=10, mode="keyword")
    listing = [h for h in hits if h.path == "src/ch09-02-recoverable-errors-with-result.md"]
    assert listing and '">' not in listing[0].snippet and "values.\"" not in listing[0].snippet, listing[0].snippet
    for (body,) in index_rows(kb, "SELECT body FROM chunks WHERE body LIKE '%<Listing%caption=%'"):
        shown = pms.passage_display_text(body)
        assert '">' not in shown and "caption=" not in shown, shown[:300]


def test_link_definitions_are_not_passage_text(corpus, kb):
    """A chapter's closing sentence followed by its link definitions was a passage of its own that every
    linked chapter's words matched: "trait objects dyn" chose "Next, we'll talk about functions and closures!"."""
    text = ("# Advanced Types\n\n" + "Every trait is a dynamically sized type: `&dyn Trait` or `Box<dyn Trait>`.\n\n" * 3
            + "Next, we'll talk about functions and closures!\n\n"
            + "".join(f"[trait-objects-{i}]: ch18-02-trait-objects.html#using-trait-objects-{i}\n" for i in range(12)))
    passages = pms.markdown_passages(text, title="Advanced Types", target_chars=200)
    assert all("ch18-02" not in c.text for c in passages)
    assert passages[-1].text.endswith("Next, we'll talk about functions and closures!")
    kb.collections.create(corpus("rust-book"), name="book")
    kb.sync()
    for hit in kb.search("trait objects dyn", k=10, mode="keyword"):
        assert "Next, we’ll talk about functions and closures" not in hit.snippet, (hit.path, hit.start_line)
    closing = kb.get("book/src/ch20-03-advanced-types.md")
    assert "[using-trait-objects-to-abstract-over-shared-behavior]:" in closing.text  # the file is read as it is
    rows = index_rows(kb, "SELECT body FROM chunks c JOIN documents d ON d.id = c.document_id "
                          "WHERE d.path = 'src/ch20-03-advanced-types.md'")
    assert rows and not any("ch18-02-trait-objects.html" in body for (body,) in rows)


def test_a_snippet_whose_words_close_its_passage_shows_what_leads_to_them(kb):
    """The demo: "sync notes across devices" found obsidian-setup.md by its last line, and the snippet
    was "…sync-notes-across-devices." alone."""
    from conftest import REPO

    kb.collections.create(REPO / "sample-notes", name="sample-notes")
    kb.sync()
    hit = next(h for h in kb.search("sync notes across devices", k=10, mode="keyword") if h.path == "obsidian-setup.md")
    assert "Syncing the vault to the phone: sync-notes-across-devices." in hit.snippet, hit.snippet
    assert len(hit.snippet) > 60 and [hit.snippet[a:b] for a, b in hit.marks][-1] == "devices"
