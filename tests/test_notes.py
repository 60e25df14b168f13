"""Notes-native search: tags, frontmatter fields, dates, paths, links, related notes, descriptions."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import index_rows, index_write, make_vault, stamp, write  # noqa: F401

import pms

MODES = ("keyword", "vector", "hybrid")
DAY = 86400


@pytest.fixture
def tagged(tmp_path):
    return make_vault(tmp_path / "vault")


@pytest.fixture
def tagged_kb(kb, tagged):
    kb.collections.create(tagged, name="vault", description="Team wiki")
    assert not kb.sync().errors
    return kb


def open_with_model(path, model_dir) -> pms.KnowledgeBase:
    return pms.KnowledgeBase(path, model=(model_dir / "pms-model.txt").read_text().strip(), model_dir=model_dir)


@pytest.fixture(scope="module")
def tagged_hybrid(tmp_path_factory, embedding_model_dir):
    """The same vault, embedded once for the vector and hybrid tests."""
    base = tmp_path_factory.mktemp("tagged")
    root = make_vault(base / "vault")
    kb = open_with_model(base / "index.sqlite", embedding_model_dir)
    kb.collections.create(root, name="vault", description="Team wiki")
    report = kb.sync()
    assert not report.errors and report.embed_error is None
    yield kb
    kb.close()


def paths(hits):
    return [h.path for h in hits]


# -- parsing ---------------------------------------------------------------------------------

def test_tags_come_from_frontmatter_lists_strings_and_inline_text_but_not_code_urls_or_anchors():
    note = pms.notes.parse_note("---\ntags: work, draft\n---\n# T\n\nText #infra/ci and #idea.\n`#code` http://x.org/#frag "
                          "[a](#anchor) #2024\n\n```\n#incode\n```\n", "t")
    assert note.tags == ["work", "draft", "infra/ci", "idea"]
    assert pms.notes.parse_note("---\ntags: [a, '#b']\n---\nx #c\n", "t").tags == ["a", "b", "c"]


def test_links_cover_wikilink_forms_and_relative_markdown_links_but_not_web_links_or_images():
    note = pms.notes.parse_note("[[a]] [[b|label]] [[c#Head]] [[d^blk]] [[e#^blk|x]] ![[img.png]] [w](https://x.org/a.md) "
                          "[m](../other/m.md#sec) [n](<n n.md>)\n", "t", path="dir/note.md")
    assert [(link.target, link.fragment, link.kind) for link in note.links] == [
        ("a", "", "wiki"), ("b", "", "wiki"), ("c", "#Head", "wiki"), ("d", "#^blk", "wiki"), ("e", "#^blk", "wiki"),
        ("other/m.md", "#sec", "markdown"), ("dir/n n.md", "", "markdown")]


def test_dendron_links_name_their_vault_and_put_the_label_first(kb, tmp_path):
    """Dendron writes [[dendron://vault/note.name]] and [[label|dendron://vault/note.name#heading]]: each points to
    the note after the vault (before, its label or the whole address was the target, never found)."""
    body = ("[[Create New Vault|dendron://dendron.dendron-site/dendron.topic.vaults#create-new-vault]] "
            "![[dendron://site/dendron.topic.links#hovers,1]] [[plain.note|Label]]\n")
    assert [(link.target, link.fragment) for link in pms.notes.parse_note(body, "t").links] == [
        ("dendron.topic.vaults", "#create-new-vault"), ("dendron.topic.links", "#hovers,1"), ("plain.note", "")]
    shown = pms.replace_wikilinks(body, lambda target, fragment, label, embedded: f"<{target}{fragment} {label}>")
    assert shown.startswith("<dendron.topic.vaults#create-new-vault Create New Vault>")
    write(tmp_path / "v" / "dendron.topic.vaults.md", "# Vaults\n\nA vault is a folder of notes.\n")
    write(tmp_path / "v" / "start.md", "# Start\n\n" + body)
    kb.collections.create(tmp_path / "v", name="v")
    kb.sync()
    assert [(b.path, b.title) for b in kb.backlinks("v/dendron.topic.vaults.md")] == [("start.md", "Start")]
    assert {r.target for r in kb.unresolved_links()} == {"dendron.topic.links", "plain.note"}


DENDRON_FRONTMATTER = "---\nid: m6cbs1z0ge922q4j2xjmivx\ntitle: {title}\ndesc: ''\nupdated: 1657122358101\ncreated: 1657122304417\n---\n"


def snippets_of(kb, root: Path, query: str, notes: dict[str, str]) -> dict[str, str]:
    """These notes in a collection at ``root``, synced; each hit's snippet for a keyword search, by path."""
    for name, text in notes.items():
        write(root / name, text)
    kb.collections.create(root, name="v")
    kb.sync()
    return {h.path: h.snippet for h in kb.search(query, mode="keyword")}


def test_a_snippet_shows_a_wikilink_by_its_label_in_either_order(kb, tmp_path):
    """A snippet shows [[note|label]] (Obsidian) and Dendron's [[label|note]] as the label: the order
    read from the note's frontmatter as the index holds it (before, Dendron's showed the note's name)."""
    snippets = snippets_of(kb, tmp_path / "v", "marking done", {
        "dendron.topic.tasks.md": DENDRON_FRONTMATTER.format(title="Tasks") + "Marking a task as done: see "
                                  "[[the status command|dendron.topic.tasks.status]] and [[dendron.topic.lookup]].\n",
        "obsidian.md": "# Chores\n\nMarking a chore as done: see [[status-note|the status page]].\n"})
    assert "see the status command and dendron.topic.lookup." in snippets["dendron.topic.tasks.md"]
    assert "dendron.topic.tasks.status" not in snippets["dendron.topic.tasks.md"]
    assert "see the status page." in snippets["obsidian.md"]


def test_a_dendron_note_s_label_less_links_show_their_notes_titles(kb, tmp_path):
    """Dendron shows [[note.name]] and its note references by the note's title (enableNoteTitleForLink,
    its default): so do snippets and KnowledgeBase.link_titles (the app's preview); a name no note or two
    notes have stays as written, and an Obsidian note's [[note]] stays its file name, as Obsidian shows it."""
    shared = "# Shared\n\nOne of two notes of this name.\n"
    snippets = snippets_of(kb, tmp_path / "v", "walrus", {
        "dendron.topic.walrus.md": DENDRON_FRONTMATTER.format(title="Walrus") + "The walrus: see [[dendron.topic.lookup]], "
        "![[dendron://site/dendron.ref.commands#configure,1:#*]], [[dendron.missing]] and [[shared]].\n",
        "dendron.topic.lookup.md": DENDRON_FRONTMATTER.format(title="Lookup") + "Find notes.\n",
        "dendron.ref.commands.md": DENDRON_FRONTMATTER.format(title="Commands") + "## Configure\n\nSet it up.\n",
        "shared.md": shared, "sub/shared.md": shared,
        "obsidian.md": "# Walrus notes\n\nA walrus; see [[dendron.topic.lookup]].\n"})
    assert "The walrus: see Lookup, Commands › configure, dendron.missing and shared." in snippets["dendron.topic.walrus.md"]
    assert "see dendron.topic.lookup." in snippets["obsidian.md"]
    body = "[[dendron.topic.lookup]] ![[dendron.ref.commands#configure]] [[shared]] [[nowhere]] [[Named|shared]]"
    assert kb.link_titles("v/dendron.topic.walrus.md", body) == {"dendron.topic.lookup": "Lookup", "dendron.ref.commands": "Commands"}


def test_a_dendron_note_s_frontmatter_variables_are_searched_and_shown_as_their_values(kb, tmp_path):
    """Dendron shows {{fm.desc}} as the note's desc (175 of its vault's notes write their summary so):
    the words are found and the snippet shows them; in code, or for a field the note lacks, it stays."""
    root = tmp_path / "v"
    write(root / "dendron.ref.rename.md", DENDRON_FRONTMATTER.replace("desc: ''", "desc: Rename a note and update\n  every backlink to it.")
          .format(title="Rename Note") + "## Summary\n\n{{fm.desc}} See {{ fm.title }}, {{fm.owner}}.\n\n"
          + "## Syntax\n\n```\n{{fm.desc}}\n```\n\nWrite `{{fm.desc}}` in a note.\n")
    kb.collections.create(root, name="v")
    kb.sync()
    hits = kb.search("update every backlink", mode="keyword", passages=True)
    assert [h.path for h in hits][:1] == ["dendron.ref.rename.md"]
    assert "Rename a note and update every backlink to it. See Rename Note, {{fm.owner}}." in hits[0].snippet.replace("\x02", "")
    assert hits[0].text.count("{{fm.desc}}") == 2  # the code block's and the inline code's, as written
    assert pms.with_frontmatter_values("{{fm.done}} {{fm.tags}} {{fm.x}}", {"done": True, "tags": ["a", "b"], "x": {"y": 1}}) == \
        "true a, b {{fm.x}}"


def test_a_snippet_shows_a_link_to_a_heading_and_a_note_reference_as_note_and_heading(kb, tmp_path):
    """[[note#heading]] reads "note › heading", as Obsidian shows it; Dendron's note reference
    ![[note#heading,1:#*]] (a range of that note) the same, without its range marks, and a
    block id is left out (before, the snippet showed "note#add-your-notes:#turn-on-pages")."""
    snippets = snippets_of(kb, tmp_path / "v", "publishing", {
        "dendron.topic.publish.md": DENDRON_FRONTMATTER.format(title="Publish")
        + "Publishing to pages, step by step:\n\n![[dendron.topic.publish.cook#add-your-notes:#turn-on-pages]]\n\n"
        + "Then publishing again: ![[dendron.ref.commands#configure,1:#*]] and [[dendron.topic.site#^a1b2c3]].\n",
        "obsidian.md": "# Garden\n\nPublishing the garden follows [[Gardening#Watering#In summer]].\n"})
    assert "dendron.topic.publish.cook › add-your-notes" in snippets["dendron.topic.publish.md"]
    assert "dendron.ref.commands › configure and dendron.topic.site." in snippets["dendron.topic.publish.md"]
    assert "turn-on-pages" not in snippets["dendron.topic.publish.md"]
    assert "follows Gardening › Watering › In summer." in snippets["obsidian.md"]
    assert pms.wikilink_text("", "#^a1b2c3") == "^a1b2c3"  # a block of the same note: as written


def test_a_dendron_note_writes_its_links_label_first_and_its_links_to_itself_are_no_links(kb, tmp_path):
    """Dendron's own form is [[label|note.name]] (Obsidian's [[note|label]]): told by the frontmatter Dendron gives
    every note (an id, created and updated as numbers). A link to the note itself is a link within it."""
    root = tmp_path / "v"
    write(root / "dendron.topic.tasks.md", DENDRON_FRONTMATTER.format(title="Tasks") + "## Summary\n\nTrack tasks.\n")
    write(root / "dendron.topic.tasks.commands.complete-task.md", DENDRON_FRONTMATTER.format(title="Complete Task")
          + "Uses the first status of [[taskCompleteStatus|dendron.topic.tasks#taskcompletestatus]]; see "
          "[[below|dendron.topic.tasks.commands.complete-task#details]] and "
          "[[here|dendron://site/dendron.topic.tasks.commands.complete-task#more]].\n")
    write(root / "obsidian.md", "# Obsidian\n\nSee [[dendron.topic.tasks|the tasks]] and [[Tasks|dendron.topic.tasks]].\n")
    kb.collections.create(root, name="v")
    kb.sync()
    links = kb.links("v/dendron.topic.tasks.commands.complete-task.md")
    assert [(r.path, r.target) for r in links] == [("dendron.topic.tasks.md", "dendron.topic.tasks#taskcompletestatus")]
    assert sorted(b.path for b in kb.backlinks("v/dendron.topic.tasks.md")) == [
        "dendron.topic.tasks.commands.complete-task.md", "obsidian.md"]
    assert not kb.backlinks("v/dendron.topic.tasks.commands.complete-task.md")  # its links to itself are no backlinks
    assert [r.target for r in kb.unresolved_links()] == ["Tasks"]  # an Obsidian note keeps Obsidian's order
    # The preview's reading is the same rule (replace_wikilinks with the frontmatter's links_label_first).
    meta = pms.parse_frontmatter(pms.split_frontmatter(DENDRON_FRONTMATTER.format(title="T"))[0])
    assert pms.links_label_first(meta) and not pms.links_label_first({"id": "x", "created": "2021-01-01", "updated": "x"})
    shown = pms.replace_wikilinks("[[Go here|a.b#c]]", lambda target, fragment, label, embedded: f"{target}{fragment}={label}",
                                  pms.links_label_first(meta))
    assert shown == "a.b#c=Go here"
    # A resolved link to the note itself still opens it (the preview's resolver).
    own = kb.resolve_link("v/dendron.topic.tasks.commands.complete-task.md", "dendron.topic.tasks.commands.complete-task")
    assert own.path == "dendron.topic.tasks.commands.complete-task.md"


def test_note_date_prefers_frontmatter_date_then_created_then_updated():
    assert pms.notes.parse_note("---\nupdated: 2021-01-01\ncreated: 2020-05-06\n---\nx", "t").date == "2020-05-06"
    assert pms.notes.parse_note("---\ndate: 2019-02-03T10:11\n---\nx", "t").date == "2019-02-03T10:11"
    assert pms.notes.parse_note("---\ndate: someday\n---\nx", "t").date is None


def test_bad_filters_are_one_line_errors(tagged_kb):
    for kwargs in ({"after": "March"}, {"before": "2024-13-01"}, {"tags": ["#"]}, {"where": "=x"}):
        with pytest.raises(pms.PMSError):
            tagged_kb.search("deployment", **kwargs)


# -- filters, keyword mode (no model needed) -------------------------------------------------------

def test_tags_are_listed_with_counts_including_inline_and_nested(tagged_kb):
    counts = dict(tagged_kb.tags())
    assert counts["work"] == 3 and counts["bulk"] == 12 and counts["even"] == 6
    assert counts["work/meetings"] == 1 and counts["infra/ci"] == 1 and counts["reference"] == 1
    assert "notatag" not in counts and "code" not in counts and "anchor" not in counts and "retro" not in counts


@pytest.mark.parametrize("kwargs, expected", [
    ({"tags": ["work"]}, {"projects/alpha.md", "projects/beta.md", "journal/2024-02-10.md", "archive/old.md"}),  # work/meetings counts
    ({"tags": ["infra"]}, {"projects/beta.md"}),
    ({"tags": ["work", "draft"]}, {"projects/beta.md"}),
    ({"tags": ["work"], "exclude_tags": ["archive", "draft"]}, {"projects/alpha.md", "journal/2024-02-10.md"}),
    ({"tags": ["work", "-archive"]}, {"projects/alpha.md", "projects/beta.md", "journal/2024-02-10.md"}),
    ({"path": "projects"}, {"projects/alpha.md", "projects/beta.md"}),
    ({"path": "*/b*.md"}, {"projects/beta.md"}),
    ({"after": "2024-01-20", "before": "2024-03-05", "exclude_tags": ["bulk"]},
     {"projects/alpha.md", "projects/beta.md", "journal/2024-02-10.md"}),  # inclusive; the journal's date is its mtime
    ({"before": "2023-12-31"}, {"archive/old.md", "ref/spec.md"}),
    ({"after": "2024-02", "before": "2024-03", "exclude_tags": ["bulk"]}, {"projects/alpha.md", "journal/2024-02-10.md"}),
    ({"before": "2023"}, {"archive/old.md", "ref/spec.md"}),  # a year: to its last day
    ({"after": "2024", "before": "2024-01", "path": "projects"}, {"projects/beta.md"}),
    ({"where": "status=draft"}, {"projects/beta.md"}),
    ({"where": ["status!=draft", "status"]}, {"projects/alpha.md"}),
    ({"where": {"owner": None}, "tags": "project"}, {"projects/alpha.md"}),
    ({"tags": ["work"], "path": "projects/**", "after": "2024-02-01", "where": "owner=ANA"}, {"projects/alpha.md"}),
])
def test_each_filter_alone_and_combined_in_keyword_mode(tagged_kb, kwargs, expected):
    hits = tagged_kb.search("deployment", k=50, mode="keyword", **kwargs)
    assert set(paths(hits)) == expected


def test_a_time_back_from_today_is_resolved_once_into_a_day(tagged_kb):
    import datetime

    today = datetime.date.today()
    built = {text: pms.NoteFilter.build(after=text).after for text in ("today", "yesterday", "7d", "2 weeks ago", "1y")}
    assert built == {"today": today.isoformat(), "yesterday": (today - datetime.timedelta(days=1)).isoformat(),
                     "7d": (today - datetime.timedelta(days=7)).isoformat(),
                     "2 weeks ago": (today - datetime.timedelta(days=14)).isoformat(),
                     "1y": (today.replace(year=today.year - 1, day=min(today.day, 28)) if (today.month, today.day) == (2, 29)
                            else today.replace(year=today.year - 1)).isoformat()}
    month_back = pms.NoteFilter.build(before="1m").before
    assert month_back < today.isoformat() and (today - datetime.date.fromisoformat(month_back)).days in range(28, 32)
    # The notes written by this test today (their files' times) and none of the dated ones.
    recent = tagged_kb.search("deployment", k=100, mode="keyword", after="2d")
    assert len(recent) == 60 and all(h.path.startswith("noise/") for h in recent)


def test_a_filter_inside_the_keyword_query_still_returns_k_results(tagged_kb):
    unfiltered = tagged_kb.search("deployment", k=50, mode="keyword")
    assert not any("bulk" in h.tags for h in unfiltered)  # the untagged notes fill the top 50 without the filter
    hits = tagged_kb.search("deployment", k=5, mode="keyword", tags=["bulk"])
    assert len(hits) == 5 and all(h.path.startswith("bulk/") for h in hits)


def test_a_filter_without_words_lists_matching_notes_newest_first(tagged_kb):
    hits = tagged_kb.search("", k=4, tags=["bulk"])
    assert paths(hits) == ["bulk/log12.md", "bulk/log11.md", "bulk/log10.md", "bulk/log09.md"]
    assert hits[0].date == "2024-04-12" and hits[0].tags == ["bulk", "even"]
    assert paths(tagged_kb.search("  ", k=10, where="status")) == ["projects/alpha.md", "projects/beta.md"]


def test_hits_carry_the_collection_and_folder_descriptions(tagged_kb, cli, db_path):
    out = cli("collection", "describe", "vault", "Active client projects", "--folder", "projects/", db=db_path)
    assert out.returncode == 0 and "Described folder 'projects/'" in out.stdout, out.stderr
    shown = json.loads(cli("collection", "show", "vault", "--json", db=db_path).stdout)
    assert shown["folder_descriptions"] == {"projects": "Active client projects"} and shown["description"] == "Team wiki"
    hit = tagged_kb.search("alpha pipeline", k=1, mode="keyword")[0]
    assert (hit.collection_description, hit.folder_description) == ("Team wiki", "Active client projects")
    assert tagged_kb.search("old days", k=1, mode="keyword")[0].folder_description == ""
    with pytest.raises(pms.PMSError):
        tagged_kb.describe_folder("vault", "nowhere", "x")
    out = cli("search", "alpha pipeline", "--json", "-n", "1", "--mode", "keyword", db=db_path)
    assert json.loads(out.stdout)[0]["folder_description"] == "Active client projects"


# -- filters in vector and hybrid mode --------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_filters_alone_and_combined_in_every_mode(tagged_hybrid, mode):
    kb = tagged_hybrid
    assert set(paths(kb.search("deployment", k=20, mode=mode, tags=["work"], exclude_tags=["archive"]))) == {
        "projects/alpha.md", "projects/beta.md", "journal/2024-02-10.md"}
    assert set(paths(kb.search("deployment", k=20, mode=mode, path="projects", where="status=draft"))) == {"projects/beta.md"}
    assert set(paths(kb.search("deployment", k=20, mode=mode, before="2023-12-31"))) == {"archive/old.md", "ref/spec.md"}


@pytest.mark.parametrize("mode", MODES)
def test_k_results_come_back_when_enough_notes_match_in_every_mode(tagged_hybrid, mode):
    kb = tagged_hybrid
    assert not any(h.path.startswith("bulk/") for h in kb.search("deployment", k=8, mode=mode))
    for k in (3, 8):
        hits = kb.search("deployment", k=k, mode=mode, tags=["bulk"])
        assert len(hits) == k and all(h.path.startswith("bulk/") for h in hits)
    assert len(kb.search("deployment", k=10, mode=mode, tags=["even"])) == 6  # only six match


@pytest.mark.parametrize("mode", MODES)
def test_excluded_tags_never_appear(tagged_hybrid, mode):
    hits = tagged_hybrid.search("deployment rollout log", k=100, mode=mode, exclude_tags=["work", "bulk"], passages=True)
    assert hits and not any(t == "work" or t.startswith(("work/", "bulk")) for h in hits for t in h.tags)
    assert not any(h.path.startswith(("bulk/", "projects/", "archive/", "journal/")) for h in hits)


# -- links -------------------------------------------------------------------------------------

def test_links_and_backlinks_resolve_names_aliases_headings_and_relative_paths(tagged_kb):
    links = tagged_kb.links("vault/projects/alpha.md")
    assert [(link.path, link.resolved) for link in links] == [("projects/beta.md", True), ("ref/spec.md", True), ("ref/spec.md", True)]
    back = tagged_kb.backlinks("vault/projects/alpha.md")
    assert [(b.path, b.title) for b in back] == [("projects/beta.md", "Beta")]  # two links, one note
    assert {b.path for b in tagged_kb.backlinks("vault/ref/spec.md")} == {"projects/alpha.md"}


def test_a_link_to_a_renamed_note_shows_as_unresolved(tagged_kb, tagged, cli, db_path):
    assert [r.target for r in tagged_kb.unresolved_links()] == ["old-name"]
    shutil.move(tagged / "projects" / "beta.md", tagged / "projects" / "beta-renamed.md")
    tagged_kb.sync()
    links = tagged_kb.links("vault/projects/alpha.md")
    assert (links[0].path, links[0].target, links[0].resolved) == (None, "beta", False)
    assert {(r.path, r.target) for r in tagged_kb.unresolved_links()} == {("ref/spec.md", "old-name"), ("projects/alpha.md", "beta")}
    status = cli("status", db=db_path)
    assert "Unresolved links: 2" in status.stdout and "vault/projects/alpha.md:9 -> beta" in status.stdout
    out = json.loads(cli("links", "vault/projects/alpha.md", "--json", db=db_path).stdout)
    assert out[0]["path"] is None and {"path", "collection", "title"} <= set(out[1]) and out[1]["path"] == "ref/spec.md"
    docid = tagged_kb.get("vault/ref/spec.md").docid
    assert json.loads(cli("backlinks", f"#{docid}", "--json", db=db_path).stdout)[0]["path"] == "projects/alpha.md"


# -- CLI -----------------------------------------------------------------------------------------

def test_cli_filter_flags_and_tags_command(tagged_kb, cli, db_path):
    out = cli("search", "deployment", "--tag", "work", "--no-tag", "archive", "--path", "projects", "--after", "2024-01-01",
              "--before", "2024-12-31", "--where", "status!=draft", "--json", "--mode", "keyword", db=db_path)
    assert out.returncode == 0, out.stderr
    assert [h["path"] for h in json.loads(out.stdout)] == ["projects/alpha.md"]
    listed = cli("search", "--tag", "bulk", "-n", "2", "--files", db=db_path)
    assert [os.path.basename(p) for p in listed.stdout.split()] == ["log12.md", "log11.md"]
    listed = cli("search", "--tag", "bulk", "-n", "1", db=db_path).stdout
    assert listed.startswith(" 1. Log 12  vault/bulk/log12.md:6-8  #") and listed.split("\n")[0].endswith("  2024-04-12")
    bad = cli("search", "x", "--after", "last tuesday", db=db_path)
    assert bad.returncode == 1 and bad.stderr.strip().splitlines()[-1] == \
        "pms: error: --after wants a date (YYYY-MM-DD, YYYY-MM, YYYY, today, yesterday, or a time back such as 7d, 2w, 3m, 1y), not 'last tuesday'"
    tags = json.loads(cli("tags", "--json", db=db_path).stdout)
    assert tags[0] == {"tag": "bulk", "notes": 12} and {"tag": "infra/ci", "notes": 1} in tags
    assert "    12  #bulk" in cli("tags", db=db_path).stdout


# -- upgrade of an index written before these tables existed -----------------------------------------

def downgrade_to_before_notes_migration(index: Path) -> None:
    """Make the index what a PMS without the notes migration wrote: its objects gone, user_version before it."""
    number = next(i for i, m in enumerate(pms.schema.MIGRATIONS) if isinstance(m, str) and "CREATE TABLE note_tags" in m)
    later = "".join(m for m in pms.schema.MIGRATIONS[number + 1:] if isinstance(m, str))
    # A later migration runs again here: it must be one that can (IF NOT EXISTS, as note_names is;
    # the functions among them, such as the docid one, can).
    assert later.count("CREATE ") == later.count("IF NOT EXISTS"), "a later migration would fail to run twice: drop its objects too"
    # An index as an older schema left it: made by dropping what later migrations add, through the file.
    index_write(index, "DROP TABLE note_tags", "DROP TABLE note_fields", "DROP TABLE note_links", "DROP TABLE folder_descriptions",
                "DROP INDEX documents_note_date", "ALTER TABLE documents DROP COLUMN note_date",
                "ALTER TABLE documents DROP COLUMN parsed_version",
                "DROP INDEX documents_language", "ALTER TABLE documents DROP COLUMN language",  # the language migrations
                "ALTER TABLE chunks DROP COLUMN page", "ALTER TABLE documents DROP COLUMN pages",  # the PDF migration's
                "ALTER TABLE documents DROP COLUMN words", "ALTER TABLE documents DROP COLUMN own_words",
                "ALTER TABLE documents DROP COLUMN links_out",  # the note substance migration's
                f"PRAGMA user_version = {number}")


def test_an_old_index_upgrades_in_place_and_sync_rereads_notes_without_reembedding(tagged_hybrid, tmp_path, embedding_model_dir):
    copy = tmp_path / "old.sqlite"
    index_rows(tagged_hybrid, f"VACUUM INTO '{copy}'")  # a consistent copy of the index file
    downgrade_to_before_notes_migration(copy)
    with open_with_model(copy, embedding_model_dir) as kb:
        assert kb.status(pending=False)["notes_to_reread"] == 77
        assert kb.search("", tags=["bulk"]) == []  # nothing known yet, and no error
        assert "77 to re-read" in kb.check_sync_status().summary()
        report = kb.sync()
        assert (report.reread, report.updated, report.embedded) == (77, 0, 0)  # vectors kept
        assert "77 re-read" in report.summary()
        assert len(kb.search("deployment", k=3, mode="hybrid", tags=["bulk"])) == 3
        assert kb.status(pending=False)["notes_to_reread"] == 0


# -- related notes ------------------------------------------------------------------------------------

def rust_chapters(corpora, dest):
    """Chapters 3, 4 and 8 of the Rust book: ownership, its neighbours and look-alikes (strings, vectors)."""
    src = corpora / "rust-book" / "src"
    dest.mkdir()
    for p in src.glob("ch*.md"):
        if p.name[:4] in ("ch03", "ch04", "ch08"):
            shutil.copy(p, dest / p.name)
    return dest


@pytest.mark.slow
def test_related_on_the_rust_book_puts_borrowing_and_slices_near_the_top(corpora, hybrid_kb, tmp_path):
    hybrid_kb.collections.create(rust_chapters(corpora, tmp_path / "book"), name="book")
    assert hybrid_kb.sync().embed_error is None
    hits = hybrid_kb.related("book/ch04-01-what-is-ownership.md", k=5)
    top = paths(hits)
    assert "ch04-01-what-is-ownership.md" not in top
    assert {"ch04-02-references-and-borrowing.md", "ch04-03-slices.md"} <= set(top[:3]), top
    assert all(h.heading_path and h.snippet and 0 < h.score <= 1 for h in hits)  # the passage that relates it
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.slow
def test_related_without_embeddings_uses_shared_rare_terms(corpora, kb, tmp_path, cli, db_path):
    kb.collections.create(rust_chapters(corpora, tmp_path / "book"), name="book")
    kb.sync()
    top = paths(kb.related("book/ch04-01-what-is-ownership.md", k=5))
    assert "ch04-01-what-is-ownership.md" not in top
    assert {"ch04-02-references-and-borrowing.md", "ch04-03-slices.md"} <= set(top[:3]), top
    out = cli("related", "book/ch04-01-what-is-ownership.md", "-n", "2", "--json", db=db_path)
    hits = json.loads(out.stdout)
    assert len(hits) == 2 and {"path", "collection", "heading_path", "snippet", "score", "collection_description"} <= set(hits[0])


def test_a_moved_collection_folder_keeps_its_index(tagged_kb, tagged, tmp_path):
    moved = tmp_path / "elsewhere"
    shutil.copytree(tagged, moved)
    shutil.rmtree(tagged)
    with pytest.raises(pms.PMSError):
        tagged_kb.collections.move("vault", tmp_path / "missing")
    assert tagged_kb.collections.move("vault", moved).path == moved.resolve()
    report = tagged_kb.sync()
    assert (report.added, report.updated, report.deleted, report.unchanged) == (0, 0, 0, 77)
    assert tagged_kb.search("", tags=["draft"])[0].abspath == str(moved.resolve() / "projects" / "beta.md")


def test_filters_narrow_chinese_and_japanese_searches_too(kb, tmp_path):
    root = tmp_path / "cjk"
    notes = {"a.md": "---\ntags: [cn]\n---\n# 笔记\n\n我用同步工具备份笔记。\n", "b.md": "# 其他\n\n另一个同步工具的笔记。\n"}
    for name, text in notes.items():
        write(root / name, text)
    kb.collections.create(root, name="cjk")
    kb.sync()
    assert {h.path for h in kb.search("同步", mode="keyword")} == {"a.md", "b.md"}
    assert [h.path for h in kb.search("同步", mode="keyword", tags="cn")] == ["a.md"]
    assert [h.path for h in kb.search("同步", mode="keyword", exclude_tags="cn")] == ["b.md"]
