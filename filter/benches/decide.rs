//! Criterion benchmarks of parsing and deciding (filled in by the performance work).
use criterion::{criterion_group, criterion_main, Criterion};

fn parse(c: &mut Criterion) {
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}"#;
    let limits = mcp_access_filter::mcp::ParseLimits::default();
    c.bench_function("parse tools/call", |b| {
        b.iter(|| mcp_access_filter::mcp::parse_message(std::hint::black_box(body), &limits))
    });
}

criterion_group!(benches, parse);
criterion_main!(benches);
