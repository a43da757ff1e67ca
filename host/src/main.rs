//! The `wasp` binary.

fn main() -> std::process::ExitCode {
    wasp::cli::main()
}
