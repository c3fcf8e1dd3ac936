fn main() -> std::process::ExitCode {
    mcpsim::cli::main()
}
