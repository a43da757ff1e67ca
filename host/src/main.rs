//! The `wasp` binary.

wasp::binary_allocator!();

fn main() -> std::process::ExitCode {
    wasp::cli::main()
}
