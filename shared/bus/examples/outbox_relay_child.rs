//! Run by the outbox test `row_is_published_once_when_the_relay_dies_before_marking` as a child
//! process: relays one batch, announces the publish ack on stdout and then hangs where the mark
//! would happen, waiting to be killed with SIGKILL.

use std::str::FromStr;
use std::sync::Arc;

use pulse_bus::outbox::AfterPublishHook;
use pulse_bus::{OutboxRelay, RelayConfig, RelayHooks, Subjects};

const CHILD_DB_ENV: &str = "PULSE_BUS_TEST_RELAY_CHILD_DB";
const CHILD_PREFIX_ENV: &str = "PULSE_BUS_TEST_RELAY_CHILD_PREFIX";
const PUBLISHED_MARKER: &str = "relay-child: published and acked outbox row";

fn nats_url() -> String {
    std::env::var("PULSE_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (Ok(owner_url), Ok(prefix)) =
        (std::env::var(CHILD_DB_ENV), std::env::var(CHILD_PREFIX_ENV))
    else {
        anyhow::bail!("run only by its parent test");
    };
    // Relay as the application role, as services do.
    let mut pg = tokio_postgres::Config::from_str(&owner_url)?;
    pg.user("pulse_app");
    let manager = deadpool_postgres::Manager::new(pg, tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(2)
        .build()?;
    let client = pulse_bus::async_nats::connect(nats_url()).await?;
    let _subjects = Subjects::try_new(Some(&prefix))?;
    let js = pulse_bus::async_nats::jetstream::new(client);

    let hook: AfterPublishHook = Arc::new(|id| {
        Box::pin(async move {
            {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{PUBLISHED_MARKER} {id}");
                let _ = out.flush();
            }
            std::future::pending::<()>().await;
        })
    });
    let relay = OutboxRelay::new(pool, js, RelayConfig::default()).with_hooks(RelayHooks {
        after_publish_ack: Some(hook),
    });
    relay.relay_batch().await?;
    anyhow::bail!("the hook never returns; reaching here means no row was relayed")
}
