//! What the host provides, on one page: the ports the engine reads and keeps state through.
//! The proxy-wasm adapter (`mcp-access-filter`, `filter/src/host*`) implements each; tests,
//! benches and the CLI use the in-memory ones or none.
//!
//! | port | for | the filter's | reaches the flow through |
//! |---|---|---|---|
//! | [`HostFacts`] | what Envoy knows beyond the headers ([`Fact`]: route, port, peer certificate, ...) | Envoy's attributes | [`crate::flow::HeadersInput::gather`] |
//! | [`DriftStore`] | drift of pinned tools, shared by the workers | Envoy's shared data | [`crate::flow::RequestFlow::with_drift_store`] |
//! | [`AnswerStore`] | authorizer answers kept, and the clock they expire by | Envoy's shared data | [`crate::flow::RequestFlow::with_answer_store`] |
//! | [`ListingStore`] | filtered listings kept for reuse, one store per engine | the VM's memory, made with each engine | [`crate::flow::RequestFlow::with_listing_store`] |
//!
//! Everything else crosses the boundary as values: the flow's [`crate::flow::Progress`] and
//! [`crate::flow::BodyProgress`] say what to do, and [`crate::flow::Outcome`] what to record and
//! count. Without a store, nothing is kept: drift is not remembered, every authorizer is
//! called, every listing is filtered afresh.

pub use crate::authz_cache::AnswerStore;
pub use crate::facts::{Fact, HostFacts};
pub use crate::listing::reuse::ListingStore;
pub use crate::pins::{DriftStore, MemoryDriftStore};
