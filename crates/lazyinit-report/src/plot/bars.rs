//! Bars of the cells' means grouped as the reported table is (a group per
//! volume x variant, a bar per arch / HZ / environment column), each with
//! the 2021 report's figure as a bar beside it, the 95% interval as a
//! whisker and the model as a cross.

use std::collections::BTreeSet;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{tryp, PlotError, ESTIMATE};
use crate::cells::{CellKey, CellStats};
use crate::render::Labeller;
use crate::report::Report;
use lazyinit_core::{ByteSize, Variant};

const WHAT: &str = "bars";
const REPORTED: RGBColor = RGBColor(60, 160, 60);
/// Units between two groups of bars.
const GAP: f64 = 0.7;

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Where a cell's pair of bars stands: the measured bar left of `x`,
/// the 2021 bar right of it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Slot {
    pub cell: usize,
    pub x: f64,
}

/// A group of slots: one row of the reported table.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Group {
    pub label: String,
    pub from: f64,
    pub to: f64,
}

/// A cell's key without volume and variant: its column.
fn column_of(k: &CellKey) -> CellKey {
    let mut k = k.clone();
    k.axes.variant = Variant::NoFix;
    k.axes.volume = lazyinit_core::ByteSize(0);
    k
}

/// Slots and groups in the table's order (by volume, no fix first; the
/// columns in key order); returns the x extent too.
pub(crate) fn layout(cells: &[CellStats]) -> (Vec<Slot>, Vec<Group>, f64) {
    let columns: BTreeSet<CellKey> = cells.iter().map(|c| column_of(&c.key)).collect();
    let rows: BTreeSet<(u64, bool)> = cells
        .iter()
        .map(|c| (c.key.axes.volume.0, c.key.axes.variant == Variant::Fix))
        .collect();
    let (mut slots, mut groups, mut x) = (Vec::new(), Vec::new(), 0.0);
    for (vol, fix) in rows {
        let from = x;
        for col in &columns {
            let found = cells.iter().position(|c| {
                c.key.axes.volume.0 == vol
                    && (c.key.axes.variant == Variant::Fix) == fix
                    && column_of(&c.key) == *col
            });
            if let Some(cell) = found {
                slots.push(Slot { cell, x: x + 0.5 });
                x += 1.0;
            }
        }
        let variant = if fix { "with fix" } else { "without fix" };
        groups.push(Group {
            label: format!("{} {variant}", ByteSize(vol)),
            from,
            to: x,
        });
        x += GAP;
    }
    (slots, groups, (x - GAP).max(1.0))
}

/// The top of the value axis: every bar, whisker and marker fits.
fn top(cells: &[CellStats]) -> f64 {
    cells
        .iter()
        .flat_map(|c| {
            let s = c.summary.as_ref();
            [
                s.map(|s| s.ci95.or(c.prediction).map_or(s.max, |i| i.hi)),
                Some(c.model.value),
                c.reported.as_ref().map(|r| r.value),
            ]
        })
        .flatten()
        .fold(0.0f64, f64::max)
        * 1.12
}

/// The bar chart's SVG.
pub fn bars_svg(report: &Report) -> Result<String, PlotError> {
    let cells = &report.cells;
    let lab = Labeller::new(cells.iter().map(|c| &c.key));
    let (slots, groups, extent) = layout(cells);
    let columns: Vec<String> = slots
        .iter()
        .map(|s| lab.column(&cells[s.cell].key))
        .collect();
    // Room below the axis for the longest rotated label (~7 px a character).
    let label_area = 50
        + 7 * columns
            .iter()
            .map(|l| l.chars().count())
            .max()
            .unwrap_or(10) as u32;
    let width = (160 + (70.0 * extent) as u32).max(640);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, 420 + label_area)).into_drawing_area();
        tryp!(root.fill(&WHITE), WHAT);
        let (m, u) = (report.metric.name(), report.metric.unit());
        let mut chart = tryp!(
            ChartBuilder::on(&root)
                .caption(
                    format!("{m} ({u}): mean and 95% CI, the 2021 report beside it"),
                    ("sans-serif", 18)
                )
                .margin(12)
                .x_label_area_size(label_area)
                .y_label_area_size(70)
                .build_cartesian_2d(-0.2..extent + 0.2, 0.0..top(cells).max(1.0)),
            WHAT
        );
        tryp!(
            chart
                .configure_mesh()
                .disable_x_mesh()
                .y_desc(format!("{m} ({u})"))
                .x_labels(0)
                .y_max_light_lines(1)
                .draw(),
            WHAT
        );
        draw_labels(&root, &chart, &slots, &columns, &groups, label_area)?;
        draw_bars(&mut chart, cells, &slots)?;
        draw_whiskers(&mut chart, cells, &slots)?;
        draw_markers(&mut chart, cells, &slots)?;
        tryp!(
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperLeft)
                .draw(),
            WHAT
        );
        tryp!(root.present(), WHAT);
    }
    Ok(svg)
}

/// Column names rotated under each pair of bars (anchored at their start:
/// plotters centres rotated axis labels on the tick) and each group's
/// name under its columns.
fn draw_labels(
    root: &DrawingArea<SVGBackend, Shift>,
    chart: &Chart,
    slots: &[Slot],
    columns: &[String],
    groups: &[Group],
    label_area: u32,
) -> Result<(), PlotError> {
    let rotated = TextStyle::from(
        ("sans-serif", 12)
            .into_font()
            .transform(FontTransform::Rotate90),
    )
    .pos(Pos::new(HPos::Left, VPos::Center));
    for (s, text) in slots.iter().zip(columns) {
        let (x, y) = chart.backend_coord(&(s.x, 0.0));
        tryp!(
            root.draw(&Text::new(text.clone(), (x, y + 8), rotated.clone())),
            WHAT
        );
    }
    let centred = TextStyle::from(("sans-serif", 14)).pos(Pos::new(HPos::Center, VPos::Top));
    for g in groups {
        let (x, y) = chart.backend_coord(&((g.from + g.to) / 2.0, 0.0));
        let y = y + label_area as i32 - 28;
        tryp!(
            root.draw(&Text::new(g.label.clone(), (x, y), centred.clone())),
            WHAT
        );
        let (x0, _) = chart.backend_coord(&(g.from + 0.05, 0.0));
        let (x1, _) = chart.backend_coord(&(g.to - 0.05, 0.0));
        tryp!(
            root.draw(&PathElement::new(vec![(x0, y - 4), (x1, y - 4)], BLACK)),
            WHAT
        );
    }
    Ok(())
}

fn bar(x0: f64, x1: f64, y: f64, style: ShapeStyle) -> Rectangle<(f64, f64)> {
    let mut r = Rectangle::new([(x0, 0.0), (x1, y)], style);
    r.set_margin(0, 0, 0, 0);
    r
}

/// Measured (blue) or estimated (orange) means left of each slot's
/// centre, the 2021 figure (green) right of it.
fn draw_bars(chart: &mut Chart, cells: &[CellStats], slots: &[Slot]) -> Result<(), PlotError> {
    for (estimated, colour, label) in [
        (false, BLUE.mix(0.45), "measured mean"),
        (true, ESTIMATE.mix(0.6), "estimate (early stop)"),
    ] {
        if !cells.iter().any(|c| c.key.estimated == estimated) {
            continue;
        }
        let means = slots.iter().filter_map(|s| {
            let c = &cells[s.cell];
            let mean = c.summary.as_ref()?.mean;
            (c.key.estimated == estimated)
                .then(|| bar(s.x - 0.42, s.x - 0.02, mean, colour.filled()))
        });
        tryp!(chart.draw_series(means), WHAT)
            .label(label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
    }
    let reported = slots.iter().filter_map(|s| {
        let v = cells[s.cell].reported.as_ref()?.value;
        Some(bar(s.x + 0.02, s.x + 0.42, v, REPORTED.mix(0.55).filled()))
    });
    tryp!(chart.draw_series(reported), WHAT)
        .label("2021 report")
        .legend(|(x, y)| {
            Rectangle::new([(x, y - 5), (x + 12, y + 5)], REPORTED.mix(0.55).filled())
        });
    Ok(())
}

/// The mean's 95% CI (or one estimate's prediction interval) over each
/// measured bar: a data-space line with caps.
fn draw_whiskers(chart: &mut Chart, cells: &[CellStats], slots: &[Slot]) -> Result<(), PlotError> {
    let intervals: Vec<(f64, f64, f64)> = slots
        .iter()
        .filter_map(|s| {
            let c = &cells[s.cell];
            let i = c.summary.as_ref()?.ci95.or(c.prediction)?;
            Some((s.x - 0.22, i.lo, i.hi))
        })
        .collect();
    let style = BLACK.stroke_width(1);
    let caps = intervals.iter().flat_map(|&(x, lo, hi)| {
        [lo, hi].map(|y| EmptyElement::at((x, y)) + PathElement::new(vec![(-5, 0), (5, 0)], style))
    });
    tryp!(chart.draw_series(caps), WHAT);
    let label = if cells.iter().any(|c| c.prediction.is_some()) {
        "95% CI (estimate: 95% PI)"
    } else {
        "95% CI"
    };
    let bodies = intervals
        .iter()
        .map(|&(x, lo, hi)| PathElement::new(vec![(x, lo), (x, hi)], style));
    tryp!(chart.draw_series(bodies), WHAT)
        .label(label)
        .legend(|(x, y)| PathElement::new(vec![(x + 6, y - 6), (x + 6, y + 6)], BLACK));
    Ok(())
}

/// The model's value as a red cross over each measured bar.
fn draw_markers(chart: &mut Chart, cells: &[CellStats], slots: &[Slot]) -> Result<(), PlotError> {
    let crosses = slots.iter().map(|s| {
        Cross::new(
            (s.x - 0.22, cells[s.cell].model.value),
            6,
            RED.stroke_width(2),
        )
    });
    tryp!(chart.draw_series(crosses), WHAT)
        .label("model")
        .legend(|(x, y)| Cross::new((x + 6, y), 5, RED.stroke_width(2)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cells::tests_support::row;
    use crate::Metric;

    #[test]
    fn groups_follow_the_reported_table() {
        let mut rows = Vec::new();
        for (variant, vol, src) in [
            (Variant::Fix, 2u64 << 40, "debian-6.1"),
            (Variant::NoFix, 2 << 40, "debian-6.1"),
            (Variant::NoFix, 2 << 40, "debian-5.10"),
            (Variant::NoFix, 3 << 40, "debian-6.1"),
        ] {
            let mut r = row(src, 100.0);
            (r.axes.variant, r.axes.volume.0) = (variant, vol);
            rows.push(r);
        }
        let cells = crate::cells::aggregate(&rows, Metric::LazyinitS);
        let (slots, groups, extent) = layout(&cells);
        let names: Vec<&str> = groups.iter().map(|g| g.label.as_str()).collect();
        assert_eq!(
            names,
            ["2TiB without fix", "2TiB with fix", "3TiB without fix"]
        );
        // Two kernels in the first group, one in each other.
        assert_eq!((groups[0].from, groups[0].to), (0.0, 2.0));
        assert_eq!((groups[1].from, groups[1].to), (2.0 + GAP, 3.0 + GAP));
        assert_eq!(slots.len(), 4);
        assert!((extent - (4.0 + 2.0 * GAP)).abs() < 1e-9);
        let first = &cells[slots[0].cell].key;
        assert_eq!(
            (first.axes.source.to_string().as_str(), first.axes.variant),
            ("debian-5.10", Variant::NoFix)
        );
    }
}
