//! The dispatcher's leadership lease against real Postgres: one holder at a time; a holder that
//! dies hands over at once; a holder that goes silent (frozen, hung, partitioned while its TCP
//! connection looks alive) has its session ended by Postgres after the lease, and another
//! replica takes over.

use std::time::Duration;

use pulse_store::patrol_dispatch::DispatcherLock;
use pulse_test_support::db::TestDb;
use pulse_test_support::wait;

const LEASE: Duration = Duration::from_millis(1_500);

#[tokio::test]
async fn one_holder_at_a_time_and_a_dropped_holder_hands_over() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let first = DispatcherLock::try_acquire(db.store(), LEASE)
        .await?
        .expect("a free lease is taken");
    assert!(
        DispatcherLock::try_acquire(db.store(), LEASE)
            .await?
            .is_none(),
        "a second replica must not lead while the first holds the lease"
    );
    // A live holder keeps it past the lease by asking.
    for _ in 0..4 {
        tokio::time::sleep(LEASE / 3).await;
        assert!(
            first.check().await,
            "a holder that keeps asking keeps the lease"
        );
    }
    assert!(
        DispatcherLock::try_acquire(db.store(), LEASE)
            .await?
            .is_none()
    );
    drop(first);
    wait::until(
        Duration::from_secs(10),
        "the lease free after its holder went",
        || async {
            DispatcherLock::try_acquire(db.store(), LEASE)
                .await
                .ok()
                .flatten()
        },
    )
    .await?;
    db.cleanup().await
}

#[tokio::test]
async fn a_silent_holder_loses_the_lease_to_another_replica() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let silent = DispatcherLock::try_acquire(db.store(), LEASE)
        .await?
        .expect("a free lease is taken");
    // The holder asks nothing for longer than the lease: Postgres ends its session.
    let taken = wait::until(
        Duration::from_secs(10),
        "another replica to take over",
        || async {
            DispatcherLock::try_acquire(db.store(), LEASE)
                .await
                .ok()
                .flatten()
        },
    )
    .await?;
    assert!(
        !silent.check().await,
        "the silent holder must learn it lost the lease"
    );
    assert!(taken.check().await);
    db.cleanup().await
}
