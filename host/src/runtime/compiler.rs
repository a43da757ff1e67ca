//! Turning a component into native code: the artifact the serving engine deserializes. A host that serves
//! compiles in a child process of its own binary (`wasp compile-policy`) under a memory and a time limit: a
//! component made to keep cranelift busy for minutes and gigabytes (a 13.6 MB file of deeply folded constants in
//! functions nobody calls took 25 s and 1.3 GB) then costs that child, which is killed, and never the host. The
//! tests' and the CLI's in-process compiler has no limit but the file size.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use wasmtime::{Config, Engine};

/// What one isolated compile may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileLimits {
    /// Memory of the compiling child (its `RLIMIT_DATA`: heap and private writable mappings).
    pub memory_bytes: u64,
    /// Wall time; the child is killed past it (its CPU time is limited to the same).
    pub time: Duration,
}

impl Default for CompileLimits {
    /// The default policies compile in 0.1-0.5 s and under 100 MiB each; a component far past both is refused.
    fn default() -> CompileLimits {
        CompileLimits { memory_bytes: 512 << 20, time: Duration::from_secs(20) }
    }
}

/// Where compiles run.
#[derive(Debug, Clone)]
pub enum Compiler {
    /// In this process, without limits (tests, `wasp policy`, `wasp simulate`).
    InProcess,
    /// In a child process: `program compile-policy`, the component on its stdin, the artifact on its stdout.
    Isolated { program: PathBuf, limits: CompileLimits },
}

/// A compile that did not produce an artifact.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The component is not valid, or the compiler refused it: the same bytes fail the same way.
    #[error("{0}")]
    Invalid(String),
    /// Past a limit: remembered by digest, never compiled again by this host.
    #[error("{0}")]
    OverLimit(String),
    /// The child could not be run (no process slots, say): worth trying again later.
    #[error("{0}")]
    Unavailable(String),
}

const COMPILE_THREADS: &str = "2";

/// The biggest artifact a child may hand back: far above what a 16 MiB component compiles to.
const MAX_ARTIFACT_BYTES: u64 = 512 << 20;

impl Compiler {
    /// The artifact of `wasm`, made by an engine of `config` (the serving engine's configuration, so that the
    /// serving engine accepts it).
    pub fn compile(&self, config: &Config, wasm: &[u8]) -> Result<Vec<u8>, CompileError> {
        match self {
            Compiler::InProcess => precompile(config, wasm),
            Compiler::Isolated { program, limits } => compile_in_child(program, *limits, wasm),
        }
    }
}

/// A throwaway engine compiles and is dropped with its working memory (see the artifact cache).
fn precompile(config: &Config, wasm: &[u8]) -> Result<Vec<u8>, CompileError> {
    let engine = Engine::new(config).map_err(|error| CompileError::Unavailable(format!("creating a compiling engine: {error}")))?;
    engine.precompile_component(wasm).map_err(|error| CompileError::Invalid(format!("{error:#}")))
}

fn compile_in_child(program: &PathBuf, limits: CompileLimits, wasm: &[u8]) -> Result<Vec<u8>, CompileError> {
    let mut child = Command::new(program)
        .arg("compile-policy")
        .arg("--memory-bytes")
        .arg(limits.memory_bytes.to_string())
        .arg("--cpu-seconds")
        .arg(limits.time.as_secs().max(1).to_string())
        // Two compiling threads whatever the machine: the memory limit covers each thread's working memory and
        // allocator arenas, so it must not grow with the core count.
        .env("RAYON_NUM_THREADS", COMPILE_THREADS)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| CompileError::Unavailable(format!("starting the compiler ({}): {error}", program.display())))?;
    let started = Instant::now();
    // Each pipe on a thread of its own: the child may fill stdout or stderr before it has read all of stdin.
    let mut stdin = child.stdin.take().expect("piped");
    let input = wasm.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut artifact = Vec::new();
        stdout.take(MAX_ARTIFACT_BYTES + 1).read_to_end(&mut artifact).map(|_| artifact)
    });
    let stderr = child.stderr.take().expect("piped");
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.take(64 << 10).read_to_string(&mut text);
        text
    });
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > limits.time => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(CompileError::OverLimit(format!("compiling took longer than {}: refused", humantime::format_duration(limits.time))));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(error) => return Err(CompileError::Unavailable(format!("waiting for the compiler: {error}"))),
        }
    };
    // The child has exited: its pipes are closed and the threads end.
    let _ = writer.join();
    let artifact = reader.join().unwrap_or_else(|_| Ok(Vec::new()));
    let stderr = errors.join().unwrap_or_default();
    let stderr = stderr.trim();
    if status.success() {
        let artifact = artifact.map_err(|error| CompileError::Unavailable(format!("reading the compiled artifact: {error}")))?;
        if artifact.len() as u64 > MAX_ARTIFACT_BYTES {
            return Err(CompileError::OverLimit(format!("the compiled artifact is larger than {} MiB: refused", MAX_ARTIFACT_BYTES >> 20)));
        }
        return Ok(artifact);
    }
    if stderr.contains("memory allocation of") || stderr.contains("out of memory") {
        return Err(CompileError::OverLimit(format!("compiling needed more than {} MiB: refused", limits.memory_bytes >> 20)));
    }
    use std::os::unix::process::ExitStatusExt;
    match status.signal() {
        // SIGXCPU: past the CPU limit. SIGKILL/SIGABRT/SIGSEGV without a message: the allocator or a stack gave
        // out under the memory limit.
        Some(libc::SIGXCPU) => Err(CompileError::OverLimit(format!("compiling took longer than {}: refused", humantime::format_duration(limits.time)))),
        Some(signal) => Err(CompileError::OverLimit(format!(
            "the compiler was ended by signal {signal} (limits: {} MiB, {}){}: refused",
            limits.memory_bytes >> 20,
            humantime::format_duration(limits.time),
            if stderr.is_empty() { String::new() } else { format!("; it said: {stderr}") }
        ))),
        None if stderr.starts_with(INVALID_PREFIX) => Err(CompileError::Invalid(stderr.trim_start_matches(INVALID_PREFIX).to_string())),
        None => Err(CompileError::Unavailable(format!("the compiler failed ({status}): {stderr}"))),
    }
}

/// How the child says the component itself is at fault, as opposed to its own failure.
const INVALID_PREFIX: &str = "invalid component: ";

/// `wasp compile-policy`, the child's side: limits itself, reads a component on stdin, writes the artifact of
/// an engine configured as the serving one ([`super::engine::engine_config`]) on stdout.
pub fn compile_policy_child(memory_bytes: u64, cpu_seconds: u64) -> std::process::ExitCode {
    // SAFETY: setrlimit with a valid resource and a pointer to a local rlimit.
    unsafe {
        let memory = libc::rlimit { rlim_cur: memory_bytes as libc::rlim_t, rlim_max: memory_bytes as libc::rlim_t };
        libc::setrlimit(libc::RLIMIT_DATA, &memory);
        let cpu = libc::rlimit { rlim_cur: cpu_seconds as libc::rlim_t, rlim_max: cpu_seconds as libc::rlim_t + 1 };
        libc::setrlimit(libc::RLIMIT_CPU, &cpu);
    }
    let mut wasm = Vec::new();
    if let Err(error) = std::io::stdin().take(crate::registry::source::MAX_POLICY_BYTES + 1).read_to_end(&mut wasm) {
        eprintln!("reading the component: {error}");
        return std::process::ExitCode::FAILURE;
    }
    match precompile(&super::engine::engine_config(), &wasm) {
        Ok(artifact) => match std::io::stdout().lock().write_all(&artifact) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("writing the artifact: {error}");
                std::process::ExitCode::FAILURE
            }
        },
        Err(CompileError::Invalid(message)) => {
            eprintln!("{INVALID_PREFIX}{message}");
            std::process::ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("{error}");
            std::process::ExitCode::FAILURE
        }
    }
}
