//! The simulated process's memory snapshot, as
//! `torch.cuda.memory._dump_snapshot` writes it: the allocator twin's
//! segments now and the trace recorded since `_record_memory_history`, each
//! allocation's frames naming its op, category and module.

use std::collections::HashMap;

use vramscope_alloc::{AllocatorConfig, TraceAction};
use vramscope_engine::{AllocRecord, MemEvent, Runtime};
use vramscope_snapshot::model::{AllocatorSettings, Segment, Snapshot, StackId};
use vramscope_snapshot::trace::{Trace, TraceEntry};
use vramscope_snapshot::write::{write_snapshot, WriteOptions};

/// The frames of one allocation, innermost first as PyTorch lists them:
/// the allocator, the op, its category, the program's line that asked
/// (`file.py:12 in step`) and the module that ran it.
fn frames(snap: &mut Snapshot, r: Option<&AllocRecord>) -> StackId {
    let Some(r) = r else {
        return StackId::EMPTY;
    };
    let mut ids = vec![
        snap.stacks.intern_frame(
            "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc",
            "CUDACachingAllocator.cpp",
            0,
        ),
        snap.stacks.intern_frame(r.op, "??", 0),
        snap.stacks.intern_frame(
            &format!("vramscope::category::{}", r.category),
            "vramscope",
            0,
        ),
    ];
    if let Some((at, function)) = r.source.rsplit_once(" in ") {
        if let Some((file, line)) = at.rsplit_once(':') {
            let line = line.parse().unwrap_or(0);
            ids.push(snap.stacks.intern_frame(function, file, line));
        }
    }
    if !r.module.is_empty() {
        ids.push(
            snap.stacks
                .intern_frame("forward", &format!("{}.py", r.module), 1),
        );
    }
    snap.stacks.intern_stack(&ids)
}

/// The snapshot pickle of `rt` (its event log must run since its start).
pub fn pickle(rt: &Runtime, conf: &str, cfg: &AllocatorConfig) -> std::io::Result<Vec<u8>> {
    let records: Vec<AllocRecord> = rt
        .with_event_log(|log| {
            log.initial
                .iter()
                .cloned()
                .chain(log.events.iter().filter_map(|e| match e {
                    MemEvent::Alloc(r) => Some(r.clone()),
                    _ => None,
                }))
                .collect()
        })
        .unwrap_or_default();
    let mut snap = Snapshot::default();
    // the trace's allocations, matched in order with the log's records
    let mut next = 0usize;
    let mut trace = Trace::default();
    let mut live: HashMap<u64, StackId> = HashMap::new();
    let raw = rt.trace();
    // the trace starts at `_record_memory_history`: skip the records before
    let first_alloc = raw.iter().find(|e| e.action == TraceAction::Alloc);
    if let Some(first) = first_alloc {
        let n_allocs = raw
            .iter()
            .filter(|e| e.action == TraceAction::Alloc)
            .count();
        next = records.len().saturating_sub(n_allocs);
        while next < records.len() && records[next].addr != first.addr {
            next += 1;
        }
    }
    for (i, e) in raw.iter().enumerate() {
        let stack = if e.action == TraceAction::Alloc {
            let r = records.get(next).filter(|r| r.addr == e.addr);
            if r.is_some() {
                next += 1;
            }
            let s = frames(&mut snap, r);
            live.insert(e.addr, s);
            s
        } else {
            StackId::EMPTY
        };
        let mut entry = TraceEntry::new(e.action, e.addr, e.size, e.stream);
        entry.time_us = Some(i as i64 + 1);
        entry.frames = stack;
        if e.action == TraceAction::Oom {
            entry.device_free = Some(e.addr);
            entry.addr = 0;
        }
        trace.push(entry);
    }
    for r in rt.live_allocations() {
        live.entry(r.addr)
            .or_insert_with(|| frames(&mut snap, Some(&r)));
    }
    snap.segments = rt
        .segments()
        .iter()
        .map(|s| {
            Segment::of_twin(s, 0, StackId::EMPTY, |a| {
                live.get(&a).copied().unwrap_or_default()
            })
        })
        .collect();
    snap.device_traces.push(trace);
    snap.allocator_settings = Some(AllocatorSettings::from_config(conf, cfg));
    write_snapshot(&snap, Vec::new(), &WriteOptions::default())
}
