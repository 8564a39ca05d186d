"""A word-level language model written in the 2017 style of PyTorch's word_language_model example, with
the legacy tensor types: torch.set_default_tensor_type(torch.cuda.FloatTensor) at the top (deprecated,
still allowed in torch 2.11), so the model's parameters are created on the GPU; batches built as
torch.cuda.LongTensor(bsz, bptt) filled by random_() with a fixed seed; the hidden state made by
weight.new(nlayers, bsz, nhid).zero_(); locked (variational) dropout masks made with
torch.cuda.FloatTensor(1, bsz, ninp).bernoulli_(keep) / keep; a 2-layer LSTM (embedding 512, hidden 1024,
vocab 33278 as WikiText-2, tied weights are not used, dropout 0.3), truncated BPTT with the hidden state
detached between batches, plain SGD with clip_grad_norm_ 0.25. Sizes never follow data values.

Phases: 6 fp32 training steps at batch 40 x bptt 70; an evaluation under no_grad at batch 10 x 140 in
fp32; the model converted with .type(torch.cuda.HalfTensor) and evaluated in half at batch 40 x 140 (the
hidden state made by weight.new(...).zero_() in half, logits .float() before log_softmax); the default
type restored to torch.FloatTensor at the end. 3 phases."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2325)
torch.set_default_tensor_type(torch.cuda.FloatTensor)
NTOKEN, NINP, NHID, NLAYERS, DROPOUT = 33278, 512, 1024, 2, 0.3


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class RNNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(NTOKEN, NINP)
        self.rnn = nn.LSTM(NINP, NHID, NLAYERS, dropout=DROPOUT)
        self.decoder = nn.Linear(NHID, NTOKEN)
        self.encoder.weight.data.uniform_(-0.1, 0.1)
        self.decoder.bias.data.zero_()
        self.decoder.weight.data.uniform_(-0.1, 0.1)

    def locked_dropout(self, x):
        if not self.training:
            return x
        keep = 1 - DROPOUT
        mask = torch.cuda.FloatTensor(1, x.size(1), x.size(2)).bernoulli_(keep) / keep
        return x * mask.type_as(x)

    def forward(self, input, hidden):
        emb = self.locked_dropout(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.locked_dropout(output)
        decoded = self.decoder(output.view(output.size(0) * output.size(1), output.size(2)))
        return decoded.view(output.size(0), output.size(1), decoded.size(1)), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters()).data
        return (weight.new(NLAYERS, bsz, NHID).zero_(), weight.new(NLAYERS, bsz, NHID).zero_())


def get_batch(bsz, bptt):
    data = torch.cuda.LongTensor(bptt + 1, bsz).random_(0, NTOKEN)
    return data[:-1], data[1:].contiguous().view(-1)


def main():
    model = RNNModel()
    lr = 20.0
    model.train()
    hidden = model.init_hidden(40)
    for _ in range(6):
        data, targets = get_batch(40, 70)
        hidden = tuple(h.detach() for h in hidden)
        model.zero_grad()
        output, hidden = model(data, hidden)
        loss = F.cross_entropy(output.view(-1, NTOKEN), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
    print("train ppl", math.exp(min(float(loss), 20)))
    report("train_legacy_types")

    model.eval()
    total = 0.0
    with torch.no_grad():
        hidden = model.init_hidden(10)
        for _ in range(3):
            data, targets = get_batch(10, 140)
            output, hidden = model(data, hidden)
            total += float(F.cross_entropy(output.view(-1, NTOKEN), targets))
    print("eval loss", total / 3)
    report("eval_fp32_b10")

    model = model.type(torch.cuda.HalfTensor)
    with torch.no_grad():
        hidden = model.init_hidden(40)
        data, targets = get_batch(40, 140)
        output, hidden = model(data, hidden)
        loss = F.cross_entropy(F.log_softmax(output.view(-1, NTOKEN).float(), dim=-1), targets)
        print("half eval", float(loss), output.dtype)
        del output
    torch.set_default_tensor_type(torch.FloatTensor)
    report("eval_half_type_b40")


if __name__ == "__main__":
    main()
