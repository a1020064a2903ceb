//! Resources: `GET /api/resources` and `GET /api/resources/{id}` (any reference the resolver
//! accepts: canonical id, source id, name or alias).

use pulse_domain::resource::{Resource, ResourceType};
use serde::{Deserialize, Serialize};

#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    #[serde(
        rename = "type",
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::query::parsed"
    )]
    #[schemars(with = "Option<ResourceType>")]
    pub resource_type: Option<ResourceType>,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ResourceList {
    pub resources: Vec<Resource>,
}
