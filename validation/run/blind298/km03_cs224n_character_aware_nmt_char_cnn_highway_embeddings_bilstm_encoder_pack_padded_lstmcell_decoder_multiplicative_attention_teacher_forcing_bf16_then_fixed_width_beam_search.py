"""CS224n assignments 4 and 5, neural machine translation with character-aware word embeddings, as
the starter code lays it out (Spanish-to-English sizes, synthetic sentences of padded character ids).

Source and target words are embedded from their characters: a character embedding of 50, a Conv1d
of kernel 5 over each word's 21 characters, ReLU and max over time, then a highway layer
(sigmoid gate mixing a ReLU projection with the input) and dropout, giving word vectors of 256.
The encoder is a bidirectional nn.LSTM over source sentences sorted by length and packed with
pack_padded_sequence (hidden 512); its final states, concatenated, are projected to the decoder's
initial state. The decoder is an nn.LSTMCell stepping over the target with the previous combined
output fed back (input feeding), multiplicative attention (enc_hiddens_proj = W_att enc_hiddens,
e_t = bmm(enc_hiddens_proj, h_t)), masked with -inf at source padding, softmax, the attention
vector and the combined output tanh(W_u [a_t; h_t]), dropout, then a target-vocabulary projection
and log_softmax; the loss gathers the gold words' log-probabilities (teacher forcing) with target
padding masked out.
Phases: (1) model build and 10 Adam steps at batch 64 with clip_grad_norm_ (fp32); (2) 10 more
steps under bf16 autocast; (3) dev perplexity under no_grad over 4 batches of 128; (4) beam search
of width 5 for 4 source sentences one at a time, 30 decoding steps each, hypotheses expanded by topk
over the flattened (hypotheses x vocabulary) scores (the starter code's "top_cand_hyp_pos //
len(vocab)"); no hypothesis completes early, so every sentence takes every step. 4 phases."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

torch.manual_seed(29803)
device = "cuda" if torch.cuda.is_available() else "cpu"
SRC_V, TGT_V, CHAR_V, MAX_WORD, E_CHAR, E_WORD, H = 50000, 40000, 96, 21, 50, 256, 512
B, SRC_MAX, TGT_MAX, BEAM, DECODE_STEPS = 64, 48, 50, 5, 30


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


class Highway(nn.Module):
    def __init__(self, e):
        super().__init__()
        self.proj = nn.Linear(e, e)
        self.gate = nn.Linear(e, e)

    def forward(self, x):
        x_proj = F.relu(self.proj(x))
        x_gate = torch.sigmoid(self.gate(x))
        return x_gate * x_proj + (1 - x_gate) * x


class CNN(nn.Module):
    def __init__(self, e_char, e_word, k=5):
        super().__init__()
        self.conv = nn.Conv1d(e_char, e_word, kernel_size=k, padding=1)

    def forward(self, x):
        return torch.max(F.relu(self.conv(x)), dim=2)[0]


class ModelEmbeddings(nn.Module):
    def __init__(self, word_embed_size):
        super().__init__()
        self.char_embed = nn.Embedding(CHAR_V, E_CHAR, padding_idx=0)
        self.cnn = CNN(E_CHAR, word_embed_size)
        self.highway = Highway(word_embed_size)
        self.dropout = nn.Dropout(0.3)

    def forward(self, chars):  # (sentence_length, batch, max_word_length)
        L, b, w = chars.shape
        x = self.char_embed(chars.reshape(L * b, w)).transpose(1, 2)
        x = self.highway(self.cnn(x))
        return self.dropout(x).reshape(L, b, -1)


class NMT(nn.Module):
    def __init__(self):
        super().__init__()
        self.src_emb = ModelEmbeddings(E_WORD)
        self.tgt_emb = ModelEmbeddings(E_WORD)
        self.encoder = nn.LSTM(E_WORD, H, bidirectional=True)
        self.decoder = nn.LSTMCell(E_WORD + H, H)
        self.h_projection = nn.Linear(2 * H, H, bias=False)
        self.c_projection = nn.Linear(2 * H, H, bias=False)
        self.att_projection = nn.Linear(2 * H, H, bias=False)
        self.combined_output_projection = nn.Linear(3 * H, H, bias=False)
        self.target_vocab_projection = nn.Linear(H, TGT_V, bias=False)
        self.dropout = nn.Dropout(0.3)

    def encode(self, src_chars, lengths):
        X = self.src_emb(src_chars)
        packed = pack_padded_sequence(X, lengths)
        enc_hiddens, (last_hidden, last_cell) = self.encoder(packed)
        enc_hiddens = pad_packed_sequence(enc_hiddens)[0].permute(1, 0, 2)
        h0 = self.h_projection(torch.cat((last_hidden[0], last_hidden[1]), 1))
        c0 = self.c_projection(torch.cat((last_cell[0], last_cell[1]), 1))
        return enc_hiddens, (h0, c0)

    def step(self, Ybar_t, dec_state, enc_hiddens, enc_hiddens_proj, enc_masks):
        dec_state = self.decoder(Ybar_t, dec_state)
        dec_hidden, _ = dec_state
        e_t = torch.bmm(enc_hiddens_proj, dec_hidden.unsqueeze(2)).squeeze(2)
        if enc_masks is not None:
            e_t.data.masked_fill_(enc_masks.bool(), -float("inf"))
        alpha_t = F.softmax(e_t, dim=1)
        a_t = torch.bmm(alpha_t.unsqueeze(1), enc_hiddens).squeeze(1)
        U_t = torch.cat((a_t, dec_hidden), 1)
        O_t = self.dropout(torch.tanh(self.combined_output_projection(U_t)))
        return dec_state, O_t

    def decode(self, enc_hiddens, enc_masks, dec_init_state, tgt_chars):
        tgt_chars = tgt_chars[:-1]
        dec_state = dec_init_state
        b = enc_hiddens.size(0)
        o_prev = torch.zeros(b, H, device=enc_hiddens.device)
        combined_outputs = []
        enc_hiddens_proj = self.att_projection(enc_hiddens)
        Y = self.tgt_emb(tgt_chars)
        for Y_t in torch.split(Y, 1, dim=0):
            Ybar_t = torch.cat((Y_t.squeeze(0), o_prev), dim=1)
            dec_state, o_t = self.step(Ybar_t, dec_state, enc_hiddens, enc_hiddens_proj, enc_masks)
            combined_outputs.append(o_t)
            o_prev = o_t
        return torch.stack(combined_outputs, dim=0)

    def forward(self, src_chars, lengths, tgt_chars, tgt_words, tgt_lengths):
        enc_hiddens, dec_init_state = self.encode(src_chars, lengths)
        enc_masks = torch.zeros(enc_hiddens.size(0), enc_hiddens.size(1), device=enc_hiddens.device)
        for i, n in enumerate(lengths):
            enc_masks[i, n:] = 1
        combined_outputs = self.decode(enc_hiddens, enc_masks, dec_init_state, tgt_chars)
        P = F.log_softmax(self.target_vocab_projection(combined_outputs).float(), dim=-1)
        target_masks = (tgt_words != 0).float()
        gold = torch.gather(P, index=tgt_words[1:].unsqueeze(-1), dim=-1).squeeze(-1) * target_masks[1:]
        return gold.sum(dim=0)


def make_batch(b, gen):
    src_len = sorted(torch.randint(8, SRC_MAX + 1, (b,), generator=gen).tolist(), reverse=True)
    tgt_len = torch.randint(8, TGT_MAX + 1, (b,), generator=gen).tolist()
    src = torch.zeros(max(src_len), b, MAX_WORD, dtype=torch.long)
    tgt_words = torch.zeros(max(tgt_len), b, dtype=torch.long)
    tgt = torch.zeros(max(tgt_len), b, MAX_WORD, dtype=torch.long)
    for i in range(b):
        wl = torch.randint(3, MAX_WORD + 1, (src_len[i],), generator=gen)
        src[: src_len[i], i] = torch.randint(1, CHAR_V, (src_len[i], MAX_WORD), generator=gen) * (
            torch.arange(MAX_WORD) < wl[:, None]
        )
        tgt[: tgt_len[i], i] = torch.randint(1, CHAR_V, (tgt_len[i], MAX_WORD), generator=gen)
        tgt_words[: tgt_len[i], i] = torch.randint(1, TGT_V, (tgt_len[i],), generator=gen)
    return src.to(device), src_len, tgt.to(device), tgt_words.to(device), tgt_len


gen = torch.Generator().manual_seed(298031)
model = NMT().to(device)
for p in model.parameters():
    p.data.uniform_(-0.1, 0.1)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for it in range(20):
    if it == 10:
        report("build and fp32 steps")
    src, src_len, tgt, tgt_words, tgt_len = make_batch(B, gen)
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda" and it >= 10):
        example_losses = -model(src, src_len, tgt, tgt_words, tgt_len)
    batch_loss = example_losses.sum()
    loss = batch_loss / B
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
print(f"train loss {loss.item():.3f}")
report("bf16 autocast steps")

model.eval()
cum_loss, cum_words = 0.0, 0
with torch.no_grad():
    for _ in range(4):
        src, src_len, tgt, tgt_words, tgt_len = make_batch(128, gen)
        cum_loss += -model(src, src_len, tgt, tgt_words, tgt_len).sum().item()
        cum_words += sum(n - 1 for n in tgt_len)
print(f"dev ppl {torch.tensor(cum_loss / cum_words).exp().item():.2f}")
report("dev perplexity")

tgt_word_chars = torch.randint(1, CHAR_V, (TGT_V, MAX_WORD), generator=gen).to(device)
with torch.no_grad():
    for _ in range(4):
        src, src_len, _, _, _ = make_batch(1, gen)
        src_encodings, dec_init_vec = model.encode(src, src_len)
        src_encodings_att_linear = model.att_projection(src_encodings)
        h_tm1 = dec_init_vec
        att_tm1 = torch.zeros(1, H, device=device)
        hypotheses = [[1]]
        hyp_scores = torch.zeros(len(hypotheses), dtype=torch.float, device=device)
        for _step in range(DECODE_STEPS):
            hyp_num = len(hypotheses)
            exp_src_encodings = src_encodings.expand(hyp_num, src_encodings.size(1), src_encodings.size(2))
            exp_src_att = src_encodings_att_linear.expand(hyp_num, *src_encodings_att_linear.shape[1:])
            y_tm1 = tgt_word_chars[torch.tensor([hyp[-1] for hyp in hypotheses], device=device)]
            y_t_embed = model.tgt_emb(y_tm1.unsqueeze(0)).squeeze(0)
            x = torch.cat([y_t_embed, att_tm1], dim=-1)
            (h_t, cell_t), att_t = model.step(x, h_tm1, exp_src_encodings, exp_src_att, enc_masks=None)
            log_p_t = F.log_softmax(model.target_vocab_projection(att_t), dim=-1)
            live_hyp_num = BEAM
            contiuating_hyp_scores = (hyp_scores.unsqueeze(1).expand_as(log_p_t) + log_p_t).view(-1)
            top_cand_hyp_scores, top_cand_hyp_pos = torch.topk(contiuating_hyp_scores, k=live_hyp_num)
            prev_hyp_ids = top_cand_hyp_pos // TGT_V
            hyp_word_ids = top_cand_hyp_pos % TGT_V
            new_hypotheses = []
            for prev_hyp_id, hyp_word_id in zip(prev_hyp_ids.tolist(), hyp_word_ids.tolist(), strict=True):
                new_hypotheses.append(hypotheses[prev_hyp_id] + [hyp_word_id])
            live_hyp_ids = torch.tensor(list(range(live_hyp_num)), dtype=torch.long, device=device)
            live_hyp_ids = prev_hyp_ids[live_hyp_ids]
            h_tm1 = (h_t[live_hyp_ids], cell_t[live_hyp_ids])
            att_tm1 = att_t[live_hyp_ids]
            hypotheses = new_hypotheses
            hyp_scores = top_cand_hyp_scores
print(f"beam search last hypotheses {len(hypotheses)} x {len(hypotheses[0])}")
report("beam search")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
