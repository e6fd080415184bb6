//! CustomResourceDefinitions and server-side apply from a user's point of view: real kubectl
//! against `konverge up`, expecting what Kubernetes 1.33 prints.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::{Up, write};

const CRD_NAME: &str = "crontabs.stable.example.com";

/// The CronTab of the Kubernetes documentation, grown to exercise the interesting parts:
/// two served versions, status and scale subresources, printer columns, categories, short
/// names, defaulting, OpenAPI validation and CEL rules (one of them a transition rule).
const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names:
    plural: crontabs
    singular: crontab
    kind: CronTab
    shortNames: [ct]
    categories: [all]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
    additionalPrinterColumns:
    - name: Spec
      type: string
      description: The cron spec defining the interval a CronJob is run
      jsonPath: .spec.cronSpec
    - name: Replicas
      type: integer
      description: The number of jobs launched by the CronJob
      jsonPath: .spec.replicas
    - name: Age
      type: date
      jsonPath: .metadata.creationTimestamp
    schema:
      openAPIV3Schema:
        description: CronTab runs a container image on a cron schedule.
        type: object
        properties:
          spec:
            description: CronTabSpec is the desired schedule and workload of a CronTab.
            type: object
            x-kubernetes-validations:
            - rule: "self.replicas <= 5 || (has(self.mode) && self.mode == 'B')"
              message: more than 5 replicas need mode B
            properties:
              cronSpec:
                description: Schedule in five-field cron format.
                type: string
                pattern: '^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$'
              image:
                description: Container image to run; it cannot change once set.
                type: string
                x-kubernetes-validations:
                - rule: self == oldSelf
                  message: image is immutable
              name:
                description: Human-readable job name, at least three characters.
                type: string
                minLength: 3
              replicas:
                description: How many copies of the job run at once.
                type: integer
                minimum: 1
                maximum: 10
                default: 1
              mode:
                description: Scheduling mode.
                type: string
                enum: [A, B]
          status:
            type: object
            properties:
              replicas:
                type: integer
  - name: v1beta1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-preserve-unknown-fields: true
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
"#;

/// A v1 CronTab manifest; `spec` is the YAML body of `.spec`, one field per line.
fn crontab(name: &str, spec: &[&str]) -> String {
    let mut manifest = format!(
        "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata:\n  name: {name}\nspec:\n"
    );
    for line in spec {
        manifest.push_str("  ");
        manifest.push_str(line);
        manifest.push('\n');
    }
    manifest
}

/// `konverge up`, a directory for manifests, and the CronTab CRD installed and Established.
fn up_with_crd() -> (Up, tempfile::TempDir) {
    let up = Up::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let crd = write(dir.path(), "crd.yaml", CRD);
    let out = up.ok(&["apply", "-f", &crd]);
    assert!(
        out.contains(
            "customresourcedefinition.apiextensions.k8s.io/crontabs.stable.example.com created"
        ),
        "{out}"
    );
    let started = Instant::now();
    let out = up.ok(&[
        "wait",
        "--for=condition=Established",
        &format!("crd/{CRD_NAME}"),
        "--timeout=5s",
    ]);
    let waited = started.elapsed();
    assert!(
        out.contains(&format!(
            "customresourcedefinition.apiextensions.k8s.io/{CRD_NAME} condition met"
        )),
        "{out}"
    );
    // Loose on purpose: the CRD controller should establish within moments, well inside
    // kubectl's own 5 s timeout; this only catches a wait that crawls.
    assert!(waited < Duration::from_secs(8), "waited {waited:?}");
    (up, dir)
}

fn apply(up: &Up, dir: &Path, file: &str, manifest: &str) -> String {
    up.ok(&["apply", "-f", &write(dir, file, manifest)])
}

fn apply_fails(up: &Up, dir: &Path, file: &str, manifest: &str) -> String {
    up.fails(&["apply", "-f", &write(dir, file, manifest)], None)
}

/// Runs an older kubectl (`kubectl.1.27`, ...), which sits beside the real kubectl binary that
/// `kubectl` on PATH resolves to, or `None` when it is not installed.
fn old_kubectl(up: &Up, binary: &str, args: &[&str]) -> Option<(Option<i32>, String, String)> {
    let path = std::env::var_os("PATH")?;
    let kubectl = std::env::split_paths(&path)
        .map(|dir| dir.join("kubectl"))
        .find(|candidate| candidate.is_file())?;
    let old = std::fs::canonicalize(kubectl).ok()?.parent()?.join(binary);
    if !old.is_file() {
        eprintln!("{} is not installed; skipping its checks", old.display());
        return None;
    }
    let output = Command::new(&old)
        .env("KUBECONFIG", up.kubeconfig())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", old.display()));
    Some((
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

fn managed_fields<'a>(object: &'a Value, manager: &str) -> &'a Value {
    object["metadata"]["managedFields"]
        .as_array()
        .unwrap_or_else(|| panic!("no managedFields: {object}"))
        .iter()
        .find(|entry| entry["manager"] == manager)
        .unwrap_or_else(|| panic!("no managedFields entry for {manager}: {object}"))
}

#[test]
fn crd_install_print_explain_scale_status_and_delete() {
    let (up, dir) = up_with_crd();
    let dir = dir.path();

    // The CRD is listed, and discovery knows the resource with its short name.
    let crds = up.ok(&["get", "crd"]);
    assert!(crds.contains(CRD_NAME), "{crds}");
    let resources = up.ok(&["api-resources", "--api-group=stable.example.com"]);
    let row: Vec<&str> = resources
        .lines()
        .find(|l| l.starts_with("crontabs "))
        .unwrap_or_else(|| panic!("no crontabs row: {resources}"))
        .split_whitespace()
        .collect();
    assert_eq!(
        row,
        ["crontabs", "ct", "stable.example.com/v1", "true", "CronTab"],
        "{resources}"
    );

    // Client-side apply twice: created, then configured. replicas is defaulted to 1.
    let first = crontab(
        "my-cron",
        &[
            r#"cronSpec: "* * * * */5""#,
            "image: my-awesome-cron-image",
            "name: nightly",
        ],
    );
    let out = apply(&up, dir, "cron.yaml", &first);
    assert!(
        out.contains("crontab.stable.example.com/my-cron created"),
        "{out}"
    );
    assert_eq!(
        up.ok(&[
            "get",
            "crontab",
            "my-cron",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "1",
        "the schema default fills in replicas"
    );
    let second = crontab(
        "my-cron",
        &[
            r#"cronSpec: "*/10 * * * *""#,
            "image: my-awesome-cron-image",
            "name: nightly",
            "replicas: 2",
        ],
    );
    let out = apply(&up, dir, "cron2.yaml", &second);
    assert!(
        out.contains("crontab.stable.example.com/my-cron configured"),
        "{out}"
    );
    let cron = up.json(&["get", "crontab", "my-cron"]);
    assert_eq!(cron["spec"]["replicas"], 2, "{cron}");
    assert_eq!(cron["spec"]["cronSpec"], "*/10 * * * *", "{cron}");
    assert_eq!(cron["metadata"]["generation"], 2, "{cron}");

    // Printer columns.
    let table = up.ok(&["get", "crontabs"]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().expect("header").split_whitespace().collect();
    assert_eq!(header, ["NAME", "SPEC", "REPLICAS", "AGE"], "{table}");
    let row = lines.next().expect("a row");
    assert!(
        row.starts_with("my-cron ") && row.contains("*/10 * * * *") && row.contains(" 2 "),
        "{table}"
    );
    // Short name and the `all` category.
    let short = up.ok(&["get", "ct"]);
    assert!(short.contains("my-cron"), "{short}");
    let all = up.ok(&["get", "all"]);
    assert!(all.contains("crontab.stable.example.com/my-cron"), "{all}");
    // The other served version, read through a fully qualified resource.
    let beta = up.json(&["get", "crontabs.v1beta1.stable.example.com", "my-cron"]);
    assert_eq!(beta["apiVersion"], "stable.example.com/v1beta1", "{beta}");
    assert_eq!(beta["spec"]["replicas"], 2, "{beta}");
    let beta_list = up.json(&["get", "crontabs.v1beta1.stable.example.com"]);
    assert_eq!(
        beta_list["items"][0]["apiVersion"], "stable.example.com/v1beta1",
        "{beta_list}"
    );

    // explain reads the descriptions of the schema.
    let explained = up.ok(&["explain", "crontabs.spec"]);
    for want in [
        "CronTab",
        "CronTabSpec is the desired schedule and workload of a CronTab.",
        "cronSpec",
        "Schedule in five-field cron format.",
        "Human-readable job name, at least three characters.",
        "How many copies of the job run at once.",
    ] {
        assert!(explained.contains(want), "{want:?} missing:\n{explained}");
    }
    let explained = up.ok(&["explain", "crontab.spec.replicas"]);
    assert!(
        explained.contains("replicas")
            && explained.contains("<integer>")
            && explained.contains("How many copies of the job run at once."),
        "{explained}"
    );

    // An older kubectl can apply and explain too.
    let old = crontab(
        "old-cron",
        &[
            r#"cronSpec: "0 * * * *""#,
            "image: old-image",
            "name: hourly",
        ],
    );
    let old_path = write(dir, "old.yaml", &old);
    if let Some((code, out, err)) = old_kubectl(&up, "kubectl.1.27", &["apply", "-f", &old_path]) {
        assert_eq!(code, Some(0), "kubectl 1.27 apply: {err}");
        assert!(
            out.contains("crontab.stable.example.com/old-cron created"),
            "{out}"
        );
        let (code, out, err) =
            old_kubectl(&up, "kubectl.1.27", &["explain", "crontabs.spec.replicas"])
                .expect("kubectl.1.27");
        assert_eq!(code, Some(0), "kubectl 1.27 explain: {err}");
        assert!(
            out.contains("How many copies of the job run at once."),
            "{out}"
        );
    }

    // Scale subresource.
    let out = up.ok(&["scale", "crontab/my-cron", "--replicas=3"]);
    assert!(
        out.contains("crontab.stable.example.com/my-cron scaled"),
        "{out}"
    );
    assert_eq!(
        up.ok(&[
            "get",
            "crontab",
            "my-cron",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "3"
    );
    let generation = up.json(&["get", "crontab", "my-cron"])["metadata"]["generation"].clone();
    assert_eq!(generation, 3, "scaling changes the spec");

    // Status subresource: written there, it leaves the generation alone.
    let out = up.ok(&[
        "patch",
        "crontab",
        "my-cron",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"replicas":3}}"#,
    ]);
    assert!(
        out.contains("crontab.stable.example.com/my-cron patched"),
        "{out}"
    );
    let cron = up.json(&["get", "crontab", "my-cron"]);
    assert_eq!(cron["status"]["replicas"], 3, "{cron}");
    assert_eq!(cron["metadata"]["generation"], generation, "{cron}");
    // The scale subresource reads both paths.
    let scale: Value = serde_json::from_str(&up.ok(&[
        "get",
        "--raw",
        "/apis/stable.example.com/v1/namespaces/default/crontabs/my-cron/scale",
    ]))
    .expect("scale json");
    assert_eq!(scale["kind"], "Scale", "{scale}");
    assert_eq!(scale["apiVersion"], "autoscaling/v1", "{scale}");
    assert_eq!(scale["spec"]["replicas"], 3, "{scale}");
    assert_eq!(scale["status"]["replicas"], 3, "{scale}");
    // With a status subresource, the main resource ignores status changes.
    up.ok(&[
        "patch",
        "crontab",
        "my-cron",
        "--type=merge",
        "-p",
        r#"{"status":{"replicas":9}}"#,
    ]);
    assert_eq!(
        up.ok(&[
            "get",
            "crontab",
            "my-cron",
            "-o",
            "jsonpath={.status.replicas}"
        ]),
        "3"
    );

    // Custom resources have no strategic merge patch: 415, and kubectl says which type failed.
    let err = up.fails(
        &[
            "patch",
            "crontab",
            "my-cron",
            "--type=strategic",
            "-p",
            r#"{"spec":{"replicas":2}}"#,
        ],
        None,
    );
    assert!(
        err.contains(
            "application/strategic-merge-patch+json is not supported by stable.example.com/v1, Kind=CronTab"
        ),
        "{err}"
    );
    assert!(
        err.contains(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
        ),
        "{err}"
    );
    // A merge patch of the same change works.
    up.ok(&[
        "patch",
        "crontab",
        "my-cron",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":2}}"#,
    ]);

    // Deleting the CRD waits until it is gone, and takes the resource type with it.
    let out = up.ok(&["delete", "crd", CRD_NAME]);
    assert!(
        out.contains(&format!(
            "customresourcedefinition.apiextensions.k8s.io \"{CRD_NAME}\" deleted"
        )),
        "{out}"
    );
    let err = up.fails(&["get", "crd", CRD_NAME], None);
    assert!(
        err.contains(&format!(
            "customresourcedefinitions.apiextensions.k8s.io \"{CRD_NAME}\" not found"
        )),
        "{err}"
    );
    // A fresh discovery cache, as kubectl's disk cache would still remember crontabs.
    let cache = dir.join("fresh-cache");
    let err = up.fails(
        &[
            "get",
            "crontabs",
            "--cache-dir",
            &cache.display().to_string(),
        ],
        None,
    );
    assert!(
        err.contains(r#"the server doesn't have a resource type "crontabs""#),
        "{err}"
    );
    // With the cache that still lists crontabs, the list itself is refused.
    up.fails(&["get", "crontabs"], None);

    // Deleting the CRD deleted its objects: installed again, it starts empty.
    apply(&up, dir, "crd-again.yaml", CRD);
    up.ok(&[
        "wait",
        "--for=condition=Established",
        &format!("crd/{CRD_NAME}"),
        "--timeout=5s",
    ]);
    let (code, out, err) = up.run(&["get", "crontabs"], None);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "", "{out}");
    assert!(
        err.contains("No resources found in default namespace."),
        "{err}"
    );
}

#[test]
fn openapi_schema_validation() {
    let (up, dir) = up_with_crd();
    let dir = dir.path();

    // Violations of the OpenAPI schema, in Kubernetes' words.
    let err = apply_fails(
        &up,
        dir,
        "short.yaml",
        &crontab(
            "short-name",
            &[r#"cronSpec: "* * * * */5""#, "image: img:1", "name: ab"],
        ),
    );
    assert!(
        err.contains(
            r#"The CronTab "short-name" is invalid: spec.name: Invalid value: "ab": spec.name in body should be at least 3 chars long"#
        ),
        "{err}"
    );
    let err = apply_fails(
        &up,
        dir,
        "pattern.yaml",
        &crontab(
            "bad-spec",
            &["cronSpec: bad", "image: img:1", "name: nightly"],
        ),
    );
    assert!(
        err.contains(
            r#"The CronTab "bad-spec" is invalid: spec.cronSpec: Invalid value: "bad": spec.cronSpec in body should match '^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$'"#
        ),
        "{err}"
    );
    let err = apply_fails(
        &up,
        dir,
        "max.yaml",
        &crontab(
            "too-big",
            &[
                r#"cronSpec: "* * * * */5""#,
                "image: img:1",
                "name: nightly",
                "mode: B",
                "replicas: 11",
            ],
        ),
    );
    assert!(
        err.contains(
            r#"The CronTab "too-big" is invalid: spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10"#
        ),
        "{err}"
    );
    for name in ["short-name", "bad-spec", "too-big"] {
        up.fails(&["get", "crontab", name], None);
    }

    // Unknown fields are pruned when kubectl does not ask for validation ...
    let bogus = |name: &str| {
        crontab(
            name,
            &[
                r#"cronSpec: "* * * * */5""#,
                "image: img:1",
                "name: nightly",
                "bogus: 1",
            ],
        )
    };
    let out = up.ok(&[
        "apply",
        "--validate=false",
        "-f",
        &write(dir, "pruned.yaml", &bogus("pruned")),
    ]);
    assert!(
        out.contains("crontab.stable.example.com/pruned created"),
        "{out}"
    );
    let pruned = up.json(&["get", "crontab", "pruned"]);
    assert!(pruned["spec"].get("bogus").is_none(), "{pruned}");
    assert_eq!(pruned["spec"]["name"], "nightly", "{pruned}");

    // ... and refused under kubectl's default --validate=strict (fieldValidation=Strict).
    let err = apply_fails(&up, dir, "bogus.yaml", &bogus("bogus"));
    assert!(
        err.contains(
            r#"error when creating "#
        ) && err.contains(
            r#"CronTab in version "v1" cannot be handled as a CronTab: strict decoding error: unknown field "spec.bogus""#
        ),
        "{err}"
    );
    up.fails(&["get", "crontab", "bogus"], None);

    // An enum violation blocks the CRD's CEL rules, and Kubernetes says so in a second cause.
    let err = apply_fails(
        &up,
        dir,
        "mode.yaml",
        &crontab(
            "bad-mode",
            &[
                r#"cronSpec: "* * * * */5""#,
                "image: img:1",
                "name: nightly",
                "mode: C",
            ],
        ),
    );
    assert!(
        err.contains(r#"The CronTab "bad-mode" is invalid"#),
        "{err}"
    );
    assert!(
        err.contains(r#"spec.mode: Unsupported value: "C": supported values: "A", "B""#),
        "{err}"
    );
    assert!(
        err.contains("* <nil>: Invalid value: ")
            && err.contains(
                "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"
            ),
        "{err}"
    );
}

#[test]
fn cel_validation_rules() {
    let (up, dir) = up_with_crd();
    let dir = dir.path();

    // A rule across fields.
    let err = apply_fails(
        &up,
        dir,
        "cel.yaml",
        &crontab(
            "too-many",
            &[
                r#"cronSpec: "* * * * */5""#,
                "image: img:1",
                "name: nightly",
                "mode: A",
                "replicas: 7",
            ],
        ),
    );
    assert!(
        err.contains(
            r#"The CronTab "too-many" is invalid: spec: Invalid value: "object": more than 5 replicas need mode B"#
        ),
        "{err}"
    );
    let out = apply(
        &up,
        dir,
        "cel-ok.yaml",
        &crontab(
            "many",
            &[
                r#"cronSpec: "* * * * */5""#,
                "image: img:1",
                "name: nightly",
                "mode: B",
                "replicas: 7",
            ],
        ),
    );
    assert!(
        out.contains("crontab.stable.example.com/many created"),
        "{out}"
    );

    // A transition rule: any image on create, no other one afterwards.
    let valid = [
        r#"cronSpec: "* * * * */5""#,
        "image: img:1",
        "name: nightly",
    ];
    let out = apply(&up, dir, "imm.yaml", &crontab("imm", &valid));
    assert!(
        out.contains("crontab.stable.example.com/imm created"),
        "{out}"
    );
    let err = apply_fails(
        &up,
        dir,
        "imm2.yaml",
        &crontab(
            "imm",
            &[
                r#"cronSpec: "* * * * */5""#,
                "image: img:2",
                "name: nightly",
            ],
        ),
    );
    assert!(
        err.contains(
            r#"The CronTab "imm" is invalid: spec.image: Invalid value: "string": image is immutable"#
        ),
        "{err}"
    );
    assert_eq!(
        up.ok(&["get", "crontab", "imm", "-o", "jsonpath={.spec.image}"]),
        "img:1"
    );
    // Other changes to the same object still go through.
    let out = apply(
        &up,
        dir,
        "imm3.yaml",
        &crontab(
            "imm",
            &[r#"cronSpec: "* * * * */5""#, "image: img:1", "name: weekly"],
        ),
    );
    assert!(
        out.contains("crontab.stable.example.com/imm configured"),
        "{out}"
    );

    // A bound violation (maximum) does not block CEL: both errors come back, as a list.
    let err = apply_fails(
        &up,
        dir,
        "max-a.yaml",
        &crontab(
            "too-big-a",
            &[
                r#"cronSpec: "* * * * */5""#,
                "image: img:1",
                "name: nightly",
                "mode: A",
                "replicas: 11",
            ],
        ),
    );
    assert!(
        err.contains(r#"The CronTab "too-big-a" is invalid: "#)
            && err.contains(
                "* spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10\n"
            )
            && err.contains("* spec: Invalid value: \"object\": more than 5 replicas need mode B\n"),
        "{err}"
    );
}

#[test]
fn server_side_apply_on_a_custom_resource() {
    let (up, dir) = up_with_crd();
    let dir = dir.path();

    let mine = crontab(
        "ssa-cron",
        &[
            r#"cronSpec: "* * * * */5""#,
            "image: img:1",
            "name: nightly",
            "replicas: 2",
        ],
    );
    let out = up.ok(&[
        "apply",
        "--server-side",
        "-f",
        &write(dir, "ssa.yaml", &mine),
    ]);
    assert!(
        out.contains("crontab.stable.example.com/ssa-cron serverside-applied"),
        "{out}"
    );
    let cron = up.json(&["get", "crontab", "ssa-cron", "--show-managed-fields"]);
    let entry = managed_fields(&cron, "kubectl");
    assert_eq!(entry["operation"], "Apply", "{cron}");
    assert_eq!(entry["fieldsType"], "FieldsV1", "{cron}");
    assert_eq!(
        entry["fieldsV1"],
        json!({"f:spec": {"f:cronSpec": {}, "f:image": {}, "f:name": {}, "f:replicas": {}}}),
        "{cron}"
    );

    // Another manager wants a different replicas: a conflict naming the owner and the field.
    let theirs = write(
        dir,
        "ssa-other.yaml",
        &mine.replace("replicas: 2", "replicas: 4"),
    );
    let err = up.fails(
        &[
            "apply",
            "--server-side",
            "--field-manager=other",
            "-f",
            &theirs,
        ],
        None,
    );
    assert!(
        err.contains(r#"Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas"#),
        "{err}"
    );
    // kubectl explains the way out only when the server answered 409 Conflict.
    assert!(err.contains("--force-conflicts"), "{err}");
    assert_eq!(
        up.ok(&[
            "get",
            "crontab",
            "ssa-cron",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "2"
    );

    // Forced, the field changes hands; both managers stay.
    let out = up.ok(&[
        "apply",
        "--server-side",
        "--field-manager=other",
        "--force-conflicts",
        "-f",
        &theirs,
    ]);
    assert!(
        out.contains("crontab.stable.example.com/ssa-cron serverside-applied"),
        "{out}"
    );
    let cron = up.json(&["get", "crontab", "ssa-cron", "--show-managed-fields"]);
    assert_eq!(cron["spec"]["replicas"], 4, "{cron}");
    for manager in ["kubectl", "other"] {
        let entry = managed_fields(&cron, manager);
        assert_eq!(entry["operation"], "Apply", "{manager}: {cron}");
        assert_eq!(entry["fieldsType"], "FieldsV1", "{manager}: {cron}");
        assert_eq!(entry["apiVersion"], "stable.example.com/v1", "{cron}");
    }
    assert_eq!(
        managed_fields(&cron, "other")["fieldsV1"],
        json!({"f:spec": {"f:cronSpec": {}, "f:image": {}, "f:name": {}, "f:replicas": {}}}),
        "{cron}"
    );
    assert_eq!(
        managed_fields(&cron, "kubectl")["fieldsV1"],
        json!({"f:spec": {"f:cronSpec": {}, "f:image": {}, "f:name": {}}}),
        "{cron}"
    );

    // Apply types the patch against the schema: an undeclared field is refused as such.
    let bogus = write(
        dir,
        "ssa-bogus.yaml",
        &crontab(
            "bogus-ssa",
            &[
                r#"cronSpec: "* * * * */5""#,
                "image: img:1",
                "name: nightly",
                "bogus: 1",
            ],
        ),
    );
    let err = up.fails(&["apply", "--server-side", "-f", &bogus], None);
    assert!(
        err.contains(
            "failed to create typed patch object (default/bogus-ssa; stable.example.com/v1, Kind=CronTab): .spec.bogus: field not declared in schema"
        ),
        "{err}"
    );
    up.fails(&["get", "crontab", "bogus-ssa"], None);
}

#[test]
fn server_side_apply_against_kubectl_create() {
    let up = Up::start();
    let dir = tempfile::tempdir().expect("temp dir");

    // An Update manager (kubectl create) owns data.a; an apply wants it changed.
    let out = up.ok(&["create", "configmap", "ssa-cm", "--from-literal=a=1"]);
    assert!(out.contains("configmap/ssa-cm created"), "{out}");
    let cm = up.json(&["get", "configmap", "ssa-cm", "--show-managed-fields"]);
    let entry = managed_fields(&cm, "kubectl-create");
    assert_eq!(entry["operation"], "Update", "{cm}");
    assert_eq!(entry["apiVersion"], "v1", "{cm}");
    assert_eq!(
        entry["fieldsV1"],
        json!({"f:data": {".": {}, "f:a": {}}}),
        "{cm}"
    );
    let manifest = write(
        dir.path(),
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa-cm\ndata:\n  a: \"2\"\n",
    );
    let err = up.fails(&["apply", "--server-side", "-f", &manifest], None);
    assert!(
        err.contains(
            r#"Apply failed with 1 conflict: conflict with "kubectl-create" using v1: .data.a"#
        ),
        "{err}"
    );
    assert!(err.contains("--force-conflicts"), "{err}");
    assert_eq!(
        up.ok(&["get", "cm", "ssa-cm", "-o", "jsonpath={.data.a}"]),
        "1"
    );

    let out = up.ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        &manifest,
    ]);
    assert!(out.contains("configmap/ssa-cm serverside-applied"), "{out}");
    let cm = up.json(&["get", "configmap", "ssa-cm", "--show-managed-fields"]);
    assert_eq!(cm["data"]["a"], "2", "{cm}");
    // The Update manager keeps the map itself, having lost only data.a ...
    let entry = managed_fields(&cm, "kubectl-create");
    assert_eq!(entry["fieldsV1"], json!({"f:data": {}}), "{cm}");
    // ... and Apply owns the leaves it set, not the map that holds them.
    let entry = managed_fields(&cm, "kubectl");
    assert_eq!(entry["operation"], "Apply", "{cm}");
    assert_eq!(entry["fieldsType"], "FieldsV1", "{cm}");
    assert_eq!(entry["fieldsV1"], json!({"f:data": {"f:a": {}}}), "{cm}");
}

/// Moving an object from client-side to server-side apply, as the kubectl docs describe:
/// `kubectl apply --server-side` takes over the fields client-side apply set, without
/// conflicts, and keeps the last-applied annotation current.
#[test]
fn client_side_apply_upgrades_to_server_side_apply() {
    let up = Up::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let manifest = |a: &str| {
        write(
            dir.path(),
            "upgrade.yaml",
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: upgrade\ndata:\n  a: \"{a}\"\n"
            ),
        )
    };
    let out = up.ok(&["apply", "-f", &manifest("1")]);
    assert!(out.contains("configmap/upgrade created"), "{out}");
    let cm = up.json(&["get", "configmap", "upgrade", "--show-managed-fields"]);
    assert_eq!(
        managed_fields(&cm, "kubectl-client-side-apply")["operation"],
        "Update",
        "{cm}"
    );

    let out = up.ok(&["apply", "--server-side", "-f", &manifest("2")]);
    assert!(
        out.contains("configmap/upgrade serverside-applied"),
        "{out}"
    );
    let cm = up.json(&["get", "configmap", "upgrade", "--show-managed-fields"]);
    assert_eq!(cm["data"]["a"], "2", "{cm}");
    let entry = managed_fields(&cm, "kubectl");
    assert_eq!(entry["operation"], "Apply", "{cm}");
    assert_eq!(entry["fieldsV1"], json!({"f:data": {"f:a": {}}}), "{cm}");
    let last_applied: Value = serde_json::from_str(
        cm["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .expect("last-applied annotation"),
    )
    .expect("last-applied is JSON");
    assert_eq!(last_applied["data"], json!({"a": "2"}), "{cm}");

    // Client-side apply still works from the updated annotation.
    let out = up.ok(&["apply", "-f", &manifest("3")]);
    assert!(out.contains("configmap/upgrade configured"), "{out}");
    assert_eq!(
        up.ok(&["get", "cm", "upgrade", "-o", "jsonpath={.data.a}"]),
        "3"
    );
}
