//! Indexed Jobs: completion indexes on pods, the sets of succeeded and failed indexes as
//! kcm writes them (`"1,3-5,7"`), and success policies.

use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::api::batch::v1::{Job, SuccessPolicy};
use k8s_openapi::api::core::v1::{Container, EnvVar, EnvVarSource, ObjectFieldSelector, Pod};

use super::COMPLETION_INDEX;

/// The environment variable holding a pod's completion index.
pub const COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

/// The longest `generateName` prefix the API server keeps whole.
const MAX_GENERATED_NAME_LENGTH: usize = 58;

/// The Job's `completionMode` is `Indexed`.
pub fn is_indexed(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.completion_mode.as_deref()) == Some("Indexed")
}

/// The pod's completion index from its annotation; `None` when missing, not a number or
/// negative (kcm's `unknownCompletionIndex`).
pub fn completion_index(pod: &Pod) -> Option<i64> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(COMPLETION_INDEX)?
        .parse::<i64>()
        .ok()
        .filter(|i| *i >= 0)
}

/// A run of consecutive indexes, `first..=last`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    /// The first index.
    pub first: i64,
    /// The last index.
    pub last: i64,
}

/// Disjoint, non-adjacent runs of indexes in increasing order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Intervals(pub Vec<Interval>);

impl Intervals {
    /// Parses kcm's form (`"0-2,5,7-9"`), ignoring what is not a number and dropping
    /// indexes at or past `completions`, as kcm's `parseIndexesFromString` does.
    pub fn parse(text: &str, completions: i64) -> Intervals {
        let mut result: Vec<Interval> = Vec::new();
        if text.is_empty() {
            return Intervals(result);
        }
        for part in text.split(',') {
            let mut limits = part.split('-');
            let Some(Ok(first)) = limits.next().map(str::parse::<i64>) else {
                continue;
            };
            if first >= completions {
                break;
            }
            let last = match limits.next() {
                Some(last) => match last.parse::<i64>() {
                    Ok(last) => last.min(completions - 1),
                    Err(_) => continue,
                },
                None => first,
            };
            match result.last_mut() {
                Some(previous) if previous.last == first - 1 => previous.last = last,
                _ => result.push(Interval { first, last }),
            }
        }
        Intervals(result)
    }

    /// These intervals with `indexes` (in increasing order) added.
    pub fn with_indexes(&self, indexes: impl IntoIterator<Item = i64>) -> Intervals {
        let single: Vec<Interval> = indexes
            .into_iter()
            .map(|i| Interval { first: i, last: i })
            .collect();
        self.merge(&Intervals(single))
    }

    /// The union of two lists of intervals.
    pub fn merge(&self, other: &Intervals) -> Intervals {
        let mut all: Vec<Interval> = self.0.iter().chain(&other.0).copied().collect();
        all.sort_by_key(|i| i.first);
        let mut result: Vec<Interval> = Vec::new();
        for interval in all {
            match result.last_mut() {
                Some(last) if interval.first <= last.last + 1 => {
                    last.last = last.last.max(interval.last);
                }
                _ => result.push(interval),
            }
        }
        Intervals(result)
    }

    /// How many indexes the intervals hold.
    pub fn total(&self) -> i64 {
        self.0.iter().map(|i| i.last - i.first + 1).sum()
    }

    /// Whether `index` is in one of the intervals.
    pub fn has(&self, index: i64) -> bool {
        let at = self.0.partition_point(|i| i.last < index);
        self.0.get(at).is_some_and(|i| i.first <= index)
    }

    /// No index at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Intervals {
    /// kcm's form: runs of three or more as `a-b`, a run of two as `a,b`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, interval) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}", interval.first)?;
            if interval.last == interval.first + 1 {
                write!(f, ",{}", interval.last)?;
            } else if interval.last > interval.first {
                write!(f, "-{}", interval.last)?;
            }
        }
        Ok(())
    }
}

/// The indexes of `pods` (those that have one).
pub fn indexes_of<'p>(pods: impl IntoIterator<Item = &'p Pod>) -> BTreeSet<i64> {
    pods.into_iter().filter_map(completion_index).collect()
}

/// The first `count` indexes below `completions` that are in none of `taken`.
pub fn first_pending(taken: &Intervals, count: usize, completions: i64) -> Vec<i64> {
    let mut result = Vec::with_capacity(count);
    let mut candidate = 0;
    for interval in &taken.0 {
        while candidate < completions && result.len() < count && candidate < interval.first {
            result.push(candidate);
            candidate += 1;
        }
        candidate = candidate.max(interval.last + 1);
    }
    while candidate < completions && result.len() < count {
        result.push(candidate);
        candidate += 1;
    }
    result
}

/// The `generateName` of the pod for `index` (kcm's `podGenerateNameWithIndex`).
pub fn generate_name(job: &str, index: i64) -> String {
    let suffix = format!("-{index}-");
    let mut prefix = format!("{job}{suffix}");
    if prefix.len() > MAX_GENERATED_NAME_LENGTH {
        let keep = MAX_GENERATED_NAME_LENGTH.saturating_sub(suffix.len());
        let mut cut = keep.min(job.len());
        while !job.is_char_boundary(cut) {
            cut -= 1;
        }
        prefix = format!("{}{suffix}", &job[..cut]);
    }
    prefix
}

/// Adds `JOB_COMPLETION_INDEX` (from the pod's completion index label) to a container,
/// unless it sets it itself.
pub fn add_index_env(container: &mut Container) {
    let env = container.env.get_or_insert_with(Vec::new);
    if env.iter().any(|e| e.name == COMPLETION_INDEX_ENV) {
        return;
    }
    env.push(EnvVar {
        name: COMPLETION_INDEX_ENV.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: None,
                field_path: format!("metadata.labels['{COMPLETION_INDEX}']"),
            }),
            ..EnvVarSource::default()
        }),
    });
}

/// Whether a success policy is met by `succeeded`; the condition message when it is
/// (kcm's `matchSuccessPolicy`).
pub fn match_success_policy(
    policy: Option<&SuccessPolicy>,
    completions: i64,
    succeeded: &Intervals,
) -> Option<String> {
    let policy = policy?;
    if succeeded.is_empty() {
        return None;
    }
    for (n, rule) in policy.rules.iter().enumerate() {
        let met = match &rule.succeeded_indexes {
            Some(indexes) => {
                let required = Intervals::parse(indexes, completions);
                !required.is_empty() && rule_met(&required, succeeded, rule.succeeded_count)
            }
            None => rule
                .succeeded_count
                .is_some_and(|count| succeeded.total() >= i64::from(count)),
        };
        if met {
            return Some(format!("Matched rules at index {n}"));
        }
    }
    None
}

/// Every index of `required` succeeded, or at least `count` of them did.
fn rule_met(required: &Intervals, succeeded: &Intervals, count: Option<i32>) -> bool {
    let overlap: i64 = required
        .0
        .iter()
        .flat_map(|r| {
            succeeded
                .0
                .iter()
                .map(move |s| (r.last.min(s.last) - r.first.max(s.first) + 1).max(0))
        })
        .sum();
    overlap == required.total() || count.is_some_and(|c| overlap >= i64::from(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_print_and_parse_as_kcm() {
        let all = Intervals::default().with_indexes([0, 1, 2, 5, 7, 8]);
        assert_eq!(all.to_string(), "0-2,5,7,8");
        assert_eq!(all.total(), 6);
        assert_eq!(Intervals::parse("0-2,5,7,8", 10), all);
        assert_eq!(Intervals::parse("0-2,5,7-9", 8).to_string(), "0-2,5,7");
        assert_eq!(Intervals::parse("x,3", 8).to_string(), "3");
        assert!(all.has(1) && all.has(8) && !all.has(3) && !all.has(9));
    }

    #[test]
    fn pending_indexes_skip_the_taken_ones() {
        let taken = Intervals::default().with_indexes([0, 2, 3]);
        assert_eq!(first_pending(&taken, 3, 6), vec![1, 4, 5]);
        assert_eq!(first_pending(&taken, 1, 6), vec![1]);
    }

    #[test]
    fn success_rules_match_on_indexes_or_counts() {
        let succeeded = Intervals::parse("0-2", 5);
        let policy: SuccessPolicy = serde_json::from_value(serde_json::json!({
            "rules": [{"succeededIndexes": "3-4"}, {"succeededIndexes": "0,1,4", "succeededCount": 2}]
        }))
        .expect("a policy");
        assert_eq!(
            match_success_policy(Some(&policy), 5, &succeeded).as_deref(),
            Some("Matched rules at index 1")
        );
    }

    #[test]
    fn long_names_keep_the_index() {
        let name = "a".repeat(70);
        let prefix = generate_name(&name, 12);
        assert!(prefix.ends_with("-12-"));
        assert_eq!(prefix.len(), MAX_GENERATED_NAME_LENGTH);
    }
}
