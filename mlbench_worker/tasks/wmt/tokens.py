"""Task 4b's sub-words: one SentencePiece model shared by English and German, and the
encoded training shards cached under the data directory.

SentencePiece (Kudo and Richardson 2018), BPE, trained on both sides of the training text
together, so one vocabulary serves the encoder and the decoder and the three embeddings
tie (task.py). Ids: 0 padding, 1 unknown, 2 beginning, 3 end of sentence. Hypotheses are
handed to the evaluator as the model's pieces ("▁" marks a word's start), which it
detokenises itself (shared/evaluation/text_predictions.py).

The real corpus: rank 0 trains the model on at most TRAIN_SENTENCES sentences (a sample
spread over the corpus, SentencePiece's own `input_sentence_size`) once and keeps it as
`<data dir>/wmt17/cache/spm-<key>.model`, the key a digest of the training files' names and
sizes, the pairs used and the vocabulary, so another corpus or size never meets a stale
model; every rank then encodes its own shard of pairs once and keeps it as
`shard-<key>-<rank>of<world>.npz` beside it. The generated corpus: rank 0 trains the model
in memory and the ranks receive it (nothing generated is written to disk).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import sentencepiece as spm

PAD, UNK, BOS, EOS = 0, 1, 2, 3
REAL_VOCAB = 37_000  # the shared vocabulary of the base model (Vaswani et al.: about 37,000)
SYNTHETIC_VOCAB = 500  # the generated corpus has some 300 words a side, and punctuation
TRAIN_SENTENCES = 2_000_000
CACHE = "cache"


def train_model(sentences: list[str], vocab: int) -> bytes:
    """A BPE model of `vocab` pieces (fewer when the text has fewer) trained on `sentences`;
    deterministic for the same sentences (one thread)."""
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=out, vocab_size=vocab,
        model_type="bpe", pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS,
        character_coverage=1.0, hard_vocab_limit=False, num_threads=1, minloglevel=2,
        input_sentence_size=TRAIN_SENTENCES, shuffle_input_sentence=True,
    )  # fmt: skip
    return out.getvalue()


def processor(model: bytes) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_proto=model)


def encode_pairs(sp: spm.SentencePieceProcessor, pairs: list[tuple[str, str]]) -> dict:
    """Both sides' ids, flat with offsets: source + EOS, and target + EOS (the decoder's
    input puts BOS in front at batching)."""
    out = {}
    for side, texts in (("src", [a for a, _ in pairs]), ("tgt", [b for _, b in pairs])):
        ids = sp.encode(texts)
        lengths = np.array([len(i) + 1 for i in ids], dtype=np.int64)
        flat = np.fromiter(
            (t for seq in ids for t in (*seq, EOS)), dtype=np.int32, count=int(lengths.sum())
        )
        out[side] = flat
        out[f"{side}_offsets"] = np.concatenate([[0], np.cumsum(lengths)])
    return out


def cache_key(files: list[str], pairs: int, vocab: int) -> str:
    """A digest of what the model and shards are made from (names, sizes, pairs, vocab)."""
    facts = [(f, os.path.getsize(f)) for f in files]
    text = json.dumps({"files": facts, "pairs": pairs, "vocab": vocab}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cached_model(folder: Path, key: str, make: Callable[[], bytes]) -> bytes:
    """The model kept under `folder` for `key`, made with `make()` and kept when missing
    (written beside and renamed: a crash never leaves half a model)."""
    path = folder / CACHE / f"spm-{key}.model"
    if path.is_file():
        return path.read_bytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    model = make()
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_bytes(model)
    os.replace(partial, path)
    return model


def cached_shard(folder: Path, key: str, rank: int, world: int, make: Callable[[], dict]) -> dict:
    """This rank's encoded shard kept under `folder`, made with `make()` when missing."""
    path = folder / CACHE / f"shard-{key}-{rank}of{world}.npz"
    if path.is_file():
        with np.load(path) as saved:
            return {name: saved[name] for name in saved.files}
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = make()
    partial = path.with_name(f".{path.stem}.{os.getpid()}.tmp.npz")
    np.savez(partial, **arrays)
    os.replace(partial, path)
    return arrays
