//! JSON: the whole report, floats rounded to 6 decimals so that output is
//! stable across platforms and readable.

use serde::Serialize;
use serde_json::Value;

pub fn render<T: Serialize>(value: &T) -> String {
    let mut v = serde_json::to_value(value).expect("report types serialize");
    round(&mut v);
    let mut s = serde_json::to_string_pretty(&v).expect("a Value serializes");
    s.push('\n');
    s
}

fn round(v: &mut Value) {
    match v {
        Value::Number(n) if n.is_f64() => {
            let x = n.as_f64().unwrap_or(0.0);
            let r = (x * 1e6).round() / 1e6;
            if let Some(m) = serde_json::Number::from_f64(r) {
                *n = m;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(round),
        Value::Object(o) => o.values_mut().for_each(round),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rounds_nested_floats() {
        let out = super::render(&serde_json::json!({"a": [1.23456789, 2], "b": {"c": 0.1}}));
        assert!(
            out.contains("1.234568") && out.contains("0.1") && out.contains(" 2\n"),
            "{out}"
        );
    }
}
