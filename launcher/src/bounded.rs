//! A helper program run with a deadline (`ssh -G`, `scontrol`, `kubectl`): its output once it
//! exits, or killed at the deadline. The programs here print little, so their pipes are read
//! after they exit.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Run `cmd` (no stdin, stdout and stderr captured) for at most `limit`.
pub fn output(cmd: &mut Command, limit: Duration) -> Result<Output, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", cmd.get_program().to_string_lossy()))?;
    let until = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no answer within {limit:?}"));
            }
        }
    }
    child.wait_with_output().map_err(|e| e.to_string())
}
