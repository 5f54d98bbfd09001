//! Pure helpers that shape data for the plots: quantiles for a robust
//! axis, a running median, the spikes that stand out from it.

/// The q-quantile (0..=1) of sorted values, linearly interpolated.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let pos = q.clamp(0.0, 1.0) * last as f64;
    let (i, frac) = (pos.floor() as usize, pos.fract());
    let next = sorted[(i + 1).min(last)];
    Some(sorted[i] + (next - sorted[i]) * frac)
}

/// An axis range that fits the bulk of the values (the 0.5% and 99.5%
/// quantiles, padded by a tenth) and every value in `keep` (reference
/// lines): a few spikes must not set the scale.
pub fn robust_range(values: &[f64], keep: &[f64]) -> (f64, f64) {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let lo = quantile(&v, 0.005).into_iter().chain(keep.iter().copied());
    let hi = quantile(&v, 0.995).into_iter().chain(keep.iter().copied());
    let (lo, hi) = (
        lo.fold(f64::INFINITY, f64::min),
        hi.fold(f64::NEG_INFINITY, f64::max),
    );
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.1).max(hi.abs() * 0.02).max(1e-9);
    ((lo - pad).max(0.0), hi + pad)
}

/// The median of each run of `width` consecutive values, at the run's
/// middle index: a running median sampled once per window, so a plot
/// of 24,576 groups stays a few hundred points.
pub fn window_medians(values: &[f64], width: usize) -> Vec<(f64, f64)> {
    let width = width.max(1);
    values
        .chunks(width)
        .enumerate()
        .map(|(i, chunk)| {
            let mut c = chunk.to_vec();
            c.sort_by(f64::total_cmp);
            let mid = (i * width) as f64 + (chunk.len() as f64 - 1.0) / 2.0;
            (mid, quantile(&c, 0.5).unwrap_or(f64::NAN))
        })
        .collect()
}

/// Values more than `factor` times their window's median: the spikes
/// (index, value), drawn as marks rather than joined into the line.
pub fn spikes(values: &[f64], width: usize, factor: f64) -> Vec<(usize, f64)> {
    let width = width.max(1);
    let medians = window_medians(values, width);
    values
        .iter()
        .enumerate()
        .filter(|&(i, &v)| v > medians[i / width].1 * factor)
        .map(|(i, &v)| (i, v))
        .collect()
}

/// The window that leaves about `points` medians per series.
pub fn window_for(len: usize, points: usize) -> usize {
    len.div_ceil(points.max(1)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&v, 0.5), Some(2.5));
        assert_eq!(quantile(&v, 0.0), Some(1.0));
        assert_eq!(quantile(&v, 1.0), Some(4.0));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn a_few_spikes_do_not_set_the_range() {
        let mut v = vec![40.0; 2000];
        v.extend([900.0, 850.0, 600.0]);
        let (lo, hi) = robust_range(&v, &[50.0]);
        assert!(hi < 60.0 && lo > 30.0, "{lo}..{hi}");
        // A reference line outside the bulk is kept in view.
        assert!(robust_range(&v, &[80.0]).1 > 80.0);
        assert_eq!(robust_range(&[], &[]), (0.0, 1.0));
    }

    #[test]
    fn medians_per_window_and_spikes_above_them() {
        let mut v = vec![10.0; 10];
        v[3] = 95.0;
        let m = window_medians(&v, 4);
        assert_eq!(m, vec![(1.5, 10.0), (5.5, 10.0), (8.5, 10.0)]);
        assert_eq!(spikes(&v, 4, 1.5), vec![(3, 95.0)]);
        assert_eq!(window_for(24_576, 300), 82);
        assert_eq!(window_for(0, 300), 1);
    }
}
