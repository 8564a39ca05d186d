"""A Kaggle "CommonLit / Feedback Prize" style essay-scoring notebook: 3-fold cross-validation, each
fold building a fresh HF DebertaV2Model (deberta-v3-xsmall-like config: 384 wide, 6 layers, relative
position buckets, p2c/c2p attention) with a masked mean-pooling head and a multi-sample dropout
regressor (5 dropouts averaged) for 6 targets, layer-wise learning-rate decay (one AdamW param group per
encoder layer, lr * 0.8 ** depth), fp16 autocast with torch.amp.GradScaler, gradient accumulation of 2,
FGM adversarial training by hand (perturb the word-embedding weight along its gradient, second
forward/backward, restore), 4 micro-batches per fold; out-of-fold predictions written into a GPU
tensor by index, test predictions summed over folds; after each fold
`del model, optimizer, scaler; gc.collect(); torch.cuda.empty_cache()`.

Phases: 0 data; 1 fold 0; 2 fold 1; 3 fold 2; 4 OOF RMSE and test average."""

import gc
import os

import torch
import torch.nn as nn
from transformers import DebertaV2Config, DebertaV2Model

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3291)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    cfg_kw = dict(
        vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    N_TRAIN, N_TEST, SEQ, BS = 48, 16, 32, 4
else:
    cfg_kw = dict(
        vocab_size=128100, hidden_size=384, num_hidden_layers=6, num_attention_heads=6, intermediate_size=1536
    )
    N_TRAIN, N_TEST, SEQ, BS = 384, 96, 512, 8
N_FOLDS, N_TARGETS, ACCUM, MICRO_STEPS = 3, 6, 2, 4


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def make_config():
    return DebertaV2Config(
        **cfg_kw,
        max_position_embeddings=512,
        relative_attention=True,
        position_buckets=256,
        norm_rel_ebd="layer_norm",
        share_att_key=True,
        pos_att_type=["p2c", "c2p"],
        position_biased_input=False,
        type_vocab_size=0,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


class MultiSampleDropoutRegressor(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.backbone = DebertaV2Model(cfg)
        self.dropouts = nn.ModuleList([nn.Dropout(0.1 * (i + 1)) for i in range(5)])
        self.fc = nn.Linear(cfg.hidden_size, N_TARGETS)

    def forward(self, ids, mask):
        h = self.backbone(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-6)
        return torch.stack([self.fc(d(pooled)) for d in self.dropouts], 0).mean(0)


def llrd_groups(model, lr=2e-5, head_lr=1e-3, decay=0.8, wd=0.01):
    n_layers = len(model.backbone.encoder.layer)
    groups = [{"params": list(model.fc.parameters()), "lr": head_lr, "weight_decay": 0.0}]
    groups.append(
        {
            "params": list(model.backbone.embeddings.parameters()),
            "lr": lr * decay**n_layers,
            "weight_decay": wd,
        }
    )
    for i, layer in enumerate(model.backbone.encoder.layer):
        groups.append(
            {"params": list(layer.parameters()), "lr": lr * decay ** (n_layers - 1 - i), "weight_decay": wd}
        )
    rest = [p for n, p in model.backbone.encoder.named_parameters() if not n.startswith("layer.")]
    groups.append({"params": rest, "lr": lr, "weight_decay": wd})
    return groups


class FGM:
    def __init__(self, model, emb_name="word_embeddings", eps=1.0):
        self.model, self.emb_name, self.eps, self.backup = model, emb_name, eps, {}

    def attack(self):
        for name, p in self.model.named_parameters():
            if p.requires_grad and self.emb_name in name:
                self.backup[name] = p.data.clone()
                r_at = self.eps * p.grad / (torch.norm(p.grad) + 1e-8)
                p.data.add_(r_at)

    def restore(self):
        for name, p in self.model.named_parameters():
            if name in self.backup:
                p.data = self.backup[name]
        self.backup = {}


# "tokenized" essays with right padding, lengths between SEQ/4 and SEQ
def fake_tokens(n):
    lens = torch.randint(SEQ // 4, SEQ + 1, (n,))
    ids = torch.randint(5, cfg_kw["vocab_size"], (n, SEQ))
    mask = (torch.arange(SEQ)[None, :] < lens[:, None]).long()
    return ids * mask, mask


train_ids, train_mask = fake_tokens(N_TRAIN)
targets = torch.rand(N_TRAIN, N_TARGETS) * 4 + 1
test_ids, test_mask = fake_tokens(N_TEST)
folds = torch.arange(N_TRAIN) % N_FOLDS
oof = torch.zeros(N_TRAIN, N_TARGETS, device=device)
test_pred = torch.zeros(N_TEST, N_TARGETS, device=device)
report("data")


@torch.no_grad()
def predict(model, ids, mask):
    model.eval()
    outs = []
    for s in range(0, ids.shape[0], BS * 4):
        with torch.autocast(device_type=device, dtype=torch.float16):
            outs.append(model(ids[s : s + BS * 4].to(device), mask[s : s + BS * 4].to(device)).float())
    return torch.cat(outs)


for fold in range(N_FOLDS):
    tr_idx = (folds != fold).nonzero().squeeze(1)
    va_idx = (folds == fold).nonzero().squeeze(1)
    model = MultiSampleDropoutRegressor(make_config()).to(device)
    optimizer = torch.optim.AdamW(llrd_groups(model), lr=2e-5)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**10)
    fgm = FGM(model)
    model.train()
    for step in range(MICRO_STEPS):
        b = tr_idx[step * BS : (step + 1) * BS]
        ids, mask, y = train_ids[b].to(device), train_mask[b].to(device), targets[b].to(device)
        with torch.autocast(device_type=device, dtype=torch.float16):
            loss = nn.functional.smooth_l1_loss(model(ids, mask).float(), y) / ACCUM
        scaler.scale(loss).backward()
        fgm.attack()
        with torch.autocast(device_type=device, dtype=torch.float16):
            adv_loss = nn.functional.smooth_l1_loss(model(ids, mask).float(), y) / ACCUM
        scaler.scale(adv_loss).backward()
        fgm.restore()
        if (step + 1) % ACCUM == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1000.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
    oof[va_idx.to(device)] = predict(model, train_ids[va_idx], train_mask[va_idx])
    test_pred += predict(model, test_ids, test_mask) / N_FOLDS
    del model, optimizer, scaler, fgm
    gc.collect()
    torch.cuda.empty_cache()
    report(f"fold{fold}")

rmse = ((oof - targets.to(device)) ** 2).mean(0).sqrt()
print(f"oof mcrmse {rmse.mean().item():.4f} test mean {test_pred.mean().item():.4f}")
report("score")
