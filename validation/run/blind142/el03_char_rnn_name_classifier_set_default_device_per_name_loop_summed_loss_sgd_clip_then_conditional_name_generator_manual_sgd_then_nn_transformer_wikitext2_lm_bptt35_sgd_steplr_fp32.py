"""Three pytorch.org NLP tutorials as written, one after another in one process: "classifying
names with a character-level RNN" (the 2024 version: `torch.set_default_device("cuda")`, each name
one-hot encoded letter by letter into a (length, 1, 58) tensor, CharRNN of nn.RNN(58, 128), Linear
and LogSoftmax over 18 languages, each mini-batch of 64 names run one name at a time with the NLLLoss
summed before one backward, `clip_grad_norm_` at 3, SGD at lr 0.2; seeded random names of 3 to 11
letters in place of the 20,074 downloaded ones) and its confusion matrix under no_grad; "generating
names with a character-level RNN" (i2h, i2o, o2o Linears on the category, letter and hidden
concatenated, dropout 0.1, LogSoftmax, NLLLoss summed over the letters, the update written as
`p.data.add_(p.grad.data, alpha=-lr)`) and sampling 20 letters for each of 18 categories; then
"language modeling with nn.Transformer" (WikiText-2's 2,049,990 train and 214,417 validation tokens
over a 28,782-word vocabulary, batchified to 20 and 10 columns, bptt 35, emsize 200, 2 encoder
layers of 2 heads with d_hid 200, dropout 0.2, sequence-first, the causal mask from
`generate_square_subsequent_mask`, CrossEntropyLoss, SGD at lr 5.0, `clip_grad_norm_` at 0.5,
StepLR) trained 60 batches and evaluated on 60; fp32; 6 phases."""

import math
import os
import random
import string
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn import TransformerEncoder, TransformerEncoderLayer

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14203)
random.seed(14203)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.set_default_device(device)
N_NAMES, N_GEN_ITERS, LM_STEPS = (160, 10, 3) if SMALL else (1500, 300, 60)
N_TRAIN_TOK, N_VAL_TOK, NTOKENS = (4000, 1000, 500) if SMALL else (2049990, 214417, 28782)

allowed_characters = string.ascii_letters + " .,;'" + "_"
n_letters = len(allowed_characters)
languages = ["Arabic", "Chinese", "Czech", "Dutch", "English", "French", "German", "Greek", "Irish"]
languages += ["Italian", "Japanese", "Korean", "Polish", "Portuguese", "Russian", "Scottish"]
languages += ["Spanish", "Vietnamese"]


def report(tag):
    if device.type == "cuda":
        print(f"{tag} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def letterToIndex(letter):
    if letter not in allowed_characters:
        return allowed_characters.find("_")
    return allowed_characters.find(letter)


def lineToTensor(line):
    tensor = torch.zeros(len(line), 1, n_letters)
    for li, letter in enumerate(line):
        tensor[li][0][letterToIndex(letter)] = 1
    return tensor


def random_name():
    n = random.randint(3, 11)
    return random.choice(string.ascii_uppercase) + "".join(random.choices(string.ascii_lowercase, k=n - 1))


class NamesDataset:
    def __init__(self, n):
        self.labels_uniq = languages
        self.data, self.data_tensors, self.labels, self.labels_tensors = [], [], [], []
        for _ in range(n):
            name, label = random_name(), random.choice(languages)
            self.data.append(name)
            self.data_tensors.append(lineToTensor(name))
            self.labels.append(label)
            self.labels_tensors.append(torch.tensor([self.labels_uniq.index(label)], dtype=torch.long))

    def __len__(self):
        return len(self.data)

    def __getitem__(self, idx):
        return self.labels_tensors[idx], self.data_tensors[idx], self.labels[idx], self.data[idx]


class CharRNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.rnn = nn.RNN(input_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)
        self.softmax = nn.LogSoftmax(dim=1)

    def forward(self, line_tensor):
        _rnn_out, hidden = self.rnn(line_tensor)
        output = self.h2o(hidden[0])
        output = self.softmax(output)
        return output


alldata = NamesDataset(N_NAMES)
n_train = int(len(alldata) * 0.85)
train_set = [alldata[i] for i in range(n_train)]
test_set = [alldata[i] for i in range(n_train, len(alldata))]
rnn = CharRNN(n_letters, 128, len(alldata.labels_uniq))
report("names")

criterion = nn.NLLLoss()
rnn.train()
optimizer = torch.optim.SGD(rnn.parameters(), lr=0.2)
rnn.zero_grad()
batches = list(range(len(train_set)))
random.shuffle(batches)
batches = np.array_split(batches, len(batches) // 64)
current_loss = 0
for batch in batches:
    batch_loss = 0
    for i in batch:
        (label_tensor, text_tensor, label, text) = train_set[i]
        output = rnn.forward(text_tensor)
        loss = criterion(output, label_tensor)
        batch_loss += loss
    batch_loss.backward()
    nn.utils.clip_grad_norm_(rnn.parameters(), 3)
    optimizer.step()
    optimizer.zero_grad()
    current_loss += batch_loss.item() / len(batch)
print(f"classifier loss {current_loss / len(batches):.4f}")
report("classify_train")

confusion = torch.zeros(len(languages), len(languages))
rnn.eval()
with torch.no_grad():
    for i in range(len(test_set)):
        (label_tensor, text_tensor, label, text) = test_set[i]
        output = rnn(text_tensor)
        top_n, top_i = output.topk(1)
        guess_i = top_i[0].item()
        label_i = languages.index(label)
        confusion[label_i][guess_i] += 1
for i in range(len(languages)):
    denom = confusion[i].sum()
    if denom > 0:
        confusion[i] = confusion[i] / denom
print(f"confusion diagonal mean {confusion.diagonal().mean().item():.3f}")
report("classify_eval")

all_letters = string.ascii_letters + " .,;'-"
n_gen_letters = len(all_letters) + 1  # EOS
n_categories = len(languages)


class RNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.i2h = nn.Linear(n_categories + input_size + hidden_size, hidden_size)
        self.i2o = nn.Linear(n_categories + input_size + hidden_size, output_size)
        self.o2o = nn.Linear(hidden_size + output_size, output_size)
        self.dropout = nn.Dropout(0.1)
        self.softmax = nn.LogSoftmax(dim=1)

    def forward(self, category, input, hidden):
        input_combined = torch.cat((category, input, hidden), 1)
        hidden = self.i2h(input_combined)
        output = self.i2o(input_combined)
        output_combined = torch.cat((hidden, output), 1)
        output = self.o2o(output_combined)
        output = self.dropout(output)
        output = self.softmax(output)
        return output, hidden

    def initHidden(self):
        return torch.zeros(1, self.hidden_size)


def categoryTensor(category):
    tensor = torch.zeros(1, n_categories)
    tensor[0][languages.index(category)] = 1
    return tensor


def inputTensor(line):
    tensor = torch.zeros(len(line), 1, n_gen_letters)
    for li in range(len(line)):
        tensor[li][0][all_letters.find(line[li])] = 1
    return tensor


def targetTensor(line):
    letter_indexes = [all_letters.find(line[li]) for li in range(1, len(line))]
    letter_indexes.append(n_gen_letters - 1)
    return torch.LongTensor(letter_indexes)


gen = RNN(n_gen_letters, 128, n_gen_letters)
learning_rate = 0.0005
for _it in range(N_GEN_ITERS):
    line = random_name()
    category_tensor = categoryTensor(random.choice(languages))
    input_line_tensor, target_line_tensor = inputTensor(line), targetTensor(line).to(device)
    target_line_tensor.unsqueeze_(-1)
    hidden = gen.initHidden()
    gen.zero_grad()
    loss = 0
    for i in range(input_line_tensor.size(0)):
        output, hidden = gen(category_tensor, input_line_tensor[i], hidden)
        loss = loss + criterion(output, target_line_tensor[i])
    loss.backward()
    for p in gen.parameters():
        p.data.add_(p.grad.data, alpha=-learning_rate)
samples = []
with torch.no_grad():
    for category in languages:
        category_tensor = categoryTensor(category)
        input = inputTensor("A")
        hidden = gen.initHidden()
        output_name = "A"
        for _i in range(20):
            output, hidden = gen(category_tensor, input[0], hidden)
            topv, topi = output.topk(1)
            topi = int(topi[0][0])
            letter = all_letters[topi] if topi < len(all_letters) else "_"
            output_name += letter
            input = inputTensor(letter)
        samples.append(output_name)
print(f"generated {len(samples)} names")
report("generate")


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):
        x = x + self.pe[: x.size(0)]
        return self.dropout(x)


class TransformerModel(nn.Module):
    def __init__(self, ntoken, d_model, nhead, d_hid, nlayers, dropout=0.5):
        super().__init__()
        self.model_type = "Transformer"
        self.pos_encoder = PositionalEncoding(d_model, dropout)
        encoder_layers = TransformerEncoderLayer(d_model, nhead, d_hid, dropout)
        self.transformer_encoder = TransformerEncoder(encoder_layers, nlayers)
        self.embedding = nn.Embedding(ntoken, d_model)
        self.d_model = d_model
        self.linear = nn.Linear(d_model, ntoken)
        self.init_weights()

    def init_weights(self):
        initrange = 0.1
        self.embedding.weight.data.uniform_(-initrange, initrange)
        self.linear.bias.data.zero_()
        self.linear.weight.data.uniform_(-initrange, initrange)

    def forward(self, src, src_mask=None):
        src = self.embedding(src) * math.sqrt(self.d_model)
        src = self.pos_encoder(src)
        if src_mask is None:
            src_mask = nn.Transformer.generate_square_subsequent_mask(len(src)).to(device)
        output = self.transformer_encoder(src, src_mask)
        output = self.linear(output)
        return output


def batchify(data, bsz):
    seq_len = data.size(0) // bsz
    data = data[: seq_len * bsz]
    data = data.view(bsz, seq_len).t().contiguous()
    return data.to(device)


bptt = 35


def get_batch(source, i):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i : i + seq_len]
    target = source[i + 1 : i + 1 + seq_len].reshape(-1)
    return data, target


train_data = batchify(torch.randint(0, NTOKENS, (N_TRAIN_TOK,), device="cpu"), 20)
val_data = batchify(torch.randint(0, NTOKENS, (N_VAL_TOK,), device="cpu"), 10)
model = TransformerModel(NTOKENS, 200, 2, 200, 2, 0.2).to(device)
criterion = nn.CrossEntropyLoss()
lr = 5.0
optimizer = torch.optim.SGD(model.parameters(), lr=lr)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1.0, gamma=0.95)
model.train()
total_loss = 0.0
start_time = time.time()
for i in range(0, LM_STEPS * bptt, bptt):
    data, targets = get_batch(train_data, i)
    output = model(data)
    output_flat = output.view(-1, NTOKENS)
    loss = criterion(output_flat, targets)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    optimizer.step()
    total_loss += loss.item()
ms_per_batch = (time.time() - start_time) * 1000 / LM_STEPS
print(f"lm train loss {total_loss / LM_STEPS:.2f} ms/batch {ms_per_batch:.1f}")
scheduler.step()
report("lm_train")

model.eval()
total_loss = 0.0
with torch.no_grad():
    for i in range(0, LM_STEPS * bptt, bptt):
        data, targets = get_batch(val_data, i)
        seq_len = data.size(0)
        output = model(data)
        output_flat = output.view(-1, NTOKENS)
        total_loss += seq_len * criterion(output_flat, targets).item()
print(f"valid ppl {math.exp(min(total_loss / (LM_STEPS * bptt), 50)):.1f}")
report("lm_eval")
