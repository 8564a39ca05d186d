//! Meta tensors: shape, strides, dtype and device over a storage that holds
//! a simulated device address. A [`Tensor`] is a reference-counted handle to
//! a `TensorImpl`, exactly as a Python variable holds a reference to one: the
//! storage is freed when its last tensor goes, so PyTorch's lifetimes fall
//! out of Rust's own drop rules.

use std::cell::{Cell, Ref, RefCell};
use std::fmt;
use std::rc::{Rc, Weak};

use vramscope_alloc::Addr;

use crate::autograd::Node;
use crate::dims::{contiguous_strides, is_contiguous, is_non_overlapping_and_dense, Dims};
use crate::dtype::{DType, Device};
use crate::error::Result;
use crate::runtime::{Category, Runtime};

/// The largest tensor the twin creates: 1 PiB, a thousand times the memory of
/// the largest GPU node. A larger one exists on no device; a run without a
/// limit that asks for one is refused instead of simulated (its reductions
/// alone would split into millions of 32-bit-indexable launches).
const MAX_TENSOR_BYTES: u64 = 1 << 50;

/// The bytes behind one or more tensors (`c10::StorageImpl`).
pub(crate) struct Storage {
    pub(crate) rt: Runtime,
    /// (cells: `untyped_storage().resize_()` frees and reallocates in place)
    pub(crate) addr: Cell<Option<Addr>>,
    pub(crate) nbytes: Cell<u64>,
    /// the runtime's live slot of the allocation (with `addr`)
    pub(crate) slot: Cell<u32>,
    /// a CPU storage that glibc mapped on its own: the mapping's address
    /// and length ([`Runtime::host_malloc`])
    pub(crate) host: Option<(u64, u64)>,
}

impl Storage {
    /// The live slot of the allocation, if there is one.
    pub(crate) fn live_slot(&self) -> Option<u32> {
        self.addr.get().map(|_| self.slot.get())
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        if let Some(slot) = self.live_slot() {
            self.rt.free(slot);
        }
        if let Some((addr, len)) = self.host {
            self.rt.host_free(addr, len);
        }
    }
}

#[derive(Default)]
pub(crate) struct AutogradMeta {
    pub(crate) requires_grad: bool,
    pub(crate) grad_fn: Option<Rc<Node>>,
    pub(crate) output_nr: u32,
    pub(crate) grad: Option<Tensor>,
    pub(crate) grad_acc: Weak<Node>,
    pub(crate) retains_grad: bool,
    /// `register_post_accumulate_grad_hook`s, run after `AccumulateGrad`
    pub(crate) post_accumulate: Vec<crate::autograd::GradHook>,
}

pub(crate) struct TensorImpl {
    pub(crate) storage: Rc<Storage>,
    pub(crate) sizes: Dims,
    pub(crate) strides: Dims,
    pub(crate) offset: i64,
    pub(crate) dtype: DType,
    pub(crate) device: Device,
    pub(crate) version: Rc<Cell<u32>>,
    pub(crate) is_view: bool,
    pub(crate) autograd: RefCell<AutogradMeta>,
}

impl Drop for TensorImpl {
    /// `TensorImpl::release_resources` (c10/core/TensorImpl.cpp): the
    /// autograd metadata (`.grad`, `grad_fn` and the graph it holds) goes
    /// before the storage.
    fn drop(&mut self) {
        drop(std::mem::take(self.autograd.get_mut()));
    }
}

/// A tensor handle (`torch.Tensor`). Cloning it is `b = a` in Python: one
/// more reference to the same tensor.
#[derive(Clone)]
pub struct Tensor(pub(crate) Rc<TensorImpl>);

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tensor({:?}, {}, {}",
            self.sizes(),
            self.dtype(),
            self.device()
        )?;
        if let Some(g) = self.grad_fn_name() {
            write!(f, ", grad_fn={g}")?;
        } else if self.requires_grad() {
            write!(f, ", requires_grad=True")?;
        }
        f.write_str(")")
    }
}

impl Tensor {
    // ---- metadata ----------------------------------------------------------------

    /// `tensor.shape`
    pub fn sizes(&self) -> &[i64] {
        &self.0.sizes
    }
    /// `tensor.shape` as [`Dims`]
    pub fn dims(&self) -> Dims {
        self.0.sizes
    }
    /// `tensor.stride()`
    pub fn strides(&self) -> &[i64] {
        &self.0.strides
    }
    /// `tensor.dim()`
    pub fn dim(&self) -> usize {
        self.0.sizes.len()
    }
    /// `tensor.size(d)` with negative indexing.
    ///
    /// # Panics
    /// When `d` is out of range, with PyTorch's message (model code passes
    /// its own constants here).
    pub fn size(&self, d: i64) -> i64 {
        assert!(
            self.dim() > 0,
            "dimension specified as {d} but tensor has no dimensions"
        );
        self.0.sizes[self.wrap_dim(d)]
    }
    /// PyTorch's `maybe_wrap_dim`: `d` counted from the end when negative
    /// (a 0-dim tensor takes -1 and 0); out of range, `Err` with PyTorch's
    /// message.
    pub(crate) fn try_wrap_dim(&self, op: &'static str, d: i64) -> Result<usize> {
        let n1 = (self.dim() as i64).max(1);
        if d < -n1 || d >= n1 {
            return Err(crate::error::shape_err(
                op,
                format!(
                    "Dimension out of range (expected to be in range of [{}, {}], but got {d})",
                    -n1,
                    n1 - 1
                ),
            ));
        }
        Ok((if d < 0 { d + n1 } else { d }) as usize)
    }
    /// [`Self::try_wrap_dim`] for the views whose dims are the caller's own
    /// constants (they return no `Result`, as indexing does not).
    ///
    /// # Panics
    /// When `d` is out of range, with PyTorch's message.
    pub(crate) fn wrap_dim(&self, d: i64) -> usize {
        self.try_wrap_dim("dim", d)
            .unwrap_or_else(|e| panic!("{e}"))
    }
    /// `tensor.dtype`
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }
    /// `tensor.device`
    pub fn device(&self) -> Device {
        self.0.device
    }
    /// `tensor.numel()`
    pub fn numel(&self) -> i64 {
        self.0.sizes.numel()
    }
    /// Bytes of the elements this tensor views (`numel * element_size`).
    pub fn nbytes(&self) -> u64 {
        self.numel() as u64 * self.dtype().size()
    }
    /// Bytes of the storage underneath (what the allocator was asked for).
    pub fn storage_nbytes(&self) -> u64 {
        self.0.storage.nbytes.get()
    }
    /// The simulated device address of the storage (`None` on the CPU or when empty).
    pub fn data_ptr(&self) -> Option<Addr> {
        self.0.storage.addr.get()
    }
    /// `tensor.is_contiguous()`
    pub fn is_contiguous(&self) -> bool {
        is_contiguous(&self.0.sizes, &self.0.strides)
    }
    /// `tensor.is_non_overlapping_and_dense()`
    pub fn is_non_overlapping_and_dense(&self) -> bool {
        is_non_overlapping_and_dense(&self.0.sizes, &self.0.strides)
    }
    /// The runtime (process) this tensor belongs to.
    pub fn runtime(&self) -> &Runtime {
        &self.0.storage.rt
    }
    /// `tensor._version`
    pub fn version(&self) -> u32 {
        self.0.version.get()
    }
    pub(crate) fn bump_version(&self) {
        self.0.version.set(self.0.version.get() + 1);
    }
    /// `tensor._is_view()`
    pub fn is_view(&self) -> bool {
        self.0.is_view
    }
    /// Number of handles to this tensor (CPython's refcount of the `TensorImpl`).
    pub fn use_count(&self) -> usize {
        Rc::strong_count(&self.0)
    }
    /// Number of tensors sharing this tensor's storage (`storage().use_count()`).
    pub fn storage_use_count(&self) -> usize {
        Rc::strong_count(&self.0.storage)
    }
    /// Whether `self` and `other` share a storage.
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        Rc::ptr_eq(&self.0.storage, &other.0.storage)
    }
    /// Whether both handles refer to the same tensor (`a is b`).
    pub fn same(&self, other: &Tensor) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }

    // ---- autograd metadata ---------------------------------------------------------

    pub(crate) fn meta(&self) -> Ref<'_, AutogradMeta> {
        self.0.autograd.borrow()
    }
    /// `tensor.requires_grad`
    pub fn requires_grad(&self) -> bool {
        let m = self.meta();
        m.requires_grad || m.grad_fn.is_some()
    }
    /// `tensor.is_leaf`
    pub fn is_leaf(&self) -> bool {
        self.meta().grad_fn.is_none()
    }
    /// `tensor.grad_fn` (the node that made it), if any.
    pub fn grad_fn(&self) -> Option<Rc<Node>> {
        self.meta().grad_fn.clone()
    }
    /// `type(tensor.grad_fn).__name__`
    pub fn grad_fn_name(&self) -> Option<&'static str> {
        self.meta().grad_fn.as_ref().map(|n| n.name())
    }
    /// `tensor.grad`
    pub fn grad(&self) -> Option<Tensor> {
        self.meta().grad.clone()
    }
    /// `tensor.grad = value` (`None` frees it, as `zero_grad(set_to_none=True)`).
    pub fn set_grad(&self, g: Option<Tensor>) {
        if let Some(g) = &g {
            g.set_category(Category::Gradient);
        }
        let old = std::mem::replace(&mut self.0.autograd.borrow_mut().grad, g);
        drop(old);
    }
    /// `tensor.requires_grad_(flag)` on a leaf.
    pub fn requires_grad_(&self, flag: bool) -> Result<&Self> {
        if !self.is_leaf() {
            return Err(crate::error::EngineError::Unsupported {
                what: "requires_grad_ on a non-leaf tensor".into(),
            });
        }
        if flag && !self.dtype().is_floating() {
            return Err(crate::error::EngineError::Mismatch {
                op: "requires_grad_",
                detail: format!(
                    "only floating point tensors can require gradients, got {}",
                    self.dtype()
                ),
            });
        }
        self.0.autograd.borrow_mut().requires_grad = flag;
        Ok(self)
    }
    /// `tensor.retain_grad()`: a non-leaf keeps its `.grad` after backward.
    pub fn retain_grad(&self) {
        self.0.autograd.borrow_mut().retains_grad = true;
    }

    /// Re-file this tensor's allocation under `category`.
    pub fn set_category(&self, category: Category) {
        if let Some(slot) = self.0.storage.live_slot() {
            self.runtime().set_category(slot, category);
        }
    }

    /// `tensor.untyped_storage().resize_(0)` (FSDP2's `free_storage`): the
    /// storage gives its bytes back to the allocator and stays, empty, under
    /// every tensor that views it.
    pub fn free_storage(&self) {
        let s = &self.0.storage;
        if let Some(slot) = s.live_slot() {
            s.rt.free(slot);
        }
        s.addr.set(None);
        s.nbytes.set(0);
    }

    /// `tensor.untyped_storage().resize_(nbytes)` of an empty storage
    /// (FSDP2's `alloc_storage`): `resize_bytes_cuda` allocates the new bytes
    /// on the current stream. A storage already `nbytes` long is left alone,
    /// as `alloc_storage` checks.
    pub fn resize_storage(&self, nbytes: u64, op: &'static str, category: Category) -> Result<()> {
        let s = &self.0.storage;
        if s.nbytes.get() == nbytes {
            return Ok(());
        }
        if s.addr.get().is_some() {
            return Err(crate::error::EngineError::Unsupported {
                what: format!(
                    "resizing a storage of {} bytes to {nbytes} (only an empty storage is refilled)",
                    s.nbytes.get()
                ),
            });
        }
        if self.device() == Device::Cuda && nbytes > 0 {
            let (addr, slot) = s.rt.malloc(nbytes, op, category)?;
            s.addr.set(Some(addr));
            s.slot.set(slot);
        }
        s.nbytes.set(nbytes);
        Ok(())
    }

    // ---- construction --------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_parts(
        storage: Rc<Storage>,
        sizes: Dims,
        strides: Dims,
        offset: i64,
        dtype: DType,
        device: Device,
        version: Rc<Cell<u32>>,
        is_view: bool,
    ) -> Tensor {
        Tensor(Rc::new(TensorImpl {
            storage,
            sizes,
            strides,
            offset,
            dtype,
            device,
            version,
            is_view,
            autograd: RefCell::new(AutogradMeta::default()),
        }))
    }

    /// A new tensor over the same storage with other geometry, sharing the
    /// version counter (the forward half of every view op; autograd is wired
    /// by the caller).
    pub(crate) fn alias_with(&self, sizes: Dims, strides: Dims, offset: i64) -> Tensor {
        Tensor::from_parts(
            self.0.storage.clone(),
            sizes,
            strides,
            offset,
            self.0.dtype,
            self.0.device,
            self.0.version.clone(),
            true,
        )
    }

    /// `tensor.detach()`: same storage and version counter, no autograd history.
    pub fn detach(&self) -> Tensor {
        self.alias_with(self.0.sizes, self.0.strides, self.0.offset)
    }

    /// `variable.tensor_data()` as `SavedVariable` keeps an output: a new
    /// `TensorImpl` over the same storage (one more storage reference).
    pub(crate) fn tensor_data(&self) -> Tensor {
        self.alias_with(self.0.sizes, self.0.strides, self.0.offset)
    }
}

impl Runtime {
    /// Allocate a storage of `nbytes` on `device` for `op` (zero bytes never
    /// reach the allocator, as `NativeCachingAllocator::allocate`).
    /// Library scratch memory of `nbytes` on the GPU, sized by `rule` (kept
    /// in the event log with the allocation).
    pub(crate) fn scratch(
        &self,
        nbytes: u64,
        rule: crate::ScratchRule,
        op: &'static str,
    ) -> Result<Rc<Storage>> {
        let s = self.storage(nbytes, Device::Cuda, op, Category::Workspace)?;
        if let Some(addr) = s.addr.get() {
            self.note_scratch_rule(addr, rule);
        }
        Ok(s)
    }

    pub(crate) fn storage(
        &self,
        nbytes: u64,
        device: Device,
        op: &'static str,
        cat: Category,
    ) -> Result<Rc<Storage>> {
        self.count_op();
        let (addr, slot) = if device == Device::Cuda && nbytes > 0 {
            let (a, s) = self.malloc(nbytes, op, cat)?;
            (Some(a), s)
        } else {
            (None, 0)
        };
        let host = if device == Device::Cpu {
            self.host_malloc(nbytes)
        } else {
            None
        };
        Ok(Rc::new(Storage {
            rt: self.clone(),
            addr: Cell::new(addr),
            nbytes: Cell::new(nbytes),
            slot: Cell::new(slot),
            host,
        }))
    }

    /// A contiguous device tensor of `shape` whose storage holds no bytes
    /// yet (a storage `resize_(0)`d; [`Tensor::resize_storage`] fills it).
    pub fn device_unallocated(&self, shape: &[i64], dtype: DType) -> Result<Tensor> {
        crate::dims::check_shape("empty", shape)?;
        let sizes = Dims::new(shape);
        let strides = contiguous_strides(&sizes);
        let storage = Rc::new(Storage {
            rt: self.clone(),
            addr: Cell::new(None),
            nbytes: Cell::new(0),
            slot: Cell::new(0),
            host: None,
        });
        Ok(Tensor::from_parts(
            storage,
            sizes,
            strides,
            0,
            dtype,
            Device::Cuda,
            Rc::new(Cell::new(0)),
            false,
        ))
    }

    /// `at::empty_strided(sizes, strides)` for `op`.
    pub(crate) fn empty_strided_op(
        &self,
        sizes: &[i64],
        strides: &[i64],
        dtype: DType,
        device: Device,
        op: &'static str,
        cat: Category,
    ) -> Result<Tensor> {
        crate::dims::check_shape(op, sizes)?;
        if strides.len() != sizes.len() {
            return Err(crate::error::shape_err(
                op,
                format!("{} sizes but {} strides", sizes.len(), strides.len()),
            ));
        }
        let (sizes, strides) = (Dims::new(sizes), Dims::new(strides));
        self.empty_checked(sizes, strides, false, dtype, device, op, cat)
    }

    /// [`Self::empty_strided_op`] of checked sizes and strides of as many
    /// dimensions (`contiguous`: as `at::empty` asks, its strides
    /// `contiguous_strides(sizes)`).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn empty_checked(
        &self,
        sizes: Dims,
        strides: Dims,
        contiguous: bool,
        dtype: DType,
        device: Device,
        op: &'static str,
        cat: Category,
    ) -> Result<Tensor> {
        // `computeStorageNbytes`, which raises on an overflow
        let mut span = Some(1i64);
        for (s, st) in sizes.iter().zip(strides.iter()) {
            if *s == 0 {
                span = Some(0);
                break;
            }
            span = span.and_then(|n| n.checked_add((s - 1).checked_mul(*st)?));
        }
        let nbytes = span.and_then(|n| (n.max(0) as u64).checked_mul(dtype.size()));
        let Some(nbytes) = nbytes.filter(|&n| n <= i64::MAX as u64) else {
            // PyTorch's two messages (c10/core/EmptyTensor.cpp): the
            // contiguous path (`computeStorageNbytesContiguous`) names the
            // sizes, the strided one the strides too
            let detail = if contiguous {
                format!(
                    "Storage size calculation overflowed with sizes={:?}",
                    &*sizes
                )
            } else {
                format!(
                    "Storage size calculation overflowed with sizes={:?} and strides={:?}",
                    &*sizes, &*strides
                )
            };
            return Err(crate::error::shape_err(op, detail));
        };
        if nbytes > MAX_TENSOR_BYTES {
            return Err(crate::error::shape_err(
                op,
                format!(
                    "a tensor of {nbytes} bytes (sizes {:?}): the twin simulates tensors of at most 1 PiB",
                    &*sizes
                ),
            ));
        }
        let storage = self.storage(nbytes, device, op, cat)?;
        Ok(Tensor::from_parts(
            storage,
            sizes,
            strides,
            0,
            dtype,
            device,
            Rc::new(Cell::new(0)),
            false,
        ))
    }

    /// `at::empty(sizes)` (contiguous) for `op`.
    pub(crate) fn empty_op(
        &self,
        sizes: &[i64],
        dtype: DType,
        device: Device,
        op: &'static str,
        cat: Category,
    ) -> Result<Tensor> {
        crate::dims::check_shape(op, sizes)?;
        self.empty_checked(
            Dims::new(sizes),
            contiguous_strides(sizes),
            true,
            dtype,
            device,
            op,
            cat,
        )
    }

    /// `torch.empty(sizes, dtype=, device=)`.
    pub fn empty(&self, sizes: &[i64], dtype: DType, device: Device) -> Result<Tensor> {
        self.empty_op(sizes, dtype, device, "empty", Category::Output)
    }
    /// `torch.zeros(sizes, dtype=, device=)`.
    pub fn zeros(&self, sizes: &[i64], dtype: DType, device: Device) -> Result<Tensor> {
        self.empty_op(sizes, dtype, device, "zeros", Category::Output)
    }
    /// `torch.ones(sizes, dtype=, device=)`.
    pub fn ones(&self, sizes: &[i64], dtype: DType, device: Device) -> Result<Tensor> {
        self.empty_op(sizes, dtype, device, "ones", Category::Output)
    }
    /// `torch.randn(sizes, dtype=, device=)`.
    pub fn randn(&self, sizes: &[i64], dtype: DType, device: Device) -> Result<Tensor> {
        self.empty_op(sizes, dtype, device, "randn", Category::Output)
    }
    /// `torch.tensor(value)` on `device` (a 0-dim tensor).
    pub fn scalar_tensor(&self, dtype: DType, device: Device) -> Result<Tensor> {
        self.empty_op(&[], dtype, device, "scalar_tensor", Category::Output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_storage_resized_to_zero_gives_its_bytes_back_under_its_views_and_refills() {
        let rt = Runtime::default();
        let t = rt.device_unallocated(&[256, 256], DType::F32).unwrap();
        assert_eq!((rt.memory_allocated(), t.storage_nbytes()), (0, 0));
        t.resize_storage(256 * 256 * 4, "alloc_storage", Category::Parameter)
            .unwrap();
        assert_eq!(rt.memory_allocated(), 256 * 256 * 4);
        // a view (what autograd saves) keeps the storage, not its bytes
        let v = t.t();
        t.free_storage();
        assert_eq!((rt.memory_allocated(), v.storage_nbytes()), (0, 0));
        // refilled to a padded size, seen through the view too
        t.resize_storage(257 * 256 * 4, "alloc_storage", Category::Parameter)
            .unwrap();
        assert_eq!(v.storage_nbytes(), 257 * 256 * 4);
        assert!(t
            .resize_storage(4, "alloc_storage", Category::Parameter)
            .is_err());
        drop((t, v));
        assert_eq!(rt.memory_allocated(), 0);
    }

    #[test]
    fn a_dying_tensor_releases_its_grad_and_graph_before_its_storage() {
        let rt = Runtime::default();
        let frees = |t: Tensor| -> Vec<u64> {
            rt.start_event_log();
            drop(t);
            let log = rt.take_event_log().unwrap();
            let bytes: std::collections::HashMap<_, _> =
                log.initial.iter().map(|r| (r.addr, r.bytes)).collect();
            log.events
                .iter()
                .filter_map(|e| match e {
                    crate::MemEvent::Free(a) => bytes.get(a).copied(),
                    _ => None,
                })
                .collect()
        };
        // a leaf with a `.grad`: the grad first
        let p = rt.empty(&[256], DType::F32, Device::Cuda).unwrap();
        p.requires_grad_(true).unwrap();
        p.set_grad(Some(rt.empty(&[512], DType::F32, Device::Cuda).unwrap()));
        assert_eq!(frees(p), [2048, 1024]);
        // a loss whose graph alone holds `MulBackward0`'s saved `other` (1
        // KiB) and, in its `AccumulateGrad`, the leaf (512 bytes): the graph
        // first, then the loss's 4 bytes
        let x = rt.empty(&[128], DType::F32, Device::Cuda).unwrap();
        x.requires_grad_(true).unwrap();
        let z = rt.empty(&[2, 128], DType::F32, Device::Cuda).unwrap();
        let loss = x.mul(&z).unwrap().sum().unwrap();
        drop((x, z));
        assert_eq!(frees(loss), [1024, 512, 4]);
    }
}
