//! Why a command could not finish, and the exit code it then ends with (docs/cli.md).

use std::fmt;

/// Exit code: input the API server would reject, or an error.
pub const EXIT_INVALID: u8 = 1;
/// Exit code: something was not accepted (without --allow-not-accepted).
pub const EXIT_NOT_ACCEPTED: u8 = 3;
/// Exit code: `validate` found references that lead nowhere (without --allow-dangling).
pub const EXIT_DANGLING: u8 = 4;
/// Exit code: `pin --check` found tools that differ from their pins.
pub const EXIT_DRIFT: u8 = 5;
/// Exit code: `replay` found decisions that flip (without --allow-flips).
pub const EXIT_FLIPS: u8 = 6;
/// Exit code: `test` found a case whose decision is not the expected one.
pub const EXIT_TEST_FAILED: u8 = 7;
/// Exit code: `audit verify` found records missing, altered or unreadable, or a bad checkpoint.
pub const EXIT_AUDIT_DAMAGED: u8 = 8;
/// Exit code: `audit verify` found the chains intact, but records no signed checkpoint covers yet.
pub const EXIT_AUDIT_UNSIGNED: u8 = 9;

/// An error a command reports on standard error before it exits with `code`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    pub code: u8,
    pub message: String,
}

impl CliError {
    /// An error of the input or of the run: exit 1.
    pub fn invalid(message: impl Into<String>) -> Self {
        CliError {
            code: EXIT_INVALID,
            message: message.into(),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// The other crates' errors are text: an error of the input (exit 1).
impl From<String> for CliError {
    fn from(message: String) -> Self {
        CliError::invalid(message)
    }
}

impl From<&str> for CliError {
    fn from(message: &str) -> Self {
        CliError::invalid(message)
    }
}

impl From<serde_json::Error> for CliError {
    fn from(e: serde_json::Error) -> Self {
        CliError::invalid(e.to_string())
    }
}
