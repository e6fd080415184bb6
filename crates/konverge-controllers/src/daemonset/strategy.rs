//! The numbers of a DaemonSet's update strategy (kcm's `SurgeCount`, `UnavailableCount`):
//! pure functions of the DaemonSet, below everything else here.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// The RollingUpdate parameters, if that is the strategy.
fn rolling(ds: &DaemonSet) -> Option<&k8s_openapi::api::apps::v1::RollingUpdateDaemonSet> {
    let strategy = ds.spec.as_ref()?.update_strategy.as_ref()?;
    if strategy.type_.as_deref().unwrap_or("RollingUpdate") != "RollingUpdate" {
        return None;
    }
    strategy.rolling_update.as_ref()
}

/// Whether `ds` uses the RollingUpdate strategy (the default).
pub(super) fn is_rolling(ds: &DaemonSet) -> bool {
    ds.spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate"
}

/// How many pods may surge out of `desired` (kcm's `SurgeCount`): 0 unless rolling with a
/// `maxSurge`.
pub(super) fn surge_count(ds: &DaemonSet, desired: i32) -> Result<i32, String> {
    match rolling(ds).and_then(|r| r.max_surge.as_ref()) {
        None => Ok(0),
        Some(value) => scaled(Some(value), desired),
    }
}

/// How many pods may be unavailable out of `desired` (kcm's `UnavailableCount`).
pub(super) fn unavailable_count(ds: &DaemonSet, desired: i32) -> Result<i32, String> {
    match rolling(ds) {
        None => Ok(0),
        Some(r) => scaled(r.max_unavailable.as_ref(), desired),
    }
}

/// An int, or a percentage of `total` rounded up (kcm's `GetScaledValueFromIntOrPercent`).
fn scaled(value: Option<&IntOrString>, total: i32) -> Result<i32, String> {
    match value {
        None => Err("nil value for IntOrString".into()),
        Some(IntOrString::Int(v)) => Ok(*v),
        Some(IntOrString::String(s)) => {
            let Some(number) = s.strip_suffix('%') else {
                return Err(
                    "invalid value for IntOrString: invalid type: string is not a percentage"
                        .into(),
                );
            };
            let percent: i64 = number
                .parse()
                .map_err(|e| format!("invalid value for IntOrString: invalid value {s:?}: {e}"))?;
            let scaled = (percent * i64::from(total) + 99).div_euclid(100);
            Ok(i32::try_from(scaled).unwrap_or(i32::MAX))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_up_and_bad_values_say_why() {
        let pct = |s: &str| IntOrString::String(s.into());
        assert_eq!(scaled(Some(&pct("25%")), 3), Ok(1));
        assert_eq!(scaled(Some(&pct("50%")), 3), Ok(2));
        assert_eq!(scaled(Some(&pct("0%")), 3), Ok(0));
        assert_eq!(scaled(Some(&IntOrString::Int(2)), 3), Ok(2));
        assert!(scaled(Some(&pct("x")), 3).is_err_and(|e| e.contains("not a percentage")));
        assert!(scaled(None, 3).is_err());
    }
}
