//! Per-group cycle time as small multiples: a panel per arch x variant x
//! size (rows: arch and environment; columns: the reported table's rows),
//! the repetitions overlaid, coloured by kernel. Each run is drawn as a
//! running median with its spikes as marks, on an axis fitted to the
//! cycles, with `L + 1` ticks and one crossed tick as reference lines.

use std::collections::{BTreeMap, BTreeSet};

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::shape::{robust_range, spikes, window_for, window_medians};
use super::{tryp, PlotError};
use crate::cells::CellKey;
use crate::input::Cycles;
use lazyinit_core::Variant;

const WHAT: &str = "cycles";
/// Medians drawn per run: smooth at a panel's width.
const POINTS: usize = 200;
/// A cycle this many times its window's median is a spike.
const SPIKE: f64 = 1.5;
const PANEL: (u32, u32) = (330, 250);
const LEGEND_H: u32 = 64;

/// A panel's key: the cell without its kernel (kernels are overlaid).
fn panel_key(k: &CellKey) -> CellKey {
    let mut k = k.clone();
    k.axes.source = "".into();
    k
}

/// Columns in the reported table's row order: by volume, no fix first.
fn column_of(k: &CellKey) -> (u64, bool) {
    (k.axes.volume.0, k.axes.variant == Variant::Fix)
}

/// Rows: the panel key without volume and variant.
fn row_of(k: &CellKey) -> CellKey {
    let mut k = panel_key(k);
    k.axes.volume = lazyinit_core::ByteSize(0);
    k.axes.variant = Variant::NoFix;
    k
}

/// The small-multiples SVG of every run's cycles.
pub fn cycles_svg(series: &[Cycles]) -> Result<String, PlotError> {
    let cols: BTreeSet<(u64, bool)> = series.iter().map(|s| column_of(&s.key)).collect();
    let rows: BTreeSet<CellKey> = series.iter().map(|s| row_of(&s.key)).collect();
    let kernels: Vec<String> = series
        .iter()
        .map(|s| s.key.axes.source.to_string())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut panels: BTreeMap<CellKey, Vec<&Cycles>> = BTreeMap::new();
    for s in series {
        panels.entry(panel_key(&s.key)).or_default().push(s);
    }
    let (nc, nr) = (cols.len().max(1), rows.len().max(1));
    let size = (PANEL.0 * nc as u32 + 20, PANEL.1 * nr as u32 + LEGEND_H);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        tryp!(root.fill(&WHITE), WHAT);
        let (legend, grid) = root.split_vertically(LEGEND_H);
        draw_legend(&legend, &kernels)?;
        let areas = grid.split_evenly((nr, nc));
        for (ri, row) in rows.iter().enumerate() {
            for (ci, col) in cols.iter().enumerate() {
                let runs = panels
                    .iter()
                    .find(|(k, _)| row_of(k) == *row && column_of(k) == *col)
                    .map(|(_, r)| r.as_slice())
                    .unwrap_or(&[]);
                if !runs.is_empty() {
                    draw_panel(&areas[ri * nc + ci], runs, &kernels)?;
                }
            }
        }
        tryp!(root.present(), WHAT);
    }
    Ok(svg)
}

fn kernel_colour(kernels: &[String], k: &str) -> RGBAColor {
    let i = kernels.iter().position(|x| x == k).unwrap_or(0);
    Palette99::pick(i).to_rgba()
}

fn draw_legend(area: &DrawingArea<SVGBackend, Shift>, kernels: &[String]) -> Result<(), PlotError> {
    let left = TextStyle::from(("sans-serif", 13)).pos(Pos::new(HPos::Left, VPos::Center));
    let title =
        "cycle time per block group (ms, trace timestamps): a panel per cell, repetitions overlaid";
    tryp!(area.draw(&Text::new(title, (12, 12), left.clone())), WHAT);
    let mut x = 12;
    for k in kernels {
        let c = kernel_colour(kernels, k);
        tryp!(
            area.draw(&PathElement::new(
                vec![(x, 34), (x + 22, 34)],
                c.stroke_width(2)
            )),
            WHAT
        );
        tryp!(
            area.draw(&Text::new(k.clone(), (x + 28, 34), left.clone())),
            WHAT
        );
        x += 40 + 8 * k.len() as i32;
    }
    let note = format!(
        "line: running median (a point per 1/{POINTS} of the groups); dots: cycles over {SPIKE}x it; triangles: \
         such cycles above the axis (the title counts them); grey: L+1 ticks, dashed: L+2 (one tick crossed)"
    );
    tryp!(area.draw(&Text::new(note, (12, 54), left)), WHAT);
    Ok(())
}

/// The reference lines of a panel's runs: (ms, label, dashed).
fn references(runs: &[&Cycles]) -> Vec<(f64, String, bool)> {
    let ls: BTreeSet<(u64, u32)> = runs
        .iter()
        .filter_map(|r| Some((r.sleep_ticks?, r.key.axes.hz.get())))
        .collect();
    ls.into_iter()
        .flat_map(|(l, hz)| {
            let tick = 1000.0 / hz as f64;
            [
                (
                    (l + 1) as f64 * tick,
                    format!("L+1 = {} ticks", l + 1),
                    false,
                ),
                ((l + 2) as f64 * tick, "L+2".to_string(), true),
            ]
        })
        .collect()
}

fn panel_title(runs: &[&Cycles], above: usize, top: f64) -> String {
    let k = &runs[0].key;
    let mut t = format!(
        "{} HZ{} {} {}",
        k.axes.arch,
        k.axes.hz,
        k.axes.variant,
        k.volume()
    );
    if k.estimated {
        t.push_str(" estimate");
    }
    if above > 0 {
        t.push_str(&format!(" ({above} > {top:.0} ms)"));
    }
    t
}

// Long: one chart's builder, mesh, reference lines and two series kinds.
fn draw_panel(
    area: &DrawingArea<SVGBackend, Shift>,
    runs: &[&Cycles],
    kernels: &[String],
) -> Result<(), PlotError> {
    let refs = references(runs);
    let groups = runs.iter().map(|r| r.ms.len()).max().unwrap_or(1).max(1);
    let width = window_for(groups, POINTS);
    let lines: Vec<Vec<(f64, f64)>> = runs.iter().map(|r| window_medians(&r.ms, width)).collect();
    // The axis fits the running medians and the reference lines: the
    // spikes are marks, not the scale.
    let medians: Vec<f64> = lines.iter().flatten().map(|p| p.1).collect();
    let keep: Vec<f64> = refs.iter().map(|r| r.0).collect();
    let (lo, hi) = robust_range(&medians, &keep);
    let spiky: Vec<Vec<(usize, f64)>> = runs.iter().map(|r| spikes(&r.ms, width, SPIKE)).collect();
    let above = spiky.iter().flatten().filter(|s| s.1 > hi).count();
    let mut chart = tryp!(
        ChartBuilder::on(area)
            .caption(panel_title(runs, above, hi), ("sans-serif", 13))
            .margin(6)
            .x_label_area_size(22)
            .y_label_area_size(42)
            .build_cartesian_2d(0.0..groups as f64, lo..hi),
        WHAT
    );
    tryp!(
        chart
            .configure_mesh()
            .x_labels(4)
            .y_labels(5)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .max_light_lines(0)
            .label_style(("sans-serif", 10))
            .draw(),
        WHAT
    );
    let grey = RGBColor(110, 110, 110);
    for (y, label, dashed) in &refs {
        let pts = [(0.0, *y), (groups as f64, *y)];
        if *dashed {
            tryp!(
                chart.draw_series(DashedLineSeries::new(pts, 4, 3, grey.stroke_width(1))),
                WHAT
            );
        } else {
            tryp!(
                chart.draw_series(LineSeries::new(pts, grey.stroke_width(1))),
                WHAT
            );
        }
        let style = ("sans-serif", 10)
            .into_font()
            .color(&grey)
            .pos(Pos::new(HPos::Right, VPos::Bottom));
        tryp!(
            chart.draw_series([Text::new(label.clone(), (groups as f64, *y), style)]),
            WHAT
        );
    }
    for ((run, marks), line) in runs.iter().zip(&spiky).zip(lines) {
        let c = kernel_colour(kernels, &run.key.axes.source.to_string());
        tryp!(
            chart.draw_series(LineSeries::new(line, c.stroke_width(1))),
            WHAT
        );
        let (inside, over): (Vec<_>, Vec<_>) = marks.iter().partition(|s| s.1 <= hi);
        tryp!(
            chart.draw_series(inside.iter().map(|&&(g, v)| Circle::new(
                (g as f64, v),
                1,
                c.filled()
            ))),
            WHAT
        );
        // One mark per window with spikes over the axis: hundreds of
        // triangles on one edge would read no better and weigh more.
        let windows: BTreeSet<usize> = over.iter().map(|s| s.0 / width).collect();
        let marks = windows.into_iter().map(|w| {
            let x = ((w * width) as f64 + width as f64 / 2.0).min(groups as f64);
            TriangleMarker::new((x, hi), 3, c.filled())
        });
        tryp!(chart.draw_series(marks), WHAT);
    }
    Ok(())
}
