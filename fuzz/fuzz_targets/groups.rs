//! groups.csv as report and replay read it, then counted on the tick grid
//! and estimated from at every prefix a live run could check: no panic.
#![no_main]

use lazyinit_estimate::{check, Load, Trace};
use lazyinit_core::{ticks, Hz};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let Ok(g) = lazyinit_report::input::parse_groups(text) else {
        return;
    };
    let all = Hz::SUPPORTED;
    let Ok(hz) = Hz::new(all[sel as usize % all.len()]) else {
        return;
    };
    let spans = ticks::spans(&g.t_s, &g.zero_s);
    if let Some(c) = ticks::count(&spans, hz.get()) {
        let _ = c.crossed_at(u64::from(sel));
    }
    let to_init = g.t_s.len() as u64 + u64::from(sel);
    for n in [25usize, 50, 100, g.t_s.len()] {
        let n = n.min(g.t_s.len());
        let tr = Trace {
            hz,
            to_init,
            first_group_s: g.t_s.first().copied().unwrap_or_default(),
            t_s: &g.t_s[..n],
            zero_s: &g.zero_s[..n],
            load: Load {
                changing: u32::from(sel),
                running: u32::from(sel / 3),
            },
        };
        let _ = check(&tr);
    }
});
