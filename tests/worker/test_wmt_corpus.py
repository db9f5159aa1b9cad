"""Task 4b's generated parallel corpus (shared/translation_corpus.py): deterministic from the
seed, train and test disjoint, the test set stable for any prefix, the grammar's agreement
and reordering as documented, and importable without torch or numpy (the master uses it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mlbench_worker.shared import translation_corpus as corpus


def test_the_same_seed_gives_the_same_pairs_and_another_seed_others():
    assert corpus.generated_pairs(7, "train", 50) == corpus.generated_pairs(7, "train", 50)
    assert corpus.generated_pairs(7, "test", 50) != corpus.generated_pairs(8, "test", 50)


def test_the_test_set_is_a_stable_prefix_without_repeats_and_disjoint_from_training():
    test = corpus.generated_pairs(3, "test", corpus.TEST_SENTENCES)
    assert corpus.generated_pairs(3, "test", 37) == test[:37]
    sources = [s for s, _ in test]
    assert len(set(sources)) == len(sources)
    train = {s for s, _ in corpus.generated_pairs(3, "train", 20_000)}
    assert not train & set(sources)
    assert all(corpus.in_test_split(s) for s in sources)


def test_sentences_are_plain_text_of_three_to_twenty_words():
    for source, reference in corpus.generated_pairs(1, "train", 2000):
        assert corpus.MIN_WORDS <= len(source.split()) <= corpus.MAX_WORDS
        assert source[0].isupper() and source.endswith(".") and reference.endswith(".")
        assert "\n" not in source + reference and "  " not in source + reference


def _translations(source_start: str, count: int = 20_000) -> list[tuple[str, str]]:
    return [p for p in corpus.generated_pairs(5, "train", count) if p[0].startswith(source_start)]


def test_a_masculine_object_takes_den_and_the_en_ending():
    found = [(s, r) for s, r in corpus.generated_pairs(5, "train", 5000)
             if s == "The cat sees the big dog."]  # fmt: skip
    for _, reference in found:
        assert reference == "Die Katze sieht den großen Hund."
    pairs = corpus.generated_pairs(5, "train", 3000)
    assert any(" den " in r for _, r in pairs) and any(r.startswith("Der ") for _, r in pairs)


def test_a_fronted_adverb_puts_the_german_verb_second_and_because_puts_it_last():
    fronted = _translations("Today the ")
    assert fronted
    for source, reference in fronted[:50]:
        words = source.rstrip(".").replace(",", "").split()
        verb = next(w for w in words if w in corpus.TRANSITIVE or w in corpus.INTRANSITIVE)
        german = corpus.TRANSITIVE.get(verb) or corpus.INTRANSITIVE[verb]
        assert reference.split()[:2] == ["Heute", german.rstrip(",")]
    because = [p for p in corpus.generated_pairs(5, "train", 5000) if ", because " in p[0]]
    assert because
    for _, reference in because[:50]:
        last = reference.rstrip(".").split()[-1]
        assert last in corpus.TRANSITIVE.values() or last in corpus.INTRANSITIVE.values()


@pytest.mark.parametrize(
    ("split", "count", "message"),
    [("valid", 5, "split must be one of train, test"), ("test", -1, "count must not be negative")],
)
def test_bad_arguments_are_named(split, count, message):
    with pytest.raises(ValueError, match=message):
        corpus.generated_pairs(1, split, count)


def test_the_master_can_import_it_without_torch_or_numpy():
    code = (
        "import sys; import mlbench_worker.shared.translation_corpus as c; "
        "c.generated_pairs(1, 'test', 3); "
        "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
