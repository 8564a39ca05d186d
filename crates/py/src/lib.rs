//! `vramscope._native`: the Rust core of the `vramscope` Python package.
//!
//! A thin PyO3 layer: [`Device`] is one simulated GPU of one process (the
//! eager twin's [`Runtime`]: caching allocator, driver memory outside it,
//! cuBLAS workspaces), fed the memory events of a captured PyTorch program
//! ([`vramscope_events`]); [`main`] is the Rust command line. Python types
//! stay at this boundary: the crates below know nothing of Python.

#![deny(missing_docs)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;
use std::sync::{Mutex, OnceLock};

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use vramscope_alloc::AllocatorConfig;
use vramscope_engine::autocast::{CastPolicy, CUDA_POLICIES};
use vramscope_engine::{
    Category, DType, DeviceProfile, EngineError, Runtime, RuntimeConfig, ScratchRule, Thread,
};
use vramscope_events::{Event, HostThread, Sink, Site};

mod snapshot;

create_exception!(
    _native,
    OutOfMemory,
    PyException,
    "The GPU would run out of memory here; args[0] is PyTorch's message."
);

/// The GPUs `Device(gpu=...)` takes.
const GPUS: &[&str] = &["h100", "h200"];

/// The profile of a GPU by its short name.
pub fn profile_of(gpu: &str) -> Option<DeviceProfile> {
    match gpu.to_ascii_lowercase().as_str() {
        "h100" => Some(DeviceProfile::h100_torch_2_11()),
        "h200" => Some(DeviceProfile::h200_torch_2_11()),
        _ => None,
    }
}

/// An op name kept for the life of the process (the eager twin's records
/// hold `&'static str`); one copy per distinct name.
fn intern(name: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut set = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(&s) = set.get(name) {
        return s;
    }
    let s: &'static str = Box::leak(name.to_owned().into_boxed_str());
    set.insert(s);
    s
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
/// with PyTorch's message, anything else as a `ValueError`.
fn py_err(e: EngineError) -> PyErr {
    match e {
        EngineError::OutOfMemory { detail, .. } => OutOfMemory::new_err(detail),
        other => PyValueError::new_err(other.to_string()),
    }
}

/// The twin's process fed as an event [`Sink`]: the producer's allocation
/// ids mapped to the runtime's live slots.
struct Process {
    rt: Runtime,
    slots: HashMap<u64, u32>,
    modules: HashMap<String, Rc<str>>,
}

impl Sink for Process {
    type Error = EngineError;

    fn event(&mut self, e: &Event) -> Result<(), EngineError> {
        match e {
            Event::Alloc {
                id,
                bytes,
                stream,
                category,
                site,
            } => {
                let module = match self.modules.get(&site.module) {
                    Some(m) => m.clone(),
                    None => {
                        let m: Rc<str> = Rc::from(site.module.as_str());
                        self.modules.insert(site.module.clone(), m.clone());
                        m
                    }
                };
                let slot =
                    self.rt
                        .malloc_on(*bytes, *stream, *category, intern(&site.op), module)?;
                self.slots.insert(*id, slot);
            }
            Event::Free { id } => {
                if let Some(slot) = self.slots.remove(id) {
                    self.rt.free_slot(slot);
                }
            }
            Event::Recategorize { id, category } => {
                if let Some(&slot) = self.slots.get(id) {
                    self.rt.recategorize(slot, *category);
                }
            }
            Event::Blas {
                thread,
                stream,
                half,
                lt,
                op,
            } => {
                let thread = match thread {
                    HostThread::Main => Thread::Main,
                    HostThread::Autograd => Thread::Autograd,
                };
                let dtype = if *half { DType::BF16 } else { DType::F32 };
                self.rt.blas_call(thread, *stream, dtype, *lt, intern(op))?;
            }
            Event::Phase { .. } => {}
        }
        Ok(())
    }
}

/// One simulated GPU of one fresh process (`torch.cuda.init()` done,
/// nothing allocated).
#[pyclass(unsendable, module = "vramscope._native")]
struct Device {
    p: Process,
    next_id: u64,
    conf: String,
    cfg: AllocatorConfig,
}

impl Device {
    fn send(&mut self, e: &Event) -> PyResult<()> {
        self.p.event(e).map_err(py_err)
    }
}

#[pymethods]
impl Device {
    #[new]
    #[pyo3(signature = (gpu = "h100", alloc_conf = None))]
    fn new(gpu: &str, alloc_conf: Option<&str>) -> PyResult<Self> {
        let profile = profile_of(gpu).ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown GPU {gpu:?}; expected one of {}",
                GPUS.join(", ")
            ))
        })?;
        let conf = alloc_conf.unwrap_or("").to_owned();
        let cfg = AllocatorConfig::parse(&conf)
            .map_err(|e| PyValueError::new_err(format!("PYTORCH_CUDA_ALLOC_CONF={conf:?}: {e}")))?;
        let rt = Runtime::new(RuntimeConfig {
            profile,
            allocator: cfg.clone(),
            fresh_process: true,
        });
        rt.start_event_log();
        Ok(Device {
            p: Process {
                rt,
                slots: HashMap::new(),
                modules: HashMap::new(),
            },
            next_id: 0,
            conf,
            cfg,
        })
    }

    /// `torch.cuda.get_device_name()`.
    #[getter]
    fn name(&self) -> &'static str {
        self.p.rt.profile().name
    }

    /// `get_device_properties().total_memory`.
    #[getter]
    fn total_memory(&self) -> u64 {
        self.p.rt.profile().total_memory
    }

    /// `torch.cuda.get_device_capability()`.
    #[getter]
    fn capability(&self) -> (u32, u32) {
        self.p.rt.profile().capability
    }

    /// `get_device_properties().multi_processor_count`.
    #[getter]
    fn multi_processor_count(&self) -> u32 {
        self.p.rt.profile().sm_count
    }

    /// Allocate through the caching allocator; returns a handle for `free`.
    fn malloc(
        &mut self,
        nbytes: u64,
        stream: u64,
        category: &str,
        op: &str,
        module: &str,
    ) -> PyResult<u64> {
        let category: Category = category
            .parse()
            .map_err(|e: vramscope_events::UnknownCategory| PyValueError::new_err(e.to_string()))?;
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
            },
        })?;
        Ok(id)
    }

    /// Free an allocation `malloc` returned.
    fn free(&mut self, handle: u64) -> PyResult<()> {
        self.send(&Event::Free { id: handle })
    }

    /// File an allocation under another category.
    fn set_category(&mut self, handle: u64, category: &str) -> PyResult<()> {
        let category: Category = category
            .parse()
            .map_err(|e: vramscope_events::UnknownCategory| PyValueError::new_err(e.to_string()))?;
        self.send(&Event::Recategorize {
            id: handle,
            category,
        })
    }

    /// A cuBLAS call on (`thread`, `stream`).
    fn blas(&mut self, op: &str, thread: &str, stream: u64, dtype: &str, lt: bool) -> PyResult<()> {
        let thread: HostThread = thread.parse().map_err(PyValueError::new_err)?;
        let half = dtype_of(dtype)? != DType::F32;
        self.send(&Event::Blas {
            thread,
            stream,
            half,
            lt,
            op: op.to_owned(),
        })
    }

    /// The process's first kernel launch is next.
    fn first_kernels(&self) {
        self.p.rt.first_kernels();
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
        let profile = self.p.rt.profile();
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
        Ok(rule.bytes(&self.p.rt.profile()).unwrap_or(0))
    }

    /// `torch.cuda.memory_stats()`: every key PyTorch 2.11 reports.
    fn memory_stats(&self) -> BTreeMap<String, i64> {
        self.p.rt.stats().memory_stats()
    }

    /// `torch.cuda.memory_summary()`.
    #[pyo3(signature = (abbreviated = false))]
    fn memory_summary(&self, abbreviated: bool) -> String {
        vramscope_alloc::memory_summary(&self.p.rt.stats(), 0, abbreviated)
    }

    /// `torch.cuda.memory_allocated()`.
    fn memory_allocated(&self) -> i64 {
        self.p.rt.memory_allocated()
    }

    /// `torch.cuda.max_memory_allocated()`.
    fn max_memory_allocated(&self) -> i64 {
        self.p.rt.max_memory_allocated()
    }

    /// `torch.cuda.memory_reserved()`.
    fn memory_reserved(&self) -> i64 {
        self.p.rt.memory_reserved()
    }

    /// `torch.cuda.max_memory_reserved()`.
    fn max_memory_reserved(&self) -> i64 {
        self.p.rt.max_memory_reserved()
    }

    /// `torch.cuda.reset_peak_memory_stats()`.
    fn reset_peak_memory_stats(&self) {
        self.p.rt.reset_peak_memory_stats();
    }

    /// `torch.cuda.reset_accumulated_memory_stats()`.
    fn reset_accumulated_memory_stats(&self) {
        self.p.rt.reset_accumulated_memory_stats();
    }

    /// `torch.cuda.empty_cache()`.
    fn empty_cache(&self) {
        self.p.rt.empty_cache();
    }

    /// `torch._C._cuda_clearCublasWorkspaces()`.
    fn clear_cublas_workspaces(&self) {
        self.p.rt.clear_cublas_workspaces();
    }

    /// `(free, total)` as `cudaMemGetInfo` reports them.
    fn mem_get_info(&self) -> (u64, u64) {
        self.p.rt.mem_get_info()
    }

    /// `torch.cuda.set_per_process_memory_fraction(fraction)`.
    fn set_memory_fraction(&self, fraction: f64) -> PyResult<()> {
        self.p.rt.set_memory_fraction(fraction).map_err(py_err)
    }

    /// Start or stop recording the allocator trace.
    fn record_memory_history(&self, enabled: bool) {
        self.p.rt.record_memory_history(enabled);
    }

    /// `torch.cuda.memory._dump_snapshot`'s pickle of the state now.
    fn snapshot_pickle<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = snapshot::pickle(&self.p.rt, &self.conf, &self.cfg)
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

/// The module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Device>()?;
    m.add("OutOfMemory", m.py().get_type::<OutOfMemory>())?;
    m.add_function(wrap_pyfunction!(autocast_policies, m)?)?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
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
    }

    #[test]
    fn names_are_interned_once() {
        let a = intern("aten::mm");
        let b = intern(&String::from("aten::mm"));
        assert!(std::ptr::eq(a, b));
    }

    #[test]
    fn the_process_frees_by_the_producers_ids() {
        let rt = Runtime::new(RuntimeConfig {
            profile: DeviceProfile::h100_torch_2_11(),
            fresh_process: true,
            ..Default::default()
        });
        let mut p = Process {
            rt,
            slots: HashMap::new(),
            modules: HashMap::new(),
        };
        let alloc = |id| Event::Alloc {
            id,
            bytes: 1 << 20,
            stream: 0,
            category: Category::Output,
            site: Site::default(),
        };
        p.event(&alloc(7)).unwrap();
        p.event(&alloc(8)).unwrap();
        assert_eq!(p.rt.memory_allocated(), 2 << 20);
        p.event(&Event::Free { id: 7 }).unwrap();
        assert_eq!(p.rt.memory_allocated(), 1 << 20);
        // a second free of the same id is not the allocator's concern
        p.event(&Event::Free { id: 7 }).unwrap();
        assert_eq!(p.rt.memory_allocated(), 1 << 20);
    }

    #[test]
    fn blas_takes_the_hopper_workspace_once_per_thread_and_stream() {
        let rt = Runtime::new(RuntimeConfig {
            profile: DeviceProfile::h100_torch_2_11(),
            fresh_process: true,
            ..Default::default()
        });
        let mut p = Process {
            rt,
            slots: HashMap::new(),
            modules: HashMap::new(),
        };
        let blas = |thread, lt| Event::Blas {
            thread,
            stream: 0,
            half: false,
            lt,
            op: "mm".into(),
        };
        p.event(&blas(HostThread::Main, false)).unwrap();
        assert_eq!(p.rt.memory_allocated(), 32 << 20);
        p.event(&blas(HostThread::Main, false)).unwrap();
        assert_eq!(p.rt.memory_allocated(), 32 << 20);
        p.event(&blas(HostThread::Main, true)).unwrap();
        assert_eq!(p.rt.memory_allocated(), (32 << 20) + (1 << 20));
        p.event(&blas(HostThread::Autograd, false)).unwrap();
        assert_eq!(p.rt.memory_allocated(), (64 << 20) + (1 << 20));
    }
}
