"""A neural signed-distance field fitted to an oriented point cloud as IGR (amosgropp/IGR) trains
it, with NeuS's SDFNetwork (Totoro97/NeuS, models/fields.py): a sin/cos positional encoding of 6
frequencies (39 inputs), 8 linear layers 256 wide with the input concatenated again before the
fifth (divided by sqrt 2), geometric initialisation (the last layer's weights about sqrt(pi)/sqrt(256)
and bias -0.5 so the field starts as a sphere, the encoding's sin/cos inputs zeroed in the first
layer), torch.nn.utils.weight_norm on every layer, Softplus(beta=100), a 257-wide output (the SDF
and a 256-wide feature). Each step: 32,768 surface points with normals, a local Gaussian sample
around each (sigma from the distance to the 50th nearest neighbour, precomputed) and 4,096
uniform points in the box; the gradient of the SDF with respect to the points by
torch.autograd.grad(create_graph=True) on the surface and off-surface points, the loss the mean
|SDF| on the surface + the normals' L1 term + 0.1 x the eikonal term ((||grad|| - 1)^2). fp32,
Adam (lr 5e-3), StepLR, 3 steps (each its own phase), then the SDF over a 128^3 grid (2,097,152
points) under no_grad in chunks of 262,144 as IGR's marching-cubes extraction does, then the
normals of 200,000 points by one autograd.grad without create_graph; 5 phases."""

import os

import numpy as np
import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16205)
if SMALL:
    N_SURF, N_GLOBAL, D_HIDDEN, N_LAYERS, RES, CHUNK, N_NORMALS, STEPS = 256, 32, 64, 4, 16, 1024, 512, 3
else:
    N_SURF, N_GLOBAL, D_HIDDEN, N_LAYERS, RES, CHUNK, N_NORMALS, STEPS = (
        32768,
        4096,
        256,
        8,
        128,
        262144,
        200000,
        3,
    )
device = "cuda" if torch.cuda.is_available() else "cpu"


class Embedder:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.create_embedding_fn()

    def create_embedding_fn(self):
        embed_fns = []
        d = self.kwargs["input_dims"]
        out_dim = 0
        if self.kwargs["include_input"]:
            embed_fns.append(lambda x: x)
            out_dim += d
        max_freq = self.kwargs["max_freq_log2"]
        N_freqs = self.kwargs["num_freqs"]
        freq_bands = 2.0 ** torch.linspace(0.0, max_freq, N_freqs)
        for freq in freq_bands:
            for p_fn in self.kwargs["periodic_fns"]:
                embed_fns.append(lambda x, p_fn=p_fn, freq=freq: p_fn(x * freq))
                out_dim += d
        self.embed_fns = embed_fns
        self.out_dim = out_dim

    def embed(self, inputs):
        return torch.cat([fn(inputs) for fn in self.embed_fns], -1)


def get_embedder(multires, input_dims=3):
    embedder_obj = Embedder(
        include_input=True,
        input_dims=input_dims,
        max_freq_log2=multires - 1,
        num_freqs=multires,
        log_sampling=True,
        periodic_fns=[torch.sin, torch.cos],
    )
    return lambda x, eo=embedder_obj: eo.embed(x), embedder_obj.out_dim


class SDFNetwork(nn.Module):
    def __init__(self, d_in, d_out, d_hidden, n_layers, skip_in=(4,), multires=0, bias=0.5, scale=1,
                 geometric_init=True, weight_norm=True, inside_outside=False):  # fmt: skip
        super().__init__()
        dims = [d_in] + [d_hidden for _ in range(n_layers)] + [d_out]
        self.embed_fn_fine = None
        if multires > 0:
            embed_fn, input_ch = get_embedder(multires, input_dims=d_in)
            self.embed_fn_fine = embed_fn
            dims[0] = input_ch
        self.num_layers = len(dims)
        self.skip_in = skip_in
        self.scale = scale
        for li in range(0, self.num_layers - 1):
            if li + 1 in self.skip_in:
                out_dim = dims[li + 1] - dims[0]
            else:
                out_dim = dims[li + 1]
            lin = nn.Linear(dims[li], out_dim)
            if geometric_init:
                if li == self.num_layers - 2:
                    if not inside_outside:
                        torch.nn.init.normal_(lin.weight, mean=np.sqrt(np.pi) / np.sqrt(dims[li]), std=0.0001)
                        torch.nn.init.constant_(lin.bias, -bias)
                    else:
                        torch.nn.init.normal_(
                            lin.weight, mean=-np.sqrt(np.pi) / np.sqrt(dims[li]), std=0.0001
                        )
                        torch.nn.init.constant_(lin.bias, bias)
                elif multires > 0 and li == 0:
                    torch.nn.init.constant_(lin.bias, 0.0)
                    torch.nn.init.constant_(lin.weight[:, 3:], 0.0)
                    torch.nn.init.normal_(lin.weight[:, :3], 0.0, np.sqrt(2) / np.sqrt(out_dim))
                elif multires > 0 and li in self.skip_in:
                    torch.nn.init.constant_(lin.bias, 0.0)
                    torch.nn.init.normal_(lin.weight, 0.0, np.sqrt(2) / np.sqrt(out_dim))
                    torch.nn.init.constant_(lin.weight[:, -(dims[0] - 3) :], 0.0)
                else:
                    torch.nn.init.constant_(lin.bias, 0.0)
                    torch.nn.init.normal_(lin.weight, 0.0, np.sqrt(2) / np.sqrt(out_dim))
            if weight_norm:
                lin = nn.utils.weight_norm(lin)
            setattr(self, "lin" + str(li), lin)
        self.activation = nn.Softplus(beta=100)

    def forward(self, inputs):
        inputs = inputs * self.scale
        if self.embed_fn_fine is not None:
            inputs = self.embed_fn_fine(inputs)
        x = inputs
        for li in range(0, self.num_layers - 1):
            lin = getattr(self, "lin" + str(li))
            if li in self.skip_in:
                x = torch.cat([x, inputs], 1) / np.sqrt(2)
            x = lin(x)
            if li < self.num_layers - 2:
                x = self.activation(x)
        return torch.cat([x[:, :1] / self.scale, x[:, 1:]], dim=-1)

    def sdf(self, x):
        return self.forward(x)[:, :1]

    def gradient(self, x):
        x.requires_grad_(True)
        y = self.sdf(x)
        d_output = torch.ones_like(y, requires_grad=False, device=y.device)
        gradients = torch.autograd.grad(
            outputs=y, inputs=x, grad_outputs=d_output, create_graph=True, retain_graph=True, only_inputs=True
        )[0]
        return gradients.unsqueeze(1)


class Sampler:
    """IGR's NormalPerPoint sampler: a local Gaussian around each point and a global uniform part."""

    def __init__(self, global_sigma, local_sigma=0.01):
        self.global_sigma = global_sigma
        self.local_sigma = local_sigma

    def get_points(self, pc_input, local_sigma=None):
        batch_size, sample_size, dim = pc_input.shape
        if local_sigma is not None:
            sample_local = pc_input + (torch.randn_like(pc_input) * local_sigma.unsqueeze(-1))
        else:
            sample_local = pc_input + (torch.randn_like(pc_input) * self.local_sigma)
        sample_global = (
            torch.rand(batch_size, sample_size // 8, dim, device=pc_input.device) * (self.global_sigma * 2)
        ) - self.global_sigma
        return torch.cat([sample_local, sample_global], dim=1)


def gradient(inputs, outputs):
    d_points = torch.ones_like(outputs, requires_grad=False, device=outputs.device)
    points_grad = torch.autograd.grad(
        outputs=outputs,
        inputs=inputs,
        grad_outputs=d_points,
        create_graph=True,
        retain_graph=True,
        only_inputs=True,
    )[0][:, -3:]
    return points_grad


np.random.seed(16205)
network = SDFNetwork(3, 257, D_HIDDEN, N_LAYERS, skip_in=(N_LAYERS // 2,), multires=6).to(device)
optimizer = torch.optim.Adam([{"params": network.parameters(), "lr": 0.005}])
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2000, gamma=0.5)
sampler = Sampler(global_sigma=1.8)
n_cloud = 4 * N_SURF
cloud = torch.randn(n_cloud, 3, device=device)
normals_gt = cloud / cloud.norm(dim=-1, keepdim=True)
cloud = 0.6 * normals_gt + 0.01 * torch.randn(n_cloud, 3, device=device)
sigmas = torch.full((n_cloud,), 0.02, device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

grad_lambda, normals_lambda = 0.1, 1.0
for step in range(STEPS):
    indices = torch.tensor(np.random.choice(n_cloud, N_SURF, False))
    cur_data = torch.cat([cloud, normals_gt], -1)[indices]
    mnfld_pnts = cur_data[:, :3]
    mnfld_sigma = sigmas[indices]
    nonmnfld_pnts = sampler.get_points(mnfld_pnts.unsqueeze(0), mnfld_sigma.unsqueeze(0)).squeeze()
    normals = cur_data[:, -3:]
    mnfld_pnts.requires_grad_()
    nonmnfld_pnts.requires_grad_()
    mnfld_pred = network.sdf(mnfld_pnts)
    nonmnfld_pred = network.sdf(nonmnfld_pnts)
    mnfld_grad = gradient(mnfld_pnts, mnfld_pred)
    nonmnfld_grad = gradient(nonmnfld_pnts, nonmnfld_pred)
    mnfld_loss = (mnfld_pred.abs()).mean()
    grad_loss = ((nonmnfld_grad.norm(2, dim=-1) - 1) ** 2).mean()
    loss = mnfld_loss + grad_lambda * grad_loss
    normals_loss = ((mnfld_grad - normals).abs()).norm(2, dim=1).mean()
    loss = loss + normals_lambda * normals_loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} eik {grad_loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del loss, mnfld_pred, nonmnfld_pred, mnfld_grad, nonmnfld_grad, grad_loss, normals_loss, mnfld_loss
del mnfld_pnts, nonmnfld_pnts
network.eval()
x = torch.linspace(-1.0, 1.0, RES, device=device)
grid = torch.stack(torch.meshgrid(x, x, x, indexing="ij"), dim=-1).reshape(-1, 3)
with torch.no_grad():
    z = []
    for pnts in torch.split(grid, CHUNK, dim=0):
        z.append(network.sdf(pnts)[:, 0])
    z = torch.cat(z, dim=0).reshape(RES, RES, RES)
    inside = (z < 0).float().mean()
if device == "cuda":
    torch.cuda.synchronize()
    print(
        f"grid inside {inside.item():.3f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

surf = 0.6 * torch.nn.functional.normalize(torch.randn(N_NORMALS, 3, device=device), dim=-1)
surf.requires_grad_(True)
sdf_val = network.sdf(surf)
(normals_pred,) = torch.autograd.grad(sdf_val, surf, torch.ones_like(sdf_val))
normals_pred = torch.nn.functional.normalize(normals_pred, dim=-1)
cos = (normals_pred * surf.detach() / 0.6).sum(-1).mean()
if device == "cuda":
    torch.cuda.synchronize()
    print(
        f"normals cos {cos.item():.3f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
