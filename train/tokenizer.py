"""tokenizer.py — the quality models' character tokenizer, and its llama2.c `tokenizer.bin`.

One token per character of tasks.ALPHABET after <unk> (0), <s> (1) and </s> (2). The file is a
llama2.c tokenizer, which `dyad convert --tokenizer` turns into a GGUF SentencePiece vocabulary
(spaces become U+2581, the llama2.c convention). dyad then tokenizes a prompt the SentencePiece
way: <s>, a space prefixed to the text, and — since no token is longer than one character — one
token per character. `encode` does exactly that, so the trainer sees what the server feeds.
"""

import struct

from tasks import ALPHABET

UNK, BOS, EOS = 0, 1, 2
SPECIALS = ["<unk>", "<s>", "</s>"]
VOCAB = SPECIALS + list(ALPHABET)
TOKEN_ID = {c: i for i, c in enumerate(VOCAB) if i >= len(SPECIALS)}


def encode(text, bos=True):
    """Token ids of `text` as dyad feeds a prompt: [<s>] + the space prefix + each character."""
    ids = [BOS] if bos else []
    for c in " " + text:
        if c not in TOKEN_ID:
            raise ValueError(f"character {c!r} is not in the tokenizer's alphabet")
        ids.append(TOKEN_ID[c])
    return ids


def encode_continuation(text):
    """Ids of text that follows a prompt (an answer): no <s>, no space prefix."""
    return [TOKEN_ID[c] for c in text]


def decode(ids):
    return "".join(VOCAB[i] for i in ids if i >= len(SPECIALS))


def write_llama2c(path):
    """Writes the llama2.c tokenizer file: max token length, then per token its score (f32),
    byte length (i32) and bytes. Scores are all 0: with single-character tokens there is
    nothing to merge."""
    with open(path, "wb") as f:
        f.write(struct.pack("<i", max(len(t.encode()) for t in VOCAB)))
        for t in VOCAB:
            b = t.encode()
            f.write(struct.pack("<fi", 0.0, len(b)))
            f.write(b)
