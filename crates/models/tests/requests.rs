//! Replaying a workload's allocator requests on the allocator twin alone
//! gives the estimate's figures, and a batch template fitted on three batch
//! sizes (2 and up: at batch 1 some views are contiguous and their copies
//! vanish) gives the requests the model itself makes at the others.

use vramscope_models::requests::{
    batch_column, fresh_allocator, replay, replay_planned, verdict, BatchTemplate, Requests,
    Verdict,
};
use vramscope_models::{
    estimate, estimate_every_step, workload_requests, workload_run, workload_run_deriving_step1,
    EstimateOptions, HfConfig, Workload,
};
use vramscope_testkit::fixture::{self, Case};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn cases() -> Vec<(Case, HfConfig)> {
    let text = std::fs::read_to_string(format!("{ROOT}/validation/hf_cases.json")).unwrap();
    fixture::cases(&text)
        .unwrap()
        .into_iter()
        .map(|c| {
            let text = std::fs::read_to_string(format!("{ROOT}/fixtures/estimate/{}.json", c.name))
                .unwrap();
            let config = fixture::recorded(&text).unwrap().config;
            (c, config)
        })
        .collect()
}

fn requests(config: &HfConfig, w: &Workload, opts: &EstimateOptions) -> Requests {
    let free = EstimateOptions {
        unlimited: true,
        ..opts.clone()
    };
    Requests::of(&estimate_every_step(config, w, &free).unwrap()).unwrap()
}

/// The options a fixture was measured with.
fn options(case: &Case) -> EstimateOptions {
    EstimateOptions {
        allocator: case.allocator.clone(),
        ..EstimateOptions::default()
    }
}

/// The requests of a fixture's workload at another batch size.
fn at_batch(config: &HfConfig, case: &Case, opts: &EstimateOptions, batch: i64) -> Requests {
    let w = Workload {
        batch,
        ..case.workload.clone()
    };
    requests(config, &w, opts)
}

#[test]
fn later_steps_repeat_the_second() {
    for (case, config) in cases() {
        let opts = options(&case);
        let two = requests(
            &config,
            &Workload {
                steps: 2,
                ..case.workload.clone()
            },
            &opts,
        );
        for steps in [3, 5] {
            let w = Workload {
                steps,
                ..case.workload.clone()
            };
            let full = requests(&config, &w, &opts);
            let repeated = two
                .repeat_steps(steps)
                .unwrap_or_else(|| panic!("{}: step 1 does not repeat", case.name));
            assert!(full == repeated, "{} with {steps} steps", case.name);
            assert!(workload_requests(&config, &w, &opts).unwrap().unwrap() == full);
        }
        // the estimate that repeats equals the one that runs every step,
        // under a limit too (an out-of-memory in a repeated step)
        let every = estimate_every_step(&config, &case.workload, &opts).unwrap();
        let est = estimate(&config, &case.workload, &opts).unwrap();
        assert_eq!(est.phases, every.phases, "{}", case.name);
        assert_eq!(est.peak_phase, every.peak_phase, "{}", case.name);
        assert_eq!(
            est.breakdown_at_peak, every.breakdown_at_peak,
            "{}",
            case.name
        );
        let last = &every.phases[every.phases.len() - 2];
        let limit = EstimateOptions {
            memory_fraction: Some(
                (last.peak_reserved_bytes as f64 * 0.9) / opts.profile.total_memory as f64,
            ),
            ..opts.clone()
        };
        let every = estimate_every_step(&config, &case.workload, &limit).unwrap();
        let est = estimate(&config, &case.workload, &limit).unwrap();
        assert_eq!(est.phases, every.phases, "{} under a limit", case.name);
        assert_eq!(est.oom, every.oom, "{} under a limit", case.name);
    }
}

/// Many steps: once a step starts as the one before it did, the replay
/// takes the later steps' figures from it; they equal running the model at
/// every step.
#[test]
fn a_steady_state_repeats_without_replaying() {
    let mut repeated = 0;
    for (case, config) in cases().into_iter().step_by(2) {
        let opts = options(&case);
        let w = Workload {
            steps: 8,
            ..case.workload.clone()
        };
        let every = estimate_every_step(&config, &w, &opts).unwrap();
        let est = estimate(&config, &w, &opts).unwrap();
        assert_eq!(est.phases, every.phases, "{}", case.name);
        let reqs = requests(&config, &w, &opts);
        let mut alloc = fresh_allocator(&opts.profile, &opts.allocator, None, false);
        let r = replay(&reqs, &mut alloc);
        assert_eq!(r.phases, every.phases, "{}", case.name);
        repeated += r.repeated_steps;
    }
    println!("{repeated} steps repeated without replaying");
    assert!(repeated > 0);
}

/// A step that grew the cache is not replayed again when none of the
/// segments it created would have changed a fit of its own: the replay
/// then equals the replay of every request, on every fixture, without a
/// limit and under two (the plain replay's phase names carry no step, so
/// it finds no steps to repeat).
#[test]
fn a_step_repeats_at_the_reserved_memory_it_grew_to() {
    let mut repeated = 0;
    for (case, config) in cases() {
        let opts = options(&case);
        let reqs = requests(&config, &case.workload, &opts);
        let mut plain = reqs.clone();
        for p in &mut plain.phases {
            p.name.push_str("-plain");
        }
        let whole = replay(
            &plain,
            &mut fresh_allocator(&opts.profile, &opts.allocator, None, true),
        );
        assert_eq!(whole.repeated_steps, 0);
        let total = opts.profile.total_memory as f64;
        for fraction in [
            None,
            Some(whole.peak_reserved_bytes as f64 / total),
            Some((whole.peak_reserved_bytes - (64 << 20)) as f64 / total),
        ] {
            let fresh = || fresh_allocator(&opts.profile, &opts.allocator, fraction, false);
            let short = replay(&reqs, &mut fresh());
            let every = replay(&plain, &mut fresh());
            let names = |r: &vramscope_models::requests::Replayed| {
                let mut r = r.clone();
                for p in &mut r.phases {
                    p.name = p.name.trim_end_matches("-plain").to_owned();
                }
                if let Some(o) = &mut r.oom {
                    o.phase = o.phase.trim_end_matches("-plain").to_owned();
                }
                r.repeated_steps = 0;
                r
            };
            assert_eq!(
                names(&short),
                names(&every),
                "{} under {fraction:?}",
                case.name
            );
            repeated += short.repeated_steps;
        }
    }
    println!("{repeated} steps repeated without replaying");
    assert!(repeated > 0);
}

/// The verdict under a limit, decided without the run under the limit where
/// the run without one settles it, is the run under the limit's.
#[test]
fn the_verdict_is_the_run_under_the_limits() {
    let mut shortcuts = 0;
    let mut limited_runs = 0;
    for (case, config) in cases() {
        let opts = options(&case);
        let reqs = requests(&config, &case.workload, &opts);
        let whole = replay(
            &reqs,
            &mut fresh_allocator(&opts.profile, &opts.allocator, None, true),
        );
        let total = opts.profile.total_memory as f64;
        let (req, res) = (whole.peak_requested_bytes, whole.peak_reserved_bytes);
        for limit in [
            req - 512,
            req + 512,
            (req + res) / 2,
            res - 512,
            res,
            res + 4096,
        ] {
            let fraction = limit as f64 / total;
            let mut alloc = fresh_allocator(&opts.profile, &opts.allocator, Some(fraction), false);
            let limited = replay(&reqs, &mut alloc);
            let expected = Verdict {
                fits: limited.oom.is_none(),
                figures: if limited.oom.is_none() {
                    limited
                } else {
                    whole.clone()
                },
            };
            let limited = EstimateOptions {
                memory_fraction: Some(fraction),
                unlimited: false,
                ..opts.clone()
            };
            let v = verdict(&reqs, &limited);
            assert_eq!(v, expected, "{} under {limit}", case.name);
            if v.fits && v.figures == whole || !v.fits && limit < req {
                shortcuts += 1;
            } else {
                limited_runs += 1;
            }
        }
    }
    println!("{shortcuts} settled without a run under the limit, {limited_runs} with one");
    assert!(shortcuts > 0 && limited_runs > 0);
}

#[test]
fn replaying_the_requests_gives_the_estimates_figures() {
    for (case, config) in cases() {
        let opts = options(&case);
        let est = estimate(&config, &case.workload, &opts).unwrap();
        let reqs = requests(&config, &case.workload, &opts);
        let mut alloc = fresh_allocator(&opts.profile, &opts.allocator, None, false);
        let r = replay(&reqs, &mut alloc);
        assert_eq!(r.phases, est.phases, "{}", case.name);
        assert_eq!(
            r.peak_reserved_bytes, est.peak_reserved_bytes,
            "{}",
            case.name
        );
        assert!(r.oom.is_none());
    }
}

/// A replay places every segment where the model's own run placed it: the
/// context's range given back at the same point (`driver_va.rs`, rule 6),
/// once, also on one allocator renewed from case to case as a sweep's is.
/// Without the release a replay would place most of them elsewhere.
#[test]
fn a_replay_places_segments_where_the_run_did() {
    let mut renewed = None;
    let mut n = 0;
    for (case, config) in cases() {
        if case.allocator.expandable_segments {
            continue; // (its pages are mapped, not `cudaMalloc`'d)
        }
        n += 1;
        let opts = options(&case);
        let free = EstimateOptions {
            unlimited: true,
            record_trace: true,
            ..opts.clone()
        };
        let est = estimate_every_step(&config, &case.workload, &free).unwrap();
        let mut run: Vec<(u64, u64)> = est
            .recorded
            .as_ref()
            .unwrap()
            .trace
            .iter()
            .filter(|e| e.action.as_str() == "segment_alloc")
            .map(|e| (e.addr, e.size))
            .collect();
        run.sort_unstable();
        let reqs = Requests::of(&est).unwrap();
        assert!(reqs.first_kernels.is_some(), "{}", case.name);
        let placed = |alloc: &mut vramscope_alloc::CachingAllocator| {
            replay(&reqs, alloc);
            let mut segs: Vec<(u64, u64)> = alloc
                .snapshot()
                .iter()
                .map(|s| (s.address, s.total_size))
                .collect();
            segs.sort_unstable();
            segs
        };
        let mut alloc = fresh_allocator(&opts.profile, &opts.allocator, None, true);
        assert_eq!(placed(&mut alloc), run, "{}", case.name);
        if case.allocator == vramscope_alloc::AllocatorConfig::default() {
            let a = renewed
                .get_or_insert_with(|| fresh_allocator(&opts.profile, &opts.allocator, None, true));
            vramscope_models::requests::renew_allocator(a, &opts.profile, None, true);
            assert_eq!(placed(a), run, "{} (renewed)", case.name);
        }
    }
    assert_eq!(
        n, 34,
        "every workload of hf_cases.json without expandable segments"
    );
}

#[test]
fn replaying_under_a_limit_runs_out_where_the_estimate_does() {
    for (case, config) in cases().into_iter().step_by(3) {
        let full = EstimateOptions {
            allocator: case.allocator.clone(),
            ..EstimateOptions::default()
        };
        let reqs = requests(&config, &case.workload, &full);
        let peak = estimate(&config, &case.workload, &full)
            .unwrap()
            .peak_reserved_bytes;
        // a limit just under the peak reserved: the release-and-retry path
        // runs, and the run may or may not still fit
        let fraction = (peak as f64 * 0.97) / full.profile.total_memory as f64;
        let opts = EstimateOptions {
            memory_fraction: Some(fraction),
            ..full.clone()
        };
        let est = estimate(&config, &case.workload, &opts).unwrap();
        let mut alloc = fresh_allocator(&opts.profile, &opts.allocator, Some(fraction), false);
        let r = replay(&reqs, &mut alloc);
        assert_eq!(r.oom.is_some(), est.oom.is_some(), "{}", case.name);
        if let (Some(r), Some(o)) = (&r.oom, &est.oom) {
            assert_eq!((&r.phase, r.bytes), (&o.phase, o.bytes), "{}", case.name);
        }
        assert_eq!(r.phases, est.phases, "{}", case.name);
    }
}

#[test]
fn a_template_from_three_batch_sizes_gives_the_models_requests_at_others() {
    let mut fitted = 0;
    for (case, config) in cases() {
        let opts = options(&case);
        let at = |b: i64| at_batch(&config, &case, &opts, b);
        let (r2, r3, r5) = (at(2), at(3), at(5));
        // sizes that are not products of dimensions (CUB's temporary
        // storage, split reductions, the embedding backward's segments)
        // come from the kernels' rules
        let Some(t) = BatchTemplate::fit([(2, &r2), (3, &r3), (5, &r5)], &opts.profile) else {
            // ViT's patch convolution: a workspace measured at one batch
            // size; or a kernel that takes another path at batch 5 (a
            // reduction over more rows split across blocks)
            assert!(
                r2.measured_sizes || !r2.same_structure(&r3) || !r2.same_structure(&r5),
                "{}",
                case.name
            );
            continue;
        };
        fitted += 1;
        assert!(t.at(4).unwrap() == at(4), "{} at batch 4", case.name);
    }
    println!("{fitted} templates fitted");
    assert!(fitted >= 20, "{fitted}");
}

#[test]
fn a_column_runs_the_model_where_templates_do_not_fit_and_is_exact_everywhere() {
    let batches: Vec<i64> = (1..=20).collect();
    // every fixture, at its sequence length and at an odd one (where a
    // size divided by a power of two would round)
    let all = cases();
    let odd = all
        .iter()
        .filter(|(c, _)| c.workload.seq > 0)
        .map(|(c, config)| {
            let mut c = c.clone();
            c.workload.seq -= 3;
            c.name = format!("{} (seq {})", c.name, c.workload.seq);
            (c, config.clone())
        });
    for (case, config) in all.iter().cloned().chain(odd) {
        let opts = options(&case);
        let at = |b: i64| at_batch(&config, &case, &opts, b);
        let (sources, runs) =
            batch_column(&batches, &opts.profile, |b| Ok::<_, ()>(at(b))).unwrap();
        println!(
            "{:<28} model ran at {runs} of {} batch sizes",
            case.name,
            batches.len()
        );
        // inference: two ends, the middle and batch 1 (ViT: every batch,
        // its patch convolution's workspace is measured at one batch size)
        if !case.name.starts_with("vit") && case.workload.mode == vramscope_models::Mode::Infer {
            assert_eq!(runs, 4, "{}", case.name);
        }
        for (b, s) in batches.iter().zip(&sources) {
            let model = at(*b);
            assert!(
                *s.requests(*b).unwrap() == model,
                "{} at batch {b}",
                case.name
            );
            // what a sweep replays: the same sizes, in the same phases
            let sizes = s.sizes(*b).unwrap();
            assert!(
                sizes.requests == model.requests && sizes.phases == model.phases,
                "{} at batch {b}",
                case.name
            );
            // replayed with the plan of the template's steps: the figures
            // and the repeated steps of a replay of the model's requests
            let fresh = || fresh_allocator(&opts.profile, &opts.allocator, None, true);
            assert_eq!(
                replay_planned(&sizes, s.step_plan(), &mut fresh()),
                replay(&model, &mut fresh()),
                "{} at batch {b}",
                case.name
            );
        }
    }
}

/// Where the model runs, its own allocator's figures of the whole run are
/// the replay's: `workload_run` gives the requests `workload_requests`
/// gives and the figures a replay of them on a fresh allocator gives, on
/// every fixture at 3 and 5 steps (training and inference).
#[test]
fn the_models_own_figures_are_the_replays() {
    let mut repeated = 0;
    for (case, config) in cases() {
        let opts = options(&case);
        for steps in [3, 5] {
            let w = Workload {
                steps,
                ..case.workload.clone()
            };
            let (reqs, whole) = workload_run(&config, &w, &opts).unwrap().unwrap();
            let free = EstimateOptions {
                unlimited: true,
                ..opts.clone()
            };
            assert!(reqs == workload_requests(&config, &w, &free).unwrap().unwrap());
            let mut replayed = replay(
                &reqs,
                &mut fresh_allocator(&opts.profile, &opts.allocator, None, true),
            );
            repeated += whole.repeated_steps;
            replayed.repeated_steps = whole.repeated_steps;
            assert_eq!(whole, replayed, "{} at {steps} steps", case.name);
        }
    }
    println!("{repeated} steps repeated without replaying");
    assert!(repeated > 0);
}

/// Step 1 derived from step 0 (step 0 less the state it keeps) is the
/// model's step 1 wherever a run of two steps says so, and the one-step
/// runs that use it give the requests and the figures of the two-step run.
/// The optimizers whose later steps take another path than their first are
/// the ones it leaves out.
#[test]
fn a_second_step_derived_from_the_first_is_the_models() {
    let (mut derived, mut not) = (Vec::new(), Vec::new());
    for (case, config) in cases() {
        if case.workload.mode != vramscope_models::Mode::Train || case.workload.accumulation > 1 {
            continue;
        }
        let opts = options(&case);
        let w = Workload {
            steps: 3,
            ..case.workload.clone()
        };
        let (reqs, whole) = workload_run(&config, &w, &opts).unwrap().unwrap();
        if !reqs.second_step_derives() {
            not.push(case.name.clone());
            continue;
        }
        let (r, f) = workload_run_deriving_step1(&config, &w, &opts)
            .unwrap()
            .unwrap_or_else(|| panic!("{}: no derived run", case.name));
        assert!(r == reqs, "{}: requests", case.name);
        assert_eq!(f, whole, "{}", case.name);
        derived.push(case.name.clone());
    }
    println!("step 1 derived: {derived:?}\nnot derived: {not:?}");
    assert!(derived.len() >= 10, "{derived:?}");
}

/// On a whole card, the driver takes device memory for each cuBLAS handle
/// outside the allocator (`DeviceProfile::blas_handle_bytes`), and on a full
/// card that fails (`cublasCreate`: `CUBLAS_STATUS_ALLOC_FAILED`). A replay
/// of the requests takes it at the same request as the model run, so the
/// verdict is the same at every capacity around the boundary, and the
/// driver's share is what decides some of them.
#[test]
fn on_a_whole_card_the_replay_meets_the_drivers_share_where_the_model_does() {
    let (mut fits, mut not, mut by_driver) = (0, 0, 0);
    for (case, config) in cases().into_iter().step_by(3) {
        let full = options(&case);
        let reqs = requests(&config, &case.workload, &full);
        let driver = reqs.driver_bytes_before(usize::MAX);
        assert!(
            !reqs.driver.is_empty() && driver > 0,
            "{}: no cuBLAS handle",
            case.name
        );
        let peak = estimate(&config, &case.workload, &full)
            .unwrap()
            .peak_reserved_bytes as u64;
        for mib in [-300i64, -200, -120, -60, -20, 0, 40, 100] {
            let mut opts = full.clone();
            opts.profile.usable_memory = (peak + driver).saturating_add_signed(mib << 20);
            let est = estimate(&config, &case.workload, &opts).unwrap();
            let v: Verdict = verdict(&reqs, &opts);
            assert_eq!(v.fits, est.oom.is_none(), "{} at {mib} MiB", case.name);
            match &est.oom {
                None => fits += 1,
                Some(o) => {
                    not += 1;
                    if o.message.contains("CUBLAS_STATUS_ALLOC_FAILED") {
                        by_driver += 1;
                    }
                }
            }
        }
    }
    println!("{fits} fit, {not} ran out, {by_driver} of them at a cuBLAS handle");
    assert!(
        fits > 0 && not > 0 && by_driver > 0,
        "{fits} {not} {by_driver}"
    );
}
