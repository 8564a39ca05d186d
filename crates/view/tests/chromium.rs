//! The viewer driven in a real browser: headless Chromium opens the page
//! served by the Rust process with `#selftest`; the page drags across the
//! peak to zoom (a range fetched in full detail), hovers the largest
//! allocation there, pans, zooms out with the wheel, asks what is live at
//! the peak, clicks the peak for the allocator's state there, hovers its
//! largest block and steps one entry on, searches a site and jumps to the
//! OOM, then writes what it saw (time axis included, and any JS error)
//! into `<div id="selftest">`.

use std::path::PathBuf;
use std::process::Command;

use vramscope_report::explore::Explorer;
use vramscope_report::Options;
use vramscope_view::Viewer;

const REAL: &str = "fixtures/snapshot_real/nanogpt_wrapped_3streams_expandable_oom_h200.pickle.xz";

/// Chromium as the set-up path installs it (`scripts/dev.sh`); `None`
/// (with a loud note) outside CI, a failure in CI.
fn browser() -> Option<PathBuf> {
    let bin = [
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        "/usr/bin/google-chrome",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists());
    if bin.is_none() {
        if std::env::var_os("CI").is_some() {
            panic!("chromium not found and CI is set: the set-up path installs it (bash scripts/dev.sh setup)");
        }
        eprintln!(
            "\n\n*** SKIPPED: chromium not found; the viewer was NOT tested in a browser ***\n\n"
        );
    }
    bin
}

/// The number after `key` in the self-test line.
fn number_after(line: &str, key: &str) -> u64 {
    let at = line
        .find(key)
        .unwrap_or_else(|| panic!("{key:?} not in {line}"))
        + key.len();
    line[at..]
        .trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no number after {key:?} in {line}"))
}

#[test]
fn the_viewer_zooms_hovers_pans_searches_and_jumps_to_the_oom() {
    let Some(bin) = browser() else { return };
    let snap =
        vramscope_snapshot::read_snapshot_file(vramscope_testkit::xz::fixture_file(REAL)).unwrap();
    let (cfg, _) = vramscope_replay::from_snapshot::config(&snap);
    let x = Explorer::new(snap, cfg, Options::default(), "nanogpt.pickle");
    let r = x.report().clone();
    let (url, stop, handle) = Viewer::bind(x, 0).unwrap().spawn();
    let dir = std::env::temp_dir().join(format!("vramscope-view-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let target = format!("{url}#selftest");
    let dom = vramscope_testkit::browser::dump_dom(&dir, |profile| {
        let mut c = Command::new(&bin);
        c.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--virtual-time-budget=30000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(&target);
        c
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    handle.join().unwrap();
    let start = dom
        .find("<div id=\"selftest\">")
        .expect("selftest div in the DOM");
    let line = &dom[start..dom[start..].find("</div>").map_or(dom.len(), |e| start + e)];
    eprintln!("{line}");
    assert!(
        line.contains("ok: drew "),
        "the self-test did not finish: {line}"
    );
    assert!(line.contains("console errors: 0"), "{line}");
    let pk = r.peak_trace_index.unwrap() as u64;
    let n = r.trace_entries as u64;
    // the drag zoomed in around the peak, whose bytes the range keeps
    let zoom = &line[line.find("drag-zoom:").unwrap()..];
    let (z0, z1) = (number_after(zoom, "entries"), number_after(zoom, " to "));
    assert!(z0 <= pk && pk < z1 && z1 - z0 < n / 10, "{zoom}");
    assert_eq!(number_after(zoom, "peak at"), pk, "{zoom}");
    assert_eq!(
        number_after(zoom, &format!("peak at {pk}")),
        r.peak_allocated_bytes,
        "{zoom}"
    );
    // the hover showed an allocation and its stack, the user's frames first
    let hover = &line[line.find("hover:").unwrap()..];
    assert!(hover.contains("record.py"), "{hover}");
    // panning moved the view right; the wheel zoomed out
    let pan = &line[line.find("pan: from").unwrap()..];
    assert!(
        number_after(pan, " to ") > number_after(pan, "from"),
        "{pan}"
    );
    let wheel = number_after(line, "wheel out:");
    assert!(wheel > z1 - z0, "{line}");
    // what is live at the peak is the report's
    let at = &line[line.find("at peak:").unwrap()..];
    assert_eq!(number_after(at, "at peak:"), r.peak_allocated_bytes, "{at}");
    assert_eq!(number_after(at, "live"), r.live_at_peak.bytes, "{at}");
    // the time axis has round times in seconds
    let axis = &line[line.find("time axis:").unwrap()..];
    assert!(number_after(axis, "time axis:") >= 3, "{axis}");
    assert!(axis.contains(" s | "), "{axis}");
    // a click at the peak shows the allocator's state there: its blocks
    // add up to the peak's allocated bytes, its segments to the reserved
    let st = &line[line.find("state: entry").unwrap()..];
    assert_eq!(number_after(st, "state: entry"), pk, "{st}");
    assert_eq!(number_after(st, ", "), r.peak_allocated_bytes, "{st}");
    assert_eq!(
        number_after(st, "allocated, "),
        r.peak_allocated_bytes + r.fragmentation.reserved_minus_allocated_at_peak_bytes,
        "{st}"
    );
    // hovering its largest block shows the block and its stack
    let sh = &line[line.find("state hover:").unwrap()..];
    assert!(sh.contains("block (") && sh.contains("your code:"), "{sh}");
    let step = &line[line.find("state step:").unwrap()..];
    assert_eq!(number_after(step, " to "), pk + 1, "{step}");
    assert!(number_after(line, "search:") > 0, "{line}");
    let sz = &line[line.find("search zoom:").unwrap()..];
    assert!(sz.contains("(true)"), "{sz}");
    let kp = &line[line.find("key pan:").unwrap()..];
    assert!(number_after(kp, " to ") > number_after(kp, "from"), "{kp}");
    assert!(line.contains("(true)"), "the OOM was not shown: {line}");
    // with the state just before it
    let oom = r.ooms[0].trace_index as u64;
    assert_eq!(number_after(line, "state after entry"), oom - 1, "{line}");
}
