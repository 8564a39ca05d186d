//! The eager twin's process as a consumer of the event seam
//! ([`vramscope_events`]): a front door outside the eager twin (a PyTorch
//! program captured by `vramscope run`) describes its memory as
//! [`Event`]s, and [`RuntimeSink`] applies them to a [`Runtime`] — the
//! caching allocator, the driver's memory outside it, the cuBLAS
//! workspaces — as the eager twin's own ops would.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::{Mutex, OnceLock};

use vramscope_events::{Event, HostThread, Sink};

use crate::dtype::DType;
use crate::error::EngineError;
use crate::runtime::{Runtime, Thread};

/// `name` kept for the life of the process, one copy per distinct name:
/// the runtime's records hold `&'static str` op names (the eager twin's
/// are literals), and a front door's come from strings.
pub fn intern(name: &str) -> &'static str {
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

/// A [`Runtime`] fed an event stream: the producer's allocation ids are
/// mapped to the runtime's live slots ([`Runtime::malloc_on`]).
#[derive(Debug)]
pub struct RuntimeSink {
    rt: Runtime,
    slots: HashMap<u64, u32>,
    /// each module path once, shared by its allocations' records
    modules: HashMap<String, Rc<str>>,
}

impl RuntimeSink {
    /// A sink over `rt`.
    pub fn new(rt: Runtime) -> Self {
        RuntimeSink {
            rt,
            slots: HashMap::new(),
            modules: HashMap::new(),
        }
    }

    /// The process the events go to.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// The device address of the producer's live allocation `id` (None: not live).
    pub fn addr_of(&self, id: u64) -> Option<u64> {
        self.rt.slot_addr(*self.slots.get(&id)?)
    }

    /// Whether the producer's allocation `id` is live.
    pub fn is_live(&self, id: u64) -> bool {
        self.slots.contains_key(&id)
    }

    /// One shared string per distinct module path or source line.
    fn shared(&mut self, path: &str) -> Rc<str> {
        if let Some(m) = self.modules.get(path) {
            return m.clone();
        }
        let m: Rc<str> = Rc::from(path);
        self.modules.insert(path.to_owned(), m.clone());
        m
    }
}

impl Sink for RuntimeSink {
    /// Out of memory (the allocator's, or the driver's at a cuBLAS
    /// handle), as the eager twin reports it.
    type Error = EngineError;

    /// Apply one event. A free or change of category of an id that is not
    /// live is ignored (the producer's business, not the allocator's); a
    /// phase changes nothing in the process.
    fn event(&mut self, e: &Event) -> Result<(), EngineError> {
        match e {
            Event::Alloc {
                id,
                bytes,
                stream,
                category,
                site,
            } => {
                let module = self.shared(&site.module);
                let source = self.shared(&site.source);
                let slot = self.rt.malloc_on(
                    *bytes,
                    *stream,
                    *category,
                    intern(&site.op),
                    module,
                    source,
                )?;
                // an id reused while live leaves the earlier allocation
                // allocated, as a leaked pointer stays on the GPU
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
            Event::RecordStream { id, stream } => {
                if let Some(&slot) = self.slots.get(id) {
                    self.rt.record_stream(slot, *stream);
                }
            }
            Event::Blas {
                thread,
                handle,
                stream,
                half,
                lt,
                op,
                source,
            } => {
                let thread = match thread {
                    HostThread::Main => Thread::Main,
                    HostThread::Autograd => Thread::Autograd,
                };
                // the driver's rule tells only 16-bit from 32-bit kernels
                let dtype = if *half { DType::BF16 } else { DType::F32 };
                let source = self.shared(source);
                self.rt.with_source(source, || {
                    self.rt
                        .blas_call(thread, *handle, *stream, dtype, *lt, intern(op))
                })?;
            }
            Event::Phase { .. } => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use vramscope_events::{Category, Site};

    use super::*;
    use crate::runtime::{DeviceProfile, RuntimeConfig};

    fn sink() -> RuntimeSink {
        RuntimeSink::new(Runtime::new(RuntimeConfig {
            profile: DeviceProfile::h100_torch_2_11(),
            fresh_process: true,
            ..Default::default()
        }))
    }

    fn alloc(id: u64, bytes: u64) -> Event {
        Event::Alloc {
            id,
            bytes,
            stream: 0,
            category: Category::Output,
            site: Site {
                op: "aten::empty".into(),
                module: "model.fc".into(),
                source: "train.py:12 in step".into(),
            },
        }
    }

    #[test]
    fn names_are_interned_once() {
        let a = intern("aten::mm");
        let b = intern(&String::from("aten::mm"));
        assert!(std::ptr::eq(a, b));
    }

    #[test]
    fn frees_by_the_producers_ids() {
        let mut p = sink();
        p.event(&alloc(7, 1 << 20)).unwrap();
        p.event(&alloc(8, 1 << 20)).unwrap();
        assert_eq!(p.runtime().memory_allocated(), 2 << 20);
        p.event(&Event::Free { id: 7 }).unwrap();
        assert_eq!(p.runtime().memory_allocated(), 1 << 20);
        // a second free of the same id is not the allocator's concern
        p.event(&Event::Free { id: 7 }).unwrap();
        assert_eq!(p.runtime().memory_allocated(), 1 << 20);
        assert!(p.is_live(8) && !p.is_live(7));
    }

    #[test]
    fn records_the_site_and_the_new_category() {
        let mut p = sink();
        p.event(&alloc(1, 512)).unwrap();
        p.event(&Event::Recategorize {
            id: 1,
            category: Category::Parameter,
        })
        .unwrap();
        let live = p.runtime().live_allocations();
        assert_eq!(live.len(), 1);
        assert_eq!(
            (live[0].op, &*live[0].module, live[0].category),
            ("aten::empty", "model.fc", Category::Parameter)
        );
    }

    /// Hopper's 32 MiB cuBLAS workspace per (thread, stream), cuBLASLt's
    /// 1 MiB (`CublasHandlePool.cpp`).
    #[test]
    fn blas_takes_the_hopper_workspaces_once_per_thread_and_stream() {
        let mut p = sink();
        let blas = |thread, stream, lt| Event::Blas {
            thread,
            handle: 0,
            stream,
            half: false,
            lt,
            op: "aten::mm".into(),
            source: String::new(),
        };
        p.event(&blas(HostThread::Main, 0, false)).unwrap();
        assert_eq!(p.runtime().memory_allocated(), 32 << 20);
        p.event(&blas(HostThread::Main, 0, false)).unwrap();
        assert_eq!(p.runtime().memory_allocated(), 32 << 20);
        p.event(&blas(HostThread::Main, 0, true)).unwrap();
        assert_eq!(p.runtime().memory_allocated(), (32 << 20) + (1 << 20));
        p.event(&blas(HostThread::Autograd, 0, false)).unwrap();
        assert_eq!(p.runtime().memory_allocated(), (64 << 20) + (1 << 20));
        p.event(&blas(HostThread::Main, 7, false)).unwrap();
        assert_eq!(p.runtime().memory_allocated(), (96 << 20) + (1 << 20));
        // a program thread's handle on stream 0: a workspace of its own, once
        let mut on_handle = blas(HostThread::Main, 0, false);
        if let Event::Blas { handle, .. } = &mut on_handle {
            *handle = 1;
        }
        p.event(&on_handle).unwrap();
        assert_eq!(p.runtime().memory_allocated(), (128 << 20) + (1 << 20));
        p.event(&on_handle).unwrap();
        assert_eq!(p.runtime().memory_allocated(), (128 << 20) + (1 << 20));
    }

    /// More than the card: the allocator's out-of-memory, whose whole
    /// message the runtime keeps.
    #[test]
    fn out_of_memory_is_the_allocators() {
        let mut p = sink();
        let total = p.runtime().profile().total_memory;
        let e = p.event(&alloc(1, total)).unwrap_err();
        assert!(matches!(e, EngineError::OutOfMemory { .. }));
        let oom = p.runtime().last_out_of_memory().unwrap();
        assert!(oom
            .torch_message()
            .starts_with("CUDA out of memory. Tried to allocate 79.18 GiB."));
        assert!(!p.is_live(1));
    }
}
