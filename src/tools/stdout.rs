//! What the command-line tools print on stdout, written so that a closed stdout ends the
//! command quietly: `floe channel describe --json | head` must not panic when `head` exits.
//!
//! Rust ignores SIGPIPE, so a write to a pipe whose reader is gone fails with `BrokenPipe`
//! (`println!` panics on it, with a backtrace). Here it exits the process with status 141 — what
//! a shell reports for a command killed by SIGPIPE, as C tools are — and prints nothing more.
//! Any other write error (a full disk) is reported on stderr with exit status 74 (`EX_IOERR`).

use std::io::Write;

/// Exit status after the reader of stdout went away: 128 + SIGPIPE (13).
pub const CLOSED_STDOUT_EXIT: i32 = 141;
/// Exit status when stdout cannot be written for another reason (`EX_IOERR`, sysexits.h).
const WRITE_ERROR_EXIT: i32 = 74;

/// Writes `text` to stdout as is and flushes it; a closed stdout ends the process (see the
/// module's doc).
pub fn print(text: impl AsRef<str>) {
    let mut out = std::io::stdout().lock();
    let written = out
        .write_all(text.as_ref().as_bytes())
        .and_then(|()| out.flush());
    if let Err(e) = written {
        exit_on_write_error(&e);
    }
}

/// Writes `text` and a newline to stdout (see [`print`]).
pub fn println(text: impl AsRef<str>) {
    let text = text.as_ref();
    let mut line = String::with_capacity(text.len() + 1);
    line.push_str(text);
    line.push('\n');
    print(line);
}

/// Ends the process after a failed write to stdout: quietly with [`CLOSED_STDOUT_EXIT`] when
/// the reader is gone, otherwise with the error on stderr and exit status 74.
pub fn exit_on_write_error(e: &std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(CLOSED_STDOUT_EXIT);
    }
    eprintln!("cannot write to stdout: {e}");
    std::process::exit(WRITE_ERROR_EXIT)
}
