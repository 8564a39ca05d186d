"""A BLIP-style image-text model written by hand after salesforce/BLIP's blip_pretrain.py and
med.py (no momentum encoders): a ViT-B/16 image encoder (224 x 224, 197 tokens, 768 wide, 12
pre-norm blocks, attention by F.scaled_dot_product_attention); a BERT-base text encoder (12 post-norm
layers, 768 wide, vocabulary 30,524, 35 tokens) whose layers also hold a cross-attention to the image
tokens, used without it for the unimodal text features and with it for image-text matching; a
separate 12-layer text decoder with causal self-attention and cross-attention for captioning; the
three pre-training losses: ITC against a queue of 9,600 past image and text features (fp32 buffers,
256-d projections, learned temperature), ITM over the positives and one hard negative image and one
hard negative text a sample drawn by torch.multinomial from the softmaxed similarities (3B pairs through
the multimodal encoder), and the LM loss with label smoothing 0.1 (pad -> -100); bf16 autocast over
fp32 weights, AdamW (lr 2e-4, weight decay 0.05), batch 96, 3 steps (the first two their own phases);
then captioning under no_grad for 48 images: greedy decoding of 30 tokens with a per-layer key/value
cache grown by torch.cat, then beam search (3 beams, the image tokens repeat_interleaved, the beams
reordered by index_select, the decoder run over the whole prefix each step); 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16705)
if SMALL:
    WIDTH, LAYERS, HEADS, VOCAB, CTX, HW, PATCH, B, QUEUE, EMBED, GEN, MAXLEN = (
        32,
        2,
        4,
        200,
        12,
        32,
        16,
        8,
        32,
        16,
        4,
        6,
    )
else:
    WIDTH, LAYERS, HEADS, VOCAB, CTX, HW, PATCH, B, QUEUE, EMBED, GEN, MAXLEN = (
        768, 12, 12, 30524, 35, 224, 16, 96, 9600, 256, 48, 30
    )  # fmt: skip
PAD, CLS, SEP, BOS, ENC = 0, 101, 102, VOCAB - 2, VOCAB - 1
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")


class Attention(nn.Module):
    def __init__(self, dim, heads, kv_dim=None):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(kv_dim or dim, dim)
        self.v = nn.Linear(kv_dim or dim, dim)
        self.out = nn.Linear(dim, dim)

    def split(self, x):
        n, t, d = x.shape
        return x.view(n, t, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x, context=None, mask=None, causal=False, cache=None):
        ctx = x if context is None else context
        q, k, v = self.split(self.q(x)), self.split(self.k(ctx)), self.split(self.v(ctx))
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and q.shape[2] > 1)
        return self.out(out.transpose(1, 2).flatten(2))


class VisionBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim, eps=1e-6), nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, WIDTH, PATCH, PATCH)
        self.cls = nn.Parameter(torch.zeros(1, 1, WIDTH))
        self.pos = nn.Parameter(torch.randn(1, (HW // PATCH) ** 2 + 1, WIDTH) * 0.02)
        self.blocks = nn.ModuleList(VisionBlock(WIDTH, HEADS) for _ in range(LAYERS))
        self.norm = nn.LayerNorm(WIDTH, eps=1e-6)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)


class BertLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.self_attn, self.ln1 = Attention(dim, heads), nn.LayerNorm(dim, eps=1e-12)
        self.cross_attn, self.ln2 = Attention(dim, heads), nn.LayerNorm(dim, eps=1e-12)
        self.ffn, self.ln3 = (
            nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)),
            nn.LayerNorm(dim, eps=1e-12),
        )

    def forward(self, x, image=None, mask=None, causal=False, cache=None):
        x = self.ln1(x + self.self_attn(x, mask=mask, causal=causal, cache=cache))
        if image is not None:
            x = self.ln2(x + self.cross_attn(x, context=image))
        return self.ln3(x + self.ffn(x))


class Bert(nn.Module):
    def __init__(self):
        super().__init__()
        self.word = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Embedding(512, WIDTH)
        self.ln = nn.LayerNorm(WIDTH, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(WIDTH, HEADS) for _ in range(LAYERS))

    def forward(self, ids, mask=None, image=None, causal=False, caches=None, start=0):
        pos = torch.arange(start, start + ids.shape[1], device=ids.device)
        x = self.ln(self.word(ids) + self.pos(pos))
        attn_mask = None if mask is None else mask[:, None, None, :].bool()
        for i, layer in enumerate(self.layers):
            x = layer(
                x, image=image, mask=attn_mask, causal=causal, cache=None if caches is None else caches[i]
            )
        return x


class BLIP(nn.Module):
    def __init__(self):
        super().__init__()
        self.visual = ViT()
        self.text_encoder = Bert()
        self.text_decoder = Bert()
        self.lm_head = nn.Linear(WIDTH, VOCAB)
        self.vision_proj, self.text_proj = nn.Linear(WIDTH, EMBED), nn.Linear(WIDTH, EMBED)
        self.itm_head = nn.Linear(WIDTH, 2)
        self.temp = nn.Parameter(0.07 * torch.ones([]))
        self.register_buffer("image_queue", F.normalize(torch.randn(EMBED, QUEUE), dim=0))
        self.register_buffer("text_queue", F.normalize(torch.randn(EMBED, QUEUE), dim=0))
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    def forward(self, image, ids, mask):
        with torch.no_grad():
            self.temp.clamp_(0.001, 0.5)
        image_embeds = self.visual(image)
        image_feat = F.normalize(self.vision_proj(image_embeds[:, 0]), dim=-1)
        text_out = self.text_encoder(ids, mask)
        text_feat = F.normalize(self.text_proj(text_out[:, 0]), dim=-1)

        # ITC against the queue
        n = image.shape[0]
        image_all = torch.cat([image_feat.t().float(), self.image_queue.clone().detach()], dim=1)
        text_all = torch.cat([text_feat.t().float(), self.text_queue.clone().detach()], dim=1)
        sim_i2t = image_feat.float() @ text_all / self.temp
        sim_t2i = text_feat.float() @ image_all / self.temp
        targets = torch.arange(n, device=image.device)
        loss_itc = (F.cross_entropy(sim_i2t, targets) + F.cross_entropy(sim_t2i, targets)) / 2
        self._dequeue_and_enqueue(image_feat, text_feat)

        # ITM with hard negatives
        enc_ids = ids.clone()
        enc_ids[:, 0] = ENC
        output_pos = self.text_encoder(enc_ids, mask, image=image_embeds)
        with torch.no_grad():
            weights_t2i = F.softmax(sim_t2i[:, :n].float(), dim=1) + 1e-4
            weights_t2i.fill_diagonal_(0)
            weights_i2t = F.softmax(sim_i2t[:, :n].float(), dim=1) + 1e-4
            weights_i2t.fill_diagonal_(0)
        neg_image = torch.multinomial(weights_t2i, 1).squeeze(1)
        neg_text = torch.multinomial(weights_i2t, 1).squeeze(1)
        image_embeds_neg = image_embeds[neg_image]
        text_ids_neg, text_mask_neg = enc_ids[neg_text], mask[neg_text]
        text_ids_all = torch.cat([enc_ids, text_ids_neg], dim=0)
        text_mask_all = torch.cat([mask, text_mask_neg], dim=0)
        image_embeds_all = torch.cat([image_embeds_neg, image_embeds], dim=0)
        output_neg = self.text_encoder(text_ids_all, text_mask_all, image=image_embeds_all)
        vl = torch.cat([output_pos[:, 0], output_neg[:, 0]], dim=0)
        itm_labels = torch.cat([torch.ones(n, dtype=torch.long), torch.zeros(2 * n, dtype=torch.long)]).to(
            image.device
        )
        loss_itm = F.cross_entropy(self.itm_head(vl), itm_labels)

        # LM
        dec_ids = ids.clone()
        dec_ids[:, 0] = BOS
        targets_lm = dec_ids.masked_fill(dec_ids == PAD, -100)
        hidden = self.text_decoder(dec_ids, mask, image=image_embeds, causal=True)
        logits = self.lm_head(hidden[:, :-1])
        loss_lm = F.cross_entropy(
            logits.reshape(-1, VOCAB).float(), targets_lm[:, 1:].reshape(-1), label_smoothing=0.1
        )
        return loss_itc, loss_itm, loss_lm

    @torch.no_grad()
    def _dequeue_and_enqueue(self, image_feat, text_feat):
        n = image_feat.shape[0]
        ptr = int(self.queue_ptr)
        self.image_queue[:, ptr : ptr + n] = image_feat.T
        self.text_queue[:, ptr : ptr + n] = text_feat.T
        self.queue_ptr[0] = (ptr + n) % QUEUE


def captions(n):
    ids = torch.randint(3 if SMALL else 1000, VOCAB - 2, (n, CTX), device=device)
    lengths = torch.randint(8, CTX + 1, (n, 1), device=device)
    pos = torch.arange(CTX, device=device).unsqueeze(0)
    mask = (pos < lengths).long()
    ids = ids * mask
    ids[:, 0] = CLS
    ids.scatter_(1, lengths - 1, SEP)
    return ids, mask


def images(n):
    return torch.randn(n, 3, HW, HW, device=device)


def phase(name):
    if device == "cuda":
        print(f"{name} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


model = BLIP().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.05)
phase("model")
model.train()
for step in range(3):
    ids, mask = captions(B)
    with torch.autocast(**amp):
        loss_itc, loss_itm, loss_lm = model(images(B), ids, mask)
        loss = loss_itc + loss_itm + loss_lm
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} itc {loss_itc.item():.3f} itm {loss_itm.item():.3f} lm {loss_lm.item():.3f}")
    del loss, loss_itc, loss_itm, loss_lm
    if step != 1:
        phase(f"step {step}")

model.eval()
with torch.no_grad(), torch.autocast(**amp):
    image_embeds = model.visual(images(GEN))
    caches = [{} for _ in range(LAYERS)]
    tokens = torch.full((GEN, 1), BOS, device=device, dtype=torch.long)
    step_ids = tokens
    for t in range(MAXLEN):
        hidden = model.text_decoder(step_ids, image=image_embeds, causal=True, caches=caches, start=t)
        step_ids = model.lm_head(hidden[:, -1]).argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, step_ids], dim=1)
    print(f"greedy {tuple(tokens.shape)}")
    del caches, hidden, image_embeds
phase("greedy")

BEAMS = 3
with torch.no_grad(), torch.autocast(**amp):
    image_embeds = model.visual(images(GEN)).repeat_interleave(BEAMS, dim=0)
    tokens = torch.full((GEN * BEAMS, 1), BOS, device=device, dtype=torch.long)
    scores = torch.zeros(GEN, BEAMS, device=device)
    scores[:, 1:] = -1e9
    for _t in range(MAXLEN):
        hidden = model.text_decoder(tokens, image=image_embeds, causal=True)
        logp = F.log_softmax(model.lm_head(hidden[:, -1]).float(), dim=-1).view(GEN, BEAMS, VOCAB)
        cand = (scores.unsqueeze(-1) + logp).view(GEN, BEAMS * VOCAB)
        scores, idx = cand.topk(BEAMS, dim=-1)
        beam = idx // VOCAB
        word = idx % VOCAB
        origin = (beam + torch.arange(GEN, device=device).unsqueeze(1) * BEAMS).view(-1)
        tokens = torch.cat([tokens.index_select(0, origin), word.view(-1, 1)], dim=1)
    best = tokens.view(GEN, BEAMS, -1)[:, 0]
    print(f"beam {tuple(best.shape)}")
phase("beam")
