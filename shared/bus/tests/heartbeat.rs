//! The heartbeat travels on the system subject and decodes as the typed wire type.

use std::time::Duration;

use chrono::Utc;
use pulse_bus::Heartbeat;
use pulse_test_support::nats::TestNats;

#[tokio::test]
async fn heartbeat_round_trips_on_the_system_subject() -> anyhow::Result<()> {
    let nats = TestNats::connect().await?;
    let bus = nats.bus();
    assert_eq!(
        bus.subjects().heartbeat(),
        format!("{}.pulse._sys.heartbeat", nats.prefix())
    );
    let mut beats = bus
        .subscribe::<Heartbeat>(&bus.subjects().heartbeat())
        .await?;
    let sent = Heartbeat {
        service: "pulse-verifier".to_owned(),
        instance_id: uuid::Uuid::now_v7().to_string(),
        version: "0.1.0".to_owned(),
        started_at: Utc::now(),
        sent_at: Utc::now(),
        ready: true,
    };

    bus.publish_heartbeat(&sent).await?;

    let got = tokio::time::timeout(Duration::from_secs(5), beats.next())
        .await?
        .ok_or_else(|| anyhow::anyhow!("subscription ended"))??;
    assert_eq!(got.payload, sent);
    assert_eq!(got.meta.tenant, None, "system messages carry no tenant");
    assert_eq!(got.meta.message_type, "pulse.heartbeat");
    Ok(())
}
