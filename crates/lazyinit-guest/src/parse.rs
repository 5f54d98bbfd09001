//! Parsers for what the guest scripts print and for the ftrace text format.

use std::collections::BTreeMap;

/// `key=value` lines into a map; other lines are ignored.
pub fn key_values(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.trim_end_matches('\r').split_once('=')?;
            Some((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

/// One line of the ftrace `trace` file that we care about.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceEvent {
    /// Trace clock, seconds.
    pub ts: f64,
    pub kind: EventKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum EventKind {
    /// `ext4_lazy_itable_init: dev 254,0 group 5`
    Group(u64),
    /// `tracing_mark_write: <text>`
    Marker(String),
    /// `sched_process_exit: comm=ext4lazyinit pid=...`
    ThreadExit,
}

/// Parses one trace line: `TASK-PID [CPU] FLAGS TIMESTAMP: EVENT: PAYLOAD`.
pub fn trace_line(line: &str) -> Option<TraceEvent> {
    let line = line.trim_end_matches('\r');
    if line.starts_with('#') {
        return None;
    }
    let rest = &line[line.find("] ")? + 2..];
    let (head, tail) = rest.split_once(": ")?;
    let ts: f64 = head.split_whitespace().last()?.parse().ok()?;
    let (event, payload) = tail.split_once(": ").unwrap_or((tail, ""));
    let kind = match event.trim() {
        "ext4_lazy_itable_init" => {
            let g = payload
                .split_whitespace()
                .skip_while(|w| *w != "group")
                .nth(1)?;
            EventKind::Group(g.parse().ok()?)
        }
        "tracing_mark_write" => EventKind::Marker(payload.trim().to_string()),
        "sched_process_exit" if payload.contains("comm=ext4lazyinit") => EventKind::ThreadExit,
        _ => return None,
    };
    Some(TraceEvent { ts, kind })
}

/// What a whole trace says about one lazy-init run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TraceSummary {
    pub mount_start: Option<f64>,
    pub mount_done: Option<f64>,
    pub thread_exit: Option<f64>,
    /// (group, timestamp), in trace order.
    pub groups: Vec<(u64, f64)>,
    pub distinct_groups: u64,
}

impl TraceSummary {
    pub fn first_group(&self) -> Option<f64> {
        self.groups.first().map(|g| g.1)
    }
    pub fn last_group(&self) -> Option<f64> {
        self.groups.last().map(|g| g.1)
    }
    /// Mean cycle, first to last group, in milliseconds.
    pub fn ms_per_group(&self) -> Option<f64> {
        let n = self.groups.len();
        if n < 2 {
            return None;
        }
        Some((self.last_group()? - self.first_group()?) / (n - 1) as f64 * 1000.0)
    }
    /// Median of the per-group cycles, milliseconds (robust to a stall).
    pub fn median_cycle_ms(&self) -> Option<f64> {
        let mut d: Vec<f64> = self
            .groups
            .windows(2)
            .map(|w| (w[1].1 - w[0].1) * 1000.0)
            .collect();
        if d.is_empty() {
            return None;
        }
        d.sort_by(|a, b| a.total_cmp(b));
        let m = d.len() / 2;
        Some(if d.len() % 2 == 1 {
            d[m]
        } else {
            (d[m - 1] + d[m]) / 2.0
        })
    }
    /// Guest-clock lazy-init duration: mount done to thread exit.
    pub fn lazyinit_s(&self) -> Option<f64> {
        Some(self.thread_exit? - self.mount_done?)
    }
    /// `group,t_s` CSV for the report's per-group plot.
    pub fn groups_csv(&self) -> String {
        let mut s = String::from("group,t_s\n");
        for (g, t) in &self.groups {
            s.push_str(&format!("{g},{t:.6}\n"));
        }
        s
    }
}

pub fn summarize(trace: &str) -> TraceSummary {
    let mut s = TraceSummary::default();
    let mut seen = std::collections::HashSet::new();
    for e in trace.lines().filter_map(trace_line) {
        match e.kind {
            EventKind::Group(g) => {
                seen.insert(g);
                s.groups.push((g, e.ts));
            }
            EventKind::Marker(m) if m == "lazyinit-mount-start" => s.mount_start = Some(e.ts),
            EventKind::Marker(m) if m == "lazyinit-mount-done" => s.mount_done = Some(e.ts),
            EventKind::Marker(_) => {}
            EventKind::ThreadExit => s.thread_exit = Some(e.ts),
        }
    }
    s.distinct_groups = seen.len() as u64;
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "# tracer: nop\n\
#\n\
# entries-in-buffer/entries-written: 6/6   #P:1\n\
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION\n\
              sh-101     [000] .....    10.000000: tracing_mark_write: lazyinit-mount-start\r\n\
              sh-101     [000] .....    10.050000: tracing_mark_write: lazyinit-mount-done\n\
    ext4lazyinit-120     [000] .....    13.000000: ext4_lazy_itable_init: dev 254,0 group 1\n\
    ext4lazyinit-120     [000] ....1    13.110000: ext4_lazy_itable_init: dev 254,0 group 2\n\
    ext4lazyinit-120     [000] .....    13.220000: ext4_lazy_itable_init: dev 254,0 group 3\n\
    ext4lazyinit-120     [000] .N...    13.230000: sched_process_exit: comm=ext4lazyinit pid=120 prio=120\n";

    #[test]
    fn parses_real_shaped_trace() {
        let s = summarize(TRACE);
        assert_eq!(s.mount_start, Some(10.0));
        assert_eq!(s.mount_done, Some(10.05));
        assert_eq!(s.groups.len(), 3);
        assert_eq!(s.distinct_groups, 3);
        assert!((s.ms_per_group().unwrap() - 110.0).abs() < 1e-6);
        assert!((s.median_cycle_ms().unwrap() - 110.0).abs() < 1e-6);
        assert!((s.lazyinit_s().unwrap() - 3.18).abs() < 1e-9);
        assert!(s.groups_csv().starts_with("group,t_s\n1,13.000000\n"));
    }

    #[test]
    fn ignores_other_events_and_garbage() {
        assert_eq!(trace_line("garbage"), None);
        assert_eq!(
            trace_line("  x-1 [000] ..... 1.0: sched_process_exit: comm=sh pid=1 prio=120"),
            None
        );
        assert_eq!(
            trace_line("  x-1 [000] ..... 1.0: ext4_other: dev 1,1 group 2"),
            None
        );
    }

    #[test]
    fn key_values_trim_crlf() {
        let kv = key_values("release=6.1.0-x\r\nhz=100\nnoise\n");
        assert_eq!(kv["release"], "6.1.0-x");
        assert_eq!(kv["hz"], "100");
        assert_eq!(kv.len(), 2);
    }
}
