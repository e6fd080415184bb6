//! ClusterRole aggregation, as kube-controller-manager does it: a ClusterRole with an
//! `aggregationRule` gets the rules of every ClusterRole its selectors match, selector by
//! selector, matching roles by name, each rule once (the first time it appears).

use std::collections::{BTreeMap, HashSet};

use serde_json::{Value, json};

use super::bootstrap::Pass;
use crate::registry::{ListOptions, Registry};
use crate::resources::meta;

const MANAGER: &str = "clusterrole-aggregation-controller";

/// One pass over every aggregated ClusterRole.
pub(crate) async fn pass(registry: &Registry) -> Option<Pass> {
    let roles = registry
        .catalog()
        .get("rbac.authorization.k8s.io", "v1", "clusterroles")?;
    let listed = match registry.list(&roles, None, &ListOptions::default()).await {
        Ok(listed) => listed,
        Err(e) => {
            tracing::warn!(error = %e, "listing ClusterRoles for aggregation failed");
            return None;
        }
    };
    let mut all: Vec<Value> = listed.items.iter().map(|r| (**r).clone()).collect();
    all.sort_by_key(|r| name_of(r).to_string());
    let before: Vec<Value> = all.iter().map(rules_of).collect();
    settle_rules(&mut all);
    let mut pass = Pass::new(vec![roles.clone()]);
    pass.listed = all.iter().map(|r| roles.key(None, name_of(r))).collect();
    for (role, old) in all.iter().zip(before) {
        let wanted = rules_of(role);
        if wanted == old {
            continue;
        }
        let name = name_of(role).to_string();
        let set_rules = |current: &Value| -> crate::error::Result<Value> {
            let mut next = current.clone();
            next["rules"] = wanted.clone();
            Ok(next)
        };
        let opts = crate::registry::WriteOptions {
            field_manager: Some(MANAGER.into()),
            ..Default::default()
        };
        match registry
            .patch(&roles, None, &name, None, &opts, &set_rules)
            .await
        {
            Ok(written) => pass.written.push((roles.clone(), written.object)),
            Err(e) => {
                pass.failed = true;
                tracing::warn!(error = %e, role = %name, "aggregating a ClusterRole failed");
            }
        }
    }
    Some(pass)
}

/// Aggregates every role of `all` (sorted by name) until nothing changes, so that roles
/// aggregating aggregated roles (`admin` takes `edit`'s rules, which takes `view`'s) are
/// written once with their final rules rather than once per level. Gives up after one round
/// per role: a longer chain than that can only be a cycle, whose rules stop growing anyway.
fn settle_rules(all: &mut [Value]) {
    // Names, labels and selectors do not change from round to round: who takes from whom is
    // worked out once.
    let labels: Vec<BTreeMap<String, String>> = all.iter().map(meta::labels).collect();
    let sources: Vec<Option<Vec<usize>>> = (0..all.len())
        .map(|i| {
            let selectors = all[i]
                .pointer("/aggregationRule/clusterRoleSelectors")
                .and_then(Value::as_array)?;
            Some(sources_of(i, selectors, all, &labels))
        })
        .collect();
    for _ in 0..=all.len() {
        let mut changed = false;
        for (i, sources) in sources.iter().enumerate() {
            let Some(sources) = sources else {
                continue;
            };
            let wanted = aggregate(sources, all);
            if rules_of(&all[i]) != wanted {
                all[i]["rules"] = wanted;
                changed = true;
            }
        }
        if !changed {
            return;
        }
    }
}

/// The roles of `all` (sorted by name) role `i` takes rules from, selector by selector, in
/// name order, itself excepted.
fn sources_of(
    i: usize,
    selectors: &[Value],
    all: &[Value],
    labels: &[BTreeMap<String, String>],
) -> Vec<usize> {
    let mut sources = Vec::new();
    for selector in selectors {
        let Ok(selector) = konverge_apimachinery::selector::LabelSelector::from_json(selector)
        else {
            continue;
        };
        if selector.matches_nothing() {
            continue;
        }
        for (j, other) in all.iter().enumerate() {
            if name_of(other) != name_of(&all[i]) && selector.matches(&labels[j]) {
                sources.push(j);
            }
        }
    }
    sources
}

/// A role's rules, an absent list read as an empty one.
fn rules_of(role: &Value) -> Value {
    match role.get("rules") {
        Some(Value::Null) | None => json!([]),
        Some(rules) => rules.clone(),
    }
}

fn name_of(role: &Value) -> &str {
    role.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The rules of the `sources` of `all`, each once, the first time it appears.
fn aggregate(sources: &[usize], all: &[Value]) -> Value {
    let mut rules: Vec<Value> = Vec::new();
    // Maps are sorted, so equal rules are written alike.
    let mut seen = HashSet::new();
    for &j in sources {
        for rule in all[j]
            .get("rules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if seen.insert(rule.to_string()) {
                rules.push(rule.clone());
            }
        }
    }
    Value::Array(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregation_takes_matching_roles_by_name_and_each_rule_once() {
        let rule = |r: &str| json!({"apiGroups": [""], "resources": [r], "verbs": ["get"]});
        let view = json!({"metadata": {"name": "view", "labels": {"agg": "edit"}},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "view"}}]},
            "rules": [rule("pods")]});
        let b = json!({"metadata": {"name": "b-extra", "labels": {"agg": "edit"}}, "rules": [rule("secrets"), rule("pods")]});
        let edit = json!({"metadata": {"name": "edit"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "edit"}}]}});
        // view takes nothing (nothing is labelled `agg: view`), so edit takes b-extra's
        // rules and none of view's.
        let mut all = vec![b, edit, view];
        settle_rules(&mut all);
        assert_eq!(rules_of(&all[1]), json!([rule("secrets"), rule("pods")]));
        assert_eq!(rules_of(&all[2]), json!([]));
    }

    #[test]
    fn chained_aggregation_settles_in_one_pass() {
        let rule = |r: &str| json!({"apiGroups": [""], "resources": [r], "verbs": ["get"]});
        let role = |name: &str, label: &str, takes: &str| {
            json!({"metadata": {"name": name, "labels": {"agg": label}},
                "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": takes}}]}})
        };
        // admin <- edit <- view <- extra, listed in name order: one sweep would leave
        // admin and edit a level behind.
        let mut all = vec![
            role("admin", "none", "admin"),
            role("edit", "admin", "edit"),
            json!({"metadata": {"name": "extra", "labels": {"agg": "view"}}, "rules": [rule("pods")]}),
            role("view", "edit", "view"),
        ];
        settle_rules(&mut all);
        for settled in &all {
            assert_eq!(
                rules_of(settled),
                json!([rule("pods")]),
                "{}",
                name_of(settled)
            );
        }
    }
}
