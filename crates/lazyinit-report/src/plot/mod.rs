//! SVG plots with plotters, each a function returning the SVG text (the
//! site inlines it; `report --svg` writes it to a file):
//! [`bars`] (cells grouped as the reported table, 2021 beside each bar),
//! [`cycles`] (per-group cycle time, a panel per arch x variant x size),
//! [`trend`] (one series over runs) and [`sparkline`].

use std::path::Path;

mod bars;
mod cycles;
pub mod shape;
mod trend;

pub use bars::bars_svg;
pub use cycles::cycles_svg;
pub use trend::{sparkline, trend, TrendPoint};

/// The plots of a report: what `report --svg` writes and `run` keeps
/// beside its `results.csv`.
pub struct Plots {
    /// The cells' bars ([`bars_svg`]).
    pub bars: String,
    /// The per-group cycle times ([`cycles_svg`]) and how many runs they
    /// show; `None` when no run has its `groups.csv` beside it.
    pub cycles: Option<(String, usize)>,
    /// Runs whose `groups.csv` could not be read, one line each.
    pub warnings: Vec<String>,
}

/// Draws the plots of `report` from the rows it was built of.
pub fn plots(
    report: &crate::Report,
    loaded: &[crate::input::LoadedRow],
) -> Result<Plots, PlotError> {
    let bars = bars_svg(report)?;
    let (series, warnings) = crate::input::load_cycles(loaded);
    let cycles = match series.is_empty() {
        true => None,
        false => Some((cycles_svg(&series)?, series.len())),
    };
    Ok(Plots {
        bars,
        cycles,
        warnings,
    })
}

/// Estimated values: never the measured blue.
pub(crate) const ESTIMATE: plotters::style::RGBColor = plotters::style::RGBColor(230, 130, 0);

#[derive(Debug, thiserror::Error)]
#[error("cannot draw the plot {what}: {message}")]
pub struct PlotError {
    /// The file or plot being drawn.
    pub what: String,
    pub message: String,
}

/// `?` for plotters' many error types, naming the plot being drawn.
macro_rules! tryp {
    ($e:expr, $what:expr) => {
        $e.map_err(|e| $crate::plot::PlotError {
            what: $what.to_string(),
            message: e.to_string(),
        })?
    };
}
pub(crate) use tryp;

fn write(path: &Path, svg: &str) -> Result<(), PlotError> {
    std::fs::write(path, svg).map_err(|e| PlotError {
        what: path.display().to_string(),
        message: e.to_string(),
    })
}

/// [`bars_svg`] into a file.
pub fn bars(report: &crate::Report, path: &Path) -> Result<(), PlotError> {
    write(path, &bars_svg(report)?)
}

/// [`cycles_svg`] into a file.
pub fn cycles(series: &[crate::input::Cycles], path: &Path) -> Result<(), PlotError> {
    write(path, &cycles_svg(series)?)
}
