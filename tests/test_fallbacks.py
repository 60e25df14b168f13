"""Keyword fallbacks (typos against the vault's own words, suffix folding in inflecting
languages), the note prior's kinds on real shapes of notes, and a relevance that follows the
rank. Keyword only: no model."""
from __future__ import annotations

from pathlib import Path

import pytest

import pms
from conftest import index_rows, index_write, ranked, write


@pytest.fixture
def typo_vault(kb, tmp_path):
    root = tmp_path / "v"
    write(root / "rust.md", "# Rust ownership\n\nEvery value has one owner. Borrowing lends a reference to it.\n")
    write(root / "sync.md", "# Syncing\n\nSyncthing keeps the vault in step between laptop and phone.\n")
    write(root / "lifetimes.md", "# Lifetimes\n\nLifetimes make sure every reference stays valid while it is used.\n")
    write(root / "cooking.md", "# Cooking\n\nA stew of beans, onions and carrots, slowly.\n")
    kb.collections.create(root, name="v")
    kb.sync()
    return kb


def searched(kb, query: str, **settings) -> list[str]:
    """The paths a keyword search finds with these RankingSettings (a KnowledgeBase made with them)."""
    with ranked(kb, **settings) as other:
        return [h.path for h in other.search(query, mode="keyword")]


@pytest.mark.parametrize("query, path", [("ownershp", "rust.md"), ("borowing", "rust.md"), ("lifetmes", "lifetimes.md"),
                                         ("sycnthing", "sync.md")])
def test_a_typo_finds_the_word_the_vault_holds(typo_vault, query, path):
    assert searched(typo_vault, query)[:1] == [path]
    assert searched(typo_vault, query, typo_min_letters=0) == []  # the fallback is what finds it


def test_a_typo_fallback_takes_only_the_closest_words_and_leaves_known_words_alone(typo_vault):
    # internal contract: the words a typo stands for, in the request (no public call shows a term's variants)
    parsed = typo_vault.retrieval.request("lifetmes owner carrots").parsed
    lifetimes, owner, carrots = parsed.terms
    assert lifetimes.variants == (("lifetim", False),)  # the index's stem, one edit away; not "life" (two)
    assert owner.variants == carrots.variants == ()  # words the vault holds are searched as typed
    assert typo_vault.retrieval.request("ownr").parsed.terms[0].variants == ()  # under 5 letters: too many neighbours
    assert typo_vault.search("zzzzzzzz", mode="keyword") == []  # nothing near: no guess


def test_typing_on_after_a_typo_looks_its_words_up_once_until_the_index_changes(typo_vault, tmp_path):
    kb, statements = typo_vault, []

    def reads_words() -> list[str]:  # the vocabulary's range read, where a typo's words are looked for
        return [s for s in statements if "length(term) BETWEEN" in s]

    kb.store.trace_statements(statements.append)  # internal contract: the statements a search runs
    assert kb.search("ownershp", mode="keyword")[0].path == "rust.md" and reads_words()
    statements.clear()
    for typed in ("ownershp b", "ownershp bo", "ownershp bor"):  # typing on: the typo is looked up no more
        assert kb.search(typed, mode="keyword", prefix_last=True)[0].path == "rust.md"
    assert not reads_words()
    # A note added since holds another word one edit away: the next search finds it too.
    write(tmp_path / "v" / "boat.md", "# Boat\n\nThe ownershap of the boat is shared.\n")
    kb.sync()
    assert "boat.md" in [h.path for h in kb.search("ownershp", mode="keyword")] and reads_words()
    kb.store.trace_statements(None)


def test_a_word_that_inflects_finds_its_other_forms(kb, tmp_path):
    root = tmp_path / "v"
    write(root / "run.md", "# Бег\n\nВ субботу я бегу полумарафону навстречу.\n")
    write(root / "haus.md", "# Umzug\n\nDie Häuser in der Straße sind alt.\n")
    write(root / "files.md", "# Ficheros\n\nLos archivos comprimidos ocupan menos espacio en el disco.\n")
    kb.collections.create(root, name="v")
    kb.sync()
    assert [h.path for h in kb.search("полумарафон", mode="keyword")] == ["run.md"]
    assert [h.path for h in kb.search("das alte Haus in der Straße", mode="keyword")][:1] == ["haus.md"]
    assert [h.path for h in kb.search("el archivo comprimido ocupa el disco", mode="keyword")][:1] == ["files.md"]
    assert searched(kb, "полумарафон", typo_min_letters=0) == ["run.md"]  # the folding alone finds it
    assert searched(kb, "полумарафон", typo_min_letters=0, fold_suffixes=False) == []
    english = pms.parse_query("process archives")
    assert pms.query.with_folded_suffixes(english) == english  # English words: FTS5's porter stems them already
    # Typed in the app, the last word is a prefix until a space follows it: its other forms count too.
    assert [h.path for h in kb.search("полумарафона", mode="keyword", prefix_last=True)] == ["run.md"]
    typed = pms.query.with_folded_suffixes(pms.parse_query("полумарафона", prefix_last=True)).terms[0]
    assert typed.prefix and ("полумарафон", True) in typed.variants


def test_a_short_note_with_its_own_sentences_keeps_its_place(kb, tmp_path):
    """The issue's case: a 47-word note that is the exact answer, BM25's #1, links to an overview
    page; it is a note, not a stub, and stays first."""
    root = tmp_path / "v"
    write(root / "overview.md", "# Networking\n\nHow the home lab is wired: " + "the router, the switch and the VPN. " * 20
          + "\n\n- [[tailscale]]\n- [[wireguard]]\n")
    write(root / "tailscale.md", "# Tailscale\n\nTailscale is the mesh VPN I use to reach the home lab from the phone and "
          "the laptop. Exit nodes run on the NAS; magic DNS names every machine. Keys expire after 180 days, so renew "
          "them before travelling. See [[overview]] for the rest of the network.\n")
    kb.collections.create(root, name="v")
    kb.sync()
    hits = kb.search("tailscale exit nodes keys expire", mode="keyword")
    assert [h.path for h in hits][:1] == ["tailscale.md"] and not hits[0].stub


DENDRON_FRONTMATTER = "---\nid: {id}\ntitle: {title}\nupdated: 1657122358101\ncreated: 1657122304417\n---\n"


def test_a_short_note_whose_sentences_link_to_its_parent_keeps_its_bm25_place(kb, tmp_path):
    """Dendron's "Complete Task": 30 words of its own that never repeat its title, each sentence carrying a link to
    its parent topic. It is the only note of its name, so no pointer: BM25's #1 stays first, above the parent it links to
    (as a pointer it went below every note, RankingSettings.pointer_namesakes)."""
    root = tmp_path / "v"
    write(root / "dendron.topic.tasks.md", DENDRON_FRONTMATTER.format(id="t1", title="Tasks")
          + "## Summary\n\nTrack homework or a team's plans with task notes. " + "A task note has a status and a due date. " * 12
          + "\n\n## taskCompleteStatus\n\nThe statuses that mark a task done; the first one is used when a command "
          "does not prompt for the status.\n")
    write(root / "dendron.ref.commands.md", DENDRON_FRONTMATTER.format(id="c1", title="Commands")
          + "## Set Task Status\n\nPrompts for a status and sets it on the task note. " + "Commands run from the palette. " * 12 + "\n")
    write(root / "dendron.topic.tasks.commands.complete-task.md", DENDRON_FRONTMATTER.format(id="c2", title="Complete Task")
          + "This works in the same way as [[Set Task Status|dendron://site/dendron.ref.commands#set-task-status]], but "
          "doesn't prompt for the status to use. Instead, it will use the first status set in the "
          "[[taskCompleteStatus|dendron://site/dendron.topic.tasks#taskcompletestatus]] configuration.\n")
    kb.collections.create(root, name="v")
    kb.sync()
    query = "use the first status set instead of a prompt"
    hits = kb.search(query, mode="keyword")
    paths = [h.path for h in hits]
    assert paths[0] == "dendron.topic.tasks.commands.complete-task.md" and hits[0].bm25_rank == 1 and not hits[0].stub
    assert "dendron.topic.tasks.md" in paths  # the parent it links to is in the list, below it
    assert searched(kb, query, pointer_namesakes=False)[-1] == paths[0]  # called a pointer, it went below every note
    # Another note of its name makes it a stand-in for that one, in the same process as soon as the index says so.
    write(root / "archive" / "complete-task.md", "# Complete Task\n\nThe old page about finishing a task note.\n")
    kb.sync()
    hits = kb.search(query, mode="keyword")
    assert hits[-1].path == "dendron.topic.tasks.commands.complete-task.md" and hits[-1].stub


def test_an_old_page_sharing_its_title_with_its_chapter_stays_below_the_chapter(kb, tmp_path):
    """The Rust book's old editions: a page that says the edition moved, titled as the chapter (its namesake), is a
    pointer; BM25 puts the short page first, the note prior the chapter."""
    root = tmp_path / "book"
    write(root / "src" / "ch17-02-trait-objects.md", "# Trait Objects\n\n" + "".join(
        f"## Section {n}\n\n" + "A GUI library draws components on a screen through a vector of boxed values. " * 12 + "\n\n"
        for n in range(8)))
    for n, topic in enumerate(("ownership", "closures", "iterators", "lifetimes", "macros", "testing", "modules", "errors")):
        write(root / "src" / f"ch{n:02}-{topic}.md", f"# {topic.title()}\n\n" + f"How {topic} work in Rust programs. " * 20 + "\n")
    write(root / "second-edition" / "src" / "ch17-02-trait-objects.md", "## Trait Objects\n\nThe second edition of the book is "
          "no longer distributed with Rust's documentation.\n\nIf you came here via a link or web search, you may want to check "
          "out [the current version of the book](../index.html) instead.\n")
    write(root / "second-edition" / "index.md", "# The Rust Programming Language\n\nThe second edition.\n")
    kb.collections.create(root, name="book")
    kb.sync()
    off = searched(kb, "trait objects", pointer_weight=1.0, pointer_names=True, pointer_below_notes=False, exact_title_first=False,
                   name_first_min=2.0)
    assert off[0] == "second-edition/src/ch17-02-trait-objects.md"  # by BM25 and its name alone, the old page first
    hits = kb.search("trait objects", mode="keyword")
    assert [h.path for h in hits][:2] == ["src/ch17-02-trait-objects.md", "second-edition/src/ch17-02-trait-objects.md"]
    assert hits[1].stub and not hits[0].stub


def book_with_a_pointer(root: Path, exercises: int = 0) -> Path:
    """A chapter "Trait Objects", an old edition's page of that name pointing to the book, and
    ``exercises`` notes named "Trait Objects, exercise N" first in the index."""
    for n in range(exercises):
        write(root / "a-exercises" / f"exercise-{n:03}.md", f"# Trait Objects, exercise {n}\n\nDraw shape number {n}.\n")
    write(root / "src" / "ch17-02-trait-objects.md", "# Trait Objects\n\n"
          + "A GUI library draws components on a screen through a vector of boxed values. " * 40 + "\n")
    write(root / "second-edition" / "src" / "ch17-02-trait-objects.md", "## Trait Objects\n\nThe second edition of the book is "
          "no longer distributed with Rust's documentation.\n\nIf you came here via a link or web search, you may want to check "
          "out [the current version of the book](../index.html) instead.\n")
    return root


POINTER = [("second-edition/src/ch17-02-trait-objects.md", True)]  # a pointer: it has a namesake


def test_a_pointers_namesake_is_found_among_hundreds_of_names_that_hold_its_title(kb, tmp_path):
    """A pointer's namesakes are the notes of its title or file name (schema.namesake_keys), looked up
    by the index: the chapter is found though 250 notes named "Trait Objects, exercise N" hold its
    title and came first in the index (a search of the names' trigrams read those first)."""
    kb.collections.create(book_with_a_pointer(tmp_path / "book", exercises=250), name="book")
    kb.sync()
    hits = kb.search("second edition no longer distributed", mode="keyword")
    assert [(h.path, h.stub) for h in hits] == POINTER


def test_an_index_from_before_the_namesake_keys_upgrades_with_its_pointers_told(db_path, tmp_path):
    with pms.KnowledgeBase(db_path, embeddings=False) as kb:
        kb.collections.create(book_with_a_pointer(tmp_path / "book"), name="book")
        kb.sync()
    # An index as schema 13 left it: made by hand, as no public call makes one.
    index_write(kb, "DROP INDEX documents_title_key", "DROP INDEX documents_stem_key", "ALTER TABLE documents DROP COLUMN title_key",
                "ALTER TABLE documents DROP COLUMN stem_key",
                f"PRAGMA user_version = {pms.schema.MIGRATIONS.index(pms.schema._namesake_key_columns)}")
    with pms.KnowledgeBase(db_path, embeddings=False) as kb:
        hits = kb.search("second edition no longer distributed", mode="keyword")
        assert [(h.path, h.stub) for h in hits] == POINTER and index_rows(kb, "PRAGMA user_version") == [(len(pms.schema.MIGRATIONS),)]


def test_relevance_never_rises_down_the_list():
    assert pms.ranking.non_increasing([1.0, 0.4, 0.6, 0.6, 1.0]) == pytest.approx([1.0, 0.65, 0.65, 0.65, 0.65])
    assert pms.ranking.non_increasing([0.9, 0.8, 0.1]) == [0.9, 0.8, 0.1]
    assert pms.ranking.non_increasing([]) == []


def test_a_search_shows_relevance_in_rank_order_and_a_passage_with_only_common_words_is_weak(typo_vault):
    result = typo_vault.search("reference every value owner", mode="keyword")
    values = [h.relevance for h in result if not h.copy_of]
    assert values == sorted(values, reverse=True) and result.best_relevance == values[0]
    # "every" is in three notes, "zucchini" in none: holding the common word alone says little.
    weak = typo_vault.search("every zucchini", mode="keyword")
    assert weak.weak and weak.best_relevance < pms.RankingSettings().floor_for("keyword")  # the KnowledgeBase's: the defaults


def test_a_keyword_search_whose_answer_holds_most_of_a_long_question_is_not_called_weak(kb, tmp_path):
    """Keyword relevance is the share of the query's words a passage holds: a long question rarely
    finds all of them, so its floor is lower than the hybrid one (RankingSettings.floor_for,
    chosen on the suite's answerable and off-topic queries by bench/relevance.py)."""
    vault = tmp_path / "v"
    write(vault / "tar.md", "# tar\n\nArchive files. Extract an archive: tar xf archive.tar.\n")
    write(vault / "git.md", "# git log\n\nShow the commit history of a repository.\n")
    kb.collections.create(vault, name="v")
    kb.sync(embed=False)
    answered = kb.search("extract the files from a tar archive quickly", mode="keyword")
    assert answered[0].path == "tar.md" and not answered.weak
    settings = pms.RankingSettings()
    assert settings.floor_for("keyword") <= answered.best_relevance < settings.floor_for("hybrid")
    assert kb.search("sourdough bread hydration", mode="keyword").weak
