//! Shared by the twin tests: a twin for some arches, specs, the harness
//! in-process with its events timed, and the checks that nothing is left.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use lazyinit_core::events::{Event, EventSink, Phase};
use lazyinit_core::Arch;
use lazyinit_twin::harness::{self, HarnessConfig, Outcome};
use lazyinit_twin::Twin;

pub async fn twin(dir: &Path, archs: &[Arch]) -> Twin {
    let stand_ins = lazyinit_twin::stand_ins(archs)
        .await
        .expect("stand-in AMIs (qemu-profile kernels and guest images)");
    Twin::start(dir, stand_ins).await.expect("the twin starts")
}

/// One cell's spec for the twin: `provider = "ec2"`, storage as the
/// volume is (a raw file on NVMe; no hold), one at a time.
pub fn spec(name: &str, arch: Arch, hz: u32, variant: &str, size: &str, reps: u32) -> String {
    format!(
        r#"
        name = "{name}"
        provider = "ec2"
        arches = ["{arch}"]
        hz = [{hz}]
        variants = ["{variant}"]
        sizes = ["{size}"]
        repetitions = {reps}
        storage-profile = "none"
        poll-interval = "2s"
        concurrency = 1
        "#
    )
}

/// Every event with the seconds since the run started.
pub type Timeline = Arc<Mutex<Vec<(f64, Event)>>>;

/// Runs the harness in this process; `on_event` sees each event as it
/// comes (to inject a fault at a phase).
pub async fn run(
    h: &HarnessConfig,
    on_event: impl Fn(&Event) + Send + 'static,
) -> (anyhow::Result<Outcome>, Timeline) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let timeline: Timeline = Arc::default();
    let t = timeline.clone();
    let start = Instant::now();
    let listener = tokio::spawn(async move {
        while let Some(e) = rx.recv().await {
            on_event(&e);
            t.lock().unwrap().push((start.elapsed().as_secs_f64(), e));
        }
    });
    let r = harness::run(h, EventSink::new(tx), Arc::new(AtomicBool::new(false))).await;
    let _ = listener.await;
    (r, timeline)
}

/// Seconds from the first event matching `a` to the first matching `b`.
pub fn span(
    t: &[(f64, Event)],
    a: impl Fn(&Event) -> bool,
    b: impl Fn(&Event) -> bool,
) -> Option<f64> {
    let ta = t.iter().find(|(_, e)| a(e))?.0;
    let tb = t.iter().find(|(s, e)| *s >= ta && b(e))?.0;
    Some(tb - ta)
}

pub fn phase(p: Phase) -> impl Fn(&Event) -> bool {
    move |e| matches!(e, Event::Phase { phase, .. } if *phase == p)
}

pub fn note(prefix: &'static str) -> impl Fn(&Event) -> bool {
    move |e| matches!(e, Event::Note { message, .. } if message.starts_with(prefix))
}

pub fn finished(e: &Event) -> bool {
    matches!(e, Event::Finished { .. })
}

/// QEMU processes whose command line mentions `dir` (a twin's guests).
pub fn qemu_processes_under(dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.starts_with("qemu-system") && cmd.contains(&needle) {
            out.push(cmd);
        }
    }
    out
}

/// Nothing of the project is left in the emulator, no guest is live, no
/// QEMU of the twin runs, no endpoint is published.
pub async fn nothing_left(twin: &Twin, dir: &Path) {
    let c = twin.client().await;
    let inst = lazyinit_ec2::cleanup::project_instances(&c, None)
        .await
        .unwrap();
    assert!(inst.is_empty(), "instances left: {inst:?}");
    let vols = lazyinit_ec2::cleanup::project_volumes(&c, None)
        .await
        .unwrap();
    assert!(vols.is_empty(), "volumes left: {vols:?}");
    // The controller reacts within a tick or two.
    let until = Instant::now() + std::time::Duration::from_secs(20);
    while !twin.controller.live().is_empty() && Instant::now() < until {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let live: Vec<String> = twin
        .controller
        .live()
        .iter()
        .map(|g| g.instance.clone())
        .collect();
    assert!(live.is_empty(), "guests left: {live:?}");
    let q = qemu_processes_under(dir);
    assert!(q.is_empty(), "QEMU left: {q:?}");
    let eps: Vec<_> = std::fs::read_dir(twin.controller.endpoints_dir())
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(eps.is_empty(), "endpoints left: {eps:?}");
}

pub fn counts(m: &BTreeMap<String, u64>) -> String {
    let total: u64 = m.values().sum();
    let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{total} calls ({})", parts.join(", "))
}
