//! Leader election against an in-process konverge API server, in Tokio's paused time with
//! short timings: a 2 s lease, a 1 s renew deadline and a 200 ms retry period. The clock
//! moves only when every task is idle, so leases expire at exact virtual times and waiting
//! for them takes no real time. (The Lease's `acquireTime` and `renewTime` are wall-clock
//! timestamps, which paused time does not move: they are only checked to be recent and to
//! change.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use konverge_runtime::leader::{LeaderElection, LeaderHandle, LeaseConfig};
use konverge_testkit::TestEnv;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::{Instant, timeout};
use tokio_util::sync::CancellationToken;

const NAMESPACE: &str = "default";
const LEASE_DURATION: Duration = Duration::from_secs(2);

fn config(lease: &str, identity: &str) -> LeaseConfig {
    LeaseConfig::new(NAMESPACE, lease)
        .with_identity(identity)
        .with_lease_duration(LEASE_DURATION)
        .with_renew_deadline(Duration::from_secs(1))
        .with_retry_period(Duration::from_millis(200))
}

struct Candidate {
    handle: LeaderHandle,
    shutdown: CancellationToken,
}

fn spawn(env: &TestEnv, lease: &str, identity: &str) -> anyhow::Result<Candidate> {
    let shutdown = CancellationToken::new();
    let election = LeaderElection::new(env.client(), config(lease, identity))?;
    let handle = election.spawn(shutdown.clone());
    assert_eq!(handle.identity(), identity);
    Ok(Candidate { handle, shutdown })
}

/// Waits until `leading` shows `value`; returns how long that took.
async fn wait_leading(
    mut leading: watch::Receiver<bool>,
    value: bool,
    within: Duration,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    timeout(within, leading.wait_for(|leading| *leading == value))
        .await
        .with_context(|| format!("leading did not become {value} within {within:?}"))??;
    Ok(start.elapsed())
}

async fn spec(api: &Api<Lease>, name: &str) -> anyhow::Result<LeaseSpec> {
    api.get(name).await?.spec.context("lease without spec")
}

/// Watches two candidates and remembers whether both ever claimed to lead at once.
fn watch_for_two_leaders(a: &LeaderHandle, b: &LeaderHandle) -> Arc<AtomicBool> {
    let both = Arc::new(AtomicBool::new(false));
    let (mut a, mut b) = (a.leading(), b.leading());
    let seen = both.clone();
    tokio::spawn(async move {
        loop {
            if *a.borrow_and_update() && *b.borrow_and_update() {
                seen.store(true, Ordering::SeqCst);
            }
            tokio::select! {
                changed = a.changed() => if changed.is_err() { return },
                changed = b.changed() => if changed.is_err() { return },
            }
        }
    });
    both
}

fn assert_recent(time: &Option<MicroTime>, what: &str) {
    let time = time
        .as_ref()
        .unwrap_or_else(|| panic!("{what} is not set"))
        .0;
    let age = Timestamp::now().duration_since(time);
    assert!(
        age >= SignedDuration::from_secs(-5) && age <= SignedDuration::from_secs(30),
        "{what} {time} is not recent"
    );
}

#[tokio::test(start_paused = true)]
async fn acquires_a_fresh_lease_and_keeps_renewing_it() -> anyhow::Result<()> {
    let env = TestEnv::builder().in_process().start().await;
    let api: Api<Lease> = Api::namespaced(env.client(), NAMESPACE);
    assert!(api.get_opt("fresh").await?.is_none());

    let a = spawn(&env, "fresh", "alpha")?;
    wait_leading(a.handle.leading(), true, Duration::from_secs(2)).await?;
    assert!(a.handle.is_leader());

    let created = spec(&api, "fresh").await?;
    assert_eq!(created.holder_identity.as_deref(), Some("alpha"));
    assert_eq!(created.lease_duration_seconds, Some(2));
    assert_eq!(created.lease_transitions, Some(0));
    assert_recent(&created.acquire_time, "acquireTime");
    assert_recent(&created.renew_time, "renewTime");

    // The leader renews every retry period: renewTime moves, the rest stays.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let renewed = spec(&api, "fresh").await?;
    assert_eq!(renewed.holder_identity.as_deref(), Some("alpha"));
    assert_eq!(renewed.acquire_time, created.acquire_time);
    assert_eq!(renewed.lease_transitions, Some(0));
    assert!(
        renewed.renew_time.as_ref().map(|t| t.0) > created.renew_time.as_ref().map(|t| t.0),
        "renewTime did not advance: {:?} then {:?}",
        created.renew_time,
        renewed.renew_time
    );
    assert!(a.handle.is_leader());

    a.shutdown.cancel();
    let mut leading = a.handle.leading();
    a.handle.stopped().await?;
    assert!(!*leading.borrow_and_update());
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn graceful_shutdown_releases_to_the_other_candidate_at_once() -> anyhow::Result<()> {
    let env = TestEnv::builder().in_process().start().await;
    let api: Api<Lease> = Api::namespaced(env.client(), NAMESPACE);
    let a = spawn(&env, "shared", "alpha")?;
    let b = spawn(&env, "shared", "beta")?;
    let two_leaders = watch_for_two_leaders(&a.handle, &b.handle);

    let (mut a_leading, mut b_leading) = (a.handle.leading(), b.handle.leading());
    timeout(Duration::from_secs(3), async {
        tokio::select! {
            _ = a_leading.wait_for(|l| *l) => {},
            _ = b_leading.wait_for(|l| *l) => {},
        }
    })
    .await
    .context("nobody became leader")?;
    // Give the other candidate several attempts: it must keep waiting.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (leader, follower) = match (a.handle.is_leader(), b.handle.is_leader()) {
        (true, false) => (a, b),
        (false, true) => (b, a),
        both => anyhow::bail!("expected exactly one leader, got {both:?}"),
    };
    let before = spec(&api, "shared").await?;
    assert_eq!(
        before.holder_identity.as_deref(),
        Some(leader.handle.identity())
    );
    assert_eq!(before.lease_transitions, Some(0));

    let released_at = Instant::now();
    leader.shutdown.cancel();
    leader.handle.stopped().await?;
    let released = spec(&api, "shared").await?;
    // Either still the released record, or the follower was quick enough to take it already.
    if released.holder_identity.as_deref() != Some(follower.handle.identity()) {
        assert_eq!(released.holder_identity, None);
        assert_eq!(released.lease_duration_seconds, Some(1));
    }

    wait_leading(follower.handle.leading(), true, Duration::from_secs(3)).await?;
    let takeover = released_at.elapsed();
    assert!(
        takeover < Duration::from_millis(1500),
        "takeover after release took {takeover:?}; without a release it takes the lease duration ({LEASE_DURATION:?})"
    );
    let after = spec(&api, "shared").await?;
    assert_eq!(
        after.holder_identity.as_deref(),
        Some(follower.handle.identity())
    );
    assert_eq!(after.lease_duration_seconds, Some(2));
    assert_eq!(after.lease_transitions, Some(1));
    assert!(!two_leaders.load(Ordering::SeqCst), "two leaders at once");
    eprintln!("takeover after release: {takeover:?}");

    follower.shutdown.cancel();
    follower.handle.stopped().await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_crashed_leader_is_taken_over_only_after_the_lease_expires() -> anyhow::Result<()> {
    let env = TestEnv::builder().in_process().start().await;
    let api: Api<Lease> = Api::namespaced(env.client(), NAMESPACE);
    let a = spawn(&env, "crash", "alpha")?;
    wait_leading(a.handle.leading(), true, Duration::from_secs(2)).await?;
    let b = spawn(&env, "crash", "beta")?;
    let two_leaders = watch_for_two_leaders(&a.handle, &b.handle);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!b.handle.is_leader());

    // The leader dies without releasing: its last renewal stands until it expires.
    let crashed_at = Instant::now();
    a.handle.abort();
    wait_leading(b.handle.leading(), true, Duration::from_secs(5)).await?;
    let takeover = crashed_at.elapsed();
    assert!(
        takeover >= Duration::from_millis(1500),
        "took over {takeover:?} after the crash, before the {LEASE_DURATION:?} lease could expire"
    );
    assert!(
        takeover < Duration::from_secs(4),
        "took over only {takeover:?} after the crash"
    );
    let after = spec(&api, "crash").await?;
    assert_eq!(after.holder_identity.as_deref(), Some("beta"));
    assert_eq!(after.lease_transitions, Some(1));
    assert!(!two_leaders.load(Ordering::SeqCst), "two leaders at once");
    eprintln!("takeover after crash: {takeover:?}");

    b.shutdown.cancel();
    b.handle.stopped().await?;
    a.handle.stopped().await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn expiry_is_judged_by_local_observation_not_remote_timestamps() -> anyhow::Result<()> {
    let env = TestEnv::builder().in_process().start().await;
    let api: Api<Lease> = Api::namespaced(env.client(), NAMESPACE);
    // A holder whose renewTime is an hour old: by remote timestamps it expired long ago, but
    // this process has not yet watched it stay unchanged for a lease duration.
    let an_hour_ago = Timestamp::now() - SignedDuration::from_hours(1);
    let stale = Lease {
        metadata: ObjectMeta {
            name: Some("stale".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("ghost".into()),
            lease_duration_seconds: Some(2),
            acquire_time: Some(MicroTime(an_hour_ago)),
            renew_time: Some(MicroTime(an_hour_ago)),
            lease_transitions: Some(7),
            ..LeaseSpec::default()
        }),
    };
    api.create(&PostParams::default(), &stale).await?;

    let started = Instant::now();
    let a = spawn(&env, "stale", "alpha")?;
    wait_leading(a.handle.leading(), true, Duration::from_secs(5)).await?;
    let takeover = started.elapsed();
    assert!(
        takeover >= Duration::from_millis(1800),
        "took a lease over after {takeover:?}, before watching it unchanged for {LEASE_DURATION:?}"
    );
    let after = spec(&api, "stale").await?;
    assert_eq!(after.holder_identity.as_deref(), Some("alpha"));
    assert_eq!(after.lease_transitions, Some(8));
    assert_eq!(after.lease_duration_seconds, Some(2));
    assert_recent(&after.acquire_time, "acquireTime");
    eprintln!("takeover of a stale-looking lease: {takeover:?}");

    a.shutdown.cancel();
    a.handle.stopped().await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_stolen_lease_is_reported_as_lost_leadership() -> anyhow::Result<()> {
    let env = TestEnv::builder().in_process().start().await;
    let api: Api<Lease> = Api::namespaced(env.client(), NAMESPACE);
    let a = spawn(&env, "stolen", "alpha")?;
    wait_leading(a.handle.leading(), true, Duration::from_secs(2)).await?;

    // Another holder writes itself into the Lease directly.
    let mut lease = api.get("stolen").await?;
    let spec = lease.spec.as_mut().context("lease without spec")?;
    spec.holder_identity = Some("intruder".into());
    spec.renew_time = Some(MicroTime(Timestamp::now()));
    spec.lease_transitions = Some(1);
    let stolen_at = Instant::now();
    api.replace("stolen", &PostParams::default(), &lease)
        .await?;

    let lost_after = wait_leading(a.handle.leading(), false, LEASE_DURATION).await?;
    assert!(!a.handle.is_leader());
    // The old leader stepped down without writing over the new holder.
    let now = self::spec(&api, "stolen").await?;
    assert_eq!(now.holder_identity.as_deref(), Some("intruder"));
    eprintln!("loss reported {lost_after:?} after the steal");

    // It stays a candidate and takes the Lease back once the intruder's lease expires.
    wait_leading(a.handle.leading(), true, Duration::from_secs(5)).await?;
    let back_after = stolen_at.elapsed();
    assert!(
        back_after >= Duration::from_millis(1800),
        "took the lease back {back_after:?} after the steal, before it expired"
    );
    let back = self::spec(&api, "stolen").await?;
    assert_eq!(back.holder_identity.as_deref(), Some("alpha"));
    assert_eq!(back.lease_transitions, Some(2));

    a.shutdown.cancel();
    a.handle.stopped().await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn an_invalid_config_is_refused() -> anyhow::Result<()> {
    let env = TestEnv::builder().in_process().start().await;
    let config = config("bad", "alpha").with_renew_deadline(Duration::from_secs(3));
    let error = LeaderElection::new(env.client(), config).unwrap_err();
    assert!(
        matches!(
            error,
            konverge_runtime::leader::Error::RenewDeadlineNotBelowLeaseDuration { .. }
        ),
        "{error:?}"
    );
    Ok(())
}
