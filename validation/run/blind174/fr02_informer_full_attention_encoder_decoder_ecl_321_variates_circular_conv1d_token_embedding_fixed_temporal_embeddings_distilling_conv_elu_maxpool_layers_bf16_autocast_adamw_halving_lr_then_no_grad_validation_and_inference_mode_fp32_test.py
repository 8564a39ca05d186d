"""Informer after Zhou et al. 2021 and the zhouhaoyi/Informer2020 repository, written by hand with its
`attn='full'` option (ProbSparse-free: FullAttention with the triangular causal mask in the decoder's
self-attention), on an ECL-shaped problem (321 variates, seq_len 720, label_len 168, pred_len 336):
DataEmbedding = TokenEmbedding (Conv1d kernel 3, circular padding, no bias, kaiming init) + sinusoidal
PositionalEmbedding + a fixed TemporalEmbedding (sinusoid-initialised nn.Embedding tables for month,
day, weekday and hour that do not train), dropout 0.05; an encoder of 3 EncoderLayers (d_model 512, 8
heads, d_ff 2048 by kernel-1 Conv1d, GELU, LayerNorm) with the distilling ConvLayers between them
(circular Conv1d kernel 3, BatchNorm1d, ELU, MaxPool1d(3, 2, 1): 720 -> 360 -> 180); a decoder of 2
layers (masked self-attention with `mix=True`, cross-attention to the encoder, kernel-1 Conv1d
feed-forward) fed the last 168 steps and 336 zeros; a Linear projection to 321. bf16 autocast,
AdamW (lr 1e-4) with the repository's `lradj='type1'` halving by ExponentialLR(0.5) after every
"epoch" (2 steps), MSE on the last 336; batch 32; the first step its own phase, then 3 steps; then
validation of 3 batches under no_grad and autocast; then a test pass in fp32 under inference_mode at
batch 48 whose predictions are gathered by torch.cat; 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17402)
if SMALL:
    B, C, SEQ, LABEL, PRED, D, HEADS, DFF, STEPS, VAL_N, TEST_B, TEST_N = (
        2,
        3,
        48,
        12,
        24,
        32,
        4,
        64,
        2,
        1,
        2,
        1,
    )
else:
    B, C, SEQ, LABEL, PRED, D, HEADS, DFF, STEPS, VAL_N, TEST_B, TEST_N = (
        32,
        321,
        720,
        168,
        336,
        512,
        8,
        2048,
        4,
        3,
        48,
        2,
    )
E_LAYERS, D_LAYERS = 3, 2
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class TokenEmbedding(nn.Module):
    def __init__(self, c_in, d_model):
        super().__init__()
        self.tokenConv = nn.Conv1d(
            c_in, d_model, kernel_size=3, padding=1, padding_mode="circular", bias=False
        )
        nn.init.kaiming_normal_(self.tokenConv.weight, mode="fan_in", nonlinearity="leaky_relu")

    def forward(self, x):
        return self.tokenConv(x.permute(0, 2, 1)).transpose(1, 2)


class PositionalEmbedding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        pe = torch.zeros(max_len, d_model).float()
        position = torch.arange(0, max_len).float().unsqueeze(1)
        div_term = (torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model)).exp()
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x):
        return self.pe[:, : x.size(1)]


class FixedEmbedding(nn.Module):
    def __init__(self, c_in, d_model):
        super().__init__()
        w = torch.zeros(c_in, d_model).float()
        position = torch.arange(0, c_in).float().unsqueeze(1)
        div_term = (torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model)).exp()
        w[:, 0::2] = torch.sin(position * div_term)
        w[:, 1::2] = torch.cos(position * div_term)
        self.emb = nn.Embedding(c_in, d_model)
        self.emb.weight = nn.Parameter(w, requires_grad=False)

    def forward(self, x):
        return self.emb(x).detach()


class TemporalEmbedding(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.hour_embed = FixedEmbedding(24, d_model)
        self.weekday_embed = FixedEmbedding(7, d_model)
        self.day_embed = FixedEmbedding(32, d_model)
        self.month_embed = FixedEmbedding(13, d_model)

    def forward(self, x):
        x = x.long()
        return (
            self.hour_embed(x[:, :, 3])
            + self.weekday_embed(x[:, :, 2])
            + self.day_embed(x[:, :, 1])
            + self.month_embed(x[:, :, 0])
        )


class DataEmbedding(nn.Module):
    def __init__(self, c_in, d_model, dropout=0.05):
        super().__init__()
        self.value_embedding = TokenEmbedding(c_in, d_model)
        self.position_embedding = PositionalEmbedding(d_model)
        self.temporal_embedding = TemporalEmbedding(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, x_mark):
        x = self.value_embedding(x) + self.position_embedding(x) + self.temporal_embedding(x_mark)
        return self.dropout(x)


class FullAttention(nn.Module):
    def __init__(self, mask_flag=True, attention_dropout=0.05):
        super().__init__()
        self.mask_flag = mask_flag
        self.dropout = nn.Dropout(attention_dropout)

    def forward(self, queries, keys, values):
        B_, L, _, E = queries.shape
        scale = 1.0 / math.sqrt(E)
        scores = torch.einsum("blhe,bshe->bhls", queries, keys)
        if self.mask_flag:
            with torch.no_grad():
                mask = torch.triu(torch.ones([B_, 1, L, L], dtype=torch.bool), diagonal=1).to(queries.device)
            scores.masked_fill_(mask, -float("inf"))
        A = self.dropout(torch.softmax(scale * scores, dim=-1))
        V = torch.einsum("bhls,bshd->blhd", A, values)
        return V.contiguous()


class AttentionLayer(nn.Module):
    def __init__(self, attention, d_model, n_heads, mix=False):
        super().__init__()
        self.inner_attention = attention
        self.query_projection = nn.Linear(d_model, d_model)
        self.key_projection = nn.Linear(d_model, d_model)
        self.value_projection = nn.Linear(d_model, d_model)
        self.out_projection = nn.Linear(d_model, d_model)
        self.n_heads, self.mix = n_heads, mix

    def forward(self, queries, keys, values):
        B_, L, _ = queries.shape
        _, S, _ = keys.shape
        H = self.n_heads
        queries = self.query_projection(queries).view(B_, L, H, -1)
        keys = self.key_projection(keys).view(B_, S, H, -1)
        values = self.value_projection(values).view(B_, S, H, -1)
        out = self.inner_attention(queries, keys, values)
        if self.mix:
            out = out.transpose(2, 1).contiguous()
        return self.out_projection(out.view(B_, L, -1))


class ConvLayer(nn.Module):
    def __init__(self, c_in):
        super().__init__()
        self.downConv = nn.Conv1d(c_in, c_in, kernel_size=3, padding=1, padding_mode="circular")
        self.norm = nn.BatchNorm1d(c_in)
        self.activation = nn.ELU()
        self.maxPool = nn.MaxPool1d(kernel_size=3, stride=2, padding=1)

    def forward(self, x):
        x = self.downConv(x.permute(0, 2, 1))
        x = self.maxPool(self.activation(self.norm(x)))
        return x.transpose(1, 2)


class EncoderLayer(nn.Module):
    def __init__(self, attention, d_model, d_ff, dropout=0.05):
        super().__init__()
        self.attention = attention
        self.conv1 = nn.Conv1d(d_model, d_ff, kernel_size=1)
        self.conv2 = nn.Conv1d(d_ff, d_model, kernel_size=1)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.dropout(self.attention(x, x, x))
        y = x = self.norm1(x)
        y = self.dropout(F.gelu(self.conv1(y.transpose(-1, 1))))
        y = self.dropout(self.conv2(y).transpose(-1, 1))
        return self.norm2(x + y)


class Encoder(nn.Module):
    def __init__(self, attn_layers, conv_layers, norm_layer):
        super().__init__()
        self.attn_layers = nn.ModuleList(attn_layers)
        self.conv_layers = nn.ModuleList(conv_layers)
        self.norm = norm_layer

    def forward(self, x):
        for attn_layer, conv_layer in zip(self.attn_layers, self.conv_layers, strict=False):
            x = conv_layer(attn_layer(x))
        x = self.attn_layers[-1](x)
        return self.norm(x)


class DecoderLayer(nn.Module):
    def __init__(self, self_attention, cross_attention, d_model, d_ff, dropout=0.05):
        super().__init__()
        self.self_attention = self_attention
        self.cross_attention = cross_attention
        self.conv1 = nn.Conv1d(d_model, d_ff, kernel_size=1)
        self.conv2 = nn.Conv1d(d_ff, d_model, kernel_size=1)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, cross):
        x = self.norm1(x + self.dropout(self.self_attention(x, x, x)))
        y = x = self.norm2(x + self.dropout(self.cross_attention(x, cross, cross)))
        y = self.dropout(F.gelu(self.conv1(y.transpose(-1, 1))))
        y = self.dropout(self.conv2(y).transpose(-1, 1))
        return self.norm3(x + y)


class Informer(nn.Module):
    def __init__(self, enc_in, dec_in, c_out, pred_len):
        super().__init__()
        self.pred_len = pred_len
        self.enc_embedding = DataEmbedding(enc_in, D)
        self.dec_embedding = DataEmbedding(dec_in, D)
        self.encoder = Encoder(
            [EncoderLayer(AttentionLayer(FullAttention(False), D, HEADS), D, DFF) for _ in range(E_LAYERS)],
            [ConvLayer(D) for _ in range(E_LAYERS - 1)],
            nn.LayerNorm(D),
        )
        self.decoder_layers = nn.ModuleList(
            [
                DecoderLayer(
                    AttentionLayer(FullAttention(True), D, HEADS, mix=True),
                    AttentionLayer(FullAttention(False), D, HEADS, mix=False),
                    D,
                    DFF,
                )
                for _ in range(D_LAYERS)
            ]
        )
        self.decoder_norm = nn.LayerNorm(D)
        self.projection = nn.Linear(D, c_out, bias=True)

    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec):
        enc_out = self.encoder(self.enc_embedding(x_enc, x_mark_enc))
        dec_out = self.dec_embedding(x_dec, x_mark_dec)
        for layer in self.decoder_layers:
            dec_out = layer(dec_out, enc_out)
        dec_out = self.projection(self.decoder_norm(dec_out))
        return dec_out[:, -self.pred_len :, :]


def batch(bs):
    total = SEQ + PRED
    x = torch.randn(bs, total, C, device=device).cumsum(1) * 0.05
    hour = torch.randint(0, 24, (bs, 1), device=device)
    steps = torch.arange(total, device=device)[None, :]
    mark = torch.stack(
        [
            torch.randint(0, 13, (bs, total), device=device),
            torch.randint(0, 32, (bs, total), device=device),
            ((hour + steps) // 24) % 7,
            (hour + steps) % 24,
        ],
        dim=-1,
    ).float()
    batch_x, batch_x_mark = x[:, :SEQ], mark[:, :SEQ]
    batch_y, batch_y_mark = x[:, SEQ - LABEL :], mark[:, SEQ - LABEL :]
    return batch_x, batch_y, batch_x_mark, batch_y_mark


def process_one_batch(model, batch_x, batch_y, batch_x_mark, batch_y_mark):
    dec_inp = torch.zeros([batch_y.shape[0], PRED, batch_y.shape[-1]], device=device).float()
    dec_inp = torch.cat([batch_y[:, :LABEL, :], dec_inp], dim=1).float()
    outputs = model(batch_x, batch_x_mark, dec_inp, batch_y_mark)
    return outputs, batch_y[:, -PRED:, :]


model = Informer(C, C, C, PRED).to(device)
print(f"params {sum(p.numel() for p in model.parameters() if p.requires_grad)}")
model_optim = torch.optim.AdamW(model.parameters(), lr=1e-4)
scheduler = torch.optim.lr_scheduler.ExponentialLR(model_optim, gamma=0.5)
criterion = nn.MSELoss()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    model_optim.zero_grad()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        pred, true = process_one_batch(model, *batch(B))
        loss = criterion(pred.float(), true)
    loss.backward()
    model_optim.step()
    if step % 2 == 1:
        scheduler.step()
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del pred, true, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
total_loss = []
with torch.no_grad():
    for _ in range(VAL_N):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            pred, true = process_one_batch(model, *batch(B))
        total_loss.append(criterion(pred.float(), true).item())
print(f"vali loss {sum(total_loss) / len(total_loss):.4f}")
del pred, true
if device == "cuda":
    print(f"vali peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

preds, trues = [], []
with torch.inference_mode():
    for _ in range(TEST_N):
        pred, true = process_one_batch(model, *batch(TEST_B))
        preds.append(pred)
        trues.append(true)
    preds, trues = torch.cat(preds), torch.cat(trues)
    mae = torch.mean(torch.abs(preds - trues))
    mse = torch.mean((preds - trues) ** 2)
print(f"test mse {mse.item():.4f} mae {mae.item():.4f} {tuple(preds.shape)}")
if device == "cuda":
    print(
        f"test allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
