"""Opacus-style per-sample gradients written by hand, the way GradSampleModule does it: a forward hook
on every trainable leaf module appends its input to `module.activations`, a full backward hook takes
`grad_output[0]` as the backprops and computes `param.grad_sample` with the layer's rule from
opacus/grad_sample: Linear `einsum("n...i,n...j->nij", backprops, activations)` (bias: sum over all
but the batch dim), Conv2d by `F.unfold` of the activations and `einsum("noq,npq->nop")`, Embedding by
`scatter_add_` of the backprops into a (n, vocab, dim) zero tensor, LayerNorm and GroupNorm from the
re-normalized activations times the backprops. A DPOptimizer-like step then takes per-sample norms over
all parameters, clip factors, `einsum("i,i...", factors, grad_sample)`, adds Gaussian noise (sigma 1.0,
C 1.0) and divides by the expected batch size before the wrapped optimizer steps.
Phase 1: a text classifier (nn.Embedding(10,000 x 128), LayerNorm, a residual GELU MLP 128 -> 512 ->
128 with LayerNorm, mean pooling, Linear to 2 classes) over batches of 256 sequences of 128 int64
tokens, fp32, Adam (lr 1e-3): the first step its own phase, then 3 steps. Phase 3: an image model (4
Conv2d 3 -> 64 -> 128 -> 128 -> 256, GroupNorm(32) + ReLU, avg pools, Linear 256 -> 100) on 128 fp32
images of 64 x 64, SGD momentum 0.9 lr 0.1, 3 steps. Phase 4: both models evaluated under
torch.inference_mode with the hooks disabled; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18202)
if SMALL:
    B, T, VOCAB, IB, RES = 4, 16, 300, 4, 16
else:
    B, T, VOCAB, IB, RES = 256, 128, 10000, 128, 64
SIGMA, C = 1.0, 1.0
device = "cuda" if torch.cuda.is_available() else "cpu"


def sum_over_all_but_batch_and_last_n_dims(t, n_dims):
    if t.dim() == n_dims + 1:
        return t
    dims = list(range(1, t.dim() - n_dims))
    return t.sum(dim=dims)


def compute_grad_sample(layer, activations, backprops):
    gs = {}
    if isinstance(layer, nn.Linear):
        gs[layer.weight] = torch.einsum("n...i,n...j->nij", backprops, activations)
        if layer.bias is not None:
            gs[layer.bias] = torch.einsum("n...k->nk", backprops)
    elif isinstance(layer, nn.Conv2d):
        n = activations.shape[0]
        unfolded = F.unfold(
            activations,
            layer.kernel_size,
            dilation=layer.dilation,
            padding=layer.padding,
            stride=layer.stride,
        )
        bp = backprops.reshape(n, -1, unfolded.shape[-1])
        gs[layer.weight] = torch.einsum("noq,npq->nop", bp, unfolded).view(n, *layer.weight.shape)
        if layer.bias is not None:
            gs[layer.bias] = bp.sum(dim=2)
    elif isinstance(layer, nn.Embedding):
        n = activations.shape[0]
        index = (
            activations.unsqueeze(-1)
            .expand(*activations.shape, layer.embedding_dim)
            .reshape(n, -1, layer.embedding_dim)
        )
        gsample = torch.zeros(n, *layer.weight.shape, device=layer.weight.device, dtype=backprops.dtype)
        gsample.scatter_add_(1, index, backprops.reshape(n, -1, layer.embedding_dim))
        gs[layer.weight] = gsample
    elif isinstance(layer, nn.LayerNorm):
        normed = F.layer_norm(activations, layer.normalized_shape, eps=layer.eps)
        gs[layer.weight] = sum_over_all_but_batch_and_last_n_dims(normed * backprops, layer.weight.dim())
        gs[layer.bias] = sum_over_all_but_batch_and_last_n_dims(backprops, layer.bias.dim())
    elif isinstance(layer, nn.GroupNorm):
        normed = F.group_norm(activations, layer.num_groups, eps=layer.eps)
        gs[layer.weight] = torch.einsum("ni...->ni", normed * backprops)
        gs[layer.bias] = torch.einsum("ni...->ni", backprops)
    return gs


class GradSampleHooks:
    SUPPORTED = (nn.Linear, nn.Conv2d, nn.Embedding, nn.LayerNorm, nn.GroupNorm)

    def __init__(self, model):
        self.model = model
        self.enabled = True
        self.handles = []
        for m in model.modules():
            if isinstance(m, self.SUPPORTED):
                self.handles.append(m.register_forward_hook(self.capture_activations))
                self.handles.append(m.register_full_backward_hook(self.capture_backprops))

    def capture_activations(self, module, inputs, output):
        if not self.enabled or not torch.is_grad_enabled():
            return
        if not hasattr(module, "activations"):
            module.activations = []
        module.activations.append(inputs[0].detach())

    def capture_backprops(self, module, grad_input, grad_output):
        activations = module.activations.pop()
        for p, g in compute_grad_sample(module, activations, grad_output[0].detach()).items():
            if getattr(p, "grad_sample", None) is None:
                p.grad_sample = g
            else:
                p.grad_sample += g


class DPOptimizer:
    def __init__(self, optimizer, params, expected_batch_size):
        self.optimizer = optimizer
        self.params = list(params)
        self.expected_batch_size = expected_batch_size

    def step(self):
        norms = torch.stack([p.grad_sample.flatten(1).norm(2, dim=-1) for p in self.params], dim=1).norm(
            2, dim=1
        )
        factors = (C / (norms + 1e-6)).clamp(max=1.0)
        for p in self.params:
            summed = torch.einsum("i,i...", factors, p.grad_sample)
            noise = torch.normal(0, SIGMA * C, size=summed.shape, device=summed.device)
            p.grad = (summed + noise) / self.expected_batch_size
            p.grad_sample = None
        self.optimizer.step()
        return norms

    def zero_grad(self):
        self.optimizer.zero_grad(set_to_none=True)
        for p in self.params:
            p.grad_sample = None


class TextModel(nn.Module):
    def __init__(self, vocab, dim=128, hidden=512, classes=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.ln0 = nn.LayerNorm(dim)
        self.ln1 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens):
        h = self.ln0(self.emb(tokens))
        h = h + self.fc2(F.gelu(self.fc1(self.ln1(h))))
        return self.head(h.mean(dim=1))


class ImageModel(nn.Module):
    def __init__(self, classes=100):
        super().__init__()
        chans = [3, 64, 128, 128, 256]
        layers = []
        for i in range(4):
            layers += [
                nn.Conv2d(chans[i], chans[i + 1], 3, padding=1),
                nn.GroupNorm(32, chans[i + 1]),
                nn.ReLU(),
            ]
            if i < 3:
                layers.append(nn.AvgPool2d(2))
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(256, classes)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))


text = TextModel(VOCAB).to(device)
text_hooks = GradSampleHooks(text)
text_opt = DPOptimizer(torch.optim.Adam(text.parameters(), lr=1e-3), text.parameters(), B)
print(f"text params {sum(p.numel() for p in text.parameters())}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

text.train()
for step in range(4):
    tokens = torch.randint(0, VOCAB, (B, T), device=device)
    labels = torch.randint(0, 2, (B,), device=device)
    loss = F.cross_entropy(text(tokens), labels)
    loss.backward()
    norms = text_opt.step()
    text_opt.zero_grad()
    print(f"text step {step} loss {loss.item():.4f} mean norm {norms.mean().item():.3f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del tokens, labels, loss, norms
if device == "cuda":
    print(f"text peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

image = ImageModel().to(device)
image_hooks = GradSampleHooks(image)
image_opt = DPOptimizer(torch.optim.SGD(image.parameters(), lr=0.1, momentum=0.9), image.parameters(), IB)
image.train()
for step in range(3):
    x = torch.randn(IB, 3, RES, RES, device=device)
    y = torch.randint(0, 100, (IB,), device=device)
    loss = F.cross_entropy(image(x), y)
    loss.backward()
    norms = image_opt.step()
    image_opt.zero_grad()
    print(f"image step {step} loss {loss.item():.4f} mean norm {norms.mean().item():.3f}")
del x, y, loss, norms
if device == "cuda":
    print(f"image peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

text.eval()
image.eval()
text_hooks.enabled = image_hooks.enabled = False
with torch.inference_mode():
    tokens = torch.randint(0, VOCAB, (4 * B, T), device=device)
    text_pred = text(tokens).argmax(-1)
    x = torch.randn(4 * IB, 3, RES, RES, device=device)
    image_pred = image(x).argmax(-1)
print(f"eval positives {text_pred.sum().item()} image classes {image_pred.unique().numel()}")
if device == "cuda":
    print(
        f"eval allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
