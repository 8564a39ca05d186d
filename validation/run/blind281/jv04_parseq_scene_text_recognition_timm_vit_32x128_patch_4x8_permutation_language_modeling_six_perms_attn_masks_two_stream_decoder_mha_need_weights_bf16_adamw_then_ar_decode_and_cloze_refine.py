"""PARSeq (Bautista & Atienza, scene-text recognition by permuted autoregressive sequence models) as its
reference code trains it, with the encoder from timm: a `timm.models.vision_transformer.
VisionTransformer` on 32 x 128 crops with 4 x 8 patches (128 tokens, 384-d, depth 12, 6 heads, no class
token, no pooling) and a one-layer two-stream decoder by hand: position queries attend to the content
stream (token embeddings times sqrt(d)) through `nn.MultiheadAttention` with float -inf masks and the
default `need_weights=True` (so the attention weights are materialised), then cross-attend to the
image tokens, with pre-norms and a GELU MLP. Permutation language modelling: 6 permutations of the
27 positions per batch (the canonical order, its mirror, two random ones from `torch.randperm` and
their mirrors; labels all of the maximum 25 characters, so no value-dependent lengths), each turned
into a content mask and a query mask by a Python loop of index assignments, the decoder run once per
permutation over the same encoder memory and the 6 cross-entropies (94-character charset, pad ignored;
after the first two permutations the EOS targets become pad) summed and divided by their token count.
Phase 1: 5 AdamW steps at batch 384 under bf16 autocast. Phase 2: inference_mode at batch 1,024:
autoregressive decoding for 26 steps without early stop (the whole prefix re-decoded at each step, no
cache), then one cloze refinement pass with the query mask `triu(ones, 2)`. 2 phases."""

import math

import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer
from torch import nn

torch.manual_seed(2814)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


CHARSET = 94
EOS, BOS, PAD = 0, CHARSET + 1, CHARSET + 2  # [E] + charset, then [B] and [P] (input only)
MAX_LEN = 25
D = 384


class DecoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward, dropout=0.1):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=True)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm_q = nn.LayerNorm(d_model)
        self.norm_c = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)
        self.activation = nn.GELU()

    def forward_stream(self, tgt, tgt_norm, tgt_kv, memory, tgt_mask, tgt_key_padding_mask):
        tgt2, sa_weights = self.self_attn(
            tgt_norm, tgt_kv, tgt_kv, attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask
        )
        tgt = tgt + self.dropout1(tgt2)
        tgt2, ca_weights = self.cross_attn(self.norm1(tgt), memory, memory)
        tgt = tgt + self.dropout2(tgt2)
        tgt2 = self.linear2(self.dropout(self.activation(self.linear1(self.norm2(tgt)))))
        tgt = tgt + self.dropout3(tgt2)
        return tgt, sa_weights, ca_weights

    def forward(
        self,
        query,
        content,
        memory,
        query_mask=None,
        content_mask=None,
        content_key_padding_mask=None,
        update_content=True,
    ):
        query_norm = self.norm_q(query)
        content_norm = self.norm_c(content)
        query = self.forward_stream(
            query, query_norm, content_norm, memory, query_mask, content_key_padding_mask
        )[0]
        if update_content:
            content = self.forward_stream(
                content, content_norm, content_norm, memory, content_mask, content_key_padding_mask
            )[0]
        return query, content


class PARSeq(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = VisionTransformer(
            img_size=(32, 128),
            patch_size=(4, 8),
            embed_dim=D,
            depth=12,
            num_heads=6,
            mlp_ratio=4,
            class_token=False,
            global_pool="",
            num_classes=0,
        )
        self.decoder = DecoderLayer(D, 12, 4 * D, 0.1)
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, CHARSET + 1)
        self.text_embed = nn.Embedding(CHARSET + 3, D)
        self.pos_queries = nn.Parameter(torch.empty(1, MAX_LEN + 1, D))
        self.dropout = nn.Dropout(0.1)
        nn.init.trunc_normal_(self.pos_queries, std=0.02)

    def encode(self, img):
        return self.encoder.forward_features(img)

    def decode(self, tgt, memory, tgt_mask=None, tgt_padding_mask=None, tgt_query=None, tgt_query_mask=None):
        N, L = tgt.shape
        null_ctx = self.text_embed(tgt[:, :1]) * math.sqrt(D)
        tgt_emb = self.pos_queries[:, : L - 1] + self.text_embed(tgt[:, 1:]) * math.sqrt(D)
        tgt_emb = self.dropout(torch.cat([null_ctx, tgt_emb], dim=1))
        if tgt_query is None:
            tgt_query = self.pos_queries[:, :L].expand(N, -1, -1)
        tgt_query = self.dropout(tgt_query)
        q, _ = self.decoder(
            tgt_query, tgt_emb, memory, tgt_query_mask, tgt_mask, tgt_padding_mask, update_content=False
        )
        return self.norm(q)


def gen_tgt_perms(n_pairs=3):
    max_num_chars = MAX_LEN
    perms = [torch.arange(max_num_chars, device=dev)]
    for _ in range(n_pairs - 1):
        perms.append(torch.randperm(max_num_chars, device=dev))
    perms = torch.stack(perms)
    comp = perms.flip(-1)
    perms = torch.stack([perms, comp]).transpose(0, 1).reshape(-1, max_num_chars)
    bos_idx = perms.new_zeros((len(perms), 1))
    eos_idx = perms.new_full((len(perms), 1), max_num_chars + 1)
    return torch.cat([bos_idx, perms + 1, eos_idx], dim=1)


def generate_attn_masks(perm):
    sz = perm.shape[0]
    mask = torch.zeros((sz, sz), device=dev)
    for i in range(sz):
        query_idx = perm[i]
        masked_keys = perm[i + 1 :]
        mask[query_idx, masked_keys] = float("-inf")
    content_mask = mask[:-1, :-1].clone()
    mask[torch.eye(sz, dtype=torch.bool, device=dev)] = float("-inf")
    query_mask = mask[1:, :-1]
    return content_mask, query_mask


model = PARSeq().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=7e-4, weight_decay=0.0)
B = 384
for _step in range(5):
    images = torch.randn(B, 3, 32, 128, device=dev)
    chars = torch.randint(1, CHARSET + 1, (B, MAX_LEN), device=dev)
    tgt = torch.cat([torch.full((B, 1), BOS, device=dev), chars, torch.full((B, 1), EOS, device=dev)], dim=1)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        memory = model.encode(images)
        tgt_perms = gen_tgt_perms()
        tgt_in = tgt[:, :-1]
        tgt_out = tgt[:, 1:]
        tgt_padding_mask = (tgt_in == PAD) | (tgt_in == EOS)
        loss = 0
        loss_numel = 0
        n = (tgt_out != PAD).sum().item()
        for i, perm in enumerate(tgt_perms):
            tgt_mask, query_mask = generate_attn_masks(perm)
            out = model.decode(tgt_in, memory, tgt_mask, tgt_padding_mask, tgt_query_mask=query_mask)
            logits = model.head(out).flatten(end_dim=1)
            loss += n * F.cross_entropy(logits.float(), tgt_out.flatten(), ignore_index=PAD)
            loss_numel += n
            if i == 1:
                tgt_out = torch.where(tgt_out == EOS, PAD, tgt_out)
                n = (tgt_out != PAD).sum().item()
        loss /= loss_numel
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print("train", round(loss.item(), 4))
report("train_permutation_lm_six_perms_bf16")

del loss, logits, out, memory
model.eval()
NB = 1024
num_steps = MAX_LEN + 1
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    images = torch.randn(NB, 3, 32, 128, device=dev)
    memory = model.encode(images)
    pos_queries = model.pos_queries[:, :num_steps].expand(NB, -1, -1)
    tgt_mask = query_mask = torch.triu(torch.ones((num_steps, num_steps), dtype=torch.bool, device=dev), 1)
    tgt_in = torch.full((NB, num_steps), PAD, dtype=torch.long, device=dev)
    tgt_in[:, 0] = BOS
    logits = []
    for i in range(num_steps):
        j = i + 1
        tgt_out = model.decode(
            tgt_in[:, :j],
            memory,
            tgt_mask[:j, :j],
            tgt_query=pos_queries[:, i:j],
            tgt_query_mask=query_mask[i:j, :j],
        )
        p_i = model.head(tgt_out)
        logits.append(p_i)
        if j < num_steps:
            tgt_in[:, j] = p_i.squeeze().argmax(-1)
    logits = torch.cat(logits, dim=1)
    query_mask[torch.triu(torch.ones(num_steps, num_steps, dtype=torch.bool, device=dev), 2)] = 0
    bos = torch.full((NB, 1), BOS, dtype=torch.long, device=dev)
    tgt_in = torch.cat([bos, logits[:, :-1].argmax(-1)], dim=1)
    tgt_padding_mask = (tgt_in == EOS).int().cumsum(-1) > 0
    tgt_out = model.decode(
        tgt_in, memory, tgt_mask, tgt_padding_mask, pos_queries, query_mask[:, : tgt_in.shape[1]]
    )
    logits = model.head(tgt_out)
    pred = logits.float().softmax(-1).argmax(-1)
print("decoded", tuple(pred.shape))
report("inference_mode_ar_decode_and_cloze_refine")
