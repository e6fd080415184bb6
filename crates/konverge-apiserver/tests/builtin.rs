//! The built-in resources of Kubernetes 1.33, through a real `kube::Client`: discovery as
//! kube-apiserver lists it, the objects a new cluster starts with, field selectors, the
//! resources served in two forms, the review resources and the subresources that act.

mod common;

use std::time::Duration;

use common::eventually::eventually;
use common::{Backend, TestServer};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

/// Every resource and subresource kube-apiserver 1.33 lists in discovery, as it lists them:
/// (group, version, name, kind, namespaced, singularName, shortNames, categories, verbs,
/// storageVersionHash, subresource group, subresource version).
type Row = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

#[rustfmt::skip]
const KUBE_APISERVER_1_33: &[Row] = &[
    ("", "v1", "bindings", "Binding", true, "binding", "", "", "create", "", "", ""),
    ("", "v1", "componentstatuses", "ComponentStatus", false, "componentstatus", "cs", "", "get,list", "", "", ""),
    ("", "v1", "configmaps", "ConfigMap", true, "configmap", "cm", "", "create,delete,deletecollection,get,list,patch,update,watch", "qFsyl6wFWjQ=", "", ""),
    ("", "v1", "endpoints", "Endpoints", true, "endpoints", "ep", "", "create,delete,deletecollection,get,list,patch,update,watch", "fWeeMqaN/OA=", "", ""),
    ("", "v1", "events", "Event", true, "event", "ev", "", "create,delete,deletecollection,get,list,patch,update,watch", "r2yiGXH7wu8=", "", ""),
    ("", "v1", "limitranges", "LimitRange", true, "limitrange", "limits", "", "create,delete,deletecollection,get,list,patch,update,watch", "EBKMFVe6cwo=", "", ""),
    ("", "v1", "namespaces", "Namespace", false, "namespace", "ns", "", "create,delete,get,list,patch,update,watch", "Q3oi5N2YM8M=", "", ""),
    ("", "v1", "namespaces/finalize", "Namespace", false, "", "", "", "update", "", "", ""),
    ("", "v1", "namespaces/status", "Namespace", false, "", "", "", "get,patch,update", "", "", ""),
    ("", "v1", "nodes", "Node", false, "node", "no", "", "create,delete,deletecollection,get,list,patch,update,watch", "XwShjMxG9Fs=", "", ""),
    ("", "v1", "nodes/proxy", "NodeProxyOptions", false, "", "", "", "create,delete,get,patch,update", "", "", ""),
    ("", "v1", "nodes/status", "Node", false, "", "", "", "get,patch,update", "", "", ""),
    ("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", true, "persistentvolumeclaim", "pvc", "", "create,delete,deletecollection,get,list,patch,update,watch", "QWTyNDq0dC4=", "", ""),
    ("", "v1", "persistentvolumeclaims/status", "PersistentVolumeClaim", true, "", "", "", "get,patch,update", "", "", ""),
    ("", "v1", "persistentvolumes", "PersistentVolume", false, "persistentvolume", "pv", "", "create,delete,deletecollection,get,list,patch,update,watch", "HN/zwEC+JgM=", "", ""),
    ("", "v1", "persistentvolumes/status", "PersistentVolume", false, "", "", "", "get,patch,update", "", "", ""),
    ("", "v1", "pods", "Pod", true, "pod", "po", "all", "create,delete,deletecollection,get,list,patch,update,watch", "xPOwRZ+Yhw8=", "", ""),
    ("", "v1", "pods/attach", "PodAttachOptions", true, "", "", "", "create,get", "", "", ""),
    ("", "v1", "pods/binding", "Binding", true, "", "", "", "create", "", "", ""),
    ("", "v1", "pods/ephemeralcontainers", "Pod", true, "", "", "", "get,patch,update", "", "", ""),
    ("", "v1", "pods/eviction", "Eviction", true, "", "", "", "create", "", "policy", "v1"),
    ("", "v1", "pods/exec", "PodExecOptions", true, "", "", "", "create,get", "", "", ""),
    ("", "v1", "pods/log", "Pod", true, "", "", "", "get", "", "", ""),
    ("", "v1", "pods/portforward", "PodPortForwardOptions", true, "", "", "", "create,get", "", "", ""),
    ("", "v1", "pods/proxy", "PodProxyOptions", true, "", "", "", "create,delete,get,patch,update", "", "", ""),
    ("", "v1", "pods/resize", "Pod", true, "", "", "", "get,patch,update", "", "", ""),
    ("", "v1", "pods/status", "Pod", true, "", "", "", "get,patch,update", "", "", ""),
    ("", "v1", "podtemplates", "PodTemplate", true, "podtemplate", "", "", "create,delete,deletecollection,get,list,patch,update,watch", "LIXB2x4IFpk=", "", ""),
    ("", "v1", "replicationcontrollers", "ReplicationController", true, "replicationcontroller", "rc", "all", "create,delete,deletecollection,get,list,patch,update,watch", "Jond2If31h0=", "", ""),
    ("", "v1", "replicationcontrollers/scale", "Scale", true, "", "", "", "get,patch,update", "", "autoscaling", "v1"),
    ("", "v1", "replicationcontrollers/status", "ReplicationController", true, "", "", "", "get,patch,update", "", "", ""),
    ("", "v1", "resourcequotas", "ResourceQuota", true, "resourcequota", "quota", "", "create,delete,deletecollection,get,list,patch,update,watch", "8uhSgffRX6w=", "", ""),
    ("", "v1", "resourcequotas/status", "ResourceQuota", true, "", "", "", "get,patch,update", "", "", ""),
    ("", "v1", "secrets", "Secret", true, "secret", "", "", "create,delete,deletecollection,get,list,patch,update,watch", "S6u1pOWzb84=", "", ""),
    ("", "v1", "serviceaccounts", "ServiceAccount", true, "serviceaccount", "sa", "", "create,delete,deletecollection,get,list,patch,update,watch", "pbx9ZvyFpBE=", "", ""),
    ("", "v1", "serviceaccounts/token", "TokenRequest", true, "", "", "", "create", "", "authentication.k8s.io", "v1"),
    ("", "v1", "services", "Service", true, "service", "svc", "all", "create,delete,deletecollection,get,list,patch,update,watch", "0/CO1lhkEBI=", "", ""),
    ("", "v1", "services/proxy", "ServiceProxyOptions", true, "", "", "", "create,delete,get,patch,update", "", "", ""),
    ("", "v1", "services/status", "Service", true, "", "", "", "get,patch,update", "", "", ""),
    ("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", false, "mutatingwebhookconfiguration", "", "api-extensions", "create,delete,deletecollection,get,list,patch,update,watch", "Sqi0GUgDaX0=", "", ""),
    ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy", false, "validatingadmissionpolicy", "", "api-extensions", "create,delete,deletecollection,get,list,patch,update,watch", "6OxvlMmQ6is=", "", ""),
    ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies/status", "ValidatingAdmissionPolicy", false, "", "", "", "get,patch,update", "", "", ""),
    ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding", false, "validatingadmissionpolicybinding", "", "api-extensions", "create,delete,deletecollection,get,list,patch,update,watch", "v9715VZqakg=", "", ""),
    ("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration", false, "validatingwebhookconfiguration", "", "api-extensions", "create,delete,deletecollection,get,list,patch,update,watch", "B0wHjQmsGNk=", "", ""),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", false, "customresourcedefinition", "crd,crds", "api-extensions", "create,delete,deletecollection,get,list,patch,update,watch", "jfWCUB31mvA=", "", ""),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions/status", "CustomResourceDefinition", false, "", "", "", "get,patch,update", "", "", ""),
    ("apiregistration.k8s.io", "v1", "apiservices", "APIService", false, "apiservice", "", "api-extensions", "create,delete,deletecollection,get,list,patch,update,watch", "InPBPD7+PqM=", "", ""),
    ("apiregistration.k8s.io", "v1", "apiservices/status", "APIService", false, "", "", "", "get,patch,update", "", "", ""),
    ("apps", "v1", "controllerrevisions", "ControllerRevision", true, "controllerrevision", "", "", "create,delete,deletecollection,get,list,patch,update,watch", "85nkx63pcBU=", "", ""),
    ("apps", "v1", "daemonsets", "DaemonSet", true, "daemonset", "ds", "all", "create,delete,deletecollection,get,list,patch,update,watch", "dd7pWHUlMKQ=", "", ""),
    ("apps", "v1", "daemonsets/status", "DaemonSet", true, "", "", "", "get,patch,update", "", "", ""),
    ("apps", "v1", "deployments", "Deployment", true, "deployment", "deploy", "all", "create,delete,deletecollection,get,list,patch,update,watch", "8aSe+NMegvE=", "", ""),
    ("apps", "v1", "deployments/scale", "Scale", true, "", "", "", "get,patch,update", "", "autoscaling", "v1"),
    ("apps", "v1", "deployments/status", "Deployment", true, "", "", "", "get,patch,update", "", "", ""),
    ("apps", "v1", "replicasets", "ReplicaSet", true, "replicaset", "rs", "all", "create,delete,deletecollection,get,list,patch,update,watch", "P1RzHs8/mWQ=", "", ""),
    ("apps", "v1", "replicasets/scale", "Scale", true, "", "", "", "get,patch,update", "", "autoscaling", "v1"),
    ("apps", "v1", "replicasets/status", "ReplicaSet", true, "", "", "", "get,patch,update", "", "", ""),
    ("apps", "v1", "statefulsets", "StatefulSet", true, "statefulset", "sts", "all", "create,delete,deletecollection,get,list,patch,update,watch", "H+vl74LkKdo=", "", ""),
    ("apps", "v1", "statefulsets/scale", "Scale", true, "", "", "", "get,patch,update", "", "autoscaling", "v1"),
    ("apps", "v1", "statefulsets/status", "StatefulSet", true, "", "", "", "get,patch,update", "", "", ""),
    ("authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", false, "selfsubjectreview", "", "", "create", "", "", ""),
    ("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", false, "tokenreview", "", "", "create", "", "", ""),
    ("authorization.k8s.io", "v1", "localsubjectaccessreviews", "LocalSubjectAccessReview", true, "localsubjectaccessreview", "", "", "create", "", "", ""),
    ("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", false, "selfsubjectaccessreview", "", "", "create", "", "", ""),
    ("authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview", false, "selfsubjectrulesreview", "", "", "create", "", "", ""),
    ("authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", false, "subjectaccessreview", "", "", "create", "", "", ""),
    ("autoscaling", "v1", "horizontalpodautoscalers", "HorizontalPodAutoscaler", true, "horizontalpodautoscaler", "hpa", "all", "create,delete,deletecollection,get,list,patch,update,watch", "qwQve8ut294=", "", ""),
    ("autoscaling", "v1", "horizontalpodautoscalers/status", "HorizontalPodAutoscaler", true, "", "", "", "get,patch,update", "", "", ""),
    ("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", true, "horizontalpodautoscaler", "hpa", "all", "create,delete,deletecollection,get,list,patch,update,watch", "qwQve8ut294=", "", ""),
    ("autoscaling", "v2", "horizontalpodautoscalers/status", "HorizontalPodAutoscaler", true, "", "", "", "get,patch,update", "", "", ""),
    ("batch", "v1", "cronjobs", "CronJob", true, "cronjob", "cj", "all", "create,delete,deletecollection,get,list,patch,update,watch", "sd5LIXh4Fjs=", "", ""),
    ("batch", "v1", "cronjobs/status", "CronJob", true, "", "", "", "get,patch,update", "", "", ""),
    ("batch", "v1", "jobs", "Job", true, "job", "", "all", "create,delete,deletecollection,get,list,patch,update,watch", "mudhfqk/qZY=", "", ""),
    ("batch", "v1", "jobs/status", "Job", true, "", "", "", "get,patch,update", "", "", ""),
    ("certificates.k8s.io", "v1", "certificatesigningrequests", "CertificateSigningRequest", false, "certificatesigningrequest", "csr", "", "create,delete,deletecollection,get,list,patch,update,watch", "95fRKMXA+00=", "", ""),
    ("certificates.k8s.io", "v1", "certificatesigningrequests/approval", "CertificateSigningRequest", false, "", "", "", "get,patch,update", "", "", ""),
    ("certificates.k8s.io", "v1", "certificatesigningrequests/status", "CertificateSigningRequest", false, "", "", "", "get,patch,update", "", "", ""),
    ("coordination.k8s.io", "v1", "leases", "Lease", true, "lease", "", "", "create,delete,deletecollection,get,list,patch,update,watch", "gqkMMb/YqFM=", "", ""),
    ("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", true, "endpointslice", "", "", "create,delete,deletecollection,get,list,patch,update,watch", "qgS0xkrxYAI=", "", ""),
    ("events.k8s.io", "v1", "events", "Event", true, "event", "ev", "", "create,delete,deletecollection,get,list,patch,update,watch", "r2yiGXH7wu8=", "", ""),
    ("flowcontrol.apiserver.k8s.io", "v1", "flowschemas", "FlowSchema", false, "flowschema", "", "", "create,delete,deletecollection,get,list,patch,update,watch", "GJVAJZSZBIw=", "", ""),
    ("flowcontrol.apiserver.k8s.io", "v1", "flowschemas/status", "FlowSchema", false, "", "", "", "get,patch,update", "", "", ""),
    ("flowcontrol.apiserver.k8s.io", "v1", "prioritylevelconfigurations", "PriorityLevelConfiguration", false, "prioritylevelconfiguration", "", "", "create,delete,deletecollection,get,list,patch,update,watch", "Kir5PVfvNeI=", "", ""),
    ("flowcontrol.apiserver.k8s.io", "v1", "prioritylevelconfigurations/status", "PriorityLevelConfiguration", false, "", "", "", "get,patch,update", "", "", ""),
    ("networking.k8s.io", "v1", "ingressclasses", "IngressClass", false, "ingressclass", "", "", "create,delete,deletecollection,get,list,patch,update,watch", "l/iqIbDgFyQ=", "", ""),
    ("networking.k8s.io", "v1", "ingresses", "Ingress", true, "ingress", "ing", "", "create,delete,deletecollection,get,list,patch,update,watch", "39NQlfNR+bo=", "", ""),
    ("networking.k8s.io", "v1", "ingresses/status", "Ingress", true, "", "", "", "get,patch,update", "", "", ""),
    ("networking.k8s.io", "v1", "ipaddresses", "IPAddress", false, "ipaddress", "ip", "", "create,delete,deletecollection,get,list,patch,update,watch", "O4H8VxQhW5Y=", "", ""),
    ("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", true, "networkpolicy", "netpol", "", "create,delete,deletecollection,get,list,patch,update,watch", "YpfwF18m1G8=", "", ""),
    ("networking.k8s.io", "v1", "servicecidrs", "ServiceCIDR", false, "servicecidr", "", "", "create,delete,deletecollection,get,list,patch,update,watch", "8ufAXOnr3Yg=", "", ""),
    ("networking.k8s.io", "v1", "servicecidrs/status", "ServiceCIDR", false, "", "", "", "get,patch,update", "", "", ""),
    ("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", false, "runtimeclass", "", "", "create,delete,deletecollection,get,list,patch,update,watch", "WQTu1GL3T2Q=", "", ""),
    ("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", true, "poddisruptionbudget", "pdb", "", "create,delete,deletecollection,get,list,patch,update,watch", "EVWiDmWqyJw=", "", ""),
    ("policy", "v1", "poddisruptionbudgets/status", "PodDisruptionBudget", true, "", "", "", "get,patch,update", "", "", ""),
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", false, "clusterrolebinding", "", "", "create,delete,deletecollection,get,list,patch,update,watch", "48tpQ8gZHFc=", "", ""),
    ("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", false, "clusterrole", "", "", "create,delete,deletecollection,get,list,patch,update,watch", "bYE5ZWDrJ44=", "", ""),
    ("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", true, "rolebinding", "", "", "create,delete,deletecollection,get,list,patch,update,watch", "eGsCzGH6b1g=", "", ""),
    ("rbac.authorization.k8s.io", "v1", "roles", "Role", true, "role", "", "", "create,delete,deletecollection,get,list,patch,update,watch", "7FuwZcIIItM=", "", ""),
    ("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", false, "priorityclass", "pc", "", "create,delete,deletecollection,get,list,patch,update,watch", "1QwjyaZjj3Y=", "", ""),
    ("storage.k8s.io", "v1", "csidrivers", "CSIDriver", false, "csidriver", "", "", "create,delete,deletecollection,get,list,patch,update,watch", "hL6j/rwBV5w=", "", ""),
    ("storage.k8s.io", "v1", "csinodes", "CSINode", false, "csinode", "", "", "create,delete,deletecollection,get,list,patch,update,watch", "Pe62DkZtjuo=", "", ""),
    ("storage.k8s.io", "v1", "csistoragecapacities", "CSIStorageCapacity", true, "csistoragecapacity", "", "", "create,delete,deletecollection,get,list,patch,update,watch", "xeVl+2Ly1kE=", "", ""),
    ("storage.k8s.io", "v1", "storageclasses", "StorageClass", false, "storageclass", "sc", "", "create,delete,deletecollection,get,list,patch,update,watch", "K+m6uJwbjGY=", "", ""),
    ("storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", false, "volumeattachment", "", "", "create,delete,deletecollection,get,list,patch,update,watch", "tJx/ezt6UDU=", "", ""),
    ("storage.k8s.io", "v1", "volumeattachments/status", "VolumeAttachment", false, "", "", "", "get,patch,update", "", "", ""),
];

async fn get(t: &TestServer, path: &str) -> Value {
    let (code, body) = t.raw("GET", path, None, Vec::new()).await;
    assert_eq!(code, 200, "GET {path}: {body}");
    body
}

async fn send(t: &TestServer, method: &str, path: &str, body: Value) -> (u16, Value) {
    t.raw(
        method,
        path,
        Some("application/json"),
        serde_json::to_vec(&body).unwrap(),
    )
    .await
}

fn csv(list: &Value) -> String {
    list.as_array()
        .map(|a| {
            a.iter()
                .map(|v| v.as_str().unwrap_or("").to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// `kubectl api-resources` reads these lists: every resource and subresource must be there,
/// with kube-apiserver's names, kinds, scope, short names, categories, verbs and hashes, and
/// nothing else.
#[tokio::test]
async fn discovery_lists_what_kube_apiserver_lists() {
    let t = TestServer::start(Backend::Memory).await;
    let mut group_versions: Vec<(&str, &str)> = KUBE_APISERVER_1_33
        .iter()
        .map(|row| (row.0, row.1))
        .collect();
    group_versions.dedup();
    let mut seen = 0;
    for (group, version) in group_versions {
        let path = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let list = get(&t, &path).await;
        let served: Vec<&Value> = list["resources"].as_array().unwrap().iter().collect();
        let expected: Vec<_> = KUBE_APISERVER_1_33
            .iter()
            .filter(|row| row.0 == group && row.1 == version)
            .collect();
        let served_names: Vec<&str> = served.iter().map(|r| r["name"].as_str().unwrap()).collect();
        let expected_names: Vec<&str> = expected.iter().map(|r| r.2).collect();
        assert_eq!(served_names, expected_names, "{path}");
        for (row, entry) in expected.iter().zip(&served) {
            let (
                _,
                _,
                name,
                kind,
                namespaced,
                singular,
                short,
                categories,
                verbs,
                hash,
                sub_group,
                sub_version,
            ) = **row;
            assert_eq!(entry["kind"], kind, "{path} {name}");
            assert_eq!(entry["namespaced"], namespaced, "{path} {name}");
            assert_eq!(entry["singularName"], singular, "{path} {name}");
            assert_eq!(csv(&entry["shortNames"]), short, "{path} {name}");
            assert_eq!(csv(&entry["categories"]), categories, "{path} {name}");
            assert_eq!(csv(&entry["verbs"]), verbs, "{path} {name}");
            assert_eq!(
                entry["storageVersionHash"].as_str().unwrap_or(""),
                hash,
                "{path} {name}"
            );
            assert_eq!(
                entry["group"].as_str().unwrap_or(""),
                sub_group,
                "{path} {name}"
            );
            assert_eq!(
                entry["version"].as_str().unwrap_or(""),
                sub_version,
                "{path} {name}"
            );
            seen += 1;
        }
    }
    assert_eq!(seen, KUBE_APISERVER_1_33.len());
    // /apis lists the groups in kube-apiserver's order, autoscaling preferring v2.
    let groups = get(&t, "/apis").await;
    let names: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "apiregistration.k8s.io",
            "apps",
            "events.k8s.io",
            "authentication.k8s.io",
            "authorization.k8s.io",
            "autoscaling",
            "batch",
            "certificates.k8s.io",
            "networking.k8s.io",
            "policy",
            "rbac.authorization.k8s.io",
            "storage.k8s.io",
            "admissionregistration.k8s.io",
            "apiextensions.k8s.io",
            "scheduling.k8s.io",
            "coordination.k8s.io",
            "node.k8s.io",
            "discovery.k8s.io",
            "flowcontrol.apiserver.k8s.io",
        ]
    );
    let autoscaling = get(&t, "/apis/autoscaling").await;
    assert_eq!(autoscaling["preferredVersion"]["version"], "v2");
}

fn api(t: &TestServer, group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    let _ = t;
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// What a new cluster has: kube-apiserver's bootstrap objects, and what
/// kube-controller-manager puts in every namespace.
#[tokio::test]
async fn a_new_cluster_has_what_kubernetes_bootstraps() {
    let t = TestServer::start_with(Backend::Memory, |b| {
        b.root_ca("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    })
    .await;
    let client = t.client.clone();
    // The server is settled when it starts: the system namespaces already have their
    // defaults and the aggregated roles their rules, and nothing writes after that (a
    // client's first write is the next revision, and a test's watch sees only its own).
    let settled_at = t.store.current_revision().await.unwrap();
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        assert!(accounts.get_opt("default").await.unwrap().is_some(), "{ns}");
        assert!(
            maps.get_opt("kube-root-ca.crt").await.unwrap().is_some(),
            "{ns}"
        );
    }
    // Real time for the loops' passes (20 ms after a change) to have written, were they to
    // write again what they made: what is asserted is that nothing is written.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(t.store.current_revision().await.unwrap(), settled_at);

    // Every namespace, old and new, gets a default ServiceAccount and the root CA.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap(),
        )
        .await
        .unwrap();
    for ns in ["default", "kube-system", "team"] {
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        eventually(&format!("the {ns} namespace's defaults"), || async {
            accounts.get_opt("default").await.unwrap().is_some()
                && maps.get_opt("kube-root-ca.crt").await.unwrap().is_some()
        })
        .await;
        let ca = maps.get("kube-root-ca.crt").await.unwrap();
        assert!(ca.data.unwrap()["ca.crt"].starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(
            ca.metadata.annotations.unwrap()["kubernetes.io/description"]
                .starts_with("Contains a CA bundle")
        );
    }
    // Deleted, the default ServiceAccount comes back.
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "team");
    accounts
        .delete("default", &Default::default())
        .await
        .unwrap();
    eventually("the default ServiceAccount to come back", || async {
        accounts.get_opt("default").await.unwrap().is_some()
    })
    .await;

    // Bootstrap RBAC, with admin, edit and view aggregated from their parts.
    let roles = Api::<DynamicObject>::all_with(
        client.clone(),
        &api(
            &t,
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
        ),
    );
    let admin = roles.get("cluster-admin").await.unwrap();
    assert_eq!(
        admin.data["rules"][0],
        json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]})
    );
    let rules = |role: &DynamicObject| role.data["rules"].as_array().unwrap().clone();
    let view = rules(&roles.get("view").await.unwrap());
    let edit = rules(&roles.get("edit").await.unwrap());
    let admin = rules(&roles.get("admin").await.unwrap());
    assert!(!view.is_empty());
    assert!(view.iter().all(|r| edit.contains(r)) && edit.len() > view.len());
    assert!(edit.iter().all(|r| admin.contains(r)) && admin.len() > edit.len());
    let bindings = Api::<DynamicObject>::all_with(
        client.clone(),
        &api(
            &t,
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
        ),
    );
    let binding = bindings.get("cluster-admin").await.unwrap();
    assert_eq!(binding.data["subjects"][0]["name"], "system:masters");
    assert!(bindings.get("system:public-info-viewer").await.is_ok());

    // The system priority classes, defaulted.
    let classes = Api::<DynamicObject>::all_with(
        client.clone(),
        &api(
            &t,
            "scheduling.k8s.io",
            "v1",
            "PriorityClass",
            "priorityclasses",
        ),
    );
    let critical = classes.get("system-node-critical").await.unwrap();
    assert_eq!(critical.data["value"], 2000001000);
    assert!(classes.get("system-cluster-critical").await.is_ok());

    // The kubernetes Service's EndpointSlice, and an APIService per built-in group-version.
    let slices = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        "default",
        &api(
            &t,
            "discovery.k8s.io",
            "v1",
            "EndpointSlice",
            "endpointslices",
        ),
    );
    let slice = slices.get("kubernetes").await.unwrap();
    assert_eq!(
        slice.metadata.labels.unwrap()["kubernetes.io/service-name"],
        "kubernetes"
    );
    let services = Api::<DynamicObject>::all_with(
        client.clone(),
        &api(
            &t,
            "apiregistration.k8s.io",
            "v1",
            "APIService",
            "apiservices",
        ),
    );
    let listed = services.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 20);
    let apps = services.get("v1.apps").await.unwrap();
    assert_eq!(apps.data["spec"]["groupPriorityMinimum"], 17800);
    assert_eq!(apps.data["status"]["conditions"][0]["reason"], "Local");
    assert!(services.get("v1.").await.is_ok());
}

/// Every Namespace is labelled with its name, whatever a client sends, as kube-apiserver
/// labels it since 1.22: namespace selectors match one namespace by that label.
#[tokio::test]
async fn namespaces_carry_their_name_label() {
    const LABEL: &str = "kubernetes.io/metadata.name";
    let t = TestServer::start(Backend::Memory).await;
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let got = get(&t, &format!("/api/v1/namespaces/{ns}")).await;
        assert_eq!(got["metadata"]["labels"][LABEL], ns, "{got}");
    }
    // Named, generated, and with a label of the same key saying something else.
    let (code, named) = send(
        &t,
        "POST",
        "/api/v1/namespaces",
        json!({"metadata": {"name": "team", "labels": {LABEL: "other", "tier": "a"}}}),
    )
    .await;
    assert_eq!(code, 200, "{named}");
    assert_eq!(
        named["metadata"]["labels"],
        json!({LABEL: "team", "tier": "a"})
    );
    let (code, generated) = send(
        &t,
        "POST",
        "/api/v1/namespaces",
        json!({"metadata": {"generateName": "gen-"}}),
    )
    .await;
    assert_eq!(code, 200, "{generated}");
    let name = generated["metadata"]["name"].as_str().unwrap().to_string();
    assert_eq!(generated["metadata"]["labels"][LABEL], name.as_str());

    // An update or a patch cannot change or remove it.
    let mut replaced = named.clone();
    replaced["metadata"]["labels"] = json!({"tier": "b"});
    let (code, updated) = send(&t, "PUT", "/api/v1/namespaces/team", replaced).await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(
        updated["metadata"]["labels"],
        json!({LABEL: "team", "tier": "b"})
    );
    let (code, patched) = t
        .raw(
            "PATCH",
            "/api/v1/namespaces/team",
            Some("application/merge-patch+json"),
            serde_json::to_vec(&json!({"metadata": {"labels": {LABEL: null}}})).unwrap(),
        )
        .await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["metadata"]["labels"][LABEL], "team");

    // So a selector on it finds exactly that namespace.
    let selected = get(
        &t,
        &format!("/api/v1/namespaces?labelSelector={LABEL}%3Dteam"),
    )
    .await;
    let names: Vec<_> = selected["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["team"]);
}

/// A pod created right after its namespace is admitted: the ServiceAccount plugin waits for
/// the `default` account the namespace's controller is about to create, as kube's does.
#[tokio::test]
async fn a_pod_right_after_its_namespace_waits_for_the_default_account() {
    let t = TestServer::start(Backend::Memory).await;
    let pod = json!({"metadata": {"name": "first"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    for round in 0..5 {
        let ns = format!("fresh-{round}");
        let (code, body) = send(
            &t,
            "POST",
            "/api/v1/namespaces",
            json!({"metadata": {"name": ns}}),
        )
        .await;
        assert_eq!(code, 200, "{body}");
        let (code, body) = send(
            &t,
            "POST",
            &format!("/api/v1/namespaces/{ns}/pods"),
            pod.clone(),
        )
        .await;
        assert_eq!(code, 200, "{body}");
        assert_eq!(body["spec"]["serviceAccountName"], "default");
    }
    // In a namespace that does not exist, NamespaceLifecycle answers first, at once.
    let (code, body) = send(&t, "POST", "/api/v1/namespaces/nowhere/pods", pod).await;
    assert_eq!(code, 404, "{body}");
    assert_eq!(body["message"], "namespaces \"nowhere\" not found");
}

/// Every ClusterRole kube-apiserver 1.33 bootstraps, by name.
const BOOTSTRAP_CLUSTER_ROLES: &[&str] = &[
    "admin",
    "cluster-admin",
    "edit",
    "system:aggregate-to-admin",
    "system:aggregate-to-edit",
    "system:aggregate-to-view",
    "system:auth-delegator",
    "system:basic-user",
    "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
    "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
    "system:certificates.k8s.io:kube-apiserver-client-approver",
    "system:certificates.k8s.io:kube-apiserver-client-kubelet-approver",
    "system:certificates.k8s.io:kubelet-serving-approver",
    "system:certificates.k8s.io:legacy-unknown-approver",
    "system:controller:attachdetach-controller",
    "system:controller:certificate-controller",
    "system:controller:clusterrole-aggregation-controller",
    "system:controller:cronjob-controller",
    "system:controller:daemon-set-controller",
    "system:controller:deployment-controller",
    "system:controller:disruption-controller",
    "system:controller:endpoint-controller",
    "system:controller:endpointslice-controller",
    "system:controller:endpointslicemirroring-controller",
    "system:controller:ephemeral-volume-controller",
    "system:controller:expand-controller",
    "system:controller:generic-garbage-collector",
    "system:controller:horizontal-pod-autoscaler",
    "system:controller:job-controller",
    "system:controller:legacy-service-account-token-cleaner",
    "system:controller:namespace-controller",
    "system:controller:node-controller",
    "system:controller:persistent-volume-binder",
    "system:controller:pod-garbage-collector",
    "system:controller:pv-protection-controller",
    "system:controller:pvc-protection-controller",
    "system:controller:replicaset-controller",
    "system:controller:replication-controller",
    "system:controller:resourcequota-controller",
    "system:controller:root-ca-cert-publisher",
    "system:controller:route-controller",
    "system:controller:selinux-warning-controller",
    "system:controller:service-account-controller",
    "system:controller:service-cidrs-controller",
    "system:controller:service-controller",
    "system:controller:statefulset-controller",
    "system:controller:ttl-after-finished-controller",
    "system:controller:ttl-controller",
    "system:controller:validatingadmissionpolicy-status-controller",
    "system:discovery",
    "system:heapster",
    "system:kube-aggregator",
    "system:kube-controller-manager",
    "system:kube-dns",
    "system:kube-scheduler",
    "system:kubelet-api-admin",
    "system:monitoring",
    "system:node",
    "system:node-bootstrapper",
    "system:node-problem-detector",
    "system:node-proxier",
    "system:persistent-volume-provisioner",
    "system:public-info-viewer",
    "system:service-account-issuer-discovery",
    "system:volume-scheduler",
    "view",
];

/// Every ClusterRoleBinding kube-apiserver 1.33 bootstraps, by name.
const BOOTSTRAP_CLUSTER_ROLE_BINDINGS: &[&str] = &[
    "cluster-admin",
    "system:basic-user",
    "system:controller:attachdetach-controller",
    "system:controller:certificate-controller",
    "system:controller:clusterrole-aggregation-controller",
    "system:controller:cronjob-controller",
    "system:controller:daemon-set-controller",
    "system:controller:deployment-controller",
    "system:controller:disruption-controller",
    "system:controller:endpoint-controller",
    "system:controller:endpointslice-controller",
    "system:controller:endpointslicemirroring-controller",
    "system:controller:ephemeral-volume-controller",
    "system:controller:expand-controller",
    "system:controller:generic-garbage-collector",
    "system:controller:horizontal-pod-autoscaler",
    "system:controller:job-controller",
    "system:controller:legacy-service-account-token-cleaner",
    "system:controller:namespace-controller",
    "system:controller:node-controller",
    "system:controller:persistent-volume-binder",
    "system:controller:pod-garbage-collector",
    "system:controller:pv-protection-controller",
    "system:controller:pvc-protection-controller",
    "system:controller:replicaset-controller",
    "system:controller:replication-controller",
    "system:controller:resourcequota-controller",
    "system:controller:root-ca-cert-publisher",
    "system:controller:route-controller",
    "system:controller:selinux-warning-controller",
    "system:controller:service-account-controller",
    "system:controller:service-cidrs-controller",
    "system:controller:service-controller",
    "system:controller:statefulset-controller",
    "system:controller:ttl-after-finished-controller",
    "system:controller:ttl-controller",
    "system:controller:validatingadmissionpolicy-status-controller",
    "system:discovery",
    "system:kube-controller-manager",
    "system:kube-dns",
    "system:kube-scheduler",
    "system:monitoring",
    "system:node",
    "system:node-proxier",
    "system:public-info-viewer",
    "system:service-account-issuer-discovery",
    "system:volume-scheduler",
];

/// Every Role (namespace/name) kube-apiserver 1.33 bootstraps.
const BOOTSTRAP_ROLES: &[&str] = &[
    "kube-public/system:controller:bootstrap-signer",
    "kube-system/extension-apiserver-authentication-reader",
    "kube-system/system::leader-locking-kube-controller-manager",
    "kube-system/system::leader-locking-kube-scheduler",
    "kube-system/system:controller:bootstrap-signer",
    "kube-system/system:controller:cloud-provider",
    "kube-system/system:controller:token-cleaner",
];

/// Every RoleBinding (namespace/name) kube-apiserver 1.33 bootstraps.
const BOOTSTRAP_ROLE_BINDINGS: &[&str] = &[
    "kube-public/system:controller:bootstrap-signer",
    "kube-system/system::extension-apiserver-authentication-reader",
    "kube-system/system::leader-locking-kube-controller-manager",
    "kube-system/system::leader-locking-kube-scheduler",
    "kube-system/system:controller:bootstrap-signer",
    "kube-system/system:controller:cloud-provider",
    "kube-system/system:controller:token-cleaner",
];

/// The names of what a list holds, as `namespace/name` for namespaced objects, sorted.
fn listed_names(list: &Value) -> Vec<String> {
    let mut names: Vec<String> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| match o["metadata"]["namespace"].as_str() {
            Some(ns) => format!("{ns}/{}", o["metadata"]["name"].as_str().unwrap()),
            None => o["metadata"]["name"].as_str().unwrap().to_string(),
        })
        .collect();
    names.sort();
    names
}

/// The whole bootstrap policy is there, and works: `system:auth-delegator` lets a delegating
/// server review tokens and access, as an aggregated API server's is bound to it.
#[tokio::test]
async fn every_bootstrap_role_and_binding_of_kube_apiserver_1_33() {
    let t = TestServer::start_with(Backend::Memory, |b| {
        b.authorization(konverge_apiserver::AuthorizationMode::Rbac)
    })
    .await;
    let rbac = "/apis/rbac.authorization.k8s.io/v1";
    for (path, expected) in [
        ("clusterroles", BOOTSTRAP_CLUSTER_ROLES),
        ("clusterrolebindings", BOOTSTRAP_CLUSTER_ROLE_BINDINGS),
        ("roles", BOOTSTRAP_ROLES),
        ("rolebindings", BOOTSTRAP_ROLE_BINDINGS),
    ] {
        let listed = listed_names(&get(&t, &format!("{rbac}/{path}")).await);
        assert_eq!(listed, expected, "{path}");
    }
    let delegator = get(&t, &format!("{rbac}/clusterroles/system:auth-delegator")).await;
    assert_eq!(
        delegator["metadata"]["labels"]["kubernetes.io/bootstrapping"],
        "rbac-defaults"
    );
    assert_eq!(
        delegator["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"],
        "true"
    );
    let can = |verb: &'static str, group: &'static str, resource: &'static str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": "metrics-server", "resourceAttributes":
                {"verb": verb, "group": group, "resource": resource}}})
    };
    let sar = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let (_, before) = send(
        &t,
        "POST",
        sar,
        can("create", "authentication.k8s.io", "tokenreviews"),
    )
    .await;
    assert_eq!(before["status"]["allowed"], false, "{before}");
    let (code, bound) = send(
        &t,
        "POST",
        &format!("{rbac}/clusterrolebindings"),
        json!({"metadata": {"name": "metrics-server:system:auth-delegator"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                "name": "system:auth-delegator"},
            "subjects": [{"kind": "User", "name": "metrics-server"}]}),
    )
    .await;
    assert_eq!(code, 200, "{bound}");
    for (verb, group, resource) in [
        ("create", "authentication.k8s.io", "tokenreviews"),
        ("create", "authorization.k8s.io", "subjectaccessreviews"),
    ] {
        let (_, review) = send(&t, "POST", sar, can(verb, group, resource)).await;
        assert_eq!(review["status"]["allowed"], true, "{resource}: {review}");
    }
    let (_, other) = send(&t, "POST", sar, can("list", "", "secrets")).await;
    assert_eq!(other["status"]["allowed"], false, "{other}");
}

/// Field selectors accept what kube-apiserver's conversion functions accept, and refuse the
/// rest with its words.
#[tokio::test]
async fn field_selectors_follow_each_kind() {
    let t = TestServer::start(Backend::Memory).await;
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), "default");
    for (name, node, host_network) in [("a", "n1", false), ("b", "n2", true)] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeName": node, "hostNetwork": host_network, "containers": [{"name": "c", "image": "busybox"}]},
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let names = |list: kube::core::ObjectList<Pod>| -> Vec<String> {
        list.items
            .into_iter()
            .map(|p| p.metadata.name.unwrap())
            .collect()
    };
    let by = |s: &str| ListParams::default().fields(s);
    assert_eq!(
        names(pods.list(&by("spec.nodeName=n2")).await.unwrap()),
        ["b"]
    );
    assert_eq!(names(pods.list(&by("spec.host=n1")).await.unwrap()), ["a"]);
    assert_eq!(
        names(pods.list(&by("spec.hostNetwork=false")).await.unwrap()),
        ["a"]
    );
    assert_eq!(
        names(
            pods.list(&by("status.phase=Pending,spec.nodeName!=n1"))
                .await
                .unwrap()
        ),
        ["b"]
    );

    let refused = |path: &'static str| {
        let t = &t;
        async move {
            let (code, status) = t.raw("GET", path, None, Vec::new()).await;
            assert_eq!(
                (code, status["reason"].as_str()),
                (400, Some("BadRequest")),
                "{path}"
            );
            status["message"].as_str().unwrap().to_string()
        }
    };
    assert_eq!(
        refused("/api/v1/pods?fieldSelector=spec.bogus%3Dx").await,
        "field label not supported: spec.bogus"
    );
    assert_eq!(
        refused("/apis/apps/v1/deployments?fieldSelector=status.replicas%3D1").await,
        r#""status.replicas" is not a known field selector: only "metadata.name", "metadata.namespace""#
    );
    assert_eq!(
        refused("/apis/batch/v1/jobs?fieldSelector=status.succeeded%3D1").await,
        r#"field label "status.succeeded" not supported for batchv1.Job"#
    );
    // Nodes are cluster-scoped and have a conversion function: no metadata.namespace.
    assert_eq!(
        refused("/api/v1/nodes?fieldSelector=metadata.namespace%3Dx").await,
        "field label not supported: metadata.namespace"
    );
    let (code, _) = t
        .raw(
            "GET",
            "/api/v1/nodes?fieldSelector=spec.unschedulable%3Dfalse",
            None,
            Vec::new(),
        )
        .await;
    assert_eq!(code, 200);
}

/// events.k8s.io Events are core Events: one object, two views, and selectors in each
/// view's names.
#[tokio::test]
async fn events_are_one_object_in_two_groups() {
    let t = TestServer::start(Backend::Memory).await;
    let (code, created) = send(
        &t,
        "POST",
        "/apis/events.k8s.io/v1/namespaces/default/events",
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "pulled"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "regarding": {"kind": "Pod", "name": "web", "namespace": "default"},
            "note": "Pulled the image", "reason": "Pulled", "type": "Normal", "action": "Pull",
            "reportingController": "kubelet", "reportingInstance": "node-1",
        }),
    )
    .await;
    assert_eq!(code, 200, "{created}");
    assert_eq!(created["regarding"]["name"], "web");
    let core = get(&t, "/api/v1/namespaces/default/events/pulled").await;
    assert_eq!(core["apiVersion"], "v1");
    assert_eq!(core["involvedObject"]["name"], "web");
    assert_eq!(core["message"], "Pulled the image");
    assert_eq!(core["reportingComponent"], "kubelet");
    let selected = get(
        &t,
        "/apis/events.k8s.io/v1/namespaces/default/events?fieldSelector=regarding.name%3Dweb,reportingController%3Dkubelet",
    )
    .await;
    assert_eq!(selected["items"].as_array().unwrap().len(), 1);
    assert_eq!(selected["items"][0]["note"], "Pulled the image");
    let core_selected = get(&t, "/api/v1/events?fieldSelector=involvedObject.name%3Dweb").await;
    assert_eq!(core_selected["items"].as_array().unwrap().len(), 1);
    let (code, status) = t
        .raw(
            "GET",
            "/apis/events.k8s.io/v1/events?fieldSelector=involvedObject.name%3Dweb",
            None,
            Vec::new(),
        )
        .await;
    assert_eq!(
        (code, status["message"].as_str()),
        (400, Some("field label not supported: involvedObject.name"))
    );
}

/// HorizontalPodAutoscalers are served as autoscaling/v1 and v2 from one stored object.
#[tokio::test]
async fn autoscalers_are_served_in_both_versions() {
    let t = TestServer::start(Backend::Memory).await;
    let (code, created) = send(
        &t,
        "POST",
        "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers",
        json!({
            "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "minReplicas": 1, "maxReplicas": 5, "targetCPUUtilizationPercentage": 70},
        }),
    )
    .await;
    assert_eq!(code, 200, "{created}");
    assert_eq!(created["apiVersion"], "autoscaling/v1");
    assert_eq!(created["spec"]["targetCPUUtilizationPercentage"], 70);
    let v2 = get(
        &t,
        "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers/web",
    )
    .await;
    assert_eq!(v2["apiVersion"], "autoscaling/v2");
    assert_eq!(
        v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        70
    );
    // A v2-only metric survives a v1 round trip.
    let mut with_pods = v2.clone();
    with_pods["spec"]["metrics"].as_array_mut().unwrap().push(json!(
        {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}}
    ));
    let (code, _) = send(
        &t,
        "PUT",
        "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers/web",
        with_pods,
    )
    .await;
    assert_eq!(code, 200);
    let v1 = get(
        &t,
        "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers/web",
    )
    .await;
    let (code, _) = send(
        &t,
        "PUT",
        "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers/web",
        v1,
    )
    .await;
    assert_eq!(code, 200);
    let v2 = get(
        &t,
        "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers/web",
    )
    .await;
    assert_eq!(v2["spec"]["metrics"].as_array().unwrap().len(), 2);
    assert!(v2["metadata"].get("annotations").is_none(), "{v2}");
}

/// The review resources answer and store nothing; other verbs are not served.
#[tokio::test]
async fn reviews_answer_without_storing() {
    let t = TestServer::start(Backend::Memory).await;
    let (code, review) = send(
        &t,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
    )
    .await;
    assert_eq!(code, 200, "{review}");
    assert_eq!(review["status"]["userInfo"]["username"], "kubernetes-admin");
    let (code, review) = send(
        &t,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
               "spec": {"resourceAttributes": {"verb": "list", "resource": "pods"}}}),
    )
    .await;
    assert_eq!((code, &review["status"]["allowed"]), (200, &json!(true)));
    let (code, status) = send(
        &t,
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {}}),
    )
    .await;
    assert_eq!((code, status["reason"].as_str()), (422, Some("Invalid")));
    let (code, status) = t
        .raw(
            "GET",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            None,
            Vec::new(),
        )
        .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (405, Some("MethodNotAllowed"))
    );
    let statuses = get(&t, "/api/v1/componentstatuses").await;
    let names: Vec<&str> = statuses["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["controller-manager", "etcd-0", "scheduler"]);
    assert_eq!(
        get(&t, "/api/v1/componentstatuses/etcd-0").await["conditions"][0]["status"],
        "True"
    );
}

/// Binding assigns a pod once; eviction honours a PodDisruptionBudget; the kubelet
/// subresources say why they cannot answer.
#[tokio::test]
async fn pods_bind_evict_and_need_a_kubelet() {
    let t = TestServer::start(Backend::Memory).await;
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    // A pod no node runs has no log to stream: 204, as kube-apiserver answers.
    let (code, body) = t
        .call(
            "GET",
            "/api/v1/namespaces/default/pods/web/log",
            Value::Null,
        )
        .await;
    assert_eq!((code, body), (204, Value::Null));
    let (code, status) = t
        .call(
            "GET",
            "/api/v1/namespaces/default/pods/web/exec?command=ls&stdout=true",
            Value::Null,
        )
        .await;
    assert_eq!(
        (code, status["message"].as_str()),
        (400, Some("pod web does not have a host assigned"))
    );

    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "web"},
                         "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}});
    let (code, status) = send(
        &t,
        "POST",
        "/api/v1/namespaces/default/pods/web/binding",
        binding.clone(),
    )
    .await;
    assert_eq!(
        (code, status["status"].as_str()),
        (200, Some("Success")),
        "{status}"
    );
    assert_eq!(
        pods.get("web")
            .await
            .unwrap()
            .spec
            .unwrap()
            .node_name
            .as_deref(),
        Some("node-1")
    );
    let (code, status) = send(&t, "POST", "/api/v1/namespaces/default/bindings", binding).await;
    assert_eq!(code, 409, "{status}");
    assert_eq!(
        status["message"],
        r#"Operation cannot be fulfilled on pods/binding "web": pod web is already assigned to node "node-1""#
    );

    // Running pods are guarded by their budget.
    let mut running = pods.get_status("web").await.unwrap();
    running.status.as_mut().unwrap().phase = Some("Running".into());
    pods.replace_status("web", &PostParams::default(), &running)
        .await
        .unwrap();
    let (code, _) = send(
        &t,
        "POST",
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
               "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
    )
    .await;
    assert_eq!(code, 200);
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web", "namespace": "default"}});
    let (code, status) = t
        .call(
            "POST",
            "/api/v1/namespaces/default/pods/web/eviction",
            eviction.clone(),
        )
        .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (429, Some("TooManyRequests")),
        "{status}"
    );
    assert_eq!(
        status["details"]["causes"][0]["message"],
        "The disruption budget web is still being processed by the server."
    );
    assert_eq!(
        status["message"],
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    assert!(pods.get_opt("web").await.unwrap().is_some());
    let mut budget = get(
        &t,
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets/web",
    )
    .await;
    budget["status"] = json!({"disruptionsAllowed": 1, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1});
    let (code, _) = send(
        &t,
        "PUT",
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets/web/status",
        budget,
    )
    .await;
    assert_eq!(code, 200);
    let (code, status) = send(
        &t,
        "POST",
        "/api/v1/namespaces/default/pods/web/eviction",
        eviction,
    )
    .await;
    assert_eq!(code, 200, "{status}");
    // The eviction deletes the running pod gracefully: it terminates for its grace period
    // (the kubelet, which this test has none of, would delete it when stopped).
    let evicted = pods.get("web").await.unwrap();
    assert!(evicted.metadata.deletion_timestamp.is_some());
    assert_eq!(evicted.metadata.deletion_grace_period_seconds, Some(30));
    // A log request for a pod on a node nobody runs says it needs that node's kubelet.
    let (code, status) = t
        .call(
            "GET",
            "/api/v1/namespaces/default/pods/web/log",
            Value::Null,
        )
        .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (503, Some("ServiceUnavailable"))
    );
    assert_eq!(
        status["message"],
        r#"the log subresource needs the kubelet of node "node-1", and this server runs no nodes"#
    );
}

/// A built-in status write keeps the metadata it changes (a custom resource's would not).
#[tokio::test]
async fn status_writes_keep_metadata_changes() {
    let t = TestServer::start(Backend::Memory).await;
    let (code, _) = send(
        &t,
        "POST",
        "/apis/batch/v1/namespaces/default/cronjobs",
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "tick"},
               "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {"spec": {
                   "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}}}),
    )
    .await;
    assert_eq!(code, 200);
    let mut cron = get(&t, "/apis/batch/v1/namespaces/default/cronjobs/tick").await;
    cron["metadata"]["annotations"] = json!({"seen": "yes"});
    cron["status"] = json!({"lastScheduleTime": "2026-01-01T00:00:00Z"});
    cron["spec"]["schedule"] = json!("@hourly");
    let (code, written) = send(
        &t,
        "PUT",
        "/apis/batch/v1/namespaces/default/cronjobs/tick/status",
        cron,
    )
    .await;
    assert_eq!(code, 200, "{written}");
    assert_eq!(written["metadata"]["annotations"]["seen"], "yes");
    assert_eq!(
        written["status"]["lastScheduleTime"],
        "2026-01-01T00:00:00Z"
    );
    assert_eq!(written["spec"]["schedule"], "*/5 * * * *");

    // A signing request's approval: its conditions change, and its metadata; not its spec
    // or the rest of its status (kube's approval strategy).
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "alice");
    let request = params.serialize_request(&key).unwrap().pem().unwrap();
    let (code, created) = send(
        &t,
        "POST",
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        json!({"metadata": {"name": "alice"}, "spec": {
            "request": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, request),
            "signerName": "kubernetes.io/kube-apiserver-client",
            "usages": ["client auth"]}}),
    )
    .await;
    assert_eq!(code, 200, "{created}");
    let mut approved = created.clone();
    approved["metadata"]["labels"] = json!({"reviewed": "yes"});
    approved["spec"]["usages"] = json!(["digital signature", "client auth"]);
    approved["status"] = json!({
        "conditions": [{"type": "Approved", "status": "True", "reason": "Test", "message": "ok"}],
        "certificate": "Zm9v",
    });
    let (code, written) = send(
        &t,
        "PUT",
        "/apis/certificates.k8s.io/v1/certificatesigningrequests/alice/approval",
        approved,
    )
    .await;
    assert_eq!(code, 200, "{written}");
    assert_eq!(written["metadata"]["labels"]["reviewed"], "yes");
    assert_eq!(written["spec"]["usages"], json!(["client auth"]));
    assert_eq!(written["status"]["conditions"][0]["type"], "Approved");
    assert!(written["status"].get("certificate").is_none(), "{written}");
}

/// A TokenRequest issues a token that a TokenReview accepts as the ServiceAccount.
#[tokio::test]
async fn service_account_tokens_are_issued_and_reviewed() {
    let t = TestServer::start(Backend::Memory).await;
    let accounts: Api<ServiceAccount> = Api::namespaced(t.client.clone(), "default");
    let account = accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "builder"}})).unwrap(),
        )
        .await
        .unwrap();
    let (code, issued) = send(
        &t,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts/builder/token",
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"audiences": ["vault"], "expirationSeconds": 1200}}),
    )
    .await;
    assert_eq!(code, 200, "{issued}");
    assert_eq!(issued["kind"], "TokenRequest");
    assert_eq!(issued["metadata"]["name"], "builder");
    let token = issued["status"]["token"].as_str().unwrap().to_string();
    assert!(
        issued["status"]["expirationTimestamp"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    let review = |audience: &'static str| {
        let t = &t;
        let token = token.clone();
        async move {
            let (code, review) = send(
                t,
                "POST",
                "/apis/authentication.k8s.io/v1/tokenreviews",
                json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                       "spec": {"token": token, "audiences": [audience]}}),
            )
            .await;
            assert_eq!(code, 200, "{review}");
            review["status"].clone()
        }
    };
    let status = review("vault").await;
    assert_eq!(status["authenticated"], true);
    assert_eq!(
        status["user"]["username"],
        "system:serviceaccount:default:builder"
    );
    assert_eq!(
        status["user"]["uid"],
        account.metadata.uid.unwrap().as_str()
    );
    assert_eq!(status["audiences"], json!(["vault"]));
    assert_eq!(review("elsewhere").await, json!({"user": {}}));

    // Bad requests: too short a lifetime, an unknown account.
    let (code, status) = send(
        &t,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts/builder/token",
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 60}}),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        status["message"],
        r#"TokenRequest.authentication.k8s.io "builder" is invalid: spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"#
    );
    let (code, status) = send(
        &t,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts/nobody/token",
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest"}),
    )
    .await;
    assert_eq!(
        (code, status["message"].as_str()),
        (404, Some(r#"serviceaccounts "nobody" not found"#))
    );
}

/// Services get a cluster IP (an IPAddress object each) and node ports; taken ones are
/// refused with kube-apiserver's words; a delete gives the IP back.
/// A Service whose type changes gets what the new type needs and gives back what it no
/// longer needs, as kube-apiserver's `dropTypeDependentFields` and `allocateUpdate` do: a
/// `kubectl patch` of the type alone works in both directions.
#[tokio::test]
async fn service_type_changes_allocate_and_release() {
    let t = TestServer::start(Backend::Memory).await;
    let path = "/api/v1/namespaces/default/services";
    let patch = |name: &str, body: Value| {
        let t = &t;
        let name = name.to_string();
        async move {
            t.raw(
                "PATCH",
                &format!("{path}/{name}"),
                Some("application/merge-patch+json"),
                serde_json::to_vec(&body).unwrap(),
            )
            .await
        }
    };
    let (code, svc) = send(
        &t,
        "POST",
        path,
        json!({"metadata": {"name": "s"},
        "spec": {"ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]}}),
    )
    .await;
    assert_eq!(code, 200, "{svc}");
    let ip = svc["spec"]["clusterIP"].as_str().unwrap().to_string();

    // ClusterIP -> NodePort: every port gets a node port.
    let (code, svc) = patch("s", json!({"spec": {"type": "NodePort"}})).await;
    assert_eq!(code, 200, "{svc}");
    let ports = node_ports_of(&svc);
    assert_eq!(ports.len(), 2, "{svc}");
    assert!(
        ports.iter().all(|p| (30000..=32767).contains(p)),
        "{ports:?}"
    );
    assert_eq!(svc["spec"]["clusterIP"], ip.as_str());

    // Another Service cannot take them, on create or update.
    let (code, other) = send(
        &t,
        "POST",
        path,
        json!({"metadata": {"name": "o"},
        "spec": {"type": "NodePort", "ports": [{"port": 80}]}}),
    )
    .await;
    assert_eq!(code, 200, "{other}");
    let (code, refused) = patch(
        "o",
        json!({"spec": {"ports": [{"port": 80, "nodePort": ports[0]}]}}),
    )
    .await;
    assert_eq!(code, 422, "{refused}");
    assert_eq!(
        refused["details"]["causes"][0]["field"],
        "spec.ports[0].nodePort"
    );
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("provided port is already allocated"),
        "{refused}"
    );

    // NodePort -> ClusterIP: the node ports go, and are free again.
    let (code, svc) = patch("s", json!({"spec": {"type": "ClusterIP"}})).await;
    assert_eq!(code, 200, "{svc}");
    assert!(node_ports_of(&svc).is_empty(), "{svc}");
    let (code, other) = patch(
        "o",
        json!({"spec": {"ports": [{"port": 80, "nodePort": ports[0]}]}}),
    )
    .await;
    assert_eq!(code, 200, "{other}");

    // ClusterIP -> ExternalName: the cluster IP and its IPAddress go; and back again.
    let (code, svc) = patch(
        "s",
        json!({"spec": {"type": "ExternalName", "externalName": "example.com"}}),
    )
    .await;
    assert_eq!(code, 200, "{svc}");
    for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
        assert!(svc["spec"].get(field).is_none(), "{field}: {svc}");
    }
    let (code, _) = t
        .raw(
            "GET",
            &format!("/apis/networking.k8s.io/v1/ipaddresses/{ip}"),
            None,
            Vec::new(),
        )
        .await;
    assert_eq!(code, 404, "the IP was given back");
    let (code, svc) = patch(
        "s",
        json!({"spec": {"type": "ClusterIP", "externalName": null}}),
    )
    .await;
    assert_eq!(code, 200, "{svc}");
    let new_ip = svc["spec"]["clusterIP"].as_str().unwrap().to_string();
    assert!(new_ip.starts_with("10."), "{svc}");
    let address = get(
        &t,
        &format!("/apis/networking.k8s.io/v1/ipaddresses/{new_ip}"),
    )
    .await;
    assert_eq!(address["spec"]["parentRef"]["name"], "s");

    // A LoadBalancer keeping traffic local gets a health check node port, until it no
    // longer does; one that says so gets no node ports.
    let (code, svc) = patch(
        "s",
        json!({"spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local"}}),
    )
    .await;
    assert_eq!(code, 200, "{svc}");
    let health = svc["spec"]["healthCheckNodePort"].as_i64().unwrap_or(0);
    assert!((30000..=32767).contains(&health), "{svc}");
    assert!(!node_ports_of(&svc).contains(&health), "{svc}");
    let (code, svc) = patch("s", json!({"spec": {"externalTrafficPolicy": "Cluster"}})).await;
    assert_eq!(code, 200, "{svc}");
    assert!(svc["spec"].get("healthCheckNodePort").is_none(), "{svc}");
    let (code, lb) = send(
        &t,
        "POST",
        path,
        json!({"metadata": {"name": "lb"},
        "spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false,
            "ports": [{"port": 80}]}}),
    )
    .await;
    assert_eq!(code, 200, "{lb}");
    assert!(node_ports_of(&lb).is_empty(), "{lb}");
}

/// Node ports are taken by compare-and-swap on kube's allocator bitmap: of ten Services
/// created at once asking for the same port, exactly one gets it; a deleted Service's port
/// is free again.
#[tokio::test]
async fn a_node_port_is_given_to_one_service_only() {
    let t = TestServer::start(Backend::Memory).await;
    let path = "/api/v1/namespaces/default/services";
    let service = |i: usize| {
        json!({"metadata": {"name": format!("s{i}")}, "spec": {"type": "NodePort",
            "ports": [{"port": 80, "nodePort": 30080}]}})
    };
    let answers =
        futures::future::join_all((0..10).map(|i| send(&t, "POST", path, service(i)))).await;
    let created: Vec<&Value> = answers
        .iter()
        .filter(|(c, _)| *c == 200)
        .map(|(_, b)| b)
        .collect();
    assert_eq!(created.len(), 1, "{answers:?}");
    for (code, refused) in answers.iter().filter(|(c, _)| *c != 200) {
        assert_eq!(*code, 422, "{refused}");
        assert!(
            refused["message"].as_str().unwrap().ends_with(
                "spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated"
            ),
            "{refused}"
        );
    }
    let winner = created[0]["metadata"]["name"].as_str().unwrap().to_string();
    let (code, _) = t
        .raw("DELETE", &format!("{path}/{winner}"), None, Vec::new())
        .await;
    assert_eq!(code, 200);
    let (code, again) = send(&t, "POST", path, service(10)).await;
    assert_eq!(code, 200, "the port was given back: {again}");
}

#[tokio::test]
async fn services_get_addresses_allocated() {
    let t = TestServer::start(Backend::Memory).await;
    let service = |name: &str, spec: Value| json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec});
    let (code, web) = send(
        &t,
        "POST",
        "/api/v1/namespaces/default/services",
        service("web", json!({"ports": [{"port": 80}]})),
    )
    .await;
    assert_eq!(code, 200, "{web}");
    let ip = web["spec"]["clusterIP"].as_str().unwrap().to_string();
    assert!(ip.starts_with("10."), "{ip}");
    assert_eq!(web["spec"]["clusterIPs"], json!([ip]));
    assert_eq!(web["spec"]["ipFamilies"], json!(["IPv4"]));
    let address = get(&t, &format!("/apis/networking.k8s.io/v1/ipaddresses/{ip}")).await;
    assert_eq!(address["spec"]["parentRef"]["name"], "web");

    let (code, taken) = send(
        &t,
        "POST",
        "/api/v1/namespaces/default/services",
        service("again", json!({"clusterIP": ip, "ports": [{"port": 80}]})),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        taken["message"],
        format!(
            r#"Service "again" is invalid: spec.clusterIPs: Invalid value: []string{{"{ip}"}}: failed to allocate IP {ip}: provided IP is already allocated"#
        )
    );
    let (code, np) = send(
        &t,
        "POST",
        "/api/v1/namespaces/default/services",
        service("np", json!({"type": "NodePort", "ports": [{"port": 80}]})),
    )
    .await;
    assert_eq!(code, 200, "{np}");
    let node_port = np["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
    assert!((30000..=32767).contains(&node_port));
    assert_eq!(np["spec"]["externalTrafficPolicy"], "Cluster");
    let (code, clash) = send(
        &t,
        "POST",
        "/api/v1/namespaces/default/services",
        service(
            "np2",
            json!({"type": "NodePort", "ports": [{"port": 81, "nodePort": node_port}]}),
        ),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        clash["message"],
        format!(
            r#"Service "np2" is invalid: spec.ports[0].nodePort: Invalid value: {node_port}: provided port is already allocated"#
        )
    );
    let (code, headless) = send(
        &t,
        "POST",
        "/api/v1/namespaces/default/services",
        service(
            "headless",
            json!({"clusterIP": "None", "ports": [{"port": 80}]}),
        ),
    )
    .await;
    assert_eq!(
        (code, &headless["spec"]["clusterIP"]),
        (200, &json!("None"))
    );

    // A PUT without the addresses keeps them; one that changes the IP is refused.
    let (code, replaced) = send(
        &t,
        "PUT",
        "/api/v1/namespaces/default/services/web",
        service(
            "web",
            json!({"ports": [{"port": 80}], "selector": {"app": "web"}}),
        ),
    )
    .await;
    assert_eq!(code, 200, "{replaced}");
    assert_eq!(replaced["spec"]["clusterIP"], ip.as_str());
    let (code, moved) = send(
        &t,
        "PUT",
        "/api/v1/namespaces/default/services/web",
        service(
            "web",
            json!({"clusterIP": "10.96.7.7", "ports": [{"port": 80}]}),
        ),
    )
    .await;
    assert_eq!(code, 422, "{moved}");
    assert!(
        moved["message"].as_str().unwrap().ends_with(
            "spec.clusterIPs[0]: Invalid value: []string{\"10.96.7.7\"}: may not change once set"
        ),
        "{moved}"
    );

    // Deleted, the Service gives its IP back.
    let (code, _) = t
        .raw(
            "DELETE",
            "/api/v1/namespaces/default/services/web",
            None,
            Vec::new(),
        )
        .await;
    assert_eq!(code, 200);
    let (code, _) = t
        .raw(
            "GET",
            &format!("/apis/networking.k8s.io/v1/ipaddresses/{ip}"),
            None,
            Vec::new(),
        )
        .await;
    assert_eq!(code, 404);
}

/// Health endpoints name their checks; a malformed `timeout` is refused on short requests
/// and ignored on watches.
#[tokio::test]
async fn health_checks_are_named_and_timeouts_checked() {
    use tower::ServiceExt;
    let t = TestServer::start(Backend::Memory).await;
    let text = |path: &'static str| {
        let router = t.router.clone();
        async move {
            let req = http::Request::builder()
                .uri(path)
                .body(axum::body::Body::empty())
                .unwrap();
            let response = router.oneshot(req).await.unwrap();
            let code = response.status().as_u16();
            let body = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            (code, String::from_utf8(body.to_vec()).unwrap())
        }
    };
    assert_eq!(text("/readyz").await, (200, "ok".to_string()));
    let (code, verbose) = text("/readyz?verbose").await;
    assert_eq!(code, 200);
    // kube-apiserver 1.33's checks and post-start hooks, in its order (as a v1.33.1 cluster
    // lists them), less those konverge has no counterpart for (the aggregator's OpenAPI
    // controllers).
    let lines: Vec<&str> = verbose.lines().collect();
    assert_eq!(
        lines,
        [
            "[+]ping ok",
            "[+]log ok",
            "[+]etcd ok",
            "[+]etcd-readiness ok",
            "[+]informer-sync ok",
            "[+]poststarthook/start-apiserver-admission-initializer ok",
            "[+]poststarthook/generic-apiserver-start-informers ok",
            "[+]poststarthook/priority-and-fairness-config-consumer ok",
            "[+]poststarthook/priority-and-fairness-filter ok",
            "[+]poststarthook/storage-object-count-tracker-hook ok",
            "[+]poststarthook/start-apiextensions-informers ok",
            "[+]poststarthook/start-apiextensions-controllers ok",
            "[+]poststarthook/crd-informer-synced ok",
            "[+]poststarthook/start-system-namespaces-controller ok",
            "[+]poststarthook/start-cluster-authentication-info-controller ok",
            "[+]poststarthook/start-kube-apiserver-identity-lease-controller ok",
            "[+]poststarthook/start-kube-apiserver-identity-lease-garbage-collector ok",
            "[+]poststarthook/start-legacy-token-tracking-controller ok",
            "[+]poststarthook/start-service-ip-repair-controllers ok",
            "[+]poststarthook/rbac/bootstrap-roles ok",
            "[+]poststarthook/scheduling/bootstrap-system-priority-classes ok",
            "[+]poststarthook/priority-and-fairness-config-producer ok",
            "[+]poststarthook/bootstrap-controller ok",
            "[+]poststarthook/start-kubernetes-service-cidr-controller ok",
            "[+]poststarthook/aggregator-reload-proxy-client-cert ok",
            "[+]poststarthook/start-kube-aggregator-informers ok",
            "[+]poststarthook/apiservice-status-local-available-controller ok",
            "[+]poststarthook/apiservice-status-remote-available-controller ok",
            "[+]poststarthook/apiservice-registration-controller ok",
            "[+]poststarthook/apiservice-discovery-controller ok",
            "[+]poststarthook/kube-apiserver-autoregistration ok",
            "[+]autoregister-completion ok",
            "[+]shutdown ok",
            "readyz check passed",
        ]
    );
    let (_, excluded) = text("/livez?verbose&exclude=etcd").await;
    assert!(excluded.contains("[+]etcd excluded: ok"), "{excluded}");
    assert!(excluded.ends_with("livez check passed\n"));
    assert_eq!(text("/healthz/etcd").await, (200, "ok".to_string()));
    assert_eq!(
        text("/readyz/poststarthook/rbac/bootstrap-roles").await.0,
        200
    );
    assert_eq!(text("/healthz/nonsense").await.0, 404);

    let (code, status) = t
        .call("GET", "/api/v1/namespaces?timeout=abc", Value::Null)
        .await;
    assert_eq!(code, 400);
    assert_eq!(
        status["message"],
        r#"invalid timeout specified in the request URL - time: invalid duration "abc""#
    );
    let (code, _) = t
        .call("GET", "/api/v1/namespaces?timeout=30s", Value::Null)
        .await;
    assert_eq!(code, 200);
}

/// Tables in both meta.k8s.io versions; 406 for media types the server does not write.
#[tokio::test]
async fn tables_in_both_versions_and_406_for_the_rest() {
    use tower::ServiceExt;
    let t = TestServer::start(Backend::Memory).await;
    let ask = |accept: &'static str| {
        let router = t.router.clone();
        async move {
            let req = http::Request::builder()
                .uri("/api/v1/namespaces")
                .header("accept", accept)
                .body(axum::body::Body::empty())
                .unwrap();
            let response = router.oneshot(req).await.unwrap();
            let code = response.status().as_u16();
            let content_type = response.headers()["content-type"]
                .to_str()
                .unwrap()
                .to_string();
            let body = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            (
                code,
                content_type,
                serde_json::from_slice::<Value>(&body).unwrap(),
            )
        }
    };
    let (code, content_type, table) =
        ask("application/json;as=Table;v=v1beta1;g=meta.k8s.io").await;
    assert_eq!(code, 200);
    assert_eq!(table["apiVersion"], "meta.k8s.io/v1beta1");
    assert_eq!(table["kind"], "Table");
    assert!(content_type.contains("v=v1beta1"), "{content_type}");
    let (_, _, table) = ask("application/json;as=Table;v=v1;g=meta.k8s.io, application/json").await;
    assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
    let (code, _, status) = ask("application/xml").await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (406, Some("NotAcceptable"))
    );
    assert_eq!(
        status["message"],
        "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf"
    );

    // A review has no table: asked for one only, 406; with JSON as well, JSON.
    let review = |accept: &'static str| {
        let router = t.router.clone();
        async move {
            let req = http::Request::builder()
                .method("POST")
                .uri("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
                .header("accept", accept)
                .header("content-type", "application/json")
                .body(axum::body::Body::from(
                    json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                        "spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}})
                    .to_string(),
                ))
                .unwrap();
            let response = router.oneshot(req).await.unwrap();
            let code = response.status().as_u16();
            let body = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            (code, serde_json::from_slice::<Value>(&body).unwrap())
        }
    };
    let (code, status) = review("application/json;as=Table;g=meta.k8s.io;v=v1").await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (406, Some("NotAcceptable")),
        "{status}"
    );
    assert_eq!(
        status["message"],
        "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf"
    );
    let (code, answered) =
        review("application/json;as=Table;g=meta.k8s.io;v=v1, application/json").await;
    assert_eq!(code, 201, "{answered}");
    assert_eq!(answered["kind"], "SelfSubjectAccessReview");
}

/// Bad objects of the kinds operators write are refused with kube-apiserver's messages.
#[tokio::test]
async fn invalid_objects_are_refused_in_kube_apiserver_words() {
    let t = TestServer::start(Backend::Memory).await;
    let (code, status) = send(
        &t,
        "POST",
        "/apis/batch/v1/namespaces/default/cronjobs",
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "tick"},
               "spec": {"schedule": "bad", "jobTemplate": {"spec": {"template": {"spec": {
                   "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}}}),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        status["message"],
        r#"CronJob.batch "tick" is invalid: spec.schedule: Invalid value: "bad": expected exactly 5 fields, found 1: [bad]"#
    );
    let (code, status) = send(
        &t,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a b": "1"}}),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(status["details"]["causes"][0]["field"], "data[a b]");
    let (code, status) = send(
        &t,
        "POST",
        "/api/v1/namespaces/default/secrets",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "type": "kubernetes.io/tls", "stringData": {"tls.crt": "x"}}),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        status["message"],
        r#"Secret "s" is invalid: data[tls.key]: Required value"#
    );
    // A bad quantity fails decoding (400), wherever it is: a pod's limits, a quota.
    let pod = |cpu: Value| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q"},
               "spec": {"containers": [{"name": "c", "image": "busybox",
                   "resources": {"limits": {"cpu": cpu, "memory": "64Mi"}}}]}})
    };
    for (cpu, error) in [
        (
            json!("1 core"),
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        ),
        (json!("2K"), "unable to parse quantity's suffix"),
    ] {
        let (code, status) = send(&t, "POST", "/api/v1/namespaces/default/pods", pod(cpu)).await;
        assert_eq!((code, status["reason"].as_str()), (400, Some("BadRequest")));
        assert_eq!(
            status["message"],
            format!(r#"Pod in version "v1" cannot be handled as a Pod: {error}"#)
        );
    }
    let (code, _) = send(
        &t,
        "POST",
        "/api/v1/namespaces/default/pods",
        pod(json!(0.5)),
    )
    .await;
    assert_eq!(code, 200, "a number is a quantity");
    let (code, status) = send(
        &t,
        "POST",
        "/api/v1/namespaces/default/resourcequotas",
        json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "rq"},
               "spec": {"hard": {"pods": "ten"}}}),
    )
    .await;
    assert_eq!(code, 400, "{status}");

    // Probes, wherever a pod spec is.
    let (code, status) = send(
        &t,
        "POST",
        "/api/v1/namespaces/default/pods",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"containers": [{"name": "c", "image": "busybox", "livenessProbe": {}}]}}),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        status["message"],
        r#"Pod "p" is invalid: spec.containers[0].livenessProbe: Required value: must specify a handler type"#
    );
    let (code, status) = send(
        &t,
        "POST",
        "/apis/apps/v1/namespaces/default/daemonsets",
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "d"},
               "spec": {"selector": {"matchLabels": {"app": "d"}},
                   "template": {"metadata": {"labels": {"app": "d"}},
                       "spec": {"containers": [{"name": "c", "image": "busybox",
                           "readinessProbe": {"tcpSocket": {"port": 0}}}]}}}}),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        status["message"],
        r#"DaemonSet.apps "d" is invalid: spec.template.spec.containers[0].readinessProbe.tcpSocket.port: Invalid value: 0: must be between 1 and 65535, inclusive"#
    );

    // A mount names a volume of the pod.
    let (code, status) = send(
        &t,
        "POST",
        "/apis/batch/v1/namespaces/default/jobs",
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
               "spec": {"template": {"spec": {"restartPolicy": "Never",
                   "containers": [{"name": "c", "image": "busybox",
                       "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}}}}),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        status["message"],
        r#"Job.batch "j" is invalid: spec.template.spec.containers[0].volumeMounts[0].name: Not found: "data""#
    );
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "FieldValueNotFound"
    );

    // Tolerations, down to a CronJob's pods.
    let (code, status) = send(
        &t,
        "POST",
        "/apis/batch/v1/namespaces/default/cronjobs",
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "tol"},
               "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": {"spec": {
                   "restartPolicy": "Never", "tolerations": [{"key": "k", "operator": "In"}],
                   "containers": [{"name": "c", "image": "busybox"}]}}}}}}),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        status["message"],
        r#"CronJob.batch "tol" is invalid: spec.jobTemplate.spec.template.spec.tolerations[0].operator: Unsupported value: "In": supported values: "Equal", "Exists""#
    );

    // Requests within limits, printed as Go prints quantities.
    let (code, status) = send(
        &t,
        "POST",
        "/api/v1/namespaces/default/pods",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "r"},
               "spec": {"containers": [{"name": "c", "image": "busybox",
                   "resources": {"limits": {"cpu": "1000m"}, "requests": {"cpu": "2"}}}]}}),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        status["message"],
        r#"Pod "r" is invalid: spec.containers[0].resources.requests: Invalid value: "2": must be less than or equal to cpu limit of 1"#
    );

    // Updates keep what kube-apiserver keeps.
    let deploy = |app: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
               "spec": {"selector": {"matchLabels": {"app": app}},
                   "template": {"metadata": {"labels": {"app": app}},
                       "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}})
    };
    let (code, _) = send(
        &t,
        "POST",
        "/apis/apps/v1/namespaces/default/deployments",
        deploy("a"),
    )
    .await;
    assert_eq!(code, 200);
    let (code, status) = send(
        &t,
        "PUT",
        "/apis/apps/v1/namespaces/default/deployments/web",
        deploy("b"),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        status["message"],
        r#"Deployment.apps "web" is invalid: spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{"app":"b"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"#
    );
    let binding = |role: &str| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "rb"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
               "subjects": [{"kind": "User", "name": "u"}]})
    };
    let path = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings";
    let (code, _) = send(&t, "POST", path, binding("view")).await;
    assert_eq!(code, 200);
    let (code, status) = send(&t, "PUT", &format!("{path}/rb"), binding("edit")).await;
    assert_eq!(code, 422);
    assert_eq!(
        status["message"],
        r#"RoleBinding.rbac.authorization.k8s.io "rb" is invalid: roleRef: Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"ClusterRole", Name:"edit"}: cannot change roleRef"#
    );
    // Storage classes and claims keep what they were created with.
    let class = |provisioner: &str| {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "fast"},
               "provisioner": provisioner, "volumeBindingMode": "WaitForFirstConsumer"})
    };
    let path = "/apis/storage.k8s.io/v1/storageclasses";
    let (code, _) = send(&t, "POST", path, class("a.example.com")).await;
    assert_eq!(code, 200);
    let (code, status) = send(&t, "PUT", &format!("{path}/fast"), class("b.example.com")).await;
    assert_eq!(code, 422);
    assert_eq!(
        status["message"],
        r#"StorageClass.storage.k8s.io "fast" is invalid: provisioner: Forbidden: updates to provisioner are forbidden."#
    );
    let claim = |size: &str| {
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}})
    };
    let path = "/api/v1/namespaces/default/persistentvolumeclaims";
    let (code, _) = send(&t, "POST", path, claim("1Gi")).await;
    assert_eq!(code, 200);
    let (code, status) = send(&t, "PUT", &format!("{path}/data"), claim("2Gi")).await;
    assert_eq!(code, 422);
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("PersistentVolumeClaim \"data\" is invalid: spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n"),
        "{message}"
    );

    // A pod's image may change, its other fields not; binding it is no update of it.
    let pod = |image: &str, hostname: Option<&str>| {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "u"},
               "spec": {"containers": [{"name": "c", "image": image}]}});
        if let Some(h) = hostname {
            p["spec"]["hostname"] = json!(h);
        }
        p
    };
    let (code, _) = send(
        &t,
        "POST",
        "/api/v1/namespaces/default/pods",
        pod("busybox", None),
    )
    .await;
    assert_eq!(code, 200);
    let (code, _) = send(
        &t,
        "POST",
        "/api/v1/namespaces/default/pods/u/binding",
        json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "u"},
               "target": {"kind": "Node", "name": "n1"}}),
    )
    .await;
    assert_eq!(code, 200);
    let (_, current) = send(&t, "GET", "/api/v1/namespaces/default/pods/u", Value::Null).await;
    let mut newer = current.clone();
    newer["spec"]["containers"][0]["image"] = json!("busybox:1.36");
    let (code, status) = send(
        &t,
        "PUT",
        "/api/v1/namespaces/default/pods/u",
        newer.clone(),
    )
    .await;
    assert_eq!(code, 200, "{status}");
    newer["spec"]["hostname"] = json!("h");
    newer["metadata"]["resourceVersion"] = status["metadata"]["resourceVersion"].clone();
    let (code, status) = send(&t, "PUT", "/api/v1/namespaces/default/pods/u", newer).await;
    assert_eq!(code, 422);
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("Pod \"u\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"),
        "{message}"
    );
}

/// A server started again over the same store finds its bootstrap objects and starts.
#[tokio::test]
async fn a_restarted_server_keeps_what_it_bootstrapped() {
    let store: std::sync::Arc<dyn konverge_store::KvStore> =
        std::sync::Arc::new(konverge_store::MemStore::new());
    let first = konverge_apiserver::ApiServer::builder(store.clone())
        .control_loops(false)
        .build()
        .await
        .expect("first start");
    drop(first);
    konverge_apiserver::ApiServer::builder(store)
        .control_loops(false)
        .build()
        .await
        .expect("a second start over the same store");
}

/// A request to the router in-process with a raw body: status, `Warning` headers and body.
async fn send_text(
    t: &TestServer,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> (u16, Vec<String>, Value) {
    use tower::ServiceExt;
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    let response = t.router.clone().oneshot(req).await.unwrap();
    let code = response.status().as_u16();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        code,
        warnings,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Duplicate fields are refused under `fieldValidation=Strict` and warned about under Warn
/// (the last one counts), in JSON and YAML; YAML is read as sigs.k8s.io/yaml reads it.
#[tokio::test]
async fn duplicate_fields_and_yaml_are_read_as_kube_apiserver_reads_them() {
    let t = TestServer::start(Backend::Memory).await;
    let path = "/api/v1/namespaces/default/configmaps";
    let json_body = r#"{"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "dup", "name": "dup", "labels": {"a": "1", "a": "2"}},
        "data": {"k": "first", "k": "last"}, "bogus": 1}"#;
    let (code, _, status) = send_text(
        &t,
        "POST",
        &format!("{path}?fieldValidation=Strict"),
        "application/json",
        json_body,
    )
    .await;
    assert_eq!((code, status["reason"].as_str()), (400, Some("BadRequest")));
    assert_eq!(
        status["message"],
        r#"ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: duplicate field "metadata.name", duplicate field "metadata.labels.a", duplicate field "data.k", unknown field "bogus""#
    );

    let (code, warnings, created) =
        send_text(&t, "POST", path, "application/json", json_body).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["data"]["k"], "last");
    assert_eq!(created["metadata"]["labels"]["a"], "2");
    for expected in [
        r#"duplicate field \"metadata.name\""#,
        r#"duplicate field \"data.k\""#,
        r#"unknown field \"bogus\""#,
    ] {
        assert!(
            warnings.iter().any(|w| w.contains(expected)),
            "{expected} not in {warnings:?}"
        );
    }

    // kube's own case (test/integration/apiserver/field_validation_test.go): unknown and
    // duplicate fields together, in the order the typed decoder meets them; a duplicated
    // unknown field is only unknown.
    let deployment = r#"{"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "strict-order", "labels": {"app": "nginx"}},
        "spec": {"unknown1": "val1", "unknownDupe": "valDupe", "unknownDupe": "valDupe2",
            "paused": true, "paused": false,
            "selector": {"matchLabels": {"app": "nginx"}},
            "template": {"metadata": {"labels": {"app": "nginx"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:latest",
                    "unknownNested": "val1", "imagePullPolicy": "Always",
                    "imagePullPolicy": "Never"}]}}}}"#;
    let expected = [
        r#"unknown field "spec.unknown1""#,
        r#"unknown field "spec.unknownDupe""#,
        r#"duplicate field "spec.paused""#,
        r#"unknown field "spec.template.spec.containers[0].unknownNested""#,
        r#"duplicate field "spec.template.spec.containers[0].imagePullPolicy""#,
    ];
    let deployments = "/apis/apps/v1/namespaces/default/deployments";
    let (code, _, status) = send_text(
        &t,
        "POST",
        &format!("{deployments}?fieldValidation=Strict"),
        "application/json",
        deployment,
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        format!(
            r#"Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: {}"#,
            expected.join(", ")
        )
    );
    let (code, warnings, _) =
        send_text(&t, "POST", deployments, "application/json", deployment).await;
    assert_eq!(code, 201);
    let expected_warnings: Vec<String> =
        expected.iter().map(|e| format!("299 - {:?}", e)).collect();
    assert_eq!(warnings, expected_warnings);

    // The same body in YAML (kube's own case): goyaml's duplicates first, every one on the
    // line of its value, then the unknown fields in the order of the JSON it converts to.
    let deployment_yaml = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: yaml-order\n  labels:\n    app: nginx\nspec:\n  unknown1: val1\n  unknownDupe: valDupe\n  unknownDupe: valDupe2\n  paused: true\n  paused: false\n  selector:\n    matchLabels:\n      app: nginx\n  template:\n    metadata:\n      labels:\n        app: nginx\n    spec:\n      containers:\n      - name: nginx\n        image: nginx:latest\n        unknownNested: val1\n        imagePullPolicy: Always\n        imagePullPolicy: Never";
    let expected_yaml = [
        r#"line 10: key "unknownDupe" already set in map"#,
        r#"line 12: key "paused" already set in map"#,
        r#"line 26: key "imagePullPolicy" already set in map"#,
        r#"unknown field "spec.template.spec.containers[0].unknownNested""#,
        r#"unknown field "spec.unknown1""#,
        r#"unknown field "spec.unknownDupe""#,
    ];
    let (code, _, status) = send_text(
        &t,
        "POST",
        &format!("{deployments}?fieldValidation=Strict"),
        "application/yaml",
        deployment_yaml,
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        format!(
            "Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: yaml: unmarshal errors:\n  {}, {}",
            expected_yaml[..3].join("\n  "),
            expected_yaml[3..].join(", ")
        )
    );
    let (code, warnings, _) =
        send_text(&t, "POST", deployments, "application/yaml", deployment_yaml).await;
    assert_eq!(code, 201);
    let expected_warnings: Vec<String> = expected_yaml
        .iter()
        .map(|e| format!("299 - {:?}", e))
        .collect();
    assert_eq!(warnings, expected_warnings);

    // YAML: YAML 1.1 scalars (an unquoted `yes` is a boolean, which a ConfigMap's data
    // refuses), and duplicate keys with their line.
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-yaml\n  name: from-yaml\ndata:\n  mode: \"0755\"\n";
    let (code, _, status) = send_text(
        &t,
        "POST",
        &format!("{path}?fieldValidation=Strict"),
        "application/yaml",
        yaml,
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        status["message"],
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: yaml: unmarshal errors:\n  line 5: key \"name\" already set in map"
    );
    let (code, _, created) = send_text(&t, "POST", path, "application/yaml", yaml).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["data"]["mode"], "0755");
    let (code, _, status) = send_text(
        &t,
        "POST",
        path,
        "application/yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\ndata:\n  enabled: yes\n",
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("ConfigMap in version \"v1\" cannot be handled as a ConfigMap"),
        "{status}"
    );

    // YAML flow syntax is YAML even when it starts like JSON: trailing commas are taken.
    let flow = "{apiVersion: v1, kind: ConfigMap, metadata: {name: flow, labels: {a: b, }, }, data: {k: v, }, }";
    let (code, _, created) = send_text(&t, "POST", path, "application/yaml", flow).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["metadata"]["labels"], json!({"a": "b"}));
    // A float with no fraction is an integer, as Go's JSON encoder writes it.
    let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: floaty\nspec:\n  replicas: 2e0\n  selector: {matchLabels: {app: a, }, }\n  template:\n    metadata: {labels: {app: a}}\n    spec:\n      containers: [{name: c, image: busybox, }, ]\n";
    let (code, _, created) = send_text(
        &t,
        "POST",
        "/apis/apps/v1/namespaces/default/deployments",
        "application/yaml",
        deployment,
    )
    .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["spec"]["replicas"], 2);

    // Server-side apply reads its body as YAML too, and reports duplicate keys as kube does:
    // refused under Strict, one warning per duplicate otherwise.
    let applied =
        "{apiVersion: v1, kind: ConfigMap, metadata: {name: applied, }, data: {k: v, }, }";
    let apply_path = format!("{path}/applied?fieldManager=me");
    let (code, _, created) = send_text(
        &t,
        "PATCH",
        &apply_path,
        "application/apply-patch+yaml",
        applied,
    )
    .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["data"]["k"], "v");
    let duplicated =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  k: one\n  k: two\n";
    let (code, _, status) = send_text(
        &t,
        "PATCH",
        &format!("{apply_path}&fieldValidation=Strict"),
        "application/apply-patch+yaml",
        duplicated,
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        "error strict decoding YAML: error converting YAML to JSON: yaml: unmarshal errors:\n  line 7: key \"k\" already set in map"
    );
    let (code, warnings, patched) = send_text(
        &t,
        "PATCH",
        &apply_path,
        "application/apply-patch+yaml",
        duplicated,
    )
    .await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["data"]["k"], "two");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(r#"line 7: key \"k\" already set in map"#)),
        "{warnings:?}"
    );
}

/// Creates the CustomResourceDefinition `crd` and waits until `path`, a list of its
/// resources, is served.
async fn define(t: &TestServer, crd: Value, path: &str) {
    let (code, body) = send(
        t,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        crd,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    eventually(&format!("{path} to be served"), || async {
        t.raw("GET", path, None, Vec::new()).await.0 == 200
    })
    .await;
}

/// A GET to the router in-process with an `Accept` header: status, content type and body.
async fn get_as(t: &TestServer, path: &str, accept: &str) -> (u16, String, Vec<u8>) {
    use tower::ServiceExt;
    let req = http::Request::builder()
        .uri(path)
        .header("accept", accept)
        .body(axum::body::Body::empty())
        .unwrap();
    let response = t.router.clone().oneshot(req).await.unwrap();
    let code = response.status().as_u16();
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (code, content_type, bytes.to_vec())
}

/// Clients that prefer protobuf (client-go's typed clients, kubectl) get built-in objects,
/// lists and errors in it; JSON stays the answer when it is preferred, for Tables, and for
/// kinds without a protobuf encoding.
#[tokio::test]
async fn protobuf_is_answered_to_clients_that_prefer_it() {
    let t = TestServer::start(Backend::Memory).await;
    let (code, _) = send(
        &t,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        json!({"metadata": {"name": "pb"}, "data": {"k": "v"}}),
    )
    .await;
    assert_eq!(code, 200, "created");
    let path = "/api/v1/namespaces/default/configmaps/pb";
    let protobuf = konverge_protobuf::CONTENT_TYPE;

    let (code, content_type, body) = get_as(
        &t,
        path,
        "application/vnd.kubernetes.protobuf,application/json",
    )
    .await;
    assert_eq!((code, content_type.as_str()), (200, protobuf));
    let (_, decoded) = konverge_protobuf::decode(&body).unwrap();
    let json_form = get(&t, path).await;
    assert_eq!(decoded["data"], json_form["data"]);
    assert_eq!(decoded["metadata"]["uid"], json_form["metadata"]["uid"]);
    assert_eq!(
        decoded["metadata"]["resourceVersion"],
        json_form["metadata"]["resourceVersion"]
    );

    // JSON first, or a Table: JSON.
    let (_, content_type, _) = get_as(
        &t,
        path,
        "application/json,application/vnd.kubernetes.protobuf",
    )
    .await;
    assert_eq!(content_type, "application/json");
    let (_, content_type, _) = get_as(
        &t,
        path,
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/vnd.kubernetes.protobuf",
    )
    .await;
    assert!(content_type.contains("as=Table"), "{content_type}");
    // A lower q loses.
    let (_, content_type, _) = get_as(
        &t,
        path,
        "application/vnd.kubernetes.protobuf;q=0.5,application/json",
    )
    .await;
    assert_eq!(content_type, "application/json");

    // Lists and errors too.
    let (code, content_type, body) = get_as(
        &t,
        "/api/v1/namespaces/default/configmaps",
        "application/vnd.kubernetes.protobuf",
    )
    .await;
    assert_eq!((code, content_type.as_str()), (200, protobuf));
    assert!(body.starts_with(b"k8s\0"));
    assert!(body.windows(13).any(|w| w == b"ConfigMapList"));
    let (code, content_type, body) = get_as(
        &t,
        "/api/v1/namespaces/default/configmaps/missing",
        "application/vnd.kubernetes.protobuf",
    )
    .await;
    assert_eq!((code, content_type.as_str()), (404, protobuf));
    assert!(body.windows(8).any(|w| w == b"NotFound"));

    // Kinds without an encoding (component statuses here; custom resources likewise) are
    // JSON when JSON is acceptable.
    let (code, content_type, _) = get_as(
        &t,
        "/api/v1/componentstatuses",
        "application/vnd.kubernetes.protobuf,application/json",
    )
    .await;
    assert_eq!((code, content_type.as_str()), (200, "application/json"));
}

/// A protobuf list is the list kube-apiserver writes for the objects the JSON list holds,
/// whether its items come from the watch cache (their messages kept for the next list) or
/// from the store (an exact resourceVersion), and it follows each change.
#[tokio::test]
async fn protobuf_lists_are_the_json_lists_objects_encoded() {
    let t = TestServer::start(Backend::Memory).await;
    let path = "/api/v1/namespaces/default/configmaps";
    for n in 0..3 {
        let (code, _) = send(
            &t,
            "POST",
            path,
            json!({"metadata": {"name": format!("pb-{n}"), "labels": {"n": n.to_string()}}, "data": {"k": "v".repeat(n * 100)}}),
        )
        .await;
        assert_eq!(code, 200, "created");
    }
    let protobuf = "application/vnd.kubernetes.protobuf";
    // What the protobuf list must be: the JSON list's items and metadata, encoded.
    let expected = |list: &Value| {
        konverge_protobuf::encode_list(
            "v1",
            "ConfigMapList",
            &list["metadata"],
            list["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|item| {
                    let mut item = item.clone();
                    item["apiVersion"] = json!("v1");
                    item["kind"] = json!("ConfigMap");
                    item
                })
                .collect::<Vec<_>>()
                .iter(),
        )
        .unwrap()
    };
    let json_list = get(&t, path).await;
    assert_eq!(
        json_list["items"].as_array().unwrap().len(),
        3,
        "{json_list}"
    );
    for _ in 0..2 {
        let (code, content_type, body) = get_as(&t, path, protobuf).await;
        assert_eq!((code, content_type.as_str()), (200, protobuf));
        assert_eq!(body, expected(&json_list));
    }

    // A change is a new object in the cache, with its own message.
    let (code, _) = send(
        &t,
        "PUT",
        &format!("{path}/pb-1"),
        json!({"metadata": {"name": "pb-1"}, "data": {"k": "changed"}}),
    )
    .await;
    assert_eq!(code, 200);
    let json_list = get(&t, path).await;
    let (_, _, body) = get_as(&t, path, protobuf).await;
    assert_eq!(body, expected(&json_list));
    assert!(body.windows(7).any(|w| w == b"changed"));

    // Read from the store at an exact revision, and a page with a continue token.
    let rv = json_list["metadata"]["resourceVersion"].as_str().unwrap();
    let exact = format!("{path}?resourceVersion={rv}&resourceVersionMatch=Exact");
    let (code, _, body) = get_as(&t, &exact, protobuf).await;
    assert_eq!(code, 200);
    assert_eq!(body, expected(&get(&t, &exact).await));
    let page = format!("{path}?limit=2");
    let (_, _, body) = get_as(&t, &page, protobuf).await;
    let json_page = get(&t, &page).await;
    assert!(json_page["metadata"]["continue"].is_string());
    assert_eq!(body, expected(&json_page));
}

/// kube-apiserver writes the items of a built-in kind's list without `kind` and
/// `apiVersion` (it decodes them into internal types, which carry none; kubernetes#3030),
/// from the watch cache or the store, and the items a deletecollection answers with too;
/// a single object has both, and so do a custom resource's list items.
#[tokio::test]
async fn list_items_of_built_in_kinds_carry_no_type() {
    let t = TestServer::start(Backend::Memory).await;
    let path = "/api/v1/namespaces/default/configmaps";
    for name in ["a", "b"] {
        let (code, _) = send(
            &t,
            "POST",
            path,
            json!({"metadata": {"name": name, "labels": {"app": "x"}}}),
        )
        .await;
        assert_eq!(code, 200, "created");
    }
    let one = get(&t, &format!("{path}/a")).await;
    assert_eq!(
        (&one["kind"], &one["apiVersion"]),
        (&json!("ConfigMap"), &json!("v1"))
    );
    let list = get(&t, path).await;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    for query in [
        String::new(),
        "?labelSelector=app%3Dx".into(),
        "?limit=1".into(),
        format!("?resourceVersion={rv}&resourceVersionMatch=Exact"),
    ] {
        let list = get(&t, &format!("{path}{query}")).await;
        assert_eq!(list["kind"], "ConfigMapList", "{query}");
        assert_eq!(list["apiVersion"], "v1", "{query}");
        let items = list["items"].as_array().unwrap();
        assert!(!items.is_empty(), "{query}");
        for item in items {
            assert_eq!(item.get("kind"), None, "{query}: {item}");
            assert_eq!(item.get("apiVersion"), None, "{query}: {item}");
            assert!(item["metadata"]["name"].is_string(), "{query}: {item}");
        }
    }
    let (code, deleted) = t
        .raw(
            "DELETE",
            &format!("{path}?labelSelector=app%3Dx"),
            None,
            Vec::new(),
        )
        .await;
    assert_eq!(code, 200, "{deleted}");
    assert_eq!(deleted["kind"], "ConfigMapList");
    let items = deleted["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{deleted}");
    assert!(
        items
            .iter()
            .all(|i| i.get("kind").is_none() && i.get("apiVersion").is_none())
    );

    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {
                "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    });
    let gadgets = "/apis/example.com/v1/namespaces/default/gadgets";
    define(&t, crd, gadgets).await;
    let (code, body) = send(
        &t,
        "POST",
        gadgets,
        json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let list = get(&t, gadgets).await;
    assert_eq!(list["items"][0]["kind"], "Gadget", "{list}");
    assert_eq!(list["items"][0]["apiVersion"], "example.com/v1", "{list}");
}

/// A custom resource's embedded objects (`x-kubernetes-embedded-resource`, such as a pod
/// template) have ObjectMeta as their metadata: a field it does not have is an unknown field
/// there, reported, dropped or refused as `fieldValidation` says, for creates and applies.
#[tokio::test]
async fn unknown_fields_in_embedded_metadata_are_strict_decoding_errors() {
    let t = TestServer::start(Backend::Memory).await;
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "runners.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "runners", "singular": "runner", "kind": "Runner"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {
                "openAPIV3Schema": {"type": "object", "properties": {"spec": {
                    "type": "object",
                    "properties": {"template": {
                        "type": "object",
                        "x-kubernetes-embedded-resource": true,
                        "properties": {"spec": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": true,
                        }},
                    }},
                }}},
            }}],
        },
    });
    let path = "/apis/example.com/v1/namespaces/default/runners";
    define(&t, crd, path).await;
    let runner = |name: &str| {
        format!(
            r#"{{"apiVersion": "example.com/v1", "kind": "Runner", "metadata": {{"name": "{name}"}},
            "spec": {{"template": {{"apiVersion": "v1", "kind": "Pod",
                "metadata": {{"name": "inner", "bogus": 1}}, "spec": {{"x": 1}}}}}}}}"#
        )
    };
    let (code, _, status) = send_text(
        &t,
        "POST",
        &format!("{path}?fieldValidation=Strict"),
        "application/json",
        &runner("strict"),
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        r#"Runner in version "v1" cannot be handled as a Runner: strict decoding error: unknown field "spec.template.metadata.bogus""#
    );
    let (code, warnings, created) =
        send_text(&t, "POST", path, "application/json", &runner("warned")).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(
        warnings,
        [r#"299 - "unknown field \"spec.template.metadata.bogus\"""#]
    );
    // Coercion goes through Go's ObjectMeta, which always writes `creationTimestamp`.
    assert_eq!(
        created["spec"]["template"]["metadata"],
        json!({"name": "inner", "creationTimestamp": null})
    );
    // Server-side apply: the same words, not a failure to build the typed patch.
    let apply = format!("{path}/applied?fieldManager=me");
    let (code, _, status) = send_text(
        &t,
        "PATCH",
        &format!("{apply}&fieldValidation=Strict"),
        "application/apply-patch+yaml",
        &runner("applied"),
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .ends_with(r#"strict decoding error: unknown field "spec.template.metadata.bogus""#),
        "{status}"
    );
    let (code, warnings, applied) = send_text(
        &t,
        "PATCH",
        &apply,
        "application/apply-patch+yaml",
        &runner("applied"),
    )
    .await;
    assert_eq!(code, 201, "{applied}");
    assert_eq!(
        warnings,
        [r#"299 - "unknown field \"spec.template.metadata.bogus\"""#]
    );
    assert_eq!(
        applied["spec"]["template"]["metadata"],
        json!({"name": "inner", "creationTimestamp": null})
    );
}

/// Objects carry what Go always writes for them: empty structs (`status.loadBalancer`) and
/// fields without `omitempty` at their zero values, so clients that read them find them.
#[tokio::test]
async fn objects_carry_the_empty_fields_go_writes() {
    let t = TestServer::start(Backend::Memory).await;
    let template = json!({"metadata": {"labels": {"app": "a"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    for (path, body, expected) in [
        (
            "/api/v1/namespaces/default/services",
            json!({"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 80}]}}),
            json!({"status": {"loadBalancer": {}}}),
        ),
        (
            "/apis/networking.k8s.io/v1/namespaces/default/ingresses",
            json!({"metadata": {"name": "in"}, "spec": {"defaultBackend":
                {"service": {"name": "svc", "port": {"number": 80}}}}}),
            json!({"status": {"loadBalancer": {}}}),
        ),
        (
            "/apis/apps/v1/namespaces/default/statefulsets",
            json!({"metadata": {"name": "db"}, "spec": {"serviceName": "db",
                "selector": {"matchLabels": {"app": "a"}}, "template": template}}),
            json!({"status": {"replicas": 0, "availableReplicas": 0}}),
        ),
        (
            "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
            json!({"metadata": {"name": "pdb"}, "spec": {"minAvailable": 1}}),
            json!({"status": {"disruptionsAllowed": 0, "currentHealthy": 0,
                "desiredHealthy": 0, "expectedPods": 0}}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            json!({"metadata": {"name": "empty"}}),
            json!({"rules": null}),
        ),
    ] {
        let (code, created) = send(&t, "POST", path, body).await;
        assert_eq!(code, 200, "{path}: {created}");
        for (field, value) in expected.as_object().unwrap() {
            assert_eq!(&created[field], value, "{path}: {created}");
            assert!(created.get(field).is_some(), "{path}: {field} missing");
        }
    }
}

/// What Go leaves out is not kept: kube-apiserver decodes into its Go structs, so an empty
/// `omitempty` field a client sends (`labels: {}`, `finalizers: []`, `hostPort: 0`) is
/// gone, at any depth and for custom resources' metadata too; an update that only adds such
/// fields changes nothing (no new resourceVersion, so no watch event); struct fields inside
/// lists (every container's `resources`) are written.
#[tokio::test]
async fn empty_fields_go_leaves_out_are_not_kept() {
    let t = TestServer::start(Backend::Memory).await;
    let no_empty_metadata = |created: &Value| {
        for field in [
            "labels",
            "annotations",
            "finalizers",
            "ownerReferences",
            "generateName",
        ] {
            assert!(
                created["metadata"].get(field).is_none(),
                "{field}: {created}"
            );
        }
    };
    let empty_meta = json!({"labels": {}, "annotations": {}, "finalizers": [],
        "ownerReferences": [], "generateName": ""});
    let mut body = json!({"metadata": empty_meta.clone(), "data": {}});
    body["metadata"]["name"] = json!("cm");
    let (code, created) = send(
        &t,
        "POST",
        "/api/v1/namespaces/default/configmaps?fieldManager=client",
        body,
    )
    .await;
    assert_eq!(code, 200, "{created}");
    no_empty_metadata(&created);
    assert!(created.get("data").is_none(), "{created}");
    let owned = created["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        owned
            .iter()
            .all(|m| m["fieldsV1"].get("f:metadata").is_none()),
        "empty fields are not owned: {owned:?}"
    );

    // Adding empty fields to what is stored is no change at all.
    let mut same = created.clone();
    same["metadata"]["labels"] = json!({});
    same["metadata"]["finalizers"] = json!([]);
    same["data"] = json!({});
    let (code, updated) = send(&t, "PUT", "/api/v1/namespaces/default/configmaps/cm", same).await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(
        updated["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"],
        "a no-op: {updated}"
    );

    // At depth, in a pod: zero values of `omitempty` fields go, pointers keep theirs, and
    // every container gets the `resources` struct.
    let (code, pod) = send(
        &t,
        "POST",
        "/api/v1/namespaces/default/pods",
        json!({"metadata": {"name": "p"}, "spec": {
            "nodeSelector": {}, "hostNetwork": false, "terminationGracePeriodSeconds": 0,
            "serviceAccountName": "", "automountServiceAccountToken": false,
            "containers": [{"name": "c", "image": "busybox", "stdin": false, "args": [],
                "ports": [{"containerPort": 80, "hostPort": 0, "name": ""}]}]}}),
    )
    .await;
    assert_eq!(code, 200, "{pod}");
    let spec = &pod["spec"];
    assert!(
        spec.get("nodeSelector").is_none() && spec.get("hostNetwork").is_none(),
        "{spec}"
    );
    assert_eq!(
        spec["terminationGracePeriodSeconds"], 0,
        "a pointer: {spec}"
    );
    assert_eq!(
        spec["automountServiceAccountToken"], false,
        "a pointer: {spec}"
    );
    let container = &spec["containers"][0];
    for field in ["stdin", "args"] {
        assert!(container.get(field).is_none(), "{field}: {container}");
    }
    assert_eq!(
        container["ports"][0],
        json!({"containerPort": 80, "protocol": "TCP"})
    );
    assert_eq!(container["resources"], json!({}));

    // A custom resource's metadata goes through Go's ObjectMeta; its own fields are kept.
    define(
        &t,
        json!({"metadata": {"name": "widgets.example.com"}, "spec": {"group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets"}, "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true, "schema":
                {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}),
        "/apis/example.com/v1/namespaces/default/widgets",
    )
    .await;
    let mut widget = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": empty_meta, "spec": {"tags": [], "size": 0}});
    widget["metadata"]["name"] = json!("w");
    let (code, created) = send(
        &t,
        "POST",
        "/apis/example.com/v1/namespaces/default/widgets",
        widget,
    )
    .await;
    assert_eq!(code, 200, "{created}");
    no_empty_metadata(&created);
    assert_eq!(created["spec"], json!({"tags": [], "size": 0}));
}

/// Query options are read as kube's parameter codec reads them (integers with
/// `strconv.ParseInt`, an empty one included) and validated as kube-apiserver validates each
/// kind of options: every problem at once, in a 422 naming `ListOptions`, `CreateOptions`,
/// `UpdateOptions`, `PatchOptions` or `DeleteOptions`.
#[tokio::test]
async fn query_options_are_read_and_validated_as_kube_apiserver_does() {
    let t = TestServer::start(Backend::Memory).await;
    let refused = |code: u16, status: &Value| {
        (
            code,
            status["reason"].as_str().unwrap_or_default().to_string(),
            status["message"].as_str().unwrap_or_default().to_string(),
        )
    };
    let bad = |message: &str| (400, "BadRequest".to_string(), message.to_string());
    let invalid = |message: &str| (422, "Invalid".to_string(), message.to_string());
    let list = "/api/v1/namespaces/default/configmaps";
    for (query, expected) in [
        (
            "limit=ten",
            bad(r#"strconv.ParseInt: parsing "ten": invalid syntax"#),
        ),
        (
            "limit=",
            bad(r#"strconv.ParseInt: parsing "": invalid syntax"#),
        ),
        (
            "watch=1&timeoutSeconds=soon",
            bad(r#"strconv.ParseInt: parsing "soon": invalid syntax"#),
        ),
        (
            "resourceVersionMatch=Exact&sendInitialEvents=false",
            invalid(
                r#"ListOptions.meta.k8s.io "" is invalid: [resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided, sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list]"#,
            ),
        ),
        (
            "resourceVersion=0&resourceVersionMatch=Exact",
            invalid(
                r#"ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0""#,
            ),
        ),
        (
            "resourceVersion=1&resourceVersionMatch=Newest",
            invalid(
                r#"ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Unsupported value: "Newest": supported values: "Exact", "NotOlderThan", """#,
            ),
        ),
        (
            "watch=true&resourceVersionMatch=NotOlderThan",
            invalid(
                r#"ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"#,
            ),
        ),
    ] {
        let (code, status) = t.call("GET", &format!("{list}?{query}"), Value::Null).await;
        assert_eq!(refused(code, &status), expected, "{query}");
    }
    // A limit of zero or less is no limit.
    let (code, _) = t
        .call("GET", &format!("{list}?limit=-1"), Value::Null)
        .await;
    assert_eq!(code, 200);

    let config_map =
        |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    let (code, status) = t
        .call(
            "POST",
            &format!("{list}?fieldManager=a%09b&dryRun=Some&fieldValidation=Loud"),
            config_map("options"),
        )
        .await;
    assert_eq!(
        refused(code, &status),
        invalid(
            r#"CreateOptions.meta.k8s.io "" is invalid: [fieldManager: Invalid value: "a\tb": invalid character U+0009 (at position 1), dryRun: Unsupported value: []string{"Some"}: supported values: "All", fieldValidation: Unsupported value: "Loud": supported values: "", "Ignore", "Strict", "Warn"]"#
        )
    );
    assert_eq!(
        status["details"]["causes"][1],
        json!({"reason": "FieldValueNotSupported", "message": "Unsupported value: []string{\"Some\"}: supported values: \"All\"", "field": "dryRun"})
    );
    let long = "m".repeat(129);
    let (code, status) = t
        .call(
            "POST",
            &format!("{list}?fieldManager={long}"),
            config_map("options"),
        )
        .await;
    assert_eq!(
        refused(code, &status),
        invalid(
            r#"CreateOptions.meta.k8s.io "" is invalid: fieldManager: Too long: may not be more than 128 bytes"#
        )
    );
    // Every dryRun value must be All; then it is a dry run.
    let (code, _) = t
        .call(
            "POST",
            &format!("{list}?dryRun=All&dryRun=All"),
            config_map("dry"),
        )
        .await;
    assert_eq!(code, 201);
    let (code, _) = t.call("GET", &format!("{list}/dry"), Value::Null).await;
    assert_eq!(code, 404, "a dry run stores nothing");

    let (code, created) = t.call("POST", list, config_map("options")).await;
    assert_eq!(code, 201, "{created}");
    let one = format!("{list}/options");
    let (code, status) = t
        .call(
            "PUT",
            &format!("{one}?fieldValidation=strict"),
            created.clone(),
        )
        .await;
    assert_eq!(
        refused(code, &status),
        invalid(
            r#"UpdateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "strict": supported values: "", "Ignore", "Strict", "Warn""#
        )
    );
    let (code, status) = t
        .raw(
            "PATCH",
            &format!("{one}?force=true&dryRun="),
            Some("application/merge-patch+json"),
            json!({"data": {"a": "b"}}).to_string(),
        )
        .await;
    assert_eq!(
        refused(code, &status),
        invalid(
            r#"PatchOptions.meta.k8s.io "" is invalid: [force: Forbidden: may not be specified for non-apply patch, dryRun: Unsupported value: []string{""}: supported values: "All"]"#
        )
    );
    // As kube-apiserver's handlers: a patch type it does not take is refused first, then
    // the options, before the body is read as anything.
    let (code, status) = t
        .raw(
            "PATCH",
            &format!("{one}?force=true"),
            Some("application/merge-patch+json"),
            "{not json",
        )
        .await;
    assert_eq!(
        refused(code, &status),
        invalid(
            r#"PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch"#
        )
    );
    let (code, _) = t
        .raw(
            "PATCH",
            &format!("{one}?force=true"),
            Some("text/plain"),
            "{not json",
        )
        .await;
    assert_eq!(code, 415);
    let (code, status) = t
        .raw(
            "PUT",
            &format!("{one}?fieldValidation=strict"),
            Some("application/json"),
            "{not json",
        )
        .await;
    assert_eq!(
        refused(code, &status),
        invalid(
            r#"UpdateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "strict": supported values: "", "Ignore", "Strict", "Warn""#
        )
    );

    let (code, status) = t
        .call(
            "DELETE",
            &format!("{one}?propagationPolicy=Eventually"),
            Value::Null,
        )
        .await;
    assert_eq!(
        refused(code, &status),
        invalid(
            r#"DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Eventually": supported values: "Foreground", "Background", "Orphan", "nil""#
        )
    );
    let (code, status) = t
        .call(
            "DELETE",
            &one,
            json!({"kind": "DeleteOptions", "apiVersion": "v1", "orphanDependents": false, "propagationPolicy": "Background"}),
        )
        .await;
    assert_eq!(
        refused(code, &status),
        invalid(
            r#"DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Invalid value: "Background": orphanDependents and deletionPropagation cannot be both set"#
        )
    );
    // With a body, the query's options are not read: this delete is not a dry run.
    let (code, _) = t
        .call(
            "DELETE",
            &format!("{one}?dryRun=All"),
            json!({"kind": "DeleteOptions", "apiVersion": "v1"}),
        )
        .await;
    assert_eq!(code, 200);
    let (code, _) = t.call("GET", &one, Value::Null).await;
    assert_eq!(code, 404, "deleted");
}

/// What a create owns, as kube's field manager records it: the new object compared with the
/// empty object of its Go type, in which `spec`, `strategy`, `template` and their like
/// already exist (so they own no `.`), while maps and pointers (`labels`, `data`,
/// `rollingUpdate`, a container) do not (so they do). The Deployment is what
/// `kubectl create deployment nginx --image=nginx` sends; the fields owned are what a
/// cluster records for it.
#[tokio::test]
async fn a_create_owns_what_kubes_field_manager_records() {
    let t = TestServer::start(Backend::Memory).await;
    let (code, created) = t
        .call(
            "POST",
            "/apis/apps/v1/namespaces/default/deployments?fieldManager=kubectl-create",
            json!({"kind": "Deployment", "apiVersion": "apps/v1",
                "metadata": {"name": "nginx", "creationTimestamp": null, "labels": {"app": "nginx"}},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "nginx"}},
                    "template": {"metadata": {"creationTimestamp": null, "labels": {"app": "nginx"}},
                        "spec": {"containers": [{"name": "nginx", "image": "nginx", "resources": {}}]}},
                    "strategy": {}},
                "status": {}}),
        )
        .await;
    assert_eq!(code, 201, "{created}");
    let entry = &created["metadata"]["managedFields"][0];
    assert_eq!(entry["manager"], "kubectl-create");
    assert_eq!(entry["operation"], "Update");
    assert_eq!(
        entry["fieldsV1"],
        json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:progressDeadlineSeconds": {}, "f:replicas": {}, "f:revisionHistoryLimit": {},
                "f:selector": {},
                "f:strategy": {
                    "f:rollingUpdate": {".": {}, "f:maxSurge": {}, "f:maxUnavailable": {}},
                    "f:type": {},
                },
                "f:template": {
                    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {
                        "f:containers": {"k:{\"name\":\"nginx\"}": {
                            ".": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                            "f:resources": {}, "f:terminationMessagePath": {},
                            "f:terminationMessagePolicy": {},
                        }},
                        "f:dnsPolicy": {}, "f:restartPolicy": {}, "f:schedulerName": {},
                        "f:securityContext": {}, "f:terminationGracePeriodSeconds": {},
                    },
                },
            },
        })
    );
    // A Secret's `data` is a map a new Secret does not have; its `type` a string it has not.
    let (code, secret) = t
        .call(
            "POST",
            "/api/v1/namespaces/default/secrets?fieldManager=kubectl-create",
            json!({"metadata": {"name": "s"}, "data": {"a": "Yg=="}, "type": "Opaque"}),
        )
        .await;
    assert_eq!(code, 201, "{secret}");
    assert_eq!(
        secret["metadata"]["managedFields"][0]["fieldsV1"],
        json!({"f:data": {".": {}, "f:a": {}}, "f:type": {}})
    );
}

/// A dry run of a Service answers with addresses as kube's dry-run allocators give them,
/// taking none: node ports asked for are checked (a taken one is refused), those not asked
/// for are stand-ins (32769, then one more than the highest given), and the cluster IP is
/// the range's network address; an update to NodePort shows its ports the same way.
#[tokio::test]
async fn dry_run_services_show_addresses_and_take_none() {
    let t = TestServer::start(Backend::Memory).await;
    let path = "/api/v1/namespaces/default/services";
    let service = |name: &str| {
        json!({"metadata": {"name": name}, "spec": {"type": "NodePort", "ports": [
            {"name": "a", "port": 80},
            {"name": "b", "port": 81, "nodePort": 30080},
            {"name": "c", "port": 82},
        ]}})
    };
    let (code, dry) = t
        .call("POST", &format!("{path}?dryRun=All"), service("web"))
        .await;
    assert_eq!(code, 201, "{dry}");
    assert_eq!(node_ports_of(&dry), [32769, 30080, 32770]);
    assert_eq!(dry["spec"]["clusterIP"], "10.96.0.0");
    assert_eq!(dry["spec"]["clusterIPs"], json!(["10.96.0.0"]));
    // Nothing was taken: the real create gets 30080 and an address of its own.
    let (code, real) = t.call("POST", path, service("web")).await;
    assert_eq!(code, 201, "{real}");
    assert_eq!(node_ports_of(&real)[1], 30080);
    let ip = real["spec"]["clusterIP"].as_str().unwrap().to_string();
    assert_ne!(ip, "10.96.0.0");
    let (code, _) = t
        .call(
            "GET",
            &format!("/apis/networking.k8s.io/v1/ipaddresses/{ip}"),
            Value::Null,
        )
        .await;
    assert_eq!(code, 200);
    // Now taken: a dry run asking for it is refused in kube's words.
    let (code, refused) = t
        .call("POST", &format!("{path}?dryRun=All"), service("other"))
        .await;
    assert_eq!(code, 422, "{refused}");
    assert_eq!(
        refused["message"],
        "Service \"other\" is invalid: spec.ports[1].nodePort: Invalid value: 30080: provided port is already allocated"
    );
    // A dry-run update to NodePort shows stand-in ports and keeps the stored Service as it is.
    let (code, plain) = t
        .call(
            "POST",
            path,
            json!({"metadata": {"name": "plain"}, "spec": {"ports": [{"port": 80}]}}),
        )
        .await;
    assert_eq!(code, 201, "{plain}");
    let (code, patched) = t
        .raw(
            "PATCH",
            &format!("{path}/plain?dryRun=All"),
            Some("application/merge-patch+json"),
            serde_json::to_vec(&json!({"spec": {"type": "NodePort"}})).unwrap(),
        )
        .await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(node_ports_of(&patched), [32769]);
    let (_, stored) = t.call("GET", &format!("{path}/plain"), Value::Null).await;
    assert_eq!(stored["spec"]["type"], "ClusterIP");
    assert!(node_ports_of(&stored).is_empty());
}

/// A Service's node ports, in the order of its ports.
fn node_ports_of(svc: &Value) -> Vec<i64> {
    svc["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["nodePort"].as_i64())
        .collect()
}

/// A custom resource's numbers are read as kube's unstructured decoding reads them: a float
/// with no fraction is the integer it equals, in creates, merge patches and updates, so a Go
/// client reading the field into an integer gets `3`, not `3.0` (which it cannot decode); a
/// fraction stays. A built-in kind's integer field refuses `3.0`, as its typed decoder does.
#[tokio::test]
async fn custom_resource_numbers_are_read_as_kube_reads_them() {
    let t = TestServer::start(Backend::Memory).await;
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "dials.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "dials", "singular": "dial", "kind": "Dial", "listKind": "DialList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {
                "openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object",
                    "properties": {
                        "replicas": {"type": "integer"},
                        "ratio": {"type": "number"},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    }}}}}}],
        },
    });
    let dials = "/apis/example.com/v1/namespaces/default/dials";
    define(&t, crd, dials).await;
    let json = Some("application/json");
    let (code, created) = t
        .raw(
            "POST",
            dials,
            json,
            r#"{"apiVersion": "example.com/v1", "kind": "Dial", "metadata": {"name": "d"},
                "spec": {"replicas": 3.0, "ratio": 2.5, "free": {"n": 1e3, "m": [4.0, 0.5]}}}"#,
        )
        .await;
    assert_eq!(code, 200, "{created}");
    let text = |v: &Value| serde_json::to_string(&v["spec"]).unwrap();
    assert_eq!(
        text(&created),
        r#"{"free":{"m":[4,0.5],"n":1000},"ratio":2.5,"replicas":3}"#
    );
    let (code, patched) = t
        .raw(
            "PATCH",
            &format!("{dials}/d"),
            Some("application/merge-patch+json"),
            r#"{"spec": {"replicas": 5.0, "ratio": 6.0}}"#,
        )
        .await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(
        text(&patched),
        r#"{"free":{"m":[4,0.5],"n":1000},"ratio":6,"replicas":5}"#
    );
    let stored = get(&t, &format!("{dials}/d")).await;
    assert_eq!(text(&stored), text(&patched));
    let mut replaced = stored.clone();
    replaced["spec"]["replicas"] = json!(7.0);
    let (code, updated) = t
        .raw(
            "PUT",
            &format!("{dials}/d"),
            json,
            serde_json::to_vec(&replaced).unwrap(),
        )
        .await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["spec"]["replicas"].to_string(), "7");

    let (code, refused) = t
        .raw(
            "POST",
            "/apis/apps/v1/namespaces/default/deployments",
            json,
            r#"{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "f"},
                "spec": {"replicas": 2.0, "selector": {"matchLabels": {"a": "b"}},
                "template": {"metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}}}"#,
        )
        .await;
    assert_eq!(code, 400, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .starts_with("Deployment in version \"v1\" cannot be handled as a Deployment: "),
        "{refused}"
    );
}
