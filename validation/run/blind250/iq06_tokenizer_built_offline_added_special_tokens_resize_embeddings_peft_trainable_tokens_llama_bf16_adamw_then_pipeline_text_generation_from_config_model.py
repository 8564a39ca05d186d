"""A tokenizer built in code, new special tokens trained with TrainableTokens, then a text-generation
pipeline: a word-level tokenizer (tokenizers' WordLevel over a 6,000-word vocabulary made in code,
whitespace pre-tokenizer) wrapped as a PreTrainedTokenizerFast, four special tokens added
(`add_special_tokens`), a from-config Llama (6 layers, d 1024, 16 heads with 8 KV heads, MLP 2816,
bf16 weights) sized to it by `resize_token_embeddings`, then peft's TrainableTokens on embed_tokens
for the four new token ids only (peft/tuners/trainable_tokens/layer.py: a delta over the chosen rows,
the embedding looked up through the base weight with those rows replaced in every forward). AdamW,
batch 8 x 256 of encoded text, three steps. Then merge_and_unload and `pipeline("text-generation")`
on the merged model and the tokenizer, 4 prompts in a batch of 4, 40 new tokens each
(min_new_tokens = max_new_tokens). 4 phases."""

import torch
from peft import TrainableTokensConfig, get_peft_model
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, pipeline

torch.manual_seed(2506)
T, B = 256, 8


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


words = [f"w{i}" for i in range(6000)]
vocab = {"<unk>": 0, "<pad>": 1, "<s>": 2, "</s>": 3}
vocab.update({w: i + 4 for i, w in enumerate(words)})
tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok = PreTrainedTokenizerFast(
    tokenizer_object=tk, unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>"
)
tok.padding_side = "left"
new = ["<|user|>", "<|assistant|>", "<|tool|>", "<|end|>"]
tok.add_special_tokens({"additional_special_tokens": new})
new_ids = tok.convert_tokens_to_ids(new)

cfg = LlamaConfig(
    vocab_size=len(vocab),
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=6,
    num_attention_heads=16,
    num_key_value_heads=8,
    max_position_embeddings=2048,
    pad_token_id=1,
    bos_token_id=2,
    eos_token_id=3,
)
model = LlamaForCausalLM(cfg).to(torch.bfloat16)
model.resize_token_embeddings(len(tok), mean_resizing=False)
model = get_peft_model(model, TrainableTokensConfig(target_modules=["embed_tokens"], token_indices=new_ids))
model.print_trainable_parameters()
model.cuda()

g = torch.Generator().manual_seed(0)
texts = []
for b in range(B):
    ws = [words[int(i)] for i in torch.randint(0, len(words), (T - 4,), generator=g)]
    texts.append(
        " ".join(["<|user|>"] + ws[: T // 2] + ["<|assistant|>"] + ws[T // 2 :] + ["<|end|>", "</s>"])
    )
enc = tok(texts, return_tensors="pt", padding="max_length", max_length=T, truncation=True)
ids = enc["input_ids"].cuda()
mask = enc["attention_mask"].cuda()
report("setup")

opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
model.train()
for _ in range(3):
    loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss
report("train_trainable_tokens")

del opt
merged = model.merge_and_unload()
merged.eval()
report("merge_and_unload")

gen = pipeline("text-generation", model=merged, tokenizer=tok, device=0)
prompts = [" ".join(["<|user|>"] + words[i * 7 : i * 7 + 20 + 3 * i] + ["<|assistant|>"]) for i in range(4)]
outs = gen(
    prompts, batch_size=4, max_new_tokens=40, min_new_tokens=40, do_sample=False, return_full_text=False
)
print([len(o[0]["generated_text"].split()) for o in outs])
report("pipeline_text_generation")
