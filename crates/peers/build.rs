//! Compiles the C servers (c/epoll_echo.c, c/resp_floor.c, c/relay_floor.c,
//! c/pubsub_floor.c, c/http_floor.c; the floors share c/floor.h) into the
//! crate.

fn main() {
    println!("cargo:rerun-if-changed=c/epoll_echo.c");
    println!("cargo:rerun-if-changed=c/resp_floor.c");
    println!("cargo:rerun-if-changed=c/relay_floor.c");
    println!("cargo:rerun-if-changed=c/pubsub_floor.c");
    println!("cargo:rerun-if-changed=c/http_floor.c");
    println!("cargo:rerun-if-changed=c/floor.h");
    // cc takes the optimization level from the cargo profile (-O3 in release).
    cc::Build::new().file("c/epoll_echo.c").warnings(true).extra_warnings(true).compile("epoll_echo");
    cc::Build::new().file("c/resp_floor.c").warnings(true).extra_warnings(true).compile("resp_floor");
    cc::Build::new().file("c/relay_floor.c").warnings(true).extra_warnings(true).compile("relay_floor");
    cc::Build::new().file("c/pubsub_floor.c").warnings(true).extra_warnings(true).compile("pubsub_floor");
    cc::Build::new().file("c/http_floor.c").warnings(true).extra_warnings(true).compile("http_floor");
}
