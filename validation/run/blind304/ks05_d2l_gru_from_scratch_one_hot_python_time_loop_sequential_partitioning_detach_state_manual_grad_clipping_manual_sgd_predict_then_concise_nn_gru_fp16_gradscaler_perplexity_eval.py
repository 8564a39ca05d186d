"""Dive into Deep Learning's character-level language model, chapters "Recurrent Neural Network
Implementation from Scratch" and "Gated Recurrent Units", written the way the book does: the GRU's
parameters as a list of leaf tensors from get_params (normal(0, 0.01) weights, zero biases,
requires_grad_), inputs as F.one_hot(X.T, vocab_size).float(), a Python loop over 64 time steps of
torch.sigmoid/torch.tanh matmuls collecting outputs with torch.cat, sequential partitioning of one
long corpus (the hidden state kept across minibatches with state.detach_()), the book's
grad_clipping (global norm over the parameters' grads, here as a clamp-multiplier instead of an if on
the norm) and its minibatch SGD (param -= lr * param.grad / batch_size; grad.zero_() under no_grad);
then predict_ch8-style greedy generation (warm-up over a prefix, then one character per step fed back as
a 1x1 tensor); then the concise version: RNNModel around a 2-layer nn.GRU (cuDNN) with a Linear
head, fp16 autocast with torch.amp.GradScaler, torch.optim.SGD, and a perplexity evaluation under
inference_mode over the whole corpus.

Phases: 0 corpus and parameters; 1 scratch GRU training; 2 greedy prediction; 3 concise nn.GRU
training; 4 perplexity eval."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(30405)
device = "cuda" if torch.cuda.is_available() else "cpu"
V, H, BATCH, T, CORPUS, ITERS = (28, 32, 4, 8, 2000, 2) if SMALL else (96, 1024, 256, 64, 2_000_000, 4)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


corpus = torch.randint(0, V, (CORPUS,), device=device)


def seq_data_iter_sequential(corpus, batch_size, num_steps):
    offset = 0
    num_tokens = ((len(corpus) - offset - 1) // batch_size) * batch_size
    Xs = corpus[offset : offset + num_tokens].reshape(batch_size, -1)
    Ys = corpus[offset + 1 : offset + 1 + num_tokens].reshape(batch_size, -1)
    num_batches = Xs.shape[1] // num_steps
    for i in range(0, num_steps * num_batches, num_steps):
        yield Xs[:, i : i + num_steps], Ys[:, i : i + num_steps]


def get_params(vocab_size, num_hiddens, device):
    num_inputs = num_outputs = vocab_size

    def normal(shape):
        return torch.randn(size=shape, device=device) * 0.01

    def three():
        return (
            normal((num_inputs, num_hiddens)),
            normal((num_hiddens, num_hiddens)),
            torch.zeros(num_hiddens, device=device),
        )

    W_xz, W_hz, b_z = three()
    W_xr, W_hr, b_r = three()
    W_xh, W_hh, b_h = three()
    W_hq = normal((num_hiddens, num_outputs))
    b_q = torch.zeros(num_outputs, device=device)
    params = [W_xz, W_hz, b_z, W_xr, W_hr, b_r, W_xh, W_hh, b_h, W_hq, b_q]
    for param in params:
        param.requires_grad_(True)
    return params


def init_gru_state(batch_size, num_hiddens, device):
    return (torch.zeros((batch_size, num_hiddens), device=device),)


def gru(inputs, state, params):
    W_xz, W_hz, b_z, W_xr, W_hr, b_r, W_xh, W_hh, b_h, W_hq, b_q = params
    (H_,) = state
    outputs = []
    for X in inputs:
        Z = torch.sigmoid((X @ W_xz) + (H_ @ W_hz) + b_z)
        R = torch.sigmoid((X @ W_xr) + (H_ @ W_hr) + b_r)
        H_tilda = torch.tanh((X @ W_xh) + ((R * H_) @ W_hh) + b_h)
        H_ = Z * H_ + (1 - Z) * H_tilda
        Y = H_ @ W_hq + b_q
        outputs.append(Y)
    return torch.cat(outputs, dim=0), (H_,)


class RNNModelScratch:
    def __init__(self, vocab_size, num_hiddens, device, get_params, init_state, forward_fn):
        self.vocab_size, self.num_hiddens = vocab_size, num_hiddens
        self.params = get_params(vocab_size, num_hiddens, device)
        self.init_state, self.forward_fn = init_state, forward_fn

    def __call__(self, X, state):
        X = F.one_hot(X.T, self.vocab_size).type(torch.float32)
        return self.forward_fn(X, state, self.params)

    def begin_state(self, batch_size, device):
        return self.init_state(batch_size, self.num_hiddens, device)


def grad_clipping(params, theta):
    norm = torch.sqrt(sum(torch.sum(p.grad**2) for p in params))
    coef = torch.clamp(theta / norm, max=1.0)
    for p in params:
        p.grad.mul_(coef)


def sgd(params, lr, batch_size):
    with torch.no_grad():
        for param in params:
            param -= lr * param.grad / batch_size
            param.grad.zero_()


net = RNNModelScratch(V, H, device, get_params, init_gru_state, gru)
loss_fn = nn.CrossEntropyLoss()
report("setup")

state = None
for i, (X, Y) in enumerate(seq_data_iter_sequential(corpus, BATCH, T)):
    if i == ITERS:
        break
    if state is None:
        state = net.begin_state(BATCH, device)
    else:
        for s in state:
            s.detach_()
    y = Y.T.reshape(-1)
    y_hat, state = net(X, state)
    l = loss_fn(y_hat, y.long()).mean()
    l.backward()
    grad_clipping(net.params, 1)
    sgd(net.params, lr=1.0, batch_size=1)
    print(f"scratch iter {i} ppl {math.exp(l.item()):.2f}")
report("scratch")


def predict_ch8(prefix, num_preds, net, device):
    state = net.begin_state(batch_size=1, device=device)
    outputs = [prefix[0]]

    def get_input():
        return torch.tensor([outputs[-1]], device=device).reshape((1, 1))

    for y in prefix[1:]:
        _, state = net(get_input(), state)
        outputs.append(y)
    for _ in range(num_preds):
        y, state = net(get_input(), state)
        outputs.append(int(y.argmax(dim=1).reshape(1)))
    return outputs


with torch.no_grad():
    out = predict_ch8([3, 14, 15, 9, 26, 5, 3, 5], 50, net, device)
print("predicted", len(out))
report("predict")


class RNNModel(nn.Module):
    def __init__(self, rnn_layer, vocab_size):
        super().__init__()
        self.rnn = rnn_layer
        self.vocab_size = vocab_size
        self.num_hiddens = self.rnn.hidden_size
        self.linear = nn.Linear(self.num_hiddens, self.vocab_size)

    def forward(self, inputs, state):
        X = F.one_hot(inputs.T.long(), self.vocab_size).to(torch.float32)
        Y, state = self.rnn(X, state)
        output = self.linear(Y.reshape((-1, Y.shape[-1])))
        return output, state

    def begin_state(self, device, batch_size=1):
        return torch.zeros((self.rnn.num_layers, batch_size, self.num_hiddens), device=device)


concise = RNNModel(nn.GRU(V, H, num_layers=2), V).to(device)
opt = torch.optim.SGD(concise.parameters(), lr=1.0)
scaler = torch.amp.GradScaler("cuda", init_scale=1024.0, enabled=device == "cuda")
state = None
for i, (X, Y) in enumerate(seq_data_iter_sequential(corpus, BATCH, T)):
    if i == ITERS:
        break
    state = concise.begin_state(device, BATCH) if state is None else state.detach()
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        y_hat, state = concise(X, state)
        l = loss_fn(y_hat.float(), Y.T.reshape(-1))
    opt.zero_grad()
    scaler.scale(l).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(concise.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    print(f"concise iter {i} ppl {math.exp(l.item()):.2f}")
report("concise")

concise.eval()
total, count = torch.zeros((), device=device), 0
with torch.inference_mode(), torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
    state = concise.begin_state(device, BATCH)
    for X, Y in seq_data_iter_sequential(corpus, BATCH, 4 * T):
        y_hat, state = concise(X, state)
        total += F.cross_entropy(y_hat.float(), Y.T.reshape(-1), reduction="sum")
        count += Y.numel()
print(f"eval ppl {math.exp(total.item() / count):.2f}")
report("eval")
