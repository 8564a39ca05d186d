"""The Temporal Fusion Transformer after Lim et al. 2021 and pytorch-forecasting's
TemporalFusionTransformer (sub_modules.py), written by hand, on a retail-demand-shaped batch
(encoder length 168, decoder length 24, batch 256): static variables (store 1,000, product category
50 and region 20 as nn.Embedding columns, a log-scale real), time-varying known inputs (hour 24 and
weekday 7 embeddings; time index, price and promotion reals) and time-varying unknown reals (the
target and 3 lags); reals prescaled by Linear(1, 16); variable selection networks (one
GatedResidualNetwork per variable, a flattened GRN with the static context giving softmax weights);
4 static covariate encoders (GRNs for the selection context, the LSTM's initial hidden and cell
states and the enrichment context); a 2-layer LSTM encoder and decoder of hidden 160 (nn.LSTM, cuDNN,
dropout 0.1) started from the static states; GateAddNorm (dropout, Linear to 2 x 160, F.glu, a
trainable-gated skip, LayerNorm) after the LSTM, the static enrichment GRN, interpretable multi-head
attention of 4 heads (per-head query and key Linears, one shared value Linear, bmm, the causal and
encoder-length mask by masked_fill, softmax, the heads averaged), the position-wise GRN and the
quantile output (7 quantiles, the pinball loss). fp32, RAdam (lr 3e-3; pytorch-forecasting's Ranger
is RAdam + Lookahead), clip_grad_norm_ at 0.1, ReduceLROnPlateau on the training loss; the first step
its own phase, then 3 steps; then validation of 2 batches of 256 under no_grad that also returns the
attention weights and the variable-selection weights; then the prediction of 2,048 series in
batches of 1,024 under inference_mode (quantiles gathered by torch.cat); 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17404)
if SMALL:
    B, ENC, DEC, HID, HEADS, CONT, STEPS, VAL_N, PRED_N, PRED_B = 4, 12, 4, 16, 4, 4, 2, 1, 8, 4
else:
    B, ENC, DEC, HID, HEADS, CONT, STEPS, VAL_N, PRED_N, PRED_B = 256, 168, 24, 160, 4, 16, 4, 2, 2048, 1024
QUANTILES = [0.02, 0.1, 0.25, 0.5, 0.75, 0.9, 0.98]
STATIC_CATS = {"store": 1000, "category": 50, "region": 20}
STATIC_REALS = ["log_scale"]
KNOWN_CATS = {"hour": 24, "weekday": 7}
KNOWN_REALS = ["time_idx", "price", "promo"]
UNKNOWN_REALS = ["target", "lag_24", "lag_48", "lag_168"]
device = "cuda" if torch.cuda.is_available() else "cpu"


def emb_size(n):
    return min(round(1.6 * n**0.56), HID)


class GatedLinearUnit(nn.Module):
    def __init__(self, input_size, hidden_size, dropout):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(input_size, hidden_size * 2)

    def forward(self, x):
        return F.glu(self.fc(self.dropout(x)), dim=-1)


class AddNorm(nn.Module):
    def __init__(self, input_size, skip_size, trainable_add=True):
        super().__init__()
        self.resample = nn.Linear(skip_size, input_size) if skip_size != input_size else None
        self.trainable_add = trainable_add
        if trainable_add:
            self.mask = nn.Parameter(torch.zeros(input_size))
            self.gate = nn.Sigmoid()
        self.norm = nn.LayerNorm(input_size)

    def forward(self, x, skip):
        if self.resample is not None:
            skip = self.resample(skip)
        if self.trainable_add:
            skip = skip * self.gate(self.mask) * 2.0
        return self.norm(x + skip)


class GateAddNorm(nn.Module):
    def __init__(self, input_size, hidden_size, skip_size, dropout, trainable_add=False):
        super().__init__()
        self.glu = GatedLinearUnit(input_size, hidden_size, dropout)
        self.add_norm = AddNorm(hidden_size, skip_size, trainable_add)

    def forward(self, x, skip):
        return self.add_norm(self.glu(x), skip)


class GatedResidualNetwork(nn.Module):
    def __init__(self, input_size, hidden_size, output_size, dropout=0.1, context_size=None, residual=False):
        super().__init__()
        self.residual = residual
        residual_size = input_size if residual else output_size
        self.resample_norm = None
        if input_size != output_size and not residual:
            self.resample_norm = nn.Linear(input_size, output_size)
        self.fc1 = nn.Linear(input_size, hidden_size)
        self.elu = nn.ELU()
        self.context = nn.Linear(context_size, hidden_size, bias=False) if context_size is not None else None
        self.fc2 = nn.Linear(hidden_size, hidden_size)
        self.gate_norm = GateAddNorm(hidden_size, output_size, residual_size, dropout, trainable_add=False)

    def forward(self, x, context=None, residual=None):
        if residual is None:
            residual = x
        if self.resample_norm is not None:
            residual = self.resample_norm(residual)
        x = self.fc1(x)
        if context is not None:
            x = x + self.context(context)
        x = self.fc2(self.elu(x))
        return self.gate_norm(x, residual)


class VariableSelectionNetwork(nn.Module):
    def __init__(self, input_sizes, real_names, hidden_size, dropout=0.1, context_size=None):
        super().__init__()
        self.input_sizes = input_sizes
        self.num_inputs = len(input_sizes)
        total = sum(input_sizes.values())
        self.flattened_grn = GatedResidualNetwork(
            total, min(hidden_size, self.num_inputs), self.num_inputs, dropout, context_size
        )
        self.single_variable_grns = nn.ModuleDict(
            {
                n: GatedResidualNetwork(s, min(s, hidden_size), hidden_size, dropout)
                for n, s in input_sizes.items()
            }
        )
        self.prescalers = nn.ModuleDict({n: nn.Linear(1, input_sizes[n]) for n in real_names})

    def forward(self, x, context=None):
        var_outputs, weight_inputs = [], []
        for name in self.input_sizes:
            v = x[name]
            if name in self.prescalers:
                v = self.prescalers[name](v)
            weight_inputs.append(v)
            var_outputs.append(self.single_variable_grns[name](v))
        var_outputs = torch.stack(var_outputs, dim=-1)
        flat = torch.cat(weight_inputs, dim=-1)
        sparse_weights = F.softmax(self.flattened_grn(flat, context), dim=-1).unsqueeze(-2)
        outputs = (var_outputs * sparse_weights).sum(dim=-1)
        return outputs, sparse_weights


class ScaledDotProductAttention(nn.Module):
    def __init__(self, dropout=None):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout) if dropout else None

    def forward(self, q, k, v, mask=None):
        attn = torch.bmm(q, k.permute(0, 2, 1))
        attn = attn / torch.sqrt(torch.tensor(k.size(-1), dtype=attn.dtype, device=attn.device))
        if mask is not None:
            attn = attn.masked_fill(mask, -1e9)
        attn = F.softmax(attn, dim=2)
        if self.dropout is not None:
            attn = self.dropout(attn)
        return torch.bmm(attn, v), attn


class InterpretableMultiHeadAttention(nn.Module):
    def __init__(self, n_head, d_model, dropout=0.0):
        super().__init__()
        self.n_head = n_head
        self.d_k = self.d_q = self.d_v = d_model // n_head
        self.dropout = nn.Dropout(p=dropout)
        self.v_layer = nn.Linear(d_model, self.d_v)
        self.q_layers = nn.ModuleList([nn.Linear(d_model, self.d_q) for _ in range(n_head)])
        self.k_layers = nn.ModuleList([nn.Linear(d_model, self.d_k) for _ in range(n_head)])
        self.attention = ScaledDotProductAttention()
        self.w_h = nn.Linear(self.d_v, d_model, bias=False)

    def forward(self, q, k, v, mask=None):
        heads, attns = [], []
        vs = self.v_layer(v)
        for i in range(self.n_head):
            head, attn = self.attention(self.q_layers[i](q), self.k_layers[i](k), vs, mask)
            heads.append(self.dropout(head))
            attns.append(attn)
        head = torch.stack(heads, dim=2) if self.n_head > 1 else heads[0]
        attn = torch.stack(attns, dim=2)
        outputs = torch.mean(head, dim=2) if self.n_head > 1 else head
        return self.dropout(self.w_h(outputs)), attn


class TemporalFusionTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embeddings = nn.ModuleDict(
            {n: nn.Embedding(c, emb_size(c)) for n, c in {**STATIC_CATS, **KNOWN_CATS}.items()}
        )
        static_sizes = {n: emb_size(c) for n, c in STATIC_CATS.items()} | {n: CONT for n in STATIC_REALS}
        enc_sizes = {n: emb_size(c) for n, c in KNOWN_CATS.items()} | {
            n: CONT for n in KNOWN_REALS + UNKNOWN_REALS
        }
        dec_sizes = {n: emb_size(c) for n, c in KNOWN_CATS.items()} | {n: CONT for n in KNOWN_REALS}
        self.static_variable_selection = VariableSelectionNetwork(static_sizes, STATIC_REALS, HID)
        self.encoder_variable_selection = VariableSelectionNetwork(
            enc_sizes, KNOWN_REALS + UNKNOWN_REALS, HID, context_size=HID
        )
        self.decoder_variable_selection = VariableSelectionNetwork(
            dec_sizes, KNOWN_REALS, HID, context_size=HID
        )
        self.static_context_variable_selection = GatedResidualNetwork(HID, HID, HID)
        self.static_context_initial_hidden_lstm = GatedResidualNetwork(HID, HID, HID)
        self.static_context_initial_cell_lstm = GatedResidualNetwork(HID, HID, HID)
        self.static_context_enrichment = GatedResidualNetwork(HID, HID, HID)
        self.lstm_encoder = nn.LSTM(HID, HID, num_layers=2, dropout=0.1, batch_first=True)
        self.lstm_decoder = nn.LSTM(HID, HID, num_layers=2, dropout=0.1, batch_first=True)
        self.post_lstm_gate_encoder = GateAddNorm(HID, HID, HID, dropout=0.1)
        self.post_lstm_gate_decoder = self.post_lstm_gate_encoder
        self.static_enrichment = GatedResidualNetwork(HID, HID, HID, context_size=HID)
        self.multihead_attn = InterpretableMultiHeadAttention(HEADS, HID, dropout=0.1)
        self.post_attn_gate_norm = GateAddNorm(HID, HID, HID, dropout=0.1, trainable_add=False)
        self.pos_wise_ff = GatedResidualNetwork(HID, HID, HID, dropout=0.1)
        self.pre_output_gate_norm = GateAddNorm(HID, HID, HID, dropout=0.0, trainable_add=False)
        self.output_layer = nn.Linear(HID, len(QUANTILES))

    def get_attention_mask(self, encoder_lengths, decoder_length):
        attend_step = torch.arange(decoder_length, device=encoder_lengths.device)
        predict_step = torch.arange(0, decoder_length, device=encoder_lengths.device)[:, None]
        decoder_mask = (attend_step >= predict_step).unsqueeze(0).expand(encoder_lengths.size(0), -1, -1)
        encoder_mask = (
            (torch.arange(ENC, device=encoder_lengths.device)[None, :] >= encoder_lengths[:, None])
            .unsqueeze(1)
            .expand(-1, decoder_length, -1)
        )
        return torch.cat((encoder_mask, decoder_mask), dim=2)

    def forward(self, x):
        cats, reals, encoder_lengths = x["cats"], x["reals"], x["encoder_lengths"]
        T = reals.shape[1]
        inputs = {}
        for i, n in enumerate(list(STATIC_CATS) + list(KNOWN_CATS)):
            inputs[n] = self.embeddings[n](cats[..., i])
        for i, n in enumerate(STATIC_REALS + KNOWN_REALS + UNKNOWN_REALS):
            inputs[n] = reals[..., i : i + 1]
        static_in = {n: inputs[n][:, 0] for n in list(STATIC_CATS) + STATIC_REALS}
        static_embedding, static_weights = self.static_variable_selection(static_in)
        static_context_variable_selection = self.static_context_variable_selection(static_embedding)[
            :, None
        ].expand(-1, T, -1)
        enc_in = {n: inputs[n][:, :ENC] for n in list(KNOWN_CATS) + KNOWN_REALS + UNKNOWN_REALS}
        dec_in = {n: inputs[n][:, ENC:] for n in list(KNOWN_CATS) + KNOWN_REALS}
        embeddings_varying_encoder, encoder_sparse_weights = self.encoder_variable_selection(
            enc_in, static_context_variable_selection[:, :ENC]
        )
        embeddings_varying_decoder, decoder_sparse_weights = self.decoder_variable_selection(
            dec_in, static_context_variable_selection[:, ENC:]
        )
        input_hidden = (
            self.static_context_initial_hidden_lstm(static_embedding).expand(2, -1, -1).contiguous()
        )
        input_cell = self.static_context_initial_cell_lstm(static_embedding).expand(2, -1, -1).contiguous()
        encoder_output, (hidden, cell) = self.lstm_encoder(
            embeddings_varying_encoder, (input_hidden, input_cell)
        )
        decoder_output, _ = self.lstm_decoder(embeddings_varying_decoder, (hidden, cell))
        lstm_output_encoder = self.post_lstm_gate_encoder(encoder_output, embeddings_varying_encoder)
        lstm_output_decoder = self.post_lstm_gate_decoder(decoder_output, embeddings_varying_decoder)
        lstm_output = torch.cat([lstm_output_encoder, lstm_output_decoder], dim=1)
        static_context_enrichment = self.static_context_enrichment(static_embedding)
        attn_input = self.static_enrichment(lstm_output, static_context_enrichment[:, None].expand(-1, T, -1))
        attn_output, attn_output_weights = self.multihead_attn(
            q=attn_input[:, ENC:],
            k=attn_input,
            v=attn_input,
            mask=self.get_attention_mask(encoder_lengths, T - ENC),
        )
        attn_output = self.post_attn_gate_norm(attn_output, attn_input[:, ENC:])
        output = self.pos_wise_ff(attn_output)
        output = self.pre_output_gate_norm(output, lstm_output[:, ENC:])
        return (
            self.output_layer(output),
            attn_output_weights,
            (static_weights, encoder_sparse_weights, decoder_sparse_weights),
        )


def quantile_loss(y_pred, target):
    losses = []
    for i, q in enumerate(QUANTILES):
        errors = target - y_pred[..., i]
        losses.append(torch.max((q - 1) * errors, q * errors).unsqueeze(-1))
    return 2 * torch.cat(losses, dim=2).mean()


def batch(bs):
    T = ENC + DEC
    hour0 = torch.randint(0, 24, (bs, 1), device=device)
    steps = torch.arange(T, device=device)[None, :]
    cats = torch.stack(
        [
            torch.randint(0, 1000, (bs, 1), device=device).expand(-1, T),
            torch.randint(0, 50, (bs, 1), device=device).expand(-1, T),
            torch.randint(0, 20, (bs, 1), device=device).expand(-1, T),
            (hour0 + steps) % 24,
            ((hour0 + steps) // 24) % 7,
        ],
        dim=-1,
    )
    target = (
        torch.rand(bs, 1, device=device) * 3
        + torch.sin((hour0 + steps) * 0.2618)
        + 0.2 * torch.randn(bs, T, device=device)
    )
    reals = torch.stack(
        [
            torch.rand(bs, 1, device=device).expand(-1, T),
            steps.float().expand(bs, -1) / T,
            torch.randn(bs, T, device=device),
            (torch.rand(bs, T, device=device) < 0.1).float(),
            target,
            target.roll(24, 1),
            target.roll(48, 1),
            target.roll(168, 1) if T > 168 else target.roll(1, 1),
        ],
        dim=-1,
    )
    reals[:, ENC:, 4:] = 0.0  # unknown reals are not fed to the decoder
    encoder_lengths = torch.full((bs,), ENC, device=device, dtype=torch.long) - torch.randint(
        0, ENC // 4, (bs,), device=device
    )
    return {"cats": cats, "reals": reals, "encoder_lengths": encoder_lengths}, target[:, ENC:]


model = TemporalFusionTransformer().to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")
optimizer = torch.optim.RAdam(model.parameters(), lr=3e-3)
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    x, y = batch(B)
    out, _, _ = model(x)
    loss = quantile_loss(out, y)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    optimizer.step()
    scheduler.step(loss.item())
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del out, loss, x, y
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
val_losses, attentions = [], []
with torch.no_grad():
    for _ in range(VAL_N):
        x, y = batch(B)
        out, attn, (sw, ew, dw) = model(x)
        val_losses.append(quantile_loss(out, y))
        attentions.append(attn.mean(dim=(0, 1, 2)))
    importance = ew.squeeze(-2).mean(dim=(0, 1))
print(f"val loss {torch.stack(val_losses).mean().item():.4f} encoder importance {importance.shape[0]}")
del out, attn, x, y
if device == "cuda":
    print(f"val peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

predictions = []
with torch.inference_mode():
    for _ in range(PRED_N // PRED_B):
        x, _ = batch(PRED_B)
        out, _, _ = model(x)
        predictions.append(out)
    predictions = torch.cat(predictions)
print(f"predictions {tuple(predictions.shape)} median {predictions[..., 3].mean().item():.3f}")
if device == "cuda":
    print(
        f"predict allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
