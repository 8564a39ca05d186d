"""Multi-label tabular classification (Mechanisms-of-Action style) with the "1D-CNN on tabular data"
trick, trained as 4-fold cross-validation in one process.

PYTORCH_CUDA_ALLOC_CONF="garbage_collection_threshold:0.6,max_split_size_mb:256" is set at the top.

Data: 65,536 training rows of 875 features (772 "gene" and 100 "cell" columns plus 3 control columns),
206 binary targets, 16,384 test rows, all on the device. Model: BatchNorm1d, Dropout, a weight-normed
Linear (torch.nn.utils.parametrizations.weight_norm) to 4,096, CELU, reshaped to 256 channels x 16;
BatchNorm1d, Dropout, weight-normed Conv1d 256 -> 512 (k 5), ReLU, AdaptiveAvgPool1d(8); two weight-normed
Conv1d 512 -> 512 (k 3) blocks with BatchNorm/Dropout, the second multiplied by the first; MaxPool1d(4,
2, 1), Flatten, BatchNorm1d, Dropout, weight-normed Linear to 206. Loss: BCEWithLogits on labels
smoothed by hand (y * 0.999 + 0.0005).

Each fold: a new model, foreach Adam (lr 1e-3, wd 1e-5) with OneCycleLR, 4 steps at batch 16,384 in
fp32 from the fold's training rows (index tensors of a host-side random split), its validation rows
predicted under inference_mode into a preallocated out-of-fold buffer, the test rows' sigmoid
averaged into a test buffer, the state_dict kept on the host; then the model, optimizer and
scheduler deleted, gc.collect() and torch.cuda.empty_cache(). Phases: folds 1-4 (one a phase);
then the four state_dicts loaded in turn into one model and the test rows predicted under
inference_mode with bf16 autocast in chunks of 8,192. 5 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "garbage_collection_threshold:0.6,max_split_size_mb:256"

import gc  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.utils.parametrizations import weight_norm  # noqa: E402

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2136)
if SMALL:
    N_TRAIN, N_TEST, BATCH, HIDDEN, CH = 2048, 512, 256, 256, 16
else:
    N_TRAIN, N_TEST, BATCH, HIDDEN, CH = 65_536, 16_384, 16_384, 4096, 256
N_FEAT, N_TARGETS, FOLDS, STEPS = 875, 206, 4, 4
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


class CNN1D(nn.Module):
    def __init__(self):
        super().__init__()
        self.length = HIDDEN // CH
        self.bn1 = nn.BatchNorm1d(N_FEAT)
        self.dense1 = weight_norm(nn.Linear(N_FEAT, HIDDEN))
        self.bn_c1 = nn.BatchNorm1d(CH)
        self.conv1 = weight_norm(nn.Conv1d(CH, 2 * CH, 5, padding=2, bias=False))
        self.pool1 = nn.AdaptiveAvgPool1d(self.length // 2)
        self.bn_c2 = nn.BatchNorm1d(2 * CH)
        self.conv2 = weight_norm(nn.Conv1d(2 * CH, 2 * CH, 3, padding=1))
        self.bn_c3 = nn.BatchNorm1d(2 * CH)
        self.conv3 = weight_norm(nn.Conv1d(2 * CH, 2 * CH, 3, padding=1))
        self.pool2 = nn.MaxPool1d(4, stride=2, padding=1)
        flat = 2 * CH * (self.length // 4)
        self.bn3 = nn.BatchNorm1d(flat)
        self.dense3 = weight_norm(nn.Linear(flat, N_TARGETS))

    def forward(self, x):
        x = F.celu(self.dense1(F.dropout(self.bn1(x), 0.1, self.training)), alpha=0.06)
        x = x.view(len(x), CH, self.length)
        x = F.relu(self.conv1(F.dropout(self.bn_c1(x), 0.1, self.training)))
        x = self.pool1(x)
        x_s = F.relu(self.conv2(F.dropout(self.bn_c2(x), 0.3, self.training)))
        x = F.relu(self.conv3(F.dropout(self.bn_c3(x_s), 0.2, self.training)))
        x = self.pool2(x * x_s).flatten(1)
        return self.dense3(F.dropout(self.bn3(x), 0.2, self.training))


x_all = torch.randn(N_TRAIN, N_FEAT, device=device)
x_all[:, -3:] = torch.randint(0, 2, (N_TRAIN, 3), device=device).float()
w_true = torch.randn(N_FEAT, N_TARGETS, device=device) / N_FEAT**0.5
y_all = (x_all @ w_true > 2.0).float()
x_test = torch.randn(N_TEST, N_FEAT, device=device)
oof = torch.zeros(N_TRAIN, N_TARGETS, device=device)
test_pred = torch.zeros(N_TEST, N_TARGETS, device=device)
fold_of = torch.randperm(N_TRAIN) % FOLDS  # host-side split, as sklearn's KFold would give
fold_states = []

for fold in range(FOLDS):
    train_idx = (fold_of != fold).nonzero().squeeze(1).to(device)
    valid_idx = (fold_of == fold).nonzero().squeeze(1).to(device)
    model = CNN1D().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-5, foreach=True)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=STEPS, pct_start=0.5)
    model.train()
    for step in range(STEPS):
        rows = train_idx[torch.randint(0, len(train_idx), (BATCH,), device=device)]
        target = y_all[rows] * 0.999 + 0.0005
        loss = F.binary_cross_entropy_with_logits(model(x_all[rows]), target)
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    model.eval()
    with torch.inference_mode():
        oof[valid_idx] = torch.sigmoid(model(x_all[valid_idx]))
        test_pred += torch.sigmoid(model(x_test)) / FOLDS
        valid_loss = F.binary_cross_entropy(oof[valid_idx], y_all[valid_idx])
    print(f"fold {fold} train loss {loss.item():.4f} valid loss {valid_loss.item():.4f}")
    fold_states.append({k: v.detach().cpu() for k, v in model.state_dict().items()})
    del model, opt, sched, loss, rows, target, train_idx, valid_idx
    gc.collect()
    torch.cuda.empty_cache()
    report(f"fold {fold}")

oof_loss = F.binary_cross_entropy(oof.clamp(1e-6, 1 - 1e-6), y_all)
print(f"oof loss {oof_loss.item():.4f}")
model = CNN1D().to(device).eval()
ensemble = torch.zeros(N_TEST, N_TARGETS, device=device)
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    for state in fold_states:
        model.load_state_dict(state)
        for i in range(0, N_TEST, 8192):
            ensemble[i : i + 8192] += torch.sigmoid(model(x_test[i : i + 8192]).float()) / FOLDS
print(f"ensemble vs fold-average max diff {(ensemble - test_pred).abs().max().item():.4f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
