"""NomicBERT (transformers 5.17's `NomicBertForSequenceClassification`, the nomic-embed-text encoder: rotary
position embeddings, SwiGLU MLPs, post-norm blocks, no absolute positions) built from config: d 768, 12
layers, 12 heads of 64, MLP 3,072, vocabulary 30,528, 4 labels. Fine-tuned with peft's HRA (Householder
reflection adaptation, `HRAConfig`: r 8 reflections with Gram-Schmidt orthogonalisation, `apply_GS=True`) on
the four attention projections of the last 6 layers only (`layers_to_transform`), the classifier in
`modules_to_save`, non-reentrant gradient checkpointing with `enable_input_require_grads`, fp32 weights under
bf16 autocast, fused AdamW, 6 steps at batch 32 x 512 with right padding (a mask from per-row lengths; fixed
lengths, seeded). Phase 2: a no_grad validation of 4 batches with the adapters on. Then the adapters merged
into the base (`merge_and_unload()`), the encoder taken out of the classifier and cast to bf16; phase 3:
`inference_mode` mean-pooled, L2-normalised sentence embeddings of 1,024 texts of 512 tokens in batches of
128; phase 4: 64 long documents of 2,048 tokens in batches of 16. Seeded; no value-dependent sizes. 4
phases."""

import torch
import torch.nn.functional as F
from peft import HRAConfig, TaskType, get_peft_model
from transformers import NomicBertConfig, NomicBertForSequenceClassification

torch.manual_seed(2873)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = NomicBertConfig(num_labels=4, max_position_embeddings=2048)
base = NomicBertForSequenceClassification(cfg).cuda()
base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
base.enable_input_require_grads()
hra = HRAConfig(
    task_type=TaskType.SEQ_CLS,
    r=8,
    apply_GS=True,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
    layers_to_transform=list(range(6, 12)),
    layers_pattern="layers",
    modules_to_save=["classifier"],
)
model = get_peft_model(base, hra)
model.print_trainable_parameters()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-4, fused=True)


def padded_batch(n, length):
    ids = torch.randint(1, cfg.vocab_size, (n, length), device="cuda")
    lengths = torch.linspace(length // 4, length, n, device="cuda").long()
    mask = (torch.arange(length, device="cuda")[None, :] < lengths[:, None]).long()
    return ids * mask, mask


model.train()
for step in range(6):
    ids, mask = padded_batch(32, 512)
    labels = torch.randint(0, 4, (32,), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(out.loss.item(), 4))
del out
report("hra_fine_tune")

model.eval()
correct = 0
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _ in range(4):
        ids, mask = padded_batch(32, 512)
        labels = torch.randint(0, 4, (32,), device="cuda")
        correct += (model(input_ids=ids, attention_mask=mask).logits.argmax(-1) == labels).sum().item()
print("val acc", correct / 128)
report("validation")

del opt
merged = model.merge_and_unload()
encoder = merged.nomic_bert.to(torch.bfloat16)
del merged, model, base


def embed(n, length, bs):
    outs = []
    with torch.inference_mode():
        for _ in range(n // bs):
            ids, mask = padded_batch(bs, length)
            hidden = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
            pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
            outs.append(F.normalize(pooled.float(), dim=-1))
    return torch.cat(outs)


emb = embed(1024, 512, 128)
print("embeddings", tuple(emb.shape), round((emb @ emb.T).mean().item(), 4))
report("embed_512")

docs = embed(64, 2048, 16)
print("documents", tuple(docs.shape), round((docs @ emb.T).max().item(), 4))
report("embed_2048")
