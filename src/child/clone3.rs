//! COMMAND's first process made inside the job's cgroup (`clone3` with
//! `CLONE_INTO_CGROUP`, Linux 5.7), rather than moved there by a write
//! to `cgroup.procs` before its exec.
//!
//! A move takes the kernel's cgroup threadgroup lock for writing, which
//! waits for an RCU grace period when no other move happened lately:
//! usually 0.3 ms, but 10-30 ms in more than one start in twenty on our
//! 2-core VM (docs/benchmarks.md, "The cgroup join's tail"). A process
//! made in its cgroup takes no such lock.
//!
//! `clone3` has no libc wrapper that runs a function on a new stack, as
//! `clone` has: the child comes back from the system call on the stack
//! it was given, where no Rust frame is, so the call and the child's
//! first steps (call the entry point, exit with what it returns) are a
//! few instructions of assembly, on x86_64 only. Elsewhere, and wherever
//! the call is refused (a kernel before 5.7 says `E2BIG` or `ENOSYS`, a
//! seccomp filter `ENOSYS` or `EPERM`, qemu-user `ENOSYS`), the caller
//! clones as before and the child joins by the write.

use std::ffi::c_int;

use nix::libc;

/// `struct clone_args` as of Linux 5.7 (`CLONE_ARGS_SIZE_VER2`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// Not in every libc crate target's constants.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Like `libc::clone(entry, stack_top, flags | SIGCHLD, arg)` (`flags`:
/// `CLONE_VM`, maybe `CLONE_VFORK`, no signal), the child made in the
/// cgroup `cgroup_dir` (an open directory of cgroup2). Returns the
/// child's pid, or -1 with `errno` set: then no child was made.
///
/// # Safety
/// As `libc::clone`: `stack_top` is the 16-byte aligned top of `stack_len`
/// bytes that outlive the child's use of them, and `entry` never unwinds.
/// Only system calls before the call (we may be a forked child).
pub unsafe fn clone_into(
    entry: extern "C" fn(*mut libc::c_void) -> c_int,
    stack_top: *mut libc::c_void,
    stack_len: usize,
    flags: c_int,
    arg: *mut libc::c_void,
    cgroup_dir: c_int,
) -> c_int {
    let (Ok(flags), Ok(cgroup)) = (u64::try_from(flags), u64::try_from(cgroup_dir)) else {
        return refused(libc::EINVAL);
    };
    let top = stack_top as u64;
    let args = CloneArgs {
        flags: flags | CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        stack: top - stack_len as u64,
        stack_size: stack_len as u64,
        cgroup,
        ..CloneArgs::default()
    };
    let ret = raw(&args, entry, arg);
    if ret < 0 {
        return refused(c_int::try_from(-ret).unwrap_or(libc::EINVAL));
    }
    c_int::try_from(ret).unwrap_or(-1)
}

/// -1 with `errno` set to `e`.
unsafe fn refused(e: c_int) -> c_int {
    *libc::__errno_location() = e;
    -1
}

/// The system call itself; the child calls `entry(arg)` on its new stack
/// and exits with what it returns. Returns the kernel's answer: the
/// child's pid, or minus an `errno`.
#[cfg(target_arch = "x86_64")]
unsafe fn raw(
    args: &CloneArgs,
    entry: extern "C" fn(*mut libc::c_void) -> c_int,
    arg: *mut libc::c_void,
) -> i64 {
    let ret: i64;
    // The child's rsp is `stack + stack_size` (16-byte aligned), so the
    // `call` leaves it as the ABI wants at the entry point's first
    // instruction; rbp is cleared so that no unwinder walks our frames.
    std::arch::asm!(
        "syscall",
        "test rax, rax",
        "jnz 2f",
        "xor ebp, ebp",
        "mov rdi, r12",
        "call r13",
        "mov edi, eax",
        "mov eax, 60", // exit
        "syscall",
        "ud2",
        "2:",
        inlateout("rax") libc::SYS_clone3 => ret,
        in("rdi") std::ptr::from_ref(args),
        in("rsi") std::mem::size_of::<CloneArgs>(),
        in("r12") arg,
        in("r13") entry,
        lateout("rcx") _,
        lateout("r11") _,
    );
    ret
}

/// Elsewhere the caller clones as before. aarch64 (the other release)
/// too: its few instructions could not be run here (qemu-user refuses
/// `clone3`), and none is shipped untried.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn raw(
    _: &CloneArgs,
    _: extern "C" fn(*mut libc::c_void) -> c_int,
    _: *mut libc::c_void,
) -> i64 {
    -i64::from(libc::ENOSYS)
}
