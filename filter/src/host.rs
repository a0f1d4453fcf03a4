//! The proxy-wasm adapter: reads what Envoy knows about a request, hands it to [`mcp_access_engine::flow`],
//! and carries out the resulting actions. Host calls go through [`abi`], which treats every
//! status and byte from the host as untrusted (the SDK's own helpers panic on surprises).

use std::collections::HashMap;
use std::rc::Rc;

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action as WasmAction, ContextType, LogLevel};

use mcp_access_engine::flow::{
    BodyProgress, CalloutAnswer, Dispatched, HeadersInput, Next, Phase, Progress, RequestFlow,
    ResponseHeaders, Verdict, TRACE_TAG_KEYS,
};
use mcp_access_engine::listing::BodyAction;
use mcp_access_engine::policy::Engine;
use mcp_access_engine::ports::ListingStore;
use mcp_access_engine::stats::{self, Counter};

mod answers;
mod callouts;
mod counters;
mod drift;
mod facts;
mod metrics;
mod receipts;

use answers::SharedAnswers;
use counters::SharedCounters;
use drift::SharedDrift;
use facts::Envoy;
use metrics::{increment, BundleStats, Stats};
use receipts::Receipts;

/// Filter state key (`%FILTER_STATE(wasm.mcp_access.decision:PLAIN)%` in access logs).
pub const FILTER_STATE_KEY: &str = "mcp_access.decision";

/// Filter state key prefix of a gRPC authorizer's dynamic metadata (a JSON object):
/// `wasm.mcp_access.authz.<authorizer name>`.
pub const AUTHZ_METADATA_KEY: &str = "mcp_access.authz";

/// The filter's version and the commit it was built from (see build.rs).
macro_rules! version {
    () => {
        concat!(
            env!("CARGO_PKG_VERSION"),
            " (commit ",
            env!("MCP_ACCESS_GIT_COMMIT"),
            ")"
        )
    };
}

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Trace);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root::new()) });
}}

struct Root {
    engine: Option<Rc<Engine>>,
    stats: Option<Rc<Stats>>,
    bundle_stats: Option<Rc<BundleStats>>,
    /// The bundle counters defined so far, by name.
    bundle_metrics: HashMap<String, Option<u32>>,
    /// The shared-data stores every stream of this VM uses (made once, not per request).
    drift: Rc<SharedDrift>,
    answers: Rc<SharedAnswers>,
    counters: Rc<SharedCounters>,
    /// Filtered listings kept for reuse: one store per engine (made with it).
    listings: Rc<ListingStore>,
    /// The chain of the engine's records (made with it), and the VM's signing key.
    receipts: Option<Rc<Receipts>>,
    signer: Option<Rc<mcp_access_engine::receipts::Signer>>,
}

impl Root {
    fn new() -> Root {
        Root {
            engine: None,
            stats: None,
            bundle_stats: None,
            bundle_metrics: HashMap::new(),
            drift: Rc::new(SharedDrift),
            answers: Rc::new(SharedAnswers),
            counters: Rc::new(SharedCounters),
            listings: Rc::new(ListingStore::default()),
            receipts: None,
            signer: None,
        }
    }
}

impl Context for Root {}

/// The root context ends (its plugin configuration is replaced or the VM stops: Envoy calls
/// `proxy_on_delete`, and the SDK drops it): its chain's last records checkpointed. Here
/// rather than in `on_done`, so that the module need not export `proxy_on_done`, which Envoy
/// would call into the VM for every stream too (filter/unused-callbacks.txt).
impl Drop for Root {
    fn drop(&mut self) {
        if let Some(r) = &self.receipts {
            r.checkpoint();
        }
    }
}

impl RootContext for Root {
    fn on_vm_start(&mut self, _size: usize) -> bool {
        abi::log(LogLevel::Info, concat!("mcp-access: filter ", version!()));
        match receipts::signer_from_env() {
            Ok(signer) => {
                self.signer = signer;
                true
            }
            Err(e) => {
                abi::log(LogLevel::Error, &format!("mcp-access: {e}"));
                false
            }
        }
    }

    fn on_tick(&mut self) {
        if let Some(r) = &self.receipts {
            r.checkpoint();
        }
    }

    fn on_configure(&mut self, _size: usize) -> bool {
        let started = abi::now_ns();
        let config = abi::plugin_configuration().unwrap_or_default();
        match self.counters.prepared_for(Engine::from_json(&config)) {
            Ok(mut engine) => {
                if engine.caches_answers() {
                    engine.generation = answers::generation(&engine.generation);
                }
                if self.stats.is_none() {
                    self.stats = Some(Rc::new(Stats::define()));
                }
                let micros = abi::now_ns().saturating_sub(started) / 1_000;
                // Linear memory only grows: this is the peak the load needed (64 KiB pages).
                let memory_kib = abi::memory_kib();
                abi::log(
                    LogLevel::Info,
                    &format!(
                        "mcp-access: loaded bundle ({} policies, {} listeners, {} backends) in {}.{:03} ms, VM memory {} KiB",
                        engine.policies.len(),
                        engine.listeners.len(),
                        engine.backends.len(),
                        micros / 1_000,
                        micros % 1_000,
                        memory_kib
                    ),
                );
                let stats = BundleStats::define(&engine, &mut self.bundle_metrics);
                self.bundle_stats = Some(Rc::new(stats));
                // Listings filtered for the engine replaced would never be reused.
                self.listings = Rc::new(ListingStore::default());
                let gauge = self.stats.as_ref().and_then(|s| s.receipts_signed);
                let old = self.receipts.take();
                match Receipts::reloaded(old, &config, &engine, self.signer.clone(), gauge) {
                    Ok(r) => self.receipts = r,
                    Err(e) => {
                        abi::log(LogLevel::Error, &format!("mcp-access: {e}"));
                        return false;
                    }
                }
                self.engine = Some(Rc::new(engine));
                true
            }
            Err(e) => {
                abi::log(LogLevel::Error, &format!("mcp-access: {e}"));
                false
            }
        }
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Stream {
            engine: self.engine.clone()?,
            stats: self.stats.clone()?,
            bundle_stats: self.bundle_stats.clone()?,
            flow: RequestFlow::new()
                .with_drift_store(self.drift.clone())
                .with_answer_store(self.answers.clone())
                .with_counter_store(self.counters.clone())
                .with_listing_store(self.listings.clone()),
            receipts: self.receipts.clone(),
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Stream {
    engine: Rc<Engine>,
    stats: Rc<Stats>,
    bundle_stats: Rc<BundleStats>,
    flow: RequestFlow,
    receipts: Option<Rc<Receipts>>,
}

impl Stream {
    fn run(&mut self, progress: Progress, phase: Phase) -> WasmAction {
        self.report_callouts(progress.reports);
        let mut action = progress.next;
        loop {
            match action {
                Next::Dispatch(calls) => {
                    let results = calls.iter().map(|c| Dispatched {
                        slot: c.call.slot,
                        token: abi::http_call(&c.request),
                        at_ns: abi::now_ns(),
                    });
                    let progress = self.flow.dispatched(&self.engine, results);
                    self.report_callouts(progress.reports);
                    action = progress.next;
                }
                Next::CallLimiter(call) => {
                    // Sent as an authorizer's gRPC call is; its answer comes the same way.
                    let token = abi::http_call(&call);
                    let progress = self
                        .flow
                        .limiter_dispatched(&self.engine, token, abi::now_ns());
                    action = progress.next;
                }
                Next::Hold => {
                    return match phase.hold(self.engine.settings.hold_headers) {
                        Verdict::Continue => WasmAction::Continue,
                        Verdict::Pause => WasmAction::Pause,
                    };
                }
                Next::Allow {
                    add_headers,
                    identity_headers,
                } => {
                    for edit in &add_headers {
                        if !abi::edit_request_header(edit) {
                            abi::log(
                                LogLevel::Warn,
                                &format!(
                                    "mcp-access: could not edit header {} (headers already sent)",
                                    edit.name
                                ),
                            );
                        }
                    }
                    if let Some(edit) = identity_headers
                        .iter()
                        .find(|e| !abi::edit_request_header(e))
                    {
                        // Applied after the authorizers' edits, which cannot override them. One
                        // that fails: the upstream would read what the client sent; refuse.
                        abi::log(
                            LogLevel::Error,
                            &format!(
                                "mcp-access: could not set identity header {}: request refused",
                                edit.name
                            ),
                        );
                        action = self.flow.edit_failed().next;
                        continue;
                    }
                    self.finished();
                    if phase.resumes_on_allow() {
                        abi::resume_request();
                    }
                    return WasmAction::Continue;
                }
                Next::Respond(r) => {
                    self.finished();
                    abi::send_response(r.status, &r.headers, &r.body);
                    return WasmAction::Pause;
                }
            }
        }
    }

    fn finished(&mut self) {
        let Some(outcome) = self.flow.outcome() else {
            return;
        };
        let json = match &self.receipts {
            Some(r) => r.seal(|link| outcome.to_json_linked(&self.engine, link)),
            None => outcome.to_json(&self.engine),
        };
        receipts::publish(&self.engine, &json);
        if self.engine.settings.decision_records.trace_tags {
            for (key, value) in TRACE_TAG_KEYS.iter().zip(outcome.trace_tags(&self.engine)) {
                abi::set_property(&[key], value.as_bytes());
            }
        }
        self.bundle_stats.count(outcome.by, outcome.allowed);
        self.bundle_stats.count_limits(&outcome.limits);
        for (c, n) in [
            (Counter::CelErrors, outcome.cel_errors.0),
            (Counter::CelStepsExceeded, outcome.cel_errors.1),
            (Counter::RateLimitEvicted, outcome.limits.evicted),
        ] {
            if let (Some(id), true) = (self.stats.counters.get(c.index()).copied().flatten(), n > 0)
            {
                abi::increment_metric(id, i64::from(n));
            }
        }
        if let Some(c) = stats::limiter_failed_counter(&outcome.limits) {
            self.stats.inc(c);
        }
        // What a dry-run policy changed is logged as a denial is (docs/semantics.md §3.8).
        let mut dry_run_changed = false;
        if let Some(d) = &outcome.dry_run {
            if let Some(c) = stats::dry_run_total(d) {
                self.stats.inc(c);
                dry_run_changed = true;
            }
            increment(
                stats::dry_run_counter(d)
                    .and_then(|i| self.bundle_stats.dry_run.get(i).copied().flatten()),
            );
        }
        let level = if outcome.allowed {
            self.stats.inc(Counter::Allowed);
            if dry_run_changed {
                LogLevel::Info
            } else {
                LogLevel::Debug
            }
        } else {
            self.stats.inc(Counter::Denied);
            increment(
                stats::denial_counter(outcome.level, outcome.reason)
                    .and_then(|i| self.stats.denied.get(i).copied().flatten()),
            );
            LogLevel::Info
        };
        if abi::log_enabled(level) {
            let prefix = mcp_access_engine::flow::records::LOG_PREFIX;
            abi::log(level, &format!("{prefix}{json}"));
        }
    }

    /// Carries out what a response body event did: its stats and log lines, and the body
    /// (`size` bytes held) replaced when the flow says so.
    fn response_body(&mut self, progress: BodyProgress, size: usize) -> WasmAction {
        self.report_pins(progress.pin_events);
        self.stats.add(Counter::ListingsReused, progress.reused);
        match progress.action {
            BodyAction::Pass => WasmAction::Continue,
            BodyAction::Buffer => WasmAction::Pause,
            BodyAction::Replace(bytes) => {
                abi::set_buffer(abi::BUFFER_HTTP_RESPONSE_BODY, size, &bytes);
                WasmAction::Continue
            }
        }
    }
}

impl Context for Stream {
    fn on_http_call_response(
        &mut self,
        token: u32,
        _headers: usize,
        body_size: usize,
        _trailers: usize,
    ) {
        let now = abi::now_ns();
        // Envoy's codec bounds the headers (cluster max_response_headers_kb / max_headers_count).
        let mut headers = abi::header_map(abi::MAP_HTTP_CALL_RESPONSE_HEADERS).unwrap_or_default();
        let status = headers.get(":status").and_then(|v| v.parse::<u16>().ok());
        headers.retain(|n, _| !n.starts_with(':'));
        // The flow reads only a denial's body, and never more than its cap plus one byte.
        let read = |limit: usize| match limit.min(body_size) {
            0 => Some(Vec::new()),
            n => abi::buffer(abi::BUFFER_HTTP_CALL_RESPONSE_BODY, n),
        };
        let answer = CalloutAnswer {
            status,
            headers: &headers,
            trailers: || abi::header_map(abi::MAP_HTTP_CALL_RESPONSE_TRAILERS).unwrap_or_default(),
            read,
        };
        let progress = self
            .flow
            .on_callout_response(&self.engine, token, answer, now);
        self.run(progress, Phase::Async);
    }
}

impl HttpContext for Stream {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> WasmAction {
        let headers = abi::header_map(abi::MAP_HTTP_REQUEST_HEADERS).unwrap_or_default();
        let input = HeadersInput::gather(&self.engine, headers, end_of_stream, &Envoy);
        let progress = self.flow.on_headers(&self.engine, input);
        self.run(
            progress,
            Phase::Headers {
                body_follows: !end_of_stream,
            },
        )
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> WasmAction {
        if self.flow.is_done() {
            return WasmAction::Continue;
        }
        let progress = self
            .flow
            .on_body(&self.engine, body_size, end_of_stream, |n| {
                abi::buffer(abi::BUFFER_HTTP_REQUEST_BODY, n)
            });
        self.run(progress, Phase::Body)
    }

    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> WasmAction {
        let trailers = abi::header_map(abi::MAP_HTTP_REQUEST_TRAILERS).unwrap_or_default();
        // No client copy of an identity header reaches the upstream in trailers either: the
        // same removals as from the headers (docs/semantics.md §5.7), whatever the decision.
        let present = |n: &str| trailers.iter().any(|(t, _)| t == n);
        let removals = self
            .engine
            .identity_removals(trailers.iter().map(|(n, _)| n));
        let removals = removals.iter().filter(|e| present(&e.name));
        if let Some(e) = removals
            .into_iter()
            .find(|e| !abi::edit_header(abi::MAP_HTTP_REQUEST_TRAILERS, e))
        {
            abi::log(
                LogLevel::Error,
                &format!(
                    "mcp-access: could not remove trailer {}: request refused",
                    e.name
                ),
            );
            let progress = self.flow.edit_failed();
            return self.run(progress, Phase::Body);
        }
        // Trailers end the body; continuing here without a decision would release the request.
        if self.flow.is_done() {
            return WasmAction::Continue;
        }
        let progress = self.flow.on_trailers(&self.engine, &trailers, |n| {
            abi::buffer(abi::BUFFER_HTTP_REQUEST_BODY, n)
        });
        self.run(progress, Phase::Body)
    }

    fn on_http_response_headers(
        &mut self,
        _num_headers: usize,
        _end_of_stream: bool,
    ) -> WasmAction {
        // Most answers carry no listing: their Content-Type alone tells (one host call, not
        // the whole header map).
        let action = self.flow.on_response_headers(
            || abi::header_value(abi::MAP_HTTP_RESPONSE_HEADERS, "content-type"),
            || abi::header_value(abi::MAP_HTTP_RESPONSE_HEADERS, "content-encoding"),
            || abi::header_map(abi::MAP_HTTP_RESPONSE_HEADERS).unwrap_or_default(),
        );
        if let ResponseHeaders::Rewrite { media_type } = action {
            abi::remove_response_header("content-length");
            if let Some(ct) = media_type {
                abi::remove_response_header("content-encoding");
                abi::set_response_header("content-type", ct);
            }
        }
        WasmAction::Continue
    }

    fn on_http_response_trailers(&mut self, _num_trailers: usize) -> WasmAction {
        if !self.flow.reads_response() {
            return WasmAction::Continue;
        }
        let mut size = 0;
        let progress = self.flow.on_response_trailers(&self.engine, || {
            let body = abi::buffer(abi::BUFFER_HTTP_RESPONSE_BODY, usize::MAX >> 1);
            size = body.as_ref().map_or(0, Vec::len);
            body
        });
        self.response_body(progress, size)
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> WasmAction {
        if !self.flow.reads_response() {
            return WasmAction::Continue;
        }
        let progress = self
            .flow
            .on_response_body(&self.engine, body_size, end_of_stream, |n| {
                abi::buffer(abi::BUFFER_HTTP_RESPONSE_BODY, n)
            });
        self.response_body(progress, body_size)
    }
}

/// Raw proxy-wasm host calls with every status handled.
mod abi {
    use std::ptr::null_mut;

    use proxy_wasm::types::{LogLevel, Status};

    use mcp_access_engine::callout::{CalloutRequest, DispatchError};
    use mcp_access_engine::policy::{HeaderEdit, HeaderOp};
    use mcp_access_engine::request::Headers;
    use mcp_access_engine::wire;

    pub const MAP_HTTP_REQUEST_HEADERS: u32 = 0;
    pub const MAP_HTTP_REQUEST_TRAILERS: u32 = 1;
    pub const MAP_HTTP_RESPONSE_HEADERS: u32 = 2;
    pub const BUFFER_HTTP_RESPONSE_BODY: u32 = 1;
    pub const MAP_HTTP_CALL_RESPONSE_HEADERS: u32 = 6;
    pub const MAP_HTTP_CALL_RESPONSE_TRAILERS: u32 = 7;
    pub const BUFFER_HTTP_REQUEST_BODY: u32 = 0;
    pub const BUFFER_HTTP_CALL_RESPONSE_BODY: u32 = 4;
    const BUFFER_PLUGIN_CONFIGURATION: u32 = 7;
    pub const METRIC_COUNTER: u32 = 0;
    pub const METRIC_GAUGE: u32 = 1;
    pub const METRIC_HISTOGRAM: u32 = 2;
    const STREAM_REQUEST: u32 = 0;
    const OK: u32 = 0;
    const NOT_FOUND: u32 = 1;
    pub const CAS_MISMATCH: u32 = 8;

    #[allow(clashing_extern_declarations)]
    #[link(wasm_import_module = "env")]
    extern "C" {
        fn proxy_log(level: u32, data: *const u8, size: usize) -> u32;
        fn proxy_get_log_level(level: *mut u32) -> u32;
        fn proxy_get_header_map_pairs(map: u32, data: *mut *mut u8, size: *mut usize) -> u32;
        fn proxy_add_header_map_value(
            map: u32,
            key: *const u8,
            key_size: usize,
            value: *const u8,
            value_size: usize,
        ) -> u32;
        fn proxy_remove_header_map_value(map: u32, key: *const u8, key_size: usize) -> u32;
        fn proxy_get_header_map_value(
            map: u32,
            key: *const u8,
            key_size: usize,
            data: *mut *mut u8,
            size: *mut usize,
        ) -> u32;
        fn proxy_replace_header_map_value(
            map: u32,
            key: *const u8,
            key_size: usize,
            value: *const u8,
            value_size: usize,
        ) -> u32;
        fn proxy_set_buffer_bytes(
            buffer: u32,
            start: usize,
            size: usize,
            data: *const u8,
            data_size: usize,
        ) -> u32;
        fn proxy_get_buffer_bytes(
            buffer: u32,
            start: usize,
            max: usize,
            data: *mut *mut u8,
            size: *mut usize,
        ) -> u32;
        fn proxy_get_property(
            path: *const u8,
            path_size: usize,
            data: *mut *mut u8,
            size: *mut usize,
        ) -> u32;
        fn proxy_set_property(
            path: *const u8,
            path_size: usize,
            value: *const u8,
            value_size: usize,
        ) -> u32;
        fn proxy_send_local_response(
            status: u32,
            details: *const u8,
            details_size: usize,
            body: *const u8,
            body_size: usize,
            headers: *const u8,
            headers_size: usize,
            grpc_status: i32,
        ) -> u32;
        fn proxy_continue_stream(stream: u32) -> u32;
        fn proxy_define_metric(kind: u32, name: *const u8, name_size: usize, id: *mut u32) -> u32;
        fn proxy_increment_metric(id: u32, offset: i64) -> u32;
        fn proxy_record_metric(id: u32, value: u64) -> u32;
        fn proxy_get_current_time_nanoseconds(time: *mut u64) -> u32;
        fn proxy_get_shared_data(
            key: *const u8,
            key_size: usize,
            value: *mut *mut u8,
            value_size: *mut usize,
            cas: *mut u32,
        ) -> u32;
        fn proxy_set_shared_data(
            key: *const u8,
            key_size: usize,
            value: *const u8,
            value_size: usize,
            cas: u32,
        ) -> u32;
    }

    /// Takes ownership of host-allocated memory (allocated through the SDK's
    /// `proxy_on_memory_allocate`, i.e. this module's allocator).
    unsafe fn take(data: *mut u8, size: usize) -> Vec<u8> {
        if data.is_null() {
            Vec::new()
        } else {
            Vec::from_raw_parts(data, size, size)
        }
    }

    pub fn log(level: LogLevel, message: &str) {
        unsafe {
            proxy_log(level as u32, message.as_ptr(), message.len());
        }
    }

    /// Whether Envoy's wasm log level lets `level` through (so disabled lines cost nothing).
    pub fn log_enabled(level: LogLevel) -> bool {
        let mut current = 0u32;
        let status = unsafe { proxy_get_log_level(&mut current) };
        status != OK || level as u32 >= current
    }

    /// The value of header `name` (lowercase) in `map` (Envoy gives its first copy; inline
    /// headers such as `content-type` are held once, copies joined with commas).
    pub fn header_value(map: u32, name: &str) -> Option<String> {
        let (mut data, mut size) = (null_mut(), 0usize);
        let status = unsafe {
            proxy_get_header_map_value(map, name.as_ptr(), name.len(), &mut data, &mut size)
        };
        let bytes = unsafe { take(data, size) };
        (status == OK).then(|| String::from_utf8_lossy(&bytes).into_owned())
    }

    pub fn header_map(map: u32) -> Option<Headers> {
        let (mut data, mut size) = (null_mut(), 0usize);
        let status = unsafe { proxy_get_header_map_pairs(map, &mut data, &mut size) };
        let bytes = unsafe { take(data, size) };
        if status != OK {
            return None;
        }
        wire::decode_map(bytes)
    }

    /// Applies an authorizer's edit to the request headers; false if the host refused.
    pub fn edit_request_header(e: &HeaderEdit) -> bool {
        edit_header(MAP_HTTP_REQUEST_HEADERS, e)
    }

    /// Applies `e` to header map `m` (request headers or trailers); false if the host refused.
    pub fn edit_header(m: u32, e: &HeaderEdit) -> bool {
        let (name, value) = (e.name.as_bytes(), e.value.as_bytes());
        let present = || {
            let (mut data, mut size) = (null_mut(), 0usize);
            let status = unsafe {
                proxy_get_header_map_value(m, name.as_ptr(), name.len(), &mut data, &mut size)
            };
            drop(unsafe { take(data, size) });
            status == OK
        };
        let skip = match e.op {
            HeaderOp::OverwriteIfExists => !present(),
            HeaderOp::AddIfAbsent => present(),
            _ => false,
        };
        if skip {
            return true;
        }
        let status = unsafe {
            match e.op {
                HeaderOp::Set | HeaderOp::OverwriteIfExists => proxy_replace_header_map_value(
                    m,
                    name.as_ptr(),
                    name.len(),
                    value.as_ptr(),
                    value.len(),
                ),
                HeaderOp::Append | HeaderOp::AddIfAbsent => proxy_add_header_map_value(
                    m,
                    name.as_ptr(),
                    name.len(),
                    value.as_ptr(),
                    value.len(),
                ),
                HeaderOp::Remove => proxy_remove_header_map_value(m, name.as_ptr(), name.len()),
            }
        };
        status == OK
    }

    /// Replaces a response header (adds it when absent).
    pub fn set_response_header(name: &str, value: &str) {
        unsafe {
            proxy_replace_header_map_value(
                MAP_HTTP_RESPONSE_HEADERS,
                name.as_ptr(),
                name.len(),
                value.as_ptr(),
                value.len(),
            );
        }
    }

    /// Removes every copy of a response header.
    pub fn remove_response_header(name: &str) {
        unsafe {
            proxy_remove_header_map_value(MAP_HTTP_RESPONSE_HEADERS, name.as_ptr(), name.len());
        }
    }

    /// Replaces the first `size` bytes of a buffer (all of what the callback holds) with
    /// `data`.
    pub fn set_buffer(buffer: u32, size: usize, data: &[u8]) {
        unsafe {
            proxy_set_buffer_bytes(buffer, 0, size, data.as_ptr(), data.len());
        }
    }

    pub fn buffer(buffer: u32, max: usize) -> Option<Vec<u8>> {
        let (mut data, mut size) = (null_mut(), 0usize);
        let status = unsafe { proxy_get_buffer_bytes(buffer, 0, max, &mut data, &mut size) };
        let bytes = unsafe { take(data, size) };
        (status == OK).then_some(bytes)
    }

    pub fn plugin_configuration() -> Option<Vec<u8>> {
        buffer(BUFFER_PLUGIN_CONFIGURATION, usize::MAX >> 1)
    }

    pub fn property(path: &[&str]) -> Option<Vec<u8>> {
        let p = wire::encode_path(path);
        let (mut data, mut size) = (null_mut(), 0usize);
        let status = unsafe { proxy_get_property(p.as_ptr(), p.len(), &mut data, &mut size) };
        let bytes = unsafe { take(data, size) };
        (status == OK && !bytes.is_empty()).then_some(bytes)
    }

    pub fn set_property(path: &[&str], value: &[u8]) {
        let p = wire::encode_path(path);
        unsafe {
            proxy_set_property(p.as_ptr(), p.len(), value.as_ptr(), value.len());
        }
    }

    pub fn send_response(status: u16, headers: &[(String, String)], body: &[u8]) {
        let h = wire::encode_map(headers);
        let details = b"mcp_access";
        unsafe {
            proxy_send_local_response(
                u32::from(status),
                details.as_ptr(),
                details.len(),
                body.as_ptr(),
                body.len(),
                h.as_ptr(),
                h.len(),
                -1,
            );
        }
    }

    /// Dispatches a callout; Err: the host status (an unknown cluster is BadArgument).
    /// Goes through the SDK so that its dispatcher routes the response to this stream; the SDK
    /// maps every status Envoy returns for this call (Ok, BadArgument, InternalFailure).
    pub fn http_call(c: &CalloutRequest) -> Result<u32, DispatchError> {
        let headers: Vec<(&str, &str)> = c
            .headers
            .iter()
            .map(|(n, v)| (n.as_ref(), v.as_ref()))
            .collect();
        proxy_wasm::hostcalls::dispatch_http_call(
            &c.cluster,
            headers,
            Some(&c.body),
            Vec::new(),
            std::time::Duration::from_millis(u64::from(c.timeout_ms)),
        )
        .map_err(|s| match s {
            Status::BadArgument => DispatchError::NoCluster,
            Status::InternalFailure => DispatchError::NoEndpoint,
            other => DispatchError::Other(format!("{other:?}")),
        })
    }

    pub fn resume_request() {
        unsafe {
            proxy_continue_stream(STREAM_REQUEST);
        }
    }

    pub fn define_metric(kind: u32, name: &str) -> Option<u32> {
        let mut id = 0u32;
        let status = unsafe { proxy_define_metric(kind, name.as_ptr(), name.len(), &mut id) };
        (status == OK).then_some(id)
    }

    pub fn increment_metric(id: u32, by: i64) {
        unsafe {
            proxy_increment_metric(id, by);
        }
    }

    pub fn record_metric(id: u32, value: u64) {
        unsafe {
            proxy_record_metric(id, value);
        }
    }

    /// The VM's linear memory in KiB (64 KiB pages); 0 outside a Wasm VM.
    pub fn memory_kib() -> usize {
        #[cfg(target_arch = "wasm32")]
        return core::arch::wasm32::memory_size::<0>() * 64;
        #[cfg(not(target_arch = "wasm32"))]
        return 0;
    }

    /// A shared data value and its CAS; None when the key has none. Err: the host's status.
    pub fn shared_data(key: &str) -> Result<Option<(Vec<u8>, u32)>, u32> {
        let (mut data, mut size, mut cas) = (null_mut(), 0usize, 0u32);
        let status = unsafe {
            proxy_get_shared_data(key.as_ptr(), key.len(), &mut data, &mut size, &mut cas)
        };
        let bytes = unsafe { take(data, size) };
        match status {
            OK => Ok(Some((bytes, cas))),
            NOT_FOUND => Ok(None),
            other => Err(other),
        }
    }

    /// Writes a shared data value if its CAS is still `cas` (0: whatever it is). Err: the
    /// host's status ([`CAS_MISMATCH`]: another write came first).
    pub fn set_shared_data(key: &str, value: &[u8], cas: u32) -> Result<(), u32> {
        let status = unsafe {
            proxy_set_shared_data(key.as_ptr(), key.len(), value.as_ptr(), value.len(), cas)
        };
        match status {
            OK => Ok(()),
            other => Err(other),
        }
    }

    pub fn now_ns() -> u64 {
        let mut t = 0u64;
        unsafe {
            proxy_get_current_time_nanoseconds(&mut t);
        }
        t
    }
}
