//! A strict parser of Prometheus' text exposition format 0.0.4, for tests: every line
//! must be a HELP, a TYPE or a sample of the family its TYPE announced, and histograms
//! must be well formed (an `le` on every bucket, cumulative counts, a `+Inf` bucket
//! equal to `_count`). Shared by the e2e tests and `src/metrics`' unit tests.

use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

#[derive(Clone, Debug, Default)]
pub struct Family {
    pub kind: String,
    pub help: String,
    pub samples: Vec<Sample>,
}

#[derive(Clone, Debug, Default)]
pub struct Exposition {
    pub families: BTreeMap<String, Family>,
}

impl Exposition {
    /// The family's TYPE, if it was exposed.
    pub fn kind(&self, family: &str) -> Option<&str> {
        self.families.get(family).map(|f| f.kind.as_str())
    }

    /// Label names of the family's samples, `le` and `quantile` left out.
    pub fn label_names(&self, family: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .families
            .get(family)
            .into_iter()
            .flat_map(|f| &f.samples)
            .flat_map(|s| s.labels.keys())
            .filter(|k| *k != "le" && *k != "quantile")
            .cloned()
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Samples named `name` (a family name, or a histogram's `_bucket`, `_sum`,
    /// `_count`) whose labels include all of `labels`.
    pub fn samples<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.families
            .values()
            .flat_map(|f| &f.samples)
            .filter(move |s| s.name == name)
            .filter(move |s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).is_some_and(|x| x == v))
            })
    }

    /// The sum of the matching samples' values (0 when none match).
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples(name, labels).map(|s| s.value).sum()
    }

    /// The value of the one sample named `name` with no labels.
    pub fn value(&self, name: &str) -> Option<f64> {
        self.samples(name, &[])
            .find(|s| s.labels.is_empty())
            .map(|s| s.value)
    }
}

fn valid_name(name: &str, colons: bool) -> bool {
    let mut chars = name.chars();
    let first = chars.next();
    first.is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || (colons && c == ':'))
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colons && c == ':'))
}

fn parse_value(text: &str) -> Result<f64, String> {
    match text {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => text.parse().map_err(|e| format!("bad value {text:?}: {e}")),
    }
}

/// `{a="x",b="y"}` at the start of `text`: the labels and the rest of the line.
fn parse_labels(text: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let mut rest = text
        .strip_prefix('{')
        .ok_or_else(|| format!("expected {{ in {text:?}"))?;
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let (name, after) = rest
            .split_once("=\"")
            .ok_or_else(|| format!("expected name=\" in {rest:?}"))?;
        if !valid_name(name, false) {
            return Err(format!("bad label name {name:?}"));
        }
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err(format!("unterminated label value in {text:?}")),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    other => return Err(format!("bad escape {other:?} in {text:?}")),
                },
                Some((_, c)) => value.push(c),
            }
        };
        if labels.insert(name.to_owned(), value).is_some() {
            return Err(format!("label {name} twice in {text:?}"));
        }
        rest = &after[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

/// The family a sample named `name` belongs to, given the family last announced.
fn belongs(name: &str, family: &str, kind: &str) -> bool {
    if name == family {
        return kind != "histogram";
    }
    let suffix = name.strip_prefix(family);
    match kind {
        "histogram" => matches!(suffix, Some("_bucket" | "_sum" | "_count")),
        "summary" => matches!(suffix, Some("_sum" | "_count")),
        _ => false,
    }
}

pub fn parse(text: &str) -> Result<Exposition, String> {
    let mut exposition = Exposition::default();
    let mut current: Option<String> = None;
    let mut helps: BTreeMap<String, String> = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        let at = |e: String| format!("line {}: {e}: {line:?}", number + 1);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(help) = line.strip_prefix("# HELP ") {
            let (name, help) = help.split_once(' ').unwrap_or((help, ""));
            if !valid_name(name, true) {
                return Err(at(format!("bad metric name {name:?}")));
            }
            helps.insert(name.to_owned(), help.to_owned());
            continue;
        }
        if let Some(kind) = line.strip_prefix("# TYPE ") {
            let (name, kind) = kind
                .split_once(' ')
                .ok_or_else(|| at("TYPE without a type".into()))?;
            if !matches!(
                kind,
                "counter" | "gauge" | "histogram" | "summary" | "untyped"
            ) {
                return Err(at(format!("unknown type {kind:?}")));
            }
            if exposition.families.contains_key(name) {
                return Err(at(format!("{name} announced twice")));
            }
            exposition.families.insert(
                name.to_owned(),
                Family {
                    kind: kind.to_owned(),
                    help: helps.get(name).cloned().unwrap_or_default(),
                    samples: Vec::new(),
                },
            );
            current = Some(name.to_owned());
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..name_end];
        if !valid_name(name, true) {
            return Err(at(format!("bad metric name {name:?}")));
        }
        let (labels, rest) = if line[name_end..].starts_with('{') {
            parse_labels(&line[name_end..]).map_err(at)?
        } else {
            (BTreeMap::new(), &line[name_end..])
        };
        let mut fields = rest.split_whitespace();
        let value = parse_value(fields.next().ok_or_else(|| at("no value".into()))?).map_err(at)?;
        if let Some(timestamp) = fields.next() {
            timestamp
                .parse::<i64>()
                .map_err(|e| at(format!("bad timestamp: {e}")))?;
        }
        if fields.next().is_some() {
            return Err(at("trailing fields".into()));
        }
        let family_name = current
            .clone()
            .ok_or_else(|| at("sample before any TYPE".into()))?;
        let family = exposition
            .families
            .get_mut(&family_name)
            .ok_or_else(|| at("no family".into()))?;
        if !belongs(name, &family_name, &family.kind) {
            return Err(at(format!(
                "sample of {family_name} ({}) named {name}",
                family.kind
            )));
        }
        family.samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    for (name, family) in &exposition.families {
        if family.kind == "histogram" {
            check_histogram(name, family)?;
        }
    }
    Ok(exposition)
}

/// Every series of a histogram: buckets with `le`, cumulative, ending at `+Inf`, which
/// equals `_count`; and a `_sum`.
fn check_histogram(name: &str, family: &Family) -> Result<(), String> {
    let series_of = |s: &Sample| {
        let mut labels = s.labels.clone();
        labels.remove("le");
        labels
    };
    let mut series: BTreeMap<Vec<(String, String)>, Vec<&Sample>> = BTreeMap::new();
    for sample in &family.samples {
        series
            .entry(series_of(sample).into_iter().collect())
            .or_default()
            .push(sample);
    }
    for (labels, samples) in series {
        let mut last = (f64::NEG_INFINITY, 0.0);
        let mut inf = None;
        let (mut count, mut sum) = (None, None);
        for sample in samples {
            if sample.name.ends_with("_bucket") {
                let le = sample
                    .labels
                    .get("le")
                    .ok_or_else(|| format!("{name}{labels:?}: a bucket without le"))?;
                let bound = parse_value(le)?;
                if bound <= last.0 || sample.value < last.1 {
                    return Err(format!(
                        "{name}{labels:?}: buckets not cumulative at le={le}"
                    ));
                }
                last = (bound, sample.value);
                if bound == f64::INFINITY {
                    inf = Some(sample.value);
                }
            } else if sample.name.ends_with("_count") {
                count = Some(sample.value);
            } else {
                sum = Some(sample.value);
            }
        }
        match (inf, count, sum) {
            (Some(inf), Some(count), Some(_)) if inf == count => {}
            other => return Err(format!("{name}{labels:?}: +Inf/count/sum {other:?}")),
        }
    }
    Ok(())
}

/// etcd's buckets of a histogram's series, as exposed (`le` values, `+Inf` left out).
pub fn bucket_bounds(exposition: &Exposition, family: &str) -> Vec<f64> {
    let name = format!("{family}_bucket");
    let mut bounds: Vec<f64> = exposition
        .samples(&name, &[])
        .filter_map(|s| s.labels.get("le"))
        .filter_map(|le| parse_value(le).ok())
        .filter(|b| b.is_finite())
        .collect();
    bounds.sort_by(f64::total_cmp);
    bounds.dedup();
    bounds
}
