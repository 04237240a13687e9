//! Letting go of our own binary's pages once a process has done the work
//! that needed them.
//!
//! Most of a holder's resident memory is the binary's code and read-only
//! data, mapped in 64 KiB pieces as it first ran (the kernel maps the
//! pages around each fault). A keeper, forked from redlock-run, maps
//! the pieces its own start touches, and then runs a loop of a few
//! pages for as long as COMMAND runs; redlock-run itself, once COMMAND
//! has run a while, needs only its supervision and refresh paths. The
//! pages stay in the page cache, shared by every process of the binary:
//! dropping them from a process's page tables (`MADV_DONTNEED` on a
//! read-only file mapping discards nothing) costs one fault per page it
//! touches again (the kernel maps 16 pages around each such fault).

use nix::libc::{self, c_int, c_void};

/// The binary's read-only `PT_LOAD` segments (code, constants), page
/// aligned: at most [`MAX`] of them. Copy: the keeper gets its own.
#[derive(Clone, Copy, Debug, Default)]
pub struct Segments {
    at: [(usize, usize); MAX],
    count: usize,
}

const MAX: usize = 4;

/// Our own binary's read-only segments (found once, from its program
/// headers in memory: no /proc needed).
pub fn segments() -> Segments {
    static FOUND: std::sync::OnceLock<Segments> = std::sync::OnceLock::new();
    *FOUND.get_or_init(|| {
        let mut found = Segments::default();
        // SAFETY: the callback only reads the headers the loader gives it.
        unsafe {
            libc::dl_iterate_phdr(Some(first_object), (&raw mut found).cast());
        }
        found
    })
}

/// `dl_iterate_phdr`'s callback: the first object is the program itself;
/// its loaded segments without write permission go into `data`.
unsafe extern "C" fn first_object(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    let found = &mut *data.cast::<Segments>();
    let info = &*info;
    let page = page_size();
    for i in 0..usize::from(info.dlpi_phnum) {
        let ph = &*info.dlpi_phdr.add(i);
        let read_only = ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_W == 0;
        if !read_only || found.count == MAX {
            continue;
        }
        let start = usize::try_from(info.dlpi_addr + ph.p_vaddr).unwrap_or(0);
        let end = start.saturating_add(usize::try_from(ph.p_memsz).unwrap_or(0));
        // Whole pages inside the segment only: a page it shares with a
        // writable neighbour may hold that one's private copies.
        let (start, end) = (start.next_multiple_of(page), end - end % page);
        if start != 0 && end > start {
            found.at[found.count] = (start, end - start);
            found.count += 1;
        }
    }
    1 // the program only: stop after it
}

fn page_size() -> usize {
    // SAFETY: a query.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

impl Segments {
    /// Drop this process's mappings of the segments' pages: they fault
    /// back in from the page cache when touched again.
    ///
    /// # Safety
    /// Only system calls: usable in the keeper (see keeper.rs). The
    /// segments are our binary's read-only mappings, so no data is lost.
    pub unsafe fn drop_pages(&self) {
        for &(at, len) in &self.at[..self.count] {
            libc::madvise(at as *mut c_void, len, libc::MADV_DONTNEED);
        }
    }
}

/// redlock-run, between refreshes while COMMAND runs on: keep mapped
/// none of the binary's pages until the next refresh touches them again.
pub fn trim() {
    // SAFETY: our own read-only segments (see `drop_pages`).
    unsafe { segments().drop_pages() };
}

/// In the keeper, once COMMAND runs: drop every private anonymous mapping
/// (redlock-run's heap, its threads' stacks, the stack COMMAND's child
/// ran on before its exec) but the ones holding `keep` (our stack, our
/// thread's own data): the keeper allocates nothing and reads none of
/// them again. Read from `/proc/self/maps` into a buffer on the stack.
///
/// # Safety
/// Only in the keeper (see keeper.rs), after COMMAND's exec, when
/// nothing but the mappings holding `keep` is read again.
pub unsafe fn drop_anonymous(keep: [usize; 2]) {
    let fd = libc::open(
        c"/proc/self/maps".as_ptr(),
        libc::O_RDONLY | libc::O_CLOEXEC,
    );
    if fd < 0 {
        return;
    }
    let mut line = [0u8; 160];
    let mut have = 0;
    let mut buf = [0u8; 1024];
    loop {
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        if n <= 0 {
            break;
        }
        for &b in &buf[..usize::try_from(n).unwrap_or(0)] {
            if b != b'\n' {
                // Only the fields up to the inode matter: a long path is cut.
                if have < line.len() {
                    line[have] = b;
                    have += 1;
                }
                continue;
            }
            if let Some((at, end)) = anonymous(&line[..have]) {
                if !keep.iter().any(|&k| (at..end).contains(&k)) {
                    libc::madvise(at as *mut c_void, end - at, libc::MADV_DONTNEED);
                }
            }
            have = 0;
        }
    }
    libc::close(fd);
}

/// A `/proc/self/maps` line's range if it is a private, writable,
/// anonymous mapping (no file, no name such as `[stack]` or `[vdso]`).
fn anonymous(line: &[u8]) -> Option<(usize, usize)> {
    let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let range = fields.next()?;
    let perms = fields.next()?;
    let _offset = fields.next()?;
    let _device = fields.next()?;
    let inode = fields.next()?;
    if perms != b"rw-p" || inode != b"0" || fields.next().is_some() {
        return None;
    }
    let dash = range.iter().position(|&b| b == b'-')?;
    Some((hex(&range[..dash])?, hex(&range[dash + 1..])?))
}

fn hex(digits: &[u8]) -> Option<usize> {
    digits.iter().try_fold(0usize, |n, &d| {
        let v = (d as char).to_digit(16)?;
        n.checked_mul(16)?.checked_add(v as usize)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_anonymous_mappings_only() {
        let anon = b"7f9b333e0000-7f9b33400000 rw-p 00000000 00:00 0 ";
        assert_eq!(anonymous(anon), Some((0x7f9b333e0000, 0x7f9b33400000)));
        let cases: [&[u8]; 4] = [
            b"7fff564b2000-7fff564d3000 rw-p 00000000 00:00 0                          [stack]",
            b"7f9b336e8000-7f9b336f9000 rw-p 002e7000 fe:00 6007060                    /bin/x",
            b"7f9b3339d000-7f9b3339f000 ---p 00000000 00:00 0 ",
            b"7f9b33717000-7f9b33719000 r-xp 00000000 00:00 0                          [vdso]",
        ];
        for line in cases {
            assert_eq!(anonymous(line), None, "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn finds_the_code_segment() {
        let s = segments();
        let code = segments as *const () as usize;
        assert!(s.count >= 1);
        assert!(s.at[..s.count]
            .iter()
            .any(|&(at, len)| (at..at + len).contains(&code)));
    }
}
