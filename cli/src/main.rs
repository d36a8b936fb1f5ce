fn main() -> std::process::ExitCode {
    conveyor_cli::main()
}
