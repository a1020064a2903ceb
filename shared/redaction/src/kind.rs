//! What a redaction removed, and the marker that stands in its place.

use serde::Serialize;

/// What was redacted. The wire value appears in the marker `[REDACTED:<kind>]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RedactionKind {
    PrivateKey,
    ConfiguredSecret,
    UrlCredentials,
    PulseToken,
    AwsAccessKey,
    GithubToken,
    SlackToken,
    AnthropicKey,
    OpenaiKey,
    Jwt,
    BearerToken,
    BasicAuth,
    SecretAssignment,
    LocalOnlyResource,
    AwsSecretKey,
    GoogleApiKey,
    GoogleOauth,
    StripeKey,
    GitlabToken,
    NpmToken,
    HuggingfaceToken,
    SendgridKey,
    AzureStorageKey,
    VendorToken,
    CommandLineSecret,
    Cookie,
    PasswordHash,
}

impl RedactionKind {
    pub const ALL: &'static [RedactionKind] = &[
        Self::PrivateKey,
        Self::ConfiguredSecret,
        Self::UrlCredentials,
        Self::PulseToken,
        Self::AwsAccessKey,
        Self::GithubToken,
        Self::SlackToken,
        Self::AnthropicKey,
        Self::OpenaiKey,
        Self::Jwt,
        Self::BearerToken,
        Self::BasicAuth,
        Self::SecretAssignment,
        Self::LocalOnlyResource,
        Self::AwsSecretKey,
        Self::GoogleApiKey,
        Self::GoogleOauth,
        Self::StripeKey,
        Self::GitlabToken,
        Self::NpmToken,
        Self::HuggingfaceToken,
        Self::SendgridKey,
        Self::AzureStorageKey,
        Self::VendorToken,
        Self::CommandLineSecret,
        Self::Cookie,
        Self::PasswordHash,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::PrivateKey => "private_key",
            Self::ConfiguredSecret => "configured_secret",
            Self::UrlCredentials => "url_credentials",
            Self::PulseToken => "pulse_token",
            Self::AwsAccessKey => "aws_access_key",
            Self::GithubToken => "github_token",
            Self::SlackToken => "slack_token",
            Self::AnthropicKey => "anthropic_key",
            Self::OpenaiKey => "openai_key",
            Self::Jwt => "jwt",
            Self::BearerToken => "bearer_token",
            Self::BasicAuth => "basic_auth",
            Self::SecretAssignment => "secret_assignment",
            Self::LocalOnlyResource => "local_only_resource",
            Self::AwsSecretKey => "aws_secret_key",
            Self::GoogleApiKey => "google_api_key",
            Self::GoogleOauth => "google_oauth",
            Self::StripeKey => "stripe_key",
            Self::GitlabToken => "gitlab_token",
            Self::NpmToken => "npm_token",
            Self::HuggingfaceToken => "huggingface_token",
            Self::SendgridKey => "sendgrid_key",
            Self::AzureStorageKey => "azure_storage_key",
            Self::VendorToken => "vendor_token",
            Self::CommandLineSecret => "command_line_secret",
            Self::Cookie => "cookie",
            Self::PasswordHash => "password_hash",
        }
    }

    /// The text that replaces a redacted value.
    pub fn marker(self) -> String {
        format!("{MARKER_PREFIX}{}]", self.as_str())
    }
}

pub(crate) const MARKER_PREFIX: &str = "[REDACTED:";

/// Whether `value` (quoted or escaped) is a marker an earlier pass left.
pub(crate) fn is_marker(value: &str) -> bool {
    let inner = value.trim_matches(|c| c == '"' || c == '\'' || c == '\\');
    inner.starts_with(MARKER_PREFIX)
}
