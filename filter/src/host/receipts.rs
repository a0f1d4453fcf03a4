//! Receipts in the VM (docs/audit.md): the chain of the loaded configuration, the signing key
//! from the environment, and the checkpoints logged.

use std::rc::Rc;

use proxy_wasm::types::LogLevel;

use mcp_access_engine::policy::Engine;
use mcp_access_engine::receipts::{
    self, hex, structured, Chain, ChainStore, Link, Signer, Unsealed, CHECKPOINT_PREFIX, KEY_ENV,
};

use super::{abi, FILTER_STATE_KEY};

/// The chain of one configuration in this VM, and how it is checkpointed.
pub(super) struct Receipts {
    chain: ChainStore,
    /// A checkpoint after this many records.
    every: u64,
    signer: Option<Rc<Signer>>,
}

impl Receipts {
    /// The chain of `engine`, loaded from the configuration `config` (a new random id), or
    /// None when its bundle turns receipts off; an error when the VM has no randomness, no
    /// key and the bundle requires one, or when the bundle wants structured records and the
    /// host cannot declare their Struct.
    pub(super) fn new(
        config: &[u8],
        engine: &Engine,
        signer: Option<Rc<Signer>>,
    ) -> Result<Option<Receipts>, String> {
        if engine.settings.decision_records.structured {
            declare_record_struct()?;
        }
        let settings = &engine.settings.decision_records.receipts;
        if !settings.enabled {
            return Ok(None);
        }
        if settings.require_key && signer.is_none() {
            return Err(format!(
                "decisionRecords.receipts.requireKey is set and Envoy's environment has no {KEY_ENV}: give the VM a key of `mcp-access audit keygen` (docs/audit.md)"
            ));
        }
        let mut id = [0u8; 16];
        getrandom::getrandom(&mut id)
            .map_err(|e| format!("no randomness for the receipts' chain id: {e}"))?;
        Ok(Some(Receipts {
            chain: ChainStore::new(Chain::new(hex(&id), receipts::digest(config))),
            every: u64::from(settings.checkpoint_records.max(1)),
            signer,
        }))
    }

    /// The chain of a configuration just loaded ([`Receipts::new`]), the `old` one's last
    /// records checkpointed first; the checkpoint ticks set, and gauge `gauge`
    /// (`mcp_access.receipts.signed`) to 1 when the new chain's checkpoints are signed.
    pub(super) fn reloaded(
        old: Option<Rc<Receipts>>,
        config: &[u8],
        engine: &Engine,
        signer: Option<Rc<Signer>>,
        gauge: Option<u32>,
    ) -> Result<Option<Rc<Receipts>>, String> {
        if let Some(r) = old {
            r.checkpoint();
        }
        let new = Receipts::new(config, engine, signer)?;
        if let Some(id) = gauge {
            let signed = new.as_ref().is_some_and(|r| r.signer.is_some());
            abi::record_metric(id, u64::from(signed));
        }
        let seconds = engine.settings.decision_records.receipts.checkpoint_seconds;
        // 0: no ticks (and none from an earlier configuration).
        let period = std::time::Duration::from_secs(u64::from(seconds));
        let _ = proxy_wasm::hostcalls::set_tick_period(period);
        Ok(new.map(Rc::new))
    }

    /// The next record of the chain, as `write` writes it; a checkpoint after every
    /// `checkpointRecords` records.
    pub(super) fn seal(&self, write: impl FnOnce(Link<'_>) -> Unsealed) -> String {
        let record = self.chain.seal(write);
        if self.chain.with(|c| c.unchecked()) >= self.every {
            self.checkpoint();
        }
        record
    }

    /// Logs a checkpoint of the chain's head, when records came since the last one.
    pub(super) fn checkpoint(&self) {
        let signer = self.signer.as_deref();
        let Some(c) = self.chain.with(|chain| {
            (chain.unchecked() > 0).then(|| Signer::checkpoint(signer, chain, abi::now_ns()))
        }) else {
            return;
        };
        abi::log(
            LogLevel::Info,
            &format!("{CHECKPOINT_PREFIX}{}", c.to_json()),
        );
    }
}

/// The signing key of [`KEY_ENV`], None when it is unset (checkpoints then go unsigned, which
/// is logged); an error naming the variable when it holds no key.
pub(super) fn signer_from_env() -> Result<Option<Rc<Signer>>, String> {
    match std::env::var(KEY_ENV) {
        Ok(text) => match Signer::from_base64(&text) {
            Ok(s) => {
                abi::log(
                    LogLevel::Info,
                    &format!(
                        "mcp-access: receipts' checkpoints are signed with key {}",
                        s.id()
                    ),
                );
                Ok(Some(Rc::new(s)))
            }
            Err(e) => Err(format!(
                "{e}: set it to a key of `mcp-access audit keygen`, or unset it (docs/audit.md)"
            )),
        },
        Err(std::env::VarError::NotPresent) => {
            abi::log(
                LogLevel::Warn,
                &format!(
                    "mcp-access: no {KEY_ENV}: receipts' checkpoints are unsigned (edits and gaps show, forgeries do not; docs/audit.md)"
                ),
            );
            Ok(None)
        }
        Err(std::env::VarError::NotUnicode(_)) => Err(format!(
            "{KEY_ENV} is not UTF-8: set it to a key of `mcp-access audit keygen`"
        )),
    }
}

/// Filter state key of the record as a `google.protobuf.Struct`, where the bundle's
/// `decisionRecords.structured` asks for it (`%CEL(filter_state['wasm.mcp_access.record'].policy)%`).
pub(super) const RECORD_STRUCT_KEY: &str = "mcp_access.record";

/// Declares [`RECORD_STRUCT_KEY`] a `google.protobuf.Struct` for this configuration's streams
/// (Envoy's foreign function `declare_property`, on the root context: once per plugin
/// configuration). An error when the host refuses it (not Envoy, or an Envoy without it).
pub(super) fn declare_record_struct() -> Result<(), String> {
    extern "C" {
        fn proxy_call_foreign_function(
            name: *const u8,
            name_size: usize,
            args: *const u8,
            args_size: usize,
            results: *mut *mut u8,
            results_size: *mut usize,
        ) -> u32;
    }
    const OK: u32 = 0;
    const BAD_ARGUMENT: u32 = 2;
    let args = structured::declare_property(RECORD_STRUCT_KEY);
    let name = "declare_property";
    let (mut data, mut size) = (std::ptr::null_mut(), 0usize);
    let status = unsafe {
        proxy_call_foreign_function(
            name.as_ptr(),
            name.len(),
            args.as_ptr(),
            args.len(),
            &mut data,
            &mut size,
        )
    };
    if !data.is_null() {
        // Host memory from this module's allocator (declare_property returns nothing).
        drop(unsafe { Vec::from_raw_parts(data, size, size) });
    }
    match status {
        OK => Ok(()),
        // This root context declared it already: Envoy keeps the first declaration.
        BAD_ARGUMENT => Ok(()),
        s => Err(format!(
            "decisionRecords.structured: the host refused to declare filter state {RECORD_STRUCT_KEY} (declare_property status {s}); Envoy provides it: run the filter in Envoy or set structured to false"
        )),
    }
}

/// Sets the stream's record: filter state [`FILTER_STATE_KEY`], and [`RECORD_STRUCT_KEY`] as
/// a Struct where the bundle asks for it (an error log when the record is not one: never a
/// record the filter wrote).
pub(super) fn publish(engine: &Engine, record: &str) {
    abi::set_property(&[FILTER_STATE_KEY], record.as_bytes());
    if !engine.settings.decision_records.structured {
        return;
    }
    match structured::record_struct(record) {
        Ok(bytes) => abi::set_property(&[RECORD_STRUCT_KEY], &bytes),
        Err(e) => abi::log(
            LogLevel::Error,
            &format!("mcp-access: the decision record as a Struct: {e}"),
        ),
    }
}
