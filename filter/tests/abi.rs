//! The ABI of the built module (`build/mcp_access_filter.wasm`, or `$MCP_ACCESS_WASM`): what Envoy
//! links it against and calls.
//!
//! The module must be valid WebAssembly 2.0 (what Envoy's V8 runs; no threads, memory64, GC or
//! exceptions), declare proxy-wasm ABI 0.2.1, export a memory and the callbacks the filter is driven
//! by with the ABI's signatures, and import nothing but proxy-wasm host functions and the WASI calls
//! that Envoy implements (proxy-wasm-cpp-host's `exports.h`), with the host's signatures. An import
//! Envoy does not provide fails the plugin at load time; a wrong signature fails the link.
//!
//! Small `wat` fixtures check that the checker itself catches each kind of violation.
//!
//! The built module is required when `CI` or `MCP_ACCESS_REQUIRE_WASM` is set (scripts/test builds it
//! first); elsewhere a missing module makes the test print why and pass.
#![cfg(not(target_arch = "wasm32"))]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::collections::BTreeMap;

use common::built_module;

use wasmparser::{
    CompositeInnerType, ExternalKind, Operator, Parser, Payload, TypeRef, ValType, Validator,
    WasmFeatures,
};

const I: ValType = ValType::I32;
const L: ValType = ValType::I64;

/// (name, params, results)
type Signature = (&'static str, &'static [ValType], &'static [ValType]);

/// Host functions of the proxy-wasm 0.2.1 ABI as Envoy registers them (module `env`).
const PROXY_HOST_FUNCTIONS: &[Signature] = &[
    ("proxy_log", &[I, I, I], &[I]),
    ("proxy_get_log_level", &[I], &[I]),
    ("proxy_get_status", &[I, I, I], &[I]),
    ("proxy_get_configuration", &[I, I], &[I]),
    ("proxy_get_property", &[I, I, I, I], &[I]),
    ("proxy_set_property", &[I, I, I, I], &[I]),
    ("proxy_continue_request", &[], &[I]),
    ("proxy_continue_response", &[], &[I]),
    ("proxy_continue_stream", &[I], &[I]),
    ("proxy_close_stream", &[I], &[I]),
    ("proxy_send_local_response", &[I, I, I, I, I, I, I, I], &[I]),
    ("proxy_clear_route_cache", &[], &[I]),
    ("proxy_get_shared_data", &[I, I, I, I, I], &[I]),
    ("proxy_set_shared_data", &[I, I, I, I, I], &[I]),
    ("proxy_register_shared_queue", &[I, I, I], &[I]),
    ("proxy_resolve_shared_queue", &[I, I, I, I, I], &[I]),
    ("proxy_dequeue_shared_queue", &[I, I, I], &[I]),
    ("proxy_enqueue_shared_queue", &[I, I, I], &[I]),
    ("proxy_get_buffer_bytes", &[I, I, I, I, I], &[I]),
    ("proxy_get_buffer_status", &[I, I, I], &[I]),
    ("proxy_set_buffer_bytes", &[I, I, I, I, I], &[I]),
    ("proxy_add_header_map_value", &[I, I, I, I, I], &[I]),
    ("proxy_get_header_map_value", &[I, I, I, I, I], &[I]),
    ("proxy_replace_header_map_value", &[I, I, I, I, I], &[I]),
    ("proxy_remove_header_map_value", &[I, I, I], &[I]),
    ("proxy_get_header_map_pairs", &[I, I, I], &[I]),
    ("proxy_set_header_map_pairs", &[I, I, I], &[I]),
    ("proxy_get_header_map_size", &[I, I], &[I]),
    ("proxy_http_call", &[I, I, I, I, I, I, I, I, I, I], &[I]),
    (
        "proxy_grpc_call",
        &[I, I, I, I, I, I, I, I, I, I, I, I],
        &[I],
    ),
    ("proxy_grpc_stream", &[I, I, I, I, I, I, I, I, I], &[I]),
    ("proxy_grpc_cancel", &[I], &[I]),
    ("proxy_grpc_close", &[I], &[I]),
    ("proxy_grpc_send", &[I, I, I, I], &[I]),
    ("proxy_set_tick_period_milliseconds", &[I], &[I]),
    ("proxy_get_current_time_nanoseconds", &[I], &[I]),
    ("proxy_define_metric", &[I, I, I, I], &[I]),
    ("proxy_increment_metric", &[I, L], &[I]),
    ("proxy_record_metric", &[I, L], &[I]),
    ("proxy_get_metric", &[I, I], &[I]),
    ("proxy_set_effective_context", &[I], &[I]),
    ("proxy_done", &[], &[I]),
    ("proxy_call_foreign_function", &[I, I, I, I, I, I], &[I]),
];

/// The WASI calls Envoy implements (module `wasi_snapshot_preview1`); anything else is missing.
const WASI_FUNCTIONS: &[Signature] = &[
    ("fd_write", &[I, I, I, I], &[I]),
    ("fd_read", &[I, I, I, I], &[I]),
    ("fd_seek", &[I, L, I, I], &[I]),
    ("fd_close", &[I], &[I]),
    ("fd_fdstat_get", &[I, I], &[I]),
    ("environ_get", &[I, I], &[I]),
    ("environ_sizes_get", &[I, I], &[I]),
    ("args_get", &[I, I], &[I]),
    ("args_sizes_get", &[I, I], &[I]),
    ("clock_time_get", &[I, L, I], &[I]),
    ("random_get", &[I, I], &[I]),
    ("proc_exit", &[I], &[]),
    ("path_open", &[I, I, I, I, I, L, L, I, I], &[I]),
    ("fd_prestat_get", &[I, I], &[I]),
    ("fd_prestat_dir_name", &[I, I, I], &[I]),
];

/// Functions the filter must export: the ABI marker, the WASI reactor initializer, the allocator
/// Envoy writes into, and every callback an HTTP filter with callouts is driven by.
const REQUIRED_EXPORTS: &[Signature] = &[
    ("proxy_abi_version_0_2_1", &[], &[]),
    ("_initialize", &[], &[]),
    ("proxy_on_memory_allocate", &[I], &[I]),
    ("proxy_on_context_create", &[I, I], &[]),
    ("proxy_on_vm_start", &[I, I], &[I]),
    ("proxy_on_configure", &[I, I], &[I]),
    ("proxy_on_request_headers", &[I, I, I], &[I]),
    ("proxy_on_request_body", &[I, I, I], &[I]),
    ("proxy_on_request_trailers", &[I, I], &[I]),
    ("proxy_on_http_call_response", &[I, I, I, I, I], &[]),
    ("proxy_on_delete", &[I], &[]),
];

/// Callbacks the filter must not export (scripts/build removes them): Envoy calls an exported
/// callback whether or not the filter has work for it.
fn unwanted_exports() -> impl Iterator<Item = &'static str> {
    include_str!("../unused-callbacks.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// What an import or export is, with function signatures resolved.
#[derive(Debug, Clone, PartialEq)]
enum Item {
    Func(Vec<ValType>, Vec<ValType>),
    Memory,
    Table,
    Global,
    Tag,
}

#[derive(Debug, Default)]
struct ModuleAbi {
    imports: Vec<(String, String, Item)>,
    exports: BTreeMap<String, Item>,
}

/// Validates `bytes` as WebAssembly 2.0 and lists its imports and exports.
fn inspect(bytes: &[u8]) -> Result<ModuleAbi, String> {
    Validator::new_with_features(WasmFeatures::WASM2)
        .validate_all(bytes)
        .map_err(|e| format!("not valid WebAssembly 2.0 (as Envoy's V8 runs it): {e}"))?;

    let mut types: Vec<Option<(Vec<ValType>, Vec<ValType>)>> = Vec::new();
    let mut funcs: Vec<u32> = Vec::new(); // function index -> type index (imports first)
    let mut abi = ModuleAbi::default();
    let mut raw_exports = Vec::new();
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(|e| e.to_string())? {
            Payload::TypeSection(reader) => {
                for group in reader {
                    for sub in group.map_err(|e| e.to_string())?.into_types() {
                        types.push(match sub.composite_type.inner {
                            CompositeInnerType::Func(f) => {
                                Some((f.params().to_vec(), f.results().to_vec()))
                            }
                            _ => None,
                        });
                    }
                }
            }
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let import = import.map_err(|e| e.to_string())?;
                    let item = match import.ty {
                        TypeRef::Func(t) | TypeRef::FuncExact(t) => {
                            funcs.push(t);
                            func_item(&types, t)?
                        }
                        TypeRef::Memory(_) => Item::Memory,
                        TypeRef::Table(_) => Item::Table,
                        TypeRef::Global(_) => Item::Global,
                        TypeRef::Tag(_) => Item::Tag,
                    };
                    abi.imports
                        .push((import.module.to_string(), import.name.to_string(), item));
                }
            }
            Payload::FunctionSection(reader) => {
                for t in reader {
                    funcs.push(t.map_err(|e| e.to_string())?);
                }
            }
            Payload::ExportSection(reader) => {
                for export in reader {
                    let export = export.map_err(|e| e.to_string())?;
                    raw_exports.push((export.name.to_string(), export.kind, export.index));
                }
            }
            _ => {}
        }
    }
    for (name, kind, index) in raw_exports {
        let item = match kind {
            ExternalKind::Func | ExternalKind::FuncExact => {
                let t = *funcs.get(index as usize).ok_or_else(|| {
                    format!("export {name} names function {index}, which does not exist")
                })?;
                func_item(&types, t)?
            }
            ExternalKind::Memory => Item::Memory,
            ExternalKind::Table => Item::Table,
            ExternalKind::Global => Item::Global,
            ExternalKind::Tag => Item::Tag,
        };
        abi.exports.insert(name, item);
    }
    Ok(abi)
}

fn func_item(types: &[Option<(Vec<ValType>, Vec<ValType>)>], t: u32) -> Result<Item, String> {
    match types.get(t as usize) {
        Some(Some((params, results))) => Ok(Item::Func(params.clone(), results.clone())),
        _ => Err(format!("type {t} is not a function type")),
    }
}

fn show(item: &Item) -> String {
    match item {
        Item::Func(p, r) => format!("func {p:?} -> {r:?}"),
        other => format!("{other:?}"),
    }
}

fn expected(sig: &Signature) -> Item {
    Item::Func(sig.1.to_vec(), sig.2.to_vec())
}

/// Every way the module departs from what Envoy provides and expects, one sentence each.
fn abi_problems(bytes: &[u8]) -> Vec<String> {
    let abi = match inspect(bytes) {
        Ok(abi) => abi,
        Err(e) => return vec![e],
    };
    let mut problems = Vec::new();
    for (module, name, item) in &abi.imports {
        let table = match module.as_str() {
            "env" => PROXY_HOST_FUNCTIONS,
            "wasi_snapshot_preview1" => WASI_FUNCTIONS,
            _ => {
                problems.push(format!(
                    "imports {module}.{name}: Envoy provides only the modules env (proxy-wasm) and wasi_snapshot_preview1"
                ));
                continue;
            }
        };
        match table.iter().find(|s| s.0 == name) {
            None => problems.push(format!(
                "imports {module}.{name} ({}), which Envoy does not provide",
                show(item)
            )),
            Some(sig) if expected(sig) != *item => problems.push(format!(
                "imports {module}.{name} as {}, but Envoy's is {}",
                show(item),
                show(&expected(sig))
            )),
            Some(_) => {}
        }
    }
    match abi.exports.get("memory") {
        Some(Item::Memory) => {}
        other => problems.push(format!(
            "must export its memory as \"memory\" (found {other:?})"
        )),
    }
    for sig in REQUIRED_EXPORTS {
        match abi.exports.get(sig.0) {
            None => problems.push(format!("does not export {}", sig.0)),
            Some(item) if *item != expected(sig) => problems.push(format!(
                "exports {} as {}, but the ABI calls it as {}",
                sig.0,
                show(item),
                show(&expected(sig))
            )),
            Some(_) => {}
        }
    }
    for name in unwanted_exports() {
        if abi.exports.contains_key(name) {
            problems.push(format!(
                "exports {name}, a callback the filter has no work for"
            ));
        }
    }
    let versions: Vec<&String> = abi
        .exports
        .keys()
        .filter(|k| k.starts_with("proxy_abi_version_"))
        .collect();
    if versions.len() > 1 {
        problems.push(format!(
            "declares several ABI versions {versions:?}; Envoy needs exactly one"
        ));
    }
    problems
}

// ---------------------------------------------------------------------------
// The built module

#[test]
fn built_module_links_against_what_envoy_provides() {
    let Some((path, bytes)) = built_module() else {
        return;
    };
    let problems = abi_problems(&bytes);
    assert!(
        problems.is_empty(),
        "{} breaks the proxy-wasm ABI Envoy expects:\n  {}",
        path.display(),
        problems.join("\n  ")
    );
    let abi = inspect(&bytes).unwrap();
    // The imports the filter is known to need are really there (the lists above are not vacuous).
    for needed in [
        "proxy_get_buffer_bytes",
        "proxy_send_local_response",
        "proxy_http_call",
        "proxy_continue_stream",
    ] {
        assert!(
            abi.imports
                .iter()
                .any(|(m, n, _)| m == "env" && n == needed),
            "{needed} is not imported"
        );
    }
}

#[test]
fn built_module_is_optimized_and_stripped() {
    let Some((path, bytes)) = built_module() else {
        return;
    };
    let mut custom = Vec::new();
    for payload in Parser::new(0).parse_all(&bytes) {
        if let Payload::CustomSection(c) = payload.unwrap() {
            custom.push(c.name().to_string());
        }
    }
    for stripped in ["name", "producers", ".debug_info", ".debug_line"] {
        assert!(
            !custom.iter().any(|c| c == stripped),
            "{} still has the custom section {stripped} (sections: {custom:?}); scripts/build strips it",
            path.display()
        );
    }
}

/// The JSON reader's string scanner is compiled with Wasm SIMD (scripts/build and
/// .cargo/config.toml pass `+simd128`): its 16-byte blocks end in `i8x16.bitmask`. Without
/// it the module would fall back to the scalar scanner, and `host.rs`'s comparison of the
/// module with the native reader would compare the scalar code with itself.
#[test]
fn built_module_scans_strings_with_simd() {
    let Some((path, bytes)) = built_module() else {
        return;
    };
    let mut bitmasks = 0;
    for payload in Parser::new(0).parse_all(&bytes) {
        if let Payload::CodeSectionEntry(body) = payload.unwrap() {
            let mut ops = body.get_operators_reader().unwrap();
            while !ops.eof() {
                if matches!(ops.read().unwrap(), Operator::I8x16Bitmask) {
                    bitmasks += 1;
                }
            }
        }
    }
    assert!(
        bitmasks > 0,
        "{} has no i8x16.bitmask: built without +simd128?",
        path.display()
    );
}

// ---------------------------------------------------------------------------
// The checker on small fixtures

/// A minimal module that satisfies the ABI, with `extra` spliced in.
fn fixture(extra: &str, skip_export: Option<&str>) -> Vec<u8> {
    let mut exports = String::new();
    for (i, (name, params, results)) in REQUIRED_EXPORTS.iter().enumerate() {
        if Some(*name) == skip_export {
            continue;
        }
        let p: Vec<&str> = params.iter().map(|_| "i32").collect();
        let mut body = String::new();
        for _ in *results {
            body.push_str("i32.const 0 ");
        }
        let params = if p.is_empty() {
            String::new()
        } else {
            format!("(param {})", p.join(" "))
        };
        let results = if results.is_empty() {
            String::new()
        } else {
            "(result i32)".to_string()
        };
        exports.push_str(&format!(
            "(func $f{i} (export \"{name}\") {params} {results} {body})\n"
        ));
    }
    let text = format!(
        r#"(module
             (import "env" "proxy_log" (func (param i32 i32 i32) (result i32)))
             (import "env" "proxy_increment_metric" (func (param i32 i64) (result i32)))
             (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))
             (import "wasi_snapshot_preview1" "proc_exit" (func (param i32)))
             {extra}
             (memory (export "memory") 1)
             {exports})"#
    );
    wat::parse_str(&text).unwrap_or_else(|e| panic!("fixture does not assemble: {e}\n{text}"))
}

#[test]
fn checker_accepts_a_minimal_conforming_module() {
    assert_eq!(abi_problems(&fixture("", None)), Vec::<String>::new());
}

#[test]
fn checker_rejects_imports_envoy_does_not_provide() {
    let cases = [
        (
            r#"(import "env" "proxy_get_secret" (func (param i32) (result i32)))"#,
            "env.proxy_get_secret",
        ),
        (
            r#"(import "wasi_snapshot_preview1" "sock_accept" (func (param i32 i32 i32) (result i32)))"#,
            "wasi_snapshot_preview1.sock_accept",
        ),
        (
            r#"(import "wasi_snapshot_preview1" "poll_oneoff" (func (param i32 i32 i32 i32) (result i32)))"#,
            "wasi_snapshot_preview1.poll_oneoff",
        ),
        (
            r#"(import "wasi:cli/stdout@0.2.0" "get-stdout" (func (result i32)))"#,
            "wasi:cli/stdout@0.2.0.get-stdout",
        ),
        (
            r#"(import "env" "__stack_pointer" (global (mut i32)))"#,
            "env.__stack_pointer",
        ),
    ];
    for (import, name) in cases {
        let problems = abi_problems(&fixture(import, None));
        assert!(
            problems.iter().any(|p| p.contains(name)),
            "{import}: {problems:?}"
        );
    }
}

#[test]
fn checker_rejects_wrong_import_signatures() {
    // proxy_increment_metric takes an i64 offset; proc_exit returns nothing.
    let problems = abi_problems(&fixture(
        r#"(import "env" "proxy_record_metric" (func (param i32 i32) (result i32)))
           (import "wasi_snapshot_preview1" "clock_time_get" (func (param i32 i32 i32) (result i32)))"#,
        None,
    ));
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("proxy_record_metric"), "{problems:?}");
    assert!(problems[1].contains("clock_time_get"), "{problems:?}");
}

#[test]
fn checker_rejects_missing_or_mistyped_exports() {
    for missing in [
        "proxy_abi_version_0_2_1",
        "proxy_on_request_body",
        "_initialize",
    ] {
        let problems = abi_problems(&fixture("", Some(missing)));
        assert_eq!(
            problems,
            vec![format!("does not export {missing}")],
            "{missing}"
        );
    }
    let unwanted: Vec<&str> = unwanted_exports().collect();
    assert!(unwanted.contains(&"proxy_on_log"), "{unwanted:?}");
    for (name, _, _) in REQUIRED_EXPORTS {
        assert!(!unwanted.contains(name), "{name} is required and unwanted");
    }
    let problems = abi_problems(&fixture(
        r#"(func (export "proxy_on_log") (param i32))"#,
        None,
    ));
    assert_eq!(
        problems,
        vec!["exports proxy_on_log, a callback the filter has no work for".to_string()]
    );
    let problems = abi_problems(&fixture(
        r#"(func (export "proxy_abi_version_0_1_0"))"#,
        None,
    ));
    assert!(
        problems.iter().any(|p| p.contains("several ABI versions")),
        "{problems:?}"
    );
    // A callback with the wrong arity is reported with both signatures.
    let bytes = fixture(
        r#"(func (export "proxy_on_request_headers") (param i32 i32) (result i32) i32.const 0)"#,
        Some("proxy_on_request_headers"),
    );
    let problems = abi_problems(&bytes);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("exports proxy_on_request_headers as func [I32, I32]"),
        "{problems:?}"
    );
}

#[test]
fn checker_rejects_features_v8_does_not_run_here() {
    // Shared memory (threads) is outside WebAssembly 2.0.
    let bytes = wat::parse_str(r#"(module (memory 1 1 shared))"#).unwrap();
    let problems = abi_problems(&bytes);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("not valid WebAssembly 2.0"),
        "{problems:?}"
    );
}
