//! A browser's view of the web UI without a browser: cookies kept by hand, forms read from the
//! HTML the gateway serves. For the tests of sign-in, sessions and CSRF; the full operator path
//! runs in a real Chromium (`tests/browser`).

use anyhow::Context as _;
use regex::Regex;
use reqwest::StatusCode;
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};

/// A signed-in (or not yet signed-in) browser.
#[derive(Debug, Clone)]
pub struct WebClient {
    pub base: String,
    pub http: reqwest::Client,
    /// `name=value` pairs sent as the Cookie header.
    pub cookies: Vec<(String, String)>,
}

/// An answer: status, `Location` when redirected, the `Set-Cookie` lines, the body.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub location: Option<String>,
    pub set_cookies: Vec<String>,
    pub body: String,
}

impl Answer {
    /// The `Set-Cookie` line that sets `name`.
    pub fn set_cookie(&self, name: &str) -> Option<&str> {
        self.set_cookies
            .iter()
            .find(|line| line.starts_with(&format!("{name}=")))
            .map(String::as_str)
    }
}

/// The value of the hidden `csrf` field of the first form in `html`.
pub fn csrf_field(html: &str) -> Option<String> {
    let re = Regex::new(r#"name="csrf" value="([0-9a-f]+)""#).expect("valid regex");
    re.captures(html).map(|c| c[1].to_owned())
}

/// Every `<form method="post" action="...">` target in `html`.
pub fn post_forms(html: &str) -> Vec<String> {
    let re = Regex::new(r#"<form[^>]*method="post"[^>]*action="([^"]+)""#).expect("valid regex");
    re.captures_iter(html).map(|c| c[1].to_owned()).collect()
}

impl WebClient {
    pub fn new(base: &str) -> anyhow::Result<Self> {
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(std::time::Duration::from_secs(15))
                .build()?,
            cookies: Vec::new(),
        })
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn keep(&mut self, set_cookies: &[String]) {
        for line in set_cookies {
            let Some((pair, attributes)) = line.split_once(';').or(Some((line.as_str(), "")))
            else {
                continue;
            };
            let Some((name, value)) = pair.split_once('=') else {
                continue;
            };
            self.cookies.retain(|(k, _)| k != name);
            if !attributes.contains("Max-Age=0") && !value.is_empty() {
                self.cookies.push((name.to_owned(), value.to_owned()));
            }
        }
    }

    async fn answer(&mut self, request: reqwest::RequestBuilder) -> anyhow::Result<Answer> {
        let request = if self.cookies.is_empty() {
            request
        } else {
            request.header(COOKIE, self.cookie_header())
        };
        let response = request.send().await?;
        let status = response.status();
        let location = response
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let set_cookies: Vec<String> = response
            .headers()
            .get_all(SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect();
        self.keep(&set_cookies);
        let body = response.text().await.unwrap_or_default();
        Ok(Answer {
            status,
            location,
            set_cookies,
            body,
        })
    }

    pub async fn get(&mut self, path: &str) -> anyhow::Result<Answer> {
        let request = self.http.get(format!("{}{path}", self.base));
        self.answer(request).await
    }

    /// Posts `fields` urlencoded, as a browser submits a form.
    pub async fn post(&mut self, path: &str, fields: &[(&str, &str)]) -> anyhow::Result<Answer> {
        let body = serde_urlencoded_pairs(fields);
        let request = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        self.answer(request).await
    }

    /// [`Self::post`] with one extra request header (a proxy's `X-Forwarded-Proto`, say).
    pub async fn answer_with_header(
        &mut self,
        path: &str,
        header: (&str, &str),
        fields: &[(&str, &str)],
    ) -> anyhow::Result<Answer> {
        let request = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .header(header.0, header.1)
            .body(serde_urlencoded_pairs(fields));
        self.answer(request).await
    }

    /// Posts `fields` plus the `csrf` field read from the page at `page` (as a browser would).
    pub async fn submit(
        &mut self,
        page: &str,
        action: &str,
        fields: &[(&str, &str)],
    ) -> anyhow::Result<Answer> {
        let html = self.get(page).await?.body;
        let csrf = csrf_field(&html).with_context(|| format!("no csrf field on {page}"))?;
        let mut all: Vec<(&str, &str)> = vec![("csrf", csrf.as_str())];
        all.extend_from_slice(fields);
        self.post(action, &all).await
    }

    /// Signs in through the sign-in form; fails unless it redirects with a session cookie.
    pub async fn sign_in(
        &mut self,
        organization: &str,
        username: &str,
        password: &str,
    ) -> anyhow::Result<Answer> {
        let answer = self.try_sign_in(organization, username, password).await?;
        anyhow::ensure!(
            answer.status == StatusCode::SEE_OTHER && answer.set_cookie("pulse_session").is_some(),
            "sign-in failed: {} {:?}\n{}",
            answer.status,
            answer.location,
            answer.body
        );
        Ok(answer)
    }

    /// One sign-in attempt through the form (the answer whatever it is).
    pub async fn try_sign_in(
        &mut self,
        organization: &str,
        username: &str,
        password: &str,
    ) -> anyhow::Result<Answer> {
        self.submit(
            "/signin",
            "/signin",
            &[
                ("organization", organization),
                ("username", username),
                ("password", password),
            ],
        )
        .await
    }

    pub fn session(&self) -> Option<&str> {
        self.cookies
            .iter()
            .find(|(k, _)| k == "pulse_session")
            .map(|(_, v)| v.as_str())
    }
}

fn serde_urlencoded_pairs(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn encode(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            b' ' => out.push('+'),
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}
