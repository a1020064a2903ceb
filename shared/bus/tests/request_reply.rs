//! Typed request/reply over core NATS.

mod common;

use std::time::{Duration, Instant};

use common::{Echo, EchoReply, EchoV2, acme};
use futures::StreamExt as _;
use pulse_bus::{Bus, BusError, ErrorCode, ErrorReply, Message};
use pulse_test_support::nats::{TestNats, nats_url};

/// A second connection on the same prefix, so requests cross the server.
async fn requester(nats: &TestNats) -> anyhow::Result<Bus> {
    let client = async_nats_connect().await?;
    Ok(Bus::new(client, nats.subjects()))
}

async fn async_nats_connect() -> anyhow::Result<pulse_bus::async_nats::Client> {
    Ok(pulse_bus::async_nats::connect(nats_url()).await?)
}

async fn echo_responder(bus: &Bus) -> anyhow::Result<pulse_bus::Responder> {
    let subject = bus.subjects().any_tenant("echo.run");
    Ok(bus
        .serve::<Echo, ErrorReply, _, _>(&subject, Some("echo"), |ctx, req| async move {
            match req.text.as_str() {
                "fail" => Err(ErrorReply::new(ErrorCode::NotFound, "no such echo")),
                "slow" => {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    Ok(EchoReply {
                        text: "late".to_owned(),
                        tenant: ctx.tenant.to_string(),
                    })
                }
                text => Ok(EchoReply {
                    text: text.to_uppercase(),
                    tenant: ctx.tenant.to_string(),
                }),
            }
        })
        .await?)
}

#[tokio::test]
async fn typed_request_gets_typed_reply() -> anyhow::Result<()> {
    let nats = TestNats::connect().await?;
    let responder = echo_responder(&nats.bus()).await?;
    let bus = requester(&nats).await?;
    let subject = bus.subjects().tenant(&acme(), "echo.run");

    let reply = bus
        .request(
            &acme(),
            &subject,
            &Echo {
                text: "hello".to_owned(),
            },
            Duration::from_secs(2),
        )
        .await?;

    assert_eq!(
        reply,
        EchoReply {
            text: "HELLO".to_owned(),
            tenant: "acme".to_owned()
        }
    );
    responder.stop().await;
    Ok(())
}

#[tokio::test]
async fn handler_error_arrives_as_typed_remote_error() -> anyhow::Result<()> {
    let nats = TestNats::connect().await?;
    let responder = echo_responder(&nats.bus()).await?;
    let bus = requester(&nats).await?;
    let subject = bus.subjects().tenant(&acme(), "echo.run");

    let err = bus
        .request(
            &acme(),
            &subject,
            &Echo {
                text: "fail".to_owned(),
            },
            Duration::from_secs(2),
        )
        .await
        .expect_err("the handler refused");

    match err {
        BusError::Remote { code, message } => {
            assert_eq!(code, ErrorCode::NotFound);
            assert_eq!(message, "no such echo");
        }
        other => panic!("expected a remote error, got {other:?}"),
    }
    responder.stop().await;
    Ok(())
}

#[tokio::test]
async fn request_of_unknown_schema_is_refused_as_bad_request() -> anyhow::Result<()> {
    let nats = TestNats::connect().await?;
    let responder = echo_responder(&nats.bus()).await?;
    let bus = requester(&nats).await?;
    let subject = bus.subjects().tenant(&acme(), "echo.run");

    let err = bus
        .request(
            &acme(),
            &subject,
            &EchoV2 {
                text: "x".to_owned(),
            },
            Duration::from_secs(2),
        )
        .await
        .expect_err("v2 is unknown to the responder");

    match err {
        BusError::Remote { code, message } => {
            assert_eq!(code, ErrorCode::InvalidRequest);
            assert!(message.contains("unsupported schema"), "{message}");
        }
        other => panic!("expected a remote error, got {other:?}"),
    }
    responder.stop().await;
    Ok(())
}

#[tokio::test]
async fn slow_responder_gives_timeout() -> anyhow::Result<()> {
    let nats = TestNats::connect().await?;
    let responder = echo_responder(&nats.bus()).await?;
    let bus = requester(&nats).await?;
    let subject = bus.subjects().tenant(&acme(), "echo.run");

    let started = Instant::now();
    let err = bus
        .request(
            &acme(),
            &subject,
            &Echo {
                text: "slow".to_owned(),
            },
            Duration::from_millis(200),
        )
        .await
        .expect_err("the responder is slower than the timeout");

    assert!(matches!(err, BusError::Timeout { .. }), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    drop(responder);
    Ok(())
}

#[tokio::test]
async fn nobody_listening_gives_no_responders() -> anyhow::Result<()> {
    let nats = TestNats::connect().await?;
    let bus = nats.bus();
    let subject = bus.subjects().tenant(&acme(), "nobody.home");

    let started = Instant::now();
    let err = bus
        .request(
            &acme(),
            &subject,
            &Echo {
                text: "anyone?".to_owned(),
            },
            Duration::from_secs(5),
        )
        .await
        .expect_err("no responder exists");

    assert!(matches!(err, BusError::NoResponders { .. }), "{err:?}");
    // Answered by the server at once, not by the timeout.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    Ok(())
}

#[tokio::test]
async fn stopped_responder_answers_no_more() -> anyhow::Result<()> {
    let nats = TestNats::connect().await?;
    let responder = echo_responder(&nats.bus()).await?;
    let bus = requester(&nats).await?;
    let subject = bus.subjects().tenant(&acme(), "echo.run");
    bus.request(
        &acme(),
        &subject,
        &Echo {
            text: "a".to_owned(),
        },
        Duration::from_secs(2),
    )
    .await?;

    responder.stop().await;

    let err = bus
        .request(
            &acme(),
            &subject,
            &Echo {
                text: "b".to_owned(),
            },
            Duration::from_secs(2),
        )
        .await
        .expect_err("the responder stopped");
    // Normally the server already knows the interest is gone (no responders); on a loaded
    // machine the unsubscribe can still be in flight, and the request then times out. Either
    // way nothing answers.
    assert!(
        matches!(
            err,
            BusError::NoResponders { .. } | BusError::Timeout { .. }
        ),
        "{err:?}"
    );
    Ok(())
}

#[tokio::test]
async fn trace_context_travels_with_the_request() -> anyhow::Result<()> {
    use opentelemetry::context::FutureExt as _;
    use opentelemetry::trace::TraceContextExt as _;

    let nats = TestNats::connect().await?;
    let serving = nats.bus();
    let responder = serving
        .serve::<Echo, ErrorReply, _, _>(
            &serving.subjects().any_tenant("trace.echo"),
            None,
            |ctx, _req| async move {
                // What a handler would parent its spans on.
                let parent = ctx
                    .otel_context()
                    .map(|cx| cx.span().span_context().trace_id().to_string())
                    .unwrap_or_default();
                Ok(EchoReply {
                    text: parent,
                    tenant: ctx.tenant.to_string(),
                })
            },
        )
        .await?;
    let bus = requester(&nats).await?;
    let subject = bus.subjects().tenant(&acme(), "trace.echo");
    let caller = pulse_bus::trace::remote_context(Some(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ))
    .ok_or_else(|| anyhow::anyhow!("valid traceparent"))?;

    let traced = bus
        .request(
            &acme(),
            &subject,
            &Echo {
                text: String::new(),
            },
            Duration::from_secs(2),
        )
        .with_context(caller)
        .await?;
    let untraced = bus
        .request(
            &acme(),
            &subject,
            &Echo {
                text: String::new(),
            },
            Duration::from_secs(2),
        )
        .await?;

    assert_eq!(traced.text, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(untraced.text, "", "no trace, no parent");
    responder.stop().await;
    Ok(())
}

/// An error reply as a responder of another version might send it: a code outside the table.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ForeignErrorReply {
    code: String,
    message: String,
}

impl Message for ForeignErrorReply {
    const TYPE: &'static str = ErrorReply::TYPE;
}

#[tokio::test]
async fn an_error_code_outside_the_table_is_a_typed_error_not_a_guess() -> anyhow::Result<()> {
    let nats = TestNats::connect().await?;
    let serving = nats.bus();
    let subject = serving.subjects().tenant(&acme(), "echo.foreign");
    let mut requests = serving.client().subscribe(subject.clone()).await?;
    serving.client().flush().await?;
    let client = serving.client().clone();
    let answer = tokio::spawn(async move {
        let Some(msg) = requests.next().await else {
            return;
        };
        let reply = ForeignErrorReply {
            code: "bad_request".to_owned(),
            message: "from an older responder".to_owned(),
        };
        let mut enc = pulse_bus::encode(&acme(), &reply, None).expect("encodes");
        enc.headers.insert("Pulse-Status", "error");
        if let Some(reply_to) = msg.reply {
            let _ = client
                .publish_with_headers(reply_to, enc.headers, enc.body)
                .await;
        }
    });

    let bus = requester(&nats).await?;
    let err = bus
        .request(
            &acme(),
            &subject,
            &Echo {
                text: "x".to_owned(),
            },
            Duration::from_secs(2),
        )
        .await
        .expect_err("an error reply");
    match err {
        BusError::UnknownErrorCode { code, message } => {
            assert_eq!(code, "bad_request");
            assert_eq!(message, "from an older responder");
        }
        other => panic!("expected an unknown-code error, got {other:?}"),
    }
    answer.await?;
    Ok(())
}
