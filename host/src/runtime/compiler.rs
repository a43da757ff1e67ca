//! Turning a component into native code: the artifact the serving engine deserializes. A host that serves
//! compiles in a child process of its own binary (`wasp compile-policy`) under a memory and a time limit: a
//! component made to keep cranelift busy for minutes and gigabytes (a 13.6 MB file of deeply folded constants in
//! functions nobody calls took 25 s and 1.3 GB) then costs that child, which is killed, and never the host
//! (the child asks the kernel to kill it first when the pod is short of memory). The tests' and the CLI's
//! in-process compiler has no limit but the file size.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use wasmtime::{Config, Engine};

/// What one isolated compile may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileLimits {
    /// Memory of the compiling child (its `RLIMIT_DATA`: heap and private writable mappings).
    pub memory_bytes: u64,
    /// CPU time of the child, its threads together (`RLIMIT_CPU`). The wall clock allows three times as much
    /// (reloads compile at low priority on a busy machine); a compile past that is refused this once only.
    pub cpu_time: Duration,
}

impl Default for CompileLimits {
    /// The default policies compile in 0.1-0.5 s and under 100 MiB each; a component far past both is refused.
    fn default() -> CompileLimits {
        CompileLimits { memory_bytes: 512 << 20, cpu_time: Duration::from_secs(20) }
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
    /// The component is not valid, or the compiler failed on it.
    #[error("{0}")]
    Invalid(String),
    /// Past the memory or CPU limit, which the same bytes will be again: remembered with the limits.
    #[error("{0}")]
    OverLimit(String),
    /// Not the component's fault for certain (the child could not start, was killed from outside, or was starved
    /// of CPU past the wall clock): worth trying again later.
    #[error("{0}")]
    Unavailable(String),
}

const COMPILE_THREADS: &str = "2";

/// The biggest artifact a child may hand back: far above what a 16 MiB component compiles to.
const MAX_ARTIFACT_BYTES: u64 = 512 << 20;

impl Compiler {
    /// The artifact of `wasm`, made by an engine of `config` (the serving engine's configuration, so that the
    /// serving engine accepts it). An isolated compile's child builds that configuration itself
    /// ([`super::engine::engine_config`]).
    pub fn compile(&self, config: &Config, wasm: &[u8]) -> Result<Vec<u8>, CompileError> {
        match self {
            Compiler::InProcess => precompile(config, wasm),
            Compiler::Isolated { program, limits } => compile_in_child(program, *limits, wasm),
        }
    }

    /// Names the limits a refusal was reached under: a refusal holds for the same limits only.
    pub fn limits_tag(&self) -> String {
        match self {
            Compiler::InProcess => "unlimited".into(),
            Compiler::Isolated { limits, .. } => format!("{}m-{}s", limits.memory_bytes >> 20, limits.cpu_time.as_secs()),
        }
    }
}

/// A throwaway engine compiles and is dropped with its working memory (see the artifact cache).
fn precompile(config: &Config, wasm: &[u8]) -> Result<Vec<u8>, CompileError> {
    let engine = Engine::new(config).map_err(|error| CompileError::Unavailable(format!("creating a compiling engine: {error}")))?;
    engine.precompile_component(wasm).map_err(|error| CompileError::Invalid(format!("{error:#}")))
}

fn compile_in_child(program: &Path, limits: CompileLimits, wasm: &[u8]) -> Result<Vec<u8>, CompileError> {
    let cpu_seconds = limits.cpu_time.as_secs().max(1);
    let mut child = Command::new(program)
        .arg("compile-policy")
        .arg("--memory-bytes")
        .arg(limits.memory_bytes.to_string())
        .arg("--cpu-seconds")
        .arg(cpu_seconds.to_string())
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
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || -> std::io::Result<(Vec<u8>, u64)> {
        // Kept up to the limit, the rest read and counted: the child must not fail on a closed pipe.
        let mut artifact = Vec::new();
        (&mut stdout).take(MAX_ARTIFACT_BYTES + 1).read_to_end(&mut artifact)?;
        let rest = std::io::copy(&mut stdout, &mut std::io::sink())?;
        Ok((artifact, rest))
    });
    let stderr = child.stderr.take().expect("piped");
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.take(64 << 10).read_to_string(&mut text);
        text
    });
    let wall = limits.cpu_time * 3;
    let waited = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if started.elapsed() <= wall => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                break Err(CompileError::Unavailable(format!(
                    "compiling took longer than {} of wall time (a busy machine?): not this time",
                    humantime::format_duration(wall)
                )))
            }
            Err(error) => break Err(CompileError::Unavailable(format!("waiting for the compiler: {error}"))),
        }
    };
    let status = match waited {
        Ok(status) => status,
        Err(error) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(error);
        }
    };
    // The child has exited: its pipes are closed and the threads end.
    let _ = writer.join();
    let artifact = reader.join().unwrap_or_else(|_| Ok((Vec::new(), 0)));
    let stderr = errors.join().unwrap_or_default();
    let stderr = stderr.trim();
    let over = |what: String| Err(CompileError::OverLimit(format!("{what}: refused")));
    if status.success() {
        let (artifact, rest) = artifact.map_err(|error| CompileError::Unavailable(format!("reading the compiled artifact: {error}")))?;
        if rest > 0 || artifact.len() as u64 > MAX_ARTIFACT_BYTES {
            return over(format!("the compiled artifact is larger than {} MiB", MAX_ARTIFACT_BYTES >> 20));
        }
        return Ok(artifact);
    }
    if let Some(message) = stderr.strip_prefix(INVALID_PREFIX) {
        return Err(CompileError::Invalid(message.to_string()));
    }
    if stderr.starts_with("memory allocation of") {
        return over(format!("compiling needed more than {} MiB", limits.memory_bytes >> 20));
    }
    use std::os::unix::process::ExitStatusExt;
    match (status.signal(), status.code()) {
        (Some(libc::SIGXCPU), _) => over(format!("compiling used more than {}s of CPU", cpu_seconds)),
        // A panic in the compiler: the same bytes panic again.
        (None, Some(101)) => Err(CompileError::Invalid(format!("the compiler failed on it: {stderr}"))),
        (Some(signal), _) => Err(CompileError::Unavailable(format!("the compiler was ended by signal {signal}{}", said(stderr)))),
        (None, _) => Err(CompileError::Unavailable(format!("the compiler failed ({status}){}", said(stderr)))),
    }
}

fn said(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}

/// How the child says the component itself is at fault, as opposed to its own failure.
const INVALID_PREFIX: &str = "invalid component: ";

/// `wasp compile-policy`, the child's side: limits itself, reads a component on stdin, writes the artifact of
/// an engine configured as the serving one ([`super::engine::engine_config`]) on stdout.
pub fn compile_policy_child(memory_bytes: u64, cpu_seconds: u64) -> std::process::ExitCode {
    let failed = |message: String| {
        eprintln!("{message}");
        std::process::ExitCode::FAILURE
    };
    // The first the kernel kills when the pod is short of memory: the child, never the host beside it.
    let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
    let memory = libc::rlimit { rlim_cur: memory_bytes as libc::rlim_t, rlim_max: memory_bytes as libc::rlim_t };
    let cpu = libc::rlimit { rlim_cur: cpu_seconds as libc::rlim_t, rlim_max: cpu_seconds as libc::rlim_t + 1 };
    // SAFETY: setrlimit with valid resources and pointers to local rlimits.
    let limited = unsafe { libc::setrlimit(libc::RLIMIT_DATA, &memory) == 0 && libc::setrlimit(libc::RLIMIT_CPU, &cpu) == 0 };
    if !limited {
        return failed(format!("could not limit the compiler: {}", std::io::Error::last_os_error()));
    }
    let mut wasm = Vec::new();
    if let Err(error) = std::io::stdin().take(crate::registry::source::MAX_POLICY_BYTES + 1).read_to_end(&mut wasm) {
        return failed(format!("reading the component: {error}"));
    }
    match precompile(&super::engine::engine_config(), &wasm) {
        Ok(artifact) => match std::io::stdout().lock().write_all(&artifact) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(error) => failed(format!("writing the artifact: {error}")),
        },
        Err(CompileError::Invalid(message)) => failed(format!("{INVALID_PREFIX}{message}")),
        Err(error) => failed(error.to_string()),
    }
}
