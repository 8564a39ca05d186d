//! The seed experiments measured on an H100 (`fixtures/seeds/seeds_h100.jsonl`)
//! against the twin: every figure of every step must be equal.

use crate::common;

use common::{case_tests, Fixture, Step};
use vramscope_engine::demo;

const SEEDS: Fixture = Fixture {
    path: concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/seeds/seeds_h100.jsonl"
    ),
    run: twin,
    width: 28,
};

fn twin(case: &str) -> Result<Vec<Step>, String> {
    let steps = demo::run(case).map_err(|e| e.to_string())?;
    Ok(steps
        .into_iter()
        .map(|s| {
            let figures = [
                s.allocated,
                s.peak,
                s.reserved,
                s.peak_reserved,
                s.requested,
            ];
            (s.step, figures)
        })
        .collect())
}

fn check(case: &str) {
    SEEDS.check(case);
}

#[test]
fn every_fixture_case_is_a_demo_case() {
    assert_eq!(SEEDS.cases(), demo::cases());
}

#[test]
fn summary() {
    SEEDS.summary(&demo::cases());
}

case_tests! {
    check;
    seed000_nograd => "seed000:nograd",
    seed000_both => "seed000:both",
    seed000_xonly => "seed000:xonly",
    seed000_fused => "seed000:fused",
    seed000_fused2 => "seed000:fused2",
    seed000_sigmoid_manual => "seed000:sigmoid_manual",
    seed000_sigmoid_builtin => "seed000:sigmoid_builtin",
    seed001 => "seed001",
    seed001b => "seed001b",
    seed002 => "seed002",
    seed003 => "seed003",
    seed003b => "seed003b",
    snapshot => "snapshot",
}
