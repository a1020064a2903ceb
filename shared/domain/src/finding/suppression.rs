//! Suppression rules: "stop showing me findings like this one".
//!
//! A rule names a resource, a category, or both. The narrow rule (the finding's own resource
//! and category) is the default; a rule that drops either side covers every resource or every
//! category and is accepted only with an explicit `allow_broad_scope`. A rule that names
//! neither side would silence Patrol entirely and is never accepted.
//!
//! The rule id is derived from its scope (first 8 bytes of sha256(`suppress:<resource|*>:
//! <category|*>`) as hex), so suppressing the same scope twice names the same rule.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::Category;
use super::id::{parse_short_hex, short_digest};

/// Identity of a suppression rule (derived from its scope).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(try_from = "String", into = "String")]
pub struct SuppressionId([u8; 8]);

impl SuppressionId {
    fn derive(resource_id: Option<&str>, category: Option<Category>) -> Self {
        Self(short_digest(&[
            "suppress",
            resource_id.unwrap_or("*"),
            category.map_or("*", Category::as_str),
        ]))
    }

    pub fn as_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Display for SuppressionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_hex())
    }
}

/// A string that is not 16 lowercase hex characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid suppression id (expected 16 lowercase hex characters)")]
pub struct SuppressionIdError;

impl FromStr for SuppressionId {
    type Err = SuppressionIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_short_hex(s).map(Self).ok_or(SuppressionIdError)
    }
}

impl TryFrom<String> for SuppressionId {
    type Error = SuppressionIdError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

impl From<SuppressionId> for String {
    fn from(id: SuppressionId) -> Self {
        id.as_hex()
    }
}

/// How much a suppression created from one finding covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum SuppressBreadth {
    /// The finding's resource and category (the default).
    #[default]
    ResourceAndCategory,
    /// Every category on the finding's resource (broad).
    AllCategoriesOnResource,
    /// The finding's category on every resource (broad).
    CategoryOnAllResources,
}

impl SuppressBreadth {
    pub fn is_broad(self) -> bool {
        self != SuppressBreadth::ResourceAndCategory
    }
}

/// A broad suppression was asked for without `allow_broad_scope`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a suppression covering every {0} needs allow_broad_scope")]
pub struct BroadScopeRefused(pub &'static str);

/// An active suppression rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct SuppressionRule {
    pub id: SuppressionId,
    /// `None`: every resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_id: Option<String>,
    /// `None`: every category.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<Category>,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
}

impl SuppressionRule {
    /// The rule that suppressing a finding on `resource_id`/`category` with `breadth` creates.
    pub fn for_finding(
        resource_id: &str,
        category: Category,
        breadth: SuppressBreadth,
        allow_broad_scope: bool,
        created_by: &str,
        now: DateTime<Utc>,
    ) -> Result<Self, BroadScopeRefused> {
        let (resource, category) = match breadth {
            SuppressBreadth::ResourceAndCategory => (Some(resource_id), Some(category)),
            SuppressBreadth::AllCategoriesOnResource => (Some(resource_id), None),
            SuppressBreadth::CategoryOnAllResources => (None, Some(category)),
        };
        if breadth.is_broad() && !allow_broad_scope {
            return Err(BroadScopeRefused(if resource.is_none() {
                "resource"
            } else {
                "category"
            }));
        }
        Ok(Self {
            id: SuppressionId::derive(resource, category),
            resource_id: resource.map(str::to_owned),
            category,
            created_at: now,
            created_by: created_by.to_owned(),
        })
    }

    /// Whether a finding on `resource_id` in `category` falls under this rule.
    pub fn matches(&self, resource_id: &str, category: Category) -> bool {
        self.resource_id.as_deref().is_none_or(|r| r == resource_id)
            && self.category.is_none_or(|c| c == category)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(breadth: SuppressBreadth, allow: bool) -> Result<SuppressionRule, BroadScopeRefused> {
        SuppressionRule::for_finding(
            "host:h1",
            Category::Capacity,
            breadth,
            allow,
            "ops",
            Utc::now(),
        )
    }

    #[test]
    fn narrow_rule_matches_only_its_resource_and_category() {
        let r = rule(SuppressBreadth::ResourceAndCategory, false).expect("narrow is allowed");
        assert!(r.matches("host:h1", Category::Capacity));
        assert!(!r.matches("host:h2", Category::Capacity));
        assert!(!r.matches("host:h1", Category::Performance));
    }

    #[test]
    fn broad_rules_need_allow_broad_scope() {
        assert_eq!(
            rule(SuppressBreadth::AllCategoriesOnResource, false),
            Err(BroadScopeRefused("category"))
        );
        assert_eq!(
            rule(SuppressBreadth::CategoryOnAllResources, false),
            Err(BroadScopeRefused("resource"))
        );
        let all_categories = rule(SuppressBreadth::AllCategoriesOnResource, true).expect("allowed");
        assert!(all_categories.matches("host:h1", Category::Security));
        assert!(!all_categories.matches("host:h2", Category::Capacity));
        let all_resources = rule(SuppressBreadth::CategoryOnAllResources, true).expect("allowed");
        assert!(all_resources.matches("host:h9", Category::Capacity));
        assert!(!all_resources.matches("host:h1", Category::Security));
    }

    #[test]
    fn the_same_scope_names_the_same_rule() {
        let a = rule(SuppressBreadth::ResourceAndCategory, false).expect("ok");
        let b = rule(SuppressBreadth::ResourceAndCategory, true).expect("ok");
        let c = rule(SuppressBreadth::AllCategoriesOnResource, true).expect("ok");
        assert_eq!(a.id, b.id);
        assert_ne!(a.id, c.id);
        assert_eq!(a.id.as_hex().parse::<SuppressionId>(), Ok(a.id));
        assert_eq!("XYZ".parse::<SuppressionId>(), Err(SuppressionIdError));
    }
}
