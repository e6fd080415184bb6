//! `Invariants::always`: a property of the world checked on every change, with a grace for
//! state that trails other state.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use konverge_testkit::{TestEnv, Violation, World};
use kube::api::{Api, DeleteParams, PostParams};

async fn config_map(api: &Api<ConfigMap>, name: &str) {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    api.create(&PostParams::default(), &cm)
        .await
        .expect("created");
}

async fn delete(api: &Api<ConfigMap>, name: &str) {
    api.delete(name, &DeleteParams::default())
        .await
        .expect("deleted");
}

#[tokio::test(start_paused = true)]
async fn a_breach_longer_than_the_grace_is_reported_with_its_name_and_cause() {
    let env = TestEnv::builder().in_process().bare().start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.direct_client(), "default");
    let check = env.invariants().watch::<ConfigMap>().start().await;
    // kube-root-ca.crt may or may not be there: count what exists at the start.
    let base = check.world().list("configmaps").count();
    check.always("few config maps", Duration::from_secs(2), move |w| {
        match w.list("configmaps").count() - base {
            n if n <= 2 => Ok(()),
            n => Err(format!("{n} config maps")),
        }
    });
    config_map(&api, "a").await;
    config_map(&api, "b").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // A breach of one second, within the grace.
    config_map(&api, "c").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    delete(&api, "c").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    check.always_held().expect("a breach within the grace");
    // A breach of five seconds.
    tokio::time::sleep(Duration::from_secs(1)).await;
    config_map(&api, "d").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    delete(&api, "d").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let violation = check.always_held().expect_err("a breach past the grace");
    let Violation::Broken {
        invariant,
        reason,
        lasted,
        grace,
        ongoing,
        after,
        ..
    } = &violation
    else {
        panic!("{violation}");
    };
    assert_eq!(invariant, "few config maps");
    assert_eq!(reason, "3 config maps");
    assert_eq!(*grace, Duration::from_secs(2));
    assert!(
        (Duration::from_secs(5)..Duration::from_secs(6)).contains(lasted),
        "{lasted:?}"
    );
    assert!(!ongoing);
    assert!(
        after
            .as_deref()
            .is_some_and(|a| a.starts_with("added configmaps default/d")),
        "{after:?}"
    );
    let text = violation.to_string();
    assert!(
        text.starts_with(
            "invariant \"few config maps\" broken for 5s (grace 2s), from 3.1s after the checks started: 3 config maps"
        ),
        "{text}"
    );
    assert!(
        text.contains("first broken by: added configmaps default/d"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_breach_still_going_on_counts_once_it_outlasts_the_grace() {
    let env = TestEnv::builder().in_process().bare().start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.direct_client(), "other");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.direct_client());
    let mut ns = k8s_openapi::api::core::v1::Namespace::default();
    ns.metadata.name = Some("other".into());
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    let check = env.invariants().watch::<ConfigMap>().start().await;
    let in_other = |w: &World| match w
        .list("configmaps")
        .filter(|(k, _)| k.namespace == "other")
        .count()
    {
        n if n <= 2 => Ok(()),
        n => Err(format!("{n} config maps")),
    };
    check.always("strict", Duration::ZERO, in_other);
    for name in ["a", "b", "c"] {
        config_map(&api, name).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let violation = check.always_held().expect_err("broken, and still");
    assert!(
        matches!(&violation, Violation::Broken { ongoing: true, invariant, .. } if invariant == "strict"),
        "{violation}"
    );
    assert!(
        violation.to_string().contains(" and still broken"),
        "{violation}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_property_false_when_given_is_broken_from_the_start() {
    let env = TestEnv::builder().in_process().bare().start().await;
    let check = env.invariants().watch::<ConfigMap>().start().await;
    check.always("never", Duration::from_secs(1), |_| {
        Err("never holds".into())
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let violation = check.always_held().expect_err("broken");
    let Violation::Broken { after, since, .. } = &violation else {
        panic!("{violation}");
    };
    assert_eq!(after, &None);
    assert!(*since < Duration::from_secs(1), "{since:?}");
}
