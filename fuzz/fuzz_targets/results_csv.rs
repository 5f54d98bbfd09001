//! The results CSV reader over any bytes: rows it accepts are measurements.
#![no_main]

use lazyinit_core::results::{read_rows_from, Status};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(rows) = read_rows_from(data, std::path::Path::new("fuzz.csv")) {
        for r in rows {
            if r.status == Status::Ok {
                let v = r.measured.lazyinit_s.expect("an ok row has lazyinit_s");
                assert!(v.is_finite() && v >= 0.0);
            }
        }
    }
});
