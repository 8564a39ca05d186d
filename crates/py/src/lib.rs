//! `vramscope._native`: the Rust core of the `vramscope` Python package
//! (its API: `python/vramscope/_native.pyi`).
//!
//! A thin PyO3 layer: `Device` is one simulated GPU of one process, the
//! eager twin's [`Runtime`] (caching allocator, driver memory outside it,
//! cuBLAS workspaces) fed the memory events of a captured PyTorch program
//! through the event seam ([`vramscope_events`], [`RuntimeSink`]); `main`
//! is the Rust command line. Python types stay at this boundary: the
//! crates below know nothing of Python.

#![deny(missing_docs)]

use std::collections::BTreeMap;

use pyo3::create_exception;
use pyo3::exceptions::{
    PyException, PyIndexError, PyNotImplementedError, PyRuntimeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use vramscope_alloc::{AllocatorConfig, ConfigErrorKind};
use vramscope_engine::autocast::{CastPolicy, CUDA_POLICIES};
use vramscope_engine::plans::PlanStep;
use vramscope_engine::{
    cudnn_conv_nearest_workspace, cudnn_conv_problem_workspace, Category, ConvOp, ConvProblem,
    DType, DeviceProfile, EngineError, Runtime, RuntimeConfig, RuntimeSink, ScratchRule,
};
use vramscope_events::{Event, HostThread, Sink, Site, UnknownCategory};

mod snapshot;

create_exception!(
    _native,
    OutOfMemory,
    PyException,
    "The GPU would run out of memory here; args[0] is PyTorch's message."
);

/// The profile of a GPU by its key (`h100`, `a100-80gb`, ...: the GPU
/// profiles of [`vramscope_engine::GPUS`]) or its device name.
pub fn profile_of(gpu: &str) -> Option<DeviceProfile> {
    vramscope_engine::gpu(gpu).map(|g| g.profile())
}

/// A convolution's operation graph by the name the package uses.
fn conv_op(op: &str) -> PyResult<ConvOp> {
    match op {
        "forward" => Ok(ConvOp::Forward),
        "dgrad" => Ok(ConvOp::BackwardData),
        "wgrad" => Ok(ConvOp::BackwardFilter),
        other => Err(PyValueError::new_err(format!(
            "unknown convolution op {other:?}; expected forward, dgrad or wgrad"
        ))),
    }
}

/// A [`ConvProblem`] from the package's arguments: `sizes` are the input,
/// weight, stride, padding, dilation and output padding.
fn conv_problem<'a>(
    op: &str,
    dtype: &str,
    sizes: &'a [Vec<i64>; 6],
    groups: i64,
    transposed: bool,
    channels_last: bool,
) -> PyResult<ConvProblem<'a>> {
    let [input, weight, stride, padding, dilation, output_padding] = sizes;
    Ok(ConvProblem {
        op: conv_op(op)?,
        dtype: dtype_of(dtype)?,
        channels_last,
        transposed,
        input,
        weight,
        stride,
        padding,
        dilation,
        output_padding,
        groups,
    })
}

/// A PyTorch dtype name (`"bfloat16"`, `"float32"`, ...) as the twin's.
fn dtype_of(name: &str) -> PyResult<DType> {
    Ok(match name {
        "float32" | "float" => DType::F32,
        "float16" | "half" => DType::F16,
        "bfloat16" => DType::BF16,
        "float64" | "double" => DType::F64,
        "int64" | "long" => DType::I64,
        "int32" | "int" => DType::I32,
        "uint8" => DType::U8,
        "bool" => DType::Bool,
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown dtype {other:?}; expected float32, float16, bfloat16, float64, int64, int32, uint8 or bool"
            )))
        }
    })
}

/// The engine's error as Python sees it: out of memory as [`OutOfMemory`]
/// with PyTorch's whole message where the allocator raised it (the
/// driver's own words where a cuBLAS handle found no room), anything else
/// as a `ValueError`.
fn py_err(rt: &Runtime, e: EngineError) -> PyErr {
    match e {
        EngineError::OutOfMemory { .. } => OutOfMemory::new_err(oom_message(rt, e)),
        other => PyValueError::new_err(other.to_string()),
    }
}

/// The message of an out-of-memory `e` of `rt`: PyTorch's
/// (`torch.OutOfMemoryError`'s) when the caching allocator raised it.
fn oom_message(rt: &Runtime, e: EngineError) -> String {
    match e {
        EngineError::OutOfMemory { detail, .. } => match rt.last_out_of_memory() {
            Some(oom) if oom.to_string() == detail => oom.torch_message(),
            _ => detail,
        },
        other => other.to_string(),
    }
}

/// A category name as the event seam's, or a `ValueError` naming the
/// accepted ones.
fn category_of(name: &str) -> PyResult<Category> {
    name.parse()
        .map_err(|e: UnknownCategory| PyValueError::new_err(e.to_string()))
}

/// A fresh process (`torch.cuda.init()` done, before its first kernels)
/// on `gpu` under `PYTORCH_CUDA_ALLOC_CONF=conf`, as the estimates
/// (`vramscope_models::estimate`) start one; the error names the bad GPU
/// or setting.
fn fresh_process(gpu: &str, conf: &str) -> Result<(Runtime, AllocatorConfig), String> {
    let profile = profile_of(gpu).ok_or_else(|| {
        let keys: Vec<&str> = vramscope_engine::GPUS.iter().map(|g| g.key).collect();
        format!("unknown GPU {gpu:?}; expected one of {}", keys.join(", "))
    })?;
    let cfg = AllocatorConfig::parse(conf)
        .map_err(|e| format!("PYTORCH_CUDA_ALLOC_CONF={conf:?}: {e}"))?;
    let rt = Runtime::new(RuntimeConfig {
        profile,
        allocator: cfg.clone(),
        fresh_process: true,
    });
    Ok((rt, cfg))
}

/// One simulated GPU of one fresh process (`torch.cuda.init()` done,
/// nothing allocated). Any thread of the program may call it: a thread of
/// its own doing CUDA work, as on the GPU (`_threads.py`).
#[pyclass(module = "vramscope._native")]
struct Device {
    p: RuntimeSink,
    next_id: u64,
}

// SAFETY: the runtime's `Rc`s and `RefCell`s are reached only through this
// object, and only while the calling thread holds the GIL: the module does
// not declare itself free of it (`#[pymodule]`'s default `gil_used`), no
// method releases it, and no method hands out a reference into the runtime
// (every answer is a copy). So no two threads touch them at once, and the
// object may move to and be shared with another thread.
unsafe impl Send for Device {}
unsafe impl Sync for Device {}

impl Device {
    fn send(&mut self, e: &Event) -> PyResult<()> {
        self.p.event(e).map_err(|err| py_err(self.p.runtime(), err))
    }
}

/// `conv_workspace_nearest`'s answer: the bytes, and the neighbour's input
/// and weight sizes, padding and dilation.
type NearestEstimate = (u64, Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>);

#[pymethods]
impl Device {
    #[new]
    #[pyo3(signature = (gpu = "h100", alloc_conf = None))]
    fn new(gpu: &str, alloc_conf: Option<&str>) -> PyResult<Self> {
        let (rt, _) =
            fresh_process(gpu, alloc_conf.unwrap_or("")).map_err(PyValueError::new_err)?;
        rt.start_event_log();
        Ok(Device {
            p: RuntimeSink::new(rt),
            next_id: 0,
        })
    }

    /// `torch.cuda.get_device_name()`.
    #[getter]
    fn name(&self) -> &'static str {
        self.p.runtime().profile().name
    }

    /// `get_device_properties().total_memory`.
    #[getter]
    fn total_memory(&self) -> u64 {
        self.p.runtime().profile().total_memory
    }

    /// `torch.cuda.get_device_capability()`.
    #[getter]
    fn capability(&self) -> (u32, u32) {
        self.p.runtime().profile().capability
    }

    /// The GPU profile's `--gpu` key (`h100`, `a100-80gb`, ...).
    #[getter]
    fn key(&self) -> &'static str {
        self.p.runtime().profile().key
    }

    /// The GPU's constants that were not measured on it (empty on the
    /// H100 and H200), as a report names them ("CUDA context", ...).
    #[getter]
    fn estimated_constants(&self) -> Vec<&'static str> {
        self.p.runtime().profile().grades.estimated()
    }

    /// Whether the cuDNN workspace tables measured on sm_90 hold for this
    /// GPU (a table lookup on another GPU is an unmeasured size).
    #[getter]
    fn cudnn_tables(&self) -> bool {
        self.p.runtime().profile().cudnn_tables
    }

    /// Which SDPA backends this GPU's capability allows (`sdp_utils.cpp`'s
    /// hardware checks, as [`vramscope_engine::SdpaSupport`] holds them).
    #[getter]
    fn sdpa(&self) -> std::collections::BTreeMap<&'static str, bool> {
        let s = self.p.runtime().profile().sdpa;
        std::collections::BTreeMap::from([
            ("flash", s.flash),
            ("efficient", s.efficient),
            ("cudnn", s.cudnn),
            ("prefers_cudnn", s.prefers_cudnn),
            ("cudnn_hopper_head_dim", s.cudnn_hopper_head_dim),
            ("bf16", s.bf16),
            ("flash_head_dim_192_limit", s.flash_head_dim_192_limit),
        ])
    }

    /// `get_device_properties().multi_processor_count`.
    #[getter]
    fn multi_processor_count(&self) -> u32 {
        self.p.runtime().profile().sm_count
    }

    /// `get_device_properties().max_threads_per_multi_processor`.
    #[getter]
    fn max_threads_per_multi_processor(&self) -> u32 {
        self.p.runtime().profile().max_threads_per_sm
    }

    /// `get_device_properties().L2_cache_size`, bytes.
    #[getter]
    fn l2_cache_size(&self) -> u64 {
        self.p.runtime().profile().l2_cache_bytes
    }

    /// Allocate through the caching allocator; returns a handle for `free`.
    /// `source` is the program's line that asked (`file.py:12 in step`).
    #[pyo3(signature = (nbytes, stream, category, op, module, source=""))]
    fn malloc(
        &mut self,
        nbytes: u64,
        stream: u64,
        category: &str,
        op: &str,
        module: &str,
        source: &str,
    ) -> PyResult<u64> {
        let category = category_of(category)?;
        self.next_id += 1;
        let id = self.next_id;
        self.send(&Event::Alloc {
            id,
            bytes: nbytes,
            stream,
            category,
            site: Site {
                op: op.to_owned(),
                module: module.to_owned(),
                source: source.to_owned(),
            },
        })?;
        Ok(id)
    }

    /// Free an allocation `malloc` returned.
    fn free(&mut self, handle: u64) -> PyResult<()> {
        self.send(&Event::Free { id: handle })
    }

    /// The device address of the live allocation `handle` (None: freed).
    fn addr_of(&self, handle: u64) -> Option<u64> {
        self.p.addr_of(handle)
    }

    /// `Tensor.record_stream(stream)`: the allocation is used on `stream`
    /// too (its block, freed, waits for that stream's work).
    fn record_stream(&mut self, handle: u64, stream: u64) -> PyResult<()> {
        self.send(&Event::RecordStream { id: handle, stream })
    }

    /// File an allocation under another category.
    fn set_category(&mut self, handle: u64, category: &str) -> PyResult<()> {
        let category = category_of(category)?;
        self.send(&Event::Recategorize {
            id: handle,
            category,
        })
    }

    /// A cuBLAS call on (`thread`, `handle`, `stream`): `handle` 0 is the
    /// thread's own, n > 0 a handle of the program's own threads.
    #[pyo3(signature = (op, thread, stream, dtype, lt, source="", handle=0))]
    #[allow(clippy::too_many_arguments)]
    fn blas(
        &mut self,
        op: &str,
        thread: &str,
        stream: u64,
        dtype: &str,
        lt: bool,
        source: &str,
        handle: u32,
    ) -> PyResult<()> {
        let thread: HostThread = thread.parse().map_err(PyValueError::new_err)?;
        // complex64 runs `cublasCgemm` (32-bit parts), complex128 `cublasZgemm` as float64 does
        let half = match dtype {
            "complex64" | "cfloat" => false,
            "complex128" | "cdouble" => true,
            _ => dtype_of(dtype)? != DType::F32,
        };
        self.send(&Event::Blas {
            thread,
            handle,
            stream,
            half,
            lt,
            op: op.to_owned(),
            source: source.to_owned(),
        })
    }

    /// The process's first kernel launch is next.
    fn first_kernels(&self) {
        self.p.runtime().first_kernels();
    }

    /// A cuDNN plan (a convolution's, cuDNN attention's) is built next:
    /// cuDNN's libraries load where they have not (driver address-space
    /// rule 9).
    ///
    /// Where it makes the process's first cuDNN handle after other kernels,
    /// the driver takes `before` and `after` 2 MiB pieces more, before and
    /// after the handle's own (`Runtime::cudnn_plan_pieces`).
    #[pyo3(signature = (before = 0, after = 0))]
    fn cudnn_plan(&self, before: u32, after: u32) {
        self.p.runtime().cudnn_plan_pieces(before, after);
    }

    /// The driver takes `len` bytes of address space for good, placed as a
    /// segment is (a piece of a cuDNN handle's, driver address-space rule
    /// 18): its address, or None.
    fn driver_piece(&self, len: u64) -> Option<u64> {
        self.p.runtime().driver_piece(len)
    }

    /// A cuDNN RNN call (`_cudnn_rnn_flatten_weight`, `_cudnn_rnn`) is
    /// next: at the process's first, cuDNN's libraries and the driver's
    /// mappings take address space (`Runtime::cudnn_rnn`; `jit_cache_cold`:
    /// the driver compiles PTX its cache lacks, loading its JIT compiler).
    fn cudnn_rnn(&self, jit_cache_cold: bool) {
        self.p.runtime().cudnn_rnn(jit_cache_cold);
    }

    /// `scaled_dot_product_attention` chooses its backend (asking cuDNN):
    /// cuDNN's graph library loads where it has not (driver address-space
    /// rule 9).
    fn sdpa_backend_choice(&self) {
        self.p.runtime().sdpa_backend_choice();
    }

    /// The process's first kernel has just launched, after its op's
    /// allocations: the driver takes 2 MiB (driver address-space rule 6).
    fn first_launch(&self) {
        self.p.runtime().first_launch();
    }

    /// A CPU tensor of `nbytes` made before the CUDA context: its mapping
    /// above the context, `(address, length)`, or None when glibc's heap
    /// serves it (driver address-space rules 7 and 11). Call lowest first.
    /// `above`: the lowest one's offset over the context's anchor (a GPU
    /// process's own, read from its maps), else the measured median.
    #[pyo3(signature = (nbytes, above=None))]
    fn host_before_context(&self, nbytes: u64, above: Option<u64>) -> Option<(u64, u64)> {
        self.p.runtime().host_before_context(nbytes, above)
    }

    /// A mapping of `len` bytes made before the CUDA context, at `offset`
    /// bytes over the context's anchor (driver address-space rule 17): its
    /// address, or None once the context exists.
    fn host_at(&self, offset: u64, len: u64) -> Option<u64> {
        self.p.runtime().host_at(offset, len)
    }

    /// Address space at `offset` over the context's anchor that no mapping
    /// made before the context holds (rule 17): free for chunks.
    fn host_free_at(&self, offset: u64, len: u64) {
        self.p.runtime().host_free_at(offset, len);
    }

    /// The length of the mapping glibc makes for a CPU tensor of `nbytes`
    /// at the twin's threshold (driver address-space rule 7), or None when
    /// its heap serves it.
    fn host_mapping_len(&self, nbytes: u64) -> Option<u64> {
        self.p.runtime().host_mapping_len(nbytes)
    }

    /// glibc unmaps a mapping `host_before_context` placed.
    fn host_unmapped(&self, addr: u64, len: u64) {
        self.p.runtime().host_unmapped(addr, len);
    }

    /// AOTInductor's constant blob (`AOTInductorModelBase::load_constants`,
    /// aoti_runtime/model_base.h): `cudaMalloc` of `bytes` outside the
    /// caching allocator, taken from the device as the driver's own memory
    /// is ([`Runtime::driver_outside`]); out of memory when less is free.
    fn aoti_constant_blob(&self, bytes: u64) -> PyResult<()> {
        self.p
            .runtime()
            .driver_outside("aoti_constant_blob", bytes)
            .map_err(|e| py_err(self.p.runtime(), e))
    }

    /// The first side stream (`torch.cuda.Stream()`): the device's stream
    /// pools, once ([`Runtime::stream_pools`]).
    fn stream_pools(&self) -> PyResult<()> {
        self.p
            .runtime()
            .stream_pools()
            .map_err(|e| py_err(self.p.runtime(), e))
    }

    /// The blob's `cudaFree` when its model goes.
    fn aoti_constant_blob_free(&self, bytes: u64) {
        self.p.runtime().driver_outside_free(bytes);
    }

    /// An op has launched a kernel of the module `module`: the module's
    /// host memory at its first load, where the twin knows it (driver
    /// address-space rule 12).
    fn kernel_module(&self, module: &str) {
        self.p.runtime().kernel_module(module);
    }

    /// A block of `len` bytes of the caching host allocator
    /// (`pin_memory()`): `cudaHostAlloc` maps it among the segments when
    /// over 2 MiB (driver address-space rule 16); its address, or None.
    fn pinned_alloc(&self, len: u64) -> Option<u64> {
        self.p.runtime().pinned_alloc(len)
    }

    /// `cudaFreeHost` of a block `pinned_alloc` mapped at `addr`.
    fn pinned_free(&self, addr: u64) {
        self.p.runtime().pinned_free(addr);
    }

    /// OpenMP's `n` workers start, each a stack, the first `working` of
    /// them also their malloc arena (driver address-space rule 15). Once.
    fn intra_op_workers(&self, n: u32, working: u32) {
        self.p.runtime().intra_op_workers(n, working);
    }

    /// A parallel CPU op's loop shared among `working` workers: those that
    /// have not yet make their malloc arena (rule 15).
    fn intra_op_work(&self, working: u32) {
        self.p.runtime().intra_op_work(working);
    }

    /// A host-to-device copy staged on the host: its CPU temporary of
    /// `nbytes` (mapped where glibc maps it, freed after the copy),
    /// OpenMP's `workers` starting during it when not 0, `working` of them
    /// sharing its loop (driver address-space rules 7 and 15).
    fn host_conversion(&self, nbytes: u64, workers: u32, working: u32) {
        self.p.runtime().host_conversion(nbytes, workers, working);
    }

    /// The process imports `torch._dynamo`, which maps `libtriton.so`
    /// (driver address-space rule 10).
    fn triton_loaded(&self) {
        self.p.runtime().triton_loaded();
    }

    /// The driver's pool's top 8 MiB are laid out from its reservation on
    /// (driver address-space rule 14): 2 MiB segments go into their hole.
    fn lay_out_pool_top(&self) {
        self.p.runtime().lay_out_pool_top();
    }

    /// A kernel that gives the context's range back has just launched,
    /// after its op's allocations (driver address-space rule 6).
    fn kernels_launched(&self) {
        self.p.runtime().kernels_launched();
    }

    /// The scratch each 32-bit launch of a CUDA reduction allocates
    /// (`gpu_reduce_kernel`: global buffer, semaphores), for an input of
    /// `sizes`/`strides` (elements) reduced over the dims marked in
    /// `reduced`, `elem` and `acc` bytes per element.
    fn reduce_scratch(
        &self,
        sizes: Vec<i64>,
        strides: Vec<i64>,
        reduced: Vec<bool>,
        elem: i64,
        acc: i64,
    ) -> Vec<(u64, u64)> {
        let profile = self.p.runtime().profile();
        let rule = |index, semaphores| ScratchRule::Reduce {
            sizes: sizes.clone(),
            strides: strides.clone(),
            reduced: reduced.clone(),
            elem,
            acc,
            index,
            semaphores,
        };
        (0..)
            .map_while(|i| {
                Some((
                    rule(i, false).bytes(&profile)?,
                    rule(i, true).bytes(&profile)?,
                ))
            })
            .collect()
    }

    /// CUB's temporary storage (`ops::cub`) for `cuda::cub::inclusive_scan`
    /// over `n` items of `t_bytes` (`kind` "scan"), or for
    /// `cuda::cub::radix_sort_pairs` of `n` keys of `t_bytes` sorted on
    /// `end_bit` bits with values of `value_bytes` (`kind` "sort"), or for
    /// `nonzero`'s count and selection of `n` items (`kind` "count",
    /// "select"), `unique`'s selection of `t_bytes` keys, inverse scan and
    /// run-length encoding ("unique", "sumscan", "encode"), `topk`'s
    /// scan by key ("scanbykey"); None where
    /// it was not measured (other GPUs, other element sizes).
    #[pyo3(signature = (kind, n, t_bytes, value_bytes=8, end_bit=None))]
    fn cub_scratch(
        &self,
        kind: &str,
        n: i64,
        t_bytes: u64,
        value_bytes: u64,
        end_bit: Option<u64>,
    ) -> PyResult<Option<u64>> {
        let rule = match kind {
            "scan" => ScratchRule::InclusiveScan { n, t_bytes },
            "count" => ScratchRule::ReduceCount { n },
            "select" => ScratchRule::Select { n, key_bytes: 8 },
            "unique" => ScratchRule::Select {
                n,
                key_bytes: t_bytes,
            },
            "sumscan" => ScratchRule::SumTruncating { n },
            "encode" => ScratchRule::RunLengthEncode { n },
            "scanbykey" => ScratchRule::ScanByKey { n },
            "sort" => ScratchRule::RadixSortPairs {
                n,
                key_bytes: t_bytes,
                value_bytes,
                end_bit: end_bit.unwrap_or(8 * t_bytes),
            },
            other => return Err(PyValueError::new_err(format!(
                "cub_scratch: kind {other:?}, expected \"scan\", \"sort\", \"count\", \"select\", \"unique\", \"sumscan\", \"encode\" or \"scanbykey\""
            ))),
        };
        Ok(rule.bytes(&self.p.runtime().profile()))
    }

    /// The workspace cuDNN's plan takes for a convolution (`op`: "forward",
    /// "dgrad" or "wgrad") as `convolution` received it, from the eager twin's
    /// measured tables (`ops/conv.rs`); None where the problem was not measured.
    #[pyo3(signature = (op, dtype, input, weight, stride, padding, dilation, groups, transposed=false, output_padding=None, channels_last=false))]
    #[allow(clippy::too_many_arguments)]
    fn conv_workspace(
        &self,
        op: &str,
        dtype: &str,
        input: Vec<i64>,
        weight: Vec<i64>,
        stride: Vec<i64>,
        padding: Vec<i64>,
        dilation: Vec<i64>,
        groups: i64,
        transposed: bool,
        output_padding: Option<Vec<i64>>,
        channels_last: bool,
    ) -> PyResult<Option<u64>> {
        let output_padding = output_padding.unwrap_or_else(|| vec![0; stride.len()]);
        let sizes = [input, weight, stride, padding, dilation, output_padding];
        let problem = conv_problem(op, dtype, &sizes, groups, transposed, channels_last)?;
        Ok(cudnn_conv_problem_workspace(
            &self.p.runtime().profile(),
            &problem,
        ))
    }

    /// For a convolution `conv_workspace` has no bytes for, the estimate
    /// from the nearest measured problem (`ops/conv.rs`,
    /// `cudnn_conv_nearest_workspace`): `(bytes, the neighbour's input
    /// sizes, weight sizes, padding, dilation)`, or None where no problem of
    /// its kernel's shape was measured.
    #[pyo3(signature = (op, dtype, input, weight, stride, padding, dilation, groups, transposed=false, output_padding=None, channels_last=false))]
    #[allow(clippy::too_many_arguments)]
    fn conv_workspace_nearest(
        &self,
        op: &str,
        dtype: &str,
        input: Vec<i64>,
        weight: Vec<i64>,
        stride: Vec<i64>,
        padding: Vec<i64>,
        dilation: Vec<i64>,
        groups: i64,
        transposed: bool,
        output_padding: Option<Vec<i64>>,
        channels_last: bool,
    ) -> PyResult<Option<NearestEstimate>> {
        let output_padding = output_padding.unwrap_or_else(|| vec![0; stride.len()]);
        let sizes = [input, weight, stride, padding, dilation, output_padding];
        let problem = conv_problem(op, dtype, &sizes, groups, transposed, channels_last)?;
        Ok(
            cudnn_conv_nearest_workspace(&self.p.runtime().profile(), &problem)
                .map(|n| (n.bytes, n.input, n.weight, n.padding, n.dilation)),
        )
    }

    /// What `embedding_dense_backward` allocates on the GPU, as the eager
    /// twin runs it (`plans.rs`): `("alloc", id, bytes, is_output)` and
    /// `("free", id, 0, False)` steps, in order. `bags`: the sum/mean
    /// `EmbeddingBag` backward's call of the kernel; `deterministic`:
    /// `torch.use_deterministic_algorithms(True)` (`EmbeddingPath`).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (grad_sizes, grad_dtype, grad_contiguous, n, index_dtype, indices_contiguous, num_weights, bags=false, deterministic=false))]
    fn embedding_dense_backward_plan(
        &self,
        grad_sizes: Vec<i64>,
        grad_dtype: &str,
        grad_contiguous: bool,
        n: i64,
        index_dtype: &str,
        indices_contiguous: bool,
        num_weights: i64,
        bags: bool,
        deterministic: bool,
    ) -> PyResult<Vec<(&'static str, u32, u64, bool)>> {
        let steps = vramscope_engine::plans::embedding_dense_backward_plan(
            &self.p.runtime().profile(),
            &grad_sizes,
            dtype_of(grad_dtype)?,
            grad_contiguous,
            n,
            dtype_of(index_dtype)?,
            indices_contiguous,
            num_weights,
            vramscope_engine::EmbeddingPath {
                bags,
                deterministic,
            },
        )
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(steps
            .into_iter()
            .map(|s| match s {
                PlanStep::Alloc { id, bytes, output } => ("alloc", id, bytes, output),
                PlanStep::Free { id } => ("free", id, 0, false),
            })
            .collect())
    }

    /// The workspaces of cuDNN's fused attention on this GPU, as the eager
    /// twin has them (`ops/attention.rs`): the forward plan's, and the
    /// backward's for batch `b`, heads `h` and `h_k`, lengths `s_q`, `s_kv`,
    /// head dim `d_qk`.
    #[allow(clippy::too_many_arguments)]
    fn cudnn_attention_workspaces(
        &self,
        b: i64,
        h: i64,
        h_k: i64,
        s_q: i64,
        s_kv: i64,
        d_qk: i64,
    ) -> (u64, u64) {
        let rule = ScratchRule::CudnnAttentionBackward {
            b,
            h,
            h_k,
            s_q,
            s_kv,
            d_qk,
        };
        let backward = rule.bytes(&self.p.runtime().profile()).unwrap_or(0);
        let shape = vramscope_engine::CudnnFwdShape {
            b,
            h,
            h_k,
            s_q,
            s_kv,
            d: d_qk,
        };
        let sms = self.p.runtime().profile().sm_count;
        (vramscope_engine::cudnn_fwd_workspace(shape, sms), backward)
    }

    /// The workspace of `_efficient_attention_backward` (cutlass kernels of
    /// `cutlassB.h`) for batch `b`, heads `h`, query and key lengths `m`,
    /// `n`, head dims `k`, `kv`.
    #[allow(clippy::too_many_arguments)]
    fn efficient_attention_backward_workspace(
        &self,
        dtype: &str,
        b: i64,
        h: i64,
        m: i64,
        n: i64,
        k: i64,
        kv: i64,
    ) -> PyResult<u64> {
        let rule = ScratchRule::EfficientAttentionBackward {
            dtype: dtype_of(dtype)?,
            dims: [b, h, m, n, k, kv],
        };
        Ok(rule.bytes(&self.p.runtime().profile()).unwrap_or(0))
    }

    /// What is live at the run's highest `memory_allocated()`: one
    /// `(bytes, category, op, module, source)` per allocation, oldest first.
    #[allow(clippy::type_complexity)]
    fn live_at_peak(&self) -> Vec<(u64, String, &'static str, String, String)> {
        self.p
            .runtime()
            .with_event_log(|log| {
                log.live_at_peak()
                    .into_iter()
                    .map(|r| {
                        (
                            r.bytes,
                            r.category.to_string(),
                            r.op,
                            r.module.to_string(),
                            r.source.to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `torch.cuda.memory_stats()`: every key PyTorch 2.11 reports.
    fn memory_stats(&self) -> BTreeMap<String, i64> {
        self.p.runtime().stats().memory_stats()
    }

    /// `torch.cuda.memory_summary()`.
    #[pyo3(signature = (abbreviated = false))]
    fn memory_summary(&self, abbreviated: bool) -> String {
        vramscope_alloc::memory_summary(&self.p.runtime().stats(), 0, abbreviated)
    }

    /// `torch.cuda.memory_allocated()`.
    fn memory_allocated(&self) -> i64 {
        self.p.runtime().memory_allocated()
    }

    /// `torch.cuda.max_memory_allocated()`.
    fn max_memory_allocated(&self) -> i64 {
        self.p.runtime().max_memory_allocated()
    }

    /// `torch.cuda.memory_reserved()`.
    fn memory_reserved(&self) -> i64 {
        self.p.runtime().memory_reserved()
    }

    /// `torch.cuda.max_memory_reserved()`.
    fn max_memory_reserved(&self) -> i64 {
        self.p.runtime().max_memory_reserved()
    }

    /// `torch.cuda.reset_peak_memory_stats()`.
    fn reset_peak_memory_stats(&self) {
        self.p.runtime().reset_peak_memory_stats();
    }

    /// `torch.cuda.reset_accumulated_memory_stats()`.
    fn reset_accumulated_memory_stats(&self) {
        self.p.runtime().reset_accumulated_memory_stats();
    }

    /// `torch.cuda.empty_cache()`.
    fn empty_cache(&self) {
        self.p.runtime().empty_cache();
    }

    /// `emptyCache(mempool_id)` of a private pool nothing holds any more (`~MemPool`): the
    /// unsplit cached blocks of its streams, the default pools' left alone.
    fn empty_cache_of(&self, streams: Vec<u64>) {
        self.p.runtime().empty_cache_of(&streams);
    }

    /// Whether `empty_cache` leaves `stream`'s cached blocks alone (a live
    /// CUDA graph's private pool).
    fn keep_through_empty_cache(&self, stream: u64, keep: bool) {
        self.p.runtime().keep_through_empty_cache(stream, keep);
    }

    /// `beginAllocateToPool` (`CUDAGraph.capture_begin`, `use_mem_pool`):
    /// until `end_allocate_to_pool`, a block freed with stream uses waits.
    fn begin_allocate_to_pool(&self) {
        self.p.runtime().begin_allocate_to_pool();
    }

    /// `endAllocateToPool`.
    fn end_allocate_to_pool(&self) {
        self.p.runtime().end_allocate_to_pool();
    }

    /// A private pool's stream: pool `pool`'s (its `MempoolIdHash`) blocks
    /// allocated on `stream` are kept under the stream id `private`.
    fn register_private_stream(&self, private: u64, pool: u64, stream: u64) {
        self.p
            .runtime()
            .register_private_stream(private, pool, stream);
    }

    /// `setNoSplit` (`MemPool(no_split=True)`).
    fn set_no_split(&self, pool: u64) {
        self.p.runtime().set_no_split(pool);
    }

    /// `setUseOnOOM` (`MemPool(use_on_oom=True)`, `~MemPool`).
    fn set_use_on_oom(&self, pool: u64, use_on_oom: bool) {
        self.p.runtime().set_use_on_oom(pool, use_on_oom);
    }

    /// `stream` begins capturing a CUDA graph.
    fn capture_stream_begin(&self, stream: u64) {
        self.p.runtime().capture_stream_begin(stream);
    }

    /// A node captured on `stream`.
    fn capture_stream_op(&self, stream: u64) {
        self.p.runtime().capture_stream_op(stream);
    }

    /// An event recorded on `stream` (during a capture).
    fn capture_event_record(&self, event: u64, stream: u64) {
        self.p.runtime().capture_event_record(event, stream);
    }

    /// `stream` waits on `event` (during a capture).
    fn capture_event_wait(&self, stream: u64, event: u64) {
        self.p.runtime().capture_event_wait(stream, event);
    }

    /// The capture begun on `stream` ends.
    fn capture_stream_end(&self, stream: u64) {
        self.p.runtime().capture_stream_end(stream);
    }

    /// The cuBLAS and cuBLASLt workspace sizes for the workspaces made from
    /// now on (None: the GPU's default), as the environment sets them.
    #[pyo3(signature = (cublas, lt))]
    fn set_blas_workspaces(&self, cublas: Option<u64>, lt: Option<u64>) {
        self.p.runtime().set_blas_workspaces(cublas, lt);
    }

    /// The GPU's default cuBLAS and cuBLASLt workspace sizes in bytes.
    #[getter]
    fn default_blas_workspaces(&self) -> (u64, u64) {
        let profile = self.p.runtime().profile();
        let w = vramscope_engine::blas_workspace_sizes(profile.capability, profile.torch);
        (w.cublas, w.cublas_lt)
    }

    /// `torch._C._cuda_clearCublasWorkspaces()`.
    fn clear_cublas_workspaces(&self) {
        self.p.runtime().clear_cublas_workspaces();
    }

    /// `(free, total)` as `cudaMemGetInfo` reports them.
    fn mem_get_info(&self) -> (u64, u64) {
        self.p.runtime().mem_get_info()
    }

    /// `torch.cuda.set_per_process_memory_fraction(fraction)`.
    fn set_memory_fraction(&self, fraction: f64) -> PyResult<()> {
        self.p
            .runtime()
            .set_memory_fraction(fraction)
            .map_err(|e| py_err(self.p.runtime(), e))
    }

    /// `torch.cuda.get_per_process_memory_fraction()`.
    fn memory_fraction(&self) -> f64 {
        self.p.runtime().memory_fraction()
    }

    /// Whether the allocator is `backend:cudaMallocAsync`'s (its statistics
    /// are its pool's, `malloc_async.rs`).
    fn is_malloc_async(&self) -> bool {
        self.p.runtime().is_malloc_async()
    }

    /// The caching host allocator's settings now:
    /// (`pinned_use_cuda_host_register`, `pinned_num_register_threads`,
    /// `pinned_use_background_threads`, `pinned_reserve_segment_size_mb`).
    fn pinned_settings(&self) -> (bool, u64, bool, u64) {
        let rt = self.p.runtime();
        let c = rt.allocator_config();
        (
            c.pinned_use_cuda_host_register,
            c.pinned_num_register_threads,
            c.pinned_use_background_threads,
            c.pinned_reserve_segment_size_mb,
        )
    }

    /// The settings' `per_process_memory_fraction`: the limit an allocator
    /// started now would take.
    fn settings_memory_fraction(&self) -> f64 {
        self.p
            .runtime()
            .allocator_config()
            .per_process_memory_fraction
    }

    /// `torch._C._accelerator_setAllocatorSettings(env)`: the allocator's
    /// settings from here on ([`Runtime::set_allocator_settings`]). A bad
    /// string raises what PyTorch raises (`ValueError`, `IndexError`,
    /// `RuntimeError`; `NotImplementedError` for a setting the twin does not
    /// model), the settings before the bad token applied.
    fn set_allocator_settings(&self, env: &str) -> PyResult<()> {
        self.p.runtime().set_allocator_settings(env).map_err(|e| {
            let m = e.message;
            match e.kind {
                ConfigErrorKind::Value => PyValueError::new_err(m),
                ConfigErrorKind::Index => PyIndexError::new_err(m),
                ConfigErrorKind::Runtime => PyRuntimeError::new_err(m),
                ConfigErrorKind::NotModelled => PyNotImplementedError::new_err(m),
            }
        })
    }

    /// Start or stop recording the allocator trace.
    fn record_memory_history(&self, enabled: bool) {
        self.p.runtime().record_memory_history(enabled);
    }

    /// `torch.cuda.memory._dump_snapshot`'s pickle of the state now.
    fn snapshot_pickle<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let cfg = self.p.runtime().allocator_config();
        let bytes = snapshot::pickle(self.p.runtime(), &cfg.settings, &cfg)
            .map_err(|e| PyValueError::new_err(format!("writing the snapshot: {e}")))?;
        Ok(PyBytes::new(py, &bytes))
    }
}

/// Every ATen op with an `AutocastCUDA` kernel and its policy.
#[pyfunction]
fn autocast_policies() -> Vec<(&'static str, &'static str)> {
    CUDA_POLICIES
        .iter()
        .map(|&(name, policy)| {
            let p = match policy {
                CastPolicy::LowerPrecisionFp => "lower_precision_fp",
                CastPolicy::Fp32 => "fp32",
                CastPolicy::Fp32SetOptDtype => "fp32_set_opt_dtype",
                CastPolicy::Fp32AppendDtype => "fp32_append_dtype",
                CastPolicy::Promote => "promote",
                CastPolicy::Banned => "banned",
            };
            (name, p)
        })
        .collect()
}

/// The Rust command line; `argv` without the program name.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<String>) -> u8 {
    let args: Vec<std::ffi::OsString> = std::iter::once("vramscope".into())
        .chain(argv.into_iter().map(Into::into))
        .collect();
    let code = py.detach(|| vramscope::main_with(args));
    (0..=u8::MAX)
        .find(|&k| std::process::ExitCode::from(k) == code)
        .unwrap_or(1)
}

/// `vramscope inspect SNAPSHOT --html OUT`'s page written to `out`, with no
/// text report on stdout (`vramscope run --html`), titled `title` where
/// given; `OSError` with the error chain when the snapshot cannot be read or
/// the page not written.
#[pyfunction]
#[pyo3(signature = (snapshot, out, title=None))]
fn write_html(
    py: Python<'_>,
    snapshot: std::path::PathBuf,
    out: std::path::PathBuf,
    title: Option<String>,
) -> PyResult<()> {
    py.detach(|| vramscope::inspect::write_html(&snapshot, &out, title.as_deref()))
        .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("{e:#}")))
}

/// The module.
/// One row of [`gpus`].
type GpuRow = (&'static str, &'static str, u64, (u32, u32), bool);

/// The GPUs `Device(gpu=...)` takes, in `--gpu`'s order: (key,
/// `get_device_name()`, `total_memory`, capability, measured), where
/// `measured` says every constant was measured on that GPU (else the
/// report should say which are estimated: `vramscope_engine::Grades`).
#[pyfunction]
fn gpus() -> Vec<GpuRow> {
    vramscope_engine::GPUS
        .iter()
        .map(|g| {
            let p = g.profile();
            let measured = p.grades.estimated().is_empty();
            (g.key, g.name, p.total_memory, p.capability, measured)
        })
        .collect()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Device>()?;
    m.add("OutOfMemory", m.py().get_type::<OutOfMemory>())?;
    m.add_function(wrap_pyfunction!(autocast_policies, m)?)?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(write_html, m)?)?;
    m.add_function(wrap_pyfunction!(gpus, m)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_by_name() {
        assert_eq!(profile_of("H100").unwrap().name, "NVIDIA H100 80GB HBM3");
        assert_eq!(profile_of("h200").unwrap().name, "NVIDIA H200");
        assert!(profile_of("a100").is_none());
        assert_eq!(profile_of("A100-80GB").unwrap().capability, (8, 0));
        let listed = gpus();
        assert_eq!(listed[0].0, "h100");
        assert!(listed.iter().any(|g| g.0 == "t4" && g.3 == (7, 5) && !g.4));
    }

    #[test]
    fn a_bad_gpu_or_setting_is_named() {
        let e = fresh_process("a100", "").unwrap_err();
        assert!(
            e.starts_with("unknown GPU \"a100\"; expected one of h100, h200, a100-40gb, a100-80gb"),
            "{e}"
        );
        let e = fresh_process("h100", "max_split_size_mb:abc").unwrap_err();
        assert!(
            e.starts_with("PYTORCH_CUDA_ALLOC_CONF=\"max_split_size_mb:abc\": "),
            "{e}"
        );
        let (rt, cfg) = fresh_process("h200", "expandable_segments:True").unwrap();
        assert!(cfg.expandable_segments);
        assert_eq!(rt.profile().name, "NVIDIA H200");
    }

    /// More than the card: PyTorch's whole message, with the process's
    /// memory in use (NVML) and the link.
    #[test]
    fn the_allocators_out_of_memory_has_pytorchs_message() {
        let (rt, _) = fresh_process("h100", "").unwrap();
        let mut p = RuntimeSink::new(rt);
        let total = p.runtime().profile().total_memory;
        let alloc = Event::Alloc {
            id: 1,
            bytes: total,
            stream: 0,
            category: Category::Output,
            site: Site::default(),
        };
        let e = p.event(&alloc).unwrap_err();
        let msg = oom_message(p.runtime(), e);
        assert!(
            msg.starts_with(
                "CUDA out of memory. Tried to allocate 79.18 GiB. GPU 0 has a total capacity of \
                 79.18 GiB of which "
            ),
            "{msg}"
        );
        assert!(msg.contains(" is free. Including non-PyTorch memory, this process has "));
        assert!(
            msg.contains(" memory in use. Of the allocated memory 0 bytes is allocated by PyTorch")
        );
        assert!(msg.ends_with("#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"));
    }

    /// A cuBLAS handle with no room: the driver's failure, not the
    /// allocator's message.
    #[test]
    fn a_blas_handle_without_room_keeps_the_drivers_words() {
        let (rt, _) = fresh_process("h100", "").unwrap();
        let mut p = RuntimeSink::new(rt);
        let (free, _) = p.runtime().mem_get_info();
        let fill = Event::Alloc {
            id: 1,
            bytes: free - (64 << 20),
            stream: 0,
            category: Category::Input,
            site: Site::default(),
        };
        p.event(&fill).unwrap();
        let e = p
            .event(&Event::Blas {
                thread: HostThread::Main,
                handle: 0,
                stream: 0,
                half: false,
                lt: false,
                op: "aten::mm".into(),
                source: String::new(),
            })
            .unwrap_err();
        let msg = oom_message(p.runtime(), e);
        assert!(
            msg.starts_with("CUDA error: CUBLAS_STATUS_ALLOC_FAILED"),
            "{msg}"
        );
    }

    #[test]
    fn categories_and_dtypes_by_name() {
        assert_eq!(
            category_of("optimizer_state").unwrap(),
            Category::OptimizerState
        );
        assert!(category_of("weights").is_err());
        assert_eq!(dtype_of("bfloat16").unwrap(), DType::BF16);
        assert_eq!(dtype_of("float").unwrap(), DType::F32);
        assert!(dtype_of("complex64").is_err());
    }
}
