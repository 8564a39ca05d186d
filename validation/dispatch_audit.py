"""Audit: aten ops whose dispatch differs between the CUDA key and the keys the twin runs them on.

The twin's eager stand-ins for CUDA tensors are meta tensors (keys Meta, AutogradMeta); its
torch.compile / torch.export traces run on the host's fake tensors, CPU ones (keys CPU,
AutogradCPU); torch.func's wrappers of meta tensors take AutogradOther (functorch's
`kKeysToPropagateToWrapper` propagates CPU and CUDA only). For every aten overload this reads the
dispatcher's computed table (`torch._C._dispatch_dump_table`, c10's
`computeDispatchTableEntryWithDebug`) and classifies what runs at each key as one of:

  decomposed  the autograd key runs the CompositeImplicitAutograd kernel: the op becomes its parts
              above autograd (other tensors saved for backward than the op's own formula saves)
  kernel      autograd's formula, then a kernel of the backend's own
  composite   autograd's formula, then a CompositeExplicitAutograd(NonFunctional) kernel
              (the same saved tensors, the composite's temporaries)
  missing     no kernel: the op raises on that backend

Section 1 lists the overloads where whether autograd decomposes differs between AutogradCUDA and
AutogradCPU / AutogradMeta / AutogradOther: the rule class of 75907dca (`_fused_rms_norm`); each
line says what the twin does about it (`HANDLED`). Section 2 lists, as information, the overloads
whose kernel below autograd differs between CUDA and CPU (CUDA-only kernels, CPU-only kernels,
composites on one side): there autograd saves the same tensors on both, and the twin's eager ops
run its own rules or the meta kernel at the mode, so only a rule's temporaries depend on it.
Section 3 lists the overloads with no kernel at all at the CUDA key (none of their own, no
composite), which the GPU's dispatcher refuses for a dense CUDA tensor and the twin refuses alike
(`_capture._refuse_without_cuda_kernel`). Section 4 lists the Python decompositions and meta
kernels that branch on the device (`device_hint(t)`, `t.is_cuda`, `t.device.type == ...`): under
torch.compile / torch.export they run on the host's fake CPU tensors, so they take the CPU's
branch unless the twin answers for the GPU (`HANDLED_PY`: `device_hint` reads "cuda" for a host
fake tensor standing for the GPU's, torch/_decomp's upsampling helpers read `cuda:0` as its device,
session 59). Inside a meta kernel (the fake mode's kernel invocation) `t.device` reads `meta` on
the GPU's fake tensors as on the host's: only `device_hint` and decompositions see the device.
With `--all`, sparse, quantized, mkldnn, cuDNN/MIOpen, test-only and other backend-specific ops
are printed too (filtered out by name otherwise). Run: `python validation/dispatch_audit.py [--all]` (6 s).

Not found by the table: kernels present on both keys that choose differently by device. The one
session 58 met: `scaled_dot_product_attention`'s `_fused_sdp_choice` (CPU: flash_for_cpu or math;
CUDA: cuDNN, flash, efficient), which AOTAutograd reached on the host inside the in-graph
`F.multi_head_attention_forward` (now `_compile._SDPA_CALLERS`).
"""

import re
import sys

import torch

SKIP = re.compile(
    r"sparse|quantiz|mkldnn|_foreach|fbgemm|miopen|cudnn|_mps|mps_|xnnpack|vulkan|_mkl|fake_quant"
    r"|_test_|_foobar|_nested|q_per|q_scale|q_zero|qscheme|int_repr|dequantize|_cufft|_cslt|_coalesce"
    r"|_values|_indices|nnz|_dimI|_dimV|hspmm|_spsolve|_to_dense|to_padded_tensor|int4pack|_4bit"
    r"|_for_cpu|mkl_|_spdiags|from_file|_make_dep_token|_functional_assert|\.out$|_out$|\.output$"
)

#: what the twin does about each op of section 1 (torch 2.11)
HANDLED = {
    "aten::_fused_rms_norm": (
        "eager: F.rms_norm / aten.rms_norm / aten._fused_rms_norm take _norm's fused rule "
        "(FUNCTIONS, above AutogradMeta); export: run_decompositions asks the CUDA key "
        "(_compile._decomposing_as_on_cuda); compile: AOTAutograd's host trace decomposes it at "
        "AutogradCPU, saving x, weight and the fp32 rstd, as the CUDA formula does; Inductor's "
        "wrappers allocate the same buffers in the same order either way (session 58, kd); "
        "vmap(grad): _capture._autograd_other keeps the formula, whose double-differentiable "
        "backward is device-free"
    ),
    "aten::mish_backward": (
        "eager: an AutogradMeta kernel passes it below autograd to _norm._mish_backward "
        "(_norm.mish_kernels); vmap: _capture._autograd_other redispatches as AutogradCUDA"
    ),
    "aten::native_channel_shuffle": (
        "CUDA and meta decompose alike (`channel_shuffle`'s kernels call it below autograd, whose "
        "formula is the same on both); under compile/export `channel_shuffle` keeps its node and "
        "Inductor takes torch/_refs' decomposition, whose `device_hint` view for groups 1 or C "
        "the host's trace takes as the GPU's does (section 4, `_compile._device_hint_on_gpu`)"
    ),
    "aten::silu_backward": ("vmap: _capture._autograd_other redispatches as AutogradCUDA"),
}

#: Python decompositions and meta kernels that branch on the device, which the twin answers for the
#: GPU under the host's traces (by function name, torch 2.11)
HANDLED_PY = {
    "native_batch_norm_helper": "_compile._batch_norm_off_cpu",
    "log_sigmoid_forward": "_compile._log_sigmoid_forward_off_cpu",
    "native_group_norm": "_compile._native_group_norm_off_cpu",
    "native_layer_norm": "_compile._native_layer_norm_off_cpu",
    "convolution_backward": "_compile._convolution_backward_off_cpu",
    "bernoulli_": "_compile._gpu_decompositions",
    "bernoulli_p": "_compile._gpu_decompositions",
    "mm": "_compile._gpu_decompositions (not decomposed)",
    "addmm": "_compile._gpu_decompositions (not decomposed)",
    "bmm": "_compile._gpu_decompositions (not decomposed)",
    "is_cpu_scalar_tensor": "(a host scalar is a CPU tensor on the GPU too)",
    # `device_hint(t)` in Python meta kernels: "cuda" for a host fake tensor standing for the GPU's
    **dict.fromkeys(
        (
            "meta_fft_r2c",
            "meta_fft_c2r",
            "meta_linalg_eig",
            "_linalg_svd_meta",
            "nonzero_static",
            "meta_embedding_bag",
            "meta_embedding_bag_forward_only",
            "meta_median_mode_dim",
            "meta_pixel_shuffle",
            "meta_histc",
            "_check_scaled_mm_sizes",
            "_check_scaled_mm_sizes_v2",
            "channel_shuffle",
        ),
        "_compile._device_hint_on_gpu",
    ),
    # torch/_decomp helpers called by name: run with the host's fake tensors reading `cuda:0`
    **dict.fromkeys(
        ("_upsample_nearest", "_upsample_linear", "_upsample_get_cubic_coefficients"),
        "_compile._reading_cuda (_DEVICE_READING_HELPERS)",
    ),
    "grid_sampler_2d": "_compile._gpu_decompositions (_reading_cuda: the grid expanded as on CUDA)",
    "_to_copy": (
        "_compile._copy_to_host (the program's own `.cpu()`/`.to('cpu')` under dynamo: the dtype "
        "converted on the GPU, then a device_put to the host, kept there by the relabel); "
        "torch.export: _compile._export_copy_to_host (a new host tensor, `aten.to(device=cpu)` kept "
        "by the relabel, `_to_copy(device=cpu)` after run_decompositions, session 60)"
    ),
    # the same branch on the CPU and on CUDA, or a check only
    "is_noncontiguous_supported": "(HPU only: the same branch on CPU and CUDA)",
    "meta__weight_int4pack_mm": "(XPU only: the same branch on CPU and CUDA)",
    "meta__scaled_dot_product_flash_attention": "(ROCm or XPU only; the twin runs its own sdpa)",
    "repeat_interleave_Tensor": "(MPS only: the same branch on CPU and CUDA)",
    "tensor_split_tensor_indices_or_sections_py_impl": "(a check: the indices are the host's on the GPU too)",
    "tensor_split": "(a check: the indices are the host's on the GPU too)",
    "floor_divide": "(a check of mixed devices: one device takes the same branch)",
    "masked_fill": "(a check: on the host the value's device is the tensor's)",
    "upsample_nearest2d": (
        "(`input.device` reads `meta` inside a meta kernel, on the GPU's fake tensors too: the "
        "channels-last branch everywhere, as CUDA's structured meta function keeps the input's "
        "suggested format, UpSampleNearest2d.cpp)"
    ),
    "_check_strides_helper": "(a testing helper: no traced path calls it)",
    "_addmm_activation": "(not in Inductor's or core ATen's table: not reached; gelu's approximation only)",
    "_svd_meta": "(prims.svd: not reached, `_linalg_svd` stays an ATen node in both tables)",
    "get_acc_type": (
        "(`_refs.arange`'s float computation dtype: fused into Inductor's kernel, no buffer; the "
        "decompositions' aranges are integral)"
    ),
    "rand": (
        "_compile._philox_rand_on_gpu (functionalize_rng_ops: the trace's host device read as cuda:0; "
        "the seed and offset host tensors, `_rng_state_on_host`, session 60)"
    ),
    "rand_like": "(shadowed by Inductor's `rand_like`, `torch.rand(device=self.device)`: `rand`'s branch)",
    "calc_conv_nd_return_shape": (
        "_compile._conv_shape_on_gpu (a zero-sized output passes for an input standing for the "
        "GPU's, as on CUDA with cuDNN; eager too, with cuDNN enabled; session 60)"
    ),
}
PY_FILES = (
    "_decomp/decompositions.py",
    "_decomp/decompositions_for_rng.py",
    "_refs/__init__.py",
    "_refs/nn/functional/__init__.py",
    "_meta_registrations.py",
    "_inductor/decomposition.py",
    "_prims/__init__.py",
    "_prims_common/__init__.py",
)
DEVICE_BRANCH = re.compile(
    r'device_hint\(|\.is_cuda\b|device\.type (==|!=|in)|device == torch\.device\("cpu"\)|is_gpu\('
)


def device_branches():
    """(file, line, function) of each device test in PY_FILES."""
    import os

    root = os.path.dirname(torch.__file__)
    for rel in PY_FILES:
        with open(os.path.join(root, rel)) as f:
            function = None
            for number, line in enumerate(f, 1):
                m = re.match(r"(?:async )?def (\w+)", line)  # a module-level function
                if m:
                    function = m.group(1)
                if (
                    function != "device_hint"
                    and DEVICE_BRANCH.search(line)
                    and not line.lstrip().startswith("#")
                ):
                    yield rel, number, function


def table(name):
    out = {}
    for line in torch._C._dispatch_dump_table(name).splitlines():
        key, _, rest = line.partition(": ")
        out[key] = rest
    return out


def autograd_decomposes(t, autograd_key):
    return "[math kernel]" in t.get(autograd_key, "")


def backend_runs(t, backend):
    entry = t.get(backend, "")
    if "[math kernel]" in entry:
        return "decomposed"
    if "[default backend kernel]" in entry:
        return "composite"
    if "[kernel]" in entry or "[backend fallback]" in entry:
        return "kernel"
    return "missing"


def main():
    everything = "--all" in sys.argv
    names = sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::"))
    print(f"# torch {torch.__version__}: {len(names)} aten overloads")
    tables = {n: table(n) for n in names}
    keys = ("AutogradCUDA", "AutogradCPU", "AutogradMeta", "AutogradOther")
    print("## 1. autograd decomposes (CompositeImplicitAutograd) on one key and not on AutogradCUDA's")
    for name, t in tables.items():
        dec = {k: autograd_decomposes(t, k) for k in keys}
        if len(set(dec.values())) > 1:
            cols = " ".join(f"{k[8:]}={'decomposed' if dec[k] else 'formula':<10}" for k in keys)
            print(cols, name)
            print("    twin:", HANDLED.get(name.split(".")[0], "NOT HANDLED"))
    print("## 2. the kernel below autograd differs between CUDA and CPU (autograd's formula on both)")
    for name, t in tables.items():
        if not everything and SKIP.search(name):
            continue
        if autograd_decomposes(t, "AutogradCUDA") or autograd_decomposes(t, "AutogradCPU"):
            continue
        cuda, cpu = backend_runs(t, "CUDA"), backend_runs(t, "CPU")
        if cuda != cpu:
            print(f"CUDA={cuda:<10} CPU={cpu:<10} Meta={backend_runs(t, 'Meta'):<10}", name)
    print("## 3. no kernel at the CUDA key (refused on a dense CUDA tensor; the twin refuses alike)")
    for name in names:
        if not everything and SKIP.search(name):
            continue
        if not torch._C._dispatch_has_computed_kernel_for_dispatch_key(name, "CUDA"):
            print("   ", name)
    print("## 4. Python decompositions and meta kernels that test the device (the host's traces)")
    for rel, number, function in device_branches():
        twin = HANDLED_PY.get(function, "NOT HANDLED: CPU branch on the host")
        print(f"    {rel}:{number} {function}: {twin}")


if __name__ == "__main__":
    main()
