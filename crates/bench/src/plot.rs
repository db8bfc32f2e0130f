//! A small SVG bar chart writer for the benchmarks' plots, with no dependencies.
//!
//! A [`BarChart`] is groups along the x axis (workloads, say), each with values per
//! series (phases, engines); the series sit side by side in a group, or stacked into one
//! bar. The y axis is linear from zero, or logarithmic by decades. [`BarChart::to_svg`]
//! returns a standalone SVG document: axes, ticks and grid lines, one `<rect>` per
//! drawn bar segment (each with a `<title>` giving its exact value), the group labels
//! and a legend in the order the series first appear.
//!
//! Invariants: every number written is finite (a NaN, infinite or negative value is
//! drawn as nothing, and on a log axis so is zero); every text is XML-escaped.

use std::fmt::Write as _;

/// A bar chart (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    /// Each group's label and its values per series.
    pub groups: Vec<(String, Vec<(String, f64)>)>,
    /// Stack a group's series into one bar instead of one bar per series.
    pub stacked: bool,
    /// A logarithmic y axis (decades).
    pub log: bool,
}

/// Colours of the series, in order (colour-blind safe: Okabe and Ito).
const PALETTE: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442", "#000000",
];

const PLOT_HEIGHT: f64 = 320.0;
const MARGIN_LEFT: f64 = 80.0;
const MARGIN_TOP: f64 = 50.0;
const MARGIN_RIGHT: f64 = 170.0;
/// Room below the plot for slanted group labels.
const MARGIN_BOTTOM: f64 = 120.0;
const BAR_WIDTH: f64 = 18.0;
const GROUP_GAP: f64 = 16.0;

impl BarChart {
    /// The series in the order they first appear.
    pub fn series(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for (_, values) in &self.groups {
            for (s, _) in values {
                if !names.contains(&s.as_str()) {
                    names.push(s);
                }
            }
        }
        names
    }

    /// The SVG document.
    pub fn to_svg(&self) -> String {
        let series = self.series();
        let bars_per_group = if self.stacked { 1 } else { series.len().max(1) };
        let group_width = bars_per_group as f64 * BAR_WIDTH + GROUP_GAP;
        let plot_width = (self.groups.len().max(1) as f64 * group_width).max(200.0);
        // Wide enough for the title too (about 9 px per character at 15 px bold).
        let title_width = MARGIN_LEFT + 9.0 * self.title.chars().count() as f64 + 20.0;
        let width = (MARGIN_LEFT + plot_width + MARGIN_RIGHT).max(title_width);
        let height = MARGIN_TOP + PLOT_HEIGHT + MARGIN_BOTTOM;
        let axis = Axis::new(self.extent(), self.log);

        let mut svg = self.header(width, height);
        self.write_axes(&mut svg, &axis, plot_width);
        for (g, (label, values)) in self.groups.iter().enumerate() {
            let x0 = MARGIN_LEFT + g as f64 * group_width + GROUP_GAP / 2.0;
            let mut stack_base = 0.0;
            for (s, value) in values {
                let Some(idx) = series.iter().position(|n| n == s) else {
                    continue;
                };
                if !value.is_finite() || *value < 0.0 {
                    continue;
                }
                let (x, low, high) = if self.stacked {
                    let low = stack_base;
                    stack_base += value;
                    (x0, low, stack_base)
                } else {
                    (x0 + idx as f64 * BAR_WIDTH, 0.0, *value)
                };
                let (Some(y_high), y_low) = (axis.y(high), axis.y(low)) else {
                    continue;
                };
                // On a log axis a stack's first segment starts at the axis floor.
                let y_low = y_low.unwrap_or(MARGIN_TOP + PLOT_HEIGHT);
                let h = (y_low - y_high).max(0.0);
                let _ = writeln!(
                    svg,
                    r#"<rect x="{x:.1}" y="{y_high:.1}" width="{:.1}" height="{h:.1}" fill="{}"><title>{}: {}: {}</title></rect>"#,
                    BAR_WIDTH - 2.0,
                    PALETTE[idx % PALETTE.len()],
                    escape(label),
                    escape(s),
                    format_value(*value)
                );
            }
            let lx = x0 + bars_per_group as f64 * BAR_WIDTH / 2.0;
            let ly = MARGIN_TOP + PLOT_HEIGHT + 14.0;
            let _ = writeln!(
                svg,
                r#"<text x="{lx:.1}" y="{ly:.1}" text-anchor="end" transform="rotate(-40 {lx:.1} {ly:.1})">{}</text>"#,
                escape(label)
            );
        }
        self.write_legend(&mut svg, &series, MARGIN_LEFT + plot_width + 20.0);
        svg.push_str("</svg>\n");
        svg
    }

    /// The document's opening: the `<svg>` element, a white background and the title.
    fn header(&self, width: f64, height: f64) -> String {
        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(
            svg,
            r#"<rect x="0" y="0" width="{width:.0}" height="{height:.0}" fill="white"/>"#
        );
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="24" font-size="15" font-weight="bold">{}</text>"#,
            MARGIN_LEFT,
            escape(&self.title)
        );
        svg
    }

    /// The smallest positive and the largest value the axis must show.
    fn extent(&self) -> (f64, f64) {
        let mut min_positive = f64::INFINITY;
        let mut max = 0.0f64;
        for (_, values) in &self.groups {
            let mut sum = 0.0;
            for (_, v) in values {
                if !v.is_finite() || *v < 0.0 {
                    continue;
                }
                if *v > 0.0 {
                    min_positive = min_positive.min(*v);
                }
                sum += v;
                max = max.max(if self.stacked { sum } else { *v });
            }
        }
        (min_positive, max)
    }

    fn write_axes(&self, svg: &mut String, axis: &Axis, plot_width: f64) {
        let bottom = MARGIN_TOP + PLOT_HEIGHT;
        for tick in &axis.ticks {
            let Some(y) = axis.y(*tick) else { continue };
            let _ = writeln!(
                svg,
                r##"<line x1="{MARGIN_LEFT:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#dddddd"/>"##,
                MARGIN_LEFT + plot_width
            );
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                MARGIN_LEFT - 6.0,
                y + 4.0,
                format_value(*tick)
            );
        }
        let _ = writeln!(
            svg,
            r##"<line x1="{MARGIN_LEFT:.1}" y1="{MARGIN_TOP:.1}" x2="{MARGIN_LEFT:.1}" y2="{bottom:.1}" stroke="#000000"/>"##
        );
        let _ = writeln!(
            svg,
            r##"<line x1="{MARGIN_LEFT:.1}" y1="{bottom:.1}" x2="{:.1}" y2="{bottom:.1}" stroke="#000000"/>"##,
            MARGIN_LEFT + plot_width
        );
        let (lx, ly) = (20.0, MARGIN_TOP + PLOT_HEIGHT / 2.0);
        let scale = if self.log { " (log scale)" } else { "" };
        let _ = writeln!(
            svg,
            r#"<text x="{lx:.1}" y="{ly:.1}" text-anchor="middle" transform="rotate(-90 {lx:.1} {ly:.1})">{}{scale}</text>"#,
            escape(&self.y_label)
        );
    }

    fn write_legend(&self, svg: &mut String, series: &[&str], x: f64) {
        for (i, s) in series.iter().enumerate() {
            let y = MARGIN_TOP + i as f64 * 20.0;
            let _ = writeln!(
                svg,
                r#"<rect x="{x:.1}" y="{y:.1}" width="12" height="12" fill="{}"/>"#,
                PALETTE[i % PALETTE.len()]
            );
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
                x + 18.0,
                y + 10.0,
                escape(s)
            );
        }
    }
}

/// The y axis: value → pixel, and its ticks.
struct Axis {
    log: bool,
    /// Linear: the top value. Log: the bottom and top decades' exponents.
    top: f64,
    bottom_exp: f64,
    ticks: Vec<f64>,
}

impl Axis {
    fn new((min_positive, max): (f64, f64), log: bool) -> Axis {
        if log {
            let (lo, hi) = if max > 0.0 && min_positive.is_finite() {
                (min_positive.log10().floor(), max.log10().ceil())
            } else {
                (0.0, 1.0)
            };
            let hi = if hi <= lo { lo + 1.0 } else { hi };
            let ticks = (lo as i32..=hi as i32).map(|e| 10f64.powi(e)).collect();
            return Axis {
                log,
                top: hi,
                bottom_exp: lo,
                ticks,
            };
        }
        let step = nice_step(if max > 0.0 { max } else { 1.0 } / 5.0);
        let top = (if max > 0.0 { max } else { 1.0 } / step).ceil() * step;
        let n = (top / step).round() as usize;
        let ticks = (0..=n).map(|i| i as f64 * step).collect();
        Axis {
            log,
            top,
            bottom_exp: 0.0,
            ticks,
        }
    }

    /// The pixel row of `value`, or `None` when it cannot be drawn (not finite, or not
    /// positive on a log axis).
    fn y(&self, value: f64) -> Option<f64> {
        if !value.is_finite() || value < 0.0 {
            return None;
        }
        let share = if self.log {
            if value <= 0.0 {
                return None;
            }
            (value.log10() - self.bottom_exp) / (self.top - self.bottom_exp)
        } else {
            value / self.top
        };
        let y = MARGIN_TOP + PLOT_HEIGHT * (1.0 - share.clamp(0.0, 1.0));
        y.is_finite().then_some(y)
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let magnitude = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * magnitude >= raw {
            return m * magnitude;
        }
    }
    10.0 * magnitude
}

/// A value in at most four significant figures, without exponents.
fn format_value(v: f64) -> String {
    if v == 0.0 {
        return "0".to_string();
    }
    let digits = (3 - v.abs().log10().floor() as i32).clamp(0, 6) as usize;
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks that every tag is closed in order and returns the element names in
    /// document order: a small well-formedness check, enough for what we write.
    fn elements(svg: &str) -> Vec<String> {
        let mut open: Vec<String> = Vec::new();
        let mut names = Vec::new();
        let mut rest = svg;
        while let Some(start) = rest.find('<') {
            let end = rest[start..].find('>').expect("every tag ends") + start;
            let tag = &rest[start + 1..end];
            assert!(!tag.contains('<'), "a '<' inside a tag: {tag}");
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(open.pop().as_deref(), Some(name), "closing {name}");
            } else {
                let name = tag
                    .split_whitespace()
                    .next()
                    .expect("a tag name")
                    .to_string();
                names.push(name.trim_end_matches('/').to_string());
                if !tag.ends_with('/') {
                    open.push(name);
                }
            }
            rest = &rest[end + 1..];
        }
        assert!(open.is_empty(), "unclosed: {open:?}");
        names
    }

    /// The `attr` values of the `<rect>`s that carry a `<title>` (the bars).
    fn bar_attr(svg: &str, attr: &str) -> Vec<f64> {
        svg.lines()
            .filter(|l| l.starts_with("<rect") && l.contains("<title>"))
            .map(|l| {
                let key = format!(" {attr}=\"");
                let from = l.find(&key).expect("attribute present") + key.len();
                let len = l[from..].find('"').expect("quoted");
                l[from..from + len].parse().expect("a number")
            })
            .collect()
    }

    fn chart(stacked: bool, log: bool) -> BarChart {
        BarChart {
            title: "a <title> & more".to_string(),
            y_label: "ms".to_string(),
            groups: vec![
                (
                    "one".to_string(),
                    vec![("a".to_string(), 1.0), ("b".to_string(), 3.0)],
                ),
                (
                    "two".to_string(),
                    vec![("a".to_string(), 2.0), ("c".to_string(), 100.0)],
                ),
            ],
            stacked,
            log,
        }
    }

    #[test]
    fn documents_are_well_formed_and_escaped() {
        for (stacked, log) in [(false, false), (true, false), (false, true), (true, true)] {
            let svg = chart(stacked, log).to_svg();
            let names = elements(&svg);
            assert_eq!(names[0], "svg");
            assert!(svg.contains("a &lt;title&gt; &amp; more"), "{svg}");
            assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
            // Four bars, three legend swatches, one background.
            assert_eq!(bar_attr(&svg, "height").len(), 4, "{svg}");
            assert_eq!(names.iter().filter(|n| *n == "rect").count(), 4 + 3 + 1);
        }
    }

    #[test]
    fn bar_heights_scale_with_values() {
        let svg = chart(false, false).to_svg();
        let h = bar_attr(&svg, "height");
        // Values 1, 3, 2, 100 on one linear axis.
        assert!((h[1] / h[0] - 3.0).abs() < 0.05, "{h:?}");
        assert!((h[2] / h[0] - 2.0).abs() < 0.05, "{h:?}");
        assert!((h[3] / h[0] - 100.0).abs() < 2.0, "{h:?}");

        // Stacked: a group's segments add up to the bar of its sum, on top of each other.
        let svg = chart(true, false).to_svg();
        let h = bar_attr(&svg, "height");
        let y = bar_attr(&svg, "y");
        assert!((h[1] / h[0] - 3.0).abs() < 0.05, "{h:?}");
        assert!((y[0] - (y[1] + h[1])).abs() < 0.2, "{y:?} {h:?}");

        // Log: equal ratios, equal steps (1 → 2 and 100 → 200 would match; here 1 → 100
        // is two decades, 1 → 2 is log10(2) of one).
        let svg = chart(false, true).to_svg();
        let h = bar_attr(&svg, "height");
        let decade = (h[3] - h[0]) / 2.0;
        assert!(
            ((h[2] - h[0]) / decade - 2f64.log10()).abs() < 0.01,
            "{h:?}"
        );
    }

    #[test]
    fn unusable_values_draw_nothing() {
        let c = BarChart {
            title: "t".to_string(),
            y_label: "y".to_string(),
            groups: vec![(
                "g".to_string(),
                vec![
                    ("not a number".to_string(), f64::NAN),
                    ("unbounded".to_string(), f64::INFINITY),
                    ("neg".to_string(), -1.0),
                    ("zero".to_string(), 0.0),
                ],
            )],
            stacked: false,
            log: true,
        };
        let svg = c.to_svg();
        elements(&svg);
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        assert!(bar_attr(&svg, "height").is_empty(), "{svg}");
        // An empty chart is still a document.
        elements(&BarChart::default().to_svg());
    }

    #[test]
    fn values_print_short() {
        assert_eq!(format_value(0.0), "0");
        assert_eq!(format_value(1234.5), "1234");
        assert_eq!(format_value(2.5), "2.5");
        assert_eq!(format_value(0.001), "0.001");
        assert_eq!(nice_step(0.3), 0.5);
        assert_eq!(nice_step(12.0), 20.0);
    }
}
