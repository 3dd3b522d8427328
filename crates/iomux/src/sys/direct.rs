//! The `syscall` instruction itself, as rustix's linux_raw backend issues
//! it. glibc's wrappers for blocking calls (epoll_wait, poll, read, ...)
//! are pthread cancellation points and cost ~8 ns per call on top of the
//! ~100 ns kernel round trip; an event loop needs none of that.
#![allow(unsafe_code)]

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
compile_error!("iomux issues its syscalls directly and supports Linux on x86_64 only so far");

use std::io;

/// Issues syscall `nr` with up to six arguments; returns the kernel's raw
/// result (a negative errno on failure).
///
/// # Safety
/// The arguments must be valid for that syscall: every pointer must point
/// at memory of the size and mutability the kernel will use.
#[inline(always)]
pub unsafe fn syscall6(nr: libc::c_long, a1: usize, a2: usize, a3: usize, a4: usize, a5: usize, a6: usize) -> isize {
    let ret: isize;
    // SAFETY: the caller vouches for the arguments. The x86_64 syscall ABI
    // takes them in rdi, rsi, rdx, r10, r8, r9, returns in rax and clobbers
    // rcx and r11 (declared); sysret restores rflags from r11, so flags are
    // preserved, and the kernel uses its own stack.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") a1, in("rsi") a2, in("rdx") a3, in("r10") a4, in("r8") a5, in("r9") a6,
            lateout("rcx") _, lateout("r11") _,
            options(nostack, preserves_flags),
        );
    }
    ret
}

/// The kernel's `-errno` convention to a Result.
#[inline(always)]
pub fn result(ret: isize) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::from_raw_os_error(-ret as i32))
    } else {
        Ok(ret as usize)
    }
}

/// `syscall!(NR, a, b, ...)`: a direct syscall with up to six arguments,
/// each converted with `as usize`, as an `io::Result<usize>`.
macro_rules! syscall {
    ($nr:expr $(, $arg:expr)* $(,)?) => {{
        let a = [$($arg as usize),*];
        let mut args = [0usize; 6];
        args[..a.len()].copy_from_slice(&a);
        $crate::sys::direct::result($crate::sys::direct::syscall6(
            $nr, args[0], args[1], args[2], args[3], args[4], args[5],
        ))
    }};
}
pub(crate) use syscall;
