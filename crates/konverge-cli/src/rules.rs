//! `konverge up --kubelet-rules FILE`: lifecycle rules for the simulated kubelets, read from
//! a YAML or JSON file, so a whole class of pods can crash, fail to pull or never become
//! ready without an annotation on each (the same behaviours as the `konverge.dev/...`
//! annotations, which win over a rule on the pod they are on).
//!
//! Shaped as kwok's Stage files are: a list of rules (at the top level, or under `rules:`),
//! each a `match` that selects pods and one thing the matched pods' containers do:
//!
//! ```yaml
//! - match:
//!     namespace: default        # the pod's namespace
//!     labels: {app: web}        # labels the pod must all have
//!     image: crashy             # a substring of some container's image
//!     node: node-1              # the pod's node
//!   exitCode: 1                 # or imagePull: Fail, startSeconds: 30, neverReady: true
//!   limit: 3                    # at most this many pods (optional)
//! ```
//!
//! Every `match` field is optional; a rule without any matches every pod. The file is read
//! strictly: an unknown field, a rule with no behaviour or more than one, an invalid label or
//! a `limit` of 0 is an error naming the rule (`rules[2]`), so a typo never silently turns
//! into a rule that matches nothing or does nothing.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use konverge_apimachinery::decoding::{self, Decoded};
use konverge_apimachinery::selector::{validate_label_key, validate_label_value};
use konverge_controllers::kubelet::{Behaviour, Rule};
use serde::Deserialize;
use serde_json::Value;

/// What is wrong with a rules file: where (`rules[2].match.labels`, or nothing for the file
/// as a whole) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RulesError {
    /// The field path of the rule or field at fault; empty for the whole file.
    pub(crate) at: String,
    /// What is wrong.
    pub(crate) message: String,
}

impl RulesError {
    fn new(at: impl Into<String>, message: impl Into<String>) -> RulesError {
        RulesError {
            at: at.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for RulesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.at.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.at, self.message)
        }
    }
}

impl std::error::Error for RulesError {}

/// Reads the rules in `path` (JSON if it ends in `.json`, else YAML), failing with the file's
/// name, the rule and what is wrong.
pub(crate) fn load(path: &Path) -> anyhow::Result<Vec<Rule>> {
    let text = std::fs::read_to_string(path).map_err(|error| {
        anyhow::anyhow!(
            "--kubelet-rules {}: cannot read it: {error}",
            path.display()
        )
    })?;
    let json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    parse(&text, json)
        .map_err(|error| anyhow::anyhow!("--kubelet-rules {}: {error}", path.display()))
}

/// Parses a rules file's text, as JSON when `json`, else as YAML (YAML 1.1 scalars, as
/// kubectl reads manifests).
pub(crate) fn parse(text: &str, json: bool) -> Result<Vec<Rule>, RulesError> {
    let decoded = if json {
        decoding::json(text)
    } else {
        decoding::yaml(text)
    };
    let Decoded {
        value,
        strict_errors,
        ..
    } = decoded.map_err(|error| {
        let format = if json { "JSON" } else { "YAML" };
        RulesError::new("", format!("not valid {format}: {error}"))
    })?;
    if let Some(duplicate) = strict_errors.into_iter().next() {
        return Err(RulesError::new("", duplicate));
    }
    rules_of(value)?
        .into_iter()
        .enumerate()
        .map(|(index, spec)| rule(index, spec))
        .collect()
}

/// The list of rules: the document itself, or its `rules` field.
fn rules_of(value: Value) -> Result<Vec<Value>, RulesError> {
    let expected = "expected a list of rules (or a `rules:` field holding one)";
    match value {
        Value::Array(rules) => Ok(rules),
        Value::Object(mut fields) => {
            if let Some(unknown) = fields.keys().find(|k| k.as_str() != "rules") {
                return Err(RulesError::new(
                    "",
                    format!("unknown field `{unknown}`, {expected}"),
                ));
            }
            match fields.remove("rules") {
                Some(Value::Array(rules)) => Ok(rules),
                Some(Value::Null) | None => Ok(Vec::new()),
                Some(_) => Err(RulesError::new("rules", expected)),
            }
        }
        Value::Null => Err(RulesError::new(
            "",
            format!("the file is empty: {expected}"),
        )),
        _ => Err(RulesError::new("", expected)),
    }
}

/// A rule as written in the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RuleSpec {
    /// Which pods.
    #[serde(rename = "match", default)]
    selector: MatchSpec,
    exit_code: Option<i32>,
    image_pull: Option<ImagePull>,
    start_seconds: Option<u64>,
    never_ready: Option<bool>,
    limit: Option<usize>,
}

/// A rule's `match`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MatchSpec {
    namespace: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    image: Option<String>,
    node: Option<String>,
}

/// `imagePull`: only failing is a behaviour (pulling is what pods do anyway).
#[derive(Debug, Deserialize)]
enum ImagePull {
    Fail,
}

/// The behaviours a rule can ask for, by field name, for the errors.
const BEHAVIOURS: &str = "exitCode, imagePull: Fail, startSeconds or neverReady: true";

fn rule(index: usize, value: Value) -> Result<Rule, RulesError> {
    let at = format!("rules[{index}]");
    if !value.is_object() {
        return Err(RulesError::new(
            at,
            format!("expected a rule (a mapping with `match` and one of {BEHAVIOURS})"),
        ));
    }
    let spec: RuleSpec =
        serde_json::from_value(value).map_err(|error| RulesError::new(&at, error.to_string()))?;
    let behaviour = behaviour(&at, &spec)?;
    if spec.limit == Some(0) {
        return Err(RulesError::new(
            format!("{at}.limit"),
            "must be at least 1 (leave it out for no limit)",
        ));
    }
    let selector = spec.selector;
    for (field, value) in [
        ("namespace", &selector.namespace),
        ("image", &selector.image),
        ("node", &selector.node),
    ] {
        if value.as_deref() == Some("") {
            return Err(RulesError::new(
                format!("{at}.match.{field}"),
                "must not be empty (leave it out to match any)",
            ));
        }
    }
    for (key, value) in &selector.labels {
        validate_label_key(key)
            .and_then(|()| validate_label_value(value))
            .map_err(|error| RulesError::new(format!("{at}.match.labels[{key}]"), error))?;
    }
    Ok(Rule {
        namespace: selector.namespace,
        labels: selector.labels,
        image: selector.image,
        node: selector.node,
        behaviour,
        limit: spec.limit,
    })
}

/// The one behaviour `spec` asks for.
fn behaviour(at: &str, spec: &RuleSpec) -> Result<Behaviour, RulesError> {
    let mut asked: Vec<(&str, Behaviour)> = Vec::new();
    if let Some(code) = spec.exit_code {
        asked.push(("exitCode", Behaviour::Exit(code)));
    }
    if let Some(ImagePull::Fail) = spec.image_pull {
        asked.push(("imagePull", Behaviour::ImagePullFails));
    }
    if let Some(seconds) = spec.start_seconds {
        asked.push(("startSeconds", Behaviour::StartSeconds(seconds)));
    }
    match spec.never_ready {
        Some(true) => asked.push(("neverReady", Behaviour::NeverReady)),
        Some(false) => {
            return Err(RulesError::new(
                format!("{at}.neverReady"),
                "only `true` is a behaviour (pods become ready anyway): leave it out",
            ));
        }
        None => {}
    }
    match asked.len() {
        0 => Err(RulesError::new(
            at,
            format!("no behaviour: set one of {BEHAVIOURS}"),
        )),
        1 => Ok(asked.remove(0).1),
        _ => {
            let names: Vec<&str> = asked.iter().map(|(name, _)| *name).collect();
            Err(RulesError::new(
                at,
                format!(
                    "one behaviour per rule, this one has {}: split it into one rule each",
                    names.join(", ")
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Result<Vec<Rule>, RulesError> {
        parse(text, false)
    }

    fn one(text: &str) -> Rule {
        let mut rules = yaml(text).expect("valid rules");
        assert_eq!(rules.len(), 1, "{rules:?}");
        rules.remove(0)
    }

    fn error(text: &str) -> String {
        match yaml(text) {
            Ok(rules) => panic!("{text} parsed: {rules:?}"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn each_behaviour_parses() {
        let exit = one("- match: {image: crashy}\n  exitCode: 1\n");
        assert_eq!(exit.behaviour, Behaviour::Exit(1));
        assert_eq!(exit.image.as_deref(), Some("crashy"));
        assert_eq!(exit.namespace, None);
        assert!(exit.labels.is_empty());
        assert_eq!(exit.limit, None);
        let pull = one("- match: {labels: {app: broken}}\n  imagePull: Fail\n");
        assert_eq!(pull.behaviour, Behaviour::ImagePullFails);
        assert_eq!(
            pull.labels,
            BTreeMap::from([("app".to_string(), "broken".to_string())])
        );
        let slow = one("- match: {node: node-2}\n  startSeconds: 30\n  limit: 2\n");
        assert_eq!(slow.behaviour, Behaviour::StartSeconds(30));
        assert_eq!(slow.node.as_deref(), Some("node-2"));
        assert_eq!(slow.limit, Some(2));
        let unready = one("- match: {namespace: team-a}\n  neverReady: true\n");
        assert_eq!(unready.behaviour, Behaviour::NeverReady);
        assert_eq!(unready.namespace.as_deref(), Some("team-a"));
        let everyone = one("- exitCode: 137\n");
        assert_eq!(everyone.behaviour, Behaviour::Exit(137));
        assert_eq!(
            (everyone.namespace, everyone.image, everyone.node),
            (None, None, None)
        );
    }

    #[test]
    fn every_match_field_is_kept_and_rules_keep_their_order() {
        let rules = yaml(
            "rules:\n\
             - match:\n    namespace: default\n    labels: {app: web, tier: front}\n    \
               image: nginx\n    node: node-1\n  exitCode: 0\n  limit: 1\n\
             - match: {image: redis}\n  exitCode: 2\n",
        )
        .expect("valid rules");
        assert_eq!(rules.len(), 2);
        let first = &rules[0];
        assert_eq!(first.namespace.as_deref(), Some("default"));
        assert_eq!(first.labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(first.labels.get("tier").map(String::as_str), Some("front"));
        assert_eq!(first.image.as_deref(), Some("nginx"));
        assert_eq!(first.node.as_deref(), Some("node-1"));
        assert_eq!(first.behaviour, Behaviour::Exit(0));
        assert_eq!(first.limit, Some(1));
        assert_eq!(rules[1].behaviour, Behaviour::Exit(2));
        assert_eq!(rules[1].image.as_deref(), Some("redis"));
    }

    #[test]
    fn json_files_parse_too() {
        let rules = parse(
            r#"[{"match": {"image": "crashy"}, "exitCode": 3},
                {"match": {"labels": {"app": "x"}}, "imagePull": "Fail"}]"#,
            true,
        )
        .expect("valid rules");
        assert_eq!(rules[0].behaviour, Behaviour::Exit(3));
        assert_eq!(rules[1].behaviour, Behaviour::ImagePullFails);
        let rules = parse(r#"{"rules": [{"neverReady": true}]}"#, true).expect("valid");
        assert_eq!(rules[0].behaviour, Behaviour::NeverReady);
        assert_eq!(
            parse(r#"[{"exitCode": 1, "exitcode": 2}]"#, true)
                .expect_err("unknown field")
                .to_string(),
            "rules[0]: unknown field `exitcode`, expected one of `match`, `exitCode`, \
             `imagePull`, `startSeconds`, `neverReady`, `limit`"
        );
        assert_eq!(
            parse(r#"[{"exitCode": 1, "exitCode": 2}]"#, true)
                .expect_err("duplicate field")
                .to_string(),
            "duplicate field \"[0].exitCode\""
        );
        assert!(
            parse("[{", true)
                .expect_err("not JSON")
                .to_string()
                .starts_with("not valid JSON: "),
        );
    }

    #[test]
    fn an_empty_list_is_no_rules() {
        assert!(yaml("[]").expect("valid").is_empty());
        assert!(yaml("rules: []").expect("valid").is_empty());
        assert!(yaml("rules:").expect("valid").is_empty());
    }

    #[test]
    fn unknown_fields_name_the_field_and_the_rule() {
        assert_eq!(
            error("- match: {image: a}\n  exitCode: 1\n- match: {image: b}\n  exitcode: 1\n"),
            "rules[1]: unknown field `exitcode`, expected one of `match`, `exitCode`, \
             `imagePull`, `startSeconds`, `neverReady`, `limit`"
        );
        assert_eq!(
            error("- match: {imag: crashy}\n  exitCode: 1\n"),
            "rules[0]: unknown field `imag`, expected one of `namespace`, `labels`, `image`, \
             `node`"
        );
        assert_eq!(
            error("rules: []\nkind: Stage\n"),
            "unknown field `kind`, expected a list of rules (or a `rules:` field holding one)"
        );
    }

    #[test]
    fn a_rule_needs_exactly_one_behaviour() {
        assert_eq!(
            error("- match: {image: a}\n"),
            "rules[0]: no behaviour: set one of exitCode, imagePull: Fail, startSeconds or \
             neverReady: true"
        );
        assert_eq!(
            error("- exitCode: 1\n- exitCode: 1\n  imagePull: Fail\n  neverReady: true\n"),
            "rules[1]: one behaviour per rule, this one has exitCode, imagePull, neverReady: \
             split it into one rule each"
        );
        assert_eq!(
            error("- neverReady: false\n"),
            "rules[0].neverReady: only `true` is a behaviour (pods become ready anyway): \
             leave it out"
        );
    }

    #[test]
    fn bad_values_say_what_is_wrong() {
        assert_eq!(
            error("- imagePull: fail\n"),
            "rules[0]: unknown variant `fail`, expected `Fail`"
        );
        assert_eq!(
            error("- startSeconds: -1\n"),
            "rules[0]: invalid value: integer `-1`, expected u64"
        );
        assert_eq!(
            error("- exitCode: one\n"),
            "rules[0]: invalid type: string \"one\", expected i32"
        );
        assert_eq!(
            error("- exitCode: 1\n  limit: 0\n"),
            "rules[0].limit: must be at least 1 (leave it out for no limit)"
        );
        assert_eq!(
            error("- match: {image: \"\"}\n  exitCode: 1\n"),
            "rules[0].match.image: must not be empty (leave it out to match any)"
        );
        let label = error("- match: {labels: {\"app\": \"not ok\"}}\n  exitCode: 1\n");
        assert!(
            label.starts_with("rules[0].match.labels[app]: a valid label must be"),
            "{label}"
        );
        let key = error("- match: {labels: {\"-app\": ok}}\n  exitCode: 1\n");
        assert!(key.starts_with("rules[0].match.labels[-app]: "), "{key}");
        assert_eq!(
            error("- crashy\n"),
            "rules[0]: expected a rule (a mapping with `match` and one of exitCode, \
             imagePull: Fail, startSeconds or neverReady: true)"
        );
    }

    #[test]
    fn bad_documents_say_what_is_wrong() {
        assert_eq!(
            error(""),
            "the file is empty: expected a list of rules (or a `rules:` field holding one)"
        );
        assert_eq!(
            error("crashy"),
            "expected a list of rules (or a `rules:` field holding one)"
        );
        assert_eq!(
            error("rules: crashy"),
            "rules: expected a list of rules (or a `rules:` field holding one)"
        );
        assert!(error("- [").starts_with("not valid YAML: "));
        assert!(
            error("- exitCode: 1\n  exitCode: 2\n").contains("key \"exitCode\" already set"),
            "{}",
            error("- exitCode: 1\n  exitCode: 2\n")
        );
    }

    #[test]
    fn loading_names_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("rules.yaml");
        std::fs::write(&path, "- match: {image: crashy}\n  exitcode: 1\n").expect("write");
        let error = load(&path).expect_err("a bad file").to_string();
        assert_eq!(
            error,
            format!(
                "--kubelet-rules {}: rules[0]: unknown field `exitcode`, expected one of \
                 `match`, `exitCode`, `imagePull`, `startSeconds`, `neverReady`, `limit`",
                path.display()
            )
        );
        let missing = dir.path().join("none.yaml");
        let error = load(&missing).expect_err("no file").to_string();
        assert!(
            error.starts_with(&format!(
                "--kubelet-rules {}: cannot read it: ",
                missing.display()
            )),
            "{error}"
        );
        std::fs::write(&path, "- match: {image: crashy}\n  exitCode: 1\n").expect("write");
        let rules = load(&path).expect("a good file");
        assert_eq!(rules[0].behaviour, Behaviour::Exit(1));
    }
}
