//! Tokens through the real gateway binary: shown once, stored hashed, revocable, expiring,
//! scoped, and confined to their tenant.

use std::collections::BTreeSet;

use pulse_domain::{Scope, TenantId};
use pulse_store::tokens::{self, NewToken};
use pulse_test_support::service::TestGateway;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

async fn call(
    gw: &TestGateway,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> anyhow::Result<(StatusCode, Value)> {
    let mut request = gw.http.request(method, gw.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await?;
    let status = response.status();
    let text = response.text().await?;
    let value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    Ok((status, value))
}

async fn create(gw: &TestGateway, token: &str, body: Value) -> anyhow::Result<(StatusCode, Value)> {
    call(
        gw,
        reqwest::Method::POST,
        "/api/tokens",
        Some(token),
        Some(body),
    )
    .await
}

#[tokio::test]
async fn secret_is_returned_once_and_only_its_hash_is_stored() -> anyhow::Result<()> {
    let gw = TestGateway::start().await?;
    let (status, created) = create(
        &gw,
        &gw.admin_token,
        json!({"name": "ci reader", "scopes": ["monitoring:read"]}),
    )
    .await?;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let secret = created["token"]
        .as_str()
        .expect("secret in the creation response")
        .to_owned();
    assert!(secret.starts_with("pulse_"));

    // Never again over the API.
    let (status, listed) = call(
        &gw,
        reqwest::Method::GET,
        "/api/tokens",
        Some(&gw.admin_token),
        None,
    )
    .await?;
    assert_eq!(status, StatusCode::OK);
    let listed_text = listed.to_string();
    assert!(!listed_text.contains(&secret));
    assert!(!listed_text.contains("token_hash"));
    let ids: Vec<&str> = listed["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&created["id"].as_str().unwrap()));
    assert!(
        listed["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t.get("token").is_none())
    );

    // The database holds sha256(secret) and nothing that contains the secret.
    let owner = gw.db.owner_client().await?;
    let id = uuid::Uuid::parse_str(created["id"].as_str().unwrap())?;
    let row = owner
        .query_one(
            "SELECT token_hash, row_to_json(t)::text FROM api_tokens t WHERE id = $1",
            &[&id],
        )
        .await?;
    let stored: Vec<u8> = row.get(0);
    assert_eq!(stored, Sha256::digest(secret.as_bytes()).to_vec());
    assert!(!row.get::<_, String>(1).contains(&secret));
    let dump: String = owner
        .query_one(
            "SELECT coalesce(string_agg(row_to_json(t)::text, ''), '') FROM audit_events t",
            &[],
        )
        .await?
        .get(0);
    assert!(
        !dump.contains(&secret),
        "the audit log must not hold the secret"
    );
    gw.stop().await
}

#[tokio::test]
async fn revoked_expired_and_bad_tokens_get_401() -> anyhow::Result<()> {
    let gw = TestGateway::start().await?;
    let (_, created) = create(
        &gw,
        &gw.admin_token,
        json!({"name": "short", "scopes": ["admin"]}),
    )
    .await?;
    let secret = created["token"].as_str().unwrap().to_owned();
    let id = created["id"].as_str().unwrap().to_owned();
    let get = |token: Option<String>| {
        let gw = &gw;
        async move {
            call(
                gw,
                reqwest::Method::GET,
                "/api/tokens",
                token.as_deref(),
                None,
            )
            .await
        }
    };
    assert_eq!(get(Some(secret.clone())).await?.0, StatusCode::OK);

    // Revoked.
    let (status, _) = call(
        &gw,
        reqwest::Method::DELETE,
        &format!("/api/tokens/{id}"),
        Some(&gw.admin_token),
        None,
    )
    .await?;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = get(Some(secret.clone())).await?;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"], "unauthorized");
    // Revoking twice is fine; unknown ids are 404; malformed ids are 400.
    let (status, _) = call(
        &gw,
        reqwest::Method::DELETE,
        &format!("/api/tokens/{id}"),
        Some(&gw.admin_token),
        None,
    )
    .await?;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = call(
        &gw,
        reqwest::Method::DELETE,
        &format!("/api/tokens/{}", uuid::Uuid::now_v7()),
        Some(&gw.admin_token),
        None,
    )
    .await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let (status, body) = call(
        &gw,
        reqwest::Method::DELETE,
        "/api/tokens/not-a-uuid",
        Some(&gw.admin_token),
        None,
    )
    .await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_parameter"))
    );

    // Expired: a token whose expiry has passed.
    let in_a_moment = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    let (status, expiring) = create(
        &gw,
        &gw.admin_token,
        json!({"name": "expiring", "scopes": ["admin"], "expires_at": in_a_moment}),
    )
    .await?;
    assert_eq!(status, StatusCode::CREATED);
    let expiring_secret = expiring["token"].as_str().unwrap().to_owned();
    assert_eq!(get(Some(expiring_secret.clone())).await?.0, StatusCode::OK);
    let owner = gw.db.owner_client().await?;
    owner
        .execute(
            "UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE id = $1",
            &[&uuid::Uuid::parse_str(expiring["id"].as_str().unwrap())?],
        )
        .await?;
    assert_eq!(
        get(Some(expiring_secret)).await?.0,
        StatusCode::UNAUTHORIZED
    );
    // An expiry in the past is refused at creation.
    let (status, body) = create(
        &gw,
        &gw.admin_token,
        json!({"name": "x", "scopes": ["admin"], "expires_at": "2020-01-01T00:00:00Z"}),
    )
    .await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_request"))
    );

    // Missing, malformed and unknown tokens.
    assert_eq!(get(None).await?.0, StatusCode::UNAUTHORIZED);
    assert_eq!(
        get(Some("nonsense".to_owned())).await?.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        get(Some(format!("pulse_{}", "0".repeat(64)))).await?.0,
        StatusCode::UNAUTHORIZED
    );
    // Unknown /api routes answer 401 before routing, 404 after authentication.
    let (status, _) = call(&gw, reqwest::Method::GET, "/api/does-not-exist", None, None).await?;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = call(
        &gw,
        reqwest::Method::GET,
        "/api/does-not-exist",
        Some(&gw.admin_token),
        None,
    )
    .await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    // The health route stays public.
    assert_eq!(
        call(&gw, reqwest::Method::GET, "/api/health", None, None)
            .await?
            .0,
        StatusCode::OK
    );
    // The upstream header works too.
    let response = gw
        .http
        .get(gw.url("/api/tokens"))
        .header("X-API-Token", &gw.admin_token)
        .send()
        .await?;
    assert_eq!(response.status(), StatusCode::OK);
    gw.stop().await
}

#[tokio::test]
async fn a_token_without_the_route_scope_gets_403_missing_scope() -> anyhow::Result<()> {
    let gw = TestGateway::start().await?;
    let (_, reader) = create(
        &gw,
        &gw.admin_token,
        json!({"name": "reader", "scopes": ["monitoring:read", "ai:chat"]}),
    )
    .await?;
    let reader = reader["token"].as_str().unwrap().to_owned();
    for (method, path, body) in [
        (reqwest::Method::GET, "/api/tokens".to_owned(), None),
        (
            reqwest::Method::POST,
            "/api/tokens".to_owned(),
            Some(json!({"name": "x", "scopes": ["ai:chat"]})),
        ),
        (
            reqwest::Method::DELETE,
            format!("/api/tokens/{}", uuid::Uuid::now_v7()),
            None,
        ),
    ] {
        let (status, body) = call(&gw, method.clone(), &path, Some(&reader), body).await?;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}");
        assert_eq!(body["error"], "missing_scope");
        assert!(body["message"].as_str().unwrap().contains("admin"));
    }
    // An admin cannot mint a token with scopes it does not hold itself.
    let (_, admin_only) = create(
        &gw,
        &gw.admin_token,
        json!({"name": "admin-only", "scopes": ["admin"]}),
    )
    .await?;
    let admin_only = admin_only["token"].as_str().unwrap().to_owned();
    let (status, body) = create(
        &gw,
        &admin_only,
        json!({"name": "escalate", "scopes": ["agent:exec"]}),
    )
    .await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::FORBIDDEN, Some("missing_scope"))
    );
    gw.stop().await
}

#[tokio::test]
async fn tenants_see_only_their_own_tokens_through_the_api() -> anyhow::Result<()> {
    let gw = TestGateway::start().await?;
    let b = TenantId::new("tenant-b")?;
    pulse_store::tenants::create(gw.db.store(), &b, "Tenant B").await?;
    let tx = gw.db.store().tenant_tx(&b).await?;
    let issued = tokens::issue(
        &tx,
        NewToken {
            name: "b-admin".to_owned(),
            scopes: BTreeSet::from([Scope::Admin]),
            expires_at: None,
            created_by: None,
        },
    )
    .await?;
    tx.commit().await?;
    let b_secret = issued.secret.expose().to_owned();

    let (_, a_list) = call(
        &gw,
        reqwest::Method::GET,
        "/api/tokens",
        Some(&gw.admin_token),
        None,
    )
    .await?;
    let a_names: Vec<&str> = a_list["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(!a_names.contains(&"b-admin"), "{a_names:?}");
    let (_, b_list) = call(
        &gw,
        reqwest::Method::GET,
        "/api/tokens",
        Some(&b_secret),
        None,
    )
    .await?;
    let b_names: Vec<&str> = b_list["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(b_names, vec!["b-admin"]);
    // Tenant A's admin cannot revoke tenant B's token: it does not exist for A.
    let (status, _) = call(
        &gw,
        reqwest::Method::DELETE,
        &format!("/api/tokens/{}", issued.token.id),
        Some(&gw.admin_token),
        None,
    )
    .await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        call(
            &gw,
            reqwest::Method::GET,
            "/api/tokens",
            Some(&b_secret),
            None
        )
        .await?
        .0,
        StatusCode::OK
    );
    gw.stop().await
}
