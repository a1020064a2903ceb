//! Resources: `GET /api/resources` and `GET /api/resources/{id}` (any reference the resolver
//! accepts: canonical id, source id, name or alias).

use pulse_domain::resource::{Resource, ResourceType};
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    #[serde(rename = "type")]
    #[schemars(with = "Option<ResourceType>")]
    pub resource_type: Option<String>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ResourceList {
    pub resources: Vec<Resource>,
}
