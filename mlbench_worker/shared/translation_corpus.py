"""A generated English-to-German-shaped parallel corpus with a known structure, for task 4
when WMT17 cannot be had.

WMT17 cannot be downloaded on every machine a run or a test lands on, and nothing that
looks like WMT may be shown when it was not WMT: this corpus is recorded as "synthetic"
everywhere. It is built so that a small Transformer learns it on a CPU within minutes and
so that learning it takes more than a word-for-word lookup, as translating does:

- a fixed lexicon (English word -> German word, every noun with a grammatical gender);
- agreement: the article and the adjective endings follow the noun's gender and case
  (subject nominative, object accusative: "the big dog" is "der große Hund" as a subject
  and "den großen Hund" as an object);
- reordering: a sentence opened by a time adverb puts the German verb second ("today the
  dog sees the cat" -> "heute sieht der Hund die Katze"); a clause after "because" puts it
  last ("weil der Hund die Katze sieht");
- sentences of MIN_WORDS to MAX_WORDS English words, capitalised, a comma before a
  subordinate or joined clause, a full stop at the end (detokenised plain text).

Deterministic from a seed (Python's `random.Random` seeded with a string, the same on every
platform), numpy-free and torch-free, so that the master regenerates the references of a
run's test set from the run's seed (the evaluator) and the worker its training pairs. The
train and test splits are disjoint: a source sentence belongs to the test split exactly
when the first byte of its SHA-256 is below TEST_SHARE_BYTE, and each split draws only its
own sentences; the test split also never repeats a source. The first `count` test pairs
are the same for every `count` (a walk that is only ever cut shorter).
"""

from __future__ import annotations

import hashlib
import random

MIN_WORDS, MAX_WORDS = 3, 20
# The default generated test set's size (sentences).
TEST_SENTENCES = 500
# One source sentence in eight (first SHA-256 byte below 32) belongs to the test split.
TEST_SHARE_BYTE = 32
SPLITS = ("train", "test")

# English noun -> (German noun, gender: m, f or n).
NOUNS: dict[str, tuple[str, str]] = {
    "dog": ("Hund", "m"), "man": ("Mann", "m"), "teacher": ("Lehrer", "m"),
    "baker": ("Bäcker", "m"), "garden": ("Garten", "m"), "tree": ("Baum", "m"),
    "car": ("Wagen", "m"), "friend": ("Freund", "m"),
    "cat": ("Katze", "f"), "woman": ("Frau", "f"), "city": ("Stadt", "f"),
    "door": ("Tür", "f"), "flower": ("Blume", "f"), "street": ("Straße", "f"),
    "school": ("Schule", "f"), "letter": ("Nachricht", "f"),
    "child": ("Kind", "n"), "house": ("Haus", "n"), "book": ("Buch", "n"),
    "bread": ("Brot", "n"), "horse": ("Pferd", "n"), "window": ("Fenster", "n"),
    "village": ("Dorf", "n"), "picture": ("Bild", "n"),
}  # fmt: skip
# English adjective -> German stem (weak ending -e / -en added by case and gender).
ADJECTIVES: dict[str, str] = {
    "big": "groß", "small": "klein", "old": "alt", "young": "jung", "red": "rot",
    "green": "grün", "new": "neu", "quiet": "still", "beautiful": "schön",
    "fast": "schnell", "tired": "müd", "good": "gut",
}  # fmt: skip
# English transitive verb (third person singular) -> German.
TRANSITIVE: dict[str, str] = {
    "sees": "sieht", "finds": "findet", "likes": "mag", "buys": "kauft",
    "visits": "besucht", "paints": "malt", "opens": "öffnet", "loves": "liebt",
    "needs": "braucht", "follows": "verfolgt", "knows": "kennt", "builds": "baut",
}  # fmt: skip
# English intransitive verb -> German.
INTRANSITIVE: dict[str, str] = {
    "sleeps": "schläft", "laughs": "lacht", "waits": "wartet", "sings": "singt",
    "works": "arbeitet", "runs": "läuft",
}  # fmt: skip
# English time adverb -> German.
ADVERBS: dict[str, str] = {
    "today": "heute", "tomorrow": "morgen", "often": "oft", "now": "jetzt",
    "yesterday": "gestern", "sometimes": "manchmal",
}  # fmt: skip
CONJUNCTIONS = {"because": ("weil", True), "and": ("und", False)}  # -> (German, verb last)
_ARTICLE = {("nom", "m"): "der", ("nom", "f"): "die", ("nom", "n"): "das",
            ("acc", "m"): "den", ("acc", "f"): "die", ("acc", "n"): "das"}  # fmt: skip


def _phrase(rng: random.Random, case: str) -> tuple[list[str], list[str]]:
    """A noun phrase (article, 0-2 adjectives, noun) in English and German."""
    noun = rng.choice(list(NOUNS))
    german, gender = NOUNS[noun]
    adjectives = rng.sample(list(ADJECTIVES), rng.choice((0, 0, 1, 1, 2)))
    ending = "en" if (case, gender) == ("acc", "m") else "e"
    return (
        ["the", *adjectives, noun],
        [_ARTICLE[case, gender], *(ADJECTIVES[a] + ending for a in adjectives), german],
    )


def _clause(rng: random.Random, verb_last: bool) -> tuple[list[str], list[str]]:
    """One clause: subject, verb, object or none, and maybe a time adverb (fronted in
    a main clause, which puts the German verb second; at the end otherwise)."""
    en_subject, de_subject = _phrase(rng, "nom")
    if rng.random() < 0.7:
        verb = rng.choice(list(TRANSITIVE))
        de_verb = TRANSITIVE[verb]
        en_object, de_object = _phrase(rng, "acc")
    else:
        verb = rng.choice(list(INTRANSITIVE))
        de_verb, en_object, de_object = INTRANSITIVE[verb], [], []
    adverb = rng.choice(list(ADVERBS)) if rng.random() < 0.4 else None
    en = [*en_subject, verb, *en_object]
    if verb_last:
        de_adverb = [ADVERBS[adverb]] if adverb else []
        return en + ([adverb] if adverb else []), [*de_subject, *de_adverb, *de_object, de_verb]
    if adverb and rng.random() < 0.5:  # fronted: verb second in German
        return [adverb, *en], [ADVERBS[adverb], de_verb, *de_subject, *de_object]
    if adverb:
        return en + [adverb], [*de_subject, de_verb, ADVERBS[adverb], *de_object]
    return en, [*de_subject, de_verb, *de_object]


def _sentence(rng: random.Random) -> tuple[str, str]:
    """One pair of detokenised sentences (capitalised, commas, a full stop)."""
    while True:
        en, de = _clause(rng, verb_last=False)
        if rng.random() < 0.35:
            conjunction = rng.choice(list(CONJUNCTIONS))
            de_conjunction, verb_last = CONJUNCTIONS[conjunction]
            en_more, de_more = _clause(rng, verb_last)
            en = [*en[:-1], en[-1] + ",", conjunction, *en_more]
            de = [*de[:-1], de[-1] + ",", de_conjunction, *de_more]
        if MIN_WORDS <= len(en) <= MAX_WORDS:
            break
    return _finish(en), _finish(de)


def _finish(words: list[str]) -> str:
    text = " ".join(words) + "."
    return text[0].upper() + text[1:]


def in_test_split(source: str) -> bool:
    """Whether a source sentence belongs to the test split (the rule that keeps the splits
    disjoint)."""
    return hashlib.sha256(source.encode("utf-8")).digest()[0] < TEST_SHARE_BYTE


def generated_pairs(seed: int, split: str, count: int) -> list[tuple[str, str]]:
    """The first `count` (source, reference) pairs of `split` ("train" or "test") for
    `seed`: detokenised plain-text English-shaped sources and German-shaped references."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, not {split!r}")
    if count < 0:
        raise ValueError(f"count must not be negative, not {count}")
    rng = random.Random(f"mlbench-translation:{seed}:{split}")
    test = split == "test"
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    while len(out) < count:
        source, reference = _sentence(rng)
        if in_test_split(source) != test or (test and source in seen):
            continue
        if test:
            seen.add(source)
        out.append((source, reference))
    return out
