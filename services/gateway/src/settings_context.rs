//! What the AI settings routes (and the Patrol status, the Assistant and the web UI) need besides
//! the store: the master key, the operator's `ai.*` config layer, the subjects, and the outbox
//! relay to wake after a commit.

use std::sync::Arc;

use pulse_bus::Subjects;
use pulse_domain::ai_settings::SettingsError;
use pulse_store::settings::{ConfigLayer, MasterKey};
use tokio::sync::Notify;

/// What the settings routes need besides the store.
#[derive(Debug, Clone)]
pub struct SettingsContext {
    pub master_key: MasterKey,
    /// The `ai.*` config as a sparse settings layer (keys removed) and the providers whose key
    /// comes from config or the environment; built by the one shared constructor.
    pub config: ConfigLayer,
    pub subjects: Subjects,
    pub outbox_notify: Arc<Notify>,
}

impl SettingsContext {
    /// Builds the config layer and checks it with the same rules as a stored document.
    pub fn new(
        config: &pulse_config::AiConfig,
        master_key: MasterKey,
        subjects: Subjects,
        outbox_notify: Arc<Notify>,
    ) -> Result<Self, SettingsError> {
        Ok(Self {
            master_key,
            config: ConfigLayer::from_config(config)?,
            subjects,
            outbox_notify,
        })
    }
}
