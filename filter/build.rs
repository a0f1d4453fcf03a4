//! Records the commit the filter is built from (logged when it loads): `MCP_ACCESS_GIT_COMMIT`
//! if set (scripts/build sets it, so a copy of the sources without git builds the same module),
//! else `git rev-parse` of the sources, else "unknown".

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=MCP_ACCESS_GIT_COMMIT");
    let commit = match std::env::var("MCP_ACCESS_GIT_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => {
            // Rebuilt when the checkout moves to another commit.
            for path in ["HEAD", "logs/HEAD"] {
                if let Some(p) = git(&["rev-parse", "--git-path", path]) {
                    if std::path::Path::new(&p).exists() {
                        println!("cargo:rerun-if-changed={p}");
                    }
                }
            }
            git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into())
        }
    };
    println!("cargo:rustc-env=MCP_ACCESS_GIT_COMMIT={commit}");
}
