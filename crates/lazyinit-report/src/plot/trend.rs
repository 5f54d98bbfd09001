//! One series over runs: a point per run (measured blue, estimated
//! orange and hollow), its 95% interval as a bar where it has one, change
//! points as dashed red lines. The points are the plot's only circles,
//! so a reader (or a test) can count them; legends live beside the plot.

use plotters::prelude::*;

use super::{tryp, PlotError, ESTIMATE};

const WHAT: &str = "trend";

/// One run's value of a series.
#[derive(Debug, Clone, PartialEq)]
pub struct TrendPoint {
    /// The x axis label: the run's date.
    pub label: String,
    pub value: f64,
    /// The 95% interval (CI of the mean, or an estimate's PI).
    pub interval: Option<(f64, f64)>,
    pub estimated: bool,
}

fn y_range(points: &[TrendPoint]) -> (f64, f64) {
    let ys = points
        .iter()
        .flat_map(|p| {
            [
                Some(p.value),
                p.interval.map(|i| i.0),
                p.interval.map(|i| i.1),
            ]
        })
        .flatten();
    let (lo, hi) = ys.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), y| {
        (a.min(y), b.max(y))
    });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.15).max(hi.abs() * 0.01).max(1e-6);
    ((lo - pad).max(0.0), hi + pad)
}

/// The series plot; `changes` are the indices of the first point after
/// each change point.
pub fn trend(
    y_desc: &str,
    points: &[TrendPoint],
    changes: &[usize],
    size: (u32, u32),
) -> Result<String, PlotError> {
    let (lo, hi) = y_range(points);
    let n = points.len().max(1) as f64;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        tryp!(root.fill(&WHITE), WHAT);
        let mut chart = tryp!(
            ChartBuilder::on(&root)
                .margin(10)
                .x_label_area_size(36)
                .y_label_area_size(64)
                .build_cartesian_2d(-0.5..n - 0.5, lo..hi),
            WHAT
        );
        let label_of = |x: &f64| {
            let i = x.round();
            let ok = (i - x).abs() < 1e-6 && i >= 0.0 && (i as usize) < points.len();
            if ok {
                points[i as usize].label.clone()
            } else {
                String::new()
            }
        };
        tryp!(
            chart
                .configure_mesh()
                .x_labels(points.len().clamp(1, 8))
                .x_label_formatter(&label_of)
                .y_desc(y_desc)
                .max_light_lines(1)
                .draw(),
            WHAT
        );
        for &c in changes.iter().filter(|&&c| c > 0 && c < points.len()) {
            let x = c as f64 - 0.5;
            let line = DashedLineSeries::new([(x, lo), (x, hi)], 6, 4, RED.stroke_width(2));
            tryp!(chart.draw_series(line), WHAT);
        }
        let bars = points.iter().enumerate().filter_map(|(i, p)| {
            let (a, b) = p.interval?;
            Some(PathElement::new(
                vec![(i as f64, a), (i as f64, b)],
                BLACK.mix(0.6),
            ))
        });
        tryp!(chart.draw_series(bars), WHAT);
        let line = points.iter().enumerate().map(|(i, p)| (i as f64, p.value));
        tryp!(
            chart.draw_series(LineSeries::new(line, BLACK.mix(0.25))),
            WHAT
        );
        // Hundreds of points need smaller marks to stay apart.
        let r = if points.len() > 200 { 2 } else { 4 };
        let dots = points.iter().enumerate().map(|(i, p)| {
            let style = match p.estimated {
                true => ESTIMATE.stroke_width(2),
                false => BLUE.filled(),
            };
            Circle::new((i as f64, p.value), r, style)
        });
        tryp!(chart.draw_series(dots), WHAT);
        tryp!(root.present(), WHAT);
    }
    Ok(svg)
}

/// A small line of a series' values, no axes: for the index's table.
pub fn sparkline(points: &[TrendPoint], size: (u32, u32)) -> Result<String, PlotError> {
    let (lo, hi) = y_range(points);
    let n = points.len().max(2) as f64;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        let mut chart = tryp!(
            ChartBuilder::on(&root)
                .margin(3)
                .build_cartesian_2d(0.0..n - 1.0, lo..hi),
            WHAT
        );
        let line = points.iter().enumerate().map(|(i, p)| (i as f64, p.value));
        tryp!(
            chart.draw_series(LineSeries::new(line, BLUE.stroke_width(1))),
            WHAT
        );
        if let Some(p) = points.last() {
            let last = Circle::new(((points.len() - 1) as f64, p.value), 2, BLUE.filled());
            tryp!(chart.draw_series([last]), WHAT);
        }
        tryp!(root.present(), WHAT);
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(v: f64, estimated: bool) -> TrendPoint {
        TrendPoint {
            label: "2026-12-01".into(),
            value: v,
            interval: (!estimated).then_some((v - 1.0, v + 1.0)),
            estimated,
        }
    }

    #[test]
    fn one_circle_per_point_and_a_line_per_change() {
        let pts: Vec<_> = (0..7).map(|i| pt(600.0 + i as f64, i % 2 == 0)).collect();
        let svg = trend("lazyinit_s (s)", &pts, &[3], (800, 300)).unwrap();
        assert_eq!(svg.matches("<circle").count(), 7);
        assert!(svg.contains("#FF0000"), "the change line is red");
        let none = trend("s", &pts, &[], (800, 300)).unwrap();
        assert!(!none.contains("#FF0000"));
        assert!(sparkline(&pts, (120, 30)).unwrap().starts_with("<svg"));
        assert!(
            trend("s", &[], &[], (400, 200)).is_ok(),
            "an empty series draws an empty plot"
        );
    }
}
