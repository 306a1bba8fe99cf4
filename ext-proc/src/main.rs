//! `mvp-ext-proc`: the control half of the mvp-envoy front door. Everything
//! lives in the library; see `lib.rs` for the map.

fn main() -> std::process::ExitCode {
    mvp_ext_proc::cli::main()
}
