"""Probe (session 64, helper rp): random ops given a torch.Generator.
(a) exponential_, geometric_, cauchy_ and log_normal_ take a CUDA generator on the GPU
    (cuda/DistributionTemplates.h); the twin's meta kernels are torch._refs decompositions that
    raised "AssertionError: generator is not supported in refs";
(b) `check_generator` (get_generator_or_default): a CUDA kernel given a host generator raises
    "Expected a 'cuda' device type for generator but found 'cpu'", a host kernel given a CUDA one
    "Expected a 'cpu' device type for generator but found 'cuda'" -- DataLoader(shuffle=True) under
    torch.set_default_device("cuda") among them (RandomSampler's randperm with its own host
    generator runs on the GPU); the twin ran them all on;
(c) a deep copy of a CUDA generator is a CUDA generator with its seed and offset (THPGenerator_reduce);
    the twin's was a host generator (its device draws raise with (b)'s rule).
Plain python3, < 5 s, < 10 MB. Each line: the case, then "ok" or the exception's type and first
line. The twin (vramscope run --gpu h100) at a80c0cf9: (a) AssertionError for the four, (b) "ok"
for all. With rp-s64's rules:
a exponential_ cuda gen ok
a geometric_ cuda gen ok
a cauchy_ cuda gen ok
a log_normal_ cuda gen ok
a offset after the four 16
b randn cuda, host gen RuntimeError Expected a 'cuda' device type for generator but found 'cpu'
b normal_ cuda, host gen RuntimeError Expected a 'cuda' device type for generator but found 'cpu'
b bernoulli cuda, host gen RuntimeError Expected a 'cuda' device type for generator but found 'cpu'
b multinomial cuda, host gen RuntimeError Expected a 'cuda' device type for generator but found 'cpu'
b randperm host, cuda gen RuntimeError Expected a 'cpu' device type for generator but found 'cuda'
b rand host, cuda gen RuntimeError Expected a 'cpu' device type for generator but found 'cuda'
b randn meta, cuda gen ok
b DataLoader shuffle, default cuda RuntimeError Expected a 'cuda' device type for generator but found 'cpu'
c deepcopy of a cuda generator cuda:0 0 True
c its draw on the gpu ok
memory_allocated 262144
"""

import copy

import torch
from torch.utils.data import DataLoader, TensorDataset

cpu = torch.Generator().manual_seed(0)
cuda = torch.Generator(device="cuda")
cuda.manual_seed(0)
t = torch.empty(1 << 16, device="cuda")


def case(name, fn):
    try:
        fn()
        print(name, "ok")
    except Exception as e:
        print(name, type(e).__name__, str(e).splitlines()[0])


case("a exponential_ cuda gen", lambda: t.exponential_(generator=cuda))
case("a geometric_ cuda gen", lambda: t.geometric_(0.3, generator=cuda))
case("a cauchy_ cuda gen", lambda: t.cauchy_(generator=cuda))
case("a log_normal_ cuda gen", lambda: t.log_normal_(generator=cuda))
print("a offset after the four", cuda.get_offset())
case("b randn cuda, host gen", lambda: torch.randn(10, device="cuda", generator=cpu))
case("b normal_ cuda, host gen", lambda: t.normal_(generator=cpu))
case("b bernoulli cuda, host gen", lambda: torch.bernoulli(t.clamp(0, 1), generator=cpu))
case(
    "b multinomial cuda, host gen",
    lambda: torch.multinomial(torch.ones(4, 10, device="cuda"), 2, generator=cpu),
)
case("b randperm host, cuda gen", lambda: torch.randperm(10, generator=cuda))
case("b rand host, cuda gen", lambda: torch.rand(5, generator=cuda))
case("b randn meta, cuda gen", lambda: torch.randn(4, device="meta", generator=cuda))
torch.set_default_device("cuda")
case(
    "b DataLoader shuffle, default cuda",
    lambda: list(DataLoader(TensorDataset(torch.randn(100, 4)), 10, shuffle=True)),
)
torch.set_default_device(None)
copied = copy.deepcopy(cuda)
print(
    "c deepcopy of a cuda generator",
    copied.device,
    copied.initial_seed(),
    copied.get_offset() == cuda.get_offset(),
)
case("c its draw on the gpu", lambda: torch.randn(8, device="cuda", generator=copied))
print("memory_allocated", torch.cuda.memory_allocated())
