"""Which tokenizers release the GPU machine has, read from what blind314/lc01 depends on: the number of
overflowing windows of a truncating encode with a stride (tokenizers 0.23.1 and 0.23.2 stop tokenizing at
max_length, huggingface/tokenizers#2091/#2098, so `overflowing` under-covers; 0.23.3 here covers the whole
text). Host only, no CUDA. Lines: the versions; issue #2091's WordLevel repro (len(enc.overflowing): 5 in
0.22.2, 0 in 0.23.1); lc01's phase-3 windows (the dev machine's 0.23.3: 39; 0.23.1 and 0.23.2: 16)."""

import random

import tokenizers
import transformers
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from transformers import BertTokenizer

print(f"tokenizers {tokenizers.__version__} transformers {transformers.__version__}")

vocab = {"[UNK]": 0, **{str(i): i + 1 for i in range(100)}}
tok = Tokenizer(WordLevel(vocab=vocab, unk_token="[UNK]"))
tok.pre_tokenizer = Whitespace()
tok.enable_truncation(max_length=10, stride=2)
print(f"issue2091 overflowing {len(tok.encode(' '.join(str(i) for i in range(50))).overflowing)}")

# blind314/lc01's host stream up to its phase-3 windows (same seed, same draws; no model)
random.seed(314)
specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
words = [f"w{i}" for i in range(6000)]
suffixes = [f"##x{i}" for i in range(1000)]
tokenizer = BertTokenizer(vocab={t: i for i, t in enumerate(specials + words + suffixes)})


def text(n_words):
    out = []
    for _ in range(n_words):
        w = random.choice(words)
        if random.random() < 0.3:
            w += random.choice(suffixes)[2:]
        out.append(w)
    return " ".join(out)


for _ in range(4):
    questions = [text(random.randint(6, 14)) for _ in range(24)]
    contexts = [text(random.randint(150, 400)) for _ in range(24)]
    enc = tokenizer(questions, contexts, truncation="only_second", max_length=384, padding="longest")
    for i in range(24):
        ctx = [j for j, s in enumerate(enc.sequence_ids(i)) if s == 1]
        random.randint(ctx[0], ctx[-1] - 5)
        random.randint(0, 4)
questions = [text(8) for _ in range(8)]
contexts = [text(random.randint(600, 1200)) for _ in range(8)]
enc = tokenizer(
    questions,
    contexts,
    truncation="only_second",
    max_length=384,
    stride=128,
    return_overflowing_tokens=True,
    padding="max_length",
)
print(f"lc01 windows {len(enc['overflow_to_sample_mapping'])}")
