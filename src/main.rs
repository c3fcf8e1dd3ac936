/// The binary's allocator (the library leaves the choice to whoever embeds it). The simulator allocates and
/// frees many small strings and JSON trees per delivery; mimalloc runs measurably more schedules per
/// CPU-second than the system allocator (docs/exploring.md, "Performance").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    mcpsim::main()
}
