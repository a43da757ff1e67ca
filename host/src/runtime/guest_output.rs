//! A guest's stdout and stderr, forwarded line by line to the host's log with the policy's name, under a rate
//! limit so that a chatty or hostile policy cannot flood the log.

use bytes::Bytes;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

const MAX_LINE: usize = 1024;
/// Lines allowed in a burst, and per second after it.
const BURST_LINES: f64 = 50.0;
const LINES_PER_SECOND: f64 = 10.0;

#[derive(Clone)]
pub struct GuestOutput {
    sink: Arc<Mutex<LineSink>>,
}

struct LineSink {
    policy: Arc<str>,
    stream: &'static str,
    partial: Vec<u8>,
    tokens: f64,
    refilled_at: Instant,
    suppressed: u64,
}

impl GuestOutput {
    pub fn new(policy: Arc<str>, stream: &'static str) -> Self {
        GuestOutput {
            sink: Arc::new(Mutex::new(LineSink { policy, stream, partial: Vec::new(), tokens: BURST_LINES, refilled_at: Instant::now(), suppressed: 0 })),
        }
    }

    fn write_bytes(&self, bytes: &[u8]) {
        self.sink.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).write(bytes);
    }
}

impl LineSink {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            if byte == b'\n' {
                self.emit();
            } else if self.partial.len() < MAX_LINE {
                self.partial.push(byte);
            }
        }
    }

    fn emit(&mut self) {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.refilled_at).as_secs_f64() * LINES_PER_SECOND).min(BURST_LINES);
        self.refilled_at = now;
        let line = String::from_utf8_lossy(&self.partial).into_owned();
        self.partial.clear();
        if self.tokens < 1.0 {
            self.suppressed += 1;
            return;
        }
        self.tokens -= 1.0;
        if self.suppressed > 0 {
            tracing::warn!(policy = %self.policy, stream = self.stream, suppressed = self.suppressed, "guest output rate-limited");
            self.suppressed = 0;
        }
        tracing::info!(policy = %self.policy, stream = self.stream, "{line}");
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.write_bytes(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for GuestOutput {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.write_bytes(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_split_truncated_and_rate_limited() {
        let output = GuestOutput::new("p".into(), "stdout");
        output.write_bytes(b"hello ");
        output.write_bytes(b"world\nsecond");
        {
            let sink = output.sink.lock().unwrap();
            assert_eq!(sink.partial, b"second");
            assert_eq!(sink.tokens.round(), BURST_LINES - 1.0);
        }
        output.write_bytes(&vec![b'x'; 5000]);
        assert_eq!(output.sink.lock().unwrap().partial.len(), MAX_LINE);
        output.write_bytes(&b"\n".repeat(200));
        assert!(output.sink.lock().unwrap().suppressed >= 140, "a flood is cut to the burst");
    }
}
