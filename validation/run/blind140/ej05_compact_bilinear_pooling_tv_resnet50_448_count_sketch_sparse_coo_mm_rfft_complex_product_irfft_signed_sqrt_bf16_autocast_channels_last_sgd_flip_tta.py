"""Fine-grained classification with compact bilinear pooling (Gao et al. 2016, Tensor Sketch;
the count sketch as a sparse matrix as in the DeepInsight PyTorch port): a torchvision ResNet-50
trunk (no pooling, no fc) at 448 x 448, channels-last under bf16 autocast, its 2,048 x 14 x 14
features taken in fp32 outside autocast, two fixed count sketches into 8,192 dimensions as
sparse COO matrices made on the device (one signed entry per input channel) applied by `torch.sparse.mm` to the
transposed features, the circular convolution of the two sketches by `rfft`, a complex product
and `irfft(n=8192)`, sum-pooled over the 196 locations, the signed square root and L2
normalisation, a Linear classifier of 200 birds; SGD with momentum and weight decay, the trunk at
a tenth of the head's learning rate, batch 24, 3 steps; then evaluation under inference_mode on
2 batches of 32 with the horizontal flip averaged (test-time augmentation); 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14005)
B, EB, RES, SKETCH, NCLS = (2, 2, 64, 256, 10) if SMALL else (24, 32, 448, 8192, 200)
STEPS = 2 if SMALL else 3
device = "cuda" if torch.cuda.is_available() else "cpu"


class CompactBilinearPooling(nn.Module):
    def __init__(self, input_dim1, input_dim2, output_dim):
        super().__init__()
        self.output_dim = output_dim
        self.register_buffer("sketch1", self.generate_sketch_matrix(input_dim1, output_dim))
        self.register_buffer("sketch2", self.generate_sketch_matrix(input_dim2, output_dim))

    @staticmethod
    def generate_sketch_matrix(input_dim, output_dim):
        rand_h = torch.randint(output_dim, (input_dim,), device=device)
        rand_s = 2 * torch.randint(2, (input_dim,), device=device).float() - 1
        indices = torch.stack([rand_h, torch.arange(input_dim, device=device)])
        return torch.sparse_coo_tensor(indices, rand_s, (output_dim, input_dim)).coalesce()

    def forward(self, bottom1, bottom2):
        n, c, h, w = bottom1.shape
        x1 = bottom1.permute(0, 2, 3, 1).reshape(-1, c)
        x2 = bottom2.permute(0, 2, 3, 1).reshape(-1, c)
        sketch_1 = torch.sparse.mm(self.sketch1, x1.t()).t()
        sketch_2 = torch.sparse.mm(self.sketch2, x2.t()).t()
        fft1 = torch.fft.rfft(sketch_1, dim=-1)
        fft2 = torch.fft.rfft(sketch_2, dim=-1)
        cbp_flat = torch.fft.irfft(fft1 * fft2, n=self.output_dim, dim=-1)
        return cbp_flat.view(n, h * w, self.output_dim).sum(dim=1)


class CBPNet(nn.Module):
    def __init__(self, num_classes, sketch_dim):
        super().__init__()
        resnet = torchvision.models.resnet50()
        self.features = nn.Sequential(*list(resnet.children())[:-2])
        self.cbp = CompactBilinearPooling(2048, 2048, sketch_dim)
        self.fc = nn.Linear(sketch_dim, num_classes)

    def forward(self, x):
        f = self.features(x)
        with torch.autocast("cuda", enabled=False):
            f = f.float().contiguous()
            y = self.cbp(f, f)
            y = torch.sign(y) * torch.sqrt(torch.abs(y) + 1e-10)
            y = F.normalize(y, dim=1)
            return self.fc(y)


model = CBPNet(NCLS, SKETCH).to(device, memory_format=torch.channels_last)
opt = torch.optim.SGD(
    [
        {"params": model.features.parameters(), "lr": 1e-3},
        {"params": model.fc.parameters(), "lr": 1e-2},
    ],
    momentum=0.9,
    weight_decay=1e-5,
)
criterion = nn.CrossEntropyLoss()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    x = torch.randn(B, 3, RES, RES, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(x)
        loss = criterion(logits, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del logits, loss, x, y
model.eval()
correct = 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    for _b in range(2):
        x = torch.randn(EB, 3, RES, RES, device=device).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, NCLS, (EB,), device=device)
        probs = model(x).softmax(-1) + model(torch.flip(x, dims=[3])).softmax(-1)
        correct += (probs.argmax(-1) == y).sum().item()
if device == "cuda":
    print(
        f"top1 {correct / (2 * EB):.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
