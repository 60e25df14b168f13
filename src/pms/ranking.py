"""Ranking: every knob in one place (``RankingSettings``) and fusion as pure functions.

Owns: name similarity, the note priors (stubs, copies), ``fuse`` (the candidate lists into
one order), ``rank`` and the feedback steps that complete vector scores. Nothing here
reads the index: retrieval.py hands in the lists and facts.

May import: config, markdown, notes, query.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence

from .config import Factory, Record
from .markdown import own_prose
from .notes import note_links
from .query import STOPWORDS, WORD_TOKEN, Hit


def name_trigrams(text: str) -> set[str]:
    """The trigrams of each word, padded as PostgreSQL's pg_trgm does ("  w", " wo", ..., "rd ")."""
    out: set[str] = set()
    for word in WORD_TOKEN.findall(text.lower()):
        padded = f"  {word} "
        out.update(padded[i : i + 3] for i in range(len(padded) - 2))
    return out


# A warm process (the app, MCP) meets the same note names search after search: their trigrams are kept.
@functools.lru_cache(maxsize=65536)
def _name_trigrams_held(name: str) -> frozenset[str]:
    return frozenset(name_trigrams(name))


def name_similarity(query: str | set[str], name: str, coverage_min: float = 0.6) -> float:
    """How well a query names a note, 0..1: the mean of the share of the query's
    trigrams found in the name (pg_trgm's word similarity, simplified) and of
    their Jaccard similarity (so "rust" prefers the note called "Rust" to "Rust
    ownership"). 0 when under ``coverage_min`` (RankingSettings.name_coverage_min)."""
    q = name_trigrams(query) if isinstance(query, str) else query
    n = _name_trigrams_held(name)
    if not q or not n:
        return 0.0
    shared = len(q & n)
    coverage = shared / len(q)
    return (coverage + shared / len(q | n)) / 2 if coverage >= coverage_min else 0.0


class RankingSettings(Record):
    """Every knob of ranking. Defaults are chosen on the whole dev suite (bench/suite.py:
    every set, mean and worst set); docs/decisions.md holds the figures behind each.

    Fusion: weighted RRF, keyword x2, a bonus for each list's #1, plus a small share of
    the convex score, which orders notes RRF places close together by score strength.
    """

    method: str = "rrf"  # or "convex"
    keyword_weight: float = 2.0
    vector_weight: float = 1.0
    name_weight: float = 1.0  # notes the query names (title, alias, file name; near misses too); 0: off
    k: int = 60  # rrf only: the rank offset
    top_bonus: float = 0.005  # rrf only: added for each list's #1
    # rrf only: plus score_share x (value / the list's best) from the keyword
    # (share score_keyword_share) and vector (the rest) lists; 0 turns it off.
    score_share: float = 0.01
    score_keyword_share: float = 0.6
    # A search ranks as if it asked for at least ``steady_k`` results (the depths below
    # count from it), then keeps the first k: asking for fewer cuts the same ranking
    # (-n 5 shows the first 5 of -n 30), so no depth, pool or window depends on a small k.
    # 30 is what the app asks for: the CLI's and MCP's first ten (their default) are the app's.
    steady_k: int = 30
    # Hits built per result (of the steady k): a copy is not counted among the k, and a
    # vault with old editions holds copies of most notes (the Rust book: 4 of 10 hits).
    pool_per_k: int = 3
    # How deep each list is read before fusing (hybrid: at least steady k x hybrid_depth_per_k;
    # 120 for 30 x 4 cost the Rust book's hybrid nDCG@10 0.986 -> 0.978).
    depth: int = 100
    hybrid_depth_per_k: int = 3
    # Keyword and vector modes read max(steady k x this, single_min_depth) passages: a note's
    # best passage per note needs a few passages per hit. There a note's focus (below)
    # counts its passages among the first ``single_focus_depth`` only: over a deeper list
    # long chapters gather more (the Rust book's keyword nDCG@10 0.974 over 80, 0.966 over 160).
    single_depth_per_k: int = 8
    single_min_depth: int = 50
    single_focus_depth: int = 80
    # The complete step (``complete_scores``): the first complete_depth notes of
    # the fusion re-scored on both signals, since a note below a list's top 100 had no vote
    # from it: complete_keyword_share x BM25 / best + the rest x cosine / best (+
    # complete_name_weight x name similarity), the query vector moved towards the passages
    # nearest it of the top ``feedback_notes`` notes (Rocchio, ``feedback_weight``). 0: off.
    complete_depth: int = 20
    complete_keyword_share: float = 0.5
    complete_name_weight: float = 0.0
    complete_cosine_floor: bool = False  # the head's cosines less its lowest (multilingual_cosine_floor)
    feedback_notes: int = 1
    feedback_weight: float = 0.5
    field_weights: tuple[float, float, float] = (3.0, 3.0, 1.0)  # bm25 columns: title, headings, body
    # Passages with every term rank first for queries of up to this many terms; longer
    # ones (questions, pasted claims) are ranked by BM25 alone.
    and_first_max_terms: int = 3
    # A note's focus on the query (Retrieval._focused): focus_weight x (its passages'
    # scores in the list, summed) / (its passage count ** focus_power), so a section about
    # the query beats a whole chapter holding the same passage.
    focus_weight: float = 0.5
    focus_power: float = 0.75
    # Keyword mode: the names list's weight against BM25's, so a note the query names beats BM25's #1.
    keyword_name_weight: float = 3.0
    # Suffix folding (Retrieval.with_fallbacks): a query word of an inflecting language (a
    # Cyrillic word; German, Spanish when note_language tells the query's) is also searched as
    # the prefix of its stem (folded_stem): "полумарафон" finds "полумарафону".
    fold_suffixes: bool = True
    # Typos (Retrieval.with_fallbacks; keyword search only: in hybrid the vector list finds a
    # misspelled word's meaning, and the fallback there cost the suite's mean): a query word of
    # ``typo_min_letters`` letters or more that no passage holds also stands for the vault's
    # words (the keyword index's terms) within one edit of its stem, two from a stem of
    # ``typo_two_edits_letters`` letters (a letter added, left out, changed or two swapped; the
    # first letter as typed), at most ``typo_alternatives`` of them, the closest and commonest
    # first. typo_min_letters 0: off.
    typo_min_letters: int = 5
    typo_two_edits_letters: int = 8
    typo_alternatives: int = 3
    # Names: a query of more words names no note; the trigram candidates are scored exactly.
    name_query_max_words: int = 6
    name_candidates: int = 40
    # A trigram more than this many notes' names hold is not looked up (Retrieval.names_stage):
    # ranking its names costs the vault (0.15 s for 100,000) and tells no name apart. The
    # dev suite's commonest word-inner trigram is in 3,633 names: none of its sets changes. 0: all.
    name_common_trigram: int = 5000
    # Retrieval._may_name_a_note runs when a name must share at least this many of the
    # query's trigrams (with fewer, most notes do), and scores at most name_precheck_max notes.
    name_precheck_min_shared: int = 3
    name_precheck_max: int = 100
    # A query names a note when this share of its trigrams is in the name (pg_trgm's
    # word_similarity_threshold) and name_similarity reaches name_match_min.
    name_coverage_min: float = 0.6
    name_match_min: float = 0.7
    # A note named this closely (one wrong letter, a plural) comes first, like an exact
    # title: typing a note's name is the commonest way to look for it.
    name_first_min: float = 0.85
    # A note whose title is what was typed, word for word, comes first (Retrieval._finish).
    exact_title_first: bool = True
    # Relevance (Hit.relevance, absolute, 0-1): the larger of the shown passage's cosine
    # similarity to the query and the share of the query's words it holds (each word
    # weighing its rarity in the vault, BM25's idf, with ``relevance_idf``; else alike),
    # that share times partial_match_weight unless it holds them all (common words match
    # anything); then made non-increasing down the list (non_increasing: the closest such
    # values), so a hit never looks more relevant than one ranked above it. Below the floor
    # (``floor_for``: keyword_relevance_floor when the search ran by keywords alone, whose
    # relevance is the word share only, else relevance_floor) the first hit's is "nothing
    # relevant" (SearchResult.weak). Each floor is the one with the fewest false alarms plus
    # misses on the suite's answerable and off-topic queries (bench/relevance.py).
    partial_match_weight: float = 0.5
    relevance_floor: float = 0.35
    keyword_relevance_floor: float = 0.25
    relevance_idf: bool = True
    # A static model's vector list (Model2Vec) is weaker than a transformer's: its vote and
    # its share of the complete scores are these instead (``for_vectors``).
    static_vector_weight: float = 0.5
    static_complete_keyword_share: float = 0.7
    # Across languages (docs/benchmarks.md, "Languages"; only with a multilingual model,
    # is_multilingual_model: an English model's vector list cannot read the query, and
    # the keyword list is then the better half). A query matching a note in another
    # language of the same script (note_language of each) by words alone shares false
    # friends with it: a Spanish caption's "de", "la", "con" pull unrelated English
    # pages up the keyword list. Such a note's keyword vote, in fusion and in the
    # complete step, is multiplied by cross_language_keyword (1: off). Across scripts
    # (a Russian query, an English note) the words in common are commands and names,
    # real evidence, so the vote stays; so it does when the keyword list found a note in
    # the query's language (a mixed vault), or when the query's or the note's language is
    # not told ("und"): a short English query is never taken for another language's.
    # mlcross with e5, Spanish queries: 0.474 -> 0.603 (vector list alone 0.674).
    cross_language_keyword: float = 0.25
    # With a multilingual model the complete step re-scores the head only when none of its
    # notes is in another language than the query (Retrieval._units_in_other_languages,
    # ``across``; a query's script tells what its words are too few to): BM25 cannot read a
    # note in another language, and re-scoring by it undid the vector list's finds across
    # languages (mlmixed with e5 0.677 -> 0.623 without this gate). Its cosines crowd together
    # (unrelated passages ~0.75): there the head's are taken less their lowest (min-max; cosine
    # / best barely told the head apart: SciFact 0.725 -> 0.702 without it) and weigh more
    # (keyword share 0.4: every set at or above 0.5's). With the three, e5's English sets gain
    # up to 0.015 (SciFact 0.715 -> 0.725, NFCorpus 0.344 -> 0.355, Dendron 0.628 -> 0.642)
    # and the multilingual sets move +-0.002 (docs/decisions.md); for MiniLM the floor cost
    # mlmixed 0.010. Its vector list, which reads every language, votes as much as the keyword
    # list (mlcross 0.586 -> 0.594, mlmixed 0.569 -> 0.575; x0.7 did no better on both).
    multilingual_complete_keyword_share: float = 0.4
    multilingual_cosine_floor: bool = True
    multilingual_keyword_weight: float = 1.0
    # In a mixed-language vault (a multilingual model; the keyword list found notes in the
    # query's language and the lists hold notes in others) the keyword list cannot reach a
    # note in another language: its words differ, so missing from that list says nothing.
    # Such a note is ranked by meaning alone (rank, ``other``): its vector vote counts for
    # the keyword list too, times other_language_vote (0: off), when that is more than its
    # own keyword vote; and its place in the vector list is its nearness to the query moved
    # towards the fusion's #1 (Rocchio, weight other_language_feedback; 0: off): that note
    # is the one both lists agree on, and its translations lie near it. The #1 stays first.
    # A query too short to tell its language (note_language "und") is taken to be in the
    # language of most of the keyword list's first query_language_from_keyword notes.
    # mlmixed with e5 (docs/benchmarks.md, "Languages"): 0.575 -> 0.677, every non-English
    # language at least +0.10 over keyword (de +0.107 the least), English 0.727 -> 0.717;
    # mlcross (English notes only) unchanged.
    other_language_vote: float = 1.0
    other_language_feedback: float = 1.0
    query_language_from_keyword: int = 5
    # A note without a vector in hybrid search (embedding under way, a failed batch, a note
    # added since; ``vote_without_vectors``) is ranked by what it has: the vector list's vote
    # it could not get is its best other list's, x this (0: off, the vote missing).
    unembedded_vote: float = 1.0

    # The note-level prior (``order_by_note_prior``, ``note_kind``): a note with under
    # ``name_body_words`` words is empty (a title alone); one that shows nothing of its own
    # but links to notes and headings is a page of links (an index, a table of contents);
    # one with under ``stub_words`` words of its own prose (outside quotes, code, headings
    # and links) that links to notes is a pointer (an old edition's "no longer distributed"
    # page, a "see [[X]]" note) when that prose never names its subject (a word of its
    # title) and it has under ``pointer_words`` words, and a redirect when it links to its
    # own file name elsewhere or to a note whose name carries its title (under
    # ``redirect_words`` words). A short note with its own sentences is a note. An empty
    # note's and a page of links' place is divided by ``stub_weight``, a pointer's by
    # ``pointer_weight``; a page of links and a pointer never stay above a hit they link to;
    # a redirect, and a pointer whose target carries its name, go below every note. The
    # exact-name rules pass empty notes, pointers and redirects by, and the names list
    # leaves pointers out unless ``pointer_names``. With ``pointer_namesakes`` a note is a
    # pointer only when another note of the index shares its title or its file name
    # (``schema.namesake_keys``; Retrieval.note_kinds) or it has no words of its own but a title and a
    # link (``has_words_of_its_own``: "See [[X]]"): an old edition's page or a moved note stands
    # in for its namesake, while a short note whose sentences are links to its parent topic
    # (Dendron's "Complete Task") is the only note of its name, the answer to it.
    # ``pointer_below_notes``: a pointer linked to a hit of the list goes below every note.
    stub_words: int = 70
    pointer_words: int = 150
    redirect_words: int = 300
    stub_weight: float = 0.5
    pointer_weight: float = 0.5
    pointer_names: bool = False
    pointer_namesakes: bool = True
    pointer_below_notes: bool = True
    name_body_words: int = 3
    # An alias names its note only when the query holds this share of the
    # alias's trigrams too ("keys" does not name the note aliased "neovim keys").
    alias_coverage: float = 0.8
    # Copies by content (``order_copies``): a note that holds at least
    # ``copy_containment`` of another hit's paragraph prints (paragraph_prints; that
    # hit has ``copy_min_paragraphs`` or more and is no stub) copies it: a print
    # edition's chapter holds each of its sections, a "book.md" export its chapter
    # notes. The held note takes the first of the two places and the holder
    # follows it as its copy, among the first ``copy_depth`` hits (or steady k). The Rust
    # book's print chapters hold 0.67-1.0 of each section of theirs; redirect stubs
    # share 0.5 of their boilerplate with one another.
    copy_containment: float = 0.6
    copy_min_paragraphs: int = 2
    copy_depth: int = 20

    def for_vectors(self, static: bool, multilingual: bool = False) -> RankingSettings:
        """These settings for a vector list from a static model (``static``) or a transformer,
        and from a multilingual model (``multilingual``)."""
        s = self.replace(keyword_weight=self.multilingual_keyword_weight, complete_keyword_share=self.multilingual_complete_keyword_share,
                         complete_cosine_floor=self.multilingual_cosine_floor) if multilingual else self
        return s.replace(vector_weight=self.static_vector_weight,
                         complete_keyword_share=self.static_complete_keyword_share) if static else s

    def floor_for(self, mode: str) -> float:
        """The relevance below which a search's best hit is "nothing relevant", for the mode it ran in."""
        return self.keyword_relevance_floor if mode == "keyword" else self.relevance_floor

    def weights(self) -> dict[str, float]:
        return {"keyword": self.keyword_weight, "vector": self.vector_weight, "name": self.name_weight}

    def describe(self, weights: dict[str, float]) -> str:
        """What fusion did, for --explain: method, k and each list's weight."""
        parts = " + ".join(f"{name} x{w:g}" for name, w in weights.items())
        if self.method == "convex":
            return f"convex (scores / each list's best): {parts}"
        shares = self.score_shares()
        scored = " + ".join(f"{name} x{shares[name]:g}" for name in weights if shares.get(name))
        return (f"{self.method} k={self.k}: {parts}" + (f", +{self.top_bonus:g} for a list's #1" if self.top_bonus else "")
                + (f", +{self.score_share:g} x (score / list's best): {scored}" if self.score_share and scored else ""))

    def describe_complete(self, depth: int) -> str:
        """What complete scoring did to the first ``depth`` notes, for --explain."""
        top = "the top note" if self.feedback_notes == 1 else f"the top {self.feedback_notes} notes"
        moved = (f" moved towards the passages nearest it of {top} (x{self.feedback_weight:g})"
                 if self.feedback_notes and self.feedback_weight else "")
        names = f" + {self.complete_name_weight:g} x name similarity" if self.complete_name_weight else ""
        return (f"then the top {depth} notes re-scored from all their passages: {self.complete_keyword_share:g} x BM25 / best + "
                f"{1 - self.complete_keyword_share:g} x {'(cosine - lowest) / (best - lowest)' if self.complete_cosine_floor else 'cosine / best'}, "
                f"to the query{moved}{names}")

    def score_shares(self) -> dict[str, float]:
        """rrf only: each list's share of the ``score_share`` added to a unit."""
        return {"keyword": self.score_keyword_share, "vector": 1.0 - self.score_keyword_share}


def note_kind(title: str, path: str, words: int, links_out: int, body: str | None, settings: RankingSettings,
              targets: set[str] | None = None) -> str:
    """What a note is to the note prior (RankingSettings.stub_words): "empty", "links" (a page
    of links), "redirect" (a pointer to a note of its own name: a link to its file name
    elsewhere, or to a note whose name carries its title), "pointer" or "note". ``words`` -1:
    not read by this version yet, a note; ``body`` (its text) is read only for a note that links
    elsewhere and is short or has little prose of its own (``Retrieval.note_kinds``); ``targets``: the file names it links to, lower
    case without extension (the index's links: a passage's text leaves link definitions out),
    else read from ``body``. Pure."""
    if 0 <= words < settings.name_body_words:
        return "empty"
    if words < 0 or not links_out or body is None:
        return "note"
    prose, held, links = own_prose(body)
    if not links:  # embeds and web addresses only: the page shows the notes it embeds
        return "note"
    own = WORD_TOKEN.findall(prose.lower())
    if len(own) < settings.name_body_words and held < settings.name_body_words and links > 1:
        return "links"
    if len(own) >= settings.stub_words or words >= settings.redirect_words:
        return "note"
    stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0].lower()
    if targets is None:
        targets = {link.key.rsplit("/", 1)[-1] for link in note_links(body)}
    if stem in targets:
        return "redirect"
    if names_subject(title, own):
        return "note"
    if any(carries_name(title, "", target) for target in targets):
        return "redirect"
    return "pointer" if words < settings.pointer_words else "note"


def has_words_of_its_own(body: str, settings: RankingSettings) -> bool:
    """Whether a note's own prose (outside quotes, code, headings and links) has
    ``name_body_words`` words or more: a pointer without a namesake is then a note
    (RankingSettings.pointer_namesakes), while "See [[X]]", a title and a link, stays one. Pure."""
    return len(WORD_TOKEN.findall(own_prose(body)[0])) >= settings.name_body_words


def _subject_words(text: str) -> set[str]:
    return {w for w in WORD_TOKEN.findall(text.lower()) if len(w) > 2 and w not in STOPWORDS and not w.isdigit()}


def _same_word(a: str, b: str) -> bool:
    """The same word, or words of one stem: the first five letters alike and at most three more
    letters after them in the shorter (lifetime, lifetimes; extend, extension; not internet, interface)."""
    return a == b or (min(len(a), len(b)) >= 5 and a[:5] == b[:5] and min(len(a), len(b)) - len(_common_prefix(a, b)) <= 1)


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


SUBJECT_SHARE_NUM, SUBJECT_SHARE_DEN = 0, 1


def names_subject(title: str, words: Sequence[str]) -> bool:
    """Whether ``words`` (a note's own prose) name the note's subject: more than half of its
    title's words ("Unsafe Rust" is not named by an old edition's "Rust's documentation"; a
    title of stop words alone names nothing, so any prose does). Pure."""
    subject = _subject_words(title)
    held = set(words)
    return not subject or sum(any(_same_word(s, w) for w in held) for s in subject) * SUBJECT_SHARE_DEN > len(subject) * SUBJECT_SHARE_NUM


def carries_name(title: str, target_title: str, target_path: str) -> bool:
    """Whether a note (its title and path) carries the name ``title``: every one of its
    words is in the note's title or file name (a pointer's target). Pure."""
    wanted = _subject_words(title)
    held = _subject_words(target_title) | _subject_words(target_path.rsplit("/", 1)[-1].rsplit(".", 1)[0].replace("-", " ").replace("_", " "))
    return bool(wanted) and all(any(_same_word(w, h) for h in held) for w in wanted)


def edit_distance(a: str, b: str, limit: int) -> int:
    """Edits (a character added, left out or changed, two neighbours swapped: the optimal
    string alignment distance) from ``a`` to ``b``, or ``limit`` + 1 when more than ``limit``.
    Pure. Bit-parallel (Hyyro 2003, "A bit-vector algorithm for computing Levenshtein and
    Damerau edit distances"): one column of the table a character of ``b``, as a few integer
    operations, six times faster than the table cell by cell, which a typo's look through
    the vault's words (words_within) pays once per word."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    if not a:
        return len(b)
    matches: dict[str, int] = {}  # character -> the positions in a that hold it, as bits
    for i, char in enumerate(a):
        matches[char] = matches.get(char, 0) | 1 << i
    full, last = (1 << len(a)) - 1, 1 << (len(a) - 1)
    up, down, diagonal, previous, distance = full, 0, 0, 0, len(a)  # vertical +1 / -1 deltas; distance: a against b so far
    for char in b:
        match = matches.get(char, 0)
        swapped = (~diagonal & match) << 1 & previous
        diagonal = ((match & up) + up ^ up | match | down | swapped) & full
        right, left = down | ~(diagonal | up) & full, diagonal & up
        distance += 1 if right & last else -1 if left & last else 0
        right, left = (right << 1 | 1) & full, left << 1 & full
        up, down, previous = left | ~(diagonal | right) & full, diagonal & right, match
    return distance if distance <= limit else limit + 1


def words_within(word: str, candidates: Iterable[tuple[str, int]], limit: int) -> list[tuple[int, int, str]]:
    """(edits, -count, candidate) of the (candidate, count) pairs within ``limit`` edits of
    ``word`` (edit_distance), closest and commonest first. Pure. Each edit adds or takes
    away at most one distinct letter, so a candidate whose letters differ from the word's by
    more is passed over without the distance (a set difference: 0.5 us a word against 6)."""
    letters = set(word)
    near = []
    for candidate, count in candidates:
        held = set(candidate)
        if len(letters - held) <= limit and len(held - letters) <= limit:
            distance = edit_distance(word, candidate, limit)
            if distance <= limit:
                near.append((distance, -count, candidate))
    return sorted(near)


def non_increasing(values: Sequence[float]) -> list[float]:
    """The non-increasing sequence closest to ``values`` (least squares: isotonic regression by
    pooling adjacent violators, each pool its mean). Pure."""
    pools: list[list[float]] = []  # [sum, count]
    for value in values:
        pools.append([value, 1])
        while len(pools) > 1 and pools[-2][0] / pools[-2][1] < pools[-1][0] / pools[-1][1]:
            total, count = pools.pop()
            pools[-1][0] += total
            pools[-1][1] += count
    return [total / count for total, count in pools for _ in range(int(count))]


def copy_key(title: str, path: str) -> tuple[str, str]:
    """What two copies of a note share: their title's words and their file name."""
    return " ".join(WORD_TOKEN.findall((title or "").lower())), path.rsplit("/", 1)[-1].lower()


def mark_copies(hits: list) -> list:
    """Set each hit's ``copy_of`` to the first hit above it with the same title
    words and file name (the same page in several editions or folders, a note
    copied elsewhere): front ends show one row for them. A pure function."""
    first: dict[tuple, Hit] = {}
    for hit in hits:
        original = first.setdefault(copy_key(hit.title, hit.path), hit)
        # (a copy of a copy, by order_copies, is grouped with the same original; another passage of the same note is none)
        if original is not hit and (original.collection, original.path) != (hit.collection, hit.path):
            hit.copy_of = original.copy_of or original.ref
    return hits


def first_results(hits: list, k: int) -> list:
    """The first ``k`` hits that copy no hit of the list (``copy_of``), with the hits that
    copy them where they stand: a copy is shown under its original, not counted among the
    k results. A copy whose original is not in the list counts as a result. A pure function."""
    present = {h.ref for h in hits}
    originals = [h for h in hits if not h.copy_of or h.copy_of not in present][:k]
    chosen = {id(h) for h in originals}
    kept = {h.ref for h in originals}
    return [(hit.replace(copy_of="") if hit.copy_of else hit) if id(hit) in chosen else hit
            for hit in hits if id(hit) in chosen or (hit.copy_of and hit.copy_of in kept)]


def holds_most_of(holder: frozenset[int], held: frozenset[int], settings: RankingSettings) -> bool:
    """Whether a note with the paragraph prints ``holder`` holds the text of one with ``held``
    (RankingSettings.copy_containment, copy_min_paragraphs). A pure function."""
    return (len(held) >= settings.copy_min_paragraphs and len(holder) >= len(held)
            and len(holder & held) >= settings.copy_containment * len(held))


def order_copies(hits: list, prints: Mapping[str, frozenset[int]], settings: RankingSettings) -> list:
    """``hits`` (best first) with each note that holds another hit's text (a print
    edition's chapter, a "book.md" export of chapter notes: ``holds_most_of``)
    right after the best hit it holds, as its copy (``copy_of``): the focused
    note takes the holder's place if it was below it. Two notes that hold each
    other (the same text twice) keep their order. ``prints``: docid -> paragraph
    prints (the caller reads the first RankingSettings.copy_depth hits'). Stubs are
    left to the note prior. A pure function."""
    window = [(i, h) for i, h in enumerate(hits) if not h.stub and len(prints.get(h.docid, ())) >= settings.copy_min_paragraphs]
    # holds_most_of for the window's n x n pairs, its parts read once a note (every note here has
    # copy_min_paragraphs prints): a note holds no longer one, and the same text twice (the same
    # size) is the lower one's copy; those tests first, the intersection last.
    sets = [prints[h.docid] for _, h in window]
    sizes = [len(p) for p in sets]
    needed = [settings.copy_containment * size for size in sizes]
    held_by: dict[int, Hit] = {}  # id(holder) -> the best hit it holds
    for a, (holder_at, holder) in enumerate(window):
        mine, size = sets[a], sizes[a]
        for b, (held_at, held) in enumerate(window):
            if sizes[b] > size or b == a or (sizes[b] == size and held_at > holder_at) \
                    or held.docid == holder.docid or len(mine & sets[b]) < needed[b]:
                continue
            held_by[id(holder)] = held
            break
    if not held_by:
        return hits
    out: list = []
    placed: set[int] = set()
    for hit in hits:
        if id(hit) in placed:
            continue
        held = held_by.get(id(hit))
        if held is not None:
            if id(held) not in placed:  # the held note was below: it moves up to this place
                out.append(held)
                placed.add(id(held))
            hit.copy_of = held.copy_of or held.ref
        out.append(hit)
        placed.add(id(hit))
    return out


def order_by_note_prior(hits: list, kinds: Mapping[str, str], links: Mapping[str, set[str]], settings: RankingSettings) -> list:
    """``hits`` (best first) reordered by the note prior (RankingSettings.stub_words): an empty
    note's and a page of links' place divided by ``settings.stub_weight``, a page of links after
    every hit it links to, and a pointer to its namesake (a note it links to carries its name:
    a redirect, an old edition's page) below every note. ``kinds``: docid -> note_kind (a note
    when missing); ``links``: docid -> the file names (lower case, no extension) it links to.
    A pure function."""
    def kind(hit) -> str:
        return kinds.get(hit.docid, "note")

    if all(kind(h) == "note" for h in hits):
        return hits
    # Each note's (collection, file name) once: a stub is compared with every hit.
    named = {id(h): (h.collection, h.path.rsplit("/", 1)[-1].rsplit(".", 1)[0].lower()) for h in hits if kind(h) == "note"}

    def linked(stub, hit) -> bool:
        name = named.get(id(hit))
        return name is not None and hit is not stub and name[0] == stub.collection and name[1] in links.get(stub.docid, ())
    # A pointer to a hit of this list adds nothing the hit does not show: below every note.
    redirects = {id(h) for h in hits if kind(h) == "redirect"
                 or (settings.pointer_below_notes and kind(h) == "pointer" and any(linked(h, t) for t in hits))}
    weights = {"empty": settings.stub_weight, "links": settings.stub_weight, "pointer": settings.pointer_weight}
    order = sorted(range(len(hits)), key=lambda i: ((i + 1) / max(weights.get(kind(hits[i]), 1.0), 1e-6), kind(hits[i]) != "note", i))
    out = [hits[i] for i in order if id(hits[i]) not in redirects] + [hits[i] for i in order if id(hits[i]) in redirects]
    for stub in [h for h in out if kind(h) in ("links", "pointer") and id(h) not in redirects]:
        targets = [j for j, h in enumerate(out) if linked(stub, h)]
        here = next(j for j, h in enumerate(out) if h is stub)  # by identity: Record equality compares every field
        if targets and targets[-1] > here:
            out.insert(targets[-1], out.pop(here))  # just after its last target (which moved up one)
    return out


class Fused(Record):
    """One unit (a note, or a passage) after fusion: its score, and per list its
    rank, its value there and what that list added to the score."""

    unit: object
    score: float
    ranks: dict[str, int]
    values: dict[str, float]
    parts: dict[str, float] = Factory(dict)


def fuse(rankings: Mapping[str, Sequence[tuple[object, float]]], settings: RankingSettings,
         weights: dict[str, float] | None = None, scaled: Mapping[str, Mapping[object, float]] | None = None) -> list[Fused]:
    """Fuse ranked lists (name -> (unit, value) best first, higher better; a unit listed
    twice counts at its first place) into one, best first. Pure. ``weights`` (default the
    settings'; a list without one weighs 1) scale each vote, ``scaled`` (list -> unit ->
    factor) some units' votes in a list further. ``rrf``: weight / (k + rank)
    + top_bonus for a #1 + score_share x the list's share x value / its best. ``convex``:
    weight x value / the list's best (TM2C2; a value above the one before it counts as
    that one, so order holds). Ties go to the unit ranked best by any list."""
    weights = settings.weights() if weights is None else weights
    shares = settings.score_shares() if settings.method == "rrf" and settings.score_share else {}
    fused: dict[object, Fused] = {}
    for name, ranking in rankings.items():
        weight = weights.get(name, 1.0)
        factors = (scaled or {}).get(name, {})
        top = ranking[0][1] if ranking else 0.0
        rank, floor = 0, top
        for unit, value in ranking:
            floor = min(value, floor)  # a list's order wins over its values (all-terms-first)
            entry = fused.get(unit)
            if entry is None:
                entry = fused[unit] = Fused(unit, 0.0, {}, {})
            elif name in entry.ranks:
                continue
            rank += 1
            if settings.method == "convex":
                part = weight * floor / top if top > 0 else 0.0
            else:
                part = weight / (settings.k + rank) + (settings.top_bonus if rank == 1 else 0.0)
                if shares.get(name) and top > 0:
                    part += settings.score_share * shares[name] * floor / top
            part *= factors.get(unit, 1.0)
            entry.ranks[name], entry.values[name], entry.parts[name] = rank, value, part
            entry.score += part
    return sorted(fused.values(), key=lambda e: (-e.score, min(e.ranks.values())))


class Evidence(Record):
    """What the complete step reads of the fusion's head notes: every passage's
    note and int8 vector, the query's vector, and the best BM25 of notes the
    keyword list missed (from FTS5)."""

    owner: dict[int, int]
    vectors: dict[int, bytes]
    query_vector: bytes
    bm25: dict[int, float]


def _passage_space(evidence: Evidence, ids: Sequence[int]):
    """(the int8 vectors of passages ``ids`` as unit rows, the query's unit vector): numpy."""
    import numpy as np

    vectors = np.frombuffer(b"".join(evidence.vectors[c] for c in ids), dtype=np.int8).reshape(len(ids), -1).astype(np.float32)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)
    q = np.frombuffer(evidence.query_vector, dtype=np.int8).astype(np.float32)
    return vectors, q / max(float(np.linalg.norm(q)), 1e-9)


def _rocchio(q, toward, weight: float):
    """The unit query moved towards the unit vector ``toward`` (Rocchio, ``weight``), a unit vector again."""
    import numpy as np

    moved = q + weight * toward
    return moved / max(float(np.linalg.norm(moved)), 1e-9)


def _nearest_passages(similarity, ids: Sequence[int], owner: Mapping[int, object]) -> dict[object, int]:
    """Note -> the row of its passage nearest the query (highest ``similarity``), nearest
    note first; ties keep ``ids``' order."""
    import numpy as np

    nearest: dict[object, int] = {}
    for i in np.argsort(-similarity, kind="stable").tolist():
        nearest.setdefault(owner[ids[i]], i)
    return nearest


def complete_scores(first: list[Fused], lists: Mapping[str, Sequence[tuple[object, float]]], evidence: Evidence,
                    settings: RankingSettings, scaled: Mapping[str, Mapping[object, float]] | None = None,
                    unembedded: frozenset | set = frozenset()) -> list[Fused]:
    """The notes of ``first`` (the head of a fusion) re-scored on both signals
    (RankingSettings.complete_depth), ``scaled`` as in ``fuse``, a note of ``unembedded`` by
    what it has (vote_without_vectors). Pure: numpy over ``evidence``. The ranks and values
    each entry shows stay those of the lists it came from."""
    docs = [e.unit for e in first]
    cosine: dict[object, float] = {}
    place = {doc: i for i, doc in enumerate(docs)}
    # Passages in the head's order, so that notes tied on cosine (copies) keep the fusion's order.
    ids = sorted((cid for cid in evidence.vectors if cid in evidence.owner), key=lambda c: (place.get(evidence.owner[c], len(docs)), c))
    if ids:
        vectors, q = _passage_space(evidence, ids)
        similarity = vectors @ q
        nearest = _nearest_passages(similarity, ids, evidence.owner)
        feedback = [nearest[doc] for doc in docs[: settings.feedback_notes] if doc in nearest] if settings.feedback_weight else []
        if feedback:  # the query moved towards the mean of those passages
            similarity = vectors @ _rocchio(q, vectors[feedback].mean(axis=0), settings.feedback_weight)
        values = similarity.tolist()  # nearest first: ties keep the head's order
        cosine = {doc: values[i] for doc, i in _nearest_passages(similarity, ids, evidence.owner).items()}
        if settings.complete_cosine_floor and len(cosine) > 1:  # min-max: the lowest scores 0
            low = min(cosine.values())
            cosine = {doc: v - low for doc, v in cosine.items()}
    wanted = set(docs)
    bm25 = {doc: value for doc, value in lists.get("keyword", ()) if doc in wanted}
    for doc, value in evidence.bm25.items():
        bm25[doc] = max(value, bm25.get(doc, 0.0))
    complete = {"keyword": sorted(((d, v) for d, v in bm25.items() if v > 0), key=lambda x: -x[1]),
                "vector": sorted(cosine.items(), key=lambda x: -x[1]),
                "name": [(d, v) for d, v in lists.get("name", ()) if d in wanted]}
    weights = {"keyword": settings.complete_keyword_share, "vector": 1.0 - settings.complete_keyword_share,
               "name": settings.complete_name_weight}
    before = {e.unit: e for e in first}
    rescored = fuse({n: r for n, r in complete.items() if r}, RankingSettings(method="convex"), weights, scaled)
    if unembedded and settings.unembedded_vote:
        rescored = vote_without_vectors(rescored, unembedded, weights, settings.unembedded_vote)
    return [Fused(e.unit, e.score, before[e.unit].ranks, before[e.unit].values, e.parts) for e in rescored if e.unit in before]


def vote_without_vectors(fused: list[Fused], units: frozenset | set, weights: Mapping[str, float], factor: float) -> list[Fused]:
    """``fused`` with each of ``units`` (notes without a vector: embedding under way, a failed
    batch, a note added since) scored as if the vector list placed it where its best other
    list does: that list's vote x the vector weight / its weight x ``factor`` stands for the
    vector vote it could not get (RankingSettings.unembedded_vote). Pure."""
    vector = weights.get("vector", 0.0)
    for e in fused:
        if e.unit in units and "vector" not in e.parts:
            stand_in = max((e.parts[name] * vector / weights[name] for name in ("keyword", "name")
                            if name in e.parts and weights.get(name)), default=0.0) * factor
            e.parts["vector"] = stand_in
            e.score += stand_in
    return sorted(fused, key=lambda e: (-e.score, min(e.ranks.values())))


def count_for_both(fused: list[Fused], units: frozenset | set, weights: Mapping[str, float], factor: float) -> list[Fused]:
    """``fused`` with each of ``units`` (notes the keyword list cannot reach: in another
    language than the query) scored as if the keyword list placed it as the vector list
    does: its vector vote x factor (x the keyword weight / the vector weight) stands for its
    keyword vote when larger (RankingSettings.other_language_vote). Pure."""
    ratio = factor * weights.get("keyword", 0.0) / max(weights.get("vector", 1.0), 1e-9)
    for e in fused:
        if e.unit in units and "vector" in e.parts:
            stand_in = e.parts["vector"] * ratio
            if stand_in > e.parts.get("keyword", 0.0):
                e.score += stand_in - e.parts.get("keyword", 0.0)
    return sorted(fused, key=lambda e: (-e.score, min(e.ranks.values())))


def feedback_ranking(vector: Sequence[tuple[object, float]], units: frozenset | set, evidence: Evidence, toward: object,
                     weight: float, depth: int) -> list[tuple[object, float]]:
    """The vector list ``vector`` (unit, cosine) with each of ``units`` moved to its place by
    nearness to the query moved towards ``toward``'s passage nearest it (Rocchio, ``weight``)
    among the notes of ``evidence`` (first ``depth``); the other notes keep theirs
    (RankingSettings.other_language_feedback). Pure: numpy over ``evidence``."""
    ids = [cid for cid in evidence.vectors if cid in evidence.owner]
    mine = [i for i, cid in enumerate(ids) if evidence.owner[cid] == toward]
    if not mine:
        return list(vector)
    vectors, q = _passage_space(evidence, ids)
    similarity = vectors @ q
    similarity = vectors @ _rocchio(q, vectors[max(mine, key=lambda i: float(similarity[i]))], weight)
    values = similarity.tolist()  # note -> its best cosine to the moved query, nearest first
    moved_order = [(doc, values[i]) for doc, i in _nearest_passages(similarity, ids, evidence.owner).items()][:depth]
    place = {unit: float(i) for i, (unit, _) in enumerate(vector)}
    place.update({unit: i - 0.5 for i, (unit, _) in enumerate(moved_order) if unit in units})
    value = dict(moved_order) | dict(vector)
    return sorted(((unit, value[unit]) for unit in place), key=lambda x: place[x[0]])


def rank(lists: Mapping[str, Sequence[tuple[object, float]]], settings: RankingSettings, k: int,
         evidence: Callable[..., Evidence] | None = None, stubs: frozenset | set = frozenset(),
         foreign: frozenset | set = frozenset(), other: frozenset | set = frozenset(),
         unembedded: frozenset | set = frozenset(), across: frozenset | set | None = frozenset()) -> tuple[list[Fused], str]:
    """The ranking stage, pure: the lists (unit, value) fused, the head re-scored on both
    signals when ``evidence`` (units, with BM25 or not -> Evidence) is given, then a note
    named almost exactly (name_first_min) first unless it is one of ``stubs``. The keyword
    votes of ``foreign`` units (in another language than the query) count
    cross_language_keyword times; ``other`` units (in another language than the query, in a
    vault that has notes in both) are ranked by meaning alone (other_language_vote,
    other_language_feedback). The head is re-scored only when ``across`` (units in another language
    than the query; None: the query's is not told) holds none of it. Returns the best k x pool_per_k (the exact-title rule and the
    note prior may still reorder them; notes below the complete step's head follow it in
    fusion order) and, for --explain, what was done."""
    weights = {n: w for n, w in settings.weights().items() if n in lists}
    explained = settings.describe(weights)
    scaled = {"keyword": dict.fromkeys(foreign, settings.cross_language_keyword)} if foreign else None
    if scaled:
        explained += f"; keyword votes x{settings.cross_language_keyword:g} for notes in another language than the query"
    best = fuse(lists, settings, weights, scaled)
    if unembedded and "vector" in weights and settings.unembedded_vote:
        best = vote_without_vectors(best, unembedded, weights, settings.unembedded_vote)
        explained += f"; {len(unembedded)} notes without vectors ranked by their other lists"
    if other and "vector" in weights and (settings.other_language_vote or settings.other_language_feedback):
        best = _by_meaning_alone(best, lists, weights, settings, other, evidence)
        explained += "; notes in another language than the query ranked by meaning alone"
    head = settings.complete_depth
    if evidence is not None and head and across is not None and not across.intersection(e.unit for e in best[:head]):
        # A fixed head, whatever k: asking for more results must not reorder the first ones.
        best = complete_scores(best[:head], lists, evidence([e.unit for e in best[:head]]), settings, scaled, unembedded) + best[head:]
        explained += "; " + settings.describe_complete(head)
    named = settings.name_first_min
    return sorted(best[: k * settings.pool_per_k], key=lambda e: -e.values.get("name", 0.0)
                  if e.values.get("name", 0.0) >= named and e.unit not in stubs else 0.0), explained


def _by_meaning_alone(best: list[Fused], lists: Mapping[str, Sequence[tuple[object, float]]], weights: dict[str, float],
                      settings: RankingSettings, other: frozenset | set, evidence: Callable[..., Evidence] | None) -> list[Fused]:
    """``rank``'s rule for ``other`` units (RankingSettings.other_language_vote and
    other_language_feedback): the fusion ``best`` with their vector votes counted for both
    lists, then fused again with their vector places by the query moved towards the #1,
    which stays first."""
    vote = settings.other_language_vote
    if vote:
        best = count_for_both(best, other, weights, vote)
    if not (settings.other_language_feedback and evidence is not None and best and lists.get("vector")):
        return best
    top = best[0].unit
    units = list(dict.fromkeys(unit for ranking in lists.values() for unit, _ in ranking))
    moved = feedback_ranking(lists["vector"], other, evidence(units, False), top, settings.other_language_feedback, settings.depth)
    again = fuse({**lists, "vector": moved}, settings, weights)
    if vote:
        again = count_for_both(again, other, weights, vote)
    return [e for e in again if e.unit == top][:1] + [e for e in again if e.unit != top]


def holds_phrase(words: list[str], tokens: tuple[str, ...]) -> bool:
    """Whether ``tokens`` come in this order, one after another, in ``words``."""
    n = len(tokens)
    return any(tuple(words[i : i + n]) == tokens for i in range(len(words) - n + 1))
