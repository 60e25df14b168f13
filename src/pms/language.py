"""Which language a note is written in, told by its script and stopwords (no model).

Owns: ``note_language`` (ISO 639-1 or ``und``), ``language_script``, ``written_in_script_of`` and the language names
that status and the multilingual advice print.

May import: config.
"""

from __future__ import annotations

import collections
import re

from .config import LazyPattern


# The language of a note, cheaply: its letters' Unicode script, then small stop-word
# profiles. Hand-written: a detection library would be a heavy import for a count.
LANGUAGE_SAMPLE_CHARS = 2000  # a note's first characters tell its language; more costs sync time
# Web addresses are no language's words: "github.com" links made a list of translations Portuguese ("com").
_WEB_ADDRESS = LazyPattern(r"(?:https?|ftp)://\S+|www\.\S+")
# (first code point, last, script): the scripts with one main language here; others by stop words.
_SCRIPT_RANGES = (
    (0x0370, 0x03FF, "el"), (0x0400, 0x052F, "Cyrillic"), (0x0590, 0x05FF, "he"), (0x0600, 0x06FF, "Arabic"),
    (0x0750, 0x077F, "Arabic"), (0x0900, 0x097F, "Devanagari"), (0x0980, 0x09FF, "bn"), (0x0B80, 0x0BFF, "ta"),
    (0x0C00, 0x0C7F, "te"), (0x0D00, 0x0D7F, "ml"), (0x0E00, 0x0E7F, "th"), (0x0E80, 0x0EFF, "lo"),
    (0x10A0, 0x10FF, "ka"), (0x1100, 0x11FF, "ko"), (0x3040, 0x30FF, "Kana"), (0x3400, 0x4DBF, "Han"),
    (0x4E00, 0x9FFF, "Han"), (0xAC00, 0xD7AF, "ko"), (0xF900, 0xFAFF, "Han"),
)
_SCRIPT_STARTS = [r[0] for r in _SCRIPT_RANGES]
# Frequent short words, each distinctive enough of its language among these.
_STOPWORD_PROFILES = {
    "en": "the and of to is in that it for with you this are be on or as from by not can your what when how which if all",
    "de": "der die und das ist nicht ein eine mit von zu den für auf sie ich auch sich dem werden des im aus oder",
    "es": "el la los las que de y es en un una por para con se del no al como",
    "fr": "le la les des et est une un du que en pour dans pas sur ce qui avec sont au",
    "it": "il di che la è e per un una non con del della sono gli le si nel",
    "pt": "o a os as que de e do da em um uma para com não é no na se",
    "nl": "de het een en van is dat niet op te met voor zijn je die naar ook",
    "pl": "i w z na się nie to że do jest jak co ale po czy od",
    "tr": "ve bir bu da de için ile ne çok olarak gibi daha olan",
    "id": "yang dan di ini itu dengan untuk dari tidak ke ada akan pada",
    "sv": "och att det som en på är av för med till den inte har",
    "ru": "и в не на что я с он как это по но из у за от то же все",
    "uk": "і в не на що я з він як це по але із у за від та й є",
    "bg": "и в не на че да се с за от по е като са",
    "hi": "है के में की और का को से यह हैं एक पर",
    "ne": "छ र को मा लाई यो पनि गर्न हो",
    "ar": "في من على أن إلى عن هذا التي مع هو ما",
    "fa": "و در به از که این را با است برای می",
}
_STOPWORDS_BY_LANGUAGE = {lang: frozenset(words.split()) for lang, words in _STOPWORD_PROFILES.items()}
# Which profiles can tell a script's languages apart (the script decides the rest).
_SCRIPT_LANGUAGES = {"Latin": ("en", "de", "es", "fr", "it", "pt", "nl", "pl", "tr", "id", "sv"),
                     "Cyrillic": ("ru", "uk", "bg"), "Devanagari": ("hi", "ne"), "Arabic": ("ar", "fa")}
_SCRIPT_DEFAULT = {"Cyrillic": "ru", "Devanagari": "hi", "Arabic": "ar", "Han": "zh", "Kana": "ja"}
# Per script, each stop word that only one of its languages has, and that language (shared
# words, "la", "de", "en", would count for several and blur the vote): a note's words are looked up once.
_DISTINCT_STOPWORDS = {script: {word: lang for lang in langs for word in _STOPWORDS_BY_LANGUAGE[lang] - frozenset().union(
    *(_STOPWORDS_BY_LANGUAGE[other] for other in langs if other != lang))}
    for script, langs in _SCRIPT_LANGUAGES.items()}
# Per script, how many of its languages' profiles hold each stop word: a short text (a query)
# with no distinct word votes with shared ones, each worth 1 / that many ("para un que": Spanish).
_STOPWORD_SHARES = {script: collections.Counter(w for lang in langs for w in _STOPWORDS_BY_LANGUAGE[lang])
                    for script, langs in _SCRIPT_LANGUAGES.items()}


# A word with its combining marks: \w alone splits Hindi or Arabic words at each vowel sign.
_LANGUAGE_WORD = LazyPattern(r"[\w\u0300-\u036f\u064b-\u065f\u0900-\u0dff]+")


def _script_of(ch: str) -> str | None:
    import bisect

    code = ord(ch)
    if code < 0x250:
        return "Latin" if ch.isalpha() else None
    i = bisect.bisect_right(_SCRIPT_STARTS, code) - 1
    if i >= 0 and code <= _SCRIPT_RANGES[i][1]:
        return _SCRIPT_RANGES[i][2]
    return None


_NOT_ASCII_LETTERS = bytes(c for c in range(128) if not (65 <= c <= 90 or 97 <= c <= 122))


def note_language(text: str) -> str:
    """The main language of ``text`` as an ISO 639-1 code ("en", "ru", "zh", ...), or
    "und" when too little text tells. Code blocks count too: a note of mostly
    code with English comments is an English note for search's purposes."""
    sample = _WEB_ADDRESS.sub(" ", text[:LANGUAGE_SAMPLE_CHARS])
    scripts = _script_letters(sample)
    letters = sum(scripts.values())
    if letters < 12:
        return "und"
    script = _main_script(scripts)
    if script in ("Han", "Kana"):  # Japanese mixes kana into Han; Chinese has none
        return "ja" if scripts["Kana"] >= 0.1 * (scripts["Han"] + scripts["Kana"]) else "zh"
    candidates = _SCRIPT_LANGUAGES.get(script)
    if not candidates:
        return _SCRIPT_DEFAULT.get(script, script)
    words = collections.Counter(_LANGUAGE_WORD.findall(sample.lower()))
    if script == "Latin":  # a single Latin letter tells no language apart
        for letter in [w for w in words if len(w) == 1]:
            del words[letter]
    hits = dict.fromkeys(candidates, 0)
    distinct = _DISTINCT_STOPWORDS[script]
    for word, n in words.items():
        lang = distinct.get(word)
        if lang is not None:
            hits[lang] += n
    best = max(hits, key=lambda name: hits[name])
    short = sum(words.values()) < 20
    if hits[best] >= 2 or (hits[best] and short):
        return best
    if short and not hits[best]:
        shares = _STOPWORD_SHARES[script]
        votes = sorted(((sum(n / shares[w] for w, n in words.items() if w in _STOPWORDS_BY_LANGUAGE[lang]), lang)
                        for lang in candidates), reverse=True)
        if votes[0][0] >= 1.0 and votes[0][0] > votes[1][0]:
            return votes[0][1]
    return _SCRIPT_DEFAULT.get(script, "und")


def _script_letters(text: str) -> collections.Counter:
    """Script -> how many of ``text``'s letters are in it, a Han, Kana or Hangul character
    counting as three (about a word, as three Latin letters)."""
    # ASCII letters counted in C (bytes.translate deletes the rest), only the other characters
    # looked up one by one: sync reads every note (a regex's list of letters took 78 µs a note).
    scripts = collections.Counter() if text.isascii() else collections.Counter(
        s for s in map(_script_of, re.findall(r"[^\x00-\x7f]", text)) if s)
    scripts["Latin"] += len(text.encode("ascii", "ignore").translate(None, _NOT_ASCII_LETTERS))
    for script in ("Han", "Kana", "ko"):
        scripts[script] *= 3
    return scripts


def _main_script(scripts: collections.Counter) -> str:
    """The script of most of ``scripts``' letters (_script_letters): commands, code and names
    are Latin in every language's notes, so another script with a fair share of the letters wins."""
    others = [(n, s) for s, n in scripts.items() if s != "Latin"]
    return max(others)[1] if others and max(others)[0] >= 0.25 * sum(scripts.values()) else "Latin"


def written_in_script_of(text: str, language: str) -> bool:
    """Whether ``text`` (a query too short for note_language, even) is mostly written in the
    script ``language`` is: Cyrillic letters are no English. Han reads as Chinese and Japanese
    alike; without letters, True."""
    scripts = _script_letters(text)
    if not sum(scripts.values()):
        return True
    script = _main_script(scripts)
    return language in ("zh", "ja") if script in ("Han", "Kana") else language_script(language) == script


def language_script(language: str) -> str:
    """The script a language (note_language's code) is written in, or the code itself for
    a script of one language here (zh, ja, ko, el...)."""
    return next((script for script, languages in _SCRIPT_LANGUAGES.items() if language in languages), language)


LANGUAGE_NAMES = {"en": "English", "de": "German", "es": "Spanish", "fr": "French", "it": "Italian", "pt": "Portuguese",
                  "nl": "Dutch", "pl": "Polish", "tr": "Turkish", "id": "Indonesian", "sv": "Swedish", "ru": "Russian",
                  "uk": "Ukrainian", "bg": "Bulgarian", "hi": "Hindi", "ne": "Nepali", "ar": "Arabic", "fa": "Persian",
                  "zh": "Chinese", "ja": "Japanese", "ko": "Korean", "el": "Greek", "he": "Hebrew", "bn": "Bengali",
                  "ta": "Tamil", "te": "Telugu", "ml": "Malayalam", "th": "Thai", "lo": "Lao", "ka": "Georgian",
                  "und": "undetermined"}


# Suffix folding for languages that inflect (a keyword fallback): a query word is also
# searched as the prefix of its stem, so "полумарафон" finds "полумарафону" and
# "Häuser" finds "Haus". FTS5's porter tokenizer stems English only; a stemmed copy of
# every passage would be a schema change, and a prefix needs none. Light stemmers
# written by hand (the core is stdlib-only; Snowball's full rules are more than a prefix
# match needs): the inflectional endings of Russian (any Cyrillic word), German and Spanish.
_RU_VOWELS = "аеиоуыэюя"
_RU_ENDINGS = sorted(set("""
    ее ие ые ое ими ыми ей ий ый ой ем им ым ом его ого ему ому их ых ую юю ая яя ою ею
    ившись ывшись ивши ывши ив ыв ующ ивш ывш
    ила ыла ена ейте уйте ите или ыли ей уй ил ыл им ым ен ило ыло ено ят ует уют ит ыт ены ить ыть ишь ую ю
    а ев ов ие ье е иями ями ами еи ии и ией ей ой ий й иям ям ием ем ам ом о у ах иях ях ы ь ию ью ю ия ья я
    ейш ейше ость ости остью
""".split()) | {"+" + e for e in "вшись вши в ющ щ вш ем нн ла на ете йте ли й л н ло но ет ют ны ть ешь нно".split()},
                     key=lambda e: len(e.lstrip("+")), reverse=True)  # "+": only after а or я (Snowball's group 1)
_DE_ENDINGS = ("ern", "em", "er", "en", "es", "e", "est", "st")
_DE_S_AFTER = "bdfghklmnrt"  # a final s is an ending only after these (Snowball)
_ES_ENDINGS = sorted(set("""
    amientos imientos amiento imiento aciones uciones acion ucion mente ando iendo ados idos adas idas ado ido ada ida
    ar er ir as es os a e o s
""".split()), key=len, reverse=True)
FOLDED_STEM_MIN = 4  # a shorter stem, as a prefix, would find unrelated words
_LATIN_FOLDS = str.maketrans("äöüáéíóúñàèìòùâêîôûç", "aouaeiounaeiouaeiouc")


def folded_stem(word: str, language: str) -> str | None:
    """What to search as a prefix for ``word`` (lower case) in an inflecting language: its
    stem, or the word itself when no ending is cut ("файл" finds "файлы"). Russian for a
    Cyrillic word, German or Spanish when ``language`` (the query's, note_language) says so;
    None for other words and for stems under FOLDED_STEM_MIN letters. Pure."""
    if len(word) < FOLDED_STEM_MIN:
        return None
    if any("\u0400" <= c <= "\u04ff" for c in word):
        stem = _russian_stem(word.replace("ё", "е"))
    elif language == "de":
        folded = word.translate(_LATIN_FOLDS).replace("ß", "ss")
        stem = folded[:-1] if folded.endswith("s") and folded[-2:-1] in tuple(_DE_S_AFTER) else _cut(folded, _DE_ENDINGS)
    elif language == "es":
        stem = _cut(word.translate(_LATIN_FOLDS), _ES_ENDINGS)
    else:
        return None
    return stem if len(stem) >= FOLDED_STEM_MIN else None


def _cut(word: str, endings) -> str:
    """``word`` without its longest ending of ``endings`` that leaves FOLDED_STEM_MIN letters."""
    for ending in endings:
        if word.endswith(ending) and len(word) - len(ending) >= FOLDED_STEM_MIN:
            return word[: -len(ending)]
    return word


def _russian_stem(word: str) -> str:
    """Snowball's Russian region rule, lightly: endings are cut only after the first vowel."""
    first = next((i for i, c in enumerate(word) if c in _RU_VOWELS), None)
    if first is None:
        return word
    head, region = word[: first + 1], word[first + 1 :]
    for endings in (("ся", "сь"), _RU_ENDINGS):  # a reflexive ending, then an inflectional one
        for ending in endings:
            bare = ending.lstrip("+")
            if (region.endswith(bare) and len(head) + len(region) - len(bare) >= FOLDED_STEM_MIN
                    and (bare == ending or (head + region)[-len(bare) - 1 : -len(bare)] in ("а", "я"))):
                region = region[: -len(bare)]
                break
    return head + region
