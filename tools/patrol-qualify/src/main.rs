fn main() -> std::process::ExitCode {
    patrol_qualify::cli::main()
}
