//! The `wasp` binary.

#[cfg(feature = "jemalloc")]
wasp_allocator::binary_allocator!();

fn main() -> std::process::ExitCode {
    wasp::cli::main()
}
