//! Assistant sessions and transcripts against the real Postgres: sealing at rest and its
//! binding, one turn at a time, no orphan tool rows, undo/redo guards, forks, steering,
//! compaction, system sessions and tenant isolation.

use pulse_domain::TenantId;
use pulse_store::chat::{
    self, ChatStoreError, MessageBody, NewMessage, NewSession, Role, RowState, SessionKind, ToolRow,
};
use pulse_store::settings::MasterKey;
use pulse_store::tenants;
use pulse_test_support::db::TestDb;
use uuid::Uuid;

async fn setup() -> anyhow::Result<(TestDb, TenantId, TenantId)> {
    let db = TestDb::create().await?;
    let acme = TenantId::new("acme")?;
    let globex = TenantId::new("globex")?;
    tenants::create(db.store(), &acme, "Acme").await?;
    tenants::create(db.store(), &globex, "Globex").await?;
    Ok((db, acme, globex))
}

fn session(kind: SessionKind, title: &str) -> NewSession {
    NewSession {
        kind,
        title: title.to_owned(),
        created_by: "user:alice".to_owned(),
        control_level: "read_only".to_owned(),
        approval_required: false,
        finding_id: None,
    }
}

fn text(turn: Uuid, role: Role, body: &str) -> NewMessage {
    NewMessage::new(turn, role, MessageBody::text(body))
}

#[tokio::test]
async fn transcripts_are_sealed_bound_to_their_row_and_open_only_with_the_key() -> anyhow::Result<()>
{
    let (db, acme, globex) = setup().await?;
    let key = MasterKey::generate();
    let store = db.store();
    let tx = store.tenant_tx(&acme).await?;
    let a = chat::create_session(&tx, &key, &session(SessionKind::Chat, "disk on web-1")).await?;
    let b = chat::create_session(&tx, &key, &session(SessionKind::Chat, "other")).await?;
    let turn = Uuid::new_v4();
    chat::append(
        &tx,
        &key,
        a.id,
        &text(turn, Role::User, "why is web-1 full?"),
    )
    .await?;
    chat::append(&tx, &key, b.id, &text(turn, Role::User, "hello")).await?;
    tx.commit().await?;

    // Nothing readable at rest.
    let tx = store.tenant_tx(&acme).await?;
    let raw = tx
        .client()
        .query(
            "SELECT s.title_sealed, m.body_sealed FROM chat_sessions s \
             JOIN chat_messages m ON m.session_id = s.id",
            &[],
        )
        .await?;
    for row in &raw {
        for col in 0..2 {
            let bytes: Vec<u8> = row.get(col);
            let shown = String::from_utf8_lossy(&bytes);
            for plain in ["web-1", "full", "hello", "disk"] {
                assert!(!shown.contains(plain), "{plain} in clear");
            }
        }
    }
    // A body moved to another session's row does not open.
    tx.client()
        .execute(
            "UPDATE chat_messages SET body_sealed = (SELECT body_sealed FROM chat_messages \
             WHERE session_id = $1), body_nonce = (SELECT body_nonce FROM chat_messages \
             WHERE session_id = $1) WHERE session_id = $2",
            &[&a.id, &b.id],
        )
        .await?;
    let moved = chat::messages(&tx, &key, b.id, false).await;
    assert!(
        matches!(moved, Err(ChatStoreError::Sealing(_))),
        "{moved:?}"
    );
    // Another key opens nothing.
    let other = chat::get_session(&tx, &MasterKey::generate(), a.id).await;
    assert!(
        matches!(other, Err(ChatStoreError::Sealing(_))),
        "{other:?}"
    );
    let opened = chat::messages(&tx, &key, a.id, false).await?;
    assert_eq!(opened[0].body.text, "why is web-1 full?");
    drop(tx);

    // Another tenant sees none of it.
    let tx = store.tenant_tx(&globex).await?;
    assert!(matches!(
        chat::get_session(&tx, &key, a.id).await,
        Err(ChatStoreError::NotFound)
    ));
    assert!(chat::list_sessions(&tx, &key, true, 100).await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn one_turn_at_a_time_and_ending_it_closes_every_running_tool_row() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let key = MasterKey::generate();
    let tx = db.store().tenant_tx(&acme).await?;
    let s = chat::create_session(&tx, &key, &session(SessionKind::Chat, "t")).await?;
    let turn = Uuid::new_v4();
    chat::begin_turn(&tx, s.id, turn, Some("openai:gpt-4o-mini")).await?;
    assert!(matches!(
        chat::begin_turn(&tx, s.id, Uuid::new_v4(), None).await,
        Err(ChatStoreError::Busy)
    ));
    assert!(matches!(
        chat::delete_session(&tx, s.id).await,
        Err(ChatStoreError::Busy)
    ));
    let tool = |name: &str| MessageBody {
        tool: Some(ToolRow {
            call_id: format!("call-{name}"),
            name: name.to_owned(),
            ..ToolRow::default()
        }),
        ..MessageBody::default()
    };
    chat::append(
        &tx,
        &key,
        s.id,
        &NewMessage::new(turn, Role::Tool, tool("pulse_query")).with_state(RowState::Running),
    )
    .await?;
    let done = chat::append(
        &tx,
        &key,
        s.id,
        &NewMessage::new(turn, Role::Tool, tool("pulse_metrics")).with_state(RowState::Running),
    )
    .await?;
    chat::update_message(
        &tx,
        &key,
        s.id,
        done.id,
        RowState::Done,
        &tool("pulse_metrics"),
    )
    .await?;
    assert_eq!(chat::end_turn(&tx, &key, s.id, turn, "stopped").await?, 1);
    let rows = chat::messages(&tx, &key, s.id, false).await?;
    assert_eq!(
        rows.iter().map(|r| r.state).collect::<Vec<_>>(),
        [RowState::Cancelled, RowState::Done]
    );
    assert_eq!(
        rows[0].body.tool.as_ref().and_then(|t| t.reason.as_deref()),
        Some("stopped")
    );
    let idle = chat::get_session(&tx, &key, s.id).await?;
    assert_eq!((idle.status.as_str(), idle.active_turn), ("idle", None));
    assert_eq!(idle.model_route.as_deref(), Some("openai:gpt-4o-mini"));
    // Ending a turn that is no longer active changes nothing.
    assert_eq!(chat::end_turn(&tx, &key, s.id, turn, "again").await?, 0);

    // System sessions never run a turn and are listed only on request.
    let patrol = chat::create_session(&tx, &key, &session(SessionKind::Patrol, "run")).await?;
    assert!(matches!(
        chat::begin_turn(&tx, patrol.id, Uuid::new_v4(), None).await,
        Err(ChatStoreError::SystemSession)
    ));
    assert!(matches!(
        chat::fork(&tx, &key, patrol.id, None, "user:alice").await,
        Err(ChatStoreError::SystemSession)
    ));
    let listed = chat::list_sessions(&tx, &key, false, 100).await?;
    assert_eq!(listed.iter().map(|s| s.id).collect::<Vec<_>>(), [s.id]);
    assert_eq!(chat::list_sessions(&tx, &key, true, 100).await?.len(), 2);
    Ok(())
}

#[tokio::test]
async fn undo_redo_fork_steer_and_compaction_keep_the_transcript_coherent() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let key = MasterKey::generate();
    let tx = db.store().tenant_tx(&acme).await?;
    let s = chat::create_session(&tx, &key, &session(SessionKind::Chat, "t")).await?;
    let (t1, t2) = (Uuid::new_v4(), Uuid::new_v4());
    for (turn, prompt, answer) in [(t1, "first?", "one"), (t2, "second?", "two")] {
        chat::append(&tx, &key, s.id, &text(turn, Role::User, prompt)).await?;
        chat::append(&tx, &key, s.id, &text(turn, Role::Assistant, answer)).await?;
    }

    // Undo needs the prompt it acts on.
    let wrong = chat::undo(&tx, &key, s.id, "first?").await;
    assert!(
        matches!(wrong, Err(ChatStoreError::Conflict(_))),
        "{wrong:?}"
    );
    assert_eq!(chat::undo(&tx, &key, s.id, "second?").await?, t2);
    let live: Vec<String> = chat::messages(&tx, &key, s.id, false)
        .await?
        .into_iter()
        .map(|m| m.body.text)
        .collect();
    assert_eq!(live, ["first?", "one"]);
    assert_eq!(chat::messages(&tx, &key, s.id, true).await?.len(), 4);
    assert_eq!(chat::redo(&tx, &key, s.id, "second?").await?, t2);
    assert_eq!(chat::messages(&tx, &key, s.id, false).await?.len(), 4);
    assert!(matches!(
        chat::redo(&tx, &key, s.id, "second?").await,
        Err(ChatStoreError::Conflict(_))
    ));
    // A new turn after an undo drops the undone rows: there is nothing left to redo.
    chat::undo(&tx, &key, s.id, "second?").await?;
    let t3 = Uuid::new_v4();
    chat::begin_turn(&tx, s.id, t3, None).await?;
    assert_eq!(chat::messages(&tx, &key, s.id, true).await?.len(), 2);
    chat::append(&tx, &key, s.id, &text(t3, Role::User, "third?")).await?;

    // Steering is taken once, in order, at a turn boundary.
    for steer in ["look at disks", "and memory"] {
        chat::append(
            &tx,
            &key,
            s.id,
            &text(t3, Role::Steer, steer).with_state(RowState::Pending),
        )
        .await?;
    }
    let taken: Vec<String> = chat::take_steers(&tx, &key, s.id)
        .await?
        .into_iter()
        .map(|m| m.body.text)
        .collect();
    assert_eq!(taken, ["look at disks", "and memory"]);
    assert!(chat::take_steers(&tx, &key, s.id).await?.is_empty());
    chat::append(&tx, &key, s.id, &text(t3, Role::Assistant, "three")).await?;
    chat::end_turn(&tx, &key, s.id, t3, "done").await?;

    // A fork copies the live transcript, resealed under its own id.
    let rows = chat::messages(&tx, &key, s.id, false).await?;
    let fork = chat::fork(&tx, &key, s.id, Some(rows[1].seq), "user:bob").await?;
    assert_eq!(fork.forked_from, Some(s.id));
    assert_eq!(fork.created_by, "user:bob");
    let copied: Vec<String> = chat::messages(&tx, &key, fork.id, false)
        .await?
        .into_iter()
        .map(|m| m.body.text)
        .collect();
    assert_eq!(copied, ["first?", "one"]);

    // Compaction: older rows leave the context, one summary stands in for them.
    let keep_from = rows[2].seq;
    chat::compact(&tx, &key, s.id, "- asked first, got one", keep_from, None).await?;
    let after = chat::messages(&tx, &key, s.id, false).await?;
    let compacted: Vec<bool> = after.iter().map(|m| m.compacted).collect();
    assert_eq!(&compacted[..2], [true, true]);
    assert!(compacted[2..].iter().all(|c| !c));
    assert_eq!(after.last().map(|m| m.role), Some(Role::Summary));
    Ok(())
}
