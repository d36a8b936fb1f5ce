// glibc's allocator took about a quarter of the gateway's CPU under load (malloc, free and their
// consolidation, in `perf`); mimalloc does the same work in a fraction of that.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    conveyor_cli::main()
}
