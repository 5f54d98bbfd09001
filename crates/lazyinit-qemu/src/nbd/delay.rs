//! Held replies: a zero request's reply leaves when its hold is over,
//! without holding back the replies behind it.

use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::time::Instant;

use super::wire::reply;
use super::Export;

/// Replies held back until their due time, answered by one thread per
/// connection (earliest due first).
pub(super) struct DelayQueue {
    due: Mutex<(std::collections::BinaryHeap<Held>, bool)>,
    wake: std::sync::Condvar,
}

pub(super) struct Held {
    pub due: Instant,
    pub cookie: u64,
    pub err: u32,
    /// What the request trace says of it once answered.
    pub log: (u16, u64, u32, Instant),
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        self.due == o.due
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    /// Reversed: the max-heap yields the earliest due first.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        o.due.cmp(&self.due)
    }
}

impl DelayQueue {
    pub(super) fn new() -> Self {
        DelayQueue {
            due: Mutex::new((Default::default(), false)),
            wake: std::sync::Condvar::new(),
        }
    }
    pub(super) fn push(&self, h: Held) {
        self.due.lock().unwrap().0.push(h);
        self.wake.notify_one();
    }

    pub(super) fn close(&self) {
        self.due.lock().unwrap().1 = true;
        self.wake.notify_one();
    }

    /// Answers each held reply at its due time, until closed and empty.
    pub(super) fn run(&self, w: &Mutex<UnixStream>, export: &Export) {
        let mut g = self.due.lock().unwrap();
        loop {
            let now = Instant::now();
            match g.0.peek() {
                None if g.1 => return,
                None => g = self.wake.wait(g).unwrap(),
                Some(h) if h.due <= now => {
                    let h = g.0.pop().expect("peeked");
                    drop(g);
                    let _ = reply(w, h.cookie, h.err, &[]);
                    let (kind, offset, len, arrived) = h.log;
                    export.log(kind, offset, len, arrived);
                    g = self.due.lock().unwrap();
                }
                Some(h) => {
                    let wait = h.due - now;
                    g = self.wake.wait_timeout(g, wait).unwrap().0;
                }
            }
        }
    }
}
