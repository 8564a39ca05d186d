"""Eager forward, compiled backward: the model is not compiled at all, and only `loss.backward()`
runs under `torch._dynamo.compiled_autograd._enable(torch.compile(backend="inductor"))`. The engine
hands compiled autograd the whole eager autograd graph (every node's functional backward, its saved
tensors lifted as graph inputs and released from the nodes before the graph runs), which Inductor
compiles as one backward graph, run on the thread that called backward. PyTorch's own
`nn.TransformerEncoder` (3 pre-norm layers of `nn.TransformerEncoderLayer`, d_model 768, 12 heads, FFN
3072 with GELU, dropout 0.1, batch_first) over an embedding of 16000 tokens, mean-pooled into a
16-class head, fp32, SGD with momentum 0.9, batch 16 x 512. Three steps with the compiled backward;
then two with the eager engine's backward (same model, same optimizer: its device thread's cuBLAS
workspace); then two more with the compiled backward (compiled autograd's cache: no capture). Then an
evaluation under no_grad at batch 32. 6 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo import compiled_autograd

torch.manual_seed(25705)
V, D, H, FF, L, T, C = 16000, 768, 12, 3072, 3, 512, 16


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        layer = nn.TransformerEncoderLayer(
            D, H, FF, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, L, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, C)

    def forward(self, idx):
        return self.head(self.norm(self.encoder(self.emb(idx))).mean(1))


model = Classifier().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
backward_compiler = torch.compile(backend="inductor")


def step(b, compiled):
    idx = torch.randint(0, V, (b, T), device="cuda")
    y = torch.randint(0, C, (b,), device="cuda")
    loss = F.cross_entropy(model(idx), y)
    if compiled:
        with compiled_autograd._enable(backward_compiler):
            loss.backward()
    else:
        loss.backward()
    del loss
    opt.step()
    opt.zero_grad(set_to_none=True)


report("setup")

step(16, True)
report("step0_compiled_backward_capture")

for _ in range(2):
    step(16, True)
report("steps1_2_compiled_backward_cached")

for _ in range(2):
    step(16, False)
report("steps3_4_eager_engine_backward")

for _ in range(2):
    step(16, True)
report("steps5_6_compiled_backward_again")

model.eval()
with torch.no_grad():
    out = model(torch.randint(0, V, (32, T), device="cuda"))
    del out
report("eval_no_grad_batch32")
