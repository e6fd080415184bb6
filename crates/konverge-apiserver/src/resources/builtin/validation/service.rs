//! Services: types, ports and node ports.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::pod::protocol;
use super::*;
use crate::error::Cause;

pub(crate) fn service(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(old) = old {
        cluster_ips_update(obj, old, &mut causes);
        ip_families_update(obj, old, &mut causes);
        let class = |o: &Value| o.pointer("/spec/loadBalancerClass").cloned();
        let balanced =
            |o: &Value| o.pointer("/spec/type").and_then(Value::as_str) == Some("LoadBalancer");
        if balanced(obj) && balanced(old) && class(obj) != class(old) {
            causes.push(invalid_shown(
                "spec.loadBalancerClass",
                &go_scalar(obj.pointer("/spec/loadBalancerClass")),
                "may not change once set",
            ));
        }
    }
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let kind = spec.get("type").and_then(Value::as_str).unwrap_or("");
    if !matches!(
        kind,
        "ClusterIP" | "ExternalName" | "LoadBalancer" | "NodePort"
    ) {
        causes.push(not_supported(
            "spec.type",
            kind,
            &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"],
        ));
    }
    let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
    let ports = spec
        .get("ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if ports.is_empty() && !headless && kind != "ExternalName" {
        causes.push(required("spec.ports"));
    }
    if kind == "ExternalName"
        && spec
            .get("externalName")
            .and_then(Value::as_str)
            .is_none_or(|n| n.trim_end_matches('.').is_empty())
    {
        causes.push(required("spec.externalName"));
    }
    let mut names = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        let path = format!("spec.ports[{i}]");
        match port
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            None if ports.len() > 1 => causes.push(required(format!("{path}.name"))),
            None => {}
            Some(name) => {
                let problems = check_name(NameRule::Label, name, &format!("{path}.name"));
                if problems.is_empty() && !names.insert(name.to_string()) {
                    causes.push(duplicate(format!("{path}.name"), &json!(name)));
                }
                causes.extend(problems);
            }
        }
        let number = port.get("port").and_then(Value::as_i64).unwrap_or(0);
        if !(1..=65535).contains(&number) {
            causes.push(Cause::invalid(
                format!("{path}.port"),
                &json!(number),
                "must be between 1 and 65535, inclusive",
            ));
        }
        protocol(port, &path, &mut causes);
        if kind == "ClusterIP"
            && port
                .get("nodePort")
                .and_then(Value::as_i64)
                .is_some_and(|n| n != 0)
        {
            causes.push(forbidden(
                format!("{path}.nodePort"),
                "may not be used when `type` is 'ClusterIP'",
            ));
        }
    }
    causes
}

/// A Service's cluster IPs, as `normalizeClusterIPs` reads an update: a client that sends
/// only `clusterIP` (an old one) means `clusterIPs` to follow it.
fn cluster_ips(obj: &Value, old: &Value) -> Vec<String> {
    let ips = |o: &Value| -> Vec<String> {
        o.pointer("/spec/clusterIPs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|ip| ip.as_str().map(String::from))
            .collect()
    };
    let ip = |o: &Value| {
        o.pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (old_ips, mut new_ips) = (ips(old), ips(obj));
    // What `patchAllocatedValues` keeps, also done on the way in (carry_service_addresses).
    if new_ips.is_empty() {
        new_ips = old_ips.clone();
    }
    if ip(old) != ip(obj) && new_ips == old_ips {
        new_ips = if ip(obj).is_empty() {
            Vec::new()
        } else {
            vec![ip(obj)]
        };
    }
    new_ips
}

/// `validateUpgradeDowngradeClusterIPs`: the primary cluster IP stays; a secondary one goes
/// only with the Service made single-stack.
fn cluster_ips_update(obj: &Value, old: &Value, causes: &mut Vec<Cause>) {
    let external =
        |o: &Value| o.pointer("/spec/type").and_then(Value::as_str) == Some("ExternalName");
    if external(obj) || external(old) {
        return;
    }
    let old_ips = cluster_ips(old, old);
    let new_ips = cluster_ips(obj, old);
    let headless = |ips: &[String]| ips.len() == 1 && ips[0] == "None";
    if headless(&old_ips) && headless(&new_ips) {
        return;
    }
    let shown = match new_ips.is_empty() {
        true => "[]string(nil)".to_string(),
        false => go_strings("string", Some(&json!(new_ips))),
    };
    let at = |i: usize| format!("spec.clusterIPs[{i}]");
    match new_ips.len().cmp(&old_ips.len()) {
        std::cmp::Ordering::Equal => {
            for (i, (was, now)) in old_ips.iter().zip(&new_ips).enumerate() {
                if was != now {
                    causes.push(invalid_shown(at(i), &shown, "may not change once set"));
                }
            }
        }
        std::cmp::Ordering::Less => {
            if new_ips.is_empty() {
                causes.push(invalid_shown(
                    at(0),
                    &shown,
                    "primary clusterIP can not be unset",
                ));
            } else if new_ips[0] != old_ips[0] {
                causes.push(invalid_shown(at(0), &shown, "may not change once set"));
            }
            let policy = obj.pointer("/spec/ipFamilyPolicy");
            if new_ips.len() == 1 && policy.and_then(Value::as_str) != Some("SingleStack") {
                causes.push(invalid_shown(
                    "spec.ipFamilyPolicy",
                    &go_scalar(policy),
                    "must be set to 'SingleStack' when releasing the secondary clusterIP",
                ));
            }
        }
        std::cmp::Ordering::Greater => {
            if !old_ips.is_empty() && new_ips[0] != old_ips[0] {
                causes.push(invalid_shown(at(0), &shown, "may not change once set"));
            }
        }
    }
}

/// `validateUpgradeDowngradeIPFamilies`: the primary family stays; a secondary one goes
/// only with the Service made single-stack. Headless Services may change families.
fn ip_families_update(obj: &Value, old: &Value, causes: &mut Vec<Cause>) {
    let external =
        |o: &Value| o.pointer("/spec/type").and_then(Value::as_str) == Some("ExternalName");
    if external(obj) || external(old) {
        return;
    }
    let headless = |ips: &[String]| ips.len() == 1 && ips[0] == "None";
    let new_ips = cluster_ips(obj, old);
    if headless(&cluster_ips(old, old)) || headless(&new_ips) {
        return;
    }
    let families = |o: &Value| -> Vec<String> {
        o.pointer("/spec/ipFamilies")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|f| f.as_str().map(String::from))
            .collect()
    };
    let (before, after) = (families(old), families(obj));
    let shown = go_strings("core.IPFamily", obj.pointer("/spec/ipFamilies"));
    let ips_shown = match new_ips.is_empty() {
        true => "[]string(nil)".to_string(),
        false => go_strings("string", Some(&json!(new_ips))),
    };
    const PATH: &str = "spec.ipFamilies[0]";
    match after.len().cmp(&before.len()) {
        std::cmp::Ordering::Equal => {
            // One error per changed family, all on the first.
            for (was, now) in before.iter().zip(&after) {
                if was != now {
                    causes.push(invalid_shown(PATH, &shown, "may not change once set"));
                }
            }
        }
        std::cmp::Ordering::Less => {
            if new_ips.is_empty() {
                causes.push(invalid_shown(
                    PATH,
                    &shown,
                    "primary ipFamily can not be unset",
                ));
            }
            if !after.is_empty() && after[0] != before[0] {
                causes.push(invalid_shown(PATH, &ips_shown, "may not change once set"));
            }
            let policy = obj.pointer("/spec/ipFamilyPolicy");
            if after.len() == 1 && policy.and_then(Value::as_str) != Some("SingleStack") {
                causes.push(invalid_shown(
                    "spec.ipFamilyPolicy",
                    &go_scalar(policy),
                    "must be set to 'SingleStack' when releasing the secondary ipFamily",
                ));
            }
        }
        std::cmp::Ordering::Greater => {
            if !before.is_empty() && after[0] != before[0] {
                causes.push(invalid_shown(PATH, &ips_shown, "may not change once set"));
            }
        }
    }
}
