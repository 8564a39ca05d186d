"""A training loop fed by a producer thread of the program's own, and generation served from a thread.

The script sets CUBLAS_WORKSPACE_CONFIG=:4096:8 in os.environ before importing torch (so before its first
matmul). Training: an MLP-Mixer by hand (patch 16 on 224x224 images, 8 mixer layers of width 512, token
MLP 256, channel MLP 2048, 1000 classes). A producer thread creates its own torch.cuda.Stream, and for
each batch draws images on the CPU from a fixed generator, calls .pin_memory() and, under
torch.cuda.stream(side), .cuda(non_blocking=True), records a torch.cuda.Event on the side stream and puts
(images, labels, event) in a queue.Queue(maxsize=2); the main thread takes a batch only once the next one
is queued (prefetch one ahead), waits on its event with its current stream, calls record_stream on both
tensors and trains (bf16 autocast, AdamW foreach); after each step it drops the batch and reads the loss
with .item() (a synchronize), then releases a semaphore that lets the producer make one more batch. So
exactly two batches are on the GPU during a step and the record_stream'd blocks' events have completed
before the next allocation: no size or reuse follows thread timing. Sizes never follow data values.

Phases: 8 training steps at batch 96 from the producer thread; an inference_mode evaluation of 4
batches of 192 fed the same way by a second producer thread; a LlamaForCausalLM from a LlamaConfig (4
layers, d 1024, 16 heads, 4 kv heads, intermediate 2816, vocab 32000, bf16, sdpa) whose greedy generate
(batch 4, prompt 256, exactly 64 new tokens: min_new_tokens = max_new_tokens, static sizes) runs on a
threading.Thread started and joined by the main thread, with torch.inference_mode entered in the thread. 3
phases."""

import os

os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"

import queue
import threading

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(2324)
device = "cuda"
PATCH, IMG, WIDTH, TOK_MLP, CH_MLP, DEPTH, CLASSES = 16, 224, 512, 256, 2048, 8, 1000
TOKENS = (IMG // PATCH) ** 2


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class MixerLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(WIDTH)
        self.token_mlp = nn.Sequential(nn.Linear(TOKENS, TOK_MLP), nn.GELU(), nn.Linear(TOK_MLP, TOKENS))
        self.norm2 = nn.LayerNorm(WIDTH)
        self.channel_mlp = nn.Sequential(nn.Linear(WIDTH, CH_MLP), nn.GELU(), nn.Linear(CH_MLP, WIDTH))

    def forward(self, x):
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, WIDTH, PATCH, PATCH)
        self.layers = nn.Sequential(*[MixerLayer() for _ in range(DEPTH)])
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.layers(x)).mean(dim=1))


def producer(q, go, n, batch, seed):
    side = torch.cuda.Stream()
    g = torch.Generator().manual_seed(seed)
    for i in range(n):
        if i >= 2:
            go.acquire()  # one batch ahead of the one in training, never more (no timing in the sizes)
        images = torch.randn(batch, 3, IMG, IMG, generator=g).pin_memory()
        labels = torch.randint(0, CLASSES, (batch,), generator=g).pin_memory()
        with torch.cuda.stream(side):
            images = images.cuda(non_blocking=True)
            labels = labels.cuda(non_blocking=True)
            ready = torch.cuda.Event()
            ready.record(side)
        q.put((images, labels, ready))
    q.put(None)


def take(item):
    """The main thread's side of a queued batch: wait for its copy, mark its use on this stream."""
    images, labels, ready = item
    stream = torch.cuda.current_stream()
    stream.wait_event(ready)
    images.record_stream(stream)
    labels.record_stream(stream)
    return images, labels


def main():
    model = Mixer().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, foreach=True)
    q, go = queue.Queue(maxsize=2), threading.Semaphore(0)
    t = threading.Thread(target=producer, args=(q, go, 8, 96, 11))
    t.start()
    nxt = q.get()
    while nxt is not None:
        images, labels = take(nxt)
        nxt = q.get()  # the next batch is on the GPU before this step starts
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del images, labels
        print("loss", loss.item())
        go.release()
    t.join()
    report("train_from_producer_thread")

    model.eval()
    q, go = queue.Queue(maxsize=2), threading.Semaphore(0)
    t = threading.Thread(target=producer, args=(q, go, 4, 192, 12))
    t.start()
    hits = 0
    with torch.inference_mode():
        nxt = q.get()
        while nxt is not None:
            images, labels = take(nxt)
            nxt = q.get()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                right = (model(images).argmax(-1) == labels).sum()
            del images, labels
            hits += right.item()
            go.release()
    t.join()
    print("acc", hits / 768)
    report("eval_from_producer_thread")

    del model, opt
    cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4, num_attention_heads=16,
                      num_key_value_heads=4, vocab_size=32000, max_position_embeddings=1024,
                      attn_implementation="sdpa", pad_token_id=0, bos_token_id=1, eos_token_id=2)
    lm = LlamaForCausalLM(cfg).to(device, torch.bfloat16).eval()
    prompt = torch.randint(3, 32000, (4, 256), generator=torch.Generator().manual_seed(13)).to(device)
    out = []

    def serve():
        with torch.inference_mode():
            out.append(lm.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                   max_new_tokens=64, min_new_tokens=64, pad_token_id=0))

    worker = threading.Thread(target=serve)
    worker.start()
    worker.join()
    print("generated", tuple(out[0].shape))
    report("generate_on_thread")


if __name__ == "__main__":
    main()
