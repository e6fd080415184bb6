//! `--runtime-config`: which group-versions are served beyond Kubernetes 1.33's defaults, in
//! kube-apiserver's syntax (`api/all=true`, `api/beta=true`,
//! `admissionregistration.k8s.io/v1beta1=true`, `batch/v1=true`), with its error words.
//!
//! The default group-versions are always served (they cannot be turned off here). Of the
//! group-versions kube-apiserver 1.33 serves only when asked ([`OFF_BY_DEFAULT`]), konverge
//! serves those it implements ([`builtin::optional`](super::builtin::optional)); naming
//! another is refused, and `api/all`, `api/beta` and `api/alpha` turn on those it implements
//! and report the rest ([`RuntimeConfig::not_served`]).

use std::collections::BTreeSet;

use super::Catalog;

/// The group-versions kube-apiserver 1.33 can serve but does not by default.
pub const OFF_BY_DEFAULT: [(&str, &str); 15] = [
    ("admissionregistration.k8s.io", "v1alpha1"),
    ("admissionregistration.k8s.io", "v1beta1"),
    ("certificates.k8s.io", "v1alpha1"),
    ("certificates.k8s.io", "v1beta1"),
    ("coordination.k8s.io", "v1alpha2"),
    ("coordination.k8s.io", "v1beta1"),
    ("internal.apiserver.k8s.io", "v1alpha1"),
    ("networking.k8s.io", "v1beta1"),
    ("resource.k8s.io", "v1alpha3"),
    ("resource.k8s.io", "v1beta1"),
    ("resource.k8s.io", "v1beta2"),
    ("storage.k8s.io", "v1alpha1"),
    ("storage.k8s.io", "v1beta1"),
    ("storagemigration.k8s.io", "v1alpha1"),
    ("scheduling.k8s.io", "v1alpha1"),
];

/// What `--runtime-config` turns on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// The group-versions served beyond the defaults.
    pub enabled: BTreeSet<(String, String)>,
    /// Group-versions asked for (through `api/all`, `api/beta` or `api/alpha`) that
    /// konverge does not serve.
    pub not_served: BTreeSet<(String, String)>,
}

impl RuntimeConfig {
    /// Reads `--runtime-config` entries (`key=value`, the value `true` when left out). Every
    /// problem is reported, each as kube-apiserver words it where it has words for it.
    pub fn parse(entries: &[String]) -> Result<RuntimeConfig, Vec<String>> {
        let defaults = Catalog::builtin();
        let served = defaults.all();
        let optional = super::builtin::optional();
        let implemented = |group: &str, version: &str| {
            optional
                .iter()
                .any(|(g, v, _)| *g == group && *v == version)
        };
        let default_version = |group: &str, version: &str| {
            served
                .iter()
                .any(|rt| rt.group == group && rt.version == version)
        };
        let known_group = |group: &str| {
            served.iter().any(|rt| rt.group == group)
                || OFF_BY_DEFAULT.iter().any(|(g, _)| *g == group)
        };
        let mut config = RuntimeConfig::default();
        let mut errors = Vec::new();
        let turn_on = |config: &mut RuntimeConfig, level: Option<&str>| {
            for (group, version) in OFF_BY_DEFAULT {
                if level.is_some_and(|l| !version.contains(l)) {
                    continue;
                }
                let gv = (group.to_string(), version.to_string());
                if implemented(group, version) {
                    config.enabled.insert(gv);
                } else {
                    config.not_served.insert(gv);
                }
            }
        };
        for entry in entries.iter().filter(|e| !e.is_empty()) {
            let (key, value) = entry.split_once('=').unwrap_or((entry, "true"));
            let enable = match konverge_apimachinery::query::strconv_parse_bool(value) {
                Ok(enable) => enable,
                Err(error) => {
                    errors.push(format!("invalid value of {key}: {value}, err: {error}"));
                    continue;
                }
            };
            match key {
                "api/all" if enable => turn_on(&mut config, None),
                "api/beta" if enable => turn_on(&mut config, Some("beta")),
                "api/alpha" if enable => turn_on(&mut config, Some("alpha")),
                "api/ga" | "api/legacy" if enable => {}
                // Turning the off-by-default levels off keeps the defaults.
                "api/beta" | "api/alpha" => {}
                "api/all" | "api/ga" | "api/legacy" => errors.push(cannot_disable(key, value)),
                _ => {
                    let parts: Vec<&str> = key.trim_start_matches("api/").split('/').collect();
                    let (group, version, resource) = match parts.as_slice() {
                        [version] => ("", *version, None),
                        [group, version] => (*group, *version, None),
                        [group, version, resource] => (*group, *version, Some(*resource)),
                        _ => {
                            errors.push(format!("invalid key {key}"));
                            continue;
                        }
                    };
                    let group = if key.starts_with("api/") { "" } else { group };
                    if !known_group(group) {
                        errors.push(format!("unknown api groups {group}"));
                        continue;
                    }
                    if default_version(group, version) {
                        let served = match resource {
                            Some(resource) => served.iter().any(|rt| {
                                rt.group == group && rt.version == version && rt.plural == resource
                            }),
                            None => true,
                        };
                        if served != enable {
                            errors.push(cannot_disable(key, value));
                        }
                        continue;
                    }
                    if !enable {
                        continue;
                    }
                    if implemented(group, version) && resource.is_none() {
                        config
                            .enabled
                            .insert((group.to_string(), version.to_string()));
                    } else {
                        errors.push(format!(
                            "--runtime-config {key}={value}: konverge does not serve {}",
                            if group.is_empty() {
                                version.to_string()
                            } else {
                                format!("{group}/{version}")
                            }
                        ));
                    }
                }
            }
        }
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(errors)
        }
    }
}

fn cannot_disable(key: &str, value: &str) -> String {
    format!(
        "--runtime-config {key}={value}: konverge serves Kubernetes 1.33's default APIs and \
         cannot turn them off"
    )
}

impl Catalog {
    /// The built-in resources, with the group-versions `config` turns on.
    pub fn with_runtime_config(config: &RuntimeConfig) -> Self {
        let catalog = Catalog::builtin();
        for (group, version, resources) in super::builtin::optional() {
            if config
                .enabled
                .contains(&(group.to_string(), version.to_string()))
            {
                for rt in resources {
                    catalog.insert(rt);
                }
            }
        }
        catalog
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(entries: &[&str]) -> Result<RuntimeConfig, Vec<String>> {
        RuntimeConfig::parse(&entries.iter().map(|e| e.to_string()).collect::<Vec<_>>())
    }

    fn gv(group: &str, version: &str) -> (String, String) {
        (group.to_string(), version.to_string())
    }

    #[test]
    fn off_by_default_versions_are_turned_on_and_defaults_kept() {
        let config = parse(&[
            "admissionregistration.k8s.io/v1beta1=true",
            "apps/v1=true",
            "api/ga",
        ])
        .expect("taken");
        assert_eq!(
            config.enabled,
            [gv("admissionregistration.k8s.io", "v1beta1")].into()
        );
        let all = parse(&["api/all=true"]).expect("taken");
        assert!(
            all.enabled
                .contains(&gv("admissionregistration.k8s.io", "v1beta1"))
        );
        assert!(all.not_served.contains(&gv("resource.k8s.io", "v1beta1")));
        let alpha = parse(&["api/alpha=true"]).expect("taken");
        assert!(alpha.enabled.is_empty());
        assert!(
            alpha
                .not_served
                .contains(&gv("storagemigration.k8s.io", "v1alpha1"))
        );
        assert_eq!(parse(&[]), Ok(RuntimeConfig::default()));
    }

    #[test]
    fn what_cannot_be_done_is_refused_in_kubes_words() {
        assert_eq!(
            parse(&["apps/v1=maybe", "nothing.example.com/v1=true", "a/b/c/d=true"]),
            Err(vec![
                "invalid value of apps/v1: maybe, err: strconv.ParseBool: parsing \"maybe\": invalid syntax".to_string(),
                "unknown api groups nothing.example.com".to_string(),
                "invalid key a/b/c/d".to_string(),
            ])
        );
        assert_eq!(
            parse(&["apps/v1=false", "resource.k8s.io/v1beta1=true"]),
            Err(vec![
                "--runtime-config apps/v1=false: konverge serves Kubernetes 1.33's default APIs and cannot turn them off".to_string(),
                "--runtime-config resource.k8s.io/v1beta1=true: konverge does not serve resource.k8s.io/v1beta1".to_string(),
            ])
        );
        assert_eq!(
            parse(&["admissionregistration.k8s.io/v1beta1=false"]),
            Ok(RuntimeConfig::default())
        );
    }
}
