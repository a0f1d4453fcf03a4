//! Helpers the tests of several modules share: MCP bodies built around a value, and a
//! seeded generator for the randomised tests.

/// Wraps a JSON value as the `arguments` of an MCP tools/call.
pub(crate) fn with_arg(value: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","arguments":{{"x":{value}}}}}}}"#
    )
}

/// Puts raw bytes inside a string value of an MCP tools/call.
pub(crate) fn in_string(raw: &[u8]) -> Vec<u8> {
    let mut body =
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"s":""#
            .to_vec();
    body.extend_from_slice(raw);
    body.extend_from_slice(br#""}}}"#);
    body
}

/// A small xorshift generator for the randomised tests.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub(crate) fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    pub(crate) fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}
