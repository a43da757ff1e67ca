//! The `wasp` binary.

#[cfg(feature = "jemalloc")]
wasp::binary_allocator!();

fn main() -> std::process::ExitCode {
    wasp::cli::main()
}
