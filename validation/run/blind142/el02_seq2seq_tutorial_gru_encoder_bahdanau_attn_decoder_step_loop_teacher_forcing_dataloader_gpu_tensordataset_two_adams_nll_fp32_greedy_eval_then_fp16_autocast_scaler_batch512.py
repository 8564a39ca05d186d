"""The pytorch.org "NLP from scratch: translation with a sequence to sequence network and
attention" tutorial as written: French-to-English pairs of at most 10 tokens (the tutorial's
filtered eng-fra set: 11,445 pairs, 4,345 French and 2,803 English words) replaced by seeded random
token ids padded with zeros after EOS, held as a TensorDataset of CUDA tensors behind a DataLoader
with a RandomSampler at batch 32; the EncoderRNN (Embedding, dropout 0.1, batch-first GRU, hidden
128) and the AttnDecoderRNN with Bahdanau attention (Wa, Ua, Va, softmax, bmm) decoding 10 steps one
at a time with teacher forcing, `log_softmax`, NLLLoss and one Adam (lr 0.001) each, fp32; then
greedy decoding of 1,000 sentences under no_grad (topk(1) fed back); then the same models trained
further at batch 512 under fp16 autocast with one GradScaler for both optimizers; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim
from torch.utils.data import DataLoader, RandomSampler, TensorDataset

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14202)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
SOS_token, EOS_token, MAX_LENGTH = 0, 1, 10
N_PAIRS, IN_WORDS, OUT_WORDS = (200, 50, 40) if SMALL else (11445, 4345, 2803)
hidden_size, batch_size = (16, 8) if SMALL else (128, 32)
STEPS, BIG_BATCH, BIG_STEPS, N_EVAL = (3, 16, 2, 20) if SMALL else (60, 512, 8, 1000)


class EncoderRNN(nn.Module):
    def __init__(self, input_size, hidden_size, dropout_p=0.1):
        super().__init__()
        self.hidden_size = hidden_size
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, input):
        embedded = self.dropout(self.embedding(input))
        output, hidden = self.gru(embedded)
        return output, hidden


class BahdanauAttention(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.Wa = nn.Linear(hidden_size, hidden_size)
        self.Ua = nn.Linear(hidden_size, hidden_size)
        self.Va = nn.Linear(hidden_size, 1)

    def forward(self, query, keys):
        scores = self.Va(torch.tanh(self.Wa(query) + self.Ua(keys)))
        scores = scores.squeeze(2).unsqueeze(1)
        weights = F.softmax(scores, dim=-1)
        context = torch.bmm(weights, keys)
        return context, weights


class AttnDecoderRNN(nn.Module):
    def __init__(self, hidden_size, output_size, dropout_p=0.1):
        super().__init__()
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.attention = BahdanauAttention(hidden_size)
        self.gru = nn.GRU(2 * hidden_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, output_size)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, encoder_outputs, encoder_hidden, target_tensor=None):
        batch_size = encoder_outputs.size(0)
        decoder_input = torch.empty(batch_size, 1, dtype=torch.long, device=device).fill_(SOS_token)
        decoder_hidden = encoder_hidden
        decoder_outputs = []
        attentions = []
        for i in range(MAX_LENGTH):
            decoder_output, decoder_hidden, attn_weights = self.forward_step(
                decoder_input, decoder_hidden, encoder_outputs
            )
            decoder_outputs.append(decoder_output)
            attentions.append(attn_weights)
            if target_tensor is not None:
                decoder_input = target_tensor[:, i].unsqueeze(1)  # Teacher forcing
            else:
                _, topi = decoder_output.topk(1)
                decoder_input = topi.squeeze(-1).detach()
        decoder_outputs = torch.cat(decoder_outputs, dim=1)
        decoder_outputs = F.log_softmax(decoder_outputs, dim=-1)
        attentions = torch.cat(attentions, dim=1)
        return decoder_outputs, decoder_hidden, attentions

    def forward_step(self, input, hidden, encoder_outputs):
        embedded = self.dropout(self.embedding(input))
        query = hidden.permute(1, 0, 2)
        context, attn_weights = self.attention(query, encoder_outputs)
        input_gru = torch.cat((embedded, context), dim=2)
        output, hidden = self.gru(input_gru, hidden)
        output = self.out(output)
        return output, hidden, attn_weights


def random_ids(n, vocab):
    lengths = torch.randint(3, MAX_LENGTH, (n,))
    ids = torch.randint(2, vocab, (n, MAX_LENGTH))
    pos = torch.arange(MAX_LENGTH).unsqueeze(0)
    ids = torch.where(pos < lengths.unsqueeze(1), ids, torch.zeros_like(ids))
    ids[torch.arange(n), lengths] = EOS_token
    return ids


def report(tag):
    if device.type == "cuda":
        print(f"{tag} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


input_ids, target_ids = random_ids(N_PAIRS, IN_WORDS), random_ids(N_PAIRS, OUT_WORDS)
train_data = TensorDataset(torch.LongTensor(input_ids).to(device), torch.LongTensor(target_ids).to(device))
train_dataloader = DataLoader(train_data, sampler=RandomSampler(train_data), batch_size=batch_size)
encoder = EncoderRNN(IN_WORDS, hidden_size).to(device)
decoder = AttnDecoderRNN(hidden_size, OUT_WORDS).to(device)
encoder_optimizer = optim.Adam(encoder.parameters(), lr=0.001)
decoder_optimizer = optim.Adam(decoder.parameters(), lr=0.001)
criterion = nn.NLLLoss()
report("setup")

total_loss = 0.0
for step, data in enumerate(train_dataloader):
    if step == STEPS:
        break
    input_tensor, target_tensor = data
    encoder_optimizer.zero_grad()
    decoder_optimizer.zero_grad()
    encoder_outputs, encoder_hidden = encoder(input_tensor)
    decoder_outputs, _, _ = decoder(encoder_outputs, encoder_hidden, target_tensor)
    loss = criterion(decoder_outputs.view(-1, decoder_outputs.size(-1)), target_tensor.view(-1))
    loss.backward()
    encoder_optimizer.step()
    decoder_optimizer.step()
    total_loss += loss.item()
print(f"train loss {total_loss / STEPS:.4f}")
report("train")

encoder.eval()
decoder.eval()
with torch.no_grad():
    input_tensor = train_data.tensors[0][:N_EVAL]
    encoder_outputs, encoder_hidden = encoder(input_tensor)
    decoder_outputs, decoder_hidden, decoder_attn = decoder(encoder_outputs, encoder_hidden)
    _, topi = decoder_outputs.topk(1)
    decoded_ids = topi.squeeze()
    words = decoded_ids.cpu()
print(f"decoded {tuple(words.shape)} attention {tuple(decoder_attn.shape)}")
del encoder_outputs, encoder_hidden, decoder_outputs, decoder_hidden, decoder_attn, topi, decoded_ids
report("greedy")

encoder.train()
decoder.train()
big_loader = DataLoader(train_data, sampler=RandomSampler(train_data), batch_size=BIG_BATCH)
scaler = torch.amp.GradScaler("cuda", enabled=device.type == "cuda")
for step, (input_tensor, target_tensor) in enumerate(big_loader):
    if step == BIG_STEPS:
        break
    encoder_optimizer.zero_grad()
    decoder_optimizer.zero_grad()
    with torch.autocast(device.type, dtype=torch.float16, enabled=device.type == "cuda"):
        encoder_outputs, encoder_hidden = encoder(input_tensor)
        decoder_outputs, _, _ = decoder(encoder_outputs, encoder_hidden, target_tensor)
        loss = criterion(decoder_outputs.view(-1, decoder_outputs.size(-1)), target_tensor.view(-1))
    scaler.scale(loss).backward()
    scaler.step(encoder_optimizer)
    scaler.step(decoder_optimizer)
    scaler.update()
    if step == 0:
        report("amp_first")
print(f"amp loss {loss.item():.4f}")
report("amp")
