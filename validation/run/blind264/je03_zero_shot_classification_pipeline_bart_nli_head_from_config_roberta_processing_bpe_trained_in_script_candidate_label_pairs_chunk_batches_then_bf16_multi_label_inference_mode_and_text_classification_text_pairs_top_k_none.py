"""Zero-shot classification the way the pipeline's default model (an MNLI-tuned BART) runs it, offline:
a byte-level BPE tokenizer trained in the script (tokenizers' BpeTrainer, 10,000 tokens, over a fixed
corpus made by a seeded `random.Random`) with RoBERTa's post-processor (`<s> A </s></s> B </s>`), a
from-config `BartForSequenceClassification` (6 + 6 layers, d 1,024, 16 heads, FFN 4,096, fp32) whose
labels are entailment / neutral / contradiction, then `pipeline("zero-shot-classification")`: each
sequence paired with one hypothesis per candidate label (`hypothesis_template`), the pairs batched
across sequences by the ChunkPipeline (batch_size 16), the head pooling each row at its last `</s>`
(`eos_mask`, values the host's ids carry). 20 sequences x 10 labels single-label; then the model cast to
bf16 after the pipeline was built and 20 x 14 labels with `multi_label=True` under
`torch.inference_mode()`, batch_size 40; then a `text-classification` pipeline over the same model
(`top_k=None`, sentence pairs as `{"text", "text_pair"}` dicts), batch_size 24. No value-dependent
sizes. 4 phases."""

import random

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import BartConfig, BartForSequenceClassification, PreTrainedTokenizerFast, pipeline

torch.manual_seed(2643)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


rng = random.Random(23)
syll = ["ka", "lo", "mi", "ren", "tu", "sa", "vel", "dor", "ib", "an", "ust", "pe", "qua", "zo", "ri", "mon"]
lexicon = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(4000)]
corpus = [" ".join(rng.choice(lexicon) for _ in range(rng.randint(12, 90))) + "." for _ in range(4000)]
bpe = Tokenizer(models.BPE(unk_token="<unk>"))
bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
bpe.decoder = decoders.ByteLevel()
bpe.train_from_iterator(
    corpus,
    trainers.BpeTrainer(
        vocab_size=10000,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    ),
)
bpe.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), add_prefix_space=True)
tok = PreTrainedTokenizerFast(
    tokenizer_object=bpe,
    bos_token="<s>",
    eos_token="</s>",
    sep_token="</s>",
    cls_token="<s>",
    unk_token="<unk>",
    pad_token="<pad>",
    mask_token="<mask>",
    model_max_length=1024,
)

cfg = BartConfig(
    vocab_size=10000,
    d_model=1024,
    encoder_layers=6,
    decoder_layers=6,
    encoder_attention_heads=16,
    decoder_attention_heads=16,
    encoder_ffn_dim=4096,
    decoder_ffn_dim=4096,
    max_position_embeddings=1024,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=2,
    id2label={0: "contradiction", 1: "neutral", 2: "entailment"},
    label2id={"contradiction": 0, "neutral": 1, "entailment": 2},
)
nli = BartForSequenceClassification(cfg).eval()
zsc = pipeline("zero-shot-classification", model=nli, tokenizer=tok, device=0)
report("pipeline_built")

seqs = [" ".join(corpus[i].split() + corpus[i + 100].split()[: 5 * i]) for i in range(20)]
labels = lexicon[:10]
res = zsc(seqs, candidate_labels=labels, hypothesis_template="This text is about {}.", batch_size=16)
print(len(res), len(res[0]["labels"]))
report("zero_shot_fp32_single_label")

nli.to(torch.bfloat16)
with torch.inference_mode():
    res = zsc(seqs, candidate_labels=lexicon[20:34], multi_label=True, batch_size=40)
print(len(res), len(res[0]["scores"]))
report("zero_shot_bf16_multi_label_inference_mode")

clf = pipeline("text-classification", model=nli, tokenizer=tok, device=0, top_k=None)
pairs = [{"text": corpus[500 + i], "text_pair": corpus[600 + i]} for i in range(72)]
scores = clf(pairs, batch_size=24)
print(len(scores), len(scores[0]))
report("text_classification_pairs_top_k_none")
