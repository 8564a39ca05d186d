"""AOTInductor (`torch._inductor.aoti_compile_and_package`, `aoti_load_package`) for the simulated GPU.

The compile is PyTorch's own (`aot_compile` -> `compile_fx_aot`): traced on the host as an export is
(`_compile.TRACING`), lowered by Inductor for the simulated GPU. Its C++ wrapper is generated, and its
compile-time autotuning block runs on the twin as on the GPU (`generate_and_run_autotune_block`,
torch/_inductor/codegen/wrapper.py: each Triton kernel's arguments made by `generate_example_value`,
deleted after their last kernel), but the shared library is not built (the host has no CUDA
toolkit). What the loaded model does at each call is the Python wrapper Inductor generates for the
same graph, as its two-pass cpp-wrapper compile does (`GraphLowering.codegen_with_cpp_wrapper`, graph.py):
both wrappers take their buffer allocations, reuses and frees from the same memory-planning lines
(`aoti_torch_empty_strided` -> `at::empty_strided` -> the caching allocator, as `empty_strided_cuda`),
and its Triton kernels launch with the configs chosen at compile time (no autotuning at the first call).

The loaded model's constants are a copy of the weights in one blob that `AOTInductorModelBase::load_constants`
(torch/csrc/inductor/aoti_runtime/model_base.h) takes with `cudaMalloc`, outside the caching allocator
(with `aot_inductor.weight_use_caching_allocator`, one raw allocation of the caching allocator): it is
not in `memory_allocated()` or `memory_reserved()`; the twin holds the copy as tensors it does not
allocate, and takes the blob from the device's free memory (`mem_get_info`, the room for segments) as
the driver's own allocations are, until the loaded model goes.
"""

from __future__ import annotations

import json
import os
import weakref

import torch

from . import _compile

#: the device memory page a `cudaMalloc` outside the caching allocator is taken in (an assumption,
#: named unmeasured where used: the caching allocator's own segments are multiples of it)
_DRIVER_PAGE = 2 << 20
#: the models compiled in this process, by the path of their package (`aoti_load_package` reads them)
MODELS: dict[str, _Model] = {}
#: a compiled graph's model by the path of the shared library `AotCodeCompiler.compile` would have built
_BY_LIBRARY: dict[str, _Model] = {}


class _Model:
    """One compiled graph: the Python wrapper's module that runs it, its constants, its call spec."""

    def __init__(
        self, module, constants: dict, in_spec: str, out_spec: str, blob_size: int = 0, caching=False
    ):
        self.module, self.constants = module, constants
        self.in_spec, self.out_spec = in_spec, out_spec
        #: the constant blob's bytes, and whether the caching allocator gives it
        #: (`aot_inductor.weight_use_caching_allocator`, compiled in as a macro: cpp_builder.py)
        self.blob_size, self.caching = blob_size, caching


def _spec(t: torch.Tensor) -> torch.Tensor:
    """A constant's sizes, strides and dtype, as a meta tensor (not the program's tensor)."""
    with torch._C._DisableTorchDispatch():
        return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="meta")


def _blob_copy(cap, t: torch.Tensor) -> torch.Tensor:
    """A constant as the loaded model holds it: a tensor of the same size and strides in the
    `cudaMalloc`'d blob, which the caching allocator does not see (a simulated tensor whose storage
    the twin holds no block for)."""
    with torch._C._DisableTorchDispatch():
        blob = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="meta")
    return cap.track(blob, "aoti::constant_blob", "parameter", nbytes=0)


class _Loader:
    """`torch._C._aoti.AOTIModelPackageLoader` for a package compiled in this run: `boxed_run` calls
    the model's Python wrapper over its own constants (`AOTICompiledModel.__call__`,
    torch/export/pt2_archive/_package.py, flattens the arguments and unflattens the outputs).
    Named as that class (`AOTICompiledModel.loader`'s type)."""

    def __init__(
        self, cap, path, model_name="model", run_single_threaded=False, num_runners=1, device_index=-1
    ):
        model = MODELS.get(os.path.abspath(os.fspath(path)))
        if model is None:
            raise RuntimeError(
                f"vramscope: {path} was not compiled by aoti_compile_and_package in this run: the twin "
                "cannot load an AOTInductor package built elsewhere (its graph is not in the file it wrote)"
            )
        self.model = model
        # the container loads the constants once (`AOTInductorModelContainer`'s constructor,
        # model_container.h: `load_constants` into the blob), shared by its `num_runners` models
        self.constants = {name: _blob_copy(cap, t) for name, t in model.constants.items()}
        # `RAII_gpuMalloc` (model_base.h): cudaMalloc, or with the caching-allocator macro one raw
        # allocation of the whole blob (`aoti_torch_cuda_caching_allocator_raw_alloc`)
        self.blob = cap.malloc(model.blob_size, "aoti::constant_blob", "parameter") if model.caching else None
        take = getattr(cap.device, "aoti_constant_blob", None)  # a native module built before has none
        if not model.caching and model.blob_size and take is not None:
            # the cudaMalloc'd blob: outside the caching allocator's figures, but the device's free
            # memory (`mem_get_info`) and the room left for segments shrink by it, as by the driver's
            # own allocations, until the model goes (`RAIIDataPtr`'s cudaFree)
            nbytes = -(-model.blob_size // _DRIVER_PAGE) * _DRIVER_PAGE
            take(nbytes)
            weakref.finalize(self, cap.device.aoti_constant_blob_free, nbytes)
            cap.note_unmeasured(
                "AOTInductor's constant blob (cudaMalloc)",
                "AOTInductor's constant blob is taken from the device's free memory as its size rounded "
                "up to 2 MiB: the driver's rounding of a cudaMalloc outside the caching allocator was "
                "not measured",
            )

    def get_call_spec(self):
        return [self.model.in_spec, self.model.out_spec]

    def boxed_run(self, inputs):
        module = self.model.module
        # the module's constants are the loaded model's for this call (two packages of one graph
        # share no module state: the module is this model's)
        for name, value in self.constants.items():
            setattr(module, name, value)
        tensors = iter(inputs)
        args = [next(tensors) if tensor else None for tensor in module._vramscope_tensor_inputs]
        return list(module.call(args))

    def get_metadata(self):
        return {"AOTI_DEVICE_KEY": "cuda"}

    def get_constant_fqns(self):
        return list(self.constants)


_Loader.__module__ = "torch._C._aoti"
_Loader.__name__ = _Loader.__qualname__ = "AOTIModelPackageLoader"


def _mark_tuned(module) -> None:
    """The Triton kernels of the runtime module launch with the configs the compile-time block chose
    (the C++ wrapper launches one cubin per kernel): no autotuning at their first call."""
    for value in vars(module).values():
        if isinstance(value, _compile._Kernel):
            value.tuned = True


def _codegen_with_cpp_wrapper(original, cap):
    """`GraphLowering.codegen_with_cpp_wrapper` of an AOT graph for the GPU: first the Python wrapper
    (the first pass of the two-pass compile, graph.py, without its run: its autotuning is the
    compile-time block's), kept as the model's runtime, then the C++ wrapper as PyTorch makes it
    (one pass, running the compile-time autotuning block)."""

    def codegen(self):
        from torch._inductor import config, metrics
        from torch._inductor.virtualized import V

        if not self.aot_mode or "cuda" not in self.device_types:
            return original(self)
        self.cpp_wrapper = False
        one_pass = config.triton.autotune_at_compile_time
        with config.patch({"triton.autotune_at_compile_time": False}):
            module = self.compile_to_module()
        if not one_pass:
            # the two-pass compile (`triton.autotune_at_compile_time=False`, graph.py) runs its first
            # pass's module once on the example inputs, each Triton kernel autotuned at its first
            # launch, before the C++ wrapper (mutated inputs cloned first)
            from torch._inductor.compile_fx import clone_preserve_strides

            real = list(V.real_inputs)
            mutated = [i for i, name in enumerate(self.graph_input_names) if name in self.mutated_inputs]
            run = _with_modes(cap, lambda args: module.call(args))
            with_clones = _with_modes(cap, lambda args: [clone_preserve_strides(args[i]) for i in mutated])
            for i, clone in zip(mutated, with_clones(real), strict=True):
                real[i] = clone
            run(real)
            del real
        _mark_tuned(module)
        from torch._inductor import ir

        # the wrapper unpacks every placeholder; the loaded model is given the tensors only
        # (`AOTICompiledModel.__call__`: a non-tensor input, `use_cache=False`, is a None placeholder)
        module._vramscope_tensor_inputs = [
            isinstance(self.graph_inputs.get(name), ir.TensorBox) for name in self.graph_input_names
        ]
        self._vramscope_module = module
        # as the two-pass compile resets the graph for its second pass (graph.py)
        self.cpp_wrapper = True
        self.removed_buffers.clear()
        self.removed_operations.clear()
        self.inplaced_to_remove.clear()
        V.graph.sizevars.precomputed_replacements.clear()
        V.graph.sizevars.inv_precomputed_replacements.clear()
        metrics.reset()
        if not one_pass:
            # (its second pass would need the cubins' launch parameters, as below)
            from torch._inductor.utils import ValueWithLineMap

            return ValueWithLineMap(module.__file__, []), ValueWithLineMap("", [])
        try:
            return original(self)
        except _BlockRan:
            # the rest of the C++ wrapper would need the cubins' launch parameters
            # (`CudaKernelParamCache`, which a compile for the GPU fills): the model's code is the
            # Python wrapper's, the C++ source's hash names the library
            from torch._inductor.utils import ValueWithLineMap

            key = module.__file__
            return ValueWithLineMap(key, []), ValueWithLineMap("", [])

    return codegen


class _BlockRan(Exception):
    """The compile-time autotuning block of an AOT graph's C++ wrapper has run (`_run_block`)."""


def _run_block(cap, original):
    """`generate_and_run_autotune_block` of an AOT graph's C++ wrapper: the block runs with the
    capture's modes back (`_with_modes`: its tensors are the GPU's), then the C++ codegen stops
    (`_BlockRan`)."""
    block = _with_modes(cap, original)

    def run(self):
        from torch._inductor.virtualized import V

        block(self)
        if V.graph.aot_mode and V.graph.cpp_wrapper and getattr(V.graph, "_vramscope_module", None):
            raise _BlockRan

    return run


def _aot_code_compile(original):
    """`AotCodeCompiler.compile` (codecache.py): the shared library is not built; the model is
    registered under the library's path, which the package lists."""

    def compile(
        graph, wrapper_code, kernel_code, serialized_extern_kernel_nodes, *, device_type, additional_files
    ):
        module = getattr(graph, "_vramscope_module", None)
        if module is None:
            return original(
                graph,
                wrapper_code,
                kernel_code,
                serialized_extern_kernel_nodes,
                device_type=device_type,
                additional_files=additional_files,
            )
        from torch._inductor import config
        from torch._inductor.codecache import code_hash, get_path

        # the weights go into the library (`_to_bytes`): the model keeps their sizes, the program's
        # tensors are not held (deleting the module after the compile frees them, as on the GPU)
        kept = {name: value for name, value in graph.constants.items() if name not in graph.folded_constants}
        constants = {name: _spec(value) for name, value in kept.items()}
        # `compute_constant_blob` (model_base.h): each constant's storage (`data_size`, its
        # `untyped_storage().nbytes()`: cpp_wrapper_cpu.py) rounded up to 64 bytes
        blob_size = sum(
            -(-value.untyped_storage().nbytes() // 64) * 64 for value in kept.values() if value.is_cuda
        )
        for name in graph.constants:
            setattr(module, name, constants.get(name))
        model = _Model(
            module,
            constants,
            config.aot_inductor.serialized_in_spec,
            config.aot_inductor.serialized_out_spec,
            blob_size,
            config.aot_inductor.weight_use_caching_allocator,
        )
        key = code_hash(wrapper_code)
        _, _, library = get_path(key, "so")
        _BY_LIBRARY[library] = model
        return [library]

    return compile


def compile_and_package_fn(original, cap):
    """`aoti_compile_and_package` while capturing: the exported program's module compiled by
    `aot_compile` (torch/_inductor/__init__.py, as `aot_inductor_minifier_wrapper` calls it) with the
    twin's options (`_compile._options`), its trace on the host; the package written is a small file
    that names the model this process compiled."""

    def compile_and_package(exported_program, *args, package_path=None, inductor_configs=None, **kwargs):
        from torch.utils._pytree import tree_leaves

        tensors = [*tree_leaves(exported_program.example_inputs or ()), *exported_program.state_dict.values()]
        if not any(isinstance(t, torch.Tensor) and t.is_cuda for t in tensors):
            return original(
                exported_program,
                *args,
                package_path=package_path,
                inductor_configs=inductor_configs,
                **kwargs,
            )
        if package_path is not None and not isinstance(package_path, (str, os.PathLike)):
            raise NotImplementedError(
                "vramscope: aoti_compile_and_package into a buffer (a path is modelled)"
            )
        from torch._inductor import aot_compile

        options = dict(inductor_configs or {})
        options["aot_inductor.package"] = True
        options = _compile._options(cap, None, options)
        gm = exported_program.module(check_guards=False)
        _compile._sdpa_nodes(cap, gm)
        call_args, call_kwargs = exported_program.example_inputs
        # the graph's inputs as the host's fake tensors while it is traced again, as they were when
        # it was exported (`run_decompositions_fn`)
        saved = [(n, n.meta["val"]) for n in gm.graph.nodes if n.op == "placeholder" and "val" in n.meta]
        for node, val in saved:
            node.meta["val"] = _compile._to_host(val)
        from torch.overrides import _pop_mode_temporarily
        from torch.utils._python_dispatch import _disable_current_modes

        previous, _compile.TRACING[0] = _compile.TRACING[0], 1
        cap.compiled_depth += 1
        try:
            # traced without the capture's modes, as dynamo's compile is (`_with_modes` puts them
            # back where the compile runs ops of the GPU's)
            _COMPILING[0] = True
            with _pop_mode_temporarily(), _disable_current_modes():
                files = aot_compile(gm, call_args, call_kwargs, options=options)
        finally:
            _COMPILING[0] = False
            _compile.TRACING[0] = previous
            cap.compiled_depth -= 1
            for node, val in saved:
                node.meta["val"] = val
        models = [_BY_LIBRARY.pop(f) for f in files if isinstance(f, str) and f in _BY_LIBRARY]
        if len(models) != 1:
            raise RuntimeError("vramscope: AOTInductor compiled no model for the GPU here")
        if package_path is None:
            package_path = os.path.splitext(files[0])[0] + ".pt2"
        path = os.path.abspath(os.fspath(package_path))
        with open(path, "w") as f:
            json.dump({"vramscope": "AOTInductor package compiled for the simulated GPU in this run"}, f)
        MODELS[path] = models[0]
        return os.fspath(package_path)

    return compile_and_package


def load_package_fn(original, cap):
    """`torch._inductor.package.load_package` while capturing: a package this run compiled loads as
    `AOTICompiledModel` over `_Loader`."""

    def load_package(path, model_name="model", run_single_threaded=False, num_runners=1, device_index=-1):
        if isinstance(path, (str, os.PathLike)) and os.path.abspath(os.fspath(path)) in MODELS:
            from torch.export.pt2_archive._package import AOTICompiledModel

            loader = _Loader(cap, path, model_name, run_single_threaded, num_runners, device_index)
            return AOTICompiledModel(loader)
        return original(path, model_name, run_single_threaded, num_runners, device_index)

    return load_package


#: set while `aoti_compile_and_package` compiles (`compile_and_package`)
_COMPILING = [False]


def _fake_constants(original):
    """`FakeTensorProp`'s `get_attr` (an `Interpreter`'s) while AOTInductor compiles: a constant of
    the graph (a parameter or buffer the AOT graph keeps as an attribute) as a fake tensor. The
    program's own tensor there makes an op of constants and numbers alone (`add(running_var, eps)`
    of a BatchNorm) run for real (FakeTensorMode's constant propagation, fake_tensor.py), outside
    the capture's modes here: it reached the host's CUDA. On the GPU that op's result is a transient
    of a few hundred bytes during the compile, not made here."""

    def get_attr(self, target, args, kwargs):
        value = original(self, target, args, kwargs)
        if (
            _COMPILING[0]
            and isinstance(value, torch.Tensor)
            and not isinstance(value, torch._subclasses.fake_tensor.FakeTensor)
            and value.is_cuda
        ):
            return self._mode.from_tensor(value, static_shapes=True)
        return value

    return get_attr


def _with_modes(cap, original):
    """`original` with the capture's modes back (taken off for AOTInductor's trace): its ops are
    the GPU's (the compile-time autotuning block's tensors, `_unlift_graph`'s clones of buffers)."""

    def call(*args, **kwargs):
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

        if not cap.active or any(m is cap._modes[1] for m in _get_current_dispatch_mode_stack()):
            return original(*args, **kwargs)
        previous, _compile.TRACING[0] = _compile.TRACING[0], 0
        try:
            with cap._modes[0], cap._modes[1]:
                return original(*args, **kwargs)
        finally:
            _compile.TRACING[0] = previous

    return call


def patch(p, cap) -> None:
    """Install AOTInductor's compile and load for the simulated GPU."""
    p.when_imported(
        "torch._inductor",
        lambda inductor: p.set(
            inductor,
            "aoti_compile_and_package",
            compile_and_package_fn(inductor.aoti_compile_and_package, cap),
        ),
    )

    def graph_patch(graph):
        lowering = graph.GraphLowering
        p.set(
            lowering,
            "codegen_with_cpp_wrapper",
            _codegen_with_cpp_wrapper(lowering.codegen_with_cpp_wrapper, cap),
        )

    p.when_imported("torch._inductor.graph", graph_patch)

    def wrapper_patch(wrapper):
        codegen = wrapper.PythonWrapperCodegen
        block = codegen.generate_and_run_autotune_block
        p.set(codegen, "generate_and_run_autotune_block", _run_block(cap, block))

    p.when_imported("torch._inductor.codegen.wrapper", wrapper_patch)

    def compile_fx_patch(compile_fx):
        aot = compile_fx.compile_fx_aot

        def compile_fx_aot(model_, example_inputs_, inner_compile=None, config_patches=None):
            # Inductor's compile of the graph traced on the host, relabelled cuda (`_inner_compile`)
            inner = _compile._inner_compile(inner_compile or compile_fx.compile_fx_inner)
            return aot(model_, example_inputs_, inner_compile=inner, config_patches=config_patches)

        p.set(compile_fx, "compile_fx_aot", compile_fx_aot)
        extract = compile_fx._extract_inputs_from_exported_gm

        def extract_inputs(gm, example_inputs_):
            # the exported graph's fake inputs, the host's while AOTInductor traces it here
            # (`compile_and_package`), where the example inputs are the GPU's: the device check
            # compares the two
            if not _compile.TRACING[0]:
                return extract(gm, example_inputs_)
            fake = [node.meta.get("val") for node in gm.graph.nodes if node.op == "placeholder"]
            fake = [v if isinstance(v, torch.Tensor) else None for v in fake]
            return fake if any(v is not None for v in fake) else example_inputs_

        p.set(compile_fx, "_extract_inputs_from_exported_gm", extract_inputs)
        p.set(compile_fx, "_unlift_graph", _with_modes(cap, compile_fx._unlift_graph))

    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    p.set(FakeTensorProp, "get_attr", _fake_constants(FakeTensorProp.get_attr))

    p.when_imported("torch._inductor.compile_fx", compile_fx_patch)

    def codecache_patch(codecache):
        compiler = codecache.AotCodeCompiler
        p.set(compiler, "compile", staticmethod(_aot_code_compile(compiler.compile)))

    p.when_imported("torch._inductor.codecache", codecache_patch)

    def package_patch(package):
        p.set(package, "load_package", load_package_fn(package.load_package, cap))

    p.when_imported("torch._inductor.package", package_patch)
    p.when_imported("torch._inductor.package.package", package_patch)
