//! The command-line reference, docs/cli-reference.md: generated from the clap definitions `wasp` parses its
//! arguments with, so the page says what the binary accepts; tests/docs.rs fails when the page is stale
//! (`WASP_UPDATE_DOCS=1 cargo test -p wasp --features sim --test docs` writes it again).

use clap::CommandFactory;

/// Every visible command's `--help`, the top-level one first, each subcommand after its parent.
pub fn markdown() -> String {
    let mut command = super::Cli::command();
    command.build();
    let mut page = String::from(
        "# Command-line reference\n\n\
         Generated from `wasp`'s own argument definitions (`host/src/cli/reference.rs`): each command's `--help`.\n\
         `wasp simulate`, `wasp sim` and `wasp policy test` need the `sim` feature, on by default. What the commands\n\
         are for, with examples: [cli.md](cli.md).\n",
    );
    write_command(&command, &mut page);
    page
}

fn write_command(command: &clap::Command, page: &mut String) {
    let name = command.get_bin_name().unwrap_or(command.get_name());
    let help = command.clone().render_long_help().to_string();
    page.push_str(&format!("\n## `{name}`\n\n```text\n{}\n```\n", help.trim_end()));
    for subcommand in command.get_subcommands().filter(|subcommand| !subcommand.is_hide_set() && subcommand.get_name() != "help") {
        write_command(subcommand, page);
    }
}
