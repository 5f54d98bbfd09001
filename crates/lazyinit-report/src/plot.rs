//! SVG plots with plotters: per-cell bars with 95% intervals and the
//! model's and the 2021 report's values as markers; per-group cycle time
//! over a run from the raw trace timestamps.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::input::Cycles;
use crate::render::Labeller;
use crate::report::Report;

/// Estimated cells' bars: never the measured blue.
const ESTIMATE: RGBColor = RGBColor(230, 130, 0);

#[derive(Debug, thiserror::Error)]
#[error("cannot draw the plot {path}: {message}")]
pub struct PlotError {
    pub path: String,
    pub message: String,
}

/// `?` for plotters' many error types, naming the file being drawn.
macro_rules! tryp {
    ($e:expr, $path:expr) => {
        $e.map_err(|e| PlotError {
            path: $path.display().to_string(),
            message: e.to_string(),
        })?
    };
}

/// Bars of the cells' means with CI whiskers (orange bars with their
/// prediction interval for estimates); crosses for the model and circles
/// for the 2021 figures.
pub fn bars(report: &Report, path: &Path) -> Result<(), PlotError> {
    write(path, bars_svg(report, path)?)
}

/// [`bars`] as SVG text (the CLI writes it through `lazyinit_core::output`);
/// `path` only names it in errors.
pub fn bars_svg(report: &Report, path: &Path) -> Result<String, PlotError> {
    let mut svg = String::new();
    draw_bars(report, path, &mut svg)?;
    Ok(svg)
}

fn write(path: &Path, svg: String) -> Result<(), PlotError> {
    std::fs::write(path, svg).map_err(|e| PlotError {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

fn draw_bars(report: &Report, path: &Path, svg: &mut String) -> Result<(), PlotError> {
    let lab = Labeller::new(report.cells.iter().map(|c| &c.key));
    let cells = &report.cells;
    let n = cells.len().max(1) as i32;
    let top = cells
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
        * 1.1;
    let labels: Vec<String> = cells.iter().map(|c| lab.cell(&c.key)).collect();
    // Room below the axis for the longest rotated label (~7 px a character).
    let label_area = 30 + 7 * labels.iter().map(|l| l.chars().count()).max().unwrap_or(10) as u32;
    let width = (160 + 90 * n as u32).max(640);
    let root = SVGBackend::with_string(svg, (width, 400 + label_area)).into_drawing_area();
    tryp!(root.fill(&WHITE), path);
    let mut chart = tryp!(
        ChartBuilder::on(&root)
            .caption(
                format!(
                    "{} ({}): mean and 95% CI",
                    report.metric.name(),
                    report.metric.unit()
                ),
                ("sans-serif", 18)
            )
            .margin(12)
            .x_label_area_size(label_area)
            .y_label_area_size(70)
            // Cell i is centred on x = i; a float axis keeps one cell as
            // well-formed as many (plotters' segmented integer axis is not).
            .build_cartesian_2d(-0.5..n as f64 - 0.5, 0.0..top.max(1.0)),
        path
    );
    tryp!(
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_desc(format!(
                "{} ({})",
                report.metric.name(),
                report.metric.unit()
            ))
            .x_labels(0)
            .y_max_light_lines(1)
            .draw(),
        path
    );
    let at = |i: usize| i as f64;
    // Cell names hang below the axis, rotated. plotters centres rotated
    // axis labels on the tick (they would cross the bars), so they are
    // drawn here, anchored at their start.
    let label_style = TextStyle::from(
        ("sans-serif", 12)
            .into_font()
            .transform(FontTransform::Rotate90),
    )
    .pos(Pos::new(HPos::Left, VPos::Center));
    for (i, text) in labels.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(at(i), 0.0));
        tryp!(
            root.draw(&Text::new(text.clone(), (x, y + 8), label_style.clone())),
            path
        );
    }
    let with_summary = || {
        cells
            .iter()
            .enumerate()
            .filter_map(|(i, c)| Some((i, c.summary.as_ref()?)))
    };
    // The whisker: the mean's 95% CI, or one estimate's prediction interval.
    let whisker = |i: usize, s: &crate::stats::Summary| s.ci95.or(cells[i].prediction);
    for (estimated, colour, label) in [
        (false, BLUE.mix(0.45), "measured mean"),
        (true, ESTIMATE.mix(0.6), "estimate (early stop)"),
    ] {
        if !cells.iter().any(|c| c.key.estimated == estimated) {
            continue;
        }
        tryp!(
            chart.draw_series(
                with_summary()
                    .filter(|(i, _)| cells[*i].key.estimated == estimated)
                    .map(|(i, s)| {
                        let mut r = Rectangle::new(
                            [(at(i) - 0.35, 0.0), (at(i) + 0.35, s.mean)],
                            colour.filled(),
                        );
                        r.set_margin(0, 0, 0, 0);
                        r
                    })
            ),
            path
        )
        .label(label)
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
    }
    tryp!(
        chart.draw_series(with_summary().filter_map(|(i, s)| {
            let ci = whisker(i, s)?;
            let style = BLACK.stroke_width(1);
            Some(EmptyElement::at((at(i), ci.lo)) + PathElement::new(vec![(-6, 0), (6, 0)], style))
        })),
        path
    );
    // Whisker bodies as data-space lines so they scale with the axis.
    tryp!(
        chart.draw_series(with_summary().filter_map(|(i, s)| {
            let ci = whisker(i, s)?;
            Some(PathElement::new(
                vec![(at(i), ci.lo), (at(i), ci.hi)],
                BLACK.stroke_width(1),
            ))
        })),
        path
    )
    .label(if cells.iter().any(|c| c.prediction.is_some()) {
        "95% CI (estimate: 95% PI)"
    } else {
        "95% CI"
    })
    .legend(|(x, y)| PathElement::new(vec![(x + 6, y - 6), (x + 6, y + 6)], BLACK));
    tryp!(
        chart.draw_series(with_summary().filter_map(|(i, s)| {
            let ci = whisker(i, s)?;
            Some(
                EmptyElement::at((at(i), ci.hi))
                    + PathElement::new(vec![(-6, 0), (6, 0)], BLACK.stroke_width(1)),
            )
        })),
        path
    );
    tryp!(
        chart.draw_series(cells.iter().enumerate().map(|(i, c)| Cross::new(
            (at(i), c.model.value),
            6,
            RED.stroke_width(2)
        ))),
        path
    )
    .label("model")
    .legend(|(x, y)| Cross::new((x + 6, y), 5, RED.stroke_width(2)));
    tryp!(
        chart.draw_series(
            cells
                .iter()
                .enumerate()
                .filter_map(|(i, c)| Some(Circle::new(
                    (at(i), c.reported.as_ref()?.value),
                    6,
                    GREEN.stroke_width(2)
                )))
        ),
        path
    )
    .label("2021 report")
    .legend(|(x, y)| Circle::new((x + 6, y), 5, GREEN.stroke_width(2)));
    tryp!(
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw(),
        path
    );
    tryp!(root.present(), path);
    Ok(())
}

/// Cycle time of every group over each run (one line per run).
pub fn cycles(series: &[Cycles], path: &Path) -> Result<(), PlotError> {
    write(path, cycles_svg(series, path)?)
}

/// [`cycles`] as SVG text; `path` only names it in errors.
pub fn cycles_svg(series: &[Cycles], path: &Path) -> Result<String, PlotError> {
    let mut svg = String::new();
    draw_cycles(series, path, &mut svg)?;
    Ok(svg)
}

fn draw_cycles(series: &[Cycles], path: &Path, svg: &mut String) -> Result<(), PlotError> {
    let groups = series.iter().map(|s| s.ms.len()).max().unwrap_or(1).max(1);
    let top = series
        .iter()
        .flat_map(|s| s.ms.iter().copied())
        .fold(0.0f64, f64::max)
        * 1.1;
    // The legend gets its own strip below the chart: inside, it hid lines
    // wherever it went. With dozens of runs, only the first few are named.
    const LEGEND_MAX: usize = 12;
    const ROW: i32 = 18;
    let legend_rows = series.len().min(LEGEND_MAX) as u32;
    let root = SVGBackend::with_string(svg, (1000, 480 + 16 + legend_rows * ROW as u32))
        .into_drawing_area();
    tryp!(root.fill(&WHITE), path);
    let (plot_area, legend_area) = root.split_vertically(480);
    let mut chart = tryp!(
        ChartBuilder::on(&plot_area)
            .caption(
                "cycle time per block group (trace timestamps)",
                ("sans-serif", 18)
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0..groups, 0.0..top.max(1.0)),
        path
    );
    tryp!(
        chart
            .configure_mesh()
            .x_desc("group (trace order)")
            .y_desc("ms since previous group")
            .draw(),
        path
    );
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        tryp!(
            chart.draw_series(LineSeries::new(
                s.ms.iter().enumerate().map(|(g, &ms)| (g + 1, ms)),
                color.stroke_width(1)
            )),
            path
        );
        if i < LEGEND_MAX {
            let y = 8 + i as i32 * ROW;
            let line = PathElement::new(vec![(72, y), (96, y)], color.stroke_width(2));
            tryp!(legend_area.draw(&line), path);
            let text = Text::new(
                s.cell_id.clone(),
                (104, y),
                TextStyle::from(("sans-serif", 12)).pos(Pos::new(HPos::Left, VPos::Center)),
            );
            tryp!(legend_area.draw(&text), path);
        }
    }
    tryp!(root.present(), path);
    Ok(())
}
