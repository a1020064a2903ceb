//! Domain events published on `pulse.<tenant>.events.<domain>.<event>`. The event types live in
//! `pulse-domain`; this module gives them their wire identity.

use pulse_domain::resource::ResourceChanged;

use crate::Message;

/// `events.resource.changed`: domain and event tokens of the subject.
pub const RESOURCE_CHANGED: (&str, &str) = ("resource", "changed");

impl Message for ResourceChanged {
    const TYPE: &'static str = "pulse.resource.changed";
}
