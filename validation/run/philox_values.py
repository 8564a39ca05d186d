"""CUDA's random draws, op by op: after each, the default generator's offset (and a Generator's),
and the values of the small draws (their sum and first elements). Run on the GPU and under
`vramscope run` the lines must agree (fixtures/run/README.md, "CUDA's Philox draws").

    python validation/run/philox_values.py > GPU.jsonl
    vramscope run --gpu h200 --quiet validation/run/philox_values.py > TWIN.jsonl"""

import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint

dev = "cuda"


def offset(state):
    return int.from_bytes(bytes(state[8:].tolist()), "little")


def show(name, t=None, gen=None):
    line = {"op": name, "offset": offset(torch.cuda.get_rng_state())}
    if gen is not None:
        line["gen_offset"] = offset(gen.get_state())
    if t is not None:
        flat = t.detach().flatten()
        line["sum"] = float(flat.double().sum())
        line["first"] = [float(v) for v in flat[:6].double().tolist()]
    print(json.dumps(line), flush=True)


torch.manual_seed(1234)
show("seeded")
show("randint_small", torch.randint(0, 10, (5,), device=dev))
show("randint_wide", torch.randint(0, 2**30, (1000,), device=dev))
show("randint_low", torch.randint(-50, 50, (3000,), device=dev, dtype=torch.int32))
show("rand", torch.rand(3, 4, device=dev))
show("rand_bf16", torch.rand(1000, device=dev, dtype=torch.bfloat16))
show("rand_half", torch.rand(1000, device=dev, dtype=torch.half))
show("rand_double", torch.rand(100, device=dev, dtype=torch.float64))
show("uniform_", torch.empty(4096, device=dev).uniform_(-2, 3))
show("randn_large")
_ = torch.randn(10000, device=dev)
show("randn_large_after")
show("randn_double", torch.randn(3, device=dev, dtype=torch.float64).abs() * 0)
show("bernoulli_p", torch.empty(1000, device=dev).bernoulli_(0.3))
show("bernoulli_tensor", torch.bernoulli(torch.full((1000,), 0.4, device=dev)))
show("bernoulli_double", torch.empty(999, device=dev, dtype=torch.float64).bernoulli_(0.5))
x = torch.ones(4096 * 300, device=dev)
_ = F.dropout(x, 0.1)
show("dropout_large")
_ = F.dropout(torch.ones(4096, 1024, device=dev, dtype=torch.bfloat16), 0.2)
show("dropout_bf16")
_ = torch.rand(2**22, device=dev)
show("rand_4m")
_ = torch.randperm(100, device=dev)
show("randperm_100")
_ = torch.randperm(50000, device=dev)
show("randperm_50000")
_ = torch.multinomial(torch.ones(4, 10, device=dev), 1)
show("multinomial_1")
_ = torch.multinomial(torch.ones(4, 10, device=dev), 5, replacement=True)
show("multinomial_replacement")
_ = torch.empty(1000, device=dev).exponential_()
show("exponential_")
_ = torch.normal(torch.zeros(3000, device=dev), 1.0)
show("normal_tensor")
show("randint_like", torch.randint_like(torch.empty(7, device=dev, dtype=torch.int64), 3, 9))
show("random_range", torch.empty(50, device=dev, dtype=torch.int64).random_(0, 100))
_ = torch.empty(64, device=dev, dtype=torch.int32).random_()
show("random_int32")
_ = torch.distributions.Gamma(torch.ones(100, device=dev), torch.ones(100, device=dev)).sample()
show("gamma")
_ = torch.poisson(torch.ones(100, device=dev))
show("poisson")

q = torch.randn(2, 4, 128, 64, device=dev, dtype=torch.half)
for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION):
    with sdpa_kernel([backend]):
        _ = F.scaled_dot_product_attention(q, q, q, dropout_p=0.1)
    show(f"sdpa_{backend.name.lower()}")

g = torch.Generator(device=dev)
g.manual_seed(7)
show("generator_randint", torch.randint(0, 100, (8,), device=dev, generator=g), gen=g)
show("generator_rand", torch.rand(6, device=dev, generator=g), gen=g)

block = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.1)).to(dev)
inp = torch.randn(32, 64, device=dev, requires_grad=True)
show("before_checkpoint")
out = checkpoint(block, inp, use_reentrant=False)
show("checkpoint_forward")
out.sum().backward()
show("checkpoint_backward")
saved = torch.cuda.get_rng_state()
a = torch.randint(0, 1000, (6,), device=dev)
torch.cuda.set_rng_state(saved)
b = torch.randint(0, 1000, (6,), device=dev)
show("restored_equal", (a == b).to(torch.int64))
with torch.random.fork_rng(devices=[0]):
    _ = torch.rand(100, device=dev)
show("fork_rng")
torch.cuda.manual_seed(99)
show("cuda_manual_seed", torch.randint(0, 1 << 20, (4,), device=dev))

# a CUDA graph: its capture leaves the generator where it was, each replay moves it on by what the
# capture drew (CUDAGeneratorState::capture_prologue / replay_prologue)
static = torch.ones(4096, 64, device=dev)
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    _ = F.dropout(static, 0.5)
torch.cuda.current_stream().wait_stream(side)
show("graph_warmup")
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    dropped = F.dropout(static, 0.5)
    noise = torch.rand(100, device=dev)
show("graph_captured")
graph.replay()
show("graph_replay_1")
graph.replay()
show("graph_replay_2")
show("after_graph", torch.randint(0, 1000, (8,), device=dev))


@torch.compile
def compiled(x):
    return F.dropout(x, 0.1) * 2


_ = compiled(torch.ones(512, 512, device=dev))
show("compiled_1")
_ = compiled(torch.ones(512, 512, device=dev))
show("compiled_2")
show("after_compiled", torch.randint(0, 1000, (8,), device=dev))
