"""Three encoder pipelines over one WordPiece tokenizer trained in the script (tokenizers'
WordPieceTrainer, 8,000 tokens, BERT normalizer and pre-tokenizer, a `[CLS] $A [SEP]` template) over a
fixed corpus made by a seeded `random.Random`, each on its own from-config BERT (12 layers, d 768,
12 heads, fp32), all three pipelines kept alive as a service would. fill-mask: 48 masked sentences,
batch_size 16, top_k 5, then the same with `targets` (five words: the pipeline scores only their ids).
token-classification with `aggregation_strategy="simple"` on 24 long documents (300 to 1,400 words)
with `stride=64` under a 256-token `model_max_length`: the fast tokenizer's overflowing windows
(`return_overflowing_tokens`) become one ChunkPipeline item each, batch_size 8 over the windows.
feature-extraction built with `device_map="cuda"` and no device (for an instance the device map only
reaches `load_model`, and the pipeline's device defaults to 0), `tokenize_kwargs` truncating at 256,
`return_tensors=True`, batch_size 32; then that model `.half()` and the same under
`torch.inference_mode()`. No value-dependent sizes. 4 phases."""

import random

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForTokenClassification,
    BertModel,
    PreTrainedTokenizerFast,
    pipeline,
)

torch.manual_seed(2642)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


rng = random.Random(11)
syll = [
    "ka",
    "lo",
    "mi",
    "ren",
    "tu",
    "sa",
    "vel",
    "dor",
    "ib",
    "an",
    "ust",
    "pe",
    "qua",
    "zo",
    "ri",
    "mon",
    "el",
]
lexicon = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(5000)]
corpus = [" ".join(rng.choice(lexicon) for _ in range(rng.randint(10, 60))) + " ." for _ in range(4000)]
wp = Tokenizer(models.WordPiece(unk_token="[UNK]"))
wp.normalizer = normalizers.BertNormalizer(lowercase=True)
wp.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
wp.decoder = decoders.WordPiece()
wp.train_from_iterator(
    corpus,
    trainers.WordPieceTrainer(
        vocab_size=8000, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False
    ),
)
wp.post_processor = processors.TemplateProcessing(
    single="[CLS] $A [SEP]",
    pair="[CLS] $A [SEP] $B:1 [SEP]:1",
    special_tokens=[("[CLS]", wp.token_to_id("[CLS]")), ("[SEP]", wp.token_to_id("[SEP]"))],
)
tok = PreTrainedTokenizerFast(
    tokenizer_object=wp,
    unk_token="[UNK]",
    pad_token="[PAD]",
    cls_token="[CLS]",
    sep_token="[SEP]",
    mask_token="[MASK]",
    model_max_length=256,
)


def bert_config(**kw):
    return BertConfig(
        vocab_size=8000,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=512,
        **kw,
    )


fill = pipeline("fill-mask", model=BertForMaskedLM(bert_config()).eval(), tokenizer=tok, device=0)
masked = []
for i in range(48):
    ws = corpus[i].split()
    k = len(ws) // 2
    masked.append(" ".join([*ws[:k], "[MASK]", *ws[k + 1 :]]))
out = fill(masked, batch_size=16, top_k=5)
out = fill(masked, batch_size=16, targets=lexicon[:5])
print(len(out), len(out[0]))
report("fill_mask")

labels = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
ner_model = BertForTokenClassification(
    bert_config(id2label=dict(enumerate(labels)), label2id={lab: i for i, lab in enumerate(labels)})
).eval()
ner = pipeline(
    "token-classification", model=ner_model, tokenizer=tok, device=0, aggregation_strategy="simple"
)
docs = [" ".join(corpus[1000 + 40 * i : 1000 + 40 * i + 10 + 2 * i]) for i in range(24)]
print([len(d.split()) for d in docs])
ents = ner(docs, batch_size=8, stride=64)
print(len(ents))
report("token_classification_stride_windows")

emb_model = BertModel(bert_config(), add_pooling_layer=False).eval()
feats = pipeline("feature-extraction", model=emb_model, tokenizer=tok, device_map="cuda")
print(feats.device)
vecs = feats(
    corpus[2000:2096],
    batch_size=32,
    return_tensors=True,
    tokenize_kwargs={"truncation": True, "max_length": 256},
)
print(len(vecs), vecs[0].shape, vecs[0].dtype)
report("feature_extraction_fp32")

emb_model.half()
with torch.inference_mode():
    vecs = feats(
        corpus[2000:2096],
        batch_size=32,
        return_tensors=True,
        tokenize_kwargs={"truncation": True, "max_length": 256},
    )
print(vecs[0].dtype)
report("feature_extraction_half_inference_mode")
