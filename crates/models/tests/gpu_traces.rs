//! The predicted allocator trace against the GPU's, entry by entry.
//!
//! `validation/hf_cases.sh` keeps each H100 run's trace
//! (`torch.cuda.memory._snapshot()["device_traces"]`: action, address, size,
//! stream, frames) in `fixtures/estimate/traces.tar.xz`. The twin's trace, the
//! one `vramscope estimate --snapshot` writes, must list the same actions
//! with the same sizes in the same order. Addresses are not compared: the
//! simulated device does not place segments where the CUDA driver does.
//!
//! The cases whose traces still differ are named below; the test fails if
//! the list changes either way, so a fix or a regression is seen. Two more
//! tests pin down why they differ, on every recorded workload (the sets
//! measured after the twin was built included): every case's requests equal
//! the GPU's once the order of consecutive frees is left aside, and fed the
//! GPU's own segment addresses the twin's requests give the GPU's figures in
//! every phase of every case (both but for [`REQUESTS_DIFFER`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use vramscope_alloc::{CachingAllocator, Device};
use vramscope_models::{estimate, Estimate, EstimateOptions};
use vramscope_testkit::fixture::{self, Case, Recorded, SETS};

use crate::common;
use common::{refused, ROOT};

/// Cases whose recorded trace differs from the twin's. None differs in its
/// requests (`requests_equal_the_gpus_up_to_the_order_of_consecutive_frees`),
/// and on the GPU's segment addresses all give the GPU's figures
/// (`on_the_gpus_segment_addresses_the_figures_are_exact`):
/// - segment placement (best fit breaks ties between equal-size blocks by
///   address, and the driver's own allocations, which the allocator does
///   not see, move some segments from where the simulated device puts
///   them): `gemma2_train_bf16`, `gpt2_train_autocast_ckpt` (a reuse where
///   the twin maps a segment);
/// - the order in which leaving `torch.autocast` frees the cached weight
///   casts: `clear_autocast_cache` clears a `ska::flat_hash_map` keyed by
///   `TensorImpl*` with Fibonacci hashing, slot by slot, so the order follows
///   CPU heap addresses and changes from one process to the next (see
///   `crates/engine/src/autocast.rs`); the frees come one after the other,
///   so their order changes no figure: `gpt2_train_autocast_ckpt`,
///   `qwen2_train_autocast_sgdm`, `roberta_train_autocast`.
const KNOWN_DIFFERENT: [&str; 4] = [
    "gemma2_train_bf16",
    "gpt2_train_autocast_ckpt",
    "qwen2_train_autocast_sgdm",
    "roberta_train_autocast",
];

/// Cases whose requests differ from the GPU's, and why: the eighteenth
/// set's ViT with 2048-wide 32-pixel patches over 448-pixel images, whose
/// cuDNN weight-gradient workspace (25214992 bytes on the GPU, at batch 24)
/// the measured table lacks; the twin takes none and reports it unmeasured
/// (`gpu_fixtures`' `UNMEASURED`). The one before, a patch embedding of the
/// same kind, has its workspaces measured since.
const REQUESTS_DIFFER: [&str; 1] = ["vit_cdd9b0d3_train_bf16_sgdm_b24"];

/// `dir/traces.tar.xz` unpacked in a directory of this test's own (`tag`):
/// the tests of this file run at once in one process.
fn traces_dir(tag: &str, dir: &str) -> PathBuf {
    let out = std::env::temp_dir().join(format!(
        "vramscope-traces-{}-{tag}-{}",
        std::process::id(),
        dir.replace('/', "_")
    ));
    std::fs::create_dir_all(&out).unwrap();
    let status = Command::new("tar")
        .arg("xJf")
        .arg(format!("{ROOT}/{dir}/traces.tar.xz"))
        .arg("-C")
        .arg(&out)
        .status()
        .expect("tar runs");
    assert!(status.success(), "extracting {dir}/traces.tar.xz");
    out
}

#[test]
fn predicted_traces_equal_the_gpus() {
    let mut different = Vec::new();
    let mut same = 0;
    each_case("same", &SETS[..1], |case, _, gpu, est| {
        let gpu: Vec<(&str, u64)> = gpu.iter().map(|e| (e.0.as_str(), e.2)).collect();
        let twin: Vec<(&str, u64)> = est
            .recorded
            .as_ref()
            .unwrap()
            .trace
            .iter()
            .map(|e| (e.action.as_str(), e.size))
            .collect();
        match gpu.iter().zip(&twin).position(|(g, t)| g != t) {
            None if gpu.len() == twin.len() => {
                same += 1;
                println!("{:<28} {:>6} entries, identical", case.name, gpu.len());
            }
            at => {
                let at = at.unwrap_or(gpu.len().min(twin.len()));
                println!(
                    "{:<28} gpu {:>6} twin {:>6} entries; first difference at {at}: gpu {:?} twin {:?}",
                    case.name,
                    gpu.len(),
                    twin.len(),
                    gpu.get(at),
                    twin.get(at)
                );
                different.push(case.name.clone());
            }
        }
    });
    println!("{same} of {} traces identical", same + different.len());
    different.sort();
    assert_eq!(
        different, KNOWN_DIFFERENT,
        "the cases whose traces differ changed"
    );
}

/// Each case of `sets` with its recorded figures, the GPU's trace as
/// (action, address, size), and the twin's estimate with its trace recorded.
fn each_case(
    tag: &str,
    sets: &[(&str, &str)],
    mut f: impl FnMut(&Case, &Recorded, &[(String, u64, u64)], &Estimate),
) {
    for (list, fixtures) in sets {
        let dir = traces_dir(tag, fixtures);
        let text = std::fs::read_to_string(format!("{ROOT}/{list}")).unwrap();
        for case in fixture::cases(&text).unwrap() {
            if refused(fixtures, &case.name) {
                continue; // PyTorch refused it: no trace (`gpu_fixtures`)
            }
            let rec = fixture::recorded(
                &std::fs::read_to_string(format!("{ROOT}/{fixtures}/{}.json", case.name)).unwrap(),
            )
            .unwrap();
            let gpu: Value = serde_json::from_str(
                &std::fs::read_to_string(dir.join(format!("{}.trace.json", case.name))).unwrap(),
            )
            .unwrap();
            let gpu: Vec<(String, u64, u64)> = gpu
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    (
                        e[0].as_str().unwrap().to_owned(),
                        e[1].as_u64().unwrap(),
                        e[2].as_u64().unwrap(),
                    )
                })
                .collect();
            let opts = EstimateOptions {
                allocator: case.allocator.clone(),
                record_trace: true,
                ..EstimateOptions::default()
            };
            let est = estimate(&rec.config, &case.workload, &opts).unwrap();
            f(&case, &rec, &gpu, &est);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A trace's requests: the `segment_*` entries left out, and each run of
/// consecutive frees as a multiset (sorted), since the allocator ends in
/// the same state whatever the order of frees with no allocation between.
fn requests_up_to_free_order(trace: &[(String, u64)]) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut frees: Vec<(String, u64)> = Vec::new();
    for (action, size) in trace {
        if action.starts_with("segment_") {
            continue;
        }
        if action.starts_with("free_") {
            frees.push((action.clone(), *size));
        } else {
            frees.sort();
            out.append(&mut frees);
            out.push((action.clone(), *size));
        }
    }
    frees.sort();
    out.append(&mut frees);
    out
}

#[test]
fn requests_equal_the_gpus_up_to_the_order_of_consecutive_frees() {
    let mut different = Vec::new();
    let mut n = 0;
    each_case("requests", &SETS, |case, _, gpu, est| {
        n += 1;
        let gpu: Vec<(String, u64)> = gpu.iter().map(|e| (e.0.clone(), e.2)).collect();
        let twin: Vec<(String, u64)> = est
            .recorded
            .as_ref()
            .unwrap()
            .trace
            .iter()
            .map(|e| (e.action.as_str().to_owned(), e.size))
            .collect();
        if requests_up_to_free_order(&gpu) != requests_up_to_free_order(&twin) {
            different.push(case.name.clone());
        }
    });
    assert_eq!(n, 267, "every recorded workload");
    assert_eq!(
        different, REQUESTS_DIFFER,
        "the cases whose requests differ from the GPU's changed"
    );
}

/// A device that maps each segment where the GPU did: the GPU's first
/// segment of the same size, in the order the trace maps them, that is not
/// in use (the n-th `cudaMalloc` of a size gets the GPU's n-th address when
/// the twin asks for what the GPU asked for).
struct GpuAddresses {
    segments: Vec<(u64, u64)>,
    live: HashMap<u64, u64>,
    used: u64,
    total: u64,
    capacity: u64,
}

impl Device for GpuAddresses {
    fn malloc(&mut self, size: u64) -> Option<u64> {
        if self.used + size > self.capacity {
            return None;
        }
        let &(addr, _) = self
            .segments
            .iter()
            .find(|(a, s)| *s == size && !self.live.contains_key(a))?;
        self.live.insert(addr, size);
        self.used += size;
        Some(addr)
    }
    fn free(&mut self, addr: u64, size: u64) {
        self.live.remove(&addr);
        self.used -= size;
    }
    fn reserve(&mut self, _size: u64) -> Option<u64> {
        unreachable!("expandable segments are not replayed on the GPU's addresses")
    }
    fn map(&mut self, _addr: u64, _size: u64) -> bool {
        unreachable!("expandable segments are not replayed on the GPU's addresses")
    }
    fn unmap(&mut self, _addr: u64, _size: u64) {}
    fn mem_info(&self) -> (u64, u64) {
        (self.capacity - self.used, self.total)
    }
}

/// The twin's estimate is exact up to where the CUDA driver places segments:
/// its requests (sizes and order, as the twin's trace records them), replayed
/// on a device that maps each segment at the address the GPU's trace shows,
/// give the GPU's figures in every phase (`gpt2_train_autocast_ckpt`'s
/// 0.626% included, with the twin's own order of the autocast cache's frees).
#[test]
fn on_the_gpus_segment_addresses_the_figures_are_exact() {
    let mut checked = 0;
    let mut different = Vec::new();
    each_case("addresses", &SETS, |case, rec, gpu, est| {
        if case.allocator.expandable_segments || REQUESTS_DIFFER.contains(&case.name.as_str()) {
            return;
        }
        let recorded = est.recorded.as_ref().unwrap();
        let profile = EstimateOptions::default().profile;
        let mut a = CachingAllocator::with_device(
            case.allocator.clone(),
            GpuAddresses {
                segments: gpu
                    .iter()
                    .filter(|e| e.0 == "segment_alloc")
                    .map(|e| (e.1, e.2))
                    .collect(),
                live: HashMap::new(),
                used: 0,
                total: profile.total_memory,
                capacity: profile.usable_memory,
            },
        );
        // the twin's trace replayed request by request, phase by phase
        let mut addr_of: HashMap<u64, u64> = HashMap::new();
        let mut figures = Vec::new();
        for vramscope_models::PhaseSpan { name, start, end } in &recorded.phases {
            a.reset_peak_stats();
            for e in &recorded.trace[*start..*end] {
                match e.action.as_str() {
                    "alloc" => {
                        let at = a.malloc(e.size, 0).unwrap();
                        addr_of.insert(e.addr, at);
                    }
                    "free_requested" => a.free(addr_of.remove(&e.addr).unwrap()).unwrap(),
                    _ => {}
                }
            }
            figures.push(vramscope_models::requests::figures(name, &a));
        }
        checked += 1;
        if figures != rec.phases {
            different.push(case.name.clone());
        }
    });
    assert_eq!(
        checked, 260,
        "every recorded workload without expandable segments whose requests are the GPU's"
    );
    assert!(
        different.is_empty(),
        "on the GPU's segment addresses, figures differ: {different:?}"
    );
}

/// Where `load`'s segments lie, against the GPU's traces: the CPU tensors
/// glibc maps in `from_config` take the address space below the CUDA
/// context, and `.cuda()` frees them one by one, so the chunks of the
/// parameters' segments come below them and into their freed ranges
/// (`driver_va.rs`, rule 7). Per workload without expandable segments,
/// the twin's `load` segments are compared with the GPU's first as many,
/// up to one offset (the one most of them share); the test pins how many
/// lie where the GPU put them and in how many workloads all of them do
/// (`docs/driver-placement.md` keeps how these counts grew). The rest is
/// what the twin does not lay out: the
/// gap above the context, 0.5 to 38 MiB by process, that takes the first
/// tensors that fit (`fixtures/va_maps/README.md`), and Python's own
/// mappings. Pinned both ways: a change of the rule changes these counts.
#[test]
fn load_segments_lie_where_the_gpu_put_them() {
    let (mut same, mut all, mut whole, mut n) = (0, 0, 0, 0);
    each_case("load", &SETS, |case, _, gpu, est| {
        if case.allocator.expandable_segments {
            return;
        }
        n += 1;
        let rec = est.recorded.as_ref().unwrap();
        let load_end = rec.phases[0].end;
        let twin: Vec<u64> = rec.trace[..load_end]
            .iter()
            .filter(|e| e.action.as_str() == "segment_alloc")
            .map(|e| e.addr)
            .collect();
        let gpu: Vec<u64> = gpu
            .iter()
            .filter(|e| e.0 == "segment_alloc")
            .take(twin.len())
            .map(|e| e.1)
            .collect();
        let mut offsets: HashMap<i64, usize> = HashMap::new();
        for (g, t) in gpu.iter().zip(&twin) {
            *offsets.entry(*g as i64 - *t as i64).or_default() += 1;
        }
        let best = offsets.values().copied().max().unwrap_or(0);
        same += best;
        all += twin.len();
        whole += usize::from(best == twin.len());
    });
    assert_eq!(
        n, 261,
        "every recorded workload without expandable segments"
    );
    assert_eq!((same, all, whole), (4409, 6419, 91));
}
