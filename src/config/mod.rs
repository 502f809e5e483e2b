//! Settings as data: a policy as a document (feature `serde`), and gRPC's service config, read as
//! C-core reads it (feature `tonic`), with the JSON reader it needs.

#[cfg(feature = "tonic")]
pub(crate) mod json;
#[cfg(feature = "serde")]
pub(crate) mod policy;
#[cfg(feature = "tonic")]
pub(crate) mod service_config;
