//! Snapshot tests of `vramscope inspect`'s printed outputs: the text summary
//! and the JSON of a real H100 snapshot (fixtures/alloc/training.pickle),
//! whole and with its first half cut off (a ring buffer), compared with the
//! golden files in tests/golden. Run with `VRAMSCOPE_BLESS=1` to rewrite
//! them after an intended change, and review the diff.

use std::path::{Path, PathBuf};

use vramscope_report::{analyze, json, text, Options};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/alloc");
const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");

/// Compare `got` with the golden file `name`, printing the first
/// difference; with `VRAMSCOPE_BLESS=1`, write it instead.
fn assert_golden(name: &str, got: &str) {
    let path: PathBuf = Path::new(GOLDEN).join(name);
    if std::env::var_os("VRAMSCOPE_BLESS").is_some() {
        std::fs::create_dir_all(GOLDEN).unwrap();
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with VRAMSCOPE_BLESS=1)", path.display()));
    if want == got {
        return;
    }
    let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    let i = w
        .iter()
        .zip(&g)
        .position(|(a, b)| a != b)
        .unwrap_or(w.len().min(g.len()));
    panic!(
        "{name} differs from its golden file at line {}:\n  golden: {:?}\n  now:    {:?}\n({} vs {} lines; VRAMSCOPE_BLESS=1 rewrites it)",
        i + 1,
        w.get(i),
        g.get(i),
        w.len(),
        g.len()
    );
}

fn render(name: &str, snap: &vramscope_snapshot::Snapshot, opts: &Options, stacks: bool) {
    let (cfg, _) = vramscope_replay::from_snapshot::config(snap);
    let mut r = analyze(snap, &cfg, opts);
    r.snapshot = "training.pickle".into();
    assert_golden(&format!("{name}.txt"), &text::render(&r, stacks));
    assert_golden(&format!("{name}.json"), &json::render(&r));
}

fn training() -> vramscope_snapshot::Snapshot {
    vramscope_snapshot::read_snapshot_file(Path::new(FIXTURES).join("training.pickle")).unwrap()
}

#[test]
fn inspect_training() {
    render("training", &training(), &Options::default(), false);
}

#[test]
fn inspect_training_top3_with_stacks() {
    let opts = Options {
        top: 3,
        stacks: true,
        timeline_points: 20,
        ..Options::default()
    };
    render("training_top3_stacks", &training(), &opts, true);
}

#[test]
fn inspect_training_truncated() {
    let mut snap = training();
    let t = &mut snap.device_traces[0];
    let half = t.len() / 2;
    t.drop_front(half);
    let opts = Options {
        timeline_points: 20,
        ..Options::default()
    };
    render("training_truncated", &snap, &opts, false);
}
