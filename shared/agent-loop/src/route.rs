//! Model routes (`provider:model`) and which configured route each surface uses.
//!
//! A route names exactly one provider and one model. Resolution walks a surface's chain to the
//! first route the operator configured and stops there: a configured route that cannot be used
//! is an error, never a reason to try the next one.

use std::fmt;
use std::str::FromStr;

use crate::registry::{self, ProviderEntry, RouteClass};

/// A parsed `provider:model` route.
#[derive(Debug, Clone)]
pub struct Route {
    provider: &'static ProviderEntry,
    model: String,
}

impl PartialEq for Route {
    fn eq(&self, other: &Self) -> bool {
        self.provider.id == other.provider.id && self.model == other.model
    }
}

impl Eq for Route {}

impl std::hash::Hash for Route {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.provider.id.hash(state);
        self.model.hash(state);
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("the model route is empty")]
    Empty,
    #[error("model route {input:?} is not of the form provider:model")]
    MissingProvider { input: String },
    #[error("unknown provider {provider:?} in model route")]
    UnknownProvider { provider: String },
    #[error("model route for provider {provider:?} names no model")]
    EmptyModel { provider: String },
}

impl Route {
    /// Parses `provider:model`. Only the first `:` separates: the model keeps the rest
    /// (`ollama:llama3.1:8b`, `openrouter:meta-llama/llama-3-70b`).
    pub fn parse(input: &str) -> Result<Self, RouteError> {
        let input = input.trim();
        if input.is_empty() {
            return Err(RouteError::Empty);
        }
        let Some((provider, model)) = input.split_once(':') else {
            return Err(RouteError::MissingProvider {
                input: input.to_owned(),
            });
        };
        if provider.is_empty() {
            return Err(RouteError::MissingProvider {
                input: input.to_owned(),
            });
        }
        let entry = registry::lookup(provider).ok_or_else(|| RouteError::UnknownProvider {
            provider: provider.to_owned(),
        })?;
        if model.trim().is_empty() {
            return Err(RouteError::EmptyModel {
                provider: provider.to_owned(),
            });
        }
        Ok(Self {
            provider: entry,
            model: model.to_owned(),
        })
    }

    pub fn new(provider: &'static ProviderEntry, model: impl Into<String>) -> Self {
        Self {
            provider,
            model: model.into(),
        }
    }

    pub fn provider(&self) -> &'static ProviderEntry {
        self.provider
    }

    pub fn provider_id(&self) -> &'static str {
        self.provider.id
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    /// The route class at the provider's default address; see
    /// [`ProviderEntry::route_class_at`] for a configured base URL.
    pub fn route_class(&self) -> RouteClass {
        self.provider.route_class
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.provider.id, self.model)
    }
}

impl FromStr for Route {
    type Err = RouteError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Where a model call comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Surface {
    Chat,
    Patrol,
    AutoFix,
}

impl Surface {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Patrol => "patrol",
            Self::AutoFix => "auto_fix",
        }
    }

    /// The settings consulted, in order, for this surface's route.
    pub fn chain(self) -> &'static [RouteSetting] {
        match self {
            Self::Chat => &[RouteSetting::ChatModel, RouteSetting::Model],
            Self::Patrol => &[RouteSetting::PatrolModel, RouteSetting::Model],
            Self::AutoFix => &[
                RouteSetting::AutoFixModel,
                RouteSetting::PatrolModel,
                RouteSetting::Model,
            ],
        }
    }
}

/// One model-route setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RouteSetting {
    /// The shared default.
    Model,
    ChatModel,
    PatrolModel,
    AutoFixModel,
}

impl RouteSetting {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Model => "model",
            Self::ChatModel => "chat_model",
            Self::PatrolModel => "patrol_model",
            Self::AutoFixModel => "auto_fix_model",
        }
    }
}

/// A tenant's model-route settings as stored (unparsed; blank means unset).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteSettings {
    pub model: Option<String>,
    pub chat_model: Option<String>,
    pub patrol_model: Option<String>,
    pub auto_fix_model: Option<String>,
}

impl RouteSettings {
    pub fn get(&self, setting: RouteSetting) -> Option<&str> {
        let value = match setting {
            RouteSetting::Model => &self.model,
            RouteSetting::ChatModel => &self.chat_model,
            RouteSetting::PatrolModel => &self.patrol_model,
            RouteSetting::AutoFixModel => &self.auto_fix_model,
        };
        value.as_deref().map(str::trim).filter(|v| !v.is_empty())
    }

    /// The route `surface` uses: the first configured setting along its chain. A configured
    /// setting that does not parse is an error naming that setting; the chain does not go on.
    pub fn resolve(&self, surface: Surface) -> Result<ResolvedRoute, ResolveError> {
        for &setting in surface.chain() {
            if let Some(text) = self.get(setting) {
                let route = Route::parse(text).map_err(|source| ResolveError::Invalid {
                    surface: surface.as_str(),
                    setting: setting.as_str(),
                    source,
                })?;
                return Ok(ResolvedRoute {
                    surface,
                    setting,
                    route,
                });
            }
        }
        Err(ResolveError::NotConfigured {
            surface: surface.as_str(),
        })
    }
}

/// A surface's route and the setting it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedRoute {
    pub surface: Surface,
    pub setting: RouteSetting,
    pub route: Route,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("no model route is configured for {surface}")]
    NotConfigured { surface: &'static str },
    #[error("the {setting} route for {surface} is invalid: {source}")]
    Invalid {
        surface: &'static str,
        setting: &'static str,
        #[source]
        source: RouteError,
    },
}
