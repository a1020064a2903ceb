//! Domain events published on `pulse.<tenant>.events.<domain>.<event>`. The event types live in
//! `pulse-domain`; this module gives them their wire identity.

use pulse_domain::ai_settings::SettingsChanged;
use pulse_domain::alert_rules::AlertTransition;
use pulse_domain::resource::ResourceChanged;

use crate::Message;

/// `events.resource.changed`: domain and event tokens of the subject.
pub const RESOURCE_CHANGED: (&str, &str) = ("resource", "changed");

impl Message for ResourceChanged {
    const TYPE: &'static str = "pulse.resource.changed";
}

/// `events.alert.fired`: an alert started firing.
pub const ALERT_FIRED: (&str, &str) = ("alert", "fired");
/// `events.alert.level_changed`: a firing alert changed level.
pub const ALERT_LEVEL_CHANGED: (&str, &str) = ("alert", "level_changed");
/// `events.alert.cleared`: a firing alert cleared.
pub const ALERT_CLEARED: (&str, &str) = ("alert", "cleared");

/// The event a lifecycle transition is published as.
pub fn alert_event(transition: &AlertTransition) -> (&'static str, &'static str) {
    match transition {
        AlertTransition::Fired { .. } => ALERT_FIRED,
        AlertTransition::LevelChanged { .. } => ALERT_LEVEL_CHANGED,
        AlertTransition::Cleared { .. } => ALERT_CLEARED,
    }
}

impl Message for AlertTransition {
    const TYPE: &'static str = "pulse.alert.transition";
}

/// `events.settings.changed`: a tenant's AI settings were saved.
pub const SETTINGS_CHANGED: (&str, &str) = ("settings", "changed");

impl Message for SettingsChanged {
    const TYPE: &'static str = "pulse.settings.changed";
}
