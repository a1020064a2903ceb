//! Creating a deployment's database on a real server: created once, then found existing, and a
//! name that needs quoting is created under exactly that name.

use std::time::{SystemTime, UNIX_EPOCH};

use pulse_store::{connect_owner, create_database_if_missing};
use pulse_test_support::db::{drop_database, server_url};

#[tokio::test]
async fn a_missing_database_is_created_once_under_its_exact_name() -> anyhow::Result<()> {
    let config = pulse_config::DatabaseConfig {
        url: server_url(),
        ..pulse_config::PulseConfig::default().database
    };
    let admin = connect_owner(&config).await?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    // The test databases' prefix, so a run that dies before the drop leaves it to the sweep.
    let name = format!("pulse_t_{now}_{:016x}_Q\"d", rand::random::<u64>());

    let created = create_database_if_missing(&admin, &name).await;
    let again = create_database_if_missing(&admin, &name).await;
    let listed = admin
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
        .await?
        .is_some();
    drop_database(&name).await?;

    assert!(created?, "the first call creates it");
    assert!(!again?, "the second finds it");
    assert!(listed, "created under its exact name, quotes and case kept");
    Ok(())
}
