//! Compiles the C epoll echo server (c/epoll_echo.c) into the crate.

fn main() {
    println!("cargo:rerun-if-changed=c/epoll_echo.c");
    // cc takes the optimization level from the cargo profile (-O3 in release).
    cc::Build::new().file("c/epoll_echo.c").warnings(true).extra_warnings(true).compile("epoll_echo");
}
