//! Settings as data: gRPC's service config, read as C-core reads it (feature `tonic`), and the JSON
//! reader it needs.

#[cfg(feature = "tonic")]
pub(crate) mod json;
#[cfg(feature = "tonic")]
pub(crate) mod service_config;
