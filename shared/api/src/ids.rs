//! Ids that are UUIDs on the wire, one type each so a client cannot hand an action's id where a
//! session's is asked for. In the OpenAPI document each is a plain `uuid` string.

/// Declares `$name`, a UUID id: serde as the UUID's string, JSON Schema `{"type": "string",
/// "format": "uuid"}` inline, parsed by `FromStr` as `Uuid` parses.
macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord,
            serde::Serialize, serde::Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(pub uuid::Uuid);

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }

        impl std::str::FromStr for $name {
            type Err = uuid::Error;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                uuid::Uuid::parse_str(text).map($name)
            }
        }

        impl From<uuid::Uuid> for $name {
            fn from(id: uuid::Uuid) -> Self {
                $name(id)
            }
        }

        impl schemars::JsonSchema for $name {
            fn inline_schema() -> bool {
                true
            }

            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
                <uuid::Uuid as schemars::JsonSchema>::json_schema(generator)
            }
        }
    };
}
