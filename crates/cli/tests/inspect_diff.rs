//! `vramscope inspect` and `vramscope diff` as a user runs them.

use std::process::Command;

const FIX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/alloc");

fn vramscope(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn inspect_json_has_the_documented_fields() {
    let (rc, out) = vramscope(&["inspect", "--json", &format!("{FIX}/training.pickle")]);
    assert_eq!(rc, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["peak_allocated_bytes"], 239_648_256);
    assert_eq!(v["peak_reserved_bytes"], 272_629_760);
    for k in [
        "peak_trace_index",
        "live_at_peak",
        "fragmentation",
        "categories",
        "timeline",
    ] {
        assert!(!v[k].is_null(), "{k}");
    }
    assert!(v["live_at_peak"]["sites"][0]["bytes"].as_u64().unwrap() > 0);
}

#[test]
fn inspect_text_summary() {
    let (rc, out) = vramscope(&["inspect", "--top", "3", &format!("{FIX}/training.pickle")]);
    assert_eq!(rc, 0);
    assert!(
        out.contains("peak allocated    228.55 MiB  at trace entry"),
        "{out}"
    );
    assert!(out.contains("by category"), "{out}");
    assert!(
        out.contains("empty_cache() at the end would release"),
        "{out}"
    );
}

#[test]
fn inspect_bad_input_exits_2() {
    let (rc, _) = vramscope(&["inspect", &format!("{FIX}/training.stats.json")]);
    assert_eq!(rc, 2);
}

#[test]
fn diff_fail_over() {
    let a = format!("{FIX}/training.pickle");
    let b = format!("{FIX}/default.pickle");
    let (rc, out) = vramscope(&["diff", &a, &b, "--fail-over", "50MiB"]);
    assert_eq!(rc, 1, "{out}");
    assert!(
        out.contains("peak allocated  228.55 MiB -> 2.42 GiB"),
        "{out}"
    );
    let (rc, _) = vramscope(&["diff", &b, &a, "--fail-over", "5%"]);
    assert_eq!(rc, 0);
    let (rc, out) = vramscope(&["diff", &a, &a, "--fail-over", "0"]);
    assert_eq!(rc, 0, "{out}");
    let (rc, _) = vramscope(&["diff", &a, &b, "--fail-over", "lots"]);
    assert_eq!(rc, 2);
}

/// A file that is no snapshot is named for what it is (issue 34: a text
/// file read as "memo get of index 101", a torch.save zip as "unsupported
/// opcode PERSID"), and a missing file's cause is printed once.
#[test]
fn inspect_says_what_the_file_is() {
    let err = |path: &std::path::Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_vramscope"))
            .arg("inspect")
            .arg(path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let dir = std::env::temp_dir().join(format!("vramscope-inspect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = dir.join("notes.txt");
    std::fs::write(&text, "hello\nworld\n").unwrap();
    let e = err(&text);
    assert!(e.contains("it is a text file (it starts \"hello\"), not a pickle; expected the file torch.cuda.memory._dump_snapshot(path) writes"), "{e}");
    let zip = dir.join("model.pt");
    std::fs::write(&zip, b"PK\x03\x04archive/data.pkl").unwrap();
    let e = err(&zip);
    assert!(
        e.contains("it is a zip archive (torch.save writes one"),
        "{e}"
    );
    let e = err(&dir.join("missing.pickle"));
    assert_eq!(e.matches("No such file").count(), 1, "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `replay` reads a file as `inspect` does: one cut short is named
/// truncated (it was "unexpected end of file ... while reading FRAME"), a
/// text file is named as such, and each exits 2.
#[test]
fn replay_says_what_the_file_is_as_inspect_does() {
    let dir = std::env::temp_dir().join(format!("vramscope-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let whole = std::fs::read(format!("{FIX}/training.pickle")).unwrap();
    let cut = dir.join("cut.pickle");
    std::fs::write(&cut, &whole[..3000]).unwrap();
    let text = dir.join("report.json");
    std::fs::write(&text, "{\"a\": 1}\n").unwrap();
    for (path, want) in [
        (
            &cut,
            "the file is truncated: the pickle frame at byte 2 declares",
        ),
        (
            &text,
            "it is a text file (it starts \"{\\\"a\\\": 1}\"), not a pickle",
        ),
    ] {
        for command in ["replay", "inspect"] {
            let out = Command::new(env!("CARGO_BIN_EXE_vramscope"))
                .arg(command)
                .arg(path)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{command}: {err}");
            assert!(
                err.contains(&format!(
                    "{} is not a readable PyTorch memory snapshot",
                    path.display()
                )) && err.contains(want),
                "{command}: {err}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A snapshot `vramscope estimate --snapshot` predicted replays against
/// its own trace, and says so rather than "match the GPU".
#[test]
fn replaying_a_prediction_does_not_claim_the_gpu() {
    let pred = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/predicted/gpt2_train_b1_s64.pickle"
    );
    let (rc, out) = vramscope(&["replay", pred]);
    assert_eq!(rc, 0);
    assert!(
        out.contains(
            "match the recorded trace (vramscope's own prediction, from estimate --snapshot or run --snapshot; not measured on a GPU)"
        ),
        "{out}"
    );
    let (rc, out) = vramscope(&["replay"]);
    assert_eq!(rc, 0);
    assert!(out.contains("match the GPU."), "{out}");
}

/// `inspect --range` (issue 36): the peak of a part of the trace, by trace
/// entries or seconds; a range that selects nothing says so.
#[test]
fn inspect_range() {
    let f = format!("{FIX}/training.pickle");
    let (rc, out) = vramscope(&["inspect", "--json", &f]);
    assert_eq!(rc, 0);
    let all: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(all.get("range").is_none());
    let pk = all["peak_trace_index"].as_u64().unwrap();
    let after = format!("{}..", pk + 1);
    let (rc, out) = vramscope(&["inspect", "--json", "--range", &after, &f]);
    assert_eq!(rc, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["range"]["from"], pk + 1);
    assert_eq!(v["range"]["to"], all["trace_entries"]);
    assert!(v["peak_trace_index"].as_u64().unwrap() > pk);
    assert!(v["peak_allocated_bytes"].as_u64() <= all["peak_allocated_bytes"].as_u64());
    let (rc, out) = vramscope(&["inspect", "--json", "--range", "0s..", &f]);
    assert_eq!(rc, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["peak_allocated_bytes"], all["peak_allocated_bytes"]);
    let (rc, _) = vramscope(&["inspect", "--range", "9..3", &f]);
    assert_eq!(rc, 2);
}

#[test]
fn inspect_html_over_a_longer_file_is_the_page_alone() {
    let dir = std::env::temp_dir().join(format!("vramscope-html-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (fresh, over) = (dir.join("fresh.html"), dir.join("over.html"));
    std::fs::write(&over, vec![b'x'; 4 << 20]).unwrap();
    let snap = format!("{FIX}/training.pickle");
    for p in [&fresh, &over] {
        let (rc, _) = vramscope(&["inspect", "--html", p.to_str().unwrap(), &snap]);
        assert_eq!(rc, 0);
    }
    let page = std::fs::read(&fresh).unwrap();
    assert!(page.ends_with(b"</html>\n"));
    assert!(std::fs::read(&over).unwrap() == page);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A snapshot from a multi-GPU host lists every device's trace: `inspect`
/// without `--device` reports the one with a trace, as memory_viz does.
#[test]
fn inspect_without_device_takes_the_device_with_a_trace() {
    let mut snap =
        vramscope_snapshot::read_snapshot_file(format!("{FIX}/training.pickle")).unwrap();
    let busy = snap.device_traces.remove(0);
    snap.device_traces = vec![Default::default(), Default::default(), busy];
    for s in &mut snap.segments {
        s.device = 2;
    }
    let path =
        std::env::temp_dir().join(format!("vs-inspect-device-{}.pickle", std::process::id()));
    let bytes = vramscope_snapshot::write::snapshot_to_bytes(&snap, &Default::default());
    std::fs::write(&path, bytes).unwrap();
    let file = path.to_str().unwrap();
    let (rc, out) = vramscope(&["inspect", "--json", file]);
    let (rc0, out0) = vramscope(&["inspect", "--json", "--device", "0", file]);
    std::fs::remove_file(&path).unwrap();
    assert_eq!((rc, rc0), (0, 0));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["device"], 2);
    assert_eq!(v["peak_allocated_bytes"], 239_648_256);
    let v0: serde_json::Value = serde_json::from_str(&out0).unwrap();
    assert_eq!(v0["device"], 0);
    assert_eq!(v0["trace_entries"], 0);
}
